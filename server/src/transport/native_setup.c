/*
 * native_setup.c - the native transport's listeners (tcp:// and ipc://, bound; an ipc socket
 * with its mode from the start), the admission of new connections under the caps, the request
 * threads of each pool, start and the bounded stop. The design notes are native.c's.
 */

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <linux/sockios.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "native_impl.h"

static const uint8_t native_rep_hello[NATIVE_HELLO_LEN] = {0, 'S', 'P', 0, 0, 0x31, 0, 0};

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
    if (ss.ss_family == AF_INET)
        transport_peer_ip(key, false, (const uint8_t *)&((struct sockaddr_in *)&ss)->sin_addr,
                          peer->addr, sizeof peer->addr);
    else if (ss.ss_family == AF_INET6)
        transport_peer_ip(key, true, ((struct sockaddr_in6 *)&ss)->sin6_addr.s6_addr, peer->addr,
                          sizeof peer->addr);
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
    c->refs = 1; /* the read turn */
    c->accepted_ms = transport_now_ms();
    native_peer(l, fd, &key, &c->peer);
    transport_who(&c->peer, c->who, sizeof c->who);
    c->id = SRV_TRANSPORT_NATIVE_ID | (atomic_fetch_add(&n->next_id, 1) & 0x7fffffffu);
    srv_conn_verdict v = srv_conns_admit(t->conns, c->id, l->index, &key);
    if (v != SRV_CONN_ADMITTED) {
        close(fd);
        transport_note_refused(t, v, c->who);
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
    native_active_begin(p);
    for (;;) {
        if (!native_active_settle(p))
            break; /* parked until the end */
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
        else if (tag == NATIVE_TAG_PENDING)
            native_resume(n, ev.data.ptr);
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
    transport_cond_init(&n->cond);
    for (int i = 0; i < NATIVE_POOLS; i++) {
        native_pool *p = &n->pools[i];
        p->n = n;
        p->name = i == 0 ? "ipc" : "network";
        p->epfd = p->stop_fd = -1;
        p->stop_tag = NATIVE_TAG_WAKE;
        pthread_mutex_init(&p->mtx, NULL);
        transport_cond_init(&p->park_cond);
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
        return bf_diag_set(diag, diag_len, BF_ERR_UNAVAILABLE, "could not listen on %s: %s", l->url,
                           gai_strerror(rv));
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    bool ok = fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
              bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, NATIVE_BACKLOG) == 0;
    int e = errno;
    freeaddrinfo(ai);
    if (!ok) {
        if (fd >= 0)
            close(fd);
        return bf_diag_set(diag, diag_len, BF_ERR_UNAVAILABLE, "could not listen on %s: %s", l->url,
                           strerror(e));
    }
    l->fd = fd;
    return BF_OK;
}

/* Bind an ipc:// socket with its mode from the start: bound under a temporary name beside the
 * path, given its mode, then renamed over the path (nng binds the path and changes its mode
 * afterwards, leaving a moment with the default mode). A live socket at the path is refused; a
 * stale one is replaced; anything else at the path is refused, never replaced. */
static bf_err native_bind_ipc(native_listener *l, int mode, char *diag, size_t diag_len)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    struct stat st;
    bool exists = lstat(l->path, &st) == 0;
    if (exists && !S_ISSOCK(st.st_mode)) /* a file, a directory or a link: never replaced */
        return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                           "cannot listen on %s: the path exists and is not a socket", l->url);
    if (exists) {
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
        return bf_diag_set(diag, diag_len, BF_ERR_UNAVAILABLE, "could not listen on %s: %s", l->url,
                           strerror(e));
    }
    l->fd = fd;
    l->dev = st.st_dev;
    l->ino = st.st_ino;
    return BF_OK;
}

static bf_err native_pool_start(native_pool *p, int threads, int active, srv_context *ctx,
                                char *diag, size_t diag_len)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (active <= 0)
        active = cpus > 0 && cpus < threads ? (int)cpus : threads;
    p->active_max = active < threads ? active : threads;
    p->epfd = epoll_create1(EPOLL_CLOEXEC);
    p->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    p->deferred_max = SRV_TRANSPORT_DEFERRED;
    int sessions = threads + p->deferred_max;
    p->threads = calloc((size_t)threads, sizeof *p->threads);
    p->sessions = calloc((size_t)sessions, sizeof *p->sessions);
    p->idle = calloc((size_t)sessions, sizeof *p->idle);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &p->stop_tag};
    if (p->epfd < 0 || p->stop_fd < 0 || p->threads == NULL || p->sessions == NULL ||
        p->idle == NULL || epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->stop_fd, &ev) != 0)
        return bf_diag_set(diag, diag_len, BF_ERR_INTERNAL, "could not set up the %s threads",
                           p->name);
    p->n_threads = threads;
    p->n_sessions = sessions;
    /* pushed last to first: the first session is lent first */
    for (int i = sessions - 1; i >= 0; i--) {
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
        bf_err err =
            native_pool_start(&n->pools[i], t->threads, t->active_threads, t->ctx, diag, diag_len);
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
    int64_t now = transport_now_ms();
    int late = 0;
    pthread_mutex_lock(&n->mtx);
    bool stopping = n->stopping;
    for (native_conn *c = n->conns; c != NULL; c = c->next) {
        if (atomic_load(&c->greeted) || now - c->accepted_ms < n->t->hello_timeout_ms)
            continue;
        pthread_mutex_lock(&c->mtx);
        if (!c->closing)
            late++;
        native_conn_shutdown_locked(c); /* its read turn sees the end and frees it */
        pthread_mutex_unlock(&c->mtx);
    }
    pthread_mutex_unlock(&n->mtx);
    if (late > 0)
        transport_note_event(n->t, NOTE_CLOSED, "closed a connection that sent no SP handshake",
                             "hello timeout");
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

/* A reply the kernel took is not yet read by its peer, and an nng peer that sees its
 * connection close before it has read drops what it had not read: nng 1.5.2 fails a pipe on
 * the hang-up its poller reports, even with the reply waiting in the socket (a client's stop
 * test lost the answer to its request in flight in 2 runs of 1,125 under load). So before the
 * descriptors close, the peers get up to SRV_TRANSPORT_LINGER_MS in all to take what was written
 * (SIOCOUTQ: on a unix socket the bytes its peer has not read, on tcp those not acknowledged).
 * There is no event for "the peer has read it": the wait looks again every millisecond, and
 * only when something is still queued. */
static void native_linger(const native_conn *list)
{
    int64_t until = transport_now_ms() + SRV_TRANSPORT_LINGER_MS;
    for (const native_conn *c = list; c != NULL; c = c->next) {
        int queued = 0;
        while (ioctl(c->fd, SIOCOUTQ, &queued) == 0 && queued > 0) {
            if (transport_now_ms() >= until)
                return;
            struct timespec ms = {.tv_sec = 0, .tv_nsec = 1000000L};
            nanosleep(&ms, NULL);
        }
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
        native_active_end(p); /* the parked threads end too */
        for (int j = 0; j < p->n_started; j++)
            pthread_join(p->threads[j], NULL);
        p->n_started = 0;
        for (int j = 0; p->sessions != NULL && j < p->n_sessions; j++) {
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
    /* no thread is left: close what remains, once the peers took the replies written */
    pthread_mutex_lock(&n->mtx);
    native_conn *c = n->conns;
    n->conns = NULL;
    pthread_mutex_unlock(&n->mtx);
    native_linger(c);
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
        pthread_cond_destroy(&p->park_cond);
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
