/*
 * conformance_11_explicit_validation.c - spec conformance test 11, "Explicit validation", the
 * API side: a real buzz-backfilld process, Admin.Validate and Admin.Get through the client
 * library over tcp:// with capability tokens.
 *
 * A small backfill is run to completion by the daemon's worker; the completed row holds no
 * claim. Then:
 *   success       Validate answers SUCCESS (evaluated state completed, no completion driven),
 *                 Get shows it as last_validation with the request ID, the audit has the row
 *                 (actor, authority, stable ID, evaluated lifecycle, bounded outcome), and
 *                 nothing else moved: no claim (also while the validation is in flight), the
 *                 same generation, lifecycle, bound, checkpoint, progress and completion, and
 *                 the same target rows;
 *   failure       one target row corrupted by direct SQL on the target table: FAILURE with a
 *                 bounded diagnostic; the completed row stays completed and immutable;
 *   current-state a pending row answers CURRENT_STATE without running; a second request while
 *                 a first one is held on a barrier inside the validation (the postcondition
 *                 calls bt_barrier(1101)) answers CURRENT_STATE "coalesced" and the first then
 *                 answers SUCCESS;
 *   unauthorized  without the validate capability or without a token: refused, no body,
 *                 audited, the recorded validation unchanged;
 *   duplicate     the same request ID again returns the original outcome (replayed), even when
 *                 the data changed since: it is not run again;
 *   lost reply    a client gives up while its validation is held; retrying the same request ID
 *                 meanwhile answers a correlated CURRENT_STATE, and after the validation ends
 *                 the retry recovers the original SUCCESS;
 *   read-only     a validation whose SQL tries to write (public.c11_probe() calls nextval when
 *                 c11_ctl.sneaky is set) does not succeed and writes nothing.
 *
 * Guards proved (removing one fails a case here):
 *   - serialization: the per-ID advisory lock of engine/src/validate.c bf__validation_lock()
 *     (without it the concurrent request runs too, waits on the barrier, and the client
 *     times out instead of answering "coalesced");
 *   - the read-only validation transaction (bf__begin(e, true) / transaction_read_only in
 *     bf__validation_run): without it the probe's nextval escapes and validation succeeds;
 *   - the completed-row guard: completion only of a validating row at the read generation
 *     (validate_run's "state == BF_STATE_VALIDATING", the completion UPDATE's "state =
 *     'validating'"): without them revalidating a completed row tries to complete it again
 *     and the answer or completed_at changes (the guard_1_completed trigger, which would
 *     refuse that write too, is proved on its own by test_db_guards).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "bt.h"
#include "daemon.h"

#define ID        "c11.items_v1"
#define PENDING   "c11.pending_v1"
#define BARRIER   1101
#define OK        BD_SC(OK)
#define V_SUCCESS BUZZ__BACKFILL__V1__VALIDATION_OUTCOME__SUCCESS
#define V_FAILURE BUZZ__BACKFILL__V1__VALIDATION_OUTCOME__FAILURE
#define V_CURRENT BUZZ__BACKFILL__V1__VALIDATION_OUTCOME__CURRENT_STATE

static bd_daemon d;
static PGconn *pg;
static PGconn *holder; /* holds barrier 1101 */
static char validator[BFT_TOKEN_MAX + 1];
static char *immutable; /* the completed row's execution state */
static char *target;    /* the target rows */
static bool all_passed;

/* ---- helpers ----------------------------------------------------------------------------- */

static char *immutable_text(const char *id)
{
    char *s = bt_text(pg,
                      "SELECT concat_ws('|', state, bound::text, bound_empty, checkpoint::text,"
                      " generation, coalesce(claim_owner, 'no claim'), claim_expires_at,"
                      " rows_committed, batches_committed, started_at, last_progress_at,"
                      " completed_at, attempts, error_class)"
                      " FROM buzz_backfill.backfill WHERE id = '%s'",
                      id);
    assert_non_null(s);
    return s;
}

