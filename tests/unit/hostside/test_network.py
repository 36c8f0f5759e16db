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

"""Container NICs: the device builder, os-vif calls and the event wait.

os-vif and LXD are replaced by recording fakes; the real tests are in
tests/integration/test_network.py and tests/functional/test_network.py.
"""

import contextlib
import logging
import types
from unittest import mock

import fixtures
from nova.compute import task_states
from nova import exception as nova_exception
from nova.network import model as network_model
from nova import objects
from os_vif import exception as osv_exception
from os_vif import objects as osv_objects
import testtools

from nova_lxd_accel.container import builder
from nova_lxd_accel import exception
from nova_lxd_accel.hostside import network
from tests.fixtures import fake_lxd

UUID = '7a1c5f0e-4c0b-4a55-9d59-3f7c5d0f8e21'
PORT1 = '0bf13d99-5925-4fe3-8be6-532cd7e6a7ef'
PORT2 = 'b1aae404-f511-47f3-9bf9-5af03ead6e83'

objects.register_all()
osv_objects.register_all()


def _vif(port_id=PORT1, vif_type='ovs', mtu=1450, active=True,
         vnic_type='normal', **details):
    net = network_model.Network(id='net-1', bridge='br-int', label='private',
                                subnets=[], mtu=mtu)
    return network_model.VIF(
        id=port_id, address='fa:16:3e:00:00:%s' % port_id[:2], network=net,
        type=vif_type, details=details, devname=('tap' + port_id)[:14],
        ovs_interfaceid=port_id, active=active, vnic_type=vnic_type)


def _instance(task_state=None):
    return objects.Instance(id=1, uuid=UUID, project_id='p',
                            display_name='i', host='h',
                            task_state=task_state)


def _conf(timeout=300, fatal=True):
    return types.SimpleNamespace(
        lxd=types.SimpleNamespace(container_name_prefix='nova-'),
        vif_plugging_timeout=timeout, vif_plugging_is_fatal=fatal)


class FakeVirtAPI(object):
    """Records waits; ``outcome`` is what waiting at the end does."""

    def __init__(self, outcome=None):
        self.outcome = outcome
        self.waits = []
        self.finished = []

    @contextlib.contextmanager
    def wait_for_instance_event(self, instance, event_names, timeout=300,
                                error_callback=None):
        self.waits.append((list(event_names), timeout))
        yield
        if self.outcome == 'timeout':
            raise nova_exception.InstanceEventTimeout()
        if self.outcome == 'failed':
            error_callback(event_names[0][0], instance)
        self.finished.append(list(event_names))


NAME = 'nova-' + UUID


def _client(devices=None, expanded=None):
    return fake_lxd.FakeLXDClient({
        'name': NAME, 'status': 'Running', 'config': {},
        'devices': dict(devices or {}),
        'expanded_devices': dict(expanded or devices or {})})


def _puts(client):
    """The devices of each write, in order."""
    return [call[2]['devices'] for call in client.calls if call[0] == 'put']


def _refuse_writes(client):
    client.fail('put_container', exception.LXDOperationFailed(
        action='update', target=NAME, reason='no'))


