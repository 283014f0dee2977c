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
    _buzzctl buzzctl "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]:-}"
    local w
    for w in "$@"; do
        if ! printf '%s\n' "${COMPREPLY[@]}" | grep -qxF -- "$w"; then
            echo "completing '$line': no '$w' in: ${COMPREPLY[*]}"
            fail=1
        fi
    done
}

expect "buzzctl pa" pause
expect "buzzctl pref" preflight
expect "buzzctl preflight --j" --json
expect "buzzctl " list get start pause resume retry validate audit ready token
expect "buzzctl --js" --json
expect "buzzctl token " keygen mint inspect
expect "buzzctl list --state " running paused blocked failed completed
expect "buzzctl -u ipc:///x list --st" --state
exit "$fail"
