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

"""lxd: extra specs: the API validators' bounds and spawn's own check."""

from nova import exception as nova_exception
from nova import objects
import testtools

from nova_lxd_accel.container import builder
from nova_lxd_accel import exception
from nova_lxd_accel.extra_specs import lxd_keys

STRICT = builder.HostPolicy(host='cmp1')
LENIENT = builder.HostPolicy(host='cmp1', allow_privileged=True,
                             allow_nesting=True)


def _flavor(**specs):
    return objects.Flavor(name='f1', extra_specs=specs)


def _quota(mib):
    """A share with a memory quota, slot and memory from one GPU."""
    return {'resources1:CUSTOM_GPU_SHARE': '1',
            'resources1:CUSTOM_GPU_MEMORY_MB': mib,
            'lxd:gpu_memory_mb': mib}


class ValidatorBoundsTest(testtools.TestCase):

    def _validate(self, key, value):
        validator = {v.name: v for v in
                     lxd_keys.EXTRA_SPEC_VALIDATORS}[key]
        validator.validate(key, value)

    def test_processes_bounded_by_the_kernel(self):
        self._validate('lxd:processes', '1')
        self._validate('lxd:processes', str(lxd_keys.MAX_PROCESSES))
        for bad in ('0', '-1', '99999999999',
                    str(lxd_keys.MAX_PROCESSES + 1), 'lots'):
            error = self.assertRaises(nova_exception.ValidationError,
                                      self._validate, 'lxd:processes', bad)
            self.assertIn('lxd:processes', str(error))

    def test_every_numeric_key_has_both_bounds(self):
        for validator in lxd_keys.EXTRA_SPEC_VALIDATORS:
            if validator.value['type'] is int:
                self.assertIn('min', validator.value, validator.name)
                self.assertIn('max', validator.value, validator.name)


class CheckFlavorTest(testtools.TestCase):

    def setUp(self):
        super(CheckFlavorTest, self).setUp()
        objects.register_all()

    def test_good_flavors_pass(self):
        lxd_keys.check_flavor(_flavor(), STRICT)
        lxd_keys.check_flavor(_flavor(**{
            'lxd:processes': '4194304', 'lxd:isolated_idmap': 'yes',
            'lxd:gpu_runtime': 'nvidia', 'lxd:privileged': 'false',
            'lxd:nesting': '0', 'hw:cpu_policy': 'whatever',
            'quota:disk_read_bytes_sec': '1000'}), STRICT)
        lxd_keys.check_flavor(_flavor(**{
            'lxd:privileged': 'true', 'lxd:nesting': 'true'}), LENIENT)

    def test_bad_values_name_key_and_reason(self):
        for key, value, why in (
                ('lxd:processes', '99999999999', 'greater than the max'),
                ('lxd:processes', '0', 'less than the min'),
                ('lxd:processes', 'many', 'not a valid integer'),
                ('lxd:privileged', 'maybe', 'boolean'),
                ('lxd:nesting', 'yes please', 'boolean'),
                ('lxd:isolated_idmap', '2', 'boolean'),
                ('lxd:gpu_runtime', 'cuda', 'none or nvidia'),
                ('lxd:raw.lxc', 'lxc.apparmor.profile=unconfined',
                 'unknown key'),
                ('lxd:security.privileged', 'true', 'unknown key')):
            error = self.assertRaises(
                exception.FlavorExtraSpecInvalid, lxd_keys.check_flavor,
                _flavor(**{key: value}), LENIENT)
            self.assertIn('%s=%s' % (key, value), str(error))
            self.assertIn(why, str(error))
            self.assertIn('f1', str(error))

    def test_operator_forbidden(self):
        for key, option in (('lxd:privileged', 'allow_privileged_containers'),
                            ('lxd:nesting', 'allow_nesting')):
            error = self.assertRaises(
                exception.FlavorNotAllowed, lxd_keys.check_flavor,
                _flavor(**{key: 'True'}), STRICT)
            self.assertIn(option, str(error))
            self.assertIn(key, str(error))


