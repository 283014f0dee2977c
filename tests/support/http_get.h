/*
 * http_get.h - a minimal HTTP/1.1 GET over a raw socket for the suites and benchmarks that
 * read buzz-backfilld's HTTP listener (and Prometheus' API): one request per connection
 * (Connection: close), the body read to its Content-Length or to the close.
 */
#ifndef BUZZ_TEST_HTTP_GET_H
#define BUZZ_TEST_HTTP_GET_H

#include <stdbool.h>
#include <stddef.h>

typedef struct th_response {
    int status;     /* HTTP status code; -1 when no answer came */
    char type[128]; /* Content-Type, "" when absent */
    char *body;     /* malloc'd, NUL-terminated (may be empty) */
    size_t body_len;
} th_response;

/* method "GET", "POST", ...; host "127.0.0.1", port, target "/metrics?x=1". timeout_ms bounds
 * the whole exchange. Never calls cmocka. Free with th_response_fini(). */
th_response th_request(const char *method, const char *host, int port, const char *target,
                       int timeout_ms);
th_response th_get(const char *host, int port, const char *target);
void th_response_fini(th_response *r);

/* Poll GET target (every 50 ms, for at most wait_ms) until a 200 answer's body contains every
 * one of the n needles; false when none did in time. */
bool th_wait_body(const char *host, int port, const char *target, const char *const *needles,
                  size_t n, int wait_ms);

#endif
