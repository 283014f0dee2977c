/*
 * test_throttle.c - database-health throttling and adaptive batch size (issue 11,
 * docs/throttling.md) through the engine's production seams: a bf_throttle configured as a
 * daemon does, workers stepping real backfills, the read model (bf_get) showing what the
 * worker observed. Every row's counter is checked at the end: throttling never applies a row
 * twice or skips one.
 *
 * Cases and the guard each proves (removing it fails the case):
 * - test_custom_query_trips_and_releases: bf__throttle_check's custom query and step_health's
 *   wait: while public.thr_flag is on, a step commits nothing, reports BF_STEP_THROTTLED, and
 *   the row shows signal "custom" and since when; the waiting worker's session is idle (no
 *   transaction, no lock on the table); a stop ends the wait at once; with the flag off the
 *   next step runs batches and the row's throttle fields are cleared (worker_observe).
 * - test_long_throttle_keeps_its_claim: step_throttled's renewal: a throttle over three leases
 *   in short waits keeps the claim (same generation, no attempt counted).
 * - test_expired_claim_shows_no_throttle: bf__row_from_result's live claim: once the claim
 *   expires (PostgreSQL's clock) the row reads unclaimed, with its last owner, and without the
 *   throttle fields the holder wrote while it was live.
 * - test_waiters_on_the_table: the lock_waiters signal's count of sessions waiting on the
 *   target table: a session blocked on a row another session locked makes the step wait.
 * - test_batch_that_blocks_shrinks: the count of sessions a batch blocks, taken inside the
 *   batch loop procedure before its COMMIT (registry.c compile_loop, "watch"): a session that
 *   waits on a row the batch updated halves the next batch size and throttles.
 * - test_callback_batch_that_blocks_shrinks: the same count in the callback form
 *   (batch.c bf__batch_callback, before the fence).
 * - test_long_transaction_throttles: the xact_age signal of bf__throttle_check: another
 *   session's transaction open a second makes the step wait; committed, the backfill goes on.
 * - test_size_converges: the adaptive size as the worker applies it (worker.c
 *   step_after_batches; the rule itself: tests/unit/test_throttle_size.c): batches that cost
 *   about 5 ms a key settle near target / cost keys, never above the declared bound; without
 *   a target every batch has the declared size. A fixed cost per batch:
 *   test_throttle_fixed_cost.c.
 * - test_rate_ceilings: bf__throttle_pass: the definition's and the process's ceilings make
 *   a step wait keys / rate, shown as signal "rate".
 * - test_replica_lag_throttles_and_resumes: a real streaming replica (scripts/pg.sh
 *   standby-start) whose replay is paused with pg_wal_replay_pause(): the backfill throttles
 *   on replica_lag once the replica is behind by the threshold, and resumes on its own after
 *   pg_wal_replay_resume().
 * - test_configure_refuses_bad_values: bf_throttle_configure keeps the old configuration when
 *   a value is invalid.
 * - test_xid_age_trips_and_releases (its own group, on scripts/pg.sh aged-start's cluster):
 *   bf__throttle_check's xid_age column and comparison, and step_health's wait: with
 *   xid_age_pct 1 a step commits nothing and reports "throttled by xid_age: 1% (limit 1%)",
 *   the row shows signal xid_age; at 2 % the next step runs batches and the row's throttle
 *   fields are cleared; every row is applied once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "bt.h"

#define ROWS    600
#define BATCH   100
#define BARRIER 1101

static bf_definition defs[9];
static bf_registry *registry;
static bf_throttle *throttle;

static bf_definition items_def(const char *id, const char *table, const char *update_set, int batch)
{
    return (bf_definition){
        .id = id,
        .table = table,
        .key = {{"id", BF_KEY_BIGINT}},
        .nkey = 1,
        .batch_size = batch,
        .needs_repair = "t.fixed IS NULL",
        .update_set = update_set,
        .postcondition = "t.fixed IS NOT NULL AND t.counter = 1",
    };
}

#define COUNT "fixed = t.val * 2, counter = t.counter + 1"

/* The callback form: update the batch's rows, then wait at barrier 1102 inside the
 * transaction, holding their row locks. */
static bf_err cbblock_mutate(bf_txn *txn, void *arg)
{
    (void)arg;
    bf_err err = bf_txn_exec(
        txn, "UPDATE thr_cbblock t SET " COUNT " FROM bf_batch b WHERE t.id = b.id", 0, NULL, NULL);
    long long held = 0;
    if (err == BF_OK)
        err = bf_txn_query_int(txn, "SELECT public.bt_barrier(1102)::int", 0, NULL, &held);
    return err;
}

