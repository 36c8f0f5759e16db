#!/bin/bash
# Set up everything and run the tests of nova-lxd-accel: the gate.
#
# On a fresh Debian 12 machine (root; PID 1 need not be systemd), in timed
# stages (budgets: .ci/budgets; the table and a CI-TIMINGS line are printed
# at the end, also on failure; each stage is appended to
# .ci/state/timings.tsv with what it found built or built itself):
#
#  apt         Debian packages in one round: LXD, busybox, shellcheck, Open
#              vSwitch, btrfs-progs, Prometheus, what the sandbox runs
#              (MariaDB, RabbitMQ, Neutron's agents' tools, mmdebstrap,
#              Chromium), and Incus 6.0 LTS from bookworm-backports
#  tox-venv    tox with tox-uv (pinned in constraints.txt): each tox
#              environment stays its own venv, built by uv
#  fast        pep8, unit (py3), genconfig, release notes, docs: the run
#              stops here, within minutes, when one fails
#  daemons     LXD and Incus (dir pool, no managed network, each with its
#              own subordinate uid range), a peer of each for the migration
#              tests, Open vSwitch (userspace datapath), the tiny image
#  suites      the functional and integration suites against LXD and
#              Incus, the storage-sensitive ones on btrfs, the DevStack
#              harness, the federation tools (real cASO,
#              cloud-info-provider, Prometheus), the Horizon views: two
#              at a time, never two functional suites at once
#  sandbox-*   the sandbox end to end, SSH into its Debian cloud-init
#              image, tempest's smoke tests, the simulated GPU host with
#              Horizon in a real browser, a shared GPU's MPS limits over
#              SSH, a smoke run of both benches, tempest's multi-node tests
#              on two compute hosts
#
# What the default run leaves out, and which test still proves what it
# proved: doc/source/contributor/testing.rst.
#
#   tools/run-tests.sh                 # the gate (what .ci/run runs)
#   tools/run-tests.sh --full          # also every storage cell on both
#                                      # daemons, the benches, the long
#                                      # ledger model (budget warns only)
#   tools/run-tests.sh -e py3,pep8     # only these tox environments
#   SKIP_SANDBOX=1 tools/run-tests.sh  # without the sandbox stages
#   SKIP_INCUS=1 tools/run-tests.sh    # without Incus (and its -incus envs)
#   TOX_PARALLEL=1 tools/run-tests.sh  # one tox environment at a time
#
# Under CI=true a run that passes 70 minutes fails (tools/ci_timings.py).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
state=$repo/.ci/state
mkdir -p "$state"

# The gate's tox environments, in two phases. The suites run in two lanes
# that tox.ini's "depends" keeps in order: the functional suites (each a
# whole in-process cloud: never two at once) and the integration suites,
# each beside the other (measured: about 16 minutes each).
fast_envs=pep8,py3,genconfig,releasenotes,docs
suite_envs=functional,integration-incus,integration,functional-incus,integration-btrfs,integration-incus-btrfs,functional-btrfs,federation,devstack,dashboard
# What only --full adds.
full_envs=functional-incus-all,functional-incus-btrfs,ledger-model

mode=gate
if [ "${1:-}" = "--full" ]; then
    mode=full
elif [ "${1:-}" = "-e" ]; then
    mode=envs
    only_envs=${2:?usage: run-tests.sh [--full | -e ENV[,ENV...]]}
fi
if [ "${SKIP_INCUS:-0}" = 1 ]; then
    suite_envs=functional,integration,integration-btrfs,functional-btrfs,federation,devstack,dashboard
    full_envs=ledger-model
fi
# Incus is needed by the -incus environments (and the sandbox's checks of
# both daemons' flavors come from the suites, not the sandbox).
with_incus=0
case ",$fast_envs,$suite_envs,$full_envs,${only_envs:-}," in
    *-incus,*|*-incus-*) with_incus=1;;
