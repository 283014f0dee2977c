/*
 * test_engine_guards.c - spec guards at the engine's own seams (issue 27) that no other suite
 * proved: each case names its guard, and was seen failing with that guard removed.
 *
 * - test_action_audit_is_atomic: actions.c bf_action_apply writes the audit row of an accepted
 *   transition in the transaction of the transition (bf__audit before bf__commit). A trigger on
 *   the audit table raises for the accepted row of one request: start, pause and resume each
 *   return a typed error and change nothing (state, generation, bound, checkpoint), no accepted
 *   row exists for the request, and the same request succeeds exactly once after the fault.
 *   Killed by committing the transition before the audit insert.
 * - test_required_id_without_row_gates: the readiness statements (backfill.c bf_gate and
 *   migrate.c readiness_sql, "b.id IS NULL OR ...") list a required ID that has no row. With
 *   its registration held on a table lock, bf_gate and bf_readiness_read list the ID with state
 *   0 (not registered) until the registration commits; then pending. Killed by dropping
 *   "b.id IS NULL OR" from either statement.
 * - test_callback_validation_is_read_only: validate.c chunk_callback sets the transaction read
 *   only before calling a definition's validate callback. A callback that writes (nextval, an
 *   UPDATE) is refused with 25006 in the worker's validation (the backfill does not complete:
 *   error class definition naming 25006) and in explicit validation (the typed outcome
 *   current-state, "validation attempted a write (25006)"); the table and the sequence are
 *   unchanged. Killed by removing the SET LOCAL transaction_read_only.
 * - test_incompatible_definition_fails_closed: a process whose definition of the stable ID
 *   declares other key types than the stored row cannot start it (actions.c action_start's key
 *   type check: BF_ERR_INCOMPATIBLE, nothing changed, the rejection audited), cannot claim it
 *   (worker.c claim_sql "AND key_types = $4": BF_ERR_NO_WORK, generation unchanged) and cannot
 *   validate it (validate.c validate_run's key type check: BF_ERR_INCOMPATIBLE, nothing
 *   recorded but the audit row). Killed by removing any one of the three checks.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bt.h"

#define ID_AUDIT "eg.audit_v1"
#define ID_GATE  "eg.gate_v1"
#define ID_CBVAL "eg.cbval_v1"
#define ID_KT    "eg.keytypes_v1"

static const bf_definition def_audit = {
    .id = ID_AUDIT,
    .table = "public.eg_audit",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2, counter = t.counter + 1",
};

static const bf_definition def_gate = {
    .id = ID_GATE,
    .table = "public.eg_gate",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 50,
    .required = true,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2, counter = t.counter + 1",
};

static bf_err cbval_mutate(bf_txn *txn, void *arg)
{
    (void)arg;
    return bf_txn_exec(txn,
                       "UPDATE public.eg_cbval t SET fixed = t.val * 2, counter = t.counter + 1"
                       " FROM bf_batch b WHERE t.id = b.id",
                       0, NULL, NULL);
}

/* A validate callback that writes: a sequence (not rolled back with the transaction) and the
 * table. A read-only transaction refuses the first with 25006. */
static bf_err cbval_validate(bf_txn *txn, void *arg)
{
    (void)arg;
    long long v = 0;
    bf_err err = bf_txn_query_int(txn, "SELECT nextval('public.eg_cbval_seq')", 0, NULL, &v);
    if (err == BF_OK)
        err = bf_txn_exec(txn,
                          "UPDATE public.eg_cbval t SET val = t.val + 1 FROM bf_batch b"
                          " WHERE t.id = b.id",
                          0, NULL, NULL);
    return err;
}

static const bf_definition def_cbval = {
    .id = ID_CBVAL,
    .table = "public.eg_cbval",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .mutate = cbval_mutate,
    .validate = cbval_validate,
    .retry = {.max_attempts = 1},
};

/* The same stable ID in two processes: one keys it by id (bigint), the other by uid (uuid). */
static const bf_definition def_kt_bigint = {
    .id = ID_KT,
    .table = "public.eg_kt",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2, counter = t.counter + 1",
};

