/*
 * test_registry.c - definitions are validated before they can run (fail closed on a bad
 * definition), errors and SQLSTATEs map through their single tables, names round-trip, and a
 * truncated diagnostic is cut on a UTF-8 character boundary. No database needed.
 *
 * test_registry_grows_under_readers: the registry grows (a definition file joining on SIGHUP)
 * while a reader thread walks it. Guard proved: entries never move (registry.c: fixed chunks,
 * no realloc under readers) - the entry found before 1,000 adds is at the same address after
 * them. Seen failing against the previous registry.c (one realloc'd array, a count without
 * atomics): with the reader the test binary dies (exit 255) during the adds; without it the
 * first entry's address assertion fails. A replaced ID literal stays readable until the
 * registry is freed (registry_retire; otherwise a use after free that ASan reports). The
 * reader, started at a barrier, sees whole entries only: every index below the count it read
 * is findable by its ID.
 *
 * test_registry_batch (issue 26: startup linear in definitions): 10,000 adds in one batch, with
 * the same reader walking the registry. Guards proved: each definition is findable as soon as
 * it is added (the ID index, registry.c registry_probe; a wrong probe or a slot published
 * before its entry fails the reader's or the final lookups), the ID literals are not rebuilt
 * during the batch and are rebuilt once at its end, so exactly two literals are retired
 * (bf_registry_add's batch_depth check; seen failing with it removed: "the ID literal was
 * rebuilt during the batch (add 1)"), and an ID never added is not found. Seen failing with
 * registry_probe's ID comparison removed (the first slot taken as a match): "add 504: ...
 * stable id registered twice in this process".
 *
 * test_registry_add_many (the definitions directory compiled on several threads): the entries
 * bf_registry_add_many adds are those of the same adds one by one, in the same places, with the
 * same SQL (the loop procedure names the place), and it stops where the adds would (a duplicate
 * within the set, a refused definition), freeing what it compiled past the stop. Seen failing
 * with registry_compile_part's place off by one (base + i + 1): "compiled differently", and
 * with the publish loop's duplicate probe removed: the duplicate joined.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "buzz/engine.h"
#include "internal.h" /* the SQLSTATE classification table, bf__format */

static bf_definition good(void)
{
    bf_definition d = {
        .id = "items.fix_v1",
        .table = "public.items",
        .key = {{"id", BF_KEY_BIGINT}},
        .nkey = 1,
        .batch_size = 100,
        .needs_repair = "t.fixed IS NULL",
        .update_set = "fixed = 1",
    };
    return d;
}

static void expect_rejected(bf_definition d, const char *why)
{
    bf_registry *reg = NULL;
    assert_int_equal(bf_registry_new(&reg), BF_OK);
    char diag[BF_DIAG_MAX] = "";
    assert_int_equal(bf_registry_add(reg, &d, diag, sizeof diag), BF_ERR_DEFINITION);
    assert_non_null(strstr(diag, why));
    assert_int_equal(bf_registry_count(reg), 0);
    bf_registry_free(reg);
}

static void test_definition_validation(void **state)
{
    bf_definition d = good();
    d.id = "Bad ID";
    expect_rejected(d, "stable id");
    d = good();
    d.table = "public.items; DROP TABLE x";
    expect_rejected(d, "table");
    d = good();
    d.nkey = 0;
    expect_rejected(d, "ordering key");
    d = good();
    d.key[0].name = "id\"";
    expect_rejected(d, "key column");
    d = good();
    d.batch_size = 0;
    expect_rejected(d, "batch_size");
    d = good();
    d.batch_size = BF_BATCH_MAX + 1;
    expect_rejected(d, "batch_size");
    d = good();
    d.update_set = NULL;
    expect_rejected(d, "update_set");
    d = good();
    d.nkey = 2;
    d.key[1] = (bf_key_column){"id", BF_KEY_BYTEA};
    expect_rejected(d, "distinct");
    d = good();
    d.key[0].type = (bf_key_type)99;
    expect_rejected(d, "unsupported");
    /* the batch loop procedure's body is quoted with $bf$ (registry.c compile_loop) */
    d = good();
    d.update_set = "fixed = length($bf$x$bf$)";
    expect_rejected(d, "$bf$");
    d = good();
    d.needs_repair = "t.fixed IS NULL AND $bf$ $bf$ <> ''";
    expect_rejected(d, "$bf$");
}

