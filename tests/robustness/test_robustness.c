/*
 * test_robustness.c - faults against real buzz-backfilld processes sharing one database, and
 * after each: every row of a non-idempotent backfill applied exactly once, takeover within its
 * bound, the daemons answering on ipc.
 *
 * A round is a fresh database, two daemons (two workers each, lease ROB_LEASE_MS) and two
 * backfills that count every visit of a row (counter + 1; tests/support/test_definitions.c
 * "rob"): rob.decl_v1 (declarative: its batches run inside PostgreSQL) and rob.cb_v1 (callback:
 * the client runs statements inside the batch's transaction). Between faults both are paused
 * (an operator action); a fault resumes one, waits until a worker is at a barrier in the phase
 * the fault is about, applies the fault to the daemon that owns the claim, releases the
 * barrier, and measures the time until another daemon holds the claim and the checkpoint moves
 * again. Faults:
 *
 *   kill-batch       SIGKILL the owner while its declarative batch runs
 *   stop-batch       SIGSTOP the owner while its declarative batch runs (resumed later: its
 *                    late work must be fenced out)
 *   stop-pre-fence   SIGSTOP the owner of a callback batch after its update, before its fence:
 *                    it sits inside its transaction holding target-row locks
 *   stop-in-fence    SIGSTOP the owner while its fence runs (barrier in a trigger on the fence)
 *   kill-validation  SIGKILL the owner during validation
 *   stop-validation  SIGSTOP the owner during validation
 *   pg-restart       PostgreSQL shut down immediately and restarted (scripts/pg.sh
 *                    crash-restart) while batches run
 *   hostile-peers    slow readers (tcp peers pipelining requests, never reading) and a flood of
 *                    idle connections beyond the caps against the daemon running a batch: its
 *                    ipc listener answers within a second, batches go on, tcp answers again
 *                    once the attacker has left
 *
 * Bounds asserted, each derived from the daemons' configuration (lease, statement timeout,
 * step_ms, the idle poll) with a margin of as much again (see the defines): a takeover after a
 * stop or kill happens within ROB_BOUND_MS of the fault; after a PostgreSQL restart progress
 * resumes within ROB_RESTART_MS; while a faulted owner still holds its locks, Admin.Get of
 * either backfill answers (before the test releases the barrier) within ROB_ANSWER_MS. The
 * stopped owner's fenced batch (stop-in-fence) is checked against its session, not the clock. At
 * the end of a round both backfills are completed and every row's counter is exactly 1.
 *
 * Guards exercised (each has its own falsifiable test elsewhere; here they are proved together
 * under faults): the batch fence (a stopped owner's late commit), claims that skip locked rows,
 * idle_in_transaction_session_timeout (stop-pre-fence), the fence and COMMIT in one round trip
 * (stop-in-fence), the takeover's attempt count, the validation lock and its stalled-holder
 * termination, reconnects after a crash.
 *
 * Soak mode: BUZZ_SOAK_SECONDS=N runs rounds of random faults for N seconds and prints trials,
 * faults, rows at counters 0/1/2+ and takeover percentiles (scripts/soak.sh). BUZZ_SOAK_SEED
 * replays a run.
 *
 * The suite restarts the shared test cluster, so it runs alone (RUN_SERIAL in CMake).
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "bt.h"
#include "daemon.h"
#include "sp_peer.h"

/* The daemons' configuration, and every bound asserted below derived from it (no bound is a
 * bare wall-clock number: a loaded CI machine, a load average of 17 on 2 cores, must not fail
 * the suite without a real defect). */
#define ROB_LEASE_MS 3000
#define ROB_STMT_MS  1500 /* statement and lock timeouts: the lease outlasts a step */
#define ROB_STEP_MS  200  /* step_ms */
#define ROB_POLL_MS  1000 /* the engine's idle poll (bf_worker_run: a worker without work) */
/* One worker step: batches for at most step_ms, the last statement (or lock wait) up to its
 * timeout. */
#define ROB_ONE_STEP_MS (ROB_STEP_MS + ROB_STMT_MS)
/* A takeover after a stop or kill, from the fault to the new owner's first committed batch: the
 * claim expires (at most a lease after the fault), a sibling's idle poll finds it, claims it and
 * runs a step. */
