#!/usr/bin/env bash
# bench/coexist.sh - does a backfill hurt the relay's own load, and does throttling help?
# A relay-shaped load (--load-kind relay, the default: inserts of new events, reads of an
# author's and of a kind's recent events, updates of a few existing rows, all on demo.events,
# which carries a relay's two extra indexes) or pgbench's TPC-B-like load (--load-kind tpcb, on
# its own tables) runs against the same PostgreSQL server as a real buzz-backfilld backfilling
# demo.events (examples/demo_definitions.c, demo.events.content_len_v1), each phase on a fresh
# copy of one template database. The relay load is driven by bench/relayload (--driver
# relayload, the default), which reports the relay's own latency the way a relay would: each
# --window-ms window's p99 written into buzz_canary.health; --driver pgbench runs it as
# pgbench scripts instead (and tpcb always is). "The load" below is whichever drives it.
#
#   capacity     the load flat out, to size the offered load (skipped with --load 0)
#   none         the load alone at the offered rate (the baseline)
#   unthrottled  pgbench and the backfill with fixed batches (batch_target_ms = 0)
#   throttled    pgbench and the backfill with short worker steps (--step-ms), optionally
#                adaptive batches (--target-ms), and a keys-per-second ceiling at --share of the
#                same round's unthrottled rate
#   by hand      pgbench and the same repair by a hand-written PL/pgSQL loop (keyset batches
#                of the definition's size, each committed), paced to the throttled phase's
#                keys per second: what the work itself costs, without the engine
#   control      pgbench and a plain CPU burner in one PostgreSQL session, no backfill, using
#                about the CPU the throttled backfill used (its backend and the daemon): what
#                any consumer of that much CPU costs this machine's OLTP latency
#   controller   the load and the backfill with no ceiling but the rate controller
#                (throttle_latency_target_ms), its signal the relay's own windows, read every
#                50 ms: target --latency-factor (1.25) times the 90th percentile of the
#                windows in this round's none phase (docs/throttling.md "holding a latency
#                target"); the rate it leaves is reported
#   none+canary  with --driver pgbench only: pgbench alone with bench/canary beside it (a
#                timed small read every 5 ms, each window's p99 written to buzz_canary.health,
#                standing in for the relay's report pgbench cannot make); the 90th percentile of
#                those windows is then the controller's baseline
#
# --pin (as root, with the server on this machine) emulates a database host whose relay load
# leaves a core free: PostgreSQL's postmaster, its background processes and every backend it
# forks (the OLTP sessions', the canary's) on CPU 0, and the backfill's backends
# (pg_stat_activity.application_name buzz-backfill..., and the by-hand loop's and the burner's
# sessions) and the daemon on CPU 1, re-pinned every half second. The load's client stands for
# the relay's application servers, which have hosts of their own: relayload goes to CPU 1 at
# real-time priority (chrt -f), so it runs the moment it is woken and measures the database,
# not its own wait for a CPU; pgbench (and the canary) stay on CPU 0 as before; --driver-cpu
# 0|1 chooses. The placement is printed for each phase and the server's processes get every
# CPU back at the end. Without root (or taskset, or two CPUs) it says so and runs unpinned.
# --durable runs on scripts/pg.sh's durable side cluster (fsync, full_page_writes and
# synchronous_commit on) instead of the private cluster (fsync off). During every phase
# pg_stat_activity is sampled every 100 ms and the active sessions' wait events are summed by
# group (relay, backfill, other): which shared resource sets the tail.
#
# The OLTP load is open (pgbench --rate at --load times the capacity phase's TPS, latency counted
# from each transaction's scheduled start), as a relay's clients are: a closed loop of clients
# flat out (--load 0) measures the CPU share the clients get, and any other consumer lowers it.
# For each phase it prints OLTP TPS, p50 and p99 latency (pgbench's per-transaction log), the
# backfill's keys per second, the machine's idle CPU and the CPU the backfill (or the burner)
# used, the WAL the server wrote per second (pg_current_wal_lsn() before and after), then the
# goal's ratios: unthrottled p99 / baseline p99 (the bench's sensitivity: it says
# so when that is not clearly above 1), throttled p99 / baseline p99 (goal <= 1.25), throttled
# rate / unthrottled rate (goal >= 0.5), the by-hand and control p99 / baseline p99 beside them,
# and the controller's p99 / baseline p99 with the rate it left, and the WAL bytes a key cost
# (a phase's WAL per second beyond the none phase's, over its keys per second): with durability
# on, the relay's commits wait for the flush of that WAL too (docs/benchmarks.md).
# The CPU columns need the server on this machine (scripts/pg.sh's cluster). docs/benchmarks.md
# records runs.
#
# Usage: bench/coexist.sh [--rows N] [--seconds S] [--clients C] [--load F] [--share F]
#                         [--target-ms MS] [--step-ms MS] [--rounds N] [--no-control]
#                         [--no-latency] [--latency-factor F] [--window-ms MS] [--pin]
#                         [--load-kind relay|tpcb] [--driver relayload|pgbench]
#                         [--driver-cpu 0|1] [--durable [--wal-parent DIR]] [--traces DIR]
#                         [--server-set 'NAME = VALUE']... [--backfill-pgoptions OPTS]
#                         [--throttle-conf 'KEY = VALUE']... [--fillfactor N]
#        --fillfactor N: demo.events rewritten with that fillfactor in the template (free room
#        in every page, so the backfill's updates can be HOT: the new row version on the same
#        page, no index entries; the relay's inserts then fill pages to N % too)
#        --throttle-conf: more daemon configuration for the throttled and controller phases,
#        e.g. 'batch_max = 500' or a throttle_* signal
#        --traces DIR: relayload's windows of every phase (end ms, p99 ms, transactions) in
#        DIR/PHASE.ROUND
#        --server-set 'NAME = VALUE': ALTER SYSTEM on the server for the run (reset at the
#        end; only settings a reload applies, e.g. 'wal_compression = lz4')
#        --wal-parent DIR (with --durable): the durable cluster's pg_wal in a fresh directory
#        under DIR, e.g. /dev/shm: a diagnostic of a WAL device whose flush takes microseconds
#        (a battery-backed write cache, NVRAM); tmpfs is not durable, so such a run is never
#        the goal's measurement (the report says so on its server line)
#        --backfill-pgoptions OPTS: PGOPTIONS for every session of the daemon and of the by-hand
#        loop, e.g. '-c synchronous_commit=off' (an experiment: every write of the daemon's,
#        its lifecycle and audit too, then stops waiting for the WAL flush)
#        defaults: 3000000 rows, 30 s a phase, 4 clients, load 0.3, share 0.55, target 0,
#        step 20 ms, window 200 ms, relay load, unpinned, 1 round (--rounds N: N rounds of
#        every phase interleaved, each round's unthrottled phase first, for its ceiling; the
#        ratios use the medians)
# Environment: BUZZ_BENCH_BUILD (build tree, default <repo>/build-bench),
#              BUZZ_BENCH_PG_URL (use this server instead of scripts/pg.sh's cluster).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUZZ_BENCH_BUILD:-$ROOT/build-bench}"
ROWS=3000000
SECONDS_PER_PHASE=30
CLIENTS=4
LOAD=0.3
SHARE=0.55
TARGET_MS=0
STEP_MS=20
CONTROL=1
LATENCY=1
LATENCY_FACTOR=1.25
WITH_CANARY=0
ROUNDS=1
WINDOW_MS=200
PIN=0
LOAD_KIND=relay
DRIVER=""
DURABLE=0
WAL_PARENT=""
TRACES=""
SERVER_SETS=()
BACKFILL_PGOPTIONS=""
DRIVER_CPU=""
THROTTLE_CONF=""
FILLFACTOR=""
OFFERED=0 # the relay's offered transactions a second (0: a closed loop flat out)
ID=demo.events.content_len_v1

