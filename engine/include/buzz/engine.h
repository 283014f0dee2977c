/*
 * buzz/engine.h - the durable backfill engine: schema, registration, lifecycle, claims, workers,
 * validation. PostgreSQL is the only authority; nothing here keeps lifecycle state in memory
 * beyond one call.
 *
 * Threading: a bf_engine is one PostgreSQL connection and must be used by one thread at a time.
 * Open one per thread (the registry may be shared). bf_worker_stop() is the one call that is
 * safe from another thread or a signal handler.
 *
 * Errors: every call returns a bf_err; out-parameters are written only on BF_OK unless a call
 * documents otherwise (conflicts return the current row). bf_engine_diag() gives the last
 * bounded, client-safe diagnostic; full detail (server messages, SQLSTATEs) goes to the log
 * callback only.
 */
#ifndef BUZZ_ENGINE_H
#define BUZZ_ENGINE_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buzz/definition.h"
#include "buzz/err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BF_SCHEMA_VERSION 11  /* newest engine migration this binary knows */
#define BF_KEY_TEXT_MAX   512 /* bytes of a bound or checkpoint as text[], terminator included */
#define BF_OWNER_MAX      128 /* bytes of a claim owner, terminator included */
#define BF_ACTOR_MAX      128 /* bytes of an actor or authority, terminator included */
#define BF_REQUEST_ID_MAX 64  /* bytes of a request ID, terminator included */

typedef enum bf_log_level { BF_LOG_DEBUG, BF_LOG_INFO, BF_LOG_WARN, BF_LOG_ERROR } bf_log_level;

/*
 * Stable event codes: the "event" of a JSON log line and what the service's metrics count. A
 * code is never renamed or reused; new ones are appended. The engine reports every event to the
 * log callback whatever the configured level (the callback filters what it prints), so counts
 * taken there are complete, and exactly once per occurrence:
 * - batch.committed: one record per worker step that committed batches (DEBUG), with the
 *   batches, rows (keys passed) and touched (rows changed) that step added to the row's
 *   batches_committed, rows_covered and rows_committed; a step that failed after some of its
 *   batches committed reports those too (read back from the row), so the sums reconcile with
 *   PostgreSQL. duration_us: the step.
 * - batch.rolled_back: the batch in flight of a failed step rolled back (reason: "stop",
 *   "fence", or the SQLSTATE class); duration_us: the failed step. What follows it is told by
 *   attempt.retry, backfill.blocked, backfill.failed or batch.fenced_out.
 * - claim.renewed: every successful renewal (DEBUG). claim.lost: a renewal found the claim gone.
 * - validation.passed / validation.failed: a recorded validation pass, a worker's (passed: the
 *   backfill completed) or an explicit one; duration_us: the pass.
 * - action.applied / action.rejected: reason is the action ("start", "pause", "resume",
 *   "retry"), the message says why a request was rejected.
 * - throttle.start / throttle.end: a worker began / stopped waiting on a health signal or a
 *   rows-per-second ceiling; reason is the signal ("replica_lag", "lock_waiters", "xact_age",
 *   "xid_age", "custom", "rate"); throttle.end's duration_us is the time it spent throttled.
 * - slow.start / slow.end: a worker's step was (slow.start) or is no longer (slow.end) much
 *   slower than the backfill's recent median under this claim: its time per batch 10 times the
 *   median ("batch_time"), or its keys per second a tenth of it ("throughput"), as reason;
 *   slow.start's message has both values, slow.end's duration_us is how long it was slow.
 * Server events (appended after the engine's) are the daemon's own.
 */
