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

"""The host's one claim (:class:`.binding.claims.Claims`), directly.

What a spawn's :meth:`~.Claims.prepare` binds, writes into the stopped
container (devices, binding record, MPS client files) and returns; which
allocations want a claim at all; the snapshot's Glance mark; what runs
under the claim lock; and the refusals an operator reads (a unit held by
another instance, a dirty unit, a provider the host does not have, a
container gone). The host is eight recorded H100s read through the real
inventory, the last one shared in quota mode; the daemon is the shared fake
(tests/fixtures/fake_lxd.py) with the files of its stopped containers.
"""

import copy
import json

import fixtures
from nova import objects
from oslo_concurrency import lockutils
from oslo_config import cfg
from oslo_config import fixture as config_fixture
import testtools

from nova_lxd_accel.accel.binding import claims
from nova_lxd_accel.accel.binding import mps_environment
from nova_lxd_accel.accel.health import gate_state
from nova_lxd_accel.accel.health import release
from nova_lxd_accel import conf as lxd_conf
from nova_lxd_accel.container import identity
from nova_lxd_accel import daemon as lxd_daemon
from nova_lxd_accel import exception
from tests.fixtures import binding
from tests.fixtures import fake_lxd
from tests.fixtures import gpu_hosts
from tests.fixtures import recorded_daemon

UUID = '5d0b8f7e-1c2a-4e3b-9a4d-6f7e8d9c0b1a'
NAME = 'nova-' + UUID
WHOLE = '0000:10:00.0'
OTHER = '0000:11:00.0'
SHARED = '0000:17:00.0'
WHOLE_RP = 'cmp1_gpu_0000_10_00_0'
OTHER_RP = 'cmp1_gpu_0000_11_00_0'
SHARED_RP = 'cmp1_gpu_0000_17_00_0'
IB_PORT_RP = 'cmp1_ib_0000_0c_00_0'
IB_VF_RP = 'cmp1_ib_0000_4b_00_0'
#: Ubuntu's own /etc/environment
UBUNTU = ('PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:'
          '/bin:/usr/games:/usr/local/games:/snap/bin"\n')


class FilesClient(fake_lxd.FakeLXDClient):
    """The shared fake, with the files of its containers in memory.

    They answer as the real client's do: a missing file pulls as None,
    its delete returns False.
    """

    def __init__(self, *records, **kwargs):
        super().__init__(*records, **kwargs)
        #: (container, path) -> bytes
        self.files = {}
        #: file calls, in order: (method, container, path)
        self.file_calls = []
        #: how many times every project's instances were listed
        self.all_listings = 0

    def list_all_instances(self):
        self.all_listings += 1
        return super().list_all_instances()

    def pull_file(self, name, path, limit, why):
        self.file_calls.append(('pull', name, path))
        return self.files.get((name, path))

    def push_file(self, name, path, data, mode=0o644, uid=0, gid=0):
        self.file_calls.append(('push', name, path))
        self.files[(name, path)] = data

    def delete_file(self, name, path):
        self.file_calls.append(('delete', name, path))
        return self.files.pop((name, path), None) is not None

    def make_directory(self, name, path, mode=0o755):
        self.file_calls.append(('mkdir', name, path))

    def text(self, path, name=NAME):
        data = self.files.get((name, path))
        return None if data is None else data.decode()


class CdiDaemonClient(FilesClient):
    """The fake behind a recorded LXD 6.2, which has ``gpu_cdi``."""

    def daemon_info(self, refresh=False):
        return lxd_daemon.DaemonInfo.from_server_info(recorded_daemon.sample(
            recorded_daemon.LXD_62)['metadata'])


def _instance(uuid=UUID, project_id='p1', system_metadata=None, **specs):
    return objects.Instance(
        uuid=uuid, project_id=project_id,
        flavor=objects.Flavor(name='gpu.test', extra_specs=specs),
        system_metadata=system_metadata or {})


