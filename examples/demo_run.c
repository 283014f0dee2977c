/*
 * demo_run.c - buzz-demo-run: drive a definitions module's backfills to completion through the
 * engine API, with a live progress report. The demo until the daemon exists.
 *
 * Order of work: open an engine, migrate the engine schema, load the definitions module,
 * register every definition, start the chosen pending backfills (audited as actor "demo"),
 * then run N worker threads, each with its own engine (connection) and bf_worker, while the
 * main thread prints one progress line per backfill every second. Finally it prints the
 * backfill table (bf_list) and the newest audit rows (bf_audit_list).
 *
 * Everything it shows is read from PostgreSQL (bf_get/bf_list) at that moment; rate and ETA
 * are derived from those reads and printed as "unknown" when they cannot be, never as zero.
 *
 * Signals: SIGINT/SIGTERM are handled on the main thread only (workers block them). The
 * handler calls bf_worker_stop() (async-signal-safe); workers cancel the batch in flight (it
 * rolls back whole), release their claims and return. The rows stay running: a later run resumes
 * from the committed checkpoint. A second signal kills the process (SA_RESETHAND).
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "buzz/definition.h"
#include "buzz/engine.h"

#define DEMO_MAX_WORKERS 64
#define DEMO_RATE_WINDOW 5  /* samples (seconds) the rate is averaged over */
#define DEMO_AUDIT_ROWS  12 /* audit rows shown at the end */
#define DEMO_CKPT_SHOWN  44 /* bytes of a checkpoint shown in the live report */

typedef enum demo_start { DEMO_START_ALL, DEMO_START_REQUIRED, DEMO_START_NONE } demo_start;

typedef struct demo_opts {
    const char *db;
    const char *module;
    int workers;
    demo_start start;
    bool batch_report;
    bool verbose;
    bool list_only;
} demo_opts;

typedef struct demo_worker {
    int index;
    const demo_opts *opts;
    const bf_registry *reg;
    bf_engine *engine;
    bf_worker *worker;
    pthread_t thread;
    bool joined;
    bf_err result;
    char diag[BF_DIAG_MAX];
} demo_worker;

/* progress samples of one backfill (PostgreSQL time, keys passed) */
typedef struct demo_rate {
    int n;
    int64_t at[DEMO_RATE_WINDOW];
    int64_t rows[DEMO_RATE_WINDOW];
} demo_rate;

static atomic_bool g_stop;
static atomic_int g_live_workers;
static _Atomic(bf_worker *) g_workers[DEMO_MAX_WORKERS];

static const char *g_prog = "buzz-demo-run";

/* ---- small helpers --------------------------------------------------------------------- */

static void demo_usage(FILE *f)
{
    fprintf(f,
            "Usage: %s --db URL --module PATH [options]\n"
            "       %s --module PATH --list\n"
            "\n"
            "Runs the backfills of a definitions module to completion through the buzz-backfill\n"
            "engine and shows their progress. This is the demo until the daemon exists.\n"
            "\n"
            "Steps: migrate the engine schema (buzz_backfill), load the module, register its\n"
            "definitions, start the pending ones (audited as actor \"demo\"), run worker threads\n"
            "until no backfill is running or validating, then print the backfill table and the\n"
            "newest audit rows.\n"
            "\n"
            "Options:\n"
            "  --db URL           libpq connection string or URL of the application database\n"
            "  --module PATH      definitions module (.so exporting buzz_backfill_module)\n"
            "  --workers N        worker threads, each with its own connection (default 2, max "
            "%d)\n"
            "  --start WHICH      which pending backfills to start: all (default), required\n"
            "                     (only those marked required, as the relay's automatic mode\n"
            "                     does), or none (only work on already started ones)\n"
            "  --batch-report     also print every claim and every committed batch\n"
            "  --verbose          also print the engine's informational log\n"
            "  --list             print the module's definitions and exit (no database)\n"
            "  -h, --help         show this help\n"
            "\n"
            "Ctrl-C stops the workers at the next batch boundary and releases their claims; the\n"
            "backfills stay running and a later run resumes from the committed checkpoint.\n"
            "\n"
            "Exit status: 0 when every backfill of the module is completed (or was left pending\n"
            "on purpose), 1 when one is failed, blocked, paused or unfinished or on error,\n"
            "2 on bad usage, 130 when interrupted.\n",
            g_prog, g_prog, DEMO_MAX_WORKERS);
}

