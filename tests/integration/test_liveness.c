/*
 * test_liveness.c - nothing a stalled process holds may freeze the engine (issue 8, items 1-5
 * and 11), proved at the engine API and the worker's production seams.
 *
 * Guards proved (removing any one fails the case named after it):
 *   - claim_sql's FOR UPDATE SKIP LOCKED (worker.c): a claimer never waits on a locked row
 *     (test_claim_skips_locked_row);
 *   - the session lock_timeout (engine.c engine_session_configure): admin actions and a
 *     registration that changes the row give up on a locked row instead of waiting, and reads
 *     never wait (test_actions_and_registration_bounded); a registration that changes nothing
 *     does not touch the row at all, so it does not wait either (backfill.c register_many_sql's
 *     `same`);
 *   - the session idle_in_transaction_session_timeout (lease / 2): a client stopped inside a
 *     transaction loses its session and its row locks before its lease runs out
 *     (test_stalled_client_loses_session);
 *   - the callback batch's fence and COMMIT in one round trip (batch.c bf__batch_callback): a
 *     process stopped while its fence runs still commits and releases the backfill row
 *     (test_fence_and_commit_one_round_trip);
 *   - claim_sql counting the attempt of an expired claim it takes over, failing the row when
 *     they are exhausted, and completion clearing the old error
 *     (test_takeover_counts_expired_attempts);
 *   - the validation lock taken before a validating row is claimed (worker_claim_id): no claim
 *     and no generation while another session validates (test_validation_busy_claims_nothing);
 *   - stalled validators terminated (validate.c bf__validation_lock)
 *     (test_stalled_validator_is_terminated);
 *   - the notice receiver and the once-per-outage connection log (engine.c)
 *     (test_notices_and_outage_go_to_the_log);
 *   - the checkpoint_text_length constraint and the constraint name in diagnostics
 *     (test_long_checkpoint_blocks);
 *   - add_loop_last's row_number() form for single bytea and uuid keys, which have no max()
 *     (test_bytea_and_uuid_keys_complete);
 *   - engine_describe: no DETAIL and no class 22 message in the log (test_logs_carry_no_row_data);
 *   - statements built with the string builder, never cut to a fixed buffer: kilobytes of
 *     definition fragments run to completion (test_long_definition_completes).
 *
 * Waits are on observable conditions (pg_locks, pg_stat_activity, the row), with deadlines;
 * the only waits on the clock are for leases to expire, which is what is being tested.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "bt.h"

#define ITEMS      "live_items"
#define ITEMS_ROWS 300
#define MARKER     "ROWDATA-MARKER-7731"
#define VLOCK      "1111883777" /* VALIDATION_LOCK_CLASS of validate.c */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- definitions ------------------------------------------------------------------------ */

static const bf_definition decl_def = {
    .id = "live.decl_v1",
    .table = ITEMS,
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 50,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2",
};

/* A callback definition whose mutation can be held by the test: it updates the batch's rows,
 * then, while stall_mutation is set, waits (client side, inside the transaction) until the test
 * clears it. */
static atomic_bool stall_mutation;
static atomic_bool mutation_stalled;

static bf_err cb_mutate(bf_txn *txn, void *arg)
{
    (void)arg;
    long rows = 0;
    bf_err err = bf_txn_exec(txn,
                             "UPDATE " ITEMS " t SET fixed = t.val * 2 FROM bf_batch b"
                             " WHERE t.id = b.id AND t.fixed IS NULL",
                             0, NULL, &rows);
    if (err != BF_OK)
        return err;
    if (atomic_load(&stall_mutation)) {
        atomic_store(&mutation_stalled, true);
        while (atomic_load(&stall_mutation))
            usleep(1000); /* a process stopped between two statements of its transaction */
    }
    return BF_OK;
}

static const bf_definition cb_def = {
    .id = "live.callback_v1",
    .table = ITEMS,
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 50,
    .needs_repair = "t.fixed IS NULL",
    .mutate = cb_mutate,
};

static const bf_definition retry_def = {
    .id = "live.retry_v1",
    .table = ITEMS,
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 50,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2",
    .retry = {.max_attempts = 2, .base_ms = 1, .cap_ms = 1},
};

static const bf_definition notice_def = {
    .id = "live.notice_v1",
    .table = ITEMS,
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 500,
    .needs_repair = "t.fixed IS NULL AND public.live_warn()",
    .update_set = "fixed = t.val * 2",
};

