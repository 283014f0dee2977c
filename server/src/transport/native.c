/*
 * native.c - the SP transport of our own for tcp:// and ipc:// listeners (transport.c's design
 * notes say why): the REP side of nng's wire protocol over plain sockets, served by a pool of
 * threads per listener kind that wait on one epoll set, read a request, dispatch it and write
 * its reply themselves, and a writer thread that finishes the replies a peer does not take at
 * once. tls+tcp:// listeners stay on nng (transport_serve.c).
 *
 * Design notes
 *
 * The wire (nng's SP over stream transports): each side first sends 8 bytes, 00 'S' 'P' 00,
 * its protocol (REP 0x0031 here, REQ 0x0030 from the peer; anything else is closed) and two zero
 * bytes. Then every message is a 64-bit big-endian length (on ipc:// preceded by a byte 0x01)
 * and that many bytes: the backtrace, 32-bit words of which the last has its high bit set (the
 * request ID; more words only through nng devices), then the request envelope. A reply carries
 * the same backtrace before the response envelope.
 *
 * Threads. A connection is in its pool's epoll set with EPOLLONESHOT: whichever thread epoll
 * wakes holds the connection's read turn until it gives it back. It reads exactly what the
 * current message still needs (the length, then the body: never a byte of the next message, so
 * nothing waits in a buffer of ours unseen by epoll), and once a message is whole it gives the
 * turn back (re-arms) before serving it, so a second request of the same connection (a
 * client's retry) can be read by another thread while the first is served. Then it dispatches
 * the request with an engine session from the pool's stack (the one returned last: a quiet
 * caller meets one warm PostgreSQL backend) and writes the reply. One thread wakes per request
 * and nothing is handed between threads: nng's REP socket needs its poller, two of its task
 * threads and a thread of ours for the same (issue 26 measured the hops). epoll wakes the
 * thread that waited last, so a quiet caller also meets one thread.
 *
 * Replies never wait for their peers. A reply is written without blocking; what the socket
 * does not take is queued on the connection (and later replies behind it), the connection is
 * handed to the writer thread, which writes the queue as the peer reads it (EPOLLOUT on an
 * epoll set of its own), and the request thread goes back to serving. A queued reply not
 * written within the send timeout is dropped with the rest of the queue and the connection
 * marked unread (srv_conns_mark_unread: its requests are dropped unserved from then on); the
 * sweeper closes it once it has been quiet (srv_conns_take_quiet). Requests keep being read
 * (and dropped) meanwhile, as with nng: a peer that pipelines into a connection sees it closed
 * only when it stops sending.
 *
 * Limits as on nng's side: connections admitted under the caps (srv_conns_admit) as they are
 * accepted, at most SRV_TRANSPORT_IN_FLIGHT requests of a connection served at once and
 * SRV_TRANSPORT_REPLYING of its replies being sent (srv_conns_begin), a message over
 * SRV_MAX_MESSAGE + SRV_TRANSPORT_RECV_SLACK closes its connection.
 *
 * Lifetime. A connection is counted (refs): its read turn (held by epoll while armed, or by
 * the thread epoll woke), each request being served, and the writer while it holds queued
 * replies. Whoever closes it only shuts the socket down (closing); the holders see that (an
 * end of file, a failed write) and drop their counts; the last one closes the descriptor and
 * frees it. Descriptors are never closed while another thread may use them, so none is
 * reused under a thread's feet, and nothing of nng's close race exists here.
 *
 * Locks: n->mtx (the list of connections, stopping) before a connection's mtx (its queue,
 * closing, refs) before n->wmtx (the writer's list); a pool's session stack has its own.
 *
 * Stop: no new connection is admitted, the read side of every connection is shut (no new
 * request is read), the requests being served finish and write their replies, the queued
 * replies are written or dropped within the send timeout, then the threads end and every
 * descriptor is closed; an ipc:// socket file is removed if it is still the one bound.
 */

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "log.h"
#include "transport_impl.h"

#define NATIVE_HELLO_LEN     8
#define NATIVE_MAX_HOPS      8    /* backtrace words before the request ID, as nng allows */
#define NATIVE_ACCEPT_BATCH  32   /* connections accepted per wake of a listener */
#define NATIVE_WAIT_MS       1000 /* backstop of every wait (stop also wakes them) */
#define NATIVE_BACKLOG       128  /* listen(2) backlog */
#define NATIVE_POOLS         2    /* ipc, network */
#define NATIVE_STOP_GRACE_MS 500  /* past the send timeout, for the writer to drop the queues */

enum { NATIVE_TAG_LISTENER = 1, NATIVE_TAG_CONN, NATIVE_TAG_WAKE };

static const uint8_t native_rep_hello[NATIVE_HELLO_LEN] = {0, 'S', 'P', 0, 0, 0x31, 0, 0};
static const uint8_t native_req_hello[NATIVE_HELLO_LEN] = {0, 'S', 'P', 0, 0, 0x30, 0, 0};

typedef struct native_pool native_pool;

typedef struct native_out {
    struct native_out *next;
    uint8_t *buf;
    size_t len, off;
    int64_t queued_ms;
} native_out;

typedef enum native_rstate { NATIVE_HELLO, NATIVE_HEAD, NATIVE_BODY } native_rstate;

