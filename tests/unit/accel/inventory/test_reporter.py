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

"""update_provider_tree reads nothing: it works from the last snapshot.

Nova calls ``update_provider_tree`` under its resource tracker lock, which
every instance claim takes; the host is read by
:meth:`~nova_lxd_accel.accel.inventory.reporter.AcceleratorInventory.refresh`,
outside it.
"""

import copy

import testtools

from nova_lxd_accel.accel.inventory import reporter
from tests.fixtures import gpu_hosts

A100 = gpu_hosts.load_json('handmade-lxd-two-a100-no-nvidia-object.json')


class Host(object):
    """The host's answers, counting every read."""

    def __init__(self):
        self.resources = {'gpu': copy.deepcopy(A100['gpu'])}
        self.records = []
        self.reads = {'resources': 0, 'mig': 0, 'instances': 0}

    def read_resources(self):
        self.reads['resources'] += 1
        return copy.deepcopy(self.resources)

    def list_mig(self):
        self.reads['mig'] += 1
        return ''

    def list_instances(self):
        self.reads['instances'] += 1
        return copy.deepcopy(self.records)


class SnapshotTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.host = Host()
        self.inventory = reporter.AcceleratorInventory(
            self.host.read_resources, self.host.list_mig,
            conf=gpu_hosts.make_conf(),
            provider_allocations=lambda rp: {},
            list_instances=self.host.list_instances,
            is_ours=lambda record: record.get('project') == 'nova')
        self.tree = gpu_hosts.new_tree()

    def _no_reads(self):
        return {'resources': 0, 'mig': 0, 'instances': 0}

    def test_update_reads_nothing(self):
        snapshot = self.inventory.refresh()
        self.assertEqual({'resources': 1, 'mig': 1, 'instances': 1},
                         self.host.reads)
        self.assertGreaterEqual(snapshot.age(), 0)
        self.host.reads = self._no_reads()
        for _ in range(3):
            self.inventory.update_provider_tree(self.tree, gpu_hosts.NODE, {})
        self.assertEqual(self._no_reads(), self.host.reads)
        self.assertEqual(2, len(gpu_hosts.summary(self.tree)))
        # a change on the host shows after the next refresh only
        self.host.resources['gpu']['cards'] = []
        self.inventory.update_provider_tree(self.tree, gpu_hosts.NODE, {})
        self.assertEqual(2, len(gpu_hosts.summary(self.tree)))
        self.inventory.refresh()
        self.inventory.update_provider_tree(self.tree, gpu_hosts.NODE, {})
        self.assertEqual(0, len(gpu_hosts.summary(self.tree)))

    def test_without_a_refresher_every_update_reads(self):
        # the inventory command, or a caller that never refreshes
        self.inventory.update_provider_tree(self.tree, gpu_hosts.NODE, {})
        self.inventory.update_provider_tree(self.tree, gpu_hosts.NODE, {})
        self.assertEqual({'resources': 2, 'mig': 2, 'instances': 2},
                         self.host.reads)

    def test_vanished_held_device_stays_reserved(self):
        self.inventory.refresh()
        self.inventory.update_provider_tree(self.tree, gpu_hosts.NODE, {})
        name = '%s_gpu_0000_07_00_0' % gpu_hosts.NODE
        rp_uuid = self.tree.data(name).uuid
        self.host.resources['gpu']['cards'] = [
            c for c in self.host.resources['gpu']['cards']
            if c.get('pci_address') != '0000:07:00.0']
        self.inventory.refresh()
        allocations = {'inst': {'allocations': {
            rp_uuid: {'resources': {'PGPU': 1}}}}}
        self.inventory.update_provider_tree(self.tree, gpu_hosts.NODE,
                                            allocations)
        inventory = self.tree.data(name).inventory['PGPU']
        self.assertEqual(inventory['total'], inventory['reserved'])

    def test_foreign_holder_reserved_from_the_snapshot(self):
        self.host.records = [{'name': 'c1', 'project': 'other',
                              'config': {}, 'devices': {'g': {
                                  'type': 'gpu', 'pci': '0000:07:00.0'}}}]
        self.inventory.refresh()
        self.inventory.update_provider_tree(self.tree, gpu_hosts.NODE, {})
        name = '%s_gpu_0000_07_00_0' % gpu_hosts.NODE
        self.assertEqual(1, self.tree.data(name).inventory['PGPU'][
            'reserved'])
        # ours: accounted by its allocation, not reserved
        self.host.records[0]['project'] = 'nova'
        self.inventory.refresh()
        self.inventory.update_provider_tree(self.tree, gpu_hosts.NODE, {})
        self.assertEqual(0, self.tree.data(name).inventory['PGPU'][
            'reserved'])
