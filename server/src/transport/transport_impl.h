/*
 * transport_impl.h - what transport.c (setup, listeners, TLS, stop) and transport_serve.c
 * (request threads, replies, connection admission, the sweeper) share: the transport's
 * structures and their internal functions. Not for anything but those two files. The design
 * notes are at the top of transport.c.
 *
 * Locking: t->mtx guards what the comments say; the connection table has its own (conns.h).
 */
#ifndef BUZZ_SRV_TRANSPORT_IMPL_H
#define BUZZ_SRV_TRANSPORT_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>

#include "canary.h"
#include "conns.h"
#include "transport.h"

#define TRANSPORT_NOTE_MS       10000
#define TRANSPORT_SWEEP_MS      250  /* how often unread connections are looked at */
#define TRANSPORT_REPLY_POLL_MS 1    /* how often the replier looks over its queue of replies */
#define TRANSPORT_RECEIVERS     2    /* workers of a socket waiting in recv at once (at most) */
#define TRANSPORT_SLOTS_MAX     1024 /* contexts per socket beyond one per thread */
#define TRANSPORT_SEND_GRACE_MS 500  /* past the send timeout, a send nng did not complete */
#define TRANSPORT_CANARY_MS     1000 /* how often nng's reaper is probed */

_Static_assert(SRV_TRANSPORT_MAX_LISTENERS <= 64, "conns.c's listener bound");

typedef enum transport_note_kind {
    NOTE_LISTENER_FULL,
    NOTE_PEER_FULL,
    NOTE_IN_FLIGHT,
    NOTE_UNREAD,
    NOTE_CLOSED,
    NOTE_KINDS
} transport_note_kind;

/* A rate-limited log line: the first event, then a count at most every TRANSPORT_NOTE_MS. */
typedef struct transport_note {
    int64_t last_ms;
    long pending;
} transport_note;

typedef struct transport_group transport_group;
typedef struct transport_native transport_native;

/* Connection ids of the native transport (native.c) have this bit; nng's pipe ids never do. */
#define SRV_TRANSPORT_NATIVE_ID 0x80000000u

typedef struct transport_listener {
    nng_listener listener;
    _Atomic uint32_t id; /* nng_listener_id(listener), read by nng's pipe callbacks */
    bool created;
    bool started;
    bool native;      /* served by native.c, not nng */
    const char *kind; /* "ipc", "tcp", "tls" */
    char url[256];
} transport_listener;

/* A context of a socket's pool. A request is received on a free slot by a worker thread and
 * its reply sent from it without waiting: the slot, not the thread, waits for the peer. */
typedef struct transport_slot {
    srv_transport *t;
    transport_group *group;
    nng_ctx ctx;
    bool ctx_open;
    nng_aio *send_aio; /* no callback: its end is seen by the worker or the replier */
    uint32_t pipe_id;  /* of the reply in flight */
    srv_peer peer;     /* of the reply in flight (listener names are static strings) */
    struct transport_slot *next_free;    /* under t->mtx */
    struct transport_slot *next_pending; /* under t->mtx: the replier's queue */
} transport_slot;

typedef struct transport_worker {
    srv_transport *t;
    transport_group *group;
    pthread_t thread;
    bool thread_started;
    nng_aio *aio;              /* receives */
    transport_slot *receiving; /* under t->mtx: the slot this thread waits in recv on */
} transport_worker;

struct transport_group {
    const char *name; /* "tls" */
    nng_socket sock;
    bool sock_open;
    size_t n_listeners;
    transport_worker *workers;
    int n_workers;
    transport_slot *slots;
    int n_slots;
    transport_slot *free_slots; /* under t->mtx */
    int sending;                /* under t->mtx: slots whose reply is in flight */
    /* A session (engine connection) per worker, lent to a request for its length: the one
     * returned last is lent first. nng hands requests to the threads waiting in recv in turn,
     * so with a session per thread one caller's requests went to every PostgreSQL backend in
     * turn, each cold: Get took 431 us at one client against 269 with one thread (issue 26). */
    srv_session *sessions;
    srv_session **idle_sessions; /* under t->mtx: a stack, the most recently returned on top */
    int n_idle_sessions;
    int receivers;            /* under t->mtx: workers waiting in recv */
    pthread_cond_t park_cond; /* a receiver took a request and left none receiving, or stop */
};

