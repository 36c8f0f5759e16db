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

"""Checks of a compute host: what is wrong and how to fix it.

Every check is a pure function of a :class:`HostView` (what
``nova-lxd-accel doctor`` gathered: the daemon's ``GET /1.0`` answer, its
``/1.0/resources``, a GPU probe snapshot, ``nvidia-smi -L``, the GPU state
file, and files under a root directory: ``/proc``, ``/sys``, ``/etc/cdi``)
and returns :class:`Finding` objects. A recorded host is a directory tree
plus saved answers, so every check is tested on recorded host states.
"""

import dataclasses
import glob
import os
import typing

from nova_lxd_accel.accel.binding import sharing
from nova_lxd_accel.accel.health import gate_state
from nova_lxd_accel.accel.health import probe
from nova_lxd_accel.accel.inventory import discovery
from nova_lxd_accel.accel.inventory import lxd_resources
from nova_lxd_accel.accel.inventory import mps_partitioning
from nova_lxd_accel.accel.inventory import nvidia_smi
from nova_lxd_accel.accel.inventory import shared_gpus
from nova_lxd_accel import daemon as lxd_daemon
from nova_lxd_accel import placement_names

OK = 'ok'
INFO = 'info'
WARN = 'warning'
ERROR = 'error'
_RANK = {OK: 0, INFO: 0, WARN: 1, ERROR: 2}


@dataclasses.dataclass(frozen=True)
class Finding:
    check: str
    status: str
    message: str
    fix: str = ''

    def as_dict(self):
        return dataclasses.asdict(self)


@dataclasses.dataclass
class HostView:
    """What the checks look at.

    :ivar root: prefix of ``/proc``, ``/sys``, ``/etc`` paths ('/' live).
    :ivar server_info: ``GET /1.0`` metadata, or None.
    :ivar server_error: why the daemon could not be asked, or None.
    :ivar pool_error: why the storage pool is unusable, or None (not
        checked when ``pool_checked`` is False).
    :ivar start_checked: whether the daemon went through nova-compute's
        own check (:func:`nova_lxd_accel.host.check_daemon`): a live host.
    :ivar start_error: why that check refuses the daemon, or None.
    """

    conf: object
    root: str = '/'
    server_info: typing.Optional[dict] = None
    server_error: typing.Optional[str] = None
    pool_checked: bool = False
    pool_error: typing.Optional[str] = None
    start_checked: bool = False
    start_error: typing.Optional[str] = None
    resources: typing.Optional[dict] = None
    snapshot: object = None
    mig_text: typing.Optional[str] = None
    state: typing.Optional[dict] = None
    now: float = 0.0

    def path(self, *parts):
        return os.path.join(self.root, *[p.lstrip('/') for p in parts])

    def exists(self, *parts):
        return os.path.exists(self.path(*parts))

    def read(self, *parts):
        try:
            with open(self.path(*parts), encoding='utf-8',
                      errors='replace') as f:
                return f.read()
        except OSError:
            return None

    def gpus(self):
        return lxd_resources.parse_gpus(self.resources or {})

    def nvidia_gpus(self):
        return [g for g in self.gpus() if g.is_nvidia]

    def ib_cards(self):
        return lxd_resources.parse_ib_cards(self.resources or {})


def check_daemon(view):
    if view.server_error:
        return [Finding('daemon', ERROR, 'the LXD daemon is not reachable: '
                        '%s' % view.server_error,
                        'start it (systemctl start snap.lxd.daemon or lxd) '
                        'or set [lxd] endpoint')]
    info = view.server_info or {}
    daemon = lxd_daemon.DaemonInfo.from_server_info(info)
    out = [Finding('daemon', OK, '%s %s reachable' % (daemon.name,
                                                      daemon.version))]
    missing = daemon.missing_required()
    if missing:
        out.append(Finding(
            'daemon-extensions', ERROR, 'API extensions missing: %s' %
            ', '.join('%s (first in %s)' % m for m in missing),
            'upgrade %s to 5.0 or later' % daemon.name))
    else:
        out.append(Finding('daemon-extensions', OK,
                           'every required API extension is present'))
    if view.start_checked:
        if view.start_error:
            out.append(Finding(
                'daemon-usable', ERROR, 'nova-compute refuses this daemon at '
                'its start: %s' % view.start_error,
                'fix what it names: nova-compute makes the same check'))
        else:
            out.append(Finding('daemon-usable', OK, "nova-compute's start-up "
                               'check of the daemon passes'))
    if view.pool_checked:
        if view.pool_error:
            out.append(Finding('storage-pool', ERROR, view.pool_error,
                               'create the pool or set [lxd] storage_pool'))
        else:
            out.append(Finding('storage-pool', OK, 'storage pool "%s" exists'
                               % view.conf.lxd.storage_pool))
    subuid = view.read('/etc/subuid')
    if subuid is None:
        out.append(Finding('idmap', INFO, 'no /etc/subuid: the daemon uses '
                           'its own default user-id map'))
    elif not any(line.split(':')[0] in ('root', 'lxd')
                 for line in subuid.splitlines()):
        out.append(Finding(
            'idmap', WARN, '/etc/subuid has no range for root: unprivileged '
            'containers get a small default map',
            'add "root:1000000:1000000000" to /etc/subuid and /etc/subgid'))
    else:
        out.append(Finding('idmap', OK, '/etc/subuid has a range for root'))
    return out