static char *target_text(void)
{
    return bt_text(pg, "SELECT md5(string_agg(id || ':' || coalesce(fixed, -1) || ':' || counter,"
                       " ',' ORDER BY id)) FROM c11_items");
}

/* The completed row and the target rows are exactly as recorded after completion. */
static void assert_untouched(void)
{
    char *now = immutable_text(ID);
    assert_string_equal(now, immutable);
    free(now);
    char *t = target_text();
    assert_string_equal(t, target);
    free(t);
}

static bfc_client *client(int timeout_ms)
{
    return bd_client(d.tcp_url, validator, timeout_ms, -1);
}

/* Validate id; asserts the code; returns the answer (OK always has one). */
static bd_validate_resp *validate(bfc_client *c, const char *id, int outcome)
{
    bd_validate_resp *r = NULL;
    int code = bd_validate(c, id, &r);
    if (code != OK)
        fail_msg("Validate %s: code %d (%s: %s)", id, code, bfc_last_status(c)->message,
                 bfc_last_status(c)->detail);
    assert_non_null(r);
    assert_true(r->has_outcome);
    if ((int)r->outcome != outcome)
        fail_msg("Validate %s: outcome %d (%s), want %d", id, r->outcome,
                 r->detail ? r->detail : "", outcome);
    assert_true(r->has_completed);
    assert_false(r->completed); /* diagnostic: never drives a completion here */
    assert_non_null(r->detail);
    assert_true(strlen(r->detail) < BF_DIAG_MAX);
    return r;
}

/* The audit row of a validation request: "<prior>|<result>|<generation>|<outcome>". */
static char *audit_of(const char *request_id)
{
    assert_int_equal(
        bt_int(pg, "SELECT count(*) FROM buzz_backfill.audit WHERE request_id = '%s'", request_id),
        1);
    return bt_text(pg,
                   "SELECT action || '|' || backfill_id || '|' || coalesce(actor, '-') || '|' ||"
                   " authority || '|' || coalesce(prior_state, '-') || '|' ||"
                   " coalesce(result_state, '-') || '|' || coalesce(generation::text, '-') ||"
                   " '|' || outcome FROM buzz_backfill.audit WHERE request_id = '%s'",
                   request_id);
}

typedef struct held_call {
    const char *rid; /* pinned request ID or NULL */
    int timeout_ms;
    int code;
    int outcome;
} held_call;

static void *held_main(void *p)
{
    held_call *h = p;
    bfc_client *c = NULL;
    bfc_options opts = {.token = validator, .timeout_ms = h->timeout_ms, .retries = -1};
    h->code = -2;
    if (bfc_open(&c, d.tcp_url, &opts, NULL, 0) != BF_OK)
        return NULL;
    if (h->rid != NULL) {
        uint8_t id[16];
        for (int i = 0; i < 16; i++) {
            unsigned v = 0;
            sscanf(h->rid + 2 * i, "%2x", &v);
            id[i] = (uint8_t)v;
        }
        bfc_set_next_request_id(c, id);
    }
    Buzz__Backfill__V1__ValidateRequest req = BUZZ__BACKFILL__V1__VALIDATE_REQUEST__INIT;
    req.id = ID;
    ProtobufCMessage *out = NULL;
    (void)bfc_call(c, &buzz__backfill__v1__admin__descriptor, "Validate", &req.base, &out, NULL);
    h->code = bfc_last_status(c)->answered ? bfc_last_status(c)->code : -1;
    h->outcome = out ? (int)((bd_validate_resp *)out)->outcome : 0;
    bd_free(out);
    bfc_close(c);
    return NULL;
}

/* ---- setup: a completed row ------------------------------------------------------------- */

