#!/usr/bin/env bash
# The buzz-backfill demo end to end on a fresh machine: install the Debian packages, build,
# start a private PostgreSQL cluster, create and seed a Nostr relay's event table, then run the
# service: buzz-backfilld loads the demo definitions (examples/demo_definitions.c) and an
# operator drives the backfills to completion with buzzctl (tokens, controls, progress,
# validation, audit), and the result is checked in PostgreSQL. --engine-only runs the
# engine-only runner buzz-demo-run instead of the service.
set -euo pipefail

PROG="${0##*/}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PG="$ROOT/scripts/pg.sh"
DEMO_SQL="$ROOT/examples/demo"

rows=200000
workers=2
start=all
batch_report=0
json_logs=0
stop=0
deps=1
build=1
engine_only=0
build_dir=build
pg_url=""
db_name=buzz_demo

usage()
{
    cat <<USAGE
Usage: $PROG [--rows N] [--workers N] [--start all|required|none] [--batch-report]
       [--json-logs] [--engine-only] [--stop] [--no-deps] [--build-dir DIR] [--help]

Runs the buzz-backfill demo from a fresh checkout:
  1. scripts/deps.sh       install missing Debian packages (apt-get; needs root or sudo
                           the first time)
  2. build                 cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo, then
                           buzz-backfilld, buzzctl and the demo definitions module
  3. scripts/pg.sh start   a private PostgreSQL 15 cluster on 127.0.0.1
  4. database $db_name    dropped and created again, then examples/demo/schema.sql, seed.sql
                           (N historical events) and write_path.sql (the new write path)
  5. tokens and config     in a private temporary directory: a demo signing key (removed
                           when the demo ends, however it ends), an operator token and a
                           read-only token (buzzctl token keygen/mint), the trusted keys
                           file and a buzz-backfilld configuration (an ipc://
                           socket with boundary authority, a tcp://127.0.0.1 listener that
                           requires tokens, auto_migrate on, auto_backfill off)
  6. buzz-backfilld        started in the background (it migrates the engine schema and
                           registers the definitions); buzzctl ready
  7. buzzctl               list, start, a live progress view, pause and resume mid-run, get,
                           validate, refused requests (read-only and forged tokens), whoami
                           over ipc, audit
  8. check and stop        every started backfill completed and every row is repaired; the
                           daemon stops on SIGTERM with exit status 0 and leaves no claim

The cluster keeps running afterwards so you can look around (the script prints how to
connect, how to run the daemon again and how to stop the cluster), unless --stop is given.

Options:
  --rows N          historical events to seed (default $rows)
  --workers N       worker threads of the daemon (or the runner) (default $workers)
  --start WHICH     all (default), required (only required backfills, as the relay's
                    automatic mode would; demo.events.pubkey_hex_v1 stays pending), or none
  --batch-report    report every committed batch too (the daemon logs them at log_level
                    debug; the runner prints every claim and batch)
  --json-logs       the daemon logs JSON lines (log_format = json: time, level, event,
                    pid, msg and the event's fields; see docs/service.md, Logs)
  --engine-only     run the engine-only runner buzz-demo-run instead of the service
  --stop            stop the PostgreSQL cluster at the end (scripts/pg.sh stop)
  --no-deps         skip scripts/deps.sh
  --build-dir DIR   build directory, relative to the repository (default: build)
  -h, --help        show this help

For tests (ctest demo_service_smoke):
  --no-build        use the binaries already in the build directory
  --pg-url URL      use this PostgreSQL server instead of scripts/pg.sh (implies no --stop)
  --db NAME         the demo database (default $db_name); dropped and created again

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
    --json-logs) json_logs=1 ;;
    --engine-only) engine_only=1 ;;
    --stop) stop=1 ;;
    --no-deps) deps=0 ;;
    --no-build) build=0 ;;
    --build-dir)
        need_value "$@"
        build_dir="$2"
        shift
        ;;
    --pg-url)
        need_value "$@"
        pg_url="$2"
        shift
        ;;
    --db)
        need_value "$@"
        db_name="$2"
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
((workers <= 64)) || die "--workers must be 1..64"
case "$start" in all | required | none) ;; *) die "--start must be all, required or none" ;; esac
[[ "$db_name" =~ ^[a-z_][a-z0-9_]{0,62}$ ]] || die "--db must be a lower-case SQL identifier"
[[ -z "$pg_url" ]] || ((!stop)) || die "--stop applies to the private cluster, not to --pg-url"

