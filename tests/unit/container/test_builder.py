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
import dataclasses
import gzip
import json

import hypothesis
from hypothesis import strategies as st
from nova.api.validation.extra_specs import validators
from nova import exception as nova_exception
from nova import objects
from oslo_config import cfg
from oslo_config import fixture as config_fixture
from oslo_utils import strutils
import testtools

from nova_lxd_accel import conf as nova_lxd_accel_conf
from nova_lxd_accel.container import builder
from nova_lxd_accel.container import identity
from nova_lxd_accel.container import nic
from nova_lxd_accel.container import records
from nova_lxd_accel.container import volume
from nova_lxd_accel import exception
from nova_lxd_accel.extra_specs import lxd_keys

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
            'security.devlxd': 'false',
            'security.idmap.isolated': 'true',
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

    def test_gpu_runtime(self):
        flavor = _flavor(extra_specs={'lxd:gpu_runtime': 'nvidia'})
        self.assertEqual('true', _build(_instance(flavor))['config'][
            'nvidia.runtime'])
        self.assertNotIn('nvidia.runtime', _build(_instance())['config'])

    def test_swap_refused_with_its_reason(self):
        error = self.assertRaises(exception.FlavorNotAllowed, _build,
                                  _instance(_flavor(swap=512)))
        self.assertIn('limits.memory.swap only turns swap on or off',
                      str(error))
        self.assertIn('--swap 0', str(error))

    def test_ephemeral_disk_is_a_custom_volume_at_mnt(self):
        instance = _instance(_flavor(ephemeral_gb=10))
        self.assertEqual(
            {'type': 'disk', 'pool': 'fast', 'path': '/mnt',
             'source': 'nova-%s-ephemeral0' % instance.uuid},
            _build(instance)['devices']['ephemeral0'])
        self.assertEqual({'size': '10GiB'},
                         builder.ephemeral_volume_config(instance.flavor))
        self.assertNotIn('ephemeral0', _build(_instance())['devices'])

    def test_ephemeral_volume_named_with_the_prefix(self):
        policy = builder.HostPolicy(host='cmp1', storage_pool='fast',
                                    name_prefix='os-')
        instance = _instance(_flavor(ephemeral_gb=1))
        device = builder.ephemeral_disk(instance, instance.flavor, None,
                                        policy)['devices']['ephemeral0']
        self.assertEqual('os-%s-ephemeral0' % instance.uuid,
                         device['source'])

    def test_ephemeral_disk_follows_the_flavor_on_resize(self):
        instance = _instance(_flavor(ephemeral_gb=2))
        fragment = builder.resize_fragment(instance, instance.flavor, None,
                                           POLICY)
        self.assertEqual('/mnt', fragment['devices']['ephemeral0']['path'])

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


