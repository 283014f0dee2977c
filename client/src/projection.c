/* projection.c - Backfill messages to display text; see projection.h. */
#include "projection.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const char *const state_names[] = {"unknown", "pending", "running",    "paused",
                                          "blocked", "failed",  "validating", "completed"};

const char *bfc_state_name(int state)
{
    if (state < 1 || state > 7)
        return "unknown";
    return state_names[state];
}

const char *bfc_outcome_name(int outcome)
{
    switch (outcome) {
    case BUZZ__BACKFILL__V1__VALIDATION_OUTCOME__SUCCESS:
        return "success";
    case BUZZ__BACKFILL__V1__VALIDATION_OUTCOME__FAILURE:
        return "failure";
    case BUZZ__BACKFILL__V1__VALIDATION_OUTCOME__CURRENT_STATE:
        return "current-state";
    default:
        return "unknown";
    }
}

static bool utf8_cont(unsigned char c)
{
    return (c & 0xc0) == 0x80;
}

size_t bfc_utf8_char(const unsigned char *p, bool *control)
{
    unsigned char c = p[0];
    *control = false;
    if (c < 0x80) {
        *control = c < 0x20 || c == 0x7f;
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf && utf8_cont(p[1])) {
        *control = c == 0xc2 && p[1] < 0xa0; /* U+0080..U+009F */
        return 2;
    }
    if (c >= 0xe0 && c <= 0xef && utf8_cont(p[1]) && utf8_cont(p[2]) &&
        (c != 0xe0 || p[1] >= 0xa0) && (c != 0xed || p[1] < 0xa0)) /* overlong, surrogate */
        return 3;
    if (c >= 0xf0 && c <= 0xf4 && utf8_cont(p[1]) && utf8_cont(p[2]) && utf8_cont(p[3]) &&
        (c != 0xf0 || p[1] >= 0x90) && (c != 0xf4 || p[1] < 0x90))
        return 4;
    return 0;
}

void bfc_printable(char *dst, size_t cap, const char *src)
{
    if (dst == NULL || cap == 0)
        return;
    const unsigned char *p = (const unsigned char *)(src ? src : "");
    size_t o = 0;
    while (*p != '\0') {
        bool control = false;
        size_t n = bfc_utf8_char(p, &control);
        if (n == 0 || control) {
            if (o + 1 >= cap)
                break;
            dst[o++] = '?';
            p += n ? n : 1;
            continue;
        }
        if (o + n >= cap)
            break;
        memcpy(dst + o, p, n);
        o += n;
        p += n;
    }
    dst[o] = '\0';
}

void bfc_format_short_count(char *buf, size_t cap, int64_t n)
{
    if (n < 0)
        snprintf(buf, cap, "unknown");
    else if (n < 10000)
        snprintf(buf, cap, "%" PRId64, n);
    else if (n < 1000000)
        snprintf(buf, cap, "%.0fk", (double)n / 1e3);
    else if (n < 1000000000)
        snprintf(buf, cap, "%.1fM", (double)n / 1e6);
    else
        snprintf(buf, cap, "%.1fG", (double)n / 1e9);
}

void bfc_format_count(char *buf, size_t cap, int64_t n)
{
    char digits[32];
    snprintf(digits, sizeof digits, "%" PRId64, n < 0 ? -n : n);
    size_t len = strlen(digits), o = 0;
    char tmp[48];
    if (n < 0)
        tmp[o++] = '-';
    for (size_t i = 0; i < len; i++) {
        if (i > 0 && (len - i) % 3 == 0)
            tmp[o++] = ',';
        tmp[o++] = digits[i];
    }
    tmp[o] = '\0';
    snprintf(buf, cap, "%s", tmp);
}

