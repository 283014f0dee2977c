/*
 * test_daemon_guards.c - spec guards proved through real buzz-backfilld processes (issue 27):
 * each case names its guard, and was seen failing with that guard removed.
 *
 * - test_admin_audit_is_atomic: Admin.Start, Pause and Resume through the daemon (ipc boundary),
 *   with a trigger on the audit table that refuses the accepted row of one pinned request ID:
 *   the call answers a typed error, the row is unchanged (state, generation, bound,
 *   checkpoint), and the same request ID succeeds exactly once after the fault. Guard:
 *   actions.c bf_action_apply audits in the transition's transaction; killed by committing
 *   the transition before the audit insert.
 * - test_unregistered_required_id_gates: automatic mode on a migrated database whose
 *   registration the test holds back (a SHARE lock on the backfill table, which the
 *   registration's upsert waits for while reads go on): Readiness.Check answers NOT_READY with
 *   the required ID listed without a state (not registered) and /readyz answers 503, until the
 *   registration commits; then the ID gates as registered (its batches held on their barrier)
 *   and the daemon becomes ready once the backfill completes. Guard: the condition
 *   b.id IS NULL OR ... of the readiness statement (migrate.c readiness_sql); killed by
 *   removing it (READY while the required ID has no row).
 * - test_ipc_boundary_off_refuses_tokenless: a daemon with ipc_boundary = off refuses a
 *   token-less request on its ipc listener (UNAUTHENTICATED, nothing changed, the rejection
 *   audited) and accepts the same request with a token; the daemon with the boundary on
 *   accepts it token-less. Guard: auth.c auth_boundary_applies "auth->ipc_boundary &&";
 *   killed by removing it.
 * - test_readiness_holds_no_thread: a daemon with one transport thread serves WhoAmI while a
 *   Readiness.Check's read waits on a table the test holds locked, and again while a Check
 *   waits (wait_ms) for the gate to change; the waiting Check then answers as soon as a Pause
 *   changes its answer. Guard: readiness.c readiness_check's deferred job (call->may_defer):
 *   killed by taking the threaded path always (WhoAmI then waits for the read, and for the
 *   wait's tick, which answers the Check first).
 * - test_blocked_request_lends_its_thread: a daemon with a transport thread more than the
 *   machine's CPUs (so one parked) serves WhoAmI while as many Pauses as CPUs wait inside
 *   PostgreSQL for a table the test holds locked, twice (the second time on sessions already
 *   open). Guard: engine.c bf__wait_result's bf__blocks (the engine tells the transport its
 *   thread blocks, and a parked thread takes its place); killed, the second WhoAmI waits for a
 *   Pause to give up (its lock timeout).
 * - test_deferred_read_loses_its_backend: a Check whose read is deferred (held by the test's
 *   lock) when its backend is terminated is answered at once, the database UNKNOWN, and the
 *   session reconnects for the next Check and Get. Guard: engine.c exec_take's end of a read
 *   whose connection failed (PQconsumeInput); killed by waiting again instead (the Check is
 *   never answered).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "bt.h"
#include "daemon.h"
#include "http_get.h"

#define ITEMS   "c09.items_v1"
#define RUNNING "c09.running_v1"
#define REQ     "c13.req_v1"
#define K_REQ   1301 /* the barrier of its batches (tests/support/test_definitions.c) */
#define OK      BD_SC(OK)

static PGconn *pg;
static int passed;
#define CASES 5

static int setup(void **state)
{
    (void)state;
    pg = bd_suite_open("daemon_guards");
    bt_make_items(pg, "c09_items", 100);
    bd_migrate(NULL);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bd_suite_close(NULL, pg, passed != CASES);
    return 0;
}

/* state, generation, bound and checkpoint of id as one text */
static char *row_text(PGconn *c, const char *id)
{
    char *s = bt_text(c,
                      "SELECT concat_ws('|', state, generation, bound::text, checkpoint::text)"
                      " FROM buzz_backfill.backfill WHERE id = '%s'",
                      id);
    assert_non_null(s);
    return s;
}

static long long accepted(PGconn *c, const char *rid)
{
    return bt_int(c,
                  "SELECT count(*) FROM buzz_backfill.audit WHERE request_id = '%s'"
                  " AND outcome LIKE 'accepted%%'",
                  rid);
}

/* ---- audit atomicity through the admin API ------------------------------------------- */

