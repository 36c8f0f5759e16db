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

"""Discovery from /1.0/resources, including the quirks of real dumps."""

from oslotest import base

from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel.inventory import discovery
from nova_lxd_accel.accel.inventory import lxd_resources
from tests.fixtures import gpu_hosts


class TestGpus(base.BaseTestCase):

    def test_gt730_device_data(self):
        gpus = lxd_resources.parse_gpus(gpu_hosts.load_json(
            'lxd-9201-virtiogpu-gt730-nvidia-subobject-gpu.json'))
        self.assertEqual(['0000:04:00.0', '0000:07:00.0'],
                         [g.pci_address for g in gpus])
        gt730 = gpus[1]
        self.assertEqual('GPU-6ddadebd-dafe-2db9-f10f-125719770fd3',
                         gt730.nvidia_uuid)
        self.assertEqual('3.5', gt730.architecture)
        self.assertEqual('GeForce GT 730', gt730.model)
        self.assertEqual(1, gt730.drm_id)
        self.assertEqual(devices.GPU_KIND_PGPU, gt730.kind)
        self.assertIsNone(gpus[0].product)

    def test_messy_cards_do_not_crash(self):
        resources = {'gpu': {'cards': [
            None, 'junk', {},
            {'vendor_id': '10de', 'nvidia': None, 'sriov': None},
            {'pci_address': '', 'vendor_id': '10de'},
            {'pci_address': '0000:3B:00.0', 'vendor_id': '10DE',
             'numa_node': 'x', 'nvidia': 'hollow', 'drm': None,
             'sriov': {'vfs': None}},
            {'pci_address': '0000:3b:00.0', 'vendor_id': '10de'},
        ], 'total': 99}}
        gpus = lxd_resources.parse_gpus(resources)
        self.assertEqual([devices.Gpu(pci_address='0000:3b:00.0',
                                      vendor_id='10de')], gpus)

    def test_sections_may_be_missing_or_null(self):
        for resources in ({}, None, {'gpu': None, 'network': None},
                          {'gpu': {'cards': None}},
                          {'network': {'cards': {}}}, []):
            self.assertEqual([], lxd_resources.parse_gpus(resources))
            self.assertEqual([], lxd_resources.parse_ib_cards(resources))

    def test_gpu_vfs_without_address_are_not_counted(self):
        gpus = lxd_resources.parse_gpus(
            gpu_hosts.load_json('handmade-lxd-amd-gpu-sriov-vfs.json'))
        self.assertEqual(['0000:03:02.0', '0000:03:02.1'],
                         [vf.pci_address for vf in gpus[0].vfs])
        self.assertEqual(devices.GPU_KIND_VGPU, gpus[0].kind)
        self.assertEqual((), gpus[1].vfs)


class TestIbCards(base.BaseTestCase):

    def test_connectx3_ports_and_char_devices(self):
        cards = lxd_resources.parse_ib_cards(
            gpu_hosts.load_json('maas-lp1939456-connectx3-infiniband.json'))
        self.assertEqual(1, len(cards))
        self.assertEqual(
            (devices.IbPort(
                netdev='ibp4s0', port=0,
                address='a0:00:02:20:fe:80:00:00:00:00:00:00:e4:1d:2d:03:00:'
                        '4f:06:e1',
                verb_name='uverbs0', mad_name='umad0', issm_name='issm0'),
             devices.IbPort(
                netdev='ibp4s0d1', port=1,
                address='a0:00:03:00:fe:80:00:00:00:00:00:00:e4:1d:2d:03:00:'
                        '4f:06:e2',
                verb_name='uverbs0', mad_name='umad1', issm_name='issm1')),
            cards[0].ports)

    def test_mixed_unordered_ports_keep_infiniband_only(self):
        cards = lxd_resources.parse_ib_cards(gpu_hosts.load_json(
            'handmade-lxd-6060-connectx3-mixed-ports-from-text.json'))
        self.assertEqual(['0000:82:00.0'], [c.pci_address for c in cards])
        self.assertEqual([('ib0', 0)],
                         [(p.netdev, p.port) for p in cards[0].ports])

    def test_ib_vfs(self):
        cards = lxd_resources.parse_ib_cards(
            gpu_hosts.load_json('handmade-lxd-connectx6-ib-vfs.json'))
        vfs = cards[1].vfs
        self.assertEqual(['0000:4b:00.%d' % i for i in range(1, 6)],
                         [vf.pci_address for vf in vfs])
        self.assertEqual(('ibp75s0v7',), vfs[4].netdevs)
        self.assertEqual((), vfs[0].netdevs)

    def test_vf_rules_on_mixed_card(self):
        eth = {'id': 'eth0', 'port': 1, 'protocol': 'ethernet'}
        ib = {'id': 'ib0', 'port': 0, 'protocol': 'infiniband'}
        resources = {'network': {'cards': [{
            'pci_address': '0000:81:00.0', 'ports': [eth, ib],
            'sriov': {'vfs': [
                # no ports on a mixed card: unknown protocol, not counted
                {'pci_address': '0000:81:00.1'},
                # ethernet VF: not counted
                {'pci_address': '0000:81:00.2', 'ports': [eth]},
                # no PCI address: cannot be pinned
                {'ports': [ib]},
                {'pci_address': '0000:81:00.3', 'ports': [ib]},
            ]}}]}}
        cards = lxd_resources.parse_ib_cards(resources)
        self.assertEqual(['0000:81:00.3'],
                         [vf.pci_address for vf in cards[0].vfs])

    def test_usb_nic_and_card_without_ports(self):
        resources = {'network': {'cards': [
            {'usb_address': '1:4',
             'ports': [{'id': 'x', 'protocol': 'infiniband'}]},
            {'pci_address': '0000:05:00.0', 'ports': None},
            {'pci_address': '0000:06:00.0'},
        ]}}
        self.assertEqual([], lxd_resources.parse_ib_cards(resources))


