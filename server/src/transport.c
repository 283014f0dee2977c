/*
 * transport.c - the nng REP transport: one rep0 socket, a listener per configured URL (ipc://
 * with restricted socket file permissions, tcp://, tls+tcp:// with the configured certificate
 * and key), and a pool of threads that each own an nng context, an aio and a srv_session.
 *
 * Design notes
 *
 * Concurrency: every thread runs recv -> srv_dispatch -> send on its own context, so up to
 * `threads` requests are handled at once; the REP socket hands each request to one idle
 * context and routes each reply back to the pipe it came from.
 *
 * Peer facts: the listener a request arrived on is found from its pipe (nng_pipe_listener), so
 * boundary authority is granted only to requests that really came through the ipc:// listener;
 * the ipc peer uid comes from the kernel (NNG_OPT_IPC_PEER_UID).
 *
 * Size: nng refuses messages over SRV_MAX_MESSAGE + SRV_TRANSPORT_RECV_SLACK by dropping the
 * connection; between SRV_MAX_MESSAGE and that, the dispatcher answers RESOURCE_EXHAUSTED.
 *
 * Slow peers: a REP context hands its reply to the connection it came from; while that
 * connection is still writing an earlier reply (a peer that sent several requests and stopped
 * reading), the send waits. Sends therefore carry a timeout (send_timeout_ms): without it one
 * such peer could hold every thread forever and stop could never join them. A receive waits
 * without limit.
 *
 * Stop: a flag under the mutex stops threads from starting a new receive, and the context of
 * every thread that is waiting in recv is closed (its recv fails with NNG_ECLOSED). A thread
 * in the middle of a request finishes it and sends its reply before it sees the flag. The
 * socket, its listeners and their connections close only after every thread has returned;
 * nng completes a REP send when the reply is handed to the pipe, not when it is written, so
 * when replies were sent during stop the socket lingers briefly (nng has no linger option).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/supplemental/tls/tls.h>
#include <nng/supplemental/util/platform.h>
#include <sodium.h>

#include "transport.h"

#define TRANSPORT_DEFAULT_THREADS 4
#define TRANSPORT_PEM_MAX         (1 << 20)
#define TRANSPORT_LINGER_MS       200
#define TRANSPORT_SEND_TIMEOUT_MS 10000

typedef struct transport_listener {
    nng_listener listener;
    bool created;
    bool started;
    const char *kind; /* "ipc", "tcp", "tls" */
    char url[256];
} transport_listener;

typedef struct transport_worker {
    srv_transport *t;
    pthread_t thread;
    bool thread_started;
    nng_ctx ctx;
    bool ctx_open;
    nng_aio *aio;
    bool receiving; /* under t->mtx: waiting in recv, safe to close the context */
    srv_session session;
} transport_worker;

struct srv_transport {
    srv_dispatcher *d;
    srv_context *ctx;
    nng_socket sock;
    bool sock_open;
    nng_tls_config *tls;
    transport_listener listeners[SRV_TRANSPORT_MAX_LISTENERS];
    size_t n_listeners;
    transport_worker *workers;
    int n_workers;
    nng_duration send_timeout_ms;
    pthread_mutex_t mtx;
    bool stopping;
    bool started;
    int late_replies; /* under mtx: replies sent after stop began */
};

static void transport_log(const srv_transport *t, bf_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void transport_log(const srv_transport *t, bf_log_level level, const char *fmt, ...)
{
    if (t->ctx == NULL || t->ctx->engine_cfg.log == NULL)
        return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    t->ctx->engine_cfg.log(t->ctx->engine_cfg.log_arg, level, buf);
}

static const char *transport_kind(const char *url)
{
    if (strncmp(url, "ipc://", 6) == 0 && url[6] != '\0')
        return "ipc";
    if (strncmp(url, "tcp://", 6) == 0 && url[6] != '\0')
        return "tcp";
    if (strncmp(url, "tls+tcp://", 10) == 0 && url[10] != '\0')
        return "tls";
    return NULL;
}

/* Read a whole PEM file (bounded) into a NUL-terminated buffer the caller wipes and frees. */
static bf_err transport_read_pem(const char *path, char **out)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return errno == ENOENT ? BF_ERR_NOT_FOUND : BF_ERR_IO;
    char *buf = malloc(TRANSPORT_PEM_MAX + 1);
    if (buf == NULL) {
        fclose(f);
        return BF_ERR_NOMEM;
    }
    size_t n = fread(buf, 1, TRANSPORT_PEM_MAX + 1, f);
    bool bad = ferror(f) || n > TRANSPORT_PEM_MAX;
    fclose(f);
    if (bad) {
        sodium_memzero(buf, TRANSPORT_PEM_MAX + 1);
        free(buf);
        return BF_ERR_IO;
    }
    buf[n] = '\0';
    *out = buf;
    return BF_OK;
}

