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

"""The LXD proxy's rewriting rules, without a daemon.

The sandbox's simulated hardware (``tools/sandbox.sh up --hardware``)
restarts the proxy when ``up`` is re-run: the devices it keeps out of the
real daemon must survive that, or running instances would lose their
accelerators in Nova's eyes.
"""

import json
import os
import socket
import subprocess

import fixtures
import testtools

from tools.sandbox.venv import lxd_proxy

GPU = {'type': 'gpu', 'gputype': 'mig', 'pci': '0000:00:09.0',
       'mig.uuid': 'MIG-00000002-0000-0000-0000-000000000002'}


class HiddenDevicesStateTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        tmp = self.useFixture(fixtures.TempDir()).path
        self.resources = os.path.join(tmp, 'resources.json')
        with open(self.resources, 'w') as f:
            json.dump({'gpu': {'cards': [], 'total': 0}}, f)
        self.state = os.path.join(tmp, 'devices.json')

    def rewriter(self, state_file):
        return lxd_proxy.Rewriter(self.resources, True, '/nonexistent',
                                  state_file=state_file)

    def create(self, rewriter):
        body = json.dumps({
            'name': 'nova-1', 'config': {'nvidia.runtime': 'true',
                                         'limits.cpu': '1'},
            'devices': {'nova-mig0': GPU,
                        'root': {'type': 'disk', 'path': '/',
                                 'pool': 'default'}}}).encode()
        sent = json.loads(rewriter.rewrite_request(
            'POST', '/1.0/instances', 'default', body))
        # what the real daemon gets: no gpu device, no nvidia.* key
        self.assertEqual(['root'], list(sent['devices']))
        self.assertEqual({'limits.cpu': '1'}, sent['config'])

    def shown(self, rewriter):
        answer = json.dumps({'type': 'sync', 'metadata': {
            'name': 'nova-1', 'config': {'limits.cpu': '1'},
            'devices': {'root': {'type': 'disk'}},
            'expanded_config': {}, 'expanded_devices': {}}}).encode()
        return json.loads(rewriter.rewrite_response(
            'GET', '/1.0/instances/nova-1', {}, 'default', 200,
            answer))['metadata']

    def test_hidden_devices_survive_a_restart(self):
        self.create(self.rewriter(self.state))
        restarted = self.rewriter(self.state)
        shown = self.shown(restarted)
        self.assertEqual(GPU, shown['devices']['nova-mig0'])
        self.assertEqual('true', shown['config']['nvidia.runtime'])

    def test_without_a_state_file_a_restart_forgets(self):
        self.create(self.rewriter(None))
        self.assertNotIn('nova-mig0', self.shown(self.rewriter(None))[
            'devices'])

    def test_delete_forgets_for_good(self):
        first = self.rewriter(self.state)
        self.create(first)
        first.rewrite_response('DELETE', '/1.0/instances/nova-1', {},
                               'default', 202, b'{}')
        self.assertNotIn('nova-mig0', self.shown(self.rewriter(self.state))[
            'devices'])


class ProxyFailureTest(testtools.TestCase):
    """A request the proxy cannot serve gets an answer, not a hang-up."""

    def test_an_unreachable_upstream_is_an_lxd_shaped_error(self):
        tmp = self.useFixture(fixtures.TempDir()).path
        proxy = self.useFixture(lxd_proxy.LXDProxy(
            upstream=os.path.join(tmp, 'no-daemon.socket')))
        connection = lxd_proxy._UnixConnection(proxy.socket_path,
                                               timeout=30)
        self.addCleanup(connection.close)
        connection.request('GET', '/1.0/instances')
        response = connection.getresponse()
        body = json.loads(response.read())
        self.assertEqual(502, response.status)
        self.assertEqual('error', body['type'])
        self.assertIn('LXD proxy: FileNotFoundError', body['error'])


class WaitListeningTest(testtools.TestCase):
    """The fixture waits for a listener, not for the socket file.

    The file appears at bind time, before the server listens; a client
    that connects in between is refused (ECONNREFUSED), which the
    integration suite once took for a daemon down at ``init_host``.
    """

    def setUp(self):
        super().setUp()
        self.path = os.path.join(
            self.useFixture(fixtures.TempDir()).path, 'unix.socket')
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(self.server.close)
        self.server.bind(self.path)
        self.process = subprocess.Popen(['sleep', '60'])
        self.addCleanup(self.process.wait)
        self.addCleanup(self.process.kill)

    def test_a_bound_socket_that_does_not_listen_is_not_ready(self):
        self.assertTrue(os.path.exists(self.path))
        self.assertFalse(lxd_proxy.wait_listening(self.path, self.process,
                                                  0.2))

    def test_a_listening_socket_is_ready(self):
        self.server.listen(1)
        self.assertTrue(lxd_proxy.wait_listening(self.path, self.process,
                                                 30))

    def test_a_process_that_ended_is_not_waited_for(self):
        self.process.kill()
        self.process.wait()
        self.assertFalse(lxd_proxy.wait_listening(self.path, self.process,
                                                  30))
