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

"""Accelerator discovery and Placement inventory.

The driver owns one :class:`AcceleratorInventory`. Its own
``update_provider_tree`` asks it for the providers the host should have
(:meth:`~AcceleratorInventory.desired_from`), passes them through the GPU
gate, and has it write them into nova's tree
(:meth:`~AcceleratorInventory.write_tree`, a reshape included): the
inventory never sees the gate. The ``nova-lxd-accel inventory`` and
``flavors`` commands run the same two steps without a gate
(:meth:`~AcceleratorInventory.update_provider_tree`) on a scratch tree
(:func:`scratch_tree`, :func:`describe_host`, :func:`discovered_gpus`) and
print :meth:`describe`, never talking to Placement.

Modules: :mod:`.devices` (device objects), :mod:`.lxd_resources` and
:mod:`.nvidia_smi` (pure parsers), :mod:`.discovery` (joining and
filtering), :mod:`.provider_tree` (providers and applying them),
:mod:`.nova_lookups` (what is read from nova and Placement).
"""

import dataclasses
import time
import typing

from nova import exception as nova_exception
from oslo_log import log as logging

from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel.inventory import discovery
from nova_lxd_accel.accel.inventory import gpu_topology
from nova_lxd_accel.accel.inventory import nvidia_smi
from nova_lxd_accel.accel.inventory import provider_tree
from nova_lxd_accel.accel.inventory import reshape
from nova_lxd_accel.accel.inventory import shared_gpus
from nova_lxd_accel.accel import units
from nova_lxd_accel.container import identity
from nova_lxd_accel.extra_specs import sharing_modes
from nova_lxd_accel import nova_lookups
from nova_lxd_accel import placement_names

LOG = logging.getLogger(__name__)

INVENTORY_FIELDS = ('total', 'reserved', 'min_unit', 'max_unit',
                    'step_size', 'allocation_ratio')

#: the root provider's uuid in a scratch tree (:func:`scratch_tree`)
SCRATCH_ROOT_UUID = '00000000-0000-0000-0000-000000000000'


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """What the host looked like when it was last read.

    :ivar taken_at: ``time.monotonic()`` of the read.
    :ivar resources: the ``/1.0/resources`` answer.
    :ivar mig_text: ``nvidia-smi -L`` output.
    :ivar records: every instance of the daemon (all projects), or None
        when the inventory does not look at holders.
    """

    taken_at: float
    resources: dict
    mig_text: str
    records: typing.Optional[list]

    def age(self):
        """Seconds since the host was read."""
        return time.monotonic() - self.taken_at


class ReportedGpus(object):
    """The GPUs the inventory last reported; the GPU gate reads them.

    Made before both, so that each gets it as a constructor argument.
    """

    def __init__(self):
        self._gpus = ()

    def update(self, desired):
        """Take the GPUs of a :func:`.provider_tree.desired_providers`."""
        self._gpus = tuple(
            gpu for gpu in devices.physical_devices(
                p.device for p in desired.values())
            if isinstance(gpu, devices.Gpu))

    def gpus(self):
        return list(self._gpus)


