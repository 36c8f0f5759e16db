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

"""``nova-lxd-accel doctor``: its table, its inputs and its exit statuses.

The checks themselves are :mod:`nova_lxd_accel.advice.diagnosis`'s (see
``tests/unit/advice/test_diagnosis.py``; ``test_gpu`` runs them on the recorded
hosts of ``samples/doctor``). Here: what the operator reads (the table and
its ``fix:`` lines, the JSON), unusable inputs (exit 2, one error line),
``--at``, and the live host view, whose daemon answers are the recorded
LXD 5.0.2 answers of ``tests/unit/samples`` served at the HTTP boundary.
"""

import argparse
import json
import os
import shutil

import fixtures
from requests_mock.contrib import fixture as requests_mock_fixture
import testtools

from nova_lxd_accel.advice import diagnosis
from nova_lxd_accel import client as lxd_client
from nova_lxd_accel.cmd import common
from nova_lxd_accel.cmd import doctor
from nova_lxd_accel.container import identity
from nova_lxd_accel import exception
from nova_lxd_accel import host as lxd_host
from tests.fixtures import host_cli
from tests.fixtures import seam_helpers

AT = host_cli.AT


def _conf(test):
    """This package's options from an empty nova.conf."""
    path = os.path.join(test.useFixture(fixtures.TempDir()).path,
                        'nova.conf')
    with open(path, 'w') as f:
        f.write('[DEFAULT]\n')
    return common.load_conf(argparse.Namespace(config_file=[path],
                                               state_dir=None))


class TestFormatTable(testtools.TestCase):

    def test_fix_lines_follow_what_is_not_ok(self):
        findings = [
            diagnosis.Finding('daemon', diagnosis.OK, 'LXD 5.0.2 reachable',
                              'never shown'),
            diagnosis.Finding('nvidia-cdi', diagnosis.WARN, 'no CDI spec',
                              'run nvidia-ctk'),
            diagnosis.Finding('gpu-held', diagnosis.INFO, 'GPU held',
                              'release it'),
            diagnosis.Finding('gpu-health', diagnosis.ERROR, 'GPU unhealthy',
                              'reset it'),
            diagnosis.Finding('cgroup', diagnosis.WARN, 'cgroup v1')]
        self.assertEqual([
            'CHECK       STATUS   FINDING',
            'daemon      OK       LXD 5.0.2 reachable',
            'nvidia-cdi  WARNING  no CDI spec',
            '                     fix: run nvidia-ctk',
            'gpu-held    INFO     GPU held',
            '                     fix: release it',
            'gpu-health  ERROR    GPU unhealthy',
            '                     fix: reset it',
            'cgroup      WARNING  cgroup v1'],
            doctor.format_table(findings).splitlines())

    def test_short_check_names_keep_the_header_width(self):
        lines = doctor.format_table([diagnosis.Finding(
            'mig', diagnosis.OK, 'fine')]).splitlines()
        self.assertEqual(['CHECK  STATUS   FINDING',
                          'mig    OK       fine'], lines)


