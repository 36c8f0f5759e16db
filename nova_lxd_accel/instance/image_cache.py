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

"""Glance images in and out of LXD.

In: a Glance image is downloaded once per image id and checksum and kept
in LXD under the alias ``nova-image-<image id>`` (the alias description
holds the checksum, so a changed image is imported again; an image Glance
gives no checksum for is keyed on the SHA-256 of its bytes). Accepted
payloads are what LXD accepts: a unified tarball (``metadata.yaml`` +
``rootfs/``), or a root file system alone (tarball or squashfs), for which a
metadata tarball is generated and the pair imported as a split image;
tarballs plain or compressed with gzip, bzip2, xz, lzma or zstd.

Every tarball is read to its end before LXD sees it: LXD imports a
truncated tarball and fails only when a container is made from it, which
would leave a broken image in the cache. A failed download or import
leaves no alias, so the next boot tries again.

Downloads go to a directory the driver owns (``[lxd] image_download_dir``),
first as ``*.part`` and renamed once complete; ``clean_download_dir``
(called by ``init_host``) removes what a killed nova-compute left there.

Out: ``snapshot`` publishes an LXD snapshot of the container as an image
and uploads it to Glance as a unified tarball.
"""

import hashlib
import io
import os
import platform
import shutil
import struct
import tarfile
import tempfile
import threading
import time

from nova.compute import task_states
from nova import exception as nova_exception
from nova.image import glance
from oslo_concurrency import lockutils
from oslo_concurrency import processutils
from oslo_log import log as logging
from oslo_utils import excutils
from oslo_utils import timeutils

from nova_lxd_accel import exception

LOG = logging.getLogger(__name__)

ALIAS_PREFIX = 'nova-image-'

# Disk formats that can never hold an LXD container image.
VM_DISK_FORMATS = ('qcow2', 'iso', 'vmdk', 'vhd', 'vhdx', 'vdi', 'ploop',
                   'aki', 'ari', 'ami')

# The compressions LXD accepts for image tarballs, by magic number.
_COMPRESSIONS = (
    (b'\x1f\x8b', 'gzip'),
    (b'BZh', 'bzip2'),
    (b'\xfd7zXZ\x00', 'xz'),
    (b'\x28\xb5\x2f\xfd', 'zstd'),
    (b'\x5d\x00\x00', 'lzma'),
)
# Decompressors GNU tar runs for these (gzip, bzip2 and xz are on every
# Debian/Ubuntu host; zstd and lzma may need a package).
_DECOMPRESSORS = {'gzip': 'gzip', 'bzip2': 'bzip2', 'xz': 'xz',
                  'zstd': 'zstd', 'lzma': 'xz'}
_PACKAGES = {'xz': 'xz-utils'}
_TAR_FLAGS = {'gzip': ['--gzip'], 'bzip2': ['--bzip2'], 'xz': ['--xz'],
              'zstd': ['--zstd'], 'lzma': ['--lzma'], None: []}
_SQUASHFS_MAGIC = b'hsqs'
_QCOW2_MAGIC = b'QFI\xfb'

KIND_UNIFIED = 'unified'
KIND_ROOTFS_TAR = 'rootfs-tarball'
KIND_SQUASHFS = 'squashfs'


def image_alias(image_id):
    return ALIAS_PREFIX + image_id


def lost_its_file(exc):
    """Whether LXD failed a create because the image's file is gone.

    LXD keeps one file per fingerprint for all projects; its image delete
    in one project may remove the file while another project imports the
    same bytes (a check-then-remove race in LXD 5.0 to 6.x and Incus 6.0),
    and a hand-made ``rm`` does the same. The record stays, the file does
    not: ``Failed creating instance from image: open <dir>/images/<fp>: no
    such file or directory``.
    """
    reason = str(exc).lower()
    return ('from image' in reason and '/images/' in reason and
            'no such file or directory' in reason)


def image_checksum(image_meta):
    """The strongest checksum Glance gave for the image, or ''."""
    for field in ('os_hash_value', 'checksum'):
        if field in image_meta.fields and image_meta.obj_attr_is_set(field):
            return getattr(image_meta, field) or ''
    return ''


