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
 * Deferred requests. A handler that would wait for PostgreSQL (Readiness.Check, its wait_ms
 * included, and Admin.Get) may instead send its statement and defer its answer (srv_call_defer,
 * on the session's socket or on any descriptor of its own, such as a Check's wait set): the thread
 * puts the session's socket in the pool's epoll set (EPOLLONESHOT, data: the native_req) and
 * goes back to epoll_wait, and whichever thread epoll wakes for that socket resumes the request
 * (srv_dispatch_resume), which answers or defers again. So a thread never sleeps in a request's
 * round trip: with as many threads as CPUs a busy thread finds the next ready event (a request,
 * a PostgreSQL answer) without sleeping, where a thread per request in flight woke one for
 * each (issue 26: 3.4 context switches a request at eight clients, 1.3 with two threads
 * deferring). A deferred request holds a session: a pool has threads + SRV_TRANSPORT_DEFERRED
 * sessions and lets at most SRV_TRANSPORT_DEFERRED requests defer at once (p->deferred), so a
 * thread always finds an idle session; past the cap a request waits on its thread as before. A
 * session's socket stays in the set, disarmed, while it is idle (re-armed with MOD next time;
 * added again when its engine reconnected: closing a descriptor removes it from the set). Once
 * epoll holds a request nothing of it is read by the thread that handed it over. A deferred
 * request counts in serving until it is answered, so stop waits for it as for any other.
 *
 * Active threads. A pool has `threads` threads, but only active_max of them (the CPUs, at most
 * `threads`; srv_transport_config.active_threads) wait for events at once; the others are
 * parked on park_cond. With a thread per CPU in epoll_wait, a thread that finishes a request
 * finds the next ready event without sleeping, where an idle thread beside every busy one was
 * woken for each (issue 26: 2.4 context switches a request at four threads, 1.4 at two). The
 * extra threads are for requests that block: a thread about to wait (on PostgreSQL through its
 * session's engine, bf_config.on_block; on a timer; srv_thread_blocks) lends its place, and a
 * parked thread takes it, so blocking requests (controls, List, Validate, a Check's wait past
 * the deferred cap) never leave the events without a thread while a thread is left. A lender
 * takes its place back when its request is done, and whichever thread then finds the pool
 * over active_max parks. Check and Get defer instead of blocking, so they lend nothing and cost
 * an atomic read.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "native_impl.h"

static const uint8_t native_req_hello[NATIVE_HELLO_LEN] = {0, 'S', 'P', 0, 0, 0x30, 0, 0};

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

void native_signal_fd(int fd)
{
    uint64_t one = 1;
    ssize_t w = write(fd, &one, sizeof one);
    (void)w; /* an eventfd at its maximum is readable already */
}

void native_wake_stop(transport_native *n)
{
    pthread_mutex_lock(&n->mtx);
    if (n->stopping)
        pthread_cond_broadcast(&n->cond);
    pthread_mutex_unlock(&n->mtx);
}

/* ---- connections: lifetime ----------------------------------------------------------------- */

void native_out_free(native_out *o)
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

void native_conn_unref(native_conn *c)
{
    pthread_mutex_lock(&c->mtx);
    bool last = --c->refs == 0;
    pthread_mutex_unlock(&c->mtx);
    if (last)
        native_conn_destroy(c);
}

void native_conn_shutdown_locked(native_conn *c)
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

/* Give the read turn back to epoll; when it cannot be, the connection is lost with it. */
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
    if (epoll_ctl(n->wepfd, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
        /* out of kernel memory: no one would write the queue, so the connection ends (its
         * read turn sees that) rather than hang its peer */
        native_conn_shutdown_locked(c);
        return false;
    }
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
void *native_writer_main(void *arg)
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

/* ---- active threads -------------------------------------------------------------------- */

static _Thread_local bool native_lent; /* this thread lent its place (native_lend) */

/* srv_thread_on_block's hook of a pool thread: it is about to wait, so a parked thread may
 * take its place (once per event: the place comes back in native_active_settle). */
static void native_lend(void *arg)
{
    native_pool *p = arg;
    if (native_lent)
        return;
    native_lent = true;
    pthread_mutex_lock(&p->mtx);
    atomic_fetch_sub(&p->active, 1);
    if (p->parked > 0)
        pthread_cond_signal(&p->park_cond);
    pthread_mutex_unlock(&p->mtx);
}

void native_active_begin(native_pool *p)
{
    pthread_mutex_lock(&p->mtx);
    atomic_fetch_add(&p->active, 1);
    pthread_mutex_unlock(&p->mtx);
    srv_thread_on_block(native_lend, p);
}

bool native_active_settle(native_pool *p)
{
    transport_native *n = p->n;
    if (!native_lent && atomic_load(&p->active) <= p->active_max)
        return true; /* the common case: nothing lent, nothing over */
    pthread_mutex_lock(&p->mtx);
    if (native_lent) {
        native_lent = false;
        atomic_fetch_add(&p->active, 1);
    }
    while (atomic_load(&p->active) > p->active_max && !atomic_load(&n->ended)) {
        atomic_fetch_sub(&p->active, 1);
        p->parked++;
        while (atomic_load(&p->active) >= p->active_max && !atomic_load(&n->ended))
            pthread_cond_wait(&p->park_cond, &p->mtx);
        p->parked--;
        atomic_fetch_add(&p->active, 1);
    }
    bool go_on = !atomic_load(&n->ended);
    pthread_mutex_unlock(&p->mtx);
    return go_on;
}

void native_active_end(native_pool *p)
{
    pthread_mutex_lock(&p->mtx);
    pthread_cond_broadcast(&p->park_cond);
    pthread_mutex_unlock(&p->mtx);
}

/* Lend a session of the pool (one is always idle: see native_pool) / take it back. */
static int native_session_take(native_pool *p)
{
    pthread_mutex_lock(&p->mtx);
    srv_session *s = p->idle[--p->n_idle];
    pthread_mutex_unlock(&p->mtx);
    return (int)(s - p->sessions);
}

static void native_session_give(native_pool *p, int session)
{
    pthread_mutex_lock(&p->mtx);
    p->idle[p->n_idle++] = &p->sessions[session];
    pthread_mutex_unlock(&p->mtx);
}

/* A request is over (answered or dropped): its body, its count of c, its place in serving. */
static void native_request_end(transport_native *n, native_conn *c, uint8_t *body)
{
    free(body);
    native_conn_unref(c);
    if (atomic_fetch_sub(&n->serving, 1) == 1)
        native_wake_stop(n);
}

/* The answer of a request of c (err: srv_dispatch's): framed behind its backtrace and sent. */
static void native_answer(transport_native *n, native_conn *c, const uint8_t *body, size_t hdr,
                          bf_err err, uint8_t *out, size_t out_len)
{
    srv_transport *t = n->t;
    size_t pre = native_frame_head(c->ipc);
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

/* Put a deferred request's descriptor in the pool's epoll set, armed once (data: r). A
 * descriptor put there before stays, disarmed, while its session is idle, and is re-armed;
 * one the set does not hold (new, or a reconnected session's socket under a reused number,
 * since closing a descriptor removes it) is added. epoll keys on the descriptor and its open
 * file, so an entry found is this one's. Once epoll holds r, another thread may resume it,
 * answer it and free it: nothing of r is read after the epoll_ctl that hands it over. false
 * when epoll would not take it. */
static bool native_poll_pending(native_pool *p, native_req *r)
{
    int fd = srv_pending_fd(r->pending);
    if (fd < 0)
        return false;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT, .data.ptr = r};
    if (epoll_ctl(p->epfd, EPOLL_CTL_MOD, fd, &ev) == 0)
        return true;
    return errno == ENOENT && epoll_ctl(p->epfd, EPOLL_CTL_ADD, fd, &ev) == 0;
}

/* Wait on this thread for a deferred request epoll would not take (out of kernel memory). */
static void native_wait_pending(native_req *r, uint8_t **out, size_t *out_len, bf_err *err)
{
    while (*err == BF_OK && r->pending != NULL) {
        struct pollfd pfd = {.fd = srv_pending_fd(r->pending), .events = POLLIN};
        if (pfd.fd >= 0) {
            srv_thread_blocks();
            if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
                continue; /* the resume sees what is wrong with the socket */
        }
        *err = srv_dispatch_resume(&r->pending, out, out_len);
    }
}

/* A request's dispatch ended (r->pending NULL): answer it, give its session and its place
 * among the deferred back, free r when it is on the heap. */
static void native_finish(transport_native *n, native_req *r, bf_err err, uint8_t *out,
                          size_t out_len)
{
    native_pool *p = r->c->pool;
    native_session_give(p, r->session);
    if (r->counted)
        atomic_fetch_sub(&p->deferred, 1);
    native_answer(n, r->c, r->body, r->hdr, err, out, out_len);
    native_request_end(n, r->c, r->body);
    if (r->tag == NATIVE_TAG_PENDING)
        free(r);
}

void native_resume(transport_native *n, native_req *r)
{
    uint8_t *out = NULL;
    size_t out_len = 0;
    bf_err err = srv_dispatch_resume(&r->pending, &out, &out_len);
    if (err == BF_OK && r->pending != NULL && native_poll_pending(r->c->pool, r))
        return; /* it waits again: r is epoll's */
    native_wait_pending(r, &out, &out_len, &err);
    native_finish(n, r, err, out, out_len);
}

/* Serve one whole message of c (body: the backtrace, then the envelope; taken). */
static void native_serve(transport_native *n, native_conn *c, uint8_t *body, size_t len)
{
    srv_transport *t = n->t;
    int64_t received_us = srv_now_us();
    size_t hdr = 0;
    bool found = false;
    for (int hop = 0; hop < NATIVE_MAX_HOPS && hdr + 4 <= len && !found; hop++) {
        found = (body[hdr] & 0x80) != 0;
        hdr += 4;
    }
    srv_conn_request admitted = found ? srv_conns_begin(t->conns, c->id, SRV_TRANSPORT_IN_FLIGHT,
                                                        SRV_TRANSPORT_REPLYING, transport_now_ms())
                                      : SRV_CONN_REQUEST_OK;
    if (!found || admitted != SRV_CONN_REQUEST_OK) {
        /* no request ID: not a REQ message (nng drops it too) */
        if (admitted == SRV_CONN_REQUEST_BUSY)
            transport_note_event(t, NOTE_IN_FLIGHT,
                                 "dropped a request: its connection has the most requests in "
                                 "flight already",
                                 c->who);
        native_request_end(n, c, body);
        return;
    }
    native_pool *p = c->pool;
    /* on this thread's stack; on the heap only once its handler has deferred it */
    native_req local = {.c = c, .body = body, .hdr = hdr, .session = native_session_take(p)};
    /* a request may wait on PostgreSQL without this thread while fewer than deferred_max do */
    local.counted = atomic_fetch_add(&p->deferred, 1) < p->deferred_max;
    if (!local.counted)
        atomic_fetch_sub(&p->deferred, 1);
    uint8_t *out = NULL;
    size_t out_len = 0;
    bf_err err =
        srv_dispatch_begin(t->d, &p->sessions[local.session], &c->peer, body + hdr, len - hdr,
                           received_us, local.counted ? &local.pending : NULL, &out, &out_len);
    native_req *r = &local;
    if (err == BF_OK && local.pending != NULL) {
        native_req *heap = malloc(sizeof *heap);
        if (heap != NULL) {
            *heap = local;
            heap->tag = NATIVE_TAG_PENDING;
            if (native_poll_pending(p, heap))
                return; /* heap is epoll's now: any thread may resume it */
            r = heap;
        }
        native_wait_pending(r, &out, &out_len, &err);
    }
    native_finish(n, r, err, out, out_len);
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
    native_serve(n, c, body, len); /* ends the request, now or once it is answered */
}

/* The connection is readable (this thread holds its read turn): read what the current step
 * needs, up to one whole message, and serve it. */
void native_readable(transport_native *n, native_conn *c)
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
            want =
                (c->rstate == NATIVE_HELLO ? NATIVE_HELLO_LEN : native_frame_head(c->ipc)) - c->got;
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
            atomic_store(&c->greeted, true);
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