static int setup(void **state)
{
    pg = bd_suite_open("c11");
    bt_install_barrier(pg);
    bt_make_items(pg, "c11_items", 300);
    bt_exec(pg, "CREATE TABLE c11_ctl (sneaky boolean NOT NULL);"
                "INSERT INTO c11_ctl VALUES (false);"
                "CREATE SEQUENCE c11_probe_seq;"
                "CREATE FUNCTION public.c11_probe() RETURNS boolean LANGUAGE plpgsql AS $$"
                " BEGIN IF (SELECT sneaky FROM public.c11_ctl) THEN"
                " PERFORM nextval('public.c11_probe_seq'); END IF; RETURN true; END $$");
    holder = bt_connect();
    bd_mint(validator, sizeof validator,
            &(bd_token_spec){.actor = "validator@test", .caps = BFT_CAP_VALIDATE | BFT_CAP_READ},
            NULL);
    bd_options o = bd_defaults();
    o.auto_migrate = true;
    o.definitions = "c11";
    o.workers = 1;
    bd_start(&d, &o);
    return 0;
}

static int teardown(void **state)
{
    PQfinish(holder);
    free(immutable);
    free(target);
    bd_suite_close(&d, pg, !all_passed);
    return 0;
}

static void test_completed_row_without_claim(void **state)
{
    bfc_client *ipc = bd_client(d.ipc_url, NULL, 0, 0);
    bd_wait_registered(pg, 2); /* startup migrates and registers */
    assert_int_equal(bd_control(ipc, "Start", ID, NULL), OK);
    bd_get_resp *g = bd_wait_state(ipc, ID, BD_ST(COMPLETED));
    assert_null(g->backfill->claim);
    assert_int_equal(g->backfill->progress->rows_committed, 300);
    assert_true(g->backfill->times->has_completed_at_us);
    bd_free(g);
    bfc_close(ipc);
    immutable = immutable_text(ID);
    target = target_text();
    assert_non_null(strstr(immutable, "no claim"));
}

/* ---- success, failure ------------------------------------------------------------------- */

static void test_success_is_recorded_and_changes_nothing(void **state)
{
    long long gen = bt_int(pg, "SELECT generation FROM buzz_backfill.backfill WHERE id = '%s'", ID);
    bfc_client *c = client(0);
    bd_validate_resp *r = validate(c, ID, V_SUCCESS);
    assert_int_equal(r->evaluated_state, BD_ST(COMPLETED));
    assert_false(r->replayed);
    assert_int_equal(r->backfill->state, BD_ST(COMPLETED));
    bd_free(r);
    char rid[33];
    snprintf(rid, sizeof rid, "%s", bd_request_id(c));
    assert_untouched();

    /* persisted: Get shows the typed outcome, its time and its request */
    bd_get_resp *g = bd_get(c, ID);
    Buzz__Backfill__V1__Validation *v = g->backfill->last_validation;
    assert_non_null(v);
    assert_int_equal(v->outcome, V_SUCCESS);
    assert_true(v->has_at_us);
    assert_string_equal(v->request_id, rid);
    assert_null(g->backfill->claim);
    bd_free(g);

    /* audited with actor, authority, stable ID, evaluated lifecycle, bounded outcome */
    char *a = audit_of(rid);
    char want[256];
    snprintf(want, sizeof want,
             "validate|" ID "|validator@test|token kid=" BD_KID "|completed|completed|%lld|success",
             gen);
    assert_memory_equal(a, want, strlen(want));
    free(a);
    bfc_close(c);
}

static void test_failure_on_corrupted_target(void **state)
{
    bt_exec(pg, "UPDATE c11_items SET fixed = -1 WHERE id = 150"); /* target table only */
    free(target);
    target = target_text();
    bfc_client *c = client(0);
    bd_validate_resp *r = validate(c, ID, V_FAILURE);
    char rid[33];
    snprintf(rid, sizeof rid, "%s", bd_request_id(c));
    assert_int_equal(r->evaluated_state, BD_ST(COMPLETED));
    assert_non_null(strstr(r->detail, "1 of 300 rows through the bound still need repair"));
    assert_int_equal(r->backfill->state, BD_ST(COMPLETED));
    bd_free(r);
    assert_untouched();
    bd_get_resp *g = bd_get(c, ID);
    assert_int_equal(g->backfill->last_validation->outcome, V_FAILURE);
    assert_string_equal(g->backfill->last_validation->request_id, rid);
    assert_int_equal(g->backfill->state, BD_ST(COMPLETED));
    bd_free(g);
    char *a = audit_of(rid);
    assert_non_null(strstr(a, "|completed|completed|"));
    assert_non_null(strstr(a, "failure"));
    free(a);
    /* repaired by the application: validation succeeds again, still nothing moved */
    bt_exec(pg, "UPDATE c11_items SET fixed = val * 2 WHERE id = 150");
    free(target);
    target = target_text();
    bd_free(validate(c, ID, V_SUCCESS));
    assert_untouched();
    bfc_close(c);
}

