/*
 * registry.c - the definitions this process knows: each is checked (identifiers, key, batch
 * bounds, metadata) and compiled to SQL once when it joins (compile.c), and modules of them are
 * loaded with dlopen and kept for the registry's lifetime.
 *
 * Design notes: the registry only grows, and it grows while sessions read it (a definition
 * file that joins on SIGHUP). Readers take no lock. An entry lives in a chunk of
 * BF_REGISTRY_CHUNK entries that is never moved or freed before the registry, so its address
 * is stable; the count is published with a release store after the entry is complete, and
 * read with an acquire load, so a reader sees whole entries only, the first count of them.
 * The IDs are indexed by an open-addressing hash table of fixed size (BF_REGISTRY_SLOTS, twice
 * the most entries, so probes stay short and a free slot always exists): a slot holds an entry's
 * position + 1 and is published with a release store after the entry and before the count, so a
 * reader that finds a slot finds a whole entry, and every entry a reader counts it can also
 * find; a lookup that finds an entry the count does not include yet answers "absent", so the
 * two views agree. (With the count first, a reader walking the entries could count one and not
 * find it: test_registry's reader saw it under ASan on a loaded machine.) Slots are only ever
 * filled (an entry is never removed once shared), so a reader's linear probe that meets an empty
 * slot has seen every entry added before its call. Lookups are O(1) and startup with n definitions
 * O(n), not O(n^2).
 *
 * The text[] literals of the IDs (what the engines' queries name) are replaced by pointer
 * (release/acquire) and the ones they replace are retired, not freed, until the registry is: a
 * session may be sending the old one. They are rebuilt once per batch of adds (a module, the
 * files a SIGHUP joins: bf_registry_batch_begin/end), or per add outside a batch, so retired
 * literals number two per batch, not two per definition. The count is published before the
 * literals, so an ID a reader finds in a literal is always in the registry it searches; an ID
 * added in a batch is findable at once and in the literals from the batch's end. Writers (add,
 * batches, load_module) are serialized by the caller.
 */
#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "strbuf.h"

static const char *const key_type_names[] = {
    [BF_KEY_BIGINT] = "bigint", [BF_KEY_INTEGER] = "integer", [BF_KEY_TIMESTAMPTZ] = "timestamptz",
    [BF_KEY_BYTEA] = "bytea",   [BF_KEY_UUID] = "uuid",
};

const char *bf_key_type_name(bf_key_type type)
{
    if (type < BF_KEY_BIGINT || type > BF_KEY_UUID)
        return NULL;
    return key_type_names[type];
}

bool bf_id_valid(const char *id)
{
    if (id == NULL)
        return false;
    size_t n = strlen(id);
    if (n < 3 || n > BF_ID_MAX || !(id[0] >= 'a' && id[0] <= 'z'))
        return false;
    for (size_t i = 1; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'))
            return false;
    }
    return true;
}

static bool ident_valid(const char *s, size_t n)
{
    if (n == 0 || n > 63 || !(islower((unsigned char)s[0]) || s[0] == '_'))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '_'))
            return false;
    return true;
}

static bool table_valid(const char *table)
{
    if (table == NULL)
        return false;
    const char *dot = strchr(table, '.');
    if (dot == NULL)
        return ident_valid(table, strlen(table));
    return ident_valid(table, (size_t)(dot - table)) && ident_valid(dot + 1, strlen(dot + 1));
}

static bool meta_valid(const char *s)
{
    return s == NULL || strlen(s) <= BF_META_MAX;
}

static bf_err def_error(char *diag, size_t len, const char *id, const char *why)
{
    if (diag != NULL && len > 0)
        bf__format(diag, len, "definition %s: %s", bf_id_valid(id) ? id : "(invalid id)", why);
    return BF_ERR_DEFINITION;
}

