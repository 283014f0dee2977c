/*
 * test_auth.c - the server's authentication and authorization seam (srv_auth_* in srv.h):
 * tokens become identities attributed to their actor and key; forged, foreign, unknown-key,
 * expired, not-yet-valid, wrong-audience, malformed and revoked tokens are UNAUTHENTICATED with
 * a short reason that never echoes the token; roles alone (community roles and even the
 * deployment-operator role) authorize nothing; keys rotate and revocations apply on reload,
 * and a failed reload keeps the previous sets; the verified-token cache skips the signature
 * check on a hit yet still refuses revoked and expired tokens, is bounded and evicts its
 * oldest entry; the ipc boundary grants authority only without a token, names its source and
 * never invents an actor; and concurrent authentication survives concurrent reloads.
 * No database needed.
 *
 * Guards proved (each removal fails a test here): the per-call revocation check on cache hits
 * (test_cache), the per-call expiry check on cache hits (test_cache), the cache drop on reload
 * (test_rotation), the capability-only authorize (test_roles_grant_nothing), the "no token"
 * condition of the boundary and the refusal of a present but empty token (test_ipc_boundary,
 * test_refusals), the saturated WhoAmI expiry (test_whoami_far_expiry), the refusal of trusted
 * keys or revocations writable by group or others at load and at reload, which keeps the
 * previous sets (auth_file_private, test_file_modes).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "buzz/token.h"
#include "log.h"
#include "srv.h"

#define AUD "relay-prod"

static char dir[64];
static char keys_path[128], revoked_path[128];
static bft_secret *k1, *k2, *untrusted;
static int64_t fake_now;

static int64_t fake_clock(void)
{
    return fake_now;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, 0644), 0); /* whatever the umask: see test_file_modes */
}

static void append_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "a");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* trusted keys file with the given secrets' public halves */
static void write_keys(bft_secret *a, bft_secret *b)
{
    char text[512] = "# trusted keys\n", line[160];
    if (a != NULL) {
        assert_int_equal(bft_public_line(line, sizeof line, a), BF_OK);
        strcat(text, line);
    }
    if (b != NULL) {
        assert_int_equal(bft_public_line(line, sizeof line, b), BF_OK);
        strcat(text, line);
    }
    write_file(keys_path, text);
}

