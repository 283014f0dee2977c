/*
 * test_many_definitions.c - 10,000 definitions register and each can be looked up (issue 26:
 * startup linear in definitions). No timing here: bench/startup measures the cost.
 *
 *   engine      10,000 definitions added to a registry in one batch (bf_registry_batch_begin/
 *               end) and registered with bf_register_many (ten statements of 1,000): every one
 *               is found in the registry, its row exists with its digest, and the ID list the
 *               engine's queries name holds all of them. The same set registered again (a
 *               restart) is registered whole and writes no row (every row's version the same).
 *               A second registry holding the same IDs,
 *               two of them materially different (another table; other key types), registers
 *               again: those two, and only they, come back BF_ERR_INCOMPATIBLE, their rows
 *               untouched, while the others' metadata is updated (last registration wins);
 *               bf_register says why for each.
 *   find work   300 backfills running and unclaimed: a worker whose process knows only the
 *               one updated last (behind 299 it does not know, more than the first read of work
 *               takes) claims it; a worker that knows them all claims the oldest first.
 *   daemon      buzz-backfilld starts on a definitions directory of 10,000 files, one of them
 *               registered earlier by a materially different definition: it logs that one
 *               refused by name and "registered 10000 definitions", every row exists, and the
 *               first, a middle and the last file's backfills start through the Admin API (a
 *               Start is refused for an ID the daemon's registry does not hold).
 *
 * Falsified (each seen failing with the guard removed):
 *   - register_chunk's per-definition verdict (backfill.c: `written ? BF_OK :
 *     BF_ERR_INCOMPATIBLE` replaced by BF_OK): engine fails ("mt.d_04321: ok, not definition
 *     cannot interpret the stored backfill") and daemon fails (the refusal is never logged);
 *   - bf_register_many's chunk loop made to stop after the first chunk: engine fails (1000
 *     rows, not 10000) and daemon fails ("did not register 10000 definitions within 60 s");
 *   - register_many_sql's `same` (the rows stored as given, not written again) made empty
 *     (`AND false`): engine fails (the rows' versions change);
 *   - `same` not returned as registered (UNION ALL removed): engine fails ("again, mt.d_00000:
 *     definition cannot interpret the stored backfill");
 *   - worker_find_work's second read (the IDs named, when the first was full and claimed
 *     nothing) removed: find work fails ("the process of mt.d_00299 found no work");
 *   - worker_claim_rows trying rows of IDs its registry does not hold: find work fails ("this
 *     process has no definition for mt.d_00000").
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "bt.h"
#include "daemon.h"

#define MANY    10000
#define ODD_KEY 4321 /* the definition of the second registry with other key types */
#define ODD_TAB 8765 /* ... and with another table */

static PGconn *pg;
static bf_definition defs[MANY], again[MANY];
static char ids[MANY][32];

static void make_defs(bf_definition *out, const char *revision)
{
    for (int i = 0; i < MANY; i++) {
        snprintf(ids[i], sizeof ids[i], "mt.d_%05d", i);
        out[i] = (bf_definition){
            .id = ids[i],
            .table = "mt.items",
            .key = {{"id", BF_KEY_BIGINT}},
            .nkey = 1,
            .batch_size = 100,
            .needs_repair = "t.fixed IS NULL",
            .update_set = "fixed = t.val",
            .revision = revision,
            .description = "one of many \"quoted\" \\ definitions, {braced}",
        };
    }
}

static bf_registry *batch_registry(const bf_definition *d)
{
    bf_registry *reg = NULL;
    assert_int_equal(bf_registry_new(&reg), BF_OK);
    char diag[BF_DIAG_MAX] = "";
    bf_registry_batch_begin(reg);
    for (int i = 0; i < MANY; i++)
        if (bf_registry_add(reg, &d[i], diag, sizeof diag) != BF_OK)
            fail_msg("add %d: %s", i, diag);
    assert_int_equal(bf_registry_batch_end(reg), BF_OK);
    return reg;
}

static bf_err register_all(bf_engine *e, const bf_definition *d, bf_err *errs)
{
    static const bf_definition *ptrs[MANY];
    for (int i = 0; i < MANY; i++)
        ptrs[i] = &d[i];
    return bf_register_many(e, ptrs, MANY, errs);
}

