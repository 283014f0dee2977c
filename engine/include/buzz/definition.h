/*
 * buzz/definition.h - how application code declares a backfill.
 *
 * A definition is application code: a stable ID, an ordering key of one or more typed columns
 * over one source table, a finite batch bound, the mutation, the validation, whether it is a
 * required automatic backfill, and bounded informational metadata.
 *
 * Two ways to write the mutation and the validation:
 *
 *   declarative  needs_repair (a predicate over the source row, alias t) and update_set (the SET
 *                list applied to the batch's rows that need repair). The engine runs selection,
 *                mutation and the fenced checkpoint advance as one statement. Validation defaults
 *                to "no row through the bound still needs repair".
 *
 *   callbacks    mutate and/or validate. The engine materialises the batch's (or validation
 *                chunk's) keys in the temporary table bf_batch and calls back; the callback runs
 *                its statements through bf_txn_exec()/bf_txn_query_int() only, never a raw
 *                connection, so the engine can count and bound the rows it touches. Validation
 *                callbacks run in a READ ONLY transaction.
 *
 * Empty source set: start captures the greatest key of the source table as the inclusive upper
 * bound. A table with no rows yields no bound and bound_empty = true; such a backfill has no
 * admitted work and goes straight to validation. The bound is never recaptured.
 *
 * Definitions are immutable once added to a registry and must outlive it (static storage is
 * the normal case). Thread safety: see bf_registry below.
 */
#ifndef BUZZ_DEFINITION_H
#define BUZZ_DEFINITION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buzz/err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BF_ID_MAX          63     /* bytes in a stable ID: [a-z][a-z0-9_.-]{2,62} */
#define BF_MAX_KEY_COLUMNS 4      /* columns in one ordering key */
#define BF_BATCH_MAX       100000 /* upper limit of any definition's batch bound */
#define BF_META_MAX        200    /* bytes in each informational metadata field */
#define BF_DIAG_MAX        512    /* bytes in any diagnostic, terminator included */

/* The old-writer watchdog (docs/definitions.md "Old writers"): while a backfill runs, a row
 * trigger the engine installs on the table counts rows written that break the postcondition, by
 * writer (application_name, client address, role), never by value. */
typedef enum bf_watch_mode {
    BF_WATCH_DEFAULT = 0, /* the daemon-wide setting (bf_config.watch_writers) */
    BF_WATCH_OFF = 1,
    BF_WATCH_ON = 2,   /* AFTER INSERT OR UPDATE: count and attribute violating rows */
    BF_WATCH_HEAL = 3, /* BEFORE: also apply the definition's own repair to such rows (a
                          declarative definition whose SET list reads only the row itself) */
} bf_watch_mode;

/* "off", "on", "heal" ("default" for BF_WATCH_DEFAULT); NULL for an unknown value. */
const char *bf_watch_mode_name(bf_watch_mode mode);
/* Parse "off", "on" or "heal"; BF_ERR_INVALID_ARGUMENT otherwise. */
bf_err bf_watch_mode_parse(const char *text, bf_watch_mode *out);

/* Ordering key column types. Values are stored in their canonical PostgreSQL text form. */
typedef enum bf_key_type {
    BF_KEY_BIGINT = 1,
    BF_KEY_INTEGER = 2,
    BF_KEY_TIMESTAMPTZ = 3,
    BF_KEY_BYTEA = 4,
    BF_KEY_UUID = 5,
} bf_key_type;

/* The PostgreSQL type name of a key type ("bigint"), or NULL if unknown. */
const char *bf_key_type_name(bf_key_type type);

typedef struct bf_key_column {
    const char *name; /* column of the source table: [a-z_][a-z0-9_]* */
    bf_key_type type;
} bf_key_column;

/* Bounded automatic retry. Zero fields take the defaults (5 attempts, 200 ms, 30 s). */
typedef struct bf_retry_policy {
    int max_attempts; /* consecutive failed attempts before failed */
    int base_ms;      /* first backoff; doubles per attempt, with jitter */
    int cap_ms;       /* largest backoff */
} bf_retry_policy;

/* A transaction the engine lends to a callback; valid only during that callback. */
typedef struct bf_txn bf_txn;

/*
 * Mutation callback. The batch's keys are in the temporary table bf_batch (columns named as the
 * key). Return BF_OK to let the engine advance the checkpoint, BF_ERR_PREREQUISITE or
 * BF_ERR_DATA_INVARIANT (after bf_txn_set_diag) to block, anything else to fail the attempt.
 */
typedef bf_err (*bf_mutate_fn)(bf_txn *txn, void *arg);

/*
 * Validation callback, called once per chunk with the chunk's keys in bf_batch inside a READ
 * ONLY transaction. Return BF_OK when the postcondition holds for the chunk,
 * BF_ERR_VALIDATION_FAILED or BF_ERR_PREREQUISITE (after bf_txn_set_diag) when it does not.
 */
typedef bf_err (*bf_validate_fn)(bf_txn *txn, void *arg);

