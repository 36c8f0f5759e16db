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

"""Who holds what: every way an LXD instance can take a unit."""

import copy

import fixtures
import testtools

from nova_lxd_accel.accel.binding import pick
from nova_lxd_accel.accel.inventory import discovery
from nova_lxd_accel.accel.inventory import reporter
from nova_lxd_accel.accel import units
from nova_lxd_accel import exception
from tests.fixtures import gpu_hosts

MIG_TEXT = gpu_hosts.load_text('mig-L-a100-sxm4-80gb-7x1g10gb.txt')
LEGACY = gpu_hosts.load_text('mig-L-a100-sxm4-40gb-7x1g5gb-legacy-uuid.txt')


def _host(mig_text=MIG_TEXT,
          gpu_uuid='GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16'):
    """GPU 0000:00:09.0 (MIG), an A100 at 0000:07:00.0, IB VFs."""
    mig_gpu = copy.deepcopy(gpu_hosts.load_json(
        'handmade-lxd-h100-mig-host.json')['gpu']['cards'][1])
    mig_gpu['nvidia']['uuid'] = gpu_uuid
    whole = [c for c in gpu_hosts.load_json(
        'handmade-lxd-two-a100-no-nvidia-object.json')['gpu']['cards']
        if c.get('pci_address') == '0000:07:00.0'][0]
    network = gpu_hosts.load_json('handmade-lxd-connectx6-ib-vfs.json')[
        'network']
    for i, vf in enumerate(network['cards'][1]['sriov']['vfs'][:4]):
        vf['ports'] = [{'id': 'ibp75s0v%d' % i, 'port': 0,
                        'protocol': 'infiniband'}]
    gpus, cards = discovery.discover(
        {'gpu': {'cards': [mig_gpu, whole]}, 'network': network},
        mig_text, discovery.Options.from_conf(gpu_hosts.make_conf()))
    return gpus + cards


HOST = _host()
MIG_GPU = [d for d in HOST if getattr(d, 'mig_devices', None)][0]
WHOLE = [d for d in HOST if d.pci_address == '0000:07:00.0'][0]
SLICE0 = units.mig_unit_key(MIG_GPU, MIG_GPU.mig_devices[0])
ALL_SLICES = {units.mig_unit_key(MIG_GPU, m) for m in MIG_GPU.mig_devices}


def keys(device, host=HOST):
    return units.device_unit_keys(device, host)


class SelectorTest(testtools.TestCase):

    def test_pci(self):
        self.assertEqual({'pci:0000:07:00.0'},
                         keys({'type': 'gpu', 'pci': '07:00.0'}))

    def test_whole_gpu_takes_its_mig_devices(self):
        self.assertEqual({'pci:0000:00:09.0'} | ALL_SLICES,
                         keys({'type': 'gpu', 'gputype': 'physical',
                               'pci': '0000:00:09.0'}))

    def test_drm_id(self):
        self.assertEqual(1, MIG_GPU.drm_id)
        self.assertEqual({'pci:0000:00:09.0'} | ALL_SLICES,
                         keys({'type': 'gpu', 'id': '1'}))
        self.assertEqual(set(), keys({'type': 'gpu', 'id': '9'}))

    def test_vendor_and_product(self):
        every = {'pci:' + g.pci_address for g in HOST
                 if hasattr(g, 'mig_devices')} | ALL_SLICES
        self.assertEqual(every, keys({'type': 'gpu', 'vendorid': '10de'}))
        self.assertEqual({'pci:0000:00:09.0'} | ALL_SLICES, keys(
            {'type': 'gpu', 'vendorid': '10de',
             'productid': MIG_GPU.product_id}))

    def test_no_selector_takes_every_gpu(self):
        every = {'pci:' + g.pci_address for g in HOST
                 if hasattr(g, 'mig_devices')} | ALL_SLICES
        self.assertEqual(every, keys({'type': 'gpu'}))
        # without the host's devices: every GPU, as a wildcard
        self.assertEqual({'pci:*'}, keys({'type': 'gpu'}, host=()))

    def test_mig_uuid_with_and_without_prefix(self):
        uuid = MIG_GPU.mig_devices[0].uuid
        for value in (uuid, uuid[4:], uuid.upper()):
            self.assertEqual({SLICE0}, keys({'type': 'gpu', 'gputype': 'mig',
                                             'mig.uuid': value}))

    def test_legacy_mig_by_gi_ci_matches_its_uuid(self):
        host = _host(LEGACY, 'GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f')
        gpu = [d for d in host if getattr(d, 'mig_devices', None)][0]
        mig = gpu.mig_devices[0]
        by_gi_ci = keys({'type': 'gpu', 'gputype': 'mig',
                         'pci': gpu.pci_address, 'mig.gi': str(mig.gi),
                         'mig.ci': str(mig.ci)}, host)
        by_uuid = keys({'type': 'gpu', 'gputype': 'mig',
                        'mig.uuid': mig.uuid}, host)
        self.assertEqual({units.mig_unit_key(gpu, mig)}, by_gi_ci)
        self.assertEqual(by_gi_ci, by_uuid)
        # gi/ci without pci: that instance on every GPU that may have it
        self.assertIn(units.mig_unit_key(gpu, mig), keys(
            {'type': 'gpu', 'gputype': 'mig', 'mig.gi': str(mig.gi),
             'mig.ci': str(mig.ci)}, host))

    def test_cdi_ids(self):
        nvidia = MIG_GPU.nvidia_uuid
        self.assertEqual({'pci:0000:00:09.0'} | ALL_SLICES, keys(
            {'type': 'gpu', 'id': 'nvidia.com/gpu=%s' % nvidia}))
        self.assertEqual({SLICE0}, keys(
            {'type': 'gpu', 'id': 'nvidia.com/gpu=%s'
             % MIG_GPU.mig_devices[0].uuid}))
        self.assertEqual({SLICE0}, keys(
            {'type': 'gpu', 'gputype': 'mig', 'id': 'nvidia.com/mig=%s'
             % MIG_GPU.mig_devices[0].uuid}))
        self.assertEqual({SLICE0}, keys(
            {'type': 'gpu', 'id': 'nvidia.com/gpu=0:0'}))
        self.assertEqual(set(), ALL_SLICES - keys(
            {'type': 'gpu', 'id': 'nvidia.com/gpu=all'}))

    def test_infiniband_nic_and_pci_passthrough(self):
        self.assertEqual({'netdev:ibp75s0v1'}, keys(
            {'type': 'infiniband', 'nictype': 'physical',
             'parent': 'ibp75s0v1'}))
        self.assertEqual({'netdev:ibp75s0v2'}, keys(
            {'type': 'nic', 'nictype': 'physical', 'parent': 'ibp75s0v2'}))
        self.assertIn('netdev:ibp75s0v0', keys(
            {'type': 'pci', 'address': '0000:4b:00.1'}))

    def test_holders_named_with_project_and_profiles_count(self):
        records = [
            {'name': 'c1', 'project': 'p1', 'config': {},
             'devices': {}, 'expanded_devices': {'ib': {
                 'type': 'infiniband', 'nictype': 'physical',
                 'parent': 'ibp75s0v0'}}},
            {'name': 'c1', 'project': 'p2', 'type': 'virtual-machine',
             'config': {}, 'devices': {'g': {'type': 'gpu',
                                             'pci': '0000:07:00.0'}}},
        ]
        held = units.held_units(records, host_devices=HOST)
        self.assertEqual(['p1/c1'], held['netdev:ibp75s0v0'])
        self.assertEqual(['p2/c1'], held['pci:0000:07:00.0'])
        held = units.held_units(records, exclude=('p1', 'c1'),
                                host_devices=HOST)
        self.assertNotIn('netdev:ibp75s0v0', held)
        self.assertIn('pci:0000:07:00.0', held)


