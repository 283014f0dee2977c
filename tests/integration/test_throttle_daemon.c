/*
 * test_throttle_daemon.c - throttling through a real buzz-backfilld (issue 11): its
 * configuration keys, a per-definition line, the read model over Admin.Get and buzzctl, the
 * metrics, and the SIGHUP reload of the throttle settings.
 *
 * The daemon runs the "rob" definitions (tests/support/test_definitions.c) with a custom
 * throttle query that is on for every definition but turned off for rob.cb_v1 by a
 * "definition.rob.cb_v1.throttle_custom_sql = ''" line. Guards proved:
 * - config.c config_overrides (the per-definition line): without it rob.cb_v1 is throttled
 *   too and never completes;
 * - convert.c convert_throttle and projection.c's throttle branch: Admin.Get and buzzctl get
 *   show the signal, its value and since when;
 * - metrics.c throttle events: throttled_workers{signal="custom"} is 1 while it waits, and 0
 *   again once a pause ends the claim it waited with (worker.c worker_drop_claim's
 *   throttle.end) and once it completes;
 * - startup.c signals_reload_throttle: a refused file (batch_min above batch_max) keeps the
 *   previous settings (still throttled, config.reload_failed logged), a valid one releases the
 *   backfill, which then completes with every row applied exactly once.
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
    pg = bd_suite_open("throttle_daemon");
    bt_install_barrier(pg);
    bt_make_items(pg, "rob_decl", 400);
    bt_make_items(pg, "rob_cb", 400);
    bt_exec(pg, "CREATE TABLE public.thr_flag (on_ boolean NOT NULL);"
                "INSERT INTO public.thr_flag VALUES (true)");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bd_suite_close(d.pid > 0 ? &d : NULL, pg, !passed);
    return 0;
}

/* Wait (at most 10 s) until /metrics shows the custom signal's gauge and counter at these
 * values. */
static void wait_metrics(int port, const char *workers, const char *total)
{
    char g[128], t[128];
    snprintf(g, sizeof g, "buzz_backfill_throttled_workers{signal=\"custom\"} %s\n", workers);
    snprintf(t, sizeof t, "buzz_backfill_throttles_total{signal=\"custom\"} %s\n", total);
    const char *const want[] = {g, t};
    if (!th_wait_body("127.0.0.1", port, "/metrics", want, 2, 10000))
        fail_msg("/metrics never showed %s and %s", g, t);
}

static void test_throttled_through_the_daemon(void **state)
{
    (void)state;
    int port = bd_free_port();
    char extra[512];
    snprintf(extra, sizeof extra,
             "throttle_custom_sql = 'SELECT on_ FROM public.thr_flag'\n"
             "throttle_check_ms = 1\nthrottle_wait_ms = 100\n"
             "definition.rob.cb_v1.throttle_custom_sql = ''\n"
             "http_listen = http://127.0.0.1:%d",
             port);
    bd_options o = bd_defaults();
    o.definitions = "rob";
    o.auto_migrate = true;
    o.workers = 2;
    o.lease_ms = 3000; /* a throttled worker renews every second */
    o.extra = extra;
    bd_start(&d, &o);
    bfc_client *c = bd_client(d.ipc_url, NULL, 10000, 2);
    bd_wait_registered(pg, 2);
    for (int i = 0; i < 2; i++) {
        bd_control_resp *r = NULL;
        assert_int_equal(bd_control(c, "Start", i ? "rob.cb_v1" : "rob.decl_v1", &r), BD_SC(OK));
        bd_free(r);
    }
    /* the per-definition line: rob.cb_v1 is not throttled and completes */
    bd_free(bd_wait_state(c, "rob.cb_v1", BD_ST(COMPLETED)));
    /* rob.decl_v1 waits on the custom query: Admin.Get says so */
    bd_get_resp *g = NULL;
    for (int i = 0;; i++) {
        g = bd_get(c, "rob.decl_v1");
        if (g->backfill->throttle != NULL)
            break;
        bd_free(g);
        if (i > 6000)
            fail_msg("rob.decl_v1 never showed a throttle");
        bd_sleep_ms(10);
    }
    const Buzz__Backfill__V1__Throttle *th = g->backfill->throttle;
    assert_string_equal(th->signal, "custom");
    assert_string_equal(th->value, "true");
    assert_true(th->has_since_us);
    assert_int_equal(g->backfill->progress->rows_committed, 0);
    bd_free(g);
    /* buzzctl shows it */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s --url %s get rob.decl_v1", BUZZCTL_PATH, d.ipc_url);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char out[8192];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    pclose(p);
    if (strstr(out, "throttled:   custom: true, ") == NULL)
        fail_msg("buzzctl get does not show the throttle:\n%s", out);
    /* and the metrics */
    wait_metrics(port, "1", "1");
    /* a claim that ends ends its throttle: paused while it waits, the worker's renewal finds
     * the claim gone and throttle.end brings the gauge back (worker.c worker_drop_claim);
     * resumed, it is throttled again */
    bd_control_resp *cr = NULL;
    assert_int_equal(bd_control(c, "Pause", "rob.decl_v1", &cr), BD_SC(OK));
    bd_free(cr);
    wait_metrics(port, "0", "1");
    assert_int_equal(bd_control(c, "Resume", "rob.decl_v1", &cr), BD_SC(OK));
    bd_free(cr);
    wait_metrics(port, "1", "2");

    /* a refused reload keeps the previous settings: still throttled */
    bd_reconfigure(&d, "batch_min = 50\nbatch_max = 10", "configuration refused");
    g = bd_get(c, "rob.decl_v1");
    assert_non_null(g->backfill->throttle);
    assert_int_equal(g->backfill->progress->rows_committed, 0);
    bd_free(g);
    /* a valid one releases it, without a restart */
    bd_reconfigure(&d, "batch_min = 0\nbatch_max = 0\nthrottle_custom_sql = ''",
                   "throttle settings reloaded");
    g = bd_wait_state(c, "rob.decl_v1", BD_ST(COMPLETED));
    assert_null(g->backfill->throttle);
    bd_free(g);
    wait_metrics(port, "0", "2");
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM rob_decl WHERE counter <> 1"), 0);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM rob_cb WHERE counter <> 1"), 0);
    bfc_close(c);
    bd_stop(&d);
    passed = true;
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_throttled_through_the_daemon)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