static const bf_definition blob_def = {
    .id = "live.blob_v1",
    .table = "live_blobs",
    .key = {{"k", BF_KEY_BYTEA}},
    .nkey = 1,
    .batch_size = 1,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = 1",
};

static const bf_definition check_def = {
    .id = "live.check_v1",
    .table = "live_notes",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = 1",
};

static const bf_definition cast_def = {
    .id = "live.cast_v1",
    .table = "live_notes",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.note::integer > 0",
    .update_set = "fixed = 2",
};

/* ---- fixtures --------------------------------------------------------------------------- */

static PGconn *pg;

static int setup(void **state)
{
    (void)state;
    bt_db_create("liveness");
    pg = bt_connect();
    bt_install_barrier(pg);
    static const bf_definition *const any[] = {&decl_def};
    bf_registry *reg = bt_registry(any, 1);
    bf_engine_close(bt_engine(reg, "migrator", 0)); /* the engine schema */
    bf_registry_free(reg);
    bt_exec(pg, "CREATE FUNCTION public.live_warn() RETURNS boolean LANGUAGE plpgsql AS $$"
                " BEGIN RAISE WARNING 'live-notice-marker'; RETURN true; END $$");
    /* bytea keys: one long key sorts before the short bound */
    bt_exec(pg, "CREATE TABLE live_blobs (k bytea PRIMARY KEY, fixed integer);"
                "INSERT INTO live_blobs (k) VALUES ('\\x01'::bytea || decode(repeat('00', 300),"
                " 'hex')), ('\\xff'::bytea)");
    bt_exec(pg, "CREATE TABLE live_notes (id bigint PRIMARY KEY, note text NOT NULL,"
                " fixed integer CONSTRAINT live_notes_fixed_negative CHECK (fixed < 0));"
                "INSERT INTO live_notes (id, note) SELECT g, '" MARKER "' || g"
                " FROM generate_series(1, 20) g");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    PQfinish(pg);
    bt_db_drop();
    return 0;
}

#define CASE(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

/* The items table and a registry of the given definitions, registered and started (every case
 * has a database of its own). */
static bf_registry *fresh(bf_engine **admin, const bf_definition *const *defs, size_t n)
{
    bt_make_items(pg, ITEMS, ITEMS_ROWS);
    bf_registry *reg = bt_registry(defs, n);
    *admin = bt_engine(reg, "operator", 0);
    assert_int_equal(bf_register_all(*admin), BF_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(bt_act(*admin, BF_ACTION_START, defs[i]->id), BF_OK);
    return reg;
}

static void finish(bf_engine *admin, bf_registry *reg)
{
    bf_engine_close(admin);
    bf_registry_free(reg);
}

/* ---- item 1: nothing waits on a locked row ---------------------------------------------- */

static void test_claim_skips_locked_row(void **state)
{
    (void)state;
    bf_engine *admin;
    static const bf_definition *const defs[] = {&decl_def};
    bf_registry *reg = fresh(&admin, defs, 1);
    bf_engine *we = bt_engine(reg, "worker", 30000);
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, we, NULL), BF_OK);
    PGconn *holder = bt_connect();
    bt_exec(holder, "BEGIN");
    bt_exec(holder, "SELECT 1 FROM buzz_backfill.backfill WHERE id = 'live.decl_v1' FOR UPDATE");
    /* lock_timeout is 20 s: a claim that waited would come back late with a lock timeout */
    int64_t t0 = now_ms();
    assert_int_equal(bf_worker_claim(w, "live.decl_v1", NULL), BF_ERR_NO_WORK);
    assert_int_equal(bf_worker_claim(w, NULL, NULL), BF_ERR_NO_WORK);
    assert_true(now_ms() - t0 < 5000);
    bt_exec(holder, "COMMIT");
    assert_int_equal(bf_worker_claim(w, NULL, NULL), BF_OK);
    PQfinish(holder);
    bf_worker_free(w);
    bf_engine_close(we);
    finish(admin, reg);
}