while (($#)); do
    case "$1" in
    --rows) ROWS="$2"; shift 2 ;;
    --seconds) SECONDS_PER_PHASE="$2"; shift 2 ;;
    --clients) CLIENTS="$2"; shift 2 ;;
    --share) SHARE="$2"; shift 2 ;;
    --target-ms) TARGET_MS="$2"; shift 2 ;;
    --step-ms) STEP_MS="$2"; shift 2 ;;
    --load) LOAD="$2"; shift 2 ;;
    --no-control) CONTROL=0; shift ;;
    --no-latency) LATENCY=0; shift ;;
    --latency-factor) LATENCY_FACTOR="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --window-ms) WINDOW_MS="$2"; shift 2 ;;
    --pin) PIN=1; shift ;;
    --durable) DURABLE=1; shift ;;
    --wal-parent) WAL_PARENT="$2"; shift 2 ;;
    --traces) TRACES="$2"; shift 2 ;;
    --server-set) SERVER_SETS+=("$2"); shift 2 ;;
    --backfill-pgoptions) BACKFILL_PGOPTIONS="$2"; shift 2 ;;
    --load-kind) LOAD_KIND="$2"; shift 2 ;;
    --driver) DRIVER="$2"; shift 2 ;;
    --driver-cpu) DRIVER_CPU="$2"; shift 2 ;;
    --throttle-conf) THROTTLE_CONF+="$2"$'\n'; shift 2 ;;
    --fillfactor) FILLFACTOR="$2"; shift 2 ;;
    -h | --help)
        awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"
        exit 0
        ;;
    *)
        echo "coexist.sh: unknown argument: $1 (see --help)" >&2
        exit 2
        ;;
    esac
done
[[ "$LOAD_KIND" == relay || "$LOAD_KIND" == tpcb ]] || {
    echo "coexist.sh: --load-kind is relay or tpcb" >&2
    exit 2
}
[[ -z "$FILLFACTOR" || ("$FILLFACTOR" =~ ^[0-9]+$ && FILLFACTOR -ge 10 && FILLFACTOR -le 100) ]] || {
    echo "coexist.sh: --fillfactor is 10 to 100" >&2
    exit 2
}
[[ -z "$WAL_PARENT" || ($DURABLE == 1 && -d "$WAL_PARENT" && -z "${BUZZ_BENCH_PG_URL:-}") ]] || {
    echo "coexist.sh: --wal-parent needs --durable, an existing directory and no BUZZ_BENCH_PG_URL" >&2
    exit 2
}
[[ -n "$DRIVER" ]] || { [[ "$LOAD_KIND" == relay ]] && DRIVER=relayload || DRIVER=pgbench; }
[[ "$DRIVER" == pgbench || ("$DRIVER" == relayload && "$LOAD_KIND" == relay) ]] || {
    echo "coexist.sh: --driver is relayload (relay load only) or pgbench" >&2
    exit 2
}
[[ -n "$DRIVER_CPU" ]] || { [[ "$DRIVER" == relayload ]] && DRIVER_CPU=1 || DRIVER_CPU=0; }
[[ "$DRIVER_CPU" == 0 || "$DRIVER_CPU" == 1 ]] || {
    echo "coexist.sh: --driver-cpu is 0 or 1" >&2
    exit 2
}
PGBENCH="$(command -v pgbench || echo /usr/lib/postgresql/15/bin/pgbench)"
[[ "$DRIVER" == relayload || -x "$PGBENCH" ]] || {
    echo "coexist.sh: pgbench not found (package postgresql-15 or postgresql-client-15)" >&2
    exit 1
}

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
# shellcheck source=scripts/db-url.sh
. "$ROOT/scripts/db-url.sh"
bench_build coexist.sh buzz-backfilld buzzctl buzz-demo-definitions canary relayload

TMP="$(mktemp -d /tmp/buzz-coexist.XXXXXX)"
TEMPLATE="buzz_coexist_tmpl_$$"
DURABLE_STARTED=0
if ((DURABLE)) && [[ -z "${BUZZ_BENCH_PG_URL:-}" ]]; then
    # production durability: scripts/pg.sh's side cluster with fsync, full_page_writes and
    # synchronous_commit on (it needs the private cluster running)
    if "$ROOT/scripts/pg.sh" durable-url >/dev/null 2>&1; then
        [[ -z "$WAL_PARENT" ]] || {
            echo "coexist.sh: --wal-parent: the durable cluster runs already (scripts/pg.sh durable-stop)" >&2
            rm -rf "$TMP"
            exit 2
        }
    else
        DURABLE_STARTED=1
    fi
    bench_pg_start
    BUZZ_BENCH_PG_URL="$(BUZZ_PG_DURABLE_WAL_PARENT="$WAL_PARENT" "$ROOT/scripts/pg.sh" durable-start)"
