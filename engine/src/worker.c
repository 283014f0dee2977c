/*
 * worker.c - steps and the worker loop (claims: worker_claim.c; the claim holder's transitions
 * and failures: worker_fail.c; the batches themselves: batch.c).
 *
 * Design notes (fencing): a claim is one UPDATE that takes an unowned or expired running or
 * validating row and advances its generation; renewal, release and every worker transition are
 * single UPDATEs fenced on (id, generation, owner, claim still valid by clock_timestamp(),
 * lifecycle). A declarative step is one CALL of the definition's batch loop procedure
 * (compile.c compile_loop, created once per session in pg_temp): batches after the checkpoint
 * within the bound (ORDER BY key LIMIT batch_size), each its own READ COMMITTED transaction of
 * selection, mutation, the fenced compare-and-swap of the checkpoint and batch_verdict(), which
 * raises (rolling that batch back) when the fence matched no row or the batch went over its
 * bound. A callback step is one such batch driven from here. A pause or takeover that commits
 * while a batch is in flight changes the generation; the fence's re-check of the locked row
 * then fails, so a stale owner can never commit.
 *
 * A step waits for its results on the connection and on the wake pipe (engine.c
 * bf__wait_result): a stop request cancels the statement in flight, whose transaction rolls
 * back; the step then releases the claim without recording a failed attempt.
 *
 * The worker's cached checkpoint is only a hint for the next statement: the CAS rejects it if
 * PostgreSQL disagrees, and the worker then re-claims and re-reads.
 */
#include <errno.h>
#include <fcntl.h>
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

static void worker_slow_end(bf_worker *w);

void bf__worker_drop_claim(bf_worker *w)
{
    bf__worker_throttle_end(w); /* a claim that ends ends its throttle */
    worker_slow_end(w);         /* and its slow state */
    w->has_claim = false;
    if (w->validation_locked) {
        bf__validation_unlock(w->e, w->id);
        w->validation_locked = false;
    }
}

/* A record about the held (or just lost) claim: its id, generation, checkpoint (after the
 * event) and the definition's batch size; the duration of the step so far when in one. */
bf_log_record bf__worker_record(const bf_worker *w, bf_log_level level, bf_event event)
{
    bf_log_record rec = BF_LOG_RECORD_INIT;
    rec.level = level;
    rec.event = event;
    rec.id = w->id;
    rec.generation = w->generation;
    rec.checkpoint = w->has_checkpoint ? w->checkpoint : NULL;
    rec.batch_size = w->c != NULL ? w->c->def->batch_size : -1;
    if (w->step_started_us > 0)
        rec.duration_us = bf__monotonic_us() - w->step_started_us;
    return rec;
}

/* throttle.end for a throttle in progress (its signal cleared): the signal changed, or the
 * claim that waited on it ended. */
void bf__worker_throttle_end(bf_worker *w)
{
    if (w->throttle_signal[0] == '\0')
        return;
    bf_log_record rec = bf__worker_record(w, BF_LOG_INFO, BF_EV_THROTTLE_END);
    rec.reason = w->throttle_signal;
    rec.duration_us = bf__monotonic_us() - w->throttled_us;
    bf__log_event(w->e, &rec, "%s: no longer throttled by %s", w->id, w->throttle_signal);
    w->throttle_signal[0] = w->throttle_value[0] = '\0';
}

/* slow.end for a slow state in progress: a step at the median's pace, or the claim ended. */
static void worker_slow_end(bf_worker *w)
{
    if (w->slow_reason[0] == '\0')
        return;
    bf_log_record rec = bf__worker_record(w, BF_LOG_INFO, BF_EV_SLOW_END);
    rec.reason = w->slow_reason;
    rec.duration_us = bf__monotonic_us() - w->slow_us;
    bf__log_event(w->e, &rec, "%s: steps at the recent median's pace again", w->id);
    w->slow_reason[0] = w->slow_value[0] = '\0';
}

/* After a step's batches (size keys each at most): judge it against the claim's recent median
 * and log slow.start / slow.end when that changes; the row follows at the next worker_observe. */
