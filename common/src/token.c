/*
 * token.c - capability tokens: Ed25519 key pairs and their files, the trusted keyring,
 * minting, strict parsing and verification (buzz/token.h).
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

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "buzz/backfill/v1/token.pb-c.h"

#define TOKEN_B64             sodium_base64_VARIANT_URLSAFE_NO_PADDING
#define TOKEN_SK_LEN          crypto_sign_SECRETKEYBYTES
#define TOKEN_CTX_LEN         (sizeof BFT_SIGN_CONTEXT) /* context and its 0x00 byte */
#define TOKEN_FILE_MAX_PUBLIC (256 * 1024)
#define TOKEN_FILE_MAX_SECRET 4096

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

struct bft_secret {
    char kid[BFT_KID_MAX];
    unsigned char *sk; /* sodium_malloc'd, TOKEN_SK_LEN bytes */
};

typedef struct token_key {
    char kid[BFT_KID_MAX];
    uint8_t pk[BFT_PUBLIC_KEY_LEN];
} token_key;

struct bft_keyring {
    size_t n;
    token_key keys[BFT_KEYRING_MAX];
};

static _Atomic uint64_t token_sig_checks;
static int64_t (*_Atomic token_clock)(void);

/* ---- small helpers ---------------------------------------------------------------------- */

static bf_err token_reject(bft_reason *reason, bft_reason why)
{
    if (reason != NULL)
        *reason = why;
    return BF_ERR_UNAUTHENTICATED;
}

static bool token_sodium_ready(void)
{
    return sodium_init() >= 0;
}

/* Decode base64url (no padding) of exactly the span [b64, b64+len) into at most cap bytes. */
static bool token_b64_decode(uint8_t *bin, size_t cap, size_t *bin_len, const char *b64, size_t len)
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

static bool token_kid_span_valid(const char *s, size_t len)
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

/* ---- key files -------------------------------------------------------------------------- */

/* One "<kid> <base64>" line; fields are spans into the file text (never copied). */
typedef bf_err (*token_line_fn)(void *arg, int lineno, const char *kid, size_t kid_len,
                                const char *b64, size_t b64_len, char *diag, size_t diag_len);

static bool token_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

static bf_err token_lines_each(const char *text, size_t len, const char *what, token_line_fn fn,
                               void *arg, char *diag, size_t diag_len)
{
    size_t pos = 0;
    int lineno = 0;
    while (pos < len) {
        const char *line = text + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t line_len = nl ? (size_t)(nl - line) : len - pos;
        pos += line_len + (nl ? 1 : 0);
        lineno++;
        size_t a = 0, b = line_len;
        while (a < b && token_space(line[a]))
            a++;
        while (b > a && token_space(line[b - 1]))
            b--;
        if (a == b || line[a] == '#')
            continue;
        size_t k = a;
        while (k < b && !token_space(line[k]))
            k++;
        size_t v = k;
        while (v < b && token_space(line[v]))
            v++;
        size_t e = v;
        while (e < b && !token_space(line[e]))
            e++;
        if (k == a || v == b || e != b)
            return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                               "%s line %d: expected \"<kid> <base64url key>\"", what, lineno);
        if (!token_kid_span_valid(line + a, k - a))
            return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                               "%s line %d: key id must be 1..%d bytes of [A-Za-z0-9._:-]", what,
                               lineno, BFT_KID_MAX - 1);
        bf_err err = fn(arg, lineno, line + a, k - a, line + v, b - v, diag, diag_len);
        if (err != BF_OK)
            return err;
    }
    return BF_OK;
}

