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

"""One interval of a bound unit's usage record, and the gaps in it.

At every refresh the gate adds the seconds since the last accounting to
each bound unit's usage record (:mod:`.gate_state`'s ``usage``):
``allocated_s`` always, ``busy_s`` when the probe saw the GPU busy, and
its energy (:mod:`.energy`).

An interval longer than :func:`max_gap` (nova-compute was down, or its
periodic task stalled) is a **gap**: one probe at its end says nothing of
what the GPU did during it. Its seconds go to ``unknown_s``, not to
``busy_s``, and no energy is interpolated over it; they still go to
``allocated_s``, as the unit stayed bound to the instance from one end to
the other. A consumer reads ``busy_s`` as a lower bound and ``busy_s +
unknown_s`` as an upper one.
"""

from oslo_log import log as logging

from nova_lxd_accel.accel.health import energy

LOG = logging.getLogger(__name__)

#: the usage record's key of the seconds of gaps
UNKNOWN_S = 'unknown_s'
#: an interval longer than this many periods of the probe is a gap
GAP_PERIODS = 5
#: seconds between two runs of nova's periodic tasks when nothing sets
#: ``[DEFAULT] update_resources_interval`` (nova's default spacing)
DEFAULT_PERIOD = 60


def probe_period(conf):
    """Seconds between two accountings when nova-compute runs well.

    The longest of ``[lxd_accelerators] probe_interval``, ``[DEFAULT]
    update_resources_interval`` (when nova's options are registered) and
    :data:`DEFAULT_PERIOD`.
    """
    # nova's option is not registered in the commands nor most tests
    resources = int(getattr(conf, 'update_resources_interval', 0) or 0)
    return max(int(conf.lxd_accelerators.probe_interval or 0), resources,
               DEFAULT_PERIOD)


def max_gap(conf):
    """Seconds an interval may last before it is a gap."""
    return GAP_PERIODS * probe_period(conf)


def is_gap(elapsed, conf):
    return elapsed > max_gap(conf)


def account(record, elapsed, busy, watts, last, now, conf):
    """Add one interval to the usage record of a bound unit.

    :param record: the usage record of one instance's unit.
    :param elapsed: the seconds of this interval the unit was bound.
    :param busy: whether the probe at its end saw the GPU busy.
    :param watts: the unit's power now (:func:`.energy.unit_power`), or
        None.
    :param last: when the previous accounting ran (None: never).
    :param now: when this one runs.
    :returns: True when the interval was a gap.
    """
    gap = is_gap(elapsed, conf)
    record['allocated_s'] = record.get('allocated_s', 0.0) + elapsed
    if gap:
        record[UNKNOWN_S] = record.get(UNKNOWN_S, 0.0) + elapsed
        LOG.warning('GPU %(pci)s: %(seconds)d s since its last accounting '
                    '(more than %(bound)d s: nova-compute was down or '
                    'stalled); counted allocated, its use and energy '
                    'unknown', {'pci': record.get('pci'),
                                'seconds': elapsed,
                                'bound': max_gap(conf)})
    elif busy:
        record['busy_s'] = record.get('busy_s', 0.0) + elapsed
    record['last'] = now
    energy.account(record, watts, last, now, elapsed, gap=gap)
    return gap


def busy(snapshot, pci):
    """Whether the GPU at ``pci`` was in use at ``snapshot``.

    A tenant's process (never the MPS server alone: ``apps_on``), or
    utilisation above zero.
    """
    facts = snapshot.gpus.get(pci)
    return bool(snapshot.apps_on(pci)) or bool(
        facts is not None and facts.utilization_pct)
