/*
 * dash_fetch.c - the calls behind a dashboard (see dash_fetch.h): Check, every List page, Get
 * and Audit of the backfill in detail, applied to the model; and a control's outcome line from
 * the server's answer. Moved out of buzzctl_dash.c so that the desktop client makes exactly
 * the same reads.
 */
#include "dash_fetch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buzz/backfill/v1/admin.pb-c.h"
#include "buzz/backfill/v1/readiness.pb-c.h"

int64_t bfc_dash_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Every page of Admin.List into the model (or the failure). */
static bf_err fetch_list(bfc_dash_model *m, bfc_client *c)
{
    bfc_status st;
    memset(&st, 0, sizeof st);
    ProtobufCMessage *out = NULL;
    Buzz__Backfill__V1__ListRequest lreq = BUZZ__BACKFILL__V1__LIST_REQUEST__INIT;
    ProtobufCMessage **pages = NULL;
    Buzz__Backfill__V1__Backfill **rows = NULL;
    size_t n_pages = 0, cap_pages = 0, n = 0, cap_rows = 0;
    bool truncated = false;
    bf_err err = BF_OK;
    char *token = NULL;
    do {
        lreq.page_token = token;
        lreq.has_page_size = 1;
        lreq.page_size = BFC_DASH_LIST_PAGE;
        err = bfc_call(c, &buzz__backfill__v1__admin__descriptor, "List", &lreq.base, &out, &st);
        free(token);
        token = NULL;
        if (err == BF_OK && n_pages == cap_pages) {
            size_t cap = cap_pages ? cap_pages * 2 : 16;
            ProtobufCMessage **p = realloc(pages, cap * sizeof *p);
            if (p == NULL)
                err = BF_ERR_RESOURCE_EXHAUSTED;
            else
                pages = p, cap_pages = cap;
        }
        if (err != BF_OK) {
            if (out)
                protobuf_c_message_free_unpacked(out, NULL);
            out = NULL;
            break;
        }
        pages[n_pages++] = out;
        Buzz__Backfill__V1__ListResponse *r = (Buzz__Backfill__V1__ListResponse *)out;
        out = NULL;
        if (n + r->n_backfills > cap_rows) {
            size_t cap = cap_rows ? cap_rows : 1024;
            while (cap < n + r->n_backfills)
                cap *= 2;
            Buzz__Backfill__V1__Backfill **p = realloc(rows, cap * sizeof *p);
            if (p == NULL) {
                err = BF_ERR_RESOURCE_EXHAUSTED;
                break;
            }
            rows = p, cap_rows = cap;
        }
        for (size_t i = 0; i < r->n_backfills; i++)
            rows[n++] = r->backfills[i];
        if (r->next_page_token != NULL && r->next_page_token[0] != '\0') {
            if (n >= BFC_DASH_MAX_ROWS) /* the model keeps no more: said on screen */
                truncated = true;
            else if ((token = strdup(r->next_page_token)) == NULL)
                err = BF_ERR_RESOURCE_EXHAUSTED;
        }
    } while (token != NULL);
    bfc_dash_apply_list(m, rows, n, truncated, err, &st, bfc_dash_now_us());
    for (size_t i = 0; i < n_pages; i++)
        protobuf_c_message_free_unpacked(pages[i], NULL);
    free(pages);
    free(rows);
    return err;
}

static void fetch_detail(bfc_dash_model *m, bfc_client *c, const char *id)
{
    char sel[BFC_CELL];
    snprintf(sel, sizeof sel, "%s", id);
    Buzz__Backfill__V1__GetRequest greq = BUZZ__BACKFILL__V1__GET_REQUEST__INIT;
    greq.id = sel;
    ProtobufCMessage *get = NULL, *audit = NULL;
    bfc_status gst, ast;
    bf_err gerr =
        bfc_call(c, &buzz__backfill__v1__admin__descriptor, "Get", &greq.base, &get, &gst);
    Buzz__Backfill__V1__AuditRequest areq = BUZZ__BACKFILL__V1__AUDIT_REQUEST__INIT;
    areq.id = sel;
    areq.has_page_size = 1;
    areq.page_size = BFC_DASH_AUDIT_TAIL;
    bf_err aerr = gerr == BF_OK ? bfc_call(c, &buzz__backfill__v1__admin__descriptor, "Audit",
                                           &areq.base, &audit, &ast)
                                : gerr;
    bfc_dash_apply_detail(m, gerr == BF_OK ? (Buzz__Backfill__V1__GetResponse *)get : NULL, gerr,
                          &gst, aerr == BF_OK ? (Buzz__Backfill__V1__AuditResponse *)audit : NULL,
                          aerr, bfc_dash_now_us());
    if (get)
        protobuf_c_message_free_unpacked(get, NULL);
    if (audit)
        protobuf_c_message_free_unpacked(audit, NULL);
}

