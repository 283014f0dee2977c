/*
 * admin.c - the Admin service: List, Get, Start, Pause, Resume, Retry, Validate, Audit, WhoAmI
 * and Preflight (admin_preflight.c) over the engine API, on the calling transport thread's engine
 * session.
 *
 * Design notes: every answer is read from PostgreSQL while the request is served; nothing here
 * keeps lifecycle state. The controls and Validate are the engine's idempotent, audited
 * requests keyed by the envelope's request ID: the transition, its request record and its
 * audit row commit in one transaction inside the engine, so a retried delivery returns the
 * stored outcome (replayed) and a conflict returns FAILED_PRECONDITION with the current row.
 * Authentication, capability checks and the audit of rejected callers happen in dispatch.c
 * before a handler runs (see srv_admin_policies()). There is deliberately no reset, rewind,
 * bound change, deletion, force completion, unfenced release or generic cancel here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buzz/backfill/v1/token.pb-c.h"
#include "srv.h"

#define ADMIN_PAGE_DEFAULT 100
#define ADMIN_PAGE_MAX     BF_LIST_MAX

#define SC(name) BUZZ__BACKFILL__V1__STATUS_CODE__##name

typedef Buzz__Backfill__V1__Admin_Service admin_service;

/* ---- helpers ----------------------------------------------------------------------------- */

static void admin_fail(srv_call *call, bf_err err, const char *detail)
{
    srv_call_status(call, srv_code_from_err(err), bf_err_str(err), "%s", detail ? detail : "");
}

/* An answer the request itself explains (its input, the row's lifecycle, the database's
 * reachability). Anything else may be a schema that is missing or too new. */
static bool admin_expected(bf_err err)
{
    switch (err) {
    case BF_OK:
    case BF_ERR_INVALID_ARGUMENT:
    case BF_ERR_NOT_FOUND:
    case BF_ERR_CONFLICT:
    case BF_ERR_INCOMPATIBLE:
    case BF_ERR_UNKNOWN_DEFINITION:
    case BF_ERR_UNAVAILABLE:
    case BF_ERR_TIMEOUT:
    case BF_ERR_RETRYABLE:
    case BF_ERR_NOMEM:
        return true;
    default:
        return false;
    }
}

/* Fail a call after an engine error: a schema problem is reported as such (UNAVAILABLE: the
 * service cannot serve until an operator migrates), never as a conflict without a body. */
static void admin_engine_fail(srv_call *call, bf_engine *e, bf_err err, const char *detail)
{
    if (!admin_expected(err)) {
        bf_err schema = bf_schema_check(e, NULL);
        if (schema != BF_OK && schema != err) {
            admin_fail(call, schema, bf_engine_diag(e));
            return;
        }
        if (srv_code_from_err(err) == SC(FAILED_PRECONDITION))
            err = BF_ERR_INTERNAL; /* a FAILED_PRECONDITION promises the current state */
    }
    admin_fail(call, err, detail && detail[0] ? detail : bf_engine_diag(e));
}

static bf_engine *admin_engine(srv_call *call)
{
    bf_engine *e = NULL;
    bf_err err = srv_session_engine(call->session, &e);
    if (err != BF_OK) {
        admin_fail(call, err, "the database cannot be reached now");
        return NULL;
    }
    return e;
}

/* Keeps this server's automatic readiness gate closed: automatic mode, required by this
 * process's registry (the set bf_gate() evaluates), not completed. */
static bool admin_gating(const srv_call *call, const bf_backfill *row)
{
    const srv_context *ctx = call->session->ctx;
    if (!ctx->auto_backfill || row->state == BF_STATE_COMPLETED)
        return false;
    const bf_definition *d = ctx->registry ? bf_registry_find(ctx->registry, row->id) : NULL;
    return d != NULL && d->required;
}

