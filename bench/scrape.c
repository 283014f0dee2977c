/*
 * scrape.c - what buzz-backfilld's /metrics costs, measured against baselines in the same run:
 *
 *   overhead  the batch rate of one backfill (demo.events.content_len_v1 over the seeded
 *             demo.events) with a 1 Hz scraper of /metrics, against the same run without one.
 *             Each run gets a fresh copy of the seeded database (CREATE DATABASE ... TEMPLATE)
 *             and a fresh daemon (one worker, manual mode; buzzctl starts the backfill). The
 *             rate is rows_covered / (last_progress_at - started_at), read from the row, so
 *             the polling of this program is not timed. Runs alternate their order; the median
 *             of the per-pair ratios scraped/plain is printed (target: at least 0.98).
 *   latency   GET /metrics with 10,000 registered backfills in mixed states (rows inserted
 *             directly into buzz_backfill.backfill), against GET /livez (the HTTP path alone),
 *             sequential requests: p50, p99, max (target: p99 below 50 ms), and the database
 *             part the exposition reports (buzz_backfill_scrape_database_seconds).
 *
 * bench/scrape.sh builds everything, seeds the template database and runs this program.
 * Output goes to stdout only.
 */
#include <arpa/inet.h>
#include <getopt.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"
#include "http_get.h"

#define SCRAPE_ID "demo.events.content_len_v1"

typedef struct scrape_opts {
    const char *daemon, *buzzctl, *module, *server, *template_db, *dir;
    int reps, requests;
} scrape_opts;

static double scrape_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void scrape_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void scrape_die(const char *what)
{
    fprintf(stderr, "scrape: %s\n", what);
    exit(1);
}

static PGconn *scrape_connect(const scrape_opts *o, const char *db)
{
    const char *keys[] = {"dbname", "dbname", NULL};
    const char *vals[] = {o->server, db, NULL};
    PGconn *c = PQconnectdbParams(keys, vals, 1);
    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "scrape: %s", PQerrorMessage(c));
        exit(1);
    }
    return c;
}

static void scrape_exec(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) {
        fprintf(stderr, "scrape: %s: %s", sql, PQerrorMessage(c));
        exit(1);
    }
    PQclear(r);
}

static double scrape_double(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    double v = -1;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && !PQgetisnull(r, 0, 0))
        v = strtod(PQgetvalue(r, 0, 0), NULL);
    PQclear(r);
    return v;
}

/* The conninfo of database db on the server (host, port, user of o->server). */
static void scrape_conninfo(const scrape_opts *o, const char *db, char *out, size_t cap)
{
    char *err = NULL;
    PQconninfoOption *opts = PQconninfoParse(o->server, &err);
    if (opts == NULL)
        scrape_die("cannot parse the server URL");
    size_t n = (size_t)snprintf(out, cap, "dbname=%s", db);
    for (PQconninfoOption *p = opts; p->keyword != NULL; p++)
        if (p->val != NULL && p->val[0] != '\0' && strcmp(p->keyword, "dbname") != 0)
            n += (size_t)snprintf(out + n, cap - n, " %s='%s'", p->keyword, p->val);
    PQconninfoFree(opts);
}

static int scrape_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        scrape_die("no free port");
    close(fd);
    return ntohs(a.sin_port);
}

typedef struct scrape_daemon {
    pid_t pid;
    int port;
    char ipc[300];
} scrape_daemon;

