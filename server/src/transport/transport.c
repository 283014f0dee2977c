/*
 * transport.c - the REP transport of buzz-backfilld: a listener per configured URL; tcp:// and
 * ipc:// (an ipc socket file with a restricted mode, at a path that must not name anything but
 * a socket) are served by the SP transport of our own (native.c, native_setup.c), tls+tcp://
 * (the configured certificate and a private key) by an nng rep0 socket with a pool of request
 * threads and contexts (transport_serve.c); the bounded stop of both, and the defences against
 * hostile peers. This file sets up and stops; transport_impl.h is what the files share.
 *
 * Design notes
 *
 * Why a transport of our own for tcp:// and ipc:// (issue 26, docs/benchmarks.md). The
 * clients are nng REQ sockets and the wire is nng's SP protocol either way; what changed is the
 * server. Through nng's rep0 socket a request crossed nng's poller thread, two of its task
 * threads and one of ours, and its reply's completion one more: on this class of VM each
 * wake-up costs about as much as a whole indexed PostgreSQL read, and 75 % of the daemon's CPU
 * was nng's threads and the switches between them. native.c wakes one thread per request,
 * which reads it, serves it and writes the reply itself: the daemon's CPU per request fell to
 * 0.36x and a Check at one client to 0.65x of the rep0 version's, below an echo through nng
 * plus an indexed read. It also ends two nng 1.5.2 defects the rep0 version had to work around
 * (below): a close racing a partial read that wedged nng's reaper for good (a peer could
 * trigger it by resetting a connection it was pumping into), and an ipc listener that stopped
 * adding connections after a few aborted handshakes (tests/integration/test_nng_ipc_wedge.c).
 * tls+tcp:// stays on nng: its TLS is nng's, and the canary below still watches its reaper.
 *
 * The rest of these notes are the rep0 side's (tls+tcp://); native.c has its own.
 *
 * Concurrency: the socket has `threads` threads and a pool of contexts (slots). A thread takes
 * a free slot, receives a request on it, dispatches it with an engine session lent for the
 * request and hands the reply to nng on the same slot without waiting for the peer. A REP
 * socket hands each request to one waiting context and routes each reply back to the pipe
 * (connection) it came from. So up to `threads` requests per socket are served at once, and a
 * reply that waits for its peer holds a slot, never a request thread.
 *
 * What a request costs beyond its handling was measured (issue 26, docs/benchmarks.md) and
 * shaped these choices:
 * - rep0 hands a reply to its pipe, and ends the send, inside nng_ctx_send when the pipe is not
 *   still writing an earlier reply: the usual case, and then the thread frees the slot itself.
 *   The send aio has no callback, so no nng thread is woken to end it (a callback cost a
 *   thread switch per request, about 20 us on this VM). When the pipe is busy (its peer has
 *   not read an earlier reply yet) the send ends later, within the send timeout; the slot is
 *   then queued to the replier thread, which frees it when its send ends.
 * - rep0 gives each request to the context that has waited longest, so with every thread
 *   waiting in recv a quiet caller's requests went to each thread in turn; and with an engine
 *   session per thread, to each PostgreSQL backend in turn, all of them cold: Get took 431 us
 *   at one client against 269 us with a single thread. Now at most TRANSPORT_RECEIVERS threads
 *   of a socket wait in recv (the others park; one that takes a request and leaves none
 *   receiving wakes a parked one), and the sessions are a stack: a request borrows the one
 *   returned last.
 * - The end of a reply takes the mutex but wakes a thread only when one waits for it (a
 *   worker without a free slot, stop waiting for the replies in flight); the sweeper pauses on
 *   a condition variable of its own, which only stop signals (waking it on every reply cost a
 *   context switch per request).
 *
 * Peer facts: the listener a request arrived on is found from its pipe (nng_pipe_listener); the
 * tls peer address comes from NNG_OPT_REMADDR (native.c: the ipc peer uid from SO_PEERCRED,
 * the tcp peer address from getpeername, so boundary authority is granted only to requests
 * that really came through an ipc:// listener).
 *
 * Size: nng refuses messages over SRV_MAX_MESSAGE + SRV_TRANSPORT_RECV_SLACK by dropping the
 * connection; between SRV_MAX_MESSAGE and that, the dispatcher answers RESOURCE_EXHAUSTED.
 *
 * Hostile peers. What froze the daemon, found with raw SP peers that pipeline requests and
 * never read (tests/integration/test_hostile_peers.c):
 * - rep0 keeps reading a pipe as long as a context waits for a request, so one connection can
 *   feed every thread; each reply then waits for the pipe, which is still writing an earlier
 *   reply the peer does not read. Each thread (which used to wait for its send) sat out the
 *   10 s send timeout, took the next pipelined request and sat again: callers on every
 *   listener timed out behind four such peers.
 * - nng 1.5.2's tcp and ipc transports race when a pipe is closed while its receive callback
 *   is between two partial reads (header, then body): the callback resubmits the read on an
 *   aio that close has just stopped, nni_aio_begin() refuses it without completing it, and the
 *   protocol's receive never finishes. nng's single reaper thread then waits for it forever in
 *   rep0_pipe_stop(): no pipe is finalized again, so the descriptors of every later closed
 *   connection stay open (they are only closed when reaped), and nng_close() waits for the
 *   pipe list to drain, for good. A peer that pumps requests and resets its connection can
 *   trigger it; so did our own close of such a pipe (a first version of these defences closed
 *   a non-reading pipe at its send timeout and wedged nng within a few attacks). It cannot be
 *   fixed from outside nng; the defences below avoid closing pipes that may be reading.
 * The defences, each tested there:
 * - Connection caps (conns.c): nng's ADD_PRE pipe notification admits a connection only while
 *   its listener has fewer than max_conns and its peer (remote IP, ipc uid) fewer than
 *   max_conns_per_peer; others are closed at once. At ADD_PRE the pipe has not started
 *   receiving, so that close cannot hit the race above. REM_POST releases the slot.
 * - At most SRV_TRANSPORT_IN_FLIGHT requests per connection are served at once and at most
 *   SRV_TRANSPORT_REPLYING of its replies are being sent; a further request is dropped
 *   unanswered (its peer is pipelining, which our clients never do beyond one retry), so one
 *   connection holds at most that many threads. The replies have their own, larger count: a
 *   reply counts until the daemon has seen its send end, which can be after the peer has read
 *   it and sent its next request, so a client that waits for each reply can find a few of its
 *   earlier ones still counted (seen under load: a one-at-a-time client dropped at a single
 *   count of 2).
 * - Replies are sent without waiting for their peers (above), so a peer that does not read
 *   holds slots, not threads. The pool has a slot per thread plus SRV_TRANSPORT_REPLYING per
 *   connection the caps admit (at most TRANSPORT_SLOTS_MAX), so slow readers cannot empty it
 *   before their sends time out.
 * - Sends are bounded (send_timeout_ms): a reply still waiting for its pipe then is dropped and
 *   the connection marked unread; every further request from it is dropped unanswered without
 *   being served. The connection is not closed while it keeps sending: closing a pipe that is
 *   receiving is what wedges nng. A sweeper closes it once no request came from it for
 *   SRV_TRANSPORT_QUIET_MS (then it waits for data or is parked by rep0, with no read in
 *   progress); until then it keeps one of its peer's connection slots.
 * - One pool of threads per listener kind (native.c's for ipc:// and for tcp://, this socket's
 *   for tls+tcp://): the ipc listener keeps its own threads while the network ones are busy (a
 *   flood of slow requests from tokens holders, of cheap refusals from anyone), and operators
 *   on the local socket stay served.
 * - Stop is bounded: the replies in flight end within the send timeout; the sockets are closed
 *   on a thread of their own (bf_bounded_run), and if nng_close() has not returned after
 *   SRV_TRANSPORT_CLOSE_BOUND_MS (the wedge above), stop logs it and returns, and the
 *   transport's memory is kept: nng's callbacks may still reference it.
 * Refusals and drops are logged at most once per TRANSPORT_NOTE_MS per kind, with a count, so a
 * flood cannot flood the log.
 *
 * Stop: a flag under the mutex stops threads from starting a new receive, and the slot of
 * every thread that is waiting in recv is closed (its recv fails with NNG_ECLOSED). A thread
 * in the middle of a request finishes it and sends its reply before it sees the flag. Stop
 * then waits for the replies in flight, and the sockets, their listeners and their connections
 * close only after that; nng completes a REP send when the reply is handed to the pipe, not
 * when it is written, so when replies were sent during stop the sockets linger briefly (nng
 * has no linger option).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/supplemental/tls/tls.h>
#include <nng/supplemental/util/platform.h>
#include <sodium.h>

#include "buzz/bounded.h"
#include "transport_impl.h"

#define TRANSPORT_DEFAULT_THREADS 4
#define TRANSPORT_PEM_MAX         (1 << 20)

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

/* ---- tls ----------------------------------------------------------------------------------- */

