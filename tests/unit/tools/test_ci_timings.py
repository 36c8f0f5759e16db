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

"""The gate's clock (tools/ci_timings.py) and its budget (.ci/budgets).

The guard itself: every stage tools/run-tests.sh times, and every tox
environment of its phases, has a budget line, and the gate's stages in
series add up to at most 45 minutes.
"""

import io
import json
import os
import tempfile

import testtools

from tools import ci_timings

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
SCRIPT = os.path.join(REPO, 'tools', 'run-tests.sh')
BUDGETS = os.path.join(REPO, '.ci', 'budgets')


def _read(path):
    with open(path) as handle:
        return handle.read()


class GateBudgetTest(testtools.TestCase):
    """The real script against the real budget file."""

    def setUp(self):
        super().setUp()
        self.stages = ci_timings.script_stages(_read(SCRIPT))
        self.budgets = ci_timings.parse_budgets(_read(BUDGETS))

    def test_every_timed_stage_has_its_budget(self):
        # the parse found the script's stages and its phases' environments
        for name in ('apt', 'fast', 'suites', 'sandbox-e2e', 'bench-smoke'):
            self.assertIsNone(self.stages[name], name)
        self.assertEqual('fast', self.stages['pep8'])
        self.assertEqual('suites', self.stages['functional'])
        self.assertEqual('full-suites', self.stages['functional-incus-all'])
        self.assertEqual(
            [], ci_timings.budget_problems(self.stages, self.budgets))

    def test_critical_path_fits_the_gate(self):
        critical = [b for b in self.budgets.values() if b.critical]
        # only the script's own stages are on it, and all that the gate
        # runs (not --full's nor -e's)
        self.assertEqual(
            sorted(b.name for b in critical),
            sorted(n for n, inside in self.stages.items()
                   if inside is None and
                   self.budgets[n].where != ci_timings.OFF_GATE))
        self.assertLessEqual(ci_timings.critical_path_seconds(self.budgets),
                             45 * 60)

    def test_a_phase_fits_its_parts_two_at_a_time(self):
        # a phase's budget holds its environments' at two at a time
        for phase in ('fast', 'suites'):
            parts = sum(b.seconds for b in self.budgets.values()
                        if b.where == phase)
            self.assertGreaterEqual(self.budgets[phase].seconds * 2, parts,
                                    phase)


class BudgetProblemsTest(testtools.TestCase):
    """The checks the guard rests on, on small scripts."""

    BUDGET = ('apt 60 critical\nfast 300 critical\npep8 100 fast\n'
              'py3 200 fast\nfull-suites 900 off-gate\n')
    SCRIPT = ('fast_envs=pep8,py3\n'
              'stage apt debian_packages\n'
              'stage fast tox_phase "$fast_envs"\n'
              'if x; then\n'
              '    stage full-suites tox_phase "$full_envs"\n'
              'fi\n')

    def test_complete(self):
        self.assertEqual([], ci_timings.budget_problems(
            ci_timings.script_stages(self.SCRIPT),
            ci_timings.parse_budgets(self.BUDGET)))

    def test_a_stage_without_a_budget(self):
        script = self.SCRIPT + '    stage sandbox-e2e sandbox_e2e\n'
        self.assertEqual(['sandbox-e2e has no budget line'],
                         ci_timings.budget_problems(
                             ci_timings.script_stages(script),
                             ci_timings.parse_budgets(self.BUDGET)))

    def test_an_environment_without_a_budget(self):
        # also one only a variant of the list names (SKIP_INCUS=1's)
        script = self.SCRIPT + '    fast_envs=pep8,py3,docs\n'
        self.assertEqual(['docs has no budget line'],
                         ci_timings.budget_problems(
                             ci_timings.script_stages(script),
                             ci_timings.parse_budgets(self.BUDGET)))

    def test_a_budget_for_nothing_and_a_wrong_parent(self):
        budget = self.BUDGET.replace('py3 200 fast', 'py3 200 critical')
        budget += 'benches 600 off-gate\n'
        self.assertEqual(
            ['py3 runs inside fast, its budget says critical',
             'benches has a budget but the script never runs it'],
            ci_timings.budget_problems(ci_timings.script_stages(self.SCRIPT),
                                       ci_timings.parse_budgets(budget)))

    def test_malformed_budget_files(self):
        for text in ('apt 60\n', 'apt sixty critical\n',
                     'apt 60 critical\napt 70 critical\n',
                     'pep8 100 fast\n',                    # no such parent
                     'fast 300 critical\npep8 100 fast\npy3 9 pep8\n'):
            self.assertRaises(ValueError, ci_timings.parse_budgets, text)