static bool admin_id_ok(srv_call *call, const char *id)
{
    if (bf_id_valid(id))
        return true;
    srv_call_status(call, SC(INVALID_ARGUMENT), "invalid backfill id", "%s",
                    "a stable id is 3 to 63 characters of [a-z0-9_.-] starting with a letter");
    return false;
}

static int admin_page_size(bool has, uint32_t size)
{
    if (!has || size == 0)
        return ADMIN_PAGE_DEFAULT;
    return size > ADMIN_PAGE_MAX ? ADMIN_PAGE_MAX : (int)size;
}

static bool admin_state_filter(srv_call *call, bool has, Buzz__Backfill__V1__State st,
                               bf_state *out)
{
    *out = 0;
    if (!has || st == BUZZ__BACKFILL__V1__STATE__STATE_UNSPECIFIED)
        return true;
    if (st < BUZZ__BACKFILL__V1__STATE__PENDING || st > BUZZ__BACKFILL__V1__STATE__COMPLETED) {
        srv_call_status(call, SC(INVALID_ARGUMENT), "unknown state filter", "%s", "");
        return false;
    }
    *out = (bf_state)st; /* the wire enum mirrors bf_state value for value */
    return true;
}

/* ---- List ------------------------------------------------------------------------------- */

static void admin_list(admin_service *svc, const Buzz__Backfill__V1__ListRequest *in,
                       Buzz__Backfill__V1__ListResponse_Closure closure, void *closure_data)
{
    srv_call *call = SRV_CALL(closure_data);
    bf_state filter = 0;
    const char *after = in->page_token && in->page_token[0] ? in->page_token : NULL;
    if (!admin_state_filter(call, in->has_state, in->state, &filter)) {
        closure(NULL, closure_data);
        return;
    }
    if (after != NULL && !bf_id_valid(after)) {
        srv_call_status(call, SC(INVALID_ARGUMENT), "invalid page token", "%s", "");
        closure(NULL, closure_data);
        return;
    }
    bf_engine *e = admin_engine(call);
    if (e == NULL) {
        closure(NULL, closure_data);
        return;
    }
    int limit = admin_page_size(in->has_page_size, in->page_size);
    bf_backfill *rows = malloc((size_t)limit * sizeof *rows);
    srv_backfill_msg *msgs = malloc((size_t)limit * sizeof *msgs);
    Buzz__Backfill__V1__Backfill **ptrs = malloc((size_t)limit * sizeof *ptrs);
    int n = 0;
    bf_err err = rows && msgs && ptrs ? bf_list(e, filter, after, rows, limit, &n) : BF_ERR_NOMEM;
    bool more = false;
    if (err == BF_OK && n == limit) {
        /* probe one row past the page so the last page carries no token */
        bf_backfill probe;
        int m = 0;
        err = bf_list(e, filter, rows[n - 1].id, &probe, 1, &m);
        more = m > 0;
    }
    if (err != BF_OK) {
        admin_engine_fail(call, e, err, NULL);
        closure(NULL, closure_data);
    } else {
        Buzz__Backfill__V1__ListResponse resp = BUZZ__BACKFILL__V1__LIST_RESPONSE__INIT;
        for (int i = 0; i < n; i++) {
            srv_backfill_msg_init(&msgs[i], &rows[i], admin_gating(call, &rows[i]));
            ptrs[i] = &msgs[i].backfill;
        }
        resp.n_backfills = (size_t)n;
        resp.backfills = ptrs;
        if (more)
            resp.next_page_token = rows[n - 1].id;
        closure(&resp, closure_data);
    }
    free(ptrs);
    free(msgs);
    free(rows);
}

/* ---- Get -------------------------------------------------------------------------------- */

