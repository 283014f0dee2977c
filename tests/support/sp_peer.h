/*
 * sp_peer.h - raw SP peers (plain sockets speaking nng's SP protocol by hand) for suites that
 * play a hostile client: pipeline requests without reading, flood connections, reset them.
 * Functions fail the running cmocka test on a setup error unless a return value says otherwise.
 */
#ifndef BUZZ_TEST_SP_PEER_H
#define BUZZ_TEST_SP_PEER_H

#include <stdbool.h>
#include <stddef.h>

#define SP_PIPELINE_MAX 64 /* peers sp_pipeline() drives at once */

typedef struct sp_peer {
    int fd;
    bool ipc;   /* ipc frames carry a message type byte before the length */
    int port;   /* tcp: the daemon's port */
    size_t off; /* bytes of the current frame already written */
    int sent;   /* whole frames written */
} sp_peer;

/* The port of a "tcp://host:port" URL. */
int sp_url_port(const char *tcp_url);
/* A tcp connection to 127.0.0.1:port from source address src ("127.0.0.2"; NULL: any), with
 * the REQ handshake when hello; a tiny receive buffer, so replies back up at once. */
sp_peer sp_tcp(int port, const char *src, bool hello);
/* The same over an "ipc:///path" URL (always with the handshake). */
sp_peer sp_ipc(const char *ipc_url);
/* Write as much of the next request frames as the socket takes without blocking, up to
 * `until` frames (negative: no limit). false once the daemon closed the connection. */
bool sp_pump(sp_peer *p, int until);
/* Pipeline `count` requests into each of n peers (never reading) within wait_ms. NULL, or what
 * went wrong (no cmocka call: may run on a thread of its own). */
const char *sp_pipeline(sp_peer *peers, size_t n, int count, int wait_ms);
/* true once the daemon closed (or reset) this connection. */
bool sp_closed_by_daemon(const sp_peer *p);
/* Wait (at most wait_ms) until the daemon closed p; false when it did not. */
bool sp_wait_closed(const sp_peer *p, int wait_ms);
/* How many of peers[0..n) the daemon has not closed. */
int sp_open_count(const sp_peer *peers, size_t n);
/* Bytes the peer sent that the daemon has not read yet (its send queue, or for tcp the daemon
 * side's receive queue from /proc/net/tcp); -1 when it cannot be told. */
long sp_unread(const sp_peer *p);
/* Wait until the daemon has read everything p sent (then no read of it is in progress, and
 * closing it cannot meet nng 1.5.2's close race) or has closed p itself; fails the test after
 * wait_ms, showing both ends of a tcp connection (ss). p reads its replies meanwhile (the
 * slow reader leaves): a full receive window can hold back p's own requests (sp_peer.c). */
void sp_wait_read(const sp_peer *p, int wait_ms);
/* Close with a reset (unread data is discarded, the daemon sees ECONNRESET). */
void sp_reset(sp_peer *p);

#endif
