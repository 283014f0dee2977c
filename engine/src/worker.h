/*
 * worker.h - what worker.c (claims, steps, the worker loop) and batch.c (one step's batches)
 * share inside the engine: the worker's state and the batch entry points.
 */
#ifndef BUZZ_ENGINE_WORKER_H
#define BUZZ_ENGINE_WORKER_H

#include "internal.h"

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

#endif
