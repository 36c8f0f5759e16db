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

"""Resize and migration: the pure parts, and the steps against a fake LXD.

The fake client keeps container records in memory; the real daemons are
exercised by tests/integration/test_migration.py and
tests/functional/test_resize_migrate.py.
"""

import json
from unittest import mock

from nova import exception as nova_exception
from nova import objects
from oslo_config import cfg
from oslo_config import fixture as config_fixture
import testtools

from nova_lxd_accel.accel.binding import binding_record
from nova_lxd_accel.accel.binding import claims
from nova_lxd_accel.accel.binding import pick
from nova_lxd_accel.accel import devices
from nova_lxd_accel import conf as lxd_conf
from nova_lxd_accel.container import builder
from nova_lxd_accel.container import identity
from nova_lxd_accel.container import records
from nova_lxd_accel.container import volume
from nova_lxd_accel import exception
from nova_lxd_accel import host as lxd_host
from nova_lxd_accel.hostside import plumbing
from nova_lxd_accel.instance import ephemeral
from nova_lxd_accel.instance import guest as lxd_guest
from nova_lxd_accel.instance import migration
from tests.fixtures import binding
from tests.fixtures import fake_lxd

UUID = '0d7c3b53-4f3e-4a8a-9a57-4f3e2f0c1a11'
NAME = 'nova-' + UUID
BACKUP = 'nova-resize-' + UUID
GPU_RP = '11111111-1111-1111-1111-111111111111'
GPU = devices.Gpu(pci_address='0000:07:00.0', vendor_id='10de')
PORT = 'b1e0c5a2-7f3d-4e8b-9a61-2c4d5e6f7a80'
#: A port of nova's network info (tap: the container's end of a veth).
VIF = {'id': PORT, 'type': 'tap', 'address': 'fa:16:3e:00:00:01',
       'devname': 'tapb1e0c5a2-7f', 'network': {'meta': {'mtu': 1450}}}
NIC = {'type': 'nic', 'nictype': 'p2p', 'name': 'eth0',
       'host_name': 'tapb1e0c5a2-7f', 'hwaddr': 'fa:16:3e:00:00:01',
       'mtu': '1450'}
VOLUME = volume.ConnectedVolume(name='vol1', host_path='/dev/sdb',
                                     mountpoint='/dev/vdb')
OLD_GPU_RECORD = [{'name': 'nova-gpu0', 'kind': 'pgpu',
                   'resource_class': 'PGPU', 'provider': 'old-rp',
                   'pci': '0000:85:00.0', 'unit': 'pci:0000:85:00.0'}]


def _flavor(vcpus=1, memory_mb=128, name='small', **extra_specs):
    return objects.Flavor(name=name, vcpus=vcpus, memory_mb=memory_mb,
                          root_gb=0, ephemeral_gb=0, swap=0,
                          extra_specs=extra_specs)


def _record(name=NAME, host='src', status='Running', gpu=True):
    config = {identity.KEY_INSTANCE_UUID: UUID,
              identity.KEY_HOST: host,
              'limits.cpu': '1', 'limits.memory': '128MiB',
              'limits.processes': '100',
              'security.privileged': 'false', 'security.nesting': 'false',
              'volatile.uuid': 'v-1', 'user.meta-data': '{}'}
    devices = {'root': {'type': 'disk', 'path': '/', 'pool': 'default'},
               'nova-port-' + PORT: dict(NIC),
               'vol1': {'type': 'unix-block', 'source': '/dev/sdb',
                        'path': '/dev/vdb'},
               'data': {'type': 'disk', 'source': '/srv/shared',
                        'path': '/mnt/shared'}}
    if gpu:
        config[identity.KEY_DEVICES] = json.dumps(OLD_GPU_RECORD)
        devices['nova-gpu0'] = {'type': 'gpu', 'gputype': 'physical',
                                'pci': '0000:85:00.0'}
    return {'name': name, 'status': status, 'architecture': 'x86_64',
            'config': config, 'devices': devices, 'profiles': ['default']}


