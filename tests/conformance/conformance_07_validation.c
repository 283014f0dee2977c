/*
 * conformance_07_validation.c - spec conformance test 7, "Validation": reaching the bound
 * cannot complete without validation; failure is durable and repeatable; only success reaches
 * completion, and completion is immutable (also in the database itself).
 *
 * Cases:
 *   - the gate: stepping a worker batch by batch, the row stays running until the step that
 *     reports BF_STEP_VALIDATING leaves it validating (checkpoint at the bound, no completion);
 *     only the following validation step completes it. The audit shows both transitions.
 *   - durable failure: the postcondition fails -> failed with a bounded diagnostic; the row
 *     stays failed across new engine sessions, is not claimable, and explicit validation
 *     reports failure again and changes nothing; retry without a fix fails again; after the
 *     data is fixed, retry -> validating -> completed.
 *   - immutable completion: direct SQL writes of state, bound, checkpoint and generation on a
 *     completed row (and its deletion) fail with SQLSTATE BFI01 (this direct write is the one
 *     the test makes on purpose: it proves the database guard); pause, resume, retry and start
 *     return BF_ERR_CONFLICT; revalidation reports a current failure without changing it.
 *   - empty source set: start captures bound_empty, the worker enters validating, then
 *     completes.
 *
 * Guards proved (removing one makes a case here fail):
 *   - the validation gate in worker.c: step_running calls worker_enter_validating (never a
 *     completion) when no admitted work remains, and only a successful validation run in
 *     step_validating calls worker_complete;
 *   - the guard_1_completed triggers of the engine schema (migrate.c), raising BFI01 for any change
 *     of a completed row's execution state.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bt.h"

#define ID_GATE      "valid.gate_v1"
#define ID_DURABLE   "valid.durable_v1"
#define ID_IMMUTABLE "valid.immutable_v1"
#define ID_EMPTY     "valid.empty_v1"

static const bf_definition def_gate = {
    .id = ID_GATE,
    .table = "valid_gate",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2",
};

/* The postcondition checks more than needs_repair: a row repaired earlier and then broken by
 * another writer is not picked up by batches but fails validation. */
static const bf_definition def_durable = {
    .id = ID_DURABLE,
    .table = "valid_durable",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2",
    .postcondition = "t.fixed = t.val * 2",
};

static const bf_definition def_immutable = {
    .id = ID_IMMUTABLE,
    .table = "valid_immutable",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2",
    .postcondition = "t.fixed = t.val * 2",
};

static const bf_definition def_empty = {
    .id = ID_EMPTY,
    .table = "valid_empty",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2",
};

static const bf_definition *const defs[] = {&def_gate, &def_durable, &def_immutable, &def_empty};

static const bf_actor operator_who = {.actor = "test-operator", .authority = "test"};

static bf_registry *registry;