class AcceleratorInventory(devices.ReportedDevices):
    """Reports the host's GPUs, MIG devices and InfiniBand cards.

    :param read_resources: zero-argument callable returning the metadata
        dict of a fresh ``GET /1.0/resources`` (a new object each call;
        pylxd's cached ``Client.resources`` is not fresh).
    :param list_mig_devices: zero-argument callable returning
        ``nvidia-smi -L`` output ('' when none, None when unknown this
        time); default runs ``[lxd_accelerators] nvidia_smi_path``.
    :param conf: ConfigOpts with ``nova_lxd_accel.conf`` registered.
    :param provider_allocations: callable(rp_uuid) returning
        ``{consumer_uuid: {'resources': {...}}}`` for one provider; used only
        when nova passes no ``allocations`` and a device disappeared or lost
        a resource class. Default: Placement, through nova's report client.
    :param list_instances: zero-argument callable returning every instance
        record of the daemon (all projects); units that instances other
        than ours hold are reported ``reserved``. None: nothing is.
    :param is_ours: callable(record) -> whether an instance is one of this
        nova-compute's (:meth:`.identity.Owner.is_ours`).
    :param reported: the :class:`ReportedGpus` the gate reads.
    :param probed_gpus: PCI address -> the probe's facts of each GPU
        (:class:`.nvidia_smi.GpuFacts`), for a caller that passes none to
        each call (the command line); default: none known.
    :param on_reshaped: callable(moved, records) told, after a reshape
        moved allocations (:func:`.reshape.move_allocations`), which
        provider each server's cards count in now, with the instance
        records read (:func:`.reconcile.move_providers`); or None.
    """

    def __init__(self, read_resources, list_mig_devices=None, *, conf,
                 provider_allocations=None, list_instances=None,
                 is_ours=None, reported=None, probed_gpus=None,
                 on_reshaped=None):
        self._conf = conf
        self._read_resources = read_resources
        self._list_mig_devices = list_mig_devices or self._run_nvidia_smi
        self._provider_allocations = (provider_allocations or
                                      nova_lookups.provider_allocations)
        self._states = {}
        self._last_inputs = None
        self._last_desired = None
        self._last_mig_text = ''
        self._probed_gpus = probed_gpus
        self._reported = reported or ReportedGpus()
        self._list_instances = list_instances
        self._is_ours = is_ours or (lambda record: False)
        self._foreign_logged = None
        #: InfiniBand cards already logged as offering no port
        self._ports_logged = set()
        self._snapshot = None
        self._on_reshaped = on_reshaped
        #: the GPU links pools carry (gpu_topology.Links), and the whole
        #: NVIDIA GPUs they were read for
        self._links = None
        self._links_key = None

    def _run_nvidia_smi(self):
        group = self._conf.lxd_accelerators
        return nvidia_smi.run_list(group.nvidia_smi_path,
                                   group.nvidia_smi_timeout)

    def _mig_text(self, options):
        if not options.report_mig:
            return ''
        text = self._list_mig_devices()
        if text is None:
            return self._last_mig_text
        self._last_mig_text = text
        return text

    def refresh(self):
        """Read the host now and keep what was read as the snapshot.

        Reads ``/1.0/resources``, ``nvidia-smi -L`` and (when the inventory
        was given ``list_instances``) every instance of the daemon. Call it
        outside nova's resource tracker lock: the driver does so from
        ``get_available_resource``, which nova's periodic task calls before
        it takes that lock, so :meth:`update_provider_tree`, which runs
        under it (for every instance claim too), reads nothing.

        After the first call, :meth:`update_provider_tree` always works
        from the last snapshot; until then (the ``inventory`` command, a
        caller without a refresher) it reads the host itself each time.
        The driver passes the last snapshot to :meth:`desired_from`.

        :returns: the new :class:`Snapshot`.
        """
        self._snapshot = self._read_host()
        return self._snapshot

    def _read_host(self):
        options = discovery.Options.from_conf(self._conf)
        resources = self._read_resources() or {}
        mig_text = self._mig_text(options)
        self._read_links(resources, mig_text, options)
        records = (self._list_instances()
                   if self._list_instances is not None else None)
        return Snapshot(time.monotonic(), resources, mig_text, records)

    def _read_links(self, resources, mig_text, options):
        """Read how the GPUs a pool could hold are linked, when they change.

        ``nvidia-smi topo -m`` only when the host's NVIDIA whole GPUs are
        not those last read (a new host, a card added, MIG turned off):
        the links of a board do not change while its cards stay.
        """
        if not options.pool_whole_gpus:
            return
        gpus, _ = discovery.discover(resources, mig_text, options)
        whole = [g for g in gpus if g.is_nvidia and
                 provider_tree.is_poolable(g)]
        key = tuple(sorted(g.pci_address for g in whole))
        if key == self._links_key:
            return
        if len(whole) < 2:
            self._links, self._links_key = None, key
            return
        group = self._conf.lxd_accelerators
        links = gpu_topology.read_links(whole, group.nvidia_smi_path,
                                        group.nvidia_smi_timeout)
        if links is not None:
            # None: unknown this time; asked again at the next refresh
            self._links, self._links_key = links or None, key

    def snapshot(self):
        """The last :class:`Snapshot`, or a fresh read when none was made."""
        return self._snapshot or self._read_host()

    def desired_providers(self, nodename, resources=None, mig_text=None,
                          probed_gpus=None):
        """The child providers the host should have.

        :param resources: a ``/1.0/resources`` answer the caller has just
            read; None reads a fresh one.
        :param mig_text: ``nvidia-smi -L`` output read with it; None reads
            it now.
        :param probed_gpus: PCI address -> the GPU probe's facts of each
            GPU (:class:`.nvidia_smi.GpuFacts`: its memory, its name), read
            from memory by the caller (the driver: the gate's last probe,
            :meth:`.health.gate.GpuGate.probed_gpus`); None: those the
            inventory was made with, if any.
        :returns: dict provider name -> DesiredProvider.
        """
        options = discovery.Options.from_conf(self._conf)
        if resources is None:
            resources = self._read_resources()
        resources = resources or {}
        if mig_text is None or not options.report_mig:
            mig_text = self._mig_text(options)
        if probed_gpus is None:
            probed_gpus = self._probed_gpus
        memory = _probed(probed_gpus, 'memory_total_mib') \
            if options.shared_gpus else {}
        names = _probed(probed_gpus, 'name')
        inputs = (nodename, options, resources.get('gpu'),
                  resources.get('network'), mig_text,
                  tuple(sorted(memory.items())), tuple(sorted(names.items())),
                  self._links)
        if inputs == self._last_inputs:
            return self._last_desired
        gpus, ib_cards = discovery.discover(resources, mig_text, options,
                                            probed_names=names)
        gpus = [dataclasses.replace(g, memory_mib=memory.get(g.pci_address))
                if g.shared_slots else g for g in gpus]
        for gpu in gpus:
            if gpu.shared_slots and not gpu.memory_mib:
                LOG.warning('Shared GPU %s: its memory is unknown (no GPU '
                            'probe answer yet), so it offers no %s and '
                            'flavors with lxd:gpu_memory_mb cannot land '
                            'on it', gpu.pci_address,
                            placement_names.MEMORY_RC)
        # each shared GPU's mode, as a trait flavors require (sharing)
        sharing_traits = {
            g.pci_address: sharing_modes.MODE_TRAITS[shared_gpus.card_mode(
                options.shared_gpus, g)] for g in gpus if g.shared_slots}
        desired = provider_tree.desired_providers(
            nodename, gpus, ib_cards, sharing_traits,
            pool_whole_gpus=options.pool_whole_gpus, links=self._links,
            report_infiniband_ports=options.report_infiniband_ports)
        self._log_ports_not_offered(provider_tree.ports_not_offered(
            ib_cards, options.report_infiniband_ports))
        self._last_inputs, self._last_desired = inputs, desired
        self._reported.update(desired)
        return desired

    def _log_ports_not_offered(self, cards):
        """Say once per card that its whole ports are not offered."""
        for pci in cards:
            if pci in self._ports_logged:
                continue
            self._ports_logged.add(pci)
            LOG.info('InfiniBand card %(pci)s has no virtual function to '
                     'offer and its whole ports are not offered (a port '
                     'lets its holder act as a subnet manager): it is not '
                     'reported. Set [lxd_accelerators] '
                     'report_infiniband_ports = true to offer them to '
                     'trusted projects.', {'pci': pci})

    def update_provider_tree(self, nova_tree, nodename,
                             allocations=None, resources=None,
                             snapshot=None, probed_gpus=None):
        """Add, update or remove the accelerator children of ``nodename``.

        :meth:`desired_from` and then :meth:`write_tree`, for a caller
        that passes the providers through no gate (the command line, the
        tests); the driver runs the two steps itself, with the GPU gate
        between them.

        :param allocations: as :meth:`write_tree`'s.
        :param resources: a fresh ``/1.0/resources`` answer the caller has
            already read; None: the host is not read here, the last
            :class:`Snapshot` (``snapshot`` or :meth:`snapshot`) is used:
            see :meth:`refresh`.
        :param probed_gpus: as :meth:`desired_providers`'.
        """
        if resources is None:
            snapshot = snapshot or self.snapshot()
            desired = self.desired_from(nodename, snapshot, probed_gpus)
            records = snapshot.records
        else:
            desired = self.desired_providers(nodename, resources,
                                             probed_gpus=probed_gpus)
            records = None
            if self._list_instances is not None:
                records = self._list_instances()
            if records is not None:
                desired = self.with_foreign_reserved(desired, records)
        self.write_tree(nova_tree, nodename, desired, allocations, records)

    def desired_from(self, nodename, snapshot, probed_gpus=None):
        """The providers ``nodename`` should have, from ``snapshot``.

        Reads nothing: :meth:`desired_providers` of the :class:`Snapshot`
        (see :meth:`refresh`), with the units foreign instances hold
        reserved (:meth:`with_foreign_reserved`) when it has the records.

        :param probed_gpus: as :meth:`desired_providers`'.
        :returns: dict provider name -> DesiredProvider, for
            :meth:`write_tree` (the driver passes it through the GPU
            gate first).
        """
        LOG.debug('Accelerator inventory from the host as read %.1f s ago',
                  snapshot.age())
        desired = self.desired_providers(nodename, snapshot.resources,
                                         snapshot.mig_text, probed_gpus)
        if snapshot.records is not None:
            desired = self.with_foreign_reserved(desired, snapshot.records)
        return desired

    def write_tree(self, nova_tree, nodename, desired, allocations=None,
                   records=None):
        """Add, update or remove the accelerator children of ``nodename``.

        Only children named ``<nodename>_gpu_*`` / ``<nodename>_ib_*`` are
        touched. Call after the root provider's own inventory is set.
        Whole GPUs that count in another provider now have their
        allocations moved (a reshape: ``ReshapeNeeded`` at nova-compute's
        start when nova must pass them; :func:`.reshape.move_allocations`).

        :param nova_tree: nova ``ProviderTree`` holding ``nodename``.
        :param desired: dict provider name -> DesiredProvider
            (:meth:`desired_from`, through the GPU gate in the driver).
        :param allocations: nova's ``{consumer_uuid: {'allocations':
            {rp_uuid: {'resources': {...}}}}}`` or None (unknown: then
            Placement is asked, only about providers that would lose
            inventory, and a provider is never deleted while that answer is
            missing).
        :param records: the daemon's instance records ``desired`` was
            made with (told to ``on_reshaped``), or None.
        """
        first = nodename not in self._states
        state = self._states.setdefault(nodename, provider_tree.TreeState())
        usage = self._usage_lookup(allocations)
        moves = reshape.moved_providers(
            nova_tree, nodename, desired,
            state.owned_children(nova_tree, nodename), state.devices)
        if moves and allocations is None:
            in_use = [uuid for uuid in moves if usage(uuid) != (True, {})]
            if in_use and first:
                # nova calls again with every allocation of the tree
                LOG.info('Whole GPUs of %(node)s move to another provider '
                         'layout with their allocations (providers '
                         '%(old)s): asking nova for a reshape',
                         {'node': nodename, 'old': ', '.join(sorted(in_use))})
                raise nova_exception.ReshapeNeeded()
            if in_use:
                LOG.warning('Whole GPUs of %(node)s count in other providers '
                            'now, but providers %(old)s are in use: kept '
                            'reserved; restart nova-compute to move their '
                            'allocations (nova reshapes only at start)',
                            {'node': nodename,
                             'old': ', '.join(sorted(in_use))})
        elif moves:
            moved = reshape.move_allocations(nova_tree, nodename, moves,
                                             allocations, records)
            usage = self._usage_lookup(allocations)
            if moved and self._on_reshaped is not None:
                self._on_reshaped(moved, records)
        state.apply(nova_tree, nodename, desired, usage)

    def with_foreign_reserved(self, desired, records):
        """``desired`` with the units foreign instances hold reserved.

        A unit held by anything on the daemon that is not one of our
        instances (another project, a VM, a container made by hand, a
        profile's device) can never be bound, so Placement must not offer
        it: it is counted in its resource class's ``reserved``. Each such
        unit is logged, with its holders, when the set changes.
        """
        host_devices = devices.physical_devices(
            p.device for p in desired.values())
        foreign = [r for r in records or () if not self._is_ours(r)]
        ib_ports = self._conf.lxd_accelerators.report_infiniband_ports
        held = units.held_units(foreign, host_devices=host_devices)
        out, logged = {}, []
        for name, want in desired.items():
            inventory = want.inventory
            for rc, keys in units.provider_units(
                    want.device, ib_ports=ib_ports).items():
                taken = [k for k in keys if units.holders_of(held, k)]
                if rc == placement_names.RC_INFINIBAND_VF:
                    free = [k for k in keys if k not in taken]
                    others = units.unspecified_vfs(held, want.device)
                    taken += free[max(0, len(free) - len(others)):] \
                        if others else []
                    held = dict(held, **{
                        k: ['%s (nictype=sriov)' % h] for k, h in zip(
                            reversed(free), others)})
                if not taken or rc not in inventory:
                    continue
                inventory = dict(inventory)
                # on top of what is reserved already (a held GPU, ...)
                inventory[rc] = dict(inventory[rc], reserved=min(
                    inventory[rc].get('reserved', 0) + len(taken),
                    inventory[rc]['total']))
                logged.extend((k, name, tuple(sorted(
                    units.holders_of(held, k)))) for k in taken)
            out[name] = dataclasses.replace(want, inventory=inventory)
        logged = sorted(logged)
        if logged != self._foreign_logged:
            for key, name, holders in logged:
                LOG.warning('Accelerator %(unit)s of %(provider)s is held by '
                            '%(holders)s, which is not an instance of this '
                            'nova-compute: reported reserved in Placement '
                            'and never bound',
                            {'unit': key, 'provider': name,
                             'holders': ', '.join(holders)})
            self._foreign_logged = logged
        return out

    def _usage_lookup(self, allocations):
        if allocations is not None:
            index = {}
            for consumer, data in allocations.items():
                for rp_uuid, alloc in ((data or {}).get('allocations')
                                       or {}).items():
                    index.setdefault(rp_uuid, {})[consumer] = (
                        (alloc or {}).get('resources') or {})
            return lambda rp_uuid: (True, index.get(rp_uuid, {}))

        def _ask(rp_uuid):
            try:
                allocs = self._provider_allocations(rp_uuid) or {}
            except Exception as exc:
                LOG.warning('Cannot read the allocations of resource '
                            'provider %(uuid)s (%(error)s): treating it as '
                            'in use', {'uuid': rp_uuid, 'error': exc})
                return False, {}
            return True, {consumer: (a or {}).get('resources') or {}
                          for consumer, a in allocs.items()}
        return _ask

    def device_for_provider(self, rp_uuid):
        """The device last reported under provider ``rp_uuid``, or None.

        Whether it may be bound now is the claim's to ask the gate
        (:meth:`.gate_seams.ClaimGate.check_bindable`).
        """
        for state in self._states.values():
            if rp_uuid in state.devices:
                return state.devices[rp_uuid]
        return None

    def reported_gpus(self):
        """The GPUs of the last update."""
        return self._reported.gpus()

    def all_devices(self):
        """Every device last reported (or kept while in use)."""
        return tuple(devices.physical_devices(
            device for state in self._states.values()
            for device in state.devices.values()))

    def describe(self, nova_tree, nodename):
        """The node's providers as the ``inventory`` command prints them.

        :returns: ``{"providers": [{"name", "parent", "inventories",
            "traits"}]}``, the root provider first, then its descendants
            top-down, children in name order.
        """
        return describe(nova_tree, nodename)


