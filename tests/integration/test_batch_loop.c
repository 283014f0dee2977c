/*
 * test_batch_loop.c - the declarative batch loop inside PostgreSQL (one CALL per worker step),
 * through the engine API against real PostgreSQL.
 *
 *   - a step commits at most step_batches batches, each with its own checkpoint advance, and
 *     reports their count, keys and changed rows; later steps go on to the bound;
 *   - a pause that commits while a step's third batch is in flight: the first two batches of
 *     that step stay committed, the third rolls back whole, the step reports lost;
 *   - a stop request (bf_worker_stop) while a batch is in flight cancels it: bf_worker_run
 *     returns although the batch is still blocked, the batch rolls back, the batches before it
 *     stay, the claim is released and no failed attempt is recorded;
 *   - a step starts no batch after step_ms: a first batch held at a barrier until the step's
 *     deadline has passed (by PostgreSQL's clock) ends the step after one batch;
 *   - a table whose columns are named like the loop procedure's own variables and parameters
 *     (n, lim, status, checkpoint, owner, ...) and a definition that names them unqualified;
 *   - a worker whose role lacks TEMPORARY on the database (the loop procedure lives in
 *     pg_temp) blocks the backfill with "insufficient privilege" (classify.c: 42501 is an
 *     unmet prerequisite) instead of retrying; after a grant an operator's retry completes it;
 *   - the worker's session terminated during a step: the step ends, the attempt is recorded
 *     (unavailable, retried) on a new connection (worker.c worker_fail reconnects first),
 *     nothing of the batch committed, and the worker goes on after the backoff.
 *
 * Ordering uses barriers (advisory locks taken by the definition's SQL, see bt.h), never sleeps.
 *
 * Guards proved (removing any one of them fails this test):
 *   - the step's batch cap, registry.c compile_loop "EXIT WHEN batches >= p_max_batches";
 *   - the per-batch COMMIT inside the loop and the per-batch verdict
 *     ("PERFORM buzz_backfill.batch_verdict(...)" after the fence): without the COMMIT the
 *     paused step would lose its first two batches too; without the verdict the third batch's
 *     mutation would commit without its checkpoint;
 *   - the cancel on stop, engine.c bf__wait_result (PQcancel when the wake pipe signals a
 *     stop): without it bf_worker_run does not return while the batch is blocked; and
 *     worker.c step_failed's "if (w->e->cancelled) return step_stopped(...)": without it the
 *     stop is recorded as a failed attempt with a backoff;
 *   - the step deadline, compile_loop "OR clock_timestamp() >= bf.deadline";
 *   - "#variable_conflict use_column" and the "bf." qualification of the procedure's variables
 *     (compile_loop): without them the columns' names are ambiguous or mean the variables;
 *   - classify.c's 42501 (insufficient privilege) as an unmet prerequisite: otherwise the
 *     worker without TEMPORARY retries instead of blocking;
 *   - worker.c worker_fail's reconnect (bf__ensure_conn) before it records an attempt: without
 *     it the attempt of the terminated session is never recorded.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "bt.h"

#define ROWS          1000
#define BATCH         100
#define BARRIER_PAUSE 61
#define BARRIER_STOP  62
#define BARRIER_TIME  63
#define BARRIER_KILL  64
#define JOIN_DEADLINE 30 /* s: a step that should have returned long before this */
/* ms: a step_ms no slow machine reaches, where a case counts the batches of one step */
#define NO_DEADLINE 60000

static bf_definition items_def(const char *id, const char *table, const char *update_set)
{
    return (bf_definition){
        .id = id,
        .table = table,
        .key = {{"id", BF_KEY_BIGINT}},
        .nkey = 1,
        .batch_size = BATCH,
        .needs_repair = "t.fixed IS NULL",
        .update_set = update_set,
    };
}

/* the third batch (ids 201..300) blocks at id 250 until the barrier is released */
#define AT_250(key)                                                                                \
    "fixed = CASE WHEN t.id <> 250 OR public.bt_barrier(" #key ") THEN t.val * 2 END"
/* the first batch (ids 1..100) blocks at id 50 */
#define AT_50(key) "fixed = CASE WHEN t.id <> 50 OR public.bt_barrier(" #key ") THEN t.val * 2 END"