static void test_actions_and_registration_bounded(void **state)
{
    (void)state;
    bf_engine *admin;
    static const bf_definition *const defs[] = {&decl_def};
    bf_registry *reg = fresh(&admin, defs, 1);
    bf_engine *op = bt_engine_timeouts(reg, "operator-2", 30000, 20000, 200);
    PGconn *holder = bt_connect();
    /* the holder gives up by itself after 20 s, so a regression fails instead of hanging */
    bt_exec(holder, "SET idle_in_transaction_session_timeout = 20000");
    bt_exec(holder, "BEGIN");
    bt_exec(holder, "SELECT 1 FROM buzz_backfill.backfill WHERE id = 'live.decl_v1' FOR UPDATE");
    long long audits = bt_int(pg, "SELECT count(*) FROM buzz_backfill.audit");
    bf_actor who = {.actor = "op", .authority = "test"};
    bf_action_result res;
    int64_t t0 = now_ms();
    assert_int_equal(bf_action_apply(op, BF_ACTION_PAUSE, "live.decl_v1", &who, &res),
                     BF_ERR_RETRYABLE);
    assert_non_null(strstr(bf_engine_diag(op), "55P03"));
    /* the row as stored: registered without touching it; a new revision: bounded */
    assert_int_equal(bf_register_all(op), BF_OK);
    bf_definition revised = decl_def;
    revised.revision = "r2";
    const bf_definition *revised_defs[] = {&revised};
    bf_registry *reg2 = bt_registry(revised_defs, 1);
    bf_engine *op2 = bt_engine_timeouts(reg2, "operator-3", 30000, 20000, 200);
    assert_int_equal(bf_register_all(op2), BF_ERR_RETRYABLE);
    assert_non_null(strstr(bf_engine_diag(op2), "55P03"));
    bf_engine_close(op2);
    bf_registry_free(reg2);
    bf_backfill row;
    assert_int_equal(bf_get(op, "live.decl_v1", &row), BF_OK); /* reads never wait */
    assert_int_equal(row.state, BF_STATE_RUNNING);
    assert_true(now_ms() - t0 < 10000);
    /* the refused pause is audited (its own transaction: the audit takes no row lock) */
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM buzz_backfill.audit"), audits + 1);
    bt_exec(holder, "COMMIT");
    assert_int_equal(bf_action_apply(op, BF_ACTION_PAUSE, "live.decl_v1", &who, &res), BF_OK);
    PQfinish(holder);
    bf_engine_close(op);
    finish(admin, reg);
}

/* The pid of the one engine backend in the given state, 0 when none. */
static int backend_in_state(const char *st)
{
    return (int)bt_int(
        pg,
        "SELECT coalesce(max(pid), 0)::bigint FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name LIKE 'buzz-backfill%%'"
        " AND state = '%s'",
        st);
}

static void test_stalled_client_loses_session(void **state)
{
    (void)state;
    bf_engine *admin;
    static const bf_definition *const defs[] = {&cb_def};
    bf_registry *reg = fresh(&admin, defs, 1);
    bf_engine *we = bt_engine(reg, "stalled", 2000); /* idle in transaction: 1 s */
    bf_worker *w = bt_claimed_worker(we, "live.callback_v1");
    atomic_store(&mutation_stalled, false);
    atomic_store(&stall_mutation, true);
    bt_step_thread t;
    bt_step_thread_start(&t, w, false);
    while (!atomic_load(&mutation_stalled))
        usleep(1000);
    int pid = 0;
    for (int i = 0; i < 10000 && pid == 0; i++, usleep(1000))
        pid = backend_in_state("idle in transaction");
    assert_true(pid > 0);
    bt_wait_backend_gone(pg, pid); /* terminated by the server, not by anyone here */
    /* its row locks went with it: the rows it updated can be written at once */
    bt_exec(pg, "SET lock_timeout = 100");
    bt_exec(pg, "UPDATE " ITEMS " SET counter = counter WHERE id <= 50");
    bt_exec(pg, "RESET lock_timeout");
    atomic_store(&stall_mutation, false);
    bt_step_thread_join(&t, 60);
    /* nothing of the batch committed; the attempt is a retry on a new session */
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM " ITEMS " WHERE fixed IS NOT NULL"), 0);
    bf_backfill row = bt_get(admin, "live.callback_v1");
    assert_false(row.has_checkpoint);
    bf_worker_free(w);
    bf_engine_close(we);
    finish(admin, reg);
}

