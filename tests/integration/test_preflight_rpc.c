/*
 * test_preflight_rpc.c - Admin.Preflight (server/src/admin/admin_preflight.c) and `buzzctl
 * preflight` (client/src/buzzctl_preflight.c) against a real buzz-backfilld with three definition
 * files: pfr.items.good_v1 and pfr.items.other_v1 over a table keyed by its primary key, and
 * pfr.events.noindex_v1 over 20,000 rows whose key (ts, eid) is unique (eid is) but served by
 * no index in key order.
 *
 *   results     Preflight of [noindex, good]: one result per ID in request order; good passes
 *               with its index named, noindex fails typed (FAILED_PRECONDITION, "prerequisite
 *               not met") with the CREATE INDEX that would serve the key and no row value.
 *               Guard: preflight_one's per-definition result (a failure in the body, not the
 *               call; with it returning the engine error for the call, the answer is not OK).
 *   pages       no IDs, page_size 2: two definitions in registration order and a page token,
 *               then the third and none; a page token no definition has is INVALID_ARGUMENT.
 *               Guard: preflight_page's page bound (without it the first page holds all three).
 *   bad ids     an ID the daemon has no definition for is NOT_FOUND naming it, and nothing is
 *               answered for the others; a malformed ID and 65 IDs are INVALID_ARGUMENT.
 *               Guards: preflight_named's registry check (without it the unknown ID is a failed
 *               result in an OK answer) and its cap on IDs (without it 65 are checked).
 *   refused     no token on tcp is UNAUTHENTICATED; a token with control and validate but not
 *               read is PERMISSION_DENIED ("missing capability: read"); the ipc listener's
 *               boundary authority passes. Guard: the read capability of Preflight in admin.c's
 *               admin_policies (with 0 there the token without read is answered OK).
 *   buzzctl     the binary: one ID (exit 0, "ok    ID: index ..."), every definition (exit 1,
 *               the FAIL line with the CREATE INDEX), --json (one document, exit 1), an unknown
 *               ID (exit 2, as `buzz-backfilld preflight`), no token and no read (exit 4), no
 *               server (exit 6); after the CREATE INDEX the same daemon passes every one (exit
 *               0): the answer is read from the database on every call. Guard: the exit code
 *               of buzzctl_preflight.c (1 for a failed definition, 2 for NOT_FOUND).
 *
 * Each guard above was removed once and this suite failed where named (see the commit).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "bt.h"
#include "ctl_harness.h"
#include "daemon.h"

#define GOOD    "pfr.items.good_v1"
#define OTHER   "pfr.items.other_v1"
#define NOINDEX "pfr.events.noindex_v1"

typedef Buzz__Backfill__V1__PreflightRequest pf_req;
typedef Buzz__Backfill__V1__PreflightResponse pf_resp;
typedef Buzz__Backfill__V1__PreflightResult pf_result;

static PGconn *pg;
static bd_daemon d;
static int passed; /* tests that passed: the daemon's log is kept unless all did */

static const char good_def[] = "id = " GOOD "\n"
                               "table = public.pfr_items\n"
                               "key = id bigint\n"
                               "batch_size = 100\n"
                               "needs_repair = t.fixed IS NULL\n"
                               "update_set = fixed = t.val * 2\n"
                               "postcondition = t.fixed = t.val * 2\n";

static const char other_def[] = "id = " OTHER "\n"
                                "table = public.pfr_items\n"
                                "key = id bigint\n"
                                "batch_size = 50\n"
                                "needs_repair = t.counter = 0\n"
                                "update_set = counter = 1\n"
                                "postcondition = t.counter = 1\n";

static const char noindex_def[] = "id = " NOINDEX "\n"
                                  "table = public.pfr_events\n"
                                  "key = ts timestamptz, eid bytea\n"
                                  "batch_size = 100\n"
                                  "needs_repair = t.fixed IS NULL\n"
                                  "update_set = fixed = t.val * 2\n"
                                  "postcondition = t.fixed = t.val * 2\n";

static int setup(void **state)
{
    (void)state;
    pg = bd_suite_open("pfr");
    bt_make_items(pg, "pfr_items", 200);
    bt_exec(pg, "CREATE TABLE pfr_events (ts timestamptz NOT NULL, eid bytea NOT NULL UNIQUE,"
                " val integer, fixed integer);"
                "INSERT INTO pfr_events (ts, eid, val)"
                " SELECT timestamptz '2024-01-01 00:00:00+00' + (g / 25) * interval '1 s',"
                "  decode(md5(g::text), 'hex'), g FROM generate_series(1, 20000) g;"
                "ANALYZE pfr_events");
    /* registration order is the order of the directory's files by name */
    bd_def_file("1-good.def", good_def);
    bd_def_file("2-noindex.def", noindex_def);
    bd_def_file("3-other.def", other_def);
    snprintf(ch_dir, sizeof ch_dir, "%s", bd_dir());
    bd_options o = bd_defaults();
    o.auto_migrate = true;
    o.workers = 0;
    o.extra = bd_defs_extra();
    bd_start(&d, &o);
    bd_wait_registered(pg, 3);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bd_suite_close(&d, pg, passed != 5);
    return 0;
}

