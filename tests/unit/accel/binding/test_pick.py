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

"""Allocations + provider tree + recorded host -> exact LXD devices.

The host is built from the recorded samples through the real discovery
and provider-tree code; allocations name providers by the UUIDs that tree
gave them, as nova's spawn() does. Expected device dicts are written by
hand from LXD's device documentation.
"""

import json

import fixtures
from oslotest import base

from nova_lxd_accel.accel.binding import binding_record
from nova_lxd_accel.accel.binding import pick
from nova_lxd_accel.accel import units
from nova_lxd_accel.container import identity
from nova_lxd_accel import exception
from tests.fixtures import binding
from tests.fixtures import gpu_hosts

H100 = binding.H100
A100_0 = binding.A100_0
A100_1 = binding.A100_1
IB_VF = binding.IB_VF
IB_PORT = binding.IB_PORT


class TestMixedHost(binding.BindingTestBase):

    resources = staticmethod(gpu_hosts.mixed_host)
    mig_text = gpu_hosts.load_text('nvsmi-h100-80gb-mig-4slices-L.txt')

    def test_no_accelerators_no_devices(self):
        result = self.bind(self.alloc())
        self.assertEqual({}, result.devices)
        self.assertEqual({}, result.config)

    def test_whole_gpu(self):
        result = self.bind(self.alloc((A100_0, 'PGPU', 1)))
        self.assertEqual({'nova-gpu0': {'type': 'gpu', 'gputype': 'physical',
                                        'pci': '0000:07:00.0'}},
                         result.devices)
        record = json.loads(result.config[identity.KEY_DEVICES])
        self.assertEqual([{'name': 'nova-gpu0', 'kind': 'pgpu',
                           'resource_class': 'PGPU',
                           'provider': self.rp(A100_0),
                           'pci': '0000:07:00.0',
                           'unit': 'pci:0000:07:00.0'}], record)
        self.assertNotIn('nvidia.runtime', result.config)

    def test_mig(self):
        result = self.bind(self.alloc((H100, 'CUSTOM_MIG_1G_10GB', 2)))
        self.assertEqual({
            'nova-mig0': {'type': 'gpu', 'gputype': 'mig',
                          'pci': '0000:00:09.0',
                          'mig.uuid': 'MIG-00000002-0000-0000-0000-'
                                      '000000000002'},
            'nova-mig1': {'type': 'gpu', 'gputype': 'mig',
                          'pci': '0000:00:09.0',
                          'mig.uuid': 'MIG-00000003-0000-0000-0000-'
                                      '000000000003'}}, result.devices)
        self.assertEqual('true', result.config['nvidia.runtime'])

    def test_mig_skips_held_unit(self):
        held = {'mig:00000002-0000-0000-0000-000000000002': ['nova-x']}
        result = self.bind(self.alloc((H100, 'CUSTOM_MIG_1G_10GB', 1)),
                           held)
        self.assertEqual('MIG-00000003-0000-0000-0000-000000000003',
                         result.devices['nova-mig0']['mig.uuid'])

    def test_mig_slices_of_a_held_card_are_not_picked(self):
        # a hold on the card (an operator's `gpu hold`, the health check),
        # read from the state file under the claim lock, keeps its slices
        # off at once, not only from the next refresh of the inventory
        held = {'pci:0000:00:09.0': ['held (operator): maintenance']}
        error = self.assertRaises(
            exception.AcceleratorUnavailable, self.bind,
            self.alloc((H100, 'CUSTOM_MIG_1G_10GB', 1)), held)
        self.assertIn('only 0 free', str(error))

    def test_ib_vf_and_port(self):
        result = self.bind(self.alloc((IB_VF, 'CUSTOM_INFINIBAND_VF', 1),
                                      (IB_PORT, 'CUSTOM_INFINIBAND_PORT',
                                       1)))
        devices = result.devices
        self.assertEqual(
            [{'type': 'infiniband', 'nictype': 'physical',
              'parent': 'ibp12s0'},
             {'type': 'infiniband', 'nictype': 'physical',
              'parent': 'ibp75s0v0'}],
            sorted(devices.values(), key=lambda d: d['parent']))
        self.assertEqual(['nova-ib0', 'nova-ib1'], sorted(devices))
        records = {r['netdev']: r for r in result.records()}
        self.assertEqual('0000:4b:00.1', records['ibp75s0v0']['vf_pci'])

    def _vf_container(self, project):
        share = pick.ShareRequest(project_id=project)
        bound = pick.bind(self.alloc((IB_VF, 'CUSTOM_INFINIBAND_VF', 1)),
                          self.inventory.device_for_provider, share=share)
        return {'name': 'vf-' + project, 'project': 'default',
                'config': {identity.KEY_DEVICES: json.dumps(
                    bound.records())},
                'devices': bound.devices}

    def _bind_vf(self, project, records, any_project=False):
        share = pick.ShareRequest(
            project_id=project, vf_any_project=any_project,
            projects=units.share_projects(records))
        return pick.bind(self.alloc((IB_VF, 'CUSTOM_INFINIBAND_VF', 1)),
                         self.inventory.device_for_provider,
                         units.held_units(records), share=share)

    def test_ib_vfs_serve_one_project_at_a_time(self):
        # issue 43: a VF's GUID is fixed, so its card's partitions are;
        # the card's VFs go to one project unless the operator allows more
        log = self.useFixture(fixtures.FakeLogger(
            name='nova_lxd_accel.accel.binding.pick'))
        first = self._vf_container('p1')
        self.assertEqual('p1', json.loads(
            first['config'][identity.KEY_DEVICES])[0]['project_id'])
        error = self.assertRaises(exception.InfinibandCardOtherProject,
                                  self._bind_vf, 'p2', [first])
        self.assertIsInstance(error, exception.AcceleratorUnavailable)
        self.assertNotIn('p1', str(error))
        self.assertIn('serve project(s) p1: not bound for project p2',
                      log.output)
        # the same project gets the card's next VF; any project when allowed
        for project, allowed in (('p1', False), ('p2', True)):
            bound = self._bind_vf(project, [first], allowed)
            self.assertEqual(['ibp75s0v1'],
                             [d['parent'] for d in bound.devices.values()])

    def test_port_refused_when_ports_are_not_offered(self):
        # issue 43: an allocation of a whole port (made while ports were
        # offered, or by hand) binds nothing once the option is off
        allocations = self.alloc((IB_PORT, 'CUSTOM_INFINIBAND_PORT', 1))
        error = self.assertRaises(
            exception.AcceleratorNotBindable, pick.bind, allocations,
            self.inventory.device_for_provider)
        self.assertIn('report_infiniband_ports', str(error))
        # VFs stay bindable
        result = pick.bind(self.alloc((IB_VF, 'CUSTOM_INFINIBAND_VF', 1)),
                           self.inventory.device_for_provider)
        self.assertEqual(['ibp75s0v0'],
                         [d['parent'] for d in result.devices.values()])

    def test_port_of_a_card_with_vfs_is_refused(self):
        # such a card offers its VFs, never its ports
        error = self.assertRaises(
            exception.AcceleratorNotBindable, self.bind,
            self.alloc((IB_VF, 'CUSTOM_INFINIBAND_PORT', 1)))
        self.assertIn('offers no such resource class', str(error))

    def test_two_gpus_in_separate_groups(self):
        result = self.bind(self.alloc((A100_0, 'PGPU', 1),
                                      (A100_1, 'PGPU', 1)))
        self.assertEqual({'0000:07:00.0', '0000:85:00.0'},
                         {d['pci'] for d in result.devices.values()})
        self.assertEqual(['nova-gpu0', 'nova-gpu1'], sorted(result.devices))

    def test_gpu_plus_ib_vf(self):
        held = {'netdev:ibp75s0v0': ['nova-other']}
        result = self.bind(self.alloc((A100_1, 'PGPU', 1),
                                      (IB_VF, 'CUSTOM_INFINIBAND_VF', 1)),
                           held)
        self.assertEqual({
            'nova-gpu0': {'type': 'gpu', 'gputype': 'physical',
                          'pci': '0000:85:00.0'},
            'nova-ib0': {'type': 'infiniband', 'nictype': 'physical',
                         'parent': 'ibp75s0v1'}}, result.devices)

    def test_held_gpu_is_refused_naming_holder_in_the_log_only(self):
        log = self.useFixture(fixtures.FakeLogger(
            name='nova_lxd_accel.accel.binding.pick'))
        held = {'pci:0000:07:00.0': ['nova-abc']}
        exc = self.assertRaises(
            exception.AcceleratorUnavailable, self.bind,
            self.alloc((A100_0, 'PGPU', 1)), held)
        self.assertIn('pci:0000:07:00.0 (held by nova-abc)', log.output)
        self.assertNotIn('nova-abc', str(exc))
        self.assertIn('0000:07:00.0', str(exc))
        self.assertIn(self.rp(A100_0), str(exc))

    def test_bare_gpu_device_holds_every_gpu(self):
        held = units.held_units([{'name': 'hand-made', 'config': {},
                                  'devices': {'g': {'type': 'gpu'}}}])
        self.assertRaises(exception.AcceleratorUnavailable, self.bind,
                          self.alloc((A100_0, 'PGPU', 1)), held)

    def test_too_many_units(self):
        exc = self.assertRaises(
            exception.AcceleratorUnavailable, self.bind,
            self.alloc((H100, 'CUSTOM_MIG_3G_40GB', 2)))
        self.assertIn('only 1 free', str(exc))

    def test_unknown_provider(self):
        allocations = {'00000000-0000-0000-0000-00000000dead': {
            'resources': {'PGPU': 1}}}
        exc = self.assertRaises(exception.AcceleratorNotBindable, self.bind,
                                allocations)
        self.assertIn('reports no device', str(exc))

    def test_vgpu_refused(self):
        allocations = self.alloc((A100_0, 'PGPU', 1))
        allocations[self.rp(A100_0)]['resources'] = {'VGPU': 1}
        exc = self.assertRaises(exception.AcceleratorNotBindable, self.bind,
                                allocations)
        self.assertIn('VM-only', str(exc))

    def test_resource_class_not_on_device(self):
        allocations = self.alloc((A100_0, 'PGPU', 1))
        allocations[self.rp(A100_0)]['resources'] = {
            'CUSTOM_INFINIBAND_VF': 1}
        self.assertRaises(exception.AcceleratorNotBindable, self.bind,
                          allocations)


