#!/bin/bash
# Start a second LXD daemon on this machine, for the migration tests.
#
# Cold migration moves a container from one LXD daemon to another over
# HTTPS with LXD's instance migration API. This script gives a single
# machine two daemons that trust each other, on loopback addresses only:
#
#   main daemon   LXD_DIR=/var/lib/lxd       https://127.0.0.1:8443
#   peer daemon   LXD_DIR=/var/lib/lxd-peer  https://127.0.0.1:8444
#
# Both get ``core.https_address`` on 127.0.0.1 and trust each other's
# server certificate (``lxc config trust add``), plus one client
# certificate made here for nova-lxd-accel ($PEER_DIR/nova-migration.crt
# and .key) that both trust: it is what ``[lxd_migration] client_cert``
# and ``client_key`` name in the tests, and each daemon's own server.crt is
# what ``[lxd_migration] server_certs`` pins. The peer has a dir storage
# pool and no network, like tools/lxd-up.sh makes the main one.
#
# Idempotent: re-running only re-applies what is missing.
#
#   tools/lxd-peer-up.sh          # start (and set up) the peer
#   tools/lxd-peer-up.sh --stop   # stop the peer daemon
#
# Environment:
#   LXD_DIR            the main daemon (default /var/lib/lxd); it must run
#                      (tools/lxd-up.sh)
#   LXD_PEER_DIR       the peer's state directory (default /var/lib/lxd-peer)
#   LXD_MAIN_ADDRESS   default 127.0.0.1:8443
#   LXD_PEER_ADDRESS   default 127.0.0.1:8444
set -euo pipefail

MAIN_DIR=${LXD_DIR:-/var/lib/lxd}
PEER_DIR=${LXD_PEER_DIR:-/var/lib/lxd-peer}
MAIN_ADDRESS=${LXD_MAIN_ADDRESS:-127.0.0.1:8443}
PEER_ADDRESS=${LXD_PEER_ADDRESS:-127.0.0.1:8444}

main() { LXD_DIR=$MAIN_DIR "$@"; }
peer() { LXD_DIR=$PEER_DIR "$@"; }

if [ "${1:-}" = "--stop" ]; then
    if peer lxc info >/dev/null 2>&1; then
        peer lxd shutdown --timeout=60
        echo "lxd-peer-up: peer daemon stopped (LXD_DIR=$PEER_DIR)"
    fi
    exit 0
fi

for cmd in lxd lxc openssl; do
    if ! command -v "$cmd" >/dev/null 2>&1; then
        echo "lxd-peer-up: '$cmd' not found" >&2
        exit 1
    fi
done
if ! main lxc info >/dev/null 2>&1; then
    echo "lxd-peer-up: the main LXD daemon (LXD_DIR=$MAIN_DIR) does not" \
         "answer; start it with tools/lxd-up.sh first" >&2
    exit 1
fi

for addr in "$MAIN_ADDRESS" "$PEER_ADDRESS"; do
    case "$addr" in
        127.*|\[::1\]:*) ;;
        *) echo "lxd-peer-up: $addr is not a loopback address" >&2; exit 1;;
    esac
done

# Started and initialised exactly like the main daemon, then listening on
# its loopback HTTPS address.
LXD_DIR=$PEER_DIR "$(dirname "$0")/lxd-up.sh"
peer lxc config set core.https_address "$PEER_ADDRESS"

current=$(main lxc config get core.https_address)
if [ "$current" != "$MAIN_ADDRESS" ]; then
    if [ -n "$current" ]; then
        echo "lxd-peer-up: the main daemon listens on $current, not" \
             "$MAIN_ADDRESS; leaving it as it is" >&2
        exit 1
    fi
    main lxc config set core.https_address "$MAIN_ADDRESS"
fi

# The client certificate nova-lxd-accel presents to a destination daemon.
client_crt=$PEER_DIR/nova-migration.crt
client_key=$PEER_DIR/nova-migration.key
if [ ! -s "$client_crt" ] || [ ! -s "$client_key" ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:secp384r1 \
        -nodes -days 3650 -subj /CN=nova-lxd-accel-migration \
        -keyout "$client_key" -out "$client_crt" 2>/dev/null
    chmod 600 "$client_key"
fi

fingerprint() {
    openssl x509 -in "$1" -noout -fingerprint -sha256 |
        sed 's/.*=//; s/://g' | tr 'A-F' 'a-f'
}

trust() {  # trust DAEMON-DIR CERT NAME
    local fp
    fp=$(fingerprint "$2")
    if ! LXD_DIR=$1 lxc config trust list --format csv | grep -q \
            ",${fp:0:12},"; then
        LXD_DIR=$1 lxc config trust add "$2" --name "$3"
    fi
}

trust "$PEER_DIR" "$MAIN_DIR/server.crt" lxd-main
trust "$MAIN_DIR" "$PEER_DIR/server.crt" lxd-peer
trust "$PEER_DIR" "$client_crt" nova-migration
trust "$MAIN_DIR" "$client_crt" nova-migration

echo "lxd-peer-up: peer LXD $(peer lxc query /1.0 | python3 -c \
    'import json,sys; print(json.load(sys.stdin)["environment"]["server_version"])') ready" \
    "(LXD_DIR=$PEER_DIR, https://$PEER_ADDRESS; main https://$MAIN_ADDRESS)"
