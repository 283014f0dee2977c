/*
 * test_keepalives.c - the TCP liveness settings of an engine session (engine.c, "TCP liveness
 * of the session"), read from inside the session by a callback definition's batch: the
 * server's side of a worker's session runs with tcp_user_timeout half the lease and keepalives
 * a quarter of it (the defaults), and a conninfo's own tcp_user_timeout / keepalives_* win, on
 * both ends.
 *
 * Guards: the keepalive SETs of engine_session_configure (without them the server keeps its
 * defaults, 0) and the order of the libpq options in engine_connect (defaults before the
 * expanded conninfo: the other way round the conninfo's values would lose).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bt.h"

#define KA_LEASE_MS 60000 /* outlasts bt's 20 s statement and lock timeouts */

/* what the last batch saw in its session */
static long long seen_user_timeout, seen_idle, seen_interval, seen_count;

static bf_err ka_mutate(bf_txn *txn, void *arg)
{
    (void)arg;
    bf_err err = bf_txn_exec(txn,
                             "UPDATE public.ka_items t SET fixed = t.val * 2,"
                             " counter = t.counter + 1 FROM bf_batch b WHERE t.id = b.id",
                             0, NULL, NULL);
    if (err == BF_OK)
        err = bf_txn_query_int(txn, "SELECT current_setting('tcp_user_timeout')::int", 0, NULL,
                               &seen_user_timeout);
    if (err == BF_OK)
        err = bf_txn_query_int(txn, "SELECT current_setting('tcp_keepalives_idle')::int", 0, NULL,
                               &seen_idle);
    if (err == BF_OK)
        err = bf_txn_query_int(txn, "SELECT current_setting('tcp_keepalives_interval')::int", 0,
                               NULL, &seen_interval);
    if (err == BF_OK)
        err = bf_txn_query_int(txn, "SELECT current_setting('tcp_keepalives_count')::int", 0, NULL,
                               &seen_count);
    return err;
}

static bf_definition ka_def = {
    .id = "ka.items_v1",
    .description = "test_keepalives: reads its session's TCP settings",
    .owner = "buzz tests",
    .table = "public.ka_items",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 100,
    .needs_repair = "t.fixed IS NULL",
    .postcondition = "t.fixed = t.val * 2",
    .mutate = ka_mutate,
    .retry = {.max_attempts = 2, .base_ms = 50, .cap_ms = 200},
};

static int ka_setup(void **state)
{
    (void)state;
    bt_db_create("keepalives");
    return 0;
}

static int ka_teardown(void **state)
{
    (void)state;
    bt_db_drop();
    return 0;
}

/* Run the backfill to its end with a worker engine on conninfo; the settings its batches saw. */
static void ka_run(const char *conninfo)
{
    PGconn *c = bt_connect();
    bt_make_items(c, "ka_items", 150);
    const bf_definition *defs[] = {&ka_def};
    bf_registry *reg = bt_registry(defs, 1);
    bf_engine *e = bt_engine(reg, "ka-admin", KA_LEASE_MS);
    assert_int_equal(bf_register_all(e), BF_OK);
    assert_int_equal(bt_act(e, BF_ACTION_START, "ka.items_v1"), BF_OK);
    bf_config cfg = {.conninfo = conninfo,
                     .owner = "ka-worker",
                     .lease_ms = KA_LEASE_MS,
                     .statement_timeout_ms = 20000,
                     .lock_timeout_ms = 20000};
    bf_engine *we = NULL;
    assert_int_equal(bf_engine_open(&we, &cfg, reg), BF_OK);
    seen_user_timeout = seen_idle = seen_interval = seen_count = -1;
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, we, NULL), BF_OK);
    assert_int_equal(bf_worker_run(w, true), BF_OK);
    bf_worker_free(w);
    bf_engine_close(we);
    assert_int_equal(bt_get(e, "ka.items_v1").state, BF_STATE_COMPLETED);
    bf_engine_close(e);
    bf_registry_free(reg);
    PQfinish(c);
}

/* The defaults: tcp_user_timeout half the lease, the first probe after a quarter of the lease,
 * the interval an eighth of it, three probes. */
static void test_defaults(void **state)
{
    (void)state;
    ka_run(bt_db_conninfo());
    assert_int_equal(seen_user_timeout, KA_LEASE_MS / 2);
    assert_int_equal(seen_idle, KA_LEASE_MS / 4000);
    assert_int_equal(seen_interval, KA_LEASE_MS / 8000);
    assert_int_equal(seen_count, 3);
}

/* The conninfo's own values win, and the server's side takes them too. */
static void test_conninfo_wins(void **state)
{
    (void)state;
    char conninfo[1024];
    snprintf(conninfo, sizeof conninfo,
             "%s tcp_user_timeout=7000 keepalives_idle=9 keepalives_interval=4 keepalives_count=5",
             bt_db_conninfo());
    ka_run(conninfo);
    assert_int_equal(seen_user_timeout, 7000);
    assert_int_equal(seen_idle, 9);
    assert_int_equal(seen_interval, 4);
    assert_int_equal(seen_count, 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_defaults, ka_setup, ka_teardown),
        cmocka_unit_test_setup_teardown(test_conninfo_wins, ka_setup, ka_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