typedef struct native_conn {
    int tag; /* NATIVE_TAG_CONN: epoll's data points here */
    native_pool *pool;
    int fd;
    uint32_t id; /* in t->conns */
    bool ipc;
    srv_peer peer;
    char who[96];
    /* the read turn's (one thread at a time) */
    native_rstate rstate;
    uint8_t head[NATIVE_HELLO_LEN + 1];
    size_t head_len, got;
    uint8_t *body;
    size_t body_len;
    /* under mtx */
    pthread_mutex_t mtx;
    int refs;
    bool closing;  /* shut down: the holders drop their counts */
    bool rd_shut;  /* stop shut its read side: replies may still be written */
    bool in_writer; /* the writer holds it (and a count) */
    native_out *out_head, *out_tail;
    struct native_conn *next_backlog;     /* under n->wmtx */
    struct native_conn *prev, *next;      /* under n->mtx */
} native_conn;

typedef struct native_listener {
    int tag; /* NATIVE_TAG_LISTENER */
    native_pool *pool;
    size_t index; /* in t->listeners */
    bool ipc;
    int fd;
    const char *url;
    char host[256], port[8]; /* tcp */
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    dev_t dev; /* of the bound ipc socket file */
    ino_t ino;
    atomic_bool paused; /* accept ran out of descriptors: the sweeper re-arms it */
} native_listener;

struct native_pool {
    transport_native *n;
    const char *name; /* "ipc", "network" */
    bool used;
    int epfd;
    int stop_fd; /* an eventfd, readable once the threads are to end */
    int stop_tag;
    pthread_t *threads;
    int n_threads, n_started;
    pthread_mutex_t mtx; /* the session stack */
    srv_session *sessions;
    srv_session **idle;
    int n_idle;
};

struct transport_native {
    srv_transport *t;
    native_pool pools[NATIVE_POOLS];
    native_listener listeners[SRV_TRANSPORT_MAX_LISTENERS];
    size_t n_listeners;
    pthread_mutex_t mtx;
    pthread_cond_t cond; /* stop waits for serving and backlogged to reach 0 */
    native_conn *conns;  /* under mtx */
    bool stopping;       /* under mtx */
    atomic_int serving;     /* requests being served */
    atomic_int backlogged;  /* connections the writer holds */
    atomic_bool ended;      /* the threads are to end */
    atomic_uint next_id;
    bool started;
    /* the writer */
    int wepfd;
    int wake_fd; /* an eventfd: a connection was handed over, or the writer is to end */
    int wake_tag;
    pthread_mutex_t wmtx;
    native_conn *backlog; /* under wmtx */
    bool writer_end;      /* under wmtx */
    pthread_t writer;
    bool writer_started;
};

/* ---- small helpers ------------------------------------------------------------------------- */

static void native_put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static uint64_t native_get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

static void native_signal_fd(int fd)
{
    uint64_t one = 1;
    ssize_t w = write(fd, &one, sizeof one);
    (void)w; /* an eventfd at its maximum is readable already */
}

static void native_wake_stop(transport_native *n)
{
    pthread_mutex_lock(&n->mtx);
    if (n->stopping)
        pthread_cond_broadcast(&n->cond);
    pthread_mutex_unlock(&n->mtx);
}

static void native_who(native_conn *c)
{
    if (c->peer.has_uid)
        snprintf(c->who, sizeof c->who, "%s uid %u", c->peer.listener, (unsigned)c->peer.uid);
    else
        snprintf(c->who, sizeof c->who, "%s %s", c->peer.listener,
                 c->peer.addr[0] ? c->peer.addr : "unknown");
}

/* ---- connections: lifetime ----------------------------------------------------------------- */

static void native_out_free(native_out *o)
{
    while (o != NULL) {
        native_out *next = o->next;
        free(o->buf);
        free(o);
        o = next;
    }
}

static void native_conn_destroy(native_conn *c)
{
    transport_native *n = c->pool->n;
    pthread_mutex_lock(&n->mtx);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        n->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    pthread_mutex_unlock(&n->mtx);
    srv_conns_release(n->t->conns, c->id);
    close(c->fd);
    native_out_free(c->out_head);
    free(c->body);
    pthread_mutex_destroy(&c->mtx);
    free(c);
}

static void native_conn_unref(native_conn *c)
{
    pthread_mutex_lock(&c->mtx);
    bool last = --c->refs == 0;
    pthread_mutex_unlock(&c->mtx);
    if (last)
        native_conn_destroy(c);
}

/* Shut the connection down: every holder of a count sees it and lets go (c->mtx held). */
static void native_conn_shutdown_locked(native_conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    shutdown(c->fd, SHUT_RDWR);
}

/* The read turn ends with the connection: a peer that closed, a broken socket, a protocol
 * violation. After stop shut the read side, replies may still be going out: then only the
 * turn's count is dropped. */
static void native_conn_lost(native_conn *c)
{
    pthread_mutex_lock(&c->mtx);
    if (!c->rd_shut)
        native_conn_shutdown_locked(c);
    pthread_mutex_unlock(&c->mtx);
    native_conn_unref(c);
}

/* Give the read turn back to epoll; false (turn dropped) when it cannot be. */
static void native_rearm(native_conn *c)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT, .data.ptr = c};
    if (epoll_ctl(c->pool->epfd, EPOLL_CTL_MOD, c->fd, &ev) != 0)
        native_conn_lost(c);
}

/* ---- replies ------------------------------------------------------------------------------- */

