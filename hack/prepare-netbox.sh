#!/usr/bin/env bash
# Prepare the NetBox the end-to-end tests start on loopback (tests/e2e/poolkinds/netbox/test_netbox_client.py):
#
#   1. Debian's postgresql and redis-server, installed with apt-get when missing
#      (only when run as root: otherwise they must be there already);
#   2. NetBox (metal3_ipam.testing.netbox.NETBOX_VERSION) from PyPI into a
#      virtualenv, with a Python 3.12-3.14 (pyenv's on these machines);
#   3. NetBox's migrations run once on an empty database (minutes of CPU) and
#      the result kept as a pg_dump, which every test start restores in a second.
#
# 2 and 3 live in ${METAL3_IPAM_NETBOX_CACHE:-~/.cache/metal3-ipam/netbox-<version>}/
# and are skipped when already there. The logic is metal3_ipam.testing.netbox's
# (`python -m metal3_ipam.testing.netbox prepare`), the same the tests use on
# first use; this script only runs it ahead of them.
set -euo pipefail

cd "$(dirname "$0")/.."

log() { printf '[prepare-netbox] %s\n' "$*" >&2; }

missing=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
if (( ${#missing[@]} )); then
    if [[ "$(id -u)" != 0 ]]; then
        log "missing Debian packages: ${missing[*]}; not root, so not installing them"
        exit 1
    fi
    log "installing Debian packages: ${missing[*]}"
    # One apt-get (and one policy-rc.d) at a time: the preparations of NetBox and OpenStack run side by side.
    exec 9>"${TMPDIR:-/tmp}/metal3-ipam-apt.lock"
    flock 9
    t0=$(date +%s)
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq </dev/null
    # policy-rc.d: no service is started at install (the tests start their own, unprivileged).
    had_policy=0
    [[ -e /usr/sbin/policy-rc.d ]] && had_policy=1
    if (( ! had_policy )); then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
    fi
    rc=0
    apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null || rc=$?
    (( had_policy )) || rm -f /usr/sbin/policy-rc.d
    exec 9>&-  # the lock released
    (( rc == 0 )) || { log "apt-get install failed ($rc)"; exit "$rc"; }
    log "installed in $(( $(date +%s) - t0 ))s"
fi

exec env PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" python3 -m metal3_ipam.testing.netbox prepare </dev/null
