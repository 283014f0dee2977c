/*
 * conformance_13_configuration_matrix.c - spec conformance test 13, "Configuration matrix":
 * all four auto_migrate x auto_backfill configurations through real buzz-backfilld startup and
 * Readiness.Check, each on a fresh database, with batches held on barriers (the definitions'
 * SQL calls bt_barrier(key) while the test holds that advisory lock).
 *
 *   off/off  no migration runs: on an empty database the schema component is NOT_READY
 *            ("schema missing") and nothing is created, also with auto_backfill on (schema
 *            safety is independent: never "ready" because no backfill gates). After an
 *            out-of-band `buzz-backfilld migrate`: ready, no backfill gate, the required
 *            backfill stays pending. Work an operator started is recovered after a restart
 *            (SIGTERM with its batch in flight, then the next process completes it).
 *   off/on   against a database migrated beforehand: the required backfill is started and
 *            gates readiness (NOT_READY with its ID and state) while its batches are held;
 *            a Check waiting with wait_ms is woken by the change once the batches are
 *            released and answers with the new state, long before its wait ends; READY only
 *            after the backfill validated and completed; the optional one is never started.
 *   on/off   migrations run, nothing pending is started, READY with unrepaired data;
 *            started work survives a crash (SIGKILL with a batch in flight): the next process
 *            takes over after the lease and completes it exactly once.
 *   on/on    migrations, then every required backfill; the gate stays closed while one is
 *            running, paused, blocked or failed. An operator inspects them (List, Get: gating,
 *            error classes) and recovers each through the admin API with a token (Pause and
 *            Resume; Retry after fixing the prerequisite; Retry after fixing the data the
 *            validation rejected) while Readiness stays NOT_READY listing the gating IDs and
 *            their states; READY once all are completed.
 *
 * Before every Resume and Retry the source grows above the bound and, where work remains,
 * inside it after the checkpoint (grow_source): the recovered backfills complete at the bound
 * captured by start, every row through it repaired once and none above it (assert_repaired),
 * so a Resume or Retry that recaptured the bound fails here (seen with a mutant that re-runs
 * the bound capture in actions.c's resume and retry transitions).
 *
 * Guards proved: the readiness inputs of server/src/admin/readiness.c readiness_compute() (the
 * schema check and, in automatic mode only, bf_gate()); the automatic start in
 * startup.c startup_start_required() only when auto_backfill is on; migrations only when
 * auto_migrate is on (startup_schema()); workers recovering started work in every mode.
 * Removing the gate input makes the automatic cases READY while backfills are incomplete;
 * starting in manual mode or gating in manual mode fails the manual cases.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "bt.h"
#include "daemon.h"

#define REQ       "c13.req_v1"
#define OPT       "c13.opt_v1"
#define PAUSED_ID "c13.paused_v1"
#define BLOCKED   "c13.blocked_v1"
#define FAILED    "c13.failed_v1"
#define K_REQ     1301
#define K_OPT     1302
#define K_PAUSED  1311
#define OK        BD_SC(OK)
#define READY     BD_CS(READY)
#define NOT_READY BD_CS(NOT_READY)

static int passed;
#define CASES 5

static int setup(void **state)
{
    bd_setup("c13");
    return 0;
}

static int teardown(void **state)
{
    bd_teardown(passed != CASES);
    return 0;
}

/* ---- helpers ----------------------------------------------------------------------------- */

/* A fresh database with the source tables of every c13 definition (no engine schema). */
static const char *fresh_db(const char *name, PGconn **pg_out)
{
    const char *conninfo = bd_db_new(name);
    PGconn *pg = bd_connect(conninfo);
    bt_install_barrier(pg);
    bt_make_items(pg, "c13_items", 200);
    bt_make_items(pg, "c13_opt", 200);
    bt_make_items(pg, "c13_p", 100);
    bt_make_items(pg, "c13_b", 100);
    bt_make_items(pg, "c13_f", 100);
    bt_exec(pg, "CREATE TABLE c13_ctl (prereq_ok boolean NOT NULL, break_validation boolean"
                " NOT NULL); INSERT INTO c13_ctl VALUES (false, true)");
    *pg_out = pg;
    return conninfo;
}

