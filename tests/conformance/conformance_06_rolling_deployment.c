/*
 * conformance_06_rolling_deployment.c - spec conformance test 6, "Rolling deployment", at the
 * engine level with real processes: every deployment below is a child process (bt_spawn) with
 * its own registry, engine and worker, talking to PostgreSQL only.
 *
 * Two compatible processes ("rev-a" and "rev-b": same stable ID and behaviour, different
 * informational metadata) register in either order, repeatedly and concurrently: there is
 * exactly one row and one readiness obligation, and metadata is last-registration-wins while
 * lifecycle, bound, checkpoint and generation are untouched. Both then race for the exclusive
 * claim; the test does not predict the winner (it learns it from the row), never chooses by
 * registration order or metadata, and asserts no precedence. The winner's batch is parked on a
 * barrier until its claim expires and the other process takes over: the parked batch is then
 * rejected by the fence and the new owner completes every row exactly once. A process
 * whose registry lacks the ID never claims it, and a definition with other key types under the
 * same ID fails closed (registration refused, row untouched, no claim).
 *
 * Guards proved (removing one makes a case here fail):
 *   - registration is an upsert by stable ID: backfill.c bf_register's INSERT ... ON CONFLICT
 *     (id) DO UPDATE of metadata only;
 *   - the key_types check: bf_register's "WHERE b.key_types = EXCLUDED.key_types" and the claim
 *     statement's "b.key_types = $4" (worker.c claim_sql);
 *   - claims restricted to registry IDs: worker.c worker_claim_id's registry lookup and the
 *     "id = ANY(registry ids)" filter of bf_worker_claim(w, NULL);
 *   - the commit-time fence of the prior owner's batch (registry.c add_fence: generation and
 *     owner, either of which the takeover changed, and batch_verdict raising when the fence
 *     matched nothing), exercised across processes after takeover; conformance_01 proves the
 *     generation check alone.
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

/* long enough that a stalled machine does not let the race's loser claim before the winner
 * has parked its batch; the takeover waits for it once */
#define LEASE_MS 3000

/* Barrier keys: each scenario has its own, so that a failed one cannot stall the next. */
enum { KEY_CONC_GO = 600, KEY_AB = 610, KEY_BA = 620 };

#define ID_AB   "roll.fix_ab_v1"
#define ID_BA   "roll.fix_ba_v1"
#define ID_CONC "roll.concurrent_v1"

/* The scenario's barrier keys by its ID: every process of a scenario, whatever it does, runs
 * one and the same definition (a materially different one under the same ID is refused). */
static int scenario_keys(const char *id)
{
    return strcmp(id, ID_AB) == 0 ? KEY_AB : strcmp(id, ID_BA) == 0 ? KEY_BA : KEY_CONC_GO;
}
enum { KEY_GO = 0, KEY_BATCH = 1, KEY_AFTER = 2, KEY_LOSER = 3 }; /* offsets from a base key */

/* ---- child processes: each one is a deployment ----------------------------------------- */

typedef enum child_mode {
    CHILD_REGISTER,     /* register; exit 50 + the number of gating IDs this process sees */
    CHILD_RACE,         /* race for the claim; the winner is parked, the loser takes over */
    CHILD_FOREIGN,      /* registry lacks the ID: must never claim it */
    CHILD_INCOMPATIBLE, /* same ID, other key types: fail closed */
} child_mode;

typedef struct child_spec {
    child_mode mode;
    const char *id;
    const char *table;
    const char *revision;
    const char *owner;
    int go_key;   /* > 0: wait on this barrier before acting */
    int key_base; /* the scenario's barrier keys (KEY_BATCH and KEY_AFTER offsets) */
    char update_set[160];
} child_spec;

