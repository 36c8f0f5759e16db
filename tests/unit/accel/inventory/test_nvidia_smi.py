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

from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel.inventory import nvidia_smi
from tests.fixtures import fake_nvidia_smi
from tests.fixtures import gpu_hosts


# Compute-instance sub-profiles: two MIG devices share GPU instance 1
# (nvidia-smi -L of a GH200 split with 1c.3g.71gb, hand-written in the
# documented format) next to a non-MIG GPU.
CI_PROFILES = """\
GPU 0: NVIDIA GH200 480GB (UUID: GPU-11111111-2222-3333-4444-555555555555)
  MIG 1c.3g.71gb  Device  0: (UUID: MIG-aaaaaaaa-0000-5000-8000-000000000001)
  MIG 1c.3g.71gb  Device  1: (UUID: MIG-aaaaaaaa-0000-5000-8000-000000000002)
  MIG 1g.12gb+me  Device  2: (UUID: MIG-aaaaaaaa-0000-5000-8000-000000000003)
GPU 1: NVIDIA H100 PCIe (UUID: GPU-66666666-7777-8888-9999-000000000000)
"""


class TestParseList(base.BaseTestCase):

    def test_new_format_padded(self):
        gpus = nvidia_smi.parse_list(
            gpu_hosts.load_text('mig-L-a100-sxm4-80gb-7x1g10gb.txt'))
        self.assertEqual(1, len(gpus))
        self.assertEqual('NVIDIA A100-SXM4-80GB', gpus[0].name)
        self.assertEqual('GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16',
                         gpus[0].uuid)
        self.assertEqual(7, len(gpus[0].mig_devices))
        first = gpus[0].mig_devices[0]
        self.assertEqual(devices.MigDevice(
            profile='1g.10gb', uuid='MIG-feb88891-0321-5fef-9c87-d4af3b54259e',
            index=0, gpu_index=0), first)
        self.assertEqual(list(range(7)),
                         [m.index for m in gpus[0].mig_devices])

    def test_legacy_format_gives_gi_and_ci(self):
        gpus = nvidia_smi.parse_list(
            gpu_hosts.load_text(
                'mig-L-a100-sxm4-40gb-7x1g5gb-legacy-uuid.txt'))
        self.assertEqual(1, len(gpus))
        migs = gpus[0].mig_devices
        self.assertEqual([7, 8, 9, 11, 12, 13, 14], [m.gi for m in migs])
        self.assertEqual([0] * 7, [m.ci for m in migs])
        self.assertEqual(
            'MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/11/0', migs[3].uuid)
        self.assertEqual({'1g.5gb'}, {m.profile for m in migs})

    def test_h100_extract(self):
        gpus = nvidia_smi.parse_list(
            gpu_hosts.load_text('nvsmi-h100-80gb-mig-4slices-L.txt'))
        self.assertEqual(['3g.40gb', '2g.20gb', '1g.10gb', '1g.10gb'],
                         [m.profile for m in gpus[0].mig_devices])
        self.assertIsNone(gpus[0].mig_devices[0].gi)

    def test_captured_h200_whole_gpu(self):
        gpus = nvidia_smi.parse_list(
            gpu_hosts.load_text('nvsmi-h200-580-L.txt'))
        self.assertEqual(
            [(0, 'NVIDIA H200',
              'GPU-00000000-0000-0000-0000-0000000000c8', ())],
            [(g.index, g.name, g.uuid, g.mig_devices) for g in gpus])

    def test_compute_instance_profiles_and_suffixes(self):
        gpus = nvidia_smi.parse_list(CI_PROFILES)
        self.assertEqual(2, len(gpus))
        self.assertEqual(
            ['CUSTOM_MIG_1C_3G_71GB', 'CUSTOM_MIG_1C_3G_71GB',
             'CUSTOM_MIG_1G_12GB_ME'],
            [m.resource_class for m in gpus[0].mig_devices])
        self.assertEqual((), gpus[1].mig_devices)
        self.assertEqual(1, gpus[1].index)

    def test_noise_and_empty(self):
        self.assertEqual([], nvidia_smi.parse_list(''))
        self.assertEqual([], nvidia_smi.parse_list(None))
        self.assertEqual([], nvidia_smi.parse_list(
            'No devices were found\n'
            '  MIG 1g.5gb Device 0: (UUID: MIG-0000)\n'))

    def test_resource_class_names(self):
        self.assertEqual('CUSTOM_MIG_1G_10GB',
                         devices.mig_resource_class('1g.10gb'))
        self.assertEqual('CUSTOM_MIG_1G_10GB_ME',
                         devices.mig_resource_class('1g.10gb+me'))
        self.assertEqual('CUSTOM_MIG_1C_3G_71GB',
                         devices.mig_resource_class('1c.3g.71gb'))
        self.assertEqual('CUSTOM_MIG_4G_40GB_GFX',
                         devices.mig_resource_class('4g.40gb+gfx'))
        self.assertEqual('CUSTOM_MIG_1G_20GB_ME',
                         devices.mig_resource_class('1g.20gb-me'))