/* The child: claim the callback definition and run one step (its fence meets the barrier). */
static int fence_child(void *arg)
{
    const bf_registry *reg = arg;
    bf_engine *e = bt_child_engine(reg, "fence-child", 30000);
    bf_worker *w = NULL;
    if (e == NULL || bf_worker_new(&w, e, NULL) != BF_OK ||
        bf_worker_claim(w, "live.callback_v1", NULL) != BF_OK)
        return 2;
    bf_step_info info;
    bf_err err = bf_worker_step(w, &info);
    bf_worker_free(w);
    bf_engine_close(e);
    return err == BF_OK && info.step == BF_STEP_BATCH ? 0 : 3;
}

static void test_fence_and_commit_one_round_trip(void **state)
{
    (void)state;
    bf_engine *admin;
    static const bf_definition *const defs[] = {&cb_def};
    bf_registry *reg = fresh(&admin, defs, 1);
    atomic_store(&stall_mutation, false);
    /* the barrier is met by the fence (the only update that moves the checkpoint) */
    bt_exec(pg, "CREATE FUNCTION public.live_fence_barrier() RETURNS trigger LANGUAGE plpgsql"
                " AS $$ BEGIN PERFORM public.bt_barrier(7); RETURN NEW; END $$;"
                "CREATE TRIGGER live_fence_barrier BEFORE UPDATE ON buzz_backfill.backfill"
                " FOR EACH ROW WHEN (NEW.checkpoint IS DISTINCT FROM OLD.checkpoint)"
                " EXECUTE FUNCTION public.live_fence_barrier()");
    PGconn *holder = bt_connect();
    bt_lock(holder, 7);
    pid_t child = bt_spawn(fence_child, reg);
    bt_wait_waiters(pg, 7, 1);
    assert_int_equal(kill(child, SIGSTOP), 0); /* stopped while its fence runs */
    bt_unlock(holder, 7);
    /* the COMMIT was already on its way: the batch commits and the row is free while the
     * process is still stopped (with a separate COMMIT the row would stay locked until the
     * idle-in-transaction timeout, 15 s, killed the session and rolled the batch back) */
    bool free_row = false;
    int64_t t0 = now_ms();
    while (!free_row && now_ms() - t0 < 10000) {
        PGresult *r = PQexec(pg, "SELECT 1 FROM buzz_backfill.backfill WHERE id ="
                                 " 'live.callback_v1' FOR UPDATE NOWAIT");
        free_row = PQresultStatus(r) == PGRES_TUPLES_OK;
        PQclear(r);
        if (!free_row)
            usleep(2000);
    }
    assert_true(free_row);
    bf_backfill row = bt_get(admin, "live.callback_v1");
    assert_true(row.has_checkpoint);
    assert_string_equal(row.checkpoint, "50");
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM " ITEMS " WHERE fixed IS NOT NULL"), 50);
    assert_int_equal(kill(child, SIGCONT), 0);
    assert_int_equal(bt_wait_child(child), 0);
    bt_exec(pg, "DROP TRIGGER live_fence_barrier ON buzz_backfill.backfill;"
                "DROP FUNCTION public.live_fence_barrier()");
    PQfinish(holder);
    finish(admin, reg);
}

/* ---- item 2: an expired claim's attempt counts ------------------------------------------ */

/* Claim id with w once the current claim has expired; the claim's bf_err. */
static bf_err claim_after_expiry(bf_worker *w, const char *id)
{
    return bt_claim_poll(w, id, NULL, 20000);
}

