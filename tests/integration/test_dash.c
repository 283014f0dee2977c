/*
 * test_dash.c - `buzzctl dash` end to end, as a person sees it: buzzctl runs in a
 * pseudo-terminal (forkpty, 80x24, TERM=xterm-256color) against a real buzz-backfilld
 * (tests/support/daemon.c), and everything it writes is fed into libvterm, whose screen is
 * what the assertions read. No sleeps order anything: each step polls the rendered screen (or
 * PostgreSQL) until a deadline.
 *
 * Guards proved:
 * - the y/n confirmation of bfc_dash_key(): the pause key alone shows the prompt and leaves
 *   the backfill running in PostgreSQL; only 'y' sends Admin.Pause;
 * - the stale path of bfc_dash_apply_list()/apply_ready(): with the daemon stopped the last
 *   rows stay on screen, marked STALE with an age and a typed error, and nothing claims the
 *   relay is ready or the backfill gone;
 * - the curses layer drawing bfc_dash_render()'s lines within 80x24 and after a resize.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <vterm.h>

#include "bt.h"
#include "daemon.h"

#define ID       "dash.items_v1"
#define K_BATCH  1201
#define ROWS     24
#define COLS     80
#define MAX_ROWS 45
#define MAX_COLS 160
#define DEADLINE 30 /* seconds a screen may take to show something */
#define MANY     10000

typedef struct term {
    int master;
    pid_t pid;
    int rows, cols;
    VTerm *vt;
    VTermScreen *screen;
    char text[MAX_ROWS * (MAX_COLS * 4 + 1) + 1];
} term;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* buzzctl dash in a rows x cols pty; token NULL: none (boundary authority on ipc). */
static void term_start_sized(term *t, const char *url, int rows, int cols, const char *token)
{
    memset(t, 0, sizeof *t);
    t->rows = rows;
    t->cols = cols;
    struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    t->pid = forkpty(&t->master, NULL, NULL, &ws);
    assert_true(t->pid >= 0);
    if (t->pid == 0) {
        setenv("TERM", "xterm-256color", 1);
        setenv("LANG", "C.UTF-8", 1);
        unsetenv("BUZZ_BACKFILL_TOKEN_FILE");
        if (token != NULL)
            setenv("BUZZ_BACKFILL_TOKEN", token, 1);
        else
            unsetenv("BUZZ_BACKFILL_TOKEN");
        execl(BUZZCTL_PATH, BUZZCTL_PATH, "--url", url, "dash", "--interval", "1", (char *)NULL);
        _exit(127);
    }
    t->vt = vterm_new(rows, cols);
    assert_non_null(t->vt);
    vterm_set_utf8(t->vt, 1);
    t->screen = vterm_obtain_screen(t->vt);
    vterm_screen_reset(t->screen, 1);
}

/* The pty and the emulator become rows x cols; buzzctl gets SIGWINCH. Never fewer rows:
 * libvterm 0.1.4 keeps a scroll region past the new last row, and curses output still in
 * flight that scrolls it writes out of the emulator's buffer (test_dash_many). */
static void term_resize(term *t, int rows, int cols)
{
    assert_true(rows >= t->rows);
    struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    assert_int_equal(ioctl(t->master, TIOCSWINSZ, &ws), 0);
    vterm_set_size(t->vt, rows, cols);
    t->rows = rows;
    t->cols = cols;
    assert_int_equal(kill(t->pid, SIGWINCH), 0);
}

/* Read what the pty has (waiting at most ms) into the emulator; the screen into t->text. */
static void term_pump(term *t, int ms)
{
    struct pollfd p = {.fd = t->master, .events = POLLIN};
    while (poll(&p, 1, ms) > 0) {
        char buf[4096];
        ssize_t n = read(t->master, buf, sizeof buf);
        if (n <= 0)
            break;
        vterm_input_write(t->vt, buf, (size_t)n);
        ms = 0;
    }
    size_t o = 0;
    int rows = 0, cols = 0;
    vterm_get_size(t->vt, &rows, &cols);
    for (int row = 0; row < rows && row < MAX_ROWS; row++) {
        VTermRect rect = {.start_row = row, .end_row = row + 1, .start_col = 0, .end_col = cols};
        size_t n = vterm_screen_get_text(t->screen, t->text + o, MAX_COLS * 4, rect);
        o += n;
        t->text[o++] = '\n';
    }
    t->text[o] = '\0';
}

