# Sourced by the bench/*.sh scripts (not run on its own). Expects ROOT (the repository) and
# BUILD (the Release build tree) to be set.

# bench_build NAME TARGET...: build the targets in a Release tree; on failure print the build
# log and exit.
bench_build()
{
    local name="$1" log
    shift
    echo "$name: building (Release) in $BUILD" >&2
    log="$(mktemp)"
    if ! { cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBUZZ_TESTS=OFF &&
        cmake --build "$BUILD" --target "$@" -j "$(nproc 2>/dev/null || echo 2)"; } >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        echo "$name: build failed" >&2
        exit 1
    fi
    rm -f "$log"
}

# bench_pg_start: unless BUZZ_BENCH_PG_URL names a server, start scripts/pg.sh's cluster when it
# is not running (BENCH_PG_STARTED=1 then) and export its URL as BUZZ_BENCH_PG_URL.
BENCH_PG_STARTED=0
bench_pg_start()
{
    if [[ -z "${BUZZ_BENCH_PG_URL:-}" ]]; then
        if ! "$ROOT/scripts/pg.sh" status >/dev/null 2>&1; then
            "$ROOT/scripts/pg.sh" start >&2
            BENCH_PG_STARTED=1
        fi
        BUZZ_BENCH_PG_URL="$("$ROOT/scripts/pg.sh" url)"
    fi
    export BUZZ_BENCH_PG_URL
}

# bench_pg_stop: stop the cluster if bench_pg_start started it.
bench_pg_stop()
{
    if ((BENCH_PG_STARTED)); then
        "$ROOT/scripts/pg.sh" stop >&2 || true
    fi
}
