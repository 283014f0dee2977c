/*
 * test_partition.c - a network partition between a daemon and PostgreSQL, and a frozen
 * PostgreSQL backend, against real buzz-backfilld processes and the non-idempotent robustness
 * backfills (counter + 1 per visit, tests/support/test_definitions.c "rob"), with an audit of
 * every touched row (a trigger records each update, the session that made it and when).
 *
 * pt_partition (root; skipped with the reason otherwise): daemon B runs in a network namespace
 * of the test's own, joined to this host by a veth pair with link-local addresses the test
 * chooses (pt.host_addr here, pt.ns_addr there, nothing routed); PostgreSQL is a scratch cluster
 * that also listens on pt.host_addr (scripts/pg.sh listen-start); daemon A runs here. B claims
 * both backfills and its batches wait at their barriers (the declarative one inside its CALL,
 * the callback one inside its transaction after its update); then the link goes down (the host
 * end of the pair: every packet dropped, nothing refused), the barriers open, and:
 *   - A takes both over within PT_BOUND_MS (the lease, a poll and a step, as much again for a
 *     loaded machine): B's sessions hold nothing beyond the lease (the callback batch's
 *     transaction ends at idle_in_transaction_session_timeout, lease / 2);
 *   - B's readiness answers "unknown" for the database over ipc while it is cut off, never
 *     ready (it was ready before the cut); an admin client cut off from B (tcp over the same
 *     link) gets no answer, never ready;
 *   - B's late writes are rejected: no row update made by a B session commits after A's
 *     takeover (the audit), and no row is applied twice;
 *   - B recovers by itself when the link returns: it logs "database connection restored" and
 *     its readiness reads the database as ready again, with no restart.
 * Guard: the engine's keepalives and tcp_user_timeout (engine.c) are what let B notice the dead
 * link at all; the fence and the lease are what keep its late work out.
 *
 * pt_frozen_backend (main cluster): the backend serving a worker is frozen (SIGSTOP) inside its
 * fence, holding the backfill row. PostgreSQL cannot end a stopped process, so nothing takes the
 * backfill over while it is frozen: the claim expires on PostgreSQL's clock and the other
 * daemon polls past it, the row stays locked and its generation and checkpoint unmoved, and no
 * attempt is burned on the lock (the claim skips locked rows). Once the backend continues, the
 * work completes with every counter exactly 1. This is the documented limit of
 * docs/reliability.md ("A frozen backend"), bounded here to a few seconds.
 *
 * pt_frozen_validator (main cluster): the same for the validator's backend frozen inside a
 * validation chunk, holding the validation lock: the claim expires, but no one claims (a worker
 * that finds the lock busy has no work), validates or counts an attempt while it is frozen;
 * after it continues the backfill completes.
 *
 * Runs serially (tests/robustness).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
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

#define PT_LEASE_MS 3000
#define PT_STMT_MS  1500
#define PT_STEP_MS  200
#define PT_POLL_MS  1000
/* a takeover: the claim expires, a poll finds it, a step runs; the margin as much again */
#define PT_TAKEOVER_MS (PT_LEASE_MS + PT_POLL_MS + PT_STEP_MS + PT_STMT_MS)
#define PT_BOUND_MS    (2 * PT_TAKEOVER_MS)
#define PT_ROWS        3000
#define PT_WAIT_MS     60000

/* The link's /30 in 169.254.0.0/16 is chosen per run (pt_make_namespace, from the pid), so
 * two runs on one machine (two clones' scripts/test.sh) do not route each other's addresses. */

#define PT_XSTR(x) #x
#define PT_STR(x)  PT_XSTR(x)

#define B_DECL  9101
#define B_CB    9102
#define B_FENCE 9103
#define B_VALID 9104

static const char *const ids[2] = {"rob.decl_v1", "rob.cb_v1"};
static const char *const tables[2] = {"rob_decl", "rob_cb"};

