/*
 * test_deffile.c - definition files (server/src/configuration/deffile.c): every field of the
 * declarative form and the SQL callback form become the bf_definition a C module would declare;
 * each bad file is refused with a message naming the file, the line and the field; the directory
 * and its files must not be writable by group or others; two files cannot share a stable ID; a
 * reload compares by field, not by text. No database needed (the integration suite
 * test_definition_files runs the files through daemons).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "deffile.h"

static const char declarative[] = "# a comment\n"
                                  "id = relay.events.d_tag_v1\n"
                                  "description = fill d_tag\n"
                                  "owner = relay team\n"
                                  "revision = r1\n"
                                  "table = relay.events\n"
                                  "key = created_at timestamptz , event_id bytea\n"
                                  "batch_size = 500\n"
                                  "required = on\n"
                                  "needs_repair = t.d_tag IS NULL\n"
                                  "update_set = <<SQL\n"
                                  "  d_tag = coalesce(\n"
                                  "    t.tags->0->>1, '')\n"
                                  "SQL\n"
                                  "postcondition = t.d_tag IS NOT NULL\n"
                                  "prerequisite = true\n"
                                  "validate_chunk = 5000\n"
                                  "retry.max_attempts = 7\n"
                                  "retry.base_ms = 300\n"
                                  "retry.cap_ms = 9000\n";

static const char callbacks[] = "id = demo.events.tag_count_v1\n"
                                "table = demo.events\n"
                                "key = id bigint\n"
                                "batch_size = 10\n"
                                "invariant = SELECT 0\n"
                                "mutate = UPDATE demo.events SET tag_count = 1 WHERE false\n"
                                "mutate = <<END\n"
                                "SELECT 1\n"
                                "END\n"
                                "validate = SELECT 0\n";

static srv_deffile *parse_ok(const char *text)
{
    srv_deffile *f = NULL;
    char diag[BF_DIAG_MAX] = "";
    bf_err err = srv_deffile_parse(&f, "x.def", text, strlen(text), diag, sizeof diag);
    if (err != BF_OK)
        fail_msg("%s", diag);
    return f;
}

static void expect_refused(const char *text, const char *message)
{
    srv_deffile *f = NULL;
    char diag[BF_DIAG_MAX] = "";
    assert_int_equal(srv_deffile_parse(&f, "/d/x.def", text, strlen(text), diag, sizeof diag),
                     BF_ERR_DEFINITION);
    assert_null(f);
    if (strcmp(diag, message) != 0)
        fail_msg("expected \"%s\", got \"%s\"", message, diag);
}

static void test_declarative_fields(void **state)
{
    (void)state;
    srv_deffile *f = parse_ok(declarative);
    const bf_definition *d = srv_deffile_definition(f);
    assert_string_equal(d->id, "relay.events.d_tag_v1");
    assert_string_equal(d->description, "fill d_tag");
    assert_string_equal(d->owner, "relay team");
    assert_string_equal(d->revision, "r1");
    assert_string_equal(d->table, "relay.events");
    assert_int_equal(d->nkey, 2);
    assert_string_equal(d->key[0].name, "created_at");
    assert_int_equal(d->key[0].type, BF_KEY_TIMESTAMPTZ);
    assert_string_equal(d->key[1].name, "event_id");
    assert_int_equal(d->key[1].type, BF_KEY_BYTEA);
    assert_int_equal(d->batch_size, 500);
    assert_true(d->required);
    assert_string_equal(d->needs_repair, "t.d_tag IS NULL");
    assert_string_equal(d->update_set, "d_tag = coalesce(\n    t.tags->0->>1, '')");
    assert_string_equal(d->postcondition, "t.d_tag IS NOT NULL");
    assert_string_equal(d->prerequisite, "true");
    assert_int_equal(d->validate_chunk, 5000);
    assert_int_equal(d->retry.max_attempts, 7);
    assert_int_equal(d->retry.base_ms, 300);
    assert_int_equal(d->retry.cap_ms, 9000);
    assert_null(d->mutate);
    assert_null(d->validate);

    /* the registry takes it as it takes a C definition */
    bf_registry *reg = NULL;
    char diag[BF_DIAG_MAX] = "";
    assert_int_equal(bf_registry_new(&reg), BF_OK);
    assert_int_equal(bf_registry_add(reg, d, diag, sizeof diag), BF_OK);
    bf_registry_free(reg);
    srv_deffile_free(f);
}

static void test_callback_form(void **state)
{
    (void)state;
    srv_deffile *f = parse_ok(callbacks);
    const bf_definition *d = srv_deffile_definition(f);
    assert_non_null(d->mutate);
    assert_non_null(d->validate);
    assert_ptr_equal(d->arg, f);
    assert_null(d->update_set);
    assert_null(d->needs_repair);
    bf_registry *reg = NULL;
    char diag[BF_DIAG_MAX] = "";
    assert_int_equal(bf_registry_new(&reg), BF_OK);
    assert_int_equal(bf_registry_add(reg, d, diag, sizeof diag), BF_OK);
    bf_registry_free(reg);
    srv_deffile_free(f);
}

