#!/usr/bin/env bash
# The operator scripts of examples/ops/ against a real buzz-backfilld: the demo definitions in
# automatic mode with no workers (workers = 0: the two required backfills are started and stay
# running, so readiness is gated by them; the optional one stays pending and gates nothing), on
# a fresh database of $BUZZ_TEST_PG_URL.
#   gating.sh        not ready, exit 8, names the two gating backfills as running
#   wait-ready.sh    --timeout 1: prints what it waits for, exit 8; a bad --timeout: exit 2
#   pause-running.sh pauses both (exit 0, PostgreSQL agrees), then finds none running;
#                    gating.sh then shows them paused
#   all three        unknown (exit 6) once the daemon is stopped: never "ready"
# Usage: check_ops_scripts.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$1"
src="$2"
ops="$src/examples/ops"
export BUZZCTL="$build/client/buzzctl"
# shellcheck source=tests/docs/daemon_db.sh
. "$src/tests/docs/daemon_db.sh"
daemon_db_begin ops
# run NAME EXPECTED_EXIT SCRIPT ARGS...: output in $out
run()
{
    local want="$1" rc=0
    shift
    out="$("$@" 2>&1)" || rc=$?
    printf '$ %s %s\n%s\n' "${1##*/}" "${*:2}" "$out"
    ((rc == want)) || fail "${1##*/}: exit $rc, want $want"
}
has()
{
    grep -qF -- "$1" <<<"$out" || fail "no '$1' in the output above"
}

psql "$db_url" -q -v ON_ERROR_STOP=1 -v rows=500 -f "$src/examples/demo/schema.sql" \
    -f "$src/examples/demo/seed.sql" >/dev/null
sock="$work/admin.sock"
url="ipc://$sock"
env BUZZ_BACKFILL_DATABASE_URL="$db_url" BUZZ_BACKFILL_LISTEN="$url" BUZZ_BACKFILL_IPC_BOUNDARY=on \
    BUZZ_BACKFILL_AUTO_MIGRATE=on BUZZ_BACKFILL_AUTO_BACKFILL=on BUZZ_BACKFILL_WORKERS=0 \
    BUZZ_BACKFILL_MODULES="$build/examples/buzz-demo-definitions.so" \
    "$build/server/buzz-backfilld" run 2>"$work/daemon.log" &
daemon=$!
"$BUZZCTL" --url "$url" ready --wait-ready --timeout 20s >/dev/null 2>&1 || true
started=0
for _ in $(seq 1 200); do
    started="$(psql "$db_url" -qtAc "SELECT count(*) FROM buzz_backfill.backfill
                                     WHERE state = 'running'" 2>/dev/null || echo 0)"
    ((started == 2)) && break
    kill -0 "$daemon" 2>/dev/null || fail "the daemon exited"
    sleep 0.1
done
((started == 2)) || fail "the daemon did not start the two required demo backfills ($started running)"

run 8 "$ops/gating.sh" --url "$url"
has "not ready"
has "backfill demo.events.content_len_v1: running"
grep -q pubkey_hex <<<"$out" && fail "the optional backfill gates readiness"
has "backfill demo.events.tag_count_v1: running"

run 8 "$ops/wait-ready.sh" --timeout 1 --url "$url"
has "waiting for: demo.events.content_len_v1 (running)"
run 2 "$ops/wait-ready.sh" --timeout soon --url "$url"

run 0 "$ops/pause-running.sh" --url "$url"
has "paused demo.events.content_len_v1 (generation"
has "paused demo.events.tag_count_v1 (generation"
paused="$(psql "$db_url" -qtAc "SELECT count(*) FROM buzz_backfill.backfill WHERE state = 'paused'")"
((paused == 2)) || fail "PostgreSQL shows $paused paused backfills, want 2"
run 0 "$ops/pause-running.sh" --url "$url"
has "no running backfill"
run 8 "$ops/gating.sh" --url "$url"
has "backfill demo.events.tag_count_v1: paused"

daemon_stop "the daemon did not exit cleanly"
run 6 "$ops/gating.sh" --url "$url" --timeout 500
has "unknown"
run 6 "$ops/wait-ready.sh" --timeout 1 --url "$url" --timeout 500
has "unknown"
run 6 "$ops/pause-running.sh" --url "$url" --timeout 500
echo "check_ops_scripts: all passed"
