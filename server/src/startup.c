/*
 * startup.c - what main.c composes: the context, the subsystems' configuration, the migrate and
 * preflight commands, and the startup sequence of DESIGN.md with its workers (the signals are
 * signals.c's).
 *
 * Design notes: the admin listener is up before this sequence begins, so operators can inspect
 * and recover while serving is gated. The sequence runs on one thread and waits out what it
 * cannot change: an unreachable database (retry with backoff) and a missing or incompatible
 * schema (reported, re-checked; with auto_migrate off no backfill ever stands in for a
 * migration). Every definition is registered before anything is started, so the required set
 * is complete before the gate can open; Readiness reads that gate from PostgreSQL by itself.
 * Pending required backfills are started only in automatic mode. Workers run in every mode:
 * already-started work (running, validating) is recovered whether or not automatic backfills
 * are on. Each worker thread owns its engine session and bf_worker; stopping sets the worker's
 * stop flag: the worker cancels the statement in flight (its transaction rolls back whole, no
 * failed attempt is recorded), starts no other batch and releases its claim.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "notify.h"
#include "startup.h"

#define STARTUP_BACKOFF_MIN_MS  250
#define STARTUP_BACKOFF_MAX_MS  10000
#define STARTUP_SCHEMA_RECHECK  5000 /* ms between schema checks while it is incompatible */
#define STARTUP_PRUNE_MIN_MS    60000
#define STARTUP_PRUNE_MAX_MS    3600000
#define STARTUP_CONNECT_TIMEOUT "10"

#define STARTUP_FD_SLACK 64 /* log, listeners, nng's own descriptors, modules */

_Static_assert(SRV_CONFIG_LISTEN_MAX == SRV_TRANSPORT_MAX_LISTENERS,
               "the configuration accepts what the transport serves");

/* ---- composition helpers ------------------------------------------------------------------- */

bf_err srv_registry_fill(bf_registry *reg, srv_defdir **files_out, const srv_config *cfg,
                         char *diag, size_t diag_len)
{
    *files_out = NULL;
    for (size_t i = 0; i < cfg->n_modules; i++) {
        char why[256] = "";
        bf_err err = bf_registry_load_module(reg, cfg->modules[i], why, sizeof why);
        if (err != BF_OK) {
            snprintf(diag, diag_len, "cannot load definitions module %s: %s", cfg->modules[i],
                     why[0] ? why : bf_err_str(err));
            return err;
        }
        srv_log(BF_LOG_INFO, "loaded definitions module %s", cfg->modules[i]);
    }
    srv_defdir *files = NULL;
    if (cfg->definitions_dir != NULL) {
        char why[BF_DIAG_MAX] = "";
        bf_err err = srv_defdir_read(&files, cfg->definitions_dir, why, sizeof why);
        if (err == BF_OK)
            err = srv_defdir_register(files, reg, why, sizeof why);
        if (err != BF_OK) {
            snprintf(diag, diag_len, "cannot load definition files: %s",
                     why[0] ? why : bf_err_str(err));
            *files_out = files; /* reg may point into them: srv_registry_unload() frees both */
            return err;
        }
        srv_log(BF_LOG_INFO, "loaded %zu definition file%s from %s", srv_defdir_count(files),
                srv_defdir_count(files) == 1 ? "" : "s", cfg->definitions_dir);
    }
    if (bf_registry_count(reg) == 0)
        srv_log(BF_LOG_WARN, "no definitions loaded: this process serves the admin API and runs "
                             "no backfill");
    *files_out = files;
    return BF_OK;
}

bf_err srv_registry_load(bf_registry **out, srv_defdir **files_out, const srv_config *cfg,
                         char *diag, size_t diag_len)
{
    bf_registry *reg = NULL;
    bf_err err = bf_registry_new(&reg);
    if (err != BF_OK) {
        snprintf(diag, diag_len, "cannot create the definitions registry");
        return err;
    }
    if ((err = srv_registry_fill(reg, files_out, cfg, diag, diag_len)) != BF_OK) {
        srv_registry_unload(reg, *files_out);
        *files_out = NULL;
        return err;
    }
    *out = reg;
    return BF_OK;
}

