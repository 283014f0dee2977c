/*
 * client.c - libbuzz-backfill-client: a ProtobufCService over an nng REQ socket, so the
 * protoc-c generated stubs are the client API; request IDs, retries, deadlines and the typed,
 * bounded status of every call.
 *
 * Design notes: nng's own REQ resend is disabled; this file retries instead, so that every
 * attempt carries the budget left as its deadline and the caller's budget is never exceeded.
 * A new send on a REQ socket abandons the previous attempt: a late answer to it is discarded
 * by nng. The request ID in the envelope is the same on every attempt of one logical call.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>
#include <sodium.h>

#include "buzz/backfill/v1/admin.pb-c.h"
#include "buzz/backfill/v1/readiness.pb-c.h"
#include "buzz/backfill/v1/rpc.pb-c.h"
#include "buzz/bounded.h"
#include "buzz/client.h"
#include "buzz/status.h"

typedef struct bfc_service {
    ProtobufCService base; /* first: the stubs see &base */
    bfc_client *client;
} bfc_service;

struct bfc_client {
    nng_socket sock;
    bool sock_open;
    nng_dialer dialer;
    nng_tls_config *tls;
    char *token;
    int timeout_ms;
    int retries;
    bool pinned;
    uint8_t next_id[BFC_REQUEST_ID_LEN];
    bfc_status status;
    bfc_service admin;
    bfc_service readiness;
};

static int64_t bfc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Copy server text: bounded, control characters replaced, cut on a UTF-8 boundary. */
static void bfc_copy_text(char *dst, size_t cap, const char *src)
{
    dst[0] = '\0';
    if (src == NULL)
        return;
    size_t n = strlen(src);
    if (n >= cap) {
        n = cap - 1;
        while (n > 0 && ((unsigned char)src[n] & 0xc0) == 0x80)
            n--;
    }
    for (size_t i = 0; i < n; i++)
        dst[i] = ((unsigned char)src[i] < 0x20 || src[i] == 0x7f) ? '?' : src[i];
    dst[n] = '\0';
}

static bf_err bfc_transport_error(bfc_client *c, bf_err err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bf_err bfc_transport_error(bfc_client *c, bf_err err, const char *fmt, ...)
{
    c->status.transport = err;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->status.transport_detail, sizeof c->status.transport_detail, fmt, ap);
    va_end(ap);
    return err;
}

/* ---- codes ------------------------------------------------------------------------------- */

bf_err bfc_err_from_code(int code)
{
    return bf_status_to_err(code);
}

const char *bfc_code_name(int code)
{
    return bf_status_name(code);
}

/* ---- calls ------------------------------------------------------------------------------- */

/* Parse one reply into c->status (and *output). BF_OK when it is a usable answer. */
static bf_err bfc_take_reply(bfc_client *c, const uint8_t *id, const ProtobufCMethodDescriptor *m,
                             nng_msg *reply, ProtobufCMessage **output)
{
    Buzz__Backfill__V1__ResponseEnvelope *r = buzz__backfill__v1__response_envelope__unpack(
        NULL, nng_msg_len(reply), nng_msg_body(reply));
    if (r == NULL || r->status == NULL) {
        if (r != NULL)
            buzz__backfill__v1__response_envelope__free_unpacked(r, NULL);
        return bfc_transport_error(c, BF_ERR_IO, "malformed response");
    }
    bf_err err = BF_OK;
    if (r->has_request_id) {
        if (r->request_id.len != BFC_REQUEST_ID_LEN ||
            memcmp(r->request_id.data, id, BFC_REQUEST_ID_LEN) != 0) {
            err = bfc_transport_error(c, BF_ERR_IO, "response belongs to another request");
            goto done;
        }
        c->status.request_id_echoed = true;
    }
    ProtobufCMessage *out = NULL;
    if (r->has_body && output != NULL) {
        out = protobuf_c_message_unpack(m->output, NULL, r->body.len, r->body.data);
        if (out == NULL) {
            err = bfc_transport_error(c, BF_ERR_IO, "malformed response body");
            goto done;
        }
    }
    c->status.answered = true;
    c->status.code = r->status->code;
    bfc_copy_text(c->status.message, sizeof c->status.message, r->status->message);
    bfc_copy_text(c->status.detail, sizeof c->status.detail, r->status->detail);
    c->status.has_body = r->has_body;
    if (output != NULL)
        *output = out;
done:
    buzz__backfill__v1__response_envelope__free_unpacked(r, NULL);
    return err;
}

