/*
 * test_buzzctl.c - the buzzctl binary against a scripted server: a bare nng REP socket in this
 * process that receives buzzctl's request envelope, checks it, and answers (or does not) with
 * a response written here. No daemon and no PostgreSQL: what is tested is what buzzctl sends
 * and prints.
 *
 * Guards proved (each removal fails a test here):
 * - test_lost_answer_prints_request_id: report_request_id() after a failed control; without it
 *   an operator whose answer was lost cannot learn the outcome with --request-id.
 * - test_server_text_is_made_printable: bfc_printable() in the projection and in every direct
 *   print of server text, and the escaping of pbjson; without them a server (or anyone who got
 *   a string into a stored backfill or audit row) writes terminal control sequences.
 * - test_progress_counts_keys_passed: project_progress() measuring progress, rate and ETA in
 *   keys passed (rows_covered) and giving no ETA without them.
 * - test_ready_wait_gets_its_budget: the timeout raised for ready --wait; without it the server
 *   is told to give up after the default 10 s whatever --wait says.
 * - test_usage_errors_need_no_server: the connection opened by the first call; without it a
 *   usage error is reported as "server unavailable" (exit 6) when no server runs.
 * - test_bad_token_sources_are_errors: read_token_file() refusing an empty token file, one with
 *   a NUL byte, and the refusal of an empty --token; without them buzzctl sends no token (or a
 *   shortened one) and the request is refused (or boundary-authorized) for reasons the operator
 *   cannot see.
 * - test_audit_shows_coalesced_rows: audit_times(); without it a row standing for thousands of
 *   refused attempts reads like one.
 * - test_request_id_is_hex_only: parse_request_id() accepting exactly 32 hex digits; with the
 *   sscanf("%2x") it replaced, signs ("+f", "-1") and "0x" prefixes made request IDs.
 * - the issue 10 fixes (validate's whole budget and progress, rates between two reads, list
 *   and audit paging, widths, help without a server, typed usage errors, --json mapping and
 *   JSON errors, one-line errors, ready --wait-ready): each test below names its guard.
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

#define SC(name) BUZZ__BACKFILL__V1__STATUS_CODE__##name

static char dir[64];
static int case_no;

/* ---- running buzzctl ---------------------------------------------------------------------- */

typedef struct ctl_run {
    pid_t pid;
    char out_path[128], err_path[128];
    char *out, *err; /* after ctl_finish */
    int status;      /* exit code */
    bool reaped;     /* waitpid already collected raw */
    int raw;
} ctl_run;

