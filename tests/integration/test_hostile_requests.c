/*
 * test_hostile_requests.c - hostile requests against a real buzz-backfilld process, each
 * written byte by byte here and sent over a raw nng REQ socket (tcp:// or the ipc:// boundary
 * listener), so the test controls what protobuf-c would never encode: embedded NUL bytes in
 * strings, a present but empty token, floods of unknown fields, invalid UTF-8.
 *
 * Guards proved (each was removed once, the suite rebuilt and seen to fail, then restored):
 * - test_unknown_field_flood_is_bounded: the envelope is read by a wire scan that materializes
 *   nothing (srv_envelope_scan in server/src/admin/decode.c) and the body is decoded only after
 *   authentication, under a per-request allocator budget. Decoding the envelope with
 *   protobuf-c again raises the daemon's peak memory (VmHWM) by tens of MB per 1 MiB request
 *   of unknown fields; the test allows 16 MiB for four of them.
 * - test_oversized_body: the per-method body cap (srv_method_policy.max_body) in dispatch.c;
 *   without it an 8 KiB Pause body is decoded and acted on.
 * - test_nul_in_token: the NUL check of envelope strings; without it "<valid token>\0junk"
 *   authenticates and pauses the backfill.
 * - test_nul_in_id: the NUL check of request bodies (srv_wire_check_strings); without it a
 *   Pause of "c09.running_v1\0; DROP" pauses c09.running_v1.
 * - test_empty_token_is_malformed: srv_auth_authenticate refusing a present but empty token;
 *   without it an empty token on the ipc boundary listener gets boundary authority and pauses.
 * - test_hostile_text_is_audited: the audit text sanitizer (engine/src/audit.c); without it the
 *   invalid-UTF-8 Pause is not audited (PostgreSQL refuses the row, 22021) and Validate answers
 *   "write audit: data exception".
 * - test_flood_is_coalesced: the coalescing of unauthenticated rejections (server/src/
 *   reject.c); without it 1000 token-less Starts write 1000 rows. Its flush at shutdown: without
 *   it the counts no longer add up to the attempts after SIGTERM.
 *
 * Every case checks that nothing changed (the backfill rows and the request table), and that
 * the attempt is accounted for in the audit. No step is ordered by a sleep: the flood is counted
 * after the daemon has stopped, and SIGTERM is what flushes the counts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "bt.h"
#include "daemon.h"

#define PENDING    "c09.items_v1"
#define RUNNING    "c09.running_v1"
#define ADMIN      "buzz.backfill.v1.Admin."
#define FLOOD_N    1000
#define MEBIBYTE   (1024 * 1024)
#define HWM_MAX_KB (16 * 1024)
/* the flood's audit rows after a seq */
#define FLOOD_ROWS                                                                                 \
    "seq > %lld AND action = 'start' AND authority = 'unauthenticated tcp addr=127.0.0.1'"         \
    " AND outcome = 'rejected: unauthenticated: missing token'"

static bd_daemon d;
static PGconn *pg;
static bool all_passed;
static char tok_control[BFT_TOKEN_MAX + 1];

/* ---- the wire ---------------------------------------------------------------------------- */

typedef struct wire {
    uint8_t *data;
    size_t len, cap;
} wire;

static void wire_bytes(wire *w, const void *p, size_t n)
{
    if (w->len + n > w->cap) {
        w->cap = (w->len + n) * 2;
        w->data = realloc(w->data, w->cap);
        assert_non_null(w->data);
    }
    memcpy(w->data + w->len, p, n);
    w->len += n;
}

static void wire_varint(wire *w, uint64_t v)
{
    uint8_t b[10];
    size_t n = 0;
    do {
        b[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v != 0)
            b[n] |= 0x80;
        n++;
    } while (v != 0);
    wire_bytes(w, b, n);
}

/* A length-delimited field: any bytes, NULs included. */
static void wire_len(wire *w, uint32_t field, const void *p, size_t n)
{
    wire_varint(w, (uint64_t)field << 3 | 2);
    wire_varint(w, n);
    wire_bytes(w, p, n);
}

/* n bytes of two-byte unknown fields (field 15, varint 0): the cheapest to send and, decoded
 * by protobuf-c, the most expensive to hold. */
