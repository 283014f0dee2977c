/*
 * internal.h - what the engine's source files share and nothing outside engine/ may use.
 */
#ifndef BUZZ_ENGINE_INTERNAL_H
#define BUZZ_ENGINE_INTERNAL_H

#include <libpq-fe.h>
#include <stdarg.h>
#include <stdatomic.h>

#include "buzz/definition.h"
#include "text.h" /* common/src: bounded formatting */
#include "buzz/engine.h"

#define BF_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- compiled definitions (registry.c, compile.c) ------------------------------------- */

#define BF_DIGEST_HEX 65 /* a definition digest: SHA-256 in hex and its NUL */

/* The SQL the engine derives from one definition, built once when it joins a registry. */
typedef struct bf_compiled {
    const bf_definition *def;
    char key_types[96];         /* canonical key signature, "timestamptz,bytea" */
    char digest[BF_DIGEST_HEX]; /* what the definition materially is (compile.c) */
    char *sql_bound;            /* capture the inclusive upper bound: greatest key as text[] */
    char *sql_estimate;         /* planner row estimate of the source table */
    char *sql_unique;           /* is the key unique and NOT NULL? (text verdict, NULL: no table) */
    char *sql_loop;    /* declarative: CREATE the batch loop procedure (pg_temp.bf_loop_<i>) */
    char *sql_call;    /* declarative: CALL it, one step of up to max batches */
    char *sql_keys[2]; /* callback forms: INSERT INTO bf_batch the next keys ($1 bound, $2 limit, $3
                          after) */
    char *sql_vchunk[2];    /* declarative validation chunk: count, bad, last key */
    char *sql_create_batch; /* callback forms: CREATE TEMP TABLE bf_batch ... ON COMMIT DROP */
    char *sql_batch_last;   /* callback forms: greatest key in bf_batch as text[] */
    char *sql_fence;        /* callback batch: fenced checkpoint advance from bf_batch */
    char *sql_prereq;       /* prerequisite check, or NULL */
    /* the preflight (preflight.c): positions to plan the batches at, and the declarative
     * mutation as a statement of its own */
    char *sql_first;       /* least key as text[], NULL row when empty */
    char *sql_middle;      /* first key at the leading column's median (statistics), or none */
    char *sql_batch_end;   /* ($1 bound, $2 size, $3 after) the last key of that batch */
    char *sql_plan_update; /* declarative: ($1 after, $2 last) the loop's mutation, or NULL */
    char *sql_needing;     /* declarative: the rows needing repair, for the planner's estimate */
} bf_compiled;

#define BF_REGISTRY_CHUNK  64  /* entries per chunk: allocated once, never moved */
#define BF_REGISTRY_CHUNKS 256 /* so at most 16,384 definitions */
#define BF_REGISTRY_MAX    ((size_t)BF_REGISTRY_CHUNK * BF_REGISTRY_CHUNKS)
#define BF_REGISTRY_SLOTS  (2 * BF_REGISTRY_MAX) /* the ID index: at most half full */

/* Append-only (registry.c design notes): readers load count, the index slots and the literals
 * (acquire) without a lock; one writer at a time stores them (release). */
struct bf_registry {
    bf_compiled *chunks[BF_REGISTRY_CHUNKS]; /* entry i: chunks[i / CHUNK][i % CHUNK] */
    _Atomic size_t count;                    /* entries complete and visible to readers */
    _Atomic uint32_t *index; /* BF_REGISTRY_SLOTS open-addressing slots: entry + 1, 0 = empty */
    void **modules;          /* dlopen handles kept for the registry's lifetime */
    size_t nmodules;
    _Atomic(char *) ids_all;      /* text[] literal of every stable ID, rebuilt per batch */
    _Atomic(char *) ids_required; /* text[] literal of the required stable IDs */
    size_t ids_count;             /* the writer's: entries the literals name */
    int batch_depth;              /* the writer's: bf_registry_batch_begin() nesting */
    char **retired;               /* literals replaced, freed with the registry */
    size_t nretired, capretired;
};

