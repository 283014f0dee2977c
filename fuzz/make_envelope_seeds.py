#!/usr/bin/env python3
"""Write the seed corpus of fuzz_envelope (fuzz/corpus/envelope/).

Each seed is one byte choosing the listener (0 tcp, 1 tls, 2 ipc, 3 unknown) followed by a
RequestEnvelope (proto/buzz/backfill/v1/rpc.proto) encoded here by hand, so no protobuf
package is needed. Run from anywhere; the output is deterministic.
"""
import base64
import os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "envelope")


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(num, value):
    return varint(num << 3) + varint(value)


def field_bytes(num, data):
    if isinstance(data, str):
        data = data.encode()
    return varint((num << 3) | 2) + varint(len(data)) + data


def envelope(method=None, request_id=None, token=None, body=None, deadline_ms=None):
    out = b""
    if method is not None:
        out += field_bytes(1, method)
    if request_id is not None:
        out += field_bytes(2, request_id)
    if token is not None:
        out += field_bytes(3, token)
    if body is not None:
        out += field_bytes(4, body)
    if deadline_ms is not None:
        out += field_varint(5, deadline_ms)
    return out


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def token():
    """A well-formed token (TokenClaims) whose signature no trusted key made."""
    claims = (field_bytes(1, bytes(range(16))) + field_bytes(2, "alice@ops") +
              field_varint(3, 1) + field_varint(3, 2) + field_varint(4, 1) +
              field_bytes(5, "fuzz-aud") + field_varint(6, 1700000000) +
              field_varint(7, 1900000000) + field_bytes(8, "fuzz-1"))
    return "bbt1." + b64(claims) + "." + b64(bytes(64))


RID = bytes.fromhex("00112233445566778899aabbccddeeff")
ADMIN = "buzz.backfill.v1.Admin."
SEEDS = {
    "admin_get": (0, envelope(ADMIN + "Get", RID, token(), field_bytes(1, "demo.items"), 5000)),
    "admin_list": (0, envelope(ADMIN + "List", RID, token(),
                               field_varint(1, 2) + field_bytes(2, "demo.a") +
                               field_varint(3, 50), 5000)),
    "admin_start": (0, envelope(ADMIN + "Start", RID, token(), field_bytes(1, "demo.items"),
                                10000)),
    "admin_pause_ipc": (2, envelope(ADMIN + "Pause", RID, None, field_bytes(1, "demo.items"))),
    "admin_resume": (1, envelope(ADMIN + "Resume", RID, token(), field_bytes(1, "demo.items"))),
    "admin_retry": (0, envelope(ADMIN + "Retry", RID, token(), field_bytes(1, "demo.items"))),
    "admin_validate": (0, envelope(ADMIN + "Validate", RID, token(),
                                   field_bytes(1, "demo.items"), 30000)),
    "admin_audit": (0, envelope(ADMIN + "Audit", RID, token(),
                                field_bytes(1, "demo.items") + field_varint(2, 1000) +
                                field_varint(3, 10))),
    "admin_whoami": (2, envelope(ADMIN + "WhoAmI", RID, None, b"")),
    "readiness_check": (0, envelope("buzz.backfill.v1.Readiness.Check", RID, token(),
                                    field_varint(1, 1000), 3000)),
    "readiness_check_ipc": (2, envelope("buzz.backfill.v1.Readiness.Check", None, None, b"")),
    "unknown_method": (0, envelope(ADMIN + "Reset", RID, token(), field_bytes(1, "demo.items"))),
    "short_request_id": (0, envelope(ADMIN + "Start", RID[:5], token(),
                                     field_bytes(1, "demo.items"))),
    "expired_deadline": (0, envelope(ADMIN + "Start", RID, token(),
                                     field_bytes(1, "demo.items"), 0)),
    "empty": (0, b""),
}

os.makedirs(OUT, exist_ok=True)
for name, (listener, data) in SEEDS.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(bytes([listener]) + data)
print("wrote %d seeds to %s" % (len(SEEDS), OUT))
