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

"""Devices -> nested resource providers, and applying them to a tree.

:func:`desired_providers` is pure: it names one child provider per pool of
identical whole GPUs (``<nodename>_gpu_pool_<vendor>_<product>``), per
other GPU (MIG or shared: ``<nodename>_gpu_<pci>``) and per InfiniBand card
(``<nodename>_ib_<pci>``) and gives its inventory and traits.
:class:`TreeState` applies that to nova's
:class:`nova.compute.provider_tree.ProviderTree`, touching only the
children it owns, keeping operator traits, and handling devices that
disappeared (deleted when unused, kept with ``reserved = total`` when in
use). Only the ``ProviderTree`` methods whose cost does not grow with the
number of providers are used per provider, so one update stays linear.
"""

import dataclasses
import re
import typing

import os_resource_classes as orc
import os_traits
from oslo_log import log as logging

from nova_lxd_accel.accel import devices
from nova_lxd_accel import placement_names

LOG = logging.getLogger(__name__)


_CUDA_CC = re.compile(r'^\s*(\d+)\.(\d+)\s*$')


@dataclasses.dataclass(frozen=True)
class DesiredProvider:
    """A child provider as discovery says it should be."""

    name: str
    #: resource class -> full inventory record
    inventory: typing.Dict[str, dict]
    traits: typing.FrozenSet[str]
    device: object


def gpu_provider_name(nodename, pci_address):
    return '%s_gpu_%s' % (nodename, devices.pci_slug(pci_address))


def gpu_pool_name(nodename, slug):
    """``<nodename>_gpu_pool_<slug>``: a pool of identical whole GPUs."""
    return '%s_gpu_pool_%s' % (nodename, slug)


def ib_provider_name(nodename, pci_address):
    return '%s_ib_%s' % (nodename, devices.pci_slug(pci_address))


def owned_prefixes(nodename):
    return ('%s_gpu_' % nodename, '%s_ib_' % nodename)


def inventory_record(total, reserved=0):
    return {'total': total, 'reserved': reserved, 'min_unit': 1,
            'max_unit': total, 'step_size': 1, 'allocation_ratio': 1.0}


def gpu_totals(gpu):
    """Resource class -> total for one GPU (MIG devices > whole GPU).

    Only what a container can be given is reported. A GPU's SR-IOV
    virtual functions are not: LXD lists them under their card's
    ``sriov.vfs``, a container's ``gputype=physical`` device matches cards
    only and ``gputype=sriov`` is VM-only, so ``VGPU`` could never be bound
    (see :mod:`.binding.pick`); such a GPU is offered whole.
    """
    if gpu.shared_slots:
        # no memory inventory while the card's memory is unknown: then a
        # flavor with a memory quota finds no room here (never over-commit)
        totals = {placement_names.SHARE_RC: gpu.shared_slots}
        if gpu.memory_mib:
            totals[placement_names.MEMORY_RC] = gpu.memory_mib
        return totals
    if gpu.mig_devices:
        totals = {}
        for mig in gpu.mig_devices:
            rc = mig.resource_class
            totals[rc] = totals.get(rc, 0) + 1
        return totals
    return {orc.PGPU: 1}


def _vendor_traits(prefix, vendor_id, product_id):
    if not vendor_id:
        return set()
    vid = devices.normalise_name(vendor_id)
    traits = {'CUSTOM_%s_VENDOR_%s' % (prefix, vid)}
    if product_id:
        traits.add('CUSTOM_%s_PRODUCT_%s_%s' % (
            prefix, vid, devices.normalise_name(product_id)))
    return traits


def gpu_traits(gpu, sharing_trait=None):
    """The traits of a GPU's provider.

    :param sharing_trait: for a shared GPU, the trait of its sharing mode
        (:data:`TRAIT_SHARING_QUOTA` or :data:`TRAIT_SHARING_TIMESLICE`).
    """
    traits = {os_traits.OWNER_NOVA}
    traits |= _vendor_traits('GPU', gpu.vendor_id, gpu.product_id)
    model = devices.normalise_name(gpu.model) if gpu.model else ''
    if model:
        traits.add('CUSTOM_GPU_MODEL_%s' % model)
    if gpu.shared_slots:
        traits.add(placement_names.TRAIT_SHARED)
        if sharing_trait:
            traits.add(sharing_trait)
    match = _CUDA_CC.match(gpu.architecture or '')
    if match:
        traits.add('CUSTOM_CUDA_CC_%s_%s' % (int(match.group(1)),
                                             int(match.group(2))))
    return frozenset(traits)


