/*
 * transport_serve.c - the serving half of the nng transport of tls+tcp:// listeners (see
 * transport.c's design notes), and the sweeper of both transports:
 * nng's pipe notifications admitting connections under the caps, the peer facts of a request,
 * the request threads with their slots and replies that never wait for their peers, the
 * replier that waits for the replies of busy pipes, the sweeper that closes
 * quiet unread connections (nng's and native.c's) and probes nng's reaper, and the rate-limited
 * log notes.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "transport_impl.h"

static void transport_vlog(const srv_transport *t, bf_log_level level, bf_event event,
                           const char *fmt, va_list ap) __attribute__((format(printf, 4, 0)));

static void transport_vlog(const srv_transport *t, bf_log_level level, bf_event event,
                           const char *fmt, va_list ap)
{
    if (t->ctx == NULL || t->ctx->engine_cfg.log == NULL)
        return;
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    bf_log_record rec = BF_LOG_RECORD_INIT;
    rec.level = level;
    rec.event = event;
    rec.msg = buf;
    t->ctx->engine_cfg.log(t->ctx->engine_cfg.log_arg, &rec);
}

void transport_log(const srv_transport *t, bf_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    transport_vlog(t, level, BF_EV_NONE, fmt, ap);
    va_end(ap);
}

void transport_log_event(const srv_transport *t, bf_log_level level, bf_event event,
                         const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    transport_vlog(t, level, event, fmt, ap);
    va_end(ap);
}

void transport_deadline(struct timespec *until, long ms)
{
    clock_gettime(CLOCK_MONOTONIC, until);
    until->tv_sec += ms / 1000;
    until->tv_nsec += (ms % 1000) * 1000000L;
    if (until->tv_nsec >= 1000000000L) {
        until->tv_sec++;
        until->tv_nsec -= 1000000000L;
    }
}

void transport_cond_init(pthread_cond_t *cond)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
}

int64_t transport_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Count one event of kind; log it (with the events suppressed since the last line) unless a
 * line of this kind was logged less than TRANSPORT_NOTE_MS ago. */
void transport_note_event(srv_transport *t, transport_note_kind kind, const char *what,
                          const char *who)
{
    int64_t now = transport_now_ms();
    pthread_mutex_lock(&t->mtx);
    transport_note *n = &t->notes[kind];
    n->pending++;
    long count = 0;
    if (n->last_ms == 0 || now - n->last_ms >= TRANSPORT_NOTE_MS) {
        count = n->pending;
        n->pending = 0;
        n->last_ms = now;
    }
    pthread_mutex_unlock(&t->mtx);
    /* rate-limited: a line stands for count events */
    bf_event event = kind == NOTE_LISTENER_FULL || kind == NOTE_PEER_FULL ? BF_EV_CONN_REFUSED
                                                                          : BF_EV_CONN_DROPPED;
    if (count == 1)
        transport_log_event(t, BF_LOG_WARN, event, "%s (%s)", what, who);
    else if (count > 1)
        transport_log_event(t, BF_LOG_WARN, event, "%s (%s; %ld times in the last %d s)", what, who,
                            count, TRANSPORT_NOTE_MS / 1000);
}

/* ---- connections --------------------------------------------------------------------------- */

static transport_listener *transport_listener_of(srv_transport *t, nng_pipe pipe, size_t *index)
{
    int id = nng_listener_id(nng_pipe_listener(pipe));
    for (size_t i = 0; id > 0 && i < t->n_listeners; i++) {
        if (atomic_load(&t->listeners[i].id) == (uint32_t)id) {
            *index = i;
            return &t->listeners[i];
        }
    }
    return NULL;
}

void transport_peer_ip(srv_conn_peer *key, bool v6, const uint8_t *addr, char *text,
                       size_t text_len)
{
    static const uint8_t v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    memset(key, 0, sizeof *key);
    if (!v6) {
        key->family = SRV_CONN_PEER_IPV4;
        memcpy(key->addr, addr, 4);
    } else if (memcmp(addr, v4_mapped, sizeof v4_mapped) == 0) {
        key->family = SRV_CONN_PEER_IPV4; /* one peer, whichever way it connected */
        memcpy(key->addr, addr + 12, 4);
    } else {
        key->family = SRV_CONN_PEER_IPV6;
        memcpy(key->addr, addr, 16);
    }
    int af = key->family == SRV_CONN_PEER_IPV4 ? AF_INET : AF_INET6;
    if (inet_ntop(af, key->addr, text, (socklen_t)text_len) == NULL)
        text[0] = '\0';
}

