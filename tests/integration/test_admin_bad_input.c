/*
 * test_admin_bad_input.c - bad input at the admin boundary of a real buzz-backfilld process,
 * table-driven, over a raw nng REQ socket on its tcp:// listener (so the test controls every
 * byte of the envelope): malformed envelopes, oversized messages, unknown methods, a body of
 * another message type, an invalid stable ID, an invalid request ID, every token problem, a
 * missing capability, a token with only community roles, and a request ID reused for another
 * request.
 *
 * Each case targets Admin.Start of a pending backfill (a bypass would start it) and must:
 *   - get its typed status (or, beyond the transport's hard cap, no answer at all) and no body;
 *   - change nothing: the backfill rows, the request table and the target table are identical
 *     before and after;
 *   - leave in the audit exactly what the spec requires: one rejection row for a control
 *     attempt the server could attribute to a method (with its authority source, the actor
 *     when a token verified, and a bounded outcome), none for bytes that never named one.
 * The daemon keeps serving after every case. The message beyond the transport's hard cap is
 * sent by a re-executed copy of this program that exits without nng_close(): nng 1.5.2's close
 * of a REQ socket can hang for good after its peer dropped such a message (a client-side nng
 * bug; the client library never sends more than 1 MiB).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "bt.h"
#include "daemon.h"

#define PENDING  "c09.items_v1"
#define RUNNING  "c09.running_v1"
#define START    "buzz.backfill.v1.Admin.Start"
#define REUSED   "0123456789abcdef0123456789abcdef"
#define NO_REPLY (-1)

static bd_daemon d;
static PGconn *pg;
static bool all_passed;

/* What one case sends. */
typedef struct bad_request {
    const uint8_t *raw; /* when set: these bytes instead of an envelope */
    size_t raw_len;
    size_t pad_to;       /* > 0: grow the body to make the message this large */
    const char *method;  /* NULL: START */
    const char *token;   /* NULL: none */
    const char *id;      /* NULL: PENDING */
    const uint8_t *body; /* when set: these body bytes instead of ControlRequest{id} */
    size_t body_len;
    const char *request_id; /* hex; NULL: random 16 bytes */
    size_t request_id_len;  /* bytes; 0: 16 */
} bad_request;

typedef struct bad_case {
    const char *name;
    bad_request req;
    int code;              /* expected status, NO_REPLY for none */
    const char *message;   /* expected status message prefix; NULL: any */
    int audited;           /* audit rows the attempt adds */
    const char *authority; /* of that row */
    const char *actor;     /* of that row; NULL: none */
} bad_case;

/* ---- setup ------------------------------------------------------------------------------- */

static int setup(void **state)
{
    pg = bd_suite_open("badin");
    bt_make_items(pg, "c09_items", 100);
    bd_migrate(NULL);
    bd_options o = bd_defaults();
    o.definitions = "c09";
    o.workers = 0;
    bd_start(&d, &o);
    bd_wait_registered(pg, 2);
    /* a started row, under the request ID a later case reuses for a different request */
    bfc_client *c = bd_client(d.ipc_url, NULL, 0, 0);
    bd_pin(c, REUSED);
    assert_int_equal(bd_control(c, "Start", RUNNING, NULL), BD_SC(OK));
    bfc_close(c);
    return 0;
}

static int teardown(void **state)
{
    bd_suite_close(&d, pg, !all_passed);
    return 0;
}

/* ---- the wire ---------------------------------------------------------------------------- */

static void hex_bytes(uint8_t *out, const char *hex, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v = 0;
        assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
        out[i] = (uint8_t)v;
    }
}