#define BF_EVENT_LIST(X)                                                                           \
    X(NONE, "log")                      /* a plain message */                                      \
    X(CLAIM_ACQUIRED, "claim.acquired") /* an unclaimed (or released) row */                       \
    X(CLAIM_TAKEOVER, "claim.takeover") /* an expired owner's claim taken over */                  \
    X(CLAIM_RENEWED, "claim.renewed")                                                              \
    X(CLAIM_LOST, "claim.lost") /* renew or fence found it gone */                                 \
    X(CLAIM_RELEASED, "claim.released")                                                            \
    X(BATCH_COMMITTED, "batch.committed")     /* batches of one step: batches, rows... */          \
    X(BATCH_FENCED_OUT, "batch.fenced_out")   /* stale owner rejected; nothing committed */        \
    X(BATCH_ROLLED_BACK, "batch.rolled_back") /* reason: error class or "stop" */                  \
    X(ATTEMPT_RETRY, "attempt.retry")         /* retryable error, backoff scheduled */             \
    X(BACKFILL_BLOCKED, "backfill.blocked")                                                        \
    X(BACKFILL_FAILED, "backfill.failed")         /* retries exhausted or validation failed */     \
    X(BACKFILL_VALIDATING, "backfill.validating") /* the checkpoint reached the bound */           \
    X(VALIDATION_PASSED, "validation.passed")     /* a recorded pass succeeded */                  \
    X(VALIDATION_FAILED, "validation.failed")                                                      \
    X(ACTION_APPLIED, "action.applied") /* an operator action changed a row */                     \
    X(ACTION_REJECTED, "action.rejected")                                                          \
    X(DB_CONNECTION_LOST, "db.connection_lost")                                                    \
    X(DB_CONNECTION_RESTORED, "db.connection_restored")                                            \
    X(DB_NOTICE, "db.notice")                                                                      \
    X(SCHEMA_MIGRATED, "schema.migrated")                                                          \
    X(SERVER_LISTENING, "server.listening")     /* one per listener URL, at start */               \
    X(SERVER_STARTED, "server.started")         /* the admin API is served */                      \
    X(STARTUP_COMPLETE, "startup.complete")     /* the startup sequence reached the workers */     \
    X(SERVER_STOPPING, "server.stopping")       /* a signal or a fatal error: shutting down */     \
    X(SERVER_STOPPED, "server.stopped")         /* clean stop */                                   \
    X(AUTH_RELOAD, "auth.reload")               /* SIGHUP: keys and revocations reloaded */        \
    X(AUTH_RELOAD_FAILED, "auth.reload_failed") /* the previous keys stay in force */              \
    X(AUTH_ERROR, "auth.error")                 /* authentication could not run (memory...) */     \
    X(AUDIT_FAILED, "audit.failed")             /* a rejected request could not be audited */      \
    X(CONN_REFUSED, "conn.refused")             /* connection caps (rate-limited lines) */         \
    X(CONN_DROPPED, "conn.dropped")             /* a connection closed by the transport */         \
    X(WORKER_RESTART, "worker.restart")         /* a worker loop ended with an error */            \
    X(DB_UNAVAILABLE, "db.unavailable")         /* startup cannot reach the database yet */        \
    X(THROTTLE_START, "throttle.start")         /* a worker waits: reason is the signal */         \
    X(THROTTLE_END, "throttle.end")             /* it resumed; duration_us: how long it waited */  \
    X(CONFIG_RELOAD, "config.reload")           /* SIGHUP: throttle settings reloaded */           \
    X(CONFIG_RELOAD_FAILED, "config.reload_failed") /* refused: the previous settings stay */      \
    X(SLOW_START, "slow.start") /* a step far slower than the recent median: reason says how */    \
    X(SLOW_END, "slow.end")     /* steps at the median's pace again; duration_us: how long */      \
    X(LISTENER_RESTARTED, "listener.restarted") /* a wedged listener was listened on again */      \
    X(DEFINITION_JOINED, "definition.joined")   /* SIGHUP: a new definition file registered */     \
    X(OLD_WRITER, "watch.old_writer") /* once per writer the watchdog attributed rows to */

typedef enum bf_event {
#define BF_EVENT_ENUM(name, code) BF_EV_##name,
    BF_EVENT_LIST(BF_EVENT_ENUM)
#undef BF_EVENT_ENUM
        BF_EV_COUNT
} bf_event;

/* The stable code of an event ("claim.takeover"); "log" for an unknown value. */
const char *bf_event_code(bf_event event);

/*
 * One log record. Fields that do not apply are NULL or -1. Text fields are bounded and
 * redacted like every diagnostic (no row values, query text, DSNs or tokens); reason is from a
 * bounded vocabulary (a SQLSTATE class such as "40", "stop", "fence", "timeout"), never free
 * text, so it may label a metric. Valid only during the callback.
 */
typedef struct bf_log_record {
    bf_log_level level;
    bf_event event;
    const char *msg;        /* human-readable, one line */
    const char *id;         /* stable ID */
    int64_t generation;     /* claim generation */
    const char *checkpoint; /* checkpoint as text after the event */
    long batch_size;        /* configured batch size of the definition */
    long batches;           /* batches committed by the step (BATCH_COMMITTED) */
    long rows;              /* keys they passed */
    long touched;           /* rows their mutations changed */
    int64_t duration_us;    /* the step, batch or validation pass the event ends */
    const char *reason;     /* bounded vocabulary, see above */
} bf_log_record;

/* The record with every optional field absent. */
#define BF_LOG_RECORD_INIT                                                                         \
    {                                                                                              \
        .level = BF_LOG_INFO, .event = BF_EV_NONE, .msg = "", .id = NULL, .generation = -1,        \
        .checkpoint = NULL, .batch_size = -1, .batches = -1, .rows = -1, .touched = -1,            \
        .duration_us = -1, .reason = NULL                                                          \
    }

/* Called for every record at every level; the callee filters. Thread-safe callees only: every
 * engine of a process may call it at once. */
typedef void (*bf_log_fn)(void *arg, const bf_log_record *rec);

