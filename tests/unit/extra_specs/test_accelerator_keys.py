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

"""The ``Accelerator:`` extra spec validators: accepted and refused values.

Each validator is called the way nova's API calls it (``validate(name,
value)`` with the string an operator typed); a refusal must name the key
and say what it accepts. That the flavors the helper proposes pass, and
that a misspelt key is refused through nova's registry, is checked in
tests/unit/advice/test_flavor_proposals.py.
"""

from nova.api.validation.extra_specs import validators
from nova import exception as nova_exception
import testtools

from nova_lxd_accel.advice import flavor_proposals
from nova_lxd_accel.extra_specs import accelerator_keys

BY_NAME = {v.name: v for v in accelerator_keys.EXTRA_SPEC_VALIDATORS}


class AcceleratorKeysTestCase(testtools.TestCase):

    def assertAccepted(self, key, *values):
        for value in values:
            BY_NAME[key].validate(key, value)

    def assertRefused(self, key, values, allowed):
        for value in values:
            error = self.assertRaises(nova_exception.ValidationError,
                                      BY_NAME[key].validate, key, value)
            self.assertIn("extra spec '%s'" % key, str(error))
            self.assertIn('Allowed: %s.' % allowed, str(error))


class RegistrationTest(AcceleratorKeysTestCase):

    def test_the_keys_proposals_write_are_the_keys_validated(self):
        self.assertEqual(sorted(flavor_proposals.KEYS), sorted(BY_NAME))
        self.assertEqual(accelerator_keys.EXTRA_SPEC_VALIDATORS,
                         accelerator_keys.register())

    def test_nova_finds_them_through_the_entry_point(self):
        validators.load_validators()
        for name, validator in BY_NAME.items():
            self.assertIs(validator, validators.VALIDATORS.get(name), name)
        # so nova's own validate refuses a bad value, naming the key
        error = self.assertRaises(nova_exception.ValidationError,
                                  validators.validate,
                                  'Accelerator:Number', '0.5')
        self.assertIn('Accelerator:Number', str(error))

    def test_every_key_documents_its_values(self):
        for name, validator in BY_NAME.items():
            self.assertTrue(validator.description, name)
            self.assertTrue(validator.value.get('description'), name)


class ValuesTest(AcceleratorKeysTestCase):

    def test_type_is_one_of_the_accounting_kinds(self):
        self.assertAccepted('Accelerator:Type', 'GPU', 'FPGA', 'TPU', 'NPU',
                            'other', flavor_proposals.TYPE_GPU)
        # case matters: cASO copies the value into its records as it is
        self.assertRefused('Accelerator:Type', ('gpu', 'Gpu', '', 'GPUs'),
                           'GPU, FPGA, TPU, NPU or other')

    def test_number_is_a_whole_number_of_accelerators(self):
        self.assertAccepted('Accelerator:Number', '1', '7', '64')
        self.assertRefused('Accelerator:Number',
                           ('0', '-1', '65', '0.5', '1.0', 'two', ''),
                           'an integer from 1 to 64')

    def test_memory_is_positive_mib(self):
        self.assertAccepted('Accelerator:Memory', '1', '10240', '196608')
        self.assertRefused('Accelerator:Memory', ('0', '-512', '10GB', ''),
                           'a positive integer (MiB)')

    def test_virtualization_type_covers_what_proposals_write(self):
        self.assertAccepted('Accelerator:VirtualizationType',
                            flavor_proposals.VIRT_PASSTHROUGH,
                            flavor_proposals.VIRT_MIG,
                            flavor_proposals.VIRT_SHARED, 'vGPU', 'SR-IOV')
        self.assertRefused('Accelerator:VirtualizationType',
                           ('mig', 'pass-through', 'vgpu', ''),
                           'passthrough, MIG, shared, vGPU or SR-IOV')

    def test_vendor_is_a_name_of_up_to_64_characters(self):
        self.assertAccepted('Accelerator:Vendor', 'NVIDIA', 'A',
                            'Advanced Micro Devices, Inc.', 'x' * 64)
        self.assertRefused('Accelerator:Vendor',
                           ('', ' NVIDIA', 'x' * 65, 'NVIDIA\nAMD'),
                           'a name of 1 to 64 characters')

    def test_model_is_a_name_of_up_to_128_characters(self):
        self.assertAccepted('Accelerator:Model', 'A100-SXM4-80GB',
                            'A100-SXM4-80GB MIG 1g.10gb',
                            'NVIDIA H100 80GB HBM3 MIG 1c.3g.71gb',
                            'm' * 128)
        self.assertRefused('Accelerator:Model', ('', '\tH100', 'm' * 129),
                           'a name of 1 to 128 characters')