void transport_note_refused(srv_transport *t, srv_conn_verdict v, const char *who)
{
    if (v == SRV_CONN_PEER_FULL)
        transport_note_event(t, NOTE_PEER_FULL,
                             "refused a connection: its peer holds max_connections_per_peer", who);
    else
        transport_note_event(t, NOTE_LISTENER_FULL,
                             "refused a connection: its listener holds max_connections", who);
}

/* The peer of a tls pipe as a cap key and as text ("127.0.0.1"; "" when unknown). */
static void transport_peer_key(nng_pipe pipe, srv_conn_peer *key, char *text, size_t text_len)
{
    memset(key, 0, sizeof *key);
    text[0] = '\0';
    nng_sockaddr sa;
    if (nng_pipe_get_addr(pipe, NNG_OPT_REMADDR, &sa) != 0)
        return;
    if (sa.s_family == NNG_AF_INET)
        transport_peer_ip(key, false, (const uint8_t *)&sa.s_in.sa_addr, text, text_len);
    else if (sa.s_family == NNG_AF_INET6)
        transport_peer_ip(key, true, sa.s_in6.sa_addr, text, text_len);
}

/* nng's pipe notifications: admission under the caps at ADD_PRE (closing a pipe there keeps it
 * from ever being added), release at REM_POST. Called on nng's threads; never blocks. */
void transport_pipe_event(nng_pipe pipe, nng_pipe_ev ev, void *arg)
{
    srv_transport *t = arg;
    if (ev == NNG_PIPE_EV_REM_POST) {
        srv_conns_release(t->conns, nng_pipe_id(pipe));
        return;
    }
    if (ev != NNG_PIPE_EV_ADD_PRE)
        return;
    size_t index = 0;
    transport_listener *tl = transport_listener_of(t, pipe, &index);
    if (tl == NULL) { /* not one of ours (we never dial): refuse */
        nng_pipe_close(pipe);
        return;
    }
    srv_conn_peer key;
    srv_peer peer = {.listener = tl->kind};
    transport_peer_key(pipe, &key, peer.addr, sizeof peer.addr);
    srv_conn_verdict v = srv_conns_admit(t->conns, (uint32_t)nng_pipe_id(pipe), index, &key);
    if (v == SRV_CONN_ADMITTED)
        return;
    nng_pipe_close(pipe);
    char who[96];
    transport_who(&peer, who, sizeof who);
    transport_note_refused(t, v, who);
}

/* Which listener a request came through (tls: the nng socket serves nothing else) and its
 * peer's address. */
static void transport_peer(srv_transport *t, nng_msg *msg, srv_peer *peer)
{
    memset(peer, 0, sizeof *peer);
    peer->listener = "unknown";
    nng_pipe pipe = nng_msg_get_pipe(msg);
    size_t index = 0;
    const transport_listener *tl = transport_listener_of(t, pipe, &index);
    if (tl == NULL)
        return;
    peer->listener = tl->kind;
    srv_conn_peer key;
    transport_peer_key(pipe, &key, peer->addr, sizeof peer->addr);
}

/* ---- serving ------------------------------------------------------------------------------- */

void transport_who(const srv_peer *peer, char *out, size_t cap)
{
    if (peer->has_uid)
        snprintf(out, cap, "%s uid %u", peer->listener, (unsigned)peer->uid);
    else
        snprintf(out, cap, "%s %s", peer->listener, peer->addr[0] ? peer->addr : "unknown");
}

/* Wake the waiters on t->cond, if there are any (under t->mtx). */
static void transport_wake(srv_transport *t)
{
    if (t->cond_waiters > 0)
        pthread_cond_broadcast(&t->cond);
}

static void transport_slot_release(srv_transport *t, transport_slot *slot)
{
    pthread_mutex_lock(&t->mtx);
    slot->next_free = slot->group->free_slots;
    slot->group->free_slots = slot;
    transport_wake(t);
    pthread_mutex_unlock(&t->mtx);
}

