/*
 * daemon.c - test support: real buzz-backfilld child processes with generated configuration,
 * keys and tokens, extra fresh databases, and thin client call helpers (see daemon.h).
 */
#include "daemon.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "bt.h"
#include "bt_files.h"

#ifndef BUZZ_BACKFILLD_PATH
#error "BUZZ_BACKFILLD_PATH is not defined: the daemon target is missing"
#endif
#ifndef BUZZ_TEST_MODULE_PATH
#error "BUZZ_TEST_MODULE_PATH is not defined: the test definitions module target is missing"
#endif

#define BD_MAX_PIDS   64
#define BD_MAX_DBS    8
#define BD_START_MS   30000
#define BD_EXIT_MS    60000
#define BD_TOKEN_RING 8

extern char **environ;

static struct {
    char dir[96];
    char trusted[160];
    char revoked[160];
    bft_secret *key;
    int seq;
    pid_t pids[BD_MAX_PIDS];
    int n_pids;
    char db_names[BD_MAX_DBS][64];
    char db_conninfo[BD_MAX_DBS][1024];
    int n_dbs;
    char tokens[BD_TOKEN_RING][BFT_TOKEN_MAX + 1];
    int next_token;
} bd;

void bd_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int64_t bd_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- directory and keys ------------------------------------------------------------------ */

/* At exit (also when a group setup failed and no teardown runs): no daemon outlives the test. */
static void bd_kill_all(void)
{
    for (int i = 0; i < bd.n_pids; i++) {
        int st;
        if (bd.pids[i] > 0 && waitpid(bd.pids[i], &st, WNOHANG) == 0) {
            kill(bd.pids[i], SIGCONT);
            kill(bd.pids[i], SIGKILL);
            waitpid(bd.pids[i], &st, 0);
        }
    }
    bd.n_pids = 0;
}

void bd_setup(const char *name)
{
    static bool registered;
    if (!registered && atexit(bd_kill_all) == 0)
        registered = true;
    memset(&bd, 0, sizeof bd);
    /* scripts/test.sh gives each ctest run a directory of its own and keeps the logs there
     * (BUZZ_KEEP_LOGS), to show a failed suite's daemon logs */
    const char *base = getenv("BUZZ_TEST_TMP");
    snprintf(bd.dir, sizeof bd.dir, "%s/buzz-%s-XXXXXX", base != NULL && *base ? base : "/tmp",
             name);
    assert_non_null(mkdtemp(bd.dir));
    snprintf(bd.trusted, sizeof bd.trusted, "%s/trusted.pub", bd.dir);
    snprintf(bd.revoked, sizeof bd.revoked, "%s/revoked", bd.dir);
    assert_int_equal(bft_keygen(&bd.key, BD_KID), BF_OK);
    char diag[256] = "";
    if (bft_public_save(bd.key, bd.trusted, diag, sizeof diag) != BF_OK)
        fail_msg("cannot write the trusted keys file: %s", diag);
    FILE *f = fopen(bd.revoked, "w");
    assert_non_null(f);
    fputs("# revoked token IDs\n", f);
    fclose(f);
    /* whatever the umask: the daemon refuses revocations that group or others may write */
    assert_int_equal(chmod(bd.revoked, 0644), 0);
}

PGconn *bd_suite_open(const char *name)
{
    bd_setup(name);
    bt_db_create(name);
    return bt_connect();
}

void bd_suite_close(bd_daemon *d, PGconn *pg, bool keep)
{
    if (d != NULL && d->pid > 0)
        bd_stop(d);
    PQfinish(pg);
    bt_db_drop();
    bd_teardown(keep);
}

const char *bd_dir(void)
{
    return bd.dir;
}

const char *bd_defs_dir(void)
{
    static char path[sizeof bd.dir + 8];
    snprintf(path, sizeof path, "%s/defs", bd.dir);
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        fail_msg("cannot create %s: %s", path, strerror(errno));
    return path;
}

