/*
 * rpc.c - the round-trip cost of buzz-backfilld's Readiness.Check and Admin.Get, against two
 * baselines measured in the same run:
 *
 *   echo   a bare nng REQ/REP echo over tcp:// in this process: a REP socket with one context
 *          and thread per client, the same request size as the real request envelope, and a
 *          reply of the same size as the real response envelope;
 *   echo, process  the same echo in a child process of its own: the daemon is a process of
 *          its own too, while the in-process echo shares this process's nng poller and task
 *          threads with the clients (one wake-up less on each side of a round trip); both are
 *          reported, the goals are taken against the in-process one as issue 26 states them;
 *   pg     one indexed PostgreSQL read over libpq (SELECT * FROM buzz_backfill.backfill WHERE
 *          id = $1, prepared), one connection per client.
 *
 * With --module (the daemon's definitions module), two more series tell where a gap over those
 * baselines is: the daemon's own PostgreSQL work for Check and Get, called through the engine
 * in this process (bf_readiness_read, bf_get; one engine per client, the daemon's registry),
 * without the daemon. Check over (echo + engine Check) is what the daemon's transport and
 * request handling add to the two things a Check cannot avoid.
 *
 * Check and Get go through the client library (libbuzz-backfill-client) with a capability
 * token over tcp://, exactly as an operator tool or the relay would call them. Each series
 * runs with 1 and with 8 concurrent clients (threads, one connection each) and reports p50,
 * p99, requests/s and the daemon's CPU per request. The whole set runs --rounds times (3),
 * the rounds interleaved (every series once per round), and the medians over the rounds are
 * compared: Check's and Get's p50 and p99 over the sum of the echo's and the pg read's, with
 * the goals of issue 26 (p50 at most 1.15 x, p99 at most 1.5 x).
 *
 * With --base-url and --base-pid (a second daemon, e.g. a build of the previous commit, on the
 * same database), Check and Get also run against it in every round, and the daemon CPU and
 * context switches (all its threads, /proc/<pid>/task) per request of the two are compared
 * side by side.
 * Finally the daemon's resident memory (VmRSS of /proc/<pid>/status): before any request
 * (idle), after the warm-up, and after --rss-requests more requests (Check and Get alternating
 * over 8 clients).
 *
 * The daemon is started by bench/rpc.sh. Output goes to stdout only.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <getopt.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>

#include "buzz/backfill/v1/admin.pb-c.h"
#include "buzz/backfill/v1/readiness.pb-c.h"
#include "buzz/backfill/v1/rpc.pb-c.h"
#include "buzz/client.h"
#include "buzz/engine.h"

#include "bench_common.h"

#define RPC_MAX_CLIENTS 8
#define RPC_WARMUP      500 /* requests per client before each measured series */

#define RPC_MAX_ROUNDS 9
#define RPC_P50_GOAL   1.15 /* issue 26: over (echo + pg), medians of the rounds */
#define RPC_P99_GOAL   1.5

typedef enum rpc_op {
    OP_ECHO_CHECK,
    OP_CHECK,
    OP_ECHO_GET,
    OP_GET,
    OP_PG,
    OP_BASE_CHECK,
    OP_BASE_GET,
    OP_MIXED,
    OP_ECHO_PROC_CHECK,
    OP_ECHO_PROC_GET,
    OP_ENGINE_CHECK,
    OP_ENGINE_GET,
    OP_COUNT
} rpc_op;

static const char *const rpc_op_names[] = {
    [OP_ECHO_CHECK] = "echo (Check sizes)",
    [OP_CHECK] = "Readiness.Check",
    [OP_ECHO_GET] = "echo (Get sizes)",
    [OP_GET] = "Admin.Get",
    [OP_PG] = "pg indexed read",
    [OP_BASE_CHECK] = "base Check",
    [OP_BASE_GET] = "base Get",
    [OP_MIXED] = "Check+Get",
    [OP_ECHO_PROC_CHECK] = "echo proc (Check)",
    [OP_ECHO_PROC_GET] = "echo proc (Get)",
    [OP_ENGINE_CHECK] = "engine Check read",
    [OP_ENGINE_GET] = "engine Get read",
};

typedef struct rpc_opts {
    const char *url;      /* the daemon's tcp:// listener */
    char *token;          /* read from --token-file */
    const char *pg;       /* conninfo of the daemon's database */
    const char *id;       /* the backfill Admin.Get reads */
    long pid;             /* the daemon */
    const char *base_url; /* a second daemon to compare with, or NULL */
    long base_pid;
    int rounds;
    long requests;      /* per measured series, over all clients */
    long rss_requests;  /* for the memory check */
    const char *only;   /* "check" or "get": that series of the daemon alone (for a profile) */
    const char *module; /* the daemon's definitions module: the engine series */
} rpc_opts;

