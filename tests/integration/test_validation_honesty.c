/*
 * test_validation_honesty.c - validation says what it found (issue 17, "honest validation"),
 * and two small lies fixed on the way, through the engine API against real PostgreSQL:
 *
 *   - totals: rows un-repaired after the batches (an old writer still running, the rollout
 *     prerequisite violated) spread over five validation chunks are counted across all of
 *     them ("2500 of 5000 rows through the bound still need repair"), not as the first
 *     chunk's count; the failed lifecycle validation is the row's latest validation (outcome
 *     failure, its detail, its time), where it used to stay "never";
 *   - an explicit validation of a backfill whose checkpoint has not reached its bound says so
 *     beside its failure ("the checkpoint has not reached the bound (running)");
 *   - an action on an ID this process defines but has not registered yet answers unavailable
 *     (retryable) and records no request, so the same request succeeds once registered;
 *   - a completed backfill whose validation failed transiently on the way (a lock timeout,
 *     retried) ends with attempts 0.
 *
 * Guards proved: validate.c bf__validation_run's counting past the first failing chunk (without
 * it: "1000 rows"), worker.c worker_fail's validation_outcome when validation_failed is set,
 * validate_run's note when the checkpoint has not reached the bound, actions.c's unavailable
 * for a defined but unregistered ID, and worker_complete's "attempts = 0".
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bt.h"

#define BARRIER 1701

static const bf_definition totals_def = {
    .id = "vh.totals_v1",
    .table = "public.vh_totals",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 100, /* validation chunks of 1000 */
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2",
};

static const bf_definition running_def = {
    .id = "vh.running_v1",
    .table = "public.vh_running",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 100,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2",
};

static const bf_definition late_def = {
    .id = "vh.late_v1",
    .table = "public.vh_late",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 100,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2",
};

/* its validation waits on the barrier (a lock timeout while it is held) */
static const bf_definition retried_def = {
    .id = "vh.retried_v1",
    .table = "public.vh_retried",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 100,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2",
    .postcondition = "t.fixed = t.val * 2 AND public.bt_barrier(1701)",
    .retry = {.max_attempts = 5, .base_ms = 1, .cap_ms = 5},
};

static PGconn *conn;

static int setup(void **state)
{
    (void)state;
    bt_db_create("validation_honesty");
    conn = bt_connect();
    bt_install_barrier(conn);
    bt_make_items(conn, "public.vh_totals", 5000);
    bt_make_items(conn, "public.vh_running", 1000);
    bt_make_items(conn, "public.vh_late", 10);
    bt_make_items(conn, "public.vh_retried", 50);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    PQfinish(conn);
    bt_db_drop();
    return 0;
}

static void test_totals_and_the_latest_validation(void **state)
{
    (void)state;
    const bf_definition *defs[] = {&totals_def};
    bf_registry *reg = bt_registry(defs, 1);
    bf_engine *e = bt_engine(reg, "vh", 30000);
    bt_set_step_batches(0);
    assert_int_equal(bf_register_all(e), BF_OK);
    assert_int_equal(bt_act(e, BF_ACTION_START, totals_def.id), BF_OK);
    bf_worker *w = bt_claimed_worker(e, totals_def.id);
    assert_int_equal(bt_step_until_not_batch(w, 1000), BF_STEP_VALIDATING);
    /* an old writer undoes every other row after the batches passed them */
    bt_exec(conn, "UPDATE public.vh_totals SET fixed = NULL WHERE id %% 2 = 0");
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_FAILED);
    bf_backfill row = bt_get(e, totals_def.id);
    printf("failed: %s / validation %s: %s\n", row.error_detail,
           bf_validation_outcome_name(row.validation), row.validation_detail);
    assert_non_null(strstr(row.error_detail, "2500 of 5000 rows through the bound still need"));
    assert_int_equal(row.validation, BF_VALIDATION_FAILURE);
    assert_non_null(strstr(row.validation_detail, "2500 of 5000 rows"));
    assert_true(row.has_validated_at);
    bf_worker_free(w);
    bf_engine_close(e);
    bf_registry_free(reg);
    bt_set_step_batches(1);
}