def _nvidia_driver(view):
    version = view.read('/proc/driver/nvidia/version')
    if version:
        first = version.splitlines()[0]
        return ' '.join(first.split()[:8])
    if view.exists('/sys/module/nvidia'):
        return 'nvidia module %s' % (
            (view.read('/sys/module/nvidia/version') or 'loaded').strip())
    return None


def _cdi_specs(view):
    found = []
    for directory in ('/etc/cdi', '/var/run/cdi'):
        for path in sorted(glob.glob(view.path(directory, '*'))):
            try:
                with open(path, encoding='utf-8', errors='replace') as f:
                    if 'nvidia.com/gpu' in f.read():
                        found.append('%s/%s' % (directory,
                                                os.path.basename(path)))
            except OSError:
                continue
    return found


def check_nvidia(view):
    gpus = view.nvidia_gpus()
    if not view.gpus():
        return [Finding('gpu', INFO, 'no GPU: this host has no GPU, nothing '
                        'to check for GPUs')]
    if not gpus:
        return [Finding('gpu', INFO, '%d GPU(s), none from NVIDIA' %
                        len(view.gpus()))]
    out = [Finding('gpu', OK, '%d NVIDIA GPU(s): %s' % (
        len(gpus), ', '.join('%s %s' % (g.pci_address, g.model or
                                        g.product or g.product_id or '?')
                             for g in gpus)))]
    driver = _nvidia_driver(view)
    if driver:
        out.append(Finding('nvidia-driver', OK, driver))
    else:
        out.append(Finding('nvidia-driver', ERROR,
                           'NVIDIA GPUs but no NVIDIA kernel driver loaded',
                           'install the NVIDIA driver and load it '
                           '(modprobe nvidia)'))
    specs = _cdi_specs(view)
    toolkit = any(view.exists(d, 'nvidia-container-cli')
                  for d in ('/usr/bin', '/usr/local/bin'))
    if specs:
        out.append(Finding('nvidia-cdi', OK, 'CDI spec: %s' %
                           ', '.join(specs)))
    elif toolkit:
        out.append(Finding('nvidia-cdi', OK, 'NVIDIA container toolkit '
                           '(nvidia-container-cli) for nvidia.runtime'))
    else:
        out.append(Finding(
            'nvidia-cdi', WARN, 'no CDI spec in /etc/cdi or /var/run/cdi and '
            'no nvidia-container-cli: containers cannot get the NVIDIA user '
            'space (lxd:gpu_runtime=nvidia, MIG devices)',
            'install nvidia-container-toolkit and run "nvidia-ctk cdi '
            'generate --output=/etc/cdi/nvidia.yaml"'))
    snapshot = view.snapshot
    if snapshot is None or not snapshot.available:
        out.append(Finding(
            'nvidia-smi', ERROR, 'nvidia-smi did not answer (%s): health, '
            'release verification and usage are unknown' % (
                getattr(snapshot, 'error', None) or 'not run'),
            'install the NVIDIA driver utilities or set [lxd_accelerators] '
            'nvidia_smi_path'))
        return out
    listed = nvidia_smi.parse_list(view.mig_text or '')
    slices = sum(len(g.mig_devices) for g in listed)
    for pci, facts in sorted(snapshot.gpus.items()):
        mode = (facts.mig_mode or '').lower()
        if mode == 'enabled':
            mine = [g for g in listed if g.uuid == facts.uuid]
            count = sum(len(g.mig_devices) for g in mine) if mine else slices
            if not count:
                out.append(Finding(
                    'mig', WARN, 'GPU %s is in MIG mode with no MIG device: '
                    'nothing of it can be scheduled' % pci,
                    'create GPU and compute instances (nvidia-smi mig -cgi '
                    '<profiles> -C) or disable MIG (nvidia-smi -i %s -mig 0)'
                    % pci))
            else:
                out.append(Finding('mig', OK, 'GPU %s: MIG mode, %d MIG '
                                   'device(s)' % (pci, count)))
    if not view.conf.lxd_accelerators.report_mig and slices:
        out.append(Finding(
            'nova-conf', WARN, '%d MIG devices exist but [lxd_accelerators] '
            'report_mig = false: their GPUs are offered whole and cannot be '
            'bound' % slices, 'set [lxd_accelerators] report_mig = true'))
    return out


