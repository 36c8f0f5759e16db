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

"""Volume attach/detach logic, with os-brick and the LXD seam faked.

The real thing (loop devices, LXD, nova's compute manager) is in
tests/integration/test_volumes.py and tests/functional/test_volumes.py.
"""

from unittest import mock

from nova import exception as nova_exception
from nova import objects
from oslo_config import cfg
import testtools

from nova_lxd_accel import conf
from nova_lxd_accel.container import builder
from nova_lxd_accel.container import identity
from nova_lxd_accel.container import volume
from nova_lxd_accel import exception
from nova_lxd_accel import host as lxd_host
from nova_lxd_accel.hostside import volumes
from tests.fixtures import fake_lxd

UUID = '7a1c5f0e-4c0b-4a55-9d59-3f7c5d0f8e21'
NAME = 'nova-' + UUID
VOL = '0b6e1c4a-8f8e-4a56-8f27-2a9cfbb7a0d1'
VOL2 = '5d1f6a3e-2c4b-4f0e-9a1e-6d1a2b3c4d5e'


def _info(volume_id=VOL, path='/dev/loop7', protocol='local'):
    return {'driver_volume_type': protocol, 'serial': volume_id,
            'data': {'device_path': path, 'volume_id': volume_id}}


class VolumesTestCase(testtools.TestCase):

    def setUp(self):
        super(VolumesTestCase, self).setUp()
        self.conf = cfg.ConfigOpts()
        conf.register_opts(self.conf)
        self.conf.register_opts([
            cfg.StrOpt('host', default='cmp1'),
            cfg.StrOpt('my_block_storage_ip', default='192.0.2.10')])
        self.conf([], default_config_files=[])
        self.instance = objects.Instance(uuid=UUID)
        self.client = fake_lxd.FakeLXDClient({
            'name': NAME, 'status': 'Running', 'config': {'a': 'b'},
            'devices': {}, 'profiles': ['default']})
        self.volumes = volumes.Volumes(self.client, self.conf, lxd_host.Host(
            self.client, self.conf, identity.Owner(host='h')).guest)
        self.brick = mock.Mock()
        self.brick.connect_volume.side_effect = (
            lambda data: {'type': 'local', 'path': data['device_path']})
        factory = self.useFixture_patch(
            'os_brick.initiator.connector.InitiatorConnector.factory')
        factory.return_value = self.brick
        self.factory = factory
        self.is_block = True
        self.useFixture_patch(
            'nova_lxd_accel.hostside.volumes._not_a_block_device',
            side_effect=self._not_block)

    def useFixture_patch(self, target, **kwargs):
        patcher = mock.patch(target, **kwargs)
        self.addCleanup(patcher.stop)
        return patcher.start()

    def _not_block(self, path):
        return None if self.is_block else 'which is not a block device'

    def devices(self):
        return self.client.records[NAME]['devices']


class NamingTest(testtools.TestCase):

    def test_device_name_from_serial_or_data(self):
        self.assertEqual('vol-' + VOL, volume.device_name(_info()))
        info = _info()
        del info['serial']
        self.assertEqual('vol-' + VOL, volume.device_name(info))

    def test_device_name_without_volume_id_uses_mountpoint(self):
        info = {'driver_volume_type': 'local', 'data': {}}
        self.assertEqual(
            'vol-dev_vdb', volume.device_name(info, '/dev/vdb'))
        self.assertRaises(nova_exception.VolumeAttachFailed,
                          volume.device_name, info)

    def test_dev_path_is_unix_block(self):
        self.assertEqual(
            {'type': 'unix-block', 'source': '/dev/sdx', 'path': '/dev/vdb'},
            volume.lxd_device('/dev/sdx', '/dev/vdb', 'vol-x'))
        self.assertEqual(
            {'type': 'unix-block', 'source': '/dev/sdx',
             'path': '/dev/vol-x'},
            volume.lxd_device('/dev/sdx', None, 'vol-x'))

    def test_directory_is_disk_mount(self):
        self.assertEqual(
            {'type': 'disk', 'source': '/dev/sdx', 'path': '/srv/data'},
            volume.lxd_device('/dev/sdx', '/srv/data', 'vol-x'))

    def test_bad_mountpoints_are_refused(self):
        for bad in ('vdb', 'srv/data', '/srv/../etc'):
            self.assertRaises(nova_exception.VolumeAttachFailed,
                              volume.lxd_device, '/dev/sdx', bad, 'vol-x')

    def test_capabilities(self):
        from nova_lxd_accel import driver
        self.assertFalse(driver.LXDDriver.capabilities['supports_multiattach'])
        self.assertFalse(
            driver.LXDDriver.capabilities['supports_extend_volume'])


