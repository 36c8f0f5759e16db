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

"""Pure binding: Placement allocations -> the exact LXD devices to add.

Placement says *how many* units of which resource class an instance holds
on which child provider; this module picks *which* units (a GPU's PCI
address, a MIG device, an InfiniBand netdev), skipping the units other
containers already hold, and returns the LXD device dicts pinned to them
plus a compact record of the choice.

The record is written into the container's own config under
:data:`.container.identity.KEY_DEVICES` (JSON), so LXD's instance configs are
the one source of truth for who holds what: a restarted nova-compute reads them
back with :func:`held_units` (see :mod:`.reconcile`). Units
held by containers the driver did not make are found from their devices.

What a container can take (LXD 5.0 ``lxd/device/gpu_physical.go``,
``gpu_mig.go``, ``infiniband_physical.go``):

* whole GPU: ``gpu gputype=physical pci=<address>`` (matched against
  ``/1.0/resources`` cards; never a bare ``gpu`` device, which passes every
  GPU of the host);
* MIG device: ``gpu gputype=mig pci=<gpu> mig.uuid=<uuid>`` (or
  ``mig.gi``/``mig.ci`` for legacy drivers) with ``nvidia.runtime=true``;
* InfiniBand VF or port: ``infiniband nictype=physical parent=<netdev>``.

On a daemon with the ``gpu_cdi`` extension NVIDIA GPUs and MIG devices are
bound by CDI id instead (``id=nvidia.com/gpu=GPU-<uuid>``, ...), without
``nvidia.runtime``: see :mod:`.cdi`. The unit keys stay the same.

A GPU's SR-IOV virtual function cannot be given to a container: LXD lists
GPU VFs under their card's ``sriov.vfs`` only, ``gputype=physical`` matches
cards, and ``gputype=sriov`` is VM-only. Discovery therefore never reports
``VGPU``, and a ``VGPU`` allocation is refused here with a clear error.
"""

import dataclasses
import typing

import os_resource_classes as orc
from oslo_log import log as logging

from nova_lxd_accel.accel.binding import binding_record
from nova_lxd_accel.accel.binding import card_choice
from nova_lxd_accel.accel.binding import cdi
from nova_lxd_accel.accel.binding import sharing
from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel import units
from nova_lxd_accel.container import identity
from nova_lxd_accel import exception
from nova_lxd_accel import placement_names

LOG = logging.getLogger(__name__)

_NAME_PREFIX = {units.KIND_PGPU: identity.GPU_DEVICE_PREFIX,
                units.KIND_MIG: identity.MIG_DEVICE_PREFIX,
                units.KIND_IB_VF: identity.IB_DEVICE_PREFIX,
                units.KIND_IB_PORT: identity.IB_DEVICE_PREFIX,
                units.KIND_SHARE: identity.SHARE_DEVICE_PREFIX}


@dataclasses.dataclass(frozen=True)
class ShareRequest:
    """What a claim on a shared GPU needs besides the allocation.

    :ivar project_id: the instance's project.
    :ivar any_project: ``[lxd_accelerators] shared_gpu_any_project``.
    :ivar vf_any_project: ``[lxd_accelerators] infiniband_vf_any_project``.
    :ivar projects: :func:`share_projects` of the other instances.
    :ivar memory_mb: ``lxd:gpu_memory_mb`` of the flavor, or None.
    :ivar compute_percent: ``lxd:gpu_compute_percent``, or None.
    :ivar mps_pipe: ``[lxd_accelerators] mps_pipe_directory``.
    :ivar mps_shm: ``[lxd_accelerators] mps_shm_directory``.
    :ivar shared_gpus: ``[lxd_accelerators] shared_gpus`` (card modes).
    :ivar flavor: the flavor's name, for the fault.
    """

    project_id: typing.Optional[str] = None
    any_project: bool = False
    vf_any_project: bool = False
    projects: typing.Dict[str, set] = dataclasses.field(default_factory=dict)
    memory_mb: typing.Optional[int] = None
    compute_percent: typing.Optional[int] = None
    mps_pipe: str = '/run/nvidia-mps-{pci}'
    mps_shm: str = '/run/nvidia-mps-{pci}-shm'
    shared_gpus: typing.Tuple[str, ...] = ()
    flavor: typing.Optional[str] = None