static void transport_free_pem(char *pem)
{
    if (pem == NULL)
        return;
    sodium_memzero(pem, strlen(pem));
    free(pem);
}

/* Server TLS configuration from a certificate (chain) and key. Clients are not asked for a
 * certificate: they authenticate with capability tokens. */
static bf_err transport_tls_new(srv_transport *t, const srv_transport_config *cfg, char *diag,
                                size_t diag_len)
{
    if (cfg->tls_cert_file == NULL || cfg->tls_cert_file[0] == '\0')
        return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                           "a tls+tcp listener needs a certificate and key");
    int rv = nng_tls_config_alloc(&t->tls, NNG_TLS_MODE_SERVER);
    if (rv != 0)
        return bf_diag_set(diag, diag_len, BF_ERR_INTERNAL, "could not set up tls: %s",
                           nng_strerror(rv));
    if (cfg->tls_key_file == NULL || strcmp(cfg->tls_key_file, cfg->tls_cert_file) == 0) {
        rv = nng_tls_config_cert_key_file(t->tls, cfg->tls_cert_file, NULL);
    } else {
        char *cert = NULL, *key = NULL;
        bf_err err = transport_read_pem(cfg->tls_cert_file, &cert);
        if (err == BF_OK)
            err = transport_read_pem(cfg->tls_key_file, &key);
        if (err != BF_OK) {
            transport_free_pem(cert);
            return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                               "could not read the tls certificate or key: %s", bf_err_str(err));
        }
        rv = nng_tls_config_own_cert(t->tls, cert, key, NULL);
        transport_free_pem(cert);
        transport_free_pem(key);
    }
    if (rv == 0)
        rv = nng_tls_config_auth_mode(t->tls, NNG_TLS_AUTH_MODE_NONE);
    if (rv != 0)
        return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                           "could not load the tls certificate and key: %s", nng_strerror(rv));
    return BF_OK;
}

static bf_err transport_listener_new(srv_transport *t, const char *url, int ipc_mode, char *diag,
                                     size_t diag_len)
{
    transport_listener *tl = &t->listeners[t->n_listeners];
    tl->kind = transport_kind(url);
    if (tl->kind == NULL || strlen(url) >= sizeof tl->url)
        return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                           "unsupported listener url (use ipc://, tcp:// or tls+tcp://)");
    snprintf(tl->url, sizeof tl->url, "%s", url);
    int rv = nng_listener_create(&tl->listener, t->sock, url);
    if (rv != 0)
        return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT, "invalid listener url %s: %s",
                           url, nng_strerror(rv));
    tl->created = true;
    t->n_listeners++;
    if (strcmp(tl->kind, "ipc") == 0)
        rv = nng_listener_set_int(tl->listener, NNG_OPT_IPC_PERMISSIONS, ipc_mode);
    else if (strcmp(tl->kind, "tls") == 0)
        rv = nng_listener_set_ptr(tl->listener, NNG_OPT_TLS_CONFIG, t->tls);
    if (rv != 0)
        return bf_diag_set(diag, diag_len, BF_ERR_INTERNAL, "could not configure %s: %s", url,
                           nng_strerror(rv));
    return BF_OK;
}

bf_err srv_transport_new(srv_transport **out, srv_dispatcher *d, srv_context *ctx,
                         const srv_transport_config *cfg, char *diag, size_t diag_len)
{
    if (out == NULL || d == NULL || ctx == NULL || cfg == NULL || cfg->urls == NULL ||
        cfg->n_urls == 0 || cfg->n_urls > SRV_TRANSPORT_MAX_LISTENERS || cfg->threads < 0 ||
        cfg->threads > SRV_TRANSPORT_MAX_THREADS || cfg->send_timeout_ms < 0)
        return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                           "invalid transport configuration");
    int ipc_mode = cfg->ipc_mode ? cfg->ipc_mode : 0600;
    if (ipc_mode != 0600 && ipc_mode != 0660)
        return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                           "ipc socket mode must be 0600 or 0660");
    srv_transport *t = calloc(1, sizeof *t);
    if (t == NULL)
        return BF_ERR_NOMEM;
    t->d = d;
    t->ctx = ctx;
    t->n_workers = cfg->threads ? cfg->threads : TRANSPORT_DEFAULT_THREADS;
    t->send_timeout_ms = cfg->send_timeout_ms ? cfg->send_timeout_ms : TRANSPORT_SEND_TIMEOUT_MS;
    pthread_mutex_init(&t->mtx, NULL);
    bf_err err = BF_OK;
    int rv = nng_rep0_open(&t->sock);
    if (rv != 0) {
        err = bf_diag_set(diag, diag_len, BF_ERR_INTERNAL, "could not open socket: %s",
                          nng_strerror(rv));
        goto fail;
    }
    t->sock_open = true;
    rv = nng_socket_set_size(t->sock, NNG_OPT_RECVMAXSZ,
                             (size_t)SRV_MAX_MESSAGE + SRV_TRANSPORT_RECV_SLACK);
    if (rv != 0) {
        err = bf_diag_set(diag, diag_len, BF_ERR_INTERNAL, "could not cap receive size: %s",
                          nng_strerror(rv));
        goto fail;
    }
    for (size_t i = 0; i < cfg->n_urls; i++) {
        const char *kind = cfg->urls[i] ? transport_kind(cfg->urls[i]) : NULL;
        if (kind != NULL && strcmp(kind, "tls") == 0 && t->tls == NULL) {
            err = transport_tls_new(t, cfg, diag, diag_len);
            if (err != BF_OK)
                goto fail;
        }
        err = transport_listener_new(t, cfg->urls[i] ? cfg->urls[i] : "", ipc_mode, diag, diag_len);
        if (err != BF_OK)
            goto fail;
    }
    *out = t;
    return BF_OK;
