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

"""The ephemeral disk through nova's API, as a real LXD custom volume.

A flavor's ephemeral_gb is a custom volume of the instance's pool, mounted
at /mnt; a same-host resize grows it, a shrink is refused; it goes with
the server, and with a build that fails.
"""

import fixtures

from nova_lxd_accel.client import instances
from nova_lxd_accel import exception
from tests.fixtures import lxd_fixtures
from tests.functional import base


class EphemeralDiskTest(base.LXDFunctionalTestCase):

    def setUp(self):
        self.flags(allow_resize_to_same_host=True)
        super(EphemeralDiskTest, self).setUp()
        self.pool = lxd_fixtures.pool_name()
        self.eph1 = self._create_flavor(memory_mb=128, vcpu=1, disk=0,
                                        ephemeral=1, name='lxd.eph1')
        self.eph2 = self._create_flavor(memory_mb=128, vcpu=1, disk=0,
                                        ephemeral=2, name='lxd.eph2')

    def volume_name(self, server):
        return 'nova-%s-ephemeral0' % server['id']

    def volume(self, server):
        return self.lxd.custom_volume(self.pool, self.volume_name(server))

    def _boot(self):
        return self._create_server(image_uuid=self.image_id,
                                   flavor_id=self.eph1, networks='none')

    def test_boot_grow_refuse_shrink_delete(self):
        server = self._boot()
        name = 'nova-%s' % server['id']
        volume = self.volume(server)
        self.assertEqual('1GiB', volume['config']['size'])
        self.assertEqual(['/1.0/instances/%s?project=%s' % (
            name, self.lxd.name)], volume['used_by'])
        self.assertEqual(
            {'type': 'disk', 'pool': self.pool, 'path': '/mnt',
             'source': self.volume_name(server)},
            self.container_of(server)['devices']['ephemeral0'])
        # mounted at /mnt in the running container
        self.assertIn(b' /mnt ', self.lxd.execute(name, 'cat /proc/mounts'))

        server = self._resize_server(server, self.eph2)
        self.assertEqual('2GiB', self.volume(server)['config']['size'])
        server = self._confirm_resize(server)
        self.assertEqual('2GiB', self.volume(server)['config']['size'])
        self.assertIn(b' /mnt ', self.lxd.execute(name, 'cat /proc/mounts'))

        # a smaller ephemeral disk is refused; the server stays as it was
        self.api.post_server_action(server['id'],
                                    {'resize': {'flavorRef': self.eph1}})
        self._wait_for_migration_status(server, ['error'])
        server = self._wait_for_state_change(server, 'ACTIVE')
        self.assertEqual('Running', self.container_of(server)['status'])
        self.assertEqual('2GiB', self.volume(server)['config']['size'])

        self._delete_server(server)
        self.assertEqual([], self.container_names())
        self.assertIsNone(self.volume(server))

    def test_revert_keeps_the_volume_of_the_kept_original(self):
        # nova destroys the resized container on revert while the kept
        # original still mounts the volume
        server = self._boot()
        name = 'nova-%s' % server['id']
        self.lxd.execute(name, 'echo kept > /mnt/data')
        server = self._resize_server(server, self.eph2)
        server = self._revert_resize(server)
        self.assertEqual('Running', self.container_of(server)['status'])
        # grown by the resize, and not shrunk back: kept, with its data
        self.assertEqual('2GiB', self.volume(server)['config']['size'])
        self.assertEqual(b'kept\n', self.lxd.execute(name, 'cat /mnt/data'))
        self._delete_server(server)
        self.assertIsNone(self.volume(server))

    def test_failed_build_leaves_no_volume(self):
        made = []
        create = instances.LXDClient.create_custom_volume

        def create_and_note(client, pool, name, config):
            create(client, pool, name, config)
            made.append(name)

        change_state = instances.LXDClient.change_state

        def refuse_start(client, name, action, force=False, timeout=None):
            if action != 'start':
                return change_state(client, name, action, force, timeout)
            raise exception.LXDOperationFailed(
                action=action, target='instance %s' % name,
                reason='refused by the test')

        self.useFixture(fixtures.MonkeyPatch(
            'nova_lxd_accel.client.instances.LXDClient.'
            'create_custom_volume', create_and_note))
        self.useFixture(fixtures.MonkeyPatch(
            'nova_lxd_accel.client.instances.LXDClient.change_state',
            refuse_start))
        server = self._create_server(image_uuid=self.image_id,
                                     flavor_id=self.eph1, networks='none',
                                     expected_state='ERROR')
        self.assertIn('refused by the test', server['fault']['message'])
        self.assertEqual([self.volume_name(server)], made)
        self.assertEqual([], self.container_names())
        self.assertEqual([], self.lxd.custom_volume_names(self.pool))