struct srv_transport {
    srv_dispatcher *d;
    srv_context *ctx;
    nng_tls_config *tls;
    transport_listener listeners[SRV_TRANSPORT_MAX_LISTENERS];
    size_t n_listeners;
    transport_group nng; /* tls+tcp://, the one kind nng serves (native.c serves the rest) */
    int threads;
    int active_threads; /* 0: min(threads, CPUs) */
    int max_conns, max_conns_per_peer;
    int ipc_mode;
    nng_duration send_timeout_ms;
    int hello_timeout_ms; /* native.c's */
    srv_conns *conns;
    transport_native *native; /* the tcp:// and ipc:// listeners (NULL without any) */
    pthread_mutex_t mtx;
    /* Under mtx: a slot was freed, a send completed, or stop began. Broadcast only while
     * cond_waiters > 0 (a worker without a free slot, stop waiting for the replies): a reply's
     * completion, which runs on nng's thread for every request, wakes no one otherwise. */
    pthread_cond_t cond;
    int cond_waiters;          /* under mtx: threads in a wait on cond */
    pthread_cond_t sweep_cond; /* the sweeper's pause: signalled when stop begins, nothing else */
    /* Under mtx: the replies whose send did not end when it was handed over (their pipe was
     * still writing an earlier reply); the replier frees their slots as their sends end. */
    transport_slot *pending;
    pthread_cond_t reply_cond; /* the replier's: a reply was queued, or it is told to end */
    bool replier_end;          /* under mtx: stop is ending the replier */
    pthread_t replier;
    bool replier_started;
    pthread_t sweeper;
    bool sweeper_started;
    srv_canary *canary;           /* probes nng's reaper; owned by the sweeper */
    void (*on_wedged)(void *arg); /* once, from the sweeper, when the canary is wedged */
    void *on_wedged_arg;
    bool stopping;
    bool started;
    bool stopped;
    bool abandoned;   /* a socket close did not finish: keep this memory (nng may use it) */
    int late_replies; /* under mtx: replies sent after stop began */
    transport_note notes[NOTE_KINDS]; /* under mtx */
    srv_transport *next_abandoned;
};

void transport_log(const srv_transport *t, bf_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* transport_log() of an event (server.listening, conn.refused ...). */
void transport_log_event(const srv_transport *t, bf_log_level level, bf_event event,
                         const char *fmt, ...) __attribute__((format(printf, 4, 5)));
int64_t transport_now_ms(void);
/* *until = now + ms on CLOCK_MONOTONIC (the clock of every condition variable here). */
void transport_deadline(struct timespec *until, long ms);
/* A condition variable on CLOCK_MONOTONIC (the clock transport_deadline() uses). */
void transport_cond_init(pthread_cond_t *cond);
/* "tcp 127.0.0.1", "ipc uid 1000" (or "... unknown") for the log. */
void transport_who(const srv_peer *peer, char *out, size_t cap);
/* An IP peer as a cap key and as text: addr holds 4 bytes (!v6) or 16 (v6, an IPv4-mapped one
 * counts as IPv4: one peer, whichever way it connected); text is "" when it cannot be printed. */
void transport_peer_ip(srv_conn_peer *key, bool v6, const uint8_t *addr, char *text,
                       size_t text_len);
/* Log (rate-limited) a connection the caps refused with verdict v. */
void transport_note_refused(srv_transport *t, srv_conn_verdict v, const char *who);
/* Count one event of kind; log it (with the events suppressed since the last line) unless a
 * line of this kind was logged less than TRANSPORT_NOTE_MS ago. */
void transport_note_event(srv_transport *t, transport_note_kind kind, const char *what,
                          const char *who);
/* nng's pipe notifications of both sockets (arg: the transport). */
void transport_pipe_event(nng_pipe pipe, nng_pipe_ev ev, void *arg);
/* The replier thread (arg: the transport): frees the slots of the replies that did not end
 * when they were handed to nng, as their sends end. */
void *transport_replier_main(void *arg);
/* A request thread of a socket (arg: its transport_worker). */
void *transport_worker_main(void *arg);
/* The sweeper thread (arg: the transport). */
void *transport_sweeper_main(void *arg);

/* native.c: the transport of our own for tcp:// and ipc:// (see its design notes). new: an empty
 * one; listener_add: parse url, listener `index` in t->listeners (not bound yet); start: bind
 * every listener, start the threads; bound_port: of listener `index`; close_conn: shut down the
 * connection with that id (the sweeper's, for a quiet unread one), false when it is not
 * native's; sweep: from the sweeper (listeners that ran out of descriptors accept again); stop:
 * bounded as srv_transport_stop(), idempotent; free: stops first. */
bf_err native_new(srv_transport *t, transport_native **out);
bf_err native_listener_add(transport_native *n, size_t index, const char *url, char *diag,
                           size_t diag_len);
bf_err native_start(transport_native *n, char *diag, size_t diag_len);
bf_err native_bound_port(const transport_native *n, size_t index, int *port_out);
bool native_close_conn(transport_native *n, uint32_t id);
void native_sweep(transport_native *n);
void native_stop(transport_native *n);
void native_free(transport_native *n);

#endif /* BUZZ_SRV_TRANSPORT_IMPL_H */
