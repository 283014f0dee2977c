/*
 * throttle.c - database-health throttling and adaptive batch size (engine.h "throttling",
 * docs/throttling.md): the configuration shared by a process's engines, its rows-per-second
 * ceilings, the health-signal check a worker runs between steps, and the batch size rule.
 *
 * Design notes
 *
 * Throttling is configuration and observed state, never a lifecycle transition: a throttled
 * worker keeps its claim (renewing it) and holds no row lock while it waits, and what it waits
 * for is written to the row's throttle fields (worker.c), not to the audit.
 *
 * One configuration object per process, replaced wholesale by bf_throttle_configure() (a
 * daemon's SIGHUP reload) under a mutex; workers copy their definition's effective entry at the
 * start of each step, so a reload takes effect at the next step and never tears a step.
 *
 * Ceilings are per process (per daemon): a definition's max_rows_per_second and the daemon's
 * overall one. Each is a schedule of "the time from which the next key may pass": a step that
 * passed n keys moves it by n / rate seconds, and the worker waits until both schedules allow
 * it. Several workers share the schedules, so the ceiling holds over all of them. A ceiling
 * across daemons would need shared state in PostgreSQL; docs/throttling.md says to divide.
 *
 * The rate controller (throttle_rate.c) keeps its state here, beside the definition's ceiling
 * schedule: the worker that holds a definition's claim samples its signal and paces to its
 * rate; a reconfiguration starts every controller again from its floor.
 *
 * The signal check is one statement with a column per enabled signal (the disabled ones are
 * not even queried); values come from PostgreSQL's statistics views, so the database role needs
 * pg_monitor (or pg_read_all_stats) for other sessions' transactions and the replicas' replay
 * positions; without it they read as unknown and never trip (docs/throttling.md).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "strbuf.h"
#include "throttle_rate.h"

typedef struct throttle_entry {
    char id[BF_ID_MAX + 1];
    bf_throttle_config cfg; /* custom_sql points into sql, latency_sql into lsql */
    char *sql;
    char *lsql;
} throttle_entry;

/* A definition's ceiling (when its next key may pass) and its rate controller. */
typedef struct throttle_schedule_entry {
    char id[BF_ID_MAX + 1];
    int64_t next_us;
    bool sampled; /* the controller took a sample since the last reconfiguration */
    bf_rate_state rate;
    char window[64]; /* the window its last sample named ("" none) */
} throttle_schedule_entry;

struct bf_throttle {
    pthread_mutex_t mtx;
    throttle_entry def; /* id "" */
    throttle_entry *over;
    size_t n_over;
    double daemon_rate;
    int64_t daemon_next_us;
    throttle_schedule_entry *rates; /* by id, made when a ceiling is first used; kept across
                                       reloads */
    size_t n_rates, cap_rates;
};

bf_err bf_throttle_new(bf_throttle **out)
{
    if (out == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    bf_throttle *t = calloc(1, sizeof *t);
    if (t == NULL)
        return BF_ERR_NOMEM;
    pthread_mutex_init(&t->mtx, NULL);
    *out = t;
    return BF_OK;
}

static void throttle_entries_free(throttle_entry *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(v[i].sql);
        free(v[i].lsql);
    }
    free(v);
}

void bf_throttle_free(bf_throttle *t)
{
    if (t == NULL)
        return;
    free(t->def.sql);
    free(t->def.lsql);
    throttle_entries_free(t->over, t->n_over);
    free(t->rates);
    pthread_mutex_destroy(&t->mtx);
    free(t);
}

