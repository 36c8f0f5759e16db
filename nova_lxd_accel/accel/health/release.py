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

Functions over the GPU state (:mod:`.gate_state`) and a probe's
:class:`.probe.Snapshot`, run by :class:`.gate.GpuGate` under the
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

from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel.health import gate_state
from nova_lxd_accel.accel.inventory import nvidia_smi
from nova_lxd_accel.accel import units
from nova_lxd_accel.container import identity

LOG = logging.getLogger(__name__)

#: what holds a dirty unit before its first check
NOT_YET = 'not yet verified'


def verifying(conf):
    """Whether released units are verified (else freed at once)."""
    return conf.lxd_accelerators.verified_release


def mig_key(pci, index):
    """The baseline key of MIG device ``index`` of GPU ``pci``."""
    return '%s/mig%s' % (pci, index)


def dirty_entry(unit, now, seq=None, place=None):
    """The ``state['dirty']`` entry of a unit released at ``now``.

    :param seq: the entry's :func:`.gate_state.next_seq`.
    :param place: a MIG slice's ``{'mig_index', 'mig_gi', 'mig_ci',
        'mig_profile'}`` (:func:`mig_place`), to know it again if the
        operator recreates it with a new UUID.
    """
    entry = {'pci': unit.get('pci'),
             'resource_class': unit.get('resource_class'),
             'provider': unit.get('provider'),
             'kind': unit.get('kind'),
             'mig_uuid': unit.get('mig_uuid'),
             'instance': unit.get('instance'),
             'project': unit.get('project'),
             'container': unit.get('container'),
             'since': now, 'holding': NOT_YET, 'seq': seq or 0}
    entry.update(place or {})
    return entry


def mig_place(unit, known, snapshot):
    """Where a MIG slice sits on its GPU: index, GPU/compute instance.

    From the inventory's listing and, for modern UUIDs (which do not say
    it), the last probe's ``nvidia-smi -q``. {} for another unit.
    """
    if unit.get('kind') != units.KIND_MIG:
        return {}
    gpu = known.get(unit.get('pci'))
    mig = {m.uuid: m for m in (gpu.mig_devices if gpu else ())}.get(
        unit.get('mig_uuid'))
    if mig is None:
        return {}
    facts = ((snapshot.mig if snapshot is not None else {}).get(
        unit.get('pci')) or {}).get(mig.index)
    gi = mig.gi if mig.gi is not None else getattr(facts, 'gi', None)
    ci = mig.ci if mig.ci is not None else getattr(facts, 'ci', None)
    return {'mig_index': mig.index, 'mig_gi': gi, 'mig_ci': ci,
            'mig_profile': mig.profile}


def _owned_by(container, owners):
    """Whether a process's container is one of ``owners`` (names)."""
    if not container:
        return False
    return container in owners or any(
        container.endswith('_' + name) for name in owners)


def _unaccounted(apps, owners, attribute):
    """The processes of ``apps`` no live holder in ``owners`` accounts for.

    :param owners: names of the live containers bound to the GPU now.
    :param attribute: callable(pid) -> container name, '' or None
        (:func:`.probe.container_of_process`); None: nothing can be
        told, so every process is unaccounted for.
    :returns: list of (app, its container or None).
    """
    out = []
    for app in apps:
        container = attribute(app.pid) if attribute is not None else None
        if not _owned_by(container, owners):
            out.append((app, container))
    return out


def _unaccounted_text(found):
    parts = []
    for app, container in found:
        where = ('in container %s' % container if container else
                 'on the host' if container == '' else 'of unknown origin')
        parts.append('%s (pid %s, %s MiB, %s)' % (
            app.name, app.pid, app.used_memory_mib, where))
    return ', '.join(parts)


def _owners(current, pci):
    """Names of the containers bound to GPU ``pci`` now."""
    return {u.get('container') for u in (current or {}).values()
            if u.get('pci') == pci and u.get('container')}


def _unit_gpu(record):
    """The GPU PCI address of a binding record, or None (InfiniBand)."""
    if record.get('kind') in (units.KIND_PGPU, units.KIND_MIG,
                              units.KIND_SHARE):
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