/* ---- current-state ---------------------------------------------------------------------- */

static void test_pending_answers_current_state(void **state)
{
    char *before = immutable_text(PENDING);
    bfc_client *c = client(0);
    bd_validate_resp *r = validate(c, PENDING, V_CURRENT);
    assert_int_equal(r->evaluated_state, BD_ST(PENDING));
    assert_non_null(strstr(r->detail, "pending"));
    bd_free(r);
    char *after = immutable_text(PENDING);
    assert_string_equal(before, after);
    char *a = audit_of(bd_request_id(c));
    assert_non_null(strstr(a, "|pending|pending|"));
    free(a);
    free(before);
    free(after);
    bfc_close(c);
}

static void test_concurrent_request_is_coalesced(void **state)
{
    bt_lock(holder, BARRIER);
    held_call first = {.timeout_ms = 60000};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, held_main, &first), 0);
    bt_wait_waiters(pg, BARRIER, 1); /* the first validation is inside, holding its lock */
    assert_untouched();              /* no claim, no generation while it runs */

    bfc_client *c = bd_client(d.tcp_url, validator, 10000, -1);
    bd_validate_resp *r = validate(c, ID, V_CURRENT);
    assert_non_null(strstr(r->detail, "coalesced"));
    assert_int_equal(r->evaluated_state, BD_ST(COMPLETED));
    bd_free(r);
    char *a = audit_of(bd_request_id(c));
    assert_non_null(strstr(a, "coalesced"));
    free(a);

    bt_unlock(holder, BARRIER);
    pthread_join(th, NULL);
    assert_int_equal(first.code, OK);
    assert_int_equal(first.outcome, V_SUCCESS);
    assert_untouched();
    bfc_close(c);
}

/* ---- unauthorized ----------------------------------------------------------------------- */

static void refused(const char *token, int code, const char *authority, const char *actor)
{
    char *before = bt_text(pg,
                           "SELECT row_to_json(b)::text FROM buzz_backfill.backfill b"
                           " WHERE id = '%s'",
                           ID);
    bfc_client *c = bd_client(d.tcp_url, token, 0, -1);
    bd_validate_resp *r = NULL;
    assert_int_equal(bd_validate(c, ID, &r), code);
    assert_null(r);
    assert_false(bfc_last_status(c)->has_body);
    char *after = bt_text(pg,
                          "SELECT row_to_json(b)::text FROM buzz_backfill.backfill b"
                          " WHERE id = '%s'",
                          ID);
    assert_string_equal(before, after);
    char *a = audit_of(bd_request_id(c));
    char want[256];
    snprintf(want, sizeof want, "validate|" ID "|%s|%s|-|-|-|rejected", actor, authority);
    assert_memory_equal(a, want, strlen(want));
    free(a);
    free(before);
    free(after);
    bfc_close(c);
}

static void test_unauthorized_is_refused_and_audited(void **state)
{
    char controller[BFT_TOKEN_MAX + 1];
    bd_mint(controller, sizeof controller,
            &(bd_token_spec){.actor = "controller@test", .caps = BFT_CAP_READ | BFT_CAP_CONTROL},
            NULL);
    refused(controller, BD_SC(PERMISSION_DENIED), "token kid=" BD_KID, "controller@test");
    refused(NULL, BD_SC(UNAUTHENTICATED), "unauthenticated tcp addr=127.0.0.1", "-");
    assert_untouched();
}

