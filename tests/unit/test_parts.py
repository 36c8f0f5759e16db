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

"""Parts.build: one host's parts, each wired to the ones it uses.

The wiring is checked by what the parts do together, on the real parts:
the in-memory daemon of tests/fixtures/fake_lxd.py, a sample GPU host's
``/1.0/resources`` (tests/unit/accel/samples) and the fake ``nvidia-smi``
script of tests/fixtures/fake_nvidia_smi.py. nova is reached only through
:mod:`nova_lxd_accel.nova_lookups`; the instance-projects look-up is
replaced at that boundary, and nova's resource update goes to an autospec
of nova's resource tracker.
"""

import copy
import types
from unittest import mock

import fixtures
from nova.compute import manager as compute_manager
from nova.compute import power_state
from nova.compute import resource_tracker
import nova.conf
from nova import context as nova_context
from nova import objects
from nova.virt import fake as fake_virt
from oslo_config import fixture as config_fixture
import testtools

from nova_lxd_accel.accel.health import gate
from nova_lxd_accel import client as lxd_client
from nova_lxd_accel import conf as lxd_conf
from nova_lxd_accel.container import identity
from nova_lxd_accel import exception
from nova_lxd_accel import host as lxd_host
from nova_lxd_accel import nova_lookups
from nova_lxd_accel import parts
from tests.fixtures import fake_lxd
from tests.fixtures import fake_nvidia_smi
from tests.fixtures import gpu_hosts

CONF = nova.conf.CONF
objects.register_all()

HOST = 'cmp1'
UUID = '5b1d3c8e-6f0a-4c1e-9a7d-2f3e4d5c6b7a'
OTHER = 'c3e2a1b0-9d8c-4b7a-8f6e-5d4c3b2a1f0e'
PORT = 'b1e0c5a2-7f3d-4e8b-9a61-2c4d5e6f7a80'
#: Two A100s, at 0000:85:00.0 and 0000:07:00.0.
A100 = gpu_hosts.load_json('handmade-lxd-two-a100-no-nvidia-object.json')
GPU07 = '%s_gpu_0000_07_00_0' % HOST
GPU85 = '%s_gpu_0000_85_00_0' % HOST


def _record(uuid=UUID, host=HOST, name=None, status='Running', pci=None,
            project=None):
    """A container of nova-compute ``host``, holding GPU ``pci``."""
    record = {'name': name or 'nova-' + uuid, 'status': status,
              'config': {identity.KEY_HOST: host,
                         identity.KEY_INSTANCE_UUID: uuid},
              'devices': {}}
    if pci:
        record['devices']['gpu'] = {'type': 'gpu', 'pci': pci}
    if project:
        record['project'] = project
    return record


def _instance(uuid=UUID):
    return objects.Instance(
        uuid=uuid, project_id='p1', vm_state='active', task_state=None,
        flavor=objects.Flavor(name='g1', vcpus=1, memory_mb=512,
                              extra_specs={}))


class Daemon(fake_lxd.FakeLXDClient):
    """The in-memory daemon on a host with two A100s."""

    def resources(self, attempts=3):
        return {'gpu': copy.deepcopy(A100['gpu'])}

    def listed_containers(self, names, max_age=None):
        return None


class PartsTestCase(testtools.TestCase):

    def setUp(self):
        super(PartsTestCase, self).setUp()
        lxd_conf.register_opts(CONF)
        self.flags = self.useFixture(config_fixture.Config(CONF)).config
        self.smi = fake_nvidia_smi.FakeNvidiaSmi(
            self.useFixture(fixtures.TempDir()).path)
        self.flags(state_dir=self.useFixture(fixtures.TempDir()).path,
                   nvidia_smi_path=self.smi.path, report_mig=False,
                   pool_whole_gpus=False, group='lxd_accelerators')
        # no lifecycle thread: the tests poll themselves
        self.flags(lifecycle_poll_interval=0, group='lxd')
        self.projects_asked = []
        self.useFixture(fixtures.MockPatchObject(
            nova_lookups, 'nova_instance_projects',
            side_effect=lambda host: self.projects_asked.append(host) or {}))
        self.log = self.useFixture(fixtures.FakeLogger())
        self.virtapi = fake_virt.FakeVirtAPI()

    def build(self, *records):
        self.client = Daemon(*records)
        self.parts = parts.Parts.build(CONF, self.virtapi, HOST,
                                       client=self.client)
        return self.parts

    def provider_tree(self):
        """The host's accelerator providers, as nova's periodic task."""
        self.parts.inventory.refresh()
        tree = gpu_hosts.new_tree(HOST)
        self.write_tree(tree)
        return tree

    def write_tree(self, tree):
        """The accelerator providers, written as the driver writes them.

        ``LXDDriver.update_provider_tree``: the inventory's desired
        providers from its last snapshot, through the gate.
        """
        inventory, gpu_gate = self.parts.inventory, self.parts.gate
        snapshot = inventory.snapshot()
        desired = inventory.desired_from(HOST, snapshot,
                                         gpu_gate.probed_gpus())
        inventory.write_tree(tree, HOST, gpu_gate.apply(desired), {},
                             snapshot.records)