/* The request message of a case (malloc'd). */
static uint8_t *encode(const bad_request *r, size_t *len_out)
{
    if (r->raw != NULL) {
        uint8_t *buf = malloc(r->raw_len ? r->raw_len : 1);
        memcpy(buf, r->raw, r->raw_len);
        *len_out = r->raw_len;
        return buf;
    }
    Buzz__Backfill__V1__ControlRequest ctl = BUZZ__BACKFILL__V1__CONTROL_REQUEST__INIT;
    ctl.id = (char *)(r->id ? r->id : PENDING);
    size_t body_len =
        r->body ? r->body_len : buzz__backfill__v1__control_request__get_packed_size(&ctl);
    size_t body_cap = body_len > r->pad_to ? body_len : r->pad_to;
    uint8_t *body = calloc(1, body_cap ? body_cap : 1);
    if (r->body)
        memcpy(body, r->body, body_len);
    else
        buzz__backfill__v1__control_request__pack(&ctl, body);
    if (r->pad_to > body_len) {
        /* an unknown length-delimited field 15 fills the rest of the body */
        size_t fill = r->pad_to - body_len - 5;
        uint8_t *p = body + body_len;
        *p++ = (15 << 3) | 2;
        for (int i = 0; i < 4; i++, fill >>= 7) /* 4-byte varint length */
            *p++ = (uint8_t)((fill & 0x7f) | (i < 3 ? 0x80 : 0));
        body_len = r->pad_to;
    }
    uint8_t rid[32];
    size_t rid_len = r->request_id_len ? r->request_id_len : 16;
    if (r->request_id != NULL)
        hex_bytes(rid, r->request_id, rid_len);
    else
        bft_token_id_new(rid);
    Buzz__Backfill__V1__RequestEnvelope env = BUZZ__BACKFILL__V1__REQUEST_ENVELOPE__INIT;
    env.method = (char *)(r->method ? r->method : START);
    env.has_request_id = true;
    env.request_id.data = rid;
    env.request_id.len = rid_len;
    env.token = (char *)r->token;
    env.has_body = true;
    env.body.data = body;
    env.body.len = body_len;
    env.has_deadline_ms = true;
    env.deadline_ms = 10000;
    size_t len = buzz__backfill__v1__request_envelope__get_packed_size(&env);
    uint8_t *buf = malloc(len);
    buzz__backfill__v1__request_envelope__pack(&env, buf);
    free(body);
    *len_out = len;
    return buf;
}

/* Send one request on a fresh REQ socket; the response envelope, NULL when none came. */
static Buzz__Backfill__V1__ResponseEnvelope *exchange(const bad_request *r, int timeout_ms)
{
    nng_socket s;
    assert_int_equal(nng_req0_open(&s), 0);
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, timeout_ms);
    nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, timeout_ms);
    nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, 4 << 20);
    assert_int_equal(nng_dial(s, d.tcp_url, NULL, 0), 0);
    size_t len = 0;
    uint8_t *buf = encode(r, &len);
    Buzz__Backfill__V1__ResponseEnvelope *resp = NULL;
    if (nng_send(s, buf, len, 0) == 0) {
        void *reply = NULL;
        size_t reply_len = 0;
        if (nng_recv(s, &reply, &reply_len, NNG_FLAG_ALLOC) == 0) {
            resp = buzz__backfill__v1__response_envelope__unpack(NULL, reply_len, reply);
            assert_non_null(resp);
            nng_free(reply, reply_len);
        }
    }
    free(buf);
    nng_close(s);
    return resp;
}

/* Everything a bad request could change. */
static char *snapshot(void)
{
    char *s = bt_text(pg, "SELECT (SELECT string_agg(row_to_json(b)::text, E'\\n' ORDER BY b.id)"
                          " FROM buzz_backfill.backfill b)"
                          " || (SELECT string_agg(row_to_json(q)::text, E'\\n' ORDER BY"
                          " q.request_id) FROM buzz_backfill.request q)"
                          " || (SELECT string_agg(coalesce(fixed, -1)::text || ':' || counter,"
                          " ',' ORDER BY id) FROM c09_items)");
    assert_non_null(s);
    return s;
}

/*
 * A message beyond the transport's hard cap, sent by a fresh process (this program re-executed
 * with --oversized): nng 1.5.2's nng_close() of a REQ socket can hang for good after the peer
 * dropped such a message (its pipe reaper waits), so the sender exits without closing. Returns
 * true when an answer came back.
 */
static bool oversized_answered(size_t len)
{
    char len_arg[32];
    snprintf(len_arg, sizeof len_arg, "%zu", len);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/proc/self/exe", "test_admin_bad_input", "--oversized", d.tcp_url, len_arg,
              (char *)NULL);
        _exit(127);
    }
    int st = bt_wait_child(pid);
    if (st != 0 && st != 1)
        fail_msg("the oversized sender failed (status %d)", st);
    return st == 1;
}

/* The --oversized child: send len bytes, wait 1 s for an answer, exit without nng_close. */
static int oversized_child(const char *url, size_t len)
{
    nng_socket s;
    if (nng_req0_open(&s) != 0 || nng_dial(s, url, NULL, 0) != 0)
        _exit(2);
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 1000);
    nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, 1000);
    uint8_t *buf = calloc(1, len);
    if (buf == NULL || nng_send(s, buf, len, 0) != 0)
        _exit(2);
    void *reply = NULL;
    size_t reply_len = 0;
    _exit(nng_recv(s, &reply, &reply_len, NNG_FLAG_ALLOC) == 0 ? 1 : 0);
}

