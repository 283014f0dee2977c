/*
 * conformance_05_stale_owner.c - spec conformance test 5, "Stale owner": pause, claim expiry and
 * takeover while a worker is in flight reject its mutation, checkpoint, validation and
 * completion at commit.
 *
 * Each case parks a worker (its own engine, driven from its own thread) inside its transaction
 * on a barrier: the definition's SQL calls bt_barrier(key) while the test holds that advisory
 * lock. With the worker parked, the operator (or another worker) changes the row through the
 * engine API; then the barrier is released and the test observes that nothing of the stale
 * work committed. Every stale worker held a valid claim when its work started (renewed right
 * before), so a check made only before work starts would have let it commit.
 *
 * Guards proved (removing one makes a case here fail):
 *   - the batch's commit-time fence: registry.c add_fence (state running, generation,
 *     owner, claim still valid by clock_timestamp()) together with
 *     buzz_backfill.batch_verdict raising BFS01 when the fence matched no row, so the batch's
 *     target mutation rolls back with its checkpoint (cases pause and takeover);
 *   - worker.c worker_transition, the fenced (generation, owner, live claim, lifecycle)
 *     statement by which a worker completes a validating row (case stale validator);
 *   - validate.c validate_record's generation fence on the completion driven by an explicit
 *     validation (case stale explicit validation);
 *   - worker.c step_failed's disposition of a fenced-out commit (BF_ERR_STALE) through
 *     worker_fail: when only the worker's own lease ran out and nobody took over, the attempt is
 *     recorded and counted (BF_STEP_RETRY, attempts, error_class retryable, backoff), and the
 *     attempt that exhausts max_attempts enters failed, instead of BF_STEP_LOST with nothing
 *     recorded, which would retry a batch that always outlasts its lease forever (case own
 *     lease expiry). A takeover still makes the stale step BF_STEP_LOST (case takeover).
 * Defence in depth: in the pause case the batch's lease extension (claim_expires_at) would also
 * violate the schema's "claim_owner IS NULL = claim_expires_at IS NULL" check once pause has
 * cleared the claim, so that case fails only when the fence and that extension are removed.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "bt.h"

#define ID_PAUSE        "stale.pause_v1"
#define ID_TAKEOVER     "stale.takeover_v1"
#define ID_VALIDATE     "stale.validator_v1"
#define ID_EXPLICIT     "stale.explicit_v1"
#define ID_EXPIRY       "stale.expiry_v1"
#define EXPIRY_LEASE_MS 200 /* the own-lease case: short, so the test waits little */

enum {
    KEY_PAUSE = 501,
    KEY_TAKEOVER = 502,
    KEY_VALIDATE = 503,
    KEY_EXPLICIT = 504,
    KEY_EXPIRY = 505
};

/* Mutations park on their barrier; counter counts how often each row was mutated. */
static const bf_definition def_pause = {
    .id = ID_PAUSE,
    .description = "stale owner: pause while a batch is in flight",
    .table = "stale_pause",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = CASE WHEN public.bt_barrier(501) THEN t.val * 2 END,"
                  " counter = t.counter + 1",
};

static const bf_definition def_takeover = {
    .id = ID_TAKEOVER,
    .description = "stale owner: expiry and takeover while a batch is in flight",
    .table = "stale_takeover",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = CASE WHEN public.bt_barrier(502) THEN t.val * 2 END,"
                  " counter = t.counter + 1",
};

/* Validations park on their barrier (one validation chunk: 30 rows < 10 * batch_size). */
static const bf_definition def_validate = {
    .id = ID_VALIDATE,
    .description = "stale owner: pause and resume while the worker validates",
    .table = "stale_validate",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2",
    .postcondition = "t.fixed = t.val * 2 AND public.bt_barrier(503)",
};

static const bf_definition def_explicit = {
    .id = ID_EXPLICIT,
    .description = "stale owner: pause and resume while an explicit validation runs",
    .table = "stale_explicit",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2",
    .postcondition = "t.fixed = t.val * 2 AND public.bt_barrier(504)",
};

/* The batch parks on its barrier while its owner's lease runs out; nobody takes over. Two
 * attempts: the first expiry retries (after a 1..5 ms backoff), the second fails. */
