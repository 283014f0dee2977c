/*
 * startup.c - what buzz-backfilld's startup costs as its definitions grow (issue 26: startup
 * linear in definitions), on a definitions directory of generated files:
 *
 *   register   the daemon's CPU (user + system, from wait4's rusage) from exec to the log line
 *              "registered N definitions", for N = 1 (the fixed cost), 1,000 and 10,000; the
 *              daemon is stopped at that line, so its short stop is counted too. Every run
 *              registers afresh (the rows of an earlier run are removed first). Printed: the
 *              median over --rounds interleaved rounds, the load average with every figure,
 *              the ratio 10k / 1k and the goals (10k at most 12 x 1k, under 1 s).
 *   claim      the wall time from the daemon's exec to the first claim of a required backfill
 *              in automatic mode with 1,000 definitions (one worker; polled in PostgreSQL).
 *   busy claim the same while LOAD_DAEMONS other daemons' LOAD_WORKERS workers each run
 *              backfills on tables of their own in the same database (the case: four
 *              daemons, 16 workers; --load-daemons 1 is the goal's wording, "while another
 *              daemon's workers run"; each daemon's first batch committed before the measured
 *              daemon starts): the registration competes with their writes for the WAL and
 *              the server, as a daemon restarted among busy ones does. Goal for both: under
 *              1 s (STARTUP_CLAIM_GOAL_S).
 *   busy restart the same, but a restart: the same binary ran first among the busy daemons
 *              until its first claim and was stopped (SIGTERM: the claim released), so every
 *              row is registered and the required backfill is running, unclaimed; the figure is
 *              the restarted daemon's exec to its claim (the restart among busy
 *              daemons; the busy claim is a first start, on no rows).
 *
 * With --base-daemon (e.g. a build of the previous commit) every figure is measured for it in
 * the same rounds, side by side. bench/startup.sh builds, makes the database and runs this.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"

#define STARTUP_MAX_ROUNDS   9
#define STARTUP_SIZES        3
#define STARTUP_TIMEOUT_S    600 /* the previous code at 10,000 definitions is slow */
#define STARTUP_RATIO_GOAL   12.0
#define STARTUP_10K_GOAL_S   1.0
#define STARTUP_CLAIM_GOAL_S 1.0
#define LOAD_DAEMONS         4 /* the other daemons of the busy claim, at most (--load-daemons) */
#define LOAD_WORKERS         4 /* workers of each, a definition and a table each */
#define LOAD_TABLES          (LOAD_DAEMONS * LOAD_WORKERS)
#define LOAD_ROWS            100000 /* rows of each of their tables: more than a run takes */

static const int sizes[STARTUP_SIZES] = {1, 1000, 10000};

static struct {
    const char *daemon, *base_daemon, *db, *dir;
    int load_daemons; /* the other daemons of the busy figures, 1 .. LOAD_DAEMONS */
    int rounds;
} opts = {.rounds = 3, .load_daemons = LOAD_DAEMONS};

static void die(const char *what)
{
    fprintf(stderr, "startup: %s\n", what);
    exit(1);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *load_average(void)
{
    static char buf[64];
    snprintf(buf, sizeof buf, "?");
    FILE *f = fopen("/proc/loadavg", "r");
    if (f == NULL)
        return buf;
    double a = 0, b = 0, c = 0;
    if (fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3)
        snprintf(buf, sizeof buf, "%.2f %.2f %.2f", a, b, c);
    fclose(f);
    return buf;
}

static void exec_sql(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) {
        fprintf(stderr, "startup: %s: %s", sql, PQerrorMessage(c));
        exit(1);
    }
    PQclear(r);
}

/* One declarative definition file at path. */
static void write_def(const char *path, const char *id, const char *description, const char *table,
                      bool required, const char *needs_repair, const char *update_set)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        die("cannot write a definition file");
    fprintf(f,
            "id = %s\ndescription = %s\nowner = bench\ntable = %s\nkey = id bigint\n"
            "batch_size = 500\nrequired = %s\nneeds_repair = %s\nupdate_set = %s\n"
            "postcondition = t.fixed IS NOT NULL\n",
            id, description, table, required ? "true" : "false", needs_repair, update_set);
    fclose(f);
}

