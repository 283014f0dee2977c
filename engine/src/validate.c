/*
 * validate.c - definition-owned, read-only validation through the bound, in bounded chunks.
 *
 * Design notes: each chunk is its own short transaction that never commits (ROLLBACK at the
 * end) and runs READ ONLY before any definition code executes, so validation cannot write
 * target data. One invocation per stable ID at a time: a session-level advisory lock keyed by
 * the ID serialises explicit validations and the workers' lifecycle validation. Only a
 * successful run may complete a row, in a transaction fenced on lifecycle and the generation
 * read before the run started; in every other state the run records its bounded outcome and
 * nothing else.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define VALIDATION_LOCK_CLASS "1111883777"

static bf_err validation_try_lock(bf_engine *e, const char *id, bool *acquired)
{
    const char *params[] = {id};
    PGresult *r = NULL;
    bf_err err =
        bf__exec(e, &r, "validation lock",
                 "SELECT pg_try_advisory_lock(" VALIDATION_LOCK_CLASS ", hashtext($1))", 1, params);
    if (err != BF_OK)
        return err;
    *acquired = bf__field_bool(r, 0, 0);
    PQclear(r);
    return BF_OK;
}

/*
 * The validation lock is a session lock, so a validator whose process stopped (SIGSTOP, a hung
 * host) between two chunks would hold it for as long as its idle connection lives, and the
 * backfill could never be validated by anyone else. A holder that is an engine session of this
 * database, idle (not in a transaction: those are ended by idle_in_transaction_session_timeout)
 * for longer than a lease, has stopped: a live validator renews its claim or runs a chunk far
 * more often. Its backend is terminated (which rolls back nothing: validation commits nothing
 * but its outcome, fenced on the generation) and the lock is tried once more.
 */
bf_err bf__validation_lock(bf_engine *e, const char *id, bool *acquired)
{
    bf_err err = validation_try_lock(e, id, acquired);
    if (err != BF_OK || *acquired)
        return err;
    char lease[16];
    bf__format(lease, sizeof lease, "%d", e->lease_ms);
    const char *params[] = {id, lease};
    PGresult *r = NULL;
    err = bf__exec(e, &r, "find a stalled validator",
                   "SELECT a.pid, pg_terminate_backend(a.pid, 1000) FROM pg_locks l"
                   " JOIN pg_stat_activity a ON a.pid = l.pid"
                   " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2"
                   " AND l.classid = " VALIDATION_LOCK_CLASS "::bigint::oid"
                   " AND l.objid = (hashtext($1)::bigint & 4294967295)::oid"
                   " AND l.database = (SELECT oid FROM pg_database"
                   "  WHERE datname = current_database())"
                   " AND a.application_name LIKE 'buzz-backfill%' AND a.state = 'idle'"
                   " AND a.state_change < clock_timestamp() - $2::integer * interval '1 ms'",
                   2, params);
    if (err != BF_OK) /* e.g. not allowed to signal that backend: the lock stays busy */
        return BF_OK;
    int stalled = PQntuples(r);
    if (stalled > 0)
        bf__log(e, BF_LOG_WARN,
                "%s: terminated a stalled validator (backend %s idle past the lease)", id,
                bf__field(r, 0, 0));
    PQclear(r);
    return stalled > 0 ? validation_try_lock(e, id, acquired) : BF_OK;
}

void bf__validation_unlock(bf_engine *e, const char *id)
{
    const char *params[] = {id};
    if (bf__exec0(e, "validation unlock",
                  "SELECT pg_advisory_unlock(" VALIDATION_LOCK_CLASS ", hashtext($1))", 1,
                  params) != BF_OK)
        bf__log(e, BF_LOG_WARN, "could not release validation lock of %s", id);
}

/* After the first chunk with rows still needing repair, a declarative validation goes on
 * counting them through the bound for at most this long. */
#define VALIDATION_COUNT_US (10 * 1000000)

static int chunk_size(const bf_definition *d)
{
    if (d->validate_chunk > 0)
        return d->validate_chunk;
    long n = 10L * d->batch_size;
    return n > BF_BATCH_MAX ? BF_BATCH_MAX : (int)n;
}