static bf_err throttle_check_config(const bf_throttle_config *c, const char *who, char *diag,
                                    size_t len)
{
    if (c->batch_target_ms < 0 || c->batch_min < 0 || c->batch_max < 0 ||
        c->max_rows_per_second < 0 || !isfinite(c->max_rows_per_second) ||
        c->replica_lag_bytes < 0 || c->lock_waiters < 0 || c->xact_age_s < 0 ||
        c->xid_age_pct < 0 || c->xid_age_pct > 100 || c->check_ms < 0 || c->wait_ms < 0 ||
        c->latency_target_ms < 0 || !(c->rate_min >= 0) || !isfinite(c->rate_min) ||
        !(c->rate_max >= 0) || !isfinite(c->rate_max) || !(c->rate_increase >= 0) ||
        !isfinite(c->rate_increase) || c->rate_decrease_pct < 0 || c->rate_decrease_pct > 99)
        return bf_diag_set(diag, len, BF_ERR_INVALID_ARGUMENT,
                           "%s: throttle values must not be negative (xid_age_pct at most 100,"
                           " rate_decrease_pct at most 99)",
                           who);
    if (c->rate_min > 0 && c->rate_max > 0 && c->rate_min > c->rate_max)
        return bf_diag_set(diag, len, BF_ERR_INVALID_ARGUMENT,
                           "%s: rate_min %.0f is above rate_max %.0f", who, c->rate_min,
                           c->rate_max);
    if (c->latency_target_ms > 0 && (c->latency_sql == NULL || c->latency_sql[0] == '\0'))
        return bf_diag_set(diag, len, BF_ERR_INVALID_ARGUMENT,
                           "%s: a latency target needs a latency query", who);
    if (c->latency_sql != NULL && strlen(c->latency_sql) >= BF_THROTTLE_SQL_MAX)
        return bf_diag_set(diag, len, BF_ERR_INVALID_ARGUMENT,
                           "%s: the latency query is %d bytes or longer", who, BF_THROTTLE_SQL_MAX);
    if (c->batch_min > 0 && c->batch_max > 0 && c->batch_min > c->batch_max)
        return bf_diag_set(diag, len, BF_ERR_INVALID_ARGUMENT,
                           "%s: batch_min %d is above batch_max %d", who, c->batch_min,
                           c->batch_max);
    if (c->custom_sql != NULL && strlen(c->custom_sql) >= BF_THROTTLE_SQL_MAX)
        return bf_diag_set(diag, len, BF_ERR_INVALID_ARGUMENT,
                           "%s: the custom throttle query is %d bytes or longer", who,
                           BF_THROTTLE_SQL_MAX);
    return BF_OK;
}

/* Copy src into dst, owning a copy of its custom query. */
static bf_err throttle_entry_set(throttle_entry *dst, const char *id, const bf_throttle_config *src)
{
    memset(dst, 0, sizeof *dst);
    bf__copy(dst->id, sizeof dst->id, id);
    dst->cfg = *src;
    dst->cfg.custom_sql = NULL;
    dst->cfg.latency_sql = NULL;
    if (src->custom_sql != NULL && src->custom_sql[0] != '\0') {
        dst->sql = strdup(src->custom_sql);
        if (dst->sql == NULL)
            return BF_ERR_NOMEM;
        dst->cfg.custom_sql = dst->sql;
    }
    if (src->latency_sql != NULL && src->latency_sql[0] != '\0') {
        dst->lsql = strdup(src->latency_sql);
        if (dst->lsql == NULL)
            return BF_ERR_NOMEM;
        dst->cfg.latency_sql = dst->lsql;
    }
    return BF_OK;
}