void bd_def_file(const char *name, const char *text)
{
    char path[sizeof bd.dir + 300];
    snprintf(path, sizeof path, "%s/%s", bd_defs_dir(), name);
    FILE *f = fopen(path, "w");
    if (f == NULL || fputs(text, f) < 0 || fclose(f) != 0 || chmod(path, 0644) != 0)
        fail_msg("cannot write %s", path); /* 0644 whatever the umask: the daemon checks */
}

void bd_defs_clear(void)
{
    char cmd[sizeof bd.dir + 64];
    snprintf(cmd, sizeof cmd, "rm -f '%s'/*.def", bd_defs_dir());
    if (system(cmd) != 0)
        fail_msg("cannot empty %s", bd_defs_dir());
}

const char *bd_defs_extra(void)
{
    static char extra[sizeof bd.dir + 64];
    snprintf(extra, sizeof extra, "definitions_dir = '%s'", bd_defs_dir());
    return extra;
}

void bd_teardown(bool keep)
{
    bd_kill_all();
    const char *url = getenv("BUZZ_TEST_PG_URL");
    if (url != NULL && bd.n_dbs > 0) {
        PGconn *admin = PQconnectdb(url);
        for (int i = 0; i < bd.n_dbs; i++) {
            char sql[160];
            snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", bd.db_names[i]);
            PQclear(PQexec(admin, sql));
        }
        PQfinish(admin);
    }
    bd.n_dbs = 0;
    bft_secret_free(bd.key);
    bd.key = NULL;
    if (bd.dir[0] == '\0')
        return;
    if (keep || getenv("BUZZ_KEEP_LOGS") != NULL) {
        fprintf(stderr, "daemon logs kept in %s\n", bd.dir);
        return;
    }
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", bd.dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", bd.dir);
}

/* ---- databases --------------------------------------------------------------------------- */

void bd_db_drop_last(void)
{
    assert_true(bd.n_dbs > 0);
    bd.n_dbs--;
    PGconn *admin = PQconnectdb(getenv("BUZZ_TEST_PG_URL"));
    char sql[160];
    snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", bd.db_names[bd.n_dbs]);
    PQclear(PQexec(admin, sql));
    PQfinish(admin);
}

