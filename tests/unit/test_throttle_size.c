/*
 * test_throttle_size.c - the adaptive batch size rule (throttle.c bf__size_observe and
 * bf__size_next, issue 16 item 3) against simulated tables whose batch costs fixed + per_key *
 * keys, stepped as a worker steps them (batches of the size until step_ms has passed). No
 * database: the same rule through a real worker and a real trigger is
 * tests/integration/test_throttle_fixed_cost.c.
 *
 * Cases and the guard each proves:
 * - test_fixed_cost_over_target: a fixed cost above the target (the collapse of issue 16)
 *   keeps the declared size: the fitted per-key part is tiny beside the fixed one, so the floor
 *   is above the maximum; at least 0.8 of the declared size's keys per second, noisy or not.
 * - test_proportional_converges: time proportional to size settles at target / per_key.
 * - test_floor_holds: with a fixed cost under the target but large, the size stops at the
 *   floor (per-key part 4 times the fixed part) instead of the target, keeping 0.8 of the
 *   declared size's throughput.
 * - test_target_when_cheap: a small fixed cost does not stop the size at the target.
 * - test_regime_change: a fixed cost that appears mid-run (a trigger, a plan flip) is noticed
 *   (the observation is far from the fit) and the size recovers.
 * - test_starts_at_minimum: a size left at batch_min by an earlier owner climbs back.
 * - test_bounds: [batch_min, batch_max], never above the declared size, nothing observed, a
 *   factor 2 a step, no target (doubling back).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "buzz/engine.h"
#include "internal.h" /* bf__size_* */

#define STEP_US 200000.0 /* the engine's default step_ms */

typedef struct sim {
    double fixed_us, per_key_us; /* what a batch costs */
    double noise;                /* each step's time is off by up to this share, either way */
    uint32_t seed;
    double keys, us; /* passed and spent, from when counting began */
} sim;

static double sim_rand(sim *s) /* [0, 1), deterministic */
{
    s->seed = s->seed * 1664525u + 1013904223u;
    return (double)(s->seed >> 8) / (double)(1u << 24);
}

/* One worker step of batches of size: as many as start within step_ms. */
static void sim_step(sim *s, bf_size_model *m, const bf_throttle_config *cfg, int declared,
                     int *size)
{
    double t = s->fixed_us + s->per_key_us * *size;
    long batches = (long)(STEP_US / t) + 1;
    double elapsed = (double)batches * t * (1.0 + s->noise * (2.0 * sim_rand(s) - 1.0));
    s->keys += (double)batches * *size;
    s->us += elapsed;
    bf__size_observe(m, batches, batches * *size, (int64_t)elapsed);
    *size = bf__size_next(cfg, declared, *size, m);
}

/* steps steps from size; returns the size reached and the keys per second of the last half */
static int sim_run(sim *s, bf_size_model *m, const bf_throttle_config *cfg, int declared, int size,
                   int steps, double *rate_out)
{
    for (int i = 0; i < steps; i++) {
        if (i == steps / 2)
            s->keys = s->us = 0;
        sim_step(s, m, cfg, declared, &size);
    }
    *rate_out = s->keys / s->us * 1e6;
    return size;
}

static double fixed_rate(const sim *s, int size)
{
    return size / (s->fixed_us + s->per_key_us * size) * 1e6;
}

static void test_fixed_cost_over_target(void **state)
{
    (void)state;
    bf_throttle_config cfg = {.batch_target_ms = 100};
    for (int noisy = 0; noisy < 2; noisy++) {
        /* 150 ms a batch whatever its size, 10 us a key: issue 16's injected cost */
        sim s = {.fixed_us = 150000, .per_key_us = 10, .noise = noisy ? 0.2 : 0, .seed = 7};
        bf_size_model m;
        bf__size_model_init(&m);
        double rate = 0;
        int size = sim_run(&s, &m, &cfg, 1000, 1000, 60, &rate);
        print_message("fixed 150 ms, noise %d%%: size %d, %.0f keys/s (declared: %.0f)\n",
                      noisy ? 20 : 0, size, rate, fixed_rate(&s, 1000));
        assert_true(rate >= 0.8 * fixed_rate(&s, 1000));
        assert_true(size >= 500);
    }
}

static void test_proportional_converges(void **state)
{
    (void)state;
    bf_throttle_config cfg = {.batch_target_ms = 40, .batch_min = 2};
    /* 2 ms a key, half a millisecond a batch: 40 ms is about 20 keys */
    sim s = {.fixed_us = 500, .per_key_us = 2000};
    bf_size_model m;
    bf__size_model_init(&m);
    double rate = 0;
    int size = sim_run(&s, &m, &cfg, 200, 200, 30, &rate);
    assert_true(size >= 18 && size <= 22);
    s = (sim){.fixed_us = 500, .per_key_us = 2000, .noise = 0.1, .seed = 3};
    bf__size_model_init(&m);
    size = sim_run(&s, &m, &cfg, 200, 200, 30, &rate);
    assert_true(size >= 14 && size <= 28);
    /* over the target even at batch_min: it stays small */
    cfg = (bf_throttle_config){.batch_target_ms = 5, .batch_min = 5};
    s = (sim){.fixed_us = 500, .per_key_us = 2000};
    bf__size_model_init(&m);
    size = sim_run(&s, &m, &cfg, 200, 200, 30, &rate);
    assert_true(size <= 10);
}

