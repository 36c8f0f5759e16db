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

"""The ephemeral disk: a custom storage volume of the instance's pool.

A flavor's ``ephemeral_gb`` becomes an LXD custom volume of that size
(``<container name>-ephemeral0``, on the pool of the root disk) that the
container mounts at ``/mnt`` (:func:`.container.builder.ephemeral_disk`).
It is made before the container is created and deleted with it on every
path (destroy, a failed spawn, the kept original of a failed move). Its
size is the volume's ``size``: enforced by btrfs, zfs and lvm pools;
``dir`` pools accept it without enforcing it, as they do the root disk's.
Container snapshots (nova's image snapshots) leave custom volumes out.

A cold migration or a resize to another host sends the volume with its
data before the container (:meth:`EphemeralDisks.send`), as the libvirt
driver copies an instance's ephemeral disks; the source deletes its copy
when the move is confirmed and keeps it for a revert. An evacuation
rebuilds the instance with a new, empty volume, as nova's other drivers
do without shared storage.
"""

from nova import exception as nova_exception
from nova.virt import driver as virt_driver
from oslo_log import log as logging
from oslo_utils import excutils

from nova_lxd_accel.container import builder
from nova_lxd_accel import exception

LOG = logging.getLogger(__name__)


def check_mappings(instance, block_device_info):
    """Refuse ephemeral and swap mappings other than the flavor's one.

    nova maps the flavor's ephemeral disk as one blank local device of
    ``ephemeral_gb``; a container gets exactly that volume, so several
    ephemeral disks, another size, or swap are refused, never dropped.
    """
    flavor = instance.flavor
    swap = virt_driver.block_device_info_get_swap(block_device_info)
    if swap.get('swap_size'):
        raise exception.EphemeralDiskRefused(
            instance_id=instance.uuid,
            reason='LXD containers cannot have a swap disk of a given size')
    ephemerals = virt_driver.block_device_info_get_ephemerals(
        block_device_info)
    if not ephemerals:
        return
    sizes = [int(bdm.get('size') or 0) for bdm in ephemerals]
    formats = [bdm.get('guest_format') for bdm in ephemerals]
    if len(ephemerals) > 1 or sizes[0] != flavor.ephemeral_gb or \
            formats[0] == 'swap':
        raise exception.EphemeralDiskRefused(
            instance_id=instance.uuid,
            reason='a container has one ephemeral disk, of the flavor\'s '
                   'size (%d GiB), mounted at %s; asked for %s' % (
                       flavor.ephemeral_gb, builder.EPHEMERAL_PATH,
                       ', '.join('%d GiB%s' % (size, ' swap' if fmt ==
                                               'swap' else '')
                                 for size, fmt in zip(sizes, formats))))