const char *bd_db_new(const char *name)
{
    assert_true(bd.n_dbs < BD_MAX_DBS);
    const char *url = getenv("BUZZ_TEST_PG_URL");
    if (url == NULL || url[0] == '\0')
        fail_msg("BUZZ_TEST_PG_URL is not set (scripts/test.sh sets it)");
    char *dbname = bd.db_names[bd.n_dbs];
    snprintf(dbname, sizeof bd.db_names[0], "bd_%s_%ld", name, (long)getpid());
    PGconn *admin = PQconnectdb(url);
    if (PQstatus(admin) != CONNECTION_OK)
        fail_msg("cannot connect to BUZZ_TEST_PG_URL: %s", PQerrorMessage(admin));
    PQclear(PQexec(admin, "SET client_min_messages = warning"));
    char sql[160];
    snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", dbname);
    PQclear(PQexec(admin, sql));
    snprintf(sql, sizeof sql, "CREATE DATABASE %s TEMPLATE template0", dbname);
    PGresult *r = PQexec(admin, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        fail_msg("cannot create database %s: %s", dbname, PQerrorMessage(admin));
    PQclear(r);
    PQfinish(admin);
    /* libpq: a later dbname keyword overrides the URL's database */
    char *out = bd.db_conninfo[bd.n_dbs];
    size_t cap = sizeof bd.db_conninfo[0], off = 0;
    PQconninfoOption *opts = PQconninfoParse(url, NULL);
    for (PQconninfoOption *o = opts; o != NULL && o->keyword != NULL; o++) {
        if (o->val == NULL || strcmp(o->keyword, "dbname") == 0)
            continue;
        off += (size_t)snprintf(out + off, cap - off, "%s='%s' ", o->keyword, o->val);
    }
    PQconninfoFree(opts);
    snprintf(out + off, cap - off, "dbname='%s'", dbname);
    bd.n_dbs++;
    return out;
}

PGconn *bd_connect(const char *conninfo)
{
    PGconn *c = PQconnectdb(conninfo ? conninfo : bt_db_conninfo());
    if (PQstatus(c) != CONNECTION_OK)
        fail_msg("cannot connect to the test database: %s", PQerrorMessage(c));
    PQclear(PQexec(c, "SET client_min_messages = warning"));
    return c;
}

void bd_wait_registered(PGconn *c, int n)
{
    int64_t until = bd_now_ms() + 60000;
    long long have = -1;
    while (bd_now_ms() < until) {
        PGresult *r = PQexec(c, "SELECT to_regclass('buzz_backfill.backfill') IS NOT NULL");
        bool schema = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 &&
                      PQgetvalue(r, 0, 0)[0] == 't';
        PQclear(r);
        if (schema && (have = bt_int(c, "SELECT count(*) FROM buzz_backfill.backfill")) == n)
            return;
        bd_sleep_ms(10);
    }
    fail_msg("the daemon did not register %d definitions within 60 s (rows: %lld)", n, have);
}

/* Exec argv, under valgrind's memcheck when BUZZ_TEST_VALGRIND is set (scripts/test.sh's
 * valgrind stage): any memcheck error (a read of uninitialized memory, an invalid access) makes
 * the process exit with BD_VALGRIND_EXIT, which bd_stop's clean-exit assertion reports; the
 * errors are in the daemon's log. Leaks are ASan's job. Returns only when exec failed. */
#define BD_VALGRIND_EXIT 97
static void bd_exec(char *const argv[], char *const envp[])
{
    const char *vg = getenv("BUZZ_TEST_VALGRIND");
    if (vg == NULL || vg[0] == '\0' || strcmp(vg, "0") == 0) {
        execve(argv[0], argv, envp);
        return;
    }
    static char exit_code[32];
    snprintf(exit_code, sizeof exit_code, "--error-exitcode=%d", BD_VALGRIND_EXIT);
    char *vargv[64];
    int n = 0;
    vargv[n++] = "valgrind";
    vargv[n++] = "--tool=memcheck";
    vargv[n++] = "--quiet";
    vargv[n++] = exit_code;
    vargv[n++] = "--leak-check=no";
    vargv[n++] = "--track-origins=yes";
    vargv[n++] = "--num-callers=30";
    vargv[n++] = "--suppressions=" BUZZ_SOURCE_DIR "/tests/support/valgrind.supp";
    for (int i = 0; argv[i] != NULL && n < 63; i++)
        vargv[n++] = argv[i];
    vargv[n] = NULL;
    execvpe(vargv[0], vargv, envp);
}

/* Run argv with the daemon's environment, stdout/stderr appended to log; returns its pid. */
static pid_t bd_spawn(char *const argv[], const char *log, const char *definitions,
                      const char *revision)
{
    char *envp[512];
    int n = 0;
    for (char **e = environ; *e != NULL && n < 500; e++) {
        if (strncmp(*e, "BUZZ_BACKFILL_", 14) == 0 ||
            strncmp(*e, "BUZZ_TEST_DEFINITIONS=", 22) == 0 ||
            strncmp(*e, "BUZZ_TEST_REVISION=", 19) == 0)
            continue;
        envp[n++] = *e;
    }
    char defs[256], rev[128];
    if (definitions != NULL) {
        snprintf(defs, sizeof defs, "BUZZ_TEST_DEFINITIONS=%s", definitions);
        envp[n++] = defs;
    }
    if (revision != NULL) {
        snprintf(rev, sizeof rev, "BUZZ_TEST_REVISION=%s", revision);
        envp[n++] = rev;
    }
    envp[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* a test that dies (a timeout, a crash) takes its daemons with it */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        /* a process group of its own, whose parent (the test) is in another group of the same
         * session: never orphaned while the test lives, so the kernel never sends a stopped
         * daemon SIGHUP and SIGCONT when some other process of the test's group exits */
        (void)setpgid(0, 0);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd < 0)
            _exit(126);
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
        bd_exec(argv, envp);
        _exit(127);
    }
    (void)setpgid(pid, pid); /* both sides, so no signal finds it in the old group */
    if (bd.n_pids < BD_MAX_PIDS)
        bd.pids[bd.n_pids++] = pid;
    return pid;
}

