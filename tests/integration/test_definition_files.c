/*
 * test_definition_files.c - definition files (definitions_dir, server/src/configuration/deffile.c)
 * through real buzz-backfilld processes, with no C module loaded.
 *
 *   run         a declarative file (uuid key, relay-style jsonb tags) and a SQL callback file
 *               (mutate statements over bf_batch, a validate statement) are started through the
 *               Admin API. Each definition waits at a barrier (an advisory lock the test holds)
 *               in a batch after five committed ones; while both batches wait inside their
 *               transactions a writer connection updates rows ahead of them the old way
 *               (inputs changed, derived column still NULL) and the new way (both columns
 *               right), and inserts rows; the daemon is killed with SIGKILL; the writer writes
 *               again; the barrier opens and a new daemon (same files) takes over after the
 *               lease and completes both. Every row is exactly right: the derived column equals
 *               the function of the row's current inputs, each row repaired by a batch was
 *               repaired once (the mutations count applications; the killed batches rolled
 *               back whole), and no row the writer wrote correctly was touched.
 *   validate    a SQL form file whose mutation is wrong fails its validate statement: the
 *               backfill fails with the file's validate_message, the count and the file name.
 *   bad files   one test each, with the expected message: a syntax error and an unknown field
 *               (the daemon refuses to start: exit 1, the log names file, line and field), a key
 *               column the table lacks and a key type that is not the column's (Start is
 *               refused naming the column), a file changed under a loaded stable ID (SIGHUP
 *               refuses it and the loaded definition keeps running), a file writable by others
 *               (refused at start), and a bad file while the startup session is already open
 *               on a fresh database with auto_migrate on (nothing is migrated).
 *
 * Falsified: without deffile_mutate's statements (return BF_OK before them) the run's rows stay
 * unrepaired and validation fails; without deffile_validate's count check the validate test
 * completes; without the reload's comparison the changed file is not reported; without the
 * mode check the writable file loads; without startup_wait_proceed the fresh database is
 * migrated.
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

#define EVENTS_ID "rt.events.d_tag_v1"
#define ITEMS_ID  "rt.items.fixed_v1"
#define B_EVENTS  1701
#define B_ITEMS   1702
#define ROWS      2000

static PGconn *pg;
static PGconn *holder; /* holds the barriers; a failed test's is closed by test_teardown */

static const char events_def[] =
    "# the declarative form over a relay-style table (uuid key, jsonb tags)\n"
    "id = " EVENTS_ID "\n"
    "description = fill d_tag from the first d tag\n"
    "owner = test\n"
    "revision = r1\n"
    "table = rt.events\n"
    "key = id uuid\n"
    "batch_size = 100\n"
    "required = false\n"
    "# the batch holding row 550 waits at the test's barrier\n"
    "needs_repair = <<SQL\n"
    "t.d_tag IS NULL AND CASE WHEN t.n = 550 THEN bt_barrier(1701) ELSE true END\n"
    "SQL\n"
    "update_set = d_tag = rt.d_tag(t.tags), applied = t.applied + 1\n"
    "postcondition = t.d_tag IS NOT DISTINCT FROM rt.d_tag(t.tags)\n"
    "retry.max_attempts = 3\n";

static const char items_def[] =
    "# the SQL callback form: statements over the batch's keys in bf_batch\n"
    "id = " ITEMS_ID "\n"
    "table = rt.items\n"
    "key = id bigint\n"
    "batch_size = 100\n"
    "mutate = SELECT bt_barrier(1702) FROM bf_batch WHERE id = 550\n"
    "mutate = <<SQL\n"
    "UPDATE rt.items t SET fixed = t.val * 2, applied = t.applied + 1\n"
    "FROM bf_batch b WHERE t.id = b.id AND t.fixed IS NULL\n"
    "SQL\n"
    "validate = <<SQL\n"
    "SELECT count(*) FROM rt.items t JOIN bf_batch b ON t.id = b.id\n"
    "WHERE t.fixed IS DISTINCT FROM t.val * 2\n"
    "SQL\n"
    "validate_message = rows with a missing or wrong fixed\n";

