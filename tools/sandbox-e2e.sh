#!/bin/bash
# End-to-end check of nova-lxd-accel on a real OpenStack on this machine.
#
# Brings the sandbox up (tools/sandbox.sh up), then with the real openstack
# CLI (at the newest compute microversion, as openrc sets it):
#  - boots a server with --nic none, checks the LXD container runs and
#    Placement holds the allocation; stops, starts and reboots it;
#  - snapshots it (openstack server image create): the image Glance serves
#    has the size and checksums Glance recorded, is an LXD image and holds
#    a file written into the server before; a server boots from it;
#  - resizes it to the second CPU flavor and confirms (LXD limits follow);
#  - shelves it (container gone) and unshelves it (container back);
#  - deletes it: no container, no allocation, no usage left;
#  - networking: two servers created without --nic get their address on
#    the network "private" by DHCP and ping each other, a floating IP
#    answers ping from the outside namespace, removing the security group's
#    ICMP rule stops that and restoring it brings it back, the metadata
#    service answers from inside, and delete leaves no port, OVS port,
#    bridge or container;
#  - runs the README's first commands, parsed from README.rst, as written;
#  - checks that bad lxd: flavor properties are refused with HTTP 400, and
#    that servers booted from broken images (not an LXD image; an LXD image
#    with no init) end in ERROR with a fault naming the cause and leave no
#    container in any LXD project;
# and brings the sandbox down. Exits non-zero, naming the failed check, on
# any failure.
#
# With --debian, it boots the Debian 12 cloud-init image (built from the
# Debian mirror, cached) with a key pair and user data, and logs in over
# SSH through a floating IP from the outside namespace.
#
# With --mps, it brings the sandbox up on the SIMULATED H200 shared in
# quota mode (tools/sandbox/hardware/h200-shared), boots the Debian image
# with the MPS quota flavor `nova-lxd-accel flavors` proposed, and checks
# over SSH that the MPS pipe directory and the memory limit reach an SSH
# command, a login shell, systemd's services and cron's PAM session
# (tools/mps-env-check.sh; a user's own manager is checked where the image
# runs one).
#
# With --hardware NAME (a recorded host, see tools/sandbox/hardware), it
# brings the sandbox up on that SIMULATED host instead and checks that a
# MIG flavor and an InfiniBand VF flavor boot, that the server's
# diagnostics, the container's binding record and Placement agree on the
# unit it got, that delete frees it, and that everything says "simulated".
#
# Environment:
#   SANDBOX_E2E_KEEP=1   leave the sandbox running at the end
#   SANDBOX_E2E_UP=0     the caller has just brought the sandbox up as the
#                        check needs it: no "up" again
#   SANDBOX_E2E_TIMEOUT  seconds to wait for each state change (default 120)
#   everything tools/sandbox.sh reads (SANDBOX_DIR, LXD_DIR, ...)
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SANDBOX=$SCRIPT_DIR/sandbox.sh
SANDBOX_DIR=${SANDBOX_DIR:-/var/tmp/nova-lxd-accel-sandbox}
export SANDBOX_DIR
LXD_DIR=${LXD_DIR:-/var/lib/lxd}
INCUS_DIR=${INCUS_DIR:-/var/lib/incus}
export LXD_DIR INCUS_DIR
TIMEOUT=${SANDBOX_E2E_TIMEOUT:-120}

# The CLI of the daemon the sandbox came up with (tools/sandbox.sh records
# it: lxd or incus).
daemon_cli() {
    if [ "$(cat "$SANDBOX_DIR/backend" 2>/dev/null)" = incus ]; then
        incus "$@"
    else
        lxc "$@"
    fi
}
FLAVOR=sandbox.small
FLAVOR2=sandbox.medium
IMAGE=lxd-tiny
SERVER=e2e-$$
SERVER_ID=
CONTAINER=
# What the test made, removed at exit whatever happens.
MADE_SERVERS=()
MADE_IMAGES=()
MADE_FLAVORS=()
MADE_FIPS=()
MADE_KEYPAIRS=()
WORK=$(mktemp -d)
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
    for log in nova-compute nova-conductor nova-api; do
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
    local item
    if [ -f "$SANDBOX_DIR/openrc" ]; then
        for item in "$SERVER_ID" "${MADE_SERVERS[@]}"; do
            [ -n "$item" ] || continue
            openstack server delete --wait "$item" >/dev/null 2>&1 || true
        done
        for item in "${MADE_IMAGES[@]}"; do
            openstack image delete "$item" >/dev/null 2>&1 || true
            # The driver's LXD cache of it (pruned by nova's image cache
            # manager in time; the test tidies up its own at once).
            daemon_cli image delete "nova-image-$item" >/dev/null 2>&1 || true
        done
        for item in "${MADE_FLAVORS[@]}"; do
            openstack flavor delete "$item" >/dev/null 2>&1 || true
        done
        for item in "${MADE_FIPS[@]}"; do
            openstack floating ip delete "$item" >/dev/null 2>&1 || true
        done
        for item in "${MADE_KEYPAIRS[@]}"; do
            openstack keypair delete "$item" >/dev/null 2>&1 || true
        done
    fi
    rm -rf "$WORK"
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

# sandbox_up [ARGS...]: "tools/sandbox.sh up ARGS", unless
# SANDBOX_E2E_UP=0 says the caller has just brought the sandbox up as this
# check needs it (tools/run-tests.sh: a second "up" only re-checks).
sandbox_up() {
    if [ "${SANDBOX_E2E_UP:-1}" = 0 ] && [ -f "$SANDBOX_DIR/openrc" ]; then
        say "sandbox up: already up (SANDBOX_E2E_UP=0)"
        return 0
    fi
    "$SANDBOX" up "$@"
}

