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

"""doctor, usage, idle, metrics and gpu on recorded host states.

The hosts are ``samples/doctor/*`` (see its README); the commands run
through ``nova-lxd-accel``'s own entry point.
"""

import json
import os
import shutil

import fixtures

from nova_lxd_accel.cmd import gpu
from tests.fixtures import host_cli

SAMPLES = host_cli.SAMPLES
AT = host_cli.AT
IDLE = host_cli.IDLE
run = host_cli.run


class TestDoctor(host_cli.RecordedHost):

    def test_cpu_only_host_says_no_gpu_and_passes(self):
        rc, status, found, _ = self.doctor(self.host('cpu-only-lxd502'))
        self.assertEqual(0, rc)
        self.assertIn(('gpu', 'info'), found)
        rc, out, _ = run('doctor', '--recorded', self.host(
            'cpu-only-lxd502'))
        self.assertEqual(0, rc)
        self.assertIn('no GPU', out)

    def test_h100_mig_host(self):
        rc, status, found, data = self.doctor(self.host('h100-mig-cdi'))
        self.assertEqual((0, 'warning'), (rc, status))
        for check in ('daemon', 'daemon-extensions', 'nvidia-driver',
                      'nvidia-cdi', 'mig', 'iommu', 'cgroup', 'nova-conf'):
            self.assertIn((check, 'ok'), found)
        self.assertIn(('gpu-dirty', 'warning'), found)
        self.assertIn(('gpu-idle', 'warning'), found)

    def test_unhealthy_gpu_is_an_error(self):
        rc, status, found, data = self.doctor(self.host(
            'a100-unhealthy-no-cdi'))
        self.assertEqual((1, 'error'), (rc, status))
        self.assertIn(('gpu-health', 'error'), found)
        self.assertIn(('nvidia-cdi', 'warning'), found)
        [health] = [f for f in data['findings']
                    if f['check'] == 'gpu-health']
        self.assertIn('nova-lxd-accel gpu release 0000:07:00.0',
                      health['fix'])

    def test_unprobeable_gpu_is_an_error_with_its_fix(self):
        # nova-compute held the GPU: nvidia-smi did not answer
        path = self.host('a100-unhealthy-no-cdi')
        state = os.path.join(path, 'state', 'gpu-state.json')
        with open(state) as f:
            data = json.load(f)
        data['holds'] = {'0000:07:00.0': {
            'kind': 'unprobeable', 'since': 1784093000.0,
            'by': 'nova-compute',
            'reason': 'the GPU probe failed 3 times in a row (last: '
                      'nvidia-smi did not answer within 10 seconds)'}}
        with open(state, 'w') as f:
            json.dump(data, f)
        rc, status, found, data = self.doctor(path)
        self.assertEqual((1, 'error'), (rc, status))
        [finding] = [f for f in data['findings']
                     if f['check'] == 'gpu-unprobeable']
        self.assertIn('GPU 0000:07:00.0 is not offered: the GPU probe '
                      'failed 3 times', finding['message'])
        self.assertIn('make nvidia-smi answer', finding['fix'])
        self.assertNotIn(('gpu-health', 'error'), found)

    def test_gone_gpu_is_reported_gone_in_doctor_and_metrics(self):
        path = self.host('a100-unhealthy-no-cdi')
        state = os.path.join(path, 'state', 'gpu-state.json')
        with open(state) as f:
            data = json.load(f)
        data['holds'] = {'0000:07:00.0': {
            'kind': 'unhealthy', 'since': 1784093000.0, 'gone': True,
            'by': 'nova-compute',
            'reason': 'fallen off the bus (nvidia-smi no longer lists it)'}}
        with open(state, 'w') as f:
            json.dump(data, f)
        rc, status, found, data = self.doctor(path)
        self.assertEqual((1, 'error'), (rc, status))
        [finding] = [f for f in data['findings']
                     if f['check'] == 'gpu-gone']
        self.assertIn('GPU 0000:07:00.0 is gone', finding['message'])
        self.assertIn('Xid 79', finding['fix'])
        metrics = os.path.join(path, 'gpu.prom')
        rc, _, _ = run('metrics', '--state-dir', os.path.join(path, 'state'),
                       '--output', metrics, '--at', AT)
        with open(metrics) as f:
            text = f.read()
        self.assertIn('nova_lxd_accel_gpu_state{pci="0000:07:00.0",'
                      'state="gone"} 1', text)

    def shared_host(self, shared_gpus='0000:07:00.0:4'):
        """A recorded A100 host and a nova.conf sharing its GPU."""
        path = self.host('a100-unhealthy-no-cdi')
        conf = os.path.join(path, 'nova.conf')
        with open(conf, 'w') as f:
            f.write('[lxd_accelerators]\n%s' % (
                'shared_gpus = %s\n' % shared_gpus if shared_gpus else ''))
        return path, conf

    def findings(self, path, conf, check):
        """(status, message) of doctor's findings of ``check``."""
        rc, out, _ = run('doctor', '--recorded', path, '--format', 'json',
                         '--at', AT, '--config-file', conf)
        return [(f['status'], f['message'])
                for f in json.loads(out)['findings'] if f['check'] == check]

    def test_shared_gpu_slots_and_mps_directories(self):
        path, conf = self.shared_host()

        def shared():
            return self.findings(path, conf, 'gpu-shared')

        found = shared()
        self.assertEqual(('info', 'GPU 0000:07:00.0 shared in 4 slots: '
                          'none used'), found[0])
        self.assertEqual(['warning', 'warning'], [s for s, _ in found[1:]])
        self.assertIn('/run/nvidia-mps-0000:07:00.0 of GPU', found[1][1])
        for sub in ('nvidia-mps-0000:07:00.0', 'nvidia-mps-0000:07:00.0-shm'):
            os.makedirs(os.path.join(path, 'root', 'run', sub))
        self.assertEqual(1, len(shared()))

    def test_shared_host_reports_what_mps_v3_could_use(self):
        path, conf = self.shared_host()

        def mps_v3():
            return self.findings(path, conf, 'mps-v3')

        root = os.path.join(path, 'root')
        for name, text in (
                ('sys/fs/cgroup/cgroup.controllers', 'cpu memory dmem\n'),
                ('sys/fs/cgroup/dmem.capacity',
                 'nvidia/0000:07:00.0/vidmem 85899345920\n'),
                ('proc/driver/nvidia/version', 'NVRM version: NVIDIA UNIX '
                 'x86_64 Kernel Module  615.10  Sun Jan 1 2026\n')):
            os.makedirs(os.path.dirname(os.path.join(root, name)),
                        exist_ok=True)
            with open(os.path.join(root, name), 'w') as f:
                f.write(text)
        [(status, message)] = mps_v3()
        self.assertEqual('info', status)
        self.assertIn('MPS v3 memory partitioning: kernel (dmem regions: '
                      'nvidia/0000:07:00.0/vidmem)', message)
        with open(os.path.join(root, 'proc/driver/nvidia/version'), 'w') as f:
            f.write('NVRM version: NVIDIA UNIX x86_64 Kernel Module  '
                    '570.133.20  Sun Jan 1 2026\n')
        [(status, message)] = mps_v3()
        self.assertIn('none (NVIDIA driver 570 is older than r615', message)
        # a host that shares no GPU is told nothing of it
        path, conf = self.shared_host(shared_gpus=None)
        self.assertEqual([], self.findings(path, conf, 'mps-v3'))

    def test_unreachable_daemon(self):
        path = self.host('cpu-only-lxd502')
        os.unlink(os.path.join(path, 'server.json'))
        rc, status, found, _ = self.doctor(path)
        self.assertEqual(1, rc)
        self.assertIn(('daemon', 'error'), found)

    def test_nvidia_without_driver(self):
        path = self.host('h100-mig-cdi')
        shutil.rmtree(os.path.join(path, 'root', 'proc'))
        shutil.rmtree(os.path.join(path, 'root', 'sys', 'module'))
        rc, _, found, _ = self.doctor(path)
        self.assertEqual(1, rc)
        self.assertIn(('nvidia-driver', 'error'), found)

    def test_mig_mode_without_slices(self):
        path = self.host('h100-mig-cdi')
        with open(os.path.join(path, 'nvidia-smi-L.txt'), 'w') as f:
            f.write('GPU 0: NVIDIA H100 80GB HBM3 (UUID: '
                    'GPU-00000000-0000-0000-0000-000000000000)\n')
        _, _, found, _ = self.doctor(path)
        self.assertIn(('mig', 'warning'), found)

    def test_nvidia_gpu_without_nvidia_smi(self):
        path = self.host('h100-mig-cdi')
        os.unlink(os.path.join(path, 'query-gpu.csv'))
        rc, _, found, _ = self.doctor(path)
        self.assertEqual(1, rc)
        self.assertIn(('nvidia-smi', 'error'), found)
        self.assertIn(('nova-conf', 'error'), found)

    def test_infiniband_without_modules(self):
        path = self.host('cpu-only-lxd502')
        with open(os.path.join(os.path.dirname(__file__), '..', 'accel',
                               'samples',
                               'maas-lp1939456-connectx3-infiniband.json')) \
                as f:
            network = json.load(f)['network']
        with open(os.path.join(path, 'resources.json'), 'w') as f:
            json.dump({'gpu': {'cards': []}, 'network': network}, f)
        _, _, found, _ = self.doctor(path)
        self.assertIn(('infiniband', 'error'), found)
        self.assertIn(('cgroup', 'warning'), found)


