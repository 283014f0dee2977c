#!/usr/bin/env bash
# The single test command CI runs: install deps, build and run ctest (release, then
# ASan/UBSan), then a short libFuzzer smoke run, against a private PostgreSQL cluster.
set -euo pipefail

PROG="${0##*/}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PG="$ROOT/scripts/pg.sh"
FUZZ_SECONDS=20
# The daemon suites run under memcheck: the HTTP endpoints (/readyz in every mode, /metrics)
# and the SIGHUP reloads; chosen to stay within a few minutes (memcheck is ~20x slower).
VALGRIND_SUITES="test_metrics|test_daemon_files"
# The ASan stage runs every suite but the conformance suites' _files variants: they run the same
# engine paths as their C twins (the file parser itself is under ASan in test_deffile and
# test_definition_files) and would add about a minute and a half. docs/testing.md says so.
ASAN_SKIP="_files\$"

usage()
{
    cat <<USAGE
Usage: $PROG [--quick] [--no-deps] [--help]

Runs, stopping at the first failing stage:
  deps        scripts/deps.sh (installs missing Debian packages)
  build       cmake build/ (RelWithDebInfo, BUZZ_WERROR=ON)
  postgres    scripts/pg.sh start; exports BUZZ_TEST_PG_URL
  test        ctest in build/
  valgrind    the daemon suites in VALGRIND_SUITES again with every daemon under
              valgrind's memcheck (BUZZ_TEST_VALGRIND=1, tests/support/daemon.c):
              a read of uninitialized memory fails them (about 2 minutes)
  package     scripts/package.sh: the Debian packages in build-pkg/, lintian
  pkg install scripts/package-test.sh: install them, check-config, run the
              installed daemon and buzzctl against the cluster, purge, check
              nothing is left (root only; skipped otherwise)
  asan build  cmake build-asan/ (Debug, BUZZ_SANITIZE=ON, BUZZ_WERROR=ON)
  asan test   ctest in build-asan/ with ASan/UBSan aborting on errors
  fuzz build  clang build-fuzz/ with BUZZ_FUZZ=ON (skipped without clang,
              without a fuzz/ directory, or if CMake has no BUZZ_FUZZ option)
  fuzz run    each build-fuzz/fuzz/fuzz_* for ${FUZZ_SECONDS}s on fuzz/corpus/<name>/

  --quick     skip the ASan and fuzz stages
  --no-deps   skip scripts/deps.sh
  --help      show this help

A summary is always printed; the exit status is non-zero if a stage failed.
The PostgreSQL cluster is stopped on exit unless it was already running.
USAGE
}

quick=0
deps=1
while (($#)); do
    case "$1" in
    --quick) quick=1 ;;
    --no-deps) deps=0 ;;
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

cd "$ROOT"
JOBS="$(nproc 2>/dev/null || echo 2)"

STAGES=(deps build postgres test valgrind package "pkg install" "asan build" "asan test" "fuzz build" "fuzz run")
declare -A RESULT=() DURATION=()
T_START=$SECONDS
FAILED_STAGE=""
PG_STARTED=0
STAGE_PID=""
STAGE_NAME=""
STAGE_T0=0
SKIP_NOTE="$(mktemp "${TMPDIR:-/tmp}/buzz-test-skip.XXXXXX")"

fmt_time()
{
    local s="$1"
    if ((s >= 60)); then
        printf '%dm%02ds' $((s / 60)) $((s % 60))
    else
        printf '%ds' "$s"
    fi
}

banner()
{
    printf '\n===== %s =====\n' "$*"
}

print_summary()
{
    local rc="$1" name result
    printf '\n================ buzz-backfill test summary ================\n'
    for name in "${STAGES[@]}"; do
        result="${RESULT[$name]:-not run}"
        if [[ -n "${DURATION[$name]:-}" ]]; then
            printf '  %-12s %-40s %8s\n' "$name" "$result" "$(fmt_time "${DURATION[$name]}")"
        else
            printf '  %-12s %s\n' "$name" "$result"
        fi
    done
    printf '  %-12s %-40s %8s\n' "total" "" "$(fmt_time $((SECONDS - T_START)))"
    if ((rc == 0)); then
        echo "RESULT: PASSED"
    elif [[ -n "$FAILED_STAGE" ]]; then
        echo "RESULT: FAILED (stage: $FAILED_STAGE)"
    else
        echo "RESULT: FAILED (exit status $rc)"
    fi
}

on_exit()
{
    local rc=$?
    set +e
    if ((PG_STARTED)); then
        banner "stopping postgres"
        "$PG" stop || echo "$PROG: warning: scripts/pg.sh stop failed" >&2
    fi
    print_summary "$rc"
    rm -f "$SKIP_NOTE"
    exit "$rc"
}

