/*
 * defdir.c - the daemon's definitions directory (deffile.h): the definition files of one
 * directory read in name order, registered beside the modules' definitions, and read again on
 * SIGHUP, when new files join the running daemon.
 *
 * Design notes: a file that joins on SIGHUP goes through the same checks as at start, in order
 * (compiled in a staging registry, registered in PostgreSQL with its fences, then added to the
 * live registry, which sessions may be reading: bf_registry is append-only); a file refused at
 * any step stays out with its reason and the others go on.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "buzz/engine.h"
#include "deffile.h"
#include "log.h"

/* ---- the definitions directory ------------------------------------------------------------- */

struct srv_defdir {
    char *dir;
    srv_deffile **files;
    size_t n;
    bf_registry *reg; /* where they were registered; new files join it on reload */
};

static const char *defdir_id(const srv_deffile *f)
{
    return srv_deffile_definition(f)->id;
}

static int defdir_name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool defdir_wanted(const char *name)
{
    size_t n = strlen(name), s = strlen(SRV_DEFFILE_SUFFIX);
    return name[0] != '.' && n > s && strcmp(name + n - s, SRV_DEFFILE_SUFFIX) == 0;
}

/* The sorted names of the definition files of dir. */
static bf_err defdir_names(const char *dir, char ***out, size_t *count, char *diag, size_t cap)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        snprintf(diag, cap, "%s: cannot access the definitions directory: %s", dir,
                 strerror(errno));
        return BF_ERR_IO;
    }
    bf_err err = srv_deffile_check_mode(dir, &st, true, diag, cap);
    if (err != BF_OK)
        return err;
    DIR *dh = opendir(dir);
    if (dh == NULL) {
        snprintf(diag, cap, "%s: cannot read the definitions directory: %s", dir, strerror(errno));
        return BF_ERR_IO;
    }
    char **names = NULL;
    size_t n = 0, capn = 0;
    struct dirent *de;
    while (err == BF_OK && (de = readdir(dh)) != NULL) {
        if (!defdir_wanted(de->d_name))
            continue;
        if (n == capn) {
            size_t c = capn ? capn * 2 : 16;
            char **grown = realloc(names, c * sizeof *grown);
            if (grown == NULL) {
                err = BF_ERR_NOMEM;
                break;
            }
            names = grown;
            capn = c;
        }
        if ((names[n] = strdup(de->d_name)) == NULL)
            err = BF_ERR_NOMEM;
        else
            n++;
    }
    closedir(dh);
    if (err != BF_OK) {
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
        snprintf(diag, cap, "%s: out of memory", dir);
        return err;
    }
    if (n > 0)
        qsort(names, n, sizeof *names, defdir_name_cmp);
    *out = names;
    *count = n;
    return BF_OK;
}

void srv_defdir_free(srv_defdir *d)
{
    if (d == NULL)
        return;
    for (size_t i = 0; i < d->n; i++)
        srv_deffile_free(d->files[i]);
    free(d->files);
    free(d->dir);
    free(d);
}

