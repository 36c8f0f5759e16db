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


from nova_lxd_accel.accel.binding import mps_environment
from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel.inventory import shared_gpus
from nova_lxd_accel import exception
from nova_lxd_accel.extra_specs import sharing_modes


def check_mode(entries, gpu, memory_mb, flavor, provider):
    """Refuse a share whose flavor's mode is not the card's.

    The last line of defence: Placement never offers a card of the other
    mode to a flavor that requires its mode's trait
    (:data:`MODE_TRAITS`), but a flavor made by hand may require none.

    :param memory_mb: the flavor's ``lxd:gpu_memory_mb``, or None.
    :raises: SharedGpuModeMismatch (nova reschedules the instance).
    """
    mode = shared_gpus.card_mode(entries, gpu)
    wanted = (sharing_modes.MODE_QUOTA if memory_mb is not None
              else sharing_modes.MODE_TIMESLICE)
    if mode == wanted:
        return
    raise exception.SharedGpuModeMismatch(
        pci=gpu.pci_address, provider=provider, card_mode=mode,
        flavor=flavor or 'of the instance',
        flavor_mode=wanted, trait=sharing_modes.mode_trait_key(wanted),
        quota=('sets %s' if memory_mb is not None else 'sets no %s')
        % sharing_modes.MEMORY_QUOTA_KEY)


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
    # for init and `lxc exec`; logins, cron and services read theirs from
    # the files of environment_files (see mps_environment)
    config.update(('environment.' + name, value) for name, value in
                  mps_variables(pci, memory_mb, compute_percent,
                                pipe_template).items())
    return devs, config


def mps_variables(pci_address, memory_mb=None, compute_percent=None,
                  pipe_template='/run/nvidia-mps-{pci}'):
    """``{name: value}`` of the MPS client; empty without a quota.

    Device ordinal 0: the container sees only this GPU.
    """
    if memory_mb is None and compute_percent is None:
        return {}
    variables = {'CUDA_MPS_PIPE_DIRECTORY': pipe_directory(
        pipe_template, pci_address)}
    if memory_mb is not None:
        variables['CUDA_MPS_PINNED_DEVICE_MEM_LIMIT'] = (
            '0=%dM' % int(memory_mb))
    if compute_percent is not None:
        variables['CUDA_MPS_ACTIVE_THREAD_PERCENTAGE'] = (
            str(int(compute_percent)))
    return variables


def environment_files(pci_address, memory_mb=None, compute_percent=None,
                      pipe_template='/run/nvidia-mps-{pci}',
                      current_environment=''):
    """Path -> contents (None: remove) of the container's MPS env files.

    The same inputs as :func:`lxd_config`; ``current_environment`` is the
    container's ``/etc/environment``. See :mod:`.mps_environment`.
    """
    return mps_environment.files(
        mps_variables(pci_address, memory_mb, compute_percent,
                      pipe_template), current_environment)
