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

"""Verified release: whether a released GPU unit is clean yet.

Functions over the GPU state (:mod:`.gpu_state`) and a probe's
:class:`.gpu_probe.Snapshot`, run by :class:`.gpu_gate.GpuGate` under the
state file's lock. A released unit is *dirty* (``state['dirty']``) until
:func:`verify_released` finds it clean: for a whole GPU no compute process
and memory back to its baseline (plus ``[lxd_accelerators]
release_memory_tolerance_mib``); for a MIG slice the slice still listed as
it was, no compute process in its GPU/compute instance and its memory back
to its own baseline; for a slot of a shared GPU, nothing while another slot
is still bound, and the whole-GPU check when the last slot is released. A
GPU of another vendor cannot be probed and is clean at once. The
baselines (``state['baseline']``) are the lowest memory use seen while
nothing held a GPU or slice (:func:`update_baselines`).

A GPU's NVIDIA MPS server (``nvidia-cuda-mps-server``, the operator's
daemon of a GPU shared with quotas, which outlives its clients) is not a
tenant's process: it neither holds a released unit nor keeps a baseline
from being taken. Its memory is not set apart: it counts as any other
against the baseline and the tolerance, so a leftover that only takes
its name is still caught by the memory it holds.
"""

from oslo_log import log as logging

from nova_lxd_accel.accel import binding
from nova_lxd_accel.accel import gpu_state
from nova_lxd_accel.accel import nvidia_smi

LOG = logging.getLogger(__name__)

#: what holds a dirty unit before its first check
NOT_YET = 'not yet verified'


def verifying(conf):
    """Whether released units are verified (else freed at once)."""
    return conf.lxd_accelerators.verified_release


def mig_key(pci, index):
    """The baseline key of MIG device ``index`` of GPU ``pci``."""
    return '%s/mig%s' % (pci, index)


def dirty_entry(unit, now):
    """The ``state['dirty']`` entry of a unit released at ``now``."""
    return {'pci': unit.get('pci'),
            'resource_class': unit.get('resource_class'),
            'provider': unit.get('provider'),
            'kind': unit.get('kind'),
            'mig_uuid': unit.get('mig_uuid'),
            'instance': unit.get('instance'),
            'since': now, 'holding': NOT_YET}


def _apps_text(apps):
    return ', '.join('%s (pid %s, %s MiB)' % (a.name, a.pid,
                                              a.used_memory_mib)
                     for a in apps)


def _memory_over(state, key, used_mib, conf):
    """(used, baseline) when ``used_mib`` is above the baseline, else None."""
    baseline = state['baseline'].get(key, 0)
    tolerance = conf.lxd_accelerators.release_memory_tolerance_mib
    used = used_mib or 0
    if used > baseline + tolerance:
        return used, baseline
    return None


def holding(unit, snapshot, known, state, conf, current=None):
    """None when a released unit is clean, else what still holds it.

    :param known: PCI address -> :class:`.devices.Gpu` the inventory knows.
    :param current: unit key -> binding of the units bound now.
    """
    pci = unit.get('pci')
    gpu = known.get(pci)
    if gpu is not None and not gpu.is_nvidia:
        return None
    if unit.get('kind') == binding.KIND_MIG:
        return _mig_holding(unit, gpu, snapshot, state, conf)
    if unit.get('kind') == binding.KIND_SHARE and any(
            u.get('pci') == pci for u in (current or {}).values()):
        # the card is still shared: its processes cannot be told apart
        # per slot, so a slot is free at once; the card is verified
        # when its last slot is released
        return None
    if not snapshot.available:
        return 'the GPU cannot be probed (%s)' % (snapshot.error or
                                                  'nvidia-smi failed')
    apps = snapshot.apps_on(pci)
    if apps:
        return 'compute processes %s' % _apps_text(apps)
    facts = snapshot.gpus.get(pci)
    if facts is None:
        return 'nvidia-smi does not list the GPU'
    over = _memory_over(state, pci, facts.memory_used_mib, conf)
    if over:
        servers = snapshot.mps_servers_on(pci)
        return '%d MiB of GPU memory in use (baseline %d MiB)%s' % (
            over + ('; the MPS server %s holds part of it' % _apps_text(
                servers) if servers else '',))
    return None


