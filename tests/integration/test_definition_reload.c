/*
 * test_definition_reload.c - a new definition file joins a running buzz-backfilld on SIGHUP
 * (server/src/configuration/deffile.c srv_defdir_reload, engine/src/registry.c), through real
 * daemons and the Admin API, with no C module loaded.
 *
 *   joins       the daemon (automatic mode, three workers) starts with one file, items.def; its
 *               backfill is started and waits at a barrier (an advisory lock the test holds)
 *               inside a batch. Two valid files (events.def; gate.def, required) and a bad one
 *               are dropped into the directory and SIGHUP is sent: the bad file is refused by
 *               name, the others are registered and logged as definition.joined. Automatic
 *               mode starts gate.def, which waits at its own barrier while Readiness gates on
 *               it (the registry's required IDs grew). Get shows events pending; Start through
 *               the Admin API runs it on the third worker, whose engine was opened before the
 *               registry grew, to completed while the other two wait. The barriers open: gate
 *               completes (ready again), then items. Every row of the three tables is exactly
 *               right, repaired once.
 *   refused     a stable ID registered in PostgreSQL by another definition (an earlier daemon
 *               with another version of the file): the new file is refused on SIGHUP with
 *               bf_register's reason, stays out of the registry (Start is refused) and its row
 *               stays pending and untouched.
 *
 * Falsified (each seen failing with the guard removed):
 *   - joins: publishing the grown required-ID list (registry.c registry_publish_ids: the
 *     ids_required exchange after the first) removed, Readiness stays ready while gate.def
 *     runs (assert_false(r->ready) fails); the automatic start (deffile.c defdir_join:
 *     defdir_auto_start) removed, gate.def never reaches its barrier; the live add (deffile.c
 *     defdir_join: bf_registry_add on d->reg) removed, no worker can claim gate.def either;
 *   - joins, in the ASan build (BUZZ_SANITIZE): the growth of the engine's per-definition bits
 *     (batch.c loop_ensure: `index >= e->nprepared`) removed, the idle worker's engine, opened
 *     before the registry grew, reads past them (heap-buffer-overflow in loop_ensure) and the
 *     daemon dies (Admin.Get fails);
 *   - refused: the registration verdict (deffile.c defdir_join: `if (rerr != BF_OK)`) removed,
 *     the file joins and the "1 refused" summary never appears.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "bt.h"
#include "daemon.h"

#define ITEMS_ID  "rl.items.fixed_v1"
#define EVENTS_ID "rl.events.fixed_v1"
#define GATE_ID   "rl.gate.fixed_v1"
#define B_ITEMS   1711
#define B_GATE    1712
#define ROWS      2000

static PGconn *pg;
static PGconn *holder; /* holds the barrier; a failed test's is closed by test_teardown */

static const char items_def[] =
    "# the SQL callback form; the batch holding row 550 waits at the test's barrier\n"
    "id = " ITEMS_ID "\n"
    "table = rl.items\n"
    "key = id bigint\n"
    "batch_size = 100\n"
    "mutate = SELECT bt_barrier(1711) FROM bf_batch WHERE id = 550\n"
    "mutate = <<SQL\n"
    "UPDATE rl.items t SET fixed = t.val * 2, applied = t.applied + 1\n"
    "FROM bf_batch b WHERE t.id = b.id AND t.fixed IS NULL\n"
    "SQL\n"
    "validate = <<SQL\n"
    "SELECT count(*) FROM rl.items t JOIN bf_batch b ON t.id = b.id\n"
    "WHERE t.fixed IS DISTINCT FROM t.val * 2\n"
    "SQL\n";

/* the declarative form; factor 3 (the refused test registers a factor 4 first) */
static const char events_def[] = "id = " EVENTS_ID "\n"
                                 "description = joins on SIGHUP\n"
                                 "table = rl.events\n"
                                 "key = id bigint\n"
                                 "batch_size = 100\n"
                                 "needs_repair = t.fixed IS NULL\n"
                                 "update_set = fixed = t.val * 3, applied = t.applied + 1\n"
                                 "postcondition = t.fixed IS NOT DISTINCT FROM t.val * 3\n";

/* required: automatic mode starts it when it joins; the batch holding row 50 waits at the
 * test's barrier */
