/*
 * compile.c - the SQL the engine derives from one definition, built once when the definition
 * joins a registry (registry.c): the batch loop procedure, the callback forms' statements, the
 * validation chunks, the bound capture and the catalog checks.
 *
 * Design notes: keys are compared as typed row values, "(t.a, t.b) > (($4::text[])[1]::T1,
 * ($4::text[])[2]::T2)", so a compound key with ties on its first column neither skips nor
 * repeats rows, and a btree index on the key serves every keyset step. Each statement exists
 * in two variants, before any checkpoint and after one, so that no "$n IS NULL OR" defeats the
 * index. Identifiers are validated by registry.c and quoted here; needs_repair, update_set and
 * prerequisite are application code (definitions are not runtime input) and are embedded as
 * written.
 *
 * Plan stability (docs/engine.md "Plans"): PostgreSQL estimates a row comparison from its first
 * column alone, and two of them independently, so "(a, b) > (x, y) AND (a, b) <= (z, w)" over a
 * narrow range was estimated at a fifth of the table, and a mutation filtered that way turned
 * into a sequential scan of the whole table once the table was analyzed. Two rules keep every
 * batch an index range scan whatever the statistics say: every key range of a compound key
 * also bounds its leading column on its own ("a >= x AND a <= z": redundant, but a range the
 * planner estimates from the column's histogram, and with unknown values, in a generic plan,
 * as a narrow one). What statistics cannot fix (no index on the key, a leading column with a
 * handful of values) the preflight finds before the first batch (preflight.c).
 */
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "strbuf.h"
/* ---- SQL fragments --------------------------------------------------------------------- */

static void add_table(bf_strbuf *sb, const char *table)
{
    const char *dot = strchr(table, '.');
    if (dot == NULL)
        bf__strbuf_addf(sb, "\"%s\"", table);
    else
        bf__strbuf_addf(sb, "\"%.*s\".\"%s\"", (int)(dot - table), table, dot + 1);
}

/* p."a", p."b" [DESC] */
static void add_cols(bf_strbuf *sb, const bf_definition *d, const char *p, const char *suffix)
{
    for (int i = 0; i < d->nkey; i++)
        bf__strbuf_addf(sb, "%s%s.\"%s\"%s", i ? ", " : "", p, d->key[i].name, suffix);
}

/* p."a"  or  (p."a", p."b") */
static void add_tuple(bf_strbuf *sb, const bf_definition *d, const char *p)
{
    if (d->nkey > 1)
        bf__strbuf_add(sb, "(");
    add_cols(sb, d, p, "");
    if (d->nkey > 1)
        bf__strbuf_add(sb, ")");
}

/* Where a key value comes from: a text[] parameter ("($n::text[])[i]::Ti"), or the variables
 * of the batch loop procedure ("bf.<var>i"). */
typedef struct key_ref {
    int param; /* > 0: $param::text[] */
    char var;  /* else, when not 0: the loop's variables bf.<var>1, bf.<var>2, ... */
} key_ref;

#define KEY_NONE        ((key_ref){0, 0})
#define KEY_PARAM(n)    ((key_ref){(n), 0})
#define KEY_VAR(letter) ((key_ref){0, (letter)})

static bool key_ref_set(key_ref r)
{
    return r.param > 0 || r.var != 0;
}

/* key column i's value */
static void add_value_col(bf_strbuf *sb, const bf_definition *d, key_ref r, int i)
{
    if (r.param > 0)
        bf__strbuf_addf(sb, "($%d::text[])[%d]::%s", r.param, i + 1,
                        bf_key_type_name(d->key[i].type));
    else
        bf__strbuf_addf(sb, "bf.%c%d", r.var, i + 1);
}

/* one key value, or a row of them for a compound key */
static void add_value(bf_strbuf *sb, const bf_definition *d, key_ref r)
{
    if (d->nkey > 1)
        bf__strbuf_add(sb, "(");
    for (int i = 0; i < d->nkey; i++) {
        bf__strbuf_add(sb, i ? ", " : "");
        add_value_col(sb, d, r, i);
    }
    if (d->nkey > 1)
        bf__strbuf_add(sb, ")");
}

static void add_param(bf_strbuf *sb, const bf_definition *d, int n)
{
    add_value(sb, d, KEY_PARAM(n));
}

/* ARRAY[p."a"::text, p."b"::text] */
static void add_text_array(bf_strbuf *sb, const bf_definition *d, const char *p)
{
    bf__strbuf_add(sb, "ARRAY[");
    for (int i = 0; i < d->nkey; i++)
        bf__strbuf_addf(sb, "%s%s.\"%s\"::text", i ? ", " : "", p, d->key[i].name);
    bf__strbuf_add(sb, "]");
}

