/*
 * auth.c - who a request speaks for (srv_auth_* of srv.h): capability tokens verified against
 * the trusted keyring, revocation by token ID, the ipc:// boundary authority, the verified-token
 * cache, and the per-method capability check.
 *
 * Design notes:
 * - Only capabilities authorize. Roles (deployment operator and community roles alike) are
 *   carried into the identity for display and audit, and never consulted.
 * - The cache maps a keyed BLAKE2b hash of the whole token to its signature-verified claims,
 *   so a repeated token skips parsing and Ed25519. It stores nothing a later check needs to
 *   trust: expiry, not-before, audience and revocation are checked on every call, hit or not.
 *   The cache is bounded (AUTH_CACHE_SIZE entries, the oldest is evicted first) and dropped
 *   whenever keys or revocations are reloaded, so a removed key stops working at once.
 * - One rwlock guards the keyring, the revocation set and the cache. Lookups and signature
 *   checks run under the read lock; inserts and reloads take the write lock. An insert is
 *   skipped when a reload happened in between (generation changed). Writers are preferred so
 *   a SIGHUP reload is not starved by a busy server.
 * - Boundary authority is granted only when no token is presented on an ipc listener with
 *   ipc_boundary on. It names its source ("ipc uid=1000") and never an actor. A token presented
 *   on ipc is verified like anywhere else; a bad one is not downgraded to boundary authority.
 *   An empty token is presented too (an empty token file, an unset variable expanded into a
 *   flag): it is malformed, so a client that meant to send a credential never ends up running
 *   with boundary authority and without attribution.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sodium.h>

#include "buzz/token.h"
#include "srv.h"

#define AUTH_CACHE_SIZE    1024
#define AUTH_CACHE_BUCKETS 1024 /* power of two */
#define AUTH_REVOKED_MAX   100000
#define AUTH_SKEW_MAX      3600
#define AUTH_LINE_MAX      256

_Static_assert(SRV_CAP_READ == BFT_CAP_READ && SRV_CAP_CONTROL == BFT_CAP_CONTROL &&
                   SRV_CAP_VALIDATE == BFT_CAP_VALIDATE && SRV_CAP_READINESS == BFT_CAP_READINESS,
               "srv and bft capability bits agree");
_Static_assert(BF_ACTOR_MAX >= BFT_NAME_MAX, "an actor fits the identity");
_Static_assert(BF_ACTOR_MAX >= sizeof "token kid=" + BFT_KID_MAX - 1, "authority fits");

typedef struct auth_entry {
    uint8_t hash[crypto_generichash_BYTES];
    bool used;
    int32_t next; /* bucket chain; -1 ends it */
    bft_claims claims;
} auth_entry;

typedef uint8_t auth_token_id[BFT_TOKEN_ID_LEN];

struct srv_auth {
    /* configuration: immutable after srv_auth_new */
    char audience[BFT_NAME_MAX];
    char *keys_file;    /* NULL: no trusted keys */
    char *revoked_file; /* NULL: no revocations */
    int skew_s;
    bool ipc_boundary;
    uint32_t ipc_caps;
    uint8_t cache_key[crypto_generichash_KEYBYTES];

    pthread_rwlock_t lock;
    /* under lock */
    bft_keyring *ring;
    auth_token_id *revoked; /* sorted, distinct */
    size_t n_revoked;
    uint64_t generation; /* bumped by every reload */
    auth_entry cache[AUTH_CACHE_SIZE];
    int32_t buckets[AUTH_CACHE_BUCKETS];
    size_t cache_next; /* slot of the next insert: the oldest entry */
};

/* ---- revocation set --------------------------------------------------------------------- */

static int auth_id_cmp(const void *a, const void *b)
{
    return memcmp(a, b, BFT_TOKEN_ID_LEN);
}

static bool auth_revoked(const srv_auth *auth, const uint8_t id[BFT_TOKEN_ID_LEN])
{
    return auth->n_revoked > 0 &&
           bsearch(id, auth->revoked, auth->n_revoked, sizeof *auth->revoked, auth_id_cmp) != NULL;
}