static void make_dir(const char *dir)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        die("cannot make a definitions directory");
}

/* A directory of n definition files on sb.items; the first is required when asked. */
static void write_dir(const char *dir, int n, bool first_required)
{
    make_dir(dir);
    for (int i = 0; i < n; i++) {
        char path[600], id[64], description[96], update_set[64];
        snprintf(path, sizeof path, "%s/d_%05d.def", dir, i);
        snprintf(id, sizeof id, "sb.items.d_%05d", i);
        snprintf(description, sizeof description, "generated definition %d of %d", i, n);
        snprintf(update_set, sizeof update_set, "fixed = t.val + %d", i);
        write_def(path, id, description, "sb.items", i == 0 && first_required, "t.fixed IS NULL",
                  update_set);
    }
}

/* The load daemons' definitions (daemon k: tables k * LOAD_WORKERS ...): a required backfill
 * per load table that rewrites every row, whatever an earlier run left (its repair condition
 * is always true). The ID's part after the first '_' names the daemon (load_start). */
static void write_load_dir(int k)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/defs_load_%d", opts.dir, k);
    make_dir(dir);
    for (int j = 0; j < LOAD_WORKERS; j++) {
        int i = k * LOAD_WORKERS + j;
        char path[700], id[64], table[32];
        snprintf(path, sizeof path, "%s/load_%d.def", dir, i);
        snprintf(id, sizeof id, "sb.load%d_%d.churn", i, k);
        snprintf(table, sizeof table, "sb.load_%d", i);
        write_def(path, id, "the load of the busy claim", table, true, "t.val >= 0",
                  "fixed = coalesce(t.fixed, 0) + 1");
    }
}

typedef struct daemon_run {
    pid_t pid;
    double started;
    char log[600];
} daemon_run;

/* Start bin on the definitions in dir; `name` tells the socket and log of two daemons apart,
 * workers > 0 runs that many in automatic mode. */
static void daemon_start(daemon_run *d, const char *bin, const char *dir, const char *name,
                         int workers)
{
    char sock[600], dirarg[600], nworkers[16];
    snprintf(d->log, sizeof d->log, "%s/%s.log", opts.dir, name);
    snprintf(sock, sizeof sock, "ipc://%s/%s.sock", opts.dir, name);
    snprintf(nworkers, sizeof nworkers, "%d", workers);
    bool automatic = workers > 0;
    snprintf(dirarg, sizeof dirarg, "%s", dir);
    unlink(d->log); /* the previous run's line must not be read as this run's */
    d->started = now_s();
    d->pid = fork();
    if (d->pid < 0)
        die("cannot fork");
    if (d->pid == 0) {
        int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || dup2(fd, 2) < 0)
            _exit(127);
        execl(bin, bin, "--database-url", opts.db, "--listen", sock, "--definitions-dir", dirarg,
              "--workers", nworkers, "--auto-backfill", automatic ? "on" : "off", "--ipc-boundary",
              "on", "--log-level", "info", "run", (char *)NULL);
        _exit(127);
    }
}

/* Wait for text in the daemon's log (it dies: exit). */
static void daemon_wait_log(const daemon_run *d, const char *text)
{
    double until = now_s() + STARTUP_TIMEOUT_S;
    static char buf[1 << 22];
    while (now_s() < until) {
        FILE *f = fopen(d->log, "r");
        size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f)
            fclose(f);
        buf[n] = '\0';
        if (strstr(buf, text) != NULL)
            return;
        int status = 0;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            fprintf(stderr, "startup: the daemon exited before '%s':\n%s\n", text, buf);
            exit(1);
        }
        usleep(1000);
    }
    die("the daemon did not get there in time");
}

