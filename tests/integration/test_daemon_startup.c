/*
 * test_daemon_startup.c - the real buzz-backfilld binary as a child process, against a private
 * database with the demo definitions module and an ipc:// listener with boundary authority,
 * driven through the client library (Readiness.Check, Admin.List/Get/Start/Audit):
 *
 *   1. no engine schema, auto_migrate off: schema NOT_READY "schema missing", backfills
 *      unknown, reads UNAVAILABLE, and nothing creates the schema (no backfill stands in for a
 *      migration); `buzz-backfilld migrate` then installs it;
 *   2. manual mode: ready without a gate, every definition registered and left pending;
 *   3. automatic mode: the required backfills are started and gate readiness while their
 *      batches are held by a table lock the test owns; SIGTERM while those batches are in
 *      flight (one declarative, one callback definition) cancels both, which roll back, and
 *      exits 0 while the test still holds the lock, leaving no claim and no failed attempt in
 *      PostgreSQL (guard: the cancel on stop, engine.c bf__wait_result, through the daemon);
 *   4. restart in automatic mode: the started work is recovered and the gate opens when the
 *      required backfills complete;
 *   5. manual mode recovers started work: an operator's Start through the admin API runs to
 *      completion on the daemon's workers, audited with the ipc authority and no actor.
 * The cases run in order on one database (each builds on the state the previous one left).
 */
#include <errno.h>
#include <fcntl.h>
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
#include "buzz/backfill/v1/admin.pb-c.h"
#include "buzz/backfill/v1/readiness.pb-c.h"
#include "buzz/backfill/v1/rpc.pb-c.h"
#include "buzz/client.h"

#define CONTENT_LEN "demo.events.content_len_v1"
#define TAG_COUNT   "demo.events.tag_count_v1"
#define PUBKEY_HEX  "demo.events.pubkey_hex_v1"
#define SOURCE_ROWS 5000

typedef Buzz__Backfill__V1__CheckResponse check_resp;

static char dir[64];
static int daemon_seq;
static int cases_passed;
#define CASES 5

typedef struct daemon_proc {
    pid_t pid;
    char url[160];
    char log[160];
} daemon_proc;

/* ---- setup ----------------------------------------------------------------------------------- */

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static int setup(void **state)
{
    snprintf(dir, sizeof dir, "/tmp/buzz-startup-XXXXXX");
    assert_non_null(mkdtemp(dir));
    bt_db_create("daemon_startup");
    PGconn *c = bt_connect();
    /* the demo schema, and historical rows from before its derived columns existed */
    PGresult *r = PQexec(c, read_file(BUZZ_SOURCE_DIR "/examples/demo/schema.sql"));
    assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    bt_exec(c,
            "INSERT INTO demo.events (event_id, pubkey, created_at, kind, content, tags)"
            " SELECT sha256(convert_to('event:' || g, 'UTF8')),"
            " sha256(convert_to('author:' || g %% 50, 'UTF8')),"
            " timestamptz '2024-01-01 00:00:00+00' + (g / 25) * interval '1 second', 1,"
            " 'note ' || g, CASE WHEN g %% 2 = 0 THEN '[]'::jsonb ELSE '[[\"t\",\"x\"]]' END"
            " FROM generate_series(1, %d) g",
            SOURCE_ROWS);
    bt_exec(c, "ANALYZE demo.events"); /* so start records a known source estimate */
    PQfinish(c);
    return 0;
}

static pid_t started[16];
static int n_started;
static PGconn *holder; /* the table-lock holder of the automatic-mode case */

/* After each case: a failed one may have left its daemon or its lock behind. */
static int case_teardown(void **state)
{
    for (int i = 0; i < n_started; i++) {
        int st;
        if (waitpid(started[i], &st, WNOHANG) == 0) {
            kill(started[i], SIGKILL);
            waitpid(started[i], &st, 0);
        }
    }
    n_started = 0;
    if (holder != NULL)
        PQfinish(holder);
    holder = NULL;
    return 0;
}

