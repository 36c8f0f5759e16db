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

"""``nova-lxd-accel``'s entry point: its sub-commands and exit statuses.

Each sub-command's own behaviour is tested in its module's tests; here the
parser that joins them, what the operator sees for a missing or unknown
command, and that the status a command returns is the process's.
"""

import contextlib
import io
import os
import subprocess
import sys

import fixtures
import testtools

from nova_lxd_accel.cmd import doctor
from nova_lxd_accel.cmd import main
from nova_lxd_accel.cmd import usage

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
COMMANDS = ('inventory', 'gpu', 'flavors', 'usage', 'idle',
            'metrics', 'doctor')


def _run(*argv):
    """(exit status, stdout, stderr) of main(argv); argparse's exits too."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main.main(list(argv))
        except SystemExit as exc:
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()


class TestParser(testtools.TestCase):

    def test_help_lists_every_command_with_what_it_does(self):
        rc, out, _ = _run('--help')
        self.assertEqual(0, rc)
        for command in COMMANDS:
            self.assertIn('    %s' % command, out)
        self.assertIn('check this compute host and say how to fix it', out)
        self.assertIn('propose or create GPU flavors', out)

    def test_no_command_is_refused(self):
        rc, out, err = _run()
        self.assertEqual(2, rc)
        self.assertEqual('', out)
        self.assertIn('nova-lxd-accel: error: the following arguments are '
                      'required: COMMAND', err)

    def test_unknown_command_is_refused_with_the_choices(self):
        rc, _, err = _run('frobnicate')
        self.assertEqual(2, rc)
        self.assertIn("invalid choice: 'frobnicate'", err)
        for command in COMMANDS:
            self.assertIn("'%s'" % command, err)

    def test_each_command_runs_its_own_function(self):
        parser = main.build_parser()
        self.assertIs(doctor._run, parser.parse_args(['doctor']).func)
        self.assertIs(usage._usage, parser.parse_args(['usage']).func)
        self.assertIs(usage._idle, parser.parse_args(['idle']).func)
        self.assertIs(usage._metrics, parser.parse_args(['metrics']).func)

    def test_options_belong_to_their_command(self):
        # --at is idle's and doctor's, not usage's
        self.assertEqual(1784100000.0, main.build_parser().parse_args(
            ['idle', '--at', '1784100000']).at)
        rc, _, err = _run('usage', '--at', '1784100000')
        self.assertEqual(2, rc)
        self.assertIn('unrecognized arguments: --at', err)


class TestExitStatus(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path

    def test_status_of_the_command_is_returned(self):
        state = os.path.join(self.tmp, 'state')
        rc, out, err = _run('usage', '--config-file', '/dev/null',
                            '--state-dir', state)
        self.assertEqual((0, ''), (rc, err))
        self.assertIn('No GPU usage recorded', out)
        missing = os.path.join(self.tmp, 'missing.conf')
        rc, out, err = _run('usage', '--config-file', missing)
        self.assertEqual((2, ''), (rc, out))
        self.assertIn('nova-lxd-accel usage: error: ', err)
        self.assertIn(missing, err)

    def test_module_run_as_a_program_exits_with_the_status(self):
        missing = os.path.join(self.tmp, 'missing.conf')
        proc = subprocess.run(
            [sys.executable, '-m', 'nova_lxd_accel.cmd.main', 'idle',
             '--config-file', missing], cwd=REPO, capture_output=True,
            text=True, check=False, timeout=60)
        self.assertEqual(2, proc.returncode, proc.stderr)
        self.assertEqual('', proc.stdout)
        self.assertIn('nova-lxd-accel idle: error: ', proc.stderr)
