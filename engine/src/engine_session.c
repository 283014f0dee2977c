/*
 * engine_session.c - does the engine's connection keep its server session between
 * transactions? (bf__session_kept, when a connection opens: a pooler in transaction mode is
 * refused.)
 */
#include <errno.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/*
 * Design notes: the engine's session state has to outlive a transaction: the batch loop
 * procedures in pg_temp, prepared statements, LISTEN, the session settings and timeouts above,
 * the batch loop's account in a session setting. A pooler that hands each transaction (or
 * statement) to whichever server session is free (PgBouncer's pool_mode = transaction or
 * statement) breaks every one of them, quietly and mostly under load, so an engine refuses such
 * a connection when it opens (docs/engine.md, "Connection poolers").
 *
 * A marker left in the session and looked for in the next transaction is not enough: a pool with
 * one idle server hands the same one back. So the check makes the pooler choose: with our
 * connection idle between two transactions, a second, short-lived probe connection opens a
 * transaction and reads its backend's pid, then ours reads its pid again. A path that keeps
 * sessions never gives the probe our backend and never moves ours; a transaction pooler gives
 * the probe the server we just released (PgBouncer reuses the most recently used idle server)
 * or, when the probe got another one, may move ours. A probe that cannot connect, or waits for a
 * server (a full session pool: our idle connection keeps its backend), settles nothing, and the
 * connection is accepted. A direct connection costs no probe: over TCP the server sees our own
 * socket (the backend's client address and port are this socket's local ones), over a unix
 * socket our peer is the postmaster that forked our backend.
 */

#define ENGINE_PROBE_WAIT_MS 2000
/* A round where the probe got another server and ours stayed proves nothing by itself: a
 * transaction pooler with several idle servers, or whose most recently used one another client
 * just released, can do that too (seen: a daemon's admin session passed the check beside its
 * own other sessions under load). The check repeats it; a session pooler passes every round. */
#define ENGINE_PROBE_ROUNDS 5

/* The backend pid of c, and its client port and address as the server sees them (port -1 and
 * "" over a unix socket). */
static bool engine_backend(PGconn *c, int *pid, int *port, char *addr, size_t cap)
{
    PGresult *r = PQexec(c, "SELECT pg_backend_pid(), coalesce(client_port, -1),"
                            " coalesce(host(client_addr), '')"
                            " FROM pg_catalog.pg_stat_activity WHERE pid = pg_backend_pid()");
    bool ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
    if (ok) {
        *pid = atoi(PQgetvalue(r, 0, 0));
        *port = atoi(PQgetvalue(r, 0, 1));
        bf__copy(addr, cap, PQgetvalue(r, 0, 2));
    }
    PQclear(r);
    return ok;
}

/* Is c's own TCP socket the client the server sees at port and addr? */
static bool engine_socket_is(PGconn *c, int port, const char *addr)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (PQsocket(c) < 0 || getsockname(PQsocket(c), (struct sockaddr *)&ss, &len) != 0)
        return false;
    char text[INET6_ADDRSTRLEN] = "";
    int local = -1;
    if (ss.ss_family == AF_INET) {
        struct sockaddr_in in;
        memcpy(&in, &ss, sizeof in);
        local = ntohs(in.sin_port);
        (void)inet_ntop(AF_INET, &in.sin_addr, text, sizeof text);
    } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 in6;
        memcpy(&in6, &ss, sizeof in6);
        local = ntohs(in6.sin6_port);
        (void)inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof text);
    }
    return local == port && text[0] != '\0' && strcmp(text, addr) == 0;
}

/* Over a unix socket: is the process at the other end (the postmaster, whose socket we reached)
 * our backend's parent? Both pids as this host's /proc sees them; anything unclear (another pid
 * namespace, no /proc) says no, and the probe decides. */