static void faulted_then_retried(bfc_client *c, const char *method, const char *rid,
                                 const char *want_state)
{
    bt_exec(pg, "UPDATE public.dg_fault SET request_id = '%s'", rid);
    char *before = row_text(pg, ITEMS);
    bd_control_resp *resp = NULL;
    bd_pin(c, rid);
    int st = bd_control(c, method, ITEMS, &resp);
    if (st == OK)
        fail_msg("%s answered OK although its audit row could not be written", method);
    assert_true(st > 0); /* a typed status, not a lost answer */
    bd_free(resp);
    resp = NULL;
    char *after = row_text(pg, ITEMS);
    assert_string_equal(after, before);
    assert_int_equal(accepted(pg, rid), 0);
    free(after);

    bt_exec(pg, "UPDATE public.dg_fault SET request_id = NULL");
    bd_pin(c, rid);
    assert_int_equal(bd_control(c, method, ITEMS, &resp), OK);
    assert_true(resp->has_replayed);
    assert_false(resp->replayed);
    bd_free(resp);
    resp = NULL;
    bd_pin(c, rid);
    assert_int_equal(bd_control(c, method, ITEMS, &resp), OK);
    assert_true(resp->replayed);
    bd_free(resp);
    char *s = bt_text(pg, "SELECT state FROM buzz_backfill.backfill WHERE id = '%s'", ITEMS);
    assert_string_equal(s, want_state);
    free(s);
    assert_int_equal(accepted(pg, rid), 1);
    free(before);
}

static void test_admin_audit_is_atomic(void **state)
{
    (void)state;
    bd_daemon d;
    bd_options o = bd_defaults();
    o.definitions = "c09";
    o.workers = 0;
    bd_start(&d, &o);
    bd_wait_registered(pg, 2);
    bt_exec(pg,
            "CREATE TABLE public.dg_fault (request_id text); INSERT INTO dg_fault VALUES (NULL);"
            "CREATE FUNCTION public.dg_audit_fault() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN IF NEW.request_id = (SELECT request_id FROM public.dg_fault)"
            "  AND NEW.outcome LIKE 'accepted%%' THEN"
            "  RAISE EXCEPTION 'audit insert refused by the test' USING ERRCODE = '23514';"
            " END IF; RETURN NEW; END $$;"
            "CREATE TRIGGER dg_audit_fault BEFORE INSERT ON buzz_backfill.audit"
            " FOR EACH ROW EXECUTE FUNCTION public.dg_audit_fault()");
    bfc_client *c = bd_client(d.ipc_url, NULL, 0, -1);
    faulted_then_retried(c, "Start", "d9000000000000000000000000000001", "running");
    char *bound =
        bt_text(pg, "SELECT bound::text FROM buzz_backfill.backfill WHERE id = '%s'", ITEMS);
    assert_string_equal(bound, "{100}");
    free(bound);
    faulted_then_retried(c, "Pause", "d9000000000000000000000000000002", "paused");
    faulted_then_retried(c, "Resume", "d9000000000000000000000000000003", "running");
    bfc_close(c);
    bt_exec(pg, "DROP TRIGGER dg_audit_fault ON buzz_backfill.audit");
    bd_stop(&d);
    passed++;
}

/* ---- a required ID without a row gates, through Check and /readyz ---------------------- */

static int readyz(int port)
{
    th_response r = th_request("GET", "127.0.0.1", port, "/readyz", 10000);
    int st = r.status;
    th_response_fini(&r);
    return st;
}

/* A migrated database named name with the tables of the c13 definitions (REQ is required);
 * *g is a connection to it. */
static const char *c13_database(const char *name, PGconn **g)
{
    const char *conninfo = bd_db_new(name);
    *g = bd_connect(conninfo);
    bt_install_barrier(*g);
    bt_make_items(*g, "c13_items", 100);
    bt_make_items(*g, "c13_opt", 100);
    bd_migrate(conninfo);
    return conninfo;
}

