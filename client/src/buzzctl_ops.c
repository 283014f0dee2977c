/*
 * buzzctl_ops.c - buzzctl validate, audit, whoami and ready.
 *
 * validate: the Validate call is one attempt with the whole budget (bfc_control; a retry
 * would only meet the running validation and be answered "still running"). Without --timeout
 * the budget is 5 minutes. While it runs (on a terminal, or with --progress), a second
 * connection polls Get every 2 s and prints the backfill's state and how far the validation
 * has got (rows checked of the estimate, rows needing repair) on stderr; the outcome is
 * printed only when the Validate call itself answers: nothing is inferred from the polls.
 *
 * ready --wait-ready --timeout DURATION: Readiness.Check in long polls until ready or the
 * time is up, riding over an unreachable server (an init container starts with the daemon).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buzz/backfill/v1/admin.pb-c.h"
#include "buzz/backfill/v1/readiness.pb-c.h"
#include "buzzctl.h"
#include "projection.h"

#define AUDIT_PAGE           1000
#define VALIDATE_TIMEOUT_MS  (5 * 60 * 1000)
#define VALIDATE_POLL_MS     2000
#define READY_WAIT_MARGIN_MS 2000
#define READY_POLL_MS        10000

/* ---- validate ----------------------------------------------------------------------------- */

typedef struct ops_validate_job {
    ctl *c;
    const char *id;
    bf_err err;
    bfc_status st;
    ProtobufCMessage *out;
    atomic_bool done;
} ops_validate_job;

static void ops_validate_send(ops_validate_job *j)
{
    bf_err err = ctl_connect(j->c, &j->st);
    if (err == BF_OK) {
        if (j->c->has_request_id)
            bfc_set_next_request_id(j->c->client, j->c->request_id);
        err = bfc_control(j->c->client, BFC_ACTION_VALIDATE, j->id, &j->out, &j->st);
    }
    j->err = err;
}

static void *ops_validate_thread(void *arg)
{
    ops_validate_job *j = arg;
    ops_validate_send(j);
    atomic_store(&j->done, true);
    return NULL;
}

/* Poll Get on a connection of its own while the job runs; progress lines on stderr. */
static void ops_validate_watch(ops_validate_job *j)
{
    bfc_client *watch = NULL;
    bfc_options bo = j->c->bo;
    bo.timeout_ms = VALIDATE_POLL_MS;
    bo.retries = -1;
    int64_t start = ctl_now_ms(), next = start + VALIDATE_POLL_MS;
    while (!atomic_load(&j->done)) {
        ctl_sleep_ms(100);
        if (ctl_now_ms() < next || atomic_load(&j->done))
            continue;
        next = ctl_now_ms() + VALIDATE_POLL_MS;
        char state[64] = "state unknown (the poll failed)";
        char checked[BFC_CELL + 16] = "";
        if (watch != NULL || bfc_open(&watch, j->c->url, &bo, NULL, 0) == BF_OK) {
            Buzz__Backfill__V1__GetRequest req = BUZZ__BACKFILL__V1__GET_REQUEST__INIT;
            req.id = (char *)j->id;
            ProtobufCMessage *out = NULL;
            if (bfc_call(watch, &buzz__backfill__v1__admin__descriptor, "Get", &req.base, &out,
                         NULL) == BF_OK) {
                Buzz__Backfill__V1__GetResponse *g = (Buzz__Backfill__V1__GetResponse *)out;
                if (g->backfill != NULL) {
                    snprintf(state, sizeof state, "state %s",
                             bfc_state_name(g->backfill->has_state ? (int)g->backfill->state : 0));
                    /* how far the running validation has got, as its validator recorded it */
                    bfc_view v;
                    bfc_project(g->backfill, &v);
                    if (strcmp(v.validating, "-") != 0)
                        snprintf(checked, sizeof checked, "; validating: %s", v.validating);
                }
            }
            if (out)
                protobuf_c_message_free_unpacked(out, NULL);
        }
        char d[24];
        bfc_format_duration(d, sizeof d, (ctl_now_ms() - start) * 1000);
        fprintf(stderr, "validate %s: running for %s, %s%s; waiting for the outcome\n", j->id, d,
                state, checked);
    }
    bfc_close(watch);
}