/* Read a whole regular file into buf (cap bytes); *mode gets its permission bits. */
static bf_err token_read_file(const char *path, char *buf, size_t cap, size_t *len_out,
                              mode_t *mode, char *diag, size_t diag_len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return bf_diag_set(diag, diag_len, BF_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return bf_diag_set(diag, diag_len, BF_ERR_IO, "%s is not a regular file", path);
    }
    size_t len = 0;
    for (;;) {
        if (len == cap) {
            close(fd);
            return bf_diag_set(diag, diag_len, BF_ERR_IO, "%s is larger than %zu bytes", path, cap);
        }
        ssize_t r = read(fd, buf + len, cap - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            return bf_diag_set(diag, diag_len, BF_ERR_IO, "could not read %s: %s", path,
                               strerror(e));
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    *len_out = len;
    *mode = st.st_mode;
    return BF_OK;
}

/* Create path (never overwriting) with mode, write data, fsync; remove it on error. */
static bf_err token_write_new(const char *path, const char *data, size_t len, mode_t mode,
                              char *diag, size_t diag_len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0)
        return bf_diag_set(diag, diag_len, BF_ERR_IO, "cannot create %s: %s", path,
                           errno == EEXIST ? "file exists" : strerror(errno));
    bool ok = fchmod(fd, mode) == 0;
    size_t done = 0;
    while (ok && done < len) {
        ssize_t w = write(fd, data + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        ok = w > 0;
        if (ok)
            done += (size_t)w;
    }
    int e = errno;
    ok = ok && fsync(fd) == 0;
    if (!ok)
        e = errno;
    if (close(fd) != 0 && ok) {
        ok = false;
        e = errno;
    }
    if (!ok) {
        unlink(path);
        return bf_diag_set(diag, diag_len, BF_ERR_IO, "could not write %s: %s", path, strerror(e));
    }
    return BF_OK;
}

/* ---- secret keys ------------------------------------------------------------------------ */

static bf_err token_secret_alloc(bft_secret **out, const char *kid, size_t kid_len)
{
    if (!token_sodium_ready())
        return BF_ERR_INTERNAL;
    if (!token_kid_span_valid(kid, kid_len))
        return BF_ERR_INVALID_ARGUMENT;
    bft_secret *s = calloc(1, sizeof *s);
    if (s == NULL)
        return BF_ERR_NOMEM;
    s->sk = sodium_malloc(TOKEN_SK_LEN);
    if (s->sk == NULL) {
        free(s);
        return BF_ERR_NOMEM;
    }
    memcpy(s->kid, kid, kid_len);
    s->kid[kid_len] = '\0';
    *out = s;
    return BF_OK;
}

bf_err bft_keygen(bft_secret **out, const char *kid)
{
    if (kid == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    bft_secret *s = NULL;
    bf_err err = token_secret_alloc(&s, kid, strnlen(kid, BFT_KID_MAX));
    if (err != BF_OK)
        return err;
    unsigned char pk[crypto_sign_PUBLICKEYBYTES];
    crypto_sign_keypair(pk, s->sk);
    *out = s;
    return BF_OK;
}

void bft_secret_free(bft_secret *secret)
{
    if (secret == NULL)
        return;
    sodium_free(secret->sk); /* wipes */
    sodium_memzero(secret, sizeof *secret);
    free(secret);
}

const char *bft_secret_kid(const bft_secret *secret)
{
    return secret->kid;
}

void bft_secret_public_key(const bft_secret *secret, uint8_t pk[BFT_PUBLIC_KEY_LEN])
{
    crypto_sign_ed25519_sk_to_pk(pk, secret->sk);
}

bf_err bft_public_line(char *buf, size_t len, const bft_secret *secret)
{
    uint8_t pk[BFT_PUBLIC_KEY_LEN];
    char b64[sodium_base64_ENCODED_LEN(BFT_PUBLIC_KEY_LEN, TOKEN_B64)];
    bft_secret_public_key(secret, pk);
    sodium_bin2base64(b64, sizeof b64, pk, sizeof pk, TOKEN_B64);
    int w = snprintf(buf, len, "%s %s\n", secret->kid, b64);
    if (w < 0 || (size_t)w >= len)
        return BF_ERR_INVALID_ARGUMENT;
    return BF_OK;
}

bf_err bft_public_save(const bft_secret *secret, const char *path, char *diag, size_t diag_len)
{
    char line[160];
    bf_err err = bft_public_line(line, sizeof line, secret);
    if (err != BF_OK)
        return err;
    return token_write_new(path, line, strlen(line), 0644, diag, diag_len);
}

bf_err bft_secret_save(const bft_secret *secret, const char *path, char *diag, size_t diag_len)
{
    size_t cap = BFT_KID_MAX + sodium_base64_ENCODED_LEN(TOKEN_SK_LEN, TOKEN_B64) + 2;
    char *line = sodium_malloc(cap);
    if (line == NULL)
        return BF_ERR_NOMEM;
    size_t kid_len = strlen(secret->kid);
    memcpy(line, secret->kid, kid_len);
    line[kid_len] = ' ';
    sodium_bin2base64(line + kid_len + 1, cap - kid_len - 2, secret->sk, TOKEN_SK_LEN, TOKEN_B64);
    size_t len = strlen(line);
    line[len++] = '\n';
    bf_err err = token_write_new(path, line, len, 0600, diag, diag_len);
    sodium_free(line);
    return err;
}

typedef struct token_secret_parse {
    bft_secret *secret;
    const char *path;
} token_secret_parse;

static bf_err token_secret_line(void *arg, int lineno, const char *kid, size_t kid_len,
                                const char *b64, size_t b64_len, char *diag, size_t diag_len)
{
    token_secret_parse *p = arg;
    if (p->secret != NULL)
        return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                           "%s line %d: a secret key file holds exactly one key", p->path, lineno);
    bft_secret *s = NULL;
    bf_err err = token_secret_alloc(&s, kid, kid_len);
    if (err != BF_OK)
        return err;
    size_t n = 0;
    if (!token_b64_decode(s->sk, TOKEN_SK_LEN, &n, b64, b64_len) || n != TOKEN_SK_LEN) {
        bft_secret_free(s);
        return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                           "%s line %d: not a base64url Ed25519 secret key", p->path, lineno);
    }
    /* the public half must be the one the seed derives */
    unsigned char pk[crypto_sign_PUBLICKEYBYTES];
    unsigned char sk2[crypto_sign_SECRETKEYBYTES];
    crypto_sign_seed_keypair(pk, sk2, s->sk);
    bool same = sodium_memcmp(sk2, s->sk, sizeof sk2) == 0;
    sodium_memzero(sk2, sizeof sk2);
    if (!same) {
        bft_secret_free(s);
        return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                           "%s line %d: secret key is inconsistent", p->path, lineno);
    }
    p->secret = s;
    return BF_OK;
}

