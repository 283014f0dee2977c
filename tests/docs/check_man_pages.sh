#!/usr/bin/env bash
# The man pages (docs/man/*.scd) and the binaries' --help name the same options: every
# --option of a --help output appears in its man page and every --option of a man page
# appears in some --help output of its binary; every buzzctl command is documented.
# Usage: check_man_pages.sh SOURCE_DIR BUZZ_BACKFILLD BUZZCTL
set -euo pipefail

src="$1" daemon="$2" ctl="$3"
trap 'echo "${0##*/}: failed at line $LINENO: $BASH_COMMAND"' ERR
fail=0

options() { grep -oE -- '--[a-z][a-z0-9-]+' | sed 's/-$//' | sort -u; }

# compare NAME HELP_TEXT MAN_FILE
compare()
{
    local name="$1" help="$2" man="$3"
    local in_help in_man
    in_help="$(options <<<"$help")"
    in_man="$(options <"$man")"
    local missing extra
    missing="$(comm -23 <(echo "$in_help") <(echo "$in_man"))"
    extra="$(comm -13 <(echo "$in_help") <(echo "$in_man"))"
    if [[ -n "$missing" ]]; then
        echo "$name: in --help but not in ${man##*/}: $(echo $missing)"
        fail=1
    fi
    if [[ -n "$extra" ]]; then
        echo "$name: in ${man##*/} but in no --help: $(echo $extra)"
        fail=1
    fi
}

# buzz-backfilld: its --help names every setting's flag; both man pages together
daemon_help="$("$daemon" --help)"
compare buzz-backfilld "$daemon_help" "$src/docs/man/buzz-backfilld.8.scd"
# the configuration page: every file key of --help, and only those
keys_help="$(grep -oE 'file: [a-z_]+' <<<"$daemon_help" | cut -d' ' -f2 | sort -u)"
keys_man="$(grep -oE '^\*[a-z\\_]+\* =' "$src/docs/man/buzz-backfilld.conf.5.scd" |
    sed -e 's/^\*//' -e 's/\* =$//' -e 's/\\_/_/g' | sort -u)"
if [[ "$keys_help" != "$keys_man" ]]; then
    echo "buzz-backfilld.conf(5) keys differ from --help:"
    diff <(echo "$keys_help") <(echo "$keys_man") || true
    fail=1
fi

# buzzctl: the top-level help and every subcommand's help
ctl_help="$("$ctl" --help)"
for sub in "token keygen" "token mint" "token inspect"; do
    # shellcheck disable=SC2086
    ctl_help+=$'\n'"$("$ctl" $sub --help 2>&1 || true)"
done
commands="$(sed -n '/^commands/,/^$/p' <<<"$("$ctl" --help)" | grep -oE '^  [a-z]+' | sort -u)"
[[ -n "$commands" ]] || { echo "buzzctl --help lists no commands"; exit 1; }
for c in $commands; do
    sub_help="$("$ctl" "$c" --help 2>&1 || true)"
    ctl_help+=$'\n'"$sub_help"
    if ! grep -qE "^\*$c( |\*)|, \*$c\*" "$src/docs/man/buzzctl.1.scd"; then
        echo "buzzctl: command $c is not in buzzctl.1"
        fail=1
    fi
done
compare buzzctl "$ctl_help" "$src/docs/man/buzzctl.1.scd"

exit "$fail"