# On INT/TERM kill the running stage (its own process group) right away.
on_signal()
{
    local rc="$1"
    trap - INT TERM
    if [[ -n "$STAGE_PID" ]]; then
        kill -TERM -- "-$STAGE_PID" 2>/dev/null || true
        wait "$STAGE_PID" 2>/dev/null || true
        RESULT[$STAGE_NAME]="INTERRUPTED"
        DURATION[$STAGE_NAME]=$((SECONDS - STAGE_T0))
        FAILED_STAGE="$STAGE_NAME"
    fi
    exit "$rc"
}
trap on_exit EXIT
trap 'on_signal 130' INT
trap 'on_signal 143' TERM

# run_stage NAME FUNCTION: run FUNCTION in a subshell with errexit active.
# Exit status 77 means "skipped" (the function calls skip_because first).
run_stage()
{
    local name="$1" t0=$SECONDS rc
    shift
    banner "$name"
    : >"$SKIP_NOTE"
    STAGE_NAME="$name"
    STAGE_T0=$t0
    # Job control gives the stage its own process group (so a signal handler can
    # kill the whole stage), and waiting in the background keeps traps responsive.
    set +e -m
    (
        set -e
        "$@"
    ) &
    STAGE_PID=$!
    set +m
    wait "$STAGE_PID"
    rc=$?
    STAGE_PID=""
    set -e
    DURATION[$name]=$((SECONDS - t0))
    case "$rc" in
    0) RESULT[$name]="passed" ;;
    77) RESULT[$name]="skipped ($(head -n 1 "$SKIP_NOTE"))" ;;
    *)
        RESULT[$name]="FAILED (exit $rc)"
        FAILED_STAGE="$name"
        exit "$rc"
        ;;
    esac
}

# Inside a stage: say why it is skipped, then "return 77".
skip_because()
{
    echo "skipped: $*"
    printf '%s\n' "$*" >"$SKIP_NOTE"
}

skip_stage()
{
    local name="$1" why="$2"
    RESULT[$name]="skipped ($why)"
    banner "$name"
    echo "skipped: $why"
}

stage_deps()
{
    "$ROOT/scripts/deps.sh"
}

stage_build()
{
    cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUZZ_WERROR=ON
    cmake --build build -j"$JOBS"
}

stage_postgres()
{
    "$PG" start
    "$PG" url >/dev/null
}

# run_ctest DIR CTEST_ARGS...: ctest with the daemon logs of the suites kept in a directory
# of this run: a failure message says "see <log>", and on a CI machine that log is gone with
# the machine, so the tail of each log of a failed suite is printed after ctest's own output.
run_ctest()
{
    local dir out rc
    dir=$(mktemp -d /tmp/buzz-ctest.XXXXXX)
    out="$dir/ctest.out"
    # --output-log, not a pipe into tee: ctest's output to a pipe is block-buffered, and a
    # run cut short would lose what it had printed
    set +e
    BUZZ_TEST_TMP="$dir" BUZZ_KEEP_LOGS=1 ctest --test-dir "$1" --output-on-failure -j2 \
        --output-log "$out" "${@:2}"
    rc=$?
    set -e
    if ((rc != 0)); then
        show_kept_logs "$out" || echo "(could not show the kept logs)"
    fi
    rm -rf "$dir"
    return "$rc"
}

