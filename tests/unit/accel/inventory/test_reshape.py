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

"""A host's whole GPUs moving between layouts, allocations and all."""

import json

import fixtures
from nova import exception as nova_exception
from oslotest import base

from nova_lxd_accel.accel.inventory import provider_tree
from nova_lxd_accel.accel.inventory import reporter
from nova_lxd_accel.container import identity
from tests.fixtures import gpu_hosts

NODE = gpu_hosts.NODE
PCIS = ['0000:1%d:00.0' % i for i in range(8)]
POOL = NODE + '_gpu_pool_10de_2330'


def _card_name(i):
    return '%s_gpu_0000_1%d_00_0' % (NODE, i)


def _record(uuid, pcis, provider):
    units = [{'name': 'nova-gpu%d' % n, 'kind': 'pgpu',
              'resource_class': 'PGPU', 'provider': provider, 'pci': pci,
              'unit': 'pci:' + pci} for n, pci in enumerate(pcis)]
    return {'name': 'nova-' + uuid, 'project': 'nova',
            'config': {identity.KEY_INSTANCE_UUID: uuid,
                       identity.KEY_DEVICES: json.dumps(units)}}


class ReshapeTestBase(base.BaseTestCase):

    def setUp(self):
        super().setUp()
        self.useFixture(fixtures.FakeLogger())
        self.tree = gpu_hosts.new_tree()
        self.resources = {'gpu': {'cards': gpu_hosts.hgx_eight_gpu_cards()}}
        self.records = []
        self.moved = []

    def inventory(self, pool, placement=None):
        """A fresh nova-compute's inventory (its first update is a start).

        :param placement: provider uuid -> Placement's allocations there,
            for the questions asked without ``allocations``.
        """
        return reporter.AcceleratorInventory(
            lambda: self.resources, lambda: '',
            conf=gpu_hosts.make_conf(pool_whole_gpus=pool),
            provider_allocations=lambda rp: (placement or {}).get(rp, {}),
            list_instances=lambda: self.records,
            on_reshaped=lambda moved, records: self.moved.append(moved))

    def uuid(self, name):
        return self.tree.data(name).uuid

    def children(self):
        return sorted(self.tree.data(u).name for u in
                      self.tree.get_provider_uuids(NODE)[1:])


class CardsToPoolTest(ReshapeTestBase):
    """The upgrade: one provider per card -> one pool."""

    def setUp(self):
        super().setUp()
        old = self.inventory(pool=False)
        old.refresh()
        old.update_provider_tree(self.tree, NODE, {})
        self.card_uuids = [self.uuid(_card_name(i)) for i in range(8)]
        # server a holds cards 0 and 1, server b card 5
        self.allocations = {
            'a': {'allocations': {
                self.card_uuids[0]: {'resources': {'PGPU': 1}},
                self.card_uuids[1]: {'resources': {'PGPU': 1}},
                gpu_hosts.ROOT_UUID: {'resources': {'VCPU': 2}}}},
            'b': {'allocations': {
                self.card_uuids[5]: {'resources': {'PGPU': 1}}}}}
        self.records = [
            _record('a', PCIS[:2], 'old'), _record('b', PCIS[5:6], 'old')]

    def placement(self):
        out = {}
        for consumer, data in self.allocations.items():
            for rp, alloc in data['allocations'].items():
                out.setdefault(rp, {})[consumer] = alloc
        return out

    def test_start_asks_nova_for_a_reshape(self):
        new = self.inventory(pool=True, placement=self.placement())
        new.refresh()
        self.assertRaises(nova_exception.ReshapeNeeded,
                          new.update_provider_tree, self.tree, NODE)

    def test_reshape_moves_every_card_to_the_pool(self):
        new = self.inventory(pool=True, placement=self.placement())
        new.refresh()
        new.update_provider_tree(self.tree, NODE,
                                 allocations=self.allocations)
        pool = self.uuid(POOL)
        self.assertEqual([POOL], self.children())
        self.assertEqual(
            {pool: {'resources': {'PGPU': 2}},
             gpu_hosts.ROOT_UUID: {'resources': {'VCPU': 2}}},
            self.allocations['a']['allocations'])
        self.assertEqual({pool: {'resources': {'PGPU': 1}}},
                         self.allocations['b']['allocations'])
        # the records learn where the cards count now, card by card
        self.assertEqual([{'a': {PCIS[0]: pool, PCIS[1]: pool},
                           'b': {PCIS[5]: pool}}], self.moved)
        self.assertEqual(8, self.tree.data(pool).inventory['PGPU']['total'])

    def test_unused_cards_need_no_reshape(self):
        new = self.inventory(pool=True, placement={})
        new.refresh()
        new.update_provider_tree(self.tree, NODE)
        self.assertEqual([POOL], self.children())
        self.assertEqual([], self.moved)

    def test_later_updates_keep_used_providers_and_say_restart(self):
        new = self.inventory(pool=True, placement=self.placement())
        new.refresh()
        # the start found nothing to move (a GPU arrived later, say)
        new._states[NODE] = provider_tree.TreeState()
        log = self.useFixture(fixtures.FakeLogger(
            name='nova_lxd_accel.accel.inventory.reporter'))
        new.update_provider_tree(self.tree, NODE)
        self.assertIn('restart nova-compute', log.output)
        # in use: kept (reserved) until nova-compute restarts
        self.assertIn(_card_name(0), self.children())
        self.assertNotIn(_card_name(2), self.children())
        self.assertEqual(1, self.tree.data(_card_name(0)).inventory[
            'PGPU']['reserved'])


class PoolToCardsTest(ReshapeTestBase):
    """An operator turns pooling off: the records say whose card is whose."""

    def test_each_server_lands_on_its_own_cards(self):
        old = self.inventory(pool=True)
        old.refresh()
        old.update_provider_tree(self.tree, NODE, {})
        pool = self.uuid(POOL)
        self.records = [_record('a', [PCIS[6], PCIS[2]], pool)]
        allocations = {'a': {'allocations': {
            pool: {'resources': {'PGPU': 2}}}}}
        new = self.inventory(pool=False)
        new.refresh()
        new.update_provider_tree(self.tree, NODE, allocations=allocations)
        self.assertNotIn(POOL, self.children())
        self.assertEqual(
            {self.uuid(_card_name(2)): {'resources': {'PGPU': 1}},
             self.uuid(_card_name(6)): {'resources': {'PGPU': 1}}},
            allocations['a']['allocations'])
