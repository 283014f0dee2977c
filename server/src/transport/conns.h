/*
 * conns.h - connection accounting of the transport (prefix srv_conns_): admission of a new
 * connection under a cap per listener and a cap per peer, the requests each admitted
 * connection has in flight, and connections that do not read their replies (marked unread:
 * their requests are refused until they have been quiet long enough to be closed). Plain
 * bookkeeping without nng; transport.c feeds it from nng's pipe notifications (admit,
 * release), its request threads (begin, replying, end, mark_unread) and its sweeper (take_quiet).
 *
 * A peer is the remote IP address of a tcp:// or tls+tcp:// connection and the kernel's uid
 * of an ipc:// one. Peers whose address cannot be learnt share one key (SRV_CONN_PEER_UNKNOWN),
 * so they are capped together rather than not at all.
 *
 * Ownership and threads: the table is allocated once by srv_conns_new() for n_listeners *
 * per_listener connections and never grows. Every function takes one internal mutex and may be
 * called from any thread; none blocks or allocates.
 */
#ifndef BUZZ_SRV_CONNS_H
#define BUZZ_SRV_CONNS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buzz/engine.h"

#define SRV_CONNS_MAX_PER_LISTENER 10000 /* upper bound of either cap */

typedef enum srv_conn_family {
    SRV_CONN_PEER_UNKNOWN = 0,
    SRV_CONN_PEER_UID,  /* ipc: addr holds the uid, 4 bytes in host order */
    SRV_CONN_PEER_IPV4, /* addr holds the 4 address bytes */
    SRV_CONN_PEER_IPV6, /* addr holds the 16 address bytes */
} srv_conn_family;

typedef struct srv_conn_peer {
    srv_conn_family family;
    uint8_t addr[16]; /* unused bytes are zero, so peers compare with memcmp */
} srv_conn_peer;

typedef enum srv_conn_verdict {
    SRV_CONN_ADMITTED = 0,
    SRV_CONN_LISTENER_FULL, /* the listener holds per_listener connections */
    SRV_CONN_PEER_FULL,     /* this peer holds per_peer connections (over all listeners) */
    SRV_CONN_DUPLICATE,     /* the connection id is already admitted (a caller defect) */
} srv_conn_verdict;

typedef enum srv_conn_request {
    SRV_CONN_REQUEST_OK = 0, /* counted; srv_conns_replying(), srv_conns_end() follow */
    SRV_CONN_REQUEST_BUSY,   /* the connection is at max_serving or max_replying */
    SRV_CONN_REQUEST_UNREAD, /* the connection does not read its replies */
    SRV_CONN_REQUEST_GONE,   /* not admitted, or released already */
} srv_conn_request;

typedef struct srv_conns srv_conns;

/* A table for n_listeners listeners of at most per_listener connections each, at most
 * per_peer of them from one peer. BF_ERR_INVALID_ARGUMENT for a zero or out-of-range count
 * (each at most SRV_CONNS_MAX_PER_LISTENER), BF_ERR_NOMEM. */
bf_err srv_conns_new(srv_conns **out, size_t n_listeners, int per_listener, int per_peer);
/* NULL is a no-op. */
void srv_conns_free(srv_conns *c);

/* Admit connection id (non-zero) on listener (index below n_listeners) from peer, or refuse
 * it (nothing is recorded then). */
srv_conn_verdict srv_conns_admit(srv_conns *c, uint32_t id, size_t listener,
                                 const srv_conn_peer *peer);
/* Forget connection id (its requests in flight with it); false when it was not admitted. */
bool srv_conns_release(srv_conns *c, uint32_t id);

/* Count a request received on connection id at now_ms (any monotonic milliseconds) as being
 * served, unless the connection already has max_serving requests being served or
 * max_replying replies being sent, or is marked unread (then now_ms is its last activity).
 * Two counts, because a reply's send completes on nng's thread some time after the peer may
 * already have it: a client that sends one request at a time can find its earlier replies
 * still counted (more so on a loaded machine), and only the replies' count may lag. */
srv_conn_request srv_conns_begin(srv_conns *c, uint32_t id, int max_serving, int max_replying,
                                 int64_t now_ms);
/* A request counted by srv_conns_begin() was served and its reply handed to nng. No-op for a
 * released id. */
void srv_conns_replying(srv_conns *c, uint32_t id);
/* A request ended: its reply was sent or dropped (replying: after srv_conns_replying()), or it
 * was dropped while being served (!replying). No-op for a released id. */
void srv_conns_end(srv_conns *c, uint32_t id, bool replying);
/* Connection id did not take a reply: refuse its requests from now on; now_ms is its last
 * activity. false when it is not admitted (or released). */
bool srv_conns_mark_unread(srv_conns *c, uint32_t id, int64_t now_ms);
/* Up to cap unread connections without activity for quiet_ms at now_ms, into ids; each is
 * returned once (the caller closes it). Returns how many. */
size_t srv_conns_take_quiet(srv_conns *c, int64_t now_ms, int64_t quiet_ms, uint32_t *ids,
                            size_t cap);

/* Connections admitted on listener, from peer (over all listeners), and in total. */
int srv_conns_on_listener(srv_conns *c, size_t listener);
int srv_conns_from_peer(srv_conns *c, const srv_conn_peer *peer);
int srv_conns_total(srv_conns *c);

#endif /* BUZZ_SRV_CONNS_H */
