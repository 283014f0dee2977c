/*
 * http.c - the HTTP listener: /metrics, /livez and /readyz on a small server of its own (one
 * thread polling the listening socket and its connections), with a scrape thread that owns the
 * listener's PostgreSQL session.
 *
 * Design notes: nng 1.5.2's HTTP server held a half-sent request forever and had no connection
 * cap (1,100 of them took every descriptor of a 1,024 limit, and with them the admin
 * listeners), so the listener is ours: a fixed table of SRV_HTTP_MAX_CONNECTIONS connections,
 * each with a deadline for its current state (reading the head, writing the answer, draining
 * after it), checked on every turn of the poll loop. A connection beyond the caps is accepted
 * only to be answered 503 and closed, so the kernel's backlog never holds it either; when
 * accept() itself finds no descriptor, accepting pauses for a moment instead of spinning.
 *
 * The I/O thread never blocks on PostgreSQL: /metrics and /readyz are queued (bounded: a full
 * queue answers 503) for the scrape thread, which renders the answer into the connection's
 * output buffer, marks it ready under the lock and wakes the I/O thread through a pipe. A
 * connection waiting for its answer is not polled and cannot expire, so the scrape thread's
 * pointer stays valid; the queue bounds how many wait. /readyz is srv_readiness_evaluate(): the
 * very computation of Readiness.Check, not a copy. A database that cannot be read makes /readyz
 * answer 503 "unknown" and leaves the database values out of /metrics. At shutdown the
 * listening socket closes first (no new request), the scrape thread answers what is still
 * queued with 503 and exits, then the I/O thread sends what is ready and closes everything.
 *
 * After an answer the connection is shut down for writing and drained for a moment before it
 * is closed: closing a socket with unread input resets it, and the peer could lose the answer
 * (431 to a peer still sending its oversized head).
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http.h"
#include "log.h"

enum { HTTP_METRICS = 1, HTTP_READYZ = 2, HTTP_LIVEZ = 3 };

/* A connection's state; each has its deadline (none while waiting for the scrape thread). */
enum { HC_FREE = 0, HC_READ, HC_WAIT, HC_WRITE, HC_DRAIN };

#define HTTP_DRAIN_MS        1000 /* reading what a peer still sends after its answer */
#define HTTP_ACCEPT_PAUSE_MS 100  /* no descriptor for accept(): try again after this */
#define HTTP_NOTE_EVERY_US   (10 * 1000000LL)

typedef struct http_conn {
    int fd;
    int state;
    unsigned char peer[16]; /* the peer's address, IPv4 as IPv4-mapped IPv6 */
    int64_t deadline_us;
    char *in; /* the request head as read so far */
    size_t in_len, in_cap;
    char *out; /* the answer (status line, headers, body) */
    size_t out_len, out_off;
    bool ready; /* HC_WAIT: the scrape thread has put the answer in out (under lock) */
} http_conn;

typedef struct http_job {
    http_conn *conn;
    int kind;
} http_job;

struct srv_http {
    int listen_fd;
    int wake[2]; /* the scrape thread and srv_http_free wake the I/O thread */
    http_conn conns[SRV_HTTP_MAX_CONNECTIONS];
    int64_t accept_paused_until_us;
    unsigned long refused; /* since the last note */
    int64_t refused_noted_us;
    srv_context ctx; /* the template with the scrape session's short timeouts */
    srv_session session;
    srv_metrics *metrics;
    pthread_t thread, io_thread;
    bool thread_started, io_started;
    pthread_mutex_t lock;
    pthread_cond_t wake_cond;
    http_job queue[SRV_HTTP_QUEUE_MAX];
    int head, count;
    bool stopping; /* no more scrapes: answer the queue with 503 */
    bool io_stop;  /* the I/O thread: send what is ready, close, exit */
};