static void ctl_start(ctl_run *r, const char *const *args)
{
    memset(r, 0, sizeof *r);
    snprintf(r->out_path, sizeof r->out_path, "%s/out.%d", dir, case_no);
    snprintf(r->err_path, sizeof r->err_path, "%s/err.%d", dir, case_no);
    char *argv[32];
    int n = 0;
    argv[n++] = (char *)BUZZCTL_PATH;
    for (; args[n - 1] != NULL && n < 31; n++)
        argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    r->pid = fork();
    assert_true(r->pid >= 0);
    if (r->pid == 0) {
        int out = open(r->out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int err = open(r->err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (out < 0 || err < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
            _exit(126);
        unsetenv("BUZZ_BACKFILL_URL");
        unsetenv("BUZZ_BACKFILL_TOKEN");
        execv(argv[0], argv);
        _exit(127);
    }
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *buf = calloc(1, 1 << 20);
    assert_non_null(buf);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void ctl_finish(ctl_run *r)
{
    int st = r->raw;
    if (!r->reaped)
        assert_int_equal(waitpid(r->pid, &st, 0), r->pid);
    assert_true(WIFEXITED(st));
    r->status = WEXITSTATUS(st);
    r->out = slurp(r->out_path);
    r->err = slurp(r->err_path);
    case_no++;
}

static void ctl_free(ctl_run *r)
{
    free(r->out);
    free(r->err);
}

/* Run buzzctl to completion (no server involved). */
static void ctl_run_all(ctl_run *r, const char *const *args)
{
    ctl_start(r, args);
    ctl_finish(r);
}

/* ---- the scripted server ------------------------------------------------------------------ */

typedef struct fake {
    nng_socket sock;
    char url[160];
} fake;

static void fake_open(fake *f)
{
    snprintf(f->url, sizeof f->url, "ipc://%s/srv.%d", dir, case_no);
    assert_int_equal(nng_rep0_open(&f->sock), 0);
    assert_int_equal(nng_socket_set_ms(f->sock, NNG_OPT_RECVTIMEO, 20000), 0);
    assert_int_equal(nng_listen(f->sock, f->url, NULL, 0), 0);
}

static void fake_close(fake *f)
{
    nng_close(f->sock);
}

/* The next request envelope (caller frees). */
static Buzz__Backfill__V1__RequestEnvelope *fake_recv(fake *f)
{
    nng_msg *m = NULL;
    assert_int_equal(nng_recvmsg(f->sock, &m, 0), 0);
    Buzz__Backfill__V1__RequestEnvelope *env =
        buzz__backfill__v1__request_envelope__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
    nng_msg_free(m);
    assert_non_null(env);
    return env;
}

/* Answer env with code, message, detail (may be NULL) and body (may be NULL). */
static void fake_answer_status(fake *f, const Buzz__Backfill__V1__RequestEnvelope *env, int code,
                               const char *message, const char *detail,
                               const ProtobufCMessage *body)
{
    Buzz__Backfill__V1__Status status = BUZZ__BACKFILL__V1__STATUS__INIT;
    status.code = code;
    status.message = (char *)message;
    status.detail = (char *)detail;
    Buzz__Backfill__V1__ResponseEnvelope resp = BUZZ__BACKFILL__V1__RESPONSE_ENVELOPE__INIT;
    resp.status = &status;
    uint8_t *packed = NULL;
    if (body != NULL) {
        packed = malloc(protobuf_c_message_get_packed_size(body) + 1);
        assert_non_null(packed);
        resp.has_body = true;
        resp.body.len = protobuf_c_message_pack(body, packed);
        resp.body.data = packed;
    }
    resp.has_request_id = env->has_request_id;
    resp.request_id = env->request_id;
    nng_msg *m = NULL;
    assert_int_equal(
        nng_msg_alloc(&m, buzz__backfill__v1__response_envelope__get_packed_size(&resp)), 0);
    buzz__backfill__v1__response_envelope__pack(&resp, nng_msg_body(m));
    assert_int_equal(nng_sendmsg(f->sock, m, 0), 0);
    free(packed);
}

static void fake_answer(fake *f, const Buzz__Backfill__V1__RequestEnvelope *env, int code,
                        const ProtobufCMessage *body)
{
    fake_answer_status(f, env, code, NULL, NULL, body);
}

/* Run buzzctl --url <a fresh scripted server> cmd... and answer its one request with OK and
 * answer. */
static void ctl_answered(ctl_run *r, const char *const *cmd, const ProtobufCMessage *answer)
{
    fake f;
    fake_open(&f);
    const char *args[16];
    int n = 0;
    args[n++] = "--url";
    args[n++] = f.url;
    for (int k = 0; cmd[k] != NULL; k++) {
        assert_true(n < 15);
        args[n++] = cmd[k];
    }
    args[n] = NULL;
    ctl_start(r, args);
    Buzz__Backfill__V1__RequestEnvelope *env = fake_recv(&f);
    fake_answer(&f, env, SC(OK), answer);
    buzz__backfill__v1__request_envelope__free_unpacked(env, NULL);
    ctl_finish(r);
    fake_close(&f);
}

/* A scripted conversation: request i is answered with codes[i] and answers[i] (the last pair
 * repeats), each after delay_ms; the envelopes received are kept for inspection. */
#define SCRIPT_MAX 16
typedef struct script {
    const ProtobufCMessage *answers[SCRIPT_MAX];
    int codes[SCRIPT_MAX];
    const char *message, *detail; /* of every answer; NULL: none */
    size_t n;
    int delay_ms;       /* before every answer */
    int delay_first_ms; /* before the first answer only */
    Buzz__Backfill__V1__RequestEnvelope *seen[SCRIPT_MAX];
    size_t n_seen;
} script;

static void script_free(script *s)
{
    for (size_t i = 0; i < s->n_seen; i++)
        buzz__backfill__v1__request_envelope__free_unpacked(s->seen[i], NULL);
    s->n_seen = 0;
}

/* Run buzzctl --url <a fresh scripted server> cmd... and answer every request it sends by s,
 * until it exits. */
static void ctl_scripted(ctl_run *r, const char *const *cmd, script *s)
{
    fake f;
    fake_open(&f);
    assert_int_equal(nng_socket_set_ms(f.sock, NNG_OPT_RECVTIMEO, 50), 0);
    const char *args[24];
    int n = 0;
    args[n++] = "--url";
    args[n++] = f.url;
    for (int k = 0; cmd[k] != NULL; k++) {
        assert_true(n < 23);
        args[n++] = cmd[k];
    }
    args[n] = NULL;
    ctl_start(r, args);
    for (;;) {
        nng_msg *m = NULL;
        if (nng_recvmsg(f.sock, &m, 0) == 0) {
            Buzz__Backfill__V1__RequestEnvelope *env =
                buzz__backfill__v1__request_envelope__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
            nng_msg_free(m);
            assert_non_null(env);
            size_t i = s->n_seen < s->n ? s->n_seen : s->n - 1;
            int delay = s->delay_ms + (s->n_seen == 0 ? s->delay_first_ms : 0);
            if (delay > 0)
                usleep((useconds_t)delay * 1000);
            fake_answer_status(&f, env, s->codes[i], s->message, s->detail, s->answers[i]);
            if (s->n_seen < SCRIPT_MAX)
                s->seen[s->n_seen++] = env;
            else
                buzz__backfill__v1__request_envelope__free_unpacked(env, NULL);
            continue;
        }
        pid_t p = waitpid(r->pid, &r->raw, WNOHANG);
        assert_true(p >= 0);
        if (p == r->pid) {
            r->reaped = true;
            break;
        }
    }
    ctl_finish(r);
    fake_close(&f);
}

/* Bytes a terminal would act on: C0 controls but newline, DEL, raw C1 bytes, UTF-8 C1. */
static void assert_printable(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '\n')
            continue;
        if (*p < 0x20 || *p == 0x7f ||
            (*p >= 0x80 && *p <= 0x9f && (p == (const unsigned char *)s || p[-1] < 0xc2)))
            fail_msg("control byte 0x%02x at offset %td in:\n%s", *p, (const char *)p - s, s);
        if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
            fail_msg("C1 control U+00%02X at offset %td", p[1], (const char *)p - s);
    }
}

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
    snprintf(url, sizeof url, "ipc://%s/nobody-listens", dir);
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
    snprintf(url, sizeof url, "ipc://%s/nobody-listens", dir);
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
        snprintf(path, sizeof path, "%s/token.%s", dir, files[i].name);
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
    snprintf(url, sizeof url, "ipc://%s/nobody-listens", dir);
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

/* ---- the fixes of issue 10 item 3 ---------------------------------------------------------- */

static size_t count_lines(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static void assert_lines_fit(const char *s, size_t width)
{
    for (const char *line = s; *line;) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        if (len > width)
            fail_msg("a line of %zu columns:\n%.*s", len, (int)len, line);
        line += len + (eol != NULL);
    }
}

/* validate on a slow validation: the one Validate request gets the whole --timeout (the 3 s
 * the fake takes is more than a third of it, where the split budget sent a retry that met the
 * running validation); with --progress the state is polled (Get) on the side and shown on
 * stderr before the outcome. Guard: the single attempt in bfc_control() for
 * BFC_ACTION_VALIDATE, and ops_validate_watch() in buzzctl_ops.c. */
static void test_validate_gets_its_whole_budget(void **state)
{
    (void)state;
    Buzz__Backfill__V1__ValidateResponse vr = BUZZ__BACKFILL__V1__VALIDATE_RESPONSE__INIT;
    vr.has_outcome = true;
    vr.outcome = BUZZ__BACKFILL__V1__VALIDATION_OUTCOME__SUCCESS;
    Buzz__Backfill__V1__Backfill b = BUZZ__BACKFILL__V1__BACKFILL__INIT;
    b.id = "demo.items_v1";
    b.has_state = true;
    b.state = BUZZ__BACKFILL__V1__STATE__VALIDATING;
    Buzz__Backfill__V1__GetResponse get = BUZZ__BACKFILL__V1__GET_RESPONSE__INIT;
    get.backfill = &b;
    static const char *const cmd[] = {"--timeout",     "5000",       "validate",
                                      "demo.items_v1", "--progress", NULL};
    script sc = {.answers = {&vr.base, &get.base}, .n = 2, .delay_first_ms = 3000};
    ctl_run r;
    ctl_scripted(&r, cmd, &sc);
    if (r.status != 0)
        fail_msg("exit %d, stderr:\n%s", r.status, r.err);
    size_t validates = 0;
    for (size_t i = 0; i < sc.n_seen; i++)
        validates += strcmp(sc.seen[i]->method, "buzz.backfill.v1.Admin.Validate") == 0;
    assert_int_equal(validates, 1);
    assert_string_equal(sc.seen[0]->method, "buzz.backfill.v1.Admin.Validate");
    assert_true(sc.seen[0]->has_deadline_ms && sc.seen[0]->deadline_ms > 4000);
    assert_non_null(strstr(r.out, "validate demo.items_v1: success"));
    if (strstr(r.err, "validate demo.items_v1: running for") == NULL ||
        strstr(r.err, "state validating") == NULL)
        fail_msg("no progress on stderr:\n%s", r.err);
    script_free(&sc);
    ctl_free(&r);
}

static void fill_row(Buzz__Backfill__V1__Backfill *b, Buzz__Backfill__V1__Progress *p,
                     Buzz__Backfill__V1__Times *t, const char *id, Buzz__Backfill__V1__State st,
                     int64_t covered, int64_t at_s)
{
    buzz__backfill__v1__backfill__init(b);
    buzz__backfill__v1__progress__init(p);
    buzz__backfill__v1__times__init(t);
    b->id = (char *)id;
    b->has_state = true;
    b->state = st;
    b->progress = p;
    b->times = t;
    p->has_rows_committed = p->has_rows_covered = p->has_source_estimate = true;
    p->rows_committed = p->rows_covered = covered;
    p->source_estimate = 200000;
    t->has_started_at_us = t->has_observed_at_us = true;
    t->started_at_us = INT64_C(1735732800) * 1000000;
    t->observed_at_us = t->started_at_us + at_s * 1000000;
}

/* list reads every page (twice: the rate is measured between the reads, so the hour since
 * start, paused or not, does not dilute it), shows an ETA marked ~, keeps lines within 80
 * columns, and a paused row has no rate. Guard: the page loop of list_fetch(), cmds_rate()
 * between two reads, cmds_short_progress(). */
static void test_list_pages_rates_and_fits(void **state)
{
    (void)state;
    static Buzz__Backfill__V1__Backfill b[2][3];
    static Buzz__Backfill__V1__Progress p[2][3];
    static Buzz__Backfill__V1__Times t[2][3];
    static Buzz__Backfill__V1__Backfill *page1[2][2], *page2[2][1];
    static Buzz__Backfill__V1__ListResponse l1[2], l2[2];
    for (int k = 0; k < 2; k++) {
        fill_row(&b[k][0], &p[k][0], &t[k][0], "demo.events.content_len_v1",
                 BUZZ__BACKFILL__V1__STATE__RUNNING, 100000 + 20000 * k, 3600 + k);
        fill_row(&b[k][1], &p[k][1], &t[k][1], "demo.events.kind_v2",
                 BUZZ__BACKFILL__V1__STATE__PAUSED, 5000, 3600 + k);
        fill_row(&b[k][2], &p[k][2], &t[k][2], "demo.events.tags_v1",
                 BUZZ__BACKFILL__V1__STATE__BLOCKED, 7000, 3600 + k);
        page1[k][0] = &b[k][0];
        page1[k][1] = &b[k][1];
        page2[k][0] = &b[k][2];
        buzz__backfill__v1__list_response__init(&l1[k]);
        buzz__backfill__v1__list_response__init(&l2[k]);
        l1[k].n_backfills = 2;
        l1[k].backfills = page1[k];
        l1[k].next_page_token = "p2";
        l2[k].n_backfills = 1;
        l2[k].backfills = page2[k];
    }
    static const char *const cmd[] = {"list", "--sample-ms", "10", NULL};
    script sc = {.answers = {&l1[0].base, &l2[0].base, &l1[1].base, &l2[1].base}, .n = 4};
    ctl_run r;
    ctl_scripted(&r, cmd, &sc);
    if (r.status != 0)
        fail_msg("exit %d, stderr:\n%s", r.status, r.err);
    assert_int_equal(sc.n_seen, 4);
    Buzz__Backfill__V1__ListRequest *req =
        buzz__backfill__v1__list_request__unpack(NULL, sc.seen[1]->body.len, sc.seen[1]->body.data);
    assert_non_null(req);
    assert_non_null(req->page_token);
    assert_string_equal(req->page_token, "p2");
    buzz__backfill__v1__list_request__free_unpacked(req, NULL);
    const char *row = strstr(r.out, "demo.events.content_len_v1");
    assert_non_null(row);
    /* 20,000 keys in the 1 s between the reads; 80,000 left of the estimate: ~4.0s */
    if (strstr(row, "running    120k (~60%)    20000/s    ~4.0s") == NULL)
        fail_msg("row:\n%s", r.out);
    row = strstr(r.out, "demo.events.kind_v2");
    assert_non_null(row);
    assert_non_null(strstr(row, "paused     5000 (~2%)     -          -"));
    assert_non_null(strstr(r.out, "demo.events.tags_v1")); /* from the second page */
    assert_non_null(
        strstr(r.out, "hint: blocked: fix the cause, then: buzzctl retry demo.events.tags_v1"));
    assert_lines_fit(r.out, 80);
    script_free(&sc);
    ctl_free(&r);
}

/* help, unknown commands, every subcommand's --help (with an example) and --version need no
 * server (not even --url); bad values get a specific message. Guard: the help and unknown
 * command checks in main() before the --url check, ctl_command_help(), ctl_parse_long() and
 * cmds_parse_state() with their messages. */
static void test_help_and_bad_values_need_no_server(void **state)
{
    (void)state;
    static const char *const subs[] = {"list",     "get",   "start",  "pause", "resume", "retry",
                                       "validate", "audit", "whoami", "ready", "dash",   NULL};
    for (size_t i = 0; subs[i] != NULL; i++) {
        const char *args[] = {subs[i], "--help", NULL};
        ctl_run r;
        ctl_run_all(&r, args);
        if (r.status != 0 || strstr(r.out, "example: buzzctl") == NULL ||
            strstr(r.out, "usage: buzzctl") == NULL)
            fail_msg("%s --help: exit %d, out:\n%s\nerr:\n%s", subs[i], r.status, r.out, r.err);
        ctl_free(&r);
    }
    const struct {
        const char *args[8];
        int code;
        const char *out, *err;
    } cases[] = {
        {{"help", NULL}, 0, "commands", NULL},
        {{"help", "audit", NULL}, 0, "example: buzzctl audit", NULL},
        {{"--version", NULL}, 0, "buzzctl 0.1.0", NULL},
        {{"frobnicate", NULL}, 2, NULL, "unknown command 'frobnicate'"},
        {{"--url", "ipc:///nonexistent/x", "list", "--state", "bogus", NULL},
         2,
         NULL,
         "--state: 'bogus' is not a state (pending, running"},
        {{"--url", "ipc:///nonexistent/x", "audit", "--limit", "5x", NULL},
         2,
         NULL,
         "--limit: '5x' is not a whole number"},
        {{"--url", "ipc:///nonexistent/x", "list", "--limit", "0", NULL},
         2,
         NULL,
         "--limit: '0' is not a whole number"},
        {{"--url", "ipc:///nonexistent/x", "ready", "--wait-ready", "--timeout", "5y"},
         2,
         NULL,
         "'5y' is not a duration"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ctl_run r;
        ctl_run_all(&r, cases[i].args);
        if (r.status != cases[i].code || (cases[i].out && strstr(r.out, cases[i].out) == NULL) ||
            (cases[i].err && strstr(r.err, cases[i].err) == NULL))
            fail_msg("case %zu: exit %d, out:\n%s\nerr:\n%s", i, r.status, r.out, r.err);
        assert_true(count_lines(r.err) <= 1);
        ctl_free(&r);
    }
}

/* --json, before or after the command: one document, the protobuf JSON mapping
 * (lowerCamelCase, enum names, 64-bit integers as strings, times as RFC 3339), and errors as
 * a JSON document too. Guard: take_json() in buzzctl.c, json_key()/json_value()/json_time() in
 * buzzctl_json.c, ctl_report()'s JSON branch. */
static void test_json_is_one_protobuf_mapped_document(void **state)
{
    (void)state;
    Buzz__Backfill__V1__Backfill b;
    Buzz__Backfill__V1__Progress p;
    Buzz__Backfill__V1__Times t;
    fill_row(&b, &p, &t, "demo.items_v1", BUZZ__BACKFILL__V1__STATE__RUNNING, 400, 0);
    b.has_generation = true;
    b.generation = INT64_C(9007199254740993); /* 2^53 + 1: not exact as a JSON number */
    Buzz__Backfill__V1__GetResponse get = BUZZ__BACKFILL__V1__GET_RESPONSE__INIT;
    get.backfill = &b;
    static const char *const cmd[] = {"get", "demo.items_v1", "--json", NULL};
    script sc = {.answers = {&get.base}, .n = 1};
    ctl_run r;
    ctl_scripted(&r, cmd, &sc);
    assert_int_equal(r.status, 0);
    assert_int_equal(count_lines(r.out), 1);
    static const char *const want[] = {
        "{\"backfill\":{\"id\":\"demo.items_v1\",\"state\":\"RUNNING\"",
        "\"generation\":\"9007199254740993\"",
        "\"rowsCovered\":\"400\"",
        "\"sourceEstimate\":\"200000\"",
        "\"startedAt\":\"2025-01-01T12:00:00.000000Z\"",
        "\"observedAt\":\"2025-01-01T12:00:00.000000Z\"",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (strstr(r.out, want[i]) == NULL)
            fail_msg("%s not in:\n%s", want[i], r.out);
    assert_null(strstr(r.out, "_us\""));
    assert_null(strstr(r.out, "rows_"));
    assert_int_equal(sc.n_seen, 1); /* --json: no second read */
    script_free(&sc);
    ctl_free(&r);

    /* errors: one JSON document on stdout, with the exit code */
    const char *args[] = {"--url", "ipc:///nonexistent/x", "get", "demo.items_v1", "--json", NULL};
    ctl_run_all(&r, args);
    assert_int_equal(r.status, 6);
    assert_int_equal(count_lines(r.out), 1);
    assert_non_null(strstr(r.out, "{\"error\":{\"command\":\"get\",\"exitCode\":6,"
                                  "\"code\":\"unavailable\""));
    ctl_free(&r);
    const char *usage[] = {"--json", "list", "--state", "bogus", NULL};
    ctl_run_all(&r, usage);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.out, "{\"error\":{\"code\":\"usage\",\"exitCode\":2"));
    ctl_free(&r);
}

/* One line per error: a message the detail repeats is printed once; file errors say why.
 * Guard: the show_code/show_detail dedup in ctl_report(), strerror() in read_token_file(). */
static void test_errors_are_one_line_with_reasons(void **state)
{
    (void)state;
    static const char *const cmd[] = {"get", "nope.items_v1", NULL};
    script sc = {.codes = {SC(NOT_FOUND)},
                 .n = 1,
                 .message = "backfill not found",
                 .detail = "backfill not found"};
    ctl_run r;
    ctl_scripted(&r, cmd, &sc);
    assert_int_equal(r.status, 5);
    assert_int_equal(count_lines(r.err), 1);
    const char *first = strstr(r.err, "backfill not found");
    assert_non_null(first);
    assert_null(strstr(first + 1, "backfill not found"));
    assert_non_null(strstr(r.err, "buzzctl get: backfill not found (not_found)"));
    script_free(&sc);
    ctl_free(&r);

    const char *args[] = {
        "--url", "ipc:///nonexistent/x", "--token-file", "/nonexistent/token", "list", NULL};
    ctl_run_all(&r, args);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "token file /nonexistent/token: No such file or directory"));
    ctl_free(&r);
}

