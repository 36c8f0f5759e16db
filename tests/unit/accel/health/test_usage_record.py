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

"""One interval of a usage record and the gaps (:mod:`.usage_record`).

Issue 46 item 10: nova-compute down for ten hours must not count them as
busy nor interpolate energy over them.
"""

import fixtures
from oslo_config import cfg
import testtools

from nova_lxd_accel.accel.health import energy
from nova_lxd_accel.accel.health import usage_record
from nova_lxd_accel.conf import accelerators
from tests.fixtures import gate_harness

TEN_HOURS = 10 * 3600.0


def conf(probe_interval=0, resources_interval=None):
    opts = cfg.ConfigOpts()
    accelerators.register_opts(opts)
    if resources_interval is not None:
        opts.register_opt(cfg.IntOpt('update_resources_interval',
                                     default=resources_interval))
    opts([])
    opts.set_override('probe_interval', probe_interval,
                      group='lxd_accelerators')
    return opts


class TestGapBound(testtools.TestCase):

    def test_five_periods_of_nova_s_default_spacing(self):
        self.assertEqual(300, usage_record.max_gap(conf()))

    def test_the_longest_configured_period_counts(self):
        self.assertEqual(3000, usage_record.max_gap(conf(probe_interval=600)))
        self.assertEqual(6000, usage_record.max_gap(
            conf(probe_interval=600, resources_interval=1200)))


class TestAccount(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.conf = conf()
        self.log = self.useFixture(fixtures.FakeLogger(
            name='nova_lxd_accel.accel.health'))
        self.record = {'pci': '0000:00:09.0', 'allocated_s': 0.0,
                       'busy_s': 0.0, 'first': 0.0, 'last': 0.0}
        usage_record.account(self.record, 0.0, True, 100.0, None, 0.0,
                             self.conf)

    def test_a_period_is_busy_and_its_energy_interpolated(self):
        gap = usage_record.account(self.record, 60.0, True, 300.0, 0.0,
                                   60.0, self.conf)
        self.assertFalse(gap)
        self.assertEqual((60.0, 60.0, 60.0), (
            self.record['allocated_s'], self.record['busy_s'],
            self.record['last']))
        self.assertEqual((200.0 * 60, 60.0), (
            self.record[energy.ENERGY_J], self.record[energy.ENERGY_S]))
        self.assertNotIn(usage_record.UNKNOWN_S, self.record)

    def test_ten_hours_down_are_unknown_not_busy_and_no_energy(self):
        gap = usage_record.account(self.record, TEN_HOURS, True, 300.0,
                                   0.0, TEN_HOURS, self.conf)
        self.assertTrue(gap)
        # the unit stayed bound from one end to the other
        self.assertEqual(TEN_HOURS, self.record['allocated_s'])
        self.assertEqual(0.0, self.record['busy_s'])
        self.assertEqual(TEN_HOURS, self.record[usage_record.UNKNOWN_S])
        self.assertEqual((0.0, 0.0), (self.record[energy.ENERGY_J],
                                      self.record[energy.ENERGY_S]))
        self.assertIn('36000 s since its last accounting', self.log.output)
        # the reading at the gap's end starts the next interval
        usage_record.account(self.record, 60.0, True, 300.0, TEN_HOURS,
                             TEN_HOURS + 60, self.conf)
        self.assertEqual((300.0 * 60, 60.0, 60.0), (
            self.record[energy.ENERGY_J], self.record[energy.ENERGY_S],
            self.record['busy_s']))
        self.assertEqual(TEN_HOURS, self.record[usage_record.UNKNOWN_S])


class TestThroughTheGate(gate_harness.GateTestCase):
    """The gate's refresh across nova-compute's downtime."""

    def setUp(self):
        super().setUp()
        self.containers = [gate_harness.container()]

    def test_ten_hours_down_are_not_busy(self):
        self.host('nvsmi-h100-80gb-load-query-gpu.csv',
                  'nvsmi-h100-80gb-load-compute-apps.csv')
        self.gate.refresh()
        self.now += 60
        self.gate.refresh()
        self.now += TEN_HOURS               # nova-compute was down
        self.gate.refresh()
        record = self.gate.store.load()['usage'][gate_harness.INSTANCE][
            'units']['pci:' + gate_harness.H100]
        self.assertEqual((60.0 + TEN_HOURS, 60.0, TEN_HOURS, 60.0), (
            record['allocated_s'], record['busy_s'],
            record[usage_record.UNKNOWN_S], record[energy.ENERGY_S]))
        self.assertAlmostEqual(631.95 * 60, record[energy.ENERGY_J])
