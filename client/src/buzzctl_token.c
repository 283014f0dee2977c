/*
 * buzzctl_token.c - `buzzctl token keygen|mint|inspect`: operator tooling for capability
 * tokens (buzz/token.h). Self-contained: buzzctl's main hands over with argv[0] == "token".
 *
 * Nothing here prints secret key material. Tokens are printed only by `mint` (stdout) and are
 * never echoed by `inspect`; `inspect -` reads the token from stdin so it stays out of shell
 * history and process listings.
 *
 * Exit codes: 0 success, 1 failure (files, keys), 2 usage error, 3 token refused (malformed
 * or failed verification).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "buzz/token.h"

#define TOKEN_EXIT_OK      0
#define TOKEN_EXIT_FAILURE 1
#define TOKEN_EXIT_USAGE   2
#define TOKEN_EXIT_REFUSED 3
#define TOKEN_TTL_MAX      (366 * 86400) /* a year and a day */

int buzzctl_token_main(int argc, char **argv);

static void token_usage(FILE *f)
{
    fputs("usage: buzzctl token <command> [options]\n"
          "\n"
          "commands:\n"
          "  keygen   create an Ed25519 signing key pair\n"
          "  mint     mint a capability token\n"
          "  inspect  show a token's claims and optionally verify it\n"
          "\n"
          "Run 'buzzctl token <command> --help' for the options of one command.\n",
          f);
}

static void token_keygen_usage(FILE *f)
{
    fputs("usage: buzzctl token keygen --kid KID --secret-out FILE --public-out FILE\n"
          "\n"
          "Create an Ed25519 key pair named KID ([A-Za-z0-9._:-], at most 64 bytes).\n"
          "  --kid KID          key id, carried in every token the key signs\n"
          "  --secret-out FILE  new secret key file, created with mode 0600 (never overwritten)\n"
          "  --public-out FILE  new public key file ('-' for stdout); append its line to the\n"
          "                     server's trusted keys file\n"
          "  -h, --help         this help\n",
          f);
}

static void token_mint_usage(FILE *f)
{
    fputs("usage: buzzctl token mint --secret FILE --actor ACTOR --cap LIST --audience AUD\n"
          "                          --ttl DURATION [--role LIST] [--not-before TIME]\n"
          "                          [--token-id-out FILE]\n"
          "\n"
          "Print a new capability token on stdout.\n"
          "  --secret FILE        secret key file (from keygen)\n"
          "  --actor ACTOR        who the token speaks for, e.g. alice@ops\n"
          "  --cap LIST           capabilities: read,control,validate,readiness\n"
          "  --role LIST          informational roles (grant nothing): deployment_operator,\n"
          "                       community_owner,channel_admin,member\n"
          "  --audience AUD       the deployment's audience, e.g. relay-prod\n"
          "  --ttl DURATION       lifetime after not-before: 90s, 15m, 1h, 7d, 1h30m\n"
          "                       (at most 366d)\n"
          "  --not-before TIME    Unix seconds, +DURATION from now, or YYYY-MM-DDTHH:MM:SSZ;\n"
          "                       default now\n"
          "  --token-id-out FILE  write the token id (hex, for revocation) to FILE ('-' for\n"
          "                       stderr)\n"
          "  -h, --help           this help\n",
          f);
}

static void token_inspect_usage(FILE *f)
{
    fputs("usage: buzzctl token inspect TOKEN|- [--public FILE [--audience AUD] [--skew S]]\n"
          "\n"
          "Print a token's claims ('-' reads the token from stdin). With --public, also\n"
          "verify the signature against that trusted keys file, its validity period (with S\n"
          "seconds of clock skew, default 30) and, with --audience, its audience.\n"
          "Exit status 3 when the token is malformed or fails verification.\n"
          "  --public FILE    trusted public keys file\n"
          "  --audience AUD   required audience\n"
          "  --skew S         tolerated clock skew in seconds\n"
          "  -h, --help       this help\n",
          f);
}

