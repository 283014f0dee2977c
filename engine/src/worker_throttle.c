/*
 * worker_throttle.c - a worker's throttling around its steps (worker.c; the rules are
 * throttle.c's): the health signals before a step's batches, the rate controller's pace, the
 * adaptive size and the ceilings after them, and the row's throttle state, written with a
 * renewal of the claim.
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
 * Write the throttle state (signal NULL: not throttled) and the adaptive batch size to the row
 * and renew the claim, in one statement fenced like a renewal; skipped when nothing changed
 * that is worth a write (the size by less than a tenth) unless renew is asked. Logs
 * throttle.start and throttle.end when the signal changes. BF_ERR_STALE (claim dropped) when
 * the claim is gone.
 */
static bf_err worker_observe(bf_worker *w, const char *signal, const char *value, bool renew)
{
    bf_engine *e = w->e;
    char sig_buf[sizeof w->throttle_signal], val_buf[sizeof w->throttle_value];
    bf__copy(sig_buf, sizeof sig_buf, signal); /* the caller may pass w's own fields */
    bf__copy(val_buf, sizeof val_buf, sig_buf[0] ? value : NULL);
    signal = sig_buf;
    value = val_buf;
    bool same_signal = strcmp(w->throttle_signal, signal) == 0;
    bool same = same_signal && strcmp(w->throttle_value, value) == 0;
    int diff = w->size - w->size_written;
    bool size_same = w->size_written > 0 && (diff < 0 ? -diff : diff) * 10 < w->size_written;
    bool slow_same = strcmp(w->slow_written, w->slow_value) == 0;
    if (same && size_same && slow_same && !renew)
        return BF_OK;
    char slow[sizeof w->slow_value];
    bf__copy(slow, sizeof slow, w->slow_value);
    char gen[24], lease[16], size[16];
    bf__param_int(gen, sizeof gen, w->generation);
    bf__param_int(lease, sizeof lease, e->lease_ms);
    bf__param_int(size, sizeof size, w->size);
    const char *params[] = {w->id,
                            gen,
                            e->owner,
                            size,
                            signal[0] ? signal : NULL,
                            signal[0] ? value : NULL,
                            lease,
                            slow[0] ? slow : NULL};
    PGresult *r = NULL;
    bf_err err = bf__exec(
        e, &r, "throttle state",
        "UPDATE buzz_backfill.backfill SET batch_size_current = $4::integer,"
        " throttled_since = CASE WHEN $5::text IS NULL THEN NULL"
        "  WHEN throttle_signal IS NOT DISTINCT FROM $5 THEN throttled_since"
        "  ELSE clock_timestamp() END,"
        " throttle_signal = $5, throttle_value = $6,"
        " slow_since = CASE WHEN $8::text IS NULL THEN NULL"
        "  WHEN slow_value IS NOT NULL THEN slow_since ELSE clock_timestamp() END,"
        " slow_value = $8,"
        " claim_expires_at = clock_timestamp() + $7::integer * interval '1 ms'" BF__LIVE_CLAIM_FENCE
        " RETURNING 1",
        8, params);
    if (err != BF_OK)
        return err;
    int n = PQntuples(r);
    PQclear(r);
    if (n == 0)
        return bf__worker_claim_gone(w);
    w->size_written = w->size;
    bf__copy(w->slow_written, sizeof w->slow_written, slow);
    w->extended_us = bf__monotonic_us();
    if (!same_signal)
        bf__worker_throttle_end(w);
    if (!same_signal && signal[0]) {
        w->throttled_us = bf__monotonic_us();
        bf_log_record rec = bf__worker_record(w, BF_LOG_INFO, BF_EV_THROTTLE_START);
        rec.reason = signal;
        bf__log_event(e, &rec, "%s: throttled by %s: %s", w->id, signal, value);
    }
    bf__copy(w->throttle_signal, sizeof w->throttle_signal, signal);
    bf__copy(w->throttle_value, sizeof w->throttle_value, value);
    return BF_OK;
}

/* Wait ms holding the claim and no row lock; a stop ends the wait at once. A throttle can
 * outlast the lease over many waits, so the claim is renewed (with the throttle state)
 * whenever a third of the lease has passed since it was last extended; without that a sibling
 * would take over a working owner and count an attempt. BF_ERR_STALE when the claim is gone. */