enum {
    EXIT_ENV = 2,             /* could not open engine, registry or connection */
    EXIT_REGISTER = 3,        /* bf_register failed */
    EXIT_GATE = 4,            /* bf_gate failed or listed the wrong ID */
    EXIT_WON_FENCED = 10,     /* won the claim, its parked batch was rejected */
    EXIT_WON_COMMITTED = 11,  /* won the claim and its parked batch was NOT rejected */
    EXIT_LOST_DONE = 20,      /* lost the race, took over after expiry, completed */
    EXIT_LOST_UNDONE = 21,    /* took over but did not complete */
    EXIT_NO_TAKEOVER = 22,    /* never became able to take over */
    EXIT_CLAIM_ERR = 23,      /* unexpected claim result */
    EXIT_FOREIGN_ID = 30,     /* claimed (or tried wrongly) by ID */
    EXIT_FOREIGN_ANY = 31,    /* claim(NULL) did not answer NO_WORK */
    EXIT_FOREIGN_RUN = 32,    /* bf_worker_run did something */
    EXIT_INCOMPAT_REG = 40,   /* incompatible registration was not refused */
    EXIT_INCOMPAT_CLAIM = 41, /* incompatible process could claim */
    EXIT_GATING_BASE = 50,
};

/* The mutation parks on the scenario's KEY_BATCH barrier (released except during the race);
 * the keys follow the definition's ID, so the unrelated definition is one definition whatever
 * the scenario (it never claims, so its barrier is never reached). */
static void child_definition(bf_definition *d, child_spec *s)
{
    memset(d, 0, sizeof *d);
    d->id = s->mode == CHILD_FOREIGN ? "roll.unrelated_v1" : s->id;
    snprintf(s->update_set, sizeof s->update_set,
             "fixed = CASE WHEN public.bt_barrier(%d) THEN t.val * 2 END,"
             " counter = t.counter + 1",
             scenario_keys(d->id) + KEY_BATCH);
    d->description = "rolling deployment";
    d->owner = "conformance";
    d->revision = s->revision;
    d->table = s->mode == CHILD_FOREIGN ? "roll_unrelated" : s->table;
    d->key[0] =
        (bf_key_column){"id", s->mode == CHILD_INCOMPATIBLE ? BF_KEY_INTEGER : BF_KEY_BIGINT};
    d->nkey = 1;
    d->batch_size = 10;
    d->required = true;
    d->needs_repair = "t.fixed IS NULL";
    d->update_set = s->update_set;
}

static bool child_barrier(int key)
{
    PGconn *c = PQconnectdb(bt_db_conninfo());
    char sql[64];
    snprintf(sql, sizeof sql, "SELECT public.bt_barrier(%d)", key);
    PGresult *r = PQstatus(c) == CONNECTION_OK ? PQexec(c, sql) : NULL;
    bool ok = r != NULL && PQresultStatus(r) == PGRES_TUPLES_OK;
    PQclear(r);
    PQfinish(c);
    return ok;
}

static int child_register(bf_engine *e, const bf_definition *d)
{
    if (bf_register(e, d) != BF_OK)
        return EXIT_REGISTER;
    bf_gate_entry gating[4];
    int n = -1;
    if (bf_gate(e, gating, 4, &n) != BF_OK || n < 0 || n > 1)
        return EXIT_GATE;
    if (n == 1 && strcmp(gating[0].id, d->id) != 0)
        return EXIT_GATE;
    return EXIT_GATING_BASE + n;
}

static int child_race(bf_engine *e, bf_worker *w, const char *id, int key_base)
{
    bf_err err = bf_worker_claim(w, id, NULL);
    if (err == BF_OK) { /* the winner: its batch parks on KEY_BATCH until released */
        bf_step_info info;
        err = bf_worker_step(w, &info);
        return err == BF_OK && info.step == BF_STEP_LOST ? EXIT_WON_FENCED : EXIT_WON_COMMITTED;
    }
    if (err != BF_ERR_NO_WORK)
        return EXIT_CLAIM_ERR;
    /* the loser: once the test has read who won, poll (bounded) until PostgreSQL says the
     * winner's claim expired */
    if (!child_barrier(key_base + KEY_LOSER))
        return EXIT_ENV;
    for (int i = 0; (err = bf_worker_claim(w, id, NULL)) != BF_OK; i++) {
        if (err != BF_ERR_NO_WORK)
            return EXIT_CLAIM_ERR;
        if (i > 30000)
            return EXIT_NO_TAKEOVER;
        usleep(1000);
    }
    if (!child_barrier(key_base + KEY_AFTER))
        return EXIT_ENV;
    if (bf_worker_run(w, true) != BF_OK)
        return EXIT_LOST_UNDONE;
    bf_backfill row;
    if (bf_get(e, id, &row) != BF_OK || row.state != BF_STATE_COMPLETED)
        return EXIT_LOST_UNDONE;
    return EXIT_LOST_DONE;
}

