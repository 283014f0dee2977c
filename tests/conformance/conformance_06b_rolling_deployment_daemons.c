/*
 * conformance_06b_rolling_deployment_daemons.c - spec conformance test 6, "Rolling deployment",
 * with real buzz-backfilld processes (conformance_06 proves the same at the engine level).
 *
 * Processes A and B load the same definitions module (the same stable ID c06b.items_v1 and
 * behaviour; only the informational revision differs: "rev-a", "rev-b"); process C loads a
 * module lacking that ID (it runs c06b.other_v1).
 *
 *   registration  A then B, B then A, and a restart of one: one row, one readiness obligation
 *                 (required), pending with generation 0 and its first registration time; the
 *                 revision is simply the last registration's. C cannot start the ID (fails
 *                 closed: FAILED_PRECONDITION, row untouched).
 *   takeover      A and B are launched together in automatic mode while the test holds
 *                 barrier 601, which every batch of the ID waits on. Whichever process starts
 *                 it and whichever claims it is learnt from the row (claim owner host:pid:wN),
 *                 never chosen or predicted. Both report one gating obligation for the ID. The
 *                 owner is killed with SIGKILL while its batch waits at the barrier inside its
 *                 transaction; the other process is stopped (SIGSTOP) so that C is the only
 *                 live process when the lease expires: C never claims (the row keeps the dead
 *                 owner's claim and generation although workers were woken). The survivor is
 *                 continued and takes over after the lease with a new generation (the dead
 *                 owner's orphaned statement has ended by then: the daemon keeps
 *                 statement_timeout inside the lease). While the survivor's batch waits at the
 *                 barrier, an operator pauses and resumes the ID through C's admin API, and a
 *                 worker claims it again: the first batch is now stale and waits beside the
 *                 new one. Then the barrier opens: the stale batch is rejected by the
 *                 generation fence (no row is repaired twice: counter = 1 everywhere), the
 *                 backfill completes from the committed checkpoint, and readiness opens. The test
 *                 definition's mutation is deliberately not idempotent (every selected row gets
 *                 counter + 1), so the fence alone stands between a stale batch and a second
 *                 application.
 * C's innocence is observed over a window (the lease has expired, every worker was woken by a
 * notification, then two of C's one-second idle polls pass): a negative cannot be awaited.
 *
 * Guards proved across processes: the batch fence (registry.c add_fence: generation and claim
 * owner, with buzz_backfill.batch_verdict) against a stale batch's commit (without it the stale
 * batch commits and 50 rows are applied twice; conformance_01 proves the generation alone);
 * takeover only after the lease (worker.c claim_sql "claim_expires_at <= clock_timestamp()":
 * without it the other process takes the live owner's claim). Also exercised here, and falsified at
 * the engine level by conformance_06: registration as an idempotent upsert by stable ID (backfill.c
 * bf_register) and claims restricted to IDs the process has a definition for (worker.c
 * bf_worker_claim's registry filter and worker_claim_id's lookup; two independent guards).
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
#include "daemon.h"

#define ID       "c06b.items_v1"
#define OTHER    "c06b.other_v1"
#define BARRIER  601
#define ROWS     500
#define LEASE_MS 3000
#define OK       BD_SC(OK)

static PGconn *pg;
static bd_daemon c_proc; /* the process without the definition, up throughout */
static int passed;

static int setup(void **state)
{
    pg = bd_suite_open("c06b");
    bt_install_barrier(pg);
    bt_make_items(pg, "c06b_items", ROWS);
    bt_make_items(pg, "c06b_other", 100);
    bd_migrate(NULL);
    bd_options o = bd_defaults();
    o.definitions = "c06b_other";
    o.lease_ms = LEASE_MS;
    bd_start(&c_proc, &o);
    return 0;
}

static int teardown(void **state)
{
    bd_suite_close(NULL, pg, passed != 2);
    return 0;
}

static bd_options opts(const char *revision, bool automatic)
{
    bd_options o = bd_defaults();
    o.definitions = "c06b";
    o.revision = revision;
    o.auto_backfill = automatic;
    o.lease_ms = LEASE_MS;
    return o;
}