class TestRunList(base.BaseTestCase):
    """Runs real tiny scripts standing in for nvidia-smi."""

    def _script(self, body):
        return fake_nvidia_smi.script(
            self.useFixture(fixtures.TempDir()).path, body)

    def test_output(self):
        path = self._script('[ "$1" = "-L" ] && cat <<EOF\n%sEOF' %
                            CI_PROFILES)
        self.assertEqual(CI_PROFILES, nvidia_smi.run_list(path, 5))

    def test_absent_binary_means_no_mig(self):
        self.assertEqual('', nvidia_smi.run_list('/nonexistent/nvidia-smi'))

    def test_no_devices(self):
        path = self._script('echo "No devices were found"; exit 6')
        self.assertEqual('', nvidia_smi.run_list(path, 5))

    def test_failure_is_unknown(self):
        path = self._script('echo "NVIDIA-SMI has failed" >&2; exit 9')
        self.assertIsNone(nvidia_smi.run_list(path, 5))

    def test_timeout_is_unknown(self):
        path = self._script('exec sleep 5')
        self.assertIsNone(nvidia_smi.run_list(path, 0.2))


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
        # 4242, then one more for each further child
        self.pid = 4242 + len(self.instances)
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

    def test_stuck_processes_are_capped(self):
        # nvidia-smi stuck in the kernel: every probe would start one more
        # and abandon it, each with a reaper thread, for as long as the
        # GPU stays wedged (issue 46 item 9)
        self.useFixture(fixtures.MockPatchObject(
            nvidia_smi.subprocess, 'Popen', _StuckPopen))
        self.addCleanup(_StuckPopen.instances.clear)
        self.addCleanup(nvidia_smi.reset_abandoned)
        self.useFixture(fixtures.FakeLogger(name=nvidia_smi.__name__))
        nvidia_smi.reset_abandoned()
        results = [nvidia_smi.run('nvidia-smi', ['-q'], 0.01)
                   for _ in range(50)]
        for proc in _StuckPopen.instances:
            self.addCleanup(proc.ended.set)
        self.assertEqual(nvidia_smi.MAX_STUCK, len(_StuckPopen.instances))
        self.assertEqual(nvidia_smi.MAX_STUCK, len(
            [t for t in threading.enumerate()
             if t.name.startswith('nvidia-smi-reaper-')]))
        self.assertTrue(all(rc == nvidia_smi.FAILED_TO_RUN
                            for rc, _, _ in results))
        self.assertIn('not started: 2 nvidia-smi processes of earlier '
                      'probes are still stuck in the kernel', results[-1][2])
        # one ends at last: the next probe may run nvidia-smi again
        first = _StuckPopen.instances[0]
        first.ended.set()
        for _ in range(POLLS):
            if not any(t.name == 'nvidia-smi-reaper-%d' % first.pid
                       for t in threading.enumerate()):
                break
            time.sleep(0.05)
        nvidia_smi.run('nvidia-smi', ['-q'], 0.01)
        self.assertEqual(nvidia_smi.MAX_STUCK + 1,
                         len(_StuckPopen.instances))

    def test_reset(self):
        nvidia_smi.reset_abandoned()
        self.assertEqual(0, nvidia_smi.abandoned_children())


class TestPowerFields(base.BaseTestCase):
    """``power.draw`` and ``power.limit`` of ``--query-gpu``, in watts."""

    HEADER = 'index, pci.bus_id, power.draw [W], power.limit [W]'

    def test_watts_are_read(self):
        gpus = nvidia_smi.parse_query_gpu(
            self.HEADER + '\n0, 00000000:07:00.0, 78.34 W, 700.00 W\n')
        facts = gpus['0000:07:00.0']
        self.assertEqual((78.34, 700.0),
                         (facts.power_draw_w, facts.power_limit_w))

    def test_not_available_is_no_value_not_zero(self):
        gpus = nvidia_smi.parse_query_gpu(
            self.HEADER + '\n0, 00000000:07:00.0, [N/A], [N/A]\n'
            '1, 00000000:85:00.0, [Unknown Error], N/A\n')
        self.assertEqual([(None, None), (None, None)],
                         [(g.power_draw_w, g.power_limit_w)
                          for _, g in sorted(gpus.items())])

    def test_output_without_the_fields_has_no_power(self):
        gpus = nvidia_smi.parse_query_gpu(
            'index, pci.bus_id\n0, 00000000:07:00.0\n')
        self.assertIsNone(gpus['0000:07:00.0'].power_draw_w)

    def test_recorded_h100(self):
        gpus = nvidia_smi.parse_query_gpu(gpu_hosts.load_text(
            'nvsmi-h100-80gb-load-query-gpu.csv'))
        [facts] = gpus.values()
        self.assertEqual((631.95, 700.0),
                         (facts.power_draw_w, facts.power_limit_w))