static struct {
    char ns[32], veth_host[16], veth_ns[16];
    char host_addr[20], ns_addr[20], net[24]; /* this end, the namespace end, the /30 */
    bool made;
    bool listen_cluster;
    char saved_url[512];
    long frozen_pid; /* a backend the test stopped: continued whatever happens */
} pt;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int pt_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int pt_sh(const char *fmt, ...)
{
    char cmd[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    fflush(NULL);
    return system(cmd);
}

/* scripts/pg.sh sub; its first line of output into out; fails the test unless it exits 0 */
static void pt_pg_sh(const char *sub, char *out, size_t cap)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s/scripts/pg.sh' %s", BUZZ_SOURCE_DIR, sub);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[512] = "", rest[256];
    if (fgets(line, sizeof line, p) == NULL)
        line[0] = '\0';
    while (fgets(rest, sizeof rest, p) != NULL)
        ;
    int st = pclose(p);
    if (st != 0)
        fail_msg("pg.sh %s failed (status %d)", sub, st);
    line[strcspn(line, "\n")] = '\0';
    if (out != NULL)
        snprintf(out, cap, "%s", line);
}

/* The rob tables, the barriers, and the audit: one row per committed update of a rob row, with
 * the session (application_name "buzz-backfill host:pid:wN") and the commit-side clock. */
static void pt_schema(PGconn *pg)
{
    bt_install_barrier(pg);
    for (int t = 0; t < 2; t++)
        bt_make_items(pg, tables[t], PT_ROWS);
    bt_exec(pg, "CREATE TABLE public.pt_audit (tbl text NOT NULL, id bigint NOT NULL,"
                " session text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());"
                "CREATE FUNCTION public.pt_audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                " INSERT INTO public.pt_audit (tbl, id, session)"
                " VALUES (TG_TABLE_NAME, NEW.id, current_setting('application_name'));"
                " RETURN NEW; END $$;"
                "CREATE TRIGGER pt_audit AFTER UPDATE ON public.rob_decl FOR EACH ROW"
                " EXECUTE FUNCTION public.pt_audit();"
                "CREATE TRIGGER pt_audit AFTER UPDATE ON public.rob_cb FOR EACH ROW"
                " EXECUTE FUNCTION public.pt_audit()");
}

/* Every row of every rob table applied exactly once, and audited exactly once. */
static void pt_assert_exactly_once(PGconn *pg, int ntables)
{
    for (int t = 0; t < ntables; t++) {
        assert_int_equal(bt_int(pg, "SELECT count(*) FROM public.%s WHERE counter <> 1", tables[t]),
                         0);
        assert_int_equal(bt_int(pg,
                                "SELECT count(*) FROM (SELECT id FROM public.pt_audit"
                                " WHERE tbl = '%s' GROUP BY id HAVING count(*) <> 1) x",
                                tables[t]),
                         0);
        assert_int_equal(bt_int(pg,
                                "SELECT count(DISTINCT id) FROM public.pt_audit WHERE tbl = '%s'",
                                tables[t]),
                         PT_ROWS);
    }
}

static bd_options pt_options(void)
{
    bd_options o = bd_defaults();
    o.definitions = "rob";
    o.tcp = false;
    o.workers = 2;
    o.lease_ms = PT_LEASE_MS;
    o.statement_timeout_ms = PT_STMT_MS;
    o.lock_timeout_ms = PT_STMT_MS;
    o.step_batches = 1;
    o.extra = "step_ms = " PT_STR(PT_STEP_MS) "\n";
    return o;
}

/* The daemon (pid) whose worker owns id's claim and is valid; 0 when none. */
static long pt_owner(PGconn *pg, const char *id, long long *generation)
{
    char *s = bt_text(pg,
                      "SELECT coalesce(CASE WHEN claim_expires_at > clock_timestamp()"
                      " THEN split_part(claim_owner, ':', 2) END, '0') || ' ' || generation"
                      " FROM buzz_backfill.backfill WHERE id = '%s'",
                      id);
    long pid = 0;
    long long g = 0;
    assert_int_equal(sscanf(s, "%ld %lld", &pid, &g), 2);
    free(s);
    if (generation != NULL)
        *generation = g;
    return pid;
}

/* Wait until a session of daemon pid waits at barrier key; its backend pid. */
static long pt_wait_at(PGconn *pg, int key, pid_t pid)
{
    for (int64_t t0 = now_ms();; usleep(2000)) {
        long long backend =
            bt_int(pg,
                   "SELECT coalesce(max(a.pid), 0) FROM pg_locks l JOIN pg_stat_activity a"
                   " ON a.pid = l.pid WHERE l.locktype = 'advisory' AND NOT l.granted"
                   " AND l.classid = 424242 AND l.objid = %d"
                   " AND split_part(a.application_name, ':', 2) = '%ld'",
                   key, (long)pid);
        if (backend > 0)
            return (long)backend;
        if (now_ms() - t0 > PT_WAIT_MS)
            fail_msg("no session of daemon %ld reached barrier %d", (long)pid, key);
    }
}