typedef struct bf_config {
    const char *conninfo;     /* libpq connection string or URL */
    const char *owner;        /* claim owner identity, e.g. "host:pid:worker"; default host:pid */
    int lease_ms;             /* claim validity; default 30000, at least 100 */
    int statement_timeout_ms; /* per batch/validation statement; default 10000 (a step's CALL
                                 of the batch loop gets step_ms more) */
    int lock_timeout_ms;      /* lock_timeout of batches and validation; default 2000 */
    int step_ms;              /* a worker step starts no batch after this; default 200 */
    int step_batches;         /* batches one worker step may commit; default 1000 */
    bf_log_fn log;            /* optional */
    void *log_arg;
    struct bf_throttle *throttle; /* optional: health throttling and adaptive batch size, shared
                                     by the engines of a process (NULL: fixed batch size, no
                                     signals, no ceiling); must outlive the engine */
    /* the old-writer watchdog (docs/definitions.md "Old writers"): the mode of definitions that
     * leave watch_writers at BF_WATCH_DEFAULT (0: off; BF_WATCH_HEAL is per definition only),
     * and whether a running backfill whose watch saw an old writer enters blocked */
    bf_watch_mode watch_writers;
    bool watch_block;
    int watch_grace_s; /* 0: a completion removes its watch at once; else bf_watch_sweep() does,
                          this many seconds after it */
    /* optional: on_block(on_block_arg) is called on the engine's thread each time it is about
     * to wait on PostgreSQL (a connect, the first one included, a prepare, a statement's result,
     * a notification). A server that lets only as many threads wait for requests as it has
     * CPUs uses it to let another thread take a blocked one's place. */
    void (*on_block)(void *arg);
    void *on_block_arg;
} bf_config;

/*
 * Check that the lease outlasts what a claim holder may spend without renewing it: one step's
 * CALL (step_ms + statement_timeout_ms) and one lock wait (lock_timeout_ms); zero fields count
 * as their defaults. BF_OK, or BF_ERR_INVALID_ARGUMENT with a short reason in diag. A shorter
 * lease lets a working owner be taken over (and its attempt counted). bf_engine_open() does not
 * call it (tests use short leases on purpose); a service should, before it runs workers.
 */
bf_err bf_config_check(const bf_config *cfg, char *diag, size_t diag_len);

typedef struct bf_engine bf_engine;

/* reg must outlive the engine. It may grow (bf_registry_add from one other thread) while the
 * engine is open: each call sees the definitions added before it started. */
bf_err bf_engine_open(bf_engine **out, const bf_config *cfg, const bf_registry *reg);
void bf_engine_close(bf_engine *engine);
const char *bf_engine_diag(const bf_engine *engine);
const bf_registry *bf_engine_registry(const bf_engine *engine);

/* ---- schema ---------------------------------------------------------------------------- */

/* Apply the engine's versioned migrations under an advisory lock. Idempotent; verifies the
 * checksum of every applied version; BF_ERR_SCHEMA_TOO_NEW for an unknown newer version. */
bf_err bf_migrate(bf_engine *engine);

/* Verify without changing anything: BF_ERR_SCHEMA_MISSING when not fully migrated. */
bf_err bf_schema_check(bf_engine *engine, int *version_out);

/* ---- read model ------------------------------------------------------------------------ */

typedef enum bf_state {
    BF_STATE_PENDING = 1,
    BF_STATE_RUNNING = 2,
    BF_STATE_PAUSED = 3,
    BF_STATE_BLOCKED = 4,
    BF_STATE_FAILED = 5,
    BF_STATE_VALIDATING = 6,
    BF_STATE_COMPLETED = 7,
} bf_state;

const char *bf_state_name(bf_state state); /* "running"; "unknown" for an invalid value */
bf_err bf_state_parse(const char *name, bf_state *out);

typedef enum bf_validation_outcome {
    BF_VALIDATION_NONE = 0, /* never validated */
    BF_VALIDATION_SUCCESS = 1,
    BF_VALIDATION_FAILURE = 2,
    BF_VALIDATION_CURRENT_STATE = 3, /* did not run; see the lifecycle and reason */
} bf_validation_outcome;

const char *bf_validation_outcome_name(bf_validation_outcome outcome);

/* A snapshot of one backfill row. Timestamps are microseconds since the Unix epoch; a has_
 * flag false means unknown or not applicable, never zero. */
/*
 * The progress of a validation of one backfill (schema version 9), as its validator last
 * recorded it between two chunks: written at the start, after the first chunk, then at most
 * about once a second, and marked finished when the run ends (whatever its outcome). present:
 * a validation of the row ran since version 9. running: not finished and still within the
 * allowance its validator gave itself (its lease plus its statement timeout past its last
 * write); a validator that crashed or stopped leaves an entry that is neither running nor
 * finished, with its last figures. The rows in the bound are estimated by source_estimate.
 */
typedef struct bf_validation_progress {
    bool present;
    bool running;
    bool finished;
    bool lifecycle;           /* a worker's validation of a validating row; else explicit */
    char owner[BF_OWNER_MAX]; /* the validator's engine owner (bf_config.owner) */
    int64_t started_at;       /* microseconds since the Unix epoch, PostgreSQL time */
    int64_t updated_at;       /* its last write */
    bool has_finished_at;
    int64_t finished_at;
    int64_t rows_checked; /* keys the finished chunks read through the bound */
    /* rows those chunks found still needing repair (declarative form; a definition's own
     * validate callback stops at its first failing chunk and counts nothing: 0) */
    int64_t rows_needing_repair;
} bf_validation_progress;

/*
 * The old-writer watchdog of one backfill (docs/definitions.md "Old writers"): whether its
 * trigger is installed, and what it counted: rows written since start that break the
 * postcondition, over every writer, and the writer with the most of them. Writers are named by
 * application_name, client address ("local" over a unix socket) and role; never by row value.
 */
