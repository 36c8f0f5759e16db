#!/bin/bash
# Start a local LXD daemon for development and CI, without systemd.
#
# Idempotent: when the daemon under $LXD_DIR already answers, only the
# preseed is re-applied. Works as root on a machine where PID 1 is not
# systemd and there is no iptables (no managed LXD network is created).
#
# Before it starts the daemon it leaves one root: range in /etc/subuid and
# /etc/subgid (tools/subid-ranges.py --host-only): Debian's lxd package
# appends a second one when Incus was installed first, and a daemon that
# sees two maps both at container id 0 (every container start fails).
#
#   tools/lxd-up.sh          # start (and set up) the daemon
#   tools/lxd-up.sh --stop   # stop it (its containers stop too)
#
# Environment:
#   LXD_DIR          daemon state directory (default /var/lib/lxd)
#   LXD_INSTALL=1    apt-get install Debian's lxd packages first
set -euo pipefail

LXD_DIR=${LXD_DIR:-/var/lib/lxd}
export LXD_DIR

if [ "${1:-}" = "--stop" ]; then
    if command -v lxc >/dev/null 2>&1 && lxc info >/dev/null 2>&1; then
        lxd shutdown --timeout=60
        echo "lxd-up: daemon stopped (LXD_DIR=$LXD_DIR)"
    fi
    exit 0
fi

if [ "${LXD_INSTALL:-0}" = "1" ] && ! command -v lxd >/dev/null 2>&1; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends lxd lxd-client busybox-static
fi

for cmd in lxd lxc; do
    if ! command -v "$cmd" >/dev/null 2>&1; then
        echo "lxd-up: '$cmd' not found; install Debian's lxd and lxd-client" \
             "packages (or run with LXD_INSTALL=1)" >&2
        exit 1
    fi
done

getent group lxd >/dev/null || groupadd --system lxd
mkdir -p "$LXD_DIR"
# uid 100000 (the container root) must be able to traverse every parent.
chmod 711 "$LXD_DIR"

# the per-container /proc (lxcfs), as systemd's lxcfs.service gives it
"$(dirname "$0")/lxcfs-up.sh" /var/lib/lxcfs

if ! lxc info >/dev/null 2>&1; then
    python3 "$(dirname "$0")/subid-ranges.py" --host-only
    # The proxy variables point at a closed local port so that LXD's
    # periodic image-index refresh never reaches outside hosts.
    # From /: the daemon keeps its working directory, and one deleted
    # under it (a removed clone) makes its rsync fail with getcwd().
    (cd / && http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 \
        setsid /usr/bin/lxd --group lxd --logfile="$LXD_DIR/lxd.log" \
        </dev/null >>"$LXD_DIR/lxd.stdout" 2>&1 &)
    lxd waitready --timeout=60
fi

lxd init --preseed <"$(dirname "$0")/daemon-preseed.yaml"
echo "lxd-up: LXD $(lxc query /1.0 | python3 -c 'import json,sys; print(json.load(sys.stdin)["environment"]["server_version"])') ready (LXD_DIR=$LXD_DIR)"
