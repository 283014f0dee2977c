/*
 * test_pgbouncer.c - buzz-backfilld through PgBouncer (issue 20 item 1), started in front of the
 * private cluster by scripts/pg.sh pgbouncer-start.
 *
 *   session pooling      daemon A, through the pooler, registers c06b.items_v1 (the test
 *                        module's deliberately non-idempotent repair: counter + 1 on every row
 *                        it selects), an operator starts it over A's admin API, and its batches
 *                        run until the test closes barrier 601 mid-run (some batches committed,
 *                        one waiting inside its transaction). A is killed with SIGKILL there;
 *                        daemon B, through the pooler too, takes over after the lease, and the
 *                        run completes once the barrier opens: every row applied exactly once,
 *                        rows_committed = ROWS, a validation through B succeeds, readiness is
 *                        ready with the database component ready, and PgBouncer's console lists
 *                        B's sessions (so they did go through it).
 *   transaction pooling  an engine opened through the pooler is refused (BF_ERR_PREREQUISITE,
 *                        its diagnostic names pool_mode = session), and a daemon through it
 *                        logs the refusal naming the pooling mode and the fix, never completes
 *                        its startup, reports the database not ready, answers an admin call
 *                        with an error, and still stops cleanly.
 *
 * Guard proved: engine.c engine_session_kept (bf_engine_open refuses a connection whose
 * transactions move between server sessions). Without it the engine opens through the
 * transaction pooler and test_transaction_pooling_refused fails at its first assertion (seen:
 * BF_OK instead of BF_ERR_PREREQUISITE with the call in bf_engine_open removed). The session
 * test proves that the check lets a session pooler through (no false refusal).
 *
 * Without pgbouncer installed (scripts/deps.sh installs it) both tests are skipped, saying so.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "bt.h"
#include "buzz/engine.h"
#include "daemon.h"

#define ID       "c06b.items_v1"
#define BARRIER  601
#define ROWS     2000
#define LEASE_MS 3000

static PGconn *pg;
static int passed;
static char pooled[512]; /* conninfo of the suite database through the pooler */
static char pooler_port[16];

/* ---- the pooler --------------------------------------------------------------------------- */

static bool pgbouncer_installed(void)
{
    return access("/usr/sbin/pgbouncer", X_OK) == 0 ||
           system("command -v pgbouncer >/dev/null 2>&1") == 0;
}

/* scripts/pg.sh pgbouncer-start MODE, then pooled = the suite database through it. */
static void pooler_start(const char *mode)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s/scripts/pg.sh' pgbouncer-start %s", BUZZ_SOURCE_DIR, mode);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char url[256] = "";
    if (fgets(url, sizeof url, p) == NULL)
        url[0] = '\0';
    assert_int_equal(pclose(p), 0);
    url[strcspn(url, "\n")] = '\0';
    PQconninfoOption *opts = PQconninfoParse(url, NULL);
    assert_non_null(opts);
    for (PQconninfoOption *o = opts; o->keyword != NULL; o++)
        if (strcmp(o->keyword, "port") == 0 && o->val != NULL)
            snprintf(pooler_port, sizeof pooler_port, "%s", o->val);
    PQconninfoFree(opts);
    assert_true(pooler_port[0] != '\0');
    char *db = bt_text(pg, "SELECT current_database()");
    snprintf(pooled, sizeof pooled, "host=127.0.0.1 port=%s user=postgres dbname=%s", pooler_port,
             db);
    free(db);
}

static void pooler_stop(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s/scripts/pg.sh' pgbouncer-stop >/dev/null", BUZZ_SOURCE_DIR);
    assert_int_equal(system(cmd), 0);
}

/* Client connections PgBouncer holds for the suite database (its console's SHOW CLIENTS). */
static int pooler_clients(void)
{
    char conninfo[128];
    snprintf(conninfo, sizeof conninfo, "host=127.0.0.1 port=%s user=postgres dbname=pgbouncer",
             pooler_port);
    PGconn *console = PQconnectdb(conninfo);
    assert_int_equal(PQstatus(console), CONNECTION_OK);
    PGresult *r = PQexec(console, "SHOW CLIENTS");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    char *db = bt_text(pg, "SELECT current_database()");
    int col = PQfnumber(r, "database"), n = 0;
    assert_true(col >= 0);
    for (int i = 0; i < PQntuples(r); i++)
        n += strcmp(PQgetvalue(r, i, col), db) == 0;
    free(db);
    PQclear(r);
    PQfinish(console);
    return n;
}

/* ---- fixture ------------------------------------------------------------------------------ */

static int setup(void **state)
{
    (void)state;
    pg = bd_suite_open("pgbouncer");
    bt_install_barrier(pg);
    bt_make_items(pg, "c06b_items", ROWS);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (pgbouncer_installed())
        pooler_stop();
    bd_suite_close(NULL, pg, passed != 2);
    return 0;
}

static bd_options opts(void)
{
    bd_options o = bd_defaults();
    o.conninfo = pooled;
    o.definitions = "c06b";
    o.lease_ms = LEASE_MS;
    return o;
}

/* pid of the claim owner "host:pid:wN", 0 when unclaimed */
static pid_t owner_pid(void)
{
    char *owner = bt_text(pg, "SELECT claim_owner FROM buzz_backfill.backfill WHERE id = '" ID "'");
    if (owner == NULL)
        return 0;
    const char *p = strchr(owner, ':');
    long pid = p ? strtol(p + 1, NULL, 10) : 0;
    free(owner);
    return (pid_t)pid;
}

/* ---- session pooling: the whole run, a crash in the middle ------------------------------- */