static const bf_definition def_kt_uuid = {
    .id = ID_KT,
    .table = "public.eg_kt",
    .key = {{"uid", BF_KEY_UUID}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2, counter = t.counter + 1",
};

static const bf_definition *const defs[] = {&def_audit, &def_gate, &def_cbval, &def_kt_bigint};
static const bf_definition *const defs_other[] = {&def_kt_uuid};

static bf_registry *registry;
static bf_registry *registry_other;

static int setup(void **state)
{
    (void)state;
    bt_db_create("engine_guards");
    PGconn *c = bt_connect();
    bt_make_items(c, "eg_audit", 30);
    bt_make_items(c, "eg_gate", 20);
    bt_make_items(c, "eg_cbval", 20);
    bt_make_items(c, "eg_kt", 20);
    bt_exec(c, "CREATE SEQUENCE public.eg_cbval_seq;"
               "ALTER TABLE eg_kt ADD COLUMN uid uuid NOT NULL UNIQUE DEFAULT gen_random_uuid()");
    PQfinish(c);
    registry = bt_registry(defs, sizeof defs / sizeof defs[0]);
    registry_other = bt_registry(defs_other, 1);
    bf_engine *e = bt_engine(registry, "operator", 0);
    /* every definition but the required one, whose registration a case holds back */
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
        if (defs[i] != &def_gate)
            assert_int_equal(bf_register(e, defs[i]), BF_OK);
    bf_engine_close(e);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bf_registry_free(registry_other);
    registry_other = NULL;
    bt_db_drop_registry(registry);
    registry = NULL;
    return 0;
}

/* Bound, checkpoint, state and generation agree. */
static void assert_same_row(const bf_backfill *a, const bf_backfill *b)
{
    assert_int_equal(a->state, b->state);
    assert_int_equal(a->generation, b->generation);
    assert_int_equal(a->has_bound, b->has_bound);
    assert_string_equal(a->bound, b->bound);
    assert_int_equal(a->has_checkpoint, b->has_checkpoint);
    assert_string_equal(a->checkpoint, b->checkpoint);
    assert_int_equal(a->rows_committed, b->rows_committed);
}

/* ---- audit atomicity ------------------------------------------------------------------ */

static long long accepted_rows(PGconn *c, const char *request_id)
{
    return bt_int(c,
                  "SELECT count(*) FROM buzz_backfill.audit WHERE request_id = '%s'"
                  " AND outcome LIKE 'accepted%%'",
                  request_id);
}

/* action as request_id with the audit of its accepted row failing: nothing happens; then the
 * same request after the fault: it happens, once. */
static void faulted_then_retried(bf_engine *op, PGconn *c, bf_action action, const char *request_id,
                                 bf_state want)
{
    bf_actor who = {.actor = "test-operator", .authority = "test", .request_id = request_id};
    bt_exec(c, "UPDATE public.eg_fault SET request_id = '%s'", request_id);
    bf_backfill before = bt_get(op, ID_AUDIT);
    bf_action_result res;
    bf_err err = bf_action_apply(op, action, ID_AUDIT, &who, &res);
    if (err != BF_ERR_DATA_INVARIANT)
        fail_msg("%s with a failing audit insert: %s (%s), want data_invariant",
                 bf_action_name(action), bf_err_str(err), res.detail);
    assert_int_equal(res.err, BF_ERR_DATA_INVARIANT);
    assert_false(res.changed);
    bf_backfill after = bt_get(op, ID_AUDIT);
    assert_same_row(&before, &after);
    assert_int_equal(accepted_rows(c, request_id), 0);

    bt_exec(c, "UPDATE public.eg_fault SET request_id = NULL");
    err = bf_action_apply(op, action, ID_AUDIT, &who, &res);
    if (err != BF_OK)
        fail_msg("%s after the fault: %s (%s)", bf_action_name(action), bf_err_str(err),
                 res.detail);
    assert_true(res.changed);
    assert_false(res.replayed);
    assert_int_equal(res.result, want);
    assert_true(res.generation > before.generation);
    /* once: a repeat replays the original outcome */
    assert_int_equal(bf_action_apply(op, action, ID_AUDIT, &who, &res), BF_OK);
    assert_true(res.replayed);
    assert_int_equal(bt_get(op, ID_AUDIT).generation, after.generation + 1);
    assert_int_equal(accepted_rows(c, request_id), 1);
}

static void test_action_audit_is_atomic(void **state)
{
    (void)state;
    PGconn *c = bt_connect();
    bt_exec(c, "CREATE TABLE public.eg_fault (request_id text); INSERT INTO eg_fault VALUES (NULL);"
               "CREATE FUNCTION public.eg_audit_fault() RETURNS trigger LANGUAGE plpgsql AS $$"
               " BEGIN IF NEW.request_id = (SELECT request_id FROM public.eg_fault)"
               "  AND NEW.outcome LIKE 'accepted%%' THEN"
               "  RAISE EXCEPTION 'audit insert refused by the test' USING ERRCODE = '23514';"
               " END IF; RETURN NEW; END $$;"
               "CREATE TRIGGER eg_audit_fault BEFORE INSERT ON buzz_backfill.audit"
               " FOR EACH ROW EXECUTE FUNCTION public.eg_audit_fault()");
    bf_engine *op = bt_engine(registry, "operator", 0);

    faulted_then_retried(op, c, BF_ACTION_START, "eg-start-1", BF_STATE_RUNNING);
    /* progress to keep: one batch */
    bf_engine *we = bt_engine(registry, "worker", 30000);
    bf_worker *w = bt_claimed_worker(we, ID_AUDIT);
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH);
    assert_int_equal(bf_worker_release(w), BF_OK);
    assert_string_equal(bt_get(op, ID_AUDIT).checkpoint, "10");

    faulted_then_retried(op, c, BF_ACTION_PAUSE, "eg-pause-1", BF_STATE_PAUSED);
    faulted_then_retried(op, c, BF_ACTION_RESUME, "eg-resume-1", BF_STATE_RUNNING);
    bf_backfill row = bt_get(op, ID_AUDIT);
    assert_string_equal(row.bound, "30");
    assert_string_equal(row.checkpoint, "10");

    bt_exec(c, "DROP TRIGGER eg_audit_fault ON buzz_backfill.audit");
    bf_worker_free(w);
    bf_engine_close(we);
    bf_engine_close(op);
    PQfinish(c);
}