class GuestAPITest(testtools.TestCase):
    """No /dev/lxd unless the operator keeps it ([lxd] devlxd)."""

    def setUp(self):
        super(GuestAPITest, self).setUp()
        objects.register_all()

    def _conf(self, **lxd):
        conf = cfg.ConfigOpts()
        nova_lxd_accel_conf.register_opts(conf)
        conf([], project='nova-lxd-accel-test')
        # overrides live in the (shared) option groups: undo them after
        self.useFixture(config_fixture.Config(conf)).config(group='lxd',
                                                            **lxd)
        return conf

    def test_the_tenant_cannot_read_the_drivers_keys_by_default(self):
        # /dev/lxd shows every config key: user.nova_lxd_accel.* included
        policy = builder.HostPolicy.from_conf(self._conf(), host='cmp1')
        self.assertFalse(policy.devlxd)
        for flavor in _flavors():
            config = _build(_instance(flavor), policy=PERMISSIVE)['config']
            self.assertEqual('false', config['security.devlxd'])
        self.assertEqual('false', _build(_instance(), policy=policy)[
            'config']['security.devlxd'])

    def test_the_option_keeps_the_daemons_default(self):
        policy = builder.HostPolicy.from_conf(self._conf(devlxd=True),
                                              host='cmp1')
        config = _build(_instance(), policy=policy)['config']
        # unset: LXD's default (on), or an [lxd] profiles value, applies
        self.assertNotIn('security.devlxd', config)
        self.assertNotIn('security.guestapi', config)

    def test_incus_names_it_guestapi(self):
        # Incus refuses security.devlxd ("Unknown configuration key")
        policy = builder.HostPolicy.from_conf(
            self._conf(), host='cmp1',
            guest_api_key=builder.GUEST_API_KEY_INCUS)
        config = _build(_instance(), policy=policy)['config']
        self.assertEqual('false', config['security.guestapi'])
        self.assertNotIn('security.devlxd', config)

    def test_set_again_on_resize_and_migration(self):
        # a resize or a migration writes the host's policy, whatever the
        # container had (made before the option, or on another daemon)
        fragment = builder.resize_fragment(_instance(), _flavor(), _image(),
                                           POLICY)
        self.assertEqual('false', fragment['config']['security.devlxd'])
        self.assertLessEqual({'security.devlxd', 'security.guestapi'},
                             builder.flavor_config_keys())

    def test_the_rescue_container_has_none_either(self):
        container = builder.rescue_container(
            _instance(), _image(), POLICY, 'nova-' + UUID, '/var/x/rootfs')
        self.assertEqual('false', container['config']['security.devlxd'])


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


#: a share of a GPU with MPS quotas, as ``nova-lxd-accel flavors`` makes it
MPS_QUOTA_SPECS = {'resources1:CUSTOM_GPU_SHARE': '1',
                   'resources1:CUSTOM_GPU_MEMORY_MB': '1024',
                   'trait1:CUSTOM_GPU_SHARING_QUOTA': 'required',
                   'lxd:gpu_memory_mb': '1024'}