def claim_lock_held():
    """Whether some thread holds :data:`claims.CLAIM_LOCK` now."""
    try:
        with lockutils.lock(claims.CLAIM_LOCK, blocking=False,
                            do_log=False):
            return False
    except lockutils.AcquireLockFailedException:
        return True


class ClaimsTestBase(testtools.TestCase):

    client_class = FilesClient

    def setUp(self):
        super().setUp()
        objects.register_all()
        # the shared GPU's unknown memory is logged by the inventory
        self.useFixture(fixtures.FakeLogger())
        self.conf = cfg.ConfigOpts()
        lxd_conf.register_opts(self.conf)
        self.conf([], default_config_files=[])
        # overrides live in the (shared) option groups: undone after
        self.useFixture(config_fixture.Config(self.conf)).config(
            shared_gpus=[SHARED + ':2:quota'], pool_whole_gpus=False,
            group='lxd_accelerators')
        self.inventory, self.tree = gpu_hosts.report(
            {'gpu': {'cards': gpu_hosts.eight_gpu_cards()}}, conf=self.conf)
        self.client = self.client_class()
        self.client.create_container(
            NAME, {}, {'root': {'type': 'disk', 'path': '/',
                                'pool': 'default'}}, ['default'], {})
        del self.client.calls[:]

    def claims(self, **gate):
        """The claim, with a gate of the callables ``gate`` names."""
        return claims.Claims(self.client, self.conf, self.inventory,
                             gate=binding.ClaimGateCalls(**gate))

    def alloc(self, *items):
        out = {gpu_hosts.ROOT_UUID: {
            'resources': {'VCPU': 1, 'MEMORY_MB': 128}}}
        for name, rc, n in items:
            out.setdefault(self.tree.data(name).uuid, {'resources': {}})[
                'resources'][rc] = n
        return out

    def recorded(self, name=NAME):
        return json.loads(self.client.records[name]['config'].get(
            identity.KEY_DEVICES, '[]'))


