/*
 * desk_window.c - the desktop client's window: the connection settings, identity, readiness
 * as the relay sees it, the list (desk_rows.c), the detail of the selected backfill, and the
 * five supported controls with their confirmation and the server's answer.
 *
 * Design notes: nothing here computes a state. The readiness and list status lines are the
 * dashboard's own lines (bfc_dash_render of the same model), the cells are the projection's
 * (bfc_view, bfc_dash_row), and an outcome is the line bfc_dash_outcome() made from the
 * server's answer. A control button only asks; the confirmation's Send sends.
 */
#include <stdio.h>
#include <string.h>

#include "dash_fetch.h"
#include "desk_app.h"

GtkWidget *desk_label(const char *name, const char *css_class)
{
    GtkWidget *l = gtk_label_new("");
    gtk_widget_set_name(l, name);
    gtk_label_set_xalign(GTK_LABEL(l), 0.0f);
    gtk_label_set_selectable(GTK_LABEL(l), FALSE);
    gtk_label_set_wrap(GTK_LABEL(l), TRUE);
    gtk_label_set_wrap_mode(GTK_LABEL(l), PANGO_WRAP_WORD_CHAR);
    if (css_class != NULL)
        gtk_widget_add_css_class(l, css_class);
    return l;
}

void desk_set_text(GtkWidget *label, const char *text)
{
    if (strcmp(gtk_label_get_text(GTK_LABEL(label)), text) != 0)
        gtk_label_set_text(GTK_LABEL(label), text);
    gtk_accessible_update_property(GTK_ACCESSIBLE(label), GTK_ACCESSIBLE_PROPERTY_LABEL, text, -1);
}

static void desk_set_alert(GtkWidget *w, bool alert, bool good)
{
    if (alert)
        gtk_widget_add_css_class(w, "desk-alert");
    else
        gtk_widget_remove_css_class(w, "desk-alert");
    if (good)
        gtk_widget_add_css_class(w, "desk-good");
    else
        gtk_widget_remove_css_class(w, "desk-good");
}

/* ---- detail ------------------------------------------------------------------------------ */

static void desk_detail_update(desk_app *a)
{
    const bfc_dash_model *m = a->snap ? &a->snap->m : NULL;
    const bfc_dash_detail *d = m ? &m->detail : NULL;
    char line[BFC_DASH_LINE + 64];
    bool have = d != NULL && a->selected[0] && d->has_data && strcmp(d->id, a->selected) == 0;
    if (!a->selected[0]) {
        desk_set_text(a->d_title, "no backfill selected");
    } else if (!have) {
        snprintf(line, sizeof line, "%s: %s", a->selected,
                 d && d->err.text[0] ? d->err.text : "loading");
        desk_set_text(a->d_title, line);
    } else if (d->stale) {
        char age[24];
        bfc_format_duration(age, sizeof age,
                            m->now_us >= d->ok_at_us ? m->now_us - d->ok_at_us : 0);
        snprintf(line, sizeof line, "%s  STALE %s: %s", d->id, age, d->err.text);
        desk_set_text(a->d_title, line);
    } else {
        desk_set_text(a->d_title, d->id);
    }
    desk_set_alert(a->d_title, a->selected[0] && (!have ? d && d->err.text[0] : d->stale), false);
    for (int i = 0; i < DESK_D_COUNT; i++)
        gtk_widget_set_visible(gtk_widget_get_parent(a->d_field[i]), have);
    gtk_widget_set_visible(a->d_audit, have);
    if (!have)
        return;
    const bfc_view *v = &d->v;
    snprintf(line, sizeof line, "%s%s", v->state, v->gating ? " (gates readiness)" : "");
    desk_set_text(a->d_field[DESK_D_STATE], line);
    desk_set_text(a->d_field[DESK_D_PROGRESS], v->progress);
    desk_set_text(a->d_field[DESK_D_BOUND], v->bound);
    desk_set_text(a->d_field[DESK_D_CHECKPOINT], v->checkpoint);
    snprintf(line, sizeof line, "claim %s, generation %s", v->claim, v->generation);
    desk_set_text(a->d_field[DESK_D_OWNERSHIP], line);
    desk_set_text(a->d_field[DESK_D_ATTEMPTS], v->retry);
    desk_set_text(a->d_field[DESK_D_ERROR], v->error);
    desk_set_alert(a->d_field[DESK_D_ERROR], strcmp(v->error, "-") != 0, false);
    snprintf(line, sizeof line, "%s, throttled %s", v->batch, v->throttle);
    desk_set_text(a->d_field[DESK_D_BATCH], line);
    desk_set_text(a->d_field[DESK_D_SLOW], v->slow);
    desk_set_text(a->d_field[DESK_D_OLD_WRITERS], v->old_writers);
    desk_set_text(a->d_field[DESK_D_VALIDATING], v->validating);
    snprintf(line, sizeof line, "%s at %s%s%s", v->validation, d->validation_time,
             d->validation_detail[0] ? ": " : "", d->validation_detail);
    desk_set_text(a->d_field[DESK_D_VALIDATION], line);
    /* the audit tail, newest first, each with its actor */
    GtkWidget *child;
    while ((child = gtk_widget_get_first_child(a->d_audit)) != NULL)
        gtk_box_remove(GTK_BOX(a->d_audit), child);
    GtkWidget *head = desk_label("detail.audit", "heading");
    desk_set_text(head,
                  d->audit_ok ? "recent audit (newest first)" : "audit: unknown (read failed)");
    desk_set_alert(head, !d->audit_ok, false);
    gtk_box_append(GTK_BOX(a->d_audit), head);
    for (size_t i = 0; d->audit_ok && i < d->n_audit; i++) {
        char name[48];
        snprintf(name, sizeof name, "detail.audit.%zu", i);
        GtkWidget *l = desk_label(name, "monospace");
        desk_set_text(l, d->audit[i]);
        gtk_box_append(GTK_BOX(a->d_audit), l);
    }
    if (d->audit_ok && d->n_audit == 0) {
        GtkWidget *l = desk_label("detail.audit.0", NULL);
        desk_set_text(l, "(none)");
        gtk_box_append(GTK_BOX(a->d_audit), l);
    }
}