static void clean(void)
{
    bt_exec(pg, "DROP SCHEMA IF EXISTS mt CASCADE");
    bt_exec(pg, "SET session_replication_role = replica");
    bt_exec(pg, "DELETE FROM buzz_backfill.backfill");
    bt_exec(pg, "RESET session_replication_role");
    bt_exec(pg, "CREATE SCHEMA mt");
    bt_exec(pg, "CREATE TABLE mt.items (id bigint PRIMARY KEY, val int NOT NULL, fixed int)");
    bt_exec(pg, "CREATE TABLE mt.other (id bigint PRIMARY KEY, val int NOT NULL, fixed int)");
}

static void test_engine_registers_many(void **state)
{
    (void)state;
    clean();
    make_defs(defs, "r1");
    bf_registry *reg = batch_registry(defs);
    bf_engine *e = bt_engine(reg, "many-a", 30000);
    static bf_err errs[MANY];
    assert_int_equal(register_all(e, defs, errs), BF_OK);
    for (int i = 0; i < MANY; i++) {
        if (errs[i] != BF_OK)
            fail_msg("%s: %s", ids[i], bf_err_str(errs[i]));
        assert_ptr_equal(bf_registry_find(reg, ids[i]), &defs[i]);
    }
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM buzz_backfill.backfill WHERE revision = 'r1'"
                                " AND definition_digest IS NOT NULL AND state = 'pending'"
                                " AND description = 'one of many \"quoted\" \\ definitions,"
                                " {braced}'"),
                     MANY);
    /* the same set again (a restart): every one registered, and no row written again */
    static const char versions[] =
        "SELECT md5(string_agg(xmin::text || ctid::text, ',' ORDER BY id))"
        " FROM buzz_backfill.backfill";
    char *before = bt_text(pg, versions);
    assert_int_equal(register_all(e, defs, errs), BF_OK);
    for (int i = 0; i < MANY; i++)
        if (errs[i] != BF_OK)
            fail_msg("again, %s: %s", ids[i], bf_err_str(errs[i]));
    char *after = bt_text(pg, versions);
    assert_string_equal(after, before);
    free(after);
    free(before);
    /* the same IDs again, two of them materially different */
    make_defs(again, "r2");
    again[ODD_TAB].table = "mt.other";
    again[ODD_KEY].key[0].type = BF_KEY_INTEGER;
    bf_registry *reg2 = batch_registry(again);
    bf_engine *e2 = bt_engine(reg2, "many-b", 30000);
    assert_int_equal(register_all(e2, again, errs), BF_OK);
    for (int i = 0; i < MANY; i++) {
        bf_err want = i == ODD_KEY || i == ODD_TAB ? BF_ERR_INCOMPATIBLE : BF_OK;
        if (errs[i] != want)
            fail_msg("%s: %s, not %s", ids[i], bf_err_str(errs[i]), bf_err_str(want));
    }
    assert_int_equal(
        bt_int(pg, "SELECT count(*) FROM buzz_backfill.backfill WHERE revision = 'r2'"), MANY - 2);
    assert_int_equal(bt_int(pg,
                            "SELECT count(*) FROM buzz_backfill.backfill WHERE revision = 'r1'"
                            " AND id IN ('%s', '%s')",
                            ids[ODD_KEY], ids[ODD_TAB]),
                     2);
    assert_int_equal(bf_register(e2, &again[ODD_KEY]), BF_ERR_INCOMPATIBLE);
    assert_non_null(strstr(bf_engine_diag(e2), "other key types"));
    assert_int_equal(bf_register(e2, &again[ODD_TAB]), BF_ERR_INCOMPATIBLE);
    assert_non_null(strstr(bf_engine_diag(e2), "materially different definition"));
    bf_engine_close(e2);
    bf_registry_free(reg2);
    bf_engine_close(e);
    bf_registry_free(reg);
}

static void write_files(const char *dir)
{
    for (int i = 0; i < MANY; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/d_%05d.def", dir, i);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fprintf(f,
                "id = %s\n"
                "description = file %d of many\n"
                "table = mt.items\n"
                "key = id bigint\n"
                "batch_size = 100\n"
                "needs_repair = t.fixed IS NULL\n"
                "update_set = fixed = t.val\n",
                ids[i], i);
        assert_int_equal(fclose(f), 0);
        assert_int_equal(chmod(path, 0644), 0);
    }
}

static void start_ok(bfc_client *c, const char *id)
{
    bd_control_resp *resp = NULL;
    int st = bd_control(c, "Start", id, &resp);
    if (st != BD_SC(OK))
        fail_msg("Start %s: status %d: %s", id, st,
                 resp && resp->detail ? resp->detail : "(no detail)");
    bd_free(resp);
}

