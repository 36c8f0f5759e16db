#!/bin/bash
# One command, a real OpenStack on this machine.
#
# Usage: tools/sandbox.sh up [--backend lxd|incus]|down|status|clean
#
#   up      install what is missing (Debian: lxd, rabbitmq-server,
#           mariadb-server; PyPI: one venv pinned by constraints.txt), start
#           MariaDB, RabbitMQ, Keystone, Placement, Glance, Neutron, Nova
#           (api, conductor, scheduler) and a nova-compute running this
#           project's driver against the local LXD, all on 127.0.0.1;
#           register users, services, endpoints, an LXD image and flavors;
#           write openrc and clouds.yaml. Safe to re-run.
#   down    stop every process "up" started, by pid.
#   status  show what runs, with pid, port, memory and log file.
#   clean   "down", then remove all state except the venv.
#
# Environment:
#   SANDBOX_DIR             state, logs, pids, venv
#                           (default /var/tmp/nova-lxd-accel-sandbox)
#   SANDBOX_COMPUTE_DRIVER  nova compute_driver (default lxd_accel.LXDDriver)
#   SANDBOX_PORT_BASE       first of the 100 ports used (default 26100;
#                           below the kernel's ephemeral port range, where
#                           any outgoing connection may take one)
#   SANDBOX_PYTHON          interpreter for the venv (default python3)
#   SANDBOX_CONSTRAINTS     pip constraints (default <repo>/constraints.txt)
#   SANDBOX_APT=0           never run apt-get (fail if a package is missing)
#   SANDBOX_BACKEND         lxd or incus (also: up --backend X); default:
#                           the daemon already running, else the
#                           distribution's own (Debian 12: lxd, 13: incus)
#   LXD_DIR                 LXD daemon directory (default /var/lib/lxd)
#   INCUS_DIR               Incus daemon directory (default /var/lib/incus)
#
# This script runs the steps in order, timed, each one's output in
# log/sandbox.log; what the steps know lives in the Python modules of
# tools/sandbox/ (README.md there: "How it is built"): layout.py (paths,
# ports, services), credentials.py, configs.py, services.py, processes.py,
# hardware.py, install.py, databases.py, provision.py.
set -Eeuo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
HELPERS=$SCRIPT_DIR/sandbox

SANDBOX_COMPUTE_DRIVER=${SANDBOX_COMPUTE_DRIVER:-lxd_accel.LXDDriver}
SANDBOX_PYTHON=${SANDBOX_PYTHON:-python3}
SANDBOX_CONSTRAINTS=${SANDBOX_CONSTRAINTS:-$REPO_DIR/constraints.txt}
SANDBOX_APT=${SANDBOX_APT:-1}
export SANDBOX_PYTHON SANDBOX_CONSTRAINTS SANDBOX_APT
LXD_DIR=${LXD_DIR:-/var/lib/lxd}
INCUS_DIR=${INCUS_DIR:-/var/lib/incus}
export LXD_DIR INCUS_DIR
SANDBOX_BACKEND=${SANDBOX_BACKEND:-}
DAEMON_DIR=$LXD_DIR

# The state directory and its parts, the ports, the networks', image's and
# flavors' names: all defined once, in layout.py (any Python 3).
LAYOUT=$(python3 "$HELPERS/layout.py" shell) || {
    echo "sandbox: cannot read the sandbox layout (python3" \
        "$HELPERS/layout.py shell failed; is python3 installed?)" >&2
    exit 1
}
eval "$LAYOUT"
# The helpers (provision.py, the benchmarks) find the same layout.
export SANDBOX_DIR SANDBOX_PORT_BASE

# Horizon (up --with-horizon): its own venv, kept beside the cloud's.
HORIZON_VERSION=27.0.0
SANDBOX_HORIZON=

# Simulated hardware (up --hardware NAME): the recorded host's files
# ($HARDWARE), and the LXD proxy that serves them in front of the real
# daemon.
SANDBOX_HARDWARE=

# Set by pip_install when it installed a new build of this project.
PROJECT_CHANGED=0

# --- output -----------------------------------------------------------------

exec 3>&1 4>&2
UP_LOG=$LOGS/sandbox.log
CURRENT_STEP=
STEP_HINT=
T0=$(date +%s%N)

elapsed() {
    local now ms
    now=$(date +%s%N)
    ms=$(( (now - ${1:-$T0}) / 1000000 ))
    printf '%d.%d' $((ms / 1000)) $(( (ms % 1000) / 100 ))
}

say() {
    printf '%s\n' "$*" >&3
}

die() {
    printf 'sandbox: %s\n' "$*" >&4
    exit 1
}