esac
if [ "$mode" = envs ]; then
    case ",$only_envs," in *-incus,*|*-incus-*) ;; *) with_incus=0;; esac
fi

step() {
    printf '\n=== %s (%s)\n' "$*" "$(date +%T)"
}

# --- the clock ---------------------------------------------------------------

timings=$state/timings.tsv
budgets=$repo/.ci/budgets
clock="python3 $repo/tools/ci_timings.py"
run_id=$(date +%Y%m%dT%H%M%S)-$$
run_start=$(date +%s.%N)
# Stestr repositories written after this mark are this run's (a warm .tox
# keeps older ones).
run_mark=$state/run-start
touch "$run_mark"
current_stage=
stage_start=
stage_facts=()

seconds_since() {
    awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'
}

# stage NAME COMMAND...: COMMAND as the timed stage NAME. A failing
# COMMAND ends the run (set -e); the exit trap records the stage failed.
stage() {
    current_stage=$1
    shift
    stage_start=$(date +%s.%N)
    stage_facts=()
    step "$current_stage: $*"
    "$@"
    $clock record "$timings" "$run_id" "$current_stage" \
        "$(seconds_since "$stage_start")" ok "${stage_facts[@]}"
    current_stage=
}

# fact TEXT: what the running stage found (warm) or built (cold).
fact() {
    stage_facts+=("$*")
}

# built_or_reused WHAT PATH: a fact, from whether PATH exists yet.
built_or_reused() {
    if [ -e "$2" ]; then fact "$1 reused"; else fact "$1 built"; fi
}

# --- the stages --------------------------------------------------------------

# Every Debian package of the run, in one apt round (Incus from
# bookworm-backports on Debian 12, in the same round's second install).
debian_packages() {
    local pkg need=() incus_need=() incus_suite=()
    for pkg in lxd lxd-client busybox-static shellcheck openvswitch-switch \
        zstd xz-utils bzip2 squashfs-tools btrfs-progs prometheus \
        prometheus-node-exporter
    do
        dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
    done
    if [ "${SKIP_SANDBOX:-0}" != 1 ] && [ "$mode" != envs ]; then
        # what tools/sandbox.sh would install itself, one package at a time
        for pkg in $(python3 -m tools.sandbox.install packages lxd) \
            mmdebstrap chromium chromium-driver
        do
            dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
        done
    fi
    if [ "$with_incus" = 1 ] &&
        ! dpkg -s incus-base incus-client >/dev/null 2>&1
    then
        incus_need=(incus-base incus-client)
        # Debian 12: Incus 6.0 LTS from bookworm-backports; Debian 13: main.
        if grep -qx 'VERSION_CODENAME=bookworm' /etc/os-release; then
            "$repo/tools/backports.sh"
            incus_suite=(-t bookworm-backports)
        fi
    fi
    if [ "${#need[@]}" = 0 ] && [ "${#incus_need[@]}" = 0 ]; then
        fact "all packages present"
        return 0
    fi
    fact "installed ${#need[@]} + ${#incus_need[@]} (Incus) packages"
    # The packages' own services stay stopped (the tests and the sandbox
    # start their own, on loopback).
    local policy=/usr/sbin/policy-rc.d added=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        added=1
    fi
    apt-get update -q
    if [ "${#need[@]}" -gt 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
            --no-install-recommends "${need[@]}"
    fi
    if [ "${#incus_need[@]}" -gt 0 ]; then
        # incus-base and incus-client are enough for containers (the incus
        # metapackage pulls QEMU for VMs).
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
            --no-install-recommends "${incus_suite[@]}" "${incus_need[@]}"
    fi
    [ "$added" = 0 ] || rm -f "$policy"
    # tests/federation/test_energy_chain.py starts its own prometheus and
    # node exporter on free loopback ports: where systemd runs, the
    # services the packages enabled are stopped and left disabled.
    if [ -d /run/systemd/system ]; then
        systemctl disable --now prometheus prometheus-node-exporter ||
            true
    fi
}

tox=$state/tox-venv/bin/tox
tox_venv() {
    built_or_reused "tox venv" "$tox"
    if [ ! -x "$tox" ]; then
        python3 -m venv "$state/tox-venv"
        "$state/tox-venv/bin/pip" install -q -c constraints.txt tox tox-uv
    fi
}

# tox_phase ENVS: the tox environments ENVS, $TOX_PARALLEL at a time; each
# one's time goes to the timings as a part of the running stage.
tox_phase() {
    local envs=$1 json=$state/tox-$current_stage.json rc=0 env fresh=()
    for env in ${envs//,/ }; do
        [ -d "$repo/.tox/$env" ] || fresh+=("$env")
    done
    fact "new venvs: ${fresh[*]:-none}"
    rm -f "$json"
    local parallel=(-p "${TOX_PARALLEL:-2}" --parallel-no-spinner)
    case "$envs" in *,*) ;; *) parallel=();; esac
    [ "${TOX_PARALLEL:-2}" -gt 1 ] || parallel=()
    "$tox" "${parallel[@]}" -e "$envs" --result-json "$json" || rc=$?
    $clock tox "$timings" "$run_id" "$current_stage" "$json"
    return "$rc"
}

