/*
 * buzzctl_json.c - buzzctl --json: any protobuf-c message as the protobuf JSON mapping, built
 * with json-c by walking the message descriptor, and errors as JSON documents.
 *
 * The mapping: field names in lowerCamelCase, enums by name, 64-bit integers as strings (JSON
 * numbers lose precision above 2^53), bytes as base64, absent optional fields omitted (unknown
 * stays unknown, never 0). This contract's times are int64 microseconds (`at_us`, `*_at_us`,
 * `window_start_us`, `window_end_us`); they are printed as RFC 3339 strings (UTC, microseconds)
 * under the name without `_us`, as a google.protobuf.Timestamp field would be. Strings that are
 * not UTF-8 get U+FFFD for each bad byte; json-c escapes control characters.
 */
#include "buzzctl_json.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>
#include <sodium.h>

#include "projection.h"

/* src as valid UTF-8 (bad bytes replaced by U+FFFD) */
static struct json_object *json_text(const char *src)
{
    const unsigned char *p = (const unsigned char *)(src ? src : "");
    size_t len = strlen((const char *)p);
    char *buf = malloc(len * 3 + 1);
    if (buf == NULL)
        return json_object_new_string("");
    size_t o = 0;
    while (*p != '\0') {
        bool control = false;
        size_t n = bfc_utf8_char(p, &control);
        if (n == 0) {
            memcpy(buf + o, "\xef\xbf\xbd", 3);
            o += 3;
            p++;
            continue;
        }
        memcpy(buf + o, p, n);
        o += n;
        p += n;
    }
    struct json_object *s = json_object_new_string_len(buf, (int)o);
    free(buf);
    return s;
}

/* "expires_at_us" -> "expiresAt" (is_time), "rows_covered" -> "rowsCovered" */
static void json_key(char *dst, size_t cap, const char *name, bool is_time)
{
    size_t len = strlen(name);
    if (is_time && len > 3)
        len -= 3; /* drop "_us" */
    size_t o = 0;
    bool upper = false;
    for (size_t i = 0; i < len && o + 1 < cap; i++) {
        if (name[i] == '_') {
            upper = true;
            continue;
        }
        dst[o++] = upper && name[i] >= 'a' && name[i] <= 'z' ? (char)(name[i] - 32) : name[i];
        upper = false;
    }
    dst[o] = '\0';
}

static bool json_is_time(const ProtobufCFieldDescriptor *f)
{
    size_t len = strlen(f->name);
    if (f->type != PROTOBUF_C_TYPE_INT64 || len < 4 || strcmp(f->name + len - 3, "_us") != 0)
        return false;
    return strcmp(f->name, "at_us") == 0 || (len > 6 && strcmp(f->name + len - 6, "_at_us") == 0) ||
           strncmp(f->name, "window_", 7) == 0;
}

static struct json_object *json_time(int64_t us)
{
    time_t t = (time_t)(us >= 0 ? us / 1000000 : (us - 999999) / 1000000);
    int64_t frac = us - (int64_t)t * 1000000;
    struct tm tm;
    char day[32], buf[48];
    if (gmtime_r(&t, &tm) == NULL || strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm) == 0)
        return json_object_new_string("unknown");
    snprintf(buf, sizeof buf, "%s.%06" PRId64 "Z", day, frac);
    return json_object_new_string(buf);
}

static struct json_object *json_value(const ProtobufCFieldDescriptor *f, const void *v)
{
    char num[32];
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        return json_object_new_int(*(const int32_t *)v);
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        return json_object_new_int64(*(const uint32_t *)v);
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        if (json_is_time(f))
            return json_time(*(const int64_t *)v);
        snprintf(num, sizeof num, "%" PRId64, *(const int64_t *)v);
        return json_object_new_string(num);
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        snprintf(num, sizeof num, "%" PRIu64, *(const uint64_t *)v);
        return json_object_new_string(num);
    case PROTOBUF_C_TYPE_FLOAT:
        return json_object_new_double((double)*(const float *)v);
    case PROTOBUF_C_TYPE_DOUBLE:
        return json_object_new_double(*(const double *)v);
    case PROTOBUF_C_TYPE_BOOL:
        return json_object_new_boolean(*(const protobuf_c_boolean *)v != 0);
    case PROTOBUF_C_TYPE_ENUM: {
        const ProtobufCEnumValue *ev =
            protobuf_c_enum_descriptor_get_value(f->descriptor, *(const int *)v);
        return ev ? json_object_new_string(ev->name) : json_object_new_int(*(const int *)v);
    }
    case PROTOBUF_C_TYPE_STRING:
        return json_text(*(char *const *)v);
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *b = v;
        size_t cap = sodium_base64_ENCODED_LEN(b->len, sodium_base64_VARIANT_ORIGINAL);
        char *enc = malloc(cap);
        if (enc == NULL)
            return NULL;
        sodium_bin2base64(enc, cap, b->data, b->len, sodium_base64_VARIANT_ORIGINAL);
        struct json_object *s = json_object_new_string(enc);
        free(enc);
        return s;
    }
    case PROTOBUF_C_TYPE_MESSAGE:
        return ctl_json_message(*(ProtobufCMessage *const *)v);
    }
    return NULL;
}

