/*
 * watch_report.c - what the old-writer watchdog saw (watch.c): the counts by writer read into a
 * backfill's row and reported once per writer (log, audit, the answer validation gives), and
 * the preflight's probe, a watch installed for a while under a key of its own before a start.
 * Only the writer's identity is ever read back (application_name, client address, role), never
 * a key or value of a row.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strbuf.h"
#include "watch_impl.h"

/* ---- what it saw ------------------------------------------------------------------------- */

/* "14:02:05" of microseconds since the epoch, UTC */
static void watch_clock(char *buf, size_t cap, int64_t us)
{
    time_t t = (time_t)(us / 1000000);
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL)
        bf__copy(buf, cap, "?");
    else
        bf__format(buf, cap, "%02d:%02d:%02d", tm.tm_hour, tm.tm_min, tm.tm_sec);
}

void bf__old_writer_counts_from_result(const PGresult *r, int row, int col, bf_old_writers *out)
{
    int c = col;
    out->rows = bf__field_i64(r, row, c++);
    out->healed = bf__field_i64(r, row, c++);
    out->writers = bf__field_i64(r, row, c++);
    out->first_seen = bf__field_i64(r, row, c++);
    out->last_seen = bf__field_i64(r, row, c++);
    bf__audit_text(out->application, sizeof out->application, bf__field(r, row, c++));
    bf__audit_text(out->address, sizeof out->address, bf__field(r, row, c++));
    bf__audit_text(out->role, sizeof out->role, bf__field(r, row, c++));
    out->top_rows = bf__field_i64(r, row, c++);
    out->top_first_seen = bf__field_i64(r, row, c++);
    out->top_last_seen = bf__field_i64(r, row, c++);
}

/* "old writer: 37 rows since 14:02:05 from application relay-1.3 at 10.0.0.7 (role relay), last
 * 14:05:10" of one writer, texts already sanitised */
static void watch_describe(char *buf, size_t cap, int64_t rows, int64_t first, int64_t last,
                           const char *app, const char *addr, const char *role)
{
    char f[16], l[16];
    watch_clock(f, sizeof f, first);
    watch_clock(l, sizeof l, last);
    bf__format(buf, cap,
               "old writer: %lld row%s since %s UTC from application %s%s%s at %s (role %s),"
               " last %s",
               (long long)rows, rows == 1 ? "" : "s", f, app[0] ? "\"" : "",
               app[0] ? app : "(none)", app[0] ? "\"" : "", addr[0] ? addr : "(other)",
               role[0] ? role : "(other)", l);
}

/* watch_describe of row i of a result of (application_name, client_addr, role_name, rows,
 * first_seen, last_seen) */
static void watch_describe_row(char *buf, size_t cap, const PGresult *r, int i)
{
    char app[BF_WRITER_TEXT_MAX], addr[BF_WRITER_TEXT_MAX], role[BF_WRITER_TEXT_MAX];
    bf__audit_text(app, sizeof app, bf__field(r, i, 0));
    bf__audit_text(addr, sizeof addr, bf__field(r, i, 1));
    bf__audit_text(role, sizeof role, bf__field(r, i, 2));
    watch_describe(buf, cap, bf__field_i64(r, i, 3), bf__field_i64(r, i, 4), bf__field_i64(r, i, 5),
                   app, addr, role);
}

