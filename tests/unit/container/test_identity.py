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

"""Which containers are ours: ownership keys, names and binding records.

The records are shaped like LXD's ``GET /1.0/instances?recursion=1``
answer, their config made by the real builder from nova objects, so what
the driver writes at spawn is what it later recognises as its own.
"""

import json

from nova import objects
from oslo_config import cfg
from oslo_config import fixture as config_fixture
import testtools

from nova_lxd_accel import conf as lxd_conf
from nova_lxd_accel.container import builder
from nova_lxd_accel.container import identity

UUID = '7a1c5f0e-4c0b-4a55-9d59-3f7c5d0f8e21'
UUID2 = '0d7c3b53-4f3e-4a8a-9a57-4f3e2f0c1a11'
HOST = 'cmp1'


def _built_config(uuid=UUID, host=HOST):
    """The config the driver gives an instance's container at spawn."""
    flavor = objects.Flavor(name='m1.small', vcpus=1, memory_mb=512,
                            root_gb=1, ephemeral_gb=0, swap=0,
                            extra_specs={})
    instance = objects.Instance(uuid=uuid, hostname='web-1', key_data=None,
                                user_data=None, flavor=flavor)
    image = objects.ImageMeta.from_dict({
        'id': 'c0ffee00-0000-4000-8000-000000000001', 'disk_format': 'raw',
        'container_format': 'bare', 'properties': {}})
    return builder.build_container(instance, flavor, image,
                                   builder.HostPolicy(host=host))['config']


def _record(name, config, project='default', **fields):
    record = {'name': name, 'type': 'container', 'status': 'Running',
              'project': project, 'architecture': 'x86_64',
              'config': config, 'devices': {}, 'profiles': ['default']}
    record.update(fields)
    return record


class OwnershipTest(testtools.TestCase):

    def setUp(self):
        super(OwnershipTest, self).setUp()
        objects.register_all()

    def test_a_container_the_builder_made_is_ours(self):
        record = _record('nova-' + UUID, _built_config())
        self.assertTrue(identity.is_ours(record, HOST, 'default'))
        self.assertEqual(UUID, identity.instance_uuid(record))

    def test_another_hosts_container_is_foreign(self):
        record = _record('nova-' + UUID, _built_config(host='cmp2'))
        self.assertFalse(identity.is_ours(record, HOST, 'default'))

    def test_a_container_in_another_project_is_foreign(self):
        record = _record('nova-' + UUID, _built_config(), project='lab')
        self.assertFalse(identity.is_ours(record, HOST, 'default'))
        # without a configured project, any project will do
        self.assertTrue(identity.is_ours(record, HOST))

    def test_a_record_without_project_field_is_in_the_listed_project(self):
        record = _record('nova-' + UUID, _built_config())
        del record['project']
        self.assertTrue(identity.is_ours(record, HOST, 'lab'))

    def test_host_key_alone_is_not_enough(self):
        # a container made by hand that copies our host key, or one whose
        # uuid key was emptied, is not an instance of ours
        config = _built_config()
        config[identity.KEY_INSTANCE_UUID] = ''
        self.assertFalse(identity.is_ours(_record('x', config), HOST))
        config.pop(identity.KEY_INSTANCE_UUID)
        self.assertFalse(identity.is_ours(_record('x', config), HOST))

    def test_records_without_config_are_foreign_and_uuidless(self):
        for record in ({'name': 'vm1'}, {'name': 'vm1', 'config': None},
                       _record('c1', {'image.os': 'debian'})):
            self.assertFalse(identity.is_ours(record, HOST))
            self.assertFalse(identity.is_rescue(record))
            self.assertIsNone(identity.instance_uuid(record))

    def test_a_resize_backup_is_not_listed_as_an_instance(self):
        # the kept original carries KEY_BACKUP_OF instead of KEY_HOST
        config = _built_config()
        config[identity.KEY_BACKUP_OF] = config.pop(identity.KEY_HOST)
        backup = _record('nova-resize-' + UUID, config)
        self.assertFalse(identity.is_ours(backup, HOST))
        self.assertEqual([], identity.instances([backup], HOST))


