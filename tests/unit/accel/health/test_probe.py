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

"""The host probe on recorded nvidia-smi outputs (samples/README.md)."""

import os
import stat
import subprocess
import sys

import fixtures
import testtools

from nova_lxd_accel.accel.health import probe
from nova_lxd_accel.accel.inventory import nvidia_smi
from tests.fixtures import fake_nvidia_smi
from tests.fixtures import gpu_hosts

H100 = '0000:00:09.0'
H200 = '0000:00:06.0'


class TestParseQueryGpu(testtools.TestCase):

    def test_recorded_h100_idle_and_load(self):
        idle = nvidia_smi.parse_query_gpu(gpu_hosts.load_text(
            'nvsmi-h100-80gb-idle-query-gpu.csv'))
        load = nvidia_smi.parse_query_gpu(gpu_hosts.load_text(
            'nvsmi-h100-80gb-load-query-gpu.csv'))
        self.assertEqual([H100], list(idle))
        self.assertEqual((81559, 0, 0), (idle[H100].memory_total_mib,
                                         idle[H100].memory_used_mib,
                                         idle[H100].utilization_pct))
        self.assertEqual((19818, 100), (load[H100].memory_used_mib,
                                        load[H100].utilization_pct))
        self.assertEqual('NVIDIA H100 80GB HBM3', idle[H100].name)
        self.assertEqual('Disabled', idle[H100].mig_mode)
        # [N/A] retired pages on an H100 (it remaps rows instead)
        self.assertEqual([], idle[H100].problems())
        self.assertEqual([], load[H100].problems())

    def test_captured_h200(self):
        gpus = nvidia_smi.parse_query_gpu(gpu_hosts.load_text(
            'nvsmi-h200-580-idle-query-gpu.csv'))
        self.assertEqual([H200], list(gpus))
        self.assertEqual(('NVIDIA H200', 143771, 0, 0, 'Disabled'),
                         (gpus[H200].name, gpus[H200].memory_total_mib,
                          gpus[H200].memory_used_mib,
                          gpus[H200].utilization_pct, gpus[H200].mig_mode))
        self.assertEqual([], gpus[H200].problems())

    def test_ecc_retired_remap(self):
        gpus = nvidia_smi.parse_query_gpu(gpu_hosts.load_text(
            'handmade-nvsmi-query-gpu-ecc-retired-remap.csv'))
        self.assertEqual({
            '0000:17:00.0': [],
            '0000:31:00.0': ['2 uncorrectable ECC errors'],
            '0000:b1:00.0': ['retired pages pending'],
            '0000:ca:00.0': ['row remapping pending',
                             'row remapping failed'],
        }, {pci: facts.problems() for pci, facts in gpus.items()})

    def test_fallen_off_the_bus(self):
        gpus = nvidia_smi.parse_query_gpu(gpu_hosts.load_text(
            'handmade-nvsmi-query-gpu-gpu-lost.txt'))
        self.assertEqual([], gpus['0000:17:00.0'].problems())
        self.assertEqual(['fallen off the bus (Unknown Error)'],
                         gpus['0000:31:00.0'].problems())
        self.assertEqual(['fallen off the bus (GPU requires reset)'],
                         gpus['0000:b1:00.0'].problems())

    def test_pci_address_of_nvidia_smi(self):
        self.assertEqual('0000:3b:00.0',
                         nvidia_smi.pci_address('00000000:3B:00.0'))
        self.assertEqual('0001:3b:00.0',
                         nvidia_smi.pci_address('00000001:3B:00.0'))
        self.assertEqual('0000:3b:00.0', nvidia_smi.pci_address('3B:00.0'))