class PureTest(testtools.TestCase):

    def test_accelerator_device_names(self):
        record = _record()
        record['devices']['nova-mig3'] = {'type': 'gpu', 'gputype': 'mig'}
        self.assertEqual({'nova-gpu0', 'nova-mig3'},
                         records.accelerator_device_names(record))
        self.assertEqual(set(), records.accelerator_device_names(
            _record(gpu=False)))

    def test_host_side_devices(self):
        record = _record()
        self.assertEqual(
            ['nova-port-' + PORT, 'vol1'],
            sorted(n for n, d in record['devices'].items()
                   if records.is_host_side_device(n, d)))
        # the root disk never is, nor a disk of a host path
        self.assertFalse(records.is_host_side_device(
            'root', {'type': 'disk', 'path': '/', 'source': '/dev/sda'}))
        self.assertTrue(records.is_host_side_device(
            'vol2', {'type': 'disk', 'source': '/dev/sdc', 'path': '/mnt'}))

    def test_without_accelerators(self):
        record = _record()
        record['config']['nvidia.runtime'] = 'true'
        config, devices = records.without_accelerators(record)
        self.assertNotIn(identity.KEY_DEVICES, config)
        self.assertNotIn('nvidia.runtime', config)
        self.assertNotIn('nova-gpu0', devices)
        self.assertIn('root', devices)
        # the input is not changed
        self.assertIn('nova-gpu0', record['devices'])

    def test_backup_and_restored_config(self):
        config = _record()['config']
        kept = records.backup_config(config, 'src')
        self.assertNotIn(identity.KEY_HOST, kept)
        self.assertEqual('src', kept[identity.KEY_BACKUP_OF])
        back = records.restored_config(kept, 'src')
        self.assertEqual(config, back)

    def test_with_volatile(self):
        out = records.with_volatile(
            {'a': '1', 'volatile.uuid': 'old'},
            {'volatile.uuid': 'new', 'volatile.idmap.base': '0', 'b': '2'})
        self.assertEqual({'a': '1', 'volatile.uuid': 'new',
                          'volatile.idmap.base': '0'}, out)

    def test_transfer_record(self):
        record = _record()
        record['config'][identity.KEY_BACKUP_OF] = 'src'
        sent = records.transfer_record(record, 'dst')
        self.assertEqual('dst', sent['config'][identity.KEY_HOST])
        self.assertEqual('x86_64', sent['architecture'])
        self.assertEqual(['data', 'root'], sorted(sent['devices']))
        self.assertNotIn('volatile.uuid', sent['config'])
        self.assertNotIn(identity.KEY_DEVICES, sent['config'])
        self.assertNotIn(identity.KEY_BACKUP_OF, sent['config'])
        self.assertEqual([], sent['profiles'])

    def test_resized(self):
        record = _record()
        fragment = {'config': {'limits.cpu': '4', 'limits.memory': '1GiB',
                               'security.privileged': 'false',
                               'security.nesting': 'false'},
                    'devices': {'root': {'type': 'disk', 'path': '/',
                                         'pool': 'default', 'size': '5GiB'}}}
        bound = pick.bind({GPU_RP: {'resources': {'PGPU': 1}}},
                          lambda rp: GPU, {})
        nic = {'eth0': {'type': 'nic', 'nictype': 'bridged',
                        'parent': 'br-new', 'hwaddr': 'fa:16:3e:00:00:01'}}
        config, devices = records.resized(record, fragment, 'dst', nic,
                                          bound)
        self.assertEqual('4', config['limits.cpu'])
        self.assertEqual('1GiB', config['limits.memory'])
        # a key the new flavor does not set goes away
        self.assertNotIn('limits.processes', config)
        self.assertEqual('dst', config[identity.KEY_HOST])
        self.assertEqual('v-1', config['volatile.uuid'])
        self.assertEqual([GPU_RP], [u['provider'] for u in json.loads(
            config[identity.KEY_DEVICES])])
        self.assertEqual({'type': 'gpu', 'gputype': 'physical',
                          'pci': '0000:07:00.0'}, devices['nova-gpu0'])
        self.assertEqual('5GiB', devices['root']['size'])
        self.assertEqual('br-new', devices['eth0']['parent'])
        # the old volume device is gone (made again from this host's BDMs)
        self.assertNotIn('vol1', devices)
        self.assertIn('data', devices)

    def test_resized_without_accelerators_drops_old_ones(self):
        config, devices = records.resized(
            _record(), {'config': {}, 'devices': {}}, 'dst', {},
            binding_record.Binding())
        self.assertNotIn('nova-gpu0', devices)
        self.assertNotIn(identity.KEY_DEVICES, config)

    def test_resize_to_a_plain_flavor_drops_every_flavor_key(self):
        # Every key any flavor part sets (declared or not) goes away when
        # the new flavor does not set it: the set comes from the parts.
        policy = builder.HostPolicy(host='dst', allow_privileged=True,
                                    allow_nesting=True)
        rich = _flavor(**{'lxd:privileged': 'true', 'lxd:nesting': 'true',
                          'lxd:isolated_idmap': 'true',
                          'lxd:processes': '64',
                          'lxd:gpu_runtime': 'nvidia'})
        instance = objects.Instance(uuid=UUID, flavor=rich)
        old = builder.build_container(
            instance, rich, None, policy,
            builders=builder.FLAVOR_PARTS)['config']
        record = _record(gpu=False)
        record['config'].update(old)
        plain = builder.resize_fragment(
            instance, _flavor(), None, policy)
        config, _devices = records.resized(record, plain, 'dst', {},
                                           binding_record.Binding())
        for key in old:
            self.assertEqual(plain['config'].get(key), config.get(key), key)
        self.assertEqual(builder.flavor_config_keys(),
                         records.FLAVOR_KEYS)

    def test_capabilities_and_live_migration(self):
        self.assertTrue(
            migration.CAPABILITIES['supports_migrate_to_same_host'])
        self.assertTrue(migration.CAPABILITIES['supports_evacuate'])
        exc = migration.refuse_live_migration()
        self.assertIsInstance(exc, nova_exception.MigrationPreCheckError)
        self.assertIn('cold migration', str(exc))