/* ---- controls ---------------------------------------------------------------------------- */

static void desk_controls_update(desk_app *a)
{
    bool can = a->selected[0] && !a->in_flight && a->confirm_action == 0;
    for (int k = 1; k <= BFC_ACTION_COUNT; k++)
        gtk_widget_set_sensitive(a->control[k], can);
    gtk_widget_set_visible(a->confirm_box, a->confirm_action != 0);
    gtk_widget_set_visible(a->ask_again, a->has_last && a->last.unknown && a->last.has_request_id &&
                                             !a->in_flight);
}

static void desk_outcome_text(desk_app *a, const char *text, bool alert)
{
    desk_set_text(a->outcome, text);
    desk_set_alert(a->outcome, alert, false);
}

static void desk_on_control(GtkButton *b, gpointer data)
{
    desk_app *a = data;
    int action = GPOINTER_TO_INT(g_object_get_data(G_OBJECT(b), "desk-action"));
    if (bfc_action_name(action) == NULL || !a->selected[0])
        return;
    a->confirm_action = action;
    snprintf(a->confirm_id, sizeof a->confirm_id, "%s", a->selected);
    char q[BFC_CELL + 120];
    snprintf(q, sizeof q, "%s %s? The server decides; its answer is shown below.",
             bfc_action_name(action), a->confirm_id);
    desk_set_text(a->confirm_text, q);
    desk_controls_update(a);
}

static void desk_on_confirm(GtkButton *b, gpointer data)
{
    desk_app *a = data;
    bool send = GPOINTER_TO_INT(g_object_get_data(G_OBJECT(b), "desk-send"));
    char line[BFC_CELL + 80];
    const char *name = bfc_action_name(a->confirm_action);
    if (name == NULL)
        return;
    if (send) {
        snprintf(line, sizeof line, "%s %s: sent, waiting for the answer", name, a->confirm_id);
        a->in_flight = true;
        a->has_last = false;
        desk_worker_send(a->w, a->confirm_action, a->confirm_id);
    } else {
        snprintf(line, sizeof line, "%s %s: cancelled, nothing sent", name, a->confirm_id);
    }
    desk_outcome_text(a, line, false);
    a->confirm_action = 0;
    desk_controls_update(a);
}

