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

"""Custom storage volumes, for nova_lxd_accel.instance.ephemeral.

The same API on LXD 5.0 and Incus 6.0:
``/1.0/storage-pools/<pool>/volumes/custom/<name>``, in the configured
project. A volume moves to another daemon as an instance does (the
``storage_api_remote_volume_handling`` API extension, pull mode): the
source offers it, the destination pulls it over HTTPS.
"""

from nova_lxd_accel.client import connection
from nova_lxd_accel import exception


class StorageClient(connection.Connection):
    """The volume requests of :class:`~nova_lxd_accel.client.LXDClient`."""

    def _custom_volume(self, pool, name):
        return self.api.storage_pools[pool].volumes.custom[name]

    @staticmethod
    def _volume_target(pool, name):
        return 'storage volume %s on pool %s' % (name, pool)

    def get_custom_volume(self, pool, name):
        """The volume's record (``config``, ``used_by``...) or None."""
        try:
            return self._call('read', self._volume_target(pool, name),
                              self._custom_volume(pool, name).get
                              ).json()['metadata']
        except exception.LXDObjectNotFound:
            return None

    def create_custom_volume(self, pool, name, config):
        """A filesystem custom volume with ``config`` (``size``...)."""
        body = {'name': name, 'type': 'custom',
                'content_type': 'filesystem', 'config': config}
        self._request('post', self.api.storage_pools[pool].volumes.custom,
                      'create', self._volume_target(pool, name), json=body)

    def update_custom_volume(self, pool, name, config):
        """Merge ``config`` into the volume's (PATCH)."""
        self._request('patch', self._custom_volume(pool, name), 'update',
                      self._volume_target(pool, name),
                      json={'config': config})

    def delete_custom_volume(self, pool, name):
        """Delete the volume; :returns: whether it existed."""
        try:
            self._request('delete', self._custom_volume(pool, name),
                          'delete', self._volume_target(pool, name))
        except exception.LXDObjectNotFound:
            return False
        return True

    def offer_volume_migration(self, pool, name):
        """Offer a volume to another daemon (pull mode), without snapshots.

        :returns: (operation id, websocket secrets) of the source side;
            the operation ends once a target has pulled the volume.
        """
        return self._offer(self._volume_target(pool, name),
                           self._custom_volume(pool, name),
                           {'name': name, 'migration': True,
                            'volume_only': True})

    def create_volume_from_migration(self, pool, name, config,
                                     operation_url, certificate, secrets,
                                     timeout=None):
        """Pull a volume offered by another daemon into ``pool``.

        :param operation_url: the source's migration operation URL.
        :param certificate: the source daemon's server certificate (PEM).
        """
        body = {'name': name, 'type': 'custom',
                'content_type': 'filesystem', 'config': config,
                'source': {'type': 'migration', 'mode': 'pull',
                           'operation': operation_url,
                           'certificate': certificate, 'secrets': secrets,
                           'volume_only': True}}
        self._request('post', self.api.storage_pools[pool].volumes.custom,
                      'migrate', self._volume_target(pool, name),
                      timeout=timeout, json=body)