/* compile.c: fill c with the SQL of d (index: its place in the registry, which names its loop
 * procedure); BF_ERR_NOMEM leaves c empty. bf__compiled_fini frees what it holds. */
bf_err bf__compile(const bf_definition *d, size_t index, bf_compiled *c);
void bf__compiled_fini(bf_compiled *c);

const bf_compiled *bf__registry_compiled(const bf_registry *reg, const char *id, size_t *index);
/* "{a,b}": a text[] literal of the registry's IDs (only required ones when asked), owned by the
 * registry ("{}" when empty). */
const char *bf__registry_ids(const bf_registry *reg, bool required_only);
/* A seam for tests (tests/unit/test_registry.c): when set, bf_registry_add calls it between
 * publishing an entry's index slot and its count, where a reader can look at the registry
 * half-published. NULL in production. */
extern void (*bf__registry_between_stores)(const bf_registry *reg);

/* ---- engine session (engine.c) --------------------------------------------------------- */

struct bf_engine {
    PGconn *conn;
    char *conninfo;
    const bf_registry *reg;
    char owner[BF_OWNER_MAX];
    int lease_ms;
    int statement_timeout_ms;
    int lock_timeout_ms;
    int step_ms;
    int step_batches;
    bf_throttle *throttle; /* shared by the process's engines, or NULL */
    bf_log_fn log;
    void *log_arg;
    unsigned char *prepared; /* per registry index: bit 0 loop procedure created */
    size_t nprepared;        /* entries of prepared: grows with the registry (batch.c) */
    uint32_t stmt_prepared;  /* bit per bf_stmt: prepared on this connection */
    char diag[BF_DIAG_MAX];
    char sqlstate[6]; /* of the last failed statement, "" otherwise */
    bool listening;   /* LISTEN buzz_backfill issued on this connection (bf__wait_notify) */
    bool warmed;      /* bf__session_warm ran on this connection */
    bool outage;      /* the connection is lost and not yet restored (logged once) */
    unsigned connect_failures; /* since the last successful connect (the first is logged) */
    bool goodbye;              /* the server sent this session a FATAL: it is ending */
    /* while a worker steps: its wake pipe and stop flag (stop_fd -1 otherwise). A stop request
     * then cancels the statement in flight, once per step (cancelled). */
    int stop_fd;
    atomic_bool *stop;
    bool cancelled;
    /* bf_config.on_block: told before the engine's thread waits on PostgreSQL */
    void (*on_block)(void *arg);
    void *on_block_arg;
    bf_watch_mode watch_writers; /* bf_config: the daemon-wide watchdog mode */
    bool watch_block;            /* bf_config: old writers block a running backfill */
    int watch_grace_s;           /* bf_config: a completed backfill keeps its watch this long */
    /* an asynchronous read (bf_readiness_begin, bf_get_begin) from its begin to its last end */
    int async_op;         /* BF_ASYNC_*: which read, or BF_ASYNC_NONE */
    int async_step;       /* bf_get_end: 0 the row, 1 its old-writer counts */
    PGresult *async_keep; /* results of the statement in flight taken so far */
};

enum { BF_ASYNC_NONE, BF_ASYNC_READINESS, BF_ASYNC_SCHEMA, BF_ASYNC_GET };