void srv_registry_unload(bf_registry *reg, srv_defdir *files)
{
    bf_registry_free(reg); /* first: it points into the files' definitions */
    srv_defdir_free(files);
}

void srv_fd_limit_raise(const srv_config *cfg)
{
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) != 0)
        return;
    if (lim.rlim_cur < lim.rlim_max) {
        struct rlimit raised = {lim.rlim_max, lim.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &raised) == 0)
            lim = raised;
    }
    /* a connection, the PostgreSQL sessions of a pool (one per transport thread and one per
     * request deferred at once; one pool per listener kind), a session per worker and the
     * startup sequence's */
    unsigned long want = (unsigned long)cfg->n_listen * (unsigned long)cfg->max_connections +
                         2ul * ((unsigned long)cfg->threads + SRV_TRANSPORT_DEFERRED) +
                         (unsigned long)cfg->workers + 1 + STARTUP_FD_SLACK;
    if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < want)
        srv_log(BF_LOG_WARN,
                "the descriptor limit (%lu) is below what max_connections on %zu listener%s, the "
                "threads and the workers may need (%lu): raise LimitNOFILE or lower "
                "max_connections",
                (unsigned long)lim.rlim_cur, cfg->n_listen, cfg->n_listen == 1 ? "" : "s", want);
}

srv_auth_config srv_auth_config_from(const srv_config *cfg)
{
    srv_auth_config a = {
        /* without trusted keys no token can verify, so the audience is never compared */
        .audience = cfg->token_audience ? cfg->token_audience : "(no tokens)",
        .trusted_keys_file = cfg->trusted_keys_file,
        .revoked_file = cfg->revoked_tokens_file,
        .clock_skew_s = cfg->clock_skew_s,
        .ipc_boundary = cfg->ipc_boundary,
        .ipc_boundary_caps = 0,
    };
    return a;
}

static void startup_transport_wedged(void *arg)
{
    (void)arg;
    srv_signals_stop_fatal("the transport cannot release connections any more; exiting with "
                           "status 1 so that the service manager restarts the daemon");
}

srv_transport_config srv_transport_config_from(const srv_config *cfg)
{
    srv_transport_config t = {
        .urls = (const char *const *)cfg->listen,
        .n_urls = cfg->n_listen,
        .threads = cfg->threads,
        .ipc_mode = cfg->ipc_socket_mode,
        .tls_cert_file = cfg->tls_cert_key_file,
        .tls_key_file = NULL,
        .max_conns = cfg->max_connections,
        .max_conns_per_peer = cfg->max_connections_per_peer,
        .on_wedged = startup_transport_wedged,
    };
    return t;
}

void srv_context_init(srv_context *ctx, const srv_config *cfg, const bf_registry *registry,
                      srv_auth *auth)
{
    memset(ctx, 0, sizeof *ctx);
    ctx->registry = registry;
    ctx->auth = auth;
    ctx->conninfo = cfg->database_url;
    ctx->auto_migrate = cfg->auto_migrate;
    ctx->auto_backfill = cfg->auto_backfill;
    ctx->request_retention_s = cfg->request_retention_s;
    ctx->engine_cfg = (bf_config){
        .conninfo = cfg->database_url,
        .lease_ms = cfg->lease_ms,
        .statement_timeout_ms = cfg->statement_timeout_ms,
        .lock_timeout_ms = cfg->lock_timeout_ms,
        .step_ms = cfg->step_ms,
        .step_batches = cfg->step_batches,
        .log = srv_log_sink,
        .watch_writers = cfg->watch_writers ? BF_WATCH_ON : BF_WATCH_OFF,
        .watch_block = cfg->watch_block,
        .watch_grace_s = cfg->watch_grace_s,
    };
    atomic_init(&ctx->shutting_down, false);
    /* half the transport threads may hold a readiness wait; the rest stay free for the rest */
    ctx->readiness_waiters_max = cfg->threads / 2;
    atomic_init(&ctx->readiness_waiters, 0);
    /* a conninfo's own connect_timeout still wins: this is only libpq's default */
    setenv("PGCONNECT_TIMEOUT", STARTUP_CONNECT_TIMEOUT, 0);
}