#define ROB_TAKEOVER_MS (ROB_LEASE_MS + ROB_POLL_MS + ROB_ONE_STEP_MS)
/* The margin: as much again. What the bound catches is a takeover that waits for something it
 * must not (a stopped owner's locks, a lease that never expires), which takes far longer. */
#define ROB_BOUND_MS (2 * ROB_TAKEOVER_MS)
/* An admin read (one statement) while a faulted owner holds its locks, with the same margin. A
 * read that waited on those locks would not be slow but fail: it ends in lock_timeout, with an
 * error, while the test still holds the barrier (the read is ordered before the release). */
#define ROB_ANSWER_MS (2 * ROB_ONE_STEP_MS)
/* Progress after a PostgreSQL restart: the daemons reconnect, the dead sessions' claims expire
 * (a lease), a sibling polls and steps; generous, as a restart under load is slow itself. */
#define ROB_RESTART_MS (5 * ROB_TAKEOVER_MS)
#define ROB_ROWS       20000
#define ROB_WAIT_MS    60000

#define BD_XSTR(x) #x
#define BD_STR(x)  BD_XSTR(x)

#define B_DECL  9101
#define B_CB    9102
#define B_FENCE 9103
#define B_VALID 9104

static const char *const ids[2] = {"rob.decl_v1", "rob.cb_v1"};
static const char *const tables[2] = {"rob_decl", "rob_cb"};

typedef enum fault {
    F_KILL_BATCH,
    F_STOP_BATCH,
    F_STOP_PRE_FENCE,
    F_STOP_IN_FENCE,
    F_KILL_VALIDATION,
    F_STOP_VALIDATION,
    F_PG_RESTART,
    F_HOSTILE_PEERS,
    F_COUNT
} fault;

static const char *const fault_names[F_COUNT] = {
    "kill-batch",      "stop-batch",      "stop-pre-fence", "stop-in-fence",
    "kill-validation", "stop-validation", "pg-restart",     "hostile-peers",
};

/* ---- statistics --------------------------------------------------------------------------- */

#define ROB_MAX_SAMPLES 100000

static struct {
    long trials, rounds;
    long faults[F_COUNT];
    long long rows0, rows1, rows2;
    int64_t takeover_ms[ROB_MAX_SAMPLES];
    long n_takeovers;
    int64_t max_restart_ms;
    long long min_left; /* fewest rows a backfill had left when its round's faults ended */
} stats = {.min_left = -1};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- a round ------------------------------------------------------------------------------- */

typedef struct rig {
    const char *conninfo;
    bd_daemon d[2];
    bool up[2];
    bool stopped[2]; /* SIGSTOPped, not yet continued */
    bfc_client *c[2];
    PGconn *pg;     /* observer */
    PGconn *holder; /* holds the barriers */
} rig;

static bd_options rig_options(const rig *r)
{
    bd_options o = bd_defaults();
    o.conninfo = r->conninfo;
    o.definitions = "rob";
    o.tcp = true; /* for the hostile peers */
    o.workers = 2;
    o.lease_ms = ROB_LEASE_MS;
    o.statement_timeout_ms = ROB_STMT_MS;
    o.lock_timeout_ms = ROB_STMT_MS;
    o.step_batches = 1; /* one batch per round trip: faults meet batches, not whole runs */
    o.extra = "step_ms = " BD_STR(ROB_STEP_MS) "\n";
    o.log_level = "debug";
    return o;
}

static void rig_start_daemon(rig *r, int i)
{
    bd_options o = rig_options(r);
    bd_start(&r->d[i], &o);
    r->up[i] = true;
    r->stopped[i] = false;
    bfc_close(r->c[i]);
    r->c[i] = bd_client(r->d[i].ipc_url, NULL, 10000, 3);
}

/* The daemon (0 or 1) whose pid is in the claim owner "host:pid:wN" of id; -1 when unclaimed
 * or owned by neither. */
