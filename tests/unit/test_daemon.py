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

"""The seam finds the local daemon, once, and knows which one it is.

Daemons here are :class:`tests.fixtures.recorded_daemon.RecordedDaemon`: a unix
socket answering ``GET /1.0`` with a recorded answer of a real daemon
(``tests/unit/samples/daemons``), which is all discovery reads. The run's
real daemon is in tests/integration/test_discovery.py.
"""

import grp
import os
import threading

import fixtures
import testtools

from nova_lxd_accel import client as lxd_client
from nova_lxd_accel.client import connection
from nova_lxd_accel.container import builder
from nova_lxd_accel import daemon as lxd_daemon
from nova_lxd_accel import exception
from tests.fixtures import recorded_daemon

RecordedDaemon = recorded_daemon.RecordedDaemon
sample = recorded_daemon.sample
LXD_502 = recorded_daemon.LXD_502
INCUS_604 = recorded_daemon.INCUS_604
LXD_62 = recorded_daemon.LXD_62
_conf = recorded_daemon.lxd_options


class CandidateSocketsTest(testtools.TestCase):

    def test_environment_names_the_daemon(self):
        self.assertEqual(
            [('lxd', '/srv/lxd/unix.socket')],
            lxd_client.candidate_sockets({'LXD_DIR': '/srv/lxd'}))
        self.assertEqual(
            [('incus', '/srv/incus/unix.socket')],
            lxd_client.candidate_sockets({'INCUS_DIR': '/srv/incus'}))
        self.assertEqual(
            [('lxd', '/a/unix.socket'), ('incus', '/b/unix.socket')],
            lxd_client.candidate_sockets({'LXD_DIR': '/a',
                                          'INCUS_DIR': '/b'}))

    def test_well_known_sockets_that_exist(self):
        root = self.useFixture(fixtures.TempDir()).path
        known = [(server, os.path.join(root, server, 'unix.socket'))
                 for server in ('lxd', 'incus')]
        self.assertEqual([], lxd_client.candidate_sockets({}, known))
        os.makedirs(os.path.dirname(known[1][1]))
        open(known[1][1], 'w').close()
        self.assertEqual([known[1]],
                         lxd_client.candidate_sockets({}, known))

    def test_default_search_order(self):
        self.assertEqual(
            ['/var/snap/lxd/common/lxd/unix.socket',
             '/var/lib/lxd/unix.socket', '/var/lib/incus/unix.socket',
             '/run/incus/unix.socket'],
            [path for _, path in lxd_client.WELL_KNOWN_SOCKETS])


class DiscoverTest(testtools.TestCase):

    def _known(self, *daemons):
        return [(d.answer['metadata']['environment']['server'],
                 d.socket_path) for d in daemons]

    def test_one_daemon_is_used(self):
        incus = self.useFixture(RecordedDaemon(INCUS_604))
        path, client = lxd_client.discover(_conf().lxd, environ={},
                                           well_known=self._known(incus))
        self.assertEqual(incus.socket_path, path)
        self.assertEqual('incus', client.host_info['environment']['server'])

    def test_two_daemons_refused_naming_both(self):
        lxd = self.useFixture(RecordedDaemon(LXD_502))
        incus = self.useFixture(RecordedDaemon(INCUS_604))
        error = self.assertRaises(
            exception.DaemonAmbiguous, lxd_client.discover, _conf().lxd,
            environ={}, well_known=self._known(lxd, incus))
        message = str(error)
        self.assertIn('LXD 5.0.2 at %s' % lxd.socket_path, message)
        self.assertIn('Incus 6.0.4 at %s' % incus.socket_path, message)
        self.assertIn('set [lxd] endpoint', message)

    def test_environment_wins_over_well_known(self):
        lxd = self.useFixture(RecordedDaemon(LXD_502))
        incus = self.useFixture(RecordedDaemon(INCUS_604))
        path, client = lxd_client.discover(
            _conf().lxd, environ={'INCUS_DIR': incus.directory},
            well_known=self._known(lxd, incus))
        self.assertEqual(incus.socket_path, path)

    def test_nothing_answers(self):
        root = self.useFixture(fixtures.TempDir()).path
        dead = os.path.join(root, 'unix.socket')
        open(dead, 'w').close()     # exists, but no daemon behind it
        error = self.assertRaises(
            exception.LXDUnreachable, lxd_client.discover, _conf().lxd,
            environ={}, well_known=[('incus', dead)])
        self.assertIn(dead, str(error))
        self.assertIn('incus admin waitready', str(error))
        self.assertIn('set [lxd] endpoint', str(error))

    def test_socket_this_user_cannot_open(self):
        # A socket of group "disk", mode 0660, seen by user nobody (as
        # effective ids, like nova-compute's own user).
        root = self.useFixture(fixtures.TempDir()).path
        os.chmod(root, 0o755)
        daemon = self.useFixture(RecordedDaemon(INCUS_604, directory=root))
        os.chown(daemon.socket_path, 0, grp.getgrnam('disk').gr_gid)
        os.chmod(daemon.socket_path, 0o660)
        self.assertIsNone(connection._socket_problem(daemon.socket_path))
        os.setegid(65534)
        os.seteuid(65534)
        try:
            problem = connection._socket_problem(daemon.socket_path)
        finally:
            os.seteuid(0)
            os.setegid(0)
        self.assertEqual('this user (uid 65534) may not open the socket; '
                         'add it to group disk and restart nova-compute',
                         problem)