class SharedGpuSpecsTest(testtools.TestCase):
    """lxd:gpu_memory_mb and lxd:gpu_compute_percent (issue 16)."""

    def setUp(self):
        super(SharedGpuSpecsTest, self).setUp()
        objects.register_all()

    def test_bounds(self):
        for key, good, bad in (
                ('lxd:gpu_memory_mb', ('1', '24576'),
                 ('0', '-5', 'lots', str(lxd_keys.MAX_GPU_MEMORY_MB + 1))),
                ('lxd:gpu_compute_percent', ('1', '50', '100'),
                 ('0', '101', 'half'))):
            for value in good:
                # a compute quota comes with a memory quota (one mode
                # per card: test_quota_and_traits_of_one_mode)
                lxd_keys.check_flavor(_flavor(**dict(
                    _quota(value), **{key: value})), STRICT)
            for value in bad:
                error = self.assertRaises(
                    exception.FlavorExtraSpecInvalid,
                    lxd_keys.check_flavor, _flavor(**{key: value}),
                    STRICT)
                self.assertIn('%s=%s' % (key, value), str(error))

    def test_quota_must_equal_the_placement_request(self):
        lxd_keys.check_flavor(_flavor(**_quota('4096')), STRICT)
        for specs in ({'lxd:gpu_memory_mb': '4096'},
                      {'lxd:gpu_memory_mb': '4096',
                       'resources:CUSTOM_GPU_MEMORY_MB': '2048'},
                      {'resources:CUSTOM_GPU_MEMORY_MB': '4096'}):
            error = self.assertRaises(
                exception.FlavorExtraSpecInvalid, lxd_keys.check_flavor,
                _flavor(**specs), STRICT)
            self.assertIn('CUSTOM_GPU_MEMORY_MB', str(error))

    def test_fault_says_what_to_fix_and_that_only_boot_checks(self):
        error = self.assertRaises(
            exception.FlavorExtraSpecsInconsistent, lxd_keys.check_flavor,
            _flavor(**dict(_quota('4096'), **{
                'resources1:CUSTOM_GPU_MEMORY_MB': '2048'})), STRICT)
        self.assertIn('set resources1:CUSTOM_GPU_MEMORY_MB=4096', str(error))
        self.assertIn('refused when an instance boots', str(error))
        # a request fault: the build aborts with it, never rescheduled
        self.assertIsInstance(error, exception.FlavorExtraSpecInvalid)

    def test_compute_quota_needs_a_memory_quota(self):
        error = self.assertRaises(
            exception.FlavorExtraSpecsInconsistent, lxd_keys.check_flavor,
            _flavor(**{'lxd:gpu_compute_percent': '25'}), STRICT)
        self.assertIn('set lxd:gpu_memory_mb', str(error))

    def test_slot_and_memory_in_one_numbered_group(self):
        # in the unnumbered group Placement may take them from two GPUs
        for specs in ({'resources:CUSTOM_GPU_SHARE': '1',
                       'resources:CUSTOM_GPU_MEMORY_MB': '4096',
                       'lxd:gpu_memory_mb': '4096'},
                      {'resources1:CUSTOM_GPU_SHARE': '1',
                       'resources2:CUSTOM_GPU_MEMORY_MB': '4096',
                       'lxd:gpu_memory_mb': '4096'}):
            error = self.assertRaises(
                exception.FlavorExtraSpecsInconsistent,
                lxd_keys.check_flavor, _flavor(**specs), STRICT)
            self.assertIn('one numbered group', str(error))
        lxd_keys.check_flavor(_flavor(**{
            'resources_gpu:CUSTOM_GPU_SHARE': '1',
            'resources_gpu:CUSTOM_GPU_MEMORY_MB': '4096',
            'lxd:gpu_memory_mb': '4096'}), STRICT)

    def test_quota_and_traits_of_one_mode(self):
        quota = _quota('4096')
        lxd_keys.check_flavor(_flavor(**dict(
            quota, **{'trait1:CUSTOM_GPU_SHARING_QUOTA': 'required'})),
            STRICT)
        lxd_keys.check_flavor(_flavor(**{
            'resources:CUSTOM_GPU_SHARE': '1',
            'trait:CUSTOM_GPU_SHARING_TIMESLICE': 'required'}), STRICT)
        # forbidding the other mode's trait is consistent too
        lxd_keys.check_flavor(_flavor(**dict(
            quota, **{'trait1:CUSTOM_GPU_SHARING_TIMESLICE': 'forbidden'})),
            STRICT)
        for specs, wrong in (
                (dict(quota, **{'trait1:CUSTOM_GPU_SHARING_TIMESLICE':
                                'required'}),
                 'trait1:CUSTOM_GPU_SHARING_TIMESLICE=required'),
                # its mode, but on another provider than the slot's
                (dict(quota, **{'trait:CUSTOM_GPU_SHARING_QUOTA':
                                'required'}),
                 'trait:CUSTOM_GPU_SHARING_QUOTA=required'),
                ({'resources1:CUSTOM_GPU_SHARE': '1',
                  'trait1:CUSTOM_GPU_SHARING_QUOTA': 'required'},
                 'trait1:CUSTOM_GPU_SHARING_QUOTA=required')):
            error = self.assertRaises(
                exception.FlavorExtraSpecsInconsistent,
                lxd_keys.check_flavor, _flavor(**specs), STRICT)
            self.assertIn(wrong, str(error))
