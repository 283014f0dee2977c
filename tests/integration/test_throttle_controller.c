/*
 * test_throttle_controller.c - the rate controller (issue 22, docs/throttling.md "holding a latency
 * target") through the engine's production seams: a bf_throttle configured as a daemon does,
 * a worker stepping a real backfill, and the controller's signal read from a table the test
 * writes (public.rate_sig), as a relay would write its own latency. The test steps the worker
 * on its own thread, so every sample follows the write before it; only the recovery, which is
 * per second of real time, is waited for, as a condition with a deadline.
 *
 * Cases and the guard each proves (removing it fails the case):
 * - test_rate_falls_and_recovers: with the signal below the target the rate climbs to
 *   rate_max; above it, each sample cuts it (bf__rate_update's multiplicative decrease), down
 *   to rate_min, the steps pass at most batch_min keys and wait ("throttled by latency"), the
 *   row shows signal "latency" with the rate, the signal and the cuts (worker.c
 *   step_after_batches), bf_throttle_rate_get reports it; below the target again the rate
 *   climbs back to rate_max (the additive increase). Every row is applied once.
 * - test_window_sampled_once: a latency query with a second column (the window) cuts once per
 *   window however often it is read (bf__rate_sample's window check); a new window cuts again;
 *   a query that fails counts as above the target and says so in the row.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "bt.h"

#define ROWS     100000
#define BATCH    500
#define RATE_MIN 50
#define RATE_MAX 2000

static bf_definition defs[2];
static bf_registry *registry;
static bf_throttle *throttle;
static PGconn *pg;

static bf_definition rate_def(const char *id, const char *table)
{
    return (bf_definition){
        .id = id,
        .table = table,
        .key = {{"id", BF_KEY_BIGINT}},
        .nkey = 1,
        .batch_size = BATCH,
        .needs_repair = "t.fixed IS NULL",
        .update_set = "fixed = t.val * 2, counter = t.counter + 1",
        .postcondition = "t.fixed IS NOT NULL AND t.counter = 1",
    };
}

static int setup(void **state)
{
    (void)state;
    bt_db_create("throttle_rate");
    pg = bt_connect();
    bt_make_items(pg, "rate_items", ROWS);
    bt_make_items(pg, "rate_window", ROWS);
    bt_exec(pg, "CREATE TABLE public.rate_sig (ms double precision, win bigint);"
                "INSERT INTO public.rate_sig VALUES (5, 1)");
    defs[0] = rate_def("rate.items_v1", "rate_items");
    defs[1] = rate_def("rate.window_v1", "rate_window");
    const bf_definition *list[] = {&defs[0], &defs[1]};
    registry = bt_registry(list, 2);
    assert_int_equal(bf_throttle_new(&throttle), BF_OK);
    bt_set_throttle(throttle);
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
    bt_db_drop_registry(registry);
    bf_throttle_free(throttle);
    PQfinish(pg);
    return 0;
}

static void configure(const char *id, const bf_throttle_config *cfg)
{
    char diag[BF_DIAG_MAX] = "";
    const char *ids[] = {id};
    if (bf_throttle_configure(throttle, NULL, ids, cfg, 1, 0, diag, sizeof diag) != BF_OK)
        fail_msg("bf_throttle_configure: %s", diag);
}

static double rate_of(const char *id)
{
    bf_throttle_rate r;
    assert_true(bf_throttle_rate_get(throttle, id, &r));
    return r.rate;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One step, which must commit a batch (the controller paces, it never stops the work). */
static bf_step_info step(bf_worker *w)
{
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    if (info.step != BF_STEP_BATCH)
        fail_msg("step %s: %s", bf_step_name(info.step), info.detail);
    return info;
}

/* Step until the controller's rate is at least want (real seconds: the increase is per
 * second), at most 60 s (a loaded machine). */
static void step_until_rate(bf_worker *w, const char *id, double want)
{
    double t0 = now_s();
    while (rate_of(id) < want) {
        if (now_s() - t0 > 60)
            fail_msg("%s: the rate stayed at %.0f keys/s, below %.0f", id, rate_of(id), want);
        step(w);
    }
}

/* Run the backfill to completion without the controller; every row applied once. */
static void finish_and_check(bf_engine *e, bf_worker *w, const char *id, const char *table)
{
    bf_throttle_config off = {0};
    configure(id, &off);
    for (int i = 0; i < 10000; i++) {
        bf_step_info info;
        assert_int_equal(bf_worker_step(w, &info), BF_OK);
        if (info.step == BF_STEP_COMPLETED)
            break;
    }
    assert_int_equal(bt_get(e, id).state, BF_STATE_COMPLETED);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM %s WHERE counter <> 1", table), 0);
}

