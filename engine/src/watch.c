/*
 * watch.c - the old-writer watchdog (docs/definitions.md "Old writers"): a row trigger the
 * engine installs on a backfill's table at start and removes at completion, which counts rows
 * written that break the postcondition by writer, and with heal repairs them as they are written.
 *
 * Design notes. The trigger's WHEN clause calls a per-definition SQL function of the row
 * ("bfw_ok_<h>(t)": SELECT the postcondition IS TRUE) that PostgreSQL inlines into the clause,
 * so a row that is fine costs one expression evaluation in the executor and no function call;
 * only a violating row runs old_writer_seen() (migrate.c version 10), which upserts one counter
 * row keyed by application_name, client address and role, as the engine's role. No key or value
 * of the row is stored. <h> is 16 hex characters of a BLAKE2b digest of the stable ID, so the
 * names are short identifiers whatever the ID.
 *
 * heal installs a BEFORE trigger instead, whose WHEN clause is the needs-repair predicate on
 * NEW and whose function assigns the SET list's expressions, evaluated on the row as written
 * (FROM (SELECT (NEW).*) AS t), to NEW's columns: the same repair a batch applies, to exactly
 * the rows a batch would select. The backfill's own writes never match: a batch writes repaired
 * rows. heal is refused for what it cannot serve exactly: callbacks, a SET list it cannot read
 * as "column = expression" pairs, a subquery (reads other rows or tables), or a function that is
 * volatile (or stable outside pg_catalog, which may read tables).
 *
 * The trigger is DDL on the relay's table: CREATE and DROP TRIGGER take a SHARE ROW EXCLUSIVE
 * lock, briefly, under the engine's lock_timeout; start installs it in its own transaction and
 * completion removes it after the completion committed, so a removal that cannot get its lock
 * leaves the trigger for bf_watch_sweep() rather than failing a completion.
 */
#include <ctype.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "strbuf.h"
#include "watch_impl.h"

#define WATCH_TAG "$bfw$" /* the dollar quote of the generated function bodies */

static const char *const watch_names[] = {
    [BF_WATCH_DEFAULT] = "default",
    [BF_WATCH_OFF] = "off",
    [BF_WATCH_ON] = "on",
    [BF_WATCH_HEAL] = "heal",
};

const char *bf_watch_mode_name(bf_watch_mode mode)
{
    if ((int)mode < 0 || (size_t)mode >= BF_ARRAY_LEN(watch_names))
        return NULL;
    return watch_names[mode];
}

