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

"""Host facts: is the daemon usable, what the host has, the root provider.

The daemon is LXD or Incus (:mod:`nova_lxd_accel.daemon`); every message
names the command of the one in use.
"""

import json
import platform
import re
import typing

import os_resource_classes as orc
from oslo_log import log as logging

from nova_lxd_accel.accel.binding import cdi
from nova_lxd_accel.accel import gate_seams
from nova_lxd_accel.container import builder
from nova_lxd_accel import daemon as lxd_daemon
from nova_lxd_accel import exception
from nova_lxd_accel.instance import guest
from nova_lxd_accel.instance import watcher

LOG = logging.getLogger(__name__)

MIB = 1024 * 1024
GIB = 1024 * MIB


def check_lxd(client, conf):
    """Fail with every missing piece named, and how to fix it."""
    info = client.server_info()
    daemon = client.daemon_info()
    problems = []
    for ext, since in daemon.missing_required():
        problems.append('API extension %s is missing (%s %s is too old; '
                        'first in %s)' % (ext, daemon.name, daemon.version,
                                          since))
    if info.get('auth') != 'trusted':
        problems.append('this client is not trusted by %s (add its '
                        'certificate with `%s`)' % (
                            daemon.name, daemon.cli(
                                'trust_add', file=conf.lxd.client_cert or
                                '<client certificate>')))
    pool = conf.lxd.storage_pool
    try:
        client.storage_pool(pool)
    except exception.LXDObjectNotFound:
        problems.append('storage pool "%s" does not exist (create it with '
                        '`%s` or set [lxd] storage_pool)'
                        % (pool, daemon.cli('storage_create', pool=pool)))
    project = conf.lxd.project
    if project != 'default':
        try:
            client.project(project)
        except exception.LXDObjectNotFound:
            problems.append('project "%s" does not exist (create it with '
                            '`%s` or set [lxd] project)'
                            % (project, daemon.cli('project_create',
                                                   project=project)))
    binding_problem = cdi.problem(
        conf.lxd_accelerators.nvidia_binding, daemon)
    if binding_problem:
        problems.append(binding_problem)
    if conf.lxd.profiles:
        known = set(client.profile_names())
        unknown = [name for name in conf.lxd.profiles if name not in known]
        if unknown:
            problems.append('profiles %s do not exist (create them or remove '
                            'them from [lxd] profiles)' % ', '.join(unknown))
    if problems:
        raise exception.DaemonNotUsable(daemon=daemon.name,
                                        endpoint=client.endpoint,
                                        reason='; '.join(problems))
    return info


def check_daemon(client, conf):
    """The one check of the daemon: nova-compute's at its start, doctor's.

    :func:`check_lxd` (extensions, trust, storage pool, project, GPU
    binding, profiles), then :func:`check_profiles` and the pool's driver.

    :returns: (``GET /1.0`` metadata, ``profile_masks`` of the profiles,
        the storage pool's driver).
    :raises: DaemonNotUsable or LXDNotReady, naming what to fix.
    """
    info = check_lxd(client, conf)
    masks = check_profiles(client, conf)
    return info, masks, pool_driver(client, conf)


def pool_driver(client, conf):
    """The driver of ``[lxd] storage_pool`` (``dir``, ``btrfs``, ...)."""
    return client.storage_pool(conf.lxd.storage_pool).get('driver')


def features_in_use(daemon, conf):
    """Feature -> how it is served on this host (for the start-up line)."""
    accel = conf.lxd_accelerators
    nvidia = cdi.resolve(accel.nvidia_binding, daemon)
    if not accel.report_mig:
        mig = 'off'
    elif not daemon.supports('mig'):
        mig = 'unsupported'
    else:
        mig = nvidia.name
    interval = conf.lxd.lifecycle_poll_interval
    return {
        'MIG binding': mig,
        'CDI': 'yes' if nvidia.cdi else (
            'available' if daemon.has(cdi.EXT_GPU_CDI) else 'no'),
        'InfiniBand': 'yes' if accel.report_infiniband and daemon.supports(
            'infiniband') else 'no',
        'migration': 'yes' if daemon.supports('migration') and
        conf.lxd_migration.client_cert else 'no',
        'events': _events_mode(conf.lxd, interval),
    }