def ib_totals(card, ports=False):
    """Bindable units of a card: VFs with a netdev, else ports with one.

    A container takes an InfiniBand device as ``infiniband
    nictype=physical parent=<netdev>``, so a VF or port without a network
    device (for instance a VF bound to vfio-pci) is not counted.

    :param ports: whether whole ports are offered
        (``[lxd_accelerators] report_infiniband_ports``): a port passes its
        ``issm`` and ``umad`` nodes, so its holder can act as a subnet
        manager. When False a card without VFs offers nothing.
    """
    vfs = [vf for vf in card.vfs if vf.netdevs]
    if vfs:
        return {placement_names.RC_INFINIBAND_VF: len(vfs)}
    if not ports:
        return {}
    return {placement_names.RC_INFINIBAND_PORT: len(
        [p for p in card.ports if p.netdev])}


def ports_not_offered(ib_cards, ports=False):
    """The cards whose ports :func:`ib_totals` leaves out: no VF, a port.

    :returns: their PCI addresses, sorted; none when ``ports`` is True.
    """
    if ports:
        return []
    return sorted(c.pci_address for c in ib_cards
                  if not any(vf.netdevs for vf in c.vfs)
                  and any(p.netdev for p in c.ports))


def ib_traits(card):
    return frozenset({os_traits.OWNER_NOVA} |
                     _vendor_traits('IB', card.vendor_id, card.product_id))


def is_poolable(gpu):
    """Whether ``gpu`` is offered whole: one ``PGPU``, nothing else."""
    return gpu_totals(gpu) == {orc.PGPU: 1}


def pool_slug(gpu):
    """A pool's name part: ``<vendor id>_<product id>`` (``10de_2330``).

    From the PCI ids LXD reports, never from what the GPU probe adds
    later (the model name): a pool's provider keeps its name, and its
    allocations, from the first update on.
    """
    return ('%s_%s' % (devices.normalise_name(gpu.vendor_id or 'unknown'),
                       devices.normalise_name(gpu.product_id or 'any'))
            ).lower()


def gpu_pools(gpus, links=None):
    """Whole GPUs of one model grouped: pool slug -> :class:`devices.GpuPool`.

    By PCI vendor and product id, which LXD always reports: cards with the
    same ids are the same model, whatever else is known of each (one may
    lack LXD's ``nvidia`` object until the probe names it). So a pool's
    name and members never change with what the probe adds later, and
    :func:`pool_traits` gives the pool everything known of any card.
    """
    groups = {}
    for gpu in sorted(gpus, key=lambda g: g.pci_address):
        groups.setdefault(pool_slug(gpu), []).append(gpu)
    return {slug: devices.GpuPool(gpus=tuple(cards), links=links)
            for slug, cards in sorted(groups.items())}


def pool_traits(pool):
    """The traits of a pool's provider: those of its cards, together."""
    return frozenset().union(*[gpu_traits(g) for g in pool.gpus])


def desired_providers(nodename, gpus, ib_cards, sharing_traits=None,
                      pool_whole_gpus=False, links=None,
                      report_infiniband_ports=False):
    """The child providers a host with these devices reports.

    :param sharing_traits: PCI address -> the sharing mode trait of each
        shared GPU (see :func:`gpu_traits`).
    :param pool_whole_gpus: identical whole GPUs in one provider each
        (:func:`gpu_pools`), else one provider per GPU.
    :param links: the host's GPU links, given to each pool.
    :param report_infiniband_ports: whole InfiniBand ports offered (see
        :func:`ib_totals`); when False a card without VFs has no provider.
    :returns: dict name -> :class:`DesiredProvider`, GPUs first (pools,
        then cards in PCI address order), then InfiniBand cards.
    """
    desired = {}
    if pool_whole_gpus:
        whole = [g for g in gpus if is_poolable(g)]
        for slug, pool in gpu_pools(whole, links).items():
            name = gpu_pool_name(nodename, slug)
            count = len(pool.gpus)
            desired[name] = DesiredProvider(
                name, {orc.PGPU: inventory_record(count)},
                pool_traits(pool), pool)
        gpus = [g for g in gpus if not is_poolable(g)]
    for gpu in gpus:
        name = gpu_provider_name(nodename, gpu.pci_address)
        inventory = {rc: inventory_record(total)
                     for rc, total in sorted(gpu_totals(gpu).items())}
        desired[name] = DesiredProvider(
            name, inventory, gpu_traits(gpu, (sharing_traits or {}).get(
                gpu.pci_address)), gpu)
    for card in ib_cards:
        totals = ib_totals(card, ports=report_infiniband_ports)
        if not any(totals.values()):
            continue
        name = ib_provider_name(nodename, card.pci_address)
        inventory = {rc: inventory_record(total)
                     for rc, total in totals.items()}
        desired[name] = DesiredProvider(name, inventory, ib_traits(card),
                                        card)
    return desired


def _reserved_all(inventory):
    return {rc: dict(rec, reserved=rec['total'])
            for rc, rec in inventory.items()}


