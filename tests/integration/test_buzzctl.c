/*
 * test_buzzctl.c - the buzzctl binary against a scripted server: a bare nng REP socket in this
 * process that receives buzzctl's request envelope, checks it, and answers (or does not) with
 * a response written here. No daemon and no PostgreSQL: what is tested is what buzzctl sends
 * and prints.
 *
 * Guards proved (each removal fails a test here):
 * - test_lost_answer_prints_request_id: the request-id line of ctl_report() after a failed
 *   control; without it an operator whose answer was lost cannot learn the outcome with
 *   --request-id.
 * - test_server_text_is_made_printable: bfc_printable() in the projection and in every direct
 *   print of server text, and the C1 escaping of ctl_json_emit(); without them a server (or
 *   anyone who got a string into a stored backfill or audit row) writes terminal control
 *   sequences.
 * - test_progress_counts_keys_passed: project_progress() measuring progress, rate and ETA in
 *   keys passed (rows_covered), the rate measured between two reads, no ETA without them.
 * - test_ready_wait_gets_its_budget: the timeout raised for ready --wait; without it the server
 *   is told to give up after the default 10 s whatever --wait says.
 * - test_usage_errors_need_no_server: the connection opened by the first call; without it a
 *   usage error is reported as "server unavailable" (exit 6) when no server runs.
 * - test_bad_token_sources_are_errors: read_token_file() refusing an empty token file, one with
 *   a NUL byte, and the refusal of an empty --token; without them buzzctl sends no token (or a
 *   shortened one) and the request is refused (or boundary-authorized) for reasons the operator
 *   cannot see.
 * - test_audit_shows_coalesced_rows: ops_audit_times(); without it a row standing for
 *   thousands of refused attempts reads like one.
 * - test_request_id_is_hex_only: parse_request_id() accepting exactly 32 hex digits; with the
 *   sscanf("%2x") it replaced, signs ("+f", "-1") and "0x" prefixes made request IDs.
 * - the issue 10 fixes are in test_buzzctl_fixes.c, each test naming its guard.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <sodium.h>

#include "buzz/backfill/v1/admin.pb-c.h"
#include "buzz/backfill/v1/readiness.pb-c.h"
#include "buzz/backfill/v1/rpc.pb-c.h"
#include "ctl_harness.h"

/* ---- tests ------------------------------------------------------------------------------ */

/* A control whose answer never comes: exit 6, and stderr names the request ID the server
 * received, so the operator can repeat it with --request-id. */
static void test_lost_answer_prints_request_id(void **state)
{
    (void)state;
    fake f;
    fake_open(&f);
    ctl_run r;
    const char *args[] = {"--url", f.url, "--timeout", "600", "pause", "demo.items_v1", NULL};
    ctl_start(&r, args);
    Buzz__Backfill__V1__RequestEnvelope *env = fake_recv(&f); /* and never answered */
    assert_string_equal(env->method, "buzz.backfill.v1.Admin.Pause");
    assert_true(env->has_request_id);
    assert_int_equal(env->request_id.len, 16);
    char hex[33];
    sodium_bin2hex(hex, sizeof hex, env->request_id.data, env->request_id.len);
    buzz__backfill__v1__request_envelope__free_unpacked(env, NULL);
    ctl_finish(&r);
    fake_close(&f);

    assert_int_equal(r.status, 6);
    char want[80];
    snprintf(want, sizeof want, "request id: %s", hex);
    if (strstr(r.err, want) == NULL)
        fail_msg("stderr does not name the request id %s:\n%s", hex, r.err);

    ctl_free(&r);

    /* repeating it with --request-id sends the same ID */
    fake_open(&f);
    const char *again[] = {"--url", f.url, "--request-id", hex, "pause", "demo.items_v1", NULL};
    ctl_start(&r, again);
    env = fake_recv(&f);
    char hex2[33];
    sodium_bin2hex(hex2, sizeof hex2, env->request_id.data, env->request_id.len);
    assert_string_equal(hex2, hex);
    Buzz__Backfill__V1__ControlResponse cr = BUZZ__BACKFILL__V1__CONTROL_RESPONSE__INIT;
    cr.has_outcome = true;
    cr.outcome = BUZZ__BACKFILL__V1__CONTROL_OUTCOME__ACCEPTED;
    cr.has_prior_state = cr.has_resulting_state = true;
    cr.prior_state = BUZZ__BACKFILL__V1__STATE__RUNNING;
    cr.resulting_state = BUZZ__BACKFILL__V1__STATE__PAUSED;
    cr.has_generation = true;
    cr.generation = 2;
    cr.has_replayed = true;
    cr.replayed = true;
    fake_answer(&f, env, SC(OK), &cr.base);
    buzz__backfill__v1__request_envelope__free_unpacked(env, NULL);
    ctl_finish(&r);
    fake_close(&f);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "accepted, running -> paused, generation 2 (replayed)"));
    assert_non_null(strstr(r.out, hex));
    ctl_free(&r);
}