static bf_err worker_throttle_wait(bf_worker *w, int64_t ms)
{
    int64_t until = bf__monotonic_us() + ms * 1000;
    for (;;) {
        int64_t now = bf__monotonic_us();
        int64_t renew_at = w->extended_us + (int64_t)w->e->lease_ms * 1000 / 3;
        if (atomic_load(&w->stop))
            return BF_OK;
        if (now >= renew_at) {
            bf_err err = worker_observe(w, w->throttle_signal, w->throttle_value, true);
            if (err != BF_OK)
                return err;
            continue;
        }
        if (now >= until)
            return BF_OK;
        int64_t next = until < renew_at ? until : renew_at;
        struct pollfd pfd = {.fd = w->wake[0], .events = POLLIN};
        (void)poll(&pfd, 1, (int)((next - now + 999) / 1000));
    }
}

/* Throttled: record signal and row_value, wait ms, report the step with value. */
static bf_err step_throttled_as(bf_worker *w, const char *signal, const char *row_value,
                                const char *value, int64_t ms, bf_step_info *info)
{
    bf_err err = worker_observe(w, signal, row_value, false);
    if (err == BF_OK)
        err = worker_throttle_wait(w, ms);
    if (err == BF_ERR_STALE && !w->has_claim)
        return bf__step_lost(w, info);
    if (err != BF_OK)
        return bf__step_failed(w, err, "", info);
    if (info->step == BF_STEP_IDLE)
        info->step = BF_STEP_THROTTLED;
    bf__format(info->detail, sizeof info->detail, "throttled by %s: %s (waited %lld ms)", signal,
               value, (long long)ms);
    return BF_OK;
}

static bf_err step_throttled(bf_worker *w, const char *signal, const char *value, int64_t ms,
                             bf_step_info *info)
{
    return step_throttled_as(w, signal, value, value, ms, info);
}

/* Before a step's batches: the health signals, at most every check_ms. *tripped: the step
 * waited instead of running batches. A signal no longer tripped clears the row's state. */
bf_err bf__step_health(bf_worker *w, const bf_throttle_config *cfg, bf_step_info *info,
                       bool *tripped)
{
    *tripped = false;
    bool any = cfg->replica_lag_bytes > 0 || cfg->lock_waiters > 0 || cfg->xact_age_s > 0 ||
               cfg->xid_age_pct > 0 || cfg->custom_sql != NULL;
    int64_t now = bf__monotonic_us();
    if (any && now - w->checked_us < (int64_t)cfg->check_ms * 1000)
        return BF_OK;
    bf_throttle_verdict v = {0};
    if (any) {
        w->checked_us = now;
        bf_err err = bf__throttle_check(w->e, w->c, cfg, &v);
        if (err != BF_OK)
            return bf__step_failed(w, err, "", info);
    }
    if (v.signal != NULL) {
        *tripped = true;
        w->checked_us = 0; /* check again right after the wait */
        return step_throttled(w, v.signal, v.value, v.wait_ms, info);
    }
    if (w->throttle_signal[0] && strcmp(w->throttle_signal, "rate") != 0 &&
        strcmp(w->throttle_signal, "latency") != 0) { /* the paces end after the batches */
        bf_err err = worker_observe(w, NULL, NULL, false);
        if (err == BF_ERR_STALE && !w->has_claim)
            return bf__step_lost(w, info);
        return err;
    }
    return BF_OK;
}

/* Before a step's batches, with a latency target: the controller's rate, its signal sampled at
 * most every check_ms (throttle_rate.c). *rate: keys/s, 0 before the first sample. */
bf_err bf__step_rate(bf_worker *w, const bf_throttle_config *cfg, double *rate, bf_step_info *info)
{
    *rate = 0;
    bf_throttle *t = w->e->throttle;
    int64_t now = bf__monotonic_us();
    bf_rate_state st;
    if (w->rate_checked_us != 0 && now - w->rate_checked_us < (int64_t)cfg->check_ms * 1000 &&
        bf__rate_state(t, w->id, &st)) {
        *rate = st.rate;
        return BF_OK;
    }
    w->rate_checked_us = now;
    double ms = NAN;
    bool failed = false;
    char window[64];
    bf_err err = bf__rate_read(w->e, cfg->latency_sql, &ms, &failed, window, sizeof window);
    if (err != BF_OK)
        return bf__step_failed(w, err, "", info);
    /* a query that fails counts as above the target (a signal that cannot be read is not
     * healthy), once per holdoff */
    bf__copy(w->rate_failed, sizeof w->rate_failed, failed ? window : NULL);
    bf_rate_law law;
    bf__rate_law_of(cfg, &law);
    bf__rate_sample(t, w->id, &law, failed ? INFINITY : ms, failed ? NULL : window, now, &st);
    *rate = st.rate;
    return BF_OK;
}

