/*
 * buzzctl_cmds.c - buzzctl's commands that read or act once: list, get, the controls,
 * validate, audit, whoami, ready. Each is one or more admin or readiness calls; nothing here
 * keeps or infers lifecycle state. Text from the server is printed only through ctl_text()
 * or the projection; --json prints exactly one document per command (buzzctl_json.c).
 *
 * Rates: the RPC data holds no pause or block history, so rows over the time since start
 * would count paused and blocked time. A rate is therefore measured between two reads of a
 * backfill that was running at both (bfc_rate_window); otherwise it is unknown. list reads
 * once (instant) unless asked: --sample-ms MS reads twice, MS apart, and --watch measures
 * each frame against the one before. get reads twice, --sample-ms apart (default 1000), when
 * the backfill is running. list --ids prints only the IDs (the bash completion uses it).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "buzz/backfill/v1/admin.pb-c.h"
#include "buzz/backfill/v1/readiness.pb-c.h"
#include "buzzctl.h"
#include "dash_view.h"
#include "projection.h"

#define LIST_PAGE         1000
#define SAMPLE_DEFAULT_MS 1000 /* get */
#define WATCH_DEFAULT_MS  2000

/* "blocked: fix the cause shown in error, then: buzzctl retry ID" */
static void cmds_hint(FILE *f, const Buzz__Backfill__V1__Backfill *b, const char *id)
{
    if (!b->has_state)
        return;
    if (b->old_writers != NULL && b->old_writers->has_rows && b->old_writers->rows > 0 &&
        b->state != BUZZ__BACKFILL__V1__STATE__COMPLETED) {
        fprintf(f, "hint: an old writer wrote rows in the old shape: drain that writer, then"
                   " start a new repair under a new stable ID\n");
        return;
    }
    switch (b->state) {
    case BUZZ__BACKFILL__V1__STATE__BLOCKED:
        fprintf(f, "hint: blocked: fix the cause, then: buzzctl retry %s\n", id);
        break;
    case BUZZ__BACKFILL__V1__STATE__FAILED:
        fprintf(f, "hint: failed: fix the cause, then: buzzctl retry %s\n", id);
        break;
    case BUZZ__BACKFILL__V1__STATE__PAUSED:
        fprintf(f, "hint: paused by an operator: buzzctl resume %s\n", id);
        break;
    case BUZZ__BACKFILL__V1__STATE__PENDING:
        fprintf(f, "hint: registered, not started: buzzctl start %s\n", id);
        break;
    default:
        break;
    }
}

static void print_detail(const Buzz__Backfill__V1__Backfill *b, const bfc_view *v)
{
    char buf[BFC_DETAIL_MAX];
    const Buzz__Backfill__V1__Definition *d = b->definition;
    printf("id:          %s\n", v->id);
    printf("state:       %s%s\n", v->state, v->gating ? "  (gates readiness)" : "");
    printf("progress:    %s\n", v->progress);
    printf("rate:        %s   eta: %s\n", v->rate, v->eta);
    printf("checkpoint:  %s\n", v->checkpoint);
    printf("bound:       %s\n", v->bound);
    printf("generation:  %s\n", v->generation);
    if (v->waiting_worker) /* running, yet nobody works on it */
        printf("claim:       %s: %s\n", v->claim, v->waiting);
    else
        printf("claim:       %s\n", v->claim);
    printf("retry:       %s\n", v->retry);
    printf("error:       %s\n", v->error);
    printf("batch:       %s\n", v->batch);
    printf("throttled:   %s\n", v->throttle);
    printf("slow:        %s\n", v->slow);
    if (strcmp(v->old_writers, "-") != 0) /* the old-writer watchdog: who, never what */
        printf("old writer:  %s\n", v->old_writers);
    char by[BFC_CELL + 24] = "";
    const Buzz__Backfill__V1__ValidationProgress *vp = b->validation_progress;
    if (strcmp(v->validating, "-") != 0 && vp != NULL) { /* who runs it, and why */
        char owner[BFC_CELL];
        bfc_printable(owner, sizeof owner, vp->owner ? vp->owner : "unknown");
        snprintf(by, sizeof by, " (%s, by %s)",
                 vp->has_lifecycle && vp->lifecycle ? "lifecycle" : "explicit", owner);
    }
    printf("validating:  %s%s\n", v->validating, by);
    char when[40] = "";
    if (b->last_validation != NULL && b->last_validation->has_at_us) {
        snprintf(when, sizeof when, " (");
        ctl_utc(when + 2, sizeof when - 3, b->last_validation->at_us);
        strcat(when, ")");
    }
    printf("validation:  %s%s\n", v->validation, when);
    if (b->last_validation != NULL && b->last_validation->detail != NULL)
        printf("             %s\n", ctl_text(buf, sizeof buf, b->last_validation->detail, ""));
    printf("updated:     %s\n", v->updated);
    if (d != NULL) {
        printf("key types:   %s\n", ctl_text(buf, sizeof buf, d->key_types, "unknown"));
        if (d->has_batch_size)
            printf("batch size:  %u\n", d->batch_size);
        if (d->description != NULL && d->description[0])
            printf("description: %s\n", ctl_text(buf, sizeof buf, d->description, ""));
        if (d->revision != NULL && d->revision[0])
            printf("revision:    %s\n", ctl_text(buf, sizeof buf, d->revision, ""));
    }
    cmds_hint(stdout, b, v->id);
}

