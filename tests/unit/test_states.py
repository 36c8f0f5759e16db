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

"""LXD status -> nova power state, and the lifecycle events it implies."""

from nova.compute import power_state
from nova.virt import event as virtevent
import testtools

from nova_lxd_accel.container import identity
from nova_lxd_accel import guest
from nova_lxd_accel import watcher


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


class LifecycleEventTest(testtools.TestCase):

    def test_transitions(self):
        cases = [
            (power_state.SHUTDOWN, power_state.RUNNING,
             virtevent.EVENT_LIFECYCLE_STARTED),
            (power_state.RUNNING, power_state.SHUTDOWN,
             virtevent.EVENT_LIFECYCLE_STOPPED),
            (power_state.RUNNING, power_state.PAUSED,
             virtevent.EVENT_LIFECYCLE_PAUSED),
            (power_state.PAUSED, power_state.RUNNING,
             virtevent.EVENT_LIFECYCLE_RESUMED),
            (power_state.SUSPENDED, power_state.RUNNING,
             virtevent.EVENT_LIFECYCLE_RESUMED),
            (power_state.RUNNING, power_state.SUSPENDED,
             virtevent.EVENT_LIFECYCLE_SUSPENDED),
            (power_state.RUNNING, power_state.RUNNING, None),
            (power_state.RUNNING, power_state.NOSTATE, None),
        ]
        for old, new, expected in cases:
            self.assertEqual(expected, watcher.lifecycle_event(old, new),
                             '%s -> %s' % (old, new))

    def test_only_own_containers_count(self):
        records = [
            _record('Running', **{'user.nova_lxd_accel.instance_uuid': 'a',
                                  'user.nova_lxd_accel.host': 'cmp1'}),
            _record('Stopped', **{'user.nova_lxd_accel.instance_uuid': 'b',
                                  'user.nova_lxd_accel.host': 'cmp2'}),
            _record('Running'),
            _record('Running', **{'user.nova_lxd_accel.instance_uuid': 'a',
                                  'user.nova_lxd_accel.host': 'cmp1',
                                  'user.nova_lxd_accel.rescue_of': 'x'}),
        ]
        self.assertEqual({'a': power_state.RUNNING},
                         watcher.owned_states(records, 'cmp1'))

    def test_watcher_emits_changes_after_first_look(self):
        emitted = []
        listing = [[_record('Running', **{
            'user.nova_lxd_accel.instance_uuid': 'a',
            'user.nova_lxd_accel.host': 'cmp1'})]]

        class Client(object):
            def list_containers(self):
                return listing[0]

        watching = watcher.LifecycleWatcher(
            Client(), identity.Owner('cmp1', project=None), 1, emitted.append)
        watching.poll_once()
        self.assertEqual([], emitted)
        listing[0] = [_record('Stopped', **{
            'user.nova_lxd_accel.instance_uuid': 'a',
            'user.nova_lxd_accel.host': 'cmp1'})]
        watching.poll_once()
        self.assertEqual([('a', virtevent.EVENT_LIFECYCLE_STOPPED)],
                         [(e.get_instance_uuid(), e.get_transition())
                          for e in emitted])