static void test_takeover_counts_expired_attempts(void **state)
{
    (void)state;
    bf_engine *admin;
    static const bf_definition *const defs[] = {&retry_def};
    bf_registry *reg = fresh(&admin, defs, 1);
    const char *id = "live.retry_v1";
    /* a's claim expires (200 ms); b's must not while it completes the run on a loaded machine
     * (with 200 ms too, b's own claim expired between two steps at load 12 and its attempt
     * failed: "fenced out at commit") */
    bf_engine *ea = bt_engine(reg, "owner-a", 200), *eb = bt_engine(reg, "owner-b", 30000);
    bf_worker *a = bt_claimed_worker(ea, id), *b = NULL;
    assert_int_equal(bf_worker_new(&b, eb, NULL), BF_OK);
    /* a stops renewing; b takes over and counts a's attempt */
    assert_int_equal(claim_after_expiry(b, id), BF_OK);
    bf_backfill row = bt_get(admin, id);
    assert_int_equal(row.attempts, 1);
    assert_string_equal(row.error_class, "retryable");
    assert_non_null(strstr(row.error_detail, "expired before its work committed"));
    /* b completes the run: progress resets the attempts, completion clears the old error */
    bf_step_info info;
    for (int i = 0; i < 100 && row.state != BF_STATE_COMPLETED; i++) {
        assert_int_equal(bf_worker_step(b, &info), BF_OK);
        row = bt_get(admin, id);
    }
    assert_int_equal(row.state, BF_STATE_COMPLETED);
    assert_int_equal(row.attempts, 0);
    assert_string_equal(row.error_class, "");
    assert_string_equal(row.error_detail, "");
    /* the stale owner finds nothing to commit */
    assert_int_equal(bf_worker_step(a, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_LOST);
    bf_worker_free(a);
    bf_worker_free(b);
    bf_engine_close(ea);
    bf_engine_close(eb);
    finish(admin, reg);
}

static void test_expired_attempts_exhaust(void **state)
{
    (void)state;
    bf_engine *admin;
    static const bf_definition *const defs[] = {&retry_def};
    bf_registry *reg = fresh(&admin, defs, 1);
    const char *id = "live.retry_v1";
    bf_engine *ea = bt_engine(reg, "owner-a", 200), *eb = bt_engine(reg, "owner-b", 200),
              *ec = bt_engine(reg, "owner-c", 200);
    bf_worker *a = bt_claimed_worker(ea, id), *b = NULL, *c = NULL;
    assert_int_equal(bf_worker_new(&b, eb, NULL), BF_OK);
    assert_int_equal(bf_worker_new(&c, ec, NULL), BF_OK);
    assert_int_equal(claim_after_expiry(b, id), BF_OK);
    int64_t gen = bt_get(admin, id).generation;
    /* b stops too: the takeover that would be attempt 2 of 2 fails the row instead */
    bf_err err = BF_ERR_NO_WORK;
    bf_backfill row;
    for (int64_t t0 = now_ms(); now_ms() - t0 < 20000; usleep(5000)) {
        err = bf_worker_claim(c, id, NULL);
        row = bt_get(admin, id);
        if (err != BF_ERR_NO_WORK || row.state == BF_STATE_FAILED)
            break;
    }
    assert_int_equal(err, BF_ERR_NO_WORK);
    assert_int_equal(row.state, BF_STATE_FAILED);
    assert_int_equal(row.attempts, 2);
    assert_false(row.claimed);
    assert_true(row.generation > gen);
    assert_int_equal(bt_int(pg,
                            "SELECT count(*) FROM buzz_backfill.audit WHERE backfill_id = '%s'"
                            " AND action = 'worker' AND result_state = 'failed'",
                            id),
                     1);
    bf_step_info info;
    assert_int_equal(bf_worker_step(a, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_LOST);
    assert_int_equal(bf_worker_step(b, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_LOST);
    bf_worker_free(a);
    bf_worker_free(b);
    bf_worker_free(c);
    bf_engine_close(ea);
    bf_engine_close(eb);
    bf_engine_close(ec);
    finish(admin, reg);
}

/* ---- item 3: a busy validation lock costs no claim -------------------------------------- */

/* Run id to validating and leave it unclaimed. */
static void run_to_validating(bf_engine *e, const char *id)
{
    bf_worker *w = bt_claimed_worker(e, id);
    assert_int_equal(bt_step_until_not_batch(w, 100), BF_STEP_VALIDATING);
    assert_int_equal(bf_worker_release(w), BF_OK);
    bf_worker_free(w);
}

static void test_validation_busy_claims_nothing(void **state)
{
    (void)state;
    bf_engine *admin;
    static const bf_definition *const defs[] = {&decl_def};
    bf_registry *reg = fresh(&admin, defs, 1);
    bf_engine *we = bt_engine(reg, "validator", 30000);
    run_to_validating(we, "live.decl_v1");
    int64_t gen = bt_get(admin, "live.decl_v1").generation;
    PGconn *holder = bt_connect(); /* another validator (not stalled: not an engine session) */
    bt_exec(holder, "SELECT pg_advisory_lock(" VLOCK ", hashtext('live.decl_v1'))");
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, we, NULL), BF_OK);
    for (int i = 0; i < 50; i++)
        assert_int_equal(bf_worker_claim(w, NULL, NULL), BF_ERR_NO_WORK);
    assert_int_equal(bf_worker_run(w, true), BF_OK);
    bf_backfill row = bt_get(admin, "live.decl_v1");
    assert_int_equal(row.state, BF_STATE_VALIDATING);
    assert_int_equal(row.generation, gen);
    bt_exec(holder, "SELECT pg_advisory_unlock(" VLOCK ", hashtext('live.decl_v1'))");
    assert_int_equal(bf_worker_run(w, true), BF_OK);
    assert_int_equal(bt_get(admin, "live.decl_v1").state, BF_STATE_COMPLETED);
    PQfinish(holder);
    bf_worker_free(w);
    bf_engine_close(we);
    finish(admin, reg);
}

static void test_stalled_validator_is_terminated(void **state)
{
    (void)state;
    bf_engine *admin;
    static const bf_definition *const defs[] = {&decl_def};
    bf_registry *reg = fresh(&admin, defs, 1);
    bf_engine *we = bt_engine(reg, "validator", 300);
    run_to_validating(we, "live.decl_v1");
    /* an engine session that took the lock and then stopped (idle, outside a transaction) */
    PGconn *stalled = bt_connect();
    bt_exec(stalled, "SET application_name = 'buzz-backfill'");
    bt_exec(stalled, "SELECT pg_advisory_lock(" VLOCK ", hashtext('live.decl_v1'))");
    int pid = PQbackendPID(stalled);
    while (bt_int(pg,
                  "SELECT (clock_timestamp() - state_change > interval '300 ms')::int"
                  " FROM pg_stat_activity WHERE pid = %d",
                  pid) == 0)
        usleep(5000);
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, we, NULL), BF_OK);
    assert_int_equal(bf_worker_run(w, true), BF_OK);
    assert_int_equal(bt_get(admin, "live.decl_v1").state, BF_STATE_COMPLETED);
    bt_wait_backend_gone(pg, pid);
    PQfinish(stalled);
    bf_worker_free(w);
    bf_engine_close(we);
    finish(admin, reg);
}

