/*
 * test_token.c - capability tokens (buzz/token.h): a minted token verifies and round-trips its
 * claims; forged, foreign-key, unknown-key, expired, not-yet-valid and wrong-audience tokens
 * are refused with their typed reason; clock skew is tolerated exactly up to its bound;
 * malformed input of every shape (truncated, bad base64, oversized, trailing junk, wrong
 * prefix, non-canonical or incomplete claims, even when validly signed) is refused as
 * malformed; key files keep secrets at mode 0600, are never overwritten, and parse strictly.
 * No database needed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>

#include "buzz/token.h"

#define NOW 1800000000LL

static char tmpdir[64];

static int setup_dir(void **state)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/buzz-token-XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
    assert_true(sodium_init() >= 0);
    return 0;
}

static int teardown_dir(void **state)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static void path_in(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", tmpdir, name);
}

static bft_claims claims_for(const char *kid)
{
    bft_claims c;
    memset(&c, 0, sizeof c);
    bft_token_id_new(c.token_id);
    snprintf(c.actor, sizeof c.actor, "alice@ops");
    c.caps = BFT_CAP_READ | BFT_CAP_CONTROL;
    c.roles = BFT_ROLE_COMMUNITY_OWNER;
    snprintf(c.audience, sizeof c.audience, "relay-prod");
    c.not_before = NOW - 60;
    c.expires_at = NOW + 3600;
    snprintf(c.key_id, sizeof c.key_id, "%s", kid);
    return c;
}

static bft_keyring *ring_of(const bft_secret *s)
{
    bft_keyring *ring = NULL;
    uint8_t pk[BFT_PUBLIC_KEY_LEN];
    assert_int_equal(bft_keyring_new(&ring), BF_OK);
    bft_secret_public_key(s, pk);
    assert_int_equal(bft_keyring_add(ring, bft_secret_kid(s), pk), BF_OK);
    return ring;
}

static bft_reason verify_reason(const char *token, const bft_keyring *ring, int64_t now, int skew)
{
    bft_claims out;
    bft_reason reason = BFT_REASON_NONE;
    bf_err err = bft_verify(&out, token, strlen(token), ring, "relay-prod", now, skew, &reason);
    if (err == BF_OK)
        assert_int_equal(reason, BFT_REASON_NONE);
    else
        assert_int_equal(err, BF_ERR_UNAUTHENTICATED);
    return reason;
}

/* A token around arbitrary claims bytes, validly signed by sk (to prove that rejections of
 * bad claims come from parsing, not from the signature). */
