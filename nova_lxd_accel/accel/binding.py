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
:data:`.spec.identity.KEY_DEVICES` (JSON), so LXD's instance configs are
the one source of truth for who holds what: a restarted nova-compute reads them
back with :func:`held_units` (see :mod:`nova_lxd_accel.accel.reconcile`). Units
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
import json
import typing

import os_resource_classes as orc

from nova_lxd_accel.accel import cdi
from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel import placement_names
from nova_lxd_accel.accel import sharing
from nova_lxd_accel import exception
from nova_lxd_accel.spec import identity

KIND_PGPU = 'pgpu'
KIND_MIG = 'mig'
KIND_IB_VF = 'ib_vf'
KIND_IB_PORT = 'ib_port'
KIND_SHARE = 'gpu_share'

_NAME_PREFIX = {KIND_PGPU: identity.GPU_DEVICE_PREFIX,
                KIND_MIG: identity.MIG_DEVICE_PREFIX,
                KIND_IB_VF: identity.IB_DEVICE_PREFIX,
                KIND_IB_PORT: identity.IB_DEVICE_PREFIX,
                KIND_SHARE: identity.SHARE_DEVICE_PREFIX}

#: Resource classes only this driver's child providers offer (a shared
#: GPU's CUSTOM_GPU_MEMORY_MB is counted by Placement, not bound).
ACCEL_CLASSES = (orc.PGPU, orc.VGPU, placement_names.RC_INFINIBAND_VF,
                 placement_names.RC_INFINIBAND_PORT, placement_names.SHARE_RC)
MIG_PREFIX = 'CUSTOM_MIG_'


@dataclasses.dataclass(frozen=True)
class Unit:
    """One bound unit: what the container got and where it came from.

    :ivar key: the unit's identity on the host (``pci:<address>``,
        ``mig:<uuid>`` or ``mig:<gpu pci>/<gi>/<ci>``, ``netdev:<name>``),
        unique across all units of the host.
    """

    name: str
    kind: str
    resource_class: str
    provider: str
    device_pci: str
    key: str
    device: typing.Dict[str, str]
    detail: typing.Dict[str, str]

    def record(self):
        out = {'name': self.name, 'kind': self.kind,
               'resource_class': self.resource_class,
               'provider': self.provider, 'pci': self.device_pci,
               'unit': self.key}
        out.update(self.detail)
        return out


@dataclasses.dataclass(frozen=True)
class Binding:
    units: typing.Tuple[Unit, ...] = ()
    #: how NVIDIA devices were bound (see :mod:`.cdi`)
    nvidia: cdi.NvidiaBinding = cdi.RUNTIME

    @property
    def devices(self):
        """LXD device name -> device dict, for the container."""
        out = {u.name: dict(u.device) for u in self.units}
        out.update(self._mps()[0])
        return out

    def _mps(self):
        """(devices, config) of the MPS quota of a shared GPU, if any."""
        for unit in self.units:
            if unit.kind == KIND_SHARE and unit.detail.get('mps_pipe'):
                devs, config = sharing.lxd_config(
                    unit.device_pci, unit.detail.get('gpu_memory_mb'),
                    unit.detail.get('gpu_compute_percent'),
                    pipe_template=unit.detail['mps_pipe'],
                    shm_template=unit.detail.get(
                        'mps_shm', '/run/nvidia-mps-{pci}-shm'))
                return ({k: v for k, v in devs.items()
                         if v.get('type') != 'gpu'}, config)
        return {}, {}

    @property
    def config(self):
        """Container config the binding needs (record, NVIDIA runtime)."""
        if not self.units:
            return {}
        config = {identity.KEY_DEVICES: json.dumps(
            [u.record() for u in self.units], sort_keys=True)}
        if any(u.detail.get('cdi_id') for u in self.units):
            # LXD refuses a CDI id while any nvidia.* option is true (a
            # flavor's lxd:gpu_runtime); CDI brings the user space itself.
            config['nvidia.runtime'] = 'false'
        elif any(u.kind == KIND_MIG for u in self.units):
            # LXD refuses to start a MIG device without it.
            config['nvidia.runtime'] = 'true'
        config.update(self._mps()[1])
        return config

    def records(self):
        return [u.record() for u in self.units]


def is_accelerator_class(resource_class):
    return (resource_class in ACCEL_CLASSES or
            resource_class.startswith(MIG_PREFIX))


