/*
 * worker_fail.c - what the claim holder records (worker.c drives the steps): the fenced
 * lifecycle transitions (running to validating, validating to completed), each one statement
 * with its audit row, and a failed attempt's durable classification (retry after a backoff,
 * blocked, failed). Every statement is fenced on the claim (id, generation, owner); one that
 * matches nothing means the claim was lost to a pause or a takeover, and the step reports
 * that instead.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "strbuf.h"
#include "worker.h"

/* worker.h */
const char *bf__worker_reason(const bf_engine *e, bf_err err, char *buf)
{
    if (e->cancelled)
        return "stop";
    if (err == BF_ERR_STALE)
        return "fence";
    const char *cls = bf__sqlstate_class(e, buf);
    if (cls != NULL)
        return cls;
    return err == BF_ERR_TIMEOUT ? "timeout" : bf__error_class_name(err);
}

/* A fenced lifecycle transition by the claim holder plus its audit row, in one statement.
 * set may use $8 (detail) only when detail is not NULL. Returns BF_ERR_STALE when the fence
 * matched nothing. */
static bf_err worker_transition(bf_worker *w, const char *set, bf_state from, bf_state to,
                                const char *detail, const char *outcome)
{
    bf_engine *e = w->e;
    char gen[24];
    bf__param_int(gen, sizeof gen, w->generation);
    bf_strbuf sql;
    bf__strbuf_init(&sql);
    bf__strbuf_addf(
        &sql,
        "WITH u AS (UPDATE buzz_backfill.backfill SET state = $5, %s,"
        " updated_at = clock_timestamp()"
        " WHERE id = $1 AND generation = $2::bigint AND claim_owner = $3"
        " AND claim_expires_at > clock_timestamp() AND state = $4"
        " AND checkpoint IS NOT DISTINCT FROM $7::text[] RETURNING generation)"
        ", a AS (INSERT INTO buzz_backfill.audit (backfill_id, action, actor, authority,"
        " prior_state, result_state, generation, outcome)"
        " SELECT $1, 'worker', $3, 'engine', $4, $5, u.generation, $6 FROM u RETURNING 1)"
        " SELECT pg_notify('buzz_backfill', $1) FROM a",
        set);
    char *text = bf__strbuf_take(&sql);
    if (text == NULL)
        return bf__diag(e, BF_ERR_NOMEM, "out of memory");
    const char *params[] = {w->id,
                            gen,
                            e->owner,
                            bf_state_name(from),
                            bf_state_name(to),
                            outcome,
                            w->has_checkpoint ? w->checkpoint : NULL,
                            detail};
    PGresult *r = NULL;
    bf_err err = bf__exec(e, &r, "worker transition", text, detail ? 8 : 7, params);
    free(text);
    if (err != BF_OK)
        return err;
    int n = PQntuples(r);
    PQclear(r);
    if (n == 0) {
        bf__worker_drop_claim(w);
        return bf__diag(e, BF_ERR_STALE, "claim is no longer current");
    }
    w->state = to;
    return BF_OK;
}

bf_err bf__worker_enter_validating(bf_worker *w)
{
    bf_err err =
        worker_transition(w, "checkpoint = CASE WHEN bound_empty THEN checkpoint ELSE bound END",
                          BF_STATE_RUNNING, BF_STATE_VALIDATING, NULL, "reached the bound");
    if (err == BF_OK && !w->bound_empty) {
        bf__copy(w->checkpoint, sizeof w->checkpoint, w->bound);
        w->has_checkpoint = true;
    }
    return err;
}

bf_err bf__worker_complete(bf_worker *w, const char *detail)
{
    bf_err err =
        worker_transition(w,
                          "completed_at = clock_timestamp(), claim_owner = NULL,"
                          " claim_expires_at = NULL, claimed_at = NULL, error_class = NULL,"
                          " error_detail = NULL, error_at = NULL, attempts = 0,"
                          " next_attempt_at = NULL,"
                          " validation_outcome = 'success', validation_detail = $8,"
                          " validated_at = clock_timestamp(), validation_request = NULL",
                          BF_STATE_VALIDATING, BF_STATE_COMPLETED, detail, "validation succeeded");
    if (err == BF_OK) {
        bf__worker_drop_claim(w);
        /* the watch ends with the backfill; one that cannot be removed now is swept later */
        if (w->e->watch_grace_s == 0)
            (void)bf__watch_remove(w->e, w->id, NULL);
    }
    return err;
}

bf_err bf__step_lost(bf_worker *w, bf_step_info *info)
{
    bf_log_record rec = bf__worker_record(w, BF_LOG_WARN, BF_EV_BATCH_FENCED_OUT);
    rec.reason = "fence";
    bf__log_event(w->e, &rec, "%s: stale owner rejected at generation %lld", info->id,
                  (long long)info->generation);
    bf__worker_drop_claim(w);
    info->step = BF_STEP_LOST;
    bf__copy(info->detail, sizeof info->detail, "claim or generation no longer current");
    return BF_OK;
}

/* How a classified error is disposed of. */
typedef enum failure_mode { FAIL_RETRY, FAIL_BLOCK, FAIL_FAIL } failure_mode;

static failure_mode failure_mode_of(bf_err err)
{
    switch (err) {
    case BF_ERR_PREREQUISITE:
    case BF_ERR_DATA_INVARIANT:
        return FAIL_BLOCK;
    case BF_ERR_BATCH_BOUND:
    case BF_ERR_DEFINITION:
    case BF_ERR_VALIDATION_FAILED:
        return FAIL_FAIL;
    default:
        return FAIL_RETRY;
    }
}