class EphemeralDisks(object):
    """Make, grow and delete instances' ephemeral volumes on one daemon."""

    def __init__(self, client, conf):
        self._client = client
        self._conf = conf

    def _name(self, instance):
        return builder.ephemeral_volume_name(
            self._conf.lxd.container_name_prefix, instance.uuid)

    def _pool(self, record=None):
        device = ((record or {}).get('devices') or {}).get(
            builder.EPHEMERAL_DEVICE) or {}
        return device.get('pool') or self._conf.lxd.storage_pool

    def create(self, instance, flavor):
        """The flavor's volume, empty, before the container is made.

        A volume of the same name left by an earlier attempt of this
        instance (no container uses it) is replaced: the instance is being
        built, nothing of it is kept.
        """
        if not flavor.ephemeral_gb:
            return
        pool, name = self._pool(), self._name(instance)
        if self._client.get_custom_volume(pool, name) is not None:
            LOG.warning('Replacing storage volume %s left by an earlier '
                        'attempt', name, instance=instance)
            self._client.delete_custom_volume(pool, name)
        self._client.create_custom_volume(
            pool, name, builder.ephemeral_volume_config(flavor))
        LOG.info('Ephemeral disk %(name)s of %(size)d GiB made on pool '
                 '%(pool)s', {'name': name, 'size': flavor.ephemeral_gb,
                              'pool': pool}, instance=instance)

    @staticmethod
    def check_resize(instance, flavor):
        """Refuse a resize the ephemeral disk cannot follow.

        :raises: ResizeError: it would shrink (a file system cannot be
            cut to a smaller quota without losing what lies beyond it).
        """
        old, new = instance.flavor.ephemeral_gb, flavor.ephemeral_gb
        if new < old:
            raise nova_exception.ResizeError(
                reason='the ephemeral disk cannot shrink (%d GiB to %d GiB)'
                       % (old, new))

    def send(self, instance, record, remote, source_address, certificate,
             timeout=None):
        """Send the stopped instance's volume to another host's daemon.

        The destination pulls it over HTTPS, as it pulls the container
        (:mod:`.migration`); a copy left there by an earlier attempt is
        replaced. The source keeps its volume (the kept original mounts
        it) until the move is confirmed.

        :param record: the container's record (names the pool).
        :param remote: the destination's client.
        :returns: whether there was a volume to send.
        """
        pool, name = self._pool(record), self._name(instance)
        volume = self._client.get_custom_volume(pool, name)
        if volume is None:
            return False
        if remote.get_custom_volume(pool, name) is not None:
            LOG.warning('Replacing storage volume %s left on the '
                        'destination by an earlier attempt', name,
                        instance=instance)
            remote.delete_custom_volume(pool, name)
        config = {key: value for key, value in
                  (volume.get('config') or {}).items()
                  if not key.startswith('volatile.')}
        operation_id, secrets = self._client.offer_volume_migration(pool,
                                                                    name)
        url = 'https://%s/1.0/operations/%s' % (source_address, operation_id)
        try:
            remote.create_volume_from_migration(
                pool, name, config, url, certificate, secrets,
                timeout=timeout)
            self._client.wait_operation(
                operation_id, 'migrate',
                'storage volume %s on pool %s' % (name, pool),
                timeout=timeout)
        except Exception:
            with excutils.save_and_reraise_exception():
                self._client.cancel_operation(operation_id)
                self.delete_remote_quietly(instance, record, remote)
        LOG.info('Ephemeral disk %(name)s sent to %(url)s',
                 {'name': name, 'url': getattr(remote, 'endpoint', None)},
                 instance=instance)
        return True

    def delete_remote_quietly(self, instance, record, remote):
        """Delete the volume sent to ``remote``; errors are logged."""
        pool, name = self._pool(record), self._name(instance)
        try:
            remote.delete_custom_volume(pool, name)
        except Exception:
            LOG.exception('Could not remove the partial copy of ephemeral '
                          'disk %s from the destination', name,
                          instance=instance)

    def grow(self, instance, flavor):
        """Make the volume of the new flavor, or grow it to its size."""
        if not flavor.ephemeral_gb:
            return
        pool, name = self._pool(), self._name(instance)
        if self._client.get_custom_volume(pool, name) is None:
            self.create(instance, flavor)
            return
        self._client.update_custom_volume(
            pool, name, builder.ephemeral_volume_config(flavor))
        LOG.info('Ephemeral disk %(name)s grown to %(size)d GiB',
                 {'name': name, 'size': flavor.ephemeral_gb},
                 instance=instance)

    def delete(self, instance, record=None):
        """Delete the volume once no container uses it.

        :param record: the container's last record (names the pool).
        :returns: whether the volume is gone (or never was).
        """
        pool, name = self._pool(record), self._name(instance)
        volume = self._client.get_custom_volume(pool, name)
        if volume is None:
            return True
        if volume.get('used_by'):
            # the kept original of a same-host resize still mounts it
            LOG.info('Keeping ephemeral disk %(name)s: used by %(users)s',
                     {'name': name, 'users': volume['used_by']},
                     instance=instance)
            return False
        self._client.delete_custom_volume(pool, name)
        LOG.info('Ephemeral disk %s deleted', name, instance=instance)
        return True

    def delete_quietly(self, instance, record=None):
        """:meth:`delete` after a failure: errors are logged."""
        try:
            self.delete(instance, record)
        except exception.LXDAccelException as exc:
            LOG.error('Could not delete ephemeral disk %(name)s: %(exc)s; '
                      'delete it with `lxc storage volume delete %(pool)s '
                      '%(name)s`', {'name': self._name(instance), 'exc': exc,
                                    'pool': self._pool(record)},
                      instance=instance)
