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

"""A hung nvidia-smi never blocks nova (issue 35, scenario 4).

An nvidia-smi stuck in the kernel on a wedged GPU (after an Xid 79) does
not end on SIGKILL. A frozen cgroup-v1 freezer group gives the same: its
tasks stay until the group is thawed, SIGKILL included, so a stand-in
nvidia-smi that freezes itself is such a process, with no GPU.
"""

import logging
import os
import stat
import subprocess
import sys
import threading
import time
import uuid

import fixtures
from oslotest import base

from nova_lxd_accel.accel.inventory import nvidia_smi

FREEZER = '/sys/fs/cgroup/freezer'
#: seconds after which the safety thread thaws the group even when run()
#: has not returned: the old implementation returns only then
SAFETY = 20
#: polls of 0.05 s for a thawed task to end and be reaped (generous)
POLLS = 1200


def _write(path, text):
    with open(path, 'w') as f:
        f.write(text)


def _read(path):
    with open(path) as f:
        return f.read().strip()


class _FrozenSmi(object):
    """A freezer group and a stand-in nvidia-smi that freezes itself in it.

    The script writes its pid, joins the group and freezes it: the shell
    is then a task that SIGKILL does not end until the group is thawed.
    """

    def __init__(self, test):
        if not os.path.isdir(FREEZER):
            test.skipTest('no cgroup-v1 freezer mounted at %s' % FREEZER)
        if not os.access(FREEZER, os.W_OK):
            test.skipTest('%s is not writable (not root)' % FREEZER)
        self.group = os.path.join(
            FREEZER, 'nova-lxd-accel-test-%s' % uuid.uuid4().hex)
        try:
            os.mkdir(self.group)
        except OSError as exc:
            test.skipTest('cannot create a freezer group: %s' % exc)
        test.addCleanup(self.remove)
        directory = test.useFixture(fixtures.TempDir()).path
        self.pid_file = os.path.join(directory, 'pid')
        self.path = os.path.join(directory, 'nvidia-smi')
        _write(self.path,
               '#!/bin/sh\n'
               'mkdir -p %(group)s\n'
               'echo $$ > %(pid)s\n'
               'echo $$ > %(group)s/tasks\n'
               'echo FROZEN > %(group)s/freezer.state\n'
               'echo "index, pci.bus_id"\n'
               % {'group': self.group, 'pid': self.pid_file})
        os.chmod(self.path, stat.S_IRWXU)

    @property
    def pid(self):
        return int(_read(self.pid_file))

    @property
    def state(self):
        return _read(os.path.join(self.group, 'freezer.state'))

    def thaw(self):
        _write(os.path.join(self.group, 'freezer.state'), 'THAWED')

    def remove(self):
        """Thaw the group, wait for its tasks to end, remove it."""
        self.thaw()
        for _ in range(POLLS):
            if not _read(os.path.join(self.group, 'tasks')):
                break
            time.sleep(0.05)
        os.rmdir(self.group)


