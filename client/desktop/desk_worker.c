/*
 * desk_worker.c - the reader and the sender threads of the desktop client (see desk_worker.h).
 * Each owns its bfc_client and opens it itself; commands reach them through queues, results
 * leave as heap copies handed to the main context.
 */
#include "desk_worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>
#include <sodium.h>

#include "buzz/backfill/v1/admin.pb-c.h"
#include "client_conn.h"
#include "dash_fetch.h"

#define DESK_READ_TIMEOUT_MS     3000 /* as buzzctl dash */
#define DESK_INTERVAL_MS         2000
#define DESK_VALIDATE_TIMEOUT_MS (5 * 60 * 1000) /* as buzzctl validate */

typedef enum desk_cmd_kind {
    DESK_CMD_QUIT = 1,
    DESK_CMD_RECONNECT,
    DESK_CMD_DETAIL,
    DESK_CMD_REFRESH,
    DESK_CMD_SEND,
} desk_cmd_kind;

typedef struct desk_cmd {
    desk_cmd_kind kind;
    desk_conn conn;
    int action;
    bool has_id;
    char id[BFC_CELL];
    bool pin;
    uint8_t request_id[BFC_REQUEST_ID_LEN];
} desk_cmd;

struct desk_worker {
    GAsyncQueue *reads, *sends;
    GThread *reader, *sender;
    desk_conn conn; /* the first one; each thread keeps its own copy */
    desk_snapshot_fn on_snapshot;
    desk_outcome_fn on_outcome;
    void *arg;
};

/* ---- to the main context ---------------------------------------------------------------- */

typedef struct desk_post {
    desk_worker *w;
    desk_snapshot *snap;
    desk_outcome *out;
} desk_post;

static gboolean desk_worker_deliver(gpointer data)
{
    desk_post *p = data;
    if (p->snap != NULL)
        p->w->on_snapshot(p->snap, p->w->arg);
    else
        p->w->on_outcome(p->out, p->w->arg);
    g_free(p);
    return G_SOURCE_REMOVE;
}

static void desk_worker_post(desk_worker *w, desk_snapshot *snap, desk_outcome *out)
{
    desk_post *p = g_new0(desk_post, 1);
    p->w = w;
    p->snap = snap;
    p->out = out;
    g_idle_add(desk_worker_deliver, p);
}

/* ---- connections ------------------------------------------------------------------------- */

/* Open a client for conn with timeout_ms; the token is read from its file (or the
 * environment) now and wiped after bfc_open copied it. On failure *c stays NULL and st says
 * why (st->attempts 0: nothing was sent). */
static bf_err desk_worker_open(bfc_client **c, const desk_conn *conn, int timeout_ms,
                               bfc_status *st)
{
    memset(st, 0, sizeof *st);
    char *token = NULL;
    if (conn->token_file[0] != '\0') {
        const char *why = "";
        if ((token = bfc_conn_read_token_file(conn->token_file, &why)) == NULL) {
            snprintf(st->transport_detail, sizeof st->transport_detail, "token file: %.90s", why);
            st->transport = BF_ERR_INVALID_ARGUMENT;
            return BF_ERR_INVALID_ARGUMENT;
        }
    } else if (conn->token_env) {
        char why[200];
        if (bfc_conn_env_token(&token, why, sizeof why) != 0) {
            snprintf(st->transport_detail, sizeof st->transport_detail, "%.110s", why);
            st->transport = BF_ERR_INVALID_ARGUMENT;
            return BF_ERR_INVALID_ARGUMENT;
        }
    }
    bfc_options bo = {
        .token = token,
        .timeout_ms = timeout_ms,
        .tls_ca_file = conn->tls_ca[0] ? conn->tls_ca : NULL,
        .tls_server_name = conn->tls_server_name[0] ? conn->tls_server_name : NULL,
    };
    bf_err err = bfc_open(c, conn->url, &bo, st->transport_detail, sizeof st->transport_detail);
    if (err != BF_OK)
        st->transport = err;
    if (token != NULL) {
        sodium_memzero(token, strlen(token));
        free(token);
    }
    return err;
}