void bf__worker_slow_judge(bf_worker *w, long batches, long keys, int size, int64_t elapsed_us)
{
    char value[sizeof w->slow_value];
    const char *reason =
        bf__slow_judge(&w->slow, batches, keys, size, elapsed_us, value, sizeof value);
    if (reason != NULL && strcmp(reason, w->slow_reason) == 0) {
        bf__copy(w->slow_value, sizeof w->slow_value, value);
        return;
    }
    worker_slow_end(w);
    if (reason == NULL)
        return;
    bf__copy(w->slow_reason, sizeof w->slow_reason, reason);
    bf__copy(w->slow_value, sizeof w->slow_value, value);
    w->slow_us = bf__monotonic_us();
    bf_log_record rec = bf__worker_record(w, BF_LOG_WARN, BF_EV_SLOW_START);
    rec.reason = reason;
    rec.duration_us = elapsed_us;
    bf__log_event(w->e, &rec, "%s: slow: %s", w->id, value);
}

int bf__worker_max_attempts(const bf_compiled *c)
{
    return c->def->retry.max_attempts ? c->def->retry.max_attempts : 5;
}

/* ---- steps ----------------------------------------------------------------------------- */

/* A stop request cancelled a statement of this step: the transaction it interrupted rolled
 * back, and that is no failed attempt. What the step committed before stays; the claim is
 * released for the next worker. (PQcancel returns once the server has signalled the backend,
 * and a backend that is idle by then discards the cancel, so it cannot reach the release.) */
static bf_err step_stopped(bf_worker *w, bf_step_info *info)
{
    bf__log(w->e, BF_LOG_INFO, "%s: stopped; the transaction in flight rolled back", w->id);
    bf_err err = bf_worker_release(w);
    info->step = BF_STEP_IDLE;
    bf__copy(info->detail, sizeof info->detail, "stopped; the transaction in flight rolled back");
    return err;
}

/* Handle the outcome of something that failed while holding the claim. A fenced-out commit is
 * a lost claim when a pause or takeover advanced the generation (bf__worker_fail() then matches
 * nothing); when only this owner's own lease ran out it is a failed attempt and counts, or a
 * batch that always outlasts its lease would be retried forever. */
bf_err bf__step_failed(bf_worker *w, bf_err err, const char *detail, bf_step_info *info)
{
    if (w->e->cancelled) /* the failure is the stop's cancel, or follows from it */
        return step_stopped(w, info);
    if (err == BF_ERR_STALE) /* the generation and owner still match, so the claim expired or
                                 the row moved under it (a result lost with its connection) */
        return bf__worker_fail(w, BF_ERR_TIMEOUT,
                               "fenced out at commit: the claim expired or the row changed",
                               "timeout", info);
    return bf__worker_fail(w, err, detail[0] ? detail : w->e->diag, NULL, info);
}

/* Once per claim, before the first batch: the key is still unique (its index may have been
 * dropped since start) and the definition's own prerequisite holds. */
static bf_err step_prerequisite(bf_worker *w, bf_step_info *info, bool *blocked)
{
    *blocked = false;
    if (w->prereq_checked)
        return BF_OK;
    bf_engine *e = w->e;
    bf_err err = bf__key_unique(e, w->c);
    if (err == BF_ERR_DEFINITION || err == BF_ERR_PREREQUISITE) {
        *blocked = true;
        return bf__worker_fail(w, BF_ERR_PREREQUISITE, e->diag, NULL, info);
    }
    if (err != BF_OK)
        return err;
    if (w->c->sql_prereq == NULL) {
        w->prereq_checked = true;
        return BF_OK;
    }
    err = bf__begin(e, true);
    PGresult *r = NULL;
    if (err == BF_OK)
        err = bf__exec(e, &r, "prerequisite", w->c->sql_prereq, 0, NULL);
    bf__rollback(e);
    if (err != BF_OK) {
        *blocked = true;
        return bf__step_failed(w, err, "", info);
    }
    bool holds = PQntuples(r) == 1 && bf__field_bool(r, 0, 0);
    PQclear(r);
    if (!holds) {
        *blocked = true;
        return bf__worker_fail(w, BF_ERR_PREREQUISITE, "prerequisite not met", "prerequisite",
                               info);
    }
    w->prereq_checked = true;
    return BF_OK;
}

/* One batch.committed record for batches a step committed: its deltas of the row's counters
 * (the fence adds exactly these to batches_committed, rows_covered and rows_committed). */
static void worker_report_committed(bf_worker *w, long batches, long rows, long touched)
{
    w->seen_batches += batches;
    w->seen_rows += rows;
    w->seen_touched += touched;
    bf_log_record rec = bf__worker_record(w, BF_LOG_DEBUG, BF_EV_BATCH_COMMITTED);
    rec.batches = batches;
    rec.rows = rows;
    rec.touched = touched;
    bf__log_event(w->e, &rec, "%s: %ld batches committed, %ld keys, %ld rows changed", w->id,
                  batches, rows, touched);
}