/* ---- a required ID without a row gates ------------------------------------------------ */

typedef struct register_thread {
    bf_engine *e;
    bf_err err;
    pthread_t tid;
} register_thread;

static void *register_main(void *arg)
{
    register_thread *t = arg;
    t->err = bf_register(t->e, &def_gate);
    return NULL;
}

/* Both readiness reads list exactly ID_GATE, in state want (0: not registered). */
static void assert_gate(bf_engine *e, bf_state want)
{
    bf_gate_entry ids[4];
    int n = -1;
    assert_int_equal(bf_gate(e, ids, 4, &n), BF_OK);
    if (n != 1)
        fail_msg("bf_gate lists %d IDs, want 1 (%s)", n, ID_GATE);
    assert_string_equal(ids[0].id, ID_GATE);
    assert_int_equal(ids[0].state, want);
    memset(ids, 0, sizeof ids);
    n = -1;
    assert_int_equal(bf_readiness_read(e, ids, 4, &n), BF_OK);
    if (n != 1)
        fail_msg("bf_readiness_read lists %d IDs, want 1 (%s)", n, ID_GATE);
    assert_string_equal(ids[0].id, ID_GATE);
    assert_int_equal(ids[0].state, want);
}

static void test_required_id_without_row_gates(void **state)
{
    (void)state;
    PGconn *holder = bt_connect();
    PGconn *c = bt_connect();
    bf_engine *reader = bt_engine(registry, "reader", 0);
    register_thread t = {.e = bt_engine(registry, "registrar", 0)};
    /* the registration's upsert waits for this lock; reads do not */
    bt_exec(holder, "BEGIN; LOCK TABLE buzz_backfill.backfill IN SHARE MODE");
    assert_int_equal(pthread_create(&t.tid, NULL, register_main, &t), 0);
    bt_wait_lock_waiters(c, 1);
    assert_int_equal(
        bt_int(c, "SELECT count(*) FROM buzz_backfill.backfill WHERE id = '%s'", ID_GATE), 0);
    assert_gate(reader, 0);
    bt_exec(holder, "COMMIT");
    assert_int_equal(pthread_join(t.tid, NULL), 0);
    assert_int_equal(t.err, BF_OK);
    assert_gate(reader, BF_STATE_PENDING);

    /* and it opens once the backfill completes */
    assert_int_equal(bt_act(reader, BF_ACTION_START, ID_GATE), BF_OK);
    assert_gate(reader, BF_STATE_RUNNING);
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, t.e, NULL), BF_OK);
    assert_int_equal(bf_worker_run(w, true), BF_OK);
    assert_int_equal(bt_get(reader, ID_GATE).state, BF_STATE_COMPLETED);
    int n = -1;
    assert_int_equal(bf_gate(reader, NULL, 0, &n), BF_OK);
    assert_int_equal(n, 0);
    assert_int_equal(bf_readiness_read(reader, NULL, 0, &n), BF_OK);
    assert_int_equal(n, 0);
    bf_worker_free(w);
    bf_engine_close(t.e);
    bf_engine_close(reader);
    PQfinish(c);
    PQfinish(holder);
}

