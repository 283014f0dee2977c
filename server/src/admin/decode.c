/*
 * decode.c - reading requests off the wire before and after authentication (srv_envelope_scan,
 * srv_wire_last_string, srv_wire_check_strings) and the per-request allocator budget for the
 * protobuf-c decode of a body (srv_budget).
 *
 * Design notes
 *
 * Why not protobuf-c for the envelope. protobuf_c_message_unpack() keeps every unknown field:
 * for each one a scanned-member slot, an unknown-field record and a copy of its bytes. A 1 MiB
 * message of two-byte unknown fields is half a million of them, over 40 MB of allocations
 * before anything about the request (its token) has been looked at; the envelope's body bytes
 * are copied once more on top. The dispatcher needs five fields of the envelope, so it reads
 * them with a small scan of the wire format (protobuf-c has no public API to walk a message's
 * fields without materializing them): spans into the received message, no allocation at all,
 * unknown fields skipped. The scan accepts exactly the encodings protobuf-c's unpack accepts
 * (tag and length prefixes of at most 5 bytes, no field 0 in a one-byte tag, varints of at most
 * 10 bytes, no groups, a known field only in its own wire type, the last occurrence of a field
 * wins), so the envelope means what it meant before; tests/unit/test_decode.c and
 * fuzz/fuzz_envelope.c check the two against each other.
 *
 * The body is decoded with protobuf-c, after authentication, under two bounds: the method's
 * size cap (srv_method_policy.max_body, checked by the dispatcher) and an allocator budget
 * (srv_budget) that makes an allocation fail once the decode holds SRV_DECODE_BUDGET(cap)
 * bytes: room for every string and bytes field of a body at its cap, not for thousands of tiny
 * unknown fields (a 4 KiB body of two-byte unknown fields would need about 180 KB), which are
 * refused (RESOURCE_EXHAUSTED) instead of held.
 *
 * Strings. protobuf-c stores a `string` field as a NUL-terminated copy of its wire bytes, so a
 * string that holds a NUL byte is silently shorter in C than on the wire:
 * "demo.events.content_len_v1\0; DROP" is acted on as "demo.events.content_len_v1", and
 * "<token>\0junk" verifies as "<token>". srv_wire_check_strings() walks a message's wire bytes
 * with its descriptor and finds every occurrence of every string field (optional, required or
 * repeated, in nested messages too) that holds a NUL byte, i.e. whose wire length differs from
 * its C length; the envelope scan does the same for the envelope's strings. Generic by
 * descriptor, so a string field added to a request later is covered without code.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "srv.h"

#define WT_VARINT 0
#define WT_64BIT  1
#define WT_LEN    2
#define WT_32BIT  5

/* One field as it sits on the wire. */
typedef struct decode_field {
    uint32_t number;
    unsigned wire_type;
    const uint8_t *data; /* the value: the payload of a LEN field, the encoded bytes otherwise */
    size_t len;
} decode_field;

/* ---- the wire format -------------------------------------------------------------------- */

/* A varint of at most max bytes at p (avail bytes there): its length, 0 when it does not end. */
static size_t decode_varint_len(const uint8_t *p, size_t avail, size_t max)
{
    size_t n = avail < max ? avail : max;
    for (size_t i = 0; i < n; i++)
        if ((p[i] & 0x80) == 0)
            return i + 1;
    return 0;
}

/* Low 32 bits of the varint of len bytes at p. */
static uint32_t decode_u32(const uint8_t *p, size_t len)
{
    uint32_t v = 0;
    for (size_t i = 0; i < len && i < 5; i++)
        v |= (uint32_t)(p[i] & 0x7f) << (7 * i);
    return v;
}

/* The field at *at (before end); advances *at past it. false when the bytes do not form a
 * field: a tag or length prefix longer than 5 bytes, a varint longer than 10, a value running
 * past end, a group or a wire type that does not exist. */
