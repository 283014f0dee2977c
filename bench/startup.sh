#!/usr/bin/env bash
# Run the startup benchmark (bench/startup.c, issue 26): builds buzz-backfilld and the `startup`
# program in a Release build tree; starts the private PostgreSQL cluster of scripts/pg.sh when it
# is not running (and stops it again afterwards in that case); creates a throwaway database,
# migrates it and runs the program, which starts buzz-backfilld on generated definitions
# directories of 1, 1,000 and 10,000 files, and with 1,000 files on an idle database and while four
# other daemons' 16 workers run backfills (a first start, and a restart of a daemon whose rows
# are registered; --load-daemons 1: one other daemon's 4 workers). Everything is removed at the
# end. Results go to stdout.
#
# Usage: bench/startup.sh [startup options...]   e.g. --rounds 5, --load-daemons 1
# Environment: BUZZ_BENCH_BUILD (build tree, default <repo>/build-bench),
#              BUZZ_BENCH_PG_URL (use this server instead of scripts/pg.sh's cluster),
#              BUZZ_BENCH_BASE_DAEMON (another buzz-backfilld, e.g. the previous commit's:
#              measured in the same rounds, side by side).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUZZ_BENCH_BUILD:-$ROOT/build-bench}"

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0
fi

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
# shellcheck source=scripts/db-url.sh
. "$ROOT/scripts/db-url.sh"
bench_build startup.sh buzz-backfilld startup

TMP="$(mktemp -d /tmp/buzz-startup-bench.XXXXXX)"
DB="buzz_startup_bench_$$"
bench_pg_start
SERVER_URL="$BUZZ_BENCH_PG_URL"
DB_URL="$(buzz_db_url "$SERVER_URL" "$DB")"

cleanup()
{
    psql -X -q "$SERVER_URL" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true
    rm -rf "$TMP"
    bench_pg_stop
}
trap cleanup EXIT

psql -X -q -v ON_ERROR_STOP=1 "$SERVER_URL" -c "CREATE DATABASE $DB" >/dev/null
"$BUILD/server/buzz-backfilld" --database-url "$DB_URL" --log-level warn migrate >&2

BASE_ARGS=()
if [[ -n "${BUZZ_BENCH_BASE_DAEMON:-}" ]]; then
    BASE_ARGS=(--base-daemon "$BUZZ_BENCH_BASE_DAEMON")
fi
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')," \
    "$(awk '/MemTotal/ {printf "%.0f GiB RAM", $2 / 1048576}' /proc/meminfo)," \
    "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "server: $(psql -X -A -t "$SERVER_URL" -c 'SHOW server_version')"
"$BUILD/bench/startup" --daemon "$BUILD/server/buzz-backfilld" --db "$DB_URL" --dir "$TMP" \
    "${BASE_ARGS[@]}" "$@"
