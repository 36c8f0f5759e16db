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

"""The ComputeDriver facade: what nova calls, and where each call goes.

The driver is a facade: each method hands nova's call to one part of
:class:`nova_lxd_accel.parts.Parts`, whose behaviour is tested in its own
module. Two kinds of parts are used here:

* For the calls that only delegate, the parts are autospecs of the
  project's own part classes (never of LXD). That is the one place a fake
  of the parts is used, and only to check delegation: which part gets the
  call, with which of nova's arguments. Being autospecs, a call that does
  not fit the real part's signature fails, so a part whose method changes
  and a driver still calling it the old way cannot both pass.
* What the facade adds itself (which containers nova sees, the
  diagnostics' device lines, the power calls as a container sees them,
  what init_host repairs) runs on the real parts, built by
  ``Parts.build`` over the in-memory daemon of tests/fixtures/fake_lxd.py.

nova's own entry points (its instance list, its fault records, Placement)
are replaced where init_host reaches them, through
:mod:`nova_lxd_accel.nova_lookups`; tests/unit/test_nova_lookups.py runs
those against nova's database and Placement fixtures.
"""

import dataclasses
import inspect
import json
import os
from unittest import mock

import fixtures
from nova.compute import power_state
import nova.conf
from nova import context as nova_context
from nova import exception as nova_exception
from nova import objects
from nova.virt import driver as virt_driver
from nova.virt import fake as fake_virt
from oslo_config import fixture as config_fixture
import testtools

from nova_lxd_accel import client as lxd_client
from nova_lxd_accel import conf as lxd_conf
from nova_lxd_accel.container import identity
from nova_lxd_accel import driver
from nova_lxd_accel import exception
from nova_lxd_accel.instance import guest as lxd_guest
from nova_lxd_accel.instance import migration
from nova_lxd_accel import nova_lookups
from nova_lxd_accel import parts
from tests.fixtures import fake_lxd

CONF = nova.conf.CONF
objects.register_all()

HOST = 'cmp1'
UUID = '5b1d3c8e-6f0a-4c1e-9a7d-2f3e4d5c6b7a'
OTHER = 'c3e2a1b0-9d8c-4b7a-8f6e-5d4c3b2a1f0e'
NAME = 'nova-' + UUID
IMAGE = '0c4a1e2b-3d5f-4a6b-8c7d-9e0f1a2b3c4d'
IMAGE2 = '7e6d5c4b-3a2f-4e1d-8c0b-9a8f7e6d5c4b'
GPU_UNIT = {'name': 'nova-gpu0', 'kind': 'pgpu', 'resource_class': 'PGPU',
            'provider': 'rp-gpu', 'pci': '0000:07:00.0',
            'unit': 'pci:0000:07:00.0'}
MIG_UNIT = {'name': 'nova-mig1', 'kind': 'mig',
            'resource_class': 'CUSTOM_MIG_1G_10GB', 'provider': 'rp-mig',
            'pci': '0000:85:00.0', 'mig_uuid': 'MIG-6a1f',
            'mig_profile': '1g.10gb', 'unit': 'mig:MIG-6a1f'}


def _record(uuid=UUID, host=HOST, status='Running', name=None, units=(),
            project=None, **config):
    """A container record as LXD lists one of this driver's."""
    config = dict(config)
    config.update({identity.KEY_INSTANCE_UUID: uuid,
                   identity.KEY_HOST: host,
                   'limits.cpu': '2', 'limits.memory': '2048MiB'})
    devices = {'root': {'type': 'disk', 'path': '/', 'pool': 'default'}}
    if units:
        config[identity.KEY_DEVICES] = json.dumps(list(units))
        for unit in units:
            devices[unit['name']] = {'type': 'gpu', 'pci': unit['pci']}
    record = {'name': name or 'nova-' + uuid, 'status': status,
              'config': config, 'devices': devices, 'profiles': ['default']}
    if project:
        record['project'] = project
    return record


