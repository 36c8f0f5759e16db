#!/bin/bash
# Set up everything and run every test of nova-lxd-accel.
#
# On a fresh Debian 12 machine (root; PID 1 need not be systemd): installs
# Debian's LXD, busybox, shellcheck and Open vSwitch, and Incus 6.0 LTS
# (incus-base, incus-client) from bookworm-backports; starts by hand an
# LXD daemon and an Incus daemon (dir storage pool, no managed network;
# each with its own subordinate uid/gid range), a peer of each for the
# migration tests, and OVS (userspace datapath); builds the tiny busybox
# test image; installs tox (pinned in constraints.txt) and runs the tox
# environments: pep8, unit (py3), functional and integration against LXD,
# functional-incus and integration-incus against Incus, genconfig, release
# notes, docs, the DevStack plugin harness and the federation tools (real
# cASO and cloud-info-provider), $TOX_PARALLEL at a time;
# then the sandbox end to end (and SSH into its Debian cloud-init image),
# tempest's compute and image smoke tests
# against it (tools/sandbox-tempest.sh --subset ci), its cold-migration
# and multi-node tests on two compute hosts (sandbox.sh up --hosts 2;
# --subset multinode), the benches, and the sandbox on a
# simulated GPU and InfiniBand host (sandbox-e2e.sh --hardware), a
# simulated shared GPU's MPS limits over SSH (sandbox-e2e.sh --mps), and
# Horizon's browser test on the first (sandbox.sh up --with-horizon;
# sandbox.sh horizon-test). Stops the daemons it started.
#
#   tools/run-tests.sh                 # everything
#   tools/run-tests.sh -e py3,pep8     # only these tox environments
#   SKIP_SANDBOX=1 tools/run-tests.sh  # without the sandbox end-to-end
#   SKIP_INCUS=1 tools/run-tests.sh    # without Incus (and its -incus envs)
#   TOX_PARALLEL=1 tools/run-tests.sh  # one tox environment at a time
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
state=$repo/.ci/state
mkdir -p "$state"

# Longest first: tox starts them in this order, $TOX_PARALLEL at a time.
envs=functional,functional-incus,integration,integration-incus,functional-btrfs,functional-incus-btrfs,integration-btrfs,integration-incus-btrfs,py3,pep8,genconfig,releasenotes,docs,devstack,federation,dashboard
if [ "${SKIP_INCUS:-0}" = 1 ]; then
    envs=functional,integration,functional-btrfs,integration-btrfs,py3,pep8,genconfig,releasenotes,docs,devstack,federation,dashboard
fi
if [ "${1:-}" = "-e" ]; then
    envs=${2:?usage: run-tests.sh [-e ENV[,ENV...]]}
fi
# Incus is needed by the -incus environments (and the full run).
with_incus=0
case ",$envs," in *-incus,*|*-incus-*) with_incus=1;; esac

step() {
    printf '\n=== %s (%s)\n' "$*" "$(date +%T)"
}

step "Debian packages"
need=()
for pkg in lxd lxd-client busybox-static shellcheck openvswitch-switch zstd xz-utils bzip2 squashfs-tools btrfs-progs prometheus prometheus-node-exporter; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
need_incus=0
incus_suite=()
if [ "$with_incus" = 1 ] && ! dpkg -s incus-base incus-client >/dev/null 2>&1
then
    need_incus=1
    # Debian 12: Incus 6.0 LTS from bookworm-backports; Debian 13: main.
    if grep -qx 'VERSION_CODENAME=bookworm' /etc/os-release; then
        "$repo/tools/backports.sh"
        incus_suite=(-t bookworm-backports)
    fi
fi
if [ "${#need[@]}" -gt 0 ] || [ "$need_incus" = 1 ]; then
    apt-get update -q