static bd_options opts(const char *conninfo, bool migrate, bool automatic)
{
    bd_options o = bd_defaults();
    o.conninfo = conninfo;
    o.definitions = "c13";
    o.auto_migrate = migrate;
    o.auto_backfill = automatic;
    return o;
}

static bool has_schema(PGconn *pg)
{
    return bt_int(pg, "SELECT count(*) FROM pg_namespace WHERE nspname = 'buzz_backfill'") == 1;
}

static char *state_of(PGconn *pg, const char *id)
{
    char *s = bt_text(pg, "SELECT state FROM buzz_backfill.backfill WHERE id = '%s'", id);
    assert_non_null(s);
    return s;
}

static void assert_state(PGconn *pg, const char *id, const char *want)
{
    char *s = state_of(pg, id);
    if (strcmp(s, want) != 0)
        fail_msg("%s is %s, want %s", id, s, want);
    free(s);
}

static void wait_state(PGconn *pg, const char *id, const char *want)
{
    for (int i = 0; i < 12000; i++) {
        char *s = state_of(pg, id);
        bool done = strcmp(s, want) == 0;
        free(s);
        if (done)
            return;
        bd_sleep_ms(5);
    }
    assert_state(pg, id, want);
}

static void assert_component(const bd_check_resp *r, const char *name, int status,
                             const char *reason_prefix)
{
    const Buzz__Backfill__V1__Component *c = bd_component(r, name);
    assert_true(c->has_status);
    if ((int)c->status != status)
        fail_msg("component %s: status %d (%s), want %d", name, c->status,
                 c->reason ? c->reason : "", status);
    if (reason_prefix != NULL) {
        assert_non_null(c->reason);
        if (strncmp(c->reason, reason_prefix, strlen(reason_prefix)) != 0)
            fail_msg("component %s: reason \"%s\", want \"%s...\"", name, c->reason, reason_prefix);
    }
}

/* The gating entry of id in a Check answer; NULL when absent. */
static const Buzz__Backfill__V1__GatingBackfill *gating(const bd_check_resp *r, const char *id)
{
    for (size_t i = 0; i < r->n_gating; i++)
        if (strcmp(r->gating[i]->id, id) == 0)
            return r->gating[i];
    return NULL;
}

static void assert_gating(const bd_check_resp *r, const char *id, int state)
{
    const Buzz__Backfill__V1__GatingBackfill *g = gating(r, id);
    if (g == NULL)
        fail_msg("%s does not gate", id);
    assert_true(g->has_state);
    if ((int)g->state != state)
        fail_msg("%s gates in state %d, want %d", id, g->state, state);
}

/* Readiness through the ipc boundary: ready or not, with the expected switches. */
static bd_check_resp *check(const bd_daemon *d, bool migrate, bool automatic)
{
    bfc_client *c = bd_client(d->ipc_url, NULL, 0, 0);
    bd_check_resp *r = bd_check(c, 0);
    bfc_close(c);
    assert_int_equal(r->n_components, 3);
    assert_true(r->has_auto_migrate && r->auto_migrate == migrate);
    assert_true(r->has_auto_backfill && r->auto_backfill == automatic);
    return r;
}

/* Check with bounded waits until ready (at most about 60 s). */
static void wait_ready(const bd_daemon *d)
{
    bfc_client *c = bd_client(d->ipc_url, NULL, 40000, -1);
    for (int i = 0; i < 12; i++) {
        bd_check_resp *r = bd_check(c, 5000);
        bool ready = r->ready;
        bd_free(r);
        if (ready) {
            bfc_close(c);
            return;
        }
    }
    fail_msg("not ready within 60 s");
}

