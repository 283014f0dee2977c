/*
 * test_validation_progress_cli.c - the progress of a running validation as an operator sees it
 * (issue 17 item 4): a real buzz-backfilld (definition file, PostgreSQL) and the buzzctl
 * binary. `buzzctl validate --progress ID` runs an explicit validation that a barrier in the
 * postcondition holds in its third chunk of 50 (row 120 of 300); while it waits (50 rows
 * checked, or 100 when a second passed between the first two chunks):
 *
 *   - its stderr shows "validating: 50 of ~300 rows checked, 0 need repair" (the Get it polls
 *     on a second connection, through the Backfill message's validation_progress);
 *   - `buzzctl get ID` shows "validating:  50 of ~300 rows checked, 0 need repair, <age>
 *     (explicit, by <the daemon's owner>)" and `list --wide` the VALIDATING cell "50/~300";
 *
 * released, validate prints success and exit 0, and get shows "validating:  -" (finished).
 * Then a daemon with a short allowance (lease 2 s) is killed (SIGKILL) while its explicit
 * validation waits at the barrier; once the allowance has passed, get on a new daemon shows
 * "validating:  stopped at 50 rows checked, 0 need repair (silent <age>)" and list --wide
 * "stopped 50", never a validation running forever.
 *
 * Guards proved (each seen failing with it removed): server/src/admin/convert.c
 * convert_validation_progress (the Backfill message carries nothing: no "validating:" line),
 * client/src/buzzctl_ops.c ops_validate_watch's validating part of the progress line, and
 * client/src/projection.c project_validating's finished check (get keeps showing the figures
 * of a finished run as if it were running), and its running check (a dead validator's figures
 * shown as running, "50 of ~300 rows checked": test_crashed_validator's get never says
 * "stopped at").
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

#define ID      "vpc.items_v1"
#define BARRIER 1811

static const char def_text[] =
    "id = " ID "\n"
    "table = public.vpc_items\n"
    "key = id bigint\n"
    "batch_size = 100\n"
    "validate_chunk = 50\n"
    "needs_repair = t.fixed IS NULL\n"
    "update_set = fixed = t.val * 2\n"
    "# the chunk holding row 120 waits at the test's barrier\n"
    "postcondition = t.fixed IS NOT NULL AND (t.id <> 120 OR public.bt_barrier(1811))\n";

static PGconn *pg;
static bd_daemon d;

typedef struct cli_run {
    pid_t pid;
    char out_path[256], err_path[256];
    int status;
} cli_run;

/* buzzctl --url url args... as a child, stdout and stderr to files of its own */
static void cli_start(cli_run *r, const char *url, const char *const *args)
{
    static int seq;
    seq++;
    snprintf(r->out_path, sizeof r->out_path, "%s/cli%d.out", bd_dir(), seq);
    snprintf(r->err_path, sizeof r->err_path, "%s/cli%d.err", bd_dir(), seq);
    char *argv[16];
    int n = 0;
    argv[n++] = (char *)BUZZCTL_PATH;
    argv[n++] = (char *)"--url";
    argv[n++] = (char *)url;
    for (int i = 0; args[i] != NULL && n < 15; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;
    r->pid = fork();
    assert_true(r->pid >= 0);
    if (r->pid == 0) {
        int o = open(r->out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = open(r->err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
            _exit(127);
        execv(BUZZCTL_PATH, argv);
        _exit(127);
    }
}

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

static void cli_finish(cli_run *r)
{
    int raw = 0;
    assert_int_equal(waitpid(r->pid, &raw, 0), r->pid);
    r->status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
}

/* Run buzzctl to completion; its stdout (caller frees). */
static char *cli(const char *const *args, int want_status)
{
    cli_run r;
    cli_start(&r, d.ipc_url, args);
    cli_finish(&r);
    char *out = slurp(r.out_path);
    if (r.status != want_status) {
        char *err = slurp(r.err_path);
        fail_msg("buzzctl %s: exit %d, want %d\n%s%s", args[0], r.status, want_status, out, err);
    }
    return out;
}

static void want(const char *haystack, const char *needle)
{
    if (strstr(haystack, needle) == NULL)
        fail_msg("want \"%s\" in:\n%s", needle, haystack);
}

/* before "50" after, or before "100" after: the second chunk's figure is written only when a
 * second passed since the first's */
static void want_checked(const char *haystack, const char *before, const char *after)
{
    char a[160], b[160];
    snprintf(a, sizeof a, "%s50%s", before, after);
    snprintf(b, sizeof b, "%s100%s", before, after);
    if (strstr(haystack, a) == NULL && strstr(haystack, b) == NULL)
        fail_msg("want \"%s\" or \"%s\" in:\n%s", a, b, haystack);
}

static int setup(void **state)
{
    (void)state;
    pg = bd_suite_open("vp_cli");
    bd_migrate(NULL);
    bt_install_barrier(pg);
    bt_make_items(pg, "public.vpc_items", 300);
    bd_def_file("vpc.def", def_text);
    bd_options o = bd_defaults();
    o.workers = 1;
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

static void test_validate_progress(void **state)
{
    (void)state;
    /* the backfill runs its batches and its lifecycle validation (barrier not held) */
    bfc_client *c = bd_client(d.ipc_url, NULL, 0, 0);
    bd_control_resp *cr = NULL;
    assert_int_equal(bd_control(c, "Start", ID, &cr), BD_SC(OK));
    bd_free(cr);
    bd_free(bd_wait_state(c, ID, BD_ST(COMPLETED)));
    bfc_close(c);

    PGconn *holder = bt_connect();
    bt_lock(holder, BARRIER);
    cli_run v;
    cli_start(&v, d.ipc_url, (const char *const[]){"validate", ID, "--progress", NULL});
    bt_wait_waiters(pg, BARRIER, 1);
    /* the validation waits in its third chunk: two chunks of 50 are behind it, the first of
     * them recorded (the second within the second after it is not necessarily) */
    char *get = cli((const char *const[]){"get", ID, NULL}, 0);
    printf("%s", get);
    want_checked(get, "validating:  ", " of ~300 rows checked, 0 need repair, ");
    want(get, "(explicit, by ");
    char *list = cli((const char *const[]){"list", "--wide", NULL}, 0);
    printf("%s", list);
    want(list, "VALIDATING");
    want_checked(list, " ", "/~300 ");
    /* validate --progress polls every 2 s: wait for a line that shows the rows checked */
    char *err = NULL;
    for (int i = 0; i < 300; i++) {
        free(err);
        err = slurp(v.err_path);
        if (strstr(err, "; validating: ") != NULL)
            break;
        bd_sleep_ms(100); /* buzzctl's own poll interval decides when the line appears */
    }
    printf("%s", err);
    want(err, "validate " ID ": running for ");
    want_checked(err, "; validating: ", " of ~300 rows checked, 0 need repair, ");
    bt_unlock(holder, BARRIER);
    cli_finish(&v);
    char *out = slurp(v.out_path);
    printf("%s", out);
    assert_int_equal(v.status, 0);
    want(out, "validate " ID ": success");
    free(get);
    get = cli((const char *const[]){"get", ID, NULL}, 0);
    want(get, "validating:  -\n");
    free(get);
    free(list);
    free(err);
    free(out);
    PQfinish(holder);
}

/* A daemon that validates with a short allowance: lease 2 s, statement timeout 1.8 s. */
static void start_short(bd_daemon *dd)
{
    bd_options o = bd_defaults();
    o.workers = 1;
    o.lease_ms = 2000;
    static char extra[320];
    snprintf(extra, sizeof extra, "definitions_dir = '%s/defs'", bd_dir());
    o.extra = extra;
    bd_start(dd, &o);
}

/* After test_validate_progress (the backfill completed). */
static void test_crashed_validator(void **state)
{
    (void)state;
    bd_stop(&d);
    bd_daemon victim;
    start_short(&victim);
    PGconn *holder = bt_connect();
    bt_lock(holder, BARRIER);
    cli_run v;
    cli_start(&v, victim.ipc_url, (const char *const[]){"validate", ID, NULL});
    bt_wait_waiters(pg, BARRIER, 1);
    int backend = bt_barrier_waiter_pid(pg, BARRIER);
    bd_kill(&victim); /* the daemon crashes mid-validation: its entry stays unfinished */
    cli_finish(&v);
    assert_int_not_equal(v.status, 0);
    bt_unlock(holder, BARRIER);
    bt_wait_backend_gone(pg, backend);
    start_short(&d);
    /* PostgreSQL's clock decides when the dead validator's allowance has passed */
    char *get = NULL;
    for (int i = 0; i < 300; i++) {
        free(get);
        get = cli((const char *const[]){"get", ID, NULL}, 0);
        if (strstr(get, "validating:  stopped at ") != NULL)
            break;
        bd_sleep_ms(100);
    }
    printf("%s", get);
    want_checked(get, "validating:  stopped at ", " rows checked, 0 need repair (silent ");
    char *list = cli((const char *const[]){"list", "--wide", NULL}, 0);
    printf("%s", list);
    want_checked(list, " stopped ", " ");
    free(get);
    free(list);
    PQfinish(holder);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validate_progress),
        cmocka_unit_test(test_crashed_validator),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
