/*
 * throughput.c - batch throughput of the engine against a hand-written baseline, in one run.
 *
 * On a private database of the given server, for each batch size, each variant starts from an
 * identical freshly built table (bigint id PK, val, target NULL; VACUUM ANALYZE; CHECKPOINT):
 *
 *   engine     register, start, one bf_worker stepping to completion; only the batch phase is
 *              timed (first batch until the step that enters validating)
 *   procedure  a PL/pgSQL procedure doing keyset batches after a checkpoint kept in a table,
 *              updating the rows and the checkpoint row in one transaction and COMMITting each
 *              batch; CALLed once
 *   ceiling    one UPDATE of every row (no batches, no checkpoint)
 *
 * Each variant runs --reps times (interleaved, to spread drift over all of them; engine and
 * procedure back to back in alternating order); the median is reported, and for the
 * engine/procedure ratio also the median of the per-run ratios. Every run is checked: all rows
 * repaired, none twice. Output goes to stdout only.
 */
#include <getopt.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"
#include "buzz/engine.h"

#define BENCH_MAX_REPS    15
#define BENCH_MAX_BATCHES 4

typedef struct bench_opts {
    const char *url;
    long rows;
    int reps;
    int batches[BENCH_MAX_BATCHES];
    int nbatches;
    bool verbose;
} bench_opts;

typedef struct bench_ctx {
    bench_opts opts;
    bench_db pg; /* the private database */
    int run_seq;
} bench_ctx;

/* One timed run: wall seconds, and CPU seconds of the PostgreSQL backend that did the work
 * (from /proc when the server runs on this host; negative when unknown). */
typedef struct bench_sample {
    double wall;
    double cpu;
} bench_sample;

