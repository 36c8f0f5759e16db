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

"""A Neutron port as an LXD ``nic`` device: names, fields, refusals.

The ports are nova's own ``network.model.VIF`` objects, as nova hands
them to the driver in network_info; the names the device uses on the
host are checked against the ones os-vif's objects (made by nova's
``os_vif_util``) plug.
"""

from nova import exception as nova_exception
from nova.network import model as network_model
from nova.network import os_vif_util
from os_vif import objects as osv_objects
import testtools

from nova_lxd_accel.container import nic
from nova_lxd_accel import exception

PORT = '0bf13d99-5925-4fe3-8be6-532cd7e6a7ef'
PORT2 = 'b1aae404-f511-47f3-9bf9-5af03ead6e83'

#: Linux refuses longer interface names (IFNAMSIZ 16, with the NUL).
IFNAME_MAX = 15


def _vif(port_id=PORT, vif_type='ovs', mtu=1450, vnic_type='normal',
         address='fa:16:3e:12:34:56', devname=None, **details):
    network = network_model.Network(id='net-1', bridge='br-int',
                                    label='private', subnets=[], mtu=mtu)
    return network_model.VIF(
        id=port_id, address=address, network=network, type=vif_type,
        details=details, devname=devname or ('tap' + port_id)[:14],
        ovs_interfaceid=port_id, active=True, vnic_type=vnic_type)


class NicDeviceTest(testtools.TestCase):

    def test_ovs_port_is_bridged_on_its_hybrid_bridge(self):
        self.assertEqual(
            {'type': 'nic', 'nictype': 'bridged', 'name': 'eth3',
             'parent': 'qbr0bf13d99-59', 'host_name': 'tap0bf13d99-59',
             'hwaddr': 'fa:16:3e:12:34:56', 'mtu': '1450'},
            nic.nic_device(_vif(), 'eth3'))

    def test_names_match_what_os_vif_plugs(self):
        osv_objects.register_all()
        vif = _vif(**{network_model.VIF_DETAILS_OVS_HYBRID_PLUG: True})
        plugged = os_vif_util.nova_to_osvif_vif(vif)
        device = nic.nic_device(vif, 'eth0')
        self.assertEqual(plugged.bridge_name, device['parent'])
        self.assertEqual(plugged.vif_name, device['host_name'])

    def test_tap_port_is_p2p_without_a_bridge(self):
        device = nic.nic_device(_vif(vif_type='tap'), 'eth0')
        self.assertEqual('p2p', device['nictype'])
        self.assertNotIn('parent', device)

    def test_host_names_fit_the_kernel_limit(self):
        vif = _vif()
        vif['devname'] = None
        for name in (nic.host_name(vif), nic.hybrid_bridge_name(vif)):
            self.assertLessEqual(len(name), IFNAME_MAX, name)
        self.assertEqual('tap0bf13d99-59', nic.host_name(vif))
        # nova's chosen name is kept as it is
        vif['devname'] = 'tapcustom0'
        self.assertEqual('tapcustom0', nic.host_name(vif))

    def test_missing_mac_and_mtu_are_left_to_lxd(self):
        # no MTU on the network (Neutron without net-mtu) and no MAC:
        # LXD chooses, rather than being given 'None'
        for vif in (_vif(mtu=None, address=None),
                    network_model.VIF(id=PORT, type='tap')):
            device = nic.nic_device(vif, 'eth0')
            self.assertNotIn('mtu', device)
            self.assertNotIn('hwaddr', device)

    def test_device_name_is_unique_per_port(self):
        self.assertEqual('nova-port-' + PORT, nic.device_name(_vif()))
        self.assertNotEqual(nic.device_name(_vif()),
                            nic.device_name(_vif(PORT2)))


class CheckSupportedTest(testtools.TestCase):

    def test_supported_ports_pass(self):
        nic.check_supported(_vif())
        nic.check_supported(_vif(vif_type='tap'))
        # an old network_info entry without vnic_type is a normal port
        vif = _vif()
        vif['vnic_type'] = None
        nic.check_supported(vif)

    def test_sriov_port_refused_naming_its_vnic_type(self):
        for vnic_type in ('direct', 'macvtap', 'direct-physical'):
            error = self.assertRaises(
                exception.VIFNotSupported, nic.nic_device,
                _vif(vnic_type=vnic_type), 'eth0')
            self.assertIn(vnic_type, str(error))
            self.assertIn('vnic_type normal', str(error))
            self.assertIn(PORT, str(error))

    def test_unsupported_vif_type_refused_with_the_supported_ones(self):
        for vif_type in ('vhostuser', 'hw_veb', 'binding_failed', None):
            error = self.assertRaises(
                exception.VIFNotSupported, nic.check_supported,
                _vif(vif_type=vif_type))
            # nova's compute manager treats it as a failed plug
            self.assertIsInstance(
                error, nova_exception.VirtualInterfacePlugException)
            self.assertIn('VIF type %s' % vif_type, str(error))
            self.assertIn('ovs, tap', str(error))


class FreeIfnameTest(testtools.TestCase):

    def test_first_nic_is_eth0(self):
        self.assertEqual('eth0', nic.free_ifname({}))
        self.assertEqual('eth0', nic.free_ifname(
            {'root': {'type': 'disk', 'path': '/', 'pool': 'default'}}))

    def test_lowest_gap_is_taken(self):
        devices = {'nova-port-a': {'type': 'nic', 'name': 'eth0'},
                   'nova-port-c': {'type': 'nic', 'name': 'eth2'}}
        self.assertEqual('eth1', nic.free_ifname(devices))
        devices['nova-port-b'] = {'type': 'nic', 'name': 'eth1'}
        self.assertEqual('eth3', nic.free_ifname(devices))

    def test_only_nics_take_a_name(self):
        # a disk or a masked profile device named like a NIC, and a NIC
        # without a name, leave eth0 free
        devices = {'eth0': {'type': 'none'},
                   'data': {'type': 'disk', 'name': 'eth0',
                            'source': '/srv', 'path': '/srv'},
                   'nova-port-x': {'type': 'nic', 'nictype': 'p2p'}}
        self.assertEqual('eth0', nic.free_ifname(devices))
