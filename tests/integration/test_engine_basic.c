/*
 * test_engine_basic.c - end to end through the engine API: migrations are idempotent,
 * registration converges, a declarative single-key and a compound-key backfill run from
 * pending to completed, and every row is repaired exactly once; a stable ID spelled like an
 * array literal's NULL is still found by the claim of the next eligible row and by the gate.
 *
 * Guard proved: actions.c RETURNING_NOTIFY, the notification sent with every accepted
 * transition (test_run_to_completion: a session listening on buzz_backfill hears Start, Pause
 * and Resume, and nothing from a Pause that converged); without it no notification is sent.
 *
 * Guard proved: actions.c bf_start_required's one read of the pending required rows
 * (test_start_required): a required ID without a row is passed over; the earlier loop, a
 * bf_get per required definition, stopped at it with BF_ERR_NOT_FOUND and started none after.
 *
 * Guard proved: registry.c registry_ids_literal quotes every element of the text[] literal of
 * the registry's IDs (test_id_spelled_null): unquoted, the element null reads as SQL NULL, so
 * the claim of the next eligible row never finds that ID and the readiness gate reports an
 * entry without an ID that never clears.
 *
 * Guard proved: engine.c bf__field_i64's decoding of binary results (test_run_to_completion,
 * assert_read_exact): a row read by bf_get and by bf_list carries PostgreSQL's timestamps to
 * the microsecond (their 2000-01-01 epoch moved to the Unix one) and its integer batch size.
 *
 * Guard proved: engine.c exec_take's return while PostgreSQL has not answered (test_async_reads):
 * a read's end does not wait. With the return removed, bf_readiness_end waits for a table the
 * test holds locked until the engine's statement timeout cancels it, and reports it done.
 */
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bt.h"

static const bf_definition items_fix = {
    .id = "items.fix_v1",
    .description = "set fixed = val * 2",
    .table = "public.items",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 100,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2",
};

static const bf_definition events_norm = {
    .id = "events.kind_norm_v1",
    .table = "events",
    .key = {{"ts", BF_KEY_TIMESTAMPTZ}, {"eid", BF_KEY_BYTEA}},
    .nkey = 2,
    .batch_size = 37,
    .required = true,
    .needs_repair = "t.kind_norm IS NULL",
    .update_set = "kind_norm = t.kind + 100",
};

/* "null" is a valid stable ID (bf_id_valid: lowercase, 3..BF_ID_MAX characters) */
static const bf_definition null_id = {
    .id = "null",
    .table = "null_items",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 100,
    .required = true,
    .needs_repair = "t.fixed IS NULL",
    .update_set = "fixed = t.val * 2",
};

static const bf_definition *const defs[] = {&items_fix, &events_norm};

static int setup(void **state)
{
    bt_db_create("engine_basic");
    PGconn *c = bt_connect();
    bt_make_items(c, "items", 1000);
    bt_make_events(c, "events", 1000, 50);
    bt_make_items(c, "null_items", 250);
    PQfinish(c);
    return 0;
}

static int teardown(void **state)
{
    bt_db_drop();
    return 0;
}

static void test_migrate_idempotent(void **state)
{
    bf_registry *reg = bt_registry(defs, 2);
    bf_engine *e = bt_engine(reg, "t1", 0);
    assert_int_equal(bf_migrate(e), BF_OK);
    int version = 0;
    assert_int_equal(bf_schema_check(e, &version), BF_OK);
    assert_int_equal(version, BF_SCHEMA_VERSION);
    bf_engine_close(e);
    bf_registry_free(reg);
}

/* A database migrated by a newer binary (or with an edited history) is refused with a clear,
 * typed error instead of being guessed at; the rows standing in for the newer binary's work are
 * written to the migration table only. */
