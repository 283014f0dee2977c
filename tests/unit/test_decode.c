/*
 * test_decode.c - request decoding off the wire (server/src/admin/decode.c): the allocation-free
 * envelope scan, the NUL checks of string fields (envelope and bodies, repeated and nested
 * fields included), the ID lookup for the audit, and the allocator budget of a body's decode.
 *
 * Guards proved (each removal fails a test here):
 * - test_scan_agrees_with_protobuf_c: the scan accepts exactly what protobuf-c's unpack accepts
 *   and reads the same values, over hand-made edge cases and 20000 mutated envelopes; a
 *   relaxed length-prefix, varint or wire-type check makes them disagree.
 * - test_strings_with_nul: srv_wire_check_strings() and the envelope's nul_field; without the
 *   memchr a NUL-bearing id, a nested Definition.description, a repeated capability and a token
 *   all pass.
 * - test_method_with_nul: the NUL check of the method name in dispatch_run().
 * - test_budget: the budget refusing a 4 KiB body of unknown fields (SRV_DECODE_BUDGET) that
 *   protobuf-c would expand to about 180 KB, and returning every byte on free. It also prints
 *   what protobuf-c holds for a 1 MiB envelope of unknown fields (the memory the scan avoids).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "log.h"
#include "srv.h"

typedef Buzz__Backfill__V1__RequestEnvelope envelope;

/* ---- a wire writer ---------------------------------------------------------------------- */

typedef struct wire {
    uint8_t buf[8192];
    size_t len;
} wire;

static void put_bytes(wire *w, const void *p, size_t n)
{
    assert_true(w->len + n <= sizeof w->buf);
    memcpy(w->buf + w->len, p, n);
    w->len += n;
}

static void put_varint(wire *w, uint64_t v)
{
    do {
        uint8_t b = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v != 0)
            b |= 0x80;
        put_bytes(w, &b, 1);
    } while (v != 0);
}

static void put_len(wire *w, uint32_t field, const void *p, size_t n)
{
    put_varint(w, (uint64_t)field << 3 | 2);
    put_varint(w, n);
    put_bytes(w, p, n);
}

/* ---- the envelope ----------------------------------------------------------------------- */

/* The scan and protobuf-c agree on bytes in: both refuse, or both accept with equal fields. */
static void assert_agree(const uint8_t *in, size_t len)
{
    srv_envelope s;
    bf_err err = srv_envelope_scan(&s, in, len);
    envelope *env = buzz__backfill__v1__request_envelope__unpack(NULL, len, in);
    if ((err == BF_OK) != (env != NULL))
        fail_msg("scan %s, protobuf-c %s (%zu bytes)", err == BF_OK ? "accepts" : "refuses",
                 env != NULL ? "accepts" : "refuses", len);
    if (env == NULL)
        return;
    assert_int_equal(s.method.present, env->method != NULL);
    if (env->method != NULL && s.nul_field == NULL) {
        assert_int_equal(s.method.len, strlen(env->method));
        assert_memory_equal(s.method.data, env->method, s.method.len);
    }
    assert_int_equal(s.request_id.present, env->has_request_id);
    if (env->has_request_id) {
        assert_int_equal(s.request_id.len, env->request_id.len);
        if (s.request_id.len > 0)
            assert_memory_equal(s.request_id.data, env->request_id.data, s.request_id.len);
    }
    assert_int_equal(s.token.present, env->token != NULL);
    assert_int_equal(s.body.present, env->has_body);
    if (env->has_body) {
        assert_int_equal(s.body.len, env->body.len);
        if (s.body.len > 0)
            assert_memory_equal(s.body.data, env->body.data, s.body.len);
    }
    assert_int_equal(s.has_deadline_ms, env->has_deadline_ms);
    if (env->has_deadline_ms)
        assert_int_equal(s.deadline_ms, env->deadline_ms);
    buzz__backfill__v1__request_envelope__free_unpacked(env, NULL);
}

