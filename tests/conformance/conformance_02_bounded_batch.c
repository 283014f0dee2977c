/*
 * conformance_02_bounded_batch.c - spec conformance test 2, bounded batch.
 *
 * A source set larger than one batch advances only within the declared batch bound per
 * transaction; a compound key with ties on its first column neither skips nor repeats rows
 * when a batch boundary falls inside a tie group; a batch that outlives its statement timeout
 * rolls back its target mutations and its checkpoint and is classified retryable; a callback
 * that touches more rows than the bound commits nothing and ends in the bounded failure
 * disposition (failed, error_class batch_bound) instead of widening the batch; a declarative
 * definition over a key that is not unique (whose key range could hold more rows than the
 * batch's keys) is refused at start, and blocks before its first batch when its unique index
 * disappears after start; likewise a key column that may be NULL, even under a unique index.
 *
 * Guards proved (removing any one of them fails this test):
 *   - the LIMIT of the keyset selection, registry.c add_keyset ("LIMIT $n"), with the bound
 *     check of buzz_backfill.batch_verdict (migrate.c, "selected > batch_limit"): without the
 *     LIMIT one step selects the whole source set and the verdict rolls it back;
 *   - batch_verdict's "touched > batch_limit": the statement's count of the rows its mutation
 *     changed, checked directly on the function (the unique-key check below keeps a
 *     declarative batch from ever reaching it);
 *   - the unique-key check (backfill.c bf__key_unique, called by actions.c action_start and
 *     worker.c step_prerequisite): a key a unique index does not cover is refused at start and
 *     blocks a claim, so a batch's key range cannot hold more rows than its keys;
 *   - the NOT NULL requirement on the ordering key (registry.c compile_unique's 'nullable'
 *     verdict, reported by backfill.c bf__key_unique): a unique index admits any number of
 *     NULL keys, which no keyset batch selects and which the captured bound cannot place, so a
 *     nullable key column is refused at start with a diagnostic that says NOT NULL, and blocks
 *     a claim when the constraint is dropped after start; the column names in that check are
 *     quoted (registry.c add_key_names), so a key column named "null" is checked too;
 *   - the row budget of bf_txn_exec (txn.c txn_run: "rows > txn->limit - txn->touched");
 *   - the statement timeout of a batch (batch.c bf__batch_loop sets statement_timeout for the
 *     CALL of the batch loop, step_ms plus statement_timeout_ms; engine.c
 *     bf__set_local_timeouts for callbacks): without it a blocked batch never ends and the
 *     step does not return within the deadline.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "bt.h"

#define BARRIER_DECL  21
#define BARRIER_CB    22
#define SHORT_TIMEOUT 300   /* ms: statement_timeout of the dedicated engine */
#define STEP_DEADLINE 20000 /* ms: a timed-out step must have returned long before this */
#define BACKOFF_WAIT  20000 /* ms: upper bound on waiting for the retry backoff */

/* ---- definitions ------------------------------------------------------------------------ */

static const bf_definition bounded_def = {
    .id = "bounded.items_v1",
    .table = "bb_items",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 100,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2, counter = t.counter + 1",
};

/* 37 rows per batch over groups of 50 rows sharing one timestamp: boundaries fall in ties */
static const bf_definition ties_def = {
    .id = "bounded.events_v1",
    .table = "bb_events",
    .key = {{"ts", BF_KEY_TIMESTAMPTZ}, {"eid", BF_KEY_BYTEA}},
    .nkey = 2,
    .batch_size = 37,
    .needs_repair = "t.kind_norm IS NULL",
    .update_set = "kind_norm = t.kind + 100, counter = t.counter + 1",
    .postcondition = "t.kind_norm = t.kind + 100 AND t.counter = 1",
};

/* the declarative batch waits at the barrier on row 150, in the middle of its mutation */
static const bf_definition slow_def = {
    .id = "bounded.slow_v1",
    .table = "bb_slow",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 100,
    .needs_repair = "t.fixed IS NULL AND (t.id <> 150 OR bt_barrier(21))",
    .update_set = "fixed = t.val * 2, counter = t.counter + 1",
    .retry = {.max_attempts = 5, .base_ms = 1, .cap_ms = 5},
};

