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

"""Finding tools/sandbox.sh for ``nova-lxd-accel sandbox``."""

import io
import os
import tempfile
from unittest import mock

import testtools

from nova_lxd_accel.cmd import main
from nova_lxd_accel.cmd import sandbox


def _checkout(root):
    os.makedirs(os.path.join(root, 'tools'))
    with open(os.path.join(root, 'tools', 'sandbox.sh'), 'w') as handle:
        handle.write('exit 0\n')
    return os.path.join(root, 'tools', 'sandbox.sh')


class FindScriptTest(testtools.TestCase):

    def setUp(self):
        super(FindScriptTest, self).setUp()
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def test_source_argument_comes_first(self):
        script = _checkout(os.path.join(self.tmp.name, 'given'))
        other = _checkout(os.path.join(self.tmp.name, 'env'))
        self.assertEqual(script, sandbox.find_script(
            os.path.join(self.tmp.name, 'given'),
            environ={'NOVA_LXD_ACCEL_SOURCE': os.path.dirname(
                os.path.dirname(other))}))

    def test_environment_variable(self):
        script = _checkout(os.path.join(self.tmp.name, 'env'))
        found = sandbox.candidate_dirs(None, environ={
            'NOVA_LXD_ACCEL_SOURCE': os.path.join(self.tmp.name, 'env')})
        self.assertEqual(os.path.join(self.tmp.name, 'env'), found[0])
        self.assertEqual(script, sandbox.find_script(None, environ={
            'NOVA_LXD_ACCEL_SOURCE': os.path.join(self.tmp.name, 'env')}))

    def test_this_checkout_is_found(self):
        # Tests run from the repository: its tools/sandbox.sh is found
        # (through the package's own checkout or the current directory).
        repo = os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.dirname(os.path.abspath(__file__)))))
        self.assertEqual(
            os.path.realpath(os.path.join(repo, 'tools', 'sandbox.sh')),
            os.path.realpath(sandbox.find_script(None, environ={})))

    def test_not_found_exits_3_with_a_hint(self):
        empty = os.path.join(self.tmp.name, 'empty')
        os.makedirs(empty)
        stderr = io.StringIO()
        with mock.patch.object(sandbox, 'find_script', return_value=None), \
                mock.patch('sys.stderr', stderr):
            status = main.main(['sandbox', 'status', '--source', empty])
        self.assertEqual(sandbox.EXIT_NO_SCRIPT, status)
        self.assertIn('--source DIR', stderr.getvalue())
        self.assertIn(empty, stderr.getvalue())