static int group_setup(void **state)
{
    snprintf(dir, sizeof dir, "/tmp/buzz-auth-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(keys_path, sizeof keys_path, "%s/trusted.keys", dir);
    snprintf(revoked_path, sizeof revoked_path, "%s/revoked", dir);
    assert_int_equal(bft_keygen(&k1, "k1"), BF_OK);
    assert_int_equal(bft_keygen(&k2, "k2"), BF_OK);
    assert_int_equal(bft_keygen(&untrusted, "k1"), BF_OK); /* claims a trusted kid */
    return 0;
}

static int group_teardown(void **state)
{
    bft_secret_free(k1);
    bft_secret_free(k2);
    bft_secret_free(untrusted);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

/* Each test: keys k1 + k2 trusted, nothing revoked, real clock. */
static int setup(void **state)
{
    write_keys(k1, k2);
    write_file(revoked_path, "# revoked token ids\n");
    bft_set_clock_for_testing(NULL);
    return 0;
}

static srv_auth *auth_new(bool ipc_boundary, uint32_t ipc_caps)
{
    srv_auth_config cfg = {
        .audience = AUD,
        .trusted_keys_file = keys_path,
        .revoked_file = revoked_path,
        .clock_skew_s = 30,
        .ipc_boundary = ipc_boundary,
        .ipc_boundary_caps = ipc_caps,
    };
    srv_auth *auth = NULL;
    char diag[256] = "";
    assert_int_equal(srv_auth_new(&auth, &cfg, diag, sizeof diag), BF_OK);
    return auth;
}

typedef struct mint_opts {
    const char *actor;
    uint32_t caps, roles;
    const char *audience;
    int64_t nbf, exp; /* relative to now; nbf 0 = absent */
} mint_opts;

static void mint(char *token, const bft_secret *s, mint_opts o, uint8_t id_out[16])
{
    int64_t now = bft_now();
    bft_claims c;
    memset(&c, 0, sizeof c);
    bft_token_id_new(c.token_id);
    snprintf(c.actor, sizeof c.actor, "%s", o.actor ? o.actor : "alice@ops");
    c.caps = o.caps;
    c.roles = o.roles;
    snprintf(c.audience, sizeof c.audience, "%s", o.audience ? o.audience : AUD);
    c.not_before = o.nbf ? now + o.nbf : 0;
    c.expires_at = now + (o.exp ? o.exp : 3600);
    assert_int_equal(bft_mint(token, BFT_TOKEN_MAX + 1, &c, s), BF_OK);
    if (id_out != NULL)
        memcpy(id_out, c.token_id, 16);
}

static const srv_peer tcp_peer = {.listener = "tcp"};

/* Authentication must fail with exactly this reason, and the diag must not echo the token. */
static void expect_refused(srv_auth *auth, const char *token, const srv_peer *peer,
                           const char *reason)
{
    srv_identity who;
    memset(&who, 0x5a, sizeof who);
    srv_identity before = who;
    char diag[SRV_MESSAGE_MAX_LEN + 1] = "";
    assert_int_equal(srv_auth_authenticate(auth, token, peer, &who, diag, sizeof diag),
                     BF_ERR_UNAUTHENTICATED);
    assert_string_equal(diag, reason);
    assert_memory_equal(&who, &before, sizeof who); /* out-param untouched */
}

static srv_identity expect_ok(srv_auth *auth, const char *token, const srv_peer *peer)
{
    srv_identity who;
    char diag[SRV_MESSAGE_MAX_LEN + 1] = "";
    bf_err err = srv_auth_authenticate(auth, token, peer, &who, diag, sizeof diag);
    if (err != BF_OK)
        fail_msg("authenticate: %s", diag);
    assert_true(who.authenticated);
    return who;
}

static void test_token_identity(void **state)
{
    srv_auth *auth = auth_new(false, 0);
    char token[BFT_TOKEN_MAX + 1];
    uint8_t id[16];
    mint(token, k2, (mint_opts){.actor = "bob@ops", .caps = SRV_CAP_READ | SRV_CAP_VALIDATE}, id);
    srv_identity who = expect_ok(auth, token, &tcp_peer);
    assert_false(who.boundary);
    assert_string_equal(who.actor, "bob@ops");
    assert_string_equal(who.authority, "token kid=k2");
    assert_int_equal(who.caps, SRV_CAP_READ | SRV_CAP_VALIDATE);
    char hex[33];
    bft_token_id_hex(hex, id);
    assert_string_equal(who.token_id, hex);
    assert_true(who.expires_at > bft_now());
    assert_int_equal(srv_auth_authorize(&who, SRV_CAP_READ), BF_OK);
    assert_int_equal(srv_auth_authorize(&who, SRV_CAP_VALIDATE), BF_OK);
    assert_int_equal(srv_auth_authorize(&who, SRV_CAP_READ | SRV_CAP_VALIDATE), BF_OK);
    assert_int_equal(srv_auth_authorize(&who, SRV_CAP_CONTROL), BF_ERR_PERMISSION_DENIED);
    assert_int_equal(srv_auth_authorize(&who, SRV_CAP_READ | SRV_CAP_CONTROL),
                     BF_ERR_PERMISSION_DENIED);
    assert_int_equal(srv_auth_authorize(&who, SRV_CAP_READINESS), BF_ERR_PERMISSION_DENIED);
    srv_identity nobody;
    memset(&nobody, 0, sizeof nobody);
    nobody.caps = SRV_CAP_ALL; /* caps without authentication count for nothing */
    assert_int_equal(srv_auth_authorize(&nobody, SRV_CAP_READ), BF_ERR_PERMISSION_DENIED);
    assert_int_equal(srv_auth_authorize(NULL, SRV_CAP_READ), BF_ERR_PERMISSION_DENIED);
    srv_auth_free(auth);
}

static void test_refusals(void **state)
{
    srv_auth *auth = auth_new(false, 0);
    char token[BFT_TOKEN_MAX + 1], bad[BFT_TOKEN_MAX + 8];
    mint(token, k1, (mint_opts){.caps = SRV_CAP_ALL}, NULL);
    expect_ok(auth, token, &tcp_peer);

    /* forged: one signature character changed */
    snprintf(bad, sizeof bad, "%s", token);
    size_t at = strlen(bad) - 6;
    bad[at] = bad[at] == 'A' ? 'B' : 'A';
    expect_refused(auth, bad, &tcp_peer, "bad signature");
    /* signed by an untrusted key that claims kid k1 */
    mint(bad, untrusted, (mint_opts){.caps = SRV_CAP_ALL}, NULL);
    expect_refused(auth, bad, &tcp_peer, "bad signature");
    /* unknown kid */
    bft_secret *k3 = NULL;
    assert_int_equal(bft_keygen(&k3, "k3"), BF_OK);
    mint(bad, k3, (mint_opts){.caps = SRV_CAP_ALL}, NULL);
    expect_refused(auth, bad, &tcp_peer, "unknown key");
    bft_secret_free(k3);
    /* time: beyond the 30 s skew fails, within it passes */
    mint(bad, k1, (mint_opts){.caps = SRV_CAP_ALL, .nbf = -3600, .exp = -31}, NULL);
    expect_refused(auth, bad, &tcp_peer, "expired");
    mint(bad, k1, (mint_opts){.caps = SRV_CAP_ALL, .nbf = -3600, .exp = -20}, NULL);
    expect_ok(auth, bad, &tcp_peer);
    mint(bad, k1, (mint_opts){.caps = SRV_CAP_ALL, .nbf = 60}, NULL);
    expect_refused(auth, bad, &tcp_peer, "not yet valid");
    mint(bad, k1, (mint_opts){.caps = SRV_CAP_ALL, .nbf = 20}, NULL);
    expect_ok(auth, bad, &tcp_peer);
    /* audience */
    mint(bad, k1, (mint_opts){.caps = SRV_CAP_ALL, .audience = "relay-staging"}, NULL);
    expect_refused(auth, bad, &tcp_peer, "wrong audience");
    /* malformed: truncated, junk, wrong prefix, oversized */
    snprintf(bad, sizeof bad, "%.*s", (int)strlen(token) - 1, token);
    expect_refused(auth, bad, &tcp_peer, "malformed");
    snprintf(bad, sizeof bad, "%s!", token);
    expect_refused(auth, bad, &tcp_peer, "malformed");
    snprintf(bad, sizeof bad, "bbt0%s", token + 4);
    expect_refused(auth, bad, &tcp_peer, "malformed");
    expect_refused(auth, "not a token", &tcp_peer, "malformed");
    char *huge = malloc(100000);
    assert_non_null(huge);
    memset(huge, 'A', 99999);
    memcpy(huge, "bbt1.", 5);
    huge[99999] = '\0';
    expect_refused(auth, huge, &tcp_peer, "malformed");
    free(huge);
    /* no token on a network listener */
    expect_refused(auth, NULL, &tcp_peer, "missing token");
    /* a present but empty token is a broken credential, not an absent one */
    expect_refused(auth, "", &tcp_peer, "malformed");
    srv_auth_free(auth);
}

static void test_roles_grant_nothing(void **state)
{
    srv_auth *auth = auth_new(false, 0);
    char token[BFT_TOKEN_MAX + 1];
    mint(token, k1,
         (mint_opts){.roles = BFT_ROLE_COMMUNITY_OWNER | BFT_ROLE_CHANNEL_ADMIN | BFT_ROLE_MEMBER |
                              BFT_ROLE_DEPLOYMENT_OPERATOR},
         NULL);
    srv_identity who = expect_ok(auth, token, &tcp_peer);
    assert_int_equal(who.caps, 0);
    assert_int_equal(who.roles, BFT_ROLE_COMMUNITY_OWNER | BFT_ROLE_CHANNEL_ADMIN |
                                    BFT_ROLE_MEMBER | BFT_ROLE_DEPLOYMENT_OPERATOR);
    const uint32_t caps[] = {SRV_CAP_READ, SRV_CAP_CONTROL, SRV_CAP_VALIDATE, SRV_CAP_READINESS,
                             SRV_CAP_ALL};
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++)
        assert_int_equal(srv_auth_authorize(&who, caps[i]), BF_ERR_PERMISSION_DENIED);
    /* each community role on its own, too */
    const uint32_t roles[] = {BFT_ROLE_COMMUNITY_OWNER, BFT_ROLE_CHANNEL_ADMIN, BFT_ROLE_MEMBER};
    for (size_t r = 0; r < 3; r++) {
        mint(token, k1, (mint_opts){.roles = roles[r]}, NULL);
        who = expect_ok(auth, token, &tcp_peer);
        for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++)
            assert_int_equal(srv_auth_authorize(&who, caps[i]), BF_ERR_PERMISSION_DENIED);
    }
    srv_auth_free(auth);
}