/* mutate the whole batch, then wait at the barrier: the mutation is certainly done (SQL
 * statements only, bt_sql_mutate: conformance/definitions/bounded.slow_cb_v1.def stands in) */
static const char *slow_sql[] = {
    "UPDATE bb_slowcb t SET fixed = t.val * 2, counter = t.counter + 1"
    " FROM bf_batch b WHERE t.id = b.id AND t.fixed IS NULL",
    "DO $$BEGIN PERFORM bt_barrier(22); END$$",
    NULL,
};

static const bf_definition slow_cb_def = {
    .id = "bounded.slow_cb_v1",
    .table = "bb_slowcb",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 100,
    .needs_repair = "t.fixed IS NULL",
    .mutate = bt_sql_mutate,
    .arg = slow_sql,
    .retry = {.max_attempts = 5, .base_ms = 1, .cap_ms = 5},
};

/* a callback that reaches beyond its batch: 100 batch rows plus rows 251..300 */
static const char *over_sql[] = {
    "UPDATE bb_over t SET fixed = t.val * 2, counter = t.counter + 1"
    " WHERE t.id IN (SELECT id FROM bf_batch) OR t.id > 250",
    NULL,
};

static const bf_definition over_def = {
    .id = "bounded.over_v1",
    .table = "bb_over",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 100,
    .needs_repair = "t.fixed IS NULL",
    .mutate = bt_sql_mutate,
    .arg = over_sql,
};

/* operator error: the declared key is not unique, every id appears twice. 99 selected rows
 * end inside the pair of id 50, and the update reaches both rows of it: 100 touched. */
static const bf_definition dup_def = {
    .id = "bounded.dup_v1",
    .table = "bb_dup",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 99,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2, counter = t.counter + 1",
};

static const bf_definition uniq_def = {
    .id = "bounded.uniq_v1",
    .table = "bb_uniq",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2, counter = t.counter + 1",
};

/* operator error: a unique index covers the key, but the column admits NULL keys */
static const bf_definition nullkey_def = {
    .id = "bounded.nullkey_v1",
    .table = "bb_nullkey",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2, counter = t.counter + 1",
};

/* NOT NULL at start, dropped afterwards */
static const bf_definition nulllater_def = {
    .id = "bounded.nulllater_v1",
    .table = "bb_nulllater",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2, counter = t.counter + 1",
};