class PrepareTest(ClaimsTestBase):

    def test_whole_gpu_recorded_as_returned_and_no_file_touched(self):
        bound = self.claims().prepare(
            NAME, self.alloc((WHOLE_RP, 'PGPU', 1)), _instance())
        record = self.client.records[NAME]
        self.assertEqual({'type': 'gpu', 'gputype': 'physical',
                          'pci': WHOLE}, record['devices']['nova-gpu0'])
        # the binding returned is the one the daemon now holds
        self.assertEqual(bound.records(), self.recorded())
        self.assertEqual([('pgpu', 'pci:' + WHOLE,
                           self.tree.data(WHOLE_RP).uuid)],
                         [(r['kind'], r['unit'], r['provider'])
                          for r in self.recorded()])
        self.assertIn('root', record['devices'])
        # no MPS quota and no snapshot image: its files are not read
        self.assertEqual([], self.client.file_calls)
        self.assertEqual({}, bound.mps_variables)

    def test_mps_quota_written_for_logins_cron_and_services(self):
        self.client.files[(NAME, '/etc/environment')] = UBUNTU.encode()
        bound = self.claims().prepare(
            NAME, self.alloc((SHARED_RP, 'CUSTOM_GPU_SHARE', 1)),
            _instance(**{'lxd:gpu_memory_mb': '8192',
                         'lxd:gpu_compute_percent': '50'}))
        pipe = '/run/nvidia-mps-' + SHARED
        assignments = ['CUDA_MPS_PIPE_DIRECTORY=' + pipe,
                       'CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8192M',
                       'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50']
        # the image's own lines kept, our block after them
        self.assertEqual(
            UBUNTU + '\n'.join([mps_environment.BEGIN] + assignments +
                               [mps_environment.END]) + '\n',
            self.client.text('/etc/environment'))
        for path in mps_environment.DROPINS:
            self.assertIn('[Manager]\nDefaultEnvironment=%s\n'
                          % ' '.join(assignments), self.client.text(path))
        self.assertIn(('mkdir', NAME, '/etc/systemd/user.conf.d'),
                      self.client.file_calls)
        # init and `lxc exec` get the same from the container's config
        config = self.client.records[NAME]['config']
        self.assertEqual('0=8192M', config[
            'environment.CUDA_MPS_PINNED_DEVICE_MEM_LIMIT'])
        record = self.recorded()[0]
        self.assertEqual(('gpu_share', 'share:%s/0' % SHARED, 'p1'),
                         (record['kind'], record['unit'],
                          record['project_id']))
        self.assertEqual(pipe, bound.mps_variables['CUDA_MPS_PIPE_DIRECTORY'])

    def test_snapshot_of_a_quota_container_has_its_files_removed(self):
        # a first instance with a quota; its snapshot is marked in Glance
        self.claims().prepare(
            NAME, self.alloc((SHARED_RP, 'CUSTOM_GPU_SHARE', 1)),
            _instance(**{'lxd:gpu_memory_mb': '4096'}))
        properties = claims.snapshot_properties(
            self.client.records[NAME]['config'])
        self.assertEqual({mps_environment.SNAPSHOT_PROPERTY: 'written'},
                         properties)
        # a spawn from that snapshot: the image carried the files over
        other = 'nova-0f7c9a3e-2b1d-4c5e-8f6a-7b8c9d0e1f2a'
        self.client.create_container(other, {}, {}, ['default'], {})
        for path in mps_environment.DROPINS + ('/etc/environment',):
            self.client.files[(other, path)] = self.client.files[
                (NAME, path)]
        # nova copies image properties into system metadata as image_<key>
        meta = {'image_' + key: value for key, value in properties.items()}
        bound = self.claims().prepare(
            other, self.alloc((WHOLE_RP, 'PGPU', 1)),
            _instance(uuid=other[5:], system_metadata=meta))
        self.assertEqual({}, bound.mps_variables)
        for path in mps_environment.DROPINS:
            self.assertIsNone(self.client.text(path, name=other))
        self.assertEqual('', self.client.text('/etc/environment',
                                              name=other))

    def test_without_accelerators_nothing_listed_or_written(self):
        bound = self.claims().prepare(NAME, self.alloc(), _instance())
        self.assertEqual((), bound.units)
        self.assertEqual({}, bound.config)
        self.assertEqual(0, self.client.all_listings)
        self.assertEqual([], self.client.calls)
        self.assertEqual([], self.client.file_calls)

    def test_cdi_daemon_binds_the_gpu_by_its_uuid(self):
        self.client = CdiDaemonClient()
        self.client.create_container(NAME, {}, {}, ['default'], {})
        self.claims().prepare(NAME, self.alloc((WHOLE_RP, 'PGPU', 1)),
                              _instance())
        record = self.client.records[NAME]
        self.assertEqual(
            {'type': 'gpu', 'gputype': 'physical',
             'id': 'nvidia.com/gpu=GPU-00000000-0000-0000-0000-000000000000'},
            record['devices']['nova-gpu0'])
        # LXD refuses a CDI id while any nvidia.* option is true
        self.assertEqual('false', record['config']['nvidia.runtime'])


