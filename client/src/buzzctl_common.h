/*
 * buzzctl_common.h - what every buzzctl command uses (prefix ctl_), in buzzctl_common.c: the
 * invocation, the one way to call the server, error reporting (text or JSON), exit codes,
 * times and durations. The token file and the default server are client_conn.h (shared with
 * the desktop client). The command files depend on this header (and buzzctl_json.h); none of
 * it depends on a command or on main.
 */
#ifndef BUZZ_BUZZCTL_COMMON_H
#define BUZZ_BUZZCTL_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <protobuf-c/protobuf-c.h>

#include "buzz/client.h"
#include "buzzctl_json.h"

enum {
    EXIT_OK = 0,
    EXIT_ERROR = 1,
    EXIT_USAGE = 2,
    EXIT_CONFLICT = 3,
    EXIT_DENIED = 4,
    EXIT_NOT_FOUND = 5,
    EXIT_UNAVAILABLE = 6,
    EXIT_VALIDATION_FAILED = 7,
    EXIT_NOT_READY = 8,
    EXIT_CURRENT_STATE = 9,
};

typedef struct ctl {
    const char *url;
    char *token;
    bool json;
    bool has_request_id;
    uint8_t request_id[BFC_REQUEST_ID_LEN];
    bfc_options bo;              /* bo.timeout_ms 0: no --timeout given */
    bool validate_timeout_given; /* dash: --timeout also budgets the validate key */
    bfc_client *client;
} ctl;

/* Server text for a terminal (see bfc_printable); none when the server sent nothing. */
const char *ctl_text(char *buf, size_t cap, const char *s, const char *none);
int ctl_exit_for(bf_err err);
/* Open the connection if it is not open yet (the first call does it). */
bf_err ctl_connect(ctl *c, bfc_status *st);
/* One call; the connection is opened by the first. */
bf_err ctl_call(ctl *c, const ProtobufCServiceDescriptor *svc, const char *method,
                const ProtobufCMessage *in, ProtobufCMessage **out, bfc_status *st);
/* Report a failed call of command what, one line on stderr (or one JSON document on stdout
 * with --json, carrying body when not NULL, e.g. a conflict's current state); returns the
 * exit code. */
int ctl_report(ctl *c, const char *what, bf_err err, const bfc_status *st,
               const ProtobufCMessage *body);
/* A usage error: "buzzctl " and the message on stderr (or a JSON document with --json; c may
 * be NULL); returns EXIT_USAGE. The message starts with the command's name ("list: ...") or,
 * before there is one, with ": " ("buzzctl: unknown command ..."). */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
int ctl_usage_error(ctl *c, const char *fmt, ...);
/* "2025-01-01T12:00:00Z" (UTC, to the second); "unknown" when it cannot be formatted. */
void ctl_utc(char *buf, size_t cap, int64_t us);
/* A duration into milliseconds: a whole number with a unit, "500ms", "90s", "5m", "1h", or
 * units in a row ("1m30s"); -1 when it is not one. A bare number ("90") gives -2 with the
 * number in *bare: each option says what its bare numbers mean (ctl_parse_timeout). */
int64_t ctl_parse_duration_ms(const char *s, long long *bare);
/* A --timeout value (global or ready's): a duration; a bare number is seconds, except for the
 * global option where it stays milliseconds (its old form) with a warning on stderr naming
 * the unit it was taken as. -1 when it is not a duration. */
int64_t ctl_parse_timeout(const char *cmd, const char *s, bool bare_is_ms);

void ctl_sleep_ms(int64_t ms);
int64_t ctl_now_ms(void); /* monotonic */
/* A whole number in [lo, hi]; -1 otherwise ("5x", "", "-3"). */
long ctl_parse_long(const char *s, long lo, long hi);
/* argv[1] as the one ID of cmd, or a usage error. */
int ctl_need_id(ctl *c, int argc, char **argv, const char *cmd, const char **id);

#endif
