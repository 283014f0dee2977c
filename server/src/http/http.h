/*
 * http.h - the HTTP listener of buzz-backfilld: GET /metrics (Prometheus text format 0.0.4),
 * GET /livez and GET /readyz. No token: bind it to loopback or a monitoring network. Other
 * paths answer 404, other methods 405. A small server of its own (http.c), not nng's, whose
 * HTTP server can neither cap connections nor time out a request that is never finished.
 *
 * Bounds: at most SRV_HTTP_MAX_CONNECTIONS connections, SRV_HTTP_MAX_PER_PEER from one peer
 * address, and never more than a SRV_HTTP_FD_SHARE-th of the soft descriptor limit (the rest
 * stays for the admin listeners, workers and sessions); a connection beyond them is answered
 * 503 and closed at once. The request head must arrive within SRV_HTTP_HEADER_TIMEOUT_MS of the
 * accept (else 408 and closed) and fit SRV_HTTP_HEAD_MAX bytes (else 431 and closed); the
 * response must be taken within SRV_HTTP_WRITE_TIMEOUT_MS. One request per connection
 * (HTTP/1.0 and 1.1, answered with Connection: close).
 *
 * /livez answers on the listener's thread at once. /metrics and /readyz read PostgreSQL on the
 * listener's own scrape thread with its own engine session (opened lazily, reopened after a
 * failure, statement_timeout SRV_HTTP_STATEMENT_TIMEOUT_MS), never on a transport thread; at
 * most SRV_HTTP_QUEUE_MAX such requests wait, further ones get 503 at once.
 *
 * Thread safety: new and free from one thread (main); the listener runs on its own two threads.
 */
#ifndef BUZZ_SRV_HTTP_H
#define BUZZ_SRV_HTTP_H

#include "metrics.h"
#include "srv.h"

#define SRV_HTTP_STATEMENT_TIMEOUT_MS 1000
#define SRV_HTTP_QUEUE_MAX            16
#define SRV_HTTP_MAX_CONNECTIONS      64
#define SRV_HTTP_MAX_PER_PEER         8
#define SRV_HTTP_FD_SHARE             4
#define SRV_HTTP_HEADER_TIMEOUT_MS    5000
#define SRV_HTTP_HEAD_MAX             8192
#define SRV_HTTP_WRITE_TIMEOUT_MS     5000

typedef struct srv_http srv_http;

/* Listen on url ("http://host:port") and serve. ctx and metrics must outlive the listener.
 * On error a one-line reason in diag. */
bf_err srv_http_new(srv_http **out, const char *url, const srv_context *ctx, srv_metrics *metrics,
                    char *diag, size_t diag_len);
/* Stop listening, answer 503 to requests still queued, join the threads, close the connections
 * and the session. NULL is a no-op. */
void srv_http_free(srv_http *h);

#endif /* BUZZ_SRV_HTTP_H */
