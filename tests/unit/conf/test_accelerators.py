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

"""Tests of nova_lxd_accel.conf.accelerators: the [lxd_accelerators] group.

Each option is read the way nova-compute reads it, from a nova.conf file
on a ConfigOpts of its own; what an operator may not write is refused
when the option is read. The sample configuration comes from
``oslo-config-generator`` through the package's ``oslo.config.opts``
entry point.
"""


import fixtures
from oslo_config import cfg
import testtools

from nova_lxd_accel.conf import accelerators
from tests.fixtures import nova_conf


class AcceleratorOptionsTest(testtools.TestCase):

    def load(self, *lines):
        """[lxd_accelerators] of a nova.conf holding ``lines``."""
        return nova_conf.read(
            self.useFixture(fixtures.TempDir()).path,
            nova_conf.section('lxd_accelerators', *lines),
            accelerators.register_opts).lxd_accelerators

    def assertRefused(self, name, value):
        group = self.load('%s = %s' % (name, value))
        self.assertRaises(cfg.ConfigFileValueError, getattr, group, name)

    def test_defaults_report_nvidia_and_amd_gpus_mig_and_infiniband(self):
        group = self.load()
        self.assertEqual(['10de', '1002'], group.gpu_vendor_ids)
        self.assertEqual([], group.excluded_pci_addresses)
        self.assertTrue(group.report_mig)
        self.assertTrue(group.report_infiniband)
        self.assertEqual('auto', group.nvidia_binding)
        self.assertEqual([], group.shared_gpus)
        self.assertFalse(group.shared_gpu_any_project)
        self.assertIsNone(group.metrics_file)

    def test_released_gpus_are_verified_unless_the_operator_says_not(self):
        group = self.load()
        self.assertTrue(group.verified_release)
        self.assertEqual(3, group.probe_failures_before_hold)
        self.assertFalse(self.load('verified_release = false')
                         .verified_release)

    def test_an_empty_vendor_list_reports_no_gpu(self):
        self.assertEqual([], self.load('gpu_vendor_ids =').gpu_vendor_ids)
        self.assertEqual(
            ['10de', '1a03'],
            self.load('gpu_vendor_ids = 10de, 1a03').gpu_vendor_ids)

    def test_excluded_addresses_are_a_list(self):
        self.assertEqual(
            ['0000:3b:00.0', '3b:00.1'],
            self.load('excluded_pci_addresses = 0000:3b:00.0,3b:00.1')
            .excluded_pci_addresses)

    def test_nvidia_binding_takes_only_its_three_modes(self):
        for mode in ('auto', 'cdi', 'runtime'):
            self.assertEqual(mode, self.load(
                'nvidia_binding = %s' % mode).nvidia_binding)
        self.assertRefused('nvidia_binding', 'mig')
        self.assertRefused('nvidia_binding', 'CDI')

    def test_fatal_xids_are_positive_integers(self):
        self.assertEqual([79, 48],
                         self.load('fatal_xids = 79, 48').fatal_xids)
        self.assertRefused('fatal_xids', '79, 0')
        self.assertRefused('fatal_xids', 'Xid79')

    def test_default_fatal_xids_leave_the_tenant_ones_out(self):
        fatal = self.load().fatal_xids
        for xid in (48, 79, 95, 119, 120):
            self.assertIn(xid, fatal)
        # these only need the application restarted
        for xid in (13, 31, 43, 45, 94):
            self.assertNotIn(xid, fatal)

    def test_timings_have_lower_bounds(self):
        self.assertRefused('nvidia_smi_timeout', '0')
        self.assertRefused('probe_failures_before_hold', '0')
        self.assertRefused('release_recheck_interval', '0.25')
        self.assertRefused('release_recheck_max_interval', '0.25')
        self.assertRefused('release_wait', '-1')
        self.assertRefused('probe_interval', '-1')
        # 0 is meaningful for these: probe every period, never report idle
        group = self.load('probe_interval = 0', 'idle_report_after = 0',
                          'release_wait = 0', 'xid_max_age = 0')
        self.assertEqual((0, 0, 0.0, 0),
                         (group.probe_interval, group.idle_report_after,
                          group.release_wait, group.xid_max_age))

    def test_mps_directories_are_per_gpu(self):
        group = self.load()
        pipe = group.mps_pipe_directory.format(pci='0000:3b:00.0')
        shm = group.mps_shm_directory.format(pci='0000:3b:00.0')
        self.assertEqual('/run/nvidia-mps-0000:3b:00.0', pipe)
        # never the host's own /dev/shm
        self.assertNotEqual(pipe, shm)
        self.assertNotEqual('/dev/shm', shm)

    def test_every_option_is_explained(self):
        self.assertTrue(accelerators.accelerators_group.help.strip())
        for opt in accelerators.ALL_OPTS:
            self.assertGreater(len(opt.help.strip()), 40, opt.name)

    def test_the_sample_configuration_has_every_option(self):
        ((group, opts),) = accelerators.list_opts()
        self.assertEqual('lxd_accelerators', group.name)
        self.assertIs(accelerators.ALL_OPTS, opts)
        section = nova_conf.sample_section('lxd_accelerators')
        for opt in opts:
            self.assertIn('\n#%s =' % opt.name, section)
        self.assertIn('\n#nvidia_binding = auto\n', section)
        self.assertIn('\n# cdi - always CDI', section)


class EnergyUuidLabelTest(testtools.TestCase):
    """``energy_uuid_label``: cASO's label name, and nothing that clashes."""

    def conf(self, value=None):
        conf = cfg.ConfigOpts()
        accelerators.register_opts(conf)
        conf([], default_config_files=[])
        if value is not None:
            conf.set_override('energy_uuid_label', value,
                              group='lxd_accelerators')
            self.addCleanup(conf.clear_override, 'energy_uuid_label',
                            group='lxd_accelerators')
        return conf

    def test_default_is_casos_vm_uuid_label_name_default(self):
        self.assertEqual('uuid',
                         self.conf().lxd_accelerators.energy_uuid_label)

    def test_a_prometheus_label_name_is_accepted(self):
        self.assertEqual(
            'vm_uuid',
            self.conf('vm_uuid').lxd_accelerators.energy_uuid_label)

    def test_clashing_or_invalid_names_are_refused(self):
        for bad in ('instance', 'job', 'pci', 'project', 'unit',
                    '__name__', 'vm-uuid', '1uuid', ''):
            self.assertRaises(ValueError, self.conf, bad)
