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

"""Plain, immutable descriptions of the host's accelerator devices.

Each object carries what spawn needs to pin the device into a container:
PCI addresses, MIG UUIDs (or GPU instance / compute instance ids), and the
network device names of InfiniBand ports and virtual functions. They are
built by :mod:`nova_lxd_accel.accel.inventory.lxd_resources` and
:mod:`nova_lxd_accel.accel.inventory.nvidia_smi` and compared by value, so an
unchanged host gives equal objects from one period to the next.
"""

import dataclasses
import fractions
import re
import typing

_NON_ALNUM = re.compile(r'[^A-Z0-9]+')

GPU_KIND_PGPU = 'pgpu'
GPU_KIND_VGPU = 'vgpu'
GPU_KIND_MIG = 'mig'


def normalise_name(text):
    """Upper-case ``text`` and turn every run of other characters into ``_``.

    ``1g.10gb+me`` -> ``1G_10GB_ME``; ``NVIDIA H100 80GB HBM3`` ->
    ``NVIDIA_H100_80GB_HBM3``. Leading and trailing ``_`` are dropped.
    """
    return _NON_ALNUM.sub('_', str(text).upper()).strip('_')


def mig_resource_class(profile):
    """``1g.10gb`` -> ``CUSTOM_MIG_1G_10GB``."""
    return 'CUSTOM_MIG_%s' % normalise_name(profile)


def pci_slug(pci_address):
    """``0000:3b:00.0`` -> ``0000_3b_00_0`` (the provider name suffix)."""
    return pci_address.replace(':', '_').replace('.', '_')


#: compute slices of a profile: ``1g.10gb`` -> 1; a compute instance
#: inside a GPU instance, ``1c.3g.71gb`` -> 1 (its own ``c``)
_PROFILE_SLICES = re.compile(r'^(?:(?P<ci>\d+)c\.)?(?P<gi>\d+)g\.', re.I)
#: compute slices of a whole MIG-capable GPU; A100, H100, H200, B200 and
#: their relatives have 7 (NVIDIA's MIG user guide, "Supported Profiles")
_MIG_SLICES_DEFAULT = 7
_MIG_SLICES = ((re.compile(r'\bA30\b', re.I), 4),
               (re.compile(r'\bRTX PRO\b', re.I), 4))


def mig_gpu_share(profile, model):
    """The part of its GPU one MIG slice is, by compute slices.

    :param profile: the slice's profile, ``1g.10gb`` or ``1c.3g.71gb``.
    :param model: the GPU's model (``H100 80GB HBM3``): an A30 has 4
        compute slices, an A100 or H100 7.
    :returns: a :class:`fractions.Fraction` (``1/7``), or None for a
        profile of another form.
    """
    match = _PROFILE_SLICES.match(profile)
    if not match:
        return None
    slices = int(match.group('ci') or match.group('gi'))
    total = next((n for pattern, n in _MIG_SLICES if pattern.search(model)),
                 _MIG_SLICES_DEFAULT)
    return min(fractions.Fraction(1), fractions.Fraction(slices, total))


def normalise_pci_address(address):
    """Lower-case a PCI address and add the ``0000:`` domain if missing.

    :returns: the normalised address, or None for an empty/invalid value.
    """
    if not isinstance(address, str):
        return None
    address = address.strip().lower()
    if not address:
        return None
    if address.count(':') == 1:
        address = '0000:' + address
    return address


@dataclasses.dataclass(frozen=True)
class MigDevice:
    """One MIG device as listed by ``nvidia-smi -L``.

    :ivar profile: the profile as printed, e.g. ``1g.10gb`` or ``1c.3g.71gb``.
    :ivar uuid: the UUID as printed: ``MIG-<uuid>`` (R470+) or the legacy
        ``MIG-GPU-<gpu-uuid>/<gi>/<ci>``. LXD's ``mig.uuid`` takes only the
        first (with or without ``MIG-``; ``gpuValidMigUUID`` in
        ``lxd/device``): LXD 5.0.2 refuses a legacy one ("Invalid value
        for device option "mig.uuid": Invalid UUID"), so legacy devices
        are bound by ``mig.gi``/``mig.ci`` and cannot be named by CDI.
    :ivar index: the MIG device index on its GPU.
    :ivar gpu_index: the GPU index nvidia-smi printed.
    :ivar gi: GPU instance id (legacy UUIDs only, else None).
    :ivar ci: compute instance id (legacy UUIDs only, else None).
    """

    profile: str
    uuid: str
    index: int
    gpu_index: int
    gi: typing.Optional[int] = None
    ci: typing.Optional[int] = None

    @property
    def resource_class(self):
        return mig_resource_class(self.profile)


@dataclasses.dataclass(frozen=True)
class PciFunction:
    """A PCI function: its address and, when LXD gives them, its ids."""

    pci_address: str
    vendor_id: typing.Optional[str] = None
    product_id: typing.Optional[str] = None