static void test_rotation(void **state)
{
    srv_auth *auth = auth_new(false, 0);
    char t1[BFT_TOKEN_MAX + 1], t2[BFT_TOKEN_MAX + 1];
    mint(t1, k1, (mint_opts){.caps = SRV_CAP_READ}, NULL);
    mint(t2, k2, (mint_opts){.caps = SRV_CAP_READ}, NULL);
    expect_ok(auth, t1, &tcp_peer);
    expect_ok(auth, t2, &tcp_peer); /* both cached now */

    /* retire k1 */
    write_keys(k2, NULL);
    char diag[256] = "";
    assert_int_equal(srv_auth_reload(auth, diag, sizeof diag), BF_OK);
    expect_refused(auth, t1, &tcp_peer, "unknown key");
    expect_ok(auth, t2, &tcp_peer);

    /* a broken file keeps the previous set */
    write_file(keys_path, "k1 not-a-key\n");
    assert_int_not_equal(srv_auth_reload(auth, diag, sizeof diag), BF_OK);
    assert_non_null(strstr(diag, "line 1"));
    expect_ok(auth, t2, &tcp_peer);
    expect_refused(auth, t1, &tcp_peer, "unknown key");
    /* so does a missing one */
    assert_int_equal(remove(keys_path), 0);
    assert_int_equal(srv_auth_reload(auth, diag, sizeof diag), BF_ERR_IO);
    expect_ok(auth, t2, &tcp_peer);

    /* k1 back */
    write_keys(k1, k2);
    assert_int_equal(srv_auth_reload(auth, diag, sizeof diag), BF_OK);
    expect_ok(auth, t1, &tcp_peer);
    srv_auth_free(auth);
}

