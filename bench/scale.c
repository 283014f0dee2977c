/*
 * scale.c - speed that holds on large relay-shaped tables (issue 16): the engine against a
 * hand-written PL/pgSQL loop over the same key, in one run, with the table analyzed mid-run.
 *
 * On a private database of the given server, for each key shape, each variant starts from a
 * freshly built table of --rows wide rows (about 400 bytes: a relay's content, tags and
 * signature), autovacuum at the server's defaults (on), VACUUM (ANALYZE) and CHECKPOINT after
 * the load; the table is dropped as soon as its variant is done:
 *
 *   compound  PRIMARY KEY (ts timestamptz, eid bytea): a relay's (created_at, event_id), 25
 *             rows a second, eid a 32-byte sha256 of the row number
 *   uuid      PRIMARY KEY (id uuid), gen_random_uuid()
 *   bytea     PRIMARY KEY (id bytea), a 32-byte sha256 of the row number
 *
 *   engine    register, start, one bf_worker stepping to completion with the production
 *             settings (bf_config defaults: step_ms, step_batches, timeouts; no throttle); only
 *             the batch phase is timed (first step until the step that enters validating)
 *   loop      a PL/pgSQL procedure a DBA would write: keyset batches after a checkpoint kept in
 *             a table (ORDER BY key LIMIT batch), the UPDATE over the batch's key range with a
 *             compound key's leading column bounded too (as the engine does, so that neither
 *             collapses to a sequential scan), the checkpoint row updated and COMMIT each batch
 *
 * The two variants of a shape run back to back, alternating which goes first from shape to
 * shape. While a variant runs, a monitor thread reads its progress once a second on its own
 * connection (the engine's backfill row rows_covered, the loop's checkpoint row) and, when
 * --analyze-at percent of the rows are done, sends an ANALYZE of the table on a third
 * connection. Per variant: rows/s of the batch phase, the rate of every --window seconds, the
 * slowest and the median window and their ratio; per shape the engine/loop ratio. Every run is
 * checked: every row repaired, none twice (the rows changed add up to the table's rows). Output
 * goes to stdout only.
 */
#include <getopt.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"
#include "buzz/engine.h"

#define SCALE_MAX_SAMPLES 100000 /* one a second: 27 hours */
#define SCALE_MAX_WINDOWS 4096

/* ---- key shapes -------------------------------------------------------------------------- */

typedef struct scale_shape {
    const char *name;
    const char *key_sql;  /* the key columns of CREATE TABLE */
    const char *pk;       /* PRIMARY KEY (...) */
    const char *key_gen;  /* SELECT-list expressions of the key from the row number g */
    const char *key_cols; /* for INSERT */
    bf_key_column key[2];
    int nkey;
    const char *checkpoint_sql; /* CREATE TABLE bench_checkpoint and its first row */
    const char *procedure_sql;
} scale_shape;

/* The wide columns every shape shares: kind (the source), kind_norm (the column to fill), and
 * about 400 bytes of content. */
#define SCALE_COLS " kind integer NOT NULL, kind_norm integer, content text NOT NULL"

/*
 * The hand-written loops. The bound (the largest key) is captured once; the checkpoint starts
 * below every key (-infinity, the empty bytea, the nil uuid), so every batch runs the same two
 * statements. A batch's last key is the top of its keyset (ORDER BY key LIMIT batch); the
 * UPDATE covers the range after the checkpoint up to it. PostgreSQL 15 has no max() for uuid
 * or bytea, hence ORDER BY ... DESC LIMIT 1 over the keyset.
 */
