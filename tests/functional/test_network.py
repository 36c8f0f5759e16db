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

"""Servers on Neutron ports through the real Nova API, on real OVS.

Ports are NeutronFixture ports bound as ``ovs`` on a per-test userspace
OVS integration bridge (``binding:vif_details`` ``bridge_name`` and
``datapath_type=netdev``); the LXD side and the host's veths, Linux
bridges and OVS ports are checked after each step.
"""

import time

from tests.fixtures import ovs
from tests.functional import base


class NetworkServerTest(ovs.ServerPorts, base.LXDFunctionalTestCase):

    def setUp(self):
        super(NetworkServerTest, self).setUp()
        ovs.require_ovs(self)
        self.bridge = self.useFixture(ovs.OVSBridge()).name
        self.flavor_id = self._create_flavor(memory_mb=128, vcpu=1, disk=0,
                                             ephemeral=0, name='lxd.net')
        self._ip = 10

    def test_boot_attach_detach_delete(self):
        first, second = self._port(), self._port()
        server = self._create_server(
            image_uuid=self.image_id, flavor_id=self.flavor_id,
            networks=[{'port': first['id']}])
        self.assertEqual('Running', self.container_of(server)['status'])
        self._assert_plugged(server, first, 'eth0')

        self._attach_interface(server, second['id'])
        self._assert_plugged(server, second, 'eth1')
        self._assert_plugged(server, first, 'eth0')

        self._detach_interface(server, second['id'])
        self.assertNotIn('nova-port-%s' % second['id'],
                         self.container_of(server)['devices'])
        self.assertNotIn('eth1', self._nics(server))
        self._assert_unplugged(second)
        self._assert_plugged(server, first, 'eth0')

        self._delete_server(server)
        self.assertEqual([], self.container_names())
        self._assert_unplugged(first)
        self.assertEqual([], ovs.ovs_ports(self.bridge))

    def _boot_and_wait_for_container(self, port):
        server = self.api.post_server({'server': {
            'name': 'net', 'imageRef': self.image_id,
            'flavorRef': self.flavor_id,
            'networks': [{'port': port['id']}]}})
        name = 'nova-%s' % server['id']
        deadline = time.time() + 60
        while time.time() < deadline:
            if any(record['name'] == name and record['status'] == 'Running'
                   for record in self.lxd.instances()):
                return server
            time.sleep(0.1)
        self.fail('container %s never ran' % name)

    def test_spawn_waits_for_network_vif_plugged(self):
        self.flags(vif_plugging_timeout=60, vif_plugging_is_fatal=True)
        port = self._port(status='DOWN')
        server = self._boot_and_wait_for_container(port)
        # Started, host side plugged, and nova still waits for Neutron.
        time.sleep(0.5)
        self.assertEqual('BUILD', self.api.get_server(server['id'])['status'])
        self.assertIn(('qvo' + port['id'])[:14], ovs.ovs_ports(self.bridge))
        self.api.create_server_external_events([{
            'name': 'network-vif-plugged', 'server_uuid': server['id'],
            'tag': port['id'], 'status': 'completed'}])
        server = self._wait_for_state_change(server, 'ACTIVE')
        self._assert_plugged(server, port, 'eth0')
        self._delete_server(server)
        self._assert_unplugged(port)

    def test_vif_plugged_timeout_is_fatal(self):
        self.flags(vif_plugging_timeout=1, vif_plugging_is_fatal=True)
        port = self._port(status='DOWN')
        server = self._boot_and_wait_for_container(port)
        server = self._wait_for_state_change(server, 'ERROR')
        self.assertEqual([], self.container_names())
        self._assert_unplugged(port)
        self.assertEqual([], ovs.ovs_ports(self.bridge))
        self._delete_server(server)

    def test_vif_plugged_timeout_not_fatal(self):
        self.flags(vif_plugging_timeout=1, vif_plugging_is_fatal=False)
        port = self._port(status='DOWN')
        server = self._boot_and_wait_for_container(port)
        server = self._wait_for_state_change(server, 'ACTIVE')
        self._assert_plugged(server, port, 'eth0')
        self._delete_server(server)
        self._assert_unplugged(port)