bf_err bf_watch_mode_parse(const char *text, bf_watch_mode *out)
{
    if (text == NULL || out == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    for (size_t i = BF_WATCH_OFF; i < BF_ARRAY_LEN(watch_names); i++)
        if (strcmp(text, watch_names[i]) == 0) {
            *out = (bf_watch_mode)i;
            return BF_OK;
        }
    return BF_ERR_INVALID_ARGUMENT;
}

bf_watch_mode bf__watch_mode(const bf_engine *e, const bf_definition *d)
{
    if (d->watch_writers != BF_WATCH_DEFAULT)
        return d->watch_writers;
    return e->watch_writers == BF_WATCH_ON ? BF_WATCH_ON : BF_WATCH_OFF;
}

/* "0123456789abcdef": 8 bytes of BLAKE2b of the ID, in hex */
static void watch_hash(const char *id, char out[17])
{
    unsigned char h[8];
    crypto_generichash(h, sizeof h, (const unsigned char *)id, strlen(id), NULL, 0);
    sodium_bin2hex(out, 17, h, sizeof h);
}

static void watch_add_table(bf_strbuf *sb, const char *table)
{
    const char *dot = strchr(table, '.');
    if (dot == NULL)
        bf__strbuf_addf(sb, "\"%s\"", table);
    else
        bf__strbuf_addf(sb, "\"%.*s\".\"%s\"", (int)(dot - table), table, dot + 1);
}

/* ---- install ----------------------------------------------------------------------------- */

/* Run sql under a savepoint: an error rolls back to it and is returned (logged by bf__exec). */
static bf_err watch_try(bf_engine *e, const char *what, const char *sql)
{
    bf_err err = bf__exec0(e, "watch savepoint", "SAVEPOINT bf_watch", 0, NULL);
    if (err != BF_OK)
        return err;
    err = bf__exec0(e, what, sql, 0, NULL);
    if (err != BF_OK) {
        (void)bf__exec0(e, "watch rollback", "ROLLBACK TO SAVEPOINT bf_watch", 0, NULL);
        return err;
    }
    return bf__exec0(e, "watch release", "RELEASE SAVEPOINT bf_watch", 0, NULL);
}

/* CREATE the row predicate function name(t table) RETURNS boolean: inlinable when the
 * fragment names its columns through t, else through a FROM (not inlined, still correct). */
static bf_err watch_predicate(bf_engine *e, const bf_definition *d, const char *name,
                              const char *pred, const char *test)
{
    for (int form = 0; form < 2; form++) {
        bf_strbuf sb;
        bf__strbuf_init(&sb);
        bf__strbuf_addf(&sb, "CREATE OR REPLACE FUNCTION buzz_backfill.%s(%s ", name,
                        form == 0 ? "t" : "");
        watch_add_table(&sb, d->table);
        bf__strbuf_addf(&sb,
                        ") RETURNS boolean LANGUAGE sql STABLE AS " WATCH_TAG " SELECT (%s) %s",
                        pred, test);
        if (form == 1)
            bf__strbuf_add(&sb, " FROM (SELECT ($1).*) AS t");
        bf__strbuf_add(&sb, " " WATCH_TAG);
        char *sql = bf__strbuf_take(&sb);
        if (sql == NULL)
            return bf__diag(e, BF_ERR_NOMEM, "out of memory");
        bf_err err = watch_try(e, "watch predicate", sql);
        free(sql);
        if (err == BF_OK || form == 1)
            return err;
    }
    return BF_ERR_INTERNAL; /* not reached */
}

static bf_err watch_heal_function(bf_engine *e, const char *name, const bf_heal_item *items, int n)
{
    bf_strbuf sb;
    bf__strbuf_init(&sb);
    bf__strbuf_addf(&sb,
                    "CREATE OR REPLACE FUNCTION buzz_backfill.%s() RETURNS trigger"
                    " LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS " WATCH_TAG
                    " BEGIN SELECT ",
                    name);
    for (int i = 0; i < n; i++)
        bf__strbuf_addf(&sb, "%s(%.*s)", i ? ", " : "", (int)items[i].expr_len, items[i].expr);
    bf__strbuf_add(&sb, " INTO ");
    for (int i = 0; i < n; i++)
        bf__strbuf_addf(&sb, "%sNEW.\"%s\"", i ? ", " : "", items[i].column);
    bf__strbuf_add(&sb, " FROM (SELECT (NEW).*) AS t;"
                        " PERFORM buzz_backfill.old_writer_count(TG_ARGV[0], true);"
                        " RETURN NEW; END " WATCH_TAG);
    char *sql = bf__strbuf_take(&sb);
    if (sql == NULL)
        return bf__diag(e, BF_ERR_NOMEM, "out of memory");
    bf_err err = watch_try(e, "watch heal function", sql);
    free(sql);
    return err;
}

/* pred with every t.column read as NEW.column (quotes skipped); caller frees; NULL: no memory */
static char *watch_rewrite(const char *pred)
{
    bf_strbuf sb;
    bf__strbuf_init(&sb);
    for (size_t i = 0; pred[i] != '\0';) {
        char ch = pred[i];
        if (ch == '\'' || ch == '"') {
            size_t n = bf__heal_quoted(pred + i, ch);
            if (n == 0)
                n = strlen(pred + i);
            bf__strbuf_addf(&sb, "%.*s", (int)n, pred + i);
            i += n;
            continue;
        }
        if (isalpha((unsigned char)ch) || ch == '_') {
            size_t j = i;
            while (isalnum((unsigned char)pred[j]) || pred[j] == '_' || pred[j] == '$')
                j++;
            bool alias = j - i == 1 && (ch == 't' || ch == 'T') && pred[j] == '.' &&
                         (i == 0 || pred[i - 1] != '.');
            if (alias)
                bf__strbuf_add(&sb, "NEW");
            else
                bf__strbuf_addf(&sb, "%.*s", (int)(j - i), pred + i);
            i = j;
            continue;
        }
        bf__strbuf_addf(&sb, "%c", ch);
        i++;
    }
    return bf__strbuf_take(&sb);
}

/* CREATE TRIGGER: WHEN (<not>(<expr>) <test>) for a direct predicate, WHEN
 * (<not>buzz_backfill.<expr>(NEW)) for a predicate function; direct ones run under a savepoint
 * (an error leaves the transaction usable for the fallback). */
static bf_err watch_trigger(bf_engine *e, const bf_definition *d, const char *key,
                            bf_watch_mode mode, const char *trigger, const char * not,
                            const char *expr, const char *test, const char *fn_heal, bool direct)
{
    bf_strbuf sb;
    bf__strbuf_init(&sb);
    bf__strbuf_addf(&sb, "CREATE TRIGGER %s %s INSERT OR UPDATE ON ", trigger,
                    mode == BF_WATCH_HEAL ? "BEFORE" : "AFTER");
    watch_add_table(&sb, d->table);
    if (direct)
        bf__strbuf_addf(&sb, " FOR EACH ROW WHEN (%s((%s) %s))", not, expr, test);
    else
        bf__strbuf_addf(&sb, " FOR EACH ROW WHEN (%sbuzz_backfill.%s(NEW))", not, expr);
    if (mode == BF_WATCH_HEAL)
        bf__strbuf_addf(&sb, " EXECUTE FUNCTION buzz_backfill.%s('%s')", fn_heal, key);
    else
        bf__strbuf_addf(&sb, " EXECUTE FUNCTION buzz_backfill.old_writer_seen('%s')", key);
    char *sql = bf__strbuf_take(&sb);
    if (sql == NULL)
        return bf__diag(e, BF_ERR_NOMEM, "out of memory");
    bf_err err =
        direct ? watch_try(e, "watch trigger", sql) : bf__exec0(e, "watch trigger", sql, 0, NULL);
    free(sql);
    return err;
}

bf_err bf__watch_install(bf_engine *e, const bf_compiled *c)
{
    const bf_definition *d = c->def;
    bf_watch_mode mode = bf__watch_mode(e, d);
    if (mode != BF_WATCH_ON && mode != BF_WATCH_HEAL)
        return BF_OK;
    return bf__watch_install_key(e, d, mode, d->id);
}

bf_err bf__watch_install_key(bf_engine *e, const bf_definition *d, bf_watch_mode mode,
                             const char *key)
{
    bool has_post = d->postcondition != NULL && d->postcondition[0] != '\0';
    bool has_needs = d->mutate == NULL && d->needs_repair != NULL && d->needs_repair[0] != '\0';
    if (!has_post && !has_needs) {
        if (d->watch_writers == BF_WATCH_DEFAULT) {
            bf__log(e, BF_LOG_INFO, "%s: not watched for old writers: no postcondition", d->id);
            return BF_OK;
        }
        return bf__diag(e, BF_ERR_DEFINITION,
                        "watch_writers needs a postcondition: %s declares none", d->id);
    }
    if ((has_post && strstr(d->postcondition, WATCH_TAG) != NULL) ||
        (d->needs_repair != NULL && strstr(d->needs_repair, WATCH_TAG) != NULL) ||
        (d->update_set != NULL && strstr(d->update_set, WATCH_TAG) != NULL))
        return bf__diag(e, BF_ERR_DEFINITION, "watch_writers cannot embed %s: it contains %s",
                        d->id, WATCH_TAG);
    bf_heal_item items[BF_HEAL_MAX_COLUMNS];
    int nitems = 0;
    bf_err err;
    if (mode == BF_WATCH_HEAL && (err = bf__heal_check(e, d, items, &nitems)) != BF_OK)
        return err;
    char h[17], trigger[32], fn_pred[32], fn_heal[32];
    watch_hash(key, h);
    bf__format(trigger, sizeof trigger, "buzz_watch_%s", h);
    bf__format(fn_pred, sizeof fn_pred, "bfw_%s_%s", mode == BF_WATCH_HEAL ? "nr" : "ok", h);
    bf__format(fn_heal, sizeof fn_heal, "bfw_heal_%s", h);
    char lock[64];
    bf__format(lock, sizeof lock, "SET LOCAL lock_timeout = %d", e->lock_timeout_ms);
    if ((err = bf__exec0(e, "watch lock timeout", lock, 0, NULL)) != BF_OK)
        return err;
    if (mode == BF_WATCH_HEAL && (err = watch_heal_function(e, fn_heal, items, nitems)) != BF_OK)
        return bf__diag(e, err == BF_ERR_NOMEM ? err : BF_ERR_DEFINITION,
                        "could not install the old-writer watch of %s (see the log)", d->id);
    const char *pred = mode == BF_WATCH_HEAL ? d->needs_repair
                       : has_post            ? d->postcondition
                                             : d->needs_repair;
    const char *test = mode == BF_WATCH_HEAL || has_post ? "IS TRUE" : "IS NOT TRUE";
    /* the predicate itself in the WHEN clause, its t. read as NEW.: compiled once per
     * statement, no function to inline or call; a fragment naming bare columns falls back to
     * the predicate function */
    char *direct = watch_rewrite(pred);
    if (direct == NULL)
        return bf__diag(e, BF_ERR_NOMEM, "out of memory");
    char when[32];
    bf__format(when, sizeof when, "%s", mode == BF_WATCH_HEAL ? "" : "NOT ");
    bool inline_when = true;
    err = watch_trigger(e, d, key, mode, trigger, when, direct, test, fn_heal, true);
    free(direct);
    if (err == BF_ERR_NOMEM)
        return err;
    if (err != BF_OK) {
        inline_when = false;
        err = watch_predicate(e, d, fn_pred, pred, test);
        if (err == BF_OK)
            err = watch_trigger(e, d, key, mode, trigger, when, fn_pred, NULL, fn_heal, false);
    }
    if (err != BF_OK)
        return bf__diag(e, err == BF_ERR_NOMEM ? err : BF_ERR_DEFINITION,
                        "could not install the old-writer watch of %s (see the log)", d->id);
    bf_strbuf tb;
    bf__strbuf_init(&tb);
    watch_add_table(&tb, d->table);
    char *table = bf__strbuf_take(&tb);
    char fns[80];
    if (mode == BF_WATCH_HEAL)
        bf__format(fns, sizeof fns, "{%s%s%s}", fn_heal, inline_when ? "" : ",",
                   inline_when ? "" : fn_pred);
    else
        bf__format(fns, sizeof fns, "{%s}", inline_when ? "" : fn_pred);
    const char *params[] = {key, table, trigger, fns, bf_watch_mode_name(mode)};
    err = table == NULL ? bf__diag(e, BF_ERR_NOMEM, "out of memory")
                        : bf__exec0(e, "record watch",
                                    /* the row's flag, for the read model (schema 11); the
                                     * probe's key names no row */
                                    "WITH flag AS (UPDATE buzz_backfill.backfill SET"
                                    " watched = true WHERE id = $1 AND NOT watched)"
                                    " INSERT INTO buzz_backfill.watch (backfill_id, table_name,"
                                    " trigger_name, functions, mode, installed_at)"
                                    " VALUES ($1, $2, $3, $4::text[], $5, clock_timestamp())"
                                    " ON CONFLICT (backfill_id) DO UPDATE SET"
                                    " table_name = $2, trigger_name = $3, functions = $4::text[],"
                                    " mode = $5, installed_at = clock_timestamp(),"
                                    " removed_at = NULL, blocked_through = NULL",
                                    5, params);
    free(table);
    return err;
}

/* ---- remove ------------------------------------------------------------------------------ */

bf_err bf__watch_drop(bf_engine *e, const char *id, bool *removed)
{
    *removed = false;
    const char *params[] = {id};
    PGresult *r = NULL;
    bf_err err = bf__exec(e, &r, "read watch",
                          "SELECT table_name, trigger_name, array_to_string(functions, ' ')"
                          " FROM buzz_backfill.watch WHERE backfill_id = $1"
                          " AND removed_at IS NULL FOR UPDATE",
                          1, params);
    if (err != BF_OK)
        return err;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return BF_OK;
    }
    bf_strbuf sb;
    bf__strbuf_init(&sb);
    bf__strbuf_addf(&sb, "SET LOCAL lock_timeout = %d; DROP TRIGGER IF EXISTS \"%s\" ON %s;",
                    e->lock_timeout_ms, bf__field(r, 0, 1), bf__field(r, 0, 0));
    char fns[80];
    bf__copy(fns, sizeof fns, bf__field(r, 0, 2));
    PQclear(r);
    for (char *save = NULL, *f = strtok_r(fns, " ", &save); f != NULL;
         f = strtok_r(NULL, " ", &save))
        bf__strbuf_addf(&sb, " DROP FUNCTION IF EXISTS buzz_backfill.\"%s\";", f);
    bf__strbuf_add(&sb, " UPDATE buzz_backfill.watch SET removed_at = clock_timestamp()"
                        " WHERE backfill_id = ");
    char *sql = bf__strbuf_take(&sb);
    if (sql == NULL)
        return bf__diag(e, BF_ERR_NOMEM, "out of memory");
    /* the ID is a valid stable ID ([a-z0-9_.-]): safe inside a literal */
    bf_strbuf full;
    bf__strbuf_init(&full);
    bf__strbuf_addf(&full, "%s'%s'", sql, id);
    free(sql);
    sql = bf__strbuf_take(&full);
    if (sql == NULL)
        return bf__diag(e, BF_ERR_NOMEM, "out of memory");
    PGresult *x = PQexec(e->conn, sql);
    free(sql);
    if (PQresultStatus(x) != PGRES_COMMAND_OK)
        err = bf__pg_error(e, x, "remove watch");
    PQclear(x);
    if (err == BF_OK)
        *removed = true;
    return err;
}

