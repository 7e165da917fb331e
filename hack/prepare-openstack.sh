#!/usr/bin/env bash
# Prepare the Keystone and Neutron the end-to-end tests start on loopback
# (tests/e2e/poolkinds/openstack/test_openstack_harness.py and the OpenStack pool tests):
#
#   1. Debian's mariadb-server, installed with apt-get when missing (only when run
#      as root: otherwise it must be there already); no service is started;
#   2. Neutron and Keystone (metal3_ipam.testing.openstack.REQUIREMENTS) from PyPI
#      into one virtualenv, with a Python 3.11-3.13;
#   3. Keystone's and Neutron's migrations run once on an empty MariaDB and the
#      result kept as mariadb-dump files, which every test start restores in seconds.
#
# 2 and 3 live in ${METAL3_IPAM_OPENSTACK_CACHE:-~/.cache/metal3-ipam/openstack-neutron<N>-keystone<K>}/
# and are skipped when already there. The logic is metal3_ipam.testing.openstack's
# (`python -m metal3_ipam.testing.openstack prepare`), the same the tests use on
# first use; this script only runs it ahead of them.
set -euo pipefail

cd "$(dirname "$0")/.."

log() { printf '[prepare-openstack] %s\n' "$*" >&2; }

if ! command -v mariadbd >/dev/null 2>&1 && [[ ! -x /usr/sbin/mariadbd ]]; then
    if [[ "$(id -u)" != 0 ]]; then
        log "missing Debian package: mariadb-server; not root, so not installing it"
        exit 1
    fi
    log "installing Debian package: mariadb-server"
    # One apt-get (and one policy-rc.d) at a time: the preparations of NetBox and OpenStack run side by side.
    exec 9>"${TMPDIR:-/tmp}/metal3-ipam-apt.lock"
    flock 9
    t0=$(date +%s)
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq -o DPkg::Lock::Timeout=600 </dev/null
    # policy-rc.d: no service is started at install (the tests start their own, unprivileged).
    had_policy=0
    [[ -e /usr/sbin/policy-rc.d ]] && had_policy=1
    if (( ! had_policy )); then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
    fi
    rc=0
    apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 mariadb-server </dev/null || rc=$?
    (( had_policy )) || rm -f /usr/sbin/policy-rc.d
    exec 9>&-  # the lock released
    (( rc == 0 )) || { log "apt-get install failed ($rc)"; exit "$rc"; }
    log "installed in $(( $(date +%s) - t0 ))s"
fi

exec env PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" python3 -m metal3_ipam.testing.openstack prepare </dev/null