/* A plain message (event BF_EV_NONE, no fields). */
void bf__log(const bf_engine *e, bf_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* One event: rec (from BF_LOG_RECORD_INIT) carries the level, the event and the fields that
 * apply; the message is formatted into rec->msg here. Every record reaches the callback,
 * whatever its level. Call it exactly once per occurrence: the service counts these. */
void bf__log_event(const bf_engine *e, bf_log_record *rec, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* CLOCK_MONOTONIC in microseconds (durations of steps and validation passes). */
int64_t bf__monotonic_us(void);
/* The class (two characters, "40") of the SQLSTATE of the last failed statement into buf (3
 * bytes); NULL when none was recorded. A bounded reason for log records. */
const char *bf__sqlstate_class(const bf_engine *e, char *buf);
/* Set the engine's client-safe diagnostic (bounded); returns err for tail calls. */
bf_err bf__diag(bf_engine *e, bf_err err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Wait until the next result of a sent statement can be read without blocking; meanwhile a
 * worker's stop request cancels the statement (see stop_fd). false when the connection failed. */
bool bf__wait_result(bf_engine *e);
/* About to wait on PostgreSQL (a result, a notification, a connect, a prepare): tell the
 * engine's owner (bf_config.on_block), which may let another thread take this one's place. */
void bf__blocks(bf_engine *e);

/* Make sure the connection is usable, reconnecting once when it broke. */
bf_err bf__ensure_conn(bf_engine *e);

/* bf_wait_notify() that also wakes (BF_ERR_TIMEOUT) when wake_fd (-1: none) becomes readable.
 * e->listening is the one record of LISTEN on this connection; bf__unlisten() ends it. */
bf_err bf__wait_notify(bf_engine *e, int wake_fd, int timeout_ms);
void bf__unlisten(bf_engine *e);

/*
 * Turn a failed PGresult into a bf_err: logs the full server message with `what`, records the
 * SQLSTATE, sets a redacted diagnostic and classifies through the SQLSTATE table. Does not
 * clear the result.
 */
bf_err bf__pg_error(bf_engine *e, const PGresult *res, const char *what);
/* libpq's notice receiver of the engine's connection (arg: the engine): a notice goes to the
 * engine's log, redacted like an error (engine_pgerror.c). */
void bf__notice(void *arg, const PGresult *res);
/* When a connection opens: BF_OK when it keeps its server session between transactions (a
 * direct connection, a session pooler, or a probe that settles nothing), BF_ERR_PREREQUISITE
 * when a pooler hands its transactions to other sessions, BF_ERR_UNAVAILABLE when it cannot
 * tell (engine_session.c). */
bf_err bf__session_kept(bf_engine *e);

/* Run a statement with text parameters. Returns the result in *out (caller clears) when its
 * status is COMMAND_OK or TUPLES_OK; otherwise clears it and returns the classified error. */
bf_err bf__exec(bf_engine *e, PGresult **out, const char *what, const char *sql, int nparams,
                const char *const *params);
/* bf__exec() with binary results (List's read of BF_BACKFILL_COLUMNS, planned for each call
 * so that its paging bound is an index condition). */
bf_err bf__exec_binary(bf_engine *e, PGresult **out, const char *what, const char *sql, int nparams,
                       const char *const *params);
/* bf__exec() for statements whose result is not needed. */
bf_err bf__exec0(bf_engine *e, const char *what, const char *sql, int nparams,
                 const char *const *params);
/* Fixed statements on hot paths (reads served on every RPC), prepared once per connection. */
typedef enum bf_stmt {
    BF_STMT_GET = 0,
    BF_STMT_GET_FOR_UPDATE = 1,
    BF_STMT_GATE = 2,
    BF_STMT_MIGRATIONS = 3,
    BF_STMT_READINESS = 4,
    BF_STMT_STATS = 5,
    BF_STMT_WATCH = 6,
    BF_STMT_COUNT
} bf_stmt;

/* bf__exec() through a per-connection prepared statement: parsed and planned once. It is
 * bf__send_stmt() then bf__recv() (block), which asynchronous reads call apart. The reads of
 * BF_BACKFILL_COLUMNS (BF_STMT_GET, BF_STMT_GET_FOR_UPDATE) ask for binary results; the field
 * helpers below read both forms. */
bf_err bf__send_stmt(bf_engine *e, const char *what, bf_stmt stmt, const char *sql, int nparams,
                     const char *const *params);
/* Prepare stmt on this connection unless it is already: false with the failed result in *failed
 * (the caller classifies and clears it). */
bool bf__prepare_stmt(bf_engine *e, bf_stmt stmt, const char *sql, int nparams, PGresult **failed);
/* Deallocate stmt on this connection (its relations were dropped): prepared again next time. */
void bf__forget_stmt(bf_engine *e, bf_stmt stmt);
/* The outcome of the statement in flight, as bf__exec() returns it. Without block, only what
 * arrived is read: *done false (and BF_OK) when more is to come (wait for the socket). */
bf_err bf__recv(bf_engine *e, PGresult **out, const char *what, bool block, bool *done);
bf_err bf__exec_stmt(bf_engine *e, PGresult **out, const char *what, bf_stmt stmt, const char *sql,
                     int nparams, const char *const *params);

/* Before a session's first batch: allocate and free 8 MiB in its backend, once per connection
 * (engine.c's design notes say why). */
bf_err bf__session_warm(bf_engine *e);

/* Plain BEGIN / COMMIT / ROLLBACK (rollback never fails loudly). */
bf_err bf__begin(bf_engine *e, bool read_only);
bf_err bf__commit(bf_engine *e);
void bf__rollback(bf_engine *e);
/* idle_in_transaction_session_timeout of every engine session: half the lease, so that a
 * client stopped inside a transaction loses its locks before its claim can be taken over. */
int bf__idle_tx_timeout_ms(const bf_engine *e);

/* Result field helpers: NULL fields read as "" / 0 / false. Text and binary results alike:
 * in a binary result, bf__field_i64 reads bigint, integer, smallint and timestamptz (as
 * microseconds since the Unix epoch), and bf__field gives text columns as they are. */
const char *bf__field(const PGresult *r, int row, int col);
bool bf__isnull(const PGresult *r, int row, int col);
int64_t bf__field_i64(const PGresult *r, int row, int col);
bool bf__field_bool(const PGresult *r, int row, int col);

/* Copy a bound or checkpoint (text[] literal) of a result into dst (BF_KEY_TEXT_MAX bytes);
 * BF_ERR_DATA_INVARIANT, dst untouched, when it does not fit: a key is never truncated. */
bf_err bf__key_field(bf_engine *e, char *dst, const PGresult *r, int row, int col);
/* bf__copy, bf__format, bf__vformat: common/src/text.h */

/* ---- throttling (throttle.c) ------------------------------------------------------------ */

/* A tripped health signal: its name (NULL when none tripped), its value as text, and how long
 * to wait before the next check. */
typedef struct bf_throttle_verdict {
    const char *signal;
    char value[64];
    int wait_ms;
} bf_throttle_verdict;

/* Run the enabled signals of cfg for definition c (one round trip, plus the custom query when
 * set and nothing else tripped). An error only when the database could not be asked. */
bf_err bf__throttle_check(bf_engine *e, const bf_compiled *c, const bf_throttle_config *cfg,
                          bf_throttle_verdict *out);
/* keys passed for id by a step that started at started_us (monotonic): how long (us) the
 * definition's ceiling def_rate and the process's ceiling require the worker to wait now;
 * *rate_out: the ceiling that sets it. */
int64_t bf__throttle_pass(bf_throttle *t, const char *id, double def_rate, long keys,
                          int64_t started_us, double *rate_out);
/* Count the sessions blocked by this session's locks (one bigint). */
extern const char bf__throttle_blocked_sql[];

/* The adaptive batch size (throttle.c, docs/throttling.md): a worker's last steps as keys per
 * batch and microseconds per batch, and the batch time they fit, fixed_us + per_key_us * keys
 * (fitted once two sizes far enough apart were seen). Caller storage; one per held claim. */
#define BF_SIZE_WINDOW 8
typedef struct bf_size_model {
    double keys[BF_SIZE_WINDOW];
    double us[BF_SIZE_WINDOW];
    int n;          /* observations held */
    int next;       /* where the next one goes */
    double last_us; /* the newest observation's time per batch */
    bool fitted;
    double fixed_us, per_key_us;
} bf_size_model;

void bf__size_model_init(bf_size_model *m);
/* A step that ran batches batches passing keys keys in elapsed_us (nothing when any is 0). */
void bf__size_observe(bf_size_model *m, long batches, long keys, int64_t elapsed_us);
/* size within [min, max] of cfg (batch_min, default declared / 100, at least 1; batch_max, never
 * above declared, the definition's batch_size). */
int bf__size_clamp(const bf_throttle_config *cfg, int declared, int size);
/* The next size after the step m observed last: toward batch_target_ms by the fitted time, but
 * never below the size whose per-key part is 4 times the fixed part (at least 0.8 of any fixed
 * size's keys per second), by at most a factor 2 per step, clamped; without a target, twice size
 * up to max (a size halved for lock waiters grows back); with nothing observed, size clamped.
 * Pure. */
int bf__size_next(const bf_throttle_config *cfg, int declared, int size, const bf_size_model *m);

/* Collapse detection (throttle.c, docs/throttling.md "slow batches"): the time per batch and
 * the keys per second (NaN when the step's batches were mostly not full) of a claim's recent
 * steps that were not slow. Caller storage, zeroed to start. */
#define BF_SLOW_WINDOW 16
typedef struct bf_slow_model {
    double batch_us[BF_SLOW_WINDOW];
    double rate[BF_SLOW_WINDOW];
    int n, next;
} bf_slow_model;

/* Judge a step that ran batches batches of (at most) size keys, passing keys keys in
 * elapsed_us: "batch_time" when its time per batch is 10 times the window's median and at least
 * 250 ms, "throughput" when its batches were mostly full and its keys per second a tenth of the
 * median, with value (cap bytes) saying so ("batch 3.2 s, median 40 ms"); NULL (value "")
 * otherwise, and the step joins the window. Nothing is judged before 5 steps. */
const char *bf__slow_judge(bf_slow_model *m, long batches, long keys, int size, int64_t elapsed_us,
                           char *value, size_t cap);

/* ---- the preflight (preflight.c) ------------------------------------------------------- */

/* bf_preflight() for c, capturing the bound the batches would run to on the way (bound:
 * BF_KEY_TEXT_MAX bytes; "" and *empty when the source set is empty). Start runs it in its
 * transaction and keeps the bound. */
bf_err bf__preflight(bf_engine *e, const bf_compiled *c, char *bound, bool *empty, char *report,
                     size_t cap);

/* ---- SQLSTATE classification (classify.c) ---------------------------------------------- */

typedef struct bf_sqlstate_class {
    bf_err err;        /* BF_ERR_RETRYABLE, BF_ERR_PREREQUISITE, ... */
    const char *label; /* short client-safe description, "lock timeout" */
} bf_sqlstate_class;

bf_sqlstate_class bf__classify_sqlstate(const char *sqlstate);
/* PostgreSQL's condition name of a SQLSTATE ("undefined_column" for 42703) for the conditions a
 * definition can cause; NULL for the others. */
const char *bf__condition_name(const char *sqlstate);
/* The error_class vocabulary stored in the backfill row for an execution error. */
const char *bf__error_class_name(bf_err err);

/* ---- read model (backfill.c) ----------------------------------------------------------- */

/* The column list bf__row_from_result() expects, for "SELECT " BF_BACKFILL_COLUMNS " FROM "
 * BF_BACKFILL_FROM, read with binary results (bf__send_stmt asks for them for BF_STMT_GET and
 * BF_STMT_GET_FOR_UPDATE, List reads through bf__exec_binary): timestamps arrive as PostgreSQL's
 * microseconds and become microseconds since the Unix epoch in bf__field_i64, NULL stays NULL
 * (unknown). The columns are the stored ones, computed nothing: what depends on the time (a claim
 * still live, the throttle fields a live claim holder reports, a validation still running) is
 * decided in C against the row's clock_timestamp(). Every expression in a target list is built
 * afresh at each execution, even of a prepared statement: the 14 epoch conversions and 7 clock
 * comparisons this replaced were most of what a Get cost PostgreSQL beyond reading the row
 * (docs/engine.md "Reading a backfill").
 * A literal, so that every statement using it is one too. */
#define BF_BACKFILL_COLUMNS                                                                        \
    "b.id, b.state, b.required, b.description, b.owner_meta, b.revision, b.key_types,"             \
    " b.batch_size, array_to_string(b.bound, ', '), b.bound_empty,"                                \
    " array_to_string(b.checkpoint, ', '), b.generation, b.claim_owner, b.claim_expires_at,"       \
    " b.attempts, b.next_attempt_at, b.error_class, b.error_detail, b.validation_outcome,"         \
    " b.validation_detail, b.validated_at, b.validation_request, b.rows_committed,"                \
    " b.rows_covered, b.batches_committed, b.source_estimate, b.batch_size_current,"               \
    " b.throttle_signal, b.throttle_value, b.throttled_since, b.slow_value, b.slow_since,"         \
    " b.registered_at, b.updated_at, b.started_at, b.last_progress_at, b.completed_at,"            \
    " v.owner, v.lifecycle, v.expires_at, v.started_at, v.updated_at, v.finished_at,"              \
    " v.rows_checked, v.rows_needing_repair, clock_timestamp(), b.watched"
/* The relations BF_BACKFILL_COLUMNS reads: the row (b) and its validation progress (v). A
 * locking read names b ("FOR UPDATE OF b"): v is the nullable side of the join. The old-writer
 * watch (its watch row and the counts under it) is read by BF_WATCH_SQL, only for the rows
 * whose b.watched says they have a watch row (schema version 11, set by the statement that
 * records one, never cleared). Every relation a statement names is locked and opened at each
 * execution even when no row of it is read, and watching is opt-in: joined in, the watch
 * (and before it the old-writer aggregates) cost every read, watched or not (issue 26). */
#define BF_BACKFILL_FROM                                                                           \
    "buzz_backfill.backfill b LEFT JOIN buzz_backfill.validation_progress v"                       \
    " ON v.backfill_id = b.id"
/* The watch of the backfills in $1 (a text[] of IDs) that have a watch row: the backfill ID,
 * whether its trigger is installed (not removed), its mode, then the old-writer columns
 * bf__old_writer_counts_from_result() reads, NULL when nothing was counted: the totals (rows,
 * healed, writers, first and last seen) and the writer with the most rows (application,
 * address, role, rows, first and last seen). */
#define BF_WATCH_SQL                                                                               \
    "SELECT w.backfill_id, w.removed_at IS NULL, w.mode, ow.rows, ow.healed, ow.writers,"          \
    " (extract(epoch FROM ow.first_seen) * 1000000)::bigint,"                                      \
    " (extract(epoch FROM ow.last_seen) * 1000000)::bigint,"                                       \
    " ot.application_name, ot.client_addr, ot.role_name, ot.rows,"                                 \
    " (extract(epoch FROM ot.first_seen) * 1000000)::bigint,"                                      \
    " (extract(epoch FROM ot.last_seen) * 1000000)::bigint"                                        \
    " FROM buzz_backfill.watch w"                                                                  \
    " LEFT JOIN (SELECT o.backfill_id, sum(o.rows)::bigint AS rows,"                               \
    "  sum(o.healed)::bigint AS healed,"                                                           \
    "  count(DISTINCT (o.application_name, o.client_addr, o.role_name)) AS writers,"               \
    "  min(o.first_seen) AS first_seen, max(o.last_seen) AS last_seen"                             \
    "  FROM buzz_backfill.old_writer o WHERE o.backfill_id = ANY ($1::text[])"                     \
    "  GROUP BY o.backfill_id) ow ON ow.backfill_id = w.backfill_id"                               \
    " LEFT JOIN LATERAL (SELECT o.application_name, o.client_addr, o.role_name,"                   \
    "  sum(o.rows)::bigint AS rows, min(o.first_seen) AS first_seen,"                              \
    "  max(o.last_seen) AS last_seen FROM buzz_backfill.old_writer o"                              \
    "  WHERE o.backfill_id = w.backfill_id"                                                        \
    "  GROUP BY 1, 2, 3 ORDER BY 4 DESC, 5 LIMIT 1) ot ON true"                                    \
    " WHERE w.backfill_id = ANY ($1::text[])"
/* Decode one row of a result whose columns are BF_BACKFILL_COLUMNS; true when the backfill
 * has a watch row (b.watched), so a watch to read (bf__watch_read()). */
bool bf__row_from_result(const PGresult *r, int row, bf_backfill *out);
/* Read the watch and old-writer counts of the rows of out[0..n) whose watched[i] is set (one
 * statement, none when no row is watched). */
bf_err bf__watch_read(bf_engine *e, bf_backfill *out, const bool *watched, int n);
/* watch_report.c: decode the count columns of BF_WATCH_SQL, the first at col (the
 * totals, then the top writer), into out; watching and mode are left as they are. */
void bf__old_writer_counts_from_result(const PGresult *r, int row, int col, bf_old_writers *out);
/* Decode gate rows (id at column col, state at col + 1) from row first on; returns how many
 * rows there are, writing at most max. */
int bf__gate_rows(const PGresult *r, int first, int col, bf_gate_entry *ids, int max);
/* BF_OK when a unique index covers the definition's key and its columns are NOT NULL,
 * BF_ERR_DEFINITION otherwise, BF_ERR_PREREQUISITE when the source table is missing. */
bf_err bf__key_unique(bf_engine *e, const bf_compiled *c);
/* Read one row, optionally FOR UPDATE, inside the caller's transaction. */
bf_err bf__get_row(bf_engine *e, const char *id, bool for_update, bf_backfill *out);
/* bf__get_row FOR UPDATE, with the stored definition digest (BF_DIGEST_HEX bytes; "" for a row
 * registered before digests were kept). */
bf_err bf__lock_row(bf_engine *e, const char *id, bf_backfill *out, char *digest);

/* ---- audit (audit.c) ------------------------------------------------------------------- */

typedef struct bf_audit_record {
    const char *backfill_id;
    const char *action;
    const bf_actor *who;
    bf_state prior;  /* 0 = none */
    bf_state result; /* 0 = none */
    bool has_generation;
    int64_t generation;
    const char *outcome;
} bf_audit_record;

/* Insert one audit row in the caller's transaction. */
bf_err bf__audit(bf_engine *e, const bf_audit_record *rec);
/* What the audit stores of a text: valid UTF-8 (an invalid sequence becomes '?'), control,
 * separator and bidirectional-control characters replaced by '?', at most cap - 1 bytes cut on
 * a character boundary with a "..." marker. src NULL reads as "". */
void bf__audit_text(char *dst, size_t cap, const char *src);

/* ---- idempotent requests (request.c) --------------------------------------------------- */

typedef enum bf_request_status {
    BF_REQUEST_NONE,        /* no request ID: not idempotent */
    BF_REQUEST_NEW,         /* recorded now, in the caller's transaction */
    BF_REQUEST_REPLAY,      /* finished earlier: out holds the original outcome */
    BF_REQUEST_MISMATCH,    /* the ID belongs to a different request */
    BF_REQUEST_IN_PROGRESS, /* recorded, no outcome yet (a validation still running or lost) */
} bf_request_status;

bf_err bf__request_begin(bf_engine *e, const char *action, const char *id, const bf_actor *who,
                         bf_action_result *out, bf_request_status *status);
bf_err bf__request_finish(bf_engine *e, const bf_actor *who, const bf_action_result *res);

/* ---- validation (validate.c) ----------------------------------------------------------- */

typedef struct bf_validation_run {
    bf_validation_outcome outcome;
    bf_err verdict; /* BF_OK, BF_ERR_VALIDATION_FAILED, BF_ERR_PREREQUISITE, or a run error */
    long long bad;  /* declarative: rows found still needing repair */
    long checked;   /* keys the finished chunks read */
    char detail[BF_DIAG_MAX];
} bf_validation_run;

/* Called between chunks; return non-BF_OK to abandon the run (e.g. claim lost). */
typedef bf_err (*bf_chunk_gate_fn)(void *arg);

/*
 * Run the definition's read-only validation from the first key through the bound, one READ
 * ONLY transaction per chunk. Returns BF_OK when the run reached a verdict (in run->verdict);
 * an error when it could not run (connection, timeout, abandoned). Records its progress in
 * buzz_backfill.validation_progress as it goes (lifecycle: a worker's validation of a
 * validating row, else an explicit one), finished when it returns.
 */
bf_err bf__validation_run(bf_engine *e, const bf_compiled *c, bool lifecycle, const char *bound,
                          bool bound_empty, bf_chunk_gate_fn gate, void *gate_arg,
                          bf_validation_run *run);

/* Advisory lock serialising validation per stable ID (session level). */
bf_err bf__validation_lock(bf_engine *e, const char *id, bool *acquired);
void bf__validation_unlock(bf_engine *e, const char *id);

/* ---- callback transactions (txn.c) ----------------------------------------------------- */

struct bf_txn {
    bf_engine *engine;
    long limit;   /* row budget; LONG_MAX for validation */
    long touched; /* rows counted so far */
    long batch_rows;
    bf_err first_err; /* first database or bound error; later statements do not run */
    bool diag_set;
    char diag[BF_DIAG_MAX];
};

void bf__txn_init(bf_txn *txn, bf_engine *e, long limit, long batch_rows);
bf_err bf__txn_verdict(bf_txn *txn, bf_err callback_verdict, char *detail, size_t cap);

/* ---- the old-writer watchdog (watch.c) ------------------------------------------------- */

/* The mode in force for d: its own watch_writers, else the daemon-wide one. */
bf_watch_mode bf__watch_mode(const bf_engine *e, const bf_definition *d);
/* Install c's watch trigger in the caller's transaction (start), when its mode is on or heal.
 * BF_ERR_DEFINITION (diag says why) when the definition asks for a mode it cannot serve: no
 * postcondition to watch, or heal of a definition heal cannot serve. A daemon-wide mode skips
 * such a definition (logged). */
bf_err bf__watch_install(bf_engine *e, const bf_compiled *c);
/* Remove id's trigger and functions in a transaction of its own (no-op without one). *removed:
 * one was installed. */
bf_err bf__watch_remove(bf_engine *e, const char *id, bool *removed);
/* What the watch of id saw: writers not yet reported are logged (watch.old_writer) and audited
 * once each; *rows_out: every violating row counted; *unanswered_out: rows newer than the last
 * block on old writers; diag: "old writer: 37 rows since ... from application relay-1.3 at
 * 10.0.0.7 ..." with what to do (bounded, redacted), "" when none. */
bf_err bf__watch_report(bf_engine *e, const char *id, int64_t *rows_out, bool *unanswered_out,
                        char *diag, size_t cap);
/* A block answered the rows counted so far: only newer ones block again. */
bf_err bf__watch_answered(bf_engine *e, const char *id);

#endif /* BUZZ_ENGINE_INTERNAL_H */