/* audit pages past the first page (before_seq from next_before_seq) up to --limit and prints
 * each row's time. Guard: the page loop of ctl_cmd_audit() and the at_us column of
 * ops_audit_print(). */
static void test_audit_pages_with_times(void **state)
{
    (void)state;
    Buzz__Backfill__V1__AuditEntry e[3];
    Buzz__Backfill__V1__AuditEntry *p1[2] = {&e[0], &e[1]}, *p2[1] = {&e[2]};
    for (int i = 0; i < 3; i++) {
        buzz__backfill__v1__audit_entry__init(&e[i]);
        e[i].has_seq = e[i].has_at_us = true;
        e[i].seq = 9 - i;
        e[i].at_us = (INT64_C(1735732800) + i) * 1000000;
        e[i].action = "pause";
        e[i].authority = "ipc uid=0";
    }
    Buzz__Backfill__V1__AuditResponse a1 = BUZZ__BACKFILL__V1__AUDIT_RESPONSE__INIT;
    Buzz__Backfill__V1__AuditResponse a2 = BUZZ__BACKFILL__V1__AUDIT_RESPONSE__INIT;
    a1.n_entries = 2;
    a1.entries = p1;
    a1.has_next_before_seq = true;
    a1.next_before_seq = 8;
    a2.n_entries = 1;
    a2.entries = p2;
    a2.has_next_before_seq = true; /* more exist, but --limit 3 is reached */
    a2.next_before_seq = 7;
    static const char *const cmd[] = {"audit", "--limit", "3", NULL};
    script sc = {.answers = {&a1.base, &a2.base}, .n = 2};
    ctl_run r;
    ctl_scripted(&r, cmd, &sc);
    assert_int_equal(r.status, 0);
    assert_int_equal(sc.n_seen, 2);
    Buzz__Backfill__V1__AuditRequest *req = buzz__backfill__v1__audit_request__unpack(
        NULL, sc.seen[1]->body.len, sc.seen[1]->body.data);
    assert_non_null(req);
    assert_true(req->has_before_seq);
    assert_int_equal(req->before_seq, 8);
    assert_int_equal(req->page_size, 1);
    buzz__backfill__v1__audit_request__free_unpacked(req, NULL);
    assert_int_equal(count_lines(r.out), 3);
    assert_non_null(strstr(r.out, "#9    2025-01-01T12:00:00Z"));
    assert_non_null(strstr(r.out, "#7    2025-01-01T12:00:02Z"));
    script_free(&sc);
    ctl_free(&r);
}