def _instance(uuid=UUID, **fields):
    fields.setdefault('image_ref', IMAGE)
    fields.setdefault('vm_state', 'active')
    fields.setdefault('task_state', None)
    return objects.Instance(uuid=uuid, host=HOST, project_id='p1',
                            **fields)


class Daemon(fake_lxd.FakeLXDClient):
    """The in-memory daemon, plus the reads Parts.build and Guest need."""

    def resources(self, attempts=3):
        return {'cpu': {'total': 4}, 'memory': {'total': 8 << 30}}

    def listed_containers(self, names, max_age=None):
        # as LXDClient with no recent listing: the caller reads
        return None

    def console_log(self, name):
        self._record(name, 'read console of')
        return b''


#: The autospecs, made once per process (making them is slow) and reset
#: for each test.
_SPECCED = {}


def _specced(cls, fresh=False):
    part = None if fresh else _SPECCED.get(cls)
    if part is None:
        part = mock.create_autospec(cls, instance=True)
        _SPECCED.setdefault(cls, part)
    part.reset_mock(return_value=True, side_effect=True)
    return part


def _fake_parts(host=HOST, client=None, fresh=False):
    """Autospecs of the parts (see the module docstring).

    :param fresh: new ones, not those the test has already.
    """
    specced = {field.name: _specced(field.type, fresh)
               for field in dataclasses.fields(parts.Parts)
               if field.name not in ('owner', 'client')}
    fake = parts.Parts(
        owner=identity.Owner(host=host),
        # never reached by a delegating call (init_host's tests give it
        # the in-memory daemon)
        client=client or mock.NonCallableMock(spec=lxd_client.LXDClient),
        **specced)
    fake.host.guest.return_value = _specced(lxd_guest.Guest)
    fake.lifecycle.remove_interrupted_builds.return_value = []
    return fake


class DriverTestCase(testtools.TestCase):

    def setUp(self):
        super(DriverTestCase, self).setUp()
        lxd_conf.register_opts(CONF)
        self.flags = self.useFixture(config_fixture.Config(CONF)).config
        self.downloads = self.useFixture(fixtures.TempDir()).path
        self.flags(image_download_dir=self.downloads, group='lxd')
        self.flags(state_dir=self.useFixture(fixtures.TempDir()).path,
                   group='lxd_accelerators')
        self.flags(host=HOST)
        self.log = self.useFixture(fixtures.FakeLogger())
        self.virtapi = fake_virt.FakeVirtAPI()
        self.driver = driver.LXDDriver(self.virtapi)
        self.context = nova_context.RequestContext('u1', 'p1', is_admin=False)

    def use_fake_parts(self, client=None):
        self.parts = self.driver._parts = _fake_parts(client=client)
        return self.parts

    def use_daemon(self, *records):
        """The real parts over an in-memory daemon holding ``records``."""
        self.client = Daemon(*records)
        self.driver._parts = parts.Parts.build(CONF, self.virtapi, HOST,
                                               client=self.client)
        return self.client

    def assert_no_part_called(self):
        for field in dataclasses.fields(parts.Parts):
            part = getattr(self.parts, field.name)
            if isinstance(part, mock.NonCallableMock):
                self.assertEqual([], part.mock_calls, field.name)


