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

"""The one seam between nova-lxd-accel and LXD.

Only this package imports pylxd. It speaks LXD's REST API through pylxd's
low-level ``api`` node (so every request is explicit and honours the
configured project), waits for LXD's background operations itself with a
timeout, and turns every LXD or transport error into one of the project's
exceptions, which name the action, the object and what LXD said.

Its modules, each importing only those before it:

- :mod:`.connection`: finding and opening the daemon, the error mapping,
  operations, the daemon's identity and host resources;
- :mod:`.events`: the event websocket (:class:`EventStream`);
- :mod:`.images`: images and aliases;
- :mod:`.storage`: custom storage volumes (ephemeral disks);
- :mod:`.instances`: :class:`LXDClient`, the whole seam (containers,
  config, devices, state, snapshots, files, migration) and
  :class:`RemoteLXDClient`.

Callers use ``from nova_lxd_accel import client as lxd_client`` and the
names below.
"""

from nova_lxd_accel.client import connection
from nova_lxd_accel.client import events
from nova_lxd_accel.client import instances

REQUIRED_EXTENSIONS = connection.REQUIRED_EXTENSIONS
WELL_KNOWN_SOCKETS = connection.WELL_KNOWN_SOCKETS
candidate_sockets = connection.candidate_sockets
discover = connection.discover
verify_setting = connection.verify_setting

EventStream = events.EventStream
LXDClient = instances.LXDClient
RemoteLXDClient = instances.RemoteLXDClient
