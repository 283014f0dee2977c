/*
 * bounded.h - a call that the caller stops waiting for after a bound (prefix bf_bounded_).
 *
 * For a close that a library can block for good: nng 1.5.2 can wedge its pipe reaper, and
 * nng_close() then never returns (server/src/transport/transport.c tells the story). The daemon's
 * stop and every client program's exit must not wait on it. The call runs on a thread of its
 * own; the caller waits at most the bound and goes on. A call still running then keeps what it
 * was given and frees it (release) if and when it returns. Internal to the project: not part of
 * the client library's exports.
 */
#ifndef BUZZ_BOUNDED_H
#define BUZZ_BOUNDED_H

#include <stdbool.h>

/* Run call(arg) on a new thread and wait at most bound_ms for it to return.
 * true:  it returned in time (or ran on this thread, when no thread could be started); arg is
 *        the caller's again.
 * false: it had not returned; the caller must not touch arg again, and the call's thread
 *        passes it to release (when not NULL) once call returns. */
bool bf_bounded_run(void (*call)(void *arg), void (*release)(void *arg), void *arg, int bound_ms);

#endif
