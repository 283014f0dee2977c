#!/usr/bin/env bash
# Install the Debian packages needed to build, test, fuzz and demo buzz-backfill.
# Touches the network only when something is actually missing (checked with dpkg-query).
set -euo pipefail

PACKAGES=(
    build-essential
    cmake
    pkg-config
    git
    ca-certificates
    libpq-dev
    postgresql-15
    postgresql-client-15
    pgbouncer
    openssl
    libprotobuf-c-dev
    protobuf-c-compiler
    libnng-dev
    libmbedtls-dev
    libsodium-dev
    libcmocka-dev
    libjson-c-dev
    libncurses-dev
    libsystemd-dev
    scdoc
    bash-completion
    lintian
    adduser
    libjson-c-dev
    libvterm-dev
    clang
    valgrind
    libclang-rt-14-dev
    clang-format
    procps
    iproute2   # ss: the hostile-peer suites show both ends of a stuck tcp connection
    prometheus
    util-linux
    python3
    curl
    jq
    systemd
    # buzz-backfill-desktop (GTK 4) and its test: a private X display; the accessibility bus
    # and pyatspi for reading the window as assistive technologies do; a font for screenshots
    libgtk-4-dev
    xvfb
    xauth
    dbus
    dbus-x11
    at-spi2-core
    python3-pyatspi
    fonts-dejavu-core
)

usage()
{
    cat <<USAGE
Usage: ${0##*/} [--check] [--list] [--help]

Installs every Debian package buzz-backfill needs (build, tests, fuzzing, demo)
with apt-get, but only if at least one of them is missing.

  --check   only report missing packages; exit 1 if any are missing
  --list    print the package list (one per line) and exit
  --help    show this help

As a normal user, sudo is used when available; otherwise the missing packages
are printed and the script exits 1.
USAGE
}

check_only=0
while (($#)); do
    case "$1" in
    --check) check_only=1 ;;
    --list)
        printf '%s\n' "${PACKAGES[@]}"
        exit 0
        ;;
    -h | --help)
        usage
        exit 0
        ;;
    *)
        echo "deps.sh: unknown argument: $1 (see --help)" >&2
        exit 2
        ;;
    esac
    shift
done

if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "deps.sh: dpkg-query not found; this script supports Debian/Ubuntu only" >&2
    exit 1
fi

# Print the packages from PACKAGES that are not fully installed.
missing_packages()
{
    local pkg status
    for pkg in "${PACKAGES[@]}"; do
        status="$(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null || true)"
        if [[ "$status" != ii* ]]; then
            printf '%s\n' "$pkg"
        fi
    done
}

mapfile -t missing < <(missing_packages)

if ((${#missing[@]} == 0)); then
    echo "deps.sh: all ${#PACKAGES[@]} packages already installed"
    exit 0
fi

echo "deps.sh: missing packages: ${missing[*]}" >&2
if ((check_only)); then
    exit 1
fi

if ((EUID == 0)); then
    as_root=()
elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
else
    echo "deps.sh: not root and sudo is not available; install them with:" >&2
    echo "  apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
fi

# another apt user (a second test run beside this one installing its packages) is waited for
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${missing[@]}"

mapfile -t still_missing < <(missing_packages)
if ((${#still_missing[@]} != 0)); then
    echo "deps.sh: still missing after install: ${still_missing[*]}" >&2
    exit 1
fi
echo "deps.sh: installed ${missing[*]}"
