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

"""tools/gpu_acceptance.py: it proves it, or says it did not (issue 35).

Only the report and the exit status: the checks themselves need a GPU
host. A SKIP is "not proven", so it fails the run unless skips are
allowed; a FAIL always does; the last line is ``proven N of M``.
"""

import io

import fixtures
import testtools

from tools import gpu_acceptance


def _report(passed=0, failed=0, skipped=0, allow_skips=False):
    out = io.StringIO()
    report = gpu_acceptance.Report(allow_skips=allow_skips, out=out)
    for number in range(passed):
        report.check(True, 'passed %d' % number)
    for number in range(failed):
        report.check(False, 'failed %d' % number, 'why %d' % number)
    for number in range(skipped):
        report.skip('skipped %d' % number, 'why %d' % number)
    return report, out


def _finish(report, out):
    """(exit status, output lines) of a finished report."""
    status = report.finish()
    return status, out.getvalue().splitlines()


class ReportTest(testtools.TestCase):

    def test_all_passed_is_accepted(self):
        status, lines = _finish(*_report(passed=3))
        self.assertEqual(0, status)
        self.assertEqual('proven 3 of 3', lines[-1])

    def test_a_fact_is_printed_and_never_counted(self):
        report, out = _report(passed=1)
        report.fact('mps_pipe_readonly=works (a client holding 512 MiB)')
        status, lines = _finish(report, out)
        self.assertEqual(0, status)
        self.assertIn('FACT  mps_pipe_readonly=works (a client holding 512 '
                      'MiB)', lines)
        self.assertEqual('proven 1 of 1', lines[-1])

    def test_a_skip_is_not_proven(self):
        status, lines = _finish(*_report(passed=2, skipped=1))
        self.assertNotEqual(0, status)
        self.assertEqual(gpu_acceptance.Report.NOT_PROVEN, status)
        self.assertEqual('proven 2 of 3', lines[-1])
        self.assertIn('NOT accepted', lines[-2])

    def test_skips_allowed_pass_without_failures(self):
        status, lines = _finish(*_report(passed=2, skipped=1,
                                         allow_skips=True))
        self.assertEqual(0, status)
        # allowed, yet still not counted as proven
        self.assertEqual('proven 2 of 3', lines[-1])

    def test_a_failure_fails_even_with_skips_allowed(self):
        for allow_skips in (False, True):
            status, lines = _finish(*_report(passed=2, failed=1, skipped=1,
                                             allow_skips=allow_skips))
            self.assertEqual(gpu_acceptance.Report.FAILED, status,
                             allow_skips)
            self.assertEqual('proven 2 of 4', lines[-1])

    def test_nothing_run_is_not_proven(self):
        status, lines = _finish(*_report(allow_skips=True))
        self.assertNotEqual(0, status)
        self.assertEqual('proven 0 of 0', lines[-1])

    def test_each_check_prints_its_word_and_reason(self):
        report, out = _report(passed=1, failed=1, skipped=1)
        self.assertEqual(['PASS  passed 0', 'FAIL  failed 0: why 0',
                          'SKIP  skipped 0: why 0'],
                         out.getvalue().splitlines())

    def test_last_line_is_exactly_proven_n_of_m(self):
        status, lines = _finish(*_report(passed=5, failed=2, skipped=3))
        self.assertEqual('proven 5 of 10', lines[-1])
        self.assertRegex(lines[-1], r'\Aproven \d+ of \d+\Z')
        # nothing after it, not even a blank line
        self.assertFalse(lines[-1].endswith(' '))


class MainTest(testtools.TestCase):
    """main(): --allow-skips reaches the report; an error is a FAIL."""

    def setUp(self):
        super().setUp()
        self.out = io.StringIO()
        self.useFixture(fixtures.MonkeyPatch('sys.stdout', self.out))
        self.useFixture(fixtures.MonkeyPatch('sys.stderr', io.StringIO()))

    def _main(self, argv, run):
        self.useFixture(fixtures.MonkeyPatch(
            'tools.gpu_acceptance.run', run))
        return gpu_acceptance.main(argv), self.out.getvalue().splitlines()

    @staticmethod
    def _one_pass_one_skip(args, report):
        report.check(True, 'proven here')
        report.skip('not here', 'no MIG')

    def test_skips_fail_the_run_unless_allowed(self):
        status, lines = self._main([], self._one_pass_one_skip)
        self.assertEqual(gpu_acceptance.Report.NOT_PROVEN, status)
        self.assertEqual('proven 1 of 2', lines[-1])

    def test_allow_skips_option(self):
        status, lines = self._main(['--allow-skips'],
                                   self._one_pass_one_skip)
        self.assertEqual(0, status)
        self.assertEqual('proven 1 of 2', lines[-1])

    def test_an_error_is_a_failure_and_still_ends_with_the_count(self):
        def run(args, report):
            report.check(True, 'proven before the error')
            raise RuntimeError('the daemon went away')

        status, lines = self._main(['--allow-skips'], run)
        self.assertEqual(gpu_acceptance.Report.FAILED, status)
        self.assertIn('the daemon went away', self.out.getvalue())
        self.assertEqual('proven 1 of 2', lines[-1])