class TestLegacyMig(binding.BindingTestBase):

    resources = staticmethod(binding.legacy_mig_host)
    mig_text = binding.LEGACY_MIG_TEXT

    def test_legacy_uses_gi_ci(self):
        result = self.bind(self.alloc((A100_0, 'CUSTOM_MIG_1G_5GB', 2)))
        self.assertEqual({
            'nova-mig0': {'type': 'gpu', 'gputype': 'mig',
                          'pci': '0000:07:00.0', 'mig.gi': '7',
                          'mig.ci': '0'},
            'nova-mig1': {'type': 'gpu', 'gputype': 'mig',
                          'pci': '0000:07:00.0', 'mig.gi': '8',
                          'mig.ci': '0'}}, result.devices)
        self.assertEqual(
            {'mig:0000:07:00.0/7/0', 'mig:0000:07:00.0/8/0'},
            {r['unit'] for r in result.records()})

    def test_hand_made_legacy_device_is_held(self):
        held = units.held_units([{'name': 'c1', 'config': {}, 'devices': {
            'x': {'type': 'gpu', 'gputype': 'mig', 'pci': '07:00.0',
                  'mig.gi': '7', 'mig.ci': '0'}}}])
        result = self.bind(self.alloc((A100_0, 'CUSTOM_MIG_1G_5GB', 1)),
                           held)
        self.assertEqual('8', result.devices['nova-mig0']['mig.gi'])


