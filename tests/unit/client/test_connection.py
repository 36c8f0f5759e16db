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

"""Tests of nova_lxd_accel.client.connection: finding, opening, waiting.

Discovery runs on :class:`tests.fixtures.recorded_daemon.RecordedDaemon`
sockets; the connection's requests are answered through ``requests-mock``
with answers shaped like LXD's own (the connection's ``GET /1.0`` is the
recorded answer of LXD 5.0.2). What tests/unit/test_client_discovery.py
and the recorded contract already check is not repeated here.
"""

import datetime
import hashlib
import os
from urllib import parse

from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives import serialization
from cryptography import x509
from cryptography.x509.oid import NameOID
import fixtures
from oslo_config import fixture as config_fixture
from pylxd import exceptions as lxd_exceptions
import requests
from requests_mock.contrib import fixture as requests_mock_fixture
import testtools
import urllib3

from nova_lxd_accel.client import connection
from nova_lxd_accel import exception
from tests.fixtures import lxd_responses
from tests.fixtures import recorded_daemon
from tests.fixtures import seam_helpers

LXD_502 = 'lxd-5.0.2-debian12.json'
INCUS_604 = 'incus-6.0.4-bookworm-backports.json'
OPERATION = '566950f0-4683-438d-8d34-b3195682b6cb'


_error = lxd_responses.error


def _operation(status, may_cancel=False, err='', metadata=None):
    """An operation record as LXD gives it (a wait's metadata)."""
    return {'id': OPERATION, 'class': 'task',
            'description': 'Renaming instance', 'status': status,
            'status_code': {'Running': 103, 'Success': 200,
                            'Failure': 400}[status],
            'resources': None, 'metadata': metadata,
            'may_cancel': may_cancel, 'err': err, 'location': 'none'}


_sync = lxd_responses.sync


def _async(may_cancel=False):
    return {'type': 'async', 'status': 'Operation created',
            'status_code': 100, 'operation': '/1.0/operations/' + OPERATION,
            'error_code': 0, 'error': '',
            'metadata': _operation('Running', may_cancel)}


def _response(status, content):
    response = requests.Response()
    response.status_code = status
    response._content = content
    return response


class CandidateSocketsTest(testtools.TestCase):

    def test_an_empty_variable_names_no_daemon(self):
        root = self.useFixture(fixtures.TempDir()).path
        known = [('incus', os.path.join(root, 'unix.socket'))]
        open(known[0][1], 'w').close()
        self.assertEqual(known, connection.candidate_sockets(
            {'LXD_DIR': '', 'INCUS_DIR': ''}, known))

    def test_messages_before_connecting_name_the_daemon_of_the_env(self):
        conf = seam_helpers.make_conf(None)
        self.useFixture(config_fixture.Config(conf))
        self.useFixture(fixtures.EnvironmentVariable('LXD_DIR'))
        self.useFixture(fixtures.EnvironmentVariable(
            'INCUS_DIR', '/srv/incus'))
        self.assertEqual('/srv/incus/unix.socket',
                         connection.Connection(conf).endpoint)


class DiscoverTest(testtools.TestCase):

    def setUp(self):
        super(DiscoverTest, self).setUp()
        self.conf = seam_helpers.make_conf(None)
        self.useFixture(config_fixture.Config(self.conf))

    def test_no_socket_at_all_names_every_place_looked(self):
        error = self.assertRaises(
            exception.LXDUnreachable, connection.discover, self.conf.lxd,
            environ={}, well_known=[('lxd', '/nonexistent/a.socket'),
                                    ('incus', '/nonexistent/b.socket')])
        self.assertIn('none of /nonexistent/a.socket, /nonexistent/b.socket '
                      'exists', str(error))
        self.assertIn('set [lxd] endpoint', str(error))

    def test_a_named_daemon_that_is_not_there_says_why(self):
        root = self.useFixture(fixtures.TempDir()).path
        error = self.assertRaises(
            exception.LXDUnreachable, connection.discover, self.conf.lxd,
            environ={'LXD_DIR': root})
        self.assertIn('%s/unix.socket: the socket does not exist' % root,
                      str(error))

    def test_two_sockets_of_one_daemon_are_not_two_daemons(self):
        # one LXD seen through its snap socket and its Debian path
        mock = self.useFixture(requests_mock_fixture.Fixture())
        sockets = [seam_helpers.SocketFile() for _ in range(2)]
        for socket_file in sockets:
            self.addCleanup(socket_file.close)
            mock.get('http+unix://%s/1.0' % parse.quote(
                socket_file.path, safe=''),
                json=recorded_daemon.sample(LXD_502))
        path, client = connection.discover(
            self.conf.lxd, environ={},
            well_known=[('lxd', s.path) for s in sockets])
        self.assertEqual(sockets[0].path, path)
        self.assertEqual(2, len(mock.request_history))
        self.assertEqual('5.0.2',
                         client.host_info['environment']['server_version'])