def check_disk_format(image_meta):
    """Refuse VM disk images before downloading a byte of them."""
    disk_format = (image_meta.disk_format
                   if image_meta.obj_attr_is_set('disk_format') else None)
    if disk_format in VM_DISK_FORMATS:
        raise nova_exception.ImageUnacceptable(
            image_id=image_meta.id,
            reason='disk format %s is a virtual machine image; LXD '
                   'containers need an LXD image (a unified tarball, or a '
                   'root file system as tarball or squashfs) uploaded with '
                   '--disk-format raw' % disk_format)


def compression_of(head):
    """The compression (``gzip``, ...) named by a tarball's first bytes.

    None for a plain tarball, '' for something that is no tarball.
    """
    for magic, name in _COMPRESSIONS:
        if head.startswith(magic):
            return name
    if head[257:262] == b'ustar':
        return None
    return ''


#: what listing a tenant's tarball may take: CPU seconds and address
#: space of tar (its decompressor runs as its child and inherits them)
TAR_LIMITS = processutils.ProcessLimits(cpu_time=120,
                                        address_space=1024 ** 3)
#: wall-clock seconds for the listing
TAR_TIMEOUT = 300


class _Deadline(object):
    """Kills a child process still running after ``seconds``.

    A timer of its own, rather than processutils' timeout, whose
    exception is eventlet's or the standard library's as patching has it.
    """

    def __init__(self, seconds):
        self.seconds = seconds
        self.expired = False
        self._timer = None

    def start(self, process):
        def kill():
            self.expired = True
            process.kill()
        self._timer = threading.Timer(self.seconds, kill)
        self._timer.daemon = True
        self._timer.start()

    def stop(self, process):
        if self._timer is not None:
            self._timer.cancel()


def _tar_members(path, image_id, compression):
    """The names of every member, reading the tarball to its very end.

    GNU tar runs in a child process (nothing blocks nova-compute) with the
    decompressor the magic number names; a truncated or corrupt archive
    makes it fail, with its reason.
    """
    tool = _DECOMPRESSORS.get(compression)
    if tool and shutil.which(tool) is None:
        raise exception.ImageToolMissing(
            image_id=image_id, tool=tool, compression=compression,
            package=_PACKAGES.get(tool, tool))
    watch = _Deadline(TAR_TIMEOUT)
    try:
        # A tenant's file: bounded like nova's qemu-img info of one (a
        # decompression bomb or a tar that never ends must not hold
        # nova-compute).
        out, _err = processutils.execute(
            'tar', *_TAR_FLAGS[compression], '-tf', path,
            env_variables=dict(os.environ, LC_ALL='C'),
            prlimit=TAR_LIMITS, on_execute=watch.start,
            on_completion=watch.stop)
    except processutils.ProcessExecutionError as exc:
        if watch.expired:
            raise nova_exception.ImageUnacceptable(
                image_id=image_id,
                reason='listing the tarball took more than %d seconds'
                       % TAR_TIMEOUT)
        reason = (exc.stderr or exc.description or '').strip()
        raise nova_exception.ImageUnacceptable(
            image_id=image_id,
            reason='unreadable tarball (%s): %s' % (compression or 'tar',
                                                    reason))
    return [line for line in out.splitlines() if line]


def _check_squashfs(path, head, image_id):
    """A squashfs file must be as long as its superblock says."""
    # struct squashfs_super_block: bytes_used is the u64 at offset 40.
    if len(head) < 48:
        raise nova_exception.ImageUnacceptable(
            image_id=image_id, reason='truncated squashfs file system')
    (bytes_used,) = struct.unpack_from('<Q', head, 40)
    size = os.path.getsize(path)
    if size < bytes_used:
        raise nova_exception.ImageUnacceptable(
            image_id=image_id,
            reason='truncated squashfs file system: %d of its %d bytes'
                   % (size, bytes_used))