/* Register defs[0..n), start each, and make the throttle the engines share. */
static void start_all(int n)
{
    const bf_definition *list[sizeof defs / sizeof defs[0]];
    assert_true((size_t)n <= sizeof list / sizeof list[0]);
    for (int i = 0; i < n; i++)
        list[i] = &defs[i];
    registry = bt_registry(list, (size_t)n);
    assert_int_equal(bf_throttle_new(&throttle), BF_OK);
    bt_set_throttle(throttle);
    bf_engine *e = bt_engine(registry, "operator", 0);
    assert_int_equal(bf_register_all(e), BF_OK);
    for (int i = 0; i < n; i++)
        assert_int_equal(bt_act(e, BF_ACTION_START, defs[i].id), BF_OK);
    bf_engine_close(e);
}

/* scripts/pg.sh COMMAND for a second cluster (standby-start, aged-start): the URL it prints
 * (malloc'd); with want_url false (the stop commands) NULL, after checking it succeeded. */
static char *pg_side(const char *command, bool want_url)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s/scripts/pg.sh' %s", BUZZ_SOURCE_DIR, command);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[256] = "";
    if (fgets(line, sizeof line, p) == NULL)
        line[0] = '\0';
    assert_int_equal(pclose(p), 0);
    if (!want_url)
        return NULL;
    line[strcspn(line, "\n")] = '\0';
    assert_true(strncmp(line, "postgresql://", 13) == 0);
    return strdup(line);
}

static int setup(void **state)
{
    (void)state;
    bt_db_create("throttle");
    PGconn *c = bt_connect();
    bt_install_barrier(c);
    const char *tables[] = {"thr_custom", "thr_table",   "thr_block", "thr_size",  "thr_rate",
                            "thr_lag",    "thr_cbblock", "thr_xact",  "thr_expiry"};
    for (int i = 0; i < 9; i++)
        bt_make_items(c, tables[i], i == 3 ? 2000 : ROWS); /* thr_size: room for many steps */
    bt_exec(c, "CREATE TABLE public.thr_flag (on_ boolean NOT NULL);"
               "INSERT INTO public.thr_flag VALUES (false);"
               /* about 5 ms a key: a cost the batch size rule can measure, and large
                * against what a batch costs besides its keys on a loaded machine */
               "CREATE FUNCTION public.thr_slow(v integer) RETURNS integer LANGUAGE sql"
               " AS $$ SELECT v FROM pg_sleep(0.005) $$;"
               /* wide rows: every batch writes plenty of WAL */
               "ALTER TABLE thr_lag ADD COLUMN pad text;");
    PQfinish(c);
    defs[0] = items_def("thr.custom_v1", "thr_custom", COUNT, BATCH);
    defs[1] = items_def("thr.table_v1", "thr_table", COUNT, BATCH);
    /* the batch of ids 1..100 waits at id 50 (rows 1..49 updated and locked) */
    defs[2] = items_def("thr.block_v1", "thr_block",
                        "fixed = CASE WHEN t.id <> 50 OR public.bt_barrier(1101) THEN t.val * 2"
                        " END, counter = t.counter + 1",
                        BATCH);
    defs[3] = items_def("thr.size_v1", "thr_size",
                        "fixed = public.thr_slow(t.val * 2), counter = t.counter + 1", 200);
    defs[4] = items_def("thr.rate_v1", "thr_rate", COUNT, BATCH);
    /* 2 kB of random hex a row: incompressible enough that every batch writes WAL */
    defs[5] = items_def("thr.lag_v1", "thr_lag",
                        COUNT ", pad = (SELECT string_agg(md5(random()::text || g), '')"
                              " FROM generate_series(1, 64) g)",
                        20);
    defs[6] = items_def("thr.cbblock_v1", "thr_cbblock", NULL, BATCH);
    defs[6].needs_repair = "true";
    defs[6].mutate = cbblock_mutate;
    defs[7] = items_def("thr.xact_v1", "thr_xact", COUNT, BATCH);
    defs[8] = items_def("thr.expiry_v1", "thr_expiry", COUNT, BATCH);
    start_all(9);
    return 0;
}

/* Also the teardown of a group whose setup failed (cmocka runs it anyway): what the failed
 * setup never made is NULL, never the previous group's freed registry and throttle (a failed
 * aged-start used to free them a second time). */
static int teardown(void **state)
{
    (void)state;
    bt_set_throttle(NULL);
    bt_db_drop_registry(registry);
    registry = NULL;
    bf_throttle_free(throttle);
    throttle = NULL;
    return 0;
}

/* Configure one definition's entry (everything else off). */
static void configure(const char *id, const bf_throttle_config *cfg, double daemon_rate)
{
    char diag[BF_DIAG_MAX] = "";
    const char *ids[] = {id};
    bf_err err = bf_throttle_configure(throttle, NULL, ids, cfg, 1, daemon_rate, diag, sizeof diag);
    if (err != BF_OK)
        fail_msg("bf_throttle_configure: %s", diag);
}