static int bd_status(int st)
{
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void bd_migrate(const char *conninfo)
{
    char log[200];
    snprintf(log, sizeof log, "%s/migrate.log", bd.dir);
    char *argv[] = {BUZZ_BACKFILLD_PATH, "--database-url",
                    (char *)(conninfo ? conninfo : bt_db_conninfo()), "migrate", NULL};
    pid_t pid = bd_spawn(argv, log, NULL, NULL);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (bd_status(st) != 0)
        fail_msg("buzz-backfilld migrate exited with %d; see %s", bd_status(st), log);
}

/* ---- daemons ----------------------------------------------------------------------------- */

bd_options bd_defaults(void)
{
    bd_options o = {
        .ipc_boundary = true,
        .tcp = true,
        .workers = 2,
        .threads = 4,
        .lease_ms = 30000,
        .log_level = "debug",
    };
    return o;
}

int bd_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* A configuration value in single quotes ('' for a quote inside). */
static void bd_conf_quoted(FILE *f, const char *key, const char *value)
{
    fprintf(f, "%s = '", key);
    for (const char *p = value; *p != '\0'; p++) {
        if (*p == '\'')
            fputc('\'', f);
        fputc(*p, f);
    }
    fputs("'\n", f);
}

/* ---- the files variant (bt_files.h) ------------------------------------------------------ */

static void bd_copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY | O_CLOEXEC);
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0700);
    if (in < 0 || out < 0)
        fail_msg("cannot copy %s to %s: %s", from, to, strerror(errno));
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
        if (n > 0 && write(out, buf, (size_t)n) != n)
            fail_msg("cannot write %s: %s", to, strerror(errno));
    close(in);
    if (n < 0 || close(out) != 0)
        fail_msg("cannot copy %s to %s: %s", from, to, strerror(errno));
}

static void bd_setenv(const char *name, const char *value)
{
    if (value != NULL)
        assert_int_equal(setenv(name, value, 1), 0);
    else
        assert_int_equal(unsetenv(name), 0);
}

/* The C definitions the module gives a daemon started with o: loaded here from a copy of the
 * module of its own (its constructor reads the sets and the revision from the environment when
 * it is loaded, once per file). */
static bf_registry *bd_module_definitions(const bd_daemon *d, const bd_options *o)
{
    char copy[200];
    snprintf(copy, sizeof copy, "%s/d%d.module.so", bd.dir, d->seq);
    bd_copy_file(BUZZ_TEST_MODULE_PATH, copy);
    char *defs = getenv("BUZZ_TEST_DEFINITIONS") ? strdup(getenv("BUZZ_TEST_DEFINITIONS")) : NULL;
    char *rev = getenv("BUZZ_TEST_REVISION") ? strdup(getenv("BUZZ_TEST_REVISION")) : NULL;
    bd_setenv("BUZZ_TEST_DEFINITIONS", o->definitions);
    bd_setenv("BUZZ_TEST_REVISION", o->revision);
    bf_registry *reg = NULL;
    char diag[BF_DIAG_MAX] = "";
    bf_err err = bf_registry_new(&reg);
    if (err == BF_OK)
        err = bf_registry_load_module(reg, copy, diag, sizeof diag);
    bd_setenv("BUZZ_TEST_DEFINITIONS", defs);
    bd_setenv("BUZZ_TEST_REVISION", rev);
    free(defs);
    free(rev);
    (void)unlink(copy); /* loaded: the mapping stays until the registry is freed */
    if (err != BF_OK)
        fail_msg("cannot load the test definitions module: %s", diag);
    return reg;
}

/* The files variant: every definition the module gives a daemon started with o, as its
 * definition file in a private directory (dir) once checked to be the same definition. */
