#!/bin/bash
# End-to-end check of nova-lxd-accel on a real OpenStack on this machine.
#
# Brings the sandbox up (tools/sandbox.sh up), then with the real openstack
# CLI: boots a server with --nic none, checks the LXD container runs and
# Placement holds the allocation, stops, starts and reboots it, deletes it,
# checks that no container and no allocation are left, and brings the
# sandbox down. Exits non-zero, naming the failed check, on any failure.
#
# Environment:
#   SANDBOX_E2E_KEEP=1   leave the sandbox running at the end
#   SANDBOX_E2E_TIMEOUT  seconds to wait for each state change (default 120)
#   everything tools/sandbox.sh reads (SANDBOX_DIR, LXD_DIR, ...)
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SANDBOX=$SCRIPT_DIR/sandbox.sh
SANDBOX_DIR=${SANDBOX_DIR:-/var/tmp/nova-lxd-accel-sandbox}
export SANDBOX_DIR
LXD_DIR=${LXD_DIR:-/var/lib/lxd}
export LXD_DIR
TIMEOUT=${SANDBOX_E2E_TIMEOUT:-120}
FLAVOR=sandbox.small
IMAGE=lxd-tiny
SERVER=e2e-$$
SERVER_ID=
CONTAINER=
T0=$(date +%s%N)

since() {
    local ms
    ms=$(( ($(date +%s%N) - ${1:-$T0}) / 1000000 ))
    printf '%d.%02d' $((ms / 1000)) $(( (ms % 1000) / 10 ))
}

say() {
    printf '[e2e %7ss] %s\n' "$(since)" "$*"
}

fail() {
    printf '\ne2e: FAILED: %s\n' "$*" >&2
    local log
    for log in nova-compute nova-conductor nova-scheduler nova-api; do
        log=$SANDBOX_DIR/log/$log.log
        grep -qs ' ERROR ' "$log" || continue
        printf 'e2e: last errors in %s:\n' "$log" >&2
        grep ' ERROR ' "$log" | tail -n 8 | cut -c1-300 |
            sed 's/^/    | /' >&2
    done
    exit 1
}

cleanup() {
    local rc=$?
    trap - EXIT
    if [ -n "$SERVER_ID" ] && [ -f "$SANDBOX_DIR/openrc" ]; then
        openstack server delete --wait "$SERVER_ID" >/dev/null 2>&1 || true
    fi
    if [ "${SANDBOX_E2E_KEEP:-0}" != 1 ]; then
        say "sandbox down"
        "$SANDBOX" down || rc=1
    else
        say "SANDBOX_E2E_KEEP=1: the sandbox keeps running"
    fi
    if [ "$rc" = 0 ]; then
        say "PASSED"
    fi
    exit "$rc"
}

# server_field FIELD: one field of "openstack server show".
server_field() {
    openstack server show "$SERVER_ID" -f value -c "$1"
}

# wait_server STATUS: until the server has STATUS and no task.
wait_server() {
    local want=$1 status task i
    for ((i = 0; i < TIMEOUT * 2; i++)); do
        status=$(server_field status)
        task=$(server_field OS-EXT-STS:task_state)
        if [ "$status" = "$want" ] && [ "$task" = None ]; then
            return 0
        fi
        if [ "$status" = ERROR ]; then
            fail "server $SERVER went to ERROR: $(server_field fault)"
        fi
        sleep 0.5
    done
    fail "server $SERVER not $want after ${TIMEOUT}s (status $status," \
        "task $task)"
}

# The LXD state of the server's container (empty when it does not exist).
container_state() {
    lxc list --format csv -c ns |
        awk -F, -v n="$CONTAINER" '$1 == n {print $2}'
}

expect_container() {
    local want=$1 state i
    for ((i = 0; i < 20; i++)); do
        state=$(container_state)
        [ "$state" = "$want" ] && return 0
        sleep 0.5
    done
    fail "container $CONTAINER is '${state:-absent}' in LXD, expected $want"
}

allocations_json() {
    openstack resource provider allocation show "$SERVER_ID" -f json
}

main() {
    trap cleanup EXIT
    say "sandbox up"
    "$SANDBOX" up || fail "tools/sandbox.sh up failed (see above)"
    # shellcheck disable=SC1091
    . "$SANDBOX_DIR/openrc"

    local before after start
    before=$(lxc list --format csv -c n | sort)
    say "openstack server create --flavor $FLAVOR --image $IMAGE" \
        "--nic none --wait $SERVER"
    start=$(date +%s%N)
    openstack server create --flavor "$FLAVOR" --image "$IMAGE" \
        --nic none --wait "$SERVER" -f value -c id >/dev/null ||
        fail "openstack server create failed"
    SERVER_ID=$(openstack server show "$SERVER" -f value -c id)
    [ "$(server_field status)" = ACTIVE ] ||
        fail "server $SERVER is $(server_field status), not ACTIVE"
    say "server $SERVER_ID ACTIVE after $(since "$start")s (CLI --wait)"

    after=$(lxc list --format csv -c n | sort)
    CONTAINER=$(comm -13 <(echo "$before") <(echo "$after") |
        grep -F "$SERVER_ID" || true)
    if [ -z "$CONTAINER" ]; then
        CONTAINER=$(comm -13 <(echo "$before") <(echo "$after") | head -n 1)
    fi
    [ -n "$CONTAINER" ] || fail "no new LXD container for $SERVER_ID"
    expect_container RUNNING
    say "LXD: container $CONTAINER RUNNING"

    local alloc
    alloc=$(allocations_json)
    grep -q MEMORY_MB <<<"$alloc" ||
        fail "no allocation in Placement for $SERVER_ID: $alloc"
    say "Placement: allocation $(tr -d '\n ' <<<"$alloc" |
        grep -o '"resources":{[^}]*}' | head -n 1)"

    local op want lxd_want
    for op in stop start reboot; do
        case $op in
            stop) want=SHUTOFF lxd_want=STOPPED ;;
            *) want=ACTIVE lxd_want=RUNNING ;;
        esac
        start=$(date +%s%N)
        openstack server "$op" "$SERVER_ID" || fail "openstack server $op"
        wait_server "$want"
        expect_container "$lxd_want"
        say "server $op: $want, container $lxd_want ($(since "$start")s)"
    done

    start=$(date +%s%N)
    openstack server delete --wait "$SERVER_ID" ||
        fail "openstack server delete failed"
    say "server deleted ($(since "$start")s)"
    expect_container ""
    say "LXD: container $CONTAINER gone"
    alloc=$(allocations_json)
    if grep -q MEMORY_MB <<<"$alloc"; then
        fail "allocation of $SERVER_ID left in Placement: $alloc"
    fi
    if openstack server list --all-projects -f value -c ID |
        grep -q "$SERVER_ID"; then
        fail "server $SERVER_ID still listed after delete"
    fi
    local usage
    usage=$(openstack resource provider list -f value -c uuid |
        while read -r rp; do
            openstack resource provider usage show "$rp" -f value
        done | awk '$2 != 0')
    [ -z "$usage" ] || fail "resources still used in Placement: $usage"
    say "Placement: no allocation and no usage left"
    SERVER_ID=
}

main "$@"