class OwnerAndClientTest(PartsTestCase):

    def test_the_parts_are_the_named_hosts_in_the_configured_project(self):
        self.flags(project='nova', container_name_prefix='ct-', group='lxd')
        built = self.build()
        self.assertEqual(identity.Owner(host=HOST, project='nova',
                                        prefix='ct-'), built.owner)
        self.assertEqual(HOST, built.host.nodename)
        self.assertEqual('ct-' + UUID, built.host.guest(_instance()).name)

    def test_without_a_client_building_connects_to_nothing(self):
        # nova-compute loads the driver before the daemon may be up: the
        # first use says where it looked
        socket = '/nonexistent/lxd/unix.socket'
        self.flags(endpoint=socket, group='lxd')
        built = parts.Parts.build(CONF, self.virtapi, HOST)
        self.assertIsInstance(built.client, lxd_client.LXDClient)
        self.assertEqual(socket, built.client.endpoint)
        exc = self.assertRaises(exception.LXDUnreachable,
                                built.client.list_containers)
        self.assertIn(socket, str(exc))

    def test_every_part_works_on_the_one_client_given(self):
        nic = {'type': 'nic', 'nictype': 'p2p', 'name': 'eth0',
               'host_name': 'tapb1e0c5a2-7f'}
        ours = _record()
        ours['devices']['nova-port-' + PORT] = nic
        built = self.build(
            ours, _record(name='nova-resize-' + UUID, status='Stopped'))
        instance = _instance()
        self.assertEqual(ours['config'],
                         built.host.guest(instance).record()['config'])
        self.assertEqual(power_state.RUNNING,
                         built.lifecycle.power_state(instance))
        built.networking.detach_interface(instance, {'id': PORT,
                                                     'type': 'tap'})
        self.assertNotIn('nova-port-' + PORT,
                         self.client.records['nova-' + UUID]['devices'])
        self.assertTrue(built.migration.delete_kept_original(instance))
        self.assertEqual(['nova-' + UUID], list(self.client.records))
        # spawn's host side and the driver's are the same ports
        self.assertIs(built.networking, built.plumbing.networking)

    def test_migrations_finish_under_this_hosts_profile_masks(self):
        # issue 43 item 11: what init_host found in this host's [lxd]
        # profiles is masked in a container it finishes a move of
        built = self.build()
        built.host._profile_masks = lxd_host.profile_masks([{
            'config': {'raw.lxc': 'lxc.apparmor.profile=unconfined'},
            'devices': {'socket': {'type': 'proxy'}}}])
        # the migration builds under the Host part's policy, not its own
        self.assertIs(built.host, built.migration._host)
        policy = built.migration._host.policy()
        self.assertEqual(('socket',), policy.masked_devices)
        self.assertEqual(('raw.lxc', '# stripped by nova-lxd-accel'),
                         policy.masked_config[0])


