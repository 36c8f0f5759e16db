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

"""How NVIDIA user space reaches a container: CDI or ``nvidia.runtime``.

LXD 5.21.3 and 6.2 added the ``gpu_cdi`` API extension: a ``gpu`` device's
``id`` may be a Container Device Interface name, and LXD then generates
the device nodes, libraries and hooks itself (``lxd/device/cdi``). Older
LXD and every Incus release have only ``nvidia.runtime=true``
(libnvidia-container). The two cannot be mixed in one container: LXD
refuses a CDI ``id`` while any ``nvidia.*`` option is true ("CDI mode is
incompatible with any NVIDIA instance configuration option",
``lxd/device/gpu_physical.go``).

Ids this driver writes, always pinned to exactly one GPU or MIG device by
its UUID (never ``all``, never an index, which nvidia-smi renumbers when
a card goes away); read from canonical/lxd ``lxd/device/cdi/id.go``,
``cdi/configure.go`` (``GenerateFromCDI`` matches the name against the
spec nvidia-container-toolkit generates with both its index and UUID
device namers), ``gpu_physical.go`` and ``gpu_mig.go``:

* whole GPU: ``gputype=physical id=nvidia.com/gpu=GPU-<uuid>``;
* MIG device, daemon with ``gpu_mig_cdi``: ``gputype=mig
  id=nvidia.com/mig=MIG-<uuid>`` (the form doc/api-extensions.md gives);
* MIG device, daemon with ``gpu_cdi`` only (LXD 5.21.3+, 6.2 to 6.9):
  ``gputype=physical id=nvidia.com/gpu=MIG-<uuid>``: there ``gputype=mig``
  still needs ``nvidia.runtime`` and ``gputype=physical`` refuses the
  ``mig`` class, while the generated spec names each MIG device
  ``MIG-<uuid>``.

Legacy MIG identifiers (``MIG-GPU-<uuid>/<gi>/<ci>``, drivers before
R470) cannot be CDI names (``/`` is not allowed in one) and are refused
in CDI mode with a message saying what to do.
"""

import dataclasses

MODE_AUTO = 'auto'
MODE_CDI = 'cdi'
MODE_RUNTIME = 'runtime'
MODES = (MODE_AUTO, MODE_CDI, MODE_RUNTIME)

EXT_GPU_CDI = 'gpu_cdi'
EXT_GPU_MIG_CDI = 'gpu_mig_cdi'

VENDOR_NVIDIA = 'nvidia.com'


@dataclasses.dataclass(frozen=True)
class NvidiaBinding:
    """How NVIDIA GPUs and MIG devices are bound on this host."""

    #: bind by CDI id (else ``pci``/``mig.uuid`` plus ``nvidia.runtime``)
    cdi: bool = False
    #: the daemon takes MIG CDI ids on ``gputype=mig`` (``gpu_mig_cdi``)
    mig_cdi: bool = False

    @property
    def name(self):
        return MODE_CDI if self.cdi else MODE_RUNTIME


RUNTIME = NvidiaBinding()


def problem(option, daemon):
    """Why ``[lxd_accelerators] nvidia_binding`` cannot work here, or None.

    :param daemon: :class:`nova_lxd_accel.daemon.DaemonInfo`.
    """
    if option == MODE_CDI and not daemon.has(EXT_GPU_CDI):
        return ('[lxd_accelerators] nvidia_binding = cdi, but %s %s lacks '
                'the %s API extension (LXD 5.21.3 and 6.2 or later have it; '
                'no Incus release does): set nvidia_binding = auto or '
                'runtime, or upgrade the daemon'
                % (daemon.name, daemon.version, EXT_GPU_CDI))
    return None


def resolve(option, daemon):
    """The :class:`NvidiaBinding` for an option value and a daemon."""
    if daemon is None or option == MODE_RUNTIME:
        return RUNTIME
    if option in (MODE_AUTO, MODE_CDI) and daemon.has(EXT_GPU_CDI):
        return NvidiaBinding(cdi=True, mig_cdi=daemon.has(EXT_GPU_MIG_CDI))
    return RUNTIME


def for_client(client, conf):
    """The binding mode for the daemon behind ``client``.

    A client without daemon information (a test double) binds the
    pre-CDI way.
    """
    daemon_info = getattr(client, 'daemon_info', None)
    if daemon_info is None:
        return RUNTIME
    return resolve(conf.lxd_accelerators.nvidia_binding, daemon_info())


def qualified(vendor, cls, name):
    return '%s/%s=%s' % (vendor, cls, name)


def gpu_id(nvidia_uuid):
    """``nvidia.com/gpu=GPU-<uuid>`` for a whole GPU, or None without one."""
    if not nvidia_uuid:
        return None
    uuid = nvidia_uuid.strip()
    if not uuid.upper().startswith('GPU-'):
        uuid = 'GPU-' + uuid
    return qualified(VENDOR_NVIDIA, 'gpu', uuid)


def is_legacy_mig_uuid(uuid):
    """``MIG-GPU-<uuid>/<gi>/<ci>`` (pre-R470 drivers)."""
    text = (uuid or '').strip().upper()
    return text.startswith('MIG-GPU-') or '/' in text


def mig_device(mig_uuid, binding):
    """The LXD ``gpu`` device for one MIG device in CDI mode.

    :raises ValueError: the UUID is a legacy one CDI cannot name.
    """
    if is_legacy_mig_uuid(mig_uuid):
        raise ValueError(
            'MIG device %s has a pre-R470 identifier, which CDI cannot '
            'name; upgrade the NVIDIA driver or set [lxd_accelerators] '
            'nvidia_binding = runtime' % mig_uuid)
    uuid = mig_uuid.strip()
    if not uuid.upper().startswith('MIG-'):
        uuid = 'MIG-' + uuid
    if binding.mig_cdi:
        return {'type': 'gpu', 'gputype': 'mig',
                'id': qualified(VENDOR_NVIDIA, 'mig', uuid)}
    return {'type': 'gpu', 'gputype': 'physical',
            'id': qualified(VENDOR_NVIDIA, 'gpu', uuid)}