#define EVIL_ESC "\x1b]0;owned\x07\x1b[2J"
#define EVIL_C1                                                                                    \
    "\xc2\x9b"                                                                                     \
    "31m" /* U+009B, CSI */
#define EVIL_RAW                                                                                   \
    "\x9b"                                                                                         \
    "1m" /* a C1 byte that is not UTF-8 */

/* get, audit, validate and ready print server strings full of control sequences: the
 * terminal receives none of them, in the table and in --json. */
static void test_server_text_is_made_printable(void **state)
{
    (void)state;
    Buzz__Backfill__V1__Definition def = BUZZ__BACKFILL__V1__DEFINITION__INIT;
    def.description = "desc " EVIL_ESC;
    def.revision = "rev " EVIL_C1;
    def.key_types = "bigint" EVIL_RAW;
    Buzz__Backfill__V1__Claim claim = BUZZ__BACKFILL__V1__CLAIM__INIT;
    claim.owner = "host:1:w1" EVIL_ESC;
    Buzz__Backfill__V1__Diagnostic diag = BUZZ__BACKFILL__V1__DIAGNOSTIC__INIT;
    diag.error_class = "retryable" EVIL_C1;
    diag.detail = "detail " EVIL_ESC EVIL_RAW;
    Buzz__Backfill__V1__Validation val = BUZZ__BACKFILL__V1__VALIDATION__INIT;
    val.has_outcome = true;
    val.outcome = BUZZ__BACKFILL__V1__VALIDATION_OUTCOME__FAILURE;
    val.detail = "validation " EVIL_ESC;
    Buzz__Backfill__V1__Backfill b = BUZZ__BACKFILL__V1__BACKFILL__INIT;
    b.id = "demo.items_v1" EVIL_ESC;
    b.has_state = true;
    b.state = BUZZ__BACKFILL__V1__STATE__RUNNING;
    b.definition = &def;
    b.bound = "(100)" EVIL_C1;
    b.checkpoint = "(42)" EVIL_ESC;
    b.claim = &claim;
    b.error = &diag;
    b.last_validation = &val;
    Buzz__Backfill__V1__GetResponse get = BUZZ__BACKFILL__V1__GET_RESPONSE__INIT;
    get.backfill = &b;

    Buzz__Backfill__V1__AuditEntry entry = BUZZ__BACKFILL__V1__AUDIT_ENTRY__INIT;
    entry.has_seq = true;
    entry.seq = 7;
    entry.backfill_id = "x" EVIL_ESC;
    entry.action = "pause" EVIL_C1;
    entry.actor = "mallory" EVIL_ESC;
    entry.authority = "token kid=k1" EVIL_RAW;
    entry.outcome = "rejected: " EVIL_ESC;
    Buzz__Backfill__V1__AuditEntry *entries[] = {&entry};
    Buzz__Backfill__V1__AuditResponse audit = BUZZ__BACKFILL__V1__AUDIT_RESPONSE__INIT;
    audit.n_entries = 1;
    audit.entries = entries;

    Buzz__Backfill__V1__ValidateResponse vr = BUZZ__BACKFILL__V1__VALIDATE_RESPONSE__INIT;
    vr.has_outcome = true;
    vr.outcome = BUZZ__BACKFILL__V1__VALIDATION_OUTCOME__FAILURE;
    vr.detail = "rows differ " EVIL_ESC;

    Buzz__Backfill__V1__Component comp = BUZZ__BACKFILL__V1__COMPONENT__INIT;
    comp.name = "database" EVIL_C1;
    comp.has_status = true;
    comp.status = BUZZ__BACKFILL__V1__COMPONENT_STATUS__NOT_READY;
    comp.reason = "reason " EVIL_ESC;
    Buzz__Backfill__V1__Component *comps[] = {&comp};
    Buzz__Backfill__V1__GatingBackfill gate = BUZZ__BACKFILL__V1__GATING_BACKFILL__INIT;
    gate.id = "gate" EVIL_ESC;
    Buzz__Backfill__V1__GatingBackfill *gates[] = {&gate};
    Buzz__Backfill__V1__CheckResponse check = BUZZ__BACKFILL__V1__CHECK_RESPONSE__INIT;
    check.has_ready = true;
    check.n_components = 1;
    check.components = comps;
    check.n_gating = 1;
    check.gating = gates;

    const struct {
        const char *cmd[4];
        bool json;
        const ProtobufCMessage *answer;
        int exit_code;
    } cases[] = {
        {{"get", "demo.items_v1", NULL}, false, &get.base, 0},
        {{"--json", "get", "demo.items_v1", NULL}, true, &get.base, 0},
        {{"audit", NULL}, false, &audit.base, 0},
        {{"--json", "audit", NULL}, true, &audit.base, 0},
        {{"validate", "demo.items_v1", NULL}, false, &vr.base, 7},
        {{"ready", NULL}, false, &check.base, 8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ctl_run r;
        ctl_answered(&r, cases[i].cmd, cases[i].answer);
        if (r.status != cases[i].exit_code)
            fail_msg("case %zu: exit %d, stderr: %s", i, r.status, r.err);
        assert_printable(r.out);
        assert_printable(r.err);
        /* the text around the sequences is still shown */
        const char *want = i < 2 ? "(42)" : i < 4 ? "mallory" : i == 4 ? "rows differ" : "reason";
        if (strstr(r.out, want) == NULL)
            fail_msg("case %zu: %s missing from:\n%s", i, want, r.out);
        if (cases[i].json)
            assert_non_null(strstr(r.out, "\\u001b]0;owned\\u0007"));
        ctl_free(&r);
    }
}

/* get of a running backfill: progress, rate and ETA come from the keys the checkpoint passed
 * (rows_covered), which a quarter of rows needing no repair does not shrink; the rate is the
 * keys passed between two reads, not since start (which would count paused time); without
 * keys passed (progress from before the engine counted keys) the rows changed are shown and no
 * rate or ETA is invented. Guard: project_progress() in projection.c using rows_covered, and
 * cmds_rate()/bfc_project_rate() measuring between two reads. */
static void test_progress_counts_keys_passed(void **state)
{
    (void)state;
    Buzz__Backfill__V1__Progress p[2] = {BUZZ__BACKFILL__V1__PROGRESS__INIT,
                                         BUZZ__BACKFILL__V1__PROGRESS__INIT};
    Buzz__Backfill__V1__Times t[2] = {BUZZ__BACKFILL__V1__TIMES__INIT,
                                      BUZZ__BACKFILL__V1__TIMES__INIT};
    Buzz__Backfill__V1__Backfill b[2] = {BUZZ__BACKFILL__V1__BACKFILL__INIT,
                                         BUZZ__BACKFILL__V1__BACKFILL__INIT};
    Buzz__Backfill__V1__GetResponse get[2] = {BUZZ__BACKFILL__V1__GET_RESPONSE__INIT,
                                              BUZZ__BACKFILL__V1__GET_RESPONSE__INIT};
    const struct {
        bool covered;
        const char *progress, *rate, *eta;
    } cases[] = {
        /* 300 then 400 keys passed, 1 s apart: 100 rows/s; 600 left of the estimate: 6 s. An
         * average since the start an hour ago would be 0 rows/s */
        {true, "400 rows, 300 changed (~40.0% of ~1,000 est.)", "100 rows/s", "~6.0s (est.)"},
        {false, "300 rows changed (~30.0% of ~1,000 est.)", "rate:        unknown", "eta: unknown"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int k = 0; k < 2; k++) {
            p[k].has_rows_committed = true;
            p[k].rows_committed = 300;
            p[k].has_source_estimate = true;
            p[k].source_estimate = 1000;
            p[k].has_rows_covered = cases[i].covered;
            p[k].rows_covered = cases[i].covered ? 300 + 100 * k : 0;
            t[k].has_started_at_us = true;
            t[k].started_at_us = 1000000000000;
            t[k].has_observed_at_us = true;
            t[k].observed_at_us = t[k].started_at_us + 3600000000LL + 1000000LL * k;
            b[k].id = "demo.items_v1";
            b[k].has_state = true;
            b[k].state = BUZZ__BACKFILL__V1__STATE__RUNNING;
            b[k].progress = &p[k];
            b[k].times = &t[k];
            get[k].backfill = &b[k];
        }
        static const char *const cmd[] = {"get", "demo.items_v1", "--sample-ms", "10", NULL};
        script sc = {.answers = {&get[0].base, &get[1].base}, .n = 2};
        ctl_run r;
        ctl_scripted(&r, cmd, &sc);
        assert_int_equal(r.status, 0);
        if (strstr(r.out, cases[i].progress) == NULL || strstr(r.out, cases[i].rate) == NULL ||
            strstr(r.out, cases[i].eta) == NULL)
            fail_msg("case %zu: want \"%s\", \"%s\", \"%s\" in:\n%s", i, cases[i].progress,
                     cases[i].rate, cases[i].eta, r.out);
        assert_int_equal(sc.n_seen, 2);
        script_free(&sc);
        ctl_free(&r);
    }
}

/* ready --wait 20 without --timeout: the request asks for the wait, and its deadline leaves
 * the server the whole of it. */
static void test_ready_wait_gets_its_budget(void **state)
{
    (void)state;
    fake f;
    fake_open(&f);
    ctl_run r;
    const char *args[] = {"--url", f.url, "ready", "--wait", "20", NULL};
    ctl_start(&r, args);
    Buzz__Backfill__V1__RequestEnvelope *env = fake_recv(&f);
    assert_string_equal(env->method, "buzz.backfill.v1.Readiness.Check");
    Buzz__Backfill__V1__CheckRequest *req =
        buzz__backfill__v1__check_request__unpack(NULL, env->body.len, env->body.data);
    assert_non_null(req);
    assert_true(req->has_wait_ms);
    assert_int_equal(req->wait_ms, 20000);
    buzz__backfill__v1__check_request__free_unpacked(req, NULL);
    assert_true(env->has_deadline_ms);
    if (env->deadline_ms <= 20000)
        fail_msg("deadline %u ms leaves no room for a 20 s wait", env->deadline_ms);
    Buzz__Backfill__V1__CheckResponse check = BUZZ__BACKFILL__V1__CHECK_RESPONSE__INIT;
    check.has_ready = true;
    check.ready = true;
    fake_answer(&f, env, SC(OK), &check.base);
    buzz__backfill__v1__request_envelope__free_unpacked(env, NULL);
    ctl_finish(&r);
    fake_close(&f);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "READY"));
    ctl_free(&r);
}