def _daemon(records=(), **kwargs):
    """The shared fake daemon (tests/fixtures/fake_lxd.py) with ``records``."""
    return fake_lxd.FakeLXDClient(*records, endpoint='https://dest:8443',
                                  **kwargs)


class FakeLifecycle(object):

    def __init__(self, client, conf):
        self._client = client
        self._conf = conf
        self.ephemeral = ephemeral.EphemeralDisks(client, conf)

    def guest(self, instance):
        return lxd_guest.Guest(self._client, self._conf, instance)

    def remove_container(self, name):
        return self._client.remove_container(name)


class _Base(testtools.TestCase):

    def setUp(self):
        super(_Base, self).setUp()
        self.conf = cfg.ConfigOpts()
        lxd_conf.register_opts(self.conf)
        self.conf.register_opt(cfg.IntOpt('shutdown_timeout', default=5))
        self.conf([])
        # overrides live in the (shared) option groups: undo them after
        self.useFixture(config_fixture.Config(self.conf))
        self.instance = mock.Mock(uuid=UUID, flavor=_flavor())
        self.instance.name = 'inst'

    def make(self, client, host_policy=None):
        self.lifecycle = FakeLifecycle(client, self.conf)
        self.networking = mock.Mock()
        self.volumes = mock.Mock()
        self.volumes.connect_boot_volumes.return_value = ()
        #: (container, instance uuid, records) the gate was told of
        self.noted = []
        accel_claims = claims.Claims(
            client, self.conf, binding.ReportedDevicesOf({GPU_RP: GPU}),
            gate=binding.ClaimGateCalls(
                on_bound=lambda *args: self.noted.append(args)))
        host_part = lxd_host.Host(client, self.conf,
                                  identity.Owner.from_conf(self.conf, 'src'))
        if host_policy is not None:
            # the policy init_host found (its profiles' masks)
            host_part.policy = host_policy
        return migration.Migration(
            client, self.conf, identity.Owner.from_conf(self.conf, 'src'),
            self.lifecycle, accel_claims,
            plumbing.HostPlumbing(self.networking, self.volumes),
            host_part)

    def mig(self, source, dest):
        mig = mock.Mock(source_compute=source, dest_compute=dest,
                        instance_uuid=UUID)
        self.useFixture_patch(mig)
        return mig

    def useFixture_patch(self, mig):
        patcher = mock.patch.object(migration.Migration, '_migration_of',
                                    return_value=mig)
        patcher.start()
        self.addCleanup(patcher.stop)


