#!/usr/bin/env bash
# cmake --install into a private prefix, then what a relay does with the installed client: a
# program (examples/relay_readiness.c) built with pkg-config libbuzz-backfill-client asks the
# installed buzz-backfilld, running against a fresh database of $BUZZ_TEST_PG_URL, whether it may
# serve: "ready" (exit 0). With the daemon stopped the answer is unknown (exit 2), never ready.
# The installed client library links neither libpq nor the engine.
# Usage: check_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$1"
src="$2"
# shellcheck source=tests/docs/daemon_db.sh
. "$src/tests/docs/daemon_db.sh"
daemon_db_begin install

prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log" || fail "cmake --install failed"
pc="$(find "$prefix" -name libbuzz-backfill-client.pc | head -n 1)"
[[ -n "$pc" ]] || fail "no libbuzz-backfill-client.pc installed"
lib="$(find "$prefix" -name 'libbuzz-backfill-client.so.1' | head -n 1)"
[[ -n "$lib" ]] || fail "no libbuzz-backfill-client.so.1 installed"
if ldd "$lib" | grep -E 'libpq|libbuzz-backfill\.so'; then
    fail "the installed client library links libpq or the engine"
fi
# a sanitizer build (scripts/test.sh's asan stage) installs instrumented libraries: build the
# program the same way, or the sanitizer runtime refuses to start
sanitize=()
# (grep reads all of ldd's output: with -q it could exit first, and pipefail would then take
# ldd's SIGPIPE for "no sanitizer")
if ldd "$lib" | grep libasan >/dev/null; then
    sanitize=(-fsanitize=address,undefined)
fi
export PKG_CONFIG_PATH="${pc%/*}"
flags="$(pkg-config --define-variable=prefix="$prefix" --cflags --libs libbuzz-backfill-client)"
# shellcheck disable=SC2086
cc -std=c11 -Wall -Wextra -Werror "${sanitize[@]}" -o "$work/relay_readiness" "$src/examples/relay_readiness.c" \
    $flags || fail "examples/relay_readiness.c does not build against the installed client"
export LD_LIBRARY_PATH="${lib%/*}"

sock="$work/admin.sock"
env BUZZ_BACKFILL_DATABASE_URL="$db_url" BUZZ_BACKFILL_LISTEN="ipc://$sock" \
    BUZZ_BACKFILL_IPC_BOUNDARY=on BUZZ_BACKFILL_AUTO_MIGRATE=on BUZZ_BACKFILL_WORKERS=0 \
    "$prefix/sbin/buzz-backfilld" run 2>"$work/daemon.log" &
daemon=$!
answer=""
for _ in $(seq 1 200); do
    rc=0
    answer="$("$work/relay_readiness" "ipc://$sock" 2>&1)" || rc=$?
    ((rc == 0)) && break
    kill -0 "$daemon" 2>/dev/null || fail "the installed daemon exited"
    sleep 0.1
done
[[ "$answer" == ready ]] || fail "readiness through the installed client: '$answer' (exit $rc)"
echo "installed client: $answer"
daemon_stop "the installed daemon did not exit cleanly on SIGTERM"
rc=0
"$work/relay_readiness" "ipc://$sock" >/dev/null 2>&1 || rc=$?
((rc == 2)) || fail "without a daemon the answer must be unknown (exit 2), got exit $rc"
echo "installed client without a daemon: unknown (exit 2)"
