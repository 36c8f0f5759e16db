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

"""How the sandbox runs its services and counts their memory, no cloud.

- ``tools/sandbox/memory.py`` adds up a service's whole process tree and
  the helpers that left it, in PSS and RSS, read from a ``/proc`` made here
  with the kernel's file formats;
- ``tools/sandbox/venv/in_process.py`` makes oslo.service start a service in
  the calling process (no forked worker) and stops it on SIGTERM.
"""

import contextlib
import importlib.util
import io
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import testtools

from tools.sandbox import memory

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
HELPERS = os.path.join(REPO, 'tools', 'sandbox')


class FakeProc(object):
    """A directory laid out as /proc, with the files memory.py reads."""

    def __init__(self, root):
        self.root = root

    def add(self, pid, ppid, comm, rss_kib, pss_kib, args=None):
        base = os.path.join(self.root, str(pid))
        os.makedirs(base)
        # the command name may hold spaces and parentheses
        stat = '%d (%s) S %d %d %d 0 -1 4194560' % (pid, comm, ppid, pid,
                                                    pid)
        files = {
            'stat': stat,
            'comm': comm + '\n',
            'status': 'Name:\t%s\nVmPeak:\t  999999 kB\nVmRSS:\t  %d kB\n'
                      'Threads:\t3\n' % (comm, rss_kib),
            'smaps_rollup': (
                '00400000-7ffd0000 ---p 00000000 00:00 0   [rollup]\n'
                'Rss:  %d kB\nPss:  %d kB\nPss_Anon:  %d kB\n'
                % (rss_kib, pss_kib, pss_kib)),
            'cmdline': '\0'.join((args or comm).split()) + '\0',
        }
        for name, text in files.items():
            with open(os.path.join(base, name), 'w') as handle:
                handle.write(text)


class MemoryReportTest(testtools.TestCase):

    def setUp(self):
        super(MemoryReportTest, self).setUp()
        self.memory = memory
        tmp_dir = tempfile.TemporaryDirectory()
        self.addCleanup(tmp_dir.cleanup)
        tmp = tmp_dir.name
        self.sandbox = os.path.join(tmp, 'sandbox')
        os.makedirs(os.path.join(self.sandbox, 'run'))
        self.proc = FakeProc(os.path.join(tmp, 'proc'))
        os.makedirs(self.proc.root)
        os.makedirs(os.path.join(self.proc.root, 'self'))  # not a pid

    def pid_file(self, name, pid):
        with open(os.path.join(self.sandbox, 'run', name + '.pid'),
                  'w') as handle:
            handle.write('%d 12345\n' % pid)

    def test_trees_helpers_and_lxd(self):
        venv_python = self.sandbox + '/venv/bin/python3'
        self.proc.add(1, 0, 'init', 10, 10)
        # nova-api with a child of its own
        self.proc.add(100, 1, 'python3', 1000, 600,
                      venv_python + ' wsgi_server.py --name nova-api')
        self.proc.add(101, 100, 'python3', 300, 100)
        # a privsep daemon still under its agent counts with the agent
        self.proc.add(200, 1, 'python3', 2000, 1500, venv_python + ' agent')
        self.proc.add(201, 200, 'privsep-helper', 900, 800,
                      venv_python + ' /venv/bin/privsep-helper --x')
        # detached helpers: a privsep daemon and a dnsmasq of the sandbox
        self.proc.add(300, 1, 'privsep-helper', 700, 650,
                      venv_python + ' privsep-helper --config-file x')
        self.proc.add(301, 1, 'dnsmasq', 20, 15,
                      'dnsmasq --pid-file=' + self.sandbox + '/data/pid')
        # another user's dnsmasq and the daemons: not the cloud's
        self.proc.add(400, 1, 'dnsmasq', 50, 40, 'dnsmasq --conf=/etc/x')
        self.proc.add(500, 1, 'lxd', 4000, 3000, '/usr/bin/lxd --group lxd')
        self.pid_file('nova-api', 100)
        self.pid_file('neutron-dhcp-agent', 200)
        self.pid_file('nova-conductor', 999)  # stale: no such process

        rows, helpers, lxd = self.memory.report(
            self.sandbox, ['neutron-dhcp-agent', 'nova-api', 'nova-conductor'],
            proc=self.proc.root)

        self.assertEqual(
            [('neutron-dhcp-agent', (1500 + 800, 2000 + 900)),
             ('nova-api', (600 + 100, 1000 + 300))],
            [(name, tuple(usage)) for name, usage in rows])
        self.assertEqual((650 + 15, 700 + 20), tuple(helpers))
        self.assertEqual((3000, 4000), tuple(lxd))

    def test_command_line_prints_pss_then_rss(self):
        self.proc.add(1, 0, 'init', 10, 10)
        self.proc.add(100, 1, 'mariadbd', 2048, 1024)
        self.pid_file('mariadb', 100)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.memory.main([self.sandbox, 'mariadb', 'keystone'],
                             proc=self.proc.root)
        # what tools/sandbox.sh status reads: NAME PSS_KIB RSS_KIB; no
        # line for a service that does not run
        self.assertEqual('mariadb 1024 2048\nhelpers 0 0\nlxd 0 0\n',
                         out.getvalue())


