/*
 * buzzctl.h - what buzzctl's files share (prefix ctl_): the invocation, the one way to call
 * the server, error reporting (text or JSON), exit codes, and the commands each file owns:
 * buzzctl.c (main, options, help), buzzctl_cmds.c (list, get, controls, validate, audit,
 * whoami, ready), buzzctl_dash.c (dash), buzzctl_json.c (--json output), buzzctl_token.c,
 * buzzctl_preflight.c (preflight).
 */
#ifndef BUZZ_BUZZCTL_H
#define BUZZ_BUZZCTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <protobuf-c/protobuf-c.h>

#include "buzz/client.h"

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
/* Report a failed call, one line on stderr (or one JSON document on stdout with --json,
 * carrying body when not NULL, e.g. a conflict's current state); returns the exit code. */
int ctl_report(ctl *c, const char *what, bf_err err, const bfc_status *st,
               const ProtobufCMessage *body);
/* A usage error: one line on stderr (or a JSON document); returns EXIT_USAGE. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
int ctl_usage_error(ctl *c, const char *fmt, ...);
/* "2025-01-01T12:00:00Z" (UTC, to the second); "unknown" when it cannot be formatted. */
void ctl_utc(char *buf, size_t cap, int64_t us);
/* "90s", "5m", "1h", "500ms" or plain seconds into milliseconds; -1 when not a duration. */
int64_t ctl_parse_duration_ms(const char *s);

void ctl_sleep_ms(int64_t ms);
int64_t ctl_now_ms(void); /* monotonic */
/* A whole number in [lo, hi]; -1 otherwise ("5x", "", "-3"). */
long ctl_parse_long(const char *s, long lo, long hi);
/* argv[1] as the one ID of cmd, or a usage error. */
int ctl_need_id(ctl *c, int argc, char **argv, const char *cmd, const char **id);

/* The subcommand help (with an example) for name, NULL for an unknown command. */
const char *ctl_command_help(const char *name);

int ctl_cmd_list(ctl *c, int argc, char **argv);
int ctl_cmd_get(ctl *c, int argc, char **argv);
int ctl_cmd_control(ctl *c, int argc, char **argv, bfc_action action);
int ctl_cmd_validate(ctl *c, int argc, char **argv);
int ctl_cmd_audit(ctl *c, int argc, char **argv);
int ctl_cmd_whoami(ctl *c, int argc, char **argv);
int ctl_cmd_ready(ctl *c, int argc, char **argv);
int ctl_cmd_dash(ctl *c, int argc, char **argv);
int ctl_cmd_preflight(ctl *c, int argc, char **argv);

/* ---- JSON (buzzctl_json.c) --------------------------------------------------------------- */

struct json_object;
/* The protobuf JSON mapping of msg (lowerCamelCase names, enum names, 64-bit integers as
 * strings, bytes as base64, absent fields omitted; *_at_us and window_*_us times as RFC 3339
 * strings named without the _us suffix). NULL msg gives JSON null. Caller puts the object. */
struct json_object *ctl_json_message(const ProtobufCMessage *msg);
/* Print obj as one document on stdout (and put it). */
void ctl_json_emit(struct json_object *obj);
/* {"error": {...}} for a failed call; body (may be NULL) as "current". */
struct json_object *ctl_json_error(const char *what, int exit_code, const bfc_status *st,
                                   bf_err err, const ProtobufCMessage *body);

int buzzctl_token_main(int argc, char **argv);

#endif