class NovaInterfaceTest(DriverTestCase):

    def test_every_method_overrides_one_nova_calls_with_its_signature(self):
        # a misspelt name is never called; a missing or renamed parameter
        # breaks the calls nova makes with keywords
        base = virt_driver.ComputeDriver
        for name, method in vars(driver.LXDDriver).items():
            if name.startswith('_') or not inspect.isfunction(method):
                continue
            self.assertTrue(hasattr(base, name),
                            '%s is no ComputeDriver method' % name)
            ours = inspect.signature(method).parameters
            novas = inspect.signature(getattr(base, name)).parameters
            self.assertEqual(
                [(p.name, p.default) for p in novas.values()],
                [(p.name, p.default) for p in ours.values()], name)

    def test_capabilities_are_the_ones_nova_knows_each_a_boolean(self):
        capabilities = self.driver.capabilities
        self.assertEqual(set(virt_driver.ComputeDriver.capabilities),
                         set(capabilities))
        for name, value in capabilities.items():
            self.assertIsInstance(value, bool, name)
        self.assertTrue(capabilities['supports_evacuate'])
        self.assertFalse(capabilities['supports_extend_volume'])

    def test_the_driver_keeps_no_host_state_of_its_own(self):
        bare = set(vars(virt_driver.ComputeDriver(self.virtapi)))
        self.assertEqual({'_parts', 'capabilities'},
                         set(vars(self.driver)) - bare)
        self.use_daemon(_record())
        self.driver.list_instances()
        self.driver.get_info(_instance())
        self.driver.pause(_instance())
        self.driver.get_diagnostics(_instance())
        self.assertEqual({'_parts', 'capabilities'},
                         set(vars(self.driver)) - bare)

    def test_the_node_is_the_host_the_parts_were_built_for(self):
        self.assertEqual([HOST], self.driver.get_available_nodes())
        self.assertTrue(self.driver.node_is_available(HOST))
        self.assertFalse(self.driver.node_is_available('cmp2'))

    def test_calls_it_does_not_support_say_so(self):
        self.use_fake_parts()
        for check, args in [
                (self.driver.check_can_live_migrate_destination,
                 (self.context, _instance(), {}, {})),
                (self.driver.check_can_live_migrate_source,
                 (self.context, _instance(), {}))]:
            exc = self.assertRaises(nova_exception.MigrationPreCheckError,
                                    check, *args)
            self.assertIn(migration.LIVE_MIGRATION_REFUSED, str(exc))
        self.assertRaises(NotImplementedError,
                          self.driver.power_update_event, _instance(),
                          'POWER_ON')
        self.assert_no_part_called()

    def test_cleanup_after_destroy_touches_nothing(self):
        self.use_fake_parts()
        self.assertIsNone(self.driver.cleanup(
            self.context, _instance(), [], block_device_info={},
            destroy_disks=True))
        self.assert_no_part_called()