/* Read a whole PEM file (bounded) into a NUL-terminated buffer the caller wipes and frees.
 * With private set, the file must not be readable by group or others (checked on the open
 * descriptor): BF_ERR_PERMISSION_DENIED. */
static bf_err transport_read_pem(const char *path, bool private, char **out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? BF_ERR_NOT_FOUND : BF_ERR_IO;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return BF_ERR_IO;
    }
    if (private && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
        close(fd);
        return BF_ERR_PERMISSION_DENIED;
    }
    FILE *f = fdopen(fd, "rb");
    if (f == NULL) {
        close(fd);
        return BF_ERR_IO;
    }
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

/* Server TLS configuration from a certificate (chain) and key, in one file or two. The file
 * holding the key must be private to its owner. Clients are not asked for a certificate: they
 * authenticate with capability tokens. */
static bf_err transport_tls_new(srv_transport *t, const srv_transport_config *cfg, char *diag,
                                size_t diag_len)
{
    if (cfg->tls_cert_file == NULL || cfg->tls_cert_file[0] == '\0')
        return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                           "a tls+tcp listener needs a certificate and key");
    bool one_file = cfg->tls_key_file == NULL || strcmp(cfg->tls_key_file, cfg->tls_cert_file) == 0;
    const char *key_file = one_file ? cfg->tls_cert_file : cfg->tls_key_file;
    char *cert = NULL, *key = NULL;
    bf_err err = transport_read_pem(key_file, true, &key);
    if (err == BF_OK && !one_file)
        err = transport_read_pem(cfg->tls_cert_file, false, &cert);
    if (err == BF_ERR_PERMISSION_DENIED)
        return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                           "tls key file %s is accessible by group or others (chmod go-rwx)",
                           key_file);
    if (err != BF_OK) {
        transport_free_pem(key);
        return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                           "could not read the tls certificate or key: %s", bf_err_str(err));
    }
    int rv = nng_tls_config_alloc(&t->tls, NNG_TLS_MODE_SERVER);
    if (rv == 0)
        rv = nng_tls_config_own_cert(t->tls, one_file ? key : cert, key, NULL);
    transport_free_pem(cert);
    transport_free_pem(key);
    if (rv == 0)
        rv = nng_tls_config_auth_mode(t->tls, NNG_TLS_AUTH_MODE_NONE);
    if (rv != 0)
        return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                           "could not load the tls certificate and key: %s", nng_strerror(rv));
    return BF_OK;
}

