#!/usr/bin/env bash
# examples/ops/wait-ready.sh - wait until the relay may serve, showing what still gates it each
# time that changes, from `buzzctl --json ready --wait` (a long poll that returns early when
# something changes).
#
#   wait-ready.sh [--timeout SECONDS] [BUZZCTL_OPTION...]
#
# Prints a line whenever the set of gating backfills or their states change ("waiting for: ID
# (state), ..."), then "ready". --timeout defaults to 300 seconds.
# Exit status: 0 ready, 8 still not ready at the timeout, 6 the service could not be asked at
# the timeout (unknown, never taken as ready), 4 the credential was refused (waiting cannot
# help), 2 a usage error. Needs buzzctl (or $BUZZCTL) and jq.
set -uo pipefail
BUZZCTL="${BUZZCTL:-buzzctl}"
timeout=300
case "${1:-}" in
-h | --help)
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
--timeout)
    timeout="${2:-}"
    [[ "$timeout" =~ ^[0-9]+$ ]] || {
        echo "wait-ready.sh: --timeout: '$timeout' is not a whole number of seconds" >&2
        exit 2
    }
    shift 2
    ;;
esac
command -v jq >/dev/null || {
    echo "wait-ready.sh: jq is not installed" >&2
    exit 2
}

deadline=$((SECONDS + timeout))
last=""
code=6
while :; do
    left=$((deadline - SECONDS))
    wait_s=$((left < 10 ? left : 10))
    ((wait_s < 0)) && wait_s=0
    out="$("$BUZZCTL" "$@" --json ready --wait "$wait_s")"
    rc=$?
    if jq -e '.error' >/dev/null 2>&1 <<<"$out"; then
        code="$(jq -r '.error.exitCode' <<<"$out")"
        case "$code" in
        2 | 4)
            echo "wait-ready.sh: $(jq -r '.error.message' <<<"$out")" >&2
            exit "$code"
            ;;
        esac
        now="unknown: $(jq -r '.error.message' <<<"$out")"
        code=6
    elif [[ "$(jq -r '.ready // false' <<<"$out")" == true ]]; then
        echo "ready"
        exit 0
    else
        now="waiting for: $(jq -r '[.gating[]? | "\(.id) (\(.state // "unregistered"
            | ascii_downcase))"] | if length == 0 then "the service (no backfill gates it)"
            else join(", ") end' <<<"$out")"
        code=8
    fi
    [[ "$now" != "$last" ]] && echo "$now"
    last="$now"
    if ((SECONDS >= deadline)); then
        exit "$code"
    fi
    # an unreachable service answers at once: do not spin
    ((rc == 6)) && sleep 1
done
