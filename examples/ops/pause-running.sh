#!/usr/bin/env bash
# examples/ops/pause-running.sh - pause every running backfill (say, before a maintenance
# window), from `buzzctl --json list` and `buzzctl --json pause`.
#
#   pause-running.sh [BUZZCTL_OPTION...]     e.g. pause-running.sh --token-file operator.token
#
# Lists the running backfills (every page), pauses each with its own request, and prints one
# line per backfill: "paused ID (generation N)", "ID: no longer running (STATE)" when it left
# running meanwhile (a conflict, not a failure), or "ID: FAILED: message". Resume them one by one
# with `buzzctl resume ID` afterwards.
# Exit status: 0 when none is left running by this script, 1 when a pause failed, else
# buzzctl's code for the list (6 unreachable, 4 refused ...). Needs buzzctl (or $BUZZCTL), jq.
set -uo pipefail
BUZZCTL="${BUZZCTL:-buzzctl}"
case "${1:-}" in
-h | --help)
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
esac
command -v jq >/dev/null || {
    echo "pause-running.sh: jq is not installed" >&2
    exit 2
}

list="$("$BUZZCTL" "$@" --json list --state running --sample-ms 0)"
rc=$?
if ((rc != 0)); then
    echo "pause-running.sh: list: $(jq -r '.error.message // "failed"' <<<"$list" 2>/dev/null)" >&2
    exit "$rc"
fi
mapfile -t ids < <(jq -r '.backfills[]?.id' <<<"$list")
if ((${#ids[@]} == 0)); then
    echo "no running backfill"
    exit 0
fi
failed=0
for id in "${ids[@]}"; do
    out="$("$BUZZCTL" "$@" --json pause "$id")"
    rc=$?
    if ((rc == 0)); then
        echo "paused $id (generation $(jq -r '.backfill.generation // "unknown"' <<<"$out"))"
    elif ((rc == 3)); then
        # a conflict carries the current state: it is not running any more
        echo "$id: no longer running ($(jq -r '.backfill.state // .error.message // "unknown"' \
            <<<"$out" | tr '[:upper:]' '[:lower:]'))"
    else
        echo "$id: FAILED: $(jq -r '.error.message // "no answer"' <<<"$out" 2>/dev/null)"
        failed=1
    fi
done
exit "$failed"