bf_err bfc_dash_refresh(bfc_dash_model *m, bfc_client *c, bf_err open_err,
                        const bfc_status *open_st, const char *detail_id)
{
    char sel[BFC_CELL]; /* detail_id may point into m's rows, which the list read replaces */
    if (detail_id != NULL) {
        snprintf(sel, sizeof sel, "%s", detail_id);
        detail_id = sel;
    }
    if (c == NULL) { /* nothing to call: every read fails as the connection did */
        int64_t now = bfc_dash_now_us();
        bfc_dash_apply_ready(m, NULL, open_err, open_st, now);
        bfc_dash_apply_list(m, NULL, 0, false, open_err, open_st, now);
        if (detail_id != NULL)
            bfc_dash_apply_detail(m, NULL, open_err, open_st, NULL, open_err, now);
        return open_err;
    }
    bfc_status st;
    ProtobufCMessage *out = NULL;
    Buzz__Backfill__V1__CheckRequest creq = BUZZ__BACKFILL__V1__CHECK_REQUEST__INIT;
    bf_err first =
        bfc_call(c, &buzz__backfill__v1__readiness__descriptor, "Check", &creq.base, &out, &st);
    bfc_dash_apply_ready(m, first == BF_OK ? (Buzz__Backfill__V1__CheckResponse *)out : NULL, first,
                         &st, bfc_dash_now_us());
    if (out)
        protobuf_c_message_free_unpacked(out, NULL);
    if (first != BF_OK && !st.answered &&
        (first == BF_ERR_UNAVAILABLE || first == BF_ERR_TIMEOUT)) {
        /* nothing answered: the other reads would only wait out their budgets too (a refresh
         * of a stopped server took one budget per call before it showed STALE); they fail
         * the same way now */
        int64_t now = bfc_dash_now_us();
        bfc_dash_apply_list(m, NULL, 0, false, first, &st, now);
        if (detail_id != NULL)
            bfc_dash_apply_detail(m, NULL, first, &st, NULL, first, now);
        return first;
    }
    bf_err err = fetch_list(m, c);
    if (first == BF_OK)
        first = err;
    if (detail_id != NULL)
        fetch_detail(m, c, detail_id);
    return first;
}

void bfc_dash_outcome(char *line, size_t cap, int action, const char *id, bf_err err,
                      const bfc_status *st, const ProtobufCMessage *out)
{
    const char *name = bfc_action_name(action);
    char safe_id[BFC_CELL];
    bfc_printable(safe_id, sizeof safe_id, id);
    if (name == NULL)
        name = "unknown action";
    if (err == BF_OK && out != NULL && action == BFC_ACTION_VALIDATE) {
        const Buzz__Backfill__V1__ValidateResponse *v =
            (const Buzz__Backfill__V1__ValidateResponse *)out;
        snprintf(line, cap, "validate %s: %s (request id %s)", safe_id,
                 bfc_outcome_name(v->has_outcome ? (int)v->outcome : 0), st->request_id);
    } else if (err == BF_OK && out != NULL) {
        const Buzz__Backfill__V1__ControlResponse *r =
            (const Buzz__Backfill__V1__ControlResponse *)out;
        snprintf(line, cap, "%s %s: %s -> %s (request id %s)", name, safe_id,
                 bfc_state_name(r->has_prior_state ? (int)r->prior_state : 0),
                 bfc_state_name(r->has_resulting_state ? (int)r->resulting_state : 0),
                 st->request_id);
    } else if (err == BF_ERR_CONFLICT && st->answered) {
        /* as the CLI: the server's reason, and the state the backfill is in now */
        const Buzz__Backfill__V1__Backfill *b = NULL;
        if (out != NULL && action == BFC_ACTION_VALIDATE)
            b = ((const Buzz__Backfill__V1__ValidateResponse *)out)->backfill;
        else if (out != NULL)
            b = ((const Buzz__Backfill__V1__ControlResponse *)out)->backfill;
        char reason[BFC_MESSAGE_MAX + BFC_DETAIL_MAX + 4], safe[200];
        bool detail = st->detail[0] && strstr(st->detail, st->message) == NULL;
        snprintf(reason, sizeof reason, "%s%s%s",
                 st->message[0] ? st->message : bfc_code_name(st->code), detail ? ": " : "",
                 detail ? st->detail : "");
        bfc_printable(safe, sizeof safe, reason);
        snprintf(line, cap, "%s %s refused, now %s: %s (request id %s)", name, safe_id,
                 b != NULL && b->has_state ? bfc_state_name((int)b->state) : "unknown", safe,
                 st->request_id);
    } else {
        bfc_fetch_error fe;
        bfc_fetch_error_from(&fe, err == BF_OK ? BF_ERR_IO : err, st);
        /* no answer, or the server gave up waiting: the control may or may not have been
         * applied (as ctl_report says it) */
        bool unknown =
            !st->answered || st->code == BUZZ__BACKFILL__V1__STATUS_CODE__DEADLINE_EXCEEDED;
        snprintf(line, cap, "%s %s: %s%s", name, safe_id, fe.text,
                 unknown ? " (outcome unknown: see the table)" : "");
    }
}
