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

"""The look-ups into nova and Placement, against nova's own fixtures.

nova's main database is nova's ``Database`` fixture (SQLite in memory,
nova's schema); Placement is nova's ``PlacementFixture`` (the Placement
WSGI app, intercepted in process), read through nova's own report client
as nova-compute does. Nothing here is faked but the compute manager that
``update_resources`` reaches into, whose resource tracker is an autospec
of nova's.
"""

import types
from unittest import mock

import fixtures
from nova.compute import manager as compute_manager
from nova.compute import resource_tracker
import nova.conf
from nova import context as nova_context
from nova import exception as nova_exception
from nova import objects
from nova.scheduler.client import report
from nova.tests import fixtures as nova_fixtures
from nova.tests.functional import fixtures as func_fixtures
from nova.virt import fake as fake_virt
import sqlalchemy
import testtools

from nova_lxd_accel import exception
from nova_lxd_accel import nova_lookups

CONF = nova.conf.CONF
objects.register_all()

HOST = 'cmp1'
RP = '4e8e5957-649f-477b-9e5b-f1f75b21c03c'
CONSUMER = '30e9b6c1-8b0e-4d5c-a1f3-7c2d8e9f0a1b'
PROJECT = '6f70656e-7374-6163-6b70-726f6a656374'
USER = '75736572-0000-4000-8000-000000000001'


class NovaDatabaseTest(testtools.TestCase):

    def setUp(self):
        super(NovaDatabaseTest, self).setUp()
        self.flags = self.useFixture(nova_fixtures.ConfFixture(CONF)).config
        self.database = self.useFixture(nova_fixtures.Database())
        self.context = nova_context.get_admin_context()

    def instance(self, host=HOST, project_id='p1', **fields):
        instance = objects.Instance(self.context, host=host,
                                    project_id=project_id, user_id='u1',
                                    **fields)
        instance.create()
        return instance

    def test_host_instances_are_those_nova_has_on_that_host(self):
        first = self.instance()
        second = self.instance(project_id='p2')
        self.instance(host='cmp2')
        deleted = self.instance()
        deleted.destroy()
        found = nova_lookups.host_instances(HOST)
        self.assertEqual(sorted([first.uuid, second.uuid]),
                         sorted(i.uuid for i in found))
        self.assertTrue(all(isinstance(i, objects.Instance) for i in found))

    def test_host_instances_are_read_without_their_extra_fields(self):
        # a host with many instances: one query of the instances table
        self.instance(metadata={'role': 'db'})
        statements = []
        engine = self.database.get_engine()

        def seen(conn, cursor, statement, *args):
            if statement.startswith('SELECT'):
                statements.append(statement)
        sqlalchemy.event.listen(engine, 'before_cursor_execute', seen)
        self.addCleanup(sqlalchemy.event.remove, engine,
                        'before_cursor_execute', seen)
        [found] = nova_lookups.host_instances(HOST)
        self.assertEqual(1, len(statements), statements)
        self.assertNotIn('metadata', statements[0])
        for field in ('metadata', 'system_metadata', 'flavor',
                      'info_cache', 'security_groups'):
            self.assertFalse(found.obj_attr_is_set(field), field)

    def test_instance_projects_map_each_uuid_to_its_project(self):
        first = self.instance(project_id='p1')
        second = self.instance(project_id='p2')
        self.instance(host='cmp2', project_id='p3')
        self.assertEqual({first.uuid: 'p1', second.uuid: 'p2'},
                         nova_lookups.nova_instance_projects(HOST))

    def test_a_host_without_instances_has_none(self):
        self.instance(host='cmp2')
        self.assertEqual([], list(nova_lookups.host_instances(HOST)))
        self.assertEqual({}, nova_lookups.nova_instance_projects(HOST))

    def test_a_recorded_fault_is_the_one_server_show_gives(self):
        instance = self.instance()
        self.flags(host=HOST)
        fault = exception.SpawnInterrupted(
            host=HOST, cleanup='removed the half-made container nova-x')
        nova_lookups.record_fault(instance, fault)
        recorded = objects.InstanceFault.get_latest_for_instance(
            self.context, instance.uuid)
        self.assertEqual(fault.format_message(), recorded.message)
        self.assertIn('Delete the server and create it again',
                      recorded.message)
        self.assertEqual(500, recorded.code)
        self.assertEqual(HOST, recorded.host)


class PlacementTest(testtools.TestCase):

    def setUp(self):
        super(PlacementTest, self).setUp()
        self.useFixture(nova_fixtures.ConfFixture(CONF))
        self.useFixture(nova_fixtures.OpenStackSDKFixture())
        self.placement = self.useFixture(
            func_fixtures.PlacementFixture()).api
        # nova's client is made once per process: this test's Placement
        self.useFixture(fixtures.MonkeyPatch(
            'nova.scheduler.client.report.PLACEMENTCLIENT', None))

    def provider_with_allocation(self):
        """RP with 8 VCPU and 2 GiB; CONSUMER holds 2 VCPU and 512 MiB."""
        self.placement.post('/resource_providers',
                            {'name': HOST, 'uuid': RP})
        self.placement.put('/resource_providers/%s/inventories' % RP, {
            'resource_provider_generation': 0,
            'inventories': {'VCPU': {'total': 8},
                            'MEMORY_MB': {'total': 2048}}})
        response = self.placement.put('/allocations/%s' % CONSUMER, {
            'allocations': {RP: {'resources': {'VCPU': 2,
                                               'MEMORY_MB': 512}}},
            'project_id': PROJECT, 'user_id': USER,
            'consumer_generation': None}, version='1.28')
        self.assertEqual(204, response.status)

    def test_a_consumers_allocations_by_provider(self):
        self.assertEqual({}, nova_lookups.placement_allocations(CONSUMER))
        self.provider_with_allocation()
        allocations = nova_lookups.placement_allocations(CONSUMER)
        self.assertEqual([RP], list(allocations))
        self.assertEqual({'VCPU': 2, 'MEMORY_MB': 512},
                         allocations[RP]['resources'])
        # nova's one client, made at the first look-up
        self.assertIsInstance(report.PLACEMENTCLIENT,
                              report.SchedulerReportClient)

    def test_a_providers_allocations_by_consumer(self):
        self.provider_with_allocation()
        self.assertEqual(
            {CONSUMER: {'resources': {'VCPU': 2, 'MEMORY_MB': 512}}},
            nova_lookups.provider_allocations(RP))

    def test_a_provider_placement_does_not_know_is_an_error(self):
        exc = self.assertRaises(
            nova_exception.ResourceProviderAllocationRetrievalFailed,
            nova_lookups.provider_allocations, RP)
        self.assertIn(RP, str(exc))


class UpdateResourcesTest(testtools.TestCase):

    def test_it_runs_the_trackers_update_for_the_host(self):
        tracker = mock.create_autospec(resource_tracker.ResourceTracker,
                                       instance=True)
        compute = types.SimpleNamespace(rt=tracker, reportclient=None)
        virtapi = compute_manager.ComputeVirtAPI(compute)
        nova_lookups.update_resources(virtapi, HOST)
        tracker.update_available_resource.assert_called_once_with(
            mock.ANY, HOST)
        context = tracker.update_available_resource.call_args[0][0]
        self.assertIsInstance(context, nova_context.RequestContext)
        self.assertTrue(context.is_admin)

    def test_without_a_compute_manager_nothing_runs(self):
        # nova's fake virtapi (a driver loaded outside nova-compute) has
        # no manager to reach: the update waits for nova's periodic task
        self.assertIsNone(nova_lookups.update_resources(
            fake_virt.FakeVirtAPI(), HOST))
