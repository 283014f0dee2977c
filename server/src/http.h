/*
 * http.h - the HTTP listener of buzz-backfilld (nng's HTTP server): GET /metrics (Prometheus
 * text format 0.0.4), GET /livez and GET /readyz. No token: bind it to loopback or a monitoring
 * network. Other paths answer 404, other methods 405 (nng).
 *
 * Bounds: /livez answers on nng's thread at once. /metrics and /readyz read PostgreSQL on the
 * listener's own scrape thread with its own engine session (opened lazily, reopened after a
 * failure, statement_timeout SRV_HTTP_STATEMENT_TIMEOUT_MS), never on a transport thread or
 * nng's threads; at most SRV_HTTP_QUEUE_MAX such requests wait, further ones get 503 at once.
 *
 * Thread safety: new and free from one thread (main); handlers run on nng's threads.
 */
#ifndef BUZZ_SRV_HTTP_H
#define BUZZ_SRV_HTTP_H

#include "metrics.h"
#include "srv.h"

#define SRV_HTTP_STATEMENT_TIMEOUT_MS 1000
#define SRV_HTTP_QUEUE_MAX            16

typedef struct srv_http srv_http;

/* Listen on url ("http://host:port") and serve. ctx and metrics must outlive the listener.
 * On error a one-line reason in diag. */
bf_err srv_http_new(srv_http **out, const char *url, const srv_context *ctx, srv_metrics *metrics,
                    char *diag, size_t diag_len);
/* Stop listening, answer 503 to requests still queued, join the scrape thread, close its
 * session. NULL is a no-op. */
void srv_http_free(srv_http *h);

#endif /* BUZZ_SRV_HTTP_H */
