#!/usr/bin/env bash
# Build the Debian packages (CPack) into build-pkg/: buzz-backfilld, buzzctl,
# libbuzz-backfill1, libbuzz-backfill-client1, libbuzz-backfill-dev and, when gtk4 is there,
# buzz-backfill-desktop; then run lintian on them.
set -euo pipefail

PROG="${0##*/}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/build-pkg"
lint=1

usage()
{
    cat <<USAGE
Usage: $PROG [--no-lintian] [--help]

Configures a Release build with prefix /usr in build-pkg/, builds it, and
makes one .deb per package with CPack (versions from project(VERSION) in
CMakeLists.txt). Then lintian checks them; any lintian error fails.

  --no-lintian   skip the lintian check
  --help         show this help

The packages are left in build-pkg/*.deb; install them with
  apt-get install ./build-pkg/*.deb
USAGE
}

while (($#)); do
    case "$1" in
    --no-lintian) lint=0 ;;
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
cmake -S . -B "$OUT" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
    -DBUZZ_TESTS=OFF -DBUZZ_WERROR=ON
cmake --build "$OUT" -j"$(nproc 2>/dev/null || echo 2)"
rm -f "$OUT"/*.deb
(cd "$OUT" && cpack -G DEB)
ls -l "$OUT"/*.deb

# the unit's exposure as systemd rates it (0 best .. 10 worst): fail above 2.0
command -v systemd-analyze >/dev/null 2>&1 ||
    {
        echo "$PROG: systemd-analyze is not installed (scripts/deps.sh installs systemd)" >&2
        exit 1
    }
systemd-analyze security --offline=yes --threshold=20 \
    "$ROOT/packaging/systemd/buzz-backfilld.service" | tail -n 1

if ((lint)); then
    if ! command -v lintian >/dev/null 2>&1; then
        echo "$PROG: lintian is not installed (scripts/deps.sh installs it)" >&2
        exit 1
    fi
    # errors fail; warnings are printed. Profile: Debian's, as the packages target Debian 12.
    lintian --fail-on error --suppress-tags-from-file "$ROOT/packaging/lintian-suppressed" \
        "$OUT"/*.deb
    echo "$PROG: lintian: no errors"
fi
