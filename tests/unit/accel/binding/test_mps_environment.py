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

"""The MPS client environment files (issue 29): contents and their write.

The write runs against the real daemon in
``tests/functional/test_gpu_sharing_environment.py``; here the pure
contents, and which files a write touches, on a recording client.
"""

import json

from nova import objects
import testtools

from nova_lxd_accel.accel.binding import mps_environment
from nova_lxd_accel.accel.binding import sharing
from nova_lxd_accel.container import identity
from nova_lxd_accel.container import records

PCI = '0000:3b:00.0'
PIPE = '/run/nvidia-mps-0000:3b:00.0'
#: Ubuntu's own /etc/environment
UBUNTU = ('PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:'
          '/bin:/usr/games:/usr/local/games:/snap/bin"\n')
VARIABLES = {'CUDA_MPS_PIPE_DIRECTORY': PIPE,
             'CUDA_MPS_PINNED_DEVICE_MEM_LIMIT': '0=8192M',
             'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE': '50'}
ASSIGNMENTS = ['CUDA_MPS_PIPE_DIRECTORY=' + PIPE,
               'CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8192M',
               'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50']


class ContentsTest(testtools.TestCase):

    def setUp(self):
        super(ContentsTest, self).setUp()
        objects.register_all()

    def test_same_variables_as_the_lxd_config(self):
        _devices, config = sharing.lxd_config(PCI, 8192, 50)
        self.assertEqual(VARIABLES, mps_environment.variables_in(config))
        self.assertEqual(VARIABLES, sharing.mps_variables(PCI, 8192, 50))

    def test_files_from_the_lxd_config_inputs(self):
        out = sharing.environment_files(PCI, 8192, 50,
                                        current_environment=UBUNTU)
        self.assertEqual(
            UBUNTU + '\n'.join([mps_environment.BEGIN] + ASSIGNMENTS +
                               [mps_environment.END]) + '\n',
            out['/etc/environment'])
        for path in ('/etc/systemd/system.conf.d/nvidia-mps.conf',
                     '/etc/systemd/user.conf.d/nvidia-mps.conf'):
            lines = out[path].splitlines()
            self.assertIn('[Manager]', lines)
            self.assertIn('DefaultEnvironment=' + ' '.join(ASSIGNMENTS),
                          lines)
        self.assertEqual(3, len(out))

    def test_memory_only(self):
        out = sharing.environment_files(PCI, 4096)
        self.assertEqual(
            [mps_environment.BEGIN, 'CUDA_MPS_PIPE_DIRECTORY=' + PIPE,
             'CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M', mps_environment.END],
            out['/etc/environment'].splitlines())

    def test_no_quota_removes_them(self):
        written = sharing.environment_files(PCI, 8192, 50,
                                            current_environment=UBUNTU)
        out = sharing.environment_files(
            PCI, current_environment=written['/etc/environment'])
        self.assertEqual({'/etc/environment': UBUNTU,
                          mps_environment.SYSTEM_DROPIN: None,
                          mps_environment.USER_DROPIN: None}, out)
        self.assertEqual({}, sharing.mps_variables(PCI))

    def test_block_rewritten_in_place_of_the_old_one(self):
        old = mps_environment.with_block(UBUNTU, VARIABLES)
        # a line the tenant added after ours stays
        old += 'LANG=C.UTF-8\n'
        new = mps_environment.with_block(old, dict(
            VARIABLES, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE='25'))
        self.assertEqual(1, new.count(mps_environment.BEGIN))
        self.assertNotIn('PERCENTAGE=50', new)
        self.assertEqual(UBUNTU + 'LANG=C.UTF-8\n',
                         mps_environment.without_block(new))
        self.assertEqual(new, mps_environment.with_block(new, dict(
            VARIABLES, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE='25')))

    def test_image_file_without_block_untouched(self):
        self.assertEqual('A=1', mps_environment.with_block('A=1', {}))
        # the image's last line ends before our block begins
        self.assertTrue(mps_environment.with_block(
            'A=1', VARIABLES).startswith(
            'A=1\n' + mps_environment.BEGIN + '\n'))

    def test_values_neither_reader_takes_are_refused(self):
        for pipe in ('/run/mps dir', '/run/"mps"', '/run/$HOME', '/a\\b'):
            self.assertRaises(ValueError, sharing.environment_files, PCI,
                              1024, pipe_template=pipe)

    def test_flavor_has_quota(self):
        def flavor(**specs):
            return objects.Flavor(extra_specs=specs)

        self.assertTrue(mps_environment.flavor_has_quota(
            flavor(**{'lxd:gpu_memory_mb': '1024'})))
        self.assertTrue(mps_environment.flavor_has_quota(
            flavor(**{'lxd:gpu_compute_percent': '10'})))
        self.assertFalse(mps_environment.flavor_has_quota(
            flavor(**{'resources:PGPU': '1'})))
        self.assertFalse(mps_environment.flavor_has_quota(None))


