/*
 * test_old_writer.c - the old-writer watchdog (issue 28, docs/definitions.md "Old writers")
 * through the engine API against real PostgreSQL. Writers are plain libpq sessions, each with
 * its own application_name, writing between worker steps (the steps order them; no sleeps):
 *
 *   - two_writers: while the backfill runs, relay-2.0 writes the new shape (5 inserts, 3
 *     updates) and relay-1.3 the old one (7 inserts above the bound, 4 updates of rows the
 *     batches have not reached, all with the marker value 987654). bf_get attributes exactly 11
 *     rows to relay-1.3 (its address and role), never relay-2.0; one watch.old_writer record
 *     and one audit row name it; the marker appears in none of them; the backfill completes and
 *     its trigger and functions are gone;
 *   - validation: relay-1.3 undoes 3 repaired rows after the batches: validation fails on them
 *     and the backfill enters blocked, naming the writer, instead of failed;
 *   - block: with watch_block, the first step after an old write enters blocked with the
 *     writer's name; retried without new old writes it goes on, one more old write blocks it
 *     again;
 *   - heal: relay-1.3's rows arrive repaired (counted as healed), validation succeeds and every
 *     row is right; heal is refused at start, the row left pending, for a callback, a subquery
 *     and a volatile function;
 *   - bare_columns: a predicate naming bare columns is watched through its function; watch off
 *     removes trigger and function, keeps the counts, and is audited (twice: removed, then
 *     nothing to remove);
 *   - sessions: two sessions of relay-1.3, one holding its transaction open after a violating
 *     write: the other's violating write does not wait on it; one writer, 3 rows, logged and
 *     audited once;
 *   - probe (the preflight's gate): a probe of a never-started definition reports relay-1.3's 2
 *     rows and "hold the start", leaves no trigger or count and the row pending; once drained a
 *     new probe reports no old writer.
 *
 * Guards proved (each seen failing with it removed):
 *   - worker.c step_validating's watch attribution (cause = BF_ERR_PREREQUISITE): without it
 *     "validation" sees BF_STEP_FAILED;
 *   - worker.c step_watch's block (worker_fail with "old_writer"): without it "block" sees
 *     BF_STEP_BATCH;
 *   - worker.c worker_complete's bf__watch_remove: without it "two_writers" finds the trigger;
 *   - migrate.c version 10's backend_pid in old_writer's key: without it "sessions" waits on
 *     the open transaction's counter row until its statement_timeout;
 *   - watch.c watch_trigger's WHEN clause of the heal trigger (needs_repair on NEW): made always
 *     true, "heal" counts the batches' own writes too (107 rows, not 7);
 *   - watch_heal.c's subquery refusal: without it "heal" sees the subquery definition start;
 *   - watch.c watch_predicate's fallback to a function of the row: without it "bare_columns"
 *     cannot start (BF_ERR_DEFINITION);
 *   - watch_report.c bf_watch_probe_finish's bf__watch_drop: without it "probe" finds the
 *     probe's trigger left on the table;
 *   - watch.c's "record watch" setting the row's watched flag, which tells the read model to
 *     read the watch (backfill.c watch_send): without it "two_writers" and "validation" read
 *     the backfill as not watched;
 *   - migrate.c version 11's UPDATE of the rows that already have a watch row: without it
 *     "two_writers", which drops the column and migrates again, reads its watch as gone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bt.h"

#define ROWS   300
#define MARKER "987654"

static bf_err count_mutate(bf_txn *txn, void *arg)
{
    (void)arg;
    return bf_txn_exec(txn,
                       "UPDATE public.ow_cb t SET fixed = t.val * 2 FROM bf_batch b"
                       " WHERE t.id = b.id AND t.fixed IS NULL",
                       0, NULL, NULL);
}

#define ITEMS_DEF(name, tbl, mode)                                                                 \
    static const bf_definition name = {                                                            \
        .id = "ow." #name "_v1",                                                                   \
        .table = tbl,                                                                              \
        .key = {{"id", BF_KEY_BIGINT}},                                                            \
        .nkey = 1,                                                                                 \
        .batch_size = 100,                                                                         \
        .needs_repair = "t.fixed IS NULL",                                                         \
        .update_set = "fixed = t.val * 2",                                                         \
        .postcondition = "t.fixed = t.val * 2",                                                    \
        .watch_writers = mode,                                                                     \
    }

ITEMS_DEF(watched, "public.ow_watched", BF_WATCH_ON);
ITEMS_DEF(validated, "public.ow_validated", BF_WATCH_ON);
ITEMS_DEF(blocking, "public.ow_blocking", BF_WATCH_ON);
ITEMS_DEF(healed, "public.ow_healed", BF_WATCH_HEAL);

/* bare column names: the predicate cannot go into the WHEN clause as NEW.column, so the watch
 * reads the row through its predicate function */
