/*
 * metrics.h - the Prometheus metrics of buzz-backfilld: counters and histograms fed by the
 * engine's and the server's log records (srv_metrics_event, the log observer) and by the
 * dispatcher (srv_metrics_rpc, srv_metrics_auth_rejected), and the text exposition (format
 * 0.0.4) that http.c serves, with the values read from PostgreSQL at scrape time.
 *
 * Labels come only from bounded vocabularies: lifecycle state names, event codes, RPC method
 * names of the registered service descriptors, status code names, token rejection reasons,
 * SQLSTATE classes and the engine's fixed reason words. Anything else is counted as "other".
 * No stable ID, checkpoint, row value, diagnostic or actor ever becomes a label.
 *
 * Thread safety: every function may be called from any thread at once after srv_metrics_new()
 * returned; counters and histogram buckets are C11 atomics, nothing on the event path locks.
 * srv_metrics_free() only after every caller stopped.
 */
#ifndef BUZZ_SRV_METRICS_H
#define BUZZ_SRV_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "buzz/engine.h"
#include "srv.h"

typedef struct srv_metrics srv_metrics;

/* services: the dispatcher's services (their methods label the RPC metrics), n at most 4.
 * version: the build_info label (copied). */
bf_err srv_metrics_new(srv_metrics **out, const char *version,
                       const ProtobufCServiceDescriptor *const *services, size_t n);
void srv_metrics_free(srv_metrics *m);

/* A bf_log_fn (arg: the srv_metrics): counts the record's event. Register it with
 * srv_log_set_observer() so every engine and server record passes through it. */
void srv_metrics_event(void *arg, const bf_log_record *rec);

/* One answered request: svc NULL when no registered method matched. m NULL is a no-op. */
void srv_metrics_rpc(srv_metrics *m, const ProtobufCServiceDescriptor *svc, unsigned method_index,
                     srv_code code, int64_t duration_us);
/* A refused authentication (err BF_ERR_UNAUTHENTICATED with the authenticator's reason text in
 * diag, or another error) or, with BF_ERR_PERMISSION_DENIED, a refused authorization. */
void srv_metrics_auth_rejected(srv_metrics *m, bf_err err, const char *diag);

/* What a scrape read from PostgreSQL; absent parts are left out of the exposition. */
typedef struct srv_metrics_scrape {
    bool has_stats; /* the statistics read succeeded */
    bf_stats stats;
    bool auto_backfill;    /* the readiness gate is on (automatic mode) */
    int ready;             /* 1 ready, 0 not ready, -1 unknown */
    int64_t duration_us;   /* the database reads of this scrape */
    bf_throttle_rate rate; /* the process's rate controllers (bf_throttle_rate_get, id NULL) */
} srv_metrics_scrape;

/* The exposition into a malloc'd buffer (*out, *len; caller frees). */
bf_err srv_metrics_render(srv_metrics *m, const srv_metrics_scrape *scrape, char **out,
                          size_t *len);

#endif /* BUZZ_SRV_METRICS_H */
