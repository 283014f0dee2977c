/*
 * admin_preflight.c - Admin.Preflight: the preflight of `buzz-backfilld preflight` (engine.h
 * bf_preflight, docs/definitions.md "The preflight") asked of a running daemon, for the IDs a
 * request names or for a page of this process's registry, on the calling transport thread's
 * engine session.
 *
 * Design notes
 *
 * Bounds. A request names at most PREFLIGHT_IDS_MAX IDs, and without IDs a page holds at most
 * PREFLIGHT_PAGE_MAX definitions (a registry may hold thousands). So one call runs at most that
 * many preflights, each a few catalog queries and EXPLAINs without ANALYZE under the engine
 * session's statement_timeout and lock_timeout, and its answer holds at most that many results
 * of an ID and a BF_DIAG_MAX report. The call's deadline is checked before each definition: a
 * spent budget is DEADLINE_EXCEEDED, never a short answer that reads as complete.
 *
 * Every ID is judged before anything runs: a malformed one is INVALID_ARGUMENT, one this process
 * has no definition for is NOT_FOUND naming it (`buzz-backfilld preflight` exits 2 for the same),
 * so a misspelled ID never passes as a shorter list.
 *
 * A definition that fails its preflight is a result, not a failed call: ok false, the wire code
 * and short message its error has everywhere (common/src/status.c), and the engine's report,
 * which names identifiers and plan node types, never row values or query text. Only what says
 * nothing about any definition fails the whole call: the database cannot be reached, memory.
 *
 * Authorization is the read capability and nothing is audited, as for Get and List: the
 * preflight writes nothing (srv_admin_policies() in admin.c).
 */
#include <stdlib.h>
#include <string.h>

#include "srv.h"

#define PREFLIGHT_IDS_MAX  64 /* IDs one request may name */
#define PREFLIGHT_PAGE_MAX 64 /* definitions of one page without IDs (also the default) */
#define PREFLIGHT_PLAN_MAX                                                                         \
    (PREFLIGHT_IDS_MAX > PREFLIGHT_PAGE_MAX ? PREFLIGHT_IDS_MAX : PREFLIGHT_PAGE_MAX)

#define SC(name) BUZZ__BACKFILL__V1__STATUS_CODE__##name

typedef Buzz__Backfill__V1__PreflightRequest preflight_request;
typedef Buzz__Backfill__V1__PreflightResult preflight_result;

/* One definition's result and the report it points at. */
typedef struct preflight_slot {
    preflight_result msg;
    char report[BF_DIAG_MAX];
} preflight_slot;

/* What one call checks: IDs into the request or the registry, both alive until the answer. */
typedef struct preflight_plan {
    const char *ids[PREFLIGHT_PLAN_MAX];
    size_t n;
    const char *next; /* the page token of the next page; NULL on the last */
} preflight_plan;

/* The IDs the request names, each well-formed and registered here. */
static bool preflight_named(srv_call *call, const preflight_request *in, const bf_registry *reg,
                            preflight_plan *plan)
{
    if ((in->page_token != NULL && in->page_token[0] != '\0') || in->has_page_size) {
        srv_call_status(call, SC(INVALID_ARGUMENT), "invalid page", "%s",
                        "page_token and page_size page through every definition: send them"
                        " without ids");
        return false;
    }
    if (in->n_ids > PREFLIGHT_IDS_MAX) {
        srv_call_status(call, SC(INVALID_ARGUMENT), "too many ids",
                        "a Preflight request names at most %d ids; send none to page through"
                        " every definition",
                        PREFLIGHT_IDS_MAX);
        return false;
    }
    for (size_t i = 0; i < in->n_ids; i++) {
        if (!bf_id_valid(in->ids[i])) {
            srv_call_status(call, SC(INVALID_ARGUMENT), "invalid backfill id", "%s",
                            "a stable id is 3 to 63 characters of [a-z0-9_.-] starting with a"
                            " letter");
            return false;
        }
    }
    for (size_t i = 0; i < in->n_ids; i++) {
        if (reg == NULL || bf_registry_find(reg, in->ids[i]) == NULL) {
            /* well-formed, so safe to name: [a-z0-9_.-], at most BF_ID_MAX bytes */
            srv_call_status(call, SC(NOT_FOUND), bf_err_str(BF_ERR_UNKNOWN_DEFINITION),
                            "this daemon has no definition for %s", in->ids[i]);
            return false;
        }
        plan->ids[plan->n++] = in->ids[i];
    }
    return true;
}

