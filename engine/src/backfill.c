/*
 * backfill.c - the read model (one compact row per stable ID), the ordering key check,
 * registration and the readiness gate. Every read goes to PostgreSQL; nothing is cached.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "strbuf.h"

static bf_validation_outcome outcome_parse(const char *s)
{
    if (strcmp(s, "success") == 0)
        return BF_VALIDATION_SUCCESS;
    if (strcmp(s, "failure") == 0)
        return BF_VALIDATION_FAILURE;
    if (strcmp(s, "current-state") == 0)
        return BF_VALIDATION_CURRENT_STATE;
    return BF_VALIDATION_NONE;
}

/* A nullable timestamp column: *has, *at (microseconds since the epoch). */
static void field_time(const PGresult *r, int row, int col, bool *has, int64_t *at)
{
    *has = !bf__isnull(r, row, col);
    *at = bf__field_i64(r, row, col);
}

bool bf__row_from_result(const PGresult *r, int row, bf_backfill *out)
{
    memset(out, 0, sizeof *out);
    int c = 0;
    bf__copy(out->id, sizeof out->id, bf__field(r, row, c++));
    bf_state st = 0;
    if (bf_state_parse(bf__field(r, row, c++), &st) == BF_OK)
        out->state = st;
    out->required = bf__field_bool(r, row, c++);
    bf__copy(out->description, sizeof out->description, bf__field(r, row, c++));
    bf__copy(out->owner_meta, sizeof out->owner_meta, bf__field(r, row, c++));
    bf__copy(out->revision, sizeof out->revision, bf__field(r, row, c++));
    bf__copy(out->key_types, sizeof out->key_types, bf__field(r, row, c++));
    out->batch_size = (int)bf__field_i64(r, row, c++);
    out->has_bound = !bf__isnull(r, row, c);
    bf__copy(out->bound, sizeof out->bound, bf__field(r, row, c++));
    out->bound_empty = bf__field_bool(r, row, c++);
    out->has_checkpoint = !bf__isnull(r, row, c);
    bf__copy(out->checkpoint, sizeof out->checkpoint, bf__field(r, row, c++));
    out->generation = bf__field_i64(r, row, c++);
    bool owned = !bf__isnull(r, row, c);
    bf__copy(out->claim_owner, sizeof out->claim_owner, bf__field(r, row, c++));
    field_time(r, row, c++, &out->has_claim_expires, &out->claim_expires_at);
    out->attempts = (int)bf__field_i64(r, row, c++);
    field_time(r, row, c++, &out->has_next_attempt, &out->next_attempt_at);
    bf__copy(out->error_class, sizeof out->error_class, bf__field(r, row, c++));
    bf__copy(out->error_detail, sizeof out->error_detail, bf__field(r, row, c++));
    out->validation = outcome_parse(bf__field(r, row, c++));
    bf__copy(out->validation_detail, sizeof out->validation_detail, bf__field(r, row, c++));
    field_time(r, row, c++, &out->has_validated_at, &out->validated_at);
    bf__copy(out->validation_request, sizeof out->validation_request, bf__field(r, row, c++));
    out->rows_committed = bf__field_i64(r, row, c++);
    out->has_rows_covered = !bf__isnull(r, row, c);
    out->rows_covered = bf__field_i64(r, row, c++);
    out->batches_committed = bf__field_i64(r, row, c++);
    out->has_source_estimate = !bf__isnull(r, row, c);
    out->source_estimate = bf__field_i64(r, row, c++);
    out->has_batch_size_current = !bf__isnull(r, row, c);
    out->batch_size_current = (int)bf__field_i64(r, row, c++);
    int throttle = c; /* read below, once the time is known */
    c += 5;
    out->registered_at = bf__field_i64(r, row, c++);
    out->updated_at = bf__field_i64(r, row, c++);
    field_time(r, row, c++, &out->has_started_at, &out->started_at);
    field_time(r, row, c++, &out->has_last_progress_at, &out->last_progress_at);
    field_time(r, row, c++, &out->has_completed_at, &out->completed_at);
    bf_validation_progress *vp = &out->validation_progress;
    vp->present = !bf__isnull(r, row, c); /* v.owner is NOT NULL: NULL only without a row */
    bf__copy(vp->owner, sizeof vp->owner, bf__field(r, row, c++));
    vp->lifecycle = bf__field_bool(r, row, c++);
    int64_t v_expires = bf__field_i64(r, row, c++);
    vp->started_at = bf__field_i64(r, row, c++);
    vp->updated_at = bf__field_i64(r, row, c++);
    field_time(r, row, c++, &vp->has_finished_at, &vp->finished_at);
    vp->finished = vp->has_finished_at;
    vp->rows_checked = bf__field_i64(r, row, c++);
    vp->rows_needing_repair = bf__field_i64(r, row, c++);
    out->now = bf__field_i64(r, row, c++);
    /* Decided against the row's clock: a claim is live, and its holder's throttle fields are
     * shown, while it has not expired; a validation runs while unfinished and not expired. */
    bool live = out->has_claim_expires && out->claim_expires_at > out->now;
    out->claimed = owned && live;
    vp->running = vp->present && !vp->finished && v_expires > out->now;
    if (live) {
        bf__copy(out->throttle_signal, sizeof out->throttle_signal, bf__field(r, row, throttle));
        bf__copy(out->throttle_value, sizeof out->throttle_value, bf__field(r, row, throttle + 1));
        field_time(r, row, throttle + 2, &out->has_throttled_since, &out->throttled_since);
        bf__copy(out->slow_value, sizeof out->slow_value, bf__field(r, row, throttle + 3));
        field_time(r, row, throttle + 4, &out->has_slow_since, &out->slow_since);
    }
    return bf__field_bool(r, row, c++); /* b.watched: the watch is read apart (watch.c) */
}