else
    bench_pg_start
fi
SERVER_URL="$BUZZ_BENCH_PG_URL"
COPY_STRATEGY=""
(($(psql -X -qtAc 'SHOW server_version_num' "$SERVER_URL") < 150000)) || COPY_STRATEGY="STRATEGY FILE_COPY"
[[ -z "$TRACES" ]] || mkdir -p "$TRACES"
DAEMON=""

POSTMASTER=""
cleanup()
{
    stop_sampler
    if ((PIN)) && [[ -n "$POSTMASTER" ]]; then # every CPU back to the server's processes
        local all="0-$(($(nproc) - 1))" p
        for p in "$POSTMASTER" $(pgrep -P "$POSTMASTER" || true); do
            taskset -a -pc "$all" "$p" >/dev/null 2>&1 || true
        done
    fi
    if [[ -n "$DAEMON" ]]; then
        kill -TERM "$DAEMON" 2>/dev/null || true
        wait "$DAEMON" 2>/dev/null || true
    fi
    for db in "$TEMPLATE" buzz_coexist_phase_$$; do
        psql -X -q "$SERVER_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 ||
            true
    done
    local set
    if [[ -n "${SERVER_URL:-}" ]] && ((${#SERVER_SETS[@]})); then # the server's settings back
        for set in "${SERVER_SETS[@]}"; do
            psql -X -q "$SERVER_URL" -c "ALTER SYSTEM RESET ${set%%=*}" >/dev/null 2>&1 || true
        done
        psql -X -qtAc "SELECT pg_reload_conf()" "$SERVER_URL" >/dev/null 2>&1 || true
    fi
    rm -rf "$TMP"
    if ((DURABLE_STARTED)); then
        "$ROOT/scripts/pg.sh" durable-stop >&2 || true
    fi
    bench_pg_stop
}
trap cleanup EXIT

psql_q() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }

# --server-set: for the run only (cleanup resets them)
for set in ${SERVER_SETS[@]+"${SERVER_SETS[@]}"}; do
    [[ "$set" =~ ^[[:space:]]*([a-z_]+)[[:space:]]*=[[:space:]]*([A-Za-z0-9_.]+)[[:space:]]*$ ]] || {
        echo "coexist.sh: --server-set '$set': not NAME = VALUE" >&2
        exit 2
    }
    psql_q "$SERVER_URL" -c "ALTER SYSTEM SET ${BASH_REMATCH[1]} = '${BASH_REMATCH[2]}'" >/dev/null
done
((${#SERVER_SETS[@]} == 0)) || psql_q -qtA "$SERVER_URL" -c "SELECT pg_reload_conf()" >/dev/null

# --pin: root, taskset, two CPUs and the server's processes on this machine (a backend's PID in
# /proc whose parent is the postmaster); otherwise say why and run unpinned
SAMPLER=""
stop_sampler()
{
    if [[ -n "$SAMPLER" ]]; then
        kill "$SAMPLER" 2>/dev/null || true
        wait "$SAMPLER" 2>/dev/null || true
        SAMPLER=""
    fi
}
ON0=() ON1=() DRV=()
if ((PIN)); then
    why=""
    backend="$(psql -X -qtAc "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'" \
        "$SERVER_URL")"
    if [[ "$(id -u)" != 0 ]]; then
        why="not root"
    elif ! command -v taskset >/dev/null; then
        why="no taskset"
    elif (($(nproc) < 2)); then
        why="fewer than two CPUs"
    elif [[ -z "$backend" || ! -r "/proc/$backend/stat" ]]; then
        why="the server is not on this machine"
    fi
    if [[ -n "$why" ]]; then
        echo "coexist: --pin: $why; running unpinned (every process on every CPU)" >&2
        PIN=0
    else
        POSTMASTER="$(awk '{ print $4 }' "/proc/$backend/stat")" # the checkpointer's parent
        # the postmaster first: what it forks from now on (backends, autovacuum) starts on CPU 0
        for p in "$POSTMASTER" $(pgrep -P "$POSTMASTER"); do
            taskset -a -pc 0 "$p" >/dev/null
        done
        ON0=(taskset -c 0) ON1=(taskset -c 1)
        # the relay's client stands for the relay's application servers, on hosts of their own:
        # on CPU 1 it runs at real-time priority, so it runs as soon as it is woken and what it
        # measures is the database's latency, not its own wait for a CPU the backfill holds
        if [[ "$DRIVER_CPU" == 1 ]] && command -v chrt >/dev/null; then
            DRV=(taskset -c 1 chrt -f 10)
        else
            DRV=(taskset -c "$DRIVER_CPU")
        fi
    fi
fi

tables=""
[[ "$LOAD_KIND" != tpcb ]] || tables=", pgbench scale 10"
[[ -z "$FILLFACTOR" ]] || tables+=", demo.events at fillfactor $FILLFACTOR"
echo "coexist: template: $ROWS demo events$tables" >&2
psql_q "$SERVER_URL" -c "CREATE DATABASE $TEMPLATE" >/dev/null
TMPL_URL="$(buzz_db_url "$SERVER_URL" "$TEMPLATE")"
psql_q "$TMPL_URL" -f "$ROOT/examples/demo/schema.sql" >/dev/null
psql_q -v rows="$ROWS" "$TMPL_URL" -f "$ROOT/examples/demo/seed.sql" >/dev/null
if [[ -n "$FILLFACTOR" ]]; then
    psql_q "$TMPL_URL" -c "ALTER TABLE demo.events SET (fillfactor = $FILLFACTOR)" \
        -c "VACUUM FULL demo.events" >/dev/null
fi
[[ "$LOAD_KIND" != tpcb ]] || "$PGBENCH" -q -i -s 10 "$TMPL_URL" >/dev/null 2>&1 # its own tables
if [[ "$LOAD_KIND" == relay ]]; then
    # a relay's read paths: an author's recent events, a kind's recent events (every one of
    # them also updated by each non-HOT update of the backfill)
    psql_q "$TMPL_URL" -c "CREATE INDEX events_pubkey_created ON demo.events (pubkey, created_at DESC);
                           CREATE INDEX events_kind_created ON demo.events (kind, created_at DESC)" >/dev/null
fi
if [[ "$DRIVER" == relayload ]]; then
    # the table the relay's client reports its windows' p99 into (bench/relayload --health),
    # there before a daemon reads it; its row is stale until the client writes
    psql_q "$TMPL_URL" -c "CREATE SCHEMA buzz_canary" \
        -c "CREATE TABLE buzz_canary.health (p99_ms double precision NOT NULL, at timestamptz NOT NULL)" \
        -c "INSERT INTO buzz_canary.health VALUES (0, now() - interval '1 day')" >/dev/null
fi
env BUZZ_BACKFILL_DATABASE_URL="$TMPL_URL" "$BUILD/server/buzz-backfilld" migrate >/dev/null 2>&1
psql_q "$TMPL_URL" -c "VACUUM ANALYZE" >/dev/null

# CPU accounting from /proc (the server on this machine; "-" otherwise). cpu_idle: the
# machine's idle and iowait jiffies and all jiffies; cpu_of PID...: user and system jiffies of
# those processes (the ones that are gone count 0).
TICKS="$(getconf CLK_TCK 2>/dev/null || echo 100)"
cpu_idle()
{
    awk '$1 == "cpu" { t = 0; for (i = 2; i <= NF; i++) t += $i; print $5 + $6, t }' /proc/stat
}
cpu_of()
{
    local pid sum=0 f
    for pid in "$@"; do
        f="$(cat "/proc/$pid/stat" 2>/dev/null || true)"
        [[ -n "$f" ]] || continue
        f="${f##*) }" # fields after the command name; utime and stime are the 12th and 13th
        read -r -a v <<<"$f"
        sum=$((sum + v[11] + v[12]))
    done
    echo "$sum"
}
# The relay-shaped load: pgbench scripts with weights (inserts of new events, with the derived
# columns the new write path fills; an author's and a kind's 20 most recent events; an update of
# one existing event, as a replaceable event is rewritten).
LOAD_ARGS=()
if [[ "$LOAD_KIND" == relay && "$DRIVER" == pgbench ]]; then
    cat >"$TMP/insert.sql" <<'SQL'
\set a random(0, 4999)
\set k random(0, 9)
INSERT INTO demo.events (event_id, pubkey, created_at, kind, content, tags, content_len,
                         pubkey_hex, tag_count)
VALUES (sha256(convert_to(:client_id || ':' || clock_timestamp()::text || random()::text, 'UTF8')),
        sha256(convert_to('author:' || :a, 'UTF8')), date_trunc('second', now()),
        CASE WHEN :k < 6 THEN 1 WHEN :k < 9 THEN 7 ELSE 6 END, 'gm from the coexist bench', '[]',
        25, encode(sha256(convert_to('author:' || :a, 'UTF8')), 'hex'), 0);
SQL
    cat >"$TMP/read_author.sql" <<'SQL'
\set a random(0, 4999)
SELECT id, created_at, kind FROM demo.events
 WHERE pubkey = sha256(convert_to('author:' || :a, 'UTF8')) ORDER BY created_at DESC LIMIT 20;
SQL
    cat >"$TMP/read_kind.sql" <<'SQL'
\set k random(0, 2)
SELECT id, created_at FROM demo.events
 WHERE kind = CASE :k WHEN 0 THEN 1 WHEN 1 THEN 7 ELSE 0 END ORDER BY created_at DESC LIMIT 20;
SQL
    cat >"$TMP/update.sql" <<SQL
\\set id random(1, $ROWS)
UPDATE demo.events SET tags = tags || '[["client", "coexist"]]'::jsonb WHERE id = :id;
SQL
    LOAD_ARGS=(-f "$TMP/insert.sql@3" -f "$TMP/read_author.sql@4" -f "$TMP/read_kind.sql@2"
        -f "$TMP/update.sql@1")
fi

# Which sessions are whose, as SQL conditions on pg_stat_activity: the backfill's side (the
# daemon's sessions, the by-hand loop's and the burner's) and the relay's (pgbench, relayload)
IS_BACKFILL="(application_name LIKE 'buzz-backfill%'
              OR application_name IN ('buzz-coexist-handloop', 'buzz-coexist-control'))"
IS_RELAY="application_name IN ('pgbench', 'buzz-coexist-relay')"

# pin_loop URL: every half second, the backfill's side on CPU 1 (the daemon's backends, the
# by-hand loop's and the burner's sessions, the daemon's threads); the first pass writes the
# placement to $TMP/placement
pin_loop()
{
    local url="$1" first=1 p pids
    while kill -0 $$ 2>/dev/null; do
        pids="$(psql -X -qtAc "SELECT pid FROM pg_stat_activity WHERE $IS_BACKFILL" "$url" \
            2>/dev/null)" || return 0
        for p in $pids ${DAEMON:-}; do
            taskset -a -pc 1 "$p" >/dev/null 2>&1 || true
        done
        if ((first)); then
            first=0
            psql -X -qtAc "SELECT string_agg(CASE WHEN $IS_BACKFILL THEN 'backfill'
                                 WHEN $IS_RELAY THEN 'oltp'
                                 WHEN backend_type = 'client backend' THEN 'other'
                                 ELSE replace(backend_type, ' ', '_') END || ' ' || pid, E'\\n')
                           FROM pg_stat_activity WHERE pid <> pg_backend_pid()" "$url" |
                while read -r what pid; do
                    printf '%s:%s ' "$what" \
                        "$(taskset -pc "$pid" 2>/dev/null | sed 's/.*: //' || echo '?')"
                done | tr ' ' '\n' | sort | uniq -c |
                awk -v pm="$POSTMASTER" -v d="${DAEMON:-}" '
                    NF { split($2, a, ":"); s = s sprintf("%s%s x%d on CPU %s", s ? ", " : "", a[1], $1, a[2]) }
                    END { printf "postmaster %s on CPU 0; %s", pm, s
                          if (d != "") printf "; daemon %s on CPU 1", d
                          printf "\n" }' >"$TMP/placement"
        fi
        sleep 0.5
    done
}

# sampler URL FILE: pg_stat_activity every 100 ms in one session: the group and the wait event
# (CPU: active with none) of every active session of the phase's database
sampler()
{
    local url="$1" file="$2"
    while kill -0 $$ 2>/dev/null; do
        echo "SELECT CASE WHEN $IS_RELAY THEN 'relay' WHEN $IS_BACKFILL THEN 'backfill'
                      ELSE 'other' END,
                      coalesce(wait_event_type || ':' || wait_event, 'CPU')
                 FROM pg_stat_activity WHERE state = 'active' AND pid <> pg_backend_pid()
                  AND datname = current_database();"
        sleep 0.1
    done | psql -X -qtA -F ' ' "$url" >"$file" 2>/dev/null
}

# waits_summary FILE: per group, the share of samples of its four most frequent wait events
waits_summary()
{
    awk 'NF == 2 { n[$1]++; c[$1 " " $2]++ }
         END {
             for (g in n) {
                 line = sprintf("%s (%d samples):", g, n[g])
                 for (k = 0; k < 4; k++) {
                     best = ""; bv = 0
                     for (key in c) {
                         split(key, p, " ")
                         if (p[1] == g && c[key] > bv) { best = key; bv = c[key] }
                     }
                     if (best == "") break
                     split(best, p, " ")
                     line = line sprintf(" %s %.0f%%", p[2], 100 * bv / n[g])
                     delete c[best]
                 }
                 print line
             }
         }' "$1" | sort | paste -sd ';' | sed 's/;/; /g'
}

# backend PIDs of the sessions whose application_name starts with $2
backends()
{
    psql -X -qtAc "SELECT pid FROM pg_stat_activity WHERE application_name LIKE '$2%'" "$1"
}

# side_session NAME: run the SQL on stdin in the background in a session named
# buzz-coexist-NAME (bounded by a statement timeout past the phase, cancelled after it); sets
# SIDE_PID (psql) and SIDE_BACKEND (its backend's PID)
side_session()
{
    local sql
    sql="$(cat)"
    printf "SET statement_timeout = '%ss';\n%s\n" "$((SECONDS_PER_PHASE + 30))" "$sql" |
        PGAPPNAME="buzz-coexist-$1" PGOPTIONS="$BACKFILL_PGOPTIONS" psql -X -q "$url" >/dev/null 2>&1 &
    SIDE_PID=$!
    SIDE_BACKEND=""
    for _ in $(seq 100); do
        SIDE_BACKEND="$(backends "$url" "buzz-coexist-$1")"
        [[ -z "$SIDE_BACKEND" ]] || return 0
    done
    echo "coexist: the $1 session did not start" >&2
    exit 1
}

# phase NAME KIND [CONFIG|SHARE]: KIND none (pgbench alone), backfill (a daemon with the extra
# configuration CONFIG) or control (a CPU burner at SHARE of one core). Prints
# "tps p50_ms p99_ms keys_per_s idle_pct cpu_cores wal_bytes_per_s" on stdout (the WAL the
# whole server wrote during the phase, the relay's load included).
phase()
{
    local name="$1" kind="$2" extra="${3:-}" db="buzz_coexist_phase_$$" url conf before after
    local t0 t1 out pids="" burner="" idle0 idle1 own0=0 own1=0 lsn0 lsn1
    psql_q "$SERVER_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null
    # FILE_COPY (PostgreSQL 15): the files copied and synced, not the whole database through
    # the WAL (the default WAL_LOG), which left the server writing out seconds after it
    psql_q "$SERVER_URL" -c "CREATE DATABASE $db TEMPLATE $TEMPLATE $COPY_STRATEGY" >/dev/null
    url="$(buzz_db_url "$SERVER_URL" "$db")"
    psql_q "$url" -c "CHECKPOINT" >/dev/null
    # and the machine's dirty pages written out: with fsync off the copies of earlier phases
    # stay dirty in the page cache (1.8 GB seen) until the kernel writes them back, and then
    # throttles every writer, the relay's WAL writes included, for hundreds of ms
    sync
    local canary=""
    if ((WITH_CANARY)); then
        local probe=accounts
        [[ "$LOAD_KIND" != relay ]] || probe=relay
        "${ON0[@]}" "$BUILD/bench/canary" "$url" --every-ms 5 --window-ms "$WINDOW_MS" \
            --probe "$probe" >"$TMP/canary.out" 2>"$TMP/canary.err" &
        canary=$!
        for _ in $(seq 200); do
            [[ "$(psql -X -qtAc "SELECT to_regclass('buzz_canary.health') IS NOT NULL" "$url")" != t ]] ||
                break
        done
        kill -0 "$canary" 2>/dev/null || {
            echo "coexist: the canary did not start: $(cat "$TMP/canary.err")" >&2
            exit 1
        }
    fi
    if [[ "$kind" == backfill ]]; then
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
        PGOPTIONS="$BACKFILL_PGOPTIONS" "${ON1[@]}" "$BUILD/server/buzz-backfilld" --config "$conf" run \
            2>"$TMP/$name.log" &
        DAEMON=$!
        "$BUILD/client/buzzctl" --url "ipc://$TMP/admin.sock" ready --wait-ready --timeout 30s \
            >/dev/null
        "$BUILD/client/buzzctl" --url "ipc://$TMP/admin.sock" start "$ID" >/dev/null
        pids="$DAEMON $(backends "$url" buzz-backfill | tr '\n' ' ')"
    elif [[ "$kind" == control ]]; then
        # burn $extra of one core in cycles of about 20 ms of CPU (a fixed amount of work, timed
        # on the idle machine between phases) and the rest of the cycle asleep; cancelled after
        # the phase (a statement timeout bounds it if the bench dies)
        local per_ms work sleep_ms
        per_ms="$(psql -X -q "$url" -c "DO \$\$ DECLARE t0 timestamptz := clock_timestamp(); n bigint;
            BEGIN SELECT count(*) INTO n FROM generate_series(1, 2000000);
            RAISE NOTICE 'per_ms %', floor(n / (1000 * extract(epoch FROM clock_timestamp() - t0)));
            END \$\$" 2>&1 | sed -n 's/.*per_ms \([0-9]*\).*/\1/p')"
        [[ -n "$per_ms" ]] || { echo "coexist: could not time the CPU burner" >&2; exit 1; }
        work=$((per_ms * 20))
        sleep_ms="$(awk -v s="$extra" 'BEGIN { s = s > 0.95 ? 0.95 : (s < 0.01 ? 0.01 : s);
                                             printf "%d", 20 * (1 - s) / s }')"
        side_session control <<SQL
DO \$\$ BEGIN LOOP
    PERFORM count(*) FROM generate_series(1, $work);
    PERFORM pg_sleep($sleep_ms / 1000.0);
END LOOP; END \$\$;
SQL
        burner=$SIDE_PID pids=$SIDE_BACKEND
    elif [[ "$kind" == handloop ]]; then
        # the same repair by hand: a PL/pgSQL loop of keyset batches of the definition's size,
        # each committed, paced to $extra keys per second; no engine, no fence, no claim (the
        # batch size, needs_repair and update_set of examples/demo_definitions.c's
        # content_len_v1, written out)
        side_session handloop <<SQL
DO \$\$
DECLARE last bigint := 0; hi bigint; keys bigint := 0; t0 timestamptz := clock_timestamp();
        ahead double precision;
BEGIN LOOP
    SELECT max(id) INTO hi FROM (SELECT id FROM demo.events WHERE id > last ORDER BY id
                                 LIMIT 2000) k;
    EXIT WHEN hi IS NULL;
    UPDATE demo.events t SET content_len = octet_length(t.content)
     WHERE t.id > last AND t.id <= hi AND t.content_len IS NULL;
    COMMIT;
    keys := keys + 2000;
    last := hi;
    ahead := keys / $extra - extract(epoch FROM clock_timestamp() - t0);
    IF ahead > 0 THEN PERFORM pg_sleep(ahead); END IF;
END LOOP; END \$\$;
SQL
        burner=$SIDE_PID pids=$SIDE_BACKEND
    fi
    local progress="SELECT coalesce(sum(rows_covered), 0) FROM buzz_backfill.backfill"
    [[ "$kind" != handloop ]] ||
        progress="SELECT count(*) FROM demo.events WHERE content_len IS NOT NULL"
    before="$(psql -X -qtAc "$progress" "$url")"
    read -r idle0 all0 < <(cpu_idle)
    # shellcheck disable=SC2086 # a list of PIDs
    [[ -z "$pids" ]] || own0="$(cpu_of $pids)"
    local pinner=""
    rm -f "$TMP/placement"
    if ((PIN)); then
        DAEMON="$DAEMON" pin_loop "$url" &
        pinner=$!
    fi
    sampler "$url" "$TMP/waits.cur" &
    SAMPLER=$!
    lsn0="$(psql -X -qtAc "SELECT pg_current_wal_lsn()" "$url")"
    t0="$(date +%s.%N)"
    rm -f "$TMP"/pgbench_log.*
    if [[ "$DRIVER" == relayload ]]; then
        out="$("${DRV[@]}" "$BUILD/bench/relayload" "$url" --rate "$OFFERED" \
            --seconds "$SECONDS_PER_PHASE" --clients "$CLIENTS" --rows "$ROWS" \
            --window-ms "$WINDOW_MS" --warmup-ms 2000 --health ${TRACES:+--trace "$TRACES/$name.$PHASE_ROUND"} 2>&1)" || {
            echo "coexist: $name: relayload failed: $out" >&2
            exit 1
        }
    else
        local rate_args=()
        [[ "$OFFERED" == 0 ]] || rate_args=(--rate "$OFFERED")
        out="$(cd "$TMP" &&
            "${DRV[@]}" "$PGBENCH" -n -c "$CLIENTS" -j 2 -T "$SECONDS_PER_PHASE" \
                ${rate_args[@]+"${rate_args[@]}"} ${LOAD_ARGS[@]+"${LOAD_ARGS[@]}"} -l "$url" 2>&1)"
    fi
    t1="$(date +%s.%N)"
    lsn1="$(psql -X -qtAc "SELECT pg_current_wal_lsn()" "$url")"
    stop_sampler
    if [[ -n "$pinner" ]]; then
        kill "$pinner" 2>/dev/null || true
        wait "$pinner" 2>/dev/null || true
    fi
    read -r idle1 all1 < <(cpu_idle)
    # shellcheck disable=SC2086
    [[ -z "$pids" ]] || own1="$(cpu_of $pids)"
    # stop what ran beside pgbench before counting what it did
    if [[ -n "$canary" ]]; then
        kill -TERM "$canary"
        wait "$canary" || true
        cat "$TMP/canary.out" >"$TMP/canary_p99"
    fi
    if [[ -n "$DAEMON" ]]; then
        kill -TERM "$DAEMON"
        wait "$DAEMON" || true
        DAEMON=""
    fi
    if [[ -n "$burner" ]]; then
        psql -X -qtAc "SELECT pg_cancel_backend($pids)" "$url" >/dev/null
        wait "$burner" || true
    fi
    after="$(psql -X -qtAc "$progress" "$url")"
    local state
    state="$(psql -X -qtAc "SELECT coalesce(string_agg(state, ','), '-') FROM buzz_backfill.backfill
                            WHERE id = '$ID'" "$url")"
    [[ "$state" == running || "$state" == - ]] ||
        echo "coexist: $name: the backfill left running during the phase ($state): use more --rows" >&2
    local tps n p50 p99 w90=""
    if [[ "$DRIVER" == relayload ]]; then
        # "tps p50_ms p99_ms windows_p90_ms transactions", latency from each arrival
        read -r tps p50 p99 w90 _ <<<"$out"
    else
        tps="$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | head -n 1)"
        [[ -n "$tps" ]] || {
            echo "coexist: $name: pgbench failed: $out" >&2
            exit 1
        }
        # pgbench's log: the third field is each transaction's latency in microseconds; under
        # --rate the seventh is how late it started against its schedule, which the client
        # waited too (in ms here, as relayload prints them)
        cat "$TMP"/pgbench_log.* | awk '{ print ($3 + (NF >= 7 ? $7 : 0)) / 1000 }' | sort -n >"$TMP/lat"
        n="$(wc -l <"$TMP/lat")"
        p50="$(sed -n "$(((n + 1) / 2))p" "$TMP/lat")"
        p99="$(sed -n "$(((n * 99 + 99) / 100))p" "$TMP/lat")"
    fi
    echo "$w90" >"$TMP/windows_p90"
    awk -v tps="$tps" -v p50="$p50" -v p99="$p99" -v rows="$((after - before))" \
        -v t0="$t0" -v t1="$t1" -v idle="$((idle1 - idle0))" -v all="$((all1 - all0))" \
        -v own="$((own1 - own0))" -v ticks="$TICKS" -v kind="$kind" \
        -v wal="$(psql -X -qtAc "SELECT pg_wal_lsn_diff('$lsn1', '$lsn0')" "$url")" \
        'BEGIN {
            keys = "-"
            if (kind == "backfill" || kind == "handloop")
                keys = sprintf("%.0f", rows / (t1 - t0))
            cores = "-"
            if (kind != "none")
                cores = sprintf("%.2f", own / ticks / (t1 - t0))
            idle_pct = 0
            if (all > 0)
                idle_pct = 100 * idle / all
            printf "%.1f %.2f %.2f %s %.0f %s %.0f\n", tps, p50, p99, keys, idle_pct,
                cores, wal / (t1 - t0)
        }'
}

