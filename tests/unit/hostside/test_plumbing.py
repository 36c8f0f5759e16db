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

"""HostPlumbing: an instance's ports plugged and volumes connected.

The real :class:`~nova_lxd_accel.hostside.network.Networking` and
:class:`~nova_lxd_accel.hostside.volumes.Volumes` do the work; what they
reach on the host is replaced at its boundary, as in
tests/unit/hostside/test_network.py and
tests/unit/hostside/test_volumes.py: os-vif's plug and unplug, os-brick's
connector, the block-device check of the path os-brick returns, and
nova's wait for Neutron's events (a recording VirtAPI).
"""

import contextlib
from unittest import mock

import fixtures
from nova.compute import task_states
import nova.conf
from nova import exception as nova_exception
from nova.network import model as network_model
from nova import objects
from os_vif import exception as osv_exception
from os_vif import objects as osv_objects
from oslo_config import fixture as config_fixture
import testtools

from nova_lxd_accel import conf as lxd_conf
from nova_lxd_accel.container import builder
from nova_lxd_accel.container import identity
from nova_lxd_accel.container import volume
from nova_lxd_accel import exception
from nova_lxd_accel import host as lxd_host
from nova_lxd_accel.hostside import network
from nova_lxd_accel.hostside import plumbing
from nova_lxd_accel.hostside import volumes
from tests.fixtures import fake_lxd

CONF = nova.conf.CONF
objects.register_all()
osv_objects.register_all()

UUID = '7a1c5f0e-4c0b-4a55-9d59-3f7c5d0f8e21'
PORT1 = '0bf13d99-5925-4fe3-8be6-532cd7e6a7ef'
PORT2 = 'b1aae404-f511-47f3-9bf9-5af03ead6e83'
VOL = '0b6e1c4a-8f8e-4a56-8f27-2a9cfbb7a0d1'
ROOT_VOL = '5d1f6a3e-2c4b-4f0e-9a1e-6d1a2b3c4d5e'
NET = 'e2b3c4d5-6f70-4a8b-9c0d-1e2f3a4b5c6d'


def _vif(port_id=PORT1, vif_type='ovs', active=True):
    net = network_model.Network(id=NET, bridge='br-int', label='private',
                                subnets=[], mtu=1450)
    return network_model.VIF(
        id=port_id, address='fa:16:3e:00:00:%s' % port_id[:2], network=net,
        type=vif_type, details={}, devname=('tap' + port_id)[:14],
        ovs_interfaceid=port_id, active=active, vnic_type='normal')


def _bdi():
    """A root volume (never connected here) and one data volume."""
    def info(volume_id, path):
        return {'driver_volume_type': 'iscsi', 'serial': volume_id,
                'data': {'device_path': path, 'volume_id': volume_id}}
    return {'block_device_mapping': [
        {'boot_index': 0, 'connection_info': info(ROOT_VOL, '/dev/sda'),
         'mount_device': '/dev/vda'},
        {'boot_index': None, 'connection_info': info(VOL, '/dev/sdb'),
         'mount_device': '/dev/vdb'}]}


class VirtAPI(object):
    """nova's wait for instance events, recorded (see test_network)."""

    def __init__(self, log):
        self.log = log
        self.timeout = False

    @contextlib.contextmanager
    def wait_for_instance_event(self, instance, event_names, timeout=300,
                                error_callback=None):
        self.log.append(('wait', [name for name, _port in event_names]))
        yield
        if self.timeout:
            raise nova_exception.InstanceEventTimeout()
        self.log.append(('plugged', [port for _name, port in event_names]))


class PlumbingTestCase(testtools.TestCase):

    def setUp(self):
        super(PlumbingTestCase, self).setUp()
        lxd_conf.register_opts(CONF)
        self.flags = self.useFixture(config_fixture.Config(CONF)).config
        self.flags(vif_plugging_timeout=300, vif_plugging_is_fatal=True)
        #: what reached the host, in order
        self.host = []
        self.useFixture(fixtures.MockPatchObject(
            network, '_initialize_os_vif'))
        self.plug = self.useFixture(fixtures.MockPatch(
            'nova_lxd_accel.hostside.network.os_vif.plug',
            side_effect=lambda vif, info: self.host.append(
                ('plug', vif.id)))).mock
        self.unplug = self.useFixture(fixtures.MockPatch(
            'nova_lxd_accel.hostside.network.os_vif.unplug',
            side_effect=lambda vif, info: self.host.append(
                ('unplug', vif.id)))).mock
        brick = mock.Mock()
        brick.connect_volume.side_effect = lambda data: (
            self.host.append(('connect', data['volume_id'])) or
            {'path': data['device_path']})
        brick.disconnect_volume.side_effect = lambda data, info: (
            self.host.append(('disconnect', data['volume_id'])))
        self.brick = brick
        self.useFixture(fixtures.MockPatch(
            'os_brick.initiator.connector.InitiatorConnector.factory',
            return_value=brick))
        self.useFixture(fixtures.MockPatchObject(
            volumes, '_not_a_block_device', return_value=None))
        self.log = self.useFixture(fixtures.FakeLogger())
        self.virtapi = VirtAPI(self.host)
        client = fake_lxd.FakeLXDClient()
        self.networking = network.Networking(client, CONF, self.virtapi)
        self.volumes = volumes.Volumes(client, CONF, lxd_host.Host(
            client, CONF, identity.Owner(host='h')).guest)
        self.instance = objects.Instance(
            id=1, uuid=UUID, project_id='p', display_name='i', host='h',
            task_state=task_states.SPAWNING)

    def plumbing(self, networking=True, with_volumes=True):
        return plumbing.HostPlumbing(
            self.networking if networking else None,
            self.volumes if with_volumes else None)


