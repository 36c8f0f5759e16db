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

"""Resize and cold migration against real LXD daemons.

Same-host resize runs on the main daemon. Cold migration needs a second
daemon: tools/lxd-peer-up.sh [--incus] starts one (by default
LXD_DIR=/var/lib/lxd-peer, https://127.0.0.1:8444) that trusts the main one
(https://127.0.0.1:8443) and the client certificate the driver presents;
the addresses come from the environment (tests/fixtures/lxd_fixtures.py).
The tests fail, and say so, when it is not running.
"""

import json
import os
import subprocess
from unittest import mock
import uuid

import fixtures
from nova import exception as nova_exception
from nova.virt import driver as virt_driver

from nova_lxd_accel.container import identity
from nova_lxd_accel.instance import migration
from tests.fixtures import lxd_fixtures
from tests.fixtures import peer


class SameHostResizeTest(peer.MigrationTestBase):

    def _resize(self, instance, flavor):
        mig = self.migration(instance, self.host, self.host)
        disk_info = self.driver.migrate_disk_and_power_off(
            self.context, instance, '127.0.0.1', flavor, None, None, 5, 1)
        self.assertTrue(json.loads(disk_info)['same_host'])
        # what nova does between the two calls
        instance.old_flavor = instance.flavor
        instance.flavor = flavor
        self.driver.finish_migration(self.context, mig, instance, disk_info,
                                     None, self.image, True, {}, None, True)
        return mig

    def test_resize_confirm(self):
        instance = self.spawn(vcpus=1, memory_mb=128)
        self.write(instance, 'before resize')
        name = self.container_name(instance)
        backup = 'nova-resize-%s' % instance.uuid
        mig = self._resize(instance, self.new_flavor(
            extra_specs={'lxd:processes': '300'}))

        record = self.container(instance)
        self.assertEqual('Running', record['status'])
        self.assertEqual('2', record['config']['limits.cpu'])
        self.assertEqual('256MiB', record['config']['limits.memory'])
        self.assertEqual('300', record['config']['limits.processes'])
        self.assertEqual(self.host, record['config'][identity.KEY_HOST])
        self.assertEqual(b'before resize', peer.read_file(
            self.project.client, name, '/root/hello'))
        # the original is kept, stopped, as it was, and not an instance
        kept = self.project.instance(backup)
        self.assertEqual('Stopped', kept['status'])
        self.assertEqual('1', kept['config']['limits.cpu'])
        self.assertEqual('128MiB', kept['config']['limits.memory'])
        self.assertNotIn(identity.KEY_HOST, kept['config'])
        self.assertEqual(self.host, kept['config'][identity.KEY_BACKUP_OF])
        self.assertEqual([name], self.driver.list_instances())
        self.assertEqual([instance.uuid], self.driver.list_instance_uuids())

        self.driver.confirm_migration(self.context, mig, instance, None)
        self.assertEqual([name], self.container_names())
        self.assertEqual('256MiB', self.container(instance)['config'][
            'limits.memory'])
        self.driver.destroy(self.context, instance, None)
        self.assertEqual([], self.container_names())

    def _fits(self, instance, mib):
        """Whether ``mib`` MiB can be written into the root file system."""
        code, _out, _err = lxd_fixtures.execute(
            self.project.client, self.container_name(instance),
            'dd if=/dev/zero of=/root/fill bs=1M count=%d; rc=$?; '
            'rm -f /root/fill; exit $rc' % mib)
        return code == 0

    def test_root_disk_size_follows_the_flavor(self):
        # The root disk gets the flavor's root_gb as its size; pools that
        # enforce it (btrfs here; the dir pool sets no quota) refuse a
        # write past it, and a resize to a bigger disk lets it through.
        instance = self.spawn(vcpus=1, memory_mb=128, root_gb=1)
        self.assertEqual('1GiB', self.container(instance)['devices'][
            'root']['size'])
        if lxd_fixtures.pool_driver() == 'btrfs':
            self.assertFalse(self._fits(instance, 1200))
        self._resize(instance, self.new_flavor(root_gb=2))
        self.assertEqual('2GiB', self.container(instance)['devices'][
            'root']['size'])
        self.assertTrue(self._fits(instance, 1200))

    def test_resize_revert(self):
        instance = self.spawn(vcpus=1, memory_mb=128)
        before = self.container(instance)
        mig = self._resize(instance, self.new_flavor())
        self.assertEqual('256MiB', self.container(instance)['config'][
            'limits.memory'])
        # nova's revert_resize destroys the instance on the destination
        # (this host) first, then finish_revert_resize runs on the source.
        instance.flavor = instance.old_flavor
        self.driver.destroy(self.context, instance, None)
        self.driver.finish_revert_migration(self.context, instance, None,
                                            mig, None, True)
        after = self.container(instance)
        self.assertEqual('Running', after['status'])
        self.assertEqual([self.container_name(instance)],
                         self.container_names())

        def stable(record):
            return ({k: v for k, v in record['config'].items()
                     if not k.startswith('volatile.')}, record['devices'])
        self.assertEqual(stable(before), stable(after))

    def test_refused_flavor_leaves_instance_running(self):
        instance = self.spawn()
        self.migration(instance, self.host, self.host)
        self.assertRaises(
            nova_exception.InstanceFaultRollback,
            self.driver.migrate_disk_and_power_off, self.context, instance,
            '127.0.0.1', self.new_flavor(swap=512), None, None, 5, 1)
        self.assertEqual('Running', self.container(instance)['status'])
        self.assertEqual([self.container_name(instance)],
                         self.container_names())