static void desk_on_ask_again(GtkButton *b, gpointer data)
{
    (void)b;
    desk_app *a = data;
    if (!a->has_last || !a->last.unknown || !a->last.has_request_id || a->in_flight)
        return;
    char line[BFC_CELL + 80];
    snprintf(line, sizeof line, "%s %s: asked again with the same request id, waiting",
             bfc_action_name(a->last.action), a->last.id);
    a->in_flight = true;
    desk_worker_resend(a->w, a->last.action, a->last.id, a->last.request_id);
    desk_outcome_text(a, line, false);
    desk_controls_update(a);
}

void desk_window_show_outcome(desk_app *a, desk_outcome *o)
{
    a->last = *o;
    a->has_last = true;
    a->in_flight = false;
    bool failed = strstr(o->line, " refused, ") != NULL || o->unknown ||
                  strstr(o->line, ": not sent: ") != NULL;
    desk_outcome_text(a, o->line, failed);
    g_free(o);
    desk_controls_update(a);
    desk_worker_refresh(a->w); /* the table shows what the control did */
}

/* ---- snapshots --------------------------------------------------------------------------- */

void desk_window_show_snapshot(desk_app *a, desk_snapshot *s)
{
    desk_snapshot_free(a->snap);
    a->snap = s;
    /* the dashboard's own banner and status lines of the same model */
    static bfc_dash_frame f;
    bfc_dash_render(&s->m, 6, BFC_DASH_LINE / 4, &f);
    if (f.n >= 3) {
        desk_set_text(a->readiness, f.line[1]);
        desk_set_alert(a->readiness, f.attr[1] == BFC_DASH_ALERT, f.attr[1] == BFC_DASH_GOOD);
        char status[BFC_DASH_LINE + 64];
        snprintf(status, sizeof status, "%s%s", f.line[2],
                 s->m.n_rows > DESK_MAX_SHOWN ? " (the first 2,000 are drawn)" : "");
        desk_set_text(a->status, status);
        desk_set_alert(a->status, f.attr[2] == BFC_DASH_ALERT, false);
    }
    char who[600];
    if (s->whoami_known && !s->whoami_stale)
        snprintf(who, sizeof who, "signed in as %s", s->whoami);
    else if (s->whoami_known)
        snprintf(who, sizeof who, "identity unknown (was %s; %s)", s->whoami, s->who.text);
    else
        snprintf(who, sizeof who, "identity unknown (%s)",
                 s->who.text[0] ? s->who.text : "no answer yet");
    desk_set_text(a->whoami, who);
    desk_set_alert(a->whoami, !s->whoami_known || s->whoami_stale, false);
    char conn[600];
    if (s->conn_err[0])
        snprintf(conn, sizeof conn, "%s: not connected: %s", a->conn.url, s->conn_err);
    else
        snprintf(conn, sizeof conn, "%s", a->conn.url);
    desk_set_text(a->conn_status, conn);
    /* no connection, or a refused credential: open the connection settings (once per
     * failure, so that a person who closes them is not fought) */
    bool failing = s->conn_err[0] != '\0' || s->who.kind == BFC_FETCH_UNAUTHENTICATED;
    if (failing && !a->conn_failing)
        gtk_expander_set_expanded(GTK_EXPANDER(a->conn_expander), TRUE);
    else if (!failing && a->conn_failing && s->whoami_known)
        gtk_expander_set_expanded(GTK_EXPANDER(a->conn_expander), FALSE); /* connected now */
    a->conn_failing = failing;
    desk_set_alert(a->conn_status, s->conn_err[0] != '\0', false);
    desk_rows_update(a);
    /* rows of a failed refresh stay, dimmed, under the STALE line */
    gtk_widget_set_opacity(a->list, s->m.list_stale ? 0.6 : 1.0);
    desk_detail_update(a);
    desk_controls_update(a);
}

void desk_window_select(desk_app *a, const char *id)
{
    if (strcmp(a->selected, id ? id : "") == 0)
        return;
    snprintf(a->selected, sizeof a->selected, "%s", id ? id : "");
    desk_worker_set_detail(a->w, id);
    desk_detail_update(a);
    desk_controls_update(a);
}

/* ---- connection -------------------------------------------------------------------------- */

static void desk_entry_get(GtkWidget *e, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", gtk_editable_get_text(GTK_EDITABLE(e)));
}