/* The rate of b from an earlier read of it (NULL: none), as bfc_rate_window measures it. */
static bool cmds_rate(double *rate, const Buzz__Backfill__V1__Backfill *before,
                      const Buzz__Backfill__V1__Backfill *now)
{
    bfc_rate_sample s[2];
    const Buzz__Backfill__V1__Backfill *b[2] = {before, now};
    for (int i = 0; i < 2; i++) {
        if (b[i] == NULL || b[i]->progress == NULL || !b[i]->progress->has_rows_covered ||
            b[i]->times == NULL || !b[i]->times->has_observed_at_us)
            return false;
        s[i].at_us = b[i]->times->observed_at_us;
        s[i].covered = b[i]->progress->rows_covered;
        s[i].running = b[i]->has_state && b[i]->state == BUZZ__BACKFILL__V1__STATE__RUNNING;
    }
    return bfc_rate_window(rate, s, 2, INT64_MAX);
}

static bool cmds_running(const Buzz__Backfill__V1__Backfill *b)
{
    return b->has_state && b->state == BUZZ__BACKFILL__V1__STATE__RUNNING;
}

/* A running validation in at most 14 columns: "1.2M/~2.0M", "1.2M checked"; a validator that
 * stopped mid-way: "stopped 1.2M"; "-" when none runs */
static void cmds_short_validating(char *buf, size_t cap, const Buzz__Backfill__V1__Backfill *b)
{
    const Buzz__Backfill__V1__ValidationProgress *vp = b->validation_progress;
    if (vp == NULL || (vp->has_finished && vp->finished) || !vp->has_rows_checked) {
        snprintf(buf, cap, "-");
        return;
    }
    char n[16], est[16];
    bfc_format_short_count(n, sizeof n, vp->rows_checked);
    if (!vp->has_running || !vp->running)
        snprintf(buf, cap, "stopped %s", n);
    else if (b->progress != NULL && b->progress->has_source_estimate) {
        bfc_format_short_count(est, sizeof est, b->progress->source_estimate);
        snprintf(buf, cap, "%s/~%s", n, est);
    } else
        snprintf(buf, cap, "%s checked", n);
}

/* "120k (~60%)", "120k rows", "200k (done)", "unknown": at most 14 columns */
static void cmds_short_progress(char *buf, size_t cap, const Buzz__Backfill__V1__Backfill *b)
{
    const Buzz__Backfill__V1__Progress *p = b->progress;
    if (p == NULL || (!p->has_rows_covered && !p->has_rows_committed)) {
        snprintf(buf, cap, "unknown");
        return;
    }
    int64_t done = p->has_rows_covered ? p->rows_covered : p->rows_committed;
    char n[16];
    bfc_format_short_count(n, sizeof n, done);
    if (b->has_state && b->state == BUZZ__BACKFILL__V1__STATE__COMPLETED)
        snprintf(buf, cap, "%s (done)", n);
    else if (p->has_rows_covered && p->has_source_estimate && p->source_estimate > done)
        snprintf(buf, cap, "%s (~%.0f%%)", n, 100.0 * (double)done / (double)p->source_estimate);
    else
        snprintf(buf, cap, "%s rows", n);
}

