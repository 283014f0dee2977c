#!/usr/bin/env bash
# Run the large-table benchmark (bench/scale.c, issue 16): builds the `scale` target in a Release
# build tree, starts the private PostgreSQL cluster of scripts/pg.sh when it is not running (and
# stops it again afterwards in that case), and runs the program against it. With --durable it
# runs on a side cluster with fsync, full_page_writes and synchronous_commit on
# (scripts/pg.sh durable-start), which it deletes afterwards if it started it. Results go to
# stdout only.
#
# Usage: bench/scale.sh [--durable] [scale options...]   e.g. --rows 2000000, --shapes compound,
#        --window 30, --analyze-at 40, --batch 1000 (bench/scale.sh --durable --help: all of them)
# Environment: BUZZ_BENCH_BUILD (build tree, default <repo>/build-bench),
#              BUZZ_BENCH_PG_URL (use this server instead of scripts/pg.sh's clusters).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUZZ_BENCH_BUILD:-$ROOT/build-bench}"

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0
fi

DURABLE=0
if [[ "${1:-}" == "--durable" ]]; then
    DURABLE=1
    shift
fi

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_build scale.sh scale
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    exec "$BUILD/bench/scale" --help
fi

DURABLE_STARTED=0
cleanup()
{
    if ((DURABLE_STARTED)); then
        "$ROOT/scripts/pg.sh" durable-stop >&2 || true
    fi
    bench_pg_stop
}

if ((DURABLE)) && [[ -z "${BUZZ_BENCH_PG_URL:-}" ]]; then
    # the durable cluster is a side cluster of scripts/pg.sh's: that one must run
    bench_pg_start
    trap cleanup EXIT
    if ! "$ROOT/scripts/pg.sh" durable-url >/dev/null 2>&1; then
        DURABLE_STARTED=1
    fi
    BUZZ_BENCH_PG_URL="$("$ROOT/scripts/pg.sh" durable-start)"
    export BUZZ_BENCH_PG_URL
else
    bench_pg_start
    trap cleanup EXIT
fi

echo "scale.sh: server $BUZZ_BENCH_PG_URL" >&2
"$BUILD/bench/scale" --url "$BUZZ_BENCH_PG_URL" "$@"
