/*
 * actions.c - operator actions: start, pause, resume, retry, exactly as the spec's state table.
 *
 * Design notes: each action is one transaction that locks the row (FOR UPDATE), decides from
 * the state table below, applies the transition, writes the audit row and the request record,
 * and commits them together; a rejected attempt is audited the same way. Every accepted
 * transition advances the generation, so work started under an earlier generation can never
 * commit after it. Start captures the upper bound in the transaction that enters running.
 * There is deliberately no reset, rewind, bound change, deletion or force completion.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

typedef enum plan_kind { PLAN_CONFLICT, PLAN_CONVERGED, PLAN_CHANGE } plan_kind;

static plan_kind action_plan(bf_action action, bf_state state)
{
    switch (action) {
    case BF_ACTION_START:
        return state == BF_STATE_PENDING ? PLAN_CHANGE : PLAN_CONFLICT;
    case BF_ACTION_PAUSE:
        if (state == BF_STATE_RUNNING || state == BF_STATE_VALIDATING)
            return PLAN_CHANGE;
        return state == BF_STATE_PAUSED ? PLAN_CONVERGED : PLAN_CONFLICT;
    case BF_ACTION_RESUME:
        if (state == BF_STATE_PAUSED)
            return PLAN_CHANGE;
        return state == BF_STATE_RUNNING || state == BF_STATE_VALIDATING ? PLAN_CONVERGED
                                                                         : PLAN_CONFLICT;
    case BF_ACTION_RETRY:
        if (state == BF_STATE_BLOCKED || state == BF_STATE_FAILED)
            return PLAN_CHANGE;
        return state == BF_STATE_RUNNING || state == BF_STATE_VALIDATING ? PLAN_CONVERGED
                                                                         : PLAN_CONFLICT;
    case BF_ACTION_VALIDATE:
        break;
    }
    return PLAN_CONFLICT;
}

/* The transition's new state and generation, and the notification that wakes idle workers and
 * readiness waiters on commit (they re-read before acting); sent with the transition, not by a
 * statement of its own: one round trip less for every accepted action. */
#define RETURNING_NOTIFY " RETURNING state, generation, pg_notify('buzz_backfill', id)"

/* resume and retry enter validating when no admitted work remains */
#define AFTER_BOUND_STATE                                                                          \
    "state = CASE WHEN bound_empty OR checkpoint = bound THEN 'validating' ELSE 'running' END"

static const char *const transition_sql[] = {
    [BF_ACTION_PAUSE] = "UPDATE buzz_backfill.backfill SET state = 'paused',"
                        " generation = generation + 1, claim_owner = NULL,"
                        " claim_expires_at = NULL, claimed_at = NULL,"
                        " updated_at = clock_timestamp() WHERE id = $1" RETURNING_NOTIFY,
    [BF_ACTION_RESUME] = "UPDATE buzz_backfill.backfill SET " AFTER_BOUND_STATE ","
                         " generation = generation + 1, next_attempt_at = NULL,"
                         " updated_at = clock_timestamp() WHERE id = $1" RETURNING_NOTIFY,
    [BF_ACTION_RETRY] = "UPDATE buzz_backfill.backfill SET " AFTER_BOUND_STATE ","
                        " generation = generation + 1, attempts = 0, next_attempt_at = NULL,"
                        " error_class = NULL, error_detail = NULL, error_at = NULL,"
                        " updated_at = clock_timestamp() WHERE id = $1" RETURNING_NOTIFY,
};

/* Capture the bound and enter running, in the caller's transaction; row and digest: the row
 * as read under its lock in this transaction (bf__lock_row: they cannot change meanwhile). */