bf_err bf_throttle_configure(bf_throttle *t, const bf_throttle_config *def,
                             const char *const *override_ids, const bf_throttle_config *overrides,
                             size_t n, double daemon_rows_per_second, char *diag, size_t diag_len)
{
    static const bf_throttle_config none;
    if (t == NULL || (n > 0 && (override_ids == NULL || overrides == NULL)))
        return BF_ERR_INVALID_ARGUMENT;
    if (def == NULL)
        def = &none;
    bf_err err = throttle_check_config(def, "throttle", diag, diag_len);
    for (size_t i = 0; i < n && err == BF_OK; i++) {
        if (!bf_id_valid(override_ids[i]))
            return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                               "throttle override: invalid stable id");
        err = throttle_check_config(&overrides[i], override_ids[i], diag, diag_len);
    }
    if (err == BF_OK && (daemon_rows_per_second < 0 || !isfinite(daemon_rows_per_second)))
        err = bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                          "max_rows_per_second must not be negative");
    if (err != BF_OK)
        return err;
    throttle_entry fresh_def;
    throttle_entry *fresh = n ? calloc(n, sizeof *fresh) : NULL;
    if (n && fresh == NULL)
        return BF_ERR_NOMEM;
    err = throttle_entry_set(&fresh_def, "", def);
    for (size_t i = 0; i < n && err == BF_OK; i++)
        err = throttle_entry_set(&fresh[i], override_ids[i], &overrides[i]);
    if (err != BF_OK) {
        free(fresh_def.sql);
        free(fresh_def.lsql);
        throttle_entries_free(fresh, n);
        return err;
    }
    pthread_mutex_lock(&t->mtx);
    throttle_entry old_def = t->def;
    throttle_entry *old = t->over;
    size_t old_n = t->n_over;
    t->def = fresh_def;
    t->over = fresh;
    t->n_over = n;
    t->daemon_rate = daemon_rows_per_second;
    for (size_t i = 0; i < t->n_rates; i++) { /* every controller starts again (its counts
                                                 stay: they are the process's) */
        t->rates[i].rate.rate = 0;
        t->rates[i].rate.decreased = false;
        t->rates[i].window[0] = '\0';
    }
    pthread_mutex_unlock(&t->mtx);
    free(old_def.sql);
    free(old_def.lsql);
    throttle_entries_free(old, old_n);
    return BF_OK;
}

void bf_throttle_get(bf_throttle *t, const char *id, bf_throttle_config *out, char *sql,
                     size_t sql_len)
{
    bf__throttle_get(t, id, out, sql, sql_len, NULL, 0);
}

void bf__throttle_get(bf_throttle *t, const char *id, bf_throttle_config *out, char *sql,
                      size_t sql_len, char *latency, size_t latency_len)
{
    memset(out, 0, sizeof *out);
    if (sql_len > 0)
        sql[0] = '\0';
    if (latency_len > 0)
        latency[0] = '\0';
    if (t == NULL)
        return;
    pthread_mutex_lock(&t->mtx);
    bf_throttle_config c = t->def.cfg;
    for (size_t i = 0; id != NULL && i < t->n_over; i++)
        if (strcmp(t->over[i].id, id) == 0)
            c = t->over[i].cfg;
    if (c.custom_sql != NULL && sql_len > 0)
        bf__copy(sql, sql_len, c.custom_sql);
    if (c.latency_sql != NULL && latency_len > 0)
        bf__copy(latency, latency_len, c.latency_sql);
    pthread_mutex_unlock(&t->mtx);
    c.custom_sql = sql_len > 0 && sql[0] ? sql : NULL;
    c.latency_sql = latency_len > 0 && latency[0] ? latency : NULL;
    if (c.latency_sql == NULL)
        c.latency_target_ms = 0; /* no query (or no room for it): no controller */
    if (c.check_ms == 0)
        c.check_ms = 1000;
    if (c.wait_ms == 0)
        c.wait_ms = 1000;
    *out = c;
}