def _free(candidates, held):
    """``(free (key, item) pairs, busy descriptions)`` of ``candidates``."""
    free, busy = [], []
    for key, item in candidates:
        holders = units.holders_of(held, key)
        if holders:
            busy.append('%s (held by %s)' % (key, ', '.join(sorted(holders))))
        else:
            free.append((key, item))
    return free, busy


def _pick(candidates, count, held, rc, rp_uuid, device):
    """The first ``count`` free ``(key, item)`` pairs, else raise."""
    free, busy = _free(candidates, held)
    _check_enough(free, busy, count, rc, rp_uuid, device)
    return free[:count]


def _check_enough(free, busy, count, rc, rp_uuid, device):
    if len(free) < count:
        # Who holds the units (other projects' containers, instances) is
        # for the operator's log, never for the user's fault.
        LOG.warning('Cannot bind %(count)s %(rc)s of resource provider '
                    '%(rp)s (%(device)s): held: %(held)s',
                    {'count': count, 'rc': rc, 'rp': rp_uuid,
                     'device': device.pci_address,
                     'held': '; '.join(busy) or 'nothing'})
        raise exception.AcceleratorUnavailable(
            count=count, resource_class=rc, provider=rp_uuid,
            device='%s at %s' % (type(device).__name__, device.pci_address),
            free=len(free), held=_held_count(busy))


def _held_count(busy):
    """What a user's fault says of the busy units: how many, not whose."""
    if not busy:
        return 'nothing'
    return '%d unit(s), by other instances or not yet verified clean' % (
        len(busy))


def _pgpu_device(gpu, nvidia):
    """The LXD device and record detail for one whole GPU."""
    cdi_id = nvidia.cdi and gpu.is_nvidia and cdi.gpu_id(gpu.nvidia_uuid)
    if cdi_id:
        return ({'type': 'gpu', 'gputype': 'physical', 'id': cdi_id},
                {'cdi_id': cdi_id})
    return {'type': 'gpu', 'gputype': 'physical', 'pci': gpu.pci_address}, {}


def _mig_device(gpu, mig, rc, rp_uuid, nvidia):
    """The LXD device and record detail for one MIG device."""
    detail = {'mig_uuid': mig.uuid, 'mig_profile': mig.profile}
    if nvidia.cdi:
        try:
            device = cdi.mig_device(mig.uuid, nvidia)
        except ValueError as exc:
            raise exception.AcceleratorNotBindable(
                resource_class=rc, provider=rp_uuid, reason=str(exc))
        return device, dict(detail, cdi_id=device['id'])
    device = {'type': 'gpu', 'gputype': 'mig', 'pci': gpu.pci_address}
    if mig.gi is not None and mig.ci is not None:
        device['mig.gi'] = str(mig.gi)
        device['mig.ci'] = str(mig.ci)
    else:
        device['mig.uuid'] = mig.uuid
    return device, detail


def _blocked_by_card(held, gpu, candidates):
    """``held`` with the card's own holders on each of its ``candidates``."""
    blockers = units.holders_of(held, 'pci:' + gpu.pci_address)
    if not blockers:
        return held
    held = dict(held)
    for key, _ in candidates:
        held.setdefault(key, blockers)
    return held


