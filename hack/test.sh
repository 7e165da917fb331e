#!/usr/bin/env bash
# The test command: prepares what the tests need on a fresh Debian machine, then runs tox.
#   bash hack/test.sh [TOX ARGUMENTS...]      e.g.  bash hack/test.sh -e unit
# It installs tox and the image tools (podman, runc, slirp4netns, mmdebstrap)
# when missing, builds the control-plane binaries, kustomize, helm, prometheus and
# promtool (hack/build-binaries.sh)
# while it prepares NetBox (hack/prepare-netbox.sh:
# PostgreSQL and Redis from Debian, NetBox from PyPI, its migrated database) and
# OpenStack (hack/prepare-openstack.sh: MariaDB from Debian, Neutron and Keystone
# from PyPI, their migrated databases); all cached across runs in
# ~/.cache/metal3-ipam, then runs tox with the arguments
# given. Each step prints its time. Exits with tox's exit status. Idempotent: a
# second run finds everything in place and goes straight to tox.
set -uo pipefail

cd "$(dirname "$0")/.."

export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

echo "==> installing tox"
if ! python3 -m pip install --quiet --disable-pip-version-check tox </dev/null; then
    if command -v tox >/dev/null 2>&1; then
        echo "==> pip install tox failed; using the tox already on PATH" >&2
    else
        echo "==> pip install tox failed and no tox on PATH" >&2
        exit 1
    fi
fi

# Installs the Debian packages of the commands given as COMMAND[:PACKAGE] that are not on PATH; on failure,
# says which tests will report it and keeps going (those tests then fail and say why).
install_missing() {
    local tests="$1"; shift
    local missing="" entry
    for entry in "$@"; do
        command -v "${entry%%:*}" >/dev/null 2>&1 || missing="$missing ${entry#*:}"
    done
    [[ -n "$missing" ]] || return 0
    echo "==> installing${missing} (apt-get)"
    local apt_start sudo=""
    apt_start=$(date +%s)
    [[ $(id -u) -eq 0 ]] || sudo="sudo"
    if $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq -o DPkg::Lock::Timeout=300 </dev/null \
        && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            -o DPkg::Lock::Timeout=300 $missing </dev/null >/dev/null; then
        echo "==>${missing} installed in $(( $(date +%s) - apt_start ))s"
    else
        echo "==> installing${missing} FAILED; ${tests} will report it" >&2
    fi
}

# The image test (tests/e2e/install/test_image.py) builds and runs the controller image with podman
# (runc as its runtime, slirp4netns for the container's network) on a Debian base made by
# mmdebstrap: installed from Debian when missing.
install_missing "the image test" podman runc slirp4netns mmdebstrap


# NetBox's preparation (apt, pip, then minutes of single-threaded migrations)
# runs beside the Go build; its output is shown once both are done.
echo "==> preparing NetBox in the background (hack/prepare-netbox.sh)"
netbox_log="$(mktemp)"
netbox_start=$(date +%s)
bash hack/prepare-netbox.sh </dev/null >"$netbox_log" 2>&1 &
netbox_pid=$!

# Keystone's and Neutron's preparation (apt, pip, a minute of migrations) likewise.
echo "==> preparing OpenStack in the background (hack/prepare-openstack.sh)"
openstack_log="$(mktemp)"
openstack_start=$(date +%s)
bash hack/prepare-openstack.sh </dev/null >"$openstack_log" 2>&1 &
openstack_pid=$!

echo "==> building control-plane binaries, kustomize, helm, prometheus and promtool (hack/build-binaries.sh)"
build_start=$(date +%s)
if bash hack/build-binaries.sh </dev/null; then
    echo "==> binaries ready in $(( $(date +%s) - build_start ))s"
else
    # Keep going: the end-to-end tests then fail and say why.
    echo "==> hack/build-binaries.sh FAILED after $(( $(date +%s) - build_start ))s; the e2e tests will report it" >&2
fi

if wait "$netbox_pid"; then
    cat "$netbox_log"
    echo "==> NetBox ready in $(( $(date +%s) - netbox_start ))s"
else
    cat "$netbox_log"
    # Keep going: the NetBox tests then fail and say why.
    echo "==> hack/prepare-netbox.sh FAILED after $(( $(date +%s) - netbox_start ))s; the NetBox tests will report it" >&2
fi
rm -f "$netbox_log"

if wait "$openstack_pid"; then
    cat "$openstack_log"
    echo "==> OpenStack ready in $(( $(date +%s) - openstack_start ))s"
else
    cat "$openstack_log"
    # Keep going: the OpenStack tests then fail and say why.
    echo "==> hack/prepare-openstack.sh FAILED after $(( $(date +%s) - openstack_start ))s; the OpenStack tests will report it" >&2
fi
rm -f "$openstack_log"

echo "==> tox"
tox_start=$(date +%s)
if command -v tox >/dev/null 2>&1; then
    tox "$@" </dev/null
else
    python3 -m tox "$@" </dev/null
fi
rc=$?
echo "==> tox exited with $rc after $(( $(date +%s) - tox_start ))s"
exit $rc