static int rig_owner(rig *r, const char *id, int64_t *generation)
{
    PGresult *res = PQexecParams(r->pg,
                                 "SELECT split_part(claim_owner, ':', 2), generation,"
                                 " claim_expires_at > clock_timestamp()"
                                 " FROM buzz_backfill.backfill WHERE id = $1",
                                 1, NULL, (const char *const[]){id}, NULL, NULL, 0);
    int owner = -1;
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
        if (generation != NULL)
            *generation = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
        long pid = PQgetisnull(res, 0, 0) ? 0 : strtol(PQgetvalue(res, 0, 0), NULL, 10);
        bool valid = PQgetvalue(res, 0, 2)[0] == 't';
        for (int i = 0; i < 2 && valid; i++)
            if (r->up[i] && pid == r->d[i].pid)
                owner = i;
    }
    PQclear(res);
    return owner;
}

static bool rig_state_is(rig *r, const char *id, const char *state)
{
    return bt_int(r->pg, "SELECT (state = '%s')::int FROM buzz_backfill.backfill WHERE id = '%s'",
                  state, id) == 1;
}

/* Wait until the daemon that owns id's claim has a session waiting at barrier key (sessions are
 * named "buzz-backfill host:pid:wN"; a stale owner's batch may wait there too); its index. */
static int rig_wait_owner_at(rig *r, int key, const char *id, int64_t *generation)
{
    for (int64_t t0 = now_ms();; usleep(1000)) {
        int owner = rig_owner(r, id, generation);
        if (owner >= 0 &&
            bt_int(r->pg,
                   "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
                   " WHERE l.locktype = 'advisory' AND NOT l.granted AND l.classid = 424242"
                   " AND l.objid = %d AND split_part(a.application_name, ':', 2) = '%ld'",
                   key, (long)r->d[owner].pid) > 0)
            return owner;
        if (key != B_VALID && !rig_state_is(r, id, "running"))
            fail_msg("%s: left running while waiting for barrier %d (no work left for the fault?)",
                     id, key);
        if (now_ms() - t0 > ROB_WAIT_MS)
            fail_msg("%s: its owner never reached barrier %d", id, key);
    }
}

static long long rig_checkpoint(rig *r, const char *id)
{
    return bt_int(r->pg,
                  "SELECT coalesce((checkpoint[1])::bigint, 0) FROM buzz_backfill.backfill"
                  " WHERE id = '%s'",
                  id);
}

/* What the database's sessions do, for a failure's report. */
static void rig_dump(rig *r)
{
    PGresult *res = PQexec(r->pg, "SELECT pid, state, wait_event_type, wait_event,"
                                  " left(query, 60) FROM pg_stat_activity"
                                  " WHERE datname = current_database() ORDER BY pid");
    for (int i = 0; PQresultStatus(res) == PGRES_TUPLES_OK && i < PQntuples(res); i++)
        fprintf(stderr, "  session %s %s %s/%s: %s\n", PQgetvalue(res, i, 0), PQgetvalue(res, i, 1),
                PQgetvalue(res, i, 2), PQgetvalue(res, i, 3), PQgetvalue(res, i, 4));
    PQclear(res);
}

/* Rows of table visited more than once so far: never, at any time. */
static void rig_assert_no_double(rig *r)
{
    for (int t = 0; t < 2; t++)
        assert_int_equal(bt_int(r->pg, "SELECT count(*) FROM %s WHERE counter > 1", tables[t]), 0);
}

/* A live daemon's ipc client (the one that is up and not stopped). */
static bfc_client *rig_client(rig *r)
{
    for (int i = 0; i < 2; i++)
        if (r->up[i] && !r->stopped[i])
            return r->c[i];
    fail_msg("no daemon is up");
    return NULL;
}

static void rig_control(rig *r, const char *method, const char *id)
{
    bd_control_resp *resp = NULL;
    int code = bd_control(rig_client(r), method, id, &resp);
    if (code != BD_SC(OK))
        fail_msg("%s %s: status %d", method, id, code);
    bd_free(resp);
}

static void rig_pause_held(rig *r, int t, int hold);