/* Send env (deadline updated per attempt) until an answer arrives or the budget is spent. */
static bf_err bfc_exchange(bfc_client *c, Buzz__Backfill__V1__RequestEnvelope *env,
                           const uint8_t *id, const ProtobufCMethodDescriptor *m,
                           ProtobufCMessage **output)
{
    int64_t start = bfc_now_ms();
    int attempts = c->retries + 1;
    bf_err last = BF_ERR_TIMEOUT;
    const char *why = "no answer in time";
    for (int attempt = 0; attempt < attempts; attempt++) {
        int64_t left = c->timeout_ms - (bfc_now_ms() - start);
        if (left <= 0)
            break;
        /* this attempt is waited for at most `wait`: that is the server's deadline too */
        nng_duration wait = (nng_duration)(left / (attempts - attempt));
        if (wait < 1)
            wait = 1;
        env->has_deadline_ms = true;
        env->deadline_ms = (uint32_t)wait;
        size_t len = buzz__backfill__v1__request_envelope__get_packed_size(env);
        if (len > BFC_MAX_REQUEST)
            return bfc_transport_error(c, BF_ERR_RESOURCE_EXHAUSTED,
                                       "request of %zu bytes exceeds the %d byte limit", len,
                                       BFC_MAX_REQUEST);
        nng_msg *msg = NULL;
        if (nng_msg_alloc(&msg, len) != 0)
            return bfc_transport_error(c, BF_ERR_NOMEM, "out of memory");
        buzz__backfill__v1__request_envelope__pack(env, nng_msg_body(msg));
        nng_socket_set_ms(c->sock, NNG_OPT_SENDTIMEO, wait);
        nng_socket_set_ms(c->sock, NNG_OPT_RECVTIMEO, wait);
        int rv = nng_sendmsg(c->sock, msg, 0);
        if (rv != 0) {
            nng_msg_free(msg);
            if (rv == NNG_ECLOSED)
                return bfc_transport_error(c, BF_ERR_UNAVAILABLE, "connection closed");
            last = rv == NNG_ETIMEDOUT ? BF_ERR_TIMEOUT : BF_ERR_UNAVAILABLE;
            why = rv == NNG_ETIMEDOUT ? "not connected" : nng_strerror(rv);
            continue;
        }
        c->status.attempts++;
        nng_msg *reply = NULL;
        rv = nng_recvmsg(c->sock, &reply, 0);
        if (rv == 0) {
            bf_err err = bfc_take_reply(c, id, m, reply, output);
            nng_msg_free(reply);
            return err;
        }
        if (rv == NNG_ECLOSED)
            return bfc_transport_error(c, BF_ERR_UNAVAILABLE, "connection closed");
        last = rv == NNG_ETIMEDOUT ? BF_ERR_TIMEOUT : BF_ERR_UNAVAILABLE;
        why = rv == NNG_ETIMEDOUT ? "no answer in time" : nng_strerror(rv);
    }
    return bfc_transport_error(c, last, "%s after %d attempt(s) in %d ms", why, c->status.attempts,
                               c->timeout_ms);
}

