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

"""An LXD operation we stop waiting for is cancelled, or named in the log.

Against the real daemon: a migration offer (LXD lets it be cancelled) and
a command run in a container (LXD does not) are waited for one second.
"""

from nova_lxd_accel import exception
from tests.integration import base


class OperationTimeoutTest(base.DriverTestCase):

    def setUp(self):
        super().setUp()
        self.client = self.driver._client

    def _operation(self, response):
        return response.json()['metadata']['id']

    def _status(self, operation_id):
        return self.client.api.operations[operation_id].get().json()[
            'metadata']['status']

    def test_cancellable_operation_is_cancelled(self):
        name = 'op-cancel'
        self.project._wait(self.project.client.api.instances.post(json={
            'name': name, 'type': 'container', 'source': {'type': 'none'}}))
        # waits for a target daemon that never comes
        response = self.client.api.instances[name].post(json={
            'migration': True, 'live': False, 'instance_only': True})
        operation_id = self._operation(response)
        self.assertRaises(exception.LXDOperationTimeout, self.client._wait,
                          response, 'migrate', name, timeout=1)
        # Incus shows 'Cancelling' until the operation has wound down.
        self.client.api.operations[operation_id].wait.get(
            params={'timeout': 10})
        self.assertEqual('Cancelled', self._status(operation_id))
        self.assertIn('Cancelled LXD operation %s' % operation_id,
                      self.stdlog.logger.output)

    def test_uncancellable_operation_is_logged_with_its_id(self):
        instance = self.make_instance()
        self.driver.spawn(self.context, instance, self.tiny_image(), [],
                          None, {})
        name = self.container_name(instance)
        response = self.client.api.instances[name].exec.post(json={
            'command': ['sleep', '30'], 'wait-for-websocket': False,
            'interactive': False, 'record-output': False})
        operation_id = self._operation(response)
        self.assertRaises(exception.LXDOperationTimeout, self.client._wait,
                          response, 'exec', name, timeout=1)
        self.assertEqual('Running', self._status(operation_id))
        self.assertIn('LXD operation %s' % operation_id,
                      self.stdlog.logger.output)
        self.assertIn('does not allow cancelling',
                      self.stdlog.logger.output)
        self.driver.destroy(self.context, instance, None)