/* Admin.Preflight of ids (n of them; 0: every definition, one page) */
static int preflight(bfc_client *c, const char *const *ids, size_t n, pf_resp **out)
{
    pf_req req = BUZZ__BACKFILL__V1__PREFLIGHT_REQUEST__INIT;
    req.n_ids = n;
    req.ids = (char **)ids;
    return bd_call(c, &buzz__backfill__v1__admin__descriptor, "Preflight", &req.base,
                   (ProtobufCMessage **)out);
}

static const char *read_token(void)
{
    return bd_token(BFT_CAP_READ);
}

/* ---- the RPC ------------------------------------------------------------------------------ */

static void test_results(void **state)
{
    (void)state;
    bfc_client *c = bd_client(d.tcp_url, read_token(), 0, 0);
    const char *ids[] = {NOINDEX, GOOD};
    pf_resp *r = NULL;
    assert_int_equal(preflight(c, ids, 2, &r), BD_SC(OK));
    assert_non_null(r);
    assert_int_equal(r->n_results, 2);
    assert_null(r->next_page_token);

    const pf_result *bad = r->results[0], *good = r->results[1];
    printf("%s: %s\n%s: %s\n", bad->id, bad->report, good->id, good->report);
    assert_string_equal(bad->id, NOINDEX);
    assert_true(bad->has_ok && !bad->ok);
    assert_true(bad->has_code);
    assert_int_equal(bad->code, BD_SC(FAILED_PRECONDITION));
    assert_string_equal(bad->message, "prerequisite not met");
    assert_non_null(strstr(bad->report, "no index serves the key (ts, eid) of public.pfr_events"));
    assert_non_null(
        strstr(bad->report, "CREATE INDEX CONCURRENTLY ON public.pfr_events (ts, eid)"));
    assert_null(strstr(bad->report, "2024-")); /* no key value */

    assert_string_equal(good->id, GOOD);
    assert_true(good->has_ok && good->ok);
    assert_false(good->has_code);
    assert_null(good->message);
    assert_non_null(strstr(good->report, "index pfr_items_pkey"));
    bd_free(r);
    bfc_close(c);
    passed++;
}

static void test_pages(void **state)
{
    (void)state;
    bfc_client *c = bd_client(d.tcp_url, read_token(), 0, 0);
    pf_req req = BUZZ__BACKFILL__V1__PREFLIGHT_REQUEST__INIT;
    req.has_page_size = true;
    req.page_size = 2;
    pf_resp *r = NULL;
    assert_int_equal(bd_call(c, &buzz__backfill__v1__admin__descriptor, "Preflight", &req.base,
                             (ProtobufCMessage **)&r),
                     BD_SC(OK));
    assert_int_equal(r->n_results, 2);
    assert_string_equal(r->results[0]->id, GOOD);
    assert_string_equal(r->results[1]->id, NOINDEX);
    assert_non_null(r->next_page_token);
    assert_string_equal(r->next_page_token, NOINDEX);

    char token[80];
    snprintf(token, sizeof token, "%s", r->next_page_token);
    bd_free(r);
    r = NULL;
    req.page_token = token;
    assert_int_equal(bd_call(c, &buzz__backfill__v1__admin__descriptor, "Preflight", &req.base,
                             (ProtobufCMessage **)&r),
                     BD_SC(OK));
    assert_int_equal(r->n_results, 1);
    assert_string_equal(r->results[0]->id, OTHER);
    assert_true(r->results[0]->ok);
    assert_null(r->next_page_token);
    bd_free(r);
    r = NULL;

    req.page_token = (char *)"pfr.nope_v1";
    assert_int_equal(bd_call(c, &buzz__backfill__v1__admin__descriptor, "Preflight", &req.base,
                             (ProtobufCMessage **)&r),
                     BD_SC(INVALID_ARGUMENT));
    assert_null(r);
    bfc_close(c);
    passed++;
}

static void test_bad_ids(void **state)
{
    (void)state;
    bfc_client *c = bd_client(d.tcp_url, read_token(), 0, 0);
    const char *unknown[] = {GOOD, "pfr.nope_v1"};
    pf_resp *r = NULL;
    assert_int_equal(preflight(c, unknown, 2, &r), BD_SC(NOT_FOUND));
    assert_null(r);
    const bfc_status *st = bfc_last_status(c);
    assert_non_null(strstr(st->detail, "no definition for pfr.nope_v1"));

    const char *malformed[] = {"Bad Id; DROP"};
    assert_int_equal(preflight(c, malformed, 1, &r), BD_SC(INVALID_ARGUMENT));
    assert_string_equal(bfc_last_status(c)->message, "invalid backfill id");
    assert_null(strstr(bfc_last_status(c)->detail, "DROP")); /* not echoed */

    const char *many[65];
    for (size_t i = 0; i < 65; i++)
        many[i] = GOOD;
    assert_int_equal(preflight(c, many, 64, &r), BD_SC(OK)); /* the cap itself */
    assert_int_equal(r->n_results, 64);
    bd_free(r);
    r = NULL;
    assert_int_equal(preflight(c, many, 65, &r), BD_SC(INVALID_ARGUMENT));
    assert_string_equal(bfc_last_status(c)->message, "too many ids");
    assert_null(r);
    bfc_close(c);
    passed++;
}