def _share_units(gpu, rc, count, rp_uuid, held, share):
    """Slots of a shared GPU: pinned by PCI address, one project at a time.

    Anything else holding the GPU itself (a foreign container's ``gpu``
    device matching it) leaves no slot free.
    """
    share = share or ShareRequest()
    sharing.check_mode(share.shared_gpus, gpu, share.memory_mb,
                       share.flavor, rp_uuid)
    others = {p for p in share.projects.get(gpu.pci_address, ()) if p}
    # A quota instance mounts the MPS daemon's /dev/shm and pipe directory
    # read-write: the same host directories for every instance on the
    # card, so any_project never extends to it.
    uses_mps = (share.memory_mb is not None
                or share.compute_percent is not None)
    if others and others != {share.project_id} and (
            uses_mps or not share.any_project):
        LOG.warning('Shared GPU %(pci)s serves project(s) %(projects)s: '
                    'not bound for project %(project)s%(why)s',
                    {'pci': gpu.pci_address,
                     'projects': ', '.join(sorted(others)),
                     'project': share.project_id,
                     'why': ' (a quota instance shares the MPS daemon\'s '
                            'memory: never across projects)'
                     if uses_mps and share.any_project else ''})
        error = (exception.SharedGpuMpsOtherProject if uses_mps
                 else exception.SharedGpuOtherProject)
        raise error(pci=gpu.pci_address, provider=rp_uuid)
    candidates = [(units.share_key(gpu.pci_address, slot), slot)
                  for slot in range(gpu.shared_slots)]
    held = _blocked_by_card(held, gpu, candidates)
    out = []
    for key, slot in _pick(candidates, count, held, rc, rp_uuid, gpu):
        detail = {'slot': slot, 'project_id': share.project_id}
        if share.memory_mb is not None or share.compute_percent is not None:
            detail.update(mps_pipe=share.mps_pipe, mps_shm=share.mps_shm,
                          gpu_memory_mb=share.memory_mb,
                          gpu_compute_percent=share.compute_percent)
        out.append((units.KIND_SHARE, key, {
            'type': 'gpu', 'gputype': 'physical', 'pci': gpu.pci_address},
            detail))
    return out


def _gpu_units(gpu, rc, count, rp_uuid, held, nvidia=cdi.RUNTIME,
               share=None):
    if rc == placement_names.SHARE_RC:
        if not gpu.shared_slots:
            raise exception.AcceleratorNotBindable(
                resource_class=rc, provider=rp_uuid,
                reason='GPU %s is not shared' % gpu.pci_address)
        return _share_units(gpu, rc, count, rp_uuid, held, share)
    if gpu.shared_slots:
        raise exception.AcceleratorNotBindable(
            resource_class=rc, provider=rp_uuid,
            reason='GPU %s is shared: it is offered only as %s'
                   % (gpu.pci_address, placement_names.SHARE_RC))
    if rc == orc.PGPU:
        if gpu.mig_devices:
            raise exception.AcceleratorNotBindable(
                resource_class=rc, provider=rp_uuid,
                reason='GPU %s is split into MIG devices' % gpu.pci_address)
        picked = _pick([('pci:' + gpu.pci_address, gpu)], count, held, rc,
                       rp_uuid, gpu)
        return [(units.KIND_PGPU, key) + _pgpu_device(gpu, nvidia)
                for key, _ in picked]
    if rc == orc.VGPU:
        raise exception.AcceleratorNotBindable(
            resource_class=rc, provider=rp_uuid,
            reason='LXD containers cannot take an SR-IOV virtual function '
                   'of a GPU (gputype=sriov is VM-only)')
    if rc.startswith(units.MIG_PREFIX):
        migs = sorted((m for m in gpu.mig_devices
                       if m.resource_class == rc), key=lambda m: m.index)
        candidates = [(units.mig_unit_key(gpu, m), m) for m in migs]
        # whatever holds the card itself (a hold of the state file, a
        # container given the whole card) holds every slice of it
        held = _blocked_by_card(held, gpu, candidates)
        picked = _pick(candidates, count, held, rc, rp_uuid, gpu)
        return [(units.KIND_MIG, key) +
                _mig_device(gpu, mig, rc, rp_uuid, nvidia)
                for key, mig in picked]
    raise exception.AcceleratorNotBindable(
        resource_class=rc, provider=rp_uuid,
        reason='GPU %s offers no such resource class' % gpu.pci_address)