static void test_revocation(void **state)
{
    srv_auth *auth = auth_new(false, 0);
    char t1[BFT_TOKEN_MAX + 1], t2[BFT_TOKEN_MAX + 1], hex[33], line[64];
    uint8_t id1[16];
    mint(t1, k1, (mint_opts){.caps = SRV_CAP_ALL}, id1);
    mint(t2, k1, (mint_opts){.caps = SRV_CAP_ALL}, NULL);
    expect_ok(auth, t1, &tcp_peer);

    bft_token_id_hex(hex, id1);
    for (char *p = hex; *p; p++) /* upper case is accepted too */
        *p = (char)(*p >= 'a' && *p <= 'f' ? *p - 32 : *p);
    snprintf(line, sizeof line, "  %s\n", hex);
    append_file(revoked_path, line);
    expect_ok(auth, t1, &tcp_peer); /* not applied until reload */
    char diag[256] = "";
    assert_int_equal(srv_auth_reload(auth, diag, sizeof diag), BF_OK);
    expect_refused(auth, t1, &tcp_peer, "revoked");
    expect_ok(auth, t2, &tcp_peer);

    /* a bad revocation file keeps the previous revocations */
    append_file(revoked_path, "xyz\n");
    assert_int_equal(srv_auth_reload(auth, diag, sizeof diag), BF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(diag, "line 3"));
    expect_refused(auth, t1, &tcp_peer, "revoked");
    srv_auth_free(auth);
}

