/*
 * buzzctl_common.c - what every buzzctl command shares (see buzzctl_common.h): the connection,
 * error reporting, times, durations and --timeout, whole numbers and the one-ID argument.
 * Nothing here knows a command or main.
 */
#include "buzzctl_common.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>
#include "buzz/backfill/v1/rpc.pb-c.h"
#include "projection.h"

const char *ctl_text(char *buf, size_t cap, const char *s, const char *none)
{
    if (s == NULL)
        return none;
    bfc_printable(buf, cap, s);
    return buf;
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
        bfc_printable(safe, sizeof safe, msg[0] == ':' ? msg + strspn(msg, ": ") : msg);
        json_object_object_add(e, "message", json_object_new_string(safe));
        struct json_object *doc = json_object_new_object();
        json_object_object_add(doc, "error", e);
        ctl_json_emit(doc);
    } else {
        /* ": unknown command" before there is a command: "buzzctl: unknown command" */
        fprintf(stderr, "buzzctl%s%s\n", msg[0] == ':' ? "" : " ", msg);
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

/* Whole numbers with units in a row, largest first: "500ms", "90s", "1m30s", "2h". A digit
 * must start it; a sign, a space or a fraction is not a duration. */
int64_t ctl_parse_duration_ms(const char *s, long long *bare)
{
    static const struct {
        const char *unit;
        int64_t ms;
    } units[] = {{"ms", 1}, {"h", 3600000}, {"m", 60000}, {"s", 1000}};
    const char *p = s;
    int64_t total = 0;
    int64_t last = INT64_MAX; /* each unit smaller than the one before */
    if (*p < '0' || *p > '9')
        return -1;
    while (*p != '\0') {
        if (*p < '0' || *p > '9')
            return -1;
        char *end = NULL;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (errno != 0 || v > 1000000000LL)
            return -1;
        if (*end == '\0') {
            if (p != s)
                return -1; /* "1m30": the last number needs its unit too */
            if (bare != NULL)
                *bare = v;
            return -2;
        }
        size_t k = 0;
        while (k < sizeof units / sizeof units[0] &&
               strncmp(end, units[k].unit, strlen(units[k].unit)) != 0)
            k++;
        if (k == sizeof units / sizeof units[0] || units[k].ms >= last)
            return -1;
        last = units[k].ms;
        total += v * units[k].ms;
        if (total > (int64_t)INT_MAX)
            return -1;
        p = end + strlen(units[k].unit);
    }
    return total;
}

int64_t ctl_parse_timeout(const char *cmd, const char *s, bool bare_is_ms)
{
    long long bare = 0;
    int64_t ms = ctl_parse_duration_ms(s, &bare);
    if (ms != -2)
        return ms;
    ms = bare_is_ms ? bare : bare * 1000;
    if (ms > (int64_t)INT_MAX)
        return -1;
    if (bare_is_ms) {
        /* the old form of the global option: milliseconds; one syntax is a unit everywhere */
        char safe[40];
        bfc_printable(safe, sizeof safe, s);
        char secs[32] = "";
        if (bare % 1000 == 0)
            snprintf(secs, sizeof secs, " or %llds", bare / 1000);
        fprintf(stderr,
                "buzzctl%s%s: warning: --timeout %s has no unit: taken as milliseconds (the "
                "old form); write %sms%s\n",
                cmd ? " " : "", cmd ? cmd : "", safe, safe, secs);
    }
    return ms;
}

void ctl_sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int64_t ctl_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

long ctl_parse_long(const char *s, long lo, long hi)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0 || v < lo || v > hi)
        return -1;
    return v;
}

int ctl_need_id(ctl *c, int argc, char **argv, const char *cmd, const char **id)
{
    if (argc < 2)
        return ctl_usage_error(c, "%s: missing ID (see buzzctl %s --help)", cmd, cmd);
    if (argc > 2 || argv[1][0] == '-')
        return ctl_usage_error(c, "%s: takes exactly one ID (see buzzctl %s --help)", cmd, cmd);
    *id = argv[1];
    return EXIT_OK;
}