class DelegationTest(DriverTestCase):
    """Each call reaches its part with nova's arguments (autospecs)."""

    def setUp(self):
        super(DelegationTest, self).setUp()
        self.use_fake_parts()
        self.instance = _instance()
        self.guest = self.parts.host.guest.return_value

    def check(self, calls):
        """calls: (driver call, the part's method, its expected args)."""
        for call, target, args, kwargs in calls:
            target.reset_mock()
            call()
            target.assert_called_once_with(*args, **kwargs)

    def test_volume_calls_reach_the_volumes_part(self):
        ctx, inst, info = self.context, self.instance, {'serial': 'v1'}
        enc = {'provider': 'luks'}
        volumes = self.parts.volumes
        volumes.connector.return_value = {'host': HOST}
        self.assertEqual({'host': HOST},
                         self.driver.get_volume_connector(inst))
        self.check([
            (lambda: self.driver.attach_volume(
                ctx, info, inst, '/dev/vdb', disk_bus='virtio',
                device_type='disk', encryption=enc),
             volumes.attach,
             (ctx, info, inst, '/dev/vdb', 'virtio', 'disk', enc), {}),
            (lambda: self.driver.detach_volume(
                ctx, info, inst, '/dev/vdb', encryption=enc),
             volumes.detach, (ctx, info, inst, '/dev/vdb', enc), {}),
        ])

    def test_port_calls_reach_networking(self):
        ctx, inst, vif = self.context, self.instance, {'id': 'port-1'}
        net = self.parts.networking
        self.check([
            (lambda: self.driver.plug_vifs(inst, [vif]), net.plug_vifs,
             (inst, [vif]), {}),
            (lambda: self.driver.unplug_vifs(inst, [vif]), net.unplug_vifs,
             (inst, [vif]), {}),
            (lambda: self.driver.attach_interface(ctx, inst, None, vif),
             net.attach_interface, (inst, vif), {}),
            (lambda: self.driver.detach_interface(ctx, inst, vif),
             net.detach_interface, (inst, vif), {}),
        ])

    def test_resize_and_migration_calls_reach_the_migration_part(self):
        ctx, inst, mig = self.context, self.instance, objects.Migration()
        flavor, bdi, nets = objects.Flavor(), {'block_device_mapping': []}, []
        moving = self.parts.migration
        moving.migrate_disk_and_power_off.return_value = '{"disk": 1}'
        self.assertEqual('{"disk": 1}', self.driver.migrate_disk_and_power_off(
            ctx, inst, 'cmp2', flavor, nets, block_device_info=bdi,
            timeout=30, retry_interval=5))
        moving.migrate_disk_and_power_off.assert_called_once_with(
            ctx, inst, 'cmp2', flavor, nets, bdi, 30, 5)
        moving.delete_kept_original.return_value = True
        self.assertTrue(self.driver.delete_instance_files(inst))
        moving.delete_kept_original.assert_called_once_with(inst)
        self.check([
            (lambda: self.driver.finish_migration(
                ctx, mig, inst, 'disk', nets, 'meta', True, {'rp': {}},
                block_device_info=bdi, power_on=False, share_info='s'),
             moving.finish_migration,
             (ctx, mig, inst, 'disk', nets, 'meta', True, {'rp': {}}, bdi,
              False), {}),
            (lambda: self.driver.confirm_migration(ctx, mig, inst, nets),
             moving.confirm_migration, (ctx, mig, inst, nets), {}),
            (lambda: self.driver.finish_revert_migration(
                ctx, inst, nets, mig, block_device_info=bdi, power_on=False,
                share_info='s'),
             moving.finish_revert_migration,
             (ctx, inst, nets, mig, bdi, False), {}),
        ])

    def test_lifecycle_calls_get_the_hosts_policy(self):
        ctx, inst, bdi = self.context, self.instance, {'root': 1}
        policy = self.parts.host.policy.return_value
        life = self.parts.lifecycle
        self.check([
            (lambda: self.driver.spawn(
                ctx, inst, 'meta', [('/etc/motd', 'hi')], 'secret',
                {'rp': {}}, network_info=['vif'], block_device_info=bdi,
                power_on=False, accel_info=[]),
             life.spawn,
             (ctx, inst, 'meta', [('/etc/motd', 'hi')], policy, bdi, False),
             {'allocations': {'rp': {}}, 'network_info': ['vif']}),
            (lambda: self.driver.rescue(ctx, inst, [], 'meta', 'pw', bdi,
                                        None),
             life.rescue, (ctx, inst, 'meta', policy), {}),
            (lambda: self.driver.unrescue(ctx, inst), life.unrescue,
             (inst,), {}),
            (lambda: self.driver.snapshot(ctx, inst, 'img-2', print),
             life.snapshot, (ctx, inst, 'img-2', print), {}),
        ])

    def test_get_info_asks_the_lifecycle_with_nova_cache_choice(self):
        life = self.parts.lifecycle
        life.power_state.return_value = power_state.PAUSED
        info = self.driver.get_info(self.instance, use_cache=False)
        self.assertEqual(power_state.PAUSED, info.state)
        life.power_state.assert_called_once_with(self.instance,
                                                 use_cache=False)

    def test_guest_calls_reach_the_instances_guest(self):
        ctx, inst, guest = self.context, self.instance, self.guest
        self.flags(console_log_max_bytes=4096, group='lxd')
        guest.console_tail.return_value = b'login:'
        self.assertEqual(b'login:',
                         self.driver.get_console_output(ctx, inst))
        guest.console_tail.assert_called_once_with(4096)
        self.check([
            (lambda: self.driver.pause(inst), guest.pause, (), {}),
            (lambda: self.driver.unpause(inst), guest.unpause, (), {}),
            (lambda: self.driver.suspend(ctx, inst), guest.suspend, (), {}),
            (lambda: self.driver.resume(ctx, inst, []), guest.resume, (),
             {}),
            (lambda: self.driver.get_instance_diagnostics(inst),
             guest.diagnostics, (), {}),
        ])
        for call in self.parts.host.guest.call_args_list:
            self.assertEqual(mock.call(inst), call)

    def test_destroy_removes_the_container_before_the_host_side(self):
        order = []
        self.parts.lifecycle.destroy.side_effect = (
            lambda *a, **k: order.append('container'))
        self.parts.networking.unplug_vifs.side_effect = (
            lambda *a, **k: order.append('ports'))
        self.parts.volumes.disconnect_all.side_effect = (
            lambda *a, **k: order.append('volumes'))
        bdi = {'block_device_mapping': [{'connection_info': {}}]}
        self.driver.destroy(self.context, self.instance, ['vif'],
                            block_device_info=bdi)
        self.assertEqual(['container', 'ports', 'volumes'], order)
        # a failing unplug is logged by networking, never blocks a delete
        self.parts.networking.unplug_vifs.assert_called_once_with(
            self.instance, ['vif'], ignore_errors=True)
        self.parts.volumes.disconnect_all.assert_called_once_with(
            self.instance, bdi)

    def test_starts_replug_the_ports_first(self):
        # after a host reboot the per-port bridges are gone
        order = []
        self.parts.networking.plug_vifs.side_effect = (
            lambda *a, **k: order.append('plug'))
        self.guest.ensure_running.side_effect = (
            lambda *a, **k: order.append('start'))
        self.driver.power_on(self.context, self.instance, ['vif'])
        self.driver.resume_state_on_host_boot(self.context, self.instance,
                                              ['vif'], None)
        self.assertEqual(['plug', 'start'] * 2, order)
        self.parts.networking.plug_vifs.assert_called_with(
            self.instance, ['vif'])

    def test_only_a_hard_reboot_replugs_the_ports(self):
        self.driver.reboot(self.context, self.instance, ['vif'], 'SOFT')
        self.parts.networking.plug_vifs.assert_not_called()
        self.guest.reboot.assert_called_once_with(hard=False)
        self.guest.reset_mock()
        self.driver.reboot(self.context, self.instance, ['vif'], 'HARD')
        self.parts.networking.plug_vifs.assert_called_once_with(
            self.instance, ['vif'])
        self.guest.reboot.assert_called_once_with(hard=True)

    def test_power_off_keeps_the_console_before_stopping(self):
        order = []
        self.guest.keep_console.side_effect = (
            lambda: order.append('console'))
        self.guest.stop.side_effect = lambda *a: order.append(a)
        self.driver.power_off(self.instance, timeout=60, retry_interval=10)
        self.assertEqual(['console', (60, 10)], order)

    def test_resources_are_read_before_nova_lock_not_under_it(self):
        snapshot = self.parts.inventory.refresh.return_value
        self.parts.host.read_resource.return_value = {'vcpus': 4}
        self.assertEqual({'vcpus': 4},
                         self.driver.get_available_resource(HOST))
        self.parts.gate.maybe_refresh.assert_called_once_with()
        self.parts.host.read_resource.assert_called_once_with(
            snapshot.resources)
        for part in (self.parts.gate, self.parts.host,
                     self.parts.inventory):
            part.reset_mock()
        self.flags(reserved_host_disk_mb=1500)
        tree = mock.sentinel.provider_tree
        last = self.parts.inventory.snapshot.return_value
        self.driver.update_provider_tree(tree, HOST, allocations={'a': 1})
        # under the lock: nothing probed or read, the last snapshot used,
        # and the gate's last probe, read from memory
        gate_now = self.parts.gate
        self.assertEqual([mock.call.probed_gpus(), mock.call.apply(
            self.parts.inventory.desired_from.return_value)],
            gate_now.mock_calls)
        self.parts.inventory.refresh.assert_not_called()
        self.parts.host.read_resource.assert_not_called()
        self.parts.host.update_root_provider.assert_called_once_with(
            tree, last.resources, 2, self.driver._get_allocation_ratios)
        self.parts.inventory.desired_from.assert_called_once_with(
            HOST, last, gate_now.probed_gpus.return_value)
        self.parts.inventory.write_tree.assert_called_once_with(
            tree, HOST, gate_now.apply.return_value, {'a': 1}, last.records)

    def test_the_gate_is_applied_where_the_provider_tree_is_written(self):
        # the inventory gives the providers the host should have and
        # writes them; the gate between the two reserves held, unhealthy
        # and not yet verified units (the inventory never sees the gate)
        inventory, gate_now = self.parts.inventory, self.parts.gate
        order = []
        inventory.desired_from.side_effect = (
            lambda *args: order.append('desired') or {'p': 'wanted'})
        gate_now.apply.side_effect = (
            lambda desired: order.append('gate') or {'p': 'reserved'})
        inventory.write_tree.side_effect = (
            lambda tree, node, desired, *args: order.append(desired))
        self.driver.update_provider_tree(mock.sentinel.tree, HOST)
        self.assertEqual(['desired', 'gate', {'p': 'reserved'}], order)
        gate_now.apply.assert_called_once_with({'p': 'wanted'})

    def test_image_cache_is_pruned_only_when_the_operator_allows(self):
        instances = [_instance(), _instance(OTHER, image_ref=IMAGE2)]
        self.flags(remove_unused_base_images=False, group='image_cache')
        self.driver.manage_image_cache(self.context, instances)
        self.parts.images.prune.assert_not_called()
        self.flags(remove_unused_base_images=True,
                   remove_unused_original_minimum_age_seconds=600,
                   group='image_cache')
        self.driver.manage_image_cache(self.context, instances)
        self.parts.images.prune.assert_called_once_with(
            {IMAGE, IMAGE2}, 600)

    def test_cache_image_caches_glance_image_by_its_id(self):
        glance = mock.Mock()
        glance.get.return_value = {'name': 'tiny', 'disk_format': 'raw',
                                   'container_format': 'bare',
                                   'properties': {}}
        self.parts.images.image_api = glance
        self.parts.images.cache.return_value = True
        self.assertTrue(self.driver.cache_image(self.context, IMAGE2))
        glance.get.assert_called_once_with(self.context, IMAGE2)
        ctx, meta = self.parts.images.cache.call_args[0]
        self.assertIs(self.context, ctx)
        self.assertIsInstance(meta, objects.ImageMeta)
        self.assertEqual((IMAGE2, 'tiny', 'raw'),
                         (meta.id, meta.name, meta.disk_format))

    def test_cleanup_host_stops_the_gpu_gate_and_the_watcher(self):
        self.driver.cleanup_host(HOST)
        self.parts.gate.stop.assert_called_once_with()
        self.parts.host.stop_watcher.assert_called_once_with()


