/*
 * desk_rows.c - the list of backfills: one row per backfill of the last List read, in the
 * dashboard's order (by id), each with its state, progress (a bar only when the projection
 * can compute one), rate, ETA, throttle, whether it gates readiness, and the dashboard's note
 * line. Rows are updated in place while the set of IDs stays the same, and rebuilt otherwise;
 * the selection follows the backfill's ID, not its position.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "desk_app.h"

static void desk_rows_on_selected(GtkListBox *box, GtkListBoxRow *row, gpointer data)
{
    (void)box;
    desk_app *a = data;
    if (a->updating)
        return;
    const char *id = row ? g_object_get_data(G_OBJECT(row), "desk-id") : NULL;
    desk_window_select(a, id);
}

static GtkWidget *desk_cell(const char *row_name, const char *field, int width, bool expand)
{
    char name[BFC_CELL + 32];
    snprintf(name, sizeof name, "%s.%s", row_name, field);
    GtkWidget *l = desk_label(name, NULL);
    gtk_label_set_wrap(GTK_LABEL(l), FALSE);
    gtk_label_set_ellipsize(GTK_LABEL(l), PANGO_ELLIPSIZE_END);
    gtk_widget_set_size_request(l, width, -1);
    gtk_widget_set_hexpand(l, expand);
    return l;
}

static GtkWidget *desk_rows_header(void)
{
    static const struct {
        const char *title;
        int width;
        bool expand;
    } cols[] = {{"ID", 180, true},       {"STATE", 80, false}, {"PROGRESS", 150, false},
                {"RATE", 70, false},     {"ETA", 70, false},   {"THROTTLE", 90, false},
                {"READINESS", 90, false}};
    GtkWidget *h = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 8);
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) {
        GtkWidget *l = gtk_label_new(cols[i].title);
        gtk_label_set_xalign(GTK_LABEL(l), 0.0f);
        gtk_widget_add_css_class(l, "heading");
        gtk_widget_set_size_request(l, cols[i].width, -1);
        gtk_widget_set_hexpand(l, cols[i].expand);
        gtk_box_append(GTK_BOX(h), l);
    }
    GtkWidget *row = gtk_list_box_row_new();
    gtk_list_box_row_set_child(GTK_LIST_BOX_ROW(row), h);
    gtk_list_box_row_set_selectable(GTK_LIST_BOX_ROW(row), FALSE);
    gtk_list_box_row_set_activatable(GTK_LIST_BOX_ROW(row), FALSE);
    return row;
}

GtkWidget *desk_rows_new(desk_app *a)
{
    a->list = gtk_list_box_new();
    gtk_widget_set_name(a->list, "backfills");
    gtk_list_box_set_selection_mode(GTK_LIST_BOX(a->list), GTK_SELECTION_SINGLE);
    gtk_list_box_append(GTK_LIST_BOX(a->list), desk_rows_header());
    g_signal_connect(a->list, "row-selected", G_CALLBACK(desk_rows_on_selected), a);
    return a->list;
}

static void desk_row_build(desk_row *r, const char *id)
{
    snprintf(r->id, sizeof r->id, "%s", id);
    char name[BFC_CELL + 8];
    snprintf(name, sizeof name, "row.%s", id);
    GtkWidget *line = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 8);
    r->id_l = desk_cell(name, "id", 180, true);
    r->state = desk_cell(name, "state", 80, false);
    /* progress: a bar when computable, the rows passed (or "unknown") otherwise */
    GtkWidget *prog = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 0);
    gtk_widget_set_size_request(prog, 150, -1);
    char bar_name[BFC_CELL + 16];
    snprintf(bar_name, sizeof bar_name, "%s.bar", name);
    r->bar = gtk_progress_bar_new();
    gtk_widget_set_name(r->bar, bar_name);
    gtk_progress_bar_set_show_text(GTK_PROGRESS_BAR(r->bar), TRUE);
    gtk_widget_set_hexpand(r->bar, TRUE);
    gtk_widget_set_valign(r->bar, GTK_ALIGN_CENTER);
    r->prog = desk_cell(name, "progress", 150, false);
    gtk_box_append(GTK_BOX(prog), r->bar);
    gtk_box_append(GTK_BOX(prog), r->prog);
    r->rate = desk_cell(name, "rate", 70, false);
    r->eta = desk_cell(name, "eta", 70, false);
    r->throttle = desk_cell(name, "throttle", 90, false);
    r->gates = desk_cell(name, "gates", 90, false);
    gtk_box_append(GTK_BOX(line), r->id_l);
    gtk_box_append(GTK_BOX(line), r->state);
    gtk_box_append(GTK_BOX(line), prog);
    gtk_box_append(GTK_BOX(line), r->rate);
    gtk_box_append(GTK_BOX(line), r->eta);
    gtk_box_append(GTK_BOX(line), r->throttle);
    gtk_box_append(GTK_BOX(line), r->gates);
    r->note = desk_cell(name, "note", 400, true);
    gtk_widget_add_css_class(r->note, "dim-label");
    gtk_widget_set_margin_start(r->note, 24);
    GtkWidget *box = gtk_box_new(GTK_ORIENTATION_VERTICAL, 2);
    gtk_widget_add_css_class(box, "desk-row");
    gtk_box_append(GTK_BOX(box), line);
    gtk_box_append(GTK_BOX(box), r->note);
    r->row = gtk_list_box_row_new();
    gtk_widget_set_name(r->row, name);
    gtk_list_box_row_set_child(GTK_LIST_BOX_ROW(r->row), box);
    g_object_set_data_full(G_OBJECT(r->row), "desk-id", g_strdup(id), g_free);
}

