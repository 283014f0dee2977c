/*
 * test_throttle_rate.c - the rate controller's law (throttle_rate.c bf__rate_update,
 * bf__rate_bound, bf__rate_observe_pace) on a fake clock: the caller's microseconds, advanced by
 * the test. No database: the law through a real worker and a signal table is
 * tests/integration/test_throttle_controller.c.
 *
 * Cases and the guard each proves:
 * - test_starts_at_floor: the first sample starts the rate at min, whatever the signal.
 * - test_decrease_above_target: a sample above the target multiplies the rate by keep (the
 *   multiplicative decrease), down to min and never below.
 * - test_holdoff: a second sample above the target within holdoff_us does not cut again; one
 *   after it does (the signal lags the rate by a window).
 * - test_increase_per_second: at or below the target the rate grows by increase per second of
 *   the clock, the same whether sampled once or ten times in that second, up to max.
 * - test_unknown_holds: a NaN signal changes nothing.
 * - test_bound_from_pace: without max the bound is twice the fastest pace (anti-wind-up), and
 *   the default increase is a tenth of that bound per second.
 * - test_law_of_config: bf__rate_law_of's defaults (min 1, keep 0.5, holdoff check_ms).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "buzz/engine.h"
#include "throttle_rate.h"

#define S 1000000 /* one second of the fake clock */

static bf_rate_law law_std(void)
{
    return (bf_rate_law){.target_ms = 20,
                         .min = 100,
                         .max = 10000,
                         .increase = 1000,
                         .keep = 0.5,
                         .holdoff_us = 250000};
}

static void test_starts_at_floor(void **state)
{
    (void)state;
    bf_rate_law law = law_std();
    bf_rate_state s;
    memset(&s, 0, sizeof s);
    bf__rate_update(&law, &s, 5, 1 * S);
    assert_true(s.rate == 100);
    memset(&s, 0, sizeof s);
    bf__rate_update(&law, &s, 500, 1 * S);
    assert_true(s.rate == 100); /* cut from the floor stays at it */
    assert_true(s.signal_ms == 500);
}

static void test_decrease_above_target(void **state)
{
    (void)state;
    bf_rate_law law = law_std();
    bf_rate_state s = {.rate = 8000, .at_us = 0, .signal_ms = NAN};
    int64_t now = 10 * S;
    bf__rate_update(&law, &s, 25, now);
    assert_true(s.rate == 4000);
    assert_int_equal(s.decreases, 1);
    for (int i = 0; i < 10; i++) {
        now += S;
        bf__rate_update(&law, &s, 25, now);
    }
    assert_true(s.rate == 100); /* halved to the floor, never below */
    assert_int_equal(s.decreases, 11);
    /* at the target exactly is not above it */
    s.rate = 1000;
    now += S;
    bf__rate_update(&law, &s, 20, now);
    assert_true(s.rate > 1000);
}

static void test_holdoff(void **state)
{
    (void)state;
    bf_rate_law law = law_std();
    bf_rate_state s = {.rate = 8000, .at_us = 0, .signal_ms = NAN};
    bf__rate_update(&law, &s, 50, 1 * S);
    assert_true(s.rate == 4000);
    bf__rate_update(&law, &s, 50, 1 * S + 100000); /* within the holdoff: no second cut */
    assert_true(s.rate == 4000);
    assert_int_equal(s.decreases, 1);
    bf__rate_update(&law, &s, 50, 1 * S + 250000); /* one holdoff later: cut */
    assert_true(s.rate == 2000);
    assert_int_equal(s.decreases, 2);
}

static void test_increase_per_second(void **state)
{
    (void)state;
    bf_rate_law law = law_std();
    bf_rate_state a = {.rate = 1000, .at_us = 0, .signal_ms = NAN}, b = a;
    bf__rate_update(&law, &a, 10, 1 * S); /* one sample a second later */
    for (int i = 1; i <= 10; i++)         /* ten samples over the same second */
        bf__rate_update(&law, &b, 10, i * S / 10);
    assert_true(fabs(a.rate - 2000) < 1e-6);
    assert_true(fabs(b.rate - 2000) < 1e-6);
    assert_int_equal(b.increases, 10);
    /* up to max, not beyond */
    bf__rate_update(&law, &a, 10, 100 * S);
    assert_true(a.rate == 10000);
    /* a cut, then recovery by the same slope */
    bf__rate_update(&law, &a, 30, 101 * S);
    assert_true(a.rate == 5000);
    bf__rate_update(&law, &a, 10, 103 * S);
    assert_true(fabs(a.rate - 7000) < 1e-6);
}

static void test_unknown_holds(void **state)
{
    (void)state;
    bf_rate_law law = law_std();
    bf_rate_state s = {.rate = 3000, .at_us = 0, .signal_ms = 10};
    bf__rate_update(&law, &s, NAN, 5 * S);
    assert_true(s.rate == 3000);
    assert_true(isnan(s.signal_ms));
    assert_int_equal(s.decreases + s.increases, 0);
}

static void test_bound_from_pace(void **state)
{
    (void)state;
    bf_rate_law law = law_std();
    law.max = 0;
    law.increase = 0;
    bf_rate_state s = {.rate = 100, .at_us = 0, .signal_ms = NAN};
    assert_true(bf__rate_bound(&law, &s) == 0); /* nothing known: no bound, no increase */
    bf__rate_update(&law, &s, 5, 1 * S);
    assert_true(s.rate == 100);
    bf__rate_observe_pace(&s, 3000, 1 * S); /* 3000 keys/s flat out */
    assert_true(bf__rate_bound(&law, &s) == 6000);
    bf__rate_update(&law, &s, 5, 2 * S); /* a tenth of 6000 in a second */
    assert_true(fabs(s.rate - 700) < 1e-6);
    bf__rate_update(&law, &s, 5, 60 * S);
    assert_true(s.rate == 6000); /* never above twice the pace */
    /* a slower step lowers the remembered pace slowly; a faster one raises it at once */
    bf__rate_observe_pace(&s, 1000, 1 * S);
    assert_true(fabs(s.pace - 2850) < 1e-6);
    bf__rate_observe_pace(&s, 5000, 1 * S);
    assert_true(s.pace == 5000);
    /* a max lower than twice the pace wins */
    law.max = 4000;
    assert_true(bf__rate_bound(&law, &s) == 4000);
}

static void test_law_of_config(void **state)
{
    (void)state;
    bf_throttle_config cfg = {.latency_target_ms = 25, .latency_sql = "SELECT 1"};
    bf_rate_law law;
    bf__rate_law_of(&cfg, &law);
    assert_true(law.target_ms == 25);
    assert_true(law.min == 1);
    assert_true(law.max == 0);
    assert_true(law.keep == 0.5);
    assert_int_equal(law.holdoff_us, 1000000);
    cfg.rate_min = 500;
    cfg.rate_max = 200; /* below min: min (configure refuses it; the law stays sane) */
    cfg.rate_decrease_pct = 30;
    cfg.check_ms = 100;
    bf__rate_law_of(&cfg, &law);
    assert_true(law.max == 500);
    assert_true(fabs(law.keep - 0.7) < 1e-9);
    assert_int_equal(law.holdoff_us, 100000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_starts_at_floor), cmocka_unit_test(test_decrease_above_target),
        cmocka_unit_test(test_holdoff),         cmocka_unit_test(test_increase_per_second),
        cmocka_unit_test(test_unknown_holds),   cmocka_unit_test(test_bound_from_pace),
        cmocka_unit_test(test_law_of_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
