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

"""Spawn re-checks lxd: extra specs before it makes anything in LXD.

A flavor made with compute API microversion < 2.86 (the CLI's default
2.61) was never validated by the Nova API.
"""

from nova import exception as nova_exception

from tests.integration import base


class SpawnChecksExtraSpecsTest(base.DriverTestCase):

    def _images(self):
        return self.project.client.api.images.get().json()['metadata']

    def _refused(self, specs):
        downloads = []
        self.glance.download = lambda *a, **kw: downloads.append(a)
        image = self.tiny_image()
        instance = self.make_instance(extra_specs=specs)
        error = self.assertRaises(nova_exception.NovaException,
                                  self.driver.spawn, self.context, instance,
                                  image, [], None, {})
        # Nothing was made, not even the image downloaded.
        self.assertEqual([], self.container_names())
        self.assertEqual([], self._images())
        self.assertEqual([], downloads)
        return str(error)

    def test_out_of_range_process_limit(self):
        message = self._refused({'lxd:processes': '99999999999'})
        self.assertIn('lxd:processes=99999999999', message)
        self.assertIn('greater than the max', message)

    def test_unknown_key_and_bad_boolean(self):
        self.assertIn('unknown key', self._refused({'lxd:raw.lxc': 'x'}))
        self.assertIn('lxd:nesting=yes please',
                      self._refused({'lxd:nesting': 'yes please'}))

    def test_operator_forbidden(self):
        self.assertIn('allow_privileged_containers',
                      self._refused({'lxd:privileged': 'true'}))
        self.assertIn('allow_nesting', self._refused({'lxd:nesting': '1'}))
