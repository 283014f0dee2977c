/*
 * reject.c - the audit of unauthenticated rejections (srv_rejects_* of srv.h): the first few of
 * a window are written one by one, the rest of a flood is counted in memory and written as one
 * coalesced row with its count and time window, so every attempt is accounted for and a flood
 * cannot fill the audit.
 *
 * Design notes
 *
 * What is identical. Two rejections coalesce when they share the action, the authority (which
 * names the listener and the peer: "unauthenticated tcp addr=192.0.2.7", "unauthenticated ipc
 * uid=1000"), the error and the outcome text ("missing token", "bad signature", ...). The
 * stable ID and the request ID are not part of the key: a flood with a fresh ID per request
 * must not get a row per request. A coalesced row keeps the ID (and the request ID) only when
 * every attempt it counts carried the same one. Authenticated rejections (a missing
 * capability, a bad request of a known actor) are never coalesced: they are attributable and
 * written one by one like every accepted action.
 *
 * Windows. The first rejection of a key opens a window of SRV_REJECT_WINDOW_MS. The first
 * SRV_REJECT_BURST rejections of a window are written at once, each with its stable ID and
 * request ID, because the spec asks for that of every attempt and an operator retrying with an
 * expired token should see each try; only beyond the burst are attempts counted. When the
 * window closes (the flusher thread wakes for it), when the table of SRV_REJECT_KEYS keys is
 * full and a new key needs the slot of the oldest window, and at shutdown (srv_rejects_free),
 * the counted attempts become one row: count, window_start and window_end (the daemon's wall
 * clock at the first and the last counted attempt). A flood from one peer therefore costs at
 * most SRV_REJECT_BURST + 1 rows per window and no database round trip per request.
 *
 * The global bound. Per-peer windows alone do not bound the audit: 100 source addresses each get
 * their own burst, and more keys than the table holds used to evict open windows, whose keys
 * then came back with a fresh burst, so a flood from many addresses wrote a row per request.
 * So, over all keys:
 * - at most SRV_REJECT_GLOBAL_BURST rows are written one by one per global window of
 *   SRV_REJECT_WINDOW_MS; beyond it every attempt is counted in its key's entry, even when the
 *   key is still within its own burst;
 * - a new key takes a free slot, or the slot of a window that has closed; it never evicts an
 *   open window. When every slot holds an open window, the attempt is counted in an aggregate
 *   entry keyed by action, listener kind, error and outcome, whose authority names the kind
 *   only ("unauthenticated tcp (more peers than the table holds)"). Aggregates have their own
 *   SRV_REJECT_AGG_KEYS slots; when those are full too, the aggregate that closes first is
 *   written and gives up its slot (the vocabulary of actions, kinds and reasons is small, so
 *   that takes a flood of every method with every reason at once).
 * Rows per window are therefore at most SRV_REJECT_GLOBAL_BURST + SRV_REJECT_KEYS +
 * SRV_REJECT_AGG_KEYS (beyond that only aggregate evictions), whatever the number of peers, and
 * the counts still add up to every attempt.
 *
 * What a crash loses. Counts live only in memory until their row is written: a process killed
 * without SIGTERM (SIGKILL, crash, power loss) loses the attempts counted in the windows still
 * open, at most SRV_REJECT_WINDOW_MS worth per key; the attempts written one by one are in the
 * audit already. A row that cannot be written (database unreachable) is logged with its count,
 * window and key instead, like any audit failure; it is not retried.
 *
 * Locking. One mutex guards the table; rows are written outside it, on the calling request
 * thread's engine session or on the flusher's own session, so a slow database never holds the
 * lock and a counted rejection costs a lookup in a table of SRV_REJECT_KEYS entries.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "srv.h"

#define REJECT_OUTCOME_MAX 200
#define REJECT_ID_MAX      128
#define REJECT_SLOTS       (SRV_REJECT_KEYS + SRV_REJECT_AGG_KEYS)

typedef struct reject_entry {
    bool used;
    /* the key */
    char action[24];
    char authority[BF_ACTOR_MAX];
    bf_err err;
    char outcome[REJECT_OUTCOME_MAX];
    /* the window */
    int64_t closes_at; /* srv_now_us() */
    int written;       /* rejections of this window written one by one */
    /* counted, not written yet */
    int64_t count;
    int64_t first_us, last_us; /* wall clock, microseconds since the Unix epoch */
    bool id_mixed, rid_mixed;
    char id[REJECT_ID_MAX];             /* "" for none; valid unless id_mixed */
    char request_id[BF_REQUEST_ID_MAX]; /* likewise */
} reject_entry;

