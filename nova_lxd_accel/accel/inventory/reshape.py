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

"""Moving whole GPUs between provider layouts, with their allocations.

A host that reported one provider per whole GPU (``<nodename>_gpu_<pci>``,
``PGPU`` total 1) reports identical whole GPUs as one pool
(``<nodename>_gpu_pool_<vendor>_<product>``) since
``[lxd_accelerators] pool_whole_gpus``; and back when an operator turns it
off. Servers running there keep their cards: nova's reshape
(``update_provider_tree`` raises ``ReshapeNeeded``, nova calls it again
with every allocation of the tree, and posts the result to Placement's
``/reshaper`` in one transaction) moves each server's ``PGPU`` from the
provider its card was counted in to the one it is counted in now.

Which card a server holds is known by name for a one-card provider, and
from the server's binding record (its ``pci``) for a pool.
"""

import os_resource_classes as orc
from oslo_log import log as logging

from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel.inventory import provider_tree
from nova_lxd_accel.container import identity

LOG = logging.getLogger(__name__)


def _owner_of_card(nodename, desired):
    """PCI address -> the desired provider name its whole GPU counts in."""
    out = {}
    for name, want in desired.items():
        device = want.device
        if isinstance(device, devices.GpuPool):
            for pci in device.pci_addresses:
                out[pci] = name
        elif isinstance(device, devices.Gpu) and \
                orc.PGPU in want.inventory:
            out[device.pci_address] = name
    return out


def _gpus(desired):
    """PCI address -> every GPU of ``desired``, pools opened."""
    return {gpu.pci_address: gpu
            for gpu in devices.physical_devices(
                want.device for want in desired.values())
            if isinstance(gpu, devices.Gpu)}


def _cards_of_consumers(records):
    """Instance uuid -> PCI addresses of the whole GPUs it is bound to."""
    out = {}
    for record in records or ():
        uuid = identity.instance_uuid(record)
        for unit in identity.recorded_units(record.get('config')):
            if unit.get('resource_class') == orc.PGPU and unit.get('pci'):
                out.setdefault(uuid, []).append(
                    devices.normalise_pci_address(unit['pci']))
    return out


def moved_providers(nova_tree, nodename, desired, existing, known_devices):
    """Owned providers whose whole GPUs now count in another provider.

    :param existing: name -> uuid of the node's owned children now.
    :param known_devices: uuid -> device last reported there (this
        process), to know an old pool's cards.
    :returns: old provider uuid -> {pci: new provider name}, only for
        providers offering ``PGPU`` that are not desired any more and
        whose cards are all still on the host.
    """
    owner = _owner_of_card(nodename, desired)
    by_card_name = {provider_tree.gpu_provider_name(nodename, pci): pci
                    for pci in owner}
    out = {}
    for name, uuid in existing.items():
        if name in desired or \
                orc.PGPU not in nova_tree.data(uuid).inventory:
            continue
        if name in by_card_name:
            cards = [by_card_name[name]]
        else:
            device = known_devices.get(uuid)
            cards = list(getattr(device, 'pci_addresses', ()))
            prefix = provider_tree.gpu_pool_name(nodename, '')
            if not cards and name.startswith(prefix):
                # an old pool, before this process saw it: its cards are
                # this host's cards of its vendor and product
                slug = name[len(prefix):]
                cards = [pci for pci, gpu in _gpus(desired).items()
                         if slug.startswith(provider_tree.pool_slug(gpu))]
        if cards and all(pci in owner for pci in cards):
            out[uuid] = {pci: owner[pci] for pci in cards}
    return out


def move_allocations(nova_tree, nodename, moves, allocations, records):
    """Move each consumer's ``PGPU`` of a moved provider to its new one.

    Creates the new providers in ``nova_tree`` when missing. Changes
    ``allocations`` (nova's reshape argument) in place.

    :param moves: :func:`moved_providers`.
    :param records: the daemon's instance records, for the cards each
        consumer of an old pool holds.
    :returns: consumer uuid -> {pci: new provider uuid} of what moved.
    """
    cards_of = _cards_of_consumers(records)
    moved = {}
    for old_uuid, card_owner in moves.items():
        new_uuids = {}
        for name in set(card_owner.values()):
            if not nova_tree.exists(name):
                nova_tree.new_child(name, nodename)
            new_uuids[name] = nova_tree.data(name).uuid
        for consumer, data in allocations.items():
            allocs = (data or {}).get('allocations') or {}
            resources = (allocs.get(old_uuid) or {}).get('resources') or {}
            count = resources.get(orc.PGPU, 0)
            if not count:
                continue
            cards = [p for p in cards_of.get(consumer, ())
                     if p in card_owner]
            if len(card_owner) == 1:
                cards = list(card_owner) * count
            if len(cards) != count:
                if len(set(card_owner.values())) != 1:
                    LOG.warning('Cannot tell which of the GPUs %(cards)s '
                                'consumer %(consumer)s holds: its %(n)d '
                                'PGPU stay on provider %(rp)s (reserved '
                                'until it is gone)',
                                {'cards': ', '.join(sorted(card_owner)),
                                 'consumer': consumer, 'n': count,
                                 'rp': old_uuid})
                    continue
                # one destination: which cards does not matter here
                cards = list(card_owner)[:count]
            _move(allocs, old_uuid, orc.PGPU, count, cards, card_owner,
                  new_uuids)
            moved.setdefault(consumer, {}).update(
                {pci: new_uuids[card_owner[pci]] for pci in cards})
            LOG.info('Reshape: %(n)d PGPU of consumer %(consumer)s move '
                     'from provider %(old)s to %(new)s',
                     {'n': count, 'consumer': consumer, 'old': old_uuid,
                      'new': ', '.join(sorted({new_uuids[card_owner[p]]
                                               for p in cards}))})
    return moved


def _move(allocs, old_uuid, rc, count, cards, card_owner, new_uuids):
    old = allocs[old_uuid]['resources']
    old[rc] -= count
    if not old[rc]:
        del old[rc]
    if not old:
        del allocs[old_uuid]
    for pci in cards:
        target = allocs.setdefault(new_uuids[card_owner[pci]],
                                   {'resources': {}})['resources']
        target[rc] = target.get(rc, 0) + 1
