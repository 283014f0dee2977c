/*
 * desk_worker.h - the desktop client's calls, off the GTK main thread (prefix desk_worker_).
 *
 * Two threads, each with its own bfc_client (a client is used by one thread at a time): the
 * reader refreshes a private dashboard model every interval (dash_fetch.c, the reads `buzzctl
 * dash` makes, plus Admin.WhoAmI) and hands a copy of it to the main thread; the sender sends
 * one confirmed control at a time and hands back the outcome line made from the server's
 * answer (bfc_dash_outcome). Neither decides what is shown: the window draws the model.
 *
 * Lost answers: the client library retries a control whose answer did not come with the same
 * request ID; when the whole budget passes without an answer the outcome is unknown, and
 * desk_worker_resend() asks again with that same request ID, so the server answers with the
 * stored outcome instead of acting twice.
 *
 * The token is read from its file when a connection is opened, passed to bfc_open (which
 * copies it), and wiped; it is never kept in the settings or in this module.
 *
 * Results reach the main thread through g_main_context_invoke on the default context; the
 * callbacks own what they are given (desk_snapshot_free, desk_outcome_free).
 */
#ifndef BUZZ_DESK_WORKER_H
#define BUZZ_DESK_WORKER_H

#include <stdbool.h>
#include <stdint.h>

#include "buzz/client.h"
#include "dash_view.h"

#define DESK_PATH_MAX 1024

typedef struct desk_conn {
    char url[300];
    char token_file[DESK_PATH_MAX]; /* "" none (boundary authority on ipc://) */
    bool token_env;                 /* the token came from BUZZ_BACKFILL_TOKEN(_FILE) */
    char tls_ca[DESK_PATH_MAX];
    char tls_server_name[256];
    int timeout_ms;  /* a read's budget (0: 3 s) */
    int interval_ms; /* between refreshes (0: 2 s) */
} desk_conn;

/* What the reader saw: a deep copy of its model, the identity, and the connection. */
typedef struct desk_snapshot {
    bfc_dash_model m;
    bool whoami_known;
    char whoami[300];    /* "operator@test (token key=k1): read, control" */
    bfc_fetch_error who; /* the failure when !whoami_known or stale */
    bool whoami_stale;
    char conn_err[200]; /* why no connection could be made ("" when connected) */
    int64_t at_us;
    uint64_t seq; /* refreshes so far */
} desk_snapshot;

typedef struct desk_outcome {
    int action;
    char id[BFC_CELL];
    char line[BFC_DASH_LINE]; /* bfc_dash_outcome() */
    bool answered;            /* the server answered */
    bool unknown; /* no answer, or the server's DEADLINE_EXCEEDED: the outcome is unknown */
    uint8_t request_id[BFC_REQUEST_ID_LEN];
    bool has_request_id;
    int attempts;
} desk_outcome;

typedef void (*desk_snapshot_fn)(desk_snapshot *s, void *arg);
typedef void (*desk_outcome_fn)(desk_outcome *o, void *arg);

typedef struct desk_worker desk_worker;

/* Start both threads for conn; results go to the callbacks on the main context. */
desk_worker *desk_worker_new(const desk_conn *conn, desk_snapshot_fn on_snapshot,
                             desk_outcome_fn on_outcome, void *arg);
/* Stop both threads (waits for a call in flight to end) and free. NULL is a no-op. */
void desk_worker_free(desk_worker *w);
/* Connect again with other settings (the reader's model starts over: unknown). */
void desk_worker_reconnect(desk_worker *w, const desk_conn *conn);
/* The backfill whose Get and Audit the reader reads too (NULL: none); refreshes now. */
void desk_worker_set_detail(desk_worker *w, const char *id);
void desk_worker_refresh(desk_worker *w);
/* Send one supported action (bfc_action) for id; a fresh request ID. */
void desk_worker_send(desk_worker *w, int action, const char *id);
/* Ask again for an outcome that was unknown: the same action, id and request ID. */
void desk_worker_resend(desk_worker *w, int action, const char *id,
                        const uint8_t request_id[BFC_REQUEST_ID_LEN]);

void desk_snapshot_free(desk_snapshot *s);

#endif