void bfc_format_duration(char *buf, size_t cap, int64_t us)
{
    if (us < 0) {
        snprintf(buf, cap, "unknown");
        return;
    }
    int64_t s = us / 1000000;
    if (s < 10)
        snprintf(buf, cap, "%.1fs", (double)us / 1e6);
    else if (s < 60)
        snprintf(buf, cap, "%" PRId64 "s", s);
    else if (s < 3600)
        snprintf(buf, cap, "%" PRId64 "m%02" PRId64 "s", s / 60, s % 60);
    else if (s < 86400)
        snprintf(buf, cap, "%" PRId64 "h%02" PRId64 "m", s / 3600, (s % 3600) / 60);
    else
        snprintf(buf, cap, "%" PRId64 "d%02" PRId64 "h", s / 86400, (s % 86400) / 3600);
}

static void ago(char *buf, size_t cap, bool has, int64_t at, bool has_now, int64_t now)
{
    if (!has || !has_now) {
        snprintf(buf, cap, "unknown");
        return;
    }
    char d[24];
    bfc_format_duration(d, sizeof d, now - at);
    snprintf(buf, cap, "%s ago", d);
}

static void project_progress(const Buzz__Backfill__V1__Backfill *b, bfc_view *v)
{
    const Buzz__Backfill__V1__Progress *p = b->progress;
    const Buzz__Backfill__V1__Times *t = b->times;
    snprintf(v->rate, sizeof v->rate, "unknown");
    snprintf(v->eta, sizeof v->eta, "unknown");
    if (p == NULL || !p->has_rows_committed) {
        snprintf(v->progress, sizeof v->progress, "unknown");
        return;
    }
    /* keys passed measure progress through the source (some rows need no repair); without
     * them (progress from before the engine counted keys) the rows changed stand in */
    bool covered = p->has_rows_covered;
    int64_t done = covered ? p->rows_covered : p->rows_committed;
    char rows[32], changed[32];
    bfc_format_count(rows, sizeof rows, done);
    bfc_format_count(changed, sizeof changed, p->rows_committed);
    char what[80];
    if (covered)
        snprintf(what, sizeof what, "%s rows, %s changed", rows, changed);
    else
        snprintf(what, sizeof what, "%s rows changed", changed);
    if (p->has_source_estimate && p->source_estimate > 0) {
        char est[32];
        bfc_format_count(est, sizeof est, p->source_estimate);
        double pct = 100.0 * (double)done / (double)p->source_estimate;
        snprintf(v->progress, sizeof v->progress, "%s (~%.1f%% of ~%s est.)", what,
                 pct > 100.0 ? 100.0 : pct, est);
    } else {
        snprintf(v->progress, sizeof v->progress, "%s", what);
    }
    /* the rate and the ETA need two reads: bfc_project_rate() */
    bool running = b->has_state && b->state == BUZZ__BACKFILL__V1__STATE__RUNNING;
    bool completed = b->has_state && b->state == BUZZ__BACKFILL__V1__STATE__COMPLETED;
    if (!running) {
        snprintf(v->rate, sizeof v->rate, "-");
        snprintf(v->eta, sizeof v->eta, completed ? "done" : "-");
    }
    (void)t;
}

void bfc_project_rate(bfc_view *v, const Buzz__Backfill__V1__Backfill *b, bool has_rate,
                      double rate)
{
    if (!b->has_state || b->state != BUZZ__BACKFILL__V1__STATE__RUNNING)
        return; /* "-" or "done" from bfc_project */
    const Buzz__Backfill__V1__Progress *p = b->progress;
    if (!has_rate) {
        snprintf(v->rate, sizeof v->rate, "unknown");
        snprintf(v->eta, sizeof v->eta, "unknown");
        return;
    }
    snprintf(v->rate, sizeof v->rate, "%.0f rows/s", rate);
    /* only from keys passed: rows changed say nothing about what is left of the source */
    if (p != NULL && p->has_rows_covered && p->has_source_estimate &&
        p->source_estimate > p->rows_covered && rate > 0) {
        char d[24];
        double left = (double)(p->source_estimate - p->rows_covered) / rate;
        bfc_format_duration(d, sizeof d, (int64_t)(left * 1e6));
        snprintf(v->eta, sizeof v->eta, "~%s (est.)", d);
    } else {
        snprintf(v->eta, sizeof v->eta, "unknown");
    }
}