/* ---- validation of a callback definition is read-only --------------------------------- */

static void assert_untouched(PGconn *c, long long val_sum)
{
    assert_int_equal(bt_int(c, "SELECT sum(val) FROM eg_cbval"), val_sum);
    /* a sequence is not transactional: a nextval that ran would show after the rollback */
    assert_int_equal(bt_int(c, "SELECT is_called::int FROM public.eg_cbval_seq"), 0);
}

static void test_callback_validation_is_read_only(void **state)
{
    (void)state;
    PGconn *c = bt_connect();
    long long val_sum = bt_int(c, "SELECT sum(val) FROM eg_cbval");
    bf_engine *op = bt_engine(registry, "operator", 0);
    assert_int_equal(bt_act(op, BF_ACTION_START, ID_CBVAL), BF_OK);
    bf_engine *we = bt_engine(registry, "worker", 30000);
    bf_worker *w = bt_claimed_worker(we, ID_CBVAL);
    assert_int_equal(bt_step_until_not_batch(w, 10), BF_STEP_VALIDATING);
    assert_int_equal(bt_int(c, "SELECT count(*) FROM eg_cbval WHERE fixed = val * 2"), 20);

    /* the lifecycle's validation: refused, the backfill does not complete */
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    if (info.step == BF_STEP_COMPLETED || info.step == BF_STEP_VALIDATING)
        fail_msg("a validate callback that writes passed validation (step %s)",
                 bf_step_name(info.step));
    assert_non_null(strstr(info.detail, "25006"));
    bf_backfill row = bt_get(op, ID_CBVAL);
    assert_true(row.state == BF_STATE_FAILED || row.state == BF_STATE_BLOCKED);
    assert_string_equal(row.error_class, "definition");
    assert_non_null(strstr(row.error_detail, "25006"));
    assert_untouched(c, val_sum);

    /* explicit validation: the same refusal, typed, and nothing changed */
    bf_actor who = {.actor = "test-operator", .authority = "test", .request_id = "eg-val-1"};
    bf_action_result res;
    assert_int_equal(bf_validate(op, ID_CBVAL, &who, &res), BF_OK);
    if (res.validation != BF_VALIDATION_CURRENT_STATE)
        fail_msg("explicit validation answered %s (%s), want current-state",
                 bf_validation_outcome_name(res.validation), res.detail);
    assert_non_null(strstr(res.detail, "validation attempted a write (25006)"));
    bf_backfill after = bt_get(op, ID_CBVAL);
    assert_same_row(&row, &after);
    assert_int_equal(after.validation, row.validation);
    assert_untouched(c, val_sum);

    bf_worker_free(w);
    bf_engine_close(we);
    bf_engine_close(op);
    PQfinish(c);
}