/*
 * The adaptive batch size. A batch's time is modelled as fixed + per_key * keys: the fixed part
 * (the fence, the commit, a statement trigger, a callback's round trips, a plan that scans) does
 * not shrink with the batch, so a rule that assumes time proportional to size halves the size
 * each step while the fixed part alone is over the target, down to batch_min, at a small
 * fraction of the declared size's throughput (issue 16). Both parts are fitted by least squares
 * over the worker's last BF_SIZE_WINDOW steps (keys per batch, time per batch), once they hold
 * two sizes at least BF_SIZE_SPREAD apart; until then one size is all that is known, so the
 * rule moves as if the time were proportional, which tells the fit what it needs at the next
 * step. The size then aims at the target, but never below the size whose per-key part is
 * BF_SIZE_FLOOR times the fixed part: keys / (fixed + per_key * keys) there is
 * BF_SIZE_FLOOR / (BF_SIZE_FLOOR + 1) of 1 / per_key, which no size exceeds, so the adaptive
 * size keeps at least 0.8 of the throughput of any fixed size, the declared one included. When
 * the time does not grow with the size at all, the size grows to its maximum.
 *
 * An observation far from what the fit predicts (a lock, a plan flip, a trigger added) starts
 * the window again from it: the old fit described another table.
 */
#define BF_SIZE_SPREAD  1.25 /* sizes this far apart separate the fixed part from the per-key */
#define BF_SIZE_FLOOR   4.0  /* per-key part at least this many times the fixed part */
#define BF_SIZE_DEVIATE 1.5  /* a step this many times off the fit starts the window again */

void bf__size_model_init(bf_size_model *m)
{
    memset(m, 0, sizeof *m);
}

/* Least squares over the window when it holds sizes far enough apart; else the fit stays. */
static void size_fit(bf_size_model *m)
{
    double kmin = m->keys[0], kmax = m->keys[0], ksum = 0, tsum = 0;
    for (int i = 0; i < m->n; i++) {
        kmin = m->keys[i] < kmin ? m->keys[i] : kmin;
        kmax = m->keys[i] > kmax ? m->keys[i] : kmax;
        ksum += m->keys[i];
        tsum += m->us[i];
    }
    if (kmax < kmin * BF_SIZE_SPREAD)
        return;
    double kmean = ksum / m->n, tmean = tsum / m->n, var = 0, cov = 0;
    for (int i = 0; i < m->n; i++) {
        var += (m->keys[i] - kmean) * (m->keys[i] - kmean);
        cov += (m->keys[i] - kmean) * (m->us[i] - tmean);
    }
    m->fitted = true;
    if (cov <= 0) { /* the time does not grow with the size: all of it is fixed */
        m->fixed_us = tmean;
        m->per_key_us = 0;
        return;
    }
    m->per_key_us = cov / var;
    m->fixed_us = tmean - m->per_key_us * kmean;
    if (m->fixed_us < 0) { /* noise: a line through the origin instead */
        double kt = 0, kk = 0;
        for (int i = 0; i < m->n; i++) {
            kt += m->keys[i] * m->us[i];
            kk += m->keys[i] * m->keys[i];
        }
        m->fixed_us = 0;
        m->per_key_us = kt / kk;
    }
}

void bf__size_observe(bf_size_model *m, long batches, long keys, int64_t elapsed_us)
{
    if (batches <= 0 || keys <= 0 || elapsed_us <= 0)
        return;
    double k = (double)keys / (double)batches, t = (double)elapsed_us / (double)batches;
    if (m->fitted) {
        double predicted = m->fixed_us + m->per_key_us * k;
        if (t > predicted * BF_SIZE_DEVIATE || t * BF_SIZE_DEVIATE < predicted) {
            m->n = m->next = 0;
            m->fitted = false;
        }
    }
    m->keys[m->next] = k;
    m->us[m->next] = t;
    m->next = (m->next + 1) % BF_SIZE_WINDOW;
    if (m->n < BF_SIZE_WINDOW)
        m->n++;
    m->last_us = t;
    size_fit(m);
}

/* [min, max] of cfg for a definition whose batch_size is declared. */
static void size_bounds(const bf_throttle_config *cfg, int declared, int *min_out, int *max_out)
{
    int max = cfg->batch_max > 0 && cfg->batch_max < declared ? cfg->batch_max : declared;
    int min = cfg->batch_min > 0 ? cfg->batch_min : declared / 100;
    if (min < 1)
        min = 1;
    if (min > max)
        min = max;
    *min_out = min;
    *max_out = max;
}