/* One declarative chunk: rows, rows still needing repair, last key. */
static bf_err chunk_declarative(bf_engine *e, const bf_compiled *c, const char *bound,
                                const char *after, int chunk, long *rows, char *last,
                                bf_validation_run *run)
{
    char n[16];
    bf__format(n, sizeof n, "%d", chunk);
    const char *params[] = {bound, n, after};
    PGresult *r = NULL;
    bf_err err =
        bf__exec(e, &r, "validation chunk", c->sql_vchunk[after ? 1 : 0], after ? 3 : 2, params);
    if (err != BF_OK)
        return err;
    *rows = (long)bf__field_i64(r, 0, 0);
    long long bad = bf__field_i64(r, 0, 1);
    err = bf__key_field(e, last, r, 0, 2);
    PQclear(r);
    if (err != BF_OK)
        return err;
    if (bad > 0) {
        run->verdict = BF_ERR_VALIDATION_FAILED;
        run->bad += bad;
    }
    return BF_OK;
}

/* One callback chunk: keys into bf_batch, then read-only, then the definition's check. */
static bf_err chunk_callback(bf_engine *e, const bf_compiled *c, const char *bound,
                             const char *after, int chunk, long *rows, char *last,
                             bf_validation_run *run)
{
    char n[16];
    bf__format(n, sizeof n, "%d", chunk);
    const char *params[] = {bound, n, after};
    PGresult *r = NULL;
    bf_err err = bf__exec0(e, "create bf_batch", c->sql_create_batch, 0, NULL);
    if (err == BF_OK)
        err = bf__exec(e, &r, "validation keys", c->sql_keys[after ? 1 : 0], after ? 3 : 2, params);
    if (err != BF_OK)
        return err;
    *rows = strtol(PQcmdTuples(r), NULL, 10);
    PQclear(r);
    if (*rows == 0)
        return BF_OK;
    if ((err = bf__exec0(e, "read only", "SET LOCAL transaction_read_only = on", 0, NULL)) != BF_OK)
        return err;
    bf_txn txn;
    bf__txn_init(&txn, e, LONG_MAX, *rows);
    bf_err verdict = c->def->validate(&txn, c->def->arg);
    verdict = bf__txn_verdict(&txn, verdict, run->detail, sizeof run->detail);
    if (verdict == BF_ERR_VALIDATION_FAILED || verdict == BF_ERR_PREREQUISITE) {
        run->verdict = verdict;
        return BF_OK;
    }
    if (verdict != BF_OK)
        return verdict == BF_ERR_DEFINITION && strstr(run->detail, "25006)") != NULL
                   ? bf__diag(e, BF_ERR_DEFINITION, "validation attempted a write (25006)")
                   : verdict;
    if ((err = bf__exec(e, &r, "validation last key", c->sql_batch_last, 0, NULL)) != BF_OK)
        return err;
    err = bf__key_field(e, last, r, 0, 0);
    PQclear(r);
    return err;
}

/* ---- progress ----------------------------------------------------------------------------
 *
 * A running validation records how far it has got in buzz_backfill.validation_progress (schema
 * version 9), between its chunks and outside their transactions (autocommitted): at the start,
 * after the first chunk (so a reader sees figures as soon as there are any), then at most once
 * per PROGRESS_EVERY_US, and finished at the end whatever the outcome. Each write gives the
 * entry an expiry: the lease plus the statement timeout past it, longer than a live validator
 * goes between two writes, so the entry of one that crashed or stopped reads as not running.
 * The validation lock makes the validator the one writer of its ID's entry; a write fences on
 * its owner and on the entry being unfinished all the same. A failed write is logged and does
 * not fail the validation (the figures are an observation, not the outcome), and it keeps the
 * engine's diagnostic of the run. */

#define PROGRESS_EVERY_US 1000000

typedef struct progress_meter {
    bf_engine *e;
    const char *id;
    bool lifecycle;
    char expiry_ms[24];
    int64_t written_us; /* monotonic time of the last write, 0 before the first chunk's */
} progress_meter;