/* The first key in key order (last: the greatest) of the rows "alias" of from, as a text[]
 * literal: SELECT ARRAY[alias.keys::text]::text FROM <from> alias[<where>] ORDER BY alias.keys
 * [DESC] LIMIT 1. from is a table (quoted by add_table) when table is set, else SQL as given. */
static void add_key_select(bf_strbuf *sb, const bf_definition *d, const char *table,
                           const char *from, const char *alias, const char *where, bool last)
{
    bf__strbuf_add(sb, "SELECT ");
    add_text_array(sb, d, alias);
    bf__strbuf_add(sb, "::text FROM ");
    if (table != NULL)
        add_table(sb, table);
    else
        bf__strbuf_add(sb, from);
    bf__strbuf_addf(sb, " %s%s ORDER BY ", alias, where);
    add_cols(sb, d, alias, last ? " DESC" : "");
    bf__strbuf_add(sb, " LIMIT 1");
}

/* t.<key> > after AND t.<key> <= bound  (after omitted when not set). A compound key's range
 * also bounds its leading column alone (t.a >= after.a AND t.a <= bound.a): redundant, but
 * PostgreSQL estimates a row comparison from its first column and two of them independently
 * (a one-second range of a million rows was estimated at a fifth of the table), while a range
 * on one column is estimated from its histogram, so the batch stays an index range scan. */
static void add_range(bf_strbuf *sb, const bf_definition *d, key_ref after, key_ref bound)
{
    if (key_ref_set(after)) {
        add_tuple(sb, d, "t");
        bf__strbuf_add(sb, " > ");
        add_value(sb, d, after);
        bf__strbuf_add(sb, " AND ");
    }
    add_tuple(sb, d, "t");
    bf__strbuf_add(sb, " <= ");
    add_value(sb, d, bound);
    if (d->nkey == 1)
        return;
    if (key_ref_set(after)) {
        bf__strbuf_addf(sb, " AND t.\"%s\" >= ", d->key[0].name);
        add_value_col(sb, d, after, 0);
    }
    bf__strbuf_addf(sb, " AND t.\"%s\" <= ", d->key[0].name);
    add_value_col(sb, d, bound, 0);
}

/* SELECT t.keys FROM table t WHERE range ORDER BY keys LIMIT limit */
static void add_keyset(bf_strbuf *sb, const bf_definition *d, key_ref after, key_ref bound,
                       const char *limit)
{
    bf__strbuf_add(sb, "SELECT ");
    add_cols(sb, d, "t", "");
    bf__strbuf_add(sb, " FROM ");
    add_table(sb, d->table);
    bf__strbuf_add(sb, " t WHERE ");
    add_range(sb, d, after, bound);
    bf__strbuf_add(sb, " ORDER BY ");
    add_cols(sb, d, "t", "");
    bf__strbuf_addf(sb, " LIMIT %s", limit);
}

/* The fence shared by both batch forms, as SQL expressions of the form that uses it. */
typedef struct fence_sql {
    const char *id, *generation, *owner, *old_checkpoint; /* what the row must still hold */
    const char *new_checkpoint;                           /* text[] */
    const char *touched;                                  /* rows the batch changed */
    const char *covered;                                  /* keys it passed (the batch's size) */
    const char *lease_ms;
} fence_sql;

/* The fenced checkpoint advance; the WHERE checks lifecycle, generation, owner, live claim and
 * CAS on the old checkpoint. The caller appends: the new checkpoint strictly after the old one
 * and not beyond the bound. */
static void add_fence(bf_strbuf *sb, const fence_sql *f)
{
    bf__strbuf_addf(sb,
                    "UPDATE buzz_backfill.backfill f SET checkpoint = %s,"
                    " rows_committed = f.rows_committed + %s, rows_covered = f.rows_covered + %s,"
                    " batches_committed = f.batches_committed + 1, attempts = 0,"
                    " next_attempt_at = NULL, last_progress_at = clock_timestamp(),"
                    " updated_at = clock_timestamp(),"
                    " claim_expires_at = clock_timestamp() + %s::integer * interval '1 ms'",
                    f->new_checkpoint, f->touched, f->covered, f->lease_ms);
    bf__strbuf_addf(sb,
                    " WHERE f.id = %s AND f.state = 'running' AND f.generation = %s"
                    " AND f.claim_owner = %s AND f.claim_expires_at > clock_timestamp()"
                    " AND f.checkpoint IS NOT DISTINCT FROM %s",
                    f->id, f->generation, f->owner, f->old_checkpoint);
}