class NicDevicesTest(testtools.TestCase):

    @staticmethod
    def nic_devices(instance, network_info):
        """The container's NICs: the spec's network part (config.nics)."""
        host_side = builder.HostSide(
            network_info=tuple(network_info or ()))
        return builder.nics(instance, None, None, None,
                            host_side)['devices']

    def test_ovs_ports_become_bridged_nics_on_the_hybrid_bridge(self):
        devices = self.nic_devices(
            _instance(), [_vif(PORT1), _vif(PORT2, mtu=9000)])
        self.assertEqual({
            'nova-port-' + PORT1: {
                'type': 'nic', 'nictype': 'bridged', 'name': 'eth0',
                'parent': 'qbr0bf13d99-59', 'host_name': 'tap0bf13d99-59',
                'hwaddr': 'fa:16:3e:00:00:0b', 'mtu': '1450'},
            'nova-port-' + PORT2: {
                'type': 'nic', 'nictype': 'bridged', 'name': 'eth1',
                'parent': 'qbrb1aae404-f5', 'host_name': 'tapb1aae404-f5',
                'hwaddr': 'fa:16:3e:00:00:b1', 'mtu': '9000'}}, devices)

    def test_tap_port_is_p2p_and_devname_falls_back(self):
        vif = _vif(vif_type='tap', mtu=None)
        vif['devname'] = None
        self.assertEqual(
            {'type': 'nic', 'nictype': 'p2p', 'name': 'eth0',
             'host_name': 'tap0bf13d99-59', 'hwaddr': 'fa:16:3e:00:00:0b'},
            self.nic_devices(_instance(), [vif])['nova-port-' + PORT1])

    def test_no_ports(self):
        self.assertEqual({}, self.nic_devices(_instance(), None))
        self.assertEqual({}, self.nic_devices(_instance(), []))

    def test_unsupported_types_are_refused_with_a_reason(self):
        for vif in (_vif(vif_type='bridge'), _vif(vif_type='vhostuser'),
                    _vif(vnic_type='direct')):
            exc = self.assertRaises(exception.VIFNotSupported,
                                    self.nic_devices, _instance(), [vif])
            self.assertIsInstance(
                exc, nova_exception.VirtualInterfacePlugException)
            self.assertIn(PORT1, str(exc))
            self.assertIn('ovs, tap', str(exc))

    def test_plugged_events_only_for_inactive_ports(self):
        inactive = _vif(PORT2, active=False)
        no_key = _vif()
        del no_key['active']
        self.assertEqual([('network-vif-plugged', PORT2)],
                         network.plugged_events([_vif(), inactive, no_key]))


@mock.patch.object(network, '_initialize_os_vif', mock.Mock())
class PlugTest(testtools.TestCase):

    def setUp(self):
        super(PlugTest, self).setUp()
        self.plug = self.useFixture_patch(
            'nova_lxd_accel.hostside.network.os_vif.plug')
        self.unplug = self.useFixture_patch(
            'nova_lxd_accel.hostside.network.os_vif.unplug')

    def useFixture_patch(self, target):
        patcher = mock.patch(target)
        self.addCleanup(patcher.stop)
        return patcher.start()

    def test_ovs_is_always_plugged_hybrid(self):
        net = network.Networking(None, _conf(), FakeVirtAPI())
        net.plug_vifs(_instance(), [_vif(ovs_hybrid_plug=False,
                                         datapath_type='netdev')])
        vif, info = self.plug.call_args[0]
        self.assertIsInstance(vif, osv_objects.vif.VIFBridge)
        self.assertEqual('qbr0bf13d99-59', vif.bridge_name)
        self.assertEqual('tap0bf13d99-59', vif.vif_name)
        self.assertEqual('br-int', vif.network.bridge)
        self.assertEqual('netdev', vif.port_profile.datapath_type)
        self.assertEqual(PORT1, vif.port_profile.interface_id)
        self.assertEqual(UUID, info.uuid)

    def test_tap_needs_no_plug(self):
        net = network.Networking(None, _conf(), FakeVirtAPI())
        net.plug_vifs(_instance(), [_vif(vif_type='tap')])
        net.unplug_vifs(_instance(), [_vif(vif_type='tap')])
        self.assertFalse(self.plug.called)
        self.assertFalse(self.unplug.called)

    def test_os_vif_failure_names_the_port(self):
        self.plug.side_effect = osv_exception.PlugException(vif='v', err='x')
        net = network.Networking(None, _conf(), FakeVirtAPI())
        exc = self.assertRaises(exception.VIFPlugFailed, net.plug_vifs,
                                _instance(), [_vif()])
        self.assertIn(PORT1, str(exc))

    def test_unplug_tries_every_port_then_raises(self):
        log = self.useFixture(fixtures.FakeLogger(level=logging.WARNING))
        self.unplug.side_effect = [
            osv_exception.UnplugException(vif='v', err='x'), None]
        net = network.Networking(None, _conf(), FakeVirtAPI())
        self.assertRaises(exception.VIFPlugFailed, net.unplug_vifs,
                          _instance(), [_vif(PORT1), _vif(PORT2)])
        self.assertEqual(2, self.unplug.call_count)
        self.unplug.side_effect = [
            osv_exception.UnplugException(vif='v', err='x'), None]
        net.unplug_vifs(_instance(), [_vif(PORT1), _vif(PORT2)],
                        ignore_errors=True)
        self.assertEqual(4, self.unplug.call_count)
        self.assertIn('Could not unplug port %s' % PORT1, log.output)