/* The index of id in out[0..n), looked for from hint on (the counts come in the order of the
 * rows): -1 when absent. */
static int backfill_find(const bf_backfill *out, int n, const char *id, int hint)
{
    for (int k = 0; k < n; k++) {
        int i = (hint + k) % n;
        if (strcmp(out[i].id, id) == 0)
            return i;
    }
    return -1;
}

/* Send the read of the watch of the rows that have one (watched); *sent false when none has
 * one (every read by default): then nothing is in flight. */
static bf_err watch_send(bf_engine *e, const bf_backfill *out, const bool *watched, int n,
                         bool *sent)
{
    *sent = false;
    int wanted = 0;
    for (int i = 0; i < n; i++)
        wanted += watched[i];
    if (wanted == 0)
        return BF_OK; /* no watch row: nothing to read (every read by default) */
    bf_strbuf ids;
    bf__strbuf_init(&ids);
    bf__strbuf_add(&ids, "{");
    for (int i = 0; i < n; i++)
        if (watched[i]) /* IDs are [a-z0-9._-] (bf_id_valid) */
            bf__strbuf_add_element(&ids, out[i].id);
    bf__strbuf_add(&ids, "}");
    if (ids.failed) {
        bf__strbuf_fini(&ids);
        return bf__diag(e, BF_ERR_NOMEM, "out of memory");
    }
    static const char sql[] = BF_WATCH_SQL " ORDER BY w.backfill_id";
    const char *params[] = {ids.data};
    bf_err err = bf__send_stmt(e, "read old-writer watch", BF_STMT_WATCH, sql, 1, params);
    bf__strbuf_fini(&ids);
    *sent = err == BF_OK;
    return err;
}

/* The watches watch_send asked for, into the rows they belong to (block: wait for them; else
 * *done false while they are still to come). */
static bf_err watch_recv(bf_engine *e, bf_backfill *out, int n, bool block, bool *done)
{
    PGresult *r = NULL;
    bf_err err = bf__recv(e, &r, "read old-writer watch", block, done);
    if (err != BF_OK || !*done)
        return err;
    int hint = 0;
    for (int row = 0; row < PQntuples(r); row++) {
        int i = backfill_find(out, n, bf__field(r, row, 0), hint);
        if (i < 0)
            continue;
        bf_old_writers *ow = &out[i].old_writers;
        bf__old_writer_counts_from_result(r, row, 3, ow);
        ow->watching = bf__field_bool(r, row, 1);
        bf__copy(ow->mode, sizeof ow->mode, bf__field(r, row, 2));
        hint = i + 1;
    }
    PQclear(r);
    return BF_OK;
}

bf_err bf__watch_read(bf_engine *e, bf_backfill *out, const bool *watched, int n)
{
    bool sent, done;
    bf_err err = watch_send(e, out, watched, n, &sent);
    return err != BF_OK || !sent ? err : watch_recv(e, out, n, true, &done);
}

static const char get_sql[] =
    "SELECT " BF_BACKFILL_COLUMNS " FROM " BF_BACKFILL_FROM " WHERE b.id = $1";

