/*
 * bt_files.c - the files variant of the conformance suites (bt_files.h): loading the definition
 * file that stands in for a C definition, and the check that the two are the same definition.
 *
 * Design notes: the check has two halves. bt_files_field compares the two bf_definition
 * structs member by member, so nothing the engine compiles (and nothing it stores at
 * registration) can differ; it cannot see the SQL a callback runs. So the C definition is also
 * written out as a definition file (bt_files_text_of), parsed by the daemon's parser, and
 * compared with the stand-in by srv_deffile_differs: that compares the mutate statements of a
 * bt_sql_mutate definition with the file's. The files are read and parsed from memory (not
 * srv_deffile_load) so that a checkout whose umask leaves them group-writable still runs; a
 * daemon gets copies in a private directory (bt_files_write).
 */
#include "bt_files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bt.h"
#include "deffile.h"

#ifndef BUZZ_CONFORMANCE_DEFINITIONS_DIR
#error "BUZZ_CONFORMANCE_DEFINITIONS_DIR is not defined (tests/CMakeLists.txt)"
#endif

/* One loaded stand-in: the file of an ID with a revision (NULL: the file's own). */
typedef struct bt_files_entry {
    struct bt_files_entry *next;
    char *id;
    char *revision;
    char *text; /* what was parsed: the file, with the revision replaced */
    srv_deffile *file;
} bt_files_entry;

static bt_files_entry *bt_files_loaded; /* kept until exit: registries point into them */

bf_err bt_files_mode(bool *on, char *why, size_t why_len)
{
    const char *v = getenv("BUZZ_CONFORMANCE_DEFINITIONS");
    if (v == NULL || v[0] == '\0') {
        *on = false;
        return BF_OK;
    }
    if (strcmp(v, "files") != 0) {
        snprintf(why, why_len,
                 "BUZZ_CONFORMANCE_DEFINITIONS: \"%.40s\" is not a mode (files, or unset)", v);
        return BF_ERR_INVALID_ARGUMENT;
    }
    *on = true;
    return BF_OK;
}

bool bt_files_stays_c(const bf_definition *def)
{
    return def->validate != NULL || (def->mutate != NULL && def->mutate != bt_sql_mutate);
}

/* ---- the comparison ------------------------------------------------------------------------ */