static bf_definition defs[7];
static bf_registry *registry;

static const bf_definition names_def = {
    .id = "loop.names_v1",
    .table = "loop_names",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = BATCH,
    /* unqualified names that are also the loop's parameters and variables */
    .needs_repair = "status IS NULL",
    .update_set = "status = 'done', n = lim + 1, touched = fenced, checkpoint = owner",
};

static int setup(void **state)
{
    (void)state;
    bt_db_create("batch_loop");
    PGconn *c = bt_connect();
    bt_install_barrier(c);
    bt_make_items(c, "loop_cap", ROWS);
    bt_make_items(c, "loop_pause", ROWS);
    bt_make_items(c, "loop_stop", ROWS);
    bt_make_items(c, "loop_time", ROWS);
    bt_make_items(c, "loop_priv", ROWS);
    bt_make_items(c, "loop_kill", ROWS);
    bt_exec(c,
            "CREATE TABLE loop_names (id bigint PRIMARY KEY, n integer, lim integer NOT NULL,"
            " status text, checkpoint text, owner text NOT NULL, touched integer,"
            " fenced integer NOT NULL, batches integer, deadline integer);"
            "INSERT INTO loop_names (id, lim, owner, fenced)"
            " SELECT g, g, 'o' || g, 7 FROM generate_series(1, %d) g",
            ROWS);
    PQfinish(c);
    defs[0] = items_def("loop.cap_v1", "loop_cap", "fixed = t.val * 2");
    defs[1] = items_def("loop.pause_v1", "loop_pause", AT_250(61));
    defs[2] = items_def("loop.stop_v1", "loop_stop", AT_250(62));
    defs[3] = items_def("loop.time_v1", "loop_time", AT_50(63));
    defs[4] = names_def;
    defs[5] = items_def("loop.priv_v1", "loop_priv", "fixed = t.val * 2");
    defs[6] = items_def("loop.kill_v1", "loop_kill", AT_50(64));
    const bf_definition *const list[] = {&defs[0], &defs[1], &defs[2], &defs[3],
                                         &defs[4], &defs[5], &defs[6]};
    registry = bt_registry(list, 7);
    bf_engine *e = bt_engine(registry, "operator", 0);
    assert_int_equal(bf_register_all(e), BF_OK);
    for (int i = 0; i < 7; i++)
        assert_int_equal(bt_act(e, BF_ACTION_START, defs[i].id), BF_OK);
    bf_engine_close(e);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bt_db_drop_registry(registry);
    return 0;
}

/* A worker's engine with the given step limits (0: the engine's defaults). */
static bf_engine *loop_engine(const char *owner, int step_ms, int step_batches)
{
    bf_config cfg = {.conninfo = bt_db_conninfo(),
                     .owner = owner,
                     .statement_timeout_ms = 60000,
                     .lock_timeout_ms = 60000,
                     .step_ms = step_ms,
                     .step_batches = step_batches};
    bf_engine *e = NULL;
    assert_int_equal(bf_engine_open(&e, &cfg, registry), BF_OK);
    return e;
}

/* ---- tests ----------------------------------------------------------------------------- */

static void test_step_commits_at_most_step_batches(void **state)
{
    (void)state;
    PGconn *c = bt_connect();
    bf_engine *e = loop_engine("cap", NO_DEADLINE, 3);
    bf_worker *w = bt_claimed_worker(e, "loop.cap_v1");
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH);
    assert_int_equal(info.batches, 3);
    assert_int_equal(info.rows, 3 * BATCH);
    assert_int_equal(info.touched, 3 * BATCH);
    assert_string_equal(info.checkpoint, "{300}");
    bf_backfill row = bt_get(e, "loop.cap_v1");
    assert_int_equal(row.batches_committed, 3);
    assert_int_equal(row.rows_committed, 3 * BATCH);
    assert_int_equal(row.rows_covered, 3 * BATCH);
    assert_int_equal(bt_int(c, "SELECT count(*) FROM loop_cap WHERE fixed IS NOT NULL"), 300);
    assert_int_equal(bt_int(c, "SELECT max(id) FROM loop_cap WHERE fixed IS NOT NULL"), 300);
    /* 700 rows left: steps of 3, 3 and 1 batches, then the end of the admitted work */
    long batches[3];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(bf_worker_step(w, &info), BF_OK);
        assert_int_equal(info.step, BF_STEP_BATCH);
        batches[i] = info.batches;
    }
    assert_int_equal(batches[0], 3);
    assert_int_equal(batches[1], 3);
    assert_int_equal(batches[2], 1);
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_VALIDATING);
    assert_int_equal(bt_step_until_not_batch(w, 5), BF_STEP_COMPLETED);
    row = bt_get(e, "loop.cap_v1");
    assert_int_equal(row.batches_committed, ROWS / BATCH);
    assert_int_equal(bt_int(c, "SELECT count(*) FROM loop_cap WHERE fixed = val * 2"), ROWS);
    bf_worker_free(w);
    bf_engine_close(e);
    PQfinish(c);
}

