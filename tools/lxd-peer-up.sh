#!/bin/bash
# Start a second LXD (or Incus) daemon on this machine, for the migration
# tests.
#
# Cold migration moves a container from one daemon to another over HTTPS
# with the instance migration API. This script gives a single machine two
# daemons that trust each other, on loopback addresses only:
#
#   LXD (default)  main  LXD_DIR=/var/lib/lxd          https://127.0.0.1:8443
#                  peer  LXD_PEER_DIR=/var/lib/lxd-peer https://127.0.0.1:8444
#   Incus          main  INCUS_DIR=/var/lib/incus        https://127.0.0.1:8445
#   (--incus)      peer  INCUS_PEER_DIR=/var/lib/incus-peer
#                                                        https://127.0.0.1:8446
#
# Both get ``core.https_address`` on 127.0.0.1 and trust each other's
# server certificate, plus one client certificate made here for
# nova-lxd-accel ($PEER_DIR/nova-migration.crt and .key) that both trust:
# it is what ``[lxd_migration] client_cert`` and ``client_key`` name in the
# tests, and each daemon's own server.crt is what ``[lxd_migration]
# server_certs`` pins. The peer has a dir storage pool and no network, like
# tools/lxd-up.sh (tools/incus-up.sh) makes the main one.
#
# Idempotent: re-running only re-applies what is missing.
#
#   tools/lxd-peer-up.sh [--incus]          # start (and set up) the peer
#   tools/lxd-peer-up.sh [--incus] --stop   # stop the peer daemon
#   tools/incus-peer-up.sh [--stop]         # the same as --incus
#
# Environment (the tests read the same variables):
#   LXD_DIR, INCUS_DIR       the main daemon; it must run (tools/lxd-up.sh,
#                            tools/incus-up.sh)
#   LXD_PEER_DIR, INCUS_PEER_DIR        the peer's state directory
#   LXD_MAIN_ADDRESS, LXD_PEER_ADDRESS  default 127.0.0.1:8443 and :8444
#   INCUS_MAIN_ADDRESS, INCUS_PEER_ADDRESS  default 127.0.0.1:8445, :8446
set -euo pipefail

backend=lxd
if [ "${1:-}" = "--incus" ]; then
    backend=incus
    shift
fi
# The same settings for either daemon, under its own names: $LXD_DIR,
# $LXD_PEER_DIR, ... or $INCUS_DIR, $INCUS_PEER_DIR, ...
if [ "$backend" = incus ]; then
    prefix=INCUS cli=incus main_port=8445
else
    prefix=LXD cli=lxc main_port=8443
fi
dir_var=${prefix}_DIR
up=$backend-up.sh
peer_dir_var=${prefix}_PEER_DIR
main_address_var=${prefix}_MAIN_ADDRESS
peer_address_var=${prefix}_PEER_ADDRESS
MAIN_DIR=${!dir_var:-/var/lib/$backend}
PEER_DIR=${!peer_dir_var:-/var/lib/$backend-peer}
MAIN_ADDRESS=${!main_address_var:-127.0.0.1:$main_port}
PEER_ADDRESS=${!peer_address_var:-127.0.0.1:$((main_port + 1))}

# main|peer COMMAND...: the daemon's client ($cli) on that daemon.
main() { env "$dir_var=$MAIN_DIR" "$cli" "$@"; }
peer() { env "$dir_var=$PEER_DIR" "$cli" "$@"; }

if [ "${1:-}" = "--stop" ]; then
    if peer info >/dev/null 2>&1; then
        env "$dir_var=$PEER_DIR" "$(dirname "$0")/$up" --stop
        echo "lxd-peer-up: peer daemon stopped ($dir_var=$PEER_DIR)"
    fi
    exit 0
fi

for cmd in "$cli" openssl; do
    if ! command -v "$cmd" >/dev/null 2>&1; then
        echo "lxd-peer-up: '$cmd' not found" >&2
        exit 1
    fi
done
if ! main info >/dev/null 2>&1; then
    echo "lxd-peer-up: the main $backend daemon ($dir_var=$MAIN_DIR) does" \
         "not answer; start it with tools/$up first" >&2
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
env "$dir_var=$PEER_DIR" "$(dirname "$0")/$up"
peer config set core.https_address "$PEER_ADDRESS"

current=$(main config get core.https_address)
if [ "$current" != "$MAIN_ADDRESS" ]; then
    if [ -n "$current" ]; then
        echo "lxd-peer-up: the main daemon listens on $current, not" \
             "$MAIN_ADDRESS; leaving it as it is" >&2
        exit 1
    fi
    main config set core.https_address "$MAIN_ADDRESS"
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

trust() {  # trust main|peer CERT NAME
    local fp
    fp=$(fingerprint "$2")
    if ! "$1" config trust list --format csv | grep -q ",${fp:0:12},"; then
        if [ "$backend" = incus ]; then
            # "incus config trust add NAME" issues a join token instead.
            "$1" config trust add-certificate "$2" --name "$3"
        else
            "$1" config trust add "$2" --name "$3"
        fi
    fi
}

trust peer "$MAIN_DIR/server.crt" "$backend-main"
trust main "$PEER_DIR/server.crt" "$backend-peer"
trust peer "$client_crt" nova-migration
trust main "$client_crt" nova-migration

echo "lxd-peer-up: peer $backend $(peer query /1.0 | python3 -c \
    'import json,sys; print(json.load(sys.stdin)["environment"]["server_version"])') ready" \
    "($dir_var=$PEER_DIR, https://$PEER_ADDRESS; main https://$MAIN_ADDRESS)"