static bf_err definition_check(const bf_definition *d, char *diag, size_t len)
{
    if (!bf_id_valid(d->id))
        return def_error(diag, len, d->id, "stable id must match [a-z][a-z0-9_.-]{2,62}");
    if (!table_valid(d->table))
        return def_error(diag, len, d->id, "table must be [schema.]table in lower case");
    if (d->nkey < 1 || d->nkey > BF_MAX_KEY_COLUMNS)
        return def_error(diag, len, d->id, "ordering key needs 1 to 4 columns");
    for (int i = 0; i < d->nkey; i++) {
        if (d->key[i].name == NULL || !ident_valid(d->key[i].name, strlen(d->key[i].name)))
            return def_error(diag, len, d->id, "key column names must be lower-case identifiers");
        if (bf_key_type_name(d->key[i].type) == NULL)
            return def_error(diag, len, d->id, "unsupported key column type");
        for (int j = 0; j < i; j++)
            if (strcmp(d->key[i].name, d->key[j].name) == 0)
                return def_error(diag, len, d->id, "key columns must be distinct");
    }
    if (d->batch_size < 1 || d->batch_size > BF_BATCH_MAX)
        return def_error(diag, len, d->id, "batch_size must be 1..100000");
    if (d->validate_chunk < 0 || d->validate_chunk > BF_BATCH_MAX)
        return def_error(diag, len, d->id, "validate_chunk must be 0..100000");
    bool has_repair = d->needs_repair != NULL && d->needs_repair[0] != '\0';
    bool has_post = d->postcondition != NULL && d->postcondition[0] != '\0';
    if (d->mutate == NULL && (d->update_set == NULL || d->update_set[0] == '\0' || !has_repair))
        return def_error(diag, len, d->id, "needs update_set and needs_repair, or mutate");
    if (d->mutate == NULL &&
        (strstr(d->update_set, "$bf$") != NULL || strstr(d->needs_repair, "$bf$") != NULL))
        return def_error(diag, len, d->id, "update_set and needs_repair must not contain $bf$");
    if (d->validate == NULL && !has_repair && !has_post)
        return def_error(diag, len, d->id, "needs needs_repair, postcondition or validate");
    if (!meta_valid(d->description) || !meta_valid(d->owner) || !meta_valid(d->revision))
        return def_error(diag, len, d->id, "metadata fields are limited to 200 bytes");
    if (d->retry.max_attempts < 0 || d->retry.max_attempts > 100 || d->retry.base_ms < 0 ||
        d->retry.cap_ms < 0 || d->retry.cap_ms > 3600 * 1000)
        return def_error(diag, len, d->id, "retry policy out of range");
    return BF_OK;
}

/* Entry i's slot (i below the chunks allocated). */
static bf_compiled *registry_slot(const bf_registry *reg, size_t i)
{
    return &reg->chunks[i / BF_REGISTRY_CHUNK][i % BF_REGISTRY_CHUNK];
}

_Static_assert((BF_REGISTRY_SLOTS & (BF_REGISTRY_SLOTS - 1)) == 0, "slots: a power of two");
_Static_assert(BF_REGISTRY_SLOTS >= 2 * BF_REGISTRY_MAX, "the index stays at most half full");
_Static_assert(BF_REGISTRY_MAX < UINT32_MAX, "a slot holds a position + 1");

/* FNV-1a (64 bits) of an ID: its first probe. */
static size_t registry_hash(const char *id)
{
    uint64_t h = 14695981039346656037ULL;
    for (const unsigned char *p = (const unsigned char *)id; *p != '\0'; p++) {
        h ^= *p;
        h *= 1099511628211ULL;
    }
    return (size_t)(h ^ (h >> 32)) & (BF_REGISTRY_SLOTS - 1);
}

/* The index slot that holds id, or the empty slot where it would go (*found false). */
static size_t registry_probe(const bf_registry *reg, const char *id, bool *found)
{
    for (size_t s = registry_hash(id);; s = (s + 1) & (BF_REGISTRY_SLOTS - 1)) {
        uint32_t v = atomic_load_explicit(&reg->index[s], memory_order_acquire);
        if (v == 0 || strcmp(registry_slot(reg, v - 1)->def->id, id) == 0) {
            *found = v != 0;
            return s; /* terminates: the index is never more than half full */
        }
    }
}

/* "{a,b}": a text[] literal of the first n IDs (only required ones when asked). */
static char *registry_ids_literal(const bf_registry *reg, size_t n, bool required_only)
{
    bf_strbuf sb;
    bf__strbuf_init(&sb);
    bf__strbuf_add(&sb, "{");
    for (size_t i = 0; i < n; i++) {
        const bf_definition *d = registry_slot(reg, i)->def;
        if (!required_only || d->required)
            bf__strbuf_add_element(&sb, d->id);
    }
    bf__strbuf_add(&sb, "}");
    return bf__strbuf_take(&sb);
}

/* The literals of the first n entries, built before anything is published (room to retire
 * the ones they replace reserved), so publishing them cannot fail. */
static bf_err registry_build_ids(bf_registry *reg, size_t n, char **all, char **required)
{
    if (reg->nretired + 2 > reg->capretired) {
        size_t cap = reg->capretired ? reg->capretired * 2 : 8;
        char **grown = realloc(reg->retired, cap * sizeof *grown);
        if (grown == NULL)
            return BF_ERR_NOMEM;
        reg->retired = grown;
        reg->capretired = cap;
    }
    *all = registry_ids_literal(reg, n, false);
    *required = registry_ids_literal(reg, n, true);
    if (*all == NULL || *required == NULL) {
        free(*all);
        free(*required);
        return BF_ERR_NOMEM;
    }
    return BF_OK;
}

