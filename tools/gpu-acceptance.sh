#!/bin/bash
# GPU acceptance on a real GPU host: the driver's own claim, GPU probe and
# release gate (tools/gpu_acceptance.py) against the local LXD or Incus and
# the host's NVIDIA GPUs. Prints PASS, FAIL or SKIP (with the reason) per
# check and exits non-zero when one fails:
#   - the inventory reports the GPUs, the probe reads them, none is held;
#   - the claim binds one whole GPU by its PCI address only;
#   - a CUDA program in the container holding memory is seen by the probe
#     on that GPU and on no other;
#   - deleting the container makes the GPU verified clean within 2 s;
#   - a CUDA process on the host keeps a released GPU reserved, named, and
#     the claim refuses it; clean again once it ends;
#   - with nvidia-cuda-mps-control: two containers share the GPU through
#     MPS with lxd:gpu_memory_mb 1024; 2048 MiB is refused, 512 given;
#   - MIG (no MIG changes on a lent machine) is SKIPped with why.
#
# Usage: tools/gpu-acceptance.sh [--prepare DIR] [-- ARGS of gpu_acceptance.py]
#   --prepare DIR   on a machine with PyPI: put the Python packages the
#                   driver's code imports into DIR/site (about 53 MB,
#                   12.5 MB as a tar.gz) to carry to the GPU host.
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
[ "${1:-}" = -- ] && shift
site=${GPU_ACCEPTANCE_SITE:-./gpu-acceptance-site}
export PYTHONPATH=$repo${site:+:$site}
exec python3 "$repo/tools/gpu_acceptance.py" --lxc "${LXC:-lxc}" "$@"