class SameHostTest(_Base):

    def test_whole_rewrites_are_etag_guarded(self):
        # parking, restoring and reverting replace config and devices; a
        # writer that changed the container meanwhile makes the daemon
        # refuse the stale write (412), and the rewrite is made again
        client = _daemon([_record(host='h', status='Stopped')])
        m = self.make(client)
        seen = []

        def make(current, _devices):
            seen.append(dict(current))
            if len(seen) == 1:
                client.update_container(NAME, config={'user.other': 'x'})
            return {'limits.cpu': '2'}, {'root': {'type': 'disk'}}
        m._rewrite(NAME, make)
        self.assertEqual(2, len(seen))
        self.assertEqual('x', seen[1]['user.other'])
        self.assertEqual({'limits.cpu': '2'}, client.records[NAME]['config'])
        self.assertRaises(exception.LXDObjectNotFound, m._rewrite, 'gone',
                          make)

    def test_resize_writes_the_guest_api_key_of_this_daemon(self):
        # the record (made before [lxd] devlxd) has no key; the resize
        # turns /dev/lxd off under the daemon's own name of the key
        for server, key, other in (
                ('lxd', 'security.devlxd', 'security.guestapi'),
                ('incus', 'security.guestapi', 'security.devlxd')):
            client = _daemon([_record(host='h')])
            info = client.server_info()
            info['environment']['server'] = server
            client.server_info = lambda info=info: info
            mig = self.mig('h', 'h')
            m = self.make(client)
            info = json.loads(m.migrate_disk_and_power_off(
                None, self.instance, '10.0.0.1', _flavor(2, 256), [], {},
                0, 0))
            m.finish_migration(None, mig, self.instance, json.dumps(info),
                               [], None, True, {}, {}, True)
            config = client.records[NAME]['config']
            self.assertEqual('false', config[key], server)
            self.assertNotIn(other, config)

    def test_resize_then_revert_restores_exactly(self):
        client = _daemon([_record(host='h')])
        original = client.get_container(NAME)
        mig = self.mig('h', 'h')
        m = self.make(client)
        info = json.loads(m.migrate_disk_and_power_off(
            None, self.instance, '10.0.0.1', _flavor(2, 256), [], {}, 0, 0))
        self.assertTrue(info['same_host'])
        self.assertEqual(('copy', NAME, BACKUP), client.calls[1])
        kept = client.records[BACKUP]
        self.assertEqual('Stopped', kept['status'])
        self.assertEqual('h', kept['config'][identity.KEY_BACKUP_OF])
        self.assertNotIn(identity.KEY_HOST, kept['config'])
        # LXD's own volatile keys of the copy stay
        self.assertEqual('copy-of-' + NAME, kept['config']['volatile.uuid'])
        self.networking.unplug_vifs.assert_called_once_with(
            self.instance, [])
        self.volumes.disconnect_all.assert_called_once_with(
            self.instance, {})

        self.instance.flavor = _flavor(2, 256)
        m.finish_migration(None, mig, self.instance, json.dumps(info), [],
                           None, True,
                           {GPU_RP: {'resources': {'PGPU': 1}}}, {}, True)
        now = client.records[NAME]
        self.assertEqual('Running', now['status'])
        self.assertEqual('256MiB', now['config']['limits.memory'])
        self.assertEqual('0000:07:00.0', now['devices']['nova-gpu0']['pci'])
        # the gate knows the new binding (a delete behind nova's back
        # then keeps the GPU from other tenants, issue 46 item 4)
        self.assertEqual([(NAME, UUID, ['pci:0000:07:00.0'])],
                         [(n, u, [r['unit'] for r in records])
                          for n, u, records in self.noted])

        # nova destroys the resized container, then reverts on the source;
        # this host's NICs and volumes are made again from nova's data
        del client.records[NAME]
        self.volumes.connect_boot_volumes.return_value = (
            VOLUME,)
        m.finish_revert_migration(None, self.instance, [VIF], mig, {}, True)
        back = client.records[NAME]
        self.assertEqual('Running', back['status'])
        self.assertEqual(original['devices'], back['devices'])
        original['config']['volatile.uuid'] = 'copy-of-' + NAME
        self.assertEqual(original['config'], back['config'])
        self.assertNotIn(BACKUP, client.records)

    def test_new_binding_skips_units_the_backup_holds(self):
        held = _record(name=BACKUP, status='Stopped')
        held['config'][identity.KEY_DEVICES] = json.dumps(
            [dict(OLD_GPU_RECORD[0], pci='0000:07:00.0',
                  unit='pci:0000:07:00.0')])
        client = _daemon([_record(host='h', status='Stopped'), held])
        mig = self.mig('h', 'h')
        m = self.make(client)
        self.assertRaises(
            exception.AcceleratorUnavailable, m.finish_migration, None, mig,
            self.instance, '{}', [], None, True,
            {GPU_RP: {'resources': {'PGPU': 1}}}, {}, True)

    def test_confirm_deletes_backup(self):
        client = _daemon([_record(host='h'),
                          _record(name=BACKUP, status='Stopped')])
        m = self.make(client)
        m.confirm_migration(None, self.mig('h', 'h'), self.instance, [])
        self.assertEqual([NAME], list(client.records))
        # twice is fine
        m.confirm_migration(None, self.mig('h', 'h'), self.instance, [])

    def test_refused_flavor_rolls_back_before_stopping(self):
        client = _daemon([_record(host='h')])
        self.mig('h', 'h')
        m = self.make(client)
        flavor = _flavor(2, 256)
        flavor.swap = 512
        exc = self.assertRaises(
            nova_exception.InstanceFaultRollback,
            m.migrate_disk_and_power_off, None, self.instance, 'x', flavor,
            [], {}, 0, 0)
        self.assertIsInstance(exc.inner_exception, exception.FlavorNotAllowed)
        self.assertEqual([], client.calls)

    def test_root_disk_cannot_shrink(self):
        client = _daemon([_record(host='h')])
        self.mig('h', 'h')
        m = self.make(client)
        self.instance.flavor.root_gb = 10
        flavor = _flavor()
        flavor.root_gb = 5
        exc = self.assertRaises(
            nova_exception.InstanceFaultRollback,
            m.migrate_disk_and_power_off, None, self.instance, 'x', flavor,
            [], {}, 0, 0)
        self.assertIn('cannot shrink', str(exc.inner_exception))

    def test_revert_without_backup(self):
        client = _daemon()
        m = self.make(client)
        self.assertRaises(exception.ResizeBackupMissing,
                          m.finish_revert_migration, None, self.instance,
                          [], self.mig('h', 'h'), {}, True)