/* $1 id, $2 owner, $3 lifecycle, $4 expiry (ms), $5 rows checked, $6 rows needing repair */
static void progress_write(progress_meter *m, const char *what, const char *sql, long rows,
                           long long bad)
{
    bf_engine *e = m->e;
    char diag[sizeof e->diag], sqlstate[sizeof e->sqlstate], nrows[24], nbad[24];
    memcpy(diag, e->diag, sizeof diag);
    memcpy(sqlstate, e->sqlstate, sizeof sqlstate);
    bf__format(nrows, sizeof nrows, "%ld", rows);
    bf__format(nbad, sizeof nbad, "%lld", bad);
    const char *params[] = {m->id, e->owner, m->lifecycle ? "t" : "f", m->expiry_ms, nrows, nbad};
    if (bf__exec0(e, what, sql, 6, params) != BF_OK)
        bf__log(e, BF_LOG_WARN, "%s: could not record the validation's progress: %s", m->id,
                e->diag);
    memcpy(e->diag, diag, sizeof diag);
    memcpy(e->sqlstate, sqlstate, sizeof sqlstate);
}

static void progress_begin(progress_meter *m, bf_engine *e, const char *id, bool lifecycle)
{
    m->e = e;
    m->id = id;
    m->lifecycle = lifecycle;
    m->written_us = 0;
    bf__format(m->expiry_ms, sizeof m->expiry_ms, "%lld",
               (long long)e->lease_ms + e->statement_timeout_ms);
    progress_write(m, "record validation start",
                   "INSERT INTO buzz_backfill.validation_progress (backfill_id, owner, lifecycle,"
                   " started_at, rows_checked, rows_needing_repair, updated_at, expires_at)"
                   " VALUES ($1, $2, $3::boolean, clock_timestamp(), $5::bigint, $6::bigint,"
                   " clock_timestamp(), clock_timestamp() + $4::bigint * interval '1 ms')"
                   " ON CONFLICT (backfill_id) DO UPDATE SET owner = EXCLUDED.owner,"
                   " lifecycle = EXCLUDED.lifecycle, started_at = EXCLUDED.started_at,"
                   " rows_checked = 0, rows_needing_repair = 0, updated_at = EXCLUDED.updated_at,"
                   " expires_at = EXCLUDED.expires_at, finished_at = NULL",
                   0, 0);
}

/* After a chunk: rows checked and rows needing repair so far (finished: the run ended). */
static void progress_update(progress_meter *m, long rows, long long bad, bool finished)
{
    int64_t now = bf__monotonic_us();
    if (!finished && m->written_us != 0 && now - m->written_us < PROGRESS_EVERY_US)
        return;
    m->written_us = now;
    progress_write(m, finished ? "record validation end" : "record validation progress",
                   finished ? "UPDATE buzz_backfill.validation_progress SET"
                              " rows_checked = $5::bigint, rows_needing_repair = $6::bigint,"
                              " updated_at = clock_timestamp(), expires_at = clock_timestamp()"
                              " + $4::bigint * interval '1 ms', finished_at = clock_timestamp()"
                              " WHERE backfill_id = $1 AND owner = $2 AND lifecycle = $3::boolean"
                              " AND finished_at IS NULL"
                            : "UPDATE buzz_backfill.validation_progress SET"
                              " rows_checked = $5::bigint, rows_needing_repair = $6::bigint,"
                              " updated_at = clock_timestamp(), expires_at = clock_timestamp()"
                              " + $4::bigint * interval '1 ms'"
                              " WHERE backfill_id = $1 AND owner = $2 AND lifecycle = $3::boolean"
                              " AND finished_at IS NULL",
                   rows, bad);
}

static bf_err validation_chunks(bf_engine *e, const bf_compiled *c, const char *bound,
                                bf_chunk_gate_fn gate, void *gate_arg, progress_meter *meter,
                                bf_validation_run *run);

bf_err bf__validation_run(bf_engine *e, const bf_compiled *c, bool lifecycle, const char *bound,
                          bool bound_empty, bf_chunk_gate_fn gate, void *gate_arg,
                          bf_validation_run *run)
{
    memset(run, 0, sizeof *run);
    run->verdict = BF_OK;
    if (bound_empty) {
        run->outcome = BF_VALIDATION_SUCCESS;
        bf__copy(run->detail, sizeof run->detail, "empty source set");
        return BF_OK;
    }
    progress_meter meter;
    progress_begin(&meter, e, c->def->id, lifecycle);
    bf_err err = validation_chunks(e, c, bound, gate, gate_arg, &meter, run);
    progress_update(&meter, run->checked, run->bad, true);
    return err;
}

