/*
 * buzzctl.c - the operator CLI of buzz-backfill: main (global options, the server and the
 * credential, dispatch through the command table) and the help texts. The commands live in
 * their command files (see buzzctl.h); what they share is buzzctl_common.c. Usage errors,
 * help and --version never contact a server: the connection is opened by the first call.
 */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "buzz/client.h"
#include "buzzctl.h"
#include "client_conn.h"

#ifndef BUZZ_VERSION
#define BUZZ_VERSION "unknown"
#endif

static void usage(FILE *f)
{
    fputs(
        "usage: buzzctl [options] <command> [arguments]\n"
        "\n"
        "Operate durable backfills through buzz-backfilld's admin API.\n"
        "\n"
        "commands (buzzctl <command> --help shows one with an example):\n"
        "  list [--state STATE] [--limit N] [--wide] [--sample-ms MS] [--ids]\n"
        "       [--watch [--interval DURATION] [--count N]]\n"
        "                                     backfills, ordered by id\n"
        "  get ID                             one backfill in detail\n"
        "  start ID | pause ID | resume ID | retry ID\n"
        "                                     lifecycle controls (idempotent per request id)\n"
        "  validate ID [--progress]           run the definition's read-only validation\n"
        "  audit [ID] [--limit N]             audit trail, newest first\n"
        "  whoami                             the identity the server sees\n"
        "  preflight [ID]...                  the daemon's preflight of its definitions\n"
        "  watch off ID                       remove a backfill's old-writer watch trigger\n"
        "  ready [--wait DURATION]            readiness as the relay sees it\n"
        "  ready --wait-ready --timeout DURATION\n"
        "                                     wait until ready (init containers)\n"
        "  dash [--interval DURATION] [--once] the live dashboard\n"
        "  token keygen|mint|inspect ...      capability tokens (see 'buzzctl token --help')\n"
        "  help [COMMAND]                     this help, or a command's\n"
        "\n"
        "options (before or, for --json, after the command):\n"
        "  -u, --url URL          server: ipc:///path, tcp://host:port, tls+tcp://host:port\n"
        "                         (default $BUZZ_BACKFILL_URL, else the packaged socket\n"
        "                         ipc:///run/buzz-backfill/admin.sock when it exists)\n"
        "  -t, --token TOKEN      capability token (default $BUZZ_BACKFILL_TOKEN); not needed\n"
        "                         on an ipc:// listener with boundary authority\n"
        "      --token-file FILE  read the token from FILE ($BUZZ_BACKFILL_TOKEN_FILE)\n"
        "      --timeout DURATION budget of one call, retries included: 500ms, 30s, 5m, 1m30s\n"
        "                         (default 10s; validate 5m; ready --wait: the wait plus 2s);\n"
        "                         a bare number is the old milliseconds, with a warning\n"
        "      --request-id HEX   32 hex digits: repeat an earlier control or validate request\n"
        "                         (e.g. after a lost response) instead of making a new one\n"
        "      --tls-ca FILE      CA certificate for tls+tcp://\n"
        "      --tls-server-name NAME  name to verify for tls+tcp://\n"
        "      --json             one JSON document per command (protobuf JSON mapping)\n"
        "  -h, --help             this help\n"
        "      --version          the version\n"
        "\n"
        "exit codes: 0 ok, 1 error, 2 usage, 3 conflict (the current state is printed),\n"
        "4 unauthenticated or permission denied, 5 not found, 6 server unavailable or timed out,\n"
        "7 validation failed, 8 not ready, 9 validation did not run (current state).\n",
        f);
}