def _pool_units(pool, rc, count, rp_uuid, held, nvidia=cdi.RUNTIME):
    """``count`` free cards of a pool of whole GPUs, chosen by topology.

    Never a card anything holds, a dirty one or one an operator or the
    health check holds (all in ``held``); of the free ones
    :func:`.card_choice.choose` takes one NUMA node when they fit there,
    then NVLink peers, then PCIe neighbours.
    """
    if rc != orc.PGPU:
        raise exception.AcceleratorNotBindable(
            resource_class=rc, provider=rp_uuid,
            reason='a pool of whole GPUs offers only %s' % orc.PGPU)
    free, busy = _free([('pci:' + g.pci_address, g) for g in pool.gpus],
                       held)
    _check_enough(free, busy, count, rc, rp_uuid, pool)
    chosen = card_choice.choose([gpu for _, gpu in free], count, pool.links)
    LOG.info('Picked GPU(s) %(cards)s of %(count)d free in provider '
             '%(rp)s: %(why)s',
             {'cards': ', '.join(g.pci_address for g in chosen),
              'count': len(free), 'rp': rp_uuid,
              'why': card_choice.describe(chosen, pool.links)})
    return [(units.KIND_PGPU, 'pci:' + gpu.pci_address) +
            _pgpu_device(gpu, nvidia) for gpu in chosen]


def _check_vf_project(card, rp_uuid, share):
    """Refuse a card whose VFs serve another project (unless allowed)."""
    if share is None or share.vf_any_project:
        return
    others = {p for p in share.projects.get(card.pci_address, ()) if p}
    if others and others != {share.project_id}:
        LOG.warning('The InfiniBand VFs of card %(pci)s serve project(s) '
                    '%(projects)s: not bound for project %(project)s',
                    {'pci': card.pci_address,
                     'projects': ', '.join(sorted(others)),
                     'project': share.project_id})
        raise exception.InfinibandCardOtherProject(
            pci=card.pci_address, provider=rp_uuid)


def _ib_units(card, rc, count, rp_uuid, held, ib_ports=False, share=None):
    if rc not in units.provider_units(card, ib_ports=ib_ports):
        if rc == placement_names.RC_INFINIBAND_PORT and not ib_ports:
            # a port passes issm and umad: its holder can be a subnet
            # manager; an allocation from before the option was turned
            # off, or made by hand, gets nothing
            raise exception.AcceleratorNotBindable(
                resource_class=rc, provider=rp_uuid,
                reason='whole InfiniBand ports are not offered on this '
                       'host ([lxd_accelerators] report_infiniband_ports '
                       'is false)')
        raise exception.AcceleratorNotBindable(
            resource_class=rc, provider=rp_uuid,
            reason='InfiniBand card %s offers no such resource class'
                   % card.pci_address)
    if rc == placement_names.RC_INFINIBAND_VF:
        candidates = [('netdev:' + vf.netdevs[0], vf) for vf in card.vfs
                      if vf.netdevs]
        kind = units.KIND_IB_VF
        _check_vf_project(card, rp_uuid, share)
        others = units.unspecified_vfs(held, card)
        if others:
            # as many VFs as sriov devices of the card's ports elsewhere
            # are not offered: the last free ones, so the count is right
            held = dict(held)
            free = [k for k, _ in candidates if not units.holders_of(held, k)]
            for key, holder in zip(reversed(free), others):
                held[key] = ['%s (nictype=sriov)' % holder]
    elif rc == placement_names.RC_INFINIBAND_PORT:
        candidates = [('netdev:' + p.netdev, p) for p in card.ports
                      if p.netdev]
        kind = units.KIND_IB_PORT
    else:
        raise exception.AcceleratorNotBindable(
            resource_class=rc, provider=rp_uuid,
            reason='InfiniBand card %s offers no such resource class'
                   % card.pci_address)
    out = []
    for key, item in _pick(candidates, count, held, rc, rp_uuid, card):
        parent = key.split(':', 1)[1]
        detail = {'netdev': parent}
        if kind == units.KIND_IB_VF:
            detail['vf_pci'] = item.pci_address
            if share is not None:
                detail['project_id'] = share.project_id
        out.append((kind, key, {'type': 'infiniband',
                                'nictype': 'physical', 'parent': parent},
                    detail))
    return out


