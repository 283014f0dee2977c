/*
 * buzzctl_preflight.c - buzzctl preflight [ID]...: Admin.Preflight of a running daemon, the
 * checks `buzz-backfilld preflight` runs (docs/definitions.md "The preflight"), with its
 * output and exit codes: one line per definition, "ok    ID: report" or
 * "FAIL  ID: error: report"; exit 0 when every one passed, 1 when one failed, 2 for a usage
 * error or an ID the daemon has no definition for. A call that fails has the exit code of any
 * buzzctl call (4 refused, 6 unavailable or timed out).
 *
 * IDs go to the server PREFLIGHT_IDS_PER_CALL at a time (its cap); without IDs every page of
 * the daemon's registry is asked for in turn. Lines are printed as each answer arrives;
 * --json prints one document, {"results":[...]}, once every answer is in.
 */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buzz/backfill/v1/admin.pb-c.h"
#include "buzzctl.h"

#define PREFLIGHT_IDS_PER_CALL 64    /* the server's cap on the IDs of one request */
#define PREFLIGHT_TIMEOUT_MS   60000 /* default budget of one call: up to 64 preflights */
#define PREFLIGHT_PAGES_MAX    16384 /* pages followed (a registry's most definitions) */

typedef struct preflight_run {
    ctl *c;
    struct json_object *results; /* --json */
    int failed;
} preflight_run;

static void preflight_print(const Buzz__Backfill__V1__PreflightResult *r)
{
    char id[BFC_DETAIL_MAX], msg[BFC_MESSAGE_MAX], report[BFC_DETAIL_MAX];
    const char *shown = ctl_text(id, sizeof id, r->id, "unknown");
    const char *text = ctl_text(report, sizeof report, r->report, "");
    const char *why = ctl_text(msg, sizeof msg, r->message, "failed");
    if (r->has_ok && r->ok)
        printf("ok    %s: %s\n", shown, text);
    else if (strncmp(text, why, strlen(why)) == 0) /* "prerequisite not met: no index ..." */
        printf("FAIL  %s: %s\n", shown, text);
    else
        printf("FAIL  %s: %s: %s\n", shown, why, text);
}

/* One call; its results printed or kept. Returns EXIT_OK or the failed call's exit code; the
 * next page token (strdup'd) in *next when there is one. */
static int preflight_call(preflight_run *run, Buzz__Backfill__V1__PreflightRequest *req,
                          char **next)
{
    ProtobufCMessage *out = NULL;
    bfc_status st;
    bf_err err = ctl_call(run->c, &buzz__backfill__v1__admin__descriptor, "Preflight", &req->base,
                          &out, &st);
    Buzz__Backfill__V1__PreflightResponse *resp = (Buzz__Backfill__V1__PreflightResponse *)out;
    int rc = EXIT_OK;
    if (err != BF_OK || resp == NULL) {
        /* an ID the daemon does not have: exit 2, as `buzz-backfilld preflight` */
        if (err == BF_ERR_NOT_FOUND)
            err = BF_ERR_INVALID_ARGUMENT;
        rc = ctl_report(run->c, "preflight", err == BF_OK ? BF_ERR_IO : err, &st, NULL);
    } else {
        for (size_t i = 0; i < resp->n_results; i++) {
            const Buzz__Backfill__V1__PreflightResult *r = resp->results[i];
            if (!(r->has_ok && r->ok))
                run->failed++;
            if (run->c->json)
                json_object_array_add(run->results, ctl_json_message(&r->base));
            else
                preflight_print(r);
        }
        fflush(stdout);
        if (resp->next_page_token != NULL && (*next = strdup(resp->next_page_token)) == NULL) {
            fputs("buzzctl preflight: out of memory\n", stderr);
            rc = EXIT_ERROR;
        }
    }
    if (out)
        protobuf_c_message_free_unpacked(out, NULL);
    return rc;
}

int ctl_cmd_preflight(ctl *c, int argc, char **argv)
{
    /* a stable ID starts with a letter: anything else is an option this command lacks */
    int first = argc > 1 && strcmp(argv[1], "--") == 0 ? 2 : 1;
    for (int i = first; i < argc; i++)
        if (argv[i][0] == '-')
            return ctl_usage_error(c,
                                   "preflight: unknown option '%.40s' (see buzzctl preflight "
                                   "--help)",
                                   argv[i]);
    if (c->bo.timeout_ms == 0)
        c->bo.timeout_ms = PREFLIGHT_TIMEOUT_MS;
    preflight_run run = {.c = c};
    if (c->json && (run.results = json_object_new_array()) == NULL) {
        fputs("buzzctl preflight: out of memory\n", stderr);
        return EXIT_ERROR;
    }
    int rc = EXIT_OK;
    Buzz__Backfill__V1__PreflightRequest req = BUZZ__BACKFILL__V1__PREFLIGHT_REQUEST__INIT;
    if (first < argc) {
        for (int i = first; i < argc && rc == EXIT_OK; i += PREFLIGHT_IDS_PER_CALL) {
            int n = argc - i < PREFLIGHT_IDS_PER_CALL ? argc - i : PREFLIGHT_IDS_PER_CALL;
            req.n_ids = (size_t)n;
            req.ids = argv + i;
            char *next = NULL;
            rc = preflight_call(&run, &req, &next);
            free(next); /* a named set has no pages */
        }
    } else {
        char *token = NULL;
        for (long page = 0; rc == EXIT_OK && page < PREFLIGHT_PAGES_MAX; page++) {
            req.page_token = token;
            char *next = NULL;
            rc = preflight_call(&run, &req, &next);
            /* a token that does not move on would ask for the same page forever */
            bool stuck = next != NULL && token != NULL && strcmp(next, token) == 0;
            free(token);
            token = next;
            if (token == NULL)
                break;
            if (stuck && rc == EXIT_OK) {
                fputs("buzzctl preflight: the server repeated its page token\n", stderr);
                rc = EXIT_ERROR;
            }
        }
        free(token);
    }
    if (rc == EXIT_OK && c->json) {
        struct json_object *doc = json_object_new_object();
        json_object_object_add(doc, "results", run.results);
        run.results = NULL;
        ctl_json_emit(doc);
    }
    json_object_put(run.results);
    if (rc == EXIT_OK && run.failed > 0)
        rc = EXIT_ERROR;
    return rc;
}