/* Run a backfill to completion and check every row was applied exactly once. */
static void finish_and_check(bf_engine *e, bf_worker *w, const char *id, const char *table)
{
    for (int i = 0; i < 10000; i++) {
        bf_step_info info;
        assert_int_equal(bf_worker_step(w, &info), BF_OK);
        if (info.step == BF_STEP_COMPLETED)
            break;
        if (info.step == BF_STEP_IDLE || info.step == BF_STEP_LOST)
            assert_int_equal(bt_claim_poll(w, id, NULL, 5000), BF_OK);
    }
    bf_backfill b = bt_get(e, id);
    assert_int_equal(b.state, BF_STATE_COMPLETED);
    PGconn *c = bt_connect();
    assert_int_equal(bt_int(c, "SELECT count(*) FROM %s WHERE counter <> 1", table), 0);
    PQfinish(c);
}

static void test_custom_query_trips_and_releases(void **state)
{
    (void)state;
    bf_throttle_config cfg = {
        .custom_sql = "SELECT on_ FROM public.thr_flag", .wait_ms = 30000, .check_ms = 1};
    configure("thr.custom_v1", &cfg, 0);
    PGconn *c = bt_connect();
    bt_exec(c, "UPDATE public.thr_flag SET on_ = true");
    bf_engine *e = bt_engine(registry, "thr-custom", 5000);
    bf_worker *w = bt_claimed_worker(e, "thr.custom_v1");
    /* the step waits (30 s) on its own thread: the test looks at the row and the session */
    bt_step_thread t;
    bt_step_thread_start(&t, w, false);
    bf_engine *reader = bt_engine(registry, "reader", 0);
    bf_backfill b;
    for (int i = 0;; i++) {
        b = bt_get(reader, "thr.custom_v1");
        if (strcmp(b.throttle_signal, "custom") == 0)
            break;
        if (i > 20000)
            fail_msg("the row never showed the custom signal");
        usleep(1000);
    }
    assert_string_equal(b.throttle_value, "true");
    assert_true(b.has_throttled_since);
    assert_int_equal(b.rows_committed, 0);
    /* waiting holds no transaction and no lock on the table */
    assert_int_equal(bt_int(c, "SELECT count(*) FROM pg_stat_activity WHERE application_name ="
                               " 'buzz-backfill thr-custom' AND state <> 'idle'"),
                     0);
    assert_int_equal(bt_int(c,
                            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a"
                            " ON a.pid = l.pid WHERE a.application_name ="
                            " 'buzz-backfill thr-custom' AND l.relation = 'thr_custom'::regclass"),
                     0);
    /* a stop ends the wait long before its 30 s */
    bf_worker_stop(w);
    bt_step_thread_join(&t, 10);
    assert_int_equal(t.err, BF_OK);
    assert_int_equal(t.info.step, BF_STEP_THROTTLED);
    assert_non_null(strstr(t.info.detail, "throttled by custom"));
    bf_worker_free(w);

    /* released: the next step runs, and the row's throttle fields are cleared */
    bt_exec(c, "UPDATE public.thr_flag SET on_ = false");
    w = bt_claimed_worker(e, "thr.custom_v1");
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH);
    b = bt_get(reader, "thr.custom_v1");
    assert_string_equal(b.throttle_signal, "");
    assert_false(b.has_throttled_since);
    assert_int_equal(b.rows_committed, BATCH);
    /* a query that fails trips too (a signal that cannot be read is not healthy) */
    cfg.custom_sql = "SELECT 1 / 0";
    cfg.wait_ms = 1;
    configure("thr.custom_v1", &cfg, 0);
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_THROTTLED);
    assert_non_null(strstr(info.detail, "query failed (22012)"));
    /* a positive number is a wait in ms */
    cfg.custom_sql = "SELECT 5";
    configure("thr.custom_v1", &cfg, 0);
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_THROTTLED);
    assert_non_null(strstr(info.detail, "wait 5 ms"));
    cfg.custom_sql = "SELECT 0";
    configure("thr.custom_v1", &cfg, 0);
    finish_and_check(reader, w, "thr.custom_v1", "thr_custom");
    bf_worker_free(w);
    bf_engine_close(reader);
    bf_engine_close(e);
    PQfinish(c);
}

/* A throttle that lasts many leases, in many short waits, keeps its claim: the worker renews it
 * once a third of the lease has passed (worker.c step_throttled). Without that the claim would
 * expire while its holder still works, a sibling would take it over and count an attempt, and
 * a long throttle would end in failed. */
