/*
 * test_throttle_controller_daemon.c - the rate controller (issue 22) through a real
 * buzz-backfilld: its configuration keys, the state it shows over Admin.Get and buzzctl get, the
 * metrics without a definition label, and a reload refused for a floor above the ceiling. The
 * signal is a table the test writes (public.ctl_sig), above the target from the start, so the
 * controller holds rob.decl_v1 at throttle_rate_min; the engine-level law and its recovery are
 * tests/unit/test_throttle_rate.c and tests/integration/test_throttle_controller.c.
 *
 * Guards proved (removing one fails the case):
 * - config_keys.c / config_throttle.c: the throttle_latency_* and throttle_rate_* keys reach the
 *   engine (without them no controller runs and the backfill completes unthrottled);
 * - worker.c step_after_batches' "latency" pace: Admin.Get and buzzctl get show the signal
 *   "latency" with the rate, the signal and the cuts;
 * - metrics.c metrics_render_scrape's controller gauges and http.c's read of them:
 *   rate_controllers 1, the rate at the floor, decreases counted, the throttle gauge under
 *   signal="latency";
 * - throttle.c throttle_check_config: rate_min above rate_max is refused on SIGHUP and the
 *   previous settings stay;
 * - the backfill still completes with every row applied once once the controller is off.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bt.h"
#include "daemon.h"
#include "http_get.h"

static PGconn *pg;
static bd_daemon d;
static bool passed;

static int setup(void **state)
{
    (void)state;
    pg = bd_suite_open("throttle_controller_daemon");
    bt_install_barrier(pg);
    bt_make_items(pg, "rob_decl", 400);
    bt_make_items(pg, "rob_cb", 400);
    bt_exec(pg, "CREATE TABLE public.ctl_sig (ms double precision);"
                "INSERT INTO public.ctl_sig VALUES (100)");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bd_suite_close(d.pid > 0 ? &d : NULL, pg, !passed);
    return 0;
}

static void test_controller_through_the_daemon(void **state)
{
    (void)state;
    int port = bd_free_port();
    char extra[1024];
    snprintf(extra, sizeof extra,
             "throttle_latency_target_ms = 20\n"
             "throttle_latency_sql = 'SELECT ms FROM public.ctl_sig'\n"
             "throttle_rate_min = 5\nthrottle_rate_max = 50\nthrottle_check_ms = 10\n"
             "http_listen = http://127.0.0.1:%d",
             port);
    bd_options o = bd_defaults();
    o.definitions = "rob";
    o.auto_migrate = true;
    o.workers = 1;
    o.lease_ms = 3000;
    o.extra = extra;
    bd_start(&d, &o);
    bfc_client *c = bd_client(d.ipc_url, NULL, 10000, 2);
    bd_wait_registered(pg, 2);
    bd_control_ok(c, "Start", "rob.decl_v1");
    /* above the target from the first sample: the controller holds the floor, 5 keys/s, and
     * the worker paces on it (400 keys take 80 s, longer than this test waits) */
    const char *const want[] = {
        "buzz_backfill_rate_controllers 1\n",
        "buzz_backfill_rate_controller_keys_per_second 5.0\n",
        "buzz_backfill_rate_controller_signal_ms 100.000\n",
        "buzz_backfill_throttled_workers{signal=\"latency\"} 1\n",
    };
    if (!th_wait_body("127.0.0.1", port, "/metrics", want, 4, 30000))
        fail_msg("/metrics never showed the controller at its floor");
    th_response r = th_get("127.0.0.1", port, "/metrics");
    assert_int_equal(r.status, 200);
    const char *cuts = strstr(r.body, "buzz_backfill_rate_controller_changes_total"
                                      "{direction=\"decrease\"} ");
    if (cuts == NULL || strtoll(strchr(cuts, '}') + 2, NULL, 10) < 1)
        fail_msg("no cut counted:\n%s", r.body);
    th_response_fini(&r);
    /* Admin.Get and buzzctl get show it */
    bd_get_resp *g = NULL;
    for (int i = 0;; i++) {
        g = bd_get(c, "rob.decl_v1");
        if (g->backfill->throttle != NULL && strcmp(g->backfill->throttle->signal, "latency") == 0)
            break;
        bd_free(g);
        if (i > 3000)
            fail_msg("rob.decl_v1 never showed the latency pace");
        bd_sleep_ms(10);
    }
    if (strstr(g->backfill->throttle->value, "5 keys/s, 100.0 ms (target 20 ms), ") == NULL)
        fail_msg("the pace's value: %s", g->backfill->throttle->value);
    bd_free(g);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s --url %s get rob.decl_v1", BUZZCTL_PATH, d.ipc_url);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char out[8192];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    pclose(p);
    if (strstr(out, "throttled:   latency: 5 keys/s, 100.0 ms (target 20 ms), ") == NULL)
        fail_msg("buzzctl get does not show the controller:\n%s", out);

    /* a floor above the ceiling is refused; the controller goes on */
    bd_reconfigure(&d, "throttle_rate_min = 100", "configuration refused");
    assert_true(bd_log_contains(&d, "rate_min 100 is above rate_max 50"));
    /* off: the backfill completes, every row applied once */
    bd_reconfigure(&d, "throttle_rate_min = 5\nthrottle_latency_target_ms = 0",
                   "throttle settings reloaded");
    bd_free(bd_wait_state(c, "rob.decl_v1", BD_ST(COMPLETED)));
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM rob_decl WHERE counter <> 1"), 0);
    bfc_close(c);
    bd_stop(&d);
    passed = true;
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_controller_through_the_daemon)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
