/*
 * metrics.c - the counters and histograms of buzz-backfilld and their Prometheus text
 * exposition (format 0.0.4). The metric names, types and labels are listed in
 * docs/operating.md; this file is their only source.
 *
 * Design notes: the event path (srv_metrics_event, on every worker thread after every batch
 * step) does relaxed atomic adds into fixed arrays and never locks or allocates. Labels with
 * an open-ended wire form (a rollback or retry reason) go through a small lock-free table of
 * at most METRICS_REASON_SLOTS packed keys: a reason outside the engine's vocabulary (two-
 * character SQLSTATE class or a fixed word) counts as "other", and so does any reason once the
 * table is full, so no input can grow the exposition. Histograms keep per-bucket counts (made
 * cumulative when rendered), a count and a sum in microseconds. The batch duration is the mean
 * batch of a step (its duration over its batches), observed once per batch of the step.
 * Scrape-time values come from the caller (http.c reads PostgreSQL); a value it could not read
 * is left out, never shown as zero.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buzz/token.h"
#include "metrics.h"

#define METRICS_METHODS_MAX  32
#define METRICS_CODES        17 /* StatusCode values 0..16 */
#define METRICS_REASON_SLOTS 64
#define METRICS_AUTH_REASONS 12

/* bucket upper bounds, microseconds */
static const int64_t metrics_bounds_us[] = {500,     1000,     2500,     5000,    10000,   25000,
                                            50000,   100000,   250000,   500000,  1000000, 2500000,
                                            5000000, 10000000, 30000000, 60000000};
#define METRICS_BUCKETS ((int)(sizeof metrics_bounds_us / sizeof metrics_bounds_us[0]))

typedef struct metrics_hist {
    atomic_ullong bucket[METRICS_BUCKETS + 1]; /* last: above every bound */
    atomic_ullong count;
    atomic_ullong sum_us;
} metrics_hist;

#define METRICS_THROTTLE_SIGNALS 7
#define METRICS_SLOW_REASONS     2

/* A reason label: up to 8 bytes packed into the key (0: free slot). */
typedef struct metrics_reasons {
    atomic_ullong key[METRICS_REASON_SLOTS];
    atomic_ullong count[METRICS_REASON_SLOTS];
    atomic_ullong other;
} metrics_reasons;

enum { CLAIM_ACQUIRED, CLAIM_TAKEOVER, CLAIM_RENEWED, CLAIM_LOST, CLAIM_RELEASED, CLAIM_KINDS };
static const char *const metrics_claim_names[CLAIM_KINDS] = {"acquired", "takeover", "renewed",
                                                             "lost", "released"};

/* authentication and authorization refusals: the token reasons (bft_reason), then these */
enum { AUTH_NO_AUTHENTICATOR = 9, AUTH_MISSING_CAPABILITY = 10, AUTH_OTHER = 11 };

struct srv_metrics {
    char version[64];
    int64_t start_time_s;
    /* RPC: methods of the registered services, then "unknown" */
    const ProtobufCServiceDescriptor *services[4];
    unsigned service_base[4];
    size_t n_services;
    char method_names[METRICS_METHODS_MAX + 1][96];
    unsigned n_methods;
    atomic_ullong rpc_requests[METRICS_METHODS_MAX + 1][METRICS_CODES];
    metrics_hist rpc_duration[METRICS_METHODS_MAX + 1];
    atomic_ullong auth_rejections[METRICS_AUTH_REASONS];

    /* events */
    atomic_ullong events[BF_EV_COUNT];
    atomic_ullong claims[CLAIM_KINDS];
    atomic_ullong batches_committed, batches_fenced_out, rows_changed, keys_passed;
    atomic_ullong checkpoint_advances, bound_reached, blocked, failed;
    atomic_ullong validations_passed, validations_failed;
    atomic_ullong actions_applied, actions_rejected;
    atomic_ullong db_lost, db_restored;
    atomic_ullong listener_restarts;
    metrics_reasons rolled_back, retries;
    metrics_hist step_duration, batch_duration, validation_duration;

    /* throttling by signal (metrics_throttle_signals; the last slot is "other") */
    atomic_ullong throttles[METRICS_THROTTLE_SIGNALS + 1];
    atomic_ullong throttled_us[METRICS_THROTTLE_SIGNALS + 1];
    atomic_llong throttled_now[METRICS_THROTTLE_SIGNALS + 1];
    /* slow steps by reason (metrics_slow_reasons; the last slot is "other") */
    atomic_ullong slows[METRICS_SLOW_REASONS + 1];
    atomic_llong slow_now[METRICS_SLOW_REASONS + 1];