/* "90s", "15m", "1h30m", "7d", "3600" -> seconds. */
static bool token_parse_duration(const char *s, int64_t *out)
{
    int64_t total = 0;
    if (s == NULL || *s == '\0')
        return false;
    while (*s != '\0') {
        if (*s < '0' || *s > '9')
            return false;
        char *end = NULL;
        errno = 0;
        long long n = strtoll(s, &end, 10);
        if (errno != 0 || n < 0 || n > TOKEN_TTL_MAX)
            return false;
        int64_t unit = 1;
        switch (*end) {
        case 's':
            unit = 1;
            end++;
            break;
        case 'm':
            unit = 60;
            end++;
            break;
        case 'h':
            unit = 3600;
            end++;
            break;
        case 'd':
            unit = 86400;
            end++;
            break;
        case '\0':
            break;
        default:
            return false;
        }
        if (n > (int64_t)TOKEN_TTL_MAX / unit)
            return false;
        total += n * unit;
        if (total > TOKEN_TTL_MAX)
            return false;
        s = end;
    }
    *out = total;
    return true;
}

/* Unix seconds, "+DURATION" or "YYYY-MM-DDTHH:MM:SSZ" -> Unix seconds. */
static bool token_parse_time(const char *s, int64_t now, int64_t *out)
{
    if (s[0] == '+') {
        int64_t d = 0;
        if (!token_parse_duration(s + 1, &d))
            return false;
        *out = now + d;
        return true;
    }
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *end = strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (end != NULL && *end == '\0') {
        time_t t = timegm(&tm);
        if (t <= 0)
            return false;
        *out = (int64_t)t;
        return true;
    }
    char *e = NULL;
    errno = 0;
    long long v = strtoll(s, &e, 10);
    if (errno != 0 || e == s || *e != '\0' || v <= 0)
        return false;
    *out = v;
    return true;
}

static void token_format_time(char *buf, size_t len, int64_t t)
{
    time_t tt = (time_t)t;
    struct tm tm;
    if (gmtime_r(&tt, &tm) == NULL || strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, len, "?");
}

/* Reset getopt for a sub-argument vector (glibc: optind 0 re-initialises). */
static void token_getopt_reset(void)
{
    optind = 0;
    opterr = 1;
}

/* ---- keygen ----------------------------------------------------------------------------- */

static int token_keygen(int argc, char **argv)
{
    static const struct option opts[] = {
        {"kid", required_argument, NULL, 'k'},
        {"secret-out", required_argument, NULL, 's'},
        {"public-out", required_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *kid = NULL, *secret_out = NULL, *public_out = NULL;
    int c;
    token_getopt_reset();
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'k':
            kid = optarg;
            break;
        case 's':
            secret_out = optarg;
            break;
        case 'p':
            public_out = optarg;
            break;
        case 'h':
            token_keygen_usage(stdout);
            return TOKEN_EXIT_OK;
        default:
            token_keygen_usage(stderr);
            return TOKEN_EXIT_USAGE;
        }
    }
    if (optind != argc || kid == NULL || secret_out == NULL || public_out == NULL) {
        token_keygen_usage(stderr);
        return TOKEN_EXIT_USAGE;
    }
    if (!bft_kid_valid(kid)) {
        fprintf(stderr, "buzzctl token keygen: --kid must be 1..%d bytes of [A-Za-z0-9._:-]\n",
                BFT_KID_MAX - 1);
        return TOKEN_EXIT_USAGE;
    }
    if (strcmp(secret_out, "-") == 0) {
        fputs("buzzctl token keygen: the secret key is only written to a file\n", stderr);
        return TOKEN_EXIT_USAGE;
    }
    bft_secret *secret = NULL;
    char diag[256] = "";
    bf_err err = bft_keygen(&secret, kid);
    if (err != BF_OK) {
        fprintf(stderr, "buzzctl token keygen: %s\n", bf_err_str(err));
        return TOKEN_EXIT_FAILURE;
    }
    err = bft_secret_save(secret, secret_out, diag, sizeof diag);
    if (err == BF_OK) {
        if (strcmp(public_out, "-") == 0) {
            char line[160];
            err = bft_public_line(line, sizeof line, secret);
            if (err == BF_OK && (fputs(line, stdout) == EOF || fflush(stdout) != 0)) {
                err = BF_ERR_IO;
                snprintf(diag, sizeof diag, "could not write the public key to stdout");
            }
        } else {
            err = bft_public_save(secret, public_out, diag, sizeof diag);
        }
        if (err != BF_OK)
            unlink(secret_out); /* no secret without its public half */
    }
    bft_secret_free(secret);
    if (err != BF_OK) {
        fprintf(stderr, "buzzctl token keygen: %s\n", diag[0] ? diag : bf_err_str(err));
        return TOKEN_EXIT_FAILURE;
    }
    fprintf(stderr, "key %s: secret key in %s (mode 0600)%s%s\n", kid, secret_out,
            strcmp(public_out, "-") == 0 ? "" : ", public key in ",
            strcmp(public_out, "-") == 0 ? "" : public_out);
    return TOKEN_EXIT_OK;
}