if [[ "$LOAD" != 0 ]]; then
    read -r cap _ < <(PHASE_ROUND=0 phase capacity none)
    rate="$(awk -v c="$cap" -v l="$LOAD" 'BEGIN { printf "%d", c * l }')"
    OFFERED="$rate"
    printf 'coexist: capacity %s tps flat out; OLTP offered at %s tps (load %s)\n' "$cap" "$rate" "$LOAD"
else
    printf 'coexist: OLTP flat out (closed loop, --load 0)\n'
fi
if ((PIN)); then
    where="pinned: PostgreSQL, its background processes and its OLTP backends on CPU 0"
    where+="; the backfill's backends and the daemon on CPU 1; $DRIVER (the relay's client) on CPU $DRIVER_CPU"
    [[ "${DRV[2]:-}" != chrt ]] || where+=" at real-time priority"
    [[ "$DRIVER" == relayload ]] || where+=" with the canary"
else
    where="$(nproc 2>/dev/null || echo '?') cores shared by PostgreSQL, $DRIVER and the daemon"
fi
printf '%s %s\n' "coexist: $SECONDS_PER_PHASE s a phase, $ROUNDS round(s), $CLIENTS $DRIVER clients," \
    "$LOAD_KIND load; $where"
printf 'coexist: server %s%s\n' "$(psql -X -qtAc "SELECT string_agg(name || ' ' || setting, ', ' ORDER BY name)
    FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes', 'wal_compression')" \
    "$SERVER_URL")" "${SERVER_SETS[*]:+ (set for the run: ${SERVER_SETS[*]})}"
