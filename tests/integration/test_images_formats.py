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

"""Every image format LXD accepts, the cache after failures, downloads.

Each format is a real import into the real daemon and a real container
started from it. Needs zstd, xz-utils, bzip2 and squashfs-tools on the
host (tools/run-tests.sh installs them).
"""

import hashlib
import os
import signal
import subprocess
import sys
import tarfile

import fixtures
import nova.conf
from nova import exception as nova_exception
from nova import objects

from nova_lxd_accel.instance import image_cache
from tests.fixtures import lxd_fixtures
from tests.integration import base

# Run in a child process: start a download through ImageCache and stop
# in its middle until killed.
_KILLED_DOWNLOAD = """
import sys, time
import nova.conf
from nova_lxd_accel import conf as lxd_conf
from nova_lxd_accel.instance import image_cache
CONF = nova.conf.CONF
lxd_conf.register_opts(CONF)
CONF([], default_config_files=[])
CONF.set_override('image_download_dir', sys.argv[1], 'lxd')


class StuckGlance(object):
    def download(self, context, image_id, dest_path):
        with open(dest_path, 'wb') as part:
            part.write(b'half an image')
            part.flush()
            print('downloading', flush=True)
            time.sleep(3600)


class Meta(object):
    id = 'img-killed'


image_cache.ImageCache(None, image_api=StuckGlance(), conf=CONF)._import(
    None, Meta(), 'checksum', None)
"""

_COMPRESS = {
    'tar': [],
    'gzip': ['gzip', '-c'],
    'bzip2': ['bzip2', '-c'],
    'xz': ['xz', '-c'],
    'lzma': ['xz', '--format=lzma', '-c'],
    'zstd': ['zstd', '-q', '-c'],
}


class ImageBuilder(fixtures.Fixture):
    """The tiny image unpacked once, repacked in any format."""

    def _setUp(self):
        self.tmp = self.useFixture(fixtures.TempDir()).path
        self.tree = os.path.join(self.tmp, 'tree')
        os.makedirs(self.tree)
        with tarfile.open(lxd_fixtures.tiny_image_path()) as archive:
            archive.extractall(self.tree, numeric_owner=True)

    def _pack(self, directory, names, compression):
        tar = subprocess.run(
            ['tar', '--numeric-owner', '-C', directory, '-cf', '-'] + names,
            check=True, stdout=subprocess.PIPE).stdout
        if not _COMPRESS[compression]:
            return tar
        return subprocess.run(_COMPRESS[compression], input=tar, check=True,
                              stdout=subprocess.PIPE).stdout

    def unified(self, compression):
        return self._pack(self.tree, ['metadata.yaml', 'rootfs'],
                          compression)

    def rootfs_tarball(self, compression):
        rootfs = os.path.join(self.tree, 'rootfs')
        return self._pack(rootfs, sorted(os.listdir(rootfs)), compression)

    def squashfs(self, compression):
        path = os.path.join(self.tmp, 'rootfs-%s.squashfs' % compression)
        subprocess.run(['mksquashfs', os.path.join(self.tree, 'rootfs'),
                        path, '-noappend', '-quiet', '-no-progress',
                        '-comp', compression], check=True,
                       stdout=subprocess.DEVNULL)
        with open(path, 'rb') as handle:
            return handle.read()


class ImageTestCase(base.DriverTestCase):

    def setUp(self):
        super(ImageTestCase, self).setUp()
        self.downloads = self.useFixture(fixtures.TempDir()).path
        self.flags(image_download_dir=self.downloads, group='lxd')
        self.builder = self.useFixture(ImageBuilder())

    def alias(self, image):
        for alias in self.project.client.api.images.aliases.get(
                params={'recursion': 1}).json()['metadata']:
            if alias['name'] == 'nova-image-%s' % image.id:
                return alias
        return None

    def lxd_images(self):
        return self.project.client.api.images.get().json()['metadata']

    def boot(self, image):
        instance = self.make_instance()
        self.driver.spawn(self.context, instance, image, [], None, {})
        self.assertEqual('Running', self.container(instance)['status'])
        self.driver.destroy(self.context, instance, [])
        self.assertEqual([], os.listdir(self.downloads))
        return instance


class ImageFormatsTest(ImageTestCase):
    """Issue 11 item 5: whatever LXD imports, the driver imports."""

    def test_unified_every_compression(self):
        for compression in sorted(_COMPRESS):
            image = self.create_image(self.builder.unified(compression),
                                      checksum='unified-%s' % compression)
            self.boot(image)

    def test_split_rootfs_tarball(self):
        for compression in ('gzip', 'xz', 'zstd'):
            image = self.create_image(
                self.builder.rootfs_tarball(compression),
                checksum='rootfs-%s' % compression)
            self.boot(image)

    def test_split_squashfs(self):
        for compression in ('gzip', 'xz', 'zstd'):
            image = self.create_image(self.builder.squashfs(compression),
                                      checksum='squashfs-%s' % compression)
            self.boot(image)


