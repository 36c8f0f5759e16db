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

"""Keeping the tree right as hardware and configuration change."""

import copy
import logging

import fixtures
from oslotest import base

from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel.inventory import discovery
from nova_lxd_accel.accel.inventory import provider_tree
from nova_lxd_accel.accel.inventory import reporter
from nova_lxd_accel.accel import units
from tests.fixtures import gpu_hosts

H100 = 'handmade-lxd-h100-mig-host.json'
H100_L = 'nvsmi-h100-80gb-mig-4slices-L.txt'
GPU = 'cmp1_gpu_0000_00_09_0'
IB = 'cmp1_ib_0000_04_00_0'


class Host(object):
    """A host whose resources and nvidia-smi output tests change."""

    def __init__(self, resources, mig_text=''):
        self.resources = resources
        self.mig_text = mig_text
        self.placement_allocations = {}
        self.placement_error = None

    def read_resources(self):
        # a fresh object each call, as a GET is
        return copy.deepcopy(self.resources)

    def provider_allocations(self, rp_uuid):
        if self.placement_error:
            raise self.placement_error
        return self.placement_allocations.get(rp_uuid, {})


class TestApply(base.BaseTestCase):

    def setUp(self):
        super().setUp()
        self.log = self.useFixture(fixtures.FakeLogger(level=logging.INFO))
        resources = gpu_hosts.load_json(H100)
        resources['network'] = gpu_hosts.load_json(
            'maas-lp1939456-connectx3-infiniband.json')['network']
        self.host = Host(resources, gpu_hosts.load_text(H100_L))
        self.inventory = self._inventory()
        self.tree = gpu_hosts.new_tree()

    def _inventory(self, **conf):
        return reporter.AcceleratorInventory(
            self.host.read_resources, lambda: self.host.mig_text,
            conf=gpu_hosts.make_conf(**conf),
            provider_allocations=self.host.provider_allocations)

    def _update(self, allocations=None, inventory=None):
        (inventory or self.inventory).update_provider_tree(
            self.tree, gpu_hosts.NODE, allocations)
        return gpu_hosts.summary(self.tree)

    @staticmethod
    def _allocs(rp_uuid, consumer='inst-1', **resources):
        return {consumer: {'allocations': {
            rp_uuid: {'resources': resources}}}}

    def test_operator_traits_survive_and_stale_own_traits_go(self):
        self._update()
        self.tree.add_traits(GPU, 'CUSTOM_RACK_7', 'COMPUTE_GREEN')
        self._update()
        self.assertIn('CUSTOM_RACK_7', self.tree.data(GPU).traits)
        # LXD stops reporting the model and compute capability: the
        # compute capability trait goes; the model now comes from
        # nvidia-smi -L (identical cards, identical traits)
        card = self.host.resources['gpu']['cards'][1]
        card['nvidia'] = {'brand': 'NVIDIA'}
        self._update()
        self.assertEqual(
            {'OWNER_NOVA', 'CUSTOM_GPU_VENDOR_10DE',
             'CUSTOM_GPU_PRODUCT_10DE_2330', 'CUSTOM_RACK_7',
             'COMPUTE_GREEN', 'CUSTOM_GPU_MODEL_NVIDIA_H100_80GB_HBM3'},
            self.tree.data(GPU).traits)
        # and nvidia-smi no longer names it either: the model trait goes
        self.host.mig_text = ''
        self._update()
        self.assertEqual(
            {'OWNER_NOVA', 'CUSTOM_GPU_VENDOR_10DE',
             'CUSTOM_GPU_PRODUCT_10DE_2330', 'CUSTOM_RACK_7',
             'COMPUTE_GREEN'},
            self.tree.data(GPU).traits)

    def test_restart_removes_own_family_traits_only(self):
        uuid = self.tree.new_child(GPU, gpu_hosts.NODE)
        self.tree.add_traits(uuid, 'CUSTOM_GPU_MODEL_TESLA_OLD',
                             'CUSTOM_CUDA_CC_1_0', 'CUSTOM_RACK_7')
        self._update()
        traits = self.tree.data(GPU).traits
        self.assertNotIn('CUSTOM_GPU_MODEL_TESLA_OLD', traits)
        self.assertNotIn('CUSTOM_CUDA_CC_1_0', traits)
        self.assertIn('CUSTOM_RACK_7', traits)
        self.assertIn('CUSTOM_CUDA_CC_9_0', traits)
        self.assertEqual(uuid, self.tree.data(GPU).uuid)

    def test_other_children_untouched(self):
        pci = self.tree.new_child('cmp1_0000:81:00.0', gpu_hosts.NODE)
        other = self.tree.new_child('cmp10_gpu_0000_01_00_0', gpu_hosts.NODE)
        self.tree.update_inventory(pci, {'CUSTOM_PCI_X': {'total': 1}})
        self._update(allocations={})
        self.assertEqual({'CUSTOM_PCI_X': {'total': 1}},
                         self.tree.data(pci).inventory)
        self.assertTrue(self.tree.exists(other))

    def test_vanished_unallocated_is_deleted(self):
        self._update()
        self.host.resources['gpu']['cards'].pop(1)
        tree = self._update(allocations={})
        self.assertEqual([IB], sorted(tree))
        self.assertIn('is gone: deleting', self.log.output)

    def test_vanished_allocated_is_reserved_then_deleted(self):
        self._update()
        uuid = self.tree.data(IB).uuid
        self.host.resources['network']['cards'].pop(2)
        allocs = self._allocs(uuid, CUSTOM_INFINIBAND_PORT=1)
        self._update(allocations=allocs)
        self.assertEqual(
            {'CUSTOM_INFINIBAND_PORT': {
                'total': 2, 'reserved': 2, 'min_unit': 1, 'max_unit': 2,
                'step_size': 1, 'allocation_ratio': 1.0}},
            self.tree.data(IB).inventory)
        self.assertIn('IbCard at 0000:04:00.0 is gone', self.log.output)
        self.assertIn('inst-1', self.log.output)
        self.assertIsInstance(self.inventory.device_for_provider(uuid),
                              devices.IbCard)
        self._update(allocations={})
        self.assertFalse(self.tree.exists(IB))
        self.assertIsNone(self.inventory.device_for_provider(uuid))

    def test_unknown_allocations_ask_placement(self):
        self._update()
        uuid = self.tree.data(GPU).uuid
        self.host.resources['gpu']['cards'].pop(1)
        self.host.placement_allocations = {
            uuid: {'inst-9': {'resources': {'CUSTOM_MIG_1G_10GB': 1}}}}
        self._update(allocations=None)
        self.assertEqual(
            {'CUSTOM_MIG_1G_10GB': 2, 'CUSTOM_MIG_2G_20GB': 1,
             'CUSTOM_MIG_3G_40GB': 1},
            {rc: rec['reserved'] for rc, rec in
             self.tree.data(GPU).inventory.items()})
        self.assertIn('inst-9', self.log.output)
        self.host.placement_allocations = {}
        self._update(allocations=None)
        self.assertFalse(self.tree.exists(GPU))

    def test_placement_unreachable_never_deletes(self):
        self._update()
        self.host.resources['gpu']['cards'].pop(1)
        self.host.placement_error = RuntimeError('placement down')
        self._update(allocations=None)
        self.assertTrue(self.tree.exists(GPU))
        self.assertEqual(1, self.tree.data(GPU).inventory[
            'CUSTOM_MIG_3G_40GB']['reserved'])
        self.assertIn('unknown consumers', self.log.output)

    def test_mig_recarve(self):
        self._update()
        self.host.mig_text = (
            'GPU 0: NVIDIA H100 80GB HBM3 '
            '(UUID: GPU-00000000-0000-0000-0000-000000000000)\n' +
            ''.join('  MIG 1g.10gb     Device  %d: (UUID: MIG-%d)\n' % (i, i)
                    for i in range(7)))
        tree = self._update(allocations={})
        self.assertEqual({'CUSTOM_MIG_1G_10GB': 7}, tree[GPU][0])

    def test_mig_recarve_keeps_used_profile_reserved(self):
        self._update()
        uuid = self.tree.data(GPU).uuid
        self.host.mig_text = (
            'GPU 0: NVIDIA H100 80GB HBM3 '
            '(UUID: GPU-00000000-0000-0000-0000-000000000000)\n'
            '  MIG 7g.80gb     Device  0: (UUID: MIG-7)\n')
        self._update(allocations=self._allocs(uuid, CUSTOM_MIG_3G_40GB=1))
        inventory = self.tree.data(GPU).inventory
        self.assertEqual({'CUSTOM_MIG_7G_80GB', 'CUSTOM_MIG_3G_40GB'},
                         set(inventory))
        self.assertEqual((1, 1), (inventory['CUSTOM_MIG_3G_40GB']['total'],
                                  inventory['CUSTOM_MIG_3G_40GB']['reserved']))
        self.assertEqual(0, inventory['CUSTOM_MIG_7G_80GB']['reserved'])

    def test_nvidia_smi_failure_keeps_last_mig_devices(self):
        self._update()
        self.host.mig_text = None
        tree = self._update(allocations={})
        self.assertEqual(2, tree[GPU][0]['CUSTOM_MIG_1G_10GB'])

    def test_device_for_provider(self):
        self._update()
        gpu = self.inventory.device_for_provider(self.tree.data(GPU).uuid)
        self.assertEqual('0000:00:09.0', gpu.pci_address)
        self.assertEqual(
            ['MIG-00000002-0000-0000-0000-000000000002',
             'MIG-00000003-0000-0000-0000-000000000003'],
            [m.uuid for m in gpu.mig_devices if m.profile == '1g.10gb'])
        card = self.inventory.device_for_provider(self.tree.data(IB).uuid)
        self.assertEqual(['ibp4s0', 'ibp4s0d1'],
                         [p.netdev for p in card.ports])
        self.assertIsNone(self.inventory.device_for_provider(
            gpu_hosts.ROOT_UUID))

    def test_excluding_a_device_later_removes_it(self):
        self._update()
        inventory = self._inventory(excluded_pci_addresses=['0000:04:00.0'])
        self.assertEqual([GPU], sorted(self._update({}, inventory)))

    def test_unchanged_host_leaves_tree_equal(self):
        first = self._update()
        before = {u: self.tree.data(u) for u in
                  self.tree.get_provider_uuids(gpu_hosts.NODE)}
        self.assertEqual(first, self._update())
        after = {u: self.tree.data(u) for u in
                 self.tree.get_provider_uuids(gpu_hosts.NODE)}
        self.assertEqual(before, after)