static void run_case(const bad_case *bc)
{
    char *before = snapshot();
    long long seq = bt_int(pg, "SELECT coalesce(max(seq), 0) FROM buzz_backfill.audit");
    Buzz__Backfill__V1__ResponseEnvelope *resp = NULL;
    if (bc->code == NO_REPLY) {
        if (oversized_answered(bc->req.pad_to))
            fail_msg("%s: an answer where the transport must drop the message", bc->name);
    } else {
        resp = exchange(&bc->req, 20000);
        if (resp == NULL || resp->status == NULL)
            fail_msg("%s: no answer", bc->name);
        if ((int)resp->status->code != bc->code)
            fail_msg("%s: code %d (%s: %s), want %d", bc->name, resp->status->code,
                     resp->status->message ? resp->status->message : "",
                     resp->status->detail ? resp->status->detail : "", bc->code);
        assert_false(resp->has_body); /* no protected state, no partial answer */
        if (bc->message != NULL) {
            assert_non_null(resp->status->message);
            if (strncmp(resp->status->message, bc->message, strlen(bc->message)) != 0)
                fail_msg("%s: message \"%s\", want \"%s\"", bc->name, resp->status->message,
                         bc->message);
        }
        assert_true(resp->status->message == NULL || strlen(resp->status->message) <= 200);
        assert_true(resp->status->detail == NULL || strlen(resp->status->detail) < 512);
    }
    if (resp != NULL)
        buzz__backfill__v1__response_envelope__free_unpacked(resp, NULL);

    char *after = snapshot();
    if (strcmp(before, after) != 0)
        fail_msg("%s mutated state", bc->name);
    free(before);
    free(after);
    long long added = bt_int(pg, "SELECT count(*) FROM buzz_backfill.audit WHERE seq > %lld", seq);
    if (added != bc->audited)
        fail_msg("%s: %lld audit rows, want %d", bc->name, added, bc->audited);
    if (bc->audited == 1) {
        char *row =
            bt_text(pg,
                    "SELECT action || '|' || coalesce(actor, '-') || '|' || authority"
                    " || '|' || coalesce(prior_state, '-') || '|' ||"
                    " coalesce(result_state, '-') FROM buzz_backfill.audit WHERE seq > %lld",
                    seq);
        char want[256];
        snprintf(want, sizeof want, "start|%s|%s|-|-", bc->actor ? bc->actor : "-", bc->authority);
        if (strcmp(row, want) != 0)
            fail_msg("%s: audit \"%s\", want \"%s\"", bc->name, row, want);
        free(row);
        char *outcome =
            bt_text(pg, "SELECT outcome FROM buzz_backfill.audit WHERE seq > %lld", seq);
        assert_memory_equal(outcome, "rejected: ", 10);
        assert_true(strlen(outcome) < 512);
        if (bc->req.token != NULL)
            assert_null(strstr(outcome, strrchr(bc->req.token, '.') + 1));
        free(outcome);
    }
}

/* ---- the table --------------------------------------------------------------------------- */

static char tok_good[BFT_TOKEN_MAX + 1], tok_forged[BFT_TOKEN_MAX + 1],
    tok_expired[BFT_TOKEN_MAX + 1], tok_early[BFT_TOKEN_MAX + 1], tok_audience[BFT_TOKEN_MAX + 1],
    tok_reader[BFT_TOKEN_MAX + 1], tok_roles[BFT_TOKEN_MAX + 1], tok_revoked[BFT_TOKEN_MAX + 1];

static void mint_tokens(void)
{
    int64_t now = (int64_t)time(NULL);
    bft_secret *forger = NULL;
    assert_int_equal(bft_keygen(&forger, BD_KID), BF_OK);
    const size_t n = BFT_TOKEN_MAX + 1;
    bd_mint(tok_good, n, &(bd_token_spec){.caps = BFT_CAP_ALL}, NULL);
    bd_mint(tok_forged, n, &(bd_token_spec){.caps = BFT_CAP_ALL, .key = forger}, NULL);
    bd_mint(
        tok_expired, n,
        &(bd_token_spec){.caps = BFT_CAP_ALL, .not_before = now - 7200, .expires_at = now - 3600},
        NULL);
    bd_mint(
        tok_early, n,
        &(bd_token_spec){.caps = BFT_CAP_ALL, .not_before = now + 3600, .expires_at = now + 7200},
        NULL);
    bd_mint(tok_audience, n, &(bd_token_spec){.caps = BFT_CAP_ALL, .audience = "elsewhere"}, NULL);
    bd_mint(tok_reader, n, &(bd_token_spec){.actor = "reader@test", .caps = BFT_CAP_READ}, NULL);
    bd_mint(tok_roles, n,
            &(bd_token_spec){.actor = "owner@community",
                             .roles = BFT_ROLE_COMMUNITY_OWNER | BFT_ROLE_CHANNEL_ADMIN |
                                      BFT_ROLE_MEMBER},
            NULL);
    char revoked_id[BFT_TOKEN_ID_HEX];
    bd_mint(tok_revoked, n, &(bd_token_spec){.caps = BFT_CAP_ALL}, revoked_id);
    bft_secret_free(forger);
    bd_revoke(revoked_id);
    bd_reload(&d);
}

