/*
 * test_definitions.c - the definitions module the daemon-driven suites load into real
 * buzz-backfilld processes (target buzz-test-definitions, a shared object exporting
 * buzz_backfill_module like any application module).
 *
 * Which definitions a process gets is chosen when the module is loaded, from the environment
 * the test gives the daemon:
 *
 *   BUZZ_TEST_DEFINITIONS  comma-separated set names (below); unset or empty: none
 *   BUZZ_TEST_REVISION     informational revision metadata of every definition (default "r1")
 *   BUZZ_TEST_MANY         a count N (1..100000): N more definitions "dash.many.00001_v1" ...
 *                          over public.dash_many (test_dash: a dashboard of 10,000 backfills)
 *   BUZZ_TEST_LOAD_BARRIER a conninfo: loading the module (the daemon's definitions phase)
 *                          waits until a buzz-backfill session of the daemon is open on that
 *                          database (at most 30 s), then writes "td: load barrier: session
 *                          open" or "td: load barrier: no session" to stderr (the daemon's log)
 *
 * so one module file serves as "the same definitions module" for two processes and as "a
 * module lacking the definition" for a third. Every definition is declarative; tests make the
 * source tables with bt_make_items() (id bigint PK, val, fixed, counter) and hold batches or
 * validations on barriers: the SQL calls public.bt_barrier(key) (bt_install_barrier), which
 * waits while the test holds that advisory lock. The mutation counts its applications in
 * `counter`, so a row repaired twice (a stale owner's commit) is visible.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include "buzz/definition.h"

#define TD_SET          "fixed = t.val * 2, counter = t.counter + 1"
#define TD_POST         "t.fixed = t.val * 2 AND t.counter = 1"
#define TD_NEEDS        "t.fixed IS NULL"
#define TD_MAX_SELECTED 32

/* One test definition over a bt_make_items() table, keyed by id. */
#define TD_ITEMS(var, sid, tbl, batch, req, needs, post, prereq)                                   \
    static bf_definition var = {                                                                   \
        .id = sid,                                                                                 \
        .description = "test definition " sid,                                                     \
        .owner = "buzz tests",                                                                     \
        .revision = "r1",                                                                          \
        .table = tbl,                                                                              \
        .key = {{"id", BF_KEY_BIGINT}},                                                            \
        .nkey = 1,                                                                                 \
        .batch_size = batch,                                                                       \
        .required = req,                                                                           \
        .needs_repair = needs,                                                                     \
        .update_set = TD_SET,                                                                      \
        .postcondition = post,                                                                     \
        .prerequisite = prereq,                                                                    \
        .retry = {.max_attempts = 2, .base_ms = 50, .cap_ms = 200},                                \
    }

/* conformance_06b: batches wait on barrier 601 while the test holds it. Deliberately not
 * idempotent (every selected row is mutated again, counter + 1): only the generation fence
 * keeps a stale owner's batch from applying twice, so the test sees a missing fence. */
TD_ITEMS(c06b_items, "c06b.items_v1", "public.c06b_items", 50, true, "public.bt_barrier(601)",
         TD_POST, NULL);
/* conformance_06b: what the process "without the definition" runs instead */
TD_ITEMS(c06b_other, "c06b.other_v1", "public.c06b_other", 50, false, TD_NEEDS, TD_POST, NULL);

/* conformance_09 and test_admin_bad_input: a pending and a started row */
TD_ITEMS(c09_items, "c09.items_v1", "public.c09_items", 50, false, TD_NEEDS, TD_POST, NULL);
TD_ITEMS(c09_running, "c09.running_v1", "public.c09_items", 50, false, TD_NEEDS, TD_POST, NULL);

/* conformance_10: one row per scenario, all over one table */
TD_ITEMS(c10_dup, "c10.dup_v1", "public.c10_dup", 50, false, TD_NEEDS, TD_POST, NULL);
TD_ITEMS(c10_conc, "c10.conc_v1", "public.c10_items", 50, false, TD_NEEDS, TD_POST, NULL);
TD_ITEMS(c10_lost, "c10.lost_v1", "public.c10_items", 50, false, TD_NEEDS, TD_POST, NULL);
TD_ITEMS(c10_ops, "c10.ops_v1", "public.c10_items", 50, false, TD_NEEDS, TD_POST, NULL);
TD_ITEMS(c10_misc, "c10.misc_v1", "public.c10_items", 50, false, TD_NEEDS, TD_POST, NULL);

/* conformance_11: validation waits on barrier 1101; public.c11_probe() tries to write when the
 * test asks it to (c11_ctl.sneaky), which a read-only validation must refuse */
TD_ITEMS(c11_items, "c11.items_v1", "public.c11_items", 100, false, TD_NEEDS,
         TD_POST " AND public.bt_barrier(1101) AND public.c11_probe()", NULL);
TD_ITEMS(c11_pending, "c11.pending_v1", "public.c11_items", 100, false, TD_NEEDS, TD_POST, NULL);