# The daemon nova-compute uses: the one named (up --backend,
# SANDBOX_BACKEND), else the one this sandbox was brought up with, else the
# one that already runs (LXD first), else the distribution's own.
choose_backend() {
    if [ -z "$SANDBOX_BACKEND" ] && [ -s "$SANDBOX_DIR/backend" ]; then
        SANDBOX_BACKEND=$(cat "$SANDBOX_DIR/backend")
    fi
    if [ -z "$SANDBOX_BACKEND" ]; then
        if [ -S "$LXD_DIR/unix.socket" ] && lxc info >/dev/null 2>&1; then
            SANDBOX_BACKEND=lxd
        elif [ -S "$INCUS_DIR/unix.socket" ] &&
            incus info >/dev/null 2>&1; then
            SANDBOX_BACKEND=incus
        elif [ "$(cut -d. -f1 /etc/debian_version 2>/dev/null)" -ge 13 ] \
            2>/dev/null; then
            SANDBOX_BACKEND=incus
        else
            SANDBOX_BACKEND=lxd
        fi
    fi
    case $SANDBOX_BACKEND in
        lxd) DAEMON_DIR=$LXD_DIR ;;
        incus) DAEMON_DIR=$INCUS_DIR ;;
        *) die "the backend is lxd or incus, not '$SANDBOX_BACKEND'" ;;
    esac
}

daemon_cli_name() {
    if [ "$SANDBOX_BACKEND" = incus ]; then echo incus; else echo lxc; fi
}

# The daemon's own CLI, pointed at the sandbox's daemon.
daemon_cli() {
    if [ "$SANDBOX_BACKEND" = incus ]; then
        INCUS_DIR=$INCUS_DIR incus "$@"
    else
        LXD_DIR=$LXD_DIR lxc "$@"
    fi
}

on_error() {
    local rc=$1
    trap - ERR
    if [ -n "$CURRENT_STEP" ]; then
        printf 'FAILED\n' >&3
        printf '\nsandbox: step "%s" failed (exit %s) after %ss.\n' \
            "$CURRENT_STEP" "$rc" "$(elapsed)" >&4
        if [ -n "$STEP_HINT" ] && [ -f "$STEP_HINT" ]; then
            printf 'sandbox: its log: %s (last lines below); see also %s\n' \
                "$STEP_HINT" "$UP_LOG" >&4
            tail -n 20 "$STEP_HINT" | sed 's/^/    | /' >&4
        else
            printf 'sandbox: its log: %s (last lines below)\n' \
                "$UP_LOG" >&4
            tail -n 20 "$UP_LOG" 2>/dev/null | sed 's/^/    | /' >&4
        fi
        printf 'sandbox: fix the cause and re-run "%s up" (it resumes),' \
            "$0" >&4
        printf ' or "%s down" to stop what runs.\n' "$0" >&4
    fi
    exit "$rc"
}
trap 'on_error $?' ERR

# step "what" function args...: run one step, its output in the log file,
# with its duration (and the time since the start) on the terminal.
step() {
    local title=$1 start
    shift
    CURRENT_STEP=$title
    STEP_HINT=
    start=$(date +%s%N)
    printf '  [%6ss] %-46s ' "$(elapsed)" "$title" >&3
    printf '\n=== %s: %s\n' "$(date -u +%FT%TZ)" "$title" >>"$UP_LOG"
    "$@" >>"$UP_LOG" 2>&1
    printf 'ok %5ss\n' "$(elapsed "$start")" >&3
    CURRENT_STEP=
}

# --- processes ----------------------------------------------------------------

# The processes (start, pid files, restarts, waits, stop, status):
# processes.py.
processes() {
    python3 "$HELPERS/processes.py" "$@"
}

# pid_of NAME: the pid of a running service (the pid file holds the pid
# and its start time: a recycled pid is never taken for the service).
pid_of() {
    processes pid "$1"
}

is_running() {
    pid_of "$1" >/dev/null
}

# start_daemon NAME command...: start NAME in its own session, output to
# $LOGS/NAME.log, pid in $RUN/NAME.pid; nothing if it already runs; fails
# when another socket holds one of its ports.
start_daemon() {
    local name=$1
    shift
    STEP_HINT=$LOGS/$name.log
    if ! processes start "$name" -- "$@"; then
        STEP_HINT=
        return 1
    fi
}

# start_service NAME: start_daemon with the service's command
# (services.py); READY_S[NAME]: how long its ports may take to open.
declare -A READY_S=()
start_service() {
    local name=$1 words=()
    mapfile -d '' words < <(python3 "$HELPERS/services.py" command \
        "$name" --daemon-socket "$DAEMON_DIR/unix.socket")
    if [ "${#words[@]}" -lt 2 ]; then
        echo "no command for $name (python3 $HELPERS/services.py failed)"
        return 1
    fi
    READY_S[$name]=${words[0]}
    start_daemon "$name" "${words[@]:1}"
}

# wait_service NAME: until each of its ports accepts connections; fails
# early if it exited.
wait_service() {
    STEP_HINT=$LOGS/$1.log
    processes wait-ports "$1" "${READY_S[$1]:-120}"
}

# stop_reconfigured: stop each running service whose configuration changed
# since it started (or that an older version of this script started); the
# steps after this one start them again.
stop_reconfigured() {
    processes restart-changed
}

