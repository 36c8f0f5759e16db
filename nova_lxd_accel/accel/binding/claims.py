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
   :func:`nova_lxd_accel.accel.units.held_units`), and then, still under
   the lock, add the units released but not yet verified clean and those
   of containers removed behind nova's back (the GPU gate's
   :meth:`~nova_lxd_accel.accel.gate_seams.ClaimGate.unavailable_units`,
   read from the ledger, the GPU state file, after the listing): a claim
   picks by identity, never a dirty unit, whatever Placement counts;
2. pick free units (:func:`nova_lxd_accel.accel.binding.pick.bind`),
   the gate refusing each held GPU the pick looks up
   (:meth:`~nova_lxd_accel.accel.gate_seams.ClaimGate.check_bindable`);
3. still under the lock (the body of :func:`claiming`), write the
   devices and their record (the binding record key) into the already created,
   stopped container on the daemon, guarded by its ETag (a migration writes its
   whole new config there instead); a write that finds no container fails the
   claim.

Spawn, unshelve, evacuation, resize and cold migration all claim through
:meth:`Claims.holding`, the one context manager.

So the daemon itself is the durable record of every claim: the next
claim, in this process or in a nova-compute restarted in between, sees
it. The lock covers only these three steps, never the image download or
import, the container's creation or its start.
"""

import contextlib
import dataclasses
import typing

from oslo_concurrency import lockutils
from oslo_log import log as logging

from nova_lxd_accel.accel.binding import binding_record
from nova_lxd_accel.accel.binding import cdi
from nova_lxd_accel.accel.binding import mps_environment
from nova_lxd_accel.accel.binding import pick
from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel import gate_seams
from nova_lxd_accel.accel import units
from nova_lxd_accel.container import builder
from nova_lxd_accel import exception

LOG = logging.getLogger(__name__)

#: Serialises the read-pick-record step of every claim of this process.
CLAIM_LOCK = 'lxd-accel-binding'


def share_request(conf, instance):
    """The :class:`.pick.ShareRequest` of an instance (no projects yet).

    :param conf: ConfigOpts with ``[lxd_accelerators]``.
    """
    flavor = getattr(instance, 'flavor', None)
    specs = dict(getattr(flavor, 'extra_specs', None) or {})

    def number(key):
        value = specs.get(key)
        return int(value) if value not in (None, '') else None

    group = conf.lxd_accelerators
    project_id = None
    if instance is not None and (
            not hasattr(instance, 'obj_attr_is_set') or
            instance.obj_attr_is_set('project_id')):
        project_id = instance.project_id
    return pick.ShareRequest(
        project_id=project_id,
        any_project=group.shared_gpu_any_project,
        vf_any_project=group.infiniband_vf_any_project,
        memory_mb=number('lxd:gpu_memory_mb'),
        compute_percent=number('lxd:gpu_compute_percent'),
        mps_pipe=group.mps_pipe_directory,
        mps_shm=group.mps_shm_directory,
        shared_gpus=tuple(group.shared_gpus or ()),
        flavor=getattr(flavor, 'name', None))


def with_projects(share, records, exclude, dirty=None):
    """``share`` knowing the projects already on each shared GPU.

    :param dirty: shared GPU -> projects of its slots released and not
        yet verified clean: they count as on the card.
    """
    if share is None:
        return None
    projects = units.share_projects(records, exclude=exclude)
    for pci, names in (dirty or {}).items():
        projects.setdefault(pci, set()).update(names)
    return dataclasses.replace(share, projects=projects)


@contextlib.contextmanager
def claiming(client, name, allocations, device_for_provider,
             host_devices=(), instance=None, project=None, share=None,
             gate: typing.Optional[gate_seams.ClaimGate] = None,
             nvidia=cdi.RUNTIME, ib_ports=False):
    """Pick the units of ``allocations``; the body writes them, locked.

    Yields the :class:`.binding_record.Binding`; the body of the ``with``
    runs under :data:`CLAIM_LOCK` and writes the binding into the
    container (:func:`record`, or a migration's whole new config). A body
    that raises fails the claim and writes nothing else.

    :param name: the container (created and stopped).
    :param device_for_provider: callable(rp_uuid) -> device reported there.
    :param host_devices: the host's accelerator devices, to resolve every
        GPU selector foreign instances use.
    :param share: a :class:`.pick.ShareRequest` (:func:`share_request`)
        for slots of shared GPUs.
    :param gate: the GPU gate (:class:`.gate_seams.ClaimGate`), or None:
        under the lock, after the listing, its ``unavailable_units`` (units
        no claim may pick: released and not yet verified clean) and its
        ``dirty_share_projects`` (shared GPU -> projects of its dirty
        slots) are read, and its ``check_bindable`` is asked of each
        device the pick looks up (a held GPU fails the claim).
    :param nvidia: the :class:`.cdi.NvidiaBinding` of the daemon.
    :param ib_ports: whole InfiniBand ports may be bound
        (``[lxd_accelerators] report_infiniband_ports``).
    :raises: AcceleratorUnavailable, AcceleratorNotBindable.
    """
    with lockutils.lock(CLAIM_LOCK):
        records = client.list_all_instances()
        held = units.held_units(records, exclude=(project, name),
                                host_devices=host_devices)
        unavailable = None
        if gate is not None:
            # read after the listing, under the lock: a release written
            # before this point is seen, whatever the last probe said
            unavailable = gate.unavailable_units(records)
        for key, reasons in (unavailable or {}).items():
            held[key] = list(held.get(key, ())) + list(reasons)
        bound = pick.bind(allocations, _bindable(device_for_provider, gate),
                          held, nvidia=nvidia,
                          share=with_projects(
                              share, records, (project, name),
                              gate.dirty_share_projects(records)
                              if gate is not None else None),
                          ib_ports=ib_ports)
        yield bound
    binding_record.log_bound(LOG, bound, instance)


def _bindable(device_for_provider, gate):
    """``device_for_provider`` refusing, through ``gate``, a held GPU.

    :raises: GpuHeld (:meth:`.gate_seams.ClaimGate.check_bindable`).
    """
    def lookup(rp_uuid):
        device = device_for_provider(rp_uuid) \
            if device_for_provider is not None else None
        if device is not None and gate is not None:
            gate.check_bindable(device, rp_uuid)
        return device
    return lookup


def claim(client, name, allocations, device_for_provider, host_devices=(),
          **kwargs):
    """:func:`claiming` that records the binding in the container.

    :returns: the :class:`.binding_record.Binding`.
    :raises: as :func:`claiming`, and ContainerNotFound.
    """
    return _recorded(client, name, kwargs.get('instance'), claiming(
        client, name, allocations, device_for_provider, host_devices,
        **kwargs))


def _recorded(client, name, instance, holding, gate=None):
    """Record in ``name`` what a :func:`claiming` picks, under its lock.

    :param gate: the GPU gate (:class:`.gate_seams.ClaimGate`), told of
        the units once written (its ``note_bound``), or None.
    """
    with holding as bound:
        if bound.units:
            record(client, name, bound, instance)
            if gate is not None:
                gate.note_bound(name, getattr(instance, 'uuid', None),
                                bound.records())
    return bound


class Claims(object):
    """The host's one claim, built once with the host's parts.

    :param client: the :class:`nova_lxd_accel.client.LXDClient`.
    :param conf: ConfigOpts with ``[lxd]`` and ``[lxd_accelerators]``.
    :param reported: what the inventory reported
        (:class:`.devices.ReportedDevices`: the device under each provider,
        every device of the host), given whole.
    :param gate: the host's GPU gate, as a claim sees it
        (:class:`.gate_seams.ClaimGate`): read under the claim lock (see
        :func:`claiming`), asked whether each device looked up may be
        bound, and told of each binding written (see :func:`_recorded`);
        None: no unit is kept from a claim.
    """

    def __init__(self, client, conf, reported: devices.ReportedDevices,
                 gate: typing.Optional[gate_seams.ClaimGate] = None):
        self._client = client
        self._conf = conf
        self._reported = reported
        self._gate = gate

    def holding(self, name, allocations, instance):
        """:func:`claiming` for ``instance``'s allocations into ``name``.

        Spawn, unshelve and evacuation (:meth:`claim`), resize and
        migration (their whole new config) all claim through this.
        """
        return claiming(self._client, name, allocations,
                        self._reported.device_for_provider,
                        host_devices=self._reported.all_devices(),
                        instance=instance,
                        project=self._conf.lxd.project,
                        share=share_request(self._conf, instance),
                        gate=self._gate,
                        nvidia=cdi.for_client(self._client, self._conf),
                        ib_ports=self._ib_ports())

    def _ib_ports(self):
        """Whether whole InfiniBand ports may be bound (read per claim)."""
        return self._conf.lxd_accelerators.report_infiniband_ports

    @contextlib.contextmanager
    def rewriting(self, name, allocations, instance):
        """:meth:`holding` for a body that writes the whole new config.

        A resize or a migration writes its binding itself; once written,
        still under the lock, the gate is told (its ``note_bound``), as a
        spawn's claim tells it: a server of theirs deleted behind nova's
        back then leaves its units unavailable until verified clean, like
        any other.
        """
        with self.holding(name, allocations, instance) as bound:
            yield bound
            if bound.units and self._gate is not None:
                self._gate.note_bound(name, getattr(instance, 'uuid', None),
                                      bound.records())

    def claim(self, name, allocations, instance):
        """Bind and record ``instance``'s units in container ``name``.

        :returns: the :class:`.binding_record.Binding`.
        """
        return _recorded(self._client, name, instance,
                         self.holding(name, allocations, instance),
                         gate=self._gate)

    def prepare(self, name, allocations, instance):
        """The accelerators of a spawn, in stopped container ``name``.

        Binds and records the units ``allocations`` name, then writes the
        MPS client files the binding sets for logins, cron and services
        (:mod:`.mps_environment`); without a quota it removes those a
        snapshot image brought along.

        :returns: the :class:`.binding_record.Binding`
            (empty without accelerator allocations).
        """
        bound = binding_record.Binding()
        if wants_accelerators(allocations):
            bound = self.claim(name, allocations, instance)
        mps_environment.apply(
            self._client, name, bound.mps_variables, instance,
            clear=mps_environment.image_may_carry_files(instance))
        return bound


def wants_accelerators(allocations):
    """Whether ``allocations`` hold a unit of an accelerator class."""
    for alloc in (allocations or {}).values():
        for rc, amount in ((alloc or {}).get('resources') or {}).items():
            if amount and units.is_accelerator_class(rc):
                return True
    return False


def snapshot_properties(config):
    """Glance properties of a snapshot of a container with ``config``."""
    return mps_environment.snapshot_properties(config)


def record(client, name, bound, instance=None):
    """Write a binding's devices and record into the container.

    Through :func:`.builder.with_accelerators`, as a resize or a migration
    writes its new binding.
    """
    def change(config, devices):
        merged = builder.with_accelerators(
            {'config': config, 'devices': devices}, bound)
        config.update(merged['config'])
        devices.update(merged['devices'])

    if client.modify_container(name, change) is None:
        raise exception.ContainerNotFound(
            instance_id=getattr(instance, 'uuid', None), container=name)
