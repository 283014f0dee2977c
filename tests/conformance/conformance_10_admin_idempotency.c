/*
 * conformance_10_admin_idempotency.c - spec conformance test 10, "Admin idempotency", through a
 * real buzz-backfilld process and the client library (request IDs pinned with
 * bfc_set_next_request_id, as a CLI's --request-id or a client's retry does).
 *
 *   duplicate     Start twice with one request ID: the second answer is the stored outcome
 *                 (replayed, ACCEPTED, the same generation); the bound is captured once (rows
 *                 added to the source after the first Start do not move it); one transition
 *                 and one accepted audit row.
 *   concurrent    N clients send Start with one request ID while the test holds the backfill
 *                 row's lock, so every request is inside the server at once (the test waits
 *                 until N backends wait for a lock): one transition, N identical outcomes, one
 *                 of them original and the others replayed.
 *   operators     two operators (distinct tokens) pause at once, then resume at once, with
 *                 their own request IDs: one ACCEPTED and one CONVERGED each time, the row
 *                 ends in the requested state, the generation moves once per change.
 *   lost reply    a Start whose client gives up before the server answers (its deadline is
 *                 shorter than the test's hold on the row): the transition commits, the
 *                 reply is dropped; retrying with the same request ID returns the original
 *                 outcome (replayed) with no second transition and no reused generation.
 *   conflict      Start of a running row: FAILED_PRECONDITION with the current Backfill.
 *   reuse         a request ID reused for another action, or the same action on another ID:
 *                 INVALID_ARGUMENT, no body, no change.
 * The daemon runs no workers, so rows move only by the controls under test.
 *
 * Guard proved: the request record and the transition commit in one transaction
 * (engine/src/actions.c bf_action_apply: bf__request_begin, the transition, the audit row and
 * bf__request_finish between one bf__begin and one bf__commit; the request INSERT ... ON
 * CONFLICT makes a concurrent duplicate wait for that commit). Committing the request record
 * in its own transaction lets concurrent duplicates each run the transition (all but one then
 * answer FAILED_PRECONDITION instead of the replayed outcome); dropping the record makes the
 * duplicate and the lost-reply retry conflict instead of replaying.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "bt.h"
#include "daemon.h"

#define DUP       "c10.dup_v1"
#define CONC      "c10.conc_v1"
#define LOST      "c10.lost_v1"
#define OPS       "c10.ops_v1"
#define MISC      "c10.misc_v1"
#define N_CLIENTS 6
#define OK        BD_SC(OK)
#define ACCEPTED  BUZZ__BACKFILL__V1__CONTROL_OUTCOME__ACCEPTED
#define CONVERGED BUZZ__BACKFILL__V1__CONTROL_OUTCOME__CONVERGED
#define REJECTED  BUZZ__BACKFILL__V1__CONTROL_OUTCOME__REJECTED

static bd_daemon d;
static PGconn *pg;
static bool all_passed;

static int setup(void **state)
{
    pg = bd_suite_open("c10");
    bt_make_items(pg, "c10_dup", 300);
    bt_make_items(pg, "c10_items", 300);
    bd_migrate(NULL);
    bd_options o = bd_defaults();
    o.definitions = "c10";
    o.workers = 0;
    o.threads = N_CLIENTS + 2;
    bd_start(&d, &o);
    bd_wait_registered(pg, 5);
    return 0;
}

static int teardown(void **state)
{
    bd_suite_close(&d, pg, !all_passed);
    return 0;
}

/* ---- helpers ----------------------------------------------------------------------------- */

static char *row_text(const char *id)
{
    char *s = bt_text(
        pg, "SELECT row_to_json(b)::text FROM buzz_backfill.backfill b WHERE id = '%s'", id);
    assert_non_null(s);
    return s;
}

static long long generation(const char *id)
{
    return bt_int(pg, "SELECT generation FROM buzz_backfill.backfill WHERE id = '%s'", id);
}

static long long audits(const char *id, const char *action, const char *outcome_prefix)
{
    return bt_int(pg,
                  "SELECT count(*) FROM buzz_backfill.audit WHERE backfill_id = '%s'"
                  " AND action = '%s' AND outcome LIKE '%s%%'",
                  id, action, outcome_prefix);
}

static void random_hex(char out[33])
{
    static const char hex[] = "0123456789abcdef";
    uint8_t b[16];
    bft_token_id_new(b); /* 16 random bytes */
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[32] = '\0';
}