static int teardown(void **state)
{
    bt_db_drop();
    if (cases_passed != CASES) {
        fprintf(stderr, "daemon logs kept in %s\n", dir);
        return 0;
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- the daemon ---------------------------------------------------------------------------- */

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Start buzz-backfilld run with the common flags and extra ones (NULL-terminated). Returns once
 * its listener accepts a connection. */
static void daemon_start(daemon_proc *d, ...)
{
    daemon_seq++;
    snprintf(d->url, sizeof d->url, "ipc://%s/admin-%d.sock", dir, daemon_seq);
    snprintf(d->log, sizeof d->log, "%s/daemon-%d.log", dir, daemon_seq);
    char *argv[48];
    int n = 0;
    argv[n++] = BUZZ_BACKFILLD_PATH;
    argv[n++] = "--database-url";
    argv[n++] = (char *)bt_db_conninfo();
    argv[n++] = "--listen";
    argv[n++] = d->url;
    argv[n++] = "--ipc-boundary";
    argv[n++] = "on";
    argv[n++] = "--modules";
    argv[n++] = BUZZ_DEMO_MODULE_PATH;
    argv[n++] = "--workers";
    argv[n++] = "2";
    /* batches wait for the test's table lock instead of timing out (and the lease outlasts
     * such a wait, as the daemon requires) */
    argv[n++] = "--lease-ms";
    argv[n++] = "1200000";
    argv[n++] = "--lock-timeout-ms";
    argv[n++] = "600000";
    argv[n++] = "--statement-timeout-ms";
    argv[n++] = "600000";
    argv[n++] = "--log-level";
    argv[n++] = "debug";
    va_list ap;
    va_start(ap, d);
    char *a;
    while ((a = va_arg(ap, char *)) != NULL && n < 46)
        argv[n++] = a;
    va_end(ap);
    argv[n++] = "run";
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0)
            _exit(126);
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
        execv(argv[0], argv);
        _exit(127);
    }
    d->pid = pid;
    if (n_started < (int)(sizeof started / sizeof started[0]))
        started[n_started++] = pid;
    for (int i = 0; i < 1000; i++) { /* poll until the listener answers, at most 10 s */
        bfc_client *c = NULL;
        if (bfc_open(&c, d->url, NULL, NULL, 0) == BF_OK) {
            bfc_close(c);
            return;
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            fail_msg("buzz-backfilld exited early (status %d); see %s", st, d->log);
        sleep_ms(10);
    }
    fail_msg("buzz-backfilld did not listen within 10 s; see %s", d->log);
}

/* Send sig and return the exit status (fails after 60 s). */
static int daemon_signal_wait(daemon_proc *d, int sig)
{
    if (sig != 0)
        assert_int_equal(kill(d->pid, sig), 0);
    for (int i = 0; i < 6000; i++) {
        int st;
        if (waitpid(d->pid, &st, WNOHANG) == d->pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        sleep_ms(10);
    }
    kill(d->pid, SIGKILL);
    fail_msg("buzz-backfilld did not exit within 60 s; see %s", d->log);
    return -1;
}

static bool log_contains(const daemon_proc *d, const char *text)
{
    FILE *f = fopen(d->log, "r");
    if (f == NULL)
        return false;
    char line[2048];
    bool found = false;
    while (!found && fgets(line, sizeof line, f) != NULL)
        found = strstr(line, text) != NULL;
    fclose(f);
    return found;
}

static void wait_log(const daemon_proc *d, const char *text)
{
    for (int i = 0; i < 3000; i++) {
        if (log_contains(d, text))
            return;
        sleep_ms(10);
    }
    fail_msg("\"%s\" never appeared in %s", text, d->log);
}

static bfc_client *client_open(const daemon_proc *d)
{
    bfc_client *c = NULL;
    char diag[128] = "";
    bfc_options opts = {.timeout_ms = 40000};
    if (bfc_open(&c, d->url, &opts, diag, sizeof diag) != BF_OK)
        fail_msg("cannot connect to %s: %s", d->url, diag);
    return c;
}

/* ---- calls ----------------------------------------------------------------------------------- */

static check_resp *check(bfc_client *c, uint32_t wait_ms)
{
    Buzz__Backfill__V1__CheckRequest req = BUZZ__BACKFILL__V1__CHECK_REQUEST__INIT;
    if (wait_ms > 0) {
        req.has_wait_ms = true;
        req.wait_ms = wait_ms;
    }
    ProtobufCMessage *out = NULL;
    bf_err err =
        bfc_call(c, &buzz__backfill__v1__readiness__descriptor, "Check", &req.base, &out, NULL);
    if (err != BF_OK)
        fail_msg("Readiness.Check: %s (%s)", bf_err_name(err), bfc_last_status(c)->message);
    check_resp *r = (check_resp *)out;
    assert_true(r->has_ready);
    assert_int_equal(r->n_components, 3);
    return r;
}

static const Buzz__Backfill__V1__Component *component(const check_resp *r, const char *name)
{
    for (size_t i = 0; i < r->n_components; i++)
        if (strcmp(r->components[i]->name, name) == 0)
            return r->components[i];
    fail_msg("no component %s", name);
    return NULL;
}

static void assert_component(const check_resp *r, const char *name, int status,
                             const char *reason_prefix)
{
    const Buzz__Backfill__V1__Component *c = component(r, name);
    assert_true(c->has_status);
    assert_int_equal(c->status, status);
    if (reason_prefix != NULL) {
        assert_non_null(c->reason);
        assert_memory_equal(c->reason, reason_prefix, strlen(reason_prefix));
    }
}

static void free_msg(void *m)
{
    protobuf_c_message_free_unpacked((ProtobufCMessage *)m, NULL);
}

/* Check with a bounded wait until ready; fails after about 60 s. */
static void wait_ready(bfc_client *c)
{
    for (int i = 0; i < 12; i++) {
        check_resp *r = check(c, 5000);
        bool ready = r->ready;
        free_msg(r);
        if (ready)
            return;
    }
    fail_msg("not ready within 60 s");
}

static Buzz__Backfill__V1__ListResponse *list_all(bfc_client *c, int *status_out)
{
    Buzz__Backfill__V1__ListRequest req = BUZZ__BACKFILL__V1__LIST_REQUEST__INIT;
    ProtobufCMessage *out = NULL;
    (void)bfc_call(c, &buzz__backfill__v1__admin__descriptor, "List", &req.base, &out, NULL);
    *status_out = bfc_last_status(c)->code;
    return (Buzz__Backfill__V1__ListResponse *)out;
}

static Buzz__Backfill__V1__Backfill *find(Buzz__Backfill__V1__ListResponse *l, const char *id)
{
    for (size_t i = 0; l != NULL && i < l->n_backfills; i++)
        if (strcmp(l->backfills[i]->id, id) == 0)
            return l->backfills[i];
    return NULL;
}

static Buzz__Backfill__V1__GetResponse *get(bfc_client *c, const char *id)
{
    Buzz__Backfill__V1__GetRequest req = BUZZ__BACKFILL__V1__GET_REQUEST__INIT;
    req.id = (char *)id;
    ProtobufCMessage *out = NULL;
    bf_err err = bfc_call(c, &buzz__backfill__v1__admin__descriptor, "Get", &req.base, &out, NULL);
    if (err != BF_OK)
        fail_msg("Admin.Get %s: %s", id, bf_err_name(err));
    return (Buzz__Backfill__V1__GetResponse *)out;
}

/* Poll List until every demo definition is registered (startup registers them). */
static Buzz__Backfill__V1__ListResponse *list_registered(bfc_client *c)
{
    for (int i = 0; i < 3000; i++) {
        int code = 0;
        Buzz__Backfill__V1__ListResponse *l = list_all(c, &code);
        if (l != NULL && l->n_backfills == 3)
            return l;
        if (l != NULL)
            free_msg(l);
        sleep_ms(10);
    }
    fail_msg("the demo definitions were not registered within 30 s");
    return NULL;
}

/* ---- cases ----------------------------------------------------------------------------------- */

static void test_missing_schema_is_a_schema_failure(void **state)
{
    daemon_proc d;
    daemon_start(&d, "--auto-migrate", "off", "--auto-backfill", "on", NULL);
    bfc_client *c = client_open(&d);
    check_resp *r = check(c, 0);
    assert_false(r->ready);
    assert_true(r->has_auto_migrate && !r->auto_migrate);
    assert_true(r->has_auto_backfill && r->auto_backfill);
    assert_component(r, "database", BUZZ__BACKFILL__V1__COMPONENT_STATUS__READY, NULL);
    assert_component(r, "schema", BUZZ__BACKFILL__V1__COMPONENT_STATUS__NOT_READY,
                     "schema missing");
    assert_component(r, "backfills", BUZZ__BACKFILL__V1__COMPONENT_STATUS__UNKNOWN_STATUS, NULL);
    free_msg(r);
    int code = 0;
    Buzz__Backfill__V1__ListResponse *l = list_all(c, &code);
    assert_null(l);
    assert_int_equal(code, BUZZ__BACKFILL__V1__STATUS_CODE__UNAVAILABLE);
    /* the daemon's startup reported the schema failure and created nothing */
    wait_log(&d, "engine schema is missing or incomplete");
    PGconn *pg = bt_connect();
    assert_int_equal(
        bt_int(pg, "SELECT count(*) FROM pg_namespace WHERE nspname = 'buzz_backfill'"), 0);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM demo.events WHERE content_len IS NOT NULL"),
                     0);
    bfc_close(c);
    assert_int_equal(daemon_signal_wait(&d, SIGTERM), 0);
    assert_int_equal(
        bt_int(pg, "SELECT count(*) FROM pg_namespace WHERE nspname = 'buzz_backfill'"), 0);

    /* the operator migrates out of band */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' migrate --database-url \"%s\" >> '%s/migrate.log' 2>&1",
             BUZZ_BACKFILLD_PATH, bt_db_conninfo(), dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(bt_int(pg, "SELECT max(version) FROM buzz_backfill.schema_migration"),
                     BF_SCHEMA_VERSION);
    PQfinish(pg);
    cases_passed++;
}

static void test_manual_mode_adds_no_gate(void **state)
{
    daemon_proc d;
    daemon_start(&d, "--auto-migrate", "off", "--auto-backfill", "off", NULL);
    bfc_client *c = client_open(&d);
    Buzz__Backfill__V1__ListResponse *l = list_registered(c);
    for (size_t i = 0; i < l->n_backfills; i++) {
        assert_int_equal(l->backfills[i]->state, BUZZ__BACKFILL__V1__STATE__PENDING);
        assert_true(l->backfills[i]->has_gating && !l->backfills[i]->gating);
        assert_null(l->backfills[i]->bound); /* unknown before start: absent */
        assert_null(l->backfills[i]->claim);
    }
    assert_true(find(l, CONTENT_LEN)->required);
    free_msg(l);
    check_resp *r = check(c, 0);
    assert_true(r->ready);
    assert_component(r, "schema", BUZZ__BACKFILL__V1__COMPONENT_STATUS__READY, NULL);
    assert_component(r, "backfills", BUZZ__BACKFILL__V1__COMPONENT_STATUS__READY, "manual mode");
    assert_int_equal(r->n_gating, 0);
    free_msg(r);
    bfc_close(c);
    assert_int_equal(daemon_signal_wait(&d, SIGTERM), 0);
    PGconn *pg = bt_connect();
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM buzz_backfill.backfill"
                                " WHERE state <> 'pending' OR bound IS NOT NULL"),
                     0);
    PQfinish(pg);
    cases_passed++;
}