/* ---- fail closed on a row this definition cannot interpret ---------------------------- */

static long long audit_rows(PGconn *c, const char *action, const char *request_id)
{
    return bt_int(c,
                  "SELECT count(*) FROM buzz_backfill.audit WHERE backfill_id = '%s'"
                  " AND action = '%s' AND request_id = '%s' AND outcome LIKE '%%key types%%'",
                  ID_KT, action, request_id);
}

static void test_incompatible_definition_fails_closed(void **state)
{
    (void)state;
    PGconn *c = bt_connect();
    bf_engine *own = bt_engine(registry, "own", 0);
    bf_engine *other = bt_engine(registry_other, "other", 30000);
    assert_string_equal(bt_get(own, ID_KT).key_types, "bigint");

    /* Start from the process that would read the bound as a uuid */
    bf_backfill before = bt_get(own, ID_KT);
    bf_actor who = {.actor = "test-operator", .authority = "test", .request_id = "eg-kt-start"};
    bf_action_result res;
    assert_int_equal(bf_action_apply(other, BF_ACTION_START, ID_KT, &who, &res),
                     BF_ERR_INCOMPATIBLE);
    assert_false(res.changed);
    bf_backfill after = bt_get(own, ID_KT);
    assert_same_row(&before, &after);
    assert_int_equal(after.state, BF_STATE_PENDING);
    assert_int_equal(audit_rows(c, "start", "eg-kt-start"), 1);

    /* started by its own process, it is still not the other's to claim */
    assert_int_equal(bt_act(own, BF_ACTION_START, ID_KT), BF_OK);
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, other, NULL), BF_OK);
    before = bt_get(own, ID_KT);
    assert_int_equal(bf_worker_claim(w, ID_KT, NULL), BF_ERR_NO_WORK);
    assert_int_equal(bf_worker_claim(w, NULL, NULL), BF_ERR_NO_WORK);
    after = bt_get(own, ID_KT);
    assert_same_row(&before, &after);
    assert_false(after.claimed);

    /* nor to validate: its chunks would read the bound as its own key type */
    who.request_id = "eg-kt-validate";
    assert_int_equal(bf_validate(other, ID_KT, &who, &res), BF_ERR_INCOMPATIBLE);
    assert_int_equal(res.err, BF_ERR_INCOMPATIBLE);
    after = bt_get(own, ID_KT);
    assert_same_row(&before, &after);
    assert_int_equal(after.validation, BF_VALIDATION_NONE);
    assert_int_equal(audit_rows(c, "validate", "eg-kt-validate"), 1);

    /* its own process completes it */
    bf_worker *mine = NULL;
    bf_engine *we = bt_engine(registry, "own-worker", 30000);
    assert_int_equal(bf_worker_new(&mine, we, NULL), BF_OK);
    assert_int_equal(bf_worker_run(mine, true), BF_OK);
    assert_int_equal(bt_get(own, ID_KT).state, BF_STATE_COMPLETED);
    assert_int_equal(bt_int(c, "SELECT count(*) FROM eg_kt WHERE counter = 1"), 20);

    bf_worker_free(mine);
    bf_engine_close(we);
    bf_worker_free(w);
    bf_engine_close(other);
    bf_engine_close(own);
    PQfinish(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_action_audit_is_atomic),
        cmocka_unit_test(test_required_id_without_row_gates),
        cmocka_unit_test(test_callback_validation_is_read_only),
        cmocka_unit_test(test_incompatible_definition_fails_closed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
