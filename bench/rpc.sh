#!/usr/bin/env bash
# Run the RPC benchmark (bench/rpc.c): builds buzz-backfilld, buzzctl, the demo definitions
# module and the `rpc` program in a Release build tree; starts the private PostgreSQL cluster of
# scripts/pg.sh when it is not running (and stops it again afterwards in that case); creates a
# throwaway database with the demo schema, migrates it, mints a capability token, starts
# buzz-backfilld on it (tcp://127.0.0.1, automatic mode, no workers: it only serves) and runs the
# program against it. Everything is removed at the end. Results go to stdout.
#
# Usage: bench/rpc.sh [rpc options...]   e.g. --requests 50000, --rss-requests 200000
# Environment: BUZZ_BENCH_BUILD (build tree, default <repo>/build-bench),
#              BUZZ_BENCH_PG_URL (use this server instead of scripts/pg.sh's cluster).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUZZ_BENCH_BUILD:-$ROOT/build-bench}"
ID="demo.events.content_len_v1"

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0
fi

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
# shellcheck source=scripts/db-url.sh
. "$ROOT/scripts/db-url.sh"
bench_build rpc.sh buzz-backfilld buzzctl buzz-demo-definitions rpc

TMP="$(mktemp -d /tmp/buzz-rpc-bench.XXXXXX)"
DPID=""
DB="buzz_rpc_bench_$$"
bench_pg_start
SERVER_URL="$BUZZ_BENCH_PG_URL"
DB_URL="$(buzz_db_url "$SERVER_URL" "$DB")"

cleanup()
{
    if [[ -n "$DPID" ]] && kill -0 "$DPID" 2>/dev/null; then
        kill -TERM "$DPID" || true
        wait "$DPID" || true
    fi
    psql -X -q "$SERVER_URL" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true
    rm -rf "$TMP"
    bench_pg_stop
}
trap cleanup EXIT

psql -X -q -v ON_ERROR_STOP=1 "$SERVER_URL" -c "CREATE DATABASE $DB" >/dev/null
psql -X -q -v ON_ERROR_STOP=1 "$DB_URL" -f "$ROOT/examples/demo/schema.sql" >/dev/null
"$BUILD/server/buzz-backfilld" --database-url "$DB_URL" --log-level warn migrate >&2

"$BUILD/client/buzzctl" token keygen --kid bench --secret-out "$TMP/bench.secret" \
    --public-out "$TMP/bench.pub" >/dev/null
"$BUILD/client/buzzctl" token mint --secret "$TMP/bench.secret" --actor bench@local \
    --cap read,readiness --audience bench --ttl 2h >"$TMP/token"

# a free port: the daemon exits at once when it cannot listen; try a few
for try in 1 2 3 4 5; do
    PORT=$((20000 + RANDOM % 30000))
    "$BUILD/server/buzz-backfilld" --database-url "$DB_URL" \
        --listen "tcp://127.0.0.1:$PORT" --modules "$BUILD/examples/buzz-demo-definitions.so" \
        --trusted-keys-file "$TMP/bench.pub" --token-audience bench --threads 8 --workers 0 \
        --auto-backfill on --log-level warn run 2>"$TMP/daemon.log" &
    DPID=$!
    sleep 0.5
    if kill -0 "$DPID" 2>/dev/null; then
        break
    fi
    wait "$DPID" || true
    DPID=""
done
if [[ -z "$DPID" ]]; then
    cat "$TMP/daemon.log" >&2
    echo "rpc.sh: buzz-backfilld did not start" >&2
    exit 1
fi

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')," \
    "$(awk '/MemTotal/ {printf "%.0f GiB RAM", $2 / 1048576}' /proc/meminfo)," \
    "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "server: $(psql -X -A -t "$SERVER_URL" -c 'SHOW server_version')"
"$BUILD/bench/rpc" --url "tcp://127.0.0.1:$PORT" --token-file "$TMP/token" --pg "$DB_URL" \
    --id "$ID" --pid "$DPID" "$@"