class _TwoHosts(_Base):
    """A source daemon with the instance, a destination that trusts it."""

    def setUp(self):
        super().setUp()
        self.conf.set_override('client_cert', '/etc/c.crt',
                               group='lxd_migration')
        self.conf.set_override('client_key', '/etc/c.key',
                               group='lxd_migration')
        self.conf.set_override('server_certs', {'dst': '/etc/dst.crt'},
                               group='lxd_migration')
        self.client = _daemon([_record(host='src')])
        self.dest = _daemon()
        self.client.remotes['https://10.0.0.2:8443'] = self.dest


class OtherHostTest(_TwoHosts):

    def test_sends_then_keeps_original(self):
        self.mig('src', 'dst')
        m = self.make(self.client)
        info = json.loads(m.migrate_disk_and_power_off(
            None, self.instance, '10.0.0.2', _flavor(), [], {}, 0, 0))
        self.assertFalse(info['same_host'])
        self.assertIn(('remote', 'https://10.0.0.2:8443', '/etc/c.crt',
                       '/etc/c.key', '/etc/dst.crt'), self.client.calls)
        self.assertIn(('pull', NAME,
                       'https://127.0.0.1:8443/1.0/operations/op-1',
                       'SOURCE-CERT'), self.dest.calls)
        sent = self.dest.records[NAME]
        self.assertEqual(['data', 'root'], sorted(sent['devices']))
        self.assertEqual([BACKUP], list(self.client.records))
        self.assertIn(('wait', 'op-1'), self.client.calls)

    def test_endpoint_mapping_wins(self):
        self.conf.set_override('endpoints', {'dst': 'https://lxd-b:9443'},
                               group='lxd_migration')
        self.client.remotes['https://lxd-b:9443'] = self.dest
        self.mig('src', 'dst')
        self.make(self.client).migrate_disk_and_power_off(
            None, self.instance, '10.0.0.2', _flavor(), [], {}, 0, 0)
        self.assertIn(NAME, self.dest.records)

    def test_failed_transfer_restarts_the_original(self):
        self.dest.fail('create_from_migration', exception.LXDOperationFailed(
            action='migrate', target=NAME, reason='boom'))
        self.mig('src', 'dst')
        m = self.make(self.client)
        exc = self.assertRaises(
            nova_exception.InstanceFaultRollback,
            m.migrate_disk_and_power_off, None, self.instance, '10.0.0.2',
            _flavor(), [], {}, 0, 0)
        self.assertIn('boom', str(exc.inner_exception))
        self.assertEqual([NAME], list(self.client.records))
        self.assertEqual('Running', self.client.records[NAME]['status'])
        self.assertIn(('cancel', 'op-1'), self.client.calls)
        # nothing host-side was released
        self.networking.unplug_vifs.assert_not_called()

    def test_no_client_certificate(self):
        self.conf.clear_override('client_cert', group='lxd_migration')
        self.mig('src', 'dst')
        exc = self.assertRaises(
            nova_exception.InstanceFaultRollback,
            self.make(self.client).migrate_disk_and_power_off, None,
            self.instance, '10.0.0.2', _flavor(), [], {}, 0, 0)
        self.assertIn('client_cert', str(exc.inner_exception))
        self.assertEqual('Running', self.client.records[NAME]['status'])

    def test_source_without_https_listener(self):
        self.client.address = None
        self.mig('src', 'dst')
        exc = self.assertRaises(
            nova_exception.InstanceFaultRollback,
            self.make(self.client).migrate_disk_and_power_off, None,
            self.instance, '10.0.0.2', _flavor(), [], {}, 0, 0)
        self.assertIn('core.https_address', str(exc.inner_exception))
        self.assertEqual([NAME], list(self.client.records))

    def test_untrusted_by_destination(self):
        self.dest.server_info = lambda: {'auth': 'untrusted'}
        self.mig('src', 'dst')
        exc = self.assertRaises(
            nova_exception.InstanceFaultRollback,
            self.make(self.client).migrate_disk_and_power_off, None,
            self.instance, '10.0.0.2', _flavor(), [], {}, 0, 0)
        self.assertIn('lxc config trust add', str(exc.inner_exception))

    def test_destination_rebinds_from_its_allocation(self):
        self.mig('src', 'dst')
        m = self.make(self.client)
        m.migrate_disk_and_power_off(None, self.instance, '10.0.0.2',
                                     _flavor(), [], {}, 0, 0)
        dest_m = self.make(self.dest)
        dest_m.finish_migration(None, self.mig('src', 'dst'), self.instance,
                                '{}', [VIF], None, False,
                                {GPU_RP: {'resources': {'PGPU': 1}}}, {},
                                True)
        record = self.dest.records[NAME]
        self.assertEqual('dst', record['config'][identity.KEY_HOST])
        self.assertEqual({'type': 'gpu', 'gputype': 'physical',
                          'pci': '0000:07:00.0'},
                         record['devices']['nova-gpu0'])
        # this host's NIC, made from nova's network info (config.nics)
        self.assertEqual(NIC, record['devices']['nova-port-' + PORT])
        self.networking.plug_vifs.assert_called_once_with(
            self.instance, [VIF])
        self.assertEqual('Running', record['status'])

    def test_destination_masks_its_own_profiles(self):
        # item 11 of issue 43: the destination writes its own [lxd]
        # profiles and their masks; the source's are not carried
        source = self.client.records[NAME]
        source['profiles'] = ['src-profile']
        source['config']['raw.lxc'] = '# stripped by nova-lxd-accel'
        source['devices']['src-gpu'] = {'type': 'none'}
        self.mig('src', 'dst')
        self.make(self.client).migrate_disk_and_power_off(
            None, self.instance, '10.0.0.2', _flavor(), [], {}, 0, 0)
        self.assertEqual([], self.dest.records[NAME]['profiles'])
        self.conf.set_override('profiles', ['dst-profile'], group='lxd')
        dest_policy = builder.HostPolicy(
            host='elsewhere', masked_config=(('raw.apparmor', '# x'),),
            masked_devices=('dst-socket',))
        self.make(self.dest, host_policy=lambda: dest_policy).\
            finish_migration(None, self.mig('src', 'dst'), self.instance,
                             '{}', [VIF], None, False, {}, {}, True)
        record = self.dest.records[NAME]
        self.assertEqual(['dst-profile'], record['profiles'])
        self.assertEqual('# x', record['config']['raw.apparmor'])
        self.assertEqual({'type': 'none'}, record['devices']['dst-socket'])
        self.assertNotIn('raw.lxc', record['config'])
        self.assertNotIn('src-gpu', record['devices'])
        # owned by the host that finished it, whatever the policy's name
        self.assertEqual('dst', record['config'][identity.KEY_HOST])