class TestUsageIdleMetrics(host_cli.RecordedHost):

    def state_dir(self, name='h100-mig-cdi'):
        return os.path.join(self.host(name), 'state')

    def test_usage_per_instance_and_project(self):
        rc, out, _ = run('usage', '--state-dir', self.state_dir(),
                         '--format', 'json')
        self.assertEqual(0, rc)
        rows = {r['instance']: r for r in json.loads(out)}
        self.assertEqual((26.0, 2.0, 7.7),
                         (rows[IDLE]['allocated_gpu_hours'],
                          rows[IDLE]['busy_gpu_hours'],
                          rows[IDLE]['busy_percent']))
        rc, out, _ = run('usage', '--state-dir', self.state_dir(), '--by',
                         'project', '--format', 'json')
        [row] = json.loads(out)
        self.assertEqual((2, 36.0, 11.167),
                         (row['instances'], row['allocated_gpu_hours'],
                          row['busy_gpu_hours']))
        rc, out, _ = run('usage', '--state-dir', self.state_dir())
        self.assertIn(IDLE, out)

    def test_usage_without_gpus(self):
        rc, out, _ = run('usage', '--state-dir', self.state_dir(
            'cpu-only-lxd502'))
        self.assertEqual(0, rc)
        self.assertIn('No GPU usage recorded', out)

    def test_idle(self):
        rc, out, _ = run('idle', '--state-dir', self.state_dir(), '--at',
                         AT, '--format', 'json')
        [unit] = json.loads(out)
        self.assertEqual((IDLE, '0000:00:09.0', 92800.0),
                         (unit['instance'], unit['pci'], unit['idle_s']))
        rc, out, _ = run('idle', '--state-dir', self.state_dir(), '--at',
                         AT, '--after', '100000')
        self.assertIn('No GPU of a running instance', out)

    def test_metrics_file(self):
        out_file = os.path.join(self.useFixture(fixtures.TempDir()).path,
                                'gpu.prom')
        rc, _, _ = run('metrics', '--state-dir', self.state_dir(), '--at',
                       AT, '--output', out_file)
        self.assertEqual(0, rc)
        with open(out_file) as f:
            text = f.read()
        self.assertIn('nova_lxd_accel_gpu_state{pci="0000:00:09.0",'
                      'state="reserved-dirty"} 1', text)
        self.assertIn('nova_lxd_accel_gpu_dirty_units{pci="0000:00:09.0"} 1',
                      text)
        self.assertIn('nova_lxd_accel_gpu_idle_seconds{instance="%s"' % IDLE,
                      text)


