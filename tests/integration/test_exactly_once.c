/*
 * test_exactly_once.c - the exactly-once proof under crashes and takeovers.
 *
 * A deliberately non-idempotent declarative definition (needs_repair "true", update_set
 * "counter = t.counter + 1", postcondition "t.counter = 1") runs over 100,000 rows. Worker child
 * processes are SIGKILLed at random points at least 20 times; after each kill a new worker takes
 * the abandoned claim over once its lease has expired. Some rounds instead SIGSTOP the owner,
 * let a new worker take over and commit a batch, then SIGCONT the stale owner so that its next
 * batch reaches commit with a superseded generation. A final worker runs to completed. A monitor
 * on a parent-side connection samples the checkpoint throughout and asserts that it never moves
 * backwards (compared as a bigint).
 *
 * Guards proven: (1) a batch's mutation and its checkpoint advance commit in one transaction (a
 * crash leaves both or neither), and (2) the generation/claim fence is checked at commit (the
 * verdict raises and rolls the batch back when the fenced checkpoint update matched no row), so
 * a stale owner that resumes after a takeover commits nothing. Either guard missing makes some
 * row's counter 2 (or moves the checkpoint backwards), and the final assertions fail: every
 * counter is exactly 1, sum(counter) equals the row count, rows_committed equals the row count.
 *
 * Kill points are random on purpose (the seed is printed; BT_SEED replays it). Ordering that
 * matters (a takeover committing before the stale owner resumes) uses pipe messages from the
 * workers' production hooks, never sleeps.
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "bt.h"

#define ROWS         100000L
#define BATCH        500
#define LEASE_MS     250
#define KILL_ROUNDS  24 /* plain SIGKILL rounds (stop/resume rounds add more kills) */
#define STALE_EVERY  3  /* every 3rd round is a stop / takeover / resume round */
#define MAX_DELAY_US 80000
#define MSG_WAIT_MS  30000

static const char *const def_id = "items.count_once_v1";

static const bf_definition count_once = {
    .id = "items.count_once_v1",
    .description = "non-idempotent: counter + 1 per visit",
    .table = "public.items",
    .key = {{"id", BF_KEY_BIGINT}},
    .nkey = 1,
    .batch_size = BATCH,
    .needs_repair = "true",
    .update_set = "counter = t.counter + 1",
    .postcondition = "t.counter = 1",
    .validate_chunk = 10000,
    /* a takeover counts the killed owner's attempt, and kills can land before the new owner's
     * first commit several times in a row: enough attempts for every kill of the run */
    .retry = {.max_attempts = 100},
};

static const bf_definition *const defs[] = {&count_once};

/* ---- worker children -------------------------------------------------------------------- */

/* One message per hook call, written atomically (< PIPE_BUF) to the parent. */
typedef struct worker_msg {
    char kind; /* 'C' claim, 'B' batch, 'L' lost, 'V' validating, 'D' completed, 'O' other */
    int64_t generation;
} worker_msg;

typedef struct child {
    pid_t pid;
    int rd; /* parent's end of the child's message pipe */
    int wr; /* child's end (closed in the parent after spawn) */
    char owner[64];
} child;

static void child_send(int fd, char kind, int64_t generation)
{
    worker_msg m = {.kind = kind, .generation = generation};
    ssize_t n = write(fd, &m, sizeof m);
    (void)n;
}

static void hook_claim(void *arg, const char *id, int64_t generation)
{
    (void)id;
    child_send(*(int *)arg, 'C', generation);
}

static void hook_step(void *arg, const bf_step_info *info)
{
    char kind = info->step == BF_STEP_BATCH        ? 'B'
                : info->step == BF_STEP_LOST       ? 'L'
                : info->step == BF_STEP_VALIDATING ? 'V'
                : info->step == BF_STEP_COMPLETED  ? 'D'
                                                   : 'O';
    child_send(*(int *)arg, kind, info->generation);
}

/* The worker process: its own registry, engine and worker; claims (polling until the previous
 * owner's lease has expired) and steps until completed. Never calls cmocka. */