def holding(unit, snapshot, known, state, conf, current=None,
            attribute=None):
    """None when a released unit is clean, else what still holds it.

    :param known: PCI address -> :class:`.devices.Gpu` the inventory knows.
    :param current: unit key -> binding of the units bound now.
    :param attribute: callable(pid) -> container (see
        :func:`.probe.container_of_process`), or None when processes cannot be
        told apart.
    """
    pci = unit.get('pci')
    gpu = known.get(pci)
    if gpu is not None and not gpu.is_nvidia:
        return None
    if not snapshot.available:
        return 'the GPU cannot be probed (%s)' % (snapshot.error or
                                                  'nvidia-smi failed')
    lost = getattr(snapshot.gpus.get(pci), 'lost', None)
    if lost:
        # a lost GPU lists no process and no slice: nothing says clean
        return 'nvidia-smi reports the GPU lost (%s)' % lost
    if unit.get('kind') == units.KIND_MIG:
        return _mig_holding(unit, gpu, snapshot, state, conf, current,
                            attribute)
    owners = _owners(current, pci)
    if unit.get('kind') == units.KIND_SHARE and owners:
        # the card is still shared: a process is the slot's leftover
        # unless its cgroup puts it in a container bound to the card now
        found = _unaccounted(snapshot.apps_on(pci), owners, attribute)
        if found:
            return ('compute processes %s on the shared GPU, which no '
                    'instance bound to it accounts for' %
                    _unaccounted_text(found))
        return None
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


def _mig_holding(unit, gpu, snapshot, state, conf, current, attribute):
    """None when a released MIG device is clean, else what holds it.

    Clean: still listed as it was, no compute process in its GPU/compute
    instance, and its memory back to its baseline (plus the tolerance).
    Without facts of the slice (``nvidia-smi -q`` failed or does not list
    it): clean only when no process on its GPU is unaccounted for, as
    ``--query-compute-apps`` does not tell the slices of a GPU apart.
    """
    uuid = unit.get('mig_uuid')
    pci = unit.get('pci')
    listed = {m.uuid: m for m in (gpu.mig_devices if gpu else ())}
    if uuid and uuid not in listed:
        return 'MIG device %s is gone (no longer listed)' % uuid
    mig = listed.get(uuid)
    facts = (snapshot.mig.get(pci) or {}).get(mig.index if mig else None)
    if facts is None:
        found = _unaccounted(snapshot.apps_on(pci), _owners(current, pci),
                             attribute)
        if found:
            why = getattr(snapshot, 'mig_error', None) or \
                'nvidia-smi -q does not list MIG device %s' % uuid
            return ('no facts of the MIG device (%s) and compute processes '
                    '%s on its GPU, which no live instance accounts for' % (
                        why, _unaccounted_text(found)))
        return None
    apps = nvidia_smi.tenant_apps(facts.apps)
    if apps:
        return 'compute processes %s in MIG device %s' % (
            _apps_text(apps), uuid)
    over = _memory_over(state, mig_key(pci, facts.index),
                        facts.memory_used_mib, conf)
    if over:
        return ('%d MiB of memory in use in MIG device %s (baseline '
                '%d MiB)' % (over[0], uuid, over[1]))
    return None


def _held_again(state, key, unit):
    """Whether a listing showing ``unit``'s instance on it means "again".

    Not while its container is being removed (or, removed, is still
    listed a moment, as Incus does): then the listing shows the very
    container released. Yes once the removal failed
    (:meth:`.gate.GpuGate.removal_failed`) or a claim bound it again
    after the release (a migration's revert: a later ``seq``).
    """
    if not unit.get('removing'):
        return True
    bound = state['bound'].get(key) or {}
    return (bound.get('instance') == unit.get('instance') and
            (bound.get('seq') or 0) > (unit.get('seq') or 0))


def mig_replacement(unit, gpu, snapshot):
    """The MIG device now in a released slice's place, or None.

    When the operator recreates a slice (what ``doctor`` advises for one
    that stays dirty) it comes back with a new UUID in the same GPU
    instance; the old slice can only have been destroyed with no process
    left in it.
    """
    if unit.get('kind') != units.KIND_MIG or gpu is None:
        return None
    listed = {m.uuid: m for m in gpu.mig_devices}
    if not unit.get('mig_uuid') or unit['mig_uuid'] in listed:
        return None
    gi, ci = unit.get('mig_gi'), unit.get('mig_ci')
    slices = snapshot.mig.get(unit.get('pci')) or {}
    for mig in gpu.mig_devices:
        facts = slices.get(mig.index)
        here = (mig.gi if mig.gi is not None else getattr(facts, 'gi', None),
                mig.ci if mig.ci is not None else getattr(facts, 'ci', None))
        if gi is not None and ci is not None:
            if here == (gi, ci):
                return mig
        elif unit.get('mig_index') is not None and \
                mig.index == unit.get('mig_index') and \
                mig.profile == unit.get('mig_profile'):
            return mig
    return None