static void test_pause_mid_step_keeps_the_batches_before(void **state)
{
    (void)state;
    PGconn *c = bt_connect(), *holder = bt_connect();
    bf_engine *op = bt_engine(registry, "operator", 0);
    bf_engine *e = loop_engine("pause", NO_DEADLINE, 100);
    bf_worker *w = bt_claimed_worker(e, "loop.pause_v1");
    bt_lock(holder, BARRIER_PAUSE);
    bt_step_thread t;
    bt_step_thread_start(&t, w, false);
    bt_wait_waiters(c, BARRIER_PAUSE, 1); /* batches 1 and 2 committed, batch 3 in flight */
    assert_int_equal(bt_int(c, "SELECT batches_committed FROM buzz_backfill.backfill"
                               " WHERE id = 'loop.pause_v1'"),
                     2);
    assert_int_equal(bt_act(op, BF_ACTION_PAUSE, "loop.pause_v1"), BF_OK);
    bt_unlock(holder, BARRIER_PAUSE);
    bt_step_thread_join(&t, JOIN_DEADLINE);
    assert_int_equal(t.err, BF_OK);
    assert_int_equal(t.info.step, BF_STEP_LOST);
    bf_backfill row = bt_get(op, "loop.pause_v1");
    assert_int_equal(row.state, BF_STATE_PAUSED);
    assert_true(row.has_checkpoint);
    assert_string_equal(row.checkpoint, "200");
    assert_int_equal(row.batches_committed, 2);
    assert_int_equal(row.rows_committed, 200);
    /* the third batch's rows 201..249 were changed in its transaction, which rolled back */
    assert_int_equal(bt_int(c, "SELECT count(*) FROM loop_pause WHERE fixed IS NOT NULL"), 200);
    assert_int_equal(bt_int(c, "SELECT max(id) FROM loop_pause WHERE fixed IS NOT NULL"), 200);
    bf_worker_free(t.w);
    bf_engine_close(e);
    bf_engine_close(op);
    PQfinish(holder);
    PQfinish(c);
}

static void test_stop_cancels_the_batch_in_flight(void **state)
{
    (void)state;
    PGconn *c = bt_connect(), *holder = bt_connect();
    bf_engine *e = loop_engine("stopper", 0, 0);
    bf_worker *runner = NULL;
    assert_int_equal(bf_worker_new(&runner, e, NULL), BF_OK);
    bt_lock(holder, BARRIER_STOP);
    bt_step_thread t;
    bt_step_thread_start(&t, runner, true);
    bt_wait_waiters(c, BARRIER_STOP, 1);
    bf_worker_stop(runner);
    /* the barrier is still held: only a cancel lets the worker return */
    bt_step_thread_join(&t, JOIN_DEADLINE);
    bt_unlock(holder, BARRIER_STOP);
    assert_int_equal(t.err, BF_OK);
    bf_backfill row = bt_get(e, "loop.stop_v1");
    assert_int_equal(row.state, BF_STATE_RUNNING);
    assert_false(row.has_claim_expires);
    assert_string_equal(row.claim_owner, "");
    assert_int_equal(row.attempts, 0); /* a stop is no failed attempt */
    assert_false(row.has_next_attempt);
    assert_string_equal(row.checkpoint, "200");
    assert_int_equal(row.rows_committed, 200);
    assert_int_equal(bt_int(c, "SELECT count(*) FROM loop_stop WHERE fixed IS NOT NULL"), 200);
    /* and the next worker goes on from the checkpoint to the end */
    bf_worker *w = bt_claimed_worker(e, "loop.stop_v1");
    assert_int_equal(bt_step_until_not_batch(w, 20), BF_STEP_VALIDATING);
    assert_int_equal(bt_step_until_not_batch(w, 5), BF_STEP_COMPLETED);
    assert_int_equal(bt_int(c, "SELECT count(*) FROM loop_stop WHERE fixed = val * 2"), ROWS);
    bf_worker_free(w);
    bf_worker_free(t.w);
    bf_engine_close(e);
    PQfinish(holder);
    PQfinish(c);
}