def _mig_key(uuid=None, pci=None, gi=None, ci=None):
    if uuid:
        text = str(uuid).strip().lower()
        if text.startswith('mig-gpu-') or '/' in text:
            return 'mig:' + text
        if text.startswith('mig-'):
            text = text[4:]
        return 'mig:' + text
    return 'mig:%s/%s/%s' % (devices.normalise_pci_address(pci), gi, ci)


def mig_unit_key(gpu, mig):
    if mig.gi is not None and mig.ci is not None:
        return _mig_key(pci=gpu.pci_address, gi=mig.gi, ci=mig.ci)
    return _mig_key(uuid=mig.uuid)


def _gpu_index(gpus):
    """nvidia-smi index -> GPU: NVIDIA GPUs in PCI order (its default)."""
    nvidia = sorted((g for g in gpus if g.is_nvidia),
                    key=lambda g: g.pci_address)
    return dict(enumerate(nvidia))


def _whole_gpu_keys(gpu):
    """A whole GPU holds the GPU and every MIG device on it."""
    return {'pci:' + gpu.pci_address} | {mig_unit_key(gpu, m)
                                         for m in gpu.mig_devices}


def _mig_by_uuid(gpus, uuid):
    wanted = _mig_key(uuid=uuid)
    for gpu in gpus:
        for mig in gpu.mig_devices:
            if _mig_key(uuid=mig.uuid) == wanted:
                return mig_unit_key(gpu, mig)
    return wanted


def _cdi_keys(cdi, gpus):
    """Units a CDI id (``nvidia.com/gpu=<all|N|N:M|uuid>``) names."""
    selector = cdi.split('=', 1)[1].strip() if '=' in cdi else ''
    if not gpus:
        # nothing to resolve against: only "all" is known to take them
        return {'pci:*'} if selector in ('all', '') else set()
    by_index = _gpu_index(gpus)
    if selector == 'all' or not selector:
        return set().union(*[_whole_gpu_keys(g) for g in gpus
                             if g.is_nvidia]) or {'pci:*'}
    if selector.isdigit() and int(selector) in by_index:
        return _whole_gpu_keys(by_index[int(selector)])
    if ':' in selector:
        gpu_n, _, mig_n = selector.partition(':')
        gpu = by_index.get(int(gpu_n)) if gpu_n.isdigit() else None
        if gpu is not None and mig_n.isdigit():
            for mig in gpu.mig_devices:
                if mig.index == int(mig_n):
                    return {mig_unit_key(gpu, mig)}
    lowered = selector.lower()
    for gpu in gpus:
        if (gpu.nvidia_uuid or '').lower() == lowered:
            return _whole_gpu_keys(gpu)
    if lowered.startswith('mig-'):
        return {_mig_by_uuid(gpus, selector)}
    # unknown to us: it may be any GPU
    return set().union(*[_whole_gpu_keys(g) for g in gpus]) or {'pci:*'}


def _gpu_device_keys(device, gpus):
    gputype = device.get('gputype', 'physical')
    pci = devices.normalise_pci_address(device.get('pci'))
    if gputype == 'mig':
        if device.get('id'):
            return _cdi_keys(str(device['id']), gpus)
        if device.get('mig.uuid'):
            return {_mig_by_uuid(gpus, device['mig.uuid'])}
        gi, ci = device.get('mig.gi'), device.get('mig.ci')
        if pci or not gpus:
            return {_mig_key(pci=pci, gi=gi, ci=ci)}
        # no pci: LXD takes that GPU instance of whichever GPU has it
        return {_mig_key(pci=g.pci_address, gi=gi, ci=ci) for g in gpus}
    if gputype not in ('physical', 'mdev', 'sriov'):
        return set()
    # LXD matches a gpu device against every card with all selectors
    if pci:
        matches = [g for g in gpus if g.pci_address == pci]
        if not matches:
            return {'pci:' + pci}
        return set().union(*[_whole_gpu_keys(g) for g in matches])
    card_id = str(device.get('id') or '')
    if card_id and not card_id.isdigit():
        return _cdi_keys(card_id, gpus)
    vendor = (device.get('vendorid') or '').lower()
    product = (device.get('productid') or '').lower()
    matches = [g for g in gpus
               if (not card_id or str(g.drm_id) == card_id) and
               (not vendor or (g.vendor_id or '').lower() == vendor) and
               (not product or (g.product_id or '').lower() == product)]
    if not gpus:
        return set() if (card_id or vendor or product) else {'pci:*'}
    return set().union(*[_whole_gpu_keys(g) for g in matches])


