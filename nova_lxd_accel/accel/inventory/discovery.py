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

"""Pure discovery: LXD resources + ``nvidia-smi -L`` + options -> devices."""

import dataclasses
import typing

from oslo_log import log as logging

from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel.inventory import lxd_resources
from nova_lxd_accel.accel.inventory import nvidia_smi
from nova_lxd_accel.accel.inventory import shared_gpus

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Options:
    """What to report; see ``[lxd_accelerators]`` in nova.conf."""

    gpu_vendor_ids: typing.FrozenSet[str] = frozenset(('10de', '1002'))
    excluded_pci_addresses: typing.FrozenSet[str] = frozenset()
    report_mig: bool = True
    report_infiniband: bool = True
    #: whole InfiniBand ports offered (``report_infiniband_ports``)
    report_infiniband_ports: bool = False
    #: ``[lxd_accelerators] shared_gpus`` entries
    shared_gpus: typing.Tuple[str, ...] = ()
    #: identical whole GPUs in one provider (``pool_whole_gpus``)
    pool_whole_gpus: bool = True

    @classmethod
    def from_conf(cls, conf):
        group = conf.lxd_accelerators
        excluded = (devices.normalise_pci_address(a)
                    for a in group.excluded_pci_addresses or ())
        return cls(
            gpu_vendor_ids=frozenset(
                v.strip().lower() for v in group.gpu_vendor_ids or ()
                if v and v.strip()),
            excluded_pci_addresses=frozenset(a for a in excluded if a),
            report_mig=group.report_mig,
            report_infiniband=group.report_infiniband,
            report_infiniband_ports=group.report_infiniband_ports,
            shared_gpus=tuple(group.shared_gpus or ()),
            pool_whole_gpus=group.pool_whole_gpus)


def _matched(gpus, smi_gpus):
    """(listed GPU, its LXD card or None) for each ``nvidia-smi -L`` GPU.

    By ``nvidia.uuid`` when LXD gives it; otherwise by the index among the
    NVIDIA cards sorted by PCI address (nvidia-smi's default order).
    """
    nvidia = sorted((g for g in gpus if g.is_nvidia),
                    key=lambda g: g.pci_address)
    by_uuid = {g.nvidia_uuid.lower(): g for g in nvidia if g.nvidia_uuid}
    for smi in smi_gpus:
        gpu = by_uuid.get(smi.uuid.lower())
        if gpu is None and smi.index < len(nvidia):
            candidate = nvidia[smi.index]
            if candidate.nvidia_uuid is None:
                gpu = candidate
        yield smi, gpu


def attach_models(gpus, probed_names=None, smi_gpus=()):
    """Give each NVIDIA GPU LXD knows no model of the model nvidia-smi names.

    LXD fills ``nvidia.model`` only when the NVIDIA container tools are on
    the host, so two identical cards can differ there; the model trait and
    the flavors that require it come from every source, in this order: LXD's
    ``nvidia`` object, nvidia-smi's ``--query-gpu=name`` by PCI bus id (the
    GPU probe), then ``nvidia-smi -L``.

    :param probed_names: PCI address -> name from the GPU probe.
    :param smi_gpus: list of :class:`nvidia_smi.SmiGpu`.
    :returns: a new list of GPUs, same order.
    """
    names = {}
    for smi, gpu in _matched(gpus, smi_gpus):
        if gpu is not None and smi.name:
            names[gpu.pci_address] = smi.name.strip()
    names.update({pci: name.strip()
                  for pci, name in (probed_names or {}).items() if name})
    return [dataclasses.replace(g, model=names[g.pci_address])
            if g.is_nvidia and not g.model and names.get(g.pci_address)
            else g for g in gpus]


def attach_mig(gpus, smi_gpus):
    """Give each NVIDIA GPU the MIG devices ``nvidia-smi -L`` lists for it.

    A listed GPU is matched to an LXD card by ``nvidia.uuid`` when LXD
    gives it; otherwise by its index among the NVIDIA cards sorted by PCI
    address (nvidia-smi's default order). A listed GPU that matches no card
    is logged and skipped.

    :param gpus: list of :class:`devices.Gpu` (all cards, before filters).
    :param smi_gpus: list of :class:`nvidia_smi.SmiGpu`.
    :returns: a new list of GPUs, same order.
    """
    migs = {}
    for smi, gpu in _matched(gpus, smi_gpus):
        if not smi.mig_devices:
            continue
        if gpu is None:
            LOG.warning('nvidia-smi lists GPU %(index)s (%(uuid)s) with MIG '
                        'devices that matches no GPU of LXD; its MIG devices '
                        'are not reported',
                        {'index': smi.index, 'uuid': smi.uuid})
            continue
        migs.setdefault(gpu.pci_address, []).extend(smi.mig_devices)
    return [dataclasses.replace(g, mig_devices=tuple(migs[g.pci_address]))
            if g.pci_address in migs else g for g in gpus]


def _without_excluded_vfs(device, excluded):
    if not excluded or not device.vfs:
        return device
    return dataclasses.replace(
        device,
        vfs=tuple(v for v in device.vfs if v.pci_address not in excluded))


def _shared(gpu, options):
    """The GPU with its slots when the operator shares it.

    A shared GPU is offered whole to several instances, so it is neither
    split into MIG devices nor offered as its virtual functions.
    """
    slots = shared_gpus.shared_slots(options.shared_gpus, gpu.pci_address,
                                     gpu.model or gpu.product)
    if not slots:
        return gpu
    return dataclasses.replace(gpu, shared_slots=slots, mig_devices=(),
                               vfs=())


def discover(resources, mig_text, options, probed_names=None):
    """Devices to report.

    :param resources: metadata dict of ``GET /1.0/resources``.
    :param mig_text: ``nvidia-smi -L`` output ('' when none).
    :param options: :class:`Options`.
    :param probed_names: PCI address -> GPU name from the GPU probe
        (``nvidia-smi --query-gpu``), see :func:`attach_models`.
    :returns: ``(gpus, ib_cards)``, each sorted by PCI address.
    """
    excluded = options.excluded_pci_addresses
    gpus = lxd_resources.parse_gpus(resources)
    listed = nvidia_smi.parse_list(mig_text) if mig_text else []
    gpus = attach_models(gpus, probed_names, listed)
    if options.report_mig and listed:
        gpus = attach_mig(gpus, listed)
    gpus = [_shared(_without_excluded_vfs(g, excluded), options)
            for g in gpus
            if g.vendor_id in options.gpu_vendor_ids
            and g.pci_address not in excluded]
    ib_cards = []
    if options.report_infiniband:
        ib_cards = [_without_excluded_vfs(c, excluded)
                    for c in lxd_resources.parse_ib_cards(resources)
                    if c.pci_address not in excluded]
    return gpus, ib_cards
