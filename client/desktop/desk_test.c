/*
 * desk_test.c - the test hook: with BUZZ_DESKTOP_TEST=1 the application reads commands from
 * stdin, one a line, and answers on stdout, each answer ending with a line "END":
 *
 *   dump             every named widget that is visible: "name<TAB>kind<TAB>text[<TAB>flags]"
 *                    (label text, button label and "sensitive"/"insensitive", progress bar
 *                    text and fraction, entry text); what the window shows, read from it
 *   click NAME       activate the button named NAME (as a click): "ok" or "error: ..."
 *   select ID        select the row of backfill ID in the list: "ok" or "error: ..."
 *   shot PATH        the window's content as a PNG at PATH: "ok" or "error: ..."
 *   set NAME TEXT    put TEXT into the entry named NAME
 *
 * Nothing here changes what the window shows or sends; it only reads widgets and does what a
 * person would do with them (a click, a selection, typing).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gio/gunixinputstream.h>

#include "desk_app.h"

static void desk_test_dump_widget(GtkWidget *w)
{
    for (GtkWidget *c = gtk_widget_get_first_child(w); c != NULL;
         c = gtk_widget_get_next_sibling(c)) {
        if (!gtk_widget_get_visible(c))
            continue;
        const char *name = gtk_widget_get_name(c);
        bool named = name != NULL && name[0] >= 'a' && name[0] <= 'z';
        if (named && GTK_IS_LABEL(c)) {
            printf("%s\tlabel\t%s\n", name, gtk_label_get_text(GTK_LABEL(c)));
        } else if (named && GTK_IS_BUTTON(c)) {
            const char *label = gtk_button_get_label(GTK_BUTTON(c));
            printf("%s\tbutton\t%s\t%s\n", name, label ? label : "",
                   gtk_widget_is_sensitive(c) ? "sensitive" : "insensitive");
            continue;
        } else if (named && GTK_IS_PROGRESS_BAR(c)) {
            const char *t = gtk_progress_bar_get_text(GTK_PROGRESS_BAR(c));
            printf("%s\tprogress\t%s\t%.3f\n", name, t ? t : "",
                   gtk_progress_bar_get_fraction(GTK_PROGRESS_BAR(c)));
        } else if (named && GTK_IS_ENTRY(c)) {
            printf("%s\tentry\t%s\n", name, gtk_editable_get_text(GTK_EDITABLE(c)));
            continue;
        } else if (named && GTK_IS_LIST_BOX_ROW(c)) {
            printf("%s\trow\t%s\n", name,
                   gtk_list_box_row_is_selected(GTK_LIST_BOX_ROW(c)) ? "selected" : "");
        }
        desk_test_dump_widget(c);
    }
}

static GtkWidget *desk_test_find(GtkWidget *w, const char *name)
{
    for (GtkWidget *c = gtk_widget_get_first_child(w); c != NULL;
         c = gtk_widget_get_next_sibling(c)) {
        if (strcmp(gtk_widget_get_name(c), name) == 0)
            return c;
        GtkWidget *f = desk_test_find(c, name);
        if (f != NULL)
            return f;
    }
    return NULL;
}

static const char *desk_test_shot(desk_app *a, const char *path)
{
    GtkWidget *child = gtk_window_get_child(GTK_WINDOW(a->win));
    int w = gtk_widget_get_width(child), h = gtk_widget_get_height(child);
    if (w <= 0 || h <= 0)
        return "the window is not drawn yet";
    GdkPaintable *p = gtk_widget_paintable_new(child);
    GtkSnapshot *s = gtk_snapshot_new();
    gdk_paintable_snapshot(p, s, w, h);
    GskRenderNode *node = gtk_snapshot_free_to_node(s);
    const char *err = NULL;
    if (node == NULL) {
        err = "nothing drawn";
    } else {
        GskRenderer *r = gtk_native_get_renderer(GTK_NATIVE(a->win));
        graphene_rect_t rect = GRAPHENE_RECT_INIT(0, 0, (float)w, (float)h);
        GdkTexture *t = gsk_renderer_render_texture(r, node, &rect);
        if (t == NULL || !gdk_texture_save_to_png(t, path))
            err = "could not write the PNG";
        if (t != NULL)
            g_object_unref(t);
        gsk_render_node_unref(node);
    }
    g_object_unref(p);
    return err;
}

/* A screenshot waits for the next painted frame: only then is the layout of the latest
 * changes done (a widget still to be allocated draws nothing). */
typedef struct desk_test_pending_shot {
    desk_app *a;
    char *path;
    gulong handler;
    GdkFrameClock *clock;
    int tries;
} desk_test_pending_shot;