# server_field FIELD [SERVER]: one field of "openstack server show".
server_field() {
    openstack server show "${2:-$SERVER_ID}" -f value -c "$1"
}

# wait_server STATUS [SERVER]: until the server has STATUS and no task.
# One process polls the API (tools/sandbox/venv/wait_server.py): an
# "openstack server show" every half second would keep a core busy.
wait_server() {
    local want=$1 server=${2:-$SERVER_ID} out rc=0
    out=$(OS_CLOUD=sandbox OS_CLIENT_CONFIG_FILE=$SANDBOX_DIR/clouds.yaml \
        "$SANDBOX_DIR/venv/bin/python" "$SCRIPT_DIR/sandbox/venv" \
        wait_server "$server" "$want" "$TIMEOUT") || rc=$?
    case $rc in
        0) return 0 ;;
        3) fail "server $server went to ERROR: $out" ;;
        *) fail "server $server not $want after ${TIMEOUT}s ($out)" ;;
    esac
}

# The LXD state of a container (default: the server's; empty when it does
# not exist).
container_state() {
    daemon_cli list --format csv -c ns |
        awk -F, -v n="${1:-$CONTAINER}" '$1 == n {print $2}'
}

# expect_container STATE [NAME]
expect_container() {
    local want=$1 name=${2:-$CONTAINER} state i
    for ((i = 0; i < 20; i++)); do
        state=$(container_state "$name")
        [ "$state" = "$want" ] && return 0
        sleep 0.5
    done
    fail "container $name is '${state:-absent}' in LXD, expected $want"
}

# The container of a server, found by its uuid in every LXD project
# ("project,name" lines; none when it has no container).
containers_of() {
    daemon_cli list --all-projects --format csv -c en 2>/dev/null |
        grep -F -- "$1" || true
}

placement_idle() {
    local usage
    usage=$(openstack resource provider list -f value -c uuid |
        while read -r rp; do
            openstack resource provider usage show "$rp" -f value
        done | awk '$2 != 0')
    [ -z "$usage" ] || fail "resources still used in Placement: $usage"
}

allocations_json() {
    openstack resource provider allocation show "$SERVER_ID" -f json
}

# A snapshot through Nova and Glance (chunked upload): the image Glance
# serves must be the LXD image nova-compute exported, byte for byte, and
# boot.
check_snapshot() {
    local token snap start file size checksum sha512 got server2 c2
    token=e2e-$$-$RANDOM$RANDOM
    printf '%s\n' "$token" >"$WORK/marker"
    daemon_cli file push -q "$WORK/marker" "$CONTAINER/e2e-marker" ||
        fail "daemon_cli file push of a marker into $CONTAINER"
    start=$(date +%s%N)
    # --wait prints an empty progress line before the table.
    snap=$(openstack server image create --wait --name "$SERVER-snap" \
        "$SERVER_ID" -f value -c id | grep -Eo '^[0-9a-f-]{36}$') ||
        fail "openstack server image create $SERVER_ID failed"
    MADE_IMAGES+=("$snap")
    [ "$(openstack image show "$snap" -f value -c status)" = active ] ||
        fail "snapshot image $snap is not active"
    say "snapshot $snap active ($(since "$start")s)"
    file=$WORK/snapshot.img
    openstack image save --file "$file" "$snap" ||
        fail "openstack image save $snap"
    # The CLI shows os_hash_value among the properties.
    read -r size checksum sha512 <<<"$(openstack image show "$snap" -f json |
        python3 -c 'import json, sys
image = json.load(sys.stdin)
props = image.get("properties") or {}
print(*(image.get(k) or props.get(k) or "-"
        for k in ("size", "checksum", "os_hash_value")))')"
    got=$(stat -c %s "$file")
    [ "$got" = "$size" ] ||
        fail "snapshot $snap: Glance records $size bytes, serves $got"
    got=$(md5sum <"$file" | cut -d' ' -f1)
    [ "$got" = "$checksum" ] ||
        fail "snapshot $snap: Glance records md5 $checksum, data has $got"
    got=$(sha512sum <"$file" | cut -d' ' -f1)
    [ "$got" = "$sha512" ] ||
        fail "snapshot $snap: Glance records sha512 $sha512, data has $got"
    tar -tf "$file" metadata.yaml >/dev/null 2>&1 ||
        fail "snapshot $snap ($size bytes) is not an LXD image tarball"
    got=$(tar -xOf "$file" rootfs/e2e-marker 2>/dev/null || true)
    [ "$got" = "$token" ] ||
        fail "snapshot $snap lacks the file written into the server" \
            "(rootfs/e2e-marker: '${got}', expected '$token')"
    say "snapshot: $size bytes, md5 and sha512 as Glance records them," \
        "LXD image with the server's file"

    start=$(date +%s%N)
    server2=$(openstack server create --flavor "$FLAVOR" --image "$snap" \
        --nic none --wait "$SERVER-from-snap" -f value -c id) ||
        fail "openstack server create from snapshot $snap failed"
    MADE_SERVERS+=("$server2")
    wait_server ACTIVE "$server2"
    c2=$(containers_of "$server2" | cut -d, -f2)
    [ -n "$c2" ] || fail "no LXD container for server $server2"
    expect_container RUNNING "$c2"
    daemon_cli file pull -q "$c2/e2e-marker" "$WORK/marker2" ||
        fail "the file written before the snapshot is not in $c2"
    [ "$(cat "$WORK/marker2")" = "$token" ] ||
        fail "$c2/e2e-marker differs from what was written"
    say "server $server2 from the snapshot ACTIVE, holds the file" \
        "($(since "$start")s)"
    openstack server delete --wait "$server2" ||
        fail "openstack server delete $server2 failed"
    expect_container "" "$c2"
    openstack image delete "$snap" || fail "openstack image delete $snap"
}