static int setup(void **state)
{
    (void)state;
    bt_db_create("validation");
    PGconn *c = bt_connect();
    bt_make_items(c, "valid_gate", 30);
    bt_make_items(c, "valid_durable", 30);
    bt_make_items(c, "valid_immutable", 20);
    bt_make_items(c, "valid_empty", 0);
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

static bf_step step_once(bf_worker *w, bf_step_info *info)
{
    assert_int_equal(bf_worker_step(w, info), BF_OK);
    return info->step;
}

/* md5 of the target table: "nothing changed" compares these. */
static char *table_digest(PGconn *c, const char *table)
{
    return bt_text(c,
                   "SELECT md5(coalesce(string_agg(t::text, ';' ORDER BY id), ''))"
                   " FROM %s t",
                   table);
}

static void assert_same_execution(const bf_backfill *a, const bf_backfill *b)
{
    assert_int_equal(a->state, b->state);
    assert_int_equal(a->generation, b->generation);
    assert_string_equal(a->bound, b->bound);
    assert_int_equal(a->bound_empty, b->bound_empty);
    assert_string_equal(a->checkpoint, b->checkpoint);
    assert_int_equal(a->rows_committed, b->rows_committed);
    assert_int_equal(a->rows_covered, b->rows_covered);
    assert_int_equal(a->batches_committed, b->batches_committed);
    assert_int_equal(a->has_completed_at, b->has_completed_at);
    assert_int_equal(a->completed_at, b->completed_at);
}

/* Bounded, and free of SQL text and the definition's expressions. */
static void assert_clean_diag(const char *detail)
{
    assert_true(detail[0] != '\0');
    assert_true(strlen(detail) < BF_DIAG_MAX);
    assert_null(strstr(detail, "SELECT"));
    assert_null(strstr(detail, "valid_"));
    assert_null(strstr(detail, "t.val"));
}

/* ---- reaching the bound enters validating, never completed ----------------------------- */

static void test_bound_enters_validating(void **state)
{
    (void)state;
    bf_engine *op = bt_engine(registry, "operator", 0);
    bf_engine *we = bt_engine(registry, "worker", 0);
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, we, NULL), BF_OK);
    assert_int_equal(bt_act(op, BF_ACTION_START, ID_GATE), BF_OK);
    assert_int_equal(bf_worker_claim(w, ID_GATE, NULL), BF_OK);

    bf_step_info info;
    int batches = 0;
    while (step_once(w, &info) == BF_STEP_BATCH) {
        batches++;
        bf_backfill row = bt_get(op, ID_GATE);
        assert_int_equal(row.state, BF_STATE_RUNNING);
        assert_false(row.has_completed_at);
        assert_true(batches <= 3);
    }
    assert_int_equal(batches, 3);
    assert_int_equal(info.step, BF_STEP_VALIDATING);
    bf_backfill row = bt_get(op, ID_GATE);
    assert_int_equal(row.state, BF_STATE_VALIDATING);
    assert_string_equal(row.checkpoint, row.bound);
    assert_string_equal(row.bound, "30");
    assert_false(row.has_completed_at);
    assert_int_equal(row.validation, BF_VALIDATION_NONE);
    assert_true(row.claimed); /* the worker keeps its claim to validate */

    assert_int_equal(step_once(w, &info), BF_STEP_COMPLETED);
    row = bt_get(op, ID_GATE);
    assert_int_equal(row.state, BF_STATE_COMPLETED);
    assert_int_equal(row.validation, BF_VALIDATION_SUCCESS);
    assert_true(row.has_completed_at);
    assert_false(row.claimed);

    /* the audit shows running -> validating, then validating -> completed */
    bf_audit_entry audit[2];
    int n = 0;
    assert_int_equal(bf_audit_list(op, ID_GATE, 0, audit, 2, &n), BF_OK);
    assert_int_equal(n, 2);
    assert_int_equal(audit[0].prior, BF_STATE_VALIDATING);
    assert_int_equal(audit[0].result, BF_STATE_COMPLETED);
    assert_int_equal(audit[1].prior, BF_STATE_RUNNING);
    assert_int_equal(audit[1].result, BF_STATE_VALIDATING);

    bf_worker_free(w);
    bf_engine_close(we);
    bf_engine_close(op);
}

/* ---- failure is durable and repeatable; only success completes ------------------------- */

