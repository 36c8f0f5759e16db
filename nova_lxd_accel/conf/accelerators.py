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

"""The ``[lxd_accelerators]`` group: which host devices are reported."""

from oslo_config import cfg

accelerators_group = cfg.OptGroup(
    'lxd_accelerators',
    title='LXD accelerator options',
    help="""
Which GPUs, MIG slices and InfiniBand devices of the host nova-lxd-accel
reports to Placement as nested resource providers.
""")

ALL_OPTS = [
    cfg.ListOpt('gpu_vendor_ids',
                default=['10de', '1002'],
                help="""
PCI vendor ids of the GPUs that are reported, one child resource provider
``<nodename>_gpu_<pci>`` per GPU.

By default NVIDIA (``10de``) and AMD (``1002``) GPUs are reported; other
display devices LXD lists (virtio GPUs, BMC graphics such as ASPEED
``1a03``, Intel integrated graphics ``8086``, framebuffers) are reported
only when their vendor id is listed here.

Possible values:

* a comma separated list of 4-digit hexadecimal PCI vendor ids
* empty: report no GPU

Related options:

* ``excluded_pci_addresses``
"""),
    cfg.ListOpt('excluded_pci_addresses',
                default=[],
                help="""
PCI addresses of devices never reported: GPUs, InfiniBand cards and single
SR-IOV virtual functions (a listed VF is not counted in its card's
inventory). Use it for devices the host itself needs.

Possible values:

* a comma separated list of PCI addresses such as ``0000:3b:00.0``
  (``3b:00.0`` means domain ``0000``)

Related options:

* ``gpu_vendor_ids``
"""),
    cfg.BoolOpt('report_mig',
                default=True,
                help="""
Whether NVIDIA MIG devices are reported.

When enabled, ``nvidia-smi -L`` is run every period; a GPU with MIG devices
is reported with one ``CUSTOM_MIG_<PROFILE>`` resource class per MIG
profile instead of ``PGPU``. When disabled, nvidia-smi is not run and every
GPU is reported whole (``PGPU``; an LXD container cannot take a GPU's SR-IOV
virtual functions, so ``VGPU`` is never reported).

Related options:

* ``nvidia_smi_path``, ``nvidia_smi_timeout``
"""),
    cfg.BoolOpt('pool_whole_gpus',
                default=True,
                help="""
Whether identical whole GPUs are counted in one resource provider.

When enabled (the default), the whole GPUs of a host of one model (same
PCI vendor and product id; not split into MIG devices, not shared) are one
child provider
``<nodename>_gpu_pool_<vendor id>_<product id>`` with ``PGPU`` total =
their number, so a flavor asks for k of them as ``resources:PGPU=k`` in
one request group, and the driver picks which cards, by topology: one
NUMA node when they fit there, then NVLink peers, then PCIe locality.
Placement answers such a request in milliseconds, where k numbered groups
of one-GPU providers grow with the product of the groups' candidates
(seconds from 6 GPUs on one host, minutes at 7).

When disabled, each whole GPU is its own provider ``<nodename>_gpu_<pci>``
with ``PGPU`` total 1, as before: flavors ask for k GPUs as k numbered
groups with ``group_policy=isolate``.

Changing it on a host that runs servers moves their allocations to the new
providers when nova-compute restarts (a reshape); flavors written for the
other layout must be changed with it.

Related options:

* ``report_mig``, ``shared_gpus``
"""),
    cfg.BoolOpt('report_infiniband',
                default=True,
                help="""
Whether network cards with InfiniBand ports are reported, one child
resource provider ``<nodename>_ib_<pci>`` per card with
``CUSTOM_INFINIBAND_VF`` (its listed InfiniBand virtual functions) or else,
only when ``report_infiniband_ports`` is enabled, ``CUSTOM_INFINIBAND_PORT``
(its InfiniBand ports). Ethernet-only cards are never reported (Neutron
handles them).

Related options:

* ``report_infiniband_ports``, ``excluded_pci_addresses``
"""),
    cfg.BoolOpt('report_infiniband_ports',
                default=False,
                help="""
Whether whole InfiniBand ports are offered (``CUSTOM_INFINIBAND_PORT``, for
cards without InfiniBand virtual functions).

Disabled by default: LXD's ``infiniband`` device gives the container the
port's ``issm`` and ``umad`` device nodes too, so a tenant given a whole
port can send subnet management packets and act as a subnet manager.
Partition keys (PKeys) do not cover subnet management packets; only the
subnet manager's ``M_Key`` and ``SM_Key`` protect the fabric. Enable it only
when the flavors that ask for ports are limited to trusted projects (a
private flavor, or an aggregate those projects alone reach).

When disabled, a card without InfiniBand virtual functions is not reported
at all, and an allocation of a port (made while it was enabled) is refused
at spawn. InfiniBand virtual functions (``CUSTOM_INFINIBAND_VF``) are
reported either way.

Related options:

* ``report_infiniband``
"""),
    cfg.BoolOpt('infiniband_vf_any_project',
                default=False,
                help="""
Let instances of different projects use InfiniBand virtual functions of
one card at the same time.

By default the virtual functions of a card serve one project at a time: a
claim for another project is refused on this host and Nova reschedules the
instance. A virtual function's port GUID is fixed, and the subnet manager
puts GUIDs in partitions (PKeys): with one project per card, a partition
per card keeps projects apart on the fabric while the card serves them.
Reconfigure the card's partition when the card changes project. Enable this
only where projects may share partitions or the subnet manager assigns
PKeys per virtual function on its own.

Related options:

* ``report_infiniband``
"""),
    cfg.StrOpt('nvidia_smi_path',
               default='nvidia-smi',
               help="""
The ``nvidia-smi`` binary used to list MIG devices.

Possible values:

* a command name looked up in ``PATH``, or an absolute path. When it does
  not exist, the host is taken to have no MIG devices.

Related options:

* ``report_mig``, ``nvidia_smi_timeout``
"""),
    cfg.IntOpt('nvidia_smi_timeout',
               default=10,
               min=1,
               help="""
Seconds to wait for ``nvidia-smi -L``. On a timeout or an error the MIG
devices seen last are reported again and a warning is logged.

Possible values:

* a positive number of seconds

Related options:

* ``nvidia_smi_path``
"""),
    cfg.StrOpt('nvidia_binding',
               default='auto',
               choices=[
                   ('auto', 'CDI when the daemon has the gpu_cdi API '
                            'extension, else nvidia.runtime'),
                   ('cdi', 'always CDI; nova-compute refuses to start on a '
                           'daemon without gpu_cdi'),
                   ('runtime', 'always nvidia.runtime (libnvidia-container)'),
               ],
               help="""
How NVIDIA GPUs and MIG devices are bound into containers.

With CDI (Container Device Interface, LXD 5.21.3 and 6.2 or later) each
device is named by its UUID (``id=nvidia.com/gpu=GPU-<uuid>``, MIG devices
``MIG-<uuid>``) and the daemon brings the matching NVIDIA user space; the
container gets no ``nvidia.runtime``. Without it (LXD 5.0, every Incus
release) whole GPUs are pinned by PCI address and MIG devices by
``mig.uuid`` with ``nvidia.runtime=true``. The mode in use is logged when
nova-compute starts; a daemon with CDI also gives the compute node the
``CUSTOM_LXD_CDI`` trait.

Related options:

* ``report_mig``
"""),
    cfg.StrOpt('state_dir',
               default='/var/lib/nova/nova-lxd-accel',
               help="""
Directory of the GPU state file (``gpu-state.json``): operator holds,
units waiting for release verification, and the observed usage per
instance. nova-compute and the ``nova-lxd-accel gpu``, ``usage``, ``idle``
and ``doctor`` commands read and write the same file, so it must be on the
compute host's local disk and writable by nova-compute.

Related options:

* ``probe_interval``
"""),
    cfg.IntOpt('probe_interval',
               default=0,
               min=0,
               help="""
Least number of seconds between two GPU probes (``nvidia-smi --query-gpu``
and ``--query-compute-apps``). The probe runs from nova's
``update_available_resource`` periodic task before nova takes its resource
tracker lock (``[DEFAULT] update_resources_interval`` sets that period);
``update_provider_tree`` then uses its result. It drives the health gate,
release verification, usage accounting and the idle report.

Possible values:

* 0: probe every period
* a positive number of seconds: skip the periods that come sooner

Related options:

* ``nvidia_smi_path``, ``idle_report_after``, ``metrics_file``
"""),
    cfg.IntOpt('release_memory_tolerance_mib',
               default=64,
               min=0,
               help="""
How many MiB above its baseline a released GPU may still use and count as
clean. The baseline is the lowest memory use seen while the GPU was free.
Until a released GPU shows no compute process and memory within this
tolerance it stays ``reserved`` in Placement.

Related options:

* ``probe_interval``
"""),
    cfg.BoolOpt('verified_release',
                default=True,
                help="""
Whether a GPU unit (a whole GPU, a MIG device, a slot of a shared GPU) an
instance releases is verified clean before it is offered again, and whether
NVIDIA GPUs that cannot be probed are held back.

When enabled (the default), a released unit stays ``reserved`` in Placement
until the probe (``nvidia-smi``) shows no process and no memory of the last
instance on it; the check runs as soon as the container is gone and waits up
to ``release_wait`` seconds, so a clean unit is schedulable again when the
delete ends. An NVIDIA GPU the probe cannot read (``nvidia-smi`` missing,
failing or timing out ``probe_failures_before_hold`` times in a row) is
held, with the trait ``CUSTOM_GPU_UNPROBEABLE``, until the probe answers
again, because a unit given out there could never be verified at release.

When disabled, released units are offered again at once and GPUs are
offered whether or not they can be probed. This risks handing the next
tenant a GPU that a leftover process still uses, with the previous
tenant's data in its memory. Disable it only where ``nvidia-smi`` cannot
run on the host and that risk is accepted.

Related options:

* ``release_wait``, ``release_recheck_interval``,
  ``probe_failures_before_hold``
"""),
    cfg.FloatOpt('release_wait',
                 default=5.0,
                 min=0.0,
                 help="""
Seconds the driver waits, when it removes a container that held GPU units,
for the container's processes to leave those GPUs. The probe runs right
after the container is gone and again every half second until every unit
is clean or this time is up. A clean unit is marked clean before the
delete ends, so nova's update of Placement after the delete already offers
it. A unit still in use after this wait stays reserved and is re-checked
every ``release_recheck_interval`` seconds.

Related options:

* ``verified_release``, ``release_recheck_interval``
"""),
    cfg.FloatOpt('release_recheck_interval',
                 default=1.0,
                 min=0.5,
                 help="""
Seconds before the first re-check of released GPU units that were not
clean when their container was removed. The re-check runs in its own
thread, outside nova's resource tracker lock, only while some unit waits;
when a unit turns clean nova's resource update runs at once, so the unit
is offered again without waiting for nova's periodic task. While no unit
turns clean the wait doubles after each re-check, up to
``release_recheck_max_interval``; it starts again from this value when a
unit turns clean or another is released.

Related options:

* ``release_wait``, ``release_recheck_max_interval``
"""),
    cfg.FloatOpt('release_recheck_max_interval',
                 default=30.0,
                 min=0.5,
                 help="""
The longest wait between two re-checks of released GPU units that stay
dirty (a leftover process that does not end, a wedged GPU): the re-check's
wait grows from ``release_recheck_interval`` to this and stays there until
a unit turns clean. Such a unit is offered again at most this long after
its last process ends.

Related options:

* ``release_recheck_interval``
"""),
    cfg.IntOpt('probe_failures_before_hold',
               default=3,
               min=1,
               help="""
How many GPU probes in a row may fail (``nvidia-smi`` exits with an error,
prints something unreadable or does not answer within
``nvidia_smi_timeout``) before the host's NVIDIA GPUs are held as
unprobeable. A missing ``nvidia-smi`` holds them at once. The hold lifts by
itself at the first probe that answers again.

Related options:

* ``verified_release``, ``nvidia_smi_timeout``
"""),
    cfg.IntOpt('idle_report_after',
               default=86400,
               min=0,
               help="""
Seconds a GPU bound to a running instance may show no compute process
before it is reported idle (log warning, ``nova-lxd-accel idle``, metrics).
Nothing is done to the instance.

Possible values:

* 0: never report idle GPUs
* a positive number of seconds (default: one day)

Related options:

* ``probe_interval``
"""),
    cfg.IntOpt('usage_retention',
               default=90 * 86400,
               min=0,
               help="""
Seconds a GPU unit's usage record (allocated and busy seconds, energy) is
kept in the GPU state file after its last accounting, once its instance no
longer holds the unit; older records are pruned at the next write of the
state file. It must cover how far back accounting reads: cASO's
extraction (records of instances that ended since its last run, and the
month a record falls in) from the files ``nova-lxd-accel usage --export``
writes. A unit still bound is never pruned.

Possible values:

* 0: never prune
* a positive number of seconds (default: 90 days, a month's records with
  room for a cASO that stopped for weeks)

Related options:

* ``state_dir``
"""),
    cfg.StrOpt('metrics_file',
               default=None,
               help="""
Path of a Prometheus text file rewritten after each GPU probe, for
node_exporter's textfile collector (for instance
``/var/lib/prometheus/node-exporter/nova_lxd_accel.prom``). Unset: no file.

Related options:

* ``probe_interval``, ``energy_uuid_label``
"""),
    cfg.StrOpt('energy_uuid_label',
               default='uuid',
               regex=r'^(?!(?:instance|job|pci|project|unit)$)(?!__)'
                     r'[a-zA-Z_][a-zA-Z0-9_]*$',
               help="""
Name of the label that carries the instance UUID in the per-instance GPU
power and energy metrics of ``metrics_file``
(``nova_lxd_accel_gpu_power_microwatts`` and
``nova_lxd_accel_gpu_energy_joules_total``). It must be what the
accounting reads: cASO's ``[prometheus] vm_uuid_label_name`` (whose default
is ``uuid``, the default here too). A Prometheus label name; not
``instance`` or ``job`` (Prometheus sets those on every scraped series) nor
``pci``, ``project`` or ``unit`` (the metrics' other labels).

Related options:

* ``metrics_file``
"""),
    cfg.StrOpt('kernel_log',
               default='/dev/kmsg',
               help="""
Where the GPU probe reads the NVIDIA driver's Xid messages (``NVRM: Xid
(PCI:0000:3b:00): 79, ...``): the kernel's ring buffer ``/dev/kmsg``
(nova-compute needs read access to it: root, or ``CAP_SYSLOG`` when
``kernel.dmesg_restrict`` is 1), or a file holding ``dmesg`` output (lines
with the ``[seconds]`` since-boot prefix). A GPU with a new Xid listed in
``fatal_xids`` is held as unhealthy, as for uncorrectable ECC errors.
Empty: Xid messages are not read.

Related options:

* ``fatal_xids``, ``xid_max_age``
"""),
    cfg.ListOpt('fatal_xids',
                item_type=cfg.types.Integer(min=1),
                default=[48, 62, 64, 74, 79, 92, 95, 119, 120, 140, 154],
                help="""
Xid codes that hold a GPU as unhealthy. The default is the codes for which
NVIDIA's Xid catalog asks to reset the GPU or restart the node: 48 (double
bit ECC error), 62 (internal micro-controller halt), 64 (ECC page
retirement or row remapping failure), 74 (NVLink error), 79 (fallen off the
bus), 92 (high single-bit ECC error rate), 95 (uncontained ECC error), 119
and 120 (GSP timeout and error), 140 (unrecovered ECC error), 154 (GPU
recovery action changed). Codes that only need the application restarted
(13, 31, 43, 45, 94, ...) are not there: they are the tenant's.

Related options:

* ``kernel_log``
"""),
    cfg.IntOpt('xid_max_age',
               default=86400,
               min=0,
               help="""
Seconds: a fatal Xid logged longer ago than this when the probe first
reads it is ignored (on a host that has been up for weeks, an Xid from
before the GPU was last reset must not hold it again). Xids already acted
on are remembered in the state file, so an operator's ``gpu release`` is
not undone by the same message.

Possible values:

* 0: every fatal Xid since boot counts
* a positive number of seconds (default: one day)

Related options:

* ``kernel_log``
"""),
    cfg.ListOpt('shared_gpus',
                default=[],
                help="""
GPUs shared by several instances, each ``<PCI address>:<slots>[:<mode>]``
or ``<model>:<slots>[:<mode>]`` (the model as nvidia-smi names it, other
characters than letters and digits turned into ``_``), for instance
``0000:3b:00.0:4:quota,NVIDIA_A10:8``. A shared GPU is reported to
Placement as a provider of its own with ``CUSTOM_GPU_SHARE`` (total =
slots) and ``CUSTOM_GPU_MEMORY_MB`` (the card's memory), never as a whole
GPU, and it is not split into MIG devices. An instance gets it pinned by
PCI address.

The mode says how the card is shared; one card is never shared both ways:

* ``timeslice`` (the default when no mode is given): the instances take
  turns; no flavor on the card may set ``lxd:gpu_memory_mb``. The provider
  has the trait ``CUSTOM_GPU_SHARING_TIMESLICE``.
* ``quota``: every instance is bound to the GPU's NVIDIA MPS control
  daemon, which the operator runs, with the memory quota of its flavor;
  every flavor on the card must set ``lxd:gpu_memory_mb``. The provider
  has the trait ``CUSTOM_GPU_SHARING_QUOTA``.

Flavors require the trait of their mode in the request group of their
slot (``trait:CUSTOM_GPU_SHARING_TIMESLICE=required``, or
``trait1:CUSTOM_GPU_SHARING_QUOTA=required`` beside
``resources1:CUSTOM_GPU_SHARE`` and ``resources1:CUSTOM_GPU_MEMORY_MB``;
``nova-lxd-accel flavors`` writes them), so Placement never offers a card
of the other mode; a share whose flavor does not match its card is
refused at spawn and rescheduled.

Related options:

* ``shared_gpu_any_project``
* ``mps_pipe_directory``
"""),
    cfg.BoolOpt('shared_gpu_any_project',
                default=False,
                help="""
Let instances of different projects share one GPU at the same time. By
default a shared GPU serves the instances of one project at a time: the
claim refuses an instance of a second project and Nova reschedules it.
Sharing isolates neither GPU memory contents against a faulty driver nor
timing side channels, so enable this only where projects trust each other.
It applies to time-sliced instances only: instances with a GPU memory or
compute quota share the MPS daemon's ``/dev/shm`` and pipe directory, so
they never share a GPU with another project.

Related options:

* ``shared_gpus``
"""),
    cfg.StrOpt('mps_pipe_directory',
               default='/run/nvidia-mps-{pci}',
               help="""
Pipe directory of the NVIDIA MPS control daemon of a shared GPU
(``CUDA_MPS_PIPE_DIRECTORY``); ``{pci}`` is replaced by the GPU's PCI
address. It is mounted into instances with a GPU memory or compute quota.

Related options:

* ``shared_gpus``, ``mps_shm_directory``
"""),
    cfg.StrOpt('mps_shm_directory',
               default='/run/nvidia-mps-{pci}-shm',
               help="""
The shared memory directory of the NVIDIA MPS control daemon of a shared
GPU: the daemon's ``/dev/shm`` (start it in its own mount namespace with
this directory bound on ``/dev/shm``). MPS clients and server exchange
memory there, so it is mounted as ``/dev/shm`` into instances with a GPU
memory or compute quota. Never the host's own ``/dev/shm``: instances would
see the shared memory of every host process. ``{pci}`` is replaced by the
GPU's PCI address.

Related options:

* ``mps_pipe_directory``
"""),
]


def register_opts(conf):
    conf.register_group(accelerators_group)
    conf.register_opts(ALL_OPTS, group=accelerators_group)


def list_opts():
    return [(accelerators_group, ALL_OPTS)]