static bf_err validation_chunks(bf_engine *e, const bf_compiled *c, const char *bound,
                                bf_chunk_gate_fn gate, void *gate_arg, progress_meter *meter,
                                bf_validation_run *run)
{
    const int chunk = chunk_size(c->def);
    char after[BF_KEY_TEXT_MAX] = "";
    bool has_after = false;
    long total = 0;
    int64_t failed_us = 0; /* when the first chunk with rows still needing repair ended */
    bool counted_all = true;
    for (;;) {
        bf_err err = gate ? gate(gate_arg) : BF_OK;
        if (err != BF_OK)
            return err;
        if ((err = bf__begin(e, c->def->validate == NULL)) != BF_OK)
            return err;
        long rows = 0;
        char last[BF_KEY_TEXT_MAX] = "";
        err = (c->def->validate ? chunk_callback : chunk_declarative)(
            e, c, bound, has_after ? after : NULL, chunk, &rows, last, run);
        bf__rollback(e); /* validation never commits */
        if (err != BF_OK)
            return err;
        total += rows;
        run->checked = total;
        /* a definition's own check says only that a chunk failed: stop at the first. The
         * declarative check counts, so go on counting the rest through the bound, for at most
         * VALIDATION_COUNT_US more (then the count is a lower bound, and says so) */
        if (run->verdict != BF_OK &&
            (c->def->validate != NULL || run->verdict != BF_ERR_VALIDATION_FAILED))
            break;
        if (run->verdict != BF_OK && failed_us == 0)
            failed_us = bf__monotonic_us();
        if (rows < chunk)
            break;
        if (failed_us != 0 && bf__monotonic_us() - failed_us > VALIDATION_COUNT_US) {
            counted_all = false;
            break;
        }
        progress_update(meter, total, run->bad, false); /* more chunks follow */
        bf__copy(after, sizeof after, last);
        has_after = true;
    }
    if (run->verdict == BF_OK) {
        run->outcome = BF_VALIDATION_SUCCESS;
        bf__format(run->detail, sizeof run->detail, "postcondition holds for %ld rows", total);
        return BF_OK;
    }
    run->outcome = BF_VALIDATION_FAILURE;
    if (c->def->validate == NULL && run->verdict == BF_ERR_VALIDATION_FAILED) {
        if (counted_all)
            bf__format(run->detail, sizeof run->detail,
                       "%lld of %ld rows through the bound still need repair", run->bad, total);
        else
            bf__format(run->detail, sizeof run->detail,
                       "at least %lld rows through the bound still need repair (counted in the"
                       " first %ld rows; counting stopped after %d s)",
                       run->bad, total, VALIDATION_COUNT_US / 1000000);
    }
    return BF_OK;
}

/* ---- explicit validation --------------------------------------------------------------- */

typedef struct validate_ctx {
    bf_engine *e;
    const char *id;
    const bf_actor *who;
    bf_action_result *out;
} validate_ctx;

/* Record the outcome: audit row, request record, and (for runs) the row's latest explicit
 * validation, all in one transaction. complete_generation >= 0 also drives the fenced
 * completion of a validating row. */
