/*
 * dash_view.c - the model of `buzzctl dash`: RPC results (and failures) in, text lines out;
 * see dash_view.h. Pure: no I/O, no clock, no curses.
 */
#include "dash_view.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DASH_ESC 27

/* ---- typed errors ------------------------------------------------------------------------ */

static const char *const dash_kind_names[] = {
    [BFC_FETCH_OK] = "ok",
    [BFC_FETCH_UNAVAILABLE] = "unavailable",
    [BFC_FETCH_DEADLINE] = "deadline",
    [BFC_FETCH_UNAUTHENTICATED] = "unauthenticated",
    [BFC_FETCH_PERMISSION_DENIED] = "permission denied",
    [BFC_FETCH_MALFORMED] = "malformed answer",
    [BFC_FETCH_SERVER_ERROR] = "error",
};

const char *bfc_fetch_kind_name(bfc_fetch_kind kind)
{
    if ((unsigned)kind >= sizeof dash_kind_names / sizeof dash_kind_names[0])
        return "error";
    return dash_kind_names[kind];
}

void bfc_fetch_error_from(bfc_fetch_error *out, bf_err err, const bfc_status *st)
{
    memset(out, 0, sizeof *out);
    const char *why = "";
    if (st != NULL && st->answered) {
        switch (st->code) {
        case BUZZ__BACKFILL__V1__STATUS_CODE__UNAUTHENTICATED:
            out->kind = BFC_FETCH_UNAUTHENTICATED;
            break;
        case BUZZ__BACKFILL__V1__STATUS_CODE__PERMISSION_DENIED:
            out->kind = BFC_FETCH_PERMISSION_DENIED;
            break;
        case BUZZ__BACKFILL__V1__STATUS_CODE__DEADLINE_EXCEEDED:
            out->kind = BFC_FETCH_DEADLINE;
            break;
        case BUZZ__BACKFILL__V1__STATUS_CODE__UNAVAILABLE:
            out->kind = BFC_FETCH_UNAVAILABLE;
            break;
        default:
            out->kind = BFC_FETCH_SERVER_ERROR;
            break;
        }
        why = strcmp(st->message, bfc_code_name(st->code)) == 0 ? "" : st->message;
    } else {
        switch (err) {
        case BF_ERR_UNAVAILABLE:
            out->kind = BFC_FETCH_UNAVAILABLE;
            break;
        case BF_ERR_TIMEOUT:
            out->kind = BFC_FETCH_DEADLINE;
            break;
        case BF_ERR_IO:
            out->kind = BFC_FETCH_MALFORMED;
            break;
        default:
            out->kind = BFC_FETCH_SERVER_ERROR;
            why = bf_err_str(err);
            break;
        }
        if (st != NULL && st->transport_detail[0])
            why = st->transport_detail;
    }
    char raw[BFC_DASH_ERR];
    snprintf(raw, sizeof raw, "%s%s%.80s", bfc_fetch_kind_name(out->kind), why[0] ? ": " : "", why);
    bfc_printable(out->text, sizeof out->text, raw);
}

/* ---- rates ------------------------------------------------------------------------------- */

bool bfc_rate_window(double *out, const bfc_rate_sample *s, size_t n, int64_t window_us)
{
    if (n < 2)
        return false;
    int64_t newest = s[n - 1].at_us;
    int64_t dt = 0, rows = 0;
    for (size_t i = 1; i < n; i++) {
        const bfc_rate_sample *a = &s[i - 1], *b = &s[i];
        if (a->at_us < newest - window_us || !a->running || !b->running)
            continue; /* outside the window, or paused / blocked at one end */
        if (b->at_us <= a->at_us || b->covered < a->covered)
            continue; /* out of order or a different run: no honest interval */
        dt += b->at_us - a->at_us;
        rows += b->covered - a->covered;
    }
    if (dt <= 0)
        return false;
    *out = (double)rows * 1e6 / (double)dt;
    return true;
}

static void dash_rate_text(char *buf, size_t cap, double r)
{
    if (r >= 1e6)
        snprintf(buf, cap, "%.1fM/s", r / 1e6);
    else if (r >= 1e4)
        snprintf(buf, cap, "%.0fk/s", r / 1e3);
    else
        snprintf(buf, cap, "%.0f/s", r);
}