static void bd_files_dir(const bd_daemon *d, const bd_options *o, char *dir, size_t dir_len)
{
    snprintf(dir, dir_len, "%s/d%d.defs", bd.dir, d->seq);
    if (mkdir(dir, 0700) != 0 || chmod(dir, 0700) != 0)
        fail_msg("cannot make %s: %s", dir, strerror(errno));
    bf_registry *reg = bd_module_definitions(d, o);
    for (size_t i = 0; i < bf_registry_count(reg); i++) {
        char why[BF_DIAG_MAX] = "";
        if (bt_files_write(bf_registry_at(reg, i), o->revision, dir, why, sizeof why) != BF_OK) {
            bf_registry_free(reg);
            fail_msg("definition files: %s", why);
        }
    }
    bf_registry_free(reg);
}

/* defs_dir: the daemon's definitions_dir (the files variant) instead of the module, or NULL */
static void bd_write_config(const bd_daemon *d, const bd_options *o, const char *defs_dir)
{
    FILE *f = fopen(d->config, "w");
    assert_non_null(f);
    fprintf(f, "# written by tests/support/daemon.c\n");
    bd_conf_quoted(f, "database_url", o->conninfo ? o->conninfo : bt_db_conninfo());
    char listen[320];
    if (o->tcp)
        snprintf(listen, sizeof listen, "%s, %s", d->ipc_url, d->tcp_url);
    else
        snprintf(listen, sizeof listen, "%s", d->ipc_url);
    if (d->tls_url[0] != '\0') {
        size_t n = strlen(listen);
        snprintf(listen + n, sizeof listen - n, ", %s", d->tls_url);
        bd_conf_quoted(f, "tls_cert_key_file", o->tls_cert_key_file);
    }
    bd_conf_quoted(f, "listen", listen);
    if (defs_dir != NULL)
        bd_conf_quoted(f, "definitions_dir", defs_dir);
    else if (o->definitions != NULL)
        bd_conf_quoted(f, "modules", BUZZ_TEST_MODULE_PATH);
    fprintf(f, "auto_migrate = %s\n", o->auto_migrate ? "on" : "off");
    fprintf(f, "auto_backfill = %s\n", o->auto_backfill ? "on" : "off");
    fprintf(f, "ipc_boundary = %s\n", o->ipc_boundary ? "on" : "off");
    fprintf(f, "token_audience = %s\n", BD_AUDIENCE);
    bd_conf_quoted(f, "trusted_keys_file", bd.trusted);
    bd_conf_quoted(f, "revoked_tokens_file", bd.revoked);
    fprintf(f, "workers = %d\n", o->workers);
    fprintf(f, "threads = %d\n", o->threads > 0 ? o->threads : 4);
    fprintf(f, "lease_ms = %d\n", o->lease_ms > 0 ? o->lease_ms : 30000);
    /* batches and validations wait at the tests' barriers instead of timing out */
    /* by default as long as the lease allows (it must outlast step_ms + statement_timeout_ms and
     * lock_timeout_ms), so that barriers wait instead of timing out */
    int lease = o->lease_ms > 0 ? o->lease_ms : 30000;
    int longest = lease - 200 - 1 > 1 ? lease - 200 - 1 : 1;
    fprintf(f, "statement_timeout_ms = %d\nlock_timeout_ms = %d\n",
            o->statement_timeout_ms > 0 ? o->statement_timeout_ms : longest,
            o->lock_timeout_ms > 0 ? o->lock_timeout_ms : longest);
    if (o->step_batches > 0)
        fprintf(f, "step_batches = %d\n", o->step_batches);
    if (o->request_retention_s > 0)
        fprintf(f, "request_retention_s = %d\n", o->request_retention_s);
    fprintf(f, "log_level = %s\n", o->log_level ? o->log_level : "debug");
    /* fixed batch sizes: the suites count and order batches (extra may turn sizing on) */
    fprintf(f, "batch_target_ms = 0\n");
    if (o->extra != NULL)
        fprintf(f, "%s\n", o->extra);
    fclose(f);
    /* whatever the umask: the daemon refuses a configuration file group or others may write */
    assert_int_equal(chmod(d->config, 0644), 0);
}

