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

"""Accelerator bindings after a nova-compute restart.

The containers' configs are the source of truth (the binding record,
:data:`nova_lxd_accel.container.identity.KEY_DEVICES`, written by
:mod:`.binding`). At ``init_host`` the driver calls
:func:`reconcile`, which:

* releases the bindings of this host's containers whose instance nova no
  longer places on this host (deleted while nova-compute was down,
  evacuated elsewhere): their accelerator devices and binding record are
  removed from the container, the container itself is left to nova's
  ``running_deleted_instance_action``;
* logs (ERROR) every unit held by more than one container, naming the unit
  and the containers/instances;
* logs (WARNING) every instance whose binding disagrees with its
  allocations in Placement, naming the instance, provider and device.

Nothing is released when nova's instance list cannot be read: a wrong
answer there would strip devices from live instances.
"""

import json

from oslo_log import log as logging

from nova_lxd_accel.accel.binding import binding_record
from nova_lxd_accel.accel import units
from nova_lxd_accel.container import identity

LOG = logging.getLogger(__name__)


def _instance_uuid(record):
    return identity.instance_uuid(record)


def double_bindings(records):
    """Unit key -> container names, for units held more than once."""
    return {key: names for key, names in units.held_units(records).items()
            if len(names) > 1}


def placement_mismatches(recorded, allocations):
    """Differences between one instance's binding and its allocations.

    :param recorded: the instance's binding records.
    :param allocations: ``{rp_uuid: {'resources': {rc: n}}}`` from
        Placement for that consumer.
    :returns: list of ``(provider, rc, bound, allocated)``.
    """
    bound = binding_record.expected_usage(recorded)
    allocated = {}
    for rp_uuid, alloc in (allocations or {}).items():
        for rc, amount in ((alloc or {}).get('resources') or {}).items():
            if amount and units.is_accelerator_class(rc):
                allocated.setdefault(rp_uuid, {})[rc] = amount
    out = []
    for rp_uuid in sorted(set(bound) | set(allocated)):
        rcs = set(bound.get(rp_uuid, {})) | set(allocated.get(rp_uuid, {}))
        for rc in sorted(rcs):
            have = bound.get(rp_uuid, {}).get(rc, 0)
            want = allocated.get(rp_uuid, {}).get(rc, 0)
            if have != want:
                out.append((rp_uuid, rc, have, want))
    return out


def release(client, record):
    """Remove a container's accelerator devices and binding record.

    Only those keys, read-modify-write with the container's ETag: a NIC or
    volume attached meanwhile is kept.
    """
    def drop_binding(config, devices):
        recorded = identity.recorded_units(config)
        if not recorded:
            return False
        for unit in recorded:
            devices.pop(unit.get('name'), None)
        config.pop(identity.KEY_DEVICES, None)

    client.modify_container(record['name'], drop_binding)