static void wire_unknown_fill(wire *w, size_t n)
{
    for (size_t i = 0; i + 1 < n; i += 2)
        wire_bytes(w, "\x78\x00", 2);
}

typedef struct hostile {
    const char *method;  /* after "buzz.backfill.v1.Admin." */
    const void *id;      /* ControlRequest.id bytes; NULL: absent */
    size_t id_len;       /* 0: strlen(id) */
    const void *token;   /* NULL: absent */
    size_t token_len;    /* bytes of token (it may hold NUL bytes); 0 with token: empty */
    size_t body_pad;     /* unknown fields appended to the body, bytes */
    size_t envelope_pad; /* unknown fields appended to the envelope, bytes */
} hostile;

/* The request message of h; the request ID is fresh and random. */
static wire encode(const hostile *h)
{
    wire body = {0}, env = {0};
    if (h->id != NULL)
        wire_len(&body, 1, h->id, h->id_len ? h->id_len : strlen(h->id));
    wire_unknown_fill(&body, h->body_pad);
    char method[96];
    snprintf(method, sizeof method, ADMIN "%s", h->method);
    wire_len(&env, 1, method, strlen(method));
    uint8_t rid[16];
    bft_token_id_new(rid);
    wire_len(&env, 2, rid, sizeof rid);
    if (h->token != NULL)
        wire_len(&env, 3, h->token, h->token_len);
    wire_len(&env, 4, body.data ? body.data : (const uint8_t *)"", body.len);
    wire_varint(&env, 5 << 3 | 0);
    wire_varint(&env, 20000);
    wire_unknown_fill(&env, h->envelope_pad);
    free(body.data);
    return env;
}

/* Send h to url on a fresh REQ socket; the status code of the answer (fails without one). */
static int exchange(const char *url, const hostile *h, char *message, size_t message_len)
{
    nng_socket s;
    assert_int_equal(nng_req0_open(&s), 0);
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 30000);
    nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, 30000);
    assert_int_equal(nng_dial(s, url, NULL, 0), 0);
    wire w = encode(h);
    assert_int_equal(nng_send(s, w.data, w.len, 0), 0);
    free(w.data);
    void *reply = NULL;
    size_t reply_len = 0;
    assert_int_equal(nng_recv(s, &reply, &reply_len, NNG_FLAG_ALLOC), 0);
    Buzz__Backfill__V1__ResponseEnvelope *resp =
        buzz__backfill__v1__response_envelope__unpack(NULL, reply_len, reply);
    nng_free(reply, reply_len);
    nng_close(s);
    assert_non_null(resp);
    assert_non_null(resp->status);
    int code = resp->status->code;
    if (code != BD_SC(OK))
        assert_false(resp->has_body); /* a refusal carries no state */
    if (message != NULL)
        snprintf(message, message_len, "%s|%s", resp->status->message ? resp->status->message : "",
                 resp->status->detail ? resp->status->detail : "");
    buzz__backfill__v1__response_envelope__free_unpacked(resp, NULL);
    return code;
}

/* ---- state ------------------------------------------------------------------------------- */

/* Everything a refused request could change. */
static char *snapshot(void)
{
    char *s = bt_text(pg, "SELECT coalesce((SELECT string_agg(row_to_json(b)::text, E'\\n'"
                          " ORDER BY b.id) FROM buzz_backfill.backfill b), '')"
                          " || (SELECT count(*) FROM buzz_backfill.request)::text");
    assert_non_null(s);
    return s;
}

static long long max_seq(void)
{
    return bt_int(pg, "SELECT coalesce(max(seq), 0) FROM buzz_backfill.audit");
}

/* The one audit row after seq as "action|backfill_id|actor|authority|outcome", NULL as "-". */
static char *audited_after(long long seq)
{
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM buzz_backfill.audit WHERE seq > %lld", seq),
                     1);
    return bt_text(pg,
                   "SELECT concat_ws('|', action, coalesce(backfill_id, '-'),"
                   " coalesce(actor, '-'), authority, outcome)"
                   " FROM buzz_backfill.audit WHERE seq > %lld",
                   seq);
}

static void assert_audited(long long seq, const char *want)
{
    char *got = audited_after(seq);
    if (strcmp(got, want) != 0)
        fail_msg("audit row \"%s\", want \"%s\"", got, want);
    free(got);
}

