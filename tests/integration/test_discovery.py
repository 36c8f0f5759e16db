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

"""The seam against the run's real daemon (LXD or Incus).

Discovery on recorded daemons is in tests/unit/test_daemon.py.
"""

import os

import fixtures
import testtools

from nova_lxd_accel import client as lxd_client
from nova_lxd_accel import daemon
from tests.fixtures import lxd_fixtures
from tests.fixtures import recorded_daemon

_conf = recorded_daemon.lxd_options


class RealDaemonTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.socket = lxd_fixtures.lxd_socket()

    def test_one_daemon_behind_two_sockets_is_one(self):
        # The real daemon, reached also through a directory whose
        # unix.socket is a link to it: one daemon (same certificate).
        linked = self.useFixture(fixtures.TempDir()).path
        os.symlink(self.socket, os.path.join(linked, 'unix.socket'))
        sockets = {'lxd': self.socket,
                   'incus': os.path.join(linked, 'unix.socket')}
        path, client = lxd_client.discover(
            _conf().lxd, environ={}, well_known=list(sockets.items()))
        self.assertEqual(self.socket, path)

    def test_daemon_info(self):
        client = lxd_client.LXDClient(_conf(endpoint=self.socket))
        info = client.daemon_info()
        self.assertEqual(lxd_fixtures.daemon(), info.server)
        self.assertEqual([], info.missing_required())

    def test_cli_for_the_daemon_behind_a_client(self):
        real = lxd_client.LXDClient(_conf(endpoint=self.socket))
        self.assertEqual(
            {'lxd': 'lxc', 'incus': 'incus'}[lxd_fixtures.daemon()] +
            ' delete --force c1',
            daemon.cli_for(real, 'delete', name='c1'))