/* Hand the connection to the writer with its queue (c->mtx held); true when the caller must
 * then put it on the writer's list. */
static bool native_to_writer_locked(transport_native *n, native_conn *c)
{
    if (c->in_writer)
        return false;
    struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
    if (epoll_ctl(n->wepfd, EPOLL_CTL_ADD, c->fd, &ev) != 0)
        return false; /* cannot happen with a live descriptor; the queue ends with the conn */
    c->in_writer = true;
    c->refs++;
    atomic_fetch_add(&n->backlogged, 1);
    return true;
}

static void native_writer_push(transport_native *n, native_conn *c)
{
    pthread_mutex_lock(&n->wmtx);
    c->next_backlog = n->backlog;
    n->backlog = c;
    pthread_mutex_unlock(&n->wmtx);
    native_signal_fd(n->wake_fd);
}

/* Write a whole reply frame, or queue what the socket does not take. Takes frame. */
static void native_send(transport_native *n, native_conn *c, uint8_t *frame, size_t len)
{
    srv_transport *t = n->t;
    pthread_mutex_lock(&c->mtx);
    if (c->closing) {
        pthread_mutex_unlock(&c->mtx);
        free(frame);
        srv_conns_end(t->conns, c->id, true);
        return;
    }
    size_t off = 0;
    if (c->out_head == NULL) {
        while (off < len) {
            ssize_t w = send(c->fd, frame + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0) {
                off += (size_t)w;
            } else if (w < 0 && errno == EINTR) {
                continue;
            } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                break;
            } else { /* broken: its read turn sees it too */
                native_conn_shutdown_locked(c);
                pthread_mutex_unlock(&c->mtx);
                free(frame);
                srv_conns_end(t->conns, c->id, true);
                return;
            }
        }
        if (off == len) {
            pthread_mutex_unlock(&c->mtx);
            free(frame);
            srv_conns_end(t->conns, c->id, true);
            return;
        }
    }
    native_out *o = malloc(sizeof *o);
    if (o == NULL) {
        pthread_mutex_unlock(&c->mtx);
        free(frame);
        srv_conns_end(t->conns, c->id, true);
        transport_log(t, BF_LOG_ERROR, "could not queue a reply: out of memory");
        return;
    }
    *o = (native_out){.buf = frame, .len = len, .off = off, .queued_ms = transport_now_ms()};
    if (c->out_tail != NULL)
        c->out_tail->next = o;
    else
        c->out_head = o;
    c->out_tail = o;
    bool push = native_to_writer_locked(n, c);
    pthread_mutex_unlock(&c->mtx);
    if (push)
        native_writer_push(n, c);
}

/* Write what the peer takes of c's queue; drop the queue when the connection broke or its head
 * waited past the send timeout (*unread then). Returns how many replies ended (c->mtx held). */
static int native_flush_locked(transport_native *n, native_conn *c, int64_t now, bool *unread,
                               int64_t *due)
{
    int ended = 0;
    bool broken = c->closing;
    while (c->out_head != NULL && !broken) {
        native_out *o = c->out_head;
        ssize_t w = send(c->fd, o->buf + o->off, o->len - o->off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            o->off += (size_t)w;
            if (o->off == o->len) {
                c->out_head = o->next;
                o->next = NULL;
                native_out_free(o);
                ended++;
            }
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        } else {
            broken = true;
        }
    }
    if (c->out_head != NULL && !broken && now - c->out_head->queued_ms >= n->t->send_timeout_ms)
        *unread = true;
    if (c->out_head != NULL && (broken || *unread)) {
        for (native_out *o = c->out_head; o != NULL; o = o->next)
            ended++;
        native_out_free(c->out_head);
        c->out_head = NULL;
    }
    if (c->out_head == NULL)
        c->out_tail = NULL;
    else
        *due = c->out_head->queued_ms + n->t->send_timeout_ms;
    return ended;
}

/* The writer: finishes the queued replies as their peers read them, and drops those not taken
 * within the send timeout. */
static void *native_writer_main(void *arg)
{
    transport_native *n = arg;
    srv_transport *t = n->t;
    for (;;) {
        pthread_mutex_lock(&n->wmtx);
        bool end = n->writer_end;
        native_conn *list = n->backlog;
        n->backlog = NULL;
        pthread_mutex_unlock(&n->wmtx);
        int64_t now = transport_now_ms();
        int64_t next = now + NATIVE_WAIT_MS;
        native_conn *keep = NULL;
        while (list != NULL) {
            native_conn *c = list;
            list = c->next_backlog;
            bool unread = false;
            int64_t due = next;
            pthread_mutex_lock(&c->mtx);
            int ended = native_flush_locked(n, c, now, &unread, &due);
            bool done = c->out_head == NULL;
            if (done) {
                c->in_writer = false;
                epoll_ctl(n->wepfd, EPOLL_CTL_DEL, c->fd, NULL);
            }
            pthread_mutex_unlock(&c->mtx);
            for (int i = 0; i < ended; i++)
                srv_conns_end(t->conns, c->id, true);
            if (unread) {
                srv_conns_mark_unread(t->conns, c->id, now);
                transport_note_event(t, NOTE_UNREAD,
                                     "stopped serving a connection that does not read its replies",
                                     c->who);
            }
            if (done) {
                native_conn_unref(c);
                if (atomic_fetch_sub(&n->backlogged, 1) == 1)
                    native_wake_stop(n);
            } else {
                if (due < next)
                    next = due;
                c->next_backlog = keep;
                keep = c;
            }
        }
        if (keep != NULL) {
            pthread_mutex_lock(&n->wmtx);
            native_conn *tail = keep;
            while (tail->next_backlog != NULL)
                tail = tail->next_backlog;
            tail->next_backlog = n->backlog;
            n->backlog = keep;
            pthread_mutex_unlock(&n->wmtx);
        }
        if (end && keep == NULL)
            break;
        int64_t wait = next - transport_now_ms();
        struct epoll_event evs[16];
        int rc = epoll_wait(n->wepfd, evs, 16, wait < 1 ? 1 : (int)wait);
        for (int i = 0; i < rc; i++) {
            if (evs[i].data.ptr == &n->wake_tag) {
                uint64_t v;
                ssize_t r = read(n->wake_fd, &v, sizeof v);
                (void)r;
            }
        }
    }
    return NULL;
}

