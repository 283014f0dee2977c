/*
 * buzz/token.h - capability tokens (library buzz-common): Ed25519 keys, key files, minting,
 * parsing and verification. Used by the server (auth.c), the client and buzzctl.
 *
 * Format (proto/buzz/backfill/v1/token.proto):
 *
 *   "bbt1." base64url(TokenClaims) "." base64url(signature)
 *
 * base64url without padding; signature = Ed25519 over "buzz-backfill-token-v1" || 0x00 ||
 * the TokenClaims bytes exactly as they appear in the token. A token is at most
 * BFT_TOKEN_MAX bytes. Parsing is strict and fails closed: the claims must be the canonical
 * encoding of a TokenClaims message (what bft_mint produces) with no unknown fields, and must
 * carry a 16-byte token ID, an actor, an audience, a key ID and an expiry.
 *
 * Key files (text, one key per line, '#' starts a comment line, blank lines ignored):
 *   public  "<kid> <base64url(32-byte Ed25519 public key)>"   (several: the trusted set)
 *   secret  "<kid> <base64url(64-byte Ed25519 secret key)>"   (exactly one; mode 0600)
 * A kid is 1..BFT_KID_MAX-1 bytes of [A-Za-z0-9._:-].
 *
 * Errors: functions return bf_err. Every token rejection is BF_ERR_UNAUTHENTICATED with a
 * bft_reason saying why; messages never contain the token or any part of it. Key and file
 * errors put a short diagnostic (path and line number, never key material) in diag.
 *
 * Secrets: a bft_secret keeps its key in sodium_malloc'd memory, wiped when freed. Nothing in
 * this API prints, logs or returns secret key material except bft_secret_save.
 *
 * Threading: a bft_keyring is immutable after it is built and may be shared by threads; a
 * bft_secret likewise. All other calls use caller storage only.
 */
#ifndef BUZZ_TOKEN_H
#define BUZZ_TOKEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buzz/err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BFT_PREFIX         "bbt1."
#define BFT_SIGN_CONTEXT   "buzz-backfill-token-v1" /* followed by one 0x00 byte */
#define BFT_TOKEN_MAX      4096 /* bytes of a whole token, terminator excluded */
#define BFT_CLAIMS_MAX     3072 /* bytes of encoded claims inside a token */
#define BFT_NAME_MAX       128  /* bytes of actor / audience, terminator included */
#define BFT_KID_MAX        65   /* bytes of a key ID, terminator included (fits "token kid=") */
#define BFT_LIST_MAX       8    /* capability / role entries in one token */
#define BFT_TOKEN_ID_LEN   16
#define BFT_TOKEN_ID_HEX   33 /* lower-case hex + terminator */
#define BFT_PUBLIC_KEY_LEN 32
#define BFT_SIGNATURE_LEN  64
#define BFT_KEYRING_MAX    64 /* trusted keys in one keyring */
#define BFT_SKEW_DEFAULT   30 /* seconds */

/* Capability bits: 1u << buzz.backfill.v1.Capability value (same as SRV_CAP_* in srv.h). */
#define BFT_CAP_READ      (1u << 1) /* Admin.List, Get, Audit, WhoAmI, Preflight */
#define BFT_CAP_CONTROL   (1u << 2) /* Admin.Start, Pause, Resume, Retry */
#define BFT_CAP_VALIDATE  (1u << 3) /* Admin.Validate */
#define BFT_CAP_READINESS (1u << 4) /* Readiness.Check */
#define BFT_CAP_ALL       (BFT_CAP_READ | BFT_CAP_CONTROL | BFT_CAP_VALIDATE | BFT_CAP_READINESS)

/* Role bits: 1u << buzz.backfill.v1.Role value. Informational only: no role grants anything. */
#define BFT_ROLE_DEPLOYMENT_OPERATOR (1u << 1)
#define BFT_ROLE_COMMUNITY_OWNER     (1u << 2)
#define BFT_ROLE_CHANNEL_ADMIN       (1u << 3)
#define BFT_ROLE_MEMBER              (1u << 4)
#define BFT_ROLE_ALL                                                                               \
    (BFT_ROLE_DEPLOYMENT_OPERATOR | BFT_ROLE_COMMUNITY_OWNER | BFT_ROLE_CHANNEL_ADMIN |            \
     BFT_ROLE_MEMBER)