static const bf_definition bare = {
    .id = "ow.bare_v1",
    .table = "public.ow_bare",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 100,
    .needs_repair = "fixed IS NULL",
    .update_set = "fixed = val * 2",
    .postcondition = "fixed = val * 2",
    .watch_writers = BF_WATCH_ON,
};
ITEMS_DEF(sessions, "public.ow_sessions", BF_WATCH_ON);
/* never started: the preflight's probe watches it */
ITEMS_DEF(probed, "public.ow_probed", BF_WATCH_OFF);

static const bf_definition heal_subquery = {
    .id = "ow.heal_subquery_v1",
    .table = "public.ow_refused",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 100,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = (SELECT max(val) FROM public.ow_refused)",
    .watch_writers = BF_WATCH_HEAL,
};
static const bf_definition heal_volatile = {
    .id = "ow.heal_volatile_v1",
    .table = "public.ow_refused",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 100,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = (random() * 10)::integer",
    .watch_writers = BF_WATCH_HEAL,
};
static const bf_definition heal_callback = {
    .id = "ow.heal_callback_v1",
    .table = "public.ow_cb",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 100,
    .mutate = count_mutate,
    .postcondition = "t.fixed = t.val * 2",
    .watch_writers = BF_WATCH_HEAL,
};

static PGconn *conn;
static bf_registry *reg;

/* the engine's log: watch.old_writer records and every message, for the marker check */
static int old_writer_events;
static char log_text[65536];
static size_t log_len;

static void capture(void *arg, const bf_log_record *rec)
{
    (void)arg;
    if (rec->event == BF_EV_OLD_WRITER)
        old_writer_events++;
    size_t n = strlen(rec->msg);
    if (log_len + n + 2 < sizeof log_text) {
        memcpy(log_text + log_len, rec->msg, n);
        log_len += n;
        log_text[log_len++] = '\n';
        log_text[log_len] = '\0';
    }
}

static bf_engine *engine(bool block)
{
    bf_config cfg = {.conninfo = bt_db_conninfo(),
                     .owner = "ow-worker",
                     .lease_ms = 30000,
                     .step_batches = 1,
                     .log = capture,
                     .watch_block = block};
    bf_engine *e = NULL;
    assert_int_equal(bf_engine_open(&e, &cfg, reg), BF_OK);
    assert_int_equal(bf_migrate(e), BF_OK);
    assert_int_equal(bf_register_all(e), BF_OK);
    return e;
}

static PGconn *writer(const char *application)
{
    PGconn *c = bt_connect();
    bt_exec(c, "SET application_name = '%s'", application);
    return c;
}

static int setup(void **state)
{
    (void)state;
    bt_db_create("old_writer");
    conn = bt_connect();
    bt_make_items(conn, "public.ow_watched", ROWS);
    bt_make_items(conn, "public.ow_validated", ROWS);
    bt_make_items(conn, "public.ow_blocking", ROWS);
    bt_make_items(conn, "public.ow_healed", ROWS);
    bt_make_items(conn, "public.ow_refused", ROWS);
    bt_make_items(conn, "public.ow_cb", ROWS);
    bt_make_items(conn, "public.ow_bare", ROWS);
    bt_make_items(conn, "public.ow_probed", ROWS);
    bt_make_items(conn, "public.ow_sessions", ROWS);
    const bf_definition *defs[] = {&watched,       &validated,     &blocking,      &healed,
                                   &heal_subquery, &heal_volatile, &heal_callback, &bare,
                                   &probed,        &sessions};
    reg = bt_registry(defs, sizeof defs / sizeof defs[0]);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    PQfinish(conn);
    bt_db_drop_registry(reg);
    return 0;
}

static long long triggers(const char *table)
{
    return bt_int(conn,
                  "SELECT count(*) FROM pg_trigger WHERE tgrelid = '%s'::regclass"
                  " AND NOT tgisinternal",
                  table);
}