def check_iommu_and_vfs(view):
    groups = glob.glob(view.path('/sys/kernel/iommu_groups', '*'))
    vfs = [vf for card in view.ib_cards() for vf in card.vfs]
    vfs += [vf for gpu in view.gpus() for vf in gpu.vfs]
    if groups:
        return [Finding('iommu', OK, 'IOMMU on (%d groups); %d SR-IOV VF(s)'
                        % (len(groups), len(vfs)))]
    if vfs:
        return [Finding('iommu', WARN, '%d SR-IOV VF(s) but no IOMMU group' %
                        len(vfs), 'boot with intel_iommu=on iommu=pt (or '
                        'amd_iommu=on)')]
    return [Finding('iommu', INFO, 'IOMMU off; no SR-IOV VF in use')]


def check_infiniband(view):
    cards = view.ib_cards()
    if not cards:
        return [Finding('infiniband', INFO, 'no InfiniBand card')]
    out = []
    if not view.exists('/sys/module/ib_core'):
        out.append(Finding('infiniband', ERROR, '%d InfiniBand card(s) but '
                           'ib_core is not loaded' % len(cards),
                           'modprobe ib_core ib_uverbs mlx5_ib'))
    if not view.exists('/sys/module/ib_uverbs'):
        out.append(Finding('infiniband', WARN, 'ib_uverbs is not loaded: '
                           'containers get no verbs device',
                           'modprobe ib_uverbs'))
    ports = [p for c in cards for p in c.ports]
    bindable = [p for p in ports if p.netdev]
    if not bindable and not any(v.netdevs for c in cards for v in c.vfs):
        out.append(Finding('infiniband', WARN, 'no InfiniBand port or VF has '
                           'a network device: nothing can be bound',
                           'load the IPoIB driver (modprobe ib_ipoib)'))
    if not out:
        out.append(Finding('infiniband', OK, '%d card(s), %d port(s) with a '
                           'network device' % (len(cards), len(bindable))))
    return out


def check_cgroup(view):
    controllers = view.read('/sys/fs/cgroup/cgroup.controllers')
    if controllers is None:
        return [Finding('cgroup', WARN, 'cgroup v1: device control by the '
                        'devices controller only',
                        'boot with systemd.unified_cgroup_hierarchy=1')]
    return [Finding('cgroup', OK, 'cgroup v2 (device control by eBPF); '
                    'controllers: %s' % controllers.strip())]


def check_nova_conf(view):
    out = []
    group = view.conf.lxd_accelerators
    present = {g.pci_address for g in view.gpus()}
    present |= {c.pci_address for c in view.ib_cards()}
    present |= {vf.pci_address for c in view.ib_cards() for vf in c.vfs}
    options = discovery.Options.from_conf(view.conf)
    for address in sorted(options.excluded_pci_addresses - present):
        out.append(Finding('nova-conf', WARN, '[lxd_accelerators] '
                           'excluded_pci_addresses lists %s, which this host '
                           'does not have' % address,
                           'remove it from excluded_pci_addresses'))
    ignored = sorted({g.vendor_id for g in view.gpus()
                      if g.vendor_id in ('10de', '1002')} -
                     options.gpu_vendor_ids)
    if ignored:
        out.append(Finding('nova-conf', WARN, 'GPUs of vendor(s) %s are '
                           'present but not in [lxd_accelerators] '
                           'gpu_vendor_ids: not reported' % ', '.join(
                               ignored), 'add them to gpu_vendor_ids'))
    if view.nvidia_gpus() and group.report_mig and view.snapshot is not None \
            and view.snapshot.error == probe.NO_NVIDIA_SMI:
        out.append(Finding('nova-conf', ERROR, '[lxd_accelerators] '
                           'nvidia_smi_path %s does not exist' %
                           group.nvidia_smi_path,
                           'set nvidia_smi_path to the nvidia-smi binary'))
    if not out:
        out.append(Finding('nova-conf', OK, 'nova.conf agrees with the host'))
    return out