# What this script started, it stops on exit (whatever fails).
lxd_was_running=1
ovs_was_running=1
peer_was_running=1
incus_was_running=1
incus_peer_was_running=1
sandbox_started=0
stop_daemons() {
    if [ "$sandbox_started" = 1 ]; then
        step "Stopping the sandbox"
        "$repo/tools/sandbox.sh" down >/dev/null || true
    fi
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

daemons() {
    export LXD_DIR=${LXD_DIR:-/var/lib/lxd}
    lxc info >/dev/null 2>&1 || lxd_was_running=0
    "$repo/tools/lxd-up.sh"
    ovs-vsctl --timeout=5 show >/dev/null 2>&1 || ovs_was_running=0
    "$repo/tools/ovs-up.sh"
    # A second daemon (LXD_DIR=/var/lib/lxd-peer, https://127.0.0.1:8444)
    # that trusts the main one, which it makes listen on
    # https://127.0.0.1:8443. The migration tests fail (not skip) without.
    LXD_DIR=${LXD_PEER_DIR:-/var/lib/lxd-peer} lxc info >/dev/null 2>&1 ||
        peer_was_running=0
    "$repo/tools/lxd-peer-up.sh"
    if [ "$with_incus" = 1 ]; then
        export INCUS_DIR=${INCUS_DIR:-/var/lib/incus}
        incus info >/dev/null 2>&1 || incus_was_running=0
        INCUS_DIR=${INCUS_PEER_DIR:-/var/lib/incus-peer} incus info \
            >/dev/null 2>&1 || incus_peer_was_running=0
        "$repo/tools/incus-up.sh"
        "$repo/tools/incus-peer-up.sh"
    fi
    fact "daemons: lxd $((1 - lxd_was_running)) peer $((1 - peer_was_running))" \
        "incus $((1 - incus_was_running)) started"
    built_or_reused "tiny image" "$NOVA_LXD_ACCEL_TEST_IMAGE"
    "$repo/tools/build-tiny-image.sh" "$NOVA_LXD_ACCEL_TEST_IMAGE"
}

sandbox_dir=${SANDBOX_DIR:-/var/tmp/nova-lxd-accel-sandbox}
sandbox=$repo/tools/sandbox.sh
e2e=$repo/tools/sandbox-e2e.sh

sandbox_e2e() {
    built_or_reused "sandbox venv" "$sandbox_dir/venv/.sandbox-deps"
    sandbox_started=1
    SANDBOX_E2E_KEEP=1 "$e2e" "$@"
}

# The Debian image is built beside the suites (mmdebstrap mostly waits on
# the mirror and the disk), so that the sandbox stages do not wait for it.
debian_prebuild_pid=
debian_prebuild_log=$state/debian-image.log
prebuild_debian_image() {
    [ "${SKIP_SANDBOX:-0}" != 1 ] || return 0
    # its own process group, so that an early exit stops mmdebstrap too
    # shellcheck disable=SC2016
    setsid bash -c 'start=$(date +%s)
        "$1" image debian --build-only >"$2" 2>&1 &&
        echo "built in $(($(date +%s) - start))s" >>"$2"' \
        prebuild "$sandbox" "$debian_prebuild_log" &
    debian_prebuild_pid=$!
}

# A real distribution: Debian 12 with cloud-init, built from the Debian
# mirror (mmdebstrap), SSH in with a key pair.
sandbox_debian() {
    if [ -n "$debian_prebuild_pid" ]; then
        if ! wait "$debian_prebuild_pid"; then
            debian_prebuild_pid=
            tail -n 20 "$debian_prebuild_log" >&2
            echo "building the Debian image failed" >&2
            return 1
        fi
        debian_prebuild_pid=
        fact "Debian image beside the suites: $(tail -n 1 "$debian_prebuild_log")"
    else
        built_or_reused "Debian image" \
            "$sandbox_dir/data/images/debian-12.tar.gz"
    fi
    # the sandbox-e2e stage left it up on this host
    SANDBOX_E2E_KEEP=1 SANDBOX_E2E_UP=0 "$e2e" --debian
}

# Tempest's compute and image smoke tests, with SSH validation on the
# Debian image (the full compute set is run by hand:
# tools/sandbox-tempest.sh --subset compute, see
# doc/source/reference/conformance.rst).
tempest_smoke() {
    built_or_reused "tempest venv" "$sandbox_dir/tempest-venv/bin/tempest"
    "$repo/tools/sandbox-tempest.sh" --subset ci
}

# The SIMULATED GPU and InfiniBand host (tools/sandbox/hardware/
# h100-mig-a100-ib) with Horizon: MIG and VF boots, then a user's launch
# of a MIG flavor in headless Chromium (screenshots under data/horizon/).
sandbox_gpu_horizon() {
    built_or_reused "Horizon venv" "$sandbox_dir/horizon-venv/bin/python"
    "$sandbox" up --with-horizon --hardware h100-mig-a100-ib
    SANDBOX_E2E_KEEP=1 SANDBOX_E2E_UP=0 "$e2e" --hardware h100-mig-a100-ib
    "$sandbox" horizon-test
}

# A shared GPU in MPS quota mode (the simulated H200): its limits reach an
# SSH login, systemd's services and cron in the Debian image.
sandbox_mps() {
    SANDBOX_E2E_KEEP=1 "$e2e" --mps
}

# Both benches run, briefly, on whatever host is up: they must work; their
# figures are printed and asserted on nowhere (the measured runs are
# --full's and doc/source/admin/scale.rst's).
bench_smoke() {
    "$sandbox" bench 1
    "$sandbox" bench --density 2 --wave 2 --idle 1
}

# A second compute host on the peer daemon: tempest's cold-migration and
# multi-node tests (servers on both hosts, SSH validation). Last, so no
# host has to be taken away again (--full does: up --hosts 1 waits for
# nova to count the second host down).
sandbox_multinode() {
    "$sandbox" up --hosts 2 --hardware none --without-horizon
    "$repo/tools/sandbox-tempest.sh" --subset multinode
    if [ "$mode" = full ]; then
        "$sandbox" up --hosts 1
    fi
}

sandbox_down() {
    sandbox_started=0
    "$sandbox" down
}

# The full run's measured benches (not a test: nothing is asserted).
# bench_scheduling needs no sandbox, only Placement in the py3 venv (about
# a minute in its default mode on the 2-core machine).
benches() {
    "$sandbox" bench 3
    "$sandbox" bench --density 50
    "$repo/.tox/py3/bin/python" "$repo/benchmarks/bench_scheduling.py"
}

# --- exit: stop what was started, print the table ----------------------------

# failed_tests: each test this run's tox environments failed, with the end
# of its traceback; printed last, as a CI report may keep only the tail.
failed_tests() {
    local failing env_dir env
    for failing in "$repo"/.tox/*/.stestr/failing; do
        if [ ! -s "$failing" ] || [ ! "$failing" -nt "$run_mark" ]; then
            continue
        fi
        env_dir=${failing%/.stestr/failing}
        env=${env_dir##*/}
        step "Failed in $env"
        "$env_dir/bin/stestr" -u "$env_dir" failing --subunit 2>/dev/null |
            "$env_dir/bin/python" "$repo/tools/ci_failures.py" 12 |
            head -n 80 || true
    done
}

