/*
 * throttle_rate.h - the rate controller inside the engine (throttle_rate.c, throttle.c,
 * docs/throttling.md "holding a latency target"): the control law, pure and clocked by its
 * caller, the read of its signal, and the per-definition state the process's bf_throttle keeps.
 */
#ifndef BUZZ_ENGINE_THROTTLE_RATE_H
#define BUZZ_ENGINE_THROTTLE_RATE_H

#include "internal.h"

/* A step under the controller commits one batch of at most the keys of this long at the
 * current rate, so its waits come often and short instead of after a long burst. */
#define BF_RATE_QUANTUM_MS 50

/* The law's parameters (from a bf_throttle_config: bf__rate_law_of). */
typedef struct bf_rate_law {
    double target_ms;   /* the signal should stay at or below this */
    double min, max;    /* keys/s; max 0: no bound but the pace's */
    double increase;    /* keys/s added per second at or below the target; 0: bound / 10 */
    double keep;        /* share of the rate a decrease keeps, (0, 1) */
    int64_t holdoff_us; /* a decrease waits this long after the previous one (the signal lags
                           the rate: one window must see the new rate before the next cut) */
} bf_rate_law;

/* One controller's state. Zeroed: not started. */
typedef struct bf_rate_state {
    double rate;      /* keys/s; 0 until the first sample, which starts it at min */
    double signal_ms; /* the last sample; NAN when unknown */
    double pace;      /* the fastest keys/s the steps showed recently (0: none yet) */
    int64_t at_us;    /* the last sample (the caller's clock) */
    int64_t decreased_us;
    bool decreased; /* decreased_us is meaningful */
    unsigned long long decreases, increases;
} bf_rate_state;

void bf__rate_law_of(const bf_throttle_config *cfg, bf_rate_law *out);
/* The highest rate in force: max, or twice the pace when lower or max is 0; never below min;
 * 0 when neither is known. Pure. */
double bf__rate_bound(const bf_rate_law *law, const bf_rate_state *s);
/* One sample of the signal (NAN: unknown) at now_us: above the target the rate is multiplied
 * by keep (once per holdoff), at or below it grows by increase per second since the previous
 * sample, within [min, bound]; unknown holds it. Pure: the clock is the caller's. */
void bf__rate_update(const bf_rate_law *law, bf_rate_state *s, double signal_ms, int64_t now_us);
/* A step passed keys keys in elapsed_us of batches: the pace the bound follows. Pure. */
void bf__rate_observe_pace(bf_rate_state *s, long keys, int64_t elapsed_us);

/* Run latency_sql: *ms its value (NAN when NULL or not a number), window its second column
 * ("" when none; cap bytes). An error of the query itself: BF_OK with *failed set and the
 * SQLSTATE in window; a lost connection: the error. */
bf_err bf__rate_read(bf_engine *e, const char *sql, double *ms, bool *failed, char *window,
                     size_t cap);

/* The process's controllers, by definition (throttle.c; thread-safe). bf__rate_sample applies
 * one sample unless window (non-empty) is the one the last sample saw, and copies the state
 * into *out; bf__rate_pace feeds a step's pace; bf__rate_state copies it (false when id never
 * sampled). */
void bf__rate_sample(bf_throttle *t, const char *id, const bf_rate_law *law, double signal_ms,
                     const char *window, int64_t now_us, bf_rate_state *out);
void bf__rate_pace(bf_throttle *t, const char *id, long keys, int64_t elapsed_us);
bool bf__rate_state(bf_throttle *t, const char *id, bf_rate_state *out);

/* bf_throttle_get with the latency query too (latency: latency_len bytes). */
void bf__throttle_get(bf_throttle *t, const char *id, bf_throttle_config *out, char *sql,
                      size_t sql_len, char *latency, size_t latency_len);

#endif
