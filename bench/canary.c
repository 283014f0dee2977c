/*
 * canary.c - the relay's latency as the relay would report it, for bench/coexist.sh's
 * latency-target phase: one session runs a small read every --every-ms (--probe accounts: a
 * pgbench_accounts row; relay: an author's recent events in demo.events, as a relay's client
 * asks), times it, and every --window-ms writes the window's p99 (ms) and its end into
 * buzz_canary.health, the one-row table a throttle_custom_sql or throttle_latency_sql reads
 * (docs/throttling.md). On SIGTERM or SIGINT it prints the p99 of every probe it ran and the
 * 90th percentile of its windows' values, in ms, and exits.
 *
 * Usage: canary CONNINFO [--every-ms N] [--window-ms N] [--probe accounts|relay]
 *        (defaults 10, 1000 and accounts)
 */
#include <errno.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_common.h"

#define CANARY_MAX_PROBES  1000000
#define CANARY_MAX_WINDOWS 100000

static volatile sig_atomic_t stopping;

static void on_signal(int sig)
{
    (void)sig;
    stopping = 1;
}

static int run(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
    if (!ok)
        fprintf(stderr, "canary: %s", PQerrorMessage(c));
    PQclear(r);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0) {
        fprintf(argc < 2 ? stderr : stdout,
                "Usage: canary CONNINFO [--every-ms N] [--window-ms N] [--probe accounts|relay]\n"
                "Times a small read every N ms, writes each window's p99 into "
                "buzz_canary.health, prints the p99 of all probes and the 90th percentile of "
                "the windows' values on SIGTERM.\n");
        return argc < 2 ? 2 : 0;
    }
    long every = 10, window = 1000;
    int relay = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--probe") == 0) {
            if (strcmp(argv[i + 1], "relay") != 0 && strcmp(argv[i + 1], "accounts") != 0) {
                fprintf(stderr, "canary: --probe is accounts or relay\n");
                return 2;
            }
            relay = strcmp(argv[i + 1], "relay") == 0;
            continue;
        }
        char *end = NULL;
        errno = 0;
        long v = strtol(argv[i + 1], &end, 10);
        if (errno || *end || v < 1 || v > 600000) {
            fprintf(stderr, "canary: %s: not a number of ms\n", argv[i]);
            return 2;
        }
        if (strcmp(argv[i], "--every-ms") == 0)
            every = v;
        else if (strcmp(argv[i], "--window-ms") == 0)
            window = v;
        else {
            fprintf(stderr, "canary: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    PGconn *c = PQconnectdb(argv[1]);
    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "canary: %s", PQerrorMessage(c));
        return 1;
    }
    if (!run(c, "SET application_name = 'buzz-coexist-canary'")) {
        PQfinish(c);
        return 1;
    }
    bench_health_open(c);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    double *all = malloc(CANARY_MAX_PROBES * sizeof *all);
    double *wins = malloc(CANARY_MAX_WINDOWS * sizeof *wins);
    size_t n_wins = 0;
    if (all == NULL || wins == NULL) {
        fprintf(stderr, "canary: out of memory\n");
        return 1;
    }
    size_t n = 0, window_start = 0;
    double next = bench_now_ms(), window_end = next + (double)window;
    unsigned seed = 1;
    while (!stopping && n < CANARY_MAX_PROBES) {
        char sql[256];
        if (relay)
            snprintf(sql, sizeof sql,
                     "SELECT id, created_at, kind FROM demo.events WHERE pubkey ="
                     " sha256(convert_to('author:%d', 'UTF8')) ORDER BY created_at DESC LIMIT 20",
                     (int)(rand_r(&seed) % 5000));
        else
            snprintf(sql, sizeof sql, "SELECT abalance FROM pgbench_accounts WHERE aid = %d",
                     1 + (int)(rand_r(&seed) % 1000000));
        double t0 = bench_now_ms();
        if (!run(c, sql))
            break;
        all[n++] = bench_now_ms() - t0;
        if (bench_now_ms() >= window_end) {
            char upd[128];
            /* sorts the window's own probes only: later windows begin after them */
            double v = bench_percentile(all + window_start, n - window_start, 99);
            snprintf(upd, sizeof upd, BENCH_HEALTH_UPDATE, v);
            if (!run(c, upd))
                break;
            if (n_wins < CANARY_MAX_WINDOWS)
                wins[n_wins++] = v;
            window_start = n;
            window_end = bench_now_ms() + (double)window;
        }
        next += (double)every;
        long long wait_ns = (long long)((next - bench_now_ms()) * 1e6);
        if (wait_ns > 0) {
            struct timespec ts = {(time_t)(wait_ns / 1000000000), (long)(wait_ns % 1000000000)};
            nanosleep(&ts, NULL);
        } else {
            next = bench_now_ms(); /* late: do not burst to catch up */
        }
    }
    printf("%.2f %.2f\n", bench_percentile(all, n, 99), bench_percentile(wins, n_wins, 90));
    free(all);
    free(wins);
    PQfinish(c);
    return 0;
}