static bf_err watch_remove_key(bf_engine *e, const char *id, bool *removed);

bf_err bf__watch_remove(bf_engine *e, const char *id, bool *removed)
{
    if (!bf_id_valid(id))
        return BF_ERR_INVALID_ARGUMENT;
    return watch_remove_key(e, id, removed);
}

/* bf__watch_remove() of a stable ID or a probe's key ("probe:<id>") */
static bf_err watch_remove_key(bf_engine *e, const char *id, bool *removed)
{
    bool dummy;
    if (removed == NULL)
        removed = &dummy;
    *removed = false;
    bf_err err = bf__ensure_conn(e);
    if (err == BF_OK)
        err = bf__begin(e, false);
    if (err != BF_OK)
        return err;
    bool was = false;
    err = bf__watch_drop(e, id, &was);
    if (err == BF_OK)
        err = bf__commit(e);
    if (err != BF_OK) {
        bf__rollback(e);
        bf__log(e, BF_LOG_WARN, "%s: could not remove its old-writer watch yet (the sweep will)",
                id);
        return err;
    }
    *removed = was;
    if (was)
        bf__log(e, BF_LOG_INFO, "%s: old-writer watch removed", id);
    return BF_OK;
}

bf_err bf_watch_off(bf_engine *e, const char *id, const bf_actor *who, bool *removed_out)
{
    if (e == NULL || !bf_id_valid(id))
        return BF_ERR_INVALID_ARGUMENT;
    bf_err err = bf__ensure_conn(e);
    if (err == BF_OK)
        err = bf__begin(e, false);
    if (err != BF_OK)
        return err;
    bf_backfill row;
    bool removed = false;
    err = bf__get_row(e, id, true, &row);
    if (err == BF_OK)
        err = bf__watch_drop(e, id, &removed);
    if (err == BF_OK) {
        bf_audit_record rec = {.backfill_id = id,
                               .action = "watch_off",
                               .who = who,
                               .prior = row.state,
                               .result = row.state,
                               .has_generation = true,
                               .generation = row.generation,
                               .outcome = removed ? "old-writer watch removed"
                                                  : "no old-writer watch was installed"};
        err = bf__audit(e, &rec);
    }
    if (err == BF_OK)
        err = bf__commit(e);
    if (err != BF_OK) {
        bf__rollback(e);
        return err;
    }
    if (removed_out != NULL)
        *removed_out = removed;
    return BF_OK;
}

