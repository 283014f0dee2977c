/*
 * transport.h - the REP transport of buzz-backfilld: listeners on every configured URL,
 * tcp:// and ipc:// served by the SP transport of our own (native.c: a pool of threads per
 * listener kind, each request read, dispatched and answered by the one thread epoll woke),
 * tls+tcp:// by an nng rep0 socket with a pool of threads and of contexts (transport_serve.c).
 * Every request goes to srv_dispatch() with a srv_session lent from its pool (the most
 * recently returned first, so that a quiet caller's requests meet one warm PostgreSQL backend);
 * replies are sent without holding a thread while their peers are slow to read. On tcp:// and
 * ipc://, a request whose handler defers its answer (srv_call_defer: Readiness.Check, its wait
 * included, and Admin.Get) waits on PostgreSQL without a thread, up to SRV_TRANSPORT_DEFERRED of
 * them a pool; the threads meanwhile serve whatever else is ready.
 *
 * Hostile peers: connections are admitted under a cap per listener and per peer (remote IP,
 * or uid on ipc); a connection has at most SRV_TRANSPORT_IN_FLIGHT requests in flight (more
 * are dropped unanswered); a reply that cannot be handed to its connection within the send
 * timeout is dropped and the connection is served no more, and closed once it is quiet. The
 * pools are separate, so a flood of tcp peers never holds the threads that serve the ipc
 * listener.
 *
 * Lifecycle: srv_transport_new() opens the sockets and configures the listeners without
 * accepting; srv_transport_start() binds them and starts the threads; srv_transport_stop()
 * stops picking up new requests, lets the requests in flight finish and send their replies,
 * joins the threads and closes the sockets, within a bound (below); srv_transport_free()
 * releases what is left (it stops first when needed). One thread owns the transport object;
 * stop may be called from another thread than start but not concurrently with new/start/free.
 */
#ifndef BUZZ_SRV_TRANSPORT_H
#define BUZZ_SRV_TRANSPORT_H

#include <stddef.h>

#include "srv.h"

#define SRV_TRANSPORT_MAX_LISTENERS 8
#define SRV_TRANSPORT_MAX_THREADS   256
/* Receive cap: one request envelope of at most SRV_MAX_MESSAGE bytes plus this much slack,
 * so a request slightly over the limit still gets a typed RESOURCE_EXHAUSTED from the
 * dispatcher; anything larger is refused by nng, which drops the connection. */
#define SRV_TRANSPORT_RECV_SLACK 4096
/* Defaults of the connection caps (config.c's max_connections, max_connections_per_peer). */
#define SRV_TRANSPORT_MAX_CONNS          128
#define SRV_TRANSPORT_MAX_CONNS_PER_PEER 32
/* Requests one connection may have being served; a further one is dropped without an answer.
 * Two lets a client's retry in while its first attempt is still being served. */
#define SRV_TRANSPORT_IN_FLIGHT 2
/* Requests of a native pool (tcp://, ipc://) that may wait on PostgreSQL without a thread at
 * once; past them, a request holds its thread for its round trip. Each holds a session of the
 * pool, opened on first use: a pool opens as many PostgreSQL connections as it had requests in
 * flight at once, at most its threads + SRV_TRANSPORT_DEFERRED. */
#define SRV_TRANSPORT_DEFERRED 16
/* Replies one connection may have being sent (handed to nng, not yet completed), also what
 * sizes the slot pool. More than IN_FLIGHT: a send completes on nng's thread after the peer may
 * already have its reply, so a client that sends one request at a time can meet a few of its
 * own earlier replies still counted on a loaded machine. A peer that does not read reaches it
 * and is dropped until its sends time out. */
#define SRV_TRANSPORT_REPLYING 4
/* Default bound on handing a reply to its connection. A reply waits only behind an earlier
 * reply the peer has not read; at the bound it is dropped and the connection marked unread:
 * its requests are dropped from then on, and it is closed once no request came from it for
 * SRV_TRANSPORT_QUIET_MS. */
#define SRV_TRANSPORT_SEND_TIMEOUT_MS 2000
#define SRV_TRANSPORT_QUIET_MS        1000
/* Default bound on a new tcp:// or ipc:// connection's SP handshake (nng's own on tls+tcp://): a
 * connection that has not sent its 8 bytes by then is closed by the sweeper. */