static void test_automatic_mode_gates_and_sigterm_releases_claims(void **state)
{
    holder = bt_connect();
    PGconn *pg = bt_connect();
    /* the required backfills' batches block on these row locks: the gate cannot open
     * meanwhile (row locks, not a table lock: Start's preflight plans the mutation, which takes
     * the table lock an UPDATE takes) */
    bt_exec(holder, "BEGIN");
    bt_exec(holder, "SELECT count(*) FROM (SELECT 1 FROM demo.events FOR UPDATE) s");
    daemon_proc d;
    daemon_start(&d, "--auto-migrate", "off", "--auto-backfill", "on", NULL);
    bt_wait_lock_waiters(pg, 2); /* both workers hold a claim and a batch in flight */
    bfc_client *c = client_open(&d);

    check_resp *r = check(c, 0);
    assert_false(r->ready);
    assert_component(r, "database", BUZZ__BACKFILL__V1__COMPONENT_STATUS__READY, NULL);
    assert_component(r, "schema", BUZZ__BACKFILL__V1__COMPONENT_STATUS__READY, NULL);
    assert_component(r, "backfills", BUZZ__BACKFILL__V1__COMPONENT_STATUS__NOT_READY,
                     "2 required backfills");
    assert_int_equal(r->n_gating, 2);
    assert_string_equal(r->gating[0]->id, CONTENT_LEN);
    assert_string_equal(r->gating[1]->id, TAG_COUNT);
    for (size_t i = 0; i < 2; i++) {
        assert_true(r->gating[i]->has_state);
        assert_int_equal(r->gating[i]->state, BUZZ__BACKFILL__V1__STATE__RUNNING);
    }
    free_msg(r);

    /* the admin boundary answers while serving is gated */
    int code = 0;
    Buzz__Backfill__V1__ListResponse *l = list_all(c, &code);
    assert_non_null(l);
    assert_int_equal(l->n_backfills, 3);
    assert_true(find(l, CONTENT_LEN)->gating);
    assert_true(find(l, TAG_COUNT)->gating);
    assert_false(find(l, PUBKEY_HEX)->gating); /* not required: never started automatically */
    assert_int_equal(find(l, PUBKEY_HEX)->state, BUZZ__BACKFILL__V1__STATE__PENDING);
    free_msg(l);
    Buzz__Backfill__V1__GetResponse *g = get(c, CONTENT_LEN);
    assert_int_equal(g->backfill->state, BUZZ__BACKFILL__V1__STATE__RUNNING);
    assert_non_null(g->backfill->bound);
    assert_null(g->backfill->checkpoint); /* the first batch has not committed */
    assert_non_null(g->backfill->claim);
    assert_true(g->backfill->claim->valid);
    assert_true(g->backfill->progress->has_source_estimate);
    assert_true(g->backfill->times->has_started_at_us);
    assert_false(g->backfill->times->has_completed_at_us);
    free_msg(g);
    bfc_close(c);

    /* SIGTERM with both batches in flight: each worker cancels its batch (it rolls back, nothing
     * partial commits and no other batch starts), releases its claim, exit 0; a stop is not a
     * failed attempt. The holder keeps its locks until the daemon has exited: the batches can
     * only end by the cancel (batch.c pipeline_collect), never by finishing. */
    assert_int_equal(kill(d.pid, SIGTERM), 0);
    wait_log(&d, "received SIGTERM");
    assert_int_equal(daemon_signal_wait(&d, 0), 0);
    bt_exec(holder, "ROLLBACK");
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM buzz_backfill.backfill"
                                " WHERE claim_owner IS NOT NULL OR claim_expires_at IS NOT NULL"),
                     0);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM buzz_backfill.backfill WHERE required"
                                " AND state = 'running' AND checkpoint IS NULL AND attempts = 0"
                                " AND rows_committed = 0"),
                     2);
    PQfinish(pg);
    cases_passed++;
}

