/*
 * test_failover.c - a PostgreSQL failover while backfills run: the primary of a streaming pair
 * (scripts/pg.sh failover-start: a scratch primary and its asynchronous standby) is shut down
 * immediately, the standby promoted, and two real buzz-backfilld processes connected with the
 * pair's multi-host URL (target_session_attrs=read-write) resume on the new primary without an
 * operator.
 *
 * What it proves, on the non-idempotent robustness backfills (counter + 1 per visit,
 * tests/support/test_definitions.c "rob"; an audit trigger records every committed row
 * update):
 *
 *   - data and checkpoints are lost together: asynchronous replication may lose the last
 *     commits, and on the promoted database, in one snapshot, every row at or before the
 *     checkpoint has counter 1 and every row after it counter 0 (nothing doubled or skipped
 *     relative to the checkpoint). Guard: the batch's rows and its checkpoint commit in one
 *     transaction (a checkpoint committed apart from its rows shows as 0s before it or 1s
 *     after it);
 *   - claims stay fenced: the claims are rows of the promoted database too, so the work
 *     resumes under the claim it holds there (its owner back within the lease, its fence
 *     checked against the promoted checkpoint) or a takeover after it expired on the promoted
 *     database's clock; the generation never goes back, and at the end every counter is
 *     exactly 1 and every row audited exactly once;
 *   - the old primary, brought back as a standby (as a fenced old primary is), is read-only and
 *     no engine session connects to it (target_session_attrs=read-write in the URL skips it);
 *   - the time to resume, from the promotion to both checkpoints moving on the new primary, is
 *     printed and within FO_RESUME_MS (the lease, a poll, a step, a reconnect, with a margin).
 *
 * Runs serially (tests/robustness); it leaves the shared cluster alone (the pair is its own).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "bt.h"
#include "daemon.h"

#define FO_LEASE_MS 3000
#define FO_STMT_MS  1500
#define FO_STEP_MS  200
#define FO_POLL_MS  1000
/* a takeover: the claim expires, a poll finds it, a step runs (test_robustness.c's bound) */
#define FO_TAKEOVER_MS (FO_LEASE_MS + FO_POLL_MS + FO_STEP_MS + FO_STMT_MS)
/* after a failover the daemons also reconnect (each use tries again) and the promoted server is
 * still finishing its end-of-recovery checkpoint: as test_robustness's restart bound */
#define FO_RESUME_MS (5 * FO_TAKEOVER_MS)
#define FO_ROWS      12000
#define FO_WAIT_MS   90000

#define FO_XSTR(x) #x
#define FO_STR(x)  FO_XSTR(x)

static const char *const ids[2] = {"rob.decl_v1", "rob.cb_v1"};
static const char *const tables[2] = {"rob_decl", "rob_cb"};
/* the declarative backfill runs its batches inside PostgreSQL, many times faster than the
 * callback one: more rows, so that it still runs when the primary goes */
static const long rows[2] = {5 * FO_ROWS, FO_ROWS};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* scripts/pg.sh sub; its first line of output into out (may be NULL); fails the test unless it
 * exits 0. */
static void fo_pg_sh(const char *sub, char *out, size_t cap)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s/scripts/pg.sh' %s", BUZZ_SOURCE_DIR, sub);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[512] = "";
    if (fgets(line, sizeof line, p) == NULL)
        line[0] = '\0';
    char rest[256];
    while (fgets(rest, sizeof rest, p) != NULL)
        ;
    int st = pclose(p);
    if (st != 0)
        fail_msg("pg.sh %s failed (status %d)", sub, st);
    line[strcspn(line, "\n")] = '\0';
    if (out != NULL)
        snprintf(out, cap, "%s", line);
}

static long long fo_checkpoint(PGconn *pg, int t)
{
    return bt_int(pg,
                  "SELECT coalesce((checkpoint[1])::bigint, 0) FROM buzz_backfill.backfill"
                  " WHERE id = '%s'",
                  ids[t]);
}

static long long fo_generation(PGconn *pg, int t)
{
    return bt_int(pg, "SELECT generation FROM buzz_backfill.backfill WHERE id = '%s'", ids[t]);
}

/* In one snapshot: rows of table t that disagree with its checkpoint (counter 1 up to it, 0
 * after it); the checkpoint into *cp. */