class VerifySettingTest(testtools.TestCase):

    def test_spellings_of_true_and_false(self):
        for value in ('true', 'True', 'YES', '1', True):
            self.assertIs(True, connection.verify_setting(value), value)
        for value in ('false', 'FALSE', 'no', '0', False):
            self.assertIs(False, connection.verify_setting(value), value)

    def test_anything_else_is_a_certificate_path(self):
        self.assertEqual('/etc/nova/lxd-server.crt',
                         connection.verify_setting('/etc/nova/lxd-server.crt'))


class LXDErrorTest(testtools.TestCase):

    def test_the_daemon_message_of_an_error_answer(self):
        exc = lxd_exceptions.LXDAPIException(_response(
            403, b'{"type": "error", "error": "not authorized", '
                 b'"error_code": 403}'))
        self.assertEqual('not authorized', connection.lxd_error(exc))

    def test_an_answer_that_is_not_json_is_given_as_it_came(self):
        exc = lxd_exceptions.LXDAPIException(_response(
            502, b'Bad Gateway from the proxy'))
        self.assertEqual('Bad Gateway from the proxy',
                         connection.lxd_error(exc))

    def test_an_answer_without_a_message_falls_back_to_the_exception(self):
        exc = lxd_exceptions.LXDAPIException(_response(
            500, b'{"type": "error", "error": "", "error_code": 500}'))
        self.assertEqual(str(exc), connection.lxd_error(exc))
        self.assertEqual('refused',
                         connection.lxd_error(Exception('refused')))


class MockedDaemon(testtools.TestCase):
    """A Connection on a socket whose answers come from requests-mock."""

    def setUp(self):
        super(MockedDaemon, self).setUp()
        self.socket = seam_helpers.SocketFile()
        self.addCleanup(self.socket.close)
        self.mock = self.useFixture(requests_mock_fixture.Fixture())
        self.log = self.useFixture(fixtures.FakeLogger(
            name='nova_lxd_accel.client'))
        self.conf = seam_helpers.make_conf(self.socket.path)
        self.useFixture(config_fixture.Config(self.conf))
        self.mock.get('/1.0', json=recorded_daemon.sample(LXD_502))
        self.client = connection.Connection(self.conf)
        self.wait_url = '/1.0/operations/%s/wait' % OPERATION

    def _history(self, method, path):
        return [r for r in self.mock.request_history
                if r.method == method and r.path == path]