static const int http_kinds[] = {HTTP_METRICS, HTTP_READYZ, HTTP_LIVEZ};
static const char *const http_paths[] = {"/metrics", "/readyz", "/livez"};

static const char *http_reason(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 431:
        return "Request Header Fields Too Large";
    case 503:
        return "Service Unavailable";
    default:
        return "Internal Server Error";
    }
}

/* A whole answer (status line, headers, body) in a malloc'd buffer; NULL when out of memory. */
static char *http_format(size_t *len, int status, const char *type, const char *body,
                         size_t body_len)
{
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nCache-Control: no-store\r\n"
                     "Content-Length: %zu\r\n%sConnection: close\r\n\r\n",
                     status, http_reason(status), type, body_len,
                     status == 405 ? "Allow: GET\r\n" : "");
    char *out = malloc((size_t)n + body_len);
    if (out == NULL)
        return NULL;
    memcpy(out, head, (size_t)n);
    memcpy(out + n, body, body_len);
    *len = (size_t)n + body_len;
    return out;
}

static char *http_text(size_t *len, int status, const char *text)
{
    return http_format(len, status, "text/plain; charset=utf-8", text, strlen(text));
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

static char *http_readyz(srv_http *h, size_t *len)
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
    return http_format(len, v.verdict > 0 ? 200 : 503, "application/json", body, strlen(body));
}

static char *http_metrics(srv_http *h, size_t *len)
{
    srv_metrics_scrape s;
    memset(&s, 0, sizeof s);
    s.auto_backfill = h->ctx.auto_backfill;
    (void)bf_throttle_rate_get(h->ctx.engine_cfg.throttle, NULL, &s.rate);
    int64_t t0 = srv_now_us();
    srv_readiness_view v;
    srv_readiness_evaluate(&h->session, &v);
    s.ready = v.verdict;
    bf_engine *e = NULL;
    if (srv_session_engine(&h->session, &e) == BF_OK && bf_stats_read(e, &s.stats) == BF_OK)
        s.has_stats = true;
    s.duration_us = srv_now_us() - t0;
    char *text = NULL;
    size_t text_len = 0;
    if (srv_metrics_render(h->metrics, &s, &text, &text_len) != BF_OK)
        return http_text(len, 500, "out of memory\n");
    char *out = http_format(len, 200, "text/plain; version=0.0.4; charset=utf-8", text, text_len);
    free(text);
    return out;
}

static void http_wake(srv_http *h)
{
    char b = 1;
    ssize_t n = write(h->wake[1], &b, 1); /* a full pipe already wakes it */
    (void)n;
}

