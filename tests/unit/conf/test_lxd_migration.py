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

"""Tests of nova_lxd_accel.conf.lxd_migration: the [lxd_migration] group.

Each option is read the way nova-compute reads it, from a nova.conf file
on a ConfigOpts of its own (with [lxd] beside it, as the driver registers
both); what an operator may not write is refused when the option is read.
The sample configuration comes from ``oslo-config-generator`` through the
package's ``oslo.config.opts`` entry point.
"""

import logging

import fixtures
from oslo_config import cfg
import testtools

from nova_lxd_accel.conf import lxd
from nova_lxd_accel.conf import lxd_migration
from tests.fixtures import nova_conf


class MigrationOptionsTest(testtools.TestCase):

    def conf(self, text):
        """A ConfigOpts reading a nova.conf holding ``text``."""
        return nova_conf.read(self.useFixture(fixtures.TempDir()).path, text,
                              lxd.register_opts, lxd_migration.register_opts)

    def load(self, *lines):
        return self.conf('[lxd_migration]\n%s\n' % '\n'.join(
            lines)).lxd_migration

    def test_defaults_reach_other_hosts_at_their_my_ip(self):
        group = self.load()
        self.assertEqual({}, group.endpoints)
        self.assertEqual('https://192.0.2.12:8443', group.endpoint_template
                         .format(host='compute2', ip='192.0.2.12'))
        self.assertIsNone(group.client_cert)
        self.assertIsNone(group.client_key)
        self.assertEqual({}, group.server_certs)
        self.assertEqual('true', group.verify)
        self.assertIsNone(group.source_address)
        self.assertTrue(group.same_host)
        self.assertEqual(3600, group.timeout)

    def test_the_documented_endpoints_example_keeps_its_ports(self):
        example = [line.strip() for line in
                   lxd_migration.ALL_OPTS[0].help.splitlines()
                   if line.strip().startswith('endpoints = ')][0]
        self.assertEqual({'compute2': 'https://192.0.2.12:8443',
                          'compute3': 'https://lxd3:8443'},
                         self.load(example).endpoints)

    def test_server_certificates_by_host(self):
        group = self.load('server_certs = compute2:/etc/nova/lxd/c2.crt,'
                          'compute3:/etc/nova/lxd/c3.crt')
        self.assertEqual({'compute2': '/etc/nova/lxd/c2.crt',
                          'compute3': '/etc/nova/lxd/c3.crt'},
                         group.server_certs)

    def test_a_host_without_its_endpoint_is_refused(self):
        group = self.load('endpoints = compute2')
        self.assertRaises(cfg.ConfigFileValueError, getattr, group,
                          'endpoints')

    def test_a_transfer_has_at_least_a_second(self):
        group = self.load('timeout = 0')
        self.assertRaises(cfg.ConfigFileValueError, getattr, group,
                          'timeout')
        self.assertEqual(1, self.load('timeout = 1').timeout)

    def test_its_certificate_is_not_the_one_of_lxd(self):
        conf = self.conf('[lxd]\nclient_cert = /etc/nova/local.crt\n'
                         'client_key = /etc/nova/local.key\n'
                         '[lxd_migration]\n'
                         'client_cert = /etc/nova/migrate.crt\n'
                         'client_key = /etc/nova/migrate.key\n')
        self.assertEqual(('/etc/nova/migrate.crt', '/etc/nova/migrate.key'),
                         (conf.lxd_migration.client_cert,
                          conf.lxd_migration.client_key))
        self.assertEqual('/etc/nova/local.key', conf.lxd.client_key)

    def test_the_client_key_is_never_logged(self):
        conf = self.conf('[lxd_migration]\n'
                         'client_key = /etc/nova/secret-migrate.key\n')
        log = self.useFixture(fixtures.FakeLogger(name='migration-conf'))
        conf.log_opt_values(logging.getLogger('migration-conf'),
                            logging.INFO)
        self.assertRegex(log.output,
                         r'\nlxd_migration\.client_key += \*\*\*\*\n')
        self.assertNotIn('secret-migrate.key', log.output)

    def test_every_option_is_explained(self):
        self.assertTrue(lxd_migration.migration_group.help.strip())
        for opt in lxd_migration.ALL_OPTS:
            self.assertGreater(len(opt.help.strip()), 40, opt.name)
        key = [opt for opt in lxd_migration.ALL_OPTS
               if opt.name == 'client_key'][0]
        self.assertIn('* ``client_cert``', key.help)

    def test_the_sample_configuration_has_every_option(self):
        ((group, opts),) = lxd_migration.list_opts()
        self.assertEqual('lxd_migration', group.name)
        self.assertIs(lxd_migration.ALL_OPTS, opts)
        section = nova_conf.sample_section('lxd_migration')
        for opt in opts:
            self.assertIn('\n#%s =' % opt.name, section)
        self.assertIn('\n#endpoint_template = https://{ip}:8443\n', section)
