/*
 * test_preflight.c - the preflight (engine.h bf_preflight, preflight.c) against real
 * PostgreSQL, through bf_preflight and through Start, which runs it before the first batch:
 *
 *   - a declared key type that is not the column's type (bigint over integer) is refused as a
 *     definition error naming the column and both types; Start refuses it too, row pending;
 *   - a key column the table does not have is refused, naming it;
 *   - a unique key without an index in the key's order (20,000 rows) is refused as an unmet
 *     prerequisite with the CREATE INDEX that would serve it; with that index the preflight
 *     passes and reports the index and the plans (index scans of it);
 *   - a small table (at most BF_PREFLIGHT_SMALL_ROWS rows) without such an index passes with a
 *     note that a scan of it is bounded;
 *   - a database whose planner settings make PostgreSQL scan the table (enable_indexscan,
 *     enable_indexonlyscan and enable_bitmapscan off, as a DBA might set them) is refused:
 *     the keyset would be a Seq Scan; Start refuses too; reset, it passes;
 *   - a misspelled column in update_set is refused before the first batch (the mutation does
 *     not plan: undefined column, 42703), typed and without the query's text.
 *
 *   - a definition changed in place under the same stable ID (another update_set) fails closed
 *     in another process: registration refused as incompatible, a Start of the pending row
 *     refused, the row never claimed, start and validation refused, the preflight reports it;
 *     a metadata-only change registers;
 *   - buzz-backfilld preflight over the demo module: a line per definition, exit 0; a key
 *     that is no longer unique makes its line FAIL and the exit 1; an ID no module defines
 *     exits 2.
 *
 * Guards proved (removing any one fails this test): preflight.c preflight_columns (the type
 * and the existence checks), preflight_index, plan_check's refusal of a scan that is not an
 * index scan, and actions.c action_start's call of bf__preflight and its comparison of the
 * locked row's definition digest (test_changed_definition_under_the_same_id).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "bt.h"

static bf_definition def(const char *id, const char *table, const char *k1, bf_key_type t1,
                         const char *k2, bf_key_type t2, const char *update_set)
{
    bf_definition d = {
        .id = id,
        .table = table,
        .key = {{k1, t1}, {k2, t2}},
        .nkey = k2 != NULL ? 2 : 1,
        .batch_size = 100,
        .needs_repair = "t.fixed IS NULL",
        .update_set = update_set,
    };
    return d;
}

static bf_definition type_def, column_def, index_def, small_def, typo_def;
static bf_registry *reg;
static PGconn *conn;

static int setup(void **state)
{
    (void)state;
    bt_db_create("preflight");
    conn = bt_connect();
    bt_exec(conn, "CREATE TABLE pf_items (id integer PRIMARY KEY, val integer, fixed integer);"
                  "INSERT INTO pf_items (id, val) SELECT g, g FROM generate_series(1, 200) g;"
                  "CREATE TABLE pf_events (ts timestamptz NOT NULL, eid bytea NOT NULL UNIQUE,"
                  " val integer, fixed integer);"
                  "INSERT INTO pf_events (ts, eid, val)"
                  " SELECT timestamptz '2024-01-01 00:00:00+00' + (g / 25) * interval '1 s',"
                  "  decode(md5(g::text), 'hex'), g FROM generate_series(1, 20000) g;"
                  "CREATE TABLE pf_small (a bigint NOT NULL, b bigint NOT NULL UNIQUE,"
                  " val integer, fixed integer);"
                  "INSERT INTO pf_small (a, b, val) SELECT g / 3, g, g"
                  " FROM generate_series(1, 100) g;"
                  "ANALYZE pf_items; ANALYZE pf_events; ANALYZE pf_small");
    type_def = def("pf.items.type_v1", "public.pf_items", "id", BF_KEY_BIGINT, NULL, 0,
                   "fixed = t.val * 2");
    column_def = def("pf.items.column_v1", "public.pf_items", "nope", BF_KEY_INTEGER, NULL, 0,
                     "fixed = t.val * 2");
    index_def = def("pf.events.index_v1", "public.pf_events", "ts", BF_KEY_TIMESTAMPTZ, "eid",
                    BF_KEY_BYTEA, "fixed = t.val * 2");
    small_def = def("pf.small.small_v1", "public.pf_small", "a", BF_KEY_BIGINT, "b", BF_KEY_BIGINT,
                    "fixed = t.val * 2");
    typo_def = def("pf.items.typo_v1", "public.pf_items", "id", BF_KEY_INTEGER, NULL, 0,
                   "fixd = t.val * 2");
    static const bf_definition *defs[5];
    defs[0] = &type_def;
    defs[1] = &column_def;
    defs[2] = &index_def;
    defs[3] = &small_def;
    defs[4] = &typo_def;
    reg = bt_registry(defs, 5);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    PQfinish(conn);
    bt_db_drop_registry(reg);
    return 0;
}

static bf_engine *engine(void)
{
    bf_engine *e = bt_engine(reg, "preflight-operator", 0);
    assert_int_equal(bf_register_all(e), BF_OK);
    return e;
}

/* Start refused with want, the row still pending and unchanged */
static void assert_start_refused(bf_engine *e, const char *id, bf_err want, const char *needle)
{
    assert_int_equal(bt_act(e, BF_ACTION_START, id), want);
    assert_non_null(strstr(bf_engine_diag(e), needle));
    bf_backfill row = bt_get(e, id);
    assert_int_equal(row.state, BF_STATE_PENDING);
    assert_int_equal(row.generation, 0);
}