def sniff_image(path, image_id):
    """Which kind of LXD image the file at ``path`` holds.

    Tarballs are read through to the end, so a truncated or corrupt one is
    refused here rather than by LXD when a container is made from it.

    :raises: ImageUnacceptable when it is no LXD image, or damaged;
        ImageToolMissing when this host lacks the decompressor.
    """
    with open(path, 'rb') as handle:
        head = handle.read(512)
    if head.startswith(_SQUASHFS_MAGIC):
        _check_squashfs(path, head, image_id)
        return KIND_SQUASHFS
    compression = compression_of(head)
    if compression == '':
        what = ('a qcow2 disk' if head.startswith(_QCOW2_MAGIC)
                else 'neither a tarball nor a squashfs file system')
        raise nova_exception.ImageUnacceptable(
            image_id=image_id,
            reason='the image is %s; upload an LXD image (for example '
                   'one made by `lxc publish` + `lxc image export`)' % what)
    names = _tar_members(path, image_id, compression)
    if any(name in ('metadata.yaml', './metadata.yaml') for name in names):
        return KIND_UNIFIED
    return KIND_ROOTFS_TAR


def download_dir(conf):
    """The directory the driver downloads Glance images into."""
    return conf.lxd.image_download_dir or os.path.join(
        conf.state_path, 'lxd-image-downloads')


def _download_owner(name):
    """The pid in a download's name (``<image id>.<pid>.<random>``)."""
    parts = name.split('.')
    if len(parts) == 3 and parts[1].isdigit():
        return int(parts[1])
    return None


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_download_dir(conf):
    """Remove what interrupted downloads left; returns the names removed.

    ``init_host`` calls it: a nova-compute killed during a spawn leaves its
    partial download behind. Downloads of another live process (a second
    nova-compute sharing the directory by mistake, parallel tests) are
    left alone; everything else goes, this process's own included (none
    runs before ``init_host``).
    """
    path = download_dir(conf)
    try:
        names = sorted(os.listdir(path))
    except FileNotFoundError:
        return []
    mine = os.getpid()
    names = [name for name in names
             if _download_owner(name) in (None, mine) or
             not _alive(_download_owner(name))]
    for name in names:
        target = os.path.join(path, name)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target, ignore_errors=True)
        else:
            try:
                os.unlink(target)
            except FileNotFoundError:
                pass
    if names:
        LOG.info('Removed %(count)d leftover image download(s) from '
                 '%(path)s', {'count': len(names), 'path': path})
    return names


def write_metadata_tarball(path, architecture, description):
    """The metadata half of a split image, for a bare root file system."""
    body = ('architecture: %s\ncreation_date: %d\nproperties:\n'
            '  description: %s\n' % (architecture, int(time.time()),
                                     description)).encode('utf-8')
    with tarfile.open(path, 'w:gz') as archive:
        info = tarfile.TarInfo('metadata.yaml')
        info.size = len(body)
        info.mtime = int(time.time())
        archive.addfile(info, io.BytesIO(body))


