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

"""The GPU ledger: who holds which unit, which are dirty, which are held.

:meth:`GpuGate.refresh` runs from the driver's ``get_available_resource``,
before nova's resource tracker takes its lock: it lists the daemon's
containers, then probes the GPUs (:mod:`.probe`), and under the state
file's lock (:mod:`.gate_state`) accounts usage, verifies released units
(:mod:`.release`) and applies the health gate (:mod:`.holds`).

The ledger's rules:

* a unit is *dirty* from its release (:meth:`GpuGate.note_destroy` when the
  driver removes a container, :meth:`GpuGate.note_gone` when one was
  removed behind nova's back, or a refresh that finds it unbound) until a
  probe taken after the release finds it clean, its own instance holds it
  again, its MIG device was recreated in place, or an operator runs
  ``nova-lxd-accel gpu forget``. Each entry carries the state's ``seq``: a
  listing or a probe read before it says nothing about it;
* a delete waits up to ``release_wait`` seconds for its units (every probe
  ends by that deadline, whatever nvidia-smi does); the units still dirty
  are re-checked by a thread of its own (:meth:`GpuGate.recheck`), first
  after ``release_recheck_interval`` seconds, then less and less often up
  to ``release_recheck_max_interval``; nova's resource update runs as soon
  as one turns clean;
* a claim reads :meth:`GpuGate.unavailable_units` and
  :meth:`GpuGate.dirty_share_projects` under its lock, after its listing:
  dirty units, and units recorded bound (:meth:`GpuGate.note_bound`) to a
  container that is gone, are never picked; a shared card with such a slot
  takes no tenant of another project;
* :meth:`GpuGate.apply` (``update_provider_tree``, under nova's lock)
  reads nothing: a held GPU gets ``reserved = total`` (and the trait
  :data:`TRAIT_UNHEALTHY` or :data:`TRAIT_UNPROBEABLE`), each dirty unit
  one more ``reserved`` of its resource class.

``[lxd_accelerators] verified_release = false`` turns the release check
and the unprobeable hold off.
"""

import json
import os
import threading
import time

from oslo_log import log as logging

from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel.health import energy
from nova_lxd_accel.accel.health import gate_state
from nova_lxd_accel.accel.health import holds
from nova_lxd_accel.accel.health import probe
from nova_lxd_accel.accel.health import release
from nova_lxd_accel.accel.health import reservations
from nova_lxd_accel.accel.health import usage_record
from nova_lxd_accel.container import identity
from nova_lxd_accel import exception
from nova_lxd_accel import placement_names

LOG = logging.getLogger(__name__)

TRAIT_UNHEALTHY = placement_names.TRAIT_UNHEALTHY
TRAIT_UNPROBEABLE = placement_names.TRAIT_UNPROBEABLE
#: seconds between two probes while a release waits for its GPUs
RELEASE_POLL = 0.5
#: the least time the first probe of a release gets, whatever
#: ``release_wait`` says (0 still probes once)
FIRST_PROBE_MIN = 0.5


