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
import tarfile
import tempfile

from nova import exception as nova_exception
from nova import objects
import testtools

from nova_lxd_accel import image as lxd_image

IMAGE_ID = '5c7d6e2a-0b7e-4b8e-9d1a-2f3c4d5e6f70'


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
            self.assertEqual(lxd_image.KIND_UNIFIED,
                             lxd_image.sniff_image(path, 'img'), mode)

    def test_rootfs_only_tarball(self):
        path = self.path('rootfs.tar.gz')
        _tarball(path, [('bin', None), ('etc/passwd', b'root:x:0:0::/:\n')])
        self.assertEqual(lxd_image.KIND_ROOTFS_TAR,
                         lxd_image.sniff_image(path, 'img'))

    def test_squashfs(self):
        path = self.path('rootfs.squashfs')
        with open(path, 'wb') as handle:
            handle.write(b'hsqs' + b'\0' * 1020)
        self.assertEqual(lxd_image.KIND_SQUASHFS,
                         lxd_image.sniff_image(path, 'img'))

    def test_qcow2_and_garbage_refused(self):
        for payload in (b'QFI\xfb' + b'\0' * 1020, b'\0' * 4096,
                        b'<html>not found</html>'):
            path = self.path('disk.img')
            with open(path, 'wb') as handle:
                handle.write(payload)
            error = self.assertRaises(nova_exception.ImageUnacceptable,
                                      lxd_image.sniff_image, path, 'img-1')
            self.assertIn('img-1', str(error))

    def test_truncated_tarball_refused(self):
        path = self.path('cut.tar.gz')
        _tarball(path, [('rootfs/big', b'x' * 100000)])
        with open(path, 'rb') as handle:
            data = handle.read()
        with open(path, 'wb') as handle:
            handle.write(data[:len(data) // 2])
        error = self.assertRaises(nova_exception.ImageUnacceptable,
                                  lxd_image.sniff_image, path, 'img')
        self.assertIn('unreadable tarball', str(error))

    def test_generated_metadata_tarball(self):
        path = self.path('meta.tar.gz')
        lxd_image.write_metadata_tarball(path, 'aarch64', 'Glance image x')
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
                                      lxd_image.check_disk_format,
                                      self._meta(disk_format))
            self.assertIn(disk_format, str(error))

    def test_raw_accepted(self):
        lxd_image.check_disk_format(self._meta('raw'))

    def test_checksum_prefers_os_hash_value(self):
        meta = objects.ImageMeta.from_dict({'id': IMAGE_ID,
                                            'checksum': 'md5'})
        self.assertEqual('md5', lxd_image.image_checksum(meta))
        self.assertEqual('', lxd_image.image_checksum(
            objects.ImageMeta.from_dict({'id': IMAGE_ID})))
