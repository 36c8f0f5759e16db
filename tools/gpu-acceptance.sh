#!/bin/bash
# GPU acceptance on a real GPU host: the driver's own claim, GPU probe and
# release gate (tools/gpu_acceptance.py) against the local LXD or Incus and
# the host's NVIDIA GPUs. Each check prints PASS, FAIL or SKIP with its
# reason:
#   - the inventory reports the GPUs, the probe reads them, none is held;
#   - the claim binds one whole GPU by its PCI address only;
#   - a CUDA program in the container holding memory is seen by the probe
#     on that GPU and on no other;
#   - deleting the container makes the GPU verified clean within 2 s;
#   - dirty to clean with a CUDA process held on the host: the released
#     GPU stays dirty while it runs, the process named in the reason,
#     reserved 1 in the gate's apply() and in nova's provider tree, refused
#     by the claim; verified clean (reserved 0) once it is killed, with the
#     time from its exit;
#   - MIG only where it is already on (mig.mode.current Enabled, MIG
#     devices in nvidia-smi -L): a slice claimed, released, verified clean.
#     MIG settings are never changed (no nvidia-smi mig, no -mig): SKIP
#     with the reason when MIG is off;
#   - a shared GPU, with nvidia-cuda-mps-control: two containers share it
#     with lxd:gpu_memory_mb 1024 (2048 MiB refused, 512 given); a slot
#     released while a host process is on the card stays reserved, named,
#     then clean once it ends; the last slot's release verified clean.
#     Then a FACT (not counted): whether an MPS client works with the pipe
#     directory mounted read-only (mps_pipe_readonly=works|fails), for
#     issue 43's "read-only if MPS allows it";
#     SKIP with the reason without MPS or a C compiler;
#   - a failing nvidia-smi (a second conf; a shim exiting 1 first on PATH,
#     then one hanging past nvidia_smi_timeout): after
#     probe_failures_before_hold failed probes, not before, the GPU is held
#     as unprobeable (reserved = total, trait CUSTOM_GPU_UNPROBEABLE), a
#     unit released meanwhile is not declared clean, and the real
#     nvidia-smi answering again lifts the hold and frees the unit.
# Strict: a SKIP proves nothing. The exit status is 0 only when every
# check passed; 1 when one failed; 2 when one was skipped (or none ran).
# --allow-skips accepts skips, never a failure. The last line is always
# "proven N of M": N checks passed of the M run, skipped ones included.
#
# Usage: tools/gpu-acceptance.sh --prepare DIR
#        tools/gpu-acceptance.sh [--allow-skips] [--] [ARGS of
#                                gpu_acceptance.py: --image, --endpoint,
#                                --nvidia-smi, --release-wait, ...]
#   --prepare DIR   on a machine with PyPI: put the Python packages the
#                   driver's code imports into DIR/site (about 53 MB,
#                   12.5 MB as a tar.gz) to carry to the GPU host.
#   --allow-skips   exit 0 when no check failed even if some were skipped
#                   (an option of gpu_acceptance.py, passed on).
# Environment:
#   GPU_ACCEPTANCE_SITE  that DIR/site on the GPU host (default:
#                        ./gpu-acceptance-site); not needed where the
#                        project is installed
#   LXC=incus            for Incus (default: lxc)
# Needs on the GPU host: python3 (3.10 or later), nvidia-smi, a C compiler
# for the CUDA holder (cc, gcc or nvcc; without one its checks are
# SKIPped), the daemon running with an image "tiny" (tools/
# build-tiny-image.sh), and root.
set -eu
repo=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" = --prepare ]; then
    dir=${2:?usage: $0 --prepare DIR}
    mkdir -p "$dir/site"
    # what nova_lxd_accel's client, accel and conf import (no compiled
    # extension beyond cryptography's and cffi's wheels for this Python)
    python3 -m pip install -q --target "$dir/site" \
        -c "$repo/constraints.txt" --no-deps nova pylxd os-traits \
        os-resource-classes oslo.concurrency oslo.config oslo.context \
        oslo.i18n oslo.log oslo.serialization oslo.utils debtcollector \
        fasteners iso8601 netaddr pbr requests requests-toolbelt rfc3986 \
        stevedore typing-extensions urllib3 webob ws4py certifi \
        charset-normalizer idna python-dateutil six cryptography cffi \
        pycparser pyopenssl wrapt packaging pyparsing psutil msgpack \
        tzdata
    rm -rf "$dir/site/nova/tests" "$dir/site/bin"
    find "$dir/site" -name __pycache__ -prune -exec rm -rf {} +
    du -sh "$dir/site"
    exit 0
fi
# Every argument goes to gpu_acceptance.py (--allow-skips included, before
# or after the --), but the first lone --, which only separates them here.
args=()
dashes=
for arg in "$@"; do
    if [ "$arg" = -- ] && [ -z "$dashes" ]; then
        dashes=1
        continue
    fi
    args+=("$arg")
done
# MIG capability mode, for doctor's mig-capabilities check (advice/diagnosis.py
# assumes these files): printed as FACT lines, not counted. Confirm that
# nv_cap_enable_devfs reads 1, each capability file names a
# DeviceFileMinor and its /dev/nvidia-caps/nvidia-capN node exists.
if nvidia-smi --query-gpu=mig.mode.current --format=csv,noheader \
        2>/dev/null | grep -q Enabled; then
    caps=/proc/driver/nvidia/capabilities/mig
    echo "FACT nv_cap_enable_devfs=$(cat \
        /sys/module/nvidia/parameters/nv_cap_enable_devfs 2>/dev/null \
        || echo absent)"
    for file in "$caps/config" "$caps/monitor"; do
        minor=$(sed -n 's/^DeviceFileMinor: *//p' "$file" 2>/dev/null || true)
        node=/dev/nvidia-caps/nvidia-cap${minor:-?}
        [ -c "$node" ] && state=present || state=missing
        echo "FACT $file DeviceFileMinor=${minor:-absent} $node $state"
    done
fi
site=${GPU_ACCEPTANCE_SITE:-./gpu-acceptance-site}
export PYTHONPATH=$repo${site:+:$site}
exec python3 "$repo/tools/gpu_acceptance.py" --lxc "${LXC:-lxc}" \
    ${args[@]+"${args[@]}"}
