/*
 * conformance_01_claim_race.c - spec conformance test 1, claim race.
 *
 * Several workers, each with its own engine (its own PostgreSQL session and owner identity) on
 * its own thread, contend for one running row. The test makes the race real instead of likely:
 * it holds the backfill table in SHARE mode (which writes nothing and conflicts with every
 * UPDATE's table lock) until every contender's claim statement is queued behind it, then
 * releases them all at once, so PostgreSQL alone decides. (The claim itself never waits on the
 * row: it locks it with SKIP LOCKED, so a contender that meets another's row lock skips it.)
 * Exactly one contender owns the claim; it alone commits a batch, under its generation; every
 * other contender gets BF_ERR_NO_WORK and commits nothing.
 *
 * The owner then abandons its claim (stops renewing, never releases). After the lease expires
 * a new worker takes over with the SAME owner identity (a restarted process that reuses its
 * host:pid, as a container does), so only the generation tells the two apart: the generation
 * advances, the checkpoint is preserved, the abandoned owner's next batch is rejected at
 * commit (BF_STEP_LOST) with nothing committed, and the new owner resumes strictly after the
 * checkpoint and completes with every row touched exactly once.
 *
 * Guards proved (removing any one of them fails this test):
 *   - the claim fence in worker.c claim_sql: "claim_owner IS NULL OR claim_expires_at <=
 *     clock_timestamp()" in the single claim UPDATE (without it every contender wins);
 *   - the generation advance in claim_sql: "generation = b.generation + 1" (without it the
 *     takeover keeps the old generation and the abandoned owner's batch commits);
 *   - the generation check of the batch fence, "f.generation = $2" in registry.c
 *     add_fence (the abandoned owner presents the current owner string, checkpoint and
 *     a valid claim: only its stale generation rejects it at commit).
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

#define RACE_ID     "race.items_v1"
#define RACE_TABLE  "race_items"
#define RACE_ROWS   1000
#define RACE_BATCH  100
#define CONTENDERS  6
#define RACE_LEASE  1000  /* ms: short, so that the abandoned claim expires quickly */
#define TAKER_LEASE 30000 /* ms: the new owner keeps its claim for the rest of the test */
#define EXPIRY_WAIT 20000 /* ms: upper bound on waiting for the abandoned claim to expire */

static const bf_definition race_def = {
    .id = RACE_ID,
    .description = "claim race: set fixed and count every touch",
    .table = RACE_TABLE,
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = RACE_BATCH,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2, counter = t.counter + 1",
};

static const bf_definition *const defs[] = {&race_def};

typedef struct contender {
    char owner[32];
    bf_engine *e;
    bf_worker *w;
    const char *claim_id; /* NULL: let the worker find work */
    bf_err err;
    int64_t generation;
} contender;

static void *contender_main(void *arg)
{
    contender *c = arg;
    c->err = bf_worker_claim(c->w, c->claim_id, &c->generation);
    return NULL;
}

static int setup(void **state)
{
    (void)state;
    bt_db_create("conf01");
    PGconn *c = bt_connect();
    bt_make_items(c, RACE_TABLE, RACE_ROWS);
    PQfinish(c);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bt_db_drop();
    return 0;
}

/* rows in [lo, hi] touched exactly `times` times (and repaired when times > 0) */
static long long rows_touched(PGconn *c, long lo, long hi, int times)
{
    return bt_int(c,
                  "SELECT count(*) FROM " RACE_TABLE " WHERE id BETWEEN %ld AND %ld"
                  " AND counter = %d AND fixed IS %s DISTINCT FROM val * 2",
                  lo, hi, times, times > 0 ? "NOT" : "");
}