static void scrape_daemon_start(scrape_daemon *d, const scrape_opts *o, const char *db, int workers,
                                bool migrate)
{
    char conninfo[1024], http[64], log[512], workers_s[16];
    scrape_conninfo(o, db, conninfo, sizeof conninfo);
    d->port = scrape_free_port();
    snprintf(http, sizeof http, "http://127.0.0.1:%d", d->port);
    snprintf(d->ipc, sizeof d->ipc, "ipc://%s/%s.sock", o->dir, db);
    snprintf(log, sizeof log, "%s/%s.log", o->dir, db);
    snprintf(workers_s, sizeof workers_s, "%d", workers);
    d->pid = fork();
    if (d->pid < 0)
        scrape_die("fork");
    if (d->pid == 0) {
        if (freopen(log, "w", stderr) == NULL)
            _exit(127);
        execl(o->daemon, o->daemon, "--database-url", conninfo, "--listen", d->ipc,
              "--ipc-boundary", "on", "--modules", o->module, "--workers", workers_s,
              "--auto-migrate", migrate ? "on" : "off", "--http-listen", http, "--log-level",
              "warn", "run", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 1000; i++) {
        th_response r = th_request("GET", "127.0.0.1", d->port, "/livez", 1000);
        int st = r.status;
        th_response_fini(&r);
        if (st == 200)
            return;
        scrape_sleep_ms(10);
    }
    scrape_die("the daemon did not answer /livez");
}

static void scrape_daemon_stop(scrape_daemon *d)
{
    kill(d->pid, SIGTERM);
    int st = 0;
    waitpid(d->pid, &st, 0);
}

/* ---- overhead ------------------------------------------------------------------------------ */

typedef struct scraper {
    int port;
    atomic_bool stop;
    int scrapes;
    pthread_t tid;
} scraper;

static void *scraper_main(void *arg)
{
    scraper *s = arg;
    double next = scrape_now_s();
    while (!atomic_load(&s->stop)) {
        th_response r = th_request("GET", "127.0.0.1", s->port, "/metrics", 5000);
        if (r.status == 200)
            s->scrapes++;
        th_response_fini(&r);
        next += 1.0;
        while (!atomic_load(&s->stop) && scrape_now_s() < next)
            scrape_sleep_ms(10);
    }
    return NULL;
}

/* One run on a fresh copy of the template; returns rows/s of the batch phase. */
static double scrape_run(const scrape_opts *o, PGconn *admin, int run, bool scraped, int *scrapes)
{
    char db[64], sql[256];
    snprintf(db, sizeof db, "%s_run%d", o->template_db, run);
    snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s", db);
    scrape_exec(admin, sql);
    snprintf(sql, sizeof sql, "CREATE DATABASE %s TEMPLATE %s", db, o->template_db);
    scrape_exec(admin, sql);
    scrape_daemon d;
    scrape_daemon_start(&d, o, db, 1, false);
    PGconn *c = scrape_connect(o, db);
    for (int i = 0; i < 3000 && scrape_double(c, "SELECT count(*) FROM buzz_backfill.backfill"
                                                 " WHERE id = '" SCRAPE_ID "'") != 1;
         i++)
        scrape_sleep_ms(10);
    scraper s = {.port = d.port};
    atomic_init(&s.stop, false);
    if (scraped)
        pthread_create(&s.tid, NULL, scraper_main, &s);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s --url %s start %s > /dev/null", o->buzzctl, d.ipc, SCRAPE_ID);
    if (system(cmd) != 0)
        scrape_die("buzzctl start failed");
    while (scrape_double(c, "SELECT count(*) FROM buzz_backfill.backfill WHERE id = '" SCRAPE_ID
                            "' AND state IN ('validating', 'completed')") != 1)
        scrape_sleep_ms(50);
    if (scraped) {
        atomic_store(&s.stop, true);
        pthread_join(s.tid, NULL);
    }
    double secs = scrape_double(c, "SELECT extract(epoch FROM last_progress_at - started_at)"
                                   " FROM buzz_backfill.backfill WHERE id = '" SCRAPE_ID "'");
    double rows = scrape_double(
        c, "SELECT rows_covered FROM buzz_backfill.backfill WHERE id = '" SCRAPE_ID "'");
    PQfinish(c);
    scrape_daemon_stop(&d);
    snprintf(sql, sizeof sql, "DROP DATABASE %s WITH (FORCE)", db);
    scrape_exec(admin, sql);
    *scrapes = s.scrapes;
    return secs > 0 ? rows / secs : 0;
}

static void scrape_overhead(const scrape_opts *o, PGconn *admin)
{
    double plain[64], scraped[64], ratio[64];
    int n = o->reps < 64 ? o->reps : 64;
    printf("overhead: batch rate of %s, rows/s (1 Hz scraper of /metrics vs none)\n", SCRAPE_ID);
    printf("%-4s %12s %12s %8s %8s\n", "run", "plain", "scraped", "ratio", "scrapes");
    for (int i = 0; i < n; i++) {
        int k = 0, k2 = 0;
        if (i % 2 == 0) {
            plain[i] = scrape_run(o, admin, 2 * i, false, &k2);
            scraped[i] = scrape_run(o, admin, 2 * i + 1, true, &k);
        } else {
            scraped[i] = scrape_run(o, admin, 2 * i, true, &k);
            plain[i] = scrape_run(o, admin, 2 * i + 1, false, &k2);
        }
        ratio[i] = plain[i] > 0 ? scraped[i] / plain[i] : 0;
        printf("%-4d %12.0f %12.0f %8.3f %8d\n", i + 1, plain[i], scraped[i], ratio[i], k);
        fflush(stdout);
    }
    double mp = bench_median_doubles(plain, n), ms = bench_median_doubles(scraped, n);
    printf("median %11.0f %12.0f %8.3f\n", mp, ms, mp > 0 ? ms / mp : 0);
    printf("ratio scraped/plain (median of per-run ratios): %.3f (target >= 0.98)\n",
           bench_median_doubles(ratio, n));
}

/* ---- latency ------------------------------------------------------------------------------- */

static void scrape_series(const char *name, int port, const char *path, int requests, double *db_s)
{
    double *ms = malloc(sizeof *ms * (size_t)requests);
    double db_sum = 0;
    for (int i = 0; i < requests; i++) {
        double t0 = scrape_now_s();
        th_response r = th_request("GET", "127.0.0.1", port, path, 5000);
        ms[i] = (scrape_now_s() - t0) * 1000;
        if (r.status != 200)
            scrape_die("a request failed");
        const char *p = strstr(r.body, "\nbuzz_backfill_scrape_database_seconds ");
        if (p != NULL)
            db_sum += strtod(p + 40, NULL);
        th_response_fini(&r);
    }
    qsort(ms, (size_t)requests, sizeof *ms, bench_cmp_double);
    printf("%-10s p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms", name, ms[requests / 2],
           ms[(requests * 99) / 100], ms[requests - 1]);
    if (db_s != NULL) {
        *db_s = db_sum / requests;
        printf("  (database part: mean %.2f ms)", *db_s * 1000);
    }
    printf("\n");
    if (db_s != NULL) {
        double sum = 0;
        for (int i = 0; i < requests; i++)
            sum += ms[i];
        printf("metrics p99 below 50 ms: %s\n", ms[(requests * 99) / 100] < 50 ? "yes" : "NO");
        printf("a 1 Hz scraper keeps the scrape path busy %.2f%% of the time (mean %.2f ms per "
               "scrape; an upper bound of what it can take from the batch work)\n",
               sum / requests / 10, sum / requests);
    }
    free(ms);
}

static void scrape_latency(const scrape_opts *o, PGconn *admin)
{
    char db[64], sql[256];
    snprintf(db, sizeof db, "%s_lat", o->template_db);
    snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s", db);
    scrape_exec(admin, sql);
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", db);
    scrape_exec(admin, sql);
    scrape_daemon d;
    scrape_daemon_start(&d, o, db, 0, true);
    PGconn *c = scrape_connect(o, db);
    for (int i = 0; i < 3000 && scrape_double(c, "SELECT count(*) FROM buzz_backfill.backfill") < 1;
         i++)
        scrape_sleep_ms(10);
    /* 10,000 rows in mixed states, as many registrations and starts would leave them */
    scrape_exec(c, "INSERT INTO buzz_backfill.backfill (id, state, key_types, batch_size, required,"
                   " bound, bound_empty, checkpoint, started_at, last_progress_at, completed_at,"
                   " batches_committed, rows_committed)"
                   " SELECT 'bench.b' || g, s.state, 'bigint', 1000, g % 3 = 0,"
                   "  CASE WHEN s.state = 'pending' THEN NULL ELSE ARRAY['1000000'] END,"
                   "  CASE WHEN s.state = 'pending' THEN NULL ELSE false END,"
                   "  CASE WHEN s.state = 'pending' THEN NULL ELSE ARRAY[(g * 10)::text] END,"
                   "  CASE WHEN s.state = 'pending' THEN NULL ELSE now() - interval '1 hour' END,"
                   "  CASE WHEN s.state = 'pending' THEN NULL"
                   "   ELSE now() - (g % 600) * interval '1 second' END,"
                   "  CASE WHEN s.state = 'completed' THEN now() END,"
                   "  g % 100, g % 1000"
                   " FROM generate_series(1, 10000) g,"
                   " LATERAL (SELECT (ARRAY['pending','running','paused','blocked','failed',"
                   "  'completed','completed','completed'])[1 + g % 8] AS state) s");
    scrape_exec(c, "ANALYZE buzz_backfill.backfill");
    printf("latency: sequential requests with %.0f registered backfills, %d each\n",
           scrape_double(c, "SELECT count(*) FROM buzz_backfill.backfill"), o->requests);
    double db_s = 0;
    scrape_series("/livez", d.port, "/livez", o->requests, NULL);
    scrape_series("/metrics", d.port, "/metrics", o->requests, &db_s);
    PQfinish(c);
    scrape_daemon_stop(&d);
    snprintf(sql, sizeof sql, "DROP DATABASE %s WITH (FORCE)", db);
    scrape_exec(admin, sql);
}

int main(int argc, char **argv)
{
    scrape_opts o = {.reps = 5, .requests = 500};
    static const struct option opts[] = {{"daemon", required_argument, NULL, 'd'},
                                         {"buzzctl", required_argument, NULL, 'b'},
                                         {"module", required_argument, NULL, 'm'},
                                         {"server", required_argument, NULL, 's'},
                                         {"template", required_argument, NULL, 't'},
                                         {"dir", required_argument, NULL, 'D'},
                                         {"reps", required_argument, NULL, 'r'},
                                         {"requests", required_argument, NULL, 'n'},
                                         {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'd':
            o.daemon = optarg;
            break;
        case 'b':
            o.buzzctl = optarg;
            break;
        case 'm':
            o.module = optarg;
            break;
        case 's':
            o.server = optarg;
            break;
        case 't':
            o.template_db = optarg;
            break;
        case 'D':
            o.dir = optarg;
            break;
        case 'r':
            o.reps = atoi(optarg);
            break;
        case 'n':
            o.requests = atoi(optarg);
            break;
        default:
            scrape_die("unknown option (see bench/scrape.sh)");
        }
    }
    if (!o.daemon || !o.buzzctl || !o.module || !o.server || !o.template_db || !o.dir ||
        o.reps < 1 || o.requests < 1)
        scrape_die("missing options (run it through bench/scrape.sh)");
    PGconn *admin = scrape_connect(&o, "postgres");
    scrape_latency(&o, admin);
    scrape_overhead(&o, admin);
    PQfinish(admin);
    return 0;
}
