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

"""Host facts: is LXD usable, what the host has, the root provider."""

import json
import platform

import os_resource_classes as orc
from oslo_log import log as logging

from nova_lxd_accel import client as lxd_client
from nova_lxd_accel import exception

LOG = logging.getLogger(__name__)

MIB = 1024 * 1024
GIB = 1024 * MIB


def check_lxd(client, conf):
    """Fail with every missing piece named, and how to fix it."""
    info = client.server_info()
    problems = []
    missing = [ext for ext in lxd_client.REQUIRED_EXTENSIONS
               if ext not in info.get('api_extensions', [])]
    if missing:
        problems.append('API extensions %s are missing (LXD %s is too old; '
                        'install LXD 5.0 or later)'
                        % (', '.join(missing),
                           info.get('environment', {}).get('server_version')))
    if info.get('auth') != 'trusted':
        problems.append('this client is not trusted by LXD (add its '
                        'certificate with `lxc config trust add`)')
    pool = conf.lxd.storage_pool
    try:
        client.storage_pool(pool)
    except exception.LXDObjectNotFound:
        problems.append('storage pool "%s" does not exist (create it with '
                        '`lxc storage create %s dir` or set [lxd] '
                        'storage_pool)' % (pool, pool))
    project = conf.lxd.project
    if project != 'default':
        try:
            client.project(project)
        except exception.LXDObjectNotFound:
            problems.append('project "%s" does not exist (create it with '
                            '`lxc project create %s` or set [lxd] project)'
                            % (project, project))
    if conf.lxd.profiles:
        known = set(client.profile_names())
        unknown = [name for name in conf.lxd.profiles if name not in known]
        if unknown:
            problems.append('profiles %s do not exist (create them or remove '
                            'them from [lxd] profiles)' % ', '.join(unknown))
    if problems:
        raise exception.LXDNotReady(endpoint=client.endpoint,
                                    reason='; '.join(problems))
    return info


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
        'hypervisor_type': 'lxc',
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
