/*
 * buzzctl_dash.c - `buzzctl dash`: the refresh loop and the curses layer of the dashboard.
 * Each refresh (dash_fetch.c, shared with the desktop client) reads Readiness.Check, every
 * page of Admin.List and, with the detail open, Admin.Get and the audit tail of the selected
 * backfill, and hands the results (or their failures) to the model (dash_view.c). What is on screen
 * is bfc_dash_render()'s lines, drawn as they are; this file decides nothing about what is shown.
 * --once prints one frame as plain text without curses.
 */
#include <getopt.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <curses.h>

#include "buzz/backfill/v1/admin.pb-c.h"
#include "buzz/backfill/v1/readiness.pb-c.h"
#include "buzzctl.h"
#include "dash_fetch.h"
#include "dash_view.h"

_Static_assert(KEY_DOWN == BFC_KEY_DOWN, "dash_view.h key codes are ncurses'");
_Static_assert(KEY_UP == BFC_KEY_UP, "dash_view.h key codes are ncurses'");
_Static_assert(KEY_BACKSPACE == BFC_KEY_BACKSPACE, "dash_view.h key codes are ncurses'");
_Static_assert(KEY_ENTER == BFC_KEY_ENTER, "dash_view.h key codes are ncurses'");
_Static_assert(KEY_RESIZE == BFC_KEY_RESIZE, "dash_view.h key codes are ncurses'");

#define DASH_TIMEOUT_MS          3000            /* a refresh call's budget without --timeout */
#define DASH_VALIDATE_TIMEOUT_MS (5 * 60 * 1000) /* as buzzctl validate */

/* One refresh (dash_fetch.c); returns the first error (BF_OK when readiness and the list
 * were read). The connection is opened by the first refresh that can. */
static bf_err dash_refresh(ctl *c, bfc_dash_model *m)
{
    bfc_status st;
    bf_err err = ctl_connect(c, &st);
    return bfc_dash_refresh(m, err == BF_OK ? c->client : NULL, err, &st,
                            m->show_detail ? bfc_dash_selected_id(m) : NULL);
}

/* Send the confirmed action; its outcome as one line. */
static void dash_send(ctl *c, bfc_dash_model *m)
{
    char line[BFC_DASH_LINE];
    bfc_status st;
    ProtobufCMessage *out = NULL;
    bf_err err = ctl_connect(c, &st);
    bfc_client *sender = c->client, *own = NULL;
    if (err == BF_OK && m->confirm_action == BFC_ACTION_VALIDATE && !c->validate_timeout_given) {
        /* a validation may run far longer than a refresh's budget: its own connection with
         * validate's (the screen waits for the answer) */
        bfc_options bo = c->bo;
        bo.timeout_ms = DASH_VALIDATE_TIMEOUT_MS;
        if (bfc_open(&own, c->url, &bo, NULL, 0) == BF_OK)
            sender = own;
    }
    if (err == BF_OK)
        err = bfc_control(sender, m->confirm_action, m->confirm_id, &out, &st);
    bfc_close(own);
    bfc_dash_outcome(line, sizeof line, m->confirm_action, m->confirm_id, err, &st, out);
    if (out)
        protobuf_c_message_free_unpacked(out, NULL);
    bfc_dash_action_done(m, line);
}

/* Print a frame without trailing spaces. */
static void dash_print_frame(const bfc_dash_frame *f)
{
    for (size_t i = 0; i < f->n; i++) {
        size_t len = strlen(f->line[i]);
        while (len > 0 && f->line[i][len - 1] == ' ')
            len--;
        printf("%.*s\n", (int)len, f->line[i]);
    }
}

/* One frame as text. A rate needs two reads of a running backfill: when one runs, a second
 * refresh follows sample_s later (the frame shows the second). */
static int dash_once(ctl *c, bfc_dash_model *m, int64_t sample_ms)
{
    bf_err err = dash_refresh(c, m);
    bool running = false;
    for (size_t i = 0; i < m->n_rows; i++)
        running |= m->rows[i].state == BUZZ__BACKFILL__V1__STATE__RUNNING;
    if (err == BF_OK && running) {
        ctl_sleep_ms(sample_ms);
        err = dash_refresh(c, m);
    }
    int cols = 80;
    struct winsize ws;
    if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        cols = ws.ws_col;
    int rows = 4 + 2 * (int)m->n_rows + 1 + 2;
    static bfc_dash_frame f;
    bfc_dash_render(m, rows < BFC_DASH_MAX_LINES ? rows : BFC_DASH_MAX_LINES, cols, &f);
    f.n = f.n >= 2 ? f.n - 2 : f.n; /* no key line in a printed frame */
    dash_print_frame(&f);
    bfc_dash_fini(m);
    return ctl_exit_for(err);
}