static void test_registry_duplicates_and_lookup(void **state)
{
    bf_registry *reg = NULL;
    assert_int_equal(bf_registry_new(&reg), BF_OK);
    bf_definition d = good();
    bf_definition twin = good();
    char diag[BF_DIAG_MAX];
    assert_int_equal(bf_registry_add(reg, &d, diag, sizeof diag), BF_OK);
    assert_int_equal(bf_registry_add(reg, &twin, diag, sizeof diag), BF_ERR_DEFINITION);
    assert_ptr_equal(bf_registry_find(reg, "items.fix_v1"), &d);
    assert_null(bf_registry_find(reg, "items.other"));
    assert_int_equal(bf_registry_count(reg), 1);
    char bad[BF_DIAG_MAX] = "";
    assert_int_equal(bf_registry_load_module(reg, "/nonexistent/module.so", bad, sizeof bad),
                     BF_ERR_DEFINITION);
    assert_true(strlen(bad) < BF_DIAG_MAX);
    bf_registry_free(reg);
}

#define GROW_N 1000

typedef struct grow_reader {
    bf_registry *reg;
    pthread_barrier_t *go;
    atomic_bool done;
    long walks, bad;
} grow_reader;

static void *grow_reader_main(void *arg)
{
    grow_reader *r = arg;
    pthread_barrier_wait(r->go);
    while (!atomic_load(&r->done)) {
        size_t n = bf_registry_count(r->reg);
        for (size_t i = 0; i < n; i++) {
            const bf_definition *d = bf_registry_at(r->reg, i);
            if (d == NULL || bf_registry_find(r->reg, d->id) != d)
                r->bad++;
        }
        const char *ids = bf__registry_ids(r->reg, false);
        if (ids[0] != '{' || ids[strlen(ids) - 1] != '}')
            r->bad++;
        r->walks++;
    }
    return NULL;
}

static void test_registry_grows_under_readers(void **state)
{
    (void)state;
    static bf_definition defs[GROW_N + 1];
    static char ids[GROW_N + 1][32];
    bf_registry *reg = NULL;
    assert_int_equal(bf_registry_new(&reg), BF_OK);
    char diag[BF_DIAG_MAX] = "";
    defs[0] = good();
    assert_int_equal(bf_registry_add(reg, &defs[0], diag, sizeof diag), BF_OK);
    const bf_compiled *first = bf__registry_compiled(reg, "items.fix_v1", NULL);
    const char *literal = bf__registry_ids(reg, false);
    assert_string_equal(literal, "{\"items.fix_v1\"}");

    pthread_barrier_t go;
    assert_int_equal(pthread_barrier_init(&go, NULL, 2), 0);
    grow_reader r = {.reg = reg, .go = &go};
    atomic_init(&r.done, false);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, grow_reader_main, &r), 0);
    pthread_barrier_wait(&go);
    for (int i = 1; i <= GROW_N; i++) {
        snprintf(ids[i], sizeof ids[i], "items.grow_%04d", i);
        defs[i] = good();
        defs[i].id = ids[i];
        if (bf_registry_add(reg, &defs[i], diag, sizeof diag) != BF_OK)
            fail_msg("add %d: %s", i, diag);
    }
    atomic_store(&r.done, true);
    assert_int_equal(pthread_join(th, NULL), 0);
    pthread_barrier_destroy(&go);

    assert_int_equal(r.bad, 0);
    assert_true(r.walks > 0);
    assert_int_equal(bf_registry_count(reg), GROW_N + 1);
    /* the first entry did not move, and the literal a reader held is still readable */
    assert_ptr_equal(bf__registry_compiled(reg, "items.fix_v1", NULL), first);
    assert_string_equal(literal, "{\"items.fix_v1\"}");
    size_t index = 0;
    assert_ptr_equal(bf__registry_compiled(reg, "items.grow_1000", &index)->def, &defs[GROW_N]);
    assert_int_equal(index, GROW_N);
    bf_registry_free(reg);
}

