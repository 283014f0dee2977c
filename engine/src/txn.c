/*
 * txn.c - the transaction a definition's callback borrows. It exposes statements, never the
 * connection, so that every row a callback touches is counted against the batch bound and the
 * first database error is kept for classification whatever the callback returns. The bound
 * counts rows written; rows a query returns are not touched and do not count.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static long txn_rows(const PGresult *r)
{
    if (PQresultStatus(r) == PGRES_TUPLES_OK)
        return PQntuples(r);
    const char *n = PQcmdTuples((PGresult *)r);
    return n[0] ? strtol(n, NULL, 10) : 0;
}

/* Rows a statement wrote (INSERT, UPDATE, DELETE, MERGE): what the batch bound limits. Rows a
 * query only reads do not count. */
static long txn_touched(PGresult *r)
{
    static const char *const writes[] = {"INSERT", "UPDATE", "DELETE", "MERGE"};
    const char *tag = PQcmdStatus(r);
    for (size_t i = 0; i < BF_ARRAY_LEN(writes); i++)
        if (strncmp(tag, writes[i], strlen(writes[i])) == 0)
            return strtol(PQcmdTuples(r), NULL, 10);
    return 0;
}

static bf_err txn_run(bf_txn *txn, PGresult **out, const char *sql, int nparams,
                      const char *const *params)
{
    if (txn == NULL || sql == NULL || nparams < 0 || (nparams > 0 && params == NULL))
        return BF_ERR_INVALID_ARGUMENT;
    if (txn->first_err != BF_OK) /* the transaction already failed; nothing more runs */
        return txn->first_err;
    PGresult *r = NULL;
    bf_err err = bf__exec(txn->engine, &r, "definition statement", sql, nparams, params);
    if (err != BF_OK)
        return txn->first_err = err;
    long rows = txn_touched(r);
    if (rows > txn->limit - txn->touched) {
        PQclear(r);
        bf__diag(txn->engine, BF_ERR_BATCH_BOUND, "batch touched more than its %ld rows",
                 txn->limit);
        return txn->first_err = BF_ERR_BATCH_BOUND;
    }
    txn->touched += rows;
    *out = r;
    return BF_OK;
}

bf_err bf_txn_exec(bf_txn *txn, const char *sql, int nparams, const char *const *params,
                   long *rows_out)
{
    PGresult *r = NULL;
    bf_err err = txn_run(txn, &r, sql, nparams, params);
    if (err != BF_OK)
        return err;
    if (rows_out != NULL)
        *rows_out = txn_rows(r);
    PQclear(r);
    return BF_OK;
}

bf_err bf_txn_query_int(bf_txn *txn, const char *sql, int nparams, const char *const *params,
                        long long *value_out)
{
    PGresult *r = NULL;
    bf_err err = txn_run(txn, &r, sql, nparams, params);
    if (err != BF_OK)
        return err;
    long long v = 0;
    if (PQntuples(r) > 0 && PQnfields(r) > 0 && !PQgetisnull(r, 0, 0))
        v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    if (value_out != NULL)
        *value_out = v;
    return BF_OK;
}

void bf_txn_set_diag(bf_txn *txn, const char *fmt, ...)
{
    if (txn == NULL)
        return;
    va_list ap;
    va_start(ap, fmt);
    bf__vformat(txn->diag, sizeof txn->diag, fmt, ap);
    va_end(ap);
    txn->diag_set = true;
}

long bf_txn_batch_rows(const bf_txn *txn)
{
    return txn ? txn->batch_rows : 0;
}

void bf__txn_init(bf_txn *txn, bf_engine *e, long limit, long batch_rows)
{
    memset(txn, 0, sizeof *txn);
    txn->engine = e;
    txn->limit = limit;
    txn->batch_rows = batch_rows;
}

/* Combine the callback's verdict with what the engine saw: a database error wins. */
bf_err bf__txn_verdict(bf_txn *txn, bf_err callback_verdict, char *detail, size_t cap)
{
    bf_err err = txn->first_err != BF_OK ? txn->first_err : callback_verdict;
    if (txn->first_err != BF_OK)
        bf__copy(detail, cap, txn->engine->diag);
    else if (txn->diag_set)
        bf__copy(detail, cap, txn->diag);
    else if (err != BF_OK)
        bf__format(detail, cap, "definition callback: %s", bf_err_str(err));
    return err;
}
