/*
 * srv.h - the seams between the parts of buzz-backfilld. Each part owns one file pair, in a
 * folder by concern:
 *
 * admin/ (the RPC services and what stands between them and the wire)
 *   dispatch.c   envelope, limits, deadline, method lookup through protoc-c service
 *                descriptors, authentication/authorization, audit of rejections, invoke, encode
 *   decode.c     the envelope read off the wire, NUL checks of strings, the decode budget
 *   auth.c       capability tokens -> srv_identity; per-method capability checks
 *   reject.c     audit of unauthenticated rejections, coalesced under a flood
 *   session.c    a transport thread's engine session
 *   admin.c      the Admin service (ProtobufCService) over the engine API; its Preflight in
 *                admin_preflight.c
 *   readiness.c  the Readiness service, derived from PostgreSQL on every call
 *   convert.c    engine structs -> protobuf messages; bf_err -> StatusCode (one table)
 * transport/
 *   transport.c  listeners (ipc://, tcp://, tls+tcp://) and the bounded stop; tcp:// and ipc://
 *                served by the SP transport of our own (native.c, native_setup.c: one thread
 *                per request reads, serves and answers it), tls+tcp:// by an nng REP socket with
 *                a pool of threads and contexts (transport_serve.c); conns.c counts the
 *                connections under the caps per listener and per peer; canary.c probes nng's
 *                reaper
 * http/
 *   http.c       the optional HTTP listener: /metrics, /livez, /readyz on its own scrape thread
 *   metrics.c    counters and histograms (log observer, dispatcher), the Prometheus exposition
 * configuration/
 *   config*.c    key = value file, environment, flags (config.c), the key table, checks,
 *                redaction and output (config_keys.c, config_check.c, config_redact.c,
 *                config_print.c), throttle settings (config_throttle.c)
 *   deffile.c    definition files (definitions_dir)
 * (top)
 *   log.c        the log, its levels and the monotonic clock
 *   notify.c     the systemd notify protocol
 *   startup.c    the startup order of DESIGN.md; workers
 *   signals.c    SIGTERM/SIGINT stop, SIGHUP reloads, a fatal stop
 *   main.c       composes the above
 *
 * Threading: srv_context is built before serving starts and is read-only afterwards (except
 * where a field says otherwise). A transport thread handles one request at a time with a
 * srv_session (one engine connection) lent to it for that request; a srv_call lives for one
 * request.
 */
#ifndef BUZZ_SRV_H
#define BUZZ_SRV_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "buzz/backfill/v1/admin.pb-c.h"
#include "buzz/backfill/v1/readiness.pb-c.h"
#include "buzz/backfill/v1/rpc.pb-c.h"
#include "buzz/backfill/v1/token.pb-c.h" /* Capability values behind SRV_CAP_* */
#include "buzz/engine.h"

#define SRV_MAX_MESSAGE     (1024 * 1024) /* receive cap of one request, bytes */
#define SRV_MESSAGE_MAX_LEN 200           /* Status.message bound */
#define SRV_DETAIL_MAX_LEN  BF_DIAG_MAX   /* Status.detail bound */

typedef Buzz__Backfill__V1__StatusCode srv_code;

/* ---- identity (auth.c) ------------------------------------------------------------------ */

/* Capability bits: 1u << Buzz__Backfill__V1__Capability value. */
#define SRV_CAP_READ      (1u << BUZZ__BACKFILL__V1__CAPABILITY__READ)
#define SRV_CAP_CONTROL   (1u << BUZZ__BACKFILL__V1__CAPABILITY__CONTROL)
#define SRV_CAP_VALIDATE  (1u << BUZZ__BACKFILL__V1__CAPABILITY__VALIDATE)
#define SRV_CAP_READINESS (1u << BUZZ__BACKFILL__V1__CAPABILITY__READINESS)
#define SRV_CAP_ALL       (SRV_CAP_READ | SRV_CAP_CONTROL | SRV_CAP_VALIDATE | SRV_CAP_READINESS)

/* Transport facts about the peer of one request. */
typedef struct srv_peer {
    const char *listener; /* "ipc", "tcp" or "tls" */
    bool has_uid;         /* ipc only: the peer's uid from the kernel */
    uint32_t uid;
    char addr[64]; /* tcp/tls: the remote IP address as text (no port), "" for ipc/unknown */
} srv_peer;

