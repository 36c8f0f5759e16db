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

"""Pure translation: instance + flavor + image + policy -> LXD container.

The one place where a container's spec (config keys and devices) is assembled,
from the identity, NIC and volume leaves beside it. Every part below has the
same signature ``part(instance, flavor, image_meta, policy, host_side)`` and
returns a fragment ``{'config': {...}, 'devices': {...}}``;
:func:`build_container` merges them in order. The parts are the flavor's
(:data:`FLAVOR_PARTS`: limits, root disk, security, GPU runtime; each declares
the config keys it owns, so resize and migration drop exactly those), the
image's and the instance's (identity, metadata), and the host side's
(:data:`HOST_PARTS`: one NIC per port, one device per connected volume). The
accelerator binding is merged by :func:`with_accelerators`, as it is picked
under the claim lock against the daemon.

Nothing here talks to LXD, Glance or the database (volumes are connected
before, and the host paths are given in :class:`HostSide`), so each rule
is a plain function with plain unit tests. Only keys the driver itself
chooses ever reach LXD: image properties and flavor extra specs are read
key by key, never copied through (no ``raw.*``, no privilege by accident).
"""

import base64
import dataclasses
import json
import re

from oslo_utils import strutils

from nova_lxd_accel.container import identity
from nova_lxd_accel.container import nic
from nova_lxd_accel.container import volume
from nova_lxd_accel import exception
from nova_lxd_accel.extra_specs import lxd_keys
from nova_lxd_accel.extra_specs import sharing_modes

# Flavor extra specs of the ``lxd:`` namespace read here (validated at the
# API by nova_lxd_accel.extra_specs.lxd_keys).
SPEC_PRIVILEGED = 'lxd:privileged'
SPEC_NESTING = 'lxd:nesting'
SPEC_ISOLATED_IDMAP = 'lxd:isolated_idmap'
SPEC_PROCESSES = 'lxd:processes'
SPEC_GPU_RUNTIME = 'lxd:gpu_runtime'

#: The config key of the guest API (``/dev/lxd``) on LXD, and on Incus
#: (``/dev/incus``), which renamed it; see :attr:`HostPolicy.guest_api_key`.
GUEST_API_KEY_LXD = 'security.devlxd'
GUEST_API_KEY_INCUS = 'security.guestapi'


@dataclasses.dataclass(frozen=True)
class HostPolicy(object):
    """What the operator allows and how this host is set up (from conf)."""

    host: str
    storage_pool: str = 'default'
    allow_privileged: bool = False
    allow_nesting: bool = False
    # [lxd] isolated_idmap: a host user-id range per container unless the
    # flavor's lxd:isolated_idmap says otherwise
    isolated_idmap: bool = True
    default_process_limit: int = 8192
    # Unsafe content of [lxd] profiles each container overrides (see
    # nova_lxd_accel.host.check_profiles): (key, value) pairs of config,
    # and names of devices to mask.
    masked_config: tuple = ()
    masked_devices: tuple = ()
    # [lxd] devlxd: whether containers keep the guest API (/dev/lxd), which
    # shows the tenant every config key, the driver's user.* ones included.
    devlxd: bool = False
    # how this host's daemon names the guest API switch (LXD or Incus)
    guest_api_key: str = GUEST_API_KEY_LXD
    # [lxd] container_name_prefix: names the ephemeral volume
    name_prefix: str = 'nova-'

    @classmethod
    def from_conf(cls, conf, host, profile_masks=None,
                  guest_api_key=GUEST_API_KEY_LXD):
        config, devices = profile_masks or ({}, [])
        return cls(host=host,
                   storage_pool=conf.lxd.storage_pool,
                   allow_privileged=conf.lxd.allow_privileged_containers,
                   allow_nesting=conf.lxd.allow_nesting,
                   isolated_idmap=conf.lxd.isolated_idmap,
                   default_process_limit=conf.lxd.default_process_limit,
                   masked_config=tuple(sorted(config.items())),
                   masked_devices=tuple(devices),
                   devlxd=conf.lxd.devlxd,
                   guest_api_key=guest_api_key,
                   name_prefix=conf.lxd.container_name_prefix)