/* ---- list ------------------------------------------------------------------------------ */

typedef struct list_read {
    ProtobufCMessage **pages;
    size_t n_pages;
    Buzz__Backfill__V1__Backfill **rows; /* into pages */
    size_t n;
} list_read;

static void list_read_free(list_read *r)
{
    for (size_t i = 0; i < r->n_pages; i++)
        protobuf_c_message_free_unpacked(r->pages[i], NULL);
    free(r->pages);
    free(r->rows);
    memset(r, 0, sizeof *r);
}

/* Every page (up to limit rows; 0 = all). */
static int list_fetch(ctl *c, const Buzz__Backfill__V1__ListRequest *base, long limit,
                      list_read *out)
{
    Buzz__Backfill__V1__ListRequest req = *base;
    char *page = NULL;
    do {
        req.page_token = page;
        req.has_page_size = 1;
        long left = limit > 0 ? limit - (long)out->n : LIST_PAGE;
        req.page_size = (uint32_t)(left < LIST_PAGE ? left : LIST_PAGE);
        ProtobufCMessage *m = NULL;
        bfc_status st;
        bf_err err =
            ctl_call(c, &buzz__backfill__v1__admin__descriptor, "List", &req.base, &m, &st);
        free(page);
        page = NULL;
        if (err != BF_OK) {
            int rc = ctl_report(c, "list", err, &st, NULL);
            if (m)
                protobuf_c_message_free_unpacked(m, NULL);
            return rc;
        }
        Buzz__Backfill__V1__ListResponse *resp = (Buzz__Backfill__V1__ListResponse *)m;
        ProtobufCMessage **pages = realloc(out->pages, (out->n_pages + 1) * sizeof *pages);
        Buzz__Backfill__V1__Backfill **rows =
            realloc(out->rows, (out->n + resp->n_backfills + 1) * sizeof *rows);
        if (pages != NULL)
            out->pages = pages;
        if (rows != NULL)
            out->rows = rows;
        if (pages == NULL || rows == NULL) {
            protobuf_c_message_free_unpacked(m, NULL);
            fputs("buzzctl list: out of memory\n", stderr);
            return EXIT_ERROR;
        }
        out->pages[out->n_pages++] = m;
        for (size_t i = 0; i < resp->n_backfills && (limit == 0 || (long)out->n < limit); i++)
            out->rows[out->n++] = resp->backfills[i];
        if (resp->next_page_token != NULL && (limit == 0 || (long)out->n < limit))
            page = strdup(resp->next_page_token);
    } while (page != NULL);
    return EXIT_OK;
}

static const Buzz__Backfill__V1__Backfill *list_find(const list_read *r, const char *id)
{
    for (size_t i = 0; id != NULL && i < r->n; i++)
        if (r->rows[i]->id != NULL && strcmp(r->rows[i]->id, id) == 0)
            return r->rows[i];
    return NULL;
}

static int cmds_parse_state(const char *s, Buzz__Backfill__V1__State *out)
{
    for (int i = 1; i <= 7; i++) {
        if (strcmp(s, bfc_state_name(i)) == 0) {
            *out = (Buzz__Backfill__V1__State)i;
            return 0;
        }
    }
    return -1;
}

/* The rate of b against its row in an earlier read (prev NULL: none). */
static bool list_rate(double *rate, const list_read *prev, const Buzz__Backfill__V1__Backfill *b)
{
    return prev != NULL && cmds_rate(rate, list_find(prev, b->id), b);
}

/* Seconds left at rate, from the keys passed and the planner's estimate; false: unknown. */
static bool list_eta_s(double *out, const Buzz__Backfill__V1__Backfill *b, double rate)
{
    const Buzz__Backfill__V1__Progress *p = b->progress;
    if (!cmds_running(b) || p == NULL || !p->has_rows_covered || !p->has_source_estimate ||
        p->source_estimate <= p->rows_covered || rate <= 0)
        return false;
    *out = (double)(p->source_estimate - p->rows_covered) / rate;
    return true;
}

