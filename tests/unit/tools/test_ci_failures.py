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

"""What the gate prints last when a suite failed (tools/ci_failures.py)."""

import io
import unittest

import subunit
import testtools

from tools import ci_failures


def _stream_of(*test_names):
    """A subunit v2 stream of these tests, as stestr gives it."""

    # Defined here, where test discovery does not find it.
    class _Suite(unittest.TestCase):

        def test_passes(self):
            pass

        def test_fails(self):
            self.assertEqual('BUILD', 'ACTIVE', 'server stuck in BUILD')

    out = io.BytesIO()
    result = testtools.ExtendedToStreamDecorator(
        subunit.StreamResultToBytes(out))
    result.startTestRun()
    unittest.TestSuite(_Suite(name) for name in test_names).run(result)
    result.stopTestRun()
    out.seek(0)
    return out


class FailingTestsTest(testtools.TestCase):

    def test_only_failed_tests_with_their_traceback(self):
        found = ci_failures.failing_tests(
            _stream_of('test_passes', 'test_fails'))
        self.assertEqual(1, len(found))
        test_id, traceback = found[0]
        self.assertTrue(test_id.endswith('_Suite.test_fails'), test_id)
        self.assertIn('server stuck in BUILD', traceback)

    def test_main_prints_the_end_of_each_traceback(self):
        stdin = io.TextIOWrapper(_stream_of('test_fails', 'test_passes'))
        out = io.StringIO()
        self.patch(ci_failures.sys, 'stdin', stdin)
        self.patch(ci_failures.sys, 'stdout', out)
        ci_failures.main(['ci_failures.py', '2'])
        lines = out.getvalue().splitlines()
        self.assertEqual(3, len(lines), lines)
        self.assertTrue(lines[0].startswith('FAILED '), lines)
        self.assertIn('server stuck in BUILD', lines[-1])