#define BF_WRITER_TEXT_MAX 64
typedef struct bf_old_writers {
    bool watching;                 /* the trigger is installed */
    char mode[8];                  /* "on", "heal"; "" when not watching */
    int64_t rows;                  /* violating rows counted, every writer */
    int64_t healed;                /* of those, repaired on write (heal) */
    int64_t writers;               /* distinct writers (at most 32, then "(other writers)") */
    int64_t first_seen, last_seen; /* microseconds since the epoch; 0 when rows == 0 */
    /* the writer with the most rows */
    char application[BF_WRITER_TEXT_MAX];
    char address[BF_WRITER_TEXT_MAX];
    char role[BF_WRITER_TEXT_MAX];
    int64_t top_rows;
    int64_t top_first_seen, top_last_seen;
} bf_old_writers;

typedef struct bf_backfill {
    char id[BF_ID_MAX + 1];
    bf_state state;
    bool required;
    char description[BF_META_MAX + 1];
    char owner_meta[BF_META_MAX + 1];
    char revision[BF_META_MAX + 1];
    char key_types[96]; /* "timestamptz,bytea" */
    int batch_size;

    bool has_bound;   /* bound captured (start happened) */
    bool bound_empty; /* captured bound of an empty source set */
    char bound[BF_KEY_TEXT_MAX];
    bool has_checkpoint;
    char checkpoint[BF_KEY_TEXT_MAX];

    int64_t generation;
    bool claimed; /* a claim exists and PostgreSQL time says it is still valid */
    char claim_owner[BF_OWNER_MAX];
    bool has_claim_expires;
    int64_t claim_expires_at;

    int attempts;
    bool has_next_attempt;
    int64_t next_attempt_at;
    char error_class[32]; /* "" when none: retryable, prerequisite, data_invariant, ... */
    char error_detail[BF_DIAG_MAX];

    bf_validation_outcome validation;
    char validation_detail[BF_DIAG_MAX];
    bool has_validated_at;
    int64_t validated_at;
    char validation_request[BF_REQUEST_ID_MAX];

    int64_t rows_committed;    /* rows the committed batches changed */
    bool has_rows_covered;     /* false for progress made before schema version 3 */
    int64_t rows_covered;      /* keys the committed batches passed (compare source_estimate) */
    int64_t batches_committed; /* committed batches */
    bool has_source_estimate;  /* planner estimate of the source size at start: an estimate */
    int64_t source_estimate;

    /* throttling (docs/throttling.md): the batch size the last worker used, and while it was
     * throttled the signal ("replica_lag", "lock_waiters", "xact_age", "xid_age", "custom",
     * "rate"), its value as text and since when; throttle_signal "" when not throttled */
    bool has_batch_size_current;
    int batch_size_current;
    char throttle_signal[24];
    char throttle_value[64];
    bool has_throttled_since;
    int64_t throttled_since;
    /* collapse (docs/throttling.md "slow batches"): while a live claim holder's last step was
     * much slower than the backfill's own recent median, what it saw ("batch 3.2 s, median
     * 40 ms", "310 keys/s, median 9800 keys/s") and since when; slow_value "" when not slow */
    char slow_value[64];
    bool has_slow_since;
    int64_t slow_since;
    /* the latest validation's progress, running or not (see bf_validation_progress) */
    bf_validation_progress validation_progress;

    int64_t registered_at, updated_at;
    bool has_started_at, has_last_progress_at, has_completed_at;
    int64_t started_at, last_progress_at, completed_at;
    int64_t now;                /* PostgreSQL clock_timestamp() when read */
    bf_old_writers old_writers; /* the watchdog (docs/definitions.md "Old writers") */
} bf_backfill;

bf_err bf_get(bf_engine *engine, const char *id, bf_backfill *out);

/* List rows ordered by id, starting after after_id (NULL = first), at most limit (<=
 * BF_LIST_MAX). state_filter 0 = all. *count_out receives the number written. */
#define BF_LIST_MAX 1000
bf_err bf_list(bf_engine *engine, bf_state state_filter, const char *after_id, bf_backfill *out,
               int limit, int *count_out);

/* ---- registration ---------------------------------------------------------------------- */

/* Idempotent upsert of one definition (the registry's) by stable ID. Metadata: last
 * registration wins. BF_ERR_INCOMPATIBLE (row untouched) when the stored key types differ. */
bf_err bf_register(bf_engine *engine, const bf_definition *def);

/* bf_register() for every definition in the engine's registry; stops at the first error. */
bf_err bf_register_all(bf_engine *engine);

/* bf_register() of n definitions of the engine's registry in a few statements (up to 1,000
 * definitions each) rather than one round trip each: the same upsert and the same fences, per
 * definition. On BF_OK errs[i] is BF_OK (written) or BF_ERR_INCOMPATIBLE (row untouched;
 * bf_register() of that definition says why). Any other error leaves errs unspecified; the
 * call may be repeated (it is idempotent). */
bf_err bf_register_many(bf_engine *engine, const bf_definition *const *defs, size_t n,
                        bf_err *errs);

/* ---- the preflight ---------------------------------------------------------------------- */

/* A table of at most this many rows (by the planner's estimate) needs no index on the key: a
 * scan of it is itself bounded work. */
