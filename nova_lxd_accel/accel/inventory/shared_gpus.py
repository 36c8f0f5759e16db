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

"""Which GPUs of the host are shared, and how: ``[lxd_accelerators]
shared_gpus``, its slots and sharing mode per card.
"""

import dataclasses

from nova_lxd_accel.accel import devices
from nova_lxd_accel.extra_specs import sharing_modes


@dataclasses.dataclass(frozen=True)
class SharedGpu:
    """One ``shared_gpus`` entry: its slots and its sharing mode."""

    slots: int
    mode: str = sharing_modes.DEFAULT_MODE


def _malformed(entry):
    return ValueError('[lxd_accelerators] shared_gpus: %r is not '
                      '<PCI address or model>:<slots>[:%s]'
                      % (entry, '|'.join(sharing_modes.MODES)))


def parse_shared_gpus(entries):
    """``['0000:3b:00.0:4:quota', 'NVIDIA_A10:8']`` -> (by_pci, by_model).

    Each maps to a :class:`SharedGpu`; an entry without a mode is
    :data:`DEFAULT_MODE`.

    :raises: ValueError naming a malformed entry.
    """
    by_pci, by_model = {}, {}
    for entry in entries or ():
        entry = entry.strip()
        if not entry:
            continue
        key, sep, last = entry.rpartition(':')
        mode = sharing_modes.DEFAULT_MODE
        if last.strip().lower() in sharing_modes.MODES:
            mode = last.strip().lower()
            key, sep, last = key.rpartition(':')
        elif last.strip() and not last.strip().isdigit():
            # a typo in the mode must not turn a quota card time-sliced
            raise _malformed(entry)
        try:
            slots = int(last)
        except ValueError:
            slots = 0
        if not sep or not key or slots < 1:
            raise _malformed(entry)
        if key.count(':') >= 1:
            by_pci[devices.normalise_pci_address(key)] = SharedGpu(slots,
                                                                   mode)
        else:
            by_model[devices.normalise_name(key)] = SharedGpu(slots, mode)
    return by_pci, by_model


def _entry(entries, pci_address, model):
    """The :class:`SharedGpu` of a GPU, or None; PCI address wins."""
    by_pci, by_model = parse_shared_gpus(entries)
    pci = devices.normalise_pci_address(pci_address)
    if pci in by_pci:
        return by_pci[pci]
    return by_model.get(devices.normalise_name(model or ''))


def shared_slots(entries, pci_address, model):
    """Slots of the GPU at ``pci_address`` of ``model``; 0 if not shared.

    An entry by PCI address wins over one by model.
    """
    entry = _entry(entries, pci_address, model)
    return entry.slots if entry else 0


def card_mode(entries, gpu):
    """The sharing mode of shared GPU ``gpu`` (a :class:`devices.Gpu`).

    Matched as discovery matches its slots (PCI address, else the model
    or product name); a GPU no entry names is :data:`DEFAULT_MODE`.
    """
    entry = _entry(entries, gpu.pci_address, gpu.model or gpu.product)
    return entry.mode if entry else sharing_modes.DEFAULT_MODE
