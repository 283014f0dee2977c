#!/usr/bin/env bash
# The buzz-backfill demo end to end on a fresh machine: install the Debian packages, build,
# start a private PostgreSQL cluster, create and seed a Nostr relay's event table, and drive the
# demo backfills (examples/demo_definitions.c) to completion with buzz-demo-run.
set -euo pipefail

PROG="${0##*/}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PG="$ROOT/scripts/pg.sh"
DEMO_SQL="$ROOT/examples/demo"
DB_NAME=buzz_demo

rows=200000
workers=2
start=all
batch_report=0
stop=0
deps=1
build_dir=build

usage()
{
    cat <<USAGE
Usage: $PROG [--rows N] [--workers N] [--start all|required|none] [--batch-report]
       [--stop] [--no-deps] [--build-dir DIR] [--help]

Runs the buzz-backfill demo from a fresh checkout:
  1. scripts/deps.sh       install missing Debian packages (apt-get; needs root or sudo
                           the first time)
  2. build                 cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo, then the
                           demo targets (buzz-demo-run, buzz-demo-definitions.so)
  3. scripts/pg.sh start   a private PostgreSQL 15 cluster on 127.0.0.1
  4. database $DB_NAME    dropped and created again, then examples/demo/schema.sql, seed.sql
                           (N historical events) and write_path.sql (the new write path)
  5. buzz-demo-run         migrates the engine schema, loads the definitions module,
                           registers and starts the backfills, runs workers with a live
                           progress report, prints the backfill table and the audit
  6. check                 every started backfill completed and every row is repaired

The cluster keeps running afterwards so you can look around (the script prints how to
connect and how to stop it), unless --stop is given.

Options:
  --rows N          historical events to seed (default $rows)
  --workers N       worker threads (default $workers)
  --start WHICH     all (default), required (only required backfills, as the relay's
                    automatic mode would; demo.events.pubkey_hex_v1 stays pending), or none
  --batch-report    print every claim and committed batch as well
  --stop            stop the PostgreSQL cluster at the end (scripts/pg.sh stop)
  --no-deps         skip scripts/deps.sh
  --build-dir DIR   build directory, relative to the repository (default: build)
  -h, --help        show this help

Works as root (the cluster then runs as the "postgres" user under /tmp) and as a normal
user (cluster in .pg/ of the repository).
USAGE
}

die()
{
    echo "$PROG: $*" >&2
    exit 1
}

need_value()
{
    [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value (see --help)"
}

while (($#)); do
    case "$1" in
    --rows)
        need_value "$@"
        rows="$2"
        shift
        ;;
    --workers)
        need_value "$@"
        workers="$2"
        shift
        ;;
    --start)
        need_value "$@"
        start="$2"
        shift
        ;;
    --batch-report) batch_report=1 ;;
    --stop) stop=1 ;;
    --no-deps) deps=0 ;;
    --build-dir)
        need_value "$@"
        build_dir="$2"
        shift
        ;;
    -h | --help)
        usage
        exit 0
        ;;
    *)
        echo "$PROG: unknown argument: $1 (see --help)" >&2
        exit 2
        ;;
    esac
    shift
done

[[ "$rows" =~ ^[1-9][0-9]{0,9}$ ]] || die "--rows must be a positive integer"
[[ "$workers" =~ ^[1-9][0-9]?$ ]] || die "--workers must be 1..64"
case "$start" in all | required | none) ;; *) die "--start must be all, required or none" ;; esac

