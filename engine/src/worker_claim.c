/*
 * worker_claim.c - a worker's claim (worker.c): taking a running or validating row, or an
 * expired claim over, renewing it and releasing it, each one fenced statement.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "strbuf.h"
#include "throttle_rate.h"
#include "worker.h"

/*
 * The claim: one statement. The row is locked with SKIP LOCKED, so a claimer never waits on a
 * row another session holds (a batch committing, an operator's action): it is simply not
 * claimable this time. Taking over an expired claim advances the generation like any claim
 * and also counts the attempt the expired owner never recorded (its own failure would be
 * fenced out now): a batch that keeps outlasting its lease, or keeps waiting on a lock past
 * it, therefore still reaches failed after max_attempts ($5), in this statement, audited.
 */
static const char claim_sql[] =
    "WITH p AS (SELECT id, claim_owner AS prev_owner, state AS prev_state,"
    "  claim_owner IS NOT NULL AND attempts + 1 >= $5::integer AS exhausted"
    "  FROM buzz_backfill.backfill WHERE id = $1 AND state IN ('running', 'validating')"
    "  AND key_types = $4 AND (definition_digest IS NULL OR definition_digest = $7)"
    "  AND (claim_owner IS NULL OR claim_expires_at <= clock_timestamp())"
    "  AND (next_attempt_at IS NULL OR next_attempt_at <= clock_timestamp())"
    "  FOR UPDATE SKIP LOCKED),"
    " u AS (UPDATE buzz_backfill.backfill b SET generation = b.generation + 1,"
    "  attempts = b.attempts + (p.prev_owner IS NOT NULL)::integer,"
    "  state = CASE WHEN p.exhausted THEN 'failed' ELSE b.state END,"
    "  claim_owner = CASE WHEN p.exhausted THEN NULL ELSE $2 END,"
    "  claim_expires_at = CASE WHEN p.exhausted THEN NULL"
    "   ELSE clock_timestamp() + $3::integer * interval '1 ms' END,"
    "  claimed_at = CASE WHEN p.exhausted THEN NULL ELSE clock_timestamp() END,"
    "  error_class = CASE WHEN p.prev_owner IS NULL THEN b.error_class ELSE 'retryable' END,"
    "  error_detail = CASE WHEN p.prev_owner IS NULL THEN b.error_detail ELSE $6 END,"
    "  error_at = CASE WHEN p.prev_owner IS NULL THEN b.error_at ELSE clock_timestamp() END,"
    "  throttle_signal = NULL, throttle_value = NULL, throttled_since = NULL,"
    "  slow_value = NULL, slow_since = NULL,"
    "  updated_at = clock_timestamp()"
    "  FROM p WHERE b.id = p.id"
    "  RETURNING b.generation, b.state, b.bound::text, b.bound_empty, b.checkpoint::text,"
    "  p.prev_owner, b.attempts, p.exhausted, p.prev_state, b.batches_committed,"
    "  coalesce(b.rows_covered, 0) AS rows_covered, b.rows_committed,"
    "  b.batch_size_current),"
    " a AS (INSERT INTO buzz_backfill.audit (backfill_id, action, actor, authority, prior_state,"
    "  result_state, generation, outcome)"
    "  SELECT $1, 'worker', $2, 'engine', u.prev_state, 'failed', u.generation, $6 FROM u"
    "  WHERE u.exhausted RETURNING 1)"
    " SELECT u.generation, u.state, u.bound, u.bound_empty, u.checkpoint, u.prev_owner,"
    " u.attempts, u.exhausted, CASE WHEN u.exhausted THEN pg_notify('buzz_backfill', $1)::text"
    " END, u.batches_committed, u.rows_covered, u.rows_committed, u.batch_size_current FROM u";
/* (a data-modifying WITH runs whether or not it is read) */

/* Claim id. validating: the row was seen in validating, so the validation lock is taken first
 * and the row is left alone (no claim, no generation) while another session validates it. */
