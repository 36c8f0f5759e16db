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

"""Container records transformed for resize and migration.

Each record is what LXD would give back for a container the real builder
made (nova objects in, accelerator binding merged, ``volatile.*`` keys
added as LXD adds them), so the transforms are checked against what the
driver itself writes: stripping a binding gives back the container
without it, and the host-side devices are exactly the builder's host
parts. tests/unit/instance/test_migration.py has the basic cases of each
function.
"""

import copy
import json

from nova import objects
import testtools

from nova_lxd_accel.accel.binding import binding_record
from nova_lxd_accel.accel import units
from nova_lxd_accel.container import builder
from nova_lxd_accel.container import identity
from nova_lxd_accel.container import records
from nova_lxd_accel.container import volume
from nova_lxd_accel import host

UUID = '7a1c5f0e-4c0b-4a55-9d59-3f7c5d0f8e21'
PORT = 'b1e0c5a2-7f3d-4e8b-9a61-2c4d5e6f7a80'
PCI = '0000:85:00.0'
POLICY = builder.HostPolicy(host='src', storage_pool='fast')
HOST_SIDE = builder.HostSide(
    network_info=({'id': PORT, 'type': 'ovs',
                   'address': 'fa:16:3e:00:00:01',
                   'devname': 'tapb1e0c5a2-7f',
                   'network': {'meta': {'mtu': 1450}}},),
    volumes=(volume.ConnectedVolume('vol-1', '/dev/sdb', '/dev/vdb'),
             volume.ConnectedVolume('vol-2', '/dev/sdc', '/data')))
#: What LXD adds to a container's config by itself.
VOLATILE = {'volatile.uuid': '5e1b5e7c-6a0f-4f43-a1a3-1c2bd8f0e0c4',
            'volatile.base_image': 'c0ffee',
            'volatile.eth0.hwaddr': 'fa:16:3e:00:00:01',
            'volatile.idmap.base': '1000000'}


def _unit(name, kind, rc, key, device, **detail):
    return binding_record.Unit(
        name=name, kind=kind, resource_class=rc,
        provider='11111111-1111-1111-1111-111111111111',
        device_pci=PCI, key=key, device=device, detail=detail)


PGPU = _unit('nova-gpu0', units.KIND_PGPU, 'PGPU', 'pci:' + PCI,
             {'type': 'gpu', 'gputype': 'physical', 'pci': PCI})
MIG = _unit('nova-mig0', units.KIND_MIG, 'CUSTOM_MIG_1G_10GB',
            'mig:MIG-4b3b4e45-7f83-5b1b-9a2e-0d3c35a1b2c3',
            {'type': 'gpu', 'gputype': 'mig', 'pci': PCI,
             'mig.uuid': 'MIG-4b3b4e45-7f83-5b1b-9a2e-0d3c35a1b2c3'},
            mig_uuid='MIG-4b3b4e45-7f83-5b1b-9a2e-0d3c35a1b2c3',
            mig_profile='1g.10gb')
SHARE_MPS = _unit('nova-gpushare0', units.KIND_SHARE, 'CUSTOM_GPU_SHARE',
                  units.share_key(PCI, 0),
                  {'type': 'gpu', 'gputype': 'physical', 'pci': PCI},
                  slot=0, project_id='p1',
                  mps_pipe='/run/nvidia-mps-{pci}',
                  mps_shm='/run/nvidia-mps-{pci}-shm',
                  gpu_memory_mb=8192, gpu_compute_percent=50)
IB_VF = _unit('nova-ib0', units.KIND_IB_VF, 'CUSTOM_INFINIBAND_VF',
              'netdev:ib0v2',
              {'type': 'infiniband', 'nictype': 'physical',
               'parent': 'ib0v2'},
              netdev='ib0v2', vf_pci='0000:3b:00.2')


def _flavor(**extra_specs):
    return objects.Flavor(name='g1', vcpus=2, memory_mb=2048, root_gb=20,
                          ephemeral_gb=0, swap=0, extra_specs=extra_specs)


def _instance(flavor):
    return objects.Instance(uuid=UUID, hostname='gpu-1', key_data=None,
                            user_data=None, flavor=flavor)


def _image():
    return objects.ImageMeta.from_dict({
        'id': 'c0ffee00-0000-4000-8000-000000000001', 'disk_format': 'raw',
        'container_format': 'bare', 'properties': {}})


