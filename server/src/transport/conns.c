/*
 * conns.c - connection accounting of the transport (conns.h): admitted connections with their
 * listener, peer and requests in flight, and the caps per listener and per peer.
 *
 * Design notes: the table is a flat array sized for every connection the caps allow
 * (n_listeners * per_listener), kept dense by moving the last entry into a released slot.
 * Lookups are linear: admission already has to count the peer's connections over the whole
 * table, and with the caps' defaults a scan is a few hundred comparisons, far below the cost
 * of the connection or request it guards. Nothing is allocated after srv_conns_new(), so nng's
 * notification callbacks never fail for memory. An unread connection keeps its slot (and
 * counts against its caps) until nng reports it removed, also after take_quiet handed it out.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "conns.h"

typedef struct conns_entry {
    uint32_t id;
    uint32_t listener;
    int serving;     /* requests being dispatched */
    int replying;    /* replies handed to nng whose send has not completed */
    bool unread;     /* a reply was not taken: refuse its requests */
    bool closing;    /* handed out by take_quiet */
    int64_t last_ms; /* unread: the last request seen */
    srv_conn_peer peer;
} conns_entry;

struct srv_conns {
    pthread_mutex_t mtx;
    int per_listener;
    int per_peer;
    size_t n_listeners;
    int *on_listener; /* [n_listeners] */
    conns_entry *entries;
    size_t n, cap;
};

bf_err srv_conns_new(srv_conns **out, size_t n_listeners, int per_listener, int per_peer)
{
    if (out == NULL || n_listeners == 0 || n_listeners > 64 || per_listener < 1 ||
        per_listener > SRV_CONNS_MAX_PER_LISTENER || per_peer < 1 ||
        per_peer > SRV_CONNS_MAX_PER_LISTENER)
        return BF_ERR_INVALID_ARGUMENT;
    srv_conns *c = calloc(1, sizeof *c);
    if (c == NULL)
        return BF_ERR_NOMEM;
    c->per_listener = per_listener;
    c->per_peer = per_peer;
    c->n_listeners = n_listeners;
    c->cap = n_listeners * (size_t)per_listener;
    c->on_listener = calloc(n_listeners, sizeof *c->on_listener);
    c->entries = calloc(c->cap, sizeof *c->entries);
    if (c->on_listener == NULL || c->entries == NULL) {
        free(c->on_listener);
        free(c->entries);
        free(c);
        return BF_ERR_NOMEM;
    }
    pthread_mutex_init(&c->mtx, NULL);
    *out = c;
    return BF_OK;
}

void srv_conns_free(srv_conns *c)
{
    if (c == NULL)
        return;
    pthread_mutex_destroy(&c->mtx);
    free(c->on_listener);
    free(c->entries);
    free(c);
}

/* Callers hold the mutex. */
static conns_entry *conns_find(srv_conns *c, uint32_t id)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->entries[i].id == id)
            return &c->entries[i];
    return NULL;
}

static bool conns_same_peer(const srv_conn_peer *a, const srv_conn_peer *b)
{
    return a->family == b->family && memcmp(a->addr, b->addr, sizeof a->addr) == 0;
}

static int conns_count_peer(const srv_conns *c, const srv_conn_peer *peer)
{
    int n = 0;
    for (size_t i = 0; i < c->n; i++)
        n += conns_same_peer(&c->entries[i].peer, peer);
    return n;
}

srv_conn_verdict srv_conns_admit(srv_conns *c, uint32_t id, size_t listener,
                                 const srv_conn_peer *peer)
{
    srv_conn_peer unknown;
    memset(&unknown, 0, sizeof unknown);
    if (peer == NULL)
        peer = &unknown;
    pthread_mutex_lock(&c->mtx);
    srv_conn_verdict v = SRV_CONN_ADMITTED;
    if (id == 0 || listener >= c->n_listeners || conns_find(c, id) != NULL)
        v = SRV_CONN_DUPLICATE;
    else if (c->on_listener[listener] >= c->per_listener || c->n >= c->cap)
        v = SRV_CONN_LISTENER_FULL;
    else if (conns_count_peer(c, peer) >= c->per_peer)
        v = SRV_CONN_PEER_FULL;
    if (v == SRV_CONN_ADMITTED) {
        conns_entry *e = &c->entries[c->n++];
        e->id = id;
        e->listener = (uint32_t)listener;
        e->serving = e->replying = 0;
        e->unread = e->closing = false;
        e->last_ms = 0;
        e->peer = *peer;
        c->on_listener[listener]++;
    }
    pthread_mutex_unlock(&c->mtx);
    return v;
}