/* Peak resident set of the daemon, kB. */
static long daemon_hwm_kb(void)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)d.pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    long kb = -1;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
            break;
    fclose(f);
    assert_true(kb > 0);
    return kb;
}

/* ---- setup ------------------------------------------------------------------------------- */

static int setup(void **state)
{
    (void)state;
    pg = bd_suite_open("hostile");
    bt_make_items(pg, "c09_items", 100);
    bd_migrate(NULL);
    bd_options o = bd_defaults();
    o.definitions = "c09";
    o.workers = 0; /* rows move only when a control moves them */
    bd_start(&d, &o);
    bd_wait_registered(pg, 2);
    bfc_client *c = bd_client(d.ipc_url, NULL, 0, 0);
    assert_int_equal(bd_control(c, "Start", RUNNING, NULL), BD_SC(OK));
    bfc_close(c);
    bd_mint(tok_control, sizeof tok_control,
            &(bd_token_spec){.actor = "op@test", .caps = BFT_CAP_CONTROL | BFT_CAP_VALIDATE}, NULL);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bd_suite_close(&d, pg, !all_passed);
    return 0;
}

/* ---- cases ------------------------------------------------------------------------------- */

static void test_unknown_field_flood_is_bounded(void **state)
{
    (void)state;
    /* warm up: the request thread's engine session and nng's buffers exist before the baseline */
    hostile warm = {.method = "Pause", .id = RUNNING};
    char msg[256];
    assert_int_equal(exchange(d.tcp_url, &warm, msg, sizeof msg), BD_SC(UNAUTHENTICATED));
    long before = daemon_hwm_kb();
    char *state_before = snapshot();
    long long seq = max_seq();
    /* four tokenless Pauses of just under 1 MiB: half unknown fields in the body, half in the
     * envelope */
    hostile h = {.method = "Pause",
                 .id = RUNNING,
                 .body_pad = MEBIBYTE / 2 - 256,
                 .envelope_pad = MEBIBYTE / 2 - 256};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(exchange(d.tcp_url, &h, msg, sizeof msg), BD_SC(UNAUTHENTICATED));
        assert_string_equal(msg, "unauthenticated|missing token");
    }
    long after = daemon_hwm_kb();
    print_message("daemon VmHWM %ld kB -> %ld kB (+%ld kB) for four 1 MiB unknown-field "
                  "requests\n",
                  before, after, after - before);
    if (after - before > HWM_MAX_KB)
        fail_msg("peak memory grew by %ld kB, more than %d kB", after - before, HWM_MAX_KB);
    char *state_after = snapshot();
    assert_string_equal(state_before, state_after);
    free(state_before);
    free(state_after);
    /* accounted for: the attempts are audited (individually or counted, see the flood test) */
    assert_true(bt_int(pg, "SELECT count(*) FROM buzz_backfill.audit WHERE seq > %lld", seq) >= 1);
}

static void test_oversized_body(void **state)
{
    (void)state;
    char *before = snapshot();
    long long seq = max_seq();
    hostile h = {.method = "Pause",
                 .id = RUNNING,
                 .token = tok_control,
                 .token_len = strlen(tok_control),
                 .body_pad = 8192};
    char msg[256];
    assert_int_equal(exchange(d.tcp_url, &h, msg, sizeof msg), BD_SC(RESOURCE_EXHAUSTED));
    assert_string_equal(msg, "request body too large|a Pause request body may be at most 4096 "
                             "bytes");
    assert_audited(seq, "pause|" RUNNING "|op@test|token kid=k1|rejected: resource exhausted: "
                        "a Pause request body may be at most 4096 bytes");
    char *after = snapshot();
    assert_string_equal(before, after);
    free(before);
    free(after);
}

static void test_nul_in_token(void **state)
{
    (void)state;
    char *before = snapshot();
    long long seq = max_seq();
    char token[BFT_TOKEN_MAX + 16];
    size_t n = strlen(tok_control);
    memcpy(token, tok_control, n);
    memcpy(token + n, "\0junk", 5);
    hostile h = {.method = "Pause", .id = RUNNING, .token = token, .token_len = n + 5};
    char msg[256];
    assert_int_equal(exchange(d.tcp_url, &h, msg, sizeof msg), BD_SC(UNAUTHENTICATED));
    assert_string_equal(msg, "unauthenticated|malformed");
    assert_audited(seq, "pause|" RUNNING
                        "|-|unauthenticated tcp addr=127.0.0.1|rejected: unauthenticated: "
                        "malformed");
    char *after = snapshot();
    assert_string_equal(before, after);
    free(before);
    free(after);
}