/* conformance_13: a required and an optional backfill, batches held on 1301 / 1302 */
TD_ITEMS(c13_req, "c13.req_v1", "public.c13_items", 50, true,
         TD_NEEDS " AND public.bt_barrier(1301)", TD_POST, NULL);
TD_ITEMS(c13_opt, "c13.opt_v1", "public.c13_opt", 50, false,
         TD_NEEDS " AND public.bt_barrier(1302)", TD_POST, NULL);
/* conformance_13, recovery in automatic mode: paused (batches held on 1311), blocked (an unmet
 * prerequisite), failed (validation rejects while c13_ctl.break_validation) */
TD_ITEMS(c13_paused, "c13.paused_v1", "public.c13_p", 50, true,
         TD_NEEDS " AND public.bt_barrier(1311)", TD_POST, NULL);
TD_ITEMS(c13_blocked, "c13.blocked_v1", "public.c13_b", 50, true, TD_NEEDS, TD_POST,
         "(SELECT c.prereq_ok FROM public.c13_ctl c)");
TD_ITEMS(c13_failed, "c13.failed_v1", "public.c13_f", 50, true, TD_NEEDS,
         TD_POST " AND NOT (SELECT c.break_validation FROM public.c13_ctl c)", NULL);

/* tests/integration/test_dash: batches held on barrier 1201, so the backfill stays running
 * while the dashboard shows it */
TD_ITEMS(dash_items, "dash.items_v1", "public.dash_items", 50, false,
         TD_NEEDS " AND public.bt_barrier(1201)", TD_POST, NULL);

/* test_metrics: batches of 20 wait on barrier 951; not idempotent (counter + 1 per visit), so
 * a stale owner's batch that slipped the fence would show */
TD_ITEMS(tm_items, "tm.items_v1", "public.tm_items", 20, false, "public.bt_barrier(951)", TD_POST,
         NULL);
/* bench/rpc: the row Admin.Get reads */
TD_ITEMS(bench_items, "bench.items_v1", "public.bench_items", 100, false, TD_NEEDS, TD_POST, NULL);

/* tests/robustness: deliberately not idempotent (every row is mutated on every visit,
 * counter + 1), so a batch applied twice shows as counter 2. Batches meet barriers: 9101 (the
 * declarative batch, per row), 9102 (the callback batch, after its update and before its
 * fence: the process then sits inside its transaction), 9104 (validation, per row); the test
 * adds 9103 on the fence itself (a trigger on the backfill row). */
#define TD_ROB_POST TD_POST " AND public.bt_barrier(9104)"
static bf_definition rob_decl = {
    .id = "rob.decl_v1",
    .description = "robustness: declarative, counter + 1 per visit",
    .owner = "buzz tests",
    .table = "public.rob_decl",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 50,
    .needs_repair = "public.bt_barrier(9101)",
    .update_set = TD_SET,
    .postcondition = TD_ROB_POST,
    .retry = {.max_attempts = 8, .base_ms = 20, .cap_ms = 200},
};

static bf_err rob_cb_mutate(bf_txn *txn, void *arg)
{
    (void)arg;
    bf_err err = bf_txn_exec(txn,
                             "UPDATE public.rob_cb t SET " TD_SET " FROM bf_batch b"
                             " WHERE t.id = b.id",
                             0, NULL, NULL);
    long long held = 0;
    if (err == BF_OK)
        err = bf_txn_query_int(txn, "SELECT public.bt_barrier(9102)::int", 0, NULL, &held);
    return err;
}

static bf_definition rob_cb = {
    .id = "rob.cb_v1",
    .description = "robustness: callback, counter + 1 per visit",
    .owner = "buzz tests",
    .table = "public.rob_cb",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 50,
    .needs_repair = "true",
    .postcondition = TD_ROB_POST,
    .mutate = rob_cb_mutate,
    .retry = {.max_attempts = 8, .base_ms = 20, .cap_ms = 200},
};

/* test_logs: batches after the first (ids above 50) wait on barrier 1901 while the test holds
 * it, so a step can commit a batch and then be paused in flight; while public.logs_ctl.brk
 * the mutation casts the row's note (a marker string) to integer, a class 22 error whose
 * server message quotes the row value (the log must not) */
static bf_definition logs_items = {
    .id = "logs.items_v1",
    .description = "test definition logs.items_v1",
    .owner = "buzz tests",
    .revision = "r1",
    .table = "public.logs_items",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = 50,
    .needs_repair = TD_NEEDS " AND (t.id <= 50 OR public.bt_barrier(1901))",
    .update_set = "fixed = t.val * 2 + CASE WHEN (SELECT brk FROM public.logs_ctl)"
                  " THEN t.note::integer ELSE 0 END, counter = t.counter + 1",
    .postcondition = TD_POST,
    .retry = {.max_attempts = 2, .base_ms = 50, .cap_ms = 200},
};

typedef struct td_set {
    const char *name;
    bf_definition *defs[6];
} td_set;

