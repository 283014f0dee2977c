/*
 * buzzctl.c - the operator CLI of buzz-backfill. Every command is one or more calls to the
 * admin or readiness service through the generated stubs (libbuzz-backfill-client); nothing
 * here keeps or infers lifecycle state. Output is a table (or --json, the messages as sent),
 * and unknown values print as unknown. Text from the server is printed only through
 * bfc_printable() (or the projection, which uses it): no control characters reach the terminal.
 * The connection is opened by the first call, so usage errors never depend on the server.
 */
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include <sodium.h>

#include "buzz/backfill/v1/admin.pb-c.h"
#include "buzz/backfill/v1/readiness.pb-c.h"
#include "buzz/backfill/v1/rpc.pb-c.h"
#include "buzz/client.h"
#include "pbjson.h"
#include "projection.h"

int buzzctl_token_main(int argc, char **argv);

enum {
    EXIT_OK = 0,
    EXIT_ERROR = 1,
    EXIT_USAGE = 2,
    EXIT_CONFLICT = 3,
    EXIT_DENIED = 4,
    EXIT_NOT_FOUND = 5,
    EXIT_UNAVAILABLE = 6,
    EXIT_VALIDATION_FAILED = 7,
    EXIT_NOT_READY = 8,
    EXIT_CURRENT_STATE = 9,
};

#define READY_WAIT_MARGIN_MS 2000 /* budget beyond --wait for the answer to travel back */

typedef struct ctl {
    const char *url;
    char *token;
    bool json;
    bool has_request_id;
    uint8_t request_id[BFC_REQUEST_ID_LEN];
    bfc_options bo; /* bo.timeout_ms 0: no --timeout given */
    bfc_client *client;
} ctl;

/* Server text for a terminal (see bfc_printable); none when the server sent nothing. */
static const char *text(char *buf, size_t cap, const char *s, const char *none)
{
    if (s == NULL)
        return none;
    bfc_printable(buf, cap, s);
    return buf;
}

static void usage(FILE *f)
{
    fputs(
        "usage: buzzctl [options] <command> [arguments]\n"
        "\n"
        "Operate durable backfills through buzz-backfilld's admin API.\n"
        "\n"
        "commands:\n"
        "  list [--state STATE] [--limit N]   backfills, ordered by id\n"
        "  get ID                             one backfill in detail\n"
        "  start ID | pause ID | resume ID | retry ID\n"
        "                                     lifecycle controls (idempotent per request id)\n"
        "  validate ID                        run the definition's read-only validation\n"
        "  audit [ID] [--limit N]             audit trail, newest first\n"
        "  whoami                             the identity the server sees\n"
        "  ready [--wait SECONDS]             readiness as the relay sees it; --wait (0..30)\n"
        "                                     returns early when something changes\n"
        "  token keygen|mint|inspect ...      capability tokens (see 'buzzctl token --help')\n"
        "\n"
        "options:\n"
        "  -u, --url URL          server: ipc:///path, tcp://host:port, tls+tcp://host:port\n"
        "                         (default $BUZZ_BACKFILL_URL)\n"
        "  -t, --token TOKEN      capability token (default $BUZZ_BACKFILL_TOKEN); not needed\n"
        "                         on an ipc:// listener with boundary authority\n"
        "      --token-file FILE  read the token from FILE\n"
        "      --timeout MS       budget of one call, retries included (default 10000; for\n"
        "                         ready --wait: the wait plus 2000)\n"
        "      --request-id HEX   32 hex digits: repeat an earlier control or validate request\n"
        "                         (e.g. after a lost response) instead of making a new one;\n"
        "                         every control and validate prints its request id\n"
        "      --tls-ca FILE      CA certificate for tls+tcp://\n"
        "      --tls-server-name NAME  name to verify for tls+tcp://\n"
        "      --json             print the server's messages as JSON\n"
        "  -h, --help             this help\n"
        "\n"
        "exit codes: 0 ok, 1 error, 2 usage, 3 conflict (the current state is printed),\n"
        "4 unauthenticated or permission denied, 5 not found, 6 server unavailable or timed out,\n"
        "7 validation failed, 8 not ready, 9 validation did not run (current state).\n",
        f);
}

