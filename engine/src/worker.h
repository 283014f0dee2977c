/*
 * worker.h - what worker.c (steps, transitions, the worker loop), worker_claim.c (the claim),
 * worker_throttle.c (throttling around a step) and batch.c (one step's batches) share inside
 * the engine: the worker's state, the batch entry points and the worker's own helpers.
 */
#ifndef BUZZ_ENGINE_WORKER_H
#define BUZZ_ENGINE_WORKER_H

#include "internal.h"

/* The fence of a statement that extends a live claim (the renewal, the throttle's state write
 * with its renewal): it matches only while this worker's claim of this generation is still
 * unexpired and the backfill still runs or validates. $1 id, $2 generation, $3 owner. */
#define BF__LIVE_CLAIM_FENCE                                                                       \
    " WHERE id = $1 AND generation = $2::bigint AND claim_owner = $3"                              \
    " AND claim_expires_at > clock_timestamp() AND state IN ('running', 'validating')"

struct bf_worker {
    bf_engine *e;
    bf_worker_hooks hooks;
    atomic_bool stop;
    int wake[2]; /* self-pipe: bf_worker_stop() writes, the idle wait polls */

    /* the held claim; meaningful only while has_claim, except that after a loss the fields
     * still name the lost claim, so that the attempt can be recorded (fenced) */
    bool has_claim;
    char id[BF_ID_MAX + 1];
    size_t index;
    const bf_compiled *c;
    int64_t generation;
    bf_state state;
    char bound[BF_KEY_TEXT_MAX]; /* text[] literal */
    bool bound_empty;
    bool has_checkpoint;
    char checkpoint[BF_KEY_TEXT_MAX]; /* text[] literal */
    bool prereq_checked;
    bool validation_locked; /* this session holds the validation lock of id */
    bool validation_failed; /* worker_fail records a failed validation as the row's latest */

    /* for log records: CLOCK_MONOTONIC start of the step in progress (0 outside a step), and
     * the row's progress counters as of the claim plus every batch.committed reported since,
     * so that a failed step's committed batches are reported too (worker_report_partial) */
    int64_t step_started_us;
    int64_t seen_batches, seen_rows, seen_touched;

    /* throttling of the held claim (throttle.c): the adaptive batch size (0 until the first
     * step), what the row's batch_size_current and throttle fields say (as this worker wrote
     * them), when the signals were last checked and since when it waits (monotonic us) */
    int size;
    int size_written;
    char throttle_signal[24];
    char throttle_value[64];
    int64_t checked_us;
    int64_t throttled_us;
    /* when this worker last knew its claim extended (claimed, a fence committed, renewed): a
     * throttled worker renews once a third of the lease has passed since */
    int64_t extended_us;
    /* the rate controller (throttle_rate.h): when this worker last sampled its signal and
     * wrote the row's "latency" value (monotonic us), the failed query's SQLSTATE ("" when it
     * answered), and the batches a step may commit (0: the engine's step_batches) */
    int64_t rate_checked_us;
    int64_t rate_written_us;
    char rate_failed[8];
    int step_batches;
    /* the time this claim's batches took, which the adaptive size is fitted to */
    bf_size_model sizing;
    /* collapse detection (throttle.c bf__slow_judge): this claim's recent steps, whether the
     * last one was slow (reason "" when not) and what it saw, what the row's slow_value says
     * (as this worker wrote it), and since when it is slow (monotonic us) */
    bf_slow_model slow;
    char slow_reason[16];
    char slow_value[64];
    char slow_written[64];
    int64_t slow_us;
    /* the old-writer watchdog (watch.c): when this claim last read what it saw (monotonic us) */
    int64_t watch_checked_us;
};

typedef struct loop_result {
    long batches, rows, touched;
    long waiters; /* most sessions a batch blocked at its COMMIT (when watched), else 0 */
} loop_result;

/* "%lld" of v into buf (a statement parameter) */
static inline void bf__param_int(char *buf, size_t cap, long long v)
{
    bf__format(buf, cap, "%lld", v);
}

