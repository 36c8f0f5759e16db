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

"""The project's cASO extractor on cASO's own records (needs cASO 5.2.2).

cASO's :class:`NovaExtractor` builds the monthly accelerator records of a
server from its flavor; the project's extractor replaces their ``Count``
(the flavor's ``accounting:accelerator_count``) and ``ActiveDuration``
(the busy seconds of ``nova-lxd-accel usage --export`` files). The
extractor is made as ``tests/federation`` makes it (without the Keystone,
Glance and Neutron clients of its ``__init__``), with novaclient's own
``Server`` objects and cASO's own ``CloudRecord``.

A server of a 1g.10gb MIG flavor of an H100 (1 of its 7 compute slices)
ran from 2026-06-20 to 2026-07-10: 11 days in June, 9 in July; the probe
saw its slice busy 2 days of the 20.
"""

import calendar
import datetime
import json
import os

from caso import record as caso_record
import fixtures
from novaclient.v2 import servers
from oslo_config import cfg
from oslo_config import fixture as config_fixture
import testtools

from nova_lxd_accel.accounting import apel
from nova_lxd_accel.accounting import caso_extractor

SERVER = '7c1d3e2a-5b4f-4e6d-9a8b-0c1d2e3f4a5b'
CREATED = datetime.datetime(2026, 6, 20)
TERMINATED = datetime.datetime(2026, 7, 10)
DAY = 86400
BUSY = 2 * DAY
MIG_SPECS = {'Accelerator:Type': 'GPU', 'Accelerator:Vendor': 'NVIDIA',
             'Accelerator:Model': 'H100 80GB HBM3 MIG 1g.10gb',
             'Accelerator:Number': '1',
             'accounting:accelerator_count': '1/7',
             'resources:CUSTOM_MIG_1G_10GB': '1'}


def _epoch(when):
    return calendar.timegm(when.utctimetuple())


class ExtractorTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.conf = self.useFixture(config_fixture.Config(cfg.CONF))
        self.tmp = self.useFixture(fixtures.TempDir()).path
        self.log = self.useFixture(fixtures.FakeLogger(
            name='nova_lxd_accel.accounting.caso_extractor'))

    def extractor(self, extra, usage=None):
        cls = caso_extractor.NovaExtractor
        extractor = cls.__new__(cls)
        extractor.flavors = {'f-mig': {'id': 'f-mig', 'extra': extra}}
        if usage is not None:
            extractor.gpu_usage = usage
        return extractor

    def export(self, busy=BUSY, name='compute-1.json'):
        """An export file as ``usage --export`` writes it."""
        state = {'usage': {SERVER: {'project': 'p', 'units': {
            'mig:00000000-0000-0000-0000-000000000000': {
                'pci': '0000:00:09.0', 'resource_class': 'CUSTOM_MIG_1G_10GB',
                'allocated_s': float(_epoch(TERMINATED) - _epoch(CREATED)),
                'busy_s': float(busy), 'first': float(_epoch(CREATED)),
                'last': float(_epoch(TERMINATED))}}}}}
        path = os.path.join(self.tmp, name)
        with open(path, 'w') as f:
            json.dump(apel.export(state, 'compute-1', 1784100000.0), f)
        return path

    def records(self, extractor):
        server = servers.Server(None, {'id': SERVER,
                                       'flavor': {'id': 'f-mig'}},
                                loaded=True)
        server_record = caso_record.CloudRecord(
            start_time=CREATED, end_time=TERMINATED, uuid=SERVER,
            name='vm', user_id='u', group_id='p', fqan='vo.example.org',
            status='completed', cpu_count=4, memory=16384, disk=20,
            site_name='SITE', compute_service='nova-lxd-accel')
        records = extractor._build_acc_records(
            server, server_record, datetime.datetime(2026, 6, 1),
            datetime.datetime(2026, 8, 1))
        return [records['%s-%d-2026' % (SERVER, month)] for month in (6, 7)]


