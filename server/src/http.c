/*
 * http.c - the HTTP listener: /metrics, /livez and /readyz on nng's HTTP server, with a scrape
 * thread that owns the listener's PostgreSQL session.
 *
 * Design notes: nng calls a handler on one of its own task threads with the connection's aio;
 * blocking there would stall nng's I/O, which the RPC transport shares. So /metrics and /readyz
 * only queue the aio (bounded: a full queue answers 503) and the scrape thread answers it
 * later, completing the aio itself. /readyz is srv_readiness_evaluate(): the very computation
 * of Readiness.Check, not a copy. A database that cannot be read makes /readyz answer 503
 * "unknown" and leaves the database values out of /metrics. At shutdown the listener stops
 * first (no new request), then the thread answers what is still queued and exits.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/supplemental/http/http.h>

#include "http.h"
#include "log.h"

enum { HTTP_METRICS = 1, HTTP_READYZ = 2, HTTP_LIVEZ = 3 };

typedef struct http_job {
    nng_aio *aio;
    int kind;
} http_job;

struct srv_http {
    nng_http_server *server;
    bool started;
    srv_context ctx; /* the template with the scrape session's short timeouts */
    srv_session session;
    srv_metrics *metrics;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    http_job queue[SRV_HTTP_QUEUE_MAX];
    int head, count;
    bool stopping;
};

static const int http_kinds[] = {HTTP_METRICS, HTTP_READYZ, HTTP_LIVEZ};
static const char *const http_paths[] = {"/metrics", "/readyz", "/livez"};

/* Complete aio with a response (status, content type, body); on failure an empty 500. */
static void http_answer(nng_aio *aio, uint16_t status, const char *type, const char *body,
                        size_t len)
{
    nng_http_res *res = NULL;
    int rv = nng_http_res_alloc(&res);
    if (rv == 0)
        rv = nng_http_res_set_status(res, status);
    if (rv == 0)
        rv = nng_http_res_set_header(res, "Content-Type", type);
    if (rv == 0)
        rv = nng_http_res_set_header(res, "Cache-Control", "no-store");
    if (rv == 0)
        rv = nng_http_res_copy_data(res, body, len);
    if (rv != 0) {
        nng_http_res_free(res);
        nng_aio_finish(aio, rv);
        return;
    }
    nng_aio_set_output(aio, 0, res);
    nng_aio_finish(aio, 0);
}

static void http_text(nng_aio *aio, uint16_t status, const char *text)
{
    http_answer(aio, status, "text/plain; charset=utf-8", text, strlen(text));
}

/* JSON string contents: quotes, backslashes and control bytes escaped, bounded by cap. */
static size_t http_json_escape(char *out, size_t cap, const char *s)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0' && n + 7 < cap; p++) {
        if (*p == '"' || *p == '\\') {
            out[n++] = '\\';
            out[n++] = (char)*p;
        } else if (*p < 0x20) {
            n += (size_t)snprintf(out + n, cap - n, "\\u%04x", *p);
        } else {
            out[n++] = (char)*p;
        }
    }
    out[n] = '\0';
    return n;
}

static void http_readyz(srv_http *h, nng_aio *aio)
{
    srv_readiness_view v;
    srv_readiness_evaluate(&h->session, &v);
    const char *status = v.verdict > 0 ? "ready" : v.verdict == 0 ? "not_ready" : "unknown";
    char body[2048];
    int n = snprintf(body, sizeof body,
                     "{\"status\":\"%s\",\"ready\":%s,\"auto_migrate\":%s,\"auto_backfill\":%s,"
                     "\"gating\":%d,\"components\":[",
                     status, v.verdict > 0 ? "true" : "false", v.auto_migrate ? "true" : "false",
                     v.auto_backfill ? "true" : "false", v.gating);
    for (int i = 0; i < SRV_READINESS_COMPONENTS && v.components[i].name != NULL; i++) {
        char reason[420];
        http_json_escape(reason, sizeof reason, v.components[i].reason);
        n += snprintf(body + n, sizeof body - (size_t)n,
                      "%s{\"name\":\"%s\",\"status\":\"%s\",\"reason\":\"%s\"}", i ? "," : "",
                      v.components[i].name, v.components[i].status, reason);
    }
    n += snprintf(body + n, sizeof body - (size_t)n, "]}\n");
    http_answer(aio, v.verdict > 0 ? 200 : 503, "application/json", body, strlen(body));
}