static void rig_setup(rig *r, const char *name)
{
    memset(r, 0, sizeof *r);
    r->conninfo = bd_db_new(name);
    bd_migrate(r->conninfo);
    r->pg = bd_connect(r->conninfo);
    r->holder = bd_connect(r->conninfo);
    bt_install_barrier(r->pg);
    for (int t = 0; t < 2; t++)
        bt_make_items(r->pg, tables[t], ROB_ROWS);
    /* the fence barrier: the only update of the callback row that moves its checkpoint */
    bt_exec(r->pg, "CREATE FUNCTION public.rob_fence_barrier() RETURNS trigger LANGUAGE plpgsql"
                   " AS $$ BEGIN PERFORM public.bt_barrier(9103); RETURN NEW; END $$;"
                   "CREATE TRIGGER rob_fence_barrier BEFORE UPDATE ON buzz_backfill.backfill"
                   " FOR EACH ROW WHEN (NEW.id = 'rob.cb_v1'"
                   " AND NEW.checkpoint IS DISTINCT FROM OLD.checkpoint)"
                   " EXECUTE FUNCTION public.rob_fence_barrier()");
    /* validation waits until the round is ready for it */
    bt_lock(r->holder, B_VALID);
    rig_start_daemon(r, 0);
    rig_start_daemon(r, 1);
    bd_wait_registered(r->pg, 2);
    /* started and paused with their batches held: no batch runs before the first fault */
    for (int t = 0; t < 2; t++) {
        int hold = t == 0 ? B_DECL : B_CB;
        bt_lock(r->holder, hold);
        rig_control(r, "Start", ids[t]);
        rig_pause_held(r, t, hold);
    }
}

/* SIGCONT a stopped daemon; its late work is fenced out. */
static void rig_continue(rig *r, int i)
{
    if (r->up[i] && r->stopped[i]) {
        assert_int_equal(kill(r->d[i].pid, SIGCONT), 0);
        r->stopped[i] = false;
    }
}

static void rig_fault_daemon(rig *r, int owner, bool kill9)
{
    if (kill9) {
        bd_kill(&r->d[owner]);
        r->up[owner] = false;
    } else {
        assert_int_equal(kill(r->d[owner].pid, SIGSTOP), 0);
        r->stopped[owner] = true;
    }
}

/* Let backfill t's batches past barrier `hold` (held by the caller) until its checkpoint moves,
 * then hold them again: the exclusive lock waits for the batch in flight, and the next batch
 * queues behind it. Progress between faults is one or a few batches on any machine, never a run
 * to the bound that a Pause after the fact would have to win (the caller pauses, then releases
 * `hold`). */
static void rig_let_progress(rig *r, int t, int hold, int64_t t0, const char *what)
{
    long long cp0 = rig_checkpoint(r, ids[t]);
    bt_unlock(r->holder, hold);
    while (rig_checkpoint(r, ids[t]) == cp0) {
        if (now_ms() - t0 > ROB_WAIT_MS) {
            rig_dump(r);
            fail_msg("%s: %s: no progress", ids[t], what);
        }
        usleep(1000);
    }
    bt_lock(r->holder, hold);
}

/* Pause backfill t while its batches are held at `hold`, then release the barrier. */
static void rig_pause_held(rig *r, int t, int hold)
{
    rig_control(r, "Pause", ids[t]);
    bt_unlock(r->holder, hold);
}

/* Wait until id is claimed by a daemon other than `not` at a generation after gen, then let its
 * batches past `hold` until the checkpoint moves; returns ms since t0. */
static int64_t rig_wait_takeover(rig *r, int t, int hold, int not, int64_t gen, int64_t t0)
{
    for (;;) {
        int64_t g = 0;
        int owner = rig_owner(r, ids[t], &g);
        if (owner >= 0 && owner != not &&g > gen)
            break;
        if (now_ms() - t0 > ROB_WAIT_MS)
            fail_msg("%s: no takeover within %d ms", ids[t], ROB_WAIT_MS);
        usleep(2000);
    }
    /* and the new owner works */
    rig_let_progress(r, t, hold, t0, "after the takeover");
    return now_ms() - t0;
}

static void rig_record_takeover(int64_t ms, fault f)
{
    if (stats.n_takeovers < ROB_MAX_SAMPLES)
        stats.takeover_ms[stats.n_takeovers++] = ms;
    if (ms > ROB_BOUND_MS)
        fail_msg("%s: takeover after %lld ms, bound %d ms", fault_names[f], (long long)ms,
                 ROB_BOUND_MS);
}

/* The daemons that are up answer on ipc. */
static void rig_assert_answers(rig *r)
{
    for (int i = 0; i < 2; i++) {
        if (!r->up[i] || r->stopped[i])
            continue;
        bd_get_resp *g = bd_get(r->c[i], ids[0]);
        bd_free(g);
    }
}