static void test_nul_in_id(void **state)
{
    (void)state;
    char *before = snapshot();
    long long seq = max_seq();
    static const char id[] = RUNNING "\0; DROP";
    hostile h = {.method = "Pause",
                 .id = id,
                 .id_len = sizeof id - 1,
                 .token = tok_control,
                 .token_len = strlen(tok_control)};
    char msg[256];
    assert_int_equal(exchange(d.tcp_url, &h, msg, sizeof msg), BD_SC(INVALID_ARGUMENT));
    assert_string_equal(msg, "invalid string|field id holds a NUL byte");
    /* audited with the whole ID the request carried, the NUL made visible */
    assert_audited(seq, "pause|" RUNNING "?; DROP|op@test|token kid=k1|rejected: invalid "
                        "argument: field id holds a NUL byte");
    char *after = snapshot();
    assert_string_equal(before, after); /* still running: nothing acted on the prefix */
    free(before);
    free(after);
    assert_int_equal(bt_int(pg,
                            "SELECT count(*) FROM buzz_backfill.backfill WHERE id = '" RUNNING "'"
                            " AND state = 'running'"),
                     1);
}

static void test_empty_token_is_malformed(void **state)
{
    (void)state;
    char *before = snapshot();
    long long seq = max_seq();
    hostile h = {.method = "Pause", .id = RUNNING, .token = "", .token_len = 0};
    char msg[256];
    assert_int_equal(exchange(d.ipc_url, &h, msg, sizeof msg), BD_SC(UNAUTHENTICATED));
    assert_string_equal(msg, "unauthenticated|malformed");
    char want[256];
    snprintf(want, sizeof want,
             "pause|" RUNNING "|-|unauthenticated ipc uid=%ld|rejected: unauthenticated: malformed",
             (long)getuid());
    assert_audited(seq, want);
    char *after = snapshot();
    assert_string_equal(before, after); /* no boundary authority, no pause */
    free(before);
    free(after);
    /* while the same request without a token is what the boundary authorizes */
    hostile none = {.method = "Pause", .id = RUNNING};
    assert_int_equal(exchange(d.ipc_url, &none, msg, sizeof msg), BD_SC(OK));
    hostile resume = {.method = "Resume", .id = RUNNING};
    assert_int_equal(exchange(d.ipc_url, &resume, msg, sizeof msg), BD_SC(OK));
}

static void test_hostile_text_is_audited(void **state)
{
    (void)state;
    char *before = snapshot();
    /* invalid UTF-8 through the ipc boundary (authorized: the handler and the engine see it) */
    long long seq = max_seq();
    hostile bad = {.method = "Pause",
                   .id = "c09.\xff\xfe\xc3"
                         "bad"};
    char msg[256];
    assert_int_equal(exchange(d.ipc_url, &bad, msg, sizeof msg), BD_SC(INVALID_ARGUMENT));
    char want[256];
    snprintf(want, sizeof want,
             "pause|c09.???bad|-|ipc uid=%ld|rejected: invalid argument: invalid stable id or "
             "request id",
             (long)getuid());
    assert_audited(seq, want);

    seq = max_seq();
    hostile val = {.method = "Validate",
                   .id = "c09.\xff\xfe\xc3"
                         "bad"};
    assert_int_equal(exchange(d.ipc_url, &val, msg, sizeof msg), BD_SC(INVALID_ARGUMENT));
    assert_null(strstr(msg, "write audit"));
    assert_null(strstr(msg, "22021"));
    snprintf(want, sizeof want, "validate|c09.???bad|-|ipc uid=%ld|rejected: invalid argument",
             (long)getuid());
    assert_audited(seq, want);

    /* bidirectional overrides and C1 controls never reach the audit: U+202E, U+2066, U+0085 */
    seq = max_seq();
    hostile bidi = {.method = "Pause",
                    .id = "c09.\xe2\x80\xae"
                          "evil\xe2\x81\xa6\xc2\x85x"};
    assert_int_equal(exchange(d.ipc_url, &bidi, msg, sizeof msg), BD_SC(INVALID_ARGUMENT));
    snprintf(want, sizeof want,
             "pause|c09.?evil??x|-|ipc uid=%ld|rejected: invalid argument: invalid stable id or "
             "request id",
             (long)getuid());
    assert_audited(seq, want);
    /* and an unauthenticated attempt with the same ID is sanitized on the dispatcher's path */
    seq = max_seq();
    assert_int_equal(exchange(d.tcp_url, &bidi, msg, sizeof msg), BD_SC(UNAUTHENTICATED));
    char *row = audited_after(seq);
    assert_non_null(strstr(row, "pause|c09.?evil??x|-|unauthenticated tcp addr=127.0.0.1|"));
    free(row);
    assert_int_equal(bt_int(pg, "SELECT count(*) FROM buzz_backfill.audit"
                                " WHERE strpos(backfill_id, chr(8238)) > 0"
                                " OR strpos(backfill_id, chr(133)) > 0"),
                     0);
    char *after = snapshot();
    assert_string_equal(before, after);
    free(before);
    free(after);
}

