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

"""Time AcceleratorInventory.update_provider_tree on synthetic hosts.

Run from the repository root: ``python benchmarks/bench_provider_tree.py``.
Prints the median time per call (and the 90th percentile) with nothing
changed since the previous call, and with one device changed, for:

* ``8gpu-mig-4ib``: 8 GPUs x 7 MIG slices, 4 InfiniBand cards x 64 VFs;
* hosts of 10, 100 and 1,000 devices (GPUs and InfiniBand cards, one
  provider each), to show how the time grows.

The LXD and nvidia-smi reads are replaced by prebuilt fresh copies (their
cost is LXD's and nvidia-smi's, not ours); nothing is asserted.
"""

import copy
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

from nova.compute import provider_tree  # noqa: E402
from oslo_config import cfg  # noqa: E402

from nova_lxd_accel.accel.inventory import reporter  # noqa: E402
from nova_lxd_accel.conf import accelerators  # noqa: E402

ROUNDS = 60
NODE = 'bench1'


def _gpu(i, with_uuid=True):
    bus = i + 1
    card = {'pci_address': '%04x:%02x:00.0' % (bus // 256, bus % 256),
            'vendor_id': '10de', 'product_id': '2330', 'numa_node': i % 2,
            'driver': 'nvidia'}
    if with_uuid:
        card['nvidia'] = {'uuid': 'GPU-%08d-0000-0000-0000-000000000000' % i,
                          'model': 'NVIDIA H100 80GB HBM3',
                          'architecture': '9.0'}
    return card


def _ib(i, vfs):
    bus = i + 1
    pci = '%04x:%02x:00.0' % (0x10 + bus // 256, bus % 256)
    card = {'pci_address': pci, 'vendor_id': '15b3', 'product_id': '101b',
            'ports': [{'id': 'ib%d' % i, 'port': 0,
                       'protocol': 'infiniband'}],
            'sriov': {'vfs': None}}
    if vfs:
        base = pci[:-3]
        card['sriov']['vfs'] = [
            {'pci_address': '%s%02x.%d' % (base, 1 + v // 8, v % 8),
             'vendor_id': '15b3', 'product_id': '101c',
             'ports': [{'id': 'ib%dv%d' % (i, v), 'port': 0,
                        'protocol': 'infiniband'}]}
            for v in range(vfs)]
    return card


def _mig_text(gpus, slices, profile='1g.10gb'):
    lines = []
    for g in range(gpus):
        lines.append('GPU %d: NVIDIA H100 80GB HBM3 (UUID: GPU-%08d-0000-'
                     '0000-0000-000000000000)' % (g, g))
        for s in range(slices):
            lines.append('  MIG %-11s Device %2d: (UUID: MIG-%08d-%04d-0000-'
                         '0000-000000000000)' % (profile, s, g, s))
    return '\n'.join(lines) + '\n'


def mig_host():
    resources = {'gpu': {'cards': [_gpu(i) for i in range(8)]},
                 'network': {'cards': [_ib(i, 64) for i in range(4)]}}
    changed = copy.deepcopy(resources)
    changed['network']['cards'][0]['sriov']['vfs'].pop()
    return resources, _mig_text(8, 7), changed


def large_host(devices):
    gpus = devices * 6 // 10
    resources = {
        'gpu': {'cards': [_gpu(i, with_uuid=False) for i in range(gpus)]},
        'network': {'cards': [_ib(i, 0) for i in range(devices - gpus)]}}
    changed = copy.deepcopy(resources)
    changed['gpu']['cards'].pop()
    return resources, '', changed


def _conf():
    conf = cfg.ConfigOpts()
    conf.register_opts(accelerators.ALL_OPTS, group='lxd_accelerators')
    conf([], default_config_files=[])
    return conf


def _time(resources_seq, mig_text):
    """Per-call seconds of update_provider_tree over resources_seq[1:]."""
    feed = iter(resources_seq)
    inventory = reporter.AcceleratorInventory(
        lambda: next(feed), lambda: mig_text, conf=_conf(),
        provider_allocations=lambda rp: {})
    tree = provider_tree.ProviderTree()
    tree.new_root(NODE, '00000000-0000-0000-0000-0000000000b1')
    inventory.update_provider_tree(tree, NODE, None)   # first report
    times = []
    for _ in resources_seq[1:]:
        start = time.perf_counter()
        inventory.update_provider_tree(tree, NODE, None)
        times.append(time.perf_counter() - start)
    return times, len(tree.get_provider_uuids(NODE)) - 1


def bench(name, resources, mig_text, changed):
    same = [copy.deepcopy(resources) for _ in range(ROUNDS + 1)]
    flip = [copy.deepcopy(changed if i % 2 else resources)
            for i in range(ROUNDS + 1)]
    rows = []
    for label, seq in (('no change', same), ('one change', flip)):
        times, providers = _time(seq, mig_text)
        times.sort()
        rows.append('%-14s %-11s providers=%-5d median=%8.3f ms  '
                    'p90=%8.3f ms' % (
                        name, label, providers,
                        statistics.median(times) * 1e3,
                        times[int(len(times) * 0.9)] * 1e3))
    return rows


def main():
    print('update_provider_tree, %d calls each (Python %s)' % (
        ROUNDS, sys.version.split()[0]))
    print('\n'.join(bench('8gpu-mig-4ib', *mig_host())))
    for devices in (10, 100, 1000):
        print('\n'.join(bench('%d-devices' % devices,
                              *large_host(devices))))
    return 0


if __name__ == '__main__':
    sys.exit(main())