static long long pt_checkpoint(PGconn *pg, int t)
{
    return bt_int(pg,
                  "SELECT coalesce((checkpoint[1])::bigint, 0) FROM buzz_backfill.backfill"
                  " WHERE id = '%s'",
                  ids[t]);
}

/* Readiness.Check on c: 1 ready, 0 answered and not ready (*db: the database component's
 * status), -1 no answer. */
static int pt_readiness(bfc_client *c, int *db)
{
    Buzz__Backfill__V1__CheckRequest req = BUZZ__BACKFILL__V1__CHECK_REQUEST__INIT;
    ProtobufCMessage *out = NULL;
    int code = bd_call(c, &buzz__backfill__v1__readiness__descriptor, "Check", &req.base, &out);
    if (code != BD_SC(OK)) {
        bd_free(out);
        return -1;
    }
    bd_check_resp *r = (bd_check_resp *)out;
    *db = bd_component(r, "database")->status;
    int ready = r->has_ready && r->ready ? 1 : 0;
    bd_free(r);
    return ready;
}

/* ---- the namespace --------------------------------------------------------------------------- */

static int pt_teardown(void **state)
{
    (void)state;
    if (pt.frozen_pid > 0) {
        (void)kill((pid_t)pt.frozen_pid, SIGCONT);
        pt.frozen_pid = 0;
    }
    if (pt.made) {
        (void)pt_sh("ip link del %s >/dev/null 2>&1", pt.veth_host);
        (void)pt_sh("ip netns del %s >/dev/null 2>&1", pt.ns);
        pt.made = false;
    }
    if (pt.listen_cluster) {
        (void)pt_sh("'%s/scripts/pg.sh' listen-stop >/dev/null 2>&1", BUZZ_SOURCE_DIR);
        pt.listen_cluster = false;
    }
    if (pt.saved_url[0] != '\0')
        setenv("BUZZ_TEST_PG_URL", pt.saved_url, 1);
    return 0;
}

/* The namespace and its veth pair; false (with the reason printed) when this cannot be done. */
static bool pt_make_namespace(void)
{
    if (geteuid() != 0) {
        printf("# skipped: network namespaces need root (euid %ld)\n", (long)geteuid());
        return false;
    }
    long id = (long)getpid() % 100000;
    snprintf(pt.ns, sizeof pt.ns, "buzzpt%ld", id);
    snprintf(pt.veth_host, sizeof pt.veth_host, "bzph%ld", id);
    snprintf(pt.veth_ns, sizeof pt.veth_ns, "bzpn%ld", id);
    int octet = 1 + (int)(getpid() % 250);
    snprintf(pt.host_addr, sizeof pt.host_addr, "169.254.%d.1", octet);
    snprintf(pt.ns_addr, sizeof pt.ns_addr, "169.254.%d.2", octet);
    snprintf(pt.net, sizeof pt.net, "169.254.%d.0/30", octet);
    if (pt_sh("ip netns add %s >/dev/null 2>&1", pt.ns) != 0) {
        printf("# skipped: `ip netns add` failed (no network namespaces here)\n");
        return false;
    }
    pt.made = true;
    if (pt_sh("ip link add %s type veth peer name %s netns %s", pt.veth_host, pt.veth_ns, pt.ns) !=
            0 ||
        pt_sh("ip addr add %s/30 dev %s && ip link set %s up", pt.host_addr, pt.veth_host,
              pt.veth_host) != 0 ||
        pt_sh("ip netns exec %s ip addr add %s/30 dev %s && ip netns exec %s ip link set %s up &&"
              " ip netns exec %s ip link set lo up",
              pt.ns, pt.ns_addr, pt.veth_ns, pt.ns, pt.veth_ns, pt.ns) != 0)
        fail_msg("could not set up the veth pair of %s", pt.ns);
    return true;
}

/* Start d inside the namespace: the daemon is forked from this thread while it is in there. */
static void pt_launch_in_namespace(bd_daemon *d, const bd_options *o)
{
    char path[64];
    snprintf(path, sizeof path, "/var/run/netns/%s", pt.ns);
    int here = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    int there = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(here >= 0 && there >= 0);
    assert_int_equal(setns(there, CLONE_NEWNET), 0);
    bd_launch(d, o);
    assert_int_equal(setns(here, CLONE_NEWNET), 0);
    close(here);
    close(there);
}