static void *http_scrape_main(void *arg)
{
    srv_http *h = arg;
    pthread_mutex_lock(&h->lock);
    for (;;) {
        while (h->count == 0 && !h->stopping)
            pthread_cond_wait(&h->wake_cond, &h->lock);
        if (h->count == 0)
            break; /* stopping, nothing left */
        http_job job = h->queue[h->head];
        h->head = (h->head + 1) % SRV_HTTP_QUEUE_MAX;
        h->count--;
        bool stopping = h->stopping;
        pthread_mutex_unlock(&h->lock);
        size_t len = 0;
        char *out = stopping                   ? http_text(&len, 503, "shutting down\n")
                    : job.kind == HTTP_METRICS ? http_metrics(h, &len)
                                               : http_readyz(h, &len);
        pthread_mutex_lock(&h->lock);
        job.conn->out = out; /* NULL: out of memory, the connection is closed */
        job.conn->out_len = len;
        job.conn->ready = true;
        http_wake(h);
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

/* ---- connections ---------------------------------------------------------------------------- */

static void http_conn_close(http_conn *c)
{
    close(c->fd);
    free(c->in);
    free(c->out);
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

/* One best-effort send of a short answer on a socket about to be closed. */
static void http_send_now(int fd, int status, const char *text)
{
    size_t len = 0;
    char *out = http_text(&len, status, text);
    if (out != NULL) {
        ssize_t n = send(fd, out, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)n;
    }
    free(out);
}

static void http_conn_answer(http_conn *c, char *out, size_t len)
{
    c->out = out;
    c->out_len = len;
    c->out_off = 0;
    c->state = HC_WRITE;
    c->deadline_us = srv_now_us() + SRV_HTTP_WRITE_TIMEOUT_MS * 1000LL;
    if (out == NULL)
        http_conn_close(c);
}

static void http_conn_answer_text(http_conn *c, int status, const char *text)
{
    size_t len = 0;
    char *out = http_text(&len, status, text);
    http_conn_answer(c, out, len);
}

/* The request head is complete (head_len bytes through its blank line): route it. */
static void http_route(srv_http *h, http_conn *c, size_t head_len)
{
    const char *p = c->in;
    if (memchr(p, '\0', head_len) != NULL) { /* a NUL never names a path or a header */
        http_conn_answer_text(c, 400, "bad request\n");
        return;
    }
    const char *line_end = strstr(p, "\r\n");
    const char *sp1 = memchr(p, ' ', (size_t)(line_end - p));
    const char *sp2 = sp1 != NULL ? memchr(sp1 + 1, ' ', (size_t)(line_end - sp1 - 1)) : NULL;
    if (sp2 == NULL || sp1 == p || sp2 == sp1 + 1 ||
        ((size_t)(line_end - sp2 - 1) != 8 ||
         (memcmp(sp2 + 1, "HTTP/1.1", 8) != 0 && memcmp(sp2 + 1, "HTTP/1.0", 8) != 0))) {
        http_conn_answer_text(c, 400, "bad request\n");
        return;
    }
    /* the target as sent, up to a query: "/metrics%00" or "/%6detrics" is not "/metrics" */
    const char *target = sp1 + 1;
    size_t len = strcspn(target, "?# ");
    int kind = 0;
    for (size_t i = 0; i < sizeof http_kinds / sizeof http_kinds[0]; i++)
        if (len == strlen(http_paths[i]) && memcmp(target, http_paths[i], len) == 0)
            kind = http_kinds[i];
    if (kind == 0) {
        http_conn_answer_text(c, 404, "not found\n");
        return;
    }
    if (sp1 - p != 3 || memcmp(p, "GET", 3) != 0) {
        http_conn_answer_text(c, 405, "method not allowed\n");
        return;
    }
    if (kind == HTTP_LIVEZ) {
        http_conn_answer_text(c, 200, "ok\n");
        return;
    }
    pthread_mutex_lock(&h->lock);
    bool queued = false;
    if (!h->stopping && h->count < SRV_HTTP_QUEUE_MAX) {
        h->queue[(h->head + h->count) % SRV_HTTP_QUEUE_MAX] = (http_job){c, kind};
        h->count++;
        c->state = HC_WAIT;
        c->ready = false;
        queued = true;
        pthread_cond_signal(&h->wake_cond);
    }
    pthread_mutex_unlock(&h->lock);
    if (!queued)
        http_conn_answer_text(c, 503, "busy\n");
}

static void http_conn_read(srv_http *h, http_conn *c)
{
    for (;;) {
        if (c->in_len + 1 >= c->in_cap) {
            size_t cap = c->in_cap ? c->in_cap * 2 : 1024;
            char *in = realloc(c->in, cap);
            if (in == NULL) {
                http_conn_close(c);
                return;
            }
            c->in = in;
            c->in_cap = cap;
        }
        ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len - 1, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            http_conn_close(c); /* the peer left before its request was complete */
            return;
        }
        if (n < 0)
            return;
        size_t from = c->in_len > 3 ? c->in_len - 3 : 0;
        c->in_len += (size_t)n;
        c->in[c->in_len] = '\0';
        const char *end = NULL;
        for (size_t i = from; end == NULL && i + 4 <= c->in_len; i++)
            if (memcmp(c->in + i, "\r\n\r\n", 4) == 0)
                end = c->in + i + 4;
        size_t head_len = end != NULL ? (size_t)(end - c->in) : c->in_len;
        if (head_len > SRV_HTTP_HEAD_MAX) {
            http_conn_answer_text(c, 431, "request head too large\n");
            return;
        }
        if (end != NULL) {
            http_route(h, c, head_len);
            return;
        }
    }
}

static void http_conn_write(http_conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (n <= 0) {
            http_conn_close(c);
            return;
        }
        c->out_off += (size_t)n;
    }
    shutdown(c->fd, SHUT_WR);
    c->state = HC_DRAIN;
    c->deadline_us = srv_now_us() + HTTP_DRAIN_MS * 1000LL;
}

static void http_conn_drain(http_conn *c)
{
    char buf[4096];
    for (;;) {
        ssize_t n = recv(c->fd, buf, sizeof buf, 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (n <= 0) {
            http_conn_close(c);
            return;
        }
    }
}

/* ---- accepting ---------------------------------------------------------------------------- */

static void http_peer_key(const struct sockaddr_storage *ss, unsigned char key[16])
{
    memset(key, 0, 16);
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &a->sin_addr, 4);
    } else if (ss->ss_family == AF_INET6) {
        memcpy(key, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
    }
}

/* How many connections the listener may hold now: its cap, and a share of the descriptor limit
 * (read each time: an operator may change it with prlimit). */
static int http_budget(void)
{
    struct rlimit lim;
    int budget = SRV_HTTP_MAX_CONNECTIONS;
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY &&
        lim.rlim_cur / SRV_HTTP_FD_SHARE < (rlim_t)budget)
        budget = (int)(lim.rlim_cur / SRV_HTTP_FD_SHARE);
    return budget;
}