def _probed(gpus, fact):
    """PCI address -> one fact of each GPU (its memory MiB, its name).

    :param gpus: PCI address -> :class:`.nvidia_smi.GpuFacts`, or None
        (nothing known). GPUs without the fact are left out.
    """
    return {pci: getattr(facts, fact)
            for pci, facts in (gpus or {}).items() if getattr(facts, fact)}


def describe(nova_tree, nodename):
    """See :meth:`AcceleratorInventory.describe`."""
    names = {}
    datas = []
    for uuid in nova_tree.get_provider_uuids(nodename):
        data = nova_tree.data(uuid)
        names[uuid] = data.name
        datas.append(data)
    root, children = datas[0], sorted(datas[1:], key=lambda d: d.name)
    providers = []
    for data in [root] + children:
        providers.append({
            'name': data.name,
            'parent': names.get(data.parent_uuid),
            'inventories': {
                rc: {f: rec[f] for f in INVENTORY_FIELDS if f in rec}
                for rc, rec in sorted(data.inventory.items())},
            'traits': sorted(data.traits),
        })
    return {'providers': providers}


def scratch_tree(nodename):
    """A new nova ``ProviderTree`` holding only the root ``nodename``."""
    from nova.compute import provider_tree

    tree = provider_tree.ProviderTree()
    tree.new_root(nodename, SCRATCH_ROOT_UUID)
    return tree


