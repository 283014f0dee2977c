#!/usr/bin/env bash
# Run the throughput benchmark (bench/throughput.c): builds the `throughput` target in a Release
# build tree, starts the private PostgreSQL cluster of scripts/pg.sh when it is not running
# (and stops it again afterwards in that case), and runs the program against it. Results go to
# stdout only; nothing is written to the repository besides the gitignored build tree and
# scripts/pg.sh's own .pg/ state.
#
# Usage: bench/throughput.sh [throughput options...]   e.g. --reps 5, --rows 200000, --batch 500
# Environment: BUZZ_BENCH_BUILD (build tree, default <repo>/build-bench),
#              BUZZ_BENCH_PG_URL (use this server instead of scripts/pg.sh's cluster).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUZZ_BENCH_BUILD:-$ROOT/build-bench}"
PG="$ROOT/scripts/pg.sh"

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0
fi

echo "throughput.sh: building (Release) in $BUILD" >&2
LOG="$(mktemp)"
if ! { cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBUZZ_TESTS=OFF &&
    cmake --build "$BUILD" --target throughput -j "$(nproc 2>/dev/null || echo 2)"; } >"$LOG" 2>&1; then
    cat "$LOG" >&2
    rm -f "$LOG"
    echo "throughput.sh: build failed" >&2
    exit 1
fi
rm -f "$LOG"

started=0
if [[ -z "${BUZZ_BENCH_PG_URL:-}" ]]; then
    if ! "$PG" status >/dev/null 2>&1; then
        "$PG" start >&2
        started=1
    fi
    BUZZ_BENCH_PG_URL="$("$PG" url)"
    export BUZZ_BENCH_PG_URL
fi
cleanup()
{
    if ((started)); then
        "$PG" stop >&2 || true
    fi
}
trap cleanup EXIT

echo "throughput.sh: server $BUZZ_BENCH_PG_URL" >&2
"$BUILD/bench/throughput" --url "$BUZZ_BENCH_PG_URL" "$@"