static const bf_definition def_expiry = {
    .id = ID_EXPIRY,
    .description = "stale owner: the owner's own lease runs out during a batch",
    .table = "stale_expiry",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 10,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = CASE WHEN public.bt_barrier(505) THEN t.val * 2 END,"
                  " counter = t.counter + 1",
    .retry = {.max_attempts = 2, .base_ms = 1, .cap_ms = 5},
};

static const bf_definition *const defs[] = {&def_pause, &def_takeover, &def_validate, &def_explicit,
                                            &def_expiry};

static const bf_actor operator_who = {.actor = "test-operator", .authority = "test"};

static bf_registry *registry;

/* ---- an explicit validation on its own thread (a worker step: bt_step_thread) ---------- */

typedef struct validate_job {
    pthread_t thread;
    bf_engine *e;
    const char *id;
    bf_err err;
    bf_action_result res;
} validate_job;

static void *validate_job_main(void *arg)
{
    validate_job *job = arg;
    job->err = bf_validate(job->e, job->id, &operator_who, &job->res);
    return NULL;
}

static void validate_job_start(validate_job *job, bf_engine *e, const char *id)
{
    memset(job, 0, sizeof *job);
    job->e = e;
    job->id = id;
    assert_int_equal(pthread_create(&job->thread, NULL, validate_job_main, job), 0);
}

/* ---- helpers --------------------------------------------------------------------------- */

static bf_action_result act(bf_engine *e, bf_action action, const char *id)
{
    bf_action_result res;
    bf_err err = bf_action_apply(e, action, id, &operator_who, &res);
    assert_int_equal(err, BF_OK);
    assert_int_equal(res.err, BF_OK);
    return res;
}

/* Rows of the target table that were mutated, and the total number of mutations. */
static void target_counts(PGconn *c, const char *table, long long *fixed, long long *mutations)
{
    *fixed = bt_int(c, "SELECT count(*) FROM %s WHERE fixed IS NOT NULL", table);
    *mutations = bt_int(c, "SELECT coalesce(sum(counter), 0) FROM %s", table);
}

/* Claim id with w, polling (bounded) until PostgreSQL lets the claim through. */
static int64_t claim_when_eligible(bf_worker *w, const char *id)
{
    int64_t gen = 0;
    for (int i = 0; i < 20000; i++) {
        bf_err err = bf_worker_claim(w, id, &gen);
        if (err == BF_OK)
            return gen;
        assert_int_equal(err, BF_ERR_NO_WORK);
        usleep(1000);
    }
    fail_msg("%s never became claimable", id);
    return 0;
}