def _built(flavor=None, host_side=HOST_SIDE):
    flavor = flavor or _flavor()
    return builder.build_container(_instance(flavor), flavor, _image(),
                                   POLICY, host_side)


def _record(container, binding=None):
    """LXD's record of ``container`` once created with ``binding``."""
    if binding is not None:
        container = builder.with_accelerators(container, binding)
    config = dict(container['config'], **VOLATILE)
    return {'name': 'nova-' + UUID, 'status': 'Stopped', 'type': 'container',
            'architecture': 'x86_64', 'config': config,
            'devices': container['devices'], 'profiles': ['default'],
            'project': 'default', 'stateful': False}


class WithoutAcceleratorsTest(testtools.TestCase):

    def setUp(self):
        super(WithoutAcceleratorsTest, self).setUp()
        objects.register_all()

    def test_every_kind_of_binding_is_stripped_back(self):
        plain = _built()
        for bound in ((PGPU,), (MIG,), (SHARE_MPS,), (IB_VF,),
                      (PGPU, IB_VF)):
            record = _record(plain, binding_record.Binding(units=bound))
            config, devices = records.without_accelerators(record)
            self.assertEqual(dict(plain['config'], **VOLATILE), config,
                             [u.name for u in bound])
            self.assertEqual(plain['devices'], devices,
                             [u.name for u in bound])

    def test_mps_mounts_and_limits_are_named_as_the_bindings(self):
        record = _record(_built(), binding_record.Binding(units=(SHARE_MPS,)))
        self.assertEqual({'nova-gpushare0', 'mps-pipe', 'mps-shm'},
                         records.accelerator_device_names(record))
        self.assertIn('environment.CUDA_MPS_PIPE_DIRECTORY',
                      record['config'])

    def test_the_flavors_gpu_runtime_stays_without_a_binding(self):
        # lxd:gpu_runtime=nvidia without any GPU bound (the host's driver
        # libraries only): nothing to strip, the flavor's key stays
        record = _record(_built(_flavor(**{'lxd:gpu_runtime': 'nvidia'})))
        config, _devices = records.without_accelerators(record)
        self.assertEqual('true', config['nvidia.runtime'])

    def test_devices_named_in_the_binding_record_go_too(self):
        # a device named by an older release, without today's prefix
        record = _record(_built())
        record['devices']['gpu-legacy'] = {'type': 'gpu', 'pci': PCI}
        record['config'][identity.KEY_DEVICES] = json.dumps(
            [{'name': 'gpu-legacy', 'unit': 'pci:' + PCI}])
        self.assertNotIn('gpu-legacy',
                         records.without_accelerators(record)[1])

    def test_a_damaged_binding_record_still_strips_by_prefix(self):
        record = _record(_built(), binding_record.Binding(units=(PGPU,)))
        record['config'][identity.KEY_DEVICES] = '[{"unit": '
        config, devices = records.without_accelerators(record)
        self.assertNotIn('nova-gpu0', devices)
        self.assertNotIn(identity.KEY_DEVICES, config)

    def test_a_record_without_config_or_devices(self):
        self.assertEqual(({}, {}), records.without_accelerators(
            {'name': 'c1', 'config': None, 'devices': None}))
        self.assertEqual(set(), records.accelerator_device_names({}))


class HostSideDevicesTest(testtools.TestCase):

    def setUp(self):
        super(HostSideDevicesTest, self).setUp()
        objects.register_all()

    def test_host_side_devices_are_the_builders_host_parts(self):
        record = _record(_built(), binding_record.Binding(units=(PGPU, IB_VF)))
        record['devices']['shared'] = {'type': 'disk', 'source': '/srv/x',
                                       'path': '/mnt/x'}
        host_side = {name for name, device in record['devices'].items()
                     if records.is_host_side_device(name, device)}
        expected = builder.host_fragment(
            _instance(_flavor()), POLICY, HOST_SIDE)['devices']
        self.assertEqual(set(expected), host_side)

    def test_accelerators_root_and_masks_are_not_host_side(self):
        for name, device in (
                ('root', {'type': 'disk', 'path': '/', 'pool': 'fast'}),
                ('root', {'type': 'disk', 'path': '/',
                          'source': '/dev/sda'}),
                ('nova-gpu0', dict(PGPU.device)),
                ('nova-ib0', dict(IB_VF.device)),
                ('gpu0', {'type': 'none'}),
                ('mps-pipe', {'type': 'disk', 'source': '/run/nvidia-mps',
                              'path': '/run/nvidia-mps'}),
                ('untyped', {})):
            self.assertFalse(records.is_host_side_device(name, device),
                             name)