class TestDescribe(base.BaseTestCase):

    def test_root_first_and_children_by_name(self):
        resources = gpu_hosts.load_json('handmade-lxd-connectx6-ib-vfs.json')
        resources['gpu'] = gpu_hosts.load_json(
            'handmade-lxd-amd-gpu-sriov-vfs.json')['gpu']
        inventory, tree = gpu_hosts.report(resources)
        out = inventory.describe(tree, gpu_hosts.NODE)
        self.assertEqual(
            [('cmp1', None), ('cmp1_gpu_0000_03_00_0', 'cmp1'),
             ('cmp1_gpu_0000_83_00_0', 'cmp1'),
             ('cmp1_ib_0000_0c_00_0', 'cmp1'),
             ('cmp1_ib_0000_4b_00_0', 'cmp1'),
             ('cmp1_ib_0000_61_00_1', 'cmp1')],
            [(p['name'], p['parent']) for p in out['providers']])
        self.assertEqual(
            {'PGPU': {'total': 1, 'reserved': 0, 'min_unit': 1,
                      'max_unit': 1, 'step_size': 1,
                      'allocation_ratio': 1.0}},
            out['providers'][1]['inventories'])
        self.assertEqual(
            ['CUSTOM_GPU_PRODUCT_1002_6929', 'CUSTOM_GPU_VENDOR_1002',
             'OWNER_NOVA'], out['providers'][1]['traits'])