/* ---- setup --------------------------------------------------------------------------------- */

static bf_err transport_group_open(srv_transport *t, transport_group *g, char *diag,
                                   size_t diag_len)
{
    if (g->sock_open)
        return BF_OK;
    int rv = nng_rep0_open(&g->sock);
    if (rv != 0)
        return bf_diag_set(diag, diag_len, BF_ERR_INTERNAL, "could not open socket: %s",
                           nng_strerror(rv));
    g->sock_open = true;
    rv = nng_socket_set_size(g->sock, NNG_OPT_RECVMAXSZ,
                             (size_t)SRV_MAX_MESSAGE + SRV_TRANSPORT_RECV_SLACK);
    if (rv == 0)
        rv = nng_pipe_notify(g->sock, NNG_PIPE_EV_ADD_PRE, transport_pipe_event, t);
    if (rv == 0)
        rv = nng_pipe_notify(g->sock, NNG_PIPE_EV_REM_POST, transport_pipe_event, t);
    if (rv != 0)
        return bf_diag_set(diag, diag_len, BF_ERR_INTERNAL, "could not configure socket: %s",
                           nng_strerror(rv));
    return BF_OK;
}

static bf_err transport_listener_new(srv_transport *t, const char *url, char *diag, size_t diag_len)
{
    transport_listener *tl = &t->listeners[t->n_listeners];
    tl->kind = transport_kind(url);
    if (tl->kind == NULL || strlen(url) >= sizeof tl->url)
        return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                           "unsupported listener url (use ipc://, tcp:// or tls+tcp://)");
    snprintf(tl->url, sizeof tl->url, "%s", url);
    if (strcmp(tl->kind, "tls") != 0) { /* tcp:// and ipc:// are served by native.c */
        bf_err err = t->native != NULL ? BF_OK : native_new(t, &t->native);
        if (err == BF_OK)
            err = native_listener_add(t->native, t->n_listeners, tl->url, diag, diag_len);
        if (err != BF_OK)
            return err;
        tl->native = true;
        t->n_listeners++;
        return BF_OK;
    }
    transport_group *g = &t->nng; /* tls+tcp://, the one kind nng serves */
    bf_err err = transport_group_open(t, g, diag, diag_len);
    if (err != BF_OK)
        return err;
    int rv = nng_listener_create(&tl->listener, g->sock, url);
    if (rv != 0)
        return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT, "invalid listener url %s: %s",
                           url, nng_strerror(rv));
    tl->created = true;
    t->n_listeners++;
    g->n_listeners++;
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
        cfg->threads > SRV_TRANSPORT_MAX_THREADS || cfg->active_threads < 0 ||
        cfg->active_threads > SRV_TRANSPORT_MAX_THREADS || cfg->send_timeout_ms < 0 ||
        cfg->hello_timeout_ms < 0 || cfg->max_conns < 0 ||
        cfg->max_conns > SRV_CONNS_MAX_PER_LISTENER || cfg->max_conns_per_peer < 0 ||
        cfg->max_conns_per_peer > SRV_CONNS_MAX_PER_LISTENER)
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
    t->ipc_mode = ipc_mode;
    t->threads = cfg->threads ? cfg->threads : TRANSPORT_DEFAULT_THREADS;
    t->active_threads = cfg->active_threads;
    t->send_timeout_ms =
        cfg->send_timeout_ms ? cfg->send_timeout_ms : SRV_TRANSPORT_SEND_TIMEOUT_MS;
    t->hello_timeout_ms =
        cfg->hello_timeout_ms ? cfg->hello_timeout_ms : SRV_TRANSPORT_HELLO_TIMEOUT_MS;
    t->max_conns = cfg->max_conns ? cfg->max_conns : SRV_TRANSPORT_MAX_CONNS;
    t->max_conns_per_peer =
        cfg->max_conns_per_peer ? cfg->max_conns_per_peer : SRV_TRANSPORT_MAX_CONNS_PER_PEER;
    t->on_wedged = cfg->on_wedged;
    t->on_wedged_arg = cfg->on_wedged_arg;
    t->nng.name = "tls";
    pthread_mutex_init(&t->mtx, NULL);
    transport_cond_init(&t->cond);
    transport_cond_init(&t->sweep_cond);
    transport_cond_init(&t->reply_cond);
    transport_cond_init(&t->nng.park_cond);
    /* before any socket exists: nng's pipe notifications use the table */
    bf_err err = srv_conns_new(&t->conns, cfg->n_urls, t->max_conns, t->max_conns_per_peer);
    if (err != BF_OK) {
        bf_diag_set(diag, diag_len, err, "could not set up connection accounting");
        goto fail;
    }
    for (size_t i = 0; i < cfg->n_urls; i++) {
        const char *kind = cfg->urls[i] ? transport_kind(cfg->urls[i]) : NULL;
        if (kind != NULL && strcmp(kind, "tls") == 0 && t->tls == NULL) {
            err = transport_tls_new(t, cfg, diag, diag_len);
            if (err != BF_OK)
                goto fail;
        }
        err = transport_listener_new(t, cfg->urls[i] ? cfg->urls[i] : "", diag, diag_len);
        if (err != BF_OK)
            goto fail;
    }
    *out = t;
    return BF_OK;
