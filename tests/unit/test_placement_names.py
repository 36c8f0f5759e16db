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

"""Placement's names for the accelerators: valid, distinct, managed.

Placement refuses a custom resource class or trait that does not match
``CUSTOM_[A-Z0-9_]+``; ``is_managed_trait`` decides which traits the first
update of a process removes, so every trait the reporter sets for the sample
hosts of tests/unit/accel/samples must be managed, and no operator's own
trait.
"""

import re

import fixtures
import os_resource_classes
import os_traits
import testtools

from nova_lxd_accel.accel import units
from nova_lxd_accel.extra_specs import lxd_keys
from nova_lxd_accel.extra_specs import sharing_modes
from nova_lxd_accel import placement_names as names
from tests.fixtures import gpu_hosts

#: Placement's schema for a custom resource class or trait name.
CUSTOM_NAME = re.compile(r'CUSTOM_[A-Z0-9_]{1,248}')

RESOURCE_CLASSES = (names.RC_INFINIBAND_VF, names.RC_INFINIBAND_PORT,
                    names.SHARE_RC, names.MEMORY_RC)
TRAITS = (names.TRAIT_SHARED, names.TRAIT_SHARING_QUOTA,
          names.TRAIT_SHARING_TIMESLICE, names.TRAIT_UNHEALTHY)


def _reported(resources, mig_text='', **conf):
    """{resource classes}, {traits} of the providers of a sample host."""
    _, tree = gpu_hosts.report(resources, mig_text,
                               gpu_hosts.make_conf(**conf))
    rcs, traits = set(), set()
    for inventory, provider_traits in gpu_hosts.summary(tree).values():
        rcs.update(inventory)
        traits.update(provider_traits)
    return rcs, traits


def _sample_hosts():
    h100_and_ib = dict(
        gpu_hosts.load_json('handmade-lxd-h100-mig-host.json'),
        network=gpu_hosts.load_json(
            'maas-lp1939456-connectx3-infiniband.json')['network'])
    mig = gpu_hosts.load_text('nvsmi-h100-80gb-mig-4slices-L.txt')
    return [
        _reported(h100_and_ib, mig),
        _reported(h100_and_ib, mig, shared_gpus=['0000:00:09.0:4:quota']),
        _reported(h100_and_ib, mig, shared_gpus=['0000:00:09.0:2']),
        _reported(gpu_hosts.load_json('handmade-lxd-connectx6-ib-vfs.json')),
        _reported(gpu_hosts.load_json(
            'lxd-9201-virtiogpu-gt730-nvidia-subobject-gpu.json')),
    ]


class NamesTest(testtools.TestCase):

    def test_names_are_valid_custom_placement_names(self):
        for name in RESOURCE_CLASSES + TRAITS:
            self.assertIsNotNone(CUSTOM_NAME.fullmatch(name), name)
            self.assertTrue(os_traits.is_custom(name), name)

    def test_no_name_is_a_standard_one_or_used_twice(self):
        self.assertEqual([], [n for n in RESOURCE_CLASSES
                              if n in os_resource_classes.STANDARDS])
        self.assertEqual([], [n for n in TRAITS
                              if n in os_traits.get_traits()])
        self.assertEqual(len(RESOURCE_CLASSES + TRAITS),
                         len(set(RESOURCE_CLASSES + TRAITS)))

    def test_the_extra_spec_checks_use_the_same_memory_class(self):
        self.assertEqual(names.MEMORY_RC, lxd_keys.GPU_MEMORY_RC)

    def test_slots_and_ports_are_bound_but_memory_is_not(self):
        # memory is a quantity on a shared GPU, never a unit of its own
        for rc in (names.SHARE_RC, names.RC_INFINIBAND_VF,
                   names.RC_INFINIBAND_PORT):
            self.assertTrue(units.is_accelerator_class(rc), rc)
        self.assertFalse(units.is_accelerator_class(names.MEMORY_RC))


class ManagedTraitsTest(testtools.TestCase):

    def setUp(self):
        super(ManagedTraitsTest, self).setUp()
        # the reporter warns about the sample shared GPU's unknown memory
        self.useFixture(fixtures.FakeLogger())

    def test_the_drivers_own_traits_are_managed(self):
        for trait in TRAITS + tuple(sharing_modes.MODE_TRAITS.values()):
            self.assertTrue(names.is_managed_trait(trait), trait)
        for trait in (names.TRAIT_SHARING_QUOTA,
                      names.TRAIT_SHARING_TIMESLICE):
            self.assertTrue(trait.startswith(names.SHARING_TRAIT_PREFIX))

    def test_every_custom_trait_reported_for_sample_hosts_is_managed(self):
        seen = set()
        for _rcs, traits in _sample_hosts():
            custom = {t for t in traits if os_traits.is_custom(t)}
            self.assertEqual(set(), {
                t for t in custom
                if not names.is_managed_trait(t)})
            seen.update(custom)
        # the samples do reach the sharing and the IB families
        self.assertLessEqual({names.TRAIT_SHARED, names.TRAIT_SHARING_QUOTA,
                              names.TRAIT_SHARING_TIMESLICE}, seen)
        self.assertTrue([t for t in seen if t.startswith('CUSTOM_IB_')])

    def test_every_custom_class_reported_is_a_known_one(self):
        for rcs, _traits in _sample_hosts():
            self.assertEqual(set(), {
                rc for rc in rcs if os_resource_classes.is_custom(rc) and
                rc not in RESOURCE_CLASSES and
                not rc.startswith(units.MIG_PREFIX)})

    def test_operators_and_standard_traits_are_left_alone(self):
        for trait in ('CUSTOM_RACK_A1', 'CUSTOM_GPU_RESERVED_FOR_LAB',
                      'CUSTOM_IB_FABRIC_EAST', 'CUSTOM_CUDA_12',
                      os_traits.COMPUTE_STATUS_DISABLED, 'OWNER_NOVA',
                      'HW_GPU_API_CUDA_V12_0',
                      # the driver's whole names are no prefixes
                      'CUSTOM_GPU_SHARED_TEAM_A', 'CUSTOM_GPU_UNHEALTHY_X'):
            self.assertFalse(names.is_managed_trait(trait), trait)