/* The reply of a slot was handed to its pipe, or not within the send timeout: then the peer is
 * not reading an earlier reply, the reply is dropped and the connection marked unread (its
 * requests are refused from now on; the sweeper closes it once it is quiet). The slot's send
 * has ended (nng_aio_wait returned); called by the worker that sent it or by the replier. */
static void transport_sent(transport_slot *slot)
{
    srv_transport *t = slot->t;
    int rv = nng_aio_result(slot->send_aio);
    if (rv != 0) {
        nng_msg_free(nng_aio_get_msg(slot->send_aio));
        nng_aio_set_msg(slot->send_aio, NULL);
    }
    if (rv == NNG_ETIMEDOUT) {
        srv_conns_mark_unread(t->conns, slot->pipe_id, transport_now_ms());
        char who[96];
        transport_who(&slot->peer, who, sizeof who);
        transport_note_event(t, NOTE_UNREAD,
                             "stopped serving a connection that does not read its replies", who);
    } else if (rv != 0 && rv != NNG_ECLOSED) {
        transport_log(t, BF_LOG_WARN, "could not send a reply: %s", nng_strerror(rv));
    }
    srv_conns_end(t->conns, slot->pipe_id, true);
    pthread_mutex_lock(&t->mtx);
    if (rv == 0 && t->stopping)
        t->late_replies++;
    slot->group->sending--;
    slot->next_free = slot->group->free_slots;
    slot->group->free_slots = slot;
    transport_wake(t); /* nobody, while slots are free and stop is not waiting */
    pthread_mutex_unlock(&t->mtx);
}

/* Whether the send of slot has ended: its count is the reply's length once it was handed over
 * (never 0: a reply envelope always has its status), its result an error when it failed.
 * Both are 0 from the send's start until its end, and keep their values after it; a read
 * that races the end sees the send as not ended yet. nng_aio_wait() then returns at once and
 * orders what nng wrote before it. */
static bool transport_send_ended(const transport_slot *slot)
{
    return nng_aio_count(slot->send_aio) > 0 || nng_aio_result(slot->send_aio) != 0;
}

/* Hand slot's reply to nng without waiting for its peer. rep0 hands a reply to its pipe at once
 * when the pipe is not writing an earlier one, and then ends the send before nng_ctx_send
 * returns: the send aio has no callback, so that costs no thread switch. Otherwise (the pipe is
 * busy: its peer has not read an earlier reply yet, or nng has not yet noted that it did) the
 * slot is queued to the replier, and the send ends within the send timeout: the slot waits for
 * the peer, the thread does not. */
static void transport_send(srv_transport *t, transport_slot *slot, nng_msg *msg)
{
    nng_aio_set_msg(slot->send_aio, msg);
    nng_aio_set_timeout(slot->send_aio, t->send_timeout_ms);
    nng_ctx_send(slot->ctx, slot->send_aio);
    if (transport_send_ended(slot)) {
        nng_aio_wait(slot->send_aio);
        transport_sent(slot);
        return;
    }
    pthread_mutex_lock(&t->mtx);
    slot->next_pending = t->pending;
    t->pending = slot;
    pthread_cond_signal(&t->reply_cond);
    pthread_mutex_unlock(&t->mtx);
}

/* The replier: frees the slots of the queued replies as their sends end. nng_aio_wait() would
 * wait for one send at a time, and a reply stuck behind a peer that does not read would hold
 * every later one's slot for the send timeout; so the queue is looked over every
 * TRANSPORT_REPLY_POLL_MS while it is not empty (only while some pipe is busy), and the
 * replier sleeps on reply_cond while it is empty. It never waits inside nng, so stop can
 * always end it: when stop tells it to, every send has ended, or nng is wedged and whatever
 * is left in the queue stays with the abandoned transport. */