/*
 * A failed step may still have committed batches: the loop's batches before the one that
 * failed (each commits by itself), or a callback batch whose COMMIT's answer was lost. Their
 * counts never reach the client. The loop's session keeps its own account of them
 * (worker_loop_progress), exact; otherwise (a callback batch, or a session that was lost) they
 * are read back from the row's counters and reported
 * like any step's, keeping the records equal to what PostgreSQL counted. Only commits of this
 * generation are this worker's: the read requires the generation to be unchanged, or the row
 * to be unclaimed (a pause or a failure since; nobody could commit without a claim). Leaves
 * the diagnostic and SQLSTATE of the failure as they were, and cannot be cancelled by a stop.
 */
static void worker_report_partial(bf_worker *w, const char *start_cp, int backend_pid)
{
    bf_engine *e = w->e;
    char diag[BF_DIAG_MAX], sqlstate[sizeof e->sqlstate];
    bf__copy(diag, sizeof diag, e->diag);
    memcpy(sqlstate, e->sqlstate, sizeof sqlstate);
    int stop_fd = e->stop_fd;
    e->stop_fd = -1;
    char gen[24];
    bf__param_int(gen, sizeof gen, w->generation);
    const char *params[] = {w->id, gen};
    PGresult *r = NULL;
    int64_t lb = 0, lr = 0, lt = 0;
    char lcp[BF_KEY_TEXT_MAX];
    bool same_session =
        bf__ensure_conn(e) == BF_OK && backend_pid != 0 && PQbackendPID(e->conn) == backend_pid;
    if (w->c->def->mutate == NULL && same_session) {
        /* the loop's session says exactly what its committed batches did; the row's counters
         * may hold other workers' batches by now (a takeover, or a pause, a resume and another
         * claim, then a completion that left the row unclaimed: counted twice) */
        if (bf__loop_progress(w, start_cp, &lb, &lr, &lt, lcp)) {
            bf__copy(w->checkpoint, sizeof w->checkpoint, lcp);
            w->has_checkpoint = true;
            worker_report_committed(w, (long)lb, (long)lr, (long)lt);
        }
    } else if (e->conn != NULL && PQstatus(e->conn) == CONNECTION_OK &&
               bf__exec(e, &r, "read progress",
                        "SELECT batches_committed, coalesce(rows_covered, 0), rows_committed,"
                        " checkpoint::text FROM buzz_backfill.backfill WHERE id = $1"
                        " AND (generation = $2::bigint OR claim_owner IS NULL)",
                        2, params) == BF_OK &&
               PQntuples(r) == 1) {
        int64_t batches = bf__field_i64(r, 0, 0) - w->seen_batches;
        int64_t rows = bf__field_i64(r, 0, 1) - w->seen_rows;
        int64_t touched = bf__field_i64(r, 0, 2) - w->seen_touched;
        if (batches > 0 && bf__key_field(e, w->checkpoint, r, 0, 3) == BF_OK) {
            w->has_checkpoint = !bf__isnull(r, 0, 3);
            /* rows_covered is NULL (read as 0) for progress made before schema version 3 */
            worker_report_committed(w, (long)batches, rows >= 0 ? (long)rows : 0, (long)touched);
        }
    }
    PQclear(r);
    e->stop_fd = stop_fd;
    bf__copy(e->diag, sizeof e->diag, diag);
    memcpy(e->sqlstate, sqlstate, sizeof sqlstate);
}

/* A rollback a stop asked for is routine; any other is worth a warning. */
static bf_log_level worker_rollback_level(const bf_worker *w)
{
    return w->e->cancelled ? BF_LOG_INFO : BF_LOG_WARN;
}

/* The old-writer watchdog, every step (with watch_block) or at most once a second per claim:
 * new writers are logged and audited
 * once; with watch_block, rows no earlier block answered enter blocked with who wrote them (the
 * spec: an unmet prerequisite enters blocked). */