static void test_daemon_starts_on_many_files(void **state)
{
    (void)state;
    clean();
    make_defs(defs, NULL);
    /* an earlier registration of one ID by a materially different definition */
    again[0] = defs[ODD_TAB];
    again[0].table = "mt.other";
    const bf_definition *odd[] = {&again[0]};
    bf_registry *reg = bt_registry(odd, 1);
    bf_engine *e = bt_engine(reg, "many-earlier", 30000);
    assert_int_equal(bf_register(e, &again[0]), BF_OK);
    bf_engine_close(e);
    bf_registry_free(reg);

    char dir[300];
    snprintf(dir, sizeof dir, "%s/defs", bd_dir());
    assert_int_equal(mkdir(dir, 0755), 0);
    write_files(dir);
    bd_options o = bd_defaults();
    o.workers = 0;
    o.log_level = "info";
    static char extra[400];
    snprintf(extra, sizeof extra, "definitions_dir = '%s'", dir);
    o.extra = extra;
    bd_daemon d;
    bd_start(&d, &o);
    bd_wait_registered(pg, MANY);
    bd_wait_log(&d, "registered 10000 definitions");
    char refused[96];
    snprintf(refused, sizeof refused, "cannot register %s: ", ids[ODD_TAB]);
    assert_true(bd_log_contains(&d, refused));
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM buzz_backfill.backfill"
                                " WHERE description = 'file ' || substr(id, 6)::int || ' of many'"),
                     MANY - 1);
    bfc_client *c = bd_client(d.ipc_url, NULL, 0, 0);
    start_ok(c, ids[0]);
    start_ok(c, ids[MANY / 2]);
    start_ok(c, ids[MANY - 1]);
    bd_control_resp *resp = NULL;
    assert_int_not_equal(bd_control(c, "Start", "mt.not_defined_here", &resp), BD_SC(OK));
    bd_free(resp);
    bfc_close(c);
    bd_stop(&d);
}

/* More eligible rows than the worker's first read of work takes (worker_claim.c
 * FIND_WORK_SCAN, 256). */
#define SCAN_PAST 300

static void test_worker_finds_its_work_behind_others(void **state)
{
    (void)state;
    clean();
    make_defs(defs, NULL);
    static const bf_definition *ptrs[SCAN_PAST];
    for (int i = 0; i < SCAN_PAST; i++)
        ptrs[i] = &defs[i];
    bf_registry *all = bt_registry(ptrs, SCAN_PAST);
    bf_engine *a = bt_engine(all, "many-all", 30000);
    static bf_err errs[SCAN_PAST];
    assert_int_equal(bf_register_many(a, ptrs, SCAN_PAST, errs), BF_OK);
    bf_actor who = {"test", "test", NULL};
    for (int i = 0; i < SCAN_PAST; i++) { /* started in order: the last is updated last */
        bf_action_result res;
        if (bf_action_apply(a, BF_ACTION_START, ids[i], &who, &res) != BF_OK)
            fail_msg("start %s: %s", ids[i], bf_engine_diag(a));
    }
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM buzz_backfill.backfill"
                                " WHERE state = 'running' AND claim_owner IS NULL"),
                     SCAN_PAST);
    /* a process that knows only the newest: its work is behind 299 rows it does not know */
    bf_registry *last = bt_registry(&ptrs[SCAN_PAST - 1], 1);
    bf_engine *b = bt_engine(last, "many-last", 30000);
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, b, NULL), BF_OK);
    int64_t generation = 0;
    if (bf_worker_claim(w, NULL, &generation) != BF_OK)
        fail_msg("the process of %s found no work: %s", ids[SCAN_PAST - 1], bf_engine_diag(b));
    assert_string_equal(bt_get(b, ids[SCAN_PAST - 1]).claim_owner, "many-last");
    bf_worker_free(w); /* releases the claim */
    /* one that knows them all takes the oldest first, as before */
    assert_int_equal(bf_worker_new(&w, a, NULL), BF_OK);
    assert_int_equal(bf_worker_claim(w, NULL, &generation), BF_OK);
    assert_string_equal(bt_get(a, ids[0]).claim_owner, "many-all");
    bf_worker_free(w);
    bf_engine_close(b);
    bf_registry_free(last);
    bf_engine_close(a);
    bf_registry_free(all);
}

static int setup(void **state)
{
    (void)state;
    pg = bd_suite_open("many_defs");
    bd_migrate(NULL);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bd_suite_close(NULL, pg, false);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_engine_registers_many),
        cmocka_unit_test(test_daemon_starts_on_many_files),
        cmocka_unit_test(test_worker_finds_its_work_behind_others),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