class LXDClientConnectionTest(testtools.TestCase):

    def test_unset_endpoint_discovers_and_reports_it(self):
        incus = self.useFixture(RecordedDaemon(INCUS_604))
        self.useFixture(fixtures.EnvironmentVariable(
            'INCUS_DIR', incus.directory))
        self.useFixture(fixtures.EnvironmentVariable('LXD_DIR'))
        client = lxd_client.LXDClient(_conf())
        info = client.daemon_info()
        self.assertEqual(incus.socket_path, client.endpoint)
        self.assertEqual('incus', info.server)
        self.assertEqual('6.0.4', info.version)
        self.assertEqual(incus.socket_path, info.endpoint)

    def test_configured_endpoint_overrides_discovery(self):
        lxd = self.useFixture(RecordedDaemon(LXD_502))
        incus = self.useFixture(RecordedDaemon(INCUS_604))
        self.useFixture(fixtures.EnvironmentVariable(
            'INCUS_DIR', incus.directory))
        client = lxd_client.LXDClient(_conf(endpoint=lxd.socket_path))
        self.assertEqual('lxd', client.daemon_info().server)

    def test_endpoint_neither_socket_nor_https(self):
        client = lxd_client.LXDClient(_conf(endpoint='127.0.0.1:8443'))
        error = self.assertRaises(exception.LXDUnreachable,
                                  lambda: client.api)
        self.assertIn('neither a unix socket path', str(error))

    def test_connects_once_from_many_threads(self):
        incus = self.useFixture(RecordedDaemon(INCUS_604))
        client = lxd_client.LXDClient(_conf(endpoint=incus.socket_path))
        barrier = threading.Barrier(8)
        apis = []

        def use():
            barrier.wait()
            apis.append(client.api)

        threads = [threading.Thread(target=use) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        # pylxd.Client() reads GET /1.0 once per connection it makes
        self.assertEqual(['/1.0?project=default'], incus.requests)
        self.assertEqual(1, len({id(api) for api in apis}))

    def test_daemon_info_read_once(self):
        lxd = self.useFixture(RecordedDaemon(LXD_62))
        client = lxd_client.LXDClient(_conf(endpoint=lxd.socket_path))
        first = client.daemon_info()
        self.assertIs(first, client.daemon_info())
        self.assertTrue(first.has('gpu_cdi'))
        self.assertIsNot(first, client.daemon_info(refresh=True))


class DaemonInfoTest(testtools.TestCase):

    def test_recorded_daemons(self):
        lxd = lxd_daemon.DaemonInfo.from_server_info(
            sample(LXD_502)['metadata'])
        incus = lxd_daemon.DaemonInfo.from_server_info(
            sample(INCUS_604)['metadata'])
        lxd6 = lxd_daemon.DaemonInfo.from_server_info(
            sample(LXD_62)['metadata'])
        self.assertEqual(('lxd', '5.0.2', 318),
                         (lxd.server, lxd.version, len(lxd.extensions)))
        self.assertEqual(('incus', '6.0.4', 450),
                         (incus.server, incus.version,
                          len(incus.extensions)))
        self.assertEqual('LXD 6.2 (401 API extensions)', lxd6.describe())
        for info in (lxd, incus, lxd6):
            self.assertEqual([], info.missing_required())
            self.assertTrue(info.supports('mig'))
        self.assertFalse(lxd.supports('cdi'))
        self.assertFalse(incus.supports('cdi'))
        self.assertTrue(lxd6.supports('cdi'))
        self.assertFalse(lxd6.supports('mig_cdi'))

    def test_guest_api_key_is_each_daemons_own(self):
        # Incus 6.0.4 answers "Unknown configuration key: security.devlxd"
        for name, key in ((LXD_502, 'security.devlxd'),
                          (LXD_62, 'security.devlxd'),
                          (INCUS_604, 'security.guestapi')):
            self.assertEqual(key, lxd_daemon.DaemonInfo.from_server_info(
                sample(name)['metadata']).guest_api_key)
        self.assertEqual('security.devlxd', lxd_daemon.DaemonInfo
                         .from_server_info({}).guest_api_key)
        # the builder (container/, which imports no daemon code) agrees
        self.assertEqual(
            {lxd_daemon.SERVER_LXD: builder.GUEST_API_KEY_LXD,
             lxd_daemon.SERVER_INCUS: builder.GUEST_API_KEY_INCUS},
            lxd_daemon.GUEST_API_KEYS)

    def test_missing_extension_named_with_first_releases(self):
        info = sample(LXD_502)['metadata']
        info['api_extensions'].remove('projects')
        daemon = lxd_daemon.DaemonInfo.from_server_info(info)
        self.assertEqual([('projects', 'LXD 3.6, any Incus')],
                         daemon.missing_required())


class CommandsTest(testtools.TestCase):
    """Every operator command exists in both forms."""

    def test_both_forms(self):
        lxd = lxd_daemon.DaemonInfo('lxd', '5.0.2', frozenset())
        incus = lxd_daemon.DaemonInfo('incus', '6.0.4', frozenset())
        self.assertEqual('lxc config trust add /etc/nova/lxd.crt',
                         lxd.cli('trust_add', file='/etc/nova/lxd.crt'))
        self.assertEqual(
            'incus config trust add-certificate /etc/nova/lxd.crt',
            incus.cli('trust_add', file='/etc/nova/lxd.crt'))
        self.assertEqual('lxd init', lxd.cli('init'))
        self.assertEqual('incus admin init', incus.cli('init'))
        self.assertEqual('incus admin waitready', incus.cli('waitready'))
        self.assertEqual('lxc storage create p dir',
                         lxd.cli('storage_create', pool='p'))
        self.assertEqual('incus project create nova',
                         incus.cli('project_create', project='nova'))
        self.assertEqual('incus-admin', incus.cli('group'))
        # every command has an Incus form and an LXD form
        self.assertEqual(set(lxd_daemon._COMMANDS['lxd']),
                         set(lxd_daemon._COMMANDS['incus']))
        for command in lxd_daemon._COMMANDS['incus']:
            self.assertNotIn('lxc ', lxd_daemon._COMMANDS['incus'][command])
            self.assertNotIn('lxd ', lxd_daemon._COMMANDS['incus'][command])

    def test_cli_for_the_daemon_behind_a_client(self):
        incus = self.useFixture(RecordedDaemon(INCUS_604))
        client = lxd_client.LXDClient(_conf(endpoint=incus.socket_path))
        self.assertEqual('incus delete --force c1',
                         lxd_daemon.cli_for(client, 'delete', name='c1'))
        # the run's real daemon: tests/integration/test_discovery.py
        # daemon down: the message still names a command
        down = lxd_client.LXDClient(_conf(endpoint='/nonexistent/s'))
        self.assertEqual('lxc delete --force c1',
                         lxd_daemon.cli_for(down, 'delete', name='c1'))

    def test_unreachable_names_the_daemon_and_its_command(self):
        incus = lxd_client.LXDClient(_conf(endpoint='/srv/incus/unix.socket'))
        error = self.assertRaises(exception.LXDUnreachable,
                                  lambda: incus.api)
        self.assertEqual(
            'Cannot reach the Incus daemon at /srv/incus/unix.socket: the '
            'socket does not exist. Check that it runs (`incus info`) and '
            'that [lxd] endpoint in nova.conf points at it.', str(error))
        lxd = lxd_client.LXDClient(_conf(endpoint='/srv/lxd/unix.socket'))
        error = self.assertRaises(exception.LXDUnreachable, lambda: lxd.api)
        self.assertIn('Cannot reach the LXD daemon', str(error))
        self.assertIn('(`lxc info`)', str(error))
