/*
 * engine.c - one engine session: a PostgreSQL connection with the engine's session settings,
 * the statement helpers every other file uses, and bounded, redacted diagnostics.
 *
 * Design notes: the session pins TimeZone, DateStyle and bytea_output so that key values render
 * to the same canonical text in every process (bounds and checkpoints are stored as text[] of
 * those renderings and compared after casting back to the key's types). Server messages are
 * logged, never returned: the client-visible diagnostic names only the SQLSTATE and our label.
 *
 * A session that runs batches first allocates and frees one 8 MiB value in its backend
 * (bf__session_warm, before its first batch). glibc then raises that process's heap trim
 * threshold (it adapts to the largest freed mmap chunk), so the executor memory each batch
 * statement frees is kept for the next one instead of being returned to the kernel and faulted
 * in again: profiling a worker's backend showed that page-fault and brk time was the largest
 * cost the engine paid over a server-side loop (docs/benchmarks.md). Only those sessions: the
 * 8 MiB are 2,048 pages faulted in, 60 to 120 ms of the backend's CPU on this VM, which every
 * other session (startup, requests, metrics) would pay on its first statement for nothing.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "internal.h"

/* Session settings every engine connection runs with. The timeouts bound every lock the
 * session can hold or wait for (engine_session_configure): statement_timeout and lock_timeout
 * for every statement (claims, renewals, registration, admin actions, reads; the batch loop
 * raises statement_timeout for its CALL only), and idle_in_transaction_session_timeout so that
 * a client stopped inside a transaction (SIGSTOP, a hung host) loses its session, and with it
 * its row locks, well before its lease runs out. */
static const char session_setup[] =
    "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, MDY'; SET bytea_output = 'hex';"
    "SET IntervalStyle = 'postgres'; SET extra_float_digits = 3;"
    "SET client_min_messages = 'warning';"
    /* the batch loop's transactions start with the session's default: READ COMMITTED, as the
     * fence is designed (a pause meeting a batch in flight fails the fence's re-check of the
     * row's newest version, where REPEATABLE READ would raise a serialization failure) */
    "SET default_transaction_isolation = 'read committed'";

bf_err bf__session_warm(bf_engine *e)
{
    if (e->warmed)
        return BF_OK;
    bf_err err = bf__exec0(e, "warm the session", "SELECT length(repeat('x', 8388608))", 0, NULL);
    if (err == BF_OK)
        e->warmed = true;
    return err;
}

int bf__idle_tx_timeout_ms(const bf_engine *e)
{
    return e->lease_ms / 2;
}

/* TCP liveness of the session, both ends (design notes): a peer that vanishes without a word (a
 * network partition, a host that lost power) leaves a blocked read or write waiting for the
 * kernel's retransmission timeout, about 15 minutes. The engine turns on keepalives and sets
 * tcp_user_timeout on its side (libpq options, given before the conninfo, so the conninfo's own
 * keepalives_* and tcp_user_timeout win) and the same values on the server's side of the
 * session (SET tcp_keepalives_*, tcp_user_timeout), so a worker waiting on a dead link errs and
 * reconnects within about half a lease, before another process may take its claim over, and a
 * backend blocked sending to a vanished engine ends as soon. Neither end can notice a peer that
 * is alive but stopped (SIGSTOP, a frozen VM): its kernel still acknowledges (docs/reliability.md,
 * "A frozen backend"). Unix-domain connections ignore all of this. */
typedef struct engine_tcp {
    char user_timeout_ms[16]; /* tcp_user_timeout: unacknowledged data, or probes, for this long */
    char idle_s[16];          /* keepalives_idle: the first probe after this much silence */
    char interval_s[16];      /* keepalives_interval */
    char count[16];           /* keepalives_count */
} engine_tcp;

/* The defaults: half the lease (at least 2 s) until a dead link errs; silence of a quarter of it
 * starts probing. */
static void engine_tcp_defaults(const bf_engine *e, engine_tcp *t)
{
    int budget_ms = e->lease_ms / 2 < 2000 ? 2000 : e->lease_ms / 2;
    int idle_s = budget_ms / 2000 < 1 ? 1 : budget_ms / 2000;
    int interval_s = budget_ms / 4000 < 1 ? 1 : budget_ms / 4000;
    bf__format(t->user_timeout_ms, sizeof t->user_timeout_ms, "%d", budget_ms);
    bf__format(t->idle_s, sizeof t->idle_s, "%d", idle_s);
    bf__format(t->interval_s, sizeof t->interval_s, "%d", interval_s);
    bf__copy(t->count, sizeof t->count, "3");
}