int bf__size_clamp(const bf_throttle_config *cfg, int declared, int size)
{
    int min, max;
    size_bounds(cfg, declared, &min, &max);
    return size < min ? min : size > max ? max : size;
}

int bf__size_next(const bf_throttle_config *cfg, int declared, int size, const bf_size_model *m)
{
    int min, max;
    size_bounds(cfg, declared, &min, &max);
    size = bf__size_clamp(cfg, declared, size);
    if (m->n == 0)
        return size;
    if (cfg->batch_target_ms <= 0) /* no target: back to the declared size, doubling a step
                                      (after a lock_waiters halving) */
        return size > max / 2 ? max : size * 2;
    double target_us = (double)cfg->batch_target_ms * 1000.0, want;
    if (!m->fitted) {
        /* one size known: as if the time were proportional to it */
        want = (double)size * target_us / m->last_us;
    } else if (m->per_key_us <= 0) {
        want = max; /* shrinking cannot make a batch faster */
    } else {
        want = (target_us - m->fixed_us) / m->per_key_us;
        double floor = BF_SIZE_FLOOR * m->fixed_us / m->per_key_us;
        if (want < floor)
            want = floor;
    }
    /* at most a factor 2 either way per step (a step's own noise cannot swing it further) */
    if (want > 2.0 * size)
        want = 2.0 * size;
    if (want < 0.5 * size)
        want = 0.5 * size;
    int next = want > max ? max : want < min ? min : (int)(want + 0.5);
    /* over the target at the smallest size with one size known: learn from a larger one (a
     * fixed cost would keep the batch there for good) */
    if (!m->fitted && size == min && m->last_us > target_us && size < max)
        next = size > max / 2 ? max : size * 2;
    return next;
}

/* id's entry (created on first use; NULL without memory). Locked. */
static throttle_schedule_entry *throttle_slot(bf_throttle *t, const char *id)
{
    for (size_t i = 0; i < t->n_rates; i++)
        if (strcmp(t->rates[i].id, id) == 0)
            return &t->rates[i];
    if (t->n_rates == t->cap_rates) {
        size_t cap = t->cap_rates ? t->cap_rates * 2 : 8;
        throttle_schedule_entry *v = realloc(t->rates, cap * sizeof *v);
        if (v == NULL)
            return NULL;
        t->rates = v;
        t->cap_rates = cap;
    }
    throttle_schedule_entry *e = &t->rates[t->n_rates++];
    memset(e, 0, sizeof *e);
    bf__copy(e->id, sizeof e->id, id);
    e->rate.signal_ms = NAN;
    return e;
}

/* The schedule of id's ceiling (NULL without a ceiling or without memory). Locked. */
static int64_t *throttle_schedule(bf_throttle *t, const char *id, double rate)
{
    if (rate <= 0)
        return NULL; /* no ceiling: nothing to schedule */
    throttle_schedule_entry *e = throttle_slot(t, id);
    return e != NULL ? &e->next_us : NULL;
}

void bf__rate_sample(bf_throttle *t, const char *id, const bf_rate_law *law, double signal_ms,
                     const char *window, int64_t now_us, bf_rate_state *out)
{
    memset(out, 0, sizeof *out);
    out->signal_ms = NAN;
    pthread_mutex_lock(&t->mtx);
    throttle_schedule_entry *e = throttle_slot(t, id);
    if (e != NULL) {
        bool seen = window != NULL && window[0] && e->sampled && strcmp(window, e->window) == 0;
        if (!seen) {
            bf__rate_update(law, &e->rate, signal_ms, now_us);
            e->sampled = true;
            bf__copy(e->window, sizeof e->window, window);
        }
        *out = e->rate;
    }
    pthread_mutex_unlock(&t->mtx);
}