/* ---- applying results -------------------------------------------------------------------- */

void bfc_dash_init(bfc_dash_model *m, const char *url)
{
    memset(m, 0, sizeof *m);
    bfc_printable(m->url, sizeof m->url, url ? url : "");
}

void bfc_dash_fini(bfc_dash_model *m)
{
    if (m == NULL)
        return;
    free(m->rows);
    m->rows = NULL;
    m->n_rows = 0;
}

void bfc_dash_apply_ready(bfc_dash_model *m, const Buzz__Backfill__V1__CheckResponse *resp,
                          bf_err err, const bfc_status *st, int64_t now_us)
{
    m->now_us = now_us;
    if (err != BF_OK || resp == NULL || !resp->has_ready) {
        if (err == BF_OK) /* an answer without the verdict is no verdict */
            snprintf(m->ready_err.text, sizeof m->ready_err.text, "malformed answer: no verdict");
        else
            bfc_fetch_error_from(&m->ready_err, err, st);
        if (err == BF_OK)
            m->ready_err.kind = BFC_FETCH_MALFORMED;
        m->ready_stale = m->ready_known;
        return;
    }
    m->ready_known = true;
    m->ready_stale = false;
    m->ready_ok_at_us = now_us;
    memset(&m->ready_err, 0, sizeof m->ready_err);
    m->ready = resp->ready;
    m->n_gating = 0;
    m->more_gating = 0;
    for (size_t i = 0; i < resp->n_gating; i++) {
        if (m->n_gating == BFC_DASH_MAX_GATING) {
            m->more_gating++;
            continue;
        }
        bfc_dash_gate *g = &m->gating[m->n_gating++];
        bfc_printable(g->id, sizeof g->id, resp->gating[i]->id ? resp->gating[i]->id : "unknown");
        snprintf(g->state, sizeof g->state, "%s",
                 resp->gating[i]->has_state ? bfc_state_name(resp->gating[i]->state)
                                            : "not registered");
    }
}

static int dash_row_cmp_id(const void *pa, const void *pb)
{
    return strcmp(((const bfc_dash_row *)pa)->v.id, ((const bfc_dash_row *)pb)->v.id);
}