class ImageCacheFailureTest(ImageTestCase):
    """Issue 11 item 6: failures never poison the cache."""

    def test_truncated_image_refused_then_fixed_image_boots(self):
        good = self.builder.unified('gzip')
        # metadata.yaml comes first and is intact: LXD itself imports this
        # and fails only when it unpacks the root file system.
        image = self.create_image(good[:len(good) * 2 // 3], checksum='v1')
        instance = self.make_instance()
        error = self.assertRaises(nova_exception.ImageUnacceptable,
                                  self.driver.spawn, self.context, instance,
                                  image, [], None, {})
        self.assertIn('unreadable tarball (gzip)', str(error))
        self.assertIsNone(self.alias(image))
        self.assertEqual([], self.lxd_images())
        self.assertEqual([], self.container_names())
        self.assertEqual([], os.listdir(self.downloads))

        # The image is fixed in Glance: the next boot imports it.
        self.glance._imagedata[image.id] = good
        self.glance.update(self.context, image.id, {'checksum': 'v2'})
        fixed = objects.ImageMeta.from_dict(
            self.glance.show(self.context, image.id))
        self.boot(fixed)
        self.assertEqual('v2', self.alias(image)['description'])

    def test_failed_import_retried_with_the_same_checksum(self):
        # A download that breaks once (a flaky store, a proxy) is tried
        # again on the next boot, even though Glance's checksum is the same.
        good = self.builder.unified('xz')
        image = self.create_image(b'<html>502 Bad Gateway</html>',
                                  checksum='same')
        self.assertRaises(nova_exception.ImageUnacceptable, self.driver.spawn,
                          self.context, self.make_instance(), image, [],
                          None, {})
        self.assertIsNone(self.alias(image))
        self.glance._imagedata[image.id] = good
        self.boot(image)
        self.assertEqual('same', self.alias(image)['description'])

    def test_no_checksum_keyed_on_the_bytes(self):
        first = self.builder.unified('gzip')
        image = self.create_image(first)
        self.assertNotIn('checksum', self.glance.show(self.context,
                                                      image.id))
        self.boot(image)
        self.assertEqual('sha256:%s' % hashlib.sha256(first).hexdigest(),
                         self.alias(image)['description'])
        # Same bytes: no second import.
        before = self.alias(image)['target']
        self.boot(image)
        self.assertEqual(before, self.alias(image)['target'])
        # New bytes under the same id and still no checksum: imported.
        second = self.builder.unified('zstd')
        self.glance._imagedata[image.id] = second
        self.boot(image)
        self.assertEqual('sha256:%s' % hashlib.sha256(second).hexdigest(),
                         self.alias(image)['description'])
        self.assertNotEqual(before, self.alias(image)['target'])

    def test_image_removed_behind_the_alias_is_imported_again(self):
        image = self.tiny_image()
        self.boot(image)
        fingerprint = self.alias(image)['target']
        self.project._wait(self.project.client.api.images[
            fingerprint].delete())
        self.assertEqual([], self.lxd_images())
        self.boot(image)
        self.assertEqual(1, len(self.lxd_images()))

    def test_image_file_lost_by_the_daemon_is_imported_again(self):
        # LXD's cross-project image delete can take the file of an image
        # another project still names (seen in CI); the record stays.
        if lxd_fixtures.pool_driver() != 'dir':
            self.skipTest('only a dir pool reads the image file at each '
                          'create; btrfs clones its own image volume')
        image = self.tiny_image()
        self.boot(image)
        fingerprint = self.alias(image)['target']
        path = os.path.join(lxd_fixtures.daemon_dir(), 'images', fingerprint)
        os.unlink(path)
        self.boot(image)
        self.assertTrue(os.path.exists(path))
        self.assertEqual(fingerprint, self.alias(image)['target'])
        self.assertEqual(1, len(self.lxd_images()))


class DownloadDirTest(ImageTestCase):
    """Issue 11 item 7: downloads in the driver's directory, no leftovers."""

    def test_download_lands_in_the_driver_directory(self):
        seen = []
        download = self.glance.download

        def recording(context, image_id, **kwargs):
            path = kwargs.get('dst_path') or kwargs.get('dest_path')
            seen.append(path)
            return download(context, image_id, **kwargs)

        self.glance.download = recording
        self.boot(self.tiny_image())
        self.assertEqual(1, len(seen))
        self.assertEqual(self.downloads,
                         os.path.dirname(os.path.dirname(seen[0])))
        self.assertTrue(seen[0].endswith('.part'), seen[0])
        self.assertEqual([], os.listdir(self.downloads))

    def test_download_of_a_kill_9ed_process_removed_at_init_host(self):
        # A real process downloads through ImageCache into the directory,
        # and is killed with SIGKILL in the middle of the download.
        child = subprocess.Popen(
            [sys.executable, '-c', _KILLED_DOWNLOAD, self.downloads],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(child.wait)
        self.addCleanup(lambda: child.poll() is None and child.kill())
        self.assertEqual(b'downloading\n', child.stdout.readline())
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        left = [os.path.join(root, name)
                for root, _dirs, files in os.walk(self.downloads)
                for name in files]
        self.assertEqual(1, len(left))
        self.assertTrue(left[0].endswith('/image.part'), left)
        self.driver.init_host(self.host)
        self.assertEqual([], os.listdir(self.downloads))

    def test_init_host_removes_leftovers_of_a_killed_compute(self):
        # What a nova-compute killed mid-download leaves: its work
        # directory, named after its (now dead) pid, with a .part file.
        dead = subprocess.Popen(['true'])
        dead.wait()
        work = os.path.join(self.downloads, 'img.%d.k1ll3d' % dead.pid)
        os.makedirs(work)
        with open(os.path.join(work, 'image.part'), 'wb') as handle:
            handle.write(b'partial')
        self.driver.init_host(self.host)
        self.assertEqual([], os.listdir(self.downloads))
        self.assertEqual([], image_cache.clean_download_dir(nova.conf.CONF))
