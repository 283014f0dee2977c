#!/usr/bin/env bash
# Manage a private, throwaway PostgreSQL 15 cluster for buzz-backfill tests and the demo.
# Normal users keep it in <repo>/.pg/; root (which initdb refuses) gets a fresh
# /tmp/buzz-pg.XXXXXX owned by the "postgres" user, recorded in <repo>/.pg/state.
set -euo pipefail

PROG="${0##*/}"
PORT_BASE="${BUZZ_PG_PORT_BASE:-54320}"
PORT_TRIES=200
MARKER=".buzz-pg-cluster"

usage()
{
    cat <<USAGE
Usage: $PROG start|stop|url|status|crash-restart|standby-start|standby-stop|aged-start|
       aged-stop|durable-start|durable-stop|durable-url|psql [psql args...]

Private PostgreSQL 15 cluster for buzz-backfill tests and the demo
(trust auth, user "postgres", 127.0.0.1 only, durability switched off).

  start    create the cluster if needed and start it on a free port
           (from $PORT_BASE upward); succeeds at once if already running
  stop     fast shutdown; as root the temporary state dir is deleted too
  url      print the libpq URL, e.g. postgresql://postgres@127.0.0.1:54320/postgres
  status   print whether it runs (exit 0 if running, 3 if not)
  crash-restart
           immediate shutdown (a crash: every session dropped, crash recovery)
           and start again on the same port (tests/robustness)
  standby-start
           a streaming replica of the running cluster (pg_basebackup, hot
           standby, on another free port); prints its libpq URL; succeeds at
           once if it already runs (tests of replica-lag throttling)
  standby-stop
           stop the replica and delete it (stop does this too)
  aged-start
           a second, scratch cluster whose transaction IDs begin 40 million
           in, so every database's age(datfrozenxid) is about 1.9 % of the
           wraparound horizon (tests of the xid_age throttle signal); prints
           its libpq URL; succeeds at once if it already runs
  aged-stop
           stop the scratch cluster and delete it (stop does this too)
  durable-start
           a second, scratch cluster with production durability: fsync,
           full_page_writes and synchronous_commit on (otherwise the settings
           of the private cluster), on another free port, for benchmarks
           (bench/scale.sh --durable); prints its libpq URL; succeeds at once
           if it already runs
  durable-stop
           stop the durable cluster and delete it (stop does this too)
  durable-url
           print the durable cluster's libpq URL (exit 1 if it does not run)
  psql     run psql against the cluster with the remaining arguments

State dir: <repo>/.pg/ for normal users; as root a mktemp dir under /tmp run
as the "postgres" user (created if missing). The chosen dir is written to
<repo>/.pg/state. Server log: <state dir>/postgres.log.

Environment: BUZZ_PG_PORT_BASE (first port to try, default 54320).
USAGE
}

die()
{
    echo "$PROG: $*" >&2
    exit 1
}

note()
{
    echo "$PROG: $*" >&2
}

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! REPO="$(git -C "$SCRIPT_DIR" rev-parse --show-toplevel 2>/dev/null)" || [[ -z "$REPO" ]]; then
    REPO="$(cd "$SCRIPT_DIR/.." && pwd)"
fi
META="$REPO/.pg"
STATE_FILE="$META/state"

if ((EUID == 0)); then
    AS_ROOT=1
else
    AS_ROOT=0
fi

STATE=""
DATA=""
SOCK=""
LOG=""
BINDIR=""

find_bindir()
{
    local dir
    if [[ -x /usr/lib/postgresql/15/bin/pg_ctl ]]; then
        BINDIR=/usr/lib/postgresql/15/bin
    elif command -v pg_config >/dev/null 2>&1 &&
        dir="$(pg_config --bindir 2>/dev/null)" && [[ -x "$dir/pg_ctl" ]]; then
        BINDIR="$dir"
    else
        die "PostgreSQL 15 server binaries not found (run scripts/deps.sh)"
    fi
    local b
    for b in initdb pg_ctl pg_isready psql postgres pg_basebackup; do
        [[ -x "$BINDIR/$b" ]] || die "missing $BINDIR/$b (run scripts/deps.sh)"
    done
}

# Major version of the server binaries, e.g. "15".
server_major()
{
    local v
    v="$("$BINDIR/postgres" --version | awk '{ print $3 }')"
    printf '%s\n' "${v%%[!0-9]*}"
}