# check_port_range: the sandbox's ports (SANDBOX_PORT_BASE and the next
# 99) must lie outside the kernel's ephemeral range: there any outgoing
# connection of any process may hold one of them at the moment a service
# starts, and that service then fails to bind ("Address already in use").
check_port_range() {
    python3 "$HELPERS/layout.py" check-ports >&4 || exit 1
}

# --- install ------------------------------------------------------------------

# The Debian packages that are missing, then the venv (install.py); apt
# waits for another apt's lock.
apt_install() {
    python3 -u "$HELPERS/install.py" debian "$SANDBOX_BACKEND"
}

pip_install() {
    local rc=0
    python3 -u "$HELPERS/install.py" venv || rc=$?
    if [ "$rc" = 3 ]; then
        PROJECT_CHANGED=1 # a new build of this project: see restart_changed
        rc=0
    fi
    return "$rc"
}

# secrets.env (0600): a random password for each name it lacks.
make_secrets() {
    python3 "$HELPERS/credentials.py" ensure
}

load_secrets() {
    # shellcheck disable=SC1091
    . "$SANDBOX_DIR/secrets.env"
}

# Every configuration file and openrc, clouds.yaml (configs.py): 0600
# in 0700 directories.
write_configs() {
    local socket=$DAEMON_DIR/unix.socket
    "$VENV/bin/python" "$HELPERS/configs.py" write \
        --daemon-socket "$socket" --compute-driver "$SANDBOX_COMPUTE_DRIVER"
    echo "configuration in $ETC (files 0600, directories 0700)"
}

# --- services -----------------------------------------------------------------

start_epmd() {
    start_service epmd
    wait_service epmd
}

start_rabbitmq() {
    mkdir -p "$DATA/rabbitmq"
    start_service rabbitmq
    wait_service rabbitmq
}

mysql_root() {
    mariadb --no-defaults --user=root --socket="$RUN/mysqld.sock" "$@"
}

start_mariadb() {
    if [ ! -d "$DATA/mysql/mysql" ]; then
        mkdir -p "$DATA/mysql"
        mariadb-install-db --no-defaults --datadir="$DATA/mysql" \
            --user=root --skip-test-db --auth-root-authentication-method=socket
    fi
    start_service mariadb
    wait_service mariadb
    python3 -u "$HELPERS/databases.py" grants
}

# Keystone's keys, then its bootstrap once per password and URL
# (databases.py).
keystone_bootstrap() {
    python3 -u "$HELPERS/databases.py" keystone
}

# Every schema at once, each once per installed packages; Glance's metadata
# definitions; Nova's cells (databases.py).
sync_databases() {
    "$VENV/bin/python" -u "$HELPERS/databases.py" sync
}

start_keystone() {
    start_service keystone
    wait_service keystone
}

start_apis() {
    local name
    # Start all four, then wait: their imports overlap on two cores.
    for name in placement glance neutron nova-api; do
        start_service "$name"
    done
    for name in placement glance neutron nova-api; do
        wait_service "$name"
    done
}

# wait_log NAME TEXT TIMEOUT: until TEXT appears in NAME's log after its
# last start.
wait_log() {
    processes wait-log "$@"
}

# restart_changed: a new build of this project is installed: restart the
# services that import it (the driver, the API's extra spec validators).
restart_changed() {
    [ "$PROJECT_CHANGED" = 1 ] || return 0
    echo "nova-lxd-accel was updated: restarting nova-compute and nova-api"
    processes stop 30 nova-compute nova-api
}

start_nova_services() {
    COMPUTE_SINCE=$(date -u +%FT%T)
    # One process runs both (see in_process.py).
    start_service nova-conductor
    if hardware_active; then
        start_hwproxy
    fi
    if is_running nova-compute; then
        return 0
    fi
    # nova-compute's first call to the conductor is lost (and retried 10 s
    # later) when the conductor does not listen yet.
    STEP_HINT=$LOGS/nova-conductor.log
    wait_log nova-conductor 'Starting conductor node' 120
    sleep 1
    start_service nova-compute
}

# --- networking (Neutron ML2/OVS agents) -------------------------------------------

ovs_ready() {
    # Open vSwitch with the userspace datapath, started by hand (no
    # systemd, no kernel module needed).
    (cd / && OVS_INSTALL=$SANDBOX_APT "$REPO_DIR/tools/ovs-up.sh")
    ovs-vsctl --may-exist add-br "$BR_EX" -- \
        set bridge "$BR_EX" datapath_type=netdev
    # "The outside" of the external network: a namespace of this sandbox,
    # wired into br-ex by a veth pair, with the external subnet's gateway
    # address. Nothing routes further.
    ip netns list | grep -qw "$OUTSIDE_NS" || ip netns add "$OUTSIDE_NS"
    if ! ip link show "$OUTSIDE_VETH" >/dev/null 2>&1; then
        ip link add "$OUTSIDE_VETH" type veth peer name eth0 \
            netns "$OUTSIDE_NS"
    fi
    ip link set "$OUTSIDE_VETH" up
    ovs-vsctl --may-exist add-port "$BR_EX" "$OUTSIDE_VETH"
    ip netns exec "$OUTSIDE_NS" ip link set lo up
    ip netns exec "$OUTSIDE_NS" ip link set eth0 up
    ip netns exec "$OUTSIDE_NS" ip addr replace "$OUTSIDE_IP/24" dev eth0
    echo "OVS ready; $BR_EX; namespace $OUTSIDE_NS at $OUTSIDE_IP"
}