/* a key column named "null", nullable; another column's primary key is the only unique index */
static const bf_definition nullname_def = {
    .id = "bounded.nullname_v1",
    .table = "bb_nullname",
    .key = {{"null", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = 1",
};

static const bf_definition *const defs[] = {&bounded_def,   &ties_def,    &slow_def, &slow_cb_def,
                                            &over_def,      &dup_def,     &uniq_def, &nullkey_def,
                                            &nulllater_def, &nullname_def};
#define NDEFS (sizeof defs / sizeof defs[0])

static bf_registry *reg;
static bf_engine *admin;
static PGconn *conn;

static int setup(void **state)
{
    (void)state;
    bt_db_create("conf02");
    conn = bt_connect();
    bt_install_barrier(conn);
    bt_make_items(conn, "bb_items", 1000);
    bt_make_events(conn, "bb_events", 1000, 50);
    bt_exec(conn, "ALTER TABLE bb_events ADD COLUMN counter integer NOT NULL DEFAULT 0");
    bt_make_items(conn, "bb_slow", 300);
    bt_make_items(conn, "bb_slowcb", 300);
    bt_make_items(conn, "bb_over", 300);
    bt_exec(conn, "CREATE TABLE bb_dup (id bigint NOT NULL, val integer NOT NULL,"
                  " fixed integer, counter integer NOT NULL DEFAULT 0);"
                  "CREATE INDEX ON bb_dup (id);"
                  "INSERT INTO bb_dup (id, val) SELECT g / 2, g FROM generate_series(2, 201) g");
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

static void start(const char *id)
{
    assert_int_equal(bt_act(admin, BF_ACTION_START, id), BF_OK);
    assert_int_equal(bt_get(admin, id).state, BF_STATE_RUNNING);
}

/* ---- one step moves exactly one bound ------------------------------------------------- */

static void test_one_step_one_bound(void **state)
{
    (void)state;
    start("bounded.items_v1");
    bf_engine *we = bt_engine(reg, "worker", 30000);
    bf_worker *w = bt_claimed_worker(we, "bounded.items_v1");

    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH);
    assert_int_equal(info.rows, 100);
    assert_int_equal(info.touched, 100);
    assert_string_equal(info.checkpoint, "{100}");
    bf_backfill row = bt_get(admin, "bounded.items_v1");
    assert_string_equal(row.checkpoint, "100");
    assert_int_equal(row.rows_committed, 100);
    assert_int_equal(row.batches_committed, 1);
    assert_int_equal(bt_int(conn, "SELECT count(*) FROM bb_items WHERE id <= 100"
                                  " AND fixed = val * 2 AND counter = 1"),
                     100);
    assert_int_equal(bt_int(conn, "SELECT count(*) FROM bb_items WHERE id > 100"
                                  " AND fixed IS NULL AND counter = 0"),
                     900);

    /* the next step takes exactly the next bound */
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH);
    assert_int_equal(info.rows, 100);
    assert_string_equal(info.checkpoint, "{200}");
    assert_int_equal(bt_int(conn, "SELECT count(*) FROM bb_items WHERE counter <> 0"), 200);
    assert_int_equal(bt_int(conn, "SELECT max(id) FROM bb_items WHERE counter <> 0"), 200);

    bf_worker_free(w);
    bf_engine_close(we);
}

/* ---- compound key with ties: no skip, no repeat ---------------------------------------- */

static void test_compound_key_ties(void **state)
{
    (void)state;
    const char *id = "bounded.events_v1";
    start(id);
    bf_engine *we = bt_engine(reg, "worker", 30000);
    bf_worker *w = bt_claimed_worker(we, id);

    /* the first boundary falls inside the first tie group: 37 of its 49 rows done */
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH);
    assert_int_equal(info.rows, 37);
    static const char split_sql[] =
        "SELECT count(*) FROM bb_events e, buzz_backfill.backfill b"
        " WHERE b.id = 'bounded.events_v1' AND e.ts = b.checkpoint[1]::timestamptz"
        " AND e.eid %s b.checkpoint[2]::bytea AND e.counter = %d";
    assert_int_equal(bt_int(conn, split_sql, "<=", 1), 37);
    assert_int_equal(bt_int(conn, split_sql, ">", 0), 12);

    long total = 37, batches = 1;
    for (;;) {
        assert_int_equal(bf_worker_step(w, &info), BF_OK);
        if (info.step != BF_STEP_BATCH)
            break;
        assert_in_range(info.rows, 1, 37);
        total += info.rows;
        batches++;
        assert_true(batches <= 100);
    }
    assert_int_equal(info.step, BF_STEP_VALIDATING);
    assert_int_equal(total, 1000);
    assert_int_equal(batches, (1000 + 36) / 37);
    assert_int_equal(bt_int(conn, "SELECT count(*) FROM bb_events WHERE counter = 1"
                                  " AND kind_norm = kind + 100"),
                     1000);
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_COMPLETED);
    bf_backfill row = bt_get(admin, id);
    assert_int_equal(row.state, BF_STATE_COMPLETED);
    assert_int_equal(row.rows_committed, 1000);

    bf_worker_free(w);
    bf_engine_close(we);
}

/* ---- timeout: rollback and retryable --------------------------------------------------- */

/* Step w on another thread while barrier is held; the step must end by itself (the statement
 * timeout) well before the deadline. The barrier is released in any case before joining. */