#define BF_PREFLIGHT_SMALL_ROWS 10000

/* Can id's batches only be bounded work on this database (docs/definitions.md "The
 * preflight")? Checks, in order: the table and every key column exist, each with exactly the
 * declared type; the key is unique and NOT NULL; a valid, non-partial btree index leads with
 * the key's columns in order; and PostgreSQL plans the batch statements (the keyset, and for a
 * declarative definition its mutation and validation chunk) with real keys, at the first key
 * and at the leading column's median, as scans of that index rather than of the table. A small
 * table (BF_PREFLIGHT_SMALL_ROWS) passes the last two with a note. A row already registered
 * under id by a materially different definition (another table, key or SQL) is
 * BF_ERR_INCOMPATIBLE: a changed definition needs a new stable ID. Nothing is written and no
 * statement is executed (EXPLAIN without ANALYZE); Start runs the same checks with the bound it
 * captures and refuses to start on any failure. BF_OK with a one-line summary of the index and
 * plans in report; else BF_ERR_DEFINITION (the definition does not fit the table: a missing
 * column, another type), BF_ERR_PREREQUISITE (the table lacks what bounded batches need: the
 * table, an index, a plan), or the classified database error of a statement that does not
 * plan (a misspelled column in update_set), with what is wrong and the fix in report (also
 * bf_engine_diag). The report names identifiers and plan node types, never row values. */
bf_err bf_preflight(bf_engine *engine, const char *id, char *report, size_t cap);

/* ---- operator actions ------------------------------------------------------------------ */

typedef enum bf_action {
    BF_ACTION_START = 1,
    BF_ACTION_PAUSE = 2,
    BF_ACTION_RESUME = 3,
    BF_ACTION_RETRY = 4,
    BF_ACTION_VALIDATE = 5,
} bf_action;

const char *bf_action_name(bf_action action);

/* Who asks. actor may be NULL when only an authority source is known (e.g. a protected
 * boundary: "ipc uid=1000"); authority names how the request was authorized. request_id
 * (optional, at most BF_REQUEST_ID_MAX-1 bytes) makes the request idempotent. */
typedef struct bf_actor {
    const char *actor;
    const char *authority;
    const char *request_id;
} bf_actor;

typedef struct bf_action_result {
    bf_err err;      /* outcome of the original request (BF_OK, CONFLICT, ...) */
    bool changed;    /* the request changed the lifecycle */
    bool replayed;   /* an earlier request with the same request_id answered */
    bf_state prior;  /* 0 when the backfill does not exist */
    bf_state result; /* state after the request */
    int64_t generation;
    bf_validation_outcome validation; /* BF_ACTION_VALIDATE only */
    char detail[BF_DIAG_MAX];
    bf_backfill row; /* current row after the request (valid when prior != 0) */
} bf_action_result;

/*
 * Apply start, pause, resume or retry exactly as the spec's state table. The transition, its
 * audit row and its request record commit in one transaction; rejected attempts are audited
 * too. Returns the outcome (also in out->err): BF_OK when the row is in the requested state
 * (changed or already there), BF_ERR_CONFLICT with the current row, BF_ERR_NOT_FOUND,
 * BF_ERR_INVALID_ARGUMENT when request_id was used for a different request. Repeating a
 * request_id returns the original outcome with replayed set. out is always written.
 */
bf_err bf_action_apply(bf_engine *engine, bf_action action, const char *id, const bf_actor *who,
                       bf_action_result *out);

/*
 * Explicit validation. pending answers current-state without running; otherwise runs the
 * definition's read-only validation through the bound, at most one invocation per ID at a time
 * (a concurrent request gets current-state, "validation already in progress"). On success of a
 * validating row it drives the fenced completion; in every other state it changes nothing but
 * the recorded outcome. Audited. out is always written; returns its err.
 */
bf_err bf_validate(bf_engine *engine, const char *id, const bf_actor *who, bf_action_result *out);

/* Record a rejected attempt that never reached the lifecycle (authentication, authorization,
 * malformed input) in the audit. outcome is redacted by the caller. Every text (id, actor,
 * authority, request ID, outcome) may be anything the request carried: it is stored as valid
 * UTF-8 without control or bidirectional-control characters ('?' instead), bounded to its
 * column, so a hostile ID is audited rather than refused by PostgreSQL. */
bf_err bf_audit_rejection(bf_engine *engine, const char *action, const char *id,
                          const bf_actor *who, bf_err err, const char *outcome);

/* bf_audit_rejection() for count identical rejected attempts (1 .. INT32_MAX) that the caller
 * counted instead of writing one by one: one row with that count and the window in which they
 * arrived (microseconds since the Unix epoch by the caller's clock, start <= end). id and
 * who->request_id are NULL unless every counted attempt carried the same one. */
bf_err bf_audit_rejections(bf_engine *engine, const char *action, const char *id,
                           const bf_actor *who, bf_err err, const char *outcome, int64_t count,
                           int64_t window_start_us, int64_t window_end_us);

/* Delete finished request records older than retention_s seconds. */
bf_err bf_request_prune(bf_engine *engine, int retention_s, long *deleted_out);