start_network_agents() {
    local since
    since=$(date -u '+%F %T')
    start_service neutron-rpc
    STEP_HINT=$LOGS/neutron-rpc.log
    provision wait-rpc 120
    start_service neutron-ovs-agent
    # The DHCP and the L3 agent, in one process (see in_process.py).
    start_service neutron-dhcp-agent
    start_service neutron-metadata-agent
    STEP_HINT=$LOGS/neutron-ovs-agent.log
    provision wait-agents 180 "$since"
}

# Namespaces, bridges and ports of this sandbox's networking (clean).
remove_network_plumbing() {
    local ns
    # the dnsmasq and haproxy processes the agents started
    processes stop-helpers
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' |
        grep -E '^(qrouter|qdhcp|snat|fip)-|^'"$OUTSIDE_NS"'$' || true); do
        ip netns delete "$ns" 2>/dev/null || true
    done
    if command -v ovs-vsctl >/dev/null 2>&1; then
        ovs-vsctl --if-exists del-br br-int -- --if-exists del-br br-tun \
            -- --if-exists del-br "$BR_EX" 2>/dev/null || true
    fi
    ip link delete "$OUTSIDE_VETH" 2>/dev/null || true
}

# --- simulated hardware (up --hardware) ------------------------------------------

hardware_active() {
    [ -f "$HARDWARE/resources.json" ]
}

# The recorded host's answers, copied under $DATA, and an nvidia-smi that
# prints them (the driver runs it as [lxd_accelerators] nvidia_smi_path);
# see hardware.py.
prepare_hardware() {
    python3 "$HELPERS/hardware.py" prepare "$SANDBOX_HARDWARE"
}

start_hwproxy() {
    local i
    if ! is_running hwproxy; then
        rm -f "$HW_SOCKET"
    fi
    start_service hwproxy
    for ((i = 0; i < 80; i++)); do
        [ -S "$HW_SOCKET" ] && return 0
        is_running hwproxy || break
        sleep 0.25
    done
    echo "the LXD proxy did not start: see $LOGS/hwproxy.log"
    return 1
}

provision() {
    OS_CLIENT_CONFIG_FILE=$SANDBOX_DIR/clouds.yaml OS_CLOUD=sandbox \
        "$VENV/bin/python" "$HELPERS/provision.py" "$@"
}

wait_compute() {
    STEP_HINT=$LOGS/nova-compute.log
    local pid
    pid=$(pid_of nova-compute)
    provision wait-compute 180 "$pid" "$COMPUTE_SINCE"
    "$VENV/bin/nova-manage" --config-file "$ETC/nova/nova.conf" \
        cell_v2 discover_hosts --verbose
    provision wait-compute 60 "$pid" "$COMPUTE_SINCE" yes
}

lxd_ready() {
    if [[ $SANDBOX_COMPUTE_DRIVER != lxd_accel.* ]]; then
        echo "compute driver $SANDBOX_COMPUTE_DRIVER: LXD not needed"
        return 0
    fi
    if [ "$SANDBOX_BACKEND" = incus ]; then
        incus_ready
        return
    fi
    # A running daemon already set up (dir pool "default", root disk in
    # the default profile) is left alone: re-applying the preseed updates
    # the default profile of every instance, which fails while other
    # users' instances are busy.
    if command -v lxc >/dev/null && daemon_cli query \
        /1.0/storage-pools/default >/dev/null 2>&1 &&
        daemon_cli query /1.0/profiles/default 2>/dev/null |
        python3 -c 'import json, sys
root = json.load(sys.stdin).get("devices", {}).get("root", {})
sys.exit(not (root.get("type") == "disk" and root.get("pool") == "default"))'
    then
        echo "LXD runs under $LXD_DIR with pool default: left as it is"
        return 0
    fi
    local try
    for try in 1 2 3; do
        # From /: the LXD daemon it may start keeps that working
        # directory for good; LXD's rsync (snapshots, copies) fails once
        # it is deleted.
        if (cd / && LXD_INSTALL=$SANDBOX_APT "$REPO_DIR/tools/lxd-up.sh"); then
            return 0
        fi
        echo "tools/lxd-up.sh failed (try $try of 3)"
        sleep 2
    done
    echo "LXD is not ready: see the errors above and $LXD_DIR/lxd.log"
    return 1
}

