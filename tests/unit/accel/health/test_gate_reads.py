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

"""The gate's read side: held cards of a pool, and failing closed (unit
level).
"""

import dataclasses
import os


from nova_lxd_accel.accel.health import gate
from nova_lxd_accel.accel.health import gate_state
from nova_lxd_accel.accel.health import probe
from nova_lxd_accel.accel.inventory import provider_tree
from nova_lxd_accel import exception
from tests.fixtures import gate_harness

H100 = gate_harness.H100
h100 = gate_harness.h100


class TestPoolOfWholeGpus(gate_harness.GateTestCase):
    """A held card of a pool: the pool stays offered, the card never."""

    def setUp(self):
        super().setUp()
        self.gpus = [dataclasses.replace(h100(), pci_address=pci)
                     for pci in ('0000:10:00.0', '0000:11:00.0')]

    def pool(self):
        desired = provider_tree.desired_providers(
            'cmp1', self.gpus, [], pool_whole_gpus=True)
        (name, want), = self.gate.apply(desired).items()
        return want

    def test_operator_hold_reserves_one_card_and_no_claim_picks_it(self):
        gate_state.hold(self.gate.store, '0000:11:00.0', 'fan noise')
        want = self.pool()
        self.assertEqual((2, 1), (want.inventory['PGPU']['total'],
                                  want.inventory['PGPU']['reserved']))
        # the pool keeps no health trait: its other card is schedulable
        self.assertNotIn(gate.TRAIT_UNHEALTHY, want.traits)
        # read under the claim lock from the state file: the card is out
        self.assertIn('held (operator): fan noise',
                      self.gate.unavailable_units([])['pci:0000:11:00.0'])
        self.assertNotIn('pci:0000:10:00.0', self.gate.unavailable_units([]))


class TestStateFileFailsClosed(gate_harness.GateTestCase):
    """A state file that cannot be used holds every GPU (issue 46, 6)."""

    def restarted_gate(self):
        return gate.GpuGate(
            self.conf, lambda: self.containers, lambda: self.gpus,
            host_probe=probe.HostProbe(
                os.path.join(self.smi_dir, 'nvidia-smi'),
                clock=lambda: self.now),
            clock=lambda: self.now, attribute=self.pids.get)

    def break_file(self, text):
        gate_state.hold(self.gate.store, H100, 'fan noise')
        with open(self.gate.store.path, 'w') as f:
            f.write(text)

    def assertEverythingHeld(self, restarted):
        self.assertEqual({'PGPU': 1}, {
            rc: r['reserved'] for rc, r in restarted.apply(
                self.desired())[provider_tree.gpu_provider_name(
                    'cmp1', H100)].inventory.items()})
        self.assertRaises(exception.GpuHeld, restarted.check_bindable,
                          self.gpus[0], 'rp')
        self.assertIn('pci:' + H100, restarted.unavailable_units([]))

    def test_a_truncated_file_holds_every_gpu(self):
        self.break_file('{"holds": {"%s": {"kind": "oper' % H100)
        restarted = self.restarted_gate()
        restarted.maybe_refresh()
        self.assertEverythingHeld(restarted)

    def test_json_that_is_not_an_object_holds_every_gpu(self):
        self.break_file('[]')
        self.assertEverythingHeld(self.restarted_gate())

    def test_a_repaired_file_lifts_the_holds(self):
        self.break_file('garbage')
        restarted = self.restarted_gate()
        restarted.maybe_refresh()
        os.unlink(restarted.store.path)
        restarted.refresh()
        self.assertEqual({}, restarted.unavailable_units([]))