/* One step of the declarative form: one CALL of the definition's loop procedure (up to
 * step_batches batches, none started after step_ms), with the sessions a batch blocks counted
 * when watch > 0. out: what the committed batches did; cp: the last committed checkpoint. */
bf_err bf__batch_loop(bf_worker *w, int watch, loop_result *out, char *cp);
/* One batch of the callback form: keys into bf_batch, the definition's mutate callback, the
 * fence, COMMIT, in one transaction. detail: the callback's own diagnostic. */
bf_err bf__batch_callback(bf_worker *w, int watch, loop_result *out, char *cp, char *detail,
                          size_t detail_len);
/* After a loop step failed, on its own session: what its committed batches did (the loop's
 * session setting for the generation and the checkpoint start_cp it started from); false when
 * none of its batches committed. */
bool bf__loop_progress(bf_worker *w, const char *start_cp, int64_t *batches, int64_t *rows,
                       int64_t *touched, char *cp);

/* ---- the worker's helpers (worker.c, worker_claim.c, worker_throttle.c) ---- */

/* A record about the held (or just lost) claim: its id, generation, checkpoint (after the
 * event) and the definition's batch size; the duration of the step so far when in one. */
bf_log_record bf__worker_record(const bf_worker *w, bf_log_level level, bf_event event);

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
                       bf_step_info *info);

void bf__worker_drop_claim(bf_worker *w);

int bf__worker_max_attempts(const bf_compiled *c);

/* A fenced renewal matched nothing: the claim is gone (a pause, a takeover, its expiry). */
bf_err bf__worker_claim_gone(bf_worker *w);

/* throttle.end for a throttle in progress (its signal cleared): the signal changed, or the
 * claim that waited on it ended. */
void bf__worker_throttle_end(bf_worker *w);

/* Handle the outcome of something that failed while holding the claim. A fenced-out commit is
 * a lost claim when a pause or takeover advanced the generation (bf__worker_fail() then matches
 * nothing); when only this owner's own lease ran out it is a failed attempt and counts, or a
 * batch that always outlasts its lease would be retried forever. */
bf_err bf__step_failed(bf_worker *w, bf_err err, const char *detail, bf_step_info *info);

/* After a step's batches (size keys each at most): judge it against the claim's recent median
 * and log slow.start / slow.end when that changes; the row follows at the next worker_observe. */
void bf__worker_slow_judge(bf_worker *w, long batches, long keys, int size, int64_t elapsed_us);

bf_err bf__step_lost(bf_worker *w, bf_step_info *info);
/* worker_fail.c: the fenced transitions of the claim holder, running -> validating (the
 * checkpoint set to the bound) and validating -> completed (detail: the validation's); each
 * BF_ERR_STALE, the claim dropped, when the fence matched nothing. */
bf_err bf__worker_enter_validating(bf_worker *w);
bf_err bf__worker_complete(bf_worker *w, const char *detail);
/* The bounded reason of a failure: "stop" when a stop cancelled it, "fence" for a stale owner,
 * the SQLSTATE class of the statement that failed, else "timeout" or the error class. buf: 3
 * bytes. */
const char *bf__worker_reason(const bf_engine *e, bf_err err, char *buf);

/* Before a step's batches, with a latency target: the controller's rate, its signal sampled at
 * most every check_ms (throttle_rate.c). *rate: keys/s, 0 before the first sample. */
bf_err bf__step_rate(bf_worker *w, const bf_throttle_config *cfg, double *rate, bf_step_info *info);

/* Before a step's batches: the health signals, at most every check_ms. *tripped: the step
 * waited instead of running batches. A signal no longer tripped clears the row's state. */
bf_err bf__step_health(bf_worker *w, const bf_throttle_config *cfg, bf_step_info *info,
                       bool *tripped);

/* After a step's batches: the next adaptive size from the time they took (halved when a batch
 * blocked lock_waiters or more sessions), then the rows-per-second ceilings and the rate
 * controller's pace (ctl_rate, 0: none), the lowest of them setting the wait. */
bf_err bf__step_after_batches(bf_worker *w, const bf_throttle_config *cfg, double ctl_rate,
                              const loop_result *done, int64_t started_us, bf_step_info *info);

#endif