static int setup(void **state)
{
    (void)state;
    bt_db_create("stale_owner");
    PGconn *c = bt_connect();
    bt_install_barrier(c);
    bt_make_items(c, "stale_pause", 30);
    bt_make_items(c, "stale_takeover", 30);
    bt_make_items(c, "stale_validate", 30);
    bt_make_items(c, "stale_explicit", 30);
    bt_make_items(c, "stale_expiry", 30);
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

/* ---- (a) pause while a batch is in flight ---------------------------------------------- */

static void test_pause_rejects_inflight_batch(void **state)
{
    (void)state;
    PGconn *c = bt_connect();
    bf_engine *op = bt_engine(registry, "operator", 0);
    bf_engine *we = bt_engine(registry, "worker-pause", 30000);
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, we, NULL), BF_OK);

    act(op, BF_ACTION_START, ID_PAUSE);
    int64_t gen = 0;
    assert_int_equal(bf_worker_claim(w, ID_PAUSE, &gen), BF_OK);
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH); /* one batch committed: checkpoint 10 */
    bf_backfill before = bt_get(op, ID_PAUSE);
    assert_string_equal(before.checkpoint, "10");

    /* park the next batch inside its transaction, after it started under a valid claim */
    bt_lock(c, KEY_PAUSE);
    assert_int_equal(bf_worker_renew(w), BF_OK);
    bt_step_thread job;
    bt_step_thread_start(&job, w, false);
    bt_wait_waiters(c, KEY_PAUSE, 1);
    bf_backfill mid = bt_get(op, ID_PAUSE);
    assert_true(mid.claimed);
    assert_string_equal(mid.claim_owner, "worker-pause");
    assert_int_equal(mid.generation, gen);

    bf_action_result paused = act(op, BF_ACTION_PAUSE, ID_PAUSE);
    assert_int_equal(paused.result, BF_STATE_PAUSED);
    assert_true(paused.generation > gen);

    bt_unlock(c, KEY_PAUSE);
    bt_step_thread_join(&job, 60);
    assert_int_equal(job.err, BF_OK);
    assert_int_equal(job.info.step, BF_STEP_LOST);

    /* nothing of the stale batch committed: target rows, checkpoint, counters */
    bf_backfill after = bt_get(op, ID_PAUSE);
    assert_int_equal(after.state, BF_STATE_PAUSED);
    assert_int_equal(after.generation, paused.generation);
    assert_string_equal(after.checkpoint, "10");
    assert_string_equal(after.bound, before.bound);
    assert_int_equal(after.rows_committed, 10);
    assert_int_equal(after.batches_committed, 1);
    assert_false(after.claimed);
    long long fixed = 0, mutations = 0;
    target_counts(c, "stale_pause", &fixed, &mutations);
    assert_int_equal(fixed, 10);
    assert_int_equal(mutations, 10);

    /* the stale worker holds nothing and cannot claim a paused row */
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_IDLE);
    assert_int_equal(bf_worker_claim(w, ID_PAUSE, NULL), BF_ERR_NO_WORK);

    /* resumed, the rest runs from the committed checkpoint, every row exactly once */
    act(op, BF_ACTION_RESUME, ID_PAUSE);
    assert_int_equal(bf_worker_run(w, true), BF_OK);
    after = bt_get(op, ID_PAUSE);
    assert_int_equal(after.state, BF_STATE_COMPLETED);
    target_counts(c, "stale_pause", &fixed, &mutations);
    assert_int_equal(fixed, 30);
    assert_int_equal(mutations, 30);
    assert_int_equal(bt_int(c, "SELECT max(counter) FROM stale_pause"), 1);

    bf_worker_free(w);
    bf_engine_close(we);
    bf_engine_close(op);
    PQfinish(c);
}

/* ---- (b) claim expiry and takeover while a batch is in flight -------------------------- */