static void test_key_type_and_column(void **state)
{
    (void)state;
    bf_engine *e = engine();
    char report[BF_DIAG_MAX];
    assert_int_equal(bf_preflight(e, "pf.items.type_v1", report, sizeof report), BF_ERR_DEFINITION);
    assert_non_null(strstr(report, "key column id is integer, the definition declares bigint"));
    assert_start_refused(e, "pf.items.type_v1", BF_ERR_DEFINITION, "declares bigint");

    assert_int_equal(bf_preflight(e, "pf.items.column_v1", report, sizeof report),
                     BF_ERR_DEFINITION);
    assert_non_null(strstr(report, "key column nope is not a column of public.pf_items"));
    assert_start_refused(e, "pf.items.column_v1", BF_ERR_DEFINITION, "nope");
    bf_engine_close(e);
}

static void test_index_in_key_order(void **state)
{
    (void)state;
    bf_engine *e = engine();
    char report[BF_DIAG_MAX];
    /* unique by eid alone: a unique key, but no index in (ts, eid) order */
    assert_int_equal(bf_preflight(e, "pf.events.index_v1", report, sizeof report),
                     BF_ERR_PREREQUISITE);
    assert_non_null(strstr(report, "no index serves the key (ts, eid) of public.pf_events"));
    assert_non_null(strstr(report, "CREATE INDEX CONCURRENTLY ON public.pf_events (ts, eid)"));
    assert_start_refused(e, "pf.events.index_v1", BF_ERR_PREREQUISITE, "CREATE INDEX");

    /* an index the other way round does not serve the order either */
    bt_exec(conn, "CREATE INDEX pf_events_eid_ts ON pf_events (eid, ts)");
    assert_int_equal(bf_preflight(e, "pf.events.index_v1", report, sizeof report),
                     BF_ERR_PREREQUISITE);
    bt_exec(conn, "CREATE INDEX pf_events_ts_eid ON pf_events (ts, eid)");
    assert_int_equal(bf_preflight(e, "pf.events.index_v1", report, sizeof report), BF_OK);
    printf("preflight: %s\n", report);
    assert_non_null(strstr(report, "index pf_events_ts_eid"));
    assert_non_null(strstr(report, "keyset: Index Only Scan using pf_events_ts_eid"));
    assert_non_null(strstr(report, "mutation: "));
    assert_null(strstr(report, "Seq Scan"));
    /* how much work, as the planner estimates it: all 20,000 rows need repair */
    assert_non_null(strstr(report, "about 20000 rows need repair (planner estimate)"));

    /* the small table: no index in (a, b) order, a scan of 100 rows is bounded */
    assert_int_equal(bf_preflight(e, "pf.small.small_v1", report, sizeof report), BF_OK);
    assert_non_null(strstr(report, "the table is small"));
    bf_engine_close(e);
}