static void test_unknown_schema_version(void **state)
{
    bf_registry *reg = bt_registry(defs, 2);
    bf_engine *e = bt_engine(reg, "t1", 0);
    PGconn *c = bt_connect();
    bt_exec(c,
            "INSERT INTO buzz_backfill.schema_migration (version, name, checksum)"
            " VALUES (%d, 'from a newer binary', 'x')",
            BF_SCHEMA_VERSION + 1);
    assert_int_equal(bf_migrate(e), BF_ERR_SCHEMA_TOO_NEW);
    assert_non_null(strstr(bf_engine_diag(e), "knows up to"));
    assert_int_equal(bf_schema_check(e, NULL), BF_ERR_SCHEMA_TOO_NEW);
    bt_exec(c, "DELETE FROM buzz_backfill.schema_migration WHERE version = %d",
            BF_SCHEMA_VERSION + 1);
    /* an applied version whose SQL differs from this binary's */
    char *sum = bt_text(c, "SELECT checksum FROM buzz_backfill.schema_migration WHERE version = 1");
    bt_exec(c, "UPDATE buzz_backfill.schema_migration SET checksum = 'edited' WHERE version = 1");
    assert_int_equal(bf_migrate(e), BF_ERR_SCHEMA_CHECKSUM);
    assert_int_equal(bf_schema_check(e, NULL), BF_ERR_SCHEMA_CHECKSUM);
    bt_exec(c, "UPDATE buzz_backfill.schema_migration SET checksum = '%s' WHERE version = 1", sum);
    free(sum);
    assert_int_equal(bf_migrate(e), BF_OK);
    assert_int_equal(bf_schema_check(e, NULL), BF_OK);
    PQfinish(c);
    bf_engine_close(e);
    bf_registry_free(reg);
}

/* Whether c, listening on buzz_backfill, received a notification naming id since the last
 * call (a round trip first: the server delivers what was sent before it). */
static bool notified(PGconn *c, const char *id)
{
    PQclear(PQexec(c, "SELECT 1"));
    bool seen = false;
    PGnotify *n;
    (void)PQconsumeInput(c);
    while ((n = PQnotifies(c)) != NULL) {
        seen = seen || (strcmp(n->relname, "buzz_backfill") == 0 && strcmp(n->extra, id) == 0);
        PQfreemem(n);
    }
    return seen;
}

/* PostgreSQL's own figure of a row's column, in microseconds since the epoch. */
static long long pg_time(PGconn *c, const char *id, const char *column)
{
    return bt_int(c,
                  "SELECT (extract(epoch FROM %s) * 1000000)::bigint FROM buzz_backfill.backfill"
                  " WHERE id = '%s'",
                  column, id);
}

/* A row read by bf_get (a prepared statement) and by bf_list (planned per call), both with
 * binary results, carries PostgreSQL's times to the microsecond and its integers whole. */
static void assert_read_exact(PGconn *c, bf_engine *e, const char *id, int batch_size)
{
    bf_backfill listed[8];
    int n = 0;
    assert_int_equal(bf_list(e, 0, NULL, listed, 8, &n), BF_OK);
    int found = 0;
    for (int i = 0; i < n; i++) {
        const bf_backfill *row = strcmp(listed[i].id, id) == 0 ? &listed[i] : NULL;
        if (row == NULL)
            continue;
        bf_backfill got = bt_get(e, id);
        const bf_backfill *both[] = {row, &got};
        for (int k = 0; k < 2; k++) {
            assert_int_equal(both[k]->registered_at, pg_time(c, id, "registered_at"));
            assert_int_equal(both[k]->updated_at, pg_time(c, id, "updated_at"));
            assert_int_equal(both[k]->started_at, pg_time(c, id, "started_at"));
            assert_int_equal(both[k]->last_progress_at, pg_time(c, id, "last_progress_at"));
            assert_int_equal(both[k]->completed_at, pg_time(c, id, "completed_at"));
            assert_int_equal(both[k]->batch_size, batch_size);
            assert_true(both[k]->now >= both[k]->completed_at);
        }
        found++;
    }
    assert_int_equal(found, 1);
}

