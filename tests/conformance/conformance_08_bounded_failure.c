/*
 * conformance_08_bounded_failure.c - spec conformance test 8, "Bounded failure": persistent
 * errors reach failed or blocked instead of retrying forever, and operator retry preserves the
 * bound and the checkpoint.
 *
 * Cases:
 *   (a) a retryable persistent error: the test holds a row lock on the target table, so every
 *       attempt at the second batch hits lock_timeout (55P03). With retry policy max_attempts
 *       3, attempts count up, the backoff is stored in PostgreSQL (next_attempt_at in the
 *       future, jittered exponential: [base/2, base] then [base, 2 base]), no worker can claim
 *       before it (the test polls claim attempts, bounded, until PostgreSQL lets one through),
 *       and the third attempt leaves the row failed with error_class retryable.
 *   (b) unmet prerequisites block with an actionable, bounded diagnostic free of SQL text and
 *       row values: a prerequisite that turns false, and a column the mutation needs that does
 *       not exist yet.
 *   (c) operator retry on failed and blocked rows resumes running at the identical bound and
 *       checkpoint with the generation advanced and attempts reset; after fixing the cause the
 *       backfill completes, every row mutated exactly once.
 *   (d) diagnostics are at most 512 bytes (terminator included) and never contain the server's
 *       raw message, query text, row values or the DSN: a mutation raising an error whose
 *       message carries a row value, and a callback reporting an oversized diagnostic.
 *
 * Guards proved (removing one makes a case here fail):
 *   - the retry bound: worker.c worker_fail's "b.attempts + 1 < max_attempts" test that turns
 *     the exhausting attempt into failed (and schedules next_attempt_at otherwise);
 *   - the classification table, classify.c sqlstate_table (55P03 retryable, 42703 and the
 *     42xxx undefined-object codes prerequisite, 22xxx data invariant), with worker.c
 *     failure_mode_of mapping classes to retry, block or fail.
 *   - the bound kept on retry: actions.c's retry transition leaves bound and checkpoint alone
 *     (with the immutable-bound trigger behind it). Before every Retry the source grows above
 *     the bound and inside it (grow_source), and completion must repair exactly the rows through
 *     the captured bound that were after the checkpoint: a Retry that recaptured the bound
 *     (seen: a mutant that re-runs the bound capture in the retry transition) fails here.
 * Also checked: engine.c bf__pg_error keeps the server's message out of every diagnostic.
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

#define ID_RETRY  "bounded.retry_v1"
#define ID_PREREQ "bounded.prereq_v1"
#define ID_COLUMN "bounded.column_v1"
#define ID_SECRET "bounded.secret_v1"
#define ID_LONG   "bounded.longdiag_v1"
#define BASE_MS   1000 /* long enough that "not before next_attempt_at" is robust */
#define MAX_TRIES 3
#define SECRET    "zq-marker-7731"

static const bf_definition def_retry = {
    .id = ID_RETRY,
    .table = "bounded_retry",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2, counter = t.counter + 1",
    .retry = {.max_attempts = MAX_TRIES, .base_ms = BASE_MS, .cap_ms = 10000},
};

static const bf_definition def_prereq = {
    .id = ID_PREREQ,
    .table = "bounded_prereq",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2, counter = t.counter + 1",
    .prerequisite = "(SELECT ready FROM public.bounded_flags)",
};

static const bf_definition def_column = {
    .id = ID_COLUMN,
    .table = "bounded_column",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2 + t.extra, counter = t.counter + 1",
};

static const bf_definition def_secret = {
    .id = ID_SECRET,
    .table = "bounded_secret",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = public.bounded_convert(t.val), counter = t.counter + 1",
};

/* A callback that reports a far oversized diagnostic with its verdict. It stays C in the files
 * variant (bt_files.h): a file's invariant_message is one line of at most 200 bytes, and the
 * point is a diagnostic four times the bound. */