static void test_cache(void **state)
{
    srv_auth *auth = auth_new(false, 0);
    char token[BFT_TOKEN_MAX + 1], hex[33];
    uint8_t id[16];
    mint(token, k1, (mint_opts){.caps = SRV_CAP_READ, .exp = 600}, id);

    /* second verification of the same token does not run Ed25519 */
    uint64_t before = bft_signature_checks();
    expect_ok(auth, token, &tcp_peer);
    assert_int_equal(bft_signature_checks(), before + 1);
    expect_ok(auth, token, &tcp_peer);
    expect_ok(auth, token, &tcp_peer);
    assert_int_equal(bft_signature_checks(), before + 1);

    /* expiry is still checked on a hit */
    fake_now = bft_now() + 600 + 30;
    bft_set_clock_for_testing(fake_clock);
    before = bft_signature_checks();
    expect_refused(auth, token, &tcp_peer, "expired");
    assert_int_equal(bft_signature_checks(), before); /* it was a hit */
    bft_set_clock_for_testing(NULL);
    expect_ok(auth, token, &tcp_peer);

    /* a revoked token is refused even when it is served from the cache */
    bft_token_id_hex(hex, id);
    append_file(revoked_path, hex);
    char diag[256] = "";
    assert_int_equal(srv_auth_reload(auth, diag, sizeof diag), BF_OK);
    expect_refused(auth, token, &tcp_peer, "revoked"); /* re-verified after reload, cached */
    before = bft_signature_checks();
    expect_refused(auth, token, &tcp_peer, "revoked");
    assert_int_equal(bft_signature_checks(), before); /* served from the cache, still refused */

    /* a forged token is never cached: each attempt is verified */
    char bad[BFT_TOKEN_MAX + 1];
    mint(bad, untrusted, (mint_opts){.caps = SRV_CAP_ALL}, NULL);
    before = bft_signature_checks();
    expect_refused(auth, bad, &tcp_peer, "bad signature");
    expect_refused(auth, bad, &tcp_peer, "bad signature");
    assert_int_equal(bft_signature_checks(), before + 2);
    srv_auth_free(auth);
}

static void test_cache_bound(void **state)
{
    srv_auth *auth = auth_new(false, 0);
    enum { N = 1025 }; /* one more than the cache holds */
    char(*tokens)[BFT_TOKEN_MAX + 1] = calloc(N, sizeof *tokens);
    assert_non_null(tokens);
    for (int i = 0; i < N; i++) {
        mint(tokens[i], k1, (mint_opts){.caps = SRV_CAP_READ}, NULL);
        expect_ok(auth, tokens[i], &tcp_peer);
    }
    uint64_t before = bft_signature_checks();
    expect_ok(auth, tokens[N - 1], &tcp_peer); /* newest: cached */
    expect_ok(auth, tokens[1], &tcp_peer);     /* oldest survivor: cached */
    assert_int_equal(bft_signature_checks(), before);
    expect_ok(auth, tokens[0], &tcp_peer); /* the oldest was evicted */
    assert_int_equal(bft_signature_checks(), before + 1);
    free(tokens);
    srv_auth_free(auth);
}

