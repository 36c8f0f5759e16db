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

"""The accelerator units of a host and who holds them, read from LXD records.

A unit is what one claim can take: a whole GPU (``pci:<address>``), a MIG
device (``mig:<uuid>`` or ``mig:<gpu pci>/<gi>/<ci>``), a slot of a shared
GPU (``share:<pci>/<slot>``), an InfiniBand VF or port (``netdev:<name>``).
LXD's instance configs are the one source of truth for who holds what:
:func:`held_units` reads every unit an instance's binding record and
devices (those from profiles included) pin.
"""

import json

import os_resource_classes as orc

from nova_lxd_accel.accel import devices
from nova_lxd_accel.container import identity
from nova_lxd_accel import placement_names

KIND_PGPU = 'pgpu'
KIND_MIG = 'mig'
KIND_IB_VF = 'ib_vf'
KIND_IB_PORT = 'ib_port'
KIND_SHARE = 'gpu_share'


#: Resource classes only this driver's child providers offer (a shared
#: GPU's CUSTOM_GPU_MEMORY_MB is counted by Placement, not bound).
ACCEL_CLASSES = (orc.PGPU, orc.VGPU, placement_names.RC_INFINIBAND_VF,
                 placement_names.RC_INFINIBAND_PORT, placement_names.SHARE_RC)
MIG_PREFIX = 'CUSTOM_MIG_'


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
    host_devices = devices.physical_devices(host_devices)
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
    """Card PCI address -> the project ids of the instances sharing it.

    The cards are shared GPUs (their slots) and InfiniBand cards (their
    virtual functions); a unit recorded before its project was recorded
    counts no project.

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
            if unit.get('kind') in (KIND_SHARE, KIND_IB_VF) and \
                    unit.get('pci'):
                out.setdefault(unit['pci'], set()).add(
                    unit.get('project_id'))
    return out


def holders_of(held, key):
    """Who holds unit ``key`` in a :func:`held_units` map."""
    return _holders(held, key)


def _holders(held, key):
    # 'pci:*': a gpu device that takes every GPU, MIG devices included
    return held.get(key) or held.get(
        'pci:*' if key.startswith(('pci:', 'mig:')) else None) or []


def provider_units(device, ib_ports=False):
    """Resource class -> unit keys a device offers, in binding order.

    :param ib_ports: whole InfiniBand ports offered
        (``[lxd_accelerators] report_infiniband_ports``); when False an
        InfiniBand card without VFs offers nothing.
    """
    out = {}
    if isinstance(device, devices.GpuPool):
        out[orc.PGPU] = ['pci:' + g.pci_address for g in device.gpus]
    elif isinstance(device, devices.Gpu):
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
        elif ib_ports:
            out[placement_names.RC_INFINIBAND_PORT] = [
                'netdev:' + p.netdev for p in device.ports if p.netdev]
    return out