static void pt_link(bool up)
{
    assert_int_equal(pt_sh("ip link set %s %s", pt.veth_host, up ? "up" : "down"), 0);
}

static void pt_partition(void **state)
{
    (void)state;
    if (!pt_make_namespace()) {
        skip();
        return;
    }
    snprintf(pt.saved_url, sizeof pt.saved_url, "%s", getenv("BUZZ_TEST_PG_URL"));
    char url[512];
    char listen_cmd[96];
    snprintf(listen_cmd, sizeof listen_cmd, "listen-start %s %s", pt.host_addr, pt.net);
    pt_pg_sh(listen_cmd, url, sizeof url);
    pt.listen_cluster = true;
    setenv("BUZZ_TEST_PG_URL", url, 1);
    PGconn *pg = bd_suite_open("partition");
    const char *conninfo = bt_db_conninfo();
    pt_schema(pg);
    bd_migrate(conninfo);
    PGconn *holder = bd_connect(conninfo);
    bt_lock(holder, B_DECL);
    bt_lock(holder, B_CB);

    /* B, in the namespace: PostgreSQL over the veth pair, admin over ipc and over the link */
    char conninfo_b[1024], extra_b[512];
    snprintf(conninfo_b, sizeof conninfo_b, "%s host='%s'", conninfo, pt.host_addr);
    int admin_port = 20000 + (int)(getpid() % 20000);
    bd_options ob = pt_options();
    ob.conninfo = conninfo_b;
    /* the listen line replaces bd's own: the same ipc path (bd_launch names it d<seq>.sock, the
     * first daemon of this suite) and a tcp listener on the namespace's end of the link */
    snprintf(extra_b, sizeof extra_b,
             "step_ms = " PT_STR(PT_STEP_MS) "\nlisten = 'ipc://%s/d1.sock, tcp://%s:%d'\n",
             bd_dir(), pt.ns_addr, admin_port);
    ob.extra = extra_b;
    bd_daemon b, a;
    pt_launch_in_namespace(&b, &ob);
    assert_int_equal(b.seq, 1);
    bd_wait_up(&b);
    bd_wait_registered(pg, 2);
    bfc_client *cb = bd_client(b.ipc_url, NULL, 30000, -1);
    char tcp_b[64];
    snprintf(tcp_b, sizeof tcp_b, "tcp://%s:%d", pt.ns_addr, admin_port);
    bfc_client *ctcp = bd_client(tcp_b, bd_token(BFT_CAP_READINESS), 2000, -1);
    int db = 0;
    /* ready before the cut (the rob backfills gate nothing), over ipc and over the link */
    assert_int_equal(pt_readiness(cb, &db), 1);
    assert_int_equal(pt_readiness(ctcp, &db), 1);

    for (int t = 0; t < 2; t++) {
        bd_control_resp *resp = NULL;
        assert_int_equal(bd_control(cb, "Start", ids[t], &resp), BD_SC(OK));
        bd_free(resp);
    }
    /* B's batches wait: the declarative one inside its CALL, the callback one inside its
     * transaction after its update */
    (void)pt_wait_at(pg, B_DECL, b.pid);
    (void)pt_wait_at(pg, B_CB, b.pid);
    long long gen[2];
    for (int t = 0; t < 2; t++)
        assert_int_equal(pt_owner(pg, ids[t], &gen[t]), (long)b.pid);
    bd_options oa = pt_options();
    bd_start(&a, &oa);
    bfc_client *ca = bd_client(a.ipc_url, NULL, 30000, 3);

    /* the cut, mid-batch; then the batches may go on (what B's sessions do without B) */
    pt_link(false);
    int64_t t0 = now_ms();
    bt_unlock(holder, B_DECL);
    bt_unlock(holder, B_CB);

    /* A takes both over within the bound */
    char takeover_at[2][64];
    long long cp_takeover[2];
    for (int t = 0; t < 2; t++) {
        for (;;) {
            long long g = 0;
            if (pt_owner(pg, ids[t], &g) == (long)a.pid && g > gen[t])
                break;
            if (now_ms() - t0 > PT_WAIT_MS)
                fail_msg("%s: no takeover by the connected daemon", ids[t]);
            usleep(2000);
        }
        int64_t took = now_ms() - t0;
        printf("# %s: taken over %lld ms after the cut (bound %d ms)\n", ids[t], (long long)took,
               PT_BOUND_MS);
        if (took > PT_BOUND_MS)
            fail_msg("%s: takeover after %lld ms, bound %d ms", ids[t], (long long)took,
                     PT_BOUND_MS);
        char *s = bt_text(pg, "SELECT claimed_at::text FROM buzz_backfill.backfill WHERE id = '%s'",
                          ids[t]);
        snprintf(takeover_at[t], sizeof takeover_at[t], "%s", s);
        free(s);
        cp_takeover[t] = pt_checkpoint(pg, t);
    }

    /* cut off from its database, B's readiness is unknown, never ready; an admin client cut off
     * from B gets no answer */
    int r = pt_readiness(cb, &db);
    printf("# readiness of the partitioned daemon: %d (database component %d)\n", r, db);
    assert_int_equal(r, 0);
    assert_int_equal(db, BD_CS(UNKNOWN_STATUS));
    assert_int_equal(pt_readiness(ctcp, &db), -1);

    /* B noticed the dead link by itself (keepalives and tcp_user_timeout, half a lease): its
     * sessions did not wait for the kernel's retransmissions to give up (about 15 minutes) */
    while (!bd_log_contains(&b, "database connection lost"))
        if (now_ms() - t0 > PT_BOUND_MS)
            fail_msg("the partitioned daemon did not notice the dead link within %d ms",
                     PT_BOUND_MS);
        else
            usleep(20000);

    /* the link returns: B recovers by itself */
    pt_link(true);
    bd_wait_log(&b, "database connection restored");
    for (int64_t t1 = now_ms();; usleep(50000)) {
        if (pt_readiness(cb, &db) == 1)
            break;
        if (now_ms() - t1 > PT_WAIT_MS)
            fail_msg("the partitioned daemon is not ready again after the link returned");
    }

    for (int t = 0; t < 2; t++) {
        bd_get_resp *g = bd_wait_state(ca, ids[t], BD_ST(COMPLETED));
        bd_free(g);
        /* no row update of a B session committed after A took the backfill over */
        long long late = bt_int(pg,
                                "SELECT count(*) FROM public.pt_audit WHERE tbl = '%s'"
                                " AND split_part(session, ':', 2) = '%ld' AND at >= '%s'",
                                tables[t], (long)b.pid, takeover_at[t]);
        /* and none of its updates committed beyond the checkpoint A took over from */
        late += bt_int(pg,
                       "SELECT count(*) FROM public.pt_audit WHERE tbl = '%s'"
                       " AND split_part(session, ':', 2) = '%ld' AND id > %lld",
                       tables[t], (long)b.pid, cp_takeover[t]);
        printf("# %s: rows updated by the partitioned daemon after the takeover: %lld\n", ids[t],
               late);
        assert_int_equal(late, 0);
    }
    pt_assert_exactly_once(pg, 2);
    bfc_close(ctcp);
    bfc_close(cb);
    bfc_close(ca);
    PQfinish(holder);
    bd_stop(&a);
    bd_stop(&b);
    bd_suite_close(NULL, pg, false);
}