static void test_long_throttle_keeps_its_claim(void **state)
{
    (void)state;
    /* (thr.rate_v1 commits nothing here: test_rate_ceilings runs it later) */
    bf_throttle_config cfg = {.custom_sql = "SELECT true", .wait_ms = 20, .check_ms = 1};
    configure("thr.rate_v1", &cfg, 0);
    bf_engine *e = bt_engine(registry, "thr-long", 600); /* a lease of 600 ms */
    bf_worker *w = bt_claimed_worker(e, "thr.rate_v1");
    int64_t gen = bt_get(e, "thr.rate_v1").generation;
    PGconn *c = bt_connect();
    /* at least three leases of throttled steps, measured by PostgreSQL's clock */
    long long t0 = bt_int(c, "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint");
    while (bt_int(c, "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint") - t0 < 1800) {
        bf_step_info info;
        assert_int_equal(bf_worker_step(w, &info), BF_OK);
        assert_int_equal(info.step, BF_STEP_THROTTLED);
    }
    bf_backfill row = bt_get(e, "thr.rate_v1");
    assert_true(row.claimed); /* PostgreSQL says the claim is still valid */
    assert_int_equal(row.generation, gen);
    assert_int_equal(row.attempts, 0);
    assert_string_equal(row.throttle_signal, "custom");
    cfg.custom_sql = NULL;
    configure("thr.rate_v1", &cfg, 0);
    bf_worker_free(w);
    bf_engine_close(e);
    PQfinish(c);
}

/* Guard: backfill.c bf__row_from_result's "live": a claim counts as held, and its holder's
 * throttle fields are shown, only until it expires by PostgreSQL's clock. The owner stays on
 * the row (who held it last), and nothing of what it observed is shown as current. */
static void test_expired_claim_shows_no_throttle(void **state)
{
    (void)state;
    bf_throttle_config cfg = {.custom_sql = "SELECT true", .wait_ms = 1, .check_ms = 1};
    configure("thr.expiry_v1", &cfg, 0);
    bf_engine *e = bt_engine(registry, "thr-expiry", 2000);
    bf_worker *w = bt_claimed_worker(e, "thr.expiry_v1");
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_THROTTLED);
    bf_engine *reader = bt_engine(registry, "reader", 0);
    bf_backfill row = bt_get(reader, "thr.expiry_v1"); /* the step renewed the 2 s lease */
    assert_true(row.claimed);
    assert_string_equal(row.throttle_signal, "custom");
    assert_true(row.has_throttled_since);
    /* nobody steps any more: the claim runs out (PostgreSQL's clock, polled, bounded) */
    PGconn *c = bt_connect();
    for (int i = 0; bt_int(c, "SELECT count(*) FROM buzz_backfill.backfill WHERE id ="
                              " 'thr.expiry_v1' AND claim_expires_at < clock_timestamp()") == 0;
         i++) {
        if (i > 20000)
            fail_msg("the claim of thr.expiry_v1 did not expire");
        usleep(1000);
    }
    row = bt_get(reader, "thr.expiry_v1");
    assert_false(row.claimed);
    assert_true(row.has_claim_expires);
    assert_string_not_equal(row.claim_owner, "");
    assert_string_equal(row.throttle_signal, "");
    assert_string_equal(row.throttle_value, "");
    assert_false(row.has_throttled_since);
    cfg.custom_sql = NULL;
    configure("thr.expiry_v1", &cfg, 0);
    bf_worker_free(w);
    bf_engine_close(reader);
    bf_engine_close(e);
    PQfinish(c);
}

static void test_waiters_on_the_table(void **state)
{
    (void)state;
    bf_throttle_config cfg = {.lock_waiters = 1, .wait_ms = 1, .check_ms = 1};
    configure("thr.table_v1", &cfg, 0);
    /* a holds row 500; b waits for it: one session waiting on the target table */
    PGconn *a = bt_connect(), *b = bt_connect(), *c = bt_connect();
    bt_exec(a, "BEGIN; SELECT 1 FROM thr_table WHERE id = 500 FOR UPDATE");
    assert_int_equal(PQsendQuery(b, "UPDATE thr_table SET val = val WHERE id = 500"), 1);
    bt_wait_lock_waiters(c, 1);
    bf_engine *e = bt_engine(registry, "thr-table", 5000);
    bf_worker *w = bt_claimed_worker(e, "thr.table_v1");
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_THROTTLED);
    assert_non_null(strstr(info.detail, "lock_waiters: 1 waiting"));
    bf_backfill row = bt_get(e, "thr.table_v1");
    assert_string_equal(row.throttle_signal, "lock_waiters");
    assert_int_equal(row.rows_committed, 0);
    /* the contention ends: the backfill resumes on its own */
    bt_exec(a, "COMMIT");
    PGresult *r;
    while ((r = PQgetResult(b)) != NULL)
        PQclear(r);
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH);
    row = bt_get(e, "thr.table_v1");
    assert_string_equal(row.throttle_signal, "");
    finish_and_check(e, w, "thr.table_v1", "thr_table");
    bf_worker_free(w);
    bf_engine_close(e);
    PQfinish(a);
    PQfinish(b);
    PQfinish(c);
}

