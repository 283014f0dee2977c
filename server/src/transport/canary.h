/*
 * canary.h - a liveness probe of nng's pipe reaper (prefix srv_canary_). nng 1.5.2 can wedge
 * its single reaper thread for good (transport.c's design notes): from then on no closed
 * connection is released, its descriptor stays open and the connection caps never free a
 * slot. Nothing inside the process can undo that, so the transport probes for it and lets the
 * daemon exit for its supervisor to restart it.
 *
 * A probe opens an inproc:// connection between two private sockets and closes it at once; the
 * reaper reports its removal (NNG_PIPE_EV_REM_POST) within microseconds unless it is wedged.
 * inproc:// has no descriptors and no peer, so a probe cannot wedge anything itself.
 *
 * Threads: srv_canary_poll() from one thread at a time; the rest from the owner.
 */
#ifndef BUZZ_SRV_CANARY_H
#define BUZZ_SRV_CANARY_H

#include <stdint.h>

#include "buzz/engine.h"

typedef struct srv_canary srv_canary;

typedef enum srv_canary_state {
    SRV_CANARY_ALIVE = 0, /* the last probe was reported, or one is still within its bound */
    SRV_CANARY_WEDGED,    /* a probe was not reported within wedge_ms */
} srv_canary_state;

/* Two private sockets on a unique inproc:// address. BF_ERR_INTERNAL when nng refuses. */
bf_err srv_canary_new(srv_canary **out);
/* NULL is a no-op. Closing its sockets needs the reaper: after SRV_CANARY_WEDGED the probe is
 * abandoned instead (its memory stays allocated), like the transport's sockets. */
void srv_canary_free(srv_canary *c);
/* At now_ms (monotonic): start a probe when none is outstanding and the last one is at least
 * interval_ms old, and report whether the outstanding one has taken longer than wedge_ms. */
srv_canary_state srv_canary_poll(srv_canary *c, int64_t now_ms, int64_t interval_ms,
                                 int64_t wedge_ms);

#endif /* BUZZ_SRV_CANARY_H */