/* bf__registry_between_stores: what a reader sees while an entry is half published */
static long half_published_bad, half_published_calls;

static void half_published_check(const bf_registry *reg)
{
    half_published_calls++;
    size_t n = bf_registry_count(reg);
    for (size_t i = 0; i < n; i++) {
        const bf_definition *d = bf_registry_at(reg, i);
        if (d == NULL || bf_registry_find(reg, d->id) != d)
            half_published_bad++; /* counted, not findable */
    }
    if (bf__registry_compiled(reg, "items.half_2", NULL) != NULL && n < 3)
        half_published_bad++; /* findable, not counted */
}

/* Guard: bf_registry_add publishes an entry's index slot before its count, and a lookup that
 * finds an entry the count does not include answers absent (bf__registry_compiled). With the
 * count stored first, the entry is counted and not findable at this seam (seen: the walk
 * finds each add's new entry missing, 3 in all); without the lookup's check it is findable and not
 * counted. The concurrent test above saw the first only under ASan on a loaded machine. */
static void test_registry_half_published(void **state)
{
    (void)state;
    static bf_definition defs[3];
    static const char *const ids[] = {"items.half_0", "items.half_1", "items.half_2"};
    bf_registry *reg = NULL;
    assert_int_equal(bf_registry_new(&reg), BF_OK);
    char diag[BF_DIAG_MAX] = "";
    half_published_bad = half_published_calls = 0;
    bf__registry_between_stores = half_published_check;
    for (int i = 0; i < 3; i++) {
        defs[i] = good();
        defs[i].id = ids[i];
        assert_int_equal(bf_registry_add(reg, &defs[i], diag, sizeof diag), BF_OK);
    }
    bf__registry_between_stores = NULL;
    assert_int_equal(half_published_calls, 3);
    assert_int_equal(half_published_bad, 0);
    assert_non_null(bf_registry_find(reg, "items.half_2"));
    bf_registry_free(reg);
}

#define BATCH_N 10000

static void test_registry_batch(void **state)
{
    (void)state;
    static bf_definition defs[BATCH_N + 1];
    static char ids[BATCH_N + 1][32];
    bf_registry *reg = NULL;
    assert_int_equal(bf_registry_new(&reg), BF_OK);
    char diag[BF_DIAG_MAX] = "";
    assert_int_equal(bf_registry_batch_end(reg), BF_ERR_INVALID_ARGUMENT); /* no begin */
    defs[0] = good();
    assert_int_equal(bf_registry_add(reg, &defs[0], diag, sizeof diag), BF_OK);
    const char *before = bf__registry_ids(reg, false);
    assert_string_equal(before, "{\"items.fix_v1\"}");

    pthread_barrier_t go;
    assert_int_equal(pthread_barrier_init(&go, NULL, 2), 0);
    grow_reader r = {.reg = reg, .go = &go};
    atomic_init(&r.done, false);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, grow_reader_main, &r), 0);
    pthread_barrier_wait(&go);
    bf_registry_batch_begin(reg);
    bf_registry_batch_begin(reg); /* nested: the outer end publishes */
    for (int i = 1; i <= BATCH_N; i++) {
        snprintf(ids[i], sizeof ids[i], "items.batch_%05d", i);
        defs[i] = good();
        defs[i].id = ids[i];
        defs[i].required = i % 2 == 0;
        if (bf_registry_add(reg, &defs[i], diag, sizeof diag) != BF_OK)
            fail_msg("add %d: %s", i, diag);
        if (bf_registry_find(reg, ids[i]) != &defs[i])
            fail_msg("%s not findable once added", ids[i]);
        if (bf__registry_ids(reg, false) != before)
            fail_msg("the ID literal was rebuilt during the batch (add %d)", i);
    }
    assert_int_equal(bf_registry_add(reg, &defs[BATCH_N], diag, sizeof diag), BF_ERR_DEFINITION);
    assert_int_equal(bf_registry_batch_end(reg), BF_OK);
    assert_ptr_equal(bf__registry_ids(reg, false), before); /* the inner end published nothing */
    assert_int_equal(bf_registry_batch_end(reg), BF_OK);
    atomic_store(&r.done, true);
    assert_int_equal(pthread_join(th, NULL), 0);
    pthread_barrier_destroy(&go);
    assert_int_equal(r.bad, 0);

    assert_int_equal(bf_registry_count(reg), BATCH_N + 1);
    for (int i = 0; i <= BATCH_N; i++) {
        size_t index = 0;
        const bf_compiled *c = bf__registry_compiled(reg, defs[i].id, &index);
        assert_non_null(c);
        assert_ptr_equal(c->def, &defs[i]);
        assert_int_equal(index, (size_t)i);
    }
    assert_null(bf_registry_find(reg, "items.batch_99999"));
    assert_null(bf_registry_find(reg, "items.batch_0000")); /* a prefix of added IDs */
    /* one rebuild for the batch: the two literals it replaced retired, the old one readable */
    assert_int_equal(reg->nretired, 2);
    assert_string_equal(before, "{\"items.fix_v1\"}");
    const char *all = bf__registry_ids(reg, false), *required = bf__registry_ids(reg, true);
    assert_true(strncmp(all, "{\"items.fix_v1\",\"items.batch_00001\",", 36) == 0);
    assert_non_null(strstr(all, ",\"items.batch_10000\"}"));
    assert_true(strncmp(required, "{\"items.batch_00002\",\"items.batch_00004\",", 41) == 0);
    size_t commas = 0;
    for (const char *p = all; *p != '\0'; p++)
        commas += *p == ',';
    assert_int_equal(commas, BATCH_N);
    bf_registry_free(reg);
}

