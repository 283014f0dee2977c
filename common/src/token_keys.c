/*
 * token_keys.c - Ed25519 key pairs for capability tokens and their files (a secret key file
 * readable by its owner only, a public line per key), and the trusted keyring the daemon
 * verifies against (buzz/token.h). Secret keys live only in sodium_malloc'd memory and are
 * wiped before release; diagnostics name a path and a line number, never key material.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "token_impl.h"

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

const token_key *token_keyring_find(const bft_keyring *ring, const char *kid)
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