cd "$ROOT"
BUILD="$ROOT/$build_dir"
[[ "$build_dir" == /* ]] && BUILD="$build_dir"

# The daemon reads BUZZ_BACKFILL_<KEY> settings and buzzctl its URL and token from the
# environment: the demo's own configuration must not be overridden by the caller's.
while IFS= read -r var; do
    unset "$var"
done < <(compgen -e | grep '^BUZZ_BACKFILL_' || true)

step()
{
    printf '\n==> %s\n' "$*"
}

# ---- cleanup: stop the daemon, show its log on failure, remove the signing keys, stop the
# cluster (--stop) ----------------------------------------------------------------------------
DEMO_DIR=""
DAEMON_LOG=""
daemon_pid=""

stop_daemon_quietly()
{
    [[ -n "$daemon_pid" ]] || return 0
    if kill -0 "$daemon_pid" 2>/dev/null; then
        kill -TERM "$daemon_pid" 2>/dev/null || true
        local i
        for ((i = 0; i < 150; i++)); do
            kill -0 "$daemon_pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$daemon_pid" 2>/dev/null && kill -KILL "$daemon_pid" 2>/dev/null
    fi
    wait "$daemon_pid" 2>/dev/null || true
    daemon_pid=""
}

on_exit()
{
    local rc=$?
    trap - EXIT INT TERM
    stop_daemon_quietly
    # the demo's signing key mints tokens the configuration trusts: it does not outlive the run
    # (nor does the forger's); the tokens, the public key file and the log stay to look at
    if [[ -n "$DEMO_DIR" ]]; then
        rm -f -- "$DEMO_DIR/demo.secret" "$DEMO_DIR/forger.secret"
    fi
    if ((rc != 0)) && [[ -n "$DAEMON_LOG" && -s "$DAEMON_LOG" ]]; then
        echo >&2
        echo "---- last 40 lines of the daemon log ($DAEMON_LOG) ----" >&2
        tail -n 40 "$DAEMON_LOG" >&2
        echo "----" >&2
    fi
    if ((rc != 0)); then
        echo "DEMO FAILED (exit status $rc)${DEMO_DIR:+; demo files and logs in $DEMO_DIR}" >&2
    fi
    if ((stop)); then
        step "stopping PostgreSQL (--stop)"
        "$PG" stop || echo "$PROG: warning: scripts/pg.sh stop failed" >&2
    fi
    exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- the service demo (steps 5..7) ---------------------------------------------------------
# buzzctl commands run in the demo directory (so token files are named relative to it) with
# BUZZ_BACKFILL_URL naming the tcp:// listener; each is shown before its output.
TCP_URL=""
IPC_URL=""
out=""
rc=0

show_cmd()
{
    printf '$'
    printf ' %s' "$@"
    printf '\n'
}

# ctl ARGS...: show "buzzctl ARGS", run it, print its output; $out and $rc keep both.
ctl()
{
    show_cmd buzzctl "$@"
    rc=0
    out="$(cd "$DEMO_DIR" && BUZZ_BACKFILL_URL="$TCP_URL" "$BUZZCTL" "$@" 2>&1)" || rc=$?
    [[ -z "$out" ]] || printf '%s\n' "$out"
    ((rc == 0)) || echo "(exit status $rc)"
}

# ctl_ok ARGS...: ctl, and the demo fails unless buzzctl succeeded.
ctl_ok()
{
    ctl "$@"
    ((rc == 0)) || die "buzzctl $* failed with exit status $rc"
}

# quiet ARGS...: run buzzctl with the operator token, output in $out, status in $rc.
quiet()
{
    rc=0
    out="$(cd "$DEMO_DIR" && BUZZ_BACKFILL_URL="$TCP_URL" "$BUZZCTL" \
        --token-file operator.token "$@" 2>&1)" || rc=$?
}

free_port()
{
    local i p
    for ((i = 0; i < 100; i++)); do
        p=$((20000 + RANDOM % 30000))
        # nothing answers a connect: free (a race with another program is retried below)
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    die "no free tcp port found"
}

write_config()
{
    local port="$1" http_port="$2" log_level=info log_format=text
    ((batch_report)) && log_level=debug
    ((json_logs)) && log_format=json
    cat >"$DEMO_DIR/buzz-backfilld.conf" <<CONF
# buzz-backfilld configuration written by scripts/demo.sh (see docs/service.md)
database_url = '$DB_URL'
# a local socket with boundary authority (no token needed) and a token-only tcp listener
listen = 'ipc://$DEMO_DIR/admin.sock, tcp://127.0.0.1:$port'
ipc_boundary = on
# Prometheus /metrics, /livez and /readyz (no token: loopback only)
http_listen = http://127.0.0.1:$http_port
token_audience = buzz-demo
trusted_keys_file = $DEMO_DIR/trusted-keys.pub
modules = $MODULE
auto_migrate = on                 # create the engine schema at startup
auto_backfill = off               # manual mode: operators start backfills, no readiness gate
workers = $workers
threads = 4
lease_ms = 10000                  # a crashed worker's claim is taken over after 10 s
statement_timeout_ms = 5000       # the lease must outlast step_ms + this and lock_timeout_ms
log_level = $log_level
log_format = $log_format
CONF
}

# Start the daemon and wait until it answers ready (0) on its ipc socket. Returns 1 when the
# daemon exited, with its status in $rc.
start_daemon()
{
    (cd "$DEMO_DIR" && exec "$DAEMON" --config buzz-backfilld.conf) >>"$DAEMON_LOG" 2>&1 &
    daemon_pid=$!
    local i
    for ((i = 0; i < 300; i++)); do
        if ! kill -0 "$daemon_pid" 2>/dev/null; then
            rc=0
            wait "$daemon_pid" || rc=$?
            daemon_pid=""
            return 1
        fi
        if "$BUZZCTL" --url "$IPC_URL" --timeout 1s ready >/dev/null 2>&1; then
            return 0
        fi
        sleep 0.2
    done
    die "buzz-backfilld did not become ready within 60 s"
}

# The live view: buzzctl list every second, redrawn in place on a terminal (elsewhere a frame
# is printed when a state changes, and every 10 s). Globals for the stop conditions:
declare -A st=() rows_of=()
started_ids=()
target=""
frame_lines=0
tty=0
[[ -t 1 && "${TERM:-dumb}" != dumb ]] && tty=1

parse_list()
{
    st=()
    rows_of=()
    local id state progress
    while read -r id state progress _; do
        [[ "$id" == demo.* ]] || continue
        st[$id]="$state"
        # PROGRESS starts with the rows passed, shortened: 9999, 120k, 1.2M
        if [[ "$progress" =~ ^([0-9]+)k$ ]]; then
            progress="${BASH_REMATCH[1]}000"
        elif [[ "$progress" =~ ^([0-9]+)\.([0-9])M$ ]]; then
            progress="${BASH_REMATCH[1]}${BASH_REMATCH[2]}00000"
        fi
        rows_of[$id]="$progress"
    done <<<"$1"
}

all_done()
{
    local id
    for id in "${started_ids[@]}"; do
        [[ "${st[$id]:-}" == completed ]] || return 1
    done
}

# the pause target has repaired about a tenth of the table (or is no longer running)
target_mid_run()
{
    local n="${rows_of[$target]:-0}"
    [[ "$n" =~ ^[0-9]+$ ]] || n=0
    [[ "${st[$target]:-}" != running ]] || ((n > 0 && n >= rows / 10))
}

never()
{
    return 1
}

# watch_view COND MAX_SECONDS: redraw until the function COND holds or MAX_SECONDS passed.
# Returns 1 on timeout; fails the demo when a started backfill is blocked or failed.
watch_view()
{
    local cond="$1" max="$2" t0=$SECONDS last_sig="" sig id cols=${COLUMNS:-}
    ((tty)) && [[ -z "$cols" ]] && cols="$(tput cols 2>/dev/null || echo 80)"
    frame_lines=0
    while :; do
        quiet list --sample-ms 1000 # one second a frame, with rates
        ((rc == 0)) || die "buzzctl list failed ($rc): $out"
        parse_list "$out"
        local elapsed=$((SECONDS - t0)) done=0
        "$cond" && done=1
        ((elapsed >= max)) && done=2
        local frame
        frame="$(printf '$ buzzctl --token-file operator.token list    (every second; %ds)\n%s' \
            "$elapsed" "$out")"
        sig=""
        for id in "${started_ids[@]}"; do sig+="${st[$id]:-} "; done
        if ((tty)); then
            ((frame_lines == 0)) || printf '\033[%dA\033[J' "$frame_lines"
            printf '%s\n' "$frame"
            frame_lines=0
            local line n
            while IFS= read -r line; do
                n=${#line}
                frame_lines=$((frame_lines + (n == 0 ? 1 : (n + cols - 1) / cols)))
            done <<<"$frame"
        elif [[ "$sig" != "$last_sig" ]] || ((done || elapsed % 10 == 0)); then
            printf '%s\n' "$frame"
        fi
        last_sig="$sig"
        for id in "${started_ids[@]}"; do
            case "${st[$id]:-}" in
            blocked | failed)
                ctl --token-file operator.token get "$id"
                die "$id is ${st[$id]}"
                ;;
            esac
        done
        ((done == 1)) && return 0
        ((done == 2)) && return 1
        sleep 1
    done
}

service_demo()
{
    local base="${TMPDIR:-/tmp}"
    ((${#base} <= 60)) || base=/tmp # an ipc:// socket path is limited to ~100 bytes
    DEMO_DIR="$(mktemp -d "$base/buzz-demo.XXXXXX")"
    chmod 700 "$DEMO_DIR"
    DAEMON_LOG="$DEMO_DIR/buzz-backfilld.log"
    IPC_URL="ipc://$DEMO_DIR/admin.sock"
    local old_umask
    old_umask="$(umask)"
    umask 077

    # ---- 5. keys, tokens, configuration
    step "a demo signing key and two capability tokens (in $DEMO_DIR)"
    show_cmd cd "$DEMO_DIR"
    show_cmd buzzctl token keygen --kid demo-key --secret-out demo.secret \
        --public-out trusted-keys.pub
    (cd "$DEMO_DIR" && "$BUZZCTL" token keygen --kid demo-key --secret-out demo.secret \
        --public-out trusted-keys.pub 2>&1) || die "buzzctl token keygen failed"
    show_cmd buzzctl token mint --secret demo.secret --actor alice@ops \
        --cap read,control,validate,readiness --audience buzz-demo --ttl 1d '>operator.token'
    (cd "$DEMO_DIR" && "$BUZZCTL" token mint --secret demo.secret --actor alice@ops \
        --cap read,control,validate,readiness --audience buzz-demo --ttl 1d >operator.token) ||
        die "buzzctl token mint failed"
    show_cmd buzzctl token mint --secret demo.secret --actor bob@ops --cap read \
        --audience buzz-demo --ttl 1d '>readonly.token'
    (cd "$DEMO_DIR" && "$BUZZCTL" token mint --secret demo.secret --actor bob@ops --cap read \
        --audience buzz-demo --ttl 1d >readonly.token) || die "buzzctl token mint failed"
    show_cmd buzzctl token inspect - '<operator.token'
    (cd "$DEMO_DIR" && "$BUZZCTL" token inspect - <operator.token) ||
        die "buzzctl token inspect failed"

    # ---- 6. the daemon
    local port http_port attempt
    for ((attempt = 1; ; attempt++)); do
        port="$(free_port)"
        http_port="$(free_port)"
        ((http_port != port)) || continue
        TCP_URL="tcp://127.0.0.1:$port"
        HTTP_URL="http://127.0.0.1:$http_port"
        write_config "$port" "$http_port"
        if ((attempt == 1)); then
            step "the daemon configuration ($DEMO_DIR/buzz-backfilld.conf)"
            grep -v '^#' "$DEMO_DIR/buzz-backfilld.conf"
            step "starting buzz-backfilld in the background"
            show_cmd buzz-backfilld --config buzz-backfilld.conf '2>buzz-backfilld.log' '&'
        fi
        : >"$DAEMON_LOG"
        start_daemon && break
        # another program took the port between the check and the bind: try another one
        if ((attempt < 5)) && grep -q "in use" "$DAEMON_LOG"; then
            continue
        fi
        die "buzz-backfilld exited with status $rc during startup"
    done
    umask "$old_umask"
    echo "buzz-backfilld is running (pid $daemon_pid); its log so far:"
    sed 's/^/  /' "$DAEMON_LOG"

    step "operating it with buzzctl over $TCP_URL with alice's operator token"
    show_cmd export BUZZ_BACKFILL_URL="$TCP_URL"
    ctl_ok --token-file operator.token whoami
    echo
    echo "# manual mode: READY although every backfill is still pending"
    ctl_ok --token-file operator.token ready
    echo
    ctl_ok --token-file operator.token list

    # which backfills to start: every registered one, or the required ones
    quiet --json list
    ((rc == 0)) || die "buzzctl --json list failed ($rc): $out"
    local id
    # one JSON document: {"backfills": [{"id": ..., "required": ...}, ...]}
    mapfile -t started_ids < <(python3 -c '
import json, sys
doc = json.load(sys.stdin)
for b in doc.get("backfills", []):
    if sys.argv[1] == "all" or (sys.argv[1] == "required" and b.get("required")):
        print(b["id"])' "$start" <<<"$out")
    if [[ "$start" == none ]]; then
        echo
        echo "(--start none: nothing is started; the backfills stay pending)"
    else
        ((${#started_ids[@]} > 0)) || die "no backfill to start"
        step "starting the backfills (--start $start)"
        for id in "${started_ids[@]}"; do
            ctl_ok --token-file operator.token start "$id"
        done
        target="${started_ids[0]}"

        step "live progress, then pause and resume $target mid-run"
        watch_view target_mid_run 60 || die "$target made no progress within 60 s"
        echo
        local paused=0
        ctl --token-file operator.token pause "$target"
        if ((rc == 0)); then
            paused=1
            echo "# the pause bumped the generation: the worker's claim is void (its next commit"
            echo "# would be fenced out), so it stops at the batch boundary and lets go"
            echo
            watch_view never 3 || true
            echo
            ctl_ok --token-file operator.token get "$target"
            echo
            echo "# the dashboard (buzzctl dash) as one text frame"
            ctl_ok --token-file operator.token dash --once
            echo
            ctl_ok --token-file operator.token resume "$target"
            echo "# the next free worker claims it (one more generation) and continues from"
            echo "# the committed checkpoint"
        elif ((rc == 3)); then
            echo "# $target finished its batches before the pause: refused as a conflict"
        else
            die "buzzctl pause failed with exit status $rc"
        fi

        step "live progress until every started backfill is completed"
        local limit=$((120 + rows / 500))
        watch_view all_done "$limit" ||
            die "not every started backfill completed within $limit s"

        if ((paused)); then
            step "an explicit validation of a completed backfill"
        else
            step "one backfill in detail, and an explicit validation"
            ctl_ok --token-file operator.token get "$target"
            echo
        fi
        ctl --token-file operator.token validate "$target"
        ((rc == 0)) || die "buzzctl validate failed with exit status $rc"
    fi

    step "refused requests"
    local victim="${target:-demo.events.content_len_v1}"
    echo "# bob's token has only the read capability:"
    ctl --token-file readonly.token whoami
    ctl --token-file readonly.token pause "$victim"
    if ((rc != 4)) || [[ "${out,,}" != *permission_denied* ]]; then
        die "the read-only token was not refused with PERMISSION_DENIED (exit 4)"
    fi
    echo
    echo "# a forged token: signed by another key that also calls itself demo-key"
    show_cmd buzzctl token keygen --kid demo-key --secret-out forger.secret --public-out forger.pub
    (cd "$DEMO_DIR" && umask 077 && "$BUZZCTL" token keygen --kid demo-key \
        --secret-out forger.secret --public-out forger.pub >/dev/null 2>&1) ||
        die "buzzctl token keygen failed"
    show_cmd buzzctl token mint --secret forger.secret --actor mallory@evil \
        --cap read,control,validate,readiness --audience buzz-demo --ttl 1d '>forged.token'
    (cd "$DEMO_DIR" && umask 077 && "$BUZZCTL" token mint --secret forger.secret \
        --actor mallory@evil --cap read,control,validate,readiness --audience buzz-demo \
        --ttl 1d >forged.token) || die "buzzctl token mint failed"
    ctl --token-file forged.token pause "$victim"
    if ((rc != 4)) || [[ "${out,,}" != *unauthenticated* ]]; then
        die "the forged token was not refused with UNAUTHENTICATED (exit 4)"
    fi

    step "the local socket: boundary authority, no token, no actor"
    show_cmd buzzctl --url "$IPC_URL" whoami
    rc=0
    out="$("$BUZZCTL" --url "$IPC_URL" whoami 2>&1)" || rc=$?
    printf '%s\n' "$out"
    ((rc == 0)) || die "buzzctl whoami over ipc failed with exit status $rc"
    [[ "$out" == *"(none)"*"authority:"*"ipc uid="* ]] ||
        die "whoami over ipc did not show boundary authority without an actor"

    step "monitoring over HTTP: $HTTP_URL/readyz and $HTTP_URL/metrics (no token; loopback)"
    show_cmd curl -s "$HTTP_URL/readyz"
    curl -s --max-time 5 "$HTTP_URL/readyz" || die "GET /readyz failed"
    echo
    show_cmd curl -s "$HTTP_URL/metrics" '|' grep -E "'^buzz_backfill_(ready|backfills|batches_committed_total|rows_changed_total|claims_total)'"
    curl -s --max-time 5 "$HTTP_URL/metrics" >"$DEMO_DIR/metrics.txt" || die "GET /metrics failed"
    grep -E '^buzz_backfill_(ready|backfills|batches_committed_total|rows_changed_total|claims_total)[ {]' \
        "$DEMO_DIR/metrics.txt" || die "/metrics lacks the backfill metrics"
    echo "($(grep -c '^buzz_backfill_' "$DEMO_DIR/metrics.txt") samples in all; docs/operating.md explains each)"

    step "the audit trail (newest first)"
    ctl_ok --token-file operator.token audit --limit 15

    step "the operator's dashboard, one frame (buzzctl dash --once; live: buzzctl dash)"
    ctl_ok --token-file operator.token dash --once

    step "stopping buzz-backfilld with SIGTERM"
    show_cmd kill -TERM "$daemon_pid"
    kill -TERM "$daemon_pid"
    local i
    for ((i = 0; i < 300; i++)); do
        kill -0 "$daemon_pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$daemon_pid" 2>/dev/null && die "buzz-backfilld did not stop within 30 s of SIGTERM"
    rc=0
    wait "$daemon_pid" || rc=$?
    daemon_pid=""
    tail -n 3 "$DAEMON_LOG" | sed 's/^/  /'
    ((rc == 0)) || die "buzz-backfilld exited with status $rc after SIGTERM"
    echo "buzz-backfilld exited with status 0"
    if ((batch_report)); then
        echo
        echo "--batch-report: the daemon logged each claim and (at debug level) each worker step:"
        grep -E '(: |"msg":")(claimed|demo[.a-z_0-9]*: [0-9]+ batches committed)' "$DAEMON_LOG" |
            head -n 6 |
            sed 's/^/  /'
        echo "  ... $(grep -c 'batches committed' "$DAEMON_LOG") worker steps that committed batches" \
            "in $DAEMON_LOG"
    fi
}

# ---- 1. packages ---------------------------------------------------------------------------
if ((deps)); then
    step "installing missing packages (scripts/deps.sh)"
    "$ROOT/scripts/deps.sh"
fi

# ---- 2. build ------------------------------------------------------------------------------
RUNNER="$BUILD/examples/buzz-demo-run"
MODULE="$BUILD/examples/buzz-demo-definitions.so"
DAEMON="$BUILD/server/buzz-backfilld"
BUZZCTL="$BUILD/client/buzzctl"
if ((engine_only)); then
    targets=(buzz-demo-run buzz-demo-definitions)
    binaries=("$RUNNER" "$MODULE")
else
    targets=(buzz-backfilld buzzctl buzz-demo-definitions)
    binaries=("$DAEMON" "$BUZZCTL" "$MODULE")
fi
if ((build)); then
    step "building ($BUILD)"
    configure_log="$(mktemp "${TMPDIR:-/tmp}/buzz-demo-cmake.XXXXXX")"
    if ! cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$configure_log" 2>&1; then
        cat "$configure_log" >&2
        rm -f "$configure_log"
        die "cmake configure failed"
    fi
    rm -f "$configure_log"
    cmake --build "$BUILD" -j"$(nproc 2>/dev/null || echo 2)" --target "${targets[@]}"
fi
for f in "${binaries[@]}"; do
    [[ -f "$f" ]] || die "the build did not produce $f"
done

# ---- 3. PostgreSQL -------------------------------------------------------------------------
if [[ -n "$pg_url" ]]; then
    URL="$pg_url"
else
    step "starting the private PostgreSQL cluster (scripts/pg.sh start)"
    "$PG" start
    URL="$("$PG" url)"
fi
# the same server, database $db_name
# shellcheck source=scripts/db-url.sh
. "$ROOT/scripts/db-url.sh"
DB_URL="$(buzz_db_url "$URL" "$db_name")"

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
step "creating database $db_name with $rows historical events"
psql_run "$URL" -c "DROP DATABASE IF EXISTS $db_name WITH (FORCE)" -c "CREATE DATABASE $db_name"
t0=$SECONDS
psql_run "$DB_URL" -f "$DEMO_SQL/schema.sql"
psql_run "$DB_URL" -v rows="$rows" -f "$DEMO_SQL/seed.sql"
echo "seeded demo.events: $(psql_run "$DB_URL" -At -c "SELECT count(*) || ' rows, ' ||
    pg_size_pretty(pg_total_relation_size('demo.events')) FROM demo.events")" \
    "in $((SECONDS - t0))s"
echo "rolling out the new write path first (examples/demo/write_path.sql)"
psql_run "$DB_URL" -f "$DEMO_SQL/write_path.sql"

# ---- 5..7. the backfills -------------------------------------------------------------------
if ((engine_only)); then
    step "running the demo backfills (buzz-demo-run)"
    run_args=(--db "$DB_URL" --module "$MODULE" --workers "$workers" --start "$start")
    ((batch_report)) && run_args+=(--batch-report)
    echo "$RUNNER ${run_args[*]}"
    run_rc=0
    "$RUNNER" "${run_args[@]}" || run_rc=$?
    ((run_rc == 0)) || die "buzz-demo-run exited with status $run_rc"
else
    service_demo
fi

# ---- 8. check ------------------------------------------------------------------------------
step "checking the result in PostgreSQL"
psql_run "$DB_URL" -c "SELECT id AS backfill, state, rows_committed AS rows,
    batches_committed AS batches, generation, validation_outcome AS validation,
    claim_owner AS claim FROM buzz_backfill.backfill ORDER BY id"
# rows still needing repair, for each started backfill (a pending one repairs nothing)
unrepaired="$(psql_run "$DB_URL" -At -c "SELECT
    (SELECT count(*) FROM demo.events WHERE content_len IS DISTINCT FROM octet_length(content)) *
      (SELECT count(*) FROM buzz_backfill.backfill
       WHERE id = 'demo.events.content_len_v1' AND state <> 'pending')
  + (SELECT count(*) FROM demo.events WHERE pubkey_hex IS DISTINCT FROM encode(pubkey, 'hex')) *
      (SELECT count(*) FROM buzz_backfill.backfill
       WHERE id = 'demo.events.pubkey_hex_v1' AND state <> 'pending')
  + (SELECT count(*) FROM demo.events WHERE tag_count IS DISTINCT FROM jsonb_array_length(tags)) *
      (SELECT count(*) FROM buzz_backfill.backfill
       WHERE id = 'demo.events.tag_count_v1' AND state <> 'pending')")"
unfinished="$(psql_run "$DB_URL" -At -c "SELECT count(*) FROM buzz_backfill.backfill
    WHERE state NOT IN ('completed', 'pending')")"
completed="$(psql_run "$DB_URL" -At -c "SELECT count(*) FROM buzz_backfill.backfill
    WHERE state = 'completed'")"
claims="$(psql_run "$DB_URL" -At -c "SELECT count(*) FROM buzz_backfill.backfill
    WHERE claim_owner IS NOT NULL")"
echo "rows not repaired: $unrepaired; backfills not finished: $unfinished; claims held: $claims"
((unfinished == 0 && unrepaired == 0 && claims == 0)) ||
    die "$unfinished backfills not finished, $unrepaired rows not repaired, $claims claims left"

echo
if ((engine_only)); then
    echo "DEMO OK: $completed backfills completed; every started backfill repaired all its rows."
else
    echo "DEMO OK: $completed backfills completed through buzz-backfilld and buzzctl; every" \
        "started backfill repaired all its rows; the daemon stopped cleanly."
fi

echo "(${SECONDS}s in all)"
echo
if [[ -z "$pg_url" ]] && ((!stop)); then
    echo "PostgreSQL keeps running: $("$PG" status || true)"
fi
if ((!stop)); then
    echo "  look around:  $PSQL \"$DB_URL\""
    echo "                e.g. SELECT * FROM buzz_backfill.backfill;  SELECT * FROM buzz_backfill.audit;"
fi
if ((engine_only)); then
    ((stop)) || echo "  run again:    $RUNNER --db \"$DB_URL\" --module $MODULE"
else
    echo "  demo files:   $DEMO_DIR (configuration, public key, tokens; the signing keys are removed on exit)"
    echo "  daemon log:   $DAEMON_LOG"
    if ((!stop)); then
        echo "  daemon again: $DAEMON --config $DEMO_DIR/buzz-backfilld.conf &"
        echo "                then: cd $DEMO_DIR && BUZZ_BACKFILL_URL=$TCP_URL $BUZZCTL --token-file operator.token list"
    fi
fi
if [[ -z "$pg_url" ]] && ((!stop)); then
    echo "  stop it:      scripts/pg.sh stop"
fi