def check_gpu_states(view):
    state = view.state or {}
    pcis = [g.pci_address for g in view.gpus()]
    if not pcis and not state.get('holds'):
        return []
    out = []
    for pci, hold in sorted(state.get('holds', {}).items()):
        users = sorted({u.get('instance') for u in state.get(
            'bound', {}).values() if u.get('pci') == pci})
        on = ('; instances still on it: %s' % ', '.join(users)) if users \
            else ''
        if hold.get('kind') == gate_state.KIND_UNPROBEABLE:
            out.append(Finding('gpu-unprobeable', ERROR, 'GPU %s is not '
                               'offered: %s%s' % (pci, hold.get('reason'), on),
                               'make nvidia-smi answer on this host (install '
                               'or repair the NVIDIA driver, or set '
                               '[lxd_accelerators] nvidia_smi_path); the hold '
                               'lifts at the next probe that answers'))
        elif hold.get('gone'):
            out.append(Finding('gpu-gone', ERROR, 'GPU %s is gone: nvidia-smi '
                               'no longer lists it (%s)%s' % (
                                   pci, hold.get('reason'), on),
                               'check "dmesg" for NVRM Xid 79 (fallen off '
                               'the bus); reset the GPU or reboot the host, '
                               'then "nova-lxd-accel gpu release %s --reason '
                               '..."' % pci))
        elif hold.get('kind') == gate_state.KIND_UNHEALTHY:
            out.append(Finding('gpu-health', ERROR, 'GPU %s is unhealthy: %s'
                               '%s' % (pci, hold.get('reason'), on),
                               'repair or reset it (nvidia-smi -r -i %s), '
                               'then "nova-lxd-accel gpu release %s --reason '
                               '..."' % (pci, pci)))
        else:
            out.append(Finding('gpu-held', INFO, 'GPU %s is held: %s%s' % (
                pci, hold.get('reason'), on), '"nova-lxd-accel gpu release '
                '%s --reason ..." when done' % pci))
    for key, unit in sorted(state.get('dirty', {}).items()):
        out.append(Finding('gpu-dirty', WARN, '%s of GPU %s (released by '
                           'instance %s) is not clean: %s' % (
                               key, unit.get('pci'), unit.get('instance'),
                               unit.get('holding')),
                           'end the process nvidia-smi shows on it, or '
                           'recreate the MIG device; it is schedulable again '
                           'once clean (or, once checked by other means, '
                           '"nova-lxd-accel gpu forget %s --reason ...")'
                           % key))
    for unit in gate_state.idle_units(state, view.conf, view.now):
        out.append(Finding('gpu-idle', WARN, 'GPU %s of instance %s '
                           '(project %s) idle for %.1f h' % (
                               unit['pci'], unit['instance'],
                               unit['project'], unit['idle_s'] / 3600.0),
                           'ask the project whether it still needs it'))
    if not out:
        out.append(Finding('gpu-states', OK, 'no GPU held, dirty, unhealthy '
                           'or idle'))
    return out


def check_shared_gpus(view):
    """Shared GPUs: their slots in use, and their MPS directories."""
    group = view.conf.lxd_accelerators
    if not group.shared_gpus:
        return []
    try:
        shared_gpus.parse_shared_gpus(group.shared_gpus)
    except ValueError as exc:
        return [Finding('gpu-shared', ERROR, str(exc),
                        'write each entry as <PCI address or model>:<slots>')]
    bound = list((view.state or {}).get('bound', {}).values())
    out = []
    for gpu in view.gpus():
        slots = shared_gpus.shared_slots(group.shared_gpus, gpu.pci_address,
                                         gpu.model or gpu.product)
        if not slots:
            continue
        users = {}
        for unit in bound:
            if unit.get('pci') == gpu.pci_address and \
                    unit.get('resource_class') == placement_names.SHARE_RC:
                project = unit.get('project') or '?'
                users[project] = users.get(project, 0) + 1
        used = ', '.join('%d by project %s' % (n, p)
                         for p, n in sorted(users.items())) or 'none used'
        out.append(Finding('gpu-shared', INFO, 'GPU %s shared in %d slots: '
                           '%s' % (gpu.pci_address, slots, used)))
        for option in ('mps_pipe_directory', 'mps_shm_directory'):
            path = sharing.pipe_directory(getattr(group, option),
                                          gpu.pci_address)
            if not view.exists(path):
                out.append(Finding(
                    'gpu-shared', WARN, '%s %s of GPU %s does not exist: '
                    'instances with lxd:gpu_memory_mb or '
                    'lxd:gpu_compute_percent cannot boot on it' % (
                        option, path, gpu.pci_address),
                    'start the GPU\'s MPS control daemon (admin guide, GPU '
                    'sharing), or offer it without quotas only'))
    if not out:
        out.append(Finding('gpu-shared', WARN, '[lxd_accelerators] '
                           'shared_gpus matches no GPU of this host',
                           'check the PCI addresses and model names '
                           '(nova-lxd-accel inventory)'))
    return out