static void test_bad_files(void **state)
{
    (void)state;
    /* syntax */
    expect_refused("id = a.b_v1\nthis line has no equals sign\n",
                   "/d/x.def:2: syntax error: expected \"field = value\"");
    expect_refused("id = a.b_v1\nupdate_set = <<SQL\nx = 1\n",
                   "/d/x.def:2: update_set: the block <<SQL has no closing line \"SQL\"");
    expect_refused("mutate = <<\n", "/d/x.def:1: mutate: a block starts with <<WORD (letters and "
                                    "_, e.g. <<SQL)");
    /* unknown field */
    expect_refused("id = a.b_v1\n\nbatchsize = 10\n", "/d/x.def:3: unknown field \"batchsize\"");
    /* missing key / key column, wrong key type */
    expect_refused("id = a.b_v1\ntable = t\nbatch_size = 1\nneeds_repair = x\nupdate_set = y\n",
                   "/d/x.def: key: missing (every definition file sets id, table, key and "
                   "batch_size)");
    expect_refused("key = id bigint, created_at\n",
                   "/d/x.def:1: key: column 2: write \"<column> <type>\" (e.g. \"id bigint\")");
    expect_refused("key = id text\n", "/d/x.def:1: key: column id: unsupported type \"text\" "
                                      "(bigint, integer, timestamptz, bytea or uuid)");
    expect_refused("key = id bigint, id uuid\n", "/d/x.def:1: key: column id appears twice");
    expect_refused("key = a bigint, b bigint, c bigint, d bigint, e bigint\n",
                   "/d/x.def:1: key: at most 4 columns");
    /* values */
    expect_refused("id = A\n", "/d/x.def:1: id: a stable ID is [a-z][a-z0-9_.-]{2,62}");
    expect_refused("table = Events\n",
                   "/d/x.def:1: table: must be [schema.]table in lower-case identifiers");
    expect_refused("batch_size = 100001\n", "/d/x.def:1: batch_size: must be an integer 1..100000");
    expect_refused("batch_size = 10x\n", "/d/x.def:1: batch_size: must be an integer 1..100000");
    expect_refused("required = maybe\n", "/d/x.def:1: required: must be true or false");
    expect_refused("retry.max_attempts = 101\n",
                   "/d/x.def:1: retry.max_attempts: must be an integer 0..100");
    expect_refused("id = a.b_v1\nid = a.c_v1\n", "/d/x.def:2: id: set twice (first on line 1)");
    expect_refused("owner =\n", "/d/x.def:1: owner: empty value");
    expect_refused("update_set = x = $bf$\n", "/d/x.def:1: update_set: must not contain $bf$");
    /* the form */
    expect_refused("id = a.b_v1\ntable = t\nkey = id bigint\nbatch_size = 1\nneeds_repair = x\n",
                   "/d/x.def: update_set: missing (the declarative form needs needs_repair and "
                   "update_set; the SQL form one or more mutate statements)");
    expect_refused("id = a.b_v1\ntable = t\nkey = id bigint\nbatch_size = 1\nmutate = x\n",
                   "/d/x.def: validate: missing (validation needs needs_repair, postcondition or "
                   "validate)");
    expect_refused("id = a.b_v1\ntable = t\nkey = id bigint\nbatch_size = 1\nneeds_repair = x\n"
                   "update_set = y\ninvariant = SELECT 0\n",
                   "/d/x.def:7: invariant: runs before the mutate statements; this file has none");
    expect_refused("id = a.b_v1\nmutate = a\n\nupdate_set = b\ntable = t\nkey = id bigint\n"
                   "batch_size = 1\nneeds_repair = x\n",
                   "/d/x.def:4: update_set: a file with mutate statements has no update_set (one "
                   "mutation)");
    char nul[] = "id = a.b_v1\0";
    srv_deffile *f = NULL;
    char diag[BF_DIAG_MAX] = "";
    assert_int_equal(srv_deffile_parse(&f, "n.def", nul, sizeof nul, diag, sizeof diag),
                     BF_ERR_DEFINITION);
    assert_string_equal(diag, "n.def: not a text file (a NUL byte)");
}

static void test_differs(void **state)
{
    (void)state;
    srv_deffile *a = parse_ok(declarative);
    /* comments, blank lines, spacing and the spelling of a boolean are no difference */
    char same[sizeof declarative + 64];
    snprintf(same, sizeof same, "# edited comment\n\n%s", declarative);
    char *on = strstr(same, "required = on");
    memcpy(on, "required=yes ", 13);
    srv_deffile *b = parse_ok(same);
    assert_null(srv_deffile_differs(a, b));
    srv_deffile_free(b);

    char changed[sizeof declarative];
    memcpy(changed, declarative, sizeof declarative);
    memcpy(strstr(changed, "t.d_tag IS NULL"), "t.d_tag IS NOT ", 15);
    b = parse_ok(changed);
    assert_string_equal(srv_deffile_differs(a, b), "needs_repair");
    srv_deffile_free(b);

    memcpy(changed, declarative, sizeof declarative);
    memcpy(strstr(changed, "batch_size = 500"), "batch_size = 501", 16);
    b = parse_ok(changed);
    assert_string_equal(srv_deffile_differs(a, b), "batch_size");
    srv_deffile_free(b);

    srv_deffile *c = parse_ok(callbacks);
    srv_deffile *c2 = parse_ok(callbacks);
    assert_null(srv_deffile_differs(c, c2));
    srv_deffile_free(c2);
    char more[sizeof callbacks + 32];
    snprintf(more, sizeof more, "%smutate = SELECT 2\n", callbacks);
    c2 = parse_ok(more);
    assert_string_equal(srv_deffile_differs(c, c2), "mutate");
    srv_deffile_free(c2);
    srv_deffile_free(c);
    srv_deffile_free(a);
}