/* Count of the ID's rows, and its registration facts "state|generation|required|registered". */
static char *registration(void)
{
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM buzz_backfill.backfill WHERE id = '" ID "'"),
                     1);
    return bt_text(pg, "SELECT concat_ws('|', state, generation, required, registered_at,"
                       " bound IS NULL) FROM buzz_backfill.backfill WHERE id = '" ID "'");
}

static void assert_revision(const char *want)
{
    char *rev = bt_text(pg, "SELECT revision FROM buzz_backfill.backfill WHERE id = '" ID "'");
    assert_string_equal(rev, want);
    free(rev);
}

static void start_registered(bd_daemon *d, const char *revision)
{
    bd_options o = opts(revision, false);
    bd_start(d, &o);
    bd_wait_log(d, "registered 1 definition");
}

/* ---- registration in either order -------------------------------------------------------- */

static void test_registration_in_either_order(void **state)
{
    bd_daemon a, b;
    start_registered(&a, "rev-a");
    char *first = registration();
    assert_memory_equal(first, "pending|0|t|", 12);
    start_registered(&b, "rev-b");
    char *now = registration();
    assert_string_equal(now, first);
    free(now);
    assert_revision("rev-b"); /* metadata: the last registration, nothing more */

    /* the process without the definition fails closed */
    bfc_client *c = bd_client(c_proc.ipc_url, NULL, 0, 0);
    bd_control_resp *r = NULL;
    assert_int_equal(bd_control(c, "Start", ID, &r), BD_SC(FAILED_PRECONDITION));
    assert_non_null(r);
    assert_int_equal(r->backfill->state, BD_ST(PENDING));
    bd_free(r);
    bfc_close(c);
    now = registration();
    assert_string_equal(now, first);
    free(now);

    /* the other order, then a restart of one of them */
    bd_stop(&a);
    bd_stop(&b);
    start_registered(&b, "rev-b");
    start_registered(&a, "rev-a");
    now = registration();
    assert_string_equal(now, first);
    free(now);
    assert_revision("rev-a");
    bd_stop(&b);
    start_registered(&b, "rev-b2");
    now = registration();
    assert_string_equal(now, first);
    free(now);
    assert_revision("rev-b2");
    bd_stop(&a);
    bd_stop(&b);
    free(first);
    passed++;
}

/* ---- either claims; the stale owner is fenced; the stranger never claims ---------------- */

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

static long long generation(void)
{
    return bt_int(pg, "SELECT generation FROM buzz_backfill.backfill WHERE id = '" ID "'");
}

/* The engine logs every claim and takeover ("claimed <id> at generation N"). */
static bool claimed_by(const bd_daemon *d)
{
    return bd_log_contains(d, "claimed " ID) || bd_log_contains(d, "took over " ID);
}

static void assert_one_obligation(const bd_daemon *d)
{
    bfc_client *c = bd_client(d->ipc_url, NULL, 0, 0);
    bd_check_resp *r = bd_check(c, 0);
    assert_false(r->ready);
    assert_int_equal(r->n_gating, 1);
    assert_string_equal(r->gating[0]->id, ID);
    assert_int_equal(r->gating[0]->state, BD_ST(RUNNING));
    bd_free(r);
    bfc_close(c);
}

