/*
 * dispatch.c - one request end to end: the envelope read off the wire, method lookup through the
 * registered protoc-c service descriptors, authentication and authorization, size limits, NUL
 * checks and the budgeted decode of the body, audit of rejected attempts on audited methods,
 * deadline, invoke, response encode. Also the per-call status helpers and the monotonic clock.
 *
 * Design notes
 *
 * Order of checks. The envelope is scanned first (srv_envelope_scan: spans into the message,
 * nothing allocated, unknown fields skipped; see decode.c for why not protobuf-c); then the
 * method (nothing is attributable before it, so nothing is audited). Then the body's "id" is
 * read off the wire, only so that an audited rejection can name the stable ID it was about: a
 * linear scan of bytes already received, no allocation, the last occurrence (the one the
 * handler would act on), nothing learnt from a malformed body. It is not acted on. That is the
 * trade-off: naming the ID before authentication costs one pass over at most SRV_MAX_MESSAGE
 * bytes, and the ID an unauthenticated peer chose goes into the audit, as text the engine
 * sanitizes and bounds (engine/src/audit.c); decoding the body instead would let anyone make
 * the server allocate for it. Authentication and authorization come next and always win: a
 * caller without the right capability learns nothing about its request (no size or parse
 * errors) and no handler runs, so no protected state is read. Only then are the message size,
 * the method's body cap (srv_method_policy.max_body), the request ID and the strings judged,
 * and the body decoded with protobuf-c under an allocator budget of SRV_DECODE_BUDGET(cap). A
 * request therefore holds at most its received message (nng, at most SRV_MAX_MESSAGE plus the
 * transport's slack), a token copy on the stack and, after authentication, SRV_DECODE_BUDGET(cap)
 * bytes of decoded body (72 KiB for the 4 KiB caps of the Admin and Readiness methods).
 *
 * Strings are what they say. Every string field of the envelope and of the body (nested ones
 * included) must hold no NUL byte: its C string would be shorter than what was sent
 * ("<token>\0junk", "<id>\0; DROP"). A token with one is malformed (UNAUTHENTICATED), any
 * other is INVALID_ARGUMENT, audited like every rejection of an audited method. A present but
 * empty token is malformed too (srv_auth_authenticate), never the absence that the ipc boundary
 * authorizes.
 *
 * Every rejection of an audited method is audited. An authenticated one is written with
 * bf_audit_rejection() on this thread's engine session. An unauthenticated one is attributed to
 * the peer ("unauthenticated tcp addr=192.0.2.7", "unauthenticated ipc uid=1000") and goes
 * through srv_rejects_audit(): written at once unless a flood of identical ones is being
 * counted (reject.c). A failure to audit is logged and never turns a rejection into success.
 *
 * The closure packs whatever message the handler passes; the encoder keeps the body only for
 * OK and FAILED_PRECONDITION, so a handler may set its status before or after passing it.
 *
 * Deadline: deadline_ms counts from receipt (received_us). A request whose budget is spent
 * before the handler would start is answered DEADLINE_EXCEEDED without invoking; handlers bound
 * their own waits with srv_call_remaining_us(); an answer that comes too late is replaced by
 * DEADLINE_EXCEEDED (a control may have taken effect: the client retries with the same request
 * ID and gets the stored outcome).
 *
 * Deferred answers: a transport that waits on sockets itself (native.c) calls
 * srv_dispatch_begin() with a place for a srv_pending; a handler may then send its PostgreSQL
 * statement and return without answering (srv_call_defer), and the transport calls
 * srv_dispatch_resume() once the socket is readable, until the handler answers
 * (srv_call_answer). So everything a request holds lives in its srv_pending on the heap, not on
 * the receiving thread's stack; the checks, the audit of a rejection and the deadline are the
 * same either way.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "buzz/token.h"
#include "metrics.h"
#include "log.h"
#include "srv.h"

#define DISPATCH_MAX_SERVICES   8
#define DISPATCH_REQUEST_ID_LEN 16 /* bytes of a request ID on the wire */
#define DISPATCH_AUDIT_ID_MAX                                                                      \
    127                              /* bytes of a body's ID kept for the audit, which             \
                                        bounds it further (80) and sanitizes it */
#define DISPATCH_MAX_BODY (16 << 20) /* bytes of a packed response body */