# The last lines of each daemon log a failed suite kept ("daemon logs kept in DIR").
show_kept_logs()
{
    local kept log
    # no match is no error: a suite without a daemon (the docs checks) keeps no logs
    { grep -o 'daemon logs kept in [^ ]*' "$1" || true; } | awk '{print $5}' | sort -u |
        while read -r kept; do
            for log in "$kept"/*.log; do
                [[ -f "$log" ]] || continue
                echo "===== last 60 lines of $log ====="
                tail -n 60 "$log" | cut -c1-400
            done
        done
}

stage_test()
{
    run_ctest build --timeout 600
}

stage_valgrind()
{
    if ! command -v valgrind >/dev/null 2>&1; then
        skip_because "valgrind not installed"
        return 77
    fi
    BUZZ_TEST_VALGRIND=1 run_ctest build --timeout 300 -R "^(${VALGRIND_SUITES})\$"
}

stage_package()
{
    "$ROOT/scripts/package.sh"
}

stage_pkg_install()
{
    if ((EUID != 0)); then
        skip_because "not root (apt-get install of the packages)"
        return 77
    fi
    "$ROOT/scripts/package-test.sh"
}

stage_asan_build()
{
    cmake -S . -B build-asan -DBUZZ_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug -DBUZZ_WERROR=ON
    cmake --build build-asan -j"$JOBS"
}

stage_asan_test()
{
    run_ctest build-asan --timeout 600 -E "$ASAN_SKIP"
}

stage_fuzz_build()
{
    local cache=build-fuzz/CMakeCache.txt
    # CC only matters for a fresh cache; drop one made with another compiler.
    if [[ -f "$cache" ]] && ! grep -q '^CMAKE_C_COMPILER:[A-Z]*=.*clang' "$cache"; then
        echo "build-fuzz/ was configured with another compiler; reconfiguring"
        rm -rf "$cache" build-fuzz/CMakeFiles
    fi
    CC=clang cmake -S . -B build-fuzz -DBUZZ_FUZZ=ON
    # An option()/cache BOOL named BUZZ_FUZZ means the project supports it; an
    # unused -D leaves only an UNINITIALIZED entry.
    if ! grep -q '^BUZZ_FUZZ:BOOL=' "$cache"; then
        skip_because "CMake has no BUZZ_FUZZ option"
        return 77
    fi
    cmake --build build-fuzz -j"$JOBS"
}

stage_fuzz_run()
{
    local exe name short corpus work logdir=build-fuzz/fuzz-logs
    local artifacts=build-fuzz/fuzz-artifacts failed=() ran=0
    mkdir -p "$logdir" "$artifacts"
    for exe in build-fuzz/fuzz/fuzz_*; do
        [[ -f "$exe" && -x "$exe" ]] || continue
        name="${exe##*/}"
        short="${name#fuzz_}"
        corpus="fuzz/corpus/$short"
        # New inputs go to a scratch dir so the checked-in corpus stays untouched.
        work="build-fuzz/fuzz-work/$short"
        rm -rf "$work"
        mkdir -p "$work"
        local args=(-max_total_time="$FUZZ_SECONDS" -timeout=10 -print_final_stats=1
            -artifact_prefix="$artifacts/$name-" "$work")
        if [[ -d "$corpus" ]]; then
            args+=("$corpus")
        else
            echo "note: no $corpus/, fuzzing $name without a seed corpus"
        fi
        echo "--- $name ${args[*]}"
        ran=$((ran + 1))
        if "$exe" "${args[@]}" >"$logdir/$name.log" 2>&1; then
            grep -E '^(Done|stat::number_of_executed_units)' "$logdir/$name.log" || true
            echo "$name: ok"
        else
            tail -n 60 "$logdir/$name.log"
            echo "$name: FAILED (log: $logdir/$name.log, artifacts: $artifacts/)"
            failed+=("$name")
        fi
    done
    if ((ran == 0)); then
        echo "no executables match build-fuzz/fuzz/fuzz_*"
        return 1
    fi
    if ((${#failed[@]})); then
        echo "failing fuzzers: ${failed[*]}"
        return 1
    fi
}

if ((deps)); then
    run_stage deps stage_deps
else
    skip_stage deps "--no-deps"
fi

run_stage build stage_build

if ! "$PG" status >/dev/null 2>&1; then
    PG_STARTED=1
fi
run_stage postgres stage_postgres
BUZZ_TEST_PG_URL="$("$PG" url)"
export BUZZ_TEST_PG_URL
echo "BUZZ_TEST_PG_URL=$BUZZ_TEST_PG_URL"

run_stage test stage_test
run_stage valgrind stage_valgrind
run_stage package stage_package
run_stage "pkg install" stage_pkg_install

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
# nng's own leak of a listener its defect wedged (tests/support/lsan.supp says which and why)
export LSAN_OPTIONS="suppressions=$ROOT/tests/support/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

if ((quick)); then
    skip_stage "asan build" "--quick"
    skip_stage "asan test" "--quick"
else
    run_stage "asan build" stage_asan_build
    run_stage "asan test" stage_asan_test
fi

if ((quick)); then
    skip_stage "fuzz build" "--quick"
    skip_stage "fuzz run" "--quick"
elif [[ ! -d fuzz ]]; then
    skip_stage "fuzz build" "no fuzz/ directory yet"
    skip_stage "fuzz run" "no fuzz/ directory yet"
elif ! command -v clang >/dev/null 2>&1; then
    skip_stage "fuzz build" "clang not installed"
    skip_stage "fuzz run" "clang not installed"
else
    run_stage "fuzz build" stage_fuzz_build
    if [[ "${RESULT["fuzz build"]}" == passed ]]; then
        run_stage "fuzz run" stage_fuzz_run
    else
        skip_stage "fuzz run" "no fuzz build"
    fi
fi