static void test_unregistered_required_id_gates(void **state)
{
    (void)state;
    PGconn *g = NULL;
    const char *conninfo = c13_database("dg_gate", &g);
    /* the registration waits for this lock; the readiness reads do not */
    PGconn *holder = bd_connect(conninfo);
    bt_lock(holder, K_REQ); /* and, once registered, its batches wait until released */
    bt_exec(holder, "BEGIN; LOCK TABLE buzz_backfill.backfill IN SHARE MODE");

    int port = bd_free_port();
    char extra[96];
    snprintf(extra, sizeof extra, "http_listen = http://127.0.0.1:%d\n", port);
    bd_options o = bd_defaults();
    o.conninfo = conninfo;
    o.definitions = "c13";
    o.auto_backfill = true;
    o.extra = extra;
    bd_daemon d;
    bd_start(&d, &o);
    bt_wait_lock_waiters(g, 1); /* the registration reached PostgreSQL and waits */
    assert_int_equal(bt_int(g, "SELECT count(*) FROM buzz_backfill.backfill"), 0);

    bfc_client *c = bd_client(d.ipc_url, NULL, 0, 0);
    bd_check_resp *r = bd_check(c, 0);
    if (r->ready)
        fail_msg("ready while the required %s has no row", REQ);
    const Buzz__Backfill__V1__Component *comp = bd_component(r, "backfills");
    assert_int_equal(comp->status, BD_CS(NOT_READY));
    assert_int_equal(r->n_gating, 1);
    assert_string_equal(r->gating[0]->id, REQ);
    assert_false(r->gating[0]->has_state); /* required, not registered */
    bd_free(r);
    /* /readyz is the same computation; wait for its listener, then it says not ready */
    int st = -1;
    for (int i = 0; i < 1000 && (st = readyz(port)) == -1; i++)
        bd_sleep_ms(10);
    assert_int_equal(st, 503);

    bt_exec(holder, "COMMIT");
    bd_wait_registered(g, 2);
    r = bd_check(c, 0);
    assert_false(r->ready);
    assert_int_equal(r->n_gating, 1);
    assert_string_equal(r->gating[0]->id, REQ);
    assert_true(r->gating[0]->has_state);
    bd_free(r);
    assert_int_equal(readyz(port), 503);
    /* automatic mode starts it and workers complete it: ready */
    bt_unlock(holder, K_REQ);
    for (int i = 0; i < 12; i++) {
        r = bd_check(c, 5000);
        bool ready = r->ready;
        bd_free(r);
        if (ready)
            break;
    }
    r = bd_check(c, 0);
    assert_true(r->ready);
    bd_free(r);
    assert_int_equal(readyz(port), 200);
    bfc_close(c);
    bd_stop(&d);
    PQfinish(holder);
    PQfinish(g);
    bd_db_drop_last();
    passed++;
}

/* ---- ipc_boundary = off ----------------------------------------------------------------- */

static void test_ipc_boundary_off_refuses_tokenless(void **state)
{
    (void)state;
    bd_options o = bd_defaults();
    o.definitions = "c09";
    o.workers = 0;
    o.ipc_boundary = false;
    bd_daemon d;
    bd_start(&d, &o);
    bd_wait_registered(pg, 2);
    char *before = row_text(pg, RUNNING);
    long long audits = bt_int(pg, "SELECT count(*) FROM buzz_backfill.audit");

    bfc_client *c = bd_client(d.ipc_url, NULL, 0, -1);
    bd_control_resp *resp = NULL;
    int st = bd_control(c, "Start", RUNNING, &resp);
    if (st != BD_SC(UNAUTHENTICATED))
        fail_msg("a token-less ipc Start with ipc_boundary = off answered %d, want %d", st,
                 BD_SC(UNAUTHENTICATED));
    bd_free(resp);
    bfc_close(c);
    char *after = row_text(pg, RUNNING);
    assert_string_equal(after, before);
    free(after);
    assert_true(bt_int(pg,
                       "SELECT count(*) FROM buzz_backfill.audit WHERE action = 'start'"
                       " AND backfill_id = '%s' AND actor IS NULL",
                       RUNNING) == 1);
    assert_true(bt_int(pg, "SELECT count(*) FROM buzz_backfill.audit") > audits);

    /* a token on the same listener is authorized as anywhere else */
    c = bd_client(d.ipc_url, bd_token(BFT_CAP_ALL), 0, -1);
    resp = NULL;
    assert_int_equal(bd_control(c, "Start", RUNNING, &resp), OK);
    bd_free(resp);
    bfc_close(c);
    char *running =
        bt_text(pg, "SELECT state FROM buzz_backfill.backfill WHERE id = '%s'", RUNNING);
    assert_string_equal(running, "running");
    free(running);
    bd_stop(&d);

    /* with the boundary on, the token-less request is the boundary's */
    o.ipc_boundary = true;
    bd_start(&d, &o);
    c = bd_client(d.ipc_url, NULL, 0, -1);
    resp = NULL;
    assert_int_equal(bd_control(c, "Pause", RUNNING, &resp), OK);
    bd_free(resp);
    bfc_close(c);
    bd_stop(&d);
    free(before);
    passed++;
}

/* ---- a Check holds no thread ----------------------------------------------------------- */

typedef struct waiting_check {
    const char *url;
    uint32_t wait_ms;
    bd_check_resp *resp;
    atomic_bool answered;
} waiting_check;

static void *waiting_check_main(void *arg)
{
    waiting_check *w = arg;
    bfc_client *c = bd_client(w->url, NULL, 60000, -1);
    w->resp = bd_check(c, w->wait_ms);
    atomic_store(&w->answered, true);
    bfc_close(c);
    return NULL;
}