/* ---- requests ------------------------------------------------------------------------------ */

/* Serve one whole message of c (body: the backtrace, then the envelope). */
static void native_serve(transport_native *n, native_conn *c, const uint8_t *body, size_t len)
{
    srv_transport *t = n->t;
    int64_t received_us = srv_now_us();
    size_t hdr = 0;
    bool found = false;
    for (int hop = 0; hop < NATIVE_MAX_HOPS && hdr + 4 <= len && !found; hop++) {
        found = (body[hdr] & 0x80) != 0;
        hdr += 4;
    }
    if (!found)
        return; /* no request ID: not a REQ message (nng drops it too) */
    srv_conn_request admitted = srv_conns_begin(t->conns, c->id, SRV_TRANSPORT_IN_FLIGHT,
                                                SRV_TRANSPORT_REPLYING, transport_now_ms());
    if (admitted != SRV_CONN_REQUEST_OK) {
        if (admitted == SRV_CONN_REQUEST_BUSY)
            transport_note_event(t, NOTE_IN_FLIGHT,
                                 "dropped a request: its connection has the most requests in "
                                 "flight already",
                                 c->who);
        return;
    }
    native_pool *p = c->pool;
    pthread_mutex_lock(&p->mtx);
    srv_session *session = p->idle[--p->n_idle]; /* one per thread */
    pthread_mutex_unlock(&p->mtx);
    uint8_t *out = NULL;
    size_t out_len = 0;
    bf_err err =
        srv_dispatch(t->d, session, &c->peer, body + hdr, len - hdr, received_us, &out, &out_len);
    pthread_mutex_lock(&p->mtx);
    p->idle[p->n_idle++] = session;
    pthread_mutex_unlock(&p->mtx);
    size_t pre = c->ipc ? 9 : 8;
    uint8_t *frame = err == BF_OK ? malloc(pre + hdr + out_len) : NULL;
    if (frame == NULL) {
        free(out);
        transport_log(t, BF_LOG_ERROR, "could not answer a request: %s",
                      err != BF_OK ? bf_err_str(err) : "out of memory");
        srv_conns_end(t->conns, c->id, false);
        return;
    }
    if (c->ipc)
        frame[0] = 1;
    native_put_be64(frame + pre - 8, (uint64_t)(hdr + out_len));
    memcpy(frame + pre, body, hdr);
    if (out_len > 0)
        memcpy(frame + pre + hdr, out, out_len);
    free(out);
    srv_conns_replying(t->conns, c->id);
    native_send(n, c, frame, pre + hdr + out_len);
}

/* A whole message was read: give the read turn back, then serve it (body is taken). */
static void native_take(transport_native *n, native_conn *c, uint8_t *body, size_t len)
{
    atomic_fetch_add(&n->serving, 1);
    pthread_mutex_lock(&c->mtx);
    bool stopped = c->rd_shut; /* stop began: no new request is served */
    if (!stopped)
        c->refs++; /* the request's */
    pthread_mutex_unlock(&c->mtx);
    if (stopped) {
        free(body);
        native_conn_unref(c); /* the read turn ends here */
        if (atomic_fetch_sub(&n->serving, 1) == 1)
            native_wake_stop(n);
        return;
    }
    native_rearm(c);
    native_serve(n, c, body, len);
    free(body);
    native_conn_unref(c);
    if (atomic_fetch_sub(&n->serving, 1) == 1)
        native_wake_stop(n);
}

/* The connection is readable (this thread holds its read turn): read what the current step
 * needs, up to one whole message, and serve it. */
static void native_readable(transport_native *n, native_conn *c)
{
    const size_t cap = (size_t)SRV_MAX_MESSAGE + SRV_TRANSPORT_RECV_SLACK;
    for (;;) {
        uint8_t *dst;
        size_t want;
        if (c->rstate == NATIVE_BODY) {
            dst = c->body + c->got;
            want = c->body_len - c->got;
        } else {
            dst = c->head + c->got;
            want = (c->rstate == NATIVE_HELLO ? NATIVE_HELLO_LEN : c->head_len) - c->got;
        }
        ssize_t r = want > 0 ? recv(c->fd, dst, want, 0) : 0;
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            native_rearm(c);
            return;
        }
        if (r <= 0 && want > 0) {
            native_conn_lost(c);
            return;
        }
        c->got += (size_t)r;
        if ((size_t)r < want)
            continue;
        c->got = 0;
        if (c->rstate == NATIVE_HELLO) {
            if (memcmp(c->head, native_req_hello, NATIVE_HELLO_LEN) != 0) {
                native_conn_lost(c); /* not a REQ peer */
                return;
            }
            c->rstate = NATIVE_HEAD;
        } else if (c->rstate == NATIVE_HEAD) {
            uint64_t len = native_get_be64(c->head + (c->ipc ? 1 : 0));
            if ((c->ipc && c->head[0] != 1) || len < 4 || len > cap ||
                (c->body = malloc((size_t)len)) == NULL) {
                native_conn_lost(c); /* nng drops such a connection too */
                return;
            }
            c->body_len = (size_t)len;
            c->rstate = NATIVE_BODY;
        } else {
            uint8_t *body = c->body;
            size_t len = c->body_len;
            c->body = NULL;
            c->body_len = 0;
            c->rstate = NATIVE_HEAD;
            native_take(n, c, body, len);
            return;
        }
    }
}

