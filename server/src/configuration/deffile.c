/*
 * deffile.c - definition files (deffile.h): the line parser, the bf_definition each file
 * becomes and the SQL callback form's callbacks. The directory of them is defdir.c.
 *
 * Design notes: a file is checked field by field as it is read, so that an error names the
 * line; what only the whole file can say (a missing field, the form) names the field; what the
 * registry checks on top (bf_registry_add) is reported with the file's name. The SQL callback
 * form is deliberately thin: each statement goes through bf_txn_exec()/bf_txn_query_int() with
 * no parameters, so it runs inside the engine's batch transaction, counts against the batch
 * bound, and is sent with the extended protocol, which refuses two statements in one string
 * (one `mutate` line holds one statement). Diagnostics name the file and counts, never rows.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buzz/engine.h"
#include "deffile.h"
#include "log.h"

#define DEFFILE_MUTATE_MAX 16 /* mutate statements in one file */
#define DEFFILE_MSG_MAX    200

typedef enum deffile_kind {
    DK_STRING, /* one line or a <<WORD block */
    DK_META,   /* at most BF_META_MAX bytes */
    DK_INT,
    DK_BOOL,
    DK_KEY,
    DK_STATEMENTS, /* repeatable: mutate */
} deffile_kind;

enum {
    DF_ID,
    DF_DESCRIPTION,
    DF_OWNER,
    DF_REVISION,
    DF_TABLE,
    DF_KEY,
    DF_BATCH_SIZE,
    DF_REQUIRED,
    DF_NEEDS_REPAIR,
    DF_UPDATE_SET,
    DF_POSTCONDITION,
    DF_PREREQUISITE,
    DF_VALIDATE_CHUNK,
    DF_RETRY_MAX_ATTEMPTS,
    DF_RETRY_BASE_MS,
    DF_RETRY_CAP_MS,
    DF_MUTATE,
    DF_INVARIANT,
    DF_INVARIANT_MESSAGE,
    DF_VALIDATE,
    DF_VALIDATE_MESSAGE,
    DF_WATCH_WRITERS,
    DF_NFIELDS
};

typedef struct deffile_field {
    const char *name;
    deffile_kind kind;
    int min, max; /* DK_INT */
} deffile_field;

static const deffile_field deffile_fields[DF_NFIELDS] = {
    [DF_ID] = {"id", DK_STRING, 0, 0},
    [DF_DESCRIPTION] = {"description", DK_META, 0, 0},
    [DF_OWNER] = {"owner", DK_META, 0, 0},
    [DF_REVISION] = {"revision", DK_META, 0, 0},
    [DF_TABLE] = {"table", DK_STRING, 0, 0},
    [DF_KEY] = {"key", DK_KEY, 0, 0},
    [DF_BATCH_SIZE] = {"batch_size", DK_INT, 1, BF_BATCH_MAX},
    [DF_REQUIRED] = {"required", DK_BOOL, 0, 0},
    [DF_NEEDS_REPAIR] = {"needs_repair", DK_STRING, 0, 0},
    [DF_UPDATE_SET] = {"update_set", DK_STRING, 0, 0},
    [DF_POSTCONDITION] = {"postcondition", DK_STRING, 0, 0},
    [DF_PREREQUISITE] = {"prerequisite", DK_STRING, 0, 0},
    [DF_VALIDATE_CHUNK] = {"validate_chunk", DK_INT, 0, BF_BATCH_MAX},
    [DF_RETRY_MAX_ATTEMPTS] = {"retry.max_attempts", DK_INT, 0, 100},
    [DF_RETRY_BASE_MS] = {"retry.base_ms", DK_INT, 0, 3600 * 1000},
    [DF_RETRY_CAP_MS] = {"retry.cap_ms", DK_INT, 0, 3600 * 1000},
    [DF_MUTATE] = {"mutate", DK_STATEMENTS, 0, 0},
    [DF_INVARIANT] = {"invariant", DK_STRING, 0, 0},
    [DF_INVARIANT_MESSAGE] = {"invariant_message", DK_META, 0, 0},
    [DF_VALIDATE] = {"validate", DK_STRING, 0, 0},
    [DF_VALIDATE_MESSAGE] = {"validate_message", DK_META, 0, 0},
    [DF_WATCH_WRITERS] = {"watch_writers", DK_STRING, 0, 0},
};

