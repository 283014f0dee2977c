/*
 * readiness.c - the Readiness service: Check, derived from PostgreSQL on every call.
 *
 * Design notes: three components, each READY, NOT_READY or UNKNOWN_STATUS with a reason:
 *   database   reachable (UNKNOWN when it cannot be reached: we do not know, we do not guess)
 *   schema     bf_schema_check() (with the gate in one round trip: bf_readiness_read()): the
 *              engine schema this binary needs is installed
 *   backfills  automatic mode: bf_gate() lists the required IDs of this process's registry that
 *              are not completed (an ID without a row gates too); manual mode adds no gate.
 * ready is true only when all three are READY. The optional wait (at most 30 s, and never past
 * the call's deadline) LISTENs on the session's connection before the first read, so no change
 * can slip between read and wait; a notification, or a one-second tick for changes nobody
 * announces (schema, database coming back), only wakes the loop, which reads PostgreSQL again
 * and answers as soon as the answer differs from the first read or is ready.
 *
 * Threads. On a transport that waits on sockets itself (tcp://, ipc://: call->may_defer), the
 * Check is a readiness_job that holds no thread: each read is sent and resumed when PostgreSQL
 * has answered, and the wait is an epoll set of the session's socket and a timerfd (the tick),
 * resumed when either is readable; the transport caps how many such requests there are
 * (SRV_TRANSPORT_DEFERRED). Elsewhere (tls+tcp://, a database that could not be opened, past
 * that cap) the Check runs on its thread, and a wait holds it: at most
 * ctx->readiness_waiters_max such waits run at once; others are cut to one tick, which keeps
 * looping clients paced without starving the admin API.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "buzz/backfill/v1/token.pb-c.h"
#include "log.h"
#include "srv.h"

#define READINESS_WAIT_MAX_MS 30000
#define READINESS_TICK_MS     1000
#define READINESS_GATING_MAX  32 /* gating IDs listed in one answer; the reason counts all */
#define READINESS_REASON_MAX  200

enum { COMP_DATABASE, COMP_SCHEMA, COMP_BACKFILLS, COMP_COUNT };

static const char *const readiness_names[COMP_COUNT] = {"database", "schema", "backfills"};

typedef Buzz__Backfill__V1__ComponentStatus comp_status;
#define ST_READY   BUZZ__BACKFILL__V1__COMPONENT_STATUS__READY
#define ST_NOT     BUZZ__BACKFILL__V1__COMPONENT_STATUS__NOT_READY
#define ST_UNKNOWN BUZZ__BACKFILL__V1__COMPONENT_STATUS__UNKNOWN_STATUS

/* One computed answer with storage for everything the response points to. */
typedef struct readiness_answer {
    Buzz__Backfill__V1__CheckResponse resp;
    Buzz__Backfill__V1__Component comps[COMP_COUNT];
    Buzz__Backfill__V1__Component *comp_ptrs[COMP_COUNT];
    char reasons[COMP_COUNT][READINESS_REASON_MAX];
    Buzz__Backfill__V1__GatingBackfill gating[READINESS_GATING_MAX];
    Buzz__Backfill__V1__GatingBackfill *gating_ptrs[READINESS_GATING_MAX];
    bf_gate_entry rows[READINESS_GATING_MAX];
    int gating_total;
    uint64_t fingerprint;
} readiness_answer;