/* ---- listeners ----------------------------------------------------------------------------- */

static void native_arm_listener(native_listener *l)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT, .data.ptr = l};
    epoll_ctl(l->pool->epfd, EPOLL_CTL_MOD, l->fd, &ev);
}

/* The peer of a new connection: as a cap key and in the request's facts. */
static void native_peer(native_listener *l, int fd, srv_conn_peer *key, srv_peer *peer)
{
    memset(key, 0, sizeof *key);
    memset(peer, 0, sizeof *peer);
    peer->listener = l->ipc ? "ipc" : "tcp";
    if (l->ipc) {
        struct ucred cred;
        socklen_t len = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
            key->family = SRV_CONN_PEER_UID;
            uint32_t u = (uint32_t)cred.uid;
            memcpy(key->addr, &u, sizeof u);
            peer->has_uid = true;
            peer->uid = u;
        }
        return;
    }
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0)
        return;
    if (ss.ss_family == AF_INET) {
        key->family = SRV_CONN_PEER_IPV4;
        memcpy(key->addr, &((struct sockaddr_in *)&ss)->sin_addr, 4);
    } else if (ss.ss_family == AF_INET6) {
        const uint8_t *a = ((struct sockaddr_in6 *)&ss)->sin6_addr.s6_addr;
        if (IN6_IS_ADDR_V4MAPPED((const struct in6_addr *)a)) {
            key->family = SRV_CONN_PEER_IPV4; /* one peer, whichever way it connected */
            memcpy(key->addr, a + 12, 4);
        } else {
            key->family = SRV_CONN_PEER_IPV6;
            memcpy(key->addr, a, 16);
        }
    } else {
        return;
    }
    int af = key->family == SRV_CONN_PEER_IPV4 ? AF_INET : AF_INET6;
    if (inet_ntop(af, key->addr, peer->addr, sizeof peer->addr) == NULL)
        peer->addr[0] = '\0';
}

/* A new connection: admitted under the caps, greeted, and put in its pool's epoll set. */
static void native_admit(transport_native *n, native_listener *l, int fd)
{
    srv_transport *t = n->t;
    srv_conn_peer key;
    native_conn *c = calloc(1, sizeof *c);
    if (c == NULL) {
        close(fd);
        return;
    }
    c->tag = NATIVE_TAG_CONN;
    c->pool = l->pool;
    c->fd = fd;
    c->ipc = l->ipc;
    c->head_len = l->ipc ? 9 : 8;
    c->refs = 1; /* the read turn */
    native_peer(l, fd, &key, &c->peer);
    native_who(c);
    c->id = SRV_TRANSPORT_NATIVE_ID | (atomic_fetch_add(&n->next_id, 1) & 0x7fffffffu);
    srv_conn_verdict v = srv_conns_admit(t->conns, c->id, l->index, &key);
    if (v != SRV_CONN_ADMITTED) {
        close(fd);
        if (v == SRV_CONN_PEER_FULL)
            transport_note_event(t, NOTE_PEER_FULL,
                                 "refused a connection: its peer holds max_connections_per_peer",
                                 c->who);
        else
            transport_note_event(t, NOTE_LISTENER_FULL,
                                 "refused a connection: its listener holds max_connections",
                                 c->who);
        free(c);
        return;
    }
    if (!l->ipc) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    pthread_mutex_init(&c->mtx, NULL);
    bool ok = send(fd, native_rep_hello, NATIVE_HELLO_LEN, MSG_NOSIGNAL | MSG_DONTWAIT) ==
              NATIVE_HELLO_LEN;
    pthread_mutex_lock(&n->mtx);
    ok = ok && !n->stopping;
    if (ok) {
        c->next = n->conns;
        if (n->conns != NULL)
            n->conns->prev = c;
        n->conns = c;
    }
    pthread_mutex_unlock(&n->mtx);
    if (!ok) {
        srv_conns_release(t->conns, c->id);
        close(fd);
        pthread_mutex_destroy(&c->mtx);
        free(c);
        return;
    }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT, .data.ptr = c};
    if (epoll_ctl(l->pool->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
        native_conn_unref(c);
}

static void native_accept(transport_native *n, native_listener *l)
{
    for (int i = 0; i < NATIVE_ACCEPT_BATCH; i++) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            native_admit(n, l, fd);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            /* the connection waits in the backlog; the sweeper tries again */
            atomic_store(&l->paused, true);
            transport_note_event(n->t, NOTE_LISTENER_FULL,
                                 "could not accept a connection: out of descriptors", l->url);
            return;
        }
        break; /* EAGAIN: none left; anything else: the listener is shut at stop */
    }
    pthread_mutex_lock(&n->mtx);
    bool stopping = n->stopping;
    pthread_mutex_unlock(&n->mtx);
    if (!stopping)
        native_arm_listener(l);
}