/* Who may change the trusted keys or the revocations decides who is trusted: refuse a file
 * that anyone but its owner (and root) may write. st describes path (what names it). */
static bf_err auth_file_private(const struct stat *st, const char *what, const char *path,
                                char *diag, size_t diag_len)
{
    if ((st->st_mode & (S_IWGRP | S_IWOTH)) == 0)
        return BF_OK;
    (void)bf_diag_set(diag, diag_len, BF_OK, "%s %s is writable by group or others (chmod go-w)",
                      what, path);
    return BF_ERR_PERMISSION_DENIED;
}

/* Lines of 32 hex digits; '#' comment lines and blank lines ignored. */
static bf_err auth_revoked_load(auth_token_id **out, size_t *n_out, const char *path, char *diag,
                                size_t diag_len)
{
    FILE *f = fopen(path, "re");
    if (f == NULL) {
        (void)bf_diag_set(diag, diag_len, BF_OK, "cannot open revocations %s", path);
        return BF_ERR_IO;
    }
    struct stat st;
    bf_err mode_err = fstat(fileno(f), &st) != 0
                          ? BF_ERR_IO
                          : auth_file_private(&st, "revocations", path, diag, diag_len);
    if (mode_err != BF_OK) {
        fclose(f);
        return mode_err;
    }
    auth_token_id *ids = NULL;
    size_t n = 0, cap = 0;
    char line[AUTH_LINE_MAX];
    int lineno = 0;
    bf_err err = BF_OK;
    while (err == BF_OK && fgets(line, sizeof line, f) != NULL) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n' && !feof(f)) {
            (void)bf_diag_set(diag, diag_len, BF_OK, "%s line %d: line too long", path, lineno);
            err = BF_ERR_INVALID_ARGUMENT;
            break;
        }
        char *s = line + strspn(line, " \t");
        s[strcspn(s, " \t\r\n")] = '\0';
        if (*s == '\0' || *s == '#')
            continue;
        if (n == AUTH_REVOKED_MAX) {
            (void)bf_diag_set(diag, diag_len, BF_OK, "%s: more than %d revoked tokens", path,
                              AUTH_REVOKED_MAX);
            err = BF_ERR_INVALID_ARGUMENT;
            break;
        }
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            auth_token_id *grown = realloc(ids, ncap * sizeof *ids);
            if (grown == NULL) {
                err = BF_ERR_NOMEM;
                break;
            }
            ids = grown;
            cap = ncap;
        }
        if (bft_token_id_parse(ids[n], s) != BF_OK) {
            (void)bf_diag_set(diag, diag_len, BF_OK, "%s line %d: expected a 32-digit hex token id",
                              path, lineno);
            err = BF_ERR_INVALID_ARGUMENT;
            break;
        }
        n++;
    }
    if (err == BF_OK && ferror(f)) {
        (void)bf_diag_set(diag, diag_len, BF_OK, "could not read revocations %s", path);
        err = BF_ERR_IO;
    }
    fclose(f);
    if (err != BF_OK) {
        free(ids);
        return err;
    }
    if (n > 1) {
        qsort(ids, n, sizeof *ids, auth_id_cmp);
        size_t w = 1;
        for (size_t r = 1; r < n; r++)
            if (memcmp(ids[r], ids[w - 1], BFT_TOKEN_ID_LEN) != 0)
                memcpy(ids[w++], ids[r], BFT_TOKEN_ID_LEN);
        n = w;
    }
    *out = ids;
    *n_out = n;
    return BF_OK;
}

/* ---- cache (callers hold the lock) ------------------------------------------------------ */

static size_t auth_bucket(const uint8_t *hash)
{
    uint32_t h;
    memcpy(&h, hash, sizeof h);
    return h & (AUTH_CACHE_BUCKETS - 1);
}

