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

"""Resize, cold migration, evacuate and rebuild through nova's own cloud.

Real nova API/conductor/scheduler/computes and Placement, this driver and
real LXD daemons: compute1 uses the main daemon; compute2 (in the
two-host tests) the peer daemon that tools/lxd-peer-up.sh starts, which
must run (the tests fail and say so otherwise).
"""

import json

from nova_lxd_accel.container import identity
from tests.fixtures import accel_servers
from tests.fixtures import lxd_fixtures
from tests.fixtures import peer
from tests.functional import base

MAIN_DIR = peer.MAIN_DIR


class _Base(base.LXDFunctionalTestCase):

    def setUp(self):
        super(_Base, self).setUp()
        self.flavor1 = self._create_flavor(memory_mb=128, vcpu=1, disk=0,
                                           ephemeral=0, name='lxd.small')
        self.flavor2 = self._create_flavor(memory_mb=256, vcpu=2, disk=0,
                                           ephemeral=0, name='lxd.big')

    def container_name(self, server):
        return 'nova-%s' % server['id']

    def backup_name(self, server):
        return 'nova-resize-%s' % server['id']

    def usage(self, host):
        return self._get_provider_usages(
            self._get_provider_uuid_by_host(host))


class SameHostResizeTest(_Base):

    def setUp(self):
        self.flags(allow_resize_to_same_host=True)
        super(SameHostResizeTest, self).setUp()

    def _boot(self):
        server = self._create_server(image_uuid=self.image_id,
                                     flavor_id=self.flavor1,
                                     networks='none')
        self.assertEqual('128MiB', self.container_of(server)['config'][
            'limits.memory'])
        return server

    def test_resize_confirm(self):
        server = self._boot()
        server = self._resize_server(server, self.flavor2)
        self.assertEqual('compute1', server['OS-EXT-SRV-ATTR:host'])
        record = self.container_of(server)
        self.assertEqual('Running', record['status'])
        self.assertEqual('2', record['config']['limits.cpu'])
        self.assertEqual('256MiB', record['config']['limits.memory'])
        kept = self.lxd.instance(self.backup_name(server))
        self.assertEqual('Stopped', kept['status'])
        self.assertEqual('128MiB', kept['config']['limits.memory'])
        # Placement holds both flavors until the resize is confirmed
        self.assertEqual({'VCPU': 3, 'MEMORY_MB': 384, 'DISK_GB': 0},
                         self.usage('compute1'))

        server = self._confirm_resize(server)
        self.assertEqual(['nova-%s' % server['id']], self.container_names())
        self.assertEqual('256MiB', self.container_of(server)['config'][
            'limits.memory'])
        self.assertEqual({'VCPU': 2, 'MEMORY_MB': 256, 'DISK_GB': 0},
                         self.usage('compute1'))
        self._delete_server(server)
        self.assertEqual([], self.container_names())
        self.assertEqual({'VCPU': 0, 'MEMORY_MB': 0, 'DISK_GB': 0},
                         self.usage('compute1'))

    def test_resize_revert(self):
        server = self._boot()
        before = self.container_of(server)
        server = self._resize_server(server, self.flavor2)
        server = self._revert_resize(server)
        after = self.container_of(server)
        self.assertEqual('Running', after['status'])
        self.assertEqual('1', after['config']['limits.cpu'])
        self.assertEqual('128MiB', after['config']['limits.memory'])
        self.assertEqual(before['devices'], after['devices'])
        self.assertEqual(['nova-%s' % server['id']], self.container_names())
        self.assertEqual({'VCPU': 1, 'MEMORY_MB': 128, 'DISK_GB': 0},
                         self.usage('compute1'))
        self._delete_server(server)
        self.assertEqual([], self.container_names())

    def test_resize_stopped_server_stays_stopped(self):
        server = self._boot()
        server = self._stop_server(server)
        server = self._resize_server(server, self.flavor2)
        self.assertEqual('Stopped', self.container_of(server)['status'])
        self.assertEqual('256MiB', self.container_of(server)['config'][
            'limits.memory'])
        self.api.post_server_action(server['id'], {'confirmResize': None})
        self._wait_for_migration_status(server, ['confirmed'])
        server = self._wait_for_state_change(server, 'SHUTOFF')
        self.assertEqual([self.container_name(server)],
                         self.container_names())
        self._delete_server(server)
        self.assertEqual([], self.container_names())

    def test_refused_flavor_keeps_server(self):
        server = self._boot()
        swap = self._create_flavor(memory_mb=256, vcpu=1, disk=0,
                                   ephemeral=0, swap=512, name='lxd.swap')
        self.api.post_server_action(server['id'],
                                    {'resize': {'flavorRef': swap}})
        self._wait_for_migration_status(server, ['error'])
        server = self._wait_for_state_change(server, 'ACTIVE')
        self.assertEqual('Running', self.container_of(server)['status'])
        self.assertEqual(['nova-%s' % server['id']], self.container_names())
        self._delete_server(server)


