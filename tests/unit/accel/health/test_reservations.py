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

"""Holds and dirty units as Placement's ``reserved``, per provider kind."""

import testtools

from nova_lxd_accel.accel.health import gate_state
from nova_lxd_accel.accel.health import reservations
from nova_lxd_accel.accel.inventory import lxd_resources
from nova_lxd_accel.accel.inventory import provider_tree
from nova_lxd_accel import placement_names
from tests.fixtures import gpu_hosts

PCIS = ['0000:1%d:00.0' % i for i in range(8)]


def _gpus():
    return lxd_resources.parse_gpus(
        {'gpu': {'cards': gpu_hosts.hgx_eight_gpu_cards()}})


def _dirty(pci, rc='PGPU'):
    return {'pci': pci, 'resource_class': rc, 'instance': 'i-1'}


class PoolTest(testtools.TestCase):

    def pool(self, view):
        desired = provider_tree.desired_providers(
            'cmp1', _gpus(), [], pool_whole_gpus=True)
        (want,) = reservations.reserved_providers(desired, view).values()
        return want

    def test_nothing_held_nothing_reserved(self):
        want = self.pool(reservations.GateView(holds={}, dirty={}))
        self.assertEqual(0, want.inventory['PGPU']['reserved'])

    def test_each_held_or_dirty_card_counts_once(self):
        view = reservations.GateView(
            holds={PCIS[0]: {'kind': gate_state.KIND_UNHEALTHY,
                             'reason': 'Xid 79'},
                   PCIS[1]: {'kind': gate_state.KIND_OPERATOR,
                             'reason': 'fan'}},
            dirty={'pci:' + PCIS[1]: _dirty(PCIS[1]),
                   'pci:' + PCIS[2]: _dirty(PCIS[2]),
                   # another host's card: not this pool's
                   'pci:0000:99:00.0': _dirty('0000:99:00.0')})
        want = self.pool(view)
        self.assertEqual((8, 3), (want.inventory['PGPU']['total'],
                                  want.inventory['PGPU']['reserved']))
        # its healthy cards stay schedulable: no health trait on the pool
        self.assertNotIn(placement_names.TRAIT_UNHEALTHY, want.traits)


class OneCardTest(testtools.TestCase):

    def card(self, view):
        desired = provider_tree.desired_providers('cmp1', _gpus()[:1], [])
        (want,) = reservations.reserved_providers(desired, view).values()
        return want

    def test_unhealthy_card_reserved_whole_with_its_trait(self):
        want = self.card(reservations.GateView(
            holds={PCIS[0]: {'kind': gate_state.KIND_UNHEALTHY,
                             'reason': 'Xid 79'}}, dirty={}))
        self.assertEqual(1, want.inventory['PGPU']['reserved'])
        self.assertIn(placement_names.TRAIT_UNHEALTHY, want.traits)

    def test_dirty_card_reserved_without_trait(self):
        want = self.card(reservations.GateView(
            holds={}, dirty={'pci:' + PCIS[0]: _dirty(PCIS[0])}))
        self.assertEqual(1, want.inventory['PGPU']['reserved'])
        self.assertNotIn(placement_names.TRAIT_UNHEALTHY, want.traits)