class InitHostTest(DriverTestCase):
    """init_host: check, clean up after a restart, then watch."""

    def setUp(self):
        super(InitHostTest, self).setUp()
        self.lookups = {}
        for name in ('host_instances', 'record_fault',
                     'placement_allocations'):
            patcher = mock.patch.object(nova_lookups, name)
            self.lookups[name] = patcher.start()
            self.addCleanup(patcher.stop)
        self.lookups['placement_allocations'].return_value = {}
        self.client = Daemon(
            _record(units=[GPU_UNIT]),
            _record(OTHER, status='Stopped', units=[MIG_UNIT]))
        self.use_fake_parts(client=self.client)

    def bound(self, uuid):
        record = self.client.records['nova-' + uuid]
        return (identity.KEY_DEVICES in record['config'],
                sorted(record['devices']))

    def test_it_checks_the_daemon_then_watches_it_for_nova(self):
        self.lookups['host_instances'].return_value = []
        self.driver.init_host(HOST)
        self.parts.host.check.assert_called_once_with()
        self.parts.host.start_watcher.assert_called_once_with(
            self.driver.emit_event)

    def test_a_daemon_that_fails_the_check_stops_the_start(self):
        self.parts.host.check.side_effect = exception.DaemonNotUsable(
            daemon='LXD', endpoint='/var/lib/lxd/unix.socket',
            reason='storage pool "default" does not exist')
        self.assertRaises(exception.DaemonNotUsable, self.driver.init_host,
                          HOST)
        self.parts.host.start_watcher.assert_not_called()
        self.parts.lifecycle.remove_interrupted_builds.assert_not_called()

    def test_left_over_downloads_are_removed(self):
        # one whose process is gone (no pid in its name: not a live one's)
        partial = os.path.join(self.downloads, IMAGE + '.part')
        with open(partial, 'w') as handle:
            handle.write('half an image')
        self.lookups['host_instances'].return_value = []
        self.driver.init_host(HOST)
        self.assertEqual([], os.listdir(self.downloads))

    def test_accelerators_of_instances_nova_no_longer_has_are_released(self):
        # the MIG holder was deleted while nova-compute was down
        instance = _instance()
        self.lookups['host_instances'].return_value = [instance]
        self.driver.init_host(HOST)
        self.assertEqual((True, ['nova-gpu0', 'root']), self.bound(UUID))
        self.assertEqual((False, ['root']), self.bound(OTHER))
        self.lookups['host_instances'].assert_called_once_with(HOST)
        self.lookups['placement_allocations'].assert_called_once_with(UUID)
        self.parts.lifecycle.remove_interrupted_builds.\
            assert_called_once_with([instance], HOST)

    def test_nothing_is_released_when_nova_cannot_list_its_instances(self):
        self.lookups['host_instances'].side_effect = (
            nova_exception.NovaException('conductor unreachable'))
        self.driver.init_host(HOST)
        self.assertEqual((True, ['nova-mig1', 'root']), self.bound(OTHER))
        self.parts.lifecycle.remove_interrupted_builds.assert_not_called()
        self.assertIn('Cannot list the instances nova has on cmp1 '
                      '(conductor unreachable)', self.log.output)
        self.parts.host.start_watcher.assert_called_once_with(
            self.driver.emit_event)

    def test_interrupted_builds_get_a_fault_even_if_one_cannot(self):
        first, second = _instance(), _instance(OTHER)
        faults = [exception.SpawnInterrupted(host=HOST, cleanup='x'),
                  exception.SpawnInterrupted(host=HOST, cleanup='y')]
        self.lookups['host_instances'].return_value = [first, second]
        self.parts.lifecycle.remove_interrupted_builds.return_value = list(
            zip([first, second], faults))
        self.lookups['record_fault'].side_effect = [
            nova_exception.NovaException('db gone'), None]
        self.driver.init_host(HOST)
        self.assertEqual([mock.call(first, faults[0]),
                          mock.call(second, faults[1])],
                         self.lookups['record_fault'].call_args_list)
        self.parts.host.start_watcher.assert_called_once_with(
            self.driver.emit_event)

    def test_a_failing_accelerator_check_does_not_stop_the_start(self):
        self.lookups['host_instances'].return_value = []

        def unreachable():
            raise exception.LXDOperationFailed(
                action='list', target='instances', reason='timed out')
        self.client.list_containers = unreachable
        self.driver.init_host(HOST)
        self.assertIn('Checking the accelerator bindings of the containers '
                      'of cmp1 failed', self.log.output)
        self.parts.host.start_watcher.assert_called_once_with(
            self.driver.emit_event)

    def test_another_host_name_rebuilds_the_parts_on_the_same_client(self):
        self.lookups['host_instances'].return_value = []
        old = self.parts
        built = []

        def build(conf, virtapi, host, client=None):
            built.append((conf, virtapi, host, client))
            return _fake_parts(host, client, fresh=True)
        with mock.patch.object(parts.Parts, 'build', side_effect=build):
            self.driver.init_host(HOST)
            self.assertEqual([], built)
            self.driver.init_host('cmp2')
        self.assertEqual([(CONF, self.virtapi, 'cmp2', self.client)], built)
        new = self.driver._parts
        self.assertEqual(['cmp2'], self.driver.get_available_nodes())
        new.host.check.assert_called_once_with()
        self.lookups['host_instances'].assert_called_with('cmp2')
        old.host.check.assert_called_once_with()