static bool startup_transient(bf_err err)
{
    return err == BF_ERR_UNAVAILABLE || err == BF_ERR_RETRYABLE || err == BF_ERR_TIMEOUT ||
           err == BF_ERR_IO;
}

int srv_migrate_command(const srv_config *cfg)
{
    srv_context ctx;
    srv_context_init(&ctx, cfg, NULL, NULL);
    bf_engine *e = NULL;
    bf_err err = bf_engine_open(&e, &ctx.engine_cfg, NULL);
    if (err != BF_OK) {
        srv_log(BF_LOG_ERROR, "migrate: %s", bf_err_str(err));
        return 1;
    }
    int version = 0;
    err = bf_migrate(e);
    if (err == BF_OK)
        err = bf_schema_check(e, &version);
    if (err == BF_OK)
        srv_log(BF_LOG_INFO, "migrate: engine schema is at version %d", version);
    else
        srv_log(BF_LOG_ERROR, "migrate: %s: %s", bf_err_str(err), bf_engine_diag(e));
    bf_engine_close(e);
    return err == BF_OK ? 0 : 1;
}

/* preflight_watch_s: watch every definition's table at once for that long, then report each:
 * a definition an old writer still writes fails, so a deploy pipeline holds the start of a
 * required automatic backfill until the writer is drained. Returns the definitions failed. */
static int startup_preflight_watch(const srv_config *cfg, bf_engine *e, bf_registry *reg, size_t n)
{
    bool *watched = calloc(n ? n : 1, sizeof *watched);
    if (watched == NULL)
        return 1;
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        const char *id = cfg->n_ids > 0 ? cfg->ids[i] : bf_registry_at(reg, i)->id;
        bf_err err = bf_watch_probe_start(e, id);
        watched[i] = err == BF_OK;
        if (err == BF_ERR_DEFINITION)
            printf("skip  %s: %s\n", id, bf_engine_diag(e));
        else if (err != BF_OK)
            printf("FAIL  %s: %s: could not watch for old writers: %s\n", id, bf_err_str(err),
                   bf_engine_diag(e));
        failed += err != BF_OK && err != BF_ERR_DEFINITION;
    }
    printf("watching for old writers for %d s\n", cfg->preflight_watch_s);
    fflush(stdout);
    struct timespec ts = {.tv_sec = cfg->preflight_watch_s, .tv_nsec = 0};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    for (size_t i = 0; i < n; i++) {
        if (!watched[i])
            continue;
        const char *id = cfg->n_ids > 0 ? cfg->ids[i] : bf_registry_at(reg, i)->id;
        bf_old_writers ow;
        char report[BF_DIAG_MAX];
        bf_err err = bf_watch_probe_finish(e, id, &ow, report, sizeof report);
        if (err != BF_OK)
            printf("FAIL  %s: %s: %s\n", id, bf_err_str(err), bf_engine_diag(e));
        else
            printf("%s  %s: %s\n", ow.rows > 0 ? "FAIL" : "ok  ", id, report);
        failed += err != BF_OK || ow.rows > 0;
    }
    fflush(stdout);
    free(watched);
    return failed;
}