static void test_rate_falls_and_recovers(void **state)
{
    (void)state;
    const char *id = "rate.items_v1";
    bf_throttle_config cfg = {.latency_target_ms = 20,
                              .latency_sql = "SELECT ms FROM public.rate_sig",
                              .rate_min = RATE_MIN,
                              .rate_max = RATE_MAX,
                              .rate_increase = 20000, /* min to max in a tenth of a second */
                              .rate_decrease_pct = 50,
                              .check_ms = 1, /* every step samples; a cut waits 1 ms */
                              .batch_target_ms = 0};
    configure(id, &cfg);
    bt_exec(pg, "UPDATE public.rate_sig SET ms = 5");
    bf_engine *e = bt_engine(registry, "rate-items", 30000);
    bf_worker *w = bt_claimed_worker(e, id);
    /* below the target: from rate_min up to rate_max */
    step(w);
    step_until_rate(w, id, RATE_MAX);
    assert_true(rate_of(id) <= RATE_MAX);
    bf_throttle_rate r0;
    assert_true(bf_throttle_rate_get(throttle, id, &r0));
    assert_true(r0.signal_ms == 5);
    assert_true(r0.increases > 0);

    /* above it: every sample cuts by half, to rate_min; the steps shrink and wait */
    bt_exec(pg, "UPDATE public.rate_sig SET ms = 100");
    step(w);
    double after_one = rate_of(id);
    if (!(after_one <= RATE_MAX / 2.0 + 1e-6))
        fail_msg("one window above the target left the rate at %.0f keys/s", after_one);
    bf_step_info info = {0};
    for (int i = 0; i < 20 && rate_of(id) > RATE_MIN; i++)
        info = step(w);
    assert_true(rate_of(id) == RATE_MIN);
    bf_throttle_rate r1;
    assert_true(bf_throttle_rate_get(throttle, id, &r1));
    assert_true(r1.signal_ms == 100);
    assert_true(r1.decreases >= r0.decreases + 5); /* 2000 -> 50 is at least 5 halvings */
    info = step(w);
    /* at 50 keys/s a step passes the keys of 50 ms, raised to batch_min (batch_size / 100) */
    assert_true(info.rows <= BATCH / 100);
    if (strstr(info.detail, "throttled by latency: 50 keys/s, 100.0 ms (target 20 ms)") == NULL)
        fail_msg("a paced step's detail: %s", info.detail);
    /* the row shows it (its value is written at most once a second) */
    double t0 = now_s();
    for (;;) {
        bf_backfill b = bt_get(e, id);
        if (strcmp(b.throttle_signal, "latency") == 0 &&
            strstr(b.throttle_value, "50 keys/s, 100.0 ms (target 20 ms)") != NULL)
            break;
        if (now_s() - t0 > 30)
            fail_msg("the row shows %s: %s", b.throttle_signal, b.throttle_value);
        step(w);
    }
    /* the process's totals (the metrics' source) */
    bf_throttle_rate all;
    assert_true(bf_throttle_rate_get(throttle, NULL, &all));
    assert_int_equal(all.definitions, 1);
    assert_true(all.rate == RATE_MIN);

    /* below the target again: back up to rate_max */
    bt_exec(pg, "UPDATE public.rate_sig SET ms = 5");
    step_until_rate(w, id, RATE_MAX);
    finish_and_check(e, w, id, "rate_items");
    bf_worker_free(w);
    bf_engine_close(e);
}

static void test_window_sampled_once(void **state)
{
    (void)state;
    const char *id = "rate.window_v1";
    bf_throttle_config cfg = {.latency_target_ms = 20,
                              .latency_sql = "SELECT ms, win FROM public.rate_sig",
                              .rate_min = 10,
                              .rate_max = RATE_MAX,
                              .rate_increase = 20000,
                              .check_ms = 1};
    configure(id, &cfg);
    bt_exec(pg, "UPDATE public.rate_sig SET ms = 5, win = 1");
    bf_engine *e = bt_engine(registry, "rate-window", 30000);
    bf_worker *w = bt_claimed_worker(e, id);
    step(w); /* window 1: the first sample */
    double t0 = now_s();
    for (long win = 2; rate_of(id) < RATE_MAX; win++) { /* a new window each step */
        if (now_s() - t0 > 60)
            fail_msg("the rate stayed at %.0f keys/s, below rate_max", rate_of(id));
        bt_exec(pg, "UPDATE public.rate_sig SET win = %ld", win);
        step(w);
    }
    /* one window above the target, read five times: one cut */
    bt_exec(pg, "UPDATE public.rate_sig SET ms = 100, win = -1");
    bf_throttle_rate r0, r1;
    assert_true(bf_throttle_rate_get(throttle, id, &r0));
    for (int i = 0; i < 5; i++)
        step(w);
    assert_true(bf_throttle_rate_get(throttle, id, &r1));
    assert_int_equal(r1.decreases, r0.decreases + 1);
    assert_true(r1.rate == RATE_MAX / 2.0);
    /* the next window cuts again */
    bt_exec(pg, "UPDATE public.rate_sig SET win = -2");
    step(w);
    assert_true(bf_throttle_rate_get(throttle, id, &r1));
    assert_int_equal(r1.decreases, r0.decreases + 2);
    assert_true(r1.rate == RATE_MAX / 4.0);
    /* a query that fails is above the target (once per holdoff, 1 ms here) */
    cfg.latency_sql = "SELECT 1 / 0, 1";
    configure(id, &cfg); /* a reconfiguration restarts from rate_min */
    bf_step_info info = step(w);
    assert_true(rate_of(id) == 10);
    assert_true(bf_throttle_rate_get(throttle, id, &r1));
    assert_true(isinf(r1.signal_ms));
    if (strstr(info.detail, "query failed (22012)") == NULL)
        fail_msg("a failed latency query's step: %s", info.detail);
    finish_and_check(e, w, id, "rate_window");
    bf_worker_free(w);
    bf_engine_close(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rate_falls_and_recovers),
        cmocka_unit_test(test_window_sampled_once),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
