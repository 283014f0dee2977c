#!/usr/bin/env bash
# Run the RPC benchmark (bench/rpc.c): builds buzz-backfilld, buzzctl, the demo definitions
# module and the `rpc` program in a Release build tree; starts the private PostgreSQL cluster of
# scripts/pg.sh when it is not running (and stops it again afterwards in that case); creates a
# throwaway database with the demo schema, migrates it, mints a capability token, starts
# buzz-backfilld on it (tcp://127.0.0.1, automatic mode, no workers: it only serves) and runs the
# program against it. Everything is removed at the end. Results go to stdout.
#
# Usage: bench/rpc.sh [rpc options...]   e.g. --requests 50000, --rss-requests 200000, --rounds 3
# Environment: BUZZ_BENCH_BUILD (build tree, default <repo>/build-bench),
#              BUZZ_BENCH_PG_URL (use this server instead of scripts/pg.sh's cluster),
#              BUZZ_BENCH_BASE_DAEMON (another buzz-backfilld, e.g. the previous commit's: started
#              next to the first on a database of its own with the same rows, migrated by itself,
#              so that a base of an older schema version reads the schema it knows; compared
#              with the first in every round; it loads the demo module of its own build tree,
#              ../examples/ beside its server/, when there is one: the module ABI changes too),
#              BUZZ_BENCH_THREADS (the daemons' transport threads, default 8),
#              BUZZ_BENCH_BASE_THREADS (the base daemon's, default BUZZ_BENCH_THREADS: with
#              BUZZ_BENCH_BASE_DAEMON set to the same binary, compares thread counts in one run),
#              BUZZ_BENCH_PERF (a directory: instead of the series, profile the daemon with perf
#              while it serves Check alone, then Get alone, and print where its CPU goes).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUZZ_BENCH_BUILD:-$ROOT/build-bench}"
ID="demo.events.content_len_v1"

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0
fi

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
# shellcheck source=scripts/db-url.sh
. "$ROOT/scripts/db-url.sh"
bench_build rpc.sh buzz-backfilld buzzctl buzz-demo-definitions rpc

TMP="$(mktemp -d /tmp/buzz-rpc-bench.XXXXXX)"
DPID=""
BPID=""
DB="buzz_rpc_bench_$$"
DB_BASE="${DB}_base"
bench_pg_start
SERVER_URL="$BUZZ_BENCH_PG_URL"
DB_URL="$(buzz_db_url "$SERVER_URL" "$DB")"

cleanup()
{
    local pid
    for pid in "$DPID" "$BPID"; do
        if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" || true
            wait "$pid" || true
        fi
    done
    local db
    for db in "$DB" "$DB_BASE"; do
        psql -X -q "$SERVER_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
    done
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

# start_daemon BINARY LOG THREADS URL MODULE: start a daemon on a free port (it exits at once when
# it cannot
# listen: try a few); sets STARTED_PID and STARTED_PORT.
start_daemon()
{
    local bin="$1" log="$2" threads="$3" url="$4" module="$5"
    STARTED_PID=""
    for _ in 1 2 3 4 5; do
        STARTED_PORT=$((20000 + RANDOM % 30000))
        "$bin" --database-url "$url" \
            --listen "tcp://127.0.0.1:$STARTED_PORT" --modules "$module" \
            --trusted-keys-file "$TMP/bench.pub" --token-audience bench --threads "$threads" --workers 0 \
            --auto-backfill on --log-level warn run 2>"$log" &
        STARTED_PID=$!
        sleep 0.5
        if kill -0 "$STARTED_PID" 2>/dev/null; then
            return 0
        fi
        wait "$STARTED_PID" || true
        STARTED_PID=""
    done
    cat "$log" >&2
    echo "rpc.sh: $bin did not start" >&2
    exit 1
}

MODULE="$BUILD/examples/buzz-demo-definitions.so"
start_daemon "$BUILD/server/buzz-backfilld" "$TMP/daemon.log" "${BUZZ_BENCH_THREADS:-8}" "$DB_URL" \
    "$MODULE"
DPID="$STARTED_PID"
PORT="$STARTED_PORT"
BASE_ARGS=()
if [[ -n "${BUZZ_BENCH_BASE_DAEMON:-}" ]]; then
    BASE_URL="$(buzz_db_url "$SERVER_URL" "$DB_BASE")"
    psql -X -q -v ON_ERROR_STOP=1 "$SERVER_URL" -c "CREATE DATABASE $DB_BASE" >/dev/null
    psql -X -q -v ON_ERROR_STOP=1 "$BASE_URL" -f "$ROOT/examples/demo/schema.sql" >/dev/null
    "$BUZZ_BENCH_BASE_DAEMON" --database-url "$BASE_URL" --log-level warn migrate >&2
    BASE_MODULE="$(dirname "$BUZZ_BENCH_BASE_DAEMON")/../examples/buzz-demo-definitions.so"
    [[ -f "$BASE_MODULE" ]] || BASE_MODULE="$MODULE"
    start_daemon "$BUZZ_BENCH_BASE_DAEMON" "$TMP/base.log" \
        "${BUZZ_BENCH_BASE_THREADS:-${BUZZ_BENCH_THREADS:-8}}" "$BASE_URL" "$BASE_MODULE"
    BPID="$STARTED_PID"
    BASE_ARGS=(--base-url "tcp://127.0.0.1:$STARTED_PORT" --base-pid "$BPID")
fi

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')," \
    "$(awk '/MemTotal/ {printf "%.0f GiB RAM", $2 / 1048576}' /proc/meminfo)," \
    "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "server: $(psql -X -A -t "$SERVER_URL" -c 'SHOW server_version')"
RPC=("$BUILD/bench/rpc" --url "tcp://127.0.0.1:$PORT" --token-file "$TMP/token" --pg "$DB_URL"
    --id "$ID" --pid "$DPID" --module "$BUILD/examples/buzz-demo-definitions.so")
if [[ -z "${BUZZ_BENCH_PERF:-}" ]]; then
    "${RPC[@]}" "${BASE_ARGS[@]}" "$@"
    exit 0
fi

# The profile: each kind of call alone (rpc --only), one round, the daemon sampled by perf with
# DWARF call graphs; bench/perf_breakdown.py sorts the samples by concern.
command -v perf >/dev/null || { echo "rpc.sh: BUZZ_BENCH_PERF needs perf (linux-perf)" >&2; exit 1; }
REQUESTS=20000
HZ=2000
for op in check get; do
    out="$BUZZ_BENCH_PERF/daemon-$op.data"
    mkdir -p "$BUZZ_BENCH_PERF"
    perf record -q -F "$HZ" --call-graph dwarf,16384 -p "$DPID" -o "$out" 2>"$TMP/perf.log" &
    PERF_PID=$!
    sleep 1 # perf attaches asynchronously; the series' warm-up covers the rest
    "${RPC[@]}" --only "$op" --rounds 1 --rss-requests 0 --requests "$REQUESTS"
    kill -INT "$PERF_PID"
    wait "$PERF_PID" || true
    # the daemon served 2 series of REQUESTS after 500 warm-up requests per client (1 and 8)
    echo
    echo "profile of the daemon, $op alone ($out):"
    perf script -i "$out" -F ip,sym,dso 2>/dev/null |
        python3 "$ROOT/bench/perf_breakdown.py" --requests $((2 * REQUESTS + 4500)) --hz "$HZ"
    echo
done