static void test_takeover_rejects_expired_owner(void **state)
{
    (void)state;
    PGconn *c = bt_connect();
    bf_engine *op = bt_engine(registry, "operator", 0);
    bf_engine *old_e = bt_engine(registry, "worker-old", 1000);
    bf_engine *new_e = bt_engine(registry, "worker-new", 30000);
    bf_worker *old_w = NULL, *new_w = NULL;
    assert_int_equal(bf_worker_new(&old_w, old_e, NULL), BF_OK);
    assert_int_equal(bf_worker_new(&new_w, new_e, NULL), BF_OK);

    act(op, BF_ACTION_START, ID_TAKEOVER);
    int64_t old_gen = 0;
    assert_int_equal(bf_worker_claim(old_w, ID_TAKEOVER, &old_gen), BF_OK);
    bf_step_info info;
    assert_int_equal(bf_worker_step(old_w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH);

    /* a second worker cannot claim while the lease is valid */
    assert_int_equal(bf_worker_claim(new_w, ID_TAKEOVER, NULL), BF_ERR_NO_WORK);

    bt_lock(c, KEY_TAKEOVER);
    assert_int_equal(bf_worker_renew(old_w), BF_OK); /* valid claim when the batch starts */
    bt_step_thread job;
    bt_step_thread_start(&job, old_w, false);
    bt_wait_waiters(c, KEY_TAKEOVER, 1);

    /* the old owner stops renewing (it is parked); PostgreSQL time expires its claim */
    int64_t new_gen = claim_when_eligible(new_w, ID_TAKEOVER);
    assert_true(new_gen > old_gen);

    bt_unlock(c, KEY_TAKEOVER);
    bt_step_thread_join(&job, 60);
    assert_int_equal(job.err, BF_OK);
    assert_int_equal(job.info.step, BF_STEP_LOST);

    bf_backfill row = bt_get(op, ID_TAKEOVER);
    assert_int_equal(row.state, BF_STATE_RUNNING);
    assert_int_equal(row.generation, new_gen);
    assert_string_equal(row.claim_owner, "worker-new");
    assert_string_equal(row.checkpoint, "10");
    assert_int_equal(row.rows_committed, 10);
    assert_int_equal(row.batches_committed, 1);
    long long fixed = 0, mutations = 0;
    target_counts(c, "stale_takeover", &fixed, &mutations);
    assert_int_equal(fixed, 10);
    assert_int_equal(mutations, 10);

    /* the stale owner cannot renew or act; the new owner resumes strictly after 10 */
    assert_int_equal(bf_worker_step(old_w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_IDLE);
    assert_int_equal(bf_worker_step(new_w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH);
    assert_string_equal(info.checkpoint, "{20}");
    assert_int_equal(bt_step_until_not_batch(new_w, 10), BF_STEP_VALIDATING);
    assert_int_equal(bt_step_until_not_batch(new_w, 1), BF_STEP_COMPLETED);
    target_counts(c, "stale_takeover", &fixed, &mutations);
    assert_int_equal(fixed, 30);
    assert_int_equal(mutations, 30);
    assert_int_equal(bt_int(c, "SELECT max(counter) FROM stale_takeover"), 1);

    bf_worker_free(old_w);
    bf_worker_free(new_w);
    bf_engine_close(old_e);
    bf_engine_close(new_e);
    bf_engine_close(op);
    PQfinish(c);
}

/* ---- (c) the worker's validation goes stale: pause and resume while it runs ------------ */

static void test_pause_resume_rejects_stale_validator(void **state)
{
    (void)state;
    PGconn *c = bt_connect();
    bf_engine *op = bt_engine(registry, "operator", 0);
    bf_engine *we = bt_engine(registry, "worker-validator", 30000);
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, we, NULL), BF_OK);

    act(op, BF_ACTION_START, ID_VALIDATE);
    int64_t gen = 0;
    assert_int_equal(bf_worker_claim(w, ID_VALIDATE, &gen), BF_OK);
    assert_int_equal(bt_step_until_not_batch(w, 10), BF_STEP_VALIDATING);
    bf_backfill before = bt_get(op, ID_VALIDATE);
    assert_int_equal(before.state, BF_STATE_VALIDATING);

    bt_lock(c, KEY_VALIDATE);
    assert_int_equal(bf_worker_renew(w), BF_OK);
    bt_step_thread job;
    bt_step_thread_start(&job, w, false);
    bt_wait_waiters(c, KEY_VALIDATE, 1); /* the validation chunk is reading */

    bf_action_result paused = act(op, BF_ACTION_PAUSE, ID_VALIDATE);
    assert_int_equal(paused.result, BF_STATE_PAUSED);
    bf_action_result resumed = act(op, BF_ACTION_RESUME, ID_VALIDATE);
    assert_int_equal(resumed.result, BF_STATE_VALIDATING); /* no admitted work remains */
    assert_true(resumed.generation > paused.generation);
    assert_true(paused.generation > gen);

    bt_unlock(c, KEY_VALIDATE);
    bt_step_thread_join(&job, 60);
    assert_int_equal(job.err, BF_OK);
    assert_int_equal(job.info.step, BF_STEP_LOST);

    /* the postcondition held, but the stale validator's completion was rejected */
    bf_backfill row = bt_get(op, ID_VALIDATE);
    assert_int_equal(row.state, BF_STATE_VALIDATING);
    assert_int_equal(row.generation, resumed.generation);
    assert_false(row.has_completed_at);
    assert_int_equal(row.validation, BF_VALIDATION_NONE);
    assert_false(row.claimed);
    assert_string_equal(row.checkpoint, before.checkpoint);
    assert_string_equal(row.bound, before.bound);

    /* a current claim validates and completes */
    assert_int_equal(bf_worker_claim(w, ID_VALIDATE, NULL), BF_OK);
    assert_int_equal(bt_step_until_not_batch(w, 1), BF_STEP_COMPLETED);
    assert_int_equal(bt_get(op, ID_VALIDATE).state, BF_STATE_COMPLETED);

    bf_worker_free(w);
    bf_engine_close(we);
    bf_engine_close(op);
    PQfinish(c);
}

/* ---- (d) an explicit validation goes stale: pause and resume while it runs ------------- */

static void test_pause_resume_rejects_stale_explicit_validation(void **state)
{
    (void)state;
    PGconn *c = bt_connect();
    bf_engine *op = bt_engine(registry, "operator", 0);
    bf_engine *ve = bt_engine(registry, "validator", 0);
    bf_engine *we = bt_engine(registry, "worker-explicit", 30000);
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, we, NULL), BF_OK);

    act(op, BF_ACTION_START, ID_EXPLICIT);
    assert_int_equal(bf_worker_claim(w, ID_EXPLICIT, NULL), BF_OK);
    assert_int_equal(bt_step_until_not_batch(w, 10), BF_STEP_VALIDATING);
    assert_int_equal(bf_worker_release(w), BF_OK);
    bf_backfill before = bt_get(op, ID_EXPLICIT);
    assert_int_equal(before.state, BF_STATE_VALIDATING);

    bt_lock(c, KEY_EXPLICIT);
    validate_job job;
    validate_job_start(&job, ve, ID_EXPLICIT);
    bt_wait_waiters(c, KEY_EXPLICIT, 1);

    bf_action_result paused = act(op, BF_ACTION_PAUSE, ID_EXPLICIT);
    bf_action_result resumed = act(op, BF_ACTION_RESUME, ID_EXPLICIT);
    assert_int_equal(resumed.result, BF_STATE_VALIDATING);
    assert_true(resumed.generation > paused.generation);
    assert_true(paused.generation > before.generation);

    bt_unlock(c, KEY_EXPLICIT);
    assert_int_equal(pthread_join(job.thread, NULL), 0);
    /* the run itself succeeded and says so, but it completed nothing */
    assert_int_equal(job.err, BF_OK);
    assert_int_equal(job.res.validation, BF_VALIDATION_SUCCESS);
    assert_false(job.res.changed);
    assert_int_not_equal(job.res.result, BF_STATE_COMPLETED);

    bf_backfill row = bt_get(op, ID_EXPLICIT);
    assert_int_equal(row.state, BF_STATE_VALIDATING);
    assert_int_equal(row.generation, resumed.generation);
    assert_false(row.has_completed_at);
    assert_string_equal(row.checkpoint, before.checkpoint);

    /* a fresh validation under the current generation completes */
    bf_action_result res;
    assert_int_equal(bf_validate(ve, ID_EXPLICIT, &operator_who, &res), BF_OK);
    assert_int_equal(res.validation, BF_VALIDATION_SUCCESS);
    assert_true(res.changed);
    assert_int_equal(bt_get(op, ID_EXPLICIT).state, BF_STATE_COMPLETED);

    bf_worker_free(w);
    bf_engine_close(we);
    bf_engine_close(ve);
    bf_engine_close(op);
    PQfinish(c);
}

