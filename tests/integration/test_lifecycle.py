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

"""The whole non-accelerator lifecycle against the real LXD daemon."""

from nova.compute import power_state
from nova.compute import task_states
from nova import exception as nova_exception

from nova_lxd_accel import exception
from tests.fixtures import fault_kit
from tests.fixtures import lxd_fixtures
from tests.integration import base


class LifecycleTest(base.DriverTestCase):

    def _spawn(self, instance, image=None, **kwargs):
        image = image or self.tiny_image()
        self.driver.spawn(self.context, instance, image, [], None, {},
                          **kwargs)
        return image

    def test_spawn_to_destroy(self):
        instance = self.make_instance(vcpus=1, memory_mb=96,
                                      extra_specs={'lxd:processes': '200'})
        self._spawn(instance)
        record = self.container(instance)
        self.assertEqual('Running', record['status'])
        config = record['config']
        self.assertEqual('1', config['limits.cpu'])
        self.assertEqual('96MiB', config['limits.memory'])
        self.assertEqual('200', config['limits.processes'])
        self.assertEqual('false', config['security.privileged'])
        self.assertEqual(instance.uuid,
                         config['user.nova_lxd_accel.instance_uuid'])
        self.assertEqual(power_state.RUNNING,
                         self.driver.get_info(instance).state)
        self.assertEqual([instance.uuid], self.driver.list_instance_uuids())
        self.assertTrue(self.driver.instance_exists(instance))

        self.driver.reboot(self.context, instance, None, 'SOFT')
        self.assertEqual('Running', self.container(instance)['status'])
        self.driver.reboot(self.context, instance, None, 'HARD')
        self.assertEqual('Running', self.container(instance)['status'])

        self.driver.power_off(instance, timeout=5, retry_interval=1)
        self.assertEqual('Stopped', self.container(instance)['status'])
        self.assertEqual(power_state.SHUTDOWN,
                         self.driver.get_info(instance).state)
        self.driver.power_on(self.context, instance, None)
        self.assertEqual('Running', self.container(instance)['status'])

        self.driver.pause(instance)
        self.assertEqual('Frozen', self.container(instance)['status'])
        self.assertEqual(power_state.PAUSED,
                         self.driver.get_info(instance).state)
        self.driver.unpause(instance)
        self.assertEqual('Running', self.container(instance)['status'])

        self.driver.suspend(self.context, instance)
        self.assertEqual(power_state.SUSPENDED,
                         self.driver.get_info(instance).state)
        self.driver.resume(self.context, instance, None)
        self.assertEqual(power_state.RUNNING,
                         self.driver.get_info(instance).state)

        console = self.driver.get_console_output(self.context, instance)
        self.assertIn(b'tiny init started', console)

        self.driver.destroy(self.context, instance, None)
        self.assertEqual([], self.container_names())
        self.assertFalse(self.driver.instance_exists(instance))
        # Destroying what is gone is not an error.
        self.driver.destroy(self.context, instance, None)

    def test_spawn_powered_off_and_injected_files(self):
        instance = self.make_instance()
        image = self.tiny_image()
        self.driver.spawn(self.context, instance, image,
                          [('/etc/motd', b'hello from nova\n')], None, {},
                          power_on=False)
        self.assertEqual('Stopped', self.container(instance)['status'])
        data = self.project.client.api.instances[
            self.container_name(instance)].files.get(
                params={'path': '/etc/motd'}, is_api=False).content
        self.assertEqual(b'hello from nova\n', data)

    def test_snapshot_uploads_an_lxd_image(self):
        instance = self.make_instance()
        self._spawn(instance)
        snapshot = self.glance.create(self.context, {
            'name': 'snap', 'status': 'queued'})
        states = []
        uploads = {}
        glance_update = self.glance.update

        def update(context, image_id, metadata, data=None, **kwargs):
            # GlanceFixture keeps metadata only; keep the bytes too.
            uploads[image_id] = data.read()
            return glance_update(context, image_id, metadata, **kwargs)

        self.glance.update = update

        def update_task_state(task_state, expected_state=None):
            states.append(task_state)

        self.driver.snapshot(self.context, instance, snapshot['id'],
                             update_task_state)
        self.assertEqual([task_states.IMAGE_PENDING_UPLOAD,
                          task_states.IMAGE_UPLOADING], states)
        uploaded = self.glance.show(self.context, snapshot['id'])
        self.assertEqual('raw', uploaded['disk_format'])
        # The snapshot boots: it is an LXD image again.
        clone = self.make_instance()
        self._spawn(clone, image=self.create_image(
            uploads[snapshot['id']], checksum='snap'))
        self.assertEqual('Running', self.container(clone)['status'])
        # No LXD snapshot is left on the source.
        self.assertEqual([], self.project.client.api.instances[
            self.container_name(instance)].snapshots.get().json()['metadata'])

    def test_rescue_and_unrescue(self):
        # on every pool the suite runs on (dir; btrfs in the -btrfs envs)
        instance = self.make_instance()
        image = self._spawn(instance)
        marker = 'written before the rescue %s' % instance.uuid
        self.project.execute(self.container_name(instance),
                             'echo "%s" > /root/marker' % marker)
        self.driver.rescue(self.context, instance, None, image, None, None,
                           None)
        rescue_name = 'nova-rescue-%s' % instance.uuid
        self.assertEqual('Stopped', self.container(instance)['status'])
        rescue = self.project.instance(rescue_name)
        self.assertEqual('Running', rescue['status'])
        self.assertEqual('/mnt/rescue', rescue['devices']['rescue']['path'])
        # the instance's own root file system, seen from the rescue one
        self.assertEqual(marker, self.project.execute(
            rescue_name, 'cat /mnt/rescue/root/marker').decode().strip())
        self.assertEqual(power_state.RUNNING,
                         self.driver.get_info(instance).state)
        self.driver.unrescue(self.context, instance)
        self.assertEqual([self.container_name(instance)],
                         self.container_names())
        self.assertEqual('Running', self.container(instance)['status'])

    def test_destroy_removes_rescue_container_too(self):
        instance = self.make_instance()
        image = self._spawn(instance)
        self.driver.rescue(self.context, instance, None, image, None, None,
                           None)
        self.driver.destroy(self.context, instance, None)
        self.assertEqual([], self.container_names())

    def test_no_guest_api_socket_unless_the_operator_keeps_it(self):
        # /dev/lxd (/dev/incus on Incus) would show the tenant every config
        # key, the driver's user.nova_lxd_accel.* ones included
        has_socket = 'test -S /dev/lxd/sock || test -S /dev/incus/sock'
        instance = self.make_instance()
        self._spawn(instance)
        key = self.driver._parts.host.policy().guest_api_key
        self.assertEqual('false', self.container(instance)['config'][key])
        code, _out, _err = lxd_fixtures.execute(
            self.project.client, self.container_name(instance), has_socket)
        self.assertNotEqual(0, code)
        # [lxd] devlxd = true: the daemon's default, the socket is there
        # (so the check above would see one)
        self.flags(devlxd=True, group='lxd')
        kept = self.make_instance()
        self._spawn(kept)
        self.assertNotIn(key, self.container(kept)['config'])
        self.project.execute(self.container_name(kept), has_socket)

    def test_own_user_id_range_by_default(self):
        # [lxd] isolated_idmap = true: each container's ids are a host
        # range no other container has; lxd:isolated_idmap=false shares
        # the daemon's one range (as an MPS quota share must)
        first, second = self.make_instance(), self.make_instance()
        shared = self.make_instance(
            extra_specs={'lxd:isolated_idmap': 'false'})
        bases = {}
        for instance in (first, second, shared):
            self._spawn(instance)
            record = self.container(instance)
            self.assertEqual('Running', record['status'])
            self.project.execute(self.container_name(instance), 'true')
            bases[instance.uuid] = (
                record['config']['security.idmap.isolated'],
                record['config']['volatile.idmap.base'])
        self.assertEqual('true', bases[first.uuid][0])
        self.assertEqual('true', bases[second.uuid][0])
        self.assertEqual('false', bases[shared.uuid][0])
        self.assertEqual(3, len({base for _, base in bases.values()}),
                         bases)