bf_err srv_defdir_read(srv_defdir **out, const char *dir, char *diag, size_t diag_len)
{
    if (out == NULL || dir == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    char **names = NULL;
    size_t n = 0;
    bf_err err = defdir_names(dir, &names, &n, diag, diag_len);
    if (err != BF_OK)
        return err;
    srv_defdir *d = calloc(1, sizeof *d);
    if (d == NULL || (d->dir = strdup(dir)) == NULL ||
        (n > 0 && (d->files = calloc(n, sizeof *d->files)) == NULL))
        err = BF_ERR_NOMEM;
    for (size_t i = 0; err == BF_OK && i < n; i++) {
        size_t len = strlen(dir) + 1 + strlen(names[i]) + 1;
        char *path = malloc(len);
        if (path == NULL) {
            err = BF_ERR_NOMEM;
            break;
        }
        snprintf(path, len, "%s/%s", dir, names[i]);
        err = srv_deffile_load(&d->files[d->n], path, diag, diag_len);
        free(path);
        if (err == BF_OK)
            d->n++;
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (err == BF_ERR_NOMEM)
        snprintf(diag, diag_len, "%s: out of memory", dir);
    if (err != BF_OK) {
        srv_defdir_free(d);
        return err;
    }
    *out = d;
    return BF_OK;
}

/* The loaded file that defines id, or NULL. */
static const srv_deffile *defdir_find(const srv_defdir *d, const char *id, size_t upto)
{
    for (size_t i = 0; i < upto && i < d->n; i++)
        if (strcmp(defdir_id(d->files[i]), id) == 0)
            return d->files[i];
    return NULL;
}

typedef struct defdir_key {
    const char *id;
    size_t i; /* the file's place in name order */
} defdir_key;

static int defdir_key_cmp(const void *a, const void *b)
{
    const defdir_key *x = a, *y = b;
    int c = strcmp(x->id, y->id);
    return c != 0 ? c : (x->i > y->i) - (x->i < y->i);
}

/* The first file (in name order) whose stable ID a module or an earlier file defines: its
 * place (d->n: none) and the earlier file's (*by; d->n for a module). O(n log n): the files are
 * sorted by ID. SIZE_MAX when out of memory. */
static size_t defdir_duplicate(const srv_defdir *d, const bf_registry *reg, size_t *by)
{
    size_t bad = d->n;
    *by = d->n;
    for (size_t i = 0; i < d->n && bad == d->n; i++)
        if (bf_registry_find(reg, defdir_id(d->files[i])) != NULL) /* O(1) */
            bad = i;
    defdir_key *keys = malloc((d->n ? d->n : 1) * sizeof *keys);
    if (keys == NULL)
        return SIZE_MAX;
    for (size_t i = 0; i < d->n; i++)
        keys[i] = (defdir_key){defdir_id(d->files[i]), i};
    qsort(keys, d->n, sizeof *keys, defdir_key_cmp);
    for (size_t k = 1, group = 0; k < d->n; k++) {
        if (strcmp(keys[k].id, keys[group].id) != 0) {
            group = k;
        } else if (keys[k].i < bad) {
            bad = keys[k].i;
            *by = keys[group].i;
        }
    }
    free(keys);
    return bad;
}

bf_err srv_defdir_register(srv_defdir *d, bf_registry *reg, char *diag, size_t diag_len)
{
    if (d == NULL || reg == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    d->reg = reg;
    size_t by = 0, bad = defdir_duplicate(d, reg, &by);
    const bf_definition **defs = malloc((d->n ? d->n : 1) * sizeof *defs);
    if (bad == SIZE_MAX || defs == NULL) {
        free(defs);
        snprintf(diag, diag_len, "%s: out of memory", d->dir);
        return BF_ERR_NOMEM;
    }
    for (size_t i = 0; i < d->n; i++)
        defs[i] = srv_deffile_definition(d->files[i]);
    /* the files before the first duplicate, in order (the first error in name order is the one
     * reported), compiled on several threads; the ID lists are rebuilt once, for all of them */
    char why[BF_DIAG_MAX] = "";
    size_t added = 0;
    bf_err err = bf_registry_add_many(reg, defs, bad, &added, why, sizeof why);
    free(defs);
    if (err != BF_OK && added < bad) {
        snprintf(diag, diag_len, "%s: %s", srv_deffile_path(d->files[added]),
                 why[0] ? why : bf_err_str(err));
    } else if (err != BF_OK) {
        snprintf(diag, diag_len, "could not list the definitions: %s", bf_err_str(err));
    } else if (bad < d->n) {
        const srv_deffile *f = d->files[bad];
        snprintf(diag, diag_len, "%s:%d: id: stable ID %s is already defined by %s",
                 srv_deffile_path(f), srv_deffile_id_line(f), defdir_id(f),
                 by < d->n ? srv_deffile_path(d->files[by]) : "a definitions module");
        err = BF_ERR_DEFINITION;
    }
    return err;
}

size_t srv_defdir_count(const srv_defdir *d)
{
    return d ? d->n : 0;
}

/* Keep f for the registry's lifetime (reload: it joined). */
static bf_err defdir_keep(srv_defdir *d, srv_deffile *f)
{
    srv_deffile **grown = realloc(d->files, (d->n + 1) * sizeof *grown);
    if (grown == NULL)
        return BF_ERR_NOMEM;
    d->files = grown;
    d->files[d->n++] = f;
    return BF_OK;
}

static void defdir_refuse(const srv_deffile *f, const char *why)
{
    srv_log_event(BF_LOG_ERROR, BF_EV_CONFIG_RELOAD_FAILED,
                  "SIGHUP: %s: new definition %s refused, it stays out (a later SIGHUP tries it "
                  "again): %s",
                  srv_deffile_path(f), defdir_id(f), why);
}

/* Automatic mode: start a required definition that joined, as startup starts the pending
 * required ones (a row another session started already is left alone). */
static void defdir_auto_start(bf_engine *e, const srv_deffile *f)
{
    bf_backfill row;
    bf_err err = bf_get(e, defdir_id(f), &row);
    if (err == BF_OK && row.state != BF_STATE_PENDING)
        return;
    bf_actor who = {NULL, "automatic startup", NULL};
    bf_action_result res;
    if (err == BF_OK)
        err = bf_action_apply(e, BF_ACTION_START, defdir_id(f), &who, &res);
    if (err == BF_OK || err == BF_ERR_CONFLICT) /* a concurrent starter won: converged */
        srv_log(BF_LOG_INFO, "SIGHUP: automatic mode: started the required backfill %s",
                defdir_id(f));
    else
        srv_log(BF_LOG_ERROR,
                "SIGHUP: automatic mode: cannot start %s: %s: %s; it stays pending (start it, "
                "or a restart retries)",
                defdir_id(f), bf_err_str(err), bf_engine_diag(e));
}

/*
 * Reload: the new files join the running daemon as they would join at start. Each is compiled
 * in a staging registry first (bf_registry_add's checks and limits), then registered in
 * PostgreSQL through an engine on that staging registry (bf_register's fences: a row of the
 * same ID stored by a materially different definition refuses it), and only then added to the
 * live registry, which sessions read concurrently (bf_registry: append-only, lock-free
 * readers). A file refused at any step stays out and the others go on. In automatic mode
 * (auto_start) a required one is then started. Returns how many were refused; fresh[] is
 * consumed (joined files move to d, the others are freed).
 */
static int defdir_join(srv_defdir *d, srv_deffile **fresh, size_t n, const bf_config *engine_cfg,
                       bool auto_start)
{
    int refused = 0;
    bf_registry *stage = NULL;
    bf_engine *e = NULL;
    bf_err err = bf_registry_new(&stage);
    size_t staged = 0;
    if (stage != NULL)
        bf_registry_batch_begin(stage); /* its ID lists: once, below */
    for (size_t i = 0; i < n; i++) {
        char why[BF_DIAG_MAX] = "";
        if (err == BF_OK && engine_cfg == NULL) {
            snprintf(why, sizeof why, "no database to register it in");
        } else if (err != BF_OK || (err = bf_registry_add(stage, srv_deffile_definition(fresh[i]),
                                                          why, sizeof why)) != BF_OK) {
            if (why[0] == '\0')
                snprintf(why, sizeof why, "%s", bf_err_str(err));
            err = err == BF_ERR_NOMEM ? err : BF_OK;
        } else {
            staged++;
            continue;
        }
        defdir_refuse(fresh[i], why);
        srv_deffile_free(fresh[i]);
        fresh[i] = NULL;
        refused++;
    }
    if (stage != NULL && bf_registry_batch_end(stage) != BF_OK && err == BF_OK)
        err = BF_ERR_NOMEM;
    if (staged > 0 && err == BF_OK) {
        bf_config cfg = *engine_cfg;
        err = bf_engine_open(&e, &cfg, stage);
    }
    /* every staged file registered in a few statements; errs[k] for the k-th staged one */
    const bf_definition **defs = staged ? calloc(staged, sizeof *defs) : NULL;
    bf_err *errs = staged ? calloc(staged, sizeof *errs) : NULL;
    if (err == BF_OK && staged > 0 && (defs == NULL || errs == NULL))
        err = BF_ERR_NOMEM;
    for (size_t i = 0, k = 0; err == BF_OK && i < n; i++)
        if (fresh[i] != NULL)
            defs[k++] = srv_deffile_definition(fresh[i]);
    if (err == BF_OK && staged > 0)
        err = bf_register_many(e, defs, staged, errs);
    bf_registry_batch_begin(d->reg); /* the live ID lists: rebuilt once, for all that join */
    for (size_t i = 0, k = 0; i < n; i++) {
        srv_deffile *f = fresh[i];
        if (f == NULL)
            continue;
        char why[BF_DIAG_MAX] = "";
        bf_err rerr = err != BF_OK ? err : errs[k];
        k++;
        if (rerr != BF_OK && err == BF_OK) /* refused by the fences: bf_register says why */
            rerr = bf_register(e, srv_deffile_definition(f));
        if (rerr != BF_OK) {
            snprintf(why, sizeof why, "could not register it: %s: %s", bf_err_str(rerr),
                     e != NULL ? bf_engine_diag(e) : "could not reach the database");
        } else if (defdir_keep(d, f) != BF_OK) {
            snprintf(why, sizeof why, "out of memory");
        } else if ((rerr = bf_registry_add(d->reg, srv_deffile_definition(f), why, sizeof why)) !=
                   BF_OK) {
            d->n--; /* not kept after all */
            if (why[0] == '\0')
                snprintf(why, sizeof why, "%s", bf_err_str(rerr));
        } else {
            srv_log_event(BF_LOG_INFO, BF_EV_DEFINITION_JOINED,
                          "SIGHUP: %s: definition %s registered and joined the running daemon",
                          srv_deffile_path(f), defdir_id(f));
            if (auto_start && srv_deffile_definition(f)->required)
                defdir_auto_start(e, f);
            fresh[i] = NULL;
            continue;
        }
        defdir_refuse(f, why);
        refused++;
    }
    if (d->reg != NULL && bf_registry_batch_end(d->reg) != BF_OK)
        srv_log_event(BF_LOG_ERROR, BF_EV_CONFIG_RELOAD_FAILED,
                      "SIGHUP: out of memory listing the definitions that joined: workers do not "
                      "claim them until the next SIGHUP");
    free(defs);
    free(errs);
    bf_engine_close(e);
    bf_registry_free(stage); /* before the refused files: its entries point into them */
    for (size_t i = 0; i < n; i++)
        srv_deffile_free(fresh[i]);
    return refused;
}

int srv_defdir_reload(srv_defdir *d, const bf_config *engine_cfg, bool auto_start)
{
    if (d == NULL)
        return 0;
    char diag[BF_DIAG_MAX] = "";
    char **names = NULL;
    size_t n = 0;
    if (defdir_names(d->dir, &names, &n, diag, sizeof diag) != BF_OK) {
        srv_log_event(BF_LOG_ERROR, BF_EV_CONFIG_RELOAD_FAILED,
                      "SIGHUP: definitions directory refused, the loaded definitions stay: %s",
                      diag);
        return 1;
    }
    int refused = 0;
    bool *seen = d->n ? calloc(d->n, sizeof *seen) : NULL;
    srv_deffile **fresh = n ? calloc(n, sizeof *fresh) : NULL; /* new files, to join */
    size_t nfresh = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(d->dir) + 1 + strlen(names[i]) + 1;
        char *path = malloc(len);
        srv_deffile *f = NULL;
        bf_err err = BF_ERR_NOMEM;
        if (path != NULL) {
            snprintf(path, len, "%s/%s", d->dir, names[i]);
            err = srv_deffile_load(&f, path, diag, sizeof diag);
        }
        free(path);
        if (err != BF_OK) {
            srv_log_event(BF_LOG_ERROR, BF_EV_CONFIG_RELOAD_FAILED,
                          "SIGHUP: definition file refused, the loaded definitions stay: %s",
                          err == BF_ERR_NOMEM ? "out of memory" : diag);
            refused++;
            continue;
        }
        const srv_deffile *old = defdir_find(d, defdir_id(f), d->n);
        if (old != NULL) {
            for (size_t j = 0; j < d->n && seen != NULL; j++)
                if (d->files[j] == old)
                    seen[j] = true;
            const char *field = srv_deffile_differs(old, f);
            if (field != NULL) {
                srv_log_event(BF_LOG_ERROR, BF_EV_CONFIG_RELOAD_FAILED,
                              "SIGHUP: %s: %s: changed under the loaded stable ID %s: refused, "
                              "the loaded definition stays (a material change needs a new "
                              "stable ID; a restart loads the file as it is now)",
                              srv_deffile_path(f), field, defdir_id(f));
                refused++;
            }
        } else if (d->reg != NULL && bf_registry_find(d->reg, defdir_id(f)) != NULL) {
            srv_log_event(BF_LOG_ERROR, BF_EV_CONFIG_RELOAD_FAILED,
                          "SIGHUP: %s: id: stable ID %s is already defined by a definitions "
                          "module: refused",
                          srv_deffile_path(f), defdir_id(f));
            refused++;
        } else {
            const srv_deffile *twin = NULL;
            for (size_t j = 0; j < nfresh && twin == NULL; j++)
                if (strcmp(defdir_id(fresh[j]), defdir_id(f)) == 0)
                    twin = fresh[j];
            if (twin != NULL) {
                srv_log_event(BF_LOG_ERROR, BF_EV_CONFIG_RELOAD_FAILED,
                              "SIGHUP: %s: id: stable ID %s is already defined by %s: refused",
                              srv_deffile_path(f), defdir_id(f), srv_deffile_path(twin));
                refused++;
            } else if (fresh == NULL || d->reg == NULL) {
                defdir_refuse(f, fresh == NULL ? "out of memory" : "no registry to join");
                refused++;
            } else {
                fresh[nfresh++] = f;
                continue; /* fresh owns it */
            }
        }
        srv_deffile_free(f);
    }
    for (size_t j = 0; j < d->n && seen != NULL; j++)
        if (!seen[j])
            srv_log_event(BF_LOG_WARN, BF_EV_CONFIG_RELOAD,
                          "SIGHUP: %s is gone: definition %s stays registered until a restart",
                          srv_deffile_path(d->files[j]), defdir_id(d->files[j]));
    free(seen);
    if (nfresh > 0)
        refused += defdir_join(d, fresh, nfresh, engine_cfg, auto_start);
    free(fresh);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    srv_log_event(refused ? BF_LOG_ERROR : BF_LOG_INFO,
                  refused ? BF_EV_CONFIG_RELOAD_FAILED : BF_EV_CONFIG_RELOAD,
                  "SIGHUP: definitions directory checked: %zu file%s, %d refused", n,
                  n == 1 ? "" : "s", refused);
    return refused;
}