static bf_err action_start(bf_engine *e, const char *id, const bf_backfill *row, const char *digest,
                           PGresult **res, char *detail, size_t cap)
{
    const bf_compiled *c = bf__registry_compiled(e->reg, id, NULL);
    if (c == NULL)
        return bf__diag(e, BF_ERR_UNKNOWN_DEFINITION, "this process has no definition for %s", id);
    if (strcmp(row->key_types, c->key_types) != 0)
        return bf__diag(e, BF_ERR_INCOMPATIBLE, "stored key types differ from the definition's");
    if (digest[0] != '\0' && strcmp(digest, c->digest) != 0)
        return bf__diag(e, BF_ERR_INCOMPATIBLE,
                        "registered by a materially different definition: a changed definition"
                        " needs a new stable ID");
    /* the preflight captures the bound and fails closed on a key that could skip or repeat
     * tied rows, on key columns of another type, and on batches that would not be bounded work
     * (preflight.c) */
    char bound[BF_KEY_TEXT_MAX] = "";
    bool empty = true;
    PGresult *r = NULL;
    bf_err err;
    if ((err = bf__preflight(e, c, bound, &empty, NULL, 0)) != BF_OK)
        return err;
    char estimate[24] = "";
    if ((err = bf__exec(e, &r, "estimate source size", c->sql_estimate, 0, NULL)) != BF_OK)
        return err;
    bool has_estimate = PQntuples(r) == 1 && !bf__isnull(r, 0, 0);
    if (has_estimate)
        bf__copy(estimate, sizeof estimate, bf__field(r, 0, 0));
    PQclear(r);
    const char *params[] = {id, empty ? NULL : bound, empty ? "true" : "false",
                            has_estimate ? estimate : NULL};
    err = bf__exec(e, res, "start",
                   "UPDATE buzz_backfill.backfill SET state = 'running', bound = $2::text[],"
                   " bound_empty = $3::boolean, source_estimate = $4::bigint,"
                   " started_at = clock_timestamp(), generation = generation + 1, attempts = 0,"
                   " next_attempt_at = NULL, updated_at = clock_timestamp()"
                   " WHERE id = $1 AND state = 'pending'" RETURNING_NOTIFY,
                   4, params);
    /* the old-writer watch (watch.c) starts with the backfill, in its transaction */
    if (err == BF_OK && PQntuples(*res) == 1 && (err = bf__watch_install(e, c)) != BF_OK) {
        PQclear(*res);
        *res = NULL;
    }
    if (err == BF_OK)
        bf__format(detail, cap, "%s", empty ? "empty source set" : "bound captured");
    return err;
}

/* The transition itself, in the caller's transaction, with the row already locked (digest:
 * its stored definition digest, for Start). */
static bf_err action_change(bf_engine *e, bf_action action, const char *id, const char *digest,
                            bf_action_result *out)
{
    PGresult *r = NULL;
    char detail[64] = "";
    bf_err err;
    if (action == BF_ACTION_START) {
        err = action_start(e, id, &out->row, digest, &r, detail, sizeof detail);
    } else {
        const char *params[] = {id};
        err = bf__exec(e, &r, bf_action_name(action), transition_sql[action], 1, params);
    }
    if (err != BF_OK)
        return err;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return bf__diag(e, BF_ERR_INTERNAL, "transition matched no row");
    }
    bf_state st = 0;
    (void)bf_state_parse(bf__field(r, 0, 0), &st);
    out->result = st;
    out->generation = bf__field_i64(r, 0, 1);
    out->changed = true;
    PQclear(r);
    bf__format(out->detail, sizeof out->detail, "accepted: %s -> %s%s%s", bf_state_name(out->prior),
               bf_state_name(out->result), detail[0] ? ", " : "", detail);
    return BF_OK;
}

static void result_reset(bf_action_result *out)
{
    memset(out, 0, sizeof *out);
}

/* Audit a rejection in a transaction of its own (after the action's was rolled back). */
static void audit_rejection_after_rollback(bf_engine *e, bf_action action, const char *id,
                                           const bf_actor *who, bf_err err)
{
    char outcome[BF_DIAG_MAX];
    bf__copy(outcome, sizeof outcome, e->diag);
    if (bf_audit_rejection(e, bf_action_name(action), id, who, err, outcome) != BF_OK)
        bf__log(e, BF_LOG_ERROR, "could not audit rejected %s of %s", bf_action_name(action),
                bf_id_valid(id) ? id : "(invalid id)");
    bf__copy(e->diag, sizeof e->diag, outcome);
}

