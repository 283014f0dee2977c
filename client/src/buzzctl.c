/*
 * buzzctl.c - the operator CLI of buzz-backfill: main (global options, dispatch), the help
 * texts, and what every command shares (the connection, error reporting, times). The commands
 * live in buzzctl_cmds.c, buzzctl_ops.c, buzzctl_dash.c and buzzctl_token.c; see buzzctl.h.
 * Usage errors, help and --version never contact a server: the connection is opened by the
 * first call.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>
#include <sodium.h>

#include "buzz/backfill/v1/admin.pb-c.h"
#include "buzz/backfill/v1/readiness.pb-c.h"
#include "buzz/backfill/v1/rpc.pb-c.h"
#include "buzz/client.h"
#include "buzzctl.h"
#include "projection.h"

#ifndef BUZZ_VERSION
#define BUZZ_VERSION "unknown"
#endif

const char *ctl_text(char *buf, size_t cap, const char *s, const char *none)
{
    if (s == NULL)
        return none;
    bfc_printable(buf, cap, s);
    return buf;
}

static void usage(FILE *f)
{
    fputs(
        "usage: buzzctl [options] <command> [arguments]\n"
        "\n"
        "Operate durable backfills through buzz-backfilld's admin API.\n"
        "\n"
        "commands (buzzctl <command> --help shows one with an example):\n"
        "  list [--state STATE] [--limit N] [--wide] [--sample-ms MS]\n"
        "                                     backfills, ordered by id\n"
        "  get ID                             one backfill in detail\n"
        "  start ID | pause ID | resume ID | retry ID\n"
        "                                     lifecycle controls (idempotent per request id)\n"
        "  validate ID [--progress]           run the definition's read-only validation\n"
        "  audit [ID] [--limit N]             audit trail, newest first\n"
        "  whoami                             the identity the server sees\n"
        "  preflight [ID]...                  the daemon's preflight of its definitions\n"
        "  ready [--wait SECONDS]             readiness as the relay sees it\n"
        "  ready --wait-ready --timeout DURATION\n"
        "                                     wait until ready (init containers)\n"
        "  dash [--interval SECONDS] [--once] the live dashboard\n"
        "  token keygen|mint|inspect ...      capability tokens (see 'buzzctl token --help')\n"
        "  help [COMMAND]                     this help, or a command's\n"
        "\n"
        "options (before or, for --json, after the command):\n"
        "  -u, --url URL          server: ipc:///path, tcp://host:port, tls+tcp://host:port\n"
        "                         (default $BUZZ_BACKFILL_URL)\n"
        "  -t, --token TOKEN      capability token (default $BUZZ_BACKFILL_TOKEN); not needed\n"
        "                         on an ipc:// listener with boundary authority\n"
        "      --token-file FILE  read the token from FILE\n"
        "      --timeout MS       budget of one call, retries included (default 10000;\n"
        "                         validate 300000; ready --wait: the wait plus 2000)\n"
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
    {"list", "usage: buzzctl list [--state STATE] [--limit N] [--wide] [--sample-ms MS]\n"
             "Backfills ordered by id, every page. STATE: pending, running, paused, blocked,\n"
             "failed, validating, completed. RATE is measured between two reads --sample-ms\n"
             "apart (default 1000; 0: one read, rate unknown); ETA is an estimate (~).\n"
             "--wide adds GEN, BATCH, THROTTLED, SLOW, VALIDATING (rows a running validation\n"
             "has checked of ~the estimate) and CLAIM.\n"
             "example: buzzctl list --state running\n"},
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
                 "example: buzzctl --timeout 600000 validate demo.events.content_len_v1\n"},
    {"audit", "usage: buzzctl audit [ID] [--limit N]\n"
              "The audit trail, newest first, with UTC times; pages until N rows (default 50).\n"
              "example: buzzctl audit demo.events.content_len_v1 --limit 200\n"},
    {"whoami", "usage: buzzctl whoami\nThe identity and capabilities the server sees.\n"
               "example: buzzctl --token-file op.token whoami\n"},
    {"preflight",
     "usage: buzzctl preflight [ID]...\n"
     "The running daemon's preflight of the definitions it has registered (every one\n"
     "without IDs), as 'buzz-backfilld preflight' runs it: can each one's batches only\n"
     "be bounded work on this database? One line per definition, 'ok' with the index\n"
     "and plans or 'FAIL' with what is wrong and the fix. Read-only. Exit 0 all\n"
     "passed, 1 one failed, 2 an ID the daemon does not have (default --timeout 60000).\n"
     "example: buzzctl preflight demo.events.content_len_v1\n"},
    {"ready", "usage: buzzctl ready [--wait SECONDS]\n"
              "       buzzctl ready --wait-ready --timeout DURATION\n"
              "Readiness as the relay sees it (exit 0 ready, 8 not ready). --wait (0..30)\n"
              "returns early when something changes. --wait-ready waits until ready or\n"
              "DURATION (90s, 5m, 500ms; default 5m) passes, riding over a server that is not\n"
              "up yet: exit 0 ready, 8 still not ready, 6 never reached, 4 refused.\n"
              "example: buzzctl ready --wait-ready --timeout 5m\n"},
    {"dash", "usage: buzzctl dash [--interval SECONDS] [--once]\n"
             "The live dashboard: readiness banner, backfills with progress, rate (last 60 s of\n"
             "running time), ETA (~ estimate), claims, retries and errors; Enter for detail.\n"
             "Keys: S start, p pause, r resume, R retry, v validate (each asks y/n), / filter,\n"
             "s sort, ? help, q quit. A failed refresh keeps the last data, marked STALE.\n"
             "--once prints one frame as text (exit 0 when the data was fetched; with a\n"
             "running backfill it reads twice, --interval apart (default 1), for its rate).\n"
             "example: buzzctl dash --interval 2\n"},
    {"token", "usage: buzzctl token keygen|mint|inspect ...\nCapability tokens; see "
              "'buzzctl token --help'.\nexample: buzzctl token inspect --token-file op.token\n"},
    {"help", "usage: buzzctl help [COMMAND]\nexample: buzzctl help list\n"},
};

const char *ctl_command_help(const char *name)
{
    for (size_t i = 0; i < sizeof ctl_helps / sizeof ctl_helps[0]; i++)
        if (strcmp(ctl_helps[i].name, name) == 0)
            return ctl_helps[i].help;
    return NULL;
}

int ctl_exit_for(bf_err err)
{
    switch (err) {
    case BF_OK:
        return EXIT_OK;
    case BF_ERR_CONFLICT:
        return EXIT_CONFLICT;
    case BF_ERR_UNAUTHENTICATED:
    case BF_ERR_PERMISSION_DENIED:
        return EXIT_DENIED;
    case BF_ERR_NOT_FOUND:
        return EXIT_NOT_FOUND;
    case BF_ERR_UNAVAILABLE:
    case BF_ERR_TIMEOUT:
        return EXIT_UNAVAILABLE;
    case BF_ERR_INVALID_ARGUMENT:
        return EXIT_USAGE;
    default:
        return EXIT_ERROR;
    }
}

int ctl_report(ctl *c, const char *what, bf_err err, const bfc_status *st,
               const ProtobufCMessage *body)
{
    int rc = ctl_exit_for(err);
    if (c->json) {
        ctl_json_emit(ctl_json_error(what, rc, st, err, body));
        return rc;
    }
    /* one line: the server's message (or the code's name), its code, and a detail that says
     * something the message does not */
    char line[BFC_MESSAGE_MAX + BFC_DETAIL_MAX + 160];
    if (st->answered) {
        const char *code = bfc_code_name(st->code);
        const char *msg = st->message[0] ? st->message : code;
        bool show_code = strcmp(msg, code) != 0;
        bool show_detail = st->detail[0] && strstr(st->detail, msg) == NULL;
        snprintf(line, sizeof line, "%s%s%s%s%s%s", msg, show_code ? " (" : "",
                 show_code ? code : "", show_code ? ")" : "", show_detail ? ": " : "",
                 show_detail ? st->detail : "");
    } else {
        /* bf_err_str(UNAVAILABLE) speaks of the database; here the server did not answer */
        snprintf(line, sizeof line, "%s%s%s",
                 err == BF_ERR_UNAVAILABLE ? "server unavailable" : bf_err_str(err),
                 st->transport_detail[0] ? ": " : "", st->transport_detail);
    }
    char safe[sizeof line];
    bfc_printable(safe, sizeof safe, line);
    fprintf(stderr, "buzzctl %s: %s\n", what, safe);
    /* after a control or validate that was sent: its request ID, so that the outcome of a
     * request whose answer was lost can be learnt by repeating it (--request-id) */
    bool sent_control =
        st->attempts > 0 && (strcmp(what, "list") != 0 && strcmp(what, "get") != 0 &&
                             strcmp(what, "audit") != 0 && strcmp(what, "whoami") != 0 &&
                             strcmp(what, "ready") != 0 && strcmp(what, "preflight") != 0);
    if (sent_control) {
        bool unknown =
            !st->answered || st->code == BUZZ__BACKFILL__V1__STATUS_CODE__DEADLINE_EXCEEDED;
        fprintf(stderr, "request id: %s%s\n", st->request_id,
                unknown ? " (outcome unknown: repeat with --request-id to learn it)" : "");
    }
    return rc;
}