/* bf__get_row, and under the row lock the digest of the definition that registered it (the
 * locking read's last column: only Start needs it, so Get and List do not read it). */
static bf_err get_row(bf_engine *e, const char *id, bool for_update, bf_backfill *out, char *digest)
{
    static const char get_for_update_sql[] =
        "SELECT " BF_BACKFILL_COLUMNS ", b.definition_digest FROM " BF_BACKFILL_FROM
        " WHERE b.id = $1 FOR UPDATE OF b";
    const char *sql = for_update ? get_for_update_sql : get_sql;
    PGresult *r = NULL;
    const char *params[] = {id};
    bf_err err = bf__exec_stmt(e, &r, "read backfill",
                               for_update ? BF_STMT_GET_FOR_UPDATE : BF_STMT_GET, sql, 1, params);
    if (err != BF_OK)
        return err;
    if (PQntuples(r) == 0) {
        PQclear(r);
        return bf__diag(e, BF_ERR_NOT_FOUND, "backfill not found");
    }
    bool watched = bf__row_from_result(r, 0, out);
    if (digest != NULL)
        bf__copy(digest, BF_DIGEST_HEX, for_update ? bf__field(r, 0, PQnfields(r) - 1) : "");
    PQclear(r);
    return bf__watch_read(e, out, &watched, 1);
}

bf_err bf__get_row(bf_engine *e, const char *id, bool for_update, bf_backfill *out)
{
    return get_row(e, id, for_update, out, NULL);
}

bf_err bf__lock_row(bf_engine *e, const char *id, bf_backfill *out, char *digest)
{
    return get_row(e, id, true, out, digest);
}

bf_err bf_get_begin(bf_engine *e, const char *id)
{
    if (e == NULL || !bf_id_valid(id) || e->async_op != BF_ASYNC_NONE)
        return BF_ERR_INVALID_ARGUMENT;
    bf_err err = bf__ensure_conn(e);
    if (err == BF_OK) {
        const char *params[] = {id};
        err = bf__send_stmt(e, "read backfill", BF_STMT_GET, get_sql, 1, params);
    }
    if (err == BF_OK) {
        e->async_op = BF_ASYNC_GET;
        e->async_step = 0;
    }
    return err;
}

/* bf_get_end, or with block the whole wait (bf_get): the row, then its old-writer counts when
 * it has a watch. */
static bf_err get_finish(bf_engine *e, bf_backfill *out, bool block, bool *done)
{
    if (e == NULL || out == NULL || done == NULL || e->async_op != BF_ASYNC_GET)
        return BF_ERR_INVALID_ARGUMENT;
    bf_err err = BF_OK;
    if (e->async_step == 0) {
        PGresult *r = NULL;
        err = bf__recv(e, &r, "read backfill", block, done);
        if (err == BF_OK && !*done)
            return BF_OK;
        if (err == BF_OK && PQntuples(r) == 0)
            err = bf__diag(e, BF_ERR_NOT_FOUND, "backfill not found");
        bool sent = false;
        if (err == BF_OK) {
            bool watched = bf__row_from_result(r, 0, out);
            err = watch_send(e, out, &watched, 1, &sent);
        }
        PQclear(r);
        if (err != BF_OK || !sent) {
            e->async_op = BF_ASYNC_NONE;
            *done = true;
            return err;
        }
        e->async_step = 1;
    }
    err = watch_recv(e, out, 1, block, done); /* an error ends it: *done */
    if (*done)
        e->async_op = BF_ASYNC_NONE;
    return err;
}

bf_err bf_get_end(bf_engine *e, bf_backfill *out, bool *done)
{
    return get_finish(e, out, false, done);
}

bf_err bf_get(bf_engine *e, const char *id, bf_backfill *out)
{
    if (e == NULL || out == NULL || !bf_id_valid(id))
        return BF_ERR_INVALID_ARGUMENT;
    bf_err err = bf_get_begin(e, id);
    bool done;
    return err != BF_OK ? err : get_finish(e, out, true, &done);
}