/* ---- (e) the owner's own lease runs out during a batch, nobody takes over -------------- */

/* Block until PostgreSQL's clock has passed the claim's expiry (polls the row, bounded). */
static void wait_claim_expired(PGconn *c, const char *id)
{
    for (int i = 0; i < 20000; i++) {
        if (bt_int(c,
                   "SELECT count(*) FROM buzz_backfill.backfill WHERE id = '%s'"
                   " AND claim_expires_at < clock_timestamp()",
                   id) == 1)
            return;
        usleep(1000);
    }
    fail_msg("the claim of %s did not expire", id);
}

/* Park a batch of w on KEY_EXPIRY, let its lease run out, release it; returns the step. */
static bf_step_info step_outlasting_lease(PGconn *c, bf_worker *w)
{
    bt_lock(c, KEY_EXPIRY);
    bt_step_thread job;
    bt_step_thread_start(&job, w, false);
    bt_wait_waiters(c, KEY_EXPIRY, 1);
    wait_claim_expired(c, ID_EXPIRY);
    bt_unlock(c, KEY_EXPIRY);
    bt_step_thread_join(&job, 60);
    assert_int_equal(job.err, BF_OK);
    return job.info;
}

/* Guard: worker.c step_failed turning BF_ERR_STALE into a counted attempt (worker_fail). */
static void test_own_lease_expiry_is_counted(void **state)
{
    (void)state;
    PGconn *c = bt_connect();
    bf_engine *op = bt_engine(registry, "operator", 0);
    bf_engine *long_e = bt_engine(registry, "worker-long", 30000);
    bf_engine *short_e = bt_engine(registry, "worker-short", EXPIRY_LEASE_MS);
    bf_worker *long_w = NULL, *w = NULL;
    assert_int_equal(bf_worker_new(&long_w, long_e, NULL), BF_OK);
    assert_int_equal(bf_worker_new(&w, short_e, NULL), BF_OK);

    /* one batch commits under a long lease (barrier open): checkpoint 10 */
    act(op, BF_ACTION_START, ID_EXPIRY);
    assert_int_equal(bf_worker_claim(long_w, ID_EXPIRY, NULL), BF_OK);
    bf_step_info info;
    assert_int_equal(bf_worker_step(long_w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH);
    assert_int_equal(bf_worker_release(long_w), BF_OK);

    /* first attempt under the short lease outlasts it: the fence rejects the batch, and the
     * attempt is recorded against this owner's own generation */
    int64_t gen = 0;
    assert_int_equal(bf_worker_claim(w, ID_EXPIRY, &gen), BF_OK);
    info = step_outlasting_lease(c, w);
    assert_int_equal(info.step, BF_STEP_RETRY);
    assert_non_null(strstr(info.detail, "claim expired"));
    bf_backfill row = bt_get(op, ID_EXPIRY);
    assert_int_equal(row.state, BF_STATE_RUNNING);
    assert_int_equal(row.generation, gen); /* nobody took over */
    assert_int_equal(row.attempts, 1);
    assert_string_equal(row.error_class, "retryable");
    assert_non_null(strstr(row.error_detail, "claim expired"));
    assert_true(row.has_next_attempt);
    assert_false(row.claimed);
    assert_false(row.has_claim_expires);
    assert_string_equal(row.checkpoint, "10");
    assert_int_equal(row.batches_committed, 1);
    long long fixed = 0, mutations = 0;
    target_counts(c, "stale_expiry", &fixed, &mutations);
    assert_int_equal(fixed, 10);
    assert_int_equal(mutations, 10);

    /* the worker holds nothing now */
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_IDLE);

    /* the second attempt, after the backoff, outlasts its lease too: max_attempts (2) is
     * reached and the row fails instead of retrying forever */
    int64_t gen2 = claim_when_eligible(w, ID_EXPIRY);
    assert_true(gen2 > gen);
    info = step_outlasting_lease(c, w);
    assert_int_equal(info.step, BF_STEP_FAILED);
    row = bt_get(op, ID_EXPIRY);
    assert_int_equal(row.state, BF_STATE_FAILED);
    assert_int_equal(row.generation, gen2);
    assert_int_equal(row.attempts, 2);
    assert_string_equal(row.error_class, "retryable");
    assert_false(row.claimed);
    assert_string_equal(row.checkpoint, "10");
    target_counts(c, "stale_expiry", &fixed, &mutations);
    assert_int_equal(fixed, 10);
    assert_int_equal(mutations, 10);

    /* operator retry keeps the checkpoint; under a long lease the rest commits exactly once */
    act(op, BF_ACTION_RETRY, ID_EXPIRY);
    assert_string_equal(bt_get(op, ID_EXPIRY).checkpoint, "10");
    assert_int_equal(bf_worker_run(long_w, true), BF_OK);
    row = bt_get(op, ID_EXPIRY);
    assert_int_equal(row.state, BF_STATE_COMPLETED);
    target_counts(c, "stale_expiry", &fixed, &mutations);
    assert_int_equal(fixed, 30);
    assert_int_equal(mutations, 30);
    assert_int_equal(bt_int(c, "SELECT max(counter) FROM stale_expiry"), 1);

    bf_worker_free(w);
    bf_worker_free(long_w);
    bf_engine_close(short_e);
    bf_engine_close(long_e);
    bf_engine_close(op);
    PQfinish(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pause_rejects_inflight_batch),
        cmocka_unit_test(test_takeover_rejects_expired_owner),
        cmocka_unit_test(test_pause_resume_rejects_stale_validator),
        cmocka_unit_test(test_pause_resume_rejects_stale_explicit_validation),
        cmocka_unit_test(test_own_lease_expiry_is_counted),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
