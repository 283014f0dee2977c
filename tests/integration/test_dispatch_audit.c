/*
 * test_dispatch_audit.c - srv_dispatch() audits every rejection of an audited method before
 * any handler runs: unauthenticated (missing and forged tokens), unauthorized, invalid request
 * ID, malformed body, spent deadline. Each row names the action, the stable ID taken from the
 * body (bounded, control characters replaced), the actor or else the authority source
 * ("unauthenticated tcp", "ipc uid=N"), the request ID and a bounded outcome. Rejections of
 * unaudited methods write nothing, and a database that cannot be reached never turns a
 * rejection into anything else (the failure to audit is logged).
 *
 * Unauthenticated rejections go through the coalescing of server/src/admin/reject.c: the first
 * SRV_REJECT_BURST of a window per (peer, action, reason) are written at once, a flood beyond
 * is counted and written as one row with count and window when the window closes, when the
 * table is full and when the dispatcher is freed; the counts always add up to the attempts.
 * Over all peers at most SRV_REJECT_GLOBAL_BURST rows per window are written one by one, and
 * peers beyond the table are counted in an aggregate of their listener kind.
 * An invalid-UTF-8 ID reaching the engine (an authorized Validate) is audited, sanitized.
 *
 * Real pieces: the Admin service and its policies (admin.c), srv_auth with a trusted key minted
 * here, the engine on a private PostgreSQL database. No handler is reached by these requests
 * (but the invalid-ID Validate, which the engine refuses), so the audit rows can only come from
 * the dispatcher.
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

#include "bt.h"
#include "buzz/token.h"
#include "log.h"
#include "srv.h"

#define SC(name) BUZZ__BACKFILL__V1__STATUS_CODE__##name
#define AUDIENCE "audit-test"

static char dir[64];
static char token_read[BFT_TOKEN_MAX + 1];
static srv_auth *auth;
static srv_context ctx;
static srv_dispatcher *disp;
static srv_session session;
static bf_registry *reg;
static bf_engine *engine;
static PGconn *pg;
static char last_log[512];

static void capture_log(void *arg, const bf_log_record *rec)
{
    bf_log_level level = rec->level;
    const char *msg = rec->msg;
    (void)arg;
    if (level >= BF_LOG_WARN)
        snprintf(last_log, sizeof last_log, "%s", msg);
}

static int setup(void **state)
{
    (void)state;
    bt_db_create("dispatch_audit");
    reg = bt_registry(NULL, 0);
    engine = bt_engine(reg, "audit-test", 30000); /* migrates */
    pg = bt_connect();

    snprintf(dir, sizeof dir, "/tmp/buzz-audit-XXXXXX");
    assert_non_null(mkdtemp(dir));
    char keys[128], diag[256] = "";
    snprintf(keys, sizeof keys, "%s/trusted.pub", dir);
    bft_secret *secret = NULL;
    assert_int_equal(bft_keygen(&secret, "k1"), BF_OK);
    assert_int_equal(bft_public_save(secret, keys, diag, sizeof diag), BF_OK);
    bft_claims claims;
    memset(&claims, 0, sizeof claims);
    bft_token_id_new(claims.token_id);
    snprintf(claims.actor, sizeof claims.actor, "alice@ops");
    snprintf(claims.audience, sizeof claims.audience, AUDIENCE);
    claims.caps = BFT_CAP_READ;
    claims.expires_at = bft_now() + 3600;
    assert_int_equal(bft_mint(token_read, sizeof token_read, &claims, secret), BF_OK);
    bft_secret_free(secret);

    srv_auth_config acfg = {.audience = AUDIENCE, .trusted_keys_file = keys, .ipc_boundary = true};
    if (srv_auth_new(&auth, &acfg, diag, sizeof diag) != BF_OK)
        fail_msg("srv_auth_new: %s", diag);
    ctx.registry = reg;
    ctx.auth = auth;
    ctx.conninfo = bt_db_conninfo();
    ctx.engine_cfg.log = capture_log;
    session.ctx = &ctx;
    assert_int_equal(srv_dispatcher_new(&disp, &ctx), BF_OK);
    assert_int_equal(srv_dispatcher_add(disp, srv_admin_service(), srv_admin_policies()), BF_OK);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    srv_dispatcher_free(disp);
    srv_auth_free(auth);
    bf_engine_close(session.engine);
    bf_engine_close(engine);
    PQfinish(pg);
    bf_registry_free(reg);
    bt_db_drop();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return 0;
}