finish() {
    local rc=$? report_rc=0
    trap - EXIT
    if [ -n "$debian_prebuild_pid" ]; then
        kill -- "-$debian_prebuild_pid" 2>/dev/null || true
    fi
    if [ -n "$current_stage" ]; then
        $clock record "$timings" "$run_id" "$current_stage" \
            "$(seconds_since "$stage_start")" "failed($rc)" \
            "${stage_facts[@]}"
    fi
    stop_daemons
    local report_args=()
    [ "$mode" = full ] && report_args=(--full)
    $clock report "$timings" "$run_id" "$budgets" \
        "$(seconds_since "$run_start")" "${report_args[@]}" ||
        report_rc=$?
    if [ "$rc" = 0 ] && [ "$report_rc" != 0 ]; then
        rc=$report_rc
    fi
    [ "$rc" = 0 ] || failed_tests
    if [ "$rc" = 0 ]; then
        step "All tests passed"
    else
        step "FAILED (exit $rc)${current_stage:+ in stage $current_stage}"
    fi
    exit "$rc"
}
trap finish EXIT
# A run stopped from outside fails (finish would otherwise see the status
# of the last command that ended).
trap 'exit 143' TERM
trap 'exit 130' INT

export NOVA_LXD_ACCEL_TEST_IMAGE=$state/tiny.tar.gz
# The networking tests fail (not skip) when OVS is missing.
export NOVA_LXD_ACCEL_REQUIRE_OVS=1

