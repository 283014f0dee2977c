/*
 * fuzz_token.c - libFuzzer target: token parse + verify (buzz/token.h) on arbitrary bytes,
 * against a fixed keyring, plus the trusted-keys file parser on the same bytes.
 *
 * Invariants checked beyond "no crash, no sanitizer report":
 * - bft_verify agrees with bft_parse + bft_check_signature + bft_check_claims;
 * - a refusal always carries a reason and a success none;
 * - the claims of a token that verifies survive a round trip through bft_mint (with the fixed
 *   key) and bft_verify unchanged.
 * The keys derive from fixed seeds so the seed corpus (fuzz/corpus/token/) holds validly
 * signed tokens; "fuzz-1" is trusted, "fuzz-2" is not.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "buzz/token.h"

#define FUZZ_NOW      1800000000LL
#define FUZZ_AUDIENCE "fuzz-aud"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bft_keyring *fuzz_ring;
static bft_secret *fuzz_secret;

/* Save the fixed key through the public API: write a secret key file and load it back. */
static void fuzz_init(void)
{
    if (sodium_init() < 0)
        abort();
    unsigned char seed[crypto_sign_SEEDBYTES], pk[crypto_sign_PUBLICKEYBYTES],
        sk[crypto_sign_SECRETKEYBYTES];
    memset(seed, 0x42, sizeof seed);
    crypto_sign_seed_keypair(pk, sk, seed);
    if (bft_keyring_new(&fuzz_ring) != BF_OK || bft_keyring_add(fuzz_ring, "fuzz-1", pk) != BF_OK)
        abort();
    char path[] = "/tmp/fuzz-token-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        abort();
    char b64[sodium_base64_ENCODED_LEN(crypto_sign_SECRETKEYBYTES,
                                       sodium_base64_VARIANT_URLSAFE_NO_PADDING)];
    sodium_bin2base64(b64, sizeof b64, sk, sizeof sk, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    char line[sizeof b64 + 16];
    int n = snprintf(line, sizeof line, "fuzz-1 %s\n", b64);
    if (write(fd, line, (size_t)n) != n)
        abort();
    close(fd);
    bool insecure = false;
    if (bft_secret_load(&fuzz_secret, path, &insecure, NULL, 0) != BF_OK)
        abort();
    unlink(path);
    sodium_memzero(sk, sizeof sk);
    sodium_memzero(line, sizeof line);
}

static bool fuzz_claims_equal(const bft_claims *a, const bft_claims *b)
{
    return memcmp(a->token_id, b->token_id, sizeof a->token_id) == 0 &&
           strcmp(a->actor, b->actor) == 0 && a->caps == b->caps && a->roles == b->roles &&
           strcmp(a->audience, b->audience) == 0 && a->not_before == b->not_before &&
           a->expires_at == b->expires_at && strcmp(a->key_id, b->key_id) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fuzz_ring == NULL)
        fuzz_init();
    const char *token = (const char *)data;

    static bft_token parsed;
    bft_reason r1 = BFT_REASON_NONE, r2 = BFT_REASON_NONE;
    bf_err step = bft_parse(&parsed, token, size, &r1);
    if (step == BF_OK)
        step = bft_check_signature(&parsed, fuzz_ring, &r1);
    if (step == BF_OK)
        step = bft_check_claims(&parsed.claims, FUZZ_AUDIENCE, FUZZ_NOW, 30, &r1);

    bft_claims claims;
    bf_err whole = bft_verify(&claims, token, size, fuzz_ring, FUZZ_AUDIENCE, FUZZ_NOW, 30, &r2);
    if (whole != step || r1 != r2)
        abort();
    if ((whole == BF_OK) != (r2 == BFT_REASON_NONE))
        abort();
    if (whole != BF_OK && whole != BF_ERR_UNAUTHENTICATED)
        abort();
    if (whole == BF_OK) {
        static char again[BFT_TOKEN_MAX + 1];
        bft_claims back;
        bft_reason r3 = BFT_REASON_NONE;
        if (bft_mint(again, sizeof again, &claims, fuzz_secret) != BF_OK ||
            bft_verify(&back, again, strlen(again), fuzz_ring, FUZZ_AUDIENCE, FUZZ_NOW, 30, &r3) !=
                BF_OK ||
            !fuzz_claims_equal(&back, &claims))
            abort();
    }

    /* the trusted keys file parser on the same bytes */
    bft_keyring *ring = NULL;
    char diag[256];
    if (bft_keyring_parse(&ring, token, size, diag, sizeof diag) == BF_OK)
        bft_keyring_free(ring);
    return 0;
}