/* Last: stops the daemon, whose SIGTERM flushes the counted rejections. */
static void test_flood_is_coalesced(void **state)
{
    (void)state;
    char *before = snapshot();
    long long seq = max_seq();
    nng_socket s;
    assert_int_equal(nng_req0_open(&s), 0);
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 30000);
    assert_int_equal(nng_dial(s, d.tcp_url, NULL, 0), 0);
    hostile h = {.method = "Start", .id = PENDING};
    for (int i = 0; i < FLOOD_N; i++) {
        wire w = encode(&h);
        assert_int_equal(nng_send(s, w.data, w.len, 0), 0);
        free(w.data);
        void *reply = NULL;
        size_t reply_len = 0;
        assert_int_equal(nng_recv(s, &reply, &reply_len, NNG_FLAG_ALLOC), 0);
        Buzz__Backfill__V1__ResponseEnvelope *resp =
            buzz__backfill__v1__response_envelope__unpack(NULL, reply_len, reply);
        nng_free(reply, reply_len);
        assert_non_null(resp);
        assert_int_equal(resp->status->code, BD_SC(UNAUTHENTICATED));
        buzz__backfill__v1__response_envelope__free_unpacked(resp, NULL);
    }
    nng_close(s);
    long long rows_live =
        bt_int(pg, "SELECT count(*) FROM buzz_backfill.audit WHERE " FLOOD_ROWS, seq);
    assert_true(rows_live >= 1);           /* the first ones of the window are written at once */
    assert_true(rows_live < FLOOD_N / 10); /* the audit does not fill up */

    bd_stop(&d); /* SIGTERM: the counted rejections are written before exit */
    long long rows = bt_int(pg, "SELECT count(*) FROM buzz_backfill.audit WHERE " FLOOD_ROWS, seq);
    long long total =
        bt_int(pg, "SELECT sum(count) FROM buzz_backfill.audit WHERE " FLOOD_ROWS, seq);
    print_message("%d token-less requests: %lld audit rows (%lld before stop), counts sum to "
                  "%lld\n",
                  FLOOD_N, rows, rows_live, total);
    assert_int_equal(total, FLOOD_N); /* every attempt accounted for, none twice */
    assert_true(rows < FLOOD_N / 10);
    /* a coalesced row says when: a window, and no single request ID */
    assert_true(bt_int(pg,
                       "SELECT count(*) FROM buzz_backfill.audit WHERE " FLOOD_ROWS
                       " AND count > 1 AND window_start IS NOT NULL AND window_end >= window_start"
                       " AND request_id IS NULL AND backfill_id = '" PENDING "'",
                       seq) >= 1);
    char *after = snapshot();
    assert_string_equal(before, after);
    free(before);
    free(after);
    all_passed = true;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_field_flood_is_bounded),
        cmocka_unit_test(test_oversized_body),
        cmocka_unit_test(test_nul_in_token),
        cmocka_unit_test(test_nul_in_id),
        cmocka_unit_test(test_empty_token_is_malformed),
        cmocka_unit_test(test_hostile_text_is_audited),
        cmocka_unit_test(test_flood_is_coalesced),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
