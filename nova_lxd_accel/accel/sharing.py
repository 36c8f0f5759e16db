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

"""Shared GPUs (issue 16): the option's parser and the LXD config.

A shared GPU is given to several instances at once, pinned by PCI address;
with a quota the instance talks to the GPU's NVIDIA MPS control daemon
through its pipe directory, and the MPS client limits are set in the
container's environment.
"""

from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel import provider_tree as accel_tree

SHARE_RC = accel_tree.SHARE_RC
MEMORY_RC = accel_tree.MEMORY_RC


def parse_shared_gpus(entries):
    """``['0000:3b:00.0:4', 'NVIDIA_A10:8']`` -> (by_pci, by_model).

    :raises: ValueError naming a malformed entry.
    """
    by_pci, by_model = {}, {}
    for entry in entries or ():
        entry = entry.strip()
        if not entry:
            continue
        key, sep, slots = entry.rpartition(':')
        try:
            slots = int(slots)
        except ValueError:
            slots = 0
        if not sep or not key or slots < 1:
            raise ValueError('[lxd_accelerators] shared_gpus: %r is not '
                             '<PCI address or model>:<slots>' % entry)
        if key.count(':') >= 1:
            by_pci[devices.normalise_pci_address(key)] = slots
        else:
            by_model[devices.normalise_name(key)] = slots
    return by_pci, by_model


def shared_slots(entries, pci_address, model):
    """Slots of the GPU at ``pci_address`` of ``model``; 0 if not shared.

    An entry by PCI address wins over one by model.
    """
    by_pci, by_model = parse_shared_gpus(entries)
    pci = devices.normalise_pci_address(pci_address)
    if pci in by_pci:
        return by_pci[pci]
    return by_model.get(devices.normalise_name(model or ''), 0)


def pipe_directory(template, pci_address):
    return template.replace('{pci}',
                            devices.normalise_pci_address(pci_address))


def lxd_config(pci_address, memory_mb=None, compute_percent=None,
               pipe_template='/run/nvidia-mps-{pci}',
               shm_template='/run/nvidia-mps-{pci}-shm'):
    """(devices, config) to add to the container for one shared GPU.

    The GPU is pinned by PCI address, never all GPUs. Without a quota the
    instance time-slices the GPU with the others; with one, the MPS pipe
    directory is mounted, the MPS daemon's shared memory directory is
    mounted as the container's ``/dev/shm`` (MPS clients and server share
    memory there, so a private ``/dev/shm`` breaks them) and the MPS client
    limits set (device ordinal 0: the container sees only this GPU).
    """
    pci = devices.normalise_pci_address(pci_address)
    devs = {'gpu-share-%s' % devices.pci_slug(pci): {
        'type': 'gpu', 'gputype': 'physical', 'pci': pci}}
    config = {}
    if memory_mb is None and compute_percent is None:
        return devs, config
    pipe = pipe_directory(pipe_template, pci)
    devs['mps-pipe'] = {'type': 'disk', 'source': pipe, 'path': pipe}
    devs['mps-shm'] = {'type': 'disk', 'path': '/dev/shm',
                       'source': pipe_directory(shm_template, pci)}
    config['environment.CUDA_MPS_PIPE_DIRECTORY'] = pipe
    if memory_mb is not None:
        config['environment.CUDA_MPS_PINNED_DEVICE_MEM_LIMIT'] = (
            '0=%dM' % int(memory_mb))
    if compute_percent is not None:
        config['environment.CUDA_MPS_ACTIVE_THREAD_PERCENTAGE'] = (
            str(int(compute_percent)))
    return devs, config