    atomic_ullong scrape_db_errors;
};

/* The engine's throttle signals (bf_throttle_verdict.signal and "rate"): a bounded label. */
static const char *const metrics_throttle_signals[METRICS_THROTTLE_SIGNALS] = {
    "replica_lag", "lock_waiters", "xact_age", "xid_age", "custom", "rate", "latency"};

static const char *metrics_throttle_label(int i)
{
    return i < METRICS_THROTTLE_SIGNALS ? metrics_throttle_signals[i] : "other";
}

static int metrics_throttle_index(const char *signal)
{
    for (int i = 0; signal != NULL && i < METRICS_THROTTLE_SIGNALS; i++)
        if (strcmp(signal, metrics_throttle_signals[i]) == 0)
            return i;
    return METRICS_THROTTLE_SIGNALS; /* other */
}

/* How a step was slow (engine bf__slow_judge): a bounded label. */
static const char *const metrics_slow_reasons[METRICS_SLOW_REASONS] = {"batch_time", "throughput"};

static const char *metrics_slow_label(int i)
{
    return i < METRICS_SLOW_REASONS ? metrics_slow_reasons[i] : "other";
}

static int metrics_slow_index(const char *reason)
{
    for (int i = 0; reason != NULL && i < METRICS_SLOW_REASONS; i++)
        if (strcmp(reason, metrics_slow_reasons[i]) == 0)
            return i;
    return METRICS_SLOW_REASONS; /* other */
}