static bf_err long_diag_mutate(bf_txn *txn, void *arg)
{
    (void)arg;
    char big[4 * BF_DIAG_MAX];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    bf_txn_set_diag(txn, "invariant does not hold: %s", big);
    return BF_ERR_DATA_INVARIANT;
}

static const bf_definition def_long = {
    .id = ID_LONG,
    .table = "bounded_long",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .mutate = long_diag_mutate,
};

static const bf_definition *const defs[] = {&def_retry, &def_prereq, &def_column, &def_secret,
                                            &def_long};

static const bf_actor operator_who = {.actor = "test-operator", .authority = "test"};

static bf_registry *registry;

static int setup(void **state)
{
    (void)state;
    const char *conninfo = bt_db_create("bounded_failure");
    (void)conninfo;
    PGconn *c = bt_connect();
    bt_make_items(c, "bounded_retry", 30);
    bt_make_items(c, "bounded_prereq", 30);
    bt_make_items(c, "bounded_column", 20);
    bt_make_items(c, "bounded_secret", 20);
    bt_make_items(c, "bounded_long", 20);
    bt_exec(c, "CREATE TABLE bounded_flags (ready boolean NOT NULL);"
               "INSERT INTO bounded_flags VALUES (true)");
    bt_exec(c, "CREATE FUNCTION public.bounded_convert(v integer) RETURNS integer"
               " LANGUAGE plpgsql AS $$ BEGIN"
               " RAISE EXCEPTION 'cannot convert row value %% (" SECRET ")', v"
               " USING ERRCODE = '22023'; END $$");
    PQfinish(c);
    registry = bt_registry(defs, sizeof defs / sizeof defs[0]);
    bf_engine *e = bt_engine(registry, "operator", 0);
    assert_int_equal(bf_register_all(e), BF_OK);
    bf_engine_close(e);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bt_db_drop_registry(registry);
    return 0;
}

/* A worker session with a short lock timeout (bt_engine's is long). */
static bf_engine *worker_engine(const char *owner)
{
    bf_config cfg = {.conninfo = bt_db_conninfo(),
                     .owner = owner,
                     .statement_timeout_ms = 20000,
                     .lock_timeout_ms = 100,
                     .step_batches = 1}; /* one batch per step, as bt_engine */
    bf_engine *e = NULL;
    assert_int_equal(bf_engine_open(&e, &cfg, registry), BF_OK);
    return e;
}

static bf_action_result act(bf_engine *e, bf_action action, const char *id)
{
    bf_action_result res;
    assert_int_equal(bf_action_apply(e, action, id, &operator_who, &res), BF_OK);
    return res;
}

static bf_step step_once(bf_worker *w, bf_step_info *info)
{
    assert_int_equal(bf_worker_step(w, info), BF_OK);
    return info->step;
}

/* At most BF_DIAG_MAX bytes with terminator; no server text, query text, row values or DSN. */
static void assert_clean_diag(const char *s)
{
    assert_true(strlen(s) < BF_DIAG_MAX);
    static const char *const forbidden[] = {
        "ERROR",          "canceling statement",
        "does not exist", "cannot convert",
        SECRET,           "SELECT",
        "UPDATE",         "WITH ",
        "t.val",          "127.0.0.1",
        "55432",          "postgres",
        "dbname",         "bt_bounded_",
        "password",
    };
    for (size_t i = 0; i < sizeof forbidden / sizeof forbidden[0]; i++)
        if (strstr(s, forbidden[i]) != NULL)
            fail_msg("diagnostic \"%s\" contains \"%s\"", s, forbidden[i]);
    /* nor any piece of the actual DSN */
    const char *dsn = bt_db_conninfo();
    assert_null(strstr(s, dsn));
}

/* Every diagnostic the engine recorded for id: the row, the step, the audit trail. */
static void assert_clean_everywhere(bf_engine *op, const char *id, const bf_step_info *info)
{
    bf_backfill row = bt_get(op, id);
    assert_clean_diag(row.error_detail);
    assert_clean_diag(row.validation_detail);
    assert_clean_diag(info->detail);
    bf_audit_entry audit[32];
    int n = 0;
    assert_int_equal(bf_audit_list(op, id, 0, audit, 32, &n), BF_OK);
    for (int i = 0; i < n; i++)
        assert_clean_diag(audit[i].outcome);
}