class ConnectorTest(VolumesTestCase):

    @mock.patch('os_brick.initiator.connector.get_connector_properties')
    def test_connector_like_libvirt(self, props):
        props.return_value = {'host': 'cmp1', 'ip': '192.0.2.10'}
        self.assertEqual(props.return_value,
                         self.volumes.connector(self.instance))
        root_helper, ip, multipath, enforce = props.call_args[0]
        self.assertIn('nova-rootwrap', root_helper)
        self.assertEqual('192.0.2.10', ip)
        self.assertFalse(multipath)
        self.assertEqual('cmp1', props.call_args[1]['host'])

    def test_connector_per_protocol_is_cached(self):
        self.volumes.attach(None, _info(), self.instance, '/dev/vdb')
        self.volumes.attach(None, _info(VOL2), self.instance, '/dev/vdc')
        self.assertEqual(1, self.factory.call_count)
        self.assertEqual('LOCAL', self.factory.call_args[0][0])

    def test_unknown_protocol(self):
        self.factory.side_effect = ValueError('Invalid InitiatorConnector '
                                              'protocol specified NOPE')
        exc = self.assertRaises(
            nova_exception.VolumeAttachFailed, self.volumes.attach, None,
            _info(protocol='nope'), self.instance, '/dev/vdb')
        self.assertIn('cannot connect NOPE volumes', str(exc))
        self.assertEqual({}, self.devices())


class AttachTest(VolumesTestCase):

    def test_attach_running_container(self):
        self.volumes.attach(None, _info(), self.instance, '/dev/vdb')
        self.brick.connect_volume.assert_called_once_with(
            {'device_path': '/dev/loop7', 'volume_id': VOL})
        # one ETag-guarded read-modify-write of the container
        self.assertEqual([('put', NAME)],
                         [call[:2] for call in self.client.calls])
        self.assertEqual({'vol-' + VOL: {
            'type': 'unix-block', 'source': '/dev/loop7',
            'path': '/dev/vdb'}}, self.client.calls[0][2]['devices'])

    def test_attach_keeps_other_devices(self):
        self.client.records[NAME]['devices']['eth0'] = {'type': 'nic'}
        self.volumes.attach(None, _info(), self.instance, '/srv/data')
        self.assertEqual({'eth0': {'type': 'nic'}, 'vol-' + VOL: {
            'type': 'disk', 'source': '/dev/loop7', 'path': '/srv/data'}},
            self.devices())

    def test_encrypted_volume_refused_before_connecting(self):
        self.assertRaises(
            nova_exception.VolumeEncryptionNotSupported, self.volumes.attach,
            None, _info(), self.instance, '/dev/vdb',
            encryption={'provider': 'luks'})
        info = _info()
        info['data']['encrypted'] = True
        self.assertRaises(
            nova_exception.VolumeEncryptionNotSupported, self.volumes.attach,
            None, info, self.instance, '/dev/vdb')
        self.brick.connect_volume.assert_not_called()

    def test_no_container(self):
        self.client.records.clear()
        self.assertRaises(exception.ContainerNotFound, self.volumes.attach,
                          None, _info(), self.instance, '/dev/vdb')
        self.brick.connect_volume.assert_not_called()

    def test_not_a_block_device_is_disconnected(self):
        self.is_block = False
        exc = self.assertRaises(
            nova_exception.VolumeAttachFailed, self.volumes.attach, None,
            _info(), self.instance, '/dev/vdb')
        self.assertIn('not a block device', str(exc))
        self.assertEqual(1, self.brick.disconnect_volume.call_count)
        self.assertEqual({}, self.devices())

    def test_lxd_refusal_disconnects(self):
        self.client.fail('put_container', exception.LXDOperationFailed(
            action='update', target=NAME, reason='Invalid devices'))
        exc = self.assertRaises(
            nova_exception.VolumeAttachFailed, self.volumes.attach, None,
            _info(), self.instance, '/dev/vdb')
        self.assertIn('Invalid devices', str(exc))
        self.brick.disconnect_volume.assert_called_once_with(
            {'device_path': '/dev/loop7', 'volume_id': VOL},
            {'type': 'local', 'path': '/dev/loop7'})

    def test_already_attached(self):
        self.volumes.attach(None, _info(), self.instance, '/dev/vdb')
        self.assertRaises(nova_exception.VolumeAttachFailed,
                          self.volumes.attach, None, _info(), self.instance,
                          '/dev/vdc')
        self.assertEqual('/dev/vdb', self.devices()['vol-' + VOL]['path'])


