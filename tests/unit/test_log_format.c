/*
 * test_log_format.c - the daemon's log line formats (server/src/log.c): a JSON line is one
 * object that json-c parses with UTF-8 validation on, whatever the record's text holds
 * (quotes, backslashes, control bytes, invalid UTF-8 become escapes or U+FFFD); text fields are
 * cut after their bound on a character boundary with "... (N more bytes)"; fields a record
 * does not have are absent; the names and types of present ones are the documented ones. The
 * text format keeps one line without control bytes and names the event.
 *
 * Guards proved: the escaper (a plain copy leaves a raw quote, newline or invalid byte: the
 * parse fails), the UTF-8 repair (json-c's validation refuses the line), the bounds (the parsed
 * length), the omission of absent fields (the key count).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "log.h"

static const struct timespec when = {.tv_sec = 1796321952, .tv_nsec = 123456789};

static char line[SRV_LOG_LINE_MAX];

/* Format rec, check the line is one newline-terminated line, parse it strictly. */
static json_object *format_parse(const bf_log_record *rec)
{
    size_t n = srv_log_format_json(line, sizeof line, rec, &when, 4242);
    assert_int_equal(n, strlen(line));
    assert_true(n > 2 && line[n - 1] == '\n');
    for (size_t i = 0; i + 1 < n; i++)
        if ((unsigned char)line[i] < 0x20)
            fail_msg("raw control byte 0x%02x at %zu in %s", (unsigned char)line[i], i, line);
    json_tokener *tok = json_tokener_new();
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    json_object *obj = json_tokener_parse_ex(tok, line, (int)n - 1);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    json_tokener_free(tok);
    if (obj == NULL || jerr != json_tokener_success)
        fail_msg("not a JSON line (%s): %s", json_tokener_error_desc(jerr), line);
    assert_true(json_object_is_type(obj, json_type_object));
    return obj;
}

static const char *get_string(json_object *obj, const char *key)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(obj, key, &v))
        fail_msg("no %s in %s", key, line);
    assert_true(json_object_is_type(v, json_type_string));
    return json_object_get_string(v);
}

static int64_t get_int(json_object *obj, const char *key)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(obj, key, &v))
        fail_msg("no %s in %s", key, line);
    assert_true(json_object_is_type(v, json_type_int));
    return json_object_get_int64(v);
}

static json_object *parse_msg(const char *msg)
{
    bf_log_record rec = BF_LOG_RECORD_INIT;
    rec.msg = msg;
    return format_parse(&rec);
}

static void test_plain_record_has_only_the_base_fields(void **state)
{
    (void)state;
    bf_log_record rec = BF_LOG_RECORD_INIT;
    rec.level = BF_LOG_WARN;
    rec.msg = "hello";
    json_object *obj = format_parse(&rec);
    assert_int_equal(json_object_object_length(obj), 5); /* absent fields are omitted */
    assert_string_equal(get_string(obj, "time"), "2026-12-03T18:19:12.123Z");
    assert_string_equal(get_string(obj, "level"), "warn");
    assert_string_equal(get_string(obj, "event"), "log");
    assert_int_equal(get_int(obj, "pid"), 4242);
    assert_string_equal(get_string(obj, "msg"), "hello");
    json_object_put(obj);
}

static void test_every_field_named_and_typed(void **state)
{
    (void)state;
    bf_log_record rec = BF_LOG_RECORD_INIT;
    rec.level = BF_LOG_DEBUG;
    rec.event = BF_EV_BATCH_COMMITTED;
    rec.msg = "m";
    rec.id = "demo.events.v1";
    rec.generation = 7;
    rec.checkpoint = "{2024-01-01 00:00:00+00,\\\\x01}";
    rec.batch_size = 500;
    rec.batches = 3;
    rec.rows = 1500;
    rec.touched = 1200;
    rec.duration_us = 1234567;
    rec.reason = "40";
    json_object *obj = format_parse(&rec);
    assert_int_equal(json_object_object_length(obj), 14);
    assert_string_equal(get_string(obj, "level"), "debug");
    assert_string_equal(get_string(obj, "event"), "batch.committed");
    assert_string_equal(get_string(obj, "id"), "demo.events.v1");
    assert_int_equal(get_int(obj, "generation"), 7);
    assert_string_equal(get_string(obj, "checkpoint"), rec.checkpoint);
    assert_int_equal(get_int(obj, "batch_size"), 500);
    assert_int_equal(get_int(obj, "batches"), 3);
    assert_int_equal(get_int(obj, "rows"), 1500);
    assert_int_equal(get_int(obj, "touched"), 1200);
    json_object *d = NULL;
    assert_true(json_object_object_get_ex(obj, "duration_ms", &d));
    assert_true(json_object_is_type(d, json_type_double));
    assert_true(json_object_get_double(d) > 1234.566 && json_object_get_double(d) < 1234.568);
    assert_string_equal(get_string(obj, "reason"), "40");
    json_object_put(obj);
    /* zero is a value, not an absence */
    rec.generation = rec.batches = rec.rows = rec.touched = 0;
    rec.duration_us = 5;
    obj = format_parse(&rec);
    assert_int_equal(get_int(obj, "batches"), 0);
    assert_true(strstr(line, "\"duration_ms\":0.005") != NULL);
    json_object_put(obj);
}