static void test_ipc_boundary(void **state)
{
    const srv_peer ipc_uid = {.listener = "ipc", .has_uid = true, .uid = 1000};
    const srv_peer ipc_nouid = {.listener = "ipc"};
    const srv_peer tls_peer = {.listener = "tls"};

    srv_auth *auth = auth_new(true, 0);
    srv_identity who = expect_ok(auth, NULL, &ipc_uid);
    assert_true(who.boundary);
    assert_string_equal(who.actor, ""); /* no invented actor */
    assert_string_equal(who.authority, "ipc uid=1000");
    assert_int_equal(who.caps, SRV_CAP_ALL);
    assert_string_equal(who.token_id, "");
    assert_int_equal(who.expires_at, 0);
    assert_int_equal(srv_auth_authorize(&who, SRV_CAP_CONTROL), BF_OK);
    who = expect_ok(auth, NULL, &ipc_nouid);
    assert_string_equal(who.authority, "ipc uid=unknown");
    /* an empty token is presented: malformed, never boundary authority */
    expect_refused(auth, "", &ipc_uid, "malformed");
    expect_refused(auth, "", &ipc_nouid, "malformed");
    /* not on network listeners */
    expect_refused(auth, NULL, &tcp_peer, "missing token");
    expect_refused(auth, NULL, &tls_peer, "missing token");
    expect_refused(auth, NULL, NULL, "missing token");
    /* a token on ipc is verified like anywhere else: bad ones are not downgraded */
    char token[BFT_TOKEN_MAX + 1];
    mint(token, untrusted, (mint_opts){.caps = SRV_CAP_ALL}, NULL);
    expect_refused(auth, token, &ipc_uid, "bad signature");
    mint(token, k1, (mint_opts){.caps = SRV_CAP_READ}, NULL);
    who = expect_ok(auth, token, &ipc_uid);
    assert_false(who.boundary);
    assert_string_equal(who.authority, "token kid=k1");
    assert_int_equal(who.caps, SRV_CAP_READ);
    srv_auth_free(auth);

    /* restricted boundary capabilities */
    auth = auth_new(true, SRV_CAP_READ | SRV_CAP_READINESS);
    who = expect_ok(auth, NULL, &ipc_uid);
    assert_int_equal(who.caps, SRV_CAP_READ | SRV_CAP_READINESS);
    assert_int_equal(srv_auth_authorize(&who, SRV_CAP_CONTROL), BF_ERR_PERMISSION_DENIED);
    srv_auth_free(auth);

    /* boundary off: ipc needs a token like everyone else */
    auth = auth_new(false, 0);
    expect_refused(auth, NULL, &ipc_uid, "missing token");
    srv_auth_free(auth);
}

static void test_config(void **state)
{
    srv_auth *auth = NULL;
    char diag[256] = "";
    srv_auth_config cfg = {.audience = AUD, .trusted_keys_file = keys_path};
    assert_int_equal(srv_auth_new(&auth, &cfg, diag, sizeof diag), BF_OK);
    srv_auth_free(auth);
    srv_auth_free(NULL);

    cfg.audience = "";
    assert_int_equal(srv_auth_new(&auth, &cfg, diag, sizeof diag), BF_ERR_INVALID_ARGUMENT);
    cfg.audience = AUD;
    cfg.clock_skew_s = -1;
    assert_int_equal(srv_auth_new(&auth, &cfg, diag, sizeof diag), BF_ERR_INVALID_ARGUMENT);
    cfg.clock_skew_s = 0;
    cfg.ipc_boundary_caps = 1u << 30;
    assert_int_equal(srv_auth_new(&auth, &cfg, diag, sizeof diag), BF_ERR_INVALID_ARGUMENT);
    cfg.ipc_boundary_caps = 0;
    char missing[160];
    snprintf(missing, sizeof missing, "%s/none", dir);
    cfg.trusted_keys_file = missing;
    assert_int_equal(srv_auth_new(&auth, &cfg, diag, sizeof diag), BF_ERR_IO);
    cfg.trusted_keys_file = keys_path;
    cfg.revoked_file = missing;
    assert_int_equal(srv_auth_new(&auth, &cfg, diag, sizeof diag), BF_ERR_IO);
    cfg.revoked_file = NULL;
    cfg.trusted_keys_file = NULL; /* nothing could ever authenticate */
    assert_int_equal(srv_auth_new(&auth, &cfg, diag, sizeof diag), BF_ERR_INVALID_ARGUMENT);
    cfg.ipc_boundary = true; /* boundary only: fine, tokens all fail as unknown keys */
    assert_int_equal(srv_auth_new(&auth, &cfg, diag, sizeof diag), BF_OK);
    char token[BFT_TOKEN_MAX + 1];
    mint(token, k1, (mint_opts){.caps = SRV_CAP_READ}, NULL);
    expect_refused(auth, token, &tcp_peer, "unknown key");
    srv_auth_free(auth);
}

/* Whoever may write the trusted keys or the revocations decides who is trusted: such a file
 * is refused when group or others may write it, at load and at reload (the previous sets stay
 * in force then). */