/* The row's value of the "latency" pace: "1200 keys/s, 31.2 ms (target 25 ms), 14 cuts". */
static void worker_rate_value(bf_worker *w, const bf_throttle_config *cfg, char *buf, size_t cap)
{
    bf_rate_state st;
    (void)bf__rate_state(w->e->throttle, w->id, &st);
    char sig[40];
    if (w->rate_failed[0])
        bf__format(sig, sizeof sig, "query failed (%s)", w->rate_failed);
    else if (isnan(st.signal_ms))
        bf__copy(sig, sizeof sig, "unknown");
    else
        bf__format(sig, sizeof sig, "%.1f ms", st.signal_ms);
    bf__format(buf, cap, "%.0f keys/s, %s (target %d ms), %llu cuts", st.rate, sig,
               cfg->latency_target_ms, st.decreases);
}

/* After a step's batches: the next adaptive size from the time they took (halved when a batch
 * blocked lock_waiters or more sessions), then the rows-per-second ceilings and the rate
 * controller's pace (ctl_rate, 0: none), the lowest of them setting the wait. */
bf_err bf__step_after_batches(bf_worker *w, const bf_throttle_config *cfg, double ctl_rate,
                              const loop_result *done, int64_t started_us, bf_step_info *info)
{
    int64_t elapsed_us = bf__monotonic_us() - started_us;
    int declared = w->c->def->batch_size;
    bf__worker_slow_judge(w, done->batches, done->rows, w->size, elapsed_us);
    bf__size_observe(&w->sizing, done->batches, done->rows, elapsed_us);
    w->size = bf__size_next(cfg, declared, w->size, &w->sizing);
    if (cfg->lock_waiters > 0 && done->waiters >= cfg->lock_waiters) {
        w->size = bf__size_clamp(cfg, declared, w->size / 2 > 0 ? w->size / 2 : 1);
        w->checked_us = 0;
        char value[64];
        bf__format(value, sizeof value, "%ld blocked by a batch (limit %d)", done->waiters,
                   cfg->lock_waiters);
        return step_throttled(w, "lock_waiters", value, cfg->wait_ms, info);
    }
    double def_rate = cfg->max_rows_per_second, rate = 0;
    bool paced = ctl_rate > 0 && (def_rate <= 0 || ctl_rate < def_rate);
    if (ctl_rate > 0)
        bf__rate_pace(w->e->throttle, w->id, done->rows, elapsed_us);
    if (paced)
        def_rate = ctl_rate;
    int64_t wait_us =
        bf__throttle_pass(w->e->throttle, w->id, def_rate, done->rows, started_us, &rate);
    if (wait_us > 1000 && paced && rate == def_rate) {
        /* the controller sets the wait: its state in the row, at most once a second (the
         * value changes with every sample) */
        char value[64], row[64];
        int64_t now = bf__monotonic_us();
        worker_rate_value(w, cfg, value, sizeof value);
        if (strcmp(w->throttle_signal, "latency") == 0 && now - w->rate_written_us < 1000000) {
            bf__copy(row, sizeof row, w->throttle_value);
        } else {
            bf__copy(row, sizeof row, value);
            w->rate_written_us = now;
        }
        return step_throttled_as(w, "latency", row, value, wait_us / 1000, info);
    }
    if (wait_us > 1000) {
        char value[64];
        bf__format(value, sizeof value, "%.0f rows/s", rate);
        return step_throttled(w, "rate", value, wait_us / 1000, info);
    }
    bool rate_ended =
        strcmp(w->throttle_signal, "rate") == 0 || strcmp(w->throttle_signal, "latency") == 0;
    bf_err err = worker_observe(w, rate_ended ? NULL : w->throttle_signal,
                                rate_ended ? NULL : w->throttle_value, false);
    if (err == BF_ERR_STALE && !w->has_claim)
        return bf__step_lost(w, info);
    return err;
}