int ctl_usage_error(ctl *c, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c != NULL && c->json) {
        struct json_object *e = json_object_new_object();
        json_object_object_add(e, "code", json_object_new_string("usage"));
        json_object_object_add(e, "exitCode", json_object_new_int(EXIT_USAGE));
        char safe[sizeof msg];
        bfc_printable(safe, sizeof safe, msg);
        json_object_object_add(e, "message", json_object_new_string(safe));
        struct json_object *doc = json_object_new_object();
        json_object_object_add(doc, "error", e);
        ctl_json_emit(doc);
    } else {
        fprintf(stderr, "buzzctl %s\n", msg);
    }
    return EXIT_USAGE;
}

bf_err ctl_connect(ctl *c, bfc_status *st)
{
    if (c->client != NULL)
        return BF_OK;
    memset(st, 0, sizeof *st);
    bf_err err =
        bfc_open(&c->client, c->url, &c->bo, st->transport_detail, sizeof st->transport_detail);
    if (err != BF_OK)
        st->transport = err;
    return err;
}

bf_err ctl_call(ctl *c, const ProtobufCServiceDescriptor *svc, const char *method,
                const ProtobufCMessage *in, ProtobufCMessage **out, bfc_status *st)
{
    bf_err err = ctl_connect(c, st);
    if (err != BF_OK)
        return err;
    if (c->has_request_id)
        bfc_set_next_request_id(c->client, c->request_id);
    return bfc_call(c->client, svc, method, in, out, st);
}

