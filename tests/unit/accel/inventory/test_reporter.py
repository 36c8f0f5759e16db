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

"""The accelerator inventory: the provider tree of every recorded sample,
and an update_provider_tree that reads nothing (it works from the last
snapshot).

Nova calls ``update_provider_tree`` under its resource tracker lock, which
every instance claim takes; the host is read by
:meth:`~nova_lxd_accel.accel.inventory.reporter.AcceleratorInventory.refresh`,
outside it.
"""

import copy
import dataclasses
import inspect

import fixtures
from oslotest import base
import testtools

from nova_lxd_accel.accel import devices
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

    def test_the_driver_writes_what_it_passes_through_the_gate(self):
        # desired_from reads nothing; write_tree writes the providers it
        # is given (the driver's, through the GPU gate), not its own
        snapshot = self.inventory.refresh()
        self.host.reads = self._no_reads()
        desired = self.inventory.desired_from(gpu_hosts.NODE, snapshot)
        name = '%s_gpu_0000_07_00_0' % gpu_hosts.NODE
        want = desired[name]
        gated = dict(desired, **{name: dataclasses.replace(
            want, inventory={'PGPU': dict(want.inventory['PGPU'],
                                          reserved=1)})})
        self.inventory.write_tree(self.tree, gpu_hosts.NODE, gated, {},
                                  snapshot.records)
        self.assertEqual(self._no_reads(), self.host.reads)
        self.assertEqual(1, self.tree.data(name).inventory['PGPU'][
            'reserved'])
        self.assertEqual(0, desired[name].inventory['PGPU'].get(
            'reserved', 0))

    def test_the_inventory_is_what_a_claim_reads(self):
        # given whole to the claim (devices.ReportedDevices), implementing
        # each of its methods itself, with the seam's signature
        self.assertIn(devices.ReportedDevices,
                      reporter.AcceleratorInventory.__mro__)
        for name in ('device_for_provider', 'all_devices'):
            own = inspect.getattr_static(reporter.AcceleratorInventory, name)
            declared = vars(devices.ReportedDevices)[name]
            self.assertIsNot(declared, own, name)
            self.assertEqual(inspect.signature(declared),
                             inspect.signature(own), name)

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


OWNER = 'OWNER_NOVA'
NV = {'CUSTOM_GPU_VENDOR_10DE'}
MLX = {'CUSTOM_IB_VENDOR_15B3'}