incus_ready() {
    if daemon_cli query /1.0/storage-pools/default >/dev/null 2>&1; then
        echo "Incus runs under $INCUS_DIR with pool default: left as it is"
        return 0
    fi
    # From / for the same reason as LXD (see lxd_ready).
    (cd / && INCUS_INSTALL=$SANDBOX_APT "$REPO_DIR/tools/incus-up.sh") ||
        die "Incus is not ready: see the errors above and $INCUS_DIR/incus.log"
}

# cached_image NAME BUILD_SCRIPT: NAME in Glance, built by BUILD_SCRIPT
# into data/images/NAME.tar.gz once per version of the script (its
# recipe); a new recipe replaces the image in Glance, servers of the old
# one keep running.
cached_image() {
    local name=$1 build=$2 replace=
    local tarball=$DATA/images/$name.tar.gz recipe=$DATA/images/$name.recipe
    local want
    mkdir -p "$DATA/images"
    want=$(sha256sum "$build" | cut -d' ' -f1)
    if [ ! -s "$tarball" ] || [ "$(cat "$recipe" 2>/dev/null)" != "$want" ]
    then
        echo "building $name ($(basename "$build"))"
        "$build" "$tarball"
        echo "$want" >"$recipe"
        replace=replace
    else
        echo "$name: cached $tarball"
    fi
    provision image "$name" "$tarball" $replace
}

upload_image() {
    cached_image "$IMAGE_NAME" "$REPO_DIR/tools/build-tiny-image.sh"
}

# ensure_commands "COMMAND..." PACKAGE...: install the Debian PACKAGEs
# unless every COMMAND is on PATH (refused with SANDBOX_APT=0).
ensure_commands() {
    local commands=$1 command
    shift
    for command in $commands; do
        command -v "$command" >/dev/null && continue
        [ "$SANDBOX_APT" = 1 ] || die "install Debian's $*"
        apt_get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt_get install -y -q \
            --no-install-recommends "$@" >/dev/null
        return
    done
}

check_metadefs() {
    provision metadefs OS::Compute::LXD
}

make_flavors() {
    local inventory=$DATA/inventory.json lines=$DATA/accel-flavors.txt
    local gpu_flavors=$DATA/gpu-flavors.json
    local recipes=$REPO_DIR/devstack/files/accel-flavors.py
    rm -f "$inventory" "$lines"
    if "$VENV/bin/nova-lxd-accel" inventory --format json \
        --config-file "$ETC/nova/nova-compute.conf" \
        >"$inventory.tmp" 2>>"$UP_LOG"; then
        mv "$inventory.tmp" "$inventory"
    else
        echo "nova-lxd-accel inventory failed: no accelerator flavors"
        rm -f "$inventory.tmp"
    fi
    # The same flavor recipes as the DevStack plugin, named sandbox.*.
    if [ -f "$inventory" ] && [ -f "$recipes" ]; then
        "$VENV/bin/python" "$recipes" "$inventory" sandbox none >"$lines"
    fi
    # GPU flavors as an operator makes them: with the Accelerator:*
    # properties and descriptions of nova-lxd-accel flavors, sized for the
    # tiny image.
    rm -f "$gpu_flavors"
    if [ -f "$inventory" ] && "$VENV/bin/nova-lxd-accel" flavors \
        --format json --prefix sandbox --vcpus 1 --ram 256 --disk 1 \
        --config-file "$ETC/nova/nova-compute.conf" \
        >"$gpu_flavors.tmp" 2>>"$UP_LOG"; then
        mv "$gpu_flavors.tmp" "$gpu_flavors"
    else
        rm -f "$gpu_flavors.tmp"
    fi
    local simulated=
    if hardware_active; then
        simulated=$(cat "$HARDWARE/name")
    fi
    provision flavors "$PLAIN_FLAVOR" "$inventory" "$lines" \
        "$SECOND_FLAVOR" "$simulated" "$gpu_flavors"
}

# --- Horizon (up --with-horizon) -------------------------------------------------

# On once asked for (the choice is kept in $HORIZON_DATA/enabled).
horizon_enabled() {
    case $SANDBOX_HORIZON in
        1) return 0 ;;
        0) return 1 ;;
    esac
    [ -f "$HORIZON_DATA/enabled" ]
}

horizon_install() {
    local want have
    mkdir -p "$HORIZON_DATA"
    touch "$HORIZON_DATA/enabled"
    want=$(printf '%s\n' "$HORIZON_VERSION" "$(sha256sum \
        "$SANDBOX_CONSTRAINTS" | cut -d' ' -f1)")
    have=$(cat "$HORIZON_VENV/.sandbox-installed" 2>/dev/null || true)
    if [ "$want" = "$have" ]; then
        echo "Horizon $HORIZON_VERSION already installed"
        return 0
    fi
    [ -x "$HORIZON_VENV/bin/python" ] ||
        "$SANDBOX_PYTHON" -m venv "$HORIZON_VENV"
    "$HORIZON_VENV/bin/pip" install -q --upgrade pip
    # Its own venv: Horizon pins Django and its own libraries; the cloud's
    # venv stays as constraints.txt has it. selenium drives the browser
    # test (tools/sandbox-horizon-test.py).
    "$HORIZON_VENV/bin/pip" install -q -c "$SANDBOX_CONSTRAINTS" \
        "horizon==$HORIZON_VERSION" cheroot selenium
    printf '%s\n' "$want" >"$HORIZON_VENV/.sandbox-installed"
}