/* Before every Retry the source grows: rows above the captured bound (ids bound+1 .. bound+5,
 * which a Retry that recaptured the bound would admit, and which the immutable-bound trigger
 * then refuses) and a new row inside it after the checkpoint (the row at the bound, deleted and
 * inserted again unrepaired), which the resumed work must repair. */
static void grow_source(PGconn *c, const char *table, const bf_backfill *row)
{
    assert_true(row->has_bound);
    long long bound = atoll(row->bound);
    assert_true(!row->has_checkpoint || atoll(row->checkpoint) < bound);
    bt_exec(c,
            "INSERT INTO %s (id, val) SELECT g, g %% 1000 FROM generate_series(%lld, %lld) g"
            " ON CONFLICT DO NOTHING;"
            "DELETE FROM %s WHERE id = %lld;"
            "INSERT INTO %s (id, val) VALUES (%lld, %lld)",
            table, bound + 1, bound + 5, table, bound, table, bound, bound % 1000);
}

/* The operator's retry resumes at the identical bound and checkpoint, although the source grew
 * before it (grow_source). */
static bf_backfill retry_preserving(bf_engine *op, PGconn *c, const char *table, const char *id,
                                    bf_state expect)
{
    bf_backfill before = bt_get(op, id);
    grow_source(c, table, &before);
    bf_action_result res = act(op, BF_ACTION_RETRY, id);
    assert_true(res.changed);
    assert_int_equal(res.prior, before.state);
    assert_int_equal(res.result, expect);
    bf_backfill after = bt_get(op, id);
    assert_int_equal(after.state, expect);
    assert_true(after.generation > before.generation);
    assert_int_equal(after.has_bound, before.has_bound);
    assert_string_equal(after.bound, before.bound);
    assert_int_equal(after.bound_empty, before.bound_empty);
    assert_int_equal(after.has_checkpoint, before.has_checkpoint);
    assert_string_equal(after.checkpoint, before.checkpoint);
    assert_int_equal(after.rows_committed, before.rows_committed);
    assert_int_equal(after.attempts, 0);
    assert_false(after.has_next_attempt);
    assert_string_equal(after.error_class, "");
    return after;
}

/* Claim id, polling (bounded) until PostgreSQL's backoff lets it through. */
static int claim_after_backoff(bf_worker *w, const char *id)
{
    for (int polls = 0; polls < 5000; polls++) {
        bf_err err = bf_worker_claim(w, id, NULL);
        if (err == BF_OK)
            return polls;
        assert_int_equal(err, BF_ERR_NO_WORK);
        usleep(2000);
    }
    fail_msg("%s never became claimable again", id);
    return -1;
}

/* Completed at the bound captured by start (rows, the table's size then): every row through it
 * repaired exactly once, the new row inside it too, none of the rows added above it. */
static void run_to_completion(bf_engine *op, bf_worker *w, const char *id, const char *table,
                              PGconn *c, long long rows)
{
    assert_int_equal(bf_worker_run(w, true), BF_OK);
    bf_backfill done = bt_get(op, id);
    assert_int_equal(done.state, BF_STATE_COMPLETED);
    assert_int_equal(atoll(done.bound), rows);
    assert_int_equal(
        bt_int(c, "SELECT count(*) FROM %s WHERE id <= %lld AND counter = 1", table, rows), rows);
    assert_int_equal(bt_int(c, "SELECT count(*) FROM %s WHERE id > %lld", table, rows), 5);
    assert_int_equal(bt_int(c,
                            "SELECT count(*) FROM %s WHERE id > %lld AND (counter <> 0 OR fixed IS"
                            " NOT NULL)",
                            table, rows),
                     0);
}

/* ---- (a) + (c): a persistent retryable error ends in failed; retry resumes ------------- */

