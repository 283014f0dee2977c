/*
 * canary.c - the probe of nng's pipe reaper (canary.h): a pair0 socket listening on a private
 * inproc:// address, a pair0 socket that dials it for each probe and closes the dialer at once,
 * and the count of removals nng reported on the listening side.
 *
 * Design notes: a probe is complete when the listening socket's REM_POST count passes the
 * count the probe started from. nng runs REM_POST at the start of a pipe's destruction on its
 * reaper thread, in order, so a reaper stuck on an earlier pipe never reaches the probe's. The
 * dial is synchronous (inproc:// connects in the calling thread), and a failed dial is retried
 * at the next poll: only a probe that connected can prove anything.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include <nng/nng.h>
#include <nng/protocol/pair0/pair.h>

#include "canary.h"

struct srv_canary {
    nng_socket listen_sock, dial_sock;
    bool listen_open, dial_open;
    char url[64];
    atomic_long removed; /* REM_POST events on the listening socket */
    bool probing;
    long probe_base;  /* removed when the probe's connection was closed */
    int64_t probe_ms; /* when it was */
    int64_t last_ms;  /* when the last probe completed (or 0) */
    bool wedged;
};

static void canary_removed(nng_pipe pipe, nng_pipe_ev ev, void *arg)
{
    (void)pipe;
    (void)ev;
    srv_canary *c = arg;
    atomic_fetch_add(&c->removed, 1);
}

bf_err srv_canary_new(srv_canary **out)
{
    srv_canary *c = calloc(1, sizeof *c);
    if (c == NULL)
        return BF_ERR_NOMEM;
    atomic_init(&c->removed, 0);
    snprintf(c->url, sizeof c->url, "inproc://buzz-canary-%p", (void *)c);
    int rv = nng_pair0_open(&c->listen_sock);
    if (rv == 0) {
        c->listen_open = true;
        rv = nng_pipe_notify(c->listen_sock, NNG_PIPE_EV_REM_POST, canary_removed, c);
    }
    if (rv == 0)
        rv = nng_listen(c->listen_sock, c->url, NULL, 0);
    if (rv == 0 && (rv = nng_pair0_open(&c->dial_sock)) == 0)
        c->dial_open = true;
    if (rv != 0) {
        srv_canary_free(c);
        return BF_ERR_INTERNAL;
    }
    *out = c;
    return BF_OK;
}

void srv_canary_free(srv_canary *c)
{
    if (c == NULL || c->wedged) /* closing would wait for the reaper: abandon it */
        return;
    if (c->dial_open)
        nng_close(c->dial_sock);
    if (c->listen_open)
        nng_close(c->listen_sock);
    free(c);
}

srv_canary_state srv_canary_poll(srv_canary *c, int64_t now_ms, int64_t interval_ms,
                                 int64_t wedge_ms)
{
    if (c->wedged)
        return SRV_CANARY_WEDGED;
    if (c->probing) {
        if (atomic_load(&c->removed) > c->probe_base) {
            c->probing = false;
            c->last_ms = now_ms;
        } else if (now_ms - c->probe_ms >= wedge_ms) {
            c->wedged = true;
            return SRV_CANARY_WEDGED;
        }
        return SRV_CANARY_ALIVE;
    }
    if (c->last_ms != 0 && now_ms - c->last_ms < interval_ms)
        return SRV_CANARY_ALIVE;
    nng_dialer d;
    long base = atomic_load(&c->removed);
    if (nng_dial(c->dial_sock, c->url, &d, 0) != 0)
        return SRV_CANARY_ALIVE; /* retried at the next poll */
    nng_dialer_close(d);         /* closes its connection: both ends are reaped */
    c->probing = true;
    c->probe_base = base;
    c->probe_ms = now_ms;
    return SRV_CANARY_ALIVE;
}
