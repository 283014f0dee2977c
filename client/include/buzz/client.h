/*
 * buzz/client.h - libbuzz-backfill-client: talk to buzz-backfilld over nng REQ/REP.
 *
 * The protoc-c generated stubs are the client API: bfc_admin() and bfc_readiness() return a
 * ProtobufCService whose invoke sends one RequestEnvelope and calls the closure with the
 * unpacked response, e.g.
 *
 *     buzz__backfill__v1__admin__get(bfc_admin(c), &req, on_get, &data);
 *
 * The closure gets the response message for OK and for FAILED_PRECONDITION (a conflict: the
 * message carries the current state), and NULL otherwise; read bfc_last_status() inside or
 * after the closure for the code, message and detail. The message passed to the closure is
 * freed when the closure returns. bfc_call() is the synchronous form of the same thing.
 *
 * Request IDs: every logical call gets a fresh random 16-byte request ID, reused verbatim on
 * every retry of that call, so the server recognises a retried control and answers it with the
 * stored outcome. bfc_set_next_request_id() pins the ID of the next call (a CLI's
 * --request-id, or a test repeating a request whose response was lost).
 *
 * Time: timeout_ms is the budget of one logical call, retries included. Each attempt waits
 * for an answer at most the budget left divided by the attempts left, and sends that wait as
 * its deadline_ms (the server gives up rather than answer an attempt nobody waits for any
 * more). With retries = -1 the single attempt gets the whole budget: use that for calls that
 * wait on purpose (Readiness.Check with wait_ms). Only transport failures are retried (no
 * answer in time); a lost connection is re-established and the request resent by nng within
 * the attempt. A typed answer from the server is final.
 *
 * Errors: every function returns a bf_err (buzz/err.h); out-parameters are written only on
 * success. Server status codes map to bf_err with bfc_err_from_code(); the full status stays
 * readable in bfc_last_status(). Texts from the server are bounded and stripped of control
 * characters before the caller sees them.
 *
 * Threading: a bfc_client is used by one thread at a time (open one per thread).
 */
#ifndef BUZZ_CLIENT_H
#define BUZZ_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "buzz/err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BFC_REQUEST_ID_LEN     16                 /* bytes of a request ID */
#define BFC_MESSAGE_MAX        201                /* Status.message bound + terminator */
#define BFC_DETAIL_MAX         512                /* Status.detail bound, terminator included */
#define BFC_MAX_REQUEST        (1024 * 1024)      /* the server refuses larger request envelopes */
#define BFC_MAX_RESPONSE       (17 * 1024 * 1024) /* largest response accepted */
#define BFC_DEFAULT_TIMEOUT_MS 10000
#define BFC_DEFAULT_RETRIES    2

typedef struct bfc_client bfc_client;

typedef struct bfc_options {
    const char *token;       /* capability token "bbt1...."; NULL on an ipc:// boundary listener */
    int timeout_ms;          /* budget of one logical call, retries included; 0 = default */
    int retries;             /* attempts after the first on a transport failure; -1 = none,
                                0 = default */
    const char *tls_ca_file; /* tls+tcp://: PEM CA (or the server's self-signed cert) */
    const char *tls_server_name; /* tls+tcp://: name to verify; default the URL's host */
} bfc_options;

/* What the last call produced. */
typedef struct bfc_status {
    bool answered; /* a response envelope arrived (code, message and detail are the server's) */
    int code;      /* Buzz__Backfill__V1__StatusCode; 0 (OK) */
    char message[BFC_MESSAGE_MAX];
    char detail[BFC_DETAIL_MAX];
    bool has_body;    /* the response carried a body (OK, FAILED_PRECONDITION) */
    bf_err transport; /* BF_OK, or why no usable answer arrived: BF_ERR_TIMEOUT (no answer in
                         time), BF_ERR_UNAVAILABLE (not connected), BF_ERR_IO (malformed or
                         mismatched answer), BF_ERR_RESOURCE_EXHAUSTED (request too large) */
    char transport_detail[128]; /* bounded client-side detail for transport, "" when BF_OK */
    int attempts;               /* requests sent for this call */
    char request_id[2 * BFC_REQUEST_ID_LEN + 1]; /* lower-case hex of the call's request ID */
    bool request_id_echoed;                      /* the response echoed that ID */
} bfc_status;