/* The test takes the backfill row's lock: every control of id waits inside the server. */
static PGconn *hold_row(const char *id)
{
    PGconn *h = bt_connect();
    bt_exec(h, "BEGIN");
    bt_exec(h, "SELECT 1 FROM buzz_backfill.backfill WHERE id = '%s' FOR UPDATE", id);
    return h;
}

static void release_row(PGconn *h)
{
    bt_exec(h, "COMMIT");
    PQfinish(h);
}

static void assert_control(const bd_control_resp *r, int outcome, int prior, int resulting,
                           bool replayed)
{
    assert_non_null(r);
    assert_true(r->has_outcome && r->has_prior_state && r->has_resulting_state);
    assert_int_equal(r->outcome, outcome);
    assert_int_equal(r->prior_state, prior);
    assert_int_equal(r->resulting_state, resulting);
    assert_true(r->has_replayed);
    assert_int_equal(r->replayed, replayed);
    assert_true(r->has_generation);
}

/* ---- duplicate --------------------------------------------------------------------------- */

static void test_duplicate_start(void **state)
{
    bfc_client *c = bd_client(d.ipc_url, NULL, 0, 0);
    char rid[33];
    random_hex(rid);
    bd_control_resp *first = NULL, *second = NULL;
    bd_pin(c, rid);
    assert_int_equal(bd_control(c, "Start", DUP, &first), OK);
    assert_string_equal(bd_request_id(c), rid);
    assert_control(first, ACCEPTED, BD_ST(PENDING), BD_ST(RUNNING), false);
    char *bound =
        bt_text(pg, "SELECT bound::text FROM buzz_backfill.backfill WHERE id = '%s'", DUP);
    assert_string_equal(bound, "{300}");
    char *after_first = row_text(DUP);

    /* the source grows past the bound; a repeated start must not recapture it */
    bt_exec(pg, "INSERT INTO c10_dup (id, val) SELECT g, g FROM generate_series(301, 400) g");
    bd_pin(c, rid);
    assert_int_equal(bd_control(c, "Start", DUP, &second), OK);
    assert_control(second, ACCEPTED, BD_ST(PENDING), BD_ST(RUNNING), true);
    assert_int_equal(second->generation, first->generation);
    assert_non_null(second->backfill);
    assert_string_equal(second->backfill->bound, "300");
    char *after_second = row_text(DUP);
    assert_string_equal(after_first, after_second); /* no second transition */
    assert_int_equal(audits(DUP, "start", "accepted"), 1);
    assert_int_equal(audits(DUP, "start", "replayed"), 1);
    assert_int_equal(bt_int(pg,
                            "SELECT count(*) FROM buzz_backfill.request WHERE request_id"
                            " = '%s'",
                            rid),
                     1);
    free(bound);
    free(after_first);
    free(after_second);
    bd_free(first);
    bd_free(second);
    bfc_close(c);
}

/* ---- concurrent duplicates --------------------------------------------------------------- */

typedef struct conc_arg {
    const char *url;
    const char *token;
    const char *method;
    const char *id;
    const char *rid;
    pthread_barrier_t *go;
    int code;
    bd_control_resp *resp;
} conc_arg;

static void *conc_main(void *p)
{
    conc_arg *a = p;
    /* no cmocka assertions off the main thread */
    bfc_client *c = NULL;
    bfc_options opts = {.token = a->token, .timeout_ms = 60000, .retries = -1};
    a->code = -2;
    if (bfc_open(&c, a->url, &opts, NULL, 0) != BF_OK) {
        pthread_barrier_wait(a->go);
        return NULL;
    }
    if (a->rid != NULL) {
        uint8_t id[16];
        for (int i = 0; i < 16; i++) {
            unsigned v = 0;
            sscanf(a->rid + 2 * i, "%2x", &v);
            id[i] = (uint8_t)v;
        }
        bfc_set_next_request_id(c, id);
    }
    pthread_barrier_wait(a->go);
    Buzz__Backfill__V1__ControlRequest req = BUZZ__BACKFILL__V1__CONTROL_REQUEST__INIT;
    req.id = (char *)a->id;
    ProtobufCMessage *out = NULL;
    (void)bfc_call(c, &buzz__backfill__v1__admin__descriptor, a->method, &req.base, &out, NULL);
    a->code = bfc_last_status(c)->answered ? bfc_last_status(c)->code : -1;
    a->resp = (bd_control_resp *)out;
    bfc_close(c);
    return NULL;
}