static void test_quotes_backslashes_controls_escaped(void **state)
{
    (void)state;
    const char *msg = "say \"hi\" \\ path\nnext\tcol\r\x01\x1f\x7f end";
    json_object *obj = parse_msg(msg);
    assert_string_equal(get_string(obj, "msg"), msg); /* the exact text survives */
    json_object_put(obj);
    /* in a field other than msg too: a hostile stable ID */
    bf_log_record rec = BF_LOG_RECORD_INIT;
    rec.id = "x\",\"level\":\"error";
    obj = format_parse(&rec);
    assert_string_equal(get_string(obj, "id"), rec.id);
    assert_string_equal(get_string(obj, "level"), "info");
    json_object_put(obj);
}

static void test_invalid_utf8_replaced(void **state)
{
    (void)state;
    /* a lone 0xff, a lead byte without continuation, a surrogate, an overlong '/', a code point
     * beyond U+10FFFF, a truncated sequence at the end; valid accents and emoji stay */
    json_object *obj = parse_msg("ok\xff\xc3(\xed\xa0\x80\xc0\xaf\xf4\x90\x80\x80 caf\xc3\xa9 "
                                 "\xf0\x9f\x98\x80 \xe2\x82");
    const char *r = "\xef\xbf\xbd";
    char want[256];
    snprintf(want, sizeof want, "ok%s%s(%s%s%s%s%s%s%s%s%s caf\xc3\xa9 \xf0\x9f\x98\x80 %s%s", r, r,
             r, r, r, r, r, r, r, r, r, r, r);
    assert_string_equal(get_string(obj, "msg"), want);
    json_object_put(obj);
}

static void test_bounded_with_marker(void **state)
{
    (void)state;
    static char big[5000 + 1];
    memset(big, 'x', 5000);
    big[5000] = '\0';
    json_object *obj = parse_msg(big);
    const char *msg = get_string(obj, "msg");
    assert_int_equal(strlen(msg), SRV_LOG_MSG_MAX + strlen("... (3976 more bytes)"));
    assert_string_equal(msg + SRV_LOG_MSG_MAX, "... (3976 more bytes)");
    json_object_put(obj);
    /* cut on a character boundary: the two-byte character that would cross the bound goes */
    memset(big, 'x', SRV_LOG_MSG_MAX - 1);
    memcpy(big + SRV_LOG_MSG_MAX - 1, "\xc3\xa9", 3);
    obj = parse_msg(big);
    msg = get_string(obj, "msg");
    assert_int_equal(strlen(msg), SRV_LOG_MSG_MAX - 1 + strlen("... (2 more bytes)"));
    assert_string_equal(msg + SRV_LOG_MSG_MAX - 1, "... (2 more bytes)");
    json_object_put(obj);
    /* the worst case, every byte escaped in every field, still makes one complete line */
    static char ctl[5000 + 1];
    memset(ctl, 0x01, 5000);
    ctl[5000] = '\0';
    bf_log_record rec = BF_LOG_RECORD_INIT;
    rec.msg = rec.id = rec.checkpoint = rec.reason = ctl;
    obj = format_parse(&rec);
    assert_int_equal(strlen(get_string(obj, "id")),
                     SRV_LOG_FIELD_MAX + strlen("... (4400 more bytes)"));
    assert_int_equal(strlen(get_string(obj, "reason")),
                     SRV_LOG_FIELD_MAX + strlen("... (4400 more bytes)"));
    json_object_put(obj);
}

static void test_text_format_one_line_with_event(void **state)
{
    (void)state;
    bf_log_record rec = BF_LOG_RECORD_INIT;
    rec.event = BF_EV_CLAIM_ACQUIRED;
    rec.msg = "claimed a\nb at generation 2";
    size_t n = srv_log_format_text(line, sizeof line, &rec, &when, 7);
    assert_int_equal(n, strlen(line));
    assert_string_equal(line, "2026-12-03T18:19:12.123Z buzz-backfilld[7] info: claimed a b at "
                              "generation 2 [claim.acquired]\n");
    rec.event = BF_EV_NONE;
    srv_log_format_text(line, sizeof line, &rec, &when, 7);
    assert_string_equal(line, "2026-12-03T18:19:12.123Z buzz-backfilld[7] info: claimed a b at "
                              "generation 2\n");
}

static void test_format_names(void **state)
{
    (void)state;
    srv_log_format f = SRV_LOG_TEXT;
    assert_true(srv_log_format_parse("json", &f));
    assert_int_equal(f, SRV_LOG_JSON);
    assert_true(srv_log_format_parse("TEXT", &f));
    assert_int_equal(f, SRV_LOG_TEXT);
    assert_false(srv_log_format_parse("xml", &f));
    assert_false(srv_log_format_parse("", &f));
    assert_string_equal(srv_log_format_name(SRV_LOG_JSON), "json");
    /* every engine event code is dotted lower case, and unknown values read as "log" */
    for (int e = 1; e < BF_EV_COUNT; e++)
        assert_non_null(strchr(bf_event_code((bf_event)e), '.'));
    assert_string_equal(bf_event_code(BF_EV_COUNT), "log");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_record_has_only_the_base_fields),
        cmocka_unit_test(test_every_field_named_and_typed),
        cmocka_unit_test(test_quotes_backslashes_controls_escaped),
        cmocka_unit_test(test_invalid_utf8_replaced),
        cmocka_unit_test(test_bounded_with_marker),
        cmocka_unit_test(test_text_format_one_line_with_event),
        cmocka_unit_test(test_format_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
