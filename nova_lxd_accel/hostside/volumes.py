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

"""Cinder volumes in containers, through os-brick.

os-brick connects a volume to the host (iSCSI, FC, NVMe-oF, RBD, local,
...) and returns a host block device; LXD hands that device to the
container. Where it appears depends on the mount point nova gives (the
block device mapping's ``mount_device``, or the ``device`` of a volume
attachment):

* ``/dev/...`` (what nova hands out, e.g. ``/dev/vdb``), or none: an LXD
  ``unix-block`` device, the raw block device at that path in the
  container. Any file system works, or none at all: the container reads
  and writes the device itself.
* any other absolute path (e.g. ``/mnt/data``, only reachable through a
  boot-time block device mapping's ``device_name``): an LXD ``disk``
  device; LXD mounts the volume's file system there, so it must be one
  the host kernel mounts and ``blkid`` recognises (ext2/3/4, xfs, btrfs,
  vfat, ...). An unprivileged container sees the on-disk owners through
  its id map: files owned by host uid 0 show as nobody, so make the file
  system for such a volume with its root owned by the container's mapped
  root (e.g. ``mkfs.ext4 -E root_owner=100000:100000``) to write to it.

The LXD device is named after the volume (``vol-<volume id>``), so detach
finds it whatever else changed. Encrypted volumes (os-brick encryptors)
and multi-attach are not supported, nor is booting from a volume (refused
at spawn by :mod:`nova_lxd_accel.instance.lifecycle`).
"""

import os
import stat

from nova import exception as nova_exception
from nova import utils as nova_utils
from nova.virt import driver as virt_driver
from os_brick.initiator import connector as brick_connector
from oslo_log import log as logging
from oslo_utils import excutils

from nova_lxd_accel.container import volume
from nova_lxd_accel import exception

LOG = logging.getLogger(__name__)

#: ComputeDriver capabilities this module provides (merged by the driver).
CAPABILITIES = {
    # One container per volume attachment; LXD could share a block device
    # but nothing coordinates writers.
    'supports_multiattach': False,
    # The container would see the new size, but nova's extend_volume hook
    # is not implemented.
    'supports_extend_volume': False,
}


def _not_a_block_device(path):
    """Why ``path`` is not a block device of this host, or None."""
    try:
        if path and stat.S_ISBLK(os.stat(path).st_mode):
            return None
        return 'which is not a block device on this host'
    except OSError as exc:
        return 'which cannot be used: %s' % exc


def _is_encrypted(connection_info, encryption):
    data = connection_info.get('data') or {}
    return bool(data.get('encrypted') or
                (encryption or {}).get('provider'))