needs_oslo_service = testtools.skipUnless(
    importlib.util.find_spec('oslo_service'),
    'oslo.service is not installed in this environment (it comes with '
    'nova: pip install -c constraints.txt nova)')

_SERVICE_SCRIPT = textwrap.dedent('''
    import os, sys
    sys.path.insert(0, sys.argv[1])
    from tools.sandbox.venv import in_process
    in_process.patch_oslo_service()
    from oslo_config import cfg
    from oslo_service import service

    record = sys.argv[2]

    class Recorder(service.ServiceBase):
        def _note(self, what):
            with open(record, 'a') as handle:
                handle.write('%s %d\\n' % (what, os.getpid()))

        def start(self):
            self._note('start')

        def stop(self):
            self._note('stop')

        def wait(self):
            pass

        def reset(self):
            pass

    launcher = service.launch(cfg.ConfigOpts(), Recorder(), workers=1)
    launcher.wait()
''')


def _catches_sigterm(pid):
    """Whether the process has a handler for SIGTERM (SigCgt, /proc)."""
    with open('/proc/%d/status' % pid) as handle:
        for line in handle:
            if line.startswith('SigCgt:'):
                return bool(int(line.split()[1], 16)
                            & (1 << (signal.SIGTERM - 1)))
    return False


@needs_oslo_service
class InProcessLauncherTest(testtools.TestCase):

    def test_service_starts_in_this_process_and_stops_on_sigterm(self):
        with tempfile.TemporaryDirectory() as tmp:
            record = os.path.join(tmp, 'record')
            process = subprocess.Popen(
                [sys.executable, '-c', _SERVICE_SCRIPT, REPO, record],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            self.addCleanup(process.kill)
            deadline = time.monotonic() + 60
            while not os.path.exists(record):
                if process.poll() is not None:
                    self.fail(process.stdout.read())
                self.assertLess(time.monotonic(), deadline,
                                'the service never started')
                time.sleep(0.05)
            # start() runs before the launcher installs its signal
            # handlers: a TERM sent in between would kill the process with
            # the default action, so wait until it catches TERM.
            while not _catches_sigterm(process.pid):
                if process.poll() is not None:
                    self.fail(process.stdout.read())
                self.assertLess(time.monotonic(), deadline,
                                'the launcher never handled SIGTERM')
                time.sleep(0.05)
            process.terminate()
            output = process.communicate(timeout=60)[0]
            self.assertEqual(0, process.returncode, output)
            with open(record) as handle:
                lines = handle.read().split('\n')
        # oslo.service's own ServiceLauncher would start it in a forked
        # worker: another pid
        self.assertEqual(['start %d' % process.pid, 'stop %d' % process.pid,
                          ''], lines)