void *transport_replier_main(void *arg)
{
    srv_transport *t = arg;
    pthread_mutex_lock(&t->mtx);
    for (;;) {
        while (t->pending == NULL && !t->replier_end)
            pthread_cond_wait(&t->reply_cond, &t->mtx);
        if (t->replier_end)
            break;
        transport_slot *ended = NULL;
        for (transport_slot **link = &t->pending; *link != NULL;) {
            transport_slot *slot = *link;
            if (transport_send_ended(slot)) {
                *link = slot->next_pending;
                slot->next_pending = ended;
                ended = slot;
            } else {
                link = &slot->next_pending;
            }
        }
        if (ended == NULL) {
            struct timespec until;
            transport_deadline(&until, TRANSPORT_REPLY_POLL_MS);
            pthread_cond_timedwait(&t->reply_cond, &t->mtx, &until);
            continue;
        }
        pthread_mutex_unlock(&t->mtx);
        while (ended != NULL) {
            transport_slot *slot = ended;
            ended = slot->next_pending;
            nng_aio_wait(slot->send_aio); /* returns at once */
            transport_sent(slot);
        }
        pthread_mutex_lock(&t->mtx);
    }
    pthread_mutex_unlock(&t->mtx);
    return NULL;
}

/* Handle one message received on slot: refuse it, or dispatch it and send the reply from the
 * slot without waiting for its peer. The slot is free again when this returns, or once the send
 * completes. */
static void transport_serve(transport_worker *w, transport_slot *slot, nng_msg *msg)
{
    srv_transport *t = w->t;
    int64_t received_us = srv_now_us();
    uint32_t pipe_id = (uint32_t)nng_pipe_id(nng_msg_get_pipe(msg));
    srv_peer peer;
    transport_peer(t, msg, &peer);
    srv_conn_request admitted = srv_conns_begin(t->conns, pipe_id, SRV_TRANSPORT_IN_FLIGHT,
                                                SRV_TRANSPORT_REPLYING, transport_now_ms());
    if (admitted != SRV_CONN_REQUEST_OK) {
        /* BUSY: the peer pipelines past the limit; UNREAD: it does not read its replies (its
         * requests keep it from being quiet, so it is not closed while it is sending); GONE:
         * its connection is closed already, a reply would be discarded by nng */
        nng_msg_free(msg);
        transport_slot_release(t, slot);
        if (admitted == SRV_CONN_REQUEST_BUSY) {
            char who[96];
            transport_who(&peer, who, sizeof who);
            transport_note_event(t, NOTE_IN_FLIGHT,
                                 "dropped a request: its connection has the most requests in "
                                 "flight already",
                                 who);
        }
        return;
    }
    uint8_t *out = NULL;
    size_t out_len = 0;
    transport_group *g = w->group;
    pthread_mutex_lock(&t->mtx);
    srv_session *session = g->idle_sessions[--g->n_idle_sessions]; /* one per worker */
    pthread_mutex_unlock(&t->mtx);
    bf_err err = srv_dispatch(t->d, session, &peer, nng_msg_body(msg), nng_msg_len(msg),
                              received_us, &out, &out_len);
    nng_msg_clear(msg);
    bool answer = err == BF_OK && nng_msg_append(msg, out, out_len) == 0;
    free(out);
    if (answer) {
        slot->pipe_id = pipe_id;
        slot->peer = peer;
        srv_conns_replying(t->conns, pipe_id);
    }
    pthread_mutex_lock(&t->mtx); /* the session back, and the reply counted, in one hold */
    g->idle_sessions[g->n_idle_sessions++] = session;
    if (answer)
        g->sending++;
    pthread_mutex_unlock(&t->mtx);
    if (!answer) {
        transport_log(t, BF_LOG_ERROR, "could not answer a request: %s",
                      err != BF_OK ? bf_err_str(err) : "out of memory");
        nng_msg_free(msg);
        srv_conns_end(t->conns, pipe_id, false);
        transport_slot_release(t, slot);
        return;
    }
    transport_send(t, slot, msg);
}

/* A worker waits in recv only while fewer than TRANSPORT_RECEIVERS of its socket's threads do;
 * the others wait on the socket's park_cond. rep0 hands requests to the contexts waiting in
 * recv in the order they began to wait, so with every thread waiting a quiet caller's requests
 * went to each thread in turn, and each ran cold: about 25 us a request at one client (issue
 * 26). A thread that takes a request and leaves no thread receiving wakes a parked one, so
 * concurrent requests still find as many threads as the socket has. */