bf_err bf_watch_sweep(bf_engine *e, int grace_s, int *removed_out)
{
    if (e == NULL || grace_s < 0)
        return BF_ERR_INVALID_ARGUMENT;
    bf_err err = bf__ensure_conn(e);
    if (err != BF_OK)
        return err;
    char grace[16];
    bf__format(grace, sizeof grace, "%d", grace_s);
    const char *params[] = {grace};
    PGresult *r = NULL;
    err = bf__exec(e, &r, "watches to sweep",
                   "SELECT w.backfill_id FROM buzz_backfill.watch w"
                   " LEFT JOIN buzz_backfill.backfill b ON b.id = w.backfill_id"
                   " WHERE w.removed_at IS NULL AND ((b.id IS NULL"
                   "  AND (w.backfill_id NOT LIKE 'probe:%' OR w.installed_at"
                   "   < clock_timestamp() - interval '2 hours'))"
                   "  OR (b.state = 'completed'"
                   "  AND b.completed_at + $1::integer * interval '1 s' <= clock_timestamp()))"
                   " ORDER BY 1 LIMIT 100",
                   1, params);
    if (err != BF_OK)
        return err;
    int removed = 0;
    for (int i = 0; i < PQntuples(r); i++) {
        bool was = false;
        if (watch_remove_key(e, bf__field(r, i, 0), &was) == BF_OK && was)
            removed++;
    }
    PQclear(r);
    if (removed_out != NULL)
        *removed_out = removed;
    return BF_OK;
}