def _events_mode(lxd_conf, interval):
    if not interval:
        return 'off'
    if lxd_conf.lifecycle_events:
        return 'stream (poll every %ss without one)' % interval
    return 'poll every %ss' % interval


def startup_line(daemon, conf):
    """The one line nova-compute logs about its daemon when it starts."""
    features = features_in_use(daemon, conf)
    return ('Using %s at %s, project %s; features: %s' % (
        daemon.describe(), daemon.endpoint, conf.lxd.project,
        ', '.join('%s=%s' % item for item in features.items())))


#: Root-provider traits saying what the daemon can do. A cloud mixing LXD
#: and Incus hosts can require or forbid them in flavors.
TRAIT_DAEMON_PREFIX = 'CUSTOM_LXD_DAEMON_'
#: ``CUSTOM_LXD_STORAGE_<driver>``: the driver of ``[lxd] storage_pool``,
#: so a flavor can ask for it (``trait:CUSTOM_LXD_STORAGE_ZFS=required``
#: where root_gb must be a hard limit, say).
TRAIT_STORAGE_PREFIX = 'CUSTOM_LXD_STORAGE_'
TRAIT_CDI = 'CUSTOM_LXD_CDI'
TRAIT_MIG_CDI = 'CUSTOM_LXD_MIG_CDI'
_MANAGED_EXACT = (TRAIT_CDI, TRAIT_MIG_CDI)


def daemon_traits(daemon, pool_driver=None):
    """``CUSTOM_LXD_DAEMON_<LXD|INCUS>`` plus one trait per capability.

    :param pool_driver: the driver of ``[lxd] storage_pool`` (``dir``,
        ``btrfs``, ...): ``CUSTOM_LXD_STORAGE_<DRIVER>``; None: no trait.
    """
    traits = {TRAIT_DAEMON_PREFIX + daemon.server.upper()}
    if pool_driver:
        traits.add(TRAIT_STORAGE_PREFIX +
                   re.sub('[^A-Z0-9_]', '_', pool_driver.upper()))
    if daemon.has(cdi.EXT_GPU_CDI):
        traits.add(TRAIT_CDI)
    if daemon.has(cdi.EXT_GPU_MIG_CDI):
        traits.add(TRAIT_MIG_CDI)
    return frozenset(traits)


def apply_daemon_traits(provider_tree, nodename, daemon, pool_driver=None):
    """Set :func:`daemon_traits` on the root provider, drop stale ones.

    Other traits (nova's own, an operator's) are left alone.
    """
    want = daemon_traits(daemon, pool_driver)
    current = provider_tree.data(nodename).traits
    stale = {t for t in current
             if (t.startswith((TRAIT_DAEMON_PREFIX, TRAIT_STORAGE_PREFIX)) or
                 t in _MANAGED_EXACT) and t not in want}
    if stale:
        provider_tree.remove_traits(nodename, *stale)
    if not provider_tree.has_traits(nodename, want):
        provider_tree.add_traits(nodename, *want)


def hypervisor_type(server_info):
    """``lxc`` on LXD (as before), ``incus`` on Incus.

    ``supported_instances`` stays ``lxc`` on both, as the images and the
    containers are the same: images with ``hypervisor_type=lxc`` boot on
    either. The compute node's own ``hypervisor_type`` tells them apart
    (``openstack hypervisor list``, ``capabilities:hypervisor_type``).
    """
    server = ((server_info or {}).get('environment') or {}).get('server')
    return 'incus' if server == lxd_daemon.SERVER_INCUS else 'lxc'


# What [lxd] profiles may give every instance: an allow-list, since a
# profile reaches every container behind the flavor's and the operator's
# back. Config keys by prefix; the security switches only when off.
_SAFE_CONFIG_PREFIXES = (
    'limits.', 'boot.', 'user.', 'environment.', 'cloud-init.',
    'snapshots.', 'migration.', 'linux.sysctl.', 'security.idmap.',
    'security.protection.')
_SAFE_CONFIG_KEYS = ('security.devlxd', 'security.guestapi')
_OFF_ONLY = ('security.privileged', 'security.nesting',
             'security.syscalls.intercept.')
