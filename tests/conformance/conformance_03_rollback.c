/*
 * conformance_03_rollback.c - spec conformance test 3, rollback.
 *
 * A failure after the mutation but before the commit leaves target data and the checkpoint
 * unchanged:
 *   (a) the mutation succeeds but the checkpoint fence fails: while the worker's batch waits at
 *       a barrier the operator pauses the backfill (advancing the generation); released, the
 *       batch reaches its fence, which no longer matches, and the whole batch rolls back. Both
 *       batch forms: the declarative single statement and a callback that has certainly
 *       mutated every row of its batch (the test sees them row-locked) before it waits;
 *   (b) a callback updates its rows and then fails: a statement that divides by zero, or a
 *       returned data-invariant verdict; the rows and checkpoint are unchanged and the backfill
 *       is blocked (error_class data_invariant) with its checkpoint intact across operator
 *       retries;
 *   (c) a declarative update_set violates a CHECK constraint on some rows of a batch: the rows
 *       of that batch that did satisfy it are not committed either; blocked.
 *
 * Guards proved (removing any one of them fails this test):
 *   - the single-transaction checkpoint: mutation and fenced checkpoint advance commit in one
 *     transaction (the batch loop, registry.c compile_loop, runs selection, mutation, fence and
 *     verdict of a batch before its COMMIT; batch.c bf__batch_callback runs the callback and the
 *     fence before one COMMIT and rolls back on any failure);
 *   - batch_verdict raising on a failed fence, "IF selected > 0 AND fenced = 0 THEN RAISE"
 *     (migrate.c), and the callback fence's "PQntuples(r) == 0 -> BF_ERR_STALE" (worker.c):
 *     without them the mutation commits without its checkpoint.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bt.h"

#define BARRIER_DECL 31
#define BARRIER_CB   32

/* ---- definitions ------------------------------------------------------------------------ */

static const bf_definition decl_def = {
    .id = "rollback.decl_v1",
    .table = "rb_decl",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 100,
    .needs_repair = "t.fixed IS NULL AND bt_barrier(31)",
    .update_set = "fixed = t.val * 2, counter = t.counter + 1",
};

/* mutate the batch, then wait at the barrier (SQL statements only, bt_sql_mutate:
 * conformance/definitions/rollback.cb_v1.def stands in) */
static const char *cb_sql[] = {
    "UPDATE rb_cb t SET fixed = t.val * 2, counter = t.counter + 1"
    " FROM bf_batch b WHERE t.id = b.id AND t.fixed IS NULL",
    "DO $$BEGIN PERFORM bt_barrier(32); END$$",
    NULL,
};

static const bf_definition cb_def = {
    .id = "rollback.cb_v1",
    .table = "rb_cb",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 100,
    .needs_repair = "t.fixed IS NULL",
    .mutate = bt_sql_mutate,
    .arg = cb_sql,
};

/* how the failing callback ends its batch after mutating every row of it. It stays C in the
 * files variant (bt_files.h): the test switches the failure between batches in this process,
 * and the data-invariant verdict is returned by C, not counted by a statement. */
typedef enum fail_mode { FAIL_NONE, FAIL_DIVIDE, FAIL_VERDICT } fail_mode;
static fail_mode fail_now = FAIL_NONE;

static bf_err fail_mutate(bf_txn *txn, void *arg)
{
    const fail_mode *mode = arg;
    long n = 0;
    bf_err err = bf_txn_exec(txn,
                             "UPDATE rb_fail t SET fixed = t.val * 2, counter = t.counter + 1"
                             " FROM bf_batch b WHERE t.id = b.id AND t.fixed IS NULL",
                             0, NULL, &n);
    if (err != BF_OK)
        return err;
    if (*mode == FAIL_DIVIDE)
        return bf_txn_exec(txn, "SELECT 1 / 0", 0, NULL, NULL);
    if (*mode == FAIL_VERDICT) {
        bf_txn_set_diag(txn, "source rows violate the repair invariant");
        return BF_ERR_DATA_INVARIANT;
    }
    return BF_OK;
}

static const bf_definition fail_def = {
    .id = "rollback.fail_v1",
    .table = "rb_fail",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 100,
    .needs_repair = "t.fixed IS NULL",
    .mutate = fail_mutate,
    .arg = &fail_now,
};