static void *native_worker_main(void *arg)
{
    native_pool *p = arg;
    transport_native *n = p->n;
    for (;;) {
        struct epoll_event ev;
        int rc = epoll_wait(p->epfd, &ev, 1, NATIVE_WAIT_MS);
        if (atomic_load(&n->ended))
            break;
        if (rc <= 0)
            continue;
        int tag = *(const int *)ev.data.ptr;
        if (tag == NATIVE_TAG_LISTENER)
            native_accept(n, ev.data.ptr);
        else if (tag == NATIVE_TAG_CONN)
            native_readable(n, ev.data.ptr);
    }
    return NULL;
}

/* ---- setup --------------------------------------------------------------------------------- */

bf_err native_new(srv_transport *t, transport_native **out)
{
    transport_native *n = calloc(1, sizeof *n);
    if (n == NULL)
        return BF_ERR_NOMEM;
    n->t = t;
    n->wepfd = n->wake_fd = -1;
    atomic_init(&n->next_id, 1);
    pthread_mutex_init(&n->mtx, NULL);
    pthread_mutex_init(&n->wmtx, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&n->cond, &attr);
    pthread_condattr_destroy(&attr);
    for (int i = 0; i < NATIVE_POOLS; i++) {
        native_pool *p = &n->pools[i];
        p->n = n;
        p->name = i == 0 ? "ipc" : "network";
        p->epfd = p->stop_fd = -1;
        p->stop_tag = NATIVE_TAG_WAKE;
        pthread_mutex_init(&p->mtx, NULL);
    }
    n->wake_tag = NATIVE_TAG_WAKE;
    *out = n;
    return BF_OK;
}

/* "tcp://HOST:PORT" (HOST may be [v6], empty or * for every address) or "ipc:///path". */
bf_err native_listener_add(transport_native *n, size_t index, const char *url, char *diag,
                           size_t diag_len)
{
    native_listener *l = &n->listeners[n->n_listeners];
    memset(l, 0, sizeof *l);
    l->tag = NATIVE_TAG_LISTENER;
    l->index = index;
    l->fd = -1;
    l->url = url;
    l->ipc = strncmp(url, "ipc://", 6) == 0;
    if (l->ipc) {
        const char *path = url + 6;
        if (path[0] == '\0' || strlen(path) >= sizeof l->path)
            return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                               "invalid listener url %s: the path is empty or too long", url);
        snprintf(l->path, sizeof l->path, "%s", path);
    } else {
        const char *hp = url + 6;
        const char *colon = strrchr(hp, ':');
        const char *host = hp;
        size_t host_len = colon != NULL ? (size_t)(colon - hp) : 0;
        if (host_len >= 2 && host[0] == '[' && host[host_len - 1] == ']') {
            host++;
            host_len -= 2;
        }
        char *end = NULL;
        long port = colon != NULL ? strtol(colon + 1, &end, 10) : -1;
        if (colon == NULL || colon[1] == '\0' || *end != '\0' || port < 0 || port > 65535 ||
            host_len >= sizeof l->host || memchr(host, '/', host_len) != NULL)
            return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                               "invalid listener url %s: use tcp://HOST:PORT", url);
        snprintf(l->host, sizeof l->host, "%.*s", (int)host_len, host);
        if (strcmp(l->host, "*") == 0)
            l->host[0] = '\0';
        snprintf(l->port, sizeof l->port, "%ld", port);
    }
    l->pool = &n->pools[l->ipc ? 0 : 1];
    l->pool->used = true;
    n->n_listeners++;
    return BF_OK;
}

static bf_err native_bind_tcp(native_listener *l, char *diag, size_t diag_len)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int rv = getaddrinfo(l->host[0] ? l->host : NULL, l->port, &hints, &ai);
    if (rv != 0)
        return bf_diag_set(diag, diag_len, BF_ERR_UNAVAILABLE, "could not listen on %s: %s",
                           l->url, gai_strerror(rv));
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    bool ok = fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
              bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, NATIVE_BACKLOG) == 0;
    int e = errno;
    freeaddrinfo(ai);
    if (!ok) {
        if (fd >= 0)
            close(fd);
        return bf_diag_set(diag, diag_len, BF_ERR_UNAVAILABLE, "could not listen on %s: %s",
                           l->url, strerror(e));
    }
    l->fd = fd;
    return BF_OK;
}

/* Bind an ipc:// socket with its mode from the start: bound under a temporary name beside the
 * path, given its mode, then renamed over the path (nng binds the path and changes its mode
 * afterwards, leaving a moment with the default mode). A live socket at the path is refused; a
 * stale one is replaced. transport_ipc_path_check() has refused anything but a socket. */