# NIC types that connect a container to a network without handing it a
# host device (physical and sriov ones come from Neutron and Placement).
_SAFE_NICTYPES = ('bridged', 'macvlan', 'ipvlan', 'routed', 'p2p', 'ovn')


def _unsafe_config(key, value):
    """Why an ``[lxd] profiles`` config key is unsafe, or None."""
    if key.startswith('raw.'):
        return 'raw LXC/AppArmor/seccomp/idmap passthrough'
    truthy = lxd_daemon.is_true(value)
    if key.startswith(_OFF_ONLY):
        if truthy:
            return 'only a flavor the operator allows may ask for it'
        return None
    if key.startswith(_SAFE_CONFIG_PREFIXES) or key in _SAFE_CONFIG_KEYS:
        return None
    return ('not a key a profile may set for every instance (limits, '
            'boot, user and environment keys, sysctls, idmap and '
            'protection settings are)')


def _unsafe_device(device):
    """Why an ``[lxd] profiles`` device is unsafe, or None."""
    kind = device.get('type')
    if kind == 'none':
        return None
    if kind == 'nic':
        nictype = device.get('nictype')
        if device.get('network') and not nictype or \
                nictype in _SAFE_NICTYPES:
            return None
        return ('a %s NIC hands a host device to every instance (ports '
                'come from Neutron)' % (nictype or 'untyped'))
    if kind == 'disk':
        source = str(device.get('source') or '')
        if device.get('pool') and not source.startswith('/'):
            return None
        return ('a disk that is not a storage pool volume gives every '
                'instance a host path')
    if kind in ('gpu', 'infiniband', 'pci', 'usb'):
        return ('%s devices are bound from Placement allocations only, '
                'one instance at a time' % kind)
    return ('a %s device reaches the host from every instance (the LXD '
            'socket, host devices)' % kind)


def unsafe_profile_content(profile):
    """[(what, why)] for each unsafe config key or device of a profile."""
    found = []
    for key, value in sorted((profile.get('config') or {}).items()):
        why = _unsafe_config(key, value)
        if why:
            found.append(('config %s=%s' % (key, value), why))
    for name, device in sorted((profile.get('devices') or {}).items()):
        why = _unsafe_device(device)
        if why:
            found.append(('device %s (type %s)' % (name, device.get('type')),
                          why))
    return found


# raw.* keys a container can neutralise with a value of its own (LXD drops
# an empty instance value, so the profile's would stay): a comment line is
# valid LXC configuration and AppArmor policy. raw.idmap and raw.seccomp
# have no such neutral value: they are refused even in strip mode.
_NEUTRAL_RAW = {'raw.lxc': '# stripped by nova-lxd-accel',
                'raw.apparmor': '# stripped by nova-lxd-accel'}


def _mask_value(key):
    """The instance value that overrides an unsafe profile key, or None."""
    if key.startswith('raw.'):
        return _NEUTRAL_RAW.get(key)
    if key.startswith(_OFF_ONLY):
        return 'false'
    return None


def profile_masks(profiles):
    """What the driver sets on each container to strip unsafe content.

    :param profiles: the ``[lxd] profiles`` records, in order.
    :returns: (config, device names): config keys with the value that
        overrides the profile's (a comment for ``raw.lxc`` and
        ``raw.apparmor``, ``false`` for the security keys), and the
        devices to mask with an LXD ``none`` device.
    """
    config, devices = {}, set()
    for profile in profiles:
        for key, value in (profile.get('config') or {}).items():
            if _unsafe_config(key, value) and _mask_value(key) is not None:
                config[key] = _mask_value(key)
        for name, device in (profile.get('devices') or {}).items():
            if _unsafe_device(device):
                devices.add(name)
    return config, sorted(devices)