/* Who a request speaks for, once authenticated. */
typedef struct srv_identity {
    bool authenticated;
    bool boundary;                /* authority supplied by a protected listener, not a token */
    char actor[BF_ACTOR_MAX];     /* "" when only an authority source is known */
    char authority[BF_ACTOR_MAX]; /* "token kid=k1" or "ipc uid=1000" */
    uint32_t caps;                /* SRV_CAP_* */
    uint32_t roles;               /* 1u << Role value; informational, grants nothing */
    char token_id[33];            /* lower-case hex, "" for boundary authority */
    int64_t expires_at;           /* Unix seconds, 0 for boundary authority */
} srv_identity;

typedef struct srv_auth srv_auth;

typedef struct srv_auth_config {
    const char *audience;          /* required token audience */
    const char *trusted_keys_file; /* lines "<kid> <base64url Ed25519 public key>" */
    const char *revoked_file;      /* optional: lines "<token id hex>" */
    int clock_skew_s;              /* tolerated skew on nbf/exp; default 30 */
    bool ipc_boundary;             /* ipc:// peers get boundary authority (all caps) */
    uint32_t ipc_boundary_caps;    /* caps granted to ipc peers when ipc_boundary; 0 = all */
} srv_auth_config;

/* Load the trusted keys and revocations. A keys or revocations file writable by group or
 * others is refused (BF_ERR_PERMISSION_DENIED), as at every reload. */
bf_err srv_auth_new(srv_auth **out, const srv_auth_config *cfg, char *diag, size_t diag_len);
void srv_auth_free(srv_auth *auth);
/* Re-read trusted keys and revocations (SIGHUP). On error the previous sets stay. Thread-safe
 * against concurrent srv_auth_authenticate calls. */
bf_err srv_auth_reload(srv_auth *auth, char *diag, size_t diag_len);
/*
 * Authenticate one request: a token (NULL: the request carried none) and the peer. Boundary
 * authority applies only when the token is absent (NULL), the listener is ipc and ipc_boundary
 * is set; a present but empty token ("") is malformed, never "no token". Returns BF_OK
 * with *who filled, or BF_ERR_UNAUTHENTICATED with a short client-safe reason in diag
 * (malformed, bad signature, unknown key, expired, not yet valid, wrong audience, revoked).
 * Verified tokens are cached by hash; revocation and expiry are still checked on every call.
 */
bf_err srv_auth_authenticate(srv_auth *auth, const char *token, const srv_peer *peer,
                             srv_identity *who, char *diag, size_t diag_len)
    __attribute__((warn_unused_result));
/* BF_OK when who holds every bit of required_caps, else BF_ERR_PERMISSION_DENIED. Roles are
 * never consulted. */
bf_err srv_auth_authorize(const srv_identity *who, uint32_t required_caps)
    __attribute__((warn_unused_result));

/* ---- server context and sessions -------------------------------------------------------- */

typedef struct srv_context {
    const bf_registry *registry;
    srv_auth *auth;
    const char *conninfo;
    bool auto_migrate;
    bool auto_backfill;
    int request_retention_s;
    bf_config engine_cfg; /* template for per-thread engine sessions */
    atomic_bool shutting_down;
    /* Readiness.Check waits (wait_ms) held at once, each on a transport thread; beyond it a
     * wait is cut to one second so waiters never starve the admin API. 0: every wait is cut. */
    int readiness_waiters_max;
    atomic_int readiness_waiters; /* in progress (readiness.c) */
    struct srv_metrics *metrics;  /* metrics.h; NULL: none are recorded */
} srv_context;

/* One engine connection, used by one request at a time (the transport lends them). */
typedef struct srv_session {
    srv_context *ctx;
    bf_engine *engine; /* opened lazily; NULL while the database is unreachable */
} srv_session;

/* The engine session, (re)opened on demand. BF_ERR_UNAVAILABLE when the
 * database cannot be reached. */
bf_err srv_session_engine(srv_session *s, bf_engine **out);