/* bd_def_file, then the mode a case needs (a writable file is refused) */
static void write_def(const char *name, const char *text, mode_t mode)
{
    bd_def_file(name, text);
    char path[512];
    snprintf(path, sizeof path, "%s/%s", bd_defs_dir(), name);
    assert_int_equal(chmod(path, mode), 0);
}

static void make_tables(void)
{
    bt_exec(pg, "DROP SCHEMA IF EXISTS rt CASCADE");
    /* the suites' IDs are reused: forget the previous test's rows (a completed row is immutable
     * to the engine's triggers, which the replica role skips) */
    bt_exec(pg, "SET session_replication_role = replica");
    bt_exec(pg, "DELETE FROM buzz_backfill.backfill");
    bt_exec(pg, "RESET session_replication_role");
    bt_exec(pg, "CREATE SCHEMA rt");
    bt_exec(pg, "CREATE FUNCTION rt.d_tag(tags jsonb) RETURNS text LANGUAGE sql IMMUTABLE AS"
                " $$ SELECT coalesce((SELECT e->>1 FROM jsonb_array_elements(tags) e"
                " WHERE e->>0 = 'd' LIMIT 1), '') $$");
    bt_exec(pg, "CREATE TABLE rt.events (id uuid PRIMARY KEY, n int, tags jsonb NOT NULL,"
                " d_tag text, applied int NOT NULL DEFAULT 0, w bool NOT NULL DEFAULT false)");
    bt_exec(pg,
            "INSERT INTO rt.events (id, tags) SELECT md5(i::text)::uuid,"
            " jsonb_build_array(jsonb_build_array('p', 'x'), jsonb_build_array('d', 'v' || i))"
            " FROM generate_series(1, %d) i",
            ROWS);
    bt_exec(pg, "UPDATE rt.events e SET n = o.rn FROM (SELECT id, row_number() OVER (ORDER BY"
                " id) AS rn FROM rt.events) o WHERE o.id = e.id");
    bt_exec(pg, "CREATE TABLE rt.items (id bigint PRIMARY KEY, val int NOT NULL, fixed int,"
                " applied int NOT NULL DEFAULT 0, w bool NOT NULL DEFAULT false)");
    bt_exec(pg, "INSERT INTO rt.items (id, val) SELECT i, i %% 97 FROM generate_series(1, %d) i",
            ROWS);
    bt_exec(pg, "ANALYZE rt.events");
    bt_exec(pg, "ANALYZE rt.items");
}

static int setup(void **state)
{
    (void)state;
    pg = bd_suite_open("deffiles");
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

static bd_options opts(int lease_ms)
{
    bd_options o = bd_defaults();
    o.workers = 2;
    o.lease_ms = lease_ms;
    o.extra = bd_defs_extra();
    return o;
}

static void start(bfc_client *c, const char *id)
{
    bd_control_ok(c, "Start", id);
}

/* The writer: the old way (inputs changed, derived NULL) and the new way (both right), on rows
 * past the waiting batches, on repaired rows, and new rows. */
static void write_concurrently(int round)
{
    bt_exec(pg,
            "UPDATE rt.events SET tags = jsonb_build_array(jsonb_build_array('d', 'old%d'))"
            " WHERE n BETWEEN %d AND %d",
            round, 1000 + round * 100, 1009 + round * 100);
    bt_exec(pg,
            "UPDATE rt.events SET tags = jsonb_build_array(jsonb_build_array('d', 'new%d')),"
            " d_tag = 'new%d', w = true WHERE n BETWEEN %d AND %d OR n BETWEEN %d AND %d",
            round, round, 1020 + round * 100, 1029 + round * 100, 10 + round * 10, 19 + round * 10);
    bt_exec(pg, "INSERT INTO rt.events (id, tags, d_tag, w) SELECT gen_random_uuid(),"
                " jsonb_build_array(jsonb_build_array('d', 'ins')), 'ins', true"
                " FROM generate_series(1, 50)");
    bt_exec(pg, "UPDATE rt.items SET val = val + 1000 WHERE id BETWEEN %d AND %d",
            1000 + round * 100, 1009 + round * 100);
    bt_exec(pg,
            "UPDATE rt.items SET val = val + 7, fixed = (val + 7) * 2, w = true"
            " WHERE id BETWEEN %d AND %d OR id BETWEEN %d AND %d",
            1020 + round * 100, 1029 + round * 100, 10 + round * 10, 19 + round * 10);
    bt_exec(pg,
            "INSERT INTO rt.items (id, val, fixed, w) SELECT i, 5, 10, true"
            " FROM generate_series(%d, %d) i",
            ROWS + 1 + round * 50, ROWS + 50 + round * 50);
}

static void assert_exactly_right(void)
{
    /* every row's derived column is the function of its current inputs */
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM rt.events"
                                " WHERE d_tag IS DISTINCT FROM rt.d_tag(tags)"),
                     0);
    assert_int_equal(
        bt_int(pg, "SELECT count(*) FROM rt.items WHERE fixed IS DISTINCT FROM val * 2"), 0);
    /* repaired once by a batch, or written right by the writer and never touched */
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM rt.events WHERE applied <> 1 AND"
                                " NOT (w AND applied = 0) AND NOT (w AND n < 550)"),
                     0);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM rt.events WHERE applied > 1"), 0);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM rt.items WHERE applied <> 1 AND"
                                " NOT (w AND applied = 0) AND NOT (w AND id < 550)"),
                     0);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM rt.items WHERE applied > 1"), 0);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM rt.events WHERE w AND n >= 550 AND applied"
                                " <> 0"),
                     0);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM rt.items WHERE w AND id >= 550 AND applied"
                                " <> 0"),
                     0);
}

