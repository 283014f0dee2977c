/*
 * preflight.c - before a backfill's first batch, and whenever an operator or CI asks: can this
 * definition's batches only be bounded work on this database? (engine.h bf_preflight,
 * docs/definitions.md "The preflight")
 *
 * Design notes
 *
 * The spec asks for bounded batches; a batch bounded in keys is not bounded in work when
 * PostgreSQL plans it as a scan of the whole table. Statistics move under a running backfill
 * (autovacuum analyzes the table the backfill is updating), so the statements are written to
 * stay index range scans whatever the statistics say (compile.c), and this file checks what the
 * statements cannot guarantee by themselves, in the order an operator would fix it:
 *
 *   1. the table exists and every key column exists with exactly the declared type (a declared
 *      bigint over an integer column compares across types and the bound text would not
 *      round-trip: the documented rule, now enforced);
 *   2. the key is unique and NOT NULL (backfill.c bf__key_unique, which Start always ran);
 *   3. a valid, non-partial btree index has the key's columns, in order and one direction, as
 *      its leading columns: the keyset's ORDER BY ... LIMIT is that index's range;
 *   4. PostgreSQL plans the batch statements with real values as index scans of the table: the
 *      keyset, the declarative mutation and validation chunk, at the first key and at the
 *      leading column's median by the planner's statistics (where a range estimate is worst).
 *      EXPLAIN without ANALYZE: nothing runs, and a statement that does not even parse (a
 *      misspelled column in update_set) is refused here instead of blocking the first batch.
 *
 * A table of at most BF_PREFLIGHT_SMALL_ROWS rows passes 3 and 4 with a note: a scan of it is
 * itself bounded work. The report names identifiers only (table, columns, index, plan node
 * types), never a row's values.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "strbuf.h"

/* the keyset of the callback forms is "INSERT INTO bf_batch <SELECT ...>" (compile.c) */
static const char keys_prefix[] = "INSERT INTO bf_batch ";

typedef struct preflight {
    bf_engine *e;
    const bf_compiled *c;
    char table_name[160]; /* "schema"."table" for to_regclass */
    const char *relname;  /* the table without its schema */
    bool small;           /* at most BF_PREFLIGHT_SMALL_ROWS rows */
    char summary[BF_DIAG_MAX];
} preflight;

/* "{a,b}" of the key's column names, or of its declared types */
/* The key's column names between open and close, separated by sep, each inside quote:
 * "{\"a\",\"b\"}" for a text[] literal (quoted: an unquoted element spelled "null" would read as
 * a NULL) or "(a, b)" for a message. */
static void key_names(const bf_definition *d, const char *open, const char *sep, const char *quote,
                      const char *close, char *buf, size_t cap)
{
    size_t off = 0;
    for (int i = 0; i < d->nkey && off < cap; i++) {
        bf__format(buf + off, cap - off, "%s%s%s%s", i ? sep : open, quote, d->key[i].name, quote);
        off = strlen(buf);
    }
    if (off < cap)
        bf__format(buf + off, cap - off, "%s", close);
}

/* 1. the key columns exist with the declared types */
static bf_err preflight_columns(preflight *p)
{
    char names[BF_MAX_KEY_COLUMNS * 66 + 4], types[128];
    key_names(p->c->def, "{", ",", "\"", "}", names, sizeof names);
    bf__format(types, sizeof types, "{%s}", p->c->key_types);
    const char *params[] = {names, types, p->table_name};
    PGresult *r = NULL;
    bf_err err =
        bf__exec(p->e, &r, "preflight: key columns",
                 "SELECT k.name, a.attname IS NOT NULL, format_type(a.atttypid, a.atttypmod),"
                 " a.atttypid = k.want::regtype, to_regclass($3) IS NOT NULL"
                 " FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(name, want, ord)"
                 " LEFT JOIN pg_attribute a ON a.attrelid = to_regclass($3) AND a.attname = k.name"
                 " AND a.attnum > 0 AND NOT a.attisdropped ORDER BY k.ord",
                 3, params);
    if (err != BF_OK)
        return err;
    const bf_definition *d = p->c->def;
    for (int i = 0; i < PQntuples(r) && i < d->nkey; i++) {
        if (!bf__field_bool(r, i, 4)) {
            PQclear(r);
            return bf__diag(p->e, BF_ERR_PREREQUISITE, "prerequisite not met: table %s is missing",
                            d->table);
        }
        if (!bf__field_bool(r, i, 1)) {
            PQclear(r);
            return bf__diag(p->e, BF_ERR_DEFINITION, "key column %s is not a column of %s",
                            d->key[i].name, d->table);
        }
        if (!bf__field_bool(r, i, 3)) {
            char have[64];
            bf__copy(have, sizeof have, bf__field(r, i, 2));
            PQclear(r);
            return bf__diag(p->e, BF_ERR_DEFINITION,
                            "key column %s is %s, the definition declares %s: declare the"
                            " column's own type",
                            d->key[i].name, have, bf_key_type_name(d->key[i].type));
        }
    }
    PQclear(r);
    return BF_OK;
}