static const struct {
    const char *name;
    const char *help;
} ctl_helps[] = {
    {"list", "usage: buzzctl list [--state STATE] [--limit N] [--wide] [--sample-ms MS] [--ids]\n"
             "       buzzctl list --watch [--interval DURATION] [--count N] [...]\n"
             "Backfills ordered by id, every page, in one read. STATE: pending, running,\n"
             "paused, blocked, failed, validating, completed. A rate needs two reads: with\n"
             "--sample-ms MS (1..60000) list reads again MS later and shows RATE and ETA\n"
             "(~ an estimate; --json: rowsPerSecond, etaSeconds); otherwise a running one's\n"
             "RATE is unknown. --watch reads every --interval (default 2s), each frame with\n"
             "rates against the one before, --count frames (default: until Ctrl-C).\n"
             "--wide adds GEN, BATCH, THROTTLED, SLOW, VALIDATING (rows a running validation\n"
             "has checked of ~the estimate) and CLAIM. --ids prints only the IDs, one a line.\n"
             "example: buzzctl list --state running --watch\n"},
    {"get", "usage: buzzctl get ID [--sample-ms MS]\n"
            "One backfill: state, progress, rate, ETA (~ estimate), checkpoint, bound, claim,\n"
            "retry, error, a running validation's rows checked so far, last validation, and\n"
            "what to do about a blocked or failed one.\n"
            "example: buzzctl get demo.events.content_len_v1\n"},
    {"start", "usage: buzzctl start ID\nStart a registered backfill (captures its bound).\n"
              "example: buzzctl start demo.events.content_len_v1\n"},
    {"pause", "usage: buzzctl pause ID\nPause a running backfill (its claim is fenced).\n"
              "example: buzzctl pause demo.events.content_len_v1\n"},
    {"resume", "usage: buzzctl resume ID\nResume a paused backfill.\n"
               "example: buzzctl resume demo.events.content_len_v1\n"},
    {"retry", "usage: buzzctl retry ID\nRetry a blocked or failed backfill after fixing the "
              "cause\n(bound and checkpoint are kept).\n"
              "example: buzzctl retry demo.events.content_len_v1\n"},
    {"validate", "usage: buzzctl validate ID [--progress]\n"
                 "Run the definition's read-only validation; the call gets the whole budget\n"
                 "(--timeout, default 5 minutes). On a terminal (or with --progress) the state\n"
                 "and the rows checked so far (of ~the estimate, and how many need repair) are\n"
                 "polled every 2 s and shown on stderr while it runs. Exit 0 success, 7 failure,\n"
                 "9 current-state.\n"
                 "example: buzzctl --timeout 10m validate demo.events.content_len_v1\n"},
    {"audit", "usage: buzzctl audit [ID] [--limit N]\n"
              "The audit trail, newest first, with UTC times; pages until N rows (default 50).\n"
              "example: buzzctl audit demo.events.content_len_v1 --limit 200\n"},
    {"whoami", "usage: buzzctl whoami\nThe identity and capabilities the server sees.\n"
               "example: buzzctl --token-file op.token whoami\n"},
    {"watch", "usage: buzzctl watch off ID\nRemove a backfill's old-writer watch trigger now "
              "(docs/definitions.md, Old writers); what it counted stays in get. Audited; needs "
              "the control capability.\n"
              "example: buzzctl watch off demo.events.pubkey_hex_v1\n"},
    {"preflight",
     "usage: buzzctl preflight [ID]...\n"
     "The running daemon's preflight of the definitions it has registered (every one\n"
     "without IDs), as 'buzz-backfilld preflight' runs it: can each one's batches only\n"
     "be bounded work on this database? One line per definition, 'ok' with the index\n"
     "and plans or 'FAIL' with what is wrong and the fix. Read-only. Exit 0 all\n"
     "passed, 1 one failed, 2 an ID the daemon does not have (default --timeout 60s).\n"
     "example: buzzctl preflight demo.events.content_len_v1\n"},
    {"ready", "usage: buzzctl ready [--wait DURATION]\n"
              "       buzzctl ready --wait-ready --timeout DURATION\n"
              "Readiness as the relay sees it (exit 0 ready, 8 not ready). --wait (0..30 s,\n"
              "or a duration: 500ms, 10s) returns early when something changes. --wait-ready\n"
              "waits until ready or DURATION (90s, 5m, 500ms; a bare number is seconds;\n"
              "default 5m) passes, riding over a server that is not up yet: exit 0 ready,\n"
              "8 still not ready, 6 never reached, 4 refused.\n"
              "example: buzzctl ready --wait-ready --timeout 5m\n"},
    {"dash", "usage: buzzctl dash [--interval DURATION] [--once]\n"
             "The live dashboard: readiness banner, backfills with progress, rate (last 60 s of\n"
             "running time), ETA (~ estimate), claims, retries and errors; Enter for detail.\n"
             "Keys: S start, p pause, r resume, R retry, v validate (each asks y/n), / filter,\n"
             "s sort, ? help, q quit. A failed refresh keeps the last data, marked STALE.\n"
             "--once prints one frame as text (exit 0 when the data was fetched; with a\n"
             "running backfill it reads twice, --interval apart (default 1s), for its rate).\n"
             "--interval is a duration (500ms, 2s, 1m; a bare number is seconds), default 2s.\n"
             "example: buzzctl dash --interval 2s\n"},
    {"token", "usage: buzzctl token keygen|mint|inspect ...\nCapability tokens; see "
              "'buzzctl token --help'.\nexample: buzzctl token inspect --token-file op.token\n"},
    {"help", "usage: buzzctl help [COMMAND]\nexample: buzzctl help list\n"},
};

