/*
 * request.c - idempotent requests. A control request carries a client-chosen request ID; its
 * record is written in the same transaction as the transition and audit row it produced, so a
 * repeat (duplicate delivery, a retry after a lost response) replays the original outcome
 * instead of acting twice. Reusing an ID for a different request is refused. Records are
 * pruned after a retention period.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

bf_err bf__request_begin(bf_engine *e, const char *action, const char *id, const bf_actor *who,
                         bf_action_result *out, bf_request_status *status)
{
    *status = BF_REQUEST_NONE;
    if (who == NULL || who->request_id == NULL)
        return BF_OK;
    const char *params[] = {who->request_id, action, id};
    PGresult *r = NULL;
    /* ON CONFLICT waits for a concurrent inserter of the same ID to commit or roll back */
    bf_err err = bf__exec(e, &r, "record request",
                          "INSERT INTO buzz_backfill.request (request_id, action, backfill_id)"
                          " VALUES ($1, $2, $3) ON CONFLICT (request_id) DO NOTHING RETURNING 1",
                          3, params);
    if (err != BF_OK)
        return err;
    int inserted = PQntuples(r);
    PQclear(r);
    if (inserted == 1) {
        *status = BF_REQUEST_NEW;
        return BF_OK;
    }
    err = bf__exec(e, &r, "read request",
                   "SELECT action, backfill_id, err, changed, prior_state, result_state,"
                   " generation, validation_outcome, detail"
                   " FROM buzz_backfill.request WHERE request_id = $1",
                   1, params);
    if (err != BF_OK)
        return err;
    if (PQntuples(r) == 0) { /* pruned between the two statements: treat as new next time */
        PQclear(r);
        return bf__diag(e, BF_ERR_RETRYABLE, "request record changed concurrently");
    }
    if (strcmp(bf__field(r, 0, 0), action) != 0 || strcmp(bf__field(r, 0, 1), id) != 0) {
        *status = BF_REQUEST_MISMATCH;
    } else if (bf__isnull(r, 0, 2)) {
        *status = BF_REQUEST_IN_PROGRESS;
    } else {
        *status = BF_REQUEST_REPLAY;
        out->replayed = true;
        out->err = (bf_err)bf__field_i64(r, 0, 2);
        out->changed = bf__field_bool(r, 0, 3);
        bf_state st;
        if (bf_state_parse(bf__field(r, 0, 4), &st) == BF_OK)
            out->prior = st;
        if (bf_state_parse(bf__field(r, 0, 5), &st) == BF_OK)
            out->result = st;
        out->generation = bf__field_i64(r, 0, 6);
        const char *v = bf__field(r, 0, 7);
        out->validation = strcmp(v, "success") == 0         ? BF_VALIDATION_SUCCESS
                          : strcmp(v, "failure") == 0       ? BF_VALIDATION_FAILURE
                          : strcmp(v, "current-state") == 0 ? BF_VALIDATION_CURRENT_STATE
                                                            : BF_VALIDATION_NONE;
        bf__copy(out->detail, sizeof out->detail, bf__field(r, 0, 8));
    }
    PQclear(r);
    return BF_OK;
}

bf_err bf__request_finish(bf_engine *e, const bf_actor *who, const bf_action_result *res)
{
    if (who == NULL || who->request_id == NULL)
        return BF_OK;
    char err[16], gen[24];
    bf__format(err, sizeof err, "%d", (int)res->err);
    bf__format(gen, sizeof gen, "%lld", (long long)res->generation);
    const char *params[] = {
        who->request_id,
        err,
        res->changed ? "true" : "false",
        res->prior ? bf_state_name(res->prior) : NULL,
        res->result ? bf_state_name(res->result) : NULL,
        res->prior ? gen : NULL,
        res->validation ? bf_validation_outcome_name(res->validation) : NULL,
        res->detail,
    };
    return bf__exec0(e, "finish request",
                     "UPDATE buzz_backfill.request SET err = $2::integer, changed = $3::boolean,"
                     " prior_state = $4, result_state = $5, generation = $6::bigint,"
                     " validation_outcome = $7, detail = $8 WHERE request_id = $1",
                     8, params);
}

bf_err bf_request_prune(bf_engine *e, int retention_s, long *deleted_out)
{
    if (e == NULL || retention_s < 1)
        return BF_ERR_INVALID_ARGUMENT;
    bf_err err = bf__ensure_conn(e);
    if (err != BF_OK)
        return err;
    char secs[16];
    bf__format(secs, sizeof secs, "%d", retention_s);
    const char *params[] = {secs};
    PGresult *r = NULL;
    /* records still in progress (err NULL) are kept: a validation may be running */
    err = bf__exec(e, &r, "prune requests",
                   "DELETE FROM buzz_backfill.request WHERE err IS NOT NULL"
                   " AND created_at < clock_timestamp() - $1::integer * interval '1 second'",
                   1, params);
    if (err != BF_OK)
        return err;
    if (deleted_out != NULL)
        *deleted_out = strtol(PQcmdTuples(r), NULL, 10);
    PQclear(r);
    return BF_OK;
}