static double bench_backend_cpu(long pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may contain spaces */
    unsigned long long utime = 0, stime = 0;
    if (p == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2)
        return -1;
    return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

/* ---- the private database and the table -------------------------------------------------- */

/* Every variant starts from this state: freshly loaded, vacuumed (visibility map and hint bits
 * set), analyzed, and flushed by a checkpoint so the run does not pay for the load. */
static void bench_table_reset(bench_ctx *b)
{
    bench_exec(b->pg.db, "DROP TABLE IF EXISTS bench_items");
    /* no autovacuum: a vacuum of the half-updated table started by the launcher in the middle
     * of one variant's run (and not another's) took a CPU from it on this 2-vCPU machine and
     * moved single runs by up to 30 %; every variant starts from the vacuumed table instead */
    bench_exec(b->pg.db, "CREATE TABLE bench_items (id bigint PRIMARY KEY, val integer NOT NULL,"
                         " target integer) WITH (autovacuum_enabled = false)");
    bench_execf(b->pg.db,
                "INSERT INTO bench_items (id, val) SELECT g, (g %% 1000)::integer"
                " FROM generate_series(1, %ld) g",
                b->opts.rows);
    bench_exec(b->pg.db, "VACUUM (ANALYZE) bench_items");
    bench_exec(b->pg.db, "CHECKPOINT");
}

/* Every row repaired exactly as asked, none left. */
static void bench_table_check(bench_ctx *b, const char *variant)
{
    long long bad = bench_int(b->pg.db, "SELECT count(*) FROM bench_items"
                                        " WHERE target IS DISTINCT FROM val * 2");
    if (bad != 0)
        bench_die("%s left %lld rows unrepaired", variant, bad);
}

/* ---- variant: the engine --------------------------------------------------------------------- */

static void bench_log(void *arg, const bf_log_record *rec)
{
    bf_log_level level = rec->level;
    const char *msg = rec->msg;
    const bench_ctx *b = arg;
    if (level >= BF_LOG_WARN || b->opts.verbose)
        fprintf(stderr, "[engine] %s\n", msg);
}

static bench_sample bench_engine(bench_ctx *b, int batch)
{
    char id[BF_ID_MAX + 1];
    snprintf(id, sizeof id, "bench.fill_b%d_r%d", batch, ++b->run_seq);
    bf_definition def = {
        .id = id,
        .description = "benchmark: target = val * 2",
        .table = "public.bench_items",
        .key = {{"id", BF_KEY_BIGINT}},
        .nkey = 1,
        .batch_size = batch,
        .needs_repair = "t.target IS NULL",
        .update_set = "target = t.val * 2",
    };
    bf_registry *reg = NULL;
    char diag[BF_DIAG_MAX] = "";
    if (bf_registry_new(&reg) != BF_OK || bf_registry_add(reg, &def, diag, sizeof diag) != BF_OK)
        bench_die("registry: %s", diag);
    bf_config cfg = {.conninfo = b->pg.conninfo,
                     .owner = "bench-worker",
                     .statement_timeout_ms = 60000,
                     .log = bench_log,
                     .log_arg = b};
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

    /* the engine's backend: the only buzz-backfill session on the bench database */
    long pid =
        (long)bench_int(b->pg.db, "SELECT pid FROM pg_stat_activity WHERE datname ="
                                  " current_database() AND application_name LIKE 'buzz-backfill%'");
    if (b->opts.verbose)
        fprintf(stderr, "[engine] backend pid %ld\n", pid);
    bf_step_info info;
    long batches = 0;
    double c0 = bench_backend_cpu(pid), c1 = -1;
    double t0 = bench_now(), t1 = 0;
    for (;;) {
        err = bf_worker_step(w, &info);
        if (err != BF_OK)
            bench_die("engine step: %s: %s", bf_err_str(err), bf_engine_diag(e));
        if (info.step == BF_STEP_BATCH) {
            batches += info.batches;
            continue;
        }
        if (info.step == BF_STEP_VALIDATING && t1 == 0) {
            t1 = bench_now();
            c1 = bench_backend_cpu(pid);
            if (b->opts.verbose) /* CLOCK_MONOTONIC, e.g. for perf record -k monotonic */
                fprintf(stderr, "[engine] batch phase %.6f..%.6f (%ld batches)\n", t0, t1, batches);
            continue; /* validation is not timed: it is not part of the batch phase */
        }
        if (info.step == BF_STEP_COMPLETED)
            break;
        bench_die("engine: unexpected step %s: %s", bf_step_name(info.step), info.detail);
    }
    bf_backfill row;
    err = bf_get(e, id, &row);
    if (err != BF_OK || row.state != BF_STATE_COMPLETED || row.rows_committed != b->opts.rows)
        bench_die("engine run did not complete every row");
    bf_worker_free(w);
    bf_engine_close(e);
    bf_registry_free(reg);
    return (bench_sample){.wall = t1 - t0, .cpu = c0 < 0 || c1 < 0 ? -1 : c1 - c0};
}

/* ---- variant: the hand-written procedure --------------------------------------------------- */

/*
 * What an engineer would write by hand: keyset batches after a checkpoint row, the rows and the
 * checkpoint updated in one transaction, COMMIT after each batch. The bound is captured once.
 */
static const char procedure_sql[] =
    "CREATE OR REPLACE PROCEDURE bench_fill(batch integer) LANGUAGE plpgsql AS $$\n"
    "DECLARE\n"
    "  bound bigint;\n"
    "  cp bigint;\n"
    "  last bigint;\n"
    "  n bigint;\n"
    "BEGIN\n"
    "  SELECT max(id) INTO bound FROM bench_items;\n"
    "  LOOP\n"
    "    SELECT last_id INTO cp FROM bench_checkpoint WHERE name = 'fill' FOR UPDATE;\n"
    "    SELECT max(s.id) INTO last FROM (SELECT id FROM bench_items\n"
    "      WHERE id > cp AND id <= bound ORDER BY id LIMIT batch) s;\n"
    "    EXIT WHEN last IS NULL;\n"
    "    UPDATE bench_items SET target = val * 2\n"
    "      WHERE id > cp AND id <= last AND target IS NULL;\n"
    "    GET DIAGNOSTICS n = ROW_COUNT;\n"
    "    UPDATE bench_checkpoint SET last_id = last, rows_done = rows_done + n,\n"
    "      batches = batches + 1 WHERE name = 'fill';\n"
    "    COMMIT;\n"
    "  END LOOP;\n"
    "  COMMIT;\n"
    "END $$";

/* Run sql on a fresh session, as the engine's worker gets one: every variant pays the same
 * connection setup and first touch of shared memory, outside the timed part. */
static bench_sample bench_timed_session(bench_ctx *b, const char *label, const char *sql)
{
    PGconn *c = bench_connect(b->pg.conninfo);
    long pid = PQbackendPID(c);
    if (b->opts.verbose)
        fprintf(stderr, "[%s] backend pid %ld\n", label, pid);
    double c0 = bench_backend_cpu(pid), t0 = bench_now();
    bench_exec(c, sql);
    bench_sample t = {.wall = bench_now() - t0, .cpu = bench_backend_cpu(pid)};
    t.cpu = c0 < 0 || t.cpu < 0 ? -1 : t.cpu - c0;
    PQfinish(c);
    return t;
}

static bench_sample bench_procedure(bench_ctx *b, int batch)
{
    bench_exec(b->pg.db, "DROP TABLE IF EXISTS bench_checkpoint");
    bench_exec(b->pg.db, "CREATE TABLE bench_checkpoint (name text PRIMARY KEY, last_id bigint"
                         " NOT NULL, rows_done bigint NOT NULL, batches bigint NOT NULL)");
    bench_exec(b->pg.db, "INSERT INTO bench_checkpoint VALUES ('fill', 0, 0, 0)");
    bench_exec(b->pg.db, procedure_sql);
    char call[64];
    snprintf(call, sizeof call, "CALL bench_fill(%d)", batch);
    bench_sample t = bench_timed_session(b, "procedure", call);
    long long done = bench_int(b->pg.db, "SELECT rows_done FROM bench_checkpoint");
    if (done != b->opts.rows)
        bench_die("procedure repaired %lld rows, expected %ld", done, b->opts.rows);
    return t;
}

/* ---- variant: the ceiling ------------------------------------------------------------------ */

static bench_sample bench_ceiling(bench_ctx *b)
{
    return bench_timed_session(b, "ceiling",
                               "UPDATE bench_items SET target = val * 2 WHERE target IS NULL");
}

/* ---- driver ---------------------------------------------------------------------------------- */

/* Median wall and median backend CPU of n samples (CPU negative when any is unknown). */
static bench_sample bench_median(const bench_sample *v, int n)
{
    double w[BENCH_MAX_REPS], c[BENCH_MAX_REPS];
    bool cpu_known = true;
    for (int i = 0; i < n; i++) {
        w[i] = v[i].wall;
        c[i] = v[i].cpu;
        cpu_known = cpu_known && v[i].cpu >= 0;
    }
    qsort(w, (size_t)n, sizeof w[0], bench_cmp_double);
    qsort(c, (size_t)n, sizeof c[0], bench_cmp_double);
    bench_sample m = {.wall = n % 2 ? w[n / 2] : (w[n / 2 - 1] + w[n / 2]) / 2,
                      .cpu = n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2};
    if (!cpu_known)
        m.cpu = -1;
    return m;
}

static void bench_print_median(const char *label, bench_sample m, double rows)
{
    printf("  %-32s %10.0f rows/s  [%6.2f s", label, rows / m.wall, m.wall);
    if (m.cpu >= 0)
        printf(", backend cpu %6.2f s", m.cpu);
    printf("]\n");
}

static void bench_print_machine(bench_ctx *b)
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
    char version[256], settings[512];
    bench_text(b->pg.db, "SELECT version()", version, sizeof version);
    bench_text(b->pg.db,
               "SELECT string_agg(name || '=' || setting || coalesce(unit, ''), ', '"
               " ORDER BY name) FROM pg_settings WHERE name IN ('shared_buffers', 'fsync',"
               " 'synchronous_commit', 'full_page_writes', 'max_wal_size', 'wal_level')",
               settings, sizeof settings);
    printf("machine: nproc=%ld, cpu=%s\n", sysconf(_SC_NPROCESSORS_ONLN), model);
    printf("postgres: %s\n", version);
    printf("settings: %s\n", settings);
    printf("scenario: %ld rows, batch sizes", b->opts.rows);
    for (int i = 0; i < b->opts.nbatches; i++)
        printf(" %d", b->opts.batches[i]);
    printf(", %d runs per variant (median), each on a freshly loaded table\n", b->opts.reps);
}

