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
names (:class:`.container.identity.Owner`), the GPU gate (and what was
reported, which it judges), the host (:class:`.host.Host`: the one maker
of each instance's :class:`.guest.Guest` and of the policy containers are
built under), the host side (ports, volumes), the accelerator inventory and
the one claim, and last the instance operations that use them all.
"""

import dataclasses
import functools

from nova_lxd_accel.accel.binding import claims
from nova_lxd_accel.accel.binding import reconcile
from nova_lxd_accel.accel.health import gate
from nova_lxd_accel.accel.inventory import reporter
from nova_lxd_accel import client as lxd_client
from nova_lxd_accel.container import identity
from nova_lxd_accel import host as lxd_host
from nova_lxd_accel.hostside import network
from nova_lxd_accel.hostside import plumbing as lxd_plumbing
from nova_lxd_accel.hostside import volumes as lxd_volumes
from nova_lxd_accel.instance import image_cache
from nova_lxd_accel.instance import lifecycle as lxd_lifecycle
from nova_lxd_accel.instance import migration as lxd_migration
from nova_lxd_accel import nova_lookups


@dataclasses.dataclass(frozen=True)
class Parts(object):
    """One host's parts, each built with the ones it uses."""

    owner: identity.Owner
    client: lxd_client.LXDClient
    host: lxd_host.Host
    images: image_cache.ImageCache
    networking: network.Networking
    volumes: lxd_volumes.Volumes
    plumbing: lxd_plumbing.HostPlumbing
    gate: gate.GpuGate
    inventory: reporter.AcceleratorInventory
    claims: claims.Claims
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
        reported = reporter.ReportedGpus()
        gpu_gate = gate.GpuGate(
            conf, client.list_containers, reported.gpus,
            functools.partial(nova_lookups.nova_instance_projects, host),
            on_clean=functools.partial(nova_lookups.update_resources, virtapi,
                                       host))
        # the one maker of each instance's Guest and of the host policy
        host_part = lxd_host.Host(client, conf, owner, gate=gpu_gate)
        images = image_cache.ImageCache(client, conf)
        networking = network.Networking(client, conf, virtapi)
        volumes = lxd_volumes.Volumes(client, conf, host_part.guest)
        plumbing = lxd_plumbing.HostPlumbing(networking, volumes)
        inventory = reporter.AcceleratorInventory(
            client.resources, conf=conf,
            list_instances=client.list_all_instances,
            is_ours=owner.is_ours, reported=reported,
            on_reshaped=functools.partial(reconcile.move_providers, client))
        # one claim for spawn, resize and migration; never a dirty unit,
        # never a held GPU (the driver applies the gate to the provider
        # tree: the inventory never sees it)
        accel_claims = claims.Claims(client, conf, inventory, gate=gpu_gate)
        lifecycle = lxd_lifecycle.Lifecycle(
            client, conf, images, host_part, plumbing=plumbing,
            claims=accel_claims, gpu_gate=gpu_gate)
        migration = lxd_migration.Migration(
            client, conf, owner, lifecycle, accel_claims, plumbing,
            host_part)
        return cls(owner=owner, client=client, host=host_part, images=images,
                   networking=networking, volumes=volumes,
                   plumbing=plumbing, gate=gpu_gate, inventory=inventory,
                   claims=accel_claims, lifecycle=lifecycle,
                   migration=migration)
