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

"""The pure instance + flavor + image -> LXD container translation."""

import base64
import gzip
import json

from nova import objects
import testtools

from nova_lxd_accel.container import builder
from nova_lxd_accel.container import identity
from nova_lxd_accel.container import volume
from nova_lxd_accel import exception

UUID = '7a1c5f0e-4c0b-4a55-9d59-3f7c5d0f8e21'


def _flavor(**fields):
    values = dict(name='m1.small', vcpus=2, memory_mb=2048, root_gb=20,
                  ephemeral_gb=0, swap=0, extra_specs={})
    values.update(fields)
    return objects.Flavor(**values)


def _instance(flavor=None, **fields):
    values = dict(uuid=UUID, hostname='web-1', key_data=None,
                  user_data=None, flavor=flavor or _flavor())
    values.update(fields)
    return objects.Instance(**values)


def _image(**properties):
    return objects.ImageMeta.from_dict({
        'id': 'c0ffee00-0000-4000-8000-000000000001', 'disk_format': 'raw',
        'container_format': 'bare', 'properties': properties})


POLICY = builder.HostPolicy(host='cmp1', storage_pool='fast')


def _build(instance, image=None, policy=POLICY):
    return builder.build_container(instance, instance.flavor,
                                   image or _image(), policy)


class BuildContainerTest(testtools.TestCase):

    def setUp(self):
        super(BuildContainerTest, self).setUp()
        objects.register_all()

    def test_plain_flavor(self):
        container = _build(_instance())
        self.assertEqual({
            'user.nova_lxd_accel.instance_uuid': UUID,
            'user.nova_lxd_accel.host': 'cmp1',
            'limits.cpu': '2',
            'limits.memory': '2048MiB',
            'limits.processes': '8192',
            'security.privileged': 'false',
            'security.nesting': 'false',
            'boot.autostart': 'false',
            'user.meta-data': json.dumps(
                {'instance-id': UUID, 'local-hostname': 'web-1'},
                sort_keys=True),
        }, container['config'])
        self.assertEqual({'root': {'type': 'disk', 'path': '/',
                                   'pool': 'fast', 'size': '20GiB'}},
                         container['devices'])

    def test_zero_root_gb_has_no_size(self):
        container = _build(_instance(_flavor(root_gb=0)))
        self.assertNotIn('size', container['devices']['root'])

    def test_process_limit_from_flavor_wins_over_default(self):
        policy = builder.HostPolicy(
            host='cmp1', default_process_limit=500)
        flavor = _flavor(extra_specs={'lxd:processes': '64'})
        self.assertEqual('64', _build(_instance(flavor), policy=policy)[
            'config']['limits.processes'])
        self.assertEqual('500', _build(_instance(), policy=policy)[
            'config']['limits.processes'])
        # a flavor may also raise it above the default
        self.assertEqual('20000', _build(_instance(_flavor(extra_specs={
            'lxd:processes': '20000'})), policy=policy)['config'][
            'limits.processes'])
        # no limit only when the operator sets 0
        unlimited = builder.HostPolicy(host='cmp1', default_process_limit=0)
        self.assertNotIn('limits.processes',
                         _build(_instance(), policy=unlimited)['config'])

    def test_a_fork_bomb_meets_a_limit_by_default(self):
        # [lxd] default_process_limit's default reaches every container
        self.assertEqual('8192', _build(_instance())['config'][
            'limits.processes'])

    def test_nesting_with_a_mig_slice_is_refused_even_when_allowed(self):
        allowed = builder.HostPolicy(host='cmp1', allow_nesting=True)
        for key in ('resources:CUSTOM_MIG_1G_10GB',
                    'resources1:CUSTOM_MIG_3G_40GB'):
            flavor = _flavor(extra_specs={'lxd:nesting': 'true', key: '1'})
            error = self.assertRaises(exception.FlavorNotAllowed, _build,
                                      _instance(flavor), policy=allowed)
            self.assertIn('nested containers with a MIG slice', str(error))
        # nesting alone, or a whole GPU with nesting, is the operator's call
        for specs in ({'lxd:nesting': 'true'},
                      {'lxd:nesting': 'true', 'resources:PGPU': '1'},
                      {'lxd:nesting': 'true',
                       'resources:CUSTOM_MIG_1G_10GB': '0'}):
            self.assertEqual('true', _build(
                _instance(_flavor(extra_specs=specs)), policy=allowed)[
                'config']['security.nesting'])
        # a MIG slice without nesting stays fine
        self.assertEqual('false', _build(_instance(_flavor(extra_specs={
            'resources:CUSTOM_MIG_1G_10GB': '1'})))['config'][
            'security.nesting'])

    def test_privileged_needs_operator_consent(self):
        flavor = _flavor(extra_specs={'lxd:privileged': 'true'})
        error = self.assertRaises(exception.FlavorNotAllowed, _build,
                                  _instance(flavor))
        self.assertIn('allow_privileged_containers', str(error))
        allowed = builder.HostPolicy(host='cmp1', allow_privileged=True)
        self.assertEqual('true', _build(_instance(flavor), policy=allowed)[
            'config']['security.privileged'])

    def test_nesting_needs_operator_consent(self):
        flavor = _flavor(extra_specs={'lxd:nesting': 'yes'})
        error = self.assertRaises(exception.FlavorNotAllowed, _build,
                                  _instance(flavor))
        self.assertIn('allow_nesting', str(error))
        allowed = builder.HostPolicy(host='cmp1', allow_nesting=True)
        self.assertEqual('true', _build(_instance(flavor), policy=allowed)[
            'config']['security.nesting'])

    def test_isolated_idmap(self):
        flavor = _flavor(extra_specs={'lxd:isolated_idmap': 'True'})
        self.assertEqual('true', _build(_instance(flavor))['config'][
            'security.idmap.isolated'])

    def test_gpu_runtime(self):
        flavor = _flavor(extra_specs={'lxd:gpu_runtime': 'nvidia'})
        self.assertEqual('true', _build(_instance(flavor))['config'][
            'nvidia.runtime'])
        self.assertNotIn('nvidia.runtime', _build(_instance())['config'])

    def test_ephemeral_and_swap_refused(self):
        for flavor in (_flavor(ephemeral_gb=10), _flavor(swap=512)):
            error = self.assertRaises(exception.FlavorNotAllowed, _build,
                                      _instance(flavor))
            self.assertIn('--ephemeral 0 --swap 0', str(error))

    def test_image_properties_cannot_raise_privilege(self):
        image = _image(**{'os_type': 'linux'})
        # Whatever an image says, the security keys are the driver's own
        # and no raw.* key ever appears.
        container = _build(_instance(), image=image)
        self.assertEqual('false', container['config']['security.privileged'])
        self.assertEqual([], [key for key in container['config']
                              if key.startswith('raw.')])

    def test_unknown_extra_specs_are_not_copied(self):
        flavor = _flavor(extra_specs={'raw.lxc': 'lxc.apparmor.profile=x',
                                      'lxd:raw.lxc': 'x',
                                      'security.privileged': 'true'})
        container = _build(_instance(flavor))
        self.assertEqual('false', container['config']['security.privileged'])
        self.assertEqual([], [key for key in container['config']
                              if 'raw' in key])

    def test_user_data_and_keys(self):
        instance = _instance(
            user_data=base64.b64encode(b'#cloud-config\n').decode(),
            key_data='ssh-ed25519 AAAA test')
        config = _build(instance)['config']
        self.assertEqual(['ssh-ed25519 AAAA test'],
                         json.loads(config['user.meta-data'])['public-keys'])
        # User data is in the NoCloud seed only, never in a config string.
        self.assertEqual([], [key for key in config if 'user-data' in key])

    def test_user_data_seed_is_byte_exact(self):
        for data in (b'#cloud-config\nhostname: x\n',
                     gzip.compress(b'#!/bin/sh\necho hi\n'),
                     bytes(range(256)) * 4, 'h\u00e9llo \u2603\n'.encode()):
            instance = _instance(user_data=base64.b64encode(data).decode(),
                                 key_data='ssh-ed25519 AAAA k')
            seed = builder.cloud_init_seed(instance)
            self.assertEqual(
                ['/var/lib/cloud/seed/nocloud/meta-data',
                 '/var/lib/cloud/seed/nocloud/user-data'],
                [path for path, _data, _mode in seed])
            self.assertEqual(data, seed[1][1])
            self.assertEqual({0o600}, {mode for _p, _d, mode in seed})
            meta = json.loads(seed[0][1])
            self.assertEqual(UUID, meta['instance-id'])
            self.assertEqual(['ssh-ed25519 AAAA k'], meta['public-keys'])

    def test_no_user_data_no_seed(self):
        self.assertEqual([], builder.cloud_init_seed(_instance()))

    def test_container_names(self):
        self.assertEqual('nova-%s' % UUID,
                         identity.container_name('nova-', UUID))
        self.assertEqual('nova-rescue-%s' % UUID,
                         identity.container_name('nova-', UUID,
                                                 identity.ROLE_RESCUE))