static bf_err worker_claim_id(bf_worker *w, const char *id, bool validating)
{
    bf_engine *e = w->e;
    size_t index = 0;
    const bf_compiled *c = bf__registry_compiled(e->reg, id, &index);
    if (c == NULL) /* fail closed: never claim what this process cannot run */
        return bf__diag(e, BF_ERR_UNKNOWN_DEFINITION, "this process has no definition for %s",
                        bf_id_valid(id) ? id : "(invalid id)");
    bool locked = false;
    if (validating) {
        bf_err err = bf__validation_lock(e, id, &locked);
        if (err != BF_OK)
            return err;
        if (!locked)
            return bf__diag(e, BF_ERR_NO_WORK, "%s: validation already in progress", id);
    }
    char lease[16], max[16];
    bf__param_int(lease, sizeof lease, e->lease_ms);
    bf__param_int(max, sizeof max, bf__worker_max_attempts(c));
    const char *params[] = {id,       e->owner,
                            lease,    c->key_types,
                            max,      "the previous claim expired before its work committed",
                            c->digest};
    PGresult *r = NULL;
    bf_err err = bf__exec(e, &r, "claim", claim_sql, 7, params);
    if (err == BF_OK && PQntuples(r) == 0)
        err = bf__diag(e, BF_ERR_NO_WORK, "%s is not claimable now", id);
    if (err == BF_OK && bf__field_bool(r, 0, 7)) {
        bf_log_record rec = BF_LOG_RECORD_INIT;
        rec.level = BF_LOG_ERROR;
        rec.event = BF_EV_BACKFILL_FAILED;
        rec.id = id;
        rec.generation = bf__field_i64(r, 0, 0);
        rec.checkpoint = bf__isnull(r, 0, 4) ? NULL : bf__field(r, 0, 4);
        rec.batch_size = c->def->batch_size;
        rec.reason = "timeout";
        bf__log_event(e, &rec, "%s: failed: attempt %lld expired before its work committed", id,
                      (long long)bf__field_i64(r, 0, 6));
        err = bf__diag(e, BF_ERR_NO_WORK, "%s failed: its attempts expired", id);
    }
    if (err != BF_OK) {
        PQclear(r);
        if (locked)
            bf__validation_unlock(e, id);
        return err;
    }
    w->has_claim = true;
    bf__copy(w->id, sizeof w->id, id);
    w->index = index;
    w->c = c;
    w->validation_locked = locked;
    w->generation = bf__field_i64(r, 0, 0);
    bf_state st = 0;
    (void)bf_state_parse(bf__field(r, 0, 1), &st);
    w->state = st;
    w->bound_empty = bf__field_bool(r, 0, 3);
    w->has_checkpoint = !bf__isnull(r, 0, 4);
    w->prereq_checked = false;
    w->seen_batches = bf__field_i64(r, 0, 9);
    w->seen_rows = bf__field_i64(r, 0, 10);
    w->seen_touched = bf__field_i64(r, 0, 11);
    /* a new owner starts at the size the last one used (clamped to the current configuration
     * at its first step) */
    w->size = w->size_written = bf__isnull(r, 0, 12) ? 0 : (int)bf__field_i64(r, 0, 12);
    bf__size_model_init(&w->sizing);
    memset(&w->slow, 0, sizeof w->slow);
    w->slow_reason[0] = w->slow_value[0] = w->slow_written[0] = '\0';
    w->throttle_signal[0] = w->throttle_value[0] = '\0';
    w->checked_us = w->throttled_us = 0;
    w->rate_checked_us = w->rate_written_us = 0;
    w->rate_failed[0] = '\0';
    w->step_batches = 0;
    w->extended_us = bf__monotonic_us();
    err = bf__key_field(e, w->bound, r, 0, 2);
    if (err == BF_OK)
        err = bf__key_field(e, w->checkpoint, r, 0, 4);
    if (err != BF_OK) {
        /* a row written before the key length constraints whose keys this build cannot hold:
         * fail closed (blocked), never truncate a key */
        PQclear(r);
        char detail[BF_DIAG_MAX];
        bf__copy(detail, sizeof detail, e->diag);
        w->bound[0] = w->checkpoint[0] = '\0';
        bf_step_info info;
        memset(&info, 0, sizeof info);
        (void)bf__worker_fail(w, BF_ERR_DATA_INVARIANT, detail, NULL, &info);
        return bf__diag(e, BF_ERR_NO_WORK, "%s: %s", id, detail);
    }
    bool takeover = !bf__isnull(r, 0, 5);
    bf_log_record rec =
        bf__worker_record(w, BF_LOG_INFO, takeover ? BF_EV_CLAIM_TAKEOVER : BF_EV_CLAIM_ACQUIRED);
    if (takeover)
        bf__log_event(e, &rec, "took over %s at generation %lld (%s) from %s; attempt %lld", id,
                      (long long)w->generation, bf_state_name(w->state), bf__field(r, 0, 5),
                      (long long)bf__field_i64(r, 0, 6));
    else
        bf__log_event(e, &rec, "claimed %s at generation %lld (%s)", id, (long long)w->generation,
                      bf_state_name(w->state));
    PQclear(r);
    if (w->hooks.after_claim != NULL)
        w->hooks.after_claim(w->hooks.arg, w->id, w->generation);
    return BF_OK;
}