bf_err bf_list(bf_engine *e, bf_state state_filter, const char *after_id, bf_backfill *out,
               int limit, int *count_out)
{
    if (e == NULL || out == NULL || count_out == NULL || limit < 1 || limit > BF_LIST_MAX)
        return BF_ERR_INVALID_ARGUMENT;
    if (after_id != NULL && after_id[0] != '\0' && !bf_id_valid(after_id))
        return BF_ERR_INVALID_ARGUMENT;
    bf_err err = bf__ensure_conn(e);
    if (err != BF_OK)
        return err;
    static const char sql[] =
        "SELECT " BF_BACKFILL_COLUMNS " FROM " BF_BACKFILL_FROM
        " WHERE ($1::text IS NULL OR b.state = $1) AND ($2::text IS NULL OR b.id > $2)"
        " ORDER BY b.id LIMIT $3::integer";
    char lim[16];
    bf__format(lim, sizeof lim, "%d", limit);
    const char *params[] = {
        state_filter ? bf_state_name(state_filter) : NULL,
        after_id && after_id[0] ? after_id : NULL,
        lim,
    };
    PGresult *r = NULL;
    if ((err = bf__exec_binary(e, &r, "list backfills", sql, 3, params)) != BF_OK)
        return err;
    int n = PQntuples(r);
    bool watched[BF_LIST_MAX];
    for (int i = 0; i < n; i++)
        watched[i] = bf__row_from_result(r, i, &out[i]);
    PQclear(r);
    if ((err = bf__watch_read(e, out, watched, n)) != BF_OK)
        return err;
    *count_out = n;
    return BF_OK;
}

bf_err bf__key_unique(bf_engine *e, const bf_compiled *c)
{
    PGresult *r = NULL;
    bf_err err = bf__exec(e, &r, "check key uniqueness", c->sql_unique, 0, NULL);
    if (err != BF_OK)
        return err;
    bool missing = bf__isnull(r, 0, 0);
    bool nullable = strcmp(bf__field(r, 0, 0), "nullable") == 0;
    bool unique = strcmp(bf__field(r, 0, 0), "unique") == 0;
    PQclear(r);
    if (missing)
        return bf__diag(e, BF_ERR_PREREQUISITE, "prerequisite not met: source table is missing");
    if (nullable)
        return bf__diag(e, BF_ERR_DEFINITION,
                        "ordering key column is nullable: declare it NOT NULL");
    if (!unique)
        return bf__diag(e, BF_ERR_DEFINITION,
                        "ordering key is not unique: no unique index covers its columns");
    return BF_OK;
}

/* ---- registration ---------------------------------------------------------------------- */

static bf_err register_chunk(bf_engine *e, const bf_definition *const *defs, size_t n,
                             bf_err *errs);

/* Why the fences of the registration upsert left def's row alone (register_chunk's
 * BF_ERR_INCOMPATIBLE): other key types, or another definition's digest. */
static bf_err register_refused(bf_engine *e, const bf_definition *def, const bf_compiled *c)
{
    PGresult *r = NULL;
    bf_err err;
    const char *kp[] = {def->id, c->key_types};
    if ((err = bf__exec(e, &r, "read key types",
                        "SELECT key_types = $2 FROM buzz_backfill.backfill WHERE id = $1", 2,
                        kp)) != BF_OK)
        return err;
    bool same_keys = PQntuples(r) == 1 && bf__field_bool(r, 0, 0);
    PQclear(r);
    if (!same_keys)
        return bf__diag(e, BF_ERR_INCOMPATIBLE,
                        "backfill %s was stored with other key types than this definition's",
                        def->id);
    return bf__diag(e, BF_ERR_INCOMPATIBLE,
                    "backfill %s was registered by a materially different definition (table,"
                    " key or SQL differ): a changed definition needs a new stable ID",
                    def->id);
}

