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

"""The driver's parts, built in one place.

Every part gets its collaborators as constructor arguments here, in the
order they depend on each other: the daemon client first, the container
names (:class:`.spec.identity.Owner`), the host side (ports, volumes), the
accelerators (what was reported, the GPU gate, the inventory, the one
claim), and last the instance operations that use them all.
"""

import dataclasses
import functools

from nova import context as nova_context

from nova_lxd_accel.accel import claims as accel_claims
from nova_lxd_accel.accel import gpu_gate
from nova_lxd_accel.accel import inventory as accel_inventory
from nova_lxd_accel.accel import nova_lookups
from nova_lxd_accel import client as lxd_client
from nova_lxd_accel import image as lxd_image
from nova_lxd_accel import lifecycle as lxd_lifecycle
from nova_lxd_accel import migration as lxd_migration
from nova_lxd_accel import network
from nova_lxd_accel import plumbing as lxd_plumbing
from nova_lxd_accel.spec import identity
from nova_lxd_accel import volumes as lxd_volumes


def update_resources(virtapi, host):
    """Run nova's resource update now, as its periodic task would.

    A GPU unit released dirty turned clean after its delete ended
    (:mod:`.accel.gpu_gate`'s re-check): Placement offers it at once.
    nova's VirtAPI gives drivers no public way to ask for that update.
    """
    tracker = getattr(getattr(virtapi, '_compute', None), 'rt', None)
    if tracker is not None:
        tracker.update_available_resource(
            nova_context.get_admin_context(), host)


@dataclasses.dataclass(frozen=True)
class Parts(object):
    """One host's parts, each built with the ones it uses."""

    owner: identity.Owner
    client: lxd_client.LXDClient
    images: lxd_image.ImageCache
    networking: network.Networking
    volumes: lxd_volumes.Volumes
    plumbing: lxd_plumbing.HostPlumbing
    gate: gpu_gate.GpuGate
    inventory: accel_inventory.AcceleratorInventory
    claims: accel_claims.Claims
    lifecycle: lxd_lifecycle.Lifecycle
    migration: lxd_migration.Migration

    @classmethod
    def build(cls, conf, virtapi, host, client=None):
        """The parts of nova-compute ``host``.

        :param client: the daemon client to use (one is made from
            ``[lxd]`` when not given).
        """
        client = client or lxd_client.LXDClient(conf)
        owner = identity.Owner.from_conf(conf, host)
        images = lxd_image.ImageCache(client)
        networking = network.Networking(client, conf, virtapi)
        volumes = lxd_volumes.Volumes(client, conf)
        plumbing = lxd_plumbing.HostPlumbing(networking, volumes)
        reported = accel_inventory.ReportedGpus()
        gate = gpu_gate.GpuGate(
            conf, client.list_containers, reported.gpus,
            functools.partial(nova_lookups.nova_instance_projects, host),
            on_clean=functools.partial(update_resources, virtapi, host))
        inventory = accel_inventory.AcceleratorInventory(
            client.resources, conf=conf,
            list_instances=client.list_all_instances,
            is_ours=owner.is_ours, gate=gate, reported=reported)
        # one claim for spawn, resize and migration; never a dirty unit
        claims = accel_claims.Claims(
            client, conf, inventory.device_for_provider,
            inventory.all_devices, gate.unavailable_units,
            on_bound=gate.note_bound,
            dirty_projects=gate.dirty_share_projects)
        lifecycle = lxd_lifecycle.Lifecycle(
            client, conf, images, plumbing=plumbing, claims=claims,
            gpu_gate=gate)
        migration = lxd_migration.Migration(
            client, conf, owner, lifecycle, claims, plumbing)
        return cls(owner=owner, client=client, images=images,
                   networking=networking, volumes=volumes,
                   plumbing=plumbing, gate=gate, inventory=inventory,
                   claims=claims, lifecycle=lifecycle, migration=migration)
