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

"""The GPU panel's read against a real Placement, served over HTTP.

Starts Placement's own WSGI application (noauth2, sqlite in a temporary
directory, configured as Placement's PlacementFixture configures it) on
127.0.0.1 in a thread, fills it through Placement's REST API with
``--hosts`` compute nodes (default 20) of ``--gpus`` GPUs each (default 8),
named, inventoried and traited as the driver reports them (whole GPUs and
MIG-split ones, one GPU held unhealthy) beside a Neutron agent's nested
provider, with about half of the units allocated to servers; then times,
over ``--iterations`` runs (default 5), what the panel does per page:
``placement.read`` (the listing, then each GPU provider's inventories,
traits and allocations) and ``fleet.build``, beside the baseline of one
``GET /resource_providers``. The reads are answered by ``--workers``
Placement processes (default: one per CPU, as DevStack runs Placement's
uWSGI) forked on one listening socket, so the panel's client does not share
Python's lock with the server. Then the panel as it runs, with its cache
(each card's inventories kept by provider generation; allocations always
read), after ``--changed`` GPU providers (default 16, a tenth) were
written to between two pages. Prints the counts, the medians and maxima,
the baseline's median and the ratios, measured in this one run (nothing
asserted). Usage::

    .tox/py3/bin/python benchmarks/bench_gpu_fleet.py [--hosts 20]
        [--gpus 8] [--iterations 5] [--changed 16] [--workers N]
"""

import argparse
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from keystoneauth1 import session as ks_session  # noqa: E402
from keystoneauth1 import token_endpoint  # noqa: E402

import _common  # noqa: E402  (this folder, the script's own)
from nova_lxd_accel.accel.health import gate  # noqa: E402
from nova_lxd_accel.accel.inventory import provider_tree  # noqa: E402
from nova_lxd_accel_dashboard import fleet  # noqa: E402
from nova_lxd_accel_dashboard import placement  # noqa: E402

#: a trait the bench adds and removes to change a provider
TOUCHED = 'CUSTOM_BENCH_TOUCHED'
PROJECTS = ['%032x' % (0xa11ce + n) for n in range(4)]
USER = '%032x' % 0xb0b

#: (model trait suffix, product id, CUDA cc, resource class -> total)
GPU_KINDS = [
    ('NVIDIA_H100_80GB_HBM3', '2330', '9_0', {'CUSTOM_MIG_1G_10GB': 7}),
    ('NVIDIA_H100_80GB_HBM3', '2330', '9_0', {
        'CUSTOM_MIG_3G_40GB': 1, 'CUSTOM_MIG_2G_20GB': 1,
        'CUSTOM_MIG_1G_10GB': 2}),
    ('NVIDIA_A100_SXM4_80GB', '20B2', '8_0', {'PGPU': 1}),
    ('NVIDIA_H100_80GB_HBM3', '2330', '9_0', {'PGPU': 1}),
]


class _Counting(object):
    """WSGI middleware counting the requests Placement answers.

    The count is shared memory: forked workers add to it too.
    """

    def __init__(self, app):
        self.app = app
        self._count = multiprocessing.Value('q', 0)

    @property
    def count(self):
        return self._count.value

    def __call__(self, environ, start_response):
        with self._count.get_lock():
            self._count.value += 1
        return self.app(environ, start_response)


class _Filler(_common.PlacementWriter):
    """The writer, keeping each GPU provider's traits to change them."""

    def __init__(self, endpoint):
        super().__init__(endpoint)
        #: GPU provider uuid -> its traits
        self.gpu_traits = {}

    def bump(self, rp):
        """Change a GPU provider's traits: its generation moves.

        As any change of its inventories, traits or allocations moves it
        (the trait :data:`TOUCHED` is added, or removed when there).
        """
        self.refresh(rp)
        self.gpu_traits[rp] = self.gpu_traits[rp] ^ {TOUCHED}
        self.traits(rp, self.gpu_traits[rp])


def fill(endpoint, hosts, gpus):
    """The fleet, through the REST API.

    :returns: (servers as the panel maps them, GPU providers made).
    """
    filler = _Filler(endpoint)
    classes = {rc for kind in GPU_KINDS for rc in kind[3]
               if rc.startswith('CUSTOM_')}
    for rc in sorted(classes):
        filler.ensure('resource_classes', rc)
    for trait in sorted({'CUSTOM_GPU_MODEL_%s' % k[0] for k in GPU_KINDS} |
                        {'CUSTOM_GPU_PRODUCT_10DE_%s' % k[1]
                         for k in GPU_KINDS} |
                        {'CUSTOM_CUDA_CC_%s' % k[2] for k in GPU_KINDS} |
                        {'CUSTOM_GPU_VENDOR_10DE', gate.TRAIT_UNHEALTHY,
                         TOUCHED}):
        filler.ensure('traits', trait)
    servers, made, n = {}, 0, 0
    for h in range(hosts):
        host = 'cn-gpu-%03d' % h
        root = filler.provider(host)
        filler.inventories(root, {
            'VCPU': provider_tree.inventory_record(128),
            'MEMORY_MB': provider_tree.inventory_record(1024 * 1024),
            'DISK_GB': provider_tree.inventory_record(7000)})
        # another service's nested provider, which the panel never reads
        agent = filler.provider(host + ':Open vSwitch agent', root)
        filler.inventories(agent, {'NET_BW_EGR_KILOBIT_PER_SEC':
                                   provider_tree.inventory_record(10000000)})
        for g in range(gpus):
            model, product, cuda, totals = GPU_KINDS[g % len(GPU_KINDS)]
            pci = '0000:%02x:00.0' % (0x07 + g * 0x10)
            rp = filler.provider(provider_tree.gpu_provider_name(host, pci),
                                 root)
            made += 1
            inventory = {rc: provider_tree.inventory_record(total)
                         for rc, total in totals.items()}
            filler.inventories(rp, inventory)
            traits = {'OWNER_NOVA', 'CUSTOM_GPU_VENDOR_10DE',
                      'CUSTOM_GPU_MODEL_%s' % model,
                      'CUSTOM_GPU_PRODUCT_10DE_%s' % product,
                      'CUSTOM_CUDA_CC_%s' % cuda}
            filler.traits(rp, traits)
            filler.gpu_traits[rp] = traits
            # about half of the units, one server each
            for rc, total in sorted(totals.items()):
                for unit in range(total):
                    n += 1
                    if n % 2:
                        continue
                    server = str(uuid.uuid4())
                    project = PROJECTS[n % len(PROJECTS)]
                    filler.allocate(server, project, USER, {
                        root: {'VCPU': 4, 'MEMORY_MB': 16384,
                               'DISK_GB': 20},
                        rp: {rc: 1}})
                    servers[server] = {'name': 'srv-%05d' % n,
                                       'project_id': project,
                                       'project_name': 'project-%s'
                                       % project[-2:]}
            if h == 0 and g == 0:
                # held by the health check, its servers still on it
                filler.refresh(rp)
                filler.inventories(rp, {
                    rc: dict(rec, reserved=rec['total'])
                    for rc, rec in inventory.items()})
                filler.traits(rp, traits | {gate.TRAIT_UNHEALTHY})
                filler.gpu_traits[rp] = traits | {gate.TRAIT_UNHEALTHY}
    return servers, made, filler


