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

"""Container NICs on real Open vSwitch and real veths, at driver level.

Needs root and a running Open vSwitch (``tools/ovs-up.sh``; userspace
datapath, since the kernel module is missing here); without it the OVS
tests skip, or fail when ``NOVA_LXD_ACCEL_REQUIRE_OVS=1``. Each test makes
its own integration bridge with a unique name and no address, and removes
it.
os-vif's privileged calls run in-process (the tests run as root), the way
nova's ``PrivsepFixture`` does it for nova's own context.
"""

import os
import subprocess
import uuid

from nova.network import model as network_model

from nova_lxd_accel import exception
from tests.fixtures import ovs
from tests.integration import base


def make_vif(bridge, vif_type='ovs', mtu=1400, active=True, **details):
    port_id = str(uuid.uuid4())
    details.setdefault('port_filter', True)
    details.setdefault('datapath_type', 'netdev')
    network = network_model.Network(
        id=str(uuid.uuid4()), bridge=bridge, label='private', subnets=[],
        mtu=mtu)
    mac = 'fa:16:3e:%02x:%02x:%02x' % tuple(
        int(port_id.replace('-', '')[i:i + 2], 16) for i in (0, 2, 4))
    return network_model.VIF(
        id=port_id, address=mac, network=network, type=vif_type,
        details=details, devname=('tap' + port_id)[:14],
        ovs_interfaceid=port_id, active=active)


class NetworkTestBase(base.DriverTestCase):

    def setUp(self):
        super(NetworkTestBase, self).setUp()
        if os.geteuid() != 0:
            self.skipTest('needs root for veths and bridges')

    def state_nics(self, instance):
        state = self.driver._parts.client.get_state(
            self.container_name(instance))
        return {name: nic for name, nic in (state.get('network') or
                                            {}).items() if name != 'lo'}

    def assertHostSideGone(self, vif, bridge=None):
        for name in ovs.host_side_names(vif['id']):
            self.assertIsNone(ovs.link(name), name)
        if bridge:
            self.assertNotIn(('qvo' + vif['id'])[:14], ovs.ovs_ports(bridge))