class TestRecorded(host_cli.RecordedHost):

    def test_table_of_an_unhealthy_host_exits_1(self):
        rc, out, err = host_cli.run('doctor', '--recorded', self.host(
            'a100-unhealthy-no-cdi'), '--at', AT)
        self.assertEqual((1, ''), (rc, err))
        lines = out.splitlines()
        self.assertEqual(['CHECK', 'STATUS', 'FINDING'], lines[0].split())
        [health] = [i for i, line in enumerate(lines)
                    if line.startswith('gpu-health ')]
        self.assertIn('ERROR    GPU 0000:07:00.0 is unhealthy: 2 '
                      'uncorrectable ECC errors', lines[health])
        self.assertIn('fix: repair or reset it (nvidia-smi -r -i '
                      '0000:07:00.0)', lines[health + 1])

    def test_json_status_is_the_worst_finding(self):
        rc, status, found, data = self.doctor(self.host('h100-mig-cdi'))
        self.assertEqual((0, diagnosis.WARN), (rc, status))
        self.assertEqual(diagnosis.worst(
            [diagnosis.Finding(**f) for f in data['findings']]), status)
        for finding in data['findings']:
            self.assertEqual({'check', 'status', 'message', 'fix'},
                             set(finding))

    def test_at_decides_what_is_idle(self):
        # the bound slice was last busy at 1784007200; idle after a day
        path = self.host('h100-mig-cdi')
        for at, idle in (('1784050000', False), ('1784093600', True)):
            rc, out, _ = host_cli.run('doctor', '--recorded', path,
                                      '--format', 'json', '--at', at)
            checks = {f['check'] for f in json.loads(out)['findings']}
            self.assertEqual(idle, 'gpu-idle' in checks, at)

    def test_recorded_directory_that_does_not_exist_is_bad_input(self):
        path = os.path.join(self.useFixture(fixtures.TempDir()).path, 'no')
        rc, out, err = host_cli.run('doctor', '--recorded', path)
        self.assertEqual((2, ''), (rc, out))
        self.assertEqual(
            'nova-lxd-accel doctor: error: %s: no such directory (--recorded'
            ' takes the directory of a recorded host)\n' % path, err)

    def test_server_json_that_is_not_json_is_bad_input(self):
        path = self.host('cpu-only-lxd502')
        with open(os.path.join(path, 'server.json'), 'w') as f:
            f.write('{"environment": ')
        rc, out, err = host_cli.run('doctor', '--recorded', path)
        self.assertEqual((2, ''), (rc, out))
        self.assertEqual(1, err.count('\n'), err)
        self.assertTrue(err.startswith('nova-lxd-accel doctor: error: '), err)

    def test_state_file_that_is_not_json_is_bad_input(self):
        path = self.host('h100-mig-cdi')
        state = os.path.join(path, 'state', 'gpu-state.json')
        with open(state, 'w') as f:
            f.write('{"holds": {')
        rc, out, err = host_cli.run('doctor', '--recorded', path)
        self.assertEqual((2, ''), (rc, out))
        self.assertIn(state + ' is not valid JSON', err)

    def test_host_without_nvidia_smi_answers_has_no_gpu_facts(self):
        path = self.host('a100-unhealthy-no-cdi')
        for name in ('query-gpu.csv', 'compute-apps.csv'):
            os.unlink(os.path.join(path, name))
        view = doctor.recorded_view(_conf(self), path, float(AT))
        self.assertEqual((False, {}), (view.snapshot.available,
                                       view.snapshot.gpus))
        self.assertEqual('no nvidia-smi: no GPU', view.snapshot.error)
        self.assertEqual(['0000:07:00.0'], sorted(view.state['holds']))

    def mig_findings(self, path):
        _rc, _status, _found, data = self.doctor(path)
        return {f['check']: f for f in data['findings']}

    def test_mig_capability_mode(self):
        # devfs mode with its nodes: fine
        path = self.host('h100-mig-cdi')
        found = self.mig_findings(path)
        self.assertEqual('ok', found['mig-capabilities']['status'])
        caps = os.path.join(path, 'root', 'dev', 'nvidia-caps')
        # a node missing (nvidia-modprobe -f never ran)
        os.unlink(os.path.join(caps, 'nvidia-cap2'))
        found = self.mig_findings(path)
        self.assertEqual('warning', found['mig-capabilities']['status'])
        self.assertIn('/dev/nvidia-caps/nvidia-cap2',
                      found['mig-capabilities']['message'])
        # procfs mode
        param = os.path.join(path, 'root', 'sys', 'module', 'nvidia',
                             'parameters', 'nv_cap_enable_devfs')
        with open(param, 'w') as f:
            f.write('0\n')
        found = self.mig_findings(path)
        self.assertEqual('warning', found['mig-capabilities']['status'])
        self.assertIn('procfs', found['mig-capabilities']['message'])
        # no capability files at all: cannot tell, a warning, never an error
        os.unlink(param)
        shutil.rmtree(os.path.join(path, 'root', 'proc', 'driver', 'nvidia',
                                   'capabilities'))
        found = self.mig_findings(path)
        self.assertEqual('warning', found['mig-capabilities']['status'])
        self.assertIn('cannot tell', found['mig-capabilities']['message'])
        # no GPU in MIG mode: no finding
        path = self.host('a100-unhealthy-no-cdi')
        found = self.mig_findings(path)
        self.assertNotIn('mig-capabilities', found)

    def test_bad_configuration_exits_2_before_looking(self):
        conf = os.path.join(self.useFixture(fixtures.TempDir()).path,
                            'nova.conf')
        with open(conf, 'w') as f:
            f.write('[lxd_accelerators]\nreport_mig = perhaps\n')
        rc, out, err = host_cli.run('doctor', '--recorded',
                                    self.host('cpu-only-lxd502'),
                                    '--config-file', conf)
        self.assertEqual((2, ''), (rc, out))
        self.assertIn('nova-lxd-accel doctor: error: %s' % conf, err)
        self.assertIn('report_mig', err)