class IsolatedIdmapTest(testtools.TestCase):
    """A host user-id range per container unless the flavor says not."""

    def setUp(self):
        super(IsolatedIdmapTest, self).setUp()
        objects.register_all()

    def isolated(self, policy=POLICY, **specs):
        return _build(_instance(_flavor(extra_specs=specs)), policy=policy)[
            'config']['security.idmap.isolated']

    def test_on_by_default(self):
        self.assertEqual('true', self.isolated())
        conf = self.useFixture(config_fixture.Config(cfg.ConfigOpts())).conf
        nova_lxd_accel_conf.register_opts(conf)
        conf([], default_config_files=[])
        self.assertTrue(conf.lxd.isolated_idmap)
        self.assertEqual('true', self.isolated(
            policy=builder.HostPolicy.from_conf(conf, 'cmp1')))
        conf.set_override('isolated_idmap', False, group='lxd')
        self.assertEqual('false', self.isolated(
            policy=builder.HostPolicy.from_conf(conf, 'cmp1')))

    def test_the_flavor_decides_either_way(self):
        shared = builder.HostPolicy(host='cmp1', isolated_idmap=False)
        self.assertEqual('false', self.isolated(policy=shared))
        self.assertEqual('true', self.isolated(
            policy=shared, **{'lxd:isolated_idmap': 'True'}))
        self.assertEqual('false', self.isolated(
            **{'lxd:isolated_idmap': 'false'}))

    def test_mps_quota_share_refused_in_an_isolated_container(self):
        # an MPS server serves one host user at a time: the clients of
        # another isolated container would queue without an error
        error = self.assertRaises(
            exception.MpsNeedsSharedIdmap, self.isolated, **MPS_QUOTA_SPECS)
        self.assertIsInstance(error, exception.FlavorNotAllowed)
        self.assertIn("this host's [lxd] isolated_idmap = true", str(error))
        self.assertIn('lxd:isolated_idmap=false', str(error))
        error = self.assertRaises(
            exception.MpsNeedsSharedIdmap, self.isolated,
            policy=builder.HostPolicy(host='cmp1', isolated_idmap=False),
            **dict(MPS_QUOTA_SPECS, **{'lxd:isolated_idmap': 'yes'}))
        self.assertIn('its lxd:isolated_idmap=yes', str(error))

    def test_mps_quota_share_with_the_flavor_turning_isolation_off(self):
        self.assertEqual('false', self.isolated(
            **dict(MPS_QUOTA_SPECS, **{'lxd:isolated_idmap': 'false'})))

    def test_time_sliced_share_runs_isolated(self):
        # no MPS server on a time-sliced GPU
        self.assertEqual('true', self.isolated(**{
            'resources:CUSTOM_GPU_SHARE': '1',
            'trait:CUSTOM_GPU_SHARING_TIMESLICE': 'required'}))

    def test_resize_to_an_mps_quota_flavor_refused(self):
        self.assertRaises(
            exception.MpsNeedsSharedIdmap, builder.resize_fragment,
            _instance(), _flavor(extra_specs=MPS_QUOTA_SPECS), _image(),
            POLICY)
        fragment = builder.resize_fragment(
            _instance(), _flavor(extra_specs=dict(
                MPS_QUOTA_SPECS, **{'lxd:isolated_idmap': 'false'})),
            _image(), POLICY)
        self.assertEqual('false',
                         fragment['config']['security.idmap.isolated'])


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
        incus = dataclasses.replace(
            PERMISSIVE, guest_api_key=builder.GUEST_API_KEY_INCUS)
        for flavor in _flavors():
            for policy in (PERMISSIVE, incus):
                produced.update(builder.build_container(
                    _instance(flavor), flavor, _image(), policy,
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

    def test_rescue_container_leaves_the_ephemeral_disk_out(self):
        container = builder.rescue_container(
            _instance(_flavor(ephemeral_gb=1)), _image(), POLICY,
            'nova-' + UUID, '/srv/rootfs')
        self.assertNotIn('ephemeral0', container['devices'])


# Any flavor, image and instance (issue 43, "Also"): the driver either
# refuses with one of its own clear errors, or builds a container with only
# the keys, devices and paths it chooses itself. The review that found the
# builder safe by construction fuzzed 170,000 flavors once; this keeps a
# fixed slice of that search in the unit suite, so a later change that
# passes a tenant's or an image's string through fails here.

#: Every config key the driver's parts may write; the oracle is spelled out
#: here, not read from builder, so that a new key is a reviewed decision.
ALLOWED_CONFIG_KEYS = frozenset((
    identity.KEY_INSTANCE_UUID, identity.KEY_HOST,
    'limits.cpu', 'limits.memory', 'limits.processes',
    'security.privileged', 'security.nesting', 'security.idmap.isolated',
    # the guest API off ([lxd] devlxd): LXD's name and Incus'
    'security.devlxd', 'security.guestapi',
    'nvidia.runtime', 'boot.autostart', 'user.meta-data'))
#: The root disk's keys: the driver's pool, size and I/O limits only (a
#: ``source`` would show a host path to the tenant).
ALLOWED_ROOT_KEYS = frozenset(('type', 'path', 'pool', 'size',
                               'limits.read', 'limits.write', 'limits.max'))
#: What a refusal is: the driver's own flavor errors (nova's
#: ValidationError is wrapped into FlavorExtraSpecInvalid by check_flavor).
REFUSALS = (exception.FlavorNotAllowed, exception.FlavorExtraSpecInvalid)


def _driver_device(name):
    """Whether a device name is one only the driver gives."""
    return (name in ('root', 'rescue') + records.MPS_DEVICE_NAMES or
            name.startswith(identity.ACCEL_DEVICE_PREFIXES +
                            (nic.DEVICE_PREFIX, volume.DEVICE_PREFIX)))


#: Strings a tenant or a careless operator might type: line breaks that
#: could forge a second config line, shell and path syntax, look-alike
#: booleans, numbers past every limit, bidi and non-ASCII digits.
HOSTILE = ('', ' ', 'true', 'True', 'yes', 'on', '1', '0', '-1', 'false',
           'none', 'nvidia', 'required', 'forbidden', '64', '1024',
           'true\nraw.lxc=lxc.apparmor.profile=unconfined',
           'security.privileged=true', '1;rm -rf /', '$(reboot)', '`id`',
           '../../../etc/shadow', '/dev/mem', '/', '..', '\x00', 'a\rb',
           '\u202etrue', '\uff11\uff12', '1e9', '0x10', ' 64 ', '+5',
           '9' * 40, '-' + '9' * 40, '9' * 5000, '%(flavor)s', '{0}')
_VALUES = st.one_of(
    st.sampled_from(HOSTILE),
    st.integers(min_value=-2 ** 70, max_value=2 ** 70).map(str),
    st.text(max_size=12))
#: The keys the driver or nova reads, and the raw/security keys of LXD
#: itself, which must never pass through.
KNOWN_KEYS = (sorted(lxd_keys._VALIDATORS) + [
    'lxd:raw.lxc', 'lxd:security.privileged', 'raw.lxc', 'raw.idmap',
    'raw.apparmor', 'security.privileged', 'security.nesting',
    'linux.kernel_modules', 'quota:disk_read_bytes_sec',
    'quota:disk_write_bytes_sec', 'quota:disk_total_bytes_sec',
    'quota:disk_read_iops_sec', 'quota:disk_write_iops_sec',
    'quota:disk_total_iops_sec', 'quota:cpu_shares',
    'quota:vif_inbound_average', 'resources:CUSTOM_MIG_1G_10GB',
    'resources1:CUSTOM_MIG_3G_40GB', 'resources1:CUSTOM_GPU_SHARE',
    'resources1:CUSTOM_GPU_MEMORY_MB', 'resources:CUSTOM_GPU_MEMORY_MB',
    'resources:PGPU', 'resources_ib:CUSTOM_INFINIBAND_PORT',
    'trait1:CUSTOM_GPU_SHARING_QUOTA', 'trait:CUSTOM_GPU_SHARING_QUOTA',
    'trait:CUSTOM_GPU_SHARING_TIMESLICE', 'hw:cpu_policy',
    'hw:mem_page_size', 'accounting:accelerator_count', 'Accelerator:Type',
    'Accelerator:Number', 'Accelerator:Model'])
_KEYS = st.one_of(
    st.sampled_from(KNOWN_KEYS),
    st.builds(lambda ns, name: ns + name,
              st.sampled_from(('lxd:', 'quota:', 'resources', 'resources1:',
                               'resources_x:', 'trait', 'trait1:', 'hw:',
                               'accounting:', 'Accelerator:', 'raw.', '')),
              st.one_of(st.sampled_from(HOSTILE), st.text(max_size=12))))
_NAMES = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=16))

