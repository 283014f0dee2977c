#!/usr/bin/env bash
# The packaging stage of scripts/test.sh: install the packages scripts/package.sh built,
# check the installed default configuration, run the installed daemon against the test
# cluster ($BUZZ_TEST_PG_URL) and drive it with the installed buzzctl, then purge the
# packages and check that nothing they installed or made is left. Needs root (apt-get).
set -euo pipefail

PROG="${0##*/}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PKGS=(buzz-backfilld buzzctl libbuzz-backfill1 libbuzz-backfill-client1 libbuzz-backfill-dev)
CONF=/etc/buzz-backfill/buzz-backfilld.conf
SOCK=/run/buzz-backfill/admin.sock

case "${1:-}" in
-h | --help)
    echo "Usage: $PROG   (after scripts/package.sh; root; BUZZ_TEST_PG_URL set)"
    exit 0
    ;;
esac

die()
{
    echo "$PROG: $*" >&2
    exit 1
}

((EUID == 0)) || die "needs root (apt-get install/purge)"
[[ -n "${BUZZ_TEST_PG_URL:-}" ]] || die "BUZZ_TEST_PG_URL is not set"
# The packages are installed machine-wide: a second run of this script (another clone's
# scripts/test.sh beside this one) waits until the first has purged its packages before it
# installs its own (or each could test the other's files), and apt waits for any other user of
# dpkg instead of failing at once (two runs side by side failed here: "Could not get lock").
LOCK_FILE=/run/lock/buzz-backfill-package-test.lock
[[ -d /run/lock ]] || LOCK_FILE=/tmp/buzz-backfill-package-test.lock
exec 9>"$LOCK_FILE" || die "cannot open $LOCK_FILE"
if ! flock -n 9; then
    echo "$PROG: another package test runs; waiting for it (at most 30 minutes)"
    flock -w 1800 9 || die "another package test held $LOCK_FILE for 30 minutes"