/* ---- item 4: notices and outages in the log --------------------------------------------- */

static void test_notices_and_outage_go_to_the_log(void **state)
{
    (void)state;
    bf_engine *admin;
    static const bf_definition *const defs[] = {&notice_def};
    bf_registry *reg = fresh(&admin, defs, 1);
    bt_log_reset();
    bf_engine *we = bt_capture_engine(reg, "noticer", 30000);
    bf_worker *w = bt_claimed_worker(we, "live.notice_v1");
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH);
    assert_true(bt_log_count("database notice: WARNING sqlstate=01000: live-notice-marker") >= 1);
    assert_int_equal(bf_worker_release(w), BF_OK);
    bf_worker_free(w);

    /* an outage: the session is gone and no new one is allowed for a while */
    char *db = bt_text(pg, "SELECT current_database()");
    PGconn *server = PQconnectdb(getenv("BUZZ_TEST_PG_URL")); /* another database */
    assert_int_equal(PQstatus(server), CONNECTION_OK);
    bt_exec(server, "ALTER DATABASE \"%s\" WITH ALLOW_CONNECTIONS false", db);
    bt_exec(pg, "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name LIKE 'buzz-backfill%%'"
                " AND pid <> pg_backend_pid()");
    bt_log_reset();
    bf_backfill row;
    for (int i = 0; i < 5; i++)
        assert_int_equal(bf_get(we, "live.notice_v1", &row), BF_ERR_UNAVAILABLE);
    bt_exec(server, "ALTER DATABASE \"%s\" WITH ALLOW_CONNECTIONS true", db);
    PQfinish(server);
    assert_int_equal(bf_get(we, "live.notice_v1", &row), BF_OK);
    assert_int_equal(bt_log_count("database connection lost"), 1);
    assert_int_equal(bt_log_count("could not connect to database"), 1);
    assert_int_equal(bt_log_count("database connection restored"), 1);
    free(db);
    bf_engine_close(we);
    /* admin's session was terminated too: reconnects */
    finish(admin, reg);
}

/* ---- item 5 and 11: keys never cut, row data never logged ------------------------------- */