fi
if [ "${#need[@]}" -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends "${need[@]}"
    # tests/federation/test_energy_chain.py starts its own prometheus and
    # node exporter on free loopback ports: the services the packages just
    # enabled (where systemd runs) are stopped and left disabled
    if [ -d /run/systemd/system ]; then
        for unit in prometheus prometheus-node-exporter; do
            case " ${need[*]} " in
                *" $unit "*) systemctl disable --now "$unit" || true ;;
            esac
        done
    fi
fi
if [ "$need_incus" = 1 ]; then
    # incus-base and incus-client are enough for containers (the incus
    # metapackage pulls QEMU for VMs).
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends "${incus_suite[@]}" incus-base incus-client
fi

# What this script started, it stops on exit (whatever fails).
lxd_was_running=1
ovs_was_running=1
peer_was_running=1
incus_was_running=1
incus_peer_was_running=1
stop_daemons() {
    if [ "$incus_peer_was_running" = 0 ]; then
        step "Stopping the peer Incus daemon this script started"
        "$repo/tools/incus-peer-up.sh" --stop || true
    fi
    if [ "$incus_was_running" = 0 ]; then
        step "Stopping the Incus daemon this script started"
        "$repo/tools/incus-up.sh" --stop || true
    fi
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

step "LXD daemon"
export LXD_DIR=${LXD_DIR:-/var/lib/lxd}
lxc info >/dev/null 2>&1 || lxd_was_running=0
"$repo/tools/lxd-up.sh"

step "Open vSwitch (userspace datapath)"
ovs-vsctl --timeout=5 show >/dev/null 2>&1 || ovs_was_running=0
"$repo/tools/ovs-up.sh"
# The networking tests fail (not skip) when OVS is missing.
export NOVA_LXD_ACCEL_REQUIRE_OVS=1

step "Peer LXD daemon (migration tests)"
# A second daemon (LXD_DIR=/var/lib/lxd-peer, https://127.0.0.1:8444) that
# trusts the main one, which it makes listen on https://127.0.0.1:8443.
# The migration tests fail (not skip) without it.
LXD_DIR=${LXD_PEER_DIR:-/var/lib/lxd-peer} lxc info >/dev/null 2>&1 ||
    peer_was_running=0
"$repo/tools/lxd-peer-up.sh"

if [ "$with_incus" = 1 ]; then
    step "Incus daemon and its peer (migration tests)"
    export INCUS_DIR=${INCUS_DIR:-/var/lib/incus}
    incus info >/dev/null 2>&1 || incus_was_running=0
    INCUS_DIR=${INCUS_PEER_DIR:-/var/lib/incus-peer} incus info \
        >/dev/null 2>&1 || incus_peer_was_running=0
    "$repo/tools/incus-up.sh"
    "$repo/tools/incus-peer-up.sh"
fi

step "Tiny test image"
export NOVA_LXD_ACCEL_TEST_IMAGE=$state/tiny.tar.gz
"$repo/tools/build-tiny-image.sh" "$NOVA_LXD_ACCEL_TEST_IMAGE"

step "tox"
if [ ! -x "$state/tox-venv/bin/tox" ]; then
    python3 -m venv "$state/tox-venv"
    "$state/tox-venv/bin/pip" install -q -c constraints.txt tox
fi

step "tox -e $envs"
parallel=${TOX_PARALLEL:-2}
case "$envs" in
    *,*) if [ "$parallel" -gt 1 ]; then
             # Each environment's output is printed when it ends.
             "$state/tox-venv/bin/tox" -p "$parallel" --parallel-no-spinner \
                 -e "$envs"
         else
             "$state/tox-venv/bin/tox" -e "$envs"
         fi;;
    *) "$state/tox-venv/bin/tox" -e "$envs";;
esac