class TwoHostTest(_Base):
    """compute1 on the main LXD daemon, compute2 on the peer daemon."""

    compute_hosts = ()

    def setUp(self):
        peer.require_peer(self)
        peer.per_host_node_uuids(self)
        super(TwoHostTest, self).setUp()
        self.peer = self.useFixture(peer.PeerProject(self.lxd.name))
        peer.migration_flags(self, {
            'compute1': (peer.MAIN_URL, MAIN_DIR),
            'compute2': (peer.PEER_URL, peer.PEER_DIR)})
        # Each driver's LXD client connects at init_host and keeps that
        # connection; only after a connection error does it reconnect, with
        # the [lxd] endpoint current at that time (the last one set here).
        self._start_compute('compute1')
        self.flags(endpoint=peer.PEER_SOCKET, group='lxd')
        self._start_compute('compute2')
        self.flags(endpoint=None, group='lxd')

    def daemon(self, host):
        return self.lxd if host == 'compute1' else self.peer

    def names(self, host):
        return sorted(r['name'] for r in self.daemon(host).instances())

    def _boot(self, host):
        server = self._create_server(image_uuid=self.image_id,
                                     flavor_id=self.flavor1,
                                     networks='none', host=host)
        self.assertEqual(host, server['OS-EXT-SRV-ATTR:host'])
        self.assertEqual('Running', self.daemon(host).instance(
            'nova-%s' % server['id'])['status'])
        return server

    def assert_gone(self, server):
        self.assertEqual([], self.names('compute1'))
        self.assertEqual([], self.names('compute2'))
        self.assertEqual({}, self._get_allocations_by_server_uuid(
            server['id']))
        for host in ('compute1', 'compute2'):
            self.assertEqual({'VCPU': 0, 'MEMORY_MB': 0, 'DISK_GB': 0},
                             self.usage(host))

    def test_cold_migrate_confirm(self):
        server = self._boot('compute1')
        name = 'nova-%s' % server['id']
        self.lxd.client.instances.get(name).files.put(
            '/root/hello', b'from compute1')
        server = self._migrate_server(server, host='compute2')
        self.assertEqual('compute2', server['OS-EXT-SRV-ATTR:host'])
        moved = self.peer.instance(name)
        self.assertEqual('Running', moved['status'])
        self.assertEqual('compute2', moved['config'][identity.KEY_HOST])
        self.assertEqual(b'from compute1', self.peer.client.instances.get(
            name).files.get('/root/hello'))
        # the source keeps the original, stopped, until confirmed
        self.assertEqual([self.backup_name(server)], self.names('compute1'))
        self.assertEqual('Stopped', self.lxd.instance(
            self.backup_name(server))['status'])

        server = self._confirm_resize(server)
        self.assertEqual([], self.names('compute1'))
        self.assertEqual([name], self.names('compute2'))
        self.assertEqual({'VCPU': 0, 'MEMORY_MB': 0, 'DISK_GB': 0},
                         self.usage('compute1'))
        self.assertEqual({'VCPU': 1, 'MEMORY_MB': 128, 'DISK_GB': 0},
                         self.usage('compute2'))
        self._delete_server(server)
        self.assert_gone(server)

    def test_resize_to_other_host_revert(self):
        server = self._boot('compute1')
        name = 'nova-%s' % server['id']
        self.lxd.client.instances.get(name).files.put(
            '/root/hello', b'stays')
        server = self._resize_server(server, self.flavor2)
        self.assertEqual('compute2', server['OS-EXT-SRV-ATTR:host'])
        self.assertEqual('256MiB', self.peer.instance(name)['config'][
            'limits.memory'])

        server = self._revert_resize(server)
        self.assertEqual('compute1', server['OS-EXT-SRV-ATTR:host'])
        self.assertEqual([], self.names('compute2'))
        self.assertEqual([name], self.names('compute1'))
        record = self.lxd.instance(name)
        self.assertEqual('Running', record['status'])
        self.assertEqual('128MiB', record['config']['limits.memory'])
        self.assertEqual('compute1', record['config'][identity.KEY_HOST])
        self.assertNotIn(identity.KEY_BACKUP_OF, record['config'])
        self.assertEqual(b'stays', self.lxd.client.instances.get(
            name).files.get('/root/hello'))
        self._delete_server(server)
        self.assert_gone(server)

    def test_ephemeral_disk_moves_to_another_host(self):
        # the volume at /mnt moves with its data, before the container
        eph = self._create_flavor(memory_mb=128, vcpu=1, disk=0,
                                  ephemeral=1, name='lxd.eph')
        server = self._create_server(image_uuid=self.image_id,
                                     flavor_id=eph, networks='none',
                                     host='compute1')
        name = 'nova-%s' % server['id']
        volume = name + '-ephemeral0'
        pool = lxd_fixtures.pool_name()
        self.lxd.client.instances.get(name).files.put(
            '/mnt/hello', b'ephemeral data')
        server = self._migrate_server(server, host='compute2')
        self.assertEqual('compute2', server['OS-EXT-SRV-ATTR:host'])
        self.assertEqual(b'ephemeral data', self.peer.client.instances.get(
            name).files.get('/mnt/hello'))
        self.assertEqual('1GiB', self.peer.custom_volume(
            pool, volume)['config']['size'])
        # the source keeps its copy for a revert until confirmed
        self.assertIsNotNone(self.lxd.custom_volume(pool, volume))
        server = self._confirm_resize(server)
        self.assertIsNone(self.lxd.custom_volume(pool, volume))
        self._delete_server(server)
        self.assertIsNone(self.peer.custom_volume(pool, volume))
        self.assert_gone(server)

    def test_evacuate(self):
        server = self._boot('compute1')
        self.computes['compute1'].stop()
        service_id = self.api.get_services(
            host='compute1', binary='nova-compute')[0]['id']
        self.api.put_service_force_down(service_id, True)
        # since API 2.95 the evacuated server is left stopped
        server = self._evacuate_server(server, expected_host='compute2')
        name = 'nova-%s' % server['id']
        self.assertEqual('Stopped', self.peer.instance(name)['status'])
        server = self._start_server(server)
        self.assertEqual('Running', self.peer.instance(name)['status'])
        # the old host still has the container until nova-compute restarts
        self.assertEqual([name], self.names('compute1'))
        # the restarted compute deletes the evacuated instance's container
        self.computes['compute1'] = self.restart_compute_service(
            self.computes['compute1'])
        self.assertEqual([], self.names('compute1'))
        self._wait_for_migration_status(server, ['completed'])
        self.api.put_service_force_down(service_id, False)
        self._delete_server(server)
        self.assert_gone(server)

    def test_live_migration_is_refused(self):
        server = self._boot('compute1')
        self.api.post_server_action(
            server['id'], {'os-migrateLive': {'host': 'compute2',
                                              'block_migration': 'auto'}})
        self._wait_for_migration_status(server, ['error'])
        server = self._wait_for_state_change(server, 'ACTIVE')
        self.assertEqual('compute1', server['OS-EXT-SRV-ATTR:host'])
        self.assertEqual('Running', self.lxd.instance(
            'nova-%s' % server['id'])['status'])
        self._delete_server(server)
        self.assert_gone(server)