@dataclasses.dataclass(frozen=True)
class HostSide(object):
    """What this host made for the instance outside the container.

    :ivar network_info: nova's network info: one NIC per port, in order.
    :ivar volumes: :class:`.volume.ConnectedVolume` of each non-root
        volume.
    """

    network_info: tuple = ()
    volumes: tuple = ()


NO_HOST_SIDE = HostSide()


def flavor_part(config_keys=()):
    """Mark a part as the flavor's and declare the config keys it owns.

    A resize or a migration removes every declared key before the new
    flavor's parts set theirs again, so a key a part may set must be
    declared here (tests/unit/container/test_builder.py checks every
    part's output).
    """
    def mark(part):
        part.config_keys = frozenset(config_keys)
        return part
    return mark


def _spec_is_true(extra_specs, key):
    # The same parser nova's extra-spec validators accept values with.
    return strutils.bool_from_string(extra_specs.get(key, 'false'))


#: Config keys that only :func:`profile_masks` sets (the other parts
#: never set ``raw.*`` or syscall interception); masked devices are the
#: ``none`` devices, which no other part makes either. A resize or a
#: migration drops these, the old host's masks, before the new host's own
#: are set (:func:`.records.resized`).
MASK_ONLY_CONFIG_PREFIXES = ('raw.', 'security.syscalls.intercept.')
MASK_DEVICE_TYPE = 'none'


def profile_masks(instance, flavor, image_meta, policy,
                  host_side=NO_HOST_SIDE):
    """Override the unsafe content of ``[lxd] profiles`` (strip mode).

    First of the builders, so the driver's own choices (security, limits)
    still win over the neutral values set here. Built again from the
    destination's policy on resize and migration (:func:`resize_fragment`):
    the profiles, and so the masks, are each host's own.
    """
    return {'config': dict(policy.masked_config),
            'devices': {name: {'type': MASK_DEVICE_TYPE}
                        for name in policy.masked_devices}}


def ownership(instance, flavor, image_meta, policy, host_side=NO_HOST_SIDE):
    """Who owns the container, so the driver only ever touches its own."""
    return {'config': {identity.KEY_INSTANCE_UUID: instance.uuid,
                       identity.KEY_HOST: policy.host}}


@flavor_part(config_keys=('limits.cpu', 'limits.memory', 'limits.processes'))
def limits(instance, flavor, image_meta, policy, host_side=NO_HOST_SIDE):
    config = {'limits.cpu': str(flavor.vcpus),
              'limits.memory': '%dMiB' % flavor.memory_mb}
    processes = flavor.extra_specs.get(SPEC_PROCESSES)
    if processes is None and policy.default_process_limit:
        processes = policy.default_process_limit
    if processes is not None and int(processes) > 0:
        config['limits.processes'] = str(int(processes))
    return {'config': config}


@flavor_part()
def root_disk(instance, flavor, image_meta, policy, host_side=NO_HOST_SIDE):
    if flavor.swap:
        # LXD gives a container no swap device of its own and cannot cap
        # its swap at a size (limits.memory.swap is on or off): quietly
        # dropping the size the user pays for would be worse.
        raise exception.FlavorNotAllowed(
            flavor=flavor.name, feature='a swap disk',
            how='LXD containers cannot have a swap disk of a given size '
                '(limits.memory.swap only turns swap on or off); use a '
                'flavor with --swap 0')
    device = {'type': 'disk', 'path': '/', 'pool': policy.storage_pool}
    if flavor.root_gb:
        device['size'] = '%dGiB' % flavor.root_gb
    return {'devices': {'root': device}}


#: The device and the mount point of the ephemeral disk (where nova's
#: other drivers' guests find ephemeral0).
EPHEMERAL_DEVICE = 'ephemeral0'
EPHEMERAL_PATH = '/mnt'


def ephemeral_volume_name(prefix, instance_uuid):
    """The custom storage volume that is the instance's ephemeral disk."""
    return '%s-%s' % (identity.container_name(prefix, instance_uuid),
                      EPHEMERAL_DEVICE)


def ephemeral_volume_config(flavor):
    """The volume's config: its size, the flavor's ``ephemeral_gb``."""
    return {'size': '%dGiB' % flavor.ephemeral_gb}