/* The loop's statement for the batch's last key and size, after the checkpoint when after is
 * set: one aggregate for a single-column key of a type with max(); otherwise (a compound key,
 * bytea or uuid, which PostgreSQL 15 has no max() for) row_number() streams over the keyset
 * and a top-1 sort keeps the last row. */
static void add_loop_last(bf_strbuf *sb, const bf_definition *d, key_ref after)
{
    bf__strbuf_add(sb, "SELECT ");
    bool has_max = d->key[0].type != BF_KEY_BYTEA && d->key[0].type != BF_KEY_UUID;
    if (d->nkey == 1 && has_max) {
        bf__strbuf_addf(sb, "max(k.\"%s\"), count(*) INTO bf.l1, bf.n FROM (", d->key[0].name);
        add_keyset(sb, d, after, KEY_VAR('b'), "bf.size");
        bf__strbuf_add(sb, ") k;\n");
        return;
    }
    add_cols(sb, d, "s", "");
    bf__strbuf_add(sb, ", s.bf_n INTO ");
    for (int i = 0; i < d->nkey; i++)
        bf__strbuf_addf(sb, "bf.l%d, ", i + 1);
    bf__strbuf_add(sb, "bf.n FROM (SELECT ");
    add_cols(sb, d, "k", "");
    bf__strbuf_add(sb, ", row_number() OVER (ORDER BY ");
    add_cols(sb, d, "k", "");
    bf__strbuf_add(sb, ") AS bf_n FROM (");
    add_keyset(sb, d, after, KEY_VAR('b'), "bf.size");
    bf__strbuf_add(sb, ") k) s ORDER BY ");
    add_cols(sb, d, "s", " DESC");
    bf__strbuf_add(sb, " LIMIT 1;\n");
}

/* The loop's mutation over the batch's key range, after the checkpoint (when after is set) up
 * to the batch's last key: under the statement's snapshot exactly the keyset's rows (the key
 * is unique), as one index range scan (add_range bounds a compound key's leading column too:
 * without it this statement became a sequential scan of the table once the table was
 * analyzed). A range rather than a join on the batch's keys: one index descent instead of one
 * per key, 15-25 % faster per batch (docs/engine.md "Plans"). */
static void add_loop_mutation(bf_strbuf *sb, const bf_definition *d, key_ref after)
{
    bf__strbuf_add(sb, "UPDATE ");
    add_table(sb, d->table);
    bf__strbuf_addf(sb, " t SET %s WHERE ", d->update_set);
    add_range(sb, d, after, KEY_VAR('l'));
    bf__strbuf_addf(sb, " AND (%s);\n", d->needs_repair);
}

/* IF bf.has_cp THEN <after the checkpoint> ELSE <from the start> END IF: two static statements,
 * so that no "checkpoint IS NULL OR" defeats the key's index */
static void add_loop_branches(bf_strbuf *sb, const bf_definition *d,
                              void (*add)(bf_strbuf *, const bf_definition *, key_ref))
{
    bf__strbuf_add(sb, "    IF bf.has_cp THEN\n      ");
    add(sb, d, KEY_VAR('c'));
    bf__strbuf_add(sb, "    ELSE\n      ");
    add(sb, d, KEY_NONE);
    bf__strbuf_add(sb, "    END IF;\n");
}

/*
 * The declarative batch loop: a PL/pgSQL procedure, created once per session in pg_temp (no
 * shared DDL, so daemons of different builds never race on it), whose statements PostgreSQL
 * plans once and keeps. One CALL runs batches until no admitted work remains, max batches
 * were committed, or the deadline passed (checked after each COMMIT). Each batch is its own
 * transaction: the keyset after the checkpoint within the bound (ORDER BY key LIMIT n), the
 * mutation over that key range, the fenced checkpoint advance, the verdict (raises on a batch
 * over its bound or a fence that matched nothing, which rolls back the whole batch: the
 * batches committed before it stay), COMMIT. A pause or takeover committed while a batch is in
 * flight changes the generation, and that batch's fence fails.
 *
 * The user's fragments (table, update_set, needs_repair) are embedded as written; with
 * "#variable_conflict use_column" a name in them always means a column, and the procedure's
 * own variables are always written qualified by the block label "bf".
 */
