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

"""GPU flavors from the discovered inventory, with ``Accelerator:*`` keys.

The federation tools read these flavor properties:

* cASO 5.2.2 (``caso/extract/openstack/nova.py``) makes an
  ``AcceleratorRecord`` when ``Accelerator:Type``, ``:Vendor``, ``:Model``
  and ``:Number`` are all set; the record's ``Model`` is ``"<Vendor>
  <Model>"`` and its ``Count`` is ``Accelerator:Number`` (a pydantic
  ``int``: a fraction such as ``0.14`` is refused).
* cloud-info-provider 1.2.0 (``providers/openstack.py``) publishes a GLUE2
  ``CloudComputingVirtualAccelerator`` of type ``GPU`` for a flavor with
  ``Accelerator:Number`` (an ``int`` in its model), taking vendor and model
  from the same keys and reading ``Accelerator:Memory`` and
  ``Accelerator:VirtualizationType``.

MIG convention (both tools want a whole number): a MIG flavor counts
**slices**, not GPUs. ``Accelerator:Number`` is the number of MIG devices,
``Accelerator:Model`` is ``<GPU model> MIG <profile>`` (so cASO's record
reads ``NVIDIA A100-SXM4-80GB MIG 1g.10gb``: which GPU and which fraction
of it), ``Accelerator:Memory`` is the slice's memory in MiB (from the
profile: ``10gb`` -> 10240) and ``Accelerator:VirtualizationType`` is
``MIG``. A whole GPU is ``passthrough`` (the container gets the GPU's
device nodes) with the GPU's memory.

Fair accounting: ``accounting:accelerator_count``
(:data:`nova_lxd_accel.accounting.apel.COUNT_KEY`) is what an instance
holds in GPUs, as a fraction: 1 per whole GPU, a MIG slice's compute
slices over its GPU's (``1/7`` for ``1g.10gb`` on an H100 80GB), ``1/<slots>``
for a slot of a shared GPU. The project's cASO extractor
(:mod:`nova_lxd_accel.accounting.caso_extractor`) sends it as the APEL
record's ``Count``; cASO's own extractor and cloud-info-provider ignore it.
"""

import dataclasses
import fractions
import re
import typing

from nova_lxd_accel.accel import devices
from nova_lxd_accel.accounting import apel
from nova_lxd_accel.extra_specs import sharing_modes
from nova_lxd_accel import placement_names

VENDORS = {'10de': 'NVIDIA', '1002': 'AMD', '8086': 'Intel'}
TYPE_GPU = 'GPU'
VIRT_PASSTHROUGH = 'passthrough'
VIRT_MIG = 'MIG'
VIRT_SHARED = 'shared'

#: Every ``Accelerator:`` key a flavor may carry (see
#: extra_specs.accelerator_keys).
KEYS = ('Accelerator:Type', 'Accelerator:Vendor', 'Accelerator:Model',
        'Accelerator:Number', 'Accelerator:Memory',
        'Accelerator:VirtualizationType')

_PROFILE = re.compile(r'^(?P<compute>\d+)g\.(?P<mem>\d+)gb', re.I)
_MODEL_MEMORY = re.compile(r'(\d+)\s*GB', re.I)


@dataclasses.dataclass(frozen=True)
class Proposal:
    """One flavor to create."""

    name: str
    vcpus: int
    ram: int
    disk: int
    description: str
    extra_specs: typing.Dict[str, str]
    #: GPUs of the host this flavor fits (PCI addresses)
    gpus: typing.Tuple[str, ...] = ()


def vendor_name(gpu):
    return VENDORS.get((gpu.vendor_id or '').lower()) or (
        gpu.vendor or 'UNKNOWN').split(' ')[0]


def model_name(gpu, probed_name=None):
    """The GPU model without its vendor word (``H100 80GB HBM3``).

    :param probed_name: the name the vendor's tool gives the card
        (``nvidia-smi --query-gpu=name``), for a GPU whose model LXD does
        not know (only its product id): a flavor named ``g1.20b2`` says
        nothing to a user.
    """
    model = (gpu.model or probed_name or gpu.product or gpu.product_id or
             'unknown')
    vendor = vendor_name(gpu)
    if model.upper().startswith(vendor.upper() + ' '):
        model = model[len(vendor) + 1:]
    return model.strip()


def _slug(text):
    return re.sub(r'[^a-z0-9.]+', '-', text.lower()).strip('-')


def _mig_memory_mib(profile):
    match = _PROFILE.match(profile)
    return int(match.group('mem')) * 1024 if match else None