typedef struct request {
    const char *method;
    const char *id;      /* ControlRequest.id; NULL = absent */
    const uint8_t *body; /* raw body instead of a ControlRequest */
    size_t body_len;
    size_t request_id_len; /* 0 = absent */
    const char *token;
    bool has_deadline;
    uint32_t deadline_ms;
} request;

static const uint8_t request_id[16] = {0xde, 0xad, 0xbe, 0xef, 1, 2,  3,  4,
                                       5,    6,    7,    8,    9, 10, 11, 12};
#define REQUEST_ID_HEX "deadbeef0102030405060708090a0b0c"

/* Dispatch one request as peer and return the status code. */
static int dispatch(const request *rq, const srv_peer *peer)
{
    Buzz__Backfill__V1__ControlRequest body = BUZZ__BACKFILL__V1__CONTROL_REQUEST__INIT;
    body.id = (char *)rq->id;
    uint8_t packed[512];
    Buzz__Backfill__V1__RequestEnvelope env = BUZZ__BACKFILL__V1__REQUEST_ENVELOPE__INIT;
    env.method = (char *)rq->method;
    env.has_body = true;
    if (rq->body != NULL) {
        env.body.data = (uint8_t *)rq->body;
        env.body.len = rq->body_len;
    } else {
        assert_true(buzz__backfill__v1__control_request__get_packed_size(&body) <= sizeof packed);
        env.body.len = buzz__backfill__v1__control_request__pack(&body, packed);
        env.body.data = packed;
    }
    if (rq->request_id_len > 0) {
        env.has_request_id = true;
        env.request_id.data = (uint8_t *)request_id;
        env.request_id.len = rq->request_id_len;
    }
    env.token = (char *)rq->token;
    env.has_deadline_ms = rq->has_deadline;
    env.deadline_ms = rq->deadline_ms;
    size_t len = buzz__backfill__v1__request_envelope__get_packed_size(&env);
    uint8_t *in = malloc(len);
    assert_non_null(in);
    buzz__backfill__v1__request_envelope__pack(&env, in);

    uint8_t *out = NULL;
    size_t out_len = 0;
    assert_int_equal(srv_dispatch(disp, &session, peer, in, len, srv_now_us(), &out, &out_len),
                     BF_OK);
    free(in);
    Buzz__Backfill__V1__ResponseEnvelope *resp =
        buzz__backfill__v1__response_envelope__unpack(NULL, out_len, out);
    free(out);
    assert_non_null(resp);
    assert_non_null(resp->status);
    assert_false(resp->has_body); /* a rejection carries no state */
    int code = resp->status->code;
    buzz__backfill__v1__response_envelope__free_unpacked(resp, NULL);
    return code;
}

static long long audit_count(void)
{
    return bt_int(pg, "SELECT count(*) FROM buzz_backfill.audit");
}

/* The newest audit row as "action|backfill_id|actor|authority|request_id|outcome", NULL as
 * "-". */
static char *audit_last(void)
{
    return bt_text(pg, "SELECT concat_ws('|', action, coalesce(backfill_id, '-'),"
                       " coalesce(actor, '-'), authority, coalesce(request_id, '-'), outcome)"
                       " FROM buzz_backfill.audit ORDER BY seq DESC LIMIT 1");
}

static void assert_audit(const char *want)
{
    char *got = audit_last();
    assert_string_equal(got, want);
    free(got);
}

static const srv_peer tcp_peer = {.listener = "tcp"};

