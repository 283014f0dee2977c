/*
 * batch.c - one worker step's batches (worker.c drives the steps): the declarative form's CALL
 * of the loop procedure that compile.c generates, in one pipelined round trip, and the callback
 * form's batch, one transaction around the definition's mutate callback; plus the loop's own
 * account of a failed CALL. The fencing and the verdicts are in the SQL (compile.c, migrate.c
 * batch_verdict); this file sends it, reads what came back and classifies what failed.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "strbuf.h"
#include "worker.h"

/* ---- batches --------------------------------------------------------------------------- */

/* Read the results of one pipeline segment: ncmds commands and their sync. Keeps the result of
 * command keep; returns the first error. After the last segment (last), leaves the connection
 * out of pipeline mode. */
static bf_err pipeline_collect(bf_engine *e, int ncmds, int keep, PGresult **kept, bool last)
{
    bf_err first = BF_OK;
    for (int i = 0; i < ncmds; i++) {
        PGresult *r = bf__wait_result(e) ? PQgetResult(e->conn) : NULL;
        if (r == NULL) {
            first = first != BF_OK ? first : bf__pg_error(e, NULL, "batch");
            break;
        }
        ExecStatusType st = PQresultStatus(r);
        if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
            if (i == keep && kept != NULL)
                *kept = r;
            else
                PQclear(r);
        } else {
            if (st != PGRES_PIPELINE_ABORTED && first == BF_OK)
                first = bf__pg_error(e, r, "batch");
            PQclear(r);
        }
        PGresult *end = bf__wait_result(e) ? PQgetResult(e->conn) : NULL; /* ends the results */
        if (end != NULL)
            PQclear(end);
    }
    PGresult *sync = bf__wait_result(e) ? PQgetResult(e->conn) : NULL;
    bool synced = sync != NULL && PQresultStatus(sync) == PGRES_PIPELINE_SYNC;
    PQclear(sync);
    if (!synced || (last && PQexitPipelineMode(e->conn) != 1)) {
        /* the pipeline is in an unknown state: drop the connection, reconnect on next use */
        bf__log(e, BF_LOG_WARN, "batch pipeline desynchronised; reconnecting");
        PQfinish(e->conn);
        e->conn = NULL;
        if (first == BF_OK)
            first = bf__diag(e, BF_ERR_UNAVAILABLE, "batch: connection failure (08006)");
    }
    if (first != BF_OK && kept != NULL && *kept != NULL) {
        PQclear(*kept);
        *kept = NULL;
    }
    return first;
}

/* Create the definition's batch loop procedure on this connection, once per session. */
static bf_err loop_ensure(bf_engine *e, size_t index, const bf_compiled *c)
{
    if (index >= e->nprepared) { /* a definition that joined after the engine opened */
        size_t n = bf_registry_count(e->reg);
        unsigned char *grown = realloc(e->prepared, n);
        if (grown == NULL)
            return bf__diag(e, BF_ERR_NOMEM, "out of memory");
        memset(grown + e->nprepared, 0, n - e->nprepared);
        e->prepared = grown;
        e->nprepared = n;
    }
    if (e->prepared[index] & 1u)
        return BF_OK;
    bf_err err = bf__exec0(e, "create batch loop", c->sql_loop, 0, NULL);
    if (err == BF_OK)
        e->prepared[index] |= 1u;
    return err;
}

/* A step's outcome: batches committed (none: no admitted work remains after the checkpoint),
 * the keys they passed and the rows they changed. */

/*
 * The declarative form: one CALL of the definition's loop procedure, which commits up to
 * step_batches batches and starts none after step_ms, each batch its own fenced transaction.
 * One round trip: statement_timeout raised for the CALL, the CALL, statement_timeout restored
 * to the session's (two pipeline segments, so the restore runs even when the CALL failed).
 * statement_timeout bounds the whole CALL: step_ms plus one batch's statement_timeout_ms.
 */