static int exit_for(bf_err err)
{
    switch (err) {
    case BF_OK:
        return EXIT_OK;
    case BF_ERR_CONFLICT:
        return EXIT_CONFLICT;
    case BF_ERR_UNAUTHENTICATED:
    case BF_ERR_PERMISSION_DENIED:
        return EXIT_DENIED;
    case BF_ERR_NOT_FOUND:
        return EXIT_NOT_FOUND;
    case BF_ERR_UNAVAILABLE:
    case BF_ERR_TIMEOUT:
        return EXIT_UNAVAILABLE;
    case BF_ERR_INVALID_ARGUMENT:
        return EXIT_USAGE;
    default:
        return EXIT_ERROR;
    }
}

/* Report a failed call on stderr: the server's typed status, or the transport's reason. */
static int report(const char *what, bf_err err, const bfc_status *st)
{
    if (st->answered) {
        /* the server's message often is the code's own name: print it once */
        const char *code = bfc_code_name(st->code);
        bool same = strcmp(code, st->message) == 0 || st->message[0] == '\0';
        fprintf(stderr, "buzzctl %s: %s%s%s%s%s\n", what, code, same ? "" : ": ",
                same ? "" : st->message, st->detail[0] ? "\n  " : "", st->detail);
    } else {
        /* bf_err_str(UNAVAILABLE) speaks of the database; here the server did not answer */
        fprintf(stderr, "buzzctl %s: %s%s%s\n", what,
                err == BF_ERR_UNAVAILABLE ? "server unavailable" : bf_err_str(err),
                st->transport_detail[0] ? ": " : "", st->transport_detail);
    }
    return exit_for(err);
}

/* After a failed control or validate that was sent: its request ID, so that the outcome of a
 * request whose answer was lost can be learnt by repeating it (--request-id). */
static void report_request_id(const bfc_status *st)
{
    if (st->attempts == 0)
        return;
    bool unknown = !st->answered || st->code == BUZZ__BACKFILL__V1__STATUS_CODE__DEADLINE_EXCEEDED;
    fprintf(stderr, "request id: %s%s\n", st->request_id,
            unknown ? " (outcome unknown: repeat with --request-id to learn it)" : "");
}

/* One call; the connection is opened by the first. */
static bf_err call(ctl *c, const ProtobufCServiceDescriptor *svc, const char *method,
                   const ProtobufCMessage *in, ProtobufCMessage **out, bfc_status *st)
{
    if (c->client == NULL) {
        memset(st, 0, sizeof *st);
        bf_err err =
            bfc_open(&c->client, c->url, &c->bo, st->transport_detail, sizeof st->transport_detail);
        if (err != BF_OK) {
            st->transport = err;
            return err;
        }
    }
    if (c->has_request_id)
        bfc_set_next_request_id(c->client, c->request_id);
    return bfc_call(c->client, svc, method, in, out, st);
}

/* ---- output ------------------------------------------------------------------------------ */

static void print_detail(const Buzz__Backfill__V1__Backfill *b)
{
    bfc_view v;
    bfc_project(b, &v);
    char buf[BFC_DETAIL_MAX];
    const Buzz__Backfill__V1__Definition *d = b->definition;
    printf("id:          %s\n", v.id);
    printf("state:       %s%s\n", v.state, v.gating ? "  (gates readiness)" : "");
    printf("progress:    %s\n", v.progress);
    printf("rate:        %s   eta: %s\n", v.rate, v.eta);
    printf("checkpoint:  %s\n", v.checkpoint);
    printf("bound:       %s\n", v.bound);
    printf("generation:  %s\n", v.generation);
    printf("claim:       %s\n", v.claim);
    printf("retry:       %s\n", v.retry);
    printf("error:       %s\n", v.error);
    printf("validation:  %s\n", v.validation);
    if (b->last_validation != NULL && b->last_validation->detail != NULL)
        printf("             %s\n", text(buf, sizeof buf, b->last_validation->detail, ""));
    printf("updated:     %s\n", v.updated);
    if (d != NULL) {
        printf("key types:   %s\n", text(buf, sizeof buf, d->key_types, "unknown"));
        if (d->has_batch_size)
            printf("batch size:  %u\n", d->batch_size);
        if (d->description != NULL && d->description[0])
            printf("description: %s\n", text(buf, sizeof buf, d->description, ""));
        if (d->revision != NULL && d->revision[0])
            printf("revision:    %s\n", text(buf, sizeof buf, d->revision, ""));
    }
}