static void desk_row_fill(desk_row *r, const bfc_dash_row *d)
{
    desk_set_text(r->id_l, d->v.id);
    desk_set_text(r->state, d->v.state);
    bool alert = d->state == BUZZ__BACKFILL__V1__STATE__BLOCKED ||
                 d->state == BUZZ__BACKFILL__V1__STATE__FAILED;
    if (alert)
        gtk_widget_add_css_class(r->state, "desk-alert");
    else
        gtk_widget_remove_css_class(r->state, "desk-alert");
    char prog[64];
    bfc_dash_row_progress(prog, sizeof prog, d, true); /* "~50%", "done", "12k", "unknown" */
    gtk_widget_set_visible(r->bar, d->has_fraction);
    gtk_widget_set_visible(r->prog, !d->has_fraction);
    if (d->has_fraction) {
        gtk_progress_bar_set_fraction(GTK_PROGRESS_BAR(r->bar), d->fraction);
        gtk_progress_bar_set_text(GTK_PROGRESS_BAR(r->bar), prog);
        gtk_accessible_update_property(GTK_ACCESSIBLE(r->bar), GTK_ACCESSIBLE_PROPERTY_LABEL, prog,
                                       -1);
        desk_set_text(r->prog, "");
    } else {
        bfc_dash_row_progress(prog, sizeof prog, d, false); /* "12,000 rows", "unknown" */
        desk_set_text(r->prog, prog);
    }
    desk_set_text(r->rate, d->rate_text);
    desk_set_text(r->eta, d->eta_text);
    desk_set_text(r->throttle, d->v.throttle);
    gtk_widget_set_tooltip_text(r->throttle, d->v.throttle);
    desk_set_text(r->gates, d->v.gating ? "gates" : "-");
    char note[BFC_DASH_LINE];
    bfc_dash_attr attr = bfc_dash_row_note(note, sizeof note, d);
    desk_set_text(r->note, note);
    if (attr == BFC_DASH_ALERT)
        gtk_widget_add_css_class(r->note, "desk-alert");
    else
        gtk_widget_remove_css_class(r->note, "desk-alert");
    char label[BFC_DASH_LINE + BFC_CELL + 64];
    snprintf(label, sizeof label, "%s %s %s", d->v.id, d->v.state, prog);
    gtk_accessible_update_property(GTK_ACCESSIBLE(r->row), GTK_ACCESSIBLE_PROPERTY_LABEL, label,
                                   -1);
}

void desk_rows_free(desk_app *a)
{
    for (size_t i = 0; i < a->n_rows; i++)
        gtk_list_box_remove(GTK_LIST_BOX(a->list), a->rows[i].row);
    free(a->rows);
    a->rows = NULL;
    a->n_rows = 0;
}

void desk_rows_update(desk_app *a)
{
    const bfc_dash_model *m = &a->snap->m;
    size_t n = m->n_rows < DESK_MAX_SHOWN ? m->n_rows : DESK_MAX_SHOWN;
    /* unknown (never answered) keeps no rows; stale keeps the last ones (the model does) */
    bool same = n == a->n_rows;
    for (size_t i = 0; same && i < n; i++)
        same = strcmp(a->rows[i].id, m->rows[i].v.id) == 0;
    a->updating = true;
    if (!same) {
        desk_rows_free(a);
        a->rows = n ? calloc(n, sizeof *a->rows) : NULL;
        if (a->rows == NULL)
            n = 0;
        for (size_t i = 0; i < n; i++) {
            desk_row_build(&a->rows[i], m->rows[i].v.id);
            gtk_list_box_append(GTK_LIST_BOX(a->list), a->rows[i].row);
        }
        a->n_rows = n;
    }
    GtkListBoxRow *sel = NULL;
    for (size_t i = 0; i < n; i++) {
        desk_row_fill(&a->rows[i], &m->rows[i]);
        if (a->selected[0] && strcmp(a->rows[i].id, a->selected) == 0)
            sel = GTK_LIST_BOX_ROW(a->rows[i].row);
    }
    if (!same) {
        if (sel != NULL)
            gtk_list_box_select_row(GTK_LIST_BOX(a->list), sel);
        else
            gtk_list_box_unselect_all(GTK_LIST_BOX(a->list));
    }
    a->updating = false;
}
