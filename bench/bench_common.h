/*
 * bench_common.h - what the benchmarks share: for those that drive PostgreSQL directly
 * (throughput.c, scale.c, writepath.c) dying with a message, a monotonic clock, statements
 * that must succeed, and a private database created for the run and dropped after it; for all
 * of them (rpc.c, scrape.c, startup.c, canary.c, relayload.c too) the median, percentiles, the
 * comparator of doubles and the clock; for canary.c and relayload.c the relay's latency report.
 * A benchmark is a program run by hand or by its script, never a test: a failed statement ends
 * it with the statement's start.
 */
#ifndef BUZZ_BENCH_COMMON_H
#define BUZZ_BENCH_COMMON_H

#include <stddef.h>

#include <libpq-fe.h>

/* The name error messages start with (set once in main). */
void bench_set_name(const char *name);

void bench_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Seconds on the monotonic clock. */
double bench_now(void);

/* The load averages of /proc/loadavg as "1m 5m 15m" ("?" when unknown). */
void bench_loadavg(char *out, size_t cap);

/* qsort comparator of doubles, ascending. */
int bench_cmp_double(const void *a, const void *b);

/* The median of v[0..n) (n > 0); sorts v. */
double bench_median_doubles(double *v, int n);

/* The pct-th percentile of v[0..n) (the smallest value at least pct % of them do not exceed;
 * 0 when n is 0); sorts v. */
double bench_percentile(double *v, size_t n, int pct);

/* Milliseconds on the monotonic clock. */
double bench_now_ms(void);

/* The relay's latency report that a throttle_latency_sql reads (docs/throttling.md), as
 * bench/canary and bench/relayload write it: bench_health_open creates buzz_canary.health if
 * needed and leaves its one row at (0, now()); BENCH_HEALTH_UPDATE sets it (printf, the p99 in
 * ms). */
void bench_health_open(PGconn *c);
#define BENCH_HEALTH_UPDATE "UPDATE buzz_canary.health SET p99_ms = %.3f, at = clock_timestamp()"

/* Run a statement, or a printf-formatted one; any failure ends the benchmark. */
void bench_exec(PGconn *c, const char *sql);
void bench_execf(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The single value of a one-row query: as an integer (NULL = 0), or as text. */
long long bench_int(PGconn *c, const char *sql);
void bench_text(PGconn *c, const char *sql, char *out, size_t cap);

/* A connection with client_min_messages = warning. */
PGconn *bench_connect(const char *conninfo);

/* A private database "<prefix>_<pid>" on the server of url, with the same credentials. */
typedef struct bench_db {
    char dbname[64];
    char conninfo[1024]; /* the private database's connection string */
    PGconn *admin;       /* server-level connection (CREATE/DROP DATABASE) */
    PGconn *db;          /* connection to the private database */
} bench_db;

void bench_db_create(bench_db *d, const char *url, const char *prefix);
void bench_db_drop(bench_db *d);

#endif /* BUZZ_BENCH_COMMON_H */
