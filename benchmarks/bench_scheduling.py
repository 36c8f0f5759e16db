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

"""Scheduling k whole GPUs: one provider per GPU or one pool per host.

Asks a real Placement (its own WSGI application, noauth2, sqlite in a
temporary directory, as ``bench_gpu_fleet.py`` runs it, answered by one
forked worker process) ``GET /allocation_candidates`` as nova's scheduler
sends it (microversion 1.39, ``limit=1000``, the flavor's VCPU, MEMORY_MB
and DISK_GB in the unnumbered group), for ``--hosts`` compute nodes
(default 20) laid out in two ways:

* **per device** (the driver's layout): each whole GPU its own child
  provider ``<host>_gpu_<pci>``, PGPU total 1; k GPUs are k numbered
  groups ``resources1:PGPU=1`` ... ``resourcesk:PGPU=1`` with
  ``group_policy=isolate``;
* **pooled**: one child provider per host for its identical GPUs,
  ``<host>_gpu_pool_<model>``, PGPU total 8; k GPUs are
  ``resources:PGPU=k`` (the unnumbered group, as nova sends a flavor's
  ``resources:PGPU=k``) and, also measured, ``resources1:PGPU=k``.

The same comparison for 7 MIG slices of ``CUSTOM_MIG_1G_10GB`` on each of
8 GPUs (per GPU: total 7; pooled: total 56) and for 4 InfiniBand cards of
16 VFs (per card: total 16; pooled: total 64), both asked as the
unnumbered group (``resources:CUSTOM_MIG_1G_10GB=n``, n = 1, 2). Each
query runs ``--repetitions`` times (default 5) under ``--timeout`` seconds
each (default 120: a query past it is stopped, its worker killed and
forked anew, so the run never hangs). The per-device k=8 query only runs
with ``--slow`` (its groups' orderings explode: minutes per query); what
is skipped is printed, with why. Prints per query the median, the maximum
and the candidates returned, and the ratio pooled / per device measured in
this run; nothing is asserted. Usage::

    .tox/py3/bin/python benchmarks/bench_scheduling.py [--hosts 20]
        [--repetitions 5] [--timeout 120] [--slow] [--quick]
        [--max-allocation-candidates 1000]
"""