/* The screen line holding needle, or NULL. */
static const char *term_line(term *t, const char *needle)
{
    const char *p = strstr(t->text, needle);
    if (p == NULL)
        return NULL;
    while (p > t->text && p[-1] != '\n')
        p--;
    return p;
}

/* Poll the screen until every needle is on it (within DEADLINE). */
static void term_wait(term *t, const char *const *needles)
{
    int64_t until = now_ms() + DEADLINE * 1000;
    for (;;) {
        term_pump(t, 100);
        bool all = true;
        for (size_t i = 0; needles[i] != NULL; i++)
            all = all && strstr(t->text, needles[i]) != NULL;
        if (all)
            return;
        if (now_ms() > until)
            fail_msg("waited %d s for \"%s\"...; the screen:\n%s", DEADLINE, needles[0], t->text);
    }
}

/* Poll until the row of ID shows state. */
static void term_wait_row(term *t, const char *state)
{
    int64_t until = now_ms() + DEADLINE * 1000;
    for (;;) {
        term_pump(t, 100);
        const char *line = term_line(t, "> " ID);
        const char *eol = line ? strchr(line, '\n') : NULL;
        if (line != NULL && eol != NULL) {
            char row[MAX_COLS * 4 + 1];
            snprintf(row, sizeof row, "%.*s", (int)(eol - line), line);
            if (strstr(row, state) != NULL)
                return;
        }
        if (now_ms() > until)
            fail_msg("waited %d s for %s %s; the screen:\n%s", DEADLINE, ID, state, t->text);
    }
}

static void term_key(term *t, const char *keys)
{
    assert_int_equal(write(t->master, keys, strlen(keys)), (ssize_t)strlen(keys));
}

/* 'q': buzzctl dash exits 0 (within DEADLINE); the emulator and the pty are released. */
static void term_quit(term *t)
{
    term_key(t, "q");
    int status = 0;
    int64_t until = now_ms() + DEADLINE * 1000;
    while (waitpid(t->pid, &status, WNOHANG) == 0) {
        term_pump(t, 100);
        if (now_ms() > until)
            fail_msg("buzzctl dash did not quit on q:\n%s", t->text);
    }
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    vterm_free(t->vt);
    close(t->master);
}

static char *db_state(PGconn *pg)
{
    return bt_text(pg, "SELECT state FROM buzz_backfill.backfill WHERE id = '%s'", ID);
}