class TestEightGpus(binding.BindingTestBase):

    resources = staticmethod(binding.eight_gpus)

    def test_each_gpu_bound_once(self):
        names = ['cmp1_gpu_0000_1%d_00_0' % i for i in range(8)]
        records = []
        for i, name in enumerate(names):
            result = self.bind(self.alloc((name, 'PGPU', 1)),
                               units.held_units(records))
            records.append({'name': 'c%d' % i, 'config': result.config,
                            'devices': result.devices})
        held = units.held_units(records)
        self.assertEqual({'pci:0000:1%d:00.0' % i: ['c%d' % i]
                          for i in range(8)}, held)
        for name in names:
            self.assertRaises(exception.AcceleratorUnavailable, self.bind,
                              self.alloc((name, 'PGPU', 1)), held)


class TestCapturedH200(binding.BindingTestBase):
    """The device a PGPU allocation gives on the captured H200 host.

    On that machine (samples/README.md) Debian's LXD 5.0.2 started a
    container with exactly this device: it got /dev/nvidia0, nvidiactl,
    nvidia-uvm and nvidia-uvm-tools, and nvidia-smi inside it listed the
    H200 at 00000000:00:06.0; without the device it got no node.
    """

    resources = staticmethod(
        lambda: gpu_hosts.load_json('lxd-502-h200-vm-resources.json'))
    mig_text = gpu_hosts.load_text('nvsmi-h200-580-L.txt')

    def test_whole_gpu_pinned_by_pci_address(self):
        result = self.bind(self.alloc(('cmp1_gpu_0000_00_06_0', 'PGPU', 1)))
        self.assertEqual({'nova-gpu0': {'type': 'gpu', 'gputype': 'physical',
                                        'pci': '0000:00:06.0'}},
                         result.devices)