/* 3. an index serves the key's order (or the table is small) */
static bf_err preflight_index(preflight *p)
{
    char names[BF_MAX_KEY_COLUMNS * 66 + 4], n[8], small[24];
    key_names(p->c->def, "{", ",", "\"", "}", names, sizeof names);
    bf__format(n, sizeof n, "%d", p->c->def->nkey);
    bf__format(small, sizeof small, "%d", BF_PREFLIGHT_SMALL_ROWS);
    const char *params[] = {p->table_name, names, n, small};
    PGresult *r = NULL;
    bf_err err = bf__exec(
        p->e, &r, "preflight: key index",
        "SELECT (SELECT ic.relname FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid"
        "  JOIN pg_am am ON am.oid = ic.relam"
        "  WHERE i.indrelid = c.oid AND i.indisvalid AND i.indisready AND i.indpred IS NULL"
        "  AND am.amname = 'btree' AND i.indnkeyatts >= $3::int"
        "  AND (SELECT array_agg(a.attname::text ORDER BY k.ord)"
        "   FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)"
        "   LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
        "   WHERE k.ord <= $3::int) = $2::text[]"
        "  AND (SELECT count(DISTINCT o::int & 1) FROM unnest(i.indoption::int2[])"
        "   WITH ORDINALITY AS x(o, ord) WHERE x.ord <= $3::int) = 1"
        "  ORDER BY i.indisunique DESC, i.indnatts, ic.relname LIMIT 1),"
        " CASE WHEN c.reltuples >= 0 THEN c.reltuples <= $4::int"
        "  ELSE pg_relation_size(c.oid) <= 1048576 END,"
        " greatest(c.reltuples, 0)::bigint"
        " FROM pg_class c WHERE c.oid = to_regclass($1)",
        4, params);
    if (err != BF_OK)
        return err;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return bf__diag(p->e, BF_ERR_PREREQUISITE, "prerequisite not met: table %s is missing",
                        p->c->def->table);
    }
    p->small = bf__field_bool(r, 0, 1);
    bool indexed = !bf__isnull(r, 0, 0);
    char index[72], rows[24];
    bf__copy(index, sizeof index, bf__field(r, 0, 0));
    bf__copy(rows, sizeof rows, bf__field(r, 0, 2));
    PQclear(r);
    char cols[BF_MAX_KEY_COLUMNS * 66 + 4];
    key_names(p->c->def, "(", ", ", "", ")", cols, sizeof cols);
    if (indexed) {
        bf__format(p->summary, sizeof p->summary, "index %s", index);
        return BF_OK;
    }
    if (p->small) {
        bf__format(p->summary, sizeof p->summary,
                   "no index on %s, but the table is small (about %s rows): a scan of it is"
                   " bounded",
                   cols, rows);
        return BF_OK;
    }
    return bf__diag(p->e, BF_ERR_PREREQUISITE,
                    "prerequisite not met: no index serves the key %s of %s (about %s rows), so"
                    " every batch would scan the table: CREATE INDEX CONCURRENTLY ON %s %s",
                    cols, p->c->def->table, rows, p->c->def->table, cols);
}

/* The value of "key": "..." within [from, to) of a JSON text into buf; false when absent. */
static bool json_field(const char *from, const char *to, const char *key, char *buf, size_t cap)
{
    char pat[40];
    bf__format(pat, sizeof pat, "\"%s\": \"", key);
    const char *s = strstr(from, pat);
    if (s == NULL || (to != NULL && s >= to))
        return false;
    s += strlen(pat);
    const char *end = strchr(s, '"');
    if (end == NULL)
        return false;
    size_t n = (size_t)(end - s);
    if (n >= cap)
        n = cap - 1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    return true;
}