class _DictCache(object):
    """Django's cache API (get, set) on a dict, as the panel uses it."""

    def __init__(self):
        self.data = {}

    def get(self, key):
        return self.data.get(key)

    def set(self, key, value):
        self.data[key] = value


def _timed(function):
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--hosts', type=int, default=20)
    parser.add_argument('--gpus', type=int, default=8)
    parser.add_argument('--iterations', type=int, default=5)
    parser.add_argument('--changed', type=int, default=16,
                        help='GPU providers written to between two pages '
                             'of the cached panel')
    parser.add_argument('--workers', type=int,
                        default=os.cpu_count() or 1)
    args = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix='bench-gpu-fleet-')
    fixture, app = _common.start_placement(
        os.path.join(tmp, 'placement.sqlite'))
    server = None
    workers = []
    try:
        counting = _Counting(app)
        server, endpoint = _common.serve(counting)
        start = time.perf_counter()
        servers, gpu_providers, filler = fill(endpoint, args.hosts,
                                              args.gpus)
        filled = time.perf_counter() - start
        filled_requests = counting.count
        workers = _common.fork_workers(server, args.workers)

        auth = token_endpoint.Token(endpoint, 'admin')
        get = placement.keystone_get(ks_session.Session(auth=auth), endpoint)

        def full(cache=None):
            providers, details = placement.read(get, cache=cache)
            return fleet.build(providers, details, servers)

        full_times, base_times, requests_per_read = [], [], set()
        hosts = []
        for _ in range(args.iterations):
            before = counting.count
            took, hosts = _timed(full)
            full_times.append(took)
            requests_per_read.add(counting.count - before)
            took, _listing = _timed(lambda: get('/resource_providers'))
            base_times.append(took)

        # the panel as it runs: details cached by provider generation;
        # between two pages, --changed GPU providers were written to
        cache = _DictCache()
        full(cache)
        moving = sorted(filler.gpu_traits)
        warm_times, warm_requests = [], set()
        for i in range(args.iterations):
            for rp in moving[i * args.changed:(i + 1) * args.changed]:
                filler.bump(rp)
            before = counting.count
            took, _hosts = _timed(lambda: full(cache))
            warm_times.append(took)
            warm_requests.add(counting.count - before)

        cards = [c for h in hosts for c in h['cards']]
        totals = fleet.Counts(0, 0, 0, 0)
        for view in hosts:
            totals = fleet.Counts(*(a + b for a, b in zip(
                totals, view['counts'])))
        full_median = statistics.median(full_times)
        base_median = statistics.median(base_times)
        print('Placement %s (sqlite file, %d worker processes), %d '
              'requests to fill it in %.1f s' % (
                  endpoint, args.workers, filled_requests, filled))
        print('hosts: %d, GPU providers: %d (built: %d on %d hosts; '
              'units %d free, %d in use, %d pending, %d held; '
              '%d unhealthy)' % (
                  args.hosts, gpu_providers, len(cards), len(hosts),
                  totals.free, totals.in_use, totals.pending, totals.held,
                  sum(1 for c in cards
                      if c['state'] == fleet.STATE_UNHEALTHY)))
        print('requests per read: %s' % ', '.join(
            str(n) for n in sorted(requests_per_read)))
        print('full read (placement.read + fleet.build), %d runs: median '
              '%.3f s, max %.3f s' % (args.iterations, full_median,
                                      max(full_times)))
        print('baseline (one GET /resource_providers): median %.4f s' %
              base_median)
        print('full / baseline: x%.1f' % (full_median / base_median))
        warm_median = statistics.median(warm_times)
        print('the panel with its cache, %d GPU providers written to '
              'between pages: requests per read %s, median %.3f s, max '
              '%.3f s (x%.1f the baseline)' % (
                  args.changed, ', '.join(
                      str(n) for n in sorted(warm_requests)),
                  warm_median, max(warm_times), warm_median / base_median))
    finally:
        _common.stop_workers(workers)
        if server is not None:
            if not workers:
                server.shutdown()
            server.server_close()
        fixture.cleanUp()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