cd "$ROOT"
BUILD="$ROOT/$build_dir"
[[ "$build_dir" == /* ]] && BUILD="$build_dir"

step()
{
    printf '\n==> %s\n' "$*"
}

pg_stop_on_exit()
{
    local rc=$?
    step "stopping PostgreSQL (--stop)"
    "$PG" stop || echo "$PROG: warning: scripts/pg.sh stop failed" >&2
    exit "$rc"
}

# ---- 1. packages ---------------------------------------------------------------------------
if ((deps)); then
    step "installing missing packages (scripts/deps.sh)"
    "$ROOT/scripts/deps.sh"
fi

# ---- 2. build ------------------------------------------------------------------------------
step "building ($BUILD)"
configure_log="$(mktemp "${TMPDIR:-/tmp}/buzz-demo-cmake.XXXXXX")"
if ! cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$configure_log" 2>&1; then
    cat "$configure_log" >&2
    rm -f "$configure_log"
    die "cmake configure failed"
fi
rm -f "$configure_log"
cmake --build "$BUILD" -j"$(nproc 2>/dev/null || echo 2)" --target buzz-demo-run buzz-demo-definitions
RUNNER="$BUILD/examples/buzz-demo-run"
MODULE="$BUILD/examples/buzz-demo-definitions.so"
[[ -x "$RUNNER" && -f "$MODULE" ]] || die "build did not produce $RUNNER and $MODULE"

# ---- 3. PostgreSQL -------------------------------------------------------------------------
step "starting the private PostgreSQL cluster (scripts/pg.sh start)"
if ((stop)); then
    trap pg_stop_on_exit EXIT
fi
"$PG" start
URL="$("$PG" url)"
DB_URL="${URL%/*}/$DB_NAME"

if [[ -x /usr/lib/postgresql/15/bin/psql ]]; then
    PSQL=/usr/lib/postgresql/15/bin/psql
else
    PSQL="$(command -v psql)" || die "psql not found (run scripts/deps.sh)"
fi
psql_run()
{
    local url="$1"
    shift
    PGOPTIONS="-c client_min_messages=warning" "$PSQL" -X -q -v ON_ERROR_STOP=1 -d "$url" "$@"
}

# ---- 4. demo database ----------------------------------------------------------------------
step "creating database $DB_NAME with $rows historical events"
psql_run "$URL" -c "DROP DATABASE IF EXISTS $DB_NAME WITH (FORCE)" -c "CREATE DATABASE $DB_NAME"
t0=$SECONDS
psql_run "$DB_URL" -f "$DEMO_SQL/schema.sql"
psql_run "$DB_URL" -v rows="$rows" -f "$DEMO_SQL/seed.sql"
echo "seeded demo.events: $(psql_run "$DB_URL" -At -c "SELECT count(*) || ' rows, ' ||
    pg_size_pretty(pg_total_relation_size('demo.events')) FROM demo.events")" \
    "in $((SECONDS - t0))s"
echo "rolling out the new write path first (examples/demo/write_path.sql)"
psql_run "$DB_URL" -f "$DEMO_SQL/write_path.sql"

# ---- 5. the backfills ----------------------------------------------------------------------
step "running the demo backfills (buzz-demo-run)"
run_args=(--db "$DB_URL" --module "$MODULE" --workers "$workers" --start "$start")
((batch_report)) && run_args+=(--batch-report)
echo "$RUNNER ${run_args[*]}"
run_rc=0
"$RUNNER" "${run_args[@]}" || run_rc=$?

# ---- 6. check ------------------------------------------------------------------------------
step "checking the result in PostgreSQL"
psql_run "$DB_URL" -c "SELECT id AS backfill, state, rows_committed AS rows,
    batches_committed AS batches, validation_outcome AS validation
    FROM buzz_backfill.backfill ORDER BY id"
# rows still needing repair, for each started backfill (a pending one repairs nothing)
unrepaired="$(psql_run "$DB_URL" -At -c "SELECT
    (SELECT count(*) FROM demo.events WHERE content_len IS NULL) *
      (SELECT count(*) FROM buzz_backfill.backfill
       WHERE id = 'demo.events.content_len_v1' AND state <> 'pending')
  + (SELECT count(*) FROM demo.events WHERE pubkey_hex IS NULL) *
      (SELECT count(*) FROM buzz_backfill.backfill
       WHERE id = 'demo.events.pubkey_hex_v1' AND state <> 'pending')
  + (SELECT count(*) FROM demo.events WHERE tag_count IS NULL) *
      (SELECT count(*) FROM buzz_backfill.backfill
       WHERE id = 'demo.events.tag_count_v1' AND state <> 'pending')")"
unfinished="$(psql_run "$DB_URL" -At -c "SELECT count(*) FROM buzz_backfill.backfill
    WHERE state NOT IN ('completed', 'pending')")"
completed="$(psql_run "$DB_URL" -At -c "SELECT count(*) FROM buzz_backfill.backfill
    WHERE state = 'completed'")"

echo
if ((run_rc == 0 && unfinished == 0 && unrepaired == 0)); then
    echo "DEMO OK: $completed backfills completed; every started backfill repaired all its rows."
else
    echo "DEMO FAILED: buzz-demo-run exit status $run_rc, $unfinished backfills not finished," \
        "$unrepaired rows not repaired." >&2
fi

if ((!stop)); then
    echo
    echo "PostgreSQL keeps running: $("$PG" status || true)"
    echo "  look around:  $PSQL \"$DB_URL\""
    echo "                e.g. SELECT * FROM buzz_backfill.backfill;  SELECT * FROM buzz_backfill.audit;"
    echo "  run again:    $RUNNER --db \"$DB_URL\" --module $MODULE"
    echo "  stop it:      scripts/pg.sh stop"
fi

if ((run_rc != 0)); then
    exit "$run_rc"
fi
((unfinished == 0 && unrepaired == 0)) || exit 1
