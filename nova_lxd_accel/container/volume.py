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

"""A Cinder volume connected to this host as an LXD device (pure).

Connecting and disconnecting through os-brick is hostside/volumes.py. The
device is named after the volume (``vol-<volume id>``), so detach finds it
whatever else changed. A ``/dev/...`` mount point (or none) gives a
``unix-block`` device, the raw block device; any other absolute path a
``disk`` device, whose file system LXD mounts there.
"""

import dataclasses
import re

from nova import exception as nova_exception

#: Prefix of the LXD devices that carry Cinder volumes.
DEVICE_PREFIX = 'vol-'


@dataclasses.dataclass(frozen=True)
class ConnectedVolume(object):
    """A Cinder volume connected to this host, to show in the container."""

    name: str
    host_path: str
    mountpoint: str = None


def volume_id_of(connection_info):
    data = connection_info.get('data') or {}
    return (connection_info.get('serial') or data.get('volume_id') or
            connection_info.get('volume_id'))


def device_name(connection_info, mountpoint=None):
    """The LXD device name of a volume: ``vol-<volume id>``.

    Without a volume id (old connection_info), the mount point names it.
    """
    volume_id = volume_id_of(connection_info)
    if volume_id:
        return DEVICE_PREFIX + str(volume_id)
    if mountpoint:
        return DEVICE_PREFIX + re.sub(r'[^A-Za-z0-9_.-]', '_',
                                      mountpoint.strip('/'))
    raise nova_exception.VolumeAttachFailed(
        volume_id='?', reason='connection_info names no volume')


def lxd_device(host_path, mountpoint, name):
    """The LXD device that shows ``host_path`` at ``mountpoint``."""
    if not mountpoint:
        mountpoint = '/dev/%s' % name
    if mountpoint.startswith('/dev/'):
        return {'type': 'unix-block', 'source': host_path,
                'path': mountpoint}
    if mountpoint.startswith('/') and '..' not in mountpoint.split('/'):
        return {'type': 'disk', 'source': host_path, 'path': mountpoint}
    raise nova_exception.VolumeAttachFailed(
        volume_id=name[len(DEVICE_PREFIX):],
        reason='mount point %r is neither a /dev path nor an absolute '
               'directory' % mountpoint)