static void auth_cache_clear(srv_auth *auth)
{
    for (size_t i = 0; i < AUTH_CACHE_SIZE; i++) {
        auth->cache[i].used = false;
        auth->cache[i].next = -1;
    }
    for (size_t i = 0; i < AUTH_CACHE_BUCKETS; i++)
        auth->buckets[i] = -1;
    auth->cache_next = 0;
}

static const auth_entry *auth_cache_find(const srv_auth *auth, const uint8_t *hash)
{
    for (int32_t i = auth->buckets[auth_bucket(hash)]; i >= 0; i = auth->cache[i].next)
        if (memcmp(auth->cache[i].hash, hash, crypto_generichash_BYTES) == 0)
            return &auth->cache[i];
    return NULL;
}

static void auth_cache_insert(srv_auth *auth, const uint8_t *hash, const bft_claims *claims)
{
    int32_t slot = (int32_t)auth->cache_next;
    auth_entry *e = &auth->cache[slot];
    if (e->used) { /* evict the oldest: unlink it from its chain */
        int32_t *link = &auth->buckets[auth_bucket(e->hash)];
        while (*link >= 0 && *link != slot)
            link = &auth->cache[*link].next;
        if (*link == slot)
            *link = e->next;
    }
    memcpy(e->hash, hash, crypto_generichash_BYTES);
    e->claims = *claims;
    e->used = true;
    size_t b = auth_bucket(hash);
    e->next = auth->buckets[b];
    auth->buckets[b] = slot;
    auth->cache_next = (auth->cache_next + 1) % AUTH_CACHE_SIZE;
}

/* ---- lifecycle -------------------------------------------------------------------------- */

/* Load keys and revocations from the configured files into fresh sets. */
static bf_err auth_load(const srv_auth *auth, bft_keyring **ring_out, auth_token_id **revoked_out,
                        size_t *n_revoked_out, char *diag, size_t diag_len)
{
    bft_keyring *ring = NULL;
    struct stat st;
    if (auth->keys_file != NULL && stat(auth->keys_file, &st) == 0 &&
        auth_file_private(&st, "trusted keys", auth->keys_file, diag, diag_len) != BF_OK)
        return BF_ERR_PERMISSION_DENIED;
    bf_err err = auth->keys_file ? bft_keyring_load(&ring, auth->keys_file, diag, diag_len)
                                 : bft_keyring_new(&ring);
    if (err != BF_OK)
        return err;
    auth_token_id *revoked = NULL;
    size_t n_revoked = 0;
    if (auth->revoked_file != NULL) {
        err = auth_revoked_load(&revoked, &n_revoked, auth->revoked_file, diag, diag_len);
        if (err != BF_OK) {
            bft_keyring_free(ring);
            return err;
        }
    }
    *ring_out = ring;
    *revoked_out = revoked;
    *n_revoked_out = n_revoked;
    return BF_OK;
}

static char *auth_dup_path(const char *path)
{
    return path != NULL && path[0] != '\0' ? strdup(path) : NULL;
}

