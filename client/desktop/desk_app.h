/*
 * desk_app.h - the desktop client's window state (prefix desk_), shared by the files that
 * build and update the window: desk_window.c (layout, readiness, detail, controls), desk_rows.c
 * (the list of backfills) and desk_test.c (the test hook). Main thread only.
 *
 * Every widget that shows a value has a widget name ("readiness", "row.<id>.state",
 * "detail.error", "control.pause", ...) and the value as its text or accessible label; the
 * test hook and assistive technologies read the same thing a person sees.
 */
#ifndef BUZZ_DESK_APP_H
#define BUZZ_DESK_APP_H

#include <stdbool.h>

#include <gtk/gtk.h>

#include "desk_worker.h"

#define DESK_MAX_SHOWN 2000 /* rows drawn in the list; the status line says when more exist */

typedef struct desk_row {
    char id[BFC_CELL];
    GtkWidget *row, *id_l, *state, *bar, *prog, *rate, *eta, *throttle, *gates, *note;
} desk_row;

enum {
    DESK_D_STATE,
    DESK_D_PROGRESS,
    DESK_D_BOUND,
    DESK_D_CHECKPOINT,
    DESK_D_OWNERSHIP,
    DESK_D_ATTEMPTS,
    DESK_D_ERROR,
    DESK_D_BATCH,
    DESK_D_SLOW,
    DESK_D_OLD_WRITERS,
    DESK_D_VALIDATING,
    DESK_D_VALIDATION,
    DESK_D_COUNT
};

typedef struct desk_app {
    GtkWidget *win;
    /* connection */
    GtkWidget *conn_expander, *e_url, *e_token_file, *e_tls_ca, *e_tls_name, *conn_status;
    desk_conn conn;
    bool conn_failing; /* the last snapshot had no connection or a refused credential */
    desk_worker *w;
    /* what the reader last saw */
    desk_snapshot *snap;
    GtkWidget *whoami, *readiness, *status;
    /* the list */
    GtkWidget *list;
    desk_row *rows;
    size_t n_rows;
    bool updating; /* the list is being rebuilt: selection signals are ours */
    char selected[BFC_CELL];
    /* detail */
    GtkWidget *d_title, *d_field[DESK_D_COUNT], *d_audit;
    /* controls */
    GtkWidget *control[BFC_ACTION_COUNT + 1];
    GtkWidget *confirm_box, *confirm_text;
    int confirm_action;
    char confirm_id[BFC_CELL];
    bool in_flight;
    GtkWidget *outcome, *ask_again;
    desk_outcome last;
    bool has_last;
} desk_app;

/* desk_window.c */
GtkWidget *desk_window_new(desk_app *a);
void desk_window_show_snapshot(desk_app *a, desk_snapshot *s); /* takes s */
void desk_window_show_outcome(desk_app *a, desk_outcome *o);   /* takes o */
void desk_window_connect(desk_app *a);                         /* from the entries */
void desk_window_select(desk_app *a, const char *id);          /* NULL: none */
/* A label with a widget name (and the style class when not NULL). */
GtkWidget *desk_label(const char *name, const char *css_class);
/* Set a label's text and its accessible label together. */
void desk_set_text(GtkWidget *label, const char *text);

/* desk_rows.c */
GtkWidget *desk_rows_new(desk_app *a); /* the list box */
void desk_rows_update(desk_app *a);    /* from a->snap */
void desk_rows_free(desk_app *a);

/* desk_settings.c: url, token file path and TLS options (never a token) in
 * $XDG_CONFIG_HOME/buzz-backfill/desktop.conf; what is not set there stays as it is. */
void desk_settings_load(desk_conn *c);
bool desk_settings_save(const desk_conn *c, char *why, size_t cap);

/* desk_test.c: BUZZ_DESKTOP_TEST=1 makes stdin a command channel (see the file). */
void desk_test_start(desk_app *a);

#endif