static void desk_test_shot_done(desk_test_pending_shot *ps, const char *err)
{
    printf(err ? "error: %s\n" : "ok\n", err);
    printf("END\n");
    fflush(stdout);
    g_free(ps->path);
    g_free(ps);
}

static gboolean desk_test_shot_idle(gpointer data)
{
    desk_test_pending_shot *ps = data;
    desk_test_shot_done(ps, desk_test_shot(ps->a, ps->path));
    return G_SOURCE_REMOVE;
}

/* Right after a frame was painted (nothing can change the widgets in between); a frame
 * whose layout still waits is followed by the next one, a few at most. */
static void desk_test_after_paint(GdkFrameClock *clock, gpointer data)
{
    desk_test_pending_shot *ps = data;
    const char *err = desk_test_shot(ps->a, ps->path);
    if (err != NULL && ++ps->tries < 20) {
        gtk_widget_queue_draw(ps->a->win);
        return;
    }
    g_signal_handler_disconnect(clock, ps->handler);
    desk_test_shot_done(ps, err);
}

static void desk_test_shot_later(desk_app *a, const char *path)
{
    desk_test_pending_shot *ps = g_new0(desk_test_pending_shot, 1);
    ps->a = a;
    ps->path = g_strdup(path);
    ps->clock = gtk_widget_get_frame_clock(a->win);
    if (ps->clock == NULL) {
        g_idle_add(desk_test_shot_idle, ps);
        return;
    }
    ps->handler = g_signal_connect(ps->clock, "after-paint", G_CALLBACK(desk_test_after_paint), ps);
    gtk_widget_queue_draw(a->win);
}

static void desk_test_command(desk_app *a, char *line)
{
    line[strcspn(line, "\r\n")] = '\0';
    char *arg = strchr(line, ' ');
    if (arg != NULL)
        *arg++ = '\0';
    GtkWidget *root = a->win;
    if (strcmp(line, "dump") == 0) {
        desk_test_dump_widget(root);
    } else if (strcmp(line, "click") == 0 && arg != NULL) {
        GtkWidget *b = desk_test_find(root, arg);
        if (b == NULL || !GTK_IS_BUTTON(b))
            printf("error: no button %s\n", arg);
        else if (!gtk_widget_is_sensitive(b) || !gtk_widget_is_visible(b))
            printf("error: %s is not clickable now\n", arg);
        else
            g_signal_emit_by_name(b, "clicked"), printf("ok\n");
    } else if (strcmp(line, "select") == 0 && arg != NULL) {
        char name[BFC_CELL + 8];
        snprintf(name, sizeof name, "row.%s", arg);
        GtkWidget *r = desk_test_find(root, name);
        if (r == NULL || !GTK_IS_LIST_BOX_ROW(r))
            printf("error: no row %s\n", arg);
        else
            gtk_list_box_select_row(GTK_LIST_BOX(a->list), GTK_LIST_BOX_ROW(r)), printf("ok\n");
    } else if (strcmp(line, "shot") == 0 && arg != NULL) {
        desk_test_shot_later(a, arg); /* answers, with its END, after the next frame */
        return;
    } else if (strcmp(line, "set") == 0 && arg != NULL) {
        char *text = strchr(arg, ' ');
        if (text != NULL)
            *text++ = '\0';
        GtkWidget *e = desk_test_find(root, arg);
        if (e == NULL || !GTK_IS_EDITABLE(e))
            printf("error: no entry %s\n", arg);
        else
            gtk_editable_set_text(GTK_EDITABLE(e), text ? text : ""), printf("ok\n");
    } else {
        printf("error: unknown command\n");
    }
    printf("END\n");
    fflush(stdout);
}

static void desk_test_read(GObject *src, GAsyncResult *res, gpointer data)
{
    desk_app *a = data;
    gsize len = 0;
    char *line = g_data_input_stream_read_line_finish(G_DATA_INPUT_STREAM(src), res, &len, NULL);
    if (line == NULL) { /* the test went away: so do we */
        gtk_window_close(GTK_WINDOW(a->win));
        return;
    }
    desk_test_command(a, line);
    g_free(line);
    g_data_input_stream_read_line_async(G_DATA_INPUT_STREAM(src), G_PRIORITY_DEFAULT, NULL,
                                        desk_test_read, a);
}

void desk_test_start(desk_app *a)
{
    const char *on = getenv("BUZZ_DESKTOP_TEST");
    if (on == NULL || strcmp(on, "1") != 0)
        return;
    GInputStream *in = g_unix_input_stream_new(0, FALSE);
    GDataInputStream *d = g_data_input_stream_new(in);
    g_object_unref(in);
    g_data_input_stream_read_line_async(d, G_PRIORITY_DEFAULT, NULL, desk_test_read, a);
    printf("READY\n");
    fflush(stdout);
}