/* {"backfills": [...]}: each the protobuf mapping of a Backfill, with "rowsPerSecond" and
 * "etaSeconds" (~ an estimate) added when a rate was measured against prev. */
static void list_print_json(const list_read *shown, const list_read *prev)
{
    struct json_object *arr = json_object_new_array();
    for (size_t i = 0; i < shown->n; i++) {
        const Buzz__Backfill__V1__Backfill *b = shown->rows[i];
        struct json_object *o = ctl_json_message(&b->base);
        double rate = 0, eta = 0;
        if (list_rate(&rate, prev, b)) {
            json_object_object_add(o, "rowsPerSecond", json_object_new_double(rate));
            if (list_eta_s(&eta, b, rate))
                json_object_object_add(o, "etaSeconds", json_object_new_double(eta));
        }
        json_object_array_add(arr, o);
    }
    struct json_object *doc = json_object_new_object();
    json_object_object_add(doc, "backfills", arr);
    ctl_json_emit(doc);
}

static void list_print_text(const list_read *shown, const list_read *prev, bool wide)
{
    int id_w = 2;
    for (size_t i = 0; i < shown->n; i++) {
        char id[BFC_CELL];
        bfc_printable(id, sizeof id, shown->rows[i]->id);
        if ((int)strlen(id) > id_w)
            id_w = (int)strlen(id);
    }
    if (wide)
        printf("%-*s %-10s %-14s %-10s %-9s GEN    BATCH  THROTTLED    SLOW         VALIDATING    "
               " OLD WRITER           CLAIM\n",
               id_w, "ID", "STATE", "PROGRESS", "RATE", "ETA");
    else
        printf("%-*s %-10s %-14s %-10s ETA\n", id_w, "ID", "STATE", "PROGRESS", "RATE");
    for (size_t i = 0; i < shown->n; i++) {
        const Buzz__Backfill__V1__Backfill *b = shown->rows[i];
        bfc_view v;
        bfc_project(b, &v);
        double rate = 0;
        bool has_rate = list_rate(&rate, prev, b);
        bfc_project_rate(&v, b, has_rate, rate);
        char prog[32], rate_s[24], eta[24];
        cmds_short_progress(prog, sizeof prog, b);
        if (has_rate)
            snprintf(rate_s, sizeof rate_s, "%.0f/s", rate);
        else
            snprintf(rate_s, sizeof rate_s, "%.23s", v.rate);
        /* "~6.0s (est.)" -> "~6.0s": the ~ marks the estimate in the table */
        snprintf(eta, sizeof eta, "%.*s", (int)strcspn(v.eta, " "), v.eta);
        if (wide) {
            /* the size the last worker used, and the signal a throttled one waits on */
            /* and how the last step was slow: "batch 3.2 s" of "batch 3.2 s, median 40 ms" */
            char batch[16] = "-", signal[16], slow[24];
            if (b->has_batch_size_current)
                snprintf(batch, sizeof batch, "%u", b->batch_size_current);
            snprintf(signal, sizeof signal, "%.*s", (int)strcspn(v.throttle, ":"), v.throttle);
            snprintf(slow, sizeof slow, "%.*s", (int)strcspn(v.slow, ","), v.slow);
            char checking[40];
            cmds_short_validating(checking, sizeof checking, b);
            printf("%-*s %-10s %-14s %-10s %-9s %-6s %-6s %-12s %-12s %-14s %-20s %s", id_w, v.id,
                   v.state, prog, rate_s, eta, v.generation, batch, signal, slow, checking,
                   v.old_writers_short, v.claim);
        } else
            printf("%-*s %-10s %-14s %-10s %s", id_w, v.id, v.state, prog, rate_s, eta);
        if (v.waiting_worker)
            printf("  (%s)", v.waiting);
        putchar('\n');
    }
    for (size_t i = 0; i < shown->n; i++) {
        bfc_view v;
        bfc_project(shown->rows[i], &v);
        if (shown->rows[i]->has_state &&
            (shown->rows[i]->state == BUZZ__BACKFILL__V1__STATE__BLOCKED ||
             shown->rows[i]->state == BUZZ__BACKFILL__V1__STATE__FAILED))
            cmds_hint(stdout, shown->rows[i], v.id);
    }
}