static char *compile_loop(const bf_definition *d, size_t index)
{
    bf_strbuf sb;
    bf__strbuf_init(&sb);
    bf__strbuf_addf(&sb,
                    "CREATE OR REPLACE PROCEDURE pg_temp.bf_loop_%zu(p_id text, p_generation"
                    " bigint, p_owner text, p_bound text[], p_limit integer, p_lease_ms integer,"
                    " p_max_batches integer, p_step_ms integer, INOUT checkpoint text[],"
                    " INOUT batches bigint, INOUT rows_covered bigint, INOUT rows_touched bigint,"
                    " p_size integer, p_watch integer, INOUT waiters bigint) "
                    "LANGUAGE plpgsql AS $bf$\n"
                    "#variable_conflict use_column\n<<bf>>\nDECLARE\n",
                    index);
    for (int i = 0; i < d->nkey; i++) {
        const char *type = bf_key_type_name(d->key[i].type);
        bf__strbuf_addf(&sb, "  b%d %s := p_bound[%d]::%s;\n", i + 1, type, i + 1, type);
        bf__strbuf_addf(&sb, "  c%d %s := checkpoint[%d]::%s;\n", i + 1, type, i + 1, type);
        bf__strbuf_addf(&sb, "  l%d %s;\n", i + 1, type);
    }
    bf__strbuf_add(&sb,
                   "  has_cp boolean := checkpoint IS NOT NULL;\n"
                   "  cp text[] := checkpoint;\n"
                   "  next_cp text[];\n"
                   "  id text := p_id;\n"
                   "  gen bigint := p_generation;\n"
                   "  owner text := p_owner;\n"
                   "  lim integer := p_limit;\n"
                   "  size integer := least(p_size, p_limit);\n"
                   "  watch integer := p_watch;\n"
                   "  lease integer := p_lease_ms;\n"
                   "  n bigint;\n"
                   "  touched bigint;\n"
                   "  fenced bigint;\n"
                   "  deadline timestamptz := clock_timestamp() + p_step_ms * interval '1 ms';\n"
                   "  start_cp text := coalesce(checkpoint::text, '');\n"
                   "BEGIN\n"
                   "  batches := 0; rows_covered := 0; rows_touched := 0; waiters := 0;\n"
                   "  LOOP\n");
    add_loop_branches(&sb, d, add_loop_last);
    bf__strbuf_add(&sb, "    EXIT WHEN coalesce(bf.n, 0) = 0; /* no admitted work remains */\n");
    add_loop_branches(&sb, d, add_loop_mutation);
    bf__strbuf_add(&sb, "    GET DIAGNOSTICS bf.touched = ROW_COUNT;\n"
                        "    bf.next_cp := ");
    bf__strbuf_add(&sb, "ARRAY[");
    for (int i = 0; i < d->nkey; i++)
        bf__strbuf_addf(&sb, "%sbf.l%d::text", i ? ", " : "", i + 1);
    bf__strbuf_add(&sb, "];\n    ");
    const fence_sql fence = {.id = "bf.id",
                             .generation = "bf.gen",
                             .owner = "bf.owner",
                             .old_checkpoint = "bf.cp",
                             .new_checkpoint = "bf.next_cp",
                             .touched = "bf.touched",
                             .covered = "bf.n",
                             .lease_ms = "bf.lease"};
    add_fence(&sb, &fence);
    bf__strbuf_add(&sb, " AND ");
    add_value(&sb, d, KEY_VAR('l'));
    bf__strbuf_add(&sb, " <= ");
    add_value(&sb, d, KEY_VAR('b'));
    bf__strbuf_add(&sb, " AND (NOT bf.has_cp OR ");
    add_value(&sb, d, KEY_VAR('l'));
    bf__strbuf_add(&sb, " > ");
    add_value(&sb, d, KEY_VAR('c'));
    bf__strbuf_add(&sb, ");\n"
                        "    GET DIAGNOSTICS bf.fenced = ROW_COUNT;\n"
                        "    PERFORM buzz_backfill.batch_verdict(bf.n, bf.touched, bf.fenced,"
                        " bf.lim);\n");
    /* lock_waiters throttling: the sessions this batch blocks, counted before the COMMIT
     * releases them, by the same query the callback batch runs */
    bf__strbuf_addf(&sb,
                    "    IF bf.watch > 0 THEN\n"
                    "      waiters := greatest(waiters, (%s));\n"
                    "    END IF;\n",
                    bf__throttle_blocked_sql);
    /* this CALL's progress in a session setting, set in the batch's own transaction: it
     * commits with the batch or reverts with it, so after a CALL that failed the session still
     * tells what its committed batches did (worker.c worker_report_partial); the generation and
     * the checkpoint the CALL started from say which CALL wrote it */
    bf__strbuf_add(&sb, "    PERFORM set_config('buzz_backfill.progress', bf.gen || '|' ||"
                        " bf.start_cp || '|' || (batches + 1) || ',' || (rows_covered + bf.n)"
                        " || ',' || (rows_touched + bf.touched) || '|' || bf.next_cp::text,"
                        " false);\n");
    bf__strbuf_add(&sb, "    COMMIT;\n"
                        "    bf.has_cp := true;\n"
                        "    bf.cp := bf.next_cp;\n"
                        "    checkpoint := bf.next_cp;\n");
    for (int i = 0; i < d->nkey; i++)
        bf__strbuf_addf(&sb, "    bf.c%d := bf.l%d;\n", i + 1, i + 1);
    bf__strbuf_add(&sb, "    batches := batches + 1;\n"
                        "    rows_covered := rows_covered + bf.n;\n"
                        "    rows_touched := rows_touched + bf.touched;\n"
                        "    EXIT WHEN batches >= p_max_batches OR clock_timestamp() >= bf.deadline"
                        " OR (bf.watch > 0 AND waiters >= bf.watch);\n"
                        "  END LOOP;\n"
                        "END $bf$");
    return bf__strbuf_take(&sb);
}