static int child_foreign(bf_worker *w, const char *id)
{
    bf_err err = bf_worker_claim(w, id, NULL);
    if (err != BF_ERR_UNKNOWN_DEFINITION)
        return EXIT_FOREIGN_ID;
    if (bf_worker_claim(w, NULL, NULL) != BF_ERR_NO_WORK)
        return EXIT_FOREIGN_ANY;
    if (bf_worker_run(w, true) != BF_OK)
        return EXIT_FOREIGN_RUN;
    return 0;
}

static int child_incompatible(bf_engine *e, bf_worker *w, const bf_definition *d)
{
    if (bf_register(e, d) != BF_ERR_INCOMPATIBLE)
        return EXIT_INCOMPAT_REG;
    if (bf_worker_claim(w, d->id, NULL) != BF_ERR_NO_WORK)
        return EXIT_INCOMPAT_CLAIM;
    if (bf_worker_claim(w, NULL, NULL) != BF_ERR_NO_WORK)
        return EXIT_INCOMPAT_CLAIM;
    return 0;
}

/* What the child runs: def, or in the files variant (bt_files.h) the definition file of its ID
 * with the child's revision. The incompatible deployment stays C: it is deliberately another
 * definition under the same ID (other key types), which a second file of that ID would be. */
static bool child_standin(const bf_definition **out, const bf_definition *def, const child_spec *s)
{
    char why[BF_DIAG_MAX] = "";
    if (s->mode == CHILD_INCOMPATIBLE) {
        *out = def;
        return true;
    }
    if (bt_standin(out, def, s->revision, why, sizeof why) == BF_OK)
        return true;
    fprintf(stderr, "definition files: %s\n", why);
    return false;
}

/* Runs in the child: no cmocka assertions here, only an exit status. */
static int child_main(void *arg)
{
    child_spec *s = arg;
    bf_definition c_def;
    child_definition(&c_def, s);
    const bf_definition *run = NULL;
    if (!child_standin(&run, &c_def, s))
        return EXIT_ENV;
    bf_registry *reg = NULL;
    if (bf_registry_new(&reg) != BF_OK || bf_registry_add(reg, run, NULL, 0) != BF_OK)
        return EXIT_ENV;
    /* the parked batch waits on a barrier past the lease: its lock and statement timeouts must
     * not end it first */
    bf_config cfg = {.conninfo = bt_db_conninfo(),
                     .owner = s->owner,
                     .lease_ms = LEASE_MS,
                     .lock_timeout_ms = 30000,
                     .statement_timeout_ms = 60000};
    bf_engine *e = NULL;
    if (bf_engine_open(&e, &cfg, reg) != BF_OK) {
        bf_registry_free(reg);
        return EXIT_ENV;
    }
    bf_worker *w = NULL;
    int rc = bf_worker_new(&w, e, NULL) == BF_OK ? 0 : EXIT_ENV;
    if (rc == 0 && s->go_key > 0 && !child_barrier(s->go_key))
        rc = EXIT_ENV;
    if (rc == 0) {
        switch (s->mode) {
        case CHILD_REGISTER:
            rc = child_register(e, run);
            break;
        case CHILD_RACE:
            rc = child_race(e, w, s->id, s->key_base);
            break;
        case CHILD_FOREIGN:
            rc = child_foreign(w, s->id);
            break;
        case CHILD_INCOMPATIBLE:
            rc = child_incompatible(e, w, run);
            break;
        }
    }
    bf_worker_free(w);
    bf_engine_close(e);
    bf_registry_free(reg);
    return rc;
}

static int run_child(child_mode mode, const char *id, const char *table, const char *revision,
                     const char *owner)
{
    child_spec s = {mode, id, table, revision, owner, 0, 0, ""};
    return bt_wait_child(bt_spawn(child_main, &s));
}

/* ---- the parent: an operator process that never registers ------------------------------ */

/* The operator's process runs the same definitions as both deployments (the child's
 * update_set with the scenario's KEY_BATCH barrier, 610 + 1 and 620 + 1, and its description
 * and owner, so that one definition file stands in for both in the files variant): a
 * materially different definition under the same ID is refused (definition digest, schema
 * version 8). */
