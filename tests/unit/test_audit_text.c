/*
 * test_audit_text.c - bf__audit_text() (engine/src/audit.c), what the audit stores of every
 * text a request carried: valid UTF-8 whatever the input (one '?' per maximal invalid subpart:
 * stray continuation bytes, truncated sequences, overlong forms, surrogates, code points beyond
 * U+10FFFF), C0/C1 controls, DEL, the line and paragraph separators and the bidirectional
 * controls (U+061C, U+200E, U+200F, U+202A..U+202E, U+2066..U+2069) replaced by '?', other text
 * (accents, CJK, emoji) kept, and the result bounded without splitting a character.
 *
 * Guard proved: the sanitizer itself. Replacing bf__audit_text by a plain bounded copy fails
 * every case here, and test_hostile_requests then sees PostgreSQL refuse (22021) the audit row
 * of an invalid-UTF-8 ID. A generated run checks the properties on 20000 random inputs with a
 * UTF-8 checker written independently here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"

static void expect(const char *in, size_t cap, const char *want)
{
    char out[256];
    assert_true(cap <= sizeof out);
    memset(out, 'X', sizeof out);
    bf__audit_text(out, cap, in);
    if (strcmp(out, want) != 0)
        fail_msg("bf__audit_text(\"%s\", %zu) = \"%s\", want \"%s\"", in ? in : "(null)", cap, out,
                 want);
    assert_true(strlen(out) < cap);
}

static void test_valid_text_is_kept(void **state)
{
    (void)state;
    expect("demo.events.content_len_v1", 81, "demo.events.content_len_v1");
    expect("caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80", 81,
           "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80");
    expect("", 81, "");
    expect(NULL, 81, "");
    /* the last code points of each length and the ones around the surrogates */
    expect("\xdf\xbf\xef\xbf\xbf\xf4\x8f\xbf\xbf\xed\x9f\xbf\xee\x80\x80", 81,
           "\xdf\xbf\xef\xbf\xbf\xf4\x8f\xbf\xbf\xed\x9f\xbf\xee\x80\x80");
}

static void test_invalid_utf8_is_replaced(void **state)
{
    (void)state;
    expect("a\xff"
           "b",
           81, "a?b");
    expect("\x80\xbf", 81, "??");  /* stray continuation bytes */
    expect("a\xc3", 81, "a?");     /* truncated at the end */
    expect("\xe2\x80x", 81, "?x"); /* one '?' for the maximal subpart */
    expect("\xf0\x9f\x98x", 81, "?x");
    expect("\xc0\x80", 81, "??");           /* overlong NUL */
    expect("\xe0\x80\xaf", 81, "???");      /* overlong '/' */
    expect("\xed\xa0\x80", 81, "???");      /* a surrogate */
    expect("\xf4\x90\x80\x80", 81, "????"); /* beyond U+10FFFF */
    expect("\xf5\x80\x80\x80", 81, "????");
    expect("c09.\xff\xfe\xc3"
           "bad",
           81, "c09.???bad");
}

static void test_controls_are_replaced(void **state)
{
    (void)state;
    expect("a\nb\tc\rd\x1b[2Je\x7f", 81, "a?b?c?d?[2Je?");
    expect("\xc2\x80\xc2\x85\xc2\x9f\xc2\xa0", 81, "???\xc2\xa0"); /* C1; NBSP stays */
    expect("x\xe2\x80\xa8y\xe2\x80\xa9z", 81, "x?y?z");            /* U+2028, U+2029 */
}

static void test_bidi_controls_are_replaced(void **state)
{
    (void)state;
    expect("evil\xe2\x80\xaetxt.exe", 81, "evil?txt.exe"); /* U+202E */
    expect("\xe2\x80\xaa\xe2\x80\xab\xe2\x80\xac\xe2\x80\xad", 81, "????");
    expect("\xe2\x81\xa6\xe2\x81\xa7\xe2\x81\xa8\xe2\x81\xa9", 81, "????"); /* U+2066..9 */
    expect("\xe2\x80\x8e\xe2\x80\x8f\xd8\x9c", 81, "???");                  /* LRM, RLM, ALM */
    /* neighbours that are not controls stay */
    expect("\xe2\x80\xa9"
           "\xe2\x80\xaf\xe2\x81\xa5\xe2\x81\xaa",
           81, "?\xe2\x80\xaf\xe2\x81\xa5\xe2\x81\xaa");
}