class ThroughThePartsTest(DriverTestCase):
    """What the facade adds, on the real parts over an in-memory daemon."""

    def test_nova_sees_only_this_hosts_instance_containers(self):
        self.use_daemon(
            _record(),
            # its rescue container stands for it, is not listed itself
            _record(name='nova-rescue-' + UUID,
                    **{identity.KEY_RESCUE_OF: UUID}),
            _record(OTHER, host='cmp2'),
            {'name': 'by-hand', 'status': 'Running', 'config': {},
             'devices': {}},
            _record(OTHER, name='nova-other-project', project='elsewhere'))
        self.assertEqual([NAME], self.driver.list_instances())
        self.assertEqual([UUID], self.driver.list_instance_uuids())
        self.assertEqual(1, self.driver.get_num_instances())

    def test_an_empty_daemon_has_no_instances(self):
        self.use_daemon()
        self.assertEqual([], self.driver.list_instances())
        self.assertEqual(0, self.driver.get_num_instances())
        self.assertFalse(self.driver.instance_exists(_instance()))

    def test_instance_exists_and_info_follow_its_container(self):
        client = self.use_daemon(_record(status='Frozen'))
        self.assertTrue(self.driver.instance_exists(_instance()))
        self.assertFalse(self.driver.instance_exists(_instance(OTHER)))
        self.assertEqual(power_state.PAUSED,
                         self.driver.get_info(_instance()).state)
        client.records[NAME]['status'] = 'Stopped'
        self.assertEqual(power_state.SHUTDOWN, self.driver.get_info(
            _instance(), use_cache=False).state)

    def test_power_calls_change_the_containers_state(self):
        client = self.use_daemon(_record())
        instance = _instance()

        def status():
            return client.records[NAME]['status']
        self.driver.suspend(self.context, instance)
        self.assertEqual('Frozen', status())
        self.assertEqual(power_state.SUSPENDED,
                         self.driver.get_info(instance).state)
        self.driver.resume(self.context, instance, [])
        self.assertEqual('Running', status())
        self.assertNotIn(identity.KEY_SUSPENDED,
                         client.records[NAME]['config'])
        self.driver.power_off(instance)
        self.assertEqual('Stopped', status())
        self.driver.power_on(self.context, instance, [])
        self.assertEqual('Running', status())

    def test_starting_a_container_deleted_outside_nova_says_so(self):
        self.use_daemon()
        exc = self.assertRaises(exception.ContainerGone,
                                self.driver.power_on, self.context,
                                _instance(), [])
        self.assertIn('rebuild', str(exc))

    def test_diagnostics_name_each_bound_accelerator(self):
        self.use_daemon(_record(units=[GPU_UNIT, MIG_UNIT]))
        self.assertEqual({
            'state': 'Running', 'limits.cpu': '2',
            'limits.memory': '2048MiB',
            'nova-gpu0': 'pgpu pci=0000:07:00.0 '
                         '(PGPU of resource provider rp-gpu)',
            'nova-mig1': 'mig pci=0000:85:00.0 mig_uuid=MIG-6a1f '
                         'mig_profile=1g.10gb '
                         '(CUSTOM_MIG_1G_10GB of resource provider rp-mig)',
        }, self.driver.get_diagnostics(_instance()))

    def test_diagnostics_of_a_missing_container_is_instance_not_found(self):
        self.use_daemon()
        exc = self.assertRaises(nova_exception.InstanceNotFound,
                                self.driver.get_diagnostics, _instance())
        self.assertIn(NAME, str(exc))
