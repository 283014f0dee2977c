/*
 * bench_common.c - the helpers the PostgreSQL benchmarks share (bench_common.h).
 */
#include "bench_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *bench_name = "bench";

void bench_set_name(const char *name)
{
    bench_name = name;
}

void bench_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fprintf(stderr, "%s: ", bench_name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void bench_loadavg(char *out, size_t cap)
{
    snprintf(out, cap, "?");
    FILE *f = fopen("/proc/loadavg", "r");
    if (f == NULL)
        return;
    double a = 0, b = 0, c = 0;
    if (fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3)
        snprintf(out, cap, "%.2f %.2f %.2f", a, b, c);
    fclose(f);
}

int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median_doubles(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

double bench_percentile(double *v, size_t n, int pct)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, bench_cmp_double);
    return v[(n * (size_t)pct + 99) / 100 - 1];
}

double bench_now_ms(void)
{
    return bench_now() * 1e3;
}

void bench_health_open(PGconn *c)
{
    bench_exec(c, "CREATE SCHEMA IF NOT EXISTS buzz_canary;"
                  "CREATE TABLE IF NOT EXISTS buzz_canary.health"
                  " (p99_ms double precision NOT NULL, at timestamptz NOT NULL);"
                  "TRUNCATE buzz_canary.health;"
                  "INSERT INTO buzz_canary.health VALUES (0, now())");
}

void bench_exec(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        bench_die("SQL failed: %s  (%.160s)", PQerrorMessage(c), sql);
    PQclear(r);
}

void bench_execf(PGconn *c, const char *fmt, ...)
{
    char sql[8192];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof sql)
        bench_die("statement too long");
    bench_exec(c, sql);
}

static PGresult *bench_one_row(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
        bench_die("query failed: %s  (%.160s)", PQerrorMessage(c), sql);
    return r;
}

long long bench_int(PGconn *c, const char *sql)
{
    PGresult *r = bench_one_row(c, sql);
    long long v = PQgetisnull(r, 0, 0) ? 0 : strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

void bench_text(PGconn *c, const char *sql, char *out, size_t cap)
{
    PGresult *r = bench_one_row(c, sql);
    snprintf(out, cap, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
}

PGconn *bench_connect(const char *conninfo)
{
    PGconn *c = PQconnectdb(conninfo);
    if (PQstatus(c) != CONNECTION_OK)
        bench_die("cannot connect: %s", PQerrorMessage(c));
    bench_exec(c, "SET client_min_messages = warning");
    return c;
}

void bench_db_create(bench_db *d, const char *url, const char *prefix)
{
    snprintf(d->dbname, sizeof d->dbname, "%s_%ld", prefix, (long)getpid());
    d->admin = bench_connect(url);
    bench_execf(d->admin, "DROP DATABASE IF EXISTS %s", d->dbname);
    bench_execf(d->admin, "CREATE DATABASE %s TEMPLATE template0", d->dbname);
    /* the same server and credentials, another database: every keyword but dbname */
    PQconninfoOption *opts = PQconninfoParse(url, NULL);
    if (opts == NULL)
        bench_die("cannot parse the connection URL");
    size_t off = 0;
    for (PQconninfoOption *o = opts; o->keyword != NULL; o++) {
        if (o->val == NULL || strcmp(o->keyword, "dbname") == 0)
            continue;
        off += (size_t)snprintf(d->conninfo + off, sizeof d->conninfo - off, "%s='%s' ", o->keyword,
                                o->val);
        if (off >= sizeof d->conninfo)
            bench_die("connection string too long");
    }
    PQconninfoFree(opts);
    snprintf(d->conninfo + off, sizeof d->conninfo - off, "dbname='%s'", d->dbname);
    d->db = bench_connect(d->conninfo);
}

void bench_db_drop(bench_db *d)
{
    if (d->db != NULL)
        PQfinish(d->db);
    d->db = NULL;
    if (d->admin != NULL) {
        bench_execf(d->admin, "DROP DATABASE IF EXISTS %s WITH (FORCE)", d->dbname);
        PQfinish(d->admin);
    }
    d->admin = NULL;
}