/* The values the connection runs with (the conninfo's where it set them): the server's side of
 * the session gets the same. Only plain numbers are taken over. */
static void engine_tcp_effective(PGconn *conn, engine_tcp *t)
{
    PQconninfoOption *opts = PQconninfo(conn);
    for (const PQconninfoOption *o = opts; o != NULL && o->keyword != NULL; o++) {
        char *dst = NULL;
        if (strcmp(o->keyword, "tcp_user_timeout") == 0)
            dst = t->user_timeout_ms;
        else if (strcmp(o->keyword, "keepalives_idle") == 0)
            dst = t->idle_s;
        else if (strcmp(o->keyword, "keepalives_interval") == 0)
            dst = t->interval_s;
        else if (strcmp(o->keyword, "keepalives_count") == 0)
            dst = t->count;
        if (dst == NULL || o->val == NULL || o->val[0] == '\0' || strlen(o->val) >= 16 ||
            strspn(o->val, "0123456789") != strlen(o->val))
            continue;
        bf__copy(dst, 16, o->val);
    }
    PQconninfoFree(opts);
}

/* The rest of the session's settings, in the same round trip as session_setup (a session
 * costs its backend a handful of round trips before its first statement; on a busy server each
 * waits for a CPU, and a restarted daemon's first claim waits for its sessions, issue 26): the
 * timeouts (design notes above), the server's side of the TCP liveness (the backend's
 * keepalives and user timeout, each user-settable) and application_name "buzz-backfill <owner>"
 * (PostgreSQL keeps 63 bytes of it: operators see in pg_stat_activity which process and worker
 * a session belongs to; quoted by libpq, the owner is the host name). */
static bf_err engine_session_configure(bf_engine *e, const engine_tcp *t)
{
    char name[BF_OWNER_MAX + 16];
    bf__format(name, sizeof name, "buzz-backfill %s", e->owner);
    char *quoted = PQescapeLiteral(e->conn, name, strlen(name));
    if (quoted == NULL) {
        bf__log(e, BF_LOG_ERROR, "could not name the session: %s", PQerrorMessage(e->conn));
        return bf__diag(e, BF_ERR_UNAVAILABLE, "could not configure database session");
    }
    char sql[sizeof session_setup + 512 + sizeof name * 2];
    int n = snprintf(sql, sizeof sql,
                     "%s; SET statement_timeout = %d; SET lock_timeout = %d;"
                     " SET idle_in_transaction_session_timeout = %d;"
                     " SET tcp_keepalives_idle = %s; SET tcp_keepalives_interval = %s;"
                     " SET tcp_keepalives_count = %s; SET tcp_user_timeout = %s;"
                     " SET application_name = %s",
                     session_setup, e->statement_timeout_ms, e->lock_timeout_ms,
                     bf__idle_tx_timeout_ms(e), t->idle_s, t->interval_s, t->count,
                     t->user_timeout_ms, quoted);
    PQfreemem(quoted);
    if (n < 0 || (size_t)n >= sizeof sql)
        return bf__diag(e, BF_ERR_INTERNAL, "session settings do not fit their statement");
    PGresult *r = PQexec(e->conn, sql);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok) {
        bf__log(e, BF_LOG_ERROR, "session setup failed: %s", PQerrorMessage(e->conn));
        return bf__diag(e, BF_ERR_UNAVAILABLE, "could not configure database session");
    }
    return BF_OK;
}

const char *bf_event_code(bf_event event)
{
    static const char *const codes[] = {
#define BF_EVENT_CODE(name, code) code,
        BF_EVENT_LIST(BF_EVENT_CODE)
#undef BF_EVENT_CODE
    };
    return (unsigned)event < BF_EV_COUNT ? codes[event] : codes[BF_EV_NONE];
}

static void engine_vlog(const bf_engine *e, bf_log_record *rec, const char *fmt, va_list ap)
{
    char msg[2048];
    bf__vformat(msg, sizeof msg, fmt, ap);
    rec->msg = msg;
    e->log(e->log_arg, rec);
    rec->msg = "";
}