/* Stop the daemon; its CPU seconds (user + system, all threads). */
static double daemon_stop(daemon_run *d)
{
    kill(d->pid, SIGTERM);
    int status = 0;
    struct rusage ru;
    if (wait4(d->pid, &status, 0, &ru) != d->pid)
        die("cannot wait for the daemon");
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* Forget the registrations and runs of an earlier daemon (the engine's triggers keep a
 * completed row; the replica role skips them). */
static void forget(PGconn *c)
{
    exec_sql(c, "SET session_replication_role = replica");
    exec_sql(c, "DELETE FROM buzz_backfill.backfill");
    exec_sql(c, "RESET session_replication_role");
    exec_sql(c, "UPDATE sb.items SET fixed = NULL");
}

/* Whether a query answers a row. */
static bool sql_has_row(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    bool yes = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
    PQclear(r);
    return yes;
}

/* The other daemons of the busy claim, LOAD_WORKERS workers each, every worker running a
 * required backfill that rewrites every row of a table of its own; returns once every daemon
 * has committed a batch. */
static void load_start(PGconn *c, daemon_run *load)
{
    for (int k = 0; k < opts.load_daemons; k++) {
        char dir[600], name[32];
        snprintf(dir, sizeof dir, "%s/defs_load_%d", opts.dir, k);
        snprintf(name, sizeof name, "load_%d", k);
        daemon_start(&load[k], opts.daemon, dir, name, LOAD_WORKERS);
    }
    char sql[300];
    snprintf(sql, sizeof sql,
             "SELECT 1 FROM buzz_backfill.backfill WHERE id LIKE 'sb.load%%' AND "
             "batches_committed > 0 HAVING count(DISTINCT split_part(id, '_', 2)) >= %d",
             opts.load_daemons);
    double until = now_s() + STARTUP_TIMEOUT_S;
    while (!sql_has_row(c, sql)) {
        for (int k = 0; k < opts.load_daemons; k++) {
            int status = 0;
            if (waitpid(load[k].pid, &status, WNOHANG) == load[k].pid)
                die("a load daemon exited before its first batch");
        }
        if (now_s() > until)
            die("the load daemons committed no batch in time");
        usleep(1000);
    }
}

/* CPU seconds to register n definitions (the daemon stopped at the log line). */
static double run_register(PGconn *c, const char *bin, int n)
{
    forget(c);
    char dir[600], line[64];
    snprintf(dir, sizeof dir, "%s/defs_%d", opts.dir, n);
    snprintf(line, sizeof line, "registered %d definition%s", n, n == 1 ? "" : "s");
    daemon_run d;
    daemon_start(&d, bin, dir, "daemon", 0);
    daemon_wait_log(&d, line);
    return daemon_stop(&d);
}

/* Wall seconds from d's exec until the required backfill is claimed (polled every 0.5 ms). */
static double daemon_wait_claim(PGconn *c, const daemon_run *d)
{
    double until = d->started + STARTUP_TIMEOUT_S;
    while (now_s() < until) {
        if (sql_has_row(c, "SELECT 1 FROM buzz_backfill.backfill WHERE id = 'sb.items.d_00000'"
                           " AND (claimed_at IS NOT NULL OR claim_owner IS NOT NULL"
                           " OR state IN ('validating', 'completed'))"))
            return now_s() - d->started;
        int status = 0;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid)
            die("the daemon exited before its first claim");
        usleep(500);
    }
    die("no claim in time");
    return -1;
}

/* Wall seconds from exec to the first claim (1,000 definitions, automatic mode), on an idle
 * database or while the load daemon's workers run. */
static double run_claim(PGconn *c, const char *bin, bool busy, bool restart)
{
    forget(c);
    daemon_run load[LOAD_DAEMONS];
    if (busy)
        load_start(c, load);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/defs_claim", opts.dir);
    if (restart) { /* the run before the restart: registers, starts and claims, then stops */
        daemon_run first;
        daemon_start(&first, bin, dir, "first", 1);
        daemon_wait_claim(c, &first);
        daemon_stop(&first);
        if (!sql_has_row(c, "SELECT 1 FROM buzz_backfill.backfill WHERE id = 'sb.items.d_00000'"
                            " AND state = 'running' AND claim_owner IS NULL"))
            die("the backfill before the restart is not running and unclaimed");
    }
    daemon_run d;
    daemon_start(&d, bin, dir, "daemon", 1);
    double took = daemon_wait_claim(c, &d);
    daemon_stop(&d);
    for (int k = 0; busy && k < opts.load_daemons; k++)
        daemon_stop(&load[k]);
    return took;
}

