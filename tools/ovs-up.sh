#!/bin/bash
# Start Open vSwitch for development and CI, without systemd.
#
# Idempotent: daemons that already answer are left alone. Works as root on
# a machine where PID 1 is not systemd and the openvswitch kernel module is
# not available: ovsdb-server and ovs-vswitchd run by hand, and every
# bridge must use the userspace datapath (datapath_type=netdev). Nothing
# here gives any interface an address.
#
# Environment:
#   OVS_INSTALL=1   apt-get install Debian's openvswitch-switch first
#   OVS_RUNDIR      socket/pid directory (default /var/run/openvswitch,
#                   where ovs-vsctl and os-vif look by default)
#   OVS_DBDIR       database directory (default /var/lib/openvswitch)
#   OVS_STOP=1      stop the daemons this script started, then exit
set -euo pipefail

OVS_RUNDIR=${OVS_RUNDIR:-/var/run/openvswitch}
OVS_DBDIR=${OVS_DBDIR:-/var/lib/openvswitch}
OVS_LOGDIR=${OVS_LOGDIR:-/var/log/openvswitch}
export OVS_RUNDIR OVS_DBDIR OVS_LOGDIR

if [ "${OVS_INSTALL:-0}" = "1" ] && ! command -v ovs-vswitchd >/dev/null; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends openvswitch-switch
fi

for cmd in ovsdb-tool ovsdb-server ovs-vswitchd ovs-vsctl ovs-appctl; do
    if ! command -v "$cmd" >/dev/null 2>&1; then
        echo "ovs-up: '$cmd' not found; install Debian's openvswitch-switch" \
             "(or run with OVS_INSTALL=1)" >&2
        exit 1
    fi
done

DB_SOCK="$OVS_RUNDIR/db.sock"

stop_daemon() {
    local name=$1
    if [ -f "$OVS_RUNDIR/$name.pid" ]; then
        ovs-appctl -t "$OVS_RUNDIR/$name.$(cat "$OVS_RUNDIR/$name.pid").ctl" \
            exit >/dev/null 2>&1 || true
    fi
}

if [ "${OVS_STOP:-0}" = "1" ]; then
    stop_daemon ovs-vswitchd
    stop_daemon ovsdb-server
    echo "ovs-up: stopped"
    exit 0
fi

mkdir -p "$OVS_RUNDIR" "$OVS_DBDIR" "$OVS_LOGDIR"
DB="$OVS_DBDIR/conf.db"
SCHEMA=/usr/share/openvswitch/vswitch.ovsschema
if [ ! -s "$DB" ]; then
    ovsdb-tool create "$DB" "$SCHEMA"
elif [ "$(ovsdb-tool needs-conversion "$DB" "$SCHEMA")" = "yes" ]; then
    ovsdb-tool convert "$DB" "$SCHEMA"
fi

if ! ovs-vsctl --db="unix:$DB_SOCK" --timeout=5 show >/dev/null 2>&1; then
    ovsdb-server "$DB" \
        --remote="punix:$DB_SOCK" \
        --remote=db:Open_vSwitch,Open_vSwitch,manager_options \
        --pidfile="$OVS_RUNDIR/ovsdb-server.pid" --detach \
        --log-file="$OVS_LOGDIR/ovsdb-server.log" --no-chdir -vconsole:off
fi
ovs-vsctl --db="unix:$DB_SOCK" --no-wait init
# os-vif (and neutron) default to tcp:127.0.0.1:6640: loopback only.
if [ -z "$(ovs-vsctl --db="unix:$DB_SOCK" --no-wait get-manager)" ]; then
    ovs-vsctl --db="unix:$DB_SOCK" --no-wait set-manager ptcp:6640:127.0.0.1
fi

# Userspace TSO makes the datapath read and write the kernel's offload
# metadata (virtio-net headers) on its veth ports. Without it a TCP segment
# whose checksum the sending namespace left to "the hardware" (veths do)
# reaches conntrack unfinished, is taken as invalid and dropped: TCP
# through the OVS firewall, or from a Neutron router's namespace, never
# connects (ICMP and DHCP, checksummed in software, do). Read only when
# ovs-vswitchd starts.
ovs-vsctl --db="unix:$DB_SOCK" --no-wait set Open_vSwitch . \
    other_config:userspace-tso-enable=true

if ! ovs-appctl -t "$OVS_RUNDIR/ovs-vswitchd.$(cat \
        "$OVS_RUNDIR/ovs-vswitchd.pid" 2>/dev/null || echo 0).ctl" \
        version >/dev/null 2>&1; then
    # No --mlockall: it fails in containers without CAP_IPC_LOCK limits.
    ovs-vswitchd "unix:$DB_SOCK" \
        --pidfile="$OVS_RUNDIR/ovs-vswitchd.pid" --detach \
        --log-file="$OVS_LOGDIR/ovs-vswitchd.log" --no-chdir -vconsole:off
fi
ovs-vsctl --db="unix:$DB_SOCK" --timeout=30 show >/dev/null

# A throwaway userspace bridge proves the datapath works here.
probe="ovsup$$"
ovs-vsctl --db="unix:$DB_SOCK" --timeout=30 -- --may-exist add-br "$probe" \
    -- set bridge "$probe" datapath_type=netdev
ovs-vsctl --db="unix:$DB_SOCK" --timeout=30 del-br "$probe"
echo "ovs-up: Open vSwitch $(ovs-vswitchd --version | head -1 | \
    awk '{print $NF}') ready (db unix:$DB_SOCK, datapath netdev only)"