/* Get's answer from its read's outcome (row is freed). */
static void admin_get_answer(srv_call *call, bf_engine *e, bf_err err, bf_backfill *row)
{
    if (err != BF_OK) {
        admin_engine_fail(call, e, err, NULL);
        srv_call_answer(call, NULL);
    } else {
        srv_backfill_msg m;
        srv_backfill_msg_init(&m, row, admin_gating(call, row));
        Buzz__Backfill__V1__GetResponse resp = BUZZ__BACKFILL__V1__GET_RESPONSE__INIT;
        resp.backfill = &m.backfill;
        srv_call_answer(call, &resp.base);
    }
    free(row);
}

/* A deferred Get once its session's socket is readable. */
static void admin_get_resume(srv_call *call, void *arg)
{
    bf_backfill *row = arg;
    bf_engine *e = call->session->engine;
    bool done = false;
    bf_err err = bf_get_end(e, row, &done);
    if (done)
        admin_get_answer(call, e, err, row);
    else
        srv_call_defer(call, bf_engine_socket(e), admin_get_resume, row);
}

static void admin_get(admin_service *svc, const Buzz__Backfill__V1__GetRequest *in,
                      Buzz__Backfill__V1__GetResponse_Closure closure, void *closure_data)
{
    srv_call *call = SRV_CALL(closure_data);
    bf_engine *e;
    if (!admin_id_ok(call, in->id) || (e = admin_engine(call)) == NULL) {
        closure(NULL, closure_data);
        return;
    }
    bf_backfill *row = malloc(sizeof *row);
    if (row != NULL && call->may_defer) {
        /* send the read and give the thread back until PostgreSQL has answered */
        bf_err err = bf_get_begin(e, in->id);
        if (err == BF_OK)
            srv_call_defer(call, bf_engine_socket(e), admin_get_resume, row);
        else
            admin_get_answer(call, e, err, row);
        return;
    }
    admin_get_answer(call, e, row ? bf_get(e, in->id, row) : BF_ERR_NOMEM, row);
}

/* ---- controls --------------------------------------------------------------------------- */

static bf_actor admin_actor(const srv_call *call)
{
    bf_actor who = {NULL, NULL, NULL};
    if (call->who != NULL) {
        who.actor = call->who->actor[0] ? call->who->actor : NULL;
        who.authority = call->who->authority[0] ? call->who->authority : NULL;
    }
    who.request_id = call->request_id[0] ? call->request_id : NULL;
    return who;
}

static void admin_control(srv_call *call, bf_action action, const char *id,
                          Buzz__Backfill__V1__ControlResponse_Closure closure, void *closure_data)
{
    bf_engine *e = admin_engine(call);
    if (e == NULL) {
        closure(NULL, closure_data);
        return;
    }
    /* an invalid id is still handed to the engine: it audits the rejected attempt */
    bf_actor who = admin_actor(call);
    bf_action_result *res = malloc(sizeof *res);
    if (res == NULL) {
        admin_fail(call, BF_ERR_NOMEM, "");
        closure(NULL, closure_data);
        return;
    }
    bf_err err = bf_action_apply(e, action, id, &who, res);
    Buzz__Backfill__V1__ControlResponse resp = BUZZ__BACKFILL__V1__CONTROL_RESPONSE__INIT;
    srv_backfill_msg m;
    bool has_row = res->prior != 0 || res->row.id[0] != '\0';
    if (has_row) {
        srv_backfill_msg_init(&m, &res->row, admin_gating(call, &res->row));
        resp.backfill = &m.backfill;
    }
    if (res->prior != 0) {
        resp.has_prior_state = true;
        resp.prior_state = srv_state_to_proto(res->prior);
    }
    if (res->result != 0) {
        resp.has_resulting_state = true;
        resp.resulting_state = srv_state_to_proto(res->result);
    }
    if (res->prior != 0) {
        resp.has_generation = true;
        resp.generation = res->generation;
    }
    resp.has_replayed = true;
    resp.replayed = res->replayed;
    resp.detail = res->detail[0] ? res->detail : NULL;
    resp.has_outcome = true;
    if (err == BF_OK) {
        resp.outcome = res->changed ? BUZZ__BACKFILL__V1__CONTROL_OUTCOME__ACCEPTED
                                    : BUZZ__BACKFILL__V1__CONTROL_OUTCOME__CONVERGED;
        closure(&resp, closure_data);
    } else if (srv_code_from_err(err) == SC(FAILED_PRECONDITION) && has_row) {
        /* a conflict carries the current state */
        resp.outcome = BUZZ__BACKFILL__V1__CONTROL_OUTCOME__REJECTED;
        admin_fail(call, err, res->detail);
        closure(&resp, closure_data);
    } else {
        admin_engine_fail(call, e, err, res->detail);
        closure(NULL, closure_data);
    }
    free(res);
}