void desk_window_connect(desk_app *a)
{
    desk_conn c = a->conn;
    desk_entry_get(a->e_url, c.url, sizeof c.url);
    desk_entry_get(a->e_token_file, c.token_file, sizeof c.token_file);
    desk_entry_get(a->e_tls_ca, c.tls_ca, sizeof c.tls_ca);
    desk_entry_get(a->e_tls_name, c.tls_server_name, sizeof c.tls_server_name);
    c.token_env = c.token_file[0] == '\0' && a->conn.token_env;
    a->conn = c;
    char why[200] = "";
    if (!desk_settings_save(&c, why, sizeof why))
        g_printerr("buzz-backfill-desktop: settings not saved: %s\n", why);
    desk_snapshot_free(a->snap);
    a->snap = NULL;
    a->has_last = false;
    desk_worker_reconnect(a->w, &c);
    if (a->selected[0])
        desk_worker_set_detail(a->w, a->selected);
    desk_set_text(a->conn_status, c.url);
}

static void desk_on_connect(GtkButton *b, gpointer data)
{
    (void)b;
    desk_window_connect(data);
}

static GtkWidget *desk_entry(GtkWidget *grid, int row, const char *title, const char *name,
                             const char *value, const char *hint)
{
    GtkWidget *l = gtk_label_new(title);
    gtk_label_set_xalign(GTK_LABEL(l), 1.0f);
    GtkWidget *e = gtk_entry_new();
    gtk_widget_set_name(e, name);
    gtk_widget_set_hexpand(e, TRUE);
    gtk_editable_set_text(GTK_EDITABLE(e), value);
    gtk_entry_set_placeholder_text(GTK_ENTRY(e), hint);
    gtk_accessible_update_relation(GTK_ACCESSIBLE(e), GTK_ACCESSIBLE_RELATION_LABELLED_BY, l, NULL,
                                   -1);
    gtk_grid_attach(GTK_GRID(grid), l, 0, row, 1, 1);
    gtk_grid_attach(GTK_GRID(grid), e, 1, row, 1, 1);
    return e;
}

static GtkWidget *desk_connection_new(desk_app *a)
{
    a->conn_expander = gtk_expander_new("Connection");
    gtk_widget_set_name(a->conn_expander, "connection");
    gtk_accessible_update_property(GTK_ACCESSIBLE(a->conn_expander), GTK_ACCESSIBLE_PROPERTY_LABEL,
                                   "Connection settings", -1);
    GtkWidget *grid = gtk_grid_new();
    gtk_grid_set_row_spacing(GTK_GRID(grid), 4);
    gtk_grid_set_column_spacing(GTK_GRID(grid), 8);
    a->e_url =
        desk_entry(grid, 0, "Server URL", "conn.url", a->conn.url,
                   "ipc:///run/buzz-backfill/admin.sock, tcp://host:7400, tls+tcp://host:7401");
    a->e_token_file = desk_entry(grid, 1, "Token file", "conn.token-file", a->conn.token_file,
                                 "a file holding the token (the token itself is never saved)");
    a->e_tls_ca = desk_entry(grid, 2, "TLS CA file", "conn.tls-ca", a->conn.tls_ca,
                             "tls+tcp://: the CA or the server's certificate (PEM)");
    a->e_tls_name = desk_entry(grid, 3, "TLS server name", "conn.tls-server-name",
                               a->conn.tls_server_name, "default: the URL's host");
    GtkWidget *b = gtk_button_new_with_label("Connect");
    gtk_widget_set_name(b, "conn.connect");
    g_signal_connect(b, "clicked", G_CALLBACK(desk_on_connect), a);
    gtk_grid_attach(GTK_GRID(grid), b, 1, 4, 1, 1);
    gtk_expander_set_child(GTK_EXPANDER(a->conn_expander), grid);
    gtk_expander_set_expanded(GTK_EXPANDER(a->conn_expander), a->conn.url[0] == '\0');
    return a->conn_expander;
}

/* ---- layout ------------------------------------------------------------------------------ */