fail:
    srv_transport_free(t);
    return err;
}

/* The pool of a socket: a slot per thread to receive on, and for the replies that may wait
 * for their peers: SRV_TRANSPORT_REPLYING per connection the socket's listeners admit, up to
 * TRANSPORT_SLOTS_MAX. Beyond that, threads wait for a slot (each wait ends within the send
 * timeout). */
static bf_err transport_group_start(srv_transport *t, transport_group *g, char *diag,
                                    size_t diag_len)
{
    if (!g->sock_open)
        return BF_OK;
    long waiting = (long)SRV_TRANSPORT_REPLYING * t->max_conns * (long)g->n_listeners;
    g->n_slots = t->threads + (int)(waiting < TRANSPORT_SLOTS_MAX ? waiting : TRANSPORT_SLOTS_MAX);
    g->slots = calloc((size_t)g->n_slots, sizeof *g->slots);
    g->workers = calloc((size_t)t->threads, sizeof *g->workers);
    g->sessions = calloc((size_t)t->threads, sizeof *g->sessions);
    g->idle_sessions = calloc((size_t)t->threads, sizeof *g->idle_sessions);
    if (g->slots == NULL || g->workers == NULL || g->sessions == NULL || g->idle_sessions == NULL)
        return BF_ERR_NOMEM;
    for (int i = 0; i < t->threads; i++) {
        g->sessions[i].ctx = t->ctx;
        g->idle_sessions[g->n_idle_sessions++] = &g->sessions[i];
    }
    for (int i = 0; i < g->n_slots; i++) {
        transport_slot *slot = &g->slots[i];
        slot->t = t;
        slot->group = g;
        int rv = nng_ctx_open(&slot->ctx, g->sock);
        if (rv == 0) {
            slot->ctx_open = true;
            rv = nng_aio_alloc(&slot->send_aio, NULL, NULL);
        }
        if (rv != 0)
            return bf_diag_set(diag, diag_len, BF_ERR_INTERNAL,
                               "could not set up request context: %s", nng_strerror(rv));
        slot->next_free = g->free_slots;
        g->free_slots = slot;
    }
    g->n_workers = t->threads;
    for (int i = 0; i < g->n_workers; i++) {
        transport_worker *w = &g->workers[i];
        w->t = t;
        w->group = g;
        int rv = nng_aio_alloc(&w->aio, NULL, NULL);
        if (rv != 0)
            return bf_diag_set(diag, diag_len, BF_ERR_INTERNAL,
                               "could not set up request context: %s", nng_strerror(rv));
    }
    for (int i = 0; i < g->n_workers; i++) {
        transport_worker *w = &g->workers[i];
        if (pthread_create(&w->thread, NULL, transport_worker_main, w) != 0)
            return bf_diag_set(diag, diag_len, BF_ERR_INTERNAL, "could not start request thread");
        w->thread_started = true;
    }
    return BF_OK;
}