static const char compound_procedure[] =
    "CREATE OR REPLACE PROCEDURE bench_fill(batch integer) LANGUAGE plpgsql AS $$\n"
    "DECLARE\n"
    "  b_ts timestamptz; b_eid bytea;\n"
    "  c_ts timestamptz; c_eid bytea;\n"
    "  l_ts timestamptz; l_eid bytea;\n"
    "  n bigint;\n"
    "BEGIN\n"
    "  SELECT ts, eid INTO b_ts, b_eid FROM bench_events ORDER BY ts DESC, eid DESC LIMIT 1;\n"
    "  LOOP\n"
    "    SELECT last_ts, last_eid INTO c_ts, c_eid FROM bench_checkpoint\n"
    "      WHERE name = 'fill' FOR UPDATE;\n"
    "    l_ts := NULL;\n"
    "    SELECT s.ts, s.eid INTO l_ts, l_eid FROM (SELECT ts, eid FROM bench_events\n"
    "      WHERE (ts, eid) > (c_ts, c_eid) AND (ts, eid) <= (b_ts, b_eid)\n"
    "        AND ts >= c_ts AND ts <= b_ts\n"
    "      ORDER BY ts, eid LIMIT batch) s ORDER BY s.ts DESC, s.eid DESC LIMIT 1;\n"
    "    EXIT WHEN l_ts IS NULL;\n"
    "    UPDATE bench_events SET kind_norm = kind\n"
    "      WHERE (ts, eid) > (c_ts, c_eid) AND (ts, eid) <= (l_ts, l_eid)\n"
    "        AND ts >= c_ts AND ts <= l_ts AND kind_norm IS NULL;\n"
    "    GET DIAGNOSTICS n = ROW_COUNT;\n"
    "    UPDATE bench_checkpoint SET last_ts = l_ts, last_eid = l_eid,\n"
    "      rows_done = rows_done + n, batches = batches + 1 WHERE name = 'fill';\n"
    "    COMMIT;\n"
    "  END LOOP;\n"
    "  COMMIT;\n"
    "END $$";

/* uuid and bytea: one column of the given type */
#define SINGLE_PROCEDURE(type)                                                                     \
    "CREATE OR REPLACE PROCEDURE bench_fill(batch integer) LANGUAGE plpgsql AS $$\n"               \
    "DECLARE\n"                                                                                    \
    "  bound " type "; cp " type "; last " type ";\n"                                              \
    "  n bigint;\n"                                                                                \
    "BEGIN\n"                                                                                      \
    "  SELECT id INTO bound FROM bench_events ORDER BY id DESC LIMIT 1;\n"                         \
    "  LOOP\n"                                                                                     \
    "    SELECT last_id INTO cp FROM bench_checkpoint WHERE name = 'fill' FOR UPDATE;\n"           \
    "    last := NULL;\n"                                                                          \
    "    SELECT s.id INTO last FROM (SELECT id FROM bench_events\n"                                \
    "      WHERE id > cp AND id <= bound ORDER BY id LIMIT batch) s\n"                             \
    "      ORDER BY s.id DESC LIMIT 1;\n"                                                          \
    "    EXIT WHEN last IS NULL;\n"                                                                \
    "    UPDATE bench_events SET kind_norm = kind\n"                                               \
    "      WHERE id > cp AND id <= last AND kind_norm IS NULL;\n"                                  \
    "    GET DIAGNOSTICS n = ROW_COUNT;\n"                                                         \
    "    UPDATE bench_checkpoint SET last_id = last, rows_done = rows_done + n,\n"                 \
    "      batches = batches + 1 WHERE name = 'fill';\n"                                           \
    "    COMMIT;\n"                                                                                \
    "  END LOOP;\n"                                                                                \
    "  COMMIT;\n"                                                                                  \
    "END $$"

