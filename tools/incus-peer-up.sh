#!/bin/bash
# A peer Incus daemon for the migration tests: tools/lxd-peer-up.sh --incus
# (see there; INCUS_DIR, INCUS_PEER_DIR, INCUS_MAIN_ADDRESS and
# INCUS_PEER_ADDRESS choose the daemons and their loopback addresses).
#
#   tools/incus-peer-up.sh [--stop]
exec "$(dirname "$0")/lxd-peer-up.sh" --incus "$@"