static void test_dash_end_to_end(void **state)
{
    (void)state;
    PGconn *pg = bd_suite_open("dash");
    bt_install_barrier(pg);
    bt_make_items(pg, "dash_items", 300);
    bd_options o = bd_defaults();
    o.definitions = "dash";
    o.auto_migrate = true;
    bd_daemon d;
    bd_start(&d, &o);
    bd_wait_registered(pg, 1);

    /* a running backfill whose batch the barrier holds */
    PGconn *holder = bd_connect(NULL);
    bt_lock(holder, K_BATCH);
    bfc_client *c = bd_client(d.ipc_url, NULL, 0, 0);
    assert_int_equal(bd_control(c, "Start", ID, NULL), BD_SC(OK));
    bfc_close(c);
    bt_wait_waiters(pg, K_BATCH, 1);

    term t; /* with a token: the audit names its actor */
    term_start_sized(&t, d.ipc_url, ROWS, COLS, bd_token(BFT_CAP_ALL));
    static const char *const first[] = {"READY", ID, "1 backfill", "Enter detail", NULL};
    term_wait(&t, first);
    term_wait_row(&t, "running");
    /* every line fits: libvterm would wrap a longer one onto the next row */
    assert_non_null(strstr(t.text, "STATE"));
    assert_null(strstr(t.text, "READINESS UNKNOWN"));

    /* the pause key asks first, and nothing happens before the answer */
    term_key(&t, "p");
    static const char *const prompt[] = {"pause " ID "? y/n", NULL};
    term_wait(&t, prompt);
    for (int i = 0; i < 3; i++) { /* three refreshes' worth: still running in PostgreSQL */
        term_pump(&t, 400);
        char *st = db_state(pg);
        assert_string_equal(st, "running");
        free(st);
    }
    term_key(&t, "y");
    term_wait_row(&t, "paused");
    char *st = db_state(pg);
    assert_string_equal(st, "paused");
    free(st);
    static const char *const outcome[] = {"pause " ID ": running -> paused", NULL};
    term_wait(&t, outcome);

    /* a refused action says the server's reason and the state now, as the CLI does
     * (dash_send's conflict branch) */
    term_key(&t, "R");
    static const char *const retry_prompt[] = {"retry " ID "? y/n", NULL};
    term_wait(&t, retry_prompt);
    term_key(&t, "y");
    static const char *const refused[] = {"retry " ID " refused, now paused: ", NULL};
    term_wait(&t, refused);
    const char *why = term_line(&t, "retry " ID " refused, now paused: ");
    assert_non_null(why); /* the server's reason follows, not only the code's name */
    why = strstr(why, "now paused: ") + strlen("now paused: ");
    assert_true(strncmp(why, "conflict", 8) != 0 && strncmp(why, "error", 5) != 0);

    /* the detail's audit names who acted (bfc_dash_apply_detail's actor) */
    term_key(&t, "\r");
    static const char *const audit[] = {"audit (newest first)",
                                        "by operator@test: running -> paused", NULL};
    term_wait(&t, audit);
    term_key(&t, "\x1b");
    term_wait_row(&t, "paused");

    /* a resize is followed */
    term_resize(&t, ROWS, 60);
    term_pump(&t, 500);
    term_resize(&t, ROWS, COLS);
    term_wait_row(&t, "paused");

    /* the daemon goes: the last data stays, marked STALE with its age */
    bt_unlock(holder, K_BATCH);
    bd_stop(&d);
    static const char *const stale[] = {"STALE ", "last data shown; refresh failed:", NULL};
    term_wait(&t, stale);
    const char *line = term_line(&t, "STALE ");
    assert_non_null(line);
    assert_true(strstr(line, "unavailable") != NULL || strstr(line, "deadline") != NULL);
    const char *age = strstr(line, "STALE ") + 6;
    assert_true(*age >= '0' && *age <= '9');
    term_wait_row(&t, "paused");
    assert_null(strstr(t.text, "0 backfills"));
    assert_null(strstr(t.text, "offline"));
    /* and readiness is unknown now, not the last verdict (render_banner's ready_stale) */
    static const char *const unknown[] = {"READINESS UNKNOWN (was ready ", NULL};
    term_wait(&t, unknown);
    assert_null(strstr(t.text, "\nREADY"));

    term_quit(&t);
    PQfinish(holder);
    bd_suite_close(NULL, pg, false);
}

/* Whether a screen line shows id as a whole cell. */
static bool term_has_row(term *t, const char *id)
{
    char needle[96];
    snprintf(needle, sizeof needle, " %s ", id);
    return strstr(t->text, needle) != NULL;
}

/* buzzctl with args; its stdout into out. Returns the exit status. */
static int run_buzzctl(char *out, size_t cap, const char *url, const char *args)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "env -u BUZZ_BACKFILL_TOKEN -u BUZZ_BACKFILL_TOKEN_FILE %s --url %s %s", BUZZCTL_PATH,
             url, args);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/*
 * 10,000 backfills (a definitions module with 10,000 definitions, registered by the daemon; no
 * worker runs, so a started one waits for a worker) at 160x45 and 60x15.
 *
 * Guards proved:
 * - every page of Admin.List is loaded (dash_refresh's page loop and the model's growing rows):
 *   the status line counts 10,001, and a filter finds a backfill from the last pages (with the
 *   former 256-row cap: "(no backfill matches)");
 * - at 60 columns IDs stay whole: ETA and RATE go first (render_plan_ids); with the former fixed
 *   columns every ID was cut to "dash.many." and rows could not be told apart;
 * - a running backfill no worker holds is "waiting for a worker" on the dashboard
 *   (project_waiting), and in get, list and --json.
 */