def _pci_device_keys(address, ib_cards):
    """A ``pci`` passthrough device: the card or IB VF at that address."""
    keys = {'pci:' + address}
    for card in ib_cards:
        for vf in card.vfs:
            if vf.pci_address == address and vf.netdevs:
                keys.add('netdev:' + vf.netdevs[0])
        if card.pci_address == address:
            keys |= {'netdev:' + p.netdev for p in card.ports if p.netdev}
    return keys


#: key prefix of a VF an ``nictype=sriov`` device takes from its parent
VF_OF = 'vf-of:'


def _device_id(device):
    return json.dumps(device, sort_keys=True)


def unspecified_vfs(held, card):
    """Holders of VFs of ``card`` that LXD picks itself (``nictype=sriov``).

    One entry per such device, whatever VF it ends up with.
    """
    parents = {p.netdev for p in card.ports if p.netdev}
    out = []
    for key, holders in sorted(held.items()):
        if key.startswith(VF_OF) and \
                key[len(VF_OF):].split('/', 1)[0] in parents:
            out.extend(holders)
    return out


def device_unit_keys(device, host_devices=()):
    """Unit keys an LXD device dict pins (empty for other devices).

    :param host_devices: the host's :class:`devices.Gpu` and
        :class:`devices.IbCard` objects; with them every GPU selector
        (``pci``, ``id``, ``vendorid``/``productid``, ``mig.*``, CDI ids)
        is resolved to the units it takes. Without them a ``gpu`` device
        with no ``pci``/``id``/vendor selector is reported as ``pci:*``
        (every GPU).
    """
    gpus = [d for d in host_devices if isinstance(d, devices.Gpu)]
    ib_cards = [d for d in host_devices if isinstance(d, devices.IbCard)]
    kind = device.get('type')
    if kind == 'gpu':
        return _gpu_device_keys(device, gpus)
    if kind in ('infiniband', 'nic') and \
            device.get('nictype') == 'sriov' and device.get('parent'):
        # LXD takes a free VF of that parent when the instance starts:
        # which one is not known here, so it holds one VF of the card
        return {'%s%s/%s' % (VF_OF, device['parent'], _device_id(device))}
    if kind == 'infiniband' and device.get('parent'):
        return {'netdev:' + device['parent']}
    if kind == 'nic' and device.get('nictype') == 'physical' and \
            device.get('parent'):
        return {'netdev:' + device['parent']}
    if kind == 'pci' and device.get('address'):
        address = devices.normalise_pci_address(device['address'])
        return _pci_device_keys(address, ib_cards) if address else set()
    return set()


def holder_name(record):
    """``<project>/<name>`` (``<name>`` when LXD gave no project)."""
    if record.get('project'):
        return '%s/%s' % (record['project'], record.get('name'))
    return record.get('name')


def record_unit_keys(record, host_devices=()):
    """Every unit one LXD instance record holds.

    Its binding record and all its devices, those from profiles included
    (``expanded_devices``), whatever made it and whatever its type.
    """
    units = identity.recorded_units(record.get('config'))
    keys = {r['unit'] for r in units}
    # a slot of a shared GPU holds that slot, not the whole GPU
    slots = {r.get('name') for r in units if r.get('kind') == KIND_SHARE}
    devs = dict(record.get('devices') or {})
    devs.update(record.get('expanded_devices') or {})
    for name, device in devs.items():
        if name in slots:
            continue
        keys |= device_unit_keys(device or {}, host_devices)
    return keys


def held_units(records, exclude=None, host_devices=()):
    """Unit key -> names of the instances holding it.

    :param records: LXD instance records (``config``, ``devices``, and
        ``expanded_devices`` when LXD gives them), of every project when
        listed with ``all-projects``: then holders are named
        ``<project>/<name>``.
    :param exclude: an instance to leave out (the one being bound): its
        name, or ``(project, name)``.
    :param host_devices: see :func:`device_unit_keys`.
    """
    held = {}
    for record in records:
        name = record.get('name')
        if exclude is not None and (
                exclude == name or
                exclude == (record.get('project'), name)):
            continue
        for key in record_unit_keys(record, host_devices):
            held.setdefault(key, []).append(holder_name(record))
    return held


def share_key(pci_address, slot):
    """The unit key of slot ``slot`` of the shared GPU at ``pci_address``."""
    return 'share:%s/%d' % (pci_address, slot)