static void test_unauthenticated_is_audited(void **state)
{
    (void)state;
    long long before = audit_count();
    request rq = {
        .method = "buzz.backfill.v1.Admin.Start", .id = "demo.audit", .request_id_len = 16};
    assert_int_equal(dispatch(&rq, &tcp_peer), SC(UNAUTHENTICATED));
    assert_int_equal(audit_count(), before + 1);
    assert_audit("start|demo.audit|-|unauthenticated tcp|" REQUEST_ID_HEX
                 "|rejected: unauthenticated: missing token");

    rq.method = "buzz.backfill.v1.Admin.Pause";
    rq.token = "bbt1.Zm9yZ2Vk.c2lnbmF0dXJl";
    assert_int_equal(dispatch(&rq, &tcp_peer), SC(UNAUTHENTICATED));
    assert_int_equal(audit_count(), before + 2);
    char *row = audit_last();
    assert_non_null(strstr(row, "pause|demo.audit|-|unauthenticated tcp|" REQUEST_ID_HEX
                                "|rejected: unauthenticated: "));
    assert_null(strstr(row, "Zm9yZ2Vk")); /* the token never reaches the audit */
    free(row);

    /* an ipc peer that presents a bad token is not downgraded to boundary authority */
    srv_peer ipc = {.listener = "ipc", .has_uid = true, .uid = 4242};
    assert_int_equal(dispatch(&rq, &ipc), SC(UNAUTHENTICATED));
    row = audit_last();
    assert_non_null(strstr(row, "|unauthenticated ipc uid=4242|"));
    free(row);
}

static void test_unauthorized_is_audited(void **state)
{
    (void)state;
    long long before = audit_count();
    request rq = {.method = "buzz.backfill.v1.Admin.Resume",
                  .id = "demo.audit",
                  .request_id_len = 16,
                  .token = token_read};
    assert_int_equal(dispatch(&rq, &tcp_peer), SC(PERMISSION_DENIED));
    assert_int_equal(audit_count(), before + 1);
    assert_audit("resume|demo.audit|alice@ops|token kid=k1|" REQUEST_ID_HEX
                 "|rejected: permission denied: missing capability: control");

    rq.method = "buzz.backfill.v1.Admin.Validate";
    assert_int_equal(dispatch(&rq, &tcp_peer), SC(PERMISSION_DENIED));
    assert_audit("validate|demo.audit|alice@ops|token kid=k1|" REQUEST_ID_HEX
                 "|rejected: permission denied: missing capability: validate");
}

static void test_bad_input_is_audited(void **state)
{
    (void)state;
    srv_peer ipc = {.listener = "ipc", .has_uid = true, .uid = 1000};
    long long before = audit_count();
    request rq = {
        .method = "buzz.backfill.v1.Admin.Retry", .id = "demo.audit", .request_id_len = 5};
    assert_int_equal(dispatch(&rq, &ipc), SC(INVALID_ARGUMENT));
    assert_audit("retry|demo.audit|-|ipc uid=1000|-"
                 "|rejected: invalid argument: a request id is 16 bytes");

    static const uint8_t junk[] = {0x0a, 0xff};
    request bad = {.method = "buzz.backfill.v1.Admin.Start",
                   .body = junk,
                   .body_len = sizeof junk,
                   .request_id_len = 16};
    assert_int_equal(dispatch(&bad, &ipc), SC(INVALID_ARGUMENT));
    assert_audit("start|-|-|ipc uid=1000|" REQUEST_ID_HEX
                 "|rejected: invalid argument: malformed request body");

    request late = {.method = "buzz.backfill.v1.Admin.Start",
                    .id = "demo.audit",
                    .request_id_len = 16,
                    .has_deadline = true,
                    .deadline_ms = 0};
    assert_int_equal(dispatch(&late, &ipc), SC(DEADLINE_EXCEEDED));
    assert_audit("start|demo.audit|-|ipc uid=1000|" REQUEST_ID_HEX
                 "|rejected: operation timed out: deadline exceeded before handling");
    assert_int_equal(audit_count(), before + 3);

    /* the stable ID from the body is bounded and stripped of control characters */
    char id[300];
    memset(id, 'a', sizeof id - 1);
    id[sizeof id - 1] = '\0';
    id[0] = '\n';
    rq.id = id;
    rq.request_id_len = 16;
    assert_int_equal(dispatch(&rq, &tcp_peer), SC(UNAUTHENTICATED));
    char *stored = bt_text(pg, "SELECT backfill_id FROM buzz_backfill.audit"
                               " ORDER BY seq DESC LIMIT 1");
    assert_int_equal(strlen(stored), 80);
    assert_int_equal(stored[0], '?');
    free(stored);
}

