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

"""Every recorded sample gives the provider tree the rules say.

The expected trees below were written by hand from the rules of the issue
(names, resource classes, totals, traits), not copied from the output.
"""

from oslotest import base

from tests.fixtures import gpu_hosts

OWNER = 'OWNER_NOVA'
NV = {'CUSTOM_GPU_VENDOR_10DE'}
MLX = {'CUSTOM_IB_VENDOR_15B3'}


class TestSamples(base.BaseTestCase):

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
