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

"""The gate's release side: what the driver tells it of bound units.

A claim wrote units into a container (:meth:`ReleaseNotices.note_bound`);
the driver is about to remove a container
(:meth:`ReleaseNotices.note_destroy`, and
:meth:`ReleaseNotices.removal_failed` when it stays); the lifecycle
watcher saw one removed behind nova's back
(:meth:`ReleaseNotices.note_gone`). Each writes the ledger (the state
file) at once: a released unit is *dirty* until a probe taken after the
release finds it clean. :meth:`ReleaseNotices.verify_release` is the
delete's wait for its units: it waits up to ``release_wait`` seconds
(every probe ends by that deadline, whatever nvidia-smi does); the units
still dirty are left to the re-check thread (:mod:`.release_check`).
"""

import json

from oslo_log import log as logging

from nova_lxd_accel.accel.health import gate_state
from nova_lxd_accel.accel.health import holds
from nova_lxd_accel.accel.health import release
from nova_lxd_accel.container import identity

LOG = logging.getLogger(__name__)

#: seconds between two probes while a release waits for its GPUs
RELEASE_POLL = 0.5
#: the least time the first probe of a release gets, whatever
#: ``release_wait`` says (0 still probes once)
FIRST_PROBE_MIN = 0.5


def mark_dirty(state, key, unit, known, now, last_snapshot):
    """Write the dirty entry of a unit released at ``now``.

    An entry already there (same release, seen twice) keeps its time.

    :param last_snapshot: the last probe (where a MIG device was).
    """
    if key in state['dirty']:
        return
    state['dirty'][key] = release.dirty_entry(
        unit, now, seq=gate_state.next_seq(state),
        place=release.mig_place(unit, known, last_snapshot))