class TestRecords(ExtractorTest):

    def test_count_is_the_part_of_the_gpu_and_active_the_busy_time(self):
        self.conf.config(group='nova_lxd_accel', usage_files=[self.export()])
        extractor = self.extractor(MIG_SPECS)
        extractor.gpu_usage = extractor._load_gpu_usage()
        june, july = self.records(extractor)
        for record in (june, july):
            self.assertIsInstance(record, caso_record.AcceleratorRecord)
            self.assertEqual(1 / 7, record.count)
            self.assertEqual('NVIDIA H100 80GB HBM3 MIG 1g.10gb',
                             record.model)
        self.assertEqual((11 * DAY, 9 * DAY),
                         (june.available_duration, july.available_duration))
        # the busy time in proportion: 11 and 9 of the 20 days
        self.assertEqual((BUSY * 11 // 20, BUSY * 9 // 20),
                         (june.active_duration, july.active_duration))

    def test_apel_message_carries_the_fraction(self):
        extractor = self.extractor(MIG_SPECS, usage={})
        june, _ = self.records(extractor)
        message = json.loads(june.ssm_message())
        self.assertEqual((1 / 7, 11 * DAY, 11 * DAY),
                         (message['Count'], message['AvailableDuration'],
                          message['ActiveDuration']))

    def test_unmeasured_server_keeps_casos_active_duration(self):
        june, july = self.records(self.extractor(MIG_SPECS, usage={}))
        self.assertEqual((11 * DAY, 9 * DAY),
                         (june.active_duration, july.active_duration))
        # nor is an export needed at all (gpu_usage unset)
        june, _ = self.records(self.extractor(MIG_SPECS))
        self.assertEqual(11 * DAY, june.active_duration)

    def test_two_units_per_instance_count_busy_time_per_unit(self):
        specs = dict(MIG_SPECS, **{'Accelerator:Number': '2',
                                   'accounting:accelerator_count': '2/7'})
        usage, _ = apel.load_exports([self.export()])
        june, _ = self.records(self.extractor(specs, usage=usage))
        self.assertEqual((2 / 7, BUSY * 11 // 20 // 2),
                         (june.count, june.active_duration))

    def test_bad_count_property_counts_accelerator_number(self):
        specs = dict(MIG_SPECS, **{'accounting:accelerator_count': '1/0'})
        june, _ = self.records(self.extractor(specs, usage={}))
        self.assertEqual(1, june.count)
        self.assertIn('Flavor f-mig: property accounting:accelerator_count: '
                      "'1/0' is not a number of GPUs; counting "
                      'Accelerator:Number instead', self.log.output)

    def test_flavor_without_count_property_counts_accelerator_number(self):
        specs = {k: v for k, v in MIG_SPECS.items()
                 if k != 'accounting:accelerator_count'}
        june, _ = self.records(self.extractor(specs, usage={}))
        self.assertEqual(1, june.count)
        self.assertEqual('', self.log.output)

    def test_count_key_is_configurable(self):
        self.conf.config(group='nova_lxd_accel', count_key='site:gpu_share')
        specs = dict(MIG_SPECS, **{'site:gpu_share': '0.25'})
        june, _ = self.records(self.extractor(specs, usage={}))
        self.assertEqual(0.25, june.count)

    def test_flavor_without_accelerator_has_no_record(self):
        extractor = self.extractor({'resources:VCPU': '4'}, usage={})
        server = servers.Server(None, {'id': SERVER,
                                       'flavor': {'id': 'f-mig'}},
                                loaded=True)
        self.assertEqual({}, extractor._build_acc_records(
            server, None, datetime.datetime(2026, 6, 1),
            datetime.datetime(2026, 8, 1)))


class TestLoadUsage(ExtractorTest):

    def test_unusable_files_are_logged_and_left_out(self):
        bad = os.path.join(self.tmp, 'bad.json')
        with open(bad, 'w') as f:
            f.write('{"format": "other"}')
        self.conf.config(group='nova_lxd_accel',
                         usage_files=[os.path.join(self.tmp, '*.json')])
        self.export()
        units = caso_extractor.NovaExtractor._load_gpu_usage()
        self.assertEqual([SERVER], list(units))
        self.assertEqual(BUSY, units[SERVER][0]['busy_s'])
        self.assertIn('GPU usage export not used: %s: not a %s file'
                      % (bad, apel.EXPORT_FORMAT), self.log.output)