static bf_err step_watch(bf_worker *w, bf_step_info *info, bool force, bool *blocked)
{
    *blocked = false;
    if (bf__watch_mode(w->e, w->c->def) == BF_WATCH_OFF)
        return BF_OK;
    int64_t now = bf__monotonic_us();
    /* a watch that only reports reads at most once a second; one that blocks, every step */
    if (!force && !w->e->watch_block && w->watch_checked_us != 0 &&
        now - w->watch_checked_us < 1000000)
        return BF_OK;
    w->watch_checked_us = now;
    int64_t rows = 0;
    bool unanswered = false;
    char diag[BF_DIAG_MAX];
    bf_err err = bf__watch_report(w->e, w->id, &rows, &unanswered, diag, sizeof diag);
    if (err != BF_OK) { /* the watch never stops the backfill by failing: the next check */
        bf__log(w->e, BF_LOG_WARN, "%s: could not read its old-writer watch: %s", w->id,
                w->e->diag);
        return BF_OK;
    }
    if (!w->e->watch_block || !unanswered)
        return BF_OK;
    *blocked = true;
    if ((err = bf__watch_answered(w->e, w->id)) != BF_OK)
        return err;
    return bf__worker_fail(w, BF_ERR_PREREQUISITE, diag, "old_writer", info);
}

static bf_err step_running(bf_worker *w, bf_step_info *info)
{
    bool blocked = false;
    bf_err err = step_prerequisite(w, info, &blocked);
    if (err != BF_OK || blocked)
        return err;
    if ((err = step_watch(w, info, false, &blocked)) != BF_OK || blocked)
        return err;
    bf_throttle *t = w->e->throttle;
    bf_throttle_config cfg;
    char custom[BF_THROTTLE_SQL_MAX], latency[BF_THROTTLE_SQL_MAX];
    bf__throttle_get(t, w->id, &cfg, custom, sizeof custom, latency, sizeof latency);
    int declared = w->c->def->batch_size;
    w->size = bf__size_clamp(&cfg, declared, w->size > 0 ? w->size : declared);
    double ctl_rate = 0;
    w->step_batches = 0;
    if (t != NULL) {
        bool tripped = false;
        err = bf__step_health(w, &cfg, info, &tripped);
        if (err != BF_OK || tripped || !w->has_claim)
            return err;
        if (cfg.latency_target_ms > 0) {
            err = bf__step_rate(w, &cfg, &ctl_rate, info);
            if (err != BF_OK || !w->has_claim)
                return err;
        }
    }
    if (ctl_rate > 0) {
        /* one batch a step, of at most the keys of BF_RATE_QUANTUM_MS at the rate: the pace's
         * waits come often and short, not after a burst of step_ms at full speed */
        double quantum = ctl_rate * BF_RATE_QUANTUM_MS / 1000.0;
        int cap = quantum < 1 ? 1 : quantum > declared ? declared : (int)quantum;
        w->size = bf__size_clamp(&cfg, declared, w->size < cap ? w->size : cap);
        w->step_batches = 1;
    }
    loop_result done = {0};
    char cp[BF_KEY_TEXT_MAX] = "", detail[BF_DIAG_MAX] = "", start_cp[BF_KEY_TEXT_MAX] = "";
    bf__copy(start_cp, sizeof start_cp, w->has_checkpoint ? w->checkpoint : "");
    int backend_pid = w->e->conn != NULL ? PQbackendPID(w->e->conn) : 0;
    int64_t started_us = bf__monotonic_us();
    if (!w->bound_empty) {
        if (w->c->def->mutate != NULL) {
            err = bf__batch_callback(w, cfg.lock_waiters, &done, cp, detail, sizeof detail);
            done.batches = done.rows > 0;
        } else {
            err = bf__batch_loop(w, cfg.lock_waiters, &done, cp);
        }
        if (err != BF_OK) {
            /* the batch in flight rolled back (the reason is taken before the progress read) */
            char cls[3];
            bf_log_record rec =
                bf__worker_record(w, worker_rollback_level(w), BF_EV_BATCH_ROLLED_BACK);
            rec.reason = bf__worker_reason(w->e, err, cls);
            worker_report_partial(w, start_cp, backend_pid);
            rec.checkpoint = w->has_checkpoint ? w->checkpoint : NULL;
            bf__log_event(w->e, &rec, "%s: the batch in flight rolled back: %s", w->id,
                          detail[0] ? detail : w->e->diag);
            return bf__step_failed(w, err, detail, info);
        }
    }
    if (done.batches == 0) { /* no admitted work remains after the checkpoint */
        /* what the watch saw before the batches ended, whatever the last check's age */
        if ((err = step_watch(w, info, true, &blocked)) != BF_OK || blocked)
            return err;
        err = bf__worker_enter_validating(w);
        if (err != BF_OK)
            return bf__step_failed(w, err, "", info);
        bf_log_record rec = bf__worker_record(w, BF_LOG_INFO, BF_EV_BACKFILL_VALIDATING);
        bf__log_event(w->e, &rec, "%s: reached its bound, validating", w->id);
        info->step = BF_STEP_VALIDATING;
        bf__copy(info->checkpoint, sizeof info->checkpoint, w->checkpoint);
        return BF_OK;
    }
    /* batches committed (when they reached the end, the next step finds none left); their
     * fence extended the claim, at the latest from the step's start */
    w->extended_us = started_us;
    w->has_checkpoint = true;
    bf__copy(w->checkpoint, sizeof w->checkpoint, cp);
    worker_report_committed(w, done.batches, done.rows, done.touched);
    info->step = BF_STEP_BATCH;
    info->batches = done.batches;
    info->rows = done.rows;
    info->touched = done.touched;
    info->batch_size = w->size;
    bf__copy(info->checkpoint, sizeof info->checkpoint, cp);
    if (t == NULL)
        return BF_OK;
    return bf__step_after_batches(w, &cfg, ctl_rate, &done, started_us, info);
}

