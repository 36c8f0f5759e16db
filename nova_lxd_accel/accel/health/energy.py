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

"""GPU power and energy per instance, from the probe's ``power.draw``.

nvidia-smi reads one power figure per board (``power.draw``, watts). A
unit bound to an instance is given its part of it:

* a whole GPU: the board's draw;
* a MIG slice: the board's draw times the slice's compute slices over the
  board's (:func:`.devices.mig_gpu_share`: ``1g.10gb`` on an
  H100 is 1/7, ``3g.40gb`` 3/7);
* a slot of a shared GPU: the board's draw over its slots.

These are fixed shares, not utilisation: nvidia-smi gives no utilisation
per MIG device (``utilization.gpu`` is ``[N/A]`` in MIG mode) nor per
process in ``--query-compute-apps``, so nothing measured would tell two
holders of one board apart. A board's idle draw is thus apportioned to its
holders like the rest; the share of units nobody holds is nobody's (it is
not in any instance's figure).

No reading, no figure: a failed probe, a GPU nvidia-smi does not list (or
lost), a board answering ``[N/A]`` for ``power.draw`` or a unit whose share
is unknown (a MIG device the inventory no longer lists, a shared GPU
without slots) gives no power sample and adds no energy -- never 0 W, which
would be a guess.

Energy is a counter in joules kept in each usage record of the GPU state
file (:mod:`.gate_state`), beside ``allocated_s``: the mean of two
consecutive accounted readings times the seconds between them. An interval
without a reading at both ends adds nothing (``energy_s`` counts the
seconds that were covered), nor does one too long to know what happened
in it (nova-compute was down: :mod:`.usage_record`).
"""

import fractions

from oslo_log import log as logging

from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel import units

LOG = logging.getLogger(__name__)

#: the usage record's keys (see :func:`account`)
ENERGY_J = 'energy_j'
ENERGY_S = 'energy_s'
POWER_W = 'power_w'
POWER_AT = 'power_at'


def card_power(snapshot, pci):
    """The board's ``power.draw`` in watts, or None when not read."""
    if snapshot is None or not snapshot.available:
        return None
    facts = snapshot.gpus.get(pci)
    if facts is None or facts.lost:
        return None
    return facts.power_draw_w


def unit_share(unit, gpu, probed_name=None):
    """The part of its board a bound unit is, or None when unknown.

    :param unit: a bound unit (:func:`.release.bound_units`).
    :param gpu: its :class:`.devices.Gpu` as the inventory lists it, or
        None.
    :param probed_name: the board's name as nvidia-smi prints it (for a
        MIG slice of a GPU whose model LXD does not know).
    :returns: a :class:`fractions.Fraction`.
    """
    kind = unit.get('kind')
    if kind == units.KIND_PGPU:
        return fractions.Fraction(1)
    if gpu is None:
        return None
    if kind == units.KIND_SHARE:
        slots = gpu.shared_slots or 0
        return fractions.Fraction(1, slots) if slots > 0 else None
    if kind == units.KIND_MIG:
        mig = next((m for m in gpu.mig_devices
                    if m.uuid == unit.get('mig_uuid')), None)
        if mig is None:
            return None
        return devices.mig_gpu_share(
            mig.profile, gpu.model or probed_name or '')
    return None


def unit_power(unit, snapshot, known):
    """Watts of a bound unit: its board's draw times its share, or None."""
    pci = unit.get('pci')
    watts = card_power(snapshot, pci)
    if watts is None:
        return None
    facts = snapshot.gpus.get(pci)
    share = unit_share(unit, (known or {}).get(pci),
                       getattr(facts, 'name', None))
    if share is None:
        return None
    return watts * float(share)


def account(record, watts, last, now, elapsed, gap=False):
    """Add an interval's energy to a usage record; keep the new reading.

    :param record: the usage record of one instance's unit.
    :param watts: the unit's power now (:func:`unit_power`), or None.
    :param last: when the previous accounting ran (None: never).
    :param elapsed: the seconds of this interval the unit was bound.
    :param gap: the interval is too long to be known (nova-compute was
        down, :func:`.usage_record.is_gap`): nothing is interpolated over it;
        this reading starts the next interval.
    """
    previous = record.get(POWER_W) if last is not None and not gap and \
        record.get(POWER_AT) == last else None
    if watts is None:
        record.pop(POWER_W, None)
        record.pop(POWER_AT, None)
        return
    record.setdefault(ENERGY_J, 0.0)
    record.setdefault(ENERGY_S, 0.0)
    if previous is not None and elapsed > 0:
        record[ENERGY_J] += (previous + watts) / 2.0 * elapsed
        record[ENERGY_S] += elapsed
    record[POWER_W] = watts
    record[POWER_AT] = now


def current_power(state, instance, key, record):
    """The unit's watts at the last accounting, or None.

    Only for a unit still bound to ``instance`` whose reading is from the
    last accounting (an older reading is never reported again).
    """
    bound = (state.get('bound') or {}).get(key) or {}
    if bound.get('instance') != instance or record.get(POWER_W) is None:
        return None
    if record.get(POWER_AT) != state.get('accounted_at'):
        return None
    return float(record[POWER_W])


def log_missing_power(logged, current, snapshot):
    """Log a bound GPU without ``power.draw`` (once until it returns).

    :param logged: the PCI addresses logged so far (kept by the caller,
        updated here).
    :param current: unit key -> binding (``pci``) bound now.

    A failed probe says nothing about the boards: its own warning is
    enough, and what was logged stays logged.
    """
    if not snapshot.available:
        return
    pcis = {u['pci'] for u in current.values()}
    for pci in sorted(pcis):
        facts = snapshot.gpus.get(pci)
        if facts is None or facts.lost:
            continue
        if facts.power_draw_w is None:
            if pci not in logged:
                logged.add(pci)
                LOG.warning('GPU %(pci)s gives no power.draw (nvidia-smi '
                            'answers [N/A]): no power or energy sample '
                            'for its instances until it does',
                            {'pci': pci})
        elif pci in logged:
            logged.discard(pci)
            LOG.info('GPU %(pci)s gives its power.draw again',
                     {'pci': pci})
