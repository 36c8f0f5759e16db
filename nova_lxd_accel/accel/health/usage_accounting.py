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

"""Usage accounting: a refresh's listing written into the ledger.

:func:`account` runs in :meth:`.gate.GpuGate.refresh`, under the state
file's lock: the units the listing shows bound become the ledger's
``bound`` (each with its busy time), their allocated, busy and energy
time is added to ``usage`` (:mod:`.usage_record`), and a unit bound
before and no longer listed is released: dirty until verified clean
(:func:`.release_notices.mark_dirty`), or offered again at once when
``verified_release`` is off.
"""

from oslo_log import log as logging

from nova_lxd_accel.accel.health import energy
from nova_lxd_accel.accel.health import gate_state
from nova_lxd_accel.accel.health import release
from nova_lxd_accel.accel.health import release_notices
from nova_lxd_accel.accel.health import usage_record

LOG = logging.getLogger(__name__)


def account(state, current, snapshot, known, now, conf, no_power,
            last_snapshot, mark=None):
    """Write the units ``current`` lists bound, and their usage.

    :param current: unit key -> unit the listing shows bound
        (:func:`.release.bound_units`).
    :param snapshot: the :class:`.probe.Snapshot` taken after the listing.
    :param known: {PCI address: :class:`.devices.Gpu`} reported.
    :param no_power: set of GPUs whose missing power.draw was logged.
    :param last_snapshot: the probe before (where a MIG device was).
    :param mark: ``state['seq']`` before the listing: a release or claim
        written since is newer than what the listing shows.
    :returns: the keys released (marked dirty) now.
    """
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
                             last, now, conf)
    for key, before in previous.items():
        if key not in current and mark is not None and \
                (before.get('seq') or 0) > mark:
            bound[key] = before     # claimed after this listing
            continue
        if key not in current:
            if not release.verifying(conf):
                LOG.info('%(unit)s of GPU %(pci)s was released by '
                         'instance %(instance)s: offered again at once '
                         '(verified release is off)',
                         {'unit': key, 'pci': before.get('pci'),
                          'instance': before.get('instance')})
                continue
            if key in state['dirty']:
                continue
            release_notices.mark_dirty(state, key, before, known, now,
                                       last_snapshot)
            released.append(key)
            LOG.info('%(unit)s of GPU %(pci)s was released by instance '
                     '%(instance)s: reserved until it is verified clean',
                     {'unit': key, 'pci': before.get('pci'),
                      'instance': before.get('instance')})
    state['bound'] = bound
    energy.log_missing_power(no_power, current, snapshot)
    return released