static void test_refused(void **state)
{
    (void)state;
    const char *ids[] = {GOOD};
    pf_resp *r = NULL;
    bfc_client *c = bd_client(d.tcp_url, NULL, 0, 0);
    assert_int_equal(preflight(c, ids, 1, &r), BD_SC(UNAUTHENTICATED));
    assert_null(r);
    bfc_close(c);

    c = bd_client(d.tcp_url, bd_token(BFT_CAP_CONTROL | BFT_CAP_VALIDATE | BFT_CAP_READINESS), 0,
                  0);
    assert_int_equal(preflight(c, ids, 1, &r), BD_SC(PERMISSION_DENIED));
    assert_null(r);
    assert_non_null(strstr(bfc_last_status(c)->detail, "missing capability: read"));
    bfc_close(c);

    c = bd_client(d.ipc_url, NULL, 0, 0); /* boundary authority */
    assert_int_equal(preflight(c, ids, 1, &r), BD_SC(OK));
    assert_true(r->results[0]->ok);
    bd_free(r);
    bfc_close(c);
    passed++;
}

/* ---- buzzctl ------------------------------------------------------------------------------ */

/* buzzctl --url url [--token token] args... */
static void ctl(ctl_run *r, const char *url, const char *token, const char *const *args)
{
    const char *argv[32];
    size_t n = 0;
    argv[n++] = "--url";
    argv[n++] = url;
    if (token != NULL) {
        argv[n++] = "--token";
        argv[n++] = token;
    }
    for (size_t i = 0; args[i] != NULL && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    ctl_start(r, argv);
    ctl_finish(r);
    printf("buzzctl %s: exit %d\n%s%s", args[0], r->status, r->out, r->err);
}

static void test_buzzctl(void **state)
{
    (void)state;
    const char *token = read_token();
    ctl_run r;

    ctl(&r, d.tcp_url, token, (const char *[]){"preflight", GOOD, NULL});
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "ok    " GOOD ": index pfr_items_pkey"));
    assert_null(strstr(r.out, NOINDEX));
    ctl_free(&r);

    ctl(&r, d.tcp_url, token, (const char *[]){"preflight", NULL});
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.out, "ok    " GOOD ": "));
    assert_non_null(strstr(r.out, "ok    " OTHER ": "));
    assert_non_null(strstr(r.out, "FAIL  " NOINDEX ": prerequisite not met: no index serves the"
                                  " key (ts, eid)"));
    assert_non_null(strstr(r.out, "CREATE INDEX CONCURRENTLY ON public.pfr_events (ts, eid)"));
    ctl_free(&r);

    ctl(&r, d.tcp_url, token, (const char *[]){"preflight", "--json", NULL});
    assert_int_equal(r.status, 1);
    struct json_object *doc = json_tokener_parse(r.out), *results = NULL;
    assert_non_null(doc);
    assert_true(json_object_object_get_ex(doc, "results", &results));
    assert_int_equal(json_object_array_length(results), 3);
    struct json_object *bad = json_object_array_get_idx(results, 1), *v = NULL;
    assert_true(json_object_object_get_ex(bad, "code", &v));
    assert_string_equal(json_object_get_string(v), "FAILED_PRECONDITION");
    assert_true(json_object_object_get_ex(bad, "ok", &v));
    assert_false(json_object_get_boolean(v));
    json_object_put(doc);
    ctl_free(&r);

    ctl(&r, d.tcp_url, token, (const char *[]){"preflight", GOOD, "pfr.nope_v1", NULL});
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "no definition for pfr.nope_v1"));
    assert_string_equal(r.out, "");
    ctl_free(&r);

    ctl(&r, d.tcp_url, NULL, (const char *[]){"preflight", GOOD, NULL});
    assert_int_equal(r.status, 4);
    ctl_free(&r);
    ctl(&r, d.tcp_url, bd_token(BFT_CAP_CONTROL), (const char *[]){"preflight", NULL});
    assert_int_equal(r.status, 4);
    assert_non_null(strstr(r.err, "missing capability: read"));
    ctl_free(&r);

    char nowhere[128];
    snprintf(nowhere, sizeof nowhere, "ipc://%s/nobody.sock", bd_dir());
    ctl(&r, nowhere, token, (const char *[]){"--timeout", "500", "preflight", NULL});
    assert_int_equal(r.status, 6);
    ctl_free(&r);

    /* the fix the report names: the same daemon now passes every definition */
    bt_exec(pg, "CREATE INDEX pfr_events_ts_eid ON pfr_events (ts, eid)");
    ctl(&r, d.tcp_url, token, (const char *[]){"preflight", NULL});
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "ok    " NOINDEX ": index pfr_events_ts_eid"));
    ctl_free(&r);
    passed++;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_results), cmocka_unit_test(test_pages),
        cmocka_unit_test(test_bad_ids), cmocka_unit_test(test_refused),
        cmocka_unit_test(test_buzzctl),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