/* ---- the directory ------------------------------------------------------------------------ */

static char dir[64];

static void write_file(const char *name, const char *text, mode_t mode)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
    assert_int_equal(chmod(path, mode), 0);
}

static int dir_setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/buzz-deffile-XXXXXX");
    return mkdtemp(dir) != NULL && chmod(dir, 0755) == 0 ? 0 : -1;
}

static int dir_teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static bf_err load_dir(bf_registry *reg, char *diag, size_t cap, srv_defdir **out)
{
    srv_defdir *d = NULL;
    bf_err err = srv_defdir_read(&d, dir, diag, cap);
    if (err == BF_OK)
        err = srv_defdir_register(d, reg, diag, cap);
    *out = d;
    return err;
}

static void test_directory(void **state)
{
    (void)state;
    write_file("a.def", declarative, 0644);
    write_file("b.def", callbacks, 0600);
    write_file("README", "not a definition", 0644);
    write_file(".hidden.def", "garbage", 0644);
    bf_registry *reg = NULL;
    char diag[BF_DIAG_MAX] = "";
    assert_int_equal(bf_registry_new(&reg), BF_OK);
    srv_defdir *d = NULL;
    if (load_dir(reg, diag, sizeof diag, &d) != BF_OK)
        fail_msg("%s", diag);
    assert_int_equal(srv_defdir_count(d), 2);
    assert_int_equal(bf_registry_count(reg), 2);
    assert_string_equal(bf_registry_at(reg, 0)->id, "relay.events.d_tag_v1"); /* name order */
    assert_int_equal(srv_defdir_reload(d, NULL, false), 0);
    bf_registry_free(reg);
    srv_defdir_free(d);

    /* a second file with the same stable ID names both */
    write_file("c.def", declarative, 0644);
    assert_int_equal(bf_registry_new(&reg), BF_OK);
    assert_int_equal(load_dir(reg, diag, sizeof diag, &d), BF_ERR_DEFINITION);
    char want[256];
    snprintf(want, sizeof want,
             "%s/c.def:2: id: stable ID relay.events.d_tag_v1 is already defined by %s/a.def", dir,
             dir);
    assert_string_equal(diag, want);
    bf_registry_free(reg);
    srv_defdir_free(d);

    /* a file writable by others is refused (it holds SQL the daemon runs), named */
    write_file("c.def", declarative, 0646);
    snprintf(want, sizeof want,
             "%s/c.def: the file is writable by group or others, and definitions hold SQL the "
             "daemon runs (chmod go-w)",
             dir);
    d = NULL;
    assert_int_equal(srv_defdir_read(&d, dir, diag, sizeof diag), BF_ERR_DEFINITION);
    assert_null(d);
    assert_string_equal(diag, want);
    snprintf(want, sizeof want, "%s/c.def", dir);
    assert_int_equal(unlink(want), 0);

    /* so is a group-writable directory */
    assert_int_equal(chmod(dir, 0775), 0);
    assert_int_equal(srv_defdir_read(&d, dir, diag, sizeof diag), BF_ERR_DEFINITION);
    snprintf(want, sizeof want,
             "%s: the directory is writable by group or others, and definitions hold SQL the "
             "daemon runs (chmod go-w)",
             dir);
    assert_string_equal(diag, want);
    assert_int_equal(chmod(dir, 0755), 0);

    /* a reload refuses a changed file and an invalid new one, and keeps what is loaded */
    assert_int_equal(bf_registry_new(&reg), BF_OK);
    assert_int_equal(load_dir(reg, diag, sizeof diag, &d), BF_OK);
    char changed[sizeof declarative];
    memcpy(changed, declarative, sizeof declarative);
    memcpy(strstr(changed, "batch_size = 500"), "batch_size = 501", 16);
    write_file("a.def", changed, 0644);
    assert_int_equal(srv_defdir_reload(d, NULL, false), 1);
    write_file("z.def", "nonsense\n", 0644);
    assert_int_equal(srv_defdir_reload(d, NULL, false), 2);
    assert_int_equal(bf_registry_find(reg, "relay.events.d_tag_v1")->batch_size, 500);
    bf_registry_free(reg);
    srv_defdir_free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_declarative_fields),
        cmocka_unit_test(test_callback_form),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_differs),
        cmocka_unit_test_setup_teardown(test_directory, dir_setup, dir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