@flavor_part()
def ephemeral_disk(instance, flavor, image_meta, policy,
                   host_side=NO_HOST_SIDE):
    """The flavor's ephemeral disk: a custom volume mounted at /mnt.

    The volume itself (:func:`ephemeral_volume_name`, on the instance's
    pool) is made before the container by
    :mod:`nova_lxd_accel.instance.ephemeral`.
    """
    if not flavor.ephemeral_gb:
        return {}
    return {'devices': {EPHEMERAL_DEVICE: {
        'type': 'disk', 'pool': policy.storage_pool,
        'source': ephemeral_volume_name(policy.name_prefix, instance.uuid),
        'path': EPHEMERAL_PATH}}}


#: What a flavor may ask for only where the operator allows it:
#: (extra spec, config key, what it is, HostPolicy field, [lxd] option).
_OPERATOR_ALLOWED = (
    (SPEC_PRIVILEGED, 'security.privileged', 'a privileged container',
     'allow_privileged', 'allow_privileged_containers'),
    (SPEC_NESTING, 'security.nesting', 'nested containers',
     'allow_nesting', 'allow_nesting'))


@flavor_part(config_keys=('security.privileged', 'security.nesting',
                          'security.idmap.isolated', GUEST_API_KEY_LXD,
                          GUEST_API_KEY_INCUS))
def security(instance, flavor, image_meta, policy, host_side=NO_HOST_SIDE):
    """Unprivileged and un-nested unless the flavor asks and policy allows.

    Image properties are deliberately not consulted: whoever uploads an
    image must not be able to raise the privileges of the container.

    No guest API (``/dev/lxd``) unless the host's ``[lxd] devlxd`` keeps
    it: through it any process of the container reads every config key,
    the driver's ``user.nova_lxd_accel.*`` (host, PCI addresses, MIG
    UUIDs) included. cloud-init does not need it: user data is a NoCloud
    seed (:func:`cloud_init_seed`) and ``user.meta-data`` reaches the
    image's templates, both written by the daemon from the host side.
    Declared here, so resize and migration set it again by the host's
    policy (both daemons' names of the key).
    """
    specs = flavor.extra_specs
    config = {'security.privileged': 'false', 'security.nesting': 'false'}
    if not policy.devlxd:
        config[policy.guest_api_key] = 'false'
    for spec, key, feature, allowed, option in _OPERATOR_ALLOWED:
        if _spec_is_true(specs, spec):
            if not getattr(policy, allowed):
                raise exception.FlavorNotAllowed(
                    flavor=flavor.name, feature=feature,
                    how='an operator must set [lxd] %s = true on this '
                        'host' % option)
            config[key] = 'true'
    if config['security.nesting'] == 'true' and _asks_for_mig(specs):
        # A MIG slice is isolated only while the container cannot manage
        # devices and cgroups of its own (nvidia-caps, the masked
        # /proc/driver/nvidia): nesting gives it that.
        raise exception.FlavorNotAllowed(
            flavor=flavor.name, feature='nested containers with a MIG slice',
            how='MIG isolation needs an un-nested container; remove '
                'lxd:nesting from the flavor')
    config['security.idmap.isolated'] = _isolated_idmap(flavor, policy)
    return {'config': config}


def _isolated_idmap(flavor, policy):
    """``security.idmap.isolated``: the flavor's choice, else the host's.

    Set either way, so that an ``[lxd] profiles`` value never decides it.
    A share of a GPU with MPS quotas needs the container's users to be the
    MPS server's: an MPS server serves one host user at a time, and the
    clients of another user (another isolated container) wait without an
    error until it exits. So such a flavor is refused here, before
    anything is made, in an isolated container.
    """
    specs = flavor.extra_specs
    if SPEC_ISOLATED_IDMAP in specs:
        isolated = _spec_is_true(specs, SPEC_ISOLATED_IDMAP)
        why = 'its %s=%s' % (SPEC_ISOLATED_IDMAP, specs[SPEC_ISOLATED_IDMAP])
    else:
        isolated = policy.isolated_idmap
        why = "this host's [lxd] isolated_idmap = true"
    if not isolated:
        return 'false'
    if sharing_modes.flavor_mode(specs) == sharing_modes.MODE_QUOTA:
        raise exception.MpsNeedsSharedIdmap(flavor=flavor.name, why=why)
    return 'true'


#: a flavor's request of a MIG slice (resources[N]:CUSTOM_MIG_<PROFILE>)
_MIG_REQUEST = re.compile(r'^resources[^:]*:CUSTOM_MIG_')