static void assert_pending_untouched(PGconn *pg, const char *id)
{
    assert_int_equal(bt_int(pg,
                            "SELECT count(*) FROM buzz_backfill.backfill WHERE id = '%s' AND"
                            " state = 'pending' AND bound IS NULL AND bound_empty IS NULL AND"
                            " generation = 0 AND started_at IS NULL",
                            id),
                     1);
}

/* ---- off/off, and schema safety ---------------------------------------------------------- */

static void test_off_off(void **state)
{
    PGconn *pg = NULL;
    const char *db = fresh_db("c13_offoff", &pg);
    bd_daemon d;

    /* no schema: a schema failure in both modes, never ready, nothing created */
    for (int automatic = 0; automatic <= 1; automatic++) {
        bd_options o = opts(db, false, automatic);
        bd_start(&d, &o);
        bd_wait_log(&d, "engine schema is missing or incomplete");
        bd_check_resp *r = check(&d, false, automatic);
        assert_false(r->ready);
        assert_component(r, "database", READY, NULL);
        assert_component(r, "schema", NOT_READY, "schema missing");
        if (automatic)
            assert_component(r, "backfills", BD_CS(UNKNOWN_STATUS), NULL);
        else
            assert_component(r, "backfills", READY, "manual mode");
        assert_int_equal(r->n_gating, 0);
        bd_free(r);
        bfc_client *c = bd_client(d.ipc_url, NULL, 0, 0);
        Buzz__Backfill__V1__ListRequest lreq = BUZZ__BACKFILL__V1__LIST_REQUEST__INIT;
        assert_int_equal(
            bd_call(c, &buzz__backfill__v1__admin__descriptor, "List", &lreq.base, NULL),
            BD_SC(UNAVAILABLE));
        bfc_close(c);
        bd_stop(&d);
        assert_false(has_schema(pg));
        assert_int_equal(bt_int(pg, "SELECT count(*) FROM c13_items WHERE fixed IS NOT NULL"), 0);
    }

    /* migrated out of band: ready, no gate, nothing pending started */
    bd_migrate(db);
    bd_options o = opts(db, false, false);
    bd_start(&d, &o);
    bd_wait_log(&d, "startup complete");
    bd_wait_registered(pg, 2);
    bd_check_resp *r = check(&d, false, false);
    assert_true(r->ready);
    assert_component(r, "schema", READY, NULL);
    assert_component(r, "backfills", READY, "manual mode");
    assert_int_equal(r->n_gating, 0);
    bd_free(r);
    assert_pending_untouched(pg, REQ);
    assert_pending_untouched(pg, OPT);

    /* an operator starts the optional one; SIGTERM with its batch in flight */
    PGconn *holder = bd_connect(db);
    bt_lock(holder, K_OPT);
    bfc_client *c = bd_client(d.ipc_url, NULL, 0, 0);
    assert_int_equal(bd_control(c, "Start", OPT, NULL), OK);
    bfc_close(c);
    bt_wait_waiters(pg, K_OPT, 1);
    r = check(&d, false, false);
    assert_true(r->ready); /* started work never gates in manual mode */
    bd_free(r);
    assert_int_equal(kill(d.pid, SIGTERM), 0);
    /* the worker cancels its batch, which the barrier still holds: it rolls back, nothing of it
     * commits and no other batch starts (the barrier is released only after the cancel) */
    bd_wait_log(&d, "stop: cancelled the statement in flight");
    bt_unlock(holder, K_OPT);
    assert_int_equal(bd_signal_wait(&d, 0), 0);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM buzz_backfill.backfill WHERE id = '" OPT
                                "' AND state = 'running' AND claim_owner IS NULL"
                                " AND rows_committed = 0 AND attempts = 0"),
                     1);

    /* the next process recovers it without any automatic mode; the required one stays */
    bd_start(&d, &o);
    wait_state(pg, OPT, "completed");
    assert_pending_untouched(pg, REQ);
    r = check(&d, false, false);
    assert_true(r->ready);
    bd_free(r);
    bd_stop(&d);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM c13_opt WHERE counter <> 1"), 0);
    PQfinish(holder);
    PQfinish(pg);
    passed++;
}