/* ---- mint ------------------------------------------------------------------------------- */

static int token_mint_fail(const char *what)
{
    fprintf(stderr, "buzzctl token mint: %s\n", what);
    return TOKEN_EXIT_USAGE;
}

static int token_mint(int argc, char **argv)
{
    static const struct option opts[] = {
        {"secret", required_argument, NULL, 's'},
        {"actor", required_argument, NULL, 'a'},
        {"cap", required_argument, NULL, 'c'},
        {"role", required_argument, NULL, 'r'},
        {"audience", required_argument, NULL, 'u'},
        {"ttl", required_argument, NULL, 't'},
        {"not-before", required_argument, NULL, 'n'},
        {"token-id-out", required_argument, NULL, 'i'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *secret_file = NULL, *ttl = NULL, *nbf = NULL, *id_out = NULL;
    bft_claims claims;
    memset(&claims, 0, sizeof claims);
    bool have_caps = false;
    int c;
    token_getopt_reset();
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        uint32_t bits = 0;
        switch (c) {
        case 's':
            secret_file = optarg;
            break;
        case 'a':
            if (!bft_name_valid(optarg))
                return token_mint_fail("--actor must be 1..127 printable bytes");
            snprintf(claims.actor, sizeof claims.actor, "%s", optarg);
            break;
        case 'c':
            if (bft_caps_parse(&bits, optarg) != BF_OK)
                return token_mint_fail("--cap takes read,control,validate,readiness");
            claims.caps |= bits;
            have_caps = true;
            break;
        case 'r':
            if (bft_roles_parse(&bits, optarg) != BF_OK)
                return token_mint_fail("--role takes deployment_operator,community_owner,"
                                       "channel_admin,member");
            claims.roles |= bits;
            break;
        case 'u':
            if (!bft_name_valid(optarg))
                return token_mint_fail("--audience must be 1..127 printable bytes");
            snprintf(claims.audience, sizeof claims.audience, "%s", optarg);
            break;
        case 't':
            ttl = optarg;
            break;
        case 'n':
            nbf = optarg;
            break;
        case 'i':
            id_out = optarg;
            break;
        case 'h':
            token_mint_usage(stdout);
            return TOKEN_EXIT_OK;
        default:
            token_mint_usage(stderr);
            return TOKEN_EXIT_USAGE;
        }
    }
    if (optind != argc || secret_file == NULL || claims.actor[0] == '\0' || !have_caps ||
        claims.audience[0] == '\0' || ttl == NULL) {
        token_mint_usage(stderr);
        return TOKEN_EXIT_USAGE;
    }
    int64_t now = bft_now(), lifetime = 0;
    if (!token_parse_duration(ttl, &lifetime) || lifetime <= 0)
        return token_mint_fail("--ttl must be a positive duration of at most 366d");
    claims.not_before = now;
    if (nbf != NULL && !token_parse_time(nbf, now, &claims.not_before))
        return token_mint_fail("--not-before takes Unix seconds, +DURATION or "
                               "YYYY-MM-DDTHH:MM:SSZ");
    claims.expires_at = claims.not_before + lifetime;
    bft_token_id_new(claims.token_id);

    bft_secret *secret = NULL;
    bool insecure = false;
    char diag[256] = "";
    bf_err err = bft_secret_load(&secret, secret_file, &insecure, diag, sizeof diag);
    if (err != BF_OK) {
        fprintf(stderr, "buzzctl token mint: %s\n", diag[0] ? diag : bf_err_str(err));
        return TOKEN_EXIT_FAILURE;
    }
    if (insecure)
        fprintf(stderr,
                "buzzctl token mint: warning: %s is readable by group or others; "
                "chmod 600 it\n",
                secret_file);
    char token[BFT_TOKEN_MAX + 1];
    err = bft_mint(token, sizeof token, &claims, secret);
    bft_secret_free(secret);
    if (err != BF_OK) {
        fprintf(stderr, "buzzctl token mint: could not mint: %s\n", bf_err_str(err));
        return TOKEN_EXIT_FAILURE;
    }
    char hex[BFT_TOKEN_ID_HEX];
    bft_token_id_hex(hex, claims.token_id);
    if (id_out != NULL) {
        FILE *f = strcmp(id_out, "-") == 0 ? stderr : fopen(id_out, "we");
        bool ok = f != NULL && fprintf(f, "%s\n", hex) > 0;
        if (f != NULL && f != stderr)
            ok = fclose(f) == 0 && ok;
        if (!ok) {
            fprintf(stderr, "buzzctl token mint: could not write %s\n", id_out);
            return TOKEN_EXIT_FAILURE;
        }
    }
    if (printf("%s\n", token) < 0 || fflush(stdout) != 0)
        return TOKEN_EXIT_FAILURE;
    return TOKEN_EXIT_OK;
}

/* ---- inspect ---------------------------------------------------------------------------- */

/* The token from argv or stdin ("-"), trailing whitespace removed. */
static bool token_read_arg(const char *arg, char *buf, size_t cap, size_t *len)
{
    size_t n = 0;
    if (strcmp(arg, "-") == 0) {
        n = fread(buf, 1, cap - 1, stdin);
        if (ferror(stdin))
            return false;
    } else {
        n = strnlen(arg, cap);
        if (n >= cap)
            n = cap - 1; /* oversized: parse reports it malformed */
        memcpy(buf, arg, n);
    }
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        n--;
    buf[n] = '\0';
    *len = n;
    return true;
}

static void token_print_claims(const bft_claims *c, int64_t now)
{
    char hex[BFT_TOKEN_ID_HEX], caps[64], roles[96], nbf[32], exp[32];
    bft_token_id_hex(hex, c->token_id);
    bft_caps_format(caps, sizeof caps, c->caps);
    bft_roles_format(roles, sizeof roles, c->roles);
    token_format_time(exp, sizeof exp, c->expires_at);
    printf("token_id:      %s\n", hex);
    printf("actor:         %s\n", c->actor);
    printf("capabilities:  %s\n", caps[0] ? caps : "(none)");
    printf("roles:         %s%s\n", roles[0] ? roles : "(none)",
           roles[0] ? " (informational, grant nothing)" : "");
    printf("audience:      %s\n", c->audience);
    if (c->not_before != 0) {
        token_format_time(nbf, sizeof nbf, c->not_before);
        printf("not_before:    %s (%" PRId64 ")\n", nbf, c->not_before);
    } else {
        printf("not_before:    (absent)\n");
    }
    printf("expires_at:    %s (%" PRId64 ")%s\n", exp, c->expires_at,
           now >= c->expires_at ? " expired" : "");
    printf("key_id:        %s\n", c->key_id);
}

static int token_inspect(int argc, char **argv)
{
    static const struct option opts[] = {
        {"public", required_argument, NULL, 'p'},
        {"audience", required_argument, NULL, 'u'},
        {"skew", required_argument, NULL, 'k'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *public_file = NULL, *audience = NULL;
    int skew = BFT_SKEW_DEFAULT;
    int c;
    token_getopt_reset();
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'p':
            public_file = optarg;
            break;
        case 'u':
            audience = optarg;
            break;
        case 'k': {
            char *end = NULL;
            long v = strtol(optarg, &end, 10);
            if (end == optarg || *end != '\0' || v < 0 || v > 3600) {
                fputs("buzzctl token inspect: --skew takes 0..3600 seconds\n", stderr);
                return TOKEN_EXIT_USAGE;
            }
            skew = (int)v;
            break;
        }
        case 'h':
            token_inspect_usage(stdout);
            return TOKEN_EXIT_OK;
        default:
            token_inspect_usage(stderr);
            return TOKEN_EXIT_USAGE;
        }
    }
    if (optind != argc - 1 || (audience != NULL && public_file == NULL)) {
        token_inspect_usage(stderr);
        return TOKEN_EXIT_USAGE;
    }
    char text[BFT_TOKEN_MAX + 2];
    size_t len = 0;
    if (!token_read_arg(argv[optind], text, sizeof text, &len)) {
        fputs("buzzctl token inspect: could not read the token\n", stderr);
        return TOKEN_EXIT_FAILURE;
    }
    static bft_token parsed; /* 3.5 KiB; one per process */
    bft_reason reason = BFT_REASON_NONE;
    if (bft_parse(&parsed, text, len, &reason) != BF_OK) {
        fprintf(stderr, "buzzctl token inspect: token refused: %s\n", bft_reason_str(reason));
        return TOKEN_EXIT_REFUSED;
    }
    int64_t now = bft_now();
    token_print_claims(&parsed.claims, now);
    if (public_file == NULL) {
        printf("verification:  not verified (no --public given)\n");
        return TOKEN_EXIT_OK;
    }
    bft_keyring *ring = NULL;
    char diag[256] = "";
    bf_err err = bft_keyring_load(&ring, public_file, diag, sizeof diag);
    if (err != BF_OK) {
        fprintf(stderr, "buzzctl token inspect: %s\n", diag[0] ? diag : bf_err_str(err));
        return TOKEN_EXIT_FAILURE;
    }
    bft_claims verified;
    err = bft_verify(&verified, text, len, ring, audience, now, skew, &reason);
    bft_keyring_free(ring);
    if (err != BF_OK) {
        printf("verification:  failed: %s\n", bft_reason_str(reason));
        return TOKEN_EXIT_REFUSED;
    }
    printf("verification:  ok%s\n", audience ? "" : " (audience not checked)");
    return TOKEN_EXIT_OK;
}

int buzzctl_token_main(int argc, char **argv)
{
    if (argc < 2) {
        token_usage(stderr);
        return TOKEN_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        token_usage(stdout);
        return TOKEN_EXIT_OK;
    }
    if (strcmp(cmd, "keygen") == 0)
        return token_keygen(argc - 1, argv + 1);
    if (strcmp(cmd, "mint") == 0)
        return token_mint(argc - 1, argv + 1);
    if (strcmp(cmd, "inspect") == 0)
        return token_inspect(argc - 1, argv + 1);
    fputs("buzzctl token: unknown command\n", stderr);
    token_usage(stderr);
    return TOKEN_EXIT_USAGE;
}