def _mig_holding(unit, gpu, snapshot, state, conf):
    """None when a released MIG device is clean, else what holds it.

    Clean: still listed as it was, no compute process in its GPU/compute
    instance, and its memory back to its baseline (plus the tolerance).
    When nvidia-smi's queries or ``nvidia-smi -q`` could not be read this
    time, only the listing (``nvidia-smi -L``, read by the inventory) is
    checked, as before per-slice checks existed.
    """
    uuid = unit.get('mig_uuid')
    listed = {m.uuid: m for m in (gpu.mig_devices if gpu else ())}
    if uuid and uuid not in listed:
        return 'MIG device %s is no longer listed' % uuid
    mig = listed.get(uuid)
    facts = (snapshot.mig.get(unit.get('pci')) or {}).get(
        mig.index if mig else None)
    if facts is None:
        return None
    apps = nvidia_smi.tenant_apps(facts.apps)
    if apps:
        return 'compute processes %s in MIG device %s' % (
            _apps_text(apps), uuid)
    over = _memory_over(state, mig_key(unit.get('pci'), facts.index),
                        facts.memory_used_mib, conf)
    if over:
        return ('%d MiB of memory in use in MIG device %s (baseline '
                '%d MiB)' % (over[0], uuid, over[1]))
    return None


def verify_released(state, current, snapshot, known, now, conf,
                    only=None):
    """Free the dirty units of ``state`` found clean; note what holds others.

    :param only: unit keys to check (None: every dirty unit).
    """
    for key in list(state['dirty']):
        if only is not None and key not in only:
            continue
        unit = state['dirty'][key]
        if key in current:
            # bound again (by a migration's revert, for example)
            del state['dirty'][key]
            continue
        held_by = None if not verifying(conf) else holding(
            unit, snapshot, known, state, conf, current)
        if held_by is None:
            del state['dirty'][key]
            waited = max(0.0, now - (unit.get('since') or now))
            gpu_state.add_event(state, 'clean', unit.get('pci'),
                                'verified clean', now, unit=key,
                                waited_s=round(waited, 3))
            if unit.get('holding') not in (None, NOT_YET):
                LOG.info('%(unit)s of GPU %(pci)s is verified clean '
                         '%(waited).1f s after its release (it was held '
                         'by %(holding)s): schedulable again',
                         {'unit': key, 'pci': unit.get('pci'),
                          'waited': waited,
                          'holding': unit.get('holding')})
            else:
                LOG.info('%(unit)s of GPU %(pci)s is verified clean '
                         '%(waited).1f s after its release: schedulable '
                         'again', {'unit': key, 'pci': unit.get('pci'),
                                   'waited': waited})
        elif held_by != unit.get('holding'):
            unit['holding'] = held_by
            LOG.warning('%(unit)s of GPU %(pci)s, released by instance '
                        '%(instance)s, stays reserved: %(holding)s',
                        {'unit': key, 'pci': unit.get('pci'),
                         'instance': unit.get('instance'),
                         'holding': held_by})


def _lower_baseline(state, key, used_mib):
    old = state['baseline'].get(key)
    if old is None or used_mib < old:
        state['baseline'][key] = used_mib


def update_baselines(state, current, snapshot, known):
    """Lower each free GPU's and MIG slice's baseline to its use now.

    :param current: unit key -> binding of the units bound now.
    :param known: PCI address -> :class:`.devices.Gpu` the inventory knows.
    """
    if not snapshot.available:
        return
    in_use = {u['pci'] for u in current.values()}
    in_use |= {u.get('pci') for u in state['dirty'].values()}
    for pci, facts in snapshot.gpus.items():
        if pci in in_use or snapshot.apps_on(pci) or \
                facts.memory_used_mib is None:
            continue
        _lower_baseline(state, pci, facts.memory_used_mib)
    # MIG devices: the lowest use seen while no instance held them
    held = {(u.get('pci'), u.get('mig_uuid'))
            for u in list(current.values()) + list(
                state['dirty'].values())}
    for pci, slices in snapshot.mig.items():
        gpu = known.get(pci)
        uuids = {m.index: m.uuid for m in gpu.mig_devices} if gpu else {}
        for index, facts in slices.items():
            if (pci, uuids.get(index)) in held or \
                    nvidia_smi.tenant_apps(facts.apps) or \
                    facts.memory_used_mib is None:
                continue
            _lower_baseline(state, mig_key(pci, index), facts.memory_used_mib)