void bf__rate_pace(bf_throttle *t, const char *id, long keys, int64_t elapsed_us)
{
    pthread_mutex_lock(&t->mtx);
    throttle_schedule_entry *e = throttle_slot(t, id);
    if (e != NULL)
        bf__rate_observe_pace(&e->rate, keys, elapsed_us);
    pthread_mutex_unlock(&t->mtx);
}

bool bf__rate_state(bf_throttle *t, const char *id, bf_rate_state *out)
{
    memset(out, 0, sizeof *out);
    out->signal_ms = NAN;
    bool found = false;
    pthread_mutex_lock(&t->mtx);
    for (size_t i = 0; i < t->n_rates && !found; i++)
        if (t->rates[i].sampled && t->rates[i].rate.rate > 0 && strcmp(t->rates[i].id, id) == 0) {
            *out = t->rates[i].rate;
            found = true;
        }
    pthread_mutex_unlock(&t->mtx);
    return found;
}

bool bf_throttle_rate_get(bf_throttle *t, const char *id, bf_throttle_rate *out)
{
    if (out == NULL)
        return false;
    memset(out, 0, sizeof *out);
    out->signal_ms = NAN;
    if (t == NULL)
        return false;
    pthread_mutex_lock(&t->mtx);
    for (size_t i = 0; i < t->n_rates; i++) {
        const throttle_schedule_entry *e = &t->rates[i];
        if (!e->sampled || (id != NULL && strcmp(e->id, id) != 0))
            continue;
        out->decreases += e->rate.decreases; /* counts survive a reconfiguration */
        out->increases += e->rate.increases;
        if (e->rate.rate <= 0)
            continue; /* restarted and not sampled since (or turned off) */
        out->definitions++;
        out->rate += e->rate.rate;
        if (!isnan(e->rate.signal_ms) &&
            (isnan(out->signal_ms) || e->rate.signal_ms > out->signal_ms))
            out->signal_ms = e->rate.signal_ms;
    }
    pthread_mutex_unlock(&t->mtx);
    return out->definitions > 0;
}

/* Move a schedule by keys at rate: they began to pass at started_us (the step's start; a
 * schedule already past it starts from where it is), so the time the step took counts; the
 * wait from now until it allows the next key. */
static int64_t throttle_advance(int64_t *next_us, double rate, long keys, int64_t started_us,
                                int64_t now_us)
{
    if (rate <= 0 || next_us == NULL)
        return 0;
    if (*next_us < started_us)
        *next_us = started_us;
    *next_us += (int64_t)((double)keys * 1e6 / rate);
    return *next_us > now_us ? *next_us - now_us : 0;
}

int64_t bf__throttle_pass(bf_throttle *t, const char *id, double def_rate, long keys,
                          int64_t started_us, double *rate_out)
{
    *rate_out = 0;
    if (t == NULL || keys <= 0)
        return 0;
    int64_t now = bf__monotonic_us();
    pthread_mutex_lock(&t->mtx);
    int64_t wait_def =
        throttle_advance(throttle_schedule(t, id, def_rate), def_rate, keys, started_us, now);
    int64_t wait_all = throttle_advance(&t->daemon_next_us, t->daemon_rate, keys, started_us, now);
    double rate = wait_def >= wait_all ? def_rate : t->daemon_rate;
    pthread_mutex_unlock(&t->mtx);
    *rate_out = rate;
    return wait_def > wait_all ? wait_def : wait_all;
}

/* ---- the health check ---------------------------------------------------------------------- */

/* Sessions blocked by this session's locks; the batch loop and the callback batch run it
 * before COMMIT when lock_waiters is set. */
const char bf__throttle_blocked_sql[] =
    "SELECT count(*) FROM pg_stat_activity a WHERE a.wait_event_type = 'Lock'"
    " AND pg_backend_pid() = ANY (pg_blocking_pids(a.pid))";