/* rows with val >= 75 violate the table's CHECK (fixed < 150) */
static const bf_definition check_def = {
    .id = "rollback.check_v1",
    .table = "rb_check",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 50,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2, counter = t.counter + 1",
};

static const bf_definition *const defs[] = {&decl_def, &cb_def, &fail_def, &check_def};
#define NDEFS (sizeof defs / sizeof defs[0])

static bf_registry *reg;
static bf_engine *admin;
static PGconn *conn;

static int setup(void **state)
{
    (void)state;
    bt_db_create("conf03");
    conn = bt_connect();
    bt_install_barrier(conn);
    bt_make_items(conn, "rb_decl", 300);
    bt_make_items(conn, "rb_cb", 300);
    bt_make_items(conn, "rb_fail", 300);
    bt_make_items(conn, "rb_check", 300);
    bt_exec(conn, "ALTER TABLE rb_check ADD CONSTRAINT fixed_small CHECK (fixed < 150)");
    reg = bt_registry(defs, NDEFS);
    admin = bt_engine(reg, "operator", 0);
    assert_int_equal(bf_register_all(admin), BF_OK);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bf_engine_close(admin);
    bf_registry_free(reg);
    PQfinish(conn);
    bt_db_drop();
    return 0;
}

/* a claimed worker of its own engine, with `batches` batches committed */
static bf_worker *worker_with_batches(const char *id, bf_engine **engine_out, int batches)
{
    assert_int_equal(bt_act(admin, BF_ACTION_START, id), BF_OK);
    bf_engine *we = bt_engine(reg, "worker", 30000);
    bf_worker *w = bt_claimed_worker(we, id);
    for (int i = 0; i < batches; i++) {
        bf_step_info info;
        assert_int_equal(bf_worker_step(w, &info), BF_OK);
        assert_int_equal(info.step, BF_STEP_BATCH);
    }
    *engine_out = we;
    return w;
}

/* target rows and progress are exactly those of `batches` committed batches of `size` */
static void check_progress(const char *id, const char *table, int batches, int size, long rows)
{
    bf_backfill row = bt_get(admin, id);
    char cp[32];
    snprintf(cp, sizeof cp, "%d", batches * size);
    assert_string_equal(row.checkpoint, cp);
    assert_int_equal(row.batches_committed, batches);
    assert_int_equal(row.rows_committed, (int64_t)batches * size);
    assert_true(row.has_rows_covered); /* keys passed move with the checkpoint, or not at all */
    assert_int_equal(row.rows_covered, (int64_t)batches * size);
    assert_int_equal(bt_int(conn,
                            "SELECT count(*) FROM %s WHERE counter = 1 AND fixed = val * 2"
                            " AND id <= %d",
                            table, batches * size),
                     batches * size);
    assert_int_equal(bt_int(conn,
                            "SELECT count(*) FROM %s WHERE counter = 0 AND fixed IS NULL"
                            " AND id > %d",
                            table, batches * size),
                     rows - batches * size);
}

static void finish(const char *id, const char *table, long rows)
{
    bf_engine *we = bt_engine(reg, "finisher", 30000);
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, we, NULL), BF_OK);
    assert_int_equal(bf_worker_run(w, true), BF_OK);
    bf_worker_free(w);
    bf_engine_close(we);
    bf_backfill row = bt_get(admin, id);
    assert_int_equal(row.state, BF_STATE_COMPLETED);
    assert_int_equal(row.rows_committed, rows);
    assert_int_equal(row.rows_covered, rows);
    assert_int_equal(
        bt_int(conn, "SELECT count(*) FROM %s WHERE counter = 1 AND fixed = val * 2", table), rows);
}

/* ---- (a) the fence fails after the mutation -------------------------------------------- */

/* Run the worker's next batch into the barrier, pause the backfill while it waits there,
 * release it, and return what the batch reported. rows_locked: the test sees the batch's rows
 * 101..200 locked (already updated) by the waiting batch before it pauses. */