static void test_failure_durable_and_repeatable(void **state)
{
    (void)state;
    PGconn *c = bt_connect();
    bf_engine *op = bt_engine(registry, "operator", 0);
    bf_engine *we = bt_engine(registry, "worker", 0);
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, we, NULL), BF_OK);
    assert_int_equal(bt_act(op, BF_ACTION_START, ID_DURABLE), BF_OK);
    assert_int_equal(bf_worker_claim(w, ID_DURABLE, NULL), BF_OK);
    assert_int_equal(bt_step_until_not_batch(w, 10), BF_STEP_VALIDATING);

    /* another writer breaks a repaired row before validation runs */
    bt_exec(c, "UPDATE valid_durable SET val = val + 1 WHERE id = 7");
    bf_step_info info;
    assert_int_equal(step_once(w, &info), BF_STEP_FAILED);
    assert_clean_diag(info.detail);
    bf_backfill failed = bt_get(op, ID_DURABLE);
    assert_int_equal(failed.state, BF_STATE_FAILED);
    assert_string_equal(failed.error_class, "validation");
    assert_clean_diag(failed.error_detail);
    assert_false(failed.has_completed_at);
    assert_false(failed.claimed);
    char *digest = table_digest(c, "valid_durable");
    bf_worker_free(w);
    bf_engine_close(we);
    bf_engine_close(op);

    /* new sessions: still failed, not claimable, nothing changed */
    op = bt_engine(registry, "operator-2", 0);
    we = bt_engine(registry, "worker-2", 0);
    assert_int_equal(bf_worker_new(&w, we, NULL), BF_OK);
    bf_backfill again = bt_get(op, ID_DURABLE);
    assert_same_execution(&again, &failed);
    assert_string_equal(again.error_detail, failed.error_detail);
    assert_int_equal(bf_worker_claim(w, ID_DURABLE, NULL), BF_ERR_NO_WORK);
    assert_int_equal(bf_worker_claim(w, NULL, NULL), BF_ERR_NO_WORK);

    /* explicit validation repeats the failure and changes nothing */
    for (int i = 0; i < 2; i++) {
        bf_action_result res;
        assert_int_equal(bf_validate(op, ID_DURABLE, &operator_who, &res), BF_OK);
        assert_int_equal(res.validation, BF_VALIDATION_FAILURE);
        assert_false(res.changed);
        assert_int_equal(res.result, BF_STATE_FAILED);
        assert_clean_diag(res.detail);
        again = bt_get(op, ID_DURABLE);
        assert_same_execution(&again, &failed);
        assert_int_equal(again.validation, BF_VALIDATION_FAILURE);
        char *now = table_digest(c, "valid_durable");
        assert_string_equal(now, digest);
        free(now);
    }

    /* retry without a fix: validating again (no admitted work), and failed again */
    bf_action_result res;
    assert_int_equal(bf_action_apply(op, BF_ACTION_RETRY, ID_DURABLE, &operator_who, &res), BF_OK);
    assert_int_equal(res.result, BF_STATE_VALIDATING);
    assert_true(res.generation > failed.generation);
    assert_int_equal(bf_worker_claim(w, ID_DURABLE, NULL), BF_OK);
    assert_int_equal(step_once(w, &info), BF_STEP_FAILED);
    again = bt_get(op, ID_DURABLE);
    assert_int_equal(again.state, BF_STATE_FAILED);
    assert_string_equal(again.checkpoint, failed.checkpoint);
    assert_string_equal(again.bound, failed.bound);

    /* fix the data: explicit validation now succeeds but does not complete a failed row */
    bt_exec(c, "UPDATE valid_durable SET fixed = val * 2 WHERE id = 7");
    assert_int_equal(bf_validate(op, ID_DURABLE, &operator_who, &res), BF_OK);
    assert_int_equal(res.validation, BF_VALIDATION_SUCCESS);
    assert_false(res.changed);
    assert_int_equal(bt_get(op, ID_DURABLE).state, BF_STATE_FAILED);

    /* retry after the fix: validating, then the successful validation completes */
    assert_int_equal(bf_action_apply(op, BF_ACTION_RETRY, ID_DURABLE, &operator_who, &res), BF_OK);
    assert_int_equal(res.result, BF_STATE_VALIDATING);
    assert_int_equal(bf_worker_claim(w, ID_DURABLE, NULL), BF_OK);
    assert_int_equal(step_once(w, &info), BF_STEP_COMPLETED);
    bf_backfill done = bt_get(op, ID_DURABLE);
    assert_int_equal(done.state, BF_STATE_COMPLETED);
    assert_int_equal(done.validation, BF_VALIDATION_SUCCESS);
    assert_string_equal(done.bound, failed.bound);
    assert_string_equal(done.checkpoint, failed.checkpoint);

    free(digest);
    bf_worker_free(w);
    bf_engine_close(we);
    bf_engine_close(op);
    PQfinish(c);
}

/* ---- completed is immutable ------------------------------------------------------------ */

/* Run sql expecting it to fail; returns its SQLSTATE (caller frees). */
static char *failing_sqlstate(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    const char *st = PQresultStatus(r) == PGRES_FATAL_ERROR
                         ? PQresultErrorField(r, PG_DIAG_SQLSTATE)
                         : "(succeeded)";
    char *out = strdup(st ? st : "(none)");
    PQclear(r);
    return out;
}

