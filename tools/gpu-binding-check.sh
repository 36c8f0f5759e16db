#!/bin/bash
# Check, on a real GPU host, that the device the driver gives a container
# for a whole GPU (gpu gputype=physical pci=<address>: the binding of a PGPU
# allocation) reaches that GPU and no other, and that LXD or Incus refuses
# a GPU that is not there. Also saves the host's captures (LXD's
# /1.0/resources and nvidia-smi's outputs with the probe's own fields) for
# `nova-lxd-accel inventory --resources-file ... --nvidia-smi-list ...`.
#
# Usage: gpu-binding-check.sh [--image ALIAS] [--out DIR] [--pci ADDRESS]
#   --image  a local image alias to start the test containers from
#            (default: tiny, as tools/build-tiny-image.sh makes it)
#   --out    where the captures go (default: ./gpu-binding-check)
#   --pci    check this GPU only (default: every NVIDIA GPU LXD lists)
# Environment: LXC=incus for Incus (default: lxc).
#
# nvidia-smi runs inside the containers from the host's own files, mounted
# read-only: the host's loader, libc and NVIDIA libraries. A container
# sees a GPU only through the /dev nodes its gpu device gives it, so
# "nvidia-smi lists this GPU" inside is the check that the binding works.
# The containers are deleted at the end, also on failure.
set -u
LXC=${LXC:-lxc}
IMAGE=tiny
OUT_DIR=./gpu-binding-check
ONLY_PCI=
while [ $# -gt 0 ]; do
    case $1 in
        --image) IMAGE=$2; shift 2 ;;
        --out) OUT_DIR=$2; shift 2 ;;
        --pci) ONLY_PCI=$2; shift 2 ;;
        *) echo "usage: $0 [--image ALIAS] [--out DIR] [--pci ADDRESS]" >&2
           exit 2 ;;
    esac
done
for cmd in "$LXC" nvidia-smi python3; do
    command -v "$cmd" >/dev/null || {
        echo "gpu-binding-check: '$cmd' not found" >&2; exit 2; }
done
mkdir -p "$OUT_DIR"
PREFIX=gpucheck-$$
FAILED=0
pass() { echo "PASS  $*"; }
fail() { echo "FAIL  $*"; FAILED=$((FAILED + 1)); }
cleanup() {
    for name in $("$LXC" list --format csv -c n 2>/dev/null \
                  | grep "^$PREFIX-"); do
        "$LXC" delete --force "$name" >/dev/null 2>&1
    done
}
trap cleanup EXIT

echo "== captures in $OUT_DIR"
"$LXC" query /1.0/resources >"$OUT_DIR/resources.json" || {
    echo "gpu-binding-check: '$LXC query /1.0/resources' failed" >&2; exit 1; }
nvidia-smi -L >"$OUT_DIR/nvidia-smi-L.txt"
nvidia-smi -q >"$OUT_DIR/nvidia-smi-q.txt"
# the host probe's field list (nova_lxd_accel/accel/health/probe.py FIELDS)
nvidia-smi --format=csv --query-gpu=index,pci.bus_id,uuid,name,memory.total,memory.used,utilization.gpu,ecc.errors.uncorrected.volatile.total,retired_pages.pending,mig.mode.current,remapped_rows.pending,remapped_rows.failure \
    >"$OUT_DIR/nvidia-smi-query-gpu.csv"

# "pci_address card_name" of each NVIDIA GPU LXD lists
GPUS=$(python3 - "$OUT_DIR/resources.json" "$ONLY_PCI" <<'EOF'
import json, sys
cards = json.load(open(sys.argv[1])).get('gpu', {}).get('cards') or []
for card in cards:
    if card.get('vendor_id') != '10de' or not card.get('pci_address'):
        continue
    if sys.argv[2] and card['pci_address'] != sys.argv[2]:
        continue
    print(card['pci_address'], (card.get('nvidia') or {}).get('card_name', ''))
EOF
)
[ -n "$GPUS" ] || { echo "gpu-binding-check: LXD lists no NVIDIA GPU" >&2; exit 1; }
while read -r line; do echo "GPU   $line"; done <<<"$GPUS"