class Volumes(object):
    """Cinder volumes of one host's containers.

    :param guest_of: callable(instance) -> its :class:`.guest.Guest` (the
        host's :meth:`.host.Host.guest`).
    """

    def __init__(self, client, conf, guest_of):
        self._client = client
        self._conf = conf
        self._guest_of = guest_of
        self._connectors = {}

    # -- host side (os-brick) ---------------------------------------------

    def connector(self, instance):
        """This host's initiator properties, handed to Cinder.

        As nova's libvirt driver: os-brick probes every protocol; the
        privileged parts run through nova-compute's privsep daemon.
        Multipath is off (no option for it in [lxd] yet).
        """
        return brick_connector.get_connector_properties(
            nova_utils.get_root_helper(), self._conf.my_block_storage_ip,
            False, False, host=self._conf.host)

    def _brick(self, connection_info):
        protocol = connection_info.get('driver_volume_type')
        if not protocol:
            raise nova_exception.VolumeAttachFailed(
                volume_id=volume.volume_id_of(connection_info),
                reason='connection_info has no driver_volume_type')
        protocol = protocol.upper()
        if protocol not in self._connectors:
            try:
                self._connectors[protocol] = \
                    brick_connector.InitiatorConnector.factory(
                        protocol, nova_utils.get_root_helper(),
                        use_multipath=False,
                        device_scan_attempts=5)
            except ValueError as exc:
                raise nova_exception.VolumeAttachFailed(
                    volume_id=volume.volume_id_of(connection_info),
                    reason='os-brick cannot connect %s volumes: %s' %
                    (protocol, exc))
        return self._connectors[protocol]

    def _connect(self, connection_info, encryption=None):
        """Connect the volume to this host.

        :returns: (host block device path, os-brick's device_info)
        """
        volume_id = volume.volume_id_of(connection_info)
        if _is_encrypted(connection_info, encryption):
            raise nova_exception.VolumeEncryptionNotSupported(
                volume_type=connection_info.get('driver_volume_type'),
                volume_id=volume_id)
        brick = self._brick(connection_info)
        device_info = brick.connect_volume(connection_info['data'])
        path = (device_info or {}).get('path')
        why = _not_a_block_device(path)
        if why:
            self._disconnect_quietly(connection_info, None, device_info)
            raise nova_exception.VolumeAttachFailed(
                volume_id=volume_id,
                reason='os-brick connected it as %r, %s' % (path, why))
        # As nova's libvirt volume drivers: nova saves connection_info after
        # attach, so disconnect_volume finds the device again.
        connection_info['data']['device_path'] = path
        LOG.debug('Volume %(volume)s is %(path)s on this host',
                  {'volume': volume_id, 'path': path})
        return path, device_info

    def _disconnect(self, connection_info, device_info=None):
        self._brick(connection_info).disconnect_volume(
            connection_info['data'], device_info)

    def _disconnect_quietly(self, connection_info, instance,
                            device_info=None):
        try:
            self._disconnect(connection_info, device_info)
        except Exception:
            LOG.exception('Could not disconnect volume %s from this host',
                          volume.volume_id_of(connection_info),
                          instance=instance)

    # -- spawn and destroy ------------------------------------------------

    def connect_boot_volumes(self, context, instance, block_device_info):
        """Connect the non-root volumes mapped at boot to this host.

        If one fails, the ones connected so far are disconnected again.

        :returns: a :class:`.container.volume.ConnectedVolume` each, for
            :func:`.container.builder.volumes`.
        """
        connected = []
        try:
            for bdm in virt_driver.block_device_info_get_mapping(
                    block_device_info):
                if bdm.get('boot_index') == 0:
                    # lifecycle.spawn refuses root volumes before this.
                    continue
                connection_info = bdm['connection_info']
                name = volume.device_name(connection_info,
                                          bdm.get('mount_device'))
                path, _info = self._connect(connection_info)
                connected.append((connection_info, volume.ConnectedVolume(
                    name=name, host_path=path,
                    mountpoint=bdm.get('mount_device'))))
        except Exception:
            with excutils.save_and_reraise_exception():
                for connection_info, _volume in connected:
                    self._disconnect_quietly(connection_info, instance)
        return tuple(connected_volume for _info, connected_volume in connected)

    def disconnect_all(self, instance, block_device_info):
        """Disconnect every volume of ``block_device_info`` from the host.

        A root volume (``boot_index`` 0) was never connected: spawn
        refuses it.
        """
        for bdm in virt_driver.block_device_info_get_mapping(
                block_device_info):
            if bdm.get('boot_index') == 0:
                continue
            connection_info = bdm.get('connection_info')
            if connection_info and connection_info.get('data') is not None:
                self._disconnect_quietly(connection_info, instance)

    # -- hot attach and detach --------------------------------------------

    def attach(self, context, connection_info, instance, mountpoint,
               disk_bus=None, device_type=None, encryption=None):
        """Connect the volume and add it to the container (running or not).

        ``disk_bus`` and ``device_type`` mean nothing to a container.
        """
        guest = self._guest_of(instance)
        guest.require_record()
        name = volume.device_name(connection_info, mountpoint)
        path, device_info = self._connect(connection_info, encryption)
        device = volume.lxd_device(path, mountpoint, name)

        def add_volume(config, devices):
            if name in devices:
                raise nova_exception.VolumeAttachFailed(
                    volume_id=volume.volume_id_of(connection_info),
                    reason='container %s already has device %s' %
                    (guest.name, name))
            devices[name] = device

        try:
            # only this volume's key, read-modify-write with the ETag
            if self._client.modify_container(guest.name, add_volume) is None:
                guest.require_record()
        except exception.LXDOperationFailed as exc:
            self._disconnect_quietly(connection_info, instance, device_info)
            raise nova_exception.VolumeAttachFailed(
                volume_id=volume.volume_id_of(connection_info),
                reason=str(exc))
        except Exception:
            with excutils.save_and_reraise_exception():
                self._disconnect_quietly(connection_info, instance,
                                         device_info)
        LOG.info('Attached volume %(volume)s (%(path)s) as LXD %(type)s '
                 'device %(name)s at %(mount)s',
                 {'volume': volume.volume_id_of(connection_info),
                  'path': path, 'type': device['type'], 'name': name,
                  'mount': device['path']}, instance=instance)

    def _find_device(self, devices, name, connection_info, mountpoint):
        if name in devices:
            return name
        # Attached under another name (e.g. by hand): match the path.
        for other, device in devices.items():
            if other.startswith(volume.DEVICE_PREFIX) and mountpoint and \
                    device.get('path') == mountpoint:
                return other
        return None

    def detach(self, context, connection_info, instance, mountpoint,
               encryption=None):
        """Remove the volume's device from the container, then disconnect."""
        guest = self._guest_of(instance)
        name = volume.device_name(connection_info, mountpoint)
        removed = []

        def remove_volume(config, devices):
            found = self._find_device(devices, name, connection_info,
                                      mountpoint)
            if found is None:
                return False
            del devices[found]
            removed[:] = [found]

        try:
            # only this volume's key, read-modify-write with the ETag (a
            # whole-record PUT: a PATCH cannot remove a device)
            self._client.modify_container(guest.name, remove_volume)
        except exception.LXDOperationFailed as exc:
            raise nova_exception.DeviceDetachFailed(
                device=mountpoint or name, reason=str(exc))
        if removed:
            LOG.info('Removed LXD device %(name)s (volume %(volume)s)',
                     {'name': removed[0],
                      'volume': volume.volume_id_of(connection_info)},
                     instance=instance)
        else:
            LOG.warning('Container %(container)s has no device for '
                        'volume %(volume)s; disconnecting it from the '
                        'host only', {'container': guest.name,
                                      'volume': volume.volume_id_of(
                                          connection_info)},
                        instance=instance)
        self._disconnect(connection_info)