class ImageCache(object):
    """Glance images imported into LXD, once per id and checksum."""

    def __init__(self, client, conf, image_api=None):
        self._client = client
        self._image_api = image_api or glance.API()
        self._conf = conf

    def _is_cached(self, existing, key):
        """Whether the alias names an LXD image imported for ``key``."""
        return (existing is not None and bool(key) and
                existing.get('description') == key and
                self._client.image_exists(existing['target']))

    def ensure(self, context, image_meta):
        """The LXD alias of the instance's image, importing it if needed.

        Keyed on Glance's checksum (or, without one, on the SHA-256 of the
        downloaded bytes). Nothing is remembered of a failure: the alias is
        set only once the image is in LXD, so the next boot tries again.
        """
        check_disk_format(image_meta)
        image_id = image_meta.id
        alias = image_alias(image_id)
        checksum = image_checksum(image_meta)
        with lockutils.lock('lxd-image-%s' % image_id):
            existing = self._client.get_alias(alias)
            if self._is_cached(existing, checksum):
                return alias
            fingerprint, key, created = self._import(context, image_meta,
                                                     checksum, existing)
            if existing is not None and existing.get('description') == key \
                    and existing.get('target') == fingerprint:
                return alias
            try:
                self._client.set_alias(alias, fingerprint, description=key)
            except Exception:
                with excutils.save_and_reraise_exception():
                    if created:
                        self._remove_unnamed(fingerprint, image_id)
            LOG.info('Imported Glance image %(image)s into LXD as %(fp)s',
                     {'image': image_id, 'fp': fingerprint})
            return alias

    def replace_lost(self, context, image_meta, failed_at):
        """Import again an image whose file LXD lost (:func:`lost_its_file`).

        The broken record and its alias go first: a record younger than
        ``failed_at`` is another boot's fresh import, and is kept.

        :returns: the alias, as :meth:`ensure`.
        """
        alias = image_alias(image_meta.id)
        with lockutils.lock('lxd-image-%s' % image_meta.id):
            existing = self._client.get_alias(alias)
            if existing is not None:
                fingerprint = existing['target']
                try:
                    uploaded = _stamp(self._client.image_info(fingerprint),
                                      'uploaded_at')
                except exception.LXDObjectNotFound:
                    uploaded = None
                if uploaded is None or uploaded < failed_at:
                    LOG.warning('LXD lost the file of image %(fp)s (Glance '
                                'image %(image)s): importing it again',
                                {'fp': fingerprint, 'image': image_meta.id})
                    self._client.delete_alias(alias)
                    if uploaded is not None:
                        self._client.delete_image(fingerprint)
        return self.ensure(context, image_meta)

    def _remove_unnamed(self, fingerprint, image_id):
        """Remove an image this import made when its alias was not set.

        :meth:`prune` walks the driver's aliases only: an image left
        without one would stay in the daemon for good. One that another
        alias names meanwhile (the same bytes under another Glance id) is
        kept.
        """
        try:
            if any(other.get('target') == fingerprint
                   for other in self._client.list_aliases()):
                return
            self._client.delete_image(fingerprint)
            LOG.warning('Removed LXD image %(fp)s imported from Glance image '
                        '%(image)s: its alias could not be set',
                        {'fp': fingerprint, 'image': image_id})
        except exception.LXDAccelException as exc:
            LOG.error('Could not remove LXD image %(fp)s, imported from '
                      'Glance image %(image)s without an alias (%(exc)s); '
                      'remove it with `lxc image delete %(fp)s`',
                      {'fp': fingerprint, 'image': image_id, 'exc': exc})

    @property
    def image_api(self):
        return self._image_api

    def cache(self, context, image_meta):
        """Pre-cache an image; True if it was fetched, False if cached."""
        alias = image_alias(image_meta.id)
        fresh = self._is_cached(self._client.get_alias(alias),
                                image_checksum(image_meta))
        self.ensure(context, image_meta)
        return not fresh

    def prune(self, image_ids_in_use, min_age_seconds, now=None):
        """Remove cached images no instance of this host boots from.

        An image is kept while it is younger than ``min_age_seconds``
        (counted from its last use, else its import), so an image about to
        be used again is not fetched twice. Containers do not depend on
        their image once created: removing it never harms an instance.

        :returns: the ids of the Glance images removed from the cache.
        """
        now = now or timeutils.utcnow()
        removed = []
        aliases = self._client.list_aliases()
        for alias in aliases:
            name = alias.get('name', '')
            if not name.startswith(ALIAS_PREFIX):
                continue
            image_id = name[len(ALIAS_PREFIX):]
            if image_id in image_ids_in_use:
                continue
            fingerprint = alias['target']
            try:
                info = self._client.image_info(fingerprint)
            except exception.LXDObjectNotFound:
                continue
            if _age_seconds(info, now) < min_age_seconds:
                continue
            with lockutils.lock('lxd-image-%s' % image_id):
                self._client.delete_alias(name)
                # Glance images with the same bytes share one LXD image:
                # keep it while another alias still names it.
                shared = [other for other in aliases
                          if other.get('target') == fingerprint and
                          other.get('name') != name and
                          other.get('name', '').startswith(ALIAS_PREFIX) and
                          other['name'][len(ALIAS_PREFIX):] not in removed]
                if not shared:
                    self._client.delete_image(fingerprint)
            LOG.info('Removed unused Glance image %s from the LXD image '
                     'cache', image_id)
            removed.append(image_id)
        return removed

    def _import_unified(self, target, payload):
        """(fingerprint, whether this import made the image)."""
        # LXD names a unified image by the SHA-256 of its tarball: when
        # that image is already there (another Glance image with the same
        # bytes, or an earlier import whose alias was lost) reuse it.
        fingerprint = _sha256(payload)
        if self._client.image_exists(fingerprint):
            return fingerprint, False
        try:
            with open(payload, 'rb') as data:
                return self._client.import_image(
                    target, data,
                    {'Content-Type': 'application/octet-stream'}), True
        except exception.LXDOperationFailed:
            # Lost a race with a concurrent import of the same bytes.
            if self._client.image_exists(fingerprint):
                return fingerprint, False
            raise

    def _download(self, context, image_id, work):
        """The image's bytes in ``work``, renamed only once complete."""
        part = os.path.join(work, 'image.part')
        self._image_api.download(context, image_id, dest_path=part)
        payload = os.path.join(work, 'image')
        os.rename(part, payload)
        return payload

    def _import(self, context, image_meta, checksum, existing):
        """(fingerprint, cache key, whether this import made the image)."""
        image_id = image_meta.id
        parent = download_dir(self._conf)
        os.makedirs(parent, mode=0o700, exist_ok=True)
        work = tempfile.mkdtemp(prefix='%s.%d.' % (image_id, os.getpid()),
                                dir=parent)
        try:
            payload = self._download(context, image_id, work)
            key = checksum or 'sha256:%s' % _sha256(payload)
            if not checksum and self._is_cached(existing, key):
                # The same bytes as last time: nothing to import.
                return existing['target'], key, False
            kind = sniff_image(payload, image_id)
            target = 'from Glance image %s' % image_id
            if kind == KIND_UNIFIED:
                fingerprint, created = self._import_unified(target, payload)
                return fingerprint, key, created
            metadata = os.path.join(work, 'metadata.tar.gz')
            properties = image_meta.properties
            architecture = (properties.get('hw_architecture')
                            if properties.obj_attr_is_set('hw_architecture')
                            else None) or platform.machine()
            write_metadata_tarball(metadata, architecture,
                                   'Glance image %s' % image_id)
            # the metadata names this Glance image: always a new image
            return self._client.import_split_image(
                target, metadata, payload, kind == KIND_SQUASHFS), key, True
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _stamp(info, field):
    """An LXD record's time ``field`` (naive UTC), None if never set."""
    value = info.get(field)
    if not value or value.startswith('0001-01-01'):
        return None
    return timeutils.normalize_time(timeutils.parse_isotime(value))