def reconcile(client, host, instance_uuids, consumer_allocations=None,
              on_release=None):
    """Check and repair the bindings of ``host``'s containers.

    :param client: :class:`nova_lxd_accel.client.LXDClient`.
    :param instance_uuids: uuids of the instances nova has on this host,
        or None when unknown (then nothing is released).
    :param consumer_allocations: callable(instance_uuid) -> Placement
        allocations of that consumer, or None to skip that check.
    :param on_release: callable(read_record) run before a binding is
        released (:meth:`.gate.GpuGate.note_destroy`): the container may
        still run a process on its GPU, so its units are dirty until
        verified clean, and no claim made before the first refresh takes
        them. When it returns None (the release could not be recorded:
        the GPU state file is damaged) the binding is kept, so that the
        units stay with their container until a later start records it.
    :returns: names of the containers whose bindings were released.
    """
    records = [r for r in client.list_containers()
               if identity.is_ours(r, host)]
    for key, names in sorted(double_bindings(records).items()):
        # holders are named as binding names them (<project>/<name>)
        by_name = {units.holder_name(r): _instance_uuid(r)
                   for r in records}
        LOG.error('Accelerator %(unit)s is bound to more than one container: '
                  '%(holders)s. Delete or rebuild all but one of these '
                  'instances.',
                  {'unit': key, 'holders': ', '.join(
                      '%s (instance %s)' % (n, by_name.get(n))
                      for n in sorted(names))})
    released = []
    for record in records:
        recorded = identity.recorded_units(record.get('config'))
        if not recorded:
            continue
        uuid = _instance_uuid(record)
        if instance_uuids is not None and uuid not in instance_uuids:
            if on_release is not None and on_release(
                    lambda record=record: record) is None:
                # unrecorded, the release would leave the units to the
                # next claim once the state file is repaired, with this
                # container's processes still on them
                LOG.error('Keeping accelerators %(units)s of container '
                          '%(name)s, whose instance %(uuid)s nova no longer '
                          'has on this host: their release cannot be '
                          'recorded in the GPU state file (see the error '
                          'above); repair the file and restart '
                          'nova-compute', {
                              'units': [u['unit'] for u in recorded],
                              'name': record['name'], 'uuid': uuid})
                continue
            try:
                release(client, record)
            except Exception as exc:
                LOG.error('Cannot release accelerators %(units)s of '
                          'container %(name)s, whose instance %(uuid)s nova '
                          'no longer has on this host: %(exc)s',
                          {'units': [u['unit'] for u in recorded],
                           'name': record['name'], 'uuid': uuid,
                           'exc': exc})
            else:
                LOG.warning('Released accelerators %(units)s of container '
                            '%(name)s: nova no longer has its instance '
                            '%(uuid)s on this host',
                            {'units': [u['unit'] for u in recorded],
                             'name': record['name'], 'uuid': uuid})
                released.append(record['name'])
            continue
        if consumer_allocations is None:
            continue
        try:
            allocations = consumer_allocations(uuid)
        except Exception as exc:
            LOG.warning('Cannot read the allocations of instance %(uuid)s '
                        'from Placement (%(exc)s): its accelerator binding '
                        'is not checked', {'uuid': uuid, 'exc': exc})
            continue
        by_rp = {}
        for unit in recorded:
            by_rp.setdefault(unit.get('provider'), []).append(
                '%s %s' % (unit.get('unit'), unit.get('name')))
        for rp_uuid, rc, have, want in placement_mismatches(recorded,
                                                            allocations):
            LOG.warning('Instance %(uuid)s (container %(name)s) has '
                        '%(have)s %(rc)s of resource provider %(rp)s bound '
                        '(%(devices)s) but %(want)s allocated in Placement',
                        {'uuid': uuid, 'name': record['name'], 'have': have,
                         'rc': rc, 'rp': rp_uuid, 'want': want,
                         'devices': ', '.join(by_rp.get(rp_uuid, [])) or
                         'no device'})
    return released


def move_providers(client, moved, records=None):
    """Point binding records at the providers a reshape moved them to.

    After :func:`.inventory.reshape.move_allocations` a server's whole
    GPUs are counted in another provider: its record says so too, so that
    the next reconcile compares it with Placement rightly. Keyed by card,
    so running it again after a failed reshape still lands right.

    :param moved: instance uuid -> {card PCI address: provider uuid}.
    :param records: the daemon's instance records (read again when None).
    """
    if not moved:
        return
    if records is None:
        records = client.list_containers()
    for record in records:
        cards = moved.get(_instance_uuid(record))
        if not cards:
            continue

        def change(config, devices, cards=cards):
            units_ = identity.recorded_units(config)
            changed = False
            for unit in units_:
                target = cards.get(unit.get('pci'))
                if target and unit.get('provider') != target:
                    unit['provider'] = target
                    changed = True
            if not changed:
                return False
            config[identity.KEY_DEVICES] = json.dumps(units_, sort_keys=True)

        client.modify_container(record['name'], change)
        LOG.info('Binding record of container %(name)s now names the '
                 'provider(s) its GPUs count in: %(providers)s',
                 {'name': record['name'],
                  'providers': ', '.join(sorted(set(cards.values())))})