static void print_row_header(void)
{
    printf("%-36s %-11s %-40s %-14s %-6s %s\n", "ID", "STATE", "PROGRESS", "RATE", "GEN", "CLAIM");
}

static void print_row(const Buzz__Backfill__V1__Backfill *b)
{
    bfc_view v;
    bfc_project(b, &v);
    printf("%-36s %-11s %-40s %-14s %-6s %s\n", v.id, v.state, v.progress, v.rate, v.generation,
           v.claim);
}

static void print_json(const ProtobufCMessage *m)
{
    pbjson_print(stdout, m);
    fputc('\n', stdout);
}

/* ---- commands ---------------------------------------------------------------------------- */

static int parse_state(const char *s, Buzz__Backfill__V1__State *out)
{
    for (int i = 1; i <= 7; i++) {
        if (strcmp(s, bfc_state_name(i)) == 0) {
            *out = (Buzz__Backfill__V1__State)i;
            return 0;
        }
    }
    return -1;
}

static int cmd_list(ctl *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"state", required_argument, NULL, 's'}, {"limit", required_argument, NULL, 'l'}, {0}};
    Buzz__Backfill__V1__ListRequest req = BUZZ__BACKFILL__V1__LIST_REQUEST__INIT;
    long limit = 1000;
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o == 's' && parse_state(optarg, &req.state) == 0) {
            req.has_state = 1;
        } else if (o == 'l' && (limit = strtol(optarg, NULL, 10)) > 0) {
        } else {
            fputs("usage: buzzctl list [--state STATE] [--limit N]\n", stderr);
            return EXIT_USAGE;
        }
    }
    char *page = NULL;
    long shown = 0;
    bool headed = false;
    int rc = EXIT_OK;
    do {
        req.page_token = page;
        req.has_page_size = 1;
        req.page_size = (uint32_t)(limit - shown < 1000 ? limit - shown : 1000);
        ProtobufCMessage *out = NULL;
        bfc_status st;
        bf_err err = call(c, &buzz__backfill__v1__admin__descriptor, "List", &req.base, &out, &st);
        free(page);
        page = NULL;
        if (err != BF_OK) {
            rc = report("list", err, &st);
            if (out)
                protobuf_c_message_free_unpacked(out, NULL);
            break;
        }
        Buzz__Backfill__V1__ListResponse *resp = (Buzz__Backfill__V1__ListResponse *)out;
        if (!c->json && !headed)
            print_row_header();
        headed = true;
        for (size_t i = 0; i < resp->n_backfills; i++, shown++) {
            if (c->json)
                print_json(&resp->backfills[i]->base);
            else
                print_row(resp->backfills[i]);
        }
        if (resp->next_page_token != NULL && shown < limit)
            page = strdup(resp->next_page_token);
        protobuf_c_message_free_unpacked(out, NULL);
    } while (page != NULL);
    return rc;
}

static int need_id(int argc, char **argv, const char *cmd, const char **id)
{
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: buzzctl %s ID\n", cmd);
        return EXIT_USAGE;
    }
    *id = argv[1];
    return EXIT_OK;
}