@mock.patch.object(network, '_initialize_os_vif', mock.Mock())
@mock.patch('nova_lxd_accel.hostside.network.os_vif.plug', mock.Mock())
@mock.patch('nova_lxd_accel.hostside.network.os_vif.unplug', mock.Mock())
class WaitTest(testtools.TestCase):

    def _spawn(self, net, instance, network_info, start=lambda: None):
        net.plug_vifs(instance, network_info)
        with net.wait_for_plugged(instance, network_info, power_on=True):
            start()

    def test_waits_for_inactive_ports_registered_before_plug(self):
        virtapi = FakeVirtAPI()
        net = network.Networking(None, _conf(timeout=30), virtapi)
        instance = _instance(task_states.SPAWNING)
        seen = []
        network.os_vif.plug.side_effect = (
            lambda *a: seen.append(len(virtapi.waits)))
        self._spawn(net, instance, [_vif(PORT1, active=False),
                                    _vif(PORT2)])
        network.os_vif.plug.side_effect = None
        # The wait existed when os-vif plugged (the event can come early).
        self.assertEqual([1, 1], seen)
        self.assertEqual([([('network-vif-plugged', PORT1)], 30)],
                         virtapi.waits)
        self.assertEqual([[('network-vif-plugged', PORT1)]],
                         virtapi.finished)

    def test_no_wait_when_all_active_timeout_zero_or_power_off(self):
        virtapi = FakeVirtAPI()
        instance = _instance(task_states.SPAWNING)
        self._spawn(network.Networking(None, _conf(), virtapi), instance,
                    [_vif()])
        self._spawn(network.Networking(None, _conf(timeout=0), virtapi),
                    instance, [_vif(active=False)])
        net = network.Networking(None, _conf(), virtapi)
        net.plug_vifs(instance, [_vif(active=False)])
        with net.wait_for_plugged(instance, [_vif(active=False)],
                                  power_on=False):
            pass
        self.assertEqual([], virtapi.finished)
        self.assertEqual({}, net._waits)

    def test_wait_also_starts_outside_spawn(self):
        virtapi = FakeVirtAPI()
        net = network.Networking(None, _conf(), virtapi)
        self._spawn(net, _instance(), [_vif(active=False)])
        self.assertEqual(1, len(virtapi.finished))

    def test_timeout_fatal(self):
        net = network.Networking(None, _conf(fatal=True),
                                 FakeVirtAPI('timeout'))
        self.assertRaises(nova_exception.VirtualInterfaceCreateException,
                          self._spawn, net, _instance(task_states.SPAWNING),
                          [_vif(active=False)])

    def test_timeout_not_fatal(self):
        log = self.useFixture(fixtures.FakeLogger(level=logging.WARNING))
        virtapi = FakeVirtAPI('timeout')
        net = network.Networking(None, _conf(fatal=False), virtapi)
        started = []
        self._spawn(net, _instance(task_states.SPAWNING),
                    [_vif(PORT1, active=False)],
                    lambda: started.append('start'))
        # the port was waited for, the wait timed out, and the spawn went
        # on: started, the wait dropped, a warning logged
        self.assertEqual([([('network-vif-plugged', PORT1)], 300)],
                         virtapi.waits)
        self.assertEqual([], virtapi.finished)
        self.assertEqual(['start'], started)
        self.assertEqual({}, net._waits)
        self.assertIn('Neutron did not report the ports of the container '
                      'plugged within 300 seconds; going on', log.output)

    def test_failed_event_fatal(self):
        net = network.Networking(None, _conf(fatal=True),
                                 FakeVirtAPI('failed'))
        self.assertRaises(nova_exception.VirtualInterfaceCreateException,
                          self._spawn, net, _instance(task_states.SPAWNING),
                          [_vif(active=False)])

    def test_failed_start_abandons_the_wait(self):
        virtapi = FakeVirtAPI('timeout')
        net = network.Networking(None, _conf(), virtapi)

        def start():
            raise exception.LXDOperationFailed(action='start', target='c',
                                               reason='no')

        self.assertRaises(exception.LXDOperationFailed, self._spawn, net,
                          _instance(task_states.SPAWNING),
                          [_vif(active=False)], start)
        self.assertEqual({}, net._waits)
        self.assertEqual([], virtapi.finished)

    def test_unplug_after_failed_create_abandons_the_wait(self):
        virtapi = FakeVirtAPI()
        net = network.Networking(None, _conf(), virtapi)
        instance = _instance(task_states.SPAWNING)
        net.plug_vifs(instance, [_vif(active=False)])
        self.assertIn(UUID, net._waits)
        net.unplug_vifs(instance, [_vif(active=False)])
        self.assertEqual({}, net._waits)
        self.assertEqual([], virtapi.finished)