[[ -z "$WAL_PARENT" ]] ||
    printf 'coexist: pg_wal under %s (%s): a diagnostic of a fast WAL device, NOT durable, NOT the goal measurement\n' \
        "$WAL_PARENT" "$(stat -f -c %T "$WAL_PARENT" 2>/dev/null || echo '?')"
row() { printf '%-16s %9s %8s %8s %15s %7s %9s %9s %s\n' "$@"; }
mbs() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1048576 }'; }
# after_phase LABEL: keep the phase's wait-event summary and placement for the report
waits=() places=()
after_phase()
{
    waits+=("$(printf '%-16s %s' "$1" "$(waits_summary "$TMP/waits.cur")")")
    [[ ! -s "$TMP/placement" ]] || places+=("$(printf '%-16s %s' "$1" "$(cat "$TMP/placement")")")
}
# ROUNDS rounds of every phase, interleaved (this machine's latency drifts between minutes:
# each round compares phases minutes apart); each round's unthrottled phase sets that round's
# ceiling (the first round's alone set them all before, and a slow first phase, cold after the
# template's build, left the others at a third of the median unthrottled rate)
canary_col="canary p99 ms"
[[ "$DRIVER" != relayload ]] || canary_col="relay's windows"
lines=("$(row phase "OLTP tps" "p50 ms" "p99 ms" "backfill keys/s" "idle %" "CPU cores" "WAL MB/s" "$canary_col")")
p99s_unthrottled=() rates_unthrottled=()
p99s_none=() p99s_throttled=() p99s_hand=() p99s_control=() rates=() p99s_latency=() rates_latency=()
ceilings=() rates_hand=()
wal_none=() wal_unthrottled=() wal_throttled=() wal_hand=() wal_latency=()
for ((r = 1; r <= ROUNDS; r++)); do
    PHASE_ROUND=$r
    read -r tps p50 p99 rate idle cpu wal < <(phase unthrottled backfill "batch_target_ms = 0")
    after_phase "unthrottled #$r"
    lines+=("$(row "unthrottled #$r" "$tps" "$p50" "$p99" "$rate" "$idle" "$cpu" "$(mbs "$wal")")")
    wal_unthrottled+=("$wal")
    p99s_unthrottled+=("$p99")
    rates_unthrottled+=("$rate")
    ceiling="$(awk -v r="$rate" -v s="$SHARE" 'BEGIN { printf "%d", r * s }')"
    ceilings+=("$ceiling")
    read -r tps p50 p99 _ idle _ wal < <(phase none none)
    after_phase "none #$r"
    w_none=""
    read -r w_none <"$TMP/windows_p90" || true
    lines+=("$(row "none #$r" "$tps" "$p50" "$p99" - "$idle" - "$(mbs "$wal")" "${w_none:+(windows p90 $w_none)}")")
    wal_none+=("$wal")
    p99s_none+=("$p99")
    read -r tps p50 p99 rate idle cpu wal < <(phase throttled backfill "batch_target_ms = $TARGET_MS
step_ms = $STEP_MS
max_rows_per_second = $ceiling
$THROTTLE_CONF")
    after_phase "throttled #$r"
    lines+=("$(row "throttled #$r" "$tps" "$p50" "$p99" "$rate" "$idle" "$cpu" "$(mbs "$wal")")")
    wal_throttled+=("$wal")
    p99s_throttled+=("$p99")
    rates+=("$rate")
    read -r tps p50 p99 hrate idle hcpu wal < <(phase handloop handloop "$rate")
    after_phase "by hand #$r"
    lines+=("$(row "by hand #$r" "$tps" "$p50" "$p99" "$hrate" "$idle" "$hcpu" "$(mbs "$wal")")")
    wal_hand+=("$wal")
    rates_hand+=("$hrate")
    p99s_hand+=("$p99")
    if ((CONTROL)) && [[ "$cpu" != - ]]; then
        read -r tps p50 p99 _ idle cpu wal < <(phase control control "$cpu")
        after_phase "control #$r"
        lines+=("$(row "control #$r" "$tps" "$p50" "$p99" - "$idle" "$cpu" "$(mbs "$wal")")")
        p99s_control+=("$p99")
    fi
    if ((LATENCY)); then
        # a backfill with no ceiling whose rate controller holds the relay's windows at
        # --latency-factor times what they were with no backfill: their 90th percentile (the
        # baseline's own windows pass its whole phase's p99 often, and a target from that would
        # cut the rate on windows no backfill caused). relayload's windows are the relay's own,
        # from this round's none phase; pgbench cannot write any, so with it the canary runs
        # alone first, and its windows stand in. The signal and the target are in microseconds
        # (the engine's target is an integer, the windows a few ms).
        canary=0 base="$w_none"
        if [[ "$DRIVER" != relayload ]]; then
            read -r tps p50 p99 _ idle _ wal < <(WITH_CANARY=1 phase "none+canary" none)
            after_phase "none+canary #$r"
            read -r c0 w0 <"$TMP/canary_p99"
            [[ -n "$c0" && -n "$w0" ]] || { echo "coexist: the canary reported nothing: $(cat "$TMP/canary.err")" >&2; exit 1; }
            lines+=("$(row "none+canary #$r" "$tps" "$p50" "$p99" - "$idle" - "$(mbs "$wal")" "$c0 (windows p90 $w0)")")
            canary=1 base="$w0"
        fi
        target_us="$(awk -v b="$base" -v f="$LATENCY_FACTOR" 'BEGIN { printf "%d", b * f * 1000 + 0.5 }')"
        read -r tps p50 p99 rate idle cpu wal < <(WITH_CANARY=$canary phase controller backfill "batch_target_ms = $TARGET_MS
step_ms = $STEP_MS
throttle_latency_target_ms = $target_us
throttle_latency_sql = \"SELECT p99_ms * 1000, at FROM buzz_canary.health WHERE at > now() - interval '2 s'\"
throttle_check_ms = 50
$THROTTLE_CONF")
        after_phase "controller #$r"
        c1=""
        if ((canary)); then
            read -r c1 w1 <"$TMP/canary_p99"
        else
            read -r w1 <"$TMP/windows_p90"
        fi
        wal_latency+=("$wal")
        lines+=("$(row "controller #$r" "$tps" "$p50" "$p99" "$rate" "$idle" "$cpu" "$(mbs "$wal")" \
            "${c1:+$c1 }(windows p90 $w1, target $((target_us / 1000)).$(printf '%03d' $((target_us % 1000))))")")
        p99s_latency+=("$p99")
        rates_latency+=("$rate")
    fi
done
printf '%s\n' "${lines[@]}"
if ((${#places[@]})); then
    echo "placement (first pass of each phase; x N: sessions, on CPU list):"
    printf '  %s\n' "${places[@]}"
fi
echo "wait events of active sessions, sampled every 100 ms (share of each group's samples; CPU: none):"
printf '  %s\n' "${waits[@]}"
median()
{
    printf '%s\n' "$@" | sort -n |
        awk '{ v[NR] = $1 }
             END { if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
b="$(median "${p99s_none[@]}")"
u="$(median "${p99s_unthrottled[@]}")"
rate1="$(median "${rates_unthrottled[@]}")"
t="$(median "${p99s_throttled[@]}")"
k="$(median ${p99s_control[@]+"${p99s_control[@]}"})"
h="$(median "${p99s_hand[@]}")"
r2="$(median "${rates[@]}")"
l="$(median ${p99s_latency[@]+"${p99s_latency[@]}"})"
r3="$(median ${rates_latency[@]+"${rates_latency[@]}"})"
# the WAL a key costs: what a phase wrote per second beyond the none phase's, over its keys/s
wn="$(median "${wal_none[@]}")"
per_key() # "WAL bytes/s values" "keys/s values"
{
    local w k
    # shellcheck disable=SC2086 # lists of numbers
    w="$(median $1)" k="$(median $2)"
    awk -v w="$w" -v n="$wn" -v k="$k" 'BEGIN { if (k > 0) printf "%.0f", (w - n) / k; else printf "-" }'
}
[[ "$ROUNDS" == 1 ]] || echo "(medians of $ROUNDS rounds)"
awk -v b="$b" -v u="$u" -v t="$t" -v k="$k" -v h="$h" -v r1="$rate1" -v r2="$r2" \
    -v c="${ceilings[*]}" -v l="$l" -v r3="$r3" -v f="$LATENCY_FACTOR" \
    'BEGIN {
        printf "unthrottled p99 / baseline p99: %.2f", u / b
        if (u / b < 1.5)
            printf " (NOT clearly above 1: this run cannot show what throttling buys; make the backfill heavier: more --rows, --load-kind relay, a higher --load)"
        printf "\n"
        printf "throttled p99 / baseline p99:   %.2f (goal <= 1.25)\n", t / b
        printf "throttled rate / unthrottled:   %.2f (goal >= 0.50; ceilings %s keys/s)\n", r2 / r1, c
        printf "by hand p99 / baseline p99:     %.2f (the same keys/s by a PL/pgSQL loop)\n", h / b
        if (k != "")
            printf "control p99 / baseline p99:     %.2f (the same CPU, no writes)\n", k / b
        if (l != "") {
            printf "controller p99 / baseline p99:  %.2f (goal <= %s with no ceiling)\n", l / b, f
            printf "controller rate / unthrottled:  %.2f (%.0f keys/s remain)\n", r3 / r1, r3
        }
    }'
printf 'WAL per key beyond the none phase (bytes): unthrottled %s, throttled %s, by hand %s%s; none phase %s MB/s\n' \
    "$(per_key "${wal_unthrottled[*]}" "${rates_unthrottled[*]}")" \
    "$(per_key "${wal_throttled[*]}" "${rates[*]}")" \
    "$(per_key "${wal_hand[*]}" "${rates_hand[*]}")" \
    "$( ((${#wal_latency[@]})) && printf ', controller %s' "$(per_key "${wal_latency[*]}" "${rates_latency[*]}")")" \
    "$(mbs "$wn")"