static void test_run_with_writes_and_kill(void **state)
{
    (void)state;
    make_tables();
    bd_defs_clear();
    write_def("events.def", events_def, 0644);
    write_def("items.def", items_def, 0600);
    holder = bt_connect();
    bt_lock(holder, B_EVENTS);
    bt_lock(holder, B_ITEMS);

    bd_options o = opts(3000);
    bd_daemon a;
    bd_start(&a, &o);
    bd_wait_log(&a, "loaded 2 definition files from");
    bd_wait_registered(pg, 2);
    bfc_client *c = bd_client(a.ipc_url, NULL, 0, 0);
    start(c, EVENTS_ID);
    start(c, ITEMS_ID);
    bfc_close(c);
    /* both wait at their barrier inside a batch, five batches committed before it */
    bt_wait_waiters(pg, B_EVENTS, 1);
    bt_wait_waiters(pg, B_ITEMS, 1);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM rt.events WHERE applied = 1"), 500);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM rt.items WHERE applied = 1"), 500);

    write_concurrently(0);
    int orphan_events = bt_barrier_waiter_pid(pg, B_EVENTS);
    int orphan_items = bt_barrier_waiter_pid(pg, B_ITEMS);
    bd_kill(&a);
    write_concurrently(1);
    /* the killed daemon's waiting statements end at their statement_timeout (inside the
     * lease) and roll back: nothing of the killed batches commits */
    bt_wait_backend_gone(pg, orphan_events);
    bt_wait_backend_gone(pg, orphan_items);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM rt.events WHERE applied = 1 AND NOT w"),
                     480); /* the writer rewrote rows 10..29 the new way */
    bt_unlock(holder, B_EVENTS);
    bt_unlock(holder, B_ITEMS);

    bd_daemon b;
    bd_start(&b, &o);
    c = bd_client(b.ipc_url, NULL, 0, 0);
    bd_free(bd_wait_state(c, EVENTS_ID, BD_ST(COMPLETED)));
    bd_free(bd_wait_state(c, ITEMS_ID, BD_ST(COMPLETED)));
    bfc_close(c);
    bd_stop(&b);
    PQfinish(holder);
    holder = NULL;
    assert_exactly_right();
    /* the killed batches rolled back; their rows were repaired by the new daemon */
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM rt.events WHERE n BETWEEN 501 AND 600"
                                " AND applied = 1 AND NOT w"),
                     100);
}