#define MANY_N 3000

static bool same_sql(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* A registry of n definitions added one by one (the reference) and one added with
 * bf_registry_add_many (compiled on several threads): the same entries, in the same order, with
 * the same SQL, their loop procedures named by their places included. */
static void test_registry_add_many(void **state)
{
    (void)state;
    static bf_definition defs[MANY_N];
    static const bf_definition *ptrs[MANY_N];
    static char ids[MANY_N][32];
    for (int i = 0; i < MANY_N; i++) {
        snprintf(ids[i], sizeof ids[i], "items.many_%05d", i);
        defs[i] = good();
        defs[i].id = ids[i];
        defs[i].required = i % 3 == 0;
        defs[i].batch_size = 1 + i; /* each definition's SQL its own */
        ptrs[i] = &defs[i];
    }
    bf_definition first = good(); /* a module's entry before them: the places start at 1 */
    bf_registry *ref = NULL, *reg = NULL;
    char diag[BF_DIAG_MAX] = "";
    assert_int_equal(bf_registry_new(&ref), BF_OK);
    assert_int_equal(bf_registry_new(&reg), BF_OK);
    assert_int_equal(bf_registry_add(ref, &first, diag, sizeof diag), BF_OK);
    assert_int_equal(bf_registry_add(reg, &first, diag, sizeof diag), BF_OK);
    for (int i = 0; i < MANY_N; i++)
        assert_int_equal(bf_registry_add(ref, &defs[i], diag, sizeof diag), BF_OK);
    size_t added = 0;
    if (bf_registry_add_many(reg, ptrs, MANY_N, &added, diag, sizeof diag) != BF_OK)
        fail_msg("add_many: %s", diag);
    assert_int_equal(added, MANY_N);
    assert_int_equal(bf_registry_count(reg), MANY_N + 1);
    for (int i = 0; i < MANY_N; i++) {
        size_t at = 0, ref_at = 0;
        const bf_compiled *c = bf__registry_compiled(reg, ids[i], &at);
        const bf_compiled *r = bf__registry_compiled(ref, ids[i], &ref_at);
        assert_non_null(c);
        assert_ptr_equal(c->def, &defs[i]);
        assert_int_equal(at, ref_at);
        if (!same_sql(c->sql_loop, r->sql_loop) || !same_sql(c->sql_call, r->sql_call) ||
            !same_sql(c->sql_bound, r->sql_bound) ||
            !same_sql(c->sql_vchunk[0], r->sql_vchunk[0]) ||
            !same_sql(c->sql_plan_update, r->sql_plan_update) ||
            strcmp(c->digest, r->digest) != 0 || strcmp(c->key_types, r->key_types) != 0)
            fail_msg("%s compiled differently than by bf_registry_add", ids[i]);
    }
    assert_string_equal(bf__registry_ids(reg, false), bf__registry_ids(ref, false));
    assert_string_equal(bf__registry_ids(reg, true), bf__registry_ids(ref, true));
    bf_registry_free(ref);
    bf_registry_free(reg);

    /* it stops at the first that fails, as the adds would: a duplicate within the set, and a
     * definition its checks refuse; what came before joined, nothing after */
    static const struct {
        int at;
        const char *why;
    } stops[] = {{2000, "registered twice"}, {1500, "batch_size"}};
    for (size_t k = 0; k < sizeof stops / sizeof stops[0]; k++) {
        int at = stops[k].at;
        bf_definition bad = defs[at];
        if (k == 0)
            bad.id = ids[100];
        else
            bad.batch_size = 0;
        ptrs[at] = &bad;
        assert_int_equal(bf_registry_new(&reg), BF_OK);
        diag[0] = '\0';
        assert_int_equal(bf_registry_add_many(reg, ptrs, MANY_N, &added, diag, sizeof diag),
                         BF_ERR_DEFINITION);
        assert_int_equal(added, (size_t)at);
        if (strstr(diag, stops[k].why) == NULL)
            fail_msg("stop at %d: %s", at, diag);
        assert_int_equal(bf_registry_count(reg), (size_t)at);
        assert_ptr_equal(bf_registry_find(reg, ids[at - 1]), &defs[at - 1]);
        assert_null(bf_registry_find(reg, ids[at + 1]));
        assert_non_null(strstr(bf__registry_ids(reg, false), ids[at - 1]));
        bf_registry_free(reg); /* ASan: what was compiled after the stop is freed */
        ptrs[at] = &defs[at];
    }
}

static void test_id_format(void **state)
{
    assert_true(bf_id_valid("events.content_len_v1"));
    assert_true(bf_id_valid("a-b"));
    assert_false(bf_id_valid("ab"));
    assert_false(bf_id_valid("1abc"));
    assert_false(bf_id_valid("abc def"));
    assert_false(bf_id_valid(NULL));
    char longid[80];
    memset(longid, 'a', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    assert_false(bf_id_valid(longid));
}

static void test_sqlstate_table(void **state)
{
    assert_int_equal(bf__classify_sqlstate("40001").err, BF_ERR_RETRYABLE);
    assert_int_equal(bf__classify_sqlstate("40P01").err, BF_ERR_RETRYABLE);
    assert_int_equal(bf__classify_sqlstate("55P03").err, BF_ERR_RETRYABLE);
    assert_int_equal(bf__classify_sqlstate("57014").err, BF_ERR_RETRYABLE);
    assert_int_equal(bf__classify_sqlstate("08006").err, BF_ERR_UNAVAILABLE);
    assert_int_equal(bf__classify_sqlstate("42P01").err, BF_ERR_PREREQUISITE);
    assert_int_equal(bf__classify_sqlstate("42703").err, BF_ERR_PREREQUISITE);
    assert_int_equal(bf__classify_sqlstate("23505").err, BF_ERR_DATA_INVARIANT);
    assert_int_equal(bf__classify_sqlstate("22012").err, BF_ERR_DATA_INVARIANT);
    assert_int_equal(bf__classify_sqlstate("42601").err, BF_ERR_DEFINITION);
    assert_int_equal(bf__classify_sqlstate("BFS01").err, BF_ERR_STALE);
    assert_int_equal(bf__classify_sqlstate("BFB01").err, BF_ERR_BATCH_BOUND);
    assert_int_equal(bf__classify_sqlstate("BFI01").err, BF_ERR_IMMUTABLE);
    assert_int_equal(bf__classify_sqlstate(NULL).err, BF_ERR_RETRYABLE);
}

/* A whole UTF-8 string: lead bytes followed by their continuation bytes, nothing cut. */
static bool utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p != 0) {
        int more = *p < 0x80             ? 0
                   : (*p & 0xe0) == 0xc0 ? 1
                   : (*p & 0xf0) == 0xe0 ? 2
                   : (*p & 0xf8) == 0xf0 ? 3
                                         : -1;
        if (more < 0)
            return false;
        p++;
        for (int i = 0; i < more; i++, p++)
            if ((*p & 0xc0) != 0x80)
                return false;
    }
    return true;
}