/* Walk an EXPLAIN (FORMAT JSON) plan for the scans of the target table (relation relname,
 * alias "t"; a node's own fields come before its children's). ok: the scan node types allowed
 * for this statement. The first scan found goes to how ("Index Scan using x"); a scan of
 * another type to bad. */
static void plan_scans(const char *json, const char *relname, bool bitmap_ok, char *how,
                       size_t how_cap, char *bad, size_t bad_cap)
{
    static const char node_key[] = "\"Node Type\": \"";
    for (const char *p = strstr(json, node_key); p != NULL;) {
        const char *next = strstr(p + 1, node_key);
        char type[48] = "", rel[72] = "", alias[72] = "", index[72] = "";
        json_field(p, next, "Node Type", type, sizeof type);
        if (strcmp(type, "ModifyTable") != 0 &&
            json_field(p, next, "Relation Name", rel, sizeof rel) && strcmp(rel, relname) == 0 &&
            json_field(p, next, "Alias", alias, sizeof alias) && strcmp(alias, "t") == 0) {
            bool ok = strcmp(type, "Index Scan") == 0 || strcmp(type, "Index Only Scan") == 0 ||
                      (bitmap_ok && strcmp(type, "Bitmap Heap Scan") == 0);
            if (!ok && bad[0] == '\0')
                bf__copy(bad, bad_cap, type);
            if (how[0] == '\0') {
                if (strstr(type, "Index") != NULL &&
                    json_field(p, next, "Index Name", index, sizeof index))
                    bf__format(how, how_cap, "%s using %s", type, index);
                else
                    bf__copy(how, how_cap, type);
            }
        }
        p = next;
    }
}

/* EXPLAIN one statement and check its scans of the table. what names it in the report. */
static bf_err plan_check(preflight *p, const char *what, const char *sql, bool bitmap_ok,
                         int nparams, const char *const *params, const char *where, char *how,
                         size_t how_cap)
{
    bf_strbuf sb;
    bf__strbuf_init(&sb);
    bf__strbuf_addf(&sb, "EXPLAIN (FORMAT JSON) %s", sql);
    char *explain = bf__strbuf_take(&sb);
    if (explain == NULL)
        return BF_ERR_NOMEM;
    PGresult *r = NULL;
    bf_err err = bf__exec(p->e, &r, "preflight: explain", explain, nparams, params);
    free(explain);
    if (err != BF_OK)
        return err;
    char bad[48] = "";
    how[0] = '\0';
    if (PQntuples(r) == 1)
        plan_scans(bf__field(r, 0, 0), p->relname, bitmap_ok, how, how_cap, bad, sizeof bad);
    PQclear(r);
    if (bad[0] == '\0' || p->small)
        return BF_OK;
    return bf__diag(p->e, BF_ERR_PREREQUISITE,
                    "prerequisite not met: PostgreSQL plans the %s of a batch %s as a %s of"
                    " %s, not a range of the key's index; ANALYZE the table, and if the key's"
                    " leading column %s has few distinct values, put a selective column first"
                    " (docs/definitions.md, choosing a key)",
                    what, where, bad, p->c->def->table, p->c->def->key[0].name);
}

