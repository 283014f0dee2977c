/*
 * throttle_rate.c - the rate controller's law and the read of its signal (throttle_rate.h,
 * docs/throttling.md "holding a latency target").
 *
 * Design notes
 *
 * A threshold that stops the backfill while the relay's latency is over a target and lets it
 * run flat out otherwise reacts a window late and then lets the next burst through: the tail
 * it is meant to hold is made of those bursts. The controller instead sets the keys per second
 * continuously, as TCP sets its window: while the relay's own latency (a value the relay
 * writes, measured over short windows) is at or below the target the rate grows by a fixed
 * amount per second; a window above the target multiplies it by keep. Additive increase and
 * multiplicative decrease settle where the backfill's load keeps the latency near the target,
 * and a sudden load on the relay halves the backfill's share at once.
 *
 * The increase is per second of the caller's clock, not per sample, so checking faster does
 * not recover faster; a decrease waits one holdoff (the check interval) after the previous one,
 * because the signal describes a window that the last cut has not reached yet. The rate stays
 * within [min, bound], where bound is the configured max or, when lower or unset, twice the
 * fastest pace the steps showed: a rate far above what the backfill can do would need many
 * cuts before one of them bites (wind-up). It starts at min: the first window has not been
 * seen yet, and the increase reaches the bound within ten seconds of good signal by default.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "throttle_rate.h"

void bf__rate_law_of(const bf_throttle_config *cfg, bf_rate_law *out)
{
    memset(out, 0, sizeof *out);
    out->target_ms = cfg->latency_target_ms;
    out->min = cfg->rate_min > 0 ? cfg->rate_min : 1;
    out->max = cfg->rate_max > 0 ? cfg->rate_max : 0;
    if (out->max > 0 && out->max < out->min)
        out->max = out->min;
    out->increase = cfg->rate_increase > 0 ? cfg->rate_increase : 0;
    int pct =
        cfg->rate_decrease_pct > 0 && cfg->rate_decrease_pct < 100 ? cfg->rate_decrease_pct : 50;
    out->keep = (100.0 - pct) / 100.0;
    out->holdoff_us = (int64_t)(cfg->check_ms > 0 ? cfg->check_ms : 1000) * 1000;
}

double bf__rate_bound(const bf_rate_law *law, const bf_rate_state *s)
{
    double bound = law->max;
    if (s->pace > 0 && (bound <= 0 || 2 * s->pace < bound))
        bound = 2 * s->pace;
    if (bound > 0 && bound < law->min)
        bound = law->min;
    return bound;
}

void bf__rate_update(const bf_rate_law *law, bf_rate_state *s, double signal_ms, int64_t now_us)
{
    if (s->rate <= 0) { /* the first sample: from the floor */
        s->rate = law->min;
        s->at_us = now_us;
    }
    int64_t dt = now_us > s->at_us ? now_us - s->at_us : 0;
    s->at_us = now_us;
    s->signal_ms = signal_ms;
    double bound = bf__rate_bound(law, s);
    if (isnan(signal_ms)) {
        /* unknown: hold (a stale or missing report says nothing about the relay) */
    } else if (signal_ms > law->target_ms) {
        if (!s->decreased || now_us - s->decreased_us >= law->holdoff_us) {
            s->rate *= law->keep;
            s->decreased = true;
            s->decreased_us = now_us;
            s->decreases++;
        }
    } else {
        double inc = law->increase > 0 ? law->increase : bound / 10;
        double before = s->rate;
        s->rate += inc * (double)dt / 1e6;
        if (bound > 0 && s->rate > bound)
            s->rate = bound;
        if (s->rate > before)
            s->increases++;
    }
    if (bound > 0 && s->rate > bound)
        s->rate = bound;
    if (s->rate < law->min)
        s->rate = law->min;
}

void bf__rate_observe_pace(bf_rate_state *s, long keys, int64_t elapsed_us)
{
    if (keys <= 0 || elapsed_us <= 0)
        return;
    double pace = (double)keys * 1e6 / (double)elapsed_us;
    /* the fastest recent pace, forgetting slowly (a slow step says little about the fastest) */
    s->pace = pace > s->pace * 0.95 ? pace : s->pace * 0.95;
}

bf_err bf__rate_read(bf_engine *e, const char *sql, double *ms, bool *failed, char *window,
                     size_t cap)
{
    *ms = NAN;
    *failed = false;
    if (cap > 0)
        window[0] = '\0';
    PGresult *r = NULL;
    bf_err err = bf__exec(e, &r, "latency query", sql, 0, NULL);
    if (err != BF_OK) {
        if (err == BF_ERR_UNAVAILABLE || e->conn == NULL)
            return err;
        *failed = true;
        bf__copy(window, cap, e->sqlstate[0] ? e->sqlstate : "?");
        return BF_OK;
    }
    if (PQntuples(r) >= 1 && PQnfields(r) >= 1 && !bf__isnull(r, 0, 0)) {
        const char *s = bf__field(r, 0, 0);
        char *end = NULL;
        double v = strtod(s, &end);
        if (end != s && *end == '\0' && isfinite(v))
            *ms = v;
    }
    if (PQntuples(r) >= 1 && PQnfields(r) >= 2 && !bf__isnull(r, 0, 1))
        bf__copy(window, cap, bf__field(r, 0, 1));
    PQclear(r);
    return BF_OK;
}
