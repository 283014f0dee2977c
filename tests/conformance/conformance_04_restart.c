/*
 * conformance_04_restart.c - spec conformance test 4, restart.
 *
 * Worker processes are terminated with SIGKILL (no release, no cleanup) at three points:
 *   - after a batch commit: an after_step hook kills its own process right after the Nth
 *     commit; exactly N batches are durable;
 *   - before a batch commit: the child's batch waits at a barrier when it is killed; its
 *     orphaned server session is released only after another worker has taken over, so it
 *     reaches its fence late and commits nothing;
 *   - during validation: the child's validation waits at a barrier (in the postcondition) when
 *     it is killed; nothing completes.
 * After each, rows are inserted beyond the captured bound, a restarted process re-issues start
 * (as automatic startup does), and a new worker process waits for the lease to expire and
 * rebuilds progress from PostgreSQL alone: the takeover advances the generation, the bound is
 * the one captured at start (never recaptured), the checkpoint is the one the crash left, and
 * the run completes with every row through the bound repaired exactly once and every row
 * beyond it untouched.
 *
 * Guards proved (removing any one of them fails this test):
 *   - bound capture only at start: action_start's "state = 'pending'" predicate with the state
 *     table (actions.c); workers read the bound from the row at claim (worker.c claim_sql
 *     RETURNING b.bound) instead of recapturing it. (The guard_2_bound trigger, the database's
 *     own refusal of a changed bound, no engine path reaches; test_db_guards proves it.)
 *   - takeover never rewinds the checkpoint: claim_sql leaves checkpoint untouched and the
 *     new owner resumes from the row's checkpoint.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "bt.h"

#define ROWS          1000 /* rows at start: the bound is 1000 */
#define LATE_ROWS     100  /* rows inserted after start, beyond the bound */
#define BATCH         100
#define CHILD_LEASE   500   /* ms: the killed child's claim expires quickly */
#define EXPIRY_WAIT   20000 /* ms: upper bound on waiting for a claim to expire */
#define KILLED        (128 + SIGKILL)
#define BARRIER_BATCH 41
#define BARRIER_VALID 42

#define DEFINE(name, tbl)                                                                          \
    static const bf_definition name = {                                                            \
        .id = "restart." tbl "_v1",                                                                \
        .table = tbl,                                                                              \
        .key = {{"id", BF_KEY_BIGINT}},                                                            \
        .nkey = 1,                                                                                 \
        .batch_size = BATCH,                                                                       \
        .needs_repair = "t.fixed IS NULL AND bt_barrier(41)",                                      \
        .update_set = "fixed = t.val * 2, counter = t.counter + 1",                                \
        .postcondition = "t.fixed = t.val * 2 AND t.counter = 1 AND bt_barrier(42)",               \
    }

DEFINE(after_def, "rs_after");
DEFINE(before_def, "rs_before");
DEFINE(valid_def, "rs_valid");

static const bf_definition *const defs[] = {&after_def, &before_def, &valid_def};
#define NDEFS (sizeof defs / sizeof defs[0])

static bf_registry *reg;
static bf_engine *admin;
static PGconn *conn;

/* ---- worker processes ------------------------------------------------------------------ */

/* What a child does, and what it reports back (in memory shared with the parent). */
typedef struct child_job {
    const char *id;
    char owner[32];
    int kill_after_batches; /* > 0: SIGKILL itself right after this many batch commits */
    bool wait_for_claim;    /* poll until the previous claim expires */
    /* results */
    int stage;           /* how far it got: 1 engine, 2 claimed, 3 finished stepping */
    int64_t generation;  /* of its claim */
    bf_backfill claimed; /* the row as PostgreSQL showed it right after the claim */
    int batches;
    bf_step last;
} child_job;

static void child_after_step(void *arg, const bf_step_info *info)
{
    child_job *j = arg;
    if (info->step != BF_STEP_BATCH)
        return;
    j->batches++;
    if (j->kill_after_batches > 0 && j->batches == j->kill_after_batches)
        kill(getpid(), SIGKILL); /* the commit is done; die before anything else */
}

static int child_main(void *arg)
{
    child_job *j = arg;
    bf_engine *e = bt_child_engine(reg, j->owner, CHILD_LEASE);
    if (e == NULL)
        return 2;
    j->stage = 1;
    bf_worker_hooks hooks = {.after_step = child_after_step, .arg = j};
    bf_worker *w = NULL;
    if (bf_worker_new(&w, e, &hooks) != BF_OK)
        return 3;
    bf_err err = j->wait_for_claim ? bt_claim_poll(w, j->id, &j->generation, EXPIRY_WAIT)
                                   : bf_worker_claim(w, j->id, &j->generation);
    if (err != BF_OK || bf_get(e, j->id, &j->claimed) != BF_OK)
        return 4;
    j->stage = 2;
    for (int i = 0; i < 100; i++) {
        bf_step_info info;
        if (bf_worker_step(w, &info) != BF_OK)
            return 5;
        j->last = info.step;
        if (info.step != BF_STEP_BATCH && info.step != BF_STEP_VALIDATING)
            break;
    }
    j->stage = 3;
    bf_worker_free(w);
    bf_engine_close(e);
    return j->last == BF_STEP_COMPLETED ? 0 : 6;
}