/* 4. the batch statements at one position: after is a key (text[] literal) */
static bf_err preflight_at(preflight *p, const char *bound, const char *after, const char *where,
                           bool report)
{
    const bf_compiled *c = p->c;
    char size[16], chunk[16], last[BF_KEY_TEXT_MAX] = "";
    bf__format(size, sizeof size, "%d", c->def->batch_size);
    long n = 10L * c->def->batch_size;
    bf__format(chunk, sizeof chunk, "%d",
               c->def->validate_chunk > 0 ? c->def->validate_chunk
                                          : (int)(n > BF_BATCH_MAX ? BF_BATCH_MAX : n));
    const char *kp[] = {bound, size, after};
    PGresult *r = NULL;
    bf_err err = bf__exec(p->e, &r, "preflight: batch end", c->sql_batch_end, 3, kp);
    if (err != BF_OK)
        return err;
    bool has_batch =
        PQntuples(r) == 1 && !bf__isnull(r, 0, 0) && PQgetlength(r, 0, 0) < BF_KEY_TEXT_MAX;
    if (has_batch)
        err = bf__key_field(p->e, last, r, 0, 0);
    PQclear(r);
    if (err != BF_OK || !has_batch)
        return err;
    char keyset[96] = "", update[96] = "", vchunk[96] = "";
    err = plan_check(p, "keyset", c->sql_keys[1] + strlen(keys_prefix), false, 3, kp, where, keyset,
                     sizeof keyset);
    if (err == BF_OK && c->sql_plan_update != NULL) {
        const char *up[] = {after, last};
        err = plan_check(p, "mutation", c->sql_plan_update, true, 2, up, where, update,
                         sizeof update);
    }
    if (err == BF_OK && c->sql_vchunk[1] != NULL) {
        const char *vp[] = {bound, chunk, after};
        err = plan_check(p, "validation chunk", c->sql_vchunk[1], true, 3, vp, where, vchunk,
                         sizeof vchunk);
    }
    if (err != BF_OK || !report)
        return err;
    size_t off = strlen(p->summary);
    bf__format(p->summary + off, sizeof p->summary - off, "; keyset: %s%s%s%s%s", keyset,
               update[0] ? "; mutation: " : "", update, vchunk[0] ? "; validation: " : "", vchunk);
    return BF_OK;
}

/* A key (text[] literal) from a statement without parameters; "" when it returns none. */
static bf_err preflight_key(preflight *p, const char *what, const char *sql, char *key)
{
    PGresult *r = NULL;
    bf_err err = bf__exec(p->e, &r, what, sql, 0, NULL);
    if (err != BF_OK)
        return err;
    key[0] = '\0';
    /* a key too large to be a checkpoint is no place to plan at: its batch blocks on its own
     * with that diagnostic */
    if (PQntuples(r) == 1 && !bf__isnull(r, 0, 0) && PQgetlength(r, 0, 0) < BF_KEY_TEXT_MAX)
        err = bf__key_field(p->e, key, r, 0, 0);
    PQclear(r);
    return err;
}

static void preflight_init(preflight *p, bf_engine *e, const bf_compiled *c)
{
    memset(p, 0, sizeof *p);
    p->e = e;
    p->c = c;
    const char *dot = strchr(c->def->table, '.');
    p->relname = dot ? dot + 1 : c->def->table;
    if (dot != NULL)
        bf__format(p->table_name, sizeof p->table_name, "\"%.*s\".\"%s\"",
                   (int)(dot - c->def->table), c->def->table, dot + 1);
    else
        bf__format(p->table_name, sizeof p->table_name, "\"%s\"", c->def->table);
}

/* The bound Start would capture now: the greatest key (bound "" and *empty when none). */
static bf_err preflight_bound(preflight *p, char *bound, bool *empty)
{
    PGresult *r = NULL;
    bf_err err = bf__exec(p->e, &r, "capture bound", p->c->sql_bound, 0, NULL);
    if (err != BF_OK)
        return err;
    *empty = PQntuples(r) == 0;
    bound[0] = '\0';
    if (!*empty && bf__key_field(p->e, bound, r, 0, 0) != BF_OK)
        err = bf__diag(p->e, BF_ERR_DATA_INVARIANT,
                       "upper bound key is too large (at most %d bytes as text)",
                       BF_KEY_TEXT_MAX - 1);
    PQclear(r);
    return err;
}