static rpc_opts opts = {.requests = 20000, .rss_requests = 1000000, .rounds = 3};

/* Sizes of the real envelopes, which the echo reproduces. */
static size_t check_req_size, check_resp_size, get_req_size, get_resp_size;
static char echo_url[64];
static char echo_proc_url[64]; /* the same echo in a process of its own (echo_fork) */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "rpc: %s\n", what);
    exit(1);
}

/* ---- the echo server --------------------------------------------------------------------- */

static nng_socket echo_sock;

/* The reply size travels in the request's first 4 bytes. */
static void *echo_main(void *arg)
{
    (void)arg;
    nng_ctx ctx;
    nng_aio *aio;
    if (nng_ctx_open(&ctx, echo_sock) != 0 || nng_aio_alloc(&aio, NULL, NULL) != 0)
        die("echo: cannot open a context");
    for (;;) {
        nng_ctx_recv(ctx, aio);
        nng_aio_wait(aio);
        if (nng_aio_result(aio) != 0)
            break;
        nng_msg *in = nng_aio_get_msg(aio);
        uint32_t want = 0;
        if (nng_msg_len(in) >= 4)
            memcpy(&want, nng_msg_body(in), 4);
        nng_msg *out = NULL;
        if (nng_msg_alloc(&out, want) != 0)
            die("echo: out of memory");
        memset(nng_msg_body(out), 0x5a, want);
        nng_msg_free(in);
        nng_aio_set_msg(aio, out);
        nng_ctx_send(ctx, aio);
        nng_aio_wait(aio);
        if (nng_aio_result(aio) != 0)
            nng_msg_free(out);
    }
    nng_aio_free(aio);
    nng_ctx_close(ctx);
    return NULL;
}

static void echo_start(void);

/* Start the echo in a child process (before this process starts nng: no fork after), its URL
 * into echo_proc_url; the child dies with this process. */
static void echo_fork(void)
{
    int fds[2];
    if (pipe(fds) != 0)
        die("echo: pipe");
    pid_t pid = fork();
    if (pid < 0)
        die("echo: fork");
    if (pid == 0) {
        close(fds[0]);
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        echo_start();
        if (write(fds[1], echo_url, strlen(echo_url) + 1) < 0)
            _exit(1);
        close(fds[1]);
        for (;;)
            pause();
    }
    close(fds[1]);
    ssize_t n = read(fds[0], echo_proc_url, sizeof echo_proc_url - 1);
    close(fds[0]);
    if (n <= 0)
        die("echo: the child process did not start");
    echo_proc_url[n] = '\0';
}

static void echo_start(void)
{
    nng_listener l;
    nng_sockaddr sa;
    if (nng_rep0_open(&echo_sock) != 0 || nng_listen(echo_sock, "tcp://127.0.0.1:0", &l, 0) != 0 ||
        nng_listener_get_addr(l, NNG_OPT_LOCADDR, &sa) != 0)
        die("echo: cannot listen");
    snprintf(echo_url, sizeof echo_url, "tcp://127.0.0.1:%u", (unsigned)ntohs(sa.s_in.sa_port));
    for (int i = 0; i < RPC_MAX_CLIENTS; i++) {
        pthread_t th;
        if (pthread_create(&th, NULL, echo_main, NULL) != 0)
            die("echo: cannot start a thread");
        pthread_detach(th);
    }
}

/* ---- clients ----------------------------------------------------------------------------- */

typedef struct rpc_client {
    rpc_op op;
    long n;
    int64_t *lat; /* n latencies, ns */
    pthread_barrier_t *go;
    bfc_client *bfc;
    nng_socket req;
    PGconn *pg;
    bf_engine *engine;
    uint8_t *echo_buf;
    size_t echo_len;
    uint32_t echo_reply;
    bool failed;
} rpc_client;

static bool call_check(bfc_client *c)
{
    Buzz__Backfill__V1__CheckRequest req = BUZZ__BACKFILL__V1__CHECK_REQUEST__INIT;
    ProtobufCMessage *out = NULL;
    bf_err err =
        bfc_call(c, &buzz__backfill__v1__readiness__descriptor, "Check", &req.base, &out, NULL);
    if (out != NULL)
        protobuf_c_message_free_unpacked(out, NULL);
    return err == BF_OK;
}