static void step_past_timeout(bf_worker *w, int barrier, bf_step_info *info)
{
    bt_lock(conn, barrier);
    bt_step_thread t;
    bt_step_thread_start(&t, w, false);
    for (int waited = 0; waited < STEP_DEADLINE && !atomic_load(&t.done); waited += 5)
        usleep(5000);
    bool ended_by_itself = atomic_load(&t.done);
    bt_unlock(conn, barrier);
    bt_step_thread_join(&t, STEP_DEADLINE / 1000);
    assert_true(ended_by_itself);
    assert_int_equal(t.err, BF_OK);
    *info = t.info;
}

static void check_timed_out(const char *id, const char *table)
{
    bf_backfill row = bt_get(admin, id);
    assert_int_equal(row.state, BF_STATE_RUNNING);
    assert_int_equal(row.attempts, 1);
    assert_true(row.has_next_attempt);
    assert_string_equal(row.error_class, "retryable");
    assert_false(row.claimed);
    assert_string_equal(row.checkpoint, "100");
    assert_int_equal(row.batches_committed, 1);
    assert_int_equal(row.rows_committed, 100);
    assert_int_equal(bt_int(conn, "SELECT count(*) FROM %s WHERE counter <> 0", table), 100);
    assert_int_equal(
        bt_int(conn, "SELECT count(*) FROM %s WHERE id > 100 AND fixed IS NULL", table), 200);
}

static void run_timeout_case(const char *id, const char *table, int barrier)
{
    start(id);
    bf_engine *we = bt_engine_timeouts(reg, "short-timeout", 30000, SHORT_TIMEOUT, 30000);
    bf_worker *w = bt_claimed_worker(we, id);
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK); /* barrier open: 1..100 commit */
    assert_int_equal(info.step, BF_STEP_BATCH);

    step_past_timeout(w, barrier, &info);
    assert_int_equal(info.step, BF_STEP_RETRY);
    check_timed_out(id, table);

    /* after the backoff the same work commits, exactly once */
    assert_int_equal(bt_claim_poll(w, id, NULL, BACKOFF_WAIT), BF_OK);
    assert_int_equal(bt_step_until_not_batch(w, 100), BF_STEP_VALIDATING);
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_COMPLETED);
    assert_int_equal(bt_int(conn,
                            "SELECT count(*) FROM %s WHERE counter = 1"
                            " AND fixed = val * 2",
                            table),
                     300);
    assert_int_equal(bt_get(admin, id).attempts, 0);
    bf_worker_free(w);
    bf_engine_close(we);
}

static void test_timeout_declarative(void **state)
{
    (void)state;
    run_timeout_case("bounded.slow_v1", "bb_slow", BARRIER_DECL);
}

static void test_timeout_callback(void **state)
{
    (void)state;
    run_timeout_case("bounded.slow_cb_v1", "bb_slowcb", BARRIER_CB);
}

/* ---- mutations beyond the bound -------------------------------------------------------- */

static void check_batch_bound_failure(const char *id, const char *table, long rows)
{
    bf_backfill row = bt_get(admin, id);
    assert_int_equal(row.state, BF_STATE_FAILED);
    assert_string_equal(row.error_class, "batch_bound");
    assert_false(row.has_checkpoint);
    assert_false(row.claimed);
    assert_int_equal(row.batches_committed, 0);
    assert_int_equal(row.rows_committed, 0);
    assert_int_equal(
        bt_int(conn, "SELECT count(*) FROM %s WHERE fixed IS NULL AND counter = 0", table), rows);
}

static void run_bound_case(const char *id, const char *table, long rows)
{
    start(id);
    bf_engine *we = bt_engine(reg, "worker", 30000);
    bf_worker *w = bt_claimed_worker(we, id);
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_FAILED);
    check_batch_bound_failure(id, table, rows);
    bf_worker_free(w);
    bf_engine_close(we);
}

static void test_callback_beyond_bound(void **state)
{
    (void)state;
    run_bound_case("bounded.over_v1", "bb_over", 300);
}