/* Why a token was refused. Append only; never renumber. */
#define BFT_REASON_LIST(X)                                                                         \
    X(BFT_REASON_NONE, 0, "none", "ok")                                                            \
    X(BFT_REASON_MALFORMED, 1, "malformed", "malformed")                                           \
    X(BFT_REASON_UNKNOWN_KEY, 2, "unknown_key", "unknown key")                                     \
    X(BFT_REASON_BAD_SIGNATURE, 3, "bad_signature", "bad signature")                               \
    X(BFT_REASON_EXPIRED, 4, "expired", "expired")                                                 \
    X(BFT_REASON_NOT_YET_VALID, 5, "not_yet_valid", "not yet valid")                               \
    X(BFT_REASON_WRONG_AUDIENCE, 6, "wrong_audience", "wrong audience")                            \
    X(BFT_REASON_REVOKED, 7, "revoked", "revoked")                                                 \
    X(BFT_REASON_MISSING, 8, "missing", "missing token")

typedef enum bft_reason {
#define BFT_REASON_ENUM(name, value, code, text) name = value,
    BFT_REASON_LIST(BFT_REASON_ENUM)
#undef BFT_REASON_ENUM
} bft_reason;

/* Stable code ("unknown_key") and short client-safe text ("unknown key"); never NULL. */
const char *bft_reason_name(bft_reason reason);
const char *bft_reason_str(bft_reason reason);

/* TokenClaims as C. Strings are NUL-terminated and free of control characters. */
typedef struct bft_claims {
    uint8_t token_id[BFT_TOKEN_ID_LEN]; /* random; revocation is by this ID */
    char actor[BFT_NAME_MAX];           /* who the token speaks for; non-empty */
    uint32_t caps;                      /* BFT_CAP_* bits; unknown capability values ignored */
    uint32_t roles;                     /* BFT_ROLE_* bits; informational, grants nothing */
    char audience[BFT_NAME_MAX];        /* the deployment; non-empty */
    int64_t not_before;                 /* Unix seconds; 0 = absent */
    int64_t expires_at;                 /* Unix seconds; required, > not_before */
    char key_id[BFT_KID_MAX];           /* kid of the signing key */
} bft_claims;

/* A parsed, not yet verified token. Caller storage (about 3.5 KiB). */
typedef struct bft_token {
    bft_claims claims;
    uint8_t signature[BFT_SIGNATURE_LEN];
    uint8_t claims_bytes[BFT_CLAIMS_MAX]; /* the signed bytes */
    size_t claims_len;
} bft_token;

/* ---- names ------------------------------------------------------------------------------ */

/* true when kid is a valid key ID (1..BFT_KID_MAX-1 bytes of [A-Za-z0-9._:-]). */
bool bft_kid_valid(const char *kid);
/* true when s is a valid actor or audience (1..BFT_NAME_MAX-1 bytes, no control chars). */
bool bft_name_valid(const char *s);
/* Comma-separated names ("read,control") -> bits. BF_ERR_INVALID_ARGUMENT on an unknown
 * name. Role names: deployment_operator, community_owner, channel_admin, member. */
bf_err bft_caps_parse(uint32_t *out, const char *list);
bf_err bft_roles_parse(uint32_t *out, const char *list);
/* Bits -> "read,control" ("" for none) into buf; always terminated; when short, only
 * the names that fit whole. */
void bft_caps_format(char *buf, size_t len, uint32_t caps);
void bft_roles_format(char *buf, size_t len, uint32_t roles);
/* 16 random bytes; and their lower-case hex (buf holds BFT_TOKEN_ID_HEX bytes). */
void bft_token_id_new(uint8_t id[BFT_TOKEN_ID_LEN]);
void bft_token_id_hex(char buf[BFT_TOKEN_ID_HEX], const uint8_t id[BFT_TOKEN_ID_LEN]);
/* 32 hex digits (either case) -> 16 bytes; BF_ERR_INVALID_ARGUMENT otherwise. */
bf_err bft_token_id_parse(uint8_t out[BFT_TOKEN_ID_LEN], const char *hex);

/* ---- secret keys ------------------------------------------------------------------------ */

typedef struct bft_secret bft_secret;