static bf_err native_bind_ipc(native_listener *l, int mode, char *diag, size_t diag_len)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    struct stat st;
    if (lstat(l->path, &st) == 0 && S_ISSOCK(st.st_mode)) {
        int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        memcpy(a.sun_path, l->path, strlen(l->path) + 1);
        bool live = probe >= 0 && connect(probe, (struct sockaddr *)&a, sizeof a) == 0;
        if (probe >= 0)
            close(probe);
        if (live)
            return bf_diag_set(diag, diag_len, BF_ERR_UNAVAILABLE,
                               "could not listen on %s: another process listens there", l->url);
    }
    char tmp[sizeof a.sun_path];
    int tn = snprintf(tmp, sizeof tmp, "%s.%ld.tmp", l->path, (long)getpid());
    bool renamed = tn > 0 && (size_t)tn < sizeof tmp;
    const char *bind_path = renamed ? tmp : l->path;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    memset(a.sun_path, 0, sizeof a.sun_path);
    memcpy(a.sun_path, bind_path, strlen(bind_path) + 1);
    if (!renamed)
        unlink(l->path); /* the stale socket */
    else
        unlink(tmp);
    bool ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
              chmod(bind_path, (mode_t)mode) == 0 && lstat(bind_path, &st) == 0 &&
              (!renamed || rename(tmp, l->path) == 0) && listen(fd, NATIVE_BACKLOG) == 0;
    int e = errno;
    if (!ok) {
        if (fd >= 0) {
            close(fd);
            unlink(bind_path);
        }
        return bf_diag_set(diag, diag_len, BF_ERR_UNAVAILABLE, "could not listen on %s: %s",
                           l->url, strerror(e));
    }
    l->fd = fd;
    l->dev = st.st_dev;
    l->ino = st.st_ino;
    return BF_OK;
}

static bf_err native_pool_start(native_pool *p, int threads, srv_context *ctx, char *diag,
                                size_t diag_len)
{
    p->epfd = epoll_create1(EPOLL_CLOEXEC);
    p->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    p->threads = calloc((size_t)threads, sizeof *p->threads);
    p->sessions = calloc((size_t)threads, sizeof *p->sessions);
    p->idle = calloc((size_t)threads, sizeof *p->idle);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &p->stop_tag};
    if (p->epfd < 0 || p->stop_fd < 0 || p->threads == NULL || p->sessions == NULL ||
        p->idle == NULL || epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->stop_fd, &ev) != 0)
        return bf_diag_set(diag, diag_len, BF_ERR_INTERNAL, "could not set up the %s threads",
                           p->name);
    p->n_threads = threads;
    for (int i = 0; i < threads; i++) {
        p->sessions[i].ctx = ctx;
        p->idle[p->n_idle++] = &p->sessions[i];
    }
    for (int i = 0; i < threads; i++) {
        if (pthread_create(&p->threads[i], NULL, native_worker_main, p) != 0)
            return bf_diag_set(diag, diag_len, BF_ERR_INTERNAL, "could not start request thread");
        p->n_started++;
    }
    return BF_OK;
}

bf_err native_start(transport_native *n, char *diag, size_t diag_len)
{
    srv_transport *t = n->t;
    for (size_t i = 0; i < n->n_listeners; i++) {
        native_listener *l = &n->listeners[i];
        bf_err err = l->ipc ? native_bind_ipc(l, t->ipc_mode, diag, diag_len)
                            : native_bind_tcp(l, diag, diag_len);
        if (err != BF_OK)
            return err;
        t->listeners[l->index].started = true;
        int port = 0;
        if (!l->ipc && native_bound_port(n, l->index, &port) == BF_OK)
            transport_log_event(t, BF_LOG_INFO, BF_EV_SERVER_LISTENING, "listening on %s (port %d)",
                                l->url, port);
        else
            transport_log_event(t, BF_LOG_INFO, BF_EV_SERVER_LISTENING, "listening on %s", l->url);
    }
    n->wepfd = epoll_create1(EPOLL_CLOEXEC);
    n->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &n->wake_tag};
    if (n->wepfd < 0 || n->wake_fd < 0 || epoll_ctl(n->wepfd, EPOLL_CTL_ADD, n->wake_fd, &ev) != 0)
        return bf_diag_set(diag, diag_len, BF_ERR_INTERNAL, "could not set up the reply writer");
    if (pthread_create(&n->writer, NULL, native_writer_main, n) != 0)
        return bf_diag_set(diag, diag_len, BF_ERR_INTERNAL, "could not start the reply writer");
    n->writer_started = true;
    n->started = true;
    for (int i = 0; i < NATIVE_POOLS; i++) {
        if (!n->pools[i].used)
            continue;
        bf_err err = native_pool_start(&n->pools[i], t->threads, t->ctx, diag, diag_len);
        if (err != BF_OK)
            return err;
    }
    for (size_t i = 0; i < n->n_listeners; i++) {
        native_listener *l = &n->listeners[i];
        struct epoll_event lev = {.events = EPOLLIN | EPOLLONESHOT, .data.ptr = l};
        if (epoll_ctl(l->pool->epfd, EPOLL_CTL_ADD, l->fd, &lev) != 0)
            return bf_diag_set(diag, diag_len, BF_ERR_INTERNAL, "could not watch %s", l->url);
    }
    return BF_OK;
}

bf_err native_bound_port(const transport_native *n, size_t index, int *port_out)
{
    for (size_t i = 0; n != NULL && i < n->n_listeners; i++) {
        const native_listener *l = &n->listeners[i];
        if (l->index != index)
            continue;
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        if (l->ipc || l->fd < 0 || getsockname(l->fd, (struct sockaddr *)&ss, &len) != 0)
            return BF_ERR_INVALID_ARGUMENT;
        *port_out = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                             : ntohs(((struct sockaddr_in *)&ss)->sin_port);
        return BF_OK;
    }
    return BF_ERR_INVALID_ARGUMENT;
}