static void admin_start(admin_service *svc, const Buzz__Backfill__V1__ControlRequest *in,
                        Buzz__Backfill__V1__ControlResponse_Closure closure, void *closure_data)
{
    admin_control(SRV_CALL(closure_data), BF_ACTION_START, in->id, closure, closure_data);
}

static void admin_pause(admin_service *svc, const Buzz__Backfill__V1__ControlRequest *in,
                        Buzz__Backfill__V1__ControlResponse_Closure closure, void *closure_data)
{
    admin_control(SRV_CALL(closure_data), BF_ACTION_PAUSE, in->id, closure, closure_data);
}

static void admin_resume(admin_service *svc, const Buzz__Backfill__V1__ControlRequest *in,
                         Buzz__Backfill__V1__ControlResponse_Closure closure, void *closure_data)
{
    admin_control(SRV_CALL(closure_data), BF_ACTION_RESUME, in->id, closure, closure_data);
}

static void admin_retry(admin_service *svc, const Buzz__Backfill__V1__ControlRequest *in,
                        Buzz__Backfill__V1__ControlResponse_Closure closure, void *closure_data)
{
    admin_control(SRV_CALL(closure_data), BF_ACTION_RETRY, in->id, closure, closure_data);
}

/* ---- WatchOff ---------------------------------------------------------------------------- */

static void admin_watch_off(admin_service *svc, const Buzz__Backfill__V1__ControlRequest *in,
                            Buzz__Backfill__V1__ControlResponse_Closure closure, void *closure_data)
{
    (void)svc;
    srv_call *call = SRV_CALL(closure_data);
    bf_engine *e;
    if (!admin_id_ok(call, in->id) || (e = admin_engine(call)) == NULL) {
        closure(NULL, closure_data);
        return;
    }
    bf_actor who = admin_actor(call);
    bool removed = false;
    bf_err err = bf_watch_off(e, in->id, &who, &removed);
    bf_backfill *row = err == BF_OK ? malloc(sizeof *row) : NULL;
    if (err == BF_OK)
        err = row ? bf_get(e, in->id, row) : BF_ERR_NOMEM;
    if (err != BF_OK) {
        admin_engine_fail(call, e, err, NULL);
        closure(NULL, closure_data);
        free(row);
        return;
    }
    Buzz__Backfill__V1__ControlResponse resp = BUZZ__BACKFILL__V1__CONTROL_RESPONSE__INIT;
    resp.has_outcome = true;
    resp.outcome = removed ? BUZZ__BACKFILL__V1__CONTROL_OUTCOME__ACCEPTED
                           : BUZZ__BACKFILL__V1__CONTROL_OUTCOME__CONVERGED;
    resp.has_prior_state = resp.has_resulting_state = resp.has_generation = true;
    resp.prior_state = resp.resulting_state = srv_state_to_proto(row->state);
    resp.generation = row->generation;
    resp.detail = removed ? "old-writer watch removed" : "no old-writer watch was installed";
    srv_backfill_msg m;
    srv_backfill_msg_init(&m, row, admin_gating(call, row));
    resp.backfill = &m.backfill;
    closure(&resp, closure_data);
    free(row);
}

/* ---- Validate --------------------------------------------------------------------------- */