int ctl_cmd_validate(ctl *c, int argc, char **argv)
{
    bool progress = isatty(STDERR_FILENO) != 0;
    if (argc == 3 && strcmp(argv[2], "--progress") == 0) {
        progress = true;
        argc = 2;
    } else if (argc == 3 && strcmp(argv[1], "--progress") == 0) {
        progress = true;
        argv[1] = argv[2];
        argc = 2;
    }
    const char *id = NULL;
    int rc = ctl_need_id(c, argc, argv, "validate", &id);
    if (rc != EXIT_OK)
        return rc;
    if (c->bo.timeout_ms == 0)
        c->bo.timeout_ms = VALIDATE_TIMEOUT_MS;
    ops_validate_job j = {.c = c, .id = id};
    atomic_init(&j.done, false);
    pthread_t t;
    if (progress && !c->json && pthread_create(&t, NULL, ops_validate_thread, &j) == 0) {
        ops_validate_watch(&j);
        pthread_join(t, NULL);
    } else {
        ops_validate_send(&j);
    }
    Buzz__Backfill__V1__ValidateResponse *resp = (Buzz__Backfill__V1__ValidateResponse *)j.out;
    if (j.err != BF_OK || resp == NULL) {
        rc = ctl_report(c, "validate", j.err == BF_OK ? BF_ERR_IO : j.err, &j.st, NULL);
    } else {
        if (c->json) {
            ctl_json_emit(ctl_json_message(j.out));
        } else {
            printf("validate %s: %s (evaluated %s)%s%s\n", id, bfc_outcome_name(resp->outcome),
                   bfc_state_name(resp->has_evaluated_state ? (int)resp->evaluated_state : 0),
                   resp->has_completed && resp->completed ? ", completed" : "",
                   resp->has_replayed && resp->replayed ? " (replayed)" : "");
            char buf[BFC_DETAIL_MAX];
            if (resp->detail != NULL)
                printf("  %s\n", ctl_text(buf, sizeof buf, resp->detail, ""));
            printf("request id: %s\n", j.st.request_id);
        }
        rc = resp->outcome == BUZZ__BACKFILL__V1__VALIDATION_OUTCOME__SUCCESS ? EXIT_OK
             : resp->outcome == BUZZ__BACKFILL__V1__VALIDATION_OUTCOME__FAILURE
                 ? EXIT_VALIDATION_FAILED
                 : EXIT_CURRENT_STATE;
    }
    if (j.out)
        protobuf_c_message_free_unpacked(j.out, NULL);
    return rc;
}

/* ---- audit -------------------------------------------------------------------------------- */

/* " (x5000 from 2025-...Z to 2025-...Z)" for a coalesced row, "" for a single event. */
static void ops_audit_times(char *buf, size_t cap, const Buzz__Backfill__V1__AuditEntry *a)
{
    buf[0] = '\0';
    bool counted = a->has_count && a->count > 1;
    if (!counted && !a->has_window_start_us)
        return;
    char n[32] = "", from[32] = "unknown", to[32] = "unknown";
    if (a->has_count)
        snprintf(n, sizeof n, "x%" PRId64 " ", a->count);
    if (a->has_window_start_us)
        ctl_utc(from, sizeof from, a->window_start_us);
    if (a->has_window_end_us)
        ctl_utc(to, sizeof to, a->window_end_us);
    snprintf(buf, cap, " (%sfrom %s to %s)", n, from, to);
}