static const td_set td_sets[] = {
    {"c06b", {&c06b_items}},
    {"c06b_other", {&c06b_other}},
    {"c09", {&c09_items, &c09_running}},
    {"c10", {&c10_dup, &c10_conc, &c10_lost, &c10_ops, &c10_misc}},
    {"c11", {&c11_items, &c11_pending}},
    {"c13", {&c13_req, &c13_opt}},
    {"c13rec", {&c13_paused, &c13_blocked, &c13_failed}},
    {"bench", {&bench_items}},
    {"dash", {&dash_items}},
    {"tm", {&tm_items}},
    {"rob", {&rob_decl, &rob_cb}},
    {"logs", {&logs_items}},
};

static const bf_definition *td_fixed[TD_MAX_SELECTED];

__attribute__((visibility("default"))) bf_module buzz_backfill_module = {
    .abi = BF_MODULE_ABI,
    .name = "buzz-test-definitions",
    .definitions = td_fixed,
    .count = 0,
};

static void td_select(const char *name, size_t len, const char *revision)
{
    for (size_t i = 0; i < sizeof td_sets / sizeof td_sets[0]; i++) {
        if (strlen(td_sets[i].name) != len || strncmp(td_sets[i].name, name, len) != 0)
            continue;
        for (size_t j = 0; j < 6 && td_sets[i].defs[j] != NULL; j++) {
            if (buzz_backfill_module.count >= TD_MAX_SELECTED)
                return;
            td_sets[i].defs[j]->revision = revision;
            td_fixed[buzz_backfill_module.count++] = td_sets[i].defs[j];
        }
    }
}

/* BUZZ_TEST_MANY: n generated definitions after the selected ones, freed when the module is
 * unloaded (the registry dlclose()s it last, after it is done with every definition). */
static const bf_definition **td_many_all;
static bf_definition *td_many_defs;
static char *td_many_ids;

__attribute__((destructor)) static void td_many_free(void)
{
    free(td_many_all);
    free(td_many_defs);
    free(td_many_ids);
}

static void td_many(long n, const char *revision)
{
    if (n < 1 || n > 100000)
        return;
    size_t have = buzz_backfill_module.count;
    const bf_definition **all = calloc(have + (size_t)n, sizeof *all);
    bf_definition *defs = calloc((size_t)n, sizeof *defs);
    char *ids = calloc((size_t)n, 32);
    if (all == NULL || defs == NULL || ids == NULL) {
        free(all), free(defs), free(ids);
        return;
    }
    memcpy(all, td_fixed, have * sizeof *all);
    for (long i = 0; i < n; i++) {
        char *id = ids + i * 32;
        snprintf(id, 32, "dash.many.%05ld_v1", i + 1);
        defs[i] = (bf_definition){
            .id = id,
            .description = "test definition: one of many",
            .owner = "buzz tests",
            .revision = revision,
            .table = "public.dash_many",
            .key = {{"id", BF_KEY_BIGINT}},
            .nkey = 1,
            .batch_size = 50,
            .needs_repair = TD_NEEDS,
            .update_set = TD_SET,
            .postcondition = TD_POST,
            .retry = {.max_attempts = 2, .base_ms = 50, .cap_ms = 200},
        };
        all[have + (size_t)i] = &defs[i];
    }
    buzz_backfill_module.definitions = all;
    buzz_backfill_module.count = have + (size_t)n;
    td_many_all = all;
    td_many_defs = defs;
    td_many_ids = ids;
}

/* BUZZ_TEST_LOAD_BARRIER: hold the definitions phase until the daemon's own startup session
 * (application_name "buzz-backfill ...") is open on the database; test_definition_files. */
static void td_load_barrier(const char *conninfo)
{
    PGconn *c = PQconnectdb(conninfo);
    bool open = false;
    for (int i = 0; i < 3000 && !open && PQstatus(c) == CONNECTION_OK; i++) {
        PGresult *r = PQexec(c, "SELECT 1 FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
                                " AND datname = current_database()"
                                " AND application_name LIKE 'buzz-backfill%'");
        open = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0;
        PQclear(r);
        struct timespec ts = {0, 10 * 1000000L}; /* polls a condition; orders nothing itself */
        if (!open)
            nanosleep(&ts, NULL);
    }
    PQfinish(c);
    fprintf(stderr, "td: load barrier: %s\n", open ? "session open" : "no session");
}

/* Runs when the daemon dlopen()s the module, before it reads buzz_backfill_module. */
__attribute__((constructor)) static void td_init(void)
{
    const char *barrier = getenv("BUZZ_TEST_LOAD_BARRIER");
    if (barrier != NULL && barrier[0] != '\0')
        td_load_barrier(barrier);
    const char *list = getenv("BUZZ_TEST_DEFINITIONS");
    const char *revision = getenv("BUZZ_TEST_REVISION");
    if (revision == NULL || revision[0] == '\0')
        revision = "r1";
    while (list != NULL && *list != '\0') {
        size_t len = strcspn(list, ",");
        td_select(list, len, revision);
        list += len;
        if (*list == ',')
            list++;
    }
    const char *many = getenv("BUZZ_TEST_MANY");
    if (many != NULL && many[0] != '\0')
        td_many(strtol(many, NULL, 10), revision);
}