/* The row of id in rows (sorted by id), or NULL. */
static const bfc_dash_row *dash_row_find(const bfc_dash_row *rows, size_t n, const char *id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(rows[mid].v.id, id);
        if (c == 0)
            return &rows[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static void dash_row_update(bfc_dash_row *r, const Buzz__Backfill__V1__Backfill *b)
{
    bfc_project(b, &r->v);
    r->seen = true;
    r->state = b->has_state ? (int)b->state : 0;
    const Buzz__Backfill__V1__Progress *p = b->progress;
    const Buzz__Backfill__V1__Times *t = b->times;
    bool running = r->state == BUZZ__BACKFILL__V1__STATE__RUNNING;
    bool completed = r->state == BUZZ__BACKFILL__V1__STATE__COMPLETED;
    bool covered = p != NULL && p->has_rows_covered;
    if (covered && t != NULL && t->has_observed_at_us &&
        (r->n_samples == 0 || r->samples[r->n_samples - 1].at_us < t->observed_at_us)) {
        if (r->n_samples == BFC_DASH_SAMPLES) {
            memmove(r->samples, r->samples + 1, (BFC_DASH_SAMPLES - 1) * sizeof r->samples[0]);
            r->n_samples--;
        }
        r->samples[r->n_samples++] = (bfc_rate_sample){
            .at_us = t->observed_at_us, .covered = p->rows_covered, .running = running};
    }
    /* a bar only against an estimate the checkpoint has not passed (past it the estimate says
     * nothing about what is left), or a completed backfill (known to be done) */
    r->has_fraction = false;
    if (completed) {
        r->has_fraction = true;
        r->fraction = 1.0;
    } else if (covered && p->has_source_estimate && p->source_estimate > 0 &&
               p->rows_covered < p->source_estimate) {
        r->has_fraction = true;
        r->fraction = (double)p->rows_covered / (double)p->source_estimate;
    }
    r->has_rate =
        running && bfc_rate_window(&r->rate, r->samples, r->n_samples, BFC_DASH_RATE_WINDOW);
    if (r->v.waiting_worker) /* nobody works on it: no rate to speak of, and no ETA */
        r->has_rate = false;
    if (r->v.waiting_worker)
        snprintf(r->rate_text, sizeof r->rate_text, "waiting");
    else if (r->has_rate)
        dash_rate_text(r->rate_text, sizeof r->rate_text, r->rate);
    else
        snprintf(r->rate_text, sizeof r->rate_text, "%s", running ? "unknown" : "-");
    if (completed) {
        snprintf(r->eta_text, sizeof r->eta_text, "done");
    } else if (!running) {
        snprintf(r->eta_text, sizeof r->eta_text, "-");
    } else if (r->has_rate && r->rate > 0 && covered && p->has_source_estimate &&
               p->source_estimate > p->rows_covered) {
        char d[24];
        double left = (double)(p->source_estimate - p->rows_covered) / r->rate;
        bfc_format_duration(d, sizeof d, (int64_t)(left * 1e6));
        snprintf(r->eta_text, sizeof r->eta_text, "~%.20s", d);
    } else {
        snprintf(r->eta_text, sizeof r->eta_text, "unknown");
    }
}

void bfc_dash_apply_list(bfc_dash_model *m, Buzz__Backfill__V1__Backfill *const *backfills,
                         size_t n, bool truncated, bf_err err, const bfc_status *st, int64_t now_us)
{
    m->now_us = now_us;
    if (n > BFC_DASH_MAX_ROWS) {
        n = BFC_DASH_MAX_ROWS;
        truncated = true;
    }
    /* the new rows, each carrying its rate samples over from the last read (found by id in
     * the old rows, which are sorted by id); rows the server no longer lists go */
    bfc_dash_row *rows = NULL;
    bool oom = err == BF_OK && n > 0 && (rows = calloc(n, sizeof *rows)) == NULL;
    if (err != BF_OK || oom) {
        bfc_fetch_error_from(&m->list_err, oom ? BF_ERR_RESOURCE_EXHAUSTED : err, oom ? NULL : st);
        if (oom)
            snprintf(m->list_err.text, sizeof m->list_err.text, "error: out of memory");
        m->list_stale = m->list_known;
        return;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char id[BFC_CELL];
        bfc_printable(id, sizeof id, backfills[i]->id ? backfills[i]->id : "unknown");
        const bfc_dash_row *old = dash_row_find(m->rows, m->n_rows, id);
        if (old != NULL)
            rows[k] = *old;
        dash_row_update(&rows[k++], backfills[i]);
    }
    qsort(rows, k, sizeof rows[0], dash_row_cmp_id);
    size_t u = 0; /* an id listed twice (it moved between two pages' reads) is shown once */
    for (size_t i = 0; i < k; i++)
        if (u == 0 || strcmp(rows[u - 1].v.id, rows[i].v.id) != 0)
            rows[u++] = rows[i];
    k = u;
    free(m->rows);
    m->rows = rows;
    m->n_rows = k;
    m->list_truncated = truncated;
    m->list_known = true;
    m->list_stale = false;
    m->list_ok_at_us = now_us;
    memset(&m->list_err, 0, sizeof m->list_err);
}

/* "2025-01-01T12:00:00Z" */
static void dash_utc(char *buf, size_t cap, int64_t us)
{
    time_t t = (time_t)(us / 1000000);
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL || strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, cap, "unknown");
}

void bfc_dash_apply_detail(bfc_dash_model *m, const Buzz__Backfill__V1__GetResponse *get,
                           bf_err get_err, const bfc_status *get_st,
                           const Buzz__Backfill__V1__AuditResponse *audit, bf_err audit_err,
                           int64_t now_us)
{
    bfc_dash_detail *d = &m->detail;
    m->now_us = now_us;
    if (get_err != BF_OK || get == NULL || get->backfill == NULL) {
        bfc_fetch_error_from(&d->err, get_err == BF_OK ? BF_ERR_IO : get_err, get_st);
        d->stale = d->has_data;
        return;
    }
    const Buzz__Backfill__V1__Backfill *b = get->backfill;
    bfc_project(b, &d->v);
    bfc_printable(d->id, sizeof d->id, b->id ? b->id : "unknown");
    const Buzz__Backfill__V1__Validation *val = b->last_validation;
    if (val != NULL && val->has_at_us)
        dash_utc(d->validation_time, sizeof d->validation_time, val->at_us);
    else
        snprintf(d->validation_time, sizeof d->validation_time, "%s",
                 val && val->has_outcome ? "unknown" : "never");
    bfc_printable(d->validation_detail, sizeof d->validation_detail,
                  val && val->detail ? val->detail : "");
    d->audit_ok = audit_err == BF_OK && audit != NULL;
    if (d->audit_ok) {
        d->n_audit = 0;
        for (size_t i = 0; i < audit->n_entries && d->n_audit < BFC_DASH_AUDIT_TAIL; i++) {
            const Buzz__Backfill__V1__AuditEntry *a = audit->entries[i];
            char when[32] = "unknown", raw[256], action[32], actor[48], outcome[96];
            if (a->has_at_us)
                dash_utc(when, sizeof when, a->at_us);
            bfc_printable(action, sizeof action, a->action ? a->action : "-");
            /* who: the token's actor, else the authority it came with (boundary, ...) */
            bfc_printable(actor, sizeof actor,
                          a->actor && a->actor[0] ? a->actor
                          : a->authority          ? a->authority
                                                  : "unknown");
            bfc_printable(outcome, sizeof outcome, a->outcome ? a->outcome : "");
            snprintf(raw, sizeof raw, "%s %-8s by %s: %s -> %s %s", when, action, actor,
                     bfc_state_name(a->has_prior_state ? (int)a->prior_state : 0),
                     bfc_state_name(a->has_resulting_state ? (int)a->resulting_state : 0), outcome);
            bfc_printable(d->audit[d->n_audit++], sizeof d->audit[0], raw);
        }
    }
    d->has_data = true;
    d->stale = false;
    d->ok_at_us = now_us;
    memset(&d->err, 0, sizeof d->err);
}

/* ---- visible rows ------------------------------------------------------------------------ */

static const bfc_dash_model *dash_sort_model; /* qsort has no context argument */

static int dash_cmp(const void *pa, const void *pb)
{
    const bfc_dash_row *a = &dash_sort_model->rows[*(const size_t *)pa];
    const bfc_dash_row *b = &dash_sort_model->rows[*(const size_t *)pb];
    int c = 0;
    if (dash_sort_model->sort == BFC_DASH_SORT_STATE) {
        c = strcmp(a->v.state, b->v.state);
    } else if (dash_sort_model->sort == BFC_DASH_SORT_PROGRESS) {
        /* most progress first; unknown progress last */
        if (a->has_fraction != b->has_fraction)
            c = a->has_fraction ? -1 : 1;
        else if (a->has_fraction && a->fraction != b->fraction)
            c = a->fraction > b->fraction ? -1 : 1;
    }
    return c != 0 ? c : strcmp(a->v.id, b->v.id);
}

size_t bfc_dash_visible(const bfc_dash_model *m, size_t *idx, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < m->n_rows && n < cap; i++) {
        const bfc_dash_row *r = &m->rows[i];
        if (m->filter[0] && strstr(r->v.id, m->filter) == NULL &&
            strstr(r->v.state, m->filter) == NULL && strstr(r->v.waiting, m->filter) == NULL)
            continue;
        idx[n++] = i;
    }
    dash_sort_model = m;
    qsort(idx, n, sizeof idx[0], dash_cmp);
    dash_sort_model = NULL;
    return n;
}