def _asks_for_mig(specs):
    return any(_MIG_REQUEST.match(key) and str(value).strip() not in ('', '0')
               for key, value in specs.items())


@flavor_part(config_keys=('nvidia.runtime',))
def gpu_runtime(instance, flavor, image_meta, policy, host_side=NO_HOST_SIDE):
    """The host's NVIDIA user space inside the container, when asked."""
    if flavor.extra_specs.get(SPEC_GPU_RUNTIME, 'none') == 'nvidia':
        return {'config': {'nvidia.runtime': 'true'}}
    return {}


def boot(instance, flavor, image_meta, policy, host_side=NO_HOST_SIDE):
    # Nova decides what runs after a host reboot (resume_state_on_host_boot).
    return {'config': {'boot.autostart': 'false'}}


def _meta_data(instance):
    meta = {'instance-id': instance.uuid,
            'local-hostname': instance.hostname or instance.uuid}
    if instance.key_data:
        meta['public-keys'] = [instance.key_data]
    # JSON is valid YAML, and never needs a YAML library to write.
    return json.dumps(meta, sort_keys=True)


def cloud_init(instance, flavor, image_meta, policy, host_side=NO_HOST_SIDE):
    """Nova's metadata, for the templates of LXD images (nocloud-net).

    User data never goes into LXD config: a config value is a string, so
    gzip or binary user data would be cut at the first NUL or mangled.
    It reaches cloud-init byte for byte through :func:`cloud_init_seed`.
    """
    return {'config': {'user.meta-data': _meta_data(instance)}}


#: cloud-init's NoCloud seed directory. cloud-init reads it before the
#: ``nocloud-net`` one that LXD image templates write, and before LXD's
#: own datasource.
SEED_DIR = '/var/lib/cloud/seed/nocloud'


def user_data_bytes(instance):
    """The instance's user data exactly as the user gave it, or None."""
    if not instance.user_data:
        return None
    return base64.b64decode(instance.user_data)


def cloud_init_seed(instance):
    """[(path, bytes, mode)]: the NoCloud seed that carries user data.

    Pushed into the container before its first start. Empty without user
    data: then cloud-init keeps reading what the image's templates write.
    """
    data = user_data_bytes(instance)
    if data is None:
        return []
    return [(SEED_DIR + '/meta-data', _meta_data(instance).encode('utf-8'),
             0o600),
            (SEED_DIR + '/user-data', data, 0o600)]


def _quota(extra_specs, key):
    value = extra_specs.get('quota:' + key)
    try:
        value = int(value) if value is not None else 0
    except ValueError:
        return 0
    return value if value > 0 else 0


@flavor_part()
def disk_quota(instance, flavor, image_meta, policy, host_side=NO_HOST_SIDE):
    """Nova's ``quota:disk_*`` extra specs as LXD root disk I/O limits.

    ``quota:disk_{read,write,total}_{bytes,iops}_sec`` become the root
    disk's ``limits.read`` / ``limits.write`` / ``limits.max``. LXD takes
    one value per key, so where a flavor gives both bytes and IOPS for the
    same direction the byte rate wins. ``quota:vif_*`` keys are not
    honoured: this driver does not make the container's NICs (Neutron
    ports are not plugged yet). Other ``quota:`` keys (cpu shares, ...)
    have no LXD equivalent here and are ignored, as other drivers do.
    """
    specs = flavor.extra_specs
    device = {}
    for stat, lxd_key in (('read', 'limits.read'), ('write', 'limits.write'),
                          ('total', 'limits.max')):
        rate = _quota(specs, 'disk_%s_bytes_sec' % stat)
        iops = _quota(specs, 'disk_%s_iops_sec' % stat)
        if rate:
            device[lxd_key] = '%dB' % rate
        elif iops:
            device[lxd_key] = '%diops' % iops
    if not device:
        return {}
    root = root_disk(instance, flavor, image_meta,
                     policy)['devices']['root']
    root.update(device)
    return {'devices': {'root': root}}


def nics(instance, flavor, image_meta, policy, host_side=NO_HOST_SIDE):
    """One ``nic`` device per port of nova's network info, eth0 up."""
    return {'devices': {
        nic.device_name(vif): nic.nic_device(vif, 'eth%d' % index)
        for index, vif in enumerate(host_side.network_info or ())}}