bf_err bft_secret_load(bft_secret **out, const char *path, bool *insecure, char *diag,
                       size_t diag_len)
{
    if (path == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    if (!token_sodium_ready())
        return BF_ERR_INTERNAL;
    char *text = sodium_malloc(TOKEN_FILE_MAX_SECRET);
    if (text == NULL)
        return BF_ERR_NOMEM;
    size_t len = 0;
    mode_t mode = 0;
    bf_err err = token_read_file(path, text, TOKEN_FILE_MAX_SECRET, &len, &mode, diag, diag_len);
    token_secret_parse p = {.secret = NULL, .path = path};
    if (err == BF_OK)
        err = token_lines_each(text, len, path, token_secret_line, &p, diag, diag_len);
    sodium_free(text);
    if (err == BF_OK && p.secret == NULL)
        err = bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT, "%s holds no key", path);
    if (err != BF_OK) {
        bft_secret_free(p.secret);
        return err;
    }
    if (insecure != NULL)
        *insecure = (mode & (S_IRWXG | S_IRWXO)) != 0;
    *out = p.secret;
    return BF_OK;
}

/* ---- keyring ---------------------------------------------------------------------------- */

bf_err bft_keyring_new(bft_keyring **out)
{
    if (!token_sodium_ready())
        return BF_ERR_INTERNAL;
    bft_keyring *ring = calloc(1, sizeof *ring);
    if (ring == NULL)
        return BF_ERR_NOMEM;
    *out = ring;
    return BF_OK;
}