/* Run n control calls at once while the row is held; release once all n wait on a lock. */
static void run_concurrently(conc_arg *args, int n, const char *held_id)
{
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, (unsigned)n + 1);
    PGconn *h = hold_row(held_id);
    pthread_t th[N_CLIENTS];
    for (int i = 0; i < n; i++) {
        args[i].go = &go;
        assert_int_equal(pthread_create(&th[i], NULL, conc_main, &args[i]), 0);
    }
    pthread_barrier_wait(&go);
    bt_wait_lock_waiters(pg, n); /* every request is inside the server, waiting */
    release_row(h);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&go);
}

static void test_concurrent_duplicates(void **state)
{
    char rid[33];
    random_hex(rid);
    conc_arg args[N_CLIENTS];
    for (int i = 0; i < N_CLIENTS; i++)
        args[i] = (conc_arg){.url = i % 2 ? d.tcp_url : d.ipc_url,
                             .token = i % 2 ? bd_token(BFT_CAP_ALL) : NULL,
                             .method = "Start",
                             .id = CONC,
                             .rid = rid};
    long long gen_before = generation(CONC);
    run_concurrently(args, N_CLIENTS, CONC);
    int originals = 0;
    for (int i = 0; i < N_CLIENTS; i++) {
        if (args[i].code != OK)
            fail_msg("client %d: code %d", i, args[i].code);
        assert_control(args[i].resp, ACCEPTED, BD_ST(PENDING), BD_ST(RUNNING),
                       args[i].resp->replayed);
        originals += !args[i].resp->replayed;
        assert_int_equal(args[i].resp->generation, gen_before + 1);
        bd_free(args[i].resp);
    }
    assert_int_equal(originals, 1);
    assert_int_equal(generation(CONC), gen_before + 1);
    assert_int_equal(audits(CONC, "start", "accepted"), 1);
    assert_int_equal(audits(CONC, "start", "replayed"), N_CLIENTS - 1);
    assert_int_equal(audits(CONC, "start", "rejected"), 0);
}

/* ---- concurrent operators ---------------------------------------------------------------- */

static void operators(const char *method, int prior, int resulting)
{
    conc_arg args[2] = {
        {.url = d.tcp_url, .method = method, .id = OPS},
        {.url = d.tcp_url, .method = method, .id = OPS},
    };
    char alice[BFT_TOKEN_MAX + 1], bob[BFT_TOKEN_MAX + 1];
    bd_mint(alice, sizeof alice, &(bd_token_spec){.actor = "alice@ops", .caps = BFT_CAP_CONTROL},
            NULL);
    bd_mint(bob, sizeof bob, &(bd_token_spec){.actor = "bob@ops", .caps = BFT_CAP_CONTROL}, NULL);
    args[0].token = alice;
    args[1].token = bob;
    long long gen_before = generation(OPS);
    run_concurrently(args, 2, OPS);
    int accepted = 0, converged = 0;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(args[i].code, OK);
        assert_non_null(args[i].resp);
        assert_false(args[i].resp->replayed);
        assert_int_equal(args[i].resp->resulting_state, resulting);
        accepted += args[i].resp->outcome == ACCEPTED;
        converged += args[i].resp->outcome == CONVERGED;
        if (args[i].resp->outcome == ACCEPTED)
            assert_int_equal(args[i].resp->prior_state, prior);
        assert_int_equal(args[i].resp->generation, gen_before + 1);
        bd_free(args[i].resp);
    }
    assert_int_equal(accepted, 1);
    assert_int_equal(converged, 1);
    assert_int_equal(generation(OPS), gen_before + 1);
    char *st = bt_text(pg, "SELECT state FROM buzz_backfill.backfill WHERE id = '%s'", OPS);
    assert_string_equal(st, resulting == BD_ST(PAUSED) ? "paused" : "running");
    free(st);
}

static void test_concurrent_operators_converge(void **state)
{
    bfc_client *c = bd_client(d.ipc_url, NULL, 0, 0);
    assert_int_equal(bd_control(c, "Start", OPS, NULL), OK);
    bfc_close(c);
    operators("Pause", BD_ST(RUNNING), BD_ST(PAUSED));
    operators("Resume", BD_ST(PAUSED), BD_ST(RUNNING));
    operators("Pause", BD_ST(RUNNING), BD_ST(PAUSED));
    assert_int_equal(bt_int(pg,
                            "SELECT count(*) FROM buzz_backfill.audit WHERE backfill_id ="
                            " '%s' AND actor IN ('alice@ops', 'bob@ops')",
                            OPS),
                     6);
}

/* ---- a reply lost after commit ----------------------------------------------------------- */