/* WhoAmI through the daemon; true when it answered OK. */
static bool who_am_i(const char *url)
{
    bfc_client *c = bd_client(url, NULL, 20000, -1);
    Buzz__Backfill__V1__WhoAmIRequest req = BUZZ__BACKFILL__V1__WHO_AM_IREQUEST__INIT;
    ProtobufCMessage *out = NULL;
    int code = bd_call(c, &buzz__backfill__v1__admin__descriptor, "WhoAmI", &req.base, &out);
    bd_free(out);
    bfc_close(c);
    return code == OK;
}

/* A daemon with one transport thread and no workers on a c13 database, its required backfill
 * started and running (the gate shut), and the Check's statement prepared on the session it
 * lends next (a prepare would wait for the test's lock on the thread: once per connection). */
typedef struct one_thread {
    PGconn *g, *holder;
    bd_daemon d;
    bfc_client *c;
} one_thread;

/* The daemon of one_thread_start with `threads` transport threads (and lock_timeout_ms, 0: the
 * default). */
static void guard_daemon_start(one_thread *f, const char *db, int threads, int lock_timeout_ms)
{
    const char *conninfo = c13_database(db, &f->g);
    bd_options o = bd_defaults();
    o.conninfo = conninfo;
    o.definitions = "c13";
    o.auto_backfill = true;
    o.workers = 0;
    o.threads = threads;
    o.lock_timeout_ms = lock_timeout_ms;
    bd_start(&f->d, &o);
    bd_wait_registered(f->g, 2);
    f->c = bd_client(f->d.ipc_url, NULL, 0, 0);
    bd_free(bd_wait_state(f->c, REQ, BUZZ__BACKFILL__V1__STATE__RUNNING));
    bd_free(bd_check(f->c, 0));
    f->holder = bd_connect(conninfo);
}

static void one_thread_start(one_thread *f, const char *db)
{
    guard_daemon_start(f, db, 1, 0);
}

/* Lock the backfill table, then start w's Check: it returns once the Check's read waits for the
 * lock inside PostgreSQL. The caller COMMITs on f->holder. */
static void one_thread_hold_check(one_thread *f, waiting_check *w, pthread_t *th)
{
    bt_exec(f->holder, "BEGIN; LOCK TABLE buzz_backfill.backfill IN ACCESS EXCLUSIVE MODE");
    w->url = f->d.ipc_url;
    assert_int_equal(pthread_create(th, NULL, waiting_check_main, w), 0);
    bt_wait_lock_waiters(f->g, 1);
}

static void one_thread_stop(one_thread *f)
{
    bfc_close(f->c);
    bd_stop(&f->d);
    PQfinish(f->holder);
    PQfinish(f->g);
    bd_db_drop_last();
}

static void test_readiness_holds_no_thread(void **state)
{
    (void)state;
    one_thread f;
    one_thread_start(&f, "dg_defer");

    /* a Check's read in PostgreSQL, held by the test's lock: the one thread serves on */
    waiting_check first = {.wait_ms = 0};
    pthread_t th;
    one_thread_hold_check(&f, &first, &th);
    assert_true(who_am_i(f.d.ipc_url));
    assert_false(atomic_load(&first.answered));
    bt_exec(f.holder, "COMMIT");
    pthread_join(th, NULL);
    assert_false(first.resp->ready);
    bd_free(first.resp);

    /* a Check waiting for the gate to change: the one thread serves on */
    waiting_check waiter = {.wait_ms = 30000};
    one_thread_hold_check(&f, &waiter, &th); /* its first read */
    bt_exec(f.holder, "COMMIT");
    /* its first read has answered once its backend is idle again: it waits */
    for (int i = 0;
         bt_int(f.g, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                     " AND wait_event_type = 'Lock'") > 0;
         i++) {
        assert_true(i < 6000);
        bd_sleep_ms(10);
    }
    assert_true(who_am_i(f.d.ipc_url));
    assert_false(atomic_load(&waiter.answered));
    /* a change answers it at once (the notification of the transition) */
    bd_control_ok(f.c, "Pause", REQ);
    pthread_join(th, NULL);
    assert_int_equal(waiter.resp->n_gating, 1);
    assert_int_equal(waiter.resp->gating[0]->state, BUZZ__BACKFILL__V1__STATE__PAUSED);
    bd_free(waiter.resp);
    one_thread_stop(&f);
    passed++;
}

