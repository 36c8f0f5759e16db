#!/bin/bash
# Set up everything and run every test of nova-lxd-accel.
#
# On a fresh Debian 12 machine (root; PID 1 need not be systemd): installs
# Debian's LXD, busybox, shellcheck and Open vSwitch; starts an LXD daemon
# by hand (dir storage pool, no managed network) and OVS (userspace
# datapath); builds the tiny busybox test image; installs tox (pinned in
# constraints.txt) and runs the tox environments: pep8, unit (py3),
# functional, integration, genconfig, release notes, docs and the DevStack
# plugin harness; then the sandbox end to end. Stops the daemons it
# started.
#
#   tools/run-tests.sh                 # everything
#   tools/run-tests.sh -e py3,pep8     # only these tox environments
#   SKIP_SANDBOX=1 tools/run-tests.sh  # without the sandbox end-to-end
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
state=$repo/.ci/state
mkdir -p "$state"

envs=pep8,py3,functional,integration,genconfig,releasenotes,docs,devstack
if [ "${1:-}" = "-e" ]; then
    envs=${2:?usage: run-tests.sh [-e ENV[,ENV...]]}
fi

step() {
    printf '\n=== %s (%s)\n' "$*" "$(date +%T)"
}

step "Debian packages"
need=()
for pkg in lxd lxd-client busybox-static shellcheck openvswitch-switch; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends "${need[@]}"
fi

step "LXD daemon"
export LXD_DIR=${LXD_DIR:-/var/lib/lxd}
lxd_was_running=1
lxc info >/dev/null 2>&1 || lxd_was_running=0
"$repo/tools/lxd-up.sh"

step "Open vSwitch (userspace datapath)"
ovs_was_running=1
ovs-vsctl --timeout=5 show >/dev/null 2>&1 || ovs_was_running=0
"$repo/tools/ovs-up.sh"
# The networking tests fail (not skip) when OVS is missing.
export NOVA_LXD_ACCEL_REQUIRE_OVS=1

step "Peer LXD daemon (migration tests)"
# A second daemon (LXD_DIR=/var/lib/lxd-peer, https://127.0.0.1:8444) that
# trusts the main one, which it makes listen on https://127.0.0.1:8443.
# The migration tests fail (not skip) without it.
peer_was_running=1
LXD_DIR=${LXD_PEER_DIR:-/var/lib/lxd-peer} lxc info >/dev/null 2>&1 ||
    peer_was_running=0
"$repo/tools/lxd-peer-up.sh"

stop_daemons() {
    if [ "$peer_was_running" = 0 ]; then
        step "Stopping the peer LXD daemon this script started"
        "$repo/tools/lxd-peer-up.sh" --stop || true
    fi
    if [ "$ovs_was_running" = 0 ]; then
        step "Stopping the Open vSwitch daemons this script started"
        OVS_STOP=1 "$repo/tools/ovs-up.sh" || true
    fi
    if [ "$lxd_was_running" = 0 ]; then
        step "Stopping the LXD daemon this script started"
        lxd shutdown --timeout=60 || true
    fi
}
trap stop_daemons EXIT

step "Tiny test image"
export NOVA_LXD_ACCEL_TEST_IMAGE=$state/tiny.tar.gz
"$repo/tools/build-tiny-image.sh" "$NOVA_LXD_ACCEL_TEST_IMAGE"

step "tox"
if [ ! -x "$state/tox-venv/bin/tox" ]; then
    python3 -m venv "$state/tox-venv"
    "$state/tox-venv/bin/pip" install -q -c constraints.txt tox
fi

step "tox -e $envs"
"$state/tox-venv/bin/tox" -e "$envs"

if [ "${SKIP_SANDBOX:-0}" != 1 ] && [ -x "$repo/tools/sandbox-e2e.sh" ]; then
    step "Sandbox end to end"
    "$repo/tools/sandbox-e2e.sh"
fi
step "All tests passed"