fi
APT_WAIT=(-o DPkg::Lock::Timeout=600)
shopt -s nullglob
# buzz-backfill-desktop is built when gtk4 is there (BUZZ_DESKTOP=AUTO; scripts/deps.sh installs it)
desktop_debs=("$ROOT"/build-pkg/buzz-backfill-desktop_*.deb)
if ((${#desktop_debs[@]})); then
    PKGS+=(buzz-backfill-desktop)
fi
debs=("$ROOT"/build-pkg/*.deb)
((${#debs[@]} == ${#PKGS[@]})) || die "expected ${#PKGS[@]} packages in build-pkg/ (run scripts/package.sh)"

daemon_pid=""
cleanup()
{
    if [[ -n "$daemon_pid" ]]; then
        kill -TERM "$daemon_pid" 2>/dev/null || true
        wait "$daemon_pid" 2>/dev/null || true
    fi
}
trap cleanup EXIT

echo "--- the control files' descriptions (as apt show renders them)"
for deb in "${debs[@]}"; do
    desc="$(dpkg-deb -f "$deb" Description)"
    # the package's own summary, then continuation lines of one leading space (two or more
    # make apt show them verbatim) or " ." for an empty line
    [[ "$(head -n 1 <<<"$desc")" != "durable PostgreSQL data backfills for a Nostr relay" ]] ||
        die "${deb##*/}: the project's summary instead of the package's"
    if grep -vE '^ [^ ]|^ \.$' < <(tail -n +2 <<<"$desc") >/dev/null; then
        die "${deb##*/}: a description line is not ' text' or ' .': $(tail -n +2 <<<"$desc" | head -n 2)"
    fi
    (($(wc -l <<<"$desc") >= 2)) || die "${deb##*/}: no long description"
done

echo "--- install"
install_log="$(mktemp)"
DEBIAN_FRONTEND=noninteractive apt-get "${APT_WAIT[@]}" install -y --no-install-recommends "${debs[@]}" 2>&1 |
    tee "$install_log"
((PIPESTATUS[0] == 0)) || die "apt-get install failed"
# postinst makes the system user quietly (adduser warned about the home it did not create)
if grep -iE '^(warning|adduser)|home dir' "$install_log"; then
    die "the installation printed the warning above"
fi
rm -f "$install_log"
manifest="$(mktemp)"
for p in "${PKGS[@]}"; do
    dpkg -L "$p" >>"$manifest"
done

echo "--- what postinst made"
getent passwd buzz-backfill >/dev/null || die "no buzz-backfill system user"
[[ "$(stat -c '%a %U %G' "$CONF")" == "640 root buzz-backfill" ]] ||
    die "$CONF: mode/owner $(stat -c '%a %U %G' "$CONF"), want 640 root buzz-backfill"
[[ -d /run/buzz-backfill ]] || die "no /run/buzz-backfill"
for page in buzz-backfilld.8 buzz-backfilld.conf.5 buzzctl.1; do
    [[ -f "/usr/share/man/man${page##*.}/$page.gz" ]] || die "man page $page not installed"
    # an scdoc underline that did not open stays literal after the bold (BUZZ_BACKFILL__KEY_)
    if zgrep -nE '\\fR_[A-Za-z]+_|BUZZ_BACKFILL__' "/usr/share/man/man${page##*.}/$page.gz"; then
        die "man page $page shows literal underscores (scdoc escaping)"
    fi
done
# the modules directory the configuration's example names, and definitions_dir (root's only)
for d in /usr/lib/buzz-backfill /etc/buzz-backfill/definitions.d; do
    [[ "$(stat -c '%a %U' "$d" 2>/dev/null)" == "755 root" ]] ||
        die "$d: $(stat -c '%a %U' "$d" 2>&1), want a directory 755 root"
done
pkg-config --exists libbuzz-backfill || die "pkg-config does not find libbuzz-backfill"
pkg-config --exists libbuzz-backfill-client || die "pkg-config does not find libbuzz-backfill-client"

echo "--- a program built against the installed -dev package (pkg-config)"
work="$(mktemp -d)"
cat >"$work/use.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <buzz/engine.h>
int main(void)
{
    /* the installed headers and library agree on the error table and the event codes */
    const char *name = bf_err_name(BF_ERR_STALE);
    printf("%s %s\n", name, bf_event_code(BF_EV_CLAIM_TAKEOVER));
    return strcmp(bf_event_code(BF_EV_CLAIM_TAKEOVER), "claim.takeover") != 0;
}
C
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror -o "$work/use" "$work/use.c" $(pkg-config --cflags --libs libbuzz-backfill)
"$work/use"
# what a relay does: examples/relay_readiness.c against the installed client (run below)
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror -o "$work/relay_readiness" "$ROOT/examples/relay_readiness.c" \
    $(pkg-config --cflags --libs libbuzz-backfill-client)

if [[ " ${PKGS[*]} " == *" buzz-backfill-desktop "* ]]; then
    echo "--- the installed desktop client, its launcher and its icon"
    /usr/bin/buzz-backfill-desktop --version
    grep -qx 'Exec=buzz-backfill-desktop' /usr/share/applications/buzz-backfill-desktop.desktop ||
        die "the desktop file does not start buzz-backfill-desktop"
    [[ -f /usr/share/man/man1/buzz-backfill-desktop.1.gz ]] ||
        die "man page buzz-backfill-desktop.1 not installed"
    [[ -f /usr/share/icons/hicolor/scalable/apps/buzz-backfill-desktop.svg ]] ||
        die "the desktop client's icon is not installed"
fi

echo "--- check-config of the installed default configuration"
BUZZ_BACKFILL_CONFIG="$CONF" /usr/sbin/buzz-backfilld check-config >/dev/null
# metrics and probes are on after install, on loopback
http_url="$(sed -n "s/^http_listen *= *'\{0,1\}\(http:\/\/127\.0\.0\.1:[0-9]*\)'\{0,1\} *$/\1/p" "$CONF")"
[[ -n "$http_url" ]] || die "$CONF does not set http_listen on 127.0.0.1"

echo "--- the container image's configuration listens on the ports the Dockerfile exposes"
image_conf="$ROOT/packaging/container/buzz-backfilld.conf"
env -u BUZZ_BACKFILL_CONFIG BUZZ_BACKFILL_DATABASE_URL=postgresql://buzz@db.invalid/relay \
    /usr/sbin/buzz-backfilld --config "$image_conf" check-config >"$work/image.conf" ||
    die "check-config refused $image_conf"
exposed="$(sed -n 's/^EXPOSE //p' "$ROOT/Dockerfile" | tr ' ' '\n' | sed 's,/tcp$,,' | grep . |
    sort -u)"
listeners="$(grep -E '^(listen|http_listen) = ' "$work/image.conf" | grep -oE '://[^,'"'"' ]+:[0-9]+')"
listening="$(grep -oE '[0-9]+$' <<<"$listeners" | sort -u)"
[[ -n "$exposed" && "$exposed" == "$listening" ]] ||
    die "the Dockerfile exposes ${exposed//$'\n'/ }, the image's configuration listens on ${listening//$'\n'/ }"
if grep -E '://(127\.|localhost|\[::1\])' <<<"$listeners"; then
    die "the image's configuration listens on loopback, which nothing outside the container reaches"
fi

echo "--- the installed daemon against the test cluster"
db="buzz_pkg_$$"
psql "$BUZZ_TEST_PG_URL" -qtAc "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
db_url="${BUZZ_TEST_PG_URL%/*}/$db"
chown buzz-backfill:buzz-backfill /run/buzz-backfill
log="$(mktemp)"
setpriv --reuid buzz-backfill --regid buzz-backfill --init-groups -- \
    env BUZZ_BACKFILL_CONFIG="$CONF" \
    BUZZ_BACKFILL_DATABASE_URL="$db_url" BUZZ_BACKFILL_AUTO_MIGRATE=on \
    /usr/sbin/buzz-backfilld run 2>"$log" 9>&- &
daemon_pid=$!
ok=0
for _ in $(seq 1 300); do
    if /usr/bin/buzzctl -u "ipc://$SOCK" --timeout 2s ready >/dev/null 2>&1; then
        ok=1
        break
    fi
    kill -0 "$daemon_pid" 2>/dev/null || break
    sleep 0.1
done
if ((!ok)); then
    cat "$log" >&2
    die "the installed daemon never became ready"
fi
/usr/bin/buzzctl -u "ipc://$SOCK" whoami
/usr/bin/buzzctl -u "ipc://$SOCK" list
/usr/bin/buzzctl -u "ipc://$SOCK" ready
echo "--- the installed configuration serves $http_url/metrics, /livez and /readyz"
metrics="$(curl -fsS --max-time 10 "$http_url/metrics")" || die "GET $http_url/metrics failed"
grep -q '^buzz_backfill_build_info{version="' <<<"$metrics" || die "/metrics lacks build_info"
grep -qx 'buzz_backfill_database_up 1' <<<"$metrics" || die "/metrics: database_up is not 1"
[[ "$(curl -fsS --max-time 10 "$http_url/livez")" == ok ]] || die "GET $http_url/livez failed"
# no "curl | grep -q" under pipefail: grep leaving at its match can kill curl with SIGPIPE
readyz="$(curl -fsS --max-time 10 "$http_url/readyz")" || die "GET $http_url/readyz failed"
grep -q '"status":"ready"' <<<"$readyz" || die "GET $http_url/readyz is not ready"
echo "$(grep -c '^buzz_backfill_' <<<"$metrics") samples"
echo "--- Readiness.Check from a program built against the installed client library"
"$work/relay_readiness" "ipc://$SOCK"
rm -rf "$work"
kill -TERM "$daemon_pid"
rc=0
wait "$daemon_pid" || rc=$?
daemon_pid=""
((rc == 0)) || {
    cat "$log" >&2
    die "the installed daemon exited $rc on SIGTERM"
}
psql "$BUZZ_TEST_PG_URL" -qtAc "DROP DATABASE $db WITH (FORCE)"
rm -f "$log"

echo "--- purge"
DEBIAN_FRONTEND=noninteractive apt-get "${APT_WAIT[@]}" purge -y "${PKGS[@]}"
left=0
while read -r f; do
    [[ -z "$f" || -d "$f" ]] && continue # directories may be shared (/usr/share/doc, ...)
    if [[ -e "$f" || -L "$f" ]]; then
        echo "left behind: $f" >&2
        left=1
    fi
done <"$manifest"
for d in /etc/buzz-backfill /run/buzz-backfill /usr/share/doc/buzz-backfilld /usr/include/buzz \
    /usr/lib/x86_64-linux-gnu/cmake/BuzzBackfill; do
    if [[ -e "$d" ]]; then
        echo "left behind: $d" >&2
        left=1
    fi
done
if getent passwd buzz-backfill >/dev/null || getent group buzz-backfill >/dev/null; then
    echo "left behind: the buzz-backfill user or group" >&2
    left=1
fi
rm -f "$manifest"
((left == 0)) || die "the purge left files behind"
echo "$PROG: installed, ran, purged cleanly"
