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

"""Which Glance payloads are LXD images, judged from real files."""

import io
import os
import subprocess
import tarfile
import tempfile

import fixtures
from nova import exception as nova_exception
from nova import objects
from oslo_config import cfg
import testtools

from nova_lxd_accel import conf
from nova_lxd_accel import exception
from nova_lxd_accel.instance import image_cache

IMAGE_ID = '5c7d6e2a-0b7e-4b8e-9d1a-2f3c4d5e6f70'


def _cut_in_half(path):
    """Truncate the file at ``path`` to half its size (a cut download)."""
    with open(path, 'rb') as handle:
        data = handle.read()
    with open(path, 'wb') as handle:
        handle.write(data[:len(data) // 2])


def _tarball(path, members, mode='w:gz'):
    with tarfile.open(path, mode) as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
            else:
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))


class SniffTest(testtools.TestCase):

    def setUp(self):
        super(SniffTest, self).setUp()
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__('shutil').rmtree(self.tmp))

    def path(self, name):
        return os.path.join(self.tmp, name)

    def test_unified_tarball(self):
        for mode in ('w:gz', 'w:xz', 'w:bz2', 'w'):
            path = self.path('unified.tar')
            _tarball(path, [('metadata.yaml', b'architecture: x86_64\n'),
                            ('rootfs', None), ('rootfs/etc', None)], mode)
            self.assertEqual(image_cache.KIND_UNIFIED,
                             image_cache.sniff_image(path, 'img'), mode)

    def test_rootfs_only_tarball(self):
        path = self.path('rootfs.tar.gz')
        _tarball(path, [('bin', None), ('etc/passwd', b'root:x:0:0::/:\n')])
        self.assertEqual(image_cache.KIND_ROOTFS_TAR,
                         image_cache.sniff_image(path, 'img'))

    def test_squashfs(self):
        path = self.path('rootfs.squashfs')
        with open(path, 'wb') as handle:
            handle.write(b'hsqs' + b'\0' * 1020)
        self.assertEqual(image_cache.KIND_SQUASHFS,
                         image_cache.sniff_image(path, 'img'))

    def test_qcow2_and_garbage_refused(self):
        for payload in (b'QFI\xfb' + b'\0' * 1020, b'\0' * 4096,
                        b'<html>not found</html>'):
            path = self.path('disk.img')
            with open(path, 'wb') as handle:
                handle.write(payload)
            error = self.assertRaises(nova_exception.ImageUnacceptable,
                                      image_cache.sniff_image, path, 'img-1')
            self.assertIn('img-1', str(error))

    def test_truncated_tarball_refused(self):
        path = self.path('cut.tar.gz')
        _tarball(path, [('rootfs/big', b'x' * 100000)])
        _cut_in_half(path)
        error = self.assertRaises(nova_exception.ImageUnacceptable,
                                  image_cache.sniff_image, path, 'img')
        self.assertIn('unreadable tarball', str(error))

    def test_listing_a_tarball_is_bounded(self):
        # a tenant's file: tar runs under prlimit and a timeout, as nova's
        # qemu-img info of an image does
        limits = image_cache.TAR_LIMITS
        self.assertEqual((120, 1024 ** 3),
                         (limits.cpu_time, limits.address_space))
        path = self.path('plain.tar')
        _tarball(path, [('rootfs', None)], 'w')
        bin_dir = self.path('bin')
        os.mkdir(bin_dir)
        marker = self.path('tar-ran')
        with open(os.path.join(bin_dir, 'tar'), 'w') as handle:
            # a tar that never ends, noting its pid and its limits
            handle.write('#!/bin/sh\necho $$ > %(m)s\nulimit -t >> %(m)s\n'
                         'ulimit -v >> %(m)s\nexec sleep 600\n'
                         % {'m': marker})
        os.chmod(os.path.join(bin_dir, 'tar'), 0o755)
        self.useFixture(fixtures.EnvironmentVariable(
            'PATH', bin_dir + ':' + os.environ['PATH']))
        self.useFixture(fixtures.MonkeyPatch(
            'nova_lxd_accel.instance.image_cache.TAR_TIMEOUT', 1))
        error = self.assertRaises(nova_exception.ImageUnacceptable,
                                  image_cache.sniff_image, path, 'img')
        self.assertIn('listing the tarball took more than 1 seconds',
                      str(error))
        with open(marker) as handle:
            pid, cpu, memory = handle.read().split()
        self.assertEqual(('120', str(1024 ** 2)), (cpu, memory))
        # nothing left running
        self.assertFalse(os.path.exists('/proc/%s' % pid) and
                         'sleep' in open('/proc/%s/cmdline' % pid).read())

    def test_every_compression_lxd_accepts(self):
        for tool, fmt in (('gzip', []), ('bzip2', []), ('xz', []),
                          ('xz', ['--format=lzma']), ('zstd', [])):
            path = self.path('unified.tar')
            _tarball(path, [('metadata.yaml', b'architecture: x86_64\n'),
                            ('rootfs', None), ('rootfs/etc', None)], 'w')
            subprocess.run([tool, '-q', '-f'] + fmt + [path], check=True)
            out = [name for name in os.listdir(self.tmp)
                   if name.startswith('unified.tar.')][0]
            self.assertEqual(image_cache.KIND_UNIFIED, image_cache.sniff_image(
                self.path(out), 'img'), (tool, fmt))
            os.unlink(self.path(out))
            if os.path.exists(path):
                os.unlink(path)

    def test_truncated_after_metadata_refused(self):
        # metadata.yaml comes first: only reading to the end finds the cut
        # (LXD itself imports such a tarball, then fails to unpack it).
        for tool in ('gzip', 'zstd'):
            path = self.path('unified.tar')
            _tarball(path, [('metadata.yaml', b'architecture: x86_64\n'),
                            ('rootfs/big', os.urandom(300000))], 'w')
            subprocess.run([tool, '-q', '-f', path], check=True)
            if os.path.exists(path):
                os.unlink(path)
            path = self.path([name for name in os.listdir(self.tmp)
                              if name.startswith('unified.tar.')][0])
            with open(path, 'rb') as handle:
                data = handle.read()
            with open(path, 'wb') as handle:
                handle.write(data[:len(data) * 2 // 3])
            error = self.assertRaises(nova_exception.ImageUnacceptable,
                                      image_cache.sniff_image, path, 'img')
            self.assertIn('unreadable tarball (%s)' % tool, str(error))
            os.unlink(path)

    def test_truncated_squashfs_refused(self):
        source = self.path('tree')
        os.makedirs(os.path.join(source, 'etc'))
        with open(os.path.join(source, 'etc', 'data'), 'wb') as handle:
            handle.write(os.urandom(200000))
        path = self.path('rootfs.squashfs')
        subprocess.run(['mksquashfs', source, path, '-noappend', '-quiet',
                        '-no-progress'], check=True, stdout=subprocess.DEVNULL)
        self.assertEqual(image_cache.KIND_SQUASHFS,
                         image_cache.sniff_image(path, 'img'))
        _cut_in_half(path)
        error = self.assertRaises(nova_exception.ImageUnacceptable,
                                  image_cache.sniff_image, path, 'img')
        self.assertIn('truncated squashfs', str(error))

    def test_missing_decompressor_is_a_host_problem(self):
        path = self.path('unified.tar')
        _tarball(path, [('metadata.yaml', b'x')], 'w')
        subprocess.run(['zstd', '-q', '-f', '--rm', path], check=True)
        self.useFixture(fixtures.EnvironmentVariable('PATH', self.tmp))
        error = self.assertRaises(exception.ImageToolMissing,
                                  image_cache.sniff_image, path + '.zst',
                                  'img')
        self.assertIn('apt-get install zstd', str(error))

    def test_generated_metadata_tarball(self):
        path = self.path('meta.tar.gz')
        image_cache.write_metadata_tarball(path, 'aarch64', 'Glance image x')
        with tarfile.open(path) as archive:
            body = archive.extractfile('metadata.yaml').read().decode()
        self.assertIn('architecture: aarch64\n', body)
        self.assertIn('creation_date: ', body)


class DiskFormatTest(testtools.TestCase):

    def setUp(self):
        super(DiskFormatTest, self).setUp()
        objects.register_all()

    def _meta(self, disk_format):
        return objects.ImageMeta.from_dict({'id': IMAGE_ID,
                                            'disk_format': disk_format})

    def test_vm_formats_refused(self):
        for disk_format in ('qcow2', 'iso', 'vmdk', 'vhd', 'vdi', 'ami'):
            error = self.assertRaises(nova_exception.ImageUnacceptable,
                                      image_cache.check_disk_format,
                                      self._meta(disk_format))
            self.assertIn(disk_format, str(error))

    def test_raw_accepted(self):
        image_cache.check_disk_format(self._meta('raw'))

    def test_checksum_prefers_os_hash_value(self):
        meta = objects.ImageMeta.from_dict({'id': IMAGE_ID,
                                            'checksum': 'md5'})
        self.assertEqual('md5', image_cache.image_checksum(meta))
        self.assertEqual('', image_cache.image_checksum(
            objects.ImageMeta.from_dict({'id': IMAGE_ID})))


class DownloadDirTest(testtools.TestCase):

    def setUp(self):
        super(DownloadDirTest, self).setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path
        self.conf = cfg.ConfigOpts()
        conf.register_opts(self.conf)
        self.conf.register_opt(cfg.StrOpt('state_path', default=self.tmp))
        self.conf([], default_config_files=[])

    def test_default_under_state_path(self):
        self.assertEqual(os.path.join(self.tmp, 'lxd-image-downloads'),
                         image_cache.download_dir(self.conf))
        # The [lxd] group object is shared by every ConfigOpts: undo.
        self.addCleanup(self.conf.clear_override, 'image_download_dir',
                        'lxd')
        self.conf.set_override('image_download_dir', '/srv/dl', 'lxd')
        self.assertEqual('/srv/dl', image_cache.download_dir(self.conf))

    def test_leftovers_removed(self):
        path = image_cache.download_dir(self.conf)
        self.assertEqual([], image_cache.clean_download_dir(self.conf))
        os.makedirs(os.path.join(path, 'img.abc'))
        with open(os.path.join(path, 'img.abc', 'image.part'), 'wb') as f:
            f.write(b'partial')
        with open(os.path.join(path, 'stray'), 'wb') as f:
            f.write(b'x')
        # A live process's download stays (pid 1 is always alive).
        os.makedirs(os.path.join(path, 'img.1.xyz'))
        dead = subprocess.Popen(['true'])
        dead.wait()
        os.makedirs(os.path.join(path, 'img.%d.xyz' % dead.pid))
        os.makedirs(os.path.join(path, 'img.%d.xyz' % os.getpid()))
        self.assertEqual(sorted(['img.%d.xyz' % dead.pid,
                                 'img.%d.xyz' % os.getpid(), 'img.abc',
                                 'stray']),
                         sorted(image_cache.clean_download_dir(self.conf)))
        self.assertEqual(['img.1.xyz'], os.listdir(path))