stage apt debian_packages
stage tox-venv tox_venv
# tox-uv's uv also builds the sandbox's, Horizon's and tempest's venvs,
# compiled at install (tools/sandbox/install.py: where
# PYTHONDONTWRITEBYTECODE is set, as on this kind of machine, each CLI
# call and service start would compile its modules again). The tox venvs
# are not: their test runners are long-lived processes, and compiling
# every module at install cost the suites about 3 CPU minutes for no
# faster test (measured).
export SANDBOX_UV=$state/tox-venv/bin/uv
if [ "$mode" = envs ]; then
    stage daemons daemons
    stage envs tox_phase "$only_envs"
    exit 0
fi
stage fast tox_phase "$fast_envs"
stage daemons daemons
prebuild_debian_image
stage suites tox_phase "$suite_envs"
if [ "$mode" = full ]; then
    stage full-suites tox_phase "$full_envs"
fi
if [ "${SKIP_SANDBOX:-0}" != 1 ]; then
    stage sandbox-e2e sandbox_e2e
    stage sandbox-debian sandbox_debian
    stage tempest-smoke tempest_smoke
    stage sandbox-gpu-horizon sandbox_gpu_horizon
    stage sandbox-mps sandbox_mps
    if [ "$mode" = full ]; then
        stage benches benches
    else
        stage bench-smoke bench_smoke
    fi
    stage sandbox-multinode sandbox_multinode
    stage sandbox-down sandbox_down
fi