@dataclasses.dataclass(frozen=True)
class GpuVf(PciFunction):
    """An SR-IOV virtual function of a GPU, pinned by its PCI address."""


@dataclasses.dataclass(frozen=True)
class PciCard(PciFunction):
    """The PCI identity LXD gives a GPU and a network card alike."""

    numa_node: typing.Optional[int] = None
    driver: typing.Optional[str] = None
    vendor: typing.Optional[str] = None
    product: typing.Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Gpu(PciCard):
    """A physical GPU (LXD ``gpu.cards[]`` entry with a PCI address)."""

    #: ``nvidia.model`` when LXD knows it, e.g. ``NVIDIA H100 80GB HBM3``.
    model: typing.Optional[str] = None
    #: ``nvidia.uuid``, e.g. ``GPU-6ddadebd-...``.
    nvidia_uuid: typing.Optional[str] = None
    #: ``nvidia.architecture``: the CUDA compute capability, e.g. ``8.0``.
    architecture: typing.Optional[str] = None
    cuda_version: typing.Optional[str] = None
    #: DRM card id (LXD ``gpu`` device option ``id``).
    drm_id: typing.Optional[int] = None
    vfs: typing.Tuple[GpuVf, ...] = ()
    mig_devices: typing.Tuple[MigDevice, ...] = ()
    #: slots when the operator shares the GPU (``[lxd_accelerators]
    #: shared_gpus``), else 0
    shared_slots: int = 0
    #: the card's memory in MiB (from the GPU probe), when known
    memory_mib: typing.Optional[int] = None

    @property
    def kind(self):
        """How the GPU is offered: ``mig``, ``vgpu`` (VFs) or ``pgpu``."""
        if self.mig_devices:
            return GPU_KIND_MIG
        if self.vfs:
            return GPU_KIND_VGPU
        return GPU_KIND_PGPU

    @property
    def is_nvidia(self):
        return self.vendor_id == '10de'


@dataclasses.dataclass(frozen=True)
class IbPort:
    """An InfiniBand port of a card (LXD numbers ports from 0)."""

    netdev: typing.Optional[str]
    port: typing.Optional[int] = None
    address: typing.Optional[str] = None
    verb_name: typing.Optional[str] = None
    mad_name: typing.Optional[str] = None
    issm_name: typing.Optional[str] = None


@dataclasses.dataclass(frozen=True)
class IbVf(PciFunction):
    """An InfiniBand SR-IOV virtual function, pinned by its PCI address."""

    netdevs: typing.Tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class IbCard(PciCard):
    """A network card with at least one InfiniBand port.

    ``ports`` holds only its InfiniBand ports (Ethernet ports of a mixed
    card are left out), ordered by port number; ``vfs`` only its
    InfiniBand virtual functions.
    """

    ports: typing.Tuple[IbPort, ...] = ()
    vfs: typing.Tuple[IbVf, ...] = ()


@dataclasses.dataclass(frozen=True)
class GpuPool:
    """Whole GPUs of one model, counted in one provider.

    Same PCI vendor and product id, none split into MIG devices or shared: a
    scheduler asks for ``resources:PGPU=k`` of them in one request group
    and the pick (:mod:`nova_lxd_accel.accel.binding.pick`) chooses which
    cards, by topology.

    :ivar gpus: the cards, in PCI address order.
    :ivar links: what the host says of the links between its NVIDIA GPUs
        (:class:`nova_lxd_accel.accel.inventory.gpu_topology.Links`), or
        None when unknown.
    """

    gpus: typing.Tuple[Gpu, ...]
    links: typing.Optional[object] = None

    @property
    def pci_address(self):
        """The cards' addresses, for messages (``a, b, ...``)."""
        return ', '.join(g.pci_address for g in self.gpus)

    @property
    def pci_addresses(self):
        return tuple(g.pci_address for g in self.gpus)

    def without(self, pci_addresses):
        """The pool less the cards at ``pci_addresses``."""
        gone = set(pci_addresses)
        return dataclasses.replace(self, gpus=tuple(
            g for g in self.gpus if g.pci_address not in gone))


def physical_devices(host_devices):
    """``host_devices`` with every :class:`GpuPool` opened into its cards."""
    out = []
    for device in host_devices:
        if isinstance(device, GpuPool):
            out.extend(device.gpus)
        elif device is not None:
            out.append(device)
    return out


class ReportedDevices(typing.Protocol):
    """What a claim reads of the inventory: the devices it reported.

    :class:`nova_lxd_accel.accel.inventory.reporter.AcceleratorInventory`
    is one; the claim (:class:`nova_lxd_accel.accel.binding.claims.Claims`)
    is given it whole, never its methods one by one.
    """

    def device_for_provider(self, rp_uuid):
        """The device last reported under provider ``rp_uuid``, or None."""

    def all_devices(self):
        """Every device last reported (or kept while in use)."""
