/*
 * engine_pgerror.c - what the engine makes of PostgreSQL's errors and notices: the bf_err of a
 * failed result through the SQLSTATE table, and a message for the log and the diagnostic that
 * names the condition and the objects involved (constraint, table, column, function) but never
 * quotes row data or query text (class 22, P0 and 42601 messages are logged as their label).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Messages that can quote row data or query text are logged as their label: class 22 (data
 * exception: 'invalid input syntax for type integer: "..."'), class P0 (PL/pgSQL RAISE: a
 * trigger's message is the user's text and often carries the row's values) and 42601 (a syntax
 * error quotes the query near it). */
static bool engine_message_may_quote_data(const char *sqlstate)
{
    return sqlstate != NULL && (strncmp(sqlstate, "22", 2) == 0 ||
                                strncmp(sqlstate, "P0", 2) == 0 || strcmp(sqlstate, "42601") == 0);
}

/* Identifiers reported by the server (constraint, table, column), reduced to what an
 * identifier needs, so that nothing else can travel in them. */
static void engine_identifier(char *dst, size_t cap, const char *src)
{
    bf__copy(dst, cap, src);
    for (char *p = dst; *p != '\0'; p++) {
        unsigned char c = (unsigned char)*p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '$' || c == '.' || c == '-';
        if (!ok)
            *p = '?';
    }
}

/* The identifier in msg right after the words `after`: quoted ('column "x" of relation') or
 * plain up to a space or parenthesis ('column t.x does not exist', 'function f(integer)'),
 * reduced by engine_identifier; false when msg has none. */
static bool engine_message_identifier(const char *msg, const char *after, char *dst, size_t cap)
{
    const char *p = msg != NULL ? strstr(msg, after) : NULL;
    if (p == NULL)
        return false;
    p += strlen(after);
    const char *end = NULL;
    if (*p == '"')
        end = strchr(++p, '"');
    else
        end = p + strcspn(p, " (");
    if (end == NULL || end == p)
        return false;
    char name[128];
    size_t n = (size_t)(end - p) < sizeof name ? (size_t)(end - p) : sizeof name - 1;
    memcpy(name, p, n);
    name[n] = '\0';
    engine_identifier(dst, cap, name);
    return true;
}

/* The objects a server error names, from its fields, and for the errors that carry them only in
 * their message (an undefined column, table or function) from there; the raising function of a
 * PL/pgSQL RAISE from its context. Names only: never a message's text or a value. */
typedef struct engine_objects {
    char column[80], table[160], constraint[80], function[80];
} engine_objects;

static void engine_error_objects(const PGresult *res, engine_objects *o)
{
    memset(o, 0, sizeof *o);
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    const char *f;
    if ((f = PQresultErrorField(res, PG_DIAG_CONSTRAINT_NAME)) != NULL)
        engine_identifier(o->constraint, sizeof o->constraint, f);
    if ((f = PQresultErrorField(res, PG_DIAG_TABLE_NAME)) != NULL) {
        const char *schema = PQresultErrorField(res, PG_DIAG_SCHEMA_NAME);
        char both[160];
        bf__format(both, sizeof both, "%s%s%s", schema ? schema : "", schema ? "." : "", f);
        engine_identifier(o->table, sizeof o->table, both);
    }
    if ((f = PQresultErrorField(res, PG_DIAG_COLUMN_NAME)) != NULL)
        engine_identifier(o->column, sizeof o->column, f);
    if (state == NULL)
        return;
    if (strcmp(state, "42703") == 0 && o->column[0] == '\0')
        engine_message_identifier(primary, "column ", o->column, sizeof o->column);
    if (strcmp(state, "42703") == 0 && o->table[0] == '\0')
        engine_message_identifier(primary, " of relation ", o->table, sizeof o->table);
    if (strcmp(state, "42P01") == 0 && o->table[0] == '\0')
        engine_message_identifier(primary, "relation ", o->table, sizeof o->table);
    if (strcmp(state, "42883") == 0)
        engine_message_identifier(primary, "function ", o->function, sizeof o->function);
    if (strncmp(state, "P0", 2) == 0)
        engine_message_identifier(PQresultErrorField(res, PG_DIAG_CONTEXT), "PL/pgSQL function ",
                                  o->function, sizeof o->function);
}