static Buzz__Backfill__V1__ValidationOutcome admin_outcome(bf_validation_outcome o)
{
    switch (o) {
    case BF_VALIDATION_SUCCESS:
        return BUZZ__BACKFILL__V1__VALIDATION_OUTCOME__SUCCESS;
    case BF_VALIDATION_FAILURE:
        return BUZZ__BACKFILL__V1__VALIDATION_OUTCOME__FAILURE;
    case BF_VALIDATION_CURRENT_STATE:
    case BF_VALIDATION_NONE:
        break;
    }
    /* no result: the answer is the lifecycle it found, never an implied success or failure */
    return BUZZ__BACKFILL__V1__VALIDATION_OUTCOME__CURRENT_STATE;
}

static void admin_validate(admin_service *svc, const Buzz__Backfill__V1__ValidateRequest *in,
                           Buzz__Backfill__V1__ValidateResponse_Closure closure, void *closure_data)
{
    srv_call *call = SRV_CALL(closure_data);
    bf_engine *e = admin_engine(call);
    if (e == NULL) {
        closure(NULL, closure_data);
        return;
    }
    bf_actor who = admin_actor(call);
    bf_action_result *res = malloc(sizeof *res);
    if (res == NULL) {
        admin_fail(call, BF_ERR_NOMEM, "");
        closure(NULL, closure_data);
        return;
    }
    bf_err err = bf_validate(e, in->id, &who, res);
    if (err != BF_OK) {
        admin_engine_fail(call, e, err, res->detail);
        closure(NULL, closure_data);
        free(res);
        return;
    }
    Buzz__Backfill__V1__ValidateResponse resp = BUZZ__BACKFILL__V1__VALIDATE_RESPONSE__INIT;
    resp.has_outcome = true;
    resp.outcome = admin_outcome(res->validation);
    resp.detail = res->detail[0] ? res->detail : NULL;
    if (res->prior != 0) {
        resp.has_evaluated_state = true;
        resp.evaluated_state = srv_state_to_proto(res->prior);
    }
    resp.has_completed = true;
    resp.completed = res->changed && res->result == BF_STATE_COMPLETED;
    resp.has_replayed = true;
    resp.replayed = res->replayed;
    srv_backfill_msg m;
    if (res->row.id[0] != '\0') {
        srv_backfill_msg_init(&m, &res->row, admin_gating(call, &res->row));
        resp.backfill = &m.backfill;
    }
    closure(&resp, closure_data);
    free(res);
}

/* ---- Audit ------------------------------------------------------------------------------ */

static void admin_audit_entry(Buzz__Backfill__V1__AuditEntry *m, const bf_audit_entry *a)
{
    buzz__backfill__v1__audit_entry__init(m);
    m->has_seq = true;
    m->seq = a->seq;
    m->has_at_us = true;
    m->at_us = a->at;
    m->backfill_id = a->backfill_id[0] ? (char *)a->backfill_id : NULL;
    m->action = a->action[0] ? (char *)a->action : NULL;
    m->actor = a->actor[0] ? (char *)a->actor : NULL;
    m->authority = a->authority[0] ? (char *)a->authority : NULL;
    m->request_id = a->request_id[0] ? (char *)a->request_id : NULL;
    if (a->prior != 0) {
        m->has_prior_state = true;
        m->prior_state = srv_state_to_proto(a->prior);
    }
    if (a->result != 0) {
        m->has_resulting_state = true;
        m->resulting_state = srv_state_to_proto(a->result);
    }
    if (a->has_generation) {
        m->has_generation = true;
        m->generation = a->generation;
    }
    m->outcome = a->outcome[0] ? (char *)a->outcome : NULL;
    if (a->count >= 1) {
        m->has_count = true;
        m->count = a->count;
    }
    if (a->has_window) {
        m->has_window_start_us = true;
        m->window_start_us = a->window_start;
        m->has_window_end_us = true;
        m->window_end_us = a->window_end;
    }
}