static bool call_get(bfc_client *c)
{
    Buzz__Backfill__V1__GetRequest req = BUZZ__BACKFILL__V1__GET_REQUEST__INIT;
    req.id = (char *)opts.id;
    ProtobufCMessage *out = NULL;
    bf_err err = bfc_call(c, &buzz__backfill__v1__admin__descriptor, "Get", &req.base, &out, NULL);
    if (out != NULL)
        protobuf_c_message_free_unpacked(out, NULL);
    return err == BF_OK;
}

static bool call_echo(rpc_client *k)
{
    memcpy(k->echo_buf, &k->echo_reply, 4);
    if (nng_send(k->req, k->echo_buf, k->echo_len, 0) != 0)
        return false;
    void *reply = NULL;
    size_t len = 0;
    if (nng_recv(k->req, &reply, &len, NNG_FLAG_ALLOC) != 0)
        return false;
    nng_free(reply, len);
    return len == k->echo_reply;
}

static bool call_pg(PGconn *c)
{
    const char *params[] = {opts.id};
    PGresult *r = PQexecPrepared(c, "read", 1, params, NULL, NULL, 0);
    bool ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
    PQclear(r);
    return ok;
}

/* The registry of the daemon's module, for the engine series (NULL without --module). */
static bf_registry *engine_registry;

static bool call_engine_check(bf_engine *e)
{
    bf_gate_entry gate[32];
    int gating = 0;
    return bf_readiness_read(e, gate, (int)(sizeof gate / sizeof gate[0]), &gating) == BF_OK;
}

static bool call_engine_get(bf_engine *e)
{
    bf_backfill b;
    return bf_get(e, opts.id, &b) == BF_OK;
}

static bool rpc_once(rpc_client *k, long i)
{
    switch (k->op) {
    case OP_CHECK:
    case OP_BASE_CHECK:
        return call_check(k->bfc);
    case OP_GET:
    case OP_BASE_GET:
        return call_get(k->bfc);
    case OP_MIXED:
        return i % 2 ? call_get(k->bfc) : call_check(k->bfc);
    case OP_PG:
        return call_pg(k->pg);
    case OP_ENGINE_CHECK:
        return call_engine_check(k->engine);
    case OP_ENGINE_GET:
        return call_engine_get(k->engine);
    case OP_ECHO_CHECK:
    case OP_ECHO_GET:
    case OP_ECHO_PROC_CHECK:
    case OP_ECHO_PROC_GET:
        return call_echo(k);
    case OP_COUNT:
        break;
    }
    return false;
}

static void *client_main(void *arg)
{
    rpc_client *k = arg;
    for (long i = 0; i < RPC_WARMUP && !k->failed; i++)
        k->failed = !rpc_once(k, i);
    pthread_barrier_wait(k->go);
    for (long i = 0; i < k->n && !k->failed; i++) {
        int64_t t0 = now_ns();
        k->failed = !rpc_once(k, i);
        if (k->lat != NULL)
            k->lat[i] = now_ns() - t0;
    }
    return NULL;
}