static const scale_shape shapes[] = {
    {
        .name = "compound",
        .key_sql = "ts timestamptz NOT NULL, eid bytea NOT NULL,",
        .pk = "PRIMARY KEY (ts, eid)",
        .key_gen = "timestamptz '2024-01-01 00:00:00+00' + ((g / 25) * interval '1 second'),"
                   " sha256(g::text::bytea)",
        .key_cols = "ts, eid",
        .key = {{"ts", BF_KEY_TIMESTAMPTZ}, {"eid", BF_KEY_BYTEA}},
        .nkey = 2,
        .checkpoint_sql =
            "CREATE TABLE bench_checkpoint (name text PRIMARY KEY, last_ts timestamptz NOT NULL,"
            " last_eid bytea NOT NULL, rows_done bigint NOT NULL, batches bigint NOT NULL);"
            "INSERT INTO bench_checkpoint VALUES ('fill', '-infinity', '\\x', 0, 0)",
        .procedure_sql = compound_procedure,
    },
    {
        .name = "uuid",
        .key_sql = "id uuid NOT NULL,",
        .pk = "PRIMARY KEY (id)",
        .key_gen = "gen_random_uuid()",
        .key_cols = "id",
        .key = {{"id", BF_KEY_UUID}},
        .nkey = 1,
        .checkpoint_sql =
            "CREATE TABLE bench_checkpoint (name text PRIMARY KEY, last_id uuid NOT NULL,"
            " rows_done bigint NOT NULL, batches bigint NOT NULL);"
            "INSERT INTO bench_checkpoint VALUES ('fill',"
            " '00000000-0000-0000-0000-000000000000', 0, 0)",
        .procedure_sql = SINGLE_PROCEDURE("uuid"),
    },
    {
        .name = "bytea",
        .key_sql = "id bytea NOT NULL,",
        .pk = "PRIMARY KEY (id)",
        .key_gen = "sha256(g::text::bytea)",
        .key_cols = "id",
        .key = {{"id", BF_KEY_BYTEA}},
        .nkey = 1,
        .checkpoint_sql = "CREATE TABLE bench_checkpoint (name text PRIMARY KEY, last_id bytea"
                          " NOT NULL, rows_done bigint NOT NULL, batches bigint NOT NULL);"
                          "INSERT INTO bench_checkpoint VALUES ('fill', '\\x', 0, 0)",
        .procedure_sql = SINGLE_PROCEDURE("bytea"),
    },
};
#define SCALE_NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

typedef struct scale_opts {
    const char *url;
    long rows;
    int batch;
    bool shape_on[SCALE_NSHAPES];
    int window;
    double analyze_at; /* fraction of the rows */
    bool loop_first;   /* the loop goes first for the first shape (then they alternate) */
    bool verbose;
} scale_opts;

typedef struct scale_ctx {
    scale_opts opts;
    bench_db pg; /* the private database */
    int run_seq;
} scale_ctx;

/* ---- helpers ----------------------------------------------------------------------------- */

/* ---- the private database and the table ---------------------------------------------------- */

/* A freshly built table: loaded, primary key built, vacuumed and analyzed, flushed by a
 * checkpoint so that the run does not pay for the load. Autovacuum stays at the server's
 * defaults. Returns the seconds the build took. */
static double scale_table_build(scale_ctx *b, const scale_shape *s)
{
    double t0 = bench_now();
    bench_exec(b->pg.db, "DROP TABLE IF EXISTS bench_events");
    bench_execf(b->pg.db, "CREATE TABLE bench_events (%s" SCALE_COLS ")", s->key_sql);
    /* content: 384 bytes that do not compress much (TOAST compresses from about 2 kB) */
    bench_execf(b->pg.db,
                "INSERT INTO bench_events (%s, kind, content)"
                " SELECT %s, (g %% 7)::integer, repeat(md5(g::text), 12)"
                " FROM generate_series(1, %ld) g",
                s->key_cols, s->key_gen, b->opts.rows);
    bench_execf(b->pg.db, "ALTER TABLE bench_events ADD %s", s->pk);
    bench_exec(b->pg.db, "VACUUM (ANALYZE) bench_events");
    bench_exec(b->pg.db, "CHECKPOINT");
    return bench_now() - t0;
}

/* Every row repaired, none left; the table dropped. */
static void scale_table_check_drop(scale_ctx *b, const char *variant)
{
    long long bad = bench_int(b->pg.db, "SELECT count(*) FROM bench_events"
                                        " WHERE kind_norm IS DISTINCT FROM kind");
    if (bad != 0)
        bench_die("%s left %lld rows unrepaired", variant, bad);
    bench_exec(b->pg.db, "DROP TABLE bench_events");
    bench_exec(b->pg.db, "DROP TABLE IF EXISTS bench_checkpoint");
}

/* ---- the monitor: progress once a second, the ANALYZE -------------------------------------- */

typedef struct scale_sample {
    double t;  /* seconds since the batch phase began */
    long rows; /* rows done by then */
} scale_sample;

typedef struct scale_monitor {
    const char *conninfo;
    char query[256]; /* one bigint: the rows done */
    long analyze_rows;
    double t0;
    atomic_bool stop;
    pthread_t thread;
    scale_sample *samples;
    int nsamples;
    /* the ANALYZE: when it was sent (rows done then) and when it ended; < 0 when not sent */
    double analyze_sent, analyze_done;
    long analyze_at_rows;
    char error[256];
} scale_monitor;