static void test_retryable_error_is_bounded(void **state)
{
    (void)state;
    PGconn *c = bt_connect();
    PGconn *locker = bt_connect();
    bf_engine *op = bt_engine(registry, "operator", 0);
    bf_engine *we = worker_engine("worker-retry");
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, we, NULL), BF_OK);

    /* a row of the second batch stays locked until the test releases it */
    bt_exec(locker, "BEGIN; SELECT 1 FROM bounded_retry WHERE id = 15 FOR UPDATE");
    act(op, BF_ACTION_START, ID_RETRY);
    assert_int_equal(bf_worker_claim(w, ID_RETRY, NULL), BF_OK);
    bf_step_info info;
    assert_int_equal(step_once(w, &info), BF_STEP_BATCH);
    bf_backfill started = bt_get(op, ID_RETRY);
    assert_string_equal(started.checkpoint, "10");

    for (int attempt = 1; attempt < MAX_TRIES; attempt++) {
        assert_int_equal(step_once(w, &info), BF_STEP_RETRY);
        assert_clean_diag(info.detail);
        assert_non_null(strstr(info.detail, "lock timeout (lock_not_available 55P03)"));
        bf_backfill row = bt_get(op, ID_RETRY);
        assert_int_equal(row.state, BF_STATE_RUNNING);
        assert_int_equal(row.attempts, attempt);
        assert_string_equal(row.error_class, "retryable");
        assert_false(row.claimed);
        assert_string_equal(row.claim_owner, "");
        assert_string_equal(row.checkpoint, "10");
        assert_true(row.has_next_attempt);
        assert_true(row.next_attempt_at > row.now); /* PostgreSQL time says: not yet */
        /* jittered exponential: base * 2^(attempt-1) * [0.5, 1] */
        int64_t full_ms = (int64_t)BASE_MS << (attempt - 1);
        int64_t delay_ms = (row.next_attempt_at - row.updated_at) / 1000;
        assert_in_range(delay_ms, full_ms / 2 - 20, full_ms + 20);

        /* no worker can claim before next_attempt_at, by ID or by search */
        assert_int_equal(bf_worker_claim(w, ID_RETRY, NULL), BF_ERR_NO_WORK);
        assert_int_equal(bf_worker_claim(w, NULL, NULL), BF_ERR_NO_WORK);
        int polls = claim_after_backoff(w, ID_RETRY);
        assert_true(polls > 0);
        bf_backfill claimed = bt_get(op, ID_RETRY);
        assert_true(claimed.now >= row.next_attempt_at);
        assert_true(claimed.generation > row.generation);
    }

    /* the attempt that exhausts the policy fails the backfill, keeping its progress */
    assert_int_equal(step_once(w, &info), BF_STEP_FAILED);
    bf_backfill failed = bt_get(op, ID_RETRY);
    assert_int_equal(failed.state, BF_STATE_FAILED);
    assert_int_equal(failed.attempts, MAX_TRIES);
    assert_string_equal(failed.error_class, "retryable");
    assert_false(failed.has_next_attempt);
    assert_false(failed.claimed);
    assert_string_equal(failed.bound, started.bound);
    assert_string_equal(failed.checkpoint, "10");
    assert_clean_everywhere(op, ID_RETRY, &info);
    /* and stays there: nothing retries it without the operator */
    assert_int_equal(bf_worker_claim(w, ID_RETRY, NULL), BF_ERR_NO_WORK);
    assert_int_equal(bf_worker_run(w, true), BF_OK);
    assert_int_equal(bt_get(op, ID_RETRY).state, BF_STATE_FAILED);

    /* (c) retry at the existing bound and checkpoint, then fix the cause and complete */
    retry_preserving(op, c, "bounded_retry", ID_RETRY, BF_STATE_RUNNING);
    bt_exec(locker, "ROLLBACK");
    run_to_completion(op, w, ID_RETRY, "bounded_retry", c, 30);

    bf_worker_free(w);
    bf_engine_close(we);
    bf_engine_close(op);
    PQfinish(locker);
    PQfinish(c);
}