class TestInfinibandPortsOptIn(base.BaseTestCase):
    """Whole InfiniBand ports are offered only when an operator says so.

    A port passes its ``issm`` and ``umad`` nodes: its holder can act as a
    subnet manager, which PKeys do not stop (issue 43). The recorded
    ConnectX-6 host has a card with VFs (4b:00.0) and two with ports only.
    """

    def setUp(self):
        super().setUp()
        resources = gpu_hosts.load_json('handmade-lxd-connectx6-ib-vfs.json')
        # nova.conf's defaults
        self.gpus, self.cards = discovery.discover(resources, '',
                                                   discovery.Options())

    def _classes(self, **kwargs):
        desired = provider_tree.desired_providers('cmp1', self.gpus,
                                                  self.cards, **kwargs)
        return {name: sorted(p.inventory) for name, p in desired.items()}

    def test_default_offers_no_port_and_keeps_the_vfs(self):
        self.assertEqual({'cmp1_ib_0000_4b_00_0': ['CUSTOM_INFINIBAND_VF']},
                         self._classes())
        self.assertEqual(['0000:0c:00.0', '0000:61:00.1'],
                         provider_tree.ports_not_offered(self.cards))
        for card in self.cards:
            self.assertNotIn('CUSTOM_INFINIBAND_PORT',
                             units.provider_units(card))

    def test_the_option_offers_the_ports(self):
        self.assertEqual({
            'cmp1_ib_0000_0c_00_0': ['CUSTOM_INFINIBAND_PORT'],
            'cmp1_ib_0000_4b_00_0': ['CUSTOM_INFINIBAND_VF'],
            'cmp1_ib_0000_61_00_1': ['CUSTOM_INFINIBAND_PORT'],
        }, self._classes(report_infiniband_ports=True))
        self.assertEqual([], provider_tree.ports_not_offered(
            self.cards, ports=True))
        by_pci = {c.pci_address: c for c in self.cards}
        self.assertEqual(
            {'CUSTOM_INFINIBAND_PORT': ['netdev:ibp12s0']},
            units.provider_units(by_pci['0000:0c:00.0'], ib_ports=True))


