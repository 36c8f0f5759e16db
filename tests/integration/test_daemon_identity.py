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

"""The driver knows the real daemon it runs on, LXD or Incus.

Runs against the run's daemon (tests/fixtures/lxd_fixtures.py): the suite
passes on each, and every expectation follows the daemon in use.
"""

from nova.compute import provider_tree
import nova.conf

from nova_lxd_accel import exception
from tests.fixtures import lxd_fixtures
from tests.integration import base

CONF = nova.conf.CONF


class DaemonIdentityTest(base.DriverTestCase):

    def setUp(self):
        super(DaemonIdentityTest, self).setUp()
        self.kind = lxd_fixtures.daemon()
        self.name = {'lxd': 'LXD', 'incus': 'Incus'}[self.kind]

    def test_identity_logged_once_at_start(self):
        daemon = self.driver._parts.client.daemon_info()
        self.assertEqual(self.kind, daemon.server)
        self.assertEqual([], daemon.missing_required())
        lines = [line for line in self.stdlog.logger.output.splitlines()
                 if 'features: MIG binding=' in line]
        self.assertEqual(1, len(lines), lines)
        self.assertIn('Using %s %s (%d API extensions) at %s' % (
            self.name, daemon.version, len(daemon.extensions),
            lxd_fixtures.lxd_socket()), lines[0])
        # Debian's LXD 5.0.2 and Incus 6.0 have no CDI
        self.assertIn('MIG binding=runtime, CDI=no', lines[0])

    def test_root_traits_and_hypervisor_type(self):
        tree = provider_tree.ProviderTree()
        tree.new_root(self.host, '00000000-0000-0000-0000-00000000beef')
        self.driver.update_provider_tree(tree, self.host, allocations={})
        traits = tree.data(self.host).traits
        self.assertIn('CUSTOM_LXD_DAEMON_%s' % self.kind.upper(), traits)
        self.assertNotIn('CUSTOM_LXD_CDI', traits)
        resource = self.driver.get_available_resource(self.host)
        self.assertEqual({'lxd': 'lxc', 'incus': 'incus'}[self.kind],
                         resource['hypervisor_type'])
        self.assertEqual([(resource['supported_instances'][0][0], 'lxc',
                           'exe')], resource['supported_instances'])

    def test_missing_pool_names_the_daemons_command(self):
        self.flags(storage_pool='no-such-pool', group='lxd')
        driver = self.driver.__class__(None)
        error = self.assertRaises(exception.LXDNotReady, driver.init_host,
                                  'somewhere')
        command = {'lxd': 'lxc', 'incus': 'incus'}[self.kind]
        self.assertIn('`%s storage create no-such-pool dir`' % command,
                      str(error))
        self.assertIn('%s at ' % self.name, str(error))

    def test_cdi_refused_on_a_daemon_without_it(self):
        self.flags(nvidia_binding='cdi', group='lxd_accelerators')
        driver = self.driver.__class__(None)
        error = self.assertRaises(exception.LXDNotReady, driver.init_host,
                                  'somewhere')
        self.assertIn('nvidia_binding = cdi, but %s' % self.name, str(error))
        self.assertIn('lacks the gpu_cdi API extension', str(error))