static void token_from_bytes(char *out, size_t len, const uint8_t *bytes, size_t n,
                             const unsigned char *sk)
{
    uint8_t msg[sizeof BFT_SIGN_CONTEXT + 4096];
    memcpy(msg, BFT_SIGN_CONTEXT, sizeof BFT_SIGN_CONTEXT);
    memcpy(msg + sizeof BFT_SIGN_CONTEXT, bytes, n);
    uint8_t sig[crypto_sign_BYTES];
    crypto_sign_detached(sig, NULL, msg, sizeof BFT_SIGN_CONTEXT + n, sk);
    char b1[6000], b2[128];
    sodium_bin2base64(b1, sizeof b1, bytes, n, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    sodium_bin2base64(b2, sizeof b2, sig, sizeof sig, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    int n_out = snprintf(out, len, "bbt1.%s.%s", b1, b2);
    assert_true(n_out > 0 && (size_t)n_out < len); /* tests never build a truncated token */
}

static void test_round_trip(void **state)
{
    bft_secret *s = NULL;
    assert_int_equal(bft_keygen(&s, "k1"), BF_OK);
    bft_keyring *ring = ring_of(s);
    bft_claims in = claims_for("ignored-mint-uses-secret-kid");
    char token[BFT_TOKEN_MAX + 1];
    assert_int_equal(bft_mint(token, sizeof token, &in, s), BF_OK);
    assert_true(strncmp(token, BFT_PREFIX, strlen(BFT_PREFIX)) == 0);
    assert_true(strlen(token) <= BFT_TOKEN_MAX);

    bft_claims out;
    bft_reason reason = BFT_REASON_MALFORMED;
    assert_int_equal(bft_verify(&out, token, strlen(token), ring, "relay-prod", NOW, 30, &reason),
                     BF_OK);
    assert_int_equal(reason, BFT_REASON_NONE);
    assert_memory_equal(out.token_id, in.token_id, BFT_TOKEN_ID_LEN);
    assert_string_equal(out.actor, "alice@ops");
    assert_int_equal(out.caps, BFT_CAP_READ | BFT_CAP_CONTROL);
    assert_int_equal(out.roles, BFT_ROLE_COMMUNITY_OWNER);
    assert_string_equal(out.audience, "relay-prod");
    assert_int_equal(out.not_before, NOW - 60);
    assert_int_equal(out.expires_at, NOW + 3600);
    assert_string_equal(out.key_id, "k1");

    /* not_before absent stays absent */
    in.not_before = 0;
    assert_int_equal(bft_mint(token, sizeof token, &in, s), BF_OK);
    assert_int_equal(bft_verify(&out, token, strlen(token), ring, "relay-prod", NOW, 0, &reason),
                     BF_OK);
    assert_int_equal(out.not_before, 0);
    bft_keyring_free(ring);
    bft_secret_free(s);
}

static void test_forgery_and_keys(void **state)
{
    bft_secret *s = NULL, *impostor = NULL, *other = NULL;
    assert_int_equal(bft_keygen(&s, "k1"), BF_OK);
    assert_int_equal(bft_keygen(&impostor, "k1"), BF_OK); /* same kid, untrusted key */
    assert_int_equal(bft_keygen(&other, "k9"), BF_OK);
    bft_keyring *ring = ring_of(s);
    bft_claims c = claims_for("k1");
    char good[BFT_TOKEN_MAX + 1], bad[BFT_TOKEN_MAX + 1];
    assert_int_equal(bft_mint(good, sizeof good, &c, s), BF_OK);
    assert_int_equal(verify_reason(good, ring, NOW, 30), BFT_REASON_NONE);

    /* flip one signature character (keeping valid base64) */
    snprintf(bad, sizeof bad, "%s", good);
    size_t last = strlen(bad) - 5;
    bad[last] = bad[last] == 'A' ? 'B' : 'A';
    assert_int_equal(verify_reason(bad, ring, NOW, 30), BFT_REASON_BAD_SIGNATURE);

    /* claims of one token with the signature of another: escalation attempt */
    bft_claims more = c;
    more.caps = BFT_CAP_READ;
    char weak[BFT_TOKEN_MAX + 1];
    assert_int_equal(bft_mint(weak, sizeof weak, &more, s), BF_OK);
    const char *good_sig = strrchr(good, '.');
    const char *weak_sig = strrchr(weak, '.');
    snprintf(bad, sizeof bad, "%.*s%s", (int)(good_sig - good), good, weak_sig);
    assert_int_equal(verify_reason(bad, ring, NOW, 30), BFT_REASON_BAD_SIGNATURE);

    /* signed by a key that is not trusted but claims a trusted kid */
    assert_int_equal(bft_mint(bad, sizeof bad, &c, impostor), BF_OK);
    assert_int_equal(verify_reason(bad, ring, NOW, 30), BFT_REASON_BAD_SIGNATURE);

    /* unknown kid */
    assert_int_equal(bft_mint(bad, sizeof bad, &c, other), BF_OK);
    assert_int_equal(verify_reason(bad, ring, NOW, 30), BFT_REASON_UNKNOWN_KEY);

    /* rotation: a keyring with both keys verifies tokens of both */
    uint8_t pk[BFT_PUBLIC_KEY_LEN];
    bft_secret_public_key(other, pk);
    assert_int_equal(bft_keyring_add(ring, "k9", pk), BF_OK);
    assert_int_equal(verify_reason(bad, ring, NOW, 30), BFT_REASON_NONE);
    assert_int_equal(verify_reason(good, ring, NOW, 30), BFT_REASON_NONE);
    assert_int_equal(bft_keyring_add(ring, "k9", pk), BF_ERR_INVALID_ARGUMENT); /* duplicate */

    bft_keyring_free(ring);
    bft_secret_free(s);
    bft_secret_free(impostor);
    bft_secret_free(other);
}

static void test_time_and_audience(void **state)
{
    bft_secret *s = NULL;
    assert_int_equal(bft_keygen(&s, "k1"), BF_OK);
    bft_keyring *ring = ring_of(s);
    bft_claims c = claims_for("k1");
    c.not_before = NOW;
    c.expires_at = NOW + 100;
    char token[BFT_TOKEN_MAX + 1];
    assert_int_equal(bft_mint(token, sizeof token, &c, s), BF_OK);

    /* without skew: valid on [nbf, exp) */
    assert_int_equal(verify_reason(token, ring, NOW - 1, 0), BFT_REASON_NOT_YET_VALID);
    assert_int_equal(verify_reason(token, ring, NOW, 0), BFT_REASON_NONE);
    assert_int_equal(verify_reason(token, ring, NOW + 99, 0), BFT_REASON_NONE);
    assert_int_equal(verify_reason(token, ring, NOW + 100, 0), BFT_REASON_EXPIRED);
    /* skew widens both ends by exactly skew seconds */
    assert_int_equal(verify_reason(token, ring, NOW - 30, 30), BFT_REASON_NONE);
    assert_int_equal(verify_reason(token, ring, NOW - 31, 30), BFT_REASON_NOT_YET_VALID);
    assert_int_equal(verify_reason(token, ring, NOW + 129, 30), BFT_REASON_NONE);
    assert_int_equal(verify_reason(token, ring, NOW + 130, 30), BFT_REASON_EXPIRED);
    /* a negative skew is no skew */
    assert_int_equal(verify_reason(token, ring, NOW + 100, -5), BFT_REASON_EXPIRED);

    bft_claims out;
    bft_reason reason = BFT_REASON_NONE;
    assert_int_equal(
        bft_verify(&out, token, strlen(token), ring, "relay-staging", NOW, 30, &reason),
        BF_ERR_UNAUTHENTICATED);
    assert_int_equal(reason, BFT_REASON_WRONG_AUDIENCE);
    /* NULL audience: inspection tools only */
    assert_int_equal(bft_verify(&out, token, strlen(token), ring, NULL, NOW, 30, &reason), BF_OK);

    /* minting refuses claims that could never verify */
    c.expires_at = c.not_before;
    assert_int_equal(bft_mint(token, sizeof token, &c, s), BF_ERR_INVALID_ARGUMENT);
    c = claims_for("k1");
    c.actor[0] = '\0';
    assert_int_equal(bft_mint(token, sizeof token, &c, s), BF_ERR_INVALID_ARGUMENT);
    c = claims_for("k1");
    c.caps |= 1u << 20;
    assert_int_equal(bft_mint(token, sizeof token, &c, s), BF_ERR_INVALID_ARGUMENT);
    c = claims_for("k1");
    assert_int_equal(bft_mint(token, 20, &c, s), BF_ERR_INVALID_ARGUMENT); /* short buffer */
    bft_keyring_free(ring);
    bft_secret_free(s);
}

static bft_reason parse_reason(const char *token, size_t len)
{
    static bft_token t;
    bft_reason reason = BFT_REASON_NONE;
    bf_err err = bft_parse(&t, token, len, &reason);
    if (err != BF_OK)
        assert_int_equal(err, BF_ERR_UNAUTHENTICATED);
    return reason;
}

static void test_malformed(void **state)
{
    bft_secret *s = NULL;
    assert_int_equal(bft_keygen(&s, "k1"), BF_OK);
    bft_claims c = claims_for("k1");
    char good[BFT_TOKEN_MAX + 1];
    assert_int_equal(bft_mint(good, sizeof good, &c, s), BF_OK);
    size_t len = strlen(good);
    assert_int_equal(parse_reason(good, len), BFT_REASON_NONE);

    /* every truncation */
    for (size_t n = 0; n < len; n++)
        assert_int_equal(parse_reason(good, n), BFT_REASON_MALFORMED);

    char bad[2 * BFT_TOKEN_MAX];
    /* trailing junk */
    snprintf(bad, sizeof bad, "%s.", good);
    assert_int_equal(parse_reason(bad, strlen(bad)), BFT_REASON_MALFORMED);
    snprintf(bad, sizeof bad, "%s.AAAA", good);
    assert_int_equal(parse_reason(bad, strlen(bad)), BFT_REASON_MALFORMED);
    snprintf(bad, sizeof bad, "%sAA", good);
    assert_int_equal(parse_reason(bad, strlen(bad)), BFT_REASON_MALFORMED);
    snprintf(bad, sizeof bad, "%s ", good);
    assert_int_equal(parse_reason(bad, strlen(bad)), BFT_REASON_MALFORMED);
    /* wrong prefix / version */
    snprintf(bad, sizeof bad, "bbt2.%s", good + 5);
    assert_int_equal(parse_reason(bad, strlen(bad)), BFT_REASON_MALFORMED);
    snprintf(bad, sizeof bad, "BBT1.%s", good + 5);
    assert_int_equal(parse_reason(bad, strlen(bad)), BFT_REASON_MALFORMED);
    /* bad base64: padding, standard alphabet, a NUL byte */
    snprintf(bad, sizeof bad, "%s", good);
    bad[8] = '+';
    assert_int_equal(parse_reason(bad, len), BFT_REASON_MALFORMED);
    bad[8] = '=';
    assert_int_equal(parse_reason(bad, len), BFT_REASON_MALFORMED);
    bad[8] = '\0';
    assert_int_equal(parse_reason(bad, len), BFT_REASON_MALFORMED);
    /* no separator, empty parts */
    assert_int_equal(parse_reason("bbt1.", 5), BFT_REASON_MALFORMED);
    assert_int_equal(parse_reason("bbt1..", 6), BFT_REASON_MALFORMED);
    assert_int_equal(parse_reason("bbt1.AAAA", 9), BFT_REASON_MALFORMED);
    assert_int_equal(parse_reason("", 0), BFT_REASON_MALFORMED);
    /* oversized, even if otherwise well-formed */
    memset(bad, 'A', sizeof bad);
    memcpy(bad, "bbt1.", 5);
    assert_int_equal(parse_reason(bad, BFT_TOKEN_MAX + 1), BFT_REASON_MALFORMED);
    assert_int_equal(parse_reason(bad, sizeof bad), BFT_REASON_MALFORMED);
    bft_secret_free(s);
}

/* Claims that are validly signed by a trusted key but are not canonical TokenClaims. */
static void test_malformed_signed_claims(void **state)
{
    unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
    crypto_sign_keypair(pk, sk);
    bft_keyring *ring = NULL;
    assert_int_equal(bft_keyring_new(&ring), BF_OK);
    assert_int_equal(bft_keyring_add(ring, "k1", pk), BF_OK);

    /* hand-encoded TokenClaims: id(1) actor(2) cap(3) audience(5) exp(7) kid(8) */
    static const uint8_t id_field[] = {0x0a, 0x10, 1,  2,  3,  4,  5,  6,  7,
                                       8,    9,    10, 11, 12, 13, 14, 15, 16};
    static const uint8_t actor[] = {0x12, 0x01, 'a'};
    static const uint8_t cap_read[] = {0x18, 0x01};
    static const uint8_t audience[] = {0x2a, 0x0a, 'r', 'e', 'l', 'a',
                                       'y',  '-',  'p', 'r', 'o', 'd'};
    static const uint8_t exp[] = {0x38, 0x80, 0xe6, 0xfe, 0x89, 0x07}; /* 1900000000 */
    static const uint8_t kid[] = {0x42, 0x02, 'k', '1'};
    uint8_t buf[512];
    char token[2048];
    size_t n = 0;
#define PUT(x) (memcpy(buf + n, (x), sizeof(x)), n += sizeof(x))

    /* the baseline encodes and verifies */
    n = 0;
    PUT(id_field), PUT(actor), PUT(cap_read), PUT(audience), PUT(exp), PUT(kid);
    token_from_bytes(token, sizeof token, buf, n, sk);
    assert_int_equal(verify_reason(token, ring, NOW, 0), BFT_REASON_NONE);

    /* missing expiry */
    n = 0;
    PUT(id_field), PUT(actor), PUT(cap_read), PUT(audience), PUT(kid);
    token_from_bytes(token, sizeof token, buf, n, sk);
    assert_int_equal(verify_reason(token, ring, NOW, 0), BFT_REASON_MALFORMED);
    /* missing token id */
    n = 0;
    PUT(actor), PUT(cap_read), PUT(audience), PUT(exp), PUT(kid);
    token_from_bytes(token, sizeof token, buf, n, sk);
    assert_int_equal(verify_reason(token, ring, NOW, 0), BFT_REASON_MALFORMED);
    /* duplicate field (last one would win) */
    n = 0;
    PUT(id_field), PUT(actor), PUT(actor), PUT(cap_read), PUT(audience), PUT(exp), PUT(kid);
    token_from_bytes(token, sizeof token, buf, n, sk);
    assert_int_equal(verify_reason(token, ring, NOW, 0), BFT_REASON_MALFORMED);
    /* out of order fields */
    n = 0;
    PUT(actor), PUT(id_field), PUT(cap_read), PUT(audience), PUT(exp), PUT(kid);
    token_from_bytes(token, sizeof token, buf, n, sk);
    assert_int_equal(verify_reason(token, ring, NOW, 0), BFT_REASON_MALFORMED);
    /* an unknown field (a claim this verifier does not understand) */
    static const uint8_t unknown[] = {0x48, 0x01};
    n = 0;
    PUT(id_field), PUT(actor), PUT(cap_read), PUT(audience), PUT(exp), PUT(kid), PUT(unknown);
    token_from_bytes(token, sizeof token, buf, n, sk);
    assert_int_equal(verify_reason(token, ring, NOW, 0), BFT_REASON_MALFORMED);
    /* an embedded NUL in the actor ("a\0root") */
    static const uint8_t nul_actor[] = {0x12, 0x06, 'a', 0, 'r', 'o', 'o', 't'};
    n = 0;
    PUT(id_field), PUT(nul_actor), PUT(cap_read), PUT(audience), PUT(exp), PUT(kid);
    token_from_bytes(token, sizeof token, buf, n, sk);
    assert_int_equal(verify_reason(token, ring, NOW, 0), BFT_REASON_MALFORMED);
    /* a control character in the actor */
    static const uint8_t ctl_actor[] = {0x12, 0x02, 'a', '\n'};
    n = 0;
    PUT(id_field), PUT(ctl_actor), PUT(cap_read), PUT(audience), PUT(exp), PUT(kid);
    token_from_bytes(token, sizeof token, buf, n, sk);
    assert_int_equal(verify_reason(token, ring, NOW, 0), BFT_REASON_MALFORMED);
    /* nine capability entries (bound is eight) */
    n = 0;
    PUT(id_field), PUT(actor);
    for (int i = 0; i < 9; i++)
        PUT(cap_read);
    PUT(audience), PUT(exp), PUT(kid);
    token_from_bytes(token, sizeof token, buf, n, sk);
    assert_int_equal(verify_reason(token, ring, NOW, 0), BFT_REASON_MALFORMED);
    /* eight are fine; an unknown capability value grants nothing */
    static const uint8_t cap_unknown[] = {0x18, 0x09};
    n = 0;
    PUT(id_field), PUT(actor), PUT(cap_read), PUT(cap_unknown), PUT(audience), PUT(exp), PUT(kid);
    token_from_bytes(token, sizeof token, buf, n, sk);
    bft_claims out;
    bft_reason reason = BFT_REASON_NONE;
    assert_int_equal(bft_verify(&out, token, strlen(token), ring, "relay-prod", NOW, 0, &reason),
                     BF_OK);
    assert_int_equal(out.caps, BFT_CAP_READ);
    /* a 128-byte actor is over the bound (127) */
    static const uint8_t long_actor_tag[] = {0x12, 0x80, 0x01}; /* length 128 */
    n = 0;
    PUT(id_field), PUT(long_actor_tag);
    memset(buf + n, 'a', 128), n += 128;
    PUT(cap_read), PUT(audience), PUT(exp), PUT(kid);
    token_from_bytes(token, sizeof token, buf, n, sk);
    assert_int_equal(verify_reason(token, ring, NOW, 0), BFT_REASON_MALFORMED);
    /* not protobuf at all */
    static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff};
    token_from_bytes(token, sizeof token, junk, sizeof junk, sk);
    assert_int_equal(verify_reason(token, ring, NOW, 0), BFT_REASON_MALFORMED);
#undef PUT
    sodium_memzero(sk, sizeof sk);
    bft_keyring_free(ring);
}

static void test_names(void **state)
{
    uint32_t bits = 0;
    assert_int_equal(bft_caps_parse(&bits, "read,control,validate,readiness"), BF_OK);
    assert_int_equal(bits, BFT_CAP_ALL);
    assert_int_equal(bft_caps_parse(&bits, "read,"), BF_ERR_INVALID_ARGUMENT);
    assert_int_equal(bft_caps_parse(&bits, "admin"), BF_ERR_INVALID_ARGUMENT);
    assert_int_equal(bft_caps_parse(&bits, "rea"), BF_ERR_INVALID_ARGUMENT);
    assert_int_equal(bft_roles_parse(&bits, "community_owner,member"), BF_OK);
    assert_int_equal(bits, BFT_ROLE_COMMUNITY_OWNER | BFT_ROLE_MEMBER);
    char buf[64];
    bft_caps_format(buf, sizeof buf, BFT_CAP_READ | BFT_CAP_READINESS);
    assert_string_equal(buf, "read,readiness");
    bft_caps_format(buf, 6, BFT_CAP_ALL);
    assert_string_equal(buf, "read");
    bft_roles_format(buf, sizeof buf, BFT_ROLE_ALL);
    assert_string_equal(buf, "deployment_operator,community_owner,channel_admin,member");

    assert_true(bft_kid_valid("k1.2024-06:a_b"));
    assert_false(bft_kid_valid(""));
    assert_false(bft_kid_valid("k 1"));
    char kid[BFT_KID_MAX + 1];
    memset(kid, 'k', sizeof kid);
    kid[BFT_KID_MAX - 1] = '\0';
    assert_true(bft_kid_valid(kid));
    kid[BFT_KID_MAX - 1] = 'k';
    kid[BFT_KID_MAX] = '\0';
    assert_false(bft_kid_valid(kid));

    uint8_t id[BFT_TOKEN_ID_LEN], back[BFT_TOKEN_ID_LEN];
    char hex[BFT_TOKEN_ID_HEX];
    bft_token_id_new(id);
    bft_token_id_hex(hex, id);
    assert_int_equal(strlen(hex), 32);
    assert_int_equal(bft_token_id_parse(back, hex), BF_OK);
    assert_memory_equal(id, back, sizeof id);
    assert_int_equal(bft_token_id_parse(back, "00"), BF_ERR_INVALID_ARGUMENT);
    assert_int_equal(bft_token_id_parse(back, "zz112233445566778899aabbccddeeff"),
                     BF_ERR_INVALID_ARGUMENT);
    assert_string_equal(bft_reason_name(BFT_REASON_UNKNOWN_KEY), "unknown_key");
    assert_string_equal(bft_reason_str(BFT_REASON_NOT_YET_VALID), "not yet valid");
    assert_string_equal(bft_reason_str((bft_reason)999), "unknown");
}

static void write_text(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, mode), 0);
}