def volumes(instance, flavor, image_meta, policy, host_side=NO_HOST_SIDE):
    """One device per non-root volume connected to this host."""
    return {'devices': {
        connected.name: volume.lxd_device(connected.host_path,
                                          connected.mountpoint, connected.name)
        for connected in host_side.volumes}}


#: The parts that follow the flavor: on resize and migration they are
#: built again for the new flavor, after the keys they declare are removed.
FLAVOR_PARTS = (limits, root_disk, ephemeral_disk, disk_quota, security,
                gpu_runtime)

#: The parts made from what this host plugged and connected: built again
#: on each host a container moves to.
HOST_PARTS = (nics, volumes)

#: The parts made from the instance, its flavor and image, before this
#: host plugged or connected anything.
GUEST_PARTS = (profile_masks, ownership) + FLAVOR_PARTS + (boot, cloud_init)

#: Every part of a new container, in the order they are merged (a later
#: part wins on a key both set).
BUILDERS = GUEST_PARTS + HOST_PARTS


def flavor_config_keys():
    """Every config key a flavor may set or not (see :func:`flavor_part`)."""
    return frozenset().union(*(part.config_keys for part in FLAVOR_PARTS))


def with_accelerators(container, bound):
    """The container with the devices and config of an accelerator binding.

    ``bound`` is a
    :class:`~nova_lxd_accel.accel.binding.binding_record.Binding`; its
    device names (``nova-gpu0``, ``nova-mig0``, ``nova-ib0``) never
    clash with the driver's own (``root``).
    """
    return _merged(container, bound.config, bound.devices)


def _merged(container, config, devices):
    """A copy of ``container`` with ``config`` and ``devices`` on top."""
    out = {'config': dict(container['config']),
           'devices': dict(container['devices'])}
    out['config'].update(config)
    out['devices'].update(devices)
    return out


def build_container(instance, flavor, image_meta, policy,
                    host_side=NO_HOST_SIDE, builders=BUILDERS):
    """The ``config`` and ``devices`` of the instance's container.

    :param host_side: the :class:`HostSide` plugged and connected for it.
    :param builders: the parts to merge (all of them unless given).
    """
    config, devices = {}, {}
    for builder in builders:
        fragment = builder(instance, flavor, image_meta, policy, host_side)
        config.update(fragment.get('config', {}))
        devices.update(fragment.get('devices', {}))
    return {'config': config, 'devices': devices}


def resize_fragment(instance, flavor, image_meta, policy):
    """The part of the container that follows the flavor and the host.

    What a resize or a migration writes again on the host that finishes
    it: the flavor's parts and this host's masks of its ``[lxd]
    profiles``, never the ones the container brings from its old host.
    The new flavor's ``lxd:`` extra specs are checked first, as at spawn
    (the migration calls this before it stops the container).
    """
    lxd_keys.check_flavor(flavor, policy)
    return build_container(instance, flavor, image_meta, policy,
                           builders=(profile_masks,) + FLAVOR_PARTS)


def host_fragment(instance, policy, host_side):
    """The devices this host made for the instance (NICs, volumes)."""
    return build_container(instance, instance.flavor, None, policy,
                           host_side=host_side, builders=HOST_PARTS)


def with_host_side(container, instance, policy, host_side):
    """``container`` (its :data:`GUEST_PARTS`) with its host's parts.

    The same as :func:`build_container` with every part: the host's parts
    come last, so they win on a key both set.
    """
    fragment = host_fragment(instance, policy, host_side)
    return _merged(container, fragment['config'], fragment['devices'])


def rescue_container(instance, image_meta, policy, original, rootfs):
    """The rescue container: the instance's spec on the rescue image.

    It carries the name of the ``original`` container, whose root file
    system (host path ``rootfs``) it shows at ``/mnt/rescue``.
    """
    container = build_container(instance, instance.flavor, image_meta,
                                policy)
    container['config'][identity.KEY_RESCUE_OF] = original
    # /mnt shows the rescued root file system, not the ephemeral disk
    container['devices'].pop(EPHEMERAL_DEVICE, None)
    container['devices']['rescue'] = {
        'type': 'disk', 'source': rootfs, 'path': '/mnt/rescue'}
    return container