static long scale_monitor_rows(PGconn *c, const char *query)
{
    PGresult *r = PQexec(c, query);
    long v = -1;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && !PQgetisnull(r, 0, 0))
        v = strtol(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

/* The result of the ANALYZE sent on a, if it has arrived (block: wait for it). */
static bool scale_analyze_poll(scale_monitor *m, PGconn *a, bool block)
{
    if (!block) {
        if (!PQconsumeInput(a))
            return true;
        if (PQisBusy(a))
            return false;
    }
    PGresult *r;
    while ((r = PQgetResult(a)) != NULL) {
        if (PQresultStatus(r) != PGRES_COMMAND_OK)
            snprintf(m->error, sizeof m->error, "ANALYZE failed: %s", PQerrorMessage(a));
        PQclear(r);
    }
    m->analyze_done = bench_now() - m->t0;
    return true;
}

static void *scale_monitor_main(void *arg)
{
    scale_monitor *m = arg;
    PGconn *c = bench_connect(m->conninfo), *a = bench_connect(m->conninfo);
    bool analyze_pending = false;
    for (int tick = 1; !atomic_load(&m->stop); tick++) {
        /* wake at whole seconds of the batch phase */
        double wait = m->t0 + tick - bench_now();
        if (wait > 0) {
            struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
            nanosleep(&ts, NULL);
        }
        if (atomic_load(&m->stop))
            break;
        long rows = scale_monitor_rows(c, m->query);
        double t = bench_now() - m->t0;
        if (rows >= 0 && m->nsamples < SCALE_MAX_SAMPLES)
            m->samples[m->nsamples++] = (scale_sample){t, rows};
        if (m->analyze_sent < 0 && rows >= m->analyze_rows) {
            if (!PQsendQuery(a, "ANALYZE bench_events"))
                bench_die("cannot send the ANALYZE: %s", PQerrorMessage(a));
            m->analyze_sent = bench_now() - m->t0;
            m->analyze_at_rows = rows;
            analyze_pending = true;
        }
        if (analyze_pending && scale_analyze_poll(m, a, false))
            analyze_pending = false;
    }
    if (analyze_pending)
        scale_analyze_poll(m, a, true);
    PQfinish(a);
    PQfinish(c);
    return NULL;
}

static void scale_monitor_start(scale_monitor *m, const scale_ctx *b, const char *query, double t0)
{
    *m = (scale_monitor){.conninfo = b->pg.conninfo,
                         .analyze_rows = (long)((double)b->opts.rows * b->opts.analyze_at),
                         .t0 = t0,
                         .analyze_sent = -1,
                         .analyze_done = -1};
    snprintf(m->query, sizeof m->query, "%s", query);
    m->samples = calloc(SCALE_MAX_SAMPLES + 2, sizeof m->samples[0]);
    if (m->samples == NULL)
        bench_die("out of memory");
    m->samples[m->nsamples++] = (scale_sample){0, 0};
    atomic_init(&m->stop, false);
    if (pthread_create(&m->thread, NULL, scale_monitor_main, m) != 0)
        bench_die("cannot start the monitor thread");
}

/* Stop the monitor at the end of the batch phase (t1, all rows done). */
static void scale_monitor_stop(scale_monitor *m, double t1, long rows)
{
    atomic_store(&m->stop, true);
    pthread_join(m->thread, NULL);
    m->samples[m->nsamples++] = (scale_sample){t1 - m->t0, rows};
    if (m->error[0] != '\0')
        bench_die("%s", m->error);
}

/* ---- one variant's result -------------------------------------------------------------------- */

typedef struct scale_result {
    double seconds; /* the batch phase */
    double rate;    /* rows/s */
    double windows[SCALE_MAX_WINDOWS];
    int nwindows;
    double slowest, median; /* of the windows; 0 when fewer than 2 */
    double analyze_sent, analyze_done;
    long analyze_at_rows;
    long long autovacuums, autoanalyzes; /* on the table during the run */
    char load_before[32], load_after[32];
    double build_seconds;
} scale_result;

/* rows done at time t, interpolated between the samples */
static double scale_rows_at(const scale_monitor *m, double t)
{
    const scale_sample *s = m->samples;
    if (t <= s[0].t)
        return (double)s[0].rows;
    for (int i = 1; i < m->nsamples; i++)
        if (t <= s[i].t) {
            double span = s[i].t - s[i - 1].t;
            double f = span > 0 ? (t - s[i - 1].t) / span : 1;
            return (double)s[i - 1].rows + f * (double)(s[i].rows - s[i - 1].rows);
        }
    return (double)s[m->nsamples - 1].rows;
}

/* The rate of every full window, and of the last partial one when it is at least half a
 * window long. */
static void scale_windows(scale_result *r, const scale_monitor *m, int window)
{
    double end = m->samples[m->nsamples - 1].t;
    r->nwindows = 0;
    for (double from = 0; from < end && r->nwindows < SCALE_MAX_WINDOWS; from += window) {
        double to = from + window < end ? from + window : end;
        if (to - from < window / 2.0)
            break;
        r->windows[r->nwindows++] = (scale_rows_at(m, to) - scale_rows_at(m, from)) / (to - from);
    }
    r->slowest = r->median = 0;
    if (r->nwindows < 2)
        return;
    double sorted[SCALE_MAX_WINDOWS];
    memcpy(sorted, r->windows, (size_t)r->nwindows * sizeof sorted[0]);
    qsort(sorted, (size_t)r->nwindows, sizeof sorted[0], bench_cmp_double);
    int n = r->nwindows;
    r->slowest = sorted[0];
    r->median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

static void scale_finish(scale_result *r, scale_monitor *m, const scale_ctx *b, double seconds,
                         long long av0, long long aa0)
{
    r->seconds = seconds;
    r->rate = (double)b->opts.rows / seconds;
    scale_windows(r, m, b->opts.window);
    r->analyze_sent = m->analyze_sent;
    r->analyze_done = m->analyze_done;
    r->analyze_at_rows = m->analyze_at_rows;
    r->autovacuums = bench_int(b->pg.db, "SELECT autovacuum_count FROM pg_stat_user_tables"
                                         " WHERE relname = 'bench_events'") -
                     av0;
    r->autoanalyzes = bench_int(b->pg.db, "SELECT autoanalyze_count FROM pg_stat_user_tables"
                                          " WHERE relname = 'bench_events'") -
                      aa0;
    bench_loadavg(r->load_after, sizeof r->load_after);
    free(m->samples);
}

/* ---- variant: the engine ------------------------------------------------------------------- */

static void scale_log(void *arg, const bf_log_record *rec)
{
    const scale_ctx *b = arg;
    if (rec->level >= BF_LOG_WARN || b->opts.verbose)
        fprintf(stderr, "[engine] %s\n", rec->msg);
}

static void scale_engine(scale_ctx *b, const scale_shape *s, scale_result *r)
{
    char id[BF_ID_MAX + 1];
    snprintf(id, sizeof id, "bench.scale_%s_r%d", s->name, ++b->run_seq);
    bf_definition def = {
        .id = id,
        .description = "benchmark: kind_norm = kind",
        .table = "public.bench_events",
        .nkey = s->nkey,
        .batch_size = b->opts.batch,
        .needs_repair = "t.kind_norm IS NULL",
        .update_set = "kind_norm = t.kind",
    };
    memcpy(def.key, s->key, sizeof s->key);
    bf_registry *reg = NULL;
    char diag[BF_DIAG_MAX] = "";
    if (bf_registry_new(&reg) != BF_OK || bf_registry_add(reg, &def, diag, sizeof diag) != BF_OK)
        bench_die("registry: %s", diag);
    /* the production settings: every timeout, step_ms and step_batches at their defaults */
    bf_config cfg = {
        .conninfo = b->pg.conninfo, .owner = "bench-worker", .log = scale_log, .log_arg = b};
    bf_engine *e = NULL;
    bf_err err = bf_engine_open(&e, &cfg, reg);
    if (err == BF_OK)
        err = bf_migrate(e);
    if (err == BF_OK)
        err = bf_register(e, &def);
    bf_actor who = {.actor = "bench", .authority = "bench", .request_id = NULL};
    bf_action_result res;
    if (err == BF_OK)
        err = bf_action_apply(e, BF_ACTION_START, id, &who, &res);
    bf_worker *w = NULL;
    if (err == BF_OK)
        err = bf_worker_new(&w, e, NULL);
    if (err == BF_OK)
        err = bf_worker_claim(w, id, NULL);
    if (err != BF_OK)
        bench_die("engine setup: %s: %s", bf_err_str(err), e ? bf_engine_diag(e) : "");

    long long av0 = bench_int(b->pg.db, "SELECT autovacuum_count FROM pg_stat_user_tables"
                                        " WHERE relname = 'bench_events'");
    long long aa0 = bench_int(b->pg.db, "SELECT autoanalyze_count FROM pg_stat_user_tables"
                                        " WHERE relname = 'bench_events'");
    char query[256];
    snprintf(query, sizeof query, "SELECT rows_covered FROM buzz_backfill.backfill WHERE id = '%s'",
             id);
    scale_monitor m;
    double t0 = bench_now(), t1 = 0;
    scale_monitor_start(&m, b, query, t0);
    bf_step_info info;
    for (;;) {
        err = bf_worker_step(w, &info);
        if (err != BF_OK)
            bench_die("engine step: %s: %s", bf_err_str(err), bf_engine_diag(e));
        if (info.step == BF_STEP_BATCH)
            continue;
        if (info.step == BF_STEP_VALIDATING && t1 == 0) {
            t1 = bench_now();
            scale_monitor_stop(&m, t1, b->opts.rows);
            continue; /* validation is not part of the batch phase */
        }
        if (info.step == BF_STEP_COMPLETED)
            break;
        bench_die("engine: unexpected step %s: %s", bf_step_name(info.step), info.detail);
    }
    scale_finish(r, &m, b, t1 - t0, av0, aa0);
    bf_backfill row;
    err = bf_get(e, id, &row);
    if (err != BF_OK || row.state != BF_STATE_COMPLETED || row.rows_committed != b->opts.rows ||
        row.rows_covered != b->opts.rows)
        bench_die("engine run: %lld rows changed, %lld covered, expected %ld each",
                  (long long)row.rows_committed, (long long)row.rows_covered, b->opts.rows);
    bf_worker_free(w);
    bf_engine_close(e);
    bf_registry_free(reg);
}

/* ---- variant: the hand-written loop -------------------------------------------------------- */

static void scale_loop(scale_ctx *b, const scale_shape *s, scale_result *r)
{
    bench_exec(b->pg.db, "DROP TABLE IF EXISTS bench_checkpoint");
    bench_exec(b->pg.db, s->checkpoint_sql);
    bench_exec(b->pg.db, s->procedure_sql);
    long long av0 = bench_int(b->pg.db, "SELECT autovacuum_count FROM pg_stat_user_tables"
                                        " WHERE relname = 'bench_events'");
    long long aa0 = bench_int(b->pg.db, "SELECT autoanalyze_count FROM pg_stat_user_tables"
                                        " WHERE relname = 'bench_events'");
    /* a fresh session, as the engine's worker gets one */
    PGconn *c = bench_connect(b->pg.conninfo);
    char call[64];
    snprintf(call, sizeof call, "CALL bench_fill(%d)", b->opts.batch);
    scale_monitor m;
    double t0 = bench_now();
    scale_monitor_start(&m, b, "SELECT rows_done FROM bench_checkpoint WHERE name = 'fill'", t0);
    bench_exec(c, call);
    double t1 = bench_now();
    scale_monitor_stop(&m, t1, b->opts.rows);
    PQfinish(c);
    scale_finish(r, &m, b, t1 - t0, av0, aa0);
    long long done = bench_int(b->pg.db, "SELECT rows_done FROM bench_checkpoint");
    if (done != b->opts.rows)
        bench_die("loop changed %lld rows, expected %ld", done, b->opts.rows);
}

/* ---- driver ---------------------------------------------------------------------------------- */

static const char *scale_verdict(bool ok)
{
    return ok ? "PASS" : "FAIL";
}

/* Returns whether the window goal holds (true when it cannot be judged). */
static bool scale_print_result(const scale_ctx *b, const char *shape, const char *variant,
                               const scale_result *r)
{
    printf("%-8s %-6s %10.0f rows/s  [%7.1f s; table built in %.0f s; load %s -> %s]\n", shape,
           variant, r->rate, r->seconds, r->build_seconds, r->load_before, r->load_after);
    if (r->analyze_sent >= 0)
        printf("  ANALYZE sent at %.1f s (%ld rows, %.0f %%), done at %.1f s\n", r->analyze_sent,
               r->analyze_at_rows, 100.0 * (double)r->analyze_at_rows / (double)b->opts.rows,
               r->analyze_done);
    else
        printf("  ANALYZE not sent (the run ended before the monitor saw %.0f %% done)\n",
               100.0 * b->opts.analyze_at);
    printf("  autovacuum on the table during the run: %lld vacuum(s), %lld analyze(s)\n",
           r->autovacuums, r->autoanalyzes);
    printf("  %d-s windows (rows/s):", b->opts.window);
    for (int i = 0; i < r->nwindows; i++)
        printf(" %.0f", r->windows[i]);
    printf("\n");
    if (r->nwindows < 2) {
        printf("  windows: fewer than 2, not judged\n");
        return true;
    }
    bool ok = r->slowest >= 0.5 * r->median;
    printf("  slowest window %.0f, median %.0f: %.2fx  [goal >= 0.5x: %s]\n", r->slowest, r->median,
           r->slowest / r->median, scale_verdict(ok));
    return ok;
}

static void scale_print_machine(scale_ctx *b)
{
    char model[256] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f != NULL) {
        char line[512];
        while (fgets(line, sizeof line, f) != NULL) {
            if (strncmp(line, "model name", 10) == 0) {
                char *colon = strchr(line, ':');
                if (colon != NULL) {
                    colon += 1 + (colon[1] == ' ');
                    colon[strcspn(colon, "\n")] = '\0';
                    snprintf(model, sizeof model, "%s", colon);
                }
                break;
            }
        }
        fclose(f);
    }
    char version[256], settings[512], load[32], date[64];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %Z", localtime(&now));
    bench_text(b->pg.db, "SELECT version()", version, sizeof version);
    bench_text(b->pg.db,
               "SELECT string_agg(name || '=' || setting || coalesce(unit, ''), ', '"
               " ORDER BY name) FROM pg_settings WHERE name IN ('shared_buffers', 'fsync',"
               " 'synchronous_commit', 'full_page_writes', 'max_wal_size', 'autovacuum')",
               settings, sizeof settings);
    bench_loadavg(load, sizeof load);
    printf("date: %s, load average %s\n", date, load);
    printf("machine: nproc=%ld, cpu=%s\n", sysconf(_SC_NPROCESSORS_ONLN), model);
    printf("postgres: %s\n", version);
    printf("settings: %s\n", settings);
    printf("scenario: %ld rows of ~400 bytes, batch %d, ANALYZE at %.0f %%, %d-s windows,"
           " shapes",
           b->opts.rows, b->opts.batch, 100.0 * b->opts.analyze_at, b->opts.window);
    for (int i = 0; i < SCALE_NSHAPES; i++)
        if (b->opts.shape_on[i])
            printf(" %s", shapes[i].name);
    printf("\n\n");
}

static void scale_usage(FILE *to)
{
    fprintf(to, "Usage: scale [--url URL] [--rows N] [--batch N] [--shapes LIST] [--window S]\n"
                "             [--analyze-at PCT] [--loop-first] [-v]\n"
                "  --url         libpq URL of the server (default $BUZZ_BENCH_PG_URL, then\n"
                "                $BUZZ_TEST_PG_URL); a private database is created and dropped\n"
                "  --rows        rows in each table (default 10000000)\n"
                "  --batch       batch size of both variants (default 1000)\n"
                "  --shapes      comma-separated: compound,uuid,bytea (default all)\n"
                "  --window      seconds of a rate window (default 30)\n"
                "  --analyze-at  percent of the rows done when the table is analyzed (default 40)\n"
                "  --loop-first  the loop runs first for the first shape (default: the engine);\n"
                "                the order alternates from shape to shape\n");
}

static void scale_parse(scale_opts *o, int argc, char **argv)
{
    *o = (scale_opts){.rows = 10000000, .batch = 1000, .window = 30, .analyze_at = 0.4};
    o->url = getenv("BUZZ_BENCH_PG_URL");
    if (o->url == NULL || o->url[0] == '\0')
        o->url = getenv("BUZZ_TEST_PG_URL");
    static const struct option longopts[] = {
        {"url", required_argument, NULL, 'u'},    {"rows", required_argument, NULL, 'n'},
        {"batch", required_argument, NULL, 'b'},  {"shapes", required_argument, NULL, 's'},
        {"window", required_argument, NULL, 'w'}, {"analyze-at", required_argument, NULL, 'a'},
        {"loop-first", no_argument, NULL, 'l'},   {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    bool any_shape = false;
    int ch;
    while ((ch = getopt_long(argc, argv, "u:n:b:s:w:a:lvh", longopts, NULL)) != -1) {
        switch (ch) {
        case 'u':
            o->url = optarg;
            break;
        case 'n':
            o->rows = strtol(optarg, NULL, 10);
            break;
        case 'b':
            o->batch = (int)strtol(optarg, NULL, 10);
            break;
        case 's': {
            char *list = strdup(optarg), *save = NULL;
            if (list == NULL)
                bench_die("out of memory");
            for (char *t = strtok_r(list, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
                int i = 0;
                while (i < SCALE_NSHAPES && strcmp(shapes[i].name, t) != 0)
                    i++;
                if (i == SCALE_NSHAPES)
                    bench_die("unknown shape %s (compound, uuid, bytea)", t);
                o->shape_on[i] = true;
                any_shape = true;
            }
            free(list);
            break;
        }
        case 'w':
            o->window = (int)strtol(optarg, NULL, 10);
            break;
        case 'a':
            o->analyze_at = strtod(optarg, NULL) / 100.0;
            break;
        case 'l':
            o->loop_first = true;
            break;
        case 'v':
            o->verbose = true;
            break;
        case 'h':
            scale_usage(stdout);
            exit(0);
        default:
            scale_usage(stderr);
            exit(2);
        }
    }
    if (!any_shape)
        for (int i = 0; i < SCALE_NSHAPES; i++)
            o->shape_on[i] = true;
    if (o->url == NULL || o->url[0] == '\0')
        bench_die("no server: pass --url or set BUZZ_BENCH_PG_URL");
    if (o->rows < 1 || o->batch < 1 || o->batch > BF_BATCH_MAX || o->window < 1 ||
        o->analyze_at < 0 || o->analyze_at > 1)
        bench_die("bad --rows, --batch (1..%d), --window or --analyze-at (0..100)", BF_BATCH_MAX);
}

int main(int argc, char **argv)
{
    bench_set_name("scale");
    scale_ctx b = {0};
    scale_parse(&b.opts, argc, argv);
    bench_db_create(&b.pg, b.opts.url, "buzz_scale");
    scale_print_machine(&b);
    fflush(stdout);

    static scale_result res[SCALE_NSHAPES][2]; /* [shape][0 engine, 1 loop] */
    bool ratio_ok = true, window_ok = true;
    int n = 0;
    for (int i = 0; i < SCALE_NSHAPES; i++) {
        if (!b.opts.shape_on[i])
            continue;
        const scale_shape *s = &shapes[i];
        for (int k = 0; k < 2; k++) {
            /* alternate which variant goes first from shape to shape */
            int v = (k + n + b.opts.loop_first) % 2;
            scale_result *r = &res[i][v];
            r->build_seconds = scale_table_build(&b, s);
            bench_loadavg(r->load_before, sizeof r->load_before);
            if (v == 0)
                scale_engine(&b, s, r);
            else
                scale_loop(&b, s, r);
            scale_table_check_drop(&b, v == 0 ? "engine" : "loop");
            window_ok &= scale_print_result(&b, s->name, v == 0 ? "engine" : "loop", r);
            fflush(stdout);
        }
        n++;
        double ratio = res[i][0].rate / res[i][1].rate;
        ratio_ok &= ratio >= 0.9;
        printf("%-8s engine/loop %.3f  [goal >= 0.9x: %s]  (%s ran first)\n\n", s->name, ratio,
               scale_verdict(ratio >= 0.9),
               (n - 1 + b.opts.loop_first) % 2 == 0 ? "engine" : "loop");
        fflush(stdout);
    }
    printf("summary: engine >= 0.9x the loop for every shape: %s; slowest window >= 0.5x the"
           " median for every variant: %s\n",
           scale_verdict(ratio_ok), scale_verdict(window_ok));
    bench_db_drop(&b.pg);
    return 0;
}