class ProfileMasksTest(testtools.TestCase):

    def setUp(self):
        super(ProfileMasksTest, self).setUp()
        objects.register_all()

    def test_masks_applied_and_driver_still_wins(self):
        policy = builder.HostPolicy(
            host='cmp1', allow_privileged=True,
            masked_config=(('raw.lxc', '# stripped'),
                           ('security.privileged', 'false')),
            masked_devices=('gpu0',))
        container = _build(_instance(_flavor(
            extra_specs={'lxd:privileged': 'true'})), policy=policy)
        self.assertEqual('# stripped', container['config']['raw.lxc'])
        # The flavor's privilege, allowed by the operator, still wins.
        self.assertEqual('true', container['config']['security.privileged'])
        self.assertEqual({'type': 'none'}, container['devices']['gpu0'])

    def test_no_masks_by_default(self):
        container = _build(_instance())
        self.assertNotIn('raw.lxc', container['config'])
        self.assertNotIn('gpu0', container['devices'])


class ResizeChecksExtraSpecsTest(testtools.TestCase):

    def setUp(self):
        super(ResizeChecksExtraSpecsTest, self).setUp()
        objects.register_all()

    def test_bad_new_flavor_refused(self):
        flavor = _flavor(name='big', extra_specs={
            'lxd:processes': '99999999999'})
        error = self.assertRaises(
            exception.FlavorExtraSpecInvalid, builder.resize_fragment,
            _instance(), flavor, _image(), POLICY)
        self.assertIn('lxd:processes=99999999999', str(error))
        self.assertRaises(
            exception.FlavorNotAllowed, builder.resize_fragment,
            _instance(), _flavor(extra_specs={'lxd:nesting': 'true'}),
            _image(), POLICY)

    def test_good_new_flavor(self):
        fragment = builder.resize_fragment(
            _instance(), _flavor(vcpus=4, extra_specs={
                'lxd:processes': '500'}), _image(), POLICY)
        self.assertEqual('500', fragment['config']['limits.processes'])
        # the GPU runtime follows the flavor on resize too
        self.assertNotIn('nvidia.runtime', fragment['config'])
        fragment = builder.resize_fragment(
            _instance(), _flavor(extra_specs={'lxd:gpu_runtime': 'nvidia'}),
            _image(), POLICY)
        self.assertEqual('true', fragment['config']['nvidia.runtime'])