class PlannedTest(PlumbingTestCase):

    def test_the_plan_is_the_ports_in_order_and_touches_nothing(self):
        ports = [_vif(PORT1), _vif(PORT2)]
        planned = self.plumbing().planned(ports)
        self.assertEqual(builder.HostSide(network_info=tuple(ports)),
                         planned)
        self.assertEqual([], self.host)

    def test_no_ports_and_no_networking_plan_no_nics(self):
        self.assertEqual(builder.NO_HOST_SIDE, self.plumbing().planned(None))
        self.assertEqual(builder.NO_HOST_SIDE,
                         self.plumbing(networking=False).planned([_vif()]))


class ConnectTest(PlumbingTestCase):

    def test_ports_are_plugged_then_data_volumes_connected(self):
        host_side = self.plumbing().connect(None, self.instance, [_vif()],
                                            _bdi())
        # the root volume is never connected here (spawn refuses it)
        self.assertEqual([('plug', PORT1), ('connect', VOL)], self.host)
        self.assertEqual(builder.HostSide(
            network_info=(_vif(),),
            volumes=(volume.ConnectedVolume(
                name='vol-' + VOL, host_path='/dev/sdb',
                mountpoint='/dev/vdb'),)), host_side)

    def test_a_revert_connects_volumes_and_leaves_the_ports(self):
        # the ports are plugged once the original is back in place
        host_side = self.plumbing().connect(None, self.instance, [_vif()],
                                            _bdi(), plug_ports=False)
        self.assertEqual([('connect', VOL)], self.host)
        self.assertEqual((_vif(),), host_side.network_info)

    def test_a_port_it_cannot_plug_stops_before_any_volume(self):
        exc = self.assertRaises(
            exception.VIFNotSupported, self.plumbing().connect, None,
            self.instance, [_vif(vif_type='vhostuser')], _bdi())
        self.assertIn(PORT1, str(exc))
        self.assertEqual([], self.host)

    def test_without_networking_or_volumes_nothing_is_made(self):
        host_side = self.plumbing(networking=False, with_volumes=False) \
            .connect(None, self.instance, [_vif()], _bdi())
        self.assertEqual(builder.NO_HOST_SIDE, host_side)
        self.assertEqual([], self.host)
        self.plumbing(networking=False).plug_ports(self.instance, [_vif()])
        self.assertEqual([], self.host)


class ReleaseTest(PlumbingTestCase):

    def test_ports_are_unplugged_then_data_volumes_disconnected(self):
        self.plumbing().release(self.instance, [_vif(PORT1), _vif(PORT2)],
                                _bdi())
        self.assertEqual([('unplug', PORT1), ('unplug', PORT2),
                          ('disconnect', VOL)], self.host)

    def test_a_failing_unplug_is_raised(self):
        self.unplug.side_effect = osv_exception.UnplugException(
            vif='v', err='bridge busy')
        exc = self.assertRaises(exception.VIFPlugFailed,
                                self.plumbing().release, self.instance,
                                [_vif()], _bdi())
        self.assertIn(PORT1, str(exc))
        # raised once the volumes are disconnected too: the source of a
        # migration keeps none connected
        self.assertEqual([('disconnect', VOL)], self.host)

    def test_quietly_a_failing_step_is_logged_and_the_rest_done(self):
        # the undo of a failed spawn raises the spawn's own error
        self.unplug.side_effect = osv_exception.UnplugException(
            vif='v', err='bridge busy')
        self.plumbing().release(self.instance, [_vif()], _bdi(), quiet=True)
        self.assertEqual([('disconnect', VOL)], self.host)
        self.assertIn('Releasing the host side (ports, volumes) failed',
                      self.log.output)

    def test_without_networking_only_volumes_are_released(self):
        self.plumbing(networking=False).release(self.instance, [_vif()],
                                                _bdi())
        self.assertEqual([('disconnect', VOL)], self.host)


class WaitForPluggedTest(PlumbingTestCase):

    def test_the_container_starts_inside_the_wait_for_neutron(self):
        ports = [_vif(PORT1, active=False), _vif(PORT2)]
        self.plumbing().wait_for_plugged(
            self.instance, ports, lambda: self.host.append('start'))
        # only the port Neutron has not reported active is waited for
        self.assertEqual([('wait', ['network-vif-plugged']), 'start',
                          ('plugged', [PORT1])], self.host)

    def test_neutron_never_reporting_the_port_fails_the_start(self):
        self.virtapi.timeout = True
        self.assertRaises(
            nova_exception.VirtualInterfaceCreateException,
            self.plumbing().wait_for_plugged, self.instance,
            [_vif(active=False)], lambda: self.host.append('start'))
        self.assertIn('start', self.host)

    def test_without_networking_the_container_just_starts(self):
        self.plumbing(networking=False).wait_for_plugged(
            self.instance, [_vif(active=False)],
            lambda: self.host.append('start'))
        self.assertEqual(['start'], self.host)

    def test_a_failing_start_is_raised(self):
        def start():
            raise exception.LXDOperationFailed(
                action='start', target='nova-' + UUID, reason='no memory')
        exc = self.assertRaises(
            exception.LXDOperationFailed, self.plumbing().wait_for_plugged,
            self.instance, [_vif(active=False)], start)
        self.assertIn('no memory', str(exc))