static const char *main_command_help(const char *name)
{
    for (size_t i = 0; i < sizeof ctl_helps / sizeof ctl_helps[0]; i++)
        if (strcmp(ctl_helps[i].name, name) == 0)
            return ctl_helps[i].help;
    return NULL;
}

/* ---- main -------------------------------------------------------------------------------- */

/* Exactly 2 * BFC_REQUEST_ID_LEN hex digits (either case), nothing else: no sign, no "0x", no
 * spaces (sscanf's %x took all of those). sodium_hex2bin() without an ignore set and without
 * hex_end refuses any other character. out is written only on success. */
static int parse_request_id(const char *hex, uint8_t out[BFC_REQUEST_ID_LEN])
{
    size_t len = strlen(hex);
    if (len != 2 * BFC_REQUEST_ID_LEN)
        return -1;
    uint8_t id[BFC_REQUEST_ID_LEN];
    size_t n = 0;
    if (sodium_hex2bin(id, sizeof id, hex, len, NULL, &n, NULL) != 0 || n != sizeof id)
        return -1;
    memcpy(out, id, sizeof id);
    return 0;
}

/* --json anywhere before "--" (after the command too) sets c->json and is taken out of argv,
 * so every command's own parser never sees it. */
static int take_json(ctl *c, int argc, char **argv)
{
    int k = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            while (i < argc)
                argv[k++] = argv[i++];
            break;
        }
        if (strcmp(argv[i], "--json") == 0)
            c->json = true;
        else
            argv[k++] = argv[i];
    }
    argv[k] = NULL;
    return k;
}

static bool is_help(const char *a)
{
    return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0;
}

static int main_control(ctl *c, int argc, char **argv)
{
    bfc_action action;
    if (bfc_action_parse(&action, argv[0]) != BF_OK)
        return ctl_usage_error(c, ": unknown command '%.40s' (see buzzctl help)", argv[0]);
    return ctl_cmd_control(c, argc, argv, action);
}

/* The command table: each command and the file that owns it (buzzctl.h). */
static const struct {
    const char *name;
    int (*run)(ctl *c, int argc, char **argv);
} main_commands[] = {
    {"list", ctl_cmd_list},         {"get", ctl_cmd_get},     {"start", main_control},
    {"pause", main_control},        {"resume", main_control}, {"retry", main_control},
    {"validate", ctl_cmd_validate}, {"audit", ctl_cmd_audit}, {"whoami", ctl_cmd_whoami},
    {"ready", ctl_cmd_ready},       {"dash", ctl_cmd_dash},   {"preflight", ctl_cmd_preflight},
    {"watch", ctl_cmd_watch},
};

/* The credential when no --token or --token-file was given: BUZZ_BACKFILL_TOKEN, else the
 * first line of the file BUZZ_BACKFILL_TOKEN_FILE names (bfc_conn_env_token: the same rules
 * as the desktop client). 0 or EXIT_USAGE. */