bf_err bf__throttle_check(bf_engine *e, const bf_compiled *c, const bf_throttle_config *cfg,
                          bf_throttle_verdict *out)
{
    memset(out, 0, sizeof *out);
    bf_strbuf sb;
    bf__strbuf_init(&sb);
    bf__strbuf_add(&sb, "SELECT NULL::text");
    /* each enabled signal: a value that is NULL when unknown (no replica, no permission) */
    if (cfg->replica_lag_bytes > 0)
        bf__strbuf_add(&sb, ", (SELECT max(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn))"
                            "::bigint FROM pg_stat_replication WHERE NOT pg_is_in_recovery()"
                            " AND state = 'streaming')");
    else
        bf__strbuf_add(&sb, ", NULL::bigint");
    if (cfg->lock_waiters > 0)
        bf__strbuf_addf(&sb,
                        ", (SELECT count(*) FROM pg_stat_activity a"
                        " WHERE a.wait_event_type = 'Lock' AND a.pid <> pg_backend_pid()"
                        " AND EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid"
                        " AND l.relation = to_regclass('%s')))",
                        c->def->table); /* lower-case identifiers only (registry.c) */
    else
        bf__strbuf_add(&sb, ", NULL::bigint");
    if (cfg->xact_age_s > 0)
        bf__strbuf_add(&sb, ", (SELECT floor(extract(epoch FROM clock_timestamp() -"
                            " min(xact_start)))::bigint FROM pg_stat_activity"
                            " WHERE xact_start IS NOT NULL AND pid <> pg_backend_pid()"
                            " AND datname = current_database()"
                            " AND backend_type = 'client backend'"
                            " AND application_name NOT LIKE 'buzz-backfill %')");
    else
        bf__strbuf_add(&sb, ", NULL::bigint");
    if (cfg->xid_age_pct > 0)
        bf__strbuf_add(&sb, ", (SELECT floor(age(datfrozenxid) * 100.0 / 2147483648)::bigint"
                            " FROM pg_database WHERE datname = current_database())");
    else
        bf__strbuf_add(&sb, ", NULL::bigint");
    char *sql = bf__strbuf_take(&sb);
    if (sql == NULL)
        return bf__diag(e, BF_ERR_NOMEM, "out of memory");
    PGresult *r = NULL;
    bf_err err = bf__exec(e, &r, "throttle check", sql, 0, NULL);
    free(sql);
    if (err != BF_OK)
        return err;
    int64_t v[4];
    bool known[4];
    for (int i = 0; i < 4; i++) {
        known[i] = !bf__isnull(r, 0, i + 1);
        v[i] = known[i] ? bf__field_i64(r, 0, i + 1) : 0;
    }
    PQclear(r);
    out->wait_ms = cfg->wait_ms;
    if (known[0] && v[0] >= cfg->replica_lag_bytes) {
        out->signal = "replica_lag";
        bf__format(out->value, sizeof out->value, "%lld bytes (limit %lld)", (long long)v[0],
                   (long long)cfg->replica_lag_bytes);
    } else if (known[1] && v[1] >= cfg->lock_waiters) {
        out->signal = "lock_waiters";
        bf__format(out->value, sizeof out->value, "%lld waiting (limit %d)", (long long)v[1],
                   cfg->lock_waiters);
    } else if (known[2] && v[2] >= cfg->xact_age_s) {
        out->signal = "xact_age";
        bf__format(out->value, sizeof out->value, "%lld s (limit %d s)", (long long)v[2],
                   cfg->xact_age_s);
    } else if (known[3] && v[3] >= cfg->xid_age_pct) {
        out->signal = "xid_age";
        bf__format(out->value, sizeof out->value, "%lld%% (limit %d%%)", (long long)v[3],
                   cfg->xid_age_pct);
    }
    if (out->signal != NULL || cfg->custom_sql == NULL)
        return BF_OK;
    /* the operator's own query: true or a positive number of milliseconds trips it; an error
     * trips it too (a health signal that cannot be read is not healthy), with its SQLSTATE */
    err = bf__exec(e, &r, "custom throttle query", cfg->custom_sql, 0, NULL);
    if (err != BF_OK) {
        if (err == BF_ERR_UNAVAILABLE || e->conn == NULL)
            return err;
        out->signal = "custom";
        bf__format(out->value, sizeof out->value, "query failed (%s)",
                   e->sqlstate[0] ? e->sqlstate : "?");
        return BF_OK;
    }
    if (PQntuples(r) >= 1 && PQnfields(r) >= 1 && !bf__isnull(r, 0, 0)) {
        const char *s = bf__field(r, 0, 0);
        if (strcmp(s, "t") == 0 || strcmp(s, "true") == 0) {
            out->signal = "custom";
            bf__copy(out->value, sizeof out->value, "true");
        } else {
            char *end = NULL;
            double ms = strtod(s, &end);
            if (end != s && *end == '\0' && ms > 0) {
                out->signal = "custom";
                out->wait_ms = ms > 600000 ? 600000 : (int)ms;
                bf__format(out->value, sizeof out->value, "wait %d ms", out->wait_ms);
            }
        }
    }
    PQclear(r);
    return BF_OK;
}