/* How far a running validation has got, against the planner's estimate of the source (the
 * rows in the bound); a validator that stopped mid-way is told apart from a running one. */
static void project_validating(const Buzz__Backfill__V1__Backfill *b, bfc_view *v, bool has_now,
                               int64_t now)
{
    const Buzz__Backfill__V1__ValidationProgress *vp = b->validation_progress;
    const Buzz__Backfill__V1__Progress *p = b->progress;
    bool finished = vp != NULL && vp->has_finished && vp->finished;
    if (vp == NULL || finished || !vp->has_running || !vp->has_rows_checked) {
        snprintf(v->validating, sizeof v->validating, "-");
        return;
    }
    char checked[32], bad[32], total[40] = "", age[24] = "unknown", raw[192];
    bfc_format_count(checked, sizeof checked, vp->rows_checked);
    if (vp->has_rows_needing_repair)
        bfc_format_count(bad, sizeof bad, vp->rows_needing_repair);
    else
        snprintf(bad, sizeof bad, "unknown");
    if (p != NULL && p->has_source_estimate) {
        char est[32];
        bfc_format_count(est, sizeof est, p->source_estimate);
        snprintf(total, sizeof total, " of ~%s", est);
    }
    if (vp->running) {
        if (vp->has_started_at_us && has_now)
            bfc_format_duration(age, sizeof age, now - vp->started_at_us);
        snprintf(raw, sizeof raw, "%s%s rows checked, %s need repair, %s", checked, total, bad,
                 age);
    } else { /* neither running nor finished: its validator crashed or stopped */
        if (vp->has_updated_at_us && has_now)
            bfc_format_duration(age, sizeof age, now - vp->updated_at_us);
        snprintf(raw, sizeof raw, "stopped at %s rows checked, %s need repair (silent %s)", checked,
                 bad, age);
    }
    bfc_printable(v->validating, sizeof v->validating, raw);
}

/* Running but nobody works on it: no claim holder (every worker busy elsewhere, or none
 * configured), or the holder's lease ran out, and no retry back-off it waits for instead. */
static void project_waiting(const Buzz__Backfill__V1__Backfill *b, bfc_view *v, bool has_now,
                            int64_t now)
{
    snprintf(v->waiting, sizeof v->waiting, "-");
    if (!b->has_state || b->state != BUZZ__BACKFILL__V1__STATE__RUNNING)
        return;
    const Buzz__Backfill__V1__Claim *c = b->claim;
    bool held = c != NULL && c->owner != NULL && !(c->has_valid && !c->valid);
    if (held || (b->throttle != NULL && b->throttle->signal != NULL) ||
        (b->slow != NULL && b->slow->value != NULL))
        return; /* throttle and slow are reported by a live claim holder only */
    const Buzz__Backfill__V1__Retry *r = b->retry;
    if (r != NULL && r->has_next_attempt_at_us && has_now && r->next_attempt_at_us > now)
        return; /* it waits for its back-off, shown as the retry */
    v->waiting_worker = true;
    snprintf(v->waiting, sizeof v->waiting, "waiting for a worker%s",
             c != NULL && c->owner != NULL ? " (claim expired)" : "");
}

/* "14:02" (UTC) of microseconds since the epoch */
static void project_clock(char *buf, size_t cap, int64_t us)
{
    time_t t = (time_t)(us / 1000000);
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL)
        snprintf(buf, cap, "?");
    else
        snprintf(buf, cap, "%02d:%02d", tm.tm_hour, tm.tm_min);
}

