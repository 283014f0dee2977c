/*
 * transport_probe.c - the self-dial of every listener: a defence against nng 1.5.2's listener
 * wedge (transport.c's design notes). From the sweeper, every TRANSPORT_PROBE_MS each listener
 * is dialed from a socket of the daemon's own, and a listener whose socket does not report a
 * new connection within SRV_TRANSPORT_PROBE_TIMEOUT_MS, TRANSPORT_PROBE_FAILS times in a row,
 * is closed and listened on again (transport_listener_restart), logged as listener.restarted
 * and counted (buzz_backfill_listener_restarts_total).
 *
 * Design notes
 *
 * What wedges. With Debian 12's nng 1.5.2 an ipc:// listener stops taking connections after a
 * peer connects and closes during the SP negotiation (a few quick connect-and-close cycles, or
 * a second daemon started on the same socket path, which checks whether the path is live that
 * way): later connections are accepted by the kernel and even complete the SP header exchange,
 * but nng never adds them to the socket, so their requests time out. Nothing is reported and
 * the canary (canary.c, nng's reaper) is unaffected. tests/robustness/nng_ipc_wedge.c shows it
 * with plain nng; tcp:// has not been seen to wedge, so only ipc:// listeners are probed (a
 * probe is not free: on a machine too loaded to answer it in time it restarts a healthy
 * listener and drops the requests in flight there).
 *
 * What a probe proves. The listener's socket notifies ADD_PRE for every connection it is about
 * to add, before the connection caps judge it (transport_pipe_event counts it per listener),
 * so a count that moves while a probe is out proves the accept path works, whichever
 * connection moved it; a probe refused by the caps still proves it. The probe connection sends
 * nothing and is closed at once: it is admitted and released like any idle connection. The
 * dialer is started without blocking, so the sweeper never waits on it.
 *
 * What a restart costs. nng_listener_close() closes the listener's connections too, so the
 * requests in flight on them are dropped (their clients retry); that is why one slow probe is
 * not enough (TRANSPORT_PROBE_FAILS). An ipc:// path is checked again before listening (it must
 * still be a socket or absent). Within SRV_TRANSPORT_PROBE_BOUND_MS of a wedge the listener
 * answers again.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport_impl.h"

/* "tcp://0.0.0.0:0" -> "tcp://127.0.0.1:<bound port>": a wildcard host is dialed on loopback,
 * the port is the one bound. false when the URL cannot be dialed back. */
static bool probe_url(const transport_listener *tl, char *out, size_t cap)
{
    if (strcmp(tl->kind, "ipc") == 0) {
        snprintf(out, cap, "%s", tl->url);
        return true;
    }
    int port = 0;
    if (nng_listener_get_int(tl->listener, NNG_OPT_TCP_BOUND_PORT, &port) != 0 || port <= 0)
        return false;
    const char *rest = strstr(tl->url, "://");
    if (rest == NULL)
        return false;
    rest += 3;
    const char *colon = strrchr(rest, ':');
    if (colon == NULL)
        return false;
    int host_len = (int)(colon - rest);
    const char *host = rest;
    if (host_len == 0 || (host_len == 1 && host[0] == '*') ||
        (host_len == 7 && strncmp(host, "0.0.0.0", 7) == 0)) {
        host = "127.0.0.1";
        host_len = 9;
    } else if (host_len == 4 && strncmp(host, "[::]", 4) == 0) {
        host = "[::1]";
        host_len = 5;
    }
    int n = snprintf(out, cap, "%.*s%.*s:%d", (int)(rest - tl->url), tl->url, host_len, host, port);
    return n > 0 && (size_t)n < cap;
}

void transport_probes_start(srv_transport *t)
{
    for (size_t i = 0; i < t->n_listeners; i++) {
        transport_listener *tl = &t->listeners[i];
        transport_probe *p = &tl->probe;
        /* ipc:// only: the wedge has been seen there alone, and a probe that a loaded machine
         * answers late restarts a healthy listener, dropping the requests in flight on it (a
         * tcp flood test lost its reply so under load when every listener was probed) */
        if (!tl->started || tl->native || strcmp(tl->kind, "ipc") != 0 ||
            !probe_url(tl, p->url, sizeof p->url))
            continue;
        if (strcmp(tl->kind, "tls") == 0 &&
            (nng_tls_config_alloc(&p->tls, NNG_TLS_MODE_CLIENT) != 0 ||
             nng_tls_config_auth_mode(p->tls, NNG_TLS_AUTH_MODE_NONE) != 0)) {
            transport_log(t, BF_LOG_WARN, "cannot probe %s: no tls client configuration", tl->url);
            continue;
        }
        if (nng_req0_open(&p->sock) != 0) {
            transport_log(t, BF_LOG_WARN, "cannot probe %s: no socket", tl->url);
            continue;
        }
        p->open = true;
        p->last_ms = transport_now_ms();
    }
}

static void probe_end(transport_probe *p, int64_t now)
{
    nng_dialer_close(p->dialer); /* and its connection, if it made one */
    p->probing = false;
    p->last_ms = now;
}

void transport_probes_poll(srv_transport *t)
{
    for (size_t i = 0; i < t->n_listeners; i++) {
        transport_listener *tl = &t->listeners[i];
        transport_probe *p = &tl->probe;
        if (!p->open)
            continue;
        int64_t now = transport_now_ms();
        if (p->probing) {
            if (atomic_load(&tl->accepted) > p->base) {
                probe_end(p, now);
                p->fails = 0;
            } else if (now - p->began_ms >= SRV_TRANSPORT_PROBE_TIMEOUT_MS) {
                probe_end(p, now);
                if (++p->fails >= TRANSPORT_PROBE_FAILS) {
                    p->fails = 0;
                    char diag[256] = "";
                    if (transport_listener_restart(t, i, diag, sizeof diag) == BF_OK)
                        transport_log_event(
                            t, BF_LOG_WARN, BF_EV_LISTENER_RESTARTED,
                            "the listener on %s stopped taking connections (%d self-dials in a "
                            "row got no answer within %d ms; a defect of nng 1.5.2 that a peer "
                            "closing during the handshake triggers): listening again",
                            tl->url, TRANSPORT_PROBE_FAILS, SRV_TRANSPORT_PROBE_TIMEOUT_MS);
                    else
                        transport_log(t, BF_LOG_ERROR,
                                      "the listener on %s stopped taking connections and could "
                                      "not listen again: %s",
                                      tl->url, diag);
                }
            }
            continue;
        }
        if (now - p->last_ms < TRANSPORT_PROBE_MS)
            continue;
        p->base = atomic_load(&tl->accepted);
        if (nng_dialer_create(&p->dialer, p->sock, p->url) != 0)
            continue;
        if ((p->tls != NULL && nng_dialer_set_ptr(p->dialer, NNG_OPT_TLS_CONFIG, p->tls) != 0) ||
            nng_dialer_start(p->dialer, NNG_FLAG_NONBLOCK) != 0) {
            nng_dialer_close(p->dialer);
            p->last_ms = now;
            continue;
        }
        p->probing = true;
        p->began_ms = now;
    }
}

void transport_probes_close(srv_transport *t)
{
    for (size_t i = 0; i < t->n_listeners; i++) {
        transport_probe *p = &t->listeners[i].probe;
        if (p->open)
            nng_close(p->sock);
        p->open = false;
        if (p->tls != NULL)
            nng_tls_config_free(p->tls);
        p->tls = NULL;
    }
}