/* A batch fault on backfill t: resume it with the barrier held, fault the daemon whose worker
 * waits there, release, measure the takeover, pause again. From the release on, the backfill's
 * batches are held at `hold` except while rig_let_progress lets them through. */
static void rig_batch_fault(rig *r, fault f)
{
    int t = (f == F_KILL_BATCH || f == F_STOP_BATCH) ? 0 : 1;
    int hold = t == 0 ? B_DECL : B_CB;
    int key = f == F_STOP_IN_FENCE ? B_FENCE : hold;
    bt_lock(r->holder, key);
    rig_control(r, "Resume", ids[t]);
    int64_t gen = 0;
    int owner = rig_wait_owner_at(r, key, ids[t], &gen);
    long long cp0 = rig_checkpoint(r, ids[t]);
    int64_t t0 = now_ms();
    rig_fault_daemon(r, owner, f == F_KILL_BATCH);
    /* admin reads never wait on a worker's lock (the stopped batch still holds its locks; in
     * stop-in-fence the fence holds the backfill row itself) */
    int64_t tg = now_ms();
    for (int k = 0; k < 2; k++)
        bd_free(bd_get(rig_client(r), ids[k]));
    if (now_ms() - tg > ROB_ANSWER_MS)
        fail_msg("%s: Admin.Get took %lld ms while a stopped owner held locks (bound %d ms)",
                 fault_names[f], (long long)(now_ms() - tg), ROB_ANSWER_MS);
    /* the owner's session at the fence (stop-in-fence), before the release */
    long long fence_pid =
        f != F_STOP_IN_FENCE
            ? 0
            : bt_int(r->pg,
                     "SELECT coalesce(max(a.pid), 0) FROM pg_locks l JOIN pg_stat_activity a"
                     " ON a.pid = l.pid WHERE l.locktype = 'advisory' AND NOT l.granted"
                     " AND l.classid = 424242 AND l.objid = %d"
                     " AND split_part(a.application_name, ':', 2) = '%ld'",
                     key, (long)r->d[owner].pid);
    bt_unlock(r->holder, key);
    if (f == F_STOP_IN_FENCE) {
        /* the fence and its COMMIT were sent together: the batch commits while its owner is
         * stopped. Sent apart, the COMMIT would wait for the stopped owner, the transaction
         * would idle until idle_in_transaction_session_timeout (lease / 2) ended the session,
         * and the batch would roll back: the session gone with the checkpoint unmoved is the
         * failure, whatever the time (measured against the session, not the clock) */
        assert_true(fence_pid > 0);
        while (rig_checkpoint(r, ids[t]) == cp0) {
            bool gone = bt_int(r->pg, "SELECT count(*) FROM pg_stat_activity WHERE pid = %lld",
                               fence_pid) == 0;
            if ((gone && rig_checkpoint(r, ids[t]) == cp0) || now_ms() - t0 > ROB_WAIT_MS) {
                rig_dump(r);
                fail_msg("the stopped owner's fenced batch did not commit (%s)",
                         gone ? "its session ended first" : "no commit");
            }
            usleep(1000);
        }
    }
    /* hold the next batches (after the faulted owner's batch in flight ended, however it ends) */
    bt_lock(r->holder, hold);
    int64_t took = rig_wait_takeover(r, t, hold, owner, gen, t0);
    rig_record_takeover(took, f);
    rig_assert_no_double(r);
    rig_pause_held(r, t, hold);
    rig_continue(r, owner);
    if (!r->up[owner])
        rig_start_daemon(r, owner);
    rig_assert_answers(r);
}

/* PostgreSQL restarts while batches run; progress resumes, no row is applied twice. */
static void rig_pg_restart(rig *r)
{
    bt_lock(r->holder, B_DECL);
    rig_control(r, "Resume", ids[0]);
    bt_wait_waiters(r->pg, B_DECL, 1);
    int64_t t0 = now_ms();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s/scripts/pg.sh' crash-restart >/dev/null", BUZZ_SOURCE_DIR);
    assert_int_equal(system(cmd), 0);
    /* every session is gone, the barriers too: hold the batches again at once */
    PQfinish(r->pg);
    PQfinish(r->holder);
    r->pg = bd_connect(r->conninfo);
    r->holder = bd_connect(r->conninfo);
    bt_lock(r->holder, B_VALID);
    bt_lock(r->holder, B_DECL);
    rig_let_progress(r, 0, B_DECL, t0, "after a PostgreSQL restart");
    int64_t took = now_ms() - t0;
    if (took > stats.max_restart_ms)
        stats.max_restart_ms = took;
    if (took > ROB_RESTART_MS)
        fail_msg("no progress within %d ms of a PostgreSQL restart", ROB_RESTART_MS);
    rig_pause_held(r, 0, B_DECL);
    rig_assert_no_double(r);
    rig_assert_answers(r);
}