class InfinibandPortTest(ClaimsTestBase):
    """A whole port is bound only while the host offers ports (issue 43).

    The recorded ConnectX-6 host: 0c:00.0 has one port (``ibp12s0``) and
    no VF. A port passes its ``issm`` and ``umad`` nodes, so its holder
    can act as a subnet manager.
    """

    def setUp(self):
        super().setUp()
        self.config = self.useFixture(config_fixture.Config(self.conf))
        self.config.config(report_infiniband_ports=True,
                           group='lxd_accelerators')
        self.resources = gpu_hosts.load_json(
            'handmade-lxd-connectx6-ib-vfs.json')
        self.inventory, self.tree = gpu_hosts.report(self.resources,
                                                     conf=self.conf)
        self.port_rp = self.tree.data(IB_PORT_RP).uuid

    def test_port_bound_while_ports_are_offered(self):
        self.claims().prepare(
            NAME, self.alloc((IB_PORT_RP, 'CUSTOM_INFINIBAND_PORT', 1)),
            _instance())
        self.assertEqual({'type': 'infiniband', 'nictype': 'physical',
                          'parent': 'ibp12s0'},
                         self.client.records[NAME]['devices']['nova-ib0'])

    def test_port_refused_once_the_option_is_off(self):
        self.config.config(report_infiniband_ports=False,
                           group='lxd_accelerators')
        # another server still holds the port: its provider stays, with
        # every unit reserved, and the host still knows the card there
        self.inventory.update_provider_tree(
            self.tree, gpu_hosts.NODE,
            {'inst-1': {'allocations': {self.port_rp: {'resources': {
                'CUSTOM_INFINIBAND_PORT': 1}}}}},
            resources=copy.deepcopy(self.resources))
        self.assertIsNotNone(self.inventory.device_for_provider(
            self.port_rp))
        exc = self.assertRaises(
            exception.AcceleratorNotBindable, self.claims().prepare, NAME,
            self.alloc((IB_PORT_RP, 'CUSTOM_INFINIBAND_PORT', 1)),
            _instance())
        self.assertIn('report_infiniband_ports', str(exc))
        record = self.client.records[NAME]
        self.assertNotIn(identity.KEY_DEVICES, record['config'])
        self.assertEqual(['root'], list(record['devices']))

    def test_vf_bound_either_way(self):
        self.config.config(report_infiniband_ports=False,
                           group='lxd_accelerators')
        self.claims().prepare(
            NAME, self.alloc((IB_VF_RP, 'CUSTOM_INFINIBAND_VF', 1)),
            _instance())
        self.assertEqual('ibp75s0v7', self.client.records[NAME]['devices'][
            'nova-ib0']['parent'])


class WantsAcceleratorsTest(testtools.TestCase):

    def test_only_an_amount_of_an_accelerator_class_wants_a_claim(self):
        rp = '3f1e2d4c-0000-4000-8000-000000000001'
        for allocations in (None, {}, {rp: None}, {rp: {}},
                            {rp: {'resources': None}},
                            {rp: {'resources': {'VCPU': 2,
                                                'MEMORY_MB': 512}}},
                            {rp: {'resources': {'PGPU': 0}}},
                            # a shared GPU's memory is no unit to pick
                            {rp: {'resources': {
                                'CUSTOM_GPU_MEMORY_MB': 8192}}}):
            self.assertFalse(claims.wants_accelerators(allocations),
                             allocations)
        for rc in ('PGPU', 'CUSTOM_MIG_1G_10GB', 'CUSTOM_GPU_SHARE',
                   'CUSTOM_INFINIBAND_VF', 'CUSTOM_INFINIBAND_PORT'):
            allocations = {'root': {'resources': {'VCPU': 1}},
                           rp: {'resources': {rc: 1}}}
            self.assertTrue(claims.wants_accelerators(allocations), rc)


class SnapshotPropertiesTest(testtools.TestCase):

    def test_no_mark_without_mps_limits(self):
        for config in (None, {}, {'limits.cpu': '2'},
                       {identity.KEY_DEVICES: '[]',
                        'environment.HTTP_PROXY': 'http://proxy:3128'}):
            self.assertEqual({}, claims.snapshot_properties(config), config)
        self.assertEqual(
            {mps_environment.SNAPSHOT_PROPERTY: 'written'},
            claims.snapshot_properties({
                'environment.CUDA_MPS_ACTIVE_THREAD_PERCENTAGE': '25'}))


