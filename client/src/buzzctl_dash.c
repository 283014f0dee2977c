/*
 * buzzctl_dash.c - `buzzctl dash`: the refresh loop and the curses layer of the dashboard.
 * Each refresh reads Readiness.Check, every page of Admin.List and, with the detail open,
 * Admin.Get and the audit tail of the selected backfill, and hands the results (or their
 * failures) to the model (dash_view.c). What is on screen is bfc_dash_render()'s lines,
 * drawn as they are; this file decides nothing about what is shown. --once prints one frame
 * as plain text without curses.
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
#include "dash_view.h"

_Static_assert(KEY_DOWN == BFC_KEY_DOWN, "dash_view.h key codes are ncurses'");
_Static_assert(KEY_UP == BFC_KEY_UP, "dash_view.h key codes are ncurses'");
_Static_assert(KEY_BACKSPACE == BFC_KEY_BACKSPACE, "dash_view.h key codes are ncurses'");
_Static_assert(KEY_ENTER == BFC_KEY_ENTER, "dash_view.h key codes are ncurses'");
_Static_assert(KEY_RESIZE == BFC_KEY_RESIZE, "dash_view.h key codes are ncurses'");

#define DASH_TIMEOUT_MS          3000            /* a refresh call's budget without --timeout */
#define DASH_LIST_PAGE           1000            /* the server's largest page */
#define DASH_VALIDATE_TIMEOUT_MS (5 * 60 * 1000) /* as buzzctl validate */

static int64_t dash_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* One refresh; returns the first error (BF_OK when readiness and the list were read). */
static bf_err dash_refresh(ctl *c, bfc_dash_model *m)
{
    bfc_status st;
    ProtobufCMessage *out = NULL;
    Buzz__Backfill__V1__CheckRequest creq = BUZZ__BACKFILL__V1__CHECK_REQUEST__INIT;
    bf_err first =
        ctl_call(c, &buzz__backfill__v1__readiness__descriptor, "Check", &creq.base, &out, &st);
    bfc_dash_apply_ready(m, first == BF_OK ? (Buzz__Backfill__V1__CheckResponse *)out : NULL, first,
                         &st, dash_now_us());
    if (out)
        protobuf_c_message_free_unpacked(out, NULL);
    out = NULL;

    /* every page, up to what the model keeps */
    Buzz__Backfill__V1__ListRequest lreq = BUZZ__BACKFILL__V1__LIST_REQUEST__INIT;
    ProtobufCMessage **pages = NULL;
    Buzz__Backfill__V1__Backfill **rows = NULL;
    size_t n_pages = 0, cap_pages = 0, n = 0, cap_rows = 0;
    bool truncated = false;
    bf_err err = BF_OK;
    char *token = NULL;
    do {
        lreq.page_token = token;
        lreq.has_page_size = 1;
        lreq.page_size = DASH_LIST_PAGE;
        err = ctl_call(c, &buzz__backfill__v1__admin__descriptor, "List", &lreq.base, &out, &st);
        free(token);
        token = NULL;
        if (err == BF_OK && n_pages == cap_pages) {
            size_t cap = cap_pages ? cap_pages * 2 : 16;
            ProtobufCMessage **p = realloc(pages, cap * sizeof *p);
            if (p == NULL)
                err = BF_ERR_RESOURCE_EXHAUSTED;
            else
                pages = p, cap_pages = cap;
        }
        if (err != BF_OK) {
            if (out)
                protobuf_c_message_free_unpacked(out, NULL);
            out = NULL;
            break;
        }
        pages[n_pages++] = out;
        Buzz__Backfill__V1__ListResponse *r = (Buzz__Backfill__V1__ListResponse *)out;
        out = NULL;
        if (n + r->n_backfills > cap_rows) {
            size_t cap = cap_rows ? cap_rows : 1024;
            while (cap < n + r->n_backfills)
                cap *= 2;
            Buzz__Backfill__V1__Backfill **p = realloc(rows, cap * sizeof *p);
            if (p == NULL) {
                err = BF_ERR_RESOURCE_EXHAUSTED;
                break;
            }
            rows = p, cap_rows = cap;
        }
        for (size_t i = 0; i < r->n_backfills; i++)
            rows[n++] = r->backfills[i];
        if (r->next_page_token != NULL && r->next_page_token[0] != '\0') {
            if (n >= BFC_DASH_MAX_ROWS) /* the model keeps no more: said on screen */
                truncated = true;
            else if ((token = strdup(r->next_page_token)) == NULL)
                err = BF_ERR_RESOURCE_EXHAUSTED;
        }
    } while (token != NULL);
    bfc_dash_apply_list(m, rows, n, truncated, err, &st, dash_now_us());
    for (size_t i = 0; i < n_pages; i++)
        protobuf_c_message_free_unpacked(pages[i], NULL);
    free(pages);
    free(rows);
    if (first == BF_OK)
        first = err;

    const char *id = m->show_detail ? bfc_dash_selected_id(m) : NULL;
    if (id != NULL) {
        char sel[BFC_CELL];
        snprintf(sel, sizeof sel, "%s", id);
        Buzz__Backfill__V1__GetRequest greq = BUZZ__BACKFILL__V1__GET_REQUEST__INIT;
        greq.id = sel;
        ProtobufCMessage *get = NULL, *audit = NULL;
        bfc_status gst;
        bf_err gerr =
            ctl_call(c, &buzz__backfill__v1__admin__descriptor, "Get", &greq.base, &get, &gst);
        Buzz__Backfill__V1__AuditRequest areq = BUZZ__BACKFILL__V1__AUDIT_REQUEST__INIT;
        areq.id = sel;
        areq.has_page_size = 1;
        areq.page_size = BFC_DASH_AUDIT_TAIL;
        bf_err aerr = gerr == BF_OK ? ctl_call(c, &buzz__backfill__v1__admin__descriptor, "Audit",
                                               &areq.base, &audit, &st)
                                    : gerr;
        bfc_dash_apply_detail(
            m, gerr == BF_OK ? (Buzz__Backfill__V1__GetResponse *)get : NULL, gerr, &gst,
            aerr == BF_OK ? (Buzz__Backfill__V1__AuditResponse *)audit : NULL, aerr, dash_now_us());
        if (get)
            protobuf_c_message_free_unpacked(get, NULL);
        if (audit)
            protobuf_c_message_free_unpacked(audit, NULL);
    }
    return first;
}

