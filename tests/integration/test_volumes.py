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

"""Volumes through os-brick into real containers, on real loop devices.

The block device is a loop device over a sparse file, handed over as
os-brick's ``local`` volume type (what Cinder's LVM driver does with
``lvm_share_target`` or a local volume). Writes and reads happen inside
the container, through the device LXD made there.
"""

import json
import os
import subprocess
import uuid

import fixtures
from nova import exception as nova_exception

from tests.fixtures import block_devices
from tests.integration import base


def mapped_root(record):
    """The host uid that is root inside the (unprivileged) container."""
    idmap = json.loads(record['config']['volatile.idmap.current'])
    return [entry['Hostid'] for entry in idmap
            if entry['Isuid'] and entry['Nsid'] == 0][0]


class VolumesTest(base.DriverTestCase):

    def setUp(self):
        super(VolumesTest, self).setUp()
        self.useFixture(block_devices.BrickFixture())

    def _spawn(self, instance, block_device_info=None):
        self.driver.spawn(self.context, instance, self.tiny_image(), [],
                          None, {}, block_device_info=block_device_info)

    def _exec(self, instance, command):
        return self.project.execute(self.container_name(instance), command)

    def _devices(self, instance):
        return self.container(instance)['devices']

    def test_connector(self):
        self.flags(host='volume-host', my_block_storage_ip='127.0.0.1')
        connector = self.driver.get_volume_connector(self.make_instance())
        self.assertEqual('volume-host', connector['host'])
        self.assertEqual('127.0.0.1', connector['ip'])
        self.assertFalse(connector['multipath'])
        self.assertIn('platform', connector)

    def test_attach_write_detach_reattach_read(self):
        loop = self.useFixture(block_devices.LoopDevice())
        other = self.useFixture(block_devices.LoopDevice())
        volume_id, other_id = str(uuid.uuid4()), str(uuid.uuid4())
        info = loop.connection_info(volume_id)
        other_info = other.connection_info(other_id)
        instance = self.make_instance()
        self._spawn(instance)

        # Hot-plug two volumes into the running container.
        self.driver.attach_volume(self.context, info, instance, '/dev/vdb')
        self.driver.attach_volume(self.context, other_info, instance,
                                  '/dev/vdc')
        devices = self._devices(instance)
        self.assertEqual({'type': 'unix-block', 'source': loop.path,
                          'path': '/dev/vdb'}, devices['vol-' + volume_id])
        self.assertEqual({'type': 'unix-block', 'source': other.path,
                          'path': '/dev/vdc'}, devices['vol-' + other_id])

        # Raw writes, no file system at all.
        marker = 'nova-lxd-accel-%s' % uuid.uuid4().hex[:8]
        self._exec(instance, "printf %s | dd of=/dev/vdb bs=512 count=1 "
                             "conv=sync,fsync 2>/dev/null" % marker)
        self.assertEqual(marker.encode(), loop.read(len(marker)))

        self.driver.detach_volume(self.context, info, instance, '/dev/vdb')
        devices = self._devices(instance)
        self.assertNotIn('vol-' + volume_id, devices)
        self.assertIn('vol-' + other_id, devices)
        self.assertEqual(b'gone', self._exec(
            instance, 'test -e /dev/vdb && echo there || echo -n gone'))

        # Back at another path, the data is still there.
        self.driver.attach_volume(self.context, info, instance, '/dev/vdd')
        self.assertEqual('/dev/vdd',
                         self._devices(instance)['vol-' + volume_id]['path'])
        self.assertEqual(marker.encode(), self._exec(
            instance, 'dd if=/dev/vdd bs=512 count=1 2>/dev/null | '
                      'head -c %d' % len(marker)))

        # nova destroys with every attached volume in block_device_info.
        block_device_info = {'block_device_mapping': [
            {'connection_info': info, 'mount_device': '/dev/vdd',
             'boot_index': None},
            {'connection_info': other_info, 'mount_device': '/dev/vdc',
             'boot_index': None}]}
        self.driver.destroy(self.context, instance, None, block_device_info)
        self.assertEqual([], self.container_names())
        # The host side is the test's own loop device: still mapped,
        # released by the fixture.
        self.assertTrue(loop.mapped())

    def test_boot_volume_and_directory_mount(self):
        loop = self.useFixture(block_devices.LoopDevice())
        volume_id = str(uuid.uuid4())
        info = loop.connection_info(volume_id)
        block_device_info = {'block_device_mapping': [
            {'connection_info': info, 'mount_device': '/dev/vdb',
             'boot_index': None}]}
        instance = self.make_instance()
        self._spawn(instance, block_device_info)
        self.assertEqual({'type': 'unix-block', 'source': loop.path,
                          'path': '/dev/vdb'},
                         self._devices(instance)['vol-' + volume_id])
        self.assertEqual(b'ok', self._exec(
            instance, 'test -b /dev/vdb && echo -n ok'))

        # A file system volume, not ext4, mounted at a directory: made
        # with its root owned by the container's root so it can write.
        fs_loop = self.useFixture(block_devices.LoopDevice())
        content = self.useFixture(fixtures.TempDir()).path
        with open(os.path.join(content, 'hello.txt'), 'w') as handle:
            handle.write('dataset\n')
        owner = mapped_root(self.container(instance))
        subprocess.run(['mkfs.ext2', '-q', '-F', '-d', content, '-E',
                        'root_owner=%d:%d' % (owner, owner), fs_loop.path],
                       check=True)
        fs_id = str(uuid.uuid4())
        fs_info = fs_loop.connection_info(fs_id)
        self.driver.attach_volume(self.context, fs_info, instance,
                                  '/mnt/data')
        self.assertEqual({'type': 'disk', 'source': fs_loop.path,
                          'path': '/mnt/data'},
                         self._devices(instance)['vol-' + fs_id])
        self.assertEqual(b'dataset\n', self._exec(
            instance, 'cat /mnt/data/hello.txt'))
        self._exec(instance, 'echo written > /mnt/data/new.txt && sync')
        self.driver.detach_volume(self.context, fs_info, instance,
                                  '/mnt/data')
        self.assertEqual(b'', self._exec(instance, 'grep /mnt/data '
                                                   '/proc/mounts || true'))
        self.driver.attach_volume(self.context, fs_info, instance,
                                  '/mnt/data')
        self.assertEqual(b'written\n', self._exec(
            instance, 'cat /mnt/data/new.txt'))

        self.driver.destroy(self.context, instance, None, block_device_info)
        self.assertEqual([], self.container_names())

    def test_attach_to_stopped_container(self):
        loop = self.useFixture(block_devices.LoopDevice())
        volume_id = str(uuid.uuid4())
        info = loop.connection_info(volume_id)
        instance = self.make_instance()
        self._spawn(instance)
        self.driver.power_off(instance, timeout=5, retry_interval=1)
        self.driver.attach_volume(self.context, info, instance, '/dev/vdb')
        self.driver.power_on(self.context, instance, None)
        self.assertEqual(b'ok', self._exec(
            instance, 'test -b /dev/vdb && echo -n ok'))
        self.driver.detach_volume(self.context, info, instance, '/dev/vdb')
        self.assertNotIn('vol-' + volume_id, self._devices(instance))
        self.driver.destroy(self.context, instance, None)

    def test_boot_from_volume_is_refused(self):
        loop = self.useFixture(block_devices.LoopDevice())
        info = loop.connection_info(str(uuid.uuid4()))
        instance = self.make_instance()
        exc = self.assertRaises(
            nova_exception.InvalidBDMFormat, self._spawn, instance,
            {'block_device_mapping': [{'connection_info': info,
                                       'mount_device': '/dev/vda',
                                       'boot_index': 0}]})
        self.assertIn('cannot boot a container from a volume', str(exc))
        self.assertEqual([], self.container_names())

    def test_attach_not_a_block_device_is_refused(self):
        instance = self.make_instance()
        self._spawn(instance)
        not_block = os.path.join(
            self.useFixture(fixtures.TempDir()).path, 'file')
        open(not_block, 'w').close()
        info = {'driver_volume_type': 'local', 'serial': 'v1',
                'data': {'device_path': not_block}}
        exc = self.assertRaises(
            nova_exception.VolumeAttachFailed, self.driver.attach_volume,
            self.context, info, instance, '/dev/vdb')
        self.assertIn('not a block device', str(exc))
        self.assertNotIn('vol-v1', self._devices(instance))
        self.driver.destroy(self.context, instance, None)