class ConnectionTest(MockedDaemon):

    def test_wait_lasts_the_configured_timeout_and_the_read_longer(self):
        self.mock.get(self.wait_url, json=_sync(_operation('Success')))
        self.client.wait_operation(OPERATION, 'rename', 'instance c1')
        (wait,) = self._history('GET', self.wait_url)
        self.assertEqual([str(seam_helpers.TIMEOUT)], wait.qs['timeout'])
        self.assertEqual([seam_helpers.PROJECT], wait.qs['project'])
        # the HTTP read must not give up before LXD answers the wait
        self.assertEqual(seam_helpers.TIMEOUT + 10, wait.timeout)

    def test_a_forgotten_operation_is_an_unknown_outcome(self):
        self.mock.get(self.wait_url, status_code=404,
                      json=_error(404, 'Operation not found'))
        error = self.assertRaises(
            exception.LXDOperationGone, self.client.wait_operation,
            OPERATION, 'rename', 'instance c1', timeout=5)
        self.assertIn('rename instance c1', str(error))
        self.assertIn('the outcome is unknown', str(error))

    def test_another_missing_object_on_a_wait_is_not_a_lost_operation(self):
        self.mock.get(self.wait_url, status_code=404,
                      json=_error(404, 'Project not found'))
        error = self.assertRaises(
            exception.LXDObjectNotFound, self.client.wait_operation,
            OPERATION, 'rename', 'instance c1', timeout=5)
        self.assertNotIsInstance(error, exception.LXDOperationGone)
        self.assertIn('Project not found', str(error))

    def test_a_failed_operation_names_lxd_reason(self):
        self.mock.post('/1.0/instances/c1', status_code=202,
                       json=_async())
        self.mock.get(self.wait_url, json=_sync(_operation(
            'Failure', err='Name "c2" already in use')))
        error = self.assertRaises(
            exception.LXDOperationFailed, self.client._request, 'post',
            self.client.api.instances['c1'], 'rename', 'instance c1',
            json={'name': 'c2'})
        self.assertEqual('LXD refused to rename instance c1: Name "c2" '
                         'already in use', str(error))

    def test_a_timeout_is_reported_even_when_the_cancel_fails(self):
        self.mock.post('/1.0/instances/c1', status_code=202,
                       json=_async(may_cancel=True))
        self.mock.get(self.wait_url,
                      json=_sync(_operation('Running', may_cancel=True)))
        self.mock.delete('/1.0/operations/' + OPERATION, status_code=403,
                         json=_error(403, 'not authorized'))
        self.assertRaises(
            exception.LXDOperationTimeout, self.client._request, 'post',
            self.client.api.instances['c1'], 'migrate', 'instance c1',
            timeout=1, json={'migration': True})
        self.assertEqual(
            1, len(self._history('DELETE', '/1.0/operations/' + OPERATION)))
        self.assertIn('Cancelling timed-out LXD operation %s (migrate '
                      'instance c1) failed' % OPERATION, self.log.output)
        self.assertIn('not authorized', self.log.output)

    def test_cancelling_a_vanished_operation_is_no_error(self):
        self.mock.delete('/1.0/operations/' + OPERATION, status_code=404,
                         json=_error(404, 'Operation not found'))
        self.client.cancel_operation(OPERATION)
        self.assertEqual(
            1, len(self._history('DELETE', '/1.0/operations/' + OPERATION)))

    def test_lost_connection_reconnects_on_the_next_request(self):
        self.mock.get('/1.0/profiles/default',
                      exc=requests.exceptions.ConnectionError('refused'))
        error = self.assertRaises(exception.LXDUnreachable,
                                  self.client.profile, 'default')
        self.assertIn(self.socket.path, str(error))
        self.mock.get('/1.0/profiles/default', json=_sync({
            'name': 'default', 'config': {}, 'devices': {}}))
        self.assertEqual('default', self.client.profile('default')['name'])
        # the daemon may have come back: the connection was opened again
        self.assertEqual(2, len(self._history('GET', '/1.0')))

    def test_lost_connection_names_the_daemon_last_seen_there(self):
        self.mock.get('/1.0', json=recorded_daemon.sample(INCUS_604))
        self.assertEqual('incus', self.client.daemon_info().server)
        self.mock.get('/1.0/resources',
                      exc=requests.exceptions.ConnectionError('refused'))
        error = self.assertRaises(exception.LXDUnreachable,
                                  self.client.resources)
        # the socket's path says nothing of Incus; what answered there did
        self.assertIn('Cannot reach the Incus daemon at %s'
                      % self.socket.path, str(error))
        self.assertIn('`incus info`', str(error))