static const bf_definition op_ab = {.id = ID_AB,
                                    .description = "rolling deployment",
                                    .owner = "conformance",
                                    .revision = "operator",
                                    .table = "roll_ab",
                                    .key = {{"id", BF_KEY_BIGINT}},
                                    .nkey = 1,
                                    .batch_size = 10,
                                    .required = true,
                                    .needs_repair = "t.fixed IS NULL",
                                    .update_set = "fixed = CASE WHEN public.bt_barrier(611) THEN"
                                                  " t.val * 2 END, counter = t.counter + 1"};
static const bf_definition op_ba = {.id = ID_BA,
                                    .description = "rolling deployment",
                                    .owner = "conformance",
                                    .revision = "operator",
                                    .table = "roll_ba",
                                    .key = {{"id", BF_KEY_BIGINT}},
                                    .nkey = 1,
                                    .batch_size = 10,
                                    .required = true,
                                    .needs_repair = "t.fixed IS NULL",
                                    .update_set = "fixed = CASE WHEN public.bt_barrier(621) THEN"
                                                  " t.val * 2 END, counter = t.counter + 1"};
static const bf_definition *const op_defs[] = {&op_ab, &op_ba};

static bf_registry *op_registry;

static int setup(void **state)
{
    (void)state;
    bt_db_create("rolling");
    PGconn *c = bt_connect();
    bt_install_barrier(c);
    bt_make_items(c, "roll_ab", 30);
    bt_make_items(c, "roll_ba", 30);
    bt_make_items(c, "roll_concurrent", 30);
    bt_make_items(c, "roll_unrelated", 30);
    PQfinish(c);
    op_registry = bt_registry(op_defs, 2);
    bf_engine *e = bt_engine(op_registry, "operator", 0); /* migrates; registers nothing */
    bf_engine_close(e);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bf_registry_free(op_registry);
    bt_db_drop();
    return 0;
}

static long long rows_for(PGconn *c, const char *id)
{
    return bt_int(c, "SELECT count(*) FROM buzz_backfill.backfill WHERE id = '%s'", id);
}

/* One row, one readiness obligation, the last registration's metadata, lifecycle as given. */
static void assert_converged(PGconn *c, bf_engine *op, const char *id, const char *revision,
                             const bf_backfill *lifecycle)
{
    assert_int_equal(rows_for(c, id), 1);
    assert_int_equal(bt_int(c,
                            "SELECT count(*) FROM buzz_backfill.backfill WHERE id = '%s'"
                            " AND required",
                            id),
                     1);
    bf_backfill row = bt_get(op, id);
    assert_string_equal(row.revision, revision);
    assert_string_equal(row.key_types, "bigint");
    if (lifecycle != NULL) {
        assert_int_equal(row.state, lifecycle->state);
        assert_int_equal(row.generation, lifecycle->generation);
        assert_int_equal(row.has_bound, lifecycle->has_bound);
        assert_string_equal(row.bound, lifecycle->bound);
        assert_int_equal(row.has_checkpoint, lifecycle->has_checkpoint);
        assert_string_equal(row.checkpoint, lifecycle->checkpoint);
        assert_false(row.claimed);
    }
}

/* Both deployments register in the given order, repeatedly, then before and after start. */
static void registration_phase(PGconn *c, bf_engine *op, const char *id, const char *table,
                               bool a_first)
{
    const char *first = a_first ? "rev-a" : "rev-b";
    const char *second = a_first ? "rev-b" : "rev-a";
    const char *owner1 = a_first ? "proc-a" : "proc-b";
    const char *owner2 = a_first ? "proc-b" : "proc-a";
    assert_int_equal(rows_for(c, id), 0);
    assert_int_equal(run_child(CHILD_REGISTER, id, table, first, owner1), EXIT_GATING_BASE + 1);
    bf_backfill pending = bt_get(op, id);
    assert_int_equal(pending.state, BF_STATE_PENDING);
    assert_converged(c, op, id, first, &pending);
    assert_int_equal(run_child(CHILD_REGISTER, id, table, second, owner2), EXIT_GATING_BASE + 1);
    assert_converged(c, op, id, second, &pending);
    assert_int_equal(run_child(CHILD_REGISTER, id, table, second, owner2), EXIT_GATING_BASE + 1);
    assert_converged(c, op, id, second, &pending);
    assert_int_equal(run_child(CHILD_REGISTER, id, table, first, owner1), EXIT_GATING_BASE + 1);
    assert_converged(c, op, id, first, &pending);

    /* start; later registrations change metadata only, never lifecycle or progress */
    assert_int_equal(bt_act(op, BF_ACTION_START, id), BF_OK);
    bf_backfill running = bt_get(op, id);
    assert_int_equal(running.state, BF_STATE_RUNNING);
    assert_int_equal(run_child(CHILD_REGISTER, id, table, second, owner2), EXIT_GATING_BASE + 1);
    assert_converged(c, op, id, second, &running);
    assert_int_equal(run_child(CHILD_REGISTER, id, table, first, owner1), EXIT_GATING_BASE + 1);
    assert_converged(c, op, id, first, &running);
}