/*
 * Durably classify a failed attempt before reporting it handled: retryable errors stay in the
 * current state without a claim until a bounded, jittered exponential backoff stored in
 * next_attempt_at has passed; the attempt that exhausts the policy enters failed; unmet
 * prerequisites and data invariants enter blocked. Fenced on generation and owner but not on
 * the claim's expiry: a takeover always advances the generation, so an expired but untaken
 * claim cannot conflict with anyone, and recording the attempt keeps a statement that
 * outlasts its lease from retrying forever without being counted.
 */
bf_err bf__worker_fail(bf_worker *w, bf_err cause, const char *detail, const char *reason,
                       bf_step_info *info)
{
    bf_engine *e = w->e;
    char cls[3];
    if (reason == NULL) /* before the statements below reset the SQLSTATE */
        reason = bf__worker_reason(e, cause, cls);
    bf_err err = bf__ensure_conn(e);
    if (err != BF_OK)
        return err;
    const bf_retry_policy *p = &w->c->def->retry;
    char gen[24], max[16], base[16], cap[16];
    bf__param_int(gen, sizeof gen, w->generation);
    bf__param_int(max, sizeof max, bf__worker_max_attempts(w->c));
    bf__param_int(base, sizeof base, p->base_ms ? p->base_ms : 200);
    bf__param_int(cap, sizeof cap, p->cap_ms ? p->cap_ms : 30000);
    static const char *const modes[] = {
        [FAIL_RETRY] = "retry", [FAIL_BLOCK] = "block", [FAIL_FAIL] = "fail"};
    char bounded[BF_DIAG_MAX];
    bf__copy(bounded, sizeof bounded, detail);
    const char *params[] = {w->id,
                            gen,
                            e->owner,
                            modes[failure_mode_of(cause)],
                            max,
                            base,
                            cap,
                            bf__error_class_name(cause),
                            bounded,
                            bf_state_name(w->state),
                            w->validation_failed ? "true" : "false"};
    PGresult *r = NULL;
    err = bf__exec(e, &r, "record failure",
                   "WITH u AS (UPDATE buzz_backfill.backfill b SET attempts = b.attempts + 1,"
                   " state = CASE WHEN $4 = 'retry' AND b.attempts + 1 < $5::integer THEN b.state"
                   "  WHEN $4 = 'block' THEN 'blocked' ELSE 'failed' END,"
                   " next_attempt_at = CASE WHEN $4 = 'retry' AND b.attempts + 1 < $5::integer THEN"
                   "  clock_timestamp() + least($7::float8, $6::float8 * power(2, b.attempts))"
                   "  * (0.5 + random() * 0.5) * interval '1 ms' END,"
                   " error_class = $8, error_detail = $9, error_at = clock_timestamp(),"
                   " claim_owner = NULL, claim_expires_at = NULL, claimed_at = NULL,"
                   " validation_outcome = CASE WHEN $11 THEN 'failure'"
                   "  ELSE b.validation_outcome END,"
                   " validation_detail = CASE WHEN $11 THEN $9 ELSE b.validation_detail END,"
                   " validated_at = CASE WHEN $11 THEN clock_timestamp() ELSE b.validated_at END,"
                   " validation_request = CASE WHEN $11 THEN NULL ELSE b.validation_request END,"
                   " updated_at = clock_timestamp()"
                   " WHERE b.id = $1 AND b.generation = $2::bigint AND b.claim_owner = $3"
                   " AND b.state = $10 RETURNING b.state, b.attempts, b.generation),"
                   " a AS (INSERT INTO buzz_backfill.audit (backfill_id, action, actor, authority,"
                   " prior_state, result_state, generation, outcome)"
                   " SELECT $1, 'worker', $3, 'engine', $10, u.state, u.generation, $9 FROM u"
                   " WHERE u.state <> $10)"
                   " SELECT state, attempts, pg_notify('buzz_backfill', $1) FROM u",
                   11, params);
    if (err != BF_OK)
        return err;
    int n = PQntuples(r);
    bf_state st = 0;
    if (n == 1)
        (void)bf_state_parse(bf__field(r, 0, 0), &st);
    int attempts = n == 1 ? (int)bf__field_i64(r, 0, 1) : 0;
    PQclear(r);
    bf__copy(info->detail, sizeof info->detail, bounded);
    bf__worker_drop_claim(w); /* released by the statement, or never ours */
    /* nothing matched: paused or taken over meanwhile, not ours to record */
    if (n == 0)
        return bf__step_lost(w, info);
    info->step = st == BF_STATE_BLOCKED  ? BF_STEP_BLOCKED
                 : st == BF_STATE_FAILED ? BF_STEP_FAILED
                                         : BF_STEP_RETRY;
    bf_log_record rec =
        bf__worker_record(w, info->step == BF_STEP_RETRY ? BF_LOG_WARN : BF_LOG_ERROR,
                          info->step == BF_STEP_RETRY     ? BF_EV_ATTEMPT_RETRY
                          : info->step == BF_STEP_BLOCKED ? BF_EV_BACKFILL_BLOCKED
                                                          : BF_EV_BACKFILL_FAILED);
    rec.reason = reason;
    bf__log_event(e, &rec, "%s: attempt %d %s: %s", w->id, attempts,
                  info->step == BF_STEP_RETRY ? "will retry" : bf_state_name(st), bounded);
    return BF_OK;
}