size_t bfc_dash_visible_alloc(const bfc_dash_model *m, size_t **out)
{
    *out = NULL;
    if (m->n_rows == 0 || (*out = malloc(m->n_rows * sizeof **out)) == NULL)
        return 0;
    size_t n = bfc_dash_visible(m, *out, m->n_rows);
    if (n == 0) {
        free(*out);
        *out = NULL;
    }
    return n;
}

const char *bfc_dash_selected_id(const bfc_dash_model *m)
{
    size_t *idx = NULL;
    size_t n = bfc_dash_visible_alloc(m, &idx);
    const char *id = n == 0 ? NULL : m->rows[idx[m->selected < n ? m->selected : n - 1]].v.id;
    free(idx);
    return id;
}

/* ---- keys -------------------------------------------------------------------------------- */

static const struct {
    int key;
    int action;
} dash_keymap[BFC_ACTION_COUNT] = {
    {'S', BFC_ACTION_START}, {'p', BFC_ACTION_PAUSE},    {'r', BFC_ACTION_RESUME},
    {'R', BFC_ACTION_RETRY}, {'v', BFC_ACTION_VALIDATE},
};

int bfc_dash_key_action(int key)
{
    for (size_t i = 0; i < BFC_ACTION_COUNT; i++)
        if (dash_keymap[i].key == key)
            return dash_keymap[i].action;
    return 0;
}