bf_err bf__preflight(bf_engine *e, const bf_compiled *c, char *bound, bool *empty, char *report,
                     size_t cap)
{
    preflight p;
    preflight_init(&p, e, c);
    bf_err err = preflight_columns(&p);
    if (err == BF_OK)
        err = preflight_bound(&p, bound, empty);
    if (err == BF_OK)
        err = bf__key_unique(e, c);
    if (err == BF_OK)
        err = preflight_index(&p);
    char first[BF_KEY_TEXT_MAX] = "", middle[BF_KEY_TEXT_MAX] = "";
    if (err == BF_OK && !*empty)
        err = preflight_key(&p, "preflight: first key", c->sql_first, first);
    if (err == BF_OK && first[0])
        err = preflight_at(&p, bound, first, "at the first key", true);
    if (err == BF_OK && first[0])
        err = preflight_key(&p, "preflight: middle key", c->sql_middle, middle);
    if (err == BF_OK && middle[0] && strcmp(middle, first) != 0)
        err = preflight_at(&p, bound, middle, "in the middle of the table", false);
    if (err != BF_OK) {
        if (report != NULL && cap > 0)
            bf__copy(report, cap, e->diag);
        return err;
    }
    if (first[0] == '\0') {
        size_t off = strlen(p.summary);
        bf__format(p.summary + off, sizeof p.summary - off, "; no rows to plan a batch over");
    }
    if (report != NULL && cap > 0)
        bf__copy(report, cap, p.summary);
    return BF_OK;
}

static bf_err preflight_definition(bf_engine *e, const char *id, char *report, size_t cap)
{
    const bf_compiled *c = bf__registry_compiled(e->reg, id, NULL);
    if (c == NULL)
        return bf__diag(e, BF_ERR_UNKNOWN_DEFINITION, "this process has no definition for %s", id);
    bf_err err = bf__ensure_conn(e);
    if (err != BF_OK)
        return err;
    /* a row registered by a materially different definition is not this definition's work
     * (what registration, claims, start and validation refuse) */
    const char *params[] = {id, c->key_types, c->digest};
    PGresult *r = NULL;
    if ((err = bf__exec(e, &r, "preflight: stored definition",
                        "SELECT key_types = $2, definition_digest IS NULL OR definition_digest = $3"
                        " FROM buzz_backfill.backfill WHERE id = $1",
                        3, params)) != BF_OK) {
        /* no engine schema yet: nothing is registered, nothing to compare */
        if (strcmp(e->sqlstate, "42P01") != 0 && strcmp(e->sqlstate, "3F000") != 0)
            return err;
    } else {
        bool rows = PQntuples(r) == 1;
        bool same_keys = !rows || bf__field_bool(r, 0, 0);
        bool same_def = !rows || bf__field_bool(r, 0, 1);
        PQclear(r);
        if (!same_keys || !same_def) {
            err = bf__diag(e, BF_ERR_INCOMPATIBLE,
                           "%s is registered with %s than this definition's: a changed"
                           " definition needs a new stable ID",
                           id, same_keys ? "a materially different definition" : "other key types");
            if (report != NULL && cap > 0)
                bf__copy(report, cap, e->diag);
            return err;
        }
    }
    char bound[BF_KEY_TEXT_MAX];
    bool empty = true;
    err = bf__preflight(e, c, bound, &empty, report, cap);
    if (err != BF_OK || c->sql_needing == NULL || report == NULL || cap == 0)
        return err;
    /* how much work: the planner's estimate of the rows needing repair (nothing is counted) */
    bf_strbuf sb;
    bf__strbuf_init(&sb);
    bf__strbuf_addf(&sb, "EXPLAIN (FORMAT JSON) %s", c->sql_needing);
    char *explain = bf__strbuf_take(&sb);
    if (explain == NULL)
        return BF_ERR_NOMEM;
    err = bf__exec(e, &r, "preflight: estimate", explain, 0, NULL);
    free(explain);
    if (err != BF_OK)
        return err;
    const char *plan = PQntuples(r) == 1 ? bf__field(r, 0, 0) : "";
    const char *rows = strstr(plan, "\"Plan Rows\": ");
    if (rows != NULL) {
        size_t off = strlen(report);
        bf__format(report + off, cap - off, "; about %lld rows need repair (planner estimate)",
                   strtoll(rows + strlen("\"Plan Rows\": "), NULL, 10));
    }
    PQclear(r);
    return BF_OK;
}

bf_err bf_preflight(bf_engine *e, const char *id, char *report, size_t cap)
{
    if (e == NULL || id == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    bf_err err = preflight_definition(e, id, report, cap);
    /* every failure's report is its diagnostic: also one that came before the checks (no
     * definition, no connection) or after them (the estimate), when report held nothing or
     * the passing summary */
    if (err != BF_OK && report != NULL && cap > 0)
        bf__copy(report, cap, err == BF_ERR_NOMEM ? bf_err_str(err) : e->diag);
    return err;
}
