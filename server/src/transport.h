/*
 * transport.h - the nng REP transport of buzz-backfilld: one rep0 socket, listeners on every
 * configured URL (ipc://, tcp://, tls+tcp://) and a pool of threads, each with its own nng
 * context, aio and srv_session, that hand every request to srv_dispatch().
 *
 * Lifecycle: srv_transport_new() opens the socket and configures the listeners without
 * accepting; srv_transport_start() binds them and starts the threads; srv_transport_stop()
 * stops picking up new requests, lets the requests in flight finish and send their replies,
 * joins the threads and closes the socket; srv_transport_free() releases what is left (it
 * stops first when needed). One thread owns the transport object; stop may be called from
 * another thread than start but not concurrently with new/start/free.
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

typedef struct srv_transport srv_transport;

typedef struct srv_transport_config {
    const char *const *urls;   /* "ipc:///run/buzz.sock", "tcp://0.0.0.0:7400", "tls+tcp://..." */
    size_t n_urls;             /* 1 .. SRV_TRANSPORT_MAX_LISTENERS */
    int threads;               /* request threads (contexts); 0 = 4 */
    int ipc_mode;              /* ipc socket file mode: 0600 (0 = default) or 0660 */
    const char *tls_cert_file; /* PEM certificate chain for tls+tcp:// listeners */
    const char *tls_key_file;  /* PEM private key; NULL when it is in tls_cert_file */
    int send_timeout_ms;       /* a reply that cannot be handed to its connection within this
                                  (a peer that stops reading) is dropped; 0 = 10000 */
} srv_transport_config;

/* Open the socket and configure (not bind) one listener per URL. Strings are copied. diag gets
 * a short reason on error (BF_ERR_INVALID_ARGUMENT for a bad URL or TLS material). */
bf_err srv_transport_new(srv_transport **out, srv_dispatcher *d, srv_context *ctx,
                         const srv_transport_config *cfg, char *diag, size_t diag_len);
/* Bind every listener, then start the request threads. On error nothing is served. */
bf_err srv_transport_start(srv_transport *t, char *diag, size_t diag_len);
/* The TCP port a tcp:// or tls+tcp:// listener (by index in cfg->urls) is bound to; useful
 * with port 0. BF_ERR_INVALID_ARGUMENT for an ipc listener or before start. */
bf_err srv_transport_bound_port(const srv_transport *t, size_t listener_index, int *port_out);
/* Stop accepting requests, finish the ones in flight, join the threads, close the socket. A
 * request whose receipt races with stop may be dropped (the client retries it). Idempotent. */
void srv_transport_stop(srv_transport *t);
void srv_transport_free(srv_transport *t);

#endif /* BUZZ_SRV_TRANSPORT_H */