static int cmd_get(ctl *c, int argc, char **argv)
{
    const char *id;
    int rc = need_id(argc, argv, "get", &id);
    if (rc != EXIT_OK)
        return rc;
    Buzz__Backfill__V1__GetRequest req = BUZZ__BACKFILL__V1__GET_REQUEST__INIT;
    req.id = (char *)id;
    ProtobufCMessage *out = NULL;
    bfc_status st;
    bf_err err = call(c, &buzz__backfill__v1__admin__descriptor, "Get", &req.base, &out, &st);
    if (err != BF_OK) {
        rc = report("get", err, &st);
    } else {
        Buzz__Backfill__V1__GetResponse *resp = (Buzz__Backfill__V1__GetResponse *)out;
        if (c->json)
            print_json(out);
        else if (resp->backfill != NULL)
            print_detail(resp->backfill);
    }
    if (out)
        protobuf_c_message_free_unpacked(out, NULL);
    return rc;
}

static int cmd_control(ctl *c, int argc, char **argv, const char *method)
{
    const char *id;
    int rc = need_id(argc, argv, argv[0], &id);
    if (rc != EXIT_OK)
        return rc;
    Buzz__Backfill__V1__ControlRequest req = BUZZ__BACKFILL__V1__CONTROL_REQUEST__INIT;
    req.id = (char *)id;
    ProtobufCMessage *out = NULL;
    bfc_status st;
    bf_err err = call(c, &buzz__backfill__v1__admin__descriptor, method, &req.base, &out, &st);
    Buzz__Backfill__V1__ControlResponse *resp = (Buzz__Backfill__V1__ControlResponse *)out;
    if (c->json && resp != NULL)
        print_json(out);
    if (err != BF_OK) {
        rc = report(argv[0], err, &st);
        report_request_id(&st);
        if (!c->json && resp != NULL && resp->backfill != NULL) /* a conflict: current state */
            print_detail(resp->backfill);
    } else if (!c->json && resp != NULL) {
        const char *outcome =
            resp->outcome == BUZZ__BACKFILL__V1__CONTROL_OUTCOME__ACCEPTED    ? "accepted"
            : resp->outcome == BUZZ__BACKFILL__V1__CONTROL_OUTCOME__CONVERGED ? "converged"
                                                                              : "unknown";
        char gen[24] = "unknown";
        if (resp->has_generation)
            snprintf(gen, sizeof gen, "%" PRId64, resp->generation);
        printf("%s %s: %s, %s -> %s, generation %s%s\n", argv[0], id, outcome,
               bfc_state_name(resp->has_prior_state ? (int)resp->prior_state : 0),
               bfc_state_name(resp->has_resulting_state ? (int)resp->resulting_state : 0), gen,
               resp->has_replayed && resp->replayed ? " (replayed)" : "");
        printf("request id: %s\n", st.request_id);
    }
    if (out)
        protobuf_c_message_free_unpacked(out, NULL);
    return rc;
}

static int cmd_validate(ctl *c, int argc, char **argv)
{
    const char *id;
    int rc = need_id(argc, argv, "validate", &id);
    if (rc != EXIT_OK)
        return rc;
    Buzz__Backfill__V1__ValidateRequest req = BUZZ__BACKFILL__V1__VALIDATE_REQUEST__INIT;
    req.id = (char *)id;
    ProtobufCMessage *out = NULL;
    bfc_status st;
    bf_err err = call(c, &buzz__backfill__v1__admin__descriptor, "Validate", &req.base, &out, &st);
    if (err != BF_OK) {
        rc = report("validate", err, &st);
        report_request_id(&st);
    } else {
        Buzz__Backfill__V1__ValidateResponse *resp = (Buzz__Backfill__V1__ValidateResponse *)out;
        if (c->json) {
            print_json(out);
        } else {
            printf("validate %s: %s (evaluated %s)%s%s\n", id, bfc_outcome_name(resp->outcome),
                   bfc_state_name(resp->has_evaluated_state ? (int)resp->evaluated_state : 0),
                   resp->has_completed && resp->completed ? ", completed" : "",
                   resp->has_replayed && resp->replayed ? " (replayed)" : "");
            char buf[BFC_DETAIL_MAX];
            if (resp->detail != NULL)
                printf("  %s\n", text(buf, sizeof buf, resp->detail, ""));
            printf("request id: %s\n", st.request_id);
        }
        rc = resp->outcome == BUZZ__BACKFILL__V1__VALIDATION_OUTCOME__SUCCESS ? EXIT_OK
             : resp->outcome == BUZZ__BACKFILL__V1__VALIDATION_OUTCOME__FAILURE
                 ? EXIT_VALIDATION_FAILED
                 : EXIT_CURRENT_STATE;
    }
    if (out)
        protobuf_c_message_free_unpacked(out, NULL);
    return rc;
}