/* cp: BF_KEY_TEXT_MAX bytes */
bf_err bf__batch_loop(bf_worker *w, int watch, loop_result *out, char *cp)
{
    bf_engine *e = w->e;
    bf_err err = bf__session_warm(e);
    if (err == BF_OK)
        err = loop_ensure(e, w->index, w->c);
    if (err != BF_OK)
        return err;
    char gen[24], limit[16], lease[16], max[16], step_ms[16], raise[96], restore[96];
    char size[16], watched[16];
    bf__param_int(gen, sizeof gen, w->generation);
    bf__param_int(limit, sizeof limit, w->c->def->batch_size); /* the verdict's bound */
    bf__param_int(size, sizeof size, w->size);                 /* the keyset's LIMIT */
    bf__param_int(watched, sizeof watched, watch);
    bf__param_int(lease, sizeof lease, e->lease_ms);
    bf__param_int(max, sizeof max, w->step_batches > 0 ? w->step_batches : e->step_batches);
    bf__param_int(step_ms, sizeof step_ms, e->step_ms);
    /* integers only: these cannot be cut */
    bf__format(raise, sizeof raise, "SET statement_timeout = %lld",
               (long long)e->step_ms + e->statement_timeout_ms);
    bf__format(restore, sizeof restore, "SET statement_timeout = %d", e->statement_timeout_ms);
    const char *params[] = {w->id,    gen,     e->owner,
                            w->bound, limit,   lease,
                            max,      step_ms, w->has_checkpoint ? w->checkpoint : NULL,
                            size,     watched};
    if (PQenterPipelineMode(e->conn) != 1)
        return bf__pg_error(e, NULL, "enter pipeline");
    bool sent = PQsendQueryParams(e->conn, raise, 0, NULL, NULL, NULL, NULL, 0) == 1 &&
                PQsendQueryParams(e->conn, w->c->sql_call, 11, NULL, params, NULL, NULL, 0) == 1 &&
                PQpipelineSync(e->conn) == 1 &&
                PQsendQueryParams(e->conn, restore, 0, NULL, NULL, NULL, NULL, 0) == 1 &&
                PQpipelineSync(e->conn) == 1;
    if (!sent) {
        bf__log(e, BF_LOG_WARN, "could not send batch: %s", PQerrorMessage(e->conn));
        PQfinish(e->conn);
        e->conn = NULL;
        return bf__diag(e, BF_ERR_UNAVAILABLE, "batch: connection failure (08006)");
    }
    PGresult *res = NULL;
    err = pipeline_collect(e, 2, 1, &res, false);
    if (e->conn != NULL) {
        bf_err reset = pipeline_collect(e, 1, -1, NULL, true);
        if (err == BF_OK)
            err = reset;
    }
    if (err != BF_OK) {
        PQclear(res);
        return err;
    }
    /* checkpoint, batches, rows_covered, rows_touched, waiters; the checkpoint fits (the schema's
     * checkpoint_text_length constraint refused the batch otherwise) */
    if (bf__key_field(e, cp, res, 0, 0) != BF_OK)
        err = bf__diag(e, BF_ERR_INTERNAL, "batch: a committed checkpoint does not fit");
    if (err != BF_OK) {
        PQclear(res);
        return err;
    }
    out->batches = (long)bf__field_i64(res, 0, 1);
    out->rows = (long)bf__field_i64(res, 0, 2);
    out->touched = (long)bf__field_i64(res, 0, 3);
    out->waiters = (long)bf__field_i64(res, 0, 4);
    PQclear(res);
    return BF_OK;
}