static bool bt_files_str_eq(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* The first member of bf_definition that differs between a (C) and b (the file), or NULL. Every
 * member but arg (the callbacks' private data) is compared: a member added to bf_definition
 * belongs here. */
static const char *bt_files_field(const bf_definition *a, const bf_definition *b)
{
    static const struct {
        const char *name;
        size_t off;
    } strs[] = {
        {"id", offsetof(bf_definition, id)},
        {"description", offsetof(bf_definition, description)},
        {"owner", offsetof(bf_definition, owner)},
        {"revision", offsetof(bf_definition, revision)},
        {"table", offsetof(bf_definition, table)},
        {"needs_repair", offsetof(bf_definition, needs_repair)},
        {"update_set", offsetof(bf_definition, update_set)},
        {"postcondition", offsetof(bf_definition, postcondition)},
        {"prerequisite", offsetof(bf_definition, prerequisite)},
    };
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        const char *sa = *(const char *const *)((const char *)a + strs[i].off);
        const char *sb = *(const char *const *)((const char *)b + strs[i].off);
        if (!bt_files_str_eq(sa, sb))
            return strs[i].name;
    }
    if (a->nkey != b->nkey)
        return "key";
    for (int i = 0; i < a->nkey; i++)
        if (!bt_files_str_eq(a->key[i].name, b->key[i].name) || a->key[i].type != b->key[i].type)
            return "key";
    if (a->batch_size != b->batch_size)
        return "batch_size";
    if (a->required != b->required)
        return "required";
    if ((a->mutate == NULL) != (b->mutate == NULL))
        return "mutate";
    if ((a->validate == NULL) != (b->validate == NULL))
        return "validate";
    if (a->validate_chunk != b->validate_chunk)
        return "validate_chunk";
    if (a->retry.max_attempts != b->retry.max_attempts)
        return "retry.max_attempts";
    if (a->retry.base_ms != b->retry.base_ms)
        return "retry.base_ms";
    if (a->retry.cap_ms != b->retry.cap_ms)
        return "retry.cap_ms";
    if (a->watch_writers != b->watch_writers)
        return "watch_writers";
    return NULL;
}

/* ---- definition text ----------------------------------------------------------------------- */

static void bt_files_put(FILE *f, const char *name, const char *value)
{
    if (value == NULL)
        return;
    if (strchr(value, '\n') != NULL)
        fprintf(f, "%s = <<SQL\n%s\nSQL\n", name, value);
    else
        fprintf(f, "%s = %s\n", name, value);
}

static void bt_files_put_int(FILE *f, const char *name, int value)
{
    if (value != 0)
        fprintf(f, "%s = %d\n", name, value);
}

/* def as a definition file (caller frees); NULL when out of memory. The statements of a
 * bt_sql_mutate callback become mutate lines. */
static char *bt_files_text_of(const bf_definition *def)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        return NULL;
    bt_files_put(f, "id", def->id);
    bt_files_put(f, "description", def->description);
    bt_files_put(f, "owner", def->owner);
    bt_files_put(f, "revision", def->revision);
    bt_files_put(f, "table", def->table);
    fputs("key = ", f);
    for (int i = 0; i < def->nkey; i++)
        fprintf(f, "%s%s %s", i ? ", " : "", def->key[i].name,
                bf_key_type_name(def->key[i].type) ? bf_key_type_name(def->key[i].type) : "?");
    fputc('\n', f);
    bt_files_put_int(f, "batch_size", def->batch_size);
    if (def->required)
        fputs("required = true\n", f);
    bt_files_put(f, "needs_repair", def->needs_repair);
    bt_files_put(f, "update_set", def->update_set);
    bt_files_put(f, "postcondition", def->postcondition);
    bt_files_put(f, "prerequisite", def->prerequisite);
    bt_files_put_int(f, "validate_chunk", def->validate_chunk);
    bt_files_put_int(f, "retry.max_attempts", def->retry.max_attempts);
    bt_files_put_int(f, "retry.base_ms", def->retry.base_ms);
    bt_files_put_int(f, "retry.cap_ms", def->retry.cap_ms);
    if (def->watch_writers != BF_WATCH_DEFAULT)
        bt_files_put(f, "watch_writers", bf_watch_mode_name(def->watch_writers));
    if (def->mutate == bt_sql_mutate)
        for (const char *const *s = def->arg; s != NULL && *s != NULL; s++)
            bt_files_put(f, "mutate", *s);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* text with its revision line replaced by "revision = <revision>" (caller frees) */
static char *bt_files_with_revision(const char *text, const char *revision)
{
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    if (f == NULL)
        return NULL;
    for (const char *p = text; *p != '\0';) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) + 1 : strlen(p);
        const char *s = p + strspn(p, " \t");
        const char *e = s + strlen("revision");
        bool is_revision =
            strncmp(s, "revision", strlen("revision")) == 0 && e[strspn(e, " \t")] == '=';
        if (!is_revision)
            fwrite(p, 1, n, f);
        p += n;
    }
    if (len > 0 && out[len - 1] != '\n')
        fputc('\n', f);
    fprintf(f, "revision = %s\n", revision);
    if (fclose(f) != 0) {
        free(out);
        return NULL;
    }
    return out;
}

/* The whole file at path (caller frees); NULL with errno set. */
static char *bt_files_read(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *grown = realloc(text, cap);
            if (grown == NULL) {
                free(text);
                close(fd);
                errno = ENOMEM;
                return NULL;
            }
            text = grown;
        }
        ssize_t n = read(fd, text + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int saved = errno;
            free(text);
            close(fd);
            errno = saved;
            return NULL;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    text[len] = '\0';
    return text;
}

/* ---- stand-ins ----------------------------------------------------------------------------- */

static bt_files_entry *bt_files_find(const char *id, const char *revision)
{
    for (bt_files_entry *e = bt_files_loaded; e != NULL; e = e->next)
        if (strcmp(e->id, id) == 0 && bt_files_str_eq(e->revision, revision))
            return e;
    return NULL;
}

static void bt_files_entry_free(bt_files_entry *e)
{
    if (e == NULL)
        return;
    srv_deffile_free(e->file);
    free(e->text);
    free(e->revision);
    free(e->id);
    free(e);
}