/* Processes that cannot interpret the row never claim it, while it is eligible. */
static void fail_closed_phase(PGconn *c, bf_engine *op, const char *id, const char *table)
{
    bf_backfill before = bt_get(op, id);
    assert_int_equal(before.state, BF_STATE_RUNNING);
    assert_false(before.claimed);
    assert_int_equal(run_child(CHILD_FOREIGN, id, table, "rev-foreign", "proc-foreign"), 0);
    assert_int_equal(run_child(CHILD_INCOMPATIBLE, id, table, "rev-incompatible", "proc-inc"), 0);
    bf_backfill after = bt_get(op, id);
    assert_converged(c, op, id, before.revision, &before);
    assert_int_equal(after.updated_at, before.updated_at); /* the row was not written at all */
    assert_string_equal(after.claim_owner, "");
}

/* Both deployments race for the claim; whoever wins is fenced out after takeover. */
static void race_phase(PGconn *c, bf_engine *op, const char *id, const char *table, int keys)
{
    PGconn *holder = bt_connect();
    bt_lock(holder, keys + KEY_GO);
    bt_lock(holder, keys + KEY_BATCH);
    bt_lock(holder, keys + KEY_AFTER);
    bt_lock(holder, keys + KEY_LOSER);
    child_spec a = {CHILD_RACE, id, table, "rev-a", "proc-a", keys + KEY_GO, keys, ""};
    child_spec b = {CHILD_RACE, id, table, "rev-b", "proc-b", keys + KEY_GO, keys, ""};
    pid_t pid_a = bt_spawn(child_main, &a);
    pid_t pid_b = bt_spawn(child_main, &b);
    bt_wait_waiters(holder, keys + KEY_GO, 2);
    bf_backfill start = bt_get(op, id);
    bt_unlock(holder, keys + KEY_GO);

    /* exactly one owns the claim, with its batch in flight; learn who from the row */
    bt_wait_waiters(holder, keys + KEY_BATCH, 1);
    bf_backfill won = bt_get(op, id); /* the loser is held: nobody can have taken over yet */
    assert_true(won.claim_owner[0] != '\0');
    assert_int_equal(won.generation, start.generation + 1);
    bool a_won = strcmp(won.claim_owner, "proc-a") == 0;
    assert_true(a_won || strcmp(won.claim_owner, "proc-b") == 0);
    const char *loser = a_won ? "proc-b" : "proc-a";
    pid_t winner_pid = a_won ? pid_a : pid_b;
    pid_t loser_pid = a_won ? pid_b : pid_a;

    /* the loser takes over once PostgreSQL time expires the parked winner's claim */
    bt_wait_waiters(holder, keys + KEY_LOSER, 1);
    bt_unlock(holder, keys + KEY_LOSER);
    bf_backfill taken = won;
    for (int i = 0; strcmp(taken.claim_owner, loser) != 0; i++) {
        assert_true(i < 30000);
        usleep(1000);
        taken = bt_get(op, id);
    }
    assert_int_equal(taken.generation, won.generation + 1);

    bt_unlock(holder, keys + KEY_BATCH);
    assert_int_equal(bt_wait_child(winner_pid), EXIT_WON_FENCED);
    bf_backfill fenced = bt_get(op, id);
    assert_int_equal(fenced.state, BF_STATE_RUNNING);
    assert_int_equal(fenced.generation, taken.generation);
    assert_string_equal(fenced.claim_owner, loser);
    assert_false(fenced.has_checkpoint);
    assert_int_equal(fenced.rows_committed, 0);
    assert_int_equal(bt_int(c, "SELECT count(*) FROM %s WHERE fixed IS NOT NULL", table), 0);
    assert_int_equal(bt_int(c, "SELECT coalesce(sum(counter), 0) FROM %s", table), 0);

    bt_unlock(holder, keys + KEY_AFTER);
    assert_int_equal(bt_wait_child(loser_pid), EXIT_LOST_DONE);
    PQfinish(holder);

    bf_backfill done = bt_get(op, id);
    assert_int_equal(done.state, BF_STATE_COMPLETED);
    assert_string_equal(done.bound, start.bound);
    assert_int_equal(done.rows_committed, 30);
    assert_int_equal(bt_int(c, "SELECT count(*) FROM %s WHERE fixed = val * 2", table), 30);
    assert_int_equal(bt_int(c, "SELECT count(*) FROM %s WHERE counter = 1", table), 30);
    assert_int_equal(rows_for(c, id), 1);
    /* completed: a later registration keeps one row and no longer gates */
    assert_int_equal(run_child(CHILD_REGISTER, id, table, "rev-b", "proc-b"), EXIT_GATING_BASE + 0);
    assert_int_equal(bt_get(op, id).state, BF_STATE_COMPLETED);
}