_FLAVORS = st.builds(
    _flavor, name=_NAMES,
    vcpus=st.integers(min_value=1, max_value=1024),
    memory_mb=st.integers(min_value=1, max_value=2 ** 31 - 1),
    root_gb=st.integers(min_value=0, max_value=2 ** 31 - 1),
    ephemeral_gb=st.sampled_from((0, 0, 0, 10)),
    swap=st.sampled_from((0, 0, 0, 512)),
    extra_specs=st.dictionaries(_KEYS, _VALUES, max_size=8))
#: Image properties nova keeps as free strings, and keys ImageMeta drops
#: (an image can set them in Glance all the same).
_IMAGE_PROPERTIES = st.dictionaries(
    st.sampled_from(('os_distro', 'os_command_line', 'os_admin_user',
                     'hw_machine_type', 'raw.lxc', 'security.privileged',
                     'lxd:privileged', 'lxd_accel_mps_environment')),
    _NAMES, max_size=4)


def _instances(flavor):
    return st.builds(
        _instance, flavor=st.just(flavor),
        uuid=st.uuids().map(str),
        hostname=st.one_of(st.none(), _NAMES),
        display_name=_NAMES,
        key_data=st.one_of(st.none(), _NAMES),
        user_data=st.one_of(
            st.none(),
            st.binary(min_size=1, max_size=64).map(
                lambda data: base64.b64encode(data).decode())),
        metadata=st.dictionaries(_NAMES, _NAMES, max_size=3))