class ResourcesTest(MockedDaemon):

    def setUp(self):
        super(ResourcesTest, self).setUp()
        self.waits = []
        self.useFixture(fixtures.MockPatch(
            'nova_lxd_accel.client.connection.time.sleep',
            side_effect=self.waits.append))
        self.flaky = _error(
            500, 'Failed to load PCI device: read /sys/bus/pci/devices/'
                 '0000:3b:00.0/numa_node: bad file descriptor')

    def test_a_failed_read_is_retried(self):
        self.mock.get('/1.0/resources', [
            {'status_code': 500, 'json': self.flaky},
            {'json': _sync({'cpu': {'total': 64}})}])
        self.assertEqual({'cpu': {'total': 64}}, self.client.resources())
        self.assertEqual([0.2], self.waits)

    def test_a_read_failing_every_time_is_reported(self):
        self.mock.get('/1.0/resources', status_code=500, json=self.flaky)
        error = self.assertRaises(exception.LXDOperationFailed,
                                  self.client.resources)
        self.assertIn('bad file descriptor', str(error))
        self.assertEqual(3, len(self._history('GET', '/1.0/resources')))
        self.assertEqual([0.2, 0.4], self.waits)

    def test_a_missing_resources_api_is_not_retried(self):
        self.mock.get('/1.0/resources', status_code=404,
                      json=_error(404, 'not found'))
        self.assertRaises(exception.LXDObjectNotFound,
                          self.client.resources)
        self.assertEqual(1, len(self._history('GET', '/1.0/resources')))
        self.assertEqual([], self.waits)


class HTTPSTest(testtools.TestCase):

    def setUp(self):
        super(HTTPSTest, self).setUp()
        self.mock = self.useFixture(requests_mock_fixture.Fixture())
        self.mock.get('https://192.0.2.10:8443/1.0',
                      json=recorded_daemon.sample(LXD_502))

    def test_the_environment_changes_neither_verification_nor_route(self):
        self.useFixture(fixtures.EnvironmentVariable(
            'REQUESTS_CA_BUNDLE', '/nonexistent/ca.pem'))
        self.useFixture(fixtures.EnvironmentVariable(
            'https_proxy', 'http://proxy.invalid:3128'))
        conf = seam_helpers.make_conf('https://192.0.2.10:8443')
        self.useFixture(config_fixture.Config(conf))
        conf.set_override('client_cert', '/etc/nova/lxd.crt', group='lxd')
        conf.set_override('client_key', '/etc/nova/lxd.key', group='lxd')
        connection.Connection(conf).api
        (request,) = self.mock.request_history
        self.assertIs(True, request.verify)
        self.assertEqual({}, request.proxies)
        self.assertEqual(('/etc/nova/lxd.crt', '/etc/nova/lxd.key'),
                         request.cert)

    def test_a_refused_connection_names_the_endpoint(self):
        self.mock.get('https://192.0.2.10:8443/1.0',
                      exc=requests.exceptions.ConnectionError('refused'))
        error = self.assertRaises(
            exception.LXDUnreachable, connection.https_client,
            'https://192.0.2.10:8443', True, None, 5, 'default')
        self.assertIn('https://192.0.2.10:8443', str(error))
        self.assertIn('refused', str(error))

    def test_a_pinned_certificate_is_checked_by_its_fingerprint(self):
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, 'lxd')])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name)
                .issuer_name(name).public_key(key.public_key())
                .serial_number(1).not_valid_before(now)
                .not_valid_after(now + datetime.timedelta(days=1))
                .sign(key, hashes.SHA256()))
        path = os.path.join(self.useFixture(fixtures.TempDir()).path,
                            'server.crt')
        with open(path, 'wb') as handle:
            handle.write(cert.public_bytes(serialization.Encoding.PEM))
        adapter = connection._TLSAdapter(pinned=path)
        pool = urllib3.HTTPSConnectionPool('192.0.2.10', 8443)
        adapter.cert_verify(pool, 'https://192.0.2.10:8443', True, None)
        der = cert.public_bytes(serialization.Encoding.DER)
        self.assertEqual(hashlib.sha256(der).hexdigest(),
                         pool.assert_fingerprint)
        # a self-signed certificate has no CA chain to verify
        self.assertEqual('CERT_NONE', pool.cert_reqs)