static void test_either_claims_and_the_stale_owner_is_fenced(void **state)
{
    PGconn *holder = bt_connect();
    bt_lock(holder, BARRIER);
    bd_daemon a, b;
    bd_options oa = opts("rev-a", true), ob = opts("rev-b", true);
    bd_launch(&a, &oa); /* together: either may start it, either may claim it */
    bd_launch(&b, &ob);
    bd_wait_up(&a);
    bd_wait_up(&b);
    bt_wait_waiters(pg, BARRIER, 1); /* the owner's first batch waits inside its transaction */
    pid_t owner = owner_pid();
    long long gen = generation();
    assert_true(owner == a.pid || owner == b.pid);
    bd_daemon *dead = owner == a.pid ? &a : &b, *survivor = owner == a.pid ? &b : &a;
    char *reg = registration();
    assert_memory_equal(reg, "running|", 8);
    free(reg);
    assert_one_obligation(&a);
    assert_one_obligation(&b);

    /* freeze the survivor, kill the owner: only C lives when the lease expires */
    assert_int_equal(kill(survivor->pid, SIGSTOP), 0);
    assert_int_equal(owner_pid(), owner); /* nobody took over before the freeze */
    assert_int_equal(generation(), gen);
    int orphan = bt_barrier_waiter_pid(pg, BARRIER);
    assert_true(orphan > 0);
    bd_kill(dead);
    for (int i = 0; i < 60000; i++) {
        if (bt_int(pg, "SELECT count(*) FROM buzz_backfill.backfill WHERE id = '" ID "'"
                       " AND claim_expires_at <= clock_timestamp()") == 1)
            break;
        bd_sleep_ms(1);
    }
    /* wake every idle worker, then give C two of its idle polls (1 s each) to misbehave */
    bt_exec(pg, "SELECT pg_notify('buzz_backfill', '" ID "')");
    bd_sleep_ms(2500);
    assert_int_equal(owner_pid(), owner);
    assert_int_equal(generation(), gen);
    assert_false(claimed_by(&c_proc));

    /* the dead owner's orphaned statement ended at its statement_timeout, which the daemon
     * keeps inside the lease: no stale statement outlives the claim it started under */
    bt_wait_backend_gone(pg, orphan);
    /* the survivor takes over with a new generation; its batch meets the barrier */
    assert_int_equal(kill(survivor->pid, SIGCONT), 0);
    for (int i = 0; i < 60000 && owner_pid() != survivor->pid; i++)
        bd_sleep_ms(1);
    assert_int_equal(owner_pid(), survivor->pid);
    long long taken = generation();
    assert_true(taken > gen);
    bt_wait_waiters(pg, BARRIER, 1);

    /* an operator's pause and resume, through C (which lacks the definition but serves the
     * admin API), make that batch stale while it waits; a worker claims again at a newer
     * generation and its batch meets the barrier beside the stale one */
    bfc_client *op = bd_client(c_proc.ipc_url, NULL, 10000, 3);
    assert_int_equal(bd_control(op, "Pause", ID, NULL), BD_SC(OK));
    assert_int_equal(bd_control(op, "Resume", ID, NULL), BD_SC(OK));
    bfc_close(op);
    bt_wait_waiters(pg, BARRIER, 2);
    assert_true(generation() > taken + 2);

    /* open the barrier: the stale batch meets the fence, the new claim completes the run */
    bt_unlock(holder, BARRIER);
    for (int i = 0; i < 60000; i++) { /* until the lifecycle settles: completed (or failed) */
        if (bt_int(pg, "SELECT count(*) FROM buzz_backfill.backfill WHERE id = '" ID "'"
                       " AND state IN ('completed', 'failed', 'blocked')") == 1)
            break;
        bd_sleep_ms(1);
    }
    /* no row was mutated twice: the stale batch committed nothing */
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM c06b_items WHERE counter <> 1"), 0);
    bfc_client *c = bd_client(survivor->ipc_url, NULL, 40000, -1);
    bool ready = false;
    for (int i = 0; i < 12 && !ready; i++) {
        bd_check_resp *r = bd_check(c, 5000);
        ready = r->ready;
        bd_free(r);
    }
    assert_true(ready);
    bd_get_resp *g = bd_get(c, ID);
    assert_int_equal(g->backfill->state, BD_ST(COMPLETED));
    assert_int_equal(g->backfill->progress->rows_committed, ROWS);
    bd_free(g);
    bfc_close(c);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM c06b_items WHERE counter <> 1"
                                " OR fixed IS DISTINCT FROM val * 2"),
                     0);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM buzz_backfill.backfill WHERE id = '" ID "'"),
                     1);
    assert_false(claimed_by(&c_proc)); /* C never claimed it */
    bd_stop(survivor);
    bd_stop(&c_proc);
    PQfinish(holder);
    passed++;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registration_in_either_order),
        cmocka_unit_test(test_either_claims_and_the_stale_owner_is_fenced),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