/* ---- off/on ------------------------------------------------------------------------------ */

typedef struct wait_call {
    const char *url;
    uint32_t wait_ms;
    bd_check_resp *resp;
    int64_t elapsed_ms;
} wait_call;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *wait_main(void *p)
{
    wait_call *w = p;
    bfc_client *c = NULL;
    bfc_options o = {.timeout_ms = (int)w->wait_ms + 10000, .retries = -1};
    if (bfc_open(&c, w->url, &o, NULL, 0) != BF_OK)
        return NULL;
    Buzz__Backfill__V1__CheckRequest req = BUZZ__BACKFILL__V1__CHECK_REQUEST__INIT;
    req.has_wait_ms = true;
    req.wait_ms = w->wait_ms;
    ProtobufCMessage *out = NULL;
    int64_t t0 = now_ms();
    (void)bfc_call(c, &buzz__backfill__v1__readiness__descriptor, "Check", &req.base, &out, NULL);
    w->elapsed_ms = now_ms() - t0;
    w->resp = (bd_check_resp *)out;
    bfc_close(c);
    return NULL;
}

static void test_off_on(void **state)
{
    PGconn *pg = NULL;
    const char *db = fresh_db("c13_offon", &pg);
    bd_migrate(db);
    PGconn *holder = bd_connect(db);
    bt_lock(holder, K_REQ);
    bd_daemon d;
    bd_options o = opts(db, false, true);
    bd_start(&d, &o);
    bt_wait_waiters(pg, K_REQ, 1); /* started automatically; its first batch is held */
    bd_wait_log(&d, "startup complete");
    bd_check_resp *r = check(&d, false, true);
    assert_false(r->ready);
    assert_component(r, "database", READY, NULL);
    assert_component(r, "schema", READY, NULL);
    assert_component(r, "backfills", NOT_READY, "1 required backfill not completed");
    assert_int_equal(r->n_gating, 1);
    assert_gating(r, REQ, BD_ST(RUNNING));
    bd_free(r);
    assert_pending_untouched(pg, OPT); /* not required: automatic mode leaves it alone */

    /* a waiting Check: once it has read PostgreSQL and waits, the batches are released */
    char *t0 = bt_text(pg, "SELECT clock_timestamp()::text");
    wait_call w = {.url = d.ipc_url, .wait_ms = 25000};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, wait_main, &w), 0);
    for (int i = 0; i < 60000; i++) {
        if (bt_int(pg,
                   "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                   " AND state = 'idle' AND query LIKE '%%unnest($1::text[]) AS r(id)%%'"
                   " AND state_change > '%s'::timestamptz",
                   t0) > 0)
            break;
        bd_sleep_ms(1);
    }
    free(t0);
    bt_unlock(holder, K_REQ);
    pthread_join(th, NULL);
    assert_non_null(w.resp);
    assert_true(w.elapsed_ms < 20000); /* woken by the change, not by the end of the wait */
    const Buzz__Backfill__V1__GatingBackfill *g = gating(w.resp, REQ);
    assert_true(w.resp->ready || (g != NULL && g->state != BD_ST(RUNNING)));
    bd_free(w.resp);

    /* ready only once validated and completed */
    wait_ready(&d);
    assert_state(pg, REQ, "completed");
    assert_pending_untouched(pg, OPT);
    r = check(&d, false, true);
    assert_true(r->ready);
    assert_component(r, "backfills", READY, NULL);
    assert_int_equal(r->n_gating, 0);
    bd_free(r);
    bd_stop(&d);
    PQfinish(holder);
    PQfinish(pg);
    passed++;
}

/* ---- on/off ------------------------------------------------------------------------------ */