static void test_batch_that_blocks_shrinks(void **state)
{
    (void)state;
    bf_throttle_config cfg = {.lock_waiters = 1, .wait_ms = 1, .batch_min = 10};
    configure("thr.block_v1", &cfg, 0);
    PGconn *holder = bt_connect(), *b = bt_connect(), *c = bt_connect();
    bt_lock(holder, BARRIER);
    bf_engine *e = bt_engine(registry, "thr-block", 30000);
    bf_worker *w = bt_claimed_worker(e, "thr.block_v1");
    bt_step_thread t;
    bt_step_thread_start(&t, w, false);
    bt_wait_waiters(c, BARRIER, 1); /* the batch updated ids 1..49 and waits at 50 */
    assert_int_equal(PQsendQuery(b, "UPDATE thr_block SET val = val WHERE id = 10"), 1);
    bt_wait_lock_waiters(c, 2); /* the batch (advisory) and b (row 10) */
    bt_unlock(holder, BARRIER);
    bt_step_thread_join(&t, 30);
    assert_int_equal(t.err, BF_OK);
    assert_int_equal(t.info.step, BF_STEP_BATCH);
    assert_int_equal(t.info.rows, BATCH);
    assert_non_null(strstr(t.info.detail, "lock_waiters: 1 blocked by a batch"));
    PGresult *r;
    while ((r = PQgetResult(b)) != NULL)
        PQclear(r);
    /* the next batches are half the size */
    bf_backfill row = bt_get(e, "thr.block_v1");
    assert_true(row.has_batch_size_current);
    assert_int_equal(row.batch_size_current, BATCH / 2);
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH);
    assert_int_equal(info.rows, BATCH / 2);
    finish_and_check(e, w, "thr.block_v1", "thr_block");
    bf_worker_free(w);
    bf_engine_close(e);
    PQfinish(holder);
    PQfinish(b);
    PQfinish(c);
}

/* The callback form counts the sessions its batch blocks too (batch.c bf__batch_callback runs
 * bf__throttle_blocked_sql before the fence): a session waiting on a row the batch updated,
 * while the batch waits at a barrier inside its transaction, halves the next batches. */
static void test_callback_batch_that_blocks_shrinks(void **state)
{
    (void)state;
    bf_throttle_config cfg = {.lock_waiters = 1, .wait_ms = 1, .batch_min = 10};
    configure("thr.cbblock_v1", &cfg, 0);
    PGconn *holder = bt_connect(), *b = bt_connect(), *c = bt_connect();
    bt_lock(holder, 1102);
    bf_engine *e = bt_engine(registry, "thr-cbblock", 30000);
    bf_worker *w = bt_claimed_worker(e, "thr.cbblock_v1");
    bt_step_thread t;
    bt_step_thread_start(&t, w, false);
    bt_wait_waiters(c, 1102, 1); /* ids 1..100 updated, locked, and the batch waits */
    assert_int_equal(PQsendQuery(b, "UPDATE thr_cbblock SET val = val WHERE id = 10"), 1);
    bt_wait_lock_waiters(c, 2);
    bt_unlock(holder, 1102);
    bt_step_thread_join(&t, 30);
    assert_int_equal(t.err, BF_OK);
    assert_int_equal(t.info.step, BF_STEP_BATCH);
    assert_non_null(strstr(t.info.detail, "lock_waiters: 1 blocked by a batch"));
    PGresult *r;
    while ((r = PQgetResult(b)) != NULL)
        PQclear(r);
    assert_int_equal(bt_get(e, "thr.cbblock_v1").batch_size_current, BATCH / 2);
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.rows, BATCH / 2);
    finish_and_check(e, w, "thr.cbblock_v1", "thr_cbblock");
    bf_worker_free(w);
    bf_engine_close(e);
    PQfinish(holder);
    PQfinish(b);
    PQfinish(c);
}

/* xact_age: a transaction of another session open for a second or more makes the step wait
 * (the oldest xact_start in pg_stat_activity); once it ends, the backfill goes on, whatever
 * other databases of the server hold open (guard: the datname filter of throttle.c's xact_age
 * read; without it the step after the COMMIT is still throttled by the other database's
 * transaction, as it was when another suite ran beside this one). */
