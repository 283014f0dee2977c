/*
 * test_throttle_xid.c - the xid_age throttle signal (issue 11, docs/throttling.md) on a
 * database whose transaction IDs are old: the signal trips at a whole percentage of the 2^31
 * wraparound horizon, 21 million IDs a percent, which no test can spend. scripts/pg.sh
 * aged-start makes a scratch cluster whose next transaction ID begins 40 million in
 * (pg_resetwal -x), so every database there has age(datfrozenxid) of about 1.9 %; this suite
 * points BUZZ_TEST_PG_URL at it before anything connects and runs through the engine's seams.
 *
 * Case and the guard it proves (removing it fails the case):
 * - test_xid_age_trips_and_releases: bf__throttle_check's xid_age column and comparison, and
 *   step_health's wait: with throttle_xid_age_pct 1 a step commits nothing, reports
 *   BF_STEP_THROTTLED "throttled by xid_age: 1% (limit 1%)", and the row shows signal
 *   xid_age; configured to 2 % (above the database's age) the next step runs batches and the
 *   row's throttle fields are cleared; the backfill completes with every row applied once.
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

#define ROWS 300

static bf_definition def = {
    .id = "thr.xid_v1",
    .table = "thr_xid",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 100,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2, counter = t.counter + 1",
    .postcondition = "t.fixed IS NOT NULL AND t.counter = 1",
};
static bf_registry *registry;
static bf_throttle *throttle;

static void run_quiet(const char *cmd)
{
    if (system(cmd) != 0)
        fail_msg("%s failed", cmd);
}

/* scripts/pg.sh aged-start: the scratch cluster's URL. */
static char *aged_url(void)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s/scripts/pg.sh' aged-start", BUZZ_SOURCE_DIR);
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        return NULL;
    static char url[512];
    char *got = fgets(url, sizeof url, p);
    int rc = pclose(p);
    if (got == NULL || rc != 0)
        return NULL;
    url[strcspn(url, "\n")] = '\0';
    return url;
}

static void configure(int xid_age_pct)
{
    bf_throttle_config cfg = {.xid_age_pct = xid_age_pct, .wait_ms = 1, .check_ms = 1};
    const char *ids[] = {def.id};
    char diag[BF_DIAG_MAX] = "";
    if (bf_throttle_configure(throttle, NULL, ids, &cfg, 1, 0, diag, sizeof diag) != BF_OK)
        fail_msg("bf_throttle_configure: %s", diag);
}

static int setup(void **state)
{
    (void)state;
    char *url = aged_url();
    if (url == NULL)
        fail_msg("scripts/pg.sh aged-start failed");
    setenv("BUZZ_TEST_PG_URL", url, 1);
    bt_db_create("throttle_xid");
    PGconn *c = bt_connect();
    bt_make_items(c, "thr_xid", ROWS);
    /* the premise: this database is past 1 % of the horizon and short of 2 % */
    assert_int_equal(bt_int(c, "SELECT floor(age(datfrozenxid) * 100.0 / 2147483648)"
                               " FROM pg_database WHERE datname = current_database()"),
                     1);
    PQfinish(c);
    const bf_definition *const list[] = {&def};
    registry = bt_registry(list, 1);
    assert_int_equal(bf_throttle_new(&throttle), BF_OK);
    bt_set_throttle(throttle);
    bf_engine *e = bt_engine(registry, "operator", 0);
    assert_int_equal(bf_register_all(e), BF_OK);
    assert_int_equal(bt_act(e, BF_ACTION_START, def.id), BF_OK);
    bf_engine_close(e);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bt_set_throttle(NULL);
    bt_db_drop_registry(registry);
    bf_throttle_free(throttle);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s/scripts/pg.sh' aged-stop >/dev/null", BUZZ_SOURCE_DIR);
    run_quiet(cmd);
    return 0;
}

static void test_xid_age_trips_and_releases(void **state)
{
    (void)state;
    configure(1);
    bf_engine *e = bt_engine(registry, "thr-xid", 30000);
    bf_worker *w = bt_claimed_worker(e, def.id);
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_THROTTLED);
    assert_non_null(strstr(info.detail, "throttled by xid_age: 1% (limit 1%)"));
    bf_backfill b = bt_get(e, def.id);
    assert_string_equal(b.throttle_signal, "xid_age");
    assert_int_equal(b.rows_covered, 0);

    configure(2);
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH);
    b = bt_get(e, def.id);
    assert_string_equal(b.throttle_signal, "");
    for (int i = 0; i < 1000 && info.step != BF_STEP_COMPLETED; i++)
        assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(bt_get(e, def.id).state, BF_STATE_COMPLETED);
    PGconn *c = bt_connect();
    assert_int_equal(bt_int(c, "SELECT count(*) FROM thr_xid WHERE counter <> 1"), 0);
    PQfinish(c);
    bf_worker_free(w);
    bf_engine_close(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_xid_age_trips_and_releases),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