static void rolling_deployment(const char *id, const char *table, bool a_first, int keys)
{
    PGconn *c = bt_connect();
    bf_engine *op = bt_engine(op_registry, "operator", 0);
    registration_phase(c, op, id, table, a_first);
    fail_closed_phase(c, op, id, table);
    race_phase(c, op, id, table, keys);
    int gating = -1;
    bf_gate_entry gate[2];
    assert_int_equal(bf_gate(op, gate, 2, &gating), BF_OK);
    for (int i = 0; i < gating && i < 2; i++)
        assert_string_not_equal(gate[i].id, id);
    bf_engine_close(op);
    PQfinish(c);
}

static void test_rolling_a_registers_first(void **state)
{
    (void)state;
    rolling_deployment(ID_AB, "roll_ab", true, KEY_AB);
}

static void test_rolling_b_registers_first(void **state)
{
    (void)state;
    rolling_deployment(ID_BA, "roll_ba", false, KEY_BA);
}

/* Both deployments register at the same moment: still one row and one obligation. */
static void test_concurrent_registration(void **state)
{
    (void)state;
    PGconn *c = bt_connect();
    bf_engine *op = bt_engine(op_registry, "operator", 0);
    for (int round = 0; round < 3; round++) {
        bt_lock(c, KEY_CONC_GO);
        child_spec a = {.mode = CHILD_REGISTER,
                        .id = ID_CONC,
                        .table = "roll_concurrent",
                        .revision = "rev-a",
                        .owner = "proc-a",
                        .go_key = KEY_CONC_GO};
        child_spec b = {.mode = CHILD_REGISTER,
                        .id = ID_CONC,
                        .table = "roll_concurrent",
                        .revision = "rev-b",
                        .owner = "proc-b",
                        .go_key = KEY_CONC_GO};
        pid_t pa = bt_spawn(child_main, &a);
        pid_t pb = bt_spawn(child_main, &b);
        bt_wait_waiters(c, KEY_CONC_GO, 2);
        bt_unlock(c, KEY_CONC_GO);
        assert_int_equal(bt_wait_child(pa), EXIT_GATING_BASE + 1);
        assert_int_equal(bt_wait_child(pb), EXIT_GATING_BASE + 1);
        assert_int_equal(rows_for(c, ID_CONC), 1);
        bf_backfill row = bt_get(op, ID_CONC);
        assert_int_equal(row.state, BF_STATE_PENDING);
        assert_int_equal(row.generation, 0);
        assert_true(strcmp(row.revision, "rev-a") == 0 || strcmp(row.revision, "rev-b") == 0);
    }
    bf_engine_close(op);
    PQfinish(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rolling_a_registers_first),
        cmocka_unit_test(test_rolling_b_registers_first),
        cmocka_unit_test(test_concurrent_registration),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