static bool decode_next(const uint8_t **at, const uint8_t *end, decode_field *f)
{
    const uint8_t *p = *at;
    size_t avail = (size_t)(end - p);
    size_t n = decode_varint_len(p, avail, 5);
    if (n == 0 || (p[0] & 0xf8) == 0)
        return false; /* protobuf-c refuses a first tag byte without field bits (field 0) */
    uint32_t tag = decode_u32(p, n);
    f->number = tag >> 3;
    f->wire_type = tag & 7;
    p += n;
    avail -= n;
    switch (f->wire_type) {
    case WT_VARINT:
        f->len = decode_varint_len(p, avail, 10);
        if (f->len == 0)
            return false;
        f->data = p;
        break;
    case WT_64BIT:
    case WT_32BIT:
        f->len = f->wire_type == WT_64BIT ? 8 : 4;
        if (avail < f->len)
            return false;
        f->data = p;
        break;
    case WT_LEN: {
        size_t pre = decode_varint_len(p, avail, 5);
        if (pre == 0)
            return false;
        uint32_t len = decode_u32(p, pre);
        if ((size_t)len > avail - pre)
            return false;
        f->data = p + pre;
        f->len = len;
        break;
    }
    default:
        return false; /* groups (3, 4) and 6, 7: protobuf-c refuses them too */
    }
    *at = f->data + f->len;
    return true;
}

/* Whether protobuf-c's unpack takes wire type wt for the known field fd. */
static bool decode_wire_fits(const ProtobufCFieldDescriptor *fd, unsigned wt)
{
    switch (fd->type) {
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_BYTES:
    case PROTOBUF_C_TYPE_MESSAGE:
        return wt == WT_LEN;
    case PROTOBUF_C_TYPE_BOOL:
        return true; /* protobuf-c reads a bool from any wire type */
    default:
        break;
    }
    if (fd->label == PROTOBUF_C_LABEL_REPEATED && wt == WT_LEN)
        return true; /* packed */
    switch (fd->type) {
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_FLOAT:
        return wt == WT_32BIT;
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return wt == WT_64BIT;
    default:
        return wt == WT_VARINT;
    }
}

static bool decode_has_nul(const decode_field *f)
{
    return f->len > 0 && memchr(f->data, '\0', f->len) != NULL;
}

/* ---- the envelope ----------------------------------------------------------------------- */

bf_err srv_envelope_scan(srv_envelope *out, const uint8_t *in, size_t len)
{
    if (out == NULL || (in == NULL && len > 0))
        return BF_ERR_INVALID_ARGUMENT;
    const ProtobufCMessageDescriptor *desc = &buzz__backfill__v1__request_envelope__descriptor;
    srv_envelope env;
    memset(&env, 0, sizeof env);
    const uint8_t *at = in, *end = in + len;
    while (at < end) {
        decode_field f;
        if (!decode_next(&at, end, &f))
            return BF_ERR_INVALID_ARGUMENT;
        const ProtobufCFieldDescriptor *fd =
            protobuf_c_message_descriptor_get_field(desc, f.number);
        if (fd == NULL)
            continue; /* unknown: skipped, never held */
        if (!decode_wire_fits(fd, f.wire_type))
            return BF_ERR_INVALID_ARGUMENT;
        if (fd->type == PROTOBUF_C_TYPE_STRING && env.nul_field == NULL && decode_has_nul(&f))
            env.nul_field = fd;
        srv_span span = {f.data, f.len, true};
        switch (fd->offset) {
        case offsetof(Buzz__Backfill__V1__RequestEnvelope, method):
            env.method = span;
            break;
        case offsetof(Buzz__Backfill__V1__RequestEnvelope, request_id):
            env.request_id = span;
            break;
        case offsetof(Buzz__Backfill__V1__RequestEnvelope, token):
            env.token = span;
            break;
        case offsetof(Buzz__Backfill__V1__RequestEnvelope, body):
            env.body = span;
            break;
        case offsetof(Buzz__Backfill__V1__RequestEnvelope, deadline_ms):
            env.has_deadline_ms = true;
            env.deadline_ms = decode_u32(f.data, f.len);
            break;
        default:
            break; /* a field this dispatcher does not use */
        }
    }
    *out = env;
    return BF_OK;
}

