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


"""The scheduling bench's layouts, queries and table (no Placement run)."""

import importlib.util
import os

import testtools

_PATH = os.path.join(os.path.dirname(__file__), '..', '..', '..',
                     'benchmarks', 'bench_scheduling.py')
_SPEC = importlib.util.spec_from_file_location('bench_scheduling', _PATH)
scheduling = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(scheduling)

ROOT = 'DISK_GB:20,MEMORY_MB:8192,VCPU:4'


class QueriesTest(testtools.TestCase):

    def _forms(self, layout):
        return {(q.count, q.form): dict(q.params)
                for q in scheduling.queries_for(layout)}

    def test_per_device_k_gpus_are_k_isolated_groups(self):
        params = self._forms('gpu-per-device')[
            (4, 'resources1..4:PGPU=1 isolate')]
        self.assertEqual(ROOT, params['resources'])
        self.assertEqual(['PGPU:1'] * 4,
                         [params['resources%d' % n] for n in range(1, 5)])
        self.assertNotIn('resources5', params)
        self.assertEqual('isolate', params['group_policy'])
        self.assertEqual('1000', params['limit'])

    def test_one_gpu_needs_no_group_policy(self):
        params = self._forms('gpu-per-device')[
            (1, 'resources1..1:PGPU=1 isolate')]
        self.assertNotIn('group_policy', params)

    def test_pool_asks_k_in_the_unnumbered_group_and_in_one_group(self):
        forms = self._forms('gpu-pool')
        self.assertEqual({'resources': 'DISK_GB:20,MEMORY_MB:8192,PGPU:8,'
                                       'VCPU:4', 'limit': '1000'},
                         forms[(8, 'resources:PGPU=8')])
        self.assertEqual({'resources': ROOT, 'resources1': 'PGPU:8',
                          'limit': '1000'},
                         forms[(8, 'resources1:PGPU=8')])

    def test_mig_and_ib_ask_the_same_of_both_layouts(self):
        for per_device, pool in (('mig-per-device', 'mig-pool'),
                                 ('ib-per-device', 'ib-pool')):
            self.assertEqual(scheduling.queries_for(per_device),
                             scheduling.queries_for(pool))

    def test_per_device_eight_gpus_only_with_slow(self):
        eight = [q for q in scheduling.queries_for('gpu-per-device')
                 if q.count == 8][0]
        self.assertIn('--slow', scheduling.skipped('gpu-per-device', eight,
                                                   slow=False))
        self.assertIsNone(scheduling.skipped('gpu-per-device', eight,
                                             slow=True))
        for query in scheduling.queries_for('gpu-pool'):
            self.assertIsNone(scheduling.skipped('gpu-pool', query,
                                                 slow=False))


class LayoutsTest(testtools.TestCase):

    def test_a_host_has_the_same_units_in_both_layouts(self):
        for family in ('gpu', 'mig', 'ib'):
            totals = []
            for layout in ('%s-per-device' % family, '%s-pool' % family):
                children = scheduling.LAYOUTS[layout][1]('cn-000')
                units = {}
                for child in children:
                    self.assertTrue(child.name.startswith('cn-000_'))
                    for rc, total in child.totals.items():
                        units[rc] = units.get(rc, 0) + total
                totals.append(units)
            self.assertEqual(totals[0], totals[1], family)

    def test_names(self):
        self.assertEqual(
            'cn-000_gpu_0000_07_00_0',
            scheduling.LAYOUTS['gpu-per-device'][1]('cn-000')[0].name)
        self.assertEqual(
            ['cn-000_gpu_pool_nvidia_h100_80gb_hbm3'],
            [c.name for c in scheduling.LAYOUTS['gpu-pool'][1]('cn-000')])


class OfferedTest(testtools.TestCase):

    def test_hosts_are_the_candidates_roots(self):
        answer = {
            'allocation_requests': [
                {'allocations': {'root-a': {}, 'gpu-a1': {}}},
                {'allocations': {'root-a': {}, 'gpu-a2': {}}},
                {'allocations': {'root-b': {}, 'gpu-b1': {}}}],
            'provider_summaries': {
                rp: {'root_provider_uuid': 'root-' + rp.split('-')[1][0]}
                for rp in ('root-a', 'gpu-a1', 'gpu-a2', 'root-b',
                           'gpu-b1')}}
        self.assertEqual((3, 2), scheduling.offered(answer))


class TableTest(testtools.TestCase):

    def _measured(self, layout, form, times, timed_out=None):
        query = scheduling.Query('GPU', 4, form, [])
        return scheduling.Measured(layout, query, times, 1000 if times
                                   else None, 1, timed_out)

    def test_ratio_is_pool_over_per_device(self):
        text = scheduling.table([
            self._measured('gpu-per-device', 'old', [2.0, 1.0, 3.0]),
            self._measured('gpu-pool', 'new', [0.1, 0.2, 0.3])])
        self.assertIn('x0.100', text)

    def test_a_timed_out_query_shows_its_timeout(self):
        text = scheduling.table([
            self._measured('gpu-per-device', 'old', [], timed_out=120),
            self._measured('gpu-pool', 'new', [0.1])])
        self.assertIn('> 120', text)
        self.assertIn('n/a (per device not run)', text)


class ArgumentsTest(testtools.TestCase):

    def test_quick(self):
        args = scheduling.parse_args(['--quick'])
        self.assertEqual((2, 1, False), (args.hosts, args.repetitions,
                                         args.slow))
        self.assertEqual(list(scheduling.LAYOUTS), args.layouts)

    def test_unknown_layout(self):
        self.assertRaises(SystemExit, scheduling.parse_args,
                          ['--layouts', 'gpu-pool,nope'])