# Resize to the second CPU flavor on the same host, then confirm.
check_resize() {
    local start cpu mem alloc
    start=$(date +%s%N)
    openstack server resize --flavor "$FLAVOR2" "$SERVER_ID" ||
        fail "openstack server resize --flavor $FLAVOR2"
    wait_server VERIFY_RESIZE
    openstack server resize confirm "$SERVER_ID" ||
        fail "openstack server resize confirm"
    wait_server ACTIVE
    expect_container RUNNING
    server_field flavor | grep -qF "'$FLAVOR2'" ||
        fail "server flavor after resize: $(server_field flavor)"
    cpu=$(daemon_cli config get "$CONTAINER" limits.cpu)
    mem=$(daemon_cli config get "$CONTAINER" limits.memory)
    [ "$cpu:$mem" = 2:256MiB ] ||
        fail "after resize to $FLAVOR2 the container has limits.cpu=$cpu" \
            "limits.memory=$mem, expected 2 and 256MiB"
    alloc=$(allocations_json)
    grep -q '"VCPU": 2' <<<"$alloc" ||
        fail "Placement allocation after resize: $alloc"
    say "resize to $FLAVOR2 confirmed: limits.cpu=$cpu" \
        "limits.memory=$mem, VCPU 2 in Placement ($(since "$start")s)"
}

# Shelve (the container goes, an image is kept) and unshelve.
check_shelve() {
    local start shelved
    start=$(date +%s%N)
    openstack server shelve "$SERVER_ID" || fail "openstack server shelve"
    wait_server SHELVED_OFFLOADED
    expect_container ""
    shelved=$(openstack image list --name "$SERVER-shelved" -f value -c ID)
    [ -n "$shelved" ] || fail "no shelve image $SERVER-shelved in Glance"
    MADE_IMAGES+=("$shelved")
    say "server shelved: SHELVED_OFFLOADED, container gone, image" \
        "$SERVER-shelved kept ($(since "$start")s)"
    start=$(date +%s%N)
    openstack server unshelve "$SERVER_ID" ||
        fail "openstack server unshelve"
    wait_server ACTIVE
    # On unshelve the container may get a new name: find it again.
    CONTAINER=$(containers_of "$SERVER_ID" | cut -d, -f2)
    [ -n "$CONTAINER" ] || fail "no LXD container after unshelve"
    expect_container RUNNING
    [ -z "$(openstack image list --name "$SERVER-shelved" -f value -c ID)" ] ||
        fail "shelve image $SERVER-shelved left in Glance after unshelve"
    say "server unshelved: ACTIVE, container $CONTAINER RUNNING" \
        "($(since "$start")s)"
}

# The API refuses bad lxd: flavor properties (extra-spec validation, at
# the microversion openrc sets).
check_bad_flavor() {
    local flavor=e2e-bad-$$ prop out
    openstack flavor create --vcpus 1 --ram 128 --disk 1 "$flavor" \
        >/dev/null || fail "openstack flavor create $flavor"
    MADE_FLAVORS+=("$flavor")
    for prop in lxd:processes=0 lxd:gpu_runtime=cuda lxd:no_such_key=1; do
        if out=$(openstack flavor set --property "$prop" "$flavor" 2>&1); then
            fail "flavor property $prop accepted" \
                "(OS_COMPUTE_API_VERSION=${OS_COMPUTE_API_VERSION:-unset})"
        fi
        grep -q '400' <<<"$out" ||
            fail "flavor property $prop: expected HTTP 400, got: $out"
        say "flavor property $prop refused: $(grep -o "Validation.*" \
            <<<"$out" | head -n 1 | cut -c1-120)"
    done
    [ "$(openstack flavor show "$flavor" -f value -c properties)" = "{}" ] ||
        fail "flavor $flavor got properties: $(openstack flavor show \
            "$flavor" -f value -c properties)"
    openstack flavor delete "$flavor" || fail "openstack flavor delete"
}

# "openstack server create" without --nic asks for networks=auto: with no
# network to give, Nova must refuse it clearly (HTTP 400), never with a 500,
# and create nothing.
# fixed_ip SERVER: its first address on the network "private".
fixed_ip() {
    openstack server show "$1" -f json -c addresses | python3 -c '
import json, sys
print(json.load(sys.stdin)["addresses"]["private"][0])'
}

# in_server SERVER_ID COMMAND...: run COMMAND in the server's container.
in_server() {
    local id=$1
    shift
    daemon_cli exec "nova-$id" -- "$@"
}

