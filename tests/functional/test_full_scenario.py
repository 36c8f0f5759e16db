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

"""The whole life of a server, through nova's in-process cloud.

Two computes: compute1 on the main LXD daemon, compute2 on the peer daemon
(tools/lxd-peer-up.sh), real Open vSwitch (tools/ovs-up.sh), real loop
devices. One server is booted on a NeutronFixture port (OVS, hybrid plug),
gets a second port and a volume, is resized on compute1 (compute2
disabled), cold-migrated to compute2 and deleted; the LXD side, the host's
veths/bridges/OVS ports, the volume's data and Placement are checked after
each step, and nothing may be left behind.
"""

import errno
import os
import subprocess
import uuid

from nova.volume import cinder as cinder_api

from nova_lxd_accel.container import identity
from tests.fixtures import block_devices
from tests.fixtures import ovs
from tests.fixtures import peer
from tests.functional import base

HOSTS = ('compute1', 'compute2')
_Net = ovs.ServerPorts
_Vol = block_devices.LocalVolumes


def _ip_link_delete(name):
    subprocess.run(['ip', 'link', 'delete', 'dev', name],
                   capture_output=True)


class FullScenarioTest(base.LXDFunctionalTestCase):
    """boot, attach port and volume, resize, cold-migrate, delete."""

    compute_hosts = ()

    def setUp(self):
        peer.require_peer(self)
        ovs.require_ovs(self)
        peer.per_host_node_uuids(self)
        super(FullScenarioTest, self).setUp()
        self.peer = self.useFixture(peer.PeerProject(self.lxd.name))
        peer.migration_flags(self, {
            'compute1': (peer.MAIN_URL, peer.MAIN_DIR),
            'compute2': (peer.PEER_URL, peer.PEER_DIR)})
        self.flags(allow_resize_to_same_host=True)
        self._start_compute('compute1')
        self.flags(endpoint=peer.PEER_SOCKET, group='lxd')
        self._start_compute('compute2')
        self.flags(endpoint=None, group='lxd')

        self.bridge = self.useFixture(ovs.OVSBridge()).name
        self.useFixture(block_devices.BrickFixture())
        self.small = self._create_flavor(memory_mb=128, vcpu=1, disk=0,
                                         ephemeral=0, name='lxd.small')
        self.big = self._create_flavor(memory_mb=256, vcpu=2, disk=0,
                                       ephemeral=0, name='lxd.big')
        self._ip = 10
        self._ports = []

        # Checked after the loop device is released (cleanups run in
        # reverse): nothing may hold it any more.
        self.addCleanup(self._assert_loop_released)
        self.loop = self.useFixture(block_devices.LoopDevice())
        # On failure: remove what a half-done scenario left, before the
        # loop device is released and the OVS bridge deleted.
        self.addCleanup(self._remove_host_side)
        self.addCleanup(self._purge_containers)

    # -- where things are -----------------------------------------------

    def daemon(self, host):
        return self.lxd if host == 'compute1' else self.peer

    def names(self, host):
        return sorted(r['name'] for r in self.daemon(host).instances())

    def host_of(self, server):
        return self.api.get_server(server['id'])['OS-EXT-SRV-ATTR:host']

    def container_of(self, server):
        # the daemon of the host nova says the server is on (also used by
        # NetworkServerTest._assert_plugged)
        return self.daemon(self.host_of(server)).instance(
            'nova-%s' % server['id'])

    def _nics(self, server):
        name = 'nova-%s' % server['id']
        state = self.daemon(self.host_of(server)).client.api.instances[
            name].state.get().json()['metadata']
        return {ifname: nic for ifname, nic in state['network'].items()
                if ifname != 'lo'}

    def _exec(self, server, command):
        # Through the API of the server's daemon (tests/lxd_fixtures).
        return self.daemon(self.host_of(server)).execute(
            'nova-%s' % server['id'], command)

    def usage(self, host):
        return self._get_provider_usages(
            self._get_provider_uuid_by_host(host))

    def _set_enabled(self, host, enabled):
        service = self.api.get_services(host=host,
                                        binary='nova-compute')[0]
        self.api.put_service(service['id'], {
            'status': 'enabled' if enabled else 'disabled'})

    # -- cleanup --------------------------------------------------------

    def _purge_containers(self):
        for project in (self.lxd, self.peer):
            for record in project.instances():
                node = project.client.api.instances[record['name']]
                if record['status'] != 'Stopped':
                    project._wait(node.state.put(
                        json={'action': 'stop', 'force': True}))
                project._wait(node.delete())

    def _remove_host_side(self):
        for port in self._ports:
            tap, qbr, qvb, qvo = ovs.host_side_names(port['id'])
            subprocess.run(['ovs-vsctl', '--timeout=10', '--if-exists',
                            'del-port', qvo], capture_output=True)
            for name in (tap, qvb, qvo, qbr):
                if ovs.link(name) is not None:
                    _ip_link_delete(name)

    def _assert_loop_released(self):
        listed = subprocess.run(['losetup', '--list', '--noheadings',
                                 '--output', 'NAME,BACK-FILE'],
                                capture_output=True, text=True, check=True)
        for line in listed.stdout.splitlines():
            self.assertNotIn(self.loop.backing, line)

    # -- checks ---------------------------------------------------------

    def _all_containers(self, host):
        """Every instance of the host's daemon, in every project."""
        return self.daemon(host).admin.api.instances.get(params={
            'recursion': 1, 'all-projects': 'true'}).json()['metadata']

    def _assert_loop_unused(self):
        for host in HOSTS:
            for record in self._all_containers(host):
                for name, device in (record.get('devices') or {}).items():
                    self.assertNotEqual(
                        self.loop.path, device.get('source'),
                        '%s of %s on %s' % (name, record['name'], host))
        loop_name = os.path.basename(self.loop.path)
        # (nova's test base forbids os.listdir under /sys)
        holders = subprocess.run(
            ['ls', '-A', '/sys/block/%s/holders' % loop_name],
            capture_output=True, text=True, check=True).stdout.split()
        self.assertEqual([], holders)
        # Nobody has it open for exclusive use (a mount, a dm target).
        try:
            fd = os.open(self.loop.path, os.O_RDONLY | os.O_EXCL)
        except OSError as exc:
            self.assertNotEqual(errno.EBUSY, exc.errno, str(exc))
            raise
        os.close(fd)

    def _assert_on(self, server, host, flavor, ports, volume_id,
                   mountpoint, marker):
        """The server runs on ``host`` as ``flavor`` says, ports, volume."""
        other = 'compute2' if host == 'compute1' else 'compute1'
        name = 'nova-%s' % server['id']
        self.assertEqual(host, self.host_of(server))
        record = self.daemon(host).instance(name)
        self.assertEqual('Running', record['status'])
        self.assertEqual(host, record['config'][identity.KEY_HOST])
        self.assertNotIn(identity.KEY_BACKUP_OF, record['config'])
        self.assertNotIn(name, self.names(other))
        limits = {'lxd.small': ('1', '128MiB'),
                  'lxd.big': ('2', '256MiB')}[flavor]
        self.assertEqual(limits, (record['config']['limits.cpu'],
                                  record['config']['limits.memory']))
        for index, port in enumerate(ports):
            _Net._assert_plugged(self, server, port, 'eth%d' % index)
        self.assertEqual(['eth%d' % i for i in range(len(ports))],
                         sorted(self._nics(server)))
        self.assertEqual({'type': 'unix-block', 'source': self.loop.path,
                          'path': mountpoint},
                         record['devices']['vol-' + volume_id])
        self.assertEqual(marker.encode(), self._read(server, mountpoint,
                                                     len(marker)))

    def _read(self, server, mountpoint, length):
        return self._exec(server, 'dd if=%s bs=512 count=1 2>/dev/null | '
                                  'head -c %d' % (mountpoint, length))

    def _write(self, server, mountpoint, marker):
        self._exec(server, 'printf %s | dd of=%s bs=512 count=1 '
                           'conv=sync,fsync 2>/dev/null' %
                   (marker, mountpoint))
        self.assertEqual(marker.encode(), self.loop.read(len(marker)))

    def _port(self):
        port = _Net._port(self)
        self._ports.append(port)
        return port

    # -- the scenario -----------------------------------------------------

    def test_boot_attach_resize_migrate_delete(self):
        first, second = self._port(), self._port()
        volume_id = _Vol._local_volume(self, self.loop)

        # 1. boot on compute1 with a port
        server = self._create_server(
            image_uuid=self.image_id, flavor_id=self.small,
            networks=[{'port': first['id']}], host='compute1')
        name = 'nova-%s' % server['id']
        self.assertEqual([name], self.names('compute1'))
        self.assertEqual([], self.names('compute2'))
        _Net._assert_plugged(self, server, first, 'eth0')
        self.assertEqual({'VCPU': 1, 'MEMORY_MB': 128, 'DISK_GB': 0},
                         self.usage('compute1'))

        # 2. a second port
        self._attach_interface(server, second['id'])
        _Net._assert_plugged(self, server, second, 'eth1')
        _Net._assert_plugged(self, server, first, 'eth0')

        # 3. a volume, written through the container
        self._attach_volume(server, volume_id)
        mountpoint = self.api.get_server_volume(server['id'],
                                                volume_id)['device']
        self.assertTrue(mountpoint.startswith('/dev/'), mountpoint)
        marker = 'scenario-%s' % uuid.uuid4().hex[:8]
        self._write(server, mountpoint, marker)
        self._assert_on(server, 'compute1', 'lxd.small', [first, second],
                        volume_id, mountpoint, marker)

        # 4. resize to the bigger flavor, on compute1 (compute2 disabled)
        self._set_enabled('compute2', False)
        server = self._resize_server(server, self.big)
        self._assert_on(server, 'compute1', 'lxd.big', [first, second],
                        volume_id, mountpoint, marker)
        backup = 'nova-resize-%s' % server['id']
        self.assertEqual(sorted([name, backup]), self.names('compute1'))
        kept = self.lxd.instance(backup)
        self.assertEqual('Stopped', kept['status'])
        self.assertEqual('128MiB', kept['config']['limits.memory'])
        self.assertEqual({'VCPU': 3, 'MEMORY_MB': 384, 'DISK_GB': 0},
                         self.usage('compute1'))
        server = self._confirm_resize(server)
        self.assertEqual([name], self.names('compute1'))
        self._assert_on(server, 'compute1', 'lxd.big', [first, second],
                        volume_id, mountpoint, marker)
        self.assertEqual({'VCPU': 2, 'MEMORY_MB': 256, 'DISK_GB': 0},
                         self.usage('compute1'))
        self.assertEqual({'VCPU': 0, 'MEMORY_MB': 0, 'DISK_GB': 0},
                         self.usage('compute2'))

        # 5. cold migration to compute2
        self._set_enabled('compute2', True)
        server = self._migrate_server(server, host='compute2')
        self._assert_on(server, 'compute2', 'lxd.big', [first, second],
                        volume_id, mountpoint, marker)
        self.assertEqual([backup], self.names('compute1'))
        self.assertEqual('Stopped', self.lxd.instance(backup)['status'])
        server = self._confirm_resize(server)
        self.assertEqual([], self.names('compute1'))
        self.assertEqual([name], self.names('compute2'))
        self._assert_on(server, 'compute2', 'lxd.big', [first, second],
                        volume_id, mountpoint, marker)
        marker = 'on-compute2-%s' % uuid.uuid4().hex[:8]
        self._write(server, mountpoint, marker)
        self.assertEqual({'VCPU': 0, 'MEMORY_MB': 0, 'DISK_GB': 0},
                         self.usage('compute1'))
        self.assertEqual({'VCPU': 2, 'MEMORY_MB': 256, 'DISK_GB': 0},
                         self.usage('compute2'))

        # 6. delete: nothing left behind
        self._delete_server(server)
        self.assertEqual([], self.names('compute1'))
        self.assertEqual([], self.names('compute2'))
        for port in (first, second):
            _Net._assert_unplugged(self, port)
        self.assertEqual([], ovs.ovs_ports(self.bridge))
        self._assert_loop_unused()
        # the CinderFixture (ProviderUsageBaseTestCase keeps no reference)
        cinder = cinder_api.API.attachment_delete.side_effect.__self__
        self.assertEqual({}, cinder.volume_to_attachment[volume_id])
        self.assertEqual({}, self._get_allocations_by_server_uuid(
            server['id']))
        for host in HOSTS:
            self.assertEqual({'VCPU': 0, 'MEMORY_MB': 0, 'DISK_GB': 0},
                             self.usage(host))