static bf_err validate_record(validate_ctx *v, bool ran, int64_t complete_generation)
{
    bf_engine *e = v->e;
    bf_action_result *out = v->out;
    bf_err err = bf__begin(e, false);
    if (err != BF_OK)
        return err;
    if (complete_generation >= 0) {
        char gen[24];
        bf__format(gen, sizeof gen, "%lld", (long long)complete_generation);
        const char *params[] = {v->id, gen, out->detail, v->who ? v->who->request_id : NULL};
        PGresult *r = NULL;
        err = bf__exec(e, &r, "complete",
                       "UPDATE buzz_backfill.backfill SET state = 'completed',"
                       " completed_at = clock_timestamp(), claim_owner = NULL,"
                       " claim_expires_at = NULL, claimed_at = NULL, error_class = NULL,"
                       " error_detail = NULL, error_at = NULL, attempts = 0,"
                       " next_attempt_at = NULL,"
                       " validation_outcome = 'success', validation_detail = $3,"
                       " validated_at = clock_timestamp(), validation_request = $4,"
                       " updated_at = clock_timestamp()"
                       " WHERE id = $1 AND state = 'validating' AND generation = $2::bigint"
                       " RETURNING generation, pg_notify('buzz_backfill', id)",
                       4, params);
        if (err == BF_OK) {
            if (PQntuples(r) == 1) {
                out->changed = true;
                out->result = BF_STATE_COMPLETED;
                ran = false; /* the completion already recorded the outcome */
            }
            PQclear(r);
        }
    }
    if (err == BF_OK && ran) {
        const char *params[] = {v->id, bf_validation_outcome_name(out->validation), out->detail,
                                v->who ? v->who->request_id : NULL};
        err = bf__exec0(e, "record validation",
                        "UPDATE buzz_backfill.backfill SET validation_outcome = $2,"
                        " validation_detail = $3, validated_at = clock_timestamp(),"
                        " validation_request = $4 WHERE id = $1",
                        4, params);
    }
    if (err == BF_OK) {
        char outcome[BF_DIAG_MAX];
        bf__format(outcome, sizeof outcome, "%s%s: %s", out->changed ? "completed, " : "",
                   bf_validation_outcome_name(out->validation), out->detail);
        bf_audit_record rec = {v->id,       "validate",      v->who,          out->prior,
                               out->result, out->prior != 0, out->generation, outcome};
        err = bf__audit(e, &rec);
    }
    if (err == BF_OK)
        err = bf__request_finish(e, v->who, out);
    if (err == BF_OK)
        err = bf__commit(e);
    if (err != BF_OK)
        bf__rollback(e);
    else if (out->changed && out->result == BF_STATE_COMPLETED && e->watch_grace_s == 0)
        (void)bf__watch_remove(e, v->id, NULL); /* the watch ends with the backfill */
    return err;
}

/* stored: "key_types[/digest]" as validate_read reads it; the digest is absent on rows
 * registered before schema version 8 */
static bool validate_same_definition(const char *stored, const bf_compiled *c)
{
    size_t n = strlen(c->key_types);
    if (strncmp(stored, c->key_types, n) != 0)
        return false;
    return stored[n] == '\0' || (stored[n] == '/' && strcmp(stored + n + 1, c->digest) == 0);
}

/* Raw bound, state and generation of a row, outside any transaction. */
static bf_err validate_read(bf_engine *e, const char *id, bf_state *state, int64_t *generation,
                            char *bound, bool *bound_empty, bool *reached, char *key_types,
                            size_t key_types_len)
{
    const char *params[] = {id};
    PGresult *r = NULL;
    bf_err err = bf__exec(e, &r, "read backfill",
                          "SELECT state, generation, bound::text, bound_empty,"
                          " key_types || coalesce('/' || definition_digest, ''),"
                          " coalesce(bound_empty OR checkpoint = bound, false)"
                          " FROM buzz_backfill.backfill WHERE id = $1",
                          1, params);
    if (err != BF_OK)
        return err;
    if (PQntuples(r) == 0) {
        PQclear(r);
        return bf__diag(e, BF_ERR_NOT_FOUND, "backfill not found");
    }
    bf_state st = 0;
    (void)bf_state_parse(bf__field(r, 0, 0), &st);
    *state = st;
    *generation = bf__field_i64(r, 0, 1);
    *bound_empty = bf__field_bool(r, 0, 3);
    *reached = bf__field_bool(r, 0, 5);
    bf__copy(key_types, key_types_len, bf__field(r, 0, 4));
    err = bf__key_field(e, bound, r, 0, 2);
    PQclear(r);
    return err;
}

static bf_err validate_current_state(validate_ctx *v, const char *reason)
{
    v->out->validation = BF_VALIDATION_CURRENT_STATE;
    bf__format(v->out->detail, sizeof v->out->detail, "%s", reason);
    bf_err err = validate_record(v, false, -1);
    return v->out->err = err;
}

/* Run and record one explicit validation. Releases the validation lock when it holds it
 * (held: the caller acquired it already). */
