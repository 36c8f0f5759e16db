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

"""Rescue per storage pool driver, on pool records shaped as LXD's.

dir and btrfs run for real (tests/integration/test_lifecycle.py in the
integration and -btrfs environments); zfs and lvm cannot run on the CI
kernel (no zfs module, no device-mapper), so their answer is checked here:
a clear fault before anything is stopped.
"""

import fixtures
from nova import objects
import testtools

from nova_lxd_accel import exception
from nova_lxd_accel import lifecycle
from tests.fixtures import fake_lxd
from tests.unit import test_accel_spawn

UUID = '3c9b1e2a-0000-4000-8000-00000000000a'
NAME = 'nova-' + UUID


def _pool(driver, source):
    # GET /1.0/storage-pools/<name> of LXD 5.0 (metadata), trimmed
    return {'name': 'p1', 'driver': driver, 'status': 'Created',
            'config': {'source': source}, 'description': '', 'used_by': []}


class RescuePoolTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        objects.register_all()
        self.conf = test_accel_spawn.lifecycle_conf()
        self.client = fake_lxd.FakeLXDClient({
            'name': NAME, 'status': 'Running',
            'config': {'user.nova_lxd_accel.instance_uuid': UUID},
            'devices': {'root': {'type': 'disk', 'path': '/',
                                 'pool': 'p1'}}})
        self.pools = {}
        self.useFixture(fixtures.MockPatchObject(
            self.client, 'storage_pool', side_effect=self.pools.get,
            create=True))
        self.lifecycle = lifecycle.Lifecycle(
            self.client, self.conf, test_accel_spawn.FakeImages())
        self.instance = objects.Instance(uuid=UUID)

    def rescue(self):
        return self.assertRaises(
            exception.RescueFailed, self.lifecycle.rescue, None,
            self.instance, objects.ImageMeta.from_dict({}), None)

    def test_zfs_and_lvm_refused_before_anything_stops(self):
        for driver, source in (('zfs', 'tank/lxd'), ('lvm', 'vg0')):
            self.pools['p1'] = _pool(driver, source)
            error = self.rescue()
            self.assertIn('storage pool p1 uses the %s driver' % driver,
                          str(error))
            self.assertIn('rescue works on dir and btrfs pools', str(error))
        self.assertEqual('Running', self.client.get_container(NAME)['status'])
        self.assertEqual([], [c for c in self.client.calls
                              if c[0] != 'get'])

    def test_the_container_pool_not_the_default_is_read(self):
        # the root device names p1; [lxd] storage_pool is "default"
        self.pools['p1'] = _pool('zfs', 'tank/lxd')
        self.pools['default'] = _pool('dir', '/nonexistent')
        self.assertIn('uses the zfs driver', str(self.rescue()))