/* true once url answers a request (any typed status counts: the listener serves). */
static bool bd_answers(const char *url)
{
    bfc_client *c = NULL;
    bfc_options opts = {.timeout_ms = 1000, .retries = -1};
    if (bfc_open(&c, url, &opts, NULL, 0) != BF_OK)
        return false;
    Buzz__Backfill__V1__WhoAmIRequest req = BUZZ__BACKFILL__V1__WHO_AM_IREQUEST__INIT;
    ProtobufCMessage *out = NULL;
    (void)bfc_call(c, &buzz__backfill__v1__admin__descriptor, "WhoAmI", &req.base, &out, NULL);
    bool answered = bfc_last_status(c)->answered;
    bd_free(out);
    bfc_close(c);
    return answered;
}

void bd_launch(bd_daemon *d, const bd_options *o)
{
    memset(d, 0, sizeof *d);
    d->seq = ++bd.seq;
    snprintf(d->ipc_url, sizeof d->ipc_url, "ipc://%s/d%d.sock", bd.dir, d->seq);
    if (o->tcp)
        snprintf(d->tcp_url, sizeof d->tcp_url, "tcp://127.0.0.1:%d", bd_free_port());
    if (o->tls_cert_key_file != NULL)
        snprintf(d->tls_url, sizeof d->tls_url, "tls+tcp://127.0.0.1:%d", bd_free_port());
    snprintf(d->config, sizeof d->config, "%s/d%d.conf", bd.dir, d->seq);
    snprintf(d->log, sizeof d->log, "%s/d%d.log", bd.dir, d->seq);
    char why[BF_DIAG_MAX] = "", defs_dir[200];
    bool files = false;
    if (bt_files_mode(&files, why, sizeof why) != BF_OK)
        fail_msg("%s", why);
    if (files && o->definitions != NULL)
        bd_files_dir(d, o, defs_dir, sizeof defs_dir);
    bd_write_config(d, o, files && o->definitions != NULL ? defs_dir : NULL);
    char *argv[] = {BUZZ_BACKFILLD_PATH, "--config", d->config, "run", NULL};
    d->pid = bd_spawn(argv, d->log, o->definitions, o->revision);
}

void bd_wait_up(bd_daemon *d)
{
    int64_t until = bd_now_ms() + BD_START_MS;
    bool ipc_ok = false, tcp_ok = d->tcp_url[0] == '\0';
    while (bd_now_ms() < until) {
        int st;
        if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
            d->pid = 0;
            fail_msg("buzz-backfilld exited early (status %d); see %s", bd_status(st), d->log);
        }
        ipc_ok = ipc_ok || bd_answers(d->ipc_url);
        tcp_ok = tcp_ok || bd_answers(d->tcp_url);
        if (ipc_ok && tcp_ok)
            return;
        bd_sleep_ms(10);
    }
    fail_msg("buzz-backfilld did not answer within %d s; see %s", BD_START_MS / 1000, d->log);
}

void bd_start(bd_daemon *d, const bd_options *o)
{
    bd_launch(d, o);
    bd_wait_up(d);
}

int bd_signal_wait(bd_daemon *d, int sig)
{
    assert_true(d->pid > 0);
    if (sig != 0)
        assert_int_equal(kill(d->pid, sig), 0);
    int64_t until = bd_now_ms() + BD_EXIT_MS;
    while (bd_now_ms() < until) {
        int st;
        if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
            d->pid = 0;
            return bd_status(st);
        }
        bd_sleep_ms(5);
    }
    kill(d->pid, SIGKILL);
    fail_msg("buzz-backfilld did not exit within %d s; see %s", BD_EXIT_MS / 1000, d->log);
    return -1;
}

void bd_stop(bd_daemon *d)
{
    int st = bd_signal_wait(d, SIGTERM);
    if (st != 0)
        fail_msg("buzz-backfilld exited with %d after SIGTERM; see %s", st, d->log);
}

void bd_kill(bd_daemon *d)
{
    kill(d->pid, SIGCONT); /* a stopped process dies too */
    assert_int_equal(bd_signal_wait(d, SIGKILL), 128 + SIGKILL);
}

bool bd_log_contains(const bd_daemon *d, const char *text)
{
    FILE *f = fopen(d->log, "r");
    if (f == NULL)
        return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, f) != NULL)
        found = strstr(line, text) != NULL;
    fclose(f);
    return found;
}

