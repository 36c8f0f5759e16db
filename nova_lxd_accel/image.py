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
holds the checksum, so a changed image is imported again). Accepted
payloads are LXD images: a unified tarball (``metadata.yaml`` + ``rootfs/``),
or a root file system alone (tarball or squashfs), for which a metadata
tarball is generated and the pair imported as a split image.

Out: ``snapshot`` publishes an LXD snapshot of the container as an image
and uploads it to Glance as a unified tarball.
"""

import hashlib
import io
import os
import platform
import tarfile
import tempfile
import time

from nova.compute import task_states
from nova import exception as nova_exception
from nova.image import glance
from oslo_concurrency import lockutils
from oslo_log import log as logging
from oslo_utils import timeutils

from nova_lxd_accel import exception

LOG = logging.getLogger(__name__)

ALIAS_PREFIX = 'nova-image-'

# Disk formats that can never hold an LXD container image.
VM_DISK_FORMATS = ('qcow2', 'iso', 'vmdk', 'vhd', 'vhdx', 'vdi', 'ploop',
                   'aki', 'ari', 'ami')

_COMPRESSED_MAGIC = (b'\x1f\x8b', b'\xfd7zXZ\x00', b'BZh', b'\x28\xb5\x2f\xfd')
_SQUASHFS_MAGIC = b'hsqs'

# Looking this far into a tarball for metadata.yaml is plenty: LXD and
# distrobuilder write it first.
_TAR_MEMBERS_TO_SCAN = 500

KIND_UNIFIED = 'unified'
KIND_ROOTFS_TAR = 'rootfs-tarball'
KIND_SQUASHFS = 'squashfs'


def image_alias(image_id):
    return ALIAS_PREFIX + image_id


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


def sniff_image(path, image_id):
    """Which kind of LXD image the file at ``path`` holds.

    :raises: ImageUnacceptable when it is none of them.
    """
    with open(path, 'rb') as handle:
        head = handle.read(512)
    if head.startswith(_SQUASHFS_MAGIC):
        return KIND_SQUASHFS
    is_tar = (any(head.startswith(magic) for magic in _COMPRESSED_MAGIC) or
              head[257:262] == b'ustar')
    if not is_tar:
        raise nova_exception.ImageUnacceptable(
            image_id=image_id,
            reason='the image is neither a tarball nor a squashfs file '
                   'system; upload an LXD image (for example one made by '
                   '`lxc publish` + `lxc image export`)')
    try:
        with tarfile.open(path, 'r:*') as archive:
            for count, member in enumerate(archive):
                name = member.name.lstrip('./')
                if name == 'metadata.yaml':
                    return KIND_UNIFIED
                if count >= _TAR_MEMBERS_TO_SCAN:
                    break
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise nova_exception.ImageUnacceptable(
            image_id=image_id, reason='unreadable tarball: %s' % exc)
    return KIND_ROOTFS_TAR


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

    def __init__(self, client, image_api=None):
        self._client = client
        self._image_api = image_api or glance.API()

    def ensure(self, context, image_meta):
        """The LXD alias of the instance's image, importing it if needed."""
        check_disk_format(image_meta)
        image_id = image_meta.id
        alias = image_alias(image_id)
        checksum = image_checksum(image_meta)
        with lockutils.lock('lxd-image-%s' % image_id):
            existing = self._client.get_alias(alias)
            if existing is not None and existing.get('description') == \
                    checksum:
                return alias
            fingerprint = self._import(context, image_meta)
            self._client.set_alias(alias, fingerprint, description=checksum)
            LOG.info('Imported Glance image %(image)s into LXD as %(fp)s',
                     {'image': image_id, 'fp': fingerprint})
            return alias

    @property
    def image_api(self):
        return self._image_api

    def cache(self, context, image_meta):
        """Pre-cache an image; True if it was fetched, False if cached."""
        alias = image_alias(image_meta.id)
        existing = self._client.get_alias(alias)
        fresh = (existing is not None and
                 existing.get('description') == image_checksum(image_meta))
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
        # LXD names a unified image by the SHA-256 of its tarball: when
        # that image is already there (another Glance image with the same
        # bytes, or an earlier import whose alias was lost) reuse it.
        fingerprint = _sha256(payload)
        if self._client.image_exists(fingerprint):
            return fingerprint
        try:
            with open(payload, 'rb') as data:
                return self._client.import_image(
                    target, data, {'Content-Type': 'application/octet-stream'})
        except exception.LXDOperationFailed:
            # Lost a race with a concurrent import of the same bytes.
            if self._client.image_exists(fingerprint):
                return fingerprint
            raise

    def _import(self, context, image_meta):
        image_id = image_meta.id
        with tempfile.TemporaryDirectory(prefix='nova-lxd-image-') as tmp:
            payload = os.path.join(tmp, 'image')
            self._image_api.download(context, image_id, dest_path=payload)
            kind = sniff_image(payload, image_id)
            target = 'from Glance image %s' % image_id
            if kind == KIND_UNIFIED:
                return self._import_unified(target, payload)
            metadata = os.path.join(tmp, 'metadata.tar.gz')
            properties = image_meta.properties
            architecture = (properties.get('hw_architecture')
                            if properties.obj_attr_is_set('hw_architecture')
                            else None) or platform.machine()
            write_metadata_tarball(metadata, architecture,
                                   'Glance image %s' % image_id)
            return self._client.import_split_image(
                target, metadata, payload, kind == KIND_SQUASHFS)


def _age_seconds(info, now):
    """Seconds since an LXD image was last used (or imported)."""
    stamps = []
    for field in ('last_used_at', 'uploaded_at', 'created_at'):
        value = info.get(field)
        if value and not value.startswith('0001-01-01'):
            stamps.append(timeutils.normalize_time(
                timeutils.parse_isotime(value)))
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
                       image_api=None):
    """Publish the container as an image and upload it to ``image_id``."""
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
                        'properties': {'hypervisor_type': 'lxc'}}
            with open(path, 'rb') as data:
                image_api.update(context, image_id, metadata, data)
    finally:
        if fingerprint:
            client.delete_image(fingerprint)
        client.delete_snapshot(name, snapshot)