/* A validation fault on backfill t (resumed; the validation barrier held): fault the daemon
 * whose worker validates it, release, measure the takeover (or the completion). */
static void rig_validation_fault(rig *r, int t, bool kill9)
{
    while (!rig_state_is(r, ids[t], "validating"))
        usleep(5000);
    int64_t gen = 0;
    int owner = rig_wait_owner_at(r, B_VALID, ids[t], &gen);
    int64_t t0 = now_ms();
    fault f = kill9 ? F_KILL_VALIDATION : F_STOP_VALIDATION;
    rig_fault_daemon(r, owner, kill9);
    bt_unlock(r->holder, B_VALID);
    for (;;) {
        int64_t g = 0;
        int o = rig_owner(r, ids[t], &g);
        if ((o >= 0 && o != owner && g > gen) || rig_state_is(r, ids[t], "completed"))
            break;
        if (now_ms() - t0 > ROB_WAIT_MS)
            fail_msg("%s: no takeover of the validation", ids[t]);
        usleep(2000);
    }
    rig_record_takeover(now_ms() - t0, f);
    stats.faults[f]++;
    stats.trials++;
    rig_continue(r, owner);
    if (!r->up[owner])
        rig_start_daemon(r, owner);
}

#define ROB_SLOW_READERS 4   /* tcp peers that pipeline requests and never read their replies */
#define ROB_PIPELINED    500 /* requests each of them sends */
#define ROB_FLOOD        200 /* idle tcp connections, beyond the per-listener cap (128) */

/* Hostile peers against the daemon whose worker runs a batch: slow readers and a connection
 * flood on its tcp listener while the batches go on; its ipc listener keeps answering within a
 * second, the batches keep committing, and once the peers are gone tcp answers again. */
static void rig_hostile_peers(rig *r)
{
    bt_lock(r->holder, B_DECL);
    rig_control(r, "Resume", ids[0]);
    int owner = rig_wait_owner_at(r, B_DECL, ids[0], NULL);
    bd_daemon *d = &r->d[owner];
    int port = sp_url_port(d->tcp_url);
    static sp_peer slow[ROB_SLOW_READERS], flood[ROB_FLOOD];
    for (int i = 0; i < ROB_SLOW_READERS; i++)
        slow[i] = sp_tcp(port, NULL, true);
    const char *err = sp_pipeline(slow, ROB_SLOW_READERS, ROB_PIPELINED, ROB_WAIT_MS);
    if (err != NULL)
        fail_msg("slow readers: %s", err);
    for (int i = 0; i < ROB_FLOOD; i++)
        flood[i] = sp_tcp(port, NULL, true);
    /* the caps hold: one peer (127.0.0.1) keeps at most max_connections_per_peer (32). A slow
     * reader the daemon closed meanwhile (unread, then quiet) frees its slot for a flood
     * connection, so the open ones of both count (seen in a soak: 29 flood + 3 slow) */
    for (int64_t t0 = now_ms();; usleep(2000)) {
        int open = sp_open_count(flood, ROB_FLOOD);
        int slow_open = sp_open_count(slow, ROB_SLOW_READERS);
        if (open + slow_open <= 32)
            break;
        if (now_ms() - t0 > ROB_WAIT_MS)
            fail_msg("hostile peers: %d flood and %d slow connections stay open", open, slow_open);
    }
    /* the batches go on under the attack */
    rig_let_progress(r, 0, B_DECL, now_ms(), "under hostile peers");
    rig_pause_held(r, 0, B_DECL);
    for (int k = 0; k < 5; k++) {
        int64_t t0 = now_ms();
        bd_free(bd_get(r->c[owner], ids[0]));
        if (now_ms() - t0 > ROB_ANSWER_MS)
            fail_msg("hostile peers: Admin.Get on ipc took %lld ms (bound %d ms)",
                     (long long)(now_ms() - t0), ROB_ANSWER_MS);
    }
    /* the attacker leaves: everything it sent has been read (closing a connection nng is
     * reading can wedge nng 1.5.2, see docs/service.md), then it closes */
    for (int i = 0; i < ROB_SLOW_READERS; i++) {
        if (!sp_closed_by_daemon(&slow[i]))
            sp_wait_read(&slow[i], ROB_WAIT_MS);
        close(slow[i].fd);
    }
    for (int i = 0; i < ROB_FLOOD; i++)
        close(flood[i].fd);
    for (int64_t t0 = now_ms();; usleep(20000)) {
        bfc_client *tcp = bd_client(d->tcp_url, bd_token(BFT_CAP_READ), 2000, -1);
        Buzz__Backfill__V1__WhoAmIRequest req = BUZZ__BACKFILL__V1__WHO_AM_IREQUEST__INIT;
        ProtobufCMessage *out = NULL;
        int code = bd_call(tcp, &buzz__backfill__v1__admin__descriptor, "WhoAmI", &req.base, &out);
        bd_free(out);
        bfc_close(tcp);
        if (code == BD_SC(OK))
            break;
        if (now_ms() - t0 > ROB_WAIT_MS)
            fail_msg("hostile peers: tcp does not answer after the attacker left (%d)", code);
    }
    rig_assert_no_double(r);
    rig_control(r, "Pause", ids[0]);
    rig_assert_answers(r);
}