class TestRecords(base.BaseTestCase):

    def test_held_units_from_record_and_devices(self):
        config = {identity.KEY_DEVICES: json.dumps([
            {'unit': 'pci:0000:07:00.0', 'provider': 'p1',
             'resource_class': 'PGPU'}])}
        records = [
            {'name': 'a', 'config': config, 'devices': {}},
            {'name': 'b', 'config': {}, 'expanded_devices': {
                'ib': {'type': 'infiniband', 'nictype': 'physical',
                       'parent': 'ib0'},
                'm': {'type': 'gpu', 'gputype': 'mig',
                      'mig.uuid': 'MIG-AbC'},
                'root': {'type': 'disk', 'path': '/'}}},
            {'name': 'c', 'config': {identity.KEY_DEVICES: 'not json'}},
        ]
        self.assertEqual({'pci:0000:07:00.0': ['a'],
                          'netdev:ib0': ['b'], 'mig:abc': ['b']},
                         units.held_units(records))
        self.assertEqual({'netdev:ib0': ['b'], 'mig:abc': ['b']},
                         units.held_units(records, exclude='a'))

    def test_expected_usage(self):
        self.assertEqual(
            {'p1': {'PGPU': 1}, 'p2': {'CUSTOM_MIG_1G_10GB': 2}},
            binding_record.expected_usage([
                {'provider': 'p1', 'resource_class': 'PGPU'},
                {'provider': 'p2', 'resource_class': 'CUSTOM_MIG_1G_10GB'},
                {'provider': 'p2', 'resource_class': 'CUSTOM_MIG_1G_10GB'}]))


POOL = 'cmp1_gpu_pool_10de_2330'
HGX_PCIS = ['0000:1%d:00.0' % i for i in range(8)]


class TestGpuPool(base.BaseTestCase):
    """k whole GPUs of one pool provider: which cards the pick chooses."""

    def setUp(self):
        super().setUp()
        self.inventory, self.tree = gpu_hosts.report(
            {'gpu': {'cards': gpu_hosts.hgx_eight_gpu_cards()}},
            conf=gpu_hosts.make_conf(pool_whole_gpus=True))
        self.log = self.useFixture(fixtures.FakeLogger(
            name='nova_lxd_accel.accel.binding.pick'))

    def alloc(self, count):
        return {self.tree.data(POOL).uuid: {'resources': {'PGPU': count}}}

    def bind(self, count, held=None):
        return pick.bind(self.alloc(count),
                         self.inventory.device_for_provider, held)

    def cards(self, result):
        return sorted(d['pci'] for d in result.devices.values())

    def test_one_provider_counts_the_eight_cards(self):
        data = self.tree.data(POOL)
        self.assertEqual({'PGPU': {'total': 8, 'reserved': 0, 'min_unit': 1,
                                   'max_unit': 8, 'step_size': 1,
                                   'allocation_ratio': 1.0}},
                         data.inventory)
        self.assertEqual([gpu_hosts.NODE, POOL],
                         [self.tree.data(u).name for u in
                          self.tree.get_provider_uuids(gpu_hosts.NODE)])

    def test_eight_of_eight_each_pinned_by_pci_address(self):
        result = self.bind(8)
        self.assertEqual(HGX_PCIS, self.cards(result))
        self.assertEqual(
            {'nova-gpu%d' % i for i in range(8)}, set(result.devices))
        # recorded card by card, each under the pool's provider
        self.assertEqual(
            sorted(HGX_PCIS), sorted(r['pci'] for r in result.records()))

    def test_four_fit_on_one_numa_node_and_the_next_four_on_the_other(self):
        first = self.bind(4)
        self.assertEqual(HGX_PCIS[:4], self.cards(first))
        held = units.held_units([{'name': 'a', 'config': first.config,
                                  'devices': first.devices}])
        second = self.bind(4, held)
        self.assertEqual(HGX_PCIS[4:], self.cards(second))
        self.assertIn('NUMA node', self.log.output)

    def test_two_go_where_they_fit_best_keeping_a_node_whole(self):
        # node 0 has 3 free cards, node 1 has 4: two cards go to node 0
        held = {'pci:' + HGX_PCIS[0]: ['other']}
        self.assertEqual(HGX_PCIS[1:3], self.cards(self.bind(2, held)))

    def test_held_dirty_and_foreign_cards_are_never_picked(self):
        held = {'pci:' + HGX_PCIS[i]: ['why'] for i in (0, 2, 5, 7)}
        picked = self.cards(self.bind(4, held))
        self.assertEqual(set(), set(picked) & {HGX_PCIS[i]
                                               for i in (0, 2, 5, 7)})

    def test_too_few_free_cards_is_a_clear_refusal(self):
        held = {'pci:' + pci: ['instance x'] for pci in HGX_PCIS[:5]}
        exc = self.assertRaises(exception.AcceleratorUnavailable,
                                self.bind, 4, held)
        self.assertIn('3', str(exc))

    def test_only_pgpu_is_bound_from_a_pool(self):
        uuid = self.tree.data(POOL).uuid
        self.assertRaises(exception.AcceleratorNotBindable, pick.bind,
                          {uuid: {'resources': {'CUSTOM_MIG_1G_10GB': 1}}},
                          self.inventory.device_for_provider)
