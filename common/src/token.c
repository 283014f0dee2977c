/*
 * token.c - capability tokens: names of capabilities and roles, minting, strict parsing and
 * verification (buzz/token.h); key pairs, their files and the keyring are token_keys.c.
 *
 * Design notes:
 * - The signature covers the claims bytes exactly as carried in the token. Parsing also
 *   re-encodes the decoded claims and requires the result to equal those bytes, so every
 *   accepted token has one meaning: duplicate fields, embedded NUL bytes in strings, packed
 *   or non-minimal encodings and unknown fields are all "malformed" (fail closed).
 * - Secret keys and the text of secret key files live only in sodium_malloc'd memory and are
 *   wiped before release. Diagnostics name a path and a line number, never key material,
 *   and token rejections carry only a bft_reason, never any part of the token.
 */
#include "buzz/token.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "buzz/backfill/v1/token.pb-c.h"
#include "token_impl.h"

_Static_assert(BFT_CAP_READ == 1u << BUZZ__BACKFILL__V1__CAPABILITY__READ, "cap bits");
_Static_assert(BFT_CAP_CONTROL == 1u << BUZZ__BACKFILL__V1__CAPABILITY__CONTROL, "cap bits");
_Static_assert(BFT_CAP_VALIDATE == 1u << BUZZ__BACKFILL__V1__CAPABILITY__VALIDATE, "cap bits");
_Static_assert(BFT_CAP_READINESS == 1u << BUZZ__BACKFILL__V1__CAPABILITY__READINESS, "cap bits");
_Static_assert(BFT_ROLE_DEPLOYMENT_OPERATOR == 1u << BUZZ__BACKFILL__V1__ROLE__DEPLOYMENT_OPERATOR,
               "role bits");
_Static_assert(BFT_ROLE_COMMUNITY_OWNER == 1u << BUZZ__BACKFILL__V1__ROLE__COMMUNITY_OWNER,
               "role bits");
_Static_assert(BFT_ROLE_CHANNEL_ADMIN == 1u << BUZZ__BACKFILL__V1__ROLE__CHANNEL_ADMIN,
               "role bits");
_Static_assert(BFT_ROLE_MEMBER == 1u << BUZZ__BACKFILL__V1__ROLE__MEMBER, "role bits");
_Static_assert(crypto_sign_PUBLICKEYBYTES == BFT_PUBLIC_KEY_LEN, "key size");
_Static_assert(crypto_sign_BYTES == BFT_SIGNATURE_LEN, "signature size");

static _Atomic uint64_t token_sig_checks;
static int64_t (*_Atomic token_clock)(void);

/* ---- small helpers ---------------------------------------------------------------------- */

static bf_err token_reject(bft_reason *reason, bft_reason why)
{
    if (reason != NULL)
        *reason = why;
    return BF_ERR_UNAUTHENTICATED;
}

bool token_sodium_ready(void)
{
    return sodium_init() >= 0;
}

bool token_b64_decode(uint8_t *bin, size_t cap, size_t *bin_len, const char *b64, size_t len)
{
    const char *end = NULL;
    if (len == 0)
        return false;
    if (sodium_base642bin(bin, cap, b64, len, NULL, bin_len, &end, TOKEN_B64) != 0)
        return false;
    return end == b64 + len;
}

#define BFT_REASON_NAME(name, value, code, text) [value] = code,
static const char *const token_reason_names[] = {BFT_REASON_LIST(BFT_REASON_NAME)};
#undef BFT_REASON_NAME
#define BFT_REASON_TEXT(name, value, code, text) [value] = text,
static const char *const token_reason_texts[] = {BFT_REASON_LIST(BFT_REASON_TEXT)};
#undef BFT_REASON_TEXT

const char *bft_reason_name(bft_reason reason)
{
    size_t n = sizeof token_reason_names / sizeof token_reason_names[0];
    if ((size_t)reason >= n || token_reason_names[reason] == NULL)
        return "unknown";
    return token_reason_names[reason];
}

const char *bft_reason_str(bft_reason reason)
{
    size_t n = sizeof token_reason_texts / sizeof token_reason_texts[0];
    if ((size_t)reason >= n || token_reason_texts[reason] == NULL)
        return "unknown";
    return token_reason_texts[reason];
}