static GtkWidget *desk_detail_new(desk_app *a)
{
    static const char *const titles[DESK_D_COUNT] = {
        [DESK_D_STATE] = "state",
        [DESK_D_PROGRESS] = "progress",
        [DESK_D_BOUND] = "bound",
        [DESK_D_CHECKPOINT] = "checkpoint",
        [DESK_D_OWNERSHIP] = "ownership",
        [DESK_D_ATTEMPTS] = "attempts",
        [DESK_D_ERROR] = "last error",
        [DESK_D_BATCH] = "batch",
        [DESK_D_SLOW] = "slow",
        [DESK_D_OLD_WRITERS] = "old writers",
        [DESK_D_VALIDATING] = "validating",
        [DESK_D_VALIDATION] = "last validation",
    };
    static const char *const names[DESK_D_COUNT] = {
        "detail.state",     "detail.progress",    "detail.bound",      "detail.checkpoint",
        "detail.ownership", "detail.attempts",    "detail.error",      "detail.batch",
        "detail.slow",      "detail.old-writers", "detail.validating", "detail.validation",
    };
    GtkWidget *box = gtk_box_new(GTK_ORIENTATION_VERTICAL, 4);
    gtk_widget_set_margin_start(box, 8);
    gtk_widget_set_margin_end(box, 8);
    a->d_title = desk_label("detail.title", "title-4");
    gtk_box_append(GTK_BOX(box), a->d_title);
    GtkWidget *grid = gtk_grid_new();
    gtk_grid_set_column_spacing(GTK_GRID(grid), 12);
    gtk_grid_set_row_spacing(GTK_GRID(grid), 2);
    for (int i = 0; i < DESK_D_COUNT; i++) {
        GtkWidget *row = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 12);
        GtkWidget *t = gtk_label_new(titles[i]);
        gtk_widget_add_css_class(t, "dim-label");
        gtk_label_set_xalign(GTK_LABEL(t), 0.0f);
        gtk_widget_set_size_request(t, 110, -1);
        a->d_field[i] = desk_label(names[i], NULL);
        gtk_widget_set_hexpand(a->d_field[i], TRUE);
        gtk_accessible_update_relation(GTK_ACCESSIBLE(a->d_field[i]),
                                       GTK_ACCESSIBLE_RELATION_LABELLED_BY, t, NULL, -1);
        gtk_box_append(GTK_BOX(row), t);
        gtk_box_append(GTK_BOX(row), a->d_field[i]);
        gtk_grid_attach(GTK_GRID(grid), row, 0, i, 1, 1);
    }
    gtk_box_append(GTK_BOX(box), grid);
    a->d_audit = gtk_box_new(GTK_ORIENTATION_VERTICAL, 2);
    gtk_box_append(GTK_BOX(box), a->d_audit);
    GtkWidget *scroll = gtk_scrolled_window_new();
    gtk_scrolled_window_set_child(GTK_SCROLLED_WINDOW(scroll), box);
    gtk_widget_set_vexpand(scroll, TRUE);
    return scroll;
}

static GtkWidget *desk_controls_new(desk_app *a)
{
    GtkWidget *box = gtk_box_new(GTK_ORIENTATION_VERTICAL, 4);
    GtkWidget *buttons = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 6);
    /* exactly the supported actions: the client library names no other */
    for (int k = 1; k <= BFC_ACTION_COUNT; k++) {
        const char *name = bfc_action_name(k);
        char label[32], wname[32];
        snprintf(label, sizeof label, "%c%s", name[0] - 'a' + 'A', name + 1);
        snprintf(wname, sizeof wname, "control.%s", name);
        GtkWidget *b = gtk_button_new_with_label(label);
        gtk_widget_set_name(b, wname);
        g_object_set_data(G_OBJECT(b), "desk-action", GINT_TO_POINTER(k));
        g_signal_connect(b, "clicked", G_CALLBACK(desk_on_control), a);
        gtk_box_append(GTK_BOX(buttons), b);
        a->control[k] = b;
    }
    gtk_box_append(GTK_BOX(box), buttons);
    a->confirm_box = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 6);
    gtk_widget_set_name(a->confirm_box, "confirm");
    a->confirm_text = desk_label("confirm.text", "desk-alert");
    gtk_widget_set_hexpand(a->confirm_text, TRUE);
    GtkWidget *send = gtk_button_new_with_label("Send");
    gtk_widget_set_name(send, "confirm.send");
    g_object_set_data(G_OBJECT(send), "desk-send", GINT_TO_POINTER(1));
    g_signal_connect(send, "clicked", G_CALLBACK(desk_on_confirm), a);
    GtkWidget *cancel = gtk_button_new_with_label("Cancel");
    gtk_widget_set_name(cancel, "confirm.cancel");
    g_signal_connect(cancel, "clicked", G_CALLBACK(desk_on_confirm), a);
    gtk_box_append(GTK_BOX(a->confirm_box), a->confirm_text);
    gtk_box_append(GTK_BOX(a->confirm_box), send);
    gtk_box_append(GTK_BOX(a->confirm_box), cancel);
    gtk_box_append(GTK_BOX(box), a->confirm_box);
    GtkWidget *out = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 6);
    a->outcome = desk_label("outcome", NULL);
    gtk_widget_set_hexpand(a->outcome, TRUE);
    a->ask_again = gtk_button_new_with_label("Ask again (same request id)");
    gtk_widget_set_name(a->ask_again, "outcome.ask-again");
    g_signal_connect(a->ask_again, "clicked", G_CALLBACK(desk_on_ask_again), a);
    gtk_box_append(GTK_BOX(out), a->outcome);
    gtk_box_append(GTK_BOX(out), a->ask_again);
    gtk_box_append(GTK_BOX(box), out);
    return box;
}