horizon_package_dir() {
    "$HORIZON_VENV/bin/python" -c 'import os, openstack_dashboard
print(os.path.dirname(openstack_dashboard.__file__))'
}

# local_settings.py where Horizon reads it (openstack_dashboard/local/, a
# link to the 0600 file configs.py writes in etc/), then collectstatic and
# the offline compression Horizon documents for DEBUG = False.
horizon_configure() {
    local settings=$ETC/horizon/local_settings.py package stamp
    # $settings: written by configs.py with the other configuration
    package=$(horizon_package_dir)
    ln -sf "$settings" "$package/local/local_settings.py"
    stamp=$(cat "$settings" "$HORIZON_VENV/.sandbox-installed" | sha256sum |
        cut -d' ' -f1)
    if [ "$(cat "$HORIZON_DATA/static.stamp" 2>/dev/null)" = "$stamp" ]; then
        echo "static files up to date"
        return 0
    fi
    DJANGO_SETTINGS_MODULE=openstack_dashboard.settings \
        "$HORIZON_VENV/bin/python" -m django collectstatic --noinput \
        --clear -v 0
    DJANGO_SETTINGS_MODULE=openstack_dashboard.settings \
        "$HORIZON_VENV/bin/python" -m django compress --force
    echo "$stamp" >"$HORIZON_DATA/static.stamp"
}

horizon_off() {
    rm -f "$HORIZON_DATA/enabled"
    processes stop 30 horizon
    rm -f "$RUN/horizon.pid"
}

start_horizon() {
    start_service horizon
    wait_service horizon
}