/* Publish the literals of the first n entries (registry_build_ids), retiring the ones they
 * replace: a reader may be sending them. */
static void registry_publish_ids(bf_registry *reg, size_t n, char *all, char *required)
{
    char *old = atomic_exchange_explicit(&reg->ids_all, all, memory_order_acq_rel);
    if (old != NULL)
        reg->retired[reg->nretired++] = old;
    old = atomic_exchange_explicit(&reg->ids_required, required, memory_order_acq_rel);
    if (old != NULL)
        reg->retired[reg->nretired++] = old;
    reg->ids_count = n;
}

const char *bf__registry_ids(const bf_registry *reg, bool required_only)
{
    const char *s = atomic_load_explicit(required_only ? &reg->ids_required : &reg->ids_all,
                                         memory_order_acquire);
    return s != NULL ? s : "{}";
}

/* ---- registry -------------------------------------------------------------------------- */

void (*bf__registry_between_stores)(const bf_registry *reg) = NULL;

bf_err bf_registry_new(bf_registry **out)
{
    if (out == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    bf_registry *reg = calloc(1, sizeof *reg);
    if (reg == NULL)
        return BF_ERR_NOMEM;
    reg->index = calloc(BF_REGISTRY_SLOTS, sizeof *reg->index); /* all empty */
    if (reg->index == NULL) {
        free(reg);
        return BF_ERR_NOMEM;
    }
    atomic_init(&reg->count, 0);
    atomic_init(&reg->ids_all, NULL);
    atomic_init(&reg->ids_required, NULL);
    *out = reg;
    return BF_OK;
}

void bf_registry_free(bf_registry *reg)
{
    if (reg == NULL)
        return;
    size_t n = atomic_load_explicit(&reg->count, memory_order_acquire);
    for (size_t i = 0; i < n; i++)
        bf__compiled_fini(registry_slot(reg, i));
    for (size_t k = 0; k < BF_REGISTRY_CHUNKS; k++)
        free(reg->chunks[k]);
    for (size_t i = 0; i < reg->nmodules; i++)
        dlclose(reg->modules[i]);
    free(reg->modules);
    free((void *)reg->index);
    free(atomic_load(&reg->ids_all));
    free(atomic_load(&reg->ids_required));
    for (size_t i = 0; i < reg->nretired; i++)
        free(reg->retired[i]);
    free(reg->retired);
    free(reg);
}

void bf_registry_batch_begin(bf_registry *reg)
{
    if (reg != NULL)
        reg->batch_depth++;
}

bf_err bf_registry_batch_end(bf_registry *reg)
{
    if (reg == NULL || reg->batch_depth == 0)
        return BF_ERR_INVALID_ARGUMENT;
    if (--reg->batch_depth > 0)
        return BF_OK; /* the outermost end publishes */
    size_t n = atomic_load_explicit(&reg->count, memory_order_relaxed); /* the only writer */
    if (n == reg->ids_count)
        return BF_OK;
    char *all = NULL, *required = NULL;
    bf_err err = registry_build_ids(reg, n, &all, &required);
    if (err == BF_OK)
        registry_publish_ids(reg, n, all, required);
    return err;
}

/* The checks of an add that need no compiling: the definition's own, its ID not registered
 * (*at: the index slot it takes), room for entry n and the chunk it lives in. */
static bf_err registry_admit(bf_registry *reg, const bf_definition *def, size_t n, size_t *at,
                             char *diag, size_t diag_len)
{
    bf_err err = definition_check(def, diag, diag_len);
    if (err != BF_OK)
        return err;
    bool found = false;
    *at = registry_probe(reg, def->id, &found);
    if (found)
        return def_error(diag, diag_len, def->id, "stable id registered twice in this process");
    if (n == BF_REGISTRY_MAX)
        return def_error(diag, diag_len, def->id, "the registry holds its maximum of definitions");
    bf_compiled **chunk = &reg->chunks[n / BF_REGISTRY_CHUNK];
    if (*chunk == NULL && (*chunk = calloc(BF_REGISTRY_CHUNK, sizeof **chunk)) == NULL)
        return BF_ERR_NOMEM;
    return BF_OK;
}

/* Make entry n, compiled in its slot, visible at index slot at; on error the slot is emptied. */
static bf_err registry_publish(bf_registry *reg, size_t n, size_t at)
{
    /* outside a batch the literals name it as it joins; all or nothing: they are built first
     * (from the entry, not visible yet), so nothing published can fail */
    char *all = NULL, *required = NULL;
    bf_err err;
    if (reg->batch_depth == 0 && (err = registry_build_ids(reg, n + 1, &all, &required)) != BF_OK) {
        bf__compiled_fini(registry_slot(reg, n));
        return err;
    }
    /* the entry is whole: readers may see it from here on (its index slot, the count, then
     * the literals: a reader that counts it can find it; one that finds it before the count
     * does takes it as absent, bf__registry_compiled) */
    atomic_store_explicit(&reg->index[at], (uint32_t)(n + 1), memory_order_release);
    if (bf__registry_between_stores != NULL)
        bf__registry_between_stores(reg);
    atomic_store_explicit(&reg->count, n + 1, memory_order_release);
    if (reg->batch_depth == 0)
        registry_publish_ids(reg, n + 1, all, required);
    return BF_OK;
}

bf_err bf_registry_add(bf_registry *reg, const bf_definition *def, char *diag, size_t diag_len)
{
    if (reg == NULL || def == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    size_t n = atomic_load_explicit(&reg->count, memory_order_relaxed); /* the only writer */
    size_t at = 0;
    bf_err err = registry_admit(reg, def, n, &at, diag, diag_len);
    if (err == BF_OK)
        err = bf__compile(def, n, registry_slot(reg, n));
    return err == BF_OK ? registry_publish(reg, n, at) : err;
}

/* ---- many at once: compiled on several threads ------------------------------------------ */

#define REGISTRY_COMPILE_THREADS 4  /* at most; never more than the CPUs online */
#define REGISTRY_COMPILE_MIN     64 /* fewer definitions are compiled on the caller's thread */

typedef struct registry_compiler {
    bf_registry *reg;
    const bf_definition *const *defs;
    size_t base, n, first, step; /* compiles defs[first], defs[first + step], ... */
    bf_err *errs;
    pthread_t thread;
} registry_compiler;

static void *registry_compile_part(void *arg)
{
    registry_compiler *k = arg;
    for (size_t i = k->first; i < k->n; i += k->step)
        k->errs[i] = bf__compile(k->defs[i], k->base + i, registry_slot(k->reg, k->base + i));
    return NULL;
}

/* Compile defs[0..n) into entries base.. (chunks allocated): each definition's SQL depends on
 * nothing but the definition and its place, so the work splits across threads; the caller
 * joins them before anything is published (the join orders the slots' stores before it). */
static void registry_compile(bf_registry *reg, const bf_definition *const *defs, size_t base,
                             size_t n, bf_err *errs)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t threads = n < REGISTRY_COMPILE_MIN || cpus < 2 ? 1
                     : cpus < REGISTRY_COMPILE_THREADS    ? (size_t)cpus
                                                          : REGISTRY_COMPILE_THREADS;
    registry_compiler parts[REGISTRY_COMPILE_THREADS];
    for (size_t t = 0; t < threads; t++)
        parts[t] = (registry_compiler){reg, defs, base, n, t, threads, errs, 0};
    size_t started = 1; /* parts 1..started - 1 run on threads of their own */
    while (started < threads && pthread_create(&parts[started].thread, NULL, registry_compile_part,
                                               &parts[started]) == 0)
        started++;
    /* this thread takes part 0 and every part whose thread could not start */
    registry_compile_part(&parts[0]);
    for (size_t t = started; t < threads; t++)
        registry_compile_part(&parts[t]);
    for (size_t t = 1; t < started; t++)
        pthread_join(parts[t].thread, NULL);
}

bf_err bf_registry_add_many(bf_registry *reg, const bf_definition *const *defs, size_t n,
                            size_t *added, char *diag, size_t diag_len)
{
    if (added != NULL)
        *added = 0;
    if (reg == NULL || (n > 0 && defs == NULL))
        return BF_ERR_INVALID_ARGUMENT;
    for (size_t i = 0; i < n; i++)
        if (defs[i] == NULL)
            return BF_ERR_INVALID_ARGUMENT;
    if (sodium_init() < 0) /* before the threads (bf__compile calls it too) */
        return BF_ERR_INTERNAL;
    bf_registry_batch_begin(reg);
    size_t base = atomic_load_explicit(&reg->count, memory_order_relaxed); /* the only writer */
    /* the checks against the registry, in order, up to the first that fails (duplicates
     * within defs are found as they are published) */
    bf_err err = BF_OK;
    size_t admitted = 0, at = 0;
    while (admitted < n && (err = registry_admit(reg, defs[admitted], base + admitted, &at, diag,
                                                 diag_len)) == BF_OK)
        admitted++;
    bf_err *errs = calloc(admitted ? admitted : 1, sizeof *errs);
    if (errs == NULL) {
        (void)bf_registry_batch_end(reg);
        return BF_ERR_NOMEM;
    }
    registry_compile(reg, defs, base, admitted, errs);
    size_t i = 0;
    for (; i < admitted; i++) {
        if (errs[i] != BF_OK) {
            if (diag != NULL && diag_len > 0)
                bf__format(diag, diag_len, "definition %s: %s", defs[i]->id, bf_err_str(errs[i]));
            err = errs[i];
            break;
        }
        bool found = false;
        at = registry_probe(reg, defs[i]->id, &found);
        if (found) {
            err = def_error(diag, diag_len, defs[i]->id,
                            "stable id registered twice in this process");
            break;
        }
        (void)registry_publish(reg, base + i, at); /* in a batch: cannot fail */
    }
    for (size_t j = i; j < admitted; j++) /* compiled, not published */
        if (errs[j] == BF_OK)
            bf__compiled_fini(registry_slot(reg, base + j));
    free(errs);
    if (added != NULL)
        *added = i;
    bf_err end = bf_registry_batch_end(reg);
    return err != BF_OK ? err : end;
}

bf_err bf_registry_load_module(bf_registry *reg, const char *path, char *diag, size_t diag_len)
{
    if (reg == NULL || path == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        if (diag != NULL)
            bf__format(diag, diag_len, "could not load definitions module: %s", dlerror());
        return BF_ERR_DEFINITION;
    }
    const bf_module *mod = (const bf_module *)dlsym(handle, BF_MODULE_SYMBOL);
    bf_err err = BF_OK;
    if (mod == NULL || mod->abi != BF_MODULE_ABI) {
        if (diag != NULL)
            bf__format(diag, diag_len, "definitions module lacks %s with ABI %d", BF_MODULE_SYMBOL,
                       BF_MODULE_ABI);
        err = BF_ERR_DEFINITION;
    }
    size_t before = atomic_load_explicit(&reg->count, memory_order_relaxed);
    bf_registry_batch_begin(reg); /* the literals are rebuilt once, for the whole module */
    if (err == BF_OK)
        err = bf_registry_add_many(reg, mod->definitions, mod->count, NULL, diag, diag_len);
    if (err == BF_OK) {
        void **mods = realloc(reg->modules, (reg->nmodules + 1) * sizeof *mods);
        if (mods == NULL)
            err = BF_ERR_NOMEM;
        else
            reg->modules = mods;
    }
    bool ended = false;
    if (err == BF_OK) {
        ended = true;
        err = bf_registry_batch_end(reg);
    }
    if (err != BF_OK) {
        /* taking entries back is safe only before the registry is shared (header); their
         * index slots are emptied newest first, which leaves every older probe as it was */
        size_t n = atomic_load_explicit(&reg->count, memory_order_relaxed);
        atomic_store_explicit(&reg->count, before, memory_order_release);
        while (n > before) {
            bf_compiled *c = registry_slot(reg, --n);
            bool found = false;
            size_t at = registry_probe(reg, c->def->id, &found);
            if (found)
                atomic_store_explicit(&reg->index[at], 0, memory_order_release);
            bf__compiled_fini(c);
        }
        if (!ended)
            (void)bf_registry_batch_end(reg); /* nothing of the module was published */
        dlclose(handle);
        return err;
    }
    reg->modules[reg->nmodules++] = handle;
    return BF_OK;
}

size_t bf_registry_count(const bf_registry *reg)
{
    return reg ? atomic_load_explicit(&reg->count, memory_order_acquire) : 0;
}

const bf_definition *bf_registry_at(const bf_registry *reg, size_t i)
{
    return i < bf_registry_count(reg) ? registry_slot(reg, i)->def : NULL;
}

const bf_compiled *bf__registry_compiled(const bf_registry *reg, const char *id, size_t *index)
{
    if (reg == NULL || id == NULL)
        return NULL;
    bool found = false;
    size_t at = registry_probe(reg, id, &found);
    if (!found)
        return NULL;
    size_t i = atomic_load_explicit(&reg->index[at], memory_order_acquire) - 1;
    if (i >= bf_registry_count(reg))
        return NULL; /* indexed, not yet counted: it joins with the count */
    if (index != NULL)
        *index = i;
    return registry_slot(reg, i);
}

const bf_definition *bf_registry_find(const bf_registry *reg, const char *id)
{
    const bf_compiled *c = bf__registry_compiled(reg, id, NULL);
    return c ? c->def : NULL;
}