bf_err srv_transport_start(srv_transport *t, char *diag, size_t diag_len)
{
    if (t == NULL || t->started)
        return BF_ERR_INVALID_ARGUMENT;
    for (size_t i = 0; i < t->n_listeners; i++) {
        transport_listener *tl = &t->listeners[i];
        if (tl->native)
            continue; /* bound by native_start() below */
        int rv = nng_listener_start(tl->listener, 0);
        if (rv != 0)
            return bf_diag_set(diag, diag_len, BF_ERR_UNAVAILABLE, "could not listen on %s: %s",
                               tl->url, nng_strerror(rv));
        tl->started = true;
        atomic_store(&tl->id, (uint32_t)nng_listener_id(tl->listener));
        int port = 0;
        if (nng_listener_get_int(tl->listener, NNG_OPT_TCP_BOUND_PORT, &port) == 0)
            transport_log_event(t, BF_LOG_INFO, BF_EV_SERVER_LISTENING, "listening on %s (port %d)",
                                tl->url, port);
        else
            transport_log_event(t, BF_LOG_INFO, BF_EV_SERVER_LISTENING, "listening on %s", tl->url);
    }
    t->started = true;
    if (t->native != NULL) {
        bf_err err = native_start(t->native, diag, diag_len);
        if (err != BF_OK)
            return err;
    }
    if (pthread_create(&t->replier, NULL, transport_replier_main, t) != 0)
        return bf_diag_set(diag, diag_len, BF_ERR_INTERNAL, "could not start the reply thread");
    t->replier_started = true;
    bf_err err = transport_group_start(t, &t->nng, diag, diag_len);
    if (err != BF_OK)
        return err;
    if (t->nng.sock_open && srv_canary_new(&t->canary) != BF_OK)
        transport_log(t, BF_LOG_WARN, "cannot probe nng's reaper: a stuck one goes unnoticed");
    if (pthread_create(&t->sweeper, NULL, transport_sweeper_main, t) != 0)
        return bf_diag_set(diag, diag_len, BF_ERR_INTERNAL, "could not start the sweeper thread");
    t->sweeper_started = true;
    return BF_OK;
}