static bf_err bfc_invoke(bfc_client *c, const ProtobufCServiceDescriptor *service,
                         const ProtobufCMethodDescriptor *m, const ProtobufCMessage *input,
                         ProtobufCMessage **output)
{
    memset(&c->status, 0, sizeof c->status);
    uint8_t id[BFC_REQUEST_ID_LEN];
    if (c->pinned)
        memcpy(id, c->next_id, sizeof id);
    else
        randombytes_buf(id, sizeof id);
    c->pinned = false;
    sodium_bin2hex(c->status.request_id, sizeof c->status.request_id, id, sizeof id);
    if (input == NULL || input->descriptor != m->input)
        return bfc_transport_error(c, BF_ERR_INVALID_ARGUMENT, "input is not a %s", m->input->name);

    char method[160];
    if ((size_t)snprintf(method, sizeof method, "%s.%s", service->name, m->name) >= sizeof method)
        return bfc_transport_error(c, BF_ERR_INVALID_ARGUMENT, "method name too long");
    size_t body_len = protobuf_c_message_get_packed_size(input);
    if (body_len > BFC_MAX_REQUEST)
        return bfc_transport_error(c, BF_ERR_RESOURCE_EXHAUSTED,
                                   "request of %zu bytes exceeds the %d byte limit", body_len,
                                   BFC_MAX_REQUEST);
    uint8_t *body = malloc(body_len ? body_len : 1);
    if (body == NULL)
        return bfc_transport_error(c, BF_ERR_NOMEM, "out of memory");
    protobuf_c_message_pack(input, body);

    Buzz__Backfill__V1__RequestEnvelope env = BUZZ__BACKFILL__V1__REQUEST_ENVELOPE__INIT;
    env.method = method;
    env.has_request_id = true;
    env.request_id.data = id;
    env.request_id.len = sizeof id;
    env.token = c->token;
    env.has_body = true;
    env.body.data = body;
    env.body.len = body_len;
    bf_err err = bfc_exchange(c, &env, id, m, output);
    free(body);
    if (err != BF_OK)
        return err;
    return bfc_err_from_code(c->status.code);
}