/* Usage errors are reported as such (exit 2) whether or not a server answers. */
static void test_usage_errors_need_no_server(void **state)
{
    (void)state;
    char url[128];
    snprintf(url, sizeof url, "ipc://%s/nobody-listens", ch_dir);
    const char *const cases[][6] = {
        {"--url", url, "frobnicate", NULL},
        {"--url", url, "list", "--limit", "x", NULL},
        {"--url", url, "ready", "--wait", "31", NULL},
        {"--url", url, "get", NULL},
        {"--url", url, "--timeout", "abc", "list", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ctl_run r;
        ctl_run_all(&r, cases[i]);
        if (r.status != 2)
            fail_msg("case %zu: exit %d, stderr: %s", i, r.status, r.err);
        ctl_free(&r);
    }
    /* and an absent server is exit 6, named as the server */
    const char *args[] = {"--url", url, "list", NULL};
    ctl_run r;
    ctl_run_all(&r, args);
    assert_int_equal(r.status, 6);
    assert_non_null(strstr(r.err, "server unavailable"));
    assert_null(strstr(r.out, "STATE")); /* no table header for a table that never came */
    ctl_free(&r);
}

/* A token file that is empty, holds a NUL byte or only a newline, an empty --token: each is an
 * error with a clear message before any server is contacted (exit 2, not 6), never a request
 * without a credential (which the ipc boundary would authorize) or with a shortened one. */
static void test_bad_token_sources_are_errors(void **state)
{
    (void)state;
    char url[128];
    snprintf(url, sizeof url, "ipc://%s/nobody-listens", ch_dir);
    static const struct {
        const char *name;
        const char *content;
        size_t len;
        const char *why;
    } files[] = {
        {"empty", "", 0, "it is empty"},
        {"newline", "\n", 1, "it is empty"},
        {"crlf", "\r\nbbt1.a.b\n", 10, "it is empty"},
        {"nul", "bbt1.a.b\0junk\n", 14, "it holds a NUL byte"},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[160];
        snprintf(path, sizeof path, "%s/token.%s", ch_dir, files[i].name);
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(files[i].content, 1, files[i].len, f), files[i].len);
        fclose(f);
        const char *args[] = {"--url", url, "--token-file", path, "pause", "demo.items_v1", NULL};
        ctl_run r;
        ctl_run_all(&r, args);
        if (r.status != 2 || strstr(r.err, files[i].why) == NULL || strstr(r.err, path) == NULL)
            fail_msg("%s: exit %d, stderr: %s", files[i].name, r.status, r.err);
        ctl_free(&r);
    }
    const char *empty[] = {"--url", url, "--token", "", "pause", "demo.items_v1", NULL};
    ctl_run r;
    ctl_run_all(&r, empty);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "--token is empty"));
    ctl_free(&r);
}