/* The median of v[0..n), v left in its order (the rounds are printed as they ran). */
static double median(const double *v, int n)
{
    double s[STARTUP_MAX_ROUNDS];
    memcpy(s, v, (size_t)n * sizeof *s);
    return bench_median_doubles(s, n);
}

static void usage(void)
{
    printf("usage: startup --daemon BUZZ_BACKFILLD --db CONNINFO --dir TMPDIR [--rounds N]\n"
           "               [--base-daemon BUZZ_BACKFILLD] [--load-daemons N]\n"
           "  --rounds N        interleaved rounds, 1 to %d (default 3)\n"
           "  --load-daemons N  the other daemons of the busy figures, %d workers each, 1 to %d\n"
           "                    (default %d)\n",
           STARTUP_MAX_ROUNDS, LOAD_WORKERS, LOAD_DAEMONS, LOAD_DAEMONS);
}

static void parse(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"daemon", required_argument, NULL, 'd'}, {"base-daemon", required_argument, NULL, 'b'},
        {"db", required_argument, NULL, 'p'},     {"dir", required_argument, NULL, 't'},
        {"rounds", required_argument, NULL, 'r'}, {"load-daemons", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'd':
            opts.daemon = optarg;
            break;
        case 'b':
            opts.base_daemon = optarg;
            break;
        case 'p':
            opts.db = optarg;
            break;
        case 't':
            opts.dir = optarg;
            break;
        case 'r':
            opts.rounds = (int)strtol(optarg, NULL, 10);
            break;
        case 'l':
            opts.load_daemons = (int)strtol(optarg, NULL, 10);
            break;
        case 'h':
            usage();
            exit(0);
        default:
            usage();
            exit(2);
        }
    }
    if (!opts.daemon || !opts.db || !opts.dir || opts.rounds < 1 ||
        opts.rounds > STARTUP_MAX_ROUNDS || opts.load_daemons < 1 ||
        opts.load_daemons > LOAD_DAEMONS) {
        usage();
        exit(2);
    }
}