static void http_note_refused(srv_http *h, const char *why)
{
    h->refused++;
    int64_t now = srv_now_us();
    if (h->refused_noted_us != 0 && now - h->refused_noted_us < HTTP_NOTE_EVERY_US)
        return;
    srv_log_event(BF_LOG_WARN, BF_EV_CONN_REFUSED,
                  "http: refused %lu connection%s in the last 10 s (latest: %s)", h->refused,
                  h->refused == 1 ? "" : "s", why);
    h->refused = 0;
    h->refused_noted_us = now;
}

static void http_accept(srv_http *h)
{
    for (int round = 0; round < SRV_HTTP_MAX_CONNECTIONS; round++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(h->listen_fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                h->accept_paused_until_us = srv_now_us() + HTTP_ACCEPT_PAUSE_MS * 1000LL;
            return;
        }
        unsigned char key[16];
        http_peer_key(&ss, key);
        int used = 0, from_peer = 0;
        http_conn *slot = NULL;
        for (int i = 0; i < SRV_HTTP_MAX_CONNECTIONS; i++) {
            http_conn *c = &h->conns[i];
            if (c->state == HC_FREE) {
                if (slot == NULL)
                    slot = c;
                continue;
            }
            used++;
            from_peer += memcmp(c->peer, key, 16) == 0;
        }
        const char *why = NULL;
        if (used >= http_budget() || slot == NULL)
            why = "the listener holds its connections";
        else if (from_peer >= SRV_HTTP_MAX_PER_PEER)
            why = "its peer holds its connections";
        if (why != NULL) {
            http_send_now(fd, 503, "too many connections\n");
            close(fd);
            http_note_refused(h, why);
            continue;
        }
        memset(slot, 0, sizeof *slot);
        slot->fd = fd;
        slot->state = HC_READ;
        memcpy(slot->peer, key, 16);
        slot->deadline_us = srv_now_us() + SRV_HTTP_HEADER_TIMEOUT_MS * 1000LL;
    }
}

/* ---- the I/O thread ----------------------------------------------------------------------- */