/*
 * Finding work. The eligible rows (running or validating, unclaimed or expired, not backing
 * off), oldest update first; the claim statement decides each. Up to FIND_WORK_TRIES of them,
 * among the IDs this process knows. The first read does not name those IDs: sent as an array
 * on every poll they cost PostgreSQL 2 to 8 ms at 1,000 definitions and 12 to 14 ms at 10,000
 * (the array's input and its hash, for every idle worker every second), against well under a
 * millisecond for the table's few eligible rows; the registry picks this process's own from
 * them. Only when that read is full (FIND_WORK_SCAN rows, so more may follow) and claimed
 * nothing does the second read name the IDs, so work this process knows is never hidden behind
 * other processes' rows.
 */
#define FIND_WORK_TRIES   16
#define FIND_WORK_SCAN    256
#define FIND_WORK_STR_(n) #n
#define FIND_WORK_STR(n)  FIND_WORK_STR_(n) /* a limit above, as SQL text */

#define FIND_WORK_ELIGIBLE                                                                         \
    " state IN ('running', 'validating')"                                                          \
    " AND (claim_owner IS NULL OR claim_expires_at <= clock_timestamp())"                          \
    " AND (next_attempt_at IS NULL OR next_attempt_at <= clock_timestamp())"

/* Try the rows of r (id, validating) that this process knows, up to FIND_WORK_TRIES of them. */
static bf_err worker_claim_rows(bf_worker *w, PGresult *r)
{
    bf_err err = bf__diag(w->e, BF_ERR_NO_WORK, "no eligible work");
    int tries = FIND_WORK_TRIES;
    for (int i = 0; i < PQntuples(r) && err == BF_ERR_NO_WORK && tries > 0; i++) {
        const char *id = bf__field(r, i, 0);
        if (bf__registry_compiled(w->e->reg, id, NULL) == NULL)
            continue; /* another process's definition */
        tries--;
        err = worker_claim_id(w, id, bf__field_bool(r, i, 1));
    }
    return err;
}

static bf_err worker_find_work(bf_worker *w)
{
    static const char scan_sql[] =
        "SELECT id, state = 'validating' FROM buzz_backfill.backfill"
        " WHERE" FIND_WORK_ELIGIBLE " ORDER BY updated_at LIMIT " FIND_WORK_STR(FIND_WORK_SCAN);
    static const char named_sql[] = "SELECT id, state = 'validating' FROM buzz_backfill.backfill"
                                    " WHERE id = ANY($1::text[]) AND" FIND_WORK_ELIGIBLE
                                    " ORDER BY updated_at LIMIT " FIND_WORK_STR(FIND_WORK_TRIES);
    PGresult *r = NULL;
    bf_err err = bf__exec(w->e, &r, "find work", scan_sql, 0, NULL);
    if (err != BF_OK)
        return err;
    bool full = PQntuples(r) == FIND_WORK_SCAN;
    err = worker_claim_rows(w, r);
    PQclear(r);
    if (err != BF_ERR_NO_WORK || !full)
        return err;
    const char *params[] = {bf__registry_ids(w->e->reg, false)};
    if ((err = bf__exec(w->e, &r, "find work", named_sql, 1, params)) != BF_OK)
        return err;
    err = worker_claim_rows(w, r);
    PQclear(r);
    return err;
}