_POLICIES = st.builds(
    builder.HostPolicy, host=st.just('cmp1'),
    allow_privileged=st.booleans(), allow_nesting=st.booleans(),
    default_process_limit=st.sampled_from((0, 1, 8192)))


def _api_accepts(specs):
    """Whether nova's API (2.86+, with our validators) takes the lxd: keys.

    Only those: check_flavor judges no other key on its own. Nova's
    registry is read as validators.validate reads it, without its search
    of an unknown key through all 500 validators' patterns (seconds per
    hundred examples): no lxd: validator has parameters, and ``lxd`` is a
    namespace nova knows, so an unknown lxd: key is refused there.
    """
    try:
        for key, value in specs.items():
            if not key.startswith('lxd:'):
                continue
            if key not in validators.VALIDATORS:
                return False
            validators.VALIDATORS[key].validate(key, value)
    except nova_exception.ValidationError:
        return False
    return True


def _spawn(instance, image, policy):
    """The container, by the entry points Lifecycle.spawn calls."""
    lxd_keys.check_flavor(instance.flavor, policy)
    container = builder.build_container(instance, instance.flavor, image,
                                        policy, builders=builder.GUEST_PARTS)
    return builder.with_host_side(container, instance, policy,
                                  builder.NO_HOST_SIDE)


