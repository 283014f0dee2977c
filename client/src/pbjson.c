/* pbjson.c - descriptor-driven JSON output for buzzctl --json. */
#include "pbjson.h"

#include <inttypes.h>
#include <stdbool.h>
#include <string.h>

#include <sodium.h>

#include "projection.h"

/* A JSON string: control characters (C0, DEL, C1) escaped, bytes that are not UTF-8 replaced
 * by U+FFFD, so the output is valid JSON and safe on a terminal whatever the server sent. */
static void json_string(FILE *out, const char *s)
{
    fputc('"', out);
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    while (*p != '\0') {
        bool control = false;
        size_t n = bfc_utf8_char(p, &control);
        if (n == 0) {
            fputs("\\ufffd", out);
            n = 1;
        } else if (control) {
            fprintf(out, "\\u%04x", n == 1 ? p[0] : p[1]); /* C1: U+0080..U+009F is C2 80..9F */
        } else if (*p == '"' || *p == '\\') {
            fprintf(out, "\\%c", *p);
        } else {
            fwrite(p, 1, n, out);
        }
        p += n;
    }
    fputc('"', out);
}

static void json_bytes(FILE *out, const ProtobufCBinaryData *b)
{
    char enc[1024];
    if (b->len > 700) {
        json_string(out, "(too long)");
        return;
    }
    sodium_bin2base64(enc, sizeof enc, b->data, b->len, sodium_base64_VARIANT_ORIGINAL);
    json_string(out, enc);
}

static void json_value(FILE *out, const ProtobufCFieldDescriptor *f, const void *v)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        fprintf(out, "%" PRId32, *(const int32_t *)v);
        break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        fprintf(out, "%" PRIu32, *(const uint32_t *)v);
        break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        fprintf(out, "%" PRId64, *(const int64_t *)v);
        break;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        fprintf(out, "%" PRIu64, *(const uint64_t *)v);
        break;
    case PROTOBUF_C_TYPE_FLOAT:
        fprintf(out, "%g", (double)*(const float *)v);
        break;
    case PROTOBUF_C_TYPE_DOUBLE:
        fprintf(out, "%g", *(const double *)v);
        break;
    case PROTOBUF_C_TYPE_BOOL:
        fputs(*(const protobuf_c_boolean *)v ? "true" : "false", out);
        break;
    case PROTOBUF_C_TYPE_ENUM: {
        const ProtobufCEnumValue *ev =
            protobuf_c_enum_descriptor_get_value(f->descriptor, *(const int *)v);
        if (ev != NULL)
            json_string(out, ev->name);
        else
            fprintf(out, "%d", *(const int *)v);
        break;
    }
    case PROTOBUF_C_TYPE_STRING:
        json_string(out, *(char *const *)v);
        break;
    case PROTOBUF_C_TYPE_BYTES:
        json_bytes(out, v);
        break;
    case PROTOBUF_C_TYPE_MESSAGE:
        pbjson_print(out, *(ProtobufCMessage *const *)v);
        break;
    }
}

static size_t value_size(const ProtobufCFieldDescriptor *f)
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

/* true when an optional/required field holds a value */
static bool field_present(const ProtobufCMessage *msg, const ProtobufCFieldDescriptor *f)
{
    const char *base = (const char *)msg;
    if (f->type == PROTOBUF_C_TYPE_STRING || f->type == PROTOBUF_C_TYPE_MESSAGE)
        return *(void *const *)(base + f->offset) != NULL;
    if (f->label == PROTOBUF_C_LABEL_REQUIRED)
        return true;
    return *(const protobuf_c_boolean *)(base + f->quantifier_offset) != 0;
}

void pbjson_print(FILE *out, const ProtobufCMessage *msg)
{
    if (msg == NULL) {
        fputs("null", out);
        return;
    }
    const ProtobufCMessageDescriptor *d = msg->descriptor;
    const char *base = (const char *)msg;
    bool first = true;
    fputc('{', out);
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + f->quantifier_offset);
            if (n == 0)
                continue;
            fprintf(out, "%s\"%s\":[", first ? "" : ",", f->name);
            const char *arr = *(const char *const *)(base + f->offset);
            for (size_t k = 0; k < n; k++) {
                if (k)
                    fputc(',', out);
                json_value(out, f, arr + k * value_size(f));
            }
            fputc(']', out);
        } else {
            if (!field_present(msg, f))
                continue;
            fprintf(out, "%s\"%s\":", first ? "" : ",", f->name);
            json_value(out, f, base + f->offset);
        }
        first = false;
    }
    fputc('}', out);
}