static void test_long_checkpoint_blocks(void **state)
{
    (void)state;
    static const bf_definition *const defs[] = {&blob_def};
    bf_registry *reg = bt_registry(defs, 1);
    bf_engine *admin = bt_engine(reg, "operator", 0);
    assert_int_equal(bf_register_all(admin), BF_OK);
    assert_int_equal(bt_act(admin, BF_ACTION_START, "live.blob_v1"), BF_OK);
    bf_worker *w = bt_claimed_worker(admin, "live.blob_v1");
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BLOCKED);
    bf_backfill row = bt_get(admin, "live.blob_v1");
    assert_int_equal(row.state, BF_STATE_BLOCKED);
    assert_false(row.has_checkpoint);
    assert_string_equal(row.error_class, "data_invariant");
    assert_non_null(strstr(row.error_detail, "constraint checkpoint_text_length"));
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM live_blobs WHERE fixed IS NOT NULL"), 0);
    bf_worker_free(w);
    finish(admin, reg);
}

static const bf_definition uuid_def = {
    .id = "live.uuid_v1",
    .table = "live_uuids",
    .key = {{"u", BF_KEY_UUID}},
    .nkey = 1,
    .batch_size = 7,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = 1",
};

static const bf_definition bytea_def = {
    .id = "live.bytea_v1",
    .table = "live_bytes",
    .key = {{"k", BF_KEY_BYTEA}},
    .nkey = 1,
    .batch_size = 7,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = 1",
};

/* Single-column keys of types without max() (add_loop_last's row_number() form). */
static void test_bytea_and_uuid_keys_complete(void **state)
{
    (void)state;
    bt_exec(pg,
            "CREATE TABLE live_uuids (u uuid PRIMARY KEY, fixed integer);"
            "INSERT INTO live_uuids (u) SELECT md5(g::text)::uuid FROM generate_series(1, 50) g;"
            "CREATE TABLE live_bytes (k bytea PRIMARY KEY, fixed integer);"
            "INSERT INTO live_bytes (k) SELECT decode(md5(g::text), 'hex')"
            " FROM generate_series(1, 50) g");
    static const bf_definition *const defs[] = {&uuid_def, &bytea_def};
    bf_registry *reg = bt_registry(defs, 2);
    bf_engine *admin = bt_engine(reg, "operator", 0);
    assert_int_equal(bf_register_all(admin), BF_OK);
    assert_int_equal(bt_act(admin, BF_ACTION_START, "live.uuid_v1"), BF_OK);
    assert_int_equal(bt_act(admin, BF_ACTION_START, "live.bytea_v1"), BF_OK);
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, admin, NULL), BF_OK);
    assert_int_equal(bf_worker_run(w, true), BF_OK);
    bf_worker_free(w);
    assert_int_equal(bt_get(admin, "live.uuid_v1").state, BF_STATE_COMPLETED);
    assert_int_equal(bt_get(admin, "live.bytea_v1").state, BF_STATE_COMPLETED);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM live_uuids WHERE fixed = 1"), 50);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM live_bytes WHERE fixed = 1"), 50);
    finish(admin, reg);
}

/* Item 5: statements are built with the string builder, never cut to a fixed buffer: a
 * definition whose fragments are several kilobytes long (a long needs_repair, update_set and
 * postcondition, as a generated definition may have) registers, runs through the batch loop,
 * the worker's transitions and validation, and completes. Before, a fixed-size buffer cut such a
 * statement with "..." into a syntax error and a failed backfill. */
static void test_long_definition_completes(void **state)
{
    (void)state;
    static char repair[8192], set[8192], post[8192];
    int n = snprintf(repair, sizeof repair, "t.fixed IS NULL");
    int m = snprintf(set, sizeof set, "fixed = t.val * 2");
    int k = snprintf(post, sizeof post, "t.fixed = t.val * 2");
    for (int i = 0; i < 150; i++) {
        n += snprintf(repair + n, sizeof repair - (size_t)n, " AND (t.val >= 0 OR t.val < %d)", i);
        m += snprintf(set + m, sizeof set - (size_t)m, " + 0 * %d", i);
        k += snprintf(post + k, sizeof post - (size_t)k, " AND (t.val >= 0 OR t.val < %d)", i);
    }
    assert_true(n > 4000 && m > 1000 && k > 4000);
    bf_definition def = {.id = "live.long_v1",
                         .table = ITEMS,
                         .key = {{"id", BF_KEY_BIGINT}},
                         .nkey = 1,
                         .batch_size = 40,
                         .needs_repair = repair,
                         .update_set = set,
                         .postcondition = post};
    const bf_definition *const defs[] = {&def};
    bf_engine *admin = NULL;
    bf_registry *reg = fresh(&admin, defs, 1);
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, admin, NULL), BF_OK);
    assert_int_equal(bf_worker_run(w, true), BF_OK);
    bf_worker_free(w);
    bf_backfill row = bt_get(admin, "live.long_v1");
    assert_int_equal(row.state, BF_STATE_COMPLETED);
    assert_string_equal(row.error_class, "");
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM " ITEMS " WHERE fixed = val * 2"),
                     ITEMS_ROWS);
    finish(admin, reg);
}