static void admin_audit(admin_service *svc, const Buzz__Backfill__V1__AuditRequest *in,
                        Buzz__Backfill__V1__AuditResponse_Closure closure, void *closure_data)
{
    srv_call *call = SRV_CALL(closure_data);
    const char *id = in->id && in->id[0] ? in->id : NULL;
    if (id != NULL && !admin_id_ok(call, id)) {
        closure(NULL, closure_data);
        return;
    }
    if (in->has_before_seq && in->before_seq <= 0) {
        srv_call_status(call, SC(INVALID_ARGUMENT), "invalid before_seq", "%s", "");
        closure(NULL, closure_data);
        return;
    }
    bf_engine *e = admin_engine(call);
    if (e == NULL) {
        closure(NULL, closure_data);
        return;
    }
    int limit = admin_page_size(in->has_page_size, in->page_size);
    int64_t before = in->has_before_seq ? in->before_seq : 0;
    bf_audit_entry *rows = malloc((size_t)limit * sizeof *rows);
    Buzz__Backfill__V1__AuditEntry *msgs = malloc((size_t)limit * sizeof *msgs);
    Buzz__Backfill__V1__AuditEntry **ptrs = malloc((size_t)limit * sizeof *ptrs);
    int n = 0;
    bf_err err =
        rows && msgs && ptrs ? bf_audit_list(e, id, before, rows, limit, &n) : BF_ERR_NOMEM;
    bool more = false;
    if (err == BF_OK && n == limit) {
        bf_audit_entry probe;
        int m = 0;
        err = bf_audit_list(e, id, rows[n - 1].seq, &probe, 1, &m);
        more = m > 0;
    }
    if (err != BF_OK) {
        admin_engine_fail(call, e, err, NULL);
        closure(NULL, closure_data);
    } else {
        Buzz__Backfill__V1__AuditResponse resp = BUZZ__BACKFILL__V1__AUDIT_RESPONSE__INIT;
        for (int i = 0; i < n; i++) {
            admin_audit_entry(&msgs[i], &rows[i]);
            ptrs[i] = &msgs[i];
        }
        resp.n_entries = (size_t)n;
        resp.entries = ptrs;
        if (more) {
            resp.has_next_before_seq = true;
            resp.next_before_seq = rows[n - 1].seq;
        }
        closure(&resp, closure_data);
    }
    free(ptrs);
    free(msgs);
    free(rows);
}

/* ---- WhoAmI ----------------------------------------------------------------------------- */

static const char *const admin_cap_names[] = {
    [BUZZ__BACKFILL__V1__CAPABILITY__READ] = "read",
    [BUZZ__BACKFILL__V1__CAPABILITY__CONTROL] = "control",
    [BUZZ__BACKFILL__V1__CAPABILITY__VALIDATE] = "validate",
    [BUZZ__BACKFILL__V1__CAPABILITY__READINESS] = "readiness",
};

static const char *const admin_role_names[] = {
    [BUZZ__BACKFILL__V1__ROLE__DEPLOYMENT_OPERATOR] = "deployment_operator",
    [BUZZ__BACKFILL__V1__ROLE__COMMUNITY_OWNER] = "community_owner",
    [BUZZ__BACKFILL__V1__ROLE__CHANNEL_ADMIN] = "channel_admin",
    [BUZZ__BACKFILL__V1__ROLE__MEMBER] = "member",
};

#define ADMIN_NAMES_MAX 8

static size_t admin_bit_names(uint32_t bits, const char *const *names, size_t n_names, char **out)
{
    size_t n = 0;
    for (size_t i = 1; i < n_names && n < ADMIN_NAMES_MAX; i++)
        if ((bits & (1u << i)) != 0 && names[i] != NULL)
            out[n++] = (char *)names[i];
    return n;
}

