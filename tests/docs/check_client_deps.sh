#!/usr/bin/env bash
# The operator client stands alone: buzzctl and the client library link neither libpq nor the
# engine library (they use buzz-common and the client only), and no engine, server or libpq
# code is linked into them statically either.
# Usage: check_client_deps.sh BINARY...
set -euo pipefail
fail=0
for bin in "$@"; do
    deps="$(ldd "$bin")"
    for lib in libpq libbuzz-backfill.so; do
        if grep -q "$lib" <<<"$deps"; then
            echo "$bin links $lib:"
            grep "$lib" <<<"$deps"
            fail=1
        fi
    done
    # the symbols read whole first: with pipefail, "nm | grep | head -n 5 | grep ." fails
    # (and the check passes) when more than five match and grep dies of SIGPIPE
    syms="$(nm "$bin" | grep -E ' [TtDdBb] (srv_|bf_engine_|bf_worker_|PQ)' || true)"
    if [[ -n "$syms" ]]; then
        head -n 5 <<<"$syms"
        echo "$bin contains engine, server or libpq code (above)"
        fail=1
    fi
done
exit "$fail"