#define SC(name) BUZZ__BACKFILL__V1__STATUS_CODE__##name

typedef struct dispatch_service {
    ProtobufCService *service;
    srv_method_policy *policies;
} dispatch_service;

struct srv_dispatcher {
    srv_context *ctx;
    dispatch_service services[DISPATCH_MAX_SERVICES];
    size_t n_services;
    srv_rejects *rejects; /* unauthenticated rejections, coalesced under a flood */
};

/* A srv_call plus what only the dispatcher needs; call is first so that the closure_data a
 * handler sees (&dc->call) is also the dispatch_call. */
typedef struct dispatch_call {
    srv_call call;
    const ProtobufCMethodDescriptor *method;
    bool invoked; /* every check passed: the handler ran */
} dispatch_call;

/* What one request carried, for the checks and the audit. */
typedef struct dispatch_request {
    srv_envelope env; /* spans into the received message */
    const dispatch_service *svc;
    unsigned method_index;
    const srv_method_policy *policy;
    srv_budget budget; /* the body's decode; input is freed with it */
    ProtobufCMessage *input;
    char audit_id[DISPATCH_AUDIT_ID_MAX + 1];
    bool echo_request_id;
} dispatch_request;

/* ---- small helpers ----------------------------------------------------------------------- */

int64_t srv_call_remaining_us(const srv_call *call)
{
    if (call == NULL || call->deadline_us == 0)
        return INT64_MAX;
    return call->deadline_us - srv_now_us();
}

static void dispatch_log(const srv_context *ctx, bf_log_level level, bf_event event,
                         const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void dispatch_log(const srv_context *ctx, bf_log_level level, bf_event event,
                         const char *fmt, ...)
{
    if (ctx == NULL || ctx->engine_cfg.log == NULL)
        return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    bf_log_record rec = BF_LOG_RECORD_INIT;
    rec.level = level;
    rec.event = event;
    rec.msg = buf;
    ctx->engine_cfg.log(ctx->engine_cfg.log_arg, &rec);
}

/* Make dst (cap bytes) client-safe text: control characters become '?', and when the text was
 * cut it ends on a UTF-8 character boundary followed by "...". */
static void dispatch_bound_text(char *dst, size_t cap, bool truncated)
{
    size_t n = strlen(dst);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)dst[i] < 0x20 || dst[i] == 0x7f)
            dst[i] = '?';
    if (!truncated || cap < 4)
        return;
    n = n > cap - 4 ? cap - 4 : n;
    while (n > 0 && ((unsigned char)dst[n] & 0xc0) == 0x80)
        n--; /* dst[n] is a continuation byte: back up to the start of its character */
    memcpy(dst + n, "...", 4);
}

void srv_call_status(srv_call *call, srv_code code, const char *message, const char *detail_fmt,
                     ...)
{
    if (call == NULL)
        return;
    call->code = code;
    size_t len = message ? strlen(message) : 0;
    size_t cap = sizeof call->message;
    memcpy(call->message, message ? message : "", len < cap ? len + 1 : cap - 1);
    call->message[cap - 1] = '\0';
    dispatch_bound_text(call->message, cap, len >= cap);
    call->detail[0] = '\0';
    if (detail_fmt != NULL) {
        va_list ap;
        va_start(ap, detail_fmt);
        int n = vsnprintf(call->detail, sizeof call->detail, detail_fmt, ap);
        va_end(ap);
        if (n < 0)
            call->detail[0] = '\0';
        dispatch_bound_text(call->detail, sizeof call->detail, n >= (int)sizeof call->detail);
    }
}

/* ---- dispatcher -------------------------------------------------------------------------- */

