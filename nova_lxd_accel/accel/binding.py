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
:data:`DEVICES_KEY` (JSON), so LXD's instance configs are the one source
of truth for who holds what: a restarted nova-compute reads them back with
:func:`held_units` (see :mod:`nova_lxd_accel.accel.reconcile`). Units held
by containers the driver did not make are found from their devices.

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
from nova_lxd_accel.accel import provider_tree as accel_tree
from nova_lxd_accel import exception

#: Container config key holding the binding record (JSON list).
DEVICES_KEY = 'user.nova_lxd_accel.devices'

KIND_PGPU = 'pgpu'
KIND_MIG = 'mig'
KIND_IB_VF = 'ib_vf'
KIND_IB_PORT = 'ib_port'

_NAME_PREFIX = {KIND_PGPU: 'nova-gpu', KIND_MIG: 'nova-mig',
                KIND_IB_VF: 'nova-ib', KIND_IB_PORT: 'nova-ib'}

#: Resource classes only this driver's child providers offer.
ACCEL_CLASSES = (orc.PGPU, orc.VGPU, accel_tree.RC_INFINIBAND_VF,
                 accel_tree.RC_INFINIBAND_PORT)
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
        return {u.name: dict(u.device) for u in self.units}

    @property
    def config(self):
        """Container config the binding needs (record, NVIDIA runtime)."""
        if not self.units:
            return {}
        config = {DEVICES_KEY: json.dumps(
            [u.record() for u in self.units], sort_keys=True)}
        if any(u.detail.get('cdi_id') for u in self.units):
            # LXD refuses a CDI id while any nvidia.* option is true (a
            # flavor's lxd:gpu_runtime); CDI brings the user space itself.
            config['nvidia.runtime'] = 'false'
        elif any(u.kind == KIND_MIG for u in self.units):
            # LXD refuses to start a MIG device without it.
            config['nvidia.runtime'] = 'true'
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


def device_unit_keys(device):
    """Unit keys an LXD device dict pins (empty for other devices).

    A ``gpu`` device without ``pci``/``id``/MIG selector takes every GPU:
    it is reported as ``pci:*``.
    """
    kind = device.get('type')
    if kind == 'gpu':
        gputype = device.get('gputype', 'physical')
        if gputype == 'mig':
            if device.get('mig.uuid'):
                return {_mig_key(uuid=device['mig.uuid'])}
            return {_mig_key(pci=device.get('pci'), gi=device.get('mig.gi'),
                             ci=device.get('mig.ci'))}
        if gputype != 'physical':
            return set()
        if device.get('pci'):
            return {'pci:' + devices.normalise_pci_address(device['pci'])}
        if not (device.get('id') or device.get('vendorid') or
                device.get('productid')):
            return {'pci:*'}
        return set()
    if kind == 'infiniband' and device.get('parent'):
        return {'netdev:' + device['parent']}
    return set()


def recorded_units(config):
    """The binding record of a container config (list of dicts)."""
    raw = (config or {}).get(DEVICES_KEY)
    if not raw:
        return []
    try:
        records = json.loads(raw)
    except ValueError:
        return []
    return [r for r in records if isinstance(r, dict) and r.get('unit')]


def held_units(records, exclude=None):
    """Unit key -> names of the containers holding it.

    :param records: LXD instance records (``config``, ``devices``, and
        ``expanded_devices`` when LXD gives them).
    :param exclude: a container name to leave out (the one being bound).
    """
    held = {}
    for record in records:
        name = record.get('name')
        if name == exclude:
            continue
        keys = {r['unit'] for r in recorded_units(record.get('config'))}
        devs = record.get('expanded_devices') or record.get('devices') or {}
        for device in devs.values():
            keys |= device_unit_keys(device or {})
        for key in keys:
            held.setdefault(key, []).append(name)
    return held


def _holders(held, key):
    return held.get(key) or held.get('pci:*' if key.startswith('pci:')
                                     else None) or []


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


def _gpu_units(gpu, rc, count, rp_uuid, held, nvidia=cdi.RUNTIME):
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
    if rc == accel_tree.RC_INFINIBAND_VF:
        candidates = [('netdev:' + vf.netdevs[0], vf) for vf in card.vfs
                      if vf.netdevs]
        kind = KIND_IB_VF
    elif rc == accel_tree.RC_INFINIBAND_PORT:
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


def bind(allocations, device_for_provider, held=None, nvidia=None):
    """Choose free units for every accelerator resource in ``allocations``.

    :param allocations: nova's spawn ``allocations``:
        ``{rp_uuid: {'resources': {rc: amount}}}``.
    :param device_for_provider: callable(rp_uuid) -> the
        :class:`devices.Gpu` / :class:`devices.IbCard` last reported there,
        or None (the root provider, or a provider this host does not know).
    :param held: unit key -> holders, from :func:`held_units`.
    :param nvidia: :class:`.cdi.NvidiaBinding`: by CDI id or with
        ``nvidia.runtime``; default: the mode nova-compute chose for its
        daemon at start (:func:`.cdi.host_mode`).
    :returns: a :class:`Binding`.
    :raises: AcceleratorUnavailable when too few units are free;
        AcceleratorNotBindable when an allocation cannot be honoured.
    """
    held = dict(held or {})
    nvidia = nvidia or cdi.host_mode()
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
                                    nvidia)
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