static bf_step batch_through_pause(bf_worker *w, const char *id, const char *table, int barrier,
                                   bool rows_locked)
{
    bt_lock(conn, barrier);
    bt_step_thread t;
    bt_step_thread_start(&t, w, false);
    bt_wait_waiters(conn, barrier, 1);
    if (rows_locked) /* every row of the batch is already updated by the waiting transaction */
        assert_int_equal(bt_int(conn,
                                "SELECT count(*) FROM (SELECT 1 FROM %s WHERE id BETWEEN 101"
                                " AND 200 FOR UPDATE SKIP LOCKED) s",
                                table),
                         0);
    int64_t before = bt_get(admin, id).generation;
    assert_int_equal(bt_act(admin, BF_ACTION_PAUSE, id), BF_OK);
    bf_backfill row = bt_get(admin, id);
    assert_int_equal(row.state, BF_STATE_PAUSED);
    assert_int_equal(row.generation, before + 1);
    bt_unlock(conn, barrier);
    bt_step_thread_join(&t, 60);
    assert_int_equal(t.err, BF_OK);
    return t.info.step;
}

static void run_fence_case(const char *id, const char *table, int barrier, bool rows_locked)
{
    bf_engine *we = NULL;
    bf_worker *w = worker_with_batches(id, &we, 1);
    assert_int_equal(batch_through_pause(w, id, table, barrier, rows_locked), BF_STEP_LOST);
    check_progress(id, table, 1, 100, 300);
    assert_int_equal(bt_get(admin, id).state, BF_STATE_PAUSED);
    bf_worker_free(w);
    bf_engine_close(we);

    /* resuming continues from the committed checkpoint */
    assert_int_equal(bt_act(admin, BF_ACTION_RESUME, id), BF_OK);
    finish(id, table, 300);
}

static void test_fence_fails_declarative(void **state)
{
    (void)state;
    run_fence_case("rollback.decl_v1", "rb_decl", BARRIER_DECL, false);
}

static void test_fence_fails_callback(void **state)
{
    (void)state;
    run_fence_case("rollback.cb_v1", "rb_cb", BARRIER_CB, true);
}

/* ---- (b) the callback fails after its mutation ----------------------------------------- */

static void expect_blocked(bf_worker *w, const char *id)
{
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BLOCKED);
    bf_backfill row = bt_get(admin, id);
    assert_int_equal(row.state, BF_STATE_BLOCKED);
    assert_string_equal(row.error_class, "data_invariant");
    assert_false(row.claimed);
}

static void test_callback_fails_after_mutation(void **state)
{
    (void)state;
    const char *id = "rollback.fail_v1";
    bf_engine *we = NULL;
    bf_worker *w = worker_with_batches(id, &we, 1);

    fail_now = FAIL_DIVIDE;
    expect_blocked(w, id);
    check_progress(id, "rb_fail", 1, 100, 300);

    /* operator retry: same bound and checkpoint; the callback now rejects its batch */
    assert_int_equal(bt_act(admin, BF_ACTION_RETRY, id), BF_OK);
    assert_int_equal(bf_worker_claim(w, id, NULL), BF_OK);
    fail_now = FAIL_VERDICT;
    expect_blocked(w, id);
    assert_string_equal(bt_get(admin, id).error_detail, "source rows violate the repair invariant");
    check_progress(id, "rb_fail", 1, 100, 300);
    assert_string_equal(bt_get(admin, id).bound, "300");
    bf_worker_free(w);
    bf_engine_close(we);

    fail_now = FAIL_NONE;
    assert_int_equal(bt_act(admin, BF_ACTION_RETRY, id), BF_OK);
    finish(id, "rb_fail", 300);
}

/* ---- (c) a constraint violation inside the declarative batch --------------------------- */

static void test_constraint_violation(void **state)
{
    (void)state;
    const char *id = "rollback.check_v1";
    bf_engine *we = NULL;
    bf_worker *w = worker_with_batches(id, &we, 1); /* 1..50: fixed up to 100 */
    expect_blocked(w, id);                          /* 51..100: rows from 75 on violate the CHECK */
    check_progress(id, "rb_check", 1, 50, 300);
    /* rows 51..74 satisfied the constraint and were updated, but never committed */
    assert_int_equal(bt_int(conn, "SELECT count(*) FROM rb_check WHERE id BETWEEN 51 AND 74"
                                  " AND fixed IS NULL"),
                     24);
    bf_worker_free(w);
    bf_engine_close(we);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fence_fails_declarative),
        cmocka_unit_test(test_fence_fails_callback),
        cmocka_unit_test(test_callback_fails_after_mutation),
        cmocka_unit_test(test_constraint_violation),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
