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

"""The driver on LXD's HTTPS API instead of its unix socket.

Uses the HTTPS listener and the trusted client certificate that
tools/lxd-peer-up.sh sets up for the migration tests.
"""

import os

import fixtures

from nova_lxd_accel import exception
from tests.fixtures import peer
from tests.integration import base


class HTTPSEndpointTest(base.DriverTestCase):

    def setUp(self):
        peer.require_peer(self)
        super(HTTPSEndpointTest, self).setUp()
        # A CA bundle in the environment must not replace the pinned
        # server certificate (requests would otherwise use it).
        self.useFixture(fixtures.EnvironmentVariable(
            'REQUESTS_CA_BUNDLE', '/etc/ssl/certs/ca-certificates.crt'))
        self.flags(endpoint=peer.MAIN_URL, client_cert=peer.CLIENT_CERT,
                   client_key=peer.CLIENT_KEY,
                   verify=os.path.join(peer.MAIN_DIR, 'server.crt'),
                   group='lxd')

    def test_spawn_and_destroy_over_https(self):
        driver = self.driver.__class__(None)
        driver.init_host(self.host)
        self.addCleanup(driver.cleanup_host, self.host)
        instance = self.make_instance()
        driver.spawn(self.context, instance, self.tiny_image(), [], None, {})
        self.assertEqual('Running', self.container(instance)['status'])
        driver.destroy(self.context, instance, [])
        self.assertEqual([], self.container_names())

    def test_wrong_pinned_certificate_is_refused(self):
        self.flags(verify=os.path.join(peer.PEER_DIR, 'server.crt'),
                   group='lxd')
        driver = self.driver.__class__(None)
        error = self.assertRaises(exception.LXDUnreachable,
                                  driver.init_host, self.host)
        self.assertIn(peer.MAIN_URL, str(error))