typedef struct list_opts {
    Buzz__Backfill__V1__ListRequest req;
    long limit;     /* 0: every row */
    long sample_ms; /* 0: one read (the default) */
    bool wide, ids, watch;
    int64_t interval_ms; /* --watch */
    long count;          /* --watch: frames, 0 until interrupted */
} list_opts;

static int list_parse(ctl *c, int argc, char **argv, list_opts *lo)
{
    static const struct option opts[] = {{"state", required_argument, NULL, 's'},
                                         {"limit", required_argument, NULL, 'l'},
                                         {"sample-ms", required_argument, NULL, 'm'},
                                         {"wide", no_argument, NULL, 'w'},
                                         {"ids", no_argument, NULL, 'i'},
                                         {"watch", no_argument, NULL, 'W'},
                                         {"interval", required_argument, NULL, 'v'},
                                         {"count", required_argument, NULL, 'n'},
                                         {0}};
    bool interval_given = false;
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o == 's') {
            if (cmds_parse_state(optarg, &lo->req.state) != 0)
                return ctl_usage_error(c,
                                       "list: --state: '%.40s' is not a state (pending, running, "
                                       "paused, blocked, failed, validating, completed)",
                                       optarg);
            lo->req.has_state = 1;
        } else if (o == 'l') {
            if ((lo->limit = ctl_parse_long(optarg, 1, 100000000)) < 0)
                return ctl_usage_error(c, "list: --limit: '%.40s' is not a whole number >= 1",
                                       optarg);
        } else if (o == 'm') {
            if ((lo->sample_ms = ctl_parse_long(optarg, 0, 60000)) < 0)
                return ctl_usage_error(c, "list: --sample-ms: '%.40s' is not 0..60000", optarg);
        } else if (o == 'w') {
            lo->wide = true;
        } else if (o == 'i') {
            lo->ids = true;
        } else if (o == 'W') {
            lo->watch = true;
        } else if (o == 'v') {
            long long bare = 0;
            int64_t ms = ctl_parse_duration_ms(optarg, &bare);
            if (ms == -2)
                ms = bare * 1000; /* a bare number is seconds */
            if (ms < 100 || ms > 3600000)
                return ctl_usage_error(
                    c, "list: --interval: '%.40s' is not a duration of 100ms..1h (e.g. 2s)",
                    optarg);
            lo->interval_ms = ms;
            interval_given = true;
        } else if (o == 'n') {
            if ((lo->count = ctl_parse_long(optarg, 1, 1000000)) < 0)
                return ctl_usage_error(c, "list: --count: '%.40s' is not a whole number >= 1",
                                       optarg);
        } else {
            return ctl_usage_error(c, "list: unknown option (see buzzctl list --help)");
        }
    }
    if (optind < argc)
        return ctl_usage_error(c, "list: unexpected argument '%.40s'", argv[optind]);
    if ((interval_given || lo->count > 0) && !lo->watch)
        return ctl_usage_error(c, "list: --interval and --count go with --watch");
    if (lo->ids && (lo->watch || lo->wide || c->json || lo->sample_ms > 0))
        return ctl_usage_error(c, "list: --ids prints IDs only: it takes no --watch, --wide, "
                                  "--json or --sample-ms");
    return EXIT_OK;
}

/* --watch: a frame every interval, each with the rates against the frame before it; on a
 * terminal each frame replaces the last, otherwise frames are separated by a blank line (with
 * --json: one document per line). Stops after --count frames, or at a failed read. */
static int list_watch(ctl *c, const list_opts *lo)
{
    bool tty = isatty(STDOUT_FILENO) != 0 && !c->json;
    list_read prev = {0};
    bool has_prev = false;
    int rc = EXIT_OK;
    for (long frame = 0; lo->count == 0 || frame < lo->count; frame++) {
        if (frame > 0)
            ctl_sleep_ms(lo->interval_ms);
        list_read cur = {0};
        rc = list_fetch(c, &lo->req, lo->limit, &cur);
        if (rc != EXIT_OK) {
            list_read_free(&cur);
            break;
        }
        if (c->json) {
            list_print_json(&cur, has_prev ? &prev : NULL);
        } else {
            if (tty)
                fputs("\033[H\033[2J", stdout);
            else if (frame > 0)
                putchar('\n');
            char d[24];
            bfc_format_duration(d, sizeof d, lo->interval_ms * 1000);
            printf("every %s (Ctrl-C to stop)\n", d);
            list_print_text(&cur, has_prev ? &prev : NULL, lo->wide);
        }
        fflush(stdout);
        list_read_free(&prev);
        prev = cur;
        has_prev = true;
    }
    list_read_free(&prev);
    return rc;
}

