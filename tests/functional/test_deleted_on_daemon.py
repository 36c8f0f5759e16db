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

"""A container deleted on the daemon, behind nova's back.

The server must not stay ACTIVE: it ends SHUTOFF, with the daemon's
events and with polling; ``server start`` then fails with a fault that
says what happened, and ``server delete`` removes everything. nova accepts
a lifecycle event only when the driver's ``get_info`` confirms it, so
without
:meth:`nova_lxd_accel.instance.lifecycle.Lifecycle.power_state` (SHUTDOWN
for a settled server whose container is gone) the event is dropped, and
without the poller's "gone" check polling reports nothing at all.
"""

from tests.functional import base


class _DeletedOnDaemon(object):

    # the watcher runs here (other tests leave it off)
    lifecycle_poll_interval = 0.5

    def test_server_ends_shutoff_and_can_only_be_rebuilt_or_deleted(self):
        flavor = self._create_flavor(memory_mb=128, vcpu=1, disk=0,
                                     ephemeral=0)
        server = self._create_server(flavor_id=flavor, networks='none',
                                     image_uuid=self.image_id)
        name = 'nova-%s' % server['id']
        self.lxd.delete_instance(name)
        server = self._wait_for_state_change(server, 'SHUTOFF')
        self.assertNotIn(name, self.container_names())
        # start: a fault that says the container is gone, server SHUTOFF
        self.api.post_server_action(server['id'], {'os-start': None})
        server = self._wait_for_server_parameter(
            server, {'OS-EXT-STS:task_state': None, 'status': 'SHUTOFF'})
        event = self._wait_for_instance_action_event(
            server, 'start', 'compute_start_instance', 'Error')
        # the event's details (API 2.84) are the exception's message
        self.assertIn('was deleted on the daemon, outside of Nova',
                      event.get('details') or '')
        # delete: nothing of it left, no allocation
        self._delete_and_check_allocations(server)
        self.assertEqual([], self.container_names())


class DeletedOnDaemonEventsTest(_DeletedOnDaemon,
                                base.LXDFunctionalTestCase):
    lifecycle_events = True


class DeletedOnDaemonPollingTest(_DeletedOnDaemon,
                                 base.LXDFunctionalTestCase):
    lifecycle_events = False