import argparse
import collections
import logging
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402  (this folder, the script's own)
from nova_lxd_accel.accel.inventory import provider_tree  # noqa: E402
from nova_lxd_accel import placement_names  # noqa: E402

LOG = logging.getLogger('bench_scheduling')

#: what nova's scheduler sends (``[scheduler] max_placement_results``)
CANDIDATES_LIMIT = 1000
#: a flavor's own resources, on the compute node (the root provider)
FLAVOR_ROOT_RESOURCES = {'VCPU': 4, 'MEMORY_MB': 8192, 'DISK_GB': 20}
ROOT_INVENTORY = {'VCPU': 64, 'MEMORY_MB': 512000, 'DISK_GB': 2000}

GPUS_PER_HOST = 8
GPU_MODEL = 'NVIDIA_H100_80GB_HBM3'
GPU_TRAITS = frozenset({'OWNER_NOVA', 'CUSTOM_GPU_VENDOR_10DE',
                        'CUSTOM_GPU_PRODUCT_10DE_2330',
                        'CUSTOM_GPU_MODEL_%s' % GPU_MODEL,
                        'CUSTOM_CUDA_CC_9_0'})
MIG_CLASS = 'CUSTOM_MIG_1G_10GB'
MIG_SLICES_PER_GPU = 7
IB_CARDS_PER_HOST = 4
IB_VFS_PER_CARD = 16
IB_TRAITS = frozenset({'OWNER_NOVA', 'CUSTOM_IB_VENDOR_15B3',
                       'CUSTOM_IB_PRODUCT_15B3_101C'})

GPU_COUNTS = (1, 2, 4, 8)
UNIT_COUNTS = (1, 2)
#: the per-device whole-GPU queries that only run with ``--slow``
SLOW_GPU_COUNTS = (8,)

#: a child provider of a host: its name, resource class -> total, traits
Child = collections.namedtuple('Child', 'name totals traits')
#: one allocation candidates request; ``family`` and ``count`` say what it
#: compares with (the per-device query of the same family and count)
Query = collections.namedtuple('Query', 'family count form params')
#: what a query measured: ``candidates`` returned and the ``hosts`` they
#: are on (the scheduler can only pick among those); ``timed_out`` is the
#: timeout when one run passed it (then ``times`` holds the runs before it)
Measured = collections.namedtuple(
    'Measured', 'layout query times candidates hosts timed_out')


def gpu_pci(index):
    return '0000:%02x:00.0' % (0x07 + index * 0x10)


def ib_pci(index):
    return '0000:%02x:00.0' % (0x0c + index * 0x10)


def gpu_pool_name(host, model):
    return '%s_gpu_pool_%s' % (host, model.lower())


def ib_pool_name(host):
    return '%s_ib_pool' % host


# each layout: its key -> what it is, and the children of one host
LAYOUTS = collections.OrderedDict([
    ('gpu-per-device', (
        'whole GPUs, one provider each (PGPU 1)',
        lambda host: [Child(provider_tree.gpu_provider_name(host, gpu_pci(g)),
                            {'PGPU': 1}, GPU_TRAITS)
                      for g in range(GPUS_PER_HOST)])),
    ('gpu-pool', (
        'whole GPUs, one pool per host (PGPU %d)' % GPUS_PER_HOST,
        lambda host: [Child(gpu_pool_name(host, GPU_MODEL),
                            {'PGPU': GPUS_PER_HOST}, GPU_TRAITS)])),
    ('mig-per-device', (
        'MIG 1g.10gb, one provider per GPU (%d)' % MIG_SLICES_PER_GPU,
        lambda host: [Child(provider_tree.gpu_provider_name(host, gpu_pci(g)),
                            {MIG_CLASS: MIG_SLICES_PER_GPU}, GPU_TRAITS)
                      for g in range(GPUS_PER_HOST)])),
    ('mig-pool', (
        'MIG 1g.10gb, one pool per host (%d)'
        % (MIG_SLICES_PER_GPU * GPUS_PER_HOST),
        lambda host: [Child(gpu_pool_name(host, GPU_MODEL),
                            {MIG_CLASS: MIG_SLICES_PER_GPU * GPUS_PER_HOST},
                            GPU_TRAITS)])),
    ('ib-per-device', (
        'InfiniBand VFs, one provider per card (%d)' % IB_VFS_PER_CARD,
        lambda host: [Child(provider_tree.ib_provider_name(host, ib_pci(c)),
                            {placement_names.RC_INFINIBAND_VF:
                             IB_VFS_PER_CARD}, IB_TRAITS)
                      for c in range(IB_CARDS_PER_HOST)])),
    ('ib-pool', (
        'InfiniBand VFs, one pool per host (%d)'
        % (IB_VFS_PER_CARD * IB_CARDS_PER_HOST),
        lambda host: [Child(ib_pool_name(host),
                            {placement_names.RC_INFINIBAND_VF:
                             IB_VFS_PER_CARD * IB_CARDS_PER_HOST},
                            IB_TRAITS)])),
])


def _resources(amounts):
    return ','.join('%s:%d' % (rc, n) for rc, n in sorted(amounts.items()))


def candidates_params(unnumbered=None, numbered=(), isolate=False):
    """The query string nova's scheduler sends for a flavor's request.

    :param unnumbered: resource class -> amount in the flavor's
        ``resources:`` (the unnumbered group, beside the root's).
    :param numbered: one resource class -> amount per numbered group,
        ``resources1:`` first.
    :returns: the (name, value) pairs, in nova's order.
    """
    params = [('resources', _resources(dict(FLAVOR_ROOT_RESOURCES,
                                            **(unnumbered or {}))))]
    for number, group in enumerate(numbered, 1):
        params.append(('resources%d' % number, _resources(group)))
    if isolate:
        params.append(('group_policy', 'isolate'))
    params.append(('limit', str(CANDIDATES_LIMIT)))
    return params


def queries_for(layout):
    """The queries asked of ``layout``, per device ones first."""
    if layout == 'gpu-per-device':
        return [Query('GPU', k, 'resources1..%d:PGPU=1 isolate' % k,
                      candidates_params(numbered=[{'PGPU': 1}] * k,
                                        isolate=k > 1))
                for k in GPU_COUNTS]
    if layout == 'gpu-pool':
        return [q for k in GPU_COUNTS for q in (
            Query('GPU', k, 'resources:PGPU=%d' % k,
                  candidates_params({'PGPU': k})),
            Query('GPU', k, 'resources1:PGPU=%d' % k,
                  candidates_params(numbered=[{'PGPU': k}])))]
    family, rc = (('MIG', MIG_CLASS) if layout.startswith('mig-') else
                  ('IB', placement_names.RC_INFINIBAND_VF))
    return [Query(family, n, 'resources:%s=%d' % (rc, n),
                  candidates_params({rc: n}))
            for n in UNIT_COUNTS]


def skipped(layout, query, slow):
    """Why ``query`` is not run on ``layout`` (None: it is run)."""
    if (layout == 'gpu-per-device' and query.count in SLOW_GPU_COUNTS
            and not slow):
        return ('%d numbered groups with isolate: %d! orderings of a '
                "host's GPUs, minutes per query; run with --slow"
                % (query.count, query.count))
    return None


def fill(writer, layout, hosts):
    """``hosts`` compute nodes with ``layout``'s children, empty."""
    children = LAYOUTS[layout][1]
    made = 0
    for h in range(hosts):
        host = 'cn-%03d' % h
        root = writer.provider(host)
        writer.inventories(root, {rc: provider_tree.inventory_record(total)
                                  for rc, total in ROOT_INVENTORY.items()})
        for child in children(host):
            rp = writer.provider(child.name, root)
            writer.inventories(rp, {
                rc: provider_tree.inventory_record(total)
                for rc, total in child.totals.items()})
            writer.traits(rp, child.traits)
            made += 1
    return made


def offered(answer):
    """(candidates, distinct hosts) of an allocation candidates answer.

    The hosts count matters beside the time: ``limit`` (and
    ``max_allocation_candidates``) cut the list, and a cut list of many
    candidates per host offers the scheduler few hosts.
    """
    summaries = answer['provider_summaries']
    roots = {summaries[rp]['root_provider_uuid']
             for request in answer['allocation_requests']
             for rp in request['allocations']}
    return len(answer['allocation_requests']), len(roots)


class _Worker(object):
    """One forked Placement process answering on the server's socket.

    A query past its timeout is still being computed there: the process
    is killed and another forked, so the next query does not share the
    CPU with it.
    """

    def __init__(self, server):
        self.server = server
        self.pid = _common.fork_workers(server, 1)[0]

    def restart(self):
        _common.stop_workers([self.pid], signal.SIGKILL)
        self.pid = _common.fork_worker(self.server)

    def stop(self):
        _common.stop_workers([self.pid])


def measure_layout(layout, args, tmp, slow):
    """Fill a Placement of its own with ``layout`` and time its queries.

    :returns: (measured queries, (layout, query, reason) skipped).
    """
    import requests

    db_path = os.path.join(tmp, '%s.sqlite' % layout)
    options = {}
    if args.max_allocation_candidates is not None:
        options['max_allocation_candidates'] = args.max_allocation_candidates
    fixture, app = _common.start_placement(db_path, **options)
    server = worker = None
    measured, skips = [], []
    try:
        server, endpoint = _common.serve(app)
        writer = _common.PlacementWriter(endpoint)
        for rc in (MIG_CLASS, placement_names.RC_INFINIBAND_VF):
            writer.ensure('resource_classes', rc)
        for trait in sorted((GPU_TRAITS | IB_TRAITS) - {'OWNER_NOVA'}):
            writer.ensure('traits', trait)
        start = time.perf_counter()
        children = fill(writer, layout, args.hosts)
        LOG.info('%s: %d hosts, %d child providers, filled in %.1f s',
                 layout, args.hosts, children, time.perf_counter() - start)
        worker = _Worker(server)
        session = requests.Session()
        session.headers.update({'x-auth-token': 'admin',
                                'OpenStack-API-Version':
                                    _common.PLACEMENT_VERSION})
        url = endpoint + '/allocation_candidates'
        # the worker's first answer loads what it had not yet: untimed
        session.get(url, params=candidates_params(),
                    timeout=args.timeout).raise_for_status()
        for query in queries_for(layout):
            reason = skipped(layout, query, slow)
            if reason:
                skips.append((layout, query, reason))
                continue
            times, candidates, hosts, timed_out = [], None, None, None
            for _ in range(args.repetitions):
                start = time.perf_counter()
                try:
                    response = session.get(url, params=query.params,
                                           timeout=args.timeout)
                except requests.Timeout:
                    timed_out = args.timeout
                    worker.restart()
                    break
                times.append(time.perf_counter() - start)
                response.raise_for_status()
                candidates, hosts = offered(response.json())
            LOG.info('%s %s: %s', layout, query.form,
                     ', '.join('%.3f' % t for t in times) or 'timed out')
            measured.append(Measured(layout, query, times, candidates,
                                     hosts, timed_out))
    finally:
        if worker is not None:
            worker.stop()
        if server is not None:
            if worker is None:
                server.shutdown()
            server.server_close()
        fixture.cleanUp()
    return measured, skips


def _seconds(measured):
    if not measured.times:
        return '-', '> %d' % measured.timed_out
    text = ('%.3f' % statistics.median(measured.times),
            '%.3f' % max(measured.times))
    if measured.timed_out:
        return text[0], '> %d' % measured.timed_out
    return text


def table(measured):
    """The printed table: one row per query, the ratio to per device.

    The ratio is the query's median over the median of the per-device
    query of its family and count, both measured in this run.
    """
    per_device = {(m.query.family, m.query.count): m for m in measured
                  if m.layout.endswith('-per-device') and m.times}
    header = ('what', 'k', 'layout', 'request', 'median s', 'max s',
              'candidates', 'hosts', 'vs per device')
    rows = []
    order = sorted(measured, key=lambda m: (
        ('GPU', 'MIG', 'IB').index(m.query.family), m.query.count,
        not m.layout.endswith('-per-device')))
    for m in order:
        median, maximum = _seconds(m)
        base = per_device.get((m.query.family, m.query.count))
        if m.layout.endswith('-per-device') or not m.times:
            ratio = ''
        elif base is None:
            ratio = 'n/a (per device not run)'
        else:
            ratio = 'x%.3f' % (statistics.median(m.times) /
                               statistics.median(base.times))
        rows.append((m.query.family, str(m.query.count),
                     'per device' if m.layout.endswith('-per-device')
                     else 'pool',
                     m.query.form, median, maximum,
                     '-' if m.candidates is None else str(m.candidates),
                     '-' if m.hosts is None else str(m.hosts),
                     ratio))
    widths = [max(len(r[i]) for r in rows + [header])
              for i in range(len(header))]
    lines = ['  '.join(c.ljust(w) for c, w in zip(header, widths)).rstrip()]
    lines.append('  '.join('-' * w for w in widths))
    lines += ['  '.join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
              for r in rows]
    return '\n'.join(lines)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--hosts', type=int, default=20)
    parser.add_argument('--repetitions', type=int, default=5)
    parser.add_argument('--timeout', type=int, default=120,
                        help='seconds a query may take before it is '
                             'stopped (its worker killed)')
    parser.add_argument('--slow', action='store_true',
                        help='also the per-device k=8 whole-GPU query '
                             '(minutes each)')
    parser.add_argument('--quick', action='store_true',
                        help='2 hosts, 1 repetition: that it runs')
    parser.add_argument('--max-allocation-candidates', type=int,
                        default=1000,
                        help="Placement's [placement] "
                             'max_allocation_candidates (-1: unlimited, '
                             "Placement's default)")
    parser.add_argument('--layouts', default=','.join(LAYOUTS),
                        help='comma-separated, of: %s' % ', '.join(LAYOUTS))
    args = parser.parse_args(argv)
    if args.quick:
        args.hosts, args.repetitions = 2, 1
    args.layouts = args.layouts.split(',')
    unknown = set(args.layouts) - set(LAYOUTS)
    if unknown:
        parser.error('unknown layouts: %s' % ', '.join(sorted(unknown)))
    return args


def main(argv=None):
    args = parse_args(argv)
    # the bench's progress only: Placement logs every request at INFO
    logging.basicConfig(level=logging.WARNING, format='%(message)s')
    LOG.setLevel(logging.INFO)
    tmp = tempfile.mkdtemp(prefix='bench-scheduling-')
    measured, skips = [], []
    try:
        for layout in args.layouts:
            done, not_done = measure_layout(layout, args, tmp, args.slow)
            measured += done
            skips += not_done
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print('GET /allocation_candidates, %s, limit=%d, flavor %s in the '
          'unnumbered group; %d hosts, %d repetitions, timeout %d s, '
          '[placement] max_allocation_candidates %s; one Placement '
          'worker process, sqlite, no allocations' % (
              _common.PLACEMENT_VERSION, CANDIDATES_LIMIT,
              _resources(FLAVOR_ROOT_RESOURCES), args.hosts,
              args.repetitions, args.timeout,
              args.max_allocation_candidates))
    for layout in args.layouts:
        print('  %s: %s' % (layout, LAYOUTS[layout][0]))
    print(table(measured))
    for layout, query, reason in skips:
        print('skipped: %s %s: %s' % (layout, query.form, reason))
    for m in measured:
        if m.timed_out:
            print('timed out: %s %s after %d s (%d runs before it)' % (
                m.layout, m.query.form, m.timed_out, len(m.times)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
