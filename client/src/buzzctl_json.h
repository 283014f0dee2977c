/*
 * buzzctl_json.h - buzzctl --json (buzzctl_json.c): any protobuf-c message as the protobuf JSON
 * mapping, and the error document of a failed command. Depends on nothing of buzzctl's.
 */
#ifndef BUZZ_BUZZCTL_JSON_H
#define BUZZ_BUZZCTL_JSON_H

#include <protobuf-c/protobuf-c.h>

#include "buzz/client.h"

struct json_object;
/* The protobuf JSON mapping of msg (lowerCamelCase names, enum names, 64-bit integers as
 * strings, bytes as base64, absent fields omitted; at_us, *_at_us and window_*_us times as
 * RFC 3339 strings named without the _us suffix). NULL msg gives JSON null. Caller puts the
 * object. */
struct json_object *ctl_json_message(const ProtobufCMessage *msg);
/* Print obj as one document on stdout (and put it). */
void ctl_json_emit(struct json_object *obj);
/* {"error": {...}} for a failed call; body (may be NULL) as "current". */
struct json_object *ctl_json_error(const char *what, int exit_code, const bfc_status *st,
                                   bf_err err, const ProtobufCMessage *body);

#endif