class ReleaseNotices(object):
    """Writes what the driver tells of bound and released units.

    :param conf: ConfigOpts with ``[lxd_accelerators]``.
    :param store: the :class:`.gate_state.StateStore`.
    :param reads: the gate's :class:`.gate_reads.GateReads`.
    :param check: the gate's :class:`.release_check.ReleaseCheck`.
    :param clock: zero-argument callable returning seconds.
    :param sleep: callable(seconds), between the release wait's probes.
    :param monotonic: zero-argument callable, the release wait's clock.
    """

    def __init__(self, conf, store, reads, check, clock, sleep, monotonic):
        self._conf = conf
        self._store = store
        self._reads = reads
        self._check = check
        self._clock = clock
        self._sleep = sleep
        self._monotonic = monotonic

    @property
    def _verifying(self):
        return release.verifying(self._conf)

    def _mark_dirty(self, state, key, unit, known, now):
        mark_dirty(state, key, unit, known, now, self._reads.last_snapshot)

    def note_destroy(self, read_record):
        """Mark the GPU units of a container about to be deleted dirty.

        Called before the driver removes a container, so that a unit is
        verified even when its instance lived between two probes. Never
        raises.

        :param read_record: zero-argument callable returning the
            container's LXD record (or None).
        :returns: the keys of the units marked (give them to
            :meth:`verify_release` once the container is gone), or None
            when the release could not be recorded (the state file cannot
            be read or written): a caller that can keep the binding until
            it can be recorded does (:func:`.binding.reconcile.reconcile`).
        """
        try:
            record = read_record()
            units = release.bound_units([record] if record else [])
            if not units:
                return ()
            now = self._clock()
            known = self._reads.known()
            with self._store.update() as state:
                for key, unit in units.items():
                    state['bound'].pop(key, None)
                    gate_state.note_released(state, key, now,
                                             unit.get('container'))
                    if self._verifying:
                        self._mark_dirty(state, key, unit, known, now)
                        # its container listed from now on is the one
                        # being removed, not its instance holding it again
                        state['dirty'][key]['removing'] = True
            self._reads.set_view(state)
            return tuple(units) if self._verifying else ()
        except Exception:
            LOG.exception('Cannot record the GPU units of a deleted '
                          'container; the next probe finds them')
            return None

    def removal_failed(self, keys):
        """The removal after :meth:`note_destroy` failed: the container stays.

        A listing showing it now is its instance holding the units again.
        Never raises.
        """
        if not keys:
            return
        try:
            with self._store.update() as state:
                for key in keys:
                    (state['dirty'].get(key) or {}).pop('removing', None)
        except Exception:
            LOG.exception('Cannot record that the removal of the GPU units '
                          '%s failed; they stay dirty until verified clean',
                          ', '.join(sorted(keys)))

    def note_bound(self, container, instance, records):
        """Record the units a claim just wrote into ``container``.

        Under the claim lock: a container deleted behind nova's back before
        the next probe still leaves its units unavailable until verified
        (:meth:`.gate_reads.GateReads.unavailable_units`). Never raises.

        :param records: the binding's records (``Binding.records()``).
        """
        try:
            record = {'name': container, 'status': 'Stopped', 'config': {
                identity.KEY_DEVICES: json.dumps(list(records or ()))}}
            units = release.bound_units([record])
            if not units:
                return
            now = self._clock()
            with self._store.update() as state:
                for key, unit in units.items():
                    unit['instance'] = instance
                    before = state['bound'].get(key) or {}
                    if before.get('instance') != instance:
                        # seq: a refresh listing older than this claim
                        # must not take the unit for released
                        state['bound'][key] = dict(
                            unit, since=now, last_busy=now,
                            seq=gate_state.next_seq(state))
        except Exception:
            LOG.exception('Cannot record the GPU units bound to %s; the '
                          'next probe finds them', container)

    def note_gone(self, container):
        """A container was deleted behind nova's back: its units are dirty.

        The lifecycle watcher calls this as soon as it sees the container
        gone (by event or by poll); the units are verified by the re-check
        thread, not in the caller's. Never raises.

        :returns: the keys marked dirty.
        """
        try:
            now = self._clock()
            known = self._reads.known()
            with self._store.update() as state:
                keys = [k for k, u in state['bound'].items()
                        if u.get('container') == container]
                for key in keys:
                    unit = state['bound'].pop(key)
                    gate_state.note_released(state, key, now, container)
                    if self._verifying:
                        self._mark_dirty(state, key, unit, known, now)
            self._reads.set_view(state)
            if keys:
                LOG.warning('Container %(name)s was removed behind nova\'s '
                            'back: its GPU units %(units)s are reserved '
                            'until verified clean',
                            {'name': container, 'units': ', '.join(keys)})
                if self._verifying:
                    self._check.ensure()
            return keys
        except Exception:
            LOG.exception('Cannot mark the GPU units of the removed '
                          'container %s dirty; the next probe finds them',
                          container)
            return []

    def verify_release(self, keys):
        """Probe the GPUs of units just released; free the clean ones.

        Called once the container that held ``keys`` is gone. Probes at
        once and then every :data:`RELEASE_POLL` seconds, for at most
        ``[lxd_accelerators] release_wait`` seconds, until every unit is
        clean; those still dirty are left to the re-check thread. Never
        raises.

        :returns: the keys still dirty.
        """
        keys = set(keys or ())
        if not keys:
            return set()
        start = self._monotonic()
        wait = self._conf.lxd_accelerators.release_wait
        deadline = start + wait
        left = keys
        try:
            first = True
            while True:
                # every probe ends by the deadline, whatever nvidia-smi
                # does (a hung one is abandoned, not waited for)
                left, snapshot = self._check.verify_units(
                    left, deadline=max(deadline, start + FIRST_PROBE_MIN)
                    if first else deadline)
                first = False
                # another probe only with time for it: one cut short by
                # the deadline would count as a failed probe
                if not left or not holds.complete(snapshot) or \
                        self._monotonic() + RELEASE_POLL + \
                        FIRST_PROBE_MIN > deadline:
                    break
                self._sleep(RELEASE_POLL)
        except Exception:
            LOG.exception('Verifying the released GPU units %s failed; '
                          'they stay reserved until a probe finds them '
                          'clean', ', '.join(sorted(left)))
        if left:
            self._check.ensure()
        return left