static void test_two_writers(void **state)
{
    (void)state;
    bf_engine *e = engine(false);
    old_writer_events = 0;
    log_len = 0;
    assert_int_equal(bt_act(e, BF_ACTION_START, watched.id), BF_OK);
    assert_int_equal(triggers("public.ow_watched"), 1);
    /* t.column fragments go into the WHEN clause itself: no predicate function */
    assert_int_equal(bt_int(conn, "SELECT count(*) FROM pg_proc WHERE proname LIKE 'bfw\\_%%'"), 0);
    bf_worker *w = bt_claimed_worker(e, watched.id);
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK); /* ids 1..100 repaired */
    assert_int_equal(info.step, BF_STEP_BATCH);

    PGconn *fresh = writer("relay-2.0");
    PGconn *old = writer("relay-1.3");
    bt_exec(fresh, "INSERT INTO public.ow_watched (id, val, fixed)"
                   " SELECT g, 7, 14 FROM generate_series(2001, 2005) g");
    bt_exec(fresh, "UPDATE public.ow_watched SET val = 8, fixed = 16 WHERE id IN (10, 20, 30)");
    bt_exec(old, "INSERT INTO public.ow_watched (id, val)"
                 " SELECT g, " MARKER " FROM generate_series(1001, 1007) g");
    bt_exec(old, "UPDATE public.ow_watched SET val = " MARKER ", fixed = NULL"
                 " WHERE id BETWEEN 250 AND 253");

    /* a database from before schema version 11 (this watch recorded without the row's flag):
     * the migration sets the flag of every row that has a watch row */
    bt_exec(conn, "ALTER TABLE buzz_backfill.backfill DROP COLUMN watched;"
                  "DELETE FROM buzz_backfill.schema_migration WHERE version = 11");
    assert_int_equal(bf_migrate(e), BF_OK);
    assert_int_equal(bt_int(conn, "SELECT count(*) FROM buzz_backfill.backfill WHERE watched"), 1);

    bf_backfill row = bt_get(e, watched.id);
    const bf_old_writers *ow = &row.old_writers;
    assert_true(ow->watching);
    assert_string_equal(ow->mode, "on");
    assert_int_equal(ow->rows, 11);
    assert_int_equal(ow->writers, 1);
    assert_int_equal(ow->healed, 0);
    assert_string_equal(ow->application, "relay-1.3");
    char *role = bt_text(conn, "SELECT session_user");
    char *addr = bt_text(conn, "SELECT coalesce(host(inet_client_addr()), 'local')");
    assert_string_equal(ow->role, role);
    assert_string_equal(ow->address, addr);
    assert_int_equal(ow->top_rows, 11);
    assert_true(ow->first_seen > 0 && ow->last_seen >= ow->first_seen);

    assert_int_equal(bt_step_until_not_batch(w, 20), BF_STEP_VALIDATING);
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_COMPLETED);
    row = bt_get(e, watched.id);
    assert_int_equal(row.state, BF_STATE_COMPLETED);
    assert_false(ow->watching); /* removed with the completion */
    assert_int_equal(ow->rows, 11);
    assert_int_equal(triggers("public.ow_watched"), 0);
    assert_int_equal(bt_int(conn, "SELECT count(*) FROM pg_proc WHERE proname LIKE 'bfw\\_%%'"), 0);

    /* once per writer: one record, one audit row, naming relay-1.3 and never relay-2.0 */
    assert_int_equal(old_writer_events, 1);
    assert_non_null(strstr(log_text, "relay-1.3"));
    assert_null(strstr(log_text, "relay-2.0"));
    assert_null(strstr(log_text, MARKER));
    assert_int_equal(bt_int(conn,
                            "SELECT count(*) FROM buzz_backfill.audit"
                            " WHERE backfill_id = '%s' AND action = 'old_writer'"
                            " AND outcome LIKE '%%relay-1.3%%'",
                            watched.id),
                     1);
    assert_int_equal(bt_int(conn, "SELECT count(*) FROM buzz_backfill.audit"
                                  " WHERE outcome LIKE '%%" MARKER "%%'"
                                  " OR outcome LIKE '%%relay-2.0%%'"),
                     0);
    assert_int_equal(bt_int(conn, "SELECT count(*) FROM buzz_backfill.old_writer"
                                  " WHERE application_name = 'relay-2.0'"),
                     0);
    assert_null(strstr(row.error_detail, MARKER));
    free(role);
    free(addr);
    PQfinish(fresh);
    PQfinish(old);
    bf_worker_free(w);
    bf_engine_close(e);
}