bf_err bf_worker_claim(bf_worker *w, const char *id, int64_t *generation_out)
{
    if (w == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    if (w->has_claim)
        return bf__diag(w->e, BF_ERR_CONFLICT, "worker already holds a claim");
    bf_err err = bf__ensure_conn(w->e);
    if (err != BF_OK)
        return err;
    if (id != NULL)
        err = worker_claim_id(w, id, false);
    else
        err = worker_find_work(w);
    if (err == BF_OK && generation_out != NULL)
        *generation_out = w->generation;
    return err;
}

/* A fenced renewal matched nothing: the claim is gone (a pause, a takeover, its expiry). */
bf_err bf__worker_claim_gone(bf_worker *w)
{
    bf_log_record rec = bf__worker_record(w, BF_LOG_WARN, BF_EV_CLAIM_LOST);
    rec.reason = "lost";
    bf__log_event(w->e, &rec, "lost claim on %s at generation %lld", w->id,
                  (long long)w->generation);
    bf__worker_drop_claim(w);
    return bf__diag(w->e, BF_ERR_STALE, "claim is no longer current");
}

bf_err bf_worker_renew(bf_worker *w)
{
    if (w == NULL || !w->has_claim)
        return BF_ERR_INVALID_ARGUMENT;
    bf_engine *e = w->e;
    char gen[24], lease[16];
    bf__param_int(gen, sizeof gen, w->generation);
    bf__param_int(lease, sizeof lease, e->lease_ms);
    const char *params[] = {w->id, gen, e->owner, lease};
    PGresult *r = NULL;
    bf_err err = bf__exec(e, &r, "renew claim",
                          "UPDATE buzz_backfill.backfill SET claim_expires_at ="
                          " clock_timestamp() + $4::integer * interval '1 ms'" BF__LIVE_CLAIM_FENCE
                          " RETURNING 1",
                          4, params);
    if (err != BF_OK)
        return err;
    int n = PQntuples(r);
    PQclear(r);
    if (n == 0)
        return bf__worker_claim_gone(w);
    w->extended_us = bf__monotonic_us();
    bf_log_record rec = bf__worker_record(w, BF_LOG_DEBUG, BF_EV_CLAIM_RENEWED);
    bf__log_event(e, &rec, "renewed %s at generation %lld", w->id, (long long)w->generation);
    return BF_OK;
}

bf_err bf_worker_release(bf_worker *w)
{
    if (w == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    if (!w->has_claim)
        return BF_OK;
    bf_engine *e = w->e;
    char gen[24];
    bf__param_int(gen, sizeof gen, w->generation);
    const char *params[] = {w->id, gen, e->owner};
    bf_err err = bf__ensure_conn(e);
    PGresult *r = NULL;
    if (err == BF_OK)
        err = bf__exec(e, &r, "release claim",
                       "UPDATE buzz_backfill.backfill SET claim_owner = NULL,"
                       " claim_expires_at = NULL, claimed_at = NULL"
                       " WHERE id = $1 AND generation = $2::bigint AND claim_owner = $3"
                       " RETURNING 1",
                       3, params);
    if (err == BF_OK && PQntuples(r) == 1) { /* not when it was no longer ours */
        bf_log_record rec = bf__worker_record(w, BF_LOG_INFO, BF_EV_CLAIM_RELEASED);
        bf__log_event(e, &rec, "released %s at generation %lld", w->id, (long long)w->generation);
    }
    PQclear(r);
    bf__worker_drop_claim(w);
    return err;
}