#define SRV_TRANSPORT_HELLO_TIMEOUT_MS 10000
/* Bound on closing the sockets at stop. nng 1.5.2 can wedge a close (transport.c's design
 * notes); past this the sockets are abandoned to the exiting process, and stop returns. */
#define SRV_TRANSPORT_CLOSE_BOUND_MS 1500
/* A probe of nng's reaper (made every second) unreported for this long means it is stuck. */
#define SRV_TRANSPORT_WEDGE_MS 3000
/* Pause before closing when replies were handed to nng during stop, so they reach the wire. */
#define SRV_TRANSPORT_LINGER_MS 200
/* How long srv_transport_stop() takes at most once the requests in flight have finished. */
#define SRV_TRANSPORT_STOP_BOUND_MS                                                                \
    (SRV_TRANSPORT_SEND_TIMEOUT_MS + SRV_TRANSPORT_LINGER_MS + SRV_TRANSPORT_CLOSE_BOUND_MS)

typedef struct srv_transport srv_transport;

typedef struct srv_transport_config {
    const char *const *urls;   /* "ipc:///run/buzz.sock", "tcp://0.0.0.0:7400", "tls+tcp://..." */
    size_t n_urls;             /* 1 .. SRV_TRANSPORT_MAX_LISTENERS */
    int threads;               /* request threads (contexts) per socket; 0 = 4 */
    int active_threads;        /* tcp:// and ipc://: of those, how many wait for requests at
                                  once (the others stand in for threads blocked in a request:
                                  native.c "Active threads"); 0 = min(threads, CPUs) */
    int ipc_mode;              /* ipc socket file mode: 0600 (0 = default) or 0660 */
    const char *tls_cert_file; /* PEM certificate chain for tls+tcp:// listeners */
    const char *tls_key_file;  /* PEM private key; NULL when it is in tls_cert_file */
    int send_timeout_ms;       /* a reply that cannot be handed to its connection within this
                                  (a peer that stops reading) is dropped and the connection
                                  served no more; 0 = SRV_TRANSPORT_SEND_TIMEOUT_MS */
    int hello_timeout_ms;      /* tcp:// and ipc://: a connection without its SP handshake
                                  after this is closed; 0 = SRV_TRANSPORT_HELLO_TIMEOUT_MS */
    int max_conns;             /* connections per listener; 0 = SRV_TRANSPORT_MAX_CONNS */
    int max_conns_per_peer;    /* per remote IP / ipc uid; 0 = SRV_TRANSPORT_MAX_CONNS_PER_PEER */
    /* Called once, on a transport thread, when nng stopped releasing closed connections (its
     * reaper is stuck: canary.h): the process cannot recover and should exit. May be NULL. */
    void (*on_wedged)(void *arg);
    void *on_wedged_arg;
} srv_transport_config;

/* Open the sockets and configure (not bind) one listener per URL. Strings are copied. diag gets
 * a short reason on error (BF_ERR_INVALID_ARGUMENT for a bad URL, TLS material or a TLS key
 * file readable by group or others). */
bf_err srv_transport_new(srv_transport **out, srv_dispatcher *d, srv_context *ctx,
                         const srv_transport_config *cfg, char *diag, size_t diag_len);
/* Bind every listener, then start the request threads. An ipc:// path that exists and is not
 * a socket is refused (BF_ERR_INVALID_ARGUMENT), never replaced. On error nothing is served. */
bf_err srv_transport_start(srv_transport *t, char *diag, size_t diag_len);
/* The TCP port a tcp:// or tls+tcp:// listener (by index in cfg->urls) is bound to; useful
 * with port 0. BF_ERR_INVALID_ARGUMENT for an ipc listener or before start. */
bf_err srv_transport_bound_port(const srv_transport *t, size_t listener_index, int *port_out);
/* Stop accepting requests, finish the ones in flight, join the threads, close the sockets. A
 * request whose receipt races with stop may be dropped (the client retries it). Once the
 * requests in flight have finished it returns within SRV_TRANSPORT_STOP_BOUND_MS, whatever the
 * peers do; a socket whose close did not finish in time is abandoned (logged) and the
 * transport's memory is then kept for the rest of the process. Idempotent. */
void srv_transport_stop(srv_transport *t);
void srv_transport_free(srv_transport *t);

#endif /* BUZZ_SRV_TRANSPORT_H */
