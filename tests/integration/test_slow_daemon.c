/*
 * test_slow_daemon.c - a collapse is visible (issue 16, item 4) through a real buzz-backfilld:
 * a step much slower than the backfill's own recent median is a log event, a metric, a state
 * that Admin.Get, buzzctl get and buzzctl list --wide show, and it clears once the steps are
 * back at the median's pace.
 *
 * The daemon runs rob.decl_v1 (tests/support/test_definitions.c, batches of 50, one batch a
 * step here) over a table whose statement-level trigger waits on the advisory lock that
 * public.slow_ctl names once 500 rows are done. The test holds that lock (a barrier, not a
 * sleep): the tenth batch blocks; once it has waited 400 ms (more than 10 times the median of
 * the nine before it) the control row moves to a second lock the test also holds and the first
 * is released, so the slow step commits and the next one waits while the test looks.
 *
 * Guards proved (removing one fails the case): throttle.c bf__slow_judge and worker.c
 * worker_slow_judge (slow.start logged, the row's slow fields written by worker_observe);
 * BF_BACKFILL_COLUMNS' slow columns and convert.c convert_slow (Admin.Get); projection.c's slow
 * branch and buzzctl_cmds.c (get's "slow:" line, list --wide's SLOW column); metrics.c slow
 * events (slow_workers{reason="batch_time"} 1, then 0 once steps are fast again, slow.end);
 * every row applied exactly once.
 */
#include <setjmp.h>
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

#define LOCK_A 7701
#define LOCK_B 7702

static PGconn *pg;
static bd_daemon d;
static bool passed;

static int setup(void **state)
{
    (void)state;
    pg = bd_suite_open("slow_daemon");
    bt_install_barrier(pg);
    bt_make_items(pg, "rob_decl", 1000);
    bt_make_items(pg, "rob_cb", 10);
    bt_exec(pg,
            "CREATE TABLE public.slow_ctl (k integer NOT NULL, after_rows integer NOT NULL);"
            "INSERT INTO public.slow_ctl VALUES (%d, 500);"
            "CREATE FUNCTION public.slow_gate() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " PERFORM public.bt_barrier(k) FROM public.slow_ctl"
            "  WHERE (SELECT count(*) FROM public.rob_decl WHERE counter > 0) >= after_rows;"
            " RETURN NULL; END $$;"
            "CREATE TRIGGER slow_gate AFTER UPDATE ON public.rob_decl FOR EACH STATEMENT"
            " EXECUTE FUNCTION public.slow_gate()",
            LOCK_A);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bd_suite_close(d.pid > 0 ? &d : NULL, pg, !passed);
    return 0;
}

/* Wait (at most 10 s) until /metrics shows the batch_time gauge and counter at these values. */
static void wait_metrics(int port, const char *workers, const char *total)
{
    char g[128], t[128];
    snprintf(g, sizeof g, "buzz_backfill_slow_workers{reason=\"batch_time\"} %s\n", workers);
    snprintf(t, sizeof t, "buzz_backfill_slow_total{reason=\"batch_time\"} %s\n", total);
    const char *const want[] = {g, t};
    if (!th_wait_body("127.0.0.1", port, "/metrics", want, 2, 10000))
        fail_msg("/metrics never showed %s and %s", g, t);
}

static void buzzctl(char *out, size_t cap, const char *args)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s --url %s %s", BUZZCTL_PATH, d.ipc_url, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    pclose(p);
}

/* Block until a backend has waited on advisory lock key for ms milliseconds (its statement,
 * one batch a step, started that long ago). */
static void wait_waited(int key, int ms)
{
    bt_wait_waiters(pg, key, 1);
    while (bt_int(pg,
                  "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
                  " WHERE l.locktype = 'advisory' AND NOT l.granted AND l.objid = %d"
                  " AND a.query_start < clock_timestamp() - interval '%d ms'",
                  key, ms) == 0)
        bd_sleep_ms(10);
}

static void test_slow_step_is_visible(void **state)
{
    (void)state;
    int port = bd_free_port();
    char extra[256];
    snprintf(extra, sizeof extra, "batch_target_ms = 0\nhttp_listen = http://127.0.0.1:%d", port);
    PGconn *holder = bt_connect();
    bt_lock(holder, LOCK_A);
    bt_lock(holder, LOCK_B);
    bd_options o = bd_defaults();
    o.definitions = "rob";
    o.auto_migrate = true;
    o.workers = 1;
    o.step_batches = 1;
    o.extra = extra;
    bd_start(&d, &o);
    bfc_client *c = bd_client(d.ipc_url, NULL, 10000, 2);
    bd_wait_registered(pg, 2);
    bd_control_resp *r = NULL;
    assert_int_equal(bd_control(c, "Start", "rob.decl_v1", &r), BD_SC(OK));
    bd_free(r);
    /* nine fast batches, then the tenth waits on LOCK_A */
    wait_waited(LOCK_A, 400);
    bt_exec(pg, "UPDATE public.slow_ctl SET k = %d", LOCK_B);
    bt_unlock(holder, LOCK_A);
    bd_wait_log(&d, "slow.start");
    /* the next step waits on LOCK_B: the slow state holds while the test looks */
    bt_wait_waiters(pg, LOCK_B, 1);
    bd_get_resp *g = NULL;
    for (int i = 0;; i++) {
        g = bd_get(c, "rob.decl_v1");
        if (g->backfill->slow != NULL)
            break;
        bd_free(g);
        if (i > 1000)
            fail_msg("rob.decl_v1 never showed a slow state");
        bd_sleep_ms(10);
    }
    const Buzz__Backfill__V1__Slow *sl = g->backfill->slow;
    assert_non_null(sl->value);
    if (strncmp(sl->value, "batch ", 6) != 0 || strstr(sl->value, ", median ") == NULL)
        fail_msg("unexpected slow value: %s", sl->value);
    assert_true(sl->has_since_us);
    bd_free(g);
    char out[8192];
    buzzctl(out, sizeof out, "get rob.decl_v1");
    if (strstr(out, "slow:        batch ") == NULL || strstr(out, ", median ") == NULL)
        fail_msg("buzzctl get does not show the slow state:\n%s", out);
    buzzctl(out, sizeof out, "list --wide");
    if (strstr(out, "SLOW") == NULL || strstr(out, " batch ") == NULL)
        fail_msg("buzzctl list --wide does not show the slow state:\n%s", out);
    wait_metrics(port, "1", "1");

    /* fast again: the blocked batch commits (slow too), then the next ones clear the state */
    bt_exec(pg, "UPDATE public.slow_ctl SET after_rows = 1000000");
    bt_unlock(holder, LOCK_B);
    g = bd_wait_state(c, "rob.decl_v1", BD_ST(COMPLETED));
    assert_null(g->backfill->slow);
    bd_free(g);
    bd_wait_log(&d, "slow.end");
    wait_metrics(port, "0", "1");
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM rob_decl WHERE counter <> 1"), 0);
    PQfinish(holder);
    bfc_close(c);
    bd_stop(&d);
    passed = true;
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_slow_step_is_visible)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