bf_err bfc_call(bfc_client *c, const ProtobufCServiceDescriptor *service, const char *method,
                const ProtobufCMessage *input, ProtobufCMessage **output, bfc_status *status)
{
    if (c == NULL || service == NULL || method == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    const ProtobufCMethodDescriptor *m =
        protobuf_c_service_descriptor_get_method_by_name(service, method);
    if (m == NULL) {
        memset(&c->status, 0, sizeof c->status);
        bf_err err = bfc_transport_error(c, BF_ERR_INVALID_ARGUMENT, "no method %s in %s", method,
                                         service->name);
        if (status != NULL)
            *status = c->status;
        return err;
    }
    ProtobufCMessage *out = NULL;
    bf_err err = bfc_invoke(c, service, m, input, output ? &out : NULL);
    if (status != NULL)
        *status = c->status;
    if (output != NULL && out != NULL)
        *output = out;
    return err;
}

/* ---- the supported controls -------------------------------------------------------------- */

static const struct {
    const char *name;
    const char *method;
} bfc_actions[BFC_ACTION_COUNT + 1] = {
    [BFC_ACTION_START] = {"start", "Start"},          [BFC_ACTION_PAUSE] = {"pause", "Pause"},
    [BFC_ACTION_RESUME] = {"resume", "Resume"},       [BFC_ACTION_RETRY] = {"retry", "Retry"},
    [BFC_ACTION_VALIDATE] = {"validate", "Validate"},
};

const char *bfc_action_name(int action)
{
    if (action < 1 || action > BFC_ACTION_COUNT)
        return NULL;
    return bfc_actions[action].name;
}

bf_err bfc_action_parse(bfc_action *out, const char *name)
{
    for (int a = 1; name != NULL && a <= BFC_ACTION_COUNT; a++) {
        if (strcmp(name, bfc_actions[a].name) == 0) {
            *out = (bfc_action)a;
            return BF_OK;
        }
    }
    return BF_ERR_INVALID_ARGUMENT;
}

bf_err bfc_control(bfc_client *c, int action, const char *id, ProtobufCMessage **output,
                   bfc_status *status)
{
    if (c == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    if (bfc_action_name(action) == NULL || id == NULL) {
        memset(&c->status, 0, sizeof c->status);
        bf_err err = bfc_transport_error(c, BF_ERR_INVALID_ARGUMENT, "unsupported control");
        if (status != NULL)
            *status = c->status;
        return err;
    }
    if (action == BFC_ACTION_VALIDATE) {
        /* validation may run for as long as the budget allows: a retry sent while the first
         * attempt still runs is answered "still running" (current-state), which is final, so
         * the one attempt gets the whole budget */
        Buzz__Backfill__V1__ValidateRequest req = BUZZ__BACKFILL__V1__VALIDATE_REQUEST__INIT;
        req.id = (char *)id;
        int retries = c->retries;
        c->retries = 0;
        bf_err err = bfc_call(c, &buzz__backfill__v1__admin__descriptor, "Validate", &req.base,
                              output, status);
        c->retries = retries;
        return err;
    }
    Buzz__Backfill__V1__ControlRequest req = BUZZ__BACKFILL__V1__CONTROL_REQUEST__INIT;
    req.id = (char *)id;
    return bfc_call(c, &buzz__backfill__v1__admin__descriptor, bfc_actions[action].method,
                    &req.base, output, status);
}

/* ---- services for the generated stubs ---------------------------------------------------- */

static void bfc_service_invoke(ProtobufCService *service, unsigned method_index,
                               const ProtobufCMessage *input, ProtobufCClosure closure,
                               void *closure_data)
{
    bfc_service *s = (bfc_service *)service;
    const ProtobufCServiceDescriptor *desc = service->descriptor;
    ProtobufCMessage *out = NULL;
    if (method_index < desc->n_methods)
        (void)bfc_invoke(s->client, desc, &desc->methods[method_index], input, &out);
    else
        bfc_transport_error(s->client, BF_ERR_INVALID_ARGUMENT, "no such method");
    if (closure != NULL)
        closure(out, closure_data);
    if (out != NULL)
        protobuf_c_message_free_unpacked(out, NULL);
}

static void bfc_service_destroy(ProtobufCService *service)
{
    (void)service; /* owned by the client */
}

static void bfc_service_init(bfc_service *s, bfc_client *c, const ProtobufCServiceDescriptor *d)
{
    s->base.descriptor = d;
    s->base.invoke = bfc_service_invoke;
    s->base.destroy = bfc_service_destroy;
    s->client = c;
}

ProtobufCService *bfc_admin(bfc_client *c)
{
    return c ? &c->admin.base : NULL;
}

ProtobufCService *bfc_readiness(bfc_client *c)
{
    return c ? &c->readiness.base : NULL;
}

/* ---- connection -------------------------------------------------------------------------- */

/* The host part of "tls+tcp://host:port" or "tls+tcp://[v6]:port". */
static bool bfc_url_host(const char *url, char *host, size_t cap)
{
    const char *p = strstr(url, "://");
    if (p == NULL)
        return false;
    p += 3;
    const char *end;
    if (*p == '[') {
        p++;
        end = strchr(p, ']');
    } else {
        end = strrchr(p, ':');
    }
    if (end == NULL || end == p || (size_t)(end - p) >= cap)
        return false;
    memcpy(host, p, (size_t)(end - p));
    host[end - p] = '\0';
    return true;
}

static bf_err bfc_tls_setup(bfc_client *c, const char *url, const bfc_options *o, char *diag,
                            size_t diag_len)
{
    if (o == NULL || o->tls_ca_file == NULL || o->tls_ca_file[0] == '\0')
        return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                           "tls+tcp needs a ca file to verify the server");
    char host[256];
    const char *name = o->tls_server_name;
    if (name == NULL) {
        if (!bfc_url_host(url, host, sizeof host))
            return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT, "invalid url");
        name = host;
    }
    int rv = nng_tls_config_alloc(&c->tls, NNG_TLS_MODE_CLIENT);
    if (rv == 0)
        rv = nng_tls_config_ca_file(c->tls, o->tls_ca_file);
    if (rv == 0)
        rv = nng_tls_config_server_name(c->tls, name);
    if (rv == 0)
        rv = nng_tls_config_auth_mode(c->tls, NNG_TLS_AUTH_MODE_REQUIRED);
    if (rv == 0)
        rv = nng_dialer_set_ptr(c->dialer, NNG_OPT_TLS_CONFIG, c->tls);
    if (rv != 0)
        return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT, "could not set up tls: %s",
                           nng_strerror(rv));
    return BF_OK;
}

