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

"""Whether a host could enforce GPU memory per cgroup (MPS v3, ``dmem``).

The driver's MPS quotas are MPS v2 client limits (``lxd:gpu_memory_mb``
becomes ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``): a tenant's root can unset
them. NVIDIA's MPS v3 memory partitioning instead charges device memory
to cgroups, and with the kernel's ``dmem`` cgroup controller the kernel
enforces the limit. NVIDIA documents what it needs (MPS documentation,
"MPS v3 Memory Partitioning"): cgroup v2 at ``/sys/fs/cgroup``, CUDA 13.4
or newer (driver r615 or newer), a non-MIG device; the ``dmem`` controller
(Linux 6.14 or newer) for the kernel-enforced backend, the driver falling
back to an internal backend on older kernels.

This module only says what a host has (:func:`partitioning`, pure, and
:func:`probe`, which reads the host's files); the driver does not use
MPS v3 yet.
"""

import re

#: The first NVIDIA driver branch with MPS v3 memory partitioning.
MIN_DRIVER_MAJOR = 615

CONTROLLERS = '/sys/fs/cgroup/cgroup.controllers'
DMEM_CAPACITY = '/sys/fs/cgroup/dmem.capacity'
DRIVER_VERSION = '/proc/driver/nvidia/version'

#: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.133.20  ..."
_NVRM = re.compile(r'Kernel Module\s+(?:for \S+\s+)?(\d+)\.(\d+)')

NONE = 'none'          # neither: MPS v2 client limits only (cooperative)
DRIVER = 'driver'      # driver can, kernel without dmem: its own backend
KERNEL = 'kernel'      # driver can and the kernel's dmem controller is on


def driver_major(version_text):
    """The NVIDIA kernel module's major version, or None."""
    match = _NVRM.search(version_text or '')
    return int(match.group(1)) if match else None


def partitioning(controllers, capacity, version_text):
    """(level, reasons): what MPS v3 memory partitioning could use here.

    :param controllers: ``/sys/fs/cgroup/cgroup.controllers`` (None when
        absent: no cgroup v2 there).
    :param capacity: ``/sys/fs/cgroup/dmem.capacity`` (None when absent).
    :param version_text: ``/proc/driver/nvidia/version`` (None: no
        NVIDIA driver loaded).
    :returns: :data:`NONE`, :data:`DRIVER` or :data:`KERNEL`, and the
        reasons, each a sentence.
    """
    reasons = []
    major = driver_major(version_text)
    if controllers is None:
        reasons.append('no cgroup v2 at /sys/fs/cgroup')
    if major is None:
        reasons.append('no NVIDIA kernel module version in %s'
                       % DRIVER_VERSION)
    elif major < MIN_DRIVER_MAJOR:
        reasons.append('NVIDIA driver %d is older than r%d (CUDA 13.4)'
                       % (major, MIN_DRIVER_MAJOR))
    if reasons:
        return NONE, reasons
    if 'dmem' not in controllers.split():
        return DRIVER, ['the kernel has no dmem cgroup controller (Linux '
                        '6.14 or newer): the driver\'s own backend']
    regions = [line.split()[0] for line in (capacity or '').splitlines()
               if line.strip().startswith('nvidia/')]
    if not regions:
        # NVIDIA's check: one nvidia/<pci>/vidmem line per GPU
        return DRIVER, ['the dmem controller is on, but %s lists no '
                        'nvidia/ region' % DMEM_CAPACITY]
    return KERNEL, ['dmem regions: %s' % ', '.join(regions)]


def _read(path):
    try:
        with open(path, encoding='utf-8', errors='replace') as f:
            return f.read()
    except OSError:
        return None


def probe(read=_read):
    """:func:`partitioning` of this host.

    :param read: callable(path) -> text, or None when the file is absent
        (``doctor.HostView.read`` reads a recorded host).
    """
    return partitioning(read(CONTROLLERS), read(DMEM_CAPACITY),
                        read(DRIVER_VERSION))