/* ---- (b) + (c): an unmet prerequisite blocks; retry resumes ---------------------------- */

static void test_prerequisite_false_blocks(void **state)
{
    (void)state;
    PGconn *c = bt_connect();
    bf_engine *op = bt_engine(registry, "operator", 0);
    bf_engine *we = worker_engine("worker-prereq");
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, we, NULL), BF_OK);

    act(op, BF_ACTION_START, ID_PREREQ);
    assert_int_equal(bf_worker_claim(w, ID_PREREQ, NULL), BF_OK);
    bf_step_info info;
    assert_int_equal(step_once(w, &info), BF_STEP_BATCH);
    assert_int_equal(bf_worker_release(w), BF_OK);

    bt_exec(c, "UPDATE bounded_flags SET ready = false");
    assert_int_equal(bf_worker_claim(w, ID_PREREQ, NULL), BF_OK);
    assert_int_equal(step_once(w, &info), BF_STEP_BLOCKED);
    bf_backfill blocked = bt_get(op, ID_PREREQ);
    assert_int_equal(blocked.state, BF_STATE_BLOCKED);
    assert_string_equal(blocked.error_class, "prerequisite");
    assert_non_null(strstr(blocked.error_detail, "prerequisite"));
    assert_string_equal(blocked.checkpoint, "10");
    assert_false(blocked.claimed);
    assert_clean_everywhere(op, ID_PREREQ, &info);
    assert_int_equal(bf_worker_claim(w, ID_PREREQ, NULL), BF_ERR_NO_WORK);

    /* retry without a fix blocks again, still at the same bound and checkpoint */
    retry_preserving(op, c, "bounded_prereq", ID_PREREQ, BF_STATE_RUNNING);
    assert_int_equal(bf_worker_claim(w, ID_PREREQ, NULL), BF_OK);
    assert_int_equal(step_once(w, &info), BF_STEP_BLOCKED);
    assert_string_equal(bt_get(op, ID_PREREQ).checkpoint, "10");

    bt_exec(c, "UPDATE bounded_flags SET ready = true");
    retry_preserving(op, c, "bounded_prereq", ID_PREREQ, BF_STATE_RUNNING);
    run_to_completion(op, w, ID_PREREQ, "bounded_prereq", c, 30);

    bf_worker_free(w);
    bf_engine_close(we);
    bf_engine_close(op);
    PQfinish(c);
}

static void test_missing_column_blocks(void **state)
{
    (void)state;
    PGconn *c = bt_connect();
    bf_engine *op = bt_engine(registry, "operator", 0);
    bf_engine *we = worker_engine("worker-column");
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, we, NULL), BF_OK);

    /* the preflight plans the mutation at start: a column missing then refuses the start,
     * typed and actionable, and nothing changes (preflight.c plan_check) */
    bf_action_result res;
    assert_int_equal(bf_action_apply(op, BF_ACTION_START, ID_COLUMN, &operator_who, &res),
                     BF_ERR_PREREQUISITE);
    assert_non_null(strstr(bf_engine_diag(op), "undefined column"));
    assert_non_null(strstr(bf_engine_diag(op), "undefined_column 42703, column t.extra"));
    assert_clean_diag(bf_engine_diag(op));
    assert_int_equal(bt_get(op, ID_COLUMN).state, BF_STATE_PENDING);

    /* a column that disappears after the start blocks the first batch */
    bt_exec(c, "ALTER TABLE bounded_column ADD COLUMN extra integer NOT NULL DEFAULT 0");
    act(op, BF_ACTION_START, ID_COLUMN);
    bt_exec(c, "ALTER TABLE bounded_column DROP COLUMN extra");
    assert_int_equal(bf_worker_claim(w, ID_COLUMN, NULL), BF_OK);
    bf_step_info info;
    assert_int_equal(step_once(w, &info), BF_STEP_BLOCKED);
    bf_backfill blocked = bt_get(op, ID_COLUMN);
    assert_int_equal(blocked.state, BF_STATE_BLOCKED);
    assert_string_equal(blocked.error_class, "prerequisite");
    /* actionable: names the kind of missing object and its SQLSTATE, not the query */
    assert_non_null(strstr(blocked.error_detail, "undefined column"));
    assert_non_null(strstr(blocked.error_detail, "42703"));
    assert_false(blocked.has_checkpoint);
    assert_clean_everywhere(op, ID_COLUMN, &info);

    bt_exec(c, "ALTER TABLE bounded_column ADD COLUMN extra integer NOT NULL DEFAULT 0");
    retry_preserving(op, c, "bounded_column", ID_COLUMN, BF_STATE_RUNNING);
    run_to_completion(op, w, ID_COLUMN, "bounded_column", c, 20);
    assert_int_equal(bt_int(c, "SELECT count(*) FROM bounded_column WHERE fixed = val * 2"), 20);

    bf_worker_free(w);
    bf_engine_close(we);
    bf_engine_close(op);
    PQfinish(c);
}

