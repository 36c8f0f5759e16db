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

"""What Placement is told is reserved: held GPUs and dirty units.

Pure: the desired providers of an inventory update and a :class:`GateView`
of the GPU state file in, the same providers with ``reserved`` raised out.
A held GPU's own provider gets ``reserved = total`` and the trait of its
hold; a pool of whole GPUs (:class:`.devices.GpuPool`) one more
``reserved`` per held or dirty card, and no trait (its other cards stay
schedulable); every other provider one more ``reserved`` per dirty unit of
its resource class.
"""

import dataclasses

from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel.health import gate_state
from nova_lxd_accel import placement_names


@dataclasses.dataclass(frozen=True)
class GateView:
    """What :meth:`GpuGate.apply` needs, read once from the state file."""

    holds: dict
    dirty: dict

    @classmethod
    def of(cls, state):
        """The view of a state (copies: the state may change after)."""
        return cls(holds=dict(state['holds']), dirty=dict(state['dirty']))

    def reserved_for(self, pci):
        """(hold or None, {rc: dirty count}) of one GPU."""
        counts = {}
        for unit in self.dirty.values():
            if unit.get('pci') == pci:
                rc = unit.get('resource_class')
                counts[rc] = counts.get(rc, 0) + 1
        return self.holds.get(pci), counts


def reserved_providers(desired, view):
    """Desired providers with holds and dirty units reserved.

    :param desired: dict name -> ``DesiredProvider``.
    :param view: a :class:`GateView`.
    :returns: a new dict; providers without a reason are unchanged.
    """
    out = {}
    for name, want in desired.items():
        device = want.device
        if isinstance(device, devices.GpuPool):
            out[name] = _pool_reserved(want, view)
        elif isinstance(device, devices.Gpu):
            out[name] = _gpu_reserved(want, view)
        else:
            out[name] = want
    return out


def _gpu_reserved(want, view):
    hold, dirty = view.reserved_for(want.device.pci_address)
    if hold is None and not dirty:
        return want
    inventory = {}
    for rc, rec in want.inventory.items():
        reserved = rec['total'] if hold else min(
            rec['total'], rec.get('reserved', 0) + dirty.get(rc, 0))
        inventory[rc] = dict(rec, reserved=reserved)
    traits = want.traits
    if hold and hold.get('kind') == gate_state.KIND_UNHEALTHY:
        traits = traits | {placement_names.TRAIT_UNHEALTHY}
    if hold and hold.get('kind') == gate_state.KIND_UNPROBEABLE:
        traits = traits | {placement_names.TRAIT_UNPROBEABLE}
    return dataclasses.replace(want, inventory=inventory,
                               traits=frozenset(traits))


def _pool_reserved(want, view):
    """A pool's provider with its held and dirty cards reserved.

    Each card counts once, held or dirty or both; a pool never takes the
    unhealthy traits (its healthy cards stay schedulable): the holds are
    in ``nova-lxd-accel gpu list`` and the panel, card by card.
    """
    pcis = set(want.device.pci_addresses)
    unavailable = {pci for pci in pcis if view.holds.get(pci)}
    unavailable |= {unit.get('pci') for unit in view.dirty.values()
                    if unit.get('pci') in pcis}
    if not unavailable:
        return want
    inventory = {}
    for rc, rec in want.inventory.items():
        inventory[rc] = dict(rec, reserved=min(
            rec['total'], rec.get('reserved', 0) + len(unavailable)))
    return dataclasses.replace(want, inventory=inventory)