static void test_run_to_completion(void **state)
{
    bf_registry *reg = bt_registry(defs, 2);
    bf_engine *e = bt_engine(reg, "t1", 0);
    assert_int_equal(bf_register_all(e), BF_OK);
    assert_int_equal(bf_register_all(e), BF_OK);
    PGconn *c = bt_connect();
    assert_int_equal(bt_int(c, "SELECT count(*) FROM buzz_backfill.backfill"), 2);
    bf_backfill row = bt_get(e, "items.fix_v1");
    assert_int_equal(row.state, BF_STATE_PENDING);
    assert_false(row.has_bound);

    /* a quarter of the items needs no repair: rows changed and keys passed differ */
    bt_exec(c, "UPDATE items SET fixed = val * 2 WHERE id %% 4 = 0");
    /* every accepted transition wakes idle workers: the notification is sent with it */
    bt_exec(c, "LISTEN buzz_backfill");
    assert_int_equal(bt_act(e, BF_ACTION_START, "items.fix_v1"), BF_OK);
    assert_true(notified(c, "items.fix_v1"));
    assert_int_equal(bt_act(e, BF_ACTION_START, "events.kind_norm_v1"), BF_OK);
    assert_true(notified(c, "events.kind_norm_v1"));
    assert_int_equal(bt_act(e, BF_ACTION_PAUSE, "events.kind_norm_v1"), BF_OK);
    assert_true(notified(c, "events.kind_norm_v1"));
    assert_int_equal(bt_act(e, BF_ACTION_PAUSE, "events.kind_norm_v1"), BF_OK); /* converged */
    assert_false(notified(c, "events.kind_norm_v1"));
    assert_int_equal(bt_act(e, BF_ACTION_RESUME, "events.kind_norm_v1"), BF_OK);
    assert_true(notified(c, "events.kind_norm_v1"));
    bt_exec(c, "UNLISTEN buzz_backfill");
    row = bt_get(e, "items.fix_v1");
    assert_int_equal(row.state, BF_STATE_RUNNING);
    assert_true(row.has_bound);
    assert_string_equal(row.bound, "1000");

    bf_engine *we = bt_engine(reg, "worker-a", 0);
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, we, NULL), BF_OK);
    assert_int_equal(bf_worker_run(w, true), BF_OK);
    bf_worker_free(w);
    bf_engine_close(we);

    row = bt_get(e, "items.fix_v1");
    assert_int_equal(row.state, BF_STATE_COMPLETED);
    assert_int_equal(row.rows_committed, 750); /* changed */
    assert_true(row.has_rows_covered);
    assert_int_equal(row.rows_covered, 1000); /* passed by the checkpoint */
    assert_int_equal(row.batches_committed, 10);
    assert_string_equal(row.checkpoint, "1000");
    assert_int_equal(bt_int(c, "SELECT count(*) FROM items WHERE fixed = val * 2"), 1000);
    assert_read_exact(c, e, "items.fix_v1", 100);

    row = bt_get(e, "events.kind_norm_v1");
    assert_int_equal(row.state, BF_STATE_COMPLETED);
    assert_int_equal(row.rows_committed, 1000);
    assert_int_equal(row.rows_covered, 1000);
    assert_int_equal(bt_int(c, "SELECT count(*) FROM events WHERE kind_norm = kind + 100"), 1000);

    int gating = -1;
    assert_int_equal(bf_gate(e, NULL, 0, &gating), BF_OK);
    assert_int_equal(gating, 0);
    PQfinish(c);
    bf_engine_close(e);
    bf_registry_free(reg);
}

/* bf_start_required starts the registry's pending required rows, found by one read: a
 * required ID with no row (not registered) is passed over, not an error that stops the rest;
 * a row already started is not started again. */