class AcceleratorWiringTest(PartsTestCase):

    def test_the_inventory_reserves_gpus_other_than_this_hosts_hold(self):
        self.build(_record(pci='0000:07:00.0'),
                   _record(OTHER, host='cmp2', pci='0000:85:00.0'))
        tree = self.provider_tree()
        self.assertEqual(0, tree.data(GPU07).inventory['PGPU']['reserved'])
        self.assertEqual(1, tree.data(GPU85).inventory['PGPU']['reserved'])
        self.assertIn('held by default/nova-' + OTHER, self.log.output)

    def test_this_hosts_container_in_another_project_is_foreign(self):
        self.build(_record(pci='0000:07:00.0', project='elsewhere'))
        tree = self.provider_tree()
        self.assertEqual(1, tree.data(GPU07).inventory['PGPU']['reserved'])

    def test_each_part_is_given_the_one_gate_whole(self):
        # one typed object per part (accel.gate_seams), no loose callables
        self.build()
        gate_now = self.parts.gate
        self.assertIs(gate_now, self.parts.claims._gate)
        self.assertIs(gate_now, self.parts.lifecycle._gate)
        self.assertIs(gate_now, self.parts.host._gate)
        self.parts.host.start_watcher(lambda event: None)
        self.addCleanup(self.parts.host.stop_watcher)
        self.assertIs(gate_now, self.parts.host.watcher._gate)

    def test_the_claim_is_given_the_inventory_whole(self):
        # one typed object (accel.devices.ReportedDevices), not its methods
        self.build()
        self.assertIs(self.parts.inventory, self.parts.claims._reported)

    def test_the_gate_judges_the_gpus_the_inventory_reported(self):
        # nvidia-smi lists one of the two GPUs LXD reports: the other one
        # fell off the bus, so it is held, in Placement and in claims
        self.smi.set_gpus(*[row for row in fake_nvidia_smi.idle_rows(A100)
                            if '07:00.0' in row])
        self.build(_record(status='Stopped'))
        tree = self.provider_tree()
        self.parts.gate.refresh()
        self.assertEqual([HOST], self.projects_asked)
        self.write_tree(tree)
        held = tree.data(GPU85)
        self.assertEqual(1, held.inventory['PGPU']['reserved'])
        self.assertIn(gate.TRAIT_UNHEALTHY, held.traits)
        self.assertEqual(0, tree.data(GPU07).inventory['PGPU']['reserved'])
        exc = self.assertRaises(
            exception.GpuHeld, self.parts.claims.claim, 'nova-' + UUID,
            {held.uuid: {'resources': {'PGPU': 1}}}, _instance())
        self.assertIn('nova-lxd-accel gpu release 0000:85:00.0', str(exc))

    def test_a_claimed_gpu_removed_behind_novas_back_stays_reserved(self):
        self.smi.set_gpus(*fake_nvidia_smi.idle_rows(A100))
        name = 'nova-' + UUID
        self.build(_record(status='Stopped'),
                   _record(OTHER, status='Stopped'))
        tree = self.provider_tree()
        self.parts.gate.refresh()
        rp = tree.data(GPU07).uuid
        self.parts.claims.claim(name, {rp: {'resources': {'PGPU': 1}}},
                                _instance())
        self.assertEqual({'type': 'gpu', 'gputype': 'physical',
                          'pci': '0000:07:00.0'},
                         self.client.records[name]['devices']['nova-gpu0'])
        # the gate knows the claim's unit as bound to it
        bound = self.parts.gate.store.load()['bound']
        self.assertEqual([name], [u['container'] for u in bound.values()])
        # the host's watcher sees the container deleted on the daemon
        events = []
        self.parts.host.start_watcher(events.append)
        self.addCleanup(self.parts.host.stop_watcher)
        self.parts.host.watcher.poll_once()
        del self.client.records[name]
        self.parts.host.watcher.poll_once()
        self.assertEqual([UUID], [e.get_instance_uuid() for e in events])
        self.assertEqual({}, self.parts.gate.store.load()['bound'])
        self.write_tree(tree)
        self.assertEqual(1, tree.data(GPU07).inventory['PGPU']['reserved'])
        # and no claim takes it until verified clean
        exc = self.assertRaises(
            exception.AcceleratorUnavailable, self.parts.claims.claim,
            'nova-' + OTHER, {rp: {'resources': {'PGPU': 1}}},
            _instance(OTHER))
        self.assertIn('not yet verified clean', str(exc))

    def test_a_gpu_turned_clean_runs_novas_resource_update_for_the_host(self):
        tracker = mock.create_autospec(resource_tracker.ResourceTracker,
                                       instance=True)
        self.virtapi = compute_manager.ComputeVirtAPI(
            types.SimpleNamespace(rt=tracker, reportclient=None))
        self.build()
        self.parts.gate.on_clean()
        tracker.update_available_resource.assert_called_once_with(
            mock.ANY, HOST)
        context = tracker.update_available_resource.call_args[0][0]
        self.assertIsInstance(context, nova_context.RequestContext)
