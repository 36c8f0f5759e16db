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

"""The guest part: LXD status -> nova power state."""

from nova.compute import power_state
import testtools

from nova_lxd_accel.instance import guest


def _record(status, **config):
    return {'status': status, 'config': config}


class PowerStateTest(testtools.TestCase):

    def test_mapping(self):
        self.assertEqual(power_state.RUNNING,
                         guest.power_state_of(_record('Running')))
        self.assertEqual(power_state.SHUTDOWN,
                         guest.power_state_of(_record('Stopped')))
        self.assertEqual(power_state.PAUSED,
                         guest.power_state_of(_record('Frozen')))
        self.assertEqual(power_state.CRASHED,
                         guest.power_state_of(_record('Error')))
        self.assertEqual(power_state.NOSTATE,
                         guest.power_state_of(_record('Starting')))
        self.assertEqual(power_state.NOSTATE, guest.power_state_of(None))

    def test_suspended_is_a_marked_frozen_container(self):
        record = _record('Frozen',
                         **{'user.nova_lxd_accel.suspended': 'true'})
        self.assertEqual(power_state.SUSPENDED, guest.power_state_of(record))
