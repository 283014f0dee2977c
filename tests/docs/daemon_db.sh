# Sourced by the docs suites that run a buzz-backfilld against a database of their own
# (check_install.sh, check_ops_scripts.sh); not run on its own. Expects $src (the source tree)
# and BUZZ_TEST_PG_URL. daemon_db_begin NAME makes $work (a temporary directory) and $db, a
# fresh database on the same server ($db_url its libpq URL); everything, and a daemon whose
# pid is in $daemon, is removed on exit. fail MSG prints the suite's name, MSG and the tail of
# $work/daemon.log, and exits 1; daemon_stop MSG stops $daemon with SIGTERM and fails with MSG
# unless it exits 0.
: "${BUZZ_TEST_PG_URL:?BUZZ_TEST_PG_URL is not set}"
# shellcheck source=scripts/db-url.sh
. "$src/scripts/db-url.sh"

daemon_db_cleanup()
{
    if [[ -n "$daemon" ]]; then
        kill -TERM "$daemon" 2>/dev/null || true
        wait "$daemon" 2>/dev/null || true
    fi
    psql "$BUZZ_TEST_PG_URL" -qtAc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
    rm -rf "$work"
}

daemon_db_begin()
{
    DAEMON_DB_SUITE="$1"
    work="$(mktemp -d "${TMPDIR:-/tmp}/buzz-$1.XXXXXX")"
    db="buzz_${1}_$$"
    db_url="$(buzz_db_url "$BUZZ_TEST_PG_URL" "$db")"
    daemon=""
    trap daemon_db_cleanup EXIT
    psql "$BUZZ_TEST_PG_URL" -qtAc "CREATE DATABASE $db" >/dev/null
}

fail()
{
    echo "$DAEMON_DB_SUITE: $*" >&2
    [[ -f "$work/daemon.log" ]] && tail -n 20 "$work/daemon.log" >&2
    exit 1
}

daemon_stop()
{
    kill -TERM "$daemon"
    wait "$daemon" || fail "$1"
    daemon=""
}