static bf_err renew_gate(void *arg)
{
    return bf_worker_renew(arg);
}

static bf_err step_validating(bf_worker *w, bf_step_info *info)
{
    bf_engine *e = w->e;
    bf_err err = BF_OK;
    /* usually taken with the claim (worker_claim_id); not when the row entered validating
     * under this claim or was claimed by ID */
    if (!w->validation_locked &&
        (err = bf__validation_lock(e, w->id, &w->validation_locked)) != BF_OK)
        return err;
    if (!w->validation_locked) { /* an explicit validation runs: let it finish, come back later */
        err = bf_worker_release(w);
        info->step = BF_STEP_IDLE;
        bf__copy(info->detail, sizeof info->detail, "validation already in progress");
        return err;
    }
    const bf_compiled *c = w->c;
    bf_validation_run run;
    int64_t started_us = bf__monotonic_us();
    err = bf__validation_run(e, c, true, w->bound, w->bound_empty, renew_gate, w, &run);
    int64_t pass_us = bf__monotonic_us() - started_us;
    if (w->validation_locked) { /* a lost claim released it already */
        bf__validation_unlock(e, w->id);
        w->validation_locked = false;
    }
    if (err != BF_OK) /* including BF_ERR_STALE when the gate could not renew the claim */
        return bf__step_failed(w, err, "", info);
    if (run.outcome == BF_VALIDATION_SUCCESS) {
        err = bf__worker_complete(w, run.detail);
        if (err != BF_OK)
            return bf__step_failed(w, err, "", info);
        bf_log_record rec = bf__worker_record(w, BF_LOG_INFO, BF_EV_VALIDATION_PASSED);
        rec.duration_us = pass_us;
        bf__log_event(e, &rec, "%s: validated and completed: %s", w->id, run.detail);
        info->step = BF_STEP_COMPLETED;
        bf__copy(info->detail, sizeof info->detail, run.detail);
        return BF_OK;
    }
    bf_err cause =
        run.verdict == BF_ERR_PREREQUISITE ? BF_ERR_PREREQUISITE : BF_ERR_VALIDATION_FAILED;
    /* rows the watchdog attributed to an old writer: the repair is not at fault, the rollout
     * prerequisite is unmet, so blocked with who wrote them instead of failed */
    char watched[BF_DIAG_MAX] = "";
    const char *why = bf__error_class_name(cause);
    if (cause == BF_ERR_VALIDATION_FAILED && bf__watch_mode(e, c->def) != BF_WATCH_OFF) {
        int64_t rows = 0;
        bool unanswered = false;
        if (bf__watch_report(e, w->id, &rows, &unanswered, watched, sizeof watched) == BF_OK &&
            rows > 0) {
            char both[BF_DIAG_MAX];
            bf__format(both, sizeof both, "validation failed on rows an old writer wrote: %s",
                       watched);
            bf__copy(run.detail, sizeof run.detail, both);
            cause = BF_ERR_PREREQUISITE;
            why = "old_writer";
        }
    }
    w->validation_failed = true; /* the row's latest validation, as an explicit one would be */
    err = bf__worker_fail(w, cause, run.detail, why, info);
    w->validation_failed = false;
    if (err == BF_OK && info->step != BF_STEP_LOST) { /* the outcome was recorded */
        bf_log_record rec = bf__worker_record(w, BF_LOG_WARN, BF_EV_VALIDATION_FAILED);
        rec.duration_us = pass_us;
        rec.reason = why;
        bf__log_event(e, &rec, "%s: validation failed: %s", w->id, run.detail);
    }
    return err;
}