void ctl_utc(char *buf, size_t cap, int64_t us)
{
    time_t t = (time_t)(us / 1000000);
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL || strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, cap, "unknown");
}

int64_t ctl_parse_duration_ms(const char *s)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || v < 0 || errno != 0 || v > 1000000000LL)
        return -1;
    if (*end == '\0' || strcmp(end, "s") == 0)
        return v * 1000;
    if (strcmp(end, "ms") == 0)
        return v;
    if (strcmp(end, "m") == 0)
        return v * 60000;
    if (strcmp(end, "h") == 0)
        return v * 3600000;
    return -1;
}

/* ---- main -------------------------------------------------------------------------------- */

#define TOKEN_FILE_MAX 8192

/* The token in a --token-file: its first line. NULL with a short reason in why when the file
 * cannot be read, is too large, holds a NUL byte or has an empty first line: each of those
 * would otherwise send a token other than the one in the file (a shorter one, or none and so
 * no credential at all), never a refusal the operator could understand. */
static char *read_token_file(const char *path, const char **why)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        *why = strerror(errno); /* "No such file or directory", "Permission denied" */
        return NULL;
    }
    char *buf = calloc(1, TOKEN_FILE_MAX + 1);
    if (buf == NULL) {
        fclose(f);
        *why = "out of memory";
        return NULL;
    }
    size_t n = fread(buf, 1, TOKEN_FILE_MAX + 1, f);
    bool failed = ferror(f) != 0;
    fclose(f);
    char *token = NULL;
    if (failed) {
        *why = "could not read it (i/o error, or a directory)";
    } else if (n > TOKEN_FILE_MAX) {
        *why = "it is larger than 8 KiB: not a token file";
    } else if (memchr(buf, '\0', n) != NULL) {
        *why = "it holds a NUL byte";
    } else {
        buf[strcspn(buf, "\r\n")] = '\0';
        if (buf[0] == '\0')
            *why = "it is empty (its first line holds no token)";
        else if ((token = strdup(buf)) == NULL)
            *why = "out of memory";
    }
    sodium_memzero(buf, TOKEN_FILE_MAX + 1);
    free(buf);
    return token;
}

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
    const char *env_token = getenv("BUZZ_BACKFILL_TOKEN");
    c.token = env_token ? strdup(env_token) : NULL;
    bool env_empty = env_token != NULL && env_token[0] == '\0';
    int o;
    while ((o = getopt_long(argc, argv, "+u:t:h", opts, NULL)) != -1) {
        switch (o) {
        case 'u':
            c.url = optarg;
            break;
        case 't':
            free(c.token);
            env_empty = false;
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
            env_empty = false;
            const char *why = "";
            if ((c.token = read_token_file(optarg, &why)) == NULL) {
                fprintf(stderr, "buzzctl: token file %s: %s\n", optarg, why);
                return EXIT_USAGE;
            }
            break;
        }
        case 'o': {
            char *end = NULL;
            long ms = strtol(optarg, &end, 10);
            if (end == optarg || *end != '\0' || ms < 1 || ms > INT_MAX) {
                fputs("buzzctl: --timeout needs a positive number of milliseconds\n", stderr);
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
            return EXIT_USAGE;
        }
    }
    if (env_empty) {
        /* set but empty (an unset variable expanded, a failed command substitution): the
         * operator meant a credential; sending none could mean boundary authority instead */
        fputs("buzzctl: BUZZ_BACKFILL_TOKEN is set but empty: set a token or unset it\n", stderr);
        free(c.token);
        return EXIT_USAGE;
    }
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
        const char *h = subc > 1 ? ctl_command_help(sub[1]) : NULL;
        if (subc > 1 && h == NULL) {
            rc = ctl_usage_error(NULL, "help: unknown command '%.40s' (see buzzctl help)", sub[1]);
        } else {
            fputs(h ? h : "", stdout);
            if (h == NULL)
                usage(stdout);
            rc = EXIT_OK;
        }
    } else if (ctl_command_help(sub[0]) == NULL) {
        rc = ctl_usage_error(&c, ": unknown command '%.40s' (see buzzctl help)", sub[0]);
    } else {
        for (int i = 1; i < subc && rc < 0; i++) {
            if (strcmp(sub[i], "--") == 0)
                break;
            if (is_help(sub[i])) {
                fputs(ctl_command_help(sub[0]), stdout);
                rc = EXIT_OK;
            }
        }
    }
    if (rc < 0 && (c.url == NULL || c.url[0] == '\0'))
        rc = ctl_usage_error(&c, ": no server: pass --url or set BUZZ_BACKFILL_URL");
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
    bfc_action action;
    if (strcmp(sub[0], "list") == 0)
        rc = ctl_cmd_list(&c, subc, sub);
    else if (strcmp(sub[0], "get") == 0)
        rc = ctl_cmd_get(&c, subc, sub);
    else if (strcmp(sub[0], "validate") == 0)
        rc = ctl_cmd_validate(&c, subc, sub);
    else if (strcmp(sub[0], "audit") == 0)
        rc = ctl_cmd_audit(&c, subc, sub);
    else if (strcmp(sub[0], "whoami") == 0)
        rc = ctl_cmd_whoami(&c, subc, sub);
    else if (strcmp(sub[0], "ready") == 0)
        rc = ctl_cmd_ready(&c, subc, sub);
    else if (strcmp(sub[0], "dash") == 0)
        rc = ctl_cmd_dash(&c, subc, sub);
    else if (strcmp(sub[0], "preflight") == 0)
        rc = ctl_cmd_preflight(&c, subc, sub);
    else if (bfc_action_parse(&action, sub[0]) == BF_OK)
        rc = ctl_cmd_control(&c, subc, sub, action);
    else
        rc = ctl_usage_error(&c, ": unknown command '%.40s' (see buzzctl help)", sub[0]);
    bfc_close(c.client);
    free(c.token);
    return rc;
}