static char *compile_call(size_t index)
{
    bf_strbuf sb;
    bf__strbuf_init(&sb);
    bf__strbuf_addf(&sb,
                    "CALL pg_temp.bf_loop_%zu($1, $2::bigint, $3, $4::text[], $5::integer,"
                    " $6::integer, $7::integer, $8::integer, $9::text[], NULL, NULL, NULL,"
                    " $10::integer, $11::integer, NULL)",
                    index);
    return bf__strbuf_take(&sb);
}

/* Callback forms: fill bf_batch (created by compile_create_batch, no parameters) with the next
 * keys: ($1 bound, $2 limit[, $3 after]). */
static char *compile_keys(const bf_definition *d, bool has_after)
{
    bf_strbuf sb;
    bf__strbuf_init(&sb);
    bf__strbuf_add(&sb, "INSERT INTO bf_batch ");
    add_keyset(&sb, d, has_after ? KEY_PARAM(3) : KEY_NONE, KEY_PARAM(1), "$2");
    return bf__strbuf_take(&sb);
}

static char *compile_create_batch(const bf_definition *d)
{
    bf_strbuf sb;
    bf__strbuf_init(&sb);
    bf__strbuf_add(&sb, "CREATE TEMP TABLE bf_batch (");
    for (int i = 0; i < d->nkey; i++)
        bf__strbuf_addf(&sb, "%s\"%s\" %s", i ? ", " : "", d->key[i].name,
                        bf_key_type_name(d->key[i].type));
    bf__strbuf_add(&sb, ") ON COMMIT DROP");
    return bf__strbuf_take(&sb);
}

/* Callback batch fence. $1 id, $2 generation, $3 owner, $4 checkpoint, $5 bound, $6 touched,
 * $7 lease_ms, $8 keys in the batch, $9 the batch bound. Returns the new checkpoint; raises
 * BFS01 when fenced out and BFB01 over the bound (batch_verdict). */
static char *compile_fence(const bf_definition *d)
{
    bf_strbuf sb;
    bf__strbuf_init(&sb);
    bf__strbuf_add(&sb, "WITH bf_last AS (SELECT ");
    add_cols(&sb, d, "b", "");
    bf__strbuf_add(&sb, " FROM bf_batch b ORDER BY ");
    add_cols(&sb, d, "b", " DESC");
    bf__strbuf_add(&sb, " LIMIT 1), bf_fenced AS (");
    bf_strbuf add;
    bf__strbuf_init(&add);
    bf__strbuf_add(&add, "(SELECT ");
    add_text_array(&add, d, "l");
    bf__strbuf_add(&add, " FROM bf_last l)");
    char *new_checkpoint = bf__strbuf_take(&add);
    if (new_checkpoint == NULL) {
        bf__strbuf_fini(&sb);
        return NULL;
    }
    const fence_sql fence = {.id = "$1",
                             .generation = "$2::bigint",
                             .owner = "$3",
                             .old_checkpoint = "$4::text[]",
                             .new_checkpoint = new_checkpoint,
                             .touched = "$6::bigint",
                             .covered = "$8::bigint",
                             .lease_ms = "$7"};
    add_fence(&sb, &fence);
    free(new_checkpoint);
    /* the new checkpoint within the bound and, when there is one, after the old checkpoint */
    bf__strbuf_add(&sb, " AND EXISTS (SELECT 1 FROM bf_last l WHERE ");
    add_tuple(&sb, d, "l");
    bf__strbuf_add(&sb, " <= ");
    add_param(&sb, d, 5);
    bf__strbuf_add(&sb, " AND ($4::text[] IS NULL OR ");
    add_tuple(&sb, d, "l");
    bf__strbuf_add(&sb, " > ");
    add_param(&sb, d, 4);
    /* the verdict raises when the fence matched nothing, so the COMMIT sent in the same round
     * trip finds an aborted transaction and nothing of the batch commits */
    bf__strbuf_add(&sb,
                   ")) RETURNING f.checkpoint::text AS cp)"
                   " SELECT (SELECT cp FROM bf_fenced), buzz_backfill.batch_verdict($8::bigint,"
                   " $6::bigint, (SELECT count(*) FROM bf_fenced), $9::bigint)");
    return bf__strbuf_take(&sb);
}

