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

"""What an installed nova-lxd-accel offers nova and oslo tooling."""

import os
import subprocess
import sys
import tempfile

from nova.api.validation.extra_specs import validators
import nova.conf
from nova import exception as nova_exception
from nova.virt import driver as virt_driver
import testtools

from nova_lxd_accel import driver as lxd_driver

CONF = nova.conf.CONF

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


class DriverLoadingTest(testtools.TestCase):

    def test_nova_finds_the_driver(self):
        # The way nova-compute loads ``compute_driver = lxd_accel.LXDDriver``
        # (through the installed nova.virt.lxd_accel shim).
        driver = virt_driver.load_compute_driver(None, 'lxd_accel.LXDDriver')
        self.assertIsInstance(driver, lxd_driver.LXDDriver)

    def test_capabilities_are_honest(self):
        capabilities = lxd_driver.LXDDriver.capabilities
        self.assertTrue(capabilities['supports_image_type_raw'])
        self.assertTrue(capabilities['supports_attach_interface'])
        self.assertTrue(capabilities['has_imagecache'])
        for name in ('supports_image_type_qcow2', 'supports_multiattach',
                     'supports_device_tagging'):
            self.assertFalse(capabilities[name], name)

    def test_same_host_cold_migration_follows_the_operator(self):
        # the trait nova's API reads to keep or leave out the server's host
        self.addCleanup(CONF.clear_override, 'same_host', 'lxd_migration')
        driver = virt_driver.load_compute_driver(None, 'lxd_accel.LXDDriver')
        self.assertTrue(driver.capabilities['supports_migrate_to_same_host'])
        CONF.set_override('same_host', False, 'lxd_migration')
        driver = virt_driver.load_compute_driver(None, 'lxd_accel.LXDDriver')
        self.assertFalse(
            driver.capabilities['supports_migrate_to_same_host'])
        # the class's own stays as it was
        self.assertTrue(lxd_driver.LXDDriver.capabilities[
            'supports_migrate_to_same_host'])


class ConfigSampleTest(testtools.TestCase):

    def test_committed_sample_is_current(self):
        committed = os.path.join(REPO, 'etc', 'nova-lxd-accel',
                                 'nova-lxd-accel.conf.sample')
        with tempfile.TemporaryDirectory() as tmp:
            fresh = os.path.join(tmp, 'sample.conf')
            subprocess.run(
                [sys.executable, '-m', 'oslo_config.generator',
                 '--namespace', 'nova_lxd_accel', '--wrap-width', '79',
                 '--output-file', fresh], check=True)
            with open(fresh) as handle:
                expected = handle.read()
        with open(committed) as handle:
            self.assertEqual(expected, handle.read(),
                             'etc/ sample is stale: run `tox -e genconfig` '
                             'and commit the result')


class ExtraSpecValidatorsTest(testtools.TestCase):
    """Through nova's own validation entry point (as the API calls it)."""

    def test_good_values(self):
        for name, value in [('lxd:privileged', 'true'),
                            ('lxd:nesting', 'False'),
                            ('lxd:isolated_idmap', 'yes'),
                            ('lxd:processes', '512'),
                            ('lxd:gpu_runtime', 'nvidia'),
                            ('lxd:gpu_runtime', 'none')]:
            # checked by this project's validator: nova lets a key of a
            # namespace it does not know through unchecked
            self.assertIn(name, validators.VALIDATORS)
            self.assertIsNone(validators.validate(name, value))

    def test_bad_values_name_key_and_allowed_values(self):
        for name, value, hint in [
                ('lxd:privileged', 'maybe', 'lxd:privileged'),
                ('lxd:processes', '0', 'lxd:processes'),
                ('lxd:processes', 'many', 'lxd:processes'),
                ('lxd:gpu_runtime', 'cuda', 'nvidia')]:
            error = self.assertRaises(nova_exception.ValidationError,
                                      validators.validate, name, value)
            self.assertIn(hint, str(error))

    def test_unknown_lxd_key_refused(self):
        error = self.assertRaises(nova_exception.ValidationError,
                                  validators.validate, 'lxd:raw.lxc', 'x')
        self.assertIn('lxd:raw.lxc', str(error))
