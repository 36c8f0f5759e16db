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

"""The gate's read side: what claims and the provider tree ask.

What the gate knows now, kept in memory: the holds and dirty units of
the last probe or state file read (a :class:`.reservations.GateView`)
and the last :class:`.probe.Snapshot`. The driver's
``update_provider_tree`` (under nova's lock) reads only these
(:meth:`GateReads.apply`, the snapshot's GPUs), and so does a claim's
:meth:`GateReads.check_bindable` of each device it looks up; a claim
(under the claim lock) reads the state file itself
(:meth:`GateReads.unavailable_units`,
:meth:`GateReads.dirty_share_projects`), so it sees every release
written before, by any process.

When the state file cannot be read the gate fails closed: every GPU is
held (:meth:`GateReads.hold_everything`) until a refresh reads it again.
"""

from oslo_log import log as logging

from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel.health import gate_state
from nova_lxd_accel.accel.health import release
from nova_lxd_accel.accel.health import reservations
from nova_lxd_accel import exception

LOG = logging.getLogger(__name__)


class GateReads(object):
    """The holds, dirty units and last probe the gate answers from.

    :param store: the :class:`.gate_state.StateStore`.
    :param known_gpus: callable returning the :class:`devices.Gpu` list the
        inventory last reported.
    """

    def __init__(self, store, known_gpus):
        self._store = store
        self._known_gpus = known_gpus
        self._view = None
        #: the last :class:`.probe.Snapshot` (a refresh's or a release's)
        self.last_snapshot = None

    def known(self):
        """{PCI address: :class:`devices.Gpu`} the inventory reported."""
        return {g.pci_address: g for g in (self._known_gpus() or ())}

    def set_view(self, state):
        """Remember the holds and dirty units of state file ``state``."""
        self._view = reservations.GateView.of(state)

    def set_empty(self):
        """Nothing held, nothing dirty (a host without GPUs)."""
        self._view = reservations.GateView(holds={}, dirty={})

    def load_view(self):
        """Read the holds and dirty units from the state file.

        :returns: the view (the previous one when the file cannot be read;
            every GPU held when it is unreadable).
        """
        try:
            state = self._store.load()
        except gate_state.StateUnreadable as exc:
            return self.hold_everything(exc)
        except (OSError, ValueError) as exc:
            LOG.warning('Cannot read the GPU state file: %s', exc)
            return self._view
        self._view = reservations.GateView(holds=state['holds'],
                                           dirty=state['dirty'])
        return self._view

    def view(self):
        """Holds and dirty units as of the last probe (or file read).

        Kept in memory so that ``update_provider_tree``, under nova's lock,
        reads nothing; :meth:`.gate.GpuGate.maybe_refresh` reloads it every
        period, so a ``nova-lxd-accel gpu hold|release`` applies at the
        next one.
        """
        if self._view is None:
            # never read: nothing known of holds and dirty units is safe
            return self.load_view() or self.hold_everything(
                'the GPU state file was never read')
        return self._view

    def hold_everything(self, why):
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
                 for pci in self.known()}
        dirty = self._view.dirty if self._view is not None else {}
        self._view = reservations.GateView(holds=holds, dirty=dirty)
        return self._view

    def apply(self, desired):
        """Desired providers with holds and dirty units reserved.

        :func:`.reservations.reserved_providers` of the last view.
        """
        return reservations.reserved_providers(desired, self.view())

    def ledger(self):
        """The ledger (the state file) now.

        The last probe's holds and dirty units when it cannot be read.
        """
        try:
            return self._store.load()
        except gate_state.StateUnreadable as exc:
            view = self.hold_everything(exc)
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
        state = self.ledger()
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
        return release.dirty_share_projects(self.ledger(), records)

    def check_bindable(self, device, rp_uuid):
        """Raise when ``device`` is a held or unhealthy GPU."""
        if not isinstance(device, devices.Gpu):
            return
        hold = self.view().holds.get(device.pci_address)
        if hold:
            raise exception.GpuHeld(pci=device.pci_address, provider=rp_uuid,
                                    kind=hold.get('kind'),
                                    reason=hold.get('reason'))