static void test_validate_before_the_bound(void **state)
{
    (void)state;
    const bf_definition *defs[] = {&running_def};
    bf_registry *reg = bt_registry(defs, 1);
    bf_engine *e = bt_engine(reg, "vh", 30000);
    assert_int_equal(bf_register_all(e), BF_OK);
    assert_int_equal(bt_act(e, BF_ACTION_START, running_def.id), BF_OK);
    bf_worker *w = bt_claimed_worker(e, running_def.id);
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK); /* one batch of 100 */
    assert_int_equal(info.step, BF_STEP_BATCH);
    assert_int_equal(bf_worker_release(w), BF_OK);
    bf_actor who = {.actor = "test-operator", .authority = "test", .request_id = "vh-val-1"};
    bf_action_result res;
    assert_int_equal(bf_validate(e, running_def.id, &who, &res), BF_OK);
    printf("validate: %s: %s\n", bf_validation_outcome_name(res.validation), res.detail);
    assert_int_equal(res.validation, BF_VALIDATION_FAILURE);
    assert_non_null(strstr(res.detail, "900 of 1000 rows through the bound still need repair"));
    assert_non_null(strstr(res.detail, "the checkpoint has not reached the bound (running)"));
    bf_worker_free(w);
    bf_engine_close(e);
    bf_registry_free(reg);
}

static void test_unregistered_is_unavailable(void **state)
{
    (void)state;
    const bf_definition *defs[] = {&late_def};
    bf_registry *reg = bt_registry(defs, 1);
    bf_engine *e = bt_engine(reg, "vh", 30000);
    bf_actor who = {.actor = "test-operator", .authority = "test", .request_id = "vh-start-1"};
    bf_action_result res;
    assert_int_equal(bf_action_apply(e, BF_ACTION_START, late_def.id, &who, &res),
                     BF_ERR_UNAVAILABLE);
    assert_non_null(strstr(bf_engine_diag(e), "not registered yet"));
    /* an ID no process defines is still not found */
    bf_actor who2 = {.actor = "test-operator", .authority = "test", .request_id = "vh-start-2"};
    assert_int_equal(bf_action_apply(e, BF_ACTION_START, "vh.nobody_v1", &who2, &res),
                     BF_ERR_NOT_FOUND);
    /* registered now: the same request starts it, once */
    assert_int_equal(bf_register_all(e), BF_OK);
    assert_int_equal(bf_action_apply(e, BF_ACTION_START, late_def.id, &who, &res), BF_OK);
    assert_true(res.changed);
    assert_int_equal(bt_get(e, late_def.id).state, BF_STATE_RUNNING);
    bf_engine_close(e);
    bf_registry_free(reg);
}

static void test_completed_after_a_retried_validation(void **state)
{
    (void)state;
    const bf_definition *defs[] = {&retried_def};
    bf_registry *reg = bt_registry(defs, 1);
    bf_engine *op = bt_engine(reg, "vh", 30000);
    assert_int_equal(bf_register_all(op), BF_OK);
    assert_int_equal(bt_act(op, BF_ACTION_START, retried_def.id), BF_OK);
    /* a worker whose lock waits time out quickly */
    bf_engine *we = bt_engine_timeouts(reg, "vh-worker", 30000, 20000, 100);
    bf_worker *w = bt_claimed_worker(we, retried_def.id);
    assert_int_equal(bt_step_until_not_batch(w, 100), BF_STEP_VALIDATING);
    PGconn *holder = bt_connect();
    bt_lock(holder, BARRIER);
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_RETRY);
    assert_int_equal(bt_get(op, retried_def.id).attempts, 1);
    bt_unlock(holder, BARRIER);
    PQfinish(holder);
    assert_int_equal(bt_claim_poll(w, retried_def.id, NULL, 10000), BF_OK);
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_COMPLETED);
    bf_backfill row = bt_get(op, retried_def.id);
    assert_int_equal(row.state, BF_STATE_COMPLETED);
    assert_int_equal(row.attempts, 0);
    bf_worker_free(w);
    bf_engine_close(we);
    bf_engine_close(op);
    bf_registry_free(reg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_totals_and_the_latest_validation),
        cmocka_unit_test(test_validate_before_the_bound),
        cmocka_unit_test(test_unregistered_is_unavailable),
        cmocka_unit_test(test_completed_after_a_retried_validation),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