/* ready --wait-ready polls until ready (exit 0), gives up with 8 when still not ready and with
 * 6 when the server was never reached, within its --timeout. Guard: ops_wait_ready(). */
static void test_ready_wait_ready(void **state)
{
    (void)state;
    Buzz__Backfill__V1__CheckResponse no = BUZZ__BACKFILL__V1__CHECK_RESPONSE__INIT;
    no.has_ready = true;
    Buzz__Backfill__V1__CheckResponse yes = no;
    yes.ready = true;
    static const char *const cmd[] = {"ready", "--wait-ready", "--timeout", "20s", NULL};
    script sc = {.answers = {&no.base, &no.base, &yes.base}, .n = 3};
    ctl_run r;
    ctl_scripted(&r, cmd, &sc);
    if (r.status != 0)
        fail_msg("exit %d, stderr:\n%s", r.status, r.err);
    assert_int_equal(sc.n_seen, 3);
    assert_non_null(strstr(r.out, "READY"));
    for (size_t i = 0; i < sc.n_seen; i++)
        assert_string_equal(sc.seen[i]->method, "buzz.backfill.v1.Readiness.Check");
    script_free(&sc);
    ctl_free(&r);

    static const char *const never[] = {"ready", "--wait-ready", "--timeout", "1500ms", NULL};
    script sn = {.answers = {&no.base}, .n = 1};
    ctl_scripted(&r, never, &sn);
    assert_int_equal(r.status, 8);
    script_free(&sn);
    ctl_free(&r);

    const char *args[] = {
        "--url", "ipc:///nonexistent/x", "ready", "--wait-ready", "--timeout", "1s", NULL};
    ctl_run_all(&r, args);
    assert_int_equal(r.status, 6);
    assert_non_null(strstr(r.err, "server unreachable"));
    ctl_free(&r);
}

static int group_setup(void **state)
{
    (void)state;
    assert_true(sodium_init() >= 0);
    snprintf(dir, sizeof dir, "/tmp/buzz-ctl-XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
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
        cmocka_unit_test(test_validate_gets_its_whole_budget),
        cmocka_unit_test(test_list_pages_rates_and_fits),
        cmocka_unit_test(test_help_and_bad_values_need_no_server),
        cmocka_unit_test(test_json_is_one_protobuf_mapped_document),
        cmocka_unit_test(test_errors_are_one_line_with_reasons),
        cmocka_unit_test(test_audit_pages_with_times),
        cmocka_unit_test(test_ready_wait_ready),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
