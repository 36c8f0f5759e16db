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

"""The MPS client limits reach logins, cron and services (issue 29).

The host of :mod:`test_gpu_sharing` (its first A100 shared in 2 slots,
GPU devices faked at LXD's HTTP boundary only). The files are read back
from the real daemon (its file API, not through the driver's proxy or
client), from the container nova made and started.
"""

import os

from pylxd import exceptions as lxd_exceptions

from nova_lxd_accel.accel.binding import mps_environment
from tests.fixtures import shared_gpu_servers

PCI = shared_gpu_servers.SHARED_PCI


class MpsEnvironmentTest(shared_gpu_servers.SharedGpuTestBase):

    # the base's host, its shared A100 in quota mode (MPS limits)
    mode = 'quota'

    def quota_flavor(self, memory_mb, compute_percent):
        return self._create_flavor(
            memory_mb=128, vcpu=1, disk=0, ephemeral=0, extra_spec={
                # slot and memory from one card: one numbered group
                'resources1:%s' % shared_gpu_servers.SHARE_RC: '1',
                'resources1:%s' % shared_gpu_servers.MEMORY_RC: str(memory_mb),
                'lxd:gpu_memory_mb': str(memory_mb),
                'lxd:isolated_idmap': 'false',
                'lxd:gpu_compute_percent': str(compute_percent)})

    def read(self, server, path):
        """The file in the container, from the daemon; None if absent."""
        files = self.lxd.client.api.instances[
            'nova-%s' % server['id']].files
        try:
            return files.get(params={'path': path},
                             is_api=False).content.decode('utf-8')
        except lxd_exceptions.NotFound:
            return None

    def mps_config(self, server):
        return {k: v for k, v in self.container_of(server)['config'].items()
                if k.startswith('environment.CUDA_MPS_')}

    def assert_limits(self, server, memory_mb, percent):
        pipe = os.path.join(self.mps_root, 'mps-' + PCI)
        assignments = ['CUDA_MPS_PIPE_DIRECTORY=%s' % pipe,
                       'CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=%dM' % memory_mb,
                       'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%d' % percent]
        # pam_env: sshd, login, su, cron
        environment = self.read(server, '/etc/environment')
        self.assertIsNotNone(environment, 'no /etc/environment')
        self.assertEqual(
            [mps_environment.BEGIN] + assignments + [mps_environment.END],
            environment.splitlines()[-5:])
        # every service of the system manager and of users' managers
        for path in ('/etc/systemd/system.conf.d/nvidia-mps.conf',
                     '/etc/systemd/user.conf.d/nvidia-mps.conf'):
            text = self.read(server, path)
            self.assertIsNotNone(text, path)
            lines = text.splitlines()
            self.assertIn('[Manager]', lines)
            self.assertIn('DefaultEnvironment=' + ' '.join(assignments),
                          lines)
        # and, as before, init and `lxc exec`
        self.assertEqual({'environment.' + a.split('=', 1)[0]:
                          a.split('=', 1)[1] for a in assignments},
                         self.mps_config(server))

    def assert_no_limits(self, server):
        environment = self.read(server, '/etc/environment') or ''
        self.assertNotIn('CUDA_MPS', environment)
        for path in mps_environment.DROPINS:
            self.assertIsNone(self.read(server, path), path)
        self.assertEqual({}, self.mps_config(server))
        # nor the mounts of the MPS daemon's pipe and shared memory
        self.assertEqual([], [name for name in self.container_of(server)[
            'devices'] if name.startswith('mps-')])

    def test_files_of_a_quota_flavor(self):
        server = self.wait_built(self.post(self.quota_flavor(8192, 50)))
        self.assertEqual('ACTIVE', server['status'], server.get('fault'))
        self.assert_limits(server, 8192, 50)

    def test_resize_rewrites_and_removes_them(self):
        server = self.wait_built(self.post(self.quota_flavor(8192, 50)))
        self.assertEqual('ACTIVE', server['status'], server.get('fault'))
        self.assert_limits(server, 8192, 50)
        # other limits on the same card: rewritten, not appended
        server = self._confirm_resize(self._resize_server(
            server, self.quota_flavor(16384, 25)))
        self.assert_limits(server, 16384, 25)
        # the whole other A100, no MPS: nothing left of the old limits
        server = self._confirm_resize(self._resize_server(
            server, self.flavor(**{'resources:PGPU': '1'})))
        self.assertEqual([('pgpu', 'pci:0000:85:00.0', None)],
                         self.units(server))
        self.assert_no_limits(server)

    def keep_uploaded_image_data(self):
        """Glance keeps what an upload sends (nova's fixture drops it)."""
        update = self.glance.update

        def keeping(context, image_id, metadata, data=None, **kwargs):
            if data is not None:
                self.glance._imagedata[image_id] = data.read()
            return update(context, image_id, metadata, **kwargs)

        # nova's compute gets this fixture itself as its image service
        self.glance.update = keeping
        self.addCleanup(vars(self.glance).pop, 'update', None)

    def snapshot(self, server):
        image_id = self.api.post_server_action(
            server['id'], {'createImage': {'name': 'with-mps'}})['image_id']
        self._wait_for_server_parameter(server, {'OS-EXT-STS:task_state':
                                                 None})
        image = self.glance.show(None, image_id)
        self.assertTrue(self.glance._imagedata.get(image_id), 'no data')
        return image

    def boot_from(self, image, flavor_id):
        server = self.wait_built(self.api.post_server({
            'server': self._build_server(image_uuid=image['id'],
                                         flavor_id=flavor_id,
                                         networks='none')}))
        self.assertEqual('ACTIVE', server['status'], server.get('fault'))
        return server

    def test_a_snapshot_does_not_carry_them_to_another_server(self):
        self.keep_uploaded_image_data()
        source = self.wait_built(self.post(self.quota_flavor(8192, 50)))
        self.assertEqual('ACTIVE', source['status'], source.get('fault'))
        self.assert_limits(source, 8192, 50)
        image = self.snapshot(source)
        self.assertEqual('written', image['properties'].get(
            mps_environment.SNAPSHOT_PROPERTY))
        self._delete_server(source)
        # the files are in the image: no flavor of a GPU keeps them
        plain = self.boot_from(image, self.flavor())
        self.assert_no_limits(plain)
        whole = self.boot_from(image, self.flavor(**{'resources:PGPU': '1'}))
        self.assert_no_limits(whole)
        # and a quota flavor has its own limits, once
        quota = self.boot_from(image, self.quota_flavor(16384, 25))
        self.assert_limits(quota, 16384, 25)

    def test_a_snapshot_without_limits_is_not_marked(self):
        self.keep_uploaded_image_data()
        source = self.wait_built(self.post(self.flavor()))
        self.assertEqual('ACTIVE', source['status'], source.get('fault'))
        image = self.snapshot(source)
        self.assertNotIn(mps_environment.SNAPSHOT_PROPERTY,
                         image['properties'])