static void admin_who_am_i(admin_service *svc, const Buzz__Backfill__V1__WhoAmIRequest *in,
                           Buzz__Backfill__V1__WhoAmIResponse_Closure closure, void *closure_data)
{
    srv_call *call = SRV_CALL(closure_data);
    const srv_identity *who = call->who;
    if (who == NULL || !who->authenticated) {
        admin_fail(call, BF_ERR_UNAUTHENTICATED, "");
        closure(NULL, closure_data);
        return;
    }
    char *caps[ADMIN_NAMES_MAX], *roles[ADMIN_NAMES_MAX];
    Buzz__Backfill__V1__WhoAmIResponse resp = BUZZ__BACKFILL__V1__WHO_AM_IRESPONSE__INIT;
    resp.actor = who->actor[0] ? (char *)who->actor : NULL;
    resp.authority = who->authority[0] ? (char *)who->authority : NULL;
    resp.n_capabilities = admin_bit_names(who->caps, admin_cap_names,
                                          sizeof admin_cap_names / sizeof admin_cap_names[0], caps);
    resp.capabilities = caps;
    resp.n_roles = admin_bit_names(who->roles, admin_role_names,
                                   sizeof admin_role_names / sizeof admin_role_names[0], roles);
    resp.roles = roles;
    resp.token_id = who->token_id[0] ? (char *)who->token_id : NULL;
    if (who->expires_at != 0) { /* a signed expiry may be far off: saturate, never wrap */
        resp.has_expires_at_us = true;
        resp.expires_at_us =
            who->expires_at <= INT64_MAX / 1000000 ? who->expires_at * 1000000 : INT64_MAX;
    }
    closure(&resp, closure_data);
}

/* ---- Preflight (admin_preflight.c) ------------------------------------------------------- */

static void admin_preflight(admin_service *svc, const Buzz__Backfill__V1__PreflightRequest *in,
                            Buzz__Backfill__V1__PreflightResponse_Closure closure,
                            void *closure_data)
{
    srv_admin_preflight(in, closure, closure_data);
}

/* ---- the service ------------------------------------------------------------------------ */

static admin_service admin_svc = BUZZ__BACKFILL__V1__ADMIN__INIT(admin_);

/* Body caps: every Admin request is a few scalars and at most one stable ID or page token (63
 * bytes), well under 100 bytes; 4 KiB leaves room for fields a newer client adds. */
#define ADMIN_BODY_MAX 4096

/* Preflight names at most 64 stable IDs (admin_preflight.c), 65 bytes each on the wire. */
#define ADMIN_PREFLIGHT_BODY_MAX 8192

/* descriptor order: List, Get, Start, Pause, Resume, Retry, Validate, Audit, WhoAmI, Preflight,
 * WatchOff.
 * Preflight is a read: it writes nothing, so it is not audited, like Get and List. */
static const srv_method_policy admin_policies[] = {
    {SRV_CAP_READ, false, ADMIN_BODY_MAX},    {SRV_CAP_READ, false, ADMIN_BODY_MAX},
    {SRV_CAP_CONTROL, true, ADMIN_BODY_MAX},  {SRV_CAP_CONTROL, true, ADMIN_BODY_MAX},
    {SRV_CAP_CONTROL, true, ADMIN_BODY_MAX},  {SRV_CAP_CONTROL, true, ADMIN_BODY_MAX},
    {SRV_CAP_VALIDATE, true, ADMIN_BODY_MAX}, {SRV_CAP_READ, false, ADMIN_BODY_MAX},
    {SRV_CAP_READ, false, ADMIN_BODY_MAX},    {SRV_CAP_READ, false, ADMIN_PREFLIGHT_BODY_MAX},
    {SRV_CAP_CONTROL, true, ADMIN_BODY_MAX},
};

_Static_assert(sizeof admin_policies / sizeof admin_policies[0] == 11,
               "one policy per Admin method");

ProtobufCService *srv_admin_service(void)
{
    return &admin_svc.base;
}

const srv_method_policy *srv_admin_policies(void)
{
    return admin_policies;
}