/* Reads are not audited; unknown methods are not attributable to an audited action. */
static void test_unaudited_writes_nothing(void **state)
{
    (void)state;
    long long before = audit_count();
    request rq = {.method = "buzz.backfill.v1.Admin.Get", .id = "demo.audit", .request_id_len = 16};
    assert_int_equal(dispatch(&rq, &tcp_peer), SC(UNAUTHENTICATED));
    rq.method = "buzz.backfill.v1.Admin.Reset";
    assert_int_equal(dispatch(&rq, &tcp_peer), SC(UNIMPLEMENTED));
    assert_int_equal(audit_count(), before);
}

/* Without a database the rejection stands and the failure to audit is logged. */
static void test_audit_failure_is_logged(void **state)
{
    (void)state;
    srv_context offline = ctx;
    offline.conninfo = NULL;
    srv_session s = {.ctx = &offline};
    last_log[0] = '\0';
    request rq = {
        .method = "buzz.backfill.v1.Admin.Start", .id = "demo.audit", .request_id_len = 16};
    srv_session saved = session;
    session = s;
    assert_int_equal(dispatch(&rq, &tcp_peer), SC(UNAUTHENTICATED));
    session = saved;
    assert_non_null(strstr(last_log, "could not audit rejected start"));
}

/* ---- coalescing ------------------------------------------------------------------------- */

static long long rows_of(const char *authority)
{
    return bt_int(pg, "SELECT count(*) FROM buzz_backfill.audit WHERE authority = '%s'", authority);
}

static long long attempts_of(const char *authority)
{
    return bt_int(pg,
                  "SELECT coalesce(sum(count), 0) FROM buzz_backfill.audit"
                  " WHERE authority = '%s'",
                  authority);
}

/* A flood of identical unauthenticated rejections from one peer: SRV_REJECT_BURST rows while it
 * lasts, and one coalesced row with the rest once the dispatcher is freed (shutdown). Guards:
 * the counting in srv_rejects_audit and the flush in srv_rejects_free. */
static void test_flood_is_coalesced(void **state)
{
    (void)state;
    const srv_peer peer = {.listener = "tcp", .addr = "192.0.2.9"};
    const char *authority = "unauthenticated tcp addr=192.0.2.9";
    request rq = {
        .method = "buzz.backfill.v1.Admin.Retry", .id = "demo.flood", .request_id_len = 16};
    const int n = 50;
    for (int i = 0; i < n; i++)
        assert_int_equal(dispatch(&rq, &peer), SC(UNAUTHENTICATED));
    assert_int_equal(rows_of(authority), SRV_REJECT_BURST);
    srv_dispatcher_free(disp); /* what a SIGTERM does last */
    assert_int_equal(srv_dispatcher_new(&disp, &ctx), BF_OK);
    assert_int_equal(srv_dispatcher_add(disp, srv_admin_service(), srv_admin_policies()), BF_OK);
    assert_int_equal(rows_of(authority), SRV_REJECT_BURST + 1);
    assert_int_equal(attempts_of(authority), n);
    /* the coalesced row: every attempt named the same ID and request ID, so it keeps both */
    char *row = bt_text(pg,
                        "SELECT concat_ws('|', action, backfill_id, request_id, outcome, count,"
                        " window_start <= window_end) FROM buzz_backfill.audit"
                        " WHERE authority = '%s' AND window_start IS NOT NULL",
                        authority);
    char want[256];
    snprintf(want, sizeof want,
             "retry|demo.flood|" REQUEST_ID_HEX "|rejected: unauthenticated: missing token|%d|t",
             n - SRV_REJECT_BURST);
    assert_string_equal(row, want);
    free(row);
    /* authenticated rejections are attributable: never coalesced */
    long long before = audit_count();
    request denied = {.method = "buzz.backfill.v1.Admin.Start",
                      .id = "demo.flood",
                      .request_id_len = 16,
                      .token = token_read};
    for (int i = 0; i < SRV_REJECT_BURST + 4; i++)
        assert_int_equal(dispatch(&denied, &peer), SC(PERMISSION_DENIED));
    assert_int_equal(audit_count(), before + SRV_REJECT_BURST + 4);
}

/* A window that closes is flushed by the flusher thread while the process runs. Guard: the
 * flusher's wake-up at the window's end (without it the counts wait for shutdown). */