static void metrics_add(atomic_ullong *c, unsigned long long n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static unsigned long long metrics_get(atomic_ullong *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

static void metrics_observe(metrics_hist *h, int64_t us, unsigned long long times)
{
    if (us < 0)
        return;
    int b = 0;
    while (b < METRICS_BUCKETS && us > metrics_bounds_us[b])
        b++;
    metrics_add(&h->bucket[b], times);
    metrics_add(&h->count, times);
    metrics_add(&h->sum_us, (unsigned long long)us * times);
}

/* ---- reasons ------------------------------------------------------------------------------ */

/* The engine's reason words (bf_log_record.reason besides SQLSTATE classes: worker.c's
 * worker_reason and classify.c's error class names); "other" stands for anything else. */
static const char *const metrics_reason_words[] = {
    "stop",           "fence",       "timeout",    "lost",        "lease",
    "cancel",         "deadline",    "retryable",  "unavailable", "prerequisite",
    "data_invariant", "batch_bound", "definition", "validation",  "internal"};
#define METRICS_REASON_WORDS ((int)(sizeof metrics_reason_words / sizeof *metrics_reason_words))
#define METRICS_WORD_KEY     0x10000ull /* + word index; a SQLSTATE class packs below it */

/* A reason from the engine's bounded vocabulary as a key; 0 when it is not one. */
static unsigned long long metrics_reason_key(const char *r)
{
    if (r == NULL)
        return 0;
    bool sqlstate = strnlen(r, 3) == 2;
    for (int i = 0; sqlstate && i < 2; i++)
        sqlstate = (r[i] >= '0' && r[i] <= '9') || (r[i] >= 'A' && r[i] <= 'Z');
    if (sqlstate)
        return (unsigned long long)(unsigned char)r[0] | (unsigned long long)(unsigned char)r[1]
                                                             << 8;
    for (int i = 0; i < METRICS_REASON_WORDS; i++)
        if (strcmp(r, metrics_reason_words[i]) == 0)
            return METRICS_WORD_KEY + (unsigned long long)i;
    return 0;
}

/* The label of a key metrics_reason_key made, into buf (at least 3 bytes). */
static const char *metrics_reason_label(unsigned long long key, char *buf)
{
    if (key >= METRICS_WORD_KEY)
        return metrics_reason_words[key - METRICS_WORD_KEY];
    buf[0] = (char)(key & 0xff);
    buf[1] = (char)(key >> 8);
    buf[2] = '\0';
    return buf;
}

static void metrics_reason_add(metrics_reasons *t, const char *reason, unsigned long long n)
{
    unsigned long long key = metrics_reason_key(reason);
    if (key != 0) {
        for (int i = 0; i < METRICS_REASON_SLOTS; i++) {
            unsigned long long cur = atomic_load(&t->key[i]);
            if (cur == 0) {
                unsigned long long expected = 0;
                if (atomic_compare_exchange_strong(&t->key[i], &expected, key))
                    cur = key;
                else
                    cur = expected; /* another thread took the slot */
            }
            if (cur == key) {
                metrics_add(&t->count[i], n);
                return;
            }
        }
    }
    metrics_add(&t->other, n);
}

/* ---- lifetime ----------------------------------------------------------------------------- */

bf_err srv_metrics_new(srv_metrics **out, const char *version,
                       const ProtobufCServiceDescriptor *const *services, size_t n)
{
    if (out == NULL || n > 4 || (n > 0 && services == NULL))
        return BF_ERR_INVALID_ARGUMENT;
    srv_metrics *m = calloc(1, sizeof *m); /* zeroed atomics are valid zero counters */
    if (m == NULL)
        return BF_ERR_NOMEM;
    snprintf(m->version, sizeof m->version, "%s", version ? version : "unknown");
    m->start_time_s = (int64_t)time(NULL);
    for (size_t s = 0; s < n; s++) {
        const ProtobufCServiceDescriptor *d = services[s];
        if (m->n_methods + d->n_methods > METRICS_METHODS_MAX) {
            free(m);
            return BF_ERR_INVALID_ARGUMENT;
        }
        m->services[s] = d;
        m->service_base[s] = m->n_methods;
        for (unsigned i = 0; i < d->n_methods; i++)
            snprintf(m->method_names[m->n_methods++], sizeof m->method_names[0], "%s.%s",
                     d->short_name, d->methods[i].name);
    }
    m->n_services = n;
    snprintf(m->method_names[m->n_methods], sizeof m->method_names[0], "unknown");
    *out = m;
    return BF_OK;
}

void srv_metrics_free(srv_metrics *m)
{
    free(m);
}

/* ---- recording ---------------------------------------------------------------------------- */

void srv_metrics_event(void *arg, const bf_log_record *rec)
{
    srv_metrics *m = arg;
    if (m == NULL || rec == NULL || (int)rec->event < 0 || rec->event >= BF_EV_COUNT)
        return;
    metrics_add(&m->events[rec->event], 1);
    switch (rec->event) {
    case BF_EV_CLAIM_ACQUIRED:
        metrics_add(&m->claims[CLAIM_ACQUIRED], 1);
        break;
    case BF_EV_CLAIM_TAKEOVER:
        metrics_add(&m->claims[CLAIM_TAKEOVER], 1);
        break;
    case BF_EV_CLAIM_RENEWED:
        metrics_add(&m->claims[CLAIM_RENEWED], 1);
        break;
    case BF_EV_CLAIM_LOST:
        metrics_add(&m->claims[CLAIM_LOST], 1);
        break;
    case BF_EV_CLAIM_RELEASED:
        metrics_add(&m->claims[CLAIM_RELEASED], 1);
        break;
    case BF_EV_BATCH_COMMITTED:
        if (rec->batches > 0) {
            metrics_add(&m->batches_committed, (unsigned long long)rec->batches);
            metrics_add(&m->checkpoint_advances, 1);
            if (rec->duration_us >= 0)
                metrics_observe(&m->batch_duration, rec->duration_us / rec->batches,
                                (unsigned long long)rec->batches);
        }
        if (rec->touched > 0)
            metrics_add(&m->rows_changed, (unsigned long long)rec->touched);
        if (rec->rows > 0)
            metrics_add(&m->keys_passed, (unsigned long long)rec->rows);
        metrics_observe(&m->step_duration, rec->duration_us, 1);
        break;
    case BF_EV_BATCH_FENCED_OUT:
        metrics_add(&m->batches_fenced_out, 1);
        break;
    case BF_EV_BATCH_ROLLED_BACK:
        metrics_reason_add(&m->rolled_back, rec->reason, 1);
        break;
    case BF_EV_ATTEMPT_RETRY:
        metrics_reason_add(&m->retries, rec->reason, 1);
        break;
    case BF_EV_BACKFILL_BLOCKED:
        metrics_add(&m->blocked, 1);
        break;
    case BF_EV_BACKFILL_FAILED:
        metrics_add(&m->failed, 1);
        break;
    case BF_EV_BACKFILL_VALIDATING:
        metrics_add(&m->bound_reached, 1);
        break;
    case BF_EV_VALIDATION_PASSED:
        metrics_add(&m->validations_passed, 1);
        metrics_observe(&m->validation_duration, rec->duration_us, 1);
        break;
    case BF_EV_VALIDATION_FAILED:
        metrics_add(&m->validations_failed, 1);
        metrics_observe(&m->validation_duration, rec->duration_us, 1);
        break;
    case BF_EV_ACTION_APPLIED:
        metrics_add(&m->actions_applied, 1);
        break;
    case BF_EV_ACTION_REJECTED:
        metrics_add(&m->actions_rejected, 1);
        break;
    case BF_EV_DB_CONNECTION_LOST:
        metrics_add(&m->db_lost, 1);
        break;
    case BF_EV_DB_CONNECTION_RESTORED:
        metrics_add(&m->db_restored, 1);
        break;
    case BF_EV_LISTENER_RESTARTED:
        metrics_add(&m->listener_restarts, 1);
        break;
    case BF_EV_THROTTLE_START: {
        int i = metrics_throttle_index(rec->reason);
        metrics_add(&m->throttles[i], 1);
        atomic_fetch_add_explicit(&m->throttled_now[i], 1, memory_order_relaxed);
        break;
    }
    case BF_EV_THROTTLE_END: {
        int i = metrics_throttle_index(rec->reason);
        if (rec->duration_us > 0)
            metrics_add(&m->throttled_us[i], (unsigned long long)rec->duration_us);
        atomic_fetch_sub_explicit(&m->throttled_now[i], 1, memory_order_relaxed);
        break;
    }
    case BF_EV_SLOW_START: {
        int i = metrics_slow_index(rec->reason);
        metrics_add(&m->slows[i], 1);
        atomic_fetch_add_explicit(&m->slow_now[i], 1, memory_order_relaxed);
        break;
    }
    case BF_EV_SLOW_END:
        atomic_fetch_sub_explicit(&m->slow_now[metrics_slow_index(rec->reason)], 1,
                                  memory_order_relaxed);
        break;
    default:
        break;
    }
}

void srv_metrics_rpc(srv_metrics *m, const ProtobufCServiceDescriptor *svc, unsigned method_index,
                     srv_code code, int64_t duration_us)
{
    if (m == NULL)
        return;
    unsigned idx = m->n_methods; /* unknown */
    for (size_t s = 0; svc != NULL && s < m->n_services; s++)
        if (m->services[s] == svc && method_index < svc->n_methods)
            idx = m->service_base[s] + method_index;
    unsigned c =
        (unsigned)code < METRICS_CODES ? (unsigned)code : BUZZ__BACKFILL__V1__STATUS_CODE__UNKNOWN;
    metrics_add(&m->rpc_requests[idx][c], 1);
    metrics_observe(&m->rpc_duration[idx], duration_us, 1);
}

void srv_metrics_auth_rejected(srv_metrics *m, bf_err err, const char *diag)
{
    if (m == NULL)
        return;
    int reason = AUTH_OTHER;
    if (err == BF_ERR_PERMISSION_DENIED) {
        reason = AUTH_MISSING_CAPABILITY;
    } else if (err == BF_ERR_UNAUTHENTICATED && diag != NULL) {
        if (strcmp(diag, "no authenticator configured") == 0)
            reason = AUTH_NO_AUTHENTICATOR;
        for (int r = BFT_REASON_MALFORMED; r <= BFT_REASON_MISSING; r++)
            if (strcmp(diag, bft_reason_str((bft_reason)r)) == 0)
                reason = r;
    }
    metrics_add(&m->auth_rejections[reason], 1);
}

static const char *metrics_auth_reason_name(int r)
{
    switch (r) {
    case AUTH_NO_AUTHENTICATOR:
        return "no_authenticator";
    case AUTH_MISSING_CAPABILITY:
        return "missing_capability";
    case AUTH_OTHER:
        return "other";
    default:
        return bft_reason_name((bft_reason)r);
    }
}

/* ---- exposition --------------------------------------------------------------------------- */

typedef struct metrics_buf {
    char *data;
    size_t len, cap;
    bool failed;
} metrics_buf;

static void metrics_printf(metrics_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void metrics_printf(metrics_buf *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = true;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)n;
        char *p = realloc(b->data, cap);
        if (p == NULL) {
            b->failed = true;
            return;
        }
        b->data = p;
        b->cap = cap;
    }
}

static void metrics_head(metrics_buf *b, const char *name, const char *type, const char *help)
{
    metrics_printf(b, "# HELP buzz_backfill_%s %s\n# TYPE buzz_backfill_%s %s\n", name, help, name,
                   type);
}

static void metrics_counter_value(metrics_buf *b, const char *name, const char *help,
                                  unsigned long long v)
{
    metrics_head(b, name, "counter", help);
    metrics_printf(b, "buzz_backfill_%s %llu\n", name, v);
}

static void metrics_counter(metrics_buf *b, const char *name, const char *help, atomic_ullong *c)
{
    metrics_counter_value(b, name, help, metrics_get(c));
}

/* One counter family by reason; returns the sum of the values it rendered. */
static unsigned long long metrics_reasons_render(metrics_buf *b, const char *name, const char *help,
                                                 metrics_reasons *t)
{
    metrics_head(b, name, "counter", help);
    unsigned long long sum = 0;
    for (int i = 0; i < METRICS_REASON_SLOTS; i++) {
        unsigned long long key = atomic_load(&t->key[i]);
        if (key == 0)
            break;
        char buf[3];
        unsigned long long v = metrics_get(&t->count[i]);
        sum += v;
        metrics_printf(b, "buzz_backfill_%s{reason=\"%s\"} %llu\n", name,
                       metrics_reason_label(key, buf), v);
    }
    unsigned long long other = metrics_get(&t->other);
    metrics_printf(b, "buzz_backfill_%s{reason=\"other\"} %llu\n", name, other);
    return sum + other;
}

/* One histogram's series; labels: "" or `method="Admin.Get",` (with the trailing comma). */
static void metrics_hist_series(metrics_buf *b, const char *name, const char *labels,
                                metrics_hist *h)
{
    unsigned long long cum = 0;
    for (int i = 0; i < METRICS_BUCKETS; i++) {
        cum += metrics_get(&h->bucket[i]);
        metrics_printf(b, "buzz_backfill_%s_bucket{%sle=\"%g\"} %llu\n", name, labels,
                       (double)metrics_bounds_us[i] / 1e6, cum);
    }
    cum += metrics_get(&h->bucket[METRICS_BUCKETS]);
    unsigned long long count = metrics_get(&h->count);
    if (count > cum)
        cum = count; /* a concurrent observation between the reads: keep +Inf == count */
    char bare[128] = "";
    size_t n = strlen(labels);
    if (n > 0) { /* without the trailing comma */
        snprintf(bare, sizeof bare, "{%.*s}", (int)(n - 1), labels);
    }
    metrics_printf(b, "buzz_backfill_%s_bucket{%sle=\"+Inf\"} %llu\n", name, labels, cum);
    metrics_printf(b, "buzz_backfill_%s_sum%s %.6f\n", name, bare,
                   (double)metrics_get(&h->sum_us) / 1e6);
    metrics_printf(b, "buzz_backfill_%s_count%s %llu\n", name, bare, cum);
}

static void metrics_hist_render(metrics_buf *b, const char *name, const char *help, metrics_hist *h)
{
    metrics_head(b, name, "histogram", help);
    metrics_hist_series(b, name, "", h);
}

static const char *metrics_state_label(int slot)
{
    return slot == 0 ? "unregistered" : bf_state_name((bf_state)slot);
}

static void metrics_render_scrape(metrics_buf *b, srv_metrics *m, const srv_metrics_scrape *s)
{
    metrics_head(b, "database_up", "gauge",
                 "1 when this scrape read the backfill table from PostgreSQL, else 0.");
    metrics_printf(b, "buzz_backfill_database_up %d\n", s->has_stats ? 1 : 0);
    metrics_head(b, "scrape_database_seconds", "gauge",
                 "Time this scrape spent reading PostgreSQL.");
    metrics_printf(b, "buzz_backfill_scrape_database_seconds %.6f\n", (double)s->duration_us / 1e6);
    metrics_counter(b, "scrape_database_errors_total",
                    "Scrapes whose PostgreSQL read failed (their database values are absent).",
                    &m->scrape_db_errors);
    metrics_head(b, "readiness_gate_enabled", "gauge",
                 "1 in automatic mode (required backfills gate readiness), 0 in manual mode.");
    metrics_printf(b, "buzz_backfill_readiness_gate_enabled %d\n", s->auto_backfill ? 1 : 0);
    metrics_head(b, "readiness_known", "gauge",
                 "1 when readiness could be decided from PostgreSQL, 0 when it is unknown.");
    metrics_printf(b, "buzz_backfill_readiness_known %d\n", s->ready >= 0 ? 1 : 0);
    if (s->ready >= 0) {
        metrics_head(b, "ready", "gauge",
                     "1 when Readiness.Check answers ready, 0 when not ready; absent when "
                     "unknown.");
        metrics_printf(b, "buzz_backfill_ready %d\n", s->ready);
    }
    /* the rate controllers of this process (no label: an ID is no label; buzzctl get shows
     * each definition's) */
    metrics_head(b, "rate_controllers", "gauge",
                 "Definitions whose rate controller (throttle_latency_target_ms) runs in this "
                 "process.");
    metrics_printf(b, "buzz_backfill_rate_controllers %d\n", s->rate.definitions);
    metrics_head(b, "rate_controller_keys_per_second", "gauge",
                 "Keys per second the rate controllers of this process allow, summed.");
    metrics_printf(b, "buzz_backfill_rate_controller_keys_per_second %.1f\n", s->rate.rate);
    if (s->rate.definitions > 0 && s->rate.signal_ms == s->rate.signal_ms) { /* not NaN */
        metrics_head(b, "rate_controller_signal_ms", "gauge",
                     "The highest last value of the rate controllers' latency query, ms.");
        metrics_printf(b, "buzz_backfill_rate_controller_signal_ms %.3f\n", s->rate.signal_ms);
    }
    metrics_head(b, "rate_controller_changes_total", "counter",
                 "Rate controller samples that raised the rate (at or below the target) or cut "
                 "it (above).");
    metrics_printf(b, "buzz_backfill_rate_controller_changes_total{direction=\"increase\"} %llu\n",
                   s->rate.increases);
    metrics_printf(b, "buzz_backfill_rate_controller_changes_total{direction=\"decrease\"} %llu\n",
                   s->rate.decreases);
    if (!s->has_stats)
        return;
    const bf_stats *st = &s->stats;
    metrics_head(b, "backfills", "gauge", "Backfill rows per lifecycle state.");
    for (int i = 1; i < BF_STATE_SLOTS; i++)
        metrics_printf(b, "buzz_backfill_backfills{state=\"%s\"} %lld\n", metrics_state_label(i),
                       (long long)st->backfills[i]);
    metrics_head(b, "readiness_gating_backfills", "gauge",
                 "Required backfills of this process that keep readiness gated, per state "
                 "(unregistered: no row yet); 0 in manual mode.");
    for (int i = 0; i < BF_STATE_SLOTS; i++) {
        if (i == BF_STATE_COMPLETED)
            continue; /* a completed backfill never gates */
        long long v = s->auto_backfill ? (long long)st->gating[i] : 0;
        metrics_printf(b, "buzz_backfill_readiness_gating_backfills{state=\"%s\"} %lld\n",
                       metrics_state_label(i), v);
    }
    metrics_head(b, "seconds_since_progress", "gauge",
                 "Per lifecycle state, the longest time since a row in it last committed "
                 "progress (rows that never progressed are not counted).");
    for (int i = 1; i < BF_STATE_SLOTS; i++)
        if (st->has_stall[i])
            metrics_printf(b, "buzz_backfill_seconds_since_progress{state=\"%s\"} %.3f\n",
                           metrics_state_label(i), st->stall_s[i]);
    metrics_head(b, "stored_batches_committed", "gauge",
                 "Sum over every backfill row of its committed batches (PostgreSQL's count).");
    metrics_printf(b, "buzz_backfill_stored_batches_committed %lld\n",
                   (long long)st->batches_committed);
    metrics_head(b, "stored_rows_changed", "gauge",
                 "Sum over every backfill row of the rows its batches changed (PostgreSQL's "
                 "count).");
    metrics_printf(b, "buzz_backfill_stored_rows_changed %lld\n", (long long)st->rows_committed);
    /* the old-writer watchdog: no labels (an ID, an address or an application name is no
     * label); the operator finds the backfill and the writer with buzzctl list --wide / get */
    metrics_head(b, "old_writer_rows", "gauge",
                 "Rows written since start that break the postcondition, counted by the "
                 "old-writer watchdog, over backfills not completed.");
    metrics_printf(b, "buzz_backfill_old_writer_rows %lld\n", (long long)st->old_writer_rows);
    metrics_head(b, "old_writers", "gauge",
                 "Writers the old-writer watchdog attributed such rows to, over backfills not "
                 "completed.");
    metrics_printf(b, "buzz_backfill_old_writers %lld\n", (long long)st->old_writers);
    metrics_head(b, "watches", "gauge", "Old-writer watch triggers installed.");
    metrics_printf(b, "buzz_backfill_watches %lld\n", (long long)st->watches);
}

static void metrics_render_events(metrics_buf *b, srv_metrics *m)
{
    metrics_head(b, "claims_total", "counter",
                 "Claim events of this process: acquired, takeover (an expired owner's claim), "
                 "renewed, lost, released.");
    for (int i = 0; i < CLAIM_KINDS; i++)
        metrics_printf(b, "buzz_backfill_claims_total{event=\"%s\"} %llu\n", metrics_claim_names[i],
                       metrics_get(&m->claims[i]));
    unsigned long long committed = metrics_get(&m->batches_committed);
    metrics_counter_value(b, "batches_committed_total",
                          "Batches committed by this process's workers.", committed);
    metrics_counter(b, "batches_fenced_out_total",
                    "Batches rejected at commit because their claim was no longer current "
                    "(stale owner).",
                    &m->batches_fenced_out);
    unsigned long long rolled_back =
        metrics_reasons_render(b, "batches_rolled_back_total",
                               "Batches rolled back, by reason (SQLSTATE class or stop, fence, "
                               "timeout, ...).",
                               &m->rolled_back);
    /* derived from the two it sums, read once, so a scrape always adds up */
    metrics_counter_value(b, "batches_attempted_total",
                          "Batches this process's workers began: committed plus rolled back.",
                          committed + rolled_back);
    metrics_counter(b, "rows_changed_total", "Rows the committed batches' mutations changed.",
                    &m->rows_changed);
    metrics_counter(b, "keys_passed_total", "Source keys the committed batches passed.",
                    &m->keys_passed);
    metrics_counter(b, "checkpoint_advances_total",
                    "Worker steps that committed at least one batch (moved a checkpoint).",
                    &m->checkpoint_advances);
    metrics_reasons_render(b, "retries_total",
                           "Retryable attempt failures with a backoff scheduled, by reason "
                           "(SQLSTATE class).",
                           &m->retries);
    metrics_counter(b, "bound_reached_total", "Backfills whose checkpoint reached the bound.",
                    &m->bound_reached);
    metrics_counter(b, "blocked_total", "Backfills that entered blocked.", &m->blocked);
    metrics_counter(b, "failed_total",
                    "Backfills that entered failed (retries exhausted or validation failed).",
                    &m->failed);
    metrics_head(b, "validations_total", "counter", "Validation passes by outcome.");
    metrics_printf(b, "buzz_backfill_validations_total{outcome=\"passed\"} %llu\n",
                   metrics_get(&m->validations_passed));
    metrics_printf(b, "buzz_backfill_validations_total{outcome=\"failed\"} %llu\n",
                   metrics_get(&m->validations_failed));
    metrics_head(b, "actions_total", "counter", "Operator actions by outcome.");
    metrics_printf(b, "buzz_backfill_actions_total{outcome=\"applied\"} %llu\n",
                   metrics_get(&m->actions_applied));
    metrics_printf(b, "buzz_backfill_actions_total{outcome=\"rejected\"} %llu\n",
                   metrics_get(&m->actions_rejected));
    metrics_head(b, "database_connection_events_total", "counter",
                 "Engine sessions that lost or regained their PostgreSQL connection.");
    metrics_printf(b, "buzz_backfill_database_connection_events_total{event=\"lost\"} %llu\n",
                   metrics_get(&m->db_lost));
    metrics_printf(b, "buzz_backfill_database_connection_events_total{event=\"restored\"} %llu\n",
                   metrics_get(&m->db_restored));
    metrics_counter(b, "listener_restarts_total",
                    "Always 0 now: listeners closed and listened on again because nng 1.5.2's ipc "
                    "listener wedged; ipc:// is served by the daemon's own transport.",
                    &m->listener_restarts);
    metrics_head(b, "throttles_total", "counter",
                 "Times a worker of this process began waiting on a health signal or a "
                 "rows-per-second ceiling, by signal.");
    for (int i = 0; i <= METRICS_THROTTLE_SIGNALS; i++)
        metrics_printf(b, "buzz_backfill_throttles_total{signal=\"%s\"} %llu\n",
                       metrics_throttle_label(i), metrics_get(&m->throttles[i]));
    metrics_head(b, "throttled_seconds_total", "counter",
                 "Time this process's workers spent throttled (counted when a throttle ends), by "
                 "signal.");
    for (int i = 0; i <= METRICS_THROTTLE_SIGNALS; i++)
        metrics_printf(b, "buzz_backfill_throttled_seconds_total{signal=\"%s\"} %.6f\n",
                       metrics_throttle_label(i), (double)metrics_get(&m->throttled_us[i]) / 1e6);
    metrics_head(b, "throttled_workers", "gauge",
                 "Workers of this process throttled right now, by signal.");
    for (int i = 0; i <= METRICS_THROTTLE_SIGNALS; i++) {
        long long n = atomic_load_explicit(&m->throttled_now[i], memory_order_relaxed);
        metrics_printf(b, "buzz_backfill_throttled_workers{signal=\"%s\"} %lld\n",
                       metrics_throttle_label(i), n > 0 ? n : 0);
    }
    metrics_head(b, "slow_total", "counter",
                 "Times a worker of this process found its step much slower than the backfill's "
                 "recent median (10 times its time per batch, or a tenth of its keys per second), "
                 "by reason.");
    for (int i = 0; i <= METRICS_SLOW_REASONS; i++)
        metrics_printf(b, "buzz_backfill_slow_total{reason=\"%s\"} %llu\n", metrics_slow_label(i),
                       metrics_get(&m->slows[i]));
    metrics_head(b, "slow_workers", "gauge",
                 "Workers of this process whose last step was much slower than the backfill's "
                 "recent median, by reason.");
    for (int i = 0; i <= METRICS_SLOW_REASONS; i++) {
        long long n = atomic_load_explicit(&m->slow_now[i], memory_order_relaxed);
        metrics_printf(b, "buzz_backfill_slow_workers{reason=\"%s\"} %lld\n", metrics_slow_label(i),
                       n > 0 ? n : 0);
    }
    metrics_head(b, "log_events_total", "counter", "Log records by stable event code.");
    for (int i = 0; i < BF_EV_COUNT; i++)
        metrics_printf(b, "buzz_backfill_log_events_total{event=\"%s\"} %llu\n",
                       bf_event_code((bf_event)i), metrics_get(&m->events[i]));
    metrics_hist_render(b, "step_duration_seconds",
                        "Duration of worker steps that committed batches.", &m->step_duration);
    metrics_hist_render(b, "batch_duration_seconds",
                        "Batch duration: the mean batch of each step (step duration / its "
                        "batches), observed once per batch.",
                        &m->batch_duration);
    metrics_hist_render(b, "validation_duration_seconds", "Duration of validation passes.",
                        &m->validation_duration);
}

static void metrics_render_rpc(metrics_buf *b, srv_metrics *m)
{
    metrics_head(b, "rpc_requests_total", "counter", "RPC requests by method and status code.");
    for (unsigned i = 0; i <= m->n_methods; i++)
        for (unsigned c = 0; c < METRICS_CODES; c++) {
            unsigned long long v = metrics_get(&m->rpc_requests[i][c]);
            const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(
                &buzz__backfill__v1__status_code__descriptor, (int)c);
            if (v == 0 || ev == NULL)
                continue;
            metrics_printf(b, "buzz_backfill_rpc_requests_total{method=\"%s\",code=\"%s\"} %llu\n",
                           m->method_names[i], ev->name, v);
        }
    metrics_head(b, "rpc_duration_seconds", "histogram",
                 "RPC latency from receipt to the encoded answer, by method.");
    for (unsigned i = 0; i <= m->n_methods; i++) {
        if (metrics_get(&m->rpc_duration[i].count) == 0)
            continue;
        char labels[128];
        snprintf(labels, sizeof labels, "method=\"%s\",", m->method_names[i]);
        metrics_hist_series(b, "rpc_duration_seconds", labels, &m->rpc_duration[i]);
    }
    metrics_head(b, "auth_rejections_total", "counter",
                 "Refused authentications by reason, and refused authorizations "
                 "(missing_capability).");
    for (int r = BFT_REASON_MALFORMED; r < METRICS_AUTH_REASONS; r++)
        metrics_printf(b, "buzz_backfill_auth_rejections_total{reason=\"%s\"} %llu\n",
                       metrics_auth_reason_name(r), metrics_get(&m->auth_rejections[r]));
}

bf_err srv_metrics_render(srv_metrics *m, const srv_metrics_scrape *scrape, char **out, size_t *len)
{
    if (m == NULL || scrape == NULL || out == NULL || len == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    metrics_buf b = {.data = malloc(16384), .cap = 16384};
    if (b.data == NULL)
        return BF_ERR_NOMEM;
    b.data[0] = '\0';
    if (!scrape->has_stats)
        metrics_add(&m->scrape_db_errors, 1);
    metrics_head(&b, "build_info", "gauge", "Always 1; the version label names the build.");
    metrics_printf(&b, "buzz_backfill_build_info{version=\"%s\"} 1\n", m->version);
    metrics_head(&b, "process_start_time_seconds", "gauge",
                 "Start time of the process, seconds since the Unix epoch.");
    metrics_printf(&b, "buzz_backfill_process_start_time_seconds %lld\n",
                   (long long)m->start_time_s);
    metrics_render_scrape(&b, m, scrape);
    metrics_render_events(&b, m);
    metrics_render_rpc(&b, m);
    if (b.failed) {
        free(b.data);
        return BF_ERR_NOMEM;
    }
    *out = b.data;
    *len = b.len;
    return BF_OK;
}
