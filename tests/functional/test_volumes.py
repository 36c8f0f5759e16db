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

"""Cinder volumes through the real Nova API, on real loop devices.

nova's CinderFixture plays Cinder; its attachments hand out os-brick
``local`` connection_info naming a loop device of this machine, so the
compute manager's real path runs: get_volume_connector ->
attachment_update -> attach_volume, and detach_volume -> attachment_delete.
"""

import uuid

from nova.tests import fixtures as nova_fixtures

from tests.fixtures import block_devices
from tests.functional import base


class VolumeAttachTest(block_devices.LocalVolumes,
                       base.LXDFunctionalTestCase):

    def setUp(self):
        super(VolumeAttachTest, self).setUp()
        self.useFixture(block_devices.BrickFixture())
        self.flavor_id = self._create_flavor(
            memory_mb=128, vcpu=1, disk=0, ephemeral=0, name='lxd.vol')

    def _exec(self, server, command):
        return block_devices.lxc_exec(
            self.lxd.name, 'nova-%s' % server['id'], command)

    def test_attach_detach_delete(self):
        loop = self.useFixture(block_devices.LoopDevice())
        volume_id = self._local_volume(loop)
        server = self._create_server(image_uuid=self.image_id,
                                     flavor_id=self.flavor_id,
                                     networks='none')

        self._attach_volume(server, volume_id)
        attachment = self.api.get_server_volume(server['id'], volume_id)
        mountpoint = attachment['device']
        self.assertTrue(mountpoint.startswith('/dev/'), mountpoint)
        device = self.container_of(server)['devices']['vol-' + volume_id]
        self.assertEqual({'type': 'unix-block', 'source': loop.path,
                          'path': mountpoint}, device)

        marker = 'through-nova-%s' % uuid.uuid4().hex[:8]
        self._exec(server, 'printf %s | dd of=%s bs=512 count=1 '
                           'conv=sync,fsync 2>/dev/null' %
                   (marker, mountpoint))
        self.assertEqual(marker.encode(), loop.read(len(marker)))

        self.api.delete_server_volume(server['id'], volume_id)
        self._wait_for_volume_detach(server['id'], volume_id)
        self.assertNotIn('vol-' + volume_id,
                         self.container_of(server)['devices'])
        self.assertEqual(b'gone', self._exec(
            server, 'test -e %s && echo there || echo -n gone' %
            mountpoint))

        # Attached again, then the server is deleted with it attached.
        self.api.post_server_volume(
            server['id'], {'volumeAttachment': {'volumeId': volume_id}})
        self.notifier.wait_for_versioned_notifications(
            'instance.volume_attach.end', n_events=2)
        mountpoint = self.api.get_server_volume(
            server['id'], volume_id)['device']
        self.assertEqual(marker.encode(), self._exec(
            server, 'dd if=%s bs=512 count=1 2>/dev/null | head -c %d' %
            (mountpoint, len(marker))))
        self._delete_server(server)
        self.assertEqual([], self.container_names())
        usages = self._get_provider_usages(
            self._get_provider_uuid_by_host('compute1'))
        self.assertEqual({}, {rc: n for rc, n in usages.items() if n})

    def test_boot_from_volume_is_refused(self):
        server = self._build_server(flavor_id=self.flavor_id,
                                    networks='none')
        server['imageRef'] = ''
        server['block_device_mapping_v2'] = [{
            'boot_index': 0, 'uuid': nova_fixtures.CinderFixture.
            IMAGE_BACKED_VOL, 'source_type': 'volume',
            'destination_type': 'volume'}]
        server = self.api.post_server({'server': server})
        server = self._wait_for_state_change(server, 'ERROR')
        self.assertIn('cannot boot a container from a volume',
                      server['fault']['message'])
        self.assertEqual([], self.container_names())