static size_t json_value_size(const ProtobufCFieldDescriptor *f)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return 8;
    case PROTOBUF_C_TYPE_DOUBLE:
        return sizeof(double);
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_ENUM:
        return sizeof(int);
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(void *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    default:
        return 4;
    }
}

static bool json_present(const ProtobufCMessage *msg, const ProtobufCFieldDescriptor *f)
{
    const char *base = (const char *)msg;
    if (f->type == PROTOBUF_C_TYPE_STRING || f->type == PROTOBUF_C_TYPE_MESSAGE)
        return *(void *const *)(base + f->offset) != NULL;
    if (f->label == PROTOBUF_C_LABEL_REQUIRED)
        return true;
    return *(const protobuf_c_boolean *)(base + f->quantifier_offset) != 0;
}

struct json_object *ctl_json_message(const ProtobufCMessage *msg)
{
    if (msg == NULL)
        return NULL; /* json-c's null */
    const ProtobufCMessageDescriptor *d = msg->descriptor;
    const char *base = (const char *)msg;
    struct json_object *obj = json_object_new_object();
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        char key[64];
        json_key(key, sizeof key, f->name, json_is_time(f));
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + f->quantifier_offset);
            if (n == 0)
                continue;
            struct json_object *arr = json_object_new_array();
            const char *items = *(const char *const *)(base + f->offset);
            for (size_t k = 0; k < n; k++)
                json_object_array_add(arr, json_value(f, items + k * json_value_size(f)));
            json_object_object_add(obj, key, arr);
        } else if (json_present(msg, f)) {
            json_object_object_add(obj, key, json_value(f, base + f->offset));
        }
    }
    if (d == &buzz__backfill__v1__backfill__descriptor) {
        /* derived by the client (projection.c): running with no live claim holder and no
         * retry back-off; present for a running backfill only */
        const Buzz__Backfill__V1__Backfill *b = (const Buzz__Backfill__V1__Backfill *)msg;
        if (b->has_state && b->state == BUZZ__BACKFILL__V1__STATE__RUNNING) {
            bfc_view v;
            bfc_project(b, &v);
            json_object_object_add(obj, "waitingForWorker",
                                   json_object_new_boolean(v.waiting_worker));
        }
    }
    return obj;
}

/* json-c escapes C0 controls and DEL but leaves the C1 controls (U+0080..U+009F) as UTF-8,
 * which a terminal acts on; they occur only inside strings, so \u escapes are exact. */
void ctl_json_emit(struct json_object *obj)
{
    const unsigned char *p = (const unsigned char *)json_object_to_json_string_ext(
        obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    for (; p != NULL && *p != '\0'; p++) {
        if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
            printf("\\u%04x", p[1]);
            p++;
        } else if (p[0] == 0x7f) {
            fputs("\\u007f", stdout);
        } else {
            putchar(*p);
        }
    }
    putchar('\n');
    json_object_put(obj);
}

struct json_object *ctl_json_error(const char *what, int exit_code, const bfc_status *st,
                                   bf_err err, const ProtobufCMessage *body)
{
    struct json_object *e = json_object_new_object();
    json_object_object_add(e, "command", json_text(what));
    json_object_object_add(e, "exitCode", json_object_new_int(exit_code));
    if (st != NULL && st->answered) {
        json_object_object_add(e, "code", json_text(bfc_code_name(st->code)));
        if (st->message[0])
            json_object_object_add(e, "message", json_text(st->message));
        if (st->detail[0])
            json_object_object_add(e, "detail", json_text(st->detail));
    } else {
        json_object_object_add(e, "code",
                               json_text(err == BF_ERR_TIMEOUT       ? "deadline_exceeded"
                                         : err == BF_ERR_UNAVAILABLE ? "unavailable"
                                         : err == BF_ERR_IO          ? "malformed_response"
                                         : st == NULL                ? "invalid_argument"
                                                                     : "client_error"));
        const char *msg = err == BF_ERR_UNAVAILABLE ? "server unavailable" : bf_err_str(err);
        json_object_object_add(e, "message", json_text(msg));
        if (st != NULL && st->transport_detail[0])
            json_object_object_add(e, "detail", json_text(st->transport_detail));
    }
    if (st != NULL && st->attempts > 0)
        json_object_object_add(e, "requestId", json_text(st->request_id));
    struct json_object *doc = json_object_new_object();
    json_object_object_add(doc, "error", e);
    if (body != NULL)
        json_object_object_add(doc, "current", ctl_json_message(body));
    return doc;
}
