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

The watcher subscribes to the daemon's event websocket (``/1.0/events``,
lifecycle and operation events of the configured project). An event about
a container refreshes that container alone (one ``GET``); the events of a
burst (an action's lifecycle event and its operation's, a build's create
and start) are taken together, so each container is read once per burst.
A change of its power state is sent to Nova as a
:class:`nova.virt.event.LifecycleEvent`.
A container of ours that is gone (deleted behind Nova's back) is reported
``STOPPED``: Nova's periodic sync ignores NOSTATE by design, so without the
event the server would stay ACTIVE for good.

When the stream drops (the daemon restarts) the watcher reconnects with
exponential backoff, then lists the containers once and emits what changed
meanwhile. Only a daemon without the events API is polled (one listing per
``[lxd] lifecycle_poll_interval``). Which containers are ours is
:meth:`.identity.Owner.instances`'s answer; events of other
projects, other hosts and containers Nova did not make are never emitted.
"""

import threading
import time
import typing

from nova.compute import power_state
from nova.virt import event as virtevent
from oslo_log import log as logging

from nova_lxd_accel.accel import gate_seams
from nova_lxd_accel.container import identity
from nova_lxd_accel import exception
from nova_lxd_accel.instance import guest

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
    return {identity.instance_uuid(record): guest.power_state_of(record)
            for record in identity.instances(records, host)}


#: Lifecycle actions that may change an instance's power state or name.
_LIFECYCLE_ACTIONS = frozenset((
    'instance-started', 'instance-stopped', 'instance-shutdown',
    'instance-restarted', 'instance-paused', 'instance-resumed',
    'instance-deleted', 'instance-created', 'instance-renamed',
    'instance-updated', 'instance-restored'))


def _instance_name(url):
    """``name`` of ``/1.0/instances/<name>[/...][?...]``, else None."""
    path = (url or '').split('?', 1)[0].rstrip('/')
    prefix = '/1.0/instances/'
    if not path.startswith(prefix):
        prefix = '/1.0/containers/'
        if not path.startswith(prefix):
            return None
    return path[len(prefix):].split('/', 1)[0] or None


def event_instances(event):
    """Names of the instances an LXD event is about (maybe empty)."""
    metadata = event.get('metadata') or {}
    if event.get('type') == 'lifecycle':
        if metadata.get('action') not in _LIFECYCLE_ACTIONS:
            return []
        names = [_instance_name(metadata.get('source'))]
        old = (metadata.get('context') or {}).get('old_name')
        if old:
            names.append(old)
        return [name for name in names if name]
    if event.get('type') == 'operation':
        # Only ended operations change states (LXD without lifecycle
        # events, or an action that emits none).
        if metadata.get('status') not in ('Success', 'Failure',
                                          'Cancelled'):
            return []
        resources = metadata.get('resources') or {}
        urls = (resources.get('instances') or []) + (
            resources.get('containers') or [])
        return sorted({name for name in map(_instance_name, urls) if name})
    return []


class LifecycleWatcher(object):
    """A daemon thread turning the daemon's events into Nova's.

    :param owner: the host's :class:`.container.identity.Owner`: whose
        containers' events become nova's.
    :param interval: ``[lxd] lifecycle_poll_interval``: 0 turns the
        watcher off; otherwise the poll interval used only when the daemon
        has no events API.
    :param use_events: False polls whatever the daemon offers.
    :param gate: the GPU gate (:class:`.gate_seams.GoneGate`), told first
        when one of ours was removed behind nova's back (its
        ``note_gone``), or None.
    """

    def __init__(self, client, owner, interval, emit, use_events=True,
                 max_backoff=30.0, min_backoff=0.5, read_timeout=0.5,
                 burst=0.05, max_burst=200,
                 gate: typing.Optional[gate_seams.GoneGate] = None):
        self._client = client
        self._gate = gate
        self._owner = owner
        self._interval = interval
        self._emit = emit
        self._use_events = use_events
        self._max_backoff = max(max_backoff, min_backoff)
        self._min_backoff = min_backoff
        self._read_timeout = read_timeout
        #: how long after an event the next ones join it (s), and how many
        self._burst = burst
        self._max_burst = max_burst
        self._connect_timeout = 5
        self._stop = threading.Event()
        self._thread = None
        self._stream = None
        self._lock = threading.Lock()
        self._last = None
        #: {container name: (instance uuid, power state)} of ours
        self._known = None
        #: how the thread watches now: 'events', 'poll' or None
        self.mode = None
        #: how many times the stream was (re)connected
        self.connections = 0

    def start(self):
        if self._interval <= 0 or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, daemon=True,
            name='lxd-lifecycle-%s' % self._owner.host)
        self._thread.start()

    def stop(self):
        """Stop the thread; safe to call twice, also at the same time.

        nova's graceful shutdown and a clean-up can overlap: each call
        takes the thread it joins under the lock, so the second sees the
        same thread or none, never a half-cleared one.
        """
        self._stop.set()
        with self._lock:
            stream = self._stream
            thread = self._thread
        if stream is not None:
            stream.close()
        if thread is None or thread is threading.current_thread():
            return
        thread.join(timeout=max(self._interval, self._read_timeout) +
                    self._connect_timeout + 5)
        if thread.is_alive():
            LOG.warning('The lifecycle event thread did not stop in '
                        'time; it is a daemon thread and ends with '
                        'the process')
        with self._lock:
            if self._thread is thread:
                self._thread = None

    # -- what is ours -----------------------------------------------------

    def _own(self, record):
        """``(uuid, power state)`` of our instance's container, or None."""
        if record is None or record.get('type', 'container') != 'container':
            return None
        if not self._owner.instances([record]):
            return None
        uuid = identity.instance_uuid(record)
        # The container standing for the instance, not a kept original
        # of a resize (nova-resize-<uuid>) or a rescue container.
        expected = self._owner.container_name(uuid)
        if record.get('name') != expected:
            return None
        return uuid, guest.power_state_of(record)

    def _owned(self, records):
        owned = {}
        for record in records:
            mine = self._own(record)
            if mine is not None:
                owned[record['name']] = mine
        return owned

    def _send(self, uuid, old_state, new_state):
        name = lifecycle_event(old_state, new_state)
        if name is not None:
            self._emit(virtevent.LifecycleEvent(uuid, name))

    # -- events -----------------------------------------------------------

    def resync(self):
        """One listing; emit what changed since the last look."""
        current = self._owned(self._client.list_containers())
        previous, self._known = self._known, current
        if previous is None:
            return
        for name, (uuid, state) in current.items():
            if name in previous:
                self._send(uuid, previous[name][1], state)
        for name, (uuid, _state) in previous.items():
            if name not in current:
                self._gone(name, uuid)

    def _gone(self, name, uuid):
        LOG.warning('The container %(name)s of instance %(uuid)s is gone '
                    '(deleted on the daemon); reporting the instance '
                    'stopped', {'name': name, 'uuid': uuid})
        if self._gate is not None:
            # its GPU units first: no claim may take them until verified
            try:
                self._gate.note_gone(name)
            except Exception:
                LOG.exception('Telling the GPU gate that %s is gone '
                              'failed', name)
        # whatever state it was last seen in: a poll may have missed its
        # start, and nova ignores STOPPED for a server it has stopped
        self._emit(virtevent.LifecycleEvent(
            uuid, virtevent.EVENT_LIFECYCLE_STOPPED))

    def refresh(self, name, renamed_away=False):
        """Look at one container again; emit its change, if any."""
        record = self._client.get_container(name)
        mine = self._own(record)
        known = self._known.get(name)
        if mine is None:
            if known is not None:
                del self._known[name]
                if record is None and not renamed_away:
                    self._gone(name, known[0])
            return
        self._known[name] = mine
        if known is not None and known[0] == mine[0]:
            self._send(mine[0], known[1], mine[1])

    def handle(self, event):
        """Act on one event of the stream."""
        self.handle_all([event])

    def handle_all(self, events):
        """Act on events that came together: each container read once."""
        names, renamed_away = [], set()
        for event in events:
            project = event.get('project')
            if project and self._owner.project and \
                    project != self._owner.project:
                continue
            metadata = event.get('metadata') or {}
            old = None
            if metadata.get('action') == 'instance-renamed':
                old = (metadata.get('context') or {}).get('old_name')
            for name in event_instances(event):
                if name == old:
                    renamed_away.add(name)
                if name not in names:
                    names.append(name)
        for name in names:
            try:
                self.refresh(name, renamed_away=name in renamed_away)
            except exception.LXDObjectNotFound:
                self.refresh_gone(name)

    def refresh_gone(self, name):
        known = self._known.pop(name, None)
        if known is not None:
            self._gone(name, known[0])

    def _run(self):
        backoff = self._min_backoff
        failures = 0
        while not self._stop.is_set():
            if not self._use_events:
                self._poll()
                return
            try:
                stream = self._client.open_events(
                    timeout=self._connect_timeout)
            except exception.EventsUnsupported as exc:
                LOG.warning('%s', exc)
                self._poll()
                return
            except Exception as exc:
                failures += 1
                log = LOG.warning if failures == 1 else LOG.debug
                log('Cannot subscribe to the daemon\'s events (%(exc)s); '
                    'retrying in %(wait).1fs',
                    {'exc': exc, 'wait': backoff})
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self._max_backoff)
                continue
            with self._lock:
                self._stream = stream
            if self._stop.is_set():
                stream.close()
                break
            try:
                # Subscribed first, then listed: nothing falls between.
                self.resync()
                self.connections += 1
                self.mode = 'events'
                if failures:
                    LOG.info('Subscribed to the daemon\'s events again '
                             'after %d failed attempts', failures)
                failures, backoff = 0, self._min_backoff
                self._read(stream)
            except exception.LXDUnreachable as exc:
                # EventStreamLost included: the daemon restarted.
                if not self._stop.is_set():
                    LOG.warning('%s; reconnecting', exc)
            except Exception:
                if not self._stop.is_set():
                    LOG.exception('Lifecycle events failed; reconnecting')
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, self._max_backoff)
            finally:
                stream.close()
                with self._lock:
                    self._stream = None
        self.mode = None

    def _read(self, stream):
        while not self._stop.is_set():
            event = stream.next_event(self._read_timeout)
            if event is None or self._stop.is_set():
                continue
            burst = self._take_burst(stream, event)
            try:
                self.handle_all(burst)
            except exception.LXDUnreachable:
                raise
            except Exception:
                LOG.exception('Handling the LXD events %s failed', burst)

    def _take_burst(self, stream, event):
        """``event`` and those that follow it within the burst window."""
        burst = [event]
        deadline = time.monotonic() + self._burst
        while len(burst) < self._max_burst:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            more = stream.next_event(remaining)
            if more is None:
                break
            burst.append(more)
        return burst

    # -- polling (daemons without the events API) -------------------------

    def poll_once(self):
        try:
            current = owned_states(self._client.list_containers(),
                                   self._owner.host)
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
        for uuid in previous:
            if uuid not in current:
                # gone: deleted on the daemon (or by nova, which then
                # ignores the event: its instance has a task or is deleted)
                self._gone(self._owner.container_name(uuid),
                           uuid)

    def _poll(self):
        self.mode = 'poll'
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:  # never let the watcher die silently
                LOG.exception('Lifecycle poll failed')
            self._stop.wait(self._interval)