static void test_logs_carry_no_row_data(void **state)
{
    (void)state;
    static const bf_definition *const defs[] = {&check_def, &cast_def};
    bf_registry *reg = bt_registry(defs, 2);
    bf_engine *admin = bt_engine(reg, "operator", 0);
    assert_int_equal(bf_register_all(admin), BF_OK);
    bt_log_reset();
    bf_engine *we = bt_capture_engine(reg, "redactor", 30000);
    const char *ids[] = {"live.check_v1", "live.cast_v1"};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(bt_act(admin, BF_ACTION_START, ids[i]), BF_OK);
        bf_worker *w = bt_claimed_worker(we, ids[i]);
        bf_step_info info;
        assert_int_equal(bf_worker_step(w, &info), BF_OK);
        assert_int_equal(info.step, BF_STEP_BLOCKED);
        bf_worker_free(w);
    }
    bf_backfill row = bt_get(admin, "live.check_v1");
    assert_non_null(strstr(row.error_detail, "constraint live_notes_fixed_negative"));
    assert_non_null(strstr(row.error_detail, "23514"));
    row = bt_get(admin, "live.cast_v1");
    assert_non_null(strstr(row.error_detail, "22P02"));
    /* both failures were logged, and neither carried the row's text */
    assert_true(bt_log_count("sqlstate=23514") >= 1);
    assert_true(bt_log_count("constraint=live_notes_fixed_negative") >= 1);
    assert_true(bt_log_count("sqlstate=22P02") >= 1);
    assert_int_equal(bt_log_count(MARKER), 0);
    assert_int_equal(bt_log_count("Failing row"), 0);
    bf_engine_close(we);
    finish(admin, reg);
}

/* bf_config_check: the lease must outlast a step's CALL and a lock wait. */
static void test_config_check_lease(void **state)
{
    (void)state;
    char diag[256] = "";
    bf_config ok = {.lease_ms = 30000}; /* defaults: 200 + 10000, 2000 */
    assert_int_equal(bf_config_check(&ok, diag, sizeof diag), BF_OK);
    bf_config short_lease = {.lease_ms = 10200};
    assert_int_equal(bf_config_check(&short_lease, diag, sizeof diag), BF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(diag, "lease_ms (10200) must be longer"));
    bf_config slow_locks = {
        .lease_ms = 5000, .statement_timeout_ms = 1000, .lock_timeout_ms = 5000};
    assert_int_equal(bf_config_check(&slow_locks, diag, sizeof diag), BF_ERR_INVALID_ARGUMENT);
    bf_config tight = {.lease_ms = 1201, .statement_timeout_ms = 1000, .lock_timeout_ms = 1000};
    assert_int_equal(bf_config_check(&tight, diag, sizeof diag), BF_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        CASE(test_config_check_lease),
        CASE(test_claim_skips_locked_row),
        CASE(test_actions_and_registration_bounded),
        CASE(test_stalled_client_loses_session),
        CASE(test_fence_and_commit_one_round_trip),
        CASE(test_takeover_counts_expired_attempts),
        CASE(test_expired_attempts_exhaust),
        CASE(test_validation_busy_claims_nothing),
        CASE(test_stalled_validator_is_terminated),
        CASE(test_notices_and_outage_go_to_the_log),
        CASE(test_long_checkpoint_blocks),
        CASE(test_bytea_and_uuid_keys_complete),
        CASE(test_long_definition_completes),
        CASE(test_logs_carry_no_row_data),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