struct srv_deffile {
    bf_definition def;
    char *path;
    const char *base; /* the file name within path, for diagnostics */
    char *value[DF_NFIELDS];
    int line[DF_NFIELDS];
    char *key_names[BF_MAX_KEY_COLUMNS];
    char *mutate[DEFFILE_MUTATE_MAX];
    int n_mutate;
};

/* ---- messages ------------------------------------------------------------------------------ */

static bf_err deffile_fail(char *diag, size_t cap, const char *name, int line, const char *field,
                           const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static bf_err deffile_fail(char *diag, size_t cap, const char *name, int line, const char *field,
                           const char *fmt, ...)
{
    if (diag == NULL || cap == 0)
        return BF_ERR_DEFINITION;
    char why[DEFFILE_MSG_MAX + 100];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    char where[32] = "";
    if (line > 0)
        snprintf(where, sizeof where, ":%d", line);
    if (field != NULL)
        snprintf(diag, cap, "%s%s: %s: %s", name, where, field, why);
    else
        snprintf(diag, cap, "%s%s: %s", name, where, why);
    return BF_ERR_DEFINITION;
}

/* ---- values -------------------------------------------------------------------------------- */

static bool deffile_ident(const char *s, size_t n)
{
    if (n == 0 || n > 63 || !((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return false;
    return true;
}

static bool deffile_table(const char *t)
{
    const char *dot = strchr(t, '.');
    if (dot == NULL)
        return deffile_ident(t, strlen(t));
    return deffile_ident(t, (size_t)(dot - t)) && deffile_ident(dot + 1, strlen(dot + 1));
}

static bool deffile_int(const char *v, int min, int max, int *out)
{
    char *end = NULL;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || n < min || n > max)
        return false;
    *out = (int)n;
    return true;
}

static bool deffile_bool(const char *v, bool *out)
{
    static const char *const yes[] = {"true", "on", "yes"}, *const no[] = {"false", "off", "no"};
    for (size_t i = 0; i < 3; i++) {
        if (strcmp(v, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcmp(v, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    return false;
}

static char *deffile_trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

/* "name type[, name type]...": the ordering key. */
static bf_err deffile_key(srv_deffile *f, const char *value, int line, char *diag, size_t cap)
{
    char *copy = strdup(value);
    if (copy == NULL)
        return BF_ERR_NOMEM;
    bf_err err = BF_OK;
    int n = 0;
    char *save = NULL;
    for (char *col = strtok_r(copy, ",", &save); col != NULL && err == BF_OK;
         col = strtok_r(NULL, ",", &save)) {
        col = deffile_trim(col);
        char *sp = strpbrk(col, " \t");
        if (n == BF_MAX_KEY_COLUMNS) {
            err = deffile_fail(diag, cap, f->path, line, "key", "at most %d columns",
                               BF_MAX_KEY_COLUMNS);
            break;
        }
        if (sp == NULL) {
            err = deffile_fail(diag, cap, f->path, line, "key",
                               "column %d: write \"<column> <type>\" (e.g. \"id bigint\")", n + 1);
            break;
        }
        *sp = '\0';
        const char *type = deffile_trim(sp + 1);
        if (!deffile_ident(col, strlen(col))) {
            err = deffile_fail(diag, cap, f->path, line, "key",
                               "column %d: the name must be a lower-case identifier", n + 1);
            break;
        }
        bf_key_type kt = 0;
        for (int t = BF_KEY_BIGINT; t <= BF_KEY_UUID; t++)
            if (strcmp(type, bf_key_type_name((bf_key_type)t)) == 0)
                kt = (bf_key_type)t;
        if (kt == 0) {
            err = deffile_fail(diag, cap, f->path, line, "key",
                               "column %s: unsupported type \"%.40s\" (bigint, integer, "
                               "timestamptz, bytea or uuid)",
                               col, type);
            break;
        }
        for (int j = 0; j < n; j++)
            if (strcmp(f->key_names[j], col) == 0)
                err = deffile_fail(diag, cap, f->path, line, "key", "column %s appears twice", col);
        if (err != BF_OK)
            break;
        if ((f->key_names[n] = strdup(col)) == NULL) {
            err = BF_ERR_NOMEM;
            break;
        }
        f->def.key[n].name = f->key_names[n];
        f->def.key[n].type = kt;
        n++;
    }
    free(copy);
    if (err == BF_OK && n == 0)
        err = deffile_fail(diag, cap, f->path, line, "key", "no column given");
    f->def.nkey = n;
    return err;
}

/* Check and store one field's value (owned by the caller until stored). */
static bf_err deffile_set(srv_deffile *f, int k, char *value, int line, char *diag, size_t cap)
{
    const deffile_field *fd = &deffile_fields[k];
    const char *name = fd->name;
    if (value[0] == '\0')
        return deffile_fail(diag, cap, f->path, line, name, "empty value");
    if (fd->kind == DK_STATEMENTS) {
        if (f->n_mutate == DEFFILE_MUTATE_MAX)
            return deffile_fail(diag, cap, f->path, line, name, "at most %d statements",
                                DEFFILE_MUTATE_MAX);
        if (f->n_mutate == 0)
            f->line[k] = line;
        f->mutate[f->n_mutate++] = value;
        return BF_OK;
    }
    if (f->line[k] != 0)
        return deffile_fail(diag, cap, f->path, line, name, "set twice (first on line %d)",
                            f->line[k]);
    int n = 0;
    bool b = false;
    switch (fd->kind) {
    case DK_META:
        if (strlen(value) > BF_META_MAX)
            return deffile_fail(diag, cap, f->path, line, name, "longer than %d bytes",
                                BF_META_MAX);
        if (strchr(value, '\n') != NULL)
            return deffile_fail(diag, cap, f->path, line, name, "must be one line");
        break;
    case DK_INT:
        if (!deffile_int(value, fd->min, fd->max, &n))
            return deffile_fail(diag, cap, f->path, line, name, "must be an integer %d..%d",
                                fd->min, fd->max);
        break;
    case DK_BOOL:
        if (!deffile_bool(value, &b))
            return deffile_fail(diag, cap, f->path, line, name, "must be true or false");
        break;
    case DK_KEY: {
        bf_err err = deffile_key(f, value, line, diag, cap);
        if (err != BF_OK)
            return err;
        break;
    }
    case DK_STRING:
    case DK_STATEMENTS:
        break;
    }
    if (k == DF_ID && !bf_id_valid(value))
        return deffile_fail(diag, cap, f->path, line, name,
                            "a stable ID is [a-z][a-z0-9_.-]{2,62}");
    if (k == DF_TABLE && !deffile_table(value))
        return deffile_fail(diag, cap, f->path, line, name,
                            "must be [schema.]table in lower-case identifiers");
    if ((k == DF_NEEDS_REPAIR || k == DF_UPDATE_SET) && strstr(value, "$bf$") != NULL)
        return deffile_fail(diag, cap, f->path, line, name, "must not contain $bf$");
    if ((k == DF_INVARIANT_MESSAGE || k == DF_VALIDATE_MESSAGE) && strchr(value, '%') != NULL)
        return deffile_fail(diag, cap, f->path, line, name, "must not contain %%");
    switch (k) {
    case DF_BATCH_SIZE:
        f->def.batch_size = n;
        break;
    case DF_VALIDATE_CHUNK:
        f->def.validate_chunk = n;
        break;
    case DF_RETRY_MAX_ATTEMPTS:
        f->def.retry.max_attempts = n;
        break;
    case DF_RETRY_BASE_MS:
        f->def.retry.base_ms = n;
        break;
    case DF_RETRY_CAP_MS:
        f->def.retry.cap_ms = n;
        break;
    case DF_REQUIRED:
        f->def.required = b;
        break;
    case DF_WATCH_WRITERS:
        if (bf_watch_mode_parse(value, &f->def.watch_writers) != BF_OK)
            return deffile_fail(diag, cap, f->path, line, name, "must be off, on or heal");
        break;
    default:
        break;
    }
    f->value[k] = value;
    f->line[k] = line;
    return BF_OK;
}

/* ---- the SQL callback form ------------------------------------------------------------------ */

static bf_err deffile_mutate(bf_txn *txn, void *arg)
{
    const srv_deffile *f = arg;
    if (f->value[DF_INVARIANT] != NULL) {
        long long bad = 0;
        bf_err err = bf_txn_query_int(txn, f->value[DF_INVARIANT], 0, NULL, &bad);
        if (err != BF_OK)
            return err;
        if (bad > 0) {
            const char *msg = f->value[DF_INVARIANT_MESSAGE];
            bf_txn_set_diag(txn, "%lld of %ld rows in the batch: %s (invariant of %s)", bad,
                            bf_txn_batch_rows(txn), msg ? msg : "the mutation cannot repair them",
                            f->base);
            return BF_ERR_DATA_INVARIANT;
        }
    }
    for (int i = 0; i < f->n_mutate; i++) {
        long rows = 0;
        bf_err err = bf_txn_exec(txn, f->mutate[i], 0, NULL, &rows);
        if (err != BF_OK)
            return err;
    }
    return BF_OK;
}

static bf_err deffile_validate(bf_txn *txn, void *arg)
{
    const srv_deffile *f = arg;
    long long bad = 0;
    bf_err err = bf_txn_query_int(txn, f->value[DF_VALIDATE], 0, NULL, &bad);
    if (err != BF_OK)
        return err;
    if (bad > 0) {
        const char *msg = f->value[DF_VALIDATE_MESSAGE];
        bf_txn_set_diag(txn, "%lld of %ld rows in the chunk: %s (validate of %s)", bad,
                        bf_txn_batch_rows(txn), msg ? msg : "fail the postcondition", f->base);
        return BF_ERR_VALIDATION_FAILED;
    }
    return BF_OK;
}

/* ---- the parser ------------------------------------------------------------------------------ */

/* The whole file is read: check what needs every field, and point the definition at the
 * values. */
static bf_err deffile_finish(srv_deffile *f, char *diag, size_t cap)
{
    static const int required[] = {DF_ID, DF_TABLE, DF_KEY, DF_BATCH_SIZE};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (f->line[required[i]] == 0)
            return deffile_fail(diag, cap, f->path, 0, deffile_fields[required[i]].name,
                                "missing (every definition file sets id, table, key and "
                                "batch_size)");
    bool mutate = f->n_mutate > 0;
    if (!mutate && (f->value[DF_UPDATE_SET] == NULL || f->value[DF_NEEDS_REPAIR] == NULL))
        return deffile_fail(diag, cap, f->path, 0,
                            f->value[DF_UPDATE_SET] == NULL ? "update_set" : "needs_repair",
                            "missing (the declarative form needs needs_repair and update_set; "
                            "the SQL form one or more mutate statements)");
    if (mutate && f->value[DF_UPDATE_SET] != NULL)
        return deffile_fail(diag, cap, f->path, f->line[DF_UPDATE_SET], "update_set",
                            "a file with mutate statements has no update_set (one mutation)");
    if (!mutate && f->value[DF_INVARIANT] != NULL)
        return deffile_fail(diag, cap, f->path, f->line[DF_INVARIANT], "invariant",
                            "runs before the mutate statements; this file has none");
    if (f->value[DF_INVARIANT_MESSAGE] != NULL && f->value[DF_INVARIANT] == NULL)
        return deffile_fail(diag, cap, f->path, f->line[DF_INVARIANT_MESSAGE], "invariant_message",
                            "describes an invariant; this file has none");
    if (f->value[DF_VALIDATE_MESSAGE] != NULL && f->value[DF_VALIDATE] == NULL)
        return deffile_fail(diag, cap, f->path, f->line[DF_VALIDATE_MESSAGE], "validate_message",
                            "describes a validate statement; this file has none");
    if (f->value[DF_VALIDATE] == NULL && f->value[DF_NEEDS_REPAIR] == NULL &&
        f->value[DF_POSTCONDITION] == NULL)
        return deffile_fail(diag, cap, f->path, 0, "validate",
                            "missing (validation needs needs_repair, postcondition or validate)");
    bf_definition *d = &f->def;
    d->id = f->value[DF_ID];
    d->description = f->value[DF_DESCRIPTION];
    d->owner = f->value[DF_OWNER];
    d->revision = f->value[DF_REVISION];
    d->table = f->value[DF_TABLE];
    d->needs_repair = f->value[DF_NEEDS_REPAIR];
    d->update_set = f->value[DF_UPDATE_SET];
    d->postcondition = f->value[DF_POSTCONDITION];
    d->prerequisite = f->value[DF_PREREQUISITE];
    d->mutate = mutate ? deffile_mutate : NULL;
    d->validate = f->value[DF_VALIDATE] != NULL ? deffile_validate : NULL;
    d->arg = (d->mutate || d->validate) ? f : NULL;
    return BF_OK;
}

/* A <<WORD block: the lines after line (next) up to one that is WORD alone. */
static bf_err deffile_block(srv_deffile *f, const char *word, int k, int line, char **next,
                            int *lineno, char **out, char *diag, size_t cap)
{
    size_t wlen = strlen(word);
    bool word_ok = wlen > 0 && wlen <= 32 &&
                   strspn(word, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                "abcdefghijklmnopqrstuvwxyz_") == wlen;
    if (!word_ok)
        return deffile_fail(diag, cap, f->path, line, deffile_fields[k].name,
                            "a block starts with <<WORD (letters and _, e.g. <<SQL)");
    char *start = *next;
    char *p = start;
    while (p != NULL) {
        char *nl = strchr(p, '\n');
        (*lineno)++;
        char *end = nl ? nl : p + strlen(p);
        char *a = p, *b = end;
        while (a < b && (*a == ' ' || *a == '\t'))
            a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t' || b[-1] == '\r'))
            b--;
        if ((size_t)(b - a) == wlen && memcmp(a, word, wlen) == 0) {
            size_t n = (size_t)(p - start);
            char *v = malloc(n + 1);
            if (v == NULL)
                return BF_ERR_NOMEM;
            memcpy(v, start, n);
            v[n] = '\0';
            *out = v;
            *next = nl ? nl + 1 : NULL;
            return BF_OK;
        }
        p = nl ? nl + 1 : NULL;
    }
    return deffile_fail(diag, cap, f->path, line, deffile_fields[k].name,
                        "the block <<%s has no closing line \"%s\"", word, word);
}

/* A value as stored: a block or a line, trimmed; whitespace-only blocks become "". */
static char *deffile_value_trim(char *v)
{
    char *t = v;
    while (*t == ' ' || *t == '\t' || *t == '\n' || *t == '\r')
        t++;
    size_t n = strlen(t);
    while (n > 0 && (t[n - 1] == ' ' || t[n - 1] == '\t' || t[n - 1] == '\n' || t[n - 1] == '\r'))
        n--;
    memmove(v, t, n);
    v[n] = '\0';
    return v;
}

static bf_err deffile_parse_text(srv_deffile *f, char *text, char *diag, size_t cap)
{
    int lineno = 0;
    char *p = text;
    while (p != NULL) {
        char *nl = strchr(p, '\n');
        if (nl != NULL)
            *nl = '\0';
        char *next = nl ? nl + 1 : NULL;
        int line = ++lineno;
        char *s = deffile_trim(p);
        p = next;
        if (s[0] == '\0' || s[0] == '#')
            continue;
        char *eq = strchr(s, '=');
        if (eq == NULL)
            return deffile_fail(diag, cap, f->path, line, NULL,
                                "syntax error: expected \"field = value\"");
        *eq = '\0';
        char *name = deffile_trim(s);
        char *raw = deffile_trim(eq + 1);
        int k = -1;
        for (int i = 0; i < DF_NFIELDS; i++)
            if (strcmp(name, deffile_fields[i].name) == 0)
                k = i;
        if (k < 0)
            return deffile_fail(diag, cap, f->path, line, NULL, "unknown field \"%.64s\"", name);
        char *value = NULL;
        if (strncmp(raw, "<<", 2) == 0) {
            bf_err err = deffile_block(f, raw + 2, k, line, &p, &lineno, &value, diag, cap);
            if (err != BF_OK)
                return err;
        } else if ((value = strdup(raw)) == NULL) {
            return BF_ERR_NOMEM;
        }
        deffile_value_trim(value);
        bf_err err = deffile_set(f, k, value, line, diag, cap);
        if (err != BF_OK) {
            free(value);
            return err;
        }
    }
    return deffile_finish(f, diag, cap);
}

bf_err srv_deffile_parse(srv_deffile **out, const char *name, const char *text, size_t len,
                         char *diag, size_t diag_len)
{
    if (out == NULL || name == NULL || (text == NULL && len > 0))
        return BF_ERR_INVALID_ARGUMENT;
    if (memchr(text, '\0', len) != NULL)
        return deffile_fail(diag, diag_len, name, 0, NULL, "not a text file (a NUL byte)");
    srv_deffile *f = calloc(1, sizeof *f);
    char *copy = malloc(len + 1);
    if (f == NULL || copy == NULL || (f->path = strdup(name)) == NULL) {
        free(f);
        free(copy);
        return BF_ERR_NOMEM;
    }
    const char *slash = strrchr(f->path, '/');
    f->base = slash ? slash + 1 : f->path;
    if (len > 0)
        memcpy(copy, text, len);
    copy[len] = '\0';
    bf_err err = deffile_parse_text(f, copy, diag, diag_len);
    free(copy);
    if (err == BF_ERR_NOMEM && diag != NULL && diag_len > 0)
        snprintf(diag, diag_len, "%s: out of memory", name);
    if (err != BF_OK) {
        srv_deffile_free(f);
        return err;
    }
    *out = f;
    return BF_OK;
}

bf_err srv_deffile_check_mode(const char *path, const struct stat *st, bool dir, char *diag,
                              size_t cap)
{
    if (dir ? !S_ISDIR(st->st_mode) : !S_ISREG(st->st_mode))
        return deffile_fail(diag, cap, path, 0, NULL, "not a %s",
                            dir ? "directory" : "regular file");
    if ((st->st_mode & (S_IWGRP | S_IWOTH)) != 0)
        return deffile_fail(diag, cap, path, 0, NULL,
                            "the %s is writable by group or others, and definitions hold SQL "
                            "the daemon runs (chmod go-w)",
                            dir ? "directory" : "file");
    return BF_OK;
}

bf_err srv_deffile_load(srv_deffile **out, const char *path, char *diag, size_t diag_len)
{
    if (out == NULL || path == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        snprintf(diag, diag_len, "%s: cannot open the file: %s", path, strerror(errno));
        return BF_ERR_IO;
    }
    struct stat st;
    bf_err err = BF_OK;
    if (fstat(fd, &st) != 0) {
        snprintf(diag, diag_len, "%s: cannot read the file: %s", path, strerror(errno));
        err = BF_ERR_IO;
    } else if ((err = srv_deffile_check_mode(path, &st, false, diag, diag_len)) == BF_OK &&
               st.st_size > SRV_DEFFILE_MAX) {
        err = deffile_fail(diag, diag_len, path, 0, NULL, "larger than %d bytes", SRV_DEFFILE_MAX);
    }
    char *text = NULL;
    size_t len = 0;
    if (err == BF_OK && (text = malloc((size_t)st.st_size + 1)) == NULL)
        err = BF_ERR_NOMEM;
    while (err == BF_OK && len < (size_t)st.st_size) {
        ssize_t n = read(fd, text + len, (size_t)st.st_size - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            snprintf(diag, diag_len, "%s: cannot read the file: %s", path,
                     n < 0 ? strerror(errno) : "it shrank while read");
            err = BF_ERR_IO;
        } else {
            len += (size_t)n;
        }
    }
    close(fd);
    if (err == BF_OK)
        err = srv_deffile_parse(out, path, text, len, diag, diag_len);
    free(text);
    return err;
}

void srv_deffile_free(srv_deffile *f)
{
    if (f == NULL)
        return;
    for (int i = 0; i < DF_NFIELDS; i++)
        free(f->value[i]);
    for (int i = 0; i < BF_MAX_KEY_COLUMNS; i++)
        free(f->key_names[i]);
    for (int i = 0; i < f->n_mutate; i++)
        free(f->mutate[i]);
    free(f->path);
    free(f);
}

const bf_definition *srv_deffile_definition(const srv_deffile *f)
{
    return f ? &f->def : NULL;
}

const char *srv_deffile_path(const srv_deffile *f)
{
    return f ? f->path : NULL;
}

int srv_deffile_id_line(const srv_deffile *f)
{
    return f ? f->line[DF_ID] : 0;
}

static bool deffile_str_eq(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* A number or boolean field's value as the definition holds it (unset: its default, 0). */
static long deffile_number(const srv_deffile *f, int k)
{
    switch (k) {
    case DF_BATCH_SIZE:
        return f->def.batch_size;
    case DF_REQUIRED:
        return f->def.required;
    case DF_VALIDATE_CHUNK:
        return f->def.validate_chunk;
    case DF_RETRY_MAX_ATTEMPTS:
        return f->def.retry.max_attempts;
    case DF_RETRY_BASE_MS:
        return f->def.retry.base_ms;
    case DF_RETRY_CAP_MS:
        return f->def.retry.cap_ms;
    default:
        return 0;
    }
}

const char *srv_deffile_differs(const srv_deffile *a, const srv_deffile *b)
{
    for (int k = 0; k < DF_NFIELDS; k++) {
        if (k == DF_MUTATE) {
            bool same = a->n_mutate == b->n_mutate;
            for (int i = 0; same && i < a->n_mutate; i++)
                same = strcmp(a->mutate[i], b->mutate[i]) == 0;
            if (!same)
                return deffile_fields[k].name;
        } else if (k == DF_KEY) {
            bool same = a->def.nkey == b->def.nkey;
            for (int i = 0; same && i < a->def.nkey; i++)
                same = strcmp(a->def.key[i].name, b->def.key[i].name) == 0 &&
                       a->def.key[i].type == b->def.key[i].type;
            if (!same)
                return deffile_fields[k].name;
        } else if (deffile_fields[k].kind == DK_INT || deffile_fields[k].kind == DK_BOOL) {
            if (deffile_number(a, k) != deffile_number(b, k))
                return deffile_fields[k].name;
        } else if (!deffile_str_eq(a->value[k], b->value[k])) {
            return deffile_fields[k].name;
        }
    }
    return NULL;
}