class OVSHybridTest(NetworkTestBase):

    def setUp(self):
        super(OVSHybridTest, self).setUp()
        ovs.require_ovs(self)
        self.bridge = self.useFixture(ovs.OVSBridge()).name

    def _assert_plugged(self, instance, vif, ifname, mtu=1400):
        tap, qbr, qvb, qvo = ovs.host_side_names(vif['id'])
        device = self.container(instance)['devices'][
            'nova-port-%s' % vif['id']]
        self.assertEqual({'type': 'nic', 'nictype': 'bridged',
                          'parent': qbr, 'host_name': tap,
                          'hwaddr': vif['address'], 'mtu': str(mtu),
                          'name': ifname}, device)
        # LXD's veth end and os-vif's qvb are in the per-port bridge...
        self.assertEqual(qbr, ovs.master(tap))
        self.assertEqual(qbr, ovs.master(qvb))
        self.assertEqual(mtu, ovs.link(tap)['mtu'])
        self.assertEqual('veth', ovs.link(tap)['linkinfo']['info_kind'])
        self.assertEqual([], ovs.link(qbr).get('addr_info', []))
        # ... and qvo is the OVS port Neutron's agent looks for.
        self.assertIn(qvo, ovs.ovs_ports(self.bridge))
        ids = ovs.ovs_external_ids(qvo)
        self.assertEqual(vif['id'], ids['iface-id'])
        self.assertEqual(vif['address'], ids['attached-mac'])
        self.assertEqual(instance.uuid, ids['vm-uuid'])
        # Inside: the port's MAC and MTU on the expected interface.
        nic = self.state_nics(instance)[ifname]
        self.assertEqual(vif['address'], nic['hwaddr'])
        self.assertEqual(mtu, nic['mtu'])

    def test_spawn_attach_detach_destroy(self):
        # The port asks for the direct plug; containers always get hybrid.
        first = make_vif(self.bridge, ovs_hybrid_plug=False)
        second = make_vif(self.bridge, mtu=1300)
        instance = self.make_instance()
        self.addCleanup(self.driver.unplug_vifs, instance, [first, second])
        self.driver.spawn(self.context, instance, self.tiny_image(), [],
                          None, {}, network_info=[first])
        self.assertEqual('Running', self.container(instance)['status'])
        self._assert_plugged(instance, first, 'eth0')
        # nova-compute re-plugs every instance at start-up: harmless.
        self.driver.plug_vifs(instance, [first])
        self._assert_plugged(instance, first, 'eth0')

        self.driver.attach_interface(self.context, instance, None, second)
        self._assert_plugged(instance, second, 'eth1', mtu=1300)
        self._assert_plugged(instance, first, 'eth0')

        self.driver.detach_interface(self.context, instance, second)
        self.assertNotIn('nova-port-%s' % second['id'],
                         self.container(instance)['devices'])
        self.assertNotIn('eth1', self.state_nics(instance))
        self.assertHostSideGone(second, self.bridge)
        self._assert_plugged(instance, first, 'eth0')

        # Stopped and started again: the same NIC comes back.
        self.driver.power_off(instance, timeout=5, retry_interval=1)
        self.assertIsNone(ovs.link(ovs.host_side_names(first['id'])[0]))
        self.driver.power_on(self.context, instance, [first])
        self._assert_plugged(instance, first, 'eth0')

        self.driver.destroy(self.context, instance, [first])
        self.assertEqual([], self.container_names())
        self.assertHostSideGone(first, self.bridge)
        self.assertEqual([], ovs.ovs_ports(self.bridge))

    def test_attach_to_stopped_container(self):
        vif = make_vif(self.bridge)
        instance = self.make_instance()
        self.addCleanup(self.driver.unplug_vifs, instance, [vif])
        self.driver.spawn(self.context, instance, self.tiny_image(), [],
                          None, {}, network_info=[], power_on=False)
        self.driver.attach_interface(self.context, instance, None, vif)
        self.assertIn('nova-port-%s' % vif['id'],
                      self.container(instance)['devices'])
        self.driver.power_on(self.context, instance, [vif])
        self._assert_plugged(instance, vif, 'eth0')
        self.driver.destroy(self.context, instance, [vif])
        self.assertHostSideGone(vif, self.bridge)

    def test_failed_start_unplugs(self):
        vif = make_vif(self.bridge)
        instance = self.make_instance()
        self.addCleanup(self.driver.unplug_vifs, instance, [vif])
        # A link already holding the veth's name makes LXD's start fail
        # after os-vif plugged the port.
        tap = ovs.host_side_names(vif['id'])[0]
        ovs.run('ip', 'link', 'add', tap, 'type', 'bridge')
        ovs.run('ip', 'link', 'set', tap, 'addrgenmode', 'none')
        self.addCleanup(subprocess.run, ['ip', 'link', 'del', tap],
                        capture_output=True)
        self.assertRaises(exception.LXDOperationFailed, self.driver.spawn,
                          self.context, instance, self.tiny_image(), [],
                          None, {}, network_info=[vif])
        self.assertEqual([], self.container_names())
        ovs.run('ip', 'link', 'del', tap)
        self.assertHostSideGone(vif, self.bridge)


class TapP2PTest(NetworkTestBase):

    def test_tap_port_is_a_p2p_veth(self):
        vif = make_vif(None, vif_type='tap', mtu=1450)
        instance = self.make_instance()
        self.driver.spawn(self.context, instance, self.tiny_image(), [],
                          None, {}, network_info=[vif])
        tap = ovs.host_side_names(vif['id'])[0]
        self.assertEqual('veth', ovs.link(tap)['linkinfo']['info_kind'])
        self.assertIsNone(ovs.master(tap))
        self.assertEqual(1450, ovs.link(tap)['mtu'])
        nic = self.state_nics(instance)['eth0']
        self.assertEqual(vif['address'], nic['hwaddr'])
        self.driver.destroy(self.context, instance, [vif])
        self.assertIsNone(ovs.link(tap))

    def test_unsupported_vif_type_is_refused_before_lxd(self):
        vif = make_vif('br-x', vif_type='bridge')
        instance = self.make_instance()
        self.assertRaises(exception.VIFNotSupported, self.driver.spawn,
                          self.context, instance, self.tiny_image(), [],
                          None, {}, network_info=[vif])
        self.assertEqual([], self.container_names())