static void ops_audit_print(const Buzz__Backfill__V1__AuditEntry *a)
{
    char gen[24] = "-", id[BFC_CELL], action[32], actor[128], authority[128], at[32] = "unknown";
    char outcome[BFC_DETAIL_MAX], times[96] = "";
    if (a->has_generation)
        snprintf(gen, sizeof gen, "%" PRId64, a->generation);
    if (a->has_at_us)
        ctl_utc(at, sizeof at, a->at_us);
    ops_audit_times(times, sizeof times, a);
    printf("#%-4" PRId64 " %s %-28s %-9s %-10s -> %-10s gen %-4s %s%s[%s] %s%s\n", a->seq, at,
           ctl_text(id, sizeof id, a->backfill_id, "-"),
           ctl_text(action, sizeof action, a->action, "-"),
           bfc_state_name(a->has_prior_state ? (int)a->prior_state : 0),
           bfc_state_name(a->has_resulting_state ? (int)a->resulting_state : 0), gen,
           ctl_text(actor, sizeof actor, a->actor, ""), a->actor ? " " : "",
           ctl_text(authority, sizeof authority, a->authority, "unknown"),
           ctl_text(outcome, sizeof outcome, a->outcome, ""), times);
}

int ctl_cmd_audit(ctl *c, int argc, char **argv)
{
    static const struct option opts[] = {{"limit", required_argument, NULL, 'l'}, {0}};
    Buzz__Backfill__V1__AuditRequest req = BUZZ__BACKFILL__V1__AUDIT_REQUEST__INIT;
    long limit = 50;
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o != 'l')
            return ctl_usage_error(c, "audit: unknown option (see buzzctl audit --help)");
        if ((limit = ctl_parse_long(optarg, 1, 100000000)) < 0)
            return ctl_usage_error(c, "audit: --limit: '%.40s' is not a whole number >= 1", optarg);
    }
    if (optind < argc)
        req.id = argv[optind++];
    if (optind < argc)
        return ctl_usage_error(c, "audit: unexpected argument '%.40s'", argv[optind]);
    struct json_object *arr = c->json ? json_object_new_array() : NULL;
    long shown = 0;
    int rc = EXIT_OK;
    for (;;) {
        req.has_page_size = 1;
        req.page_size = (uint32_t)(limit - shown < AUDIT_PAGE ? limit - shown : AUDIT_PAGE);
        ProtobufCMessage *out = NULL;
        bfc_status st;
        bf_err err =
            ctl_call(c, &buzz__backfill__v1__admin__descriptor, "Audit", &req.base, &out, &st);
        if (err != BF_OK) {
            if (arr)
                json_object_put(arr);
            arr = NULL;
            rc = ctl_report(c, "audit", err, &st, NULL);
            if (out)
                protobuf_c_message_free_unpacked(out, NULL);
            break;
        }
        Buzz__Backfill__V1__AuditResponse *resp = (Buzz__Backfill__V1__AuditResponse *)out;
        for (size_t i = 0; i < resp->n_entries && shown < limit; i++, shown++) {
            if (arr)
                json_object_array_add(arr, ctl_json_message(&resp->entries[i]->base));
            else
                ops_audit_print(resp->entries[i]);
        }
        bool more = resp->has_next_before_seq && shown < limit && resp->n_entries > 0;
        req.has_before_seq = more;
        req.before_seq = more ? resp->next_before_seq : 0;
        protobuf_c_message_free_unpacked(out, NULL);
        if (!more)
            break;
    }
    if (arr) {
        struct json_object *doc = json_object_new_object();
        json_object_object_add(doc, "entries", arr);
        ctl_json_emit(doc);
    }
    return rc;
}

/* ---- whoami ------------------------------------------------------------------------------- */

