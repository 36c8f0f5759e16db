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

"""Images and their aliases, for nova_lxd_accel.instance.image_cache."""

from requests_toolbelt import multipart

from nova_lxd_accel.client import connection
from nova_lxd_accel import exception


class ImageClient(connection.Connection):
    """The image requests of :class:`~nova_lxd_accel.client.LXDClient`."""

    def get_alias(self, alias):
        try:
            return self._call('read', 'image alias %s' % alias,
                              self.api.images.aliases[alias].get
                              ).json()['metadata']
        except exception.LXDObjectNotFound:
            return None

    def list_aliases(self):
        """Every image alias of the project: name, target, description."""
        return self._call('list', 'image aliases',
                          self.api.images.aliases.get,
                          params={'recursion': 1}).json()['metadata']

    def image_info(self, fingerprint):
        """An image's record (``uploaded_at``, ``last_used_at``, ...)."""
        return self._call('read', 'image %s' % fingerprint,
                          self.api.images[fingerprint].get).json()['metadata']

    def image_exists(self, fingerprint):
        try:
            self._call('read', 'image %s' % fingerprint,
                       self.api.images[fingerprint].get)
        except exception.LXDObjectNotFound:
            return False
        return True

    def import_image(self, target, data, headers):
        """POST an image body; returns its fingerprint."""
        metadata = self._request('post', self.api.images, 'import',
                                 'image %s' % target, data=data,
                                 headers=headers)
        return metadata['fingerprint']

    def import_split_image(self, target, metadata_path, rootfs_path,
                           rootfs_is_squashfs):
        """Import a metadata tarball plus a rootfs (tarball or squashfs)."""
        # A container's root file system is the ``rootfs`` part whether it
        # is a tarball or squashfs: ``rootfs.img`` is a VM disk, and LXD
        # would refuse to make a container from it.
        rootfs_part = 'rootfs'
        with open(metadata_path, 'rb') as metadata, \
                open(rootfs_path, 'rb') as rootfs:
            body = multipart.MultipartEncoder(fields=[
                ('metadata', ('metadata', metadata,
                              'application/octet-stream')),
                (rootfs_part, (rootfs_part, rootfs,
                               'application/octet-stream'))])
            return self.import_image(
                target, body, {'Content-Type': body.content_type})

    def delete_alias(self, alias):
        self._call('delete', 'image alias %s' % alias,
                   self.api.images.aliases[alias].delete)

    def set_alias(self, alias, fingerprint, description=''):
        if self.get_alias(alias) is not None:
            self.delete_alias(alias)
        self._call('create', 'image alias %s' % alias,
                   self.api.images.aliases.post,
                   json={'name': alias, 'target': fingerprint,
                         'description': description})

    def delete_image(self, fingerprint):
        self._request('delete', self.api.images[fingerprint], 'delete',
                      'image %s' % fingerprint)

    def publish(self, source_type, source_name, properties):
        """Make an image of an instance or snapshot; returns fingerprint."""
        body = {'source': {'type': source_type, 'name': source_name},
                'properties': properties, 'public': False}
        metadata = self._request('post', self.api.images, 'publish',
                                 '%s %s' % (source_type, source_name),
                                 json=body)
        return metadata['fingerprint']

    def export_image(self, fingerprint):
        """A streaming response with the image file(s)."""
        return self._call('export', 'image %s' % fingerprint,
                          self.api.images[fingerprint].export.get,
                          is_api=False, stream=True)