static int child_main(void *arg)
{
    child *ch = arg;
    close(ch->rd);
    bf_registry *reg = NULL;
    char diag[BF_DIAG_MAX];
    if (bf_registry_new(&reg) != BF_OK ||
        bf_registry_add(reg, &count_once, diag, sizeof diag) != BF_OK)
        return 2;
    bf_engine *e = bt_child_engine(reg, ch->owner, LEASE_MS);
    if (e == NULL)
        return 3;
    int fd = ch->wr;
    bf_worker_hooks hooks = {.after_claim = hook_claim, .after_step = hook_step, .arg = &fd};
    bf_worker *w = NULL;
    if (bf_worker_new(&w, e, &hooks) != BF_OK)
        return 4;
    bool held = false;
    int rc = 10;
    for (;;) {
        if (!held) {
            int64_t gen = 0;
            bf_err err = bt_claim_poll(w, def_id, &gen, 60000);
            if (err != BF_OK) {
                fprintf(stderr, "child %s: claim: %s\n", ch->owner, bf_err_name(err));
                rc = 5;
                break;
            }
            held = true;
        }
        bf_step_info info;
        bf_err err = bf_worker_step(w, &info);
        if (err != BF_OK) {
            fprintf(stderr, "child %s: step: %s\n", ch->owner, bf_err_name(err));
            if (err == BF_ERR_UNAVAILABLE || err == BF_ERR_RETRYABLE || err == BF_ERR_TIMEOUT)
                continue;
            rc = 6;
            break;
        }
        if (info.step == BF_STEP_COMPLETED) {
            rc = 0;
            break;
        }
        if (info.step == BF_STEP_FAILED || info.step == BF_STEP_BLOCKED) {
            fprintf(stderr, "child %s: %s: %s\n", ch->owner, bf_step_name(info.step), info.detail);
            rc = 7;
            break;
        }
        if (info.step == BF_STEP_LOST || info.step == BF_STEP_RETRY || info.step == BF_STEP_IDLE)
            held = false;
    }
    bf_worker_free(w);
    bf_engine_close(e);
    bf_registry_free(reg);
    return rc;
}

/* ---- the parent: monitor, kills, takeovers --------------------------------------------- */

static PGconn *mon; /* the monitor's own connection */
static long long mon_last = -1;
static long mon_samples, mon_advances;
static pid_t live[8]; /* children that may still run (killed in teardown) */

static void live_add(pid_t pid)
{
    for (size_t i = 0; i < sizeof live / sizeof live[0]; i++)
        if (live[i] == 0) {
            live[i] = pid;
            return;
        }
    fail_msg("too many live children");
}

static void live_del(pid_t pid)
{
    for (size_t i = 0; i < sizeof live / sizeof live[0]; i++)
        if (live[i] == pid)
            live[i] = 0;
}

/* The checkpoint as a bigint (-1 before the first batch); asserts it never moves backwards. */
static long long monitor_sample(void)
{
    long long cp = bt_int(mon,
                          "SELECT coalesce((checkpoint[1])::bigint, -1)"
                          " FROM buzz_backfill.backfill WHERE id = '%s'",
                          def_id);
    mon_samples++;
    if (cp < mon_last)
        fail_msg("checkpoint moved backwards: %lld after %lld", cp, mon_last);
    if (cp > mon_last)
        mon_advances++;
    mon_last = cp;
    return cp;
}

static long long now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Sample the checkpoint repeatedly for about us microseconds (the random kill delay). */
static void monitor_for(long long us)
{
    long long end = now_us() + us;
    do
        monitor_sample();
    while (now_us() < end);
}

/* Wait for a message of one of the kinds from ch, sampling meanwhile. Returns false on
 * timeout or when the child's pipe closed (it exited). */
static bool wait_msg(child *ch, const char *kinds, int timeout_ms, worker_msg *out)
{
    long long end = now_us() + (long long)timeout_ms * 1000;
    while (now_us() < end) {
        struct pollfd p = {.fd = ch->rd, .events = POLLIN};
        int n = poll(&p, 1, 2);
        if (n > 0) {
            worker_msg m;
            ssize_t got = read(ch->rd, &m, sizeof m);
            if (got == 0)
                return false;
            if (got == (ssize_t)sizeof m && strchr(kinds, m.kind) != NULL) {
                if (out != NULL)
                    *out = m;
                return true;
            }
        }
        monitor_sample();
    }
    return false;
}

static void spawn_worker(child *ch, int n)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    ch->rd = fds[0];
    ch->wr = fds[1];
    snprintf(ch->owner, sizeof ch->owner, "exactly-once-worker-%d", n);
    ch->pid = bt_spawn(child_main, ch);
    close(ch->wr);
    live_add(ch->pid);
}

static int reap(child *ch)
{
    int status = bt_wait_child(ch->pid);
    live_del(ch->pid);
    close(ch->rd);
    return status;
}

static void kill_worker(child *ch)
{
    assert_int_equal(kill(ch->pid, SIGKILL), 0);
    assert_int_equal(reap(ch), 128 + SIGKILL);
}

static int setup(void **state)
{
    (void)state;
    bt_db_create("exactly_once");
    PGconn *c = bt_connect();
    bt_make_items(c, "items", ROWS);
    PQfinish(c);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof live / sizeof live[0]; i++)
        if (live[i] != 0) {
            kill(live[i], SIGKILL);
            (void)bt_wait_child(live[i]);
            live[i] = 0;
        }
    if (mon != NULL)
        PQfinish(mon);
    mon = NULL;
    bt_db_drop();
    return 0;
}