/* ---- the sweeper's ------------------------------------------------------------------------- */

bool native_close_conn(transport_native *n, uint32_t id)
{
    bool found = false;
    pthread_mutex_lock(&n->mtx);
    for (native_conn *c = n->conns; c != NULL && !found; c = c->next) {
        if (c->id != id)
            continue;
        found = true;
        pthread_mutex_lock(&c->mtx);
        native_conn_shutdown_locked(c);
        pthread_mutex_unlock(&c->mtx);
    }
    pthread_mutex_unlock(&n->mtx);
    return found;
}

void native_sweep(transport_native *n)
{
    if (n == NULL || !n->started)
        return;
    pthread_mutex_lock(&n->mtx);
    bool stopping = n->stopping;
    pthread_mutex_unlock(&n->mtx);
    for (size_t i = 0; i < n->n_listeners && !stopping; i++)
        if (atomic_exchange(&n->listeners[i].paused, false))
            native_arm_listener(&n->listeners[i]);
}

/* ---- stop ---------------------------------------------------------------------------------- */

static bool native_drained(transport_native *n)
{
    return atomic_load(&n->serving) == 0 && atomic_load(&n->backlogged) == 0;
}

/* Close the listeners (an ipc:// socket file too, if it is still the one bound). */
static void native_close_listeners(transport_native *n)
{
    for (size_t i = 0; i < n->n_listeners; i++) {
        native_listener *l = &n->listeners[i];
        if (l->fd < 0)
            continue;
        close(l->fd);
        l->fd = -1;
        struct stat st;
        if (l->ipc && lstat(l->path, &st) == 0 && st.st_dev == l->dev && st.st_ino == l->ino)
            unlink(l->path);
    }
}

void native_stop(transport_native *n)
{
    if (n == NULL)
        return;
    if (!n->started) { /* a start that failed: what it bound */
        native_close_listeners(n);
        return;
    }
    srv_transport *t = n->t;
    /* no new connection, no new request */
    pthread_mutex_lock(&n->mtx);
    n->stopping = true;
    for (size_t i = 0; i < n->n_listeners; i++)
        if (n->listeners[i].fd >= 0)
            epoll_ctl(n->listeners[i].pool->epfd, EPOLL_CTL_DEL, n->listeners[i].fd, NULL);
    for (native_conn *c = n->conns; c != NULL; c = c->next) {
        pthread_mutex_lock(&c->mtx);
        c->rd_shut = true;
        shutdown(c->fd, SHUT_RD);
        pthread_mutex_unlock(&c->mtx);
    }
    /* the requests being served finish (each within its own deadline) */
    while (atomic_load(&n->serving) > 0)
        pthread_cond_wait(&n->cond, &n->mtx);
    /* their replies are written or dropped within the send timeout */
    struct timespec until;
    transport_deadline(&until, (long)t->send_timeout_ms + NATIVE_STOP_GRACE_MS);
    while (!native_drained(n) && pthread_cond_timedwait(&n->cond, &n->mtx, &until) != ETIMEDOUT)
        ;
    pthread_mutex_unlock(&n->mtx);
    atomic_store(&n->ended, true);
    for (int i = 0; i < NATIVE_POOLS; i++) {
        native_pool *p = &n->pools[i];
        if (p->stop_fd >= 0)
            native_signal_fd(p->stop_fd);
        for (int j = 0; j < p->n_started; j++)
            pthread_join(p->threads[j], NULL);
        p->n_started = 0;
        for (int j = 0; p->sessions != NULL && j < p->n_threads; j++) {
            bf_engine_close(p->sessions[j].engine);
            p->sessions[j].engine = NULL;
        }
    }
    if (n->writer_started) {
        pthread_mutex_lock(&n->wmtx);
        n->writer_end = true;
        pthread_mutex_unlock(&n->wmtx);
        native_signal_fd(n->wake_fd);
        pthread_join(n->writer, NULL);
        n->writer_started = false;
    }
    /* no thread is left: close what remains */
    pthread_mutex_lock(&n->mtx);
    native_conn *c = n->conns;
    n->conns = NULL;
    pthread_mutex_unlock(&n->mtx);
    while (c != NULL) {
        native_conn *next = c->next;
        srv_conns_release(t->conns, c->id);
        close(c->fd);
        native_out_free(c->out_head);
        free(c->body);
        pthread_mutex_destroy(&c->mtx);
        free(c);
        c = next;
    }
    native_close_listeners(n);
    n->started = false;
}

void native_free(transport_native *n)
{
    if (n == NULL)
        return;
    native_stop(n);
    for (int i = 0; i < NATIVE_POOLS; i++) {
        native_pool *p = &n->pools[i];
        if (p->epfd >= 0)
            close(p->epfd);
        if (p->stop_fd >= 0)
            close(p->stop_fd);
        free(p->threads);
        free(p->sessions);
        free(p->idle);
        pthread_mutex_destroy(&p->mtx);
    }
    if (n->wepfd >= 0)
        close(n->wepfd);
    if (n->wake_fd >= 0)
        close(n->wake_fd);
    pthread_cond_destroy(&n->cond);
    pthread_mutex_destroy(&n->mtx);
    pthread_mutex_destroy(&n->wmtx);
    free(n);
}