bfc_dash_cmd bfc_dash_key(bfc_dash_model *m, int key)
{
    if (key == BFC_KEY_RESIZE)
        return BFC_DASH_NONE;
    if (m->filter_editing) {
        size_t len = strlen(m->filter);
        if (key == '\n' || key == '\r' || key == BFC_KEY_ENTER || key == DASH_ESC)
            m->filter_editing = false;
        else if ((key == BFC_KEY_BACKSPACE || key == 127 || key == 8) && len > 0)
            m->filter[len - 1] = '\0';
        else if (key > 0x20 && key < 0x7f && len + 1 < sizeof m->filter)
            m->filter[len] = (char)key, m->filter[len + 1] = '\0';
        m->selected = 0;
        return BFC_DASH_NONE;
    }
    if (m->confirm_action != 0) {
        if (key == 'y' || key == 'Y')
            return BFC_DASH_SEND;
        snprintf(m->message, sizeof m->message, "%s %s: cancelled, nothing sent",
                 bfc_action_name(m->confirm_action), m->confirm_id);
        m->confirm_action = 0;
        return BFC_DASH_NONE;
    }
    if (m->help) {
        m->help = false;
        return key == 'q' ? BFC_DASH_QUIT : BFC_DASH_NONE;
    }
    size_t *idx = NULL;
    size_t n = bfc_dash_visible_alloc(m, &idx);
    free(idx);
    int action = bfc_dash_key_action(key);
    if (action != 0) {
        const char *id = bfc_dash_selected_id(m);
        if (id == NULL) {
            snprintf(m->message, sizeof m->message, "no backfill selected");
            return BFC_DASH_NONE;
        }
        m->confirm_action = action;
        snprintf(m->confirm_id, sizeof m->confirm_id, "%s", id);
        m->message[0] = '\0';
        return BFC_DASH_NONE;
    }
    switch (key) {
    case 'q':
        return BFC_DASH_QUIT;
    case '?':
        m->help = true;
        return BFC_DASH_NONE;
    case '/':
        m->filter_editing = true;
        return BFC_DASH_NONE;
    case 's':
        m->sort = (bfc_dash_sort)((m->sort + 1) % BFC_DASH_SORT_COUNT);
        return BFC_DASH_NONE;
    case 'j':
    case BFC_KEY_DOWN:
        if (m->selected + 1 < n)
            m->selected++;
        return m->show_detail ? BFC_DASH_REFRESH : BFC_DASH_NONE;
    case 'k':
    case BFC_KEY_UP:
        if (m->selected > 0)
            m->selected--;
        return m->show_detail ? BFC_DASH_REFRESH : BFC_DASH_NONE;
    case '\n':
    case '\r':
    case BFC_KEY_ENTER:
        m->show_detail = !m->show_detail && n > 0;
        memset(&m->detail, 0, sizeof m->detail);
        return m->show_detail ? BFC_DASH_REFRESH : BFC_DASH_NONE;
    case DASH_ESC:
        m->show_detail = false;
        return BFC_DASH_NONE;
    default:
        return BFC_DASH_NONE;
    }
}

void bfc_dash_action_done(bfc_dash_model *m, const char *outcome_line)
{
    bfc_printable(m->message, sizeof m->message, outcome_line);
    m->confirm_action = 0;
}