class TestDiscoveryFilters(base.BaseTestCase):

    def test_excluded_addresses_cover_gpus_cards_and_vfs(self):
        resources = dict(
            gpu_hosts.load_json('handmade-lxd-amd-gpu-sriov-vfs.json'),
            network=gpu_hosts.load_json(
                'handmade-lxd-connectx6-ib-vfs.json')['network'])
        options = discovery.Options.from_conf(gpu_hosts.make_conf(
            excluded_pci_addresses=['83:00.0', '0000:03:02.1',
                                    '0000:0C:00.0', '0000:4b:00.2']))
        gpus, cards = discovery.discover(resources, '', options)
        self.assertEqual(['0000:03:00.0'], [g.pci_address for g in gpus])
        self.assertEqual(['0000:03:02.0'],
                         [vf.pci_address for vf in gpus[0].vfs])
        self.assertEqual(['0000:4b:00.0', '0000:61:00.1'],
                         [c.pci_address for c in cards])
        self.assertEqual(4, len(cards[0].vfs))

    def test_no_vendor_listed_reports_no_gpu(self):
        options = discovery.Options.from_conf(
            gpu_hosts.make_conf(gpu_vendor_ids=[]))
        gpus, _ = discovery.discover(
            gpu_hosts.load_json('handmade-lxd-h100-mig-host.json'), '',
            options)
        self.assertEqual([], gpus)

    def test_mig_mapped_by_uuid_before_order(self):
        # nvidia-smi's GPU 0 has the UUID LXD gives the card at 0000:b0,
        # not the first card by PCI address.
        resources = {'gpu': {'cards': [
            {'pci_address': '0000:17:00.0', 'vendor_id': '10de'},
            {'pci_address': '0000:b0:00.0', 'vendor_id': '10de',
             'nvidia': {'uuid': 'GPU-B0'}},
        ]}}
        text = ('GPU 0: X (UUID: GPU-b0)\n'
                '  MIG 7g.80gb Device 0: (UUID: MIG-1)\n')
        gpus, _ = discovery.discover(resources, text, discovery.Options())
        self.assertEqual([(), ('MIG-1',)],
                         [tuple(m.uuid for m in g.mig_devices)
                          for g in gpus])

    def test_mig_mapping_ignores_non_nvidia_cards(self):
        # The AMD card at the lowest address does not shift the order.
        resources = {'gpu': {'cards': [
            {'pci_address': '0000:01:00.0', 'vendor_id': '1002'},
            {'pci_address': '0000:02:00.0', 'vendor_id': '10de'},
            {'pci_address': '0000:03:00.0', 'vendor_id': '10de'},
        ]}}
        text = ('GPU 0: A (UUID: GPU-a)\n'
                'GPU 1: B (UUID: GPU-b)\n'
                '  MIG 1g.5gb Device 0: (UUID: MIG-GPU-b/1/0)\n')
        gpus, _ = discovery.discover(resources, text, discovery.Options())
        self.assertEqual(['pgpu', 'pgpu', 'mig'], [g.kind for g in gpus])
        self.assertEqual('0000:03:00.0', gpus[2].pci_address)
        self.assertEqual((1, 0), (gpus[2].mig_devices[0].gi,
                                  gpus[2].mig_devices[0].ci))