static void test_restart_recovers_and_opens_the_gate(void **state)
{
    daemon_proc d;
    daemon_start(&d, "--auto-migrate", "on", "--auto-backfill", "on", NULL);
    bfc_client *c = client_open(&d);
    wait_ready(c);
    check_resp *r = check(c, 0);
    assert_true(r->ready);
    assert_int_equal(r->n_gating, 0);
    assert_component(r, "backfills", BUZZ__BACKFILL__V1__COMPONENT_STATUS__READY, NULL);
    free_msg(r);
    int code = 0;
    Buzz__Backfill__V1__ListResponse *l = list_all(c, &code);
    assert_non_null(l);
    assert_int_equal(find(l, CONTENT_LEN)->state, BUZZ__BACKFILL__V1__STATE__COMPLETED);
    assert_int_equal(find(l, TAG_COUNT)->state, BUZZ__BACKFILL__V1__STATE__COMPLETED);
    assert_false(find(l, CONTENT_LEN)->gating);
    assert_int_equal(find(l, PUBKEY_HEX)->state, BUZZ__BACKFILL__V1__STATE__PENDING);
    assert_int_equal(find(l, CONTENT_LEN)->progress->rows_committed, SOURCE_ROWS);
    free_msg(l);
    bfc_close(c);
    assert_int_equal(daemon_signal_wait(&d, SIGTERM), 0);
    PGconn *pg = bt_connect();
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM demo.events"
                                " WHERE content_len IS DISTINCT FROM octet_length(content)"
                                " OR tag_count IS DISTINCT FROM jsonb_array_length(tags)"),
                     0);
    PQfinish(pg);
    cases_passed++;
}