static void test_validation(void **state)
{
    (void)state;
    bf_engine *e = engine(false);
    assert_int_equal(bt_act(e, BF_ACTION_START, validated.id), BF_OK);
    bf_worker *w = bt_claimed_worker(e, validated.id);
    assert_int_equal(bt_step_until_not_batch(w, 20), BF_STEP_VALIDATING);
    PGconn *old = writer("relay-1.3");
    bt_exec(old, "UPDATE public.ow_validated SET fixed = NULL WHERE id IN (5, 6, 7)");
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    printf("validation: %s: %s\n", bf_step_name(info.step), info.detail);
    assert_int_equal(info.step, BF_STEP_BLOCKED);
    bf_backfill row = bt_get(e, validated.id);
    assert_int_equal(row.state, BF_STATE_BLOCKED);
    assert_non_null(strstr(row.error_detail, "old writer: 3 rows"));
    assert_non_null(strstr(row.error_detail, "relay-1.3"));
    assert_non_null(strstr(row.error_detail, "new stable ID"));
    assert_int_equal(row.old_writers.rows, 3);
    PQfinish(old);
    bf_worker_free(w);
    bf_engine_close(e);
}

static void test_block(void **state)
{
    (void)state;
    bf_engine *e = engine(true);
    assert_int_equal(bt_act(e, BF_ACTION_START, blocking.id), BF_OK);
    bf_worker *w = bt_claimed_worker(e, blocking.id);
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH);
    PGconn *old = writer("relay-1.3");
    bt_exec(old, "INSERT INTO public.ow_blocking (id, val) VALUES (5001, 1)");
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    printf("block: %s: %s\n", bf_step_name(info.step), info.detail);
    assert_int_equal(info.step, BF_STEP_BLOCKED);
    bf_backfill row = bt_get(e, blocking.id);
    assert_int_equal(row.state, BF_STATE_BLOCKED);
    assert_non_null(strstr(row.error_detail, "old writer: 1 row since"));
    assert_non_null(strstr(row.error_detail, "relay-1.3"));
    bf_worker_free(w);

    /* the operator drained it and retries: the rows already answered do not block again */
    assert_int_equal(bt_act(e, BF_ACTION_RETRY, blocking.id), BF_OK);
    w = bt_claimed_worker(e, blocking.id);
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BATCH);
    bf_worker_free(w);
    /* it was not drained after all: the next old write blocks it again */
    bt_exec(old, "INSERT INTO public.ow_blocking (id, val) VALUES (5002, 1)");
    w = bt_claimed_worker(e, blocking.id);
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_BLOCKED);
    PQfinish(old);
    bf_worker_free(w);
    bf_engine_close(e);
}

static void test_heal(void **state)
{
    (void)state;
    bf_engine *e = engine(false);
    assert_int_equal(bt_act(e, BF_ACTION_START, healed.id), BF_OK);
    bf_worker *w = bt_claimed_worker(e, healed.id);
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    PGconn *old = writer("relay-1.3");
    bt_exec(old, "INSERT INTO public.ow_healed (id, val) SELECT g, 21 FROM"
                 " generate_series(1001, 1004) g");
    bt_exec(old, "UPDATE public.ow_healed SET val = 5, fixed = NULL WHERE id IN (1, 2, 250)");
    /* arrived repaired, under the old writer's name */
    assert_int_equal(bt_int(conn, "SELECT count(*) FROM public.ow_healed WHERE id IN"
                                  " (1, 2, 250, 1001, 1002, 1003, 1004) AND fixed = val * 2"),
                     7);
    bf_backfill row = bt_get(e, healed.id);
    assert_string_equal(row.old_writers.mode, "heal");
    assert_int_equal(row.old_writers.rows, 7);
    assert_int_equal(row.old_writers.healed, 7);
    assert_string_equal(row.old_writers.application, "relay-1.3");
    assert_int_equal(bt_step_until_not_batch(w, 20), BF_STEP_VALIDATING);
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_COMPLETED);
    /* the batches' own writes were never counted: still the old writer's 7 */
    row = bt_get(e, healed.id);
    assert_int_equal(row.old_writers.rows, 7);
    assert_int_equal(bt_int(conn, "SELECT count(*) FROM public.ow_healed"
                                  " WHERE fixed IS DISTINCT FROM val * 2"),
                     0);
    assert_int_equal(triggers("public.ow_healed"), 0);
    PQfinish(old);
    bf_worker_free(w);

    /* what heal cannot serve is refused at start, the row left pending */
    const bf_definition *refused[] = {&heal_subquery, &heal_volatile, &heal_callback};
    const char *why[] = {"subquery", "random()", "callback"};
    for (size_t i = 0; i < 3; i++) {
        bf_action_result res;
        assert_int_equal(bf_action_apply(e, BF_ACTION_START, refused[i]->id, NULL, &res),
                         BF_ERR_DEFINITION);
        printf("refused: %s\n", bf_engine_diag(e));
        assert_non_null(strstr(bf_engine_diag(e), "watch_writers = heal cannot serve"));
        assert_non_null(strstr(bf_engine_diag(e), why[i]));
        assert_int_equal(bt_get(e, refused[i]->id).state, BF_STATE_PENDING);
    }
    assert_int_equal(triggers("public.ow_refused"), 0);
    assert_int_equal(triggers("public.ow_cb"), 0);
    bf_engine_close(e);
}