fail:
    srv_transport_free(t);
    return err;
}

/* Which listener a request came through, and the ipc peer uid. */
static void transport_peer(const srv_transport *t, nng_msg *msg, srv_peer *peer)
{
    memset(peer, 0, sizeof *peer);
    peer->listener = "unknown";
    nng_pipe pipe = nng_msg_get_pipe(msg);
    int id = nng_listener_id(nng_pipe_listener(pipe));
    for (size_t i = 0; i < t->n_listeners; i++) {
        if (id > 0 && nng_listener_id(t->listeners[i].listener) == id) {
            peer->listener = t->listeners[i].kind;
            break;
        }
    }
    uint64_t uid = 0;
    if (strcmp(peer->listener, "ipc") == 0 &&
        nng_pipe_get_uint64(pipe, NNG_OPT_IPC_PEER_UID, &uid) == 0 && uid <= UINT32_MAX) {
        peer->has_uid = true;
        peer->uid = (uint32_t)uid;
    }
    /* tcp/tls: the remote IP (no port: a new connection is the same peer), for the audit */
    nng_sockaddr sa;
    if (strcmp(peer->listener, "ipc") != 0 && nng_pipe_get_addr(pipe, NNG_OPT_REMADDR, &sa) == 0) {
        if (sa.s_family == NNG_AF_INET)
            inet_ntop(AF_INET, &sa.s_in.sa_addr, peer->addr, sizeof peer->addr);
        else if (sa.s_family == NNG_AF_INET6)
            inet_ntop(AF_INET6, sa.s_in6.sa_addr, peer->addr, sizeof peer->addr);
    }
}

/* Handle one received message and send the reply on the worker's context. */
static void transport_serve(transport_worker *w, nng_msg *msg)
{
    srv_transport *t = w->t;
    int64_t received_us = srv_now_us();
    srv_peer peer;
    transport_peer(t, msg, &peer);
    uint8_t *out = NULL;
    size_t out_len = 0;
    bf_err err = srv_dispatch(t->d, &w->session, &peer, nng_msg_body(msg), nng_msg_len(msg),
                              received_us, &out, &out_len);
    nng_msg_clear(msg);
    if (err != BF_OK || nng_msg_append(msg, out, out_len) != 0) {
        transport_log(t, BF_LOG_ERROR, "could not answer a request: %s",
                      err != BF_OK ? bf_err_str(err) : "out of memory");
        free(out);
        nng_msg_free(msg);
        return;
    }
    free(out);
    nng_aio_set_msg(w->aio, msg);
    nng_aio_set_timeout(w->aio, t->send_timeout_ms);
    nng_ctx_send(w->ctx, w->aio);
    nng_aio_wait(w->aio);
    int rv = nng_aio_result(w->aio);
    if (rv != 0) {
        nng_msg_free(msg);
        if (rv != NNG_ECLOSED)
            transport_log(t, BF_LOG_WARN, "could not send a reply: %s", nng_strerror(rv));
        return;
    }
    pthread_mutex_lock(&t->mtx);
    if (t->stopping)
        t->late_replies++;
    pthread_mutex_unlock(&t->mtx);
}

static void *transport_worker_main(void *arg)
{
    transport_worker *w = arg;
    srv_transport *t = w->t;
    for (;;) {
        pthread_mutex_lock(&t->mtx);
        bool stop = t->stopping;
        if (!stop)
            w->receiving = true;
        pthread_mutex_unlock(&t->mtx);
        if (stop)
            break;
        nng_aio_set_timeout(w->aio, NNG_DURATION_INFINITE);
        nng_ctx_recv(w->ctx, w->aio);
        nng_aio_wait(w->aio);
        pthread_mutex_lock(&t->mtx);
        w->receiving = false;
        pthread_mutex_unlock(&t->mtx);
        int rv = nng_aio_result(w->aio);
        if (rv == NNG_ECLOSED)
            break;
        if (rv != 0) {
            transport_log(t, BF_LOG_WARN, "receive failed: %s", nng_strerror(rv));
            continue;
        }
        transport_serve(w, nng_aio_get_msg(w->aio));
    }
    bf_engine_close(w->session.engine);
    w->session.engine = NULL;
    return NULL;
}