static void test_no_batch_starts_after_step_ms(void **state)
{
    (void)state;
    PGconn *c = bt_connect(), *holder = bt_connect();
    bf_engine *e = loop_engine("deadline", 20, 1000);
    bf_worker *w = bt_claimed_worker(e, "loop.time_v1");
    bt_lock(holder, BARRIER_TIME);
    bt_step_thread t;
    bt_step_thread_start(&t, w, false);
    bt_wait_waiters(c, BARRIER_TIME, 1); /* the first batch is in flight */
    int pid = bt_barrier_waiter_pid(c, BARRIER_TIME);
    /* observe (by PostgreSQL's clock) that the CALL has run past its 20 ms step deadline */
    for (int i = 0;; i++) {
        if (bt_int(c,
                   "SELECT count(*) FROM pg_stat_activity WHERE pid = %d"
                   " AND clock_timestamp() - query_start > interval '100 ms'",
                   pid) == 1)
            break;
        if (i == 60000)
            fail_msg("the step's CALL did not run for 100 ms");
        usleep(1000);
    }
    bt_unlock(holder, BARRIER_TIME);
    bt_step_thread_join(&t, JOIN_DEADLINE);
    assert_int_equal(t.err, BF_OK);
    assert_int_equal(t.info.step, BF_STEP_BATCH);
    assert_int_equal(t.info.batches, 1);
    assert_string_equal(t.info.checkpoint, "{100}");
    assert_int_equal(bt_int(c, "SELECT count(*) FROM loop_time WHERE fixed IS NOT NULL"), 100);
    bf_worker_free(t.w);
    bf_engine_close(e);
    PQfinish(holder);
    PQfinish(c);
}

static void test_columns_named_like_the_loop_variables(void **state)
{
    (void)state;
    PGconn *c = bt_connect();
    bf_engine *e = loop_engine("names", 0, 0);
    bf_worker *w = bt_claimed_worker(e, "loop.names_v1");
    assert_int_equal(bt_step_until_not_batch(w, 20), BF_STEP_VALIDATING);
    assert_int_equal(bt_step_until_not_batch(w, 5), BF_STEP_COMPLETED);
    assert_int_equal(bt_int(c, "SELECT count(*) FROM loop_names WHERE status = 'done'"
                               " AND n = lim + 1 AND touched = 7 AND checkpoint = owner"),
                     ROWS);
    bf_backfill row = bt_get(e, "loop.names_v1");
    assert_int_equal(row.rows_committed, ROWS);
    bf_worker_free(w);
    bf_engine_close(e);
    PQfinish(c);
}

