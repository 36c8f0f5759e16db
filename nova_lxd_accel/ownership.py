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

"""Which LXD instances are ours: defined once, for every caller.

An instance is *ours* (an instance of this nova-compute) when it is in the
configured LXD project and its config names this host
(``user.nova_lxd_accel.host``) and an instance uuid. Rescue containers are
ours too but stand for their instance's container, so the lists nova sees
(:func:`instances`) leave them out. Everything else on the daemon (other
projects, other hosts' containers, VMs and containers made by hand) is
*foreign*: the accelerator units it holds are never bound and are reported
reserved.

Used by the driver (``list_instances``), :mod:`nova_lxd_accel.events`,
:mod:`nova_lxd_accel.accel.reconcile` and the accelerator inventory.
"""

from nova_lxd_accel import config as lxd_config


def is_ours(record, host, project=None):
    """Whether an LXD instance record belongs to this nova-compute.

    :param project: the configured LXD project; records without a
        ``project`` field (listed in one project) are taken as in it.
    """
    config = record.get('config') or {}
    if project is not None and \
            record.get('project', project) != project:
        return False
    return bool(config.get(lxd_config.KEY_HOST) == host and
                config.get(lxd_config.KEY_INSTANCE_UUID))


def is_rescue(record):
    return bool((record.get('config') or {}).get(lxd_config.KEY_RESCUE_OF))


def instances(records, host, project=None):
    """Our instances' own containers (rescue containers left out)."""
    return [r for r in records
            if is_ours(r, host, project) and not is_rescue(r)]


def instance_uuid(record):
    return (record.get('config') or {}).get(lxd_config.KEY_INSTANCE_UUID)