static void test_on_off(void **state)
{
    PGconn *pg = NULL;
    const char *db = fresh_db("c13_onoff", &pg);
    bd_daemon d;
    bd_options o = opts(db, true, false);
    o.lease_ms = 5000; /* statement_timeout_ms: the lease less a step (daemon.c) */
    bd_start(&d, &o);
    bd_wait_log(&d, "startup complete");
    assert_int_equal(bt_int(pg, "SELECT max(version) FROM buzz_backfill.schema_migration"),
                     BF_SCHEMA_VERSION);
    bd_wait_registered(pg, 2);
    assert_pending_untouched(pg, REQ); /* required, but manual mode never starts it */
    assert_pending_untouched(pg, OPT);
    bd_check_resp *r = check(&d, true, false);
    assert_true(r->ready); /* serving with unrepaired data: no backfill gate */
    assert_component(r, "backfills", READY, "manual mode");
    assert_int_equal(r->n_gating, 0);
    bd_free(r);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM c13_items WHERE fixed IS NULL"), 200);

    /* started work survives a crash with its batch in flight */
    PGconn *holder = bd_connect(db);
    bt_lock(holder, K_REQ);
    bfc_client *c = bd_client(d.ipc_url, NULL, 0, 0);
    assert_int_equal(bd_control(c, "Start", REQ, NULL), OK);
    bfc_close(c);
    bt_wait_waiters(pg, K_REQ, 1);
    int orphan = bt_barrier_waiter_pid(pg, K_REQ);
    long long gen =
        bt_int(pg, "SELECT generation FROM buzz_backfill.backfill WHERE id = '%s'", REQ);
    bd_kill(&d);
    bd_start(&d, &o);
    /* the orphan's statement ends at its statement_timeout, within the lease; the next process
     * takes over after the lease and its batch meets the barrier too */
    bt_wait_backend_gone(pg, orphan);
    while (bt_int(pg, "SELECT generation FROM buzz_backfill.backfill WHERE id = '%s'", REQ) <= gen)
        bd_sleep_ms(5);
    bt_wait_waiters(pg, K_REQ, 1);
    r = check(&d, true, false);
    assert_true(r->ready);
    bd_free(r);
    bt_unlock(holder, K_REQ);
    wait_state(pg, REQ, "completed");
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM c13_items WHERE counter <> 1"
                                " OR fixed IS DISTINCT FROM val * 2"),
                     0);
    bd_stop(&d);
    PQfinish(holder);
    PQfinish(pg);
    passed++;
}

/* ---- on/on ------------------------------------------------------------------------------- */

static void test_on_on_gates_until_completed(void **state)
{
    PGconn *pg = NULL;
    const char *db = fresh_db("c13_onon", &pg);
    PGconn *holder = bd_connect(db);
    bt_lock(holder, K_REQ);
    bd_daemon d;
    bd_options o = opts(db, true, true);
    bd_start(&d, &o);
    bt_wait_waiters(pg, K_REQ, 1);
    assert_int_equal(bt_int(pg, "SELECT max(version) FROM buzz_backfill.schema_migration"),
                     BF_SCHEMA_VERSION);
    bd_check_resp *r = check(&d, true, true);
    assert_false(r->ready);
    assert_component(r, "schema", READY, NULL);
    assert_component(r, "backfills", NOT_READY, "1 required");
    assert_gating(r, REQ, BD_ST(RUNNING));
    bd_free(r);
    bt_unlock(holder, K_REQ);
    wait_ready(&d);
    assert_state(pg, REQ, "completed");
    assert_pending_untouched(pg, OPT);
    bd_stop(&d);
    PQfinish(holder);
    PQfinish(pg);
    passed++;
}

static bd_check_resp *check_gated(const bd_daemon *d)
{
    bd_check_resp *r = check(d, true, true);
    assert_false(r->ready);
    assert_component(r, "backfills", NOT_READY, NULL);
    assert_gating(r, REQ, BD_ST(RUNNING)); /* held on its barrier throughout */
    return r;
}

static Buzz__Backfill__V1__Backfill *find(Buzz__Backfill__V1__ListResponse *l, const char *id)
{
    for (size_t i = 0; i < l->n_backfills; i++)
        if (strcmp(l->backfills[i]->id, id) == 0)
            return l->backfills[i];
    fail_msg("%s not listed", id);
    return NULL;
}