static void bench_usage(FILE *to)
{
    fprintf(to,
            "Usage: throughput [--url URL] [--rows N] [--reps N] [--batch N]... [-v]\n"
            "  --url    libpq URL of the server (default $BUZZ_BENCH_PG_URL, then\n"
            "           $BUZZ_TEST_PG_URL); a private database is created and dropped\n"
            "  --rows   rows in the table (default 1000000)\n"
            "  --reps   runs per variant, median reported (default 3, at most %d)\n"
            "  --batch  a batch size; repeat for more (default 1000 and 10000)\n",
            BENCH_MAX_REPS);
}

static void bench_parse(bench_opts *o, int argc, char **argv)
{
    *o = (bench_opts){.rows = 1000000, .reps = 3};
    o->url = getenv("BUZZ_BENCH_PG_URL");
    if (o->url == NULL || o->url[0] == '\0')
        o->url = getenv("BUZZ_TEST_PG_URL");
    static const struct option longopts[] = {
        {"url", required_argument, NULL, 'u'},
        {"rows", required_argument, NULL, 'n'},
        {"reps", required_argument, NULL, 'r'},
        {"batch", required_argument, NULL, 'b'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "u:n:r:b:vh", longopts, NULL)) != -1) {
        switch (ch) {
        case 'u':
            o->url = optarg;
            break;
        case 'n':
            o->rows = strtol(optarg, NULL, 10);
            break;
        case 'r':
            o->reps = (int)strtol(optarg, NULL, 10);
            break;
        case 'b':
            if (o->nbatches == BENCH_MAX_BATCHES)
                bench_die("at most %d batch sizes", BENCH_MAX_BATCHES);
            o->batches[o->nbatches++] = (int)strtol(optarg, NULL, 10);
            break;
        case 'v':
            o->verbose = true;
            break;
        case 'h':
            bench_usage(stdout);
            exit(0);
        default:
            bench_usage(stderr);
            exit(2);
        }
    }
    if (o->nbatches == 0) {
        o->batches[o->nbatches++] = 1000;
        o->batches[o->nbatches++] = 10000;
    }
    if (o->url == NULL || o->url[0] == '\0')
        bench_die("no server: pass --url or set BUZZ_BENCH_PG_URL");
    if (o->rows < 1 || o->reps < 1 || o->reps > BENCH_MAX_REPS)
        bench_die("bad --rows or --reps");
    for (int i = 0; i < o->nbatches; i++)
        if (o->batches[i] < 1 || o->batches[i] > BF_BATCH_MAX)
            bench_die("batch sizes are 1..%d", BF_BATCH_MAX);
}