/* ---- names ------------------------------------------------------------------------------ */

static bool token_kid_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == ':' || c == '-';
}

bool token_kid_span_valid(const char *s, size_t len)
{
    if (len == 0 || len >= BFT_KID_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!token_kid_char(s[i]))
            return false;
    return true;
}

bool bft_kid_valid(const char *kid)
{
    return kid != NULL && token_kid_span_valid(kid, strnlen(kid, BFT_KID_MAX));
}

bool bft_name_valid(const char *s)
{
    if (s == NULL)
        return false;
    size_t len = strnlen(s, BFT_NAME_MAX);
    if (len == 0 || len >= BFT_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            return false;
    }
    return true;
}

static const char *const token_cap_names[] = {
    [BUZZ__BACKFILL__V1__CAPABILITY__READ] = "read",
    [BUZZ__BACKFILL__V1__CAPABILITY__CONTROL] = "control",
    [BUZZ__BACKFILL__V1__CAPABILITY__VALIDATE] = "validate",
    [BUZZ__BACKFILL__V1__CAPABILITY__READINESS] = "readiness",
};
static const char *const token_role_names[] = {
    [BUZZ__BACKFILL__V1__ROLE__DEPLOYMENT_OPERATOR] = "deployment_operator",
    [BUZZ__BACKFILL__V1__ROLE__COMMUNITY_OWNER] = "community_owner",
    [BUZZ__BACKFILL__V1__ROLE__CHANNEL_ADMIN] = "channel_admin",
    [BUZZ__BACKFILL__V1__ROLE__MEMBER] = "member",
};
#define TOKEN_NCAPS  (sizeof token_cap_names / sizeof token_cap_names[0])
#define TOKEN_NROLES (sizeof token_role_names / sizeof token_role_names[0])

