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

"""Nova's periodic power-state sync, run by nova's own compute manager.

``ComputeManager._sync_power_states`` calls ``get_num_instances`` and then
``get_info`` for every instance: one listing of the containers, whatever
their number. A container stopped on the daemon behind nova's back is
seen by the next sync, which stops the server. The requests are counted
on the driver's own HTTP session (:mod:`tests.fixtures.daemon_requests`).
"""

import time

from nova import context as nova_context

from tests.fixtures import daemon_requests
from tests.functional import base

LISTING = ('GET', '/1.0/instances')


class PowerStateSyncTest(base.LXDFunctionalTestCase):

    def _sync_power_states(self):
        """One run of nova's periodic task, to the end of every sync."""
        manager = self.computes['compute1'].manager
        manager._sync_power_states(nova_context.get_admin_context())
        for _ in range(self.WAIT_POLLS):
            with manager.syncs_in_progress() as syncs:
                if not syncs:
                    return
            time.sleep(0.5)
        self.fail('the power-state syncs did not end')

    def test_one_listing_for_every_instance(self):
        flavor = self._create_flavor(memory_mb=128, vcpu=1, disk=0,
                                     ephemeral=0)
        servers = [self._create_server(flavor_id=flavor, networks='none',
                                       image_uuid=self.image_id)
                   for _ in range(4)]
        driver = self.computes['compute1'].manager.driver
        requests = self.useFixture(daemon_requests.DaemonRequests(
            driver._parts.client))

        self._sync_power_states()
        self.assertEqual([LISTING], requests.take())
        for server in servers:
            self.assertEqual('ACTIVE',
                             self.api.get_server(server['id'])['status'])

        # stopped on the daemon, behind nova's back: the next sync sees it
        # (no lifecycle watcher here) and nova stops the server
        stopped = servers[0]
        self.lxd.client.instances.get('nova-%s' % stopped['id']).stop(
            force=True, wait=True)
        self._sync_power_states()
        self._wait_for_state_change(stopped, 'SHUTOFF')
        for server in servers[1:]:
            self.assertEqual('ACTIVE',
                             self.api.get_server(server['id'])['status'])