static void http_expire(http_conn *c)
{
    if (c->state == HC_READ)
        http_send_now(c->fd, 408, "request timeout\n"); /* a slowloris */
    http_conn_close(c);
}

static void *http_io_main(void *arg)
{
    srv_http *h = arg;
    struct pollfd pfd[SRV_HTTP_MAX_CONNECTIONS + 2];
    int idx[SRV_HTTP_MAX_CONNECTIONS + 2];
    for (;;) {
        pthread_mutex_lock(&h->lock);
        bool stop = h->io_stop, stopping = h->stopping;
        for (int i = 0; i < SRV_HTTP_MAX_CONNECTIONS; i++) /* answers the scrape thread made */
            if (h->conns[i].state == HC_WAIT && h->conns[i].ready)
                http_conn_answer(&h->conns[i], h->conns[i].out, h->conns[i].out_len);
        pthread_mutex_unlock(&h->lock);
        if (stop)
            break;
        if (stopping && h->listen_fd >= 0) {
            close(h->listen_fd); /* no new connection */
            h->listen_fd = -1;
        }
        int64_t now = srv_now_us(), wait_us = 1000000;
        int n = 0;
        pfd[n] = (struct pollfd){.fd = h->wake[0], .events = POLLIN};
        idx[n++] = -1;
        if (h->listen_fd >= 0 && now >= h->accept_paused_until_us) {
            pfd[n] = (struct pollfd){.fd = h->listen_fd, .events = POLLIN};
            idx[n++] = -2;
        } else if (h->listen_fd >= 0 && h->accept_paused_until_us - now < wait_us) {
            wait_us = h->accept_paused_until_us - now;
        }
        for (int i = 0; i < SRV_HTTP_MAX_CONNECTIONS; i++) {
            http_conn *c = &h->conns[i];
            if (c->state == HC_FREE || c->state == HC_WAIT)
                continue;
            if (now >= c->deadline_us) {
                http_expire(c);
                continue;
            }
            if (c->deadline_us - now < wait_us)
                wait_us = c->deadline_us - now;
            pfd[n] =
                (struct pollfd){.fd = c->fd, .events = c->state == HC_WRITE ? POLLOUT : POLLIN};
            idx[n++] = i;
        }
        int rv = poll(pfd, (nfds_t)n, (int)((wait_us + 999) / 1000));
        if (rv <= 0)
            continue;
        for (int k = 0; k < n; k++) {
            if (pfd[k].revents == 0)
                continue;
            if (idx[k] == -1) {
                char buf[64];
                while (read(h->wake[0], buf, sizeof buf) > 0) {
                }
            } else if (idx[k] == -2) {
                http_accept(h);
            } else {
                http_conn *c = &h->conns[idx[k]];
                if (c->state == HC_READ)
                    http_conn_read(h, c);
                else if (c->state == HC_WRITE)
                    http_conn_write(c);
                else if (c->state == HC_DRAIN)
                    http_conn_drain(c);
            }
        }
    }
    for (int i = 0; i < SRV_HTTP_MAX_CONNECTIONS; i++) {
        http_conn *c = &h->conns[i];
        if (c->state == HC_WRITE && c->out_off < c->out_len) {
            ssize_t sent = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                                MSG_NOSIGNAL | MSG_DONTWAIT);
            (void)sent;
        }
        if (c->state != HC_FREE)
            http_conn_close(c);
    }
    return NULL;
}

/* ---- the listener ------------------------------------------------------------------------- */

/* Bind url ("http://host:port", checked by the configuration) and listen; the descriptor or -1
 * with a reason in diag. */