/* List reads the watches of its page in one statement (bf__watch_read()):
 * every row must carry its own counts, the ones Get reads; returns how many rows have any. */
static int expect_list_counts_match_get(bf_engine *e)
{
    bf_backfill *rows = calloc(100, sizeof *rows);
    assert_non_null(rows);
    int n = 0, with_counts = 0;
    assert_int_equal(bf_list(e, 0, NULL, rows, 100, &n), BF_OK);
    for (int i = 0; i < n; i++) {
        bf_backfill one = bt_get(e, rows[i].id);
        assert_int_equal(rows[i].old_writers.watching, one.old_writers.watching);
        assert_int_equal(rows[i].old_writers.rows, one.old_writers.rows);
        assert_int_equal(rows[i].old_writers.healed, one.old_writers.healed);
        assert_int_equal(rows[i].old_writers.writers, one.old_writers.writers);
        assert_string_equal(rows[i].old_writers.application, one.old_writers.application);
        assert_int_equal(rows[i].old_writers.top_rows, one.old_writers.top_rows);
        assert_int_equal(rows[i].old_writers.last_seen, one.old_writers.last_seen);
        with_counts += rows[i].old_writers.rows > 0;
    }
    free(rows);
    return with_counts;
}

static void test_bare_columns(void **state)
{
    (void)state;
    bf_engine *e = engine(false);
    assert_int_equal(bt_act(e, BF_ACTION_START, bare.id), BF_OK);
    assert_int_equal(triggers("public.ow_bare"), 1);
    /* the fallback: the predicate as a function of the row */
    assert_int_equal(
        bt_int(conn, "SELECT count(*) FROM pg_proc WHERE proname LIKE 'bfw\\_ok\\_%%'"), 1);
    PGconn *old = writer("relay-1.3");
    PGconn *fresh = writer("relay-2.0");
    bt_exec(old, "INSERT INTO public.ow_bare (id, val) VALUES (4001, 1), (4002, 2)");
    bt_exec(fresh, "INSERT INTO public.ow_bare (id, val, fixed) VALUES (4003, 3, 6)");
    bf_backfill row = bt_get(e, bare.id);
    assert_int_equal(row.old_writers.rows, 2);
    assert_string_equal(row.old_writers.application, "relay-1.3");
    bool removed = false;
    assert_int_equal(bf_watch_off(e, bare.id, NULL, &removed), BF_OK);
    assert_true(removed);
    assert_int_equal(triggers("public.ow_bare"), 0);
    assert_int_equal(bt_int(conn, "SELECT count(*) FROM pg_proc WHERE proname LIKE 'bfw\\_%%'"), 0);
    assert_false(bt_get(e, bare.id).old_writers.watching);
    assert_int_equal(bt_get(e, bare.id).old_writers.rows, 2); /* the counts stay */
    assert_true(expect_list_counts_match_get(e) >= 2); /* several rows with counts of their own */
    assert_int_equal(bf_watch_off(e, bare.id, NULL, &removed), BF_OK);
    assert_false(removed);
    assert_int_equal(bt_int(conn,
                            "SELECT count(*) FROM buzz_backfill.audit WHERE backfill_id"
                            " = '%s' AND action = 'watch_off'",
                            bare.id),
                     2);
    PQfinish(old);
    PQfinish(fresh);
    bf_engine_close(e);
}