class ReportTest(testtools.TestCase):

    BUDGETS = ci_timings.parse_budgets(
        'apt 100 critical\nsuites 1000 critical\nfunctional 800 suites\n')

    def _report(self, lines, wall, ci=False, full=False):
        rows = ci_timings.read_run(''.join(lines), 'r1')
        out = io.StringIO()
        status = ci_timings.report(rows, self.BUDGETS, wall, ci=ci,
                                   full=full, out=out)
        return status, out.getvalue()

    def test_table_and_summary(self):
        lines = [ci_timings.format_line('r1', 'apt', 50.04, 'ok',
                                        ['installed 3 packages']),
                 ci_timings.format_line('r0', 'apt', 999, 'ok'),
                 ci_timings.format_line('r1', 'functional', 700, 'ok',
                                        ['setup 9s'], inside='suites'),
                 ci_timings.format_line('r1', 'suites', 900, 'ok')]
        status, text = self._report(lines, 960)
        self.assertEqual(0, status)
        self.assertIn('installed 3 packages', text)
        self.assertNotIn('999', text)           # another run's line
        self.assertIn('  functional', text)     # a part, indented
        self.assertNotIn('WARNING', text)
        self.assertIn('CI-TIMINGS wall=960s (16:00) target=2700s stages=3 '
                      'over_budget=0 failed=0\n', text)

    def test_over_budget_unbudgeted_and_failed(self):
        lines = [ci_timings.format_line('r1', 'apt', 126, 'ok'),
                 ci_timings.format_line('r1', 'surprise', 1, 'ok'),
                 ci_timings.format_line('r1', 'suites', 10, 'failed(1)')]
        status, text = self._report(lines, 137)
        self.assertEqual(0, status)
        self.assertIn('WARNING: stage apt took 126s, over its budget of '
                      '100s', text)
        self.assertIn('WARNING: stage surprise has no budget line', text)
        self.assertIn('over_budget=1 failed=1 failed_stages=suites', text)

    def test_within_a_quarter_is_no_warning(self):
        status, text = self._report(
            [ci_timings.format_line('r1', 'apt', 125, 'ok')], 125)
        self.assertNotIn('WARNING', text)

    def test_the_gate_target_and_the_ci_limit(self):
        line = [ci_timings.format_line('r1', 'apt', 1, 'ok')]
        status, text = self._report(line, 46 * 60)
        self.assertEqual(0, status)
        self.assertIn("over the gate's 45:00", text)
        self.assertEqual(0, self._report(line, 71 * 60)[0])
        status, text = self._report(line, 71 * 60, ci=True)
        self.assertEqual(1, status)
        self.assertIn('ERROR: the run took 71:00', text)
        self.assertEqual(0, self._report(line, 71 * 60, ci=True,
                                         full=True)[0])


class ToxJournalTest(testtools.TestCase):

    def test_rows_from_a_result_json(self):
        # the shape tox 4 writes with --result-json
        journal = {'testenvs': {
            '.pkg': {'setup': [{'elapsed': 3.0}]},
            'py3': {'setup': [{'elapsed': 5.5}],
                    'test': [{'elapsed': 40.0}, {'elapsed': 0.5}],
                    'result': {'success': True, 'exit_code': 0,
                               'duration': 47.0}},
            'pep8': {'test': [{'elapsed': 9.0}],
                     'result': {'success': False, 'exit_code': 1,
                                'duration': 12.0}}}}
        self.assertEqual(
            [('pep8', 12.0, 'failed(1)', 'setup 3s; commands 9s; warm'),
             ('py3', 47.0, 'ok', 'setup 6s; commands 40s; warm')],
            ci_timings.tox_rows(journal, ['warm']))

    def test_main_appends_and_reports(self):
        with tempfile.TemporaryDirectory() as tmp:
            timings = os.path.join(tmp, 'timings.tsv')
            journal = os.path.join(tmp, 'tox.json')
            budgets = os.path.join(tmp, 'budgets')
            with open(journal, 'w') as handle:
                json.dump({'testenvs': {'py3': {'result': {
                    'success': True, 'duration': 30}}}}, handle)
            with open(budgets, 'w') as handle:
                handle.write('fast 60 critical\npy3 60 fast\n')
            self.assertEqual(0, ci_timings.main(
                ['x', 'record', timings, 'r', 'fast', '31.5', 'ok',
                 'new venvs: py3']))
            self.assertEqual(0, ci_timings.main(
                ['x', 'tox', timings, 'r', 'fast', journal]))
            out = io.StringIO()
            self.assertEqual(1, ci_timings.main(
                ['x', 'report', timings, 'r', budgets, '4300'],
                environ={'CI': 'true'}, out=out))
            self.assertIn('new venvs: py3', out.getvalue())
            self.assertIn('  py3', out.getvalue())