int main(int argc, char **argv)
{
    bench_set_name("throughput");
    bench_ctx b = {0};
    bench_parse(&b.opts, argc, argv);
    bench_db_create(&b.pg, b.opts.url, "buzz_bench");
    bench_print_machine(&b);
    fflush(stdout);

    const int nb = b.opts.nbatches, reps = b.opts.reps;
    bench_sample engine[BENCH_MAX_BATCHES][BENCH_MAX_REPS], proc[BENCH_MAX_BATCHES][BENCH_MAX_REPS];
    bench_sample ceiling[BENCH_MAX_REPS];
    const double rows = (double)b.opts.rows;
    for (int r = 0; r < reps; r++) {
        for (int i = 0; i < nb; i++) {
            /* the two run back to back, in alternating order, so that neither always goes
             * first (onto a just-loaded cluster) and each run has a neighbour to be compared
             * with under the same conditions */
            for (int k = 0; k < 2; k++) {
                bench_table_reset(&b);
                if ((k + r) % 2 == 0) {
                    engine[i][r] = bench_engine(&b, b.opts.batches[i]);
                    bench_table_check(&b, "engine");
                } else {
                    proc[i][r] = bench_procedure(&b, b.opts.batches[i]);
                    bench_table_check(&b, "procedure");
                }
            }
            printf("run %d batch %6d: engine %9.0f rows/s  procedure %9.0f rows/s  ratio %.2f\n",
                   r + 1, b.opts.batches[i], rows / engine[i][r].wall, rows / proc[i][r].wall,
                   proc[i][r].wall / engine[i][r].wall);
            fflush(stdout);
        }
        bench_table_reset(&b);
        ceiling[r] = bench_ceiling(&b);
        bench_table_check(&b, "ceiling");
        printf("run %d ceiling     : single UPDATE %9.0f rows/s\n", r + 1, rows / ceiling[r].wall);
        fflush(stdout);
    }

    printf("\nmedian of %d runs:\n", reps);
    bench_sample c = bench_median(ceiling, reps);
    bench_print_median("ceiling (one UPDATE)", c, rows);
    for (int i = 0; i < nb; i++) {
        char label[64];
        snprintf(label, sizeof label, "batch %d engine", b.opts.batches[i]);
        bench_print_median(label, bench_median(engine[i], reps), rows);
        snprintf(label, sizeof label, "batch %d procedure", b.opts.batches[i]);
        bench_print_median(label, bench_median(proc[i], reps), rows);
    }
    for (int i = 0; i < nb; i++) {
        bench_sample e = bench_median(engine[i], reps), p = bench_median(proc[i], reps);
        /* the median of the per-run ratios: each compares two neighbouring runs, so slow
         * drift of the machine's speed (large on a shared VM) cancels out of it */
        double pair[BENCH_MAX_REPS];
        for (int r = 0; r < reps; r++)
            pair[r] = proc[i][r].wall / engine[i][r].wall;
        qsort(pair, (size_t)reps, sizeof pair[0], bench_cmp_double);
        double paired = reps % 2 ? pair[reps / 2] : (pair[reps / 2 - 1] + pair[reps / 2]) / 2;
        printf("ratio engine/procedure at batch %d: %.2f", b.opts.batches[i], p.wall / e.wall);
        if (e.cpu > 0 && p.cpu > 0)
            printf("  (backend cpu ratio %.2f)", p.cpu / e.cpu);
        printf("  (median of per-run ratios %.2f, range %.2f..%.2f)\n", paired, pair[0],
               pair[reps - 1]);
    }
    for (int i = 0; i < nb; i++)
        printf("ratio engine/ceiling at batch %d: %.2f\n", b.opts.batches[i],
               c.wall / bench_median(engine[i], reps).wall);
    bench_db_drop(&b.pg);
    return 0;
}