/* the preflight's probe: watches a table without starting anything, reports the old writer,
 * leaves nothing behind */
static void test_probe(void **state)
{
    (void)state;
    bf_engine *e = engine(false);
    assert_int_equal(bf_watch_probe_start(e, probed.id), BF_OK);
    assert_int_equal(triggers("public.ow_probed"), 1);
    PGconn *old = writer("relay-1.3");
    PGconn *fresh = writer("relay-2.0");
    bt_exec(old, "UPDATE public.ow_probed SET val = " MARKER " WHERE id IN (1, 2)");
    bt_exec(fresh, "UPDATE public.ow_probed SET fixed = val * 2 WHERE id IN (3, 4)");
    bf_old_writers ow;
    char report[BF_DIAG_MAX];
    assert_int_equal(bf_watch_probe_finish(e, probed.id, &ow, report, sizeof report), BF_OK);
    printf("probe: %s\n", report);
    assert_int_equal(ow.rows, 2);
    assert_int_equal(ow.writers, 1);
    assert_string_equal(ow.application, "relay-1.3");
    assert_non_null(strstr(report, "old writer: 2 rows since"));
    assert_non_null(strstr(report, "hold the start"));
    assert_null(strstr(report, MARKER));
    assert_int_equal(triggers("public.ow_probed"), 0);
    assert_int_equal(bt_int(conn, "SELECT count(*) FROM buzz_backfill.old_writer"
                                  " WHERE backfill_id LIKE 'probe:%%'"),
                     0);
    assert_int_equal(bt_get(e, probed.id).state, BF_STATE_PENDING);
    /* drained: a new probe sees nothing */
    assert_int_equal(bf_watch_probe_start(e, probed.id), BF_OK);
    bt_exec(fresh, "UPDATE public.ow_probed SET fixed = val * 2 WHERE id IN (5, 6)");
    assert_int_equal(bf_watch_probe_finish(e, probed.id, &ow, report, sizeof report), BF_OK);
    assert_int_equal(ow.rows, 0);
    assert_non_null(strstr(report, "no old writer"));
    PQfinish(old);
    PQfinish(fresh);
    bf_engine_close(e);
}

/* two sessions of one old writer: neither waits on the other's count (each session counts in
 * a row of its own), and they are one writer, logged once, their rows summed */
static void test_sessions(void **state)
{
    (void)state;
    bf_engine *e = engine(false);
    old_writer_events = 0;
    assert_int_equal(bt_act(e, BF_ACTION_START, sessions.id), BF_OK);
    PGconn *a = writer("relay-1.3");
    PGconn *b = writer("relay-1.3");
    /* a holds its transaction open after a violating write; b's violating write must not wait
     * on it (a statement_timeout turns a wait into a failure instead of a hang) */
    bt_exec(a, "BEGIN; INSERT INTO public.ow_sessions (id, val) VALUES (6001, 1)");
    bt_exec(b, "SET statement_timeout = '5s'");
    bt_exec(b, "INSERT INTO public.ow_sessions (id, val) VALUES (6002, 1), (6003, 1)");
    bt_exec(a, "COMMIT");
    bf_backfill row = bt_get(e, sessions.id);
    assert_int_equal(row.old_writers.rows, 3);
    assert_int_equal(row.old_writers.writers, 1);
    assert_int_equal(row.old_writers.top_rows, 3);
    assert_string_equal(row.old_writers.application, "relay-1.3");
    bf_worker *w = bt_claimed_worker(e, sessions.id);
    assert_int_equal(bt_step_until_not_batch(w, 20), BF_STEP_VALIDATING);
    assert_int_equal(old_writer_events, 1);
    assert_int_equal(bt_int(conn,
                            "SELECT count(*) FROM buzz_backfill.audit"
                            " WHERE backfill_id = '%s' AND action = 'old_writer'",
                            sessions.id),
                     1);
    bf_step_info info;
    assert_int_equal(bf_worker_step(w, &info), BF_OK);
    assert_int_equal(info.step, BF_STEP_COMPLETED);
    PQfinish(a);
    PQfinish(b);
    bf_worker_free(w);
    bf_engine_close(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_writers),  cmocka_unit_test(test_validation),
        cmocka_unit_test(test_block),        cmocka_unit_test(test_heal),
        cmocka_unit_test(test_bare_columns), cmocka_unit_test(test_probe),
        cmocka_unit_test(test_sessions),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