void bft_keyring_free(bft_keyring *ring)
{
    free(ring);
}

static const token_key *token_keyring_find(const bft_keyring *ring, const char *kid)
{
    for (size_t i = 0; i < ring->n; i++)
        if (strcmp(ring->keys[i].kid, kid) == 0)
            return &ring->keys[i];
    return NULL;
}

bool bft_keyring_has(const bft_keyring *ring, const char *kid)
{
    return ring != NULL && kid != NULL && token_keyring_find(ring, kid) != NULL;
}

size_t bft_keyring_count(const bft_keyring *ring)
{
    return ring ? ring->n : 0;
}

bf_err bft_keyring_add(bft_keyring *ring, const char *kid, const uint8_t pk[BFT_PUBLIC_KEY_LEN])
{
    if (ring == NULL || !bft_kid_valid(kid) || ring->n >= BFT_KEYRING_MAX ||
        token_keyring_find(ring, kid) != NULL || crypto_core_ed25519_is_valid_point(pk) != 1)
        return BF_ERR_INVALID_ARGUMENT;
    token_key *k = &ring->keys[ring->n++];
    snprintf(k->kid, sizeof k->kid, "%s", kid);
    memcpy(k->pk, pk, BFT_PUBLIC_KEY_LEN);
    return BF_OK;
}

typedef struct token_ring_parse {
    bft_keyring *ring;
    const char *what;
} token_ring_parse;

static bf_err token_ring_line(void *arg, int lineno, const char *kid, size_t kid_len,
                              const char *b64, size_t b64_len, char *diag, size_t diag_len)
{
    token_ring_parse *p = arg;
    char name[BFT_KID_MAX];
    memcpy(name, kid, kid_len);
    name[kid_len] = '\0';
    uint8_t pk[BFT_PUBLIC_KEY_LEN];
    size_t n = 0;
    if (!token_b64_decode(pk, sizeof pk, &n, b64, b64_len) || n != sizeof pk ||
        crypto_core_ed25519_is_valid_point(pk) != 1)
        return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                           "%s line %d: not a base64url Ed25519 public key", p->what, lineno);
    if (token_keyring_find(p->ring, name) != NULL)
        return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                           "%s line %d: key id %s listed twice", p->what, lineno, name);
    if (p->ring->n >= BFT_KEYRING_MAX)
        return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                           "%s line %d: more than %d trusted keys", p->what, lineno,
                           BFT_KEYRING_MAX);
    return bft_keyring_add(p->ring, name, pk);
}

static bf_err token_keyring_parse_named(bft_keyring **out, const char *text, size_t len,
                                        const char *what, char *diag, size_t diag_len)
{
    bft_keyring *ring = NULL;
    bf_err err = bft_keyring_new(&ring);
    if (err != BF_OK)
        return err;
    token_ring_parse p = {.ring = ring, .what = what};
    err = token_lines_each(text, len, what, token_ring_line, &p, diag, diag_len);
    if (err != BF_OK) {
        bft_keyring_free(ring);
        return err;
    }
    *out = ring;
    return BF_OK;
}

bf_err bft_keyring_parse(bft_keyring **out, const char *text, size_t len, char *diag,
                         size_t diag_len)
{
    if (text == NULL && len > 0)
        return BF_ERR_INVALID_ARGUMENT;
    return token_keyring_parse_named(out, text ? text : "", len, "trusted keys", diag, diag_len);
}

bf_err bft_keyring_load(bft_keyring **out, const char *path, char *diag, size_t diag_len)
{
    if (path == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    char *text = malloc(TOKEN_FILE_MAX_PUBLIC);
    if (text == NULL)
        return BF_ERR_NOMEM;
    size_t len = 0;
    mode_t mode = 0;
    bf_err err = token_read_file(path, text, TOKEN_FILE_MAX_PUBLIC, &len, &mode, diag, diag_len);
    if (err == BF_OK)
        err = token_keyring_parse_named(out, text, len, path, diag, diag_len);
    free(text);
    return err;
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