class AnyFlavorPropertyTest(testtools.TestCase):
    """For any flavor: a clear refusal, or only the driver's own keys."""

    def setUp(self):
        super(AnyFlavorPropertyTest, self).setUp()
        objects.register_all()

    def test_nova_knows_the_lxd_namespace(self):
        # what _api_accepts takes for granted
        self.assertIn('lxd', validators.NAMESPACES)
        self.assertEqual([], [v.parameters for v in
                              lxd_keys.EXTRA_SPEC_VALIDATORS if v.parameters])
        self.assertRaises(nova_exception.ValidationError,
                          validators.validate, 'lxd:no_such_key', '1')

    def _assert_only_the_drivers(self, container, instance, policy):
        config, devices = container['config'], container['devices']
        self.assertLessEqual(set(config), ALLOWED_CONFIG_KEYS)
        self.assertLessEqual(builder.flavor_config_keys(),
                             ALLOWED_CONFIG_KEYS)
        self.assertEqual([], [k for k in config if k.startswith('raw.')])
        self.assertTrue(all(isinstance(v, str) for v in config.values()))
        specs = instance.flavor.extra_specs
        for key, spec, allowed in (
                ('security.privileged', 'lxd:privileged',
                 policy.allow_privileged),
                ('security.nesting', 'lxd:nesting', policy.allow_nesting)):
            # 'true' only where the operator allows it and the flavor asks
            self.assertIn(config[key], ('true', 'false'))
            if config[key] == 'true':
                self.assertTrue(allowed, key)
                self.assertTrue(strutils.bool_from_string(specs[spec]), key)
        self.assertIn(config.get('security.idmap.isolated'), (None, 'true'))
        self.assertIn(config.get('nvidia.runtime'), (None, 'true'))
        self.assertEqual('false', config['boot.autostart'])
        self.assertEqual(instance.uuid, config[identity.KEY_INSTANCE_UUID])
        self.assertEqual(policy.host, config[identity.KEY_HOST])
        self.assertEqual(str(instance.flavor.vcpus), config['limits.cpu'])
        self.assertEqual('%dMiB' % instance.flavor.memory_mb,
                         config['limits.memory'])
        if 'limits.processes' in config:
            self.assertLessEqual(1, int(config['limits.processes']))
            self.assertLessEqual(int(config['limits.processes']),
                                 lxd_keys.MAX_PROCESSES)
            self.assertRegex(config['limits.processes'], r'^[0-9]+$')
        # nova's metadata, as one JSON document of the driver's own keys;
        # user data is never a config string (cloud_init_seed carries it)
        meta = json.loads(config['user.meta-data'])
        expected = {'instance-id': instance.uuid,
                    'local-hostname': instance.hostname or instance.uuid}
        if instance.key_data:
            expected['public-keys'] = [instance.key_data]
        self.assertEqual(expected, meta)
        # the root disk, and the ephemeral disk of a flavor with one: the
        # driver's pool, its own volume name and paths, no host path
        devices = dict(devices)
        ephemeral = devices.pop('ephemeral0', None)
        if instance.flavor.ephemeral_gb:
            self.assertEqual(
                {'type': 'disk', 'pool': policy.storage_pool, 'path': '/mnt',
                 'source': builder.ephemeral_volume_name(
                     policy.name_prefix, instance.uuid)}, ephemeral)
        else:
            self.assertIsNone(ephemeral)
        self.assertEqual(['root'], sorted(devices))
        self.assertTrue(all(_driver_device(name) for name in devices))
        root = devices['root']
        self.assertLessEqual(set(root), ALLOWED_ROOT_KEYS)
        self.assertEqual(('disk', '/', policy.storage_pool),
                         (root['type'], root['path'], root['pool']))
        for key in ('limits.read', 'limits.write', 'limits.max'):
            if key in root:
                self.assertRegex(root[key], r'^[1-9][0-9]*(B|iops)$')
        if 'size' in root:
            self.assertRegex(root['size'], r'^[1-9][0-9]*GiB$')

    @hypothesis.settings(max_examples=150, deadline=None, derandomize=True,
                         database=None, print_blob=False)
    @hypothesis.given(st.data(), _FLAVORS, _IMAGE_PROPERTIES, _POLICIES)
    def test_any_flavor_is_refused_or_built_with_the_drivers_keys_only(
            self, data, flavor, image_properties, policy):
        instance = data.draw(_instances(flavor), label='instance')
        image = _image(**image_properties)
        try:
            container = _spawn(instance, image, policy)
        except REFUSALS as exc:
            # a clear refusal: it names the flavor, and a resize to this
            # flavor is refused as well, before the container is stopped
            self.assertIn('Flavor ', str(exc))
            self.assertRaises(REFUSALS, builder.resize_fragment,
                              instance, flavor, image, policy)
            if _api_accepts(flavor.extra_specs) and not isinstance(
                    exc, exception.FlavorExtraSpecsInconsistent):
                # what nova's API takes key by key is not refused key by
                # key here: only across keys, or by the host's policy
                self.assertNotIsInstance(exc,
                                         exception.FlavorExtraSpecInvalid)
            return
        self._assert_only_the_drivers(container, instance, policy)
        # no image property reaches the container: the same one is built
        # from an image without any
        self.assertEqual(container, _spawn(instance, _image(), policy))
        # resize rebuilds exactly the flavor's keys, from the same rules
        fragment = builder.resize_fragment(instance, flavor, image, policy)
        self.assertEqual(
            {k: v for k, v in container['config'].items()
             if k in builder.flavor_config_keys()}, fragment['config'])
        self.assertEqual(container['devices'], fragment['devices'])
        # rescue: the same keys, plus the one naming its original and the
        # original's root file system at the driver's own path
        rescue = builder.rescue_container(instance, image, policy,
                                          'nova-' + instance.uuid, '/srv/r')
        self.assertEqual(set(container['config']) |
                         {identity.KEY_RESCUE_OF}, set(rescue['config']))
        self.assertEqual({'type': 'disk', 'source': '/srv/r',
                          'path': '/mnt/rescue'}, rescue['devices']['rescue'])
        # user data goes byte for byte to the seed's two fixed paths only
        seed = builder.cloud_init_seed(instance)
        self.assertLessEqual({path for path, _d, _m in seed},
                             {builder.SEED_DIR + '/meta-data',
                              builder.SEED_DIR + '/user-data'})