/* Who wrote rows in the old shape while the backfill ran: names, never values. */
static void project_old_writers(const Buzz__Backfill__V1__Backfill *b, bfc_view *v)
{
    const Buzz__Backfill__V1__OldWriters *o = b->old_writers;
    snprintf(v->old_writers_short, sizeof v->old_writers_short, "-");
    if (o == NULL) {
        snprintf(v->old_writers, sizeof v->old_writers, "-");
        return;
    }
    bool watching = o->has_watching && o->watching;
    if (!o->has_rows || o->rows == 0) {
        snprintf(v->old_writers, sizeof v->old_writers, "none (%s)",
                 watching ? "watching" : "watch removed");
        snprintf(v->old_writers_short, sizeof v->old_writers_short, "0");
        return;
    }
    v->has_old_writers = true;
    char app[64], addr[64], role[64], first[16] = "?", last[16] = "?", more[48] = "",
                                      healed[40] = "";
    bfc_printable(app, sizeof app, o->application ? o->application : "(none)");
    bfc_printable(addr, sizeof addr, o->address ? o->address : "unknown");
    bfc_printable(role, sizeof role, o->role ? o->role : "unknown");
    if (o->has_first_seen_at_us)
        project_clock(first, sizeof first, o->first_seen_at_us);
    if (o->has_last_seen_at_us)
        project_clock(last, sizeof last, o->last_seen_at_us);
    if (o->has_writers && o->writers > 1)
        snprintf(more, sizeof more, " + %" PRId64 " more writer%s", o->writers - 1,
                 o->writers == 2 ? "" : "s");
    if (o->has_healed && o->healed > 0)
        snprintf(healed, sizeof healed, ", %" PRId64 " healed", o->healed);
    char raw[512]; /* every part at its bound: no truncation */
    snprintf(raw, sizeof raw,
             "%" PRId64 " row%s since %s from application %s at %s (role %s), last %s UTC%s%s",
             o->rows, o->rows == 1 ? "" : "s", first, app, addr, role, last, more, healed);
    bfc_printable(v->old_writers, sizeof v->old_writers, raw);
    char n[16], who[20];
    bfc_format_short_count(n, sizeof n, o->rows);
    bfc_printable(who, sizeof who, app);
    snprintf(v->old_writers_short, sizeof v->old_writers_short, "%s (%s)", n, who);
}

