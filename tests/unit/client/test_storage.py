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

"""Tests of nova_lxd_accel.client.storage: custom storage volumes.

The requests LXD 5.0 and Incus 6.0 both take
(``/1.0/storage-pools/<pool>/volumes/custom``), answered by
``requests-mock`` as the daemon answers them.
"""

import testtools

from nova_lxd_accel.client import storage
from nova_lxd_accel import exception
from tests.fixtures import lxd_responses

VOLUMES = '/1.0/storage-pools/default/volumes/custom'
VOLUME = VOLUMES + '/nova-x-ephemeral0'


class StorageClientTest(testtools.TestCase):

    def setUp(self):
        super(StorageClientTest, self).setUp()
        conf, self.mock = lxd_responses.mocked_daemon(self)
        self.client = storage.StorageClient(conf)

    def test_create_is_a_filesystem_volume_with_its_size(self):
        self.mock.post(VOLUMES, json=lxd_responses.sync({}))
        self.client.create_custom_volume('default', 'nova-x-ephemeral0',
                                         {'size': '1GiB'})
        self.assertEqual({'name': 'nova-x-ephemeral0', 'type': 'custom',
                          'content_type': 'filesystem',
                          'config': {'size': '1GiB'}},
                         self.mock.last_request.json())

    def test_grow_patches_the_size(self):
        self.mock.patch(VOLUME, json=lxd_responses.sync({}))
        self.client.update_custom_volume('default', 'nova-x-ephemeral0',
                                         {'size': '2GiB'})
        self.assertEqual({'config': {'size': '2GiB'}},
                         self.mock.last_request.json())

    def test_missing_volume_reads_as_none_and_deletes_as_false(self):
        gone = lxd_responses.error(404, 'Storage volume not found')
        self.mock.get(VOLUME, status_code=404, json=gone)
        self.mock.delete(VOLUME, status_code=404, json=gone)
        self.assertIsNone(self.client.get_custom_volume(
            'default', 'nova-x-ephemeral0'))
        self.assertFalse(self.client.delete_custom_volume(
            'default', 'nova-x-ephemeral0'))

    def test_a_refused_delete_names_the_volume(self):
        self.mock.delete(VOLUME, status_code=400, json=lxd_responses.error(
            400, 'Storage volume is still in use'))
        error = self.assertRaises(
            exception.LXDOperationFailed, self.client.delete_custom_volume,
            'default', 'nova-x-ephemeral0')
        self.assertIn('nova-x-ephemeral0 on pool default', str(error))
        self.assertIn('still in use', str(error))