static const char gate_def[] = "id = " GATE_ID "\n"
                               "table = rl.gate\n"
                               "key = id bigint\n"
                               "batch_size = 20\n"
                               "required = true\n"
                               "needs_repair = <<SQL\n"
                               "t.fixed IS NULL AND CASE WHEN t.id = 50 THEN bt_barrier(1712) ELSE "
                               "true END\n"
                               "SQL\n"
                               "update_set = fixed = t.val + 1, applied = t.applied + 1\n"
                               "postcondition = t.fixed IS NOT DISTINCT FROM t.val + 1\n";

static void make_tables(void)
{
    bt_exec(pg, "DROP SCHEMA IF EXISTS rl CASCADE");
    /* the IDs are reused: forget the previous test's rows (a completed row is immutable to the
     * engine's triggers, which the replica role skips) */
    bt_exec(pg, "SET session_replication_role = replica");
    bt_exec(pg, "DELETE FROM buzz_backfill.backfill");
    bt_exec(pg, "RESET session_replication_role");
    bt_exec(pg, "CREATE SCHEMA rl");
    bt_exec(pg, "CREATE TABLE rl.items (id bigint PRIMARY KEY, val int NOT NULL, fixed int,"
                " applied int NOT NULL DEFAULT 0)");
    bt_exec(pg, "INSERT INTO rl.items (id, val) SELECT i, i %% 97 FROM generate_series(1, %d) i",
            ROWS);
    bt_exec(pg, "CREATE TABLE rl.events (id bigint PRIMARY KEY, val int NOT NULL, fixed int,"
                " applied int NOT NULL DEFAULT 0)");
    bt_exec(pg, "INSERT INTO rl.events (id, val) SELECT i, i %% 89 FROM generate_series(1, %d) i",
            ROWS);
    bt_exec(pg, "CREATE TABLE rl.gate (id bigint PRIMARY KEY, val int NOT NULL, fixed int,"
                " applied int NOT NULL DEFAULT 0)");
    bt_exec(pg, "INSERT INTO rl.gate (id, val) SELECT i, i FROM generate_series(1, 200) i");
    bt_exec(pg, "ANALYZE rl.items");
    bt_exec(pg, "ANALYZE rl.events");
    bt_exec(pg, "ANALYZE rl.gate");
}

static int setup(void **state)
{
    (void)state;
    pg = bd_suite_open("defreload");
    bd_migrate(NULL);
    bt_install_barrier(pg);
    (void)bd_defs_dir(); /* made before the first daemon reads it */
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bd_suite_close(NULL, pg, false);
    return 0;
}

static int test_teardown(void **state)
{
    (void)state;
    PQfinish(holder);
    holder = NULL;
    return 0;
}

static bd_options opts(bool auto_backfill)
{
    bd_options o = bd_defaults();
    o.workers = 3;
    o.auto_backfill = auto_backfill;
    o.extra = bd_defs_extra();
    return o;
}

static void start(bfc_client *c, const char *id)
{
    bd_control_ok(c, "Start", id);
}