int srv_preflight_command(const srv_config *cfg)
{
    bf_registry *reg = NULL;
    srv_defdir *files = NULL;
    char diag[512] = "";
    if (srv_registry_load(&reg, &files, cfg, diag, sizeof diag) != BF_OK) {
        srv_log(BF_LOG_ERROR, "preflight: %s", diag);
        return 1;
    }
    for (int i = 0; i < cfg->n_ids; i++) {
        if (bf_registry_find(reg, cfg->ids[i]) == NULL) {
            fprintf(stderr,
                    "buzz-backfilld: preflight: no module or definition file defines %.*s\n",
                    BF_ID_MAX, cfg->ids[i]);
            srv_registry_unload(reg, files);
            return 2;
        }
    }
    srv_context ctx;
    srv_context_init(&ctx, cfg, reg, NULL);
    bf_engine *e = NULL;
    bf_err err = bf_engine_open(&e, &ctx.engine_cfg, reg);
    if (err != BF_OK) {
        srv_log(BF_LOG_ERROR, "preflight: %s", bf_err_str(err));
        srv_registry_unload(reg, files);
        return 1;
    }
    int failed = 0;
    size_t n = cfg->n_ids > 0 ? (size_t)cfg->n_ids : bf_registry_count(reg);
    for (size_t i = 0; i < n; i++) {
        const char *id = cfg->n_ids > 0 ? cfg->ids[i] : bf_registry_at(reg, i)->id;
        char report[BF_DIAG_MAX];
        err = bf_preflight(e, id, report, sizeof report);
        if (err == BF_OK) {
            printf("ok    %s: %s\n", id, report);
        } else if (strncmp(report, bf_err_str(err), strlen(bf_err_str(err))) == 0) {
            printf("FAIL  %s: %s\n", id, report); /* the report already names the error */
        } else {
            printf("FAIL  %s: %s: %s\n", id, bf_err_str(err), report);
            failed++;
        }
    }
    fflush(stdout);
    if (cfg->preflight_watch_s > 0)
        failed += startup_preflight_watch(cfg, e, reg, n);
    bf_engine_close(e);
    srv_registry_unload(reg, files);
    return failed > 0 ? 1 : 0;
}

/* ---- the startup sequence ------------------------------------------------------------------ */

typedef struct startup_worker {
    srv_startup *s;
    int index;
    pthread_t thread;
    bool started;
    bf_worker *worker; /* while bf_worker_run() runs; guarded by s->mtx */
} startup_worker;

struct srv_startup {
    srv_context *ctx;
    const srv_config *cfg;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mtx;
    pthread_cond_t cond;
    bool stopping;
    startup_worker *workers;
    int n_workers;
    /* Under mtx: 0 while the workers, spawned once the startup session is connected, have
     * connected and wait; 1 once the startup sequence has registered the definitions and
     * started the required backfills (they may claim); -1 when it ended without (they end). A
     * restarted daemon among busy ones spent a third of its time to the first claim opening the
     * worker's session after the sequence (docs/benchmarks.md, "busy claim"). */
    int workers_gate;
    /* Under mtx: set by srv_startup_proceed() once the registry is complete and the listeners
     * are up; until then the sequence only opens sessions. */
    bool proceed;
};

/* Sleep up to ms unless stopping; returns false when stopping. */
static bool startup_pause(srv_startup *s, int ms)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->mtx);
    while (!s->stopping && pthread_cond_timedwait(&s->cond, &s->mtx, &until) != ETIMEDOUT)
        ;
    bool go_on = !s->stopping;
    pthread_mutex_unlock(&s->mtx);
    return go_on;
}

static bool startup_stopping(srv_startup *s)
{
    pthread_mutex_lock(&s->mtx);
    bool stop = s->stopping;
    pthread_mutex_unlock(&s->mtx);
    return stop;
}

static int startup_next_backoff(int ms)
{
    return ms < STARTUP_BACKOFF_MAX_MS / 2 ? ms * 2 : STARTUP_BACKOFF_MAX_MS;
}

static bf_engine *startup_connect(srv_startup *s, const char *owner)
{
    bf_config cfg = s->ctx->engine_cfg;
    cfg.owner = owner;
    int backoff = STARTUP_BACKOFF_MIN_MS;
    for (;;) {
        bf_engine *e = NULL;
        bf_err err = bf_engine_open(&e, &cfg, s->ctx->registry);
        if (err == BF_OK)
            return e;
        srv_log_event(BF_LOG_WARN, BF_EV_DB_UNAVAILABLE, "database: %s; retrying in %d ms",
                      bf_err_str(err), backoff);
        if (!startup_pause(s, backoff))
            return NULL;
        backoff = startup_next_backoff(backoff);
    }
}

