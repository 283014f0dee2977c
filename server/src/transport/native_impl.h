/*
 * native_impl.h - what native.c (connections, requests, replies, the writer) and native_setup.c
 * (listeners, admission, the request threads, start and stop) share: the native transport's
 * structures and internal functions. Not for anything else; the design notes are native.c's.
 */
#ifndef BUZZ_SRV_NATIVE_IMPL_H
#define BUZZ_SRV_NATIVE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/un.h>

#include "transport_impl.h"

#define NATIVE_HELLO_LEN     8
#define NATIVE_MAX_HOPS      8    /* backtrace words before the request ID, as nng allows */
#define NATIVE_ACCEPT_BATCH  32   /* connections accepted per wake of a listener */
#define NATIVE_WAIT_MS       1000 /* backstop of every wait (stop also wakes them) */
#define NATIVE_BACKLOG       128  /* listen(2) backlog */
#define NATIVE_POOLS         2    /* ipc, network */
#define NATIVE_STOP_GRACE_MS 500  /* past the send timeout, for the writer to drop the queues */

enum { NATIVE_TAG_LISTENER = 1, NATIVE_TAG_CONN, NATIVE_TAG_WAKE, NATIVE_TAG_PENDING };

/* What precedes a message's bytes: its 64-bit length, on ipc:// after a type byte. */
static inline size_t native_frame_head(bool ipc)
{
    return ipc ? 9 : 8;
}

typedef struct native_pool native_pool;

typedef struct native_out {
    struct native_out *next;
    uint8_t *buf;
    size_t len, off;
    int64_t queued_ms;
} native_out;

typedef enum native_rstate { NATIVE_HELLO, NATIVE_HEAD, NATIVE_BODY } native_rstate;

typedef struct native_conn {
    int tag; /* NATIVE_TAG_CONN: epoll's data points here */
    native_pool *pool;
    int fd;
    uint32_t id; /* in t->conns */
    bool ipc;
    int64_t accepted_ms;
    atomic_bool greeted; /* its SP handshake arrived (the sweeper's hello timeout) */
    srv_peer peer;
    char who[96];
    /* the read turn's (one thread at a time) */
    native_rstate rstate;
    uint8_t head[NATIVE_HELLO_LEN + 1];
    size_t got;
    uint8_t *body;
    size_t body_len;
    /* under mtx */
    pthread_mutex_t mtx;
    int refs;
    bool closing;   /* shut down: the holders drop their counts */
    bool rd_shut;   /* stop shut its read side: replies may still be written */
    bool in_writer; /* the writer holds it (and a count) */
    native_out *out_head, *out_tail;
    struct native_conn *next_backlog; /* under n->wmtx */
    struct native_conn *prev, *next;  /* under n->mtx */
} native_conn;

typedef struct native_listener {
    int tag; /* NATIVE_TAG_LISTENER */
    native_pool *pool;
    size_t index; /* in t->listeners */
    bool ipc;
    int fd;
    const char *url;
    char host[256], port[8]; /* tcp */
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    dev_t dev; /* of the bound ipc socket file */
    ino_t ino;
    atomic_bool paused; /* accept ran out of descriptors: the sweeper re-arms it */
} native_listener;

/* A request being served. Once its handler has deferred it, it is on the heap (tag
 * NATIVE_TAG_PENDING) and its descriptor is in the pool's epoll set (data: this): whichever
 * thread epoll wakes for it goes on with it. */
typedef struct native_req {
    int tag;      /* NATIVE_TAG_PENDING on the heap, 0 on the serving thread's stack */
    bool counted; /* it holds a place among the pool's deferred (it may defer) */
    native_conn *c;
    int session; /* index in the pool's sessions */
    uint8_t *body;
    size_t hdr; /* bytes of the backtrace at the start of body */
    srv_pending *pending;
} native_req;

struct native_pool {
    transport_native *n;
    const char *name; /* "ipc", "network" */
    bool used;
    int epfd;
    int stop_fd; /* an eventfd, readable once the threads are to end */
    int stop_tag;
    pthread_t *threads;
    int n_threads, n_started;
    pthread_mutex_t mtx; /* the session stack */
    /* n_threads + deferred_max sessions: a thread holds one while it serves a request, a
     * deferred request one while it waits, so one is always idle for a thread */
    srv_session *sessions;
    int n_sessions;
    srv_session **idle;
    int n_idle;
    int deferred_max;
    atomic_int deferred; /* requests waiting on PostgreSQL */
    /* native.c "Active threads": at most active_max threads wait for events at once; a thread
     * blocked in a request lends its place to a parked one (under mtx; active also read
     * without it, as a hint) */
    int active_max;
    atomic_int active; /* threads neither parked nor lent */
    int parked;
    pthread_cond_t park_cond;
};

struct transport_native {
    srv_transport *t;
    native_pool pools[NATIVE_POOLS];
    native_listener listeners[SRV_TRANSPORT_MAX_LISTENERS];
    size_t n_listeners;
    pthread_mutex_t mtx;
    pthread_cond_t cond;   /* stop waits for serving and backlogged to reach 0 */
    native_conn *conns;    /* under mtx */
    bool stopping;         /* under mtx */
    atomic_int serving;    /* requests being served */
    atomic_int backlogged; /* connections the writer holds */
    atomic_bool ended;     /* the threads are to end */
    atomic_uint next_id;
    bool started;
    /* the writer */
    int wepfd;
    int wake_fd; /* an eventfd: a connection was handed over, or the writer is to end */
    int wake_tag;
    pthread_mutex_t wmtx;
    native_conn *backlog; /* under wmtx */
    bool writer_end;      /* under wmtx */
    pthread_t writer;
    bool writer_started;
};

/* native.c */
void native_signal_fd(int fd);
void native_wake_stop(transport_native *n);
void native_out_free(native_out *o);
void native_conn_unref(native_conn *c);
/* Shut the connection down: every holder of a count sees it and lets go (c->mtx held). */
void native_conn_shutdown_locked(native_conn *c);
/* The connection is readable and this thread holds its read turn. */
/* native.c "Active threads": a pool thread counts itself in (begin), settles before each wait
 * for events (false once the transport ended while it was parked), and the stop wakes the
 * parked ones (end). */
void native_active_begin(native_pool *p);
bool native_active_settle(native_pool *p);
void native_active_end(native_pool *p);
void native_readable(transport_native *n, native_conn *c);
/* The session socket of a deferred request is readable: go on with it. */
void native_resume(transport_native *n, native_req *r);
void *native_writer_main(void *arg);

#endif /* BUZZ_SRV_NATIVE_IMPL_H */