int main(int argc, char **argv)
{
    parse(argc, argv);
    PGconn *c = PQconnectdb(opts.db);
    if (PQstatus(c) != CONNECTION_OK)
        die("cannot connect to PostgreSQL");
    PQclear(PQexec(c, "SET client_min_messages = warning"));
    exec_sql(c, "CREATE SCHEMA IF NOT EXISTS sb");
    exec_sql(c, "CREATE TABLE IF NOT EXISTS sb.items (id bigint PRIMARY KEY, val int NOT NULL,"
                " fixed int)");
    exec_sql(c, "TRUNCATE sb.items");
    exec_sql(c, "INSERT INTO sb.items SELECT i, i % 1000 FROM generate_series(1, 10000) i");
    exec_sql(c, "ANALYZE sb.items");
    for (int i = 0; i < LOAD_TABLES; i++) {
        char sql[300];
        snprintf(sql, sizeof sql,
                 "CREATE TABLE IF NOT EXISTS sb.load_%d (id bigint PRIMARY KEY, val int NOT NULL,"
                 " fixed int)",
                 i);
        exec_sql(c, sql);
        snprintf(sql, sizeof sql, "TRUNCATE sb.load_%d", i);
        exec_sql(c, sql);
        snprintf(sql, sizeof sql,
                 "INSERT INTO sb.load_%d SELECT i, i %% 1000 FROM generate_series(1, %d) i", i,
                 LOAD_ROWS);
        exec_sql(c, sql);
        snprintf(sql, sizeof sql, "ANALYZE sb.load_%d", i);
        exec_sql(c, sql);
    }
    for (int k = 0; k < LOAD_DAEMONS; k++)
        write_load_dir(k);
    for (int k = 0; k < STARTUP_SIZES; k++) {
        char dir[600];
        snprintf(dir, sizeof dir, "%s/defs_%d", opts.dir, sizes[k]);
        write_dir(dir, sizes[k], false);
    }
    char claim_dir[600];
    snprintf(claim_dir, sizeof claim_dir, "%s/defs_claim", opts.dir);
    write_dir(claim_dir, 1000, true);

    int nbins = opts.base_daemon ? 2 : 1;
    const char *bins[2] = {opts.daemon, opts.base_daemon};
    const char *names[2] = {"daemon", "base"};
    double cpu[2][STARTUP_SIZES][STARTUP_MAX_ROUNDS], claim[2][STARTUP_MAX_ROUNDS],
        busy[2][STARTUP_MAX_ROUNDS], again[2][STARTUP_MAX_ROUNDS];
    printf("%5s %-7s %12s %14s   %s\n", "round", "daemon", "definitions", "cpu s", "load");
    for (int r = 0; r < opts.rounds; r++) {
        for (int k = 0; k < STARTUP_SIZES; k++)
            for (int b = 0; b < nbins; b++) {
                cpu[b][k][r] = run_register(c, bins[b], sizes[k]);
                printf("%5d %-7s %12d %14.3f   (load %s)\n", r + 1, names[b], sizes[k],
                       cpu[b][k][r], load_average());
                fflush(stdout);
            }
        for (int b = 0; b < nbins; b++) {
            claim[b][r] = run_claim(c, bins[b], false, false);
            printf("%5d %-7s %12s %14.3f   wall s to the first claim (1000 definitions, load "
                   "%s)\n",
                   r + 1, names[b], "claim", claim[b][r], load_average());
            busy[b][r] = run_claim(c, bins[b], true, false);
            printf("%5d %-7s %12s %14.3f   the same while %d workers of %d other daemons run "
                   "(load %s)\n",
                   r + 1, names[b], "busy claim", busy[b][r], opts.load_daemons * LOAD_WORKERS,
                   opts.load_daemons, load_average());
            again[b][r] = run_claim(c, bins[b], true, true);
            printf("%5d %-7s %12s %14.3f   the same, a restart: its rows registered, the "
                   "backfill running (load %s)\n",
                   r + 1, names[b], "busy restart", again[b][r], load_average());
            fflush(stdout);
        }
    }
    printf("\nmedians of %d rounds (load %s)\n", opts.rounds, load_average());
    for (int b = 0; b < nbins; b++) {
        double m[STARTUP_SIZES];
        for (int k = 0; k < STARTUP_SIZES; k++)
            m[k] = median(cpu[b][k], opts.rounds);
        double ratio = m[2] / m[1];
        double net = (m[2] - m[0]) / (m[1] - m[0]);
        bool met = ratio <= STARTUP_RATIO_GOAL && m[2] < STARTUP_10K_GOAL_S;
        printf("  %-6s CPU to register: 1 %.3f s, 1k %.3f s, 10k %.3f s; 10k / 1k = %.2f x "
               "(less the fixed cost of 1: %.2f x); goal 10k <= %.0f x 1k and < %.1f s: %s\n",
               names[b], m[0], m[1], m[2], ratio, net, STARTUP_RATIO_GOAL, STARTUP_10K_GOAL_S,
               met ? "met" : "NOT met");
        double idle = median(claim[b], opts.rounds), loaded = median(busy[b], opts.rounds);
        double restarted = median(again[b], opts.rounds);
        printf("  %-6s wall time to the first claim with 1000 definitions: %.3f s idle, %.3f s "
               "while %d workers of %d other daemons run, %.3f s for a restart among them; goal "
               "< %.1f s in all: %s\n",
               names[b], idle, loaded, opts.load_daemons * LOAD_WORKERS, opts.load_daemons,
               restarted, STARTUP_CLAIM_GOAL_S,
               idle < STARTUP_CLAIM_GOAL_S && loaded < STARTUP_CLAIM_GOAL_S &&
                       restarted < STARTUP_CLAIM_GOAL_S
                   ? "met"
                   : "NOT met");
    }
    if (nbins == 2)
        printf("  daemon / base: CPU at 10k %.3f x, first claim %.3f x, busy %.3f x, busy "
               "restart %.3f x\n",
               median(cpu[0][2], opts.rounds) / median(cpu[1][2], opts.rounds),
               median(claim[0], opts.rounds) / median(claim[1], opts.rounds),
               median(busy[0], opts.rounds) / median(busy[1], opts.rounds),
               median(again[0], opts.rounds) / median(again[1], opts.rounds));
    PQfinish(c);
    return 0;
}