class ColdMigrationTest(peer.MigrationTestBase):
    """From the main daemon (host A) to the peer daemon (host B)."""

    def setUp(self):
        peer.require_peer(self)
        super(ColdMigrationTest, self).setUp()
        self.peer = self.useFixture(peer.PeerProject(self.project.name))
        self.peer_host = self.host + '-b'
        peer.migration_flags(self, {
            self.host: (peer.MAIN_URL, peer.MAIN_DIR),
            self.peer_host: (peer.PEER_URL, peer.PEER_DIR)})
        # The client connects at its first call and keeps its connection:
        # the main driver has connected (init_host), the peer's connects
        # to the endpoint set now.
        self.flags(endpoint=peer.PEER_SOCKET, group='lxd')
        self.peer_driver = virt_driver.load_compute_driver(
            None, 'lxd_accel.LXDDriver')
        self.peer_driver.init_host(self.peer_host)
        self.addCleanup(self.peer_driver.cleanup_host, self.peer_host)
        self.flags(endpoint=None, group='lxd')

    def peer_names(self):
        return sorted(r['name'] for r in self.peer.instances())

    def _migrate(self, instance):
        mig = self.migration(instance, self.host, self.peer_host)
        disk_info = self.driver.migrate_disk_and_power_off(
            self.context, instance, '127.0.0.1', instance.flavor, None,
            None, 5, 1)
        self.assertFalse(json.loads(disk_info)['same_host'])
        name = self.container_name(instance)
        self.assertEqual('Stopped', self.peer.instance(name)['status'])
        self.assertEqual(['nova-resize-%s' % instance.uuid],
                         self.container_names())
        instance.host = self.peer_host
        self.peer_driver.finish_migration(
            self.context, mig, instance, disk_info, None, self.image, False,
            {}, None, True)
        return mig

    def test_migrate_confirm(self):
        instance = self.spawn(vcpus=1, memory_mb=128)
        self.write(instance, 'moved between daemons')
        name = self.container_name(instance)
        mig = self._migrate(instance)

        record = self.peer.instance(name)
        self.assertEqual('Running', record['status'])
        self.assertEqual(self.peer_host,
                         record['config'][identity.KEY_HOST])
        self.assertEqual('128MiB', record['config']['limits.memory'])
        self.assertEqual(b'moved between daemons', peer.read_file(
            self.peer.client, name, '/root/hello'))
        self.assertEqual([instance.uuid],
                         self.peer_driver.list_instance_uuids())
        self.assertEqual([], self.driver.list_instance_uuids())

        self.driver.confirm_migration(self.context, mig, instance, None)
        self.assertEqual([], self.container_names())
        self.peer_driver.destroy(self.context, instance, None)
        self.assertEqual([], self.peer_names())

    def test_migrate_revert(self):
        instance = self.spawn(vcpus=1, memory_mb=128)
        self.write(instance, 'still here')
        mig = self._migrate(instance)
        # nova: revert_resize on the destination, then finish on source
        self.peer_driver.destroy(self.context, instance, None)
        instance.host = self.host
        self.driver.finish_revert_migration(self.context, instance, None,
                                            mig, None, True)
        self.assertEqual([], self.peer_names())
        name = self.container_name(instance)
        self.assertEqual([name], self.container_names())
        record = self.container(instance)
        self.assertEqual('Running', record['status'])
        self.assertEqual(self.host, record['config'][identity.KEY_HOST])
        self.assertNotIn(identity.KEY_BACKUP_OF, record['config'])
        self.assertEqual(b'still here', peer.read_file(
            self.project.client, name, '/root/hello'))
        self.driver.destroy(self.context, instance, None)

    def test_the_ephemeral_disk_moves_with_its_data(self):
        instance = self.make_instance(vcpus=1, memory_mb=128)
        instance.flavor.ephemeral_gb = 1
        self.driver.spawn(self.context, instance, self.image, [], None, {})
        name = self.container_name(instance)
        volume = name + '-ephemeral0'
        pool = lxd_fixtures.pool_name()
        self.driver._parts.client.push_file(name, '/mnt/hello',
                                            b'on the ephemeral disk')
        mig = self._migrate(instance)
        self.assertEqual(b'on the ephemeral disk', peer.read_file(
            self.peer.client, name, '/mnt/hello'))
        # kept on the source for a revert until the move is confirmed
        self.assertIsNotNone(self.project.custom_volume(pool, volume))
        self.driver.confirm_migration(self.context, mig, instance, None)
        self.assertIsNone(self.project.custom_volume(pool, volume))
        self.peer_driver.destroy(self.context, instance, None)
        self.assertIsNone(self.peer.custom_volume(pool, volume))

    def test_the_destination_masks_its_own_profiles(self):
        # issue 43 item 11: the container gets the destination's [lxd]
        # profiles there, their unsafe content masked by the destination's
        # own check (strip mode), whatever the source had
        name = 'nova-lxd-accel-%s' % uuid.uuid4().hex[:10]
        self.peer.admin.api.profiles.post(json={
            'name': name,
            'config': {'security.syscalls.intercept.mknod': 'true'},
            'devices': {'hostdir': {'type': 'disk', 'source': '/tmp',
                                    'path': '/mnt/hostdir'}}})
        self.addCleanup(self.peer.admin.api.profiles[name].delete)
        instance = self.spawn(vcpus=1, memory_mb=128)
        # before the profile goes: LXD keeps a profile in use
        self.addCleanup(self.peer_driver.destroy, self.context, instance,
                        None)
        self.flags(profiles=[name], unsafe_profile_content='strip',
                   group='lxd')
        self.peer_driver._parts.host.check()     # the peer's init_host
        mig = self._migrate(instance)
        record = self.peer.instance(self.container_name(instance))
        self.assertEqual('Running', record['status'])
        self.assertEqual([name], record['profiles'])
        self.assertEqual('false', record['expanded_config'][
            'security.syscalls.intercept.mknod'])
        self.assertEqual('none', record['expanded_devices']['hostdir'][
            'type'])
        self.driver.confirm_migration(self.context, mig, instance, None)
        self.peer_driver.destroy(self.context, instance, None)
        self.assertEqual([], self.peer_names())

    def test_unreachable_destination_rolls_back(self):
        instance = self.spawn()
        self.flags(endpoints={self.peer_host: 'https://127.0.0.1:9'},
                   group='lxd_migration')
        self.migration(instance, self.host, self.peer_host)
        exc = self.assertRaises(
            nova_exception.InstanceFaultRollback,
            self.driver.migrate_disk_and_power_off, self.context, instance,
            '127.0.0.1', instance.flavor, None, None, 5, 1)
        self.assertIn('127.0.0.1:9', str(exc.inner_exception))
        self.assertEqual([self.container_name(instance)],
                         self.container_names())
        self.assertEqual('Running', self.container(instance)['status'])
        self.assertEqual([], self.peer_names())

    def test_untrusted_client_rolls_back(self):
        instance = self.spawn()
        # a certificate no daemon trusts
        tmp = self.useFixture(fixtures.TempDir()).path
        cert, key = os.path.join(tmp, 'c.crt'), os.path.join(tmp, 'c.key')
        subprocess.run(['openssl', 'req', '-x509', '-newkey', 'ec',
                        '-pkeyopt', 'ec_paramgen_curve:prime256v1',
                        '-nodes', '-days', '1', '-subj', '/CN=untrusted',
                        '-keyout', key, '-out', cert], check=True,
                       capture_output=True)
        self.flags(client_cert=cert, client_key=key, group='lxd_migration')
        self.migration(instance, self.host, self.peer_host)
        with mock.patch.object(migration.LOG, 'error'):
            exc = self.assertRaises(
                nova_exception.InstanceFaultRollback,
                self.driver.migrate_disk_and_power_off, self.context,
                instance, '127.0.0.1', instance.flavor, None, None, 5, 1)
        self.assertIn('lxc config trust add', str(exc.inner_exception))
        self.assertEqual('Running', self.container(instance)['status'])