def _scratch_inventory(tree, nodename, resources, mig_text, conf,
                       probed_gpus=None):
    """The driver's code path on ``tree``, never asking Placement."""
    list_mig = None if mig_text is None else (lambda: mig_text)
    inventory = AcceleratorInventory(
        lambda: resources, list_mig, conf=conf,
        provider_allocations=lambda rp_uuid: {}, probed_gpus=probed_gpus)
    inventory.update_provider_tree(tree, nodename, allocations={})
    return inventory


def discovered_gpus(resources, mig_text, conf, probed_gpus=None):
    """The GPUs the driver reports for these inputs.

    :param probed_gpus: the probe's facts by PCI address (names and memory
        nova-compute would read from its own probe).
    """
    return _scratch_inventory(scratch_tree('host'), 'host', resources,
                              mig_text, conf,
                              probed_gpus=probed_gpus).reported_gpus()


def describe_host(tree, nodename, resources, mig_text, conf,
                  list_instances=None):
    """Run the driver's code path on the scratch tree ``tree``.

    :param tree: from :func:`scratch_tree` (its root may carry traits).
    :param mig_text: ``nvidia-smi -L`` text, or None to run nvidia-smi.
    :param list_instances: zero-argument callable returning every
        instance record of the daemon; called only when a GPU is shared.
        None: who holds the slots is unknown.
    :returns: the :func:`describe` dict; each shared GPU's provider has a
        ``sharing`` entry (:func:`shared_gpu_usage`).
    """
    inventory = _scratch_inventory(tree, nodename, resources, mig_text, conf)
    description = inventory.describe(tree, nodename)
    shared = {provider_tree.gpu_provider_name(nodename, gpu.pci_address): gpu
              for gpu in inventory.reported_gpus() if gpu.shared_slots}
    if shared:
        # read after the resources, so no slot claimed since is missed
        records = list_instances() if list_instances is not None else None
        for provider in description['providers']:
            gpu = shared.get(provider['name'])
            if gpu is not None:
                provider['sharing'] = shared_gpu_usage(
                    gpu, records, inventory.all_devices())
    return description