/* action.applied (the request changed the row) or action.rejected; reason is the action's
 * name, the bounded vocabulary of the operator actions. */
static void action_event(bf_engine *e, bf_event event, bf_action action, const char *id,
                         const bf_action_result *out, const char *detail)
{
    bf_log_record rec = BF_LOG_RECORD_INIT;
    rec.level = BF_LOG_INFO;
    rec.event = event;
    rec.id = bf_id_valid(id) ? id : NULL;
    rec.generation = out != NULL && out->prior != 0 ? out->generation : -1;
    rec.checkpoint = out != NULL && out->row.has_checkpoint ? out->row.checkpoint : NULL;
    rec.batch_size = out != NULL && out->prior != 0 ? out->row.batch_size : -1;
    rec.reason = bf_action_name(action);
    bf__log_event(e, &rec, "%s of %s: %s", bf_action_name(action),
                  bf_id_valid(id) ? id : "(invalid id)", detail);
}

static bool request_id_valid(const bf_actor *who)
{
    if (who == NULL || who->request_id == NULL)
        return true;
    size_t n = strlen(who->request_id);
    return n >= 1 && n < BF_REQUEST_ID_MAX;
}

bf_err bf_action_apply(bf_engine *e, bf_action action, const char *id, const bf_actor *who,
                       bf_action_result *out)
{
    if (e == NULL || out == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    result_reset(out);
    if (action < BF_ACTION_START || action > BF_ACTION_RETRY)
        return out->err = BF_ERR_INVALID_ARGUMENT;
    bf_err err = bf__ensure_conn(e);
    if (err != BF_OK)
        return out->err = err;
    if (!bf_id_valid(id) || !request_id_valid(who)) {
        bf__diag(e, BF_ERR_INVALID_ARGUMENT, "invalid stable id or request id");
        audit_rejection_after_rollback(e, action, id, who, BF_ERR_INVALID_ARGUMENT);
        action_event(e, BF_EV_ACTION_REJECTED, action, id, NULL, e->diag);
        return out->err = BF_ERR_INVALID_ARGUMENT;
    }
    const char *name = bf_action_name(action);
    if ((err = bf__begin(e, false)) != BF_OK)
        return out->err = err;
    bf_request_status rs;
    err = bf__request_begin(e, name, id, who, out, &rs);
    if (err == BF_OK && rs == BF_REQUEST_MISMATCH) {
        bf__rollback(e);
        bf__diag(e, BF_ERR_INVALID_ARGUMENT, "request id was used for a different request");
        audit_rejection_after_rollback(e, action, id, who, BF_ERR_INVALID_ARGUMENT);
        action_event(e, BF_EV_ACTION_REJECTED, action, id, NULL, e->diag);
        return out->err = BF_ERR_INVALID_ARGUMENT;
    }
    if (err == BF_OK && rs == BF_REQUEST_REPLAY) {
        /* the original outcome stands; report the converged current state beside it */
        bf_err stored = out->err;
        char outcome[BF_DIAG_MAX];
        bf__format(outcome, sizeof outcome, "replayed: %s", out->detail);
        bf_audit_record rec = {
            id, name, who, out->prior, out->result, out->prior != 0, out->generation, outcome};
        err = bf__get_row(e, id, false, &out->row);
        if (err == BF_ERR_NOT_FOUND)
            err = BF_OK;
        if (err == BF_OK)
            err = bf__audit(e, &rec);
        if (err == BF_OK)
            err = bf__commit(e);
        if (err != BF_OK) {
            bf__rollback(e);
            return out->err = err;
        }
        bf__copy(e->diag, sizeof e->diag, out->detail);
        return out->err = stored;
    }
    if (err == BF_OK) {
        char digest[BF_DIGEST_HEX];
        err = bf__lock_row(e, id, &out->row, digest);
        if (err == BF_OK) {
            out->prior = out->row.state;
            out->result = out->row.state;
            out->generation = out->row.generation;
            plan_kind plan = action_plan(action, out->prior);
            if (plan == PLAN_CHANGE) {
                err = action_change(e, action, id, digest, out);
                if (err == BF_OK)
                    err = bf__get_row(e, id, false, &out->row);
            } else if (plan == PLAN_CONVERGED) {
                bf__format(out->detail, sizeof out->detail, "converged: already %s",
                           bf_state_name(out->prior));
            } else {
                out->err = BF_ERR_CONFLICT;
                bf__format(out->detail, sizeof out->detail, "rejected: cannot %s a %s backfill",
                           name, bf_state_name(out->prior));
            }
        } else if (err == BF_ERR_NOT_FOUND && bf__registry_compiled(e->reg, id, NULL) != NULL) {
            /* this process defines it but has not registered it yet (a daemon between its
             * socket and its registration): retryable, and the request is not recorded, so
             * the same request succeeds once the row exists */
            err = bf__diag(e, BF_ERR_UNAVAILABLE, "%s is not registered yet: retry shortly", id);
        } else if (err == BF_ERR_NOT_FOUND) {
            out->err = BF_ERR_NOT_FOUND;
            bf__format(out->detail, sizeof out->detail, "rejected: backfill not found");
            err = BF_OK;
        }
    }
    if (err == BF_OK) {
        bf_audit_record rec = {
            id, name, who, out->prior, out->result, out->prior != 0, out->generation, out->detail};
        err = bf__audit(e, &rec);
    }
    if (err == BF_OK)
        err = bf__request_finish(e, who, out);
    if (err == BF_OK)
        err = bf__commit(e);
    if (err != BF_OK) {
        bf__rollback(e);
        audit_rejection_after_rollback(e, action, id, who, err);
        bf_backfill keep = out->row;
        result_reset(out);
        out->row = keep;
        bf__copy(out->detail, sizeof out->detail, e->diag);
        return out->err = err;
    }
    bf__copy(e->diag, sizeof e->diag, out->detail);
    if (out->err != BF_OK)
        action_event(e, BF_EV_ACTION_REJECTED, action, id, out, out->detail);
    else if (out->changed)
        action_event(e, BF_EV_ACTION_APPLIED, action, id, out, out->detail);
    return out->err;
}

bf_err bf_start_required(bf_engine *e, const bf_actor *who, int *started_out)
{
    if (e == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    bf_err err = bf__ensure_conn(e);
    if (err != BF_OK)
        return err;
    /* one request ID cannot name several starts: automatic starts are not idempotent requests,
     * they converge through the state table instead */
    bf_actor auto_who = {who ? who->actor : NULL, who ? who->authority : "automatic", NULL};
    /* the pending rows among the registry's required IDs, in the registry's order: one read,
     * not one per required definition (a restart of a daemon with many finds none) */
    const char *params[] = {bf__registry_ids(e->reg, true)};
    PGresult *r = NULL;
    err = bf__exec(e, &r, "read pending required",
                   "SELECT b.id FROM unnest($1::text[]) WITH ORDINALITY AS r(id, n)"
                   " JOIN buzz_backfill.backfill b ON b.id = r.id"
                   " WHERE b.state = 'pending' ORDER BY r.n",
                   1, params);
    if (err != BF_OK)
        return err;
    int started = 0;
    for (int i = 0; i < PQntuples(r) && err == BF_OK; i++) {
        bf_action_result res;
        err = bf_action_apply(e, BF_ACTION_START, bf__field(r, i, 0), &auto_who, &res);
        /* a concurrent starter winning the race is convergence, not failure */
        if (err == BF_ERR_CONFLICT)
            err = BF_OK;
        else if (err == BF_OK)
            started += res.changed ? 1 : 0;
    }
    PQclear(r);
    if (err == BF_OK && started_out != NULL)
        *started_out = started;
    return err;
}