/*
 * Guard: engine.c bf__vformat's UTF-8 cut (the loop that moves the cut back over continuation
 * bytes). A truncated diagnostic is stored (error_detail, audit) and PostgreSQL rejects a split
 * character, so at every capacity the cut output stays valid UTF-8, is a prefix of the full
 * text followed by "...", and fits the buffer. The text mixes 2-, 3- and 4-byte characters, so
 * some capacities put the plain cut (cap - 4) on each kind of continuation byte.
 */
static void test_format_cut_keeps_utf8(void **state)
{
    (void)state;
    static const char text[] = "key \xc3\xa9t\xc3\xa9 \xe2\x82\xac\xe2\x82\xac "
                               "\xf0\x9f\x98\x80\xf0\x9f\x98\x80 end";
    assert_true(utf8_valid(text));
    size_t full = strlen(text);
    int split_before = 0; /* capacities whose plain cut would split a character */
    for (size_t cap = 5; cap <= full; cap++) {
        char out[sizeof text + 8];
        memset(out, 'z', sizeof out);
        bf__format(out, cap, "%s", text);
        size_t len = strlen(out);
        assert_true(len < cap);
        assert_true(utf8_valid(out));
        assert_true(len >= 3);
        assert_string_equal(out + len - 3, "...");
        assert_memory_equal(out, text, len - 3);
        /* the cut gives up at most the continuation bytes of one character */
        assert_true(cap - 4 - (len - 3) <= 3);
        if (((unsigned char)text[cap - 4] & 0xc0) == 0x80) {
            split_before++;
            assert_true(len - 3 < cap - 4);
        } else {
            assert_int_equal(len - 3, cap - 4);
        }
    }
    assert_int_equal(split_before, 12); /* 1 + 1 + 2 + 2 + 3 + 3 continuation bytes */
    /* buffers too small for the mark still end on a character boundary */
    static const char euro[] = "\xe2\x82\xac\xe2\x82\xac";
    for (size_t cap = 1; cap <= 4; cap++) {
        char small[8];
        memset(small, 'z', sizeof small);
        bf__format(small, cap, "%s", euro);
        assert_true(strlen(small) < cap);
        assert_true(utf8_valid(small));
        assert_int_equal(strlen(small), cap == 4 ? 3 : 0);
    }
    /* text that fits is not cut */
    char out[sizeof text];
    bf__format(out, sizeof out, "%s", text);
    assert_string_equal(out, text);
}