static void client_open(rpc_client *k)
{
    char diag[160] = "";
    switch (k->op) {
    case OP_CHECK:
    case OP_GET:
    case OP_MIXED:
    case OP_BASE_CHECK:
    case OP_BASE_GET: {
        bfc_options o = {.token = opts.token, .timeout_ms = 30000, .retries = -1};
        bool base = k->op == OP_BASE_CHECK || k->op == OP_BASE_GET;
        if (bfc_open(&k->bfc, base ? opts.base_url : opts.url, &o, diag, sizeof diag) != BF_OK)
            die(diag);
        break;
    }
    case OP_PG:
        k->pg = PQconnectdb(opts.pg);
        if (PQstatus(k->pg) != CONNECTION_OK)
            die("cannot connect to PostgreSQL");
        PQclear(PQprepare(k->pg, "read", "SELECT * FROM buzz_backfill.backfill WHERE id = $1", 1,
                          NULL));
        break;
    case OP_ENGINE_CHECK:
    case OP_ENGINE_GET: {
        bf_config cfg = {.conninfo = opts.pg};
        if (bf_engine_open(&k->engine, &cfg, engine_registry) != BF_OK)
            die("cannot open an engine on the daemon's database");
        break;
    }
    case OP_ECHO_CHECK:
    case OP_ECHO_GET:
    case OP_ECHO_PROC_CHECK:
    case OP_ECHO_PROC_GET: {
        bool proc = k->op == OP_ECHO_PROC_CHECK || k->op == OP_ECHO_PROC_GET;
        bool check = k->op == OP_ECHO_CHECK || k->op == OP_ECHO_PROC_CHECK;
        if (nng_req0_open(&k->req) != 0 ||
            nng_dial(k->req, proc ? echo_proc_url : echo_url, NULL, 0) != 0)
            die("cannot dial the echo server");
        nng_socket_set_ms(k->req, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
        k->echo_len = check ? check_req_size : get_req_size;
        k->echo_reply = (uint32_t)(check ? check_resp_size : get_resp_size);
        k->echo_buf = calloc(1, k->echo_len);
        break;
    }
    case OP_COUNT:
        break;
    }
}

static void client_close(rpc_client *k)
{
    bfc_close(k->bfc);
    if (k->pg != NULL)
        PQfinish(k->pg);
    bf_engine_close(k->engine);
    if (k->echo_buf != NULL) {
        nng_close(k->req);
        free(k->echo_buf);
    }
    free(k->lat);
}

typedef struct rpc_result {
    double p50_us, p99_us, rps;
    double cpu_us; /* the serving daemon's CPU per request; -1 when not measured */
    double cs;     /* the serving daemon's context switches per request (all its threads) */
} rpc_result;

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Run total requests of op over nclients; latencies kept unless quiet. */
static rpc_result run_series(rpc_op op, int nclients, long total, bool keep)
{
    rpc_client k[RPC_MAX_CLIENTS];
    memset(k, 0, sizeof k);
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, (unsigned)nclients + 1);
    long per = total / nclients;
    pthread_t th[RPC_MAX_CLIENTS];
    for (int i = 0; i < nclients; i++) {
        k[i].op = op;
        k[i].n = per;
        k[i].go = &go;
        k[i].lat = keep ? calloc((size_t)per, sizeof(int64_t)) : NULL;
        client_open(&k[i]);
        if (pthread_create(&th[i], NULL, client_main, &k[i]) != 0)
            die("cannot start a client thread");
    }
    pthread_barrier_wait(&go);
    int64_t t0 = now_ns();
    for (int i = 0; i < nclients; i++)
        pthread_join(th[i], NULL);
    int64_t wall = now_ns() - t0;
    pthread_barrier_destroy(&go);
    rpc_result res = {0, 0, (double)(per * nclients) / ((double)wall / 1e9), -1, -1};
    int64_t *all = keep ? malloc((size_t)(per * nclients) * sizeof *all) : NULL;
    for (int i = 0; i < nclients; i++) {
        if (k[i].failed) {
            fprintf(stderr, "rpc: %s failed: %s %s\n", rpc_op_names[op],
                    k[i].bfc ? bfc_last_status(k[i].bfc)->message : "",
                    k[i].bfc ? bfc_last_status(k[i].bfc)->transport_detail : "");
            exit(1);
        }
        if (keep)
            memcpy(all + (long)i * per, k[i].lat, (size_t)per * sizeof *all);
        client_close(&k[i]);
    }
    if (keep) {
        long n = per * nclients;
        qsort(all, (size_t)n, sizeof *all, cmp_i64);
        res.p50_us = (double)all[n / 2] / 1000.0;
        res.p99_us = (double)all[(n * 99) / 100] / 1000.0;
        free(all);
    }
    return res;
}

/* ---- sizes, memory ----------------------------------------------------------------------- */

/* The packed size of the envelopes the client sends and the server answers for one method. */
static void envelope_sizes(const ProtobufCMessage *req, const ProtobufCMessage *resp,
                           const char *method, size_t *req_size, size_t *resp_size)
{
    uint8_t id[16] = {0};
    uint8_t body[4096];
    Buzz__Backfill__V1__RequestEnvelope env = BUZZ__BACKFILL__V1__REQUEST_ENVELOPE__INIT;
    env.method = (char *)method;
    env.has_request_id = true;
    env.request_id.data = id;
    env.request_id.len = sizeof id;
    env.token = opts.token;
    env.has_body = true;
    env.body.data = body;
    env.body.len = protobuf_c_message_pack(req, body);
    env.has_deadline_ms = true;
    env.deadline_ms = 30000;
    *req_size = buzz__backfill__v1__request_envelope__get_packed_size(&env);
    Buzz__Backfill__V1__Status st = BUZZ__BACKFILL__V1__STATUS__INIT;
    Buzz__Backfill__V1__ResponseEnvelope out = BUZZ__BACKFILL__V1__RESPONSE_ENVELOPE__INIT;
    out.status = &st;
    out.has_body = true;
    out.body.len = protobuf_c_message_get_packed_size(resp);
    out.body.data = body;
    out.has_request_id = true;
    out.request_id = env.request_id;
    *resp_size = buzz__backfill__v1__response_envelope__get_packed_size(&out);
}

