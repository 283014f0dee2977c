/*
 * relayload.c - a relay's load on demo.events, for bench/coexist.sh: the relay-shaped mix of
 * the bench's pgbench scripts (inserts of new events 3, an author's 20 most recent events 4, a
 * kind's 20 most recent events 2, an update of one existing event 1), run by one thread over
 * --clients connections at an open rate, and the relay's own latency reported as the relay
 * would: each --window-ms window's p99 written into buzz_canary.health (--health), the one-row
 * table a throttle_latency_sql reads (docs/throttling.md).
 *
 * Why not pgbench: pgbench reports a transaction's latency only through its per-transaction log
 * (written through stdio, so in 4 KiB pieces hundreds of ms apart) or per whole second, and
 * neither is a signal a controller can act on within a window; a probe of our own (bench/canary)
 * is not the relay's latency. Here the latency of every transaction is known when it ends.
 *
 * Open load: arrivals are a Poisson process of --rate per second; a transaction's latency is
 * counted from its scheduled arrival, so time it waits for a free connection counts, as a
 * relay's client waits. --rate 0 runs a closed loop flat out (every connection starts its next
 * transaction when the last ends), to measure capacity. A window's value is the p99 of the
 * transactions that ended in it, or the age of the oldest one still waiting when that is larger
 * (a stall shows in the window it happens in, not when it ends).
 *
 * The first --warmup-ms (default 1000) run like the rest and are reported into the table, but
 * the printed figures leave them out: each connection's first statements are planned and read
 * cold (seen: a first window's p99 of 28 ms against 2 to 3 after it).
 *
 * Output, one line on stdout: "tps p50_ms p99_ms windows_p90_ms transactions" (the windows'
 * 90th percentile is 0 without --health). A failed statement ends it (exit 1).
 *
 * Usage: relayload CONNINFO [--rate TPS] [--seconds S] [--clients C] [--rows N]
 *                  [--window-ms MS] [--warmup-ms MS] [--health] [--trace FILE]
 *        --trace: each window's end (ms from the start), value (ms) and transactions ended
 */
#include <errno.h>
#include <libpq-fe.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"

#define RL_MAX_CLIENTS 64
#define RL_AUTHORS     5000

typedef struct rl_conn {
    PGconn *c;
    int busy;
    double sched_ms; /* the scheduled arrival of the transaction it runs */
} rl_conn;

/* A growable array of doubles. */
typedef struct rl_vec {
    double *v;
    size_t n, cap;
} rl_vec;

static void vec_push(rl_vec *a, double x)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 4096;
        a->v = realloc(a->v, a->cap * sizeof *a->v);
        if (a->v == NULL)
            bench_die("out of memory");
    }
    a->v[a->n++] = x;
}

static unsigned long long rng = 88172645463325252ULL;