/* Migrations (auto_migrate) or the compatibility check, until the schema is right. */
static bool startup_schema(srv_startup *s, bf_engine *e)
{
    int backoff = STARTUP_BACKOFF_MIN_MS;
    bf_err last = BF_OK;
    for (;;) {
        bf_err err = s->cfg->auto_migrate ? bf_migrate(e) : BF_OK;
        int version = 0;
        if (err == BF_OK)
            err = bf_schema_check(e, &version);
        if (err == BF_OK) {
            srv_log(BF_LOG_INFO, "engine schema version %d %s", version,
                    s->cfg->auto_migrate ? "(migrations applied)" : "(checked; auto_migrate off)");
            return true;
        }
        int wait = backoff;
        if (startup_transient(err)) {
            backoff = startup_next_backoff(backoff);
        } else {
            wait = STARTUP_SCHEMA_RECHECK; /* an operator has to act: re-check now and then */
            srv_log(err == last ? BF_LOG_DEBUG : BF_LOG_ERROR,
                    "engine schema: %s: %s; not ready, re-checking every %d s%s", bf_err_str(err),
                    bf_engine_diag(e), STARTUP_SCHEMA_RECHECK / 1000,
                    s->cfg->auto_migrate ? "" : " (run buzz-backfilld migrate, or auto_migrate)");
        }
        last = err;
        if (!startup_pause(s, wait))
            return false;
    }
}

/* Register every definition (idempotent), all in a few statements (bf_register_many). A
 * definition whose stored row it cannot interpret is reported (bf_register says why) and left
 * alone: workers never claim it (claims check the key types). */
static bool startup_register(srv_startup *s, bf_engine *e)
{
    int backoff = STARTUP_BACKOFF_MIN_MS;
    size_t n = bf_registry_count(s->ctx->registry);
    const bf_definition **defs = calloc(n ? n : 1, sizeof *defs);
    bf_err *errs = calloc(n ? n : 1, sizeof *errs);
    for (size_t i = 0; defs != NULL && i < n; i++)
        defs[i] = bf_registry_at(s->ctx->registry, i);
    bf_err err;
    while ((err = defs && errs ? bf_register_many(e, defs, n, errs) : BF_ERR_NOMEM) != BF_OK) {
        srv_log(BF_LOG_WARN, "registration: %s; retrying in %d ms", bf_err_str(err), backoff);
        if (!startup_pause(s, backoff)) {
            free(defs);
            free(errs);
            return false;
        }
        backoff = startup_next_backoff(backoff);
    }
    for (size_t i = 0; i < n; i++) {
        bf_err why = errs[i] == BF_OK ? BF_OK : bf_register(e, defs[i]); /* says why */
        if (why != BF_OK)
            srv_log(BF_LOG_ERROR, "cannot register %s: %s; it will not run here", defs[i]->id,
                    bf_engine_diag(e));
    }
    srv_log(BF_LOG_INFO, "registered %zu definition%s", n, n == 1 ? "" : "s");
    free(defs);
    free(errs);
    return true;
}

static bool startup_start_required(srv_startup *s, bf_engine *e)
{
    if (!s->cfg->auto_backfill) {
        srv_log(BF_LOG_INFO, "manual mode: pending backfills wait for an operator's start");
        return true;
    }
    bf_actor who = {NULL, "automatic startup", NULL};
    int backoff = STARTUP_BACKOFF_MIN_MS;
    for (;;) {
        int started = 0;
        bf_err err = bf_start_required(e, &who, &started);
        if (err == BF_OK) {
            srv_log(BF_LOG_INFO, "automatic mode: started %d pending required backfill%s", started,
                    started == 1 ? "" : "s");
            return true;
        }
        if (!startup_transient(err)) {
            /* the row stays pending and keeps the gate closed; an operator can see why */
            srv_log(BF_LOG_ERROR, "automatic start: %s: %s", bf_err_str(err), bf_engine_diag(e));
            return true;
        }
        srv_log(BF_LOG_WARN, "automatic start: %s; retrying in %d ms", bf_err_str(err), backoff);
        if (!startup_pause(s, backoff))
            return false;
        backoff = startup_next_backoff(backoff);
    }
}