struct srv_rejects {
    srv_context *ctx;
    int64_t window_us; /* SRV_REJECT_WINDOW_MS, but for tests */
    pthread_mutex_t mtx;
    pthread_cond_t cond; /* CLOCK_MONOTONIC: a new key, or stop */
    pthread_t thread;
    bool stopping;       /* under mtx */
    srv_session session; /* the flusher's */
    /* under mtx: peer keys in [0, SRV_REJECT_KEYS), aggregates after them */
    reject_entry table[REJECT_SLOTS];
    reject_entry batch[REJECT_SLOTS]; /* the flusher's copies, written outside the lock */
    int64_t global_closes_at;         /* under mtx: the global window (srv_now_us()) */
    int global_written;               /* under mtx: rows written one by one in it */
};

static void reject_log(const srv_rejects *r, bf_log_level level, bf_event event, const char *fmt,
                       ...) __attribute__((format(printf, 4, 5)));

static void reject_log(const srv_rejects *r, bf_log_level level, bf_event event, const char *fmt,
                       ...)
{
    if (r->ctx == NULL || r->ctx->engine_cfg.log == NULL)
        return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    bf_log_record rec = BF_LOG_RECORD_INIT;
    rec.level = level;
    rec.event = event;
    rec.msg = buf;
    r->ctx->engine_cfg.log(r->ctx->engine_cfg.log_arg, &rec);
}

static int64_t reject_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void reject_copy(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src ? src : "");
}

/* ---- the table (callers hold mtx) ------------------------------------------------------- */

/* The entry of a key among slots [from, to). */
static reject_entry *reject_find(srv_rejects *r, size_t from, size_t to, const char *action,
                                 const char *authority, bf_err err, const char *outcome)
{
    for (size_t i = from; i < to; i++) {
        reject_entry *e = &r->table[i];
        if (e->used && e->err == err && strcmp(e->action, action) == 0 &&
            strcmp(e->authority, authority) == 0 && strcmp(e->outcome, outcome) == 0)
            return e;
    }
    return NULL;
}

/* A free slot among [from, to), or the slot of the window that closes first (its counts into
 * *evicted) when that window has closed by now or evict_open; NULL when every window is open
 * and !evict_open. */
static reject_entry *reject_slot(srv_rejects *r, size_t from, size_t to, int64_t now,
                                 bool evict_open, reject_entry *evicted, bool *have_evicted)
{
    reject_entry *oldest = NULL;
    for (size_t i = from; i < to; i++) {
        reject_entry *e = &r->table[i];
        if (!e->used)
            return e;
        if (oldest == NULL || e->closes_at < oldest->closes_at)
            oldest = e;
    }
    if (!evict_open && now < oldest->closes_at)
        return NULL;
    if (oldest->count > 0) {
        *evicted = *oldest;
        *have_evicted = true;
    }
    return oldest;
}

static void reject_open_window(reject_entry *e, int64_t now, int64_t window_us)
{
    e->closes_at = now + window_us;
    e->written = 0;
    e->count = 0;
    e->id_mixed = e->rid_mixed = false;
    e->id[0] = e->request_id[0] = '\0';
}

/* One more counted attempt. */
static void reject_count(reject_entry *e, const char *id, const char *request_id, int64_t wall)
{
    id = id ? id : "";
    request_id = request_id ? request_id : "";
    if (e->count == 0) {
        e->first_us = wall;
        reject_copy(e->id, sizeof e->id, id);
        reject_copy(e->request_id, sizeof e->request_id, request_id);
    } else {
        e->id_mixed = e->id_mixed || strncmp(e->id, id, sizeof e->id - 1) != 0;
        e->rid_mixed = e->rid_mixed || strcmp(e->request_id, request_id) != 0;
    }
    e->last_us = wall < e->first_us ? e->first_us : wall; /* the wall clock may step back */
    e->count++;
}

/* Make e (a free or taken-over slot) the entry of a key, its window opening now. */
static void reject_key(srv_rejects *r, reject_entry *e, const char *action, const char *authority,
                       bf_err err, const char *outcome, int64_t now)
{
    memset(e, 0, sizeof *e);
    e->used = true;
    reject_copy(e->action, sizeof e->action, action);
    reject_copy(e->authority, sizeof e->authority, authority);
    e->err = err;
    reject_copy(e->outcome, sizeof e->outcome, outcome);
    reject_open_window(e, now, r->window_us);
    pthread_cond_signal(&r->cond); /* the flusher may be waiting for no window at all */
}