static void test_manual_mode_runs_operator_started_work(void **state)
{
    daemon_proc d;
    daemon_start(&d, "--auto-backfill", "off", NULL);
    bfc_client *c = client_open(&d);
    Buzz__Backfill__V1__ControlRequest req = BUZZ__BACKFILL__V1__CONTROL_REQUEST__INIT;
    req.id = PUBKEY_HEX;
    ProtobufCMessage *out = NULL;
    assert_int_equal(
        bfc_call(c, &buzz__backfill__v1__admin__descriptor, "Start", &req.base, &out, NULL), BF_OK);
    Buzz__Backfill__V1__ControlResponse *cr = (Buzz__Backfill__V1__ControlResponse *)out;
    assert_int_equal(cr->outcome, BUZZ__BACKFILL__V1__CONTROL_OUTCOME__ACCEPTED);
    assert_int_equal(cr->prior_state, BUZZ__BACKFILL__V1__STATE__PENDING);
    assert_int_equal(cr->resulting_state, BUZZ__BACKFILL__V1__STATE__RUNNING);
    assert_false(cr->replayed);
    free_msg(cr);
    check_resp *r = check(c, 0); /* manual mode: started work never gates */
    assert_true(r->ready);
    free_msg(r);
    bool completed = false;
    for (int i = 0; i < 3000 && !completed; i++) {
        Buzz__Backfill__V1__GetResponse *g = get(c, PUBKEY_HEX);
        completed = g->backfill->state == BUZZ__BACKFILL__V1__STATE__COMPLETED;
        free_msg(g);
        if (!completed)
            sleep_ms(10);
    }
    assert_true(completed);

    /* the start is audited with the boundary authority and no invented actor */
    Buzz__Backfill__V1__AuditRequest areq = BUZZ__BACKFILL__V1__AUDIT_REQUEST__INIT;
    areq.id = PUBKEY_HEX;
    out = NULL;
    assert_int_equal(
        bfc_call(c, &buzz__backfill__v1__admin__descriptor, "Audit", &areq.base, &out, NULL),
        BF_OK);
    Buzz__Backfill__V1__AuditResponse *a = (Buzz__Backfill__V1__AuditResponse *)out;
    bool seen = false;
    char want[64];
    snprintf(want, sizeof want, "ipc uid=%ld", (long)getuid());
    for (size_t i = 0; i < a->n_entries; i++) {
        Buzz__Backfill__V1__AuditEntry *e = a->entries[i];
        if (e->action == NULL || strcmp(e->action, "start") != 0)
            continue;
        seen = true;
        assert_null(e->actor);
        assert_non_null(e->authority);
        assert_string_equal(e->authority, want);
        assert_non_null(e->request_id);
        assert_int_equal(e->prior_state, BUZZ__BACKFILL__V1__STATE__PENDING);
        assert_int_equal(e->resulting_state, BUZZ__BACKFILL__V1__STATE__RUNNING);
    }
    assert_true(seen);
    free_msg(a);
    bfc_close(c);
    assert_int_equal(daemon_signal_wait(&d, SIGTERM), 0);
    cases_passed++;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_missing_schema_is_a_schema_failure, case_teardown),
        cmocka_unit_test_teardown(test_manual_mode_adds_no_gate, case_teardown),
        cmocka_unit_test_teardown(test_automatic_mode_gates_and_sigterm_releases_claims,
                                  case_teardown),
        cmocka_unit_test_teardown(test_restart_recovers_and_opens_the_gate, case_teardown),
        cmocka_unit_test_teardown(test_manual_mode_runs_operator_started_work, case_teardown),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