void bf__log(const bf_engine *e, bf_log_level level, const char *fmt, ...)
{
    if (e == NULL || e->log == NULL)
        return;
    bf_log_record rec = BF_LOG_RECORD_INIT;
    rec.level = level;
    va_list ap;
    va_start(ap, fmt);
    engine_vlog(e, &rec, fmt, ap);
    va_end(ap);
}

void bf__log_event(const bf_engine *e, bf_log_record *rec, const char *fmt, ...)
{
    if (e == NULL || e->log == NULL)
        return;
    va_list ap;
    va_start(ap, fmt);
    engine_vlog(e, rec, fmt, ap);
    va_end(ap);
}

int64_t bf__monotonic_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

const char *bf__sqlstate_class(const bf_engine *e, char *buf)
{
    if (e->sqlstate[0] == '\0' || e->sqlstate[1] == '\0')
        return NULL;
    buf[0] = e->sqlstate[0];
    buf[1] = e->sqlstate[1];
    buf[2] = '\0';
    return buf;
}

bf_err bf__diag(bf_engine *e, bf_err err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bf__vformat(e->diag, sizeof e->diag, fmt, ap);
    va_end(ap);
    return err;
}

const char *bf_engine_diag(const bf_engine *engine)
{
    return engine ? engine->diag : "";
}

const bf_registry *bf_engine_registry(const bf_engine *engine)
{
    return engine->reg;
}

static bf_err engine_connect(bf_engine *e)
{
    if (e->conn != NULL)
        PQfinish(e->conn);
    bf__blocks(e);
    engine_tcp tcp;
    engine_tcp_defaults(e, &tcp);
    /* defaults first: the expanded conninfo (dbname) overrides them */
    const char *const keys[] = {"keepalives",
                                "keepalives_idle",
                                "keepalives_interval",
                                "keepalives_count",
                                "tcp_user_timeout",
                                "dbname",
                                NULL};
    const char *const vals[] = {
        "1", tcp.idle_s, tcp.interval_s, tcp.count, tcp.user_timeout_ms, e->conninfo, NULL};
    e->conn = PQconnectdbParams(keys, vals, 1);
    if (e->conn == NULL)
        return bf__diag(e, BF_ERR_NOMEM, "out of memory");
    if (PQstatus(e->conn) != CONNECTION_OK) {
        /* libpq's message may echo the host or user: log it, keep it out of the diagnostic;
         * once per outage, later attempts at debug level */
        bf__log(e, e->connect_failures++ ? BF_LOG_DEBUG : BF_LOG_WARN,
                "could not connect to database: %s", PQerrorMessage(e->conn));
        e->outage = true;
        return bf__diag(e, BF_ERR_UNAVAILABLE, "could not connect to database");
    }
    e->goodbye = false;
    PQsetNoticeReceiver(e->conn, bf__notice, e);
    engine_tcp_effective(e->conn, &tcp);
    bf_err err = engine_session_configure(e, &tcp);
    if (err != BF_OK)
        return err;
    if (e->prepared != NULL)
        memset(e->prepared, 0, e->nprepared);
    e->stmt_prepared = 0; /* a new connection has no prepared statements */
    e->listening = false; /* a new connection listens to nothing */
    e->warmed = false;
    if (e->outage) {
        bf_log_record rec = BF_LOG_RECORD_INIT;
        rec.event = BF_EV_DB_CONNECTION_RESTORED;
        bf__log_event(e, &rec, "database connection restored");
    }
    e->outage = false;
    e->connect_failures = 0;
    return BF_OK;
}

/* An idle session whose server went away (a restart, a terminated backend) only learns it on
 * its next statement, which then fails. Input waiting on an idle connection is either a
 * notification or the server's goodbye: read it, and the connection's status tells. */
static bool engine_idle_conn_alive(bf_engine *e)
{
    if (PQtransactionStatus(e->conn) != PQTRANS_IDLE)
        return true;
    for (int i = 0; i < 4 && !e->goodbye; i++) {
        struct pollfd pfd = {.fd = PQsocket(e->conn), .events = POLLIN};
        if (pfd.fd < 0)
            return false;
        if (poll(&pfd, 1, 0) <= 0)
            break;
        if (PQconsumeInput(e->conn) != 1)
            return false;
        (void)PQisBusy(e->conn); /* parses it: a FATAL to an idle session arrives as a notice */
    }
    return !e->goodbye && PQstatus(e->conn) == CONNECTION_OK;
}