class GpuGate(object):
    """See the module docstring.

    :param conf: ConfigOpts with ``[lxd_accelerators]``.
    :param list_containers: callable returning LXD container records.
    :param known_gpus: callable returning the :class:`devices.Gpu` list the
        inventory last reported (to tell a GPU nvidia-smi lost).
    :param instance_projects: callable returning {instance uuid: project
        id}, or None.
    :param probe: a :class:`probe.HostProbe` (default from ``conf``).
    :param store: a :class:`gate_state.StateStore` (default from ``conf``).
    :param clock: zero-argument callable returning seconds.
    :param on_clean: zero-argument callable run when the re-check thread
        finds a released unit clean (the driver runs nova's resource
        update with it), or None.
    :param sleep: callable(seconds), between the release wait's probes.
    :param monotonic: zero-argument callable, the release wait's clock.
    :param attribute: callable(pid) -> the container of a host process
        (:func:`.probe.container_of_process`), or None when the host
        does not let processes be told apart.
    :param background: False: no re-check thread; the caller runs
        :meth:`recheck` (tests that drive time themselves).
    """

    def __init__(self, conf, list_containers, known_gpus,
                 instance_projects=None, host_probe=None, store=None,
                 clock=time.time, on_clean=None, sleep=time.sleep,
                 monotonic=time.monotonic,
                 attribute=probe.container_of_process,
                 background=True):
        self._conf = conf
        self._list_containers = list_containers
        self._known_gpus = known_gpus
        self._instance_projects = instance_projects
        self._probe = host_probe or probe.HostProbe.from_conf(conf)
        self._store = store or gate_state.StateStore.from_conf(conf)
        self._clock = clock
        self._sleep = sleep
        self._monotonic = monotonic
        self.on_clean = on_clean
        self._view = None
        self._warned = {}
        #: GPUs whose missing power.draw was logged (once until it returns)
        self._no_power = set()
        self.last_snapshot = None
        self._recheck_lock = threading.Lock()
        self._rechecker = None
        self._recheck_again = False
        self._stopping = threading.Event()
        #: set to cut the re-check's wait short (a new release, a stop)
        self._wake = threading.Event()
        self._attribute = attribute
        self._background = background
        #: the re-check's wait now (grows while nothing turns clean)
        self.recheck_interval = None

    @property
    def store(self):
        return self._store

    @property
    def _verifying(self):
        return release.verifying(self._conf)

    # -- refresh -------------------------------------------------------

    def maybe_refresh(self):
        """:meth:`refresh` unless younger than ``probe_interval``.

        From ``get_available_resource``, before nova's lock. Never raises.
        """
        interval = self._conf.lxd_accelerators.probe_interval
        last = self.last_snapshot
        try:
            if last is not None and interval and \
                    self._clock() - last.taken_at < interval:
                self._load_view()       # operator holds still apply
                return None
            return self.refresh()
        except gate_state.StateUnreadable as exc:
            self._hold_everything(exc)
            return None
        except Exception:
            LOG.exception('The GPU probe failed; the GPU states of the last '
                          'probe are kept')
            return None

    def refresh(self):
        """Probe the GPUs and update the state file.

        :returns: the :class:`probe.Snapshot` taken.
        """
        # the listing before the probe: a unit it finds released was
        # released before the probe, so the probe can verify it
        mark = self._mark()
        containers = self._list_containers()
        snapshot = self._probe.snapshot()
        self.last_snapshot = snapshot
        projects = {}
        if self._instance_projects is not None:
            try:
                projects = self._instance_projects() or {}
            except Exception as exc:
                LOG.warning('Cannot read the projects of the instances '
                            '(%s): usage is recorded without them', exc)
        known = {g.pci_address: g for g in (self._known_gpus() or ())}
        current = release.bound_units(containers, projects)
        now = self._clock()
        if not known and not current and \
                not os.path.exists(self._store.path):
            # a host without GPUs: nothing to record
            self._view = reservations.GateView(holds={}, dirty={})
            return snapshot
        with self._store.update() as state:
            released = self._account(state, current, snapshot, known, now,
                                     mark)
            release.verify_released(
                state, current, snapshot, known, now, self._conf,
                mark=mark, fresh=released, attribute=self._attribute)
            holds.health(state, current, snapshot, known, now,
                         self._conf, self._warned)
            holds.probed(state, snapshot, known, now, self._conf)
            release.update_baselines(state, current, snapshot, known)
            result = dict(state)
        self._view = reservations.GateView.of(result)
        holds.report_idle(result, now, self._conf, self._warned)
        holds.write_metrics(result, known, now, self._conf)
        if result['dirty']:
            self._ensure_rechecker()
        return snapshot

    def _mark(self):
        """``state['seq']`` now: read before a probe and a listing."""
        try:
            return int(self._store.load().get('seq') or 0)
        except (OSError, ValueError, TypeError):
            return 0

    def note_destroy(self, read_record):
        """Mark the GPU units of a container about to be deleted dirty.

        Called before the driver removes a container, so that a unit is
        verified even when its instance lived between two probes. Never
        raises.

        :param read_record: zero-argument callable returning the
            container's LXD record (or None).
        :returns: the keys of the units marked (give them to
            :meth:`verify_release` once the container is gone).
        """
        try:
            record = read_record()
            units = release.bound_units([record] if record else [])
            if not units:
                return ()
            now = self._clock()
            known = self._known()
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
            self._view = reservations.GateView.of(state)
            return tuple(units) if self._verifying else ()
        except Exception:
            LOG.exception('Cannot record the GPU units of a deleted '
                          'container; the next probe finds them')
            return ()

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

    def _known(self):
        return {g.pci_address: g for g in (self._known_gpus() or ())}

    def _mark_dirty(self, state, key, unit, known, now):
        """Write the dirty entry of a unit released at ``now``.

        An entry already there (same release, seen twice) keeps its time.
        """
        if key in state['dirty']:
            return
        state['dirty'][key] = release.dirty_entry(
            unit, now, seq=gate_state.next_seq(state),
            place=release.mig_place(unit, known, self.last_snapshot))

    def note_bound(self, container, instance, records):
        """Record the units a claim just wrote into ``container``.

        Under the claim lock: a container deleted behind nova's back before
        the next probe still leaves its units unavailable until verified
        (:meth:`unavailable_units`). Never raises.

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
            known = self._known()
            with self._store.update() as state:
                keys = [k for k, u in state['bound'].items()
                        if u.get('container') == container]
                for key in keys:
                    unit = state['bound'].pop(key)
                    gate_state.note_released(state, key, now, container)
                    if self._verifying:
                        self._mark_dirty(state, key, unit, known, now)
            self._view = reservations.GateView.of(state)
            if keys:
                LOG.warning('Container %(name)s was removed behind nova\'s '
                            'back: its GPU units %(units)s are reserved '
                            'until verified clean',
                            {'name': container, 'units': ', '.join(keys)})
                if self._verifying:
                    self._ensure_rechecker()
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
                left, snapshot = self._verify_units(
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
            self._ensure_rechecker()
        return left

    def _verify_units(self, keys, deadline=None):
        """One probe of the dirty units ``keys``: (still dirty, snapshot).

        A failed probe counts toward the unprobeable hold, as in
        :meth:`refresh`.
        """
        mark = self._mark()
        current = release.bound_units(self._list_containers())
        snapshot = self._snapshot(deadline)
        self.last_snapshot = snapshot
        known = self._known()
        now = self._clock()
        with self._store.update() as state:
            release.verify_released(
                state, current, snapshot, known, now, self._conf,
                only=keys, mark=mark, attribute=self._attribute)
            holds.probed(state, snapshot, known, now, self._conf)
            left = {k for k in keys if k in state['dirty']}
        self._view = reservations.GateView.of(state)
        return left, snapshot

    def _snapshot(self, deadline=None):
        """A probe that ends by ``deadline`` (on this gate's clock)."""
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
        with self._recheck_lock:
            thread = self._rechecker
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)

    def _ensure_rechecker(self):
        """Start the re-check thread unless it runs (then: once more)."""
        with self._recheck_lock:
            if self._stopping.is_set() or not self._background:
                return
            if self._rechecker is not None:
                # a new release: the schedule starts again from the start
                self._recheck_again = True
                self.recheck_interval = None
                self._wake.set()
                return
            self.recheck_interval = None
            self._rechecker = threading.Thread(
                target=self._recheck_loop, name='gpu-release-recheck',
                daemon=True)
            self._rechecker.start()

    def recheck(self):
        """One re-check of every dirty unit, outside nova's lock.

        Runs ``on_clean`` when a unit turned clean. Never raises.

        :returns: (whether a unit turned clean, the keys still dirty or
            None when the check failed).
        """
        with self._recheck_lock:
            self._recheck_again = False
        freed = False
        left = None
        try:
            dirty = set(self._store.load()['dirty'])
            if dirty:
                group = self._conf.lxd_accelerators
                left, _snapshot = self._verify_units(
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
        with self._recheck_lock:
            # released meanwhile: from the start again
            interval = None if self._recheck_again else \
                self.recheck_interval
            self.recheck_interval = release.next_recheck_interval(
                interval, freed, self._conf)
        return freed, left

    def _recheck_loop(self):
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
                with self._recheck_lock:
                    self._rechecker = None
                return
            _freed, left = self.recheck()
            with self._recheck_lock:
                if left == set() and not self._recheck_again:
                    self._rechecker = None
                    return

    def _account(self, state, current, snapshot, known, now, mark=None):
        # the last refresh's time (a release's probes do not account)
        last = state.get('accounted_at', (state.get('probe') or {}).get('at'))
        state['accounted_at'] = now
        previous = state['bound']
        gate_state.forget_old_releases(state, now)
        bound = {}
        released = []
        for key, unit in current.items():
            entry = state['dirty'].get(key) or {}
            if (mark is not None and max(
                    entry.get('seq') or 0,
                    gate_state.released_seq(state, key)) > mark) or \
                    gate_state.stale_binding(
                        state, key, unit['container'],
                        previous.get(key, {}).get('seq')):
                # released after this listing was taken, or listed while
                # being deleted, even if verified clean since: not bound
                # (unless claimed again since)
                if (previous.get(key, {}).get('seq') or 0) > (mark or 0):
                    bound[key] = previous[key]
                continue
            before = previous.get(key)
            if before and before.get('instance') == unit['instance']:
                entry = dict(before, **{k: v for k, v in unit.items()
                                        if v is not None})
            else:
                entry = dict(unit, since=now, last_busy=now)
            busy = snapshot.available and usage_record.busy(
                snapshot, unit['pci'])
            # from the last refresh, or from the claim (note_bound) if later
            elapsed_here = max(0.0, now - max(
                last, (before or {}).get('since') or last)) \
                if before and last is not None else 0.0
            if busy:
                entry['last_busy'] = now
            bound[key] = entry
            usage = state['usage'].setdefault(unit['instance'], {
                'project': unit.get('project'), 'units': {}})
            if unit.get('project'):
                usage['project'] = unit['project']
            record = usage['units'].setdefault(key, {
                'pci': unit['pci'], 'resource_class': unit['resource_class'],
                'allocated_s': 0.0, 'busy_s': 0.0, 'first': now,
                'last': now})
            usage_record.account(record, elapsed_here, busy,
                                 energy.unit_power(unit, snapshot, known),
                                 last, now, self._conf)
        for key, before in previous.items():
            if key not in current and mark is not None and \
                    (before.get('seq') or 0) > mark:
                bound[key] = before     # claimed after this listing
                continue
            if key not in current:
                if not self._verifying:
                    LOG.info('%(unit)s of GPU %(pci)s was released by '
                             'instance %(instance)s: offered again at once '
                             '(verified release is off)',
                             {'unit': key, 'pci': before.get('pci'),
                              'instance': before.get('instance')})
                    continue
                if key in state['dirty']:
                    continue
                self._mark_dirty(state, key, before, known, now)
                released.append(key)
                LOG.info('%(unit)s of GPU %(pci)s was released by instance '
                         '%(instance)s: reserved until it is verified clean',
                         {'unit': key, 'pci': before.get('pci'),
                          'instance': before.get('instance')})
        state['bound'] = bound
        energy.log_missing_power(self._no_power, current, snapshot)
        return released

    # -- what update_provider_tree and binding ask ---------------------

    def _load_view(self):
        try:
            state = self._store.load()
        except gate_state.StateUnreadable as exc:
            return self._hold_everything(exc)
        except (OSError, ValueError) as exc:
            LOG.warning('Cannot read the GPU state file: %s', exc)
            return self._view
        self._view = reservations.GateView(holds=state['holds'],
                                           dirty=state['dirty'])
        return self._view

    def view(self):
        """Holds and dirty units as of the last probe (or file read).

        Kept in memory so that ``update_provider_tree``, under nova's lock,
        reads nothing; :meth:`maybe_refresh` reloads it every period, so a
        ``nova-lxd-accel gpu hold|release`` applies at the next one.
        """
        if self._view is None:
            # never read: nothing known of holds and dirty units is safe
            return self._load_view() or self._hold_everything(
                'the GPU state file was never read')
        return self._view

    def _hold_everything(self, why):
        """Hold every GPU while the state file cannot be read (fail closed).

        A truncated or unreadable file may have held the operator's holds
        and the dirty units: offering any GPU could hand out one of them.
        Lifted at the first refresh that reads the file again.
        """
        LOG.error('GPU state file %(path)s cannot be used (%(why)s): every '
                  'GPU is held until it can be read again; repair or remove '
                  'it',
                  {'path': getattr(self._store, 'path', None), 'why': why})
        holds = {pci: {'kind': gate_state.KIND_UNREADABLE,
                       'reason': str(why), 'by': gate_state.BY_COMPUTE}
                 for pci in self._known()}
        dirty = self._view.dirty if self._view is not None else {}
        self._view = reservations.GateView(holds=holds, dirty=dirty)
        return self._view

    def apply(self, desired):
        """Desired providers with holds and dirty units reserved.

        :func:`.reservations.reserved_providers` of the last view.
        """
        return reservations.reserved_providers(desired, self.view())

    def _ledger(self):
        """The state file now; the last probe's units if unreadable."""
        try:
            return self._store.load()
        except gate_state.StateUnreadable as exc:
            view = self._hold_everything(exc)
        except (OSError, ValueError) as exc:
            LOG.warning('Cannot read the GPU state file (%s): claims use '
                        'the holds and dirty units of the last probe', exc)
            view = self.view()
        return {'holds': view.holds, 'dirty': view.dirty, 'bound': {}}

    def unavailable_units(self, records=None):
        """Unit key -> why no claim may pick it now.

        :func:`.release.unavailable` of the state file: a claim calling
        this under its lock sees every release written before, by any
        process.

        :param records: the daemon's instance records the claim listed.
        """
        state = self._ledger()
        out = release.unavailable(state, records)
        # a held card of a pool: the pool's provider stays offered (its
        # other cards are free), so the pick must skip the card itself
        for pci, hold in (state.get('holds') or {}).items():
            out.setdefault('pci:' + pci, []).append(
                'held (%s): %s' % (hold.get('kind'), hold.get('reason')))
        return out

    def dirty_share_projects(self, records=None):
        """Shared GPU -> projects of its dirty slots.

        :func:`.release.dirty_share_projects` of the state file.
        """
        return release.dirty_share_projects(self._ledger(), records)

    def check_bindable(self, device, rp_uuid):
        """Raise when ``device`` is a held or unhealthy GPU."""
        if not isinstance(device, devices.Gpu):
            return
        hold = self.view().holds.get(device.pci_address)
        if hold:
            raise exception.GpuHeld(pci=device.pci_address, provider=rp_uuid,
                                    kind=hold.get('kind'),
                                    reason=hold.get('reason'))