static void test_key_files(void **state)
{
    char sk_path[128], pk_path[128], path[128];
    path_in(sk_path, sizeof sk_path, "k1.secret");
    path_in(pk_path, sizeof pk_path, "k1.pub");
    char diag[256] = "";
    bft_secret *s = NULL;
    assert_int_equal(bft_keygen(&s, "k1"), BF_OK);
    assert_int_equal(bft_secret_save(s, sk_path, diag, sizeof diag), BF_OK);
    assert_int_equal(bft_public_save(s, pk_path, diag, sizeof diag), BF_OK);
    struct stat st;
    assert_int_equal(stat(sk_path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    /* never overwritten */
    assert_int_equal(bft_secret_save(s, sk_path, diag, sizeof diag), BF_ERR_IO);
    assert_non_null(strstr(diag, "exists"));
    assert_int_equal(bft_public_save(s, pk_path, diag, sizeof diag), BF_ERR_IO);

    /* load back: same key, signs tokens the public file verifies */
    bft_secret *loaded = NULL;
    bool insecure = true;
    assert_int_equal(bft_secret_load(&loaded, sk_path, &insecure, diag, sizeof diag), BF_OK);
    assert_false(insecure);
    assert_string_equal(bft_secret_kid(loaded), "k1");
    bft_keyring *ring = NULL;
    assert_int_equal(bft_keyring_load(&ring, pk_path, diag, sizeof diag), BF_OK);
    assert_int_equal(bft_keyring_count(ring), 1);
    bft_claims c = claims_for("k1");
    char token[BFT_TOKEN_MAX + 1];
    assert_int_equal(bft_mint(token, sizeof token, &c, loaded), BF_OK);
    assert_int_equal(verify_reason(token, ring, NOW, 30), BFT_REASON_NONE);
    bft_keyring_free(ring);
    bft_secret_free(loaded);

    /* group/world-readable secret: loads, flagged */
    assert_int_equal(chmod(sk_path, 0644), 0);
    assert_int_equal(bft_secret_load(&loaded, sk_path, &insecure, diag, sizeof diag), BF_OK);
    assert_true(insecure);
    bft_secret_free(loaded);

    /* the secret file's text never reaches a diagnostic */
    char text[512];
    FILE *f = fopen(sk_path, "r");
    assert_non_null(f);
    assert_non_null(fgets(text, sizeof text, f));
    fclose(f);
    char *b64 = strchr(text, ' ') + 1;
    b64[strcspn(b64, "\n")] = '\0';
    char two[1200];
    snprintf(two, sizeof two, "# two keys\nk1 %s\nk2 %s\n", b64, b64);
    path_in(path, sizeof path, "two.secret");
    write_text(path, two, 0600);
    assert_int_equal(bft_secret_load(&loaded, path, NULL, diag, sizeof diag),
                     BF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(diag, "line 3"));
    assert_null(strstr(diag, b64));
    /* a corrupted public half */
    char broken[600];
    snprintf(broken, sizeof broken, "k1 %s\n", b64);
    size_t at = strlen(broken) - 4;
    broken[at] = broken[at] == 'A' ? 'B' : 'A';
    path_in(path, sizeof path, "broken.secret");
    write_text(path, broken, 0600);
    assert_int_equal(bft_secret_load(&loaded, path, NULL, diag, sizeof diag),
                     BF_ERR_INVALID_ARGUMENT);
    assert_null(strstr(diag, b64));
    path_in(path, sizeof path, "empty.secret");
    write_text(path, "# nothing\n", 0600);
    assert_int_equal(bft_secret_load(&loaded, path, NULL, diag, sizeof diag),
                     BF_ERR_INVALID_ARGUMENT);
    path_in(path, sizeof path, "missing.secret");
    assert_int_equal(bft_secret_load(&loaded, path, NULL, diag, sizeof diag), BF_ERR_IO);
    assert_int_equal(bft_secret_load(&loaded, tmpdir, NULL, diag, sizeof diag), BF_ERR_IO);

    /* public key files: comments, blank lines, CRLF; strict otherwise */
    char line[160], text2[1024];
    assert_int_equal(bft_public_line(line, sizeof line, s), BF_OK);
    line[strcspn(line, "\n")] = '\0';
    const char *pkb64 = strchr(line, ' ') + 1;
    snprintf(text2, sizeof text2, "# trusted\n\n  %s\r\n\tk2\t%s  \n", line, pkb64);
    assert_int_equal(bft_keyring_parse(&ring, text2, strlen(text2), diag, sizeof diag), BF_OK);
    assert_int_equal(bft_keyring_count(ring), 2);
    assert_true(bft_keyring_has(ring, "k2"));
    bft_keyring_free(ring);
    static const char *const bad[] = {
        "k1\n",                                              /* no key */
        "k1 AAAA\n",                                         /* wrong length */
        "k 1 AAAA\n",                                        /* three fields */
        "k/1 dD4jiittR41eZv5ktryFGTZS0FATXsOOKSv2l5_tGQM\n", /* bad kid */
        "k1 dD4jiittR41eZv5ktryFGTZS0FATXsOOKSv2l5_tGQM=\n", /* padding */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        diag[0] = '\0';
        assert_int_equal(bft_keyring_parse(&ring, bad[i], strlen(bad[i]), diag, sizeof diag),
                         BF_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(diag, "line 1"));
    }
    snprintf(text2, sizeof text2, "%s\n%s\n", line, line);
    assert_int_equal(bft_keyring_parse(&ring, text2, strlen(text2), diag, sizeof diag),
                     BF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(diag, "twice"));
    assert_int_equal(bft_keyring_parse(&ring, "", 0, diag, sizeof diag), BF_OK);
    assert_int_equal(bft_keyring_count(ring), 0);
    bft_keyring_free(ring);
    bft_secret_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_forgery_and_keys),
        cmocka_unit_test(test_time_and_audience),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_malformed_signed_claims),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_key_files),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