/* ---- (d) diagnostics are bounded and redacted ------------------------------------------ */

static void test_server_message_never_leaks(void **state)
{
    (void)state;
    PGconn *c = bt_connect();
    bf_engine *op = bt_engine(registry, "operator", 0);
    bf_engine *we = worker_engine("worker-secret");
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, we, NULL), BF_OK);

    act(op, BF_ACTION_START, ID_SECRET);
    assert_int_equal(bf_worker_claim(w, ID_SECRET, NULL), BF_OK);
    bf_step_info info;
    assert_int_equal(step_once(w, &info), BF_STEP_BLOCKED);
    bf_backfill blocked = bt_get(op, ID_SECRET);
    assert_string_equal(blocked.error_class, "data_invariant");
    assert_non_null(strstr(blocked.error_detail, "22023"));
    assert_clean_everywhere(op, ID_SECRET, &info);
    assert_clean_diag(bf_engine_diag(we));
    assert_int_equal(bt_int(c, "SELECT count(*) FROM bounded_secret WHERE counter > 0"), 0);

    bt_exec(c, "CREATE OR REPLACE FUNCTION public.bounded_convert(v integer) RETURNS integer"
               " LANGUAGE sql AS $$ SELECT v * 2 $$");
    retry_preserving(op, c, "bounded_secret", ID_SECRET, BF_STATE_RUNNING);
    run_to_completion(op, w, ID_SECRET, "bounded_secret", c, 20);

    bf_worker_free(w);
    bf_engine_close(we);
    bf_engine_close(op);
    PQfinish(c);
}

static void test_oversized_diagnostic_is_bounded(void **state)
{
    (void)state;
    bf_engine *op = bt_engine(registry, "operator", 0);
    bf_engine *we = worker_engine("worker-long");
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, we, NULL), BF_OK);

    act(op, BF_ACTION_START, ID_LONG);
    assert_int_equal(bf_worker_claim(w, ID_LONG, NULL), BF_OK);
    bf_step_info info;
    assert_int_equal(step_once(w, &info), BF_STEP_BLOCKED);
    bf_backfill blocked = bt_get(op, ID_LONG);
    assert_int_equal(blocked.state, BF_STATE_BLOCKED);
    assert_string_equal(blocked.error_class, "data_invariant");
    size_t n = strlen(blocked.error_detail);
    assert_true(n > 0 && n < BF_DIAG_MAX);
    assert_string_equal(blocked.error_detail + n - 3, "..."); /* truncation is marked */
    assert_clean_everywhere(op, ID_LONG, &info);

    bf_worker_free(w);
    bf_engine_close(we);
    bf_engine_close(op);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_retryable_error_is_bounded),
        cmocka_unit_test(test_prerequisite_false_blocks),
        cmocka_unit_test(test_missing_column_blocks),
        cmocka_unit_test(test_server_message_never_leaks),
        cmocka_unit_test(test_oversized_diagnostic_is_bounded),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