static void test_without_temporary_privilege_blocks(void **state)
{
    (void)state;
    PGconn *c = bt_connect();
    char *db = bt_text(c, "SELECT current_database()");
    char role[64], conninfo[1400];
    snprintf(role, sizeof role, "bt_notemp_%ld", (long)getpid());
    bt_exec(c,
            "DROP ROLE IF EXISTS %s; CREATE ROLE %s LOGIN;"
            "GRANT USAGE ON SCHEMA buzz_backfill TO %s;"
            "GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA buzz_backfill TO %s;"
            "GRANT USAGE ON ALL SEQUENCES IN SCHEMA buzz_backfill TO %s;"
            "GRANT SELECT, UPDATE ON loop_priv TO %s;"
            "REVOKE TEMPORARY ON DATABASE %s FROM PUBLIC",
            role, role, role, role, role, role, db);
    /* a later user keyword overrides the one of the test's conninfo */
    snprintf(conninfo, sizeof conninfo, "%s user='%s'", bt_db_conninfo(), role);
    bf_config cfg = {.conninfo = conninfo, .owner = "notemp", .lock_timeout_ms = 60000};
    bf_engine *e = NULL;
    assert_int_equal(bf_engine_open(&e, &cfg, registry), BF_OK);
    bf_worker *w = bt_claimed_worker(e, "loop.priv_v1");
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BLOCKED);
    bf_backfill row = bt_get(e, "loop.priv_v1");
    assert_int_equal(row.state, BF_STATE_BLOCKED);
    assert_string_equal(row.error_class, "prerequisite");
    assert_non_null(strstr(row.error_detail, "insufficient privilege"));
    assert_int_equal(row.rows_committed, 0);
    /* granted, an operator's retry lets the next claim run to the end */
    bt_exec(c, "GRANT TEMPORARY ON DATABASE %s TO %s", db, role);
    bf_engine *op = bt_engine(registry, "operator", 0);
    assert_int_equal(bt_act(op, BF_ACTION_RETRY, "loop.priv_v1"), BF_OK);
    assert_int_equal(bf_worker_claim(w, "loop.priv_v1", NULL), BF_OK);
    assert_int_equal(bt_step_until_not_batch(w, 20), BF_STEP_VALIDATING);
    assert_int_equal(bt_step_until_not_batch(w, 5), BF_STEP_COMPLETED);
    assert_int_equal(bt_int(c, "SELECT count(*) FROM loop_priv WHERE fixed = val * 2"), ROWS);
    bf_worker_free(w);
    bf_engine_close(e);
    bf_engine_close(op);
    bt_exec(c, "GRANT TEMPORARY ON DATABASE %s TO PUBLIC; DROP OWNED BY %s; DROP ROLE %s", db, role,
            role);
    free(db);
    PQfinish(c);
}

static void test_lost_connection_mid_step_is_a_retry(void **state)
{
    (void)state;
    PGconn *c = bt_connect(), *holder = bt_connect();
    bf_engine *e = loop_engine("killed", NO_DEADLINE, 0);
    bf_worker *w = bt_claimed_worker(e, "loop.kill_v1");
    bt_lock(holder, BARRIER_KILL);
    bt_step_thread t;
    bt_step_thread_start(&t, w, false);
    bt_wait_waiters(c, BARRIER_KILL, 1);
    int pid = bt_barrier_waiter_pid(c, BARRIER_KILL);
    assert_int_equal(bt_int(c, "SELECT pg_terminate_backend(%d)::int", pid), 1);
    bt_step_thread_join(&t, JOIN_DEADLINE);
    bt_unlock(holder, BARRIER_KILL);
    assert_int_equal(t.err, BF_OK);
    assert_int_equal(t.info.step, BF_STEP_RETRY); /* recorded on a new connection */
    bf_backfill row = bt_get(e, "loop.kill_v1");
    assert_int_equal(row.state, BF_STATE_RUNNING);
    assert_int_equal(row.attempts, 1);
    assert_string_equal(row.error_class, "unavailable"); /* connection lost: retried */
    assert_false(row.has_checkpoint);
    assert_int_equal(bt_int(c, "SELECT count(*) FROM loop_kill WHERE fixed IS NOT NULL"), 0);
    /* after the backoff the same worker (reconnected) goes on to the end */
    assert_int_equal(bt_claim_poll(w, "loop.kill_v1", NULL, 30000), BF_OK);
    assert_int_equal(bt_step_until_not_batch(w, 20), BF_STEP_VALIDATING);
    assert_int_equal(bt_step_until_not_batch(w, 5), BF_STEP_COMPLETED);
    assert_int_equal(bt_int(c, "SELECT count(*) FROM loop_kill WHERE fixed = val * 2"), ROWS);
    bf_worker_free(w);
    bf_engine_close(e);
    PQfinish(holder);
    PQfinish(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step_commits_at_most_step_batches),
        cmocka_unit_test(test_pause_mid_step_keeps_the_batches_before),
        cmocka_unit_test(test_stop_cancels_the_batch_in_flight),
        cmocka_unit_test(test_no_batch_starts_after_step_ms),
        cmocka_unit_test(test_columns_named_like_the_loop_variables),
        cmocka_unit_test(test_without_temporary_privilege_blocks),
        cmocka_unit_test(test_lost_connection_mid_step_is_a_retry),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
