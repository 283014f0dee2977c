/*
 * test_throttle_fixed_cost.c - the adaptive batch size survives a fixed cost per batch (issue
 * 16, item 3 and its second proof): two backfills of the same shape over two tables of the same
 * rows, each with a statement-level trigger that sleeps 150 ms per UPDATE (one per batch,
 * whatever its size: the fixed part of a batch that a callback's round trips, a trigger or a
 * slow plan add), run by real workers through the engine's API at the production step shape
 * (step_batches and step_ms at their defaults). One sizes its batches toward the default
 * 100 ms target, the other has the fixed declared size (batch_target_ms 0); their steps
 * alternate, so both see the same host.
 *
 * Guard: throttle.c bf__size_next's model of a batch as fixed plus per-key time, and its floor
 * (never below the size whose per-key part is 4 times the fixed part). With time assumed
 * proportional to size (the rule before issue 16) the adaptive side halves its size every step
 * down to batch_min and passes a fifth of the keys per second of the fixed side; the test
 * requires at least half of it (0.8 failed on a machine at load 12, where the measured time of
 * a batch carries the wait for a CPU, 0.66x, with the adaptive size back at its ceiling by the
 * end: the margin is for the host, the guard's failure is a fifth). Each side runs about 3 seconds;
 * then the trigger is dropped, both backfills finish and every row is checked to have been applied
 * exactly once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "bt.h"

#define ROWS    30000
#define BATCH   1000
#define SIDE_US 3000000 /* each side's measured time */

static bf_definition defs[2];
static bf_registry *registry;
static bf_throttle *throttle;
static const char *const tables[] = {"fc_adaptive", "fc_fixed"};

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int setup(void **state)
{
    (void)state;
    bt_db_create("fixed_cost");
    PGconn *c = bt_connect();
    bt_exec(c, "CREATE FUNCTION public.fc_slow() RETURNS trigger LANGUAGE plpgsql"
               " AS $$ BEGIN PERFORM pg_sleep(0.15); RETURN NULL; END $$");
    for (int i = 0; i < 2; i++) {
        bt_make_items(c, tables[i], ROWS);
        bt_exec(c,
                "CREATE TRIGGER fc_slow AFTER UPDATE ON %s FOR EACH STATEMENT"
                " EXECUTE FUNCTION public.fc_slow()",
                tables[i]);
        defs[i] = (bf_definition){
            .id = i == 0 ? "fc.adaptive_v1" : "fc.fixed_v1",
            .table = tables[i],
            .key = {{"id", BF_KEY_BIGINT}},
            .nkey = 1,
            .batch_size = BATCH,
            .needs_repair = "t.fixed IS NULL",
            .update_set = "fixed = t.val * 2, counter = t.counter + 1",
            .postcondition = "t.fixed IS NOT NULL AND t.counter = 1",
        };
    }
    PQfinish(c);
    const bf_definition *list[] = {&defs[0], &defs[1]};
    registry = bt_registry(list, 2);
    assert_int_equal(bf_throttle_new(&throttle), BF_OK);
    const char *ids[] = {defs[0].id, defs[1].id};
    bf_throttle_config cfg[2] = {{.batch_target_ms = 100}, {.batch_target_ms = 0}};
    char diag[BF_DIAG_MAX] = "";
    assert_int_equal(bf_throttle_configure(throttle, NULL, ids, cfg, 2, 0, diag, sizeof diag),
                     BF_OK);
    bt_set_throttle(throttle);
    bt_set_step_batches(0); /* the production step: batches until step_ms */
    bf_engine *e = bt_engine(registry, "operator", 0);
    assert_int_equal(bf_register_all(e), BF_OK);
    for (int i = 0; i < 2; i++)
        assert_int_equal(bt_act(e, BF_ACTION_START, defs[i].id), BF_OK);
    bf_engine_close(e);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bt_set_throttle(NULL);
    bt_set_step_batches(1);
    bt_db_drop_registry(registry);
    bf_throttle_free(throttle);
    return 0;
}

static void test_adaptive_keeps_up_with_fixed(void **state)
{
    (void)state;
    bf_engine *e[2];
    bf_worker *w[2];
    for (int i = 0; i < 2; i++) {
        e[i] = bt_engine(registry, i == 0 ? "fc-adaptive" : "fc-fixed", 30000);
        w[i] = bt_claimed_worker(e[i], defs[i].id);
    }
    int64_t spent[2] = {0, 0};
    long keys[2] = {0, 0}, steps[2] = {0, 0}, last_size = 0;
    while (spent[0] < SIDE_US || spent[1] < SIDE_US) {
        for (int i = 0; i < 2; i++) {
            if (spent[i] >= SIDE_US)
                continue;
            bf_step_info info;
            int64_t t0 = now_us();
            assert_int_equal(bf_worker_step(w[i], &info), BF_OK);
            spent[i] += now_us() - t0;
            assert_int_equal(info.step, BF_STEP_BATCH); /* the tables outlast the measurement */
            keys[i] += info.rows;
            steps[i]++;
            if (i == 0)
                last_size = info.batch_size;
        }
    }
    double rate[2];
    for (int i = 0; i < 2; i++)
        rate[i] = (double)keys[i] / ((double)spent[i] / 1e6);
    print_message("150 ms a batch: adaptive %ld keys in %ld steps, %.0f keys/s (size now %ld);"
                  " fixed %ld keys in %ld steps, %.0f keys/s: %.2fx\n",
                  keys[0], steps[0], rate[0], last_size, keys[1], steps[1], rate[1],
                  rate[0] / rate[1]);
    assert_true(rate[0] >= 0.5 * rate[1]);

    /* without the trigger both finish: every row applied exactly once */
    PGconn *c = bt_connect();
    for (int i = 0; i < 2; i++)
        bt_exec(c, "DROP TRIGGER fc_slow ON %s", tables[i]);
    for (int i = 0; i < 2; i++) {
        for (int n = 0; n < 1000; n++) {
            bf_step_info info;
            assert_int_equal(bf_worker_step(w[i], &info), BF_OK);
            if (info.step == BF_STEP_COMPLETED)
                break;
        }
        assert_int_equal(bt_get(e[i], defs[i].id).state, BF_STATE_COMPLETED);
        assert_int_equal(bt_int(c, "SELECT count(*) FROM %s WHERE counter <> 1", tables[i]), 0);
        bf_worker_free(w[i]);
        bf_engine_close(e[i]);
    }
    PQfinish(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adaptive_keeps_up_with_fixed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
