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

"""Health gate, verified release, usage and idle report of the GPUs.

:meth:`GpuGate.refresh` runs from the driver's ``get_available_resource``,
which nova's resource tracker calls once per period *before* it takes its
lock (``update_provider_tree`` runs under it): it probes the GPUs
(:mod:`.gpu_probe`), reads who holds which unit from LXD's container
configs (the binding records of :mod:`.binding`) and updates the state
file (:mod:`.gpu_state`):

* **health gate**: a GPU the probe finds unhealthy (uncorrectable ECC,
  pending page retirement or row remapping, fallen off the bus, or a new
  Xid message of ``[lxd_accelerators] fatal_xids`` in the kernel log) is
  held (kind
  ``unhealthy``) until an operator releases it (``nova-lxd-accel gpu
  release``); instances already on it are reported, not touched;
* **verified release** (the checks: :mod:`.gpu_release`): a unit bound at
  the last probe and no longer bound now, or one whose container the
  driver removes (:meth:`GpuGate.note_destroy`), is *dirty*. When the
  driver removes a container it probes its GPUs at once
  (:meth:`GpuGate.verify_release`), waiting up to
  ``[lxd_accelerators] release_wait`` seconds for them to be clean, so a
  clean unit is offered again by nova's update that ends the delete; a unit
  still dirty then is re-checked every ``release_recheck_interval`` seconds
  by a thread of its own, which runs nova's resource update when one turns
  clean. A dirty unit stays reserved until the probe shows it clean: for a
  whole GPU no compute process and memory back to its baseline (plus
  ``[lxd_accelerators] release_memory_tolerance_mib``); for a MIG slice the
  slice still listed by ``nvidia-smi -L`` as it was, no compute process in
  its GPU/compute instance and its memory back to its own baseline (both from
  ``nvidia-smi -q``, since ``--query-compute-apps`` does not tell the slices
  of one GPU apart); for a slot of a shared GPU, nothing while another slot
  is still bound (the sharers' processes cannot be told apart), and the
  whole-GPU check when the last slot is released. A GPU of another vendor
  cannot be probed and is clean at once. No claim ever picks a dirty unit
  (:meth:`GpuGate.unavailable_units`);
* **unprobeable**: an NVIDIA GPU the probe cannot read (no nvidia-smi, or
  ``probe_failures_before_hold`` failed or timed-out probes in a row)
  could never be verified at release, so it is held (kind
  ``unprobeable``, trait :data:`TRAIT_UNPROBEABLE`) until the probe
  answers again. ``[lxd_accelerators] verified_release = false`` turns
  this and the release check off;
* **usage**: per instance and unit, the seconds allocated and the seconds
  the GPU had a compute process or non-zero utilisation;
* **idle**: a unit of a running instance whose GPU showed no compute use
  for ``[lxd_accelerators] idle_report_after`` seconds.

:meth:`GpuGate.apply` is what ``update_provider_tree`` calls; it reads
nothing (the holds and dirty units are kept in memory from the last
probe): a held GPU gets ``reserved = total`` (and the trait
:data:`TRAIT_UNHEALTHY` when unhealthy), a dirty unit adds one to its
resource class's ``reserved``. :meth:`GpuGate.check_bindable` refuses to
bind a held GPU (Placement's reserved stops new allocations; this also
stops an allocation made before the hold).
"""

import dataclasses
import os
import threading
import time

from oslo_log import log as logging

from nova_lxd_accel.accel import binding
from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel import gpu_metrics
from nova_lxd_accel.accel import gpu_probe
from nova_lxd_accel.accel import gpu_release
from nova_lxd_accel.accel import gpu_state
from nova_lxd_accel.accel import provider_tree as accel_tree
from nova_lxd_accel import exception
from nova_lxd_accel.spec import identity

LOG = logging.getLogger(__name__)

TRAIT_UNHEALTHY = accel_tree.TRAIT_UNHEALTHY
TRAIT_UNPROBEABLE = 'CUSTOM_GPU_UNPROBEABLE'
#: seconds between two probes while a release waits for its GPUs
RELEASE_POLL = 0.5


def _unit_gpu(record):
    """The GPU PCI address of a binding record, or None (InfiniBand)."""
    if record.get('kind') in (binding.KIND_PGPU, binding.KIND_MIG,
                              binding.KIND_SHARE):
        return devices.normalise_pci_address(record.get('pci'))
    return None