/* ---- the reader -------------------------------------------------------------------------- */

typedef struct desk_reader {
    desk_conn conn;
    bfc_client *c;
    bfc_dash_model m;
    bool has_detail;
    char detail[BFC_CELL];
    bool whoami_known, whoami_stale;
    char whoami[300];
    bfc_fetch_error who;
    uint64_t seq;
} desk_reader;

static void desk_reader_whoami(desk_reader *r)
{
    Buzz__Backfill__V1__WhoAmIRequest req = BUZZ__BACKFILL__V1__WHO_AM_IREQUEST__INIT;
    ProtobufCMessage *out = NULL;
    bfc_status st;
    bf_err err =
        bfc_call(r->c, &buzz__backfill__v1__admin__descriptor, "WhoAmI", &req.base, &out, &st);
    if (err != BF_OK || out == NULL) {
        bfc_fetch_error_from(&r->who, err == BF_OK ? BF_ERR_IO : err, &st);
        r->whoami_stale = r->whoami_known;
    } else {
        const Buzz__Backfill__V1__WhoAmIResponse *w = (Buzz__Backfill__V1__WhoAmIResponse *)out;
        char raw[600];
        size_t o = (size_t)snprintf(
            raw, sizeof raw, "%.96s (%.96s):", w->actor && w->actor[0] ? w->actor : "no actor",
            w->authority ? w->authority : "authority unknown");
        for (size_t i = 0; i < w->n_capabilities && o < sizeof raw; i++)
            o += (size_t)snprintf(raw + o, sizeof raw - o, "%s%.40s", i ? ", " : " ",
                                  w->capabilities[i]);
        if (w->n_capabilities == 0 && o < sizeof raw)
            snprintf(raw + o, sizeof raw - o, " no capabilities");
        bfc_printable(r->whoami, sizeof r->whoami, raw);
        r->whoami_known = true;
        r->whoami_stale = false;
        memset(&r->who, 0, sizeof r->who);
    }
    if (out != NULL)
        protobuf_c_message_free_unpacked(out, NULL);
}

static desk_snapshot *desk_reader_snapshot(const desk_reader *r, const char *conn_err)
{
    desk_snapshot *s = g_new0(desk_snapshot, 1);
    s->m = r->m;
    s->m.rows = NULL;
    if (r->m.n_rows > 0 && (s->m.rows = malloc(r->m.n_rows * sizeof *s->m.rows)) != NULL)
        memcpy(s->m.rows, r->m.rows, r->m.n_rows * sizeof *s->m.rows);
    else
        s->m.n_rows = 0;
    s->whoami_known = r->whoami_known;
    s->whoami_stale = r->whoami_stale;
    memcpy(s->whoami, r->whoami, sizeof s->whoami);
    s->who = r->who;
    snprintf(s->conn_err, sizeof s->conn_err, "%s", conn_err);
    s->at_us = bfc_dash_now_us();
    s->seq = r->seq;
    return s;
}

static void desk_reader_refresh(desk_worker *w, desk_reader *r)
{
    bfc_status st;
    memset(&st, 0, sizeof st);
    bf_err err = BF_OK;
    char conn_err[200] = "";
    if (r->c == NULL)
        err = desk_worker_open(&r->c, &r->conn,
                               r->conn.timeout_ms ? r->conn.timeout_ms : DESK_READ_TIMEOUT_MS, &st);
    if (err != BF_OK) {
        bfc_fetch_error fe;
        bfc_fetch_error_from(&fe, err, &st);
        snprintf(conn_err, sizeof conn_err, "%s", fe.text);
    }
    bf_err rerr = bfc_dash_refresh(&r->m, r->c, err, &st, r->has_detail ? r->detail : NULL);
    bool silent = (rerr == BF_ERR_UNAVAILABLE || rerr == BF_ERR_TIMEOUT) &&
                  r->m.ready_err.kind == r->m.list_err.kind;
    if (r->c != NULL && silent) { /* nothing answers: the identity is as unknown as the rest */
        r->who = r->m.ready_err;
        r->whoami_stale = r->whoami_known;
    } else if (r->c != NULL) {
        desk_reader_whoami(r);
    } else {
        bfc_fetch_error_from(&r->who, err, &st);
        r->whoami_stale = r->whoami_known;
    }
    r->seq++;
    desk_worker_post(w, desk_reader_snapshot(r, conn_err), NULL);
}