int ctl_cmd_whoami(ctl *c, int argc, char **argv)
{
    (void)argv;
    if (argc > 1)
        return ctl_usage_error(c, "whoami: takes no arguments");
    Buzz__Backfill__V1__WhoAmIRequest req = BUZZ__BACKFILL__V1__WHO_AM_IREQUEST__INIT;
    ProtobufCMessage *out = NULL;
    bfc_status st;
    bf_err err =
        ctl_call(c, &buzz__backfill__v1__admin__descriptor, "WhoAmI", &req.base, &out, &st);
    int rc = EXIT_OK;
    if (err != BF_OK) {
        rc = ctl_report(c, "whoami", err, &st, NULL);
    } else if (c->json) {
        ctl_json_emit(ctl_json_message(out));
    } else {
        Buzz__Backfill__V1__WhoAmIResponse *r = (Buzz__Backfill__V1__WhoAmIResponse *)out;
        char buf[128];
        printf("actor:        %s\n",
               ctl_text(buf, sizeof buf, r->actor && r->actor[0] ? r->actor : NULL, "(none)"));
        printf("authority:    %s\n", ctl_text(buf, sizeof buf, r->authority, "unknown"));
        printf("capabilities:");
        for (size_t i = 0; i < r->n_capabilities; i++)
            printf(" %s", ctl_text(buf, sizeof buf, r->capabilities[i], ""));
        printf("\nroles:       ");
        for (size_t i = 0; i < r->n_roles; i++)
            printf(" %s", ctl_text(buf, sizeof buf, r->roles[i], ""));
        printf("%s\n", r->n_roles ? "  (informational)" : " (none)");
    }
    if (out)
        protobuf_c_message_free_unpacked(out, NULL);
    return rc;
}

/* ---- ready -------------------------------------------------------------------------------- */

static const char *ops_component_status(int s)
{
    switch (s) {
    case BUZZ__BACKFILL__V1__COMPONENT_STATUS__READY:
        return "ready";
    case BUZZ__BACKFILL__V1__COMPONENT_STATUS__NOT_READY:
        return "not ready";
    default:
        return "unknown";
    }
}

static void ops_ready_print(const Buzz__Backfill__V1__CheckResponse *r)
{
    printf("%s (auto-migrate %s, auto-backfill %s)\n",
           r->has_ready ? (r->ready ? "READY" : "NOT READY") : "READINESS UNKNOWN",
           r->has_auto_migrate ? (r->auto_migrate ? "on" : "off") : "unknown",
           r->has_auto_backfill ? (r->auto_backfill ? "on" : "off") : "unknown");
    char name[32], reason[256], id[BFC_CELL];
    for (size_t i = 0; i < r->n_components; i++)
        printf("  %-10s %-10s %s\n", ctl_text(name, sizeof name, r->components[i]->name, "?"),
               ops_component_status(r->components[i]->status),
               ctl_text(reason, sizeof reason, r->components[i]->reason, ""));
    for (size_t i = 0; i < r->n_gating; i++)
        printf("  gating: %s (%s)\n", ctl_text(id, sizeof id, r->gating[i]->id, "unknown"),
               r->gating[i]->has_state ? bfc_state_name(r->gating[i]->state) : "not registered");
}

/* Check until ready or total_ms is spent; unreachable servers are ridden over. */
static int ops_wait_ready(ctl *c, int64_t total_ms)
{
    int64_t deadline = ctl_now_ms() + total_ms;
    int rc = EXIT_UNAVAILABLE;
    bool reached = false;
    for (;;) {
        int64_t left = deadline - ctl_now_ms();
        if (left <= 0)
            break;
        int64_t wait = left < READY_POLL_MS ? left : READY_POLL_MS;
        Buzz__Backfill__V1__CheckRequest req = BUZZ__BACKFILL__V1__CHECK_REQUEST__INIT;
        req.has_wait_ms = 1;
        req.wait_ms = (uint32_t)wait;
        c->bo.timeout_ms = (int)wait + READY_WAIT_MARGIN_MS;
        bfc_close(c->client); /* the budget of the next attempt */
        c->client = NULL;
        ProtobufCMessage *out = NULL;
        bfc_status st;
        bf_err err =
            ctl_call(c, &buzz__backfill__v1__readiness__descriptor, "Check", &req.base, &out, &st);
        Buzz__Backfill__V1__CheckResponse *r = (Buzz__Backfill__V1__CheckResponse *)out;
        if (err == BF_OK && r != NULL) {
            reached = true;
            if (r->has_ready && r->ready) {
                if (c->json)
                    ctl_json_emit(ctl_json_message(out));
                else
                    ops_ready_print(r);
                protobuf_c_message_free_unpacked(out, NULL);
                return EXIT_OK;
            }
            rc = EXIT_NOT_READY;
            protobuf_c_message_free_unpacked(out, NULL);
            continue; /* the long poll returned early on a change, or its wait is over */
        }
        if (out)
            protobuf_c_message_free_unpacked(out, NULL);
        if (err == BF_ERR_UNAUTHENTICATED || err == BF_ERR_PERMISSION_DENIED)
            return ctl_report(c, "ready", err, &st, NULL); /* waiting cannot help */
        if (!reached)
            rc = EXIT_UNAVAILABLE;
        ctl_sleep_ms(left < 500 ? left : 500); /* not up yet: try again */
    }
    if (c->json) {
        struct json_object *doc = ctl_json_error("ready", rc, NULL, BF_ERR_TIMEOUT, NULL);
        ctl_json_emit(doc);
    } else {
        fprintf(stderr, "buzzctl ready: %s when the wait ran out\n",
                rc == EXIT_NOT_READY ? "not ready" : "server unreachable");
    }
    return rc;
}