static void test_session_pooling_end_to_end(void **state)
{
    (void)state;
    if (!pgbouncer_installed()) {
        printf("skipped: pgbouncer is not installed (scripts/deps.sh installs it)\n");
        passed++;
        skip();
    }
    pooler_start("session");
    bd_migrate(pooled);
    PGconn *holder = bt_connect();
    bt_lock(holder, BARRIER);
    bd_daemon a, b;
    bd_options o = opts();
    bd_start(&a, &o);
    bd_wait_log(&a, "registered 1 definition");

    /* an operator starts it through A; its first batch meets the closed barrier */
    bfc_client *op = bd_client(a.ipc_url, NULL, 10000, 3);
    assert_int_equal(bd_control(op, "Start", ID, NULL), BD_SC(OK));
    bfc_close(op);
    bt_wait_waiters(pg, BARRIER, 1);
    /* open it and close it again at once: the waiting batch commits (the lock is granted to it
     * before the test's next request), later ones run until the barrier is closed again */
    bt_unlock(holder, BARRIER);
    bt_lock(holder, BARRIER);
    bt_wait_waiters(pg, BARRIER, 1);
    long long done = bt_int(pg, "SELECT count(*) FROM c06b_items WHERE fixed IS NOT NULL");
    assert_true(done > 0 && done < ROWS); /* mid-run */
    assert_int_equal(owner_pid(), a.pid);

    /* a crash while a batch waits inside its transaction (through the pooler) */
    int orphan = bt_barrier_waiter_pid(pg, BARRIER);
    assert_true(orphan > 0);
    bd_kill(&a);
    bd_start(&b, &o);
    /* the orphaned statement ends within the lease (statement_timeout); B takes over after the
     * lease and its batch meets the barrier */
    bt_wait_backend_gone(pg, orphan);
    for (int i = 0; i < 60000 && owner_pid() != b.pid; i++)
        bd_sleep_ms(1);
    assert_int_equal(owner_pid(), b.pid);
    bt_wait_waiters(pg, BARRIER, 1);
    assert_true(pooler_clients() >= 2); /* B's sessions are PgBouncer's clients */
    bt_unlock(holder, BARRIER);

    bfc_client *c = bd_client(b.ipc_url, NULL, 40000, 3);
    bd_free(bd_wait_state(c, ID, BD_ST(COMPLETED)));
    /* exactly once: no row missed, none applied twice (the killed batch committed nothing) */
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM c06b_items WHERE counter IS DISTINCT FROM 1"
                                " OR fixed IS DISTINCT FROM val * 2"),
                     0);
    bd_get_resp *g = bd_get(c, ID);
    assert_int_equal(g->backfill->state, BD_ST(COMPLETED));
    assert_int_equal(g->backfill->progress->rows_committed, ROWS);
    bd_free(g);

    /* validation and readiness through the pooler */
    bd_validate_resp *v = NULL;
    assert_int_equal(bd_validate(c, ID, &v), BD_SC(OK));
    assert_non_null(v);
    assert_int_equal(v->outcome, BUZZ__BACKFILL__V1__VALIDATION_OUTCOME__SUCCESS);
    bd_free(v);
    bd_check_resp *r = bd_check(c, 0);
    assert_true(r->ready);
    assert_int_equal(bd_component(r, "database")->status, BD_CS(READY));
    bd_free(r);
    bfc_close(c);
    /* the session check ran its probe through the pooler, and let it through */
    assert_true(bd_log_contains(&b, "probing with a second one"));
    assert_false(bd_log_contains(&b, "does not keep its session"));
    bd_stop(&b);
    PQfinish(holder);
    passed++;
}

/* ---- transaction pooling: refused when the engine opens ---------------------------------- */

static void test_transaction_pooling_refused(void **state)
{
    (void)state;
    if (!pgbouncer_installed()) {
        printf("skipped: pgbouncer is not installed (scripts/deps.sh installs it)\n");
        passed++;
        skip();
    }
    pooler_start("transaction");

    /* the engine itself: a typed refusal whose diagnostic says what to do */
    bf_config cfg = {.conninfo = pooled, .owner = "pgbouncer-test"};
    bf_engine *e = NULL;
    assert_int_equal(bf_engine_open(&e, &cfg, NULL), BF_ERR_PREREQUISITE);
    assert_null(e);

    /* the daemon: it serves its listeners, logs the refusal and never completes its startup */
    bd_daemon t;
    bd_options o = opts();
    bd_start(&t, &o);
    bd_wait_log(&t, "does not keep its session");
    assert_true(bd_log_contains(&t, "pool_mode = transaction"));
    assert_true(bd_log_contains(&t, "pool_mode = session, or directly to PostgreSQL"));
    assert_false(bd_log_contains(&t, "startup complete"));
    bfc_client *c = bd_client(t.ipc_url, NULL, 20000, -1);
    bd_check_resp *r = bd_check(c, 0);
    assert_false(r->ready);
    assert_int_not_equal(bd_component(r, "database")->status, BD_CS(READY));
    bd_free(r);
    /* an admin call's session is refused the same way: an error, not an answer */
    Buzz__Backfill__V1__GetRequest get = BUZZ__BACKFILL__V1__GET_REQUEST__INIT;
    get.id = (char *)ID;
    assert_int_equal(bd_call(c, &buzz__backfill__v1__admin__descriptor, "Get", &get.base, NULL),
                     BD_SC(FAILED_PRECONDITION));
    bfc_close(c);
    bd_stop(&t);
    passed++;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_session_pooling_end_to_end),
        cmocka_unit_test(test_transaction_pooling_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
