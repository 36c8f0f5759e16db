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

"""Who a container is: its keys, its names, and whether it is ours.

The one place that spells the ``user.nova_lxd_accel.*`` config keys and
the container-name rule. An instance is *ours* (an instance of this
nova-compute) when it is in the configured LXD project and its config
names this host (:data:`KEY_HOST`) and an instance uuid. Rescue containers
are ours too but stand for their instance's container, so the lists nova
sees (:meth:`Owner.instances`) leave them out. Everything else on the
daemon (other projects, other hosts' containers, VMs and containers made
by hand) is *foreign*: the accelerator units it holds are never bound and
are reported reserved.
"""

import dataclasses
import json

# Keys the driver writes into ``user.*`` config to recognise its containers.
KEY_PREFIX = 'user.nova_lxd_accel.'
KEY_INSTANCE_UUID = KEY_PREFIX + 'instance_uuid'
KEY_HOST = KEY_PREFIX + 'host'
KEY_SUSPENDED = KEY_PREFIX + 'suspended'
KEY_RESCUE_OF = KEY_PREFIX + 'rescue_of'
#: A resize's kept original: the host it belongs to (instead of KEY_HOST).
KEY_BACKUP_OF = KEY_PREFIX + 'resize_backup_of'
#: The accelerator binding record (JSON list, see accel.binding).
KEY_DEVICES = KEY_PREFIX + 'devices'

#: Names of the devices an accelerator binding adds, by unit kind.
GPU_DEVICE_PREFIX = 'nova-gpu'
MIG_DEVICE_PREFIX = 'nova-mig'
IB_DEVICE_PREFIX = 'nova-ib'
SHARE_DEVICE_PREFIX = 'nova-gpushare'
ACCEL_DEVICE_PREFIXES = (GPU_DEVICE_PREFIX, MIG_DEVICE_PREFIX,
                         IB_DEVICE_PREFIX, SHARE_DEVICE_PREFIX)

#: Roles in a container's name (see container_name).
ROLE_RESCUE = 'rescue-'
ROLE_BACKUP = 'resize-'


def container_name(prefix, instance_uuid, role=''):
    """The container-name rule: prefix, role (rescue, backup), uuid."""
    return '%s%s%s' % (prefix, role, instance_uuid)


def is_ours(record, host, project=None):
    """Whether an LXD instance record belongs to this nova-compute.

    :param project: the configured LXD project; records without a
        ``project`` field (listed in one project) are taken as in it.
    """
    config = record.get('config') or {}
    if project is not None and \
            record.get('project', project) != project:
        return False
    return bool(config.get(KEY_HOST) == host and
                config.get(KEY_INSTANCE_UUID))


def is_rescue(record):
    return bool((record.get('config') or {}).get(KEY_RESCUE_OF))


def instances(records, host, project=None):
    """Our instances' own containers (rescue containers left out)."""
    return [r for r in records
            if is_ours(r, host, project) and not is_rescue(r)]


def instance_uuid(record):
    return (record.get('config') or {}).get(KEY_INSTANCE_UUID)


def recorded_units(config):
    """The accelerator binding record of a container config (dicts)."""
    raw = (config or {}).get(KEY_DEVICES)
    if not raw:
        return []
    try:
        records = json.loads(raw)
    except ValueError:
        return []
    if not isinstance(records, list):
        # a hand-edited key (``lxc config set``) must not break the host's
        # claims and reconcile: it reads as no record, like bad JSON
        return []
    return [r for r in records if isinstance(r, dict) and r.get('unit')]


@dataclasses.dataclass(frozen=True)
class Owner(object):
    """This nova-compute as the owner of containers: host, project, names.

    :ivar host: nova's host name, written into :data:`KEY_HOST`.
    :ivar project: the LXD project the driver works in.
    :ivar prefix: ``[lxd] container_name_prefix``.
    """

    host: str
    project: str = 'default'
    prefix: str = 'nova-'

    @classmethod
    def from_conf(cls, conf, host):
        return cls(host=host, project=conf.lxd.project,
                   prefix=conf.lxd.container_name_prefix)

    def container_name(self, instance_uuid):
        return container_name(self.prefix, instance_uuid)

    def rescue_name(self, instance_uuid):
        return container_name(self.prefix, instance_uuid, ROLE_RESCUE)

    def backup_name(self, instance_uuid):
        """The kept original of a resize or migration (see migration)."""
        return container_name(self.prefix, instance_uuid, ROLE_BACKUP)

    def is_ours(self, record):
        return is_ours(record, self.host, self.project)

    def instances(self, records):
        return instances(records, self.host, self.project)

    def instance_uuids(self, records):
        return [instance_uuid(record) for record in self.instances(records)]