class TestGpuCommand(host_cli.RecordedHost):

    def test_hold_list_release(self):
        state = self.state_dir()
        self.assertEqual(0, run('gpu', 'hold', '00:09.0', '--reason',
                                'firmware update', '--state-dir', state)[0])
        rc, out, _ = run('gpu', 'list', '--state-dir', state)
        self.assertIn('0000:00:09.0   operator', out)
        self.assertIn('firmware update', out)
        rc, out, _ = run('gpu', 'release', '0000:00:09.0', '--reason', 'done',
                         '--state-dir', state)
        self.assertIn('released (was operator: firmware update)', out)
        rc, out, _ = run('gpu', 'release', '0000:00:09.0', '--reason', 'x',
                         '--state-dir', state)
        self.assertIn('was not held', out)

    def forget_setup(self):
        state = self.state_dir()
        path = os.path.join(state, 'gpu-state.json')
        with open(path) as f:
            data = json.load(f)
        data['dirty'] = {'pci:0000:00:09.0': {
            'pci': '0000:00:09.0', 'resource_class': 'PGPU',
            'instance': IDLE, 'since': 1784093000.0, 'seq': 1,
            'holding': 'compute processes ./gpu_burn (pid 11345)'}}
        with open(path, 'w') as f:
            json.dump(data, f)
        instances = os.path.join(state, 'instances.json')
        with open(instances, 'w') as f:
            json.dump([], f)
        return state, instances

    def test_forget_drops_a_dirty_unit_and_records_it(self):
        state, instances = self.forget_setup()
        rc, out, _ = run('gpu', 'forget', 'pci:0000:00:09.0', '--reason',
                         'GPU reset by hand', '--state-dir', state,
                         '--instances-file', instances)
        self.assertEqual(0, rc)
        self.assertIn('pci:0000:00:09.0 of GPU 0000:00:09.0 forgotten', out)
        with open(os.path.join(state, 'gpu-state.json')) as f:
            data = json.load(f)
        self.assertEqual({}, data['dirty'])
        event = data['events'][-1]
        self.assertEqual(('forget', 'pci:0000:00:09.0', 'GPU reset by hand'),
                         (event['event'], event['unit'], event['reason']))
        # nothing left to forget
        rc, _, err = run('gpu', 'forget', 'pci:0000:00:09.0', '--reason',
                         'again', '--state-dir', state,
                         '--instances-file', instances)
        self.assertEqual(2, rc)
        self.assertIn('not a released unit waiting', err)

    def test_forget_audits_the_operator_behind_sudo_and_the_entry(self):
        state, instances = self.forget_setup()
        self.useFixture(fixtures.EnvironmentVariable('SUDO_USER', 'alice'))
        log = self.useFixture(fixtures.FakeLogger(
            name='nova_lxd_accel.cmd.gpu'))
        rc, out, err = run('gpu', 'forget', 'pci:0000:00:09.0', '--reason',
                           'GPU reset by hand', '--state-dir', state,
                           '--instances-file', instances)
        self.assertEqual(0, rc, err)
        with open(os.path.join(state, 'gpu-audit.jsonl')) as f:
            lines = [json.loads(line) for line in f]
        self.assertEqual(1, len(lines))
        line = lines[0]
        self.assertEqual(
            ('forget', 'pci:0000:00:09.0', 'alice', 'GPU reset by hand',
             os.getuid()),
            (line['action'], line['unit'], line['by'], line['reason'],
             line['uid']))
        self.assertEqual('compute processes ./gpu_burn (pid 11345)',
                         line['entry']['holding'])
        self.assertEqual(1, line['entry']['seq'])
        # the state's event names the operator too, not the sudo target
        with open(os.path.join(state, 'gpu-state.json')) as f:
            self.assertEqual('alice', json.load(f)['events'][-1]['by'])
        self.assertIn('forgotten by alice', log.output)
        self.assertIn('gpu-audit.jsonl', log.output)

    def test_forget_never_drops_a_release_it_did_not_check(self):
        # between the command's check and its write the unit was verified
        # clean, bound to another project and released dirty again
        state, instances = self.forget_setup()
        path = os.path.join(state, 'gpu-state.json')
        real = gpu._live_holders

        def release_again(conf, args):
            with open(path) as f:
                data = json.load(f)
            data['dirty']['pci:0000:00:09.0'].update(
                instance='other-instance', seq=7,
                holding='compute processes ./miner (pid 4242)')
            with open(path, 'w') as f:
                json.dump(data, f)
            return real(conf, args)

        self.useFixture(fixtures.MockPatchObject(
            gpu, '_live_holders', side_effect=release_again))
        rc, _, err = run('gpu', 'forget', 'pci:0000:00:09.0', '--reason',
                         'GPU reset by hand', '--state-dir', state,
                         '--instances-file', instances)
        self.assertEqual(1, rc)
        self.assertIn('released again meanwhile', err)
        with open(path) as f:
            kept = json.load(f)['dirty']['pci:0000:00:09.0']
        self.assertEqual(('other-instance', 7),
                         (kept['instance'], kept['seq']))

    def test_forget_without_a_reason_is_refused(self):
        state, instances = self.forget_setup()
        rc, _, err = run('gpu', 'forget', 'pci:0000:00:09.0', '--reason',
                         '  ', '--state-dir', state,
                         '--instances-file', instances)
        self.assertEqual(2, rc)
        self.assertIn('--reason must say why', err)
        self.assertFalse(os.path.exists(os.path.join(state,
                                                     'gpu-audit.jsonl')))

    def test_forget_refuses_a_unit_a_live_container_holds(self):
        state, instances = self.forget_setup()
        with open(instances, 'w') as f:
            json.dump([{'name': 'nova-x', 'status': 'Running', 'config': {
                'user.nova_lxd_accel.devices': json.dumps([{
                    'name': 'nova-gpu0', 'kind': 'pgpu', 'unit':
                    'pci:0000:00:09.0', 'pci': '0000:00:09.0'}])},
                'devices': {'nova-gpu0': {'type': 'gpu',
                                          'pci': '0000:00:09.0'}}}], f)
        rc, _, err = run('gpu', 'forget', 'pci:0000:00:09.0', '--reason',
                         'x', '--state-dir', state,
                         '--instances-file', instances)
        self.assertEqual(2, rc)
        self.assertIn('bound to a live container', err)
        with open(os.path.join(state, 'gpu-state.json')) as f:
            self.assertIn('pci:0000:00:09.0', json.load(f)['dirty'])

    def test_bad_address(self):
        state = self.state_dir()
        with open(os.path.join(state, 'gpu-state.json')) as f:
            before = f.read()
        # a shell command after the address, a function number out of
        # range, a bus of three digits: refused, one line, nothing written
        for address in ('gpu0', '0000:3b:00.0;rm -rf /', '0000:3b:00.8',
                        '0000:3b:000.0', '0000:3b:00.0 0000:3c:00.0'):
            for action in ('hold', 'release'):
                rc, out, err = run('gpu', action, address, '--reason', 'x',
                                   '--state-dir', state)
                self.assertEqual(2, rc, address)
                self.assertIn('not a PCI address', err)
                self.assertEqual(1, len(err.strip().splitlines()), err)
                self.assertEqual('', out)
        with open(os.path.join(state, 'gpu-state.json')) as f:
            self.assertEqual(before, f.read())
        # nvidia-smi's form of an address is still taken
        self.assertEqual(0, run('gpu', 'hold', '00000000:00:09.0',
                                '--reason', 'fan', '--state-dir', state)[0])

    def test_a_state_file_of_another_shape_is_bad_input_everywhere(self):
        state = self.state_dir()
        path = os.path.join(state, 'gpu-state.json')
        for text in ('[]', '{"holds": []}', '{"usage": {"i": {"units": []}}}',
                     '{"dirty": {"pci:0000:00:09.0": 1}}'):
            with open(path, 'w') as f:
                f.write(text)
            for argv in (('gpu', 'list'),
                         ('gpu', 'hold', '0000:00:09.0', '--reason', 'x'),
                         ('gpu', 'forget', 'pci:0000:00:09.0', '--reason',
                          'x'),
                         ('usage',), ('idle',), ('metrics',)):
                rc, out, err = run(*(argv + ('--state-dir', state)))
                self.assertEqual((2, ''), (rc, out), (argv, text, err))
                self.assertIn('is not a GPU state file', err)
                self.assertEqual(1, len(err.strip().splitlines()), err)
            with open(path) as f:
                self.assertEqual(text, f.read())

    state_dir = TestUsageIdleMetrics.state_dir