/* Before every Resume and Retry the source grows: rows above the captured bound (ids
 * bound+1 .. bound+5), which the resumed work must leave alone (a Resume or Retry that
 * recaptured the bound would admit them, and the immutable-bound trigger refuses it), and with
 * inside, while work remains after the checkpoint, the row at the bound replaced by a new
 * unrepaired one, which it must repair. Returns the bound as captured (text[]). */
static char *grow_source(PGconn *pg, const char *id, const char *table, bool inside)
{
    char *bound = bt_text(pg, "SELECT bound::text FROM buzz_backfill.backfill WHERE id = '%s'", id);
    assert_non_null(bound);
    long long b =
        bt_int(pg, "SELECT bound[1]::bigint FROM buzz_backfill.backfill WHERE id = '%s'", id);
    bt_exec(pg, "INSERT INTO %s (id, val) SELECT g, g %% 1000 FROM generate_series(%lld, %lld) g",
            table, b + 1, b + 5);
    if (inside) {
        assert_int_equal(bt_int(pg,
                                "SELECT count(*) FROM buzz_backfill.backfill WHERE id = '%s'"
                                " AND (checkpoint IS NULL OR checkpoint[1]::bigint < %lld)",
                                id, b),
                         1);
        bt_exec(pg, "DELETE FROM %s WHERE id = %lld; INSERT INTO %s (id, val) VALUES (%lld, %lld)",
                table, b, table, b, b % 1000);
    }
    return bound;
}

/* Completed at the bound grow_source saw, its checkpoint there: every row through it repaired
 * once (the replaced one too), none of the rows above it. Frees bound. */
static void assert_repaired(PGconn *pg, const char *id, const char *table, char *bound)
{
    char *now = bt_text(pg,
                        "SELECT bound::text || ' ' || checkpoint::text FROM buzz_backfill.backfill"
                        " WHERE id = '%s'",
                        id);
    char want[128];
    snprintf(want, sizeof want, "%s %s", bound, bound);
    assert_string_equal(now, want);
    free(now);
    long long b =
        bt_int(pg, "SELECT bound[1]::bigint FROM buzz_backfill.backfill WHERE id = '%s'", id);
    assert_int_equal(bt_int(pg,
                            "SELECT count(*) FROM %s WHERE id <= %lld AND fixed = val * 2"
                            " AND counter = 1",
                            table, b),
                     b);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM %s WHERE id > %lld", table, b), 5);
    assert_int_equal(bt_int(pg,
                            "SELECT count(*) FROM %s WHERE id > %lld"
                            " AND (counter <> 0 OR fixed IS NOT NULL)",
                            table, b),
                     0);
    free(bound);
}