static int64_t readiness_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void readiness_set(readiness_answer *a, int comp, comp_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void readiness_set(readiness_answer *a, int comp, comp_status st, const char *fmt, ...)
{
    Buzz__Backfill__V1__Component *c = &a->comps[comp];
    c->has_status = true;
    c->status = st;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(a->reasons[comp], sizeof a->reasons[comp], fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof a->reasons[comp])
        memcpy(a->reasons[comp] + sizeof a->reasons[comp] - 4, "...", 4);
    c->reason = a->reasons[comp][0] ? a->reasons[comp] : NULL;
}

static bool readiness_transient(bf_err err)
{
    return err == BF_ERR_UNAVAILABLE || err == BF_ERR_RETRYABLE || err == BF_ERR_TIMEOUT ||
           err == BF_ERR_IO;
}

static const char *readiness_unreachable(bf_err err)
{
    return err == BF_ERR_TIMEOUT ? "database did not answer in time" : "database unreachable";
}

static void readiness_schema(readiness_answer *a, bf_engine *e, bf_err err)
{
    const char *what = NULL;
    switch (err) {
    case BF_OK:
        readiness_set(a, COMP_SCHEMA, ST_READY, "%s", "");
        return;
    case BF_ERR_SCHEMA_MISSING:
        what = "schema missing";
        break;
    case BF_ERR_SCHEMA_TOO_NEW:
        what = "schema newer than binary";
        break;
    case BF_ERR_SCHEMA_CHECKSUM:
        what = "schema does not match binary";
        break;
    default:
        readiness_set(a, COMP_SCHEMA, ST_UNKNOWN, "schema check failed: %s", bf_err_str(err));
        return;
    }
    readiness_set(a, COMP_SCHEMA, ST_NOT, "%s: %s", what, bf_engine_diag(e));
}

/* The gate's rows (already read with the schema verdict) into the answer. */
static void readiness_backfills(readiness_answer *a, int n)
{
    a->gating_total = n;
    int listed = n < READINESS_GATING_MAX ? n : READINESS_GATING_MAX;
    for (int i = 0; i < listed; i++) {
        Buzz__Backfill__V1__GatingBackfill *g = &a->gating[i];
        buzz__backfill__v1__gating_backfill__init(g);
        g->id = a->rows[i].id;
        if (a->rows[i].state != 0) { /* 0: required but not registered yet */
            g->has_state = true;
            g->state = srv_state_to_proto(a->rows[i].state);
        }
        a->gating_ptrs[i] = g;
    }
    a->resp.n_gating = (size_t)listed;
    a->resp.gating = a->gating_ptrs;
    if (n == 0)
        readiness_set(a, COMP_BACKFILLS, ST_READY, "%s", "");
    else
        readiness_set(a, COMP_BACKFILLS, ST_NOT, "%d required backfill%s not completed", n,
                      n == 1 ? "" : "s");
}

static uint64_t readiness_hash(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull; /* FNV-1a */
    return h;
}

/* What the waiter compares: statuses, and the gating IDs with their states. */
static uint64_t readiness_fingerprint(const readiness_answer *a)
{
    uint64_t h = 14695981039346656037ull;
    for (int i = 0; i < COMP_COUNT; i++)
        h = readiness_hash(h, &a->comps[i].status, sizeof a->comps[i].status);
    h = readiness_hash(h, &a->gating_total, sizeof a->gating_total);
    for (size_t i = 0; i < a->resp.n_gating; i++) {
        h = readiness_hash(h, a->gating[i].id, strlen(a->gating[i].id) + 1);
        h = readiness_hash(h, &a->gating[i].state, sizeof a->gating[i].state);
    }
    return h;
}

/* An empty answer: everything after rows (which bf_readiness_read writes) is set here; manual
 * mode never reaches readiness_backfills, and /readyz printed the heap's garbage as gating. */
static void readiness_init(readiness_answer *a)
{
    memset(a, 0, offsetof(readiness_answer, rows));
    a->gating_total = 0;
    a->fingerprint = 0;
    Buzz__Backfill__V1__CheckResponse *r = &a->resp;
    buzz__backfill__v1__check_response__init(r);
    for (int i = 0; i < COMP_COUNT; i++) {
        buzz__backfill__v1__component__init(&a->comps[i]);
        a->comps[i].name = (char *)readiness_names[i];
        a->comp_ptrs[i] = &a->comps[i];
    }
    r->n_components = COMP_COUNT;
    r->components = a->comp_ptrs;
}

/* The answer from the read's outcome: err (the read's, or why there is no engine: e NULL) and
 * the gate's rows (gating of them, in a->rows). */
static void readiness_fill(readiness_answer *a, const srv_context *ctx, bf_engine *e, bf_err err,
                           int gating)
{
    Buzz__Backfill__V1__CheckResponse *r = &a->resp;
    bool reachable = e != NULL && !readiness_transient(err);
    if (!reachable) {
        readiness_set(a, COMP_DATABASE, ST_UNKNOWN, "%s", readiness_unreachable(err));
        readiness_set(a, COMP_SCHEMA, ST_UNKNOWN, "%s", readiness_unreachable(err));
    } else {
        readiness_set(a, COMP_DATABASE, ST_READY, "%s", "");
        readiness_schema(a, e, err);
    }
    if (!ctx->auto_backfill)
        readiness_set(a, COMP_BACKFILLS, ST_READY, "%s", "manual mode: no backfill gate");
    else if (!reachable)
        readiness_set(a, COMP_BACKFILLS, ST_UNKNOWN, "%s", readiness_unreachable(err));
    else if (err != BF_OK)
        readiness_set(a, COMP_BACKFILLS, ST_UNKNOWN, "%s", "schema not ready");
    else
        readiness_backfills(a, gating);

    bool ready = true;
    for (int i = 0; i < COMP_COUNT; i++)
        ready = ready && a->comps[i].status == ST_READY;
    r->has_ready = true;
    r->ready = ready;
    r->has_auto_migrate = true;
    r->auto_migrate = ctx->auto_migrate;
    r->has_auto_backfill = true;
    r->auto_backfill = ctx->auto_backfill;
    r->has_observed_at_us = true;
    r->observed_at_us = readiness_wall_us();
    a->fingerprint = readiness_fingerprint(a);
}

/* Compute one answer from PostgreSQL. e may be NULL (no session engine: unreachable). */
static void readiness_compute(readiness_answer *a, const srv_context *ctx, bf_engine *e,
                              bf_err open_err)
{
    readiness_init(a);
    /* one round trip: the schema verdict, and in automatic mode the gate with it */
    int gating = 0;
    bf_err err = e == NULL            ? open_err
                 : ctx->auto_backfill ? bf_readiness_read(e, a->rows, READINESS_GATING_MAX, &gating)
                                      : bf_schema_check(e, NULL);
    readiness_fill(a, ctx, e, err, gating);
}

/* The next slice of a wait in ms, or 0 when it is over: the answer is ready or differs from
 * the first read's (first), the daemon is stopping, or the time is up (until, CLOCK_MONOTONIC
 * us; 0: no wait). A slice is at most a tick: changes nobody announces are read that often. */
static int readiness_slice(const readiness_answer *a, uint64_t first, int64_t until,
                           const srv_context *ctx)
{
    if (until == 0 || a->resp.ready || a->fingerprint != first || atomic_load(&ctx->shutting_down))
        return 0;
    int64_t left_ms = (until - srv_now_us()) / 1000;
    if (left_ms <= 0)
        return 0;
    return left_ms < READINESS_TICK_MS ? (int)left_ms : READINESS_TICK_MS;
}

/* ---- a deferred Check: its reads and its wait without a thread ---------------------------- */

/* A Check deferred by its handler (srv_call_defer): the answer, and for a wait (wait_ms) what
 * it compares with and an epoll set of the session's socket (notifications) and a tick. */
typedef struct readiness_job {
    readiness_answer a;
    int64_t until;   /* CLOCK_MONOTONIC us when the wait ends; 0: no wait */
    bool have_first; /* first holds the first answer's fingerprint */
    uint64_t first;
    int ep, tick; /* the wait's epoll set and its timerfd; -1: none yet */
} readiness_job;

static void readiness_job_read(srv_call *call, readiness_job *job);
static void readiness_job_woken(srv_call *call, void *arg);

static void readiness_job_end(srv_call *call, readiness_job *job)
{
    srv_call_answer(call, &job->a.resp.base);
    if (job->ep >= 0)
        close(job->ep);
    if (job->tick >= 0)
        close(job->tick);
    free(job);
}

/* Wait (deferred) for a notification on the session's connection or a tick of slice_ms; false
 * when the wait could not be set up (out of descriptors): the caller answers at once. */
static bool readiness_job_wait(srv_call *call, readiness_job *job, int slice_ms)
{
    bf_engine *e = call->session->engine;
    if (job->ep < 0 && (job->ep = epoll_create1(EPOLL_CLOEXEC)) < 0)
        return false;
    if (job->tick < 0) {
        job->tick = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        struct epoll_event ev = {.events = EPOLLIN};
        if (job->tick < 0 || epoll_ctl(job->ep, EPOLL_CTL_ADD, job->tick, &ev) != 0)
            return false;
    }
    /* added every time (EEXIST when the set holds it still): a reconnect closed the socket
     * the set held, which removed it, and opened another, perhaps under the same number */
    int sock = bf_engine_socket(e);
    struct epoll_event ev = {.events = EPOLLIN};
    if (sock < 0 || (epoll_ctl(job->ep, EPOLL_CTL_ADD, sock, &ev) != 0 && errno != EEXIST))
        return false;
    struct itimerspec its = {.it_value = {slice_ms / 1000, (long)(slice_ms % 1000) * 1000000L}};
    if (timerfd_settime(job->tick, 0, &its, NULL) != 0)
        return false;
    srv_call_defer(call, job->ep, readiness_job_woken, job);
    return true;
}

/* A read of the job ended (err, gating): answer, or wait for a change and read again. */
static void readiness_job_next(srv_call *call, readiness_job *job, bf_err err, int gating)
{
    srv_context *ctx = call->session->ctx;
    readiness_fill(&job->a, ctx, call->session->engine, err, gating);
    if (!job->have_first) {
        job->first = job->a.fingerprint;
        job->have_first = true;
    }
    int slice = readiness_slice(&job->a, job->first, job->until, ctx);
    if (slice > 0) {
        /* a notification the read took in with its answer is no longer on the socket */
        if (bf_wait_notify(call->session->engine, 0) == BF_OK) {
            readiness_job_read(call, job);
            return;
        }
        if (readiness_job_wait(call, job, slice))
            return;
    }
    readiness_job_end(call, job);
}

/* The read's socket is readable: its end, then the next step. */
static void readiness_job_resume(srv_call *call, void *arg)
{
    readiness_job *job = arg;
    bf_engine *e = call->session->engine;
    int gating = 0;
    bool done = false;
    bf_err err = bf_readiness_end(e, job->a.rows, READINESS_GATING_MAX, &gating, &done);
    if (done)
        readiness_job_next(call, job, err, gating);
    else
        srv_call_defer(call, bf_engine_socket(e), readiness_job_resume, job);
}

/* One read of the job, deferred until PostgreSQL answers. */
static void readiness_job_read(srv_call *call, readiness_job *job)
{
    bf_engine *e = call->session->engine;
    readiness_init(&job->a);
    bf_err err = bf_readiness_begin(e, call->session->ctx->auto_backfill);
    if (err == BF_OK)
        srv_call_defer(call, bf_engine_socket(e), readiness_job_resume, job);
    else
        readiness_job_next(call, job, err, 0);
}

/* The wait ended (a notification, the tick, or the connection's end): read again. */
static void readiness_job_woken(srv_call *call, void *arg)
{
    readiness_job *job = arg;
    uint64_t ticks;
    ssize_t r = read(job->tick, &ticks, sizeof ticks);
    (void)r; /* nothing to read when a notification woke it */
    (void)bf_wait_notify(call->session->engine, 0); /* drain; the read reports a lost connection */
    readiness_job_read(call, job);
}

static void readiness_sleep_ms(int ms)
{
    srv_thread_blocks();
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The session engine, or NULL with the reason in *err. */
static bf_engine *readiness_engine(srv_call *call, bf_err *err)
{
    bf_engine *e = NULL;
    *err = srv_session_engine(call->session, &e);
    return *err == BF_OK ? e : NULL;
}

static void readiness_no_memory(srv_call *call)
{
    srv_call_status(call, BUZZ__BACKFILL__V1__STATUS_CODE__RESOURCE_EXHAUSTED,
                    bf_err_str(BF_ERR_NOMEM), "%s", "");
    srv_call_answer(call, NULL);
}

static void readiness_check(Buzz__Backfill__V1__Readiness_Service *svc,
                            const Buzz__Backfill__V1__CheckRequest *in,
                            Buzz__Backfill__V1__CheckResponse_Closure closure, void *closure_data)
{
    srv_call *call = SRV_CALL(closure_data);
    srv_context *ctx = call->session->ctx;
    int64_t wait_us = 0;
    if (in->has_wait_ms && in->wait_ms > 0) {
        uint32_t ms = in->wait_ms < READINESS_WAIT_MAX_MS ? in->wait_ms : READINESS_WAIT_MAX_MS;
        wait_us = (int64_t)ms * 1000;
        /* leave the answer time to travel back before the caller's deadline */
        int64_t left = srv_call_remaining_us(call) - 100000;
        if (left < wait_us)
            wait_us = left > 0 ? left : 0;
    }
    bf_err err;
    bf_engine *e = readiness_engine(call, &err);
    if (wait_us > 0 && e != NULL)
        (void)bf_wait_notify(e, 0); /* listen before the first read */
    if (e != NULL && call->may_defer) {
        /* the reads and the wait give the thread back: the transport resumes the job when
         * PostgreSQL has answered, a notification has come or the tick is due */
        readiness_job *job = malloc(sizeof *job);
        if (job == NULL) {
            readiness_no_memory(call);
            return;
        }
        job->until = wait_us > 0 ? srv_now_us() + wait_us : 0;
        job->have_first = false;
        job->ep = job->tick = -1;
        readiness_job_read(call, job);
        return;
    }
    readiness_answer *a = malloc(sizeof *a);
    if (a == NULL) {
        readiness_no_memory(call);
        return;
    }
    bool slot = false;
    if (wait_us > 0) { /* a long wait holds a transport thread: only so many at once */
        slot = atomic_fetch_add(&ctx->readiness_waiters, 1) < ctx->readiness_waiters_max;
        if (!slot) {
            atomic_fetch_sub(&ctx->readiness_waiters, 1);
            if (wait_us > READINESS_TICK_MS * 1000)
                wait_us = READINESS_TICK_MS * 1000;
        }
    }
    int64_t until = wait_us > 0 ? srv_now_us() + wait_us : 0;
    readiness_compute(a, ctx, e, err);
    uint64_t first = a->fingerprint;
    for (int slice; (slice = readiness_slice(a, first, until, ctx)) > 0;) {
        bf_err werr = e != NULL ? bf_wait_notify(e, slice) : BF_ERR_UNAVAILABLE;
        if (werr != BF_OK && werr != BF_ERR_TIMEOUT)
            readiness_sleep_ms(slice); /* no connection to wait on: tick */
        if (e == NULL)
            e = readiness_engine(call, &err);
        readiness_compute(a, ctx, e, err);
    }
    if (slot)
        atomic_fetch_sub(&ctx->readiness_waiters, 1);
    closure(&a->resp, closure_data);
    free(a);
}

static const char *readiness_status_name(comp_status st)
{
    return st == ST_READY ? "ready" : st == ST_NOT ? "not_ready" : "unknown";
}

void srv_readiness_evaluate(srv_session *session, srv_readiness_view *out)
{
    memset(out, 0, sizeof *out);
    out->verdict = -1;
    readiness_answer *a = malloc(sizeof *a);
    if (a == NULL)
        return; /* unknown */
    bf_engine *e = NULL;
    bf_err err = srv_session_engine(session, &e);
    readiness_compute(a, session->ctx, err == BF_OK ? e : NULL, err);
    bool not_ready = false;
    for (int i = 0; i < COMP_COUNT && i < SRV_READINESS_COMPONENTS; i++) {
        out->components[i].name = readiness_names[i];
        out->components[i].status = readiness_status_name(a->comps[i].status);
        snprintf(out->components[i].reason, sizeof out->components[i].reason, "%s", a->reasons[i]);
        not_ready = not_ready || a->comps[i].status == ST_NOT;
    }
    out->verdict = a->resp.ready ? 1 : not_ready ? 0 : -1;
    out->gating = a->gating_total;
    out->auto_migrate = session->ctx->auto_migrate;
    out->auto_backfill = session->ctx->auto_backfill;
    free(a);
}

static Buzz__Backfill__V1__Readiness_Service readiness_svc =
    BUZZ__BACKFILL__V1__READINESS__INIT(readiness_);

/* CheckRequest is one optional uint32; the cap leaves room for fields a newer relay adds. */
static const srv_method_policy readiness_policies[] = {
    {SRV_CAP_READINESS, false, 4096},
};

ProtobufCService *srv_readiness_service(void)
{
    return &readiness_svc.base;
}

const srv_method_policy *srv_readiness_policies(void)
{
    return readiness_policies;
}