def _describe_device(device, name):
    if device is None:
        return name
    return '%s at %s' % (type(device).__name__, device.pci_address)


class TreeState(object):
    """What the driver remembers between two updates of one node's tree.

    :ivar devices: provider uuid -> device last reported there.
    """

    def __init__(self):
        self.devices = {}
        # uuid -> name of every provider seen in the node's tree
        self._names = {}
        # provider name -> traits this process set on it
        self._our_traits = {}
        # provider uuid -> consumers last warned about
        self._warned = {}

    def owned_children(self, provider_tree, nodename):
        """Name -> uuid of the node's children this driver owns."""
        return self._children(provider_tree, nodename)

    def _children(self, provider_tree, nodename):
        uuids = provider_tree.get_provider_uuids(nodename)[1:]
        names = {}
        for uuid in uuids:
            name = self._names.get(uuid)
            if name is None:
                name = provider_tree.data(uuid).name
            names[uuid] = name
        self._names = names
        prefixes = owned_prefixes(nodename)
        return {name: uuid for uuid, name in names.items()
                if name.startswith(prefixes)}

    def apply(self, provider_tree, nodename, desired, usage):
        """Make the node's owned children match ``desired``.

        :param provider_tree: nova ProviderTree holding ``nodename``.
        :param desired: dict name -> :class:`DesiredProvider`.
        :param usage: callable(rp_uuid) -> ``(known, consumers)`` where
            consumers maps consumer uuid -> resources used on that provider.
        """
        existing = self._children(provider_tree, nodename)
        new_devices = {}
        for name, want in desired.items():
            uuid = existing.get(name)
            if uuid is None:
                uuid = provider_tree.new_child(name, nodename)
                self._names[uuid] = name
            self._apply_inventory(provider_tree, uuid, want, usage)
            self._apply_traits(provider_tree, uuid, want)
            new_devices[uuid] = want.device
            self._warned.pop(uuid, None)
        for name, uuid in existing.items():
            if name in desired:
                continue
            if self._vanished(provider_tree, uuid, name, usage):
                new_devices[uuid] = self.devices.get(uuid)
        self.devices = new_devices

    def _apply_inventory(self, provider_tree, uuid, want, usage):
        inventory = want.inventory
        if not provider_tree.has_inventory_changed(uuid, inventory):
            return
        current = provider_tree.data(uuid).inventory
        dropped = [rc for rc in current if rc not in inventory]
        if dropped:
            known, consumers = usage(uuid)
            in_use = {rc for rc in dropped if not known or any(
                rc in res for res in consumers.values())}
            if in_use:
                inventory = dict(inventory)
                for rc in sorted(in_use):
                    inventory[rc] = dict(current[rc],
                                         reserved=current[rc]['total'])
                LOG.warning('%(name)s no longer offers %(rcs)s but '
                            'consumers %(consumers)s use it: kept with '
                            'reserved = total until they are gone',
                            {'name': want.name, 'rcs': sorted(in_use),
                             'consumers': sorted(consumers) or 'unknown'})
        provider_tree.update_inventory(uuid, inventory)

    def _apply_traits(self, provider_tree, uuid, want):
        before = self._our_traits.get(want.name)
        if before is None:
            current = provider_tree.data(uuid).traits
            stale = {t for t in current
                     if placement_names.is_managed_trait(t)} - want.traits
        else:
            stale = before - want.traits
        if stale:
            provider_tree.remove_traits(uuid, *stale)
        if not provider_tree.has_traits(uuid, want.traits):
            provider_tree.add_traits(uuid, *want.traits)
        self._our_traits[want.name] = want.traits

    def _vanished(self, provider_tree, uuid, name, usage):
        """Handle an owned provider whose device is gone.

        :returns: True when the provider is kept (in use or unknown).
        """
        device = self.devices.get(uuid)
        known, consumers = usage(uuid)
        if known and not consumers:
            LOG.info('%s is gone: deleting its resource provider %s',
                     _describe_device(device, name), name)
            provider_tree.remove(uuid)
            self._names.pop(uuid, None)
            self._our_traits.pop(name, None)
            self._warned.pop(uuid, None)
            return False
        inventory = provider_tree.data(uuid).inventory
        provider_tree.update_inventory(uuid, _reserved_all(inventory))
        seen = frozenset(consumers) if known else None
        if self._warned.get(uuid, ()) != seen:
            LOG.warning('%(device)s is gone but its resource provider '
                        '%(name)s is in use by %(consumers)s: kept with '
                        'reserved = total until they are gone',
                        {'device': _describe_device(device, name),
                         'name': name,
                         'consumers': ', '.join(sorted(consumers))
                         if known else 'unknown consumers'})
            self._warned[uuid] = seen
        return True
