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

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0
fi

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_build throughput.sh throughput
bench_pg_start
trap bench_pg_stop EXIT

echo "throughput.sh: server $BUZZ_BENCH_PG_URL" >&2
"$BUILD/bench/throughput" --url "$BUZZ_BENCH_PG_URL" "$@"
