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

"""Nova lifecycle events for changes made outside Nova.

LXD 5.0 has an events websocket, but a poll of one ``GET /1.0/instances``
per interval is simpler to make robust (daemon restarts, both of nova's
threading models) and cheap: it compares each owned container's status
with the previous look and emits started/stopped/paused/resumed/suspended.
"""

import threading

from nova.compute import power_state
from nova.virt import event as virtevent
from oslo_log import log as logging

from nova_lxd_accel import exception
from nova_lxd_accel import guest
from nova_lxd_accel import ownership

LOG = logging.getLogger(__name__)


def lifecycle_event(old_state, new_state):
    """The lifecycle event for a power-state change, or None."""
    if old_state == new_state:
        return None
    if new_state == power_state.RUNNING:
        if old_state in (power_state.PAUSED, power_state.SUSPENDED):
            return virtevent.EVENT_LIFECYCLE_RESUMED
        return virtevent.EVENT_LIFECYCLE_STARTED
    if new_state == power_state.SHUTDOWN:
        return virtevent.EVENT_LIFECYCLE_STOPPED
    if new_state == power_state.PAUSED:
        return virtevent.EVENT_LIFECYCLE_PAUSED
    if new_state == power_state.SUSPENDED:
        return virtevent.EVENT_LIFECYCLE_SUSPENDED
    return None


def owned_states(records, host):
    """{instance uuid: power state} of the containers this host owns."""
    return {ownership.instance_uuid(record): guest.power_state_of(record)
            for record in ownership.instances(records, host)}


class LifecycleWatcher(object):
    """A background thread turning observed state changes into events."""

    def __init__(self, client, host, interval, emit):
        self._client = client
        self._host = host
        self._interval = interval
        self._emit = emit
        self._stop = threading.Event()
        self._thread = None
        self._last = None

    def start(self):
        if self._interval <= 0 or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name='lxd-lifecycle-%s' % self._host)
        self._thread.start()

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._interval + 5)
            self._thread = None

    def poll_once(self):
        try:
            current = owned_states(self._client.list_containers(),
                                   self._host)
        except exception.LXDAccelException as exc:
            LOG.debug('Lifecycle poll skipped: %s', exc)
            return
        previous, self._last = self._last, current
        if previous is None:
            return
        for uuid, state in current.items():
            name = lifecycle_event(previous.get(uuid, state), state)
            if name is not None:
                self._emit(virtevent.LifecycleEvent(uuid, name))

    def _run(self):
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:  # never let the watcher die silently
                LOG.exception('Lifecycle poll failed')
            self._stop.wait(self._interval)
