/*
 * test_error_names.c - errors a definition causes name their cause, still redacted (issue 17,
 * "errors that name the cause"), through the engine API against real PostgreSQL. One case per
 * error family, each a first batch that fails on a row holding a secret value:
 *
 *   check violation      23514  check_violation, the table and the constraint
 *   numeric overflow     22003  numeric_value_out_of_range
 *   unique violation     23505  unique_violation, the table and the constraint
 *   undefined column     42703  undefined_column and the column (dropped after the start)
 *   trigger RAISE        P0001  raise_exception and the raising function, never its message
 *                               (which here quotes the row's secret value)
 *
 * For each: the backfill's error_detail (what Admin.Get and buzzctl show), every audit outcome
 * and every engine log line hold the condition's name and SQLSTATE and the identifiers, and
 * none holds the row's secret value, the server's message text or the query.
 *
 * Guards proved: engine.c bf__pg_error's condition name and objects (removing them fails every
 * case's "names" assertions), engine_message_may_quote_data's P0 class (without it the trigger's
 * message, with the secret, reaches the log), engine_error_objects' reading of the function from
 * a PL/pgSQL context and of the column from a 42703 message.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bt.h"

#define SECRET "rowsecret-7f3a9c"

typedef struct family {
    const char *id, *table, *ddl, *update_set;
    const char *names[3]; /* what the diagnostic must name */
} family;

/* each table: id bigint PK, val integer, secret text (the row data that must not leak) */
#define TABLE(t, extra)                                                                            \
    "CREATE TABLE " t " (id bigint PRIMARY KEY, val integer NOT NULL, secret text NOT NULL" extra  \
    ");"                                                                                           \
    "INSERT INTO " t " (id, val, secret) SELECT g, g, '" SECRET "' FROM generate_series(1, 10) g;"

static const family families[] = {
    {"en.check_v1",
     "public.en_check",
     TABLE("public.en_check", ", fixed integer CONSTRAINT en_check_small CHECK (fixed < 5)"),
     "fixed = t.val",
     {"check_violation 23514", "table public.en_check", "constraint en_check_small"}},
    {"en.overflow_v1",
     "public.en_overflow",
     TABLE("public.en_overflow", ", fixed smallint"),
     "fixed = t.val * 10000",
     {"numeric_value_out_of_range 22003", NULL, NULL}},
    {"en.unique_v1",
     "public.en_unique",
     TABLE("public.en_unique", ", fixed integer CONSTRAINT en_unique_fixed UNIQUE"),
     "fixed = 7",
     {"unique_violation 23505", "table public.en_unique", "constraint en_unique_fixed"}},
    {"en.column_v1",
     "public.en_column",
     TABLE("public.en_column", ", fixed integer, extra integer"),
     "fixed = t.val + t.extra",
     {"undefined_column 42703", "column t.extra", NULL}},
    {"en.raise_v1",
     "public.en_raise",
     TABLE("public.en_raise",
           ", fixed integer") "CREATE FUNCTION public.en_refuse() RETURNS trigger"
                              " LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION"
                              " 'refused row %', NEW.secret; END $$;"
                              "CREATE TRIGGER en_refuse BEFORE UPDATE ON"
                              " public.en_raise FOR EACH ROW EXECUTE FUNCTION"
                              " public.en_refuse();",
     "fixed = t.val",
     {"raise_exception P0001", "function en_refuse", NULL}},
};
#define NFAM (sizeof families / sizeof families[0])

static bf_definition defs[NFAM];

static void assert_named_and_clean(const char *where, const char *text, const family *f)
{
    for (int i = 0; i < 3; i++)
        if (f->names[i] != NULL && strstr(text, f->names[i]) == NULL)
            fail_msg("%s: %s: \"%s\" does not name \"%s\"", f->id, where, text, f->names[i]);
    static const char *const forbidden[] = {SECRET,   "refused row", "UPDATE",
                                            "SELECT", "Failing row", "t.val *"};
    for (size_t i = 0; i < sizeof forbidden / sizeof forbidden[0]; i++)
        if (strstr(text, forbidden[i]) != NULL)
            fail_msg("%s: %s: \"%s\" contains \"%s\"", f->id, where, text, forbidden[i]);
}

static void test_each_family_names_its_cause(void **state)
{
    (void)state;
    bt_db_create("error_names");
    PGconn *c = bt_connect();
    const bf_definition *dp[NFAM];
    for (size_t i = 0; i < NFAM; i++) {
        bt_exec(c, "%s", families[i].ddl);
        defs[i] = (bf_definition){.id = families[i].id,
                                  .table = families[i].table,
                                  .key = {{"id", BF_KEY_BIGINT}},
                                  .nkey = 1,
                                  .batch_size = 10,
                                  .needs_repair = "t.fixed IS NULL",
                                  .update_set = families[i].update_set,
                                  .retry = {.max_attempts = 1}};
        dp[i] = &defs[i];
    }
    bf_registry *reg = bt_registry(dp, NFAM);
    bf_engine *e = bt_capture_engine(reg, "error-names", 0);
    assert_int_equal(bf_register_all(e), BF_OK);

    for (size_t i = 0; i < NFAM; i++) {
        const family *f = &families[i];
        assert_int_equal(bt_act(e, BF_ACTION_START, f->id), BF_OK);
        if (strcmp(f->id, "en.column_v1") == 0) /* gone after the start's preflight */
            bt_exec(c, "ALTER TABLE public.en_column DROP COLUMN extra");
        bf_worker *w = bt_claimed_worker(e, f->id);
        bf_step_info info;
        assert_int_equal(bf_worker_step(w, &info), BF_OK);
        if (info.step != BF_STEP_BLOCKED && info.step != BF_STEP_FAILED)
            fail_msg("%s: step %s (%s), want blocked or failed", f->id, bf_step_name(info.step),
                     info.detail);
        bf_backfill row = bt_get(e, f->id);
        printf("%s: %s: %s\n", f->id, bf_state_name(row.state), row.error_detail);
        assert_named_and_clean("error_detail", row.error_detail, f);
        assert_named_and_clean("step detail", info.detail, f);
        bf_audit_entry audit[16];
        int n = 0;
        assert_int_equal(bf_audit_list(e, f->id, 0, audit, 16, &n), BF_OK);
        for (int k = 0; k < n; k++) {
            static const family none = {0};
            assert_named_and_clean("audit", audit[k].outcome, &none);
        }
        bf_worker_free(w);
        assert_int_equal(bt_int(c, "SELECT count(*) FROM %s WHERE fixed IS NOT NULL", f->table), 0);
    }
    /* the log: every condition with its objects, and no secret, message or query */
    char *log = bt_log_text();
    static const family none = {0};
    assert_named_and_clean("log", log, &none);
    free(log);
    assert_true(bt_log_count("sqlstate=23514 (check_violation)") > 0);
    assert_true(bt_log_count("constraint=en_check_small") > 0);
    assert_true(bt_log_count("sqlstate=P0001 (raise_exception): raised by a trigger or function") >
                0);
    assert_true(bt_log_count("function=en_refuse") > 0);
    assert_true(bt_log_count("sqlstate=42703 (undefined_column)") > 0);
    assert_true(bt_log_count("column=t.extra") > 0);

    bf_engine_close(e);
    PQfinish(c);
    bt_db_drop_registry(reg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_family_names_its_cause),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
