#!/usr/bin/env bash
# The operator client stands alone: buzzctl links neither libpq nor the engine library (it
# uses buzz-common and the client library only), and no server code is in it.
# Usage: check_client_deps.sh BUZZCTL
set -euo pipefail
ctl="$1"
fail=0
deps="$(ldd "$ctl")"
for lib in libpq libbuzz-backfill.so; do
    if grep -q "$lib" <<<"$deps"; then
        echo "buzzctl links $lib:"
        grep "$lib" <<<"$deps"
        fail=1
    fi
done
# no engine or server symbols were linked in statically either
if nm "$ctl" | grep -E ' [TtDdBb] (srv_|bf_engine_|bf_worker_|PQ)' | head -n 5 | grep .; then
    echo "buzzctl contains engine, server or libpq code (above)"
    fail=1
fi
exit "$fail"
