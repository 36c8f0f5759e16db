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

"""What the driver's reads cost the daemon, and that they stay right.

Nova's power-state sync calls ``get_num_instances`` and then ``get_info``
for every instance: the one listing answers them all. A container the
driver changed since is read afresh; one changed on the daemon behind
nova's back is seen by ``get_info(use_cache=False)`` at once and by the
next sync pass. The requests are counted on the driver's own HTTP session
(:mod:`tests.fixtures.daemon_requests`), against the real daemon.
"""

from nova.compute import power_state
from nova.compute import task_states
from nova.compute import vm_states

from nova_lxd_accel import exception
from tests.fixtures import daemon_requests
from tests.integration import base

LISTING = ('GET', '/1.0/instances')


class DriverReadsTest(base.DriverTestCase):

    def setUp(self):
        super(DriverReadsTest, self).setUp()
        self.image = self.tiny_image()

    def _spawn(self, count):
        instances = []
        for _ in range(count):
            instance = self.make_instance(vm_state=vm_states.ACTIVE,
                                          task_state=None)
            self.driver.spawn(self.context, instance, self.image, [], None,
                              {})
            instances.append(instance)
        return instances

    def _requests(self):
        return self.useFixture(daemon_requests.DaemonRequests(
            self.driver._parts.client))

    def _sync_pass(self, instances):
        """What nova's _sync_power_states asks: the count, then each state."""
        count = self.driver.get_num_instances()
        return count, [self.driver.get_info(instance).state
                       for instance in instances]

    def test_power_state_sync_is_one_listing_whatever_the_count(self):
        instances = self._spawn(4)
        self.driver.power_off(instances[0])
        self.driver.pause(instances[1])
        requests = self._requests()

        self.assertEqual(
            (4, [power_state.SHUTDOWN, power_state.PAUSED,
                 power_state.RUNNING, power_state.RUNNING]),
            self._sync_pass(instances))
        self.assertEqual([LISTING], requests.take())
        # half the instances: the same single request
        self.assertEqual(
            (4, [power_state.SHUTDOWN, power_state.PAUSED]),
            self._sync_pass(instances[:2]))
        self.assertEqual([LISTING], requests.take())

    def test_what_the_driver_changes_is_seen_at_once(self):
        instance, other = self._spawn(2)
        requests = self._requests()
        self.driver.get_num_instances()     # the listing of a sync pass
        steps = [
            (lambda: self.driver.power_off(instance), power_state.SHUTDOWN),
            (lambda: self.driver.power_on(self.context, instance, None),
             power_state.RUNNING),
            (lambda: self.driver.pause(instance), power_state.PAUSED),
            (lambda: self.driver.unpause(instance), power_state.RUNNING),
            (lambda: self.driver.suspend(self.context, instance),
             power_state.SUSPENDED),
            (lambda: self.driver.resume(self.context, instance, None),
             power_state.RUNNING),
            (lambda: self.driver.power_off(instance), power_state.SHUTDOWN),
            # stopped when listed: the rescue container's state wins
            (lambda: self.driver.rescue(self.context, instance, None,
                                        self.image, None, None, None),
             power_state.RUNNING),
        ]
        for change, expected in steps:
            change()
            self.assertEqual(expected, self.driver.get_info(instance).state)
        # the other instance is still answered by the listing
        requests.take()
        self.assertEqual(power_state.RUNNING,
                         self.driver.get_info(other).state)
        self.assertEqual([], requests.take())

        # a new listing holds the rescue container: it answers, and wins
        self.driver.get_num_instances()
        self.assertEqual('Stopped', self.container(instance)['status'])
        requests.take()
        self.assertEqual(power_state.RUNNING,
                         self.driver.get_info(instance).state)
        self.assertEqual([], requests.take())

        self.driver.unrescue(self.context, instance)
        self.assertEqual(power_state.RUNNING,
                         self.driver.get_info(instance).state)
        # gone: reported shut down while nova has it settled
        self.driver.destroy(self.context, instance, None)
        self.assertEqual(power_state.SHUTDOWN,
                         self.driver.get_info(instance).state)

    def test_what_changes_behind_novas_back_is_seen(self):
        stopped, deleted, busy = self._spawn(3)
        self.assertEqual(3, self.driver.get_num_instances())
        self.project.client.instances.get(
            self.container_name(stopped)).stop(force=True, wait=True)
        self.project.delete_instance(self.container_name(deleted))
        self.project.delete_instance(self.container_name(busy))
        busy.task_state = task_states.REBOOTING

        # nova's _get_power_state and its check before it stops a server
        # that shut down by itself read the daemon
        self.assertEqual(
            power_state.SHUTDOWN,
            self.driver.get_info(stopped, use_cache=False).state)
        # the next sync pass sees them all
        self.assertEqual(
            (1, [power_state.SHUTDOWN, power_state.SHUTDOWN]),
            self._sync_pass([stopped, deleted]))
        self.assertRaises(exception.ContainerNotFound,
                          self.driver.get_info, busy)