static gpointer desk_reader_main(gpointer data)
{
    desk_worker *w = data;
    desk_reader *r = g_new0(desk_reader, 1);
    r->conn = w->conn;
    bfc_dash_init(&r->m, r->conn.url);
    int64_t next = 0;
    for (;;) {
        int64_t wait = next - g_get_monotonic_time();
        desk_cmd *cmd = wait > 0 ? g_async_queue_timeout_pop(w->reads, (guint64)wait)
                                 : g_async_queue_try_pop(w->reads);
        if (cmd != NULL) {
            desk_cmd_kind kind = cmd->kind;
            if (kind == DESK_CMD_RECONNECT) {
                bfc_close(r->c);
                r->c = NULL;
                r->conn = cmd->conn;
                bfc_dash_fini(&r->m);
                bfc_dash_init(&r->m, r->conn.url);
                r->whoami_known = r->whoami_stale = false;
                memset(&r->who, 0, sizeof r->who);
            } else if (kind == DESK_CMD_DETAIL) {
                r->has_detail = cmd->has_id;
                snprintf(r->detail, sizeof r->detail, "%s", cmd->id);
                memset(&r->m.detail, 0, sizeof r->m.detail);
            }
            g_free(cmd);
            if (kind == DESK_CMD_QUIT)
                break;
            next = 0;
            continue; /* take every queued command before reading */
        }
        desk_reader_refresh(w, r);
        int interval = r->conn.interval_ms ? r->conn.interval_ms : DESK_INTERVAL_MS;
        next = g_get_monotonic_time() + (int64_t)interval * 1000;
    }
    bfc_close(r->c);
    bfc_dash_fini(&r->m);
    g_free(r);
    return NULL;
}

/* ---- the sender -------------------------------------------------------------------------- */

static void desk_sender_send(desk_worker *w, bfc_client **c, const desk_conn *conn,
                             const desk_cmd *cmd)
{
    desk_outcome *o = g_new0(desk_outcome, 1);
    o->action = cmd->action;
    snprintf(o->id, sizeof o->id, "%s", cmd->id);
    const char *name = bfc_action_name(cmd->action);
    bfc_status st;
    memset(&st, 0, sizeof st);
    bf_err err = BF_OK;
    if (*c == NULL)
        err = desk_worker_open(c, conn, conn->timeout_ms ? conn->timeout_ms : DESK_READ_TIMEOUT_MS,
                               &st);
    bfc_client *sender = *c, *own = NULL;
    if (err == BF_OK && cmd->action == BFC_ACTION_VALIDATE) {
        /* a validation may run far longer than a read's budget: its own connection with
         * validate's, as buzzctl dash does */
        bfc_status ost;
        if (desk_worker_open(&own, conn, DESK_VALIDATE_TIMEOUT_MS, &ost) == BF_OK)
            sender = own;
    }
    ProtobufCMessage *out = NULL;
    if (err != BF_OK) {
        bfc_fetch_error fe;
        bfc_fetch_error_from(&fe, err, &st);
        snprintf(o->line, sizeof o->line, "%s %s: not sent: %s", name ? name : "unknown", o->id,
                 fe.text);
    } else {
        if (cmd->pin)
            bfc_set_next_request_id(sender, cmd->request_id);
        err = bfc_control(sender, cmd->action, cmd->id, &out, &st);
        bfc_dash_outcome(o->line, sizeof o->line, cmd->action, cmd->id, err, &st, out);
        o->answered = st.answered;
        o->unknown = !st.answered || st.code == BUZZ__BACKFILL__V1__STATUS_CODE__DEADLINE_EXCEEDED;
        o->attempts = st.attempts;
        size_t n = 0;
        o->has_request_id = st.attempts > 0 &&
                            sodium_hex2bin(o->request_id, sizeof o->request_id, st.request_id,
                                           strlen(st.request_id), NULL, &n, NULL) == 0 &&
                            n == sizeof o->request_id;
    }
    if (out != NULL)
        protobuf_c_message_free_unpacked(out, NULL);
    bfc_close(own);
    desk_worker_post(w, NULL, o);
}