static void test_long_transaction_throttles(void **state)
{
    (void)state;
    bf_throttle_config cfg = {.xact_age_s = 1, .wait_ms = 1, .check_ms = 1};
    configure("thr.xact_v1", &cfg, 0);
    PGconn *old = bt_connect(), *c = bt_connect();
    /* a transaction of another database, open throughout: it does not count */
    PGconn *other = PQconnectdb(getenv("BUZZ_TEST_PG_URL"));
    assert_int_equal(PQstatus(other), CONNECTION_OK);
    bt_exec(other, "BEGIN; SELECT txid_current()");
    bt_exec(old, "BEGIN; SELECT txid_current()");
    /* its age, by PostgreSQL's clock, passes the threshold (that session's: other suites'
     * sessions of the same server may be idle in a transaction too) */
    while (bt_int(c,
                  "SELECT count(*) FROM pg_stat_activity WHERE pid = %d AND xact_start <"
                  " clock_timestamp() - interval '1100 ms' AND state = 'idle in transaction'",
                  PQbackendPID(old)) == 0)
        usleep(10000);
    bf_engine *e = bt_engine(registry, "thr-xact", 30000);
    bf_worker *w = bt_claimed_worker(e, "thr.xact_v1");
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_THROTTLED);
    assert_non_null(strstr(info.detail, "throttled by xact_age: "));
    assert_string_equal(bt_get(e, "thr.xact_v1").throttle_signal, "xact_age");
    bt_exec(old, "COMMIT");
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH);
    finish_and_check(e, w, "thr.xact_v1", "thr_xact");
    bf_worker_free(w);
    bf_engine_close(e);
    bt_exec(other, "COMMIT");
    PQfinish(other);
    PQfinish(old);
    PQfinish(c);
}

static void test_size_converges(void **state)
{
    (void)state;
    /* through the worker: from 200 keys (about 1 s) toward 100 ms, about 20 keys. The rule
     * keeps a batch's keys at least 4 times its fixed part (the fence, the commit): under 40
     * keys while that part stays under 50 ms. At 2 ms a key and 40 ms, a fixed part over 20 ms
     * (two scripts/test.sh side by side) made the stored next size 70. */
    bf_throttle_config cfg = {.batch_target_ms = 100, .batch_min = 2};
    configure("thr.size_v1", &cfg, 0);
    bf_engine *e = bt_engine(registry, "thr-size", 30000);
    bf_worker *w = bt_claimed_worker(e, "thr.size_v1");
    long sizes[12];
    for (int i = 0; i < 12; i++) {
        bf_step_info info;
        assert_int_equal(bf_worker_step(w, &info), BF_OK);
        assert_int_equal(info.step, BF_STEP_BATCH);
        sizes[i] = info.rows;
        assert_true(info.rows <= 200); /* never above the declared bound */
    }
    char shown[160] = "";
    for (int i = 0; i < 12; i++)
        snprintf(shown + strlen(shown), sizeof shown - strlen(shown), " %ld", sizes[i]);
    print_message("keys a step toward 100 ms a batch at ~5 ms a key:%s\n", shown);
    assert_int_equal(sizes[0], 200);
    /* settled near 20 keys: generous for a loaded machine (slower keys, smaller batches) */
    assert_true(sizes[11] >= 4 && sizes[11] <= 40);
    assert_true(sizes[10] >= 4 && sizes[10] <= 40);
    bf_backfill row = bt_get(e, "thr.size_v1");
    assert_true(row.has_batch_size_current && row.batch_size_current <= 40);
    /* a new owner starts where the last one was */
    bf_worker_free(w);
    w = bt_claimed_worker(e, "thr.size_v1");
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_true(info.rows <= 40);
    cfg.batch_target_ms = 0; /* off again: back to the declared size, doubling each step */
    configure("thr.size_v1", &cfg, 0);
    assert_int_equal(bf_worker_step(w, &info), BF_OK); /* the size the target left */
    long prev = info.rows;
    assert_true(prev <= 40);
    for (int i = 0; i < 6 && prev < 200; i++) {
        assert_int_equal(bf_worker_step(w, &info), BF_OK);
        prev = prev * 2 < 200 ? prev * 2 : 200;
        assert_int_equal(info.rows, prev);
    }
    assert_int_equal(info.rows, 200);
    finish_and_check(e, w, "thr.size_v1", "thr_size");
    bf_worker_free(w);
    bf_engine_close(e);
}