static void test_lost_reply(void **state)
{
    char rid[33];
    random_hex(rid);
    long long gen_before = generation(LOST);
    PGconn *h = hold_row(LOST);
    /* the client waits 300 ms and sends that as its deadline; the server is held longer */
    bfc_client *c = bd_client(d.tcp_url, bd_token(BFT_CAP_CONTROL), 300, -1);
    bd_pin(c, rid);
    assert_int_equal(bd_control(c, "Start", LOST, NULL), -1);
    assert_int_equal(bfc_last_status(c)->transport, BF_ERR_TIMEOUT);
    bfc_close(c); /* nobody reads the reply */
    bt_wait_lock_waiters(pg, 1);
    release_row(h);
    /* the transition commits on the server although its reply is lost */
    for (int i = 0; i < 6000 && generation(LOST) == gen_before; i++)
        bd_sleep_ms(5);
    assert_int_equal(generation(LOST), gen_before + 1);
    assert_int_equal(bt_int(pg,
                            "SELECT count(*) FROM buzz_backfill.request WHERE request_id ="
                            " '%s' AND err IS NOT NULL",
                            rid),
                     1);
    char *committed = row_text(LOST);

    /* the retry with the same request ID learns the original outcome */
    c = bd_client(d.tcp_url, bd_token(BFT_CAP_CONTROL | BFT_CAP_READ), 0, 0);
    bd_control_resp *r = NULL;
    bd_pin(c, rid);
    assert_int_equal(bd_control(c, "Start", LOST, &r), OK);
    assert_control(r, ACCEPTED, BD_ST(PENDING), BD_ST(RUNNING), true);
    assert_int_equal(r->generation, gen_before + 1);
    bd_free(r);
    char *after = row_text(LOST);
    assert_string_equal(committed, after);
    assert_int_equal(audits(LOST, "start", "accepted"), 1);
    /* the next change gets a new generation, never the replayed one again */
    assert_int_equal(bd_control(c, "Pause", LOST, &r), OK);
    assert_true(r->generation > gen_before + 1);
    bd_free(r);
    free(committed);
    free(after);
    bfc_close(c);
}

/* ---- conflicts and reused request IDs ---------------------------------------------------- */

static void test_conflict_and_reuse(void **state)
{
    bfc_client *c = bd_client(d.ipc_url, NULL, 0, 0);
    char rid[33];
    random_hex(rid);
    bd_control_resp *r = NULL;
    bd_pin(c, rid);
    assert_int_equal(bd_control(c, "Start", MISC, &r), OK);
    long long gen = r->generation;
    bd_free(r);

    /* a conflict: the typed code and the current state in the body */
    assert_int_equal(bd_control(c, "Start", MISC, &r), BD_SC(FAILED_PRECONDITION));
    assert_non_null(r);
    assert_int_equal(r->outcome, REJECTED);
    assert_non_null(r->backfill);
    assert_string_equal(r->backfill->id, MISC);
    assert_int_equal(r->backfill->state, BD_ST(RUNNING));
    assert_int_equal(r->backfill->generation, gen);
    assert_string_equal(r->backfill->bound, "300");
    bd_free(r);
    assert_int_equal(bd_control(c, "Resume", DUP, &r), OK); /* running: converged */
    assert_int_equal(r->outcome, CONVERGED);
    bd_free(r);

    /* the request ID of the Start, reused for another action and for another backfill */
    char *before = bt_text(pg, "SELECT string_agg(row_to_json(b)::text, ',' ORDER BY id)"
                               " FROM buzz_backfill.backfill b");
    bd_pin(c, rid);
    assert_int_equal(bd_control(c, "Pause", MISC, &r), BD_SC(INVALID_ARGUMENT));
    assert_null(r);
    assert_false(bfc_last_status(c)->has_body);
    bd_pin(c, rid);
    assert_int_equal(bd_control(c, "Start", DUP, &r), BD_SC(INVALID_ARGUMENT));
    assert_null(r);
    char *after = bt_text(pg, "SELECT string_agg(row_to_json(b)::text, ',' ORDER BY id)"
                              " FROM buzz_backfill.backfill b");
    assert_string_equal(before, after);
    assert_int_equal(bt_int(pg,
                            "SELECT count(*) FROM buzz_backfill.audit WHERE request_id ="
                            " '%s' AND outcome LIKE 'rejected: invalid argument%%'",
                            rid),
                     2);
    free(before);
    free(after);
    bfc_close(c);
    bd_stop(&d);
    all_passed = true;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_duplicate_start),
        cmocka_unit_test(test_concurrent_duplicates),
        cmocka_unit_test(test_concurrent_operators_converge),
        cmocka_unit_test(test_lost_reply),
        cmocka_unit_test(test_conflict_and_reuse),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