static void test_dash_many(void **state)
{
    (void)state;
    PGconn *pg = bd_suite_open("dash_many");
    bt_make_items(pg, "dash_items", 10);
    bt_make_items(pg, "dash_many", 10);
    bd_options o = bd_defaults();
    o.definitions = "dash";
    o.auto_migrate = true;
    o.workers = 0; /* serve only: nothing claims a started backfill */
    char many[16];
    snprintf(many, sizeof many, "%d", MANY);
    assert_int_equal(setenv("BUZZ_TEST_MANY", many, 1), 0);
    bd_daemon d;
    bd_start(&d, &o);
    assert_int_equal(unsetenv("BUZZ_TEST_MANY"), 0);
    bd_wait_registered(pg, MANY + 1);
    bfc_client *c = bd_client(d.ipc_url, NULL, 0, 0);
    assert_int_equal(bd_control(c, "Start", "dash.many.07342_v1", NULL), BD_SC(OK));
    bfc_close(c);

    term t;
    term_start_sized(&t, d.ipc_url, MAX_ROWS, MAX_COLS, NULL);
    static const char *const loaded[] = {"10,001 backfills", "READY", NULL};
    term_wait(&t, loaded);
    term_key(&t, "/07342\r");
    static const char *const found[] = {"1 of 10,001 backfills match filter: 07342",
                                        "> dash.many.07342_v1 ", "waiting for a worker", NULL};
    term_wait(&t, found);
    const char *row = term_line(&t, "> dash.many.07342_v1 ");
    assert_non_null(row);
    assert_null(strstr(row, "0/s")); /* no rate for what nobody works on */

    term_quit(&t);

    /* ten neighbours at 60x15: four rows fit, each whole and told apart. A dash of its own
     * rather than a resize of this one: a shrink in rows leaves the scroll region that curses
     * set for 45 rows in libvterm 0.1.4 (it does not clamp it on resize, as a real terminal
     * does), and curses output written before the SIGWINCH that scrolls it then writes past
     * the emulator's buffer (a segfault of this test, seen in CI); test_dash_end_to_end's
     * resize keeps the rows. */
    term_start_sized(&t, d.ipc_url, 15, 60, NULL);
    term_key(&t, "/many.07342\x7f\r"); /* the filter is edited as it is typed: a backspace */
    static const char *const ten[] = {"10 of 10,001 backfills match filter: many.0734", NULL};
    term_wait(&t, ten);
    int64_t until = now_ms() + DEADLINE * 1000;
    const char *ids[] = {"dash.many.07340_v1", "dash.many.07341_v1", "dash.many.07342_v1",
                         "dash.many.07343_v1"};
    for (;;) {
        term_pump(&t, 100);
        bool all = true;
        for (size_t i = 0; i < 4; i++)
            all = all && term_has_row(&t, ids[i]);
        if (all && strstr(t.text, "waiting for a worker") != NULL)
            break;
        if (now_ms() > until)
            fail_msg("at 60x15 the rows are not told apart; the screen:\n%s", t.text);
    }
    term_quit(&t);

    /* the same in get, list and --json */
    static char out[1 << 20];
    assert_int_equal(run_buzzctl(out, sizeof out, d.ipc_url, "get dash.many.07342_v1"), 0);
    if (strstr(out, "waiting for a worker") == NULL)
        fail_msg("get does not say it waits for a worker:\n%s", out);
    assert_int_equal(run_buzzctl(out, sizeof out, d.ipc_url, "list --state running"), 0);
    if (strstr(out, "dash.many.07342_v1") == NULL || strstr(out, "waiting for a worker") == NULL)
        fail_msg("list does not say it waits for a worker:\n%s", out);
    assert_int_equal(run_buzzctl(out, sizeof out, d.ipc_url, "--json get dash.many.07342_v1"), 0);
    if (strstr(out, "\"waitingForWorker\":true") == NULL)
        fail_msg("--json get has no waitingForWorker:\n%s", out);
    assert_int_equal(run_buzzctl(out, sizeof out, d.ipc_url, "--json list --state running"), 0);
    if (strstr(out, "\"waitingForWorker\":true") == NULL)
        fail_msg("--json list has no waitingForWorker:\n%s", out);
    bd_suite_close(&d, pg, false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dash_end_to_end),
        cmocka_unit_test(test_dash_many),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