/* UTC, to the second: "2025-01-01T12:00:00Z". */
static void utc_time(char *buf, size_t cap, int64_t us)
{
    time_t t = (time_t)(us / 1000000);
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL || strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, cap, "unknown");
}

/* " (x5000 from 2025-...Z to 2025-...Z)" for a coalesced row, "" for a single event. */
static void audit_times(char *buf, size_t cap, const Buzz__Backfill__V1__AuditEntry *a)
{
    buf[0] = '\0';
    bool counted = a->has_count && a->count > 1;
    if (!counted && !a->has_window_start_us)
        return;
    char n[32] = "", from[32] = "unknown", to[32] = "unknown";
    if (a->has_count)
        snprintf(n, sizeof n, "x%" PRId64 " ", a->count);
    if (a->has_window_start_us)
        utc_time(from, sizeof from, a->window_start_us);
    if (a->has_window_end_us)
        utc_time(to, sizeof to, a->window_end_us);
    snprintf(buf, cap, " (%sfrom %s to %s)", n, from, to);
}

static int cmd_audit(ctl *c, int argc, char **argv)
{
    static const struct option opts[] = {{"limit", required_argument, NULL, 'l'}, {0}};
    Buzz__Backfill__V1__AuditRequest req = BUZZ__BACKFILL__V1__AUDIT_REQUEST__INIT;
    long limit = 50;
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o != 'l' || (limit = strtol(optarg, NULL, 10)) < 1 || limit > 1000) {
            fputs("usage: buzzctl audit [ID] [--limit 1..1000]\n", stderr);
            return EXIT_USAGE;
        }
    }
    if (optind < argc)
        req.id = argv[optind];
    req.has_page_size = 1;
    req.page_size = (uint32_t)limit;
    ProtobufCMessage *out = NULL;
    bfc_status st;
    bf_err err = call(c, &buzz__backfill__v1__admin__descriptor, "Audit", &req.base, &out, &st);
    int rc = EXIT_OK;
    if (err != BF_OK) {
        rc = report("audit", err, &st);
    } else {
        Buzz__Backfill__V1__AuditResponse *resp = (Buzz__Backfill__V1__AuditResponse *)out;
        for (size_t i = 0; i < resp->n_entries; i++) {
            const Buzz__Backfill__V1__AuditEntry *a = resp->entries[i];
            if (c->json) {
                print_json(&a->base);
                continue;
            }
            char gen[24] = "-", id[BFC_CELL], action[32], actor[128], authority[128];
            char outcome[BFC_DETAIL_MAX], times[96] = "";
            if (a->has_generation)
                snprintf(gen, sizeof gen, "%" PRId64, a->generation);
            audit_times(times, sizeof times, a);
            printf("#%-4" PRId64 " %-28s %-9s %-10s -> %-10s gen %-4s %s%s[%s] %s%s\n", a->seq,
                   text(id, sizeof id, a->backfill_id, "-"),
                   text(action, sizeof action, a->action, "-"),
                   bfc_state_name(a->has_prior_state ? (int)a->prior_state : 0),
                   bfc_state_name(a->has_resulting_state ? (int)a->resulting_state : 0), gen,
                   text(actor, sizeof actor, a->actor, ""), a->actor ? " " : "",
                   text(authority, sizeof authority, a->authority, "unknown"),
                   text(outcome, sizeof outcome, a->outcome, ""), times);
        }
    }
    if (out)
        protobuf_c_message_free_unpacked(out, NULL);
    return rc;
}