void bfc_project(const Buzz__Backfill__V1__Backfill *b, bfc_view *v)
{
    memset(v, 0, sizeof *v);
    const Buzz__Backfill__V1__Times *t = b->times;
    bool has_now = t != NULL && t->has_observed_at_us;
    int64_t now = has_now ? t->observed_at_us : 0;
    bfc_printable(v->id, sizeof v->id, b->id ? b->id : "unknown");
    snprintf(v->state, sizeof v->state, "%s", bfc_state_name(b->has_state ? (int)b->state : 0));
    project_progress(b, v);
    bfc_printable(v->checkpoint, sizeof v->checkpoint, b->checkpoint ? b->checkpoint : "-");
    if (b->has_bound_empty && b->bound_empty)
        snprintf(v->bound, sizeof v->bound, "(empty)");
    else
        bfc_printable(v->bound, sizeof v->bound, b->bound ? b->bound : "-");
    if (b->has_generation)
        snprintf(v->generation, sizeof v->generation, "%" PRId64, b->generation);
    else
        snprintf(v->generation, sizeof v->generation, "unknown");
    const Buzz__Backfill__V1__Claim *c = b->claim;
    char owner[49];
    bfc_printable(owner, sizeof owner, c ? c->owner : NULL);
    if (c == NULL || c->owner == NULL) {
        snprintf(v->claim, sizeof v->claim, "none");
    } else if (c->has_valid && c->valid && c->has_expires_at_us && has_now) {
        char d[24];
        bfc_format_duration(d, sizeof d, c->expires_at_us - now);
        snprintf(v->claim, sizeof v->claim, "%s (%s left)", owner, d);
    } else {
        snprintf(v->claim, sizeof v->claim, "%s (%s)", owner,
                 c->has_valid ? "expired" : "validity unknown");
    }
    const Buzz__Backfill__V1__Retry *r = b->retry;
    if (r == NULL || !r->has_attempts || r->attempts == 0) {
        snprintf(v->retry, sizeof v->retry, "-");
    } else if (r->has_next_attempt_at_us && has_now && r->next_attempt_at_us > now) {
        char d[24];
        bfc_format_duration(d, sizeof d, r->next_attempt_at_us - now);
        snprintf(v->retry, sizeof v->retry, "attempt %u, next in %s", r->attempts, d);
    } else {
        snprintf(v->retry, sizeof v->retry, "attempt %u", r->attempts);
    }
    const Buzz__Backfill__V1__Diagnostic *e = b->error;
    if (e == NULL || (e->error_class == NULL && e->detail == NULL)) {
        snprintf(v->error, sizeof v->error, "-");
    } else {
        /* the violated constraint first: it names what to fix, and a cut cell keeps it */
        char constraint[48] = "";
        const char *k = e->detail ? strstr(e->detail, "constraint=") : NULL;
        if (k != NULL)
            snprintf(constraint, sizeof constraint, " [%.*s]", (int)strcspn(k, " ,;)"), k);
        char raw[192]; /* 31 + 47 + 2 + 80 + NUL */
        snprintf(raw, sizeof raw, "%.31s%s: %.80s", e->error_class ? e->error_class : "error",
                 constraint, e->detail ? e->detail : "");
        bfc_printable(v->error, sizeof v->error, raw);
    }
    const Buzz__Backfill__V1__Validation *val = b->last_validation;
    if (val == NULL || !val->has_outcome) {
        snprintf(v->validation, sizeof v->validation, "never");
    } else {
        char when[40];
        ago(when, sizeof when, val->has_at_us, val->at_us, has_now, now);
        snprintf(v->validation, sizeof v->validation, "%s, %s", bfc_outcome_name(val->outcome),
                 when);
    }
    ago(v->updated, sizeof v->updated, t && t->has_updated_at_us, t ? t->updated_at_us : 0, has_now,
        now);
    /* throttling: the size the last worker used, and what a live claim holder waits for */
    const Buzz__Backfill__V1__Definition *d = b->definition;
    if (b->has_batch_size_current && d != NULL && d->has_batch_size)
        snprintf(v->batch, sizeof v->batch, "%u of %u", b->batch_size_current, d->batch_size);
    else if (b->has_batch_size_current)
        snprintf(v->batch, sizeof v->batch, "%u", b->batch_size_current);
    else
        snprintf(v->batch, sizeof v->batch, "-");
    const Buzz__Backfill__V1__Throttle *th = b->throttle;
    if (th == NULL || th->signal == NULL) {
        snprintf(v->throttle, sizeof v->throttle, "-");
    } else {
        char since[24] = "unknown";
        if (th->has_since_us && has_now)
            bfc_format_duration(since, sizeof since, now - th->since_us);
        char raw[160];
        snprintf(raw, sizeof raw, "%.23s: %.63s, %s", th->signal, th->value ? th->value : "?",
                 since);
        bfc_printable(v->throttle, sizeof v->throttle, raw);
    }
    /* a collapse: a live claim holder's last step far slower than the recent median */
    const Buzz__Backfill__V1__Slow *sl = b->slow;
    if (sl == NULL || sl->value == NULL) {
        snprintf(v->slow, sizeof v->slow, "-");
    } else {
        char since[24] = "unknown";
        if (sl->has_since_us && has_now)
            bfc_format_duration(since, sizeof since, now - sl->since_us);
        char raw[160];
        snprintf(raw, sizeof raw, "%.63s, %s", sl->value, since);
        bfc_printable(v->slow, sizeof v->slow, raw);
    }
    project_validating(b, v, has_now, now);
    project_waiting(b, v, has_now, now);
    project_old_writers(b, v);
    v->gating = b->has_gating && b->gating;
}