void *transport_worker_main(void *arg)
{
    transport_worker *w = arg;
    srv_transport *t = w->t;
    transport_group *g = w->group;
    for (;;) {
        pthread_mutex_lock(&t->mtx);
        for (;;) {
            if (t->stopping)
                break;
            if (g->free_slots == NULL) {
                t->cond_waiters++;
                pthread_cond_wait(&t->cond, &t->mtx); /* every slot waits for a peer (bounded) */
                t->cond_waiters--;
            } else if (g->receivers >= TRANSPORT_RECEIVERS) {
                pthread_cond_wait(&g->park_cond, &t->mtx);
            } else {
                break;
            }
        }
        transport_slot *slot = t->stopping ? NULL : g->free_slots;
        if (slot != NULL) {
            g->free_slots = slot->next_free;
            w->receiving = slot;
            g->receivers++;
        }
        pthread_mutex_unlock(&t->mtx);
        if (slot == NULL)
            break;
        nng_aio_set_timeout(w->aio, NNG_DURATION_INFINITE);
        nng_ctx_recv(slot->ctx, w->aio);
        nng_aio_wait(w->aio);
        pthread_mutex_lock(&t->mtx);
        w->receiving = NULL;
        g->receivers--;
        if (g->receivers == 0)
            pthread_cond_signal(&g->park_cond); /* no one, when no thread is parked */
        pthread_mutex_unlock(&t->mtx);
        int rv = nng_aio_result(w->aio);
        if (rv != 0) {
            transport_slot_release(t, slot);
            if (rv == NNG_ECLOSED)
                break;
            transport_log(t, BF_LOG_WARN, "receive failed: %s", nng_strerror(rv));
            continue;
        }
        transport_serve(w, slot, nng_aio_get_msg(w->aio));
    }
    return NULL;
}

/* Close unread connections once they have been quiet for SRV_TRANSPORT_QUIET_MS: a pipe that
 * has not delivered a request for that long is not in the middle of a read, so its close
 * cannot meet nng 1.5.2's race (design notes). And probe nng's reaper (canary.h). */
void *transport_sweeper_main(void *arg)
{
    srv_transport *t = arg;
    pthread_mutex_lock(&t->mtx);
    while (!t->stopping) {
        struct timespec until;
        transport_deadline(&until, TRANSPORT_SWEEP_MS);
        while (!t->stopping && pthread_cond_timedwait(&t->sweep_cond, &t->mtx, &until) != ETIMEDOUT)
            ;
        if (t->stopping)
            break;
        pthread_mutex_unlock(&t->mtx);
        if (t->canary != NULL && srv_canary_poll(t->canary, transport_now_ms(), TRANSPORT_CANARY_MS,
                                                 SRV_TRANSPORT_WEDGE_MS) == SRV_CANARY_WEDGED) {
            transport_log(t, BF_LOG_ERROR,
                          "nng stopped releasing closed connections (its reaper is stuck, a "
                          "defect of nng 1.5.2 that a peer can trigger): their descriptors and "
                          "connection slots are lost until the daemon restarts");
            if (t->on_wedged != NULL)
                t->on_wedged(t->on_wedged_arg);
            pthread_mutex_lock(&t->mtx);
            break; /* reported once; nothing else here can work any more */
        }
        uint32_t ids[64];
        size_t n = srv_conns_take_quiet(t->conns, transport_now_ms(), SRV_TRANSPORT_QUIET_MS, ids,
                                        sizeof ids / sizeof ids[0]);
        native_sweep(t->native);
        for (size_t i = 0; i < n; i++) {
            nng_pipe pipe = NNG_PIPE_INITIALIZER;
            pipe.id = ids[i];
            bool closed = (ids[i] & SRV_TRANSPORT_NATIVE_ID) != 0
                              ? native_close_conn(t->native, ids[i])
                              : nng_pipe_close(pipe) == 0;
            if (closed)
                transport_note_event(t, NOTE_CLOSED,
                                     "closed a connection that does not read its "
                                     "replies once it was quiet",
                                     "unread");
        }
        pthread_mutex_lock(&t->mtx);
    }
    pthread_mutex_unlock(&t->mtx);
    return NULL;
}