static int cmd_whoami(ctl *c, int argc, char **argv)
{
    Buzz__Backfill__V1__WhoAmIRequest req = BUZZ__BACKFILL__V1__WHO_AM_IREQUEST__INIT;
    ProtobufCMessage *out = NULL;
    bfc_status st;
    bf_err err = call(c, &buzz__backfill__v1__admin__descriptor, "WhoAmI", &req.base, &out, &st);
    int rc = EXIT_OK;
    if (err != BF_OK) {
        rc = report("whoami", err, &st);
    } else if (c->json) {
        print_json(out);
    } else {
        Buzz__Backfill__V1__WhoAmIResponse *r = (Buzz__Backfill__V1__WhoAmIResponse *)out;
        char buf[128];
        printf("actor:        %s\n",
               text(buf, sizeof buf, r->actor && r->actor[0] ? r->actor : NULL, "(none)"));
        printf("authority:    %s\n", text(buf, sizeof buf, r->authority, "unknown"));
        printf("capabilities:");
        for (size_t i = 0; i < r->n_capabilities; i++)
            printf(" %s", text(buf, sizeof buf, r->capabilities[i], ""));
        printf("\nroles:       ");
        for (size_t i = 0; i < r->n_roles; i++)
            printf(" %s", text(buf, sizeof buf, r->roles[i], ""));
        printf("%s\n", r->n_roles ? "  (informational)" : " (none)");
    }
    if (out)
        protobuf_c_message_free_unpacked(out, NULL);
    return rc;
}

static const char *component_status(int s)
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

static int cmd_ready(ctl *c, int argc, char **argv)
{
    static const struct option opts[] = {{"wait", required_argument, NULL, 'w'}, {0}};
    Buzz__Backfill__V1__CheckRequest req = BUZZ__BACKFILL__V1__CHECK_REQUEST__INIT;
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *end = NULL;
        long s = o == 'w' ? strtol(optarg, &end, 10) : -1;
        if (s < 0 || s > 30 || end == optarg || *end != '\0') {
            fputs("usage: buzzctl ready [--wait SECONDS (0..30)]\n", stderr);
            return EXIT_USAGE;
        }
        req.has_wait_ms = 1;
        req.wait_ms = (uint32_t)(s * 1000);
    }
    /* the server never waits past the call's deadline: without --timeout, budget the wait */
    if (req.has_wait_ms && c->bo.timeout_ms == 0 &&
        (int)req.wait_ms + READY_WAIT_MARGIN_MS > BFC_DEFAULT_TIMEOUT_MS)
        c->bo.timeout_ms = (int)req.wait_ms + READY_WAIT_MARGIN_MS;
    ProtobufCMessage *out = NULL;
    bfc_status st;
    bf_err err = call(c, &buzz__backfill__v1__readiness__descriptor, "Check", &req.base, &out, &st);
    int rc = EXIT_OK;
    if (err != BF_OK) {
        rc = report("ready", err, &st);
    } else {
        Buzz__Backfill__V1__CheckResponse *r = (Buzz__Backfill__V1__CheckResponse *)out;
        if (c->json) {
            print_json(out);
        } else {
            printf("%s (auto-migrate %s, auto-backfill %s)\n",
                   r->has_ready && r->ready ? "READY" : "NOT READY",
                   r->has_auto_migrate ? (r->auto_migrate ? "on" : "off") : "unknown",
                   r->has_auto_backfill ? (r->auto_backfill ? "on" : "off") : "unknown");
            char name[32], reason[256], id[BFC_CELL];
            for (size_t i = 0; i < r->n_components; i++)
                printf("  %-10s %-10s %s\n", text(name, sizeof name, r->components[i]->name, "?"),
                       component_status(r->components[i]->status),
                       text(reason, sizeof reason, r->components[i]->reason, ""));
            for (size_t i = 0; i < r->n_gating; i++)
                printf("  gating: %s (%s)\n", text(id, sizeof id, r->gating[i]->id, "unknown"),
                       r->gating[i]->has_state ? bfc_state_name(r->gating[i]->state)
                                               : "not registered");
        }
        rc = r->has_ready && r->ready ? EXIT_OK : EXIT_NOT_READY;
    }
    if (out)
        protobuf_c_message_free_unpacked(out, NULL);
    return rc;
}