class TestLiveHost(testtools.TestCase):
    """The live view: the daemon's answers are recorded LXD 5.0.2 ones."""

    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path
        self.socket = seam_helpers.SocketFile()
        self.addCleanup(self.socket.close)
        self.useFixture(fixtures.FakeLogger(name='nova_lxd_accel'))

    def serve(self, *steps):
        mock = self.useFixture(requests_mock_fixture.Fixture())
        exchanges = []
        for step in steps:
            exchanges += seam_helpers.load('lxd-5.0.2', step)['exchanges']
        mock.add_matcher(seam_helpers.Replay(exchanges))

    def conf(self, pool='default', endpoint=None, lxd=''):
        path = os.path.join(self.tmp, 'nova.conf')
        with open(path, 'w') as f:
            f.write('[lxd]\nendpoint = %s\nproject = %s\ntimeout = %d\n'
                    'storage_pool = %s\n%s[lxd_accelerators]\n'
                    'nvidia_smi_path = %s\nstate_dir = %s\nkernel_log =\n' % (
                        endpoint or self.socket.path, seam_helpers.PROJECT,
                        seam_helpers.TIMEOUT, pool, lxd,
                        os.path.join(self.tmp, 'no-nvidia-smi'),
                        os.path.join(self.tmp, 'state')))
        return path

    def doctor(self, conf):
        rc, out, err = host_cli.run('doctor', '--format', 'json',
                                    '--config-file', conf)
        data = json.loads(out)
        return rc, {f['check']: f for f in data['findings']}

    def test_reachable_daemon_and_its_storage_pool(self):
        self.serve('server_info', 'host_reads')
        rc, found = self.doctor(self.conf())
        self.assertEqual(('ok', 'LXD 5.0.2 reachable'),
                         (found['daemon']['status'],
                          found['daemon']['message']))
        self.assertEqual('ok', found['daemon-extensions']['status'])
        self.assertEqual(('ok', 'storage pool "default" exists'),
                         (found['storage-pool']['status'],
                          found['storage-pool']['message']))
        # the recorded daemon's host has no GPU
        self.assertEqual('info', found['gpu']['status'])

    def test_missing_storage_pool_is_an_error_with_its_fix(self):
        self.serve('server_info', 'host_reads')
        rc, found = self.doctor(self.conf(pool='gpu-pool'))
        self.assertEqual(1, rc)
        pool = found['storage-pool']
        self.assertEqual('error', pool['status'])
        self.assertTrue(pool['message'].startswith(
            'storage pool "gpu-pool": '), pool['message'])
        self.assertEqual('create the pool or set [lxd] storage_pool',
                         pool['fix'])

    def test_unreachable_daemon_is_an_error_and_the_pool_is_not_asked(self):
        gone = os.path.join(self.tmp, 'unix.socket')
        rc, found = self.doctor(self.conf(endpoint=gone))
        self.assertEqual(1, rc)
        self.assertEqual('error', found['daemon']['status'])
        self.assertIn('the LXD daemon is not reachable: ',
                      found['daemon']['message'])
        self.assertIn(gone, found['daemon']['message'])
        self.assertIn('set [lxd] endpoint', found['daemon']['fix'])
        self.assertNotIn('storage-pool', found)
        self.assertNotIn('daemon-extensions', found)

    def test_the_daemon_passes_nova_computes_start_up_check(self):
        self.serve('server_info', 'host_reads')
        rc, found = self.doctor(self.conf())
        self.assertEqual('ok', found['daemon-usable']['status'])

    def test_doctor_refuses_what_nova_compute_refuses_at_its_start(self):
        # a profile of [lxd] profiles the daemon does not have: every
        # check of doctor's own passes, nova-compute's init_host refuses
        self.serve('server_info', 'host_reads')
        path = self.conf(lxd='profiles = gpu-extra\n')
        conf = common.load_conf(argparse.Namespace(config_file=[path],
                                                   state_dir=None))
        client = lxd_client.LXDClient(conf)
        refused = self.assertRaises(
            exception.DaemonNotUsable,
            lxd_host.Host(client, conf, identity.Owner(host='cmp1')).check)
        self.assertIn('profiles gpu-extra do not exist', str(refused))
        rc, found = self.doctor(path)
        self.assertEqual(1, rc)
        usable = found['daemon-usable']
        self.assertEqual(
            ('error', 'nova-compute refuses this daemon at its start: %s'
             % refused), (usable['status'], usable['message']))
        self.assertEqual('ok', found['daemon-extensions']['status'])
        self.assertEqual('ok', found['storage-pool']['status'])

    def test_live_view_reads_the_state_directory(self):
        self.serve('server_info', 'host_reads')
        state = os.path.join(self.tmp, 'state')
        shutil.copytree(os.path.join(host_cli.SAMPLES,
                                     'a100-unhealthy-no-cdi', 'state'),
                        state)
        rc, found = self.doctor(self.conf())
        # a hold on a GPU the host does not show is still reported
        self.assertEqual(1, rc)
        self.assertIn('GPU 0000:07:00.0 is unhealthy',
                      found['gpu-health']['message'])