/* The calling thread is about to wait (on PostgreSQL, on a timer): calls what the thread
 * registered with srv_thread_on_block, if anything. A session's engine calls it before each of
 * its waits (bf_config.on_block). The native transport's threads register the lending of their
 * place (native.c "Active threads"); other threads register nothing. */
void srv_thread_blocks(void);
void srv_thread_on_block(void (*fn)(void *arg), void *arg);

/* ---- one request (dispatch.c) ----------------------------------------------------------- */

typedef struct srv_call srv_call;
struct srv_call {
    srv_session *session;
    const srv_identity *who;
    const srv_peer *peer;
    char method[96];                    /* full method name */
    char request_id[BF_REQUEST_ID_MAX]; /* lower-case hex of the envelope's request_id, "" */
    int64_t deadline_us;                /* CLOCK_MONOTONIC microseconds; 0 = none */
    /* set by the handler through srv_call_status(); OK unless set */
    srv_code code;
    char message[SRV_MESSAGE_MAX_LEN + 1];
    char detail[SRV_DETAIL_MAX_LEN];
    /* set by the dispatcher's closure: the packed response body, if any */
    uint8_t *body;
    size_t body_len;
    bool closed;
    /* the transport waits on sockets for its requests (srv_dispatch_begin): a handler may
     * then defer its answer (srv_call_defer) instead of waiting on PostgreSQL */
    bool may_defer;
    int defer_fd;
    void (*resume)(srv_call *call, void *arg);
    void *resume_arg;
};

/* Set the call's status (message bounded and redacted by the caller's choice of text). */
void srv_call_status(srv_call *call, srv_code code, const char *message, const char *detail_fmt,
                     ...) __attribute__((format(printf, 4, 5)));
/* Microseconds left before the deadline (INT64_MAX without one; <= 0 when passed). */
int64_t srv_call_remaining_us(const srv_call *call);
/* The srv_call behind a protoc-c closure_data pointer. */
#define SRV_CALL(closure_data) ((srv_call *)(closure_data))
/* Instead of waiting for PostgreSQL (only when call->may_defer): the handler sent its statement
 * and returns without answering; resume(call, arg) runs on some transport thread once fd is
 * readable, and either answers (srv_call_answer) or defers again. */
void srv_call_defer(srv_call *call, int fd, void (*resume)(srv_call *call, void *arg), void *arg);
/* A deferred handler's answer: what it would have passed to its closure (NULL: the status set). */
void srv_call_answer(srv_call *call, const ProtobufCMessage *msg);

typedef struct srv_dispatcher srv_dispatcher;

/* Per-method requirements, in the service descriptor's method order. */
typedef struct srv_method_policy {
    uint32_t caps;   /* capabilities required */
    bool audited;    /* control/validate: every rejection is audited */
    size_t max_body; /* bytes of the request body; 0: SRV_BODY_MAX_DEFAULT */
} srv_method_policy;

bf_err srv_dispatcher_new(srv_dispatcher **out, srv_context *ctx);
void srv_dispatcher_free(srv_dispatcher *d);
/* Register a service implementation; policies has service->descriptor->n_methods entries. */
bf_err srv_dispatcher_add(srv_dispatcher *d, ProtobufCService *service,
                          const srv_method_policy *policies);
/*
 * Handle one request message end to end and produce the response envelope (malloc'd, caller
 * frees) in *out. Every failure becomes a typed status in the response; BF_OK unless even
 * that could not be produced (out of memory). received_us is CLOCK_MONOTONIC at receipt.
 */
bf_err srv_dispatch(srv_dispatcher *d, srv_session *session, const srv_peer *peer,
                    const uint8_t *in, size_t in_len, int64_t received_us, uint8_t **out,
                    size_t *out_len);

/* A request whose handler waits on PostgreSQL without holding a thread. */
typedef struct srv_pending srv_pending;
/*
 * srv_dispatch() for a transport that can wait on many sockets at once: a handler may leave the
 * request pending (*pending set, nothing in *out): wait until srv_pending_fd() is readable, then
 * srv_dispatch_resume(). in, peer and the session stay the request's until it is answered.
 */
