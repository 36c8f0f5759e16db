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

"""Tests of nova_lxd_accel.conf.lxd: the [lxd] group.

Each option is read the way nova-compute reads it, from a nova.conf file
on a ConfigOpts of its own; what an operator may not write is refused
when the option is read. The sample configuration comes from
``oslo-config-generator`` through the package's ``oslo.config.opts``
entry point.
"""

import logging

import fixtures
from oslo_config import cfg
import testtools

from nova_lxd_accel.conf import lxd
from tests.fixtures import nova_conf


class LXDOptionsTest(testtools.TestCase):

    def conf(self, *lines):
        """A ConfigOpts with [lxd] of a nova.conf holding ``lines``."""
        return nova_conf.read(self.useFixture(fixtures.TempDir()).path,
                              nova_conf.section('lxd', *lines),
                              lxd.register_opts)

    def load(self, *lines):
        return self.conf(*lines).lxd

    def assertRefused(self, name, value):
        group = self.load('%s = %s' % (name, value))
        self.assertRaises(cfg.ConfigFileValueError, getattr, group, name)

    def test_defaults_find_the_local_daemon_and_trust_nothing_extra(self):
        group = self.load()
        self.assertIsNone(group.endpoint)    # discovery
        self.assertEqual('true', group.verify)
        self.assertEqual('default', group.project)
        self.assertEqual(120, group.timeout)
        # no profile: no NIC of LXD's default profile bypasses Neutron
        self.assertEqual([], group.profiles)
        self.assertEqual('refuse', group.unsafe_profile_content)
        self.assertFalse(group.allow_privileged_containers)
        self.assertFalse(group.allow_nesting)
        # a fork bomb stops at its own limit (0 turns it off)
        self.assertEqual(8192, group.default_process_limit)

    def test_lifecycle_events_are_watched_by_default(self):
        group = self.load()
        self.assertTrue(group.lifecycle_events)
        self.assertEqual(2.0, group.lifecycle_poll_interval)
        self.assertEqual(30.0, group.lifecycle_events_max_backoff)
        # 0: do not watch
        self.assertEqual(0, self.load('lifecycle_poll_interval = 0')
                         .lifecycle_poll_interval)

    def test_profiles_are_applied_in_the_order_given(self):
        self.assertEqual(['nova-base', 'gpu-tools'], self.load(
            'profiles = nova-base, gpu-tools').profiles)

    def test_container_name_prefix_must_make_lxd_names(self):
        for prefix in ('nova-', 'c', 'cell1-nova-'):
            self.assertEqual(prefix, self.load(
                'container_name_prefix = %s' % prefix).container_name_prefix)
        for prefix in ('Nova-', '1nova-', 'nova_', 'nova.', 'n' * 22):
            self.assertRefused('container_name_prefix', prefix)

    def test_unsafe_profile_content_is_refused_or_stripped(self):
        self.assertEqual('strip', self.load(
            'unsafe_profile_content = strip').unsafe_profile_content)
        self.assertRefused('unsafe_profile_content', 'ignore')

    def test_lower_bounds(self):
        self.assertRefused('timeout', '0')
        self.assertRefused('default_process_limit', '-1')
        self.assertRefused('console_log_max_bytes', '1023')
        self.assertRefused('lifecycle_poll_interval', '-1')
        self.assertRefused('lifecycle_events_max_backoff', '0.1')

    def test_the_client_key_is_never_logged(self):
        conf = self.conf('client_cert = /etc/nova/lxd.crt',
                         'client_key = /etc/nova/secret-lxd.key')
        log = self.useFixture(fixtures.FakeLogger(name='lxd-conf-test'))
        conf.log_opt_values(logging.getLogger('lxd-conf-test'),
                            logging.INFO)
        self.assertRegex(log.output,
                         r'\nlxd\.client_cert += /etc/nova/lxd\.crt\n')
        self.assertRegex(log.output, r'\nlxd\.client_key += \*\*\*\*\n')
        self.assertNotIn('secret-lxd.key', log.output)

    def test_client_key_opt_names_its_related_options(self):
        opt = lxd.client_key_opt('endpoint', 'client_cert')
        self.assertEqual('client_key', opt.name)
        self.assertTrue(opt.secret)
        self.assertIn('* ``endpoint``, ``client_cert``', opt.help)

    def test_every_option_is_explained(self):
        self.assertTrue(lxd.lxd_group.help.strip())
        for opt in lxd.ALL_OPTS:
            self.assertGreater(len(opt.help.strip()), 40, opt.name)

    def test_the_sample_configuration_has_every_option(self):
        ((group, opts),) = lxd.list_opts()
        self.assertEqual('lxd', group.name)
        names = [opt.name for opt in opts]
        self.assertEqual(len(names), len(set(names)))
        self.assertEqual(lxd.connection_opts + lxd.instance_opts, opts)
        section = nova_conf.sample_section('lxd')
        for name in names:
            self.assertIn('\n#%s =' % name, section)
        self.assertIn('\n#container_name_prefix = nova-\n', section)