static size_t packed_envelope(uint8_t *out, size_t cap)
{
    static const uint8_t rid[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    static const uint8_t body[] = {0x0a, 0x0c, 'c', '0', '9', '.', 'i',
                                   't',  'e',  'm', 's', '_', 'v', '1'};
    envelope env = BUZZ__BACKFILL__V1__REQUEST_ENVELOPE__INIT;
    env.method = "buzz.backfill.v1.Admin.Pause";
    env.has_request_id = true;
    env.request_id.data = (uint8_t *)rid;
    env.request_id.len = sizeof rid;
    env.token = "bbt1.abc.def";
    env.has_body = true;
    env.body.data = (uint8_t *)body;
    env.body.len = sizeof body;
    env.has_deadline_ms = true;
    env.deadline_ms = 1234567;
    size_t len = buzz__backfill__v1__request_envelope__get_packed_size(&env);
    assert_true(len <= cap);
    return buzz__backfill__v1__request_envelope__pack(&env, out);
}

static void test_scan_reads_the_envelope(void **state)
{
    (void)state;
    uint8_t buf[256];
    size_t len = packed_envelope(buf, sizeof buf);
    srv_envelope s;
    assert_int_equal(srv_envelope_scan(&s, buf, len), BF_OK);
    assert_int_equal(s.method.len, strlen("buzz.backfill.v1.Admin.Pause"));
    assert_memory_equal(s.method.data, "buzz.backfill.v1.Admin.Pause", s.method.len);
    assert_int_equal(s.request_id.len, 16);
    assert_int_equal(s.token.len, 12);
    assert_int_equal(s.body.len, 14);
    assert_true(s.has_deadline_ms);
    assert_int_equal(s.deadline_ms, 1234567);
    assert_null(s.nul_field);
    /* pointers into the message: nothing copied */
    assert_true(s.method.data > buf && s.method.data < buf + len);
    assert_agree(buf, len);

    /* unknown fields of every wire type are skipped; the last occurrence of a field wins */
    wire w = {0};
    put_bytes(&w, buf, len);
    put_bytes(&w, "\x78\x00", 2);                             /* 15: varint */
    put_bytes(&w, "\x79\x01\x02\x03\x04\x05\x06\x07\x08", 9); /* 15: 64-bit */
    put_bytes(&w, "\x7d\x01\x02\x03\x04", 5);                 /* 15: 32-bit */
    put_len(&w, 99, "junk", 4);                               /* 99: length-delimited */
    put_len(&w, 1, "buzz.backfill.v1.Admin.Get", 26);
    assert_int_equal(srv_envelope_scan(&s, w.buf, w.len), BF_OK);
    assert_int_equal(s.method.len, 26);
    assert_memory_equal(s.method.data, "buzz.backfill.v1.Admin.Get", 26);
    assert_agree(w.buf, w.len);

    /* empty input: a valid, empty envelope */
    assert_int_equal(srv_envelope_scan(&s, NULL, 0), BF_OK);
    assert_false(s.method.present);
}

static void test_scan_agrees_with_protobuf_c(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        const char *bytes;
        size_t len;
    } cases[] = {
        {"truncated tag", "\x80", 1},
        {"tag of 5 bytes", "\xf8\xff\xff\xff\x0f\x00", 6},
        {"tag of 6 bytes", "\xf8\xff\xff\xff\xff\x0f\x00", 7},
        {"field 0", "\x00\x00", 2},
        {"group start", "\x7b", 1},
        {"group end", "\x7c", 1},
        {"wire type 6", "\x7e", 1},
        {"wire type 7", "\x7f", 1},
        {"varint of 10 bytes", "\x78\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11},
        {"varint of 11 bytes", "\x78\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12},
        {"64-bit short", "\x79\x01\x02", 3},
        {"32-bit short", "\x7d\x01", 2},
        {"length past the end",
         "\x0a\x05"
         "abc",
         5},
        {"length prefix of 5 bytes",
         "\x0a\x83\x80\x80\x80\x00"
         "abc",
         9},
        {"length prefix of 6 bytes",
         "\x0a\x83\x80\x80\x80\x80\x00"
         "abc",
         10},
        {"method as a varint", "\x08\x01", 2},
        {"body as 32-bit", "\x25\x01\x02\x03\x04", 5},
        {"deadline as bytes", "\x2a\x01\x05", 3},
        {"deadline of 10 bytes", "\x28\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11},
        {"deadline beyond 32 bits", "\x28\x80\x80\x80\x80\x10", 6},
        {"empty strings", "\x0a\x00\x1a\x00\x12\x00\x22\x00", 8},
        {"NUL in method",
         "\x0a\x03"
         "a\0b",
         5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        print_message("%s\n", cases[i].name);
        assert_agree((const uint8_t *)cases[i].bytes, cases[i].len);
    }
    /* mutations of a valid envelope: flipped, dropped and inserted bytes */
    uint8_t base[256];
    size_t base_len = packed_envelope(base, sizeof base);
    uint32_t seed = 7;
    for (int round = 0; round < 20000; round++) {
        uint8_t buf[300];
        memcpy(buf, base, base_len);
        size_t len = base_len;
        for (int k = 0; k < 1 + round % 4; k++) {
            seed = seed * 1103515245u + 12345u;
            size_t at = (seed >> 8) % len;
            uint8_t v = (uint8_t)(seed >> 24);
            switch ((seed >> 4) % 3) {
            case 0:
                buf[at] = v;
                break;
            case 1:
                memmove(buf + at, buf + at + 1, len - at - 1);
                len--;
                break;
            default:
                memmove(buf + at + 1, buf + at, len - at);
                buf[at] = v;
                len++;
                break;
            }
            if (len == 0 || len >= sizeof buf - 1)
                break;
        }
        assert_agree(buf, len);
    }
}

/* ---- strings ---------------------------------------------------------------------------- */

static void test_strings_with_nul(void **state)
{
    (void)state;
    const ProtobufCFieldDescriptor *nul = NULL;
    /* a control's id */
    wire w = {0};
    put_len(&w, 1, "c09.running_v1\0; DROP", 21);
    assert_int_equal(srv_wire_check_strings(&buzz__backfill__v1__control_request__descriptor, w.buf,
                                            w.len, &nul),
                     BF_ERR_INVALID_ARGUMENT);
    assert_non_null(nul);
    assert_string_equal(nul->name, "id");
    /* which protobuf-c would have cut silently */
    Buzz__Backfill__V1__ControlRequest *req =
        buzz__backfill__v1__control_request__unpack(NULL, w.len, w.buf);
    assert_non_null(req);
    assert_string_equal(req->id, "c09.running_v1");
    buzz__backfill__v1__control_request__free_unpacked(req, NULL);
    /* clean strings pass, an empty one too; bytes fields may hold NULs */
    w.len = 0;
    put_len(&w, 1, "c09.running_v1", 14);
    put_len(&w, 1, "", 0);
    assert_int_equal(srv_wire_check_strings(&buzz__backfill__v1__control_request__descriptor, w.buf,
                                            w.len, &nul),
                     BF_OK);
    assert_null(nul);
    w.len = 0;
    put_len(&w, 2, "\0\0", 2); /* RequestEnvelope.request_id */
    assert_int_equal(srv_wire_check_strings(&buzz__backfill__v1__request_envelope__descriptor,
                                            w.buf, w.len, &nul),
                     BF_OK);

    /* nested: GetResponse.backfill.definition.description */
    wire def = {0}, bf = {0};
    put_len(&def, 1, "a\0b", 3);
    put_len(&bf, 1, "c09.items_v1", 12);
    put_len(&bf, 3, def.buf, def.len);
    w.len = 0;
    put_len(&w, 1, bf.buf, bf.len);
    assert_int_equal(
        srv_wire_check_strings(&buzz__backfill__v1__get_response__descriptor, w.buf, w.len, &nul),
        BF_ERR_INVALID_ARGUMENT);
    assert_non_null(nul);
    assert_string_equal(nul->name, "description");
    /* repeated: the second of WhoAmIResponse.capabilities */
    w.len = 0;
    put_len(&w, 3, "read", 4);
    put_len(&w, 3, "control\0x", 9);
    assert_int_equal(srv_wire_check_strings(&buzz__backfill__v1__who_am_iresponse__descriptor,
                                            w.buf, w.len, &nul),
                     BF_ERR_INVALID_ARGUMENT);
    assert_string_equal(nul->name, "capabilities");
    /* malformed bytes: refused, no field named */
    assert_int_equal(srv_wire_check_strings(&buzz__backfill__v1__control_request__descriptor,
                                            (const uint8_t *)"\x0a\x05"
                                                             "ab",
                                            4, &nul),
                     BF_ERR_INVALID_ARGUMENT);
    assert_null(nul);

    /* the envelope: a token with a NUL byte is found, and so is a method */
    w.len = 0;
    put_len(&w, 1, "buzz.backfill.v1.Admin.Pause", 28);
    put_len(&w, 3, "bbt1.a.b\0junk", 13);
    srv_envelope s;
    assert_int_equal(srv_envelope_scan(&s, w.buf, w.len), BF_OK);
    assert_non_null(s.nul_field);
    assert_string_equal(s.nul_field->name, "token");
    assert_int_equal(s.token.len, 13);
}

/* Through the dispatcher (no database: nothing here reaches the audit): a method name with a
 * NUL byte is a malformed envelope even when an earlier string (the token) holds one too, and
 * never the method its prefix names. Guard: the memchr on the method span in dispatch_run. */
static void test_method_with_nul(void **state)
{
    (void)state;
    srv_context ctx;
    memset(&ctx, 0, sizeof ctx);
    srv_session session = {.ctx = &ctx};
    srv_dispatcher *d = NULL;
    assert_int_equal(srv_dispatcher_new(&d, &ctx), BF_OK);
    assert_int_equal(srv_dispatcher_add(d, srv_admin_service(), srv_admin_policies()), BF_OK);
    wire w = {0};
    put_len(&w, 3, "bbt1\0x", 6);
    put_len(&w, 1, "buzz.backfill.v1.Admin.Pause\0x", 30);
    const srv_peer peer = {.listener = "tcp"};
    uint8_t *out = NULL;
    size_t out_len = 0;
    assert_int_equal(srv_dispatch(d, &session, &peer, w.buf, w.len, srv_now_us(), &out, &out_len),
                     BF_OK);
    Buzz__Backfill__V1__ResponseEnvelope *resp =
        buzz__backfill__v1__response_envelope__unpack(NULL, out_len, out);
    free(out);
    assert_non_null(resp);
    assert_int_equal(resp->status->code, BUZZ__BACKFILL__V1__STATUS_CODE__INVALID_ARGUMENT);
    assert_string_equal(resp->status->message, "malformed envelope");
    buzz__backfill__v1__response_envelope__free_unpacked(resp, NULL);
    srv_dispatcher_free(d);
}

static void test_last_id(void **state)
{
    (void)state;
    wire w = {0};
    put_len(&w, 1, "first.id", 8);
    put_bytes(&w, "\x78\x00", 2);
    put_len(&w, 1, "second.id", 9);
    srv_span id;
    assert_true(srv_wire_last_string(&buzz__backfill__v1__control_request__descriptor, "id", w.buf,
                                     w.len, &id));
    assert_int_equal(id.len, 9);
    assert_memory_equal(id.data, "second.id", 9);
    /* the same one protobuf-c decodes */
    Buzz__Backfill__V1__ControlRequest *req =
        buzz__backfill__v1__control_request__unpack(NULL, w.len, w.buf);
    assert_string_equal(req->id, "second.id");
    buzz__backfill__v1__control_request__free_unpacked(req, NULL);
    /* nothing from a malformed body, nothing without the field */
    put_bytes(&w, "\x0a\x09", 2);
    assert_false(srv_wire_last_string(&buzz__backfill__v1__control_request__descriptor, "id", w.buf,
                                      w.len, &id));
    assert_false(srv_wire_last_string(&buzz__backfill__v1__control_request__descriptor, "id",
                                      (const uint8_t *)"\x78\x00", 2, &id));
    assert_false(srv_wire_last_string(&buzz__backfill__v1__who_am_irequest__descriptor, "id",
                                      (const uint8_t *)"", 0, &id));
}

/* ---- the budget ------------------------------------------------------------------------- */

static void test_budget(void **state)
{
    (void)state;
    /* an ordinary body decodes well within it, and gives every byte back */
    wire w = {0};
    put_len(&w, 1, "c09.running_v1", 14);
    srv_budget b;
    srv_budget_init(&b, SRV_DECODE_BUDGET(4096));
    ProtobufCMessage *m = protobuf_c_message_unpack(
        &buzz__backfill__v1__control_request__descriptor, &b.allocator, w.len, w.buf);
    assert_non_null(m);
    assert_true(b.used > 0 && b.peak < 1024);
    protobuf_c_message_free_unpacked(m, &b.allocator);
    assert_int_equal(b.used, 0);
    assert_false(b.exceeded);

    /* a 4 KiB body of two-byte unknown fields is refused, and leaves nothing held */
    w.len = 0;
    put_len(&w, 1, "c09.running_v1", 14);
    while (w.len + 2 <= 4096)
        put_bytes(&w, "\x78\x00", 2);
    srv_budget_init(&b, SRV_DECODE_BUDGET(4096));
    m = protobuf_c_message_unpack(&buzz__backfill__v1__control_request__descriptor, &b.allocator,
                                  w.len, w.buf);
    assert_null(m);
    assert_true(b.exceeded);
    assert_int_equal(b.used, 0);
    /* unbounded, the same body would have held this much */
    srv_budget_init(&b, SIZE_MAX);
    m = protobuf_c_message_unpack(&buzz__backfill__v1__control_request__descriptor, &b.allocator,
                                  w.len, w.buf);
    assert_non_null(m);
    print_message("4 KiB body of unknown fields: protobuf-c holds %zu bytes (budget %zu)\n", b.peak,
                  SRV_DECODE_BUDGET(4096));
    assert_true(b.peak > SRV_DECODE_BUDGET(4096));
    protobuf_c_message_free_unpacked(m, &b.allocator);

    /* what the envelope scan avoids: protobuf-c decoding a 1 MiB envelope of unknown fields */
    size_t big = 1024 * 1024;
    uint8_t *env = malloc(big);
    assert_non_null(env);
    for (size_t i = 0; i < big; i += 2)
        memcpy(env + i, "\x78\x00", 2);
    srv_budget_init(&b, SIZE_MAX);
    m = protobuf_c_message_unpack(&buzz__backfill__v1__request_envelope__descriptor, &b.allocator,
                                  big, env);
    assert_non_null(m);
    print_message("1 MiB envelope of unknown fields: protobuf-c holds %zu kB at its peak; the "
                  "scan holds none\n",
                  b.peak / 1024);
    protobuf_c_message_free_unpacked(m, &b.allocator);
    srv_envelope s;
    assert_int_equal(srv_envelope_scan(&s, env, big), BF_OK);
    assert_false(s.method.present);
    free(env);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scan_reads_the_envelope),
        cmocka_unit_test(test_scan_agrees_with_protobuf_c),
        cmocka_unit_test(test_strings_with_nul),
        cmocka_unit_test(test_method_with_nul),
        cmocka_unit_test(test_last_id),
        cmocka_unit_test(test_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
