#!/bin/bash
# Start a local Incus daemon for development and CI, without systemd.
#
# The Incus counterpart of tools/lxd-up.sh, and able to run beside it:
# incusd runs in a mount namespace of its own where /etc/subuid and
# /etc/subgid are bind-mounted from $INCUS_IDMAP_DIR, which holds a
# subordinate uid/gid range for Incus that overlaps no range in the host's
# files (tools/subid-ranges.py makes them, and leaves one root: range, the
# LXD one, in /etc/subuid and /etc/subgid). So LXD and Incus containers
# never share host uids, and the two-root:-range state that Debian's lxd
# package leaves when it is installed after Incus (every Incus container
# start failing with "newuidmap: write to uid_map failed") cannot happen.
#
# Idempotent: when the daemon under $INCUS_DIR already answers, only the
# preseed is re-applied (dir storage pool, no managed network).
#
#   tools/incus-up.sh          # start (and set up) the daemon
#   tools/incus-up.sh --stop   # stop it (its containers stop too)
#
# Environment:
#   INCUS_DIR          daemon state directory (default /var/lib/incus)
#   INCUS_IDMAP_DIR    subuid/subgid for Incus
#                      (default /etc/nova-lxd-accel/incus-idmap)
#   INCUS_INSTALL=1    apt-get install incus-base and incus-client from
#                      bookworm-backports first (adding that suite on
#                      Debian 12; Debian 13 has them in its main suite)
set -euo pipefail

INCUS_DIR=${INCUS_DIR:-/var/lib/incus}
INCUS_IDMAP_DIR=${INCUS_IDMAP_DIR:-/etc/nova-lxd-accel/incus-idmap}
export INCUS_DIR
INCUSD=/usr/libexec/incus/incusd
here=$(cd "$(dirname "$0")" && pwd)

if [ "${1:-}" = "--stop" ]; then
    if command -v incus >/dev/null 2>&1 && incus info >/dev/null 2>&1; then
        incus admin shutdown --timeout=60
        echo "incus-up: daemon stopped (INCUS_DIR=$INCUS_DIR)"
    fi
    exit 0
fi

install_incus() {
    # shellcheck disable=SC1091
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    target=()
    if [ "$codename" = bookworm ]; then
        "$here/backports.sh"
        target=(-t bookworm-backports)
    fi
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends "${target[@]}" incus-base incus-client
}

if [ "${INCUS_INSTALL:-0}" = "1" ] && [ ! -x "$INCUSD" ]; then
    install_incus
fi
for cmd in "$INCUSD" incus unshare python3; do
    if ! command -v "$cmd" >/dev/null 2>&1; then
        echo "incus-up: '$cmd' not found; install the incus-base and" \
             "incus-client packages (or run with INCUS_INSTALL=1)" >&2
        exit 1
    fi
done

getent group incus-admin >/dev/null || groupadd --system incus-admin
mkdir -p "$INCUS_DIR"
# uid/gid 0 of containers must be able to traverse every parent.
chmod 711 "$INCUS_DIR"

# the per-container /proc (lxcfs; Incus looks in its own directory)
"$here/lxcfs-up.sh" /var/lib/incus-lxcfs

if ! incus info >/dev/null 2>&1; then
    python3 "$here/subid-ranges.py" "$INCUS_IDMAP_DIR"
    # The proxy variables point at a closed local port so that the
    # daemon's periodic refreshes (instance types, image indexes) never
    # reach outside hosts. Slave propagation: mounts made on the host
    # (volumes) reach the daemon, its own mounts stay in its namespace.
    # shellcheck disable=SC2016  # expanded by the inner shell
    http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 \
        setsid unshare --mount --propagation slave -- /bin/sh -c '
            mount --bind "$1/subuid" /etc/subuid &&
            mount --bind "$1/subgid" /etc/subgid &&
            cd / && exec "$2" --group incus-admin --logfile "$3/incus.log"' \
        incusd "$INCUS_IDMAP_DIR" "$INCUSD" "$INCUS_DIR" \
        </dev/null >>"$INCUS_DIR/incusd.stdout" 2>&1 &
    if ! incus admin waitready --timeout=60; then
        echo "incus-up: incusd did not start; see $INCUS_DIR/incus.log" \
             "and $INCUS_DIR/incusd.stdout" >&2
        exit 1
    fi
fi

incus admin init --preseed <"$(dirname "$0")/daemon-preseed.yaml"
echo "incus-up: Incus $(incus query /1.0 | python3 -c 'import json,sys; print(json.load(sys.stdin)["environment"]["server_version"])') ready (INCUS_DIR=$INCUS_DIR, ids $(cut -d: -f2,3 "$INCUS_IDMAP_DIR/subuid"))"