bf_err bf_register(bf_engine *e, const bf_definition *def)
{
    if (e == NULL || def == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    const bf_compiled *c = bf__registry_compiled(e->reg, def->id, NULL);
    if (c == NULL || c->def != def)
        return bf__diag(e, BF_ERR_INVALID_ARGUMENT, "definition is not in this registry");
    bf_err err = bf__ensure_conn(e);
    if (err != BF_OK)
        return err;
    /* Converges on one row per stable ID whatever the order or repetition (register_many_sql,
     * one row of it). Metadata is last-registration-wins; lifecycle, bound, checkpoint and
     * generation are never touched. A row whose key types differ cannot be interpreted by this
     * definition, and one stored by a materially different definition (its digest, kept from
     * the first registration) is not this definition's work: fail closed. */
    bf_err one = BF_OK;
    if ((err = register_chunk(e, &def, 1, &one)) != BF_OK)
        return err;
    return one == BF_OK ? BF_OK : register_refused(e, def, c);
}

/* Append s to a text[] literal as one quoted element ("..." with " and \ escaped). */
static void register_element(bf_strbuf *sb, bool first, const char *s)
{
    bf__strbuf_add(sb, first ? "\"" : ",\"");
    while (*s != '\0') {
        size_t run = strcspn(s, "\"\\");
        if (run > 0)
            bf__strbuf_addf(sb, "%.*s", (int)run, s);
        s += run;
        if (*s != '\0') {
            bf__strbuf_addf(sb, "\\%c", *s);
            s++;
        }
    }
    bf__strbuf_add(sb, "\"");
}

#define REGISTER_COLUMNS  8
#define BF_REGISTER_CHUNK 1000 /* definitions per statement */

/* The upsert of bf_register() for a set of rows: one array parameter per column, unnested; the
 * IDs registered come back in byte order (COLLATE "C", strcmp's) to be merged with the input.
 * A row already stored exactly as given (every column the same, the digest recorded) is not
 * written again (`same`): a daemon's restart registered every definition anew, each an update
 * with its new row version, WAL, index entries and a row lock, for nothing (issue 26: a
 * thousand of them on every restart); it counts as registered. Both reads of the table see the
 * statement's snapshot; a row inserted or changed meanwhile by another process goes through the
 * upsert (its conflict path sees the newest version) and its fences as before. */
static const char register_many_sql[] =
    "WITH i AS (SELECT * FROM unnest($1::text[], $2::text[], $3::integer[], $4::boolean[],"
    " $5::text[], $6::text[], $7::text[], $8::text[]) AS i(id, key_types, batch_size, required,"
    " description, owner_meta, revision, definition_digest)),"
    " same AS (SELECT i.id FROM i JOIN buzz_backfill.backfill b ON b.id = i.id"
    " WHERE b.key_types = i.key_types AND b.definition_digest = i.definition_digest"
    " AND b.batch_size = i.batch_size AND b.required = i.required"
    " AND b.description IS NOT DISTINCT FROM i.description"
    " AND b.owner_meta IS NOT DISTINCT FROM i.owner_meta"
    " AND b.revision IS NOT DISTINCT FROM i.revision),"
    " written AS (INSERT INTO buzz_backfill.backfill AS b (id, key_types, batch_size, required,"
    " description, owner_meta, revision, definition_digest)"
    " SELECT * FROM i WHERE i.id NOT IN (SELECT id FROM same)"
    " ON CONFLICT (id) DO UPDATE SET batch_size = EXCLUDED.batch_size,"
    " required = EXCLUDED.required, description = EXCLUDED.description,"
    " owner_meta = EXCLUDED.owner_meta, revision = EXCLUDED.revision,"
    " definition_digest = coalesce(b.definition_digest, EXCLUDED.definition_digest),"
    " updated_at = clock_timestamp()"
    " WHERE b.key_types = EXCLUDED.key_types AND (b.definition_digest IS NULL"
    " OR b.definition_digest = EXCLUDED.definition_digest)"
    " RETURNING b.id)"
    " SELECT id FROM (SELECT id FROM written UNION ALL SELECT id FROM same) r"
    " ORDER BY id COLLATE \"C\"";

typedef struct register_order {
    const char *id;
    size_t i;
} register_order;

static int register_order_cmp(const void *a, const void *b)
{
    return strcmp(((const register_order *)a)->id, ((const register_order *)b)->id);
}

/* Register defs[0..n) (checked to be the registry's) in one statement; errs[i] is BF_OK for a
 * row written, BF_ERR_INCOMPATIBLE for one the fences left alone. */
static bf_err register_chunk(bf_engine *e, const bf_definition *const *defs, size_t n, bf_err *errs)
{
    bf_strbuf col[REGISTER_COLUMNS];
    for (int k = 0; k < REGISTER_COLUMNS; k++) {
        bf__strbuf_init(&col[k]);
        bf__strbuf_add(&col[k], "{");
    }
    for (size_t i = 0; i < n; i++) {
        const bf_definition *d = defs[i];
        const bf_compiled *c = bf__registry_compiled(e->reg, d->id, NULL);
        char batch[16];
        bf__format(batch, sizeof batch, "%d", d->batch_size);
        const char *v[REGISTER_COLUMNS] = {
            d->id,
            c->key_types,
            batch,
            d->required ? "true" : "false",
            d->description ? d->description : "",
            d->owner ? d->owner : "",
            d->revision ? d->revision : "",
            c->digest,
        };
        for (int k = 0; k < REGISTER_COLUMNS; k++)
            register_element(&col[k], i == 0, v[k]);
    }
    char *params[REGISTER_COLUMNS];
    register_order *order = malloc(n * sizeof *order);
    bool nomem = order == NULL;
    for (int k = 0; k < REGISTER_COLUMNS; k++) {
        bf__strbuf_add(&col[k], "}");
        params[k] = bf__strbuf_take(&col[k]);
        nomem = nomem || params[k] == NULL;
    }
    PGresult *r = NULL;
    bf_err err = nomem ? BF_ERR_NOMEM
                       : bf__exec(e, &r, "register definitions", register_many_sql,
                                  REGISTER_COLUMNS, (const char *const *)params);
    for (int k = 0; k < REGISTER_COLUMNS; k++)
        free(params[k]);
    if (err != BF_OK) {
        free(order);
        return err;
    }
    /* a row not returned was left alone by the fences: merge the sorted IDs */
    for (size_t i = 0; i < n; i++)
        order[i] = (register_order){defs[i]->id, i};
    qsort(order, n, sizeof *order, register_order_cmp);
    int rows = PQntuples(r), j = 0;
    for (size_t k = 0; k < n; k++) {
        while (j < rows && strcmp(bf__field(r, j, 0), order[k].id) < 0)
            j++;
        bool written = j < rows && strcmp(bf__field(r, j, 0), order[k].id) == 0;
        errs[order[k].i] = written ? BF_OK : BF_ERR_INCOMPATIBLE;
    }
    PQclear(r);
    free(order);
    return BF_OK;
}

bf_err bf_register_many(bf_engine *e, const bf_definition *const *defs, size_t n, bf_err *errs)
{
    if (e == NULL || (n > 0 && (defs == NULL || errs == NULL)))
        return BF_ERR_INVALID_ARGUMENT;
    for (size_t i = 0; i < n; i++) {
        const bf_compiled *c = defs[i] ? bf__registry_compiled(e->reg, defs[i]->id, NULL) : NULL;
        if (c == NULL || c->def != defs[i])
            return bf__diag(e, BF_ERR_INVALID_ARGUMENT, "definition is not in this registry");
    }
    bf_err err = n > 0 ? bf__ensure_conn(e) : BF_OK;
    for (size_t at = 0; err == BF_OK && at < n; at += BF_REGISTER_CHUNK) {
        size_t m = n - at < BF_REGISTER_CHUNK ? n - at : BF_REGISTER_CHUNK;
        err = register_chunk(e, defs + at, m, errs + at);
    }
    return err;
}

bf_err bf_register_all(bf_engine *e)
{
    if (e == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    for (size_t i = 0; i < bf_registry_count(e->reg); i++) {
        bf_err err = bf_register(e, bf_registry_at(e->reg, i));
        if (err != BF_OK)
            return err;
    }
    return BF_OK;
}

/* ---- readiness gate -------------------------------------------------------------------- */

int bf__gate_rows(const PGresult *r, int first, int col, bf_gate_entry *ids, int max)
{
    int n = PQntuples(r) - first;
    for (int i = 0; i < n && i < max; i++) {
        bf__copy(ids[i].id, sizeof ids[i].id, bf__field(r, first + i, col));
        bf_state st = 0;
        (void)bf_state_parse(bf__field(r, first + i, col + 1), &st);
        ids[i].state = st;
    }
    return n;
}

bf_err bf_gate(bf_engine *e, bf_gate_entry *ids, int max, int *gating_out)
{
    if (e == NULL || gating_out == NULL || max < 0 || (max > 0 && ids == NULL))
        return BF_ERR_INVALID_ARGUMENT;
    bf_err err = bf__ensure_conn(e);
    if (err != BF_OK)
        return err;
    /* a required ID without a row gates too (state NULL: not registered) */
    const char *params[] = {bf__registry_ids(e->reg, true)};
    PGresult *r = NULL;
    err = bf__exec_stmt(e, &r, "readiness gate", BF_STMT_GATE,
                        "SELECT r.id, b.state FROM unnest($1::text[]) AS r(id)"
                        " LEFT JOIN buzz_backfill.backfill b ON b.id = r.id"
                        " WHERE b.id IS NULL OR b.state <> 'completed' ORDER BY r.id",
                        1, params);
    if (err != BF_OK)
        return err;
    *gating_out = bf__gate_rows(r, 0, 0, ids, max);
    PQclear(r);
    return BF_OK;
}