/*
 * Collapse detection. A backfill whose batches suddenly take ten times their recent median (a
 * plan that flipped to a scan, a lock, a trigger) keeps committing, so nothing else notices; the
 * worker judges each step against the median of its claim's recent steps and says so (worker.c:
 * slow.start / slow.end, the row's slow fields). A slow step does not join the window, so a
 * collapse that lasts stays visible instead of becoming the new median.
 */
#define BF_SLOW_MIN_STEPS 5
#define BF_SLOW_FACTOR    10.0
#define BF_SLOW_MIN_US    250000.0

static int slow_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of the known (not NaN) values of v[0..n); NaN when none. */
static double slow_median(const double *v, int n)
{
    double s[BF_SLOW_WINDOW];
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(v[i]))
            s[k++] = v[i];
    if (k == 0)
        return NAN;
    qsort(s, (size_t)k, sizeof s[0], slow_cmp);
    return k % 2 ? s[k / 2] : (s[k / 2 - 1] + s[k / 2]) / 2;
}

/* "850 us", "40 ms", "3.2 s" */
static void slow_duration(char *buf, size_t cap, double us)
{
    if (us < 1000)
        bf__format(buf, cap, "%.0f us", us);
    else if (us < 1e6)
        bf__format(buf, cap, "%.0f ms", us / 1000);
    else
        bf__format(buf, cap, "%.1f s", us / 1e6);
}

const char *bf__slow_judge(bf_slow_model *m, long batches, long keys, int size, int64_t elapsed_us,
                           char *value, size_t cap)
{
    value[0] = '\0';
    if (batches <= 0 || elapsed_us <= 0)
        return NULL;
    double batch_us = (double)elapsed_us / (double)batches;
    bool full = size > 0 && (double)keys * 2 >= (double)batches * size;
    double rate = full ? (double)keys * 1e6 / (double)elapsed_us : NAN;
    if (m->n >= BF_SLOW_MIN_STEPS) {
        double mb = slow_median(m->batch_us, m->n), mr = slow_median(m->rate, m->n);
        if (batch_us >= BF_SLOW_FACTOR * mb && batch_us >= BF_SLOW_MIN_US) {
            char a[16], b[16];
            slow_duration(a, sizeof a, batch_us);
            slow_duration(b, sizeof b, mb);
            bf__format(value, cap, "batch %s, median %s", a, b);
            return "batch_time";
        }
        if (!isnan(rate) && !isnan(mr) && rate * BF_SLOW_FACTOR <= mr) {
            bf__format(value, cap, "%.0f keys/s, median %.0f keys/s", rate, mr);
            return "throughput";
        }
    }
    m->batch_us[m->next] = batch_us;
    m->rate[m->next] = rate;
    m->next = (m->next + 1) % BF_SLOW_WINDOW;
    if (m->n < BF_SLOW_WINDOW)
        m->n++;
    return NULL;
}