/* ---- duplicate and lost response -------------------------------------------------------- */

static void test_duplicate_replays_original_outcome(void **state)
{
    const char *rid = "11111111111111111111111111111111";
    bfc_client *c = client(0);
    bd_pin(c, rid);
    bd_validate_resp *r = validate(c, ID, V_SUCCESS);
    assert_false(r->replayed);
    bd_free(r);
    /* the data changes; the same logical request still answers what it answered */
    bt_exec(pg, "UPDATE c11_items SET fixed = -1 WHERE id = 20");
    bd_pin(c, rid);
    r = validate(c, ID, V_SUCCESS);
    assert_true(r->replayed);
    bd_free(r);
    /* a new request does run */
    r = validate(c, ID, V_FAILURE);
    assert_false(r->replayed);
    bd_free(r);
    bt_exec(pg, "UPDATE c11_items SET fixed = val * 2 WHERE id = 20");
    assert_untouched();
    bfc_close(c);
}

static void test_lost_response_is_recovered(void **state)
{
    const char *rid = "22222222222222222222222222222222";
    bt_lock(holder, BARRIER);
    held_call lost = {.rid = rid, .timeout_ms = 300};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, held_main, &lost), 0);
    pthread_join(th, NULL);
    assert_int_equal(lost.code, -1); /* the client gave up: no answer */
    bt_wait_waiters(pg, BARRIER, 1); /* its validation still runs on the server */

    /* retried while it runs: a current-state answer correlated with the request */
    bfc_client *c = client(10000);
    bd_pin(c, rid);
    bd_validate_resp *r = validate(c, ID, V_CURRENT);
    assert_non_null(strstr(r->detail, "still running"));
    bd_free(r);

    bt_unlock(holder, BARRIER);
    for (int i = 0; i < 6000; i++) {
        if (bt_int(pg,
                   "SELECT count(*) FROM buzz_backfill.request WHERE request_id = '%s'"
                   " AND err IS NOT NULL",
                   rid) == 1)
            break;
        bd_sleep_ms(5);
    }
    bd_pin(c, rid);
    r = validate(c, ID, V_SUCCESS);
    assert_true(r->replayed);
    bd_free(r);
    assert_untouched();
    bfc_close(c);
}

/* ---- read-only -------------------------------------------------------------------------- */

static void test_validation_cannot_write(void **state)
{
    char *seq = bt_text(pg, "SELECT last_value || ',' || is_called FROM c11_probe_seq");
    bt_exec(pg, "UPDATE c11_ctl SET sneaky = true");
    bfc_client *c = client(0);
    bd_validate_resp *r = NULL;
    assert_int_equal(bd_validate(c, ID, &r), OK);
    assert_non_null(r);
    if (r->outcome == V_SUCCESS)
        fail_msg("a validation that writes succeeded: %s", r->detail ? r->detail : "");
    assert_int_equal(r->outcome, V_CURRENT);
    assert_non_null(strstr(r->detail, "could not complete"));
    bd_free(r);
    char *seq_after = bt_text(pg, "SELECT last_value || ',' || is_called FROM c11_probe_seq");
    assert_string_equal(seq, seq_after);
    bt_exec(pg, "UPDATE c11_ctl SET sneaky = false");
    assert_untouched();
    free(seq);
    free(seq_after);
    bfc_close(c);
    bd_stop(&d);
    all_passed = true;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_completed_row_without_claim),
        cmocka_unit_test(test_success_is_recorded_and_changes_nothing),
        cmocka_unit_test(test_failure_on_corrupted_target),
        cmocka_unit_test(test_pending_answers_current_state),
        cmocka_unit_test(test_concurrent_request_is_coalesced),
        cmocka_unit_test(test_unauthorized_is_refused_and_audited),
        cmocka_unit_test(test_duplicate_replays_original_outcome),
        cmocka_unit_test(test_lost_response_is_recovered),
        cmocka_unit_test(test_validation_cannot_write),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