/* Declarative validation chunk: ($1 bound, $2 chunk[, $3 after]) -> rows, bad rows, last key */
static char *compile_vchunk(const bf_definition *d, bool has_after)
{
    bf_strbuf sb;
    bf__strbuf_init(&sb);
    bf__strbuf_add(&sb, "WITH bf_chunk AS (");
    bf__strbuf_add(&sb, "SELECT ");
    add_cols(&sb, d, "t", "");
    if (d->postcondition != NULL && d->postcondition[0] != '\0')
        bf__strbuf_addf(&sb, ", (%s) IS NOT TRUE AS bf_bad FROM ", d->postcondition);
    else
        bf__strbuf_addf(&sb, ", (%s) IS TRUE AS bf_bad FROM ", d->needs_repair);
    add_table(&sb, d->table);
    bf__strbuf_add(&sb, " t WHERE ");
    add_range(&sb, d, has_after ? KEY_PARAM(3) : KEY_NONE, KEY_PARAM(1));
    bf__strbuf_add(&sb, " ORDER BY ");
    add_cols(&sb, d, "t", "");
    bf__strbuf_add(&sb, " LIMIT $2) SELECT count(*), count(*) FILTER (WHERE bf_bad), (");
    add_key_select(&sb, d, NULL, "bf_chunk", "c", "", true);
    bf__strbuf_add(&sb, ") FROM bf_chunk");
    return bf__strbuf_take(&sb);
}

/* Callback validation: the greatest key in bf_batch as a text[] literal (where the next chunk
 * starts). */
static char *compile_batch_last(const bf_definition *d)
{
    bf_strbuf sb;
    bf__strbuf_init(&sb);
    bf__strbuf_add(&sb, "SELECT (");
    add_key_select(&sb, d, NULL, "bf_batch", "b", "", true);
    bf__strbuf_add(&sb, ")");
    return bf__strbuf_take(&sb);
}

/* The key's column names as a name[] literal. Elements are quoted: an unquoted element spelled
 * "null" would read as a NULL (ident_valid admits no character that needs escaping). */
static void add_key_names(bf_strbuf *sb, const bf_definition *d)
{
    bf__strbuf_add(sb, "'{");
    for (int i = 0; i < d->nkey; i++)
        bf__strbuf_addf(sb, "%s\"%s\"", i ? "," : "", d->key[i].name);
    bf__strbuf_add(sb, "}'::name[]");
}

/* NULL without the table; 'nullable' when a key column may be NULL (a NULL key is never
 * selected, and a NULL greatest key would capture a bound that admits no row, so validation
 * would pass over unrepaired rows); else 'unique' when a valid, non-partial unique index on
 * plain columns covers only key columns: then the key is unique (a subset being unique makes
 * the whole key unique), so keyset batches neither skip nor repeat rows and a batch's key range
 * holds no more rows than its keys; else 'not unique'. */
static char *compile_unique(const bf_definition *d)
{
    bf_strbuf sb;
    bf__strbuf_init(&sb);
    bf__strbuf_add(&sb, "SELECT CASE WHEN to_regclass('");
    add_table(&sb, d->table);
    bf__strbuf_add(&sb, "') IS NULL THEN NULL WHEN EXISTS (SELECT 1 FROM pg_attribute a"
                        " WHERE a.attrelid = to_regclass('");
    add_table(&sb, d->table);
    bf__strbuf_add(&sb, "') AND a.attnum > 0 AND NOT a.attisdropped AND NOT a.attnotnull"
                        " AND a.attname = ANY (");
    add_key_names(&sb, d);
    bf__strbuf_add(&sb, ")) THEN 'nullable' WHEN EXISTS (SELECT 1 FROM pg_index i"
                        " WHERE i.indrelid = to_regclass('");
    add_table(&sb, d->table);
    bf__strbuf_add(&sb, "') AND i.indisunique AND i.indisvalid AND i.indpred IS NULL"
                        " AND i.indexprs IS NULL AND NOT EXISTS (SELECT 1"
                        " FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)"
                        " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
                        " WHERE k.ord <= i.indnkeyatts AND a.attname <> ALL (");
    add_key_names(&sb, d);
    bf__strbuf_add(&sb, "))) THEN 'unique' ELSE 'not unique' END");
    return bf__strbuf_take(&sb);
}