void bd_wait_log(const bd_daemon *d, const char *text)
{
    int64_t until = bd_now_ms() + 60000;
    while (bd_now_ms() < until) {
        if (bd_log_contains(d, text))
            return;
        bd_sleep_ms(10);
    }
    fail_msg("\"%s\" never appeared in %s", text, d->log);
}

/* Lines of the log containing text. */
static int bd_log_count(const bd_daemon *d, const char *text)
{
    FILE *f = fopen(d->log, "r");
    if (f == NULL)
        return 0;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f) != NULL)
        n += strstr(line, text) != NULL;
    fclose(f);
    return n;
}

void bd_reload(bd_daemon *d)
{
    const char *done = "SIGHUP: trusted keys and revoked tokens reloaded";
    int before = bd_log_count(d, done);
    assert_int_equal(kill(d->pid, SIGHUP), 0);
    int64_t until = bd_now_ms() + 60000;
    while (bd_now_ms() < until) {
        if (bd_log_count(d, done) > before)
            return;
        bd_sleep_ms(5);
    }
    fail_msg("the daemon did not reload its keys; see %s", d->log);
}

void bd_reconfigure(bd_daemon *d, const char *lines, const char *logged)
{
    FILE *f = fopen(d->config, "a");
    assert_non_null(f);
    fprintf(f, "%s\n", lines);
    fclose(f);
    assert_int_equal(kill(d->pid, SIGHUP), 0);
    bd_wait_log(d, logged);
}

/* ---- tokens ------------------------------------------------------------------------------ */

void bd_mint(char *out, size_t out_len, const bd_token_spec *spec, char *id_hex)
{
    bft_claims cl;
    memset(&cl, 0, sizeof cl);
    bft_token_id_new(cl.token_id);
    snprintf(cl.actor, sizeof cl.actor, "%s", spec->actor ? spec->actor : "operator@test");
    snprintf(cl.audience, sizeof cl.audience, "%s", spec->audience ? spec->audience : BD_AUDIENCE);
    cl.caps = spec->caps;
    cl.roles = spec->roles;
    cl.not_before = spec->not_before;
    cl.expires_at = spec->expires_at ? spec->expires_at : (int64_t)time(NULL) + 3600;
    assert_int_equal(bft_mint(out, out_len, &cl, spec->key ? spec->key : bd.key), BF_OK);
    if (id_hex != NULL)
        bft_token_id_hex(id_hex, cl.token_id);
}

const char *bd_token(uint32_t caps)
{
    char *out = bd.tokens[bd.next_token];
    bd.next_token = (bd.next_token + 1) % BD_TOKEN_RING;
    bd_token_spec spec = {.caps = caps};
    bd_mint(out, sizeof bd.tokens[0], &spec, NULL);
    return out;
}

void bd_revoke(const char *id_hex)
{
    FILE *f = fopen(bd.revoked, "a");
    assert_non_null(f);
    fprintf(f, "%s\n", id_hex);
    fclose(f);
}

/* ---- clients and calls ------------------------------------------------------------------- */

bfc_client *bd_client(const char *url, const char *token, int timeout_ms, int retries)
{
    bfc_client *c = NULL;
    char diag[160] = "";
    bfc_options opts = {
        .token = token, .timeout_ms = timeout_ms ? timeout_ms : 30000, .retries = retries};
    if (bfc_open(&c, url, &opts, diag, sizeof diag) != BF_OK)
        fail_msg("cannot connect to %s: %s", url, diag);
    return c;
}

void bd_free(void *m)
{
    if (m != NULL)
        protobuf_c_message_free_unpacked((ProtobufCMessage *)m, NULL);
}

int bd_call(bfc_client *c, const ProtobufCServiceDescriptor *svc, const char *method,
            const ProtobufCMessage *in, ProtobufCMessage **out)
{
    ProtobufCMessage *body = NULL;
    (void)bfc_call(c, svc, method, in, &body, NULL);
    const bfc_status *st = bfc_last_status(c);
    if (out != NULL)
        *out = body;
    else
        bd_free(body);
    return st->answered ? st->code : -1;
}

