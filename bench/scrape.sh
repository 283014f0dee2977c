#!/usr/bin/env bash
# Run the scrape benchmark (bench/scrape.c): builds buzz-backfilld, buzzctl, the demo
# definitions module and the `scrape` program in a Release build tree; starts the private
# PostgreSQL cluster of scripts/pg.sh when it is not running (and stops it again afterwards in
# that case); makes a template database with the demo schema, --rows seeded events and the
# engine schema; then runs the program, which copies the template for every run. Everything is
# removed at the end. Results go to stdout.
#
# Usage: bench/scrape.sh [--rows N] [scrape options...]   e.g. --reps 7, --requests 1000
# Environment: BUZZ_BENCH_BUILD (build tree, default <repo>/build-bench),
#              BUZZ_BENCH_PG_URL (use this server instead of scripts/pg.sh's cluster).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUZZ_BENCH_BUILD:-$ROOT/build-bench}"
ROWS=500000

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0
fi
if [[ "${1:-}" == "--rows" ]]; then
    ROWS="$2"
    shift 2
fi

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
# shellcheck source=scripts/db-url.sh
. "$ROOT/scripts/db-url.sh"
bench_build scrape.sh buzz-backfilld buzzctl buzz-demo-definitions scrape

TMP="$(mktemp -d /tmp/buzz-scrape-bench.XXXXXX)"
DB="buzz_scrape_bench_$$"
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
psql -X -q -v ON_ERROR_STOP=1 "$DB_URL" -f "$ROOT/examples/demo/schema.sql" >/dev/null
psql -X -q -v ON_ERROR_STOP=1 -v rows="$ROWS" "$DB_URL" -f "$ROOT/examples/demo/seed.sql" >/dev/null
psql -X -q -v ON_ERROR_STOP=1 "$DB_URL" -c "VACUUM ANALYZE" >/dev/null
"$BUILD/server/buzz-backfilld" --database-url "$DB_URL" --log-level warn migrate >&2

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')," \
    "$(awk '/MemTotal/ {printf "%.0f GiB RAM", $2 / 1048576}' /proc/meminfo)," \
    "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "server: $(psql -X -A -t "$SERVER_URL" -c 'SHOW server_version'); $ROWS seeded events"
"$BUILD/bench/scrape" --daemon "$BUILD/server/buzz-backfilld" --buzzctl "$BUILD/client/buzzctl" \
    --module "$BUILD/examples/buzz-demo-definitions.so" --server "$SERVER_URL" --template "$DB" \
    --dir "$TMP" "$@"