static void test_claim_race_and_takeover(void **state)
{
    (void)state;
    bf_registry *reg = bt_registry(defs, 1);
    bf_engine *admin = bt_engine(reg, "operator", 0);
    PGconn *c = bt_connect();
    PGconn *obs = bt_connect();
    assert_int_equal(bf_register_all(admin), BF_OK);
    assert_int_equal(bt_act(admin, BF_ACTION_START, RACE_ID), BF_OK);
    bf_backfill row = bt_get(admin, RACE_ID);
    assert_int_equal(row.state, BF_STATE_RUNNING);
    const int64_t start_gen = row.generation;

    contender cs[CONTENDERS];
    for (int i = 0; i < CONTENDERS; i++) {
        memset(&cs[i], 0, sizeof cs[i]);
        snprintf(cs[i].owner, sizeof cs[i].owner, "racer-%d", i);
        cs[i].e = bt_engine(reg, cs[i].owner, RACE_LEASE);
        assert_int_equal(bf_worker_new(&cs[i].w, cs[i].e, NULL), BF_OK);
        cs[i].claim_id = i % 2 == 0 ? RACE_ID : NULL;
        cs[i].err = BF_ERR_INTERNAL;
    }

    /* barrier: hold the table so that every claim statement queues behind it */
    bt_exec(c, "BEGIN");
    bt_exec(c, "LOCK TABLE buzz_backfill.backfill IN SHARE MODE");
    pthread_t threads[CONTENDERS];
    for (int i = 0; i < CONTENDERS; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, contender_main, &cs[i]), 0);
    bt_wait_lock_waiters(obs, CONTENDERS);
    bt_exec(c, "COMMIT"); /* release every contender at the same moment */
    for (int i = 0; i < CONTENDERS; i++)
        assert_int_equal(pthread_join(threads[i], NULL), 0);

    /* exactly one owner of the current claim, at the next generation */
    int winner = -1, winners = 0;
    for (int i = 0; i < CONTENDERS; i++) {
        if (cs[i].err == BF_OK) {
            winner = i;
            winners++;
        } else {
            assert_int_equal(cs[i].err, BF_ERR_NO_WORK);
        }
    }
    assert_int_equal(winners, 1);
    contender *own = &cs[winner];
    assert_int_equal(own->generation, start_gen + 1);
    row = bt_get(admin, RACE_ID);
    assert_true(row.claimed);
    assert_string_equal(row.claim_owner, own->owner);
    assert_int_equal(row.generation, own->generation);

    /* the losers hold nothing and commit nothing */
    for (int i = 0; i < CONTENDERS; i++) {
        if (i == winner)
            continue;
        bf_step_info info;
        assert_int_equal(bf_worker_step(cs[i].w, &info), BF_OK);
        assert_int_equal(info.step, BF_STEP_IDLE);
    }
    assert_int_equal(bt_int(c, "SELECT count(*) FROM " RACE_TABLE " WHERE counter <> 0"), 0);

    /* only the owner's batch commits, under its generation */
    bf_step_info info;
    assert_int_equal(bf_worker_step(own->w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH);
    assert_int_equal(info.generation, own->generation);
    assert_int_equal(info.rows, RACE_BATCH);
    assert_string_equal(info.checkpoint, "{100}");
    row = bt_get(admin, RACE_ID);
    assert_string_equal(row.checkpoint, "100");
    assert_int_equal(row.batches_committed, 1);
    assert_int_equal(row.generation, own->generation);
    assert_int_equal(rows_touched(c, 1, 100, 1), 100);
    assert_int_equal(rows_touched(c, 101, RACE_ROWS, 0), RACE_ROWS - 100);

    /* the owner abandons its claim: no renewal, no release. A restarted process with the same
     * owner identity takes over once PostgreSQL says the lease has expired. */
    bf_engine *te = bt_engine(reg, own->owner, TAKER_LEASE);
    bf_worker *taker = NULL;
    assert_int_equal(bf_worker_new(&taker, te, NULL), BF_OK);
    int64_t taker_gen = 0;
    assert_int_equal(bt_claim_poll(taker, RACE_ID, &taker_gen, EXPIRY_WAIT), BF_OK);
    assert_int_equal(taker_gen, own->generation + 1);
    row = bt_get(admin, RACE_ID);
    assert_int_equal(row.generation, taker_gen);
    assert_string_equal(row.claim_owner, own->owner);
    assert_string_equal(row.checkpoint, "100"); /* never rewinds */
    assert_string_equal(row.bound, "1000");

    /* the abandoned owner wakes up and tries its next batch: rejected at commit */
    assert_int_equal(bf_worker_step(own->w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_LOST);
    row = bt_get(admin, RACE_ID);
    assert_string_equal(row.checkpoint, "100");
    assert_int_equal(row.batches_committed, 1);
    assert_int_equal(row.rows_committed, 100);
    assert_int_equal(row.generation, taker_gen);
    assert_true(row.claimed);
    assert_int_equal(rows_touched(c, 101, RACE_ROWS, 0), RACE_ROWS - 100);

    /* the new owner resumes strictly after the checkpoint */
    assert_int_equal(bf_worker_step(taker, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH);
    assert_int_equal(info.generation, taker_gen);
    assert_int_equal(info.rows, RACE_BATCH);
    assert_string_equal(info.checkpoint, "{200}");
    assert_int_equal(rows_touched(c, 1, 200, 1), 200);
    assert_int_equal(rows_touched(c, 201, RACE_ROWS, 0), RACE_ROWS - 200);

    /* and completes: every row exactly once */
    assert_int_equal(bt_step_until_not_batch(taker, 100), BF_STEP_VALIDATING);
    assert_int_equal(bf_worker_step(taker, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_COMPLETED);
    row = bt_get(admin, RACE_ID);
    assert_int_equal(row.state, BF_STATE_COMPLETED);
    assert_int_equal(row.generation, taker_gen);
    assert_int_equal(row.rows_committed, RACE_ROWS);
    assert_int_equal(row.batches_committed, RACE_ROWS / RACE_BATCH);
    assert_int_equal(rows_touched(c, 1, RACE_ROWS, 1), RACE_ROWS);

    bf_worker_free(taker);
    bf_engine_close(te);
    for (int i = 0; i < CONTENDERS; i++) {
        bf_worker_free(cs[i].w);
        bf_engine_close(cs[i].e);
    }
    PQfinish(obs);
    PQfinish(c);
    bf_engine_close(admin);
    bf_registry_free(reg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_claim_race_and_takeover),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