bf_err srv_transport_bound_port(const srv_transport *t, size_t listener_index, int *port_out)
{
    if (t == NULL || port_out == NULL || listener_index >= t->n_listeners)
        return BF_ERR_INVALID_ARGUMENT;
    const transport_listener *tl = &t->listeners[listener_index];
    if (!tl->started || strcmp(tl->kind, "ipc") == 0)
        return BF_ERR_INVALID_ARGUMENT;
    if (tl->native)
        return native_bound_port(t->native, listener_index, port_out);
    int port = 0;
    if (nng_listener_get_int(tl->listener, NNG_OPT_TCP_BOUND_PORT, &port) != 0)
        return BF_ERR_INTERNAL;
    *port_out = port;
    return BF_OK;
}

/* ---- stop ---------------------------------------------------------------------------------- */

/* The nng socket (its listeners and their connections) and the canary's (bf_bounded_run's
 * call). A close that does not return in time keeps using t: stop then marks the transport
 * abandoned, and its memory is never freed. */
static void transport_close_nng(void *arg)
{
    srv_transport *t = arg;
    if (t->nng.sock_open)
        nng_close(t->nng.sock);
    srv_canary_free(t->canary);
}

/* Close every open socket within SRV_TRANSPORT_CLOSE_BOUND_MS; false when it did not finish. */
static bool transport_close_sockets(srv_transport *t)
{
    if (!bf_bounded_run(transport_close_nng, NULL, t, SRV_TRANSPORT_CLOSE_BOUND_MS))
        return false;
    t->nng.sock_open = false;
    t->canary = NULL;
    return true;
}

/* Wait until no reply is in flight; each ends within the send timeout, so the bound is only
 * reached when nng does not complete a send at all. false then. */
static bool transport_wait_sends(srv_transport *t)
{
    struct timespec until;
    transport_deadline(&until, (long)t->send_timeout_ms + TRANSPORT_SEND_GRACE_MS);
    pthread_mutex_lock(&t->mtx);
    t->cond_waiters++; /* the end of each reply wakes us */
    while (t->nng.sending > 0 && pthread_cond_timedwait(&t->cond, &t->mtx, &until) != ETIMEDOUT)
        ;
    t->cond_waiters--;
    bool done = t->nng.sending == 0;
    pthread_mutex_unlock(&t->mtx);
    return done;
}