set_paths()
{
    STATE="$1"
    DATA="$STATE/data"
    SOCK="$STATE/run"
    LOG="$STATE/postgres.log"
}

# Pick the state dir of an existing cluster (may leave STATE empty for root).
resolve_state()
{
    if ((AS_ROOT)); then
        local dir=""
        if [[ -f "$STATE_FILE" ]]; then
            dir="$(head -n 1 "$STATE_FILE")"
        fi
        if [[ -n "$dir" && "$dir" == /* && -d "$dir" && -f "$dir/$MARKER" ]]; then
            set_paths "$dir"
        else
            STATE=""
        fi
    else
        set_paths "$META"
    fi
}

# Run a server-side PostgreSQL program as the cluster owner. The lock fd is
# closed so that a started server does not inherit (and hold) the lock.
as_owner()
{
    if ((AS_ROOT)); then
        (cd "$STATE" && runuser -u postgres -- "$@") 9>&-
    else
        "$@" 9>&-
    fi
}

# Is the PID in postmaster.pid a live process? A postmaster killed with -9
# can linger as a zombie when PID 1 does not reap (containers); that is dead.
postmaster_alive()
{
    local pid stat
    [[ -f "$DATA/postmaster.pid" ]] || return 1
    pid="$(sed -n 1p "$DATA/postmaster.pid" 2>/dev/null || true)"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    stat="$(cat "/proc/$pid/stat" 2>/dev/null)" || return 1
    stat="${stat##*) }"
    [[ "${stat%% *}" != [ZX] ]]
}

is_running()
{
    [[ -n "$STATE" && -f "$DATA/PG_VERSION" ]] || return 1
    as_owner "$BINDIR/pg_ctl" status -D "$DATA" >/dev/null 2>&1 || return 1
    postmaster_alive
}

# Port of the running server (postmaster.pid line 4), else the last one used.
current_port()
{
    local port=""
    if [[ -f "$DATA/postmaster.pid" ]]; then
        port="$(sed -n 4p "$DATA/postmaster.pid" 2>/dev/null || true)"
    fi
    if [[ ! "$port" =~ ^[0-9]+$ && -f "$STATE/port" ]]; then
        port="$(head -n 1 "$STATE/port")"
    fi
    [[ "$port" =~ ^[0-9]+$ ]] || return 1
    printf '%s\n' "$port"
}

url_for_port()
{
    printf 'postgresql://postgres@127.0.0.1:%s/postgres\n' "$1"
}

port_in_use()
{
    local port="$1" out
    if command -v ss >/dev/null 2>&1 && out="$(ss -Htln "sport = :$port" 2>/dev/null)"; then
        [[ -n "$out" ]] && return 0
    fi
    # Fallback (and double check): can we connect to it?
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        return 0
    fi
    return 1
}

# Print a free port, preferring $1 (the previously used one) when it is free.
pick_port()
{
    local prefer="${1:-}" skip="${2:-}" p
    if [[ -n "$prefer" && "$prefer" != "$skip" ]] && ! port_in_use "$prefer"; then
        printf '%s\n' "$prefer"
        return 0
    fi
    for ((p = PORT_BASE; p < PORT_BASE + PORT_TRIES; p++)); do
        [[ "$p" == "$skip" ]] && continue
        if ! port_in_use "$p"; then
            printf '%s\n' "$p"
            return 0
        fi
    done
    return 1
}

ensure_postgres_user()
{
    getent passwd postgres >/dev/null && return 0
    note "creating system user 'postgres'"
    if command -v useradd >/dev/null 2>&1; then
        local group_opt=(--user-group)
        if getent group postgres >/dev/null; then
            group_opt=(--gid postgres)
        fi
        useradd --system "${group_opt[@]}" --no-create-home --home-dir /var/lib/postgresql \
            --shell /usr/sbin/nologin --comment "PostgreSQL administrator" postgres
    elif command -v adduser >/dev/null 2>&1; then
        adduser --system --group --no-create-home --home /var/lib/postgresql postgres
    else
        die "cannot create the 'postgres' user (no useradd/adduser)"
    fi
}

write_state_file()
{
    local tmp="$STATE_FILE.tmp.$$"
    if printf '%s\n' "$STATE" >"$tmp" 2>/dev/null && mv -f "$tmp" "$STATE_FILE" 2>/dev/null; then
        return 0
    fi
    rm -f "$tmp" 2>/dev/null || true
    if ((AS_ROOT)); then
        die "cannot write $STATE_FILE"
    fi
    note "warning: cannot write $STATE_FILE (ignored)"
}

# Serialise start/stop of the same cluster.
take_lock()
{
    command -v flock >/dev/null 2>&1 || return 0
    exec 9>>"$META/lock" || return 0
    flock -w 120 9 || die "timed out waiting for $META/lock"
}

# Escape a value for a single-quoted postgresql.conf string.
conf_quote()
{
    local s="${1//\\/\\\\}"
    printf "'%s'" "${s//\'/\'\'}"
}

init_cluster()
{
    local major
    major="$(server_major)"
    if [[ -f "$DATA/PG_VERSION" ]]; then
        if [[ "$(cat "$DATA/PG_VERSION")" == "$major" ]]; then
            return 0
        fi
        note "existing cluster in $DATA is not version $major; recreating it"
    fi
    rm -rf "$DATA"
    as_owner mkdir -p "$SOCK"
    note "initdb $DATA"
    if ! as_owner "$BINDIR/initdb" -D "$DATA" --auth=trust -U postgres --encoding=UTF8 \
        --locale=C >"$STATE/initdb.log" 2>&1; then
        cat "$STATE/initdb.log" >&2
        rm -rf "$DATA"
        die "initdb failed"
    fi

    local shm_kb dsm=""
    shm_kb="$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $2 }' || true)"
    if [[ ! "$shm_kb" =~ ^[0-9]+$ ]] || ((shm_kb < 1048576)); then
        # Small /dev/shm (e.g. docker's 64MB default) breaks parallel queries.
        dsm="dynamic_shared_memory_type = mmap"
    fi

    cat >>"$DATA/postgresql.conf" <<CONF

# ---- buzz-backfill private test cluster (scripts/pg.sh) ----
listen_addresses = '127.0.0.1'
fsync = off
synchronous_commit = on
full_page_writes = off
max_connections = 200
shared_buffers = 256MB
logging_collector = off
log_line_prefix = '%m [%p] %q%u@%d '
$dsm
# port and unix_socket_directories are rewritten by pg.sh on every start
include_if_exists 'buzz_runtime.conf'
CONF
}

# Per-start settings: the port and the socket directory (paths may move).
write_runtime_conf()
{
    local port="$1" sockdirs
    # A unix socket path must fit in sun_path (107 bytes incl. ".s.PGSQL.NNNNN").
    if ((${#SOCK} + 15 <= 107)); then
        sockdirs="$(conf_quote "$SOCK")"
    else
        note "warning: $SOCK is too long for a unix socket; TCP only"
        sockdirs="''"
    fi
    printf 'port = %s\nunix_socket_directories = %s\n' "$port" "$sockdirs" \
        >"$DATA/buzz_runtime.conf"
    if ((AS_ROOT)); then
        chown postgres: "$DATA/buzz_runtime.conf"
    fi
    printf '%s\n' "$port" >"$STATE/port"
}

wait_ready()
{
    local port="$1" i
    for ((i = 0; i < 120; i++)); do
        if "$BINDIR/pg_isready" -q -h 127.0.0.1 -p "$port" -U postgres -d postgres; then
            return 0
        fi
        sleep 0.5
    done
    return 1
}

cmd_start()
{
    mkdir -p "$META" || die "cannot create $META"
    take_lock
    resolve_state
    if is_running; then
        local port
        port="$(current_port)" || die "running, but cannot determine its port"
        echo "$PROG: already running: $(url_for_port "$port")"
        return 0
    fi

    if ((AS_ROOT)); then
        if [[ -z "$STATE" ]]; then
            ensure_postgres_user
            local dir
            dir="$(mktemp -d /tmp/buzz-pg.XXXXXX)"
            touch "$dir/$MARKER"
            chown -R postgres: "$dir"
            chmod 700 "$dir"
            set_paths "$dir"
        fi
    else
        [[ -w "$META" ]] || die "$META is not writable by $(id -un)"
        touch "$STATE/$MARKER"
    fi
    write_state_file
    init_cluster
    as_owner mkdir -p "$SOCK"
    if [[ -f "$DATA/postmaster.pid" ]] && ! postmaster_alive; then
        # Leftovers of a killed server (its PID may still exist as a zombie).
        rm -f "$DATA/postmaster.pid" "$SOCK"/.s.PGSQL.*
    fi

    local prev="" port="" attempt
    prev="$(current_port 2>/dev/null || true)"
    for ((attempt = 1; attempt <= 5; attempt++)); do
        port="$(pick_port "$prev" "$port")" || die "no free port in $PORT_BASE..$((PORT_BASE + PORT_TRIES - 1))"
        write_runtime_conf "$port"
        local log_size=0
        [[ -f "$LOG" ]] && log_size="$(stat -c %s "$LOG")"
        if as_owner "$BINDIR/pg_ctl" start -D "$DATA" -l "$LOG" -w -t 60 >/dev/null; then
            break
        fi
        # Lost a race for the port? Then try another one.
        if tail -c +"$((log_size + 1))" "$LOG" 2>/dev/null |
            grep -E 'could not (bind|create listen socket)|Address already in use' >/dev/null; then
            note "port $port got taken, retrying"
            prev=""
            continue
        fi
        tail -n 30 "$LOG" >&2 || true
        die "pg_ctl start failed (log: $LOG)"
    done
    is_running || die "server did not start (log: $LOG)"
    wait_ready "$port" || die "server not accepting connections on port $port (log: $LOG)"
    echo "$PROG: running: $(url_for_port "$port") (state: $STATE)"
}

cmd_stop()
{
    [[ -d "$META" ]] || {
        echo "$PROG: not running"
        return 0
    }
    take_lock
    resolve_state
    if [[ -z "$STATE" ]]; then
        echo "$PROG: not running"
        rm -f "$STATE_FILE"
        return 0
    fi
    side_stop "$STATE/standby"
    side_stop "$STATE/aged"
    side_stop "$STATE/durable"
    if is_running; then
        if ! as_owner "$BINDIR/pg_ctl" stop -D "$DATA" -m fast -w -t 60 >/dev/null &&
            postmaster_alive; then
            note "fast shutdown failed, trying immediate"
            as_owner "$BINDIR/pg_ctl" stop -D "$DATA" -m immediate -w -t 30 >/dev/null ||
                die "could not stop the server (log: $LOG)"
        fi
        echo "$PROG: stopped"
    else
        echo "$PROG: not running"
    fi
    if ((AS_ROOT)); then
        # Only ever delete a directory we created ourselves.
        if [[ "$STATE" == /tmp/buzz-pg.* && -f "$STATE/$MARKER" ]]; then
            rm -rf "$STATE"
        fi
        rm -f "$STATE_FILE"
    fi
}

# A crash and restart: immediate shutdown (no checkpoint, every session dropped at once, crash
# recovery on start), then start on the same port. For the robustness tests.
cmd_crash_restart()
{
    take_lock
    resolve_state
    is_running || die "not running (use: $0 start)"
    as_owner "$BINDIR/pg_ctl" restart -D "$DATA" -m immediate -w -t 60 -l "$LOG" >/dev/null ||
        die "restart failed (log: $LOG)"
    echo "$PROG: restarted after an immediate shutdown"
}

# ---- the streaming replica ---------------------------------------------------------------------

# A second cluster in DIR (the standby, the aged cluster): does it run, print its URL, stop and
# delete it, and the stop command.
side_running()
{
    [[ -f "$1/PG_VERSION" ]] && as_owner "$BINDIR/pg_ctl" status -D "$1" >/dev/null 2>&1
}

side_url()
{
    url_for_port "$(sed -n 4p "$1/postmaster.pid")"
}

side_stop()
{
    if side_running "$1"; then
        as_owner "$BINDIR/pg_ctl" stop -D "$1" -m immediate -w -t 30 >/dev/null || true
    fi
    [[ -d "$1" ]] && as_owner rm -rf "$1"
    return 0
}

# side_start DIR LOG PORT NAME: start the cluster in DIR and print its URL
side_start()
{
    as_owner "$BINDIR/pg_ctl" start -D "$1" -l "$2" -w -t 60 >/dev/null ||
        die "$4 start failed (log: $2)"
    wait_ready "$3" || die "$4 not accepting connections (log: $2)"
    url_for_port "$3"
}

# cmd_side_stop NAME DIR_UNDER_STATE
cmd_side_stop()
{
    take_lock
    resolve_state
    [[ -n "$STATE" ]] || return 0
    side_stop "$STATE/$2"
    echo "$PROG: $1 stopped"
}

cmd_standby_start()
{
    take_lock
    resolve_state
    is_running || die "not running (use: $0 start)"
    local primary sport SDATA="$STATE/standby"
    primary="$(current_port)" || die "cannot determine the port"
    local streaming
    streaming="$("$BINDIR/psql" -h 127.0.0.1 -p "$primary" -U postgres -d postgres -qtAc \
        "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'buzz_standby'" \
        2>/dev/null || echo 0)"
    if side_running "$SDATA"; then
        if [[ "$streaming" != 0 ]]; then
            side_url "$SDATA"
            return 0
        fi
        # running but no longer streaming (its WAL was removed under heavy writes, or the
        # primary restarted under it): a fresh one
        side_stop "$SDATA"
    fi
    as_owner rm -rf "$SDATA"
    # a replication slot keeps the WAL the standby still needs (without it a busy primary
    # removed segments before the standby caught up); standby-stop drops it
    "$BINDIR/psql" -h 127.0.0.1 -p "$primary" -U postgres -d postgres -qtAc \
        "SELECT pg_drop_replication_slot('buzz_standby') FROM pg_replication_slots
         WHERE slot_name = 'buzz_standby' AND NOT active" >/dev/null
    as_owner "$BINDIR/pg_basebackup" -D "$SDATA" -h 127.0.0.1 -p "$primary" -U postgres -R \
        -C -S buzz_standby -X stream -c fast -d "application_name=buzz_standby" \
        >"$STATE/basebackup.log" 2>&1 || {
        cat "$STATE/basebackup.log" >&2
        die "pg_basebackup failed"
    }
    sport="$(pick_port "" "$primary")" || die "no free port for the standby"
    printf 'port = %s\nunix_socket_directories = %s\nhot_standby = on\n' "$sport" \
        "$(conf_quote "$SOCK")" | as_owner tee "$SDATA/buzz_runtime.conf" >/dev/null
    side_start "$SDATA" "$STATE/standby.log" "$sport" standby
    # ready for connections is not streaming yet: a test that pauses replay right away would
    # otherwise pause it before the WAL receiver ever connected (no lag can be measured then)
    local i state=""
    for ((i = 0; i < 300; i++)); do
        state="$("$BINDIR/psql" -h 127.0.0.1 -p "$primary" -U postgres -d postgres -qtAc \
            "SELECT state FROM pg_stat_replication WHERE application_name = 'buzz_standby'" \
            2>/dev/null || true)"
        [[ "$state" == streaming ]] && return 0
        sleep 0.1
    done
    die "the standby does not stream after 30 s (log: $STATE/standby.log)"
}

cmd_standby_stop()
{
    cmd_side_stop standby standby
    local primary i
    if is_running && primary="$(current_port)"; then
        # its WAL sender ends a moment after the standby: wait for the slot to be free
        for ((i = 0; i < 50; i++)); do
            [[ "$("$BINDIR/psql" -h 127.0.0.1 -p "$primary" -U postgres -d postgres -qtAc \
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'buzz_standby'
                 AND active" 2>/dev/null || echo 0)" == 0 ]] && break
            sleep 0.1
        done
        "$BINDIR/psql" -h 127.0.0.1 -p "$primary" -U postgres -d postgres -qtAc \
            "SELECT pg_drop_replication_slot('buzz_standby') FROM pg_replication_slots
             WHERE slot_name = 'buzz_standby' AND NOT active" >/dev/null || true
    fi
}

# ---- the aged cluster (old transaction IDs) ----------------------------------------------------

AGED_XID=40000000

cmd_aged_start()
{
    take_lock
    resolve_state
    is_running || die "not running (use: $0 start)"
    local port seg ADATA="$STATE/aged"
    if side_running "$ADATA"; then
        side_url "$ADATA"
        return 0
    fi
    as_owner rm -rf "$ADATA"
    as_owner "$BINDIR/initdb" -D "$ADATA" --auth=trust -U postgres --encoding=UTF8 --locale=C \
        --no-sync >"$STATE/aged-initdb.log" 2>&1 || {
        cat "$STATE/aged-initdb.log" >&2
        die "initdb of the aged cluster failed"
    }
    # the next transaction ID jumps ahead; the commit log segment that holds it (1,048,576 IDs a
    # 256 kB segment) must exist, pg_resetwal does not create it
    as_owner "$BINDIR/pg_resetwal" -x "$AGED_XID" "$ADATA" >/dev/null ||
        die "pg_resetwal of the aged cluster failed"
    seg="$(printf '%04X' $((AGED_XID / 1048576)))"
    as_owner dd if=/dev/zero of="$ADATA/pg_xact/$seg" bs=8192 count=32 status=none ||
        die "cannot create the aged cluster's commit log segment"
    port="$(pick_port "" "$(current_port)")" || die "no free port for the aged cluster"
    printf "listen_addresses = '127.0.0.1'\nport = %s\nunix_socket_directories = %s\nfsync = off\n" \
        "$port" "$(conf_quote "$SOCK")" | as_owner tee -a "$ADATA/postgresql.conf" >/dev/null
    side_start "$ADATA" "$STATE/aged.log" "$port" "aged cluster"
}

cmd_aged_stop()
{
    cmd_side_stop "aged cluster" aged
}

# ---- the durable cluster (fsync, full_page_writes, synchronous_commit on) ---------------------

cmd_durable_start()
{
    take_lock
    resolve_state
    is_running || die "not running (use: $0 start)"
    local port DDATA="$STATE/durable"
    if side_running "$DDATA"; then
        side_url "$DDATA"
        return 0
    fi
    as_owner rm -rf "$DDATA"
    as_owner "$BINDIR/initdb" -D "$DDATA" --auth=trust -U postgres --encoding=UTF8 --locale=C \
        >"$STATE/durable-initdb.log" 2>&1 || {
        cat "$STATE/durable-initdb.log" >&2
        die "initdb of the durable cluster failed"
    }
    port="$(pick_port "" "$(current_port)")" || die "no free port for the durable cluster"
    # the private cluster's settings (init_cluster) except durability, which stays on
    {
        printf '\n# ---- buzz-backfill durable side cluster (scripts/pg.sh durable-start) ----\n'
        printf "listen_addresses = '127.0.0.1'\nport = %s\nunix_socket_directories = %s\n" \
            "$port" "$(conf_quote "$SOCK")"
        printf 'fsync = on\nfull_page_writes = on\nsynchronous_commit = on\n'
        printf 'max_connections = 200\nshared_buffers = 256MB\nlogging_collector = off\n'
        grep -E '^dynamic_shared_memory_type = mmap' "$DATA/postgresql.conf" || true
    } | as_owner tee -a "$DDATA/postgresql.conf" >/dev/null
    side_start "$DDATA" "$STATE/durable.log" "$port" "durable cluster"
}

cmd_durable_stop()
{
    cmd_side_stop "durable cluster" durable
}

cmd_durable_url()
{
    resolve_state
    if [[ -z "$STATE" ]] || ! side_running "$STATE/durable"; then
        die "the durable cluster does not run"
    fi
    side_url "$STATE/durable"
}

cmd_url()
{
    resolve_state
    is_running || die "not running (use: $0 start)"
    local port
    port="$(current_port)" || die "cannot determine the port"
    url_for_port "$port"
}

cmd_status()
{
    resolve_state
    if is_running; then
        local port
        port="$(current_port || echo '?')"
        echo "running: $(url_for_port "$port") (state: $STATE, log: $LOG)"
        return 0
    fi
    echo "stopped"
    return 3
}

cmd_psql()
{
    local url
    url="$(cmd_url)"
    exec "$BINDIR/psql" -d "$url" "$@"
}

main()
{
    local cmd="${1:-}"
    case "$cmd" in
    -h | --help | help)
        usage
        return 0
        ;;
    start | stop | url | status | psql) ;;
    crash-restart)
        cmd="crash_restart"
        ;;
    standby-start | standby-stop | aged-start | aged-stop | durable-start | durable-stop | \
        durable-url)
        cmd="${cmd/-/_}"
        ;;
    "")
        usage >&2
        return 2
        ;;
    *)
        echo "$PROG: unknown command: $cmd (see --help)" >&2
        return 2
        ;;
    esac
    shift
    find_bindir
    "cmd_$cmd" "$@"
}

main "$@"