/* The callback batch: keys into bf_batch, the definition's statements, the fence, COMMIT. */
bf_err bf__batch_callback(bf_worker *w, int watch, loop_result *out, char *cp, char *detail,
                          size_t dcap)
{
    bf_engine *e = w->e;
    const bf_compiled *c = w->c;
    long *rows = &out->rows, *touched = &out->touched;
    char limit[16], size[16];
    bf__param_int(limit, sizeof limit, c->def->batch_size); /* the fence's bound */
    bf__param_int(size, sizeof size, w->size);              /* the keyset's LIMIT */
    const char *kp[] = {w->bound, size, w->has_checkpoint ? w->checkpoint : NULL};
    PGresult *r = NULL;
    bf_err err = bf__session_warm(e);
    if (err == BF_OK)
        err = bf__begin(e, false);
    if (err != BF_OK)
        return err;
    err = bf__exec0(e, "create bf_batch", c->sql_create_batch, 0, NULL);
    if (err == BF_OK)
        err = bf__exec(e, &r, "select batch", c->sql_keys[w->has_checkpoint ? 1 : 0],
                       w->has_checkpoint ? 3 : 2, kp);
    if (err != BF_OK) {
        bf__rollback(e);
        return err;
    }
    *rows = strtol(PQcmdTuples(r), NULL, 10);
    PQclear(r);
    if (*rows == 0) {
        bf__rollback(e);
        return BF_OK;
    }
    bf_txn txn;
    bf__txn_init(&txn, e, c->def->batch_size, *rows);
    err = bf__txn_verdict(&txn, c->def->mutate(&txn, c->def->arg), detail, dcap);
    if (err == BF_OK && watch > 0) { /* sessions this batch blocks, before its COMMIT */
        err = bf__exec(e, &r, "lock waiters", bf__throttle_blocked_sql, 0, NULL);
        if (err == BF_OK)
            out->waiters = (long)bf__field_i64(r, 0, 0);
        PQclear(r);
        r = NULL;
    }
    if (err != BF_OK) {
        bf__rollback(e);
        return err;
    }
    char gen[24], lease[16], nt[24], nk[24];
    bf__param_int(gen, sizeof gen, w->generation);
    bf__param_int(lease, sizeof lease, e->lease_ms);
    bf__param_int(nt, sizeof nt, txn.touched);
    bf__param_int(nk, sizeof nk, *rows); /* the keys in bf_batch, counted when selected */
    const char *fp[] = {w->id,    gen, e->owner, w->has_checkpoint ? w->checkpoint : NULL,
                        w->bound, nt,  lease,    nk,
                        limit};
    /* the fence and COMMIT in one round trip: once the fence holds the backfill row's lock,
     * nothing this process does (or fails to do: a stop, a hang) can delay the commit that
     * releases it. The fence raises when it matched nothing, so the COMMIT then finds an aborted
     * transaction and nothing commits. */
    if (PQenterPipelineMode(e->conn) != 1) {
        bf__rollback(e);
        return bf__pg_error(e, NULL, "enter pipeline");
    }
    bool sent = PQsendQueryParams(e->conn, c->sql_fence, 9, NULL, fp, NULL, NULL, 0) == 1 &&
                PQsendQueryParams(e->conn, "COMMIT", 0, NULL, NULL, NULL, NULL, 0) == 1 &&
                PQpipelineSync(e->conn) == 1;
    if (!sent) {
        bf__log(e, BF_LOG_WARN, "could not send batch commit: %s", PQerrorMessage(e->conn));
        PQfinish(e->conn);
        e->conn = NULL;
        return bf__diag(e, BF_ERR_UNAVAILABLE, "batch: connection failure (08006)");
    }
    r = NULL;
    err = pipeline_collect(e, 2, 0, &r, true);
    if (err == BF_OK && bf__key_field(e, cp, r, 0, 0) != BF_OK)
        err = bf__diag(e, BF_ERR_INTERNAL, "batch: a committed checkpoint does not fit");
    PQclear(r);
    if (err != BF_OK) {
        bf__rollback(e); /* the transaction the failed fence aborted */
        return err;
    }
    *touched = txn.touched;
    return BF_OK;
}

/* The declarative loop's own account of a CALL that failed (compile.c compile_loop): the
 * session setting its last committed batch wrote, "generation|start checkpoint|batches,keys,
 * rows|checkpoint". Only a value this claim's CALL from start_cp wrote counts; false when there
 * is none (no batch of the CALL committed). */
bool bf__loop_progress(bf_worker *w, const char *start_cp, int64_t *batches, int64_t *rows,
                       int64_t *touched, char *cp)
{
    PGresult *r = NULL;
    if (bf__exec(w->e, &r, "read loop progress",
                 "SELECT current_setting('buzz_backfill.progress', true)", 0, NULL) != BF_OK)
        return false;
    char v[BF_KEY_TEXT_MAX * 2 + 96];
    bf__copy(v, sizeof v, PQntuples(r) == 1 ? bf__field(r, 0, 0) : "");
    PQclear(r);
    char want[BF_KEY_TEXT_MAX + 32];
    bf__format(want, sizeof want, "%lld|%s|", (long long)w->generation, start_cp);
    size_t n = strlen(want);
    if (strncmp(v, want, n) != 0)
        return false;
    long long b = 0, k = 0, t = 0;
    int used = 0;
    if (sscanf(v + n, "%lld,%lld,%lld|%n", &b, &k, &t, &used) != 3 || used == 0 || b <= 0)
        return false;
    bf__copy(cp, BF_KEY_TEXT_MAX, v + n + used);
    *batches = b;
    *rows = k;
    *touched = t;
    return true;
}