typedef struct bf_audit_entry {
    int64_t seq;
    int64_t at;
    char backfill_id[81]; /* a rejected attempt's ID need not be valid: up to 80 bytes */
    char action[24];
    char actor[BF_ACTOR_MAX];
    char authority[BF_ACTOR_MAX];
    char request_id[BF_REQUEST_ID_MAX];
    bf_state prior; /* 0 = none */
    bf_state result;
    bool has_generation;
    int64_t generation;
    char outcome[BF_DIAG_MAX];
    int64_t count;        /* attempts the row accounts for: 1, or more for a coalesced row */
    bool has_window;      /* a coalesced row: the attempts arrived in [window_start, end] */
    int64_t window_start; /* microseconds since the Unix epoch */
    int64_t window_end;
} bf_audit_entry;

/* Audit rows, newest first, seq < before_seq (0 = newest); id NULL = all backfills. */
bf_err bf_audit_list(bf_engine *engine, const char *id, int64_t before_seq, bf_audit_entry *out,
                     int limit, int *count_out);

/* ---- readiness ------------------------------------------------------------------------- */

/* Start every pending row that this registry marks required (automatic mode). */
bf_err bf_start_required(bf_engine *engine, const bf_actor *who, int *started_out);

/* One backfill keeping the readiness gate closed. */
typedef struct bf_gate_entry {
    char id[BF_ID_MAX + 1];
    bf_state state; /* 0: required by this registry but not registered yet */
} bf_gate_entry;

/* The gate as PostgreSQL says now: the required IDs of this registry that are not completed,
 * ordered by ID. ids (may be NULL) receives up to max entries; *gating_out the total. */
bf_err bf_gate(bf_engine *engine, bf_gate_entry *ids, int max, int *gating_out);

/* Both readiness inputs in one round trip: returns what bf_schema_check() would, and only when
 * the schema is ready writes the gate as bf_gate() would. */
bf_err bf_readiness_read(bf_engine *engine, bf_gate_entry *ids, int max, int *gating_out);

/* ---- asynchronous reads ------------------------------------------------------------------
 *
 * For a server whose few threads serve many sessions: a read's begin sends its statement and
 * returns without waiting; the caller waits until bf_engine_socket() is readable (its own
 * epoll set) and calls the read's end, which takes what arrived without blocking and returns
 * with *done false while the answer is still to come (wait and call it again). An end with
 * *done true, or a begin that failed, leaves nothing in flight. Between a begin and the end
 * that finishes it, the engine may be used for nothing else, and the same out is passed to
 * every end. The blocking reads (bf_readiness_read, bf_schema_check, bf_get) are the same
 * begin and end with the wait between them.
 */

/* The connection's socket (-1 when there is none). It changes when the engine reconnects. */
int bf_engine_socket(const bf_engine *engine);

/* bf_readiness_read (gate) or bf_schema_check (not gate) in two halves. */
bf_err bf_readiness_begin(bf_engine *engine, bool gate);
bf_err bf_readiness_end(bf_engine *engine, bf_gate_entry *ids, int max, int *gating_out,
                        bool *done);

/* bf_get in two halves (the row, then its old-writer counts when it has a watch). */
bf_err bf_get_begin(bf_engine *engine, const char *id);
bf_err bf_get_end(bf_engine *engine, bf_backfill *out, bool *done);

/*
 * Wait up to timeout_ms for a "buzz_backfill" notification on this engine's connection (the
 * engine NOTIFYs on every lifecycle change). The first call issues LISTEN, which then stays
 * active for the connection's life (a reconnect drops it; the next call listens again). Returns
 * BF_OK at once when notifications are already queued (draining them all), else waits; BF_OK
 * when one arrived, BF_ERR_TIMEOUT when none did (or poll was interrupted), BF_ERR_UNAVAILABLE
 * when the connection is lost. timeout_ms 0 only listens and drains. To miss nothing: call with
 * 0, read PostgreSQL, then wait. A notification only wakes: re-read PostgreSQL before acting.
 */
bf_err bf_wait_notify(bf_engine *engine, int timeout_ms);

/* ---- throttling (docs/throttling.md) ---------------------------------------------------- */

/*
 * How a definition's batches yield to the relay's own load. Every field is optional: 0 (NULL)
 * turns its part off. Signals are checked between worker steps, at most every check_ms, in one
 * round trip; lock_waiters is also checked inside every batch before its COMMIT (sessions that
 * batch blocks). A signal trips when its value reaches the threshold; the worker then waits
 * wait_ms holding its claim (renewed) but no row lock, checks again, and resumes on its own.
 */