/*
 * Connect to url ("ipc:///run/buzz/backfilld.sock", "tcp://host:7400", "tls+tcp://host:7401").
 * opts may be NULL (defaults, no token). Fails with BF_ERR_UNAVAILABLE when nothing answers
 * at url now; once connected, the connection is re-established automatically. diag (may be
 * NULL) gets a short reason on error.
 */
bf_err bfc_open(bfc_client **out, const char *url, const bfc_options *opts, char *diag,
                size_t diag_len);
/*
 * Close the connection and free c (NULL is a no-op). Returns within BFC_CLOSE_BOUND_MS: nng
 * 1.5.2 can wedge its pipe reaper (seen after a request timed out), and its socket close then
 * never returns. The close runs on a thread of its own; when it has not returned by the bound,
 * bfc_close returns anyway and that thread frees the socket and c if it ever does (the token is
 * wiped before; a program that exits loses nothing; a long-lived one keeps one stuck thread and
 * socket per such close).
 */
#define BFC_CLOSE_BOUND_MS 1000
void bfc_close(bfc_client *c);

/* Replace the token sent with later calls (NULL: none). The string is copied. */
bf_err bfc_set_token(bfc_client *c, const char *token);

/* Use id as the request ID of the next logical call only (and of its retries). */
void bfc_set_next_request_id(bfc_client *c, const uint8_t id[BFC_REQUEST_ID_LEN]);

/* The status of the last call (valid until the next call on c). */
const bfc_status *bfc_last_status(const bfc_client *c);

/* ProtobufCService implementations for the generated stubs; owned by c. */
ProtobufCService *bfc_admin(bfc_client *c);
ProtobufCService *bfc_readiness(bfc_client *c);

/*
 * Call service.method synchronously. On an answer with a body (OK, FAILED_PRECONDITION) and
 * output != NULL, *output receives the unpacked response (free it with
 * protobuf_c_message_free_unpacked(*output, NULL)). Returns BF_OK for status OK, the mapped
 * bf_err of any other status (BF_ERR_CONFLICT for FAILED_PRECONDITION: *output is set), or the
 * transport error. status (may be NULL) receives a copy of bfc_last_status().
 */
bf_err bfc_call(bfc_client *c, const ProtobufCServiceDescriptor *service, const char *method,
                const ProtobufCMessage *input, ProtobufCMessage **output, bfc_status *status);

/*
 * The lifecycle controls a client may send: exactly start, pause, resume, retry and validate
 * (the spec's supported actions). There is deliberately no way to name another one: no reset,
 * rewind, bound change, deletion, force completion or cancellation.
 */
typedef enum bfc_action {
    BFC_ACTION_START = 1,
    BFC_ACTION_PAUSE = 2,
    BFC_ACTION_RESUME = 3,
    BFC_ACTION_RETRY = 4,
    BFC_ACTION_VALIDATE = 5,
} bfc_action;
#define BFC_ACTION_COUNT 5

/* "start", "pause", "resume", "retry", "validate"; NULL for anything else. */
const char *bfc_action_name(int action);
/* The action named name; BF_ERR_INVALID_ARGUMENT (out untouched) for any other name. */
bf_err bfc_action_parse(bfc_action *out, const char *name);

/*
 * Send one supported control for id: Admin.Start/Pause/Resume/Retry (ControlResponse) or
 * Admin.Validate (ValidateResponse), with the same request-ID, retry and status rules as
 * bfc_call(). An action outside bfc_action is refused with BF_ERR_INVALID_ARGUMENT before
 * anything is sent (status->attempts is 0). Validate is sent as one attempt with the whole
 * budget: a retry would only meet the running validation ("still running").
 */
bf_err bfc_control(bfc_client *c, int action, const char *id, ProtobufCMessage **output,
                   bfc_status *status);

/* The bf_err a wire status code stands for (OK -> BF_OK, FAILED_PRECONDITION ->
 * BF_ERR_CONFLICT, DEADLINE_EXCEEDED -> BF_ERR_TIMEOUT, ABORTED -> BF_ERR_BUSY, UNIMPLEMENTED
 * -> BF_ERR_INVALID_ARGUMENT, unknown -> BF_ERR_INTERNAL ...). */
bf_err bfc_err_from_code(int code);

/* Lower-case name of a status code ("failed_precondition"); "unknown" for others. */
const char *bfc_code_name(int code);

#ifdef __cplusplus
}
#endif
#endif /* BUZZ_CLIENT_H */