/* Learn the real message sizes from one call of each method. */
static void learn_sizes(void)
{
    bfc_client *c = NULL;
    char diag[160] = "";
    bfc_options o = {.token = opts.token, .timeout_ms = 30000, .retries = -1};
    /* the daemon may still be starting: wait up to 30 s for its listener */
    for (int i = 0; bfc_open(&c, opts.url, &o, diag, sizeof diag) != BF_OK; i++) {
        if (i == 300)
            die(diag);
        usleep(100000);
    }
    Buzz__Backfill__V1__CheckRequest creq = BUZZ__BACKFILL__V1__CHECK_REQUEST__INIT;
    ProtobufCMessage *out = NULL;
    if (bfc_call(c, &buzz__backfill__v1__readiness__descriptor, "Check", &creq.base, &out, NULL) !=
        BF_OK)
        die("Readiness.Check failed (token, url?)");
    envelope_sizes(&creq.base, out, "buzz.backfill.v1.Readiness.Check", &check_req_size,
                   &check_resp_size);
    protobuf_c_message_free_unpacked(out, NULL);
    Buzz__Backfill__V1__GetRequest greq = BUZZ__BACKFILL__V1__GET_REQUEST__INIT;
    greq.id = (char *)opts.id;
    out = NULL;
    if (bfc_call(c, &buzz__backfill__v1__admin__descriptor, "Get", &greq.base, &out, NULL) != BF_OK)
        die("Admin.Get failed (id?)");
    envelope_sizes(&greq.base, out, "buzz.backfill.v1.Admin.Get", &get_req_size, &get_resp_size);
    protobuf_c_message_free_unpacked(out, NULL);
    bfc_close(c);
}

/* utime + stime of a process, in clock ticks; -1 when unreadable */
static long long cpu_ticks(long pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may contain spaces */
    unsigned long long ut = 0, st = 0;
    if (p == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (long long)(ut + st);
}

/* CPU ticks of the daemon, and of its PostgreSQL sessions (application_name buzz-backfill) when
 * the server runs on this host. rpc.sh gives a base daemon a database of its own, named like
 * this one with "_base" after it: its sessions are looked for there. */
static void server_ticks(PGconn *mon, long pid, long long *daemon, long long *backends)
{
    *daemon = cpu_ticks(pid);
    *backends = 0;
    PGresult *r = PQexec(mon, "SELECT pid FROM pg_stat_activity WHERE datname IN"
                              " (current_database(), current_database() || '_base')"
                              " AND application_name LIKE 'buzz-backfill%'");
    for (int i = 0; PQresultStatus(r) == PGRES_TUPLES_OK && i < PQntuples(r); i++) {
        long long t = cpu_ticks(strtol(PQgetvalue(r, i, 0), NULL, 10));
        if (t < 0) {
            *backends = -1; /* another host */
            break;
        }
        *backends += t;
    }
    PQclear(r);
}

/* Context switches (voluntary and not) of every thread of a process; -1 when unreadable. */
static long long ctx_switches(long pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/task", pid);
    DIR *dir = opendir(path);
    if (dir == NULL)
        return -1;
    long long total = 0;
    struct dirent *de;
    while ((de = readdir(dir)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char status[400], line[128];
        snprintf(status, sizeof status, "/proc/%ld/task/%s/status", pid, de->d_name);
        FILE *f = fopen(status, "r");
        if (f == NULL)
            continue; /* the thread ended */
        long long n = 0;
        while (fgets(line, sizeof line, f) != NULL)
            if (sscanf(line, "voluntary_ctxt_switches: %lld", &n) == 1 ||
                sscanf(line, "nonvoluntary_ctxt_switches: %lld", &n) == 1)
                total += n;
        fclose(f);
    }
    closedir(dir);
    return total;
}

static long rss_kib(void)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%ld/status", opts.pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    long kib = -1;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

/* ---- main -------------------------------------------------------------------------------- */

static char *read_token(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        die("cannot read the token file");
    static char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    return buf;
}

/* "0.52 0.61 0.70": the load average now, for every figure (the machine may be shared). */
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

static void usage(void)
{
    printf("usage: rpc --url tcp://HOST:PORT --token-file FILE --pg CONNINFO --id STABLE_ID\n"
           "           --pid DAEMON_PID [--requests N] [--rss-requests N] [--rounds N]\n"
           "           [--base-url tcp://HOST:PORT --base-pid PID] [--only check|get]\n"
           "           [--module DEFINITIONS.so]\n"
           "--only: the daemon serves that series alone (the echo and the pg read still run, in\n"
           "this process and PostgreSQL), so a profile of the daemon is one kind of call\n"
           "--module: the daemon's definitions module; adds the engine series (the daemon's\n"
           "own PostgreSQL work for Check and Get, called in this process)\n");
}

static void parse(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"url", required_argument, NULL, 'u'},
        {"token-file", required_argument, NULL, 't'},
        {"pg", required_argument, NULL, 'p'},
        {"id", required_argument, NULL, 'i'},
        {"pid", required_argument, NULL, 'P'},
        {"requests", required_argument, NULL, 'n'},
        {"rss-requests", required_argument, NULL, 'r'},
        {"rounds", required_argument, NULL, 'R'},
        {"base-url", required_argument, NULL, 'b'},
        {"base-pid", required_argument, NULL, 'B'},
        {"only", required_argument, NULL, 'O'},
        {"module", required_argument, NULL, 'M'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'u':
            opts.url = optarg;
            break;
        case 't':
            opts.token = read_token(optarg);
            break;
        case 'p':
            opts.pg = optarg;
            break;
        case 'i':
            opts.id = optarg;
            break;
        case 'P':
            opts.pid = strtol(optarg, NULL, 10);
            break;
        case 'n':
            opts.requests = strtol(optarg, NULL, 10);
            break;
        case 'r':
            opts.rss_requests = strtol(optarg, NULL, 10);
            break;
        case 'R':
            opts.rounds = (int)strtol(optarg, NULL, 10);
            break;
        case 'b':
            opts.base_url = optarg;
            break;
        case 'B':
            opts.base_pid = strtol(optarg, NULL, 10);
            break;
        case 'O':
            opts.only = optarg;
            break;
        case 'M':
            opts.module = optarg;
            break;
        case 'h':
            usage();
            exit(0);
        default:
            usage();
            exit(2);
        }
    }
    if (!opts.url || !opts.token || !opts.pg || !opts.id || opts.pid <= 0 ||
        opts.requests < RPC_MAX_CLIENTS || opts.rss_requests < 0 || opts.rounds < 1 ||
        opts.rounds > RPC_MAX_ROUNDS || (opts.base_url != NULL) != (opts.base_pid > 0) ||
        (opts.only != NULL && strcmp(opts.only, "check") != 0 && strcmp(opts.only, "get") != 0) ||
        (opts.only != NULL && opts.base_url != NULL)) {
        usage();
        exit(2);
    }
}

