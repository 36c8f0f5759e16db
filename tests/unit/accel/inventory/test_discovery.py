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

"""Discovery: LXD resources, ``nvidia-smi -L`` and options -> devices.

``test_lxd_resources`` covers the excluded addresses, an empty vendor list
and how ``-L`` GPUs are matched to LXD's cards for their MIG devices. Here:
the options as read from nova.conf, the model a GPU is given when LXD
knows none, the switches for MIG and InfiniBand, a listed GPU that
matches no card, and shared GPUs (by a model only nvidia-smi names; a
shared MIG GPU offered whole).
"""

import logging

import fixtures
import testtools

from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel.inventory import discovery
from nova_lxd_accel.accel.inventory import nvidia_smi
from tests.fixtures import gpu_hosts

#: 0000:07:00.0 with LXD's model, 0000:85:00.0 without a nvidia object
TWO_A100 = 'handmade-lxd-two-a100-no-nvidia-object.json'
A100_MODEL, A100_BARE = '0000:07:00.0', '0000:85:00.0'
H100_HOST = 'handmade-lxd-h100-mig-host.json'
H100 = '0000:00:09.0'
H100_L = 'nvsmi-h100-80gb-mig-4slices-L.txt'
TWO_GPUS_L = ('GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-a)\n'
              'GPU 1: NVIDIA A100 80GB PCIe (UUID: GPU-b)\n')


def by_pci(gpus):
    return {g.pci_address: g for g in gpus}


class TestOptions(testtools.TestCase):

    def test_defaults_are_nova_conf_defaults(self):
        self.assertEqual(
            discovery.Options(),
            discovery.Options.from_conf(gpu_hosts.make_conf(
                pool_whole_gpus=True, report_infiniband_ports=False)))

    def test_values_from_nova_conf_are_normalised(self):
        options = discovery.Options.from_conf(gpu_hosts.make_conf(
            gpu_vendor_ids=[' 10DE ', '', '1002'],
            excluded_pci_addresses=['3B:00.0', '', '0000:AF:00.1'],
            report_mig=False, report_infiniband=False,
            shared_gpus=['NVIDIA_A10:4'], pool_whole_gpus=False,
            report_infiniband_ports=True))
        self.assertEqual(
            discovery.Options(
                gpu_vendor_ids=frozenset(('10de', '1002')),
                excluded_pci_addresses=frozenset(('0000:3b:00.0',
                                                  '0000:af:00.1')),
                report_mig=False, report_infiniband=False,
                shared_gpus=('NVIDIA_A10:4',), pool_whole_gpus=False,
                report_infiniband_ports=True),
            options)


class TestModels(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.gpus = by_pci(discovery.discover(
            gpu_hosts.load_json(TWO_A100), '', discovery.Options())[0])

    def attach(self, probed=None, listing=''):
        return by_pci(discovery.attach_models(
            list(self.gpus.values()), probed, nvidia_smi.parse_list(listing)))

    def test_a_card_lxd_names_no_model_gets_nvidia_smis_name(self):
        self.assertIsNone(self.gpus[A100_BARE].model)
        gpus = self.attach(listing=TWO_GPUS_L)
        self.assertEqual('NVIDIA A100 80GB PCIe', gpus[A100_BARE].model)

    def test_the_probes_name_wins_over_the_listing(self):
        gpus = self.attach({A100_BARE: ' NVIDIA A100-PCIE-40GB '},
                           TWO_GPUS_L)
        self.assertEqual('NVIDIA A100-PCIE-40GB', gpus[A100_BARE].model)

    def test_the_model_lxd_gives_is_kept(self):
        gpus = self.attach({A100_MODEL: 'NVIDIA A100 80GB PCIe'},
                           TWO_GPUS_L)
        self.assertEqual('NVIDIA A100-SXM4-80GB', gpus[A100_MODEL].model)

    def test_a_card_of_another_vendor_gets_no_nvidia_name(self):
        amd = devices.Gpu(pci_address='0000:01:00.0', vendor_id='1002')
        out = discovery.attach_models([amd], {amd.pci_address: 'NVIDIA X'})
        self.assertEqual([amd], out)

    def test_a_listed_gpu_whose_uuid_lxd_gives_another_card_is_unmatched(self):
        # by index nvidia-smi's GPU 0 would be this card, but LXD knows
        # the card's UUID and it is not the listed one
        card = devices.Gpu(pci_address=H100, vendor_id='10de',
                           nvidia_uuid='GPU-known')
        listing = nvidia_smi.parse_list(
            'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-other)\n'
            '  MIG 1g.10gb     Device  0: (UUID: MIG-1)\n')
        log = self.useFixture(fixtures.FakeLogger(
            name=discovery.__name__, level=logging.WARNING))
        self.assertEqual([card], discovery.attach_models([card], None,
                                                         listing))
        self.assertEqual([card], discovery.attach_mig([card], listing))
        self.assertIn('nvidia-smi lists GPU 0 (GPU-other) with MIG devices '
                      'that matches no GPU of LXD', log.output)


class TestSwitchesAndSharing(testtools.TestCase):

    def discover(self, resources, listing='', probed=None, **conf):
        return discovery.discover(
            resources, listing,
            discovery.Options.from_conf(gpu_hosts.make_conf(**conf)),
            probed_names=probed)

    def test_mig_devices_are_reported_unless_turned_off(self):
        resources = gpu_hosts.load_json(H100_HOST)
        listing = gpu_hosts.load_text(H100_L)
        self.assertEqual('mig', by_pci(self.discover(
            resources, listing)[0])[H100].kind)
        gpu = by_pci(self.discover(resources, listing,
                                   report_mig=False)[0])[H100]
        self.assertEqual(('pgpu', ()), (gpu.kind, gpu.mig_devices))

    def test_infiniband_cards_are_reported_unless_turned_off(self):
        resources = gpu_hosts.load_json('handmade-lxd-connectx6-ib-vfs.json')
        self.assertNotEqual([], self.discover(resources)[1])
        self.assertEqual([], self.discover(resources,
                                           report_infiniband=False)[1])

    def test_a_shared_mig_gpu_is_offered_whole(self):
        gpu = by_pci(self.discover(
            gpu_hosts.load_json(H100_HOST), gpu_hosts.load_text(H100_L),
            shared_gpus=['%s:2' % H100])[0])[H100]
        self.assertEqual((2, (), 'pgpu'),
                         (gpu.shared_slots, gpu.mig_devices, gpu.kind))

    def test_shared_by_a_model_only_nvidia_smi_names(self):
        gpus = by_pci(self.discover(
            gpu_hosts.load_json(TWO_A100),
            probed={A100_BARE: 'NVIDIA A100 80GB PCIe'},
            shared_gpus=['NVIDIA_A100_80GB_PCIE:4'])[0])
        self.assertEqual({A100_MODEL: 0, A100_BARE: 4},
                         {pci: g.shared_slots for pci, g in gpus.items()})

    def test_a_shared_gpu_of_an_excluded_address_is_not_reported(self):
        gpus, _ = self.discover(
            gpu_hosts.load_json(TWO_A100),
            shared_gpus=['%s:4' % A100_MODEL],
            excluded_pci_addresses=[A100_MODEL])
        self.assertEqual([A100_BARE], [g.pci_address for g in gpus])