static void test_plans_that_scan_the_table(void **state)
{
    (void)state;
    char *db = bt_text(conn, "SELECT current_database()");
    bt_exec(conn,
            "ALTER DATABASE \"%s\" SET enable_indexscan = off;"
            "ALTER DATABASE \"%s\" SET enable_indexonlyscan = off;"
            "ALTER DATABASE \"%s\" SET enable_bitmapscan = off",
            db, db, db);
    bf_engine *e = engine(); /* a session with the database's settings */
    char report[BF_DIAG_MAX];
    assert_int_equal(bf_preflight(e, "pf.events.index_v1", report, sizeof report),
                     BF_ERR_PREREQUISITE);
    printf("preflight: %s\n", report);
    assert_non_null(strstr(report, "plans the keyset of a batch at the first key as a Seq Scan"
                                   " of public.pf_events"));
    assert_start_refused(e, "pf.events.index_v1", BF_ERR_PREREQUISITE, "Seq Scan");
    /* a scan of the small table is bounded whatever the plan */
    assert_int_equal(bf_preflight(e, "pf.small.small_v1", report, sizeof report), BF_OK);
    bf_engine_close(e);

    bt_exec(conn, "ALTER DATABASE \"%s\" RESET ALL", db);
    free(db);
    e = engine();
    assert_int_equal(bf_preflight(e, "pf.events.index_v1", report, sizeof report), BF_OK);
    assert_int_equal(bt_act(e, BF_ACTION_START, "pf.events.index_v1"), BF_OK);
    assert_int_equal(bt_get(e, "pf.events.index_v1").state, BF_STATE_RUNNING);
    bf_engine_close(e);
}

static void test_update_set_that_does_not_plan(void **state)
{
    (void)state;
    bf_engine *e = engine();
    char report[BF_DIAG_MAX];
    assert_int_equal(bf_preflight(e, "pf.items.typo_v1", report, sizeof report),
                     BF_ERR_PREREQUISITE);
    assert_non_null(strstr(report, "undefined column"));
    assert_non_null(strstr(report, "42703"));
    /* the condition and the column are named (identifiers, not row data), no query text */
    assert_non_null(strstr(report, "undefined_column 42703, column fixd, table pf_items"));
    assert_null(strstr(report, "UPDATE"));
    assert_null(strstr(report, "val * 2"));
    assert_start_refused(e, "pf.items.typo_v1", BF_ERR_PREREQUISITE, "42703");
    assert_int_equal(bt_int(conn, "SELECT count(*) FROM pf_items WHERE fixed IS NOT NULL"), 0);
    bf_engine_close(e);
}