static void test_start_required(void **state)
{
    /* items_fix made required under two more IDs: one registered, one never registered */
    bf_definition req_unregistered = items_fix, req_registered = items_fix;
    req_unregistered.id = "items.req_unregistered_v1";
    req_registered.id = "items.req_registered_v1";
    req_unregistered.required = req_registered.required = true;
    const bf_definition *const both[] = {&req_unregistered, &req_registered, &items_fix};
    bf_registry *reg = bt_registry(both, 3);
    bf_engine *e = bt_engine(reg, "t1", 0);
    assert_int_equal(bf_register(e, &req_registered), BF_OK);
    assert_int_equal(bf_register(e, &items_fix), BF_OK); /* not required: left as it is */
    bf_actor who = {NULL, "automatic startup", NULL};
    int started = -1;
    assert_int_equal(bf_start_required(e, &who, &started), BF_OK);
    assert_int_equal(started, 1);
    assert_int_equal(bt_get(e, req_registered.id).state, BF_STATE_RUNNING);
    started = -1;
    assert_int_equal(bf_start_required(e, &who, &started), BF_OK);
    assert_int_equal(started, 0);
    bf_backfill row;
    assert_int_equal(bf_get(e, req_unregistered.id, &row), BF_ERR_NOT_FOUND);
    bf_engine_close(e);
    bf_registry_free(reg);
}

/* Guard: registry.c registry_ids_literal's quoting of each ID in the text[] literal. */
static void test_id_spelled_null(void **state)
{
    assert_true(bf_id_valid("null"));
    const bf_definition *const only[] = {&null_id};
    bf_registry *reg = bt_registry(only, 1);
    bf_engine *e = bt_engine(reg, "t1", 0);
    assert_int_equal(bf_register_all(e), BF_OK);

    /* the required ID gates under its own name, registered but not completed */
    bf_gate_entry gate[4];
    int gating = -1;
    assert_int_equal(bf_gate(e, gate, 4, &gating), BF_OK);
    assert_int_equal(gating, 1);
    assert_string_equal(gate[0].id, "null");
    assert_int_equal(gate[0].state, BF_STATE_PENDING);
    gating = -1;
    assert_int_equal(bf_readiness_read(e, gate, 4, &gating), BF_OK);
    assert_int_equal(gating, 1);
    assert_string_equal(gate[0].id, "null");

    /* the claim of the next eligible row finds it */
    assert_int_equal(bt_act(e, BF_ACTION_START, "null"), BF_OK);
    bf_engine *we = bt_engine(reg, "worker-null", 0);
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, we, NULL), BF_OK);
    int64_t gen = 0;
    assert_int_equal(bf_worker_claim(w, NULL, &gen), BF_OK);
    bf_backfill row = bt_get(e, "null");
    assert_true(row.claimed);
    assert_string_equal(row.claim_owner, "worker-null");
    assert_int_equal(row.generation, gen);
    assert_int_equal(bt_step_until_not_batch(w, 10), BF_STEP_VALIDATING);
    assert_int_equal(bt_step_until_not_batch(w, 1), BF_STEP_COMPLETED);
    bf_worker_free(w);
    bf_engine_close(we);
    assert_int_equal(bt_get(e, "null").state, BF_STATE_COMPLETED);

    /* completed, it no longer gates */
    gating = -1;
    assert_int_equal(bf_gate(e, gate, 4, &gating), BF_OK);
    assert_int_equal(gating, 0);
    gating = -1;
    assert_int_equal(bf_readiness_read(e, gate, 4, &gating), BF_OK);
    assert_int_equal(gating, 0);
    PGconn *c = bt_connect();
    assert_int_equal(bt_int(c, "SELECT count(*) FROM null_items WHERE fixed = val * 2"), 250);
    PQfinish(c);
    bf_engine_close(e);
    bf_registry_free(reg);
}

/* Wait until the engine's socket is readable (bounded: a test, not a product wait). */
static void async_wait(bf_engine *e)
{
    struct pollfd pfd = {.fd = bf_engine_socket(e), .events = POLLIN};
    assert_true(pfd.fd >= 0);
    assert_int_equal(poll(&pfd, 1, 30000), 1);
}

