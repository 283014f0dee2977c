#!/usr/bin/env bash
# examples/ops/gating.sh - what keeps the relay from serving, from `buzzctl --json ready`.
#
#   gating.sh [BUZZCTL_OPTION...]        e.g. gating.sh --url ipc:///run/buzz-backfill/admin.sock
#
# Prints "ready", or "not ready" followed by each component that is not ready (with its reason)
# and each backfill that gates readiness (with its state; "unregistered" when no process has
# registered it yet), or "unknown" when the service cannot be asked or cannot decide.
# Exit status: 0 ready, 8 not ready, 6 unknown (as buzzctl), 2 a usage error.
# Needs buzzctl (or $BUZZCTL) and jq.
set -uo pipefail
BUZZCTL="${BUZZCTL:-buzzctl}"
case "${1:-}" in
-h | --help)
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
esac
command -v jq >/dev/null || {
    echo "gating.sh: jq is not installed" >&2
    exit 2
}

out="$("$BUZZCTL" "$@" --json ready)"
rc=$?
if jq -e '.error' >/dev/null 2>&1 <<<"$out"; then
    echo "unknown: $(jq -r '.error.message' <<<"$out")"
    code="$(jq -r '.error.exitCode' <<<"$out")"
    ((code == 2)) && exit 2
    exit 6
fi
# a component whose status is UNKNOWN_STATUS means the service could not decide: never ready
if jq -e '[.components[]? | select(.status == "UNKNOWN_STATUS")] | length > 0' \
    >/dev/null <<<"$out"; then
    echo "unknown"
    jq -r '.components[]? | select(.status == "UNKNOWN_STATUS")
        | "  \(.name): \(.reason // "no reason given")"' <<<"$out"
    exit 6
fi
if [[ "$(jq -r '.ready // false' <<<"$out")" == true ]]; then
    echo "ready"
    exit 0
fi
echo "not ready"
jq -r '.components[]? | select(.status != "READY")
    | "  component \(.name): \(.status | ascii_downcase) (\(.reason // "no reason given"))"' \
    <<<"$out"
jq -r '.gating[]? | "  backfill \(.id): \(.state // "unregistered" | ascii_downcase)"' <<<"$out"
((rc == 8 || rc == 0)) || exit "$rc"
exit 8