/* Load the file of def's ID (revision replaced when not NULL) into a new entry. */
static bf_err bt_files_load(bt_files_entry **out, const bf_definition *def, const char *revision,
                            char *why, size_t why_len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.def", BUZZ_CONFORMANCE_DEFINITIONS_DIR, def->id);
    char *text = bt_files_read(path);
    if (text == NULL) {
        snprintf(why, why_len, "%s: no definition file stands in for C definition %s: %s", path,
                 def->id, strerror(errno));
        return BF_ERR_DEFINITION;
    }
    if (revision != NULL) {
        char *replaced = bt_files_with_revision(text, revision);
        free(text);
        if ((text = replaced) == NULL)
            return BF_ERR_NOMEM;
    }
    bt_files_entry *e = calloc(1, sizeof *e);
    if (e == NULL || (e->id = strdup(def->id)) == NULL ||
        (revision != NULL && (e->revision = strdup(revision)) == NULL)) {
        free(text);
        bt_files_entry_free(e);
        return BF_ERR_NOMEM;
    }
    e->text = text;
    bf_err err = srv_deffile_parse(&e->file, path, text, strlen(text), why, why_len);
    if (err != BF_OK) {
        bt_files_entry_free(e);
        return err;
    }
    *out = e;
    return BF_OK;
}

/* Is the file of e the same definition as def? */
static bf_err bt_files_check(const bt_files_entry *e, const bf_definition *def, char *why,
                             size_t why_len)
{
    const char *path = srv_deffile_path(e->file);
    const char *field = bt_files_field(def, srv_deffile_definition(e->file));
    if (field == NULL) {
        char *text = bt_files_text_of(def);
        if (text == NULL)
            return BF_ERR_NOMEM;
        srv_deffile *from_c = NULL;
        char diag[BF_DIAG_MAX] = "";
        bf_err err =
            srv_deffile_parse(&from_c, "(the C definition)", text, strlen(text), diag, sizeof diag);
        free(text);
        if (err != BF_OK) {
            snprintf(why, why_len, "%s: C definition %s cannot be written as a file: %s", path,
                     def->id, diag);
            return BF_ERR_DEFINITION;
        }
        field = srv_deffile_differs(from_c, e->file);
        srv_deffile_free(from_c);
    }
    if (field != NULL) {
        snprintf(why, why_len,
                 "%s: %s: the file differs from C definition %s (the files variant runs the C "
                 "suite's definitions: change both)",
                 path, field, def->id);
        return BF_ERR_DEFINITION;
    }
    return BF_OK;
}

bf_err bt_files_standin(const bf_definition **out, const bf_definition *def, const char *revision,
                        char *why, size_t why_len)
{
    if (bt_files_stays_c(def)) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.def", BUZZ_CONFORMANCE_DEFINITIONS_DIR, def->id);
        if (access(path, F_OK) == 0) {
            snprintf(why, why_len,
                     "%s: C definition %s has C callbacks and stays C: remove the file, or write "
                     "its mutation with bt_sql_mutate",
                     path, def->id);
            return BF_ERR_DEFINITION;
        }
        *out = def;
        return BF_OK;
    }
    bt_files_entry *e = bt_files_find(def->id, revision);
    if (e == NULL) {
        bf_err err = bt_files_load(&e, def, revision, why, why_len);
        if (err != BF_OK)
            return err;
        e->next = bt_files_loaded;
        bt_files_loaded = e;
    }
    bf_err err = bt_files_check(e, def, why, why_len);
    if (err != BF_OK)
        return err;
    *out = srv_deffile_definition(e->file);
    return BF_OK;
}

bf_err bt_files_write(const bf_definition *def, const char *revision, const char *dir, char *why,
                      size_t why_len)
{
    const bf_definition *standin = NULL;
    bf_err err = bt_files_standin(&standin, def, revision, why, why_len);
    if (err != BF_OK)
        return err;
    const bt_files_entry *e = bt_files_find(def->id, revision);
    if (e == NULL) {
        snprintf(why, why_len,
                 "C definition %s has C callbacks: a daemon cannot load it from a "
                 "definitions directory",
                 def->id);
        return BF_ERR_DEFINITION;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.def", dir, def->id);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(why, why_len, "%s: cannot create the definition file: %s", path, strerror(errno));
        return BF_ERR_IO;
    }
    size_t len = strlen(e->text), off = 0;
    while (off < len) {
        ssize_t n = write(fd, e->text + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    if (close(fd) != 0 || off < len) {
        snprintf(why, why_len, "%s: cannot write the definition file: %s", path, strerror(errno));
        return BF_ERR_IO;
    }
    return BF_OK;
}