int ctl_cmd_list(ctl *c, int argc, char **argv)
{
    list_opts lo = {.req = BUZZ__BACKFILL__V1__LIST_REQUEST__INIT, .interval_ms = WATCH_DEFAULT_MS};
    int rc = list_parse(c, argc, argv, &lo);
    if (rc != EXIT_OK)
        return rc;
    if (lo.watch)
        return list_watch(c, &lo);
    list_read first = {0}, second = {0};
    rc = list_fetch(c, &lo.req, lo.limit, &first);
    if (rc != EXIT_OK) {
        list_read_free(&first);
        return rc;
    }
    if (lo.ids) {
        char id[BFC_CELL];
        for (size_t i = 0; i < first.n; i++)
            printf("%s\n", ctl_text(id, sizeof id, first.rows[i]->id, "?"));
        list_read_free(&first);
        return EXIT_OK;
    }
    bool any_running = false;
    for (size_t i = 0; i < first.n; i++)
        any_running |= cmds_running(first.rows[i]);
    const list_read *shown = &first, *prev = NULL;
    if (any_running && lo.sample_ms > 0) { /* opt-in: one read is instant */
        ctl_sleep_ms(lo.sample_ms);
        if (list_fetch(c, &lo.req, lo.limit, &second) == EXIT_OK) {
            shown = &second; /* the newer read, with rates against the first */
            prev = &first;
        } else if (!c->json) {
            fputs("buzzctl list: the second read failed: rates unknown\n", stderr);
        }
    }
    if (c->json)
        list_print_json(shown, prev);
    else
        list_print_text(shown, prev, lo.wide);
    list_read_free(&first);
    list_read_free(&second);
    return EXIT_OK;
}

/* ---- get, controls ------------------------------------------------------------------------ */

static bf_err cmds_get(ctl *c, const char *id, ProtobufCMessage **out, bfc_status *st)
{
    Buzz__Backfill__V1__GetRequest req = BUZZ__BACKFILL__V1__GET_REQUEST__INIT;
    req.id = (char *)id;
    return ctl_call(c, &buzz__backfill__v1__admin__descriptor, "Get", &req.base, out, st);
}

int ctl_cmd_get(ctl *c, int argc, char **argv)
{
    const char *id = NULL;
    long sample = SAMPLE_DEFAULT_MS;
    if (argc == 4 && strcmp(argv[2], "--sample-ms") == 0) {
        if ((sample = ctl_parse_long(argv[3], 0, 60000)) < 0)
            return ctl_usage_error(c, "get: --sample-ms: '%.40s' is not 0..60000", argv[3]);
        argc = 2;
    }
    int rc = ctl_need_id(c, argc, argv, "get", &id);
    if (rc != EXIT_OK)
        return rc;
    ProtobufCMessage *out = NULL, *again = NULL;
    bfc_status st;
    bf_err err = cmds_get(c, id, &out, &st);
    Buzz__Backfill__V1__GetResponse *resp = (Buzz__Backfill__V1__GetResponse *)out;
    if (err != BF_OK || resp == NULL || resp->backfill == NULL) {
        rc = ctl_report(c, "get", err == BF_OK ? BF_ERR_IO : err, &st, NULL);
    } else if (c->json) {
        ctl_json_emit(ctl_json_message(out));
    } else {
        const Buzz__Backfill__V1__Backfill *b = resp->backfill, *before = NULL;
        double rate = 0;
        bool has_rate = false;
        if (cmds_running(b) && sample > 0) {
            ctl_sleep_ms(sample);
            if (cmds_get(c, id, &again, &st) == BF_OK &&
                ((Buzz__Backfill__V1__GetResponse *)again)->backfill != NULL) {
                before = b;
                b = ((Buzz__Backfill__V1__GetResponse *)again)->backfill;
                has_rate = cmds_rate(&rate, before, b);
            }
        }
        bfc_view v;
        bfc_project(b, &v);
        bfc_project_rate(&v, b, has_rate, rate);
        print_detail(b, &v);
    }
    if (out)
        protobuf_c_message_free_unpacked(out, NULL);
    if (again)
        protobuf_c_message_free_unpacked(again, NULL);
    return rc;
}