static bf_err validate_run(validate_ctx *v, bool held)
{
    bf_engine *e = v->e;
    bf_action_result *out = v->out;
    bf_state state = 0;
    int64_t generation = 0;
    char bound[BF_KEY_TEXT_MAX];
    bool empty = false, reached = false;
    char key_types[sizeof((bf_backfill *)NULL)->key_types + 72] = "";
    const bf_compiled *c = bf__registry_compiled(e->reg, v->id, NULL);
    bf_err err = validate_read(e, v->id, &state, &generation, bound, &empty, &reached, key_types,
                               sizeof key_types);
    if (err == BF_ERR_NOT_FOUND) {
        out->err = BF_ERR_NOT_FOUND;
        bf__copy(out->detail, sizeof out->detail, "rejected: backfill not found");
        err = validate_record(v, false, -1);
        if (err == BF_OK)
            err = BF_ERR_NOT_FOUND;
        out->err = err;
    } else if (err != BF_OK) {
        out->err = err;
    } else if ((out->prior = out->result = state, out->generation = generation,
                state == BF_STATE_PENDING)) {
        err = validate_current_state(v, "pending: validation does not run before start");
    } else if (c == NULL) {
        err = validate_current_state(v, "this process has no definition for the backfill");
    } else if (!validate_same_definition(key_types, c)) {
        /* fail closed: this definition would read the bound and checkpoint as other types */
        out->err = BF_ERR_INCOMPATIBLE;
        bf__copy(out->detail, sizeof out->detail,
                 "rejected: stored key types or definition differ from this process's");
        err = validate_record(v, false, -1);
        if (err == BF_OK)
            err = bf__diag(e, BF_ERR_INCOMPATIBLE,
                           "stored key types or definition differ from this process's");
        out->err = err;
    } else if (!held && (err = bf__validation_lock(e, v->id, &held)) != BF_OK) {
        out->err = err;
    } else if (!held) {
        err = validate_current_state(v, "coalesced: validation already in progress");
    } else {
        bf_validation_run run;
        int64_t started_us = bf__monotonic_us();
        err = bf__validation_run(e, c, false, bound, empty, NULL, NULL, &run);
        int64_t pass_us = bf__monotonic_us() - started_us;
        if (err != BF_OK) {
            char reason[BF_DIAG_MAX];
            bf__format(reason, sizeof reason, "validation could not complete: %s", e->diag);
            err = validate_current_state(v, reason);
        } else {
            out->validation = run.outcome;
            if (run.outcome == BF_VALIDATION_FAILURE && !reached && state != BF_STATE_COMPLETED)
                /* not a verdict on the backfill: it has not finished its batches */
                bf__format(out->detail, sizeof out->detail,
                           "%s; the checkpoint has not reached the bound (%s): the rows after it"
                           " are for the remaining batches",
                           run.detail, bf_state_name(state));
            else
                bf__copy(out->detail, sizeof out->detail, run.detail);
            bool completes = run.outcome == BF_VALIDATION_SUCCESS && state == BF_STATE_VALIDATING;
            err = out->err = validate_record(v, true, completes ? generation : -1);
            if (err == BF_OK) { /* recorded: one event per recorded explicit pass */
                bf_log_record rec = BF_LOG_RECORD_INIT;
                bool passed = run.outcome == BF_VALIDATION_SUCCESS;
                rec.level = passed ? BF_LOG_INFO : BF_LOG_WARN;
                rec.event = passed ? BF_EV_VALIDATION_PASSED : BF_EV_VALIDATION_FAILED;
                rec.id = v->id;
                rec.generation = generation;
                rec.batch_size = c->def->batch_size;
                rec.duration_us = pass_us;
                rec.reason = passed ? NULL
                             : run.verdict == BF_ERR_PREREQUISITE
                                 ? bf__error_class_name(BF_ERR_PREREQUISITE)
                                 : bf__error_class_name(BF_ERR_VALIDATION_FAILED);
                bf__log_event(e, &rec, "%s: explicit validation %s%s: %s", v->id,
                              passed ? "passed" : "failed", out->changed ? ", completed" : "",
                              run.detail);
            }
        }
    }
    if (held)
        bf__validation_unlock(e, v->id);
    return err;
}

