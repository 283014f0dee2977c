/*
 * token_impl.h - what the two halves of the token code share: token.c (names, claims, mint,
 * parse, verify) and token_keys.c (key pairs, their files, the trusted keyring). Private.
 */
#ifndef BUZZ_TOKEN_IMPL_H
#define BUZZ_TOKEN_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sodium.h>

#include "buzz/token.h"

#define TOKEN_B64             sodium_base64_VARIANT_URLSAFE_NO_PADDING
#define TOKEN_SK_LEN          crypto_sign_SECRETKEYBYTES
#define TOKEN_CTX_LEN         (sizeof BFT_SIGN_CONTEXT) /* context and its 0x00 byte */
#define TOKEN_FILE_MAX_PUBLIC (256 * 1024)
#define TOKEN_FILE_MAX_SECRET 4096

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

/* libsodium is initialised (idempotent; false when it cannot be). */
bool token_sodium_ready(void);

/* Decode base64url (no padding) of exactly the span [b64, b64+len) into at most cap bytes. */
bool token_b64_decode(uint8_t *bin, size_t cap, size_t *bin_len, const char *b64, size_t len);

/* A key ID of len bytes at s is well formed (bft_kid_valid for a span). */
bool token_kid_span_valid(const char *s, size_t len);

/* The key of ring named kid, or NULL. */
const token_key *token_keyring_find(const bft_keyring *ring, const char *kid);

#endif /* BUZZ_TOKEN_IMPL_H */