bf_err srv_transport_start(srv_transport *t, char *diag, size_t diag_len)
{
    if (t == NULL || t->started)
        return BF_ERR_INVALID_ARGUMENT;
    for (size_t i = 0; i < t->n_listeners; i++) {
        int rv = nng_listener_start(t->listeners[i].listener, 0);
        if (rv != 0)
            return bf_diag_set(diag, diag_len, BF_ERR_UNAVAILABLE, "could not listen on %s: %s",
                               t->listeners[i].url, nng_strerror(rv));
        t->listeners[i].started = true;
    }
    t->workers = calloc((size_t)t->n_workers, sizeof *t->workers);
    if (t->workers == NULL)
        return BF_ERR_NOMEM;
    for (int i = 0; i < t->n_workers; i++) {
        transport_worker *w = &t->workers[i];
        w->t = t;
        w->session.ctx = t->ctx;
        int rv = nng_ctx_open(&w->ctx, t->sock);
        if (rv == 0) {
            w->ctx_open = true;
            rv = nng_aio_alloc(&w->aio, NULL, NULL);
        }
        if (rv != 0)
            return bf_diag_set(diag, diag_len, BF_ERR_INTERNAL,
                               "could not set up request context: %s", nng_strerror(rv));
    }
    t->started = true;
    for (int i = 0; i < t->n_workers; i++) {
        transport_worker *w = &t->workers[i];
        if (pthread_create(&w->thread, NULL, transport_worker_main, w) != 0)
            return bf_diag_set(diag, diag_len, BF_ERR_INTERNAL, "could not start request thread");
        w->thread_started = true;
    }
    return BF_OK;
}

bf_err srv_transport_bound_port(const srv_transport *t, size_t listener_index, int *port_out)
{
    if (t == NULL || port_out == NULL || listener_index >= t->n_listeners)
        return BF_ERR_INVALID_ARGUMENT;
    const transport_listener *tl = &t->listeners[listener_index];
    if (!tl->started || strcmp(tl->kind, "ipc") == 0)
        return BF_ERR_INVALID_ARGUMENT;
    int port = 0;
    if (nng_listener_get_int(tl->listener, NNG_OPT_TCP_BOUND_PORT, &port) != 0)
        return BF_ERR_INTERNAL;
    *port_out = port;
    return BF_OK;
}

void srv_transport_stop(srv_transport *t)
{
    if (t == NULL)
        return;
    pthread_mutex_lock(&t->mtx);
    t->stopping = true;
    for (int i = 0; t->workers != NULL && i < t->n_workers; i++) {
        transport_worker *w = &t->workers[i];
        if (w->receiving && w->ctx_open) {
            nng_ctx_close(w->ctx);
            w->ctx_open = false;
        }
    }
    pthread_mutex_unlock(&t->mtx);
    for (int i = 0; t->workers != NULL && i < t->n_workers; i++) {
        transport_worker *w = &t->workers[i];
        if (w->thread_started) {
            pthread_join(w->thread, NULL);
            w->thread_started = false;
        }
    }
    for (int i = 0; t->workers != NULL && i < t->n_workers; i++) {
        transport_worker *w = &t->workers[i];
        if (w->ctx_open) {
            nng_ctx_close(w->ctx);
            w->ctx_open = false;
        }
        nng_aio_free(w->aio);
        w->aio = NULL;
        bf_engine_close(w->session.engine);
        w->session.engine = NULL;
    }
    /* a reply handed to nng is written by its pipe after the send completes: give the replies
     * of requests that finished during stop a moment on the wire before the pipes close */
    pthread_mutex_lock(&t->mtx);
    bool linger = t->late_replies > 0;
    t->late_replies = 0;
    pthread_mutex_unlock(&t->mtx);
    if (linger && t->sock_open)
        nng_msleep(TRANSPORT_LINGER_MS);
    if (t->sock_open) {
        nng_close(t->sock); /* closes the listeners and their connections */
        t->sock_open = false;
    }
}

void srv_transport_free(srv_transport *t)
{
    if (t == NULL)
        return;
    srv_transport_stop(t);
    free(t->workers);
    if (t->tls != NULL)
        nng_tls_config_free(t->tls);
    pthread_mutex_destroy(&t->mtx);
    free(t);
}