static void test_on_on_recovery_through_admin(void **state)
{
    PGconn *pg = NULL;
    const char *db = fresh_db("c13_recover", &pg);
    PGconn *holder = bd_connect(db);
    bt_lock(holder, K_REQ);
    bt_lock(holder, K_PAUSED);
    bd_daemon d;
    bd_options o = opts(db, true, true);
    o.definitions = "c13,c13rec";
    o.workers = 4; /* two wait on barriers; two reach blocked and failed */
    bd_start(&d, &o);
    bt_wait_waiters(pg, K_REQ, 1);
    bt_wait_waiters(pg, K_PAUSED, 1);
    wait_state(pg, BLOCKED, "blocked");
    wait_state(pg, FAILED, "failed");

    bd_check_resp *r = check_gated(&d);
    assert_int_equal(r->n_gating, 4);
    assert_gating(r, PAUSED_ID, BD_ST(RUNNING));
    assert_gating(r, BLOCKED, BD_ST(BLOCKED));
    assert_gating(r, FAILED, BD_ST(FAILED));
    assert_null(gating(r, OPT));
    bd_free(r);

    /* authorized inspection over tcp with a token while serving is gated */
    bfc_client *op = bd_client(d.tcp_url, bd_token(BFT_CAP_READ | BFT_CAP_CONTROL), 0, 0);
    Buzz__Backfill__V1__ListRequest lreq = BUZZ__BACKFILL__V1__LIST_REQUEST__INIT;
    Buzz__Backfill__V1__ListResponse *l = NULL;
    assert_int_equal(bd_call(op, &buzz__backfill__v1__admin__descriptor, "List", &lreq.base,
                             (ProtobufCMessage **)&l),
                     OK);
    assert_int_equal(l->n_backfills, 5);
    assert_true(find(l, REQ)->gating && find(l, BLOCKED)->gating && find(l, FAILED)->gating);
    assert_false(find(l, OPT)->gating);
    assert_non_null(find(l, BLOCKED)->error);
    assert_string_equal(find(l, BLOCKED)->error->error_class, "prerequisite");
    assert_non_null(find(l, FAILED)->error);
    assert_string_equal(find(l, FAILED)->error->error_class, "validation");
    bd_free(l);

    /* paused: pause fences the batch in flight, resume lets it run */
    bd_control_resp *cr = NULL;
    assert_int_equal(bd_control(op, "Pause", PAUSED_ID, &cr), OK);
    assert_int_equal(cr->resulting_state, BD_ST(PAUSED));
    bd_free(cr);
    r = check_gated(&d);
    assert_gating(r, PAUSED_ID, BD_ST(PAUSED));
    bd_free(r);
    char *paused_bound = grow_source(pg, PAUSED_ID, "c13_p", true);
    assert_int_equal(bd_control(op, "Resume", PAUSED_ID, &cr), OK);
    assert_int_equal(cr->resulting_state, BD_ST(RUNNING));
    bd_free(cr);
    bt_unlock(holder, K_PAUSED);
    wait_state(pg, PAUSED_ID, "completed");
    assert_repaired(pg, PAUSED_ID, "c13_p", paused_bound);
    r = check_gated(&d);
    assert_null(gating(r, PAUSED_ID));
    bd_free(r);

    /* blocked: the operator provides the prerequisite, then retries */
    bt_exec(pg, "UPDATE c13_ctl SET prereq_ok = true");
    char *blocked_bound = grow_source(pg, BLOCKED, "c13_b", true);
    assert_int_equal(bd_control(op, "Retry", BLOCKED, &cr), OK);
    assert_int_equal(cr->prior_state, BD_ST(BLOCKED));
    assert_int_equal(cr->resulting_state, BD_ST(RUNNING));
    bd_free(cr);
    wait_state(pg, BLOCKED, "completed");
    assert_repaired(pg, BLOCKED, "c13_b", blocked_bound);

    /* failed: the data the validation rejected is fixed, retry validates at the same bound
     * (no work remains: nothing is added inside it, the rows above it must not count) */
    char *bound = grow_source(pg, FAILED, "c13_f", false);
    bt_exec(pg, "UPDATE c13_ctl SET break_validation = false");
    assert_int_equal(bd_control(op, "Retry", FAILED, &cr), OK);
    assert_int_equal(cr->prior_state, BD_ST(FAILED));
    assert_int_equal(cr->resulting_state, BD_ST(VALIDATING));
    bd_free(cr);
    wait_state(pg, FAILED, "completed");
    assert_repaired(pg, FAILED, "c13_f", bound);

    /* every recovered one completed; the held one still gates alone */
    r = check_gated(&d);
    assert_int_equal(r->n_gating, 1);
    bd_free(r);
    bfc_close(op);
    bt_unlock(holder, K_REQ);
    wait_ready(&d);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM buzz_backfill.backfill WHERE state"
                                " <> 'completed' AND id <> '" OPT "'"),
                     0);
    bd_stop(&d);
    PQfinish(holder);
    PQfinish(pg);
    passed++;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_off_off),
        cmocka_unit_test(test_off_on),
        cmocka_unit_test(test_on_off),
        cmocka_unit_test(test_on_on_gates_until_completed),
        cmocka_unit_test(test_on_on_recovery_through_admin),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