/* ---- a frozen backend ------------------------------------------------------------------------ */

static void pt_frozen_backend(void **state)
{
    (void)state;
    PGconn *pg = bd_suite_open("frozen");
    const char *conninfo = bt_db_conninfo();
    pt_schema(pg);
    bd_migrate(conninfo);
    /* the fence barrier: the update of the callback row that moves its checkpoint waits here,
     * holding the backfill row */
    bt_exec(pg, "CREATE FUNCTION public.pt_fence_barrier() RETURNS trigger LANGUAGE plpgsql"
                " AS $$ BEGIN PERFORM public.bt_barrier(9103); RETURN NEW; END $$;"
                "CREATE TRIGGER pt_fence_barrier BEFORE UPDATE ON buzz_backfill.backfill"
                " FOR EACH ROW WHEN (NEW.id = 'rob.cb_v1'"
                " AND NEW.checkpoint IS DISTINCT FROM OLD.checkpoint)"
                " EXECUTE FUNCTION public.pt_fence_barrier()");
    PGconn *holder = bd_connect(conninfo);
    bt_lock(holder, B_FENCE);
    bd_options o = pt_options();
    bd_daemon d[2];
    bd_launch(&d[0], &o);
    bd_launch(&d[1], &o);
    bd_wait_up(&d[0]);
    bd_wait_up(&d[1]);
    bd_wait_registered(pg, 2);
    bfc_client *c[2] = {bd_client(d[0].ipc_url, NULL, 30000, 3),
                        bd_client(d[1].ipc_url, NULL, 30000, 3)};
    bd_control_resp *resp = NULL;
    assert_int_equal(bd_control(c[0], "Start", ids[1], &resp), BD_SC(OK));
    bd_free(resp);

    /* the owner's session waits in its fence; freeze that backend, then open the barrier */
    long long gen = 0;
    long owner = 0;
    for (int64_t t0 = now_ms(); (owner = pt_owner(pg, ids[1], &gen)) == 0; usleep(2000))
        if (now_ms() - t0 > PT_WAIT_MS)
            fail_msg("rob.cb_v1 was never claimed");
    int oi = owner == (long)d[0].pid ? 0 : 1;
    assert_int_equal(owner, (long)d[oi].pid);
    long backend = pt_wait_at(pg, B_FENCE, d[oi].pid);
    long long cp0 = pt_checkpoint(pg, 1);
    long long attempts0 =
        bt_int(pg, "SELECT attempts FROM buzz_backfill.backfill WHERE id = '%s'", ids[1]);
    assert_int_equal(kill((pid_t)backend, SIGSTOP), 0);
    pt.frozen_pid = backend;
    bt_unlock(holder, B_FENCE);
    int64_t t0 = now_ms();

    /* the claim expires on PostgreSQL's clock, and for two idle polls of the other daemon
     * after that nothing takes the backfill over: the frozen backend holds its row */
    for (; pt_owner(pg, ids[1], NULL) != 0; usleep(5000))
        if (now_ms() - t0 > PT_WAIT_MS)
            fail_msg("the frozen owner's claim never expired");
    int64_t expired = now_ms();
    while (now_ms() - expired < 2 * PT_POLL_MS + PT_STEP_MS) {
        long long g = 0;
        assert_int_equal(pt_owner(pg, ids[1], &g), 0);
        assert_int_equal(g, gen);
        assert_int_equal(pt_checkpoint(pg, 1), cp0);
        assert_int_equal(
            bt_int(pg, "SELECT count(*) FROM pg_stat_activity WHERE pid = %ld", backend), 1);
        /* no engine session waits on the frozen backend's lock (a claim that waited would
         * stall its worker until lock_timeout on every poll, and fail) */
        long long waiting = bt_int(pg,
                                   "SELECT count(*) FROM pg_stat_activity"
                                   " WHERE application_name LIKE 'buzz-backfill%%'"
                                   " AND %ld = ANY (pg_blocking_pids(pid))",
                                   backend);
        if (waiting != 0)
            fail_msg("%lld engine session(s) wait on the frozen backend's lock", waiting);
        usleep(20000);
    }
    /* the row is locked by the frozen backend, and no attempt was burned on it */
    assert_int_equal(bt_int(pg,
                            "SELECT count(*) FROM (SELECT 1 FROM buzz_backfill.backfill"
                            " WHERE id = '%s' FOR UPDATE SKIP LOCKED) x",
                            ids[1]),
                     0);
    assert_int_equal(
        bt_int(pg, "SELECT attempts FROM buzz_backfill.backfill WHERE id = '%s'", ids[1]),
        attempts0);
    printf("# frozen for %lld ms (the claim expired after %lld ms): no takeover\n",
           (long long)(now_ms() - t0), (long long)(expired - t0));

    /* it continues: the work goes on and completes, every row exactly once */
    assert_int_equal(kill((pid_t)backend, SIGCONT), 0);
    pt.frozen_pid = 0;
    bd_get_resp *g = bd_wait_state(c[0], ids[1], BD_ST(COMPLETED));
    bd_free(g);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM public.rob_cb WHERE counter <> 1"), 0);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM (SELECT id FROM public.pt_audit"
                                " WHERE tbl = 'rob_cb' GROUP BY id HAVING count(*) <> 1) x"),
                     0);
    assert_int_equal(bt_int(pg, "SELECT count(DISTINCT id) FROM public.pt_audit"
                                " WHERE tbl = 'rob_cb'"),
                     PT_ROWS);
    bfc_close(c[0]);
    bfc_close(c[1]);
    PQfinish(holder);
    bd_stop(&d[0]);
    bd_stop(&d[1]);
    bd_suite_close(NULL, pg, false);
}