/* Wait for srv_startup_proceed(); false when stopping instead. */
static bool startup_wait_proceed(srv_startup *s)
{
    pthread_mutex_lock(&s->mtx);
    while (!s->proceed && !s->stopping)
        pthread_cond_wait(&s->cond, &s->mtx);
    bool go = !s->stopping;
    pthread_mutex_unlock(&s->mtx);
    return go;
}

void srv_startup_proceed(srv_startup *s)
{
    pthread_mutex_lock(&s->mtx);
    s->proceed = true;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->mtx);
}

/* ---- workers ------------------------------------------------------------------------------- */

/* A connected worker waits here until the startup sequence is done; false: it is to end. */
static bool startup_workers_gate(srv_startup *s)
{
    pthread_mutex_lock(&s->mtx);
    while (s->workers_gate == 0 && !s->stopping)
        pthread_cond_wait(&s->cond, &s->mtx);
    bool go = s->workers_gate > 0 && !s->stopping;
    pthread_mutex_unlock(&s->mtx);
    return go;
}

static void startup_workers_release(srv_startup *s, bool go)
{
    pthread_mutex_lock(&s->mtx);
    s->workers_gate = go ? 1 : -1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->mtx);
}

static void *startup_worker_main(void *arg)
{
    startup_worker *sw = arg;
    srv_startup *s = sw->s;
    char host[64] = "host", owner[BF_OWNER_MAX];
    (void)gethostname(host, sizeof host - 1);
    snprintf(owner, sizeof owner, "%s:%ld:w%d", host, (long)getpid(), sw->index);
    bf_engine *e = NULL;
    int backoff = STARTUP_BACKOFF_MIN_MS;
    while (!startup_stopping(s)) {
        if (e == NULL && (e = startup_connect(s, owner)) == NULL)
            break;
        if (!startup_workers_gate(s))
            break;
        bf_worker_hooks hooks = {NULL, NULL, NULL}; /* the engine logs every step's events */
        bf_worker *w = NULL;
        bf_err err = bf_worker_new(&w, e, &hooks);
        if (err == BF_OK) {
            pthread_mutex_lock(&s->mtx);
            bool stop = s->stopping;
            sw->worker = stop ? NULL : w;
            pthread_mutex_unlock(&s->mtx);
            err = stop ? BF_OK : bf_worker_run(w, false);
            pthread_mutex_lock(&s->mtx);
            sw->worker = NULL;
            pthread_mutex_unlock(&s->mtx);
            bf_worker_free(w); /* releases a claim still held */
        }
        if (err == BF_OK) {
            backoff = STARTUP_BACKOFF_MIN_MS;
            continue; /* stopped, or nothing more to do: the loop condition decides */
        }
        srv_log_event(BF_LOG_WARN, BF_EV_WORKER_RESTART, "worker %d: %s: %s; restarting in %d ms",
                      sw->index, bf_err_str(err), bf_engine_diag(e), backoff);
        if (!startup_pause(s, backoff))
            break;
        backoff = startup_next_backoff(backoff);
    }
    bf_engine_close(e);
    return NULL;
}

static void startup_spawn_workers(srv_startup *s)
{
    int n = s->cfg->workers;
    startup_worker *workers = calloc(n > 0 ? (size_t)n : 1, sizeof *workers);
    if (workers == NULL) {
        srv_log(BF_LOG_ERROR, "out of memory: no workers started");
        return;
    }
    /* under the lock: srv_startup_stop() walks this array from another thread */
    pthread_mutex_lock(&s->mtx);
    s->workers = workers;
    for (int i = 0; i < n && !s->stopping; i++) {
        startup_worker *sw = &workers[i];
        sw->s = s;
        sw->index = i + 1;
        if (pthread_create(&sw->thread, NULL, startup_worker_main, sw) != 0) {
            srv_log(BF_LOG_ERROR, "cannot start worker thread %d", i + 1);
            break;
        }
        sw->started = true;
        s->n_workers = i + 1;
    }
    pthread_mutex_unlock(&s->mtx);
}