static void test_file_modes(void **state)
{
    (void)state;
    static const mode_t bad[] = {0664, 0646, 0666, 0620};
    char diag[256] = "";
    srv_auth_config cfg = {.audience = AUD,
                           .trusted_keys_file = keys_path,
                           .revoked_file = revoked_path,
                           .clock_skew_s = 30};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (int which = 0; which < 2; which++) {
            const char *victim = which == 0 ? keys_path : revoked_path;
            assert_int_equal(chmod(victim, bad[i]), 0);
            srv_auth *auth = NULL;
            assert_int_equal(srv_auth_new(&auth, &cfg, diag, sizeof diag),
                             BF_ERR_PERMISSION_DENIED);
            assert_null(auth);
            assert_non_null(strstr(diag, victim));
            assert_non_null(strstr(diag, "is writable by group or others"));
            assert_int_equal(chmod(victim, 0644), 0);
        }
    }
    /* owner-only and read-only modes are fine */
    assert_int_equal(chmod(keys_path, 0400), 0);
    assert_int_equal(chmod(revoked_path, 0600), 0);
    srv_auth *auth = auth_new(false, 0);
    char t1[BFT_TOKEN_MAX + 1], t2[BFT_TOKEN_MAX + 1], hex[33], line[64];
    uint8_t id2[16];
    mint(t1, k1, (mint_opts){.caps = SRV_CAP_READ}, NULL);
    mint(t2, k2, (mint_opts){.caps = SRV_CAP_READ}, id2);
    expect_ok(auth, t1, &tcp_peer);

    /* a reload of a writable keys file (that would retire k1) changes nothing */
    assert_int_equal(chmod(keys_path, 0644), 0);
    write_keys(k2, NULL);
    assert_int_equal(chmod(keys_path, 0664), 0);
    assert_int_equal(srv_auth_reload(auth, diag, sizeof diag), BF_ERR_PERMISSION_DENIED);
    assert_non_null(strstr(diag, "trusted keys"));
    expect_ok(auth, t1, &tcp_peer);
    /* nor does one of writable revocations (that would revoke t2) */
    assert_int_equal(chmod(keys_path, 0644), 0);
    write_keys(k1, k2);
    bft_token_id_hex(hex, id2);
    snprintf(line, sizeof line, "%s\n", hex);
    append_file(revoked_path, line);
    assert_int_equal(chmod(revoked_path, 0606), 0);
    assert_int_equal(srv_auth_reload(auth, diag, sizeof diag), BF_ERR_PERMISSION_DENIED);
    assert_non_null(strstr(diag, "revocations"));
    expect_ok(auth, t2, &tcp_peer);
    /* once fixed, the reload applies */
    assert_int_equal(chmod(revoked_path, 0644), 0);
    assert_int_equal(srv_auth_reload(auth, diag, sizeof diag), BF_OK);
    expect_refused(auth, t2, &tcp_peer, "revoked");
    srv_auth_free(auth);
}

/* ---- concurrency: authentication during reloads ----------------------------------------- */

typedef struct race_arg {
    srv_auth *auth;
    const char *token;
    atomic_bool *stop;
    int failures;
    long rounds;
} race_arg;

static void *race_reader(void *p)
{
    race_arg *a = p;
    while (!atomic_load(a->stop) || a->rounds < 1000) {
        srv_identity who;
        char diag[64];
        if (srv_auth_authenticate(a->auth, a->token, &tcp_peer, &who, diag, sizeof diag) != BF_OK ||
            strcmp(who.authority, "token kid=k2") != 0)
            a->failures++;
        a->rounds++;
    }
    return NULL;
}

static void test_concurrent_reload(void **state)
{
    srv_auth *auth = auth_new(false, 0);
    char tokens[4][BFT_TOKEN_MAX + 1];
    for (int i = 0; i < 4; i++)
        mint(tokens[i], k2, (mint_opts){.caps = SRV_CAP_READ}, NULL);
    atomic_bool stop = false;
    race_arg args[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (race_arg){.auth = auth, .token = tokens[i], .stop = &stop};
        assert_int_equal(pthread_create(&th[i], NULL, race_reader, &args[i]), 0);
    }
    char diag[256];
    for (int r = 0; r < 200; r++)
        assert_int_equal(srv_auth_reload(auth, diag, sizeof diag), BF_OK);
    atomic_store(&stop, true);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(args[i].failures, 0);
    }
    srv_auth_free(auth);
}

