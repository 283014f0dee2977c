#!/usr/bin/env bash
# bench/coexist.sh - does a backfill hurt the relay's own load, and does throttling help?
# pgbench's TPC-B-like load runs against the same PostgreSQL server as a real buzz-backfilld
# backfilling demo.events (examples/demo_definitions.c, demo.events.content_len_v1), in three
# phases of the same length, each on a fresh copy of one template database:
#
#   none         pgbench alone (the baseline)
#   unthrottled  pgbench and the backfill with fixed batches (batch_target_ms = 0)
#   throttled    pgbench and the backfill with short worker steps (--step-ms, 20 ms: the
#                backfill yields the CPU in small slices), optionally adaptive batches
#                (--target-ms), and a keys-per-second ceiling at --share of the unthrottled
#                phase's rate
#
# For each it prints OLTP TPS, p50 and p99 latency (from pgbench's per-transaction log) and the
# backfill's keys per second over the phase, then the ratios the goal is stated in:
# throttled p99 / baseline p99 (goal <= 1.25) and throttled rate / unthrottled rate
# (goal >= 0.5). docs/benchmarks.md records runs.
#
# Usage: bench/coexist.sh [--rows N] [--seconds S] [--clients C] [--share F]
#        defaults: 3000000 rows, 20 s a phase, 4 clients, share 0.5, --target-ms 0, --step-ms 20
# Environment: BUZZ_BENCH_BUILD (build tree, default <repo>/build-bench),
#              BUZZ_BENCH_PG_URL (use this server instead of scripts/pg.sh's cluster).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUZZ_BENCH_BUILD:-$ROOT/build-bench}"
ROWS=3000000
SECONDS_PER_PHASE=20
CLIENTS=4
SHARE=0.5
TARGET_MS=0
STEP_MS=20
ID=demo.events.content_len_v1

while (($#)); do
    case "$1" in
    --rows) ROWS="$2"; shift 2 ;;
    --seconds) SECONDS_PER_PHASE="$2"; shift 2 ;;
    --clients) CLIENTS="$2"; shift 2 ;;
    --share) SHARE="$2"; shift 2 ;;
    --target-ms) TARGET_MS="$2"; shift 2 ;;
    --step-ms) STEP_MS="$2"; shift 2 ;;
    -h | --help)
        sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "coexist.sh: unknown argument: $1 (see --help)" >&2
        exit 2
        ;;
    esac
done
PGBENCH="$(command -v pgbench || echo /usr/lib/postgresql/15/bin/pgbench)"
[[ -x "$PGBENCH" ]] || {
    echo "coexist.sh: pgbench not found (package postgresql-15 or postgresql-client-15)" >&2
    exit 1
}

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
# shellcheck source=scripts/db-url.sh
. "$ROOT/scripts/db-url.sh"
bench_build coexist.sh buzz-backfilld buzzctl buzz-demo-definitions

TMP="$(mktemp -d /tmp/buzz-coexist.XXXXXX)"
TEMPLATE="buzz_coexist_tmpl_$$"
bench_pg_start
SERVER_URL="$BUZZ_BENCH_PG_URL"
DAEMON=""

cleanup()
{
    if [[ -n "$DAEMON" ]]; then
        kill -TERM "$DAEMON" 2>/dev/null || true
        wait "$DAEMON" 2>/dev/null || true
    fi
    for db in "$TEMPLATE" buzz_coexist_phase_$$; do
        psql -X -q "$SERVER_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 ||
            true
    done
    rm -rf "$TMP"
    bench_pg_stop
}
trap cleanup EXIT

psql_q() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }

echo "coexist: template: $ROWS demo events, pgbench scale 10" >&2
psql_q "$SERVER_URL" -c "CREATE DATABASE $TEMPLATE" >/dev/null
TMPL_URL="$(buzz_db_url "$SERVER_URL" "$TEMPLATE")"
psql_q "$TMPL_URL" -f "$ROOT/examples/demo/schema.sql" >/dev/null
psql_q -v rows="$ROWS" "$TMPL_URL" -f "$ROOT/examples/demo/seed.sql" >/dev/null
"$PGBENCH" -q -i -s 10 "$TMPL_URL" >/dev/null 2>&1
env BUZZ_BACKFILL_DATABASE_URL="$TMPL_URL" "$BUILD/server/buzz-backfilld" migrate >/dev/null 2>&1
psql_q "$TMPL_URL" -c "VACUUM ANALYZE" >/dev/null