def share_projects(records, exclude=None):
    """Shared GPU PCI address -> the project ids of the instances on it.

    :param exclude: as for :func:`held_units`.
    """
    out = {}
    for record in records or ():
        name = record.get('name')
        if exclude is not None and (
                exclude == name or
                exclude == (record.get('project'), name)):
            continue
        for unit in identity.recorded_units(record.get('config')):
            if unit.get('kind') == KIND_SHARE and unit.get('pci'):
                out.setdefault(unit['pci'], set()).add(
                    unit.get('project_id'))
    return out


@dataclasses.dataclass(frozen=True)
class ShareRequest:
    """What a claim on a shared GPU needs besides the allocation.

    :ivar project_id: the instance's project.
    :ivar any_project: ``[lxd_accelerators] shared_gpu_any_project``.
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
    projects: typing.Dict[str, set] = dataclasses.field(default_factory=dict)
    memory_mb: typing.Optional[int] = None
    compute_percent: typing.Optional[int] = None
    mps_pipe: str = '/run/nvidia-mps-{pci}'
    mps_shm: str = '/run/nvidia-mps-{pci}-shm'
    shared_gpus: typing.Tuple[str, ...] = ()
    flavor: typing.Optional[str] = None


def provider_units(device):
    """Resource class -> unit keys a device offers, in binding order."""
    out = {}
    if isinstance(device, devices.Gpu):
        if device.shared_slots:
            out[placement_names.SHARE_RC] = [
                share_key(device.pci_address, slot)
                for slot in range(device.shared_slots)]
        elif device.mig_devices:
            for mig in sorted(device.mig_devices, key=lambda m: m.index):
                out.setdefault(mig.resource_class, []).append(
                    mig_unit_key(device, mig))
        else:
            out[orc.PGPU] = ['pci:' + device.pci_address]
    elif isinstance(device, devices.IbCard):
        vfs = ['netdev:' + vf.netdevs[0] for vf in device.vfs if vf.netdevs]
        if vfs:
            out[placement_names.RC_INFINIBAND_VF] = vfs
        else:
            out[placement_names.RC_INFINIBAND_PORT] = [
                'netdev:' + p.netdev for p in device.ports if p.netdev]
    return out


def holders_of(held, key):
    """Who holds unit ``key`` in a :func:`held_units` map."""
    return _holders(held, key)


def _holders(held, key):
    # 'pci:*': a gpu device that takes every GPU, MIG devices included
    return held.get(key) or held.get(
        'pci:*' if key.startswith(('pci:', 'mig:')) else None) or []


def _pick(candidates, count, held, rc, rp_uuid, device):
    """The first ``count`` free ``(key, item)`` pairs, else raise."""
    free, busy = [], []
    for key, item in candidates:
        holders = _holders(held, key)
        if holders:
            busy.append('%s (held by %s)' % (key, ', '.join(sorted(holders))))
        else:
            free.append((key, item))
    if len(free) < count:
        raise exception.AcceleratorUnavailable(
            count=count, resource_class=rc, provider=rp_uuid,
            device='%s at %s' % (type(device).__name__, device.pci_address),
            free=len(free), held='; '.join(busy) or 'nothing')
    return free[:count]


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


def _share_units(gpu, rc, count, rp_uuid, held, share):
    """Slots of a shared GPU: pinned by PCI address, one project at a time.

    Anything else holding the GPU itself (a foreign container's ``gpu``
    device matching it) leaves no slot free.
    """
    share = share or ShareRequest()
    sharing.check_mode(share.shared_gpus, gpu, share.memory_mb,
                       share.flavor, rp_uuid)
    others = {p for p in share.projects.get(gpu.pci_address, ()) if p}
    if not share.any_project and others and others != {share.project_id}:
        raise exception.SharedGpuOtherProject(
            pci=gpu.pci_address, provider=rp_uuid,
            projects=', '.join(sorted(others)))
    blockers = _holders(held, 'pci:' + gpu.pci_address)
    candidates = [(share_key(gpu.pci_address, slot), slot)
                  for slot in range(gpu.shared_slots)]
    if blockers:
        held = dict(held)
        for key, _ in candidates:
            held.setdefault(key, blockers)
    out = []
    for key, slot in _pick(candidates, count, held, rc, rp_uuid, gpu):
        detail = {'slot': slot, 'project_id': share.project_id}
        if share.memory_mb is not None or share.compute_percent is not None:
            detail.update(mps_pipe=share.mps_pipe, mps_shm=share.mps_shm,
                          gpu_memory_mb=share.memory_mb,
                          gpu_compute_percent=share.compute_percent)
        out.append((KIND_SHARE, key, {'type': 'gpu', 'gputype': 'physical',
                                      'pci': gpu.pci_address}, detail))
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
        return [(KIND_PGPU, key) + _pgpu_device(gpu, nvidia)
                for key, _ in picked]
    if rc == orc.VGPU:
        raise exception.AcceleratorNotBindable(
            resource_class=rc, provider=rp_uuid,
            reason='LXD containers cannot take an SR-IOV virtual function '
                   'of a GPU (gputype=sriov is VM-only)')
    if rc.startswith(MIG_PREFIX):
        migs = sorted((m for m in gpu.mig_devices
                       if m.resource_class == rc), key=lambda m: m.index)
        picked = _pick([(mig_unit_key(gpu, m), m) for m in migs], count,
                       held, rc, rp_uuid, gpu)
        return [(KIND_MIG, key) + _mig_device(gpu, mig, rc, rp_uuid, nvidia)
                for key, mig in picked]
    raise exception.AcceleratorNotBindable(
        resource_class=rc, provider=rp_uuid,
        reason='GPU %s offers no such resource class' % gpu.pci_address)


def _ib_units(card, rc, count, rp_uuid, held):
    if rc == placement_names.RC_INFINIBAND_VF:
        candidates = [('netdev:' + vf.netdevs[0], vf) for vf in card.vfs
                      if vf.netdevs]
        kind = KIND_IB_VF
        others = unspecified_vfs(held, card)
        if others:
            # as many VFs as sriov devices of the card's ports elsewhere
            # are not offered: the last free ones, so the count is right
            held = dict(held)
            free = [k for k, _ in candidates if not _holders(held, k)]
            for key, holder in zip(reversed(free), others):
                held[key] = ['%s (nictype=sriov)' % holder]
    elif rc == placement_names.RC_INFINIBAND_PORT:
        candidates = [('netdev:' + p.netdev, p) for p in card.ports
                      if p.netdev]
        kind = KIND_IB_PORT
    else:
        raise exception.AcceleratorNotBindable(
            resource_class=rc, provider=rp_uuid,
            reason='InfiniBand card %s offers no such resource class'
                   % card.pci_address)
    out = []
    for key, item in _pick(candidates, count, held, rc, rp_uuid, card):
        parent = key.split(':', 1)[1]
        detail = {'netdev': parent}
        if kind == KIND_IB_VF:
            detail['vf_pci'] = item.pci_address
        out.append((kind, key, {'type': 'infiniband',
                                'nictype': 'physical', 'parent': parent},
                    detail))
    return out


def bind(allocations, device_for_provider, held=None, nvidia=None,
         share=None):
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
    :param share: a :class:`ShareRequest` for shared GPU slots.
    :returns: a :class:`Binding`.
    :raises: AcceleratorUnavailable when too few units are free;
        AcceleratorNotBindable when an allocation cannot be honoured.
    """
    held = dict(held or {})
    nvidia = nvidia or cdi.RUNTIME
    counters = {}
    units = []
    for rp_uuid in sorted(allocations or {}):
        resources = (allocations[rp_uuid] or {}).get('resources') or {}
        wanted = {rc: n for rc, n in resources.items()
                  if n and is_accelerator_class(rc)}
        if not wanted:
            continue
        device = device_for_provider(rp_uuid)
        for rc in sorted(wanted):
            if isinstance(device, devices.Gpu):
                picked = _gpu_units(device, rc, wanted[rc], rp_uuid, held,
                                    nvidia, share)
            elif isinstance(device, devices.IbCard):
                picked = _ib_units(device, rc, wanted[rc], rp_uuid, held)
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
                units.append(Unit(name='%s%d' % (prefix, index), kind=kind,
                                  resource_class=rc, provider=rp_uuid,
                                  device_pci=device.pci_address, key=key,
                                  device=lxd_device, detail=detail))
                # a unit is never given twice within one request either
                held[key] = ['(this request)']
    return Binding(units=tuple(units), nvidia=nvidia)


def expected_usage(records):
    """Provider uuid -> {rc: amount} the binding records account for."""
    usage = {}
    for record in records:
        per_rp = usage.setdefault(record.get('provider'), {})
        rc = record.get('resource_class')
        per_rp[rc] = per_rp.get(rc, 0) + 1
    return usage


def log_bound(log, bound, instance):
    """Log, per unit, which host device an instance was given."""
    for unit in bound.units:
        log.info('Bound %(rc)s %(unit)s of provider %(rp)s as LXD device '
                 '%(name)s', {'rc': unit.resource_class, 'unit': unit.key,
                              'rp': unit.provider, 'name': unit.name},
                 instance=instance)