static child_job *job_new(const char *id, const char *owner)
{
    child_job *j = mmap(NULL, sizeof *j, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(j != MAP_FAILED);
    memset(j, 0, sizeof *j);
    j->id = id;
    snprintf(j->owner, sizeof j->owner, "%s", owner);
    return j;
}

static void job_free(child_job *j)
{
    munmap(j, sizeof *j);
}

/* ---- fixture --------------------------------------------------------------------------- */

static int setup(void **state)
{
    (void)state;
    bt_db_create("conf04");
    conn = bt_connect();
    bt_install_barrier(conn);
    for (size_t i = 0; i < NDEFS; i++)
        bt_make_items(conn, defs[i]->table, ROWS);
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

/* start, then insert rows beyond the captured bound */
static void start_and_grow(const bf_definition *d)
{
    assert_int_equal(bt_act(admin, BF_ACTION_START, d->id), BF_OK);
    bf_backfill row = bt_get(admin, d->id);
    assert_int_equal(row.state, BF_STATE_RUNNING);
    assert_string_equal(row.bound, "1000");
    bt_exec(conn, "INSERT INTO %s (id, val) SELECT g, g %% 1000 FROM generate_series(%d, %d) g",
            d->table, ROWS + 1, ROWS + LATE_ROWS);
}

/* What a restarted process does at startup: start again (automatic mode). It must not
 * recapture the bound: start is a conflict for a started row. */
static void restart_start(const bf_definition *d)
{
    bf_engine *e = bt_engine(reg, "restarted", 0);
    assert_int_equal(bf_register_all(e), BF_OK);
    bf_err err = bt_act(e, BF_ACTION_START, d->id);
    assert_string_equal(bt_get(e, d->id).bound, "1000");
    assert_int_equal(err, BF_ERR_CONFLICT);
    bf_engine_close(e);
}

/* rows with id <= through repaired exactly once, all others untouched */
static void check_rows(const char *table, long through)
{
    assert_int_equal(bt_int(conn,
                            "SELECT count(*) FROM %s WHERE id <= %ld AND counter = 1"
                            " AND fixed = val * 2",
                            table, through),
                     through);
    assert_int_equal(bt_int(conn,
                            "SELECT count(*) FROM %s WHERE id > %ld AND counter = 0"
                            " AND fixed IS NULL",
                            table, through),
                     ROWS + LATE_ROWS - through);
}

/* A new worker process takes over after the lease expires and runs to completion from the
 * progress PostgreSQL holds: checkpoint `cp` ("" = none), state `st`, generation > `gen`. */
static void takeover_and_complete(const bf_definition *d, const char *cp, bf_state st, int64_t gen)
{
    child_job *j = job_new(d->id, "successor");
    j->wait_for_claim = true;
    assert_int_equal(bt_wait_child(bt_spawn(child_main, j)), 0);
    assert_int_equal(j->stage, 3);
    assert_int_equal(j->generation, gen + 1);
    assert_int_equal(j->claimed.generation, gen + 1);
    assert_int_equal(j->claimed.state, st);
    assert_string_equal(j->claimed.bound, "1000");
    assert_string_equal(j->claimed.checkpoint, cp);
    assert_int_equal(j->last, BF_STEP_COMPLETED);
    job_free(j);

    bf_backfill row = bt_get(admin, d->id);
    assert_int_equal(row.state, BF_STATE_COMPLETED);
    assert_string_equal(row.bound, "1000");
    assert_string_equal(row.checkpoint, "1000");
    assert_int_equal(row.rows_committed, ROWS);
    assert_int_equal(row.batches_committed, ROWS / BATCH);
    check_rows(d->table, ROWS);
}

/* ---- killed after a batch commit ------------------------------------------------------- */

static void test_killed_after_commit(void **state)
{
    (void)state;
    const bf_definition *d = &after_def;
    start_and_grow(d);

    child_job *j = job_new(d->id, "doomed");
    j->kill_after_batches = 3;
    assert_int_equal(bt_wait_child(bt_spawn(child_main, j)), KILLED);
    assert_int_equal(j->stage, 2);
    assert_int_equal(j->batches, 3);
    int64_t gen = j->generation;
    job_free(j);

    /* exactly the three committed batches are durable; the dead claim is still recorded */
    bf_backfill row = bt_get(admin, d->id);
    assert_int_equal(row.state, BF_STATE_RUNNING);
    assert_int_equal(row.generation, gen);
    assert_string_equal(row.claim_owner, "doomed");
    assert_string_equal(row.checkpoint, "300");
    assert_int_equal(row.batches_committed, 3);
    assert_int_equal(row.rows_committed, 300);
    check_rows(d->table, 300);

    restart_start(d);
    takeover_and_complete(d, "300", BF_STATE_RUNNING, gen);
}

/* ---- killed before a batch commit ------------------------------------------------------ */

static void test_killed_before_commit(void **state)
{
    (void)state;
    const bf_definition *d = &before_def;
    start_and_grow(d);

    /* two batches commit normally first */
    bf_engine *we = bt_engine(reg, "first", 30000);
    bf_worker *w = bt_claimed_worker(we, d->id);
    for (int i = 0; i < 2; i++) {
        bf_step_info info;
        assert_int_equal(bf_worker_step(w, &info), BF_OK);
        assert_int_equal(info.step, BF_STEP_BATCH);
    }
    assert_int_equal(bf_worker_release(w), BF_OK);
    bf_worker_free(w);
    bf_engine_close(we);

    /* the child's third batch waits at the barrier inside its transaction: kill it there */
    bt_lock(conn, BARRIER_BATCH);
    child_job *j = job_new(d->id, "doomed");
    pid_t pid = bt_spawn(child_main, j);
    bt_wait_waiters(conn, BARRIER_BATCH, 1);
    int orphan = bt_barrier_waiter_pid(conn, BARRIER_BATCH);
    assert_true(orphan > 0);
    assert_int_equal(kill(pid, SIGKILL), 0);
    assert_int_equal(bt_wait_child(pid), KILLED);
    assert_int_equal(j->stage, 2);
    assert_int_equal(j->batches, 0);
    int64_t gen = j->generation;
    job_free(j);

    /* a new worker takes over while the dead child's statement is still in flight */
    bf_engine *te = bt_engine(reg, "taker", 30000);
    bf_worker *taker = NULL;
    assert_int_equal(bf_worker_new(&taker, te, NULL), BF_OK);
    int64_t taker_gen = 0;
    assert_int_equal(bt_claim_poll(taker, d->id, &taker_gen, EXPIRY_WAIT), BF_OK);
    assert_int_equal(taker_gen, gen + 1);

    /* the orphaned statement resumes, meets the fence, and ends without committing */
    bt_unlock(conn, BARRIER_BATCH);
    bt_wait_backend_gone(conn, orphan);
    bf_backfill row = bt_get(admin, d->id);
    assert_int_equal(row.generation, taker_gen);
    assert_string_equal(row.claim_owner, "taker");
    assert_string_equal(row.checkpoint, "200");
    assert_int_equal(row.batches_committed, 2);
    assert_int_equal(row.rows_committed, 200);
    check_rows(d->table, 200);

    /* the taker goes away without doing anything (a clean release) */
    assert_int_equal(bf_worker_release(taker), BF_OK);
    bf_worker_free(taker);
    bf_engine_close(te);

    restart_start(d);
    takeover_and_complete(d, "200", BF_STATE_RUNNING, taker_gen);
}

/* ---- killed during validation ---------------------------------------------------------- */

static void test_killed_during_validation(void **state)
{
    (void)state;
    const bf_definition *d = &valid_def;
    start_and_grow(d);

    /* the child runs every batch, enters validating, and its validation waits: kill it */
    bt_lock(conn, BARRIER_VALID);
    child_job *j = job_new(d->id, "doomed");
    pid_t pid = bt_spawn(child_main, j);
    bt_wait_waiters(conn, BARRIER_VALID, 1);
    int orphan = bt_barrier_waiter_pid(conn, BARRIER_VALID);
    assert_true(orphan > 0);
    assert_int_equal(kill(pid, SIGKILL), 0);
    assert_int_equal(bt_wait_child(pid), KILLED);
    assert_int_equal(j->stage, 2);
    assert_int_equal(j->batches, ROWS / BATCH);
    assert_int_equal(j->last, BF_STEP_VALIDATING);
    int64_t gen = j->generation;
    job_free(j);

    bt_unlock(conn, BARRIER_VALID);
    bt_wait_backend_gone(conn, orphan);
    bf_backfill row = bt_get(admin, d->id);
    assert_int_equal(row.state, BF_STATE_VALIDATING);
    assert_int_equal(row.generation, gen);
    assert_string_equal(row.checkpoint, "1000");
    assert_false(row.has_completed_at);
    assert_int_equal(row.validation, BF_VALIDATION_NONE);
    check_rows(d->table, ROWS);

    restart_start(d);
    takeover_and_complete(d, "1000", BF_STATE_VALIDATING, gen);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_killed_after_commit),
        cmocka_unit_test(test_killed_before_commit),
        cmocka_unit_test(test_killed_during_validation),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