class ClaimLockTest(ClaimsTestBase):

    def test_ledger_read_under_the_lock_after_the_listing(self):
        seen = []

        def unavailable(records):
            seen.append(('ledger', claim_lock_held(),
                         self.client.all_listings,
                         sorted(r['name'] for r in records)))
            return {}

        def dirty_projects(records):
            seen.append(('dirty', claim_lock_held(),
                         self.client.all_listings))
            return {}

        def on_bound(name, instance_uuid, records):
            # told once the record is on the daemon, still under the lock
            seen.append(('bound', claim_lock_held(), name, instance_uuid,
                         records == self.recorded(name)))

        self.claims(unavailable=unavailable, dirty_projects=dirty_projects,
                    on_bound=on_bound).prepare(
            NAME, self.alloc((WHOLE_RP, 'PGPU', 1)), _instance())
        self.assertEqual([('ledger', True, 1, [NAME]),
                          ('dirty', True, 1),
                          ('bound', True, NAME, UUID, True)], seen)
        self.assertFalse(claim_lock_held())

    def test_each_device_looked_up_is_asked_of_the_gate_locked(self):
        # the claim, not the inventory, asks whether a device may be bound
        asked = []

        def bindable(device, rp_uuid):
            asked.append((device.pci_address, rp_uuid, claim_lock_held(),
                          self.client.all_listings))

        self.claims(bindable=bindable).prepare(
            NAME, self.alloc((WHOLE_RP, 'PGPU', 1)), _instance())
        self.assertEqual([(WHOLE, self.tree.data(WHOLE_RP).uuid, True, 1)],
                         asked)

    def test_refused_claim_releases_the_lock(self):
        refuse = {'pci:' + WHOLE: ['instance x, released but not verified '
                                   'clean (pid 4242)']}
        self.assertRaises(
            exception.AcceleratorUnavailable,
            self.claims(unavailable=lambda records: refuse).prepare,
            NAME, self.alloc((WHOLE_RP, 'PGPU', 1)), _instance())
        self.assertFalse(claim_lock_held())
        # the next claim is not blocked by the refused one
        bound = self.claims().claim(NAME, self.alloc((OTHER_RP, 'PGPU', 1)),
                                    _instance())
        self.assertEqual(['pci:' + OTHER], [u.key for u in bound.units])