static void test_validate_statement_fails_named(void **state)
{
    (void)state;
    make_tables();
    bd_defs_clear();
    char wrong[sizeof items_def + 64];
    snprintf(wrong, sizeof wrong, "%s", items_def);
    char *two = strstr(wrong, "t.val * 2, applied");
    assert_non_null(two);
    two[8] = '3'; /* fixed = val * 3: validation must catch it */
    write_def("wrong.def", wrong, 0644);
    bd_options o = opts(30000);
    bd_daemon d;
    bd_start(&d, &o);
    bd_wait_registered(pg, 1);
    bfc_client *c = bd_client(d.ipc_url, NULL, 0, 0);
    start(c, ITEMS_ID);
    bd_get_resp *r = bd_wait_state(c, ITEMS_ID, BD_ST(FAILED));
    assert_non_null(r->backfill->error);
    const char *detail = r->backfill->error->detail;
    if (detail == NULL ||
        strstr(detail, "rows in the chunk: rows with a missing or wrong fixed (validate of "
                       "wrong.def)") == NULL)
        fail_msg("validation failure detail: %s", detail ? detail : "(none)");
    bd_free(r);
    bfc_close(c);
    bd_stop(&d);
}

/* The daemon refuses to start; its log holds want. */
static void assert_start_refused(const char *want)
{
    bd_options o = opts(30000);
    bd_daemon d;
    bd_launch(&d, &o);
    assert_int_equal(bd_signal_wait(&d, 0), 1);
    if (!bd_log_contains(&d, want))
        fail_msg("the log lacks \"%s\"", want);
}

static void test_bad_syntax(void **state)
{
    (void)state;
    bd_defs_clear();
    write_def("a.def", events_def, 0644);
    write_def("b.def", "id = rt.items.fixed_v1\ntable = rt.items\nbatch_size 100\n", 0644);
    char want[600];
    snprintf(want, sizeof want,
             "definitions: cannot load definition files: %s/b.def:3: syntax error: expected "
             "\"field = value\"",
             bd_defs_dir());
    assert_start_refused(want);
}

/* A definitions phase that fails leaves the database as it was, though the startup session
 * was open while it ran: the module's load barrier (BUZZ_TEST_LOAD_BARRIER) holds the phase
 * until the daemon's own session is open (proving that it opens meanwhile, server/src/main.c),
 * then a bad file fails it. The guard: the startup thread waits for srv_startup_proceed()
 * before the schema step (startup.c startup_wait_proceed); without it the daemon migrates a
 * fresh database with auto_migrate on, then exits on the bad file. */
static void test_bad_files_migrate_nothing(void **state)
{
    (void)state;
    bd_defs_clear();
    write_def("b.def", "id = rt.items.fixed_v1\ntable = rt.items\nbatch_size 100\n", 0644);
    const char *fresh = bd_db_new("deffiles_fresh");
    bd_options o = opts(30000);
    o.conninfo = fresh;
    o.auto_migrate = true;
    o.definitions = ""; /* the test module, with no definitions: its load barrier only */
    assert_int_equal(setenv("BUZZ_TEST_LOAD_BARRIER", fresh, 1), 0);
    bd_daemon d;
    bd_launch(&d, &o);
    assert_int_equal(unsetenv("BUZZ_TEST_LOAD_BARRIER"), 0);
    assert_int_equal(bd_signal_wait(&d, 0), 1);
    if (!bd_log_contains(&d, "td: load barrier: session open"))
        fail_msg("the startup session was not open while the definitions loaded; see %s", d.log);
    if (!bd_log_contains(&d, "definitions: cannot load definition files"))
        fail_msg("the daemon did not refuse the bad file; see %s", d.log);
    PGconn *c = bd_connect(fresh);
    assert_int_equal(bt_int(c, "SELECT count(*) FROM pg_namespace WHERE nspname = 'buzz_backfill'"),
                     0);
    PQfinish(c);
    bd_db_drop_last();
}

static void test_unknown_field(void **state)
{
    (void)state;
    bd_defs_clear();
    char text[sizeof items_def + 32];
    snprintf(text, sizeof text, "%sbatchsize = 10\n", items_def);
    write_def("items.def", text, 0644);
    char want[600];
    snprintf(want, sizeof want,
             "definitions: cannot load definition files: %s/items.def:16: unknown field "
             "\"batchsize\"",
             bd_defs_dir());
    assert_start_refused(want);
}