static void test_floor_holds(void **state)
{
    (void)state;
    bf_throttle_config cfg = {.batch_target_ms = 100};
    /* 40 ms fixed, 50 us a key: the target would be 1,200 keys, where the fixed part is 40 %
     * of the batch; the floor is 4 * 40 ms / 50 us = 3,200 keys */
    sim s = {.fixed_us = 40000, .per_key_us = 50};
    bf_size_model m;
    bf__size_model_init(&m);
    double rate = 0;
    int size = sim_run(&s, &m, &cfg, 10000, 10000, 40, &rate);
    print_message("fixed 40 ms, 50 us a key: size %d, %.0f keys/s (declared: %.0f)\n", size, rate,
                  fixed_rate(&s, 10000));
    assert_true(size >= 3000 && size <= 3400);
    assert_true(rate >= 0.8 * fixed_rate(&s, 10000));
}

static void test_target_when_cheap(void **state)
{
    (void)state;
    bf_throttle_config cfg = {.batch_target_ms = 100};
    /* 2 ms fixed, 20 us a key: the target is 4,900 keys, the floor only 400 */
    sim s = {.fixed_us = 2000, .per_key_us = 20};
    bf_size_model m;
    bf__size_model_init(&m);
    double rate = 0;
    int size = sim_run(&s, &m, &cfg, 100000, 100000, 40, &rate);
    assert_true(size >= 4600 && size <= 5200);
}

static void test_regime_change(void **state)
{
    (void)state;
    bf_throttle_config cfg = {.batch_target_ms = 100};
    sim s = {.fixed_us = 1000, .per_key_us = 100};
    bf_size_model m;
    bf__size_model_init(&m);
    double rate = 0;
    int size = sim_run(&s, &m, &cfg, 5000, 5000, 30, &rate);
    assert_true(size >= 900 && size <= 1100); /* (100 - 1) ms / 100 us */
    /* a statement trigger of 150 ms appears */
    s.fixed_us = 151000;
    size = sim_run(&s, &m, &cfg, 5000, size, 40, &rate);
    print_message("after a fixed cost appeared: size %d, %.0f keys/s (declared: %.0f)\n", size,
                  rate, fixed_rate(&s, 5000));
    assert_true(size >= 4000);
    assert_true(rate >= 0.8 * fixed_rate(&s, 5000));
}

static void test_starts_at_minimum(void **state)
{
    (void)state;
    bf_throttle_config cfg = {.batch_target_ms = 100};
    sim s = {.fixed_us = 150000, .per_key_us = 10};
    bf_size_model m;
    bf__size_model_init(&m);
    int size = 10; /* batch_size_current as an earlier owner left it */
    for (int i = 0; i < 10; i++)
        sim_step(&s, &m, &cfg, 1000, &size);
    assert_int_equal(size, 1000);
}

static void test_bounds(void **state)
{
    (void)state;
    bf_throttle_config cfg = {.batch_target_ms = 40, .batch_min = 5};
    assert_int_equal(bf__size_clamp(&cfg, 200, 300), 200); /* the declared bound */
    assert_int_equal(bf__size_clamp(&cfg, 200, 1), 5);
    bf_throttle_config dflt = {.batch_target_ms = 40};
    assert_int_equal(bf__size_clamp(&dflt, 200, 1), 2); /* a hundredth of the declared size */
    assert_int_equal(bf__size_clamp(&dflt, 50, 0), 1);
    bf_size_model m;
    bf__size_model_init(&m);
    assert_int_equal(bf__size_next(&cfg, 200, 40, &m), 40); /* nothing observed */
    bf__size_observe(&m, 0, 0, 0);                          /* nothing ran: not an observation */
    assert_int_equal(m.n, 0);
    /* one size seen: as if proportional, by at most a factor 2 a step */
    bf__size_observe(&m, 1, 200, 400000); /* 2 ms a key */
    assert_int_equal(bf__size_next(&cfg, 200, 200, &m), 100);
    bf__size_model_init(&m);
    bf__size_observe(&m, 1, 20, 40000);
    assert_int_equal(bf__size_next(&cfg, 200, 20, &m), 20);
    bf__size_model_init(&m);
    bf__size_observe(&m, 1, 20, 1000);
    assert_int_equal(bf__size_next(&cfg, 200, 20, &m), 40);
    assert_int_equal(bf__size_next(&cfg, 200, 150, &m), 200); /* the bound */
    bf__size_model_init(&m);
    bf__size_observe(&m, 1, 6, 1000000);
    assert_int_equal(bf__size_next(&cfg, 200, 6, &m), 5); /* the minimum */
    cfg.batch_max = 50;
    bf__size_model_init(&m);
    bf__size_observe(&m, 1, 40, 1000);
    assert_int_equal(bf__size_next(&cfg, 200, 40, &m), 50);
    cfg.batch_target_ms = 0; /* off: back to the declared size (here batch_max), doubling */
    assert_int_equal(bf__size_next(&cfg, 200, 20, &m), 40);
    assert_int_equal(bf__size_next(&cfg, 200, 40, &m), 50);
    /* two sizes apart fit both parts: 10 ms + 1 ms a key */
    bf__size_model_init(&m);
    bf__size_observe(&m, 2, 200, 2 * 110000);
    bf__size_observe(&m, 4, 200, 4 * 60000);
    assert_true(m.fitted);
    assert_true(m.fixed_us > 9999 && m.fixed_us < 10001);
    assert_true(m.per_key_us > 999.9 && m.per_key_us < 1000.1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixed_cost_over_target),
        cmocka_unit_test(test_proportional_converges),
        cmocka_unit_test(test_floor_holds),
        cmocka_unit_test(test_target_when_cheap),
        cmocka_unit_test(test_regime_change),
        cmocka_unit_test(test_starts_at_minimum),
        cmocka_unit_test(test_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