def _age_seconds(info, now):
    """Seconds since an LXD image was last used (or imported)."""
    stamps = [stamp for stamp in (_stamp(info, field) for field in (
        'last_used_at', 'uploaded_at', 'created_at')) if stamp is not None]
    if not stamps:
        return 0
    return (timeutils.normalize_time(now) - max(stamps)).total_seconds()


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, 'rb') as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b''):
            digest.update(chunk)
    return digest.hexdigest()


def snapshot_to_glance(client, context, name, image_id, update_task_state,
                       image_api=None, properties=None):
    """Publish the container as an image and upload it to ``image_id``.

    :param properties: Glance properties to set on the image, besides
        ``hypervisor_type``.
    """
    image_api = image_api or glance.API()
    update_task_state(task_state=task_states.IMAGE_PENDING_UPLOAD)
    snapshot = 'nova-snapshot-%s' % image_id
    client.create_snapshot(name, snapshot)
    fingerprint = None
    try:
        fingerprint = client.publish(
            'snapshot', '%s/%s' % (name, snapshot),
            {'description': 'snapshot %s of %s' % (image_id, name)})
        update_task_state(task_state=task_states.IMAGE_UPLOADING,
                          expected_state=task_states.IMAGE_PENDING_UPLOAD)
        with tempfile.TemporaryDirectory(prefix='nova-lxd-snap-') as tmp:
            path = os.path.join(tmp, 'image.tar')
            response = client.export_image(fingerprint)
            with open(path, 'wb') as out:
                for chunk in response.iter_content(chunk_size=1 << 20):
                    out.write(chunk)
            metadata = {'disk_format': 'raw', 'container_format': 'bare',
                        'properties': dict(properties or {},
                                           hypervisor_type='lxc')}
            with open(path, 'rb') as data:
                image_api.update(context, image_id, metadata, data)
    finally:
        if fingerprint:
            client.delete_image(fingerprint)
        client.delete_snapshot(name, snapshot)