static void test_rate_ceilings(void **state)
{
    (void)state;
    /* 100 keys at 100 keys/s: the step and its wait take 1 s (at 1,000 keys/s, 100 ms, a
     * batch on a saturated machine sometimes took all of it, and nothing was left to wait) */
    bf_throttle_config cfg = {.max_rows_per_second = 100};
    configure("thr.rate_v1", &cfg, 0);
    bf_engine *e = bt_engine(registry, "thr-rate", 30000);
    bf_worker *w = bt_claimed_worker(e, "thr.rate_v1");
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH);
    /* the second the keys need at that rate, counted from the step's start: the wait is what
     * is left of it once the batch is done */
    const char *waited = strstr(info.detail, "throttled by rate: 100 rows/s (waited ");
    if (waited == NULL)
        fail_msg("no rate wait after a step: %s", info.detail);
    long ms = strtol(waited + strlen("throttled by rate: 100 rows/s (waited "), NULL, 10);
    assert_true(ms >= 1 && ms <= 1000);
    bf_backfill row = bt_get(e, "thr.rate_v1");
    assert_string_equal(row.throttle_signal, "rate");
    /* the process's ceiling, lower than the definition's, sets the wait */
    configure("thr.rate_v1", &cfg, 50);
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_non_null(strstr(info.detail, "throttled by rate: 50 rows/s"));
    /* no ceiling: no wait, and the row is no longer throttled */
    cfg.max_rows_per_second = 0;
    configure("thr.rate_v1", &cfg, 0);
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_null(strstr(info.detail, "throttled"));
    row = bt_get(e, "thr.rate_v1");
    assert_string_equal(row.throttle_signal, "");
    finish_and_check(e, w, "thr.rate_v1", "thr_rate");
    bf_worker_free(w);
    bf_engine_close(e);
}

static void test_replica_lag_throttles_and_resumes(void **state)
{
    (void)state;
    char *url = pg_side("standby-start", true);
    PGconn *standby = PQconnectdb(url);
    assert_int_equal(PQstatus(standby), CONNECTION_OK);
    PGresult *r = PQexec(standby, "SELECT pg_wal_replay_pause()");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    PQclear(r);
    /* each batch of 20 wide rows writes tens of kB of WAL */
    bf_throttle_config cfg = {.replica_lag_bytes = 128 * 1024, .wait_ms = 50, .check_ms = 1};
    configure("thr.lag_v1", &cfg, 0);
    bf_engine *e = bt_engine(registry, "thr-lag", 30000);
    bf_worker *w = bt_claimed_worker(e, "thr.lag_v1");
    bf_step_info info = {0};
    int batches = 0;
    while (batches < 25) {
        assert_int_equal(bf_worker_step(w, &info), BF_OK);
        if (info.step != BF_STEP_BATCH)
            break;
        batches++;
    }
    if (info.step != BF_STEP_THROTTLED)
        fail_msg("no replica_lag throttle after %d batches (step %s)", batches,
                 bf_step_name(info.step));
    assert_non_null(strstr(info.detail, "throttled by replica_lag"));
    bf_backfill row = bt_get(e, "thr.lag_v1");
    assert_string_equal(row.throttle_signal, "replica_lag");
    /* still behind: still throttled, nothing committed */
    int64_t committed = row.batches_committed;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_THROTTLED);
    assert_int_equal(bt_get(e, "thr.lag_v1").batches_committed, committed);
    /* the replica catches up: the backfill resumes on its own */
    r = PQexec(standby, "SELECT pg_wal_replay_resume()");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    PQclear(r);
    for (int i = 0; info.step == BF_STEP_THROTTLED; i++) {
        if (i > 2000)
            fail_msg("still throttled after the replica resumed");
        assert_int_equal(bf_worker_step(w, &info), BF_OK);
    }
    assert_int_equal(info.step, BF_STEP_BATCH);
    PQfinish(standby);
    (void)pg_side("standby-stop >/dev/null", false);
    free(url);
    cfg.replica_lag_bytes = 0;
    configure("thr.lag_v1", &cfg, 0);
    finish_and_check(e, w, "thr.lag_v1", "thr_lag");
    bf_worker_free(w);
    bf_engine_close(e);
}