static void test_closed_window_is_flushed(void **state)
{
    (void)state;
    srv_rejects *r = NULL;
    assert_int_equal(srv_rejects_new(&r, &ctx), BF_OK);
    srv_rejects_set_window_for_testing(r, 300);
    const char *authority = "unauthenticated tcp addr=192.0.2.10";
    bf_actor who = {.authority = authority};
    const int n = SRV_REJECT_BURST + 3;
    for (int i = 0; i < n; i++)
        assert_int_equal(srv_rejects_audit(r, &session, "pause", "demo.window", &who,
                                           BF_ERR_UNAUTHENTICATED, "missing token"),
                         BF_OK);
    /* wait for the outcome (at most 10 s), not for a time: the flusher writes the counts */
    int64_t until = srv_now_us() + 10 * 1000000;
    while (attempts_of(authority) < n && srv_now_us() < until) {
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(attempts_of(authority), n);
    srv_rejects_free(r);
    assert_int_equal(attempts_of(authority), n); /* nothing written twice */
}

/* More peers than the table holds, each within its burst, in one window: the rows written one
 * by one stop at SRV_REJECT_GLOBAL_BURST over all keys, an open window is never evicted (which
 * used to give the evicted key a fresh burst: a row per request), new peers are counted in the
 * aggregate of their listener kind, and every attempt is in the counts. Guards: the global
 * burst and the no-eviction of open windows in srv_rejects_audit/reject_slot. */
static void test_many_peers_are_bounded_globally(void **state)
{
    (void)state;
    srv_rejects *r = NULL;
    assert_int_equal(srv_rejects_new(&r, &ctx), BF_OK);
    const int peers = SRV_REJECT_KEYS + 200, per_peer = 4;
    char authority[64];
    for (int round = 0; round < per_peer; round++) {
        for (int k = 0; k < peers; k++) {
            snprintf(authority, sizeof authority, "unauthenticated tcp addr=198.51.%d.%d", k / 256,
                     k % 256);
            bf_actor who = {.authority = authority};
            assert_int_equal(srv_rejects_audit(r, &session, "resume", NULL, &who,
                                               BF_ERR_UNAUTHENTICATED, "expired"),
                             BF_OK);
        }
    }
    const char *where = "authority LIKE 'unauthenticated tcp %%' AND action = 'resume'";
    /* while the window is open: only the global burst is written */
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM buzz_backfill.audit WHERE %s", where),
                     SRV_REJECT_GLOBAL_BURST);
    srv_rejects_free(r); /* shutdown: every count is written */
    long long rows = bt_int(pg, "SELECT count(*) FROM buzz_backfill.audit WHERE %s", where);
    if (rows > SRV_REJECT_GLOBAL_BURST + SRV_REJECT_KEYS + SRV_REJECT_AGG_KEYS)
        fail_msg("%lld rows for %d attempts", rows, peers * per_peer);
    assert_int_equal(
        bt_int(pg, "SELECT coalesce(sum(count), 0) FROM buzz_backfill.audit WHERE %s", where),
        peers * per_peer);
    /* the peers beyond the table are in one aggregate row */
    assert_int_equal(attempts_of("unauthenticated tcp (more peers than the table holds)"),
                     (peers - SRV_REJECT_KEYS) * per_peer);
    assert_int_equal(rows_of("unauthenticated tcp (more peers than the table holds)"), 1);
}

/* Once the windows of a full table have closed, a new key gets a slot of its own again (freed
 * by the flusher, or taken over in reject_slot() when the flusher has not got to it yet), not
 * the aggregate. */