bf_err bf__watch_report(bf_engine *e, const char *id, int64_t *rows_out, bool *unanswered_out,
                        char *diag, size_t cap)
{
    diag[0] = '\0';
    bf_err err = bf__ensure_conn(e);
    if (err == BF_OK)
        err = bf__begin(e, false);
    if (err != BF_OK)
        return err;
    const char *params[] = {id};
    PGresult *r = NULL;
    /* writers not reported yet: one log record and one audit row each, once (the UPDATE marks
     * them in the same transaction as the audit rows) */
    /* a writer is its identity over all its sessions: the outer query reads the snapshot
     * before the UPDATE, so an identity one of whose sessions was reported earlier is not new */
    err = bf__exec(e, &r, "new old writers",
                   "WITH n AS (UPDATE buzz_backfill.old_writer SET reported = true"
                   " WHERE backfill_id = $1 AND NOT reported RETURNING application_name,"
                   " client_addr, role_name)"
                   " SELECT o.application_name, o.client_addr, o.role_name, sum(o.rows)::bigint,"
                   " (extract(epoch FROM min(o.first_seen)) * 1000000)::bigint,"
                   " (extract(epoch FROM max(o.last_seen)) * 1000000)::bigint"
                   " FROM buzz_backfill.old_writer o"
                   " WHERE o.backfill_id = $1 AND (o.application_name, o.client_addr, o.role_name)"
                   "  IN (SELECT * FROM n)"
                   " GROUP BY 1, 2, 3 HAVING NOT bool_or(o.reported)",
                   1, params);
    int n = err == BF_OK ? PQntuples(r) : 0;
    for (int i = 0; err == BF_OK && i < n; i++) {
        char what[BF_DIAG_MAX];
        watch_describe_row(what, sizeof what, r, i);
        bf_audit_record rec = {.backfill_id = id,
                               .action = "old_writer",
                               .who = &(bf_actor){.actor = e->owner, .authority = "engine"},
                               .outcome = what};
        err = bf__audit(e, &rec);
    }
    if (err == BF_OK)
        err = bf__commit(e);
    if (err != BF_OK) {
        PQclear(r);
        bf__rollback(e);
        return err;
    }
    for (int i = 0; i < n; i++) {
        char what[BF_DIAG_MAX];
        watch_describe_row(what, sizeof what, r, i);
        bf_log_record rec = BF_LOG_RECORD_INIT;
        rec.level = BF_LOG_WARN;
        rec.event = BF_EV_OLD_WRITER;
        rec.id = id;
        rec.rows = (long)bf__field_i64(r, i, 3);
        rec.reason = "old_writer";
        bf__log_event(e, &rec,
                      "%s: %s; drain that writer, then start a new repair under a new"
                      " stable ID",
                      id, what);
    }
    PQclear(r);
    err = bf__exec(e, &r, "old writers",
                   "SELECT coalesce(sum(o.rows), 0)::bigint,"
                   " count(DISTINCT (o.application_name, o.client_addr, o.role_name)),"
                   " coalesce(bool_or(o.last_seen > coalesce(w.blocked_through, '-infinity')),"
                   "  false)"
                   " FROM buzz_backfill.old_writer o"
                   " LEFT JOIN buzz_backfill.watch w ON w.backfill_id = o.backfill_id"
                   " WHERE o.backfill_id = $1",
                   1, params);
    if (err != BF_OK)
        return err;
    int64_t rows = bf__field_i64(r, 0, 0);
    int64_t writers = bf__field_i64(r, 0, 1);
    bool unanswered = bf__field_bool(r, 0, 2);
    PQclear(r);
    if (rows > 0) {
        err = bf__exec(e, &r, "top old writer",
                       "SELECT application_name, client_addr, role_name, sum(rows)::bigint,"
                       " (extract(epoch FROM min(first_seen)) * 1000000)::bigint,"
                       " (extract(epoch FROM max(last_seen)) * 1000000)::bigint"
                       " FROM buzz_backfill.old_writer WHERE backfill_id = $1"
                       " GROUP BY 1, 2, 3 ORDER BY 4 DESC, 5 LIMIT 1",
                       1, params);
        if (err != BF_OK)
            return err;
        char what[BF_DIAG_MAX];
        watch_describe_row(what, sizeof what, r, 0);
        PQclear(r);
        char more[48] = "";
        if (writers > 1)
            bf__format(more, sizeof more, " (%lld writers, %lld rows in all)", (long long)writers,
                       (long long)rows);
        bf__format(diag, cap,
                   "%s%s; drain that writer, then start a new repair under a new stable ID", what,
                   more);
    }
    *rows_out = rows;
    *unanswered_out = unanswered;
    return BF_OK;
}

bf_err bf__watch_answered(bf_engine *e, const char *id)
{
    const char *params[] = {id};
    return bf__exec0(e, "answer old writers",
                     "UPDATE buzz_backfill.watch w SET blocked_through = (SELECT max(last_seen)"
                     " FROM buzz_backfill.old_writer o WHERE o.backfill_id = $1)"
                     " WHERE w.backfill_id = $1",
                     1, params);
}

/* ---- the preflight's probe ------------------------------------------------------------- */

#define PROBE_KEY_MAX (BF_ID_MAX + 8)

static void probe_key(char *key, const char *id)
{
    bf__format(key, PROBE_KEY_MAX, "probe:%s", id);
}