class InstancesTest(testtools.TestCase):

    def setUp(self):
        super(InstancesTest, self).setUp()
        objects.register_all()
        rescue_config = _built_config()
        rescue_config[identity.KEY_RESCUE_OF] = 'nova-' + UUID
        self.ours = _record('nova-' + UUID, _built_config())
        self.rescue = _record('nova-rescue-' + UUID, rescue_config)
        self.other_host = _record('nova-' + UUID2,
                                  _built_config(UUID2, host='cmp2'))
        self.other_project = _record('nova-' + UUID2,
                                     _built_config(UUID2), project='lab')
        self.by_hand = _record('mine', {'limits.cpu': '2'})
        self.records = [self.by_hand, self.ours, self.rescue,
                        self.other_host, self.other_project]

    def test_rescue_containers_are_ours_but_not_listed(self):
        self.assertTrue(identity.is_ours(self.rescue, HOST))
        self.assertTrue(identity.is_rescue(self.rescue))
        self.assertFalse(identity.is_rescue(self.ours))
        self.assertEqual([self.ours],
                         identity.instances(self.records, HOST, 'default'))

    def test_owner_lists_only_its_instances(self):
        owner = identity.Owner(HOST)
        self.assertEqual([self.ours], owner.instances(self.records))
        self.assertEqual([UUID], owner.instance_uuids(self.records))
        self.assertTrue(owner.is_ours(self.ours))
        self.assertFalse(owner.is_ours(self.other_project))
        self.assertEqual([], owner.instance_uuids([]))


class OwnerNamesTest(testtools.TestCase):

    def test_names_follow_the_configured_prefix(self):
        conf = cfg.ConfigOpts()
        lxd_conf.register_opts(conf)
        conf([])
        fixture = self.useFixture(config_fixture.Config(conf))
        fixture.config(group='lxd', project='gpu-lab',
                       container_name_prefix='hpc-')
        owner = identity.Owner.from_conf(conf, HOST)
        self.assertEqual(identity.Owner(HOST, 'gpu-lab', 'hpc-'), owner)
        self.assertEqual('hpc-' + UUID, owner.container_name(UUID))
        self.assertEqual('hpc-rescue-' + UUID, owner.rescue_name(UUID))
        self.assertEqual('hpc-resize-' + UUID, owner.backup_name(UUID))

    def test_the_three_names_of_an_instance_differ(self):
        owner = identity.Owner(HOST)
        names = {owner.container_name(UUID), owner.rescue_name(UUID),
                 owner.backup_name(UUID)}
        self.assertEqual(3, len(names))
        self.assertEqual(identity.container_name('nova-', UUID),
                         owner.container_name(UUID))


class RecordedUnitsTest(testtools.TestCase):

    def test_units_of_the_binding_record(self):
        units = [{'name': 'nova-gpu0', 'kind': 'pgpu',
                  'resource_class': 'PGPU', 'provider': 'rp-1',
                  'pci': '0000:85:00.0', 'unit': 'pci:0000:85:00.0'},
                 {'name': 'nova-ib0', 'kind': 'ib_vf',
                  'resource_class': 'CUSTOM_INFINIBAND_VF',
                  'provider': 'rp-2', 'pci': '0000:3b:00.2',
                  'unit': 'netdev:ib0v2'}]
        config = {identity.KEY_DEVICES: json.dumps(units)}
        self.assertEqual(units, identity.recorded_units(config))

    def test_entries_without_a_unit_are_left_out(self):
        config = {identity.KEY_DEVICES: json.dumps(
            [{'name': 'nova-gpu0'}, 'nova-gpu1', None,
             {'name': 'nova-gpu2', 'unit': 'pci:0000:07:00.0'}])}
        self.assertEqual([{'name': 'nova-gpu2', 'unit': 'pci:0000:07:00.0'}],
                         identity.recorded_units(config))

    def test_no_record_or_no_config(self):
        self.assertEqual([], identity.recorded_units(None))
        self.assertEqual([], identity.recorded_units({}))
        self.assertEqual([], identity.recorded_units(
            {identity.KEY_DEVICES: ''}))

    def test_a_damaged_record_reads_as_no_units(self):
        # someone edited the key by hand (`lxc config set`): the ledger
        # must still start, so no value may raise
        for raw in ('[{"unit": "pci:', 'not json', '{"unit": "x"}',
                    'null', '5', '"pci:0000:07:00.0"'):
            self.assertEqual(
                [], identity.recorded_units({identity.KEY_DEVICES: raw}),
                raw)