typedef struct bf_throttle_config {
    int batch_target_ms; /* adaptive batch size: aim at batches of this duration, but never at
                            a size that loses more than a fifth of the keys per second to a
                            batch's fixed cost (0: off, every batch has the definition's
                            batch_size) */
    int batch_min;       /* smallest adaptive size (0: batch_size / 100, at least 1) */
    int batch_max;       /* largest adaptive size (0: batch_size; never above batch_size, the
                            declared bound, which the engine still enforces) */
    double max_rows_per_second; /* keys this process passes per second for the definition */
    int64_t replica_lag_bytes;  /* slowest streaming replica's replay behind the primary's WAL */
    int lock_waiters;           /* sessions waiting on the target table or on a batch's locks */
    int xact_age_s;             /* the oldest open transaction (not the engine's), seconds */
    int xid_age_pct;            /* age(datfrozenxid) as a percentage of the 2^31 wraparound
                                   horizon */
    const char *custom_sql;     /* one row, one column: boolean (true trips) or a number of
                                   milliseconds to wait (> 0 trips); an error trips too; shorter
                                   than BF_THROTTLE_SQL_MAX */
    int check_ms;               /* signals checked at most this often; 0: 1000 */
    int wait_ms;                /* a tripped signal's wait before the next check; 0: 1000 */
    /* The rate controller (docs/throttling.md "holding a latency target"): while
     * latency_target_ms is set, latency_sql is read at most every check_ms and the keys per
     * second of the definition follow it, additive increase while the value is at or below the
     * target, multiplicative decrease above it, within [rate_min, rate_max] and under
     * max_rows_per_second. */
    int latency_target_ms;   /* the value latency_sql should stay at or below (0: off) */
    const char *latency_sql; /* one row: the relay's recent latency in ms (NULL: unknown, the
                                rate holds) and optionally a second column naming the window it
                                was measured in (a window seen before is not sampled again); an
                                error counts as above the target; shorter than
                                BF_THROTTLE_SQL_MAX */
    double rate_min;         /* the controller's lowest rate, keys/s (0: 1) */
    double rate_max;         /* its highest (0: twice the fastest pace the steps showed) */
    double rate_increase;    /* keys/s added per second at or below the target (0: a tenth of
                                the highest rate in force) */
    int rate_decrease_pct;   /* share of the rate removed by a window above the target, 1..99
                                (0: 50) */
} bf_throttle_config;

typedef struct bf_throttle bf_throttle;

#define BF_THROTTLE_SQL_MAX 4096 /* a custom query is shorter than this */

/* The throttle shared by the engines (workers) of one process; thread-safe. Starts with the
 * all-zero configuration (nothing throttled, fixed batch sizes). */
bf_err bf_throttle_new(bf_throttle **out);
void bf_throttle_free(bf_throttle *throttle); /* NULL is a no-op */
/* Replace the configuration wholesale: def for every definition, overrides[i] (a complete
 * configuration) for override_ids[i] (n of them), and a ceiling of keys per second over all
 * definitions of this process (0: none). Strings are
 * copied. Workers see it from their next step. BF_ERR_INVALID_ARGUMENT (nothing changed, diag
 * says why) for a negative value, batch_min above batch_max or an invalid stable ID. */
bf_err bf_throttle_configure(bf_throttle *throttle, const bf_throttle_config *def,
                             const char *const *override_ids, const bf_throttle_config *overrides,
                             size_t n, double daemon_rows_per_second, char *diag, size_t diag_len);
/* The effective configuration of id (custom_sql copied into sql, sql_len bytes, or cut). */
void bf_throttle_get(bf_throttle *throttle, const char *id, bf_throttle_config *out, char *sql,
                     size_t sql_len);

/* What the rate controller of a definition does (bf_throttle_rate_get with its id), or of every
 * definition of the process (id NULL: definitions counts them, rate is the sum, signal_ms the
 * highest known). */
typedef struct bf_throttle_rate {
    int definitions;              /* controllers that sampled their signal */
    double rate;                  /* keys per second now */
    double signal_ms;             /* the last value of latency_sql; NAN when unknown */
    unsigned long long decreases; /* windows above the target that lowered the rate */
    unsigned long long increases; /* samples at or below it that raised the rate */
} bf_throttle_rate;

/* false (out zeroed, signal_ms NAN) when id's controller never sampled (or none did). A
 * reconfiguration restarts every controller from rate_min. */
bool bf_throttle_rate_get(bf_throttle *throttle, const char *id, bf_throttle_rate *out);

/* ---- workers --------------------------------------------------------------------------- */

typedef enum bf_step {
    BF_STEP_IDLE = 0,       /* nothing claimed (also: a stop cancelled the step, which rolled
                               back its transaction in flight and released the claim) */
    BF_STEP_BATCH = 1,      /* one or more batches committed */
    BF_STEP_VALIDATING = 2, /* reached the bound, entered validating */
    BF_STEP_COMPLETED = 3,  /* validation succeeded, completed */
    BF_STEP_RETRY = 4,      /* attempt failed (or outlasted the claim), backoff scheduled,
                               claim released */
    BF_STEP_FAILED = 5,     /* entered failed, claim released */
    BF_STEP_BLOCKED = 6,    /* entered blocked, claim released */
    BF_STEP_LOST = 7,       /* fenced out by a pause or takeover; nothing committed */
    BF_STEP_THROTTLED = 8,  /* a health signal or a rows-per-second ceiling made the worker wait,
                               holding its claim (renewed) but no row lock; the signal, its
                               value and the wait in detail and in the row's throttle fields */
} bf_step;

const char *bf_step_name(bf_step step);