def bound_units(containers, projects=None):
    """Unit key -> who holds it, from LXD's container records."""
    projects = projects or {}
    out = {}
    for record in containers or ():
        config = record.get('config') or {}
        instance = identity.instance_uuid(record) or record.get('name')
        for unit in identity.recorded_units(config):
            pci = _unit_gpu(unit)
            if pci is None:
                continue
            out[unit['unit']] = {
                'instance': instance,
                'container': record.get('name'),
                # a shared GPU's slot records its project too
                'project': projects.get(instance) or unit.get('project_id'),
                'pci': pci,
                'kind': unit.get('kind'),
                'resource_class': unit.get('resource_class'),
                'provider': unit.get('provider'),
                'mig_uuid': unit.get('mig_uuid'),
                'running': (record.get('status') or '').lower() == 'running',
            }
    return out


def _busy(snapshot, pci):
    # a tenant's process, never the MPS server alone (apps_on)
    facts = snapshot.gpus.get(pci)
    return bool(snapshot.apps_on(pci)) or bool(
        facts is not None and facts.utilization_pct)


@dataclasses.dataclass(frozen=True)
class GateView:
    """What :meth:`GpuGate.apply` needs, read once from the state file."""

    holds: dict
    dirty: dict

    @classmethod
    def of(cls, state):
        """The view of a state (copies: the state may change after)."""
        return cls(holds=dict(state['holds']), dirty=dict(state['dirty']))

    def reserved_for(self, pci):
        """(hold or None, {rc: dirty count}) of one GPU."""
        counts = {}
        for unit in self.dirty.values():
            if unit.get('pci') == pci:
                rc = unit.get('resource_class')
                counts[rc] = counts.get(rc, 0) + 1
        return self.holds.get(pci), counts