/* ---- main -------------------------------------------------------------------------------- */

#define TOKEN_FILE_MAX 8192

/* The token in a --token-file: its first line. NULL with a short reason in why when the file
 * cannot be read, is too large, holds a NUL byte or has an empty first line: each of those
 * would otherwise send a token other than the one in the file (a shorter one, or none and so
 * no credential at all), never a refusal the operator could understand. */
static char *read_token_file(const char *path, const char **why)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        *why = "could not read it";
        return NULL;
    }
    char *buf = calloc(1, TOKEN_FILE_MAX + 1);
    if (buf == NULL) {
        fclose(f);
        *why = "out of memory";
        return NULL;
    }
    size_t n = fread(buf, 1, TOKEN_FILE_MAX + 1, f);
    bool failed = ferror(f) != 0;
    fclose(f);
    char *token = NULL;
    if (failed) {
        *why = "could not read it";
    } else if (n > TOKEN_FILE_MAX) {
        *why = "it is larger than 8 KiB: not a token file";
    } else if (memchr(buf, '\0', n) != NULL) {
        *why = "it holds a NUL byte";
    } else {
        buf[strcspn(buf, "\r\n")] = '\0';
        if (buf[0] == '\0')
            *why = "it is empty (its first line holds no token)";
        else if ((token = strdup(buf)) == NULL)
            *why = "out of memory";
    }
    sodium_memzero(buf, TOKEN_FILE_MAX + 1);
    free(buf);
    return token;
}

/* Exactly 2 * BFC_REQUEST_ID_LEN hex digits (either case), nothing else: no sign, no "0x", no
 * spaces (sscanf's %x took all of those). sodium_hex2bin() without an ignore set and without
 * hex_end refuses any other character. out is written only on success. */
