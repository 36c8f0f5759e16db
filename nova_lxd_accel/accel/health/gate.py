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

"""The GPU gate: what decides whether a GPU may be handed out.

Not to be confused with the *ledger*, the state file it keeps
(:mod:`.gate_state`: which units are bound, dirty, held), nor with the
*holds*, the operator's and the health checks' holds on a GPU
(:mod:`.holds`). :class:`GpuGate` is the composition of four parts:

* the read side (:mod:`.gate_reads`): what claims and the provider tree
  ask, from the last probe or the ledger;
* the release side (:mod:`.release_notices`): what the driver tells of
  units bound and released, and the delete's wait for its units;
* the release check (:mod:`.release_check`): probes of dirty units, now
  or from a re-check thread of its own;
* usage accounting (:mod:`.usage_accounting`): what a refresh lists,
  written into the ledger.

:meth:`GpuGate.refresh` runs from the driver's ``get_available_resource``,
before nova's resource tracker takes its lock: it lists the daemon's
containers, then probes the GPUs (:mod:`.probe`), and under the state
file's lock (:mod:`.gate_state`) accounts usage, verifies released units
(:mod:`.release`) and applies the holds (:mod:`.holds`).

The gate's rules:

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
  takes no tenant of another project; a held GPU the pick looks up fails
  the claim (:meth:`GpuGate.check_bindable`);
* :meth:`GpuGate.apply` (the driver's ``update_provider_tree``, between
  the inventory's desired providers and its write of them, under nova's
  lock) reads nothing: a held GPU gets ``reserved = total`` (and the trait
  :data:`TRAIT_UNHEALTHY` or :data:`TRAIT_UNPROBEABLE`), each dirty unit
  one more ``reserved`` of its resource class.

``[lxd_accelerators] verified_release = false`` turns the release check
and the unprobeable hold off.
"""

import os
import time

from oslo_log import log as logging

from nova_lxd_accel.accel import gate_seams
from nova_lxd_accel.accel.health import gate_reads
from nova_lxd_accel.accel.health import gate_state
from nova_lxd_accel.accel.health import holds
from nova_lxd_accel.accel.health import probe
from nova_lxd_accel.accel.health import release
from nova_lxd_accel.accel.health import release_check
from nova_lxd_accel.accel.health import release_notices
from nova_lxd_accel.accel.health import usage_accounting
from nova_lxd_accel import placement_names

LOG = logging.getLogger(__name__)

TRAIT_UNHEALTHY = placement_names.TRAIT_UNHEALTHY
TRAIT_UNPROBEABLE = placement_names.TRAIT_UNPROBEABLE
#: seconds between two probes while a release waits for its GPUs
RELEASE_POLL = release_notices.RELEASE_POLL