if [ "${SKIP_SANDBOX:-0}" != 1 ] && [ -x "$repo/tools/sandbox-e2e.sh" ]; then
    step "Sandbox end to end"
    SANDBOX_E2E_KEEP=1 "$repo/tools/sandbox-e2e.sh" ||
        { "$repo/tools/sandbox.sh" down; exit 1; }
    # A real distribution: Debian 12 with cloud-init, built from the
    # Debian mirror (mmdebstrap, a few minutes), SSH in with a key pair.
    step "Sandbox: Debian cloud-init image, SSH through a floating IP"
    SANDBOX_E2E_KEEP=1 "$repo/tools/sandbox-e2e.sh" --debian ||
        { "$repo/tools/sandbox.sh" down; exit 1; }
    # Tempest's compute and image smoke tests against the same cloud, with
    # SSH validation on the Debian image the step before built (the
    # full compute set is run by hand: tools/sandbox-tempest.sh --subset
    # compute, see doc/source/reference/conformance.rst)
    step "Tempest (smoke subset) against the sandbox"
    tempest_rc=0
    "$repo/tools/sandbox-tempest.sh" --subset ci || tempest_rc=$?
    [ "$tempest_rc" = 0 ] ||
        { "$repo/tools/sandbox.sh" down; echo "tempest failed" >&2; exit 1; }
    # A second compute host on the peer daemon: tempest's cold-migration
    # and multi-node tests (servers on both hosts, SSH validation), then
    # back to one host for the rest.
    step "Sandbox on two compute hosts: tempest's multi-node tests"
    multinode_rc=0
    { "$repo/tools/sandbox.sh" up --hosts 2 &&
        "$repo/tools/sandbox-tempest.sh" --subset multinode &&
        "$repo/tools/sandbox.sh" up --hosts 1; } || multinode_rc=$?
    [ "$multinode_rc" = 0 ] || { "$repo/tools/sandbox.sh" down
        echo "the two-host sandbox failed" >&2; exit 1; }
    # Its numbers: this driver next to Nova's fake driver and raw LXD.
    step "Sandbox bench (3 servers)"
    "$repo/tools/sandbox.sh" bench 3 ||
        { "$repo/tools/sandbox.sh" down; echo "bench failed" >&2; exit 1; }
    # Density, bounded: 50 servers in waves of 25 on each driver, with
    # where a boot's time goes (the 500-server run is by hand:
    # doc/source/admin/scale.rst).
    step "Sandbox density bench (50 servers)"
    "$repo/tools/sandbox.sh" bench --density 50 || {
        "$repo/tools/sandbox.sh" down; echo "density bench failed" >&2
        exit 1; }
    # The same cloud on a SIMULATED GPU and InfiniBand host (the recorded
    # host of tools/sandbox/hardware/h100-mig-a100-ib): MIG and VF boots.
    step "Sandbox on a simulated GPU host"
    SANDBOX_E2E_KEEP=1 "$repo/tools/sandbox-e2e.sh" --hardware \
        h100-mig-a100-ib || { "$repo/tools/sandbox.sh" down; exit 1; }
    # A shared GPU in MPS quota mode (the simulated H200): its limits reach
    # an SSH login, systemd's services and cron in the Debian image.
    step "Sandbox: MPS limits in every process of a shared-GPU server"
    SANDBOX_E2E_KEEP=1 "$repo/tools/sandbox-e2e.sh" --mps ||
        { "$repo/tools/sandbox.sh" down; exit 1; }
    # Horizon on the simulated MIG host, and a user's launch of a MIG flavor in
    # headless Chromium (screenshots under the sandbox's data/horizon/).
    step "Horizon in a real browser against the sandbox"
    horizon_rc=0
    { "$repo/tools/sandbox.sh" up --with-horizon \
        --hardware h100-mig-a100-ib &&
        "$repo/tools/sandbox.sh" horizon-test; } || horizon_rc=$?
    "$repo/tools/sandbox.sh" down >/dev/null
    [ "$horizon_rc" = 0 ] || { echo "Horizon test failed" >&2; exit 1; }
fi
step "All tests passed"