bf_err srv_dispatch_begin(srv_dispatcher *d, srv_session *session, const srv_peer *peer,
                          const uint8_t *in, size_t in_len, int64_t received_us,
                          srv_pending **pending, uint8_t **out, size_t *out_len);
int srv_pending_fd(const srv_pending *p);
/* Go on with a pending request whose socket is readable: *pending stays set while it still
 * waits (wait again, perhaps on another srv_pending_fd()); otherwise it is freed and the
 * answer is in *out, as srv_dispatch() gives it. */
bf_err srv_dispatch_resume(srv_pending **pending, uint8_t **out, size_t *out_len);

/* ---- request decoding (decode.c) -------------------------------------------------------- */

#define SRV_BODY_MAX_DEFAULT 4096 /* bytes of a request body when a policy sets no cap */
/* Bytes the protobuf-c decode of one request body may hold, for a method whose body cap is cap:
 * twice the body (its strings and bytes copied, with their records) plus 64 KiB of structs. */
#define SRV_DECODE_BUDGET(cap) ((size_t)64 * 1024 + 2 * (size_t)(cap))
#define SRV_DECODE_DEPTH_MAX   16 /* nested messages srv_wire_check_strings follows */

/* Bytes of one field inside a received message (not a copy: valid while the message is). */
typedef struct srv_span {
    const uint8_t *data;
    size_t len;
    bool present;
} srv_span;

/* What srv_dispatch needs of a RequestEnvelope, read straight off the wire. */
typedef struct srv_envelope {
    srv_span method, request_id, token, body;
    bool has_deadline_ms;
    uint32_t deadline_ms;
    /* the first string field of the envelope that holds a NUL byte, NULL when none does */
    const ProtobufCFieldDescriptor *nul_field;
} srv_envelope;

/*
 * Read a RequestEnvelope without allocating: the fields above as spans into in (the last
 * occurrence of each wins), unknown fields skipped. BF_ERR_INVALID_ARGUMENT exactly when
 * protobuf-c's unpack would refuse the bytes (malformed wire format, a known field in another
 * wire type). *out is written only on BF_OK.
 */
bf_err srv_envelope_scan(srv_envelope *out, const uint8_t *in, size_t len);
/* The last occurrence of the non-repeated string field name of desc in the message bytes (a
 * span, NUL bytes and all). false when there is none or the bytes are not well-formed. */
bool srv_wire_last_string(const ProtobufCMessageDescriptor *desc, const char *name,
                          const uint8_t *data, size_t len, srv_span *out);
/*
 * Every string field of the message (desc), repeated and nested ones included, must hold no
 * NUL byte (its wire length must be its C length). BF_OK; BF_ERR_INVALID_ARGUMENT with
 * *nul_field set to the first offending field; BF_ERR_INVALID_ARGUMENT with *nul_field NULL
 * when the bytes are not well-formed or nest deeper than SRV_DECODE_DEPTH_MAX. Allocates nothing.
 */
bf_err srv_wire_check_strings(const ProtobufCMessageDescriptor *desc, const uint8_t *data,
                              size_t len, const ProtobufCFieldDescriptor **nul_field);

/* A protobuf-c allocator that fails once the blocks it holds would exceed limit bytes (their
 * headers counted). Pass &allocator to *_unpack and to the matching free_unpacked. One request,
 * one thread. */
typedef struct srv_budget {
    ProtobufCAllocator allocator;
    size_t limit;
    size_t used;   /* bytes held now */
    size_t peak;   /* most bytes held at once */
    bool exceeded; /* an allocation was refused */
} srv_budget;

void srv_budget_init(srv_budget *b, size_t limit);

/* ---- audit of unauthenticated rejections (reject.c) ------------------------------------- */

#define SRV_REJECT_WINDOW_MS 10000 /* a coalescing window */
#define SRV_REJECT_BURST     8     /* rejections of a window written one by one, per key */
#define SRV_REJECT_KEYS      256   /* keys (peer, action, reason) counted at once */
/* Over all keys: rows written one by one per window (beyond: counted; 256, not lower, since an
 * operator's burst of refused requests is audited row by row: conformance 9 alone refuses about
 * 70 in a second), and the aggregate keys (action, listener kind, reason) that count the
 * attempts of new peers while every key above holds an open window (reject.c's design notes). */