static void test_bad_input_table(void **state)
{
    mint_tokens();
    static const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x08, 0x96};
    /* a packed Buzz.Backfill.V1.CheckRequest{wait_ms = 5}: field 1 as a varint, where
     * ControlRequest has a string */
    static const uint8_t check_request[] = {0x08, 0x05};
    const char *unauth = "unauthenticated tcp addr=127.0.0.1";
    const char *kid = "token kid=" BD_KID;
    const int INVALID = BD_SC(INVALID_ARGUMENT), UNAUTH = BD_SC(UNAUTHENTICATED),
              DENIED = BD_SC(PERMISSION_DENIED);
    const bad_case cases[] = {
        {"malformed envelope",
         {.raw = garbage, .raw_len = sizeof garbage},
         INVALID,
         "malformed envelope",
         0,
         NULL,
         NULL},
        {"empty message",
         {.raw = garbage, .raw_len = 0},
         BD_SC(UNIMPLEMENTED),
         NULL,
         0,
         NULL,
         NULL},
        {"oversized message",
         {.token = tok_good, .pad_to = (1 << 20) + 64},
         BD_SC(RESOURCE_EXHAUSTED),
         "message too large",
         1,
         kid,
         "operator@test"},
        {"oversized body",
         {.token = tok_good, .pad_to = 8192},
         BD_SC(RESOURCE_EXHAUSTED),
         "request body too large",
         1,
         kid,
         "operator@test"},
        {"far beyond the transport cap",
         {.token = tok_good, .pad_to = 2 << 20},
         NO_REPLY,
         NULL,
         0,
         NULL,
         NULL},
        {"unknown method",
         {.token = tok_good, .method = "buzz.backfill.v1.Admin.Reset"},
         BD_SC(UNIMPLEMENTED),
         "unknown method",
         0,
         NULL,
         NULL},
        {"unknown service",
         {.token = tok_good, .method = "buzz.backfill.v1.Migrations.Start"},
         BD_SC(UNIMPLEMENTED),
         "unknown method",
         0,
         NULL,
         NULL},
        {"wrong body type",
         {.token = tok_good, .body = check_request, .body_len = sizeof check_request},
         INVALID,
         "malformed request body",
         1,
         kid,
         "operator@test"},
        {"invalid id",
         {.token = tok_good, .id = "Not A Valid ID!"},
         INVALID,
         NULL,
         1,
         kid,
         "operator@test"},
        {"invalid request id",
         {.token = tok_good, .request_id = "0011223344556677", .request_id_len = 8},
         INVALID,
         "invalid request id",
         1,
         kid,
         "operator@test"},
        {"malformed token",
         {.token = "bbt1.not-a-token.at-all"},
         UNAUTH,
         "unauthenticated",
         1,
         unauth,
         NULL},
        {"forged signature", {.token = tok_forged}, UNAUTH, "unauthenticated", 1, unauth, NULL},
        {"expired", {.token = tok_expired}, UNAUTH, "unauthenticated", 1, unauth, NULL},
        {"not yet valid", {.token = tok_early}, UNAUTH, "unauthenticated", 1, unauth, NULL},
        {"wrong audience", {.token = tok_audience}, UNAUTH, "unauthenticated", 1, unauth, NULL},
        {"revoked", {.token = tok_revoked}, UNAUTH, "unauthenticated", 1, unauth, NULL},
        {"no token", {.token = NULL}, UNAUTH, "unauthenticated", 1, unauth, NULL},
        {"missing capability",
         {.token = tok_reader},
         DENIED,
         "permission denied",
         1,
         kid,
         "reader@test"},
        {"community role only",
         {.token = tok_roles},
         DENIED,
         "permission denied",
         1,
         kid,
         "owner@community"},
        {"reused request id, other body",
         {.token = tok_good, .request_id = REUSED},
         INVALID,
         NULL,
         1,
         kid,
         "operator@test"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i]);

    /* still serving, and the pending row is still startable by an authorized request */
    bfc_client *c = bd_client(d.tcp_url, tok_good, 0, 0);
    bd_control_resp *r = NULL;
    assert_int_equal(bd_control(c, "Start", PENDING, &r), BD_SC(OK));
    assert_int_equal(r->outcome, BUZZ__BACKFILL__V1__CONTROL_OUTCOME__ACCEPTED);
    bd_free(r);
    bfc_close(c);
    bd_stop(&d);
    all_passed = true;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--oversized") == 0)
        return oversized_child(argv[2], (size_t)strtoul(argv[3], NULL, 10));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_input_table),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