class SriovParentTest(testtools.TestCase):
    """``nictype=sriov`` devices take a VF LXD picks from their parent."""

    CARD = [d for d in HOST if d.pci_address == '0000:4b:00.0'][0]
    SRIOV = {'type': 'infiniband', 'nictype': 'sriov', 'parent': 'ibp75s0'}

    def foreign(self, *devices):
        return {'name': 'by-hand', 'project': 'other', 'config': {},
                'devices': {'ib%d' % i: d for i, d in enumerate(devices)}}

    def bind(self, count, records):
        held = units.held_units(records, host_devices=HOST)
        return pick.bind({'rp': {'resources': {
            'CUSTOM_INFINIBAND_VF': count}}}, {'rp': self.CARD}.get, held)

    def test_one_vf_of_the_card_per_device(self):
        held = units.held_units([self.foreign(
            self.SRIOV, dict(self.SRIOV, type='nic'))], host_devices=HOST)
        self.assertEqual(['other/by-hand', 'other/by-hand'],
                         units.unspecified_vfs(held, self.CARD))
        other_card = [d for d in HOST if d.pci_address == '0000:0c:00.0'][0]
        self.assertEqual([], units.unspecified_vfs(held, other_card))

    def test_never_bound_beyond_what_is_left(self):
        # 5 VFs with a netdev; a foreign sriov device takes one of them
        records = [self.foreign(self.SRIOV)]
        bound = self.bind(4, records)
        self.assertEqual(4, len(bound.units))
        log = self.useFixture(fixtures.FakeLogger(
            name='nova_lxd_accel.accel.binding.pick'))
        exc = self.assertRaises(exception.AcceleratorUnavailable,
                                self.bind, 5, records)
        self.assertIn('nictype=sriov', log.output)
        self.assertIn('only 4 free', str(exc))

    def test_reported_reserved_in_placement(self):
        resources = {'network': gpu_hosts.load_json(
            'handmade-lxd-connectx6-ib-vfs.json')['network']}
        for i, vf in enumerate(resources['network']['cards'][1]['sriov'][
                'vfs'][:4]):
            vf['ports'] = [{'id': 'ibp75s0v%d' % i, 'port': 0,
                            'protocol': 'infiniband'}]
        inventory = reporter.AcceleratorInventory(
            lambda: resources, lambda: '', conf=gpu_hosts.make_conf(),
            provider_allocations=lambda rp: {},
            list_instances=lambda: [self.foreign(self.SRIOV)],
            is_ours=lambda record: False)
        tree = gpu_hosts.new_tree()
        inventory.update_provider_tree(tree, gpu_hosts.NODE, {})
        vf = tree.data(gpu_hosts.NODE + '_ib_0000_4b_00_0').inventory[
            'CUSTOM_INFINIBAND_VF']
        self.assertEqual((5, 1), (vf['total'], vf['reserved']))