static const char desk_css[] = ".desk-alert { color: #c01c28; font-weight: bold; }\n"
                               ".desk-good { color: #26a269; font-weight: bold; }\n"
                               ".desk-row { padding: 2px 4px; }\n";

GtkWidget *desk_window_new(desk_app *a)
{
    GtkCssProvider *css = gtk_css_provider_new();
    gtk_css_provider_load_from_data(css, desk_css, -1);
    gtk_style_context_add_provider_for_display(gdk_display_get_default(), GTK_STYLE_PROVIDER(css),
                                               GTK_STYLE_PROVIDER_PRIORITY_APPLICATION);
    g_object_unref(css);
    a->win = gtk_window_new();
    gtk_window_set_title(GTK_WINDOW(a->win), "buzz-backfill");
    gtk_window_set_icon_name(GTK_WINDOW(a->win), "buzz-backfill-desktop");
    gtk_window_set_default_size(GTK_WINDOW(a->win), 1280, 760);
    GtkWidget *top = gtk_box_new(GTK_ORIENTATION_VERTICAL, 6);
    gtk_widget_set_margin_top(top, 8);
    gtk_widget_set_margin_bottom(top, 8);
    gtk_widget_set_margin_start(top, 8);
    gtk_widget_set_margin_end(top, 8);
    gtk_box_append(GTK_BOX(top), desk_connection_new(a));
    a->conn_status = desk_label("conn.status", "dim-label");
    a->whoami = desk_label("whoami", NULL);
    a->readiness = desk_label("readiness", "title-3");
    a->status = desk_label("status", NULL);
    desk_set_text(a->conn_status, a->conn.url);
    desk_set_text(a->whoami, "identity unknown (no answer yet)");
    desk_set_text(a->readiness, "READINESS UNKNOWN (no answer yet)");
    desk_set_text(a->status, "backfills: unknown (no answer yet)");
    gtk_box_append(GTK_BOX(top), a->conn_status);
    gtk_box_append(GTK_BOX(top), a->whoami);
    gtk_box_append(GTK_BOX(top), a->readiness);
    gtk_box_append(GTK_BOX(top), a->status);
    GtkWidget *paned = gtk_paned_new(GTK_ORIENTATION_HORIZONTAL);
    GtkWidget *scroll = gtk_scrolled_window_new();
    gtk_scrolled_window_set_child(GTK_SCROLLED_WINDOW(scroll), desk_rows_new(a));
    gtk_widget_set_size_request(scroll, 640, 300);
    gtk_paned_set_start_child(GTK_PANED(paned), scroll);
    gtk_paned_set_end_child(GTK_PANED(paned), desk_detail_new(a));
    gtk_paned_set_position(GTK_PANED(paned), 800);
    gtk_widget_set_vexpand(paned, TRUE);
    gtk_box_append(GTK_BOX(top), paned);
    gtk_box_append(GTK_BOX(top), desk_controls_new(a));
    gtk_window_set_child(GTK_WINDOW(a->win), top);
    desk_detail_update(a);
    desk_controls_update(a);
    return a->win;
}