class RefusalTest(ClaimsTestBase):

    def setUp(self):
        super().setUp()
        # who holds a unit: the operator's log, not the user's fault
        self.pick_log = self.useFixture(fixtures.FakeLogger(
            name='nova_lxd_accel.accel.binding.pick'))

    def assertNothingBound(self):
        record = self.client.records[NAME]
        self.assertNotIn(identity.KEY_DEVICES, record['config'])
        self.assertEqual(['root'], list(record['devices']))
        self.assertEqual([], self.client.calls)

    def test_unit_bound_in_another_project_names_its_holder(self):
        # the same container name in another project is another instance
        self.client.add_instance({
            'name': NAME, 'status': 'Running', 'config': {},
            'devices': {'g': {'type': 'gpu', 'pci': WHOLE}}}, project='ml')
        exc = self.assertRaises(
            exception.AcceleratorUnavailable, self.claims().prepare,
            NAME, self.alloc((WHOLE_RP, 'PGPU', 1)), _instance())
        message = str(exc)
        self.assertIn('Cannot bind 1 PGPU of resource provider %s'
                      % self.tree.data(WHOLE_RP).uuid, message)
        self.assertIn('only 0 free', message)
        # the holder is named to the operator (the log), not to the user
        # (the fault): it is another project's container
        self.assertIn('pci:%s (held by ml/%s)' % (WHOLE, NAME),
                      self.pick_log.output)
        self.assertNotIn('ml/', message)
        self.assertIn('held: 1 unit(s), by other instances', message)
        self.assertNothingBound()

    def test_foreign_gpu_selector_resolved_with_the_host_devices(self):
        # LXD gives a vendor/product gpu device every matching card
        self.client.add_instance({
            'name': 'vm1', 'type': 'virtual-machine', 'status': 'Running',
            'config': {}, 'devices': {'gpu': {
                'type': 'gpu', 'vendorid': '10de', 'productid': '2330'}}},
            project='ml')
        exc = self.assertRaises(
            exception.AcceleratorUnavailable, self.claims().prepare,
            NAME, self.alloc((OTHER_RP, 'PGPU', 1)), _instance())
        self.assertIn('pci:%s (held by ml/vm1)' % OTHER,
                      self.pick_log.output)
        self.assertNotIn('vm1', str(exc))
        self.assertNothingBound()

    def test_own_earlier_record_is_not_a_holder(self):
        # a claim made again into the same container (a retried spawn)
        first = self.claims().claim(
            NAME, self.alloc((WHOLE_RP, 'PGPU', 1)), _instance())
        again = self.claims().claim(
            NAME, self.alloc((WHOLE_RP, 'PGPU', 1)), _instance())
        self.assertEqual(first.records(), again.records())
        self.assertEqual(first.records(), self.recorded())

    def test_dirty_and_gone_units_refused_with_the_ledger_reason(self):
        state = gate_state.empty_state()
        state['dirty']['pci:' + WHOLE] = {
            'instance': 'a1b2', 'holding': 'pid 4242 (python3)',
            'pci': WHOLE, 'kind': 'pgpu'}
        # bound to a container deleted behind nova's back, not yet verified
        state['bound']['pci:' + OTHER] = {
            'container': 'nova-gone', 'instance': 'c3d4', 'pci': OTHER,
            'kind': 'pgpu', 'seq': 1}
        survey = self.claims(
            unavailable=lambda records: release.unavailable(state, records))
        exc = self.assertRaises(
            exception.AcceleratorUnavailable, survey.prepare,
            NAME, self.alloc((WHOLE_RP, 'PGPU', 1)), _instance())
        self.assertIn('instance a1b2, released but not verified clean '
                      '(pid 4242 (python3))', self.pick_log.output)
        self.assertNotIn('a1b2', str(exc))
        exc = self.assertRaises(
            exception.AcceleratorUnavailable, survey.prepare,
            NAME, self.alloc((OTHER_RP, 'PGPU', 1)), _instance())
        self.assertIn('container nova-gone of instance c3d4 is gone; not yet '
                      'verified clean', self.pick_log.output)
        self.assertNotIn('c3d4', str(exc))
        self.assertNothingBound()

    def test_dirty_slot_of_another_project_keeps_a_shared_gpu(self):
        exc = self.assertRaises(
            exception.SharedGpuOtherProject,
            self.claims(dirty_projects=lambda records: {
                SHARED: {'p-old'}}).prepare,
            NAME, self.alloc((SHARED_RP, 'CUSTOM_GPU_SHARE', 1)),
            _instance(**{'lxd:gpu_memory_mb': '4096'}))
        message = str(exc)
        # another project's id is the operator's to read, not the user's
        self.assertNotIn('p-old', message)
        self.assertIn('serves project(s) p-old', self.pick_log.output)
        self.assertIn('shared_gpu_any_project', message)
        self.assertNothingBound()
        self.assertEqual([], self.client.file_calls)

    def test_held_gpu_stops_the_claim_and_nothing_is_bound(self):
        def held(device, rp_uuid):
            raise exception.GpuHeld(pci=device.pci_address,
                                    provider=rp_uuid, kind='unhealthy',
                                    reason='ECC errors')

        self.assertRaises(
            exception.GpuHeld, self.claims(bindable=held).prepare, NAME,
            self.alloc((WHOLE_RP, 'PGPU', 1)), _instance())
        self.assertNothingBound()
        self.assertFalse(claim_lock_held())

    def test_provider_this_host_does_not_have(self):
        stale = '9e8d7c6b-0000-4000-8000-00000000dead'
        allocations = self.alloc()
        allocations[stale] = {'resources': {'PGPU': 1}}
        exc = self.assertRaises(
            exception.AcceleratorNotBindable, self.claims().prepare,
            NAME, allocations, _instance())
        message = str(exc)
        self.assertIn('Cannot bind PGPU of resource provider %s' % stale,
                      message)
        self.assertIn('reports no device under that provider', message)
        self.assertIn('update_available_resource', message)
        self.assertNothingBound()

    def test_container_gone_fails_the_claim(self):
        exc = self.assertRaises(
            exception.ContainerNotFound, self.claims().prepare,
            'nova-missing', self.alloc((WHOLE_RP, 'PGPU', 1)), _instance())
        self.assertIn(UUID, str(exc))
        self.assertIn('nova-missing', str(exc))
        self.assertFalse(claim_lock_held())
