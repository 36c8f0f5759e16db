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

"""The gate's seams: the GPU gate implements each one whole."""

import inspect

import testtools

from nova_lxd_accel.accel import gate_seams
from nova_lxd_accel.accel.health import gate

SEAMS = (gate_seams.ClaimGate, gate_seams.ProviderTreeGate,
         gate_seams.ReleaseGate, gate_seams.GoneGate)


def _members(seam):
    """The methods and attributes a seam declares."""
    return {name for name in vars(seam)
            if not name.startswith('_')}


class GateSeamsTest(testtools.TestCase):

    def test_each_seam_declares_what_its_part_calls(self):
        self.assertEqual(
            [{'unavailable_units', 'dirty_share_projects', 'note_bound',
              'check_bindable'},
             {'probed_gpus', 'apply'},
             {'note_destroy', 'removal_failed', 'verify_release'},
             {'note_gone'}],
            [_members(seam) for seam in SEAMS])

    def test_the_gate_implements_every_seam_itself(self):
        # a seam's own method is an empty declaration: the gate must not
        # inherit it (the part would call a no-op)
        for seam in SEAMS:
            self.assertIn(seam, gate.GpuGate.__mro__)
            for name in _members(seam):
                own = inspect.getattr_static(gate.GpuGate, name)
                self.assertIsNot(vars(seam)[name], own, (seam, name))

    def test_the_gate_takes_what_each_seam_passes(self):
        for seam in SEAMS:
            for name in _members(seam):
                declared = vars(seam)[name]
                if not callable(declared):
                    continue
                self.assertEqual(
                    inspect.signature(declared),
                    inspect.signature(getattr(gate.GpuGate, name)),
                    (seam, name))