static long long fo_disagreeing(PGconn *pg, int t, long long *cp)
{
    char *s = bt_text(pg,
                      "SELECT b.cp || ' ' || count(*) FILTER (WHERE (r.id <= b.cp AND"
                      " r.counter <> 1) OR (r.id > b.cp AND r.counter <> 0))"
                      " FROM public.%s r, (SELECT coalesce((checkpoint[1])::bigint, 0) AS cp"
                      " FROM buzz_backfill.backfill WHERE id = '%s') b GROUP BY b.cp",
                      tables[t], ids[t]);
    long long bad = -1;
    assert_int_equal(sscanf(s, "%lld %lld", cp, &bad), 2);
    free(s);
    return bad;
}

static void fo_failover(void **state)
{
    (void)state;
    char url[512];
    fo_pg_sh("failover-start", url, sizeof url);
    assert_non_null(strstr(url, "target_session_attrs=read-write"));
    /* the suite database lives on the pair: bt_db_create follows BUZZ_TEST_PG_URL */
    setenv("BUZZ_TEST_PG_URL", url, 1);
    PGconn *pg = bd_suite_open("failover");
    const char *conninfo = bt_db_conninfo();
    bt_install_barrier(pg);
    for (int t = 0; t < 2; t++)
        bt_make_items(pg, tables[t], rows[t]);
    /* the audit: one row per committed update of a rob row (replicated with it) */
    bt_exec(pg, "CREATE TABLE public.fo_audit (tbl text NOT NULL, id bigint NOT NULL);"
                "CREATE FUNCTION public.fo_audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                " INSERT INTO public.fo_audit VALUES (TG_TABLE_NAME, NEW.id); RETURN NEW; END $$;"
                "CREATE TRIGGER fo_audit AFTER UPDATE ON public.rob_decl FOR EACH ROW"
                " EXECUTE FUNCTION public.fo_audit();"
                "CREATE TRIGGER fo_audit AFTER UPDATE ON public.rob_cb FOR EACH ROW"
                " EXECUTE FUNCTION public.fo_audit()");
    bd_migrate(conninfo);

    bd_options o = bd_defaults();
    o.definitions = "rob";
    o.tcp = false;
    o.workers = 2;
    o.lease_ms = FO_LEASE_MS;
    o.statement_timeout_ms = FO_STMT_MS;
    o.lock_timeout_ms = FO_STMT_MS;
    o.step_batches = 1;
    o.extra = "step_ms = " FO_STR(FO_STEP_MS) "\n";
    bd_daemon d[2];
    bd_launch(&d[0], &o);
    bd_launch(&d[1], &o);
    bd_wait_up(&d[0]);
    bd_wait_up(&d[1]);
    bd_wait_registered(pg, 2);
    bfc_client *c = bd_client(d[0].ipc_url, NULL, 10000, 3);
    for (int t = 0; t < 2; t++) {
        bd_control_resp *resp = NULL;
        assert_int_equal(bd_control(c, "Start", ids[t], &resp), BD_SC(OK));
        bd_free(resp);
    }

    /* both run (an observable amount of work done, far from done) */
    long long cp_seen[2] = {0, 0};
    for (int64_t t0 = now_ms();; usleep(10000)) {
        cp_seen[0] = fo_checkpoint(pg, 0);
        cp_seen[1] = fo_checkpoint(pg, 1);
        if (cp_seen[0] >= FO_ROWS / 80 && cp_seen[1] >= FO_ROWS / 80)
            break;
        if (now_ms() - t0 > FO_WAIT_MS)
            fail_msg("the backfills did not run (checkpoints %lld, %lld)", cp_seen[0], cp_seen[1]);
    }
    assert_true(cp_seen[0] < rows[0] / 2 && cp_seen[1] < rows[1] / 2);
    long long gen_before[2] = {fo_generation(pg, 0), fo_generation(pg, 1)};

    /* the primary crashes with batches in flight; the standby is promoted */
    PQfinish(pg);
    fo_pg_sh("failover-primary-stop", NULL, 0);
    fo_pg_sh("failover-promote", NULL, 0);
    int64_t t0 = now_ms();
    pg = bd_connect(conninfo); /* the multi-host URL finds the new primary */
    assert_int_equal(bt_int(pg, "SELECT pg_is_in_recovery()::int"), 0);

    /* what the promoted database holds agrees with itself: rows and checkpoints lost together */
    long long cp_promoted[2];
    for (int t = 0; t < 2; t++) {
        long long bad = fo_disagreeing(pg, t, &cp_promoted[t]);
        printf("# %s: checkpoint %lld seen on the old primary, %lld on the promoted one;"
               " rows disagreeing with it: %lld\n",
               ids[t], cp_seen[t], cp_promoted[t], bad);
        assert_int_equal(bad, 0);
        /* work left for the new primary: the failover met the backfill running */
        if (cp_promoted[t] >= rows[t])
            fail_msg("%s finished before the failover (%lld rows)", ids[t], cp_promoted[t]);
    }

    /* the daemons resume on the new primary by themselves */
    bool moved[2] = {false, false};
    while (!moved[0] || !moved[1]) {
        for (int t = 0; t < 2; t++)
            if (!moved[t] && fo_checkpoint(pg, t) > cp_promoted[t]) {
                moved[t] = true;
                printf("# %s: resumed %lld ms after the promotion (bound %d ms)\n", ids[t],
                       (long long)(now_ms() - t0), FO_RESUME_MS);
            }
        if (now_ms() - t0 > FO_WAIT_MS)
            fail_msg("no progress on the new primary within %d ms", FO_WAIT_MS);
        usleep(5000);
    }
    int64_t resume_ms = now_ms() - t0;
    if (resume_ms > FO_RESUME_MS)
        fail_msg("resumed %lld ms after the promotion, bound %d ms", (long long)resume_ms,
                 FO_RESUME_MS);
    /* a claim is a row: an owner back within its lease goes on under it (the same generation,
     * its fence re-reads the promoted checkpoint), otherwise a takeover moves the generation;
     * it never goes back */
    for (int t = 0; t < 2; t++) {
        long long g = fo_generation(pg, t);
        printf("# %s: generation %lld before the failover, %lld after\n", ids[t], gen_before[t], g);
        assert_true(g >= gen_before[t]);
    }

    /* the old primary comes back as a standby: read-only, and no engine session on it */
    fo_pg_sh("failover-old-primary-start", NULL, 0);
    char old_url[256];
    {
        const char *p = strstr(url, "127.0.0.1:");
        assert_non_null(p);
        int port = atoi(p + strlen("127.0.0.1:"));
        snprintf(old_url, sizeof old_url, "postgresql://postgres@127.0.0.1:%d/postgres", port);
    }
    PGconn *old = bd_connect(old_url);
    assert_int_equal(bt_int(old, "SELECT pg_is_in_recovery()::int"), 1);

    for (int t = 0; t < 2; t++) {
        bd_get_resp *g = bd_wait_state(c, ids[t], BD_ST(COMPLETED));
        bd_free(g);
    }
    assert_int_equal(bt_int(old, "SELECT count(*) FROM pg_stat_activity"
                                 " WHERE application_name LIKE 'buzz-backfill%%'"),
                     0);
    assert_int_equal(bt_int(old, "SELECT pg_is_in_recovery()::int"), 1);
    PQfinish(old);

    /* exactly once relative to the promoted database */
    for (int t = 0; t < 2; t++) {
        assert_int_equal(bt_int(pg, "SELECT count(*) FROM public.%s WHERE counter <> 1", tables[t]),
                         0);
        assert_int_equal(bt_int(pg, "SELECT count(*) FROM public.%s", tables[t]), rows[t]);
        /* every row audited exactly once: no update lost with its checkpoint was redone twice */
        assert_int_equal(bt_int(pg,
                                "SELECT count(*) FROM (SELECT id FROM public.fo_audit"
                                " WHERE tbl = '%s' GROUP BY id HAVING count(*) <> 1) x",
                                tables[t]),
                         0);
        assert_int_equal(bt_int(pg,
                                "SELECT count(DISTINCT id) FROM public.fo_audit WHERE tbl = '%s'",
                                tables[t]),
                         rows[t]);
    }
    bfc_close(c);
    bd_stop(&d[0]);
    bd_stop(&d[1]);
    bd_suite_close(NULL, pg, false);
    fo_pg_sh("failover-stop", NULL, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fo_failover),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