/* The asynchronous reads (what the daemon's transport uses for Check and Get): a begin sends, an
 * end takes what arrived without waiting, nothing else may start in between, and the answers
 * are the blocking reads' answers. */
static void test_async_reads(void **state)
{
    bf_definition gated = items_fix; /* required and never started: it gates */
    gated.id = "items.async_gated_v1";
    gated.required = true;
    const bf_definition *const both[] = {&gated, &items_fix};
    bf_registry *reg = bt_registry(both, 2);
    bf_engine *e = bt_engine(reg, "t1", 0);
    assert_int_equal(bf_register_all(e), BF_OK);

    /* PostgreSQL cannot answer while the table is locked: the end returns, not done (the
     * statement is prepared first: a begin prepares on a connection's first use, and waits) */
    bf_gate_entry gate[4], sync_gate[4];
    int gating = -1, sync_gating = -1;
    assert_int_equal(bf_readiness_read(e, sync_gate, 4, &sync_gating), BF_OK);
    PGconn *holder = bt_connect();
    bt_exec(holder, "BEGIN");
    bt_exec(holder, "LOCK TABLE buzz_backfill.backfill IN ACCESS EXCLUSIVE MODE");
    assert_int_equal(bf_readiness_begin(e, true), BF_OK);
    assert_int_equal(bf_readiness_begin(e, true), BF_ERR_INVALID_ARGUMENT); /* one at a time */
    assert_int_equal(bf_get_begin(e, items_fix.id), BF_ERR_INVALID_ARGUMENT);
    PGconn *c = bt_connect();
    bt_wait_lock_waiters(c, 1); /* the read waits on the lock inside PostgreSQL */
    gating = -1;
    bool done = true;
    assert_int_equal(bf_readiness_end(e, gate, 4, &gating, &done), BF_OK);
    assert_false(done);
    bt_exec(holder, "ROLLBACK");
    while (!done) {
        async_wait(e);
        assert_int_equal(bf_readiness_end(e, gate, 4, &gating, &done), BF_OK);
    }
    assert_int_equal(sync_gating, 1);
    assert_int_equal(gating, 1);
    assert_string_equal(gate[0].id, gated.id);
    assert_string_equal(sync_gate[0].id, gated.id);

    /* Get in halves gives what bf_get gives; an unknown ID ends NOT_FOUND, and leaves the
     * engine free for the next read */
    bf_backfill async_row, row;
    assert_int_equal(bf_get_begin(e, items_fix.id), BF_OK);
    for (done = false; !done;) {
        async_wait(e);
        assert_int_equal(bf_get_end(e, &async_row, &done), BF_OK);
    }
    assert_int_equal(bf_get(e, items_fix.id, &row), BF_OK);
    assert_string_equal(async_row.id, items_fix.id);
    assert_int_equal(async_row.state, row.state);
    assert_int_equal(async_row.generation, row.generation);
    assert_int_equal(bf_get_begin(e, "items.unknown_v1"), BF_OK);
    bf_err err = BF_OK;
    for (done = false; !done;) {
        async_wait(e);
        err = bf_get_end(e, &async_row, &done);
    }
    assert_int_equal(err, BF_ERR_NOT_FOUND);
    assert_int_equal(bf_readiness_begin(e, false), BF_OK); /* the schema alone (manual mode) */
    for (done = false; !done;) {
        async_wait(e);
        assert_int_equal(bf_readiness_end(e, gate, 4, &gating, &done), BF_OK);
    }
    assert_int_equal(gating, 0);
    PQfinish(c);
    PQfinish(holder);
    bf_engine_close(e);
    bf_registry_free(reg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_migrate_idempotent), cmocka_unit_test(test_unknown_schema_version),
        cmocka_unit_test(test_run_to_completion),  cmocka_unit_test(test_id_spelled_null),
        cmocka_unit_test(test_start_required),     cmocka_unit_test(test_async_reads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