#: Flavors that between them make every flavor part set every key it can.
PERMISSIVE = builder.HostPolicy(host='cmp1', allow_privileged=True,
                                allow_nesting=True,
                                default_process_limit=100)
FULL_SPECS = {'lxd:privileged': 'true', 'lxd:nesting': 'true',
              'lxd:isolated_idmap': 'true', 'lxd:processes': '64',
              'lxd:gpu_runtime': 'nvidia',
              'quota:disk_read_bytes_sec': '1000',
              'quota:disk_write_iops_sec': '50',
              'quota:disk_total_bytes_sec': '2000'}


def _flavors():
    return [_flavor(), _flavor(root_gb=0), _flavor(extra_specs=FULL_SPECS),
            _flavor(extra_specs={'lxd:processes': '0'})]


class SpecPartsTest(testtools.TestCase):
    """One assembly: the parts, the keys they own, the host side."""

    def setUp(self):
        super(SpecPartsTest, self).setUp()
        objects.register_all()

    def test_flavor_parts_set_only_the_keys_they_declare(self):
        # A key a flavor part sets but does not declare would survive a
        # resize to a flavor without it (records.FLAVOR_KEYS).
        for part in builder.FLAVOR_PARTS:
            for flavor in _flavors():
                config = part(_instance(flavor), flavor, _image(),
                              PERMISSIVE).get('config', {})
                self.assertLessEqual(set(config), part.config_keys,
                                     (part.__name__, flavor.extra_specs))

    def test_declared_keys_are_all_set_by_some_flavor(self):
        # no stale declaration: each declared key is really produced
        produced = set()
        for flavor in _flavors():
            produced.update(builder.build_container(
                _instance(flavor), flavor, _image(), PERMISSIVE,
                builders=builder.FLAVOR_PARTS)['config'])
        self.assertEqual(set(builder.flavor_config_keys()), produced)

    def test_other_parts_do_not_follow_the_flavor(self):
        # every part that reads the flavor must be in FLAVOR_PARTS, or a
        # resize would keep the old flavor's value
        others = [part for part in builder.BUILDERS
                  if part not in builder.FLAVOR_PARTS]
        self.assertEqual(['profile_masks', 'ownership', 'boot', 'cloud_init',
                          'nics', 'volumes'], [p.__name__ for p in others])
        instance = _instance()
        for part in others:
            outputs = [part(instance, flavor, _image(), PERMISSIVE)
                       for flavor in _flavors()]
            for output in outputs[1:]:
                self.assertEqual(outputs[0], output, part.__name__)

    def test_all_builders_share_one_signature(self):
        flavor = _flavor(extra_specs=FULL_SPECS)
        for part in builder.BUILDERS:
            fragment = part(_instance(flavor), flavor, _image(), PERMISSIVE,
                            builder.NO_HOST_SIDE)
            self.assertLessEqual(set(fragment), {'config', 'devices'})

    def test_host_side_nics_and_volumes(self):
        vif = {'id': 'b1e0c5a2-7f3d-4e8b-9a61-2c4d5e6f7a80', 'type': 'ovs',
               'address': 'fa:16:3e:00:00:01', 'devname': 'tapb1e0c5a2-7f',
               'network': {'meta': {'mtu': 1450}}}
        host_side = builder.HostSide(
            network_info=(vif,), volumes=(
                volume.ConnectedVolume('vol-1', '/dev/sdb', '/dev/vdb'),
                volume.ConnectedVolume('vol-2', '/dev/sdc', '/data')))
        container = builder.build_container(
            _instance(), _flavor(), _image(), POLICY, host_side)
        self.assertEqual(
            {'type': 'nic', 'nictype': 'bridged', 'name': 'eth0',
             'host_name': 'tapb1e0c5a2-7f', 'parent': 'qbrb1e0c5a2-7f',
             'hwaddr': 'fa:16:3e:00:00:01', 'mtu': '1450'},
            container['devices']['nova-port-' + vif['id']])
        self.assertEqual({'type': 'unix-block', 'source': '/dev/sdb',
                          'path': '/dev/vdb'},
                         container['devices']['vol-1'])
        self.assertEqual({'type': 'disk', 'source': '/dev/sdc',
                          'path': '/data'}, container['devices']['vol-2'])
        self.assertEqual(
            {k: v for k, v in container['devices'].items() if k != 'root'},
            builder.host_fragment(_instance(), POLICY,
                                  host_side)['devices'])
        # a spawn builds the guest's parts once and adds the host's: the
        # same container as all parts built together
        self.assertEqual(container, builder.with_host_side(
            builder.build_container(_instance(), _flavor(), _image(), POLICY,
                                    builders=builder.GUEST_PARTS),
            _instance(), POLICY, host_side))
        # an unsupported port is refused by the pure assembly
        self.assertRaises(
            exception.VIFNotSupported, builder.build_container,
            _instance(), _flavor(), _image(), POLICY,
            builder.HostSide(network_info=(dict(vif, type='bridge'),)))

    def test_rescue_container(self):
        container = builder.rescue_container(
            _instance(), _image(), POLICY, 'nova-' + UUID, '/srv/rootfs')
        self.assertEqual('nova-' + UUID,
                         container['config'][identity.KEY_RESCUE_OF])
        self.assertEqual({'type': 'disk', 'source': '/srv/rootfs',
                          'path': '/mnt/rescue'},
                         container['devices']['rescue'])
        self.assertEqual('2048MiB', container['config']['limits.memory'])