class GpuGate(gate_seams.ClaimGate, gate_seams.ProviderTreeGate,
              gate_seams.ReleaseGate, gate_seams.GoneGate):
    """See the module docstring; each part sees it through its seam.

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
        self._instance_projects = instance_projects
        self._probe = host_probe or probe.HostProbe.from_conf(conf)
        self._store = store or gate_state.StateStore.from_conf(conf)
        self._clock = clock
        self._warned = {}
        #: GPUs whose missing power.draw was logged (once until it returns)
        self._no_power = set()
        self._attribute = attribute
        #: the read side: the view, the last snapshot, the ledger now
        self.reads = gate_reads.GateReads(self._store, known_gpus)
        #: probes of dirty units, now or from the re-check thread
        self.release_check = release_check.ReleaseCheck(
            conf, self._store, self._probe, self.reads, list_containers,
            clock, monotonic, attribute, on_clean=on_clean,
            background=background)
        #: what the driver tells of units bound and released
        self.releases = release_notices.ReleaseNotices(
            conf, self._store, self.reads, self.release_check, clock,
            sleep, monotonic)

    @property
    def store(self):
        return self._store

    @property
    def last_snapshot(self):
        """The last :class:`.probe.Snapshot` (a refresh's or a release's)."""
        return self.reads.last_snapshot

    def probed_gpus(self):
        """PCI address -> the :class:`.nvidia_smi.GpuFacts` of each GPU.

        Of :attr:`last_snapshot`, read from memory (the probe runs outside
        nova's lock); empty before the first probe.
        """
        snapshot = self.last_snapshot
        return snapshot.gpus if snapshot is not None else {}

    @property
    def on_clean(self):
        """Run when the re-check thread finds a released unit clean."""
        return self.release_check.on_clean

    @on_clean.setter
    def on_clean(self, value):
        self.release_check.on_clean = value

    @property
    def recheck_interval(self):
        """The re-check's wait now (grows while nothing turns clean)."""
        return self.release_check.recheck_interval

    @recheck_interval.setter
    def recheck_interval(self, value):
        self.release_check.recheck_interval = value

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
                self.reads.load_view()      # operator holds still apply
                return None
            return self.refresh()
        except gate_state.StateUnreadable as exc:
            self.reads.hold_everything(exc)
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
        mark = release_check.seq_now(self._store)
        containers = self._list_containers()
        snapshot = self._probe.snapshot()
        self.reads.last_snapshot = snapshot
        projects = {}
        if self._instance_projects is not None:
            try:
                projects = self._instance_projects() or {}
            except Exception as exc:
                LOG.warning('Cannot read the projects of the instances '
                            '(%s): usage is recorded without them', exc)
        known = self.reads.known()
        current = release.bound_units(containers, projects)
        now = self._clock()
        if not known and not current and \
                not os.path.exists(self._store.path):
            # a host without GPUs: nothing to record
            self.reads.set_empty()
            return snapshot
        with self._store.update() as state:
            released = usage_accounting.account(
                state, current, snapshot, known, now, self._conf,
                self._no_power, self.reads.last_snapshot, mark)
            release.verify_released(
                state, current, snapshot, known, now, self._conf,
                mark=mark, fresh=released, attribute=self._attribute)
            holds.health(state, current, snapshot, known, now,
                         self._conf, self._warned)
            holds.probed(state, snapshot, known, now, self._conf)
            release.update_baselines(state, current, snapshot, known)
            result = dict(state)
        self.reads.set_view(result)
        holds.report_idle(result, now, self._conf, self._warned)
        holds.write_metrics(result, known, now, self._conf)
        if result['dirty']:
            self.release_check.ensure()
        return snapshot

    # -- the release side (:mod:`.release_notices`) --------------------

    def note_destroy(self, read_record):
        """:meth:`.release_notices.ReleaseNotices.note_destroy`."""
        return self.releases.note_destroy(read_record)

    def removal_failed(self, keys):
        """:meth:`.release_notices.ReleaseNotices.removal_failed`."""
        return self.releases.removal_failed(keys)

    def note_bound(self, container, instance, records):
        """:meth:`.release_notices.ReleaseNotices.note_bound`."""
        return self.releases.note_bound(container, instance, records)

    def note_gone(self, container):
        """:meth:`.release_notices.ReleaseNotices.note_gone`."""
        return self.releases.note_gone(container)

    def verify_release(self, keys):
        """:meth:`.release_notices.ReleaseNotices.verify_release`."""
        return self.releases.verify_release(keys)

    # -- the re-check thread (:mod:`.release_check`) -------------------

    def recheck(self):
        """:meth:`.release_check.ReleaseCheck.recheck`."""
        return self.release_check.recheck()

    def stop(self):
        """:meth:`.release_check.ReleaseCheck.stop`."""
        return self.release_check.stop()

    # -- what update_provider_tree and claims ask (:mod:`.gate_reads`) -

    def view(self):
        """:meth:`.gate_reads.GateReads.view`."""
        return self.reads.view()

    def apply(self, desired):
        """:meth:`.gate_reads.GateReads.apply`."""
        return self.reads.apply(desired)

    def unavailable_units(self, records=None):
        """:meth:`.gate_reads.GateReads.unavailable_units`."""
        return self.reads.unavailable_units(records)

    def dirty_share_projects(self, records=None):
        """:meth:`.gate_reads.GateReads.dirty_share_projects`."""
        return self.reads.dirty_share_projects(records)

    def check_bindable(self, device, rp_uuid):
        """:meth:`.gate_reads.GateReads.check_bindable`."""
        return self.reads.check_bindable(device, rp_uuid)