int ctl_cmd_ready(ctl *c, int argc, char **argv)
{
    static const struct option opts[] = {{"wait", required_argument, NULL, 'w'},
                                         {"wait-ready", no_argument, NULL, 'W'},
                                         {"timeout", required_argument, NULL, 't'},
                                         {0}};
    Buzz__Backfill__V1__CheckRequest req = BUZZ__BACKFILL__V1__CHECK_REQUEST__INIT;
    bool wait_ready = false;
    int64_t total_ms = -1;
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o == 'w') {
            long long bare = 0;
            int64_t ms = ctl_parse_duration_ms(optarg, &bare);
            if (ms == -2)
                ms = bare <= 30 ? bare * 1000 : -1; /* a bare number is seconds */
            if (ms < 0 || ms > 30000)
                return ctl_usage_error(c, "ready: --wait: '%.40s' is not 0..30 seconds", optarg);
            req.has_wait_ms = 1;
            req.wait_ms = (uint32_t)ms;
        } else if (o == 'W') {
            wait_ready = true;
        } else if (o == 't') {
            if ((total_ms = ctl_parse_timeout("ready", optarg, false)) <= 0)
                return ctl_usage_error(
                    c, "ready: --timeout: '%.40s' is not a duration (e.g. 90s, 5m, 500ms)", optarg);
        } else {
            return ctl_usage_error(c, "ready: unknown option (see buzzctl ready --help)");
        }
    }
    if (optind < argc)
        return ctl_usage_error(c, "ready: unexpected argument '%.40s'", argv[optind]);
    if (total_ms > 0 && !wait_ready)
        return ctl_usage_error(c, "ready: --timeout DURATION goes with --wait-ready");
    if (wait_ready)
        return ops_wait_ready(c, total_ms > 0 ? total_ms : 5 * 60 * 1000);
    /* the server never waits past the call's deadline: without --timeout, budget the wait */
    if (req.has_wait_ms && c->bo.timeout_ms == 0 &&
        (int)req.wait_ms + READY_WAIT_MARGIN_MS > BFC_DEFAULT_TIMEOUT_MS)
        c->bo.timeout_ms = (int)req.wait_ms + READY_WAIT_MARGIN_MS;
    ProtobufCMessage *out = NULL;
    bfc_status st;
    bf_err err =
        ctl_call(c, &buzz__backfill__v1__readiness__descriptor, "Check", &req.base, &out, &st);
    int rc = EXIT_OK;
    if (err != BF_OK) {
        rc = ctl_report(c, "ready", err, &st, NULL);
    } else {
        Buzz__Backfill__V1__CheckResponse *r = (Buzz__Backfill__V1__CheckResponse *)out;
        if (c->json)
            ctl_json_emit(ctl_json_message(out));
        else
            ops_ready_print(r);
        rc = r->has_ready && r->ready ? EXIT_OK : EXIT_NOT_READY;
    }
    if (out)
        protobuf_c_message_free_unpacked(out, NULL);
    return rc;
}