#define RPC_CLIENT_COUNTS 2
static const int rpc_clients[RPC_CLIENT_COUNTS] = {1, 8};

/* rounds[round][clients index][op] */
static rpc_result rounds[RPC_MAX_ROUNDS][RPC_CLIENT_COUNTS][OP_COUNT];

/* The median over the rounds of one figure of one series. */
static double series_median(size_t ci, rpc_op op, size_t field)
{
    double v[RPC_MAX_ROUNDS];
    for (int k = 0; k < opts.rounds; k++) {
        const rpc_result *r = &rounds[k][ci][op];
        v[k] = field == 0   ? r->p50_us
               : field == 1 ? r->p99_us
               : field == 2 ? r->rps
               : field == 3 ? r->cpu_us
                            : r->cs;
    }
    return bench_median_doubles(v, opts.rounds);
}

/* One round: every series once, printed as it ends. */
static void run_round(int round, PGconn *mon, const rpc_op *ops, size_t nops)
{
    double tick_us = 1e6 / (double)sysconf(_SC_CLK_TCK);
    for (size_t ci = 0; ci < RPC_CLIENT_COUNTS; ci++)
        for (size_t oi = 0; oi < nops; oi++) {
            rpc_op op = ops[oi];
            bool base = op == OP_BASE_CHECK || op == OP_BASE_GET;
            long pid = base ? opts.base_pid : opts.pid;
            long long d0, b0, d1, b1;
            server_ticks(mon, pid, &d0, &b0);
            long long cs0 = ctx_switches(pid);
            rpc_result *r = &rounds[round][ci][op];
            *r = run_series(op, rpc_clients[ci], opts.requests, true);
            long long cs1 = ctx_switches(pid);
            server_ticks(mon, pid, &d1, &b1);
            printf("%5d %-20s %8d %10.1f %10.1f %12.0f", round + 1, rpc_op_names[op],
                   rpc_clients[ci], r->p50_us, r->p99_us, r->rps);
            if (op == OP_CHECK || op == OP_GET || base) { /* server CPU per request */
                r->cpu_us =
                    d0 >= 0 && d1 >= 0 ? (double)(d1 - d0) * tick_us / (double)opts.requests : -1.0;
                r->cs = cs0 >= 0 && cs1 >= 0 ? (double)(cs1 - cs0) / (double)opts.requests : -1.0;
                printf(" %14.1f", r->cpu_us);
                printf(" %14.1f", b0 >= 0 && b1 >= 0
                                      ? (double)(b1 - b0) * tick_us / (double)opts.requests
                                      : -1.0);
                printf(" %10.2f", r->cs);
            }
            printf("   (load %s)\n", load_average());
            fflush(stdout);
        }
}