static void test_new_file_joins(void **state)
{
    (void)state;
    make_tables();
    bd_defs_clear();
    bd_def_file("items.def", items_def);
    holder = bt_connect();
    bt_lock(holder, B_ITEMS);
    bt_lock(holder, B_GATE);

    bd_options o = opts(true);
    bd_daemon d;
    bd_start(&d, &o);
    bd_wait_registered(pg, 1);
    bfc_client *c = bd_client(d.ipc_url, NULL, 0, 0);
    start(c, ITEMS_ID);
    bt_wait_waiters(pg, B_ITEMS, 1); /* one worker waits inside a batch of items */

    bd_def_file("events.def", events_def);
    bd_def_file("gate.def", gate_def);
    bd_def_file("bad.def", "id = rl.bad_v1\ntable = rl.items\nbatch_size 100\n");
    assert_int_equal(kill(d.pid, SIGHUP), 0);
    /* the summary comes last: every file was dealt with by then */
    bd_wait_log(&d, "SIGHUP: definitions directory checked: 4 files, 1 refused");
    char want[600];
    snprintf(want, sizeof want,
             "SIGHUP: %s/events.def: definition " EVENTS_ID
             " registered and joined the running daemon",
             bd_defs_dir());
    if (!bd_log_contains(&d, want) || !bd_log_contains(&d, "[definition.joined]"))
        fail_msg("the log lacks \"%s\" as definition.joined", want);
    snprintf(want, sizeof want, "%s/bad.def:3: syntax error", bd_defs_dir());
    if (!bd_log_contains(&d, want))
        fail_msg("the log lacks \"%s\"", want);

    /* automatic mode started the required one: a second worker waits inside its batch, and
     * Readiness gates on it (the registry's required IDs grew) */
    bt_wait_waiters(pg, B_GATE, 1);
    bd_check_resp *r = bd_check(c, 0);
    assert_false(r->ready);
    assert_int_equal(bd_component(r, "backfills")->status, BD_CS(NOT_READY));
    assert_int_equal(r->n_gating, 1);
    assert_string_equal(r->gating[0]->id, GATE_ID);
    bd_free(r);

    /* Get shows the other one pending; Start runs it on the third worker, whose engine was
     * opened before the registry grew, while the other two wait at their barriers */
    bd_get_resp *g = bd_get(c, EVENTS_ID);
    assert_non_null(g);
    assert_int_equal(g->backfill->state, BD_ST(PENDING));
    bd_free(g);
    start(c, EVENTS_ID);
    bd_free(bd_wait_state(c, EVENTS_ID, BD_ST(COMPLETED)));
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM rl.items WHERE applied = 1"), 500);
    bt_unlock(holder, B_GATE);
    bd_free(bd_wait_state(c, GATE_ID, BD_ST(COMPLETED)));
    r = bd_check(c, 0);
    assert_true(r->ready);
    bd_free(r);
    bt_unlock(holder, B_ITEMS);
    bd_free(bd_wait_state(c, ITEMS_ID, BD_ST(COMPLETED)));
    bfc_close(c);
    bd_stop(&d);
    PQfinish(holder);
    holder = NULL;

    assert_int_equal(
        bt_int(pg, "SELECT count(*) FROM rl.events WHERE fixed IS DISTINCT FROM val * 3"), 0);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM rl.events WHERE applied <> 1"), 0);
    assert_int_equal(
        bt_int(pg, "SELECT count(*) FROM rl.gate WHERE fixed IS DISTINCT FROM val + 1"), 0);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM rl.gate WHERE applied <> 1"), 0);
    assert_int_equal(
        bt_int(pg, "SELECT count(*) FROM rl.items WHERE fixed IS DISTINCT FROM val * 2"), 0);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM rl.items WHERE applied <> 1"), 0);
}

static void test_registered_differently_refused(void **state)
{
    (void)state;
    make_tables();
    bd_defs_clear();
    /* an earlier daemon registered the ID with another mutation (factor 4) */
    char other[sizeof events_def + 16];
    snprintf(other, sizeof other, "%s", events_def);
    strstr(other, "t.val * 3, applied")[8] = '4';
    strstr(other, "t.val * 3\n")[8] = '4';
    bd_def_file("events.def", other);
    bd_options o = opts(false);
    bd_daemon d;
    bd_start(&d, &o);
    bd_wait_registered(pg, 1);
    bd_stop(&d);

    bd_defs_clear();
    bd_def_file("items.def", items_def);
    bd_start(&d, &o);
    bd_wait_registered(pg, 2);
    bd_def_file("events.def", events_def);
    assert_int_equal(kill(d.pid, SIGHUP), 0);
    bd_wait_log(&d, "SIGHUP: definitions directory checked: 2 files, 1 refused");
    char want[600];
    snprintf(want, sizeof want,
             "SIGHUP: %s/events.def: new definition " EVENTS_ID
             " refused, it stays out (a later SIGHUP tries it again): could not register it: ",
             bd_defs_dir());
    if (!bd_log_contains(&d, want) ||
        !bd_log_contains(&d, "was registered by a materially different definition"))
        fail_msg("the log lacks \"%s\" with bf_register's reason", want);
    assert_false(bd_log_contains(&d, "[definition.joined]"));

    /* not in the registry: Start is refused and the row stays as it was */
    bfc_client *c = bd_client(d.ipc_url, NULL, 0, 0);
    bd_control_resp *resp = NULL;
    int st = bd_control(c, "Start", EVENTS_ID, &resp);
    bd_free(resp);
    if (st == BD_SC(OK))
        fail_msg("Start of a refused definition answered OK");
    bfc_close(c);
    bd_stop(&d);
    char *state_now =
        bt_text(pg, "SELECT state FROM buzz_backfill.backfill WHERE id = '" EVENTS_ID "'");
    assert_string_equal(state_now, "pending");
    free(state_now);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM rl.events WHERE applied <> 0"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_new_file_joins, test_teardown),
        cmocka_unit_test(test_registered_differently_refused),
    };
    if (getenv("BUZZ_TEST_FILTER") != NULL) /* one test while debugging */
        cmocka_set_test_filter(getenv("BUZZ_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