bool srv_conns_release(srv_conns *c, uint32_t id)
{
    pthread_mutex_lock(&c->mtx);
    conns_entry *e = conns_find(c, id);
    if (e != NULL) {
        c->on_listener[e->listener]--;
        *e = c->entries[--c->n]; /* keep the array dense */
    }
    pthread_mutex_unlock(&c->mtx);
    return e != NULL;
}

srv_conn_request srv_conns_begin(srv_conns *c, uint32_t id, int max_serving, int max_replying,
                                 int64_t now_ms)
{
    pthread_mutex_lock(&c->mtx);
    conns_entry *e = conns_find(c, id);
    srv_conn_request r = SRV_CONN_REQUEST_GONE;
    if (e != NULL && e->unread) {
        e->last_ms = now_ms;
        r = SRV_CONN_REQUEST_UNREAD;
    } else if (e != NULL && (e->serving >= max_serving || e->replying >= max_replying)) {
        r = SRV_CONN_REQUEST_BUSY;
    } else if (e != NULL) {
        e->serving++;
        r = SRV_CONN_REQUEST_OK;
    }
    pthread_mutex_unlock(&c->mtx);
    return r;
}

void srv_conns_replying(srv_conns *c, uint32_t id)
{
    pthread_mutex_lock(&c->mtx);
    conns_entry *e = conns_find(c, id);
    if (e != NULL && e->serving > 0) {
        e->serving--;
        e->replying++;
    }
    pthread_mutex_unlock(&c->mtx);
}

void srv_conns_end(srv_conns *c, uint32_t id, bool replying)
{
    pthread_mutex_lock(&c->mtx);
    conns_entry *e = conns_find(c, id);
    int *n = e == NULL ? NULL : replying ? &e->replying : &e->serving;
    if (n != NULL && *n > 0)
        (*n)--;
    pthread_mutex_unlock(&c->mtx);
}

bool srv_conns_mark_unread(srv_conns *c, uint32_t id, int64_t now_ms)
{
    pthread_mutex_lock(&c->mtx);
    conns_entry *e = conns_find(c, id);
    if (e != NULL) {
        e->unread = true;
        e->last_ms = now_ms;
    }
    pthread_mutex_unlock(&c->mtx);
    return e != NULL;
}

size_t srv_conns_take_quiet(srv_conns *c, int64_t now_ms, int64_t quiet_ms, uint32_t *ids,
                            size_t cap)
{
    size_t n = 0;
    pthread_mutex_lock(&c->mtx);
    for (size_t i = 0; i < c->n && n < cap; i++) {
        conns_entry *e = &c->entries[i];
        if (e->unread && !e->closing && now_ms - e->last_ms >= quiet_ms) {
            e->closing = true;
            ids[n++] = e->id;
        }
    }
    pthread_mutex_unlock(&c->mtx);
    return n;
}

int srv_conns_on_listener(srv_conns *c, size_t listener)
{
    pthread_mutex_lock(&c->mtx);
    int n = listener < c->n_listeners ? c->on_listener[listener] : 0;
    pthread_mutex_unlock(&c->mtx);
    return n;
}

int srv_conns_from_peer(srv_conns *c, const srv_conn_peer *peer)
{
    pthread_mutex_lock(&c->mtx);
    int n = conns_count_peer(c, peer);
    pthread_mutex_unlock(&c->mtx);
    return n;
}

int srv_conns_total(srv_conns *c)
{
    pthread_mutex_lock(&c->mtx);
    int n = (int)c->n;
    pthread_mutex_unlock(&c->mtx);
    return n;
}