class SnapshotMarkTest(testtools.TestCase):
    """A snapshot of a container with the files is marked; spawns read it."""

    def setUp(self):
        super(SnapshotMarkTest, self).setUp()
        objects.register_all()

    def test_marked_only_with_limits(self):
        _devices, config = sharing.lxd_config(PCI, 8192, 50)
        self.assertEqual({mps_environment.SNAPSHOT_PROPERTY: 'written'},
                         mps_environment.snapshot_properties(config))
        _devices, whole = sharing.lxd_config(PCI)
        self.assertEqual({}, mps_environment.snapshot_properties(whole))
        self.assertEqual({}, mps_environment.snapshot_properties({}))

    def test_read_from_the_image_properties_nova_keeps(self):
        # nova's utils.get_system_metadata_from_image: image_<property>
        meta = {'image_' + mps_environment.SNAPSHOT_PROPERTY: 'written'}
        self.assertTrue(mps_environment.image_may_carry_files(
            objects.Instance(system_metadata=meta)))
        self.assertFalse(mps_environment.image_may_carry_files(
            objects.Instance(system_metadata={'image_os_distro': 'debian'})))
        # an instance made without its system metadata (tools, benches)
        self.assertFalse(
            mps_environment.image_may_carry_files(objects.Instance()))


class RecordingClient(object):
    """The seam's file calls, on an in-memory file system."""

    def __init__(self, **files):
        self.files = {path: text.encode() for path, text in files.items()}
        self.calls = []
        self.limits = []

    def pull_file(self, name, path, limit, why):
        # the driver reads no more of the image's file than it needs
        self.calls.append(('pull', path))
        self.limits.append(limit)
        return self.files.get(path)

    def push_file(self, name, path, data, mode=0o644, uid=0, gid=0):
        self.calls.append(('push', path))
        self.files[path] = data

    def delete_file(self, name, path):
        self.calls.append(('delete', path))
        return self.files.pop(path, None) is not None

    def make_directory(self, name, path, mode=0o755):
        self.calls.append(('mkdir', path))


class ApplyTest(testtools.TestCase):

    def setUp(self):
        super(ApplyTest, self).setUp()
        objects.register_all()

    def test_nothing_without_quota_before_or_after(self):
        client = RecordingClient()
        mps_environment.apply(client, 'c1', {})
        self.assertEqual([], client.calls)

    def test_written_with_parents(self):
        client = RecordingClient(**{'/etc/environment': UBUNTU})
        mps_environment.apply(client, 'c1', VARIABLES)
        self.assertIn(('mkdir', '/etc/systemd/system.conf.d'), client.calls)
        # bounded: a tenant's image may hold a sparse file of any size
        self.assertEqual([64 * 1024], client.limits)
        self.assertEqual(
            sharing.environment_files(PCI, 8192, 50, current_environment=(
                UBUNTU)),
            {path: client.files[path].decode() for path in (
                '/etc/environment', mps_environment.SYSTEM_DROPIN,
                mps_environment.USER_DROPIN)})

    def test_cleared_when_the_quota_is_gone(self):
        client = RecordingClient()
        mps_environment.apply(client, 'c1', VARIABLES)
        mps_environment.apply(client, 'c1', {}, clear=True)
        self.assertEqual({'/etc/environment': b''}, client.files)

    def test_reapply_after_a_move(self):
        old = sharing.lxd_config(PCI, 8192)[1]
        # same host: the original's config had them
        client = RecordingClient()
        mps_environment.apply(client, 'c1', VARIABLES)
        mps_environment.reapply(client, 'c1', {}, old, instance=None)
        self.assertNotIn(mps_environment.SYSTEM_DROPIN, client.files)
        # another host: only nova's old flavor says so
        client = RecordingClient()
        mps_environment.apply(client, 'c1', VARIABLES)
        instance = objects.Instance(old_flavor=objects.Flavor(
            extra_specs={'lxd:gpu_memory_mb': '8192'}))
        mps_environment.reapply(client, 'c1', {}, {}, instance)
        self.assertNotIn(mps_environment.SYSTEM_DROPIN, client.files)
        # never had one: the container's files are not touched
        client = RecordingClient()
        mps_environment.reapply(client, 'c1', {}, {}, objects.Instance())
        self.assertEqual([], client.calls)


class ResizedRecordTest(testtools.TestCase):

    def test_mps_quota_not_carried_to_the_next_flavor(self):
        devices, config = sharing.lxd_config(PCI, 8192, 50)
        config[identity.KEY_DEVICES] = json.dumps([{
            'name': 'nova-gpushare0', 'kind': 'gpu_share', 'unit':
            'share:%s/0' % PCI, 'mps_pipe': '/run/nvidia-mps-{pci}'}])
        config['limits.cpu'] = '1'
        devices = {'nova-gpushare0': {'type': 'gpu'}, 'root': {
            'type': 'disk', 'path': '/', 'pool': 'default'}, **{
            k: v for k, v in devices.items() if v['type'] == 'disk'}}
        config, devices = records.without_accelerators(
            {'config': config, 'devices': devices})
        self.assertEqual({'limits.cpu': '1'}, config)
        self.assertEqual(['root'], list(devices))