@mock.patch.object(network, '_initialize_os_vif', mock.Mock())
class HotPlugTest(testtools.TestCase):

    def setUp(self):
        super(HotPlugTest, self).setUp()
        for name in ('plug', 'unplug'):
            patcher = mock.patch(
                'nova_lxd_accel.hostside.network.os_vif.' + name)
            setattr(self, name, patcher.start())
            self.addCleanup(patcher.stop)

    def test_attach_takes_the_lowest_free_ifname(self):
        client = _client(
            devices={'nova-port-x': {'type': 'nic', 'name': 'eth1'}},
            expanded={'eth0': {'type': 'nic', 'name': 'eth0'},
                      'root': {'type': 'disk'}})
        net = network.Networking(client, _conf(), FakeVirtAPI())
        net.attach_interface(_instance(), _vif(PORT2))
        self.assertEqual('eth2',
                         client.records[NAME]['devices']['nova-port-' + PORT2][
                             'name'])
        self.assertTrue(self.plug.called)

    def test_attach_failure_unplugs_and_says_so(self):
        client = _client()
        _refuse_writes(client)
        net = network.Networking(client, _conf(), FakeVirtAPI())
        self.assertRaises(nova_exception.InterfaceAttachFailed,
                          net.attach_interface, _instance(), _vif())
        self.assertTrue(self.unplug.called)

    def test_attach_to_missing_container(self):
        client = fake_lxd.FakeLXDClient()
        net = network.Networking(client, _conf(), FakeVirtAPI())
        self.assertRaises(nova_exception.InstanceNotFound,
                          net.attach_interface, _instance(), _vif())
        self.assertFalse(self.plug.called)

    def test_detach_removes_device_then_unplugs(self):
        client = _client(devices={'nova-port-' + PORT1: {'type': 'nic'},
                                  'root': {'type': 'disk'}})
        order = []
        self.unplug.side_effect = lambda *a: order.append(
            dict(client.records[NAME]['devices']))
        net = network.Networking(client, _conf(), FakeVirtAPI())
        net.detach_interface(_instance(), _vif())
        self.assertEqual([{'root': {'type': 'disk'}}], _puts(client))
        self.assertEqual([{'root': {'type': 'disk'}}], order)

    def test_detach_of_absent_nic_still_unplugs(self):
        client = _client()
        net = network.Networking(client, _conf(), FakeVirtAPI())
        net.detach_interface(_instance(), _vif())
        self.assertEqual([], _puts(client))
        self.assertTrue(self.unplug.called)

    def test_detach_failure(self):
        client = _client(devices={'nova-port-' + PORT1: {'type': 'nic'}})
        _refuse_writes(client)
        net = network.Networking(client, _conf(), FakeVirtAPI())
        self.assertRaises(nova_exception.InterfaceDetachFailed,
                          net.detach_interface, _instance(), _vif())
        self.assertFalse(self.unplug.called)

    def test_capability(self):
        self.assertTrue(network.CAPABILITIES['supports_attach_interface'])