static char *compile_bound(const bf_definition *d)
{
    bf_strbuf sb;
    bf__strbuf_init(&sb);
    add_key_select(&sb, d, d->table, NULL, "t", "", true);
    return bf__strbuf_take(&sb);
}

static char *compile_estimate(const bf_definition *d)
{
    bf_strbuf sb;
    bf__strbuf_init(&sb);
    bf__strbuf_add(&sb, "SELECT CASE WHEN c.reltuples >= 0 THEN c.reltuples::bigint END"
                        " FROM pg_class c WHERE c.oid = to_regclass('");
    add_table(&sb, d->table);
    bf__strbuf_add(&sb, "')");
    return bf__strbuf_take(&sb);
}

/* ---- the preflight's statements (preflight.c) ------------------------------------------ */

/* SELECT ARRAY[t.keys::text]::text FROM table t <where> ORDER BY keys LIMIT 1 */
static char *compile_key_at(const bf_definition *d, const char *where)
{
    bf_strbuf sb;
    bf__strbuf_init(&sb);
    add_key_select(&sb, d, d->table, NULL, "t", where, false);
    return bf__strbuf_take(&sb);
}

/* The first key at or after the median of the leading key column by the planner's statistics
 * (the middle element of its histogram): where a batch's range estimate is at its worst. */
static char *compile_middle(const bf_definition *d)
{
    const char *dot = strchr(d->table, '.');
    const char *rel = dot ? dot + 1 : d->table;
    const char *type = bf_key_type_name(d->key[0].type);
    bf_strbuf where;
    bf__strbuf_init(&where);
    bf__strbuf_addf(&where,
                    " WHERE t.\"%s\" >= (SELECT (s.histogram_bounds::text::%s[])"
                    "[greatest(1, array_length(s.histogram_bounds::text::%s[], 1) / 2)]"
                    " FROM pg_stats s WHERE s.tablename = '%s' AND s.attname = '%s' AND ",
                    d->key[0].name, type, type, rel, d->key[0].name);
    if (dot != NULL)
        bf__strbuf_addf(&where, "s.schemaname = '%.*s'", (int)(dot - d->table), d->table);
    else
        bf__strbuf_add(&where, "s.schemaname = ANY (current_schemas(false))");
    bf__strbuf_add(&where, " LIMIT 1)");
    char *w = bf__strbuf_take(&where);
    if (w == NULL)
        return NULL;
    char *sql = compile_key_at(d, w);
    free(w);
    return sql;
}

/* ($1 bound, $2 size, $3 after): the greatest key of the batch after $3 */
static char *compile_batch_end(const bf_definition *d)
{
    bf_strbuf sb;
    bf__strbuf_init(&sb);
    bf_strbuf keyset;
    bf__strbuf_init(&keyset);
    bf__strbuf_add(&keyset, "(");
    add_keyset(&keyset, d, KEY_PARAM(3), KEY_PARAM(1), "$2");
    bf__strbuf_add(&keyset, ")");
    char *from = bf__strbuf_take(&keyset);
    if (from == NULL) {
        bf__strbuf_fini(&sb);
        return NULL;
    }
    add_key_select(&sb, d, NULL, from, "k", "", true);
    free(from);
    return bf__strbuf_take(&sb);
}

/* ($1 after, $2 last): the loop's mutation (add_loop_mutation) with parameters for EXPLAIN */
static char *compile_plan_update(const bf_definition *d)
{
    bf_strbuf sb;
    bf__strbuf_init(&sb);
    bf__strbuf_add(&sb, "UPDATE ");
    add_table(&sb, d->table);
    bf__strbuf_addf(&sb, " t SET %s WHERE ", d->update_set);
    add_range(&sb, d, KEY_PARAM(1), KEY_PARAM(2));
    bf__strbuf_addf(&sb, " AND (%s)", d->needs_repair);
    return bf__strbuf_take(&sb);
}

/* The definition's material content (what a change of needs a new stable ID: the table, the
 * key's columns and types, the declarative fragments and whether the mutation or validation is
 * a callback), each field with its length so that no two definitions serialize alike, as a
 * BLAKE2b-256 digest in hex. Metadata (description, owner, revision), batch size, retry policy
 * and required are not material: they may change under the same ID. */
