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

"""The release check: probes of released (dirty) units, and its thread.

:meth:`ReleaseCheck.verify_units` is one probe of given dirty units: the
release wait at delete (:mod:`.release_notices`) runs it, and so does the
re-check thread of its own (:meth:`ReleaseCheck.ensure`), which takes the
units still dirty: first after ``release_recheck_interval`` seconds, then
less and less often up to ``release_recheck_max_interval``; nova's
resource update (``on_clean``) runs as soon as one turns clean.
"""

import threading
import time

from oslo_log import log as logging

from nova_lxd_accel.accel.health import holds
from nova_lxd_accel.accel.health import release

LOG = logging.getLogger(__name__)


def seq_now(store):
    """``state['seq']`` now: read before a probe and a listing."""
    try:
        return int(store.load().get('seq') or 0)
    except (OSError, ValueError, TypeError):
        return 0


class ReleaseCheck(object):
    """Probes the dirty units, now or from a thread of its own.

    :param conf: ConfigOpts with ``[lxd_accelerators]``.
    :param store: the :class:`.gate_state.StateStore`.
    :param host_probe: the :class:`.probe.HostProbe`.
    :param reads: the gate's :class:`.gate_reads.GateReads` (its view and
        last snapshot are updated by each probe).
    :param list_containers: callable returning LXD container records.
    :param clock: zero-argument callable returning seconds.
    :param monotonic: zero-argument callable, the deadlines' clock.
    :param attribute: callable(pid) -> the container of a host process.
    :param on_clean: zero-argument callable run when the thread finds a
        released unit clean, or None.
    :param background: False: no thread; the caller runs :meth:`recheck`.
    """

    def __init__(self, conf, store, host_probe, reads, list_containers,
                 clock, monotonic, attribute, on_clean=None,
                 background=True):
        self._conf = conf
        self._store = store
        self._probe = host_probe
        self._reads = reads
        self._list_containers = list_containers
        self._clock = clock
        self._monotonic = monotonic
        self._attribute = attribute
        self.on_clean = on_clean
        self._background = background
        self._lock = threading.Lock()
        self._thread = None
        self._again = False
        self._stopping = threading.Event()
        #: set to cut the re-check's wait short (a new release, a stop)
        self._wake = threading.Event()
        #: the re-check's wait now (grows while nothing turns clean)
        self.recheck_interval = None

    def verify_units(self, keys, deadline=None):
        """One probe of the dirty units ``keys``: (still dirty, snapshot).

        A failed probe counts toward the unprobeable hold, as in
        :meth:`.gate.GpuGate.refresh`.
        """
        mark = seq_now(self._store)
        current = release.bound_units(self._list_containers())
        snapshot = self._snapshot(deadline)
        self._reads.last_snapshot = snapshot
        known = self._reads.known()
        now = self._clock()
        with self._store.update() as state:
            release.verify_released(
                state, current, snapshot, known, now, self._conf,
                only=keys, mark=mark, attribute=self._attribute)
            holds.probed(state, snapshot, known, now, self._conf)
            left = {k for k in keys if k in state['dirty']}
        self._reads.set_view(state)
        return left, snapshot

    def _snapshot(self, deadline=None):
        """A probe that ends by ``deadline`` (on this check's clock)."""
        if deadline is None:
            return self._probe.snapshot()
        budget = deadline - self._monotonic()
        return self._probe.snapshot(
            deadline=self._probe.deadline_after(budget))

    def stop(self):
        """End the re-check thread (nova-compute stops).

        Safe to call more than once, also at the same time from two
        threads (nova's graceful shutdown and a clean-up can overlap).
        """
        self._stopping.set()
        self._wake.set()
        with self._lock:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)

    def ensure(self):
        """Start the re-check thread unless it runs (then: once more)."""
        with self._lock:
            if self._stopping.is_set() or not self._background:
                return
            if self._thread is not None:
                # a new release: the schedule starts again from the start
                self._again = True
                self.recheck_interval = None
                self._wake.set()
                return
            self.recheck_interval = None
            self._thread = threading.Thread(
                target=self._loop, name='gpu-release-recheck',
                daemon=True)
            self._thread.start()

    def recheck(self):
        """One re-check of every dirty unit, outside nova's lock.

        Runs ``on_clean`` when a unit turned clean. Never raises.

        :returns: (whether a unit turned clean, the keys still dirty or
            None when the check failed).
        """
        with self._lock:
            self._again = False
        freed = False
        left = None
        try:
            dirty = set(self._store.load()['dirty'])
            if dirty:
                group = self._conf.lxd_accelerators
                left, _snapshot = self.verify_units(
                    dirty, deadline=self._monotonic() +
                    group.nvidia_smi_timeout)
                freed = len(left) < len(dirty)
            else:
                left = set()
        except Exception:
            LOG.exception('Re-checking the released GPU units failed; '
                          'trying again')
        if freed and self.on_clean is not None:
            try:
                self.on_clean()
            except Exception:
                LOG.exception('Reporting the GPU units verified clean '
                              'failed; nova\'s next periodic task '
                              'reports them')
        with self._lock:
            # released meanwhile: from the start again
            interval = None if self._again else self.recheck_interval
            self.recheck_interval = release.next_recheck_interval(
                interval, freed, self._conf)
        return freed, left

    def _loop(self):
        """Re-check dirty units until none is left; outside nova's lock.

        The wait between two re-checks starts at
        ``release_recheck_interval`` and doubles, up to
        ``release_recheck_max_interval``, while no unit turns clean.
        """
        start = self._conf.lxd_accelerators.release_recheck_interval
        while True:
            due = time.monotonic() + (self.recheck_interval or start)
            while not self._stopping.is_set() and time.monotonic() < due:
                if self._wake.wait(due - time.monotonic()):
                    self._wake.clear()
                    due = min(due, time.monotonic() + start)
            if self._stopping.is_set():
                with self._lock:
                    self._thread = None
                return
            _freed, left = self.recheck()
            with self._lock:
                if left == set() and not self._again:
                    self._thread = None
                    return