static void dash_draw(const bfc_dash_model *m)
{
    static bfc_dash_frame f;
    bfc_dash_render(m, LINES, COLS, &f);
    erase();
    for (size_t i = 0; i < f.n; i++) {
        attr_t a = A_NORMAL;
        switch (f.attr[i]) {
        case BFC_DASH_BOLD:
            a = A_BOLD;
            break;
        case BFC_DASH_REVERSE:
            a = A_REVERSE;
            break;
        case BFC_DASH_ALERT:
            a = A_BOLD | (has_colors() ? COLOR_PAIR(1) : A_STANDOUT);
            break;
        case BFC_DASH_GOOD:
            a = has_colors() ? COLOR_PAIR(2) : A_NORMAL;
            break;
        default:
            break;
        }
        attron(a);
        mvaddnstr((int)i, 0, f.line[i], -1);
        attroff(a);
    }
    refresh();
}

int ctl_cmd_dash(ctl *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"interval", required_argument, NULL, 'i'}, {"once", no_argument, NULL, '1'}, {0}};
    int64_t interval_ms = 2000;
    bool once = false, interval_given = false;
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o == 'i') {
            long long bare = 0;
            interval_ms = ctl_parse_duration_ms(optarg, &bare);
            if (interval_ms == -2)
                interval_ms = bare * 1000; /* a bare number is seconds */
            if (interval_ms < 100 || interval_ms > 3600000)
                return ctl_usage_error(
                    c, "dash: --interval: '%.40s' is not a duration of 100ms..1h (e.g. 2s)",
                    optarg);
            interval_given = true;
        } else if (o == '1') {
            once = true;
        } else {
            return ctl_usage_error(c, "dash: unknown option (see buzzctl dash --help)");
        }
    }
    if (optind < argc)
        return ctl_usage_error(c, "dash: unexpected argument '%.40s'", argv[optind]);
    c->validate_timeout_given = c->bo.timeout_ms != 0;
    if (c->bo.timeout_ms == 0)
        c->bo.timeout_ms = DASH_TIMEOUT_MS;
    static bfc_dash_model m;
    bfc_dash_init(&m, c->url);
    if (once)
        return dash_once(c, &m, interval_given ? interval_ms : 1000);
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO))
        return ctl_usage_error(c, "dash: needs a terminal (use --once for one frame as text)");
    setlocale(LC_ALL, "");
    if (initscr() == NULL) {
        fputs("buzzctl dash: could not initialise the terminal (check TERM)\n", stderr);
        return EXIT_ERROR;
    }
    cbreak();
    noecho();
    keypad(stdscr, TRUE);
    set_escdelay(50);
    curs_set(0);
    if (has_colors()) {
        start_color();
        use_default_colors();
        init_pair(1, COLOR_RED, -1);
        init_pair(2, COLOR_GREEN, -1);
    }
    timeout(100);
    int64_t next = 0;
    for (;;) {
        int64_t now = bfc_dash_now_us();
        if (now >= next) {
            (void)dash_refresh(c, &m);
            next = bfc_dash_now_us() + interval_ms * 1000;
        }
        dash_draw(&m);
        int ch = getch();
        if (ch == ERR)
            continue;
        bfc_dash_cmd cmd = bfc_dash_key(&m, ch);
        if (cmd == BFC_DASH_QUIT)
            break;
        if (cmd == BFC_DASH_SEND) {
            snprintf(m.message, sizeof m.message, "%s %s: sent, waiting for the answer",
                     bfc_action_name(m.confirm_action), m.confirm_id);
            int action = m.confirm_action;
            m.confirm_action = 0; /* the prompt goes while the call runs */
            dash_draw(&m);
            m.confirm_action = action;
            dash_send(c, &m);
            next = 0;
        } else if (cmd == BFC_DASH_REFRESH) {
            next = 0;
        }
    }
    endwin();
    bfc_dash_fini(&m);
    return EXIT_OK;
}