static void startup_prune_loop(srv_startup *s, bf_engine *e)
{
    int retention = s->cfg->request_retention_s;
    long interval = (long)retention * 100; /* a tenth of the retention, in ms */
    if (interval < STARTUP_PRUNE_MIN_MS)
        interval = STARTUP_PRUNE_MIN_MS;
    if (interval > STARTUP_PRUNE_MAX_MS)
        interval = STARTUP_PRUNE_MAX_MS;
    do {
        long deleted = 0;
        bf_err err = bf_request_prune(e, retention, &deleted);
        if (err != BF_OK)
            srv_log(BF_LOG_WARN, "request pruning: %s", bf_err_str(err));
        else if (deleted > 0)
            srv_log(BF_LOG_INFO, "pruned %ld request record%s older than %d s", deleted,
                    deleted == 1 ? "" : "s", retention);
        /* old-writer watches of completed backfills past their grace (or that completion could
         * not remove) */
        int swept = 0;
        if (bf_watch_sweep(e, s->cfg->watch_grace_s, &swept) != BF_OK)
            srv_log(BF_LOG_WARN, "old-writer watch sweep: %s", bf_engine_diag(e));
    } while (startup_pause(s, (int)interval));
}

static bool startup_notify_status(const char *status)
{
    srv_notify_status(status);
    return true;
}

static void *startup_main(void *arg)
{
    srv_startup *s = arg;
    srv_log(BF_LOG_INFO, "startup: auto_migrate=%s auto_backfill=%s",
            s->cfg->auto_migrate ? "on" : "off", s->cfg->auto_backfill ? "on" : "off");
    srv_notify_status("connecting to the database");
    bf_engine *e = startup_connect(s, NULL);
    if (e != NULL)
        startup_spawn_workers(s); /* they open their sessions meanwhile, then wait */
    bool done = e != NULL && startup_wait_proceed(s) &&
                startup_notify_status("checking the schema") && startup_schema(s, e) &&
                startup_notify_status("registering definitions") && startup_register(s, e) &&
                startup_start_required(s, e);
    startup_workers_release(s, done);
    if (done) {
        pthread_mutex_lock(&s->mtx);
        int started = s->n_workers;
        pthread_mutex_unlock(&s->mtx);
        srv_log(BF_LOG_INFO, "%d worker%s recovering and advancing started backfills", started,
                started == 1 ? "" : "s");
        srv_log_event(BF_LOG_INFO, BF_EV_STARTUP_COMPLETE, "startup complete");
        srv_notify_ready("serving");
        startup_prune_loop(s, e);
    }
    for (int i = 0; i < s->n_workers; i++)
        if (s->workers[i].started)
            pthread_join(s->workers[i].thread, NULL);
    bf_engine_close(e);
    return NULL;
}

bf_err srv_startup_begin(srv_startup **out, srv_context *ctx, const srv_config *cfg)
{
    srv_startup *s = calloc(1, sizeof *s);
    if (s == NULL)
        return BF_ERR_NOMEM;
    s->ctx = ctx;
    s->cfg = cfg;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cond, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&s->mtx, NULL);
    if (pthread_create(&s->thread, NULL, startup_main, s) != 0) {
        srv_startup_free(s);
        return BF_ERR_INTERNAL;
    }
    s->thread_started = true;
    *out = s;
    return BF_OK;
}

void srv_startup_stop(srv_startup *s)
{
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mtx);
    s->stopping = true;
    for (int i = 0; i < s->n_workers; i++)
        bf_worker_stop(s->workers[i].worker); /* NULL-safe */
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->mtx);
}

void srv_startup_free(srv_startup *s)
{
    if (s == NULL)
        return;
    srv_startup_stop(s);
    if (s->thread_started)
        pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->mtx);
    free(s->workers);
    free(s);
}