def check_profiles(client, conf):
    """Refuse, or plan to strip, unsafe content of ``[lxd] profiles``.

    Every instance gets these profiles, so a ``gpu`` device, a ``proxy``
    to the LXD socket, a host path, a ``raw.*`` key or
    ``security.privileged`` in one of them would escape the flavor's
    limits and the operator's ``allow_*`` options: what a profile may hold
    is an allow-list (:func:`unsafe_profile_content`).

    :returns: ``profile_masks`` of the profiles (empty when they are safe)
        with ``[lxd] unsafe_profile_content = strip``.
    :raises: LXDNotReady naming each profile, key and device, with
        ``refuse`` (the default).
    """
    profiles = [client.profile(name) for name in conf.lxd.profiles]
    strip = conf.lxd.unsafe_profile_content == 'strip'
    problems, stripped = [], []
    for profile in profiles:
        for what, why in unsafe_profile_content(profile):
            text = 'profile %s has %s: %s' % (profile.get('name'), what, why)
            key = what.split(' ', 1)[1].split('=', 1)[0]
            if strip and (what.startswith('device ') or
                          _mask_value(key) is not None):
                stripped.append(text)
            else:
                problems.append(text)
    if problems:
        how = ('remove it from the profile or drop the profile from [lxd] '
               'profiles' if strip else
               'remove it from the profile, drop the profile from [lxd] '
               'profiles, or set [lxd] unsafe_profile_content = strip')
        if strip:
            problems.append('other raw.* keys than raw.lxc and '
                            'raw.apparmor, and keys off the allow-list, '
                            'cannot be stripped')
        raise exception.LXDNotReady(
            endpoint=client.endpoint,
            reason='%s. Fix: %s' % ('; '.join(problems), how))
    if not stripped:
        return {}, []
    LOG.warning('Stripping unsafe content of [lxd] profiles from every '
                'instance: %s', '; '.join(stripped))
    return profile_masks(profiles)


def hypervisor_version(server_info):
    """LXD 5.0.2 -> 5000002, the integer form nova stores."""
    version = server_info.get('environment', {}).get('server_version', '0')
    parts = [int(part) for part in version.split('.')[:3] if part.isdigit()]
    parts += [0] * (3 - len(parts))
    return parts[0] * 1000000 + parts[1] * 1000 + parts[2]


def _pool_space(client, pool):
    try:
        space = client.storage_pool_resources(pool).get('space', {})
    except exception.LXDOperationFailed as exc:
        LOG.warning('Cannot read the size of storage pool %(pool)s: %(exc)s',
                    {'pool': pool, 'exc': exc})
        return 0, 0
    return space.get('total', 0) // GIB, space.get('used', 0) // GIB


def available_resource(client, conf, nodename, server_info, resources):
    """The dict nova's resource tracker wants from get_available_resource."""
    cpu = resources.get('cpu', {})
    memory = resources.get('memory', {})
    disk_total, disk_used = _pool_space(client, conf.lxd.storage_pool)
    arch = cpu.get('architecture') or platform.machine()
    return {
        'vcpus': cpu.get('total', 0),
        'memory_mb': memory.get('total', 0) // MIB,
        'local_gb': disk_total,
        'vcpus_used': 0,
        'memory_mb_used': memory.get('used', 0) // MIB,
        'local_gb_used': disk_used,
        'hypervisor_type': hypervisor_type(server_info),
        'hypervisor_version': hypervisor_version(server_info),
        'hypervisor_hostname': nodename,
        'cpu_info': json.dumps({'arch': arch,
                                'topology': {'sockets': len(
                                    cpu.get('sockets') or [1])}}),
        'disk_available_least': disk_total - disk_used,
        'supported_instances': [(arch, 'lxc', 'exe')],
        'numa_topology': None,
    }


def root_inventory(resource, reserved_disk_gb, ratios, conf):
    """VCPU / MEMORY_MB / DISK_GB of the compute node provider.

    A class whose total reads as 0 (say, the pool size is unknown) is left
    out: Placement refuses empty inventories.
    """
    inventory = {
        orc.VCPU: {
            'total': resource['vcpus'], 'min_unit': 1,
            'max_unit': resource['vcpus'], 'step_size': 1,
            'allocation_ratio': ratios[orc.VCPU],
            'reserved': conf.reserved_host_cpus,
        },
        orc.MEMORY_MB: {
            'total': resource['memory_mb'], 'min_unit': 1,
            'max_unit': resource['memory_mb'], 'step_size': 1,
            'allocation_ratio': ratios[orc.MEMORY_MB],
            'reserved': conf.reserved_host_memory_mb,
        },
        orc.DISK_GB: {
            'total': resource['local_gb'], 'min_unit': 1,
            'max_unit': max(resource['local_gb'], 1), 'step_size': 1,
            'allocation_ratio': ratios[orc.DISK_GB],
            'reserved': reserved_disk_gb,
        },
    }
    return {rc: inv for rc, inv in inventory.items() if inv['total'] > 0}