static bool engine_unix_is_direct(PGconn *c, int backend_pid)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (PQsocket(c) < 0 || getsockopt(PQsocket(c), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        cred.pid <= 0)
        return false;
    char path[64], stat[512];
    bf__format(path, sizeof path, "/proc/%d/stat", backend_pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    size_t n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[n] = '\0';
    const char *p = strrchr(stat, ')'); /* "pid (comm) state ppid ..." */
    char state = 0;
    int ppid = 0;
    return p != NULL && sscanf(p + 1, " %c %d", &state, &ppid) == 2 && ppid == cred.pid;
}

/* Wait (until deadline_us) for the probe's next result; NULL when none came or it failed. */
static PGresult *engine_probe_result(PGconn *p, int64_t deadline_us)
{
    while (PQisBusy(p)) {
        int64_t left_ms = (deadline_us - bf__monotonic_us()) / 1000;
        struct pollfd pfd = {.fd = PQsocket(p), .events = POLLIN};
        if (left_ms <= 0 || pfd.fd < 0)
            return NULL;
        if (poll(&pfd, 1, (int)left_ms) < 0 && errno != EINTR)
            return NULL;
        if (PQconsumeInput(p) != 1)
            return NULL;
    }
    return PQgetResult(p);
}

/* The pid of the backend the probe holds in an open transaction; 0 when it settles nothing. */
static int engine_probe_pid(bf_engine *e, PGconn *p)
{
    if (PQstatus(p) != CONNECTION_OK) {
        bf__log(e, BF_LOG_DEBUG, "session check: the probe could not connect: %s",
                PQerrorMessage(p));
        return 0;
    }
    if (PQsendQuery(p, "BEGIN; SELECT pg_backend_pid()") != 1)
        return 0;
    int64_t deadline = bf__monotonic_us() + (int64_t)ENGINE_PROBE_WAIT_MS * 1000;
    int pid = 0;
    PGresult *r;
    while ((r = engine_probe_result(p, deadline)) != NULL) {
        if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
            pid = atoi(PQgetvalue(r, 0, 0));
        PQclear(r);
    }
    if (PQisBusy(p)) {
        bf__log(e, BF_LOG_DEBUG, "session check: the probe got no server session within %d ms",
                ENGINE_PROBE_WAIT_MS);
        return 0;
    }
    return pid;
}

bf_err bf__session_kept(bf_engine *e)
{
    int pid = 0, port = -1, again = 0, ignored = 0;
    char addr[64];
    if (!engine_backend(e->conn, &pid, &port, addr, sizeof addr)) {
        bf__log(e, BF_LOG_ERROR, "session check failed: %s", PQerrorMessage(e->conn));
        return bf__diag(e, BF_ERR_UNAVAILABLE, "could not configure database session");
    }
    if (port >= 0 ? engine_socket_is(e->conn, port, addr) : engine_unix_is_direct(e->conn, pid))
        return BF_OK; /* nothing between us and the server */
    bf__log(e, BF_LOG_DEBUG, "session check: not a direct connection, probing with a second one");
    int theirs = 0;
    for (int round = 0; round < ENGINE_PROBE_ROUNDS; round++) {
        PGconn *probe = PQconnectdb(e->conninfo);
        if (probe == NULL)
            return bf__diag(e, BF_ERR_NOMEM, "out of memory");
        theirs = engine_probe_pid(e, probe);
        bool ours = theirs != 0 && engine_backend(e->conn, &again, &ignored, addr, sizeof addr);
        if (theirs != 0)
            PQclear(PQexec(probe, "ROLLBACK"));
        PQfinish(probe);
        if (theirs != 0 && !ours) {
            bf__log(e, BF_LOG_ERROR, "session check failed: %s", PQerrorMessage(e->conn));
            return bf__diag(e, BF_ERR_UNAVAILABLE, "could not configure database session");
        }
        if (theirs == 0)
            return BF_OK; /* settles nothing */
        if (theirs == pid || again != pid)
            break; /* the pooler gave our server away, or moved us */
    }
    if (theirs != pid && again == pid)
        return BF_OK; /* every round: the probe elsewhere, ours kept */
    bf__log(e, BF_LOG_ERROR,
            "the database connection does not keep its session: it ran on server session %d,"
            " a second connection got %d, then it ran on %d. A connection pooler in transaction"
            " or statement mode (PgBouncer pool_mode = transaction) hands each transaction to"
            " any server session, which breaks the engine's session state (batch loop"
            " procedures in pg_temp, prepared statements, LISTEN, session settings). Connect"
            " through a pooler with pool_mode = session, or directly to PostgreSQL",
            pid, theirs, again);
    return bf__diag(e, BF_ERR_PREREQUISITE,
                    "database connection does not keep its session (a pooler in transaction"
                    " mode?): use pool_mode = session or connect directly");
}