static void test_declarative_beyond_bound(void **state)
{
    (void)state;
    /* the verdict refuses a batch whose mutation changed more rows than the bound */
    PGresult *v = PQexec(conn, "SELECT buzz_backfill.batch_verdict(100, 101, 1, 100)");
    assert_int_equal(PQresultStatus(v), PGRES_FATAL_ERROR);
    assert_string_equal(PQresultErrorField(v, PG_DIAG_SQLSTATE), "BFB01");
    PQclear(v);
    assert_int_equal(bt_int(conn, "SELECT buzz_backfill.batch_verdict(100, 100, 1, 100)"), 100);

    /* a key that is not unique: start is refused, nothing is captured or touched */
    bf_actor who = {.actor = "test-operator", .authority = "test"};
    bf_action_result res;
    assert_int_equal(bf_action_apply(admin, BF_ACTION_START, "bounded.dup_v1", &who, &res),
                     BF_ERR_DEFINITION);
    assert_non_null(strstr(bf_engine_diag(admin), "not unique"));
    bf_backfill row = bt_get(admin, "bounded.dup_v1");
    assert_int_equal(row.state, BF_STATE_PENDING);
    assert_false(row.has_bound);
    assert_int_equal(bt_int(conn,
                            "SELECT count(*) FROM buzz_backfill.audit WHERE backfill_id ="
                            " 'bounded.dup_v1' AND action = 'start' AND outcome LIKE 'rejected%%'"),
                     1);
    assert_int_equal(
        bt_int(conn, "SELECT count(*) FROM bb_dup WHERE fixed IS NULL AND counter = 0"), 200);

    /* unique at start, then the index disappears: the next claim blocks before any batch */
    bt_exec(conn, "CREATE TABLE bb_uniq (id bigint NOT NULL, val integer NOT NULL,"
                  " fixed integer, counter integer NOT NULL DEFAULT 0);"
                  "CREATE UNIQUE INDEX bb_uniq_id ON bb_uniq (id);"
                  "INSERT INTO bb_uniq (id, val) SELECT g, g FROM generate_series(1, 50) g");
    start("bounded.uniq_v1");
    bt_exec(conn, "DROP INDEX bb_uniq_id; CREATE INDEX ON bb_uniq (id);"
                  "INSERT INTO bb_uniq (id, val) VALUES (7, 7)");
    bf_engine *we = bt_engine(reg, "worker", 30000);
    bf_worker *w = bt_claimed_worker(we, "bounded.uniq_v1");
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BLOCKED);
    row = bt_get(admin, "bounded.uniq_v1");
    assert_int_equal(row.state, BF_STATE_BLOCKED);
    assert_string_equal(row.error_class, "prerequisite");
    assert_non_null(strstr(row.error_detail, "not unique"));
    assert_false(row.has_checkpoint);
    assert_int_equal(
        bt_int(conn, "SELECT count(*) FROM bb_uniq WHERE fixed IS NULL AND counter = 0"), 51);
    bf_worker_free(w);
    bf_engine_close(we);
}

/* Guard: the NOT NULL requirement on the ordering key (registry.c compile_unique 'nullable',
 * backfill.c bf__key_unique). Without it the unique index alone would let start capture a
 * bound over a key whose NULL rows no batch ever selects. */
