/*
 * watch_heal.c - reading a declarative definition's SET list for watch_writers = heal
 * (watch.c): the "column = expression" pairs, and whether heal can serve the definition
 * exactly (no callback, a needs-repair predicate, no subquery, no volatile function).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "strbuf.h"
#include "watch_impl.h"
size_t bf__heal_quoted(const char *s, char q)
{
    size_t i = 1;
    for (;;) {
        if (s[i] == '\0')
            return 0;
        if (s[i] == q) {
            if (s[i + 1] == q) {
                i += 2;
                continue;
            }
            return i + 1;
        }
        i++;
    }
}

/* Does the fragment read other rows or tables (a subquery), or use what heal will not embed
 * (dollar quotes, comments)? What it calls goes to names (identifiers followed by "("). */
static const char *heal_scan(const char *s, char names[][64], int *nnames, int max)
{
    for (size_t i = 0; s[i] != '\0';) {
        char ch = s[i];
        if (ch == '\'' || ch == '"') {
            size_t n = bf__heal_quoted(s + i, ch);
            if (n == 0)
                return "an unterminated quote";
            i += n;
            continue;
        }
        if (ch == '$' || (ch == '-' && s[i + 1] == '-') || (ch == '/' && s[i + 1] == '*'))
            return "a dollar quote or a comment";
        if (isalpha((unsigned char)ch) || ch == '_') {
            size_t j = i;
            while (isalnum((unsigned char)s[j]) || s[j] == '_')
                j++;
            size_t len = j - i;
            bool preceded_by_dot = i > 0 && s[i - 1] == '.';
            if (!preceded_by_dot && len == 6 && strncasecmp(s + i, "select", 6) == 0)
                return "a subquery, which reads other rows or tables";
            size_t k = j;
            while (s[k] == ' ' || s[k] == '\t' || s[k] == '\n')
                k++;
            if (s[k] == '(' && len < 64 && *nnames < max) {
                for (size_t c = 0; c < len; c++)
                    names[*nnames][c] = (char)tolower((unsigned char)s[i + c]);
                names[*nnames][len] = '\0';
                (*nnames)++;
            }
            i = j;
            continue;
        }
        i++;
    }
    return NULL;
}

/* Split "a = expr, b = expr" at its top-level commas into items; a reason when it cannot. */
static const char *heal_split(const char *set, bf_heal_item *items, int *nitems)
{
    int n = 0;
    size_t i = 0;
    while (set[i] != '\0') {
        while (isspace((unsigned char)set[i]))
            i++;
        if (n == BF_HEAL_MAX_COLUMNS)
            return "more columns than heal assigns";
        bf_heal_item *it = &items[n];
        size_t len = 0;
        if (set[i] == '"') {
            size_t q = bf__heal_quoted(set + i, '"');
            if (q < 3 || q - 2 >= sizeof it->column || memchr(set + i + 1, '"', q - 2) != NULL)
                return "a column name heal cannot read";
            memcpy(it->column, set + i + 1, q - 2);
            len = q - 2;
            i += q;
        } else {
            while (isalnum((unsigned char)set[i]) || set[i] == '_') {
                if (len + 1 >= sizeof it->column)
                    return "a column name heal cannot read";
                it->column[len++] = (char)tolower((unsigned char)set[i++]);
            }
        }
        it->column[len] = '\0';
        if (len == 0)
            return "a SET item that is not \"column = expression\"";
        while (isspace((unsigned char)set[i]))
            i++;
        if (set[i] != '=')
            return "a SET item that is not \"column = expression\"";
        i++;
        size_t start = i;
        int depth = 0;
        while (set[i] != '\0' && !(depth == 0 && set[i] == ',')) {
            if (set[i] == '\'' || set[i] == '"') {
                size_t q = bf__heal_quoted(set + i, set[i]);
                if (q == 0)
                    return "an unterminated quote";
                i += q;
                continue;
            }
            depth += set[i] == '(' ? 1 : set[i] == ')' ? -1 : 0;
            i++;
        }
        it->expr = set + start;
        it->expr_len = i - start;
        n++;
        if (set[i] == ',')
            i++;
    }
    if (n == 0)
        return "an empty SET list";
    *nitems = n;
    return NULL;
}

bf_err bf__heal_check(bf_engine *e, const bf_definition *d, bf_heal_item *items, int *nitems)
{
    static const char refuse[] = "watch_writers = heal cannot serve %s: %s";
    if (d->mutate != NULL || d->update_set == NULL || d->update_set[0] == '\0')
        return bf__diag(e, BF_ERR_DEFINITION, refuse, d->id,
                        "its mutation is a callback, not a SET list; use watch_writers = on");
    if (d->needs_repair == NULL || d->needs_repair[0] == '\0')
        return bf__diag(e, BF_ERR_DEFINITION, refuse, d->id, "it has no needs_repair predicate");
    char names[64][64];
    int nnames = 0;
    const char *why = heal_scan(d->update_set, names, &nnames, 64);
    if (why == NULL)
        why = heal_scan(d->needs_repair, names, &nnames, 64);
    if (why == NULL)
        why = heal_split(d->update_set, items, nitems);
    if (why != NULL)
        return bf__diag(e, BF_ERR_DEFINITION, refuse, d->id, why);
    if (nnames == 0)
        return BF_OK;
    bf_strbuf arr;
    bf__strbuf_init(&arr);
    bf__strbuf_add(&arr, "{");
    for (int i = 0; i < nnames; i++)
        bf__strbuf_add_element(&arr, names[i]);
    bf__strbuf_add(&arr, "}");
    char *lit = bf__strbuf_take(&arr);
    if (lit == NULL)
        return bf__diag(e, BF_ERR_NOMEM, "out of memory");
    const char *params[] = {lit};
    PGresult *r = NULL;
    bf_err err = bf__exec(e, &r, "heal volatility",
                          "SELECT p.proname FROM pg_proc p JOIN pg_namespace n"
                          " ON n.oid = p.pronamespace WHERE p.proname = ANY($1::text[])"
                          " AND (p.provolatile = 'v'"
                          "  OR (p.provolatile = 's' AND n.nspname <> 'pg_catalog'))"
                          " ORDER BY 1 LIMIT 1",
                          1, params);
    free(lit);
    if (err != BF_OK)
        return err;
    char fn[64] = "";
    if (PQntuples(r) == 1)
        bf__copy(fn, sizeof fn, bf__field(r, 0, 0));
    PQclear(r);
    if (fn[0] != '\0') {
        char reason[128];
        bf__format(reason, sizeof reason,
                   "it calls %s(), which is volatile or may read other tables", fn);
        return bf__diag(e, BF_ERR_DEFINITION, refuse, d->id, reason);
    }
    return BF_OK;
}