static void test_bounded_on_a_character_boundary(void **state)
{
    (void)state;
    expect("abcdefghij", 8, "abcd...");
    expect("abc", 4, "abc");  /* fits exactly: no marker */
    expect("abcd", 4, "abc"); /* no room for a marker */
    expect("ab\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac", 8, "ab...");
    expect("\xe2\x82\xac\xe2\x82\xac", 7, "\xe2\x82\xac\xe2\x82\xac");
    expect("\xe2\x82\xac\xe2\x82\xac"
           "a",
           7, "\xe2\x82\xac...");
    /* replacements shrink the text: an 80-byte column holds 80 of them */
    char in[161];
    for (int i = 0; i < 80; i++)
        memcpy(in + 2 * i, "\xc2\x85", 2);
    in[160] = '\0';
    char want[81];
    memset(want, '?', 80);
    want[80] = '\0';
    expect(in, 81, want);
}

/* ---- generated inputs ------------------------------------------------------------------- */

/* An independent check: s is valid UTF-8 holding no replaced code point. */
static bool clean_utf8(const unsigned char *s)
{
    while (*s) {
        uint32_t cp;
        size_t n;
        if (s[0] < 0x80) {
            cp = s[0];
            n = 1;
        } else if ((s[0] & 0xe0) == 0xc0) {
            cp = s[0] & 0x1f;
            n = 2;
        } else if ((s[0] & 0xf0) == 0xe0) {
            cp = s[0] & 0x0f;
            n = 3;
        } else if ((s[0] & 0xf8) == 0xf0) {
            cp = s[0] & 0x07;
            n = 4;
        } else {
            return false;
        }
        for (size_t i = 1; i < n; i++) {
            if ((s[i] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i] & 0x3f);
        }
        static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x61c || cp == 0x200e ||
            cp == 0x200f || (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069))
            return false;
        s += n;
    }
    return true;
}

static void test_generated_inputs_come_out_clean(void **state)
{
    (void)state;
    static const unsigned char alphabet[] = {'a',  '.',  '?',  0x7f, 0x1b, 0x0a, 0x80, 0x85,
                                             0x9f, 0xa0, 0xae, 0xbf, 0xc0, 0xc2, 0xd8, 0xdf,
                                             0xe0, 0xe2, 0xed, 0xef, 0xf0, 0xf4, 0xf5, 0xff};
    uint32_t seed = 12345;
    for (int round = 0; round < 20000; round++) {
        unsigned char in[48];
        size_t len = 0;
        seed = seed * 1103515245u + 12345u;
        size_t n = (seed >> 16) % (sizeof in - 1);
        for (; len < n; len++) {
            seed = seed * 1103515245u + 12345u;
            in[len] = alphabet[(seed >> 16) % sizeof alphabet];
        }
        in[len] = '\0';
        seed = seed * 1103515245u + 12345u;
        size_t cap = 1 + (seed >> 16) % 40;
        char out[64];
        bf__audit_text(out, cap, (const char *)in);
        if (strlen(out) >= cap || !clean_utf8((const unsigned char *)out))
            fail_msg("round %d: unclean output for cap %zu", round, cap);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_text_is_kept),
        cmocka_unit_test(test_invalid_utf8_is_replaced),
        cmocka_unit_test(test_controls_are_replaced),
        cmocka_unit_test(test_bidi_controls_are_replaced),
        cmocka_unit_test(test_bounded_on_a_character_boundary),
        cmocka_unit_test(test_generated_inputs_come_out_clean),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