bf_err bf_watch_probe_start(bf_engine *e, const char *id)
{
    if (e == NULL || !bf_id_valid(id))
        return BF_ERR_INVALID_ARGUMENT;
    const bf_compiled *c = bf__registry_compiled(e->reg, id, NULL);
    if (c == NULL)
        return bf__diag(e, BF_ERR_UNKNOWN_DEFINITION, "this process has no definition for %s", id);
    const bf_definition *d = c->def;
    bool has_post = d->postcondition != NULL && d->postcondition[0] != '\0';
    bool has_needs = d->mutate == NULL && d->needs_repair != NULL && d->needs_repair[0] != '\0';
    if (!has_post && !has_needs)
        return bf__diag(e, BF_ERR_DEFINITION,
                        "cannot watch %s for old writers: it declares no postcondition", id);
    char key[PROBE_KEY_MAX];
    probe_key(key, id);
    bf_err err = bf__ensure_conn(e);
    if (err == BF_OK)
        err = bf__begin(e, false);
    if (err != BF_OK)
        return err;
    const char *params[] = {key};
    bool was = false;
    /* an earlier probe's leftovers (a probe that died): its trigger and counts go first */
    err = bf__watch_drop(e, key, &was);
    if (err == BF_OK)
        err = bf__exec0(e, "clear probe",
                        "DELETE FROM buzz_backfill.old_writer WHERE backfill_id = $1;", 1, params);
    if (err == BF_OK)
        err = bf__watch_install_key(e, d, BF_WATCH_ON, key);
    if (err == BF_OK)
        err = bf__commit(e);
    if (err != BF_OK)
        bf__rollback(e);
    return err;
}

bf_err bf_watch_probe_finish(bf_engine *e, const char *id, bf_old_writers *out, char *report,
                             size_t cap)
{
    if (e == NULL || out == NULL || !bf_id_valid(id) || report == NULL || cap == 0)
        return BF_ERR_INVALID_ARGUMENT;
    char key[PROBE_KEY_MAX];
    probe_key(key, id);
    bf_err err = bf__ensure_conn(e);
    if (err == BF_OK)
        err = bf__begin(e, false);
    if (err != BF_OK)
        return err;
    bool was = false;
    err = bf__watch_drop(e, key, &was); /* first: no row counts after the answer is read */
    const char *params[] = {key};
    PGresult *r = NULL;
    if (err == BF_OK)
        err =
            bf__exec(e, &r, "probe counts",
                     "WITH gone AS (DELETE FROM buzz_backfill.old_writer WHERE backfill_id = $1"
                     " RETURNING *), top AS (SELECT application_name, client_addr, role_name,"
                     " sum(rows)::bigint AS rows, min(first_seen) AS first_seen,"
                     " max(last_seen) AS last_seen FROM gone GROUP BY 1, 2, 3"
                     " ORDER BY 4 DESC, 5 LIMIT 1)"
                     " SELECT coalesce((SELECT sum(rows) FROM gone), 0)::bigint, 0,"
                     " (SELECT count(DISTINCT (application_name, client_addr, role_name))"
                     "  FROM gone),"
                     " (extract(epoch FROM (SELECT min(first_seen) FROM gone)) * 1000000)::bigint,"
                     " (extract(epoch FROM (SELECT max(last_seen) FROM gone)) * 1000000)::bigint,"
                     " t.application_name, t.client_addr, t.role_name, t.rows,"
                     " (extract(epoch FROM t.first_seen) * 1000000)::bigint,"
                     " (extract(epoch FROM t.last_seen) * 1000000)::bigint"
                     " FROM (SELECT 1) one LEFT JOIN top t ON true",
                     1, params);
    if (err == BF_OK)
        err = bf__commit(e);
    if (err != BF_OK) {
        PQclear(r);
        bf__rollback(e);
        return err;
    }
    bf_old_writers ow;
    memset(&ow, 0, sizeof ow); /* not watching: the probe's watch is gone */
    bf__old_writer_counts_from_result(r, 0, 0, &ow);
    PQclear(r);
    if (ow.rows == 0) {
        bf__format(report, cap, "no old writer: no row written that breaks the postcondition");
    } else {
        char what[BF_DIAG_MAX];
        watch_describe(what, sizeof what, ow.top_rows, ow.top_first_seen, ow.top_last_seen,
                       ow.application, ow.address, ow.role);
        char more[48] = "";
        if (ow.writers > 1)
            bf__format(more, sizeof more, " (%lld writers, %lld rows in all)",
                       (long long)ow.writers, (long long)ow.rows);
        bf__format(report, cap, "%s%s; hold the start until that writer is drained", what, more);
    }
    *out = ow;
    return BF_OK;
}