class TestParseQuery(testtools.TestCase):

    def test_recorded_idle_and_load(self):
        gpus, apps = nvidia_smi.parse_query(gpu_hosts.load_text(
            'nvsmi-h100-80gb-idle-q.txt'))
        self.assertEqual([], gpus[H100].problems())
        self.assertEqual((81559, 0), (gpus[H100].memory_total_mib,
                                      gpus[H100].memory_used_mib))
        self.assertEqual({}, apps)
        gpus, apps = nvidia_smi.parse_query(gpu_hosts.load_text(
            'nvsmi-h100-80gb-load-q.txt'))
        self.assertEqual(19818, gpus[H100].memory_used_mib)
        self.assertEqual([11327, 11328, 11345],
                         [a.pid for a in apps[H100]])
        self.assertEqual(15690, apps[H100][2].used_memory_mib)

    def test_captured_h200(self):
        gpus, apps = nvidia_smi.parse_query(gpu_hosts.load_text(
            'nvsmi-h200-580-idle-q.txt'))
        self.assertEqual([H200], list(gpus))
        self.assertEqual((143771, 0), (gpus[H200].memory_total_mib,
                                       gpus[H200].memory_used_mib))
        self.assertEqual([], gpus[H200].problems())
        self.assertEqual({}, apps)

    def test_errors(self):
        gpus, _ = nvidia_smi.parse_query(gpu_hosts.load_text(
            'handmade-nvsmi-h100-q-ecc-retired-remap-pending.txt'))
        self.assertEqual(['3 uncorrectable ECC errors',
                          'retired pages pending', 'row remapping pending'],
                         gpus[H100].problems())