/* WhoAmI through the dispatcher (no database: it reads only the identity). A token whose
 * signed expiry is far in the future reports a saturated expiry, not a wrapped one.
 * Guard: the saturation in admin_who_am_i (expires_at * 1000000 overflowed int64). */
static void test_whoami_far_expiry(void **state)
{
    (void)state;
    srv_auth *auth = auth_new(false, 0);
    bft_claims c;
    memset(&c, 0, sizeof c);
    bft_token_id_new(c.token_id);
    snprintf(c.actor, sizeof c.actor, "alice@ops");
    snprintf(c.audience, sizeof c.audience, AUD);
    c.caps = SRV_CAP_READ;
    c.expires_at = INT64_MAX - 1;
    char token[BFT_TOKEN_MAX + 1];
    assert_int_equal(bft_mint(token, sizeof token, &c, k1), BF_OK);

    srv_context ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.auth = auth;
    srv_session session = {.ctx = &ctx};
    srv_dispatcher *disp = NULL;
    assert_int_equal(srv_dispatcher_new(&disp, &ctx), BF_OK);
    assert_int_equal(srv_dispatcher_add(disp, srv_admin_service(), srv_admin_policies()), BF_OK);
    Buzz__Backfill__V1__RequestEnvelope env = BUZZ__BACKFILL__V1__REQUEST_ENVELOPE__INIT;
    env.method = "buzz.backfill.v1.Admin.WhoAmI";
    env.token = token;
    env.has_body = true; /* an empty WhoAmIRequest */
    uint8_t in[BFT_TOKEN_MAX + 128];
    assert_true(buzz__backfill__v1__request_envelope__get_packed_size(&env) <= sizeof in);
    size_t in_len = buzz__backfill__v1__request_envelope__pack(&env, in);
    uint8_t *out = NULL;
    size_t out_len = 0;
    assert_int_equal(
        srv_dispatch(disp, &session, &tcp_peer, in, in_len, srv_now_us(), &out, &out_len), BF_OK);
    Buzz__Backfill__V1__ResponseEnvelope *resp =
        buzz__backfill__v1__response_envelope__unpack(NULL, out_len, out);
    free(out);
    assert_non_null(resp);
    assert_int_equal(resp->status->code, BUZZ__BACKFILL__V1__STATUS_CODE__OK);
    assert_true(resp->has_body);
    Buzz__Backfill__V1__WhoAmIResponse *who =
        buzz__backfill__v1__who_am_iresponse__unpack(NULL, resp->body.len, resp->body.data);
    assert_non_null(who);
    assert_string_equal(who->actor, "alice@ops");
    assert_true(who->has_expires_at_us);
    assert_true(who->expires_at_us == INT64_MAX);
    buzz__backfill__v1__who_am_iresponse__free_unpacked(who, NULL);
    buzz__backfill__v1__response_envelope__free_unpacked(resp, NULL);
    srv_dispatcher_free(disp);
    srv_auth_free(auth);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_token_identity, setup),
        cmocka_unit_test_setup(test_refusals, setup),
        cmocka_unit_test_setup(test_roles_grant_nothing, setup),
        cmocka_unit_test_setup(test_rotation, setup),
        cmocka_unit_test_setup(test_revocation, setup),
        cmocka_unit_test_setup(test_cache, setup),
        cmocka_unit_test_setup(test_cache_bound, setup),
        cmocka_unit_test_setup(test_ipc_boundary, setup),
        cmocka_unit_test_setup(test_config, setup),
        cmocka_unit_test_setup(test_concurrent_reload, setup),
        cmocka_unit_test_setup(test_whoami_far_expiry, setup),
        cmocka_unit_test_setup(test_file_modes, setup),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