/* "unauthenticated tcp addr=192.0.2.7" -> "unauthenticated tcp (more peers than the table
 * holds)": the listener kind is kept, the peer is not. */
static void reject_aggregate_authority(const char *authority, char *out, size_t cap)
{
    const char *prefix = "unauthenticated ";
    size_t plen = strlen(prefix);
    const char *kind = strncmp(authority, prefix, plen) == 0 ? authority + plen : "";
    int kind_len = (int)strcspn(kind, " ");
    if (kind_len > 16)
        kind_len = 16;
    if (kind_len > 0)
        snprintf(out, cap, "unauthenticated %.*s (more peers than the table holds)", kind_len,
                 kind);
    else
        snprintf(out, cap, "unauthenticated (more peers than the table holds)");
}

/* ---- writing ---------------------------------------------------------------------------- */

/* The coalesced row of e's counted attempts, on session s. */
static void reject_write_counted(srv_rejects *r, srv_session *s, const reject_entry *e)
{
    bf_actor who = {.actor = NULL,
                    .authority = e->authority,
                    .request_id = !e->rid_mixed && e->request_id[0] ? e->request_id : NULL};
    const char *id = !e->id_mixed && e->id[0] ? e->id : NULL;
    bf_engine *engine = NULL;
    bf_err rc = srv_session_engine(s, &engine);
    if (rc == BF_OK)
        rc = bf_audit_rejections(engine, e->action, id, &who, e->err, e->outcome, e->count,
                                 e->first_us, e->last_us);
    if (rc != BF_OK)
        reject_log(r, BF_LOG_ERROR, BF_EV_AUDIT_FAILED,
                   "could not audit %lld coalesced rejected %s attempts (%s, %s) from %lld to "
                   "%lld us: %s",
                   (long long)e->count, e->action, e->authority, bf_err_str(e->err),
                   (long long)e->first_us, (long long)e->last_us, bf_err_str(rc));
}