static void test_names(void **state)
{
    for (int s = BF_STATE_PENDING; s <= BF_STATE_COMPLETED; s++) {
        bf_state parsed = 0;
        assert_int_equal(bf_state_parse(bf_state_name((bf_state)s), &parsed), BF_OK);
        assert_int_equal(parsed, s);
    }
    bf_state untouched = BF_STATE_PAUSED;
    assert_int_equal(bf_state_parse("cancelled", &untouched), BF_ERR_INVALID_ARGUMENT);
    assert_int_equal(untouched, BF_STATE_PAUSED);
    assert_string_equal(bf_state_name((bf_state)0), "unknown");
    assert_string_equal(bf_err_name(BF_ERR_STALE), "BF_ERR_STALE");
    assert_string_equal(bf_err_str(BF_OK), "ok");
    assert_string_equal(bf_err_str((bf_err)9999), "unknown error");
    assert_string_equal(bf_key_type_name(BF_KEY_TIMESTAMPTZ), "timestamptz");
    assert_null(bf_key_type_name((bf_key_type)0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_definition_validation),
        cmocka_unit_test(test_registry_duplicates_and_lookup),
        cmocka_unit_test(test_registry_grows_under_readers),
        cmocka_unit_test(test_registry_half_published),
        cmocka_unit_test(test_registry_batch),
        cmocka_unit_test(test_registry_add_many),
        cmocka_unit_test(test_id_format),
        cmocka_unit_test(test_sqlstate_table),
        cmocka_unit_test(test_format_cut_keeps_utf8),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