def _gone(pid):
    """Whether ``pid`` is no process at all, not even a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


class TestHungNvidiaSmi(base.BaseTestCase):

    def setUp(self):
        super().setUp()
        self.smi = _FrozenSmi(self)
        self.log = self.useFixture(fixtures.FakeLogger(
            name=nvidia_smi.__name__, level=logging.INFO))

    def _thaw_later(self):
        """A safety thread thawing the group when run() returns, or later.

        :returns: ``(returned, thawed)`` events: set ``returned`` when
            run() returned; ``thawed`` is set before the group is thawed.
            Had run() waited for the thaw, ``thawed`` is set when it
            returns.
        """
        returned, thawed = threading.Event(), threading.Event()

        def safety():
            returned.wait(SAFETY)
            thawed.set()
            self.smi.thaw()

        thread = threading.Thread(target=safety, daemon=True)
        thread.start()
        self.addCleanup(thread.join)
        self.addCleanup(returned.set)
        return returned, thawed, thread

    def test_run_returns_before_the_stuck_child_ends(self):
        before = nvidia_smi.abandoned_children()
        returned, thawed, safety = self._thaw_later()

        rc, out, err = nvidia_smi.run(self.smi.path, ['--query-gpu=x'],
                                      timeout=1)
        thawed_first = thawed.is_set()
        state = self.smi.state
        pid = self.smi.pid
        reaper_alive = any(t.name == 'nvidia-smi-reaper-%d' % pid
                           for t in threading.enumerate())
        returned.set()

        self.assertFalse(thawed_first,
                         'run() returned only once the group was thawed: '
                         'it waited for a child SIGKILL could not end')
        # the child was stuck, not merely slow
        self.assertEqual('FROZEN', state)
        self.assertEqual((nvidia_smi.FAILED_TO_RUN, ''), (rc, out))
        self.assertIn('did not answer within 1 seconds', err)
        self.assertIn('pid %d abandoned' % pid, err)
        self.assertEqual(before + 1, nvidia_smi.abandoned_children())
        self.assertTrue(reaper_alive, 'no reaper thread waits for it')
        self.assertIn('pid %d' % pid, self.log.output)
        self.assertIn('dmesg', self.log.output)
        self.assertIn('(%d nvidia-smi process(es) abandoned so far)' %
                      (before + 1), self.log.output)

        # thawed, the SIGKILL ends it and the reaper reaps it: no zombie
        safety.join()
        for _ in range(POLLS):
            if _gone(pid):
                break
            time.sleep(0.05)
        self.assertTrue(_gone(pid), 'pid %d was never reaped' % pid)
        for _ in range(POLLS):
            if not any(t.name == 'nvidia-smi-reaper-%d' % pid
                       for t in threading.enumerate()):
                break
            time.sleep(0.05)
        self.assertIn('(pid %d) ended at last' % pid, self.log.output)

    def test_under_eventlet(self):
        # nova-compute runs monkey patched: a green Popen and green threads
        code = ('import eventlet; eventlet.monkey_patch()\n'
                'import sys\n'
                'from nova_lxd_accel.accel.inventory import nvidia_smi\n'
                'rc, _, err = nvidia_smi.run(sys.argv[1], ["-q"], 1)\n'
                'print(rc, nvidia_smi.abandoned_children())\n'
                'print(err)\n'
                'sys.stdout.flush()\n')
        returned, thawed, safety = self._thaw_later()
        proc = subprocess.Popen(
            [sys.executable, '-W', 'ignore', '-c', code, self.smi.path],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(proc.wait)
        self.addCleanup(proc.stderr.close)
        self.addCleanup(proc.stdout.close)
        first = proc.stdout.readline()
        thawed_first = thawed.is_set()
        returned.set()
        # not communicate(): it would miss what readline() buffered
        rest, errors = proc.stdout.read(), proc.stderr.read()
        self.assertFalse(thawed_first,
                         'run() under eventlet waited for the thaw')
        self.assertEqual('%d 1' % nvidia_smi.FAILED_TO_RUN, first.strip(),
                         errors)
        self.assertIn('did not answer within 1 seconds', rest)


class _StuckPopen(object):
    """A Popen whose child never ends until ``ended`` is set."""

    instances = []

    def __init__(self, args, **kwargs):
        self.args = args
        self.pid = 4242
        self.returncode = None
        self.killed = False
        self.ended = threading.Event()
        self.stdout = open(os.devnull)
        self.stderr = open(os.devnull)
        self.stdin = None
        self.instances.append(self)

    def communicate(self, timeout=None):
        raise subprocess.TimeoutExpired(self.args, timeout)

    def kill(self):
        self.killed = True

    def wait(self, timeout=None):
        self.ended.wait()
        self.returncode = -9
        return self.returncode


class TestAbandonWithoutFreezer(base.BaseTestCase):
    """The same, where no freezer can be used: a Popen that never ends."""

    def test_stuck_child_is_abandoned_to_a_reaper(self):
        self.useFixture(fixtures.MockPatchObject(
            nvidia_smi.subprocess, 'Popen', _StuckPopen))
        self.addCleanup(_StuckPopen.instances.clear)
        log = self.useFixture(fixtures.FakeLogger(name=nvidia_smi.__name__))
        before = nvidia_smi.abandoned_children()

        rc, out, err = nvidia_smi.run('nvidia-smi', ['-q'], 2.5)

        proc, = _StuckPopen.instances
        self.addCleanup(proc.ended.set)
        self.assertEqual(nvidia_smi.FAILED_TO_RUN, rc)
        self.assertIn('did not answer within 2.5 seconds', err)
        self.assertIn('pid 4242 abandoned', err)
        self.assertTrue(proc.killed)
        self.assertTrue(proc.stdout.closed and proc.stderr.closed)
        self.assertEqual(before + 1, nvidia_smi.abandoned_children())
        self.assertIn('nvidia-smi -q (pid 4242) did not end', log.output)
        reaper, = [t for t in threading.enumerate()
                   if t.name == 'nvidia-smi-reaper-4242']
        self.assertIsNone(proc.returncode)
        proc.ended.set()
        reaper.join()
        self.assertEqual(-9, proc.returncode)

    def test_reset(self):
        nvidia_smi.reset_abandoned()
        self.assertEqual(0, nvidia_smi.abandoned_children())