static void definition_digest(const bf_definition *d, char out[65])
{
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, 32);
    const char *fields[4 + 2 * BF_MAX_KEY_COLUMNS + 5];
    int n = 0;
    fields[n++] = "buzz-backfill definition 1";
    fields[n++] = d->table;
    for (int i = 0; i < d->nkey; i++) {
        fields[n++] = d->key[i].name;
        fields[n++] = bf_key_type_name(d->key[i].type);
    }
    fields[n++] = d->needs_repair;
    fields[n++] = d->update_set;
    fields[n++] = d->postcondition;
    fields[n++] = d->prerequisite;
    fields[n++] = d->mutate != NULL ? "mutate callback" : "declarative mutation";
    fields[n++] = d->validate != NULL ? "validate callback" : "declarative validation";
    for (int i = 0; i < n; i++) {
        const char *f = fields[i] != NULL ? fields[i] : "";
        char len[24];
        bf__format(len, sizeof len, "%zu:", strlen(f));
        crypto_generichash_update(&st, (const unsigned char *)len, strlen(len));
        crypto_generichash_update(&st, (const unsigned char *)f, strlen(f));
    }
    unsigned char h[32];
    crypto_generichash_final(&st, h, sizeof h);
    sodium_bin2hex(out, 65, h, sizeof h);
}

/* the rows of the table that need repair (planned, never run: the preflight's estimate) */
static char *compile_needing(const bf_definition *d)
{
    bf_strbuf sb;
    bf__strbuf_init(&sb);
    bf__strbuf_add(&sb, "SELECT 1 FROM ");
    add_table(&sb, d->table);
    bf__strbuf_addf(&sb, " t WHERE (%s)", d->needs_repair);
    return bf__strbuf_take(&sb);
}

void bf__compiled_fini(bf_compiled *c)
{
    free(c->sql_needing);
    free(c->sql_first);
    free(c->sql_middle);
    free(c->sql_batch_end);
    free(c->sql_plan_update);
    free(c->sql_bound);
    free(c->sql_unique);
    free(c->sql_estimate);
    free(c->sql_loop);
    free(c->sql_call);
    for (int i = 0; i < 2; i++) {
        free(c->sql_keys[i]);
        free(c->sql_vchunk[i]);
    }
    free(c->sql_create_batch);
    free(c->sql_batch_last);
    free(c->sql_fence);
    free(c->sql_prereq);
    memset(c, 0, sizeof *c);
}

/* index: the definition's place in its registry, which names its loop procedure */
bf_err bf__compile(const bf_definition *d, size_t index, bf_compiled *c)
{
    memset(c, 0, sizeof *c);
    c->def = d;
    size_t off = 0;
    for (int i = 0; i < d->nkey; i++) {
        const char *name = bf_key_type_name(d->key[i].type);
        bf__format(c->key_types + off, sizeof c->key_types - off, "%s%s", i ? "," : "", name);
        off = strlen(c->key_types);
    }
    if (sodium_init() < 0)
        return BF_ERR_INTERNAL;
    definition_digest(d, c->digest);
    c->sql_bound = compile_bound(d);
    c->sql_unique = compile_unique(d);
    c->sql_estimate = compile_estimate(d);
    c->sql_create_batch = compile_create_batch(d);
    c->sql_fence = compile_fence(d);
    c->sql_batch_last = compile_batch_last(d);
    c->sql_first = compile_key_at(d, "");
    c->sql_middle = compile_middle(d);
    c->sql_batch_end = compile_batch_end(d);
    bool ok = c->sql_bound && c->sql_unique && c->sql_estimate && c->sql_create_batch &&
              c->sql_fence && c->sql_batch_last && c->sql_first && c->sql_middle &&
              c->sql_batch_end;
    for (int v = 0; v < 2; v++) {
        c->sql_keys[v] = compile_keys(d, v == 1);
        ok = ok && c->sql_keys[v];
        if (d->validate == NULL) {
            c->sql_vchunk[v] = compile_vchunk(d, v == 1);
            ok = ok && c->sql_vchunk[v];
        }
    }
    if (d->mutate == NULL) {
        c->sql_loop = compile_loop(d, index);
        c->sql_call = compile_call(index);
        c->sql_plan_update = compile_plan_update(d);
        c->sql_needing = compile_needing(d);
        ok = ok && c->sql_loop && c->sql_call && c->sql_plan_update && c->sql_needing;
    }
    if (d->prerequisite != NULL && d->prerequisite[0] != '\0') {
        bf_strbuf sb;
        bf__strbuf_init(&sb);
        bf__strbuf_addf(&sb, "SELECT (%s)::boolean", d->prerequisite);
        c->sql_prereq = bf__strbuf_take(&sb);
        ok = ok && c->sql_prereq;
    }
    if (!ok) {
        bf__compiled_fini(c);
        return BF_ERR_NOMEM;
    }
    return BF_OK;
}