static void test_exactly_once_under_kills(void **state)
{
    /* each worker step is one CALL of the batch loop committing up to 4 batches, so a kill
     * also lands inside a CALL whose backend keeps committing (fenced) batches after its client
     * died; few enough per step that the kill rounds and the stale-owner rounds happen while
     * most of the work is still ahead */
    bt_set_step_batches(4);
    (void)state;
    const char *seed_env = getenv("BT_SEED");
    unsigned seed = seed_env ? (unsigned)strtoul(seed_env, NULL, 10) : (unsigned)time(NULL);
    srand(seed);
    printf("exactly-once: seed %u (BT_SEED replays it)\n", seed);

    bf_registry *reg = bt_registry(defs, 1);
    bf_engine *e = bt_engine(reg, "exactly-once-operator", LEASE_MS);
    assert_int_equal(bf_register_all(e), BF_OK);
    assert_int_equal(bt_act(e, BF_ACTION_START, def_id), BF_OK);
    bf_backfill row = bt_get(e, def_id);
    assert_int_equal(row.state, BF_STATE_RUNNING);
    assert_string_equal(row.bound, "100000");
    int64_t gen0 = row.generation;
    mon = bt_connect();
    monitor_sample();

    long long t0 = now_us();
    int kills = 0, takeovers = 0, stale_rejected = 0, n = 0, plain_kills = 0;
    child cur;
    spawn_worker(&cur, n++);
    worker_msg m;
    int64_t last_gen = gen0;
    bool claimed = false; /* cur's claim message already consumed */
    for (int round = 0; plain_kills < KILL_ROUNDS; round++) {
        /* the current worker holds a claim (a takeover, except for the very first one) */
        if (!claimed) {
            if (!wait_msg(&cur, "C", MSG_WAIT_MS, &m))
                fail_msg("round %d: worker never claimed (the run may have finished early)", round);
            assert_true(m.generation > last_gen);
            last_gen = m.generation;
        }
        claimed = false;
        /* let it work for a random time, then interrupt it wherever it is */
        long long cp = monitor_sample();
        long long max_delay = cp > ROWS / 2 ? MAX_DELAY_US / 8 : MAX_DELAY_US;
        monitor_for(rand() % (max_delay + 1));

        if (round % STALE_EVERY == STALE_EVERY - 1 && monitor_sample() < ROWS * 6 / 10) {
            /* freeze the owner; a new worker takes over after expiry and commits a batch */
            assert_int_equal(kill(cur.pid, SIGSTOP), 0);
            child next;
            spawn_worker(&next, n++);
            bool took = wait_msg(&next, "C", MSG_WAIT_MS, &m);
            if (!took)
                kill(cur.pid, SIGCONT);
            assert_true(took);
            assert_true(m.generation > last_gen);
            last_gen = m.generation;
            takeovers++;
            bool committed = wait_msg(&next, "B", MSG_WAIT_MS, NULL);
            /* the stale owner resumes: its next batch must be fenced out at commit */
            assert_int_equal(kill(cur.pid, SIGCONT), 0);
            assert_true(committed);
            if (wait_msg(&cur, "L", 5000, NULL))
                stale_rejected++;
            else
                printf("exactly-once: round %d: stale owner was not rejected\n", round);
            kill_worker(&cur);
            kills++;
            cur = next;
            claimed = true;
            continue;
        }
        kill_worker(&cur);
        kills++;
        plain_kills++;
        row = bt_get(e, def_id);
        bool abandoned = row.claim_owner[0] != '\0';
        spawn_worker(&cur, n++);
        if (abandoned)
            takeovers++; /* the new worker's claim replaces the dead one's after expiry */
    }

    long long cp_at_end_of_kills = monitor_sample();
    /* the last worker runs to completion */
    while (wait_msg(&cur, "CBLVDO", MSG_WAIT_MS, &m))
        if (m.kind == 'D')
            break;
    if (m.kind != 'D')
        fail_msg("the final worker did not complete (state %s): %lld rows have counter <> 1",
                 bf_state_name(bt_get(e, def_id).state),
                 bt_int(mon, "SELECT count(*) FROM items WHERE counter <> 1"));
    assert_int_equal(reap(&cur), 0);
    monitor_sample();
    long long elapsed_ms = (now_us() - t0) / 1000;

    row = bt_get(e, def_id);
    assert_int_equal(row.state, BF_STATE_COMPLETED);
    assert_string_equal(row.checkpoint, "100000");
    assert_int_equal(row.rows_committed, ROWS);
    assert_int_equal(bt_int(mon, "SELECT count(*) FROM items WHERE counter <> 1"), 0);
    assert_int_equal(bt_int(mon, "SELECT sum(counter) FROM items"), ROWS);
    assert_int_equal(bt_int(mon, "SELECT count(*) FROM items"), ROWS);
    printf("exactly-once: %ld rows, %d SIGKILLs, %d takeovers, %d stale owners rejected at"
           " commit, generation %lld -> %lld, %ld checkpoint samples (%ld advances), %lld ms\n",
           ROWS, kills, takeovers, stale_rejected, (long long)gen0, (long long)row.generation,
           mon_samples, mon_advances, elapsed_ms);
    printf("exactly-once: the kill phase ended at checkpoint %lld\n", cp_at_end_of_kills);
    assert_true(kills >= 20);
    assert_true(takeovers >= 20);
    assert_true(stale_rejected >= 1);
    assert_true(row.generation - gen0 >= 20);
    bf_engine_close(e);
    bf_registry_free(reg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exactly_once_under_kills),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