# the host files nvidia-smi needs, each directory mounted read-only
SMI=$(readlink -f "$(command -v nvidia-smi)")
LOADER=$(readlink -f /lib64/ld-linux-x86-64.so.2)
LIBC=$(ldd "$SMI" | awk '$1 == "libc.so.6" {print $3}')
NVML=$(ldconfig -p | awk '/libnvidia-ml.so.1 .*x86-64/ {print $NF; exit}')
[ -n "$NVML" ] || NVML=$(find /usr/local/nvidia /usr/lib /usr/lib64 \
    -name 'libnvidia-ml.so.1' 2>/dev/null | head -n 1)
DIRS=$(printf '%s\n' "$(dirname "$SMI")" "$(dirname "$LOADER")" \
       "$(dirname "$(readlink -f "$LIBC")")" "$(dirname "$NVML")" | sort -u)
host_files() {
    local name=$1 i=0 dir
    for dir in $DIRS; do
        "$LXC" config device add "$name" "host$i" disk source="$dir" \
            path="/run/host$i" readonly=true >/dev/null || return 1
        i=$((i + 1))
    done
}
container_smi() {
    local name=$1 i=0 dir paths='' smi='' loader=''; shift
    for dir in $DIRS; do
        paths=$paths${paths:+:}/run/host$i
        [ "$dir" = "$(dirname "$SMI")" ] && smi=/run/host$i/$(basename "$SMI")
        [ "$dir" = "$(dirname "$LOADER")" ] \
            && loader=/run/host$i/$(basename "$LOADER")
        i=$((i + 1))
    done
    "$LXC" exec "$name" -- "$loader" --library-path "$paths" "$smi" "$@"
}
nodes() { "$LXC" exec "$1" -- sh -c 'ls /dev/nvidia[0-9]* 2>/dev/null' \
          | xargs -n1 basename 2>/dev/null | sort | tr '\n' ' '; }
new_container() {
    "$LXC" init -q "$IMAGE" "$1" >/dev/null && host_files "$1"
}

echo "== the driver's device for each GPU: gpu gputype=physical pci=<address>"
while read -r pci card; do
    name=$PREFIX-${pci//[:.]/-}
    if ! new_container "$name" \
        || ! "$LXC" config device add "$name" nova-gpu0 gpu \
             gputype=physical pci="$pci" >/dev/null \
        || ! "$LXC" start "$name"; then
        fail "$pci: the container did not start"; continue
    fi
    seen=$(nodes "$name")
    if [ "$seen" = "$card " ]; then pass "$pci: /dev/$card and no other GPU node"
    else fail "$pci: GPU nodes '$seen', expected '$card'"; fi
    listed=$(container_smi "$name" --query-gpu=pci.bus_id --format=csv,noheader)
    if [ "$(echo "$listed" | tr 'A-F' 'a-f' | sed 's/^0000//')" = "$pci" ]; then
        pass "$pci: nvidia-smi in the container lists this GPU only"
    else fail "$pci: nvidia-smi in the container listed '$listed'"; fi
    "$LXC" stop --force "$name"
    "$LXC" config device remove "$name" nova-gpu0 >/dev/null
    "$LXC" start "$name"
    if [ -z "$(nodes "$name")" ] && ! container_smi "$name" -L >/dev/null 2>&1
    then pass "$pci: after the device is removed the container has no GPU"
    else fail "$pci: the GPU stayed after its device was removed"; fi
    "$LXC" delete --force "$name" >/dev/null
done <<<"$GPUS"

echo "== a container without a gpu device"
name=$PREFIX-none
if new_container "$name" && "$LXC" start "$name"; then
    if [ -z "$(nodes "$name")" ] && ! container_smi "$name" -L >/dev/null 2>&1
    then pass "no gpu device: no GPU node, nvidia-smi finds no GPU"
    else fail "a container without a gpu device reaches a GPU"; fi
else
    fail "the control container did not start"
fi

echo "== a GPU that is not there"
name=$PREFIX-ghost
new_container "$name"
"$LXC" config device add "$name" nova-gpu0 gpu gputype=physical \
    pci=0000:ff:1f.7 >/dev/null
if error=$("$LXC" start "$name" 2>&1); then
    fail "a gpu device for 0000:ff:1f.7 started"
else
    pass "pci=0000:ff:1f.7 refused: $(echo "$error" | grep -m 1 '^Error:')"
fi

echo
if [ "$FAILED" -eq 0 ]; then echo "gpu-binding-check: all checks passed"
else echo "gpu-binding-check: $FAILED check(s) failed"; fi
[ "$FAILED" -eq 0 ]