bf_err srv_rejects_audit(srv_rejects *r, srv_session *session, const char *action, const char *id,
                         const bf_actor *who, bf_err err, const char *outcome)
{
    if (r == NULL || session == NULL || action == NULL || who == NULL || who->authority == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    char key_outcome[REJECT_OUTCOME_MAX];
    reject_copy(key_outcome, sizeof key_outcome, outcome);
    int64_t now = srv_now_us(), wall = reject_wall_us();
    reject_entry evicted;
    bool have_evicted = false, write_now = false;

    pthread_mutex_lock(&r->mtx);
    bool aggregate = false;
    reject_entry *e = reject_find(r, 0, SRV_REJECT_KEYS, action, who->authority, err, key_outcome);
    if (e == NULL) {
        e = reject_slot(r, 0, SRV_REJECT_KEYS, now, false, &evicted, &have_evicted);
        if (e != NULL)
            reject_key(r, e, action, who->authority, err, key_outcome, now);
    }
    if (e == NULL) { /* every peer slot holds an open window: count in the aggregate */
        char authority[BF_ACTOR_MAX];
        reject_aggregate_authority(who->authority, authority, sizeof authority);
        aggregate = true;
        e = reject_find(r, SRV_REJECT_KEYS, REJECT_SLOTS, action, authority, err, key_outcome);
        if (e == NULL) {
            e = reject_slot(r, SRV_REJECT_KEYS, REJECT_SLOTS, now, true, &evicted, &have_evicted);
            reject_key(r, e, action, authority, err, key_outcome, now);
        }
    }
    if (now >= e->closes_at) { /* closed, the flusher has not got to it yet */
        if (e->count > 0) {
            /* at most one eviction per call: a slot taken above had no counts left, or wrote
             * them through *evicted already, and its window is open */
            evicted = *e;
            have_evicted = true;
        }
        reject_open_window(e, now, r->window_us);
    }
    if (now >= r->global_closes_at) {
        r->global_closes_at = now + r->window_us;
        r->global_written = 0;
    }
    if (!aggregate && e->written < SRV_REJECT_BURST &&
        r->global_written < SRV_REJECT_GLOBAL_BURST) {
        e->written++;
        r->global_written++;
        write_now = true;
    } else {
        if (e->count == INT32_MAX) { /* the column's limit: write what we have, count on */
            evicted = *e;
            have_evicted = true;
            e->count = 0;
        }
        reject_count(e, id, who->request_id, wall);
    }
    pthread_mutex_unlock(&r->mtx);

    if (have_evicted)
        reject_write_counted(r, session, &evicted);
    if (!write_now)
        return BF_OK;
    bf_engine *engine = NULL;
    bf_err rc = srv_session_engine(session, &engine);
    if (rc == BF_OK)
        rc = bf_audit_rejection(engine, action, id, who, err, outcome);
    return rc;
}

/* ---- the flusher ------------------------------------------------------------------------ */

static void reject_deadline(struct timespec *ts, int64_t at_us)
{
    ts->tv_sec = (time_t)(at_us / 1000000);
    ts->tv_nsec = (long)(at_us % 1000000) * 1000;
}

/* Move the entries whose window closed by now (all of them when everything) out of the table;
 * those with counts into r->batch. Returns how many went into the batch. */
static size_t reject_collect(srv_rejects *r, int64_t now, bool everything)
{
    size_t n = 0;
    for (size_t i = 0; i < REJECT_SLOTS; i++) {
        reject_entry *e = &r->table[i];
        if (!e->used || (!everything && e->closes_at > now))
            continue;
        if (e->count > 0)
            r->batch[n++] = *e;
        e->used = false;
    }
    return n;
}

static void *reject_flusher(void *arg)
{
    srv_rejects *r = arg;
    pthread_mutex_lock(&r->mtx);
    for (;;) {
        int64_t now = srv_now_us();
        bool stop = r->stopping;
        int64_t next = INT64_MAX;
        for (size_t i = 0; !stop && i < REJECT_SLOTS; i++)
            if (r->table[i].used && r->table[i].closes_at < next)
                next = r->table[i].closes_at;
        if (!stop && next > now) {
            if (next == INT64_MAX) {
                pthread_cond_wait(&r->cond, &r->mtx);
            } else {
                struct timespec ts;
                reject_deadline(&ts, next);
                int rc = pthread_cond_timedwait(&r->cond, &r->mtx, &ts);
                if (rc != 0 && rc != ETIMEDOUT)
                    reject_log(r, BF_LOG_WARN, BF_EV_NONE, "coalesced audit: wait failed (%d)", rc);
            }
            continue;
        }
        size_t n = reject_collect(r, now, stop);
        pthread_mutex_unlock(&r->mtx);
        for (size_t i = 0; i < n; i++)
            reject_write_counted(r, &r->session, &r->batch[i]);
        if (stop)
            return NULL;
        pthread_mutex_lock(&r->mtx);
    }
}

/* ---- lifecycle -------------------------------------------------------------------------- */

bf_err srv_rejects_new(srv_rejects **out, srv_context *ctx)
{
    if (out == NULL || ctx == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    srv_rejects *r = calloc(1, sizeof *r);
    if (r == NULL)
        return BF_ERR_NOMEM;
    r->ctx = ctx;
    r->window_us = (int64_t)SRV_REJECT_WINDOW_MS * 1000;
    r->session.ctx = ctx;
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0) {
        free(r);
        return BF_ERR_INTERNAL;
    }
    bool ok = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0 &&
              pthread_cond_init(&r->cond, &attr) == 0;
    pthread_condattr_destroy(&attr);
    if (!ok) {
        free(r);
        return BF_ERR_INTERNAL;
    }
    pthread_mutex_init(&r->mtx, NULL);
    if (pthread_create(&r->thread, NULL, reject_flusher, r) != 0) {
        pthread_cond_destroy(&r->cond);
        pthread_mutex_destroy(&r->mtx);
        free(r);
        return BF_ERR_INTERNAL;
    }
    *out = r;
    return BF_OK;
}

void srv_rejects_free(srv_rejects *r)
{
    if (r == NULL)
        return;
    pthread_mutex_lock(&r->mtx);
    r->stopping = true;
    pthread_cond_signal(&r->cond);
    pthread_mutex_unlock(&r->mtx);
    pthread_join(r->thread, NULL); /* it writes every count still held */
    bf_engine_close(r->session.engine);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->mtx);
    free(r);
}

void srv_rejects_set_window_for_testing(srv_rejects *r, int window_ms)
{
    pthread_mutex_lock(&r->mtx);
    r->window_us = (int64_t)window_ms * 1000;
    pthread_mutex_unlock(&r->mtx);
}
