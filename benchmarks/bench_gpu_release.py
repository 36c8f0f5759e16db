#!/usr/bin/env python3
# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

"""How soon a freed GPU unit can be allocated again, in the sandbox.

On the sandbox's SIMULATED GPU host (the recorded host
``h100-mig-a100-ib`` with one A100 shared in 2 slots: this script brings
it up as ``up --hardware <its own copy>``), for a whole GPU, a MIG slice
and a slot of the shared GPU, each ``--iterations`` times: boot a server of
a flavor asking for one unit, wait ACTIVE, ``DELETE`` it, then measure from
the DELETE request

* ``gone``: the Compute API answers 404 for the server;
* ``free``: Placement offers the unit again: its provider's
  ``total - reserved - used`` for the resource class is back to what it was
  before the boot (the driver verified the unit clean at release and nova's
  resource update sent ``reserved`` without it, and nova removed the
  allocation).

It prints median and p95 of both, and ``free - gone``: what the release
adds after nova's API stops showing the server (aim: 2 s or less). The
simulated nvidia-smi answers with idle GPUs, so every unit is clean at
release; the figures are the driver's and nova's own. Run it as root with
any Python 3 (the API part re-runs itself in the sandbox venv)::

    python3 benchmarks/bench_gpu_release.py --iterations 5

``--keep`` leaves the sandbox on this simulated host; otherwise it is put
back on ``up --hardware h100-mig-a100-ib``.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
import _common  # noqa: E402  (this folder, the script's own)
# the sandbox's package: standard library only
from tools.sandbox import catalogue  # noqa: E402
from tools.sandbox import layout  # noqa: E402
SANDBOX_SH = os.path.join(REPO, 'tools', 'sandbox.sh')
LAYOUT = layout.Layout.from_environ()
RECORDED = os.path.join(REPO, 'tools', 'sandbox', 'hardware',
                        'h100-mig-a100-ib')
#: the A100 that LXD names only by its product id: shared in 2 slots
SHARED = '0000:85:00.0:2'
IMAGE = catalogue.IMAGE_NAME
#: kind -> (resource class, extra specs of the bench's own flavor)
KINDS = {
    'whole GPU': ('PGPU', {'resources:PGPU': '1'}),
    'MIG slice': ('CUSTOM_MIG_1G_10GB',
                  {'resources:CUSTOM_MIG_1G_10GB': '1'}),
    'shared slot': ('CUSTOM_GPU_SHARE', {'resources:CUSTOM_GPU_SHARE': '1'}),
}


# --- orchestration (any Python 3, stdlib only) ------------------------------

def bench_host(work):
    """A copy of the recorded host with one A100 shared."""
    host = os.path.join(work, 'h100-mig-a100-ib-shared')
    shutil.rmtree(host, ignore_errors=True)
    shutil.copytree(RECORDED, host)
    with open(os.path.join(host, 'lxd_accelerators.conf'), 'w') as f:
        f.write('shared_gpus = %s\n' % SHARED)
    return host


def percentile(values, fraction):
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))
    return ordered[index]


def orchestrate(args):
    work = os.path.join(LAYOUT.dir, 'data', 'bench-gpu-release')
    os.makedirs(work, exist_ok=True)
    subprocess.run(['bash', SANDBOX_SH, 'up', '--hardware',
                    bench_host(work)], check=True)
    try:
        results = _common.measure_in_venv(LAYOUT.dir, __file__,
                                          args.iterations)
    finally:
        if not args.keep:
            subprocess.run(['bash', SANDBOX_SH, 'up', '--hardware',
                            'h100-mig-a100-ib'], check=True)
    print('\nDELETE to unit allocatable again, sandbox on the SIMULATED '
          'host h100-mig-a100-ib (A100 %s shared), %d iterations each'
          % (SHARED.rsplit(':', 1)[0], args.iterations))
    print('%-12s %9s %9s %9s %9s %12s %12s' % (
        'unit', 'gone p50', 'gone p95', 'free p50', 'free p95',
        'free-gone p50', 'free-gone p95'))
    for kind, rows in results.items():
        gone = [r['gone'] for r in rows]
        free = [r['free'] for r in rows]
        after = [r['free'] - r['gone'] for r in rows]
        print('%-12s %8.2fs %8.2fs %8.2fs %8.2fs %11.2fs %11.2fs' % (
            kind, statistics.median(gone), percentile(gone, 0.95),
            statistics.median(free), percentile(free, 0.95),
            statistics.median(after), percentile(after, 0.95)))
    return 0


# --- measurements (inside the sandbox venv) ---------------------------------

class Placement(object):

    def __init__(self, conn):
        self._conn = conn

    def _get(self, path):
        response = self._conn.placement.get(
            path, headers={'OpenStack-API-Version': 'placement 1.28'})
        response.raise_for_status()
        return response.json()

    def free(self, rc):
        """{provider uuid: total - reserved - used} for class ``rc``."""
        out = {}
        for rp in self._get('/resource_providers')['resource_providers']:
            inventories = self._get('/resource_providers/%s/inventories'
                                    % rp['uuid'])['inventories']
            if rc not in inventories:
                continue
            usages = self._get('/resource_providers/%s/usages'
                               % rp['uuid'])['usages']
            inv = inventories[rc]
            out[rp['uuid']] = (inv['total'] - inv['reserved'] -
                               usages.get(rc, 0))
        return out


def measure_kind(conn, placement, image, kind, rc, specs, iterations):
    name = 'bench.release.%s' % rc.lower()
    flavor = conn.compute.find_flavor(name)
    if flavor is None:
        flavor = conn.compute.create_flavor(name=name, ram=128, vcpus=1,
                                            disk=1, is_public=True)
        conn.compute.create_flavor_extra_specs(flavor, specs)
    rows = []
    for index in range(iterations):
        before = placement.free(rc)
        if not any(before.values()):
            raise RuntimeError('no %s free before iteration %d: %s'
                               % (rc, index, before))
        server = conn.compute.create_server(
            name='bench-release-%d-%d' % (os.getpid(), index),
            image_id=image.id, flavor_id=flavor.id, networks='none')

        def is_active():
            status = conn.compute.get_server(server.id).status
            if status == 'ERROR':
                raise RuntimeError('%s server %s went to ERROR: %s' % (
                    kind, server.id, conn.compute.get_server(
                        server.id).fault))
            return status == 'ACTIVE'

        _common.wait(is_active)
        started = time.monotonic()
        conn.compute.delete_server(server.id)
        gone = _common.wait(lambda: _common.server_gone(conn, server.id) and
                            time.monotonic()) - started
        free = _common.wait(lambda: placement.free(rc) == before and
                            time.monotonic()) - started
        rows.append({'gone': gone, 'free': free})
        print('%s %d: gone %.2fs, allocatable again %.2fs' % (
            kind, index, gone, free), file=sys.stderr)
    conn.compute.delete_flavor(flavor)
    return rows


def measure(args):
    conn = _common.connect(LAYOUT.dir)
    placement = Placement(conn)
    image = conn.image.find_image(IMAGE, ignore_missing=False)
    results = {}
    for kind, (rc, specs) in KINDS.items():
        results[kind] = measure_kind(conn, placement, image, kind, rc, specs,
                                     args.iterations)
    print(json.dumps(results))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--iterations', type=int, default=5)
    parser.add_argument('--keep', action='store_true',
                        help='leave the sandbox on the bench\'s host')
    return _common.orchestrate_or_measure(parser, argv, orchestrate, measure)


if __name__ == '__main__':
    sys.exit(main())