int bd_control(bfc_client *c, const char *method, const char *id, bd_control_resp **out)
{
    Buzz__Backfill__V1__ControlRequest req = BUZZ__BACKFILL__V1__CONTROL_REQUEST__INIT;
    req.id = (char *)id;
    return bd_call(c, &buzz__backfill__v1__admin__descriptor, method, &req.base,
                   (ProtobufCMessage **)out);
}

void bd_control_ok(bfc_client *c, const char *method, const char *id)
{
    bd_control_resp *resp = NULL;
    int st = bd_control(c, method, id, &resp);
    if (st != BD_SC(OK))
        fail_msg("%s %s: status %d: %s", method, id, st,
                 resp && resp->detail ? resp->detail : "(no detail)");
    bd_free(resp);
}

int bd_validate(bfc_client *c, const char *id, bd_validate_resp **out)
{
    Buzz__Backfill__V1__ValidateRequest req = BUZZ__BACKFILL__V1__VALIDATE_REQUEST__INIT;
    req.id = (char *)id;
    return bd_call(c, &buzz__backfill__v1__admin__descriptor, "Validate", &req.base,
                   (ProtobufCMessage **)out);
}

bd_get_resp *bd_get(bfc_client *c, const char *id)
{
    Buzz__Backfill__V1__GetRequest req = BUZZ__BACKFILL__V1__GET_REQUEST__INIT;
    req.id = (char *)id;
    ProtobufCMessage *out = NULL;
    int code = bd_call(c, &buzz__backfill__v1__admin__descriptor, "Get", &req.base, &out);
    if (code != BD_SC(OK) || out == NULL)
        fail_msg("Admin.Get %s: code %d (%s)", id, code, bfc_last_status(c)->message);
    return (bd_get_resp *)out;
}

bd_check_resp *bd_check(bfc_client *c, uint32_t wait_ms)
{
    Buzz__Backfill__V1__CheckRequest req = BUZZ__BACKFILL__V1__CHECK_REQUEST__INIT;
    if (wait_ms > 0) {
        req.has_wait_ms = true;
        req.wait_ms = wait_ms;
    }
    ProtobufCMessage *out = NULL;
    int code = bd_call(c, &buzz__backfill__v1__readiness__descriptor, "Check", &req.base, &out);
    if (code != BD_SC(OK) || out == NULL)
        fail_msg("Readiness.Check: code %d (%s %s)", code, bfc_last_status(c)->message,
                 bfc_last_status(c)->transport_detail);
    bd_check_resp *r = (bd_check_resp *)out;
    assert_true(r->has_ready);
    return r;
}

const Buzz__Backfill__V1__Component *bd_component(const bd_check_resp *r, const char *name)
{
    for (size_t i = 0; i < r->n_components; i++)
        if (r->components[i]->name != NULL && strcmp(r->components[i]->name, name) == 0)
            return r->components[i];
    fail_msg("Readiness.Check has no component %s", name);
    return NULL;
}

bd_get_resp *bd_wait_state(bfc_client *c, const char *id, Buzz__Backfill__V1__State state)
{
    int64_t until = bd_now_ms() + 60000;
    for (;;) {
        bd_get_resp *g = bd_get(c, id);
        if (g->backfill != NULL && g->backfill->has_state && g->backfill->state == state)
            return g;
        int now = g->backfill && g->backfill->has_state ? (int)g->backfill->state : -1;
        bd_free(g);
        if (bd_now_ms() > until)
            fail_msg("%s never reached state %d (last %d)", id, (int)state, now);
        bd_sleep_ms(10);
    }
}

const char *bd_request_id(const bfc_client *c)
{
    return bfc_last_status(c)->request_id;
}

void bd_pin(bfc_client *c, const char *hex)
{
    uint8_t id[BFC_REQUEST_ID_LEN];
    assert_int_equal(strlen(hex), 2 * BFC_REQUEST_ID_LEN);
    for (int i = 0; i < BFC_REQUEST_ID_LEN; i++) {
        unsigned v = 0;
        assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
        id[i] = (uint8_t)v;
    }
    bfc_set_next_request_id(c, id);
}