# horizon-test: the browser test (tools/sandbox-horizon-test.py) in
# headless Chromium against the running Horizon.
cmd_horizon_test() {
    if ! horizon_enabled || ! is_running horizon; then
        die "Horizon does not run here: tools/sandbox.sh up --with-horizon"
    fi
    ensure_commands "chromium chromedriver" chromium chromium-driver
    load_secrets
    # A GPU flavor when nova-compute sees a (simulated) GPU host: a MIG
    # slice if nova-lxd-accel flavors proposed one, else its first; the
    # small flavor on a host without GPUs.
    local flavor=$PLAIN_FLAVOR gpu_flavor
    gpu_flavor=$("$VENV/bin/python" -c 'import json, sys
try:
    proposals = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    proposals = []
mig = [p for p in proposals if any(
    k.startswith("resources:CUSTOM_MIG_") for k in p["extra_specs"])]
if mig or proposals:
    print((mig or proposals)[0]["name"])' "$DATA/gpu-flavors.json")
    [ -z "$gpu_flavor" ] || flavor=$gpu_flavor
    rm -rf "$HORIZON_DATA/screenshots"
    SANDBOX_DEMO_PASSWORD=$DEMO_PASSWORD \
        SANDBOX_ADMIN_PASSWORD=$ADMIN_PASSWORD \
        "$HORIZON_VENV/bin/python" "$REPO_DIR/tools/sandbox-horizon-test.py" \
        --url "http://127.0.0.1:$PORT_HORIZON" --flavor "$flavor" \
        --image "$IMAGE_NAME" --screenshots "$HORIZON_DATA/screenshots"
}

# --- image debian ---------------------------------------------------------------

DEBIAN_IMAGE_NAME=debian-12

# image debian: Debian 12 with cloud-init and openssh-server
# (tools/build-debian-image.sh, from the Debian mirror with mmdebstrap),
# built once per recipe and cached in data/images/, uploaded to Glance as
# debian-12. Needs a running sandbox.
cmd_image() {
    local kind=${1:-}
    [ "$kind" = debian ] || die "usage: $0 image debian"
    if ! is_running glance || [ ! -f "$SANDBOX_DIR/openrc" ]; then
        die "the sandbox does not run: tools/sandbox.sh up"
    fi
    ensure_commands mmdebstrap mmdebstrap
    cached_image "$DEBIAN_IMAGE_NAME" "$REPO_DIR/tools/build-debian-image.sh"
    say "image $DEBIAN_IMAGE_NAME in Glance: log in as 'debian' with your key pair"
}

# --- bench ----------------------------------------------------------------------

FAKE_IMAGE=$IMAGE_NAME-any-hypervisor

# A second nova-compute with Nova's own fake driver, for the bench only.
start_fake_compute() {
    # its configuration: configs.py, host $FAKE_HOST
    local fake_conf=$ETC/nova/nova-compute-fake.conf i
    start_daemon nova-compute-fake "$VENV/bin/nova-compute" \
        --config-file "$fake_conf" >>"$UP_LOG"
    for ((i = 0; i < 120; i++)); do
        "$VENV/bin/nova-manage" --config-file "$ETC/nova/nova.conf" \
            cell_v2 discover_hosts >/dev/null 2>&1 || true
        if openstack hypervisor list -f value -c "Hypervisor Hostname" \
            2>/dev/null | grep -qx "$FAKE_HOST"; then
            return 0
        fi
        sleep 1
    done
    die "the fake driver's nova-compute did not register: see" \
        "$LOGS/nova-compute-fake.log"
}

stop_fake_compute() {
    local id
    processes stop 30 nova-compute-fake
    rm -f "$RUN/nova-compute-fake.pid" "$RUN/nova-compute-fake.conf-sum"
    # Its service record and resource provider go too: no host stays
    # "down" in the cloud after the bench.
    id=$(openstack compute service list --host "$FAKE_HOST" \
        --service nova-compute -f value -c ID 2>/dev/null || true)
    [ -z "$id" ] || openstack compute service delete "$id" >/dev/null 2>&1 ||
        true
}

cmd_bench() {
    local count=${1:-5} lxd_host tarball=$DATA/images/$IMAGE_NAME.tar.gz
    is_running nova-compute || die "the sandbox does not run: run up first"
    # shellcheck disable=SC1091
    . "$SANDBOX_DIR/openrc"
    lxd_host=$(openstack compute service list --service nova-compute \
        -f value -c Host | grep -vx "$FAKE_HOST" | head -n 1)
    # The fake driver's hosts are not "lxc" hosts: the same tarball as an
    # image without hypervisor_type, for them.
    if ! openstack image show "$FAKE_IMAGE" >/dev/null 2>&1; then
        openstack image create --disk-format raw --container-format bare \
            --file "$tarball" "$FAKE_IMAGE" >/dev/null
    fi
    : >"$UP_LOG.bench"
    UP_LOG=$UP_LOG.bench
    say "starting nova-compute with nova's fake driver (host $FAKE_HOST)"
    start_fake_compute
    trap stop_fake_compute EXIT
    say "benchmark: $count servers on $lxd_host (this driver) and on" \
        "$FAKE_HOST (fake driver), and $count raw LXD launches"
    OS_CLIENT_CONFIG_FILE=$SANDBOX_DIR/clouds.yaml \
        "$VENV/bin/python" "$REPO_DIR/benchmarks/bench_sandbox_fleet.py" \
        --count "$count" --lxd-host "$lxd_host" --fake-host "$FAKE_HOST" \
        --image "$IMAGE_NAME" --fake-image "$FAKE_IMAGE" \
        --flavor "$PLAIN_FLAVOR" --tarball "$tarball"
}

# --- commands -----------------------------------------------------------------

prepare_dirs() {
    (umask 077 && mkdir -p "$SANDBOX_DIR" "$ETC" "$DATA" "$LOGS" "$RUN")
    # Passwords, keys, the databases and logs live here: root only. (The
    # sandbox never sits above LXD_DIR, whose parents uid 100000 must
    # traverse.)
    chmod 700 "$SANDBOX_DIR"
    echo "$SANDBOX_BACKEND" >"$SANDBOX_DIR/backend"
}

# lock_down: every secret file 0600 and every configuration directory
# 0700, whatever mode an earlier version or an editor left them with
# (credentials.py).
lock_down() {
    python3 "$HELPERS/credentials.py" lock-down
}

# check_secrets: a warning on stderr for the state directory or each
# configuration or credential file that another user could read or write,
# or that the state directory's owner does not own; status 1 if any.
check_secrets() {
    python3 "$HELPERS/credentials.py" check "$0" >&4
}

cmd_up() {
    [ "$(id -u)" = 0 ] || die "run as root (it starts daemons and LXD)"
    check_port_range
    prepare_dirs
    : >"$UP_LOG"
    say "sandbox up: $SANDBOX_DIR (log $UP_LOG)"
    step "Debian packages" apt_install
    step "Python venv (pip -c constraints.txt)" pip_install
    step "secrets and configuration" make_secrets
    step "hardware nova-compute sees" prepare_hardware
    step "configuration files" write_configs
    step "stop of services whose configuration changed" stop_reconfigured
    step "daemon: $SANDBOX_BACKEND" lxd_ready
    step "epmd (127.0.0.1:$PORT_EPMD)" start_epmd
    step "RabbitMQ (127.0.0.1:$PORT_AMQP)" start_rabbitmq
    step "MariaDB (127.0.0.1:$PORT_MYSQL)" start_mariadb
    step "databases (all services, in parallel)" sync_databases
    step "Keystone keys and bootstrap" keystone_bootstrap
    step "Keystone (127.0.0.1:$PORT_KEYSTONE)" start_keystone
    step "Keystone users, services, endpoints" provision keystone
    step "restart of nova-compute, nova-api if updated" restart_changed
    step "Placement, Glance, Neutron, Nova APIs" start_apis
    step "Open vSwitch, $BR_EX, namespace $OUTSIDE_NS" ovs_ready
    step "Neutron RPC server and agents (OVS, DHCP, L3, metadata)" \
        start_network_agents
    step "nova-conductor, nova-scheduler, nova-compute" start_nova_services
    step "compute registered, hosts discovered" wait_compute
    step "LXD image '$IMAGE_NAME' in Glance" upload_image
    step "flavors" make_flavors
    step "networks public and private, router, security group" \
        provision network "$PUBLIC_CIDR" "$OUTSIDE_IP" "$PRIVATE_CIDR"
    step "project and user demo, with a network" provision demo
    if [ "$SANDBOX_HORIZON" = 0 ]; then
        step "Horizon off (--without-horizon)" horizon_off
    fi
    if horizon_enabled; then
        step "Horizon $HORIZON_VERSION venv" horizon_install
        step "Horizon settings and static files" horizon_configure
        step "Horizon (127.0.0.1:$PORT_HORIZON)" start_horizon
    fi
    step "metadata definitions in Glance" check_metadefs
    say ""
    say "sandbox ready in $(elapsed)s."
    cmd_status
    say ""
    say "Next:"
    say "  . $SANDBOX_DIR/openrc"
    say "  openstack server create --flavor $PLAIN_FLAVOR" \
        "--image $IMAGE_NAME --wait s1     # on the network private"
    say "  openstack floating ip create public   # then:" \
        "openstack server add floating ip s1 <address>"
    say "  ip netns exec $OUTSIDE_NS ping <address>   # from \"the outside\""
    if horizon_enabled; then
        say "  Horizon: http://127.0.0.1:$PORT_HORIZON/ (user demo," \
            "password DEMO_PASSWORD of $SANDBOX_DIR/secrets.env)"
    fi
    say "  openstack resource provider list"
    say "  $(daemon_cli_name) list"
    say "  $0 down"
}

cmd_down() {
    processes down >&3 || die "some services still run; see 'status'"
}

cmd_status() {
    local rc=0
    processes status "$SANDBOX_BACKEND" "$DAEMON_DIR/unix.socket" >&3 ||
        rc=$?
    check_secrets || true
    return "$rc"
}

# The ids of every image this sandbox's Glance ever had (deleted ones
# included: Glance keeps their rows), or, with MariaDB stopped, of those
# still in its file store.
sandbox_image_ids() {
    if is_running mariadb &&
        mysql_root -N -e 'SELECT id FROM glance.images' 2>/dev/null; then
        return 0
    fi
    ls "$DATA/glance/images" 2>/dev/null || true
}

cmd_clean() {
    local item alias ids
    # The driver's cache of the sandbox's Glance images (nova-image-<id>
    # aliases in LXD): their Glance images go away with the state below.
    # Only this sandbox's: other clouds on the host may use the daemon.
    ids=$(sandbox_image_ids)
    cmd_down
    remove_network_plumbing
    if command -v "$(daemon_cli_name)" >/dev/null 2>&1 && [ -n "$ids" ]; then
        for alias in $(daemon_cli image alias list --format csv 2>/dev/null |
                cut -d, -f1 | grep '^nova-image-' || true); do
            grep -qxF -- "${alias#nova-image-}" <<<"$ids" || continue
            daemon_cli image delete "$alias" >/dev/null 2>&1 || true
        done
    fi
    for item in "$ETC" "$DATA" "$LOGS" "$RUN" "$SANDBOX_DIR/secrets.env" \
        "$SANDBOX_DIR/openrc" "$SANDBOX_DIR/clouds.yaml" \
        "$SANDBOX_DIR/backend"; do
        rm -rf "$item"
    done
    say "removed sandbox state (kept $VENV)"
}

USAGE="usage: $0 up [--backend lxd|incus] [--hardware NAME|DIR|none] [--with-horizon|--without-horizon]|down|status|clean|bench [N]|horizon-test|image debian"

main() {
    local command=${1:-}
    shift || true
    while [ "$command" = up ] && [ "$#" -gt 0 ]; do
        case $1 in
            --backend)
                SANDBOX_BACKEND=${2:?$USAGE}
                shift 2
                ;;
            --hardware)
                SANDBOX_HARDWARE=${2:?$USAGE}
                shift 2
                ;;
            --with-horizon)
                SANDBOX_HORIZON=1
                shift
                ;;
            --without-horizon)
                SANDBOX_HORIZON=0
                shift
                ;;
            *)
                say "$USAGE"
                return 2
                ;;
        esac
    done
    python3 "$HELPERS/hardware.py" check "$SANDBOX_HARDWARE" || return 2
    choose_backend
    case $command in
        up) cmd_up ;;
        down) cmd_down ;;
        status) cmd_status ;;
        clean) cmd_clean ;;
        bench) cmd_bench "$@" ;;
        horizon-test) cmd_horizon_test ;;
        image) cmd_image "$@" ;;
        *)
            say "$USAGE"
            return 2
            ;;
    esac
}

main "$@"