/* A fresh Ed25519 key pair named kid. */
bf_err bft_keygen(bft_secret **out, const char *kid);
/* Wipes and frees; NULL is a no-op. */
void bft_secret_free(bft_secret *secret);
const char *bft_secret_kid(const bft_secret *secret);
void bft_secret_public_key(const bft_secret *secret, uint8_t pk[BFT_PUBLIC_KEY_LEN]);
/*
 * Write the secret key file (a new file, created with mode 0600; an existing file is never
 * overwritten: BF_ERR_IO "file exists"). A partial file is removed on error.
 */
bf_err bft_secret_save(const bft_secret *secret, const char *path, char *diag, size_t diag_len);
/* The public key file line "<kid> <base64url(pk)>\n" into buf (BF_ERR_INVALID_ARGUMENT when
 * len is too small; 160 bytes always suffice). */
bf_err bft_public_line(char *buf, size_t len, const bft_secret *secret);
/* Write the public key line to a new file (never overwriting an existing one). */
bf_err bft_public_save(const bft_secret *secret, const char *path, char *diag, size_t diag_len);
/*
 * Read a secret key file. Refuses anything but a regular file holding exactly one well-formed
 * key whose public half matches its seed. When the file is readable by group or others,
 * *insecure (if not NULL) is set to true and the key still loads: the caller warns.
 */
bf_err bft_secret_load(bft_secret **out, const char *path, bool *insecure, char *diag,
                       size_t diag_len);

/* ---- trusted public keys ---------------------------------------------------------------- */

typedef struct bft_keyring bft_keyring;

bf_err bft_keyring_new(bft_keyring **out);
void bft_keyring_free(bft_keyring *ring);
/* Add one trusted key; BF_ERR_INVALID_ARGUMENT for a bad kid, a duplicate kid or a full ring. */
bf_err bft_keyring_add(bft_keyring *ring, const char *kid, const uint8_t pk[BFT_PUBLIC_KEY_LEN]);
/* Parse a public key file's text (len bytes) / read one. An empty set is valid. */
bf_err bft_keyring_parse(bft_keyring **out, const char *text, size_t len, char *diag,
                         size_t diag_len);
bf_err bft_keyring_load(bft_keyring **out, const char *path, char *diag, size_t diag_len);
size_t bft_keyring_count(const bft_keyring *ring);
bool bft_keyring_has(const bft_keyring *ring, const char *kid);

/* ---- minting, parsing, verification ----------------------------------------------------- */

/*
 * Mint a token for claims, signed by secret. claims->key_id is ignored: the secret's kid is
 * used. out receives the token and its terminator (out_len >= BFT_TOKEN_MAX + 1 always
 * suffices). BF_ERR_INVALID_ARGUMENT when the claims would not parse (empty actor or
 * audience, expiry missing or not after not_before, token too long).
 */
bf_err bft_mint(char *out, size_t out_len, const bft_claims *claims, const bft_secret *secret);

/* Structure and claims decoding only; no signature, time or audience check. */
bf_err bft_parse(bft_token *out, const char *token, size_t token_len, bft_reason *reason);

/* Signature by the keyring's key named in the claims: UNKNOWN_KEY or BAD_SIGNATURE. */
bf_err bft_check_signature(const bft_token *token, const bft_keyring *ring, bft_reason *reason)
    __attribute__((warn_unused_result));

/*
 * Time and audience: NOT_YET_VALID when now + skew_s < not_before, EXPIRED when
 * now - skew_s >= expires_at, WRONG_AUDIENCE when audience differs. audience NULL skips the
 * audience check (inspection tools only; a server always passes its audience).
 */
bf_err bft_check_claims(const bft_claims *claims, const char *audience, int64_t now, int skew_s,
                        bft_reason *reason) __attribute__((warn_unused_result));

/* bft_parse + bft_check_signature + bft_check_claims; *out written only on BF_OK. */
bf_err bft_verify(bft_claims *out, const char *token, size_t token_len, const bft_keyring *ring,
                  const char *audience, int64_t now, int skew_s, bft_reason *reason)
    __attribute__((warn_unused_result));

/* ---- clock and test hooks --------------------------------------------------------------- */

/* Wall clock in Unix seconds (the override's, when one is set). */
int64_t bft_now(void);
/* Tests only: replace the clock (NULL restores time(2)). */
void bft_set_clock_for_testing(int64_t (*now)(void));
/* Process-wide count of Ed25519 signature verifications performed (cache tests). */
uint64_t bft_signature_checks(void);

#ifdef __cplusplus
}
#endif
#endif /* BUZZ_TOKEN_H */
