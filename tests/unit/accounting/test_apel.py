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

"""The APEL counts and busy time, from a recorded host's usage export.

The export is written by ``nova-lxd-accel usage --export`` (through the
command's own entry point) from the recorded state of
``tests/unit/cmd/samples/doctor/h100-mig-cdi``: instance ``IDLE`` held a
3g.40gb slice for 26 h (probe window 1784000000 to 1784093600) and its
GPU was busy 2 h of them. The real cASO on these numbers is
``tests/federation``.
"""

import fractions
import json
import os

import fixtures
import testtools

from nova_lxd_accel.accounting import apel
from tests.fixtures import host_cli

IDLE = host_cli.IDLE
FIRST, LAST = 1784000000.0, 1784093600.0
BUSY = 7200


class TestUsageExport(host_cli.RecordedHost):

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.path = os.path.join(self.dir, 'host-a.json')
        state = os.path.join(self.host('h100-mig-cdi'), 'state')
        rc, out, err = host_cli.run('usage', '--state-dir', state,
                                    '--export', self.path)
        self.assertEqual((0, '', ''), (rc, out, err))

    def test_export_holds_every_unit(self):
        with open(self.path) as f:
            data = json.load(f)
        self.assertEqual(apel.EXPORT_FORMAT, data['format'])
        units, problems = apel.load_exports([os.path.join(self.dir,
                                                          '*.json')])
        self.assertEqual([], problems)
        [unit] = units[IDLE]
        self.assertEqual(('mig:00000000-0000-0000-0000-000000000000',
                          BUSY, FIRST, LAST, data['host']),
                         (unit['unit'], unit['busy_s'], unit['first'],
                          unit['last'], unit['host']))

    def test_export_says_how_much_of_the_window_is_unknown(self):
        state = {'usage': {IDLE: {'project': 'p', 'units': {'pci:a': {
            'allocated_s': 36060.0, 'busy_s': 60.0, 'unknown_s': 36000.0,
            'first': FIRST, 'last': FIRST + 36060}}}}}
        unit = apel.export(state, 'cmp1', LAST)['usage'][IDLE]['units'][
            'pci:a']
        self.assertEqual((60.0, 36000.0), (unit['busy_s'],
                                           unit['unknown_s']))

    def test_record_of_the_whole_window_gets_the_busy_seconds(self):
        units, _ = apel.load_exports([self.path])
        available = int(LAST - FIRST)
        self.assertEqual(BUSY, apel.active_duration(
            units[IDLE], FIRST, LAST, 1, available))

    def test_record_of_part_of_the_window_gets_its_part(self):
        # a month ending half way: each record gets half the busy time
        units, _ = apel.load_exports([self.path])
        middle = (FIRST + LAST) / 2
        self.assertEqual(
            (BUSY // 2, BUSY // 2),
            (apel.active_duration(units[IDLE], FIRST - 10, middle, 1,
                                  int(middle - FIRST + 10)),
             apel.active_duration(units[IDLE], middle, LAST + 10, 1,
                                  int(LAST + 10 - middle))))

    def test_never_more_than_available(self):
        units, _ = apel.load_exports([self.path])
        self.assertEqual(100, apel.active_duration(
            units[IDLE], FIRST, LAST, 1, 100))

    def test_unmeasured_period_keeps_casos_default(self):
        units, _ = apel.load_exports([self.path])
        self.assertIsNone(apel.active_duration(
            units[IDLE], LAST + 1, LAST + 3600, 1, 3599))
        self.assertIsNone(apel.active_duration(None, FIRST, LAST, 1, 10))

    def test_per_unit_held(self):
        # a flavor of two units: the record's duration is per unit
        units, _ = apel.load_exports([self.path])
        self.assertEqual(BUSY // 2, apel.active_duration(
            units[IDLE], FIRST, LAST, 2, int(LAST - FIRST)))

    def test_later_export_of_a_host_wins_other_hosts_add_up(self):
        with open(self.path) as f:
            data = json.load(f)
        unit = data['usage'][IDLE]['units'][
            'mig:00000000-0000-0000-0000-000000000000']
        older = dict(data, at=data['at'] - 60)
        older['usage'] = {IDLE: {'units': {
            'mig:00000000-0000-0000-0000-000000000000': dict(
                unit, busy_s=1.0)}}}
        other = dict(data, host='host-b')
        for name, content in (('host-a-old.json', older),
                              ('host-b.json', other)):
            with open(os.path.join(self.dir, name), 'w') as f:
                json.dump(content, f)
        units, _ = apel.load_exports([os.path.join(self.dir, '*.json')])
        self.assertEqual(sorted([(data['host'], BUSY), ('host-b', BUSY)]),
                         sorted((u['host'], u['busy_s'])
                                for u in units[IDLE]))

    def test_unusable_files_are_named(self):
        bad = os.path.join(self.dir, 'bad.json')
        with open(bad, 'w') as f:
            f.write('{"format": "something else"}')
        units, problems = apel.load_exports(
            [self.path, bad, os.path.join(self.dir, 'missing.json')])
        self.assertIn(IDLE, units)
        self.assertEqual(2, len(problems))
        self.assertIn('bad.json: not a %s file' % apel.EXPORT_FORMAT,
                      problems[0])
        self.assertIn('missing.json', problems[1])

    def test_unwritable_export_fails(self):
        state = os.path.join(self.host('h100-mig-cdi'), 'state')
        rc, _, err = host_cli.run('usage', '--state-dir', state, '--export',
                                  os.path.join(self.dir, 'no', 'such.json'))
        self.assertEqual(1, rc)
        self.assertIn('such.json', err)


class TestParseCount(testtools.TestCase):

    def test_fractions_and_decimals(self):
        self.assertEqual(fractions.Fraction(1, 7), apel.parse_count('1/7'))
        self.assertEqual(fractions.Fraction(1, 4), apel.parse_count('0.25'))
        self.assertEqual(2, apel.parse_count(' 2 '))
        self.assertIsNone(apel.parse_count(None))
        self.assertIsNone(apel.parse_count(''))

    def test_refused(self):
        for value in ('0', '-1/7', '1/0', 'seven', '1/7x'):
            self.assertRaises(ValueError, apel.parse_count, value)
