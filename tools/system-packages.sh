#!/bin/sh
# The system packages this project needs, installed when missing (make, make test and .ci/run call it).
#
#   tools/system-packages.sh main    what `make` needs: a C compiler for the probes, Lmod, python3-venv
#   tools/system-packages.sh test    what `make test` needs on top: munge + Slurm (+ iproute2 for the
#                                    namespace hosts, slurmdbd + MariaDB for accounting) for the
#                                    real-Slurm tests,
#                                    Tcl + Environment Modules 5 for the Tcl modulefile tests,
#                                    Chromium for the history dashboard's browser test
#   tools/system-packages.sh spack   what the local-source Spack environment takes from Debian (its
#                                    externals: autotools, hwloc, libevent, numactl, Python + PyYAML +
#                                    Jinja2 ...) to build Open MPI + UCX + UCC from source (docs/spack.md)
#   tools/system-packages.sh --check main|test|spack    only say what is missing (exit 1 if anything is)
#
# Debian/Ubuntu as root: apt-get installs what is missing. Not root: one line with the exact command,
# exit 2. Other systems: the package names to look for, exit 2. TUNEDMPI_SYSTEM_PACKAGES=skip skips
# this (the tests that need a missing package then skip, each saying what it needs).
set -eu

check_only=0
if [ "${1:-}" = "--check" ]; then check_only=1; shift; fi
level="${1:-main}"
case "$level" in main|test|spack) ;; *) echo "usage: $0 [--check] main|test|spack" >&2; exit 2 ;; esac
[ "${TUNEDMPI_SYSTEM_PACKAGES:-}" = "skip" ] && exit 0

# "package(s)|test that says it is there", one per line; apt installs the Debian names
main_needs='make|command -v make
python3-venv|python3 -c "import venv, ensurepip"
gcc libc6-dev|command -v cc
lmod|test -f /usr/share/lmod/lmod/init/bash
xz-utils|command -v xz'
# Slurm without recommends: 8 packages instead of 43 (no X11 tools); slurmdbd + mariadb-server:
# accounting for tunedmpi coverage's test (sacct), a MariaDB the test cluster starts itself
test_needs='munge|test -x /usr/sbin/munged
slurmctld|test -x /usr/sbin/slurmctld
slurmd|test -x /usr/sbin/slurmd
slurm-client|command -v sbatch
slurmdbd mariadb-server|test -x /usr/sbin/slurmdbd && test -x /usr/sbin/mariadbd
iproute2|command -v ip
tcl8.6|command -v tclsh8.6
chromium|command -v chromium'
# site-configs/local-source/spack.yaml's externals (and what the source mirror's autogen runs)
spack_needs='g++|command -v g++
autoconf automake libtool m4 flex|command -v autoreconf && command -v libtoolize && command -v flex
pkgconf|command -v pkgconf
libhwloc-dev|test -f /usr/include/hwloc.h
libevent-dev|test -f /usr/include/event2/event.h
libnuma-dev|test -f /usr/include/numa.h
zlib1g-dev|test -f /usr/include/zlib.h
openssh-client|command -v ssh
python3-yaml python3-jinja2|/usr/bin/python3 -c "import yaml, jinja2"
git bzip2|command -v git && command -v bzip2'
# Environment Modules 5 (Tcl modulefiles): Debian's environment-modules Conflicts with lmod (apt would
# remove Lmod), so its .deb is unpacked, not installed, into $ENVMODULES; its modulecmd.tcl runs from
# there with tclsh8.6 (tests/envmodules.py). Nothing of it is on PATH or in /etc.
ENVMODULES=/opt/environment-modules
envmodules_missing() {
    [ "$level" = test ] && [ ! -f "$ENVMODULES/usr/lib/modulecmd.tcl" ] && printf 'environment-modules(unpacked) '
    return 0
}
unpack_envmodules() {
    tmp=$(mktemp -d) && chmod 755 "$tmp" && (cd "$tmp" && apt-get download -q environment-modules) &&
        mkdir -p "$ENVMODULES.new" && dpkg-deb -x "$tmp"/environment-modules_*.deb "$ENVMODULES.new" &&
        rm -rf "$ENVMODULES" && mv "$ENVMODULES.new" "$ENVMODULES" && rm -rf "$tmp"
}

missing() {   # the packages of the list in $1 whose test fails
    printf '%s\n' "$1" | while IFS='|' read -r pkgs probe; do
        sh -c "$probe" >/dev/null 2>&1 || printf '%s ' "$pkgs"
    done
}

plain=$(missing "$main_needs")
slurm=""
[ "$level" = test ] && slurm=$(missing "$test_needs")
[ "$level" = spack ] && plain="$plain$(missing "$spack_needs")"
unpack=$(envmodules_missing)
[ -z "$plain$slurm$unpack" ] && exit 0
if [ "$check_only" = 1 ]; then echo "missing system packages: $plain$slurm$unpack"; exit 1; fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "tunedmpi: this system has no apt-get; install the equivalents of the Debian packages: $plain$slurm" \
         "(RHEL/Rocky: make python3 gcc Lmod xz munge slurm-slurmctld slurm-slurmd slurm), then rerun" >&2
    exit 2
fi
cmd="apt-get update"
[ -z "$plain" ] || cmd="$cmd && apt-get install -y ${plain% }"
[ -z "$slurm" ] || cmd="$cmd && apt-get install -y --no-install-recommends ${slurm% }"
[ -z "$unpack" ] || cmd="$cmd && cd /tmp && apt-get download environment-modules && dpkg-deb -x environment-modules_*.deb $ENVMODULES"
if [ "$(id -u)" != 0 ]; then
    echo "tunedmpi: missing system packages; run as root: sudo sh -c '$cmd' (or TUNEDMPI_SYSTEM_PACKAGES=skip to go on without them)" >&2
    exit 2
fi
echo "tunedmpi: installing system packages: $plain$slurm$unpack" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
[ -z "$plain" ] || apt-get install -y -q $plain
[ -z "$slurm" ] || apt-get install -y -q --no-install-recommends $slurm
[ -z "$unpack" ] || unpack_envmodules
