/*
 * test_scale.c - speed that holds at scale: a backfill over 1,000,000 rows of a relay-shaped
 * table (compound key (timestamptz, bytea), 25 rows a second, autovacuum at its defaults)
 * through the engine API against real PostgreSQL, with the table analyzed in the middle of the
 * run, as autovacuum's own auto-analyze does once the backfill has updated a tenth of it.
 *
 *   - the rows per second of the last 20 % of the keys are at least half those of the first
 *     20 % (a plan that flips to a sequential scan of the table after the ANALYZE makes every
 *     batch cost a scan of a million rows: a thousand times slower);
 *   - the run ends within a bound derived from the first 20 %'s own speed (so a collapse fails
 *     in seconds, not after the suite's timeout);
 *   - every row is repaired exactly once and validation completes the backfill;
 *   - random keys (docs/definitions.md "Random keys"): a uuid-keyed table whose writer (the new
 *     write path, which writes the derived column itself) inserts rows with random keys, most of
 *     them inside the captured bound and some behind the checkpoint, between the backfill's
 *     steps; validation succeeds, every row is right, and the backfill changed exactly the rows
 *     written before the start (the new rows needed no repair, wherever they fell).
 *
 * Guards proved (removing any one of them fails this test, seen on 2026-12-04 with the
 * statements of the commit before, which had neither): compile.c add_range's redundant bound
 * on the key's leading column and add_loop_mutation's join on the batch's keys. The mutation
 * of a batch filtered by "(ts, eid) > (c1, c2) AND (ts, eid) <= (l1, l2)" alone was estimated
 * at a fifth of the table after the ANALYZE and ran as a sequential scan (2-4 s a batch).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "bt.h"

#define ROWS       1000000L
#define TIES       25 /* rows a second, as a relay's created_at */
#define BATCH      1000
#define ANALYZE_AT (ROWS * 4 / 10)
#define LEASE_MS   30000
#define ID         "scale.events.kind_norm_v1"