#define SRV_REJECT_GLOBAL_BURST 256
#define SRV_REJECT_AGG_KEYS     32

typedef struct srv_rejects srv_rejects;

/* Starts the flusher thread, which writes counted rejections when their window closes. */
bf_err srv_rejects_new(srv_rejects **out, srv_context *ctx);
/* Writes every count still held (on the flusher's own engine session), then frees. NULL is a
 * no-op. Call after the request threads stopped: a later srv_rejects_audit is lost. */
void srv_rejects_free(srv_rejects *r);
/*
 * Audit an unauthenticated rejection of an audited method: written at once (bf_audit_rejection
 * on session's engine) while its key (action, who->authority, err, outcome) has had fewer than
 * SRV_REJECT_BURST rows in the current window and all keys together fewer than
 * SRV_REJECT_GLOBAL_BURST, else counted for the window's coalesced row (of its key, or of its
 * aggregate when the table is full of open windows).
 * Returns the write's error (BF_OK when counted); the caller logs it. Thread-safe.
 */
bf_err srv_rejects_audit(srv_rejects *r, srv_session *session, const char *action, const char *id,
                         const bf_actor *who, bf_err err, const char *outcome);
/* Tests only: windows opened from now on last window_ms. */
void srv_rejects_set_window_for_testing(srv_rejects *r, int window_ms);

/* ---- services (admin.c, readiness.c) ---------------------------------------------------- */

/* The Admin service and its method policies (descriptor order). */
ProtobufCService *srv_admin_service(void);
const srv_method_policy *srv_admin_policies(void);
/* Admin.Preflight (admin_preflight.c): bf_preflight() of the IDs asked for, or of a page of
 * this process's registry, on the calling thread's engine session; read-only, not audited. */
void srv_admin_preflight(const Buzz__Backfill__V1__PreflightRequest *in,
                         Buzz__Backfill__V1__PreflightResponse_Closure closure, void *closure_data);
ProtobufCService *srv_readiness_service(void);
const srv_method_policy *srv_readiness_policies(void);

/* One Readiness.Check decision without waiting, as plain values (the HTTP /readyz and the
 * metrics): the same computation as Check on the session's engine. verdict: 1 ready, 0 not
 * ready (some component NOT_READY), -1 unknown (no component NOT_READY, one UNKNOWN: the
 * database could not be read). */
#define SRV_READINESS_COMPONENTS 3
typedef struct srv_readiness_view {
    int verdict;
    struct {
        const char *name;   /* "database", "schema", "backfills" */
        const char *status; /* "ready", "not_ready", "unknown" */
        char reason[200];
    } components[SRV_READINESS_COMPONENTS];
    int gating; /* required backfills keeping the gate closed */
    bool auto_migrate, auto_backfill;
} srv_readiness_view;
void srv_readiness_evaluate(srv_session *session, srv_readiness_view *out);

/* ---- conversions (convert.c) ------------------------------------------------------------ */

/* The one table from engine errors to wire status codes. */
srv_code srv_code_from_err(bf_err err);
/* A Backfill message with storage for its sub-messages. Strings point into the row: keep the
 * row alive while the message is used. Unknown values stay absent. */
typedef struct srv_backfill_msg {
    Buzz__Backfill__V1__Backfill backfill;
    Buzz__Backfill__V1__Definition definition;
    Buzz__Backfill__V1__Claim claim;
    Buzz__Backfill__V1__Retry retry;
    Buzz__Backfill__V1__Diagnostic error;
    Buzz__Backfill__V1__Validation validation;
    Buzz__Backfill__V1__Progress progress;
    Buzz__Backfill__V1__Times times;
    Buzz__Backfill__V1__Throttle throttle;
    Buzz__Backfill__V1__Slow slow;
    Buzz__Backfill__V1__ValidationProgress validation_progress;
    Buzz__Backfill__V1__OldWriters old_writers;
} srv_backfill_msg;

void srv_backfill_msg_init(srv_backfill_msg *m, const bf_backfill *row, bool gating);
Buzz__Backfill__V1__State srv_state_to_proto(bf_state state);

#endif /* BUZZ_SRV_H */
