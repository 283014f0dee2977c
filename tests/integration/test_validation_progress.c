/*
 * test_validation_progress.c - the progress of a running validation (issue 17 item 4), read
 * through bf_get as any daemon sharing the database would read it, against real PostgreSQL:
 *
 *   - held: a worker's lifecycle validation held mid-way by a barrier in its postcondition
 *     (the row with id 120, in the third chunk of 50) shows as running, lifecycle, with the
 *     worker's owner and 50 <= rows checked < 300; released, the backfill completes and the
 *     entry is finished with all 300 rows checked;
 *   - crashed: an explicit validation in a child process, held the same way with 10 rows
 *     un-repaired, shows as running with those 10 rows needing repair; once the child is killed
 *     (SIGKILL: nothing of it runs again) its entry stops reading as running after its
 *     allowance (lease plus statement timeout past its last write), unfinished, with its last
 *     figures; a new explicit validation replaces it and finishes.
 *
 * Guards proved (each seen failing with it removed):
 *   - validate.c validation_chunks' progress_update between chunks: without it "held" reads
 *     rows_checked 0;
 *   - validate.c bf__validation_run's final progress_update(..., true): without it "held"
 *     finds the entry unfinished after the run;
 *   - backfill.c bf__row_from_result's "v_expires > out->now": without it "crashed"
 *     reads the dead validator as running until its deadline fails the test.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "bt.h"

#define BARRIER_HELD    1801
#define BARRIER_CRASHED 1802
#define ROWS            300

static const bf_definition held_def = {
    .id = "vp.held_v1",
    .table = "public.vp_held",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 100,
    .validate_chunk = 50,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2",
    .postcondition = "t.fixed IS NOT NULL AND (t.id <> 120 OR public.bt_barrier(1801))",
};

static const bf_definition crashed_def = {
    .id = "vp.crashed_v1",
    .table = "public.vp_crashed",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 100,
    .validate_chunk = 50,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2",
    .postcondition = "t.fixed IS NOT NULL AND (t.id <> 120 OR public.bt_barrier(1802))",
};

static PGconn *conn;
static bf_registry *reg;

static int setup(void **state)
{
    (void)state;
    bt_db_create("validation_progress");
    conn = bt_connect();
    bt_install_barrier(conn);
    bt_make_items(conn, "public.vp_held", ROWS);
    bt_make_items(conn, "public.vp_crashed", ROWS);
    const bf_definition *defs[] = {&held_def, &crashed_def};
    reg = bt_registry(defs, 2);
    bt_set_step_batches(0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    PQfinish(conn);
    bt_db_drop_registry(reg);
    return 0;
}

/* Start id and step a worker of e until the backfill reaches its bound (validating). */
static bf_worker *reach_validating(bf_engine *e, const char *id)
{
    assert_int_equal(bt_act(e, BF_ACTION_START, id), BF_OK);
    bf_worker *w = bt_claimed_worker(e, id);
    assert_int_equal(bt_step_until_not_batch(w, 100), BF_STEP_VALIDATING);
    return w;
}

static void test_held(void **state)
{
    (void)state;
    bf_engine *e = bt_engine(reg, "vp-worker", 30000);
    bf_engine *reader = bt_engine(reg, "vp-reader", 30000);
    assert_int_equal(bf_register_all(e), BF_OK);
    bf_worker *w = reach_validating(e, held_def.id);
    bf_backfill row = bt_get(reader, held_def.id);
    assert_false(row.validation_progress.present); /* nothing has validated it yet */

    PGconn *holder = bt_connect();
    bt_lock(holder, BARRIER_HELD);
    bt_step_thread t;
    bt_step_thread_start(&t, w, false); /* the lifecycle validation */
    bt_wait_waiters(conn, BARRIER_HELD, 1);
    row = bt_get(reader, held_def.id);
    const bf_validation_progress *vp = &row.validation_progress;
    printf("held: running %d, lifecycle %d, owner %s, %lld of ~%lld rows checked, %lld need "
           "repair\n",
           vp->running, vp->lifecycle, vp->owner, (long long)vp->rows_checked,
           (long long)row.source_estimate, (long long)vp->rows_needing_repair);
    assert_int_equal(row.state, BF_STATE_VALIDATING);
    assert_true(vp->present);
    assert_true(vp->running);
    assert_false(vp->finished);
    assert_true(vp->lifecycle);
    assert_string_equal(vp->owner, "vp-worker");
    assert_true(vp->rows_checked >= 50 && vp->rows_checked < ROWS);
    assert_int_equal(vp->rows_needing_repair, 0);
    assert_true(vp->started_at > 0 && vp->updated_at >= vp->started_at);
    assert_true(row.has_source_estimate);

    bt_unlock(holder, BARRIER_HELD);
    bt_step_thread_join(&t, 60);
    assert_int_equal(t.err, BF_OK);
    assert_int_equal(t.info.step, BF_STEP_COMPLETED);
    row = bt_get(reader, held_def.id);
    assert_int_equal(row.state, BF_STATE_COMPLETED);
    assert_true(vp->present);
    assert_false(vp->running);
    assert_true(vp->finished);
    assert_true(vp->has_finished_at && vp->finished_at >= vp->updated_at - 1);
    assert_int_equal(vp->rows_checked, ROWS);
    assert_int_equal(vp->rows_needing_repair, 0);

    PQfinish(holder);
    bf_worker_free(w);
    bf_engine_close(reader);
    bf_engine_close(e);
}