static void test_deferred_read_loses_its_backend(void **state)
{
    (void)state;
    one_thread f;
    one_thread_start(&f, "dg_lost");
    waiting_check lost = {.wait_ms = 0};
    pthread_t th;
    one_thread_hold_check(&f, &lost, &th);
    assert_int_equal(bt_int(f.g,
                            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                            " WHERE datname = current_database() AND wait_event_type = 'Lock'"),
                     1);
    pthread_join(th, NULL); /* answered while the lock is still held */
    assert_false(lost.resp->ready);
    assert_int_equal(bd_component(lost.resp, "database")->status, BD_CS(UNKNOWN_STATUS));
    bd_free(lost.resp);
    bt_exec(f.holder, "COMMIT");

    /* the session reconnects: the next Check and Get are answered from PostgreSQL */
    bd_check_resp *r = bd_check(f.c, 0);
    assert_int_equal(bd_component(r, "database")->status, BD_CS(READY));
    assert_int_equal(r->n_gating, 1);
    assert_string_equal(r->gating[0]->id, REQ);
    bd_free(r);
    bd_get_resp *gr = bd_get(f.c, REQ);
    assert_int_equal(gr->backfill->state, BUZZ__BACKFILL__V1__STATE__RUNNING);
    bd_free(gr);
    assert_true(who_am_i(f.d.ipc_url));
    one_thread_stop(&f);
    passed++;
}

/* ---- a thread blocked in a request lends its place ------------------------------------- */

typedef struct waiting_control {
    const char *url;
    int code;
    atomic_bool answered;
} waiting_control;

static void *waiting_control_main(void *arg)
{
    waiting_control *w = arg;
    bfc_client *c = bd_client(w->url, NULL, 60000, -1);
    bd_control_resp *resp = NULL;
    w->code = bd_control(c, "Pause", REQ, &resp);
    bd_free(resp);
    atomic_store(&w->answered, true);
    bfc_close(c);
    return NULL;
}

/* As many Pauses as CPUs (n) wait for the backfill table, which holder locks, inside PostgreSQL;
 * WhoAmI must be answered meanwhile; then the lock goes and every Pause answers OK. */
static void pauses_wait_who_am_i_answers(const char *url, PGconn *holder, PGconn *g, long n)
{
    bt_exec(holder, "BEGIN; LOCK TABLE buzz_backfill.backfill IN ACCESS EXCLUSIVE MODE");
    waiting_control w[8];
    pthread_t th[8];
    for (long i = 0; i < n; i++) {
        w[i] = (waiting_control){.url = url};
        assert_int_equal(pthread_create(&th[i], NULL, waiting_control_main, &w[i]), 0);
    }
    bt_wait_lock_waiters(g, (int)n); /* every active thread blocked in PostgreSQL */
    assert_true(who_am_i(url));
    for (long i = 0; i < n; i++)
        assert_false(atomic_load(&w[i].answered));
    bt_exec(holder, "COMMIT");
    for (long i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].code, OK);
    }
}

/* A daemon with one transport thread more than the machine has CPUs: as many threads wait for
 * requests as there are CPUs, and the last one is parked. As many Pauses as CPUs wait for the
 * backfill table the test holds locked, inside PostgreSQL: WhoAmI is answered meanwhile, by the
 * parked thread. The first round opens the Pauses' sessions (a connect lends the thread's place
 * too, engine.c engine_connect) and prepares their statements; the second one, on those
 * sessions, blocks only in waits for results. Guard: engine.c bf__wait_result's bf__blocks (the
 * engine tells the thread's pool that it blocks: session.c session_engine_blocks, native.c
 * native_lend): killed, the second round's WhoAmI waits until a Pause gives up (its lock
 * timeout), so a Pause has answered by then. */
static void test_blocked_request_lends_its_thread(void **state)
{
    (void)state;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1 || cpus > 8)
        cpus = cpus < 1 ? 1 : 8;
    one_thread f;
    /* the Pauses wait (lock timeout 8 s) while the test holds the lock */
    guard_daemon_start(&f, "dg_lend", (int)cpus + 1, 8000);
    pauses_wait_who_am_i_answers(f.d.ipc_url, f.holder, f.g, cpus); /* sessions opened, warm */
    pauses_wait_who_am_i_answers(f.d.ipc_url, f.holder, f.g, cpus);
    one_thread_stop(&f);
    passed++;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_admin_audit_is_atomic),
        cmocka_unit_test(test_unregistered_required_id_gates),
        cmocka_unit_test(test_ipc_boundary_off_refuses_tokenless),
        cmocka_unit_test(test_readiness_holds_no_thread),
        cmocka_unit_test(test_blocked_request_lends_its_thread),
        cmocka_unit_test(test_deferred_read_loses_its_backend),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