static void test_writable_file(void **state)
{
    (void)state;
    bd_defs_clear();
    write_def("items.def", items_def, 0664);
    char want[600];
    snprintf(want, sizeof want,
             "%s/items.def: the file is writable by group or others, and definitions hold SQL the "
             "daemon runs (chmod go-w)",
             bd_defs_dir());
    assert_start_refused(want);
}

/* Start is refused with want in the detail; the row stays pending. */
static void assert_start_refused_naming(const char *text, const char *id, const char *want)
{
    bd_defs_clear();
    write_def("k.def", text, 0644);
    bd_options o = opts(30000);
    bd_daemon d;
    bd_start(&d, &o);
    bd_wait_registered(pg, 1);
    bfc_client *c = bd_client(d.ipc_url, NULL, 0, 0);
    /* the status code is the error class's (docs/service.md); the detail names the column */
    bd_control_resp *resp = NULL;
    int st = bd_control(c, "Start", id, &resp);
    bd_free(resp);
    const bfc_status *status = bfc_last_status(c);
    if (st == BD_SC(OK) || strstr(status->detail, want) == NULL)
        fail_msg("Start answered %d (%s: %s); want a refusal naming \"%s\"", st, status->message,
                 status->detail, want);
    bfc_close(c);
    bd_stop(&d);
    char *state_now = bt_text(pg, "SELECT state FROM buzz_backfill.backfill WHERE id = '%s'", id);
    assert_string_equal(state_now, "pending");
    free(state_now);
}

static void test_missing_key_column(void **state)
{
    (void)state;
    make_tables();
    char text[sizeof items_def + 64];
    snprintf(text, sizeof text, "%s", items_def);
    memcpy(strstr(text, "key = id bigint"), "key = ix bigint", 15);
    assert_start_refused_naming(text, ITEMS_ID, "key column ix is not a column of rt.items");
}

static void test_wrong_key_type(void **state)
{
    (void)state;
    make_tables();
    bt_exec(pg, "ALTER TABLE rt.items ALTER COLUMN id TYPE integer");
    assert_start_refused_naming(items_def, ITEMS_ID,
                                "key column id is integer, the definition declares bigint");
}

static void test_changed_under_same_id(void **state)
{
    (void)state;
    make_tables();
    bd_defs_clear();
    write_def("items.def", items_def, 0644);
    bd_options o = opts(30000);
    bd_daemon d;
    bd_start(&d, &o);
    bd_wait_registered(pg, 1);
    /* edited in place: the mutation now writes val * 3 */
    char changed[sizeof items_def + 64];
    snprintf(changed, sizeof changed, "%s", items_def);
    strstr(changed, "t.val * 2, applied")[8] = '3';
    write_def("items.def", changed, 0644);
    assert_int_equal(kill(d.pid, SIGHUP), 0);
    char want[600];
    snprintf(want, sizeof want,
             "SIGHUP: %s/items.def: mutate: changed under the loaded stable ID " ITEMS_ID
             ": refused, the loaded definition stays",
             bd_defs_dir());
    bd_wait_log(&d, want);
    /* the loaded definition runs */
    bfc_client *c = bd_client(d.ipc_url, NULL, 0, 0);
    start(c, ITEMS_ID);
    bd_free(bd_wait_state(c, ITEMS_ID, BD_ST(COMPLETED)));
    bfc_close(c);
    bd_stop(&d);
    assert_int_equal(
        bt_int(pg, "SELECT count(*) FROM rt.items WHERE fixed IS DISTINCT FROM val * 2"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_run_with_writes_and_kill, test_teardown),
        cmocka_unit_test(test_validate_statement_fails_named),
        cmocka_unit_test(test_bad_syntax),
        cmocka_unit_test(test_bad_files_migrate_nothing),
        cmocka_unit_test(test_unknown_field),
        cmocka_unit_test(test_writable_file),
        cmocka_unit_test(test_missing_key_column),
        cmocka_unit_test(test_wrong_key_type),
        cmocka_unit_test(test_changed_under_same_id),
    };
    if (getenv("BUZZ_TEST_FILTER") != NULL) /* one test while debugging */
        cmocka_set_test_filter(getenv("BUZZ_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