class TestSamples(base.BaseTestCase):
    """Every recorded sample gives the provider tree the rules say.

    The expected trees below were written by hand from the rules of the
    issue (names, resource classes, totals, traits), not copied from the
    output.
    """

    def _tree(self, resources_file, mig_file=None, **conf):
        resources = gpu_hosts.load_json(resources_file)
        mig = gpu_hosts.load_text(mig_file) if mig_file else ''
        _, tree = gpu_hosts.report(resources, mig, gpu_hosts.make_conf(**conf))
        return gpu_hosts.summary(tree)

    def test_lxd_9201_virtio_and_gt730(self):
        self.assertEqual({
            'cmp1_gpu_0000_07_00_0': (
                {'PGPU': 1},
                {OWNER, 'CUSTOM_GPU_VENDOR_10DE',
                 'CUSTOM_GPU_PRODUCT_10DE_1287',
                 'CUSTOM_GPU_MODEL_GEFORCE_GT_730', 'CUSTOM_CUDA_CC_3_5'}),
        }, self._tree('lxd-9201-virtiogpu-gt730-nvidia-subobject-gpu.json'))

    def test_lxd_9201_virtio_reported_when_vendor_listed(self):
        tree = self._tree('lxd-9201-virtiogpu-gt730-nvidia-subobject-gpu.json',
                          gpu_vendor_ids=['10de', '1AF4'])
        self.assertEqual(
            ({'PGPU': 1}, {OWNER, 'CUSTOM_GPU_VENDOR_1AF4',
                           'CUSTOM_GPU_PRODUCT_1AF4_0010'}),
            tree['cmp1_gpu_0000_04_00_0'])
        self.assertEqual(2, len(tree))

    def test_lxd_502_h200_captured_on_a_gpu_machine(self):
        # a real capture: no PCI names and no CUDA version, so the model
        # trait comes from the nvidia object; the virtio NIC is Ethernet
        self.assertEqual({
            'cmp1_gpu_0000_00_06_0': (
                {'PGPU': 1},
                {OWNER, 'CUSTOM_GPU_VENDOR_10DE',
                 'CUSTOM_GPU_PRODUCT_10DE_2335',
                 'CUSTOM_GPU_MODEL_NVIDIA_H200'}),
        }, self._tree('lxd-502-h200-vm-resources.json',
                      'nvsmi-h200-580-L.txt', report_mig=True))

    def test_incus_604_on_the_same_h200_gives_the_same_tree(self):
        # the same machine, Debian 12's Incus 6.0.4 instead of LXD 5.0.2
        self.assertEqual(
            self._tree('lxd-502-h200-vm-resources.json',
                       'nvsmi-h200-580-L.txt', report_mig=True),
            self._tree('incus-604-h200-vm-resources.json',
                       'nvsmi-h200-580-L.txt', report_mig=True))

    def test_maas_lp1939456_connectx3_two_ib_ports(self):
        self.assertEqual({
            'cmp1_ib_0000_04_00_0': (
                {'CUSTOM_INFINIBAND_PORT': 2},
                {OWNER, 'CUSTOM_IB_VENDOR_15B3',
                 'CUSTOM_IB_PRODUCT_15B3_1003'}),
        }, self._tree('maas-lp1939456-connectx3-infiniband.json'))

    def test_maas_lp2067998_ethernet_sriov_not_reported(self):
        self.assertEqual(
            {}, self._tree('maas-lp2067998-thunderx-sriov-vfs.json'))

    def test_a100_80gb_mig_mapped_by_pci_order(self):
        self.assertEqual({
            'cmp1_gpu_0000_07_00_0': (
                {'CUSTOM_MIG_1G_10GB': 7},
                NV | {OWNER, 'CUSTOM_GPU_PRODUCT_10DE_20B2',
                      'CUSTOM_GPU_MODEL_NVIDIA_A100_SXM4_80GB'}),
            'cmp1_gpu_0000_85_00_0': (
                {'PGPU': 1}, NV | {OWNER, 'CUSTOM_GPU_PRODUCT_10DE_20B2'}),
        }, self._tree('handmade-lxd-two-a100-no-nvidia-object.json',
                      'mig-L-a100-sxm4-80gb-7x1g10gb.txt'))

    def test_a100_40gb_legacy_uuids_on_gtx970_card(self):
        # LXD knows no model: nvidia-smi -L's name is the model trait
        self.assertEqual({
            'cmp1_gpu_0000_01_00_0': (
                {'CUSTOM_MIG_1G_5GB': 7},
                NV | {OWNER, 'CUSTOM_GPU_PRODUCT_10DE_13C2',
                      'CUSTOM_GPU_MODEL_A100_SXM4_40GB'}),
        }, self._tree('handmade-lxd-6195-gtx970-from-text.json',
                      'mig-L-a100-sxm4-40gb-7x1g5gb-legacy-uuid.txt'))

    def test_legacy_mig_list_not_matching_lxd_uuid_is_ignored(self):
        # LXD says GPU 0 is GPU-6ddadebd-...; nvidia-smi lists another
        # GPU: its MIG devices cannot be placed, the GT 730 stays whole.
        tree = self._tree(
            'lxd-9201-virtiogpu-gt730-nvidia-subobject-gpu.json',
            'mig-L-a100-sxm4-40gb-7x1g5gb-legacy-uuid.txt')
        self.assertEqual({'PGPU': 1}, tree['cmp1_gpu_0000_07_00_0'][0])

    def test_gtx970_without_nvidia_info(self):
        self.assertEqual({
            'cmp1_gpu_0000_01_00_0': (
                {'PGPU': 1}, NV | {OWNER, 'CUSTOM_GPU_PRODUCT_10DE_13C2'}),
        }, self._tree('handmade-lxd-6195-gtx970-from-text.json'))

    def test_h100_four_mig_slices(self):
        self.assertEqual({
            'cmp1_gpu_0000_00_09_0': (
                {'CUSTOM_MIG_3G_40GB': 1, 'CUSTOM_MIG_2G_20GB': 1,
                 'CUSTOM_MIG_1G_10GB': 2},
                NV | {OWNER, 'CUSTOM_GPU_PRODUCT_10DE_2330',
                      'CUSTOM_GPU_MODEL_NVIDIA_H100_80GB_HBM3',
                      'CUSTOM_CUDA_CC_9_0'}),
        }, self._tree('handmade-lxd-h100-mig-host.json',
                      'nvsmi-h100-80gb-mig-4slices-L.txt'))

    def test_h100_without_mig_reporting_is_one_pgpu(self):
        tree = self._tree('handmade-lxd-h100-mig-host.json',
                          'nvsmi-h100-80gb-mig-4slices-L.txt',
                          report_mig=False)
        self.assertEqual({'PGPU': 1}, tree['cmp1_gpu_0000_00_09_0'][0])

    def test_connectx3_mixed_ports_counts_infiniband_only(self):
        self.assertEqual({
            'cmp1_ib_0000_82_00_0': (
                {'CUSTOM_INFINIBAND_PORT': 1},
                MLX | {OWNER, 'CUSTOM_IB_PRODUCT_15B3_1003'}),
        }, self._tree(
            'handmade-lxd-6060-connectx3-mixed-ports-from-text.json'))

    def test_connectx6_ib_vfs(self):
        traits = MLX | {OWNER, 'CUSTOM_IB_PRODUCT_15B3_101B'}
        self.assertEqual({
            'cmp1_ib_0000_0c_00_0': ({'CUSTOM_INFINIBAND_PORT': 1}, traits),
            # only 4b:00.5 shows a netdev (ibp75s0v7): the other VFs
            # cannot be bound (infiniband parent=<netdev>), not counted
            'cmp1_ib_0000_4b_00_0': ({'CUSTOM_INFINIBAND_VF': 1}, traits),
            'cmp1_ib_0000_61_00_1': ({'CUSTOM_INFINIBAND_PORT': 1}, traits),
        }, self._tree('handmade-lxd-connectx6-ib-vfs.json'))

    def test_connectx6_ports_not_offered_by_default(self):
        # issue 43: a whole port passes issm and umad (a subnet manager);
        # its VFs stay offered, the port-only cards get no provider
        log = self.useFixture(fixtures.FakeLogger(
            name='nova_lxd_accel.accel.inventory.reporter', level='INFO'))
        resources = gpu_hosts.load_json('handmade-lxd-connectx6-ib-vfs.json')
        inventory, tree = gpu_hosts.report(
            resources, conf=gpu_hosts.make_conf(report_infiniband_ports=False))
        traits = MLX | {OWNER, 'CUSTOM_IB_PRODUCT_15B3_101B'}
        self.assertEqual({
            'cmp1_ib_0000_4b_00_0': ({'CUSTOM_INFINIBAND_VF': 1}, traits),
        }, gpu_hosts.summary(tree))
        # once per card, at info, naming the option that offers them
        inventory.update_provider_tree(tree, gpu_hosts.NODE, {},
                                       resources=copy.deepcopy(resources))
        lines = [line for line in log.output.splitlines()
                 if 'report_infiniband_ports' in line]
        self.assertEqual(2, len(lines), log.output)
        self.assertIn('0000:0c:00.0', lines[0])
        self.assertIn('0000:61:00.1', lines[1])

    def test_connectx3_two_ports_not_offered_by_default(self):
        self.assertEqual({}, self._tree(
            'maas-lp1939456-connectx3-infiniband.json',
            report_infiniband_ports=False))

    def test_connectx6_infiniband_reporting_off(self):
        self.assertEqual({}, self._tree('handmade-lxd-connectx6-ib-vfs.json',
                                        report_infiniband=False))

    def test_amd_gpu_vfs(self):
        self.assertEqual({
            'cmp1_gpu_0000_03_00_0': (
                # LXD containers cannot take GPU VFs: the PF is offered
                {'PGPU': 1}, {OWNER, 'CUSTOM_GPU_VENDOR_1002',
                              'CUSTOM_GPU_PRODUCT_1002_6929'}),
            'cmp1_gpu_0000_83_00_0': (
                {'PGPU': 1}, {OWNER, 'CUSTOM_GPU_VENDOR_1002',
                              'CUSTOM_GPU_PRODUCT_1002_740F'}),
        }, self._tree('handmade-lxd-amd-gpu-sriov-vfs.json'))

    def test_whole_host_gpu_and_network(self):
        resources = dict(
            gpu_hosts.load_json('handmade-lxd-h100-mig-host.json'),
            network=gpu_hosts.load_json(
                'maas-lp1939456-connectx3-infiniband.json')['network'])
        _, tree = gpu_hosts.report(
            resources,
            gpu_hosts.load_text('nvsmi-h100-80gb-mig-4slices-L.txt'))
        self.assertEqual(['cmp1_gpu_0000_00_09_0', 'cmp1_ib_0000_04_00_0'],
                         sorted(gpu_hosts.summary(tree)))

    def test_full_inventory_records(self):
        _, tree = gpu_hosts.report(
            gpu_hosts.load_json('handmade-lxd-two-a100-no-nvidia-object.json'),
            gpu_hosts.load_text('mig-L-a100-sxm4-80gb-7x1g10gb.txt'))
        self.assertEqual(
            {'PGPU': {'total': 1, 'reserved': 0, 'min_unit': 1,
                      'max_unit': 1, 'step_size': 1,
                      'allocation_ratio': 1.0}},
            tree.data('cmp1_gpu_0000_85_00_0').inventory)
        self.assertEqual(
            {'CUSTOM_MIG_1G_10GB': {'total': 7, 'reserved': 0,
                                    'min_unit': 1, 'max_unit': 7,
                                    'step_size': 1,
                                    'allocation_ratio': 1.0}},
            tree.data('cmp1_gpu_0000_07_00_0').inventory)
        self.assertEqual(gpu_hosts.ROOT_UUID,
                         tree.data('cmp1_gpu_0000_85_00_0').parent_uuid)