# phase NAME EXTRA_CONFIG: prints "tps p50_ms p99_ms rate" on stdout
phase()
{
    local name="$1" extra="$2" db="buzz_coexist_phase_$$" url conf before after t0 t1 out
    psql_q "$SERVER_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null
    psql_q "$SERVER_URL" -c "CREATE DATABASE $db TEMPLATE $TEMPLATE" >/dev/null
    url="$(buzz_db_url "$SERVER_URL" "$db")"
    psql_q "$url" -c "CHECKPOINT" >/dev/null
    if [[ -n "$extra" ]]; then
        conf="$TMP/$name.conf"
        cat >"$conf" <<CONF
database_url = '$url'
listen = 'ipc://$TMP/admin.sock'
ipc_boundary = on
workers = 1
modules = '$BUILD/examples/buzz-demo-definitions.so'
log_level = warn
$extra
CONF
        "$BUILD/server/buzz-backfilld" --config "$conf" run 2>"$TMP/$name.log" &
        DAEMON=$!
        "$BUILD/client/buzzctl" --url "ipc://$TMP/admin.sock" ready --wait-ready --timeout 30s \
            >/dev/null
        "$BUILD/client/buzzctl" --url "ipc://$TMP/admin.sock" start "$ID" >/dev/null
    fi
    before="$(psql -X -qtAc "SELECT coalesce(sum(rows_covered), 0) FROM buzz_backfill.backfill" "$url")"
    t0="$(date +%s.%N)"
    rm -f "$TMP"/pgbench_log.*
    out="$(cd "$TMP" && "$PGBENCH" -n -c "$CLIENTS" -j 2 -T "$SECONDS_PER_PHASE" -l "$url" 2>&1)"
    t1="$(date +%s.%N)"
    after="$(psql -X -qtAc "SELECT coalesce(sum(rows_covered), 0) FROM buzz_backfill.backfill" "$url")"
    local state
    state="$(psql -X -qtAc "SELECT coalesce(string_agg(state, ','), '-') FROM buzz_backfill.backfill
                            WHERE id = '$ID'" "$url")"
    if [[ -n "$DAEMON" ]]; then
        kill -TERM "$DAEMON"
        wait "$DAEMON" || true
        DAEMON=""
    fi
    [[ "$state" == running || "$state" == - ]] ||
        echo "coexist: $name: the backfill left running during the phase ($state): use more --rows" >&2
    local tps
    tps="$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | head -n 1)"
    # the third field of pgbench's log is each transaction's latency in microseconds
    cat "$TMP"/pgbench_log.* | awk '{print $3}' | sort -n >"$TMP/lat"
    local n p50 p99
    n="$(wc -l <"$TMP/lat")"
    p50="$(sed -n "$(((n + 1) / 2))p" "$TMP/lat")"
    p99="$(sed -n "$(((n * 99 + 99) / 100))p" "$TMP/lat")"
    awk -v tps="$tps" -v p50="$p50" -v p99="$p99" -v rows="$((after - before))" \
        -v t0="$t0" -v t1="$t1" \
        'BEGIN { printf "%.1f %.2f %.2f %.0f\n", tps, p50 / 1000, p99 / 1000, rows / (t1 - t0) }'
}

printf 'coexist: %d s a phase, %d pgbench clients, 2 cores shared by PostgreSQL, pgbench and the daemon\n' \
    "$SECONDS_PER_PHASE" "$CLIENTS"
read -r tps0 p50_0 p99_0 _ < <(phase none "")
read -r tps1 p50_1 p99_1 rate1 < <(phase unthrottled "batch_target_ms = 0")
ceiling="$(awk -v r="$rate1" -v s="$SHARE" 'BEGIN { printf "%d", r * s }')"
read -r tps2 p50_2 p99_2 rate2 < <(phase throttled "batch_target_ms = $TARGET_MS
step_ms = $STEP_MS
max_rows_per_second = $ceiling")
printf '%-12s %10s %10s %10s %14s\n' phase "OLTP tps" "p50 ms" "p99 ms" "backfill keys/s"
printf '%-12s %10s %10s %10s %14s\n' none "$tps0" "$p50_0" "$p99_0" -
printf '%-12s %10s %10s %10s %14s\n' unthrottled "$tps1" "$p50_1" "$p99_1" "$rate1"
printf '%-12s %10s %10s %10s %14s\n' throttled "$tps2" "$p50_2" "$p99_2" "$rate2"
awk -v b="$p99_0" -v u="$p99_1" -v t="$p99_2" -v r1="$rate1" -v r2="$rate2" -v c="$ceiling" \
    'BEGIN {
        printf "unthrottled p99 / baseline p99: %.2f\n", u / b
        printf "throttled p99 / baseline p99:   %.2f (goal <= 1.25)\n", t / b
        printf "throttled rate / unthrottled:   %.2f (goal >= 0.50; ceiling %d keys/s)\n", r2 / r1, c
    }'