def bind(allocations, device_for_provider, held=None, nvidia=None,
         share=None, ib_ports=False):
    """Choose free units for every accelerator resource in ``allocations``.

    :param allocations: nova's spawn ``allocations``:
        ``{rp_uuid: {'resources': {rc: amount}}}``.
    :param device_for_provider: callable(rp_uuid) -> the
        :class:`devices.Gpu` / :class:`devices.IbCard` last reported there,
        or None (the root provider, or a provider this host does not know).
    :param held: unit key -> holders, from :func:`held_units`.
    :param nvidia: :class:`.cdi.NvidiaBinding`: by CDI id or with
        ``nvidia.runtime`` (the default), as the claim found the daemon
        (:func:`.cdi.for_client`).
    :param share: a :class:`ShareRequest`: the instance's project and the
        projects on each shared GPU and InfiniBand card.
    :param ib_ports: whole InfiniBand ports may be bound
        (``[lxd_accelerators] report_infiniband_ports``); when False a
        ``CUSTOM_INFINIBAND_PORT`` allocation is refused.
    :returns: a :class:`Binding`.
    :raises: AcceleratorUnavailable when too few units are free;
        AcceleratorNotBindable when an allocation cannot be honoured.
    """
    held = dict(held or {})
    nvidia = nvidia or cdi.RUNTIME
    counters = {}
    bound = []
    for rp_uuid in sorted(allocations or {}):
        resources = (allocations[rp_uuid] or {}).get('resources') or {}
        wanted = {rc: n for rc, n in resources.items()
                  if n and units.is_accelerator_class(rc)}
        if not wanted:
            continue
        device = device_for_provider(rp_uuid)
        for rc in sorted(wanted):
            if isinstance(device, devices.GpuPool):
                picked = _pool_units(device, rc, wanted[rc], rp_uuid, held,
                                     nvidia)
            elif isinstance(device, devices.Gpu):
                picked = _gpu_units(device, rc, wanted[rc], rp_uuid, held,
                                    nvidia, share)
            elif isinstance(device, devices.IbCard):
                picked = _ib_units(device, rc, wanted[rc], rp_uuid, held,
                                   ib_ports, share)
            else:
                raise exception.AcceleratorNotBindable(
                    resource_class=rc, provider=rp_uuid,
                    reason='this compute host reports no device under that '
                           'provider (its inventory may be stale; it is '
                           'refreshed by the update_available_resource '
                           'periodic task)')
            for kind, key, lxd_device, detail in picked:
                prefix = _NAME_PREFIX[kind]
                index = counters.get(prefix, 0)
                counters[prefix] = index + 1
                bound.append(binding_record.Unit(
                    name='%s%d' % (prefix, index), kind=kind,
                    resource_class=rc, provider=rp_uuid,
                    device_pci=_card_of(device, key), key=key,
                    device=lxd_device, detail=detail))
                # a unit is never given twice within one request either
                held[key] = ['(this request)']
    return binding_record.Binding(units=tuple(bound), nvidia=nvidia)


def _card_of(device, key):
    """The PCI address of the card a unit ``key`` of ``device`` is on."""
    if isinstance(device, devices.GpuPool):
        return key.split(':', 1)[1]
    return device.pci_address