class DetachTest(VolumesTestCase):

    def setUp(self):
        super(DetachTest, self).setUp()
        self.volumes.attach(None, _info(), self.instance, '/dev/vdb')
        self.volumes.attach(None, _info(VOL2), self.instance, '/dev/vdc')
        self.client.calls = []

    def test_detach_removes_only_its_device(self):
        self.volumes.detach(None, _info(), self.instance, '/dev/vdb')
        self.assertEqual(['vol-' + VOL2], list(self.devices()))
        self.assertEqual('put', self.client.calls[0][0])
        self.assertEqual({'a': 'b'}, self.client.records[NAME]['config'])
        self.brick.disconnect_volume.assert_called_once_with(
            {'device_path': '/dev/loop7', 'volume_id': VOL}, None)

    def test_detach_finds_device_by_path(self):
        devices = self.devices()
        devices['vol-manual'] = devices.pop('vol-' + VOL)
        info = {'driver_volume_type': 'local',
                'data': {'device_path': '/dev/loop7'}}
        self.volumes.detach(None, info, self.instance, '/dev/vdb')
        self.assertEqual(['vol-' + VOL2], list(self.devices()))

    def test_detach_missing_device_still_disconnects(self):
        self.volumes.detach(None, _info('other'), self.instance, '/dev/vdz')
        self.assertEqual([], self.client.calls)
        self.assertEqual(1, self.brick.disconnect_volume.call_count)

    def test_detach_container_gone_still_disconnects(self):
        self.client.records.clear()
        self.volumes.detach(None, _info(), self.instance, '/dev/vdb')
        self.assertEqual(1, self.brick.disconnect_volume.call_count)

    def test_lxd_refusal_keeps_host_side(self):
        self.client.fail('put_container', exception.LXDOperationFailed(
            action='update', target=NAME, reason='busy'))
        self.assertRaises(nova_exception.DeviceDetachFailed,
                          self.volumes.detach, None, _info(), self.instance,
                          '/dev/vdb')
        self.brick.disconnect_volume.assert_not_called()


class BootTest(VolumesTestCase):

    def _bdi(self, *bdms):
        return {'block_device_mapping': list(bdms)}

    def _devices(self, block_device_info):
        volumes = self.volumes.connect_boot_volumes(None, self.instance,
                                                    block_device_info)
        return builder.volumes(
            self.instance, None, None, None,
            builder.HostSide(volumes=volumes))['devices']

    def test_boot_devices_skip_root_and_connect_the_rest(self):
        devices = self._devices(self._bdi(
            {'boot_index': 0, 'connection_info': _info('root'),
             'mount_device': '/dev/vda'},
            {'boot_index': None, 'connection_info': _info(),
             'mount_device': '/dev/vdb'},
            {'boot_index': 1, 'connection_info': _info(VOL2, '/dev/sdc'),
             'mount_device': '/data'}))
        self.assertEqual({
            'vol-' + VOL: {'type': 'unix-block', 'source': '/dev/loop7',
                           'path': '/dev/vdb'},
            'vol-' + VOL2: {'type': 'disk', 'source': '/dev/sdc',
                            'path': '/data'}}, devices)
        self.assertEqual(2, self.brick.connect_volume.call_count)

    def test_no_block_devices(self):
        self.assertEqual({}, self._devices(None))
        self.assertEqual({}, self._devices({'block_device_mapping': []}))

    def test_failure_disconnects_those_connected(self):
        self.brick.connect_volume.side_effect = [
            {'path': '/dev/loop7'}, RuntimeError('iscsi login failed')]
        self.assertRaises(RuntimeError, self.volumes.connect_boot_volumes,
                          None, self.instance, self._bdi(
                              {'connection_info': _info(),
                               'mount_device': '/dev/vdb'},
                              {'connection_info': _info(VOL2),
                               'mount_device': '/dev/vdc'}))
        self.brick.disconnect_volume.assert_called_once_with(
            _info()['data'], None)

    def test_disconnect_all_skips_root_and_goes_on_after_errors(self):
        self.brick.disconnect_volume.side_effect = [RuntimeError('x'), None]
        self.volumes.disconnect_all(self.instance, self._bdi(
            {'boot_index': 0, 'connection_info': _info('root')},
            {'connection_info': _info()},
            {'connection_info': None},
            {'connection_info': _info(VOL2)}))
        self.assertEqual(2, self.brick.disconnect_volume.call_count)
        self.volumes.disconnect_all(self.instance, None)


class BlockDeviceCheckTest(testtools.TestCase):

    def test_not_a_block_device(self):
        self.assertIn('not a block device',
                      volumes._not_a_block_device('/dev/null'))
        self.assertIn('not a block device',
                      volumes._not_a_block_device(None))
        self.assertIn('cannot be used',
                      volumes._not_a_block_device('/nonexistent/dev'))