/* ---- bodies ----------------------------------------------------------------------------- */

bool srv_wire_last_string(const ProtobufCMessageDescriptor *desc, const char *name,
                          const uint8_t *data, size_t len, srv_span *out)
{
    if (desc == NULL || name == NULL || out == NULL || (data == NULL && len > 0))
        return false;
    const ProtobufCFieldDescriptor *fd =
        protobuf_c_message_descriptor_get_field_by_name(desc, name);
    if (fd == NULL || fd->type != PROTOBUF_C_TYPE_STRING || fd->label == PROTOBUF_C_LABEL_REPEATED)
        return false;
    srv_span found = {NULL, 0, false};
    const uint8_t *at = data, *end = data + len;
    while (at < end) {
        decode_field f;
        if (!decode_next(&at, end, &f))
            return false; /* nothing is learnt from a malformed body */
        if (f.number == fd->id && f.wire_type == WT_LEN)
            found = (srv_span){f.data, f.len, true};
    }
    if (!found.present)
        return false;
    *out = found;
    return true;
}

static bf_err decode_check(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                           int depth, const ProtobufCFieldDescriptor **nul_field)
{
    if (depth > SRV_DECODE_DEPTH_MAX)
        return BF_ERR_INVALID_ARGUMENT;
    const uint8_t *at = data, *end = data + len;
    while (at < end) {
        decode_field f;
        if (!decode_next(&at, end, &f))
            return BF_ERR_INVALID_ARGUMENT;
        if (f.wire_type != WT_LEN)
            continue;
        const ProtobufCFieldDescriptor *fd =
            protobuf_c_message_descriptor_get_field(desc, f.number);
        if (fd == NULL)
            continue;
        if (fd->type == PROTOBUF_C_TYPE_STRING && decode_has_nul(&f)) {
            *nul_field = fd;
            return BF_ERR_INVALID_ARGUMENT;
        }
        if (fd->type == PROTOBUF_C_TYPE_MESSAGE) {
            bf_err err = decode_check(fd->descriptor, f.data, f.len, depth + 1, nul_field);
            if (err != BF_OK)
                return err;
        }
    }
    return BF_OK;
}

bf_err srv_wire_check_strings(const ProtobufCMessageDescriptor *desc, const uint8_t *data,
                              size_t len, const ProtobufCFieldDescriptor **nul_field)
{
    if (desc == NULL || nul_field == NULL || (data == NULL && len > 0))
        return BF_ERR_INVALID_ARGUMENT;
    *nul_field = NULL;
    return decode_check(desc, data, len, 0, nul_field);
}

/* ---- the allocator budget --------------------------------------------------------------- */

/* Each block carries its size in front, so a free gives its bytes back to the budget. */
typedef union budget_header {
    size_t size;
    max_align_t align;
} budget_header;

static void *budget_alloc(void *data, size_t size)
{
    srv_budget *b = data;
    size_t total = sizeof(budget_header) + size;
    if (size > b->limit || total > b->limit - b->used) {
        b->exceeded = true;
        return NULL;
    }
    budget_header *h = malloc(total);
    if (h == NULL) {
        b->exceeded = true;
        return NULL;
    }
    h->size = total;
    b->used += total;
    if (b->used > b->peak)
        b->peak = b->used;
    return h + 1;
}

static void budget_free(void *data, void *p)
{
    if (p == NULL)
        return;
    srv_budget *b = data;
    budget_header *h = (budget_header *)p - 1;
    b->used -= h->size;
    free(h);
}

void srv_budget_init(srv_budget *b, size_t limit)
{
    memset(b, 0, sizeof *b);
    b->allocator.alloc = budget_alloc;
    b->allocator.free = budget_free;
    b->allocator.allocator_data = b;
    b->limit = limit;
}