class OtherHostEphemeralTest(_TwoHosts):
    """The ephemeral disk moves with the container, before it."""

    DISK = ('default', NAME + '-ephemeral0')

    def setUp(self):
        super().setUp()
        self.instance.flavor = _flavor()
        self.instance.flavor.ephemeral_gb = 1
        self.client.records[NAME]['devices']['ephemeral0'] = {
            'type': 'disk', 'pool': 'default', 'source': self.DISK[1],
            'path': '/mnt'}
        self.client.volumes[self.DISK] = {
            'name': self.DISK[1], 'type': 'custom',
            'config': {'size': '1GiB', 'volatile.idmap.last': '[]'}}
        self.mig('src', 'dst')

    def move(self):
        new = _flavor()
        new.ephemeral_gb = 1
        return self.make(self.client).migrate_disk_and_power_off(
            None, self.instance, '10.0.0.2', new, [], {}, 0, 0)

    def test_disk_sent_before_the_container_and_kept_for_a_revert(self):
        self.move()
        pulls = [call[0] for call in self.dest.calls
                 if call[0] in ('pull_volume', 'pull')]
        self.assertEqual(['pull_volume', 'pull'], pulls)
        # the daemon's own volatile keys stay behind
        self.assertEqual({'size': '1GiB'},
                         self.dest.volumes[self.DISK]['config'])
        self.assertIn('ephemeral0', self.dest.records[NAME]['devices'])
        self.assertIn(self.DISK, self.client.volumes)

    def test_failed_container_transfer_removes_the_sent_disk(self):
        self.dest.fail('create_from_migration', exception.LXDOperationFailed(
            action='migrate', target=NAME, reason='boom'))
        self.assertRaises(nova_exception.InstanceFaultRollback, self.move)
        self.assertEqual({}, self.dest.volumes)
        self.assertIn(self.DISK, self.client.volumes)
        self.assertEqual('Running', self.client.records[NAME]['status'])

    def test_failed_disk_transfer_sends_no_container(self):
        self.dest.fail('create_volume_from_migration',
                       exception.LXDOperationFailed(
                           action='migrate', target=self.DISK[1],
                           reason='boom'))
        self.assertRaises(nova_exception.InstanceFaultRollback, self.move)
        self.assertEqual({}, self.dest.records)
        self.assertEqual({}, self.dest.volumes)
        self.assertIn(('cancel', 'op-volume'), self.client.calls)
        self.assertNotIn(('offer', NAME), self.client.calls)
        self.assertEqual('Running', self.client.records[NAME]['status'])

    def test_confirm_deletes_the_source_disk(self):
        self.move()
        self.make(self.client).confirm_migration(
            None, self.mig('src', 'dst'), self.instance, [])
        self.assertEqual([], list(self.client.records))
        self.assertNotIn(self.DISK, self.client.volumes)
        self.assertIn(self.DISK, self.dest.volumes)
