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

"""What an APEL accelerator record of this cloud says, computed purely.

APEL's accelerator usage record (``APEL-accelerator-message`` v0.1) has a
``Count`` (a number, fractions allowed) and an ``ActiveDuration`` next to
the ``AvailableDuration``. cASO 5.2.2's own nova extractor takes ``Count``
from ``Accelerator:Number`` into an integer field and sends
``ActiveDuration = AvailableDuration``; the extractor this project ships
(:mod:`.caso_extractor`) sends instead:

``Count``
    the GPUs an instance's accelerators amount to, from the flavor
    property :data:`COUNT_KEY` that ``nova-lxd-accel flavors`` sets: 1 per
    whole GPU, a MIG slice's compute slices over its GPU's (``1/7`` for a
    ``1g`` slice of an A100 or H100), ``1/<slots>`` for a slot of a shared
    GPU.
``ActiveDuration``
    the seconds nova-compute's GPU probe saw the instance's units busy (see
    ``nova-lxd-accel usage``), read from the files ``nova-lxd-accel usage
    --export`` writes on the compute hosts.

Only the standard library and oslo.config are imported here: cASO loads
every registered extractor at start, so nothing it imports may need nova.
"""

import fractions
import glob
import json

from oslo_config import cfg

#: Flavor property with the GPUs one instance of the flavor holds, as a
#: fraction (``1/7``, ``1/4``, ``2``). cASO reads the ``accounting:``
#: namespace already (``accounting:benchmark_type``) and nova's API leaves
#: it unvalidated, so any microversion accepts it.
COUNT_KEY = 'accounting:accelerator_count'
#: ``format`` of a usage export (``nova-lxd-accel usage --export``)
EXPORT_FORMAT = 'nova-lxd-accel-usage/1'
#: the section of cASO's configuration file the extractor reads
CASO_GROUP = 'nova_lxd_accel'

caso_opts = [
    cfg.StrOpt('count_key',
               default=COUNT_KEY,
               help="""
Flavor property with the GPUs an instance of the flavor holds (a fraction
such as ``1/7`` or a decimal number), sent as the accelerator record's
``Count``. A flavor without it is counted by ``[accelerator] number_key``
(``Accelerator:Number``), as cASO's own nova extractor does.
"""),
    cfg.ListOpt('usage_files',
                default=[],
                help="""
Files written by ``nova-lxd-accel usage --export`` on the compute hosts
(shell patterns, e.g. ``/var/spool/caso/gpu-usage/*.json``). The seconds
they record an instance's GPU units busy are sent as ``ActiveDuration``;
an instance they do not cover keeps cASO's default (its
``AvailableDuration``). Empty: no ``ActiveDuration`` of ours.
"""),
]


def list_opts():
    """For ``oslo-config-generator --namespace nova_lxd_accel.caso``."""
    return [(CASO_GROUP, caso_opts)]


def parse_count(value):
    """The GPUs a flavor property says, as a positive Fraction.

    :param value: ``'1/7'``, ``'0.25'``, ``'2'`` or None.
    :returns: a :class:`fractions.Fraction`, or None for None or ``''``.
    :raises ValueError: for anything else, zero and negative numbers.
    """
    if value is None or str(value).strip() == '':
        return None
    try:
        count = fractions.Fraction(str(value).strip())
    except (ValueError, ZeroDivisionError):
        raise ValueError('%r is not a number of GPUs' % (value,))
    if count <= 0:
        raise ValueError('%r is not a positive number of GPUs' % (value,))
    return count


def export(state, host, now):
    """The usage export of one host, from its GPU state.

    :param state: the GPU state (:mod:`.health.gate_state`).
    :param host: the compute host's name, to tell units of an instance
        that moved between hosts apart.
    :param now: UNIX time of the export.
    """
    usage = {}
    for instance, entry in sorted(state.get('usage', {}).items()):
        usage[instance] = {
            'project': entry.get('project'),
            'units': {key: {name: unit.get(name) for name in (
                'pci', 'resource_class', 'allocated_s', 'busy_s',
                'unknown_s', 'first', 'last')} for key, unit in sorted(
                    entry.get('units', {}).items())}}
    return {'format': EXPORT_FORMAT, 'host': host, 'at': now,
            'usage': usage}


def load_exports(patterns):
    """The units of every instance in the export files.

    :param patterns: file names or shell patterns.
    :returns: ``(units, problems)``: instance uuid -> list of unit dicts
        (``host`` and ``unit`` added; a unit found in two files of one host
        counts once, from the later export), and one line per file that
        could not be used.
    """
    latest, problems = {}, []
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)) or [pattern]:
            try:
                with open(path, encoding='utf-8') as f:
                    data = json.load(f)
            except (OSError, ValueError) as exc:
                problems.append('%s: %s' % (path, exc))
                continue
            if not isinstance(data, dict) or \
                    data.get('format') != EXPORT_FORMAT:
                problems.append('%s: not a %s file' % (path, EXPORT_FORMAT))
                continue
            at = data.get('at') or 0
            for instance, entry in (data.get('usage') or {}).items():
                for key, unit in (entry.get('units') or {}).items():
                    ident = (instance, data.get('host'), key)
                    if ident in latest and latest[ident][0] >= at:
                        continue
                    latest[ident] = (at, dict(unit, host=data.get('host'),
                                              unit=key))
    units = {}
    for (instance, _host, _key), (_at, unit) in sorted(latest.items()):
        units.setdefault(instance, []).append(unit)
    return units, problems


def _busy_in(unit, start, end):
    """(busy seconds of ``unit`` within [start, end], whether measured).

    The probe keeps one busy total per unit over its window [first, last];
    a record covering part of it (an instance living across a month's
    end) gets the part of the total in proportion to the overlap.
    """
    first, last = unit.get('first'), unit.get('last')
    if first is None or last is None or last <= first:
        return 0.0, False
    overlap = min(end, last) - max(start, first)
    if overlap <= 0:
        return 0.0, False
    return float(unit.get('busy_s') or 0) * overlap / (last - first), True


def active_duration(units, start, end, units_held, available):
    """``ActiveDuration`` of a record of [start, end], or None.

    :param units: the instance's units (:func:`load_exports`).
    :param start: UNIX time the record starts.
    :param end: UNIX time the record ends.
    :param units_held: GPU units an instance of the flavor holds at once
        (``Accelerator:Number``): the record's duration is per unit.
    :param available: the record's ``AvailableDuration``: the result never
        exceeds it.
    :returns: busy seconds, or None when no unit was measured in the period
        (the record then keeps cASO's default).
    """
    busy, measured = 0.0, False
    for unit in units or ():
        part, seen = _busy_in(unit, start, end)
        busy += part
        measured = measured or seen
    if not measured:
        return None
    return int(min(available, round(busy / max(1, units_held))))