/* The validator's backend is frozen inside a validation chunk (at the validation barrier, in
 * the postcondition of a row), holding the validation lock: no one else validates, claims or
 * counts an attempt while it is frozen (a worker that finds the lock busy has no work); after it
 * continues the backfill completes. */
static void pt_frozen_validator(void **state)
{
    (void)state;
    PGconn *pg = bd_suite_open("frozenv");
    const char *conninfo = bt_db_conninfo();
    pt_schema(pg);
    bd_migrate(conninfo);
    PGconn *holder = bd_connect(conninfo);
    bt_lock(holder, B_VALID);
    bd_options o = pt_options();
    bd_daemon d[2];
    bd_launch(&d[0], &o);
    bd_launch(&d[1], &o);
    bd_wait_up(&d[0]);
    bd_wait_up(&d[1]);
    bd_wait_registered(pg, 2);
    bfc_client *c = bd_client(d[0].ipc_url, NULL, 30000, 3);
    bd_control_resp *resp = NULL;
    assert_int_equal(bd_control(c, "Start", ids[0], &resp), BD_SC(OK));
    bd_free(resp);

    /* the validator waits at the barrier inside its chunk: freeze it, open the barrier */
    long owner = 0, backend = 0;
    long long gen = 0;
    for (int64_t t0 = now_ms();; usleep(2000)) {
        owner = pt_owner(pg, ids[0], &gen);
        if (owner != 0 &&
            bt_int(pg, "SELECT (state = 'validating')::int FROM buzz_backfill.backfill"
                       " WHERE id = 'rob.decl_v1'") == 1)
            break;
        if (now_ms() - t0 > PT_WAIT_MS)
            fail_msg("rob.decl_v1 never reached validation");
    }
    backend = pt_wait_at(pg, B_VALID, (pid_t)owner);
    long long attempts0 =
        bt_int(pg, "SELECT attempts FROM buzz_backfill.backfill WHERE id = '%s'", ids[0]);
    assert_int_equal(kill((pid_t)backend, SIGSTOP), 0);
    pt.frozen_pid = backend;
    bt_unlock(holder, B_VALID);
    int64_t t0 = now_ms();
    for (; pt_owner(pg, ids[0], NULL) != 0; usleep(5000))
        if (now_ms() - t0 > PT_WAIT_MS)
            fail_msg("the frozen validator's claim never expired");
    int64_t expired = now_ms();
    while (now_ms() - expired < 2 * PT_POLL_MS + PT_STEP_MS) {
        long long g = 0;
        assert_int_equal(pt_owner(pg, ids[0], &g), 0);
        assert_int_equal(g, gen);
        assert_int_equal(bt_int(pg, "SELECT (state = 'validating')::int FROM"
                                    " buzz_backfill.backfill WHERE id = 'rob.decl_v1'"),
                         1);
        /* the frozen backend still holds the validation lock */
        assert_int_equal(bt_int(pg,
                                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                                " AND granted AND objsubid = 2 AND classid <> 424242 AND pid = %ld",
                                backend),
                         1);
        usleep(20000);
    }
    assert_int_equal(
        bt_int(pg, "SELECT attempts FROM buzz_backfill.backfill WHERE id = '%s'", ids[0]),
        attempts0);
    printf("# validator frozen for %lld ms (the claim expired after %lld ms): no takeover\n",
           (long long)(now_ms() - t0), (long long)(expired - t0));

    assert_int_equal(kill((pid_t)backend, SIGCONT), 0);
    pt.frozen_pid = 0;
    bd_get_resp *g = bd_wait_state(c, ids[0], BD_ST(COMPLETED));
    bd_free(g);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM public.rob_decl WHERE counter <> 1"), 0);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM (SELECT id FROM public.pt_audit"
                                " WHERE tbl = 'rob_decl' GROUP BY id HAVING count(*) <> 1) x"),
                     0);
    bfc_close(c);
    PQfinish(holder);
    bd_stop(&d[0]);
    bd_stop(&d[1]);
    bd_suite_close(NULL, pg, false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(pt_partition, pt_teardown),
        cmocka_unit_test_teardown(pt_frozen_backend, pt_teardown),
        cmocka_unit_test_teardown(pt_frozen_validator, pt_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