/* The end of a round: run each backfill to the bound, fault its validation when asked,
 * complete, then check every row. */
static void rig_finish(rig *r, bool fault_validation[2], bool kill9[2])
{
    for (int t = 0; t < 2; t++) {
        long long left = ROB_ROWS - rig_checkpoint(r, ids[t]);
        if (stats.min_left < 0 || left < stats.min_left)
            stats.min_left = left;
    }
    for (int t = 0; t < 2; t++) {
        rig_control(r, "Resume", ids[t]);
        if (fault_validation[t])
            rig_validation_fault(r, t, kill9[t]);
        else
            bt_unlock(r->holder, B_VALID);
        bd_get_resp *g = bd_wait_state(rig_client(r), ids[t], BD_ST(COMPLETED));
        bd_free(g);
        if (t == 0)
            bt_lock(r->holder, B_VALID); /* for the next backfill's validation */
    }
    for (int t = 0; t < 2; t++) {
        long long c0 = bt_int(r->pg, "SELECT count(*) FROM %s WHERE counter = 0", tables[t]);
        long long c1 = bt_int(r->pg, "SELECT count(*) FROM %s WHERE counter = 1", tables[t]);
        long long c2 = bt_int(r->pg, "SELECT count(*) FROM %s WHERE counter > 1", tables[t]);
        stats.rows0 += c0;
        stats.rows1 += c1;
        stats.rows2 += c2;
        assert_int_equal(c0, 0);
        assert_int_equal(c2, 0);
        assert_int_equal(c1, ROB_ROWS);
    }
    rig_assert_answers(r);
}

static void rig_teardown(rig *r)
{
    for (int i = 0; i < 2; i++) {
        rig_continue(r, i);
        bfc_close(r->c[i]);
        r->c[i] = NULL;
        if (r->up[i])
            bd_stop(&r->d[i]); /* a clean exit, also after a stop and continue */
        r->up[i] = false;
    }
    PQfinish(r->holder);
    PQfinish(r->pg);
    stats.rounds++;
}

static void rig_fault(rig *r, fault f)
{
    if (f == F_PG_RESTART)
        rig_pg_restart(r);
    else if (f == F_HOSTILE_PEERS)
        rig_hostile_peers(r);
    else
        rig_batch_fault(r, f);
    stats.faults[f]++;
    stats.trials++;
}

/* ---- CI: every fault once ------------------------------------------------------------------ */

static bool passed; /* keeps the daemons' logs when the suite failed */