class AcceleratorResizeTest(accel_servers.AccelTestBase):
    """Re-binding from the new allocation, through the accelerator proxy."""

    def setUp(self):
        self.flags(allow_resize_to_same_host=True)
        super(AcceleratorResizeTest, self).setUp()

    def units(self, server):
        record = self.record(server)
        return sorted(u['unit'] for u in identity.recorded_units(
            record['config']))

    def test_pgpu_to_mig_and_back(self):
        gpu = self.flavor(**{'resources:PGPU': '1'})
        mig = self.flavor(**{'resources:CUSTOM_MIG_1G_10GB': '1'})
        server = self.boot(gpu)
        before = self.accel_devices(server)
        self.assertEqual(['nova-gpu0'], list(before))

        server = self._resize_server(server, mig)
        devices = self.accel_devices(server)
        self.assertEqual(['nova-mig0'], list(devices))
        self.assertEqual('mig', devices['nova-mig0']['gputype'])
        self.assertEqual({accel_servers.H100: {
            'CUSTOM_MIG_1G_10GB': 1}}, self.accel_allocations(server))
        self.assertEqual('true', self.record(server)['config'][
            'nvidia.runtime'])

        server = self._revert_resize(server)
        self.assertEqual(before, self.accel_devices(server))
        self.assertNotIn('nvidia.runtime', self.record(server)['config'])
        self._delete_server(server)
        self.assertEqual([], self.container_names())

    def test_resize_confirm_keeps_units_distinct(self):
        gpu = self.flavor(**{'resources:PGPU': '1'})
        gpu_big = self._create_flavor(memory_mb=256, vcpu=1, disk=0,
                                      ephemeral=0,
                                      extra_spec={'resources:PGPU': '1'})
        server = self.boot(gpu)
        old = self.units(server)
        server = self._resize_server(server, gpu_big)
        # the kept original still holds its GPU: the new one is the other
        new = self.units(server)
        self.assertEqual(1, len(new))
        self.assertNotEqual(old, new)
        server = self._confirm_resize(server)
        self.assertEqual(new, self.units(server))
        self._delete_server(server)
        self.assertEqual([], self.container_names())

    def test_rebuild_rebinds(self):
        server = self.boot(self.flavor(**{'resources:PGPU': '1'}))
        before = self.container_of(server)
        allocations = self.accel_allocations(server)
        server = self._rebuild_server(server, self.image_id)
        after = self.container_of(server)
        # a new container (destroy + spawn), bound to the allocation again
        self.assertNotEqual(before['config']['volatile.uuid'],
                            after['config']['volatile.uuid'])
        self.assertEqual(allocations, self.accel_allocations(server))
        record = json.loads(self.record(server)['config'][
            identity.KEY_DEVICES])
        self.assertEqual(['nova-gpu0'], [r['name'] for r in record])
        self._delete_server(server)
        self.assertEqual([], self.container_names())