def shared_gpu_usage(gpu, records, host_devices=()):
    """Who holds the slots of the shared GPU ``gpu``.

    Read from the instances' binding records as a claim reads them
    (:func:`.claims.claim`): a slot is held by every
    instance whose record names it, whatever its project or host, and
    anything else holding the card itself (a container made by hand, a
    profile's ``gpu`` device) leaves no slot free.

    :param records: every instance record of the daemon, or None when
        they were not read: then only the total is known.
    :returns: ``{"slots_total", "slots_used", "slots", "card_held_by"}``;
        ``slots`` lists each held slot's ``slot``, ``unit``,
        ``instance`` (uuid), ``project`` and ``container``
        (``<LXD project>/<name>``).
    """
    total = gpu.shared_slots
    if records is None:
        return {'slots_total': total, 'slots_used': None, 'slots': None,
                'card_held_by': None}
    slots = []
    for record in records:
        config = record.get('config') or {}
        for unit in identity.recorded_units(config):
            if unit.get('kind') != units.KIND_SHARE or \
                    devices.normalise_pci_address(unit.get('pci') or '') \
                    != gpu.pci_address:
                continue
            slots.append({'slot': unit.get('slot'), 'unit': unit['unit'],
                          'instance': identity.instance_uuid(record),
                          'project': unit.get('project_id'),
                          'container': units.holder_name(record)})
    slots.sort(key=lambda s: (str(s['unit']), str(s['container'])))
    held = units.held_units(records, host_devices=host_devices)
    card_held_by = sorted(units.holders_of(held, 'pci:' + gpu.pci_address))
    offered = {units.share_key(gpu.pci_address, n) for n in range(total)}
    used = len(offered & {s['unit'] for s in slots})
    return {'slots_total': total,
            'slots_used': total if card_held_by else used,
            'slots': slots, 'card_held_by': card_held_by}