class TransferRecordTest(testtools.TestCase):

    def setUp(self):
        super(TransferRecordTest, self).setUp()
        objects.register_all()

    def test_the_copy_carries_only_what_the_destination_cannot_make(self):
        plain = _built(host_side=builder.NO_HOST_SIDE)
        record = _record(_built(), binding_record.Binding(units=(MIG,)))
        sent = records.transfer_record(record, 'dst')
        expected = dict(plain['config'])
        expected[identity.KEY_HOST] = 'dst'
        self.assertEqual(expected, sent['config'])
        self.assertEqual(plain['devices'], sent['devices'])

    def test_the_record_given_is_not_changed(self):
        record = _record(_built(), binding_record.Binding(units=(SHARE_MPS,)))
        before = copy.deepcopy(record)
        records.transfer_record(record, 'dst')
        records.backup_config(record['config'], 'src')
        self.assertEqual(before, record)

    def test_the_source_profiles_are_not_sent(self):
        # the destination gives it its own [lxd] profiles when it finishes
        record = _record(_built())
        record['profiles'] = ['default', 'gpu-everywhere']
        self.assertEqual([], records.transfer_record(record, 'dst')[
            'profiles'])
        del record['profiles']
        self.assertEqual([], records.transfer_record(record, 'dst')[
            'profiles'])


class OwnershipTest(testtools.TestCase):

    def setUp(self):
        super(OwnershipTest, self).setUp()
        objects.register_all()

    def test_the_kept_original_is_no_instance_until_restored(self):
        record = _record(_built())
        kept = dict(record, config=records.backup_config(
            record['config'], 'src'))
        self.assertFalse(identity.is_ours(kept, 'src'))
        self.assertEqual([], identity.instances([kept], 'src'))
        restored = dict(kept, config=records.restored_config(
            kept['config'], 'src'))
        self.assertEqual([restored], identity.instances([restored], 'src'))
        self.assertNotIn(identity.KEY_BACKUP_OF, restored['config'])


class ResizedTest(testtools.TestCase):

    def setUp(self):
        super(ResizedTest, self).setUp()
        objects.register_all()

    def test_mps_limits_of_the_old_share_do_not_survive(self):
        old = _record(_built(), binding_record.Binding(units=(SHARE_MPS,)))
        fragment = builder.resize_fragment(
            _instance(_flavor()), _flavor(), _image(), POLICY)
        config, devices = records.resized(
            old, fragment, 'dst', {}, binding_record.Binding(units=(PGPU,)))
        self.assertEqual([], [k for k in config
                              if k.startswith(records.MPS_CONFIG_PREFIX)])
        self.assertFalse(set(records.MPS_DEVICE_NAMES) & set(devices))
        self.assertEqual(['pci:' + PCI], [
            u['unit'] for u in identity.recorded_units(config)])

    def test_this_hosts_devices_replace_the_old_hosts(self):
        old = _record(_built(), binding_record.Binding(units=(IB_VF,)))
        new_nic = {'type': 'nic', 'nictype': 'bridged', 'name': 'eth0',
                   'parent': 'qbrb1e0c5a2-7f', 'host_name': 'tapb1e0c5a2-7f'}
        fragment = builder.resize_fragment(
            _instance(_flavor()), _flavor(), _image(), POLICY)
        config, devices = records.resized(
            old, fragment, 'dst', {'nova-port-' + PORT: new_nic},
            binding_record.Binding())
        self.assertEqual(['nova-port-' + PORT, 'root'], sorted(devices))
        self.assertEqual(new_nic, devices['nova-port-' + PORT])
        self.assertEqual('dst', config[identity.KEY_HOST])
        # LXD's own keys stay for the daemon that set them
        self.assertEqual(VOLATILE, {k: v for k, v in config.items()
                                    if k.startswith('volatile.')})

    def test_the_guest_api_follows_the_hosts_policy(self):
        # a container made before [lxd] devlxd existed has no key: a
        # resize or migration turns /dev/lxd off
        before = _record(_built())
        del before['config']['security.devlxd']
        fragment = builder.resize_fragment(
            _instance(_flavor()), _flavor(), _image(), POLICY)
        config, _devices = records.resized(before, fragment, 'dst', {},
                                           binding_record.Binding())
        self.assertEqual('false', config['security.devlxd'])
        # an operator who keeps it gets the daemon's default back
        kept = builder.HostPolicy(host='dst', devlxd=True)
        fragment = builder.resize_fragment(
            _instance(_flavor()), _flavor(), _image(), kept)
        config, _devices = records.resized(_record(_built()), fragment,
                                           'dst', {}, binding_record.Binding())
        self.assertNotIn('security.devlxd', config)
        # on Incus the key has its other name, and LXD's is not left
        incus = builder.HostPolicy(
            host='dst', guest_api_key=builder.GUEST_API_KEY_INCUS)
        fragment = builder.resize_fragment(
            _instance(_flavor()), _flavor(), _image(), incus)
        config, _devices = records.resized(_record(_built()), fragment,
                                           'dst', {}, binding_record.Binding())
        self.assertEqual('false', config['security.guestapi'])
        self.assertNotIn('security.devlxd', config)