static void test_changed_definition_under_the_same_id(void **state)
{
    (void)state;
    bt_exec(conn, "CREATE TABLE pf_changed (id bigint PRIMARY KEY, val integer, fixed integer);"
                  "INSERT INTO pf_changed (id, val) SELECT g, g FROM generate_series(1, 50) g");
    bf_definition v1 = def("pf.changed_v1", "public.pf_changed", "id", BF_KEY_BIGINT, NULL, 0,
                           "fixed = t.val * 2");
    bf_definition v1_edited = v1;
    v1_edited.update_set = "fixed = t.val * 3"; /* material: a new stable ID was due */
    bf_definition v1_described = v1;
    v1_described.description = "the same repair, better described";
    const bf_definition *d1[] = {&v1}, *d2[] = {&v1_edited}, *d3[] = {&v1_described};
    bf_registry *r1 = bt_registry(d1, 1), *r2 = bt_registry(d2, 1), *r3 = bt_registry(d3, 1);
    bf_engine *e1 = bt_engine(r1, "pf-old", 0);
    assert_int_equal(bf_register_all(e1), BF_OK);
    /* still pending: a Start from a process holding the changed definition is refused too
     * (actions.c action_start compares the digest of the row it locked) */
    bf_engine *e2s = bt_engine(r2, "pf-new-start", 0);
    assert_int_equal(bt_act(e2s, BF_ACTION_START, v1.id), BF_ERR_INCOMPATIBLE);
    assert_non_null(strstr(bf_engine_diag(e2s), "materially different definition"));
    assert_int_equal(bt_get(e1, v1.id).state, BF_STATE_PENDING);
    bf_engine_close(e2s);
    assert_int_equal(bt_act(e1, BF_ACTION_START, v1.id), BF_OK);
    bf_backfill before = bt_get(e1, v1.id);

    bf_engine *e2 = bt_engine(r2, "pf-new", 0);
    assert_int_equal(bf_register_all(e2), BF_ERR_INCOMPATIBLE);
    assert_non_null(strstr(bf_engine_diag(e2), "materially different definition"));
    char report[BF_DIAG_MAX];
    assert_int_equal(bf_preflight(e2, v1.id, report, sizeof report), BF_ERR_INCOMPATIBLE);
    assert_non_null(strstr(report, "needs a new stable ID"));
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, e2, NULL), BF_OK);
    assert_int_equal(bf_worker_claim(w, v1.id, NULL), BF_ERR_NO_WORK);
    bf_worker_free(w);
    bf_actor who = {.actor = "test-operator", .authority = "test", .request_id = "pf-val-1"};
    bf_action_result res;
    assert_int_equal(bf_validate(e2, v1.id, &who, &res), BF_ERR_INCOMPATIBLE);
    bf_backfill after = bt_get(e1, v1.id);
    assert_int_equal(after.generation, before.generation);
    assert_int_equal(after.state, BF_STATE_RUNNING);
    assert_int_equal(bt_int(conn, "SELECT count(*) FROM pf_changed WHERE fixed IS NOT NULL"), 0);

    /* metadata is not material: it registers, and its description wins */
    bf_engine *e3 = bt_engine(r3, "pf-described", 0);
    assert_int_equal(bf_register_all(e3), BF_OK);
    assert_string_equal(bt_get(e3, v1.id).description, "the same repair, better described");
    bf_engine_close(e3);
    bf_engine_close(e2);
    bf_engine_close(e1);
    bf_registry_free(r3);
    bf_registry_free(r2);
    bf_registry_free(r1);
}

/* buzz-backfilld preflight [ID]... on the test database: its output and exit status */
static int preflight_command(const char *ids, char *out, size_t cap)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s --database-url '%s' --modules %s --log-level error preflight %s",
             BUZZ_BACKFILLD_PATH, bt_db_conninfo(), BUZZ_DEMO_MODULE_PATH, ids);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    int status = pclose(f);
    printf("%s", out);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void test_preflight_command(void **state)
{
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/examples/demo/schema.sql", BUZZ_SOURCE_DIR);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char schema[65536];
    size_t n = fread(schema, 1, sizeof schema - 1, f);
    schema[n] = '\0';
    fclose(f);
    bt_exec(conn, "%s", schema);
    bt_exec(conn, "INSERT INTO demo.events (event_id, pubkey, created_at, kind, content, tags)"
                  " SELECT sha256(convert_to('e' || g, 'UTF8')), sha256(convert_to('p', 'UTF8')),"
                  "  timestamptz '2024-01-01' + g * interval '1 s', 1, 'x', '[]'"
                  " FROM generate_series(1, 500) g; ANALYZE demo.events");
    static char out[8192];
    assert_int_equal(preflight_command("", out, sizeof out), 0);
    assert_non_null(strstr(out, "ok    demo.events.content_len_v1: index events_pkey"));
    assert_non_null(strstr(out, "ok    demo.events.pubkey_hex_v1: index"));
    assert_non_null(strstr(out, "ok    demo.events.tag_count_v1: "));

    bt_exec(conn, "ALTER TABLE demo.events DROP CONSTRAINT events_created_at_event_id_key");
    assert_int_equal(preflight_command("demo.events.pubkey_hex_v1", out, sizeof out), 1);
    assert_non_null(strstr(out, "FAIL  demo.events.pubkey_hex_v1: definition error: ordering key"
                                " is not unique"));
    assert_null(strstr(out, "content_len_v1")); /* only the ID asked for */
    assert_int_equal(preflight_command("demo.events.nope_v1", out, sizeof out), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_type_and_column),
        cmocka_unit_test(test_index_in_key_order),
        cmocka_unit_test(test_plans_that_scan_the_table),
        cmocka_unit_test(test_update_set_that_does_not_plan),
        cmocka_unit_test(test_changed_definition_under_the_same_id),
        cmocka_unit_test(test_preflight_command),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
