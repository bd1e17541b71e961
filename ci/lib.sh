# Shared by ci/stage and the stage scripts in ci/stages/ (sourced, not run).
# Sets bash's strict mode, moves to the repository root and defines:
#   section TITLE...      a heading that names the free disk space
#   no_system_libs        points pkg-config at an empty directory
#   need_apt PKG...       installs the Debian packages that are missing
#   TARGET                cargo's target directory (CARGO_TARGET_DIR or target)
#   VERBS_BUILD_PKGS      what a build with the verbs feature needs
#   RCTB_CI_STATE         a directory the stages of one ci/stage run share
# A failing command prints where it failed and the free disk space.
# shellcheck shell=bash
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Each section names the disk space left, and a failure prints it again: a
# linker that dies of SIGBUS has usually run out of disk.
section() { printf '\n==== %s ==== (%s free)\n' "$*" "$(df -h --output=avail . | tail -n 1 | tr -d ' ')"; }
trap 'echo "exit $? at $0 line $LINENO"; df -h . /tmp' ERR

# apt-get and debconf never ask (.ci/run used to export this once it
# installed packages; every stage may now install them).
export DEBIAN_FRONTEND=noninteractive

# shellcheck disable=SC2034 # used by the stages that source this file
TARGET=${CARGO_TARGET_DIR:-target}

# rdma-sys's build script: pkg-config finds rdma-core, bindgen needs libclang,
# and a C compiler.
# shellcheck disable=SC2034 # used by the stages that source this file
VERBS_BUILD_PKGS=(libibverbs-dev librdmacm-dev libclang-dev pkg-config gcc libc6-dev)

# ci/stage makes one state directory for all the stages it runs (so that
# apt-get update runs once, and the python stage can hand its wheel to the
# vm stage); a stage script run directly gets its own.
if [ -z "${RCTB_CI_STATE:-}" ]; then
    RCTB_CI_STATE=$(mktemp -d /tmp/rctb-ci.XXXXXX)
    trap 'rm -rf "$RCTB_CI_STATE"' EXIT
fi
export RCTB_CI_STATE

# no_system_libs: pkg-config looks in an empty directory, so a build script
# that looks for a system library (rdma-sys's does, for libibverbs) fails
# even on a machine that has the headers.
no_system_libs() {
    mkdir -p /tmp/rctb-empty-pkgconfig
    export PKG_CONFIG_LIBDIR=/tmp/rctb-empty-pkgconfig
}

# need_apt PKG...: install those of the Debian packages PKG... that are not
# installed, when running as root (CI runs as root; with CI=true and no root,
# through sudo -n). Otherwise a missing package fails the stage, naming the
# command to run. Nothing is installed, and apt-get not run, when all are there.
# A failure returns 1 (a command failing inside a function would end the
# stage without the ERR trap's report; the caller's failure has it).
need_apt() {
    local p missing=() sudo=()
    if ! command -v dpkg-query >/dev/null 2>&1; then
        echo "need_apt: no dpkg here; this stage needs the Debian packages $*" >&2
        return 0
    fi
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" != 0 ]; then
        if [ "${CI:-}" = true ] && command -v sudo >/dev/null 2>&1; then
            sudo=(sudo -n env DEBIAN_FRONTEND=noninteractive)
        else
            echo "missing system packages: ${missing[*]}" >&2
            echo "install them (sudo apt-get install ${missing[*]}), or run this stage as root" >&2
            return 1
        fi
    fi
    echo "installing: ${missing[*]}"
    case " ${missing[*]} " in
        *" tshark "*)
            # tshark's package asks whether non-root users may capture; answer it up front.
            echo "wireshark-common wireshark-common/install-setuid boolean false" | "${sudo[@]}" debconf-set-selections || return 1
            ;;
    esac
    if [ ! -e "$RCTB_CI_STATE/apt-updated" ]; then
        "${sudo[@]}" apt-get update -qq || return 1
        touch "$RCTB_CI_STATE/apt-updated"
    fi
    # munge's and Slurm's packages start their services when installed (on
    # a machine without Docker's policy-rc.d); the slurm stage runs daemons
    # of its own, so a policy-rc.d that refuses is in place for the install.
    local no_start=
    case " ${missing[*]} " in
        *" munge "* | *" slurmctld "* | *" slurmd "*)
            if [ ! -e /usr/sbin/policy-rc.d ]; then
                printf '#!/bin/sh\n# need_apt (ci/lib.sh): no service starts during this install\nexit 101\n' |
                    "${sudo[@]}" tee /usr/sbin/policy-rc.d >/dev/null || return 1
                "${sudo[@]}" chmod 755 /usr/sbin/policy-rc.d || return 1
                no_start=1
            fi
            ;;
    esac
    local rc=0
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || rc=1
    if [ -n "$no_start" ]; then "${sudo[@]}" rm -f /usr/sbin/policy-rc.d || rc=1; fi
    return "$rc"
}