class TestHostProbe(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path

    def test_snapshot_runs_nvidia_smi(self):
        path = fake_nvidia_smi.recorded(self.dir, {
            '--query-gpu': gpu_hosts.sample_path(
                'nvsmi-h100-80gb-load-query-gpu.csv'),
            '--query-compute-apps': gpu_hosts.sample_path(
                'nvsmi-h100-80gb-load-compute-apps.csv')})
        snap = probe.HostProbe(path, clock=lambda: 42.0).snapshot()
        self.assertTrue(snap.available)
        self.assertEqual(42.0, snap.taken_at)
        self.assertEqual(19818, snap.gpus[H100].memory_used_mib)
        self.assertEqual(3, len(snap.apps_on(H100)))
        self.assertEqual([], snap.problems(H100))
        self.assertEqual(
            ['fallen off the bus (nvidia-smi no longer lists it)'],
            snap.problems('0000:07:00.0'))

    def test_the_probe_never_asks_for_a_tenant_s_text(self):
        # the process name is the tenant's and printed unquoted: the probe
        # asks only for columns of a fixed form (compute_apps explains)
        self.assertNotIn('process_name', probe.APP_FIELDS)
        self.assertEqual({'gpu_bus_id', 'pid'},
                         {'gpu_bus_id', 'pid'} & set(probe.APP_FIELDS))

    def test_names_and_containers_come_from_the_kernel(self):
        proc = os.path.join(self.dir, 'proc')
        for pid, comm, cgroup in (
                (11327, 'memhog\n', '0::/lxc.payload.nova-a/init.scope\n'),
                (11328, 'nvidia-cuda-mps\n', '0::/system.slice/mps\n'),
                (11345, 'nvidia-cuda-mps\n',
                 '0::/lxc.payload.p1_nova-b/x\n')):
            os.makedirs(os.path.join(proc, str(pid)))
            for name, text in (('comm', comm), ('cgroup', cgroup)):
                with open(os.path.join(proc, str(pid), name), 'w') as f:
                    f.write(text)
        answer = os.path.join(self.dir, 'apps.csv')
        with open(answer, 'w') as f:
            f.write('gpu_bus_id, gpu_uuid, pid, used_gpu_memory [MiB]\n' +
                    ''.join('00000000:00:09.0, GPU-1, %d, 100 MiB\n' % pid
                            for pid in (11327, 11328, 11345, 11399)))
        path = fake_nvidia_smi.recorded(self.dir, {
            '--query-gpu': gpu_hosts.sample_path(
                'nvsmi-h100-80gb-load-query-gpu.csv'),
            '--query-compute-apps': answer})
        snap = probe.HostProbe(path, proc=proc).snapshot()
        self.assertTrue(snap.available)
        self.assertEqual(
            [(11327, 'memhog', True), (11328, 'nvidia-cuda-mps', False),
             (11345, 'nvidia-cuda-mps', True), (11399, '?', None)],
            [(a.pid, a.name, a.in_container) for a in snap.apps[H100]])
        # the host's MPS server is not a tenant; a container's process
        # named after it is
        self.assertEqual([11328], [a.pid for a in snap.mps_servers_on(H100)])
        self.assertEqual([11327, 11345, 11399],
                         [a.pid for a in snap.apps_on(H100)])

    def test_an_answer_with_a_made_up_line_is_incomplete(self):
        answer = os.path.join(self.dir, 'apps.csv')
        with open(answer, 'w') as f:
            f.write('gpu_bus_id, gpu_uuid, pid, used_gpu_memory [MiB]\n'
                    '00000000:00:09.0, GPU-1, 42, 100 MiB\nhalf a name\n')
        path = fake_nvidia_smi.recorded(self.dir, {
            '--query-gpu': gpu_hosts.sample_path(
                'nvsmi-h100-80gb-load-query-gpu.csv'),
            '--query-compute-apps': answer})
        snap = probe.HostProbe(path).snapshot()
        self.assertFalse(snap.available)
        self.assertEqual('unexpected output', snap.error)

    def test_no_nvidia_smi_means_no_gpu(self):
        snap = probe.HostProbe(
            os.path.join(self.dir, 'absent')).snapshot()
        self.assertFalse(snap.available)
        self.assertEqual('no nvidia-smi: no GPU', snap.error)
        self.assertEqual([], snap.problems(H100))

    def test_failing_nvidia_smi_is_unknown(self):
        path = fake_nvidia_smi.recorded(self.dir, {}, status=0)
        snap = probe.HostProbe(path).snapshot()
        self.assertFalse(snap.available)
        self.assertEqual([], snap.problems(H100))


def logged_smi(directory, outputs, status=0):
    """:func:`fake_smi` noting the first argument of each run in a file.

    :returns: ``(path, log)``: the script, and the file it appends to
        (absent while it never ran).
    """
    path = fake_nvidia_smi.recorded(directory, outputs, status)
    log = os.path.join(directory, 'ran')
    with open(path) as f:
        script = f.read()
    with open(path, 'w') as f:
        f.write(script.replace('#!/bin/sh\n', '#!/bin/sh\n'
                               'echo "${1%%%%=*}" >> %s\n' % log, 1))
    return path, log


def _ran(log):
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return f.read().split()


MIG_GPU = {
    '--query-gpu': gpu_hosts.sample_path(
        'handmade-nvsmi-h100-mig-query-gpu.csv'),
    '--query-compute-apps': gpu_hosts.sample_path(
        'nvsmi-h100-80gb-idle-compute-apps.csv')}


class TestSnapshotDeadline(testtools.TestCase):
    """``snapshot(deadline)``: no nvidia-smi call goes past it."""

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path

    def _probe(self, path, *times):
        """A probe whose monotonic clock answers ``times``, then the last."""
        times = list(times)

        def monotonic():
            return times.pop(0) if len(times) > 1 else times[0]
        return probe.HostProbe(path, monotonic=monotonic)

    def test_deadline_passed_starts_no_nvidia_smi(self):
        path, log = logged_smi(self.dir, MIG_GPU)
        snap = self._probe(path, 100.0).snapshot(deadline=50.0)
        self.assertEqual([], _ran(log))
        self.assertFalse(snap.available)
        self.assertFalse(snap.complete)
        self.assertTrue(snap.error.startswith(probe.DEADLINE_REACHED),
                        snap.error)
        self.assertIn('--query-gpu not started', snap.error)
        self.assertEqual([], snap.problems(H100))

    def test_deadline_reached_between_calls(self):
        path, log = logged_smi(self.dir, MIG_GPU)
        snap = self._probe(path, 0.0, 60.0).snapshot(deadline=50.0)
        self.assertEqual(['--query-gpu'], _ran(log))
        self.assertFalse(snap.available)
        self.assertEqual("the probe's deadline was reached: %s "
                         "--query-compute-apps not started" % path,
                         snap.error)

    def test_deadline_reached_before_mig_query(self):
        path, log = logged_smi(self.dir, dict(MIG_GPU, **{
            '-q': gpu_hosts.sample_path(
                'handmade-nvsmi-h100-mig-slice2-busy-q.txt')}))
        snap = self._probe(path, 0.0, 0.0, 60.0).snapshot(deadline=50.0)
        self.assertEqual(['--query-gpu', '--query-compute-apps'], _ran(log))
        self.assertTrue(snap.available)
        self.assertFalse(snap.complete)
        self.assertTrue(
            snap.mig_error.startswith(probe.DEADLINE_REACHED),
            snap.mig_error)
        self.assertEqual({}, snap.mig)

    def test_each_call_gets_what_is_left(self):
        path, log = logged_smi(self.dir, dict(MIG_GPU, **{
            '-q': gpu_hosts.sample_path(
                'handmade-nvsmi-h100-mig-slice2-busy-q.txt')}))
        timeouts = []
        real = nvidia_smi.run

        def run(path, args, timeout):
            timeouts.append(timeout)
            return real(path, args, timeout)

        self.useFixture(fixtures.MockPatchObject(nvidia_smi, 'run', run))
        host_probe = probe.HostProbe(path, timeout=10,
                                     monotonic=lambda: 100.0)
        self.assertTrue(host_probe.snapshot(deadline=102.5).complete)
        self.assertEqual([2.5] * 3, timeouts)
        del timeouts[:]
        self.assertTrue(host_probe.snapshot(deadline=1000.0).complete)
        self.assertTrue(host_probe.snapshot().complete)
        self.assertEqual([10] * 6, timeouts)

    def test_a_call_the_deadline_cut_says_so(self):
        # timed out before its own timeout: the caller's deadline, not
        # nvidia-smi, ended it (holds.cut_short); at its own timeout it
        # is nvidia-smi's failure
        path, _log = logged_smi(self.dir, MIG_GPU)

        def run(path, args, timeout):
            return (nvidia_smi.FAILED_TO_RUN, '',
                    '%s did not answer within %s seconds' % (path, timeout))

        self.useFixture(fixtures.MockPatchObject(nvidia_smi, 'run', run))
        host_probe = probe.HostProbe(path, timeout=10,
                                     monotonic=lambda: 100.0)
        cut = host_probe.snapshot(deadline=102.5)
        self.assertEqual("the probe's deadline was reached: %s did not "
                         "answer within 2.5 seconds" % path, cut.error)
        whole = host_probe.snapshot(deadline=1000.0)
        self.assertEqual('%s did not answer within 10 seconds' % path,
                         whole.error)


class TestMigError(testtools.TestCase):
    """A GPU in MIG mode whose ``nvidia-smi -q`` cannot be read."""

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path

    def test_mig_query_read(self):
        path = fake_nvidia_smi.recorded(self.dir, dict(MIG_GPU, **{
            '-q': gpu_hosts.sample_path(
                'handmade-nvsmi-h100-mig-slice2-busy-q.txt')}))
        snap = probe.HostProbe(path).snapshot()
        self.assertIsNone(snap.mig_error)
        self.assertTrue(snap.complete)
        self.assertEqual([48211], [a.pid for a in snap.mig[H100][2].apps])

    def test_mig_query_failing(self):
        # the stand-in exits 9 for -q
        path = fake_nvidia_smi.recorded(self.dir, MIG_GPU)
        snap = probe.HostProbe(path).snapshot()
        self.assertTrue(snap.available)
        self.assertFalse(snap.complete)
        self.assertEqual('%s -q: status 9' % path, snap.mig_error)
        self.assertEqual({}, snap.mig)
        # the GPUs' facts are still there
        self.assertEqual('Enabled', snap.gpus[H100].mig_mode)
        self.assertEqual([], snap.problems(H100))

    def test_mig_query_timing_out(self):
        path = fake_nvidia_smi.recorded(self.dir, MIG_GPU)
        with open(path) as f:
            script = f.read()
        with open(path, 'w') as f:
            f.write(script.replace('case "$1" in\n',
                                   'case "$1" in\n  -q) exec sleep 30 ;;\n'))
        snap = probe.HostProbe(path, timeout=0.2).snapshot()
        self.assertTrue(snap.available)
        self.assertFalse(snap.complete)
        self.assertIn('did not answer within 0.2 seconds', snap.mig_error)

    def test_mig_query_without_the_gpu(self):
        # -q answers, for another GPU only
        path = fake_nvidia_smi.recorded(self.dir, dict(MIG_GPU, **{
            '-q': gpu_hosts.sample_path('nvsmi-h200-580-idle-q.txt')}))
        snap = probe.HostProbe(path).snapshot()
        self.assertTrue(snap.available)
        self.assertFalse(snap.complete)
        self.assertEqual('%s -q printed nothing readable for %s' % (
            path, H100), snap.mig_error)
        self.assertEqual({}, snap.mig)

    def test_no_mig_gpu_no_mig_query(self):
        path, log = logged_smi(self.dir, {
            '--query-gpu': gpu_hosts.sample_path(
                'nvsmi-h100-80gb-idle-query-gpu.csv'),
            '--query-compute-apps': gpu_hosts.sample_path(
                'nvsmi-h100-80gb-idle-compute-apps.csv')})
        snap = probe.HostProbe(path).snapshot()
        self.assertEqual(['--query-gpu', '--query-compute-apps'], _ran(log))
        self.assertTrue(snap.complete)
        self.assertIsNone(snap.mig_error)

    def test_unavailable_is_not_complete(self):
        snap = probe.HostProbe(os.path.join(self.dir, 'absent')).snapshot()
        self.assertFalse(snap.complete)
        self.assertIsNone(snap.mig_error)


class TestKernelLogXids(testtools.TestCase):

    def test_dmesg_lines(self):
        events = probe.parse_kernel_log(
            gpu_hosts.load_text('handmade-dmesg-nvrm-xid.txt'))
        self.assertEqual([(H100, 13, 3120.551204), (H100, 79, 5107.644338)],
                         [(e.pci_address, e.code, e.at) for e in events])
        self.assertIn('GPU has fallen off the bus', events[1].message)

    def test_kmsg_records_and_old_driver_address(self):
        events = probe.parse_kernel_log(
            gpu_hosts.load_text('handmade-kmsg-nvrm-xid.txt'))
        self.assertEqual([(H100, 13, 3120.551204), (H100, 48, 7200.1184),
                          ('0000:00:0a.0', 95, 7200.1189)],
                         [(e.pci_address, e.code, e.at) for e in events])

    def test_syslog_prefix_and_no_time(self):
        text = ('Nov 23 10:00:01 cmp1 kernel: [  812.25] NVRM: Xid '
                '(PCI:0000:3B:00): 64, pid=7, Row Remapper Error\n'
                'Nov 23 10:00:02 cmp1 kernel: NVRM: Xid (PCI:0000:3b:00): '
                '79, GPU has fallen off the bus.\n')
        events = probe.parse_kernel_log(text)
        # the second line has no since-boot time: it cannot be tracked
        self.assertEqual([('0000:3b:00.0', 64, 812.25)],
                         [(e.pci_address, e.code, e.at) for e in events])

    def test_probe_reads_the_kernel_log(self):
        directory = self.useFixture(fixtures.TempDir()).path
        path = fake_nvidia_smi.recorded(directory, {
            '--query-gpu': gpu_hosts.sample_path(
                'nvsmi-h100-80gb-idle-query-gpu.csv'),
            '--query-compute-apps': gpu_hosts.sample_path(
                'nvsmi-h100-80gb-idle-compute-apps.csv')})
        snap = probe.HostProbe(
            path, kernel_log=gpu_hosts.sample_path(
                'handmade-dmesg-nvrm-xid.txt'),
            uptime=lambda: 6000.0, boot_id=lambda: 'boot-1').snapshot()
        self.assertEqual([13, 79], [e.code for e in snap.xids_on(H100)])
        self.assertEqual((6000.0, 'boot-1'), (snap.uptime, snap.boot_id))
        # unreadable: no events, no failure
        snap = probe.HostProbe(
            path, kernel_log=os.path.join(directory, 'absent')).snapshot()
        self.assertTrue(snap.available)
        self.assertEqual((), snap.xids)

    def test_kmsg_character_device_is_read_without_blocking(self):
        if not os.access('/dev/kmsg', os.R_OK):
            self.skipTest('/dev/kmsg is not readable here')
        # the real ring buffer: returns (no NVIDIA driver here) and parses
        text = probe.read_kernel_log('/dev/kmsg')
        self.assertIsInstance(probe.parse_kernel_log(text), tuple)
        # and returns under eventlet's monkey patching too, as in
        # nova-compute (a green os.read waits for the next kernel message)
        code = ('import eventlet; eventlet.monkey_patch()\n'
                'from nova_lxd_accel.accel.health import probe\n'
                'probe.read_kernel_log("/dev/kmsg")\n'
                'print("returned")\n')
        try:
            proc = subprocess.run([sys.executable, '-W', 'ignore', '-c',
                                   code], capture_output=True, text=True,
                                  timeout=120)
        except subprocess.TimeoutExpired:
            self.fail('reading /dev/kmsg under eventlet never returned')
        self.assertEqual('returned', proc.stdout.strip(), proc.stderr)


class TestMigQuery(testtools.TestCase):

    def test_recorded_idle_slices(self):
        mig = nvidia_smi.parse_mig_query(
            gpu_hosts.load_text('nvsmi-h100-80gb-mig-4slices-idle-q.txt'))
        self.assertEqual(
            [(0, 2, 0, 26, 40448), (1, 3, 0, 17, 20096),
             (2, 9, 0, 9, 9984), (3, 10, 0, 9, 9984)],
            [(m.index, m.gi, m.ci, m.memory_used_mib, m.memory_total_mib)
             for m in mig[H100].values()])
        self.assertEqual([()] * 4, [m.apps for m in mig[H100].values()])

    def test_process_in_one_slice(self):
        mig = nvidia_smi.parse_mig_query(
            gpu_hosts.load_text('handmade-nvsmi-h100-mig-slice2-busy-q.txt'))
        self.assertEqual([(48211, 'python3', 4090)],
                         [(a.pid, a.name, a.used_memory_mib)
                          for a in mig[H100][2].apps])
        self.assertEqual((), mig[H100][3].apps)
        self.assertEqual(4100, mig[H100][2].memory_used_mib)

    def test_gpu_without_mig_devices_is_left_out(self):
        self.assertEqual({}, nvidia_smi.parse_mig_query(
            gpu_hosts.load_text('nvsmi-h100-80gb-idle-q.txt')))


class TestProbePower(testtools.TestCase):
    """The probe asks each board's power draw and limit."""

    def test_power_fields_are_asked_and_kept_on_old_drivers(self):
        self.assertIn('power.draw', probe.FIELDS)
        self.assertIn('power.limit', probe.FIELDS)
        # the fallback for drivers without the row remapper keeps them
        fallback = probe.FIELDS[:-len(probe.OPTIONAL_FIELDS)]
        self.assertIn('power.draw', fallback)
        self.assertIn('power.limit', fallback)

    def test_snapshot_has_the_power_draw(self):
        directory = self.useFixture(fixtures.TempDir()).path
        log = os.path.join(directory, 'args.log')
        path = os.path.join(directory, 'nvidia-smi')
        with open(path, 'w') as f:
            f.write('#!/bin/sh\necho "$@" >> %s\ncase "$1" in\n'
                    '  --query-gpu=*) cat %s ;;\n'
                    '  --query-compute-apps=*) cat %s ;;\n'
                    '  *) exit 9 ;;\nesac\n' % (
                        log,
                        gpu_hosts.sample_path(
                            'nvsmi-h100-80gb-idle-query-gpu.csv'),
                        gpu_hosts.sample_path(
                            'nvsmi-h100-80gb-idle-compute-apps.csv')))
        os.chmod(path, stat.S_IRWXU)
        snap = probe.HostProbe(path).snapshot()
        [facts] = snap.gpus.values()
        self.assertEqual(69.85, facts.power_draw_w)
        with open(log) as f:
            asked = f.readline().split()[0]
        self.assertIn('power.draw', asked.split('=', 1)[1].split(','))
