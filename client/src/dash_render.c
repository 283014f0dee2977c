/*
 * dash_render.c - bfc_dash_render(): the dashboard model as the lines of one screen (title,
 * readiness banner, table status, the table or the detail or the help, prompt, key line).
 * Pure; every line fits the width it is given (counted in UTF-8 characters).
 */
#include "dash_view.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Copy at most width characters of src into dst (cap bytes), padded with spaces to width
 * when pad. Returns the bytes written. */
static size_t render_cell(char *dst, size_t cap, const char *src, int width, bool pad)
{
    size_t o = 0;
    int cols = 0;
    const unsigned char *p = (const unsigned char *)src;
    while (*p != '\0' && cols < width) {
        bool control = false;
        size_t n = bfc_utf8_char(p, &control);
        if (n == 0)
            n = 1;
        if (o + n >= cap)
            break;
        memcpy(dst + o, p, n);
        o += n;
        p += n;
        cols++;
    }
    while (pad && cols < width && o + 1 < cap) {
        dst[o++] = ' ';
        cols++;
    }
    dst[o] = '\0';
    return o;
}

typedef struct render_ctx {
    bfc_dash_frame *f;
    int rows, cols;
} render_ctx;

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void
render_line(render_ctx *c, bfc_dash_attr attr, const char *fmt, ...)
{
    if (c->f->n >= BFC_DASH_MAX_LINES || (int)c->f->n >= c->rows)
        return;
    char raw[BFC_DASH_LINE * 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    render_cell(c->f->line[c->f->n], BFC_DASH_LINE, raw, c->cols, false);
    c->f->attr[c->f->n++] = attr;
}

void bfc_dash_bar(char *buf, size_t cap, double fraction, int w)
{
    if (fraction < 0)
        fraction = 0;
    if (fraction > 1)
        fraction = 1;
    int inner = w - 2, full = (int)(fraction * inner);
    size_t o = 0;
    if (o + 1 < cap)
        buf[o++] = '[';
    for (int i = 0; i < inner && o + 1 < cap; i++)
        buf[o++] = i < full ? '#' : '.';
    if (o + 1 < cap)
        buf[o++] = ']';
    buf[o] = '\0';
}

static void render_age(char *buf, size_t cap, int64_t now, int64_t at)
{
    bfc_format_duration(buf, cap, now >= at ? now - at : 0);
}

static void render_banner(render_ctx *c, const bfc_dash_model *m)
{
    if (!m->ready_known) {
        render_line(c, BFC_DASH_ALERT, "READINESS UNKNOWN (%s)",
                    m->ready_err.text[0] ? m->ready_err.text : "no answer yet");
        return;
    }
    if (m->ready_stale) { /* the last verdict is no verdict now: say what it was, and when */
        char age[24];
        render_age(age, sizeof age, m->now_us, m->ready_ok_at_us);
        render_line(c, BFC_DASH_ALERT, "READINESS UNKNOWN (%s %s ago; %s)",
                    m->ready ? "was ready" : "was not ready", age, m->ready_err.text);
        return;
    }
    if (m->ready) {
        render_line(c, BFC_DASH_GOOD, "READY");
        return;
    }
    char gates[BFC_DASH_LINE] = "";
    size_t o = 0;
    for (size_t i = 0; i < m->n_gating && o < sizeof gates; i++)
        o += (size_t)snprintf(gates + o, sizeof gates - o, "%s%s (%s)", i ? ", " : "",
                              m->gating[i].id, m->gating[i].state);
    if (m->n_gating == 0)
        render_line(c, BFC_DASH_ALERT, "NOT READY (no backfill gates: another component)");
    else
        render_line(c, BFC_DASH_ALERT, "NOT READY: gated by %zu: %s%s",
                    m->n_gating + m->more_gating, gates, m->more_gating ? ", ..." : "");
}

static void render_status(render_ctx *c, const bfc_dash_model *m, size_t shown)
{
    if (!m->list_known) {
        render_line(c, BFC_DASH_ALERT, "backfills: unknown (%s)",
                    m->list_err.text[0] ? m->list_err.text : "no answer yet");
    } else if (m->list_stale) {
        char age[24];
        render_age(age, sizeof age, m->now_us, m->list_ok_at_us);
        render_line(c, BFC_DASH_ALERT, "STALE %s: last data shown; refresh failed: %s", age,
                    m->list_err.text);
    } else {
        char count[32];
        bfc_format_count(count, sizeof count, (int64_t)m->n_rows);
        if (m->filter[0])
            render_line(c, BFC_DASH_PLAIN, "%zu of %s%s backfill%s match filter: %s", shown,
                        m->list_truncated ? "the first " : "", count, m->n_rows == 1 ? "" : "s",
                        m->filter);
        else
            render_line(c, BFC_DASH_PLAIN, "%s backfill%s%s", count, m->n_rows == 1 ? "" : "s",
                        m->list_truncated ? " loaded: the first only, more exist" : "");
    }
}

#define COL_STATE       10
#define COL_PROG        17
#define COL_PROG_NARROW 7
#define COL_RATE        8
#define COL_ETA         8

/* The table's columns at one width: narrow terminals drop ETA, then RATE, then shorten
 * PROGRESS, before the ID column gets too narrow to tell rows apart. */
typedef struct render_layout {
    int prog; /* COL_PROG or COL_PROG_NARROW */
    bool rate, eta;
} render_layout;

static const render_layout render_layouts[] = {
    {COL_PROG, true, true},
    {COL_PROG, true, false},
    {COL_PROG, false, false},
    {COL_PROG_NARROW, false, false},
};

static int render_id_width(const render_layout *l, int cols)
{
    int fixed =
        2 + 1 + COL_STATE + 1 + l->prog + (l->rate ? 1 + COL_RATE : 0) + (l->eta ? 1 + COL_ETA : 0);
    return cols - fixed - 1;
}

void bfc_dash_row_progress(char *buf, size_t cap, const bfc_dash_row *r, bool narrow)
{
    if (r->has_fraction && narrow) {
        if (r->state == BUZZ__BACKFILL__V1__STATE__COMPLETED)
            snprintf(buf, cap, "done");
        else
            snprintf(buf, cap, "~%.0f%%", r->fraction * 100.0);
    } else if (r->has_fraction) {
        char bar[16];
        bfc_dash_bar(bar, sizeof bar, r->fraction, 11);
        if (r->state == BUZZ__BACKFILL__V1__STATE__COMPLETED)
            snprintf(buf, cap, "%s done", bar);
        else /* against the planner's estimate: marked ~ */
            snprintf(buf, cap, "%s~%.0f%%", bar, r->fraction * 100.0);
    } else {
        /* no bar: the rows passed, or unknown */
        const char *comma = strstr(r->v.progress, ", ");
        char rows[40];
        size_t len = comma ? (size_t)(comma - r->v.progress) : strlen(r->v.progress);
        snprintf(rows, sizeof rows, "%.*s", (int)(len < 39 ? len : 39), r->v.progress);
        if (narrow && strcmp(rows, "unknown") != 0) { /* "12,345 rows" -> "12k" */
            char digits[32];
            size_t o = 0;
            for (const char *q = rows; *q && *q != ' ' && o + 1 < sizeof digits; q++)
                if (*q != ',')
                    digits[o++] = *q;
            digits[o] = '\0';
            bfc_format_short_count(buf, cap, strtoll(digits, NULL, 10));
        } else {
            snprintf(buf, cap, "%s", rows);
        }
    }
}

/* How IDs fit the ID column: whole, without the prefix every shown ID shares (cut after a
 * '.' or '_', named in the header), or, when even that is too wide, with the middle elided
 * ("dash.ma..07342_v1": the tail, which usually tells versions and numbers apart, keeps
 * two thirds). */
typedef struct render_ids {
    size_t prefix; /* bytes dropped from each ID (0: whole IDs) */
    char prefix_text[BFC_CELL];
    int width;
    render_layout layout;
} render_ids;

static void render_plan_ids(render_ids *p, const bfc_dash_model *m, const size_t *idx, size_t n,
                            int cols)
{
    size_t longest = 2, common = 0;
    for (size_t k = 0; k < n; k++) {
        const char *id = m->rows[idx[k]].v.id;
        size_t len = strlen(id);
        if (len > longest)
            longest = len;
        if (k == 0) {
            common = len;
        } else {
            const char *first = m->rows[idx[0]].v.id;
            size_t j = 0;
            while (j < common && first[j] == id[j])
                j++;
            common = j;
        }
    }
    size_t cut = 0; /* the shared prefix up to its last separator, when 2+ rows share it */
    if (n > 1) {
        const char *first = m->rows[idx[0]].v.id;
        for (size_t j = 0; j < common; j++)
            if (first[j] == '.' || first[j] == '_')
                cut = j + 1;
    }
    size_t nl = sizeof render_layouts / sizeof render_layouts[0];
    memset(p, 0, sizeof *p);
    for (size_t pass = 0; pass < 2; pass++) {
        size_t drop = pass == 0 ? 0 : cut;
        if (pass == 1 && cut == 0)
            break;
        for (size_t i = 0; i < nl; i++) {
            int w = render_id_width(&render_layouts[i], cols);
            if (w >= (int)(longest - drop) && w >= 2) {
                p->layout = render_layouts[i];
                p->width = w;
                p->prefix = drop;
                if (drop > 0)
                    snprintf(p->prefix_text, sizeof p->prefix_text, "%.*s", (int)drop,
                             m->rows[idx[0]].v.id);
                return;
            }
        }
    }
    /* nothing fits: the narrowest layout, without the shared prefix, the middle elided */
    p->layout = render_layouts[nl - 1];
    p->width = render_id_width(&p->layout, cols);
    if (p->width < 8)
        p->width = 8;
    p->prefix = cut;
    if (cut > 0)
        snprintf(p->prefix_text, sizeof p->prefix_text, "%.*s", (int)cut, m->rows[idx[0]].v.id);
}

/* The ID cell: the ID without the plan's prefix, its middle elided with ".." when too long. */
static void render_id(char *buf, size_t cap, const render_ids *p, const char *id)
{
    const char *s = strlen(id) >= p->prefix ? id + p->prefix : id;
    size_t len = strlen(s); /* stable IDs are ASCII: bytes are columns */
    char cell[BFC_CELL + 4];
    if ((int)len <= p->width || p->width < 5) {
        snprintf(cell, sizeof cell, "%s", s);
    } else {
        int keep = p->width - 2, tail = keep * 2 / 3, head = keep - tail;
        snprintf(cell, sizeof cell, "%.*s..%s", head, s, s + len - (size_t)tail);
    }
    render_cell(buf, cap, cell, p->width, true);
}

/* The line under a row: what most needs saying about it (see dash_view.h). */
bfc_dash_attr bfc_dash_row_note(char *buf, size_t cap, const bfc_dash_row *r)
{
    const bfc_view *v = &r->v;
    if (v->waiting_worker) {
        snprintf(buf, cap, "%s | retry %s | error %s", v->waiting, v->retry, v->error);
        return BFC_DASH_ALERT;
    }
    if (v->has_old_writers) {
        snprintf(buf, cap, "old writer: %s", v->old_writers);
        return BFC_DASH_ALERT;
    }
    if (strcmp(v->slow, "-") != 0) {
        snprintf(buf, cap, "claim %s | slow: %s", v->claim, v->slow);
        return BFC_DASH_ALERT;
    }
    if (strcmp(v->validating, "-") != 0)
        snprintf(buf, cap, "claim %s | validating: %s", v->claim, v->validating);
    else if (strcmp(v->throttle, "-") != 0)
        snprintf(buf, cap, "claim %s | throttled %s", v->claim, v->throttle);
    else
        snprintf(buf, cap, "claim %s | retry %s | error %s", v->claim, v->retry, v->error);
    return BFC_DASH_PLAIN;
}

static void render_table(render_ctx *c, const bfc_dash_model *m, int room)
{
    size_t *idx = NULL;
    size_t n = bfc_dash_visible_alloc(m, &idx);
    render_ids plan;
    render_plan_ids(&plan, m, idx, n, c->cols);
    const render_layout *l = &plan.layout;
    bool narrow = l->prog == COL_PROG_NARROW;
    char id_h[BFC_DASH_LINE], id_title[BFC_CELL + 16], tail_h[64] = "";
    if (plan.prefix > 0)
        snprintf(id_title, sizeof id_title, "ID (%s...)", plan.prefix_text);
    else
        snprintf(id_title, sizeof id_title, "ID");
    render_cell(id_h, sizeof id_h, id_title, plan.width, true);
    snprintf(tail_h, sizeof tail_h, "%s%-*s%s%-*s", l->rate ? " " : "", l->rate ? COL_RATE : 0,
             l->rate ? "RATE" : "", l->eta ? " " : "", l->eta ? COL_ETA : 0, l->eta ? "ETA" : "");
    render_line(c, BFC_DASH_BOLD, "  %s %-*s %-*s%s", id_h, COL_STATE, "STATE", l->prog,
                narrow ? "DONE" : "PROGRESS", tail_h);
    room--;
    size_t sel = n == 0 ? 0 : m->selected < n ? m->selected : n - 1;
    size_t per_page = room > 1 ? (size_t)room / 2 : 1;
    size_t first = sel >= per_page ? sel - per_page + 1 : 0;
    for (size_t k = first; k < n && room >= 2; k++, room -= 2) {
        const bfc_dash_row *r = &m->rows[idx[k]];
        char id[BFC_DASH_LINE], prog[48], prog_c[64], state[32], rate[32], eta[32], tail[80];
        render_id(id, sizeof id, &plan, r->v.id);
        bfc_dash_row_progress(prog, sizeof prog, r, narrow);
        render_cell(prog_c, sizeof prog_c, prog, l->prog, true);
        render_cell(state, sizeof state, r->v.state, COL_STATE, true);
        render_cell(rate, sizeof rate, r->rate_text, COL_RATE, true);
        render_cell(eta, sizeof eta, r->eta_text, COL_ETA, true);
        snprintf(tail, sizeof tail, "%s%s%s%s", l->rate ? " " : "", l->rate ? rate : "",
                 l->eta ? " " : "", l->eta ? eta : "");
        bool alert = r->state == BUZZ__BACKFILL__V1__STATE__BLOCKED ||
                     r->state == BUZZ__BACKFILL__V1__STATE__FAILED;
        render_line(c,
                    k == sel ? BFC_DASH_REVERSE
                    : alert  ? BFC_DASH_ALERT
                             : BFC_DASH_PLAIN,
                    "%s %s %s %s%s", k == sel ? ">" : " ", id, state, prog_c, tail);
        char note[BFC_DASH_LINE];
        bfc_dash_attr note_attr = bfc_dash_row_note(note, sizeof note, r);
        render_line(c, note_attr, "    %s", note);
    }
    if (n == 0 && m->list_known && room > 0)
        render_line(c, BFC_DASH_PLAIN, "  (no backfill%s)", m->filter[0] ? " matches" : "");
    free(idx);
}

static void render_detail(render_ctx *c, const bfc_dash_model *m)
{
    const bfc_dash_detail *d = &m->detail;
    const char *id = bfc_dash_selected_id(m);
    if (!d->has_data) {
        render_line(c, d->err.text[0] ? BFC_DASH_ALERT : BFC_DASH_PLAIN, "detail %s: %s",
                    id ? id : "-", d->err.text[0] ? d->err.text : "loading");
        return;
    }
    if (d->stale) {
        char age[24];
        render_age(age, sizeof age, m->now_us, d->ok_at_us);
        render_line(c, BFC_DASH_ALERT, "detail %s  STALE %s: %s", d->id, age, d->err.text);
    } else {
        render_line(c, BFC_DASH_BOLD, "detail %s", d->id);
    }
    const bfc_view *v = &d->v;
    render_line(c, BFC_DASH_PLAIN, "  state       %s%s", v->state, v->gating ? " (gates)" : "");
    render_line(c, BFC_DASH_PLAIN, "  progress    %s", v->progress);
    render_line(c, BFC_DASH_PLAIN, "  bound       %s", v->bound);
    render_line(c, BFC_DASH_PLAIN, "  checkpoint  %s", v->checkpoint);
    render_line(c, BFC_DASH_PLAIN, "  generation  %s   claim %s", v->generation, v->claim);
    render_line(c, BFC_DASH_PLAIN, "  retry       %s", v->retry);
    render_line(c, BFC_DASH_PLAIN, "  error       %s", v->error);
    render_line(c, BFC_DASH_PLAIN, "  batch       %s   throttled %s", v->batch, v->throttle);
    render_line(c, strcmp(v->slow, "-") != 0 ? BFC_DASH_ALERT : BFC_DASH_PLAIN, "  slow        %s",
                v->slow);
    if (strcmp(v->old_writers, "-") != 0)
        render_line(c, v->has_old_writers ? BFC_DASH_ALERT : BFC_DASH_PLAIN, "  old writer  %s",
                    v->old_writers);
    render_line(c, BFC_DASH_PLAIN, "  validating  %s", v->validating);
    render_line(c, BFC_DASH_PLAIN, "  validation  %s at %s", v->validation, d->validation_time);
    if (d->validation_detail[0])
        render_line(c, BFC_DASH_PLAIN, "              %s", d->validation_detail);
    if (!d->audit_ok) {
        render_line(c, BFC_DASH_ALERT, "  audit: unknown (read failed)");
        return;
    }
    render_line(c, BFC_DASH_BOLD, "  audit (newest first)");
    for (size_t i = 0; i < d->n_audit; i++)
        render_line(c, BFC_DASH_PLAIN, "  %s", d->audit[i]);
    if (d->n_audit == 0)
        render_line(c, BFC_DASH_PLAIN, "  (none)");
}

static void render_help(render_ctx *c)
{
    static const char *const lines[] = {
        "keys",
        "  Up/Down j/k  select            Enter  detail (Esc back)",
        "  /            filter by id or state (Enter ends)",
        "  s            sort: id, state, progress",
        "  S start  p pause  r resume  R retry  v validate",
        "               each asks y/n before anything is sent",
        "  q            quit              ?      this help (any key closes)",
        "",
        "~ marks an estimate (the planner's row count); rates are over the last",
        "60 s of running time; STALE: the last refresh failed, the data is old.",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        render_line(c, i == 0 ? BFC_DASH_BOLD : BFC_DASH_PLAIN, "%s", lines[i]);
}

static const char *const render_sort_names[] = {"id", "state", "progress"};

void bfc_dash_render(const bfc_dash_model *m, int rows, int cols, bfc_dash_frame *out)
{
    memset(out, 0, sizeof *out);
    if (rows < 1 || cols < 1)
        return;
    if (cols > BFC_DASH_LINE / 4)
        cols = BFC_DASH_LINE / 4;
    render_ctx c = {.f = out, .rows = rows, .cols = cols};
    render_line(&c, BFC_DASH_REVERSE, "buzzctl dash  %s  sort:%s  ?:help q:quit", m->url,
                render_sort_names[m->sort % BFC_DASH_SORT_COUNT]);
    render_banner(&c, m);
    size_t shown = 0;
    if (m->filter[0] && m->list_known && !m->list_stale) {
        size_t *idx = NULL;
        shown = bfc_dash_visible_alloc(m, &idx);
        free(idx);
    }
    render_status(&c, m, shown);
    int footer = 2;
    int room = rows - (int)out->n - footer;
    if (m->help)
        render_help(&c);
    else if (m->show_detail)
        render_detail(&c, m);
    else if (room > 0)
        render_table(&c, m, room);
    /* the footer sits on the last two lines */
    while ((int)out->n < rows - footer && out->n < BFC_DASH_MAX_LINES)
        render_line(&c, BFC_DASH_PLAIN, "%s", "");
    if ((int)out->n > rows - footer)
        out->n = (size_t)(rows - footer > 0 ? rows - footer : 0);
    if (m->confirm_action != 0)
        render_line(&c, BFC_DASH_ALERT, "%s %s? y/n", bfc_action_name(m->confirm_action),
                    m->confirm_id);
    else if (m->filter_editing)
        render_line(&c, BFC_DASH_BOLD, "filter: %s_", m->filter);
    else
        render_line(&c, BFC_DASH_PLAIN, "%s", m->message);
    render_line(&c, BFC_DASH_PLAIN, "%s",
                "Enter detail S start p pause r resume R retry v validate / filter s sort");
}
