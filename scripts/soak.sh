#!/usr/bin/env bash
# Soak: the robustness suite's faults at random against real daemons for as long as asked, then
# trials, faults, rows at counters 0/1/2+ and takeover time percentiles.
set -euo pipefail

PROG="${0##*/}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PG="$ROOT/scripts/pg.sh"

usage()
{
    cat <<USAGE
Usage: $PROG --minutes N [--seed S] [--no-build] [--help]

Builds (build/, RelWithDebInfo) unless --no-build, starts the private PostgreSQL cluster
(scripts/pg.sh) unless it runs already, and runs tests/robustness in soak mode: rounds of a
fresh database, two daemons and two non-idempotent backfills, each round a random series of
faults (SIGKILL or SIGSTOP of the claim owner in a batch, before or during a fence, in
validation; immediate PostgreSQL restarts; slow readers and a connection flood against a
daemon). After every round it prints the running totals:

  robustness: R rounds, T trials
  faults: kill-batch=... stop-batch=... ...
  rows at counter 0: 0, 1: N, 2+: 0
  takeover ms (n): p50 ..., p90 ..., p99 ..., max ... (bound ...)

It fails (exit 1) at the first violated invariant: a row applied twice, a takeover past its
bound, a backfill that does not complete. The daemons' logs of a failed run are kept (the
path is printed).

  --minutes N   how long to run (whole minutes, at least 1)
  --seed S      replay the random choices of an earlier run (its seed is printed)
  --no-build    use the existing build/
USAGE
}

minutes=""
seed=""
build=1
while (($#)); do
    case "$1" in
    --minutes)
        minutes="${2:-}"
        shift
        ;;
    --minutes=*) minutes="${1#*=}" ;;
    --seed)
        seed="${2:-}"
        shift
        ;;
    --seed=*) seed="${1#*=}" ;;
    --no-build) build=0 ;;
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
if ! [[ "$minutes" =~ ^[1-9][0-9]*$ ]]; then
    echo "$PROG: --minutes needs a whole number of minutes, at least 1 (see --help)" >&2
    exit 2
fi
if [[ -n "$seed" && ! "$seed" =~ ^[0-9]+$ ]]; then
    echo "$PROG: --seed needs a non-negative integer" >&2
    exit 2
fi

cd "$ROOT"
if ((build)); then
    cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build build -j"$(nproc 2>/dev/null || echo 2)" --target test_robustness >/dev/null
fi
[[ -x build/tests/test_robustness ]] || {
    echo "$PROG: build/tests/test_robustness is missing (run without --no-build)" >&2
    exit 1
}

started=0
if ! "$PG" status >/dev/null 2>&1; then
    "$PG" start >/dev/null
    started=1
fi
cleanup()
{
    if ((started)); then
        "$PG" stop >/dev/null || true
    fi
}
trap cleanup EXIT

BUZZ_TEST_PG_URL="$("$PG" url)"
export BUZZ_TEST_PG_URL
export BUZZ_SOAK_SECONDS=$((minutes * 60))
[[ -n "$seed" ]] && export BUZZ_SOAK_SEED="$seed"
echo "$PROG: ${minutes} min of faults against $BUZZ_TEST_PG_URL"
# cmocka's own lines and the suite's summary; the engine's per-step chatter stays out
set +e
BT_QUIET=1 build/tests/test_robustness 2>&1 |
    grep --line-buffered -E '^(soak|robustness|faults|rows at|takeover|progress|ERROR|daemon logs)|\[  (FAILED|PASSED)|error:'
rc=${PIPESTATUS[0]}
set -e
exit "$rc"