typedef struct bf_step_info {
    bf_step step;
    char id[BF_ID_MAX + 1];
    int64_t generation;
    long batches; /* batches this step committed (BF_STEP_BATCH) */
    long rows;    /* keys they passed */
    long touched; /* rows their mutations changed */
    char checkpoint[BF_KEY_TEXT_MAX];
    char detail[BF_DIAG_MAX];
    long batch_size; /* the batch size the step used (adaptive sizing), 0 when none ran */
} bf_step_info;

/* Observers at production seams (logging, metrics, tests). Each may be NULL. They run on the
 * worker's thread; a hook that blocks delays the worker (tests use this as a barrier). */
typedef struct bf_worker_hooks {
    void (*after_claim)(void *arg, const char *id, int64_t generation);
    void (*after_step)(void *arg, const bf_step_info *info);
    void *arg;
} bf_worker_hooks;

typedef struct bf_worker bf_worker;

/* A worker borrows the engine (its connection) until freed. */
bf_err bf_worker_new(bf_worker **out, bf_engine *engine, const bf_worker_hooks *hooks);
/* Releases a held claim first, and ends the engine's LISTEN (bf_wait_notify listens again). */
void bf_worker_free(bf_worker *worker);

/* Claim a specific ID, or (id NULL) the next eligible running/validating row this registry
 * knows. BF_ERR_NO_WORK when nothing is eligible; BF_ERR_UNKNOWN_DEFINITION for an ID the
 * registry lacks (the row is never claimed). */
bf_err bf_worker_claim(bf_worker *worker, const char *id, int64_t *generation_out);

/* Advance the held claim by one validation pass or by batches: a callback definition one
 * batch; a declarative one runs the batch loop inside PostgreSQL (one CALL), committing up to
 * step_batches batches and starting none after step_ms, each batch its own fenced
 * transaction. A pause or takeover fails the fence of the batch in flight (rolled back; the
 * batches before it stay committed). */
bf_err bf_worker_step(bf_worker *worker, bf_step_info *out);

/* Extend the held claim. BF_ERR_STALE when it is no longer current. */
bf_err bf_worker_renew(bf_worker *worker);

/* Release the held claim (fenced on owner and generation); no-op without one. */
bf_err bf_worker_release(bf_worker *worker);

/* Claim and step until stop is observed (checked between steps, so after at most step_ms and
 * one batch) or, when until_idle, no eligible work remains. Releases its claim before
 * returning. */
bf_err bf_worker_run(bf_worker *worker, bool until_idle);

/* Ask bf_worker_run to stop at the end of its current step. Async-signal-safe. */
void bf_worker_stop(bf_worker *worker);

/* ---- the old-writer watchdog (docs/definitions.md "Old writers") ----------------------- */

/* Remove id's watch trigger now (buzzctl watch off): the counts stay readable. Audited as
 * action "watch_off". *removed_out: a trigger was installed. BF_ERR_NOT_FOUND for an unknown
 * ID. */
bf_err bf_watch_off(bf_engine *engine, const char *id, const bf_actor *who, bool *removed_out);

/* Remove the triggers of completed backfills whose grace (grace_s seconds since completion)
 * has passed, and of backfills that no longer exist. *removed_out: how many. */
bf_err bf_watch_sweep(bf_engine *engine, int grace_s, int *removed_out);

/* The preflight's probe (a deploy pipeline holding a required automatic backfill's start until
 * old writers are drained): bf_watch_probe_start installs id's watch (mode on) under a key of
 * its own, committed, without starting anything; bf_watch_probe_finish, called after the
 * watching time, removes it and writes what it counted (out; report: "no old writer: ..." or
 * "old writer: N rows since ... from application ... at ...; hold the start until that writer
 * is drained"), leaving no count behind. A probe that died is cleaned up by the next probe of
 * id, or swept after two hours. BF_ERR_DEFINITION: no postcondition to watch. */
bf_err bf_watch_probe_start(bf_engine *engine, const char *id);
bf_err bf_watch_probe_finish(bf_engine *engine, const char *id, bf_old_writers *out, char *report,
                             size_t cap);

/* ---- aggregate statistics (metrics) ----------------------------------------------------- */

#define BF_STATE_SLOTS 8 /* index = bf_state value; 0: required by this registry, no row yet */

/* One aggregate read of every row, for metrics: no ID, checkpoint or row value leaves it. */
typedef struct bf_stats {
    int64_t backfills[BF_STATE_SLOTS]; /* rows per lifecycle state */
    int64_t gating[BF_STATE_SLOTS];    /* required IDs of this registry not completed, per state
                                          ([0]: not registered yet), as bf_gate() counts them */
    bool has_stall[BF_STATE_SLOTS];    /* some row in the state has last_progress_at */
    double stall_s[BF_STATE_SLOTS];    /* max over those rows of now - last_progress_at, s */
    int64_t batches_committed;         /* sums over every row */
    int64_t rows_committed;
    int64_t old_writer_rows; /* rows the watchdog counted, over backfills not completed */
    int64_t old_writers;     /* writers it attributed them to, likewise */
    int64_t watches;         /* watch triggers installed */
} bf_stats;

/* One bounded aggregate statement (a scan of the backfill table, grouped by state; the
 * registry's required IDs as one array parameter). *out written only on BF_OK. */
bf_err bf_stats_read(bf_engine *engine, bf_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* BUZZ_ENGINE_H */