static const bf_definition events_def = {
    .id = ID,
    .table = "public.events",
    .key = {{"ts", BF_KEY_TIMESTAMPTZ}, {"eid", BF_KEY_BYTEA}},
    .nkey = 2,
    .batch_size = BATCH,
    .needs_repair = "t.kind_norm IS NULL",
    .update_set = "kind_norm = t.kind",
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void test_compound_key_holds_its_speed_after_analyze(void **state)
{
    (void)state;
    bt_db_create("scale");
    PGconn *c = bt_connect();
    /* a relay's rows are wide (content, tags, signature): about 400 bytes here, so a scan of
     * the table costs what it costs on a relay; created_at-like ties of TIES rows a second */
    bt_exec(c,
            "CREATE TABLE public.events (ts timestamptz NOT NULL, eid bytea NOT NULL,"
            " kind integer NOT NULL, kind_norm integer, content text NOT NULL,"
            " PRIMARY KEY (ts, eid));"
            "INSERT INTO public.events (ts, eid, kind, content)"
            " SELECT timestamptz '2024-01-01 00:00:00+00' + ((g / %d) * interval '1 second'),"
            "  decode(md5(g::text), 'hex'), g %% 7, repeat(md5(g::text), 12)"
            " FROM generate_series(1, %ld) g;"
            "ANALYZE public.events",
            TIES, ROWS);
    assert_int_equal(bt_int(c, "SELECT current_setting('autovacuum')::boolean::int"), 1);

    bt_set_step_batches(0); /* the production step: up to step_ms of batches a CALL */
    const bf_definition *defs[] = {&events_def};
    bf_registry *reg = bt_registry(defs, 1);
    bf_engine *e = bt_engine(reg, "scale", LEASE_MS);
    assert_int_equal(bf_register_all(e), BF_OK);
    assert_int_equal(bt_act(e, BF_ACTION_START, ID), BF_OK);
    bf_worker *w = bt_claimed_worker(e, ID);

    double t0 = now_s(), t_first = 0, t_last_from = 0, deadline = 0;
    long covered = 0;
    bool analyzed = false;
    bf_step_info info;
    for (;;) {
        assert_int_equal(bf_worker_step(w, &info), BF_OK);
        if (info.step != BF_STEP_BATCH)
            break;
        covered += info.rows;
        double t = now_s();
        if (t_first == 0 && covered >= ROWS / 5) {
            t_first = t - t0;
            /* a healthy run does the remaining 80 % in about 4x this; a collapsed one in
             * hundreds of times it */
            deadline = t + 20 * t_first + 30;
            printf("first 20%%: %ld rows in %.1f s (%.0f rows/s)\n", covered, t_first,
                   (double)covered / t_first);
        }
        if (!analyzed && covered >= ANALYZE_AT) {
            bt_exec(c, "ANALYZE public.events");
            analyzed = true;
            printf("ANALYZE at %ld rows (%.1f s)\n", covered, t - t0);
        }
        if (t_last_from == 0 && covered >= ROWS - ROWS / 5)
            t_last_from = t;
        if (deadline > 0 && t > deadline)
            fail_msg("collapsed: %ld of %ld rows after %.1f s (the first 20%% took %.1f s)",
                     covered, ROWS, t - t0, t_first);
    }
    double t_end = now_s();
    assert_int_equal(info.step, BF_STEP_VALIDATING);
    assert_int_equal(covered, ROWS);
    double rate_first = (double)(ROWS / 5) / t_first;
    double rate_last = (double)(ROWS - (ROWS - ROWS / 5)) / (t_end - t_last_from);
    printf("last 20%%: %.0f rows/s, %.2fx the first; whole run %.1f s\n", rate_last,
           rate_last / rate_first, t_end - t0);
    assert_true(rate_last >= 0.5 * rate_first);

    /* validation over the million rows, then every row repaired once */
    assert_int_equal(bt_step_until_not_batch(w, 10000), BF_STEP_COMPLETED);
    assert_int_equal(bt_get(e, ID).state, BF_STATE_COMPLETED);
    assert_int_equal(bt_int(c, "SELECT count(*) FROM public.events WHERE kind_norm IS DISTINCT"
                               " FROM kind"),
                     0);
    assert_int_equal(bt_get(e, ID).rows_committed, ROWS);

    bf_worker_free(w);
    bf_engine_close(e);
    PQfinish(c);
    bt_db_drop_registry(reg);
}

#define UUID_ROWS 20000
#define UUID_ID   "scale.notes.len_v1"

static const bf_definition notes_def = {
    .id = UUID_ID,
    .table = "public.notes",
    .key = {{"id", BF_KEY_UUID}},
    .nkey = 1,
    .batch_size = 500,
    .needs_repair = "t.len IS NULL",
    .update_set = "len = octet_length(t.body)",
    .postcondition = "t.len = octet_length(t.body)",
};

static void test_random_keys_inside_the_bound(void **state)
{
    (void)state;
    bt_db_create("scale_uuid");
    PGconn *c = bt_connect();
    bt_exec(c,
            "CREATE TABLE public.notes (id uuid PRIMARY KEY, body text NOT NULL, len integer);"
            "INSERT INTO public.notes (id, body) SELECT gen_random_uuid(), repeat('n', g %% 50)"
            " FROM generate_series(1, %d) g;"
            "ANALYZE public.notes",
            UUID_ROWS);
    bt_set_step_batches(1);
    const bf_definition *defs[] = {&notes_def};
    bf_registry *reg = bt_registry(defs, 1);
    bf_engine *e = bt_engine(reg, "scale-uuid", LEASE_MS);
    assert_int_equal(bf_register_all(e), BF_OK);
    assert_int_equal(bt_act(e, BF_ACTION_START, UUID_ID), BF_OK);
    char *bound =
        bt_text(c, "SELECT bound[1] FROM buzz_backfill.backfill WHERE id = '%s'", UUID_ID);
    bf_worker *w = bt_claimed_worker(e, UUID_ID);

    /* between steps, the new write path inserts random keys (with len written); count those
     * that land behind the checkpoint the backfill has already passed */
    bf_step_info info;
    int steps = 0;
    long long behind = 0;
    for (;; steps++) {
        assert_int_equal(bf_worker_step(w, &info), BF_OK);
        if (info.step != BF_STEP_BATCH)
            break;
        behind +=
            bt_int(c,
                   "WITH ins AS (INSERT INTO public.notes (id, body, len)"
                   " SELECT gen_random_uuid(), repeat('w', g), g FROM generate_series(1, 20) g"
                   " RETURNING id) SELECT count(*) FROM ins, buzz_backfill.backfill b"
                   " WHERE b.id = '%s' AND ins.id <= b.checkpoint[1]::uuid",
                   UUID_ID);
    }
    assert_int_equal(info.step, BF_STEP_VALIDATING);
    long long written = 20LL * steps;
    long long inside = bt_int(c,
                              "SELECT count(*) FROM public.notes WHERE id <= '%s' AND"
                              " body LIKE 'w%%'",
                              bound);
    printf("random keys: %lld written during the run, %lld inside the bound, %lld behind the"
           " checkpoint\n",
           written, inside, behind);
    assert_true(behind > 0);
    assert_true(inside > written / 2); /* most land inside the bound */
    assert_int_equal(bt_step_until_not_batch(w, 1000), BF_STEP_COMPLETED);
    assert_int_equal(bt_get(e, UUID_ID).state, BF_STATE_COMPLETED);
    assert_int_equal(bt_int(c, "SELECT count(*) FROM public.notes WHERE len IS DISTINCT FROM"
                               " octet_length(body)"),
                     0);
    assert_int_equal(bt_get(e, UUID_ID).rows_committed, UUID_ROWS);
    free(bound);
    bf_worker_free(w);
    bf_engine_close(e);
    PQfinish(c);
    bt_db_drop_registry(reg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_keys_inside_the_bound),
        cmocka_unit_test(test_compound_key_holds_its_speed_after_analyze),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
