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

"""Accelerator claims that cannot collide.

Placement counts units; when a provider has several (7 MIG devices of one
GPU, 8 InfiniBand VFs of one card) the driver chooses which. A claim is:

1. under :data:`CLAIM_LOCK`, read every instance of the daemon (all
   projects, containers and VMs, devices from profiles included: see
   :func:`nova_lxd_accel.accel.binding.held_units`);
2. pick free units (:func:`nova_lxd_accel.accel.binding.bind`);
3. still under the lock, write the devices and their record
   (``user.nova_lxd_accel.devices``) into the already created, stopped
   container on the daemon, guarded by its ETag.

So the daemon itself is the durable record of every claim: the next
claim, in this process or in a nova-compute restarted in between, sees
it. The lock covers only these three steps, never the image download or
import, the container's creation or its start.
"""

from oslo_concurrency import lockutils
from oslo_log import log as logging

from nova_lxd_accel.accel import binding
from nova_lxd_accel import exception

LOG = logging.getLogger(__name__)

#: Serialises the read-pick-record step of every claim of this process.
CLAIM_LOCK = 'lxd-accel-binding'


def claim(client, name, allocations, device_for_provider,
          host_devices=(), instance=None, project=None):
    """Bind the units of ``allocations`` into the existing container.

    :param name: the container (created and stopped).
    :param device_for_provider: callable(rp_uuid) -> device reported there.
    :param host_devices: the host's accelerator devices, to resolve every
        GPU selector foreign instances use.
    :returns: the :class:`~nova_lxd_accel.accel.binding.Binding`.
    :raises: AcceleratorUnavailable, AcceleratorNotBindable,
        ContainerNotFound.
    """
    with lockutils.lock(CLAIM_LOCK):
        records = client.list_all_instances()
        held = binding.held_units(records, exclude=(project, name),
                                  host_devices=host_devices)
        bound = binding.bind(allocations, device_for_provider or
                             (lambda rp_uuid: None), held)
        if bound.units:
            record(client, name, bound, instance)
    binding.log_bound(LOG, bound, instance)
    return bound


def record(client, name, bound, instance=None):
    """Write a binding's devices and record into the container."""
    def change(config, devices):
        config.update(bound.config)
        devices.update(bound.devices)

    if client.modify_container(name, change) is None:
        raise exception.ContainerNotFound(
            instance_id=getattr(instance, 'uuid', None), container=name)