static gpointer desk_sender_main(gpointer data)
{
    desk_worker *w = data;
    desk_conn conn = w->conn;
    bfc_client *c = NULL;
    for (;;) {
        desk_cmd *cmd = g_async_queue_pop(w->sends);
        desk_cmd_kind kind = cmd->kind;
        if (kind == DESK_CMD_RECONNECT) {
            bfc_close(c);
            c = NULL;
            conn = cmd->conn;
        } else if (kind == DESK_CMD_SEND) {
            desk_sender_send(w, &c, &conn, cmd);
        }
        g_free(cmd);
        if (kind == DESK_CMD_QUIT)
            break;
    }
    bfc_close(c);
    return NULL;
}

/* ---- the API ----------------------------------------------------------------------------- */

desk_worker *desk_worker_new(const desk_conn *conn, desk_snapshot_fn on_snapshot,
                             desk_outcome_fn on_outcome, void *arg)
{
    desk_worker *w = g_new0(desk_worker, 1);
    w->conn = *conn;
    w->on_snapshot = on_snapshot;
    w->on_outcome = on_outcome;
    w->arg = arg;
    w->reads = g_async_queue_new();
    w->sends = g_async_queue_new();
    w->reader = g_thread_new("desk-reader", desk_reader_main, w);
    w->sender = g_thread_new("desk-sender", desk_sender_main, w);
    return w;
}

static void desk_worker_push(GAsyncQueue *q, desk_cmd_kind kind, const desk_conn *conn, int action,
                             const char *id, const uint8_t *request_id)
{
    desk_cmd *cmd = g_new0(desk_cmd, 1);
    cmd->kind = kind;
    if (conn != NULL)
        cmd->conn = *conn;
    cmd->action = action;
    cmd->has_id = id != NULL;
    if (id != NULL)
        snprintf(cmd->id, sizeof cmd->id, "%s", id);
    cmd->pin = request_id != NULL;
    if (request_id != NULL)
        memcpy(cmd->request_id, request_id, sizeof cmd->request_id);
    g_async_queue_push(q, cmd);
}

void desk_worker_free(desk_worker *w)
{
    if (w == NULL)
        return;
    desk_worker_push(w->reads, DESK_CMD_QUIT, NULL, 0, NULL, NULL);
    desk_worker_push(w->sends, DESK_CMD_QUIT, NULL, 0, NULL, NULL);
    g_thread_join(w->reader);
    g_thread_join(w->sender);
    g_async_queue_unref(w->reads);
    g_async_queue_unref(w->sends);
    g_free(w);
}

void desk_worker_reconnect(desk_worker *w, const desk_conn *conn)
{
    desk_worker_push(w->reads, DESK_CMD_RECONNECT, conn, 0, NULL, NULL);
    desk_worker_push(w->sends, DESK_CMD_RECONNECT, conn, 0, NULL, NULL);
}

void desk_worker_set_detail(desk_worker *w, const char *id)
{
    desk_worker_push(w->reads, DESK_CMD_DETAIL, NULL, 0, id, NULL);
}

void desk_worker_refresh(desk_worker *w)
{
    desk_worker_push(w->reads, DESK_CMD_REFRESH, NULL, 0, NULL, NULL);
}

void desk_worker_send(desk_worker *w, int action, const char *id)
{
    desk_worker_push(w->sends, DESK_CMD_SEND, NULL, action, id, NULL);
}

void desk_worker_resend(desk_worker *w, int action, const char *id,
                        const uint8_t request_id[BFC_REQUEST_ID_LEN])
{
    desk_worker_push(w->sends, DESK_CMD_SEND, NULL, action, id, request_id);
}

void desk_snapshot_free(desk_snapshot *s)
{
    if (s == NULL)
        return;
    bfc_dash_fini(&s->m);
    g_free(s);
}