def check_mps_partitioning(view):
    """What MPS v3 memory partitioning this host could use, if it shares.

    Reported, not used: the driver's memory quota is the MPS v2 client
    limit (``lxd:gpu_memory_mb``) on every host today.
    """
    if not view.conf.lxd_accelerators.shared_gpus or \
            not view.nvidia_gpus():
        return []
    level, reasons = mps_partitioning.probe(
        lambda path: view.read(path))
    return [Finding('mps-v3', INFO, 'MPS v3 memory partitioning: %s (%s); '
                    'the driver uses the MPS v2 client limits' % (
                        level, '; '.join(reasons)))]


#: NVIDIA's MIG capability files (MIG user guide, "Device Nodes and
#: Capabilities"): each names its /dev/nvidia-caps node by minor number.
MIG_CAPABILITIES = ('/proc/driver/nvidia/capabilities/mig/config',
                    '/proc/driver/nvidia/capabilities/mig/monitor')
#: nvidia.ko's capability mode: 1 devfs (the default), 0 procfs.
CAPS_DEVFS_PARAM = '/sys/module/nvidia/parameters/nv_cap_enable_devfs'


def _device_file_minor(text):
    for line in (text or '').splitlines():
        name, _sep, value = line.partition(':')
        if name.strip() == 'DeviceFileMinor' and value.strip().isdigit():
            return int(value.strip())
    return None


def check_mig_capabilities(view):
    """MIG isolation needs the capability device nodes (devfs mode).

    Only on a host with a GPU in MIG mode. Never an error: where the files
    do not tell, the finding says so (a GPU machine confirms them with
    tools/gpu-acceptance.sh).
    """
    snapshot = view.snapshot
    gpus = getattr(snapshot, 'gpus', None) or {}
    if not any((facts.mig_mode or '').lower() == 'enabled'
               for facts in gpus.values()):
        return []
    fix = ('load nvidia with nv_cap_enable_devfs=1 (the default) and create '
           'the nodes: nvidia-modprobe -f %s -f %s' % MIG_CAPABILITIES)
    if (view.read(CAPS_DEVFS_PARAM) or '').strip() == '0':
        return [Finding('mig-capabilities', WARN, 'the NVIDIA driver is in '
                        'procfs capability mode (nv_cap_enable_devfs=0): '
                        'MIG access is granted through /proc, not by the '
                        'device nodes LXD gives each container', fix)]
    missing = []
    for path in MIG_CAPABILITIES:
        minor = _device_file_minor(view.read(path))
        if minor is None:
            return [Finding('mig-capabilities', WARN, 'cannot tell the MIG '
                            'capability mode: %s is missing or names no '
                            'DeviceFileMinor' % path, fix)]
        node = '/dev/nvidia-caps/nvidia-cap%d' % minor
        if not view.exists(node):
            missing.append(node)
    if missing:
        return [Finding('mig-capabilities', WARN, 'MIG capability device '
                        'nodes missing: %s' % ', '.join(missing), fix)]
    return [Finding('mig-capabilities', OK, 'MIG capabilities in devfs mode '
                    '(/dev/nvidia-caps)')]


CHECKS = (check_daemon, check_nvidia, check_iommu_and_vfs, check_infiniband,
          check_cgroup, check_nova_conf, check_shared_gpus,
          check_mps_partitioning, check_mig_capabilities, check_gpu_states)


def run(view):
    findings = []
    for check in CHECKS:
        findings.extend(check(view))
    return findings


def worst(findings):
    return max((f.status for f in findings), key=lambda s: _RANK[s],
               default=OK)