def uptime():
    """Like the ``uptime`` command's first line, from /proc."""
    with open('/proc/uptime') as handle:
        seconds = float(handle.read().split()[0])
    with open('/proc/loadavg') as handle:
        load = handle.read().split()[:3]
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    return 'up %d days, %d:%02d, load average: %s' % (
        days, hours, rest // 60, ', '.join(load))


class Host(object):
    """The host one nova-compute drives, as nova libvirt's ``host.Host``.

    It holds what the driver learns of the host at ``init_host`` and keeps
    between calls: the daemon's facts (its ``GET /1.0`` answer, the masks
    of its profiles, the storage pool's driver), the policy containers are
    built under, each instance's :class:`.guest.Guest`, the lifecycle
    watcher, and the root provider's resources as the last
    ``get_available_resource`` read them.

    :param client: the daemon client.
    :param conf: the configuration (nova's, with this driver's groups).
    :param owner: the host's :class:`.identity.Owner`.
    :param gate: the GPU gate (:class:`.gate_seams.GoneGate`), told by the
        lifecycle watcher first when one of ours is removed behind nova's
        back (its ``note_gone``), or None.
    """

    def __init__(self, client, conf, owner,
                 gate: typing.Optional[gate_seams.GoneGate] = None):
        self._client = client
        self._conf = conf
        self._owner = owner
        self._gate = gate
        self._server_info = {}
        self._profile_masks = None
        self._pool_driver = None
        self._resource = None
        self.watcher = None

    @property
    def nodename(self):
        return self._owner.host

    def check(self):
        """Check the daemon, its profiles and its storage pool.

        :raises: the project's exceptions, saying what to fix.
        """
        self._server_info, self._profile_masks, self._pool_driver = (
            check_daemon(self._client, self._conf))
        LOG.info('%s', startup_line(self._client.daemon_info(), self._conf))

    def start_watcher(self, emit):
        """Start (or start again) the lifecycle watcher; it sends to emit."""
        self.stop_watcher()
        lxd = self._conf.lxd
        self.watcher = watcher.LifecycleWatcher(
            self._client, self._owner, lxd.lifecycle_poll_interval, emit,
            use_events=lxd.lifecycle_events,
            max_backoff=lxd.lifecycle_events_max_backoff,
            gate=self._gate)
        self.watcher.start()

    def stop_watcher(self):
        if self.watcher is not None:
            self.watcher.stop()
            self.watcher = None

    def guest(self, instance):
        """The :class:`.guest.Guest` of ``instance`` on this host."""
        return guest.Guest(self._client, self._conf, instance)

    def policy(self):
        """The :class:`.builder.HostPolicy` containers are built under."""
        # before init_host (a tool, a spawn in a process of its own) the
        # daemon is asked: Incus refuses LXD's guest API key
        info = self._server_info or self._client.server_info()
        daemon = lxd_daemon.DaemonInfo.from_server_info(info)
        return builder.HostPolicy.from_conf(
            self._conf, host=self.nodename,
            profile_masks=self._profile_masks,
            guest_api_key=daemon.guest_api_key)

    def read_resource(self, resources):
        """The root provider's resources from a fresh ``/1.0/resources``."""
        self._resource = available_resource(
            self._client, self._conf, self.nodename,
            self._server_info or self._client.server_info(), resources)
        return self._resource

    def update_root_provider(self, provider_tree, resources,
                             reserved_disk_gb, ratios):
        """The root provider's inventory and the daemon's traits.

        Under nova's resource tracker lock: it reads the daemon only when
        no ``get_available_resource`` ran yet in this process.

        :param ratios: callable(inventory) -> allocation ratio per class
            (nova's ``_get_allocation_ratios``).
        """
        nodename = self.nodename
        resource = self._resource or self.read_resource(resources)
        current = provider_tree.data(nodename).inventory
        merged = dict(current)
        merged.update(root_inventory(resource, reserved_disk_gb,
                                     ratios(current), self._conf))
        provider_tree.update_inventory(nodename, merged)
        apply_daemon_traits(provider_tree, nodename,
                            self._client.daemon_info(),
                            pool_driver=self._pool_driver)