static int parse_request_id(const char *hex, uint8_t out[BFC_REQUEST_ID_LEN])
{
    size_t len = strlen(hex);
    if (len != 2 * BFC_REQUEST_ID_LEN)
        return -1;
    uint8_t id[BFC_REQUEST_ID_LEN];
    size_t n = 0;
    if (sodium_hex2bin(id, sizeof id, hex, len, NULL, &n, NULL) != 0 || n != sizeof id)
        return -1;
    memcpy(out, id, sizeof id);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "token") == 0)
        return buzzctl_token_main(argc - 1, argv + 1);
    static const struct option opts[] = {
        {"url", required_argument, NULL, 'u'},
        {"token", required_argument, NULL, 't'},
        {"token-file", required_argument, NULL, 'T'},
        {"timeout", required_argument, NULL, 'o'},
        {"request-id", required_argument, NULL, 'r'},
        {"tls-ca", required_argument, NULL, 'c'},
        {"tls-server-name", required_argument, NULL, 'n'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    ctl c = {.url = getenv("BUZZ_BACKFILL_URL")};
    const char *env_token = getenv("BUZZ_BACKFILL_TOKEN");
    c.token = env_token ? strdup(env_token) : NULL;
    bool env_empty = env_token != NULL && env_token[0] == '\0';
    int o;
    while ((o = getopt_long(argc, argv, "+u:t:h", opts, NULL)) != -1) {
        switch (o) {
        case 'u':
            c.url = optarg;
            break;
        case 't':
            free(c.token);
            env_empty = false;
            if (optarg[0] == '\0') {
                fputs("buzzctl: --token is empty: pass a token, or no --token on an ipc:// "
                      "listener with boundary authority\n",
                      stderr);
                return EXIT_USAGE;
            }
            c.token = strdup(optarg);
            break;
        case 'T': {
            free(c.token);
            env_empty = false;
            const char *why = "";
            if ((c.token = read_token_file(optarg, &why)) == NULL) {
                fprintf(stderr, "buzzctl: token file %s: %s\n", optarg, why);
                return EXIT_USAGE;
            }
            break;
        }
        case 'o': {
            char *end = NULL;
            long ms = strtol(optarg, &end, 10);
            if (end == optarg || *end != '\0' || ms < 1 || ms > INT_MAX) {
                fputs("buzzctl: --timeout needs a positive number of milliseconds\n", stderr);
                free(c.token);
                return EXIT_USAGE;
            }
            c.bo.timeout_ms = (int)ms;
            break;
        }
        case 'r':
            if (parse_request_id(optarg, c.request_id) != 0) {
                fputs("buzzctl: --request-id needs exactly 32 hex digits (0-9, a-f)\n", stderr);
                free(c.token);
                return EXIT_USAGE;
            }
            c.has_request_id = true;
            break;
        case 'c':
            c.bo.tls_ca_file = optarg;
            break;
        case 'n':
            c.bo.tls_server_name = optarg;
            break;
        case 'j':
            c.json = true;
            break;
        case 'h':
            usage(stdout);
            return EXIT_OK;
        default:
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (env_empty) {
        /* set but empty (an unset variable expanded, a failed command substitution): the
         * operator meant a credential; sending none could mean boundary authority instead */
        fputs("buzzctl: BUZZ_BACKFILL_TOKEN is set but empty: set a token or unset it\n", stderr);
        free(c.token);
        return EXIT_USAGE;
    }
    if (optind >= argc) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (c.url == NULL || c.url[0] == '\0') {
        fputs("buzzctl: no server: pass --url or set BUZZ_BACKFILL_URL\n", stderr);
        return EXIT_USAGE;
    }
    char **sub = argv + optind;
    int subc = argc - optind;
    static const struct {
        const char *name;
        const char *method;
    } controls[] = {
        {"start", "Start"}, {"pause", "Pause"}, {"resume", "Resume"}, {"retry", "Retry"}};
    c.bo.token = c.token;
    if (strcmp(sub[0], "ready") == 0)
        c.bo.retries = -1; /* a readiness wait is one long attempt */
    /* subcommand options are parsed from sub[1] on; 0 (not 1) makes getopt reinitialise, so
     * the "+" (stop at the first operand) of the global options does not carry over and
     * "audit ID --limit N" sees its --limit */
    optind = 0;
    int rc = -1;
    if (strcmp(sub[0], "list") == 0)
        rc = cmd_list(&c, subc, sub);
    else if (strcmp(sub[0], "get") == 0)
        rc = cmd_get(&c, subc, sub);
    else if (strcmp(sub[0], "validate") == 0)
        rc = cmd_validate(&c, subc, sub);
    else if (strcmp(sub[0], "audit") == 0)
        rc = cmd_audit(&c, subc, sub);
    else if (strcmp(sub[0], "whoami") == 0)
        rc = cmd_whoami(&c, subc, sub);
    else if (strcmp(sub[0], "ready") == 0)
        rc = cmd_ready(&c, subc, sub);
    for (size_t i = 0; rc < 0 && i < sizeof controls / sizeof controls[0]; i++)
        if (strcmp(sub[0], controls[i].name) == 0)
            rc = cmd_control(&c, subc, sub, controls[i].method);
    if (rc < 0) {
        fprintf(stderr, "buzzctl: unknown command '%.40s' (see buzzctl --help)\n", sub[0]);
        rc = EXIT_USAGE;
    }
    bfc_close(c.client);
    free(c.token);
    return rc;
}