def verify_released(state, current, snapshot, known, now, conf,
                    only=None, mark=None, fresh=(), attribute=None):
    """Free the dirty units of ``state`` found clean; note what holds others.

    :param only: unit keys to check (None: every dirty unit).
    :param mark: ``state['seq']`` read before ``snapshot`` and ``current``
        were taken: an entry written after (a larger ``seq``) is left
        alone, as these facts are older than its release.
    :param fresh: keys written after ``mark`` from ``current`` itself
        (released before ``snapshot`` was taken): checked.
    :param attribute: see :func:`holding`.
    """
    for key in list(state['dirty']):
        if only is not None and key not in only:
            continue
        unit = state['dirty'][key]
        if mark is not None and (unit.get('seq') or 0) > mark and \
                key not in fresh:
            continue
        again = current.get(key)
        if again is not None and again.get('instance') == unit.get(
                'instance') and _held_again(state, key, unit):
            # its own instance holds it again (a migration's revert, a
            # delete that failed): bound, not free; and recorded bound, so
            # that its container removed later is seen leaving
            del state['dirty'][key]
            state['bound'][key] = dict(again, since=now, last_busy=now,
                                       seq=gate_state.next_seq(state))
            continue
        replaced = mig_replacement(unit, known.get(unit.get('pci')),
                                   snapshot)
        if replaced is not None:
            del state['dirty'][key]
            gate_state.add_event(state, 'replaced', unit.get('pci'),
                                 'MIG device recreated as %s' % replaced.uuid,
                                 now, unit=key)
            LOG.info('%(unit)s of GPU %(pci)s was recreated as MIG device '
                     '%(new)s in the same place: the old entry is dropped',
                     {'unit': key, 'pci': unit.get('pci'),
                      'new': replaced.uuid})
            continue
        held_by = None if not verifying(conf) else holding(
            unit, snapshot, known, state, conf, current, attribute)
        if held_by is None and again is not None:
            held_by = 'bound to instance %s while not verified clean' % (
                again.get('instance'))
        if held_by is None:
            del state['dirty'][key]
            waited = max(0.0, now - (unit.get('since') or now))
            gate_state.add_event(state, 'clean', unit.get('pci'),
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


def _gone_bound(state, records):
    """Units recorded bound to a container absent from ``records``."""
    if records is None:
        return {}
    alive = {r.get('name') for r in records}
    return {key: unit for key, unit in state['bound'].items()
            if unit.get('container') not in alive and
            not gate_state.stale_binding(state, key, unit.get('container'),
                                         unit.get('seq'))}


def unavailable(state, records=None):
    """Unit key -> why no claim may pick it.

    In the :func:`.units.held_units` format: the dirty units, and the
    units recorded bound to a container the claim's own listing
    (``records``) no longer shows (removed behind nova's back, not yet
    verified).
    """
    out = {key: ['instance %s, released but not verified clean (%s)'
                 % (unit.get('instance'), unit.get('holding'))]
           for key, unit in state['dirty'].items()}
    for key, unit in _gone_bound(state, records).items():
        out.setdefault(key, []).append(
            'container %s of instance %s is gone; not yet verified clean'
            % (unit.get('container'), unit.get('instance')))
    return out


def dirty_share_projects(state, records=None):
    """Shared GPU PCI address -> the projects of its unavailable slots.

    A card with a slot not yet verified clean takes no tenant of another
    project (a leftover could hold that project's data); an unknown
    project blocks every other one.
    """
    out = {}
    entries = list(state['dirty'].values()) + list(
        _gone_bound(state, records).values())
    for unit in entries:
        if unit.get('kind') == units.KIND_SHARE:
            out.setdefault(unit.get('pci'), set()).add(
                unit.get('project') or 'an unknown project')
    return out


def next_recheck_interval(interval, freed, conf):
    """The re-check's next wait, in seconds.

    Back to ``release_recheck_interval`` after a unit turned clean (or a
    new one was released), else doubled up to
    ``release_recheck_max_interval``: a unit held for hours is not probed
    every second, one that frees soon is seen soon.
    """
    group = conf.lxd_accelerators
    start = group.release_recheck_interval
    if freed or interval is None:
        return start
    return min(max(interval * 2, start),
               max(group.release_recheck_max_interval, start))