typedef struct bf_definition {
    const char *id; /* stable ID; a material change of behaviour needs a new one */

    /* informational metadata, at most BF_META_MAX bytes each; last registration wins */
    const char *description;
    const char *owner;
    const char *revision;

    const char *table; /* source table, "schema.table" or "table" */
    bf_key_column key[BF_MAX_KEY_COLUMNS];
    int nkey;       /* 1..BF_MAX_KEY_COLUMNS; the key must be unique in the table */
    int batch_size; /* finite bound on rows selected and rows touched per batch */
    bool required;  /* required automatic backfill: gates readiness in automatic mode */

    /* declarative form */
    const char *needs_repair;  /* SQL predicate over the source row (alias t) */
    const char *update_set;    /* SQL SET list applied to batch rows where needs_repair holds */
    const char *postcondition; /* optional SQL predicate (alias t) validation requires of every
                                  row through the bound; default: NOT needs_repair */
    const char *prerequisite;  /* optional SQL boolean; false blocks the backfill */

    /* callback form: when set, replaces update_set / the default validation */
    bf_mutate_fn mutate;
    bf_validate_fn validate;
    void *arg;

    int validate_chunk; /* keys per validation chunk; 0 = 10 * batch_size, at most BF_BATCH_MAX */
    bf_retry_policy retry;

    /* the old-writer watchdog while this backfill runs (0: the daemon-wide setting); needs a
     * declarative definition or a postcondition. It changed the struct's size: BF_MODULE_ABI 2
     * refuses modules built against the earlier header. */
    bf_watch_mode watch_writers;
} bf_definition;

/*
 * Run one statement inside the lent transaction. rows_out (optional) receives the number of rows
 * it affected or returned. Every row an INSERT, UPDATE, DELETE or MERGE statement writes counts
 * against the batch bound (its command tag is what is counted: rows written inside a SELECT, by
 * a data-modifying WITH or a function, are not seen, so do not write that way): when the running
 * total exceeds it, this returns BF_ERR_BATCH_BOUND and the engine rolls the whole batch back.
 * After any error the transaction is failed: later calls return the same error without running.
 * Never end the transaction (COMMIT, ROLLBACK) from a callback.
 */
bf_err bf_txn_exec(bf_txn *txn, const char *sql, int nparams, const char *const *params,
                   long *rows_out) __attribute__((warn_unused_result));

/* Run a query returning one integer (first column of the first row; NULL reads as 0).
 * Counts against the bound only if the statement writes. */
bf_err bf_txn_query_int(bf_txn *txn, const char *sql, int nparams, const char *const *params,
                        long long *value_out) __attribute__((warn_unused_result));

/* Record a bounded, client-safe diagnostic for the verdict the callback is about to return.
 * Never put row values, query text or credentials in it. */
void bf_txn_set_diag(bf_txn *txn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Number of keys in bf_batch for this callback. */
long bf_txn_batch_rows(const bf_txn *txn);

/*
 * Definitions modules: a shared object exports one symbol named BF_MODULE_SYMBOL of type
 * bf_module. The daemon dlopen()s it and adds every definition to its registry.
 */
/* 2: bf_definition gained watch_writers (a module built for 1 would be read past its end). */
#define BF_MODULE_ABI    2
#define BF_MODULE_SYMBOL "buzz_backfill_module"

typedef struct bf_module {
    int abi; /* BF_MODULE_ABI */
    const char *name;
    const bf_definition *const *definitions;
    size_t count;
} bf_module;

/*
 * A set of definitions known to this process, with their compiled SQL. Thread safety: the
 * registry only grows; any number of threads may read it (count, at, find, engines opened on
 * it) while one thread at a time adds to it with bf_registry_add(), without a lock: a reader
 * sees the definitions added before its call, each whole, and an entry's address never
 * changes. bf_registry_load_module() (which takes its definitions back on error) and
 * bf_registry_free() run only while no other thread uses the registry.
 */
typedef struct bf_registry bf_registry;

bf_err bf_registry_new(bf_registry **out);
void bf_registry_free(bf_registry *reg);

/* Validate and add a definition (at most 16,384 per registry); all or nothing. On error, diag
 * (may be NULL) gets a bounded reason. */
bf_err bf_registry_add(bf_registry *reg, const bf_definition *def, char *diag, size_t diag_len);

/* Add defs[0..n) in order, as n bf_registry_add() calls in a batch of their own would (the
 * same checks; it stops at the first that fails, whose reason diag gets; *added, when not NULL,
 * is how many joined), but their SQL is compiled on up to four threads (as many as there are
 * CPUs online): at startup a definitions directory of thousands of files spends most of its
 * time there. The writer's call, like add. */
bf_err bf_registry_add_many(bf_registry *reg, const bf_definition *const *defs, size_t n,
                            size_t *added, char *diag, size_t diag_len);

/* A batch of adds (a module, the definition files of a directory or of a SIGHUP): between
 * bf_registry_batch_begin() and bf_registry_batch_end(), each bf_registry_add() makes its
 * definition findable at once (count, at, find), but the lists of IDs that engines' queries
 * name (claims, the readiness gate, the progress read) are rebuilt once, at the end, rather
 * than at every add: n adds then cost O(n), not O(n^2). Batches nest; the outermost end
 * publishes. The writer's calls, like add. batch_end: BF_ERR_INVALID_ARGUMENT without a begin;
 * BF_ERR_NOMEM leaves the lists without the batch's definitions (a later end or add lists
 * them). bf_registry_load_module() is a batch of its own. */
void bf_registry_batch_begin(bf_registry *reg);
bf_err bf_registry_batch_end(bf_registry *reg);

/* dlopen() a definitions module and add all its definitions (all or nothing). */
bf_err bf_registry_load_module(bf_registry *reg, const char *path, char *diag, size_t diag_len);

size_t bf_registry_count(const bf_registry *reg);
const bf_definition *bf_registry_at(const bf_registry *reg, size_t i);
const bf_definition *bf_registry_find(const bf_registry *reg, const char *id);

/* true when id is a well-formed stable ID */
bool bf_id_valid(const char *id);

#ifdef __cplusplus
}
#endif
#endif /* BUZZ_DEFINITION_H */