class FailureTest(base.DriverTestCase):

    def test_mps_quota_share_refused_in_an_isolated_container(self):
        # an MPS server serves one host user at a time: refused before
        # anything is made, rather than left to queue behind another
        # container's clients
        instance = self.make_instance(extra_specs={
            'resources1:CUSTOM_GPU_SHARE': '1',
            'resources1:CUSTOM_GPU_MEMORY_MB': '1024',
            'trait1:CUSTOM_GPU_SHARING_QUOTA': 'required',
            'lxd:gpu_memory_mb': '1024'})
        error = self.assertRaises(
            nova_exception.BuildAbortException, self.driver.spawn,
            self.context, instance, self.tiny_image(), [], None, {})
        self.assertIn('lxd:isolated_idmap=false', str(error))
        self.assertEqual([], self.container_names())

    def test_vm_disk_format_refused_before_download(self):
        image = self.create_image(b'QFI\xfb' + b'\0' * 100,
                                  disk_format='qcow2')
        instance = self.make_instance()
        error = self.assertRaises(
            nova_exception.ImageUnacceptable, self.driver.spawn,
            self.context, instance, image, [], None, {})
        self.assertIn('qcow2', str(error))
        self.assertEqual([], self.container_names())

    def test_garbage_image_refused(self):
        image = self.create_image(b'\0' * 4096)
        instance = self.make_instance()
        error = self.assertRaises(
            nova_exception.ImageUnacceptable, self.driver.spawn,
            self.context, instance, image, [], None, {})
        self.assertIn('neither a tarball nor a squashfs', str(error))
        self.assertEqual([], self.container_names())

    def test_privileged_flavor_refused_without_operator_consent(self):
        instance = self.make_instance(extra_specs={'lxd:privileged': 'true'})
        # Aborted, not rescheduled: every host refuses it the same way.
        error = self.assertRaises(
            nova_exception.BuildAbortException, self.driver.spawn,
            self.context, instance, self.tiny_image(), [], None, {})
        self.assertIn('allow_privileged_containers', str(error))
        self.assertEqual([], self.container_names())

    def test_start_failure_removes_container(self):
        # LXD accepts a GPU pinned to an absent PCI address at create time
        # and refuses to start the container ("Invalid PCI address (no
        # device found)"); spawn must not leave the created container behind.
        fault_kit.bad_gpu_profile(self, self.project)
        instance = self.make_instance()
        error = self.assertRaises(
            nova_exception.BuildAbortException, self.driver.spawn,
            self.context, instance, self.tiny_image(), [], None, {})
        self.assertIn('refused to start', str(error))
        self.assertIn('gpu0', str(error))
        self.assertEqual([], self.container_names())

    def test_unreachable_lxd(self):
        self.flags(endpoint='/nonexistent/lxd/unix.socket', group='lxd')
        driver = self.driver.__class__(None)
        error = self.assertRaises(exception.LXDUnreachable,
                                  driver.init_host, 'somewhere')
        self.assertIn('/nonexistent/lxd/unix.socket', str(error))
        self.assertIn('lxc info', str(error))

    def test_init_host_names_missing_pool(self):
        self.flags(storage_pool='no-such-pool', group='lxd')
        driver = self.driver.__class__(None)
        error = self.assertRaises(exception.LXDNotReady, driver.init_host,
                                  'somewhere')
        self.assertIn('storage pool "no-such-pool" does not exist',
                      str(error))