bf_err bf__ensure_conn(bf_engine *e)
{
    if (e->conn != NULL && PQstatus(e->conn) == CONNECTION_OK && engine_idle_conn_alive(e)) {
        if (PQtransactionStatus(e->conn) == PQTRANS_INERROR)
            bf__rollback(e);
        return BF_OK;
    }
    if (!e->outage) {
        bf_log_record rec = BF_LOG_RECORD_INIT;
        rec.level = BF_LOG_WARN;
        rec.event = BF_EV_DB_CONNECTION_LOST;
        rec.reason = "08";
        bf__log_event(e, &rec, "database connection lost, reconnecting");
    }
    e->outage = true;
    return engine_connect(e);
}

bf_err bf_config_check(const bf_config *cfg, char *diag, size_t diag_len)
{
    if (cfg == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    long long lease = cfg->lease_ms ? cfg->lease_ms : 30000;
    long long stmt = cfg->statement_timeout_ms ? cfg->statement_timeout_ms : 10000;
    long long lock = cfg->lock_timeout_ms ? cfg->lock_timeout_ms : 2000;
    long long step = cfg->step_ms ? cfg->step_ms : 200;
    if (lease > step + stmt && lease > lock)
        return BF_OK;
    if (diag != NULL && diag_len > 0)
        bf__format(diag, diag_len,
                   "lease_ms (%lld) must be longer than step_ms + statement_timeout_ms (%lld) and"
                   " lock_timeout_ms (%lld)",
                   lease, step + stmt, lock);
    return BF_ERR_INVALID_ARGUMENT;
}

bf_err bf_engine_open(bf_engine **out, const bf_config *cfg, const bf_registry *reg)
{
    if (out == NULL || cfg == NULL || cfg->conninfo == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    if ((cfg->lease_ms != 0 && cfg->lease_ms < 100) || cfg->step_ms < 0 || cfg->step_batches < 0 ||
        cfg->step_ms > 3600000 || cfg->statement_timeout_ms < 0)
        return BF_ERR_INVALID_ARGUMENT;
    bf_engine *e = calloc(1, sizeof *e);
    if (e == NULL)
        return BF_ERR_NOMEM;
    e->conninfo = strdup(cfg->conninfo);
    e->reg = reg;
    e->lease_ms = cfg->lease_ms ? cfg->lease_ms : 30000;
    e->statement_timeout_ms = cfg->statement_timeout_ms ? cfg->statement_timeout_ms : 10000;
    e->lock_timeout_ms = cfg->lock_timeout_ms ? cfg->lock_timeout_ms : 2000;
    e->step_ms = cfg->step_ms ? cfg->step_ms : 200;
    e->step_batches = cfg->step_batches ? cfg->step_batches : 1000;
    e->throttle = cfg->throttle;
    e->watch_writers = cfg->watch_writers == BF_WATCH_ON ? BF_WATCH_ON : BF_WATCH_OFF;
    e->watch_block = cfg->watch_block;
    e->watch_grace_s = cfg->watch_grace_s > 0 ? cfg->watch_grace_s : 0;
    e->stop_fd = -1;
    e->log = cfg->log;
    e->log_arg = cfg->log_arg;
    e->on_block = cfg->on_block;
    e->on_block_arg = cfg->on_block_arg;
    if (cfg->owner != NULL && cfg->owner[0] != '\0') {
        bf__copy(e->owner, sizeof e->owner, cfg->owner);
    } else {
        char host[64] = "host";
        (void)gethostname(host, sizeof host - 1);
        bf__format(e->owner, sizeof e->owner, "%s:%ld", host, (long)getpid());
    }
    /* the registry may grow while the engine is open: batch.c grows this with it */
    e->nprepared = reg && bf_registry_count(reg) ? bf_registry_count(reg) : 1;
    e->prepared = calloc(e->nprepared, 1);
    if (e->conninfo == NULL || e->prepared == NULL) {
        bf_engine_close(e);
        return BF_ERR_NOMEM;
    }
    bf_err err = engine_connect(e);
    if (err == BF_OK)
        err = bf__session_kept(e);
    if (err != BF_OK) {
        bf_engine_close(e);
        return err;
    }
    *out = e;
    return BF_OK;
}

void bf_engine_close(bf_engine *engine)
{
    if (engine == NULL)
        return;
    PQclear(engine->async_keep);
    if (engine->conn != NULL)
        PQfinish(engine->conn);
    free(engine->conninfo);
    free(engine->prepared);
    free(engine);
}

/* Hand a successful result to *out (or clear it), or turn a failed one into a bf_err. */
static bf_err exec_result(bf_engine *e, PGresult *r, PGresult **out, const char *what)
{
    ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
        if (out != NULL)
            *out = r;
        else
            PQclear(r);
        return BF_OK;
    }
    bf_err err = bf__pg_error(e, r, what);
    PQclear(r);
    return err;
}

int bf_engine_socket(const bf_engine *engine)
{
    return engine != NULL && engine->conn != NULL ? PQsocket(engine->conn) : -1;
}

void bf__blocks(bf_engine *e)
{
    if (e->on_block != NULL)
        e->on_block(e->on_block_arg);
}

bool bf__wait_result(bf_engine *e)
{
    PGconn *conn = e->conn;
    while (PQisBusy(conn)) {
        int sock = PQsocket(conn);
        if (sock < 0) /* the connection is gone: nothing will arrive */
            return false;
        bool watch = e->stop_fd >= 0 && !e->cancelled;
        struct pollfd pfd[2] = {{.fd = sock, .events = POLLIN},
                                {.fd = watch ? e->stop_fd : -1, .events = POLLIN}};
        bf__blocks(e);
        if (poll(pfd, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return false;
        }
        if (watch && pfd[1].revents != 0 && atomic_load(e->stop)) {
            char errbuf[256];
            PGcancel *cancel = PQgetCancel(conn);
            if (cancel != NULL && PQcancel(cancel, errbuf, sizeof errbuf) == 1)
                bf__log(e, BF_LOG_INFO, "stop: cancelled the statement in flight");
            else
                bf__log(e, BF_LOG_WARN, "stop: could not cancel the statement in flight");
            PQfreeCancel(cancel);
            e->cancelled = true;
        }
        if (pfd[0].revents != 0 && PQconsumeInput(conn) != 1)
            return false;
    }
    return true;
}

/* Take the results of the statement in flight that can be read without waiting (block: wait
 * for each, as PQexec does). The outcome is kept as PQexec would return it: the last result, or
 * the first failed one. *done when the statement ended (*r is NULL only if the connection
 * failed); otherwise the rest is still to arrive and the results so far are in e->async_keep. */
static void exec_take(bf_engine *e, bool block, PGresult **r_out, bool *done)
{
    PGresult *keep = e->async_keep, *r;
    e->async_keep = NULL;
    *done = true;
    if (!block && PQconsumeInput(e->conn) != 1) {
        PQclear(keep);
        *r_out = NULL;
        return;
    }
    for (;;) {
        if (!block && PQisBusy(e->conn)) {
            e->async_keep = keep;
            *done = false;
            *r_out = NULL;
            return;
        }
        if (block && !bf__wait_result(e))
            break;
        if ((r = PQgetResult(e->conn)) == NULL)
            break;
        ExecStatusType st = PQresultStatus(keep);
        if (keep != NULL && st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
            PQclear(r); /* keep the first failure */
            continue;
        }
        PQclear(keep);
        keep = r;
    }
    *r_out = keep;
}

bf_err bf__recv(bf_engine *e, PGresult **out, const char *what, bool block, bool *done)
{
    PGresult *r = NULL;
    exec_take(e, block, &r, done);
    if (!*done)
        return BF_OK;
    if (r == NULL)
        return bf__pg_error(e, NULL, what);
    return exec_result(e, r, out, what);
}

static bf_err exec_sent(bf_engine *e, bool sent, PGresult **out, const char *what)
{
    if (!sent)
        return bf__pg_error(e, NULL, what);
    bool done;
    return bf__recv(e, out, what, true, &done);
}

static bf_err exec_format(bf_engine *e, PGresult **out, const char *what, const char *sql,
                          int nparams, const char *const *params, int format)
{
    e->sqlstate[0] = '\0';
    bool sent = PQsendQueryParams(e->conn, sql, nparams, NULL, params, NULL, NULL, format) == 1;
    return exec_sent(e, sent, out, what);
}

bf_err bf__exec(bf_engine *e, PGresult **out, const char *what, const char *sql, int nparams,
                const char *const *params)
{
    return exec_format(e, out, what, sql, nparams, params, 0);
}

bf_err bf__exec_binary(bf_engine *e, PGresult **out, const char *what, const char *sql, int nparams,
                       const char *const *params)
{
    return exec_format(e, out, what, sql, nparams, params, 1);
}

/* Each prepared statement's name on the connection, and whether its results are binary (the
 * reads of BF_BACKFILL_COLUMNS). */
static const struct {
    const char *name;
    int binary;
} stmt_info[BF_STMT_COUNT] = {
    [BF_STMT_GET] = {"bf_s0", 1},       [BF_STMT_GET_FOR_UPDATE] = {"bf_s1", 1},
    [BF_STMT_GATE] = {"bf_s2", 0},      [BF_STMT_MIGRATIONS] = {"bf_s3", 0},
    [BF_STMT_READINESS] = {"bf_s4", 0}, [BF_STMT_STATS] = {"bf_s5", 0},
    [BF_STMT_WATCH] = {"bf_s6", 0},
};

bool bf__prepare_stmt(bf_engine *e, bf_stmt stmt, const char *sql, int nparams, PGresult **failed)
{
    *failed = NULL;
    if (e->stmt_prepared & (1u << stmt))
        return true;
    bf__blocks(e);
    PGresult *p = PQprepare(e->conn, stmt_info[stmt].name, sql, nparams, NULL);
    if (PQresultStatus(p) != PGRES_COMMAND_OK) {
        *failed = p;
        return false;
    }
    PQclear(p);
    e->stmt_prepared |= 1u << stmt;
    return true;
}

void bf__forget_stmt(bf_engine *e, bf_stmt stmt)
{
    e->stmt_prepared &= ~(1u << stmt);
    char dealloc[32];
    bf__format(dealloc, sizeof dealloc, "DEALLOCATE %s", stmt_info[stmt].name);
    (void)bf__exec0(e, "deallocate", dealloc, 0, NULL);
}

bf_err bf__send_stmt(bf_engine *e, const char *what, bf_stmt stmt, const char *sql, int nparams,
                     const char *const *params)
{
    e->sqlstate[0] = '\0';
    PGresult *failed;
    if (!bf__prepare_stmt(e, stmt, sql, nparams, &failed)) {
        bf_err err = bf__pg_error(e, failed, what);
        PQclear(failed);
        return err;
    }
    if (PQsendQueryPrepared(e->conn, stmt_info[stmt].name, nparams, params, NULL, NULL,
                            stmt_info[stmt].binary) != 1)
        return bf__pg_error(e, NULL, what);
    return BF_OK;
}

bf_err bf__exec_stmt(bf_engine *e, PGresult **out, const char *what, bf_stmt stmt, const char *sql,
                     int nparams, const char *const *params)
{
    bf_err err = bf__send_stmt(e, what, stmt, sql, nparams, params);
    if (err != BF_OK)
        return err;
    bool done;
    return bf__recv(e, out, what, true, &done);
}

bf_err bf__exec0(bf_engine *e, const char *what, const char *sql, int nparams,
                 const char *const *params)
{
    return bf__exec(e, NULL, what, sql, nparams, params);
}

bf_err bf__begin(bf_engine *e, bool read_only)
{
    return bf__exec0(e, "begin",
                     read_only ? "BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY"
                               : "BEGIN ISOLATION LEVEL READ COMMITTED",
                     0, NULL);
}

bf_err bf__commit(bf_engine *e)
{
    return bf__exec0(e, "commit", "COMMIT", 0, NULL);
}

void bf__rollback(bf_engine *e)
{
    if (e->conn == NULL || PQstatus(e->conn) != CONNECTION_OK)
        return;
    PGresult *r = PQexec(e->conn, "ROLLBACK");
    PQclear(r);
}

bf_err bf__key_field(bf_engine *e, char *dst, const PGresult *r, int row, int col)
{
    if (PQgetlength(r, row, col) >= BF_KEY_TEXT_MAX)
        return bf__diag(e, BF_ERR_DATA_INVARIANT, "a key is longer than %d bytes as text",
                        BF_KEY_TEXT_MAX - 1);
    memcpy(dst, bf__field(r, row, col), (size_t)PQgetlength(r, row, col) + 1);
    return BF_OK;
}

const char *bf__field(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? "" : PQgetvalue(r, row, col);
}

bool bf__isnull(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) != 0;
}

/* Type OIDs (pg_type.h, fixed since PostgreSQL 7) of the binary columns bf__field_i64 reads. */
#define OID_INT8        20
#define OID_INT2        21
#define OID_INT4        23
#define OID_TIMESTAMPTZ 1184
/* PostgreSQL's timestamps count microseconds from 2000-01-01 00:00 UTC. */
#define PG_EPOCH_UNIX_US INT64_C(946684800000000)

static uint64_t field_be(const unsigned char *p, int len)
{
    uint64_t v = 0;
    for (int i = 0; i < len; i++)
        v = v << 8 | p[i];
    return v;
}

int64_t bf__field_i64(const PGresult *r, int row, int col)
{
    if (PQgetisnull(r, row, col))
        return 0;
    const char *v = PQgetvalue(r, row, col);
    if (PQfformat(r, col) == 0)
        return strtoll(v, NULL, 10);
    const unsigned char *p = (const unsigned char *)v;
    int len = PQgetlength(r, row, col);
    switch (PQftype(r, col)) {
    case OID_INT2:
        return len == 2 ? (int16_t)field_be(p, 2) : 0;
    case OID_INT4:
        return len == 4 ? (int32_t)field_be(p, 4) : 0;
    case OID_INT8:
        return len == 8 ? (int64_t)field_be(p, 8) : 0;
    case OID_TIMESTAMPTZ:
        return len == 8 ? (int64_t)field_be(p, 8) + PG_EPOCH_UNIX_US : 0;
    default:
        return 0;
    }
}

bool bf__field_bool(const PGresult *r, int row, int col)
{
    if (PQgetisnull(r, row, col))
        return false;
    const char *v = PQgetvalue(r, row, col);
    return PQfformat(r, col) == 0 ? v[0] == 't' : PQgetlength(r, row, col) == 1 && v[0] != 0;
}

static bf_err engine_drain_notifies(bf_engine *e, bool *got)
{
    if (PQconsumeInput(e->conn) == 0) {
        bf__log(e, BF_LOG_WARN, "notification wait: %s", PQerrorMessage(e->conn));
        return bf__diag(e, BF_ERR_UNAVAILABLE, "database connection lost");
    }
    PGnotify *n;
    while ((n = PQnotifies(e->conn)) != NULL) {
        *got = true;
        PQfreemem(n);
    }
    return BF_OK;
}

bf_err bf__wait_notify(bf_engine *e, int wake_fd, int timeout_ms)
{
    bf_err err = bf__ensure_conn(e);
    if (err != BF_OK)
        return err;
    if (!e->listening) {
        if ((err = bf__exec0(e, "listen", "LISTEN buzz_backfill", 0, NULL)) != BF_OK)
            return err;
        e->listening = true;
    }
    bool got = false;
    if ((err = engine_drain_notifies(e, &got)) != BF_OK)
        return err;
    if (got || timeout_ms == 0)
        return got ? BF_OK : BF_ERR_TIMEOUT;
    struct pollfd fds[2] = {{.fd = PQsocket(e->conn), .events = POLLIN},
                            {.fd = wake_fd, .events = POLLIN}};
    if (fds[0].fd < 0)
        return bf__diag(e, BF_ERR_UNAVAILABLE, "database connection lost");
    bf__blocks(e);
    if (poll(fds, 2, timeout_ms) <= 0 || fds[0].revents == 0)
        return BF_ERR_TIMEOUT; /* timed out, woken, or a signal: the caller re-reads either way */
    if ((err = engine_drain_notifies(e, &got)) != BF_OK)
        return err;
    return got ? BF_OK : BF_ERR_TIMEOUT;
}

bf_err bf_wait_notify(bf_engine *e, int timeout_ms)
{
    if (e == NULL || timeout_ms < 0)
        return BF_ERR_INVALID_ARGUMENT;
    return bf__wait_notify(e, -1, timeout_ms);
}

void bf__unlisten(bf_engine *e)
{
    if (e->listening && e->conn != NULL)
        (void)bf__exec0(e, "unlisten", "UNLISTEN buzz_backfill", 0, NULL);
    e->listening = false;
}
