#!/usr/bin/env bash
# buzzctl's bash completion (packaging/completion/buzzctl) completes commands, options,
# subcommands and option values. Usage: check_completion.sh SOURCE_DIR
set -euo pipefail

src="$1"
# shellcheck disable=SC1091
source /usr/share/bash-completion/bash_completion
# shellcheck disable=SC1091
source "$src/packaging/completion/buzzctl"
fail=0

# expect "LINE" WORD...: completing LINE (the cursor at its end) offers each WORD
expect()
{
    local line="$1"
    shift
    read -r -a COMP_WORDS <<<"$line"
    [[ "$line" == *" " ]] && COMP_WORDS+=("")
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    COMP_LINE="$line"
    COMP_POINT=${#line}
    COMPREPLY=()
    _buzzctl buzzctl "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]:-}" || true
    # membership in bash (completions are single words): "printf | grep -q" under pipefail
    # fails when grep has matched and left while printf still writes (SIGPIPE), as it did once
    # in CI with 'audit' in the list
    local w
    for w in "$@"; do
        if [[ " ${COMPREPLY[*]} " != *" $w "* ]]; then
            echo "completing '$line': no '$w' in: ${COMPREPLY[*]}"
            fail=1
        fi
    done
}

expect "buzzctl pa" pause
expect "buzzctl pref" preflight
expect "buzzctl preflight --j" --json
expect "buzzctl wat" watch
expect "buzzctl watch " off
expect "buzzctl " list get start pause resume retry validate audit ready token
expect "buzzctl --js" --json
expect "buzzctl token " keygen mint inspect
expect "buzzctl list --state " running paused blocked failed completed
expect "buzzctl -u ipc:///x list --st" --state
expect "buzzctl list --wa" --watch

# backfill IDs come from 'buzzctl list --ids', with the command line's connection options: a
# stand-in buzzctl records its arguments and answers as the real one does
buzzctl()
{
    printf '%s\n' "$*" >>"$calls"
    [[ " $* " == *" list --ids "* ]] && printf '%s\n' demo.events.content_len_v1 demo.items_v1
    return 0
}
calls="$(mktemp)"
trap 'rm -f "$calls"' EXIT
expect "buzzctl get " demo.events.content_len_v1 demo.items_v1
expect "buzzctl -u ipc:///run/x.sock pause demo.it" demo.items_v1
expect "buzzctl preflight demo.items_v1 demo.ev" demo.events.content_len_v1
if ! grep -qxF -- "-u ipc:///run/x.sock --timeout 2s list --ids" "$calls"; then
    echo "IDs were not asked for with the command line's --url: $(cat "$calls")"
    fail=1
fi
exit "$fail"