bf_err srv_auth_new(srv_auth **out, const srv_auth_config *cfg, char *diag, size_t diag_len)
{
    if (out == NULL || cfg == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    if (!bft_name_valid(cfg->audience)) {
        (void)bf_diag_set(diag, diag_len, BF_OK, "token audience must be 1..%d printable bytes",
                          BFT_NAME_MAX - 1);
        return BF_ERR_INVALID_ARGUMENT;
    }
    if (cfg->clock_skew_s < 0 || cfg->clock_skew_s > AUTH_SKEW_MAX) {
        (void)bf_diag_set(diag, diag_len, BF_OK, "clock skew must be 0..%d seconds", AUTH_SKEW_MAX);
        return BF_ERR_INVALID_ARGUMENT;
    }
    if ((cfg->ipc_boundary_caps & ~SRV_CAP_ALL) != 0) {
        (void)bf_diag_set(diag, diag_len, BF_OK, "unknown capability bits for the ipc boundary");
        return BF_ERR_INVALID_ARGUMENT;
    }
    bool has_keys = cfg->trusted_keys_file != NULL && cfg->trusted_keys_file[0] != '\0';
    if (!has_keys && !cfg->ipc_boundary) {
        return bf_diag_set(diag, diag_len, BF_ERR_INVALID_ARGUMENT,
                           "no trusted keys file and no ipc boundary: nothing could "
                           "authenticate");
    }
    if (sodium_init() < 0)
        return BF_ERR_INTERNAL;

    srv_auth *auth = calloc(1, sizeof *auth);
    if (auth == NULL)
        return BF_ERR_NOMEM;
    snprintf(auth->audience, sizeof auth->audience, "%s", cfg->audience);
    auth->keys_file = auth_dup_path(cfg->trusted_keys_file);
    auth->revoked_file = auth_dup_path(cfg->revoked_file);
    if ((has_keys && auth->keys_file == NULL) ||
        (cfg->revoked_file && cfg->revoked_file[0] && auth->revoked_file == NULL)) {
        free(auth->keys_file);
        free(auth->revoked_file);
        free(auth);
        return BF_ERR_NOMEM;
    }
    auth->skew_s = cfg->clock_skew_s ? cfg->clock_skew_s : BFT_SKEW_DEFAULT;
    auth->ipc_boundary = cfg->ipc_boundary;
    auth->ipc_caps = cfg->ipc_boundary_caps ? cfg->ipc_boundary_caps : SRV_CAP_ALL;
    crypto_generichash_keygen(auth->cache_key);
    auth_cache_clear(auth);

    bf_err err = auth_load(auth, &auth->ring, &auth->revoked, &auth->n_revoked, diag, diag_len);
    if (err == BF_OK) {
        pthread_rwlockattr_t attr;
        pthread_rwlockattr_init(&attr);
        pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
        if (pthread_rwlock_init(&auth->lock, &attr) != 0) {
            err = BF_ERR_NOMEM;
            bft_keyring_free(auth->ring);
            free(auth->revoked);
        }
        pthread_rwlockattr_destroy(&attr);
    }
    if (err != BF_OK) {
        free(auth->keys_file);
        free(auth->revoked_file);
        free(auth);
        return err;
    }
    *out = auth;
    return BF_OK;
}

void srv_auth_free(srv_auth *auth)
{
    if (auth == NULL)
        return;
    pthread_rwlock_destroy(&auth->lock);
    bft_keyring_free(auth->ring);
    free(auth->revoked);
    free(auth->keys_file);
    free(auth->revoked_file);
    sodium_memzero(auth, sizeof *auth);
    free(auth);
}

bf_err srv_auth_reload(srv_auth *auth, char *diag, size_t diag_len)
{
    if (auth == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    bft_keyring *ring = NULL;
    auth_token_id *revoked = NULL;
    size_t n_revoked = 0;
    bf_err err = auth_load(auth, &ring, &revoked, &n_revoked, diag, diag_len);
    if (err != BF_OK)
        return err; /* the previous sets stay */
    pthread_rwlock_wrlock(&auth->lock);
    bft_keyring *old_ring = auth->ring;
    auth_token_id *old_revoked = auth->revoked;
    auth->ring = ring;
    auth->revoked = revoked;
    auth->n_revoked = n_revoked;
    auth->generation++;
    auth_cache_clear(auth);
    pthread_rwlock_unlock(&auth->lock);
    bft_keyring_free(old_ring);
    free(old_revoked);
    return BF_OK;
}

/* ---- authentication --------------------------------------------------------------------- */

static bf_err auth_refuse(char *diag, size_t diag_len, bft_reason reason)
{
    (void)bf_diag_set(diag, diag_len, BF_OK, "%s", bft_reason_str(reason));
    return BF_ERR_UNAUTHENTICATED;
}

static bool auth_boundary_applies(const srv_auth *auth, const srv_peer *peer)
{
    return auth->ipc_boundary && peer != NULL && peer->listener != NULL &&
           strcmp(peer->listener, "ipc") == 0;
}

static void auth_boundary_identity(const srv_auth *auth, const srv_peer *peer, srv_identity *who)
{
    memset(who, 0, sizeof *who);
    who->authenticated = true;
    who->boundary = true;
    if (peer->has_uid)
        snprintf(who->authority, sizeof who->authority, "ipc uid=%u", (unsigned)peer->uid);
    else
        snprintf(who->authority, sizeof who->authority, "ipc uid=unknown");
    who->caps = auth->ipc_caps;
}

bf_err srv_auth_authenticate(srv_auth *auth, const char *token, const srv_peer *peer,
                             srv_identity *who, char *diag, size_t diag_len)
{
    if (auth == NULL || who == NULL)
        return BF_ERR_INVALID_ARGUMENT;
    if (token == NULL) {
        if (!auth_boundary_applies(auth, peer))
            return auth_refuse(diag, diag_len, BFT_REASON_MISSING);
        auth_boundary_identity(auth, peer, who);
        return BF_OK;
    }
    if (token[0] == '\0') /* present but empty: a broken credential, not an absent one */
        return auth_refuse(diag, diag_len, BFT_REASON_MALFORMED);
    size_t len = strnlen(token, BFT_TOKEN_MAX + 1);
    if (len > BFT_TOKEN_MAX)
        return auth_refuse(diag, diag_len, BFT_REASON_MALFORMED);
    uint8_t hash[crypto_generichash_BYTES];
    crypto_generichash(hash, sizeof hash, (const unsigned char *)token, len, auth->cache_key,
                       sizeof auth->cache_key);
    int64_t now = bft_now();

    bft_claims claims;
    bft_reason reason = BFT_REASON_NONE;
    bf_err err = BF_OK;
    bool hit = false;
    pthread_rwlock_rdlock(&auth->lock);
    uint64_t generation = auth->generation;
    const auth_entry *e = auth_cache_find(auth, hash);
    if (e != NULL) {
        hit = true;
        claims = e->claims;
    } else {
        bft_token t;
        err = bft_parse(&t, token, len, &reason);
        if (err == BF_OK)
            err = bft_check_signature(&t, auth->ring, &reason);
        if (err == BF_OK)
            claims = t.claims;
    }
    if (err == BF_OK && auth_revoked(auth, claims.token_id)) {
        err = BF_ERR_UNAUTHENTICATED;
        reason = BFT_REASON_REVOKED;
    }
    pthread_rwlock_unlock(&auth->lock);

    bool signature_ok = err == BF_OK || reason == BFT_REASON_REVOKED;
    if (signature_ok && !hit) {
        pthread_rwlock_wrlock(&auth->lock);
        if (auth->generation == generation && auth_cache_find(auth, hash) == NULL)
            auth_cache_insert(auth, hash, &claims);
        pthread_rwlock_unlock(&auth->lock);
    }
    if (err == BF_OK)
        err = bft_check_claims(&claims, auth->audience, now, auth->skew_s, &reason);
    if (err != BF_OK)
        return auth_refuse(diag, diag_len, reason);

    srv_identity id;
    memset(&id, 0, sizeof id);
    id.authenticated = true;
    id.boundary = false;
    snprintf(id.actor, sizeof id.actor, "%s", claims.actor);
    snprintf(id.authority, sizeof id.authority, "token kid=%s", claims.key_id);
    id.caps = claims.caps & SRV_CAP_ALL;
    id.roles = claims.roles;
    bft_token_id_hex(id.token_id, claims.token_id);
    id.expires_at = claims.expires_at;
    *who = id;
    return BF_OK;
}

bf_err srv_auth_authorize(const srv_identity *who, uint32_t required_caps)
{
    /* roles are deliberately not read here: only capabilities authorize */
    if (who == NULL || !who->authenticated)
        return BF_ERR_PERMISSION_DENIED;
    if ((who->caps & required_caps) != required_caps)
        return BF_ERR_PERMISSION_DENIED;
    return BF_OK;
}