/* The child: an explicit validation with a short allowance (lease 3.5 s + statement 3 s). */
static int crashed_child(void *arg)
{
    (void)arg;
    bf_config cfg = {.conninfo = bt_db_conninfo(),
                     .owner = "vp-crashing",
                     .lease_ms = 3500,
                     .statement_timeout_ms = 3000,
                     .lock_timeout_ms = 3000};
    bf_engine *e = NULL;
    if (bf_engine_open(&e, &cfg, reg) != BF_OK)
        return 3;
    bf_action_result out;
    (void)bf_validate(e, crashed_def.id, NULL, &out); /* killed at the barrier */
    bf_engine_close(e);
    return 4;
}

static void test_crashed(void **state)
{
    (void)state;
    bf_engine *e = bt_engine(reg, "vp-worker", 30000);
    assert_int_equal(bf_register_all(e), BF_OK);
    bf_worker *w = reach_validating(e, crashed_def.id);
    bf_step_info info;
    PGconn *holder = bt_connect();
    /* the lifecycle validation passes the barrier (not held) and completes */
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_COMPLETED);
    bf_worker_free(w);
    /* an old writer undoes ten rows after completion: the explicit validation counts them */
    bt_exec(conn, "UPDATE public.vp_crashed SET fixed = NULL WHERE id <= 10");

    bt_lock(holder, BARRIER_CRASHED);
    pid_t child = bt_spawn(crashed_child, NULL);
    bt_wait_waiters(conn, BARRIER_CRASHED, 1);
    int backend = bt_barrier_waiter_pid(conn, BARRIER_CRASHED);
    bf_backfill row = bt_get(e, crashed_def.id);
    const bf_validation_progress *vp = &row.validation_progress;
    assert_true(vp->present);
    assert_true(vp->running);
    assert_false(vp->lifecycle);
    assert_string_equal(vp->owner, "vp-crashing");
    assert_true(vp->rows_checked >= 50 && vp->rows_checked < ROWS);
    assert_int_equal(vp->rows_needing_repair, 10);
    int64_t checked = vp->rows_checked;

    assert_int_equal(kill(child, SIGKILL), 0);
    assert_int_equal(bt_wait_child(child), 128 + SIGKILL);
    bt_unlock(holder, BARRIER_CRASHED);
    bt_wait_backend_gone(conn, backend);
    /* PostgreSQL's clock decides when the allowance has passed: poll it, 30 s at most */
    for (int i = 0; i < 600; i++) {
        row = bt_get(e, crashed_def.id);
        if (!vp->running)
            break;
        usleep(50000);
    }
    printf("crashed: present %d, running %d, finished %d, %lld rows checked, last write %.1f s "
           "ago\n",
           vp->present, vp->running, vp->finished, (long long)vp->rows_checked,
           (double)(row.now - vp->updated_at) / 1e6);
    assert_true(vp->present);
    assert_false(vp->running);
    assert_false(vp->finished);
    assert_int_equal(vp->rows_checked, checked);
    assert_true(row.now - vp->updated_at >= 6500000); /* past the child's allowance */

    /* a new validation replaces the stale entry */
    bf_action_result out;
    assert_int_equal(bf_validate(e, crashed_def.id, NULL, &out), BF_OK);
    assert_int_equal(out.validation, BF_VALIDATION_FAILURE);
    row = bt_get(e, crashed_def.id);
    assert_true(vp->finished);
    assert_false(vp->running);
    assert_false(vp->lifecycle);
    assert_string_equal(vp->owner, "vp-worker");
    assert_int_equal(vp->rows_checked, ROWS);
    assert_int_equal(vp->rows_needing_repair, 10);
    PQfinish(holder);
    bf_engine_close(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_held),
        cmocka_unit_test(test_crashed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
