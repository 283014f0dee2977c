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
    if nm "$bin" | grep -E ' [TtDdBb] (srv_|bf_engine_|bf_worker_|PQ)' | head -n 5 | grep .; then
        echo "$bin contains engine, server or libpq code (above)"
        fail=1
    fi
done
exit "$fail"
