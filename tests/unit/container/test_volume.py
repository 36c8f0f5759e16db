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

"""A connected Cinder volume as an LXD device: its name and its kind.

The connection_info dicts are shaped as Cinder's ``os-initialize_connection``
answer that nova keeps in the block device mapping. The basics (serial,
``/dev`` path, directory, refused mount points) are in
tests/unit/hostside/test_volumes.py; here are the precedence, naming and
message rules that detach and the operator rely on.
"""

import re

from nova import exception as nova_exception
import testtools

from nova_lxd_accel.container import volume

VOL = '0b6e1c4a-8f8e-4a56-8f27-2a9cfbb7a0d1'
VOL2 = '5d1f6a3e-2c4b-4f0e-9a1e-6d1a2b3c4d5e'

#: What LXD accepts as a device name (no '/', no spaces).
LXD_DEVICE_NAME = r'[A-Za-z0-9_.-]+'


def _iscsi_info(serial=VOL, data_volume_id=VOL):
    info = {'driver_volume_type': 'iscsi',
            'data': {'target_iqn': 'iqn.2010-10.org.openstack:volume-x',
                     'target_portal': '192.0.2.20:3260', 'target_lun': 1,
                     'target_discovered': False, 'access_mode': 'rw'}}
    if serial:
        info['serial'] = serial
    if data_volume_id:
        info['data']['volume_id'] = data_volume_id
    return info


class VolumeIdTest(testtools.TestCase):

    def test_serial_wins_over_the_drivers_data(self):
        # nova sets serial to the volume id it attached; a driver's data
        # may carry another id (a migrated volume keeps its old one)
        self.assertEqual(VOL, volume.volume_id_of(
            _iscsi_info(serial=VOL, data_volume_id=VOL2)))

    def test_data_then_top_level_volume_id(self):
        self.assertEqual(VOL2, volume.volume_id_of(
            _iscsi_info(serial=None, data_volume_id=VOL2)))
        self.assertEqual(VOL, volume.volume_id_of(
            {'driver_volume_type': 'rbd', 'volume_id': VOL, 'data': None}))

    def test_no_id_at_all(self):
        self.assertIsNone(volume.volume_id_of(
            _iscsi_info(serial=None, data_volume_id=None)))
        self.assertIsNone(volume.volume_id_of({}))


class DeviceNameTest(testtools.TestCase):

    def test_attach_and_detach_find_the_same_device(self):
        # detach may get connection_info refreshed by Cinder, whatever the
        # mount point was: the name depends on the volume id alone
        attached = volume.device_name(_iscsi_info(), '/dev/vdb')
        detached = volume.device_name(
            _iscsi_info(serial=None, data_volume_id=VOL))
        self.assertEqual('vol-' + VOL, attached)
        self.assertEqual(attached, detached)

    def test_mount_point_names_are_valid_lxd_device_names(self):
        info = _iscsi_info(serial=None, data_volume_id=None)
        for mountpoint, name in (('/dev/vdb', 'vol-dev_vdb'),
                                 ('/mnt/my data', 'vol-mnt_my_data'),
                                 ('/srv/a:b/', 'vol-srv_a_b'),
                                 ('/opt/v1.2-x', 'vol-opt_v1.2-x')):
            self.assertEqual(name, volume.device_name(info, mountpoint))
            self.assertIsNotNone(re.fullmatch(LXD_DEVICE_NAME, name))

    def test_no_id_and_no_mount_point_says_why(self):
        error = self.assertRaises(
            nova_exception.VolumeAttachFailed, volume.device_name,
            _iscsi_info(serial=None, data_volume_id=None), '')
        self.assertIn('connection_info names no volume', str(error))


class LxdDeviceTest(testtools.TestCase):

    def test_dev_mount_point_is_the_raw_block_device(self):
        self.assertEqual(
            {'type': 'unix-block', 'source': '/dev/sdc',
             'path': '/dev/xvdc'},
            volume.lxd_device('/dev/sdc', '/dev/xvdc', 'vol-' + VOL))

    def test_only_a_dotdot_component_is_refused(self):
        # '..' as a path component escapes the directory; inside a name
        # it is just a name
        self.assertEqual(
            {'type': 'disk', 'source': '/dev/sdc',
             'path': '/srv/data..old'},
            volume.lxd_device('/dev/sdc', '/srv/data..old', 'vol-' + VOL))
        for bad in ('/srv/..', '/../srv', '/srv/a/../../etc'):
            self.assertRaises(nova_exception.VolumeAttachFailed,
                              volume.lxd_device, '/dev/sdc', bad,
                              'vol-' + VOL)

    def test_refusal_names_the_volume_and_the_mount_point(self):
        name = volume.device_name(_iscsi_info())
        error = self.assertRaises(nova_exception.VolumeAttachFailed,
                                  volume.lxd_device, '/dev/sdc',
                                  'data/dir', name)
        message = str(error)
        self.assertIn('Volume %s could not be attached' % VOL, message)
        self.assertIn("'data/dir'", message)
        self.assertIn('neither a /dev path nor an absolute directory',
                      message)
        # nova's API maps it to a client error, not a server fault
        self.assertEqual(400, error.code)