/* ", column x, table s.t, constraint c, function f" of what is set */
static void engine_objects_text(const engine_objects *o, char *out, size_t cap)
{
    bf__format(out, cap, "%s%s%s%s%s%s%s%s", o->column[0] ? ", column " : "", o->column,
               o->table[0] ? ", table " : "", o->table, o->constraint[0] ? ", constraint " : "",
               o->constraint, o->function[0] ? ", function " : "", o->function);
}

/* One server message for the log: severity, SQLSTATE, the primary message (or only its label
 * when it may quote data) and the names of the objects involved. Never DETAIL (which can hold
 * "Failing row contains (...)" or key values), HINT, CONTEXT or the statement: the log must
 * carry neither row data nor query text. */
static void engine_describe(const PGresult *res, char *out, size_t cap)
{
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    const char *severity = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
    engine_objects o;
    engine_error_objects(res, &o);
    bool quote = !engine_message_may_quote_data(state) && primary != NULL;
    const char *condition = bf__condition_name(state);
    bf__format(out, cap, "%s sqlstate=%s%s%s%s: %s%s%s%s%s%s%s%s%s", severity ? severity : "ERROR",
               state ? state : "none", condition ? " (" : "", condition ? condition : "",
               condition ? ")" : "", quote ? primary : bf__classify_sqlstate(state).label,
               o.constraint[0] ? " constraint=" : "", o.constraint, o.table[0] ? " table=" : "",
               o.table, o.column[0] ? " column=" : "", o.column, o.function[0] ? " function=" : "",
               o.function);
}

/* libpq notices (warnings the server sends on a statement that succeeds) go to the engine's
 * log, redacted like errors, never raw to stderr. */
void bf__notice(void *arg, const PGresult *res)
{
    bf_engine *e = arg;
    const char *severity = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
    if (severity != NULL && (strcmp(severity, "FATAL") == 0 || strcmp(severity, "PANIC") == 0))
        e->goodbye = true; /* the server is ending this session */
    char msg[BF_DIAG_MAX], cls[3] = "";
    engine_describe(res, msg, sizeof msg);
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    bf_log_record rec = BF_LOG_RECORD_INIT;
    rec.level = BF_LOG_WARN;
    rec.event = BF_EV_DB_NOTICE;
    if (state != NULL && strlen(state) == 5) {
        memcpy(cls, state, 2);
        rec.reason = cls;
    }
    bf__log_event(e, &rec, "database notice: %s", msg);
}

bf_err bf__pg_error(bf_engine *e, const PGresult *res, const char *what)
{
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    bool server = state != NULL;
    if (state == NULL && (e->conn == NULL || PQstatus(e->conn) != CONNECTION_OK))
        state = "08006";
    bf__copy(e->sqlstate, sizeof e->sqlstate, state ? state : "");
    bf_sqlstate_class cls = bf__classify_sqlstate(state);
    char msg[BF_DIAG_MAX];
    if (server)
        engine_describe(res, msg, sizeof msg);
    else /* no server message: libpq's own (connection) text */
        bf__copy(msg, sizeof msg, e->conn ? PQerrorMessage(e->conn) : "no connection");
    bf_log_record rec = BF_LOG_RECORD_INIT;
    char cls_buf[3];
    rec.level = BF_LOG_WARN;
    rec.reason = bf__sqlstate_class(e, cls_buf);
    bf__log_event(e, &rec, "%s failed: %s", what, msg);
    /* the client sees our label, the condition's name and SQLSTATE, and the names of the
     * column, table, constraint or function involved (what operators need to find the cause):
     * never the server's text, a row's values or the query */
    engine_objects o;
    char objects[BF_DIAG_MAX] = "";
    if (server) {
        engine_error_objects(res, &o);
        engine_objects_text(&o, objects, sizeof objects);
    }
    const char *condition = bf__condition_name(state);
    bf__diag(e, cls.err, "%s: %s (%s%s%s%s)", what, cls.label, condition ? condition : "",
             condition ? " " : "", state ? state : "no sqlstate", objects);
    return cls.err;
}
