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

"""Pure transforms of a container record for resize and migration.

What the kept original, the copy sent to another daemon and the resized
container look like, as config and devices, from the record LXD gave
(see :mod:`nova_lxd_accel.instance.migration` for the steps that write them).
"""

from nova_lxd_accel.container import builder
from nova_lxd_accel.container import identity


#: What a shared GPU's MPS quota adds besides its unit's device.
MPS_DEVICE_NAMES = ('mps-pipe', 'mps-shm')
MPS_CONFIG_PREFIX = 'environment.CUDA_MPS_'


def accelerator_device_names(record):
    """Names of the container's devices that come from a binding."""
    config = record.get('config') or {}
    units = identity.recorded_units(config)
    names = {unit.get('name') for unit in units}
    names.update(name for name in record.get('devices') or {}
                 if name.startswith(identity.ACCEL_DEVICE_PREFIXES))
    if any(unit.get('mps_pipe') for unit in units):
        # a shared GPU's MPS quota mounts (accel.binding.sharing.lxd_config)
        names.update(MPS_DEVICE_NAMES)
    names.discard(None)
    return names


def is_host_side_device(name, device):
    """NICs and volumes: made again from nova's data on each host."""
    kind = device.get('type')
    if kind in ('nic', 'unix-block'):
        return True
    return (kind == 'disk' and name != 'root' and
            str(device.get('source', '')).startswith('/dev/'))


def without_accelerators(record):
    """config and devices of ``record`` without any accelerator binding."""
    names = accelerator_device_names(record)
    config = dict(record.get('config') or {})
    config.pop(identity.KEY_DEVICES, None)
    for key in [k for k in config if k.startswith(MPS_CONFIG_PREFIX)]:
        # the MPS client limits: the new binding sets its own, if any
        del config[key]
    if names:
        # the binding adds the NVIDIA runtime for MIG devices; the flavor
        # may ask for it again (builder.gpu_runtime)
        config.pop('nvidia.runtime', None)
    devices = {name: dict(device) for name, device in
               (record.get('devices') or {}).items() if name not in names}
    return config, devices


def _owned_as(config, key, host, instead_of):
    config = dict(config)
    config.pop(instead_of, None)
    config[key] = host
    return config


def backup_config(config, host):
    """The kept original's config: marked, and not listed as an instance."""
    return _owned_as(config, identity.KEY_BACKUP_OF, host,
                     instead_of=identity.KEY_HOST)


def with_volatile(config, current):
    """``config`` with the ``volatile.*`` keys LXD set on ``current``."""
    out = {k: v for k, v in config.items() if not k.startswith('volatile.')}
    out.update((k, v) for k, v in current.items()
               if k.startswith('volatile.'))
    return out


def restored_config(config, host):
    """The config of the instance's container again, owned by ``host``."""
    return _owned_as(config, identity.KEY_HOST, host,
                     instead_of=identity.KEY_BACKUP_OF)


def transfer_record(record, dest_host):
    """What the destination daemon creates: no host-side or bound devices.

    And no profiles: the destination gives the container its own ``[lxd]
    profiles``, with its own masks, when it finishes the migration
    (:func:`resized`); the source's profile names may not exist there, or
    name other profiles.
    """
    config, devices = without_accelerators(record)
    config = restored_config(config, dest_host)
    devices = {name: device for name, device in devices.items()
               if not is_host_side_device(name, device)}
    config = {key: value for key, value in config.items()
              if not key.startswith('volatile.')}
    return {'architecture': record['architecture'], 'config': config,
            'devices': devices, 'profiles': []}


#: Keys a flavor may set or not; removed before the new flavor's are set.
#: Declared by the flavor's parts of the spec (builder.FLAVOR_PARTS).
FLAVOR_KEYS = builder.flavor_config_keys()


def without_profile_masks(config):
    """``config`` without what an old host's profile masks set.

    The destination of a migration masks its own ``[lxd] profiles``
    (:func:`.builder.profile_masks`, in the resize fragment), not the
    source's, which it does not check.
    """
    return {key: value for key, value in config.items()
            if not key.startswith(builder.MASK_ONLY_CONFIG_PREFIXES)}


def resized(record, fragment, host, host_devices, bound):
    """The container after a resize or migration, as config and devices.

    :param record: the container as it is (copied or migrated).
    :param fragment: :func:`.builder.resize_fragment` of the
        new flavor, with this host's profile masks.
    :param host: the host that owns it now.
    :param host_devices: this host's NIC and volume devices.
    :param bound: the
        :class:`~nova_lxd_accel.accel.binding.binding_record.Binding` of
        the new allocation.
    """
    config, devices = without_accelerators(record)
    for key in FLAVOR_KEYS:
        config.pop(key, None)
    config = without_profile_masks(config)
    config.update(fragment.get('config', {}))
    config = restored_config(config, host)
    devices = {name: device for name, device in devices.items()
               if not is_host_side_device(name, device) and
               device.get('type') != builder.MASK_DEVICE_TYPE}
    devices.update(fragment.get('devices', {}))
    devices.update(host_devices)
    container = builder.with_accelerators(
        {'config': config, 'devices': devices}, bound)
    return container['config'], container['devices']
