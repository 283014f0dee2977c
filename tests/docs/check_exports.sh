#!/usr/bin/env bash
# A shared library exports only its public API: every symbol it defines in its dynamic symbol
# table is declared in one of the given public headers (a whole word there), and at least one
# is (an empty export list would pass vacuously). Without the version script (engine/
# libbuzz-backfill.map, client/libbuzz-backfill-client.map) the engine exports its bf__
# internals and the client the status tables and token code it is built with: this fails.
# Usage: check_exports.sh LIBRARY HEADER...
set -euo pipefail
lib="$1"
shift
syms="$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | sort -u)"
[[ -n "$syms" ]] || {
    echo "$lib exports nothing"
    exit 1
}
bad=0
n=0
while read -r s; do
    n=$((n + 1))
    if ! grep -qw -- "$s" "$@"; then
        echo "$lib exports $s, which no public header declares"
        bad=1
    fi
done <<<"$syms"
((bad == 0)) && echo "$lib: $n exported symbols, all declared in the public headers"
exit "$bad"