int ctl_cmd_control(ctl *c, int argc, char **argv, bfc_action action)
{
    const char *id = NULL;
    const char *name = bfc_action_name(action);
    int rc = ctl_need_id(c, argc, argv, name, &id);
    if (rc != EXIT_OK)
        return rc;
    bfc_status st;
    bf_err err = ctl_connect(c, &st);
    ProtobufCMessage *out = NULL;
    if (err == BF_OK) {
        if (c->has_request_id)
            bfc_set_next_request_id(c->client, c->request_id);
        err = bfc_control(c->client, action, id, &out, &st);
    }
    Buzz__Backfill__V1__ControlResponse *resp = (Buzz__Backfill__V1__ControlResponse *)out;
    if (err != BF_OK) {
        rc = ctl_report(c, name, err, &st, out);
        if (!c->json && resp != NULL && resp->backfill != NULL) { /* a conflict: current state */
            bfc_view v;
            bfc_project(resp->backfill, &v);
            print_detail(resp->backfill, &v);
        }
    } else if (c->json) {
        ctl_json_emit(ctl_json_message(out));
    } else if (resp != NULL) {
        const char *outcome =
            resp->outcome == BUZZ__BACKFILL__V1__CONTROL_OUTCOME__ACCEPTED    ? "accepted"
            : resp->outcome == BUZZ__BACKFILL__V1__CONTROL_OUTCOME__CONVERGED ? "converged"
                                                                              : "unknown";
        char gen[24] = "unknown";
        if (resp->has_generation)
            snprintf(gen, sizeof gen, "%" PRId64, resp->generation);
        printf("%s %s: %s, %s -> %s, generation %s%s\n", name, id, outcome,
               bfc_state_name(resp->has_prior_state ? (int)resp->prior_state : 0),
               bfc_state_name(resp->has_resulting_state ? (int)resp->resulting_state : 0), gen,
               resp->has_replayed && resp->replayed ? " (replayed)" : "");
        printf("request id: %s\n", st.request_id);
    }
    if (out)
        protobuf_c_message_free_unpacked(out, NULL);
    return rc;
}

/* `buzzctl watch off ID`: remove a backfill's old-writer watch trigger now (Admin.WatchOff);
 * what it counted stays readable in get. */
int ctl_cmd_watch(ctl *c, int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "off") != 0)
        return ctl_usage_error(c, " watch: usage: buzzctl watch off ID");
    const char *id = NULL;
    int rc = ctl_need_id(c, argc - 1, argv + 1, "watch off", &id);
    if (rc != EXIT_OK)
        return rc;
    bfc_status st;
    bf_err err = ctl_connect(c, &st);
    ProtobufCMessage *out = NULL;
    if (err == BF_OK) {
        Buzz__Backfill__V1__ControlRequest req = BUZZ__BACKFILL__V1__CONTROL_REQUEST__INIT;
        req.id = (char *)id;
        err = bfc_call(c->client, &buzz__backfill__v1__admin__descriptor, "WatchOff", &req.base,
                       &out, &st);
    }
    Buzz__Backfill__V1__ControlResponse *resp = (Buzz__Backfill__V1__ControlResponse *)out;
    if (err != BF_OK) {
        rc = ctl_report(c, "watch off", err, &st, out);
    } else if (c->json) {
        ctl_json_emit(ctl_json_message(out));
    } else if (resp != NULL) {
        char safe[BFC_CELL], detail[160];
        bfc_printable(safe, sizeof safe, id);
        bfc_printable(detail, sizeof detail, resp->detail ? resp->detail : "done");
        printf("watch off %s: %s\n", safe, detail);
        if (resp->backfill != NULL) {
            bfc_view v;
            bfc_project(resp->backfill, &v);
            printf("old writer:  %s\n", v.old_writers);
        }
    }
    if (out)
        protobuf_c_message_free_unpacked(out, NULL);
    return rc;
}