/* A coalesced audit row prints how many attempts it stands for and when they came; a single
 * event prints neither. */
static void test_audit_shows_coalesced_rows(void **state)
{
    (void)state;
    Buzz__Backfill__V1__AuditEntry many = BUZZ__BACKFILL__V1__AUDIT_ENTRY__INIT;
    many.has_seq = true;
    many.seq = 9;
    many.action = "start";
    many.authority = "unauthenticated tcp addr=192.0.2.7";
    many.outcome = "rejected: unauthenticated: missing token";
    many.has_count = true;
    many.count = 4992;
    many.has_window_start_us = many.has_window_end_us = true;
    many.window_start_us = INT64_C(1735732800) * 1000000;     /* 2025-01-01T12:00:00Z */
    many.window_end_us = INT64_C(1735732809) * 1000000 + 999; /* 2025-01-01T12:00:09Z */
    Buzz__Backfill__V1__AuditEntry one = many;
    one.seq = 8;
    one.backfill_id = "demo.items_v1";
    one.count = 1;
    one.has_window_start_us = one.has_window_end_us = false;
    Buzz__Backfill__V1__AuditEntry *entries[] = {&many, &one};
    Buzz__Backfill__V1__AuditResponse audit = BUZZ__BACKFILL__V1__AUDIT_RESPONSE__INIT;
    audit.n_entries = 2;
    audit.entries = entries;
    const char *cmd[] = {"audit", NULL};
    ctl_run r;
    ctl_answered(&r, cmd, &audit.base);
    assert_int_equal(r.status, 0);
    if (strstr(r.out,
               "missing token (x4992 from 2025-01-01T12:00:00Z to 2025-01-01T12:00:09Z)\n") == NULL)
        fail_msg("no count and window in:\n%s", r.out);
    const char *second = strstr(r.out, "#8");
    assert_non_null(second);
    assert_null(strstr(second, " (x"));
    ctl_free(&r);
}

