#!/usr/bin/env python3
"""perf_breakdown.py - where the daemon's CPU goes per request, from `perf script` output.

Reads the text of `perf script -F ip,sym,dso` (call-graph samples of buzz-backfilld recorded by
bench/rpc.sh with BUZZ_BENCH_PERF) on stdin and prints the share of samples per concern:
decode, token verification, PostgreSQL (libpq and its socket), engine (row decode, readiness
logic), encode (the engine row to protobuf, packing), handler and dispatch, transport (nng, the
transport threads and native.c's, their wake-ups), and what no frame claims (kernel, libc, other). Each sample
belongs to the first frame, from the leaf up, that one of the rules below recognizes: a memcpy
under protobuf_c_message_pack is encoding, a futex wait under nng is transport.

Usage: perf script -i FILE -F ip,sym,dso | bench/perf_breakdown.py [--requests N] [--hz HZ]
With --requests and --hz the shares are also given as microseconds of CPU per request.
"""
import argparse
import re
import sys

FRAME = re.compile(r"^\s*[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$")

# (concern, test of (symbol, dso)); the first frame from the leaf that a rule matches decides
RULES = [
    ("token verification", lambda s, d: s.startswith(("bft_", "srv_auth_", "crypto_sign"))
     or "libsodium" in d),
    ("decode", lambda s, d: s.startswith(("srv_envelope_scan", "srv_wire_", "protobuf_c_message_unpack",
                                          "srv_budget_"))),
    ("encode", lambda s, d: s.startswith(("protobuf_c_message_pack", "protobuf_c_message_get_packed",
                                          "convert_", "srv_code_from_err"))
     or s.endswith(("__pack", "__get_packed_size"))),
    ("PostgreSQL (libpq, its socket)", lambda s, d: "libpq" in d
     or s.startswith(("PQ", "pq", "bf__exec", "bf__wait_result", "bf__ensure_conn",
                      "engine_idle_conn_alive"))),
    ("engine (row decode, readiness logic)", lambda s, d: s.startswith(("bf_", "bf__"))),
    ("handler, dispatch", lambda s, d: s.startswith(("srv_dispatch", "admin_", "readiness_", "srv_call_",
                                                     "dispatch_", "srv_session"))),
    ("transport (nng, threads, wake-ups)", lambda s, d: "libnng" in d
     or s.startswith(("nng_", "nni_", "transport_", "srv_transport", "nn_", "native_"))),
    ("log, metrics", lambda s, d: s.startswith(("srv_log", "metrics_", "srv_metrics"))),
]


def concern(frames):
    """(concern, the frame that claimed the sample)"""
    for sym, dso in frames:
        for name, test in RULES:
            if test(sym, dso):
                return name, sym
    if not frames:
        return "other", ""
    sym, dso = frames[0]
    if "kernel" in dso:
        return "kernel, no user frame claims it", sym
    if "libc" in dso:
        return "libc, no user frame claims it", sym
    return "other", sym


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=float, default=0)
    ap.add_argument("--hz", type=float, default=0)
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    counts = {}
    leaves = {}
    claims = {}
    total = 0
    frames = []

    def flush():
        nonlocal total, frames
        if frames:
            c, by = concern(frames)
            counts[c] = counts.get(c, 0) + 1
            claims.setdefault(c, {})
            claims[c][by] = claims[c].get(by, 0) + 1
            leaf = frames[0][0] or "[unknown]"
            leaves[leaf] = leaves.get(leaf, 0) + 1
            total += 1
        frames = []

    for line in sys.stdin:
        if not line.strip():
            flush()
            continue
        m = FRAME.match(line)
        if m:
            sym = re.sub(r"\+0x[0-9a-f]+$", "", m.group(1))
            frames.append((sym, m.group(2)))
    flush()
    if total == 0:
        print("no samples")
        return 1
    per_req = args.requests > 0 and args.hz > 0
    print(f"{'concern':<40} {'samples':>8} {'share':>7}" + (f" {'us/request':>11}" if per_req else ""))
    for name, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        line = f"{name:<40} {n:>8} {100.0 * n / total:>6.1f}%"
        if per_req:
            line += f" {n / args.hz * 1e6 / args.requests:>11.1f}"
        print(line)
        top = sorted(claims[name].items(), key=lambda kv: -kv[1])[:3]
        print("      by " + ", ".join(f"{sym[:40] or '[unknown]'} {100.0 * k / n:.0f}%" for sym, k in top))
    print(f"{'total':<40} {total:>8} {100.0:>6.1f}%" +
          (f" {total / args.hz * 1e6 / args.requests:>11.1f}" if per_req else ""))
    print(f"\nleaf functions (top {args.top}):")
    for sym, n in sorted(leaves.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"  {100.0 * n / total:5.1f}%  {sym[:90]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
