/*
 * test_old_writer_cli.c - the old-writer watchdog as an operator sees it (issue 28 item 2): a
 * real buzz-backfilld whose definition file says watch_writers = on, PostgreSQL, and the
 * buzzctl binary. No worker runs (workers = 0): the started backfill stays running, watched.
 * Two writers write while it runs, relay-2.0 the new shape, relay-1.3 the old one (3 rows, with
 * the marker value 987654):
 *
 *   - `buzzctl get ID` shows "old writer:  3 rows since HH:MM from application relay-1.3 at
 *     <address> (role <role>), last HH:MM UTC" and the hint to drain that writer, then start a
 *     new repair under a new stable ID; `list --wide` the OLD WRITER cell "3 (relay-1.3)";
 *     `--json get` the oldWriters object; relay-2.0 and the marker appear in none of them;
 *   - `buzzctl watch off ID` removes the trigger ("old-writer watch removed"), a second one
 *     answers "no old-writer watch was installed"; get still shows the counts.
 *
 * Guards proved (each seen failing with it removed): server/src/admin/convert.c convert_old_writers
 * (no "old writer:" line), server/src/configuration/deffile.c's watch_writers field (start installs
 * no trigger: "old writer:" missing, the trigger count 0).
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "bt.h"
#include "daemon.h"

#define ID     "owc.items_v1"
#define MARKER "987654"

static const char def_text[] = "id = " ID "\n"
                               "table = public.owc_items\n"
                               "key = id bigint\n"
                               "batch_size = 100\n"
                               "needs_repair = t.fixed IS NULL\n"
                               "update_set = fixed = t.val * 2\n"
                               "postcondition = t.fixed = t.val * 2\n"
                               "watch_writers = on\n";

static PGconn *pg;
static bd_daemon d;

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return strdup("");
    char *buf = calloc(1, 65536);
    assert_non_null(buf);
    size_t n = fread(buf, 1, 65535, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* buzzctl --url <daemon> args... to completion; its stdout (caller frees) */
static char *cli(const char *const *args, int want_status)
{
    static int seq;
    char out_path[256], err_path[256];
    seq++;
    snprintf(out_path, sizeof out_path, "%s/cli%d.out", bd_dir(), seq);
    snprintf(err_path, sizeof err_path, "%s/cli%d.err", bd_dir(), seq);
    char *argv[16];
    int n = 0;
    argv[n++] = (char *)BUZZCTL_PATH;
    argv[n++] = (char *)"--url";
    argv[n++] = d.ipc_url;
    for (int i = 0; args[i] != NULL && n < 15; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
            _exit(127);
        execv(BUZZCTL_PATH, argv);
        _exit(127);
    }
    int raw = 0;
    assert_int_equal(waitpid(pid, &raw, 0), pid);
    int status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
    char *out = slurp(out_path);
    if (status != want_status) {
        char *err = slurp(err_path);
        fail_msg("buzzctl %s: exit %d, want %d\n%s%s", args[0], status, want_status, out, err);
    }
    printf("%s", out);
    return out;
}

static void want(const char *haystack, const char *needle)
{
    if (strstr(haystack, needle) == NULL)
        fail_msg("want \"%s\" in:\n%s", needle, haystack);
}

static void never(const char *haystack, const char *needle)
{
    if (strstr(haystack, needle) != NULL)
        fail_msg("\"%s\" must not appear in:\n%s", needle, haystack);
}

static int setup(void **state)
{
    (void)state;
    pg = bd_suite_open("ow_cli");
    bd_migrate(NULL);
    bt_make_items(pg, "public.owc_items", 300);
    bd_def_file("owc.def", def_text);
    bd_options o = bd_defaults();
    o.workers = 0;
    o.extra = bd_defs_extra();
    bd_start(&d, &o);
    bd_wait_registered(pg, 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bd_suite_close(&d, pg, false);
    return 0;
}

static PGconn *writer(const char *application)
{
    PGconn *c = bt_connect();
    bt_exec(c, "SET application_name = '%s'", application);
    return c;
}

static void test_operator_sees_old_writer(void **state)
{
    (void)state;
    free(cli((const char *const[]){"start", ID, NULL}, 0));
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM pg_trigger WHERE tgrelid ="
                                " 'public.owc_items'::regclass AND NOT tgisinternal"),
                     1);
    PGconn *fresh = writer("relay-2.0");
    PGconn *old = writer("relay-1.3");
    bt_exec(fresh, "INSERT INTO public.owc_items (id, val, fixed) VALUES (901, 5, 10)");
    bt_exec(old, "INSERT INTO public.owc_items (id, val) VALUES (902, " MARKER ")");
    bt_exec(old, "UPDATE public.owc_items SET val = " MARKER " WHERE id IN (7, 8)");

    char *get = cli((const char *const[]){"get", ID, NULL}, 0);
    want(get, "old writer:  3 rows since ");
    want(get, " from application relay-1.3 at ");
    want(get, "hint: an old writer wrote rows in the old shape: drain that writer, then start a "
              "new repair under a new stable ID");
    char *list = cli((const char *const[]){"list", "--wide", NULL}, 0);
    want(list, "OLD WRITER");
    want(list, "3 (relay-1.3)");
    char *json = cli((const char *const[]){"--json", "get", ID, NULL}, 0);
    want(json, "\"oldWriters\"");
    want(json, "\"application\":\"relay-1.3\"");
    want(json, "\"firstSeenAt\":\"20"); /* a time, like every *_at_us field */
    const char *all[] = {get, list, json};
    for (int i = 0; i < 3; i++) {
        never(all[i], "relay-2.0");
        never(all[i], MARKER);
    }
    free(get);
    free(list);
    free(json);

    char *off = cli((const char *const[]){"watch", "off", ID, NULL}, 0);
    want(off, "watch off " ID ": old-writer watch removed");
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM pg_trigger WHERE tgrelid ="
                                " 'public.owc_items'::regclass AND NOT tgisinternal"),
                     0);
    free(off);
    off = cli((const char *const[]){"watch", "off", ID, NULL}, 0);
    want(off, "no old-writer watch was installed");
    free(off);
    get = cli((const char *const[]){"get", ID, NULL}, 0);
    want(get, "old writer:  3 rows since "); /* the counts stay */
    free(get);
    PQfinish(fresh);
    PQfinish(old);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_operator_sees_old_writer),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