bf_err bf_worker_step(bf_worker *w, bf_step_info *out)
{
    if (w == NULL || out == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    if (!w->has_claim) {
        out->step = BF_STEP_IDLE;
        return BF_OK;
    }
    bf_err err = bf__ensure_conn(w->e);
    if (err != BF_OK)
        return err;
    bf__copy(out->id, sizeof out->id, w->id);
    out->generation = w->generation;
    bf_engine *e = w->e;
    e->stop_fd = w->wake[0];
    e->stop = &w->stop;
    e->cancelled = false;
    w->step_started_us = bf__monotonic_us();
    err = w->state == BF_STATE_VALIDATING ? step_validating(w, out) : step_running(w, out);
    w->step_started_us = 0;
    e->stop_fd = -1;
    e->stop = NULL;
    if (err == BF_OK && w->hooks.after_step != NULL)
        w->hooks.after_step(w->hooks.arg, out);
    return err;
}

/* ---- the loop -------------------------------------------------------------------------- */

/* Wait until notified, stopped, or poll_ms passed. Notifications only wake; the loop re-reads
 * PostgreSQL before acting on anything. Without a usable connection it still waits (backoff). */
static void worker_wait(bf_worker *w, int poll_ms)
{
    bf_err err = bf__wait_notify(w->e, w->wake[0], poll_ms);
    if (err != BF_OK && err != BF_ERR_TIMEOUT) {
        struct pollfd pfd = {.fd = w->wake[0], .events = POLLIN};
        (void)poll(&pfd, 1, poll_ms);
    }
}

bf_err bf_worker_run(bf_worker *w, bool until_idle)
{
    if (w == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    int backoff_ms = 100;
    bool failing = false; /* a streak of failures is logged once, at its first */
    while (!atomic_load(&w->stop)) {
        bf_err err = BF_OK;
        if (!w->has_claim) {
            err = bf_worker_claim(w, NULL, NULL);
            if (err == BF_ERR_NO_WORK) {
                if (until_idle)
                    break;
                worker_wait(w, 1000);
                continue;
            }
        }
        if (err == BF_OK) {
            bf_step_info info;
            err = bf_worker_step(w, &info);
        }
        if (err == BF_OK) {
            backoff_ms = 100;
            failing = false;
            continue;
        }
        /* the database is unreachable or refused: back off, keep the stop flag honoured */
        bf__log(w->e, failing ? BF_LOG_DEBUG : BF_LOG_WARN, "worker: %s", w->e->diag);
        failing = true;
        if (err != BF_ERR_UNAVAILABLE && err != BF_ERR_RETRYABLE && err != BF_ERR_TIMEOUT) {
            (void)bf_worker_release(w);
            return err;
        }
        worker_wait(w, backoff_ms);
        backoff_ms = backoff_ms < 5000 ? backoff_ms * 2 : 5000;
    }
    return bf_worker_release(w);
}

void bf_worker_stop(bf_worker *w)
{
    if (w == NULL)
        return;
    atomic_store(&w->stop, true);
    char b = 1;
    ssize_t n = write(w->wake[1], &b, 1); /* async-signal-safe wakeup */
    (void)n;
}

bf_err bf_worker_new(bf_worker **out, bf_engine *engine, const bf_worker_hooks *hooks)
{
    if (out == NULL || engine == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    bf_worker *w = calloc(1, sizeof *w);
    if (w == NULL)
        return BF_ERR_NOMEM;
    w->e = engine;
    if (hooks != NULL)
        w->hooks = *hooks;
    atomic_init(&w->stop, false);
    if (pipe2(w->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        free(w);
        return BF_ERR_IO;
    }
    *out = w;
    return BF_OK;
}

void bf_worker_free(bf_worker *w)
{
    if (w == NULL)
        return;
    if (w->has_claim)
        (void)bf_worker_release(w);
    bf__unlisten(w->e); /* the engine outlives the worker: stop queueing notifications */
    close(w->wake[0]);
    close(w->wake[1]);
    free(w);
}