class GpuGate(object):
    """See the module docstring.

    :param conf: ConfigOpts with ``[lxd_accelerators]``.
    :param list_containers: callable returning LXD container records.
    :param known_gpus: callable returning the :class:`devices.Gpu` list the
        inventory last reported (to tell a GPU nvidia-smi lost).
    :param instance_projects: callable returning {instance uuid: project
        id}, or None.
    :param probe: a :class:`gpu_probe.HostProbe` (default from ``conf``).
    :param store: a :class:`gpu_state.StateStore` (default from ``conf``).
    :param clock: zero-argument callable returning seconds.
    :param on_clean: zero-argument callable run when the re-check thread
        finds a released unit clean (the driver runs nova's resource
        update with it), or None.
    :param sleep: callable(seconds), between the release wait's probes.
    :param monotonic: zero-argument callable, the release wait's clock.
    """

    def __init__(self, conf, list_containers, known_gpus,
                 instance_projects=None, probe=None, store=None,
                 clock=time.time, on_clean=None, sleep=time.sleep,
                 monotonic=time.monotonic):
        self._conf = conf
        self._list_containers = list_containers
        self._known_gpus = known_gpus
        self._instance_projects = instance_projects
        self._probe = probe or gpu_probe.HostProbe.from_conf(conf)
        self._store = store or gpu_state.StateStore.from_conf(conf)
        self._clock = clock
        self._sleep = sleep
        self._monotonic = monotonic
        self.on_clean = on_clean
        self._view = None
        self._warned = {}
        self.last_snapshot = None
        self._recheck_lock = threading.Lock()
        self._rechecker = None
        self._recheck_again = False
        self._stopping = threading.Event()

    @property
    def store(self):
        return self._store

    @property
    def _verifying(self):
        return gpu_release.verifying(self._conf)

    # -- refresh -------------------------------------------------------

    def maybe_refresh(self):
        """:meth:`refresh` unless the last probe is too recent.

        Too recent: younger than ``[lxd_accelerators] probe_interval``.
        Never raises.

        The driver calls it from ``get_available_resource``, which nova's
        resource tracker runs before it takes its lock.
        """
        interval = self._conf.lxd_accelerators.probe_interval
        last = self.last_snapshot
        try:
            if last is not None and interval and \
                    self._clock() - last.taken_at < interval:
                self._load_view()       # operator holds still apply
                return None
            return self.refresh()
        except Exception:
            LOG.exception('The GPU probe failed; the GPU states of the last '
                          'probe are kept')
            return None

    def refresh(self):
        """Probe the GPUs and update the state file.

        :returns: the :class:`gpu_probe.Snapshot` taken.
        """
        snapshot = self._probe.snapshot()
        self.last_snapshot = snapshot
        containers = self._list_containers()
        projects = {}
        if self._instance_projects is not None:
            try:
                projects = self._instance_projects() or {}
            except Exception as exc:
                LOG.warning('Cannot read the projects of the instances '
                            '(%s): usage is recorded without them', exc)
        known = {g.pci_address: g for g in (self._known_gpus() or ())}
        current = bound_units(containers, projects)
        now = self._clock()
        if not known and not current and \
                not os.path.exists(self._store.path):
            # a host without GPUs: nothing to record
            self._view = GateView(holds={}, dirty={})
            return snapshot
        with self._store.update() as state:
            self._account(state, current, snapshot, now)
            gpu_release.verify_released(state, current, snapshot, known,
                                        now, self._conf)
            self._health(state, current, snapshot, known, now)
            failures = self._probe_health(state, snapshot, known, now)
            gpu_release.update_baselines(state, current, snapshot, known)
            state['probe'] = {'at': now, 'available': snapshot.available,
                              'error': snapshot.error, 'failures': failures}
            result = dict(state)
        self._view = GateView.of(result)
        self._report_idle(result, now)
        self._write_metrics(result, known, now)
        if result['dirty']:
            self._ensure_rechecker()
        return snapshot

    def _probe_health(self, state, snapshot, known, now):
        """Hold or free the NVIDIA GPUs by whether the probe answers.

        :returns: how many probes in a row have failed, this one included.
        """
        group = self._conf.lxd_accelerators
        failures = 0 if snapshot.available else (
            (state.get('probe') or {}).get('failures') or 0) + 1
        if snapshot.available or not self._verifying:
            for pci, hold in list(state['holds'].items()):
                if hold.get('kind') != gpu_state.KIND_UNPROBEABLE:
                    continue
                del state['holds'][pci]
                why = ('the GPU probe answers again' if snapshot.available
                       else 'verified release is turned off')
                gpu_state.add_event(state, 'release', pci, why, now,
                                    by=gpu_state.BY_COMPUTE)
                LOG.info('GPU %(pci)s is offered again: %(why)s',
                         {'pci': pci, 'why': why})
            return failures
        nvidia = sorted(pci for pci, gpu in known.items() if gpu.is_nvidia)
        if not nvidia:
            return failures
        missing = snapshot.error == gpu_probe.NO_NVIDIA_SMI
        if not missing and failures < group.probe_failures_before_hold:
            LOG.warning('The GPU probe failed (%(error)s), %(n)d time(s) in '
                        'a row; the NVIDIA GPUs are held after %(max)d',
                        {'error': snapshot.error, 'n': failures,
                         'max': group.probe_failures_before_hold})
            return failures
        if missing:
            reason = ('%s does not exist: a unit bound here could never be '
                      'verified clean at release' % group.nvidia_smi_path)
        else:
            reason = ('the GPU probe failed %d times in a row (last: %s): a '
                      'unit bound here could never be verified clean at '
                      'release' % (failures, snapshot.error))
        for pci in nvidia:
            hold = state['holds'].get(pci)
            if hold is not None and \
                    hold.get('kind') != gpu_state.KIND_UNPROBEABLE:
                continue        # an operator's or unhealthy hold stays
            if gpu_state.hold_by_compute(state, pci,
                                         gpu_state.KIND_UNPROBEABLE, reason,
                                         now):
                LOG.error('GPU %(pci)s is not offered: %(reason)s. Make '
                          'nvidia-smi answer on this host; the GPU is '
                          'offered again at the first probe that answers',
                          {'pci': pci, 'reason': reason})
        return failures

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
            units = bound_units([record] if record else [])
            if not units:
                return ()
            now = self._clock()
            with self._store.update() as state:
                for key, unit in units.items():
                    state['bound'].pop(key, None)
                    if self._verifying:
                        state['dirty'][key] = gpu_release.dirty_entry(
                            unit, now)
            self._view = GateView.of(state)
            return tuple(units) if self._verifying else ()
        except Exception:
            LOG.exception('Cannot record the GPU units of a deleted '
                          'container; the next probe finds them')
            return ()

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
        deadline = self._monotonic() + \
            self._conf.lxd_accelerators.release_wait
        left = keys
        try:
            while True:
                left, snapshot = self._verify_units(left)
                if not left or not snapshot.available or \
                        self._monotonic() + RELEASE_POLL > deadline:
                    break
                self._sleep(RELEASE_POLL)
        except Exception:
            LOG.exception('Verifying the released GPU units %s failed; '
                          'they stay reserved until a probe finds them '
                          'clean', ', '.join(sorted(left)))
        if left:
            self._ensure_rechecker()
        return left

    def _verify_units(self, keys):
        """One probe of the dirty units ``keys``: (still dirty, snapshot)."""
        snapshot = self._probe.snapshot()
        known = {g.pci_address: g for g in (self._known_gpus() or ())}
        current = bound_units(self._list_containers())
        now = self._clock()
        with self._store.update() as state:
            gpu_release.verify_released(state, current, snapshot, known,
                                        now, self._conf, only=keys)
            left = {k for k in keys if k in state['dirty']}
        self._view = GateView.of(state)
        return left, snapshot

    def stop(self):
        """End the re-check thread (nova-compute stops)."""
        self._stopping.set()
        with self._recheck_lock:
            thread = self._rechecker
        if thread is not None:
            thread.join(5)

    def _ensure_rechecker(self):
        """Start the re-check thread unless it runs (then: once more)."""
        with self._recheck_lock:
            if self._stopping.is_set():
                return
            if self._rechecker is not None:
                self._recheck_again = True
                return
            self._rechecker = threading.Thread(
                target=self._recheck_loop, name='gpu-release-recheck',
                daemon=True)
            self._rechecker.start()

    def _recheck_loop(self):
        """Re-check dirty units until none is left; outside nova's lock."""
        while True:
            if self._stopping.wait(
                    self._conf.lxd_accelerators.release_recheck_interval):
                with self._recheck_lock:
                    self._rechecker = None
                return
            with self._recheck_lock:
                self._recheck_again = False
            freed = False
            left = None
            try:
                dirty = set(self._store.load()['dirty'])
                if dirty:
                    left, _snapshot = self._verify_units(dirty)
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
                if left == set() and not self._recheck_again:
                    self._rechecker = None
                    return

    def _account(self, state, current, snapshot, now):
        last = (state.get('probe') or {}).get('at')
        elapsed = max(0.0, now - last) if last is not None else 0.0
        previous = state['bound']
        bound = {}
        for key, unit in current.items():
            before = previous.get(key)
            if before and before.get('instance') == unit['instance']:
                entry = dict(before, **{k: v for k, v in unit.items()
                                        if v is not None})
            else:
                entry = dict(unit, since=now, last_busy=now)
            busy = snapshot.available and _busy(snapshot, unit['pci'])
            elapsed_here = elapsed if before else 0.0
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
            record['allocated_s'] += elapsed_here
            if busy:
                record['busy_s'] += elapsed_here
            record['last'] = now
        for key, before in previous.items():
            if key not in current:
                if not self._verifying:
                    LOG.info('%(unit)s of GPU %(pci)s was released by '
                             'instance %(instance)s: offered again at once '
                             '(verified release is off)',
                             {'unit': key, 'pci': before.get('pci'),
                              'instance': before.get('instance')})
                    continue
                state['dirty'][key] = gpu_release.dirty_entry(before, now)
                LOG.info('%(unit)s of GPU %(pci)s was released by instance '
                         '%(instance)s: reserved until it is verified clean',
                         {'unit': key, 'pci': before.get('pci'),
                          'instance': before.get('instance')})
        state['bound'] = bound

    def _new_fatal_xids(self, state, snapshot, pci):
        """Fatal Xid messages of one GPU not acted on before.

        ``state['xid']`` remembers, per GPU and boot, the time of the last
        message acted on, so a released GPU is not held again by the same
        message; one older than ``xid_max_age`` when first read is ignored.
        """
        group = self._conf.lxd_accelerators
        fatal = set(group.fatal_xids or ())
        events = snapshot.xids_on(pci)
        if not fatal or not events:
            return []
        record = state.setdefault('xid', {})
        if record.get('boot_id') != snapshot.boot_id:
            record.clear()
            record.update(boot_id=snapshot.boot_id, handled={})
        handled = record.setdefault('handled', {}).get(pci)
        fresh = []
        for event in events:
            if event.code not in fatal or \
                    (handled is not None and event.at <= handled):
                continue
            if group.xid_max_age and snapshot.uptime is not None and \
                    snapshot.uptime - event.at > group.xid_max_age:
                continue
            fresh.append(event)
        if fresh:
            record['handled'][pci] = max(e.at for e in fresh)
        return fresh

    @staticmethod
    def _xid_text(event, snapshot):
        when = ''
        if snapshot.uptime is not None:
            wall = snapshot.taken_at - (snapshot.uptime - event.at)
            when = ' at %s' % time.strftime('%Y-%m-%dT%H:%M:%SZ',
                                            time.gmtime(wall))
        return 'Xid %d%s: %s' % (event.code, when,
                                 event.message or 'no message')

    def _health(self, state, current, snapshot, known, now):
        for pci, gpu in known.items():
            problems = snapshot.problems(pci, expected_nvidia=gpu.is_nvidia)
            problems = list(problems) + [
                self._xid_text(e, snapshot)
                for e in self._new_fatal_xids(state, snapshot, pci)]
            if not problems:
                continue
            reason = '; '.join(problems)
            if pci not in state['holds']:
                gpu_state.hold_by_compute(state, pci,
                                          gpu_state.KIND_UNHEALTHY, reason,
                                          now)
                LOG.error('GPU %(pci)s is unhealthy (%(reason)s): reserved '
                          'and never bound until an operator runs '
                          '"nova-lxd-accel gpu release %(pci)s"',
                          {'pci': pci, 'reason': reason})
            users = sorted({u['instance'] for u in current.values()
                            if u['pci'] == pci})
            if users and self._warned.get(pci) != (reason, users):
                self._warned[pci] = (reason, users)
                LOG.warning('Instances %(users)s use unhealthy GPU %(pci)s '
                            '(%(reason)s); they are left running',
                            {'users': ', '.join(users), 'pci': pci,
                             'reason': reason})

    def _report_idle(self, state, now):
        for unit in gpu_state.idle_units(state, self._conf, now):
            key = (unit['unit'], unit['idle_since'])
            if self._warned.get(unit['unit']) == key:
                continue
            self._warned[unit['unit']] = key
            LOG.warning('GPU %(pci)s (%(unit)s) of instance %(instance)s, '
                        'project %(project)s, has shown no compute use '
                        'since %(since)s',
                        {'pci': unit['pci'], 'unit': unit['unit'],
                         'instance': unit['instance'],
                         'project': unit['project'],
                         'since': time.strftime(
                             '%Y-%m-%dT%H:%M:%SZ',
                             time.gmtime(unit['idle_since']))})

    def _write_metrics(self, state, known, now):
        path = self._conf.lxd_accelerators.metrics_file
        if not path:
            return
        try:
            gpu_metrics.write_textfile(
                path, gpu_metrics.render(state, sorted(known),
                                         self._conf, now))
        except OSError as exc:
            LOG.warning('Cannot write the GPU metrics file %(path)s: '
                        '%(error)s', {'path': path, 'error': exc})

    # -- what update_provider_tree and binding ask ---------------------

    def _load_view(self):
        try:
            state = self._store.load()
        except (OSError, ValueError) as exc:
            LOG.warning('Cannot read the GPU state file: %s', exc)
            return self._view
        self._view = GateView(holds=state['holds'], dirty=state['dirty'])
        return self._view

    def view(self):
        """Holds and dirty units as of the last probe (or file read).

        Kept in memory so that ``update_provider_tree``, under nova's lock,
        reads nothing; :meth:`maybe_refresh` reloads it every period, so a
        ``nova-lxd-accel gpu hold|release`` applies at the next one.
        """
        if self._view is None:
            return self._load_view() or GateView(holds={}, dirty={})
        return self._view

    def apply(self, desired):
        """Desired providers with holds and dirty units reserved.

        :param desired: dict name -> ``DesiredProvider``.
        :returns: a new dict; providers without a reason are unchanged.
        """
        view = self.view()
        out = {}
        for name, want in desired.items():
            device = want.device
            if not isinstance(device, devices.Gpu):
                out[name] = want
                continue
            hold, dirty = view.reserved_for(device.pci_address)
            if hold is None and not dirty:
                out[name] = want
                continue
            inventory = {}
            for rc, rec in want.inventory.items():
                reserved = rec['total'] if hold else min(
                    rec['total'], rec.get('reserved', 0) + dirty.get(rc, 0))
                inventory[rc] = dict(rec, reserved=reserved)
            traits = want.traits
            if hold and hold.get('kind') == gpu_state.KIND_UNHEALTHY:
                traits = traits | {TRAIT_UNHEALTHY}
            if hold and hold.get('kind') == gpu_state.KIND_UNPROBEABLE:
                traits = traits | {TRAIT_UNPROBEABLE}
            out[name] = dataclasses.replace(want, inventory=inventory,
                                            traits=frozenset(traits))
        return out

    def unavailable_units(self):
        """Unit key -> why no claim may pick it: released, not yet clean.

        In the :func:`.binding.held_units` format, so a claim treats a dirty
        unit as held, by identity, whatever Placement counts.
        """
        return {key: ['instance %s, released but not verified clean (%s)'
                      % (unit.get('instance'), unit.get('holding'))]
                for key, unit in self.view().dirty.items()}

    def check_bindable(self, device, rp_uuid):
        """Raise when ``device`` is a held or unhealthy GPU."""
        if not isinstance(device, devices.Gpu):
            return
        hold = self.view().holds.get(device.pci_address)
        if hold:
            raise exception.GpuHeld(pci=device.pci_address, provider=rp_uuid,
                                    kind=hold.get('kind'),
                                    reason=hold.get('reason'))