/* One method at one client count: p50 and p99 over the sum of an echo's and a read's, medians
 * of the rounds. With read OP_PG these are the goals of issue 26: returns whether both are
 * met; over another read only the ratios are printed. */
static bool report_ratio(size_t ci, rpc_op op, rpc_op echo, rpc_op read)
{
    double p50 = series_median(ci, op, 0), p99 = series_median(ci, op, 1);
    double e50 = series_median(ci, echo, 0), e99 = series_median(ci, echo, 1);
    double g50 = series_median(ci, read, 0), g99 = series_median(ci, read, 1);
    double r50 = p50 / (e50 + g50), r99 = p99 / (e99 + g99);
    bool met = r50 <= RPC_P50_GOAL && r99 <= RPC_P99_GOAL;
    const char *name = read == OP_PG ? "pg" : "engine";
    printf("  %-16s %d client%s: p50 %.1f / (echo %.1f + %s %.1f) = %.2f x", rpc_op_names[op],
           rpc_clients[ci], rpc_clients[ci] == 1 ? " " : "s", p50, e50, name, g50, r50);
    if (read == OP_PG)
        printf(" (goal %.2f)", RPC_P50_GOAL);
    printf("; p99 %.1f / (%.1f + %.1f) = %.2f x", p99, e99, g99, r99);
    if (read == OP_PG)
        printf(" (goal %.2f): %s", RPC_P99_GOAL, met ? "met" : "NOT met");
    printf("\n");
    return met;
}

/* report_ratio() of Check (when check) and Get (when get) at every client count, over the
 * given echoes and reads; returns how many met the goals. */
static int report_ratios(bool check, bool get, rpc_op echo_check, rpc_op echo_get,
                         rpc_op read_check, rpc_op read_get)
{
    int met = 0;
    for (size_t ci = 0; ci < RPC_CLIENT_COUNTS; ci++) {
        met += check ? report_ratio(ci, OP_CHECK, echo_check, read_check) : 0;
        met += get ? report_ratio(ci, OP_GET, echo_get, read_get) : 0;
    }
    return met;
}