static void test_configure_refuses_bad_values(void **state)
{
    (void)state;
    bf_throttle_config good = {.batch_target_ms = 70, .wait_ms = 3};
    configure("thr.rate_v1", &good, 0);
    char diag[BF_DIAG_MAX] = "";
    const char *ids[] = {"thr.rate_v1"};
    bf_throttle_config bad = {.batch_min = 50, .batch_max = 10};
    assert_int_equal(bf_throttle_configure(throttle, NULL, ids, &bad, 1, 0, diag, sizeof diag),
                     BF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(diag, "batch_min 50 is above batch_max 10"));
    bad = (bf_throttle_config){.lock_waiters = -1};
    assert_int_equal(bf_throttle_configure(throttle, &bad, NULL, NULL, 0, 0, diag, sizeof diag),
                     BF_ERR_INVALID_ARGUMENT);
    const char *bad_id[] = {"Not An Id"};
    assert_int_equal(bf_throttle_configure(throttle, NULL, bad_id, &good, 1, 0, diag, sizeof diag),
                     BF_ERR_INVALID_ARGUMENT);
    assert_int_equal(bf_throttle_configure(throttle, NULL, NULL, NULL, 0, -1, diag, sizeof diag),
                     BF_ERR_INVALID_ARGUMENT);
    /* a custom query the workers could not copy whole is refused, never cut */
    static char long_sql[BF_THROTTLE_SQL_MAX + 1];
    memset(long_sql, ' ', BF_THROTTLE_SQL_MAX);
    memcpy(long_sql, "SELECT true", 11);
    bad = (bf_throttle_config){.custom_sql = long_sql};
    assert_int_equal(bf_throttle_configure(throttle, &bad, NULL, NULL, 0, 0, diag, sizeof diag),
                     BF_ERR_INVALID_ARGUMENT);
    long_sql[BF_THROTTLE_SQL_MAX - 1] = '\0'; /* one byte shorter: accepted */
    assert_int_equal(bf_throttle_configure(throttle, &bad, NULL, NULL, 0, 0, diag, sizeof diag),
                     BF_OK);
    assert_int_equal(bf_throttle_configure(throttle, NULL, ids, &good, 1, 0, diag, sizeof diag),
                     BF_OK);
    /* the previous configuration stays */
    bf_throttle_config now;
    char sql[64];
    bf_throttle_get(throttle, "thr.rate_v1", &now, sql, sizeof sql);
    assert_int_equal(now.batch_target_ms, 70);
    assert_int_equal(now.wait_ms, 3);
}

/* ---- the xid_age signal, on a cluster whose transaction IDs are old ------------------------ */

/* The signal trips at a whole percentage of the 2^31 wraparound horizon, 21 million IDs a
 * percent, which no test can spend: scripts/pg.sh aged-start makes a scratch cluster whose next
 * transaction ID begins 40 million in (pg_resetwal -x), so every database there is at about
 * 1.9 %. This group points BUZZ_TEST_PG_URL at it before anything connects, with one
 * definition (defs[0], the first group's registry is gone). */
static int aged_setup(void **state)
{
    (void)state;
    char *url = pg_side("aged-start", true);
    setenv("BUZZ_TEST_PG_URL", url, 1);
    free(url);
    bt_db_create("throttle_xid");
    PGconn *c = bt_connect();
    bt_make_items(c, "thr_xid", ROWS);
    /* the premise: this database is past 1 % of the horizon and short of 2 % */
    assert_int_equal(bt_int(c, "SELECT floor(age(datfrozenxid) * 100.0 / 2147483648)"
                               " FROM pg_database WHERE datname = current_database()"),
                     1);
    PQfinish(c);
    defs[0] = items_def("thr.xid_v1", "thr_xid", COUNT, BATCH);
    start_all(1);
    return 0;
}

static int aged_teardown(void **state)
{
    teardown(state);
    (void)pg_side("aged-stop >/dev/null", false);
    return 0;
}

static void test_xid_age_trips_and_releases(void **state)
{
    (void)state;
    bf_throttle_config cfg = {.xid_age_pct = 1, .wait_ms = 1, .check_ms = 1};
    configure("thr.xid_v1", &cfg, 0);
    bf_engine *e = bt_engine(registry, "thr-xid", 30000);
    bf_worker *w = bt_claimed_worker(e, "thr.xid_v1");
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_THROTTLED);
    assert_non_null(strstr(info.detail, "throttled by xid_age: 1% (limit 1%)"));
    bf_backfill b = bt_get(e, "thr.xid_v1");
    assert_string_equal(b.throttle_signal, "xid_age");
    assert_int_equal(b.rows_covered, 0);

    cfg.xid_age_pct = 2; /* above the database's age: released */
    configure("thr.xid_v1", &cfg, 0);
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH);
    assert_string_equal(bt_get(e, "thr.xid_v1").throttle_signal, "");
    finish_and_check(e, w, "thr.xid_v1", "thr_xid");
    bf_worker_free(w);
    bf_engine_close(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_custom_query_trips_and_releases),
        cmocka_unit_test(test_long_throttle_keeps_its_claim),
        cmocka_unit_test(test_expired_claim_shows_no_throttle),
        cmocka_unit_test(test_waiters_on_the_table),
        cmocka_unit_test(test_batch_that_blocks_shrinks),
        cmocka_unit_test(test_callback_batch_that_blocks_shrinks),
        cmocka_unit_test(test_long_transaction_throttles),
        cmocka_unit_test(test_size_converges),
        cmocka_unit_test(test_rate_ceilings),
        cmocka_unit_test(test_replica_lag_throttles_and_resumes),
        cmocka_unit_test(test_configure_refuses_bad_values),
    };
    const struct CMUnitTest aged[] = {
        cmocka_unit_test(test_xid_age_trips_and_releases),
    };
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    return failed + cmocka_run_group_tests(aged, aged_setup, aged_teardown);
}
