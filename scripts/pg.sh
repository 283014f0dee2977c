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
       aged-stop|durable-start|durable-stop|durable-url|failover-start|failover-url|
       failover-primary-stop|failover-promote|failover-old-primary-start|failover-stop|
       listen-start ADDR CLIENT_CIDR|listen-stop|
       pgbouncer-start MODE|pgbouncer-stop|tls-start|tls-stop|psql [psql args...]

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
           if it already runs. BUZZ_PG_DURABLE_WAL_PARENT=DIR puts its pg_wal
           in a fresh directory under DIR (e.g. /dev/shm: a diagnostic of a WAL
           device that flushes in microseconds; tmpfs is NOT durable)
  durable-stop
           stop the durable cluster and delete it (stop does this too)
  durable-url
           print the durable cluster's libpq URL (exit 1 if it does not run)
  failover-start
           a scratch primary and its streaming standby (asynchronous, a
           replication slot), each on another free port, for failover tests
           (tests/robustness/test_failover.c); prints the multi-host libpq URL
           (primary first, target_session_attrs=read-write); a pair that
           exists already is deleted first
  failover-url
           print that multi-host URL (exit 1 if the pair does not exist)
  failover-primary-stop
           immediate shutdown of the scratch primary (a crash: unreplicated
           commits are lost to the standby)
  failover-promote
           promote the standby (pg_ctl promote, waits until it takes writes)
  failover-old-primary-start
           bring the stopped primary back as a standby of the promoted one (a
           standby.signal: read-only whether or not it can follow), as a
           fenced old primary does
  failover-stop
           stop the pair and delete it (stop does this too)
  listen-start ADDR CLIENT_CIDR
           a scratch cluster that listens on 127.0.0.1 and on ADDR (an
           address of this host, e.g. a test's veth end) and trusts clients
           from CLIENT_CIDR, on another free port, for network partition tests
           (tests/robustness/test_partition.c); prints its 127.0.0.1 URL;
           the private cluster's listen_addresses stay 127.0.0.1
  listen-stop
           stop the listen cluster and delete it (stop does this too)
  pgbouncer-start MODE
           PgBouncer in front of the running cluster with pool_mode MODE
           (session or transaction), on another free port, every database
           name passed through; prints its libpq URL; succeeds at once if it
           already runs in MODE, restarts it in MODE otherwise
           (tests/integration/test_pgbouncer.c)
  pgbouncer-stop
           stop PgBouncer and delete its directory (stop does this too)
  tls-start
           a scratch cluster with ssl = on and, over TCP, only TLS with a
           password (scram-sha-256); its CA and its server certificate (for
           host name "localhost") are made by openssl in a fresh directory;
           prints a libpq URL with sslmode=verify-full, then the CA file's
           path; succeeds at once if it already runs
           (tests/integration/test_pg_tls.c)
  tls-stop
           stop the TLS cluster and delete it, certificates included (stop
           does this too)
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

# A port is in use when anything holds it locally, not only a listener: the ports here lie in
# Linux's ephemeral range (32768-60999), so a client connection (a test's session to another
# cluster, say) may hold it as its own end, and PostgreSQL's bind then fails ("Address already
# in use"); with two listen addresses it starts on the other one alone and never answers on
# 127.0.0.1. Both were seen in CI (a side cluster that would not start on two ports in turn, a
# listen cluster that did not answer).
port_in_use()
{
    local port="$1" out
    if command -v ss >/dev/null 2>&1 && out="$(ss -Htan "sport = :$port" 2>/dev/null)"; then
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
    pgbouncer_stop "$STATE/pgbouncer"
    tls_stop
    side_stop "$STATE/fo-standby"
    side_stop "$STATE/fo-primary"
    side_stop "$STATE/listen"
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
    if [[ -L "$1/pg_wal" ]]; then # initdb --waldir: the WAL lives elsewhere
        as_owner rm -rf "$(readlink "$1/pg_wal")"
    fi
    [[ -d "$1" ]] && as_owner rm -rf "$1"
    return 0
}

# side_start DIR LOG PORT NAME [PORTFILE]: start the cluster in DIR and print its URL;
# [PORTFILE]: rewritten with the port in use. Another run of this script on the same machine may
# take the port between pick_port and the start (two test runs side by side): then the cluster
# is started on another free port (appended to DIR/postgresql.conf, which overrides), at most 5
# times, like the private cluster's own start; so is a cluster that started without 127.0.0.1
# (its bind failed, another listen address did not). SIDE_PORT is the port in use afterwards.
SIDE_PORT=""
side_start()
{
    local dir="$1" log="$2" port="$3" name="$4" portfile="${5:-}" attempt log_size
    for ((attempt = 1; ; attempt++)); do
        log_size=0
        [[ -f "$log" ]] && log_size="$(stat -c %s "$log")"
        if as_owner "$BINDIR/pg_ctl" start -D "$dir" -l "$log" -w -t 60 >/dev/null; then
            # started, but on its other listen address alone when 127.0.0.1's bind failed
            if ((attempt >= 5)) || ! tail -c +"$((log_size + 1))" "$log" 2>/dev/null |
                grep -F 'could not bind IPv4 address "127.0.0.1"' >/dev/null; then
                break
            fi
            as_owner "$BINDIR/pg_ctl" stop -D "$dir" -m immediate -w -t 30 >/dev/null || true
        fi
        if ((attempt < 5)) && tail -c +"$((log_size + 1))" "$log" 2>/dev/null |
            grep -E 'could not (bind|create listen socket)|Address already in use' >/dev/null; then
            port="$(pick_port "" "$port")" || die "no free port for the $name"
            note "the $name's port got taken, retrying on $port"
            printf 'port = %s\n' "$port" | as_owner tee -a "$dir/postgresql.conf" >/dev/null
            continue
        fi
        die "$name start failed (log: $log)"
    done
    [[ -z "$portfile" ]] || printf '%s\n' "$port" >"$portfile"
    SIDE_PORT="$port"
    if ! wait_ready "$port"; then
        tail -n 20 "$log" >&2 || true
        die "$name not accepting connections (log: $log)"
    fi
    url_for_port "$port"
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
    side_stop "$DDATA"
    local waldir=()
    if [[ -n "${BUZZ_PG_DURABLE_WAL_PARENT:-}" ]]; then
        [[ -d "$BUZZ_PG_DURABLE_WAL_PARENT" ]] ||
            die "BUZZ_PG_DURABLE_WAL_PARENT: no directory $BUZZ_PG_DURABLE_WAL_PARENT"
        waldir=(--waldir "$BUZZ_PG_DURABLE_WAL_PARENT/buzz-durable-wal.$$")
    fi
    as_owner "$BINDIR/initdb" -D "$DDATA" --auth=trust -U postgres --encoding=UTF8 --locale=C \
        "${waldir[@]}" >"$STATE/durable-initdb.log" 2>&1 || {
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

# ---- the failover pair (a scratch primary and its asynchronous standby) ------------------------

# side_init DIR LOGNAME: initdb a scratch cluster in DIR
side_init()
{
    as_owner rm -rf "$1"
    as_owner "$BINDIR/initdb" -D "$1" --auth=trust -U postgres --encoding=UTF8 --locale=C \
        --no-sync >"$STATE/$2-initdb.log" 2>&1 || {
        cat "$STATE/$2-initdb.log" >&2
        die "initdb of the $2 cluster failed"
    }
}

failover_url()
{
    local p s
    p="$(head -n 1 "$STATE/fo-primary.port" 2>/dev/null)" || return 1
    s="$(head -n 1 "$STATE/fo-standby.port" 2>/dev/null)" || return 1
    [[ -n "$p" && -n "$s" ]] || return 1
    printf 'postgresql://postgres@127.0.0.1:%s,127.0.0.1:%s/postgres?target_session_attrs=read-write\n' \
        "$p" "$s"
}

cmd_failover_start()
{
    take_lock
    resolve_state
    is_running || die "not running (use: $0 start)"
    local pport sport PDATA="$STATE/fo-primary" SDATA="$STATE/fo-standby"
    # always a fresh pair: one left behind may be half failed over
    side_stop "$SDATA"
    side_stop "$PDATA"
    side_init "$PDATA" fo-primary
    pport="$(pick_port "" "$(current_port)")" || die "no free port for the failover primary"
    {
        printf '\n# ---- buzz-backfill failover primary (scripts/pg.sh failover-start) ----\n'
        printf "listen_addresses = '127.0.0.1'\nport = %s\nunix_socket_directories = %s\n" \
            "$pport" "$(conf_quote "$SOCK")"
        printf 'fsync = off\nfull_page_writes = off\nmax_connections = 100\n'
        printf 'wal_level = replica\nmax_wal_senders = 4\nmax_replication_slots = 4\n'
        printf 'logging_collector = off\n'
        grep -E '^dynamic_shared_memory_type = mmap' "$DATA/postgresql.conf" || true
    } | as_owner tee -a "$PDATA/postgresql.conf" >/dev/null
    printf '%s\n' "$pport" >"$STATE/fo-primary.port"
    side_start "$PDATA" "$STATE/fo-primary.log" "$pport" "failover primary" \
        "$STATE/fo-primary.port" >/dev/null
    pport="$SIDE_PORT"
    as_owner "$BINDIR/pg_basebackup" -D "$SDATA" -h 127.0.0.1 -p "$pport" -U postgres -R \
        -C -S buzz_failover -X stream -c fast -d "application_name=buzz_failover" \
        >"$STATE/fo-basebackup.log" 2>&1 || {
        cat "$STATE/fo-basebackup.log" >&2
        die "pg_basebackup of the failover standby failed"
    }
    sport="$(pick_port "" "$pport")" || die "no free port for the failover standby"
    [[ "$sport" != "$(current_port)" ]] || sport="$(pick_port "" "$sport")"
    printf 'port = %s\nhot_standby = on\n' "$sport" | as_owner tee -a "$SDATA/postgresql.conf" \
        >/dev/null
    printf '%s\n' "$sport" >"$STATE/fo-standby.port"
    side_start "$SDATA" "$STATE/fo-standby.log" "$sport" "failover standby" \
        "$STATE/fo-standby.port" >/dev/null
    local i state=""
    for ((i = 0; i < 300; i++)); do
        state="$("$BINDIR/psql" -h 127.0.0.1 -p "$pport" -U postgres -d postgres -qtAc \
            "SELECT state FROM pg_stat_replication WHERE application_name = 'buzz_failover'" \
            2>/dev/null || true)"
        if [[ "$state" == streaming ]]; then
            failover_url
            return 0
        fi
        sleep 0.1
    done
    die "the failover standby does not stream after 30 s (log: $STATE/fo-standby.log)"
}

cmd_failover_url()
{
    resolve_state
    [[ -n "$STATE" && -d "$STATE/fo-primary" ]] || die "the failover pair does not exist"
    failover_url || die "the failover pair does not exist"
}

cmd_failover_primary_stop()
{
    take_lock
    resolve_state
    { [[ -n "$STATE" ]] && side_running "$STATE/fo-primary"; } || die "the failover primary does not run"
    as_owner "$BINDIR/pg_ctl" stop -D "$STATE/fo-primary" -m immediate -w -t 30 >/dev/null ||
        die "could not stop the failover primary"
    echo "$PROG: failover primary stopped (immediate)"
}

cmd_failover_promote()
{
    take_lock
    resolve_state
    { [[ -n "$STATE" ]] && side_running "$STATE/fo-standby"; } || die "the failover standby does not run"
    as_owner "$BINDIR/pg_ctl" promote -D "$STATE/fo-standby" -w -t 60 >/dev/null ||
        die "could not promote the failover standby (log: $STATE/fo-standby.log)"
    echo "$PROG: failover standby promoted"
}

cmd_failover_old_primary_start()
{
    take_lock
    resolve_state
    local PDATA="$STATE/fo-primary" sport
    [[ -n "$STATE" && -f "$PDATA/PG_VERSION" ]] || die "the failover pair does not exist"
    side_running "$PDATA" && die "the old primary runs already"
    sport="$(head -n 1 "$STATE/fo-standby.port")"
    as_owner touch "$PDATA/standby.signal"
    printf "primary_conninfo = 'host=127.0.0.1 port=%s user=postgres application_name=buzz_old_primary'\n" \
        "$sport" | as_owner tee -a "$PDATA/postgresql.auto.conf" >/dev/null
    as_owner "$BINDIR/pg_ctl" start -D "$PDATA" -l "$STATE/fo-primary.log" -w -t 60 >/dev/null ||
        die "the old primary did not start (log: $STATE/fo-primary.log)"
    echo "$PROG: old primary started as a standby"
}

cmd_failover_stop()
{
    take_lock
    resolve_state
    [[ -n "$STATE" ]] || return 0
    side_stop "$STATE/fo-standby"
    side_stop "$STATE/fo-primary"
    rm -f "$STATE/fo-primary.port" "$STATE/fo-standby.port"
    echo "$PROG: failover pair stopped"
}

# ---- the listen cluster (also on a test's own address) -----------------------------------------

cmd_listen_start()
{
    local addr="${1:-}" cidr="${2:-}"
    [[ "$addr" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "listen-start: ADDR must be an IPv4 address"
    [[ "$cidr" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+/[0-9]+$ ]] ||
        die "listen-start: CLIENT_CIDR must be an IPv4 network, e.g. 169.254.0.0/30"
    take_lock
    resolve_state
    is_running || die "not running (use: $0 start)"
    local port LDATA="$STATE/listen"
    if side_running "$LDATA"; then
        side_url "$LDATA"
        return 0
    fi
    side_init "$LDATA" listen
    port="$(pick_port "" "$(current_port)")" || die "no free port for the listen cluster"
    {
        printf '\n# ---- buzz-backfill listen cluster (scripts/pg.sh listen-start) ----\n'
        printf "listen_addresses = '127.0.0.1, %s'\nport = %s\nunix_socket_directories = %s\n" \
            "$addr" "$port" "$(conf_quote "$SOCK")"
        printf 'fsync = off\nfull_page_writes = off\nmax_connections = 100\n'
        printf 'logging_collector = off\n'
        grep -E '^dynamic_shared_memory_type = mmap' "$DATA/postgresql.conf" || true
    } | as_owner tee -a "$LDATA/postgresql.conf" >/dev/null
    printf 'host all all %s trust\n' "$cidr" | as_owner tee -a "$LDATA/pg_hba.conf" >/dev/null
    side_start "$LDATA" "$STATE/listen.log" "$port" "listen cluster"
}

cmd_listen_stop()
{
    cmd_side_stop "listen cluster" listen
}

# ---- PgBouncer in front of the private cluster -------------------------------------------------

PGBOUNCER=""

find_pgbouncer()
{
    local b
    for b in "$(command -v pgbouncer 2>/dev/null || true)" /usr/sbin/pgbouncer; do
        if [[ -n "$b" && -x "$b" ]]; then
            PGBOUNCER="$b"
            return 0
        fi
    done
    die "pgbouncer not found (run scripts/deps.sh)"
}

# Is PID a live process (not a zombie that PID 1 did not reap)?
pid_alive()
{
    local stat
    [[ "$1" =~ ^[0-9]+$ ]] || return 1
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    stat="${stat##*) }"
    [[ "${stat%% *}" != [ZX] ]]
}

# The PID of the pooler running from DIR (fails when none runs).
pgbouncer_pid()
{
    local pid
    [[ -f "$1/pgbouncer.pid" ]] || return 1
    pid="$(head -n 1 "$1/pgbouncer.pid" 2>/dev/null || true)"
    pid_alive "$pid" || return 1
    printf '%s\n' "$pid"
}

# Whether the pooler of DIR is what listens on PORT: pg_isready is answered by any server on
# the port, and with two test runs side by side another run's cluster took a port our pooler
# then failed to bind (the suite connected to the other run's server). Without ss: assumed.
pgbouncer_listens()
{
    local pid listeners
    pid="$(pgbouncer_pid "$1")" || return 1
    command -v ss >/dev/null 2>&1 || return 0
    listeners="$(ss -Hltnp "sport = :$2" 2>/dev/null)" || return 1
    [[ "$listeners" == *"pid=$pid,"* ]]
}

# Stop the pooler of DIR (SIGTERM: immediate shutdown, every client dropped) and delete DIR.
pgbouncer_stop()
{
    local pid i
    if pid="$(pgbouncer_pid "$1")"; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do
            pid_alive "$pid" || break
            sleep 0.1
        done
        if pid_alive "$pid"; then
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    if [[ -d "$1" ]]; then
        as_owner rm -rf "$1"
    fi
    return 0
}

cmd_pgbouncer_start()
{
    local mode="${1:-}"
    [[ "$mode" == session || "$mode" == transaction ]] ||
        die "usage: $PROG pgbouncer-start session|transaction"
    find_pgbouncer
    take_lock
    resolve_state
    is_running || die "not running (use: $0 start)"
    local primary port attempt BDIR="$STATE/pgbouncer"
    primary="$(current_port)" || die "cannot determine the port"
    if pgbouncer_pid "$BDIR" >/dev/null && [[ "$(cat "$BDIR/mode" 2>/dev/null)" == "$mode" ]]; then
        url_for_port "$(cat "$BDIR/port")"
        return 0
    fi
    pgbouncer_stop "$BDIR"
    for ((attempt = 1; attempt <= 3; attempt++)); do
        as_owner mkdir -p "$BDIR"
        port="$(pick_port "" "$primary")" || die "no free port for PgBouncer"
        # trust (the cluster's own auth) still needs the user in auth_file; every database name
        # goes to the private cluster; DISCARD ALL when a session-mode client leaves
        printf '"postgres" ""\n' | as_owner tee "$BDIR/userlist.txt" >/dev/null
        as_owner tee "$BDIR/pgbouncer.ini" >/dev/null <<INI
;; buzz-backfill test pooler (scripts/pg.sh pgbouncer-start $mode)
[databases]
* = host=127.0.0.1 port=$primary

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $BDIR/userlist.txt
admin_users = postgres
pool_mode = $mode
max_client_conn = 400
default_pool_size = 60
server_reset_query = DISCARD ALL
ignore_startup_parameters = extra_float_digits
logfile = $BDIR/pgbouncer.log
pidfile = $BDIR/pgbouncer.pid
INI
        if as_owner "$PGBOUNCER" -d "$BDIR/pgbouncer.ini" >"$STATE/pgbouncer-start.log" 2>&1 &&
            wait_ready "$port"; then
            if pgbouncer_listens "$BDIR" "$port"; then
                printf '%s\n' "$mode" >"$BDIR/mode"
                printf '%s\n' "$port" >"$BDIR/port"
                url_for_port "$port"
                return 0
            fi
            note "port $port answers, but not our PgBouncer (another server took it): retrying"
            pgbouncer_stop "$BDIR"
            continue
        fi
        # lost a race for the port? then another one
        if grep -qE 'Address already in use' "$BDIR/pgbouncer.log" "$STATE/pgbouncer-start.log" \
            2>/dev/null; then
            note "port $port got taken, retrying"
            pgbouncer_stop "$BDIR"
            continue
        fi
        cat "$STATE/pgbouncer-start.log" "$BDIR/pgbouncer.log" >&2 2>/dev/null || true
        pgbouncer_stop "$BDIR"
        die "PgBouncer did not start"
    done
    die "PgBouncer did not start: no free port"
}

cmd_pgbouncer_stop()
{
    take_lock
    resolve_state
    [[ -n "$STATE" ]] || return 0
    pgbouncer_stop "$STATE/pgbouncer"
    echo "$PROG: PgBouncer stopped"
}

# ---- the TLS cluster (ssl = on, verify-full, a password) ----------------------------------------

# The TLS cluster's URL (its password in it: a throwaway one), then its CA file's path.
tls_url()
{
    local dir="$1" port
    port="$(sed -n 4p "$dir/data/postmaster.pid")"
    # hostaddr connects without a name lookup; host is the name verify-full checks
    printf 'postgresql://postgres:%s@localhost:%s/postgres?hostaddr=127.0.0.1&%s\n' \
        "$(cat "$dir/password")" "$port" "sslmode=verify-full&sslrootcert=$dir/certs/ca.crt"
    printf '%s\n' "$dir/certs/ca.crt"
}

tls_stop()
{
    [[ -n "$STATE" ]] || return 0
    side_stop "$STATE/tls/data"
    if [[ -d "$STATE/tls" ]]; then
        as_owner rm -rf "$STATE/tls"
    fi
    return 0
}

# A CA and a server certificate for "localhost" signed by it, in DIR (as the cluster's owner: the
# server's key must be its own, mode 0600).
tls_make_certs()
{
    local dir="$1" ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    command -v openssl >/dev/null 2>&1 || die "openssl not found"
    as_owner mkdir -p "$dir"
    as_owner openssl req -x509 "${ec[@]}" -days 2 -subj "/CN=buzz-backfill test CA" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -keyout "$dir/ca.key" -out "$dir/ca.crt" >/dev/null 2>&1 || die "openssl: the CA failed"
    as_owner openssl req -new "${ec[@]}" -subj "/CN=localhost" -keyout "$dir/server.key" \
        -out "$dir/server.csr" >/dev/null 2>&1 || die "openssl: the server key failed"
    printf 'subjectAltName = DNS:localhost\nextendedKeyUsage = serverAuth\n' |
        as_owner tee "$dir/server.ext" >/dev/null
    as_owner openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
        -CAcreateserial -days 2 -extfile "$dir/server.ext" -out "$dir/server.crt" >/dev/null 2>&1 ||
        die "openssl: the server certificate failed"
    as_owner chmod 600 "$dir/server.key" "$dir/ca.key"
    as_owner chmod 644 "$dir/ca.crt"
}

cmd_tls_start()
{
    take_lock
    resolve_state
    is_running || die "not running (use: $0 start)"
    local port password TDIR="$STATE/tls"
    if side_running "$TDIR/data"; then
        tls_url "$TDIR"
        return 0
    fi
    tls_stop
    as_owner mkdir -p "$TDIR"
    tls_make_certs "$TDIR/certs"
    password="$(openssl rand -hex 16)"
    printf '%s\n' "$password" | as_owner tee "$TDIR/password" >/dev/null
    as_owner chmod 600 "$TDIR/password"
    as_owner "$BINDIR/initdb" -D "$TDIR/data" --auth-local=trust --auth-host=scram-sha-256 \
        -U postgres --pwfile="$TDIR/password" --encoding=UTF8 --locale=C --no-sync \
        >"$STATE/tls-initdb.log" 2>&1 || {
        cat "$STATE/tls-initdb.log" >&2
        die "initdb of the TLS cluster failed"
    }
    # over TCP only TLS and the password; the unix socket trusts (as the other clusters)
    printf 'local all all trust\nhostssl all all 127.0.0.1/32 scram-sha-256\nhost all all all reject\n' |
        as_owner tee "$TDIR/data/pg_hba.conf" >/dev/null
    port="$(pick_port "" "$(current_port)")" || die "no free port for the TLS cluster"
    {
        printf '\n# ---- buzz-backfill TLS side cluster (scripts/pg.sh tls-start) ----\n'
        printf "listen_addresses = '127.0.0.1'\nport = %s\nunix_socket_directories = %s\n" \
            "$port" "$(conf_quote "$SOCK")"
        printf 'fsync = off\nssl = on\nssl_cert_file = %s\nssl_key_file = %s\n' \
            "$(conf_quote "$TDIR/certs/server.crt")" "$(conf_quote "$TDIR/certs/server.key")"
        printf 'max_connections = 100\nlogging_collector = off\n'
        grep -E '^dynamic_shared_memory_type = mmap' "$DATA/postgresql.conf" || true
    } | as_owner tee -a "$TDIR/data/postgresql.conf" >/dev/null
    side_start "$TDIR/data" "$STATE/tls.log" "$port" "TLS cluster" >/dev/null
    tls_url "$TDIR"
}

cmd_tls_stop()
{
    take_lock
    resolve_state
    tls_stop
    echo "$PROG: TLS cluster stopped"
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
        durable-url | failover-start | failover-url | failover-primary-stop | failover-promote | \
        failover-old-primary-start | failover-stop | listen-start | listen-stop)
        cmd="${cmd//-/_}"
        ;;
    pgbouncer-start | pgbouncer-stop | tls-start | tls-stop)
        cmd="${cmd//-/_}"
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