bf_err bf_validate(bf_engine *e, const char *id, const bf_actor *who, bf_action_result *out)
{
    if (e == NULL || out == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    bf_err err = bf__ensure_conn(e);
    if (err != BF_OK)
        return out->err = err;
    size_t rlen = who && who->request_id ? strlen(who->request_id) : 1;
    if (!bf_id_valid(id) || rlen == 0 || rlen >= BF_REQUEST_ID_MAX) {
        bf__diag(e, BF_ERR_INVALID_ARGUMENT, "invalid stable id or request id");
        (void)bf_audit_rejection(e, "validate", id, who, BF_ERR_INVALID_ARGUMENT, NULL);
        return out->err = BF_ERR_INVALID_ARGUMENT;
    }
    validate_ctx v = {e, id, who, out};
    bool have_lock = false;
    /* the request record commits first, with no outcome, so a duplicate sees it in flight */
    if ((err = bf__begin(e, false)) != BF_OK)
        return out->err = err;
    bf_request_status rs;
    err = bf__request_begin(e, "validate", id, who, out, &rs);
    if (err == BF_OK)
        err = bf__commit(e);
    if (err != BF_OK) {
        bf__rollback(e);
        return out->err = err;
    }
    if (rs == BF_REQUEST_MISMATCH) {
        bf__diag(e, BF_ERR_INVALID_ARGUMENT, "request id was used for a different request");
        (void)bf_audit_rejection(e, "validate", id, who, BF_ERR_INVALID_ARGUMENT, e->diag);
        return out->err = BF_ERR_INVALID_ARGUMENT;
    }
    if (rs == BF_REQUEST_REPLAY) {
        bf_err stored = out->err;
        char outcome[BF_DIAG_MAX];
        bf__format(outcome, sizeof outcome, "replayed: %s: %s",
                   bf_validation_outcome_name(out->validation), out->detail);
        if ((err = bf__begin(e, false)) == BF_OK) {
            bf_audit_record rec = {
                id,     "validate", who, out->prior, out->result, out->prior != 0, out->generation,
                outcome};
            err = bf__audit(e, &rec);
            if (err == BF_OK)
                err = bf__commit(e);
            if (err != BF_OK)
                bf__rollback(e);
        }
        if (bf__get_row(e, id, false, &out->row) != BF_OK)
            memset(&out->row, 0, sizeof out->row);
        return out->err = err != BF_OK ? err : stored;
    }
    if (rs == BF_REQUEST_IN_PROGRESS) {
        /* the same request is running elsewhere, or its invocation died: the lock tells */
        if ((err = bf__validation_lock(e, id, &have_lock)) != BF_OK)
            return out->err = err;
        if (!have_lock) {
            memset(out, 0, sizeof *out);
            bf_state st = 0;
            int64_t gen = 0;
            char bound[BF_KEY_TEXT_MAX], key_types[sizeof out->row.key_types + 72];
            bool empty, reached;
            if (validate_read(e, id, &st, &gen, bound, &empty, &reached, key_types,
                              sizeof key_types) == BF_OK) {
                out->prior = out->result = st;
                out->generation = gen;
            }
            out->validation = BF_VALIDATION_CURRENT_STATE;
            bf__copy(out->detail, sizeof out->detail, "this request is still running");
            char outcome[BF_DIAG_MAX];
            bf__format(outcome, sizeof outcome, "coalesced: %s", out->detail);
            if ((err = bf__begin(e, false)) == BF_OK) {
                bf_audit_record rec = {id,
                                       "validate",
                                       who,
                                       out->prior,
                                       out->result,
                                       out->prior != 0,
                                       out->generation,
                                       outcome};
                err = bf__audit(e, &rec);
                err = err == BF_OK ? bf__commit(e) : err;
                if (err != BF_OK)
                    bf__rollback(e);
            }
            (void)bf__get_row(e, id, false, &out->row);
            return out->err = err;
        }
        memset(out, 0, sizeof *out);
    }
    err = validate_run(&v, have_lock);
    if (out->prior != 0 && bf__get_row(e, id, false, &out->row) != BF_OK)
        memset(&out->row, 0, sizeof out->row);
    if (err == BF_OK)
        bf__copy(e->diag, sizeof e->diag, out->detail);
    return err;
}