#: the masks of the [lxd] profiles of the source and of the destination
#: (nova_lxd_accel.host.profile_masks of their unsafe content, strip mode)
SOURCE_POLICY = builder.HostPolicy(
    host='src', masked_config=(('raw.lxc', '# stripped by nova-lxd-accel'),
                               ('security.syscalls.intercept.mknod',
                                'false')),
    masked_devices=('src-gpu',))
DEST_POLICY = builder.HostPolicy(
    host='dst', masked_config=(('raw.apparmor',
                                '# stripped by nova-lxd-accel'),
                               ('security.privileged', 'false')),
    masked_devices=('dst-socket', 'root'))


class ProfileMasksTest(testtools.TestCase):
    """A migration writes the destination's masks, not the source's.

    Each host masks the unsafe content of its own ``[lxd] profiles``; the
    destination's profiles are not the source's, so the masks the
    container brings would hide the wrong things and miss the
    destination's.
    """

    def setUp(self):
        super(ProfileMasksTest, self).setUp()
        objects.register_all()

    def moved(self, policy=DEST_POLICY):
        flavor = _flavor()
        old = builder.build_container(_instance(flavor), flavor, _image(),
                                      SOURCE_POLICY, HOST_SIDE)
        fragment = builder.resize_fragment(_instance(flavor), flavor,
                                           _image(), policy)
        return records.resized(_record(old), fragment, 'dst', {},
                               binding_record.Binding())

    def test_the_destination_masks_its_own_profiles(self):
        config, devices = self.moved()
        self.assertEqual('# stripped by nova-lxd-accel',
                         config['raw.apparmor'])
        self.assertEqual({'type': 'none'}, devices['dst-socket'])
        # the driver's own choices still win over a mask
        self.assertEqual('disk', devices['root']['type'])

    def test_the_source_masks_are_not_carried(self):
        config, devices = self.moved()
        self.assertNotIn('raw.lxc', config)
        self.assertNotIn('security.syscalls.intercept.mknod', config)
        self.assertNotIn('src-gpu', devices)
        # nor on a destination that masks nothing
        config, devices = self.moved(builder.HostPolicy(host='dst'))
        self.assertEqual([], [k for k in config if k.startswith(
            builder.MASK_ONLY_CONFIG_PREFIXES)])
        self.assertEqual([], [n for n, d in devices.items()
                              if d['type'] == builder.MASK_DEVICE_TYPE])

    def test_every_mask_is_dropped_or_set_again(self):
        # each key a mask can set (nova_lxd_accel.host.profile_masks) is
        # either a mask-only key, dropped on resize and migration, or a
        # flavor key, which the new flavor's parts set again
        unsafe = {'config': {
            'raw.lxc': 'x', 'raw.apparmor': 'x',
            'security.privileged': 'true', 'security.nesting': 'true',
            'security.syscalls.intercept.mknod': 'true',
            'security.syscalls.intercept.bpf': 'true'},
            'devices': {'g': {'type': 'gpu'}}}
        config, _devices = host.profile_masks([unsafe])
        self.assertEqual(6, len(config))
        for key in config:
            self.assertTrue(key.startswith(
                builder.MASK_ONLY_CONFIG_PREFIXES) or
                key in records.FLAVOR_KEYS, key)