bf_err bfc_open(bfc_client **out, const char *url, const bfc_options *opts, char *diag,
                size_t diag_len)
{
    if (out == NULL || url == NULL)
        return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT, "no url");
    bool tls = strncmp(url, "tls+tcp://", 10) == 0;
    if (strncmp(url, "ipc://", 6) != 0 && strncmp(url, "tcp://", 6) != 0 && !tls)
        return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                           "unsupported url (use ipc://, tcp:// or tls+tcp://)");
    if (opts != NULL && (opts->timeout_ms < 0 || opts->retries < -1 || opts->retries > 100))
        return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT, "invalid timeout or retries");
    if (sodium_init() < 0)
        return bf_diag_set(diag, diag_len, BF_ERR_INTERNAL, "could not initialise libsodium");
    bfc_client *c = calloc(1, sizeof *c);
    if (c == NULL)
        return BF_ERR_NOMEM;
    c->timeout_ms = opts && opts->timeout_ms ? opts->timeout_ms : BFC_DEFAULT_TIMEOUT_MS;
    c->retries = BFC_DEFAULT_RETRIES;
    if (opts != NULL && opts->retries != 0)
        c->retries = opts->retries < 0 ? 0 : opts->retries;
    bfc_service_init(&c->admin, c, &buzz__backfill__v1__admin__descriptor);
    bfc_service_init(&c->readiness, c, &buzz__backfill__v1__readiness__descriptor);
    bf_err err = bfc_set_token(c, opts ? opts->token : NULL);
    if (err != BF_OK)
        goto fail;
    int rv = nng_req0_open(&c->sock);
    if (rv != 0) {
        err = bf_diag_set(diag, diag_len, BF_ERR_INTERNAL, "could not open socket: %s",
                          nng_strerror(rv));
        goto fail;
    }
    c->sock_open = true;
    if ((rv = nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE)) != 0 ||
        (rv = nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, BFC_MAX_RESPONSE)) != 0 ||
        (rv = nng_socket_set_ms(c->sock, NNG_OPT_RECONNMINT, 50)) != 0 ||
        (rv = nng_socket_set_ms(c->sock, NNG_OPT_RECONNMAXT, 2000)) != 0 ||
        (rv = nng_dialer_create(&c->dialer, c->sock, url)) != 0) {
        err = bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT, "could not set up %s: %s", url,
                          nng_strerror(rv));
        goto fail;
    }
    if (tls && (err = bfc_tls_setup(c, url, opts, diag, diag_len)) != BF_OK)
        goto fail;
    rv = nng_dialer_start(c->dialer, 0);
    if (rv != 0) {
        err = bf_diag_set(diag, diag_len, BF_ERR_UNAVAILABLE, "could not connect to %s: %s", url,
                          nng_strerror(rv));
        goto fail;
    }
    *out = c;
    return BF_OK;
fail:
    bfc_close(c);
    return err;
}

/* The socket and the TLS configuration its dialer holds (bf_bounded_run's call). */
static void bfc_close_transport(void *arg)
{
    bfc_client *c = arg;
    if (c->sock_open)
        nng_close(c->sock);
    if (c->tls != NULL)
        nng_tls_config_free(c->tls);
}

void bfc_close(bfc_client *c)
{
    if (c == NULL)
        return;
    (void)bfc_set_token(c, NULL); /* wiped now, whether the close ends in time or not */
    if (!c->sock_open)            /* bfc_open failed before its socket: nothing nng could hold */
        bfc_close_transport(c);
    else if (!bf_bounded_run(bfc_close_transport, free, c, BFC_CLOSE_BOUND_MS))
        return; /* its thread frees c if the close ever returns */
    free(c);
}

bf_err bfc_set_token(bfc_client *c, const char *token)
{
    if (c == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    char *copy = NULL;
    if (token != NULL && (copy = strdup(token)) == NULL)
        return BF_ERR_NOMEM;
    if (c->token != NULL) {
        sodium_memzero(c->token, strlen(c->token));
        free(c->token);
    }
    c->token = copy;
    return BF_OK;
}

void bfc_set_next_request_id(bfc_client *c, const uint8_t id[BFC_REQUEST_ID_LEN])
{
    if (c == NULL || id == NULL)
        return;
    memcpy(c->next_id, id, BFC_REQUEST_ID_LEN);
    c->pinned = true;
}

const bfc_status *bfc_last_status(const bfc_client *c)
{
    return c ? &c->status : NULL;
}