class TestGpuPools(base.BaseTestCase):
    """Whole GPUs of one model, by PCI ids: one pool, however named."""

    def gpu(self, pci, model=None, product='20b2'):
        return devices.Gpu(pci_address=pci, vendor_id='10de',
                           product_id=product, model=model)

    def test_a_card_lxd_does_not_name_joins_its_models_pool(self):
        # one A100 without LXD's nvidia object (no model until the probe)
        desired = provider_tree.desired_providers('cmp1', [
            self.gpu('0000:07:00.0', 'NVIDIA A100-SXM4-80GB'),
            self.gpu('0000:85:00.0')], [], pool_whole_gpus=True)
        (name, want), = desired.items()
        self.assertEqual('cmp1_gpu_pool_10de_20b2', name)
        self.assertEqual(2, want.inventory['PGPU']['total'])
        # the pool carries the model known of either card
        self.assertIn('CUSTOM_GPU_MODEL_NVIDIA_A100_SXM4_80GB', want.traits)

    def test_other_products_are_other_pools(self):
        desired = provider_tree.desired_providers('cmp1', [
            self.gpu('0000:07:00.0'), self.gpu('0000:85:00.0', product='2330'),
            self.gpu('0000:86:00.0', product='2330')], [],
            pool_whole_gpus=True)
        self.assertEqual(
            {'cmp1_gpu_pool_10de_20b2': 1, 'cmp1_gpu_pool_10de_2330': 2},
            {n: w.inventory['PGPU']['total'] for n, w in desired.items()})