static void test_completed_is_immutable(void **state)
{
    (void)state;
    PGconn *c = bt_connect();
    bf_engine *op = bt_engine(registry, "operator", 0);
    bf_engine *we = bt_engine(registry, "worker", 0);
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, we, NULL), BF_OK);
    assert_int_equal(bt_act(op, BF_ACTION_START, ID_IMMUTABLE), BF_OK);
    assert_int_equal(bf_worker_run(w, true), BF_OK);
    bf_backfill done = bt_get(op, ID_IMMUTABLE);
    assert_int_equal(done.state, BF_STATE_COMPLETED);

    /* the database itself refuses: each of these is the one deliberate direct write */
    static const char *const writes[] = {
        "UPDATE buzz_backfill.backfill SET state = 'running' WHERE id = '" ID_IMMUTABLE "'",
        "UPDATE buzz_backfill.backfill SET bound = ARRAY['5'] WHERE id = '" ID_IMMUTABLE "'",
        "UPDATE buzz_backfill.backfill SET checkpoint = ARRAY['5'] WHERE id = '" ID_IMMUTABLE "'",
        "UPDATE buzz_backfill.backfill SET generation = generation + 1"
        " WHERE id = '" ID_IMMUTABLE "'",
        "UPDATE buzz_backfill.backfill SET rows_covered = 0 WHERE id = '" ID_IMMUTABLE "'",
        "DELETE FROM buzz_backfill.backfill WHERE id = '" ID_IMMUTABLE "'",
    };
    for (size_t i = 0; i < sizeof writes / sizeof writes[0]; i++) {
        char *st = failing_sqlstate(c, writes[i]);
        assert_string_equal(st, "BFI01");
        free(st);
    }

    /* operators cannot move it */
    static const bf_action actions[] = {BF_ACTION_PAUSE, BF_ACTION_RESUME, BF_ACTION_RETRY,
                                        BF_ACTION_START};
    for (size_t i = 0; i < sizeof actions / sizeof actions[0]; i++) {
        bf_action_result res;
        assert_int_equal(bf_action_apply(op, actions[i], ID_IMMUTABLE, &operator_who, &res),
                         BF_ERR_CONFLICT);
        assert_false(res.changed);
        assert_int_equal(res.row.state, BF_STATE_COMPLETED);
    }
    assert_int_equal(bf_worker_claim(w, ID_IMMUTABLE, NULL), BF_ERR_NO_WORK);

    /* revalidation reports a current failure and leaves completion alone */
    bt_exec(c, "UPDATE valid_immutable SET val = val + 1 WHERE id = 3");
    bf_action_result res;
    assert_int_equal(bf_validate(op, ID_IMMUTABLE, &operator_who, &res), BF_OK);
    assert_int_equal(res.validation, BF_VALIDATION_FAILURE);
    assert_int_equal(res.result, BF_STATE_COMPLETED);
    bf_backfill after = bt_get(op, ID_IMMUTABLE);
    assert_same_execution(&after, &done);
    assert_int_equal(after.validation, BF_VALIDATION_FAILURE);

    bf_worker_free(w);
    bf_engine_close(we);
    bf_engine_close(op);
    PQfinish(c);
}

/* ---- empty source set ------------------------------------------------------------------ */

static void test_empty_source_set(void **state)
{
    (void)state;
    bf_engine *op = bt_engine(registry, "operator", 0);
    bf_engine *we = bt_engine(registry, "worker", 0);
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, we, NULL), BF_OK);
    bf_action_result res;
    assert_int_equal(bf_action_apply(op, BF_ACTION_START, ID_EMPTY, &operator_who, &res), BF_OK);
    assert_int_equal(res.result, BF_STATE_RUNNING);
    bf_backfill row = bt_get(op, ID_EMPTY);
    assert_true(row.bound_empty);
    assert_false(row.has_bound);
    assert_false(row.has_checkpoint);

    assert_int_equal(bf_worker_claim(w, ID_EMPTY, NULL), BF_OK);
    bf_step_info info;
    assert_int_equal(step_once(w, &info), BF_STEP_VALIDATING);
    row = bt_get(op, ID_EMPTY);
    assert_int_equal(row.state, BF_STATE_VALIDATING);
    assert_false(row.has_completed_at);
    assert_false(row.has_checkpoint);
    assert_int_equal(step_once(w, &info), BF_STEP_COMPLETED);
    row = bt_get(op, ID_EMPTY);
    assert_int_equal(row.state, BF_STATE_COMPLETED);
    assert_true(row.bound_empty);
    assert_false(row.has_bound);
    assert_int_equal(row.rows_committed, 0);
    assert_int_equal(row.validation, BF_VALIDATION_SUCCESS);

    bf_worker_free(w);
    bf_engine_close(we);
    bf_engine_close(op);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bound_enters_validating),
        cmocka_unit_test(test_failure_durable_and_repeatable),
        cmocka_unit_test(test_completed_is_immutable),
        cmocka_unit_test(test_empty_source_set),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
