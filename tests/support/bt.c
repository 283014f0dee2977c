/* bt.c - test support: private databases, SQL helpers, barriers, child processes. */
#include "bt.h"
#ifdef BUZZ_TEST_FILES
#include "bt_files.h"
#endif

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static char db_name[64];
static char db_conninfo[1024];

static void bt_vfail(const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    fail_msg("%s", msg);
}

static void bt_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void bt_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bt_vfail(fmt, ap);
    va_end(ap);
}

static PGconn *bt_connect_to(const char *conninfo)
{
    PGconn *c = PQconnectdb(conninfo);
    if (PQstatus(c) != CONNECTION_OK)
        bt_fail("cannot connect to test database: %s", PQerrorMessage(c));
    PQclear(PQexec(c, "SET client_min_messages = warning"));
    return c;
}

const char *bt_db_create(const char *name)
{
    const char *url = getenv("BUZZ_TEST_PG_URL");
    if (url == NULL || url[0] == '\0')
        bt_fail("BUZZ_TEST_PG_URL is not set (scripts/test.sh sets it)");
    snprintf(db_name, sizeof db_name, "bt_%s_%ld", name, (long)getpid());
    PGconn *admin = bt_connect_to(url);
    char sql[256];
    snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s", db_name);
    PQclear(PQexec(admin, sql));
    snprintf(sql, sizeof sql, "CREATE DATABASE %s TEMPLATE template0", db_name);
    PGresult *r = PQexec(admin, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        bt_fail("cannot create test database: %s", PQerrorMessage(admin));
    PQclear(r);
    PQfinish(admin);
    /* libpq: a later dbname keyword overrides the URL's database */
    PQconninfoOption *opts = PQconninfoParse(url, NULL);
    size_t off = 0;
    for (PQconninfoOption *o = opts; o && o->keyword; o++) {
        if (o->val == NULL || strcmp(o->keyword, "dbname") == 0)
            continue;
        off += (size_t)snprintf(db_conninfo + off, sizeof db_conninfo - off, "%s='%s' ", o->keyword,
                                o->val);
    }
    PQconninfoFree(opts);
    snprintf(db_conninfo + off, sizeof db_conninfo - off, "dbname='%s'", db_name);
    return db_conninfo;
}

void bt_db_drop_registry(bf_registry *reg)
{
    bf_registry_free(reg);
    bt_db_drop();
}

void bt_db_drop(void)
{
    const char *url = getenv("BUZZ_TEST_PG_URL");
    if (url == NULL || db_name[0] == '\0')
        return;
    PGconn *admin = PQconnectdb(url);
    char sql[256];
    snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", db_name);
    PQclear(PQexec(admin, sql));
    PQfinish(admin);
    db_name[0] = '\0'; /* dropped once: a second call (a failed group's teardown) does nothing */
}

const char *bt_db_conninfo(void)
{
    return db_conninfo;
}

PGconn *bt_connect(void)
{
    return bt_connect_to(db_conninfo);
}

static PGresult *bt_vquery(PGconn *c, const char *fmt, va_list ap)
{
    char sql[8192];
    vsnprintf(sql, sizeof sql, fmt, ap);
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        bt_fail("SQL failed: %s\n  %s", PQerrorMessage(c), sql);
    return r;
}

void bt_exec(PGconn *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PQclear(bt_vquery(c, fmt, ap));
    va_end(ap);
}

long long bt_int(PGconn *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PGresult *r = bt_vquery(c, fmt, ap);
    va_end(ap);
    long long v = 0;
    if (PQntuples(r) > 0 && !PQgetisnull(r, 0, 0))
        v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

char *bt_text(PGconn *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PGresult *r = bt_vquery(c, fmt, ap);
    va_end(ap);
    char *v = NULL;
    if (PQntuples(r) > 0 && !PQgetisnull(r, 0, 0))
        v = strdup(PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

static void bt_log(void *arg, const bf_log_record *rec)
{
    bf_log_level level = rec->level;
    const char *msg = rec->msg;
    (void)arg;
    if (level >= BF_LOG_WARN || getenv("BT_VERBOSE") != NULL)
        fprintf(stderr, "[engine %d] %s\n", (int)level, msg);
}

static int step_batches = 1;
static bf_throttle *throttle;

void bt_set_step_batches(int n)
{
    step_batches = n;
}

void bt_set_throttle(bf_throttle *t)
{
    throttle = t;
}

bf_engine *bt_engine(const bf_registry *reg, const char *owner, int lease_ms)
{
    bf_config cfg = {.conninfo = db_conninfo,
                     .owner = owner,
                     .lease_ms = lease_ms,
                     .statement_timeout_ms = 20000,
                     .lock_timeout_ms = 20000,
                     .step_batches = step_batches,
                     .throttle = throttle,
                     .log = getenv("BT_QUIET") ? NULL : bt_log};
    bf_engine *e = NULL;
    bf_err err = bf_engine_open(&e, &cfg, reg);
    if (err != BF_OK)
        bt_fail("bf_engine_open: %s", bf_err_str(err));
    err = bf_migrate(e);
    if (err != BF_OK)
        bt_fail("bf_migrate: %s: %s", bf_err_str(err), bf_engine_diag(e));
    return e;
}

bf_err bt_standin(const bf_definition **out, const bf_definition *def, const char *revision,
                  char *why, size_t why_len)
{
#ifdef BUZZ_TEST_FILES
    bool files = false;
    bf_err err = bt_files_mode(&files, why, why_len);
    if (err != BF_OK)
        return err;
    if (files)
        return bt_files_standin(out, def, revision, why, why_len);
#else
    const char *mode = getenv("BUZZ_CONFORMANCE_DEFINITIONS");
    (void)revision;
    if (mode != NULL && mode[0] != '\0') {
        snprintf(why, why_len,
                 "BUZZ_CONFORMANCE_DEFINITIONS is set, but this build has no "
                 "definition file parser (buzz-server)");
        return BF_ERR_INVALID_ARGUMENT;
    }
#endif
    *out = def;
    return BF_OK;
}

bf_registry *bt_registry(const bf_definition *const *defs, size_t n)
{
    bf_registry *reg = NULL;
    assert_int_equal(bf_registry_new(&reg), BF_OK);
    for (size_t i = 0; i < n; i++) {
        char diag[BF_DIAG_MAX] = "";
        const bf_definition *def = NULL;
        if (bt_standin(&def, defs[i], NULL, diag, sizeof diag) != BF_OK)
            bt_fail("definition files: %s", diag);
        bf_err err = bf_registry_add(reg, def, diag, sizeof diag);
        if (err != BF_OK)
            bt_fail("bf_registry_add: %s", diag);
    }
    return reg;
}

bf_err bt_sql_mutate(bf_txn *txn, void *arg)
{
    for (const char *const *sql = arg; sql != NULL && *sql != NULL; sql++) {
        long rows = 0;
        bf_err err = bf_txn_exec(txn, *sql, 0, NULL, &rows);
        if (err != BF_OK)
            return err;
    }
    return BF_OK;
}

void bt_make_items(PGconn *c, const char *table, long rows)
{
    bt_exec(c,
            "CREATE TABLE %s (id bigint PRIMARY KEY, val integer NOT NULL,"
            " fixed integer, counter integer NOT NULL DEFAULT 0);"
            "INSERT INTO %s (id, val) SELECT g, g %% 1000 FROM generate_series(1, %ld) g;"
            "ANALYZE %s",
            table, table, rows, table);
}

void bt_make_events(PGconn *c, const char *table, long rows, int ties)
{
    /* many rows share each timestamp: the compound key must order ties by eid */
    bt_exec(c,
            "CREATE TABLE %s (ts timestamptz NOT NULL, eid bytea NOT NULL, kind integer NOT NULL,"
            " kind_norm integer, PRIMARY KEY (ts, eid));"
            "INSERT INTO %s (ts, eid, kind)"
            " SELECT timestamptz '2024-01-01 00:00:00+00' + ((g / %d) * interval '1 second'),"
            "  decode(md5(g::text), 'hex'), g %% 7 FROM generate_series(1, %ld) g;"
            "ANALYZE %s",
            table, table, ties > 0 ? ties : 1, rows, table);
}

void bt_install_barrier(PGconn *c)
{
    bt_exec(c, "CREATE OR REPLACE FUNCTION public.bt_barrier(key integer) RETURNS boolean"
               " LANGUAGE plpgsql AS $$ BEGIN"
               " PERFORM pg_advisory_xact_lock_shared(424242, key); RETURN true; END $$");
}

void bt_lock(PGconn *holder, int key)
{
    bt_exec(holder, "SELECT pg_advisory_lock(424242, %d)", key);
}

void bt_unlock(PGconn *holder, int key)
{
    bt_exec(holder, "SELECT pg_advisory_unlock(424242, %d)", key);
}

void bt_wait_waiters(PGconn *c, int key, int n)
{
    /* polls pg_locks: the barrier is the lock itself, this only observes who reached it */
    for (int i = 0; i < 60000; i++) {
        long long waiting =
            bt_int(c,
                   "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                   " AND classid = 424242 AND objid = %d AND database = (SELECT oid FROM"
                   " pg_database WHERE datname = current_database())",
                   key);
        if (waiting >= n)
            return;
        usleep(1000);
    }
    bt_fail("no backend reached barrier %d within 60 s", key);
}

pid_t bt_spawn(int (*fn)(void *), void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        bt_fail("fork failed");
    if (pid == 0) {
        /* its own process group: a child the test stops (SIGSTOP) is never in an orphaned
         * group, which the kernel would send SIGHUP and SIGCONT */
        (void)setpgid(0, 0);
        _exit(fn(arg));
    }
    (void)setpgid(pid, pid);
    return pid;
}

int bt_wait_child(pid_t pid)
{
    int status = 0;
    if (waitpid(pid, &status, 0) != pid)
        return -1;
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return -1;
}

void bt_preload(const char *lib)
{
    static char *saved_asan;
    static bool active;
    if (lib == NULL) {
        if (!active)
            return;
        unsetenv("LD_PRELOAD");
        if (saved_asan != NULL)
            setenv("ASAN_OPTIONS", saved_asan, 1);
        else
            unsetenv("ASAN_OPTIONS");
        free(saved_asan);
        saved_asan = NULL;
        active = false;
        return;
    }
    const char *asan = getenv("ASAN_OPTIONS");
    if (!active) {
        saved_asan = asan != NULL ? strdup(asan) : NULL;
        active = true;
    }
    char opts[1024];
    snprintf(opts, sizeof opts, "%s%sverify_asan_link_order=0", saved_asan ? saved_asan : "",
             saved_asan && saved_asan[0] ? ":" : "");
    setenv("ASAN_OPTIONS", opts, 1);
    setenv("LD_PRELOAD", lib, 1);
}

bf_backfill bt_get(bf_engine *e, const char *id)
{
    bf_backfill row;
    bf_err err = bf_get(e, id, &row);
    if (err != BF_OK)
        bt_fail("bf_get(%s): %s", id, bf_err_str(err));
    return row;
}

bf_err bt_act(bf_engine *e, bf_action action, const char *id)
{
    bf_actor who = {.actor = "test-operator", .authority = "test", .request_id = NULL};
    bf_action_result res;
    return bf_action_apply(e, action, id, &who, &res);
}

bf_worker *bt_claimed_worker(bf_engine *e, const char *id)
{
    bf_worker *w = NULL;
    assert_int_equal(bf_worker_new(&w, e, NULL), BF_OK);
    bf_err err = bf_worker_claim(w, id, NULL);
    if (err != BF_OK)
        bt_fail("bf_worker_claim(%s): %s: %s", id, bf_err_str(err), bf_engine_diag(e));
    return w;
}

static void *step_thread_main(void *arg)
{
    bt_step_thread *t = arg;
    t->err = t->run ? bf_worker_run(t->w, true) : bf_worker_step(t->w, &t->info);
    atomic_store(&t->done, true);
    return NULL;
}

void bt_step_thread_start(bt_step_thread *t, bf_worker *w, bool run)
{
    memset(t, 0, sizeof *t);
    t->w = w;
    t->run = run;
    t->err = BF_ERR_INTERNAL;
    atomic_init(&t->done, false);
    assert_int_equal(pthread_create(&t->tid, NULL, step_thread_main, t), 0);
}

void bt_step_thread_join(bt_step_thread *t, int timeout_s)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += timeout_s;
    if (pthread_timedjoin_np(t->tid, NULL, &deadline) != 0)
        bt_fail("the worker's step did not return within %d s", timeout_s);
}

bf_step bt_step_until_not_batch(bf_worker *w, int max_steps)
{
    for (int i = 0; i < max_steps; i++) {
        bf_step_info info;
        bf_err err = bf_worker_step(w, &info);
        if (err != BF_OK)
            bt_fail("bf_worker_step: %s", bf_err_str(err));
        if (info.step != BF_STEP_BATCH)
            return info.step;
    }
    bt_fail("worker still running batches after %d steps", max_steps);
    return BF_STEP_IDLE;
}

/* ---- a captured engine log ------------------------------------------------------------- */

static pthread_mutex_t capture_mtx = PTHREAD_MUTEX_INITIALIZER;
static char capture_buf[1 << 20];
static size_t capture_len;

static void capture_log(void *arg, const bf_log_record *rec)
{
    (void)arg;
    if (rec->level < BF_LOG_INFO)
        return;
    pthread_mutex_lock(&capture_mtx);
    int n = snprintf(capture_buf + capture_len, sizeof capture_buf - capture_len, "%s\n", rec->msg);
    if (n > 0 && capture_len + (size_t)n < sizeof capture_buf)
        capture_len += (size_t)n;
    pthread_mutex_unlock(&capture_mtx);
    if (getenv("BT_VERBOSE") != NULL)
        fprintf(stderr, "[captured] %s\n", rec->msg);
}

void bt_log_reset(void)
{
    pthread_mutex_lock(&capture_mtx);
    capture_len = 0;
    capture_buf[0] = '\0';
    pthread_mutex_unlock(&capture_mtx);
}

int bt_log_count(const char *needle)
{
    int n = 0;
    pthread_mutex_lock(&capture_mtx);
    for (const char *p = capture_buf; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    pthread_mutex_unlock(&capture_mtx);
    return n;
}

char *bt_log_text(void)
{
    pthread_mutex_lock(&capture_mtx);
    char *copy = strdup(capture_buf);
    pthread_mutex_unlock(&capture_mtx);
    assert_non_null(copy);
    return copy;
}

bf_engine *bt_capture_engine(const bf_registry *reg, const char *owner, int lease_ms)
{
    bf_config cfg = {.conninfo = bt_db_conninfo(),
                     .owner = owner,
                     .lease_ms = lease_ms,
                     .statement_timeout_ms = 20000,
                     .lock_timeout_ms = 20000,
                     .step_batches = 1,
                     .log = capture_log};
    bf_engine *e = NULL;
    assert_int_equal(bf_engine_open(&e, &cfg, reg), BF_OK);
    assert_int_equal(bf_migrate(e), BF_OK);
    return e;
}

/* ---- conformance helpers (claims, crashes, timeouts) ------------------------------------ */

bf_engine *bt_engine_timeouts(const bf_registry *reg, const char *owner, int lease_ms,
                              int statement_timeout_ms, int lock_timeout_ms)
{
    bf_config cfg = {.conninfo = db_conninfo,
                     .owner = owner,
                     .lease_ms = lease_ms,
                     .statement_timeout_ms = statement_timeout_ms,
                     .lock_timeout_ms = lock_timeout_ms,
                     .step_batches = step_batches,
                     .throttle = throttle,
                     .log = getenv("BT_QUIET") ? NULL : bt_log};
    bf_engine *e = NULL;
    bf_err err = bf_engine_open(&e, &cfg, reg);
    if (err != BF_OK)
        bt_fail("bf_engine_open: %s", bf_err_str(err));
    err = bf_migrate(e);
    if (err != BF_OK)
        bt_fail("bf_migrate: %s: %s", bf_err_str(err), bf_engine_diag(e));
    return e;
}

bf_engine *bt_child_engine(const bf_registry *reg, const char *owner, int lease_ms)
{
    bf_config cfg = {.conninfo = db_conninfo,
                     .owner = owner,
                     .lease_ms = lease_ms,
                     .statement_timeout_ms = 60000,
                     .lock_timeout_ms = 60000,
                     .step_batches = step_batches,
                     .log = getenv("BT_QUIET") ? NULL : bt_log};
    bf_engine *e = NULL;
    if (bf_engine_open(&e, &cfg, reg) != BF_OK)
        return NULL;
    return e;
}

bf_err bt_claim_poll(bf_worker *w, const char *id, int64_t *generation_out, int timeout_ms)
{
    bf_err err = BF_ERR_NO_WORK;
    for (int waited = 0; waited <= timeout_ms; waited += 5) {
        err = bf_worker_claim(w, id, generation_out);
        if (err != BF_ERR_NO_WORK)
            return err;
        usleep(5000); /* polls PostgreSQL: its clock decides when the claim is free */
    }
    return err;
}

int bt_barrier_waiter_pid(PGconn *c, int key)
{
    return (int)bt_int(c,
                       "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                       " AND classid = 424242 AND objid = %d AND database = (SELECT oid FROM"
                       " pg_database WHERE datname = current_database()) LIMIT 1",
                       key);
}

void bt_wait_backend_gone(PGconn *c, int pid)
{
    for (int i = 0; i < 60000; i++) {
        if (bt_int(c, "SELECT count(*) FROM pg_stat_activity WHERE pid = %d", pid) == 0)
            return;
        usleep(1000);
    }
    bt_fail("backend %d still alive after 60 s", pid);
}

void bt_wait_lock_waiters(PGconn *c, int n)
{
    for (int i = 0; i < 60000; i++) {
        long long waiting = bt_int(c, "SELECT count(*) FROM pg_stat_activity"
                                      " WHERE datname = current_database()"
                                      " AND wait_event_type = 'Lock'");
        if (waiting >= n)
            return;
        usleep(1000);
    }
    bt_fail("fewer than %d backends waited for a lock within 60 s", n);
}