/* --request-id takes 32 hex digits and nothing else; a usage error names the rule. */
static void test_request_id_is_hex_only(void **state)
{
    (void)state;
    char url[128];
    snprintf(url, sizeof url, "ipc://%s/nobody-listens", ch_dir);
    static const char *const bad[] = {
        "+f+f+f+f+f+f+f+f+f+f+f+f+f+f+f+f", /* a sign per byte */
        "-1-1-1-1-1-1-1-1-1-1-1-1-1-1-1-1", /* a negative byte */
        "0x0x0x0x0x0x0x0x0x0x0x0x0x0x0x0x", /* prefixes */
        " 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1", /* spaces */
        "gggggggggggggggggggggggggggggggg", /* not hex */
        "0123456789abcdef0123456789abcde",  /* 31 digits */
        "0123456789abcdef0123456789abcdef0" /* 33 digits */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *args[] = {"--url", url, "--request-id", bad[i], "pause", "b1", NULL};
        ctl_run r;
        ctl_run_all(&r, args);
        if (r.status != 2 || strstr(r.err, "--request-id needs exactly 32 hex digits") == NULL)
            fail_msg("case %zu: exit %d, stderr: %s", i, r.status, r.err);
        ctl_free(&r);
    }
    /* upper and lower case are accepted: the call goes on to the (absent) server */
    const char *args[] = {"--url", url, "--request-id", "0123456789ABCDEF0123456789abcdef", "pause",
                          "b1",    NULL};
    ctl_run r;
    ctl_run_all(&r, args);
    assert_int_equal(r.status, 6);
    ctl_free(&r);
}

static int group_setup(void **state)
{
    (void)state;
    assert_true(sodium_init() >= 0);
    snprintf(ch_dir, sizeof ch_dir, "/tmp/buzz-ctl-XXXXXX");
    assert_non_null(mkdtemp(ch_dir));
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", ch_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", ch_dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lost_answer_prints_request_id),
        cmocka_unit_test(test_server_text_is_made_printable),
        cmocka_unit_test(test_progress_counts_keys_passed),
        cmocka_unit_test(test_ready_wait_gets_its_budget),
        cmocka_unit_test(test_usage_errors_need_no_server),
        cmocka_unit_test(test_bad_token_sources_are_errors),
        cmocka_unit_test(test_audit_shows_coalesced_rows),
        cmocka_unit_test(test_request_id_is_hex_only),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
