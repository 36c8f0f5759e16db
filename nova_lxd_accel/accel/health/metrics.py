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

"""GPU states and usage in Prometheus text format (textfile collector).

Metric names (documented in ``doc/source/admin/gpu-operations.rst``):

``nova_lxd_accel_gpu_state{pci, state}``
    1 for the GPU's current state, 0 for the others; states: free, bound,
    reserved-dirty, held, unhealthy, idle, gone.
``nova_lxd_accel_gpu_dirty_units{pci}``
    released units of the GPU not yet verified clean.
``nova_lxd_accel_gpu_shared_slots_used{pci, project}``
    for a shared GPU, the slots its instances of each project hold.
``nova_lxd_accel_gpu_allocated_seconds_total{instance, project, pci, unit}``
``nova_lxd_accel_gpu_busy_seconds_total{instance, project, pci, unit}``
    seconds a unit was bound to the instance / had compute use, as observed
    by the probe.
``nova_lxd_accel_gpu_power_microwatts{uuid, project, pci, unit}``
    the power of each bound unit at the last probe, in microwatts (the
    unit cASO's energy extractor integrates): its board's ``power.draw``
    apportioned (:mod:`.energy`). No sample when the power was not read.
``nova_lxd_accel_gpu_energy_joules_total{uuid, project, pci, unit}``
    the energy of each unit an instance held, in joules (:mod:`.energy`).
    ``uuid`` is ``[lxd_accelerators] energy_uuid_label``: cASO's
    ``vm_uuid_label_name``.
``nova_lxd_accel_gpu_idle_seconds{instance, project, pci, unit}``
    for each idle unit (``[lxd_accelerators] idle_report_after``), seconds
    since its last compute use.
``nova_lxd_accel_gpu_instance_on_unhealthy_gpu{instance, project, pci, unit}``
    1 for each instance still bound to an unhealthy GPU (never stopped).
``nova_lxd_accel_gpu_probe_timestamp_seconds``,
``nova_lxd_accel_gpu_probe_available``
    when the probe last ran, and whether nvidia-smi answered.
"""

from nova_lxd_accel.accel.health import energy
from nova_lxd_accel.accel.health import gate_state
from nova_lxd_accel import placement_names

PREFIX = 'nova_lxd_accel_gpu_'


def _escape(value):
    return str('' if value is None else value).replace(
        '\\', '\\\\').replace('\n', '\\n').replace('"', '\\"')


def _labels(**labels):
    if not labels:
        return ''
    return '{%s}' % ','.join('%s="%s"' % (k, _escape(v))
                             for k, v in sorted(labels.items()))


def _number(value):
    if isinstance(value, float) and value.is_integer():
        return '%d' % value
    return repr(value) if isinstance(value, float) else str(value)


def _energy_samples(state, conf):
    """(power samples in microwatts, energy samples in joules)."""
    label = conf.lxd_accelerators.energy_uuid_label
    power, joules = [], []
    for instance, usage in sorted(state.get('usage', {}).items()):
        for key, rec in sorted(usage.get('units', {}).items()):
            labels = {label: instance, 'project': usage.get('project'),
                      'pci': rec.get('pci'), 'unit': key}
            watts = energy.current_power(state, instance, key, rec)
            if watts is not None:
                power.append((labels, int(round(watts * 1e6))))
            if energy.ENERGY_J in rec:
                joules.append((labels, float(rec[energy.ENERGY_J])))
    return power, joules


def render(state, pcis, conf, now):
    """The metrics file's text.

    :param state: the GPU state (:mod:`.gate_state`).
    :param pcis: PCI addresses of the host's GPUs.
    """
    lines = []

    def family(name, kind, help_text, samples):
        lines.append('# HELP %s%s %s' % (PREFIX, name, help_text))
        lines.append('# TYPE %s%s %s' % (PREFIX, name, kind))
        for labels, value in samples:
            lines.append('%s%s%s %s' % (PREFIX, name, _labels(**labels),
                                        _number(value)))

    pcis = sorted(set(pcis) | set(state.get('holds', {})))
    states = gate_state.gpu_states(state, pcis, conf, now)
    family('state', 'gauge', 'GPU state (1 for the current one).',
           [({'pci': pci, 'state': s}, int(states[pci] == s))
            for pci in pcis for s in gate_state.STATES])
    dirty = {}
    for unit in state.get('dirty', {}).values():
        dirty[unit.get('pci')] = dirty.get(unit.get('pci'), 0) + 1
    family('dirty_units', 'gauge',
           'Released units not yet verified clean.',
           [({'pci': pci}, dirty.get(pci, 0)) for pci in pcis])
    slots = {}
    for unit in state.get('bound', {}).values():
        if unit.get('resource_class') == placement_names.SHARE_RC:
            key = (unit.get('pci'), unit.get('project'))
            slots[key] = slots.get(key, 0) + 1
    family('shared_slots_used', 'gauge',
           'Slots of a shared GPU held by the instances of a project.',
           [({'pci': pci, 'project': project}, n)
            for (pci, project), n in sorted(
                slots.items(), key=lambda i: (i[0][0], i[0][1] or ''))])
    allocated, busy = [], []
    for instance, usage in sorted(state.get('usage', {}).items()):
        for key, rec in sorted(usage.get('units', {}).items()):
            labels = {'instance': instance, 'project': usage.get('project'),
                      'pci': rec.get('pci'), 'unit': key}
            allocated.append((labels, float(rec.get('allocated_s', 0))))
            busy.append((labels, float(rec.get('busy_s', 0))))
    family('allocated_seconds_total', 'counter',
           'Seconds a GPU unit was bound to the instance.', allocated)
    family('busy_seconds_total', 'counter',
           'Seconds a bound GPU unit showed compute use.', busy)
    power, joules = _energy_samples(state, conf)
    family('power_microwatts', 'gauge',
           'Power of a bound GPU unit at the last probe (its board\'s '
           'draw apportioned).', power)
    family('energy_joules_total', 'counter',
           'Energy of a GPU unit while bound to the instance.', joules)
    family('idle_seconds', 'gauge',
           'Seconds since an idle bound unit last showed compute use.',
           [({'instance': u['instance'], 'project': u['project'],
              'pci': u['pci'], 'unit': u['unit']}, float(u['idle_s']))
            for u in gate_state.idle_units(state, conf, now)])
    sick = {pci for pci, hold in state.get('holds', {}).items()
            if hold.get('kind') == gate_state.KIND_UNHEALTHY}
    family('instance_on_unhealthy_gpu', 'gauge',
           'Instances still bound to an unhealthy GPU (left running).',
           [({'instance': u.get('instance'), 'project': u.get('project'),
              'pci': u.get('pci'), 'unit': key}, 1)
            for key, u in sorted(state.get('bound', {}).items())
            if u.get('pci') in sick])
    probe = state.get('probe') or {}
    family('probe_timestamp_seconds', 'gauge',
           'When the GPU probe last ran (UNIX time).',
           [({}, float(probe.get('at') or 0))])
    family('probe_available', 'gauge',
           'Whether nvidia-smi answered the last probe.',
           [({}, int(bool(probe.get('available'))))])
    return '\n'.join(lines) + '\n'


def write_textfile(path, text):
    """Write atomically (node_exporter must never read half a file)."""
    gate_state.write_atomic(path, text, prefix='.nova_lxd_accel.', mode=0o644)