static void demo_log(void *arg, const bf_log_record *rec)
{
    const demo_opts *opts = arg;
    bf_log_level level = rec->level;
    const char *msg = rec->msg;
    if (level < BF_LOG_WARN && !(opts->verbose && level == BF_LOG_INFO))
        return;
    static const char *const names[] = {"debug", "info", "warning", "error"};
    fprintf(stderr, "%s: engine %s: %s\n", g_prog, names[level], msg);
}

/* Sleep up to ms, in slices, returning early when stopped or when done() says so. */
static void demo_nap(int ms, bool (*done)(void))
{
    for (int slept = 0; slept < ms; slept += 50) {
        if (atomic_load(&g_stop) || (done != NULL && done()))
            return;
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static bool demo_workers_done(void)
{
    return atomic_load(&g_live_workers) == 0;
}

static void demo_fmt_duration(char *buf, size_t cap, double s)
{
    if (s < 10)
        snprintf(buf, cap, "%.1fs", s);
    else if (s < 60)
        snprintf(buf, cap, "%ds", (int)s);
    else if (s < 3600)
        snprintf(buf, cap, "%dm%02ds", (int)s / 60, (int)s % 60);
    else
        snprintf(buf, cap, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
}

static void demo_fmt_count(char *buf, size_t cap, double v)
{
    if (v >= 1e6)
        snprintf(buf, cap, "%.1fM", v / 1e6);
    else if (v >= 1e4)
        snprintf(buf, cap, "%.1fk", v / 1e3);
    else
        snprintf(buf, cap, "%.0f", v);
}

/* A bounded rendering of a key text: at most max bytes, "..." when cut. */
static void demo_fmt_key(char *buf, size_t cap, bool has, const char *key, size_t max)
{
    if (!has) {
        snprintf(buf, cap, "none");
        return;
    }
    if (strlen(key) <= max)
        snprintf(buf, cap, "%s", key);
    else
        snprintf(buf, cap, "%.*s...", (int)(max - 3), key);
}

static const char *demo_bool(bool b)
{
    return b ? "yes" : "no";
}

/* ---- progress -------------------------------------------------------------------------- */

static void demo_rate_add(demo_rate *r, int64_t at, int64_t rows)
{
    if (r->n == DEMO_RATE_WINDOW) {
        memmove(r->at, r->at + 1, sizeof r->at[0] * (DEMO_RATE_WINDOW - 1));
        memmove(r->rows, r->rows + 1, sizeof r->rows[0] * (DEMO_RATE_WINDOW - 1));
        r->n--;
    }
    r->at[r->n] = at;
    r->rows[r->n] = rows;
    r->n++;
}

/* rows per second over the window; false when there is no basis for one yet */
static bool demo_rate_get(const demo_rate *r, double *out)
{
    if (r->n < 2 || r->at[r->n - 1] <= r->at[0])
        return false;
    *out = (double)(r->rows[r->n - 1] - r->rows[0]) / ((double)(r->at[r->n - 1] - r->at[0]) / 1e6);
    return true;
}

/* One live line: state, keys passed of the estimate, batches, checkpoint, rate and ETA. */
static void demo_progress_line(const bf_backfill *b, const demo_rate *r, char *line, size_t cap)
{
    char rows[24], est[32], pct[16] = "", rate[32] = "unknown", eta[48] = "unknown", ckpt[64];
    if (b->has_rows_covered)
        demo_fmt_count(rows, sizeof rows, (double)b->rows_covered);
    else
        snprintf(rows, sizeof rows, "unknown");
    if (b->has_source_estimate) {
        char n[24];
        demo_fmt_count(n, sizeof n, (double)b->source_estimate);
        snprintf(est, sizeof est, "~%s", n);
    } else {
        snprintf(est, sizeof est, "unknown");
    }
    double rps = 0;
    bool has_rate = b->state == BF_STATE_RUNNING && demo_rate_get(r, &rps);
    if (b->state != BF_STATE_RUNNING) {
        snprintf(rate, sizeof rate, "-"); /* nothing is being repaired now */
    } else if (has_rate) {
        char n[24];
        demo_fmt_count(n, sizeof n, rps);
        snprintf(rate, sizeof rate, "%s rows/s", n);
    }
    switch (b->state) {
    case BF_STATE_COMPLETED:
        snprintf(eta, sizeof eta, "done");
        snprintf(pct, sizeof pct, "100%%");
        break;
    case BF_STATE_VALIDATING:
        snprintf(eta, sizeof eta, "validating");
        break;
    case BF_STATE_RUNNING:
        /* the estimate is the planner's row count at start: progress is approximate, and an
         * estimate already passed or a rate of zero gives no ETA at all. Progress through the
         * source is the keys passed (rows_covered), not the rows changed. */
        if (b->has_source_estimate && b->source_estimate > 0 && b->has_rows_covered) {
            int64_t p = b->rows_covered * 100 / b->source_estimate;
            snprintf(pct, sizeof pct, "~%d%%", p > 99 ? 99 : p < 0 ? 0 : (int)p);
            if (has_rate && rps > 0 && b->source_estimate > b->rows_covered) {
                char d[16];
                demo_fmt_duration(d, sizeof d,
                                  (double)(b->source_estimate - b->rows_covered) / rps);
                snprintf(eta, sizeof eta, "~%s", d);
            }
        }
        if (!b->claimed && b->has_next_attempt && b->next_attempt_at > b->now)
            snprintf(eta, sizeof eta, "unknown (retry %d in %.1fs)", b->attempts + 1,
                     (double)(b->next_attempt_at - b->now) / 1e6);
        else if (!b->claimed)
            snprintf(eta, sizeof eta, "unknown (waiting for a worker)");
        break;
    default: /* pending, paused, blocked, failed: no ETA applies */
        snprintf(eta, sizeof eta, "-");
        break;
    }
    demo_fmt_key(ckpt, sizeof ckpt, b->has_checkpoint, b->checkpoint, DEMO_CKPT_SHOWN);
    snprintf(line, cap, "%-28s %-10s %5s  rows %7s/%-8s batches %-6lld ckpt %-46s %-16s ETA %s",
             b->id, bf_state_name(b->state), pct, rows, est, (long long)b->batches_committed, ckpt,
             rate, eta);
}

typedef struct demo_report {
    bf_engine *engine;
    const bf_registry *reg;
    demo_rate *rates;
    bool redraw; /* a terminal without the batch report: rewrite the block in place */
    int drawn;   /* lines of the previous block */
    struct timespec t0;
} demo_report;

static void demo_report_tick(demo_report *rep)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long elapsed = (long)(now.tv_sec - rep->t0.tv_sec);
    size_t n = bf_registry_count(rep->reg);
    if (rep->redraw && rep->drawn > 0)
        printf("\033[%dA", rep->drawn);
    int lines = 0;
    for (size_t i = 0; i < n; i++) {
        const char *id = bf_registry_at(rep->reg, i)->id;
        bf_backfill b;
        char line[320];
        bf_err err = bf_get(rep->engine, id, &b);
        if (err == BF_OK) {
            demo_rate_add(&rep->rates[i], b.now, b.has_rows_covered ? b.rows_covered : 0);
            demo_progress_line(&b, &rep->rates[i], line, sizeof line);
        } else {
            /* a failed read is unknown, not zero */
            snprintf(line, sizeof line, "%-28s unknown (could not read: %s)", id,
                     bf_engine_diag(rep->engine));
        }
        printf("%s[t+%3lds] %s\n", rep->redraw ? "\033[2K" : "", elapsed, line);
        lines++;
    }
    fflush(stdout);
    rep->drawn = lines;
}

/* ---- workers --------------------------------------------------------------------------- */

static void demo_after_claim(void *arg, const char *id, int64_t generation)
{
    const demo_worker *dw = arg;
    printf("  [w%d] claimed %s at generation %lld\n", dw->index, id, (long long)generation);
}

static void demo_after_step(void *arg, const bf_step_info *s)
{
    const demo_worker *dw = arg;
    if (s->step == BF_STEP_BATCH)
        printf("  [w%d] %s gen %lld: %ld %s, %ld keys, %ld repaired, checkpoint %s\n", dw->index,
               s->id, (long long)s->generation, s->batches, s->batches == 1 ? "batch" : "batches",
               s->rows, s->touched, s->checkpoint);
    else
        printf("  [w%d] %s gen %lld: %s%s%s\n", dw->index, s->id, (long long)s->generation,
               bf_step_name(s->step), s->detail[0] ? ": " : "", s->detail);
}

/* Is any backfill this registry knows still running or validating? */
static bf_err demo_any_active(bf_engine *e, const bf_registry *reg, bool *active_out)
{
    bool active = false;
    for (size_t i = 0; i < bf_registry_count(reg) && !active; i++) {
        bf_backfill b;
        bf_err err = bf_get(e, bf_registry_at(reg, i)->id, &b);
        if (err != BF_OK)
            return err;
        active = b.state == BF_STATE_RUNNING || b.state == BF_STATE_VALIDATING;
    }
    *active_out = active;
    return BF_OK;
}

/*
 * bf_worker_run(until_idle) returns when nothing is claimable right now. That is not the end:
 * another worker may hold the last claim, or a row may wait out a retry backoff. So go round
 * again until no row of ours is running or validating, or until stopped.
 */
static void *demo_worker_main(void *arg)
{
    demo_worker *dw = arg;
    while (!atomic_load(&g_stop)) {
        bf_err err = bf_worker_run(dw->worker, true);
        bool active = false;
        if (err == BF_OK && !atomic_load(&g_stop))
            err = demo_any_active(dw->engine, dw->reg, &active);
        if (err != BF_OK) {
            dw->result = err;
            snprintf(dw->diag, sizeof dw->diag, "%s", bf_engine_diag(dw->engine));
            break;
        }
        if (!active)
            break;
        demo_nap(200, NULL);
    }
    atomic_fetch_sub(&g_live_workers, 1);
    return NULL;
}

static void demo_on_signal(int sig)
{
    (void)sig;
    atomic_store(&g_stop, true);
    for (int i = 0; i < DEMO_MAX_WORKERS; i++) {
        bf_worker *w = atomic_load(&g_workers[i]);
        if (w != NULL)
            bf_worker_stop(w);
    }
    static const char msg[] = "\nstopping at the next batch boundary (press again to abort)\n";
    ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)n;
}

/* ---- phases ---------------------------------------------------------------------------- */

static bf_err demo_open(bf_engine **out, const demo_opts *opts, const bf_registry *reg,
                        const char *role)
{
    char host[64] = "host", owner[BF_OWNER_MAX];
    (void)gethostname(host, sizeof host - 1);
    snprintf(owner, sizeof owner, "demo-run:%s:%ld:%s", host, (long)getpid(), role);
    bf_config cfg = {
        .conninfo = opts->db,
        .owner = owner,
        .log = demo_log,
        .log_arg = (void *)opts,
    };
    return bf_engine_open(out, &cfg, reg);
}

static void demo_print_definitions(const bf_registry *reg)
{
    printf("%zu definitions:\n", bf_registry_count(reg));
    for (size_t i = 0; i < bf_registry_count(reg); i++) {
        const bf_definition *d = bf_registry_at(reg, i);
        char key[160] = "";
        size_t off = 0;
        for (int k = 0; k < d->nkey && off < sizeof key; k++)
            off += (size_t)snprintf(key + off, sizeof key - off, "%s%s %s", k ? ", " : "",
                                    d->key[k].name, bf_key_type_name(d->key[k].type));
        printf("  %-28s %-9s %s key (%s), batch %d, %s\n", d->id,
               d->required ? "required" : "manual", d->table, key, d->batch_size,
               d->mutate || d->validate ? "callbacks" : "declarative");
    }
}

/* Start the chosen pending backfills, one audited start action each. */
static bf_err demo_start_backfills(bf_engine *e, const bf_registry *reg, demo_start which)
{
    const bf_actor who = {.actor = "demo", .authority = "demo"};
    for (size_t i = 0; i < bf_registry_count(reg); i++) {
        const bf_definition *d = bf_registry_at(reg, i);
        bf_backfill b;
        bf_err err = bf_get(e, d->id, &b);
        if (err != BF_OK) {
            fprintf(stderr, "%s: could not read %s: %s\n", g_prog, d->id, bf_engine_diag(e));
            return err;
        }
        if (b.state != BF_STATE_PENDING) {
            printf("  %-28s already %s\n", d->id, bf_state_name(b.state));
            continue;
        }
        if (which == DEMO_START_NONE || (which == DEMO_START_REQUIRED && !d->required)) {
            printf("  %-28s left pending (%s)\n", d->id,
                   which == DEMO_START_NONE ? "--start none" : "not required: start manually");
            continue;
        }
        bf_action_result res;
        err = bf_action_apply(e, BF_ACTION_START, d->id, &who, &res);
        if (err == BF_ERR_CONFLICT) { /* someone else started it meanwhile: converged */
            printf("  %-28s already %s\n", d->id, bf_state_name(res.result));
            continue;
        }
        if (err != BF_OK) {
            fprintf(stderr, "%s: could not start %s: %s\n", g_prog, d->id, res.detail);
            return err;
        }
        char bound[80], est[32] = "unknown";
        demo_fmt_key(bound, sizeof bound, res.row.has_bound, res.row.bound, 72);
        if (res.row.has_source_estimate)
            snprintf(est, sizeof est, "~%lld", (long long)res.row.source_estimate);
        printf("  %-28s started at generation %lld: %s, bound %s, source estimate %s rows\n", d->id,
               (long long)res.generation, res.detail,
               res.row.bound_empty ? "(empty source set)" : bound, est);
    }
    return BF_OK;
}

static bf_err demo_run_workers(const demo_opts *opts, const bf_registry *reg, bf_engine *main_e)
{
    demo_worker *dws = calloc((size_t)opts->workers, sizeof *dws);
    demo_rate *rates = calloc(bf_registry_count(reg) ? bf_registry_count(reg) : 1, sizeof *rates);
    if (dws == NULL || rates == NULL) {
        free(dws);
        free(rates);
        return BF_ERR_NOMEM;
    }
    bf_err err = BF_OK;
    int opened = 0;
    for (; opened < opts->workers && err == BF_OK; opened++) {
        demo_worker *dw = &dws[opened];
        char role[16];
        snprintf(role, sizeof role, "w%d", opened + 1);
        dw->index = opened + 1;
        dw->opts = opts;
        dw->reg = reg;
        err = demo_open(&dw->engine, opts, reg, role);
        if (err == BF_OK) {
            bf_worker_hooks hooks = {.arg = dw};
            if (opts->batch_report) {
                hooks.after_claim = demo_after_claim;
                hooks.after_step = demo_after_step;
            }
            err = bf_worker_new(&dw->worker, dw->engine, &hooks);
        }
        if (err != BF_OK)
            fprintf(stderr, "%s: worker %d: %s\n", g_prog, dw->index,
                    dw->engine ? bf_engine_diag(dw->engine) : bf_err_str(err));
    }

    /* workers block the signals; only the main thread handles them */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    for (int i = 0; i < opened && err == BF_OK; i++) {
        atomic_store(&g_workers[i], dws[i].worker);
        atomic_fetch_add(&g_live_workers, 1);
        if (pthread_create(&dws[i].thread, NULL, demo_worker_main, &dws[i]) != 0) {
            atomic_fetch_sub(&g_live_workers, 1);
            fprintf(stderr, "%s: could not create worker thread %d\n", g_prog, i + 1);
            err = BF_ERR_RESOURCE_EXHAUSTED;
            atomic_store(&g_stop, true);
            break;
        }
        dws[i].joined = true;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err != BF_OK) /* stop the threads that did start */
        for (int i = 0; i < opened; i++)
            if (dws[i].worker != NULL)
                bf_worker_stop(dws[i].worker);

    if (err == BF_OK)
        printf("\nprogress (%d workers; rows = rows repaired, ~ = planner estimate at start):\n",
               opts->workers);
    demo_report rep = {.engine = main_e,
                       .reg = reg,
                       .rates = rates,
                       .redraw = isatty(STDOUT_FILENO) && !opts->batch_report};
    clock_gettime(CLOCK_MONOTONIC, &rep.t0);
    while (err == BF_OK && !demo_workers_done()) {
        demo_report_tick(&rep);
        demo_nap(1000, demo_workers_done);
    }
    if (err == BF_OK)
        demo_report_tick(&rep);

    for (int i = 0; i < opened; i++) {
        if (dws[i].joined)
            pthread_join(dws[i].thread, NULL);
        if (dws[i].result != BF_OK) {
            fprintf(stderr, "%s: worker %d stopped: %s (%s)\n", g_prog, dws[i].index,
                    bf_err_name(dws[i].result), dws[i].diag);
            if (err == BF_OK)
                err = dws[i].result;
        }
    }
    /* the handler may still run: unpublish before freeing */
    for (int i = 0; i < DEMO_MAX_WORKERS; i++)
        atomic_store(&g_workers[i], NULL);
    for (int i = 0; i < opened; i++) {
        bf_worker_free(dws[i].worker);
        bf_engine_close(dws[i].engine);
    }
    free(dws);
    free(rates);
    return err;
}

/* The backfill table (bf_list, every row) and the newest audit rows (bf_audit_list). */
static bf_err demo_final_report(bf_engine *e)
{
    enum { PAGE = 50 };
    bf_backfill *rows = calloc(PAGE, sizeof *rows);
    bf_audit_entry *audit = calloc(DEMO_AUDIT_ROWS, sizeof *audit);
    if (rows == NULL || audit == NULL) {
        free(rows);
        free(audit);
        return BF_ERR_NOMEM;
    }
    printf("\nbackfills (buzz_backfill.backfill):\n");
    printf("  %-28s %-10s %-4s %9s %8s %4s %-10s %8s  %s\n", "ID", "STATE", "REQ", "ROWS",
           "BATCHES", "GEN", "VALIDATION", "TIME", "CHECKPOINT");
    char after[BF_ID_MAX + 1] = "";
    bf_err err = BF_OK;
    for (;;) {
        int n = 0;
        err = bf_list(e, 0, after[0] ? after : NULL, rows, PAGE, &n);
        if (err != BF_OK) {
            fprintf(stderr, "%s: could not list backfills: %s\n", g_prog, bf_engine_diag(e));
            break;
        }
        for (int i = 0; i < n; i++) {
            const bf_backfill *b = &rows[i];
            char t[16] = "-", ckpt[80];
            if (b->has_started_at) {
                int64_t end = b->has_completed_at ? b->completed_at : b->now;
                demo_fmt_duration(t, sizeof t, (double)(end - b->started_at) / 1e6);
            }
            demo_fmt_key(ckpt, sizeof ckpt, b->has_checkpoint, b->checkpoint, 72);
            printf("  %-28s %-10s %-4s %9lld %8lld %4lld %-10s %8s  %s\n", b->id,
                   bf_state_name(b->state), demo_bool(b->required), (long long)b->rows_committed,
                   (long long)b->batches_committed, (long long)b->generation,
                   bf_validation_outcome_name(b->validation), t, ckpt);
            if (b->validation_detail[0])
                printf("  %-28s   validation: %s\n", "", b->validation_detail);
            if (b->error_class[0])
                printf("  %-28s   last error (%s, attempt %d): %s\n", "", b->error_class,
                       b->attempts, b->error_detail);
        }
        if (n < PAGE)
            break;
        snprintf(after, sizeof after, "%s", rows[n - 1].id);
    }

    int na = 0;
    if (err == BF_OK && (err = bf_audit_list(e, NULL, 0, audit, DEMO_AUDIT_ROWS, &na)) != BF_OK)
        fprintf(stderr, "%s: could not read the audit: %s\n", g_prog, bf_engine_diag(e));
    if (err == BF_OK) {
        printf("\nnewest %d audit rows (buzz_backfill.audit), oldest first:\n", na);
        printf("  %6s  %-8s %-28s %-9s %-30s %-22s %4s  %s\n", "SEQ", "TIME", "ID", "ACTION",
               "ACTOR / AUTHORITY", "TRANSITION", "GEN", "OUTCOME");
        for (int i = na - 1; i >= 0; i--) {
            const bf_audit_entry *a = &audit[i];
            time_t secs = (time_t)(a->at / 1000000);
            struct tm tm;
            char when[16] = "?", by[2 * BF_ACTOR_MAX + 4], tr[32], gen[24] = "-";
            if (gmtime_r(&secs, &tm) != NULL)
                strftime(when, sizeof when, "%H:%M:%S", &tm);
            snprintf(by, sizeof by, "%s / %s", a->actor[0] ? a->actor : "-", a->authority);
            snprintf(tr, sizeof tr, "%s -> %s", a->prior ? bf_state_name(a->prior) : "none",
                     a->result ? bf_state_name(a->result) : "none");
            if (a->has_generation)
                snprintf(gen, sizeof gen, "%lld", (long long)a->generation);
            printf("  %6lld  %-8s %-28s %-9s %-30.30s %-22s %4s  %s\n", (long long)a->seq, when,
                   a->backfill_id, a->action, by, tr, gen, a->outcome);
        }
    }
    free(rows);
    free(audit);
    return err;
}

/* 0 when every backfill of the module is completed or pending, else 1 (with a reason). */
static int demo_verdict(bf_engine *e, const bf_registry *reg)
{
    int completed = 0, pending = 0, other = 0;
    for (size_t i = 0; i < bf_registry_count(reg); i++) {
        bf_backfill b;
        if (bf_get(e, bf_registry_at(reg, i)->id, &b) != BF_OK) {
            fprintf(stderr, "%s: could not read %s: state unknown\n", g_prog,
                    bf_registry_at(reg, i)->id);
            other++;
            continue;
        }
        if (b.state == BF_STATE_COMPLETED)
            completed++;
        else if (b.state == BF_STATE_PENDING)
            pending++;
        else {
            printf("%s is %s\n", b.id, bf_state_name(b.state));
            other++;
        }
    }
    printf("\n%d of %zu backfills completed", completed, bf_registry_count(reg));
    if (pending)
        printf(", %d left pending (not started)", pending);
    if (other)
        printf(", %d not finished", other);
    printf("\n");
    return other ? 1 : 0;
}

static int demo_parse(int argc, char **argv, demo_opts *o)
{
    static const struct option longopts[] = {
        {"db", required_argument, NULL, 'd'},
        {"module", required_argument, NULL, 'm'},
        {"workers", required_argument, NULL, 'w'},
        {"start", required_argument, NULL, 's'},
        {"batch-report", no_argument, NULL, 'b'},
        {"verbose", no_argument, NULL, 'v'},
        {"list", no_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (demo_opts){.workers = 2, .start = DEMO_START_ALL};
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'd':
            o->db = optarg;
            break;
        case 'm':
            o->module = optarg;
            break;
        case 'w': {
            char *end = NULL;
            long n = strtol(optarg, &end, 10);
            if (end == optarg || *end != '\0' || n < 1 || n > DEMO_MAX_WORKERS) {
                fprintf(stderr, "%s: --workers must be 1..%d\n", g_prog, DEMO_MAX_WORKERS);
                return 2;
            }
            o->workers = (int)n;
            break;
        }
        case 's':
            if (strcmp(optarg, "all") == 0)
                o->start = DEMO_START_ALL;
            else if (strcmp(optarg, "required") == 0)
                o->start = DEMO_START_REQUIRED;
            else if (strcmp(optarg, "none") == 0)
                o->start = DEMO_START_NONE;
            else {
                fprintf(stderr, "%s: --start must be all, required or none\n", g_prog);
                return 2;
            }
            break;
        case 'b':
            o->batch_report = true;
            break;
        case 'v':
            o->verbose = true;
            break;
        case 'l':
            o->list_only = true;
            break;
        case 'h':
            demo_usage(stdout);
            exit(0);
        default:
            fprintf(stderr, "Try '%s --help'.\n", g_prog);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument: %s (see --help)\n", g_prog, argv[optind]);
        return 2;
    }
    if (o->module == NULL || (o->db == NULL && !o->list_only)) {
        fprintf(stderr, "%s: --module%s is required (see --help)\n", g_prog,
                o->list_only ? "" : " and --db");
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    demo_opts opts;
    int rc = demo_parse(argc, argv, &opts);
    if (rc != 0)
        return rc;
    setvbuf(stdout, NULL, _IOLBF, 0);

    bf_registry *reg = NULL;
    bf_engine *e = NULL;
    char diag[BF_DIAG_MAX] = "";
    bf_err err = bf_registry_new(&reg);
    if (err == BF_OK &&
        (err = bf_registry_load_module(reg, opts.module, diag, sizeof diag)) != BF_OK)
        fprintf(stderr, "%s: %s: %s\n", g_prog, opts.module, diag[0] ? diag : bf_err_str(err));
    if (err == BF_OK && opts.list_only) {
        printf("module %s: ", opts.module);
        demo_print_definitions(reg);
        bf_registry_free(reg);
        return 0;
    }

    if (err == BF_OK && (err = demo_open(&e, &opts, reg, "main")) != BF_OK)
        fprintf(stderr, "%s: %s\n", g_prog, e ? bf_engine_diag(e) : bf_err_str(err));
    if (err == BF_OK && (err = bf_migrate(e)) != BF_OK)
        fprintf(stderr, "%s: migrate: %s\n", g_prog, bf_engine_diag(e));
    if (err == BF_OK) {
        int version = 0;
        (void)bf_schema_check(e, &version);
        printf("engine schema buzz_backfill at version %d\n", version);
        demo_print_definitions(reg);
        if ((err = bf_register_all(e)) != BF_OK)
            fprintf(stderr, "%s: register: %s\n", g_prog, bf_engine_diag(e));
    }
    if (err == BF_OK) {
        printf("registered; starting (actor \"demo\"):\n");
        err = demo_start_backfills(e, reg, opts.start);
    }

    if (err == BF_OK) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = demo_on_signal;
        sa.sa_flags = SA_RESETHAND;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        err = demo_run_workers(&opts, reg, e);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
    }

    if (e != NULL) {
        bf_err ferr = demo_final_report(e);
        rc = err != BF_OK || ferr != BF_OK ? 1 : demo_verdict(e, reg);
    } else {
        rc = 1;
    }
    if (atomic_load(&g_stop)) {
        printf("interrupted: claims released; the started backfills stay running and a later "
               "run resumes them from their checkpoints\n");
        rc = 130;
    }
    bf_engine_close(e);
    bf_registry_free(reg);
    return rc;
}