static void test_nullable_key_refused(void **state)
{
    (void)state;
    /* unique index on a nullable column; two rows without a key, which the index allows */
    bt_exec(conn, "CREATE TABLE bb_nullkey (id bigint, val integer NOT NULL,"
                  " fixed integer, counter integer NOT NULL DEFAULT 0);"
                  "CREATE UNIQUE INDEX bb_nullkey_id ON bb_nullkey (id);"
                  "INSERT INTO bb_nullkey (id, val) SELECT g, g FROM generate_series(1, 50) g;"
                  "INSERT INTO bb_nullkey (id, val) VALUES (NULL, 51), (NULL, 52)");
    bf_actor who = {.actor = "test-operator", .authority = "test"};
    bf_action_result res;
    assert_int_equal(bf_action_apply(admin, BF_ACTION_START, "bounded.nullkey_v1", &who, &res),
                     BF_ERR_DEFINITION);
    assert_non_null(strstr(bf_engine_diag(admin), "NOT NULL"));
    bf_backfill row = bt_get(admin, "bounded.nullkey_v1");
    assert_int_equal(row.state, BF_STATE_PENDING);
    assert_false(row.has_bound);
    assert_int_equal(bt_int(conn, "SELECT count(*) FROM buzz_backfill.audit WHERE backfill_id ="
                                  " 'bounded.nullkey_v1' AND action = 'start'"
                                  " AND outcome LIKE 'rejected%%'"),
                     1);
    assert_int_equal(
        bt_int(conn, "SELECT count(*) FROM bb_nullkey WHERE fixed IS NULL AND counter = 0"), 52);

    /* declaring the column NOT NULL (after removing the keyless rows) is the remedy */
    bt_exec(conn, "DELETE FROM bb_nullkey WHERE id IS NULL;"
                  "ALTER TABLE bb_nullkey ALTER COLUMN id SET NOT NULL");
    start("bounded.nullkey_v1");

    /* NOT NULL at start, dropped afterwards: the next claim blocks before any batch */
    bt_exec(conn, "CREATE TABLE bb_nulllater (id bigint NOT NULL, val integer NOT NULL,"
                  " fixed integer, counter integer NOT NULL DEFAULT 0);"
                  "CREATE UNIQUE INDEX bb_nulllater_id ON bb_nulllater (id);"
                  "INSERT INTO bb_nulllater (id, val) SELECT g, g FROM generate_series(1, 50) g");
    start("bounded.nulllater_v1");
    bt_exec(conn, "ALTER TABLE bb_nulllater ALTER COLUMN id DROP NOT NULL");
    bf_engine *we = bt_engine(reg, "worker", 30000);
    bf_worker *w = bt_claimed_worker(we, "bounded.nulllater_v1");
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BLOCKED);
    row = bt_get(admin, "bounded.nulllater_v1");
    assert_int_equal(row.state, BF_STATE_BLOCKED);
    assert_string_equal(row.error_class, "prerequisite");
    assert_non_null(strstr(row.error_detail, "NOT NULL"));
    assert_false(row.has_checkpoint);
    assert_int_equal(
        bt_int(conn, "SELECT count(*) FROM bb_nulllater WHERE fixed IS NULL AND counter = 0"), 50);
    bf_worker_free(w);
    bf_engine_close(we);

    /* Guard: the quoted column names of compile_unique (add_key_names). Unquoted, a key column
     * named "null" reads as a NULL array element: it is never found nullable, and any unique
     * index of the table (here the primary key on pk) seems to cover it. */
    bt_exec(conn, "CREATE TABLE bb_nullname (pk bigint PRIMARY KEY, \"null\" bigint,"
                  " fixed integer);"
                  "INSERT INTO bb_nullname (pk, \"null\") SELECT g, g %% 5 FROM"
                  " generate_series(1, 50) g");
    assert_int_equal(bf_action_apply(admin, BF_ACTION_START, "bounded.nullname_v1", &who, &res),
                     BF_ERR_DEFINITION);
    assert_non_null(strstr(bf_engine_diag(admin), "NOT NULL"));
    /* NOT NULL but still not unique (ties on every value): refused as not unique */
    bt_exec(conn, "ALTER TABLE bb_nullname ALTER COLUMN \"null\" SET NOT NULL");
    assert_int_equal(bf_action_apply(admin, BF_ACTION_START, "bounded.nullname_v1", &who, &res),
                     BF_ERR_DEFINITION);
    assert_non_null(strstr(bf_engine_diag(admin), "not unique"));
    assert_int_equal(bt_get(admin, "bounded.nullname_v1").state, BF_STATE_PENDING);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_step_one_bound),
        cmocka_unit_test(test_compound_key_ties),
        cmocka_unit_test(test_timeout_declarative),
        cmocka_unit_test(test_timeout_callback),
        cmocka_unit_test(test_callback_beyond_bound),
        cmocka_unit_test(test_declarative_beyond_bound),
        cmocka_unit_test(test_nullable_key_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
