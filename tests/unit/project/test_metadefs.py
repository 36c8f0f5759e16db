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

"""The Glance metadata definitions match the registered extra specs.

``etc/glance/metadefs/compute-lxd.json`` is what Horizon shows when an
operator edits a flavor's metadata: every ``lxd:`` validator must have a
property of the same type and choices, and no property may offer a key or
value the Nova API would refuse.
"""

import json
import os

from nova import exception as nova_exception
import testtools

from nova_lxd_accel.extra_specs import lxd_keys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
METADEFS = os.path.join(REPO, 'etc', 'glance', 'metadefs', 'compute-lxd.json')

JSON_TYPES = {bool: 'boolean', int: 'integer', str: 'string'}


def _load():
    with open(METADEFS, encoding='utf-8') as f:
        return json.load(f)


def _flavor_properties(namespace):
    """Full extra spec name -> metadef property, through the prefix."""
    prefixes = [a.get('prefix', '') for a in
                namespace['resource_type_associations']
                if a['name'] == 'OS::Nova::Flavor']
    out = {}
    for prefix in prefixes:
        for name, prop in namespace['properties'].items():
            out[prefix + name] = prop
    return out


class TestMetadefs(testtools.TestCase):

    def setUp(self):
        super(TestMetadefs, self).setUp()
        self.namespace = _load()
        self.properties = _flavor_properties(self.namespace)
        self.validators = {v.name: v
                           for v in lxd_keys.EXTRA_SPEC_VALIDATORS}

    def test_namespace_is_for_flavors(self):
        self.assertEqual('OS::Compute::LXD', self.namespace['namespace'])
        self.assertEqual(
            [{'name': 'OS::Nova::Flavor', 'prefix': 'lxd:'}],
            self.namespace['resource_type_associations'])
        for key in ('display_name', 'description', 'visibility'):
            self.assertTrue(self.namespace.get(key), key)

    def test_every_validator_has_a_property_and_back(self):
        self.assertEqual(sorted(self.validators), sorted(self.properties))

    def test_types_enums_and_minimums_match(self):
        for name, validator in self.validators.items():
            prop = self.properties[name]
            value = validator.value
            self.assertEqual(JSON_TYPES[value['type']], prop['type'], name)
            self.assertEqual(value.get('enum'), prop.get('enum'), name)
            self.assertEqual(value.get('min'), prop.get('minimum'), name)
            self.assertEqual(value.get('max'), prop.get('maximum'), name)
            self.assertTrue(prop.get('title'), name)
            self.assertTrue(prop.get('description'), name)

    def test_values_horizon_offers_pass_the_nova_api(self):
        for name, prop in self.properties.items():
            validator = self.validators[name]
            candidates = {
                'boolean': ['true', 'false'],
                'integer': [str(prop.get('minimum', 1))],
                'string': prop.get('enum', []),
            }[prop['type']]
            if 'default' in prop:
                default = prop['default']
                candidates.append(str(default).lower()
                                  if isinstance(default, bool)
                                  else str(default))
            for value in candidates:
                validator.validate(name, value)     # raises when refused

    def test_below_the_minimum_is_refused_by_nova_too(self):
        for name, prop in self.properties.items():
            if 'minimum' in prop:
                self.assertRaises(
                    nova_exception.ValidationError,
                    self.validators[name].validate, name,
                    str(prop['minimum'] - 1))