static void test_full_table_reuses_closed_windows(void **state)
{
    (void)state;
    srv_rejects *r = NULL;
    assert_int_equal(srv_rejects_new(&r, &ctx), BF_OK);
    srv_rejects_set_window_for_testing(r, 200);
    char authority[64];
    for (int k = 0; k < SRV_REJECT_KEYS; k++) {
        snprintf(authority, sizeof authority, "unauthenticated tcp addr=203.0.%d.%d", k / 256,
                 k % 256);
        bf_actor who = {.authority = authority};
        assert_int_equal(
            srv_rejects_audit(r, &session, "pause", NULL, &who, BF_ERR_UNAUTHENTICATED, "expired"),
            BF_OK);
    }
    struct timespec ts = {0, 300 * 1000000};
    nanosleep(&ts, NULL); /* every window has closed */
    bf_actor who = {.authority = "unauthenticated tcp addr=203.0.9.9"};
    assert_int_equal(
        srv_rejects_audit(r, &session, "pause", NULL, &who, BF_ERR_UNAUTHENTICATED, "expired"),
        BF_OK);
    srv_rejects_free(r);
    assert_int_equal(attempts_of("unauthenticated tcp addr=203.0.9.9"), 1);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM buzz_backfill.audit WHERE action = 'pause'"
                                " AND authority LIKE '%%more peers%%'"),
                     0);
    assert_int_equal(bt_int(pg, "SELECT coalesce(sum(count), 0) FROM buzz_backfill.audit"
                                " WHERE authority LIKE 'unauthenticated tcp addr=203.0.%%'"),
                     SRV_REJECT_KEYS + 1);
}

/* ---- decoding --------------------------------------------------------------------------- */

/* An authorized Start whose body fits the 4 KiB cap but is two-byte unknown fields: protobuf-c
 * would hold about 240 KB for it; the decode budget refuses it (RESOURCE_EXHAUSTED, audited)
 * and no handler runs. Guard: the srv_budget allocator passed to the body's unpack. */
static void test_dense_body_exceeds_the_budget(void **state)
{
    (void)state;
    static uint8_t body[4000];
    size_t n = 0;
    body[n++] = 0x0a; /* id */
    body[n++] = 8;
    memcpy(body + n, "demo.big", 8);
    n += 8;
    while (n + 2 <= sizeof body) {
        body[n++] = 0x78; /* field 15, varint 0 */
        body[n++] = 0x00;
    }
    srv_peer ipc = {.listener = "ipc", .has_uid = true, .uid = 1000};
    long long before = audit_count();
    request rq = {.method = "buzz.backfill.v1.Admin.Start",
                  .body = body,
                  .body_len = n,
                  .request_id_len = 16};
    assert_int_equal(dispatch(&rq, &ipc), SC(RESOURCE_EXHAUSTED));
    assert_int_equal(audit_count(), before + 1);
    char want[256];
    snprintf(want, sizeof want,
             "start|demo.big|-|ipc uid=1000|" REQUEST_ID_HEX
             "|rejected: resource exhausted: decoding the request would need more than %zu bytes",
             SRV_DECODE_BUDGET(4096));
    assert_audit(want);
}

/* ---- hostile text ----------------------------------------------------------------------- */

/* An authorized Validate (ipc boundary) of an invalid-UTF-8 ID is audited, sanitized, and
 * answers INVALID_ARGUMENT, not "write audit: data exception (22021)". Guard: bf__audit_text. */
static void test_invalid_utf8_validate_is_audited(void **state)
{
    (void)state;
    srv_peer ipc = {.listener = "ipc", .has_uid = true, .uid = 1000};
    long long before = audit_count();
    request rq = {.method = "buzz.backfill.v1.Admin.Validate",
                  .id = "demo.\xc3\x28\xe2\x80\xae",
                  .request_id_len = 16};
    assert_int_equal(dispatch(&rq, &ipc), SC(INVALID_ARGUMENT));
    assert_int_equal(audit_count(), before + 1);
    assert_audit("validate|demo.?(?|-|ipc uid=1000|" REQUEST_ID_HEX "|rejected: invalid argument");
    assert_null(strstr(last_log, "22021"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unauthenticated_is_audited),
        cmocka_unit_test(test_unauthorized_is_audited),
        cmocka_unit_test(test_bad_input_is_audited),
        cmocka_unit_test(test_unaudited_writes_nothing),
        cmocka_unit_test(test_audit_failure_is_logged),
        cmocka_unit_test(test_flood_is_coalesced),
        cmocka_unit_test(test_closed_window_is_flushed),
        cmocka_unit_test(test_many_peers_are_bounded_globally),
        cmocka_unit_test(test_full_table_reuses_closed_windows),
        cmocka_unit_test(test_dense_body_exceeds_the_budget),
        cmocka_unit_test(test_invalid_utf8_validate_is_audited),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