static void http_metrics(srv_http *h, nng_aio *aio)
{
    srv_metrics_scrape s;
    memset(&s, 0, sizeof s);
    s.auto_backfill = h->ctx.auto_backfill;
    int64_t t0 = srv_now_us();
    srv_readiness_view v;
    srv_readiness_evaluate(&h->session, &v);
    s.ready = v.verdict;
    bf_engine *e = NULL;
    if (srv_session_engine(&h->session, &e) == BF_OK && bf_stats_read(e, &s.stats) == BF_OK)
        s.has_stats = true;
    s.duration_us = srv_now_us() - t0;
    char *text = NULL;
    size_t len = 0;
    if (srv_metrics_render(h->metrics, &s, &text, &len) != BF_OK) {
        http_text(aio, 500, "out of memory\n");
        return;
    }
    http_answer(aio, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
    free(text);
}

static void *http_thread_main(void *arg)
{
    srv_http *h = arg;
    pthread_mutex_lock(&h->lock);
    for (;;) {
        while (h->count == 0 && !h->stopping)
            pthread_cond_wait(&h->wake, &h->lock);
        if (h->count == 0)
            break; /* stopping, nothing left */
        http_job job = h->queue[h->head];
        h->head = (h->head + 1) % SRV_HTTP_QUEUE_MAX;
        h->count--;
        bool stopping = h->stopping;
        pthread_mutex_unlock(&h->lock);
        if (stopping)
            http_text(job.aio, 503, "shutting down\n");
        else if (job.kind == HTTP_METRICS)
            http_metrics(h, job.aio);
        else
            http_readyz(h, job.aio);
        pthread_mutex_lock(&h->lock);
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

/* Handler data: what the path serves and the listener (freed by nng with the handler). */
typedef struct http_handler_data {
    int kind;
    const char *path; /* static */
    srv_http *h;
} http_handler_data;

/* Whether the request's target, as sent, is path itself (a query string may follow). nng
 * matches handlers on the percent-decoded path, so "/metrics%00" (a NUL) or "/metrics%00.txt"
 * reached the /metrics handler as "/metrics"; the raw target must name it byte for byte. */
static bool http_target_is(nng_aio *aio, const char *path)
{
    nng_http_req *req = nng_aio_get_input(aio, 0);
    const char *uri = req != NULL ? nng_http_req_get_uri(req) : NULL;
    if (uri == NULL)
        return false;
    size_t len = strcspn(uri, "?#");
    return len == strlen(path) && memcmp(uri, path, len) == 0;
}

/* nng's handler callback: inputs are the request, the handler and the connection. */
static void http_handle(nng_aio *aio)
{
    nng_http_handler *handler = nng_aio_get_input(aio, 1);
    const http_handler_data *data = nng_http_handler_get_data(handler);
    srv_http *h = data->h;
    if (!http_target_is(aio, data->path)) {
        http_text(aio, 404, "not found\n");
        return;
    }
    if (data->kind == HTTP_LIVEZ) {
        http_text(aio, 200, "ok\n");
        return;
    }
    pthread_mutex_lock(&h->lock);
    bool queued = false;
    if (!h->stopping && h->count < SRV_HTTP_QUEUE_MAX) {
        h->queue[(h->head + h->count) % SRV_HTTP_QUEUE_MAX] = (http_job){aio, data->kind};
        h->count++;
        queued = true;
        pthread_cond_signal(&h->wake);
    }
    pthread_mutex_unlock(&h->lock);
    if (!queued)
        http_text(aio, 503, "busy\n");
}

static void http_handler_data_free(void *p)
{
    free(p);
}

static int http_add(srv_http *h, int kind, const char *path)
{
    http_handler_data *data = malloc(sizeof *data);
    if (data == NULL)
        return NNG_ENOMEM;
    data->kind = kind;
    data->path = path;
    data->h = h;
    nng_http_handler *handler = NULL;
    int rv = nng_http_handler_alloc(&handler, path, http_handle);
    if (rv != 0) {
        free(data);
        return rv;
    }
    if ((rv = nng_http_handler_set_method(handler, "GET")) != 0 ||
        (rv = nng_http_handler_set_data(handler, data, http_handler_data_free)) != 0) {
        free(data);
        nng_http_handler_free(handler);
        return rv;
    }
    if ((rv = nng_http_server_add_handler(h->server, handler)) != 0)
        nng_http_handler_free(handler); /* frees data */
    return rv;
}

bf_err srv_http_new(srv_http **out, const char *url, const srv_context *ctx, srv_metrics *metrics,
                    char *diag, size_t diag_len)
{
    if (out == NULL || url == NULL || ctx == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    srv_http *h = calloc(1, sizeof *h);
    if (h == NULL)
        return BF_ERR_NOMEM;
    h->ctx = *ctx;
    h->ctx.engine_cfg.statement_timeout_ms = SRV_HTTP_STATEMENT_TIMEOUT_MS;
    h->ctx.engine_cfg.lock_timeout_ms = SRV_HTTP_STATEMENT_TIMEOUT_MS / 4;
    h->session.ctx = &h->ctx;
    h->metrics = metrics;
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->wake, NULL);
    nng_url *u = NULL;
    int rv = nng_url_parse(&u, url);
    if (rv == 0) {
        rv = nng_http_server_hold(&h->server, u);
        nng_url_free(u);
    }
    for (size_t i = 0; rv == 0 && i < sizeof http_kinds / sizeof http_kinds[0]; i++)
        rv = http_add(h, http_kinds[i], http_paths[i]);
    if (rv == 0) {
        if (pthread_create(&h->thread, NULL, http_thread_main, h) != 0)
            rv = NNG_ENOMEM;
        else
            h->thread_started = true;
    }
    if (rv == 0 && (rv = nng_http_server_start(h->server)) == 0)
        h->started = true;
    if (rv != 0) {
        snprintf(diag, diag_len, "cannot serve http_listen: %s", nng_strerror(rv));
        srv_http_free(h);
        return rv == NNG_ENOMEM ? BF_ERR_NOMEM : BF_ERR_IO;
    }
    srv_log_event(BF_LOG_INFO, BF_EV_SERVER_LISTENING,
                  "listening on %s (/metrics, /livez, /readyz)", url);
    *out = h;
    return BF_OK;
}

void srv_http_free(srv_http *h)
{
    if (h == NULL)
        return;
    pthread_mutex_lock(&h->lock);
    h->stopping = true;
    pthread_cond_broadcast(&h->wake);
    pthread_mutex_unlock(&h->lock);
    if (h->thread_started)
        pthread_join(h->thread, NULL); /* answers what is queued first */
    if (h->server != NULL) {
        if (h->started)
            nng_http_server_stop(h->server);
        nng_http_server_release(h->server);
    }
    if (h->session.engine != NULL)
        bf_engine_close(h->session.engine);
    pthread_cond_destroy(&h->wake);
    pthread_mutex_destroy(&h->lock);
    free(h);
}