int main(int argc, char **argv)
{
    parse(argc, argv);
    long rss_idle = rss_kib();
    echo_fork();
    echo_start();
    learn_sizes();
    printf("daemon %s (pid %ld); echo %s, in a process of its own %s; pg read: SELECT * FROM "
           "buzz_backfill.backfill WHERE "
           "id = $1\n",
           opts.url, opts.pid, echo_url, echo_proc_url);
    if (opts.base_url != NULL)
        printf("base daemon %s (pid %ld): Check and Get against it in every round\n", opts.base_url,
               opts.base_pid);
    printf("message sizes (bytes): Check request %zu, response %zu; Get request %zu, "
           "response %zu\n",
           check_req_size, check_resp_size, get_req_size, get_resp_size);
    printf("%ld requests per series (after %d warm-up requests per client), %d rounds\n\n",
           opts.requests, RPC_WARMUP, opts.rounds);

    rpc_op ops[OP_COUNT];
    size_t nops = 0;
    bool check = opts.only == NULL || strcmp(opts.only, "check") == 0;
    bool get = opts.only == NULL || strcmp(opts.only, "get") == 0;
    if (check) {
        ops[nops++] = OP_ECHO_CHECK;
        ops[nops++] = OP_ECHO_PROC_CHECK;
        ops[nops++] = OP_CHECK;
    }
    if (check && opts.base_url != NULL)
        ops[nops++] = OP_BASE_CHECK;
    if (get) {
        ops[nops++] = OP_ECHO_GET;
        ops[nops++] = OP_ECHO_PROC_GET;
        ops[nops++] = OP_GET;
    }
    if (get && opts.base_url != NULL)
        ops[nops++] = OP_BASE_GET;
    ops[nops++] = OP_PG;
    if (opts.module != NULL) {
        char diag[256] = "";
        if (bf_registry_new(&engine_registry) != BF_OK ||
            bf_registry_load_module(engine_registry, opts.module, diag, sizeof diag) != BF_OK) {
            fprintf(stderr, "rpc: cannot load %s: %s\n", opts.module, diag);
            exit(1);
        }
        if (check)
            ops[nops++] = OP_ENGINE_CHECK;
        if (get)
            ops[nops++] = OP_ENGINE_GET;
    }
    PGconn *mon = PQconnectdb(opts.pg);
    if (PQstatus(mon) != CONNECTION_OK)
        die("cannot connect to PostgreSQL");
    printf("%5s %-20s %8s %10s %10s %12s %14s %14s %10s\n", "round", "series", "clients", "p50 us",
           "p99 us", "requests/s", "daemon cpu us", "pg cpu us", "daemon cs");
    for (int k = 0; k < opts.rounds; k++)
        run_round(k, mon, ops, nops);
    PQfinish(mon);
    long rss_warm = rss_kib();

    printf("\nmedians of %d rounds\n", opts.rounds);
    printf("%-20s %8s %10s %10s %12s %14s %10s\n", "series", "clients", "p50 us", "p99 us",
           "requests/s", "daemon cpu us", "daemon cs");
    for (size_t ci = 0; ci < RPC_CLIENT_COUNTS; ci++)
        for (size_t oi = 0; oi < nops; oi++) {
            rpc_op op = ops[oi];
            printf("%-20s %8d %10.1f %10.1f %12.0f", rpc_op_names[op], rpc_clients[ci],
                   series_median(ci, op, 0), series_median(ci, op, 1), series_median(ci, op, 2));
            if (op == OP_CHECK || op == OP_GET || op == OP_BASE_CHECK || op == OP_BASE_GET)
                printf(" %14.1f %10.2f", series_median(ci, op, 3), series_median(ci, op, 4));
            printf("\n");
        }

    printf("\nratios over (echo + pg), medians of %d rounds (load %s)\n", opts.rounds,
           load_average());
    int met = report_ratios(check, get, OP_ECHO_CHECK, OP_ECHO_GET, OP_PG, OP_PG);
    printf("  goals met: %d of %d\n", met, ((int)check + (int)get) * RPC_CLIENT_COUNTS);
    printf("\nthe same over (echo in a process of its own + pg): like for like, the daemon being"
           " a process of its own\n");
    (void)report_ratios(check, get, OP_ECHO_PROC_CHECK, OP_ECHO_PROC_GET, OP_PG, OP_PG);
    if (engine_registry != NULL) {
        printf("\nover (echo + the daemon's own PostgreSQL work through the engine): what the"
               " daemon's transport and request handling add\n");
        (void)report_ratios(check, get, OP_ECHO_CHECK, OP_ECHO_GET, OP_ENGINE_CHECK, OP_ENGINE_GET);
    }
    if (opts.base_url != NULL) {
        printf("\ndaemon CPU per request against the base daemon, medians of %d rounds\n",
               opts.rounds);
        for (size_t ci = 0; ci < RPC_CLIENT_COUNTS; ci++) {
            double c = series_median(ci, OP_CHECK, 3), bc = series_median(ci, OP_BASE_CHECK, 3);
            double g = series_median(ci, OP_GET, 3), bg = series_median(ci, OP_BASE_GET, 3);
            printf("  %d client%s: Check %.1f us vs base %.1f us (%.2f x); Get %.1f us vs base"
                   " %.1f us (%.2f x)\n",
                   rpc_clients[ci], rpc_clients[ci] == 1 ? " " : "s", c, bc, c / bc, g, bg, g / bg);
            printf("             context switches per request: Check %.2f vs base %.2f; Get %.2f"
                   " vs base %.2f\n",
                   series_median(ci, OP_CHECK, 4), series_median(ci, OP_BASE_CHECK, 4),
                   series_median(ci, OP_GET, 4), series_median(ci, OP_BASE_GET, 4));
        }
    }

    if (opts.rss_requests > 0) {
        int64_t t0 = now_ns();
        rpc_result m = run_series(OP_MIXED, RPC_MAX_CLIENTS, opts.rss_requests, false);
        double secs = (double)(now_ns() - t0) / 1e9;
        long rss_after = rss_kib();
        printf("\ndaemon memory (VmRSS): idle %ld KiB, after the series above %ld KiB, after %ld"
               " more requests (Check and Get, 8 clients, %.0f s, %.0f requests/s) %ld KiB:"
               " growth %+ld KiB (%+.1f%%) %s\n",
               rss_idle, rss_warm, opts.rss_requests, secs, m.rps, rss_after, rss_after - rss_warm,
               100.0 * (double)(rss_after - rss_warm) / (double)rss_warm,
               rss_after - rss_warm <= rss_warm / 10 ? "(stable)" : "(GROWS)");
    }
    nng_close(echo_sock);
    bf_registry_free(engine_registry);
    return 0;
}