static int main_env_token(ctl *c)
{
    char why[256];
    if (bfc_conn_env_token(&c->token, why, sizeof why) != 0) {
        fprintf(stderr, "buzzctl: %s\n", why);
        return EXIT_USAGE;
    }
    return EXIT_OK;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "token") == 0)
        return buzzctl_token_main(argc - 1, argv + 1);
    static const struct option opts[] = {
        {"url", required_argument, NULL, 'u'},
        {"token", required_argument, NULL, 't'},
        {"token-file", required_argument, NULL, 'T'},
        {"timeout", required_argument, NULL, 'o'},
        {"request-id", required_argument, NULL, 'r'},
        {"tls-ca", required_argument, NULL, 'c'},
        {"tls-server-name", required_argument, NULL, 'n'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {0},
    };
    ctl c = {.url = getenv("BUZZ_BACKFILL_URL")};
    argc = take_json(&c, argc, argv);
    bool token_given = false;
    int o;
    while ((o = getopt_long(argc, argv, "+u:t:h", opts, NULL)) != -1) {
        switch (o) {
        case 'u':
            c.url = optarg;
            break;
        case 't':
            free(c.token);
            token_given = true;
            if (optarg[0] == '\0') {
                fputs("buzzctl: --token is empty: pass a token, or no --token on an ipc:// "
                      "listener with boundary authority\n",
                      stderr);
                return EXIT_USAGE;
            }
            c.token = strdup(optarg);
            break;
        case 'T': {
            free(c.token);
            token_given = true;
            const char *why = "";
            if ((c.token = bfc_conn_read_token_file(optarg, &why)) == NULL) {
                fprintf(stderr, "buzzctl: token file %s: %s\n", optarg, why);
                return EXIT_USAGE;
            }
            break;
        }
        case 'o': {
            int64_t ms = ctl_parse_timeout(NULL, optarg, true);
            if (ms < 1) {
                fputs("buzzctl: --timeout needs a duration (e.g. 30s, 5m, 500ms)\n", stderr);
                free(c.token);
                return EXIT_USAGE;
            }
            c.bo.timeout_ms = (int)ms;
            break;
        }
        case 'r':
            if (parse_request_id(optarg, c.request_id) != 0) {
                fputs("buzzctl: --request-id needs exactly 32 hex digits (0-9, a-f)\n", stderr);
                free(c.token);
                return EXIT_USAGE;
            }
            c.has_request_id = true;
            break;
        case 'c':
            c.bo.tls_ca_file = optarg;
            break;
        case 'n':
            c.bo.tls_server_name = optarg;
            break;
        case 'j':
            c.json = true;
            break;
        case 'h':
            usage(stdout);
            free(c.token);
            return EXIT_OK;
        case 'V':
            printf("buzzctl %s\n", BUZZ_VERSION);
            free(c.token);
            return EXIT_OK;
        default:
            usage(stderr);
            free(c.token);
            return EXIT_USAGE;
        }
    }
    if (!token_given && main_env_token(&c) != EXIT_OK)
        return EXIT_USAGE;
    if (optind >= argc) {
        usage(stderr);
        free(c.token);
        return EXIT_USAGE;
    }
    char **sub = argv + optind;
    int subc = argc - optind;
    int rc = -1;
    /* help, unknown commands and --help: no server involved */
    if (strcmp(sub[0], "help") == 0) {
        const char *h = subc > 1 ? main_command_help(sub[1]) : NULL;
        if (subc > 1 && h == NULL) {
            rc = ctl_usage_error(NULL, "help: unknown command '%.40s' (see buzzctl help)", sub[1]);
        } else {
            fputs(h ? h : "", stdout);
            if (h == NULL)
                usage(stdout);
            rc = EXIT_OK;
        }
    } else if (main_command_help(sub[0]) == NULL) {
        rc = ctl_usage_error(&c, ": unknown command '%.40s' (see buzzctl help)", sub[0]);
    } else {
        for (int i = 1; i < subc && rc < 0; i++) {
            if (strcmp(sub[i], "--") == 0)
                break;
            if (is_help(sub[i])) {
                fputs(main_command_help(sub[0]), stdout);
                rc = EXIT_OK;
            }
        }
    }
    /* the server: --url, BUZZ_BACKFILL_URL, or the packaged socket when it exists */
    char default_url[BFC_CONN_URL_MAX];
    if (rc < 0 && (c.url == NULL || c.url[0] == '\0')) {
        if (bfc_conn_default_url(default_url, sizeof default_url))
            c.url = default_url;
        else
            rc = ctl_usage_error(&c,
                                 "%.20s: no server: pass --url or set BUZZ_BACKFILL_URL (no "
                                 "daemon socket at %.120s)",
                                 sub[0], bfc_conn_default_socket());
    }
    if (rc >= 0) {
        free(c.token);
        return rc;
    }
    c.bo.token = c.token;
    if (strcmp(sub[0], "ready") == 0)
        c.bo.retries = -1; /* a readiness wait is one long attempt */
    /* subcommand options are parsed from sub[1] on; 0 (not 1) makes getopt reinitialise, so
     * the "+" (stop at the first operand) of the global options does not carry over and
     * "audit ID --limit N" sees its --limit */
    optind = 0;
    opterr = 0; /* the commands name a bad option themselves */
    for (size_t i = 0; rc < 0 && i < sizeof main_commands / sizeof main_commands[0]; i++)
        if (strcmp(sub[0], main_commands[i].name) == 0)
            rc = main_commands[i].run(&c, subc, sub);
    if (rc < 0)
        rc = ctl_usage_error(&c, ": unknown command '%.40s' (see buzzctl help)", sub[0]);
    bfc_close(c.client);
    free(c.token);
    return rc;
}