static bf_err token_bits_parse(uint32_t *out, const char *list, const char *const *names, size_t n)
{
    if (list == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    uint32_t bits = 0;
    const char *p = list;
    while (*p != '\0') {
        size_t len = strcspn(p, ",");
        size_t i = 1;
        for (; i < n; i++)
            if (names[i] != NULL && strlen(names[i]) == len && strncmp(names[i], p, len) == 0)
                break;
        if (i >= n)
            return BF_ERR_INVALID_ARGUMENT;
        bits |= 1u << i;
        p += len;
        if (*p == ',' && *++p == '\0')
            return BF_ERR_INVALID_ARGUMENT; /* trailing comma */
    }
    *out = bits;
    return BF_OK;
}

static void token_bits_format(char *buf, size_t len, uint32_t bits, const char *const *names,
                              size_t n)
{
    if (buf == NULL || len == 0)
        return;
    buf[0] = '\0';
    size_t used = 0;
    for (size_t i = 1; i < n && i < 32; i++) {
        if (!(bits & (1u << i)) || names[i] == NULL)
            continue;
        int w = snprintf(buf + used, len - used, "%s%s", used ? "," : "", names[i]);
        if (w < 0 || (size_t)w >= len - used) {
            buf[used] = '\0'; /* no partial names */
            return;
        }
        used += (size_t)w;
    }
}

bf_err bft_caps_parse(uint32_t *out, const char *list)
{
    return token_bits_parse(out, list, token_cap_names, TOKEN_NCAPS);
}

bf_err bft_roles_parse(uint32_t *out, const char *list)
{
    return token_bits_parse(out, list, token_role_names, TOKEN_NROLES);
}

void bft_caps_format(char *buf, size_t len, uint32_t caps)
{
    token_bits_format(buf, len, caps, token_cap_names, TOKEN_NCAPS);
}

void bft_roles_format(char *buf, size_t len, uint32_t roles)
{
    token_bits_format(buf, len, roles, token_role_names, TOKEN_NROLES);
}

void bft_token_id_new(uint8_t id[BFT_TOKEN_ID_LEN])
{
    if (!token_sodium_ready())
        abort(); /* no randomness: never mint predictable IDs */
    randombytes_buf(id, BFT_TOKEN_ID_LEN);
}

void bft_token_id_hex(char buf[BFT_TOKEN_ID_HEX], const uint8_t id[BFT_TOKEN_ID_LEN])
{
    sodium_bin2hex(buf, BFT_TOKEN_ID_HEX, id, BFT_TOKEN_ID_LEN);
}

bf_err bft_token_id_parse(uint8_t out[BFT_TOKEN_ID_LEN], const char *hex)
{
    uint8_t id[BFT_TOKEN_ID_LEN];
    size_t n = 0;
    const char *end = NULL;
    if (hex == NULL || strlen(hex) != 2 * BFT_TOKEN_ID_LEN)
        return BF_ERR_INVALID_ARGUMENT;
    if (sodium_hex2bin(id, sizeof id, hex, 2 * BFT_TOKEN_ID_LEN, NULL, &n, &end) != 0 ||
        n != BFT_TOKEN_ID_LEN || *end != '\0')
        return BF_ERR_INVALID_ARGUMENT;
    memcpy(out, id, sizeof id);
    return BF_OK;
}

/* ---- claims ----------------------------------------------------------------------------- */

/* The shape rules shared by minting and parsing (everything but the signature). */
static bool token_claims_valid(const bft_claims *c)
{
    if (!bft_name_valid(c->actor) || !bft_name_valid(c->audience) || !bft_kid_valid(c->key_id))
        return false;
    if (c->expires_at <= 0 || c->not_before < 0)
        return false;
    return c->not_before == 0 || c->not_before < c->expires_at;
}

/* Fill a TokenClaims from c; lists point into caps/roles (BFT_LIST_MAX each). */
static void token_claims_to_msg(Buzz__Backfill__V1__TokenClaims *m, const bft_claims *c,
                                Buzz__Backfill__V1__Capability *caps,
                                Buzz__Backfill__V1__Role *roles)
{
    buzz__backfill__v1__token_claims__init(m);
    m->has_token_id = 1;
    m->token_id.data = (uint8_t *)c->token_id;
    m->token_id.len = BFT_TOKEN_ID_LEN;
    m->actor = (char *)c->actor;
    for (size_t i = 1; i < TOKEN_NCAPS; i++)
        if (c->caps & (1u << i))
            caps[m->n_capabilities++] = (Buzz__Backfill__V1__Capability)i;
    m->capabilities = caps;
    for (size_t i = 1; i < TOKEN_NROLES; i++)
        if (c->roles & (1u << i))
            roles[m->n_roles++] = (Buzz__Backfill__V1__Role)i;
    m->roles = roles;
    m->audience = (char *)c->audience;
    m->has_not_before = c->not_before != 0;
    m->not_before = c->not_before;
    m->has_expires_at = 1;
    m->expires_at = c->expires_at;
    m->key_id = (char *)c->key_id;
}

/* One enum value -> its bit; unknown values are ignored: they grant nothing. */
static uint32_t token_value_bit(int value, size_t known)
{
    return value > 0 && (size_t)value < known ? 1u << value : 0;
}

/* Decoded message -> claims, enforcing the shape rules and canonical encoding. */
static bool token_claims_from_msg(bft_claims *c, const Buzz__Backfill__V1__TokenClaims *m,
                                  const uint8_t *bytes, size_t len)
{
    if (m->base.n_unknown_fields != 0 || !m->has_token_id || m->token_id.len != BFT_TOKEN_ID_LEN ||
        m->actor == NULL || m->audience == NULL || m->key_id == NULL || !m->has_expires_at ||
        m->n_capabilities > BFT_LIST_MAX || m->n_roles > BFT_LIST_MAX ||
        (m->has_not_before && m->not_before <= 0))
        return false;
    if (strlen(m->actor) >= sizeof c->actor || strlen(m->audience) >= sizeof c->audience ||
        strlen(m->key_id) >= sizeof c->key_id)
        return false;
    uint8_t again[BFT_CLAIMS_MAX];
    if (buzz__backfill__v1__token_claims__get_packed_size(m) != len ||
        buzz__backfill__v1__token_claims__pack(m, again) != len || memcmp(again, bytes, len) != 0)
        return false;
    memset(c, 0, sizeof *c);
    memcpy(c->token_id, m->token_id.data, BFT_TOKEN_ID_LEN);
    snprintf(c->actor, sizeof c->actor, "%s", m->actor);
    snprintf(c->audience, sizeof c->audience, "%s", m->audience);
    snprintf(c->key_id, sizeof c->key_id, "%s", m->key_id);
    for (size_t i = 0; i < m->n_capabilities; i++)
        c->caps |= token_value_bit((int)m->capabilities[i], TOKEN_NCAPS);
    for (size_t i = 0; i < m->n_roles; i++)
        c->roles |= token_value_bit((int)m->roles[i], TOKEN_NROLES);
    c->not_before = m->has_not_before ? m->not_before : 0;
    c->expires_at = m->expires_at;
    return token_claims_valid(c);
}

/* ---- mint, parse, verify ---------------------------------------------------------------- */

bf_err bft_mint(char *out, size_t out_len, const bft_claims *claims, const bft_secret *secret)
{
    if (out == NULL || claims == NULL || secret == NULL || !token_sodium_ready())
        return BF_ERR_INVALID_ARGUMENT;
    if ((claims->caps & ~BFT_CAP_ALL) != 0 || (claims->roles & ~BFT_ROLE_ALL) != 0)
        return BF_ERR_INVALID_ARGUMENT;
    bft_claims c = *claims;
    snprintf(c.key_id, sizeof c.key_id, "%s", secret->kid);
    if (!token_claims_valid(&c))
        return BF_ERR_INVALID_ARGUMENT;

    Buzz__Backfill__V1__TokenClaims m;
    Buzz__Backfill__V1__Capability caps[BFT_LIST_MAX];
    Buzz__Backfill__V1__Role roles[BFT_LIST_MAX];
    token_claims_to_msg(&m, &c, caps, roles);
    uint8_t msg[TOKEN_CTX_LEN + BFT_CLAIMS_MAX];
    size_t claims_len = buzz__backfill__v1__token_claims__get_packed_size(&m);
    if (claims_len > BFT_CLAIMS_MAX)
        return BF_ERR_INVALID_ARGUMENT;
    memcpy(msg, BFT_SIGN_CONTEXT, TOKEN_CTX_LEN); /* includes the 0x00 byte */
    buzz__backfill__v1__token_claims__pack(&m, msg + TOKEN_CTX_LEN);

    uint8_t sig[crypto_sign_BYTES];
    crypto_sign_detached(sig, NULL, msg, TOKEN_CTX_LEN + claims_len, secret->sk);

    size_t claims_b64 = sodium_base64_ENCODED_LEN(claims_len, TOKEN_B64) - 1;
    size_t sig_b64 = sodium_base64_ENCODED_LEN(sizeof sig, TOKEN_B64) - 1;
    size_t total = strlen(BFT_PREFIX) + claims_b64 + 1 + sig_b64;
    if (total > BFT_TOKEN_MAX || total + 1 > out_len)
        return BF_ERR_INVALID_ARGUMENT;
    char *p = out;
    memcpy(p, BFT_PREFIX, strlen(BFT_PREFIX));
    p += strlen(BFT_PREFIX);
    sodium_bin2base64(p, claims_b64 + 1, msg + TOKEN_CTX_LEN, claims_len, TOKEN_B64);
    p += claims_b64;
    *p++ = '.';
    sodium_bin2base64(p, sig_b64 + 1, sig, sizeof sig, TOKEN_B64);
    return BF_OK;
}

bf_err bft_parse(bft_token *out, const char *token, size_t token_len, bft_reason *reason)
{
    size_t plen = strlen(BFT_PREFIX);
    if (out == NULL || token == NULL || token_len > BFT_TOKEN_MAX || token_len <= plen ||
        memcmp(token, BFT_PREFIX, plen) != 0)
        return token_reject(reason, BFT_REASON_MALFORMED);
    const char *body = token + plen;
    size_t body_len = token_len - plen;
    const char *dot = memchr(body, '.', body_len);
    if (dot == NULL)
        return token_reject(reason, BFT_REASON_MALFORMED);
    size_t claims_b64 = (size_t)(dot - body);
    const char *sig_b64 = dot + 1;
    size_t sig_b64_len = body_len - claims_b64 - 1;

    uint8_t bytes[BFT_CLAIMS_MAX], sig[BFT_SIGNATURE_LEN];
    size_t claims_len = 0, sig_len = 0;
    if (!token_b64_decode(bytes, sizeof bytes, &claims_len, body, claims_b64) ||
        !token_b64_decode(sig, sizeof sig, &sig_len, sig_b64, sig_b64_len) ||
        sig_len != BFT_SIGNATURE_LEN)
        return token_reject(reason, BFT_REASON_MALFORMED);

    Buzz__Backfill__V1__TokenClaims *m =
        buzz__backfill__v1__token_claims__unpack(NULL, claims_len, bytes);
    if (m == NULL)
        return token_reject(reason, BFT_REASON_MALFORMED);
    bft_claims c;
    bool ok = token_claims_from_msg(&c, m, bytes, claims_len);
    buzz__backfill__v1__token_claims__free_unpacked(m, NULL);
    if (!ok)
        return token_reject(reason, BFT_REASON_MALFORMED);
    out->claims = c;
    memcpy(out->signature, sig, sizeof sig);
    memcpy(out->claims_bytes, bytes, claims_len);
    out->claims_len = claims_len;
    if (reason != NULL)
        *reason = BFT_REASON_NONE;
    return BF_OK;
}

bf_err bft_check_signature(const bft_token *token, const bft_keyring *ring, bft_reason *reason)
{
    if (token == NULL || ring == NULL || token->claims_len > BFT_CLAIMS_MAX)
        return token_reject(reason, BFT_REASON_MALFORMED);
    const token_key *key = token_keyring_find(ring, token->claims.key_id);
    if (key == NULL)
        return token_reject(reason, BFT_REASON_UNKNOWN_KEY);
    uint8_t msg[TOKEN_CTX_LEN + BFT_CLAIMS_MAX];
    memcpy(msg, BFT_SIGN_CONTEXT, TOKEN_CTX_LEN);
    memcpy(msg + TOKEN_CTX_LEN, token->claims_bytes, token->claims_len);
    atomic_fetch_add_explicit(&token_sig_checks, 1, memory_order_relaxed);
    if (crypto_sign_verify_detached(token->signature, msg, TOKEN_CTX_LEN + token->claims_len,
                                    key->pk) != 0)
        return token_reject(reason, BFT_REASON_BAD_SIGNATURE);
    if (reason != NULL)
        *reason = BFT_REASON_NONE;
    return BF_OK;
}

bf_err bft_check_claims(const bft_claims *claims, const char *audience, int64_t now, int skew_s,
                        bft_reason *reason)
{
    if (claims == NULL)
        return token_reject(reason, BFT_REASON_MALFORMED);
    int64_t skew = skew_s > 0 ? skew_s : 0;
    if (claims->not_before != 0 && claims->not_before - skew > now)
        return token_reject(reason, BFT_REASON_NOT_YET_VALID);
    if (claims->expires_at <= INT64_MAX - skew && now >= claims->expires_at + skew)
        return token_reject(reason, BFT_REASON_EXPIRED);
    if (audience != NULL && strcmp(audience, claims->audience) != 0)
        return token_reject(reason, BFT_REASON_WRONG_AUDIENCE);
    if (reason != NULL)
        *reason = BFT_REASON_NONE;
    return BF_OK;
}

bf_err bft_verify(bft_claims *out, const char *token, size_t token_len, const bft_keyring *ring,
                  const char *audience, int64_t now, int skew_s, bft_reason *reason)
{
    bft_token t;
    bf_err err = bft_parse(&t, token, token_len, reason);
    if (err == BF_OK)
        err = bft_check_signature(&t, ring, reason);
    if (err == BF_OK)
        err = bft_check_claims(&t.claims, audience, now, skew_s, reason);
    if (err == BF_OK && out != NULL)
        *out = t.claims;
    return err;
}

/* ---- clock and counters ----------------------------------------------------------------- */

int64_t bft_now(void)
{
    int64_t (*fn)(void) = atomic_load(&token_clock);
    return fn != NULL ? fn() : (int64_t)time(NULL);
}

void bft_set_clock_for_testing(int64_t (*now)(void))
{
    atomic_store(&token_clock, now);
}

uint64_t bft_signature_checks(void)
{
    return atomic_load_explicit(&token_sig_checks, memory_order_relaxed);
}