void srv_transport_stop(srv_transport *t)
{
    if (t == NULL || t->stopped)
        return;
    t->stopped = true;
    native_stop(t->native); /* bounded: its replies end within the send timeout */
    pthread_mutex_lock(&t->mtx);
    t->stopping = true;
    pthread_cond_broadcast(&t->cond);
    pthread_cond_broadcast(&t->nng.park_cond);
    pthread_cond_signal(&t->sweep_cond);
    for (int i = 0; i < t->nng.n_workers; i++) {
        transport_slot *slot = t->nng.workers[i].receiving;
        if (slot != NULL && slot->ctx_open) {
            nng_ctx_close(slot->ctx); /* its recv fails with NNG_ECLOSED */
            slot->ctx_open = false;
        }
    }
    pthread_mutex_unlock(&t->mtx);
    if (t->sweeper_started) {
        pthread_join(t->sweeper, NULL);
        t->sweeper_started = false;
    }
    for (int i = 0; i < t->nng.n_workers; i++) {
        transport_worker *w = &t->nng.workers[i];
        if (w->thread_started) {
            pthread_join(w->thread, NULL);
            w->thread_started = false;
        }
        nng_aio_free(w->aio);
        w->aio = NULL;
    }
    for (int i = 0; t->nng.sessions != NULL && i < t->nng.n_workers; i++) {
        bf_engine_close(t->nng.sessions[i].engine);
        t->nng.sessions[i].engine = NULL;
    }
    /* the replies of requests that finished: each is handed over or dropped within the send
     * timeout */
    bool sends_done = transport_wait_sends(t);
    if (t->replier_started) {
        pthread_mutex_lock(&t->mtx);
        t->replier_end = true;
        pthread_cond_signal(&t->reply_cond);
        pthread_mutex_unlock(&t->mtx);
        pthread_join(t->replier, NULL); /* it never waits in nng */
        t->replier_started = false;
    }
    if (sends_done) {
        for (int i = 0; i < t->nng.n_slots; i++) {
            transport_slot *slot = &t->nng.slots[i];
            if (slot->ctx_open) {
                nng_ctx_close(slot->ctx);
                slot->ctx_open = false;
            }
            nng_aio_free(slot->send_aio);
            slot->send_aio = NULL;
        }
    }
    /* a reply handed to nng is written by its pipe after the send completes: give the replies
     * of requests that finished during stop a moment on the wire before the pipes close */
    pthread_mutex_lock(&t->mtx);
    bool linger = t->late_replies > 0;
    t->late_replies = 0;
    pthread_mutex_unlock(&t->mtx);
    if (linger)
        nng_msleep(SRV_TRANSPORT_LINGER_MS);
    if (!sends_done || !transport_close_sockets(t)) {
        t->abandoned = true;
        transport_log(t, BF_LOG_ERROR,
                      "the listeners did not close within %d ms (a connection is stuck in nng); "
                      "stopping without them",
                      sends_done ? SRV_TRANSPORT_CLOSE_BOUND_MS
                                 : (int)t->send_timeout_ms + TRANSPORT_SEND_GRACE_MS);
    }
}

/* Transports whose sockets were abandoned: nng's threads may still call back into them, so
 * their memory stays allocated (and reachable) until the process exits. */
static srv_transport *transport_abandoned;
static pthread_mutex_t transport_abandoned_mtx = PTHREAD_MUTEX_INITIALIZER;

void srv_transport_free(srv_transport *t)
{
    if (t == NULL)
        return;
    srv_transport_stop(t);
    if (t->abandoned) {
        pthread_mutex_lock(&t->mtx);
        t->ctx = NULL; /* the context may not outlive this call: log no more */
        pthread_mutex_unlock(&t->mtx);
        pthread_mutex_lock(&transport_abandoned_mtx);
        t->next_abandoned = transport_abandoned;
        transport_abandoned = t;
        pthread_mutex_unlock(&transport_abandoned_mtx);
        return;
    }
    free(t->nng.workers);
    free(t->nng.slots);
    free(t->nng.sessions);
    free(t->nng.idle_sessions);
    native_free(t->native);
    if (t->tls != NULL)
        nng_tls_config_free(t->tls);
    srv_conns_free(t->conns);
    pthread_cond_destroy(&t->cond);
    pthread_cond_destroy(&t->sweep_cond);
    pthread_cond_destroy(&t->reply_cond);
    pthread_cond_destroy(&t->nng.park_cond);
    pthread_mutex_destroy(&t->mtx);
    free(t);
}
