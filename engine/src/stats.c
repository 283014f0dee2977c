/*
 * stats.c - bf_stats_read(): the aggregate read behind the service's scrape-time metrics.
 *
 * Design notes: one prepared statement, one round trip. The backfill table is scanned once and
 * grouped by state (the states are few and fixed, so the answer is at most eight rows plus one
 * for required IDs without a row); the registry's required IDs come as one text[] parameter,
 * exactly as bf_gate() reads them, so the gating counts agree with Readiness. The age is taken
 * once per group from min(last_progress_at), not per row (clock_timestamp() and a numeric
 * extract per row cost more than the scan at 10,000 rows). Nothing but
 * counts, sums and a maximum age leaves the statement: no ID, checkpoint or row value.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const char stats_sql[] =
    "SELECT b.state, count(*),"
    "  count(*) FILTER (WHERE b.id = ANY($1::text[]) AND b.state <> 'completed'),"
    "  extract(epoch FROM clock_timestamp() - min(b.last_progress_at))::float8,"
    "  coalesce(sum(b.batches_committed), 0)::bigint, coalesce(sum(b.rows_committed), 0)::bigint"
    " FROM buzz_backfill.backfill b GROUP BY b.state"
    " UNION ALL"
    " SELECT NULL, 0, count(*), NULL, 0, 0 FROM unnest($1::text[]) AS r(id)"
    " WHERE NOT EXISTS (SELECT 1 FROM buzz_backfill.backfill x WHERE x.id = r.id)"
    " UNION ALL" /* the watchdog: writers and rows of backfills not completed, and watches */
    " SELECT 'watch', (SELECT count(*) FROM buzz_backfill.watch WHERE removed_at IS NULL),"
    "  count(DISTINCT (o.backfill_id, o.application_name, o.client_addr, o.role_name)), NULL,"
    "  coalesce(sum(o.rows), 0)::bigint, 0"
    " FROM buzz_backfill.old_writer o JOIN buzz_backfill.backfill b ON b.id = o.backfill_id"
    " WHERE b.state <> 'completed'";

bf_err bf_stats_read(bf_engine *e, bf_stats *out)
{
    if (e == NULL || out == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    bf_err err = bf__ensure_conn(e);
    if (err != BF_OK)
        return err;
    const char *params[] = {bf__registry_ids(e->reg, true)};
    PGresult *r = NULL;
    err = bf__exec_stmt(e, &r, "metrics statistics", BF_STMT_STATS, stats_sql, 1, params);
    if (err != BF_OK)
        return err;
    bf_stats s;
    memset(&s, 0, sizeof s);
    for (int i = 0; i < PQntuples(r); i++) {
        int slot = 0;
        if (strcmp(bf__field(r, i, 0), "watch") == 0) {
            s.watches = bf__field_i64(r, i, 1);
            s.old_writers = bf__field_i64(r, i, 2);
            s.old_writer_rows = bf__field_i64(r, i, 4);
            continue;
        }
        if (!bf__isnull(r, i, 0)) {
            bf_state st = 0;
            if (bf_state_parse(bf__field(r, i, 0), &st) != BF_OK || st <= 0 ||
                (int)st >= BF_STATE_SLOTS)
                continue; /* the schema's CHECK allows no other state */
            slot = (int)st;
        }
        s.backfills[slot] += bf__field_i64(r, i, 1);
        s.gating[slot] += bf__field_i64(r, i, 2);
        if (!bf__isnull(r, i, 3)) {
            double v = strtod(bf__field(r, i, 3), NULL);
            s.has_stall[slot] = true;
            s.stall_s[slot] = v > 0 ? v : 0;
        }
        s.batches_committed += bf__field_i64(r, i, 4);
        s.rows_committed += bf__field_i64(r, i, 5);
    }
    PQclear(r);
    *out = s;
    return BF_OK;
}