def _cpu_and_ram(vcpus, ram_mib):
    """``4 vCPUs and 16 GiB of RAM``, ``1 vCPU and 256 MiB of RAM``."""
    if ram_mib % 1024:
        ram = '%d MiB' % ram_mib
    else:
        ram = '%d GiB' % (ram_mib // 1024)
    return '%d vCPU%s and %s of RAM' % (vcpus, '' if vcpus == 1 else 's',
                                        ram)


def _gpu_memory_mib(gpu, memory_mib):
    if memory_mib:
        return memory_mib
    match = _MODEL_MEMORY.search(model_name(gpu))
    return int(match.group(1)) * 1024 if match else None


def _model_trait(gpu):
    if not gpu.model:
        return None
    return 'CUSTOM_GPU_MODEL_%s' % devices.normalise_name(gpu.model)


def _accounting_specs(count, gpu_share):
    """``accounting:accelerator_count``: ``count`` units of ``gpu_share``."""
    if gpu_share is None:
        return {}
    return {apel.COUNT_KEY: str(count * gpu_share)}


def _base_specs(gpu, rc, count, model, memory, virt, gpu_share=1):
    specs = {'resources:%s' % rc: str(count)}
    trait = _model_trait(gpu)
    if trait:
        specs['trait:%s' % trait] = 'required'
    if gpu.is_nvidia:
        specs['lxd:gpu_runtime'] = 'nvidia'
    specs.update({'Accelerator:Type': TYPE_GPU,
                  'Accelerator:Vendor': vendor_name(gpu),
                  'Accelerator:Model': model,
                  'Accelerator:Number': str(count),
                  'Accelerator:VirtualizationType': virt})
    if memory:
        specs['Accelerator:Memory'] = str(memory)
    specs.update(_accounting_specs(count, gpu_share))
    return specs


def _propose_share(out, gpu, model, vendor, memory_by_pci, vcpus, ram, disk,
                   prefix, mode=sharing_modes.MODE_TIMESLICE):
    """One share of a shared GPU (see admin/gpu-sharing), for its mode.

    Like a MIG slice, a share is counted as one accelerator whose model
    says what part of which GPU it is: ``<model> share 1/<slots>``. It
    requires the trait of the card's sharing mode; on a card shared with
    quotas it takes an even part of the probed memory (none proposed
    while the probe has not read it: a guess could over-commit).
    """
    name = '%s.%s-share-1of%d' % (prefix, _slug(model), gpu.shared_slots)
    quota = None
    if mode == sharing_modes.MODE_QUOTA:
        name += '-quota'
        if not memory_by_pci.get(gpu.pci_address):
            return
        quota = memory_by_pci[gpu.pci_address] // gpu.shared_slots
    if name in out:
        out[name] = dataclasses.replace(out[name], gpus=tuple(sorted(
            set(out[name].gpus) | {gpu.pci_address})))
        return
    memory = _gpu_memory_mib(gpu, memory_by_pci.get(gpu.pci_address))
    specs = _base_specs(gpu, placement_names.SHARE_RC, 1, '%s share 1/%d' % (
        model, gpu.shared_slots), quota, VIRT_SHARED,
        gpu_share=fractions.Fraction(1, gpu.shared_slots))
    if quota:
        # slot, memory and traits from one GPU: request group 1 (in the
        # unnumbered group Placement may take them from two GPUs)
        specs = {('%s1:%s' % tuple(k.split(':', 1))
                  if k.split(':')[0] in ('resources', 'trait') else k): v
                 for k, v in specs.items()}
        specs['resources1:%s' % placement_names.MEMORY_RC] = str(quota)
        specs['lxd:gpu_memory_mb'] = str(quota)
        # the MPS server serves one host user at a time: its clients share
        # one id map (container.builder refuses an isolated one)
        specs['lxd:isolated_idmap'] = 'false'
        how = ('MPS quota: %d MiB of its memory' % quota)
    else:
        how = 'time-sliced%s' % (
            ': its %d GB are shared with the other instances on it'
            % round(memory / 1024) if memory else '')
    specs[sharing_modes.mode_trait_key(mode)] = 'required'
    description = (
        '1 share of an %s %s GPU (one of %d, %s), in an LXD container with '
        '%s.' % (vendor, model, gpu.shared_slots, how,
                 _cpu_and_ram(vcpus, ram)))
    out[name] = Proposal(name=name, vcpus=vcpus, ram=ram, disk=disk,
                         description=description, extra_specs=specs,
                         gpus=(gpu.pci_address,))


def _pool_sizes(cards):
    """2, 4, 8, ... up to the number of ``cards``."""
    size, out = 2, []
    while size <= len(cards):
        out.append(size)
        size *= 2
    return out


def propose(gpus, memory_by_pci=None, vcpus=4, ram=16384, disk=20,
            count=1, prefix='g1', names_by_pci=None, share_modes=None,
            pooled=False):
    """Flavors for the GPUs of one host (one per GPU model or MIG profile).

    With ``pooled`` (``[lxd_accelerators] pool_whole_gpus``) and one GPU
    per flavor, each model of whole GPUs also gets ``.x2``, ``.x4``,
    ``.x8``... flavors up to the host's number of its cards, each asking
    ``resources:PGPU=k`` in one group, with k times the vCPUs and RAM.

    :param gpus: :class:`devices.Gpu` list, as the inventory reports them.
    :param memory_by_pci: PCI address -> memory MiB (from the probe).
    :param names_by_pci: PCI address -> the card's name from the probe,
        used where LXD does not know the model.
    :param share_modes: PCI address -> sharing mode of each shared GPU
        (:func:`.sharing.card_mode`; default time-sliced).
    :returns: list of :class:`Proposal`, sorted by name.
    """
    memory_by_pci = memory_by_pci or {}
    names_by_pci = names_by_pci or {}
    out = {}
    for gpu in gpus:
        model = model_name(gpu, names_by_pci.get(gpu.pci_address))
        vendor = vendor_name(gpu)
        if gpu.shared_slots:
            _propose_share(out, gpu, model, vendor, memory_by_pci, vcpus,
                           ram, disk, prefix, (share_modes or {}).get(
                               gpu.pci_address, sharing_modes.DEFAULT_MODE))
            continue
        if gpu.mig_devices:
            for mig in gpu.mig_devices:
                name = '%s.%s-%s' % (prefix, _slug(model), mig.profile.lower())
                if count != 1:
                    name += '.x%d' % count
                if name in out:
                    out[name] = dataclasses.replace(
                        out[name], gpus=tuple(sorted(
                            set(out[name].gpus) | {gpu.pci_address})))
                    continue
                memory = _mig_memory_mib(mig.profile)
                total = _gpu_memory_mib(gpu, memory_by_pci.get(
                    gpu.pci_address))
                share = ''
                match = _PROFILE.match(mig.profile)
                if match:
                    share = ': %s of the GPU\'s compute slices and %s GB' % (
                        match.group('compute'), match.group('mem'))
                    if total:
                        share += ' of its %d GB' % round(total / 1024)
                description = (
                    '%d MIG slice%s %s of an %s %s%s, in an LXD container '
                    'with %s.' % (
                        count, '' if count == 1 else 's', mig.profile,
                        vendor, model, share, _cpu_and_ram(vcpus, ram)))
                out[name] = Proposal(
                    name=name, vcpus=vcpus, ram=ram, disk=disk,
                    description=description,
                    extra_specs=_base_specs(
                        gpu, mig.resource_class, count,
                        '%s MIG %s' % (model, mig.profile), memory,
                        VIRT_MIG,
                        gpu_share=devices.mig_gpu_share(mig.profile, model)),
                    gpus=(gpu.pci_address,))
            continue
        name = '%s.%s' % (prefix, _slug(model))
        if count != 1:
            name += '.x%d' % count
        if name in out:
            out[name] = dataclasses.replace(out[name], gpus=tuple(sorted(
                set(out[name].gpus) | {gpu.pci_address})))
            continue
        memory = _gpu_memory_mib(gpu, memory_by_pci.get(gpu.pci_address))
        description = ('%d whole %s %s GPU%s%s, in an LXD container with '
                       '%s.' % (
                           count, vendor, model, '' if count == 1 else 's',
                           ' (%d GB each)' % round(memory / 1024) if memory
                           else '', _cpu_and_ram(vcpus, ram)))
        out[name] = Proposal(
            name=name, vcpus=vcpus, ram=ram, disk=disk,
            description=description,
            extra_specs=_base_specs(gpu, 'PGPU', count, model, memory,
                                    VIRT_PASSTHROUGH),
            gpus=(gpu.pci_address,))
    if pooled and count == 1:
        _propose_pool_sizes(out, gpus, memory_by_pci, vcpus, ram, disk,
                            prefix, names_by_pci)
    return [out[name] for name in sorted(out)]


def _propose_pool_sizes(out, gpus, memory_by_pci, vcpus, ram, disk, prefix,
                        names_by_pci):
    """k whole GPUs of one model in one group (see :func:`propose`)."""
    by_model = {}
    for gpu in gpus:
        if not gpu.shared_slots and not gpu.mig_devices:
            by_model.setdefault(model_name(gpu, names_by_pci.get(
                gpu.pci_address)), []).append(gpu)
    for cards in by_model.values():
        for size in _pool_sizes(cards):
            for proposal in propose(
                    cards, memory_by_pci, vcpus=vcpus * size,
                    ram=ram * size, disk=disk, count=size, prefix=prefix,
                    names_by_pci=names_by_pci):
                out.setdefault(proposal.name, proposal)