static void test_every_fault(void **state)
{
    (void)state;
    rig r;
    rig_setup(&r, "rob");
    const fault faults[] = {F_KILL_BATCH,    F_HOSTILE_PEERS,  F_STOP_BATCH, F_STOP_PRE_FENCE,
                            F_STOP_IN_FENCE, F_STOP_PRE_FENCE, F_KILL_BATCH, F_PG_RESTART,
                            F_STOP_BATCH,    F_STOP_IN_FENCE,  F_KILL_BATCH};
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++)
        rig_fault(&r, faults[i]);
    bool vf[2] = {true, true}, k9[2] = {true, false};
    rig_finish(&r, vf, k9);
    rig_teardown(&r);
    passed = true;
}

/* ---- soak ------------------------------------------------------------------------------------ */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int64_t percentile(double p)
{
    if (stats.n_takeovers == 0)
        return -1;
    long i = (long)(p * (double)(stats.n_takeovers - 1) + 0.5);
    return stats.takeover_ms[i];
}

static void print_summary(void)
{
    qsort(stats.takeover_ms, (size_t)stats.n_takeovers, sizeof stats.takeover_ms[0], cmp_i64);
    printf("robustness: %ld rounds, %ld trials\n", stats.rounds, stats.trials);
    printf("faults:");
    for (int f = 0; f < F_COUNT; f++)
        printf(" %s=%ld", fault_names[f], stats.faults[f]);
    printf("\nrows at counter 0: %lld, 1: %lld, 2+: %lld\n", stats.rows0, stats.rows1, stats.rows2);
    printf("takeover ms (%ld): p50 %lld, p90 %lld, p99 %lld, max %lld (bound %d)\n",
           stats.n_takeovers, (long long)percentile(0.5), (long long)percentile(0.9),
           (long long)percentile(0.99), (long long)percentile(1.0), ROB_BOUND_MS);
    printf("progress after a PostgreSQL restart: max %lld ms\n", (long long)stats.max_restart_ms);
    printf("rows left after a round's faults: min %lld of %d\n", stats.min_left, ROB_ROWS);
    fflush(stdout);
}

static void test_soak(void **state)
{
    (void)state;
    const char *secs = getenv("BUZZ_SOAK_SECONDS");
    const char *seed_env = getenv("BUZZ_SOAK_SEED");
    unsigned seed = seed_env ? (unsigned)strtoul(seed_env, NULL, 10) : (unsigned)time(NULL);
    printf("soak: %s s, seed %u (BUZZ_SOAK_SEED replays it)\n", secs, seed);
    srand(seed);
    int64_t until = now_ms() + strtoll(secs, NULL, 10) * 1000;
    while (now_ms() < until) {
        rig r;
        char name[32];
        snprintf(name, sizeof name, "soak%ld", stats.rounds);
        rig_setup(&r, name);
        int n = 3 + rand() % 6;
        printf("soak: round %ld:", stats.rounds + 1);
        for (int i = 0; i < n && now_ms() < until; i++) {
            fault f = (fault)(rand() % (F_STOP_IN_FENCE + 1));
            printf(" %s", fault_names[f]);
            fflush(stdout);
            rig_fault(&r, f);
        }
        if (rand() % 4 == 0) {
            printf(" %s", fault_names[F_PG_RESTART]);
            rig_fault(&r, F_PG_RESTART);
        }
        if (rand() % 4 == 0) {
            printf(" %s", fault_names[F_HOSTILE_PEERS]);
            rig_fault(&r, F_HOSTILE_PEERS);
        }
        bool vf[2] = {rand() % 2 == 0, rand() % 2 == 0}, k9[2] = {rand() % 2 == 0, rand() % 2};
        for (int t = 0; t < 2; t++)
            if (vf[t])
                printf(" %s", fault_names[k9[t] ? F_KILL_VALIDATION : F_STOP_VALIDATION]);
        printf("\n");
        rig_finish(&r, vf, k9);
        rig_teardown(&r);
        bd_db_drop_last();
        print_summary();
    }
    passed = true;
}

static int setup(void **state)
{
    (void)state;
    bd_setup("rob");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    print_summary();
    bd_teardown(!passed);
    return 0;
}

int main(void)
{
    const struct CMUnitTest ci[] = {cmocka_unit_test(test_every_fault)};
    const struct CMUnitTest soak[] = {cmocka_unit_test(test_soak)};
    if (getenv("BUZZ_SOAK_SECONDS") != NULL)
        return cmocka_run_group_tests(soak, setup, teardown);
    return cmocka_run_group_tests(ci, setup, teardown);
}