/* A page of the registry, in registration order, after the page token's definition. */
static bool preflight_page(srv_call *call, const preflight_request *in, const bf_registry *reg,
                           preflight_plan *plan)
{
    size_t total = reg != NULL ? bf_registry_count(reg) : 0, start = 0;
    if (in->page_token != NULL && in->page_token[0] != '\0') {
        while (start < total && strcmp(bf_registry_at(reg, start)->id, in->page_token) != 0)
            start++;
        if (start == total) {
            srv_call_status(call, SC(INVALID_ARGUMENT), "invalid page token", "%s", "");
            return false;
        }
        start++;
    }
    size_t page = PREFLIGHT_PAGE_MAX;
    if (in->has_page_size && in->page_size > 0 && in->page_size < PREFLIGHT_PAGE_MAX)
        page = in->page_size;
    for (size_t i = start; i < total && plan->n < page; i++)
        plan->ids[plan->n++] = bf_registry_at(reg, i)->id;
    if (start + plan->n < total)
        plan->next = plan->ids[plan->n - 1];
    return true;
}

/* Control characters become '?': the report goes to terminals (a client cleans it again). */
static void preflight_printable(char *s)
{
    for (; *s != '\0'; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
}

/* One definition. false when the answer can say nothing about it (the call fails). */
static bool preflight_one(srv_call *call, bf_engine *e, const char *id, preflight_slot *slot)
{
    slot->report[0] = '\0';
    bf_err err = bf_preflight(e, id, slot->report, sizeof slot->report);
    if (err == BF_ERR_UNAVAILABLE || err == BF_ERR_NOMEM) {
        srv_call_status(call, srv_code_from_err(err), bf_err_str(err), "%s",
                        err == BF_ERR_NOMEM ? "" : "the database cannot be reached now");
        return false;
    }
    preflight_printable(slot->report);
    preflight_result *m = &slot->msg;
    buzz__backfill__v1__preflight_result__init(m);
    m->id = (char *)id;
    m->has_ok = true;
    m->ok = err == BF_OK;
    if (err != BF_OK) {
        m->has_code = true;
        m->code = srv_code_from_err(err);
        m->message = (char *)bf_err_str(err);
    }
    m->report = slot->report[0] != '\0' ? slot->report : NULL;
    return true;
}

void srv_admin_preflight(const preflight_request *in,
                         Buzz__Backfill__V1__PreflightResponse_Closure closure, void *closure_data)
{
    srv_call *call = SRV_CALL(closure_data);
    const bf_registry *reg = call->session->ctx->registry;
    preflight_plan plan = {.n = 0};
    bool planned = in->n_ids > 0 ? preflight_named(call, in, reg, &plan)
                                 : preflight_page(call, in, reg, &plan);
    if (!planned) {
        closure(NULL, closure_data);
        return;
    }
    bf_engine *e = NULL;
    if (plan.n > 0 && srv_session_engine(call->session, &e) != BF_OK) {
        srv_call_status(call, SC(UNAVAILABLE), bf_err_str(BF_ERR_UNAVAILABLE), "%s",
                        "the database cannot be reached now");
        closure(NULL, closure_data);
        return;
    }
    preflight_slot *slots = calloc(plan.n > 0 ? plan.n : 1, sizeof *slots);
    preflight_result **ptrs = calloc(plan.n > 0 ? plan.n : 1, sizeof *ptrs);
    bool answered = slots != NULL && ptrs != NULL;
    if (!answered)
        srv_call_status(call, SC(RESOURCE_EXHAUSTED), bf_err_str(BF_ERR_NOMEM), NULL);
    for (size_t i = 0; answered && i < plan.n; i++) {
        if (srv_call_remaining_us(call) <= 0) {
            srv_call_status(call, SC(DEADLINE_EXCEEDED), "deadline exceeded",
                            "%zu of %zu definitions were checked in time: name fewer ids, or"
                            " allow more time",
                            i, plan.n);
            answered = false;
        } else {
            answered = preflight_one(call, e, plan.ids[i], &slots[i]);
            ptrs[i] = &slots[i].msg;
        }
    }
    if (answered) {
        Buzz__Backfill__V1__PreflightResponse resp = BUZZ__BACKFILL__V1__PREFLIGHT_RESPONSE__INIT;
        resp.n_results = plan.n;
        resp.results = ptrs;
        resp.next_page_token = (char *)plan.next;
        closure(&resp, closure_data);
    } else {
        closure(NULL, closure_data);
    }
    free(ptrs);
    free(slots);
}