bf_err srv_dispatcher_new(srv_dispatcher **out, srv_context *ctx)
{
    if (out == NULL || ctx == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    srv_dispatcher *d = calloc(1, sizeof *d);
    if (d == NULL)
        return BF_ERR_NOMEM;
    d->ctx = ctx;
    bf_err err = srv_rejects_new(&d->rejects, ctx);
    if (err != BF_OK) {
        free(d);
        return err;
    }
    *out = d;
    return BF_OK;
}

void srv_dispatcher_free(srv_dispatcher *d)
{
    if (d == NULL)
        return;
    srv_rejects_free(d->rejects); /* writes the counts it still holds */
    for (size_t i = 0; i < d->n_services; i++)
        free(d->services[i].policies);
    free(d);
}

bf_err srv_dispatcher_add(srv_dispatcher *d, ProtobufCService *service,
                          const srv_method_policy *policies)
{
    if (d == NULL || service == NULL || service->descriptor == NULL || service->invoke == NULL ||
        policies == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    const ProtobufCServiceDescriptor *desc = service->descriptor;
    if (desc->n_methods == 0 || d->n_services == DISPATCH_MAX_SERVICES)
        return BF_ERR_INVALID_ARGUMENT;
    for (size_t i = 0; i < d->n_services; i++)
        if (strcmp(d->services[i].service->descriptor->name, desc->name) == 0)
            return BF_ERR_INVALID_ARGUMENT; /* one implementation per service */
    srv_method_policy *copy = calloc(desc->n_methods, sizeof *copy);
    if (copy == NULL)
        return BF_ERR_NOMEM;
    memcpy(copy, policies, desc->n_methods * sizeof *copy);
    d->services[d->n_services].service = service;
    d->services[d->n_services].policies = copy;
    d->n_services++;
    return BF_OK;
}

/* "<service full name>.<method>" -> service and method index. */
static bool dispatch_lookup(const srv_dispatcher *d, const char *method,
                            const dispatch_service **svc_out, unsigned *index_out)
{
    if (method == NULL || method[0] == '\0')
        return false;
    const char *dot = strrchr(method, '.');
    if (dot == NULL || dot == method)
        return false;
    size_t prefix = (size_t)(dot - method);
    for (size_t i = 0; i < d->n_services; i++) {
        const ProtobufCServiceDescriptor *desc = d->services[i].service->descriptor;
        if (strlen(desc->name) != prefix || memcmp(desc->name, method, prefix) != 0)
            continue;
        const ProtobufCMethodDescriptor *m =
            protobuf_c_service_descriptor_get_method_by_name(desc, dot + 1);
        if (m == NULL)
            return false;
        *svc_out = &d->services[i];
        *index_out = (unsigned)(m - desc->methods);
        return true;
    }
    return false;
}

/* The stable ID a request body names (its "id" string field, read off the wire), for the
 * audit of a rejection: bounded, NUL bytes made visible; the engine sanitizes the rest. */
static void dispatch_body_id(const ProtobufCMessageDescriptor *input, const srv_span *body,
                             char *out, size_t cap)
{
    out[0] = '\0';
    srv_span id;
    if (!body->present || !srv_wire_last_string(input, "id", body->data, body->len, &id))
        return;
    size_t n = id.len < cap - 1 ? id.len : cap - 1;
    for (size_t i = 0; i < n; i++)
        out[i] = id.data[i] == '\0' ? '?' : (char)id.data[i];
    out[n] = '\0';
}

static const char *dispatch_cap_name(uint32_t bit)
{
    switch (bit) {
    case SRV_CAP_READ:
        return "read";
    case SRV_CAP_CONTROL:
        return "control";
    case SRV_CAP_VALIDATE:
        return "validate";
    case SRV_CAP_READINESS:
        return "readiness";
    default:
        return "unknown";
    }
}

/* Record a rejected attempt of an audited method. who may be NULL (not authenticated): such
 * rejections go through the coalescing of reject.c, attributed to the peer. */
static void dispatch_audit(srv_dispatcher *d, dispatch_call *dc, const dispatch_request *req,
                           const srv_identity *who, bf_err err, const char *outcome)
{
    if (req->policy == NULL || !req->policy->audited)
        return;
    srv_call *call = &dc->call;
    char action[24];
    size_t i = 0;
    for (const char *p = dc->method->name; *p != '\0' && i + 1 < sizeof action; p++, i++)
        action[i] = (*p >= 'A' && *p <= 'Z') ? (char)(*p - 'A' + 'a') : *p;
    action[i] = '\0';
    const char *id = req->audit_id[0] ? req->audit_id : NULL;
    bf_actor actor = {.request_id = call->request_id[0] ? call->request_id : NULL};
    bf_err rc;
    if (who != NULL && who->authenticated) {
        actor.actor = who->actor[0] ? who->actor : NULL;
        actor.authority = who->authority;
        bf_engine *engine = NULL;
        rc = srv_session_engine(call->session, &engine);
        if (rc == BF_OK)
            rc = bf_audit_rejection(engine, action, id, &actor, err, outcome);
    } else {
        char authority[BF_ACTOR_MAX];
        const srv_peer *peer = call->peer;
        const char *listener = peer->listener ? peer->listener : "unknown";
        if (peer->has_uid)
            snprintf(authority, sizeof authority, "unauthenticated %s uid=%u", listener,
                     (unsigned)peer->uid);
        else if (peer->addr[0] != '\0')
            snprintf(authority, sizeof authority, "unauthenticated %s addr=%.63s", listener,
                     peer->addr);
        else
            snprintf(authority, sizeof authority, "unauthenticated %s", listener);
        actor.authority = authority;
        rc = srv_rejects_audit(d->rejects, call->session, action, id, &actor, err, outcome);
    }
    if (rc != BF_OK)
        dispatch_log(d->ctx, BF_LOG_ERROR, BF_EV_AUDIT_FAILED,
                     "could not audit rejected %s (%s): %s", action, bf_err_str(err),
                     bf_err_str(rc));
}

/* The protoc-c closure: pack the handler's message into call->body. */
static void dispatch_closure(const ProtobufCMessage *msg, void *closure_data)
{
    dispatch_call *dc = closure_data;
    srv_call *call = &dc->call;
    if (call->closed)
        return; /* a second answer is ignored */
    call->closed = true;
    if (msg == NULL) {
        if (call->code == SC(OK))
            srv_call_status(call, SC(INTERNAL), "internal error", "the handler gave no answer");
        return;
    }
    if (msg->descriptor != dc->method->output) {
        srv_call_status(call, SC(INTERNAL), "internal error", NULL);
        return;
    }
    size_t len = protobuf_c_message_get_packed_size(msg);
    if (len > DISPATCH_MAX_BODY) {
        srv_call_status(call, SC(RESOURCE_EXHAUSTED), "response too large",
                        "ask for a smaller page");
        return;
    }
    uint8_t *buf = malloc(len ? len : 1);
    if (buf == NULL) {
        srv_call_status(call, SC(RESOURCE_EXHAUSTED), "out of memory", NULL);
        return;
    }
    call->body_len = protobuf_c_message_pack(msg, buf);
    call->body = buf;
}

/* Reject with a status; audited methods also get an audit row. */
static void dispatch_reject(srv_dispatcher *d, dispatch_call *dc, const dispatch_request *req,
                            const srv_identity *who, bf_err err, const char *message,
                            const char *detail)
{
    if (detail != NULL)
        srv_call_status(&dc->call, srv_code_from_err(err), message, "%s", detail);
    else
        srv_call_status(&dc->call, srv_code_from_err(err), message, NULL);
    dispatch_audit(d, dc, req, who, err, detail ? detail : message);
}

/* The request's credential, judged: NULL token when the envelope carried none. A token that
 * cannot be a C string as sent (a NUL byte inside, or longer than any token) is refused here
 * as malformed without being copied; an empty one goes to the authenticator, which refuses it. */
static bf_err dispatch_authenticate(srv_dispatcher *d, dispatch_call *dc,
                                    const dispatch_request *req, srv_identity *who, char *diag,
                                    size_t diag_len)
{
    const srv_envelope *env = &req->env;
    if (d->ctx->auth == NULL) {
        snprintf(diag, diag_len, "no authenticator configured");
        return BF_ERR_UNAUTHENTICATED;
    }
    if (!env->token.present)
        return srv_auth_authenticate(d->ctx->auth, NULL, dc->call.peer, who, diag, diag_len);
    bool nul = env->token.len > 0 && memchr(env->token.data, '\0', env->token.len) != NULL;
    if (nul || env->token.len > BFT_TOKEN_MAX) {
        snprintf(diag, diag_len, "%s", bft_reason_str(BFT_REASON_MALFORMED));
        return BF_ERR_UNAUTHENTICATED;
    }
    char token[BFT_TOKEN_MAX + 1];
    memcpy(token, env->token.data, env->token.len);
    token[env->token.len] = '\0';
    bf_err err = srv_auth_authenticate(d->ctx->auth, token, dc->call.peer, who, diag, diag_len);
    sodium_memzero(token, env->token.len);
    return err;
}

/* Every check, then the handler. Leaves the outcome in dc->call. */
static void dispatch_run(srv_dispatcher *d, dispatch_call *dc, dispatch_request *req,
                         srv_identity *who, const uint8_t *in, size_t in_len, int64_t received_us)
{
    srv_call *call = &dc->call;
    /* the envelope, read off the wire: nothing is allocated, unknown fields are skipped */
    if (srv_envelope_scan(&req->env, in, in_len) != BF_OK) {
        srv_call_status(call, SC(INVALID_ARGUMENT), "malformed envelope", NULL);
        return;
    }
    const srv_envelope *env = &req->env;
    bool id_ok = !env->request_id.present || env->request_id.len == DISPATCH_REQUEST_ID_LEN;
    if (env->request_id.present && id_ok) {
        sodium_bin2hex(call->request_id, sizeof call->request_id, env->request_id.data,
                       env->request_id.len);
        req->echo_request_id = true;
    }
    /* the span itself, not nul_field: that names only the first string holding a NUL */
    if (env->method.len > 0 && memchr(env->method.data, '\0', env->method.len) != NULL) {
        srv_call_status(call, SC(INVALID_ARGUMENT), "malformed envelope",
                        "the method name holds a NUL byte");
        return;
    }
    if (env->method.len >= sizeof call->method) {
        srv_call_status(call, SC(UNIMPLEMENTED), "unknown method", NULL);
        return;
    }
    if (env->method.len > 0)
        memcpy(call->method, env->method.data, env->method.len);
    call->method[env->method.len] = '\0';
    if (!dispatch_lookup(d, call->method, &req->svc, &req->method_index)) {
        srv_call_status(call, SC(UNIMPLEMENTED), "unknown method", NULL);
        return;
    }
    dc->method = &req->svc->service->descriptor->methods[req->method_index];
    req->policy = &req->svc->policies[req->method_index];

    /* read off the wire only to name the stable ID in an audit row; judged after auth */
    dispatch_body_id(dc->method->input, &env->body, req->audit_id, sizeof req->audit_id);

    char diag[160] = "";
    bf_err err = dispatch_authenticate(d, dc, req, who, diag, sizeof diag);
    if (err != BF_OK || !who->authenticated) {
        srv_metrics_auth_rejected(d->ctx->metrics, err, diag);
        if (err == BF_ERR_NOMEM || err == BF_ERR_INTERNAL) {
            dispatch_log(d->ctx, BF_LOG_ERROR, BF_EV_AUTH_ERROR, "authentication failed: %s",
                         bf_err_str(err));
            dispatch_reject(d, dc, req, NULL, err, bf_err_str(err), NULL);
            return;
        }
        dispatch_reject(d, dc, req, NULL, BF_ERR_UNAUTHENTICATED, "unauthenticated",
                        diag[0] ? diag : NULL);
        return;
    }
    call->who = who;
    if (srv_auth_authorize(who, req->policy->caps) != BF_OK) {
        srv_metrics_auth_rejected(d->ctx->metrics, BF_ERR_PERMISSION_DENIED, NULL);
        char detail[96] = "missing capability:";
        uint32_t missing = req->policy->caps & ~who->caps;
        for (uint32_t bit = 1; bit != 0 && missing != 0; bit <<= 1)
            if (missing & bit) {
                strncat(detail, " ", sizeof detail - strlen(detail) - 1);
                strncat(detail, dispatch_cap_name(bit), sizeof detail - strlen(detail) - 1);
                missing &= ~bit;
            }
        dispatch_reject(d, dc, req, who, BF_ERR_PERMISSION_DENIED, "permission denied", detail);
        return;
    }

    /* sizes, then what the request says, judged only for an authorized caller */
    char detail[SRV_DETAIL_MAX_LEN];
    if (in_len > SRV_MAX_MESSAGE) {
        snprintf(detail, sizeof detail, "a request may be at most %d bytes", SRV_MAX_MESSAGE);
        dispatch_reject(d, dc, req, who, BF_ERR_RESOURCE_EXHAUSTED, "message too large", detail);
        return;
    }
    size_t cap = req->policy->max_body ? req->policy->max_body : SRV_BODY_MAX_DEFAULT;
    if (env->body.len > cap) {
        snprintf(detail, sizeof detail, "a %s request body may be at most %zu bytes",
                 dc->method->name, cap);
        dispatch_reject(d, dc, req, who, BF_ERR_RESOURCE_EXHAUSTED, "request body too large",
                        detail);
        return;
    }
    if (!id_ok) {
        dispatch_reject(d, dc, req, who, BF_ERR_INVALID_ARGUMENT, "invalid request id",
                        "a request id is 16 bytes");
        return;
    }
    /* a string that holds a NUL byte means less in C than on the wire: refused, never cut */
    const ProtobufCFieldDescriptor *nul = env->nul_field;
    bf_err wire = BF_OK;
    if (nul == NULL)
        wire = srv_wire_check_strings(dc->method->input, env->body.data, env->body.len, &nul);
    if (nul != NULL) {
        snprintf(detail, sizeof detail, "field %s holds a NUL byte", nul->name);
        dispatch_reject(d, dc, req, who, BF_ERR_INVALID_ARGUMENT, "invalid string", detail);
        return;
    }
    if (wire == BF_OK) { /* else malformed: protobuf-c would refuse it too */
        srv_budget_init(&req->budget, SRV_DECODE_BUDGET(cap));
        req->input = protobuf_c_message_unpack(dc->method->input, &req->budget.allocator,
                                               env->body.len, env->body.data);
    }
    if (req->input == NULL) {
        if (req->budget.exceeded) {
            snprintf(detail, sizeof detail, "decoding the request would need more than %zu bytes",
                     SRV_DECODE_BUDGET(cap));
            dispatch_reject(d, dc, req, who, BF_ERR_RESOURCE_EXHAUSTED, "request too complex",
                            detail);
        } else {
            dispatch_reject(d, dc, req, who, BF_ERR_INVALID_ARGUMENT, "malformed request body",
                            NULL);
        }
        return;
    }
    if (env->has_deadline_ms) {
        call->deadline_us = received_us + (int64_t)env->deadline_ms * 1000;
        if (call->deadline_us == 0)
            call->deadline_us = -1; /* 0 means "none" */
        if (srv_call_remaining_us(call) <= 0) {
            srv_call_status(call, SC(DEADLINE_EXCEEDED), "deadline exceeded", NULL);
            dispatch_audit(d, dc, req, who, BF_ERR_TIMEOUT, "deadline exceeded before handling");
            return;
        }
    }
    ProtobufCService *service = req->svc->service;
    dc->invoked = true;
    service->invoke(service, req->method_index, req->input, dispatch_closure, dc);
}

/* After the handler answered (or left without answering): the deadline judged. */
static void dispatch_after(dispatch_call *dc, const dispatch_request *req)
{
    srv_call *call = &dc->call;
    if (!call->closed)
        dispatch_closure(NULL, dc);
    if (call->deadline_us != 0 && srv_call_remaining_us(call) <= 0 &&
        call->code != SC(DEADLINE_EXCEEDED)) {
        srv_call_status(call, SC(DEADLINE_EXCEEDED), "deadline exceeded",
                        req->policy->audited ? "the request may have taken effect: retry it "
                                               "with the same request id to learn its outcome"
                                             : NULL);
    }
}

static bf_err dispatch_encode(const dispatch_call *dc, const dispatch_request *req, uint8_t **out,
                              size_t *out_len)
{
    const srv_call *call = &dc->call;
    Buzz__Backfill__V1__Status status = BUZZ__BACKFILL__V1__STATUS__INIT;
    status.code = call->code;
    status.message = call->message[0] ? (char *)call->message : NULL;
    status.detail = call->detail[0] ? (char *)call->detail : NULL;
    Buzz__Backfill__V1__ResponseEnvelope resp = BUZZ__BACKFILL__V1__RESPONSE_ENVELOPE__INIT;
    resp.status = &status;
    if (call->body != NULL && (call->code == SC(OK) || call->code == SC(FAILED_PRECONDITION))) {
        resp.has_body = true;
        resp.body.data = call->body;
        resp.body.len = call->body_len;
    }
    if (req->echo_request_id) {
        resp.has_request_id = true;
        resp.request_id.data = (uint8_t *)req->env.request_id.data;
        resp.request_id.len = req->env.request_id.len;
    }
    size_t len = buzz__backfill__v1__response_envelope__get_packed_size(&resp);
    uint8_t *buf = malloc(len ? len : 1);
    if (buf == NULL)
        return BF_ERR_NOMEM;
    *out_len = buzz__backfill__v1__response_envelope__pack(&resp, buf);
    *out = buf;
    return BF_OK;
}

/* One request from receipt to answer: on the heap, since a deferred one outlives the call
 * that received it. dc is first: the closure_data a handler sees is also the srv_pending. */
struct srv_pending {
    dispatch_call dc;
    dispatch_request req;
    srv_identity who;
    srv_dispatcher *d;
    int64_t received_us;
};

void srv_call_defer(srv_call *call, int fd, void (*resume)(srv_call *call, void *arg), void *arg)
{
    if (!call->may_defer)
        return; /* a handler's mistake: it answers nothing, so the call ends INTERNAL */
    call->defer_fd = fd;
    call->resume = resume;
    call->resume_arg = arg;
}

void srv_call_answer(srv_call *call, const ProtobufCMessage *msg)
{
    dispatch_closure(msg, call);
}

int srv_pending_fd(const srv_pending *p)
{
    return p->dc.call.defer_fd;
}

/* The handler answered: encode, count, free. */
static bf_err dispatch_finish(srv_pending *p, uint8_t **out, size_t *out_len)
{
    srv_dispatcher *d = p->d;
    if (p->dc.invoked)
        dispatch_after(&p->dc, &p->req);
    bf_err err = dispatch_encode(&p->dc, &p->req, out, out_len);
    srv_metrics_rpc(d->ctx->metrics, p->dc.method != NULL ? p->req.svc->service->descriptor : NULL,
                    p->req.method_index, p->dc.call.code, srv_now_us() - p->received_us);
    if (p->req.input != NULL)
        protobuf_c_message_free_unpacked(p->req.input, &p->req.budget.allocator);
    free(p->dc.call.body);
    sodium_memzero(&p->who, sizeof p->who);
    free(p);
    return err;
}

/* Still waiting: the handler deferred its answer and has not given it. */
static bool dispatch_waits(const srv_pending *p)
{
    return p->dc.call.resume != NULL && !p->dc.call.closed;
}

bf_err srv_dispatch_begin(srv_dispatcher *d, srv_session *session, const srv_peer *peer,
                          const uint8_t *in, size_t in_len, int64_t received_us,
                          srv_pending **pending, uint8_t **out, size_t *out_len)
{
    if (d == NULL || session == NULL || peer == NULL || out == NULL || out_len == NULL ||
        (in == NULL && in_len > 0))
        return BF_ERR_INVALID_ARGUMENT;
    srv_pending *p = calloc(1, sizeof *p);
    if (p == NULL)
        return BF_ERR_NOMEM;
    p->d = d;
    p->received_us = received_us;
    p->dc.call.session = session;
    p->dc.call.peer = peer;
    p->dc.call.code = SC(OK);
    p->dc.call.may_defer = pending != NULL;
    p->dc.call.defer_fd = -1;
    if (pending != NULL)
        *pending = NULL;

    dispatch_run(d, &p->dc, &p->req, &p->who, in, in_len, received_us);
    if (dispatch_waits(p)) {
        *pending = p;
        return BF_OK;
    }
    return dispatch_finish(p, out, out_len);
}

bf_err srv_dispatch_resume(srv_pending **pending, uint8_t **out, size_t *out_len)
{
    if (pending == NULL || *pending == NULL || out == NULL || out_len == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    srv_pending *p = *pending;
    srv_call *call = &p->dc.call;
    void (*resume)(srv_call *, void *) = call->resume;
    call->resume = NULL;
    resume(call, call->resume_arg);
    if (dispatch_waits(p))
        return BF_OK;
    *pending = NULL;
    return dispatch_finish(p, out, out_len);
}

bf_err srv_dispatch(srv_dispatcher *d, srv_session *session, const srv_peer *peer,
                    const uint8_t *in, size_t in_len, int64_t received_us, uint8_t **out,
                    size_t *out_len)
{
    return srv_dispatch_begin(d, session, peer, in, in_len, received_us, NULL, out, out_len);
}