static double uniform01(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static long pick(long n)
{
    return (long)(uniform01() * (double)n);
}

static void prepare(PGconn *c)
{
    static const char *const stmts[][2] = {
        {"ins",
         "INSERT INTO demo.events (event_id, pubkey, created_at, kind, content, tags,"
         " content_len, pubkey_hex, tag_count)"
         " VALUES (sha256(convert_to($1, 'UTF8')), sha256(convert_to('author:' || $2, 'UTF8')),"
         " date_trunc('second', now()), $3::int, 'gm from the coexist bench', '[]', 25,"
         " encode(sha256(convert_to('author:' || $2, 'UTF8')), 'hex'), 0)"},
        {"author", "SELECT id, created_at, kind FROM demo.events"
                   " WHERE pubkey = sha256(convert_to('author:' || $1, 'UTF8'))"
                   " ORDER BY created_at DESC LIMIT 20"},
        /* a statement per kind: a generic plan of "kind = $1" scans created_at backwards for
         * the rare kind 0 through every newer event (seen: p99 80 ms and growing) */
        {"kind1", "SELECT id, created_at FROM demo.events WHERE kind = 1"
                  " ORDER BY created_at DESC LIMIT 20"},
        {"kind7", "SELECT id, created_at FROM demo.events WHERE kind = 7"
                  " ORDER BY created_at DESC LIMIT 20"},
        {"kind0", "SELECT id, created_at FROM demo.events WHERE kind = 0"
                  " ORDER BY created_at DESC LIMIT 20"},
        {"upd", "UPDATE demo.events SET tags = tags || '[[\"client\", \"coexist\"]]'::jsonb"
                " WHERE id = $1::bigint"},
    };
    for (size_t i = 0; i < sizeof stmts / sizeof stmts[0]; i++) {
        PGresult *r = PQprepare(c, stmts[i][0], stmts[i][1], 0, NULL);
        if (PQresultStatus(r) != PGRES_COMMAND_OK)
            bench_die("prepare %s: %s", stmts[i][0], PQerrorMessage(c));
        PQclear(r);
    }
}

/* Start one transaction of the mix on c (weights 3/4/2/1, as the pgbench scripts). */
static void send_one(rl_conn *k, double sched_ms, long rows, unsigned long long *seq)
{
    char a[32], b[32], ev[64];
    const char *p[3] = {a, b, NULL};
    long w = pick(10);
    int ok;
    if (w < 3) {
        long kk = pick(10);
        snprintf(ev, sizeof ev, "relayload:%ld:%llu", (long)getpid(), ++*seq);
        snprintf(a, sizeof a, "%ld", pick(RL_AUTHORS));
        snprintf(b, sizeof b, "%d", kk < 6 ? 1 : kk < 9 ? 7 : 6);
        const char *pi[3] = {ev, a, b};
        ok = PQsendQueryPrepared(k->c, "ins", 3, pi, NULL, NULL, 0);
    } else if (w < 7) {
        snprintf(a, sizeof a, "%ld", pick(RL_AUTHORS));
        ok = PQsendQueryPrepared(k->c, "author", 1, p, NULL, NULL, 0);
    } else if (w < 9) {
        static const char *const kinds[3] = {"kind1", "kind7", "kind0"};
        ok = PQsendQueryPrepared(k->c, kinds[pick(3)], 0, NULL, NULL, NULL, 0);
    } else {
        snprintf(a, sizeof a, "%ld", 1 + pick(rows));
        ok = PQsendQueryPrepared(k->c, "upd", 1, p, NULL, NULL, 0);
    }
    if (!ok)
        bench_die("send: %s", PQerrorMessage(k->c));
    k->busy = 1;
    k->sched_ms = sched_ms;
}

/* Read what arrived on c; true when its transaction has ended (its results drained). */
static int drain(PGconn *c)
{
    if (!PQconsumeInput(c))
        bench_die("%s", PQerrorMessage(c));
    while (!PQisBusy(c)) {
        PGresult *r = PQgetResult(c);
        if (r == NULL)
            return 1;
        ExecStatusType st = PQresultStatus(r);
        if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
            bench_die("%s", PQresultErrorMessage(r));
        PQclear(r);
    }
    return 0;
}

static long arg_long(const char *name, const char *v, long lo, long hi)
{
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        bench_die("%s: a whole number from %ld to %ld", name, lo, hi);
    return x;
}

int main(int argc, char **argv)
{
    bench_set_name("relayload");
    if (argc < 2 || strcmp(argv[1], "--help") == 0) {
        fprintf(argc < 2 ? stderr : stdout,
                "Usage: relayload CONNINFO [--rate TPS] [--seconds S] [--clients C] [--rows N]\n"
                "                 [--window-ms MS] [--warmup-ms MS] [--health] [--trace FILE]\n"
                "Runs a relay's load on demo.events (inserts 3, an author's recent events 4,\n"
                "a kind's recent events 2, updates 1) at an open rate of TPS arrivals a second\n"
                "(0: flat out), latency counted from each arrival; with --health writes each\n"
                "window's p99 (ms) into buzz_canary.health. Prints \"tps p50_ms p99_ms\n"
                "windows_p90_ms transactions\". Defaults: rate 0, 30 s, 4 clients, rows 1000000,\n"
                "window 200 ms,\n"
                "warmup 1000 ms (run, reported, not counted). --trace FILE: each window's end "
                "(ms), value (ms), transactions.\n");
        return argc < 2 ? 2 : 0;
    }
    double rate = 0;
    long seconds = 30, clients = 4, rows = 1000000, window = 200, warmup = 1000;
    int health = 0;
    FILE *trace = NULL;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--health") == 0) {
            health = 1;
            continue;
        }
        if (i + 1 >= argc)
            bench_die("%s needs a value", argv[i]);
        if (strcmp(argv[i], "--rate") == 0)
            rate = (double)arg_long("--rate", argv[i + 1], 0, 1000000);
        else if (strcmp(argv[i], "--seconds") == 0)
            seconds = arg_long("--seconds", argv[i + 1], 1, 86400);
        else if (strcmp(argv[i], "--clients") == 0)
            clients = arg_long("--clients", argv[i + 1], 1, RL_MAX_CLIENTS);
        else if (strcmp(argv[i], "--rows") == 0)
            rows = arg_long("--rows", argv[i + 1], 1, 2000000000L);
        else if (strcmp(argv[i], "--trace") == 0) {
            if ((trace = fopen(argv[i + 1], "w")) == NULL)
                bench_die("--trace %s: %s", argv[i + 1], strerror(errno));
        } else if (strcmp(argv[i], "--warmup-ms") == 0)
            warmup = arg_long("--warmup-ms", argv[i + 1], 0, 600000);
        else if (strcmp(argv[i], "--window-ms") == 0)
            window = arg_long("--window-ms", argv[i + 1], 10, 60000);
        else
            bench_die("unknown option %s (see --help)", argv[i]);
        i++;
    }
    rl_conn conns[RL_MAX_CLIENTS];
    memset(conns, 0, sizeof conns);
    for (long i = 0; i < clients; i++) {
        conns[i].c = bench_connect(argv[1]);
        bench_exec(conns[i].c, "SET application_name = 'buzz-coexist-relay'");
        prepare(conns[i].c);
        if (PQsetnonblocking(conns[i].c, 1) != 0)
            bench_die("nonblocking: %s", PQerrorMessage(conns[i].c));
    }
    PGconn *hc = NULL;
    int hc_busy = 0;
    if (health) {
        hc = bench_connect(argv[1]);
        bench_exec(hc, "SET application_name = 'buzz-coexist-health'");
        bench_health_open(hc);
        if (PQsetnonblocking(hc, 1) != 0)
            bench_die("nonblocking: %s", PQerrorMessage(hc));
    }
    rng ^= (unsigned long long)getpid() << 20;

    /* arrivals not yet on a connection, oldest first: a ring of scheduled times */
    size_t q_cap = 1 << 20, q_head = 0, q_len = 0;
    double *queue = malloc(q_cap * sizeof *queue);
    rl_vec lat = {0}, wins = {0}, cur = {0};
    if (queue == NULL)
        bench_die("out of memory");
    unsigned long long seq = 0;
    double start = bench_now_ms(), stop = start + (double)seconds * 1e3;
    double counted_from = start + (double)warmup;
    if (counted_from >= stop)
        bench_die("--warmup-ms is not shorter than --seconds");
    double next = start, window_end = start + (double)window;
    for (;;) {
        double now = bench_now_ms();
        int scheduling = now < stop;
        if (rate > 0) {
            while (scheduling && next <= now) {
                if (q_len == q_cap)
                    bench_die("more than %zu arrivals waiting: the load is far above capacity",
                              q_cap);
                queue[(q_head + q_len++) % q_cap] = next;
                next += -log(1.0 - uniform01()) / rate * 1e3;
            }
        }
        int in_flight = 0;
        for (long i = 0; i < clients; i++) {
            rl_conn *k = &conns[i];
            if (!k->busy && rate > 0 && q_len > 0) {
                send_one(k, queue[q_head], rows, &seq);
                q_head = (q_head + 1) % q_cap;
                q_len--;
            } else if (!k->busy && rate == 0 && scheduling) {
                send_one(k, now, rows, &seq);
            }
            in_flight += k->busy;
        }
        if (!scheduling && in_flight == 0 && q_len == 0)
            break;
        if (now >= window_end) {
            /* the window's p99, or the wait of the oldest arrival not yet ended */
            double oldest = q_len > 0 ? queue[q_head] : now;
            for (long i = 0; i < clients; i++)
                if (conns[i].busy && conns[i].sched_ms < oldest)
                    oldest = conns[i].sched_ms;
            double v = bench_percentile(cur.v, cur.n, 99);
            if (now - oldest > v)
                v = now - oldest;
            if (trace != NULL)
                fprintf(trace, "%.0f %.2f %zu\n", now - start, v, cur.n);
            cur.n = 0;
            if (hc != NULL && scheduling) {
                if (now - (double)window >= counted_from)
                    vec_push(&wins, v);
                if (!hc_busy) { /* a report still on its way is not queued behind */
                    char sql[128];
                    snprintf(sql, sizeof sql, BENCH_HEALTH_UPDATE, v);
                    if (!PQsendQuery(hc, sql))
                        bench_die("health: %s", PQerrorMessage(hc));
                    hc_busy = 1;
                }
            }
            window_end += (double)window;
            if (window_end <= now)
                window_end = now + (double)window;
        }
        struct pollfd fds[RL_MAX_CLIENTS + 1];
        int map[RL_MAX_CLIENTS + 1], nfds = 0;
        for (long i = 0; i < clients; i++) {
            if (!conns[i].busy)
                continue;
            fds[nfds] = (struct pollfd){.fd = PQsocket(conns[i].c), .events = POLLIN};
            if (PQflush(conns[i].c) == 1)
                fds[nfds].events |= POLLOUT;
            map[nfds++] = (int)i;
        }
        if (hc_busy) {
            fds[nfds] = (struct pollfd){.fd = PQsocket(hc), .events = POLLIN};
            map[nfds++] = -1;
        }
        double wake = window_end;
        if (rate > 0 && scheduling && next < wake)
            wake = next;
        if (scheduling && stop < wake)
            wake = stop;
        double wait = wake - bench_now_ms();
        struct timespec ts = {0, 0};
        if (wait > 0) {
            ts.tv_sec = (time_t)(wait / 1e3);
            ts.tv_nsec = (long)((wait - (double)ts.tv_sec * 1e3) * 1e6);
        }
        if (ppoll(fds, (nfds_t)nfds, &ts, NULL) < 0 && errno != EINTR)
            bench_die("poll: %s", strerror(errno));
        double done_at = bench_now_ms();
        for (int f = 0; f < nfds; f++) {
            if (fds[f].revents & POLLOUT && map[f] >= 0 && PQflush(conns[map[f]].c) < 0)
                bench_die("send: %s", PQerrorMessage(conns[map[f]].c));
            if (!(fds[f].revents & (POLLIN | POLLERR | POLLHUP)))
                continue;
            if (map[f] < 0) {
                hc_busy = !drain(hc);
                continue;
            }
            rl_conn *k = &conns[map[f]];
            if (drain(k->c)) {
                k->busy = 0;
                if (k->sched_ms < stop) {
                    vec_push(&cur, done_at - k->sched_ms);
                    if (k->sched_ms >= counted_from)
                        vec_push(&lat, done_at - k->sched_ms);
                }
            }
        }
    }
    double elapsed = (bench_now_ms() - counted_from) / 1e3;
    size_t n = lat.n;
    double p50 = bench_percentile(lat.v, lat.n, 50), p99 = bench_percentile(lat.v, lat.n, 99);
    double w90 = bench_percentile(wins.v, wins.n, 90);
    printf("%.1f %.2f %.2f %.2f %zu\n", (double)n / elapsed, p50, p99, w90, n);
    for (long i = 0; i < clients; i++)
        PQfinish(conns[i].c);
    if (hc != NULL) {
        PGresult *r; /* the last report, before the connection goes (PQgetResult waits) */
        while (hc_busy && (r = PQgetResult(hc)) != NULL)
            PQclear(r);
        PQfinish(hc);
    }
    if (trace != NULL)
        fclose(trace);
    free(queue);
    free(lat.v);
    free(wins.v);
    free(cur.v);
    return 0;
}