# until_ok TRIES COMMAND...: run COMMAND once a second until it succeeds.
until_ok() {
    local tries=$1 i
    shift
    for ((i = 0; i < tries; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 1
    done
    return 1
}

outside_ping() {
    ip netns exec sandbox-outside busybox ping -c 1 -W 1 "$1"
}

outside_silent() {
    ! outside_ping "$1"
}

has_address() {
    in_server "$1" ip -4 -o addr show eth0 | grep -qF " $2/"
}

# The admin project's default security group (every project has one
# named "default": the name alone is ambiguous to an admin).
default_group() {
    openstack security group list --project "$OS_PROJECT_NAME" \
        --project-domain Default -f value -c ID -c Name |
        awk '$2 == "default" { print $1 }'
}

icmp_rule() {
    openstack security group rule list "$(default_group)" --ingress \
        --protocol icmp --ethertype IPv4 -f value -c ID | head -n 1
}

# Networking the way a real cloud has it, with the real CLI: servers
# created without --nic land on the network "private"; they get their
# Neutron address by DHCP and ping each other; a floating IP answers ping
# from the outside namespace; the security group decides (ICMP rule out:
# no ping; back: ping); the metadata service answers from inside; delete
# leaves no port, OVS port, bridge or container.
check_networking() {
    local a b a_ip b_ip fip rule port ports start
    start=$(date +%s%N)
    for name in a b; do
        openstack server create --flavor "$FLAVOR" --image "$IMAGE" \
            --wait "$SERVER-net-$name" -f value -c id >/dev/null ||
            fail "server create without --nic failed:" \
                "$(server_field fault "$SERVER-net-$name" 2>/dev/null)"
        MADE_SERVERS+=("$SERVER-net-$name")
    done
    a=$(openstack server show "$SERVER-net-a" -f value -c id)
    b=$(openstack server show "$SERVER-net-b" -f value -c id)
    a_ip=$(fixed_ip "$a") b_ip=$(fixed_ip "$b")
    say "two servers without --nic ACTIVE on private ($a_ip, $b_ip)" \
        "after $(since "$start")s"
    until_ok 40 has_address "$a" "$a_ip" ||
        fail "server $a has no DHCP address $a_ip: $(in_server "$a" \
            ip -4 -o addr show eth0)"
    until_ok 40 has_address "$b" "$b_ip" ||
        fail "server $b has no DHCP address $b_ip"
    say "DHCP: both containers have their Neutron address"
    until_ok 20 in_server "$a" ping -c 1 -W 1 "$b_ip" ||
        fail "server $a_ip cannot ping $b_ip"
    say "ping $a_ip -> $b_ip"

    fip=$(openstack floating ip create public -f value \
        -c floating_ip_address) || fail "floating ip create failed"
    openstack server add floating ip "$a" "$fip" ||
        fail "server add floating ip failed"
    until_ok 30 outside_ping "$fip" ||
        fail "floating IP $fip does not answer ping from the outside"
    say "floating IP $fip answers ping from namespace sandbox-outside"

    rule=$(icmp_rule)
    [ -n "$rule" ] || fail "no ICMP rule in the default security group"
    openstack security group rule delete "$rule"
    if ! until_ok 20 outside_silent "$fip"; then
        fail "ping to $fip still answered without the ICMP rule"
    fi
    say "security group: ICMP rule removed, $fip no longer answers"
    openstack security group rule create "$(default_group)" --ingress \
        --protocol icmp --ethertype IPv4 --remote-ip 0.0.0.0/0 >/dev/null
    until_ok 30 outside_ping "$fip" ||
        fail "ping to $fip not answered after the ICMP rule came back"
    say "security group: ICMP rule back, $fip answers again"

    local metadata
    metadata=$(in_server "$a" sh -c 'printf "GET /openstack/latest/meta_data.json HTTP/1.0\r\n\r\n" |
        nc -w 10 169.254.169.254 80' 2>&1 || true)
    grep -qF "\"uuid\": \"$a\"" <<<"$metadata" ||
        fail "metadata service from inside $a: $(tail -c 300 <<<"$metadata")"
    say "metadata: 169.254.169.254 answers from inside with the server's uuid"

    ports=$(openstack port list --device-owner compute:nova -f value -c ID)
    openstack floating ip delete "$fip"
    openstack server delete --wait "$a" "$b" ||
        fail "openstack server delete failed"
    for port in $ports; do
        if openstack port show "$port" >/dev/null 2>&1; then
            fail "port $port left after delete"
        fi
        if ovs-vsctl list-ports br-int | grep -q "${port:0:11}"; then
            fail "OVS port of $port left on br-int"
        fi
        if ip link show "qbr${port:0:11}" >/dev/null 2>&1; then
            fail "bridge qbr${port:0:11} left after delete"
        fi
    done
    [ -z "$(containers_of "$a")$(containers_of "$b")" ] ||
        fail "containers left: $(containers_of "$a") $(containers_of "$b")"
    say "deleted: no port, OVS port, bridge or container left"
}

# broken_image KIND FILE FAULT_REGEX: a server from FILE (an image that
# cannot run) ends in ERROR with a fault matching FAULT_REGEX (it names the
# cause; never "No valid host"), and leaves no container in any LXD
# project, neither then nor after its delete.
broken_image() {
    local kind=$1 file=$2 want=$3 image server fault status i
    image=$(openstack image create --disk-format raw --container-format \
        bare --property hypervisor_type=lxc --file "$file" \
        "e2e-$kind-$$" -f value -c id) ||
        fail "openstack image create e2e-$kind-$$"
    MADE_IMAGES+=("$image")
    openstack server create --flavor "$FLAVOR" --image "$image" \
        --nic none "$SERVER-$kind" -f value -c id >/dev/null ||
        fail "openstack server create $SERVER-$kind (the API refused it)"
    server=$(openstack server show "$SERVER-$kind" -f value -c id)
    MADE_SERVERS+=("$server")
    for ((i = 0; i < TIMEOUT * 2; i++)); do
        status=$(server_field status "$server")
        [ "$status" = BUILD ] || break
        sleep 0.5
    done
    [ "$status" = ERROR ] ||
        fail "server $server ($kind image) is $status, not ERROR"
    fault=$(openstack server show "$server" -f json -c fault |
        python3 -c 'import json, sys
print((json.load(sys.stdin).get("fault") or {}).get("message", ""))')
    fault=${fault//$image/IMAGE}
    grep -Eqi "$want" <<<"$fault" ||
        fail "server $server ($kind image): the fault does not say what" \
            "went wrong (expected /$want/): '$fault'"
    [ -z "$(containers_of "$server")" ] ||
        fail "server $server ($kind image) in ERROR left containers:" \
            "$(containers_of "$server")"
    say "$kind image: server ERROR, fault '$(cut -c1-140 <<<"$fault")'," \
        "no container in any LXD project"
    openstack server delete --wait "$server" ||
        fail "openstack server delete $server"
    [ -z "$(containers_of "$server")" ] ||
        fail "containers of $server left after delete"
    openstack image delete "$image" || fail "openstack image delete $image"
}

# Two images that cannot run: one that is not an LXD image at all (refused
# before anything is made), and a well-formed LXD image whose root file
# system has no init (LXD creates the container, then cannot start it:
# the driver must remove it).
check_broken_image() {
    head -c 65536 /dev/urandom >"$WORK/random.img"
    broken_image random "$WORK/random.img" \
        'image IMAGE is unacceptable'
    mkdir -p "$WORK/noinit/rootfs/etc"
    printf 'root:x:0:0:root:/:/bin/sh\n' >"$WORK/noinit/rootfs/etc/passwd"
    printf 'architecture: %s\ncreation_date: %s\n' "$(uname -m)" \
        "$(date +%s)" >"$WORK/noinit/metadata.yaml"
    tar --numeric-owner -C "$WORK/noinit" -czf "$WORK/noinit.tar.gz" \
        metadata.yaml rootfs
    broken_image noinit "$WORK/noinit.tar.gz" '(refused|failed|unable|cannot) (to )?start'
}

# The diagnostics of a server at compute API 2.47, whose free-form answer
# names the accelerators bound into the container (the CLI shows only the
# 2.48+ fields).
diagnostics_247() {
    local token url
    token=$(openstack token issue -f value -c id)
    url=$(openstack endpoint list --service compute --interface public \
        -f value -c URL)
    curl -fsS -H "X-Auth-Token: $token" \
        -H 'OpenStack-API-Version: compute 2.47' "$url/servers/$1/diagnostics"
}

# A flavor whose extra specs ask for a resource class matching $1.
flavor_asking() {
    # one unit: not a pool's .x2/.x4 flavors (k cards in one group)
    openstack flavor list --long -f value -c Name -c Properties |
        awk -v rc="$1" 'index($0, "resources:" rc) && $1 ~ /^sandbox\./ &&
            $1 !~ /\.x[0-9]+$/ && !found { print $1; found = 1 }'
}

# boot_simulated FLAVOR NAME: boot and wait ACTIVE; sets SERVER_ID and
# CONTAINER.
boot_simulated() {
    local start
    start=$(date +%s%N)
    SERVER_ID=$(openstack server create --flavor "$1" --image "$IMAGE" \
        --nic none --wait "$2" -f value -c id) ||
        fail "openstack server create --flavor $1 failed:" \
            "$(server_field fault "$2" 2>/dev/null)"
    MADE_SERVERS+=("$SERVER_ID")
    [ "$(server_field status)" = ACTIVE ] ||
        fail "server $2 is $(server_field status): $(server_field fault)"
    CONTAINER=nova-$SERVER_ID
    expect_container RUNNING
    say "server $2 ($1) ACTIVE after $(since "$start")s;" \
        "container $CONTAINER RUNNING"
}

# The binding record the driver keeps in the container's config on the
# real daemon (user.nova_lxd_accel.devices).
binding_record() {
    daemon_cli config get "$CONTAINER" user.nova_lxd_accel.devices
}

provider_usage() {
    local rp
    rp=$(openstack resource provider allocation show "$SERVER_ID" -f value \
        -c resource_provider -c resources | awk -v rc="$1" 'index($0, rc) &&
            !found { print $1; found = 1 }')
    [ -n "$rp" ] || fail "no $1 allocation for $SERVER_ID in Placement"
    printf '%s\n' "$rp"
}

# wait_allocations_gone ID: nova's delete ends after the API stops showing
# the server (resource update, then its allocations removed).
wait_allocations_gone() {
    local i
    for ((i = 0; i < TIMEOUT * 5; i++)); do
        [ -z "$(openstack resource provider allocation show "$1" -f value \
            -c resource_provider 2>/dev/null)" ] && return 0
        sleep 0.2
    done
    fail "the allocations of $1 are still in Placement"
}

# bound_gpu: the PCI address of the whole GPU bound into $CONTAINER.
bound_gpu() {
    binding_record | grep -o '"pci": "[^"]*"' | head -n 1 | cut -d'"' -f4
}

# The recorded host's two identical A100s (one without LXD's nvidia
# object) both take the whole-GPU flavor "flavors" proposed; one deleted
# is bound again by the next boot at once, no periodic task in between.
check_whole_gpus_identical_and_freed_at_once() {
    local flavor first second third pci1 pci2 pci3 start
    flavor=$(flavor_asking PGPU)
    [ -n "$flavor" ] || fail "no whole-GPU flavor made from the simulated" \
        "host: $(openstack flavor list -f value -c Name | tr '\n' ' ')"
    boot_simulated "$flavor" "e2e-gpu1-$$"
    first=$SERVER_ID pci1=$(bound_gpu)
    boot_simulated "$flavor" "e2e-gpu2-$$"
    second=$SERVER_ID pci2=$(bound_gpu)
    if [ -z "$pci1" ] || [ -z "$pci2" ] || [ "$pci1" = "$pci2" ]; then
        fail "two $flavor servers did not get two GPUs: '$pci1' '$pci2'"
    fi
    say "two $flavor servers ACTIVE, on $pci1 and $pci2"
    start=$(date +%s%N)
    openstack server delete --wait "$first" ||
        fail "openstack server delete failed"
    wait_allocations_gone "$first"
    say "deleted $first, its allocations gone after $(since "$start")s"
    boot_simulated "$flavor" "e2e-gpu3-$$"
    third=$SERVER_ID pci3=$(bound_gpu)
    [ "$pci3" = "$pci1" ] ||
        fail "the boot after the delete got '$pci3', not the freed $pci1"
    say "booted again at once: ACTIVE on the freed $pci1"
    openstack server delete --wait "$second" "$third" ||
        fail "openstack server delete failed"
    SERVER_ID=
}

# The README's first commands, parsed from README.rst and run as they are
# written (the floating IP put in for "<the floating IP>"; ping tried again
# while the new floating IP's route settles), on the running sandbox: a
# new user's first minutes.
check_readme_quick_start() {
    local lines line before fips fip i
    mapfile -t lines < <(awk '/^       tools\/sandbox.sh up$/ { on = 1 }
        on && /^       [^ ]/ { sub(/^       /, ""); print; next }
        on { exit }' "$SCRIPT_DIR/../README.rst")
    [ "${#lines[@]}" -ge 5 ] ||
        fail "README.rst: the quick start's command block was not found"
    ! openstack server show s1 >/dev/null 2>&1 ||
        fail "a server s1 exists already: the README's commands would clash"
    MADE_SERVERS+=(s1)
    before=$(openstack floating ip list -f value -c "Floating IP Address" |
        sort)
    for line in "${lines[@]}"; do
        fips=$(openstack floating ip list -f value \
            -c "Floating IP Address" | sort)
        fip=$(comm -13 <(echo "$before") <(echo "$fips") | head -n 1)
        if [[ $line == *"<the floating IP>"* ]]; then
            [ -n "$fip" ] || fail "README: no floating IP was created"
            line=${line//<the floating IP>/$fip}
        fi
        say "README: $line"
        for ((i = 0; i < 10; i++)); do
            if (cd "$SCRIPT_DIR/.." && eval "$line") >"$WORK/readme.out" \
                2>&1; then
                break
            fi
            [[ $line == *" ping "* ]] || i=10
            sleep 3
        done
        [ "$i" -lt 10 ] || fail "the README's '$line' failed:" \
            "$(tail -n 5 "$WORK/readme.out")"
    done
    [ -z "$fip" ] || MADE_FIPS+=("$fip")
    openstack server delete --wait s1 || fail "openstack server delete s1"
    [ -z "$fip" ] || openstack floating ip delete "$fip"
    say "the README's ${#lines[@]} first commands ran as written"
}

# up --hardware NAME, then with the real CLI: the host reports the
# recorded GPUs, MIG devices and InfiniBand VFs; a MIG flavor and an
# InfiniBand VF flavor boot; the server's diagnostics, the container's
# binding record on the real daemon and Placement agree on which unit it
# got; delete frees it; everything says "simulated".
main_hardware() {
    local hardware=$1 status description flavor rp mig record usage
    trap cleanup EXIT
    say "sandbox up --hardware $hardware"
    sandbox_up --hardware "$hardware" ||
        fail "tools/sandbox.sh up --hardware $hardware failed (see above)"
    # shellcheck disable=SC1091
    . "$SANDBOX_DIR/openrc"
    status=$("$SANDBOX" status) || fail "sandbox status: $status"
    grep -q "^hardware: SIMULATED, recorded host $hardware " <<<"$status" ||
        fail "sandbox status does not say the hardware is simulated:" \
            "$status"
    grep -q "SIMULATED hardware '$hardware'" "$SANDBOX_DIR/log/hwproxy.log" ||
        fail "the LXD proxy's log does not say it simulates $hardware"
    say "status and the proxy's log say: SIMULATED hardware $hardware"

    flavor=$(flavor_asking CUSTOM_MIG_)
    [ -n "$flavor" ] || fail "no MIG flavor made from the simulated host:" \
        "$(openstack flavor list -f value -c Name | tr '\n' ' ')"
    description=$(openstack flavor show "$flavor" -f value -c description)
    case $description in
        *"MIG slice"*"SIMULATED hardware (recorded host $hardware)"*)
            say "flavor $flavor: $description" ;;
        *) fail "flavor $flavor's description: '$description'" ;;
    esac
    openstack flavor show "$flavor" -f value -c properties |
        grep -q "Accelerator:VirtualizationType.*MIG" ||
        fail "flavor $flavor has no Accelerator:* properties"

    boot_simulated "$flavor" "e2e-mig-$$"
    record=$(binding_record)
    mig=$(grep -o 'MIG-[0-9a-f-]*' <<<"$record" | head -n 1)
    [ -n "$mig" ] || fail "no MIG device in the binding record: $record"
    grep -qF "$mig" "$SANDBOX_DIR/data/hardware/nvidia-smi-L.txt" ||
        fail "$mig is not one of the recorded host's MIG devices"
    diagnostics_247 "$SERVER_ID" | grep -q "mig_uuid=$mig" ||
        fail "the diagnostics of $SERVER_ID do not name $mig:" \
            "$(diagnostics_247 "$SERVER_ID")"
    say "bound: $mig (binding record on the real daemon, diagnostics)"
    rp=$(provider_usage CUSTOM_MIG_)
    usage=$(openstack resource provider usage show "$rp" -f value |
        awk '/CUSTOM_MIG_/ { n += $2 } END { print n + 0 }')
    [ "$usage" = 1 ] || fail "Placement shows $usage MIG units used on $rp"
    say "Placement: 1 MIG unit used on provider $rp"

    openstack server delete --wait "$SERVER_ID" ||
        fail "openstack server delete failed"
    expect_container ""
    usage=$(openstack resource provider usage show "$rp" -f value |
        awk '/CUSTOM_MIG_/ { n += $2 } END { print n + 0 }')
    [ "$usage" = 0 ] || fail "$usage MIG units still used after delete"
    say "deleted: container gone, MIG usage 0 on $rp"
    SERVER_ID=

    check_whole_gpus_identical_and_freed_at_once

    flavor=$(flavor_asking CUSTOM_INFINIBAND_VF)
    if [ -n "$flavor" ]; then
        boot_simulated "$flavor" "e2e-ib-$$"
        record=$(binding_record)
        grep -q '"kind": "ib_vf"\|infiniband' <<<"$record" ||
            fail "no InfiniBand VF in the binding record: $record"
        say "bound: $(grep -o '"pci": "[^"]*"' <<<"$record" | head -n 1)"
        openstack server delete --wait "$SERVER_ID" ||
            fail "openstack server delete failed"
        expect_container ""
        SERVER_ID=
    fi
    if grep -q ' ERROR ' "$SANDBOX_DIR/log/hwproxy.log"; then
        fail "errors in the LXD proxy's log"
    fi
}

# --debian: a real distribution, the way a user gets in. Builds (or takes
# from the cache) the Debian 12 cloud-init image (tools/sandbox.sh image
# debian), then with the real CLI: a key pair, a server on "private" with
# --key-name and --user-data (a shell script), a floating IP; SSH from the
# outside namespace as "debian" with the key proves the key was injected,
# the marker file proves the user data ran; delete leaves nothing.
outside_ssh() {
    local address=$1
    shift
    ip netns exec sandbox-outside ssh -i "$WORK/key" -o BatchMode=yes \
        -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
        -o ConnectTimeout=5 -o LogLevel=ERROR "debian@$address" "$@"
}

main_debian() {
    trap cleanup EXIT
    say "sandbox up"
    sandbox_up || fail "tools/sandbox.sh up failed (see above)"
    # shellcheck disable=SC1091
    . "$SANDBOX_DIR/openrc"
    local start server fip marker keys i
    start=$(date +%s%N)
    "$SANDBOX" image debian || fail "tools/sandbox.sh image debian failed"
    say "image debian-12 in Glance ($(since "$start")s)"
    ssh-keygen -q -t ed25519 -N '' -C "e2e-$$" -f "$WORK/key"
    openstack keypair create --public-key "$WORK/key.pub" "e2e-$$" \
        >/dev/null || fail "keypair create failed"
    MADE_KEYPAIRS+=("e2e-$$")
    marker="user data ran for e2e-$$"
    printf '#!/bin/sh\necho "%s" > /var/tmp/e2e-marker\n' "$marker" \
        >"$WORK/user-data.sh"
    start=$(date +%s%N)
    openstack server create --flavor "$FLAVOR2" --image debian-12 \
        --key-name "e2e-$$" --user-data "$WORK/user-data.sh" \
        --network private --wait "$SERVER-debian" -f value -c id \
        >/dev/null || fail "server create from debian-12 failed:" \
            "$(server_field fault "$SERVER-debian" 2>/dev/null)"
    MADE_SERVERS+=("$SERVER-debian")
    server=$(openstack server show "$SERVER-debian" -f value -c id)
    say "server $server from debian-12 ACTIVE after $(since "$start")s"
    fip=$(openstack floating ip create public -f value \
        -c floating_ip_address) || fail "floating ip create failed"
    MADE_FIPS+=("$fip")
    openstack server add floating ip "$server" "$fip" ||
        fail "server add floating ip failed"
    start=$(date +%s%N)
    for ((i = 0; i < TIMEOUT / 5; i++)); do
        if outside_ssh "$fip" true 2>/dev/null; then
            break
        fi
        sleep 5
    done
    outside_ssh "$fip" true ||
        fail "no SSH as debian@$fip with the key pair's key" \
            "($(daemon_cli exec "nova-$server" -- cloud-init status 2>&1))"
    say "ssh debian@$fip from namespace sandbox-outside with the key pair" \
        "($(since "$start")s after ACTIVE)"
    keys=$(outside_ssh "$fip" cat .ssh/authorized_keys)
    grep -qF "$(cut -d' ' -f2 "$WORK/key.pub")" <<<"$keys" ||
        fail "the key pair's key is not in debian's authorized_keys"
    for ((i = 0; i < 30; i++)); do
        outside_ssh "$fip" cloud-init status 2>/dev/null |
            grep -q 'status: done' && break
        sleep 2
    done
    [ "$(outside_ssh "$fip" cat /var/tmp/e2e-marker 2>&1)" = "$marker" ] ||
        fail "the user data did not run: $(outside_ssh "$fip" \
            cloud-init status --long 2>&1 | tail -n 5)"
    say "cloud-init: key injected, user data ran (marker file)"
    openstack floating ip delete "$fip"
    openstack server delete --wait "$server" ||
        fail "openstack server delete failed"
    openstack keypair delete "e2e-$$"
    [ -z "$(containers_of "$server")" ] ||
        fail "container left: $(containers_of "$server")"
    placement_idle
    say "deleted: no container, no usage left"
}

# --mps: the quota'd shared GPU's limits in every process of the tenant.
main_mps() {
    trap cleanup EXIT
    local hardware=h200-shared flavor memory pipe server fip i
    say "sandbox up --hardware $hardware"
    sandbox_up --hardware "$hardware" ||
        fail "tools/sandbox.sh up --hardware $hardware failed (see above)"
    # shellcheck disable=SC1091
    . "$SANDBOX_DIR/openrc"
    "$SANDBOX" image debian || fail "tools/sandbox.sh image debian failed"
    flavor=$(openstack flavor list --long -f value -c Name -c Properties |
        awk 'index($0, "trait1:CUSTOM_GPU_SHARING_QUOTA") &&
             $1 ~ /^sandbox\./ && !found { print $1; found = 1 }')
    [ -n "$flavor" ] || fail "no MPS quota flavor made from $hardware:" \
        "$(openstack flavor list -f value -c Name | tr '\n' ' ')"
    memory=$(openstack flavor show "$flavor" -f json -c properties |
        python3 -c 'import json, sys
print(json.load(sys.stdin)["properties"]["lxd:gpu_memory_mb"])')
    pipe="$SANDBOX_DIR/data/hardware/mps/pipe-0000:00:06.0"
    ssh-keygen -q -t ed25519 -N '' -C "e2e-$$" -f "$WORK/key"
    openstack keypair create --public-key "$WORK/key.pub" "e2e-$$" \
        >/dev/null || fail "keypair create failed"
    MADE_KEYPAIRS+=("e2e-$$")
    server=$(openstack server create --flavor "$flavor" --image debian-12 \
        --key-name "e2e-$$" --network private --wait "$SERVER-mps" \
        -f value -c id) || fail "server create of $flavor failed:" \
            "$(server_field fault "$SERVER-mps" 2>/dev/null)"
    MADE_SERVERS+=("$server")
    say "server $server ($flavor: lxd:gpu_memory_mb=$memory) ACTIVE"
    fip=$(openstack floating ip create public -f value \
        -c floating_ip_address) || fail "floating ip create failed"
    MADE_FIPS+=("$fip")
    openstack server add floating ip "$server" "$fip" ||
        fail "server add floating ip failed"
    for ((i = 0; i < TIMEOUT / 5; i++)); do
        outside_ssh "$fip" true 2>/dev/null && break
        sleep 5
    done
    outside_ssh "$fip" true || fail "no SSH as debian@$fip"
    # the values the flavor asked for, not what the instance says it got
    MPS_ENV_EXPECT="CUDA_MPS_PIPE_DIRECTORY=$pipe CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=${memory}M" \
        "$SCRIPT_DIR/mps-env-check.sh" ip netns exec sandbox-outside \
        ssh -i "$WORK/key" -o BatchMode=yes -o StrictHostKeyChecking=no \
        -o UserKnownHostsFile=/dev/null -o ConnectTimeout=5 \
        -o LogLevel=ERROR "debian@$fip" ||
        fail "the MPS limits do not reach every process (see above)"
    say "the MPS pipe directory and memory limit reach SSH commands," \
        "login shells, systemd's services and cron's PAM session"
    openstack floating ip delete "$fip"
    openstack server delete --wait "$server" ||
        fail "openstack server delete failed"
    openstack keypair delete "e2e-$$"
    [ -z "$(containers_of "$server")" ] ||
        fail "container left: $(containers_of "$server")"
    say "deleted: no container left"
}

main() {
    if [ "${1:-}" = --mps ]; then
        main_mps
        return
    fi
    if [ "${1:-}" = --hardware ]; then
        main_hardware "${2:?usage: $0 [--hardware NAME]}"
        return
    fi
    if [ "${1:-}" = --debian ]; then
        main_debian
        return
    fi
    trap cleanup EXIT
    say "sandbox up"
    # one compute host, whatever a previous run left (the gate's multinode
    # stage ends with two): its checks look for containers on this daemon
    sandbox_up --hosts 1 || fail "tools/sandbox.sh up failed (see above)"
    # shellcheck disable=SC1091
    . "$SANDBOX_DIR/openrc"

    # flavors people can read: a description in plain words (2.55+)
    local description
    description=$(openstack flavor show "$FLAVOR" -f value -c description)
    case "$description" in
        "1 vCPU, 128 MiB RAM, 1 GiB disk: "*)
            say "flavor $FLAVOR: $description" ;;
        *) fail "flavor $FLAVOR has no plain description: '$description'" ;;
    esac

    local before after start
    before=$(daemon_cli list --format csv -c n | sort)
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

    after=$(daemon_cli list --format csv -c n | sort)
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

    check_snapshot
    check_resize
    check_shelve

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
    placement_idle
    say "Placement: no allocation and no usage left"
    SERVER_ID=

    check_bad_flavor
    check_networking
    check_readme_quick_start
    check_broken_image
    placement_idle
    say "Placement: no usage left"
}

main "$@"