/* Send the confirmed action; its outcome as one line. */
static void dash_send(ctl *c, bfc_dash_model *m)
{
    char line[BFC_DASH_LINE];
    const char *name = bfc_action_name(m->confirm_action);
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
    if (err == BF_OK && m->confirm_action == BFC_ACTION_VALIDATE) {
        Buzz__Backfill__V1__ValidateResponse *v = (Buzz__Backfill__V1__ValidateResponse *)out;
        snprintf(line, sizeof line, "validate %s: %s (request id %s)", m->confirm_id,
                 bfc_outcome_name(v->outcome), st.request_id);
    } else if (err == BF_OK) {
        Buzz__Backfill__V1__ControlResponse *r = (Buzz__Backfill__V1__ControlResponse *)out;
        snprintf(line, sizeof line, "%s %s: %s -> %s (request id %s)", name, m->confirm_id,
                 bfc_state_name(r->has_prior_state ? (int)r->prior_state : 0),
                 bfc_state_name(r->has_resulting_state ? (int)r->resulting_state : 0),
                 st.request_id);
    } else if (err == BF_ERR_CONFLICT && st.answered) {
        /* as the CLI: the server's reason, and the state the backfill is in now */
        const Buzz__Backfill__V1__Backfill *b = NULL;
        if (out != NULL && m->confirm_action == BFC_ACTION_VALIDATE)
            b = ((Buzz__Backfill__V1__ValidateResponse *)out)->backfill;
        else if (out != NULL)
            b = ((Buzz__Backfill__V1__ControlResponse *)out)->backfill;
        char reason[BFC_MESSAGE_MAX + BFC_DETAIL_MAX + 4], safe[200];
        bool detail = st.detail[0] && strstr(st.detail, st.message) == NULL;
        snprintf(reason, sizeof reason, "%s%s%s",
                 st.message[0] ? st.message : bfc_code_name(st.code), detail ? ": " : "",
                 detail ? st.detail : "");
        bfc_printable(safe, sizeof safe, reason);
        snprintf(line, sizeof line, "%s %s refused, now %s: %s (request id %s)", name,
                 m->confirm_id,
                 b != NULL && b->has_state ? bfc_state_name((int)b->state) : "unknown", safe,
                 st.request_id);
    } else {
        bfc_fetch_error fe;
        bfc_fetch_error_from(&fe, err, &st);
        snprintf(line, sizeof line, "%s %s: %s%s", name, m->confirm_id, fe.text,
                 st.answered ? "" : " (outcome unknown: see the table)");
    }
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
        int64_t now = dash_now_us();
        if (now >= next) {
            (void)dash_refresh(c, &m);
            next = dash_now_us() + interval_ms * 1000;
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