static int http_listen_on(const char *url, char *diag, size_t diag_len)
{
    const char *hp = url + (strncmp(url, "http://", 7) == 0 ? 7 : 0);
    const char *colon = strrchr(hp, ':');
    if (colon == NULL) {
        snprintf(diag, diag_len, "cannot serve http_listen: expected http://host:port");
        return -1;
    }
    char host[256];
    size_t hl = (size_t)(colon - hp);
    if (hl >= 2 && hp[0] == '[' && hp[hl - 1] == ']') { /* [::1] */
        hp++;
        hl -= 2;
    }
    if (hl >= sizeof host) {
        snprintf(diag, diag_len, "cannot serve http_listen: the host name is too long");
        return -1;
    }
    memcpy(host, hp, hl);
    host[hl] = '\0';
    char port[16];
    snprintf(port, sizeof port, "%.*s", (int)strcspn(colon + 1, "/"), colon + 1);
    struct addrinfo hints = {.ai_flags = AI_PASSIVE, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    bool any = hl == 0 || strcmp(host, "*") == 0;
    int gai = getaddrinfo(any ? NULL : host, port, &hints, &res);
    if (gai != 0) {
        snprintf(diag, diag_len, "cannot serve http_listen: %s", gai_strerror(gai));
        return -1;
    }
    int fd = -1, err = 0;
    for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
            err = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        snprintf(diag, diag_len, "cannot serve http_listen: %s", strerror(err));
    return fd;
}

bf_err srv_http_new(srv_http **out, const char *url, const srv_context *ctx, srv_metrics *metrics,
                    char *diag, size_t diag_len)
{
    if (out == NULL || url == NULL || ctx == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    srv_http *h = calloc(1, sizeof *h);
    if (h == NULL)
        return BF_ERR_NOMEM;
    h->listen_fd = h->wake[0] = h->wake[1] = -1;
    for (int i = 0; i < SRV_HTTP_MAX_CONNECTIONS; i++)
        h->conns[i].fd = -1;
    h->ctx = *ctx;
    h->ctx.engine_cfg.statement_timeout_ms = SRV_HTTP_STATEMENT_TIMEOUT_MS;
    h->ctx.engine_cfg.lock_timeout_ms = SRV_HTTP_STATEMENT_TIMEOUT_MS / 4;
    h->session.ctx = &h->ctx;
    h->metrics = metrics;
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->wake_cond, NULL);
    bf_err err = BF_OK;
    if ((h->listen_fd = http_listen_on(url, diag, diag_len)) < 0) {
        err = BF_ERR_IO;
    } else if (pipe2(h->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
        snprintf(diag, diag_len, "cannot serve http_listen: %s", strerror(errno));
        err = BF_ERR_IO;
    } else if (pthread_create(&h->thread, NULL, http_scrape_main, h) != 0) {
        snprintf(diag, diag_len, "cannot serve http_listen: no thread");
        err = BF_ERR_NOMEM;
    } else {
        h->thread_started = true;
        if (pthread_create(&h->io_thread, NULL, http_io_main, h) != 0) {
            snprintf(diag, diag_len, "cannot serve http_listen: no thread");
            err = BF_ERR_NOMEM;
        } else {
            h->io_started = true;
        }
    }
    if (err != BF_OK) {
        srv_http_free(h);
        return err;
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
    pthread_cond_broadcast(&h->wake_cond);
    pthread_mutex_unlock(&h->lock);
    if (h->io_started)
        http_wake(h); /* closes the listening socket */
    if (h->thread_started)
        pthread_join(h->thread, NULL); /* answers what is queued first */
    pthread_mutex_lock(&h->lock);
    h->io_stop = true;
    pthread_mutex_unlock(&h->lock);
    if (h->io_started) {
        http_wake(h);
        pthread_join(h->io_thread, NULL); /* sends what is ready, closes every connection */
    }
    if (h->listen_fd >= 0)
        close(h->listen_fd);
    for (int i = 0; i < 2; i++)
        if (h->wake[i] >= 0)
            close(h->wake[i]);
    if (h->session.engine != NULL)
        bf_engine_close(h->session.engine);
    pthread_cond_destroy(&h->wake_cond);
    pthread_mutex_destroy(&h->lock);
    free(h);
}
