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

"""The host's accelerator devices (:mod:`.accel.devices`).

Names and PCI addresses as Placement and LXD need them, how a GPU is
offered, and the value semantics the periodic inventory relies on: an
unchanged host gives equal, hashable, immutable objects.
"""

import dataclasses

import testtools

from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel.inventory import lxd_resources
from tests.fixtures import gpu_hosts


class TestNames(testtools.TestCase):

    def test_normalise_name_makes_placement_names(self):
        self.assertEqual(
            ['NVIDIA_H100_80GB_HBM3', 'NVIDIA_A100_SXM4_80GB', 'A10',
             '1G_10GB_ME', '42', ''],
            [devices.normalise_name(text) for text in (
                'NVIDIA H100 80GB HBM3', 'nvidia a100-sxm4-80gb',
                '  --a10.. ', '1g.10gb+me', 42, '')])

    def test_pci_slug_has_only_name_safe_characters(self):
        self.assertEqual('0000_3b_00_0', devices.pci_slug('0000:3b:00.0'))


class TestNormalisePciAddress(testtools.TestCase):

    def test_domain_added_and_case_lowered(self):
        self.assertEqual('0000:3b:00.0',
                         devices.normalise_pci_address('3B:00.0'))
        self.assertEqual('0000:af:00.1',
                         devices.normalise_pci_address(' 0000:AF:00.1\n'))

    def test_full_address_is_kept(self):
        self.assertEqual('0001:3b:00.0',
                         devices.normalise_pci_address('0001:3b:00.0'))

    def test_empty_or_not_text_is_none(self):
        for value in (None, '', '   ', 0x3b, ['0000:3b:00.0']):
            self.assertIsNone(devices.normalise_pci_address(value),
                              repr(value))


class TestGpu(testtools.TestCase):

    MIG = devices.MigDevice(profile='1g.10gb', uuid='MIG-1', index=0,
                            gpu_index=0)
    VF = devices.GpuVf(pci_address='0000:03:02.0', vendor_id='1002')

    def test_kind_mig_before_vfs_before_whole(self):
        gpu = devices.Gpu(pci_address='0000:03:00.0', vendor_id='10de')
        self.assertEqual(
            ['mig', 'vgpu', 'pgpu'],
            [g.kind for g in (
                dataclasses.replace(gpu, mig_devices=(self.MIG,),
                                    vfs=(self.VF,)),
                dataclasses.replace(gpu, vfs=(self.VF,)),
                gpu)])

    def test_only_nvidia_vendor_id_is_nvidia(self):
        self.assertEqual(
            [True, False, False],
            [devices.Gpu(pci_address='0000:01:00.0', vendor_id=v).is_nvidia
             for v in ('10de', '1002', None)])


class TestValueSemantics(testtools.TestCase):

    def test_an_unchanged_host_gives_equal_hashable_devices(self):
        resources = gpu_hosts.load_json('handmade-lxd-amd-gpu-sriov-vfs.json')
        first = lxd_resources.parse_gpus(resources)
        second = lxd_resources.parse_gpus(
            gpu_hosts.load_json('handmade-lxd-amd-gpu-sriov-vfs.json'))
        self.assertEqual(first, second)
        self.assertEqual(len(first), len(set(first) | set(second)))

    def test_a_changed_field_makes_another_device(self):
        gpu = lxd_resources.parse_gpus(gpu_hosts.load_json(
            'handmade-lxd-h100-mig-host.json'))[1]
        self.assertNotEqual(gpu, dataclasses.replace(gpu, shared_slots=2))

    def test_a_gpu_is_not_a_network_card_at_the_same_address(self):
        self.assertNotEqual(devices.Gpu(pci_address='0000:4b:00.0'),
                            devices.IbCard(pci_address='0000:4b:00.0'))

    def test_devices_cannot_be_changed_in_place(self):
        gpu = devices.Gpu(pci_address='0000:07:00.0')
        self.assertRaises(dataclasses.FrozenInstanceError, setattr, gpu,
                          'shared_slots', 4)


def _ratio(fraction):
    return fraction.numerator, fraction.denominator


class MigGpuShareTest(testtools.TestCase):

    def test_mig_slice_counts_its_compute_slices(self):
        self.assertEqual((1, 7), _ratio(devices.mig_gpu_share(
            '1g.10gb', 'H100 80GB HBM3')))
        self.assertEqual((3, 7), _ratio(devices.mig_gpu_share(
            '3g.40gb', 'A100-SXM4-80GB')))
        self.assertEqual((1, 1), _ratio(devices.mig_gpu_share(
            '7g.80gb', 'H100 80GB HBM3')))
        # an A30 has 4 compute slices
        self.assertEqual((1, 4), _ratio(devices.mig_gpu_share(
            '1g.6gb', 'A30')))
        # a compute instance in a GPU instance counts its own slices
        self.assertEqual((1, 7), _ratio(devices.mig_gpu_share(
            '1c.3g.71gb', 'H100 80GB HBM3')))
        self.assertIsNone(
            devices.mig_gpu_share('weird', 'H100 80GB HBM3'))
