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

"""``nova-lxd-accel usage``, ``idle`` and ``metrics`` on GPU state files.

Run through the command's own entry point on state files written in the
state store's format (``gpu-state.json``), or the recorded H100 host of
``samples/doctor/h100-mig-cdi``. What ``test_gpu`` and ``test_apel``
already check (the recorded host's hours, ``--export``) is not repeated:
here the sums and rounding of :func:`usage.usage_rows`, the tables, the
switches of ``idle``, metrics on standard output and the exit statuses of
unusable files.
"""

import json
import os
import shutil

import fixtures
import testtools

from nova_lxd_accel.cmd import usage
from tests.fixtures import host_cli

AT = 1784100000
IDLE = host_cli.IDLE
PROJECT = '3f0b4c5d6e7f40a1b2c3d4e5f6a7b8c9'

#: three instances: two units of one GPU, a whole GPU, and a unit of an
#: instance without a project that was never allocated a second
STATE = {
    'version': 1, 'baseline': {}, 'bound': {}, 'dirty': {}, 'holds': {},
    'events': [],
    'usage': {
        'inst-b': {'project': 'proj-2', 'units': {
            'pci:0000:07:00.0': {'pci': '0000:07:00.0',
                                 'resource_class': 'PGPU',
                                 'allocated_s': 7200.0, 'busy_s': 1800.0}}},
        'inst-a': {'project': 'proj-1', 'units': {
            'mig:A': {'pci': '0000:00:09.0', 'allocated_s': 3600.0,
                      'busy_s': 3600.0},
            'mig:B': {'pci': '0000:00:09.0', 'allocated_s': 3600.0,
                      'busy_s': 0.0}}},
        'inst-c': {'project': None, 'units': {
            'pci:0000:85:00.0': {'pci': '0000:85:00.0',
                                 'allocated_s': 0.0, 'busy_s': 0.0}}},
    },
}


class CommandTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path

    def state_dir(self, state=None, text=None):
        """A state directory holding ``state`` (or the raw ``text``)."""
        path = os.path.join(self.tmp, 'state')
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, 'gpu-state.json'), 'w') as f:
            f.write(text if text is not None else json.dumps(state))
        return path

    def recorded_state_dir(self):
        path = os.path.join(self.tmp, 'h100')
        if not os.path.exists(path):
            shutil.copytree(os.path.join(host_cli.SAMPLES, 'h100-mig-cdi',
                                         'state'), path)
        return path

    def conf(self, text):
        path = os.path.join(self.tmp, 'nova.conf')
        with open(path, 'w') as f:
            f.write(text)
        return path


class TestUsage(CommandTest):

    def test_rows_per_instance(self):
        rows = usage.usage_rows(STATE)
        self.assertEqual(['inst-a', 'inst-b', 'inst-c'],
                         [r['instance'] for r in rows])
        self.assertEqual(
            {'instance': 'inst-a', 'project': 'proj-1', 'instances': 1,
             'gpus': ['0000:00:09.0'], 'allocated_gpu_hours': 2.0,
             'busy_gpu_hours': 1.0, 'busy_percent': 50.0}, rows[0])
        self.assertEqual((2.0, 0.5, 25.0),
                         (rows[1]['allocated_gpu_hours'],
                          rows[1]['busy_gpu_hours'], rows[1]['busy_percent']))

    def test_no_allocated_time_has_no_busy_percent(self):
        row = usage.usage_rows(STATE)[2]
        self.assertEqual(('-', 0.0, None),
                         (row['project'], row['allocated_gpu_hours'],
                          row['busy_percent']))

    def test_rows_per_project_add_up_instances_and_gpus(self):
        rows = usage.usage_rows(STATE, by='project')
        self.assertEqual(['-', 'proj-1', 'proj-2'],
                         [r['project'] for r in rows])
        two = dict(STATE, usage=dict(STATE['usage'], **{
            'inst-d': {'project': 'proj-1', 'units': {
                'pci:0000:07:00.0': {'pci': '0000:07:00.0',
                                     'allocated_s': 1800.0,
                                     'busy_s': 900.0}}}}))
        [_, row, _] = usage.usage_rows(two, by='project')
        self.assertEqual(
            {'project': 'proj-1', 'instances': 2,
             'gpus': ['0000:00:09.0', '0000:07:00.0'],
             'allocated_gpu_hours': 2.5, 'busy_gpu_hours': 1.25,
             'busy_percent': 50.0}, row)

    def test_hours_are_rounded_for_the_operator(self):
        state = {'usage': {'i': {'project': 'p', 'units': {'u': {
            'pci': '0000:07:00.0', 'allocated_s': 10000.0,
            'busy_s': 1000.0}}}}}
        [row] = usage.usage_rows(state)
        self.assertEqual((2.778, 0.278, 10.0),
                         (row['allocated_gpu_hours'], row['busy_gpu_hours'],
                          row['busy_percent']))

    def test_table_per_project(self):
        rc, out, err = host_cli.run('usage', '--state-dir',
                                    self.state_dir(STATE), '--by', 'project')
        self.assertEqual((0, ''), (rc, err))
        header, no_project, first, second = out.splitlines()
        self.assertEqual(['PROJECT', 'INSTANCES', 'ALLOC', 'GPU-h', 'BUSY',
                          'GPU-h', 'BUSY%'], header.split())
        self.assertEqual(['-', '1', '0.00', '0.00', '-'],
                         no_project.split())
        self.assertEqual(['proj-1', '1', '2.00', '1.00', '50.0'],
                         first.split())
        self.assertEqual(['proj-2', '1', '2.00', '0.50', '25.0'],
                         second.split())

    def test_table_per_instance_names_the_project(self):
        rc, out, _ = host_cli.run('usage', '--state-dir',
                                  self.state_dir(STATE))
        lines = out.splitlines()
        self.assertEqual(['INSTANCE', 'PROJECT'], lines[0].split()[:2])
        self.assertEqual(['inst-b', 'proj-2', '2.00', '0.50', '25.0'],
                         lines[2].split())

    def test_json(self):
        rc, out, _ = host_cli.run('usage', '--state-dir',
                                  self.state_dir(STATE), '--format', 'json')
        self.assertEqual(0, rc)
        self.assertEqual(usage.usage_rows(STATE), json.loads(out))

    def test_state_file_that_is_not_json_exits_2_naming_it(self):
        # its content is bad input, as a wrong shape is (test_gpu)
        state = self.state_dir(text='{"usage": ')
        for command in ('usage', 'idle', 'metrics'):
            rc, out, err = host_cli.run(command, '--state-dir', state)
            self.assertEqual((2, ''), (rc, out), command)
            self.assertIn('nova-lxd-accel %s: error: ' % command, err)
            self.assertIn(os.path.join(state, 'gpu-state.json') +
                          ' is not valid JSON', err)

    def test_bad_configuration_exits_2(self):
        conf = self.conf('[lxd_accelerators]\nidle_report_after = soon\n')
        for command in ('usage', 'idle', 'metrics'):
            rc, out, err = host_cli.run(command, '--state-dir',
                                        self.state_dir(STATE),
                                        '--config-file', conf)
            self.assertEqual((2, ''), (rc, out), command)
            self.assertIn('nova-lxd-accel %s: error: %s' % (command, conf),
                          err)
            self.assertIn('idle_report_after', err)


class TestIdle(CommandTest):

    def test_table_line_says_since_when(self):
        rc, out, _ = host_cli.run('idle', '--state-dir',
                                  self.recorded_state_dir(), '--at', str(AT))
        self.assertEqual(0, rc)
        # last busy at 1784007200: 92800 s before AT
        self.assertEqual(
            '0000:00:09.0  instance %s  project %s  '
            'mig:00000000-0000-0000-0000-000000000000  idle since '
            '2026-07-14T05:33:20Z (25.8 h)' % (IDLE, PROJECT), out.strip())

    def test_threshold_comes_from_nova_conf(self):
        conf = self.conf('[lxd_accelerators]\nidle_report_after = 100000\n')
        rc, out, _ = host_cli.run('idle', '--state-dir',
                                  self.recorded_state_dir(), '--at', str(AT),
                                  '--config-file', conf)
        self.assertEqual(0, rc)
        self.assertEqual('No GPU of a running instance has been idle for '
                         '100000 seconds or more.', out.strip())
        # --after wins over nova.conf
        rc, out, _ = host_cli.run('idle', '--state-dir',
                                  self.recorded_state_dir(), '--at', str(AT),
                                  '--config-file', conf, '--after', '3600')
        self.assertIn('idle since', out)

    def test_reporting_off(self):
        conf = self.conf('[lxd_accelerators]\nidle_report_after = 0\n')
        rc, out, _ = host_cli.run('idle', '--state-dir',
                                  self.recorded_state_dir(), '--at', str(AT),
                                  '--config-file', conf)
        self.assertEqual(0, rc)
        self.assertEqual('Idle reporting is off ([lxd_accelerators] '
                         'idle_report_after = 0).', out.strip())
        rc, out, _ = host_cli.run('idle', '--state-dir',
                                  self.recorded_state_dir(), '--at', str(AT),
                                  '--format', 'json')
        self.assertEqual(1, len(json.loads(out)))
        rc, out, _ = host_cli.run('idle', '--state-dir',
                                  self.recorded_state_dir(), '--at', str(AT),
                                  '--format', 'json', '--after', '0')
        self.assertEqual([], json.loads(out))

    def test_unit_of_an_instance_without_project(self):
        state = {'bound': {'pci:0000:07:00.0': {
            'pci': '0000:07:00.0', 'instance': 'inst-x', 'project': None,
            'running': True, 'since': AT - 7200.0}}}
        rc, out, _ = host_cli.run('idle', '--state-dir',
                                  self.state_dir(state), '--at', str(AT),
                                  '--after', '3600')
        self.assertIn('instance inst-x  project -  pci:0000:07:00.0', out)
        self.assertIn('(2.0 h)', out)


class TestMetrics(CommandTest):

    def test_printed_on_stdout_with_held_gpus(self):
        state = {
            'baseline': {'0000:85:00.0': 0},
            'holds': {'0000:07:00.0': {'kind': 'operator',
                                       'reason': 'firmware',
                                       'since': AT - 60.0}},
            'probe': {'at': AT - 30.0, 'available': True}}
        rc, out, err = host_cli.run('metrics', '--state-dir',
                                    self.state_dir(state), '--at', str(AT))
        self.assertEqual((0, ''), (rc, err))
        self.assertIn('# TYPE nova_lxd_accel_gpu_state gauge', out)
        self.assertIn('nova_lxd_accel_gpu_state{pci="0000:07:00.0",'
                      'state="held"} 1', out)
        self.assertIn('nova_lxd_accel_gpu_state{pci="0000:85:00.0",'
                      'state="free"} 1', out)
        self.assertIn('nova_lxd_accel_gpu_probe_timestamp_seconds %d'
                      % (AT - 30), out)
        self.assertTrue(out.endswith('\n'))

    def test_unwritable_output_exits_1(self):
        target = os.path.join(self.tmp, 'no', 'such', 'gpu.prom')
        rc, out, err = host_cli.run('metrics', '--state-dir',
                                    self.state_dir(STATE), '--output',
                                    target)
        self.assertEqual((1, ''), (rc, out))
        self.assertIn('nova-lxd-accel metrics: error: ', err)
        self.assertIn(os.path.join(self.tmp, 'no', 'such'), err)


class TestUsageEnergy(CommandTest):
    """GPU energy beside GPU-hours, once the probe read any power."""

    def energy_state(self):
        state = json.loads(json.dumps(STATE))
        units = state['usage']['inst-a']['units']
        units['mig:A'].update(energy_j=3600.0 * 100, energy_s=3600.0)
        units['mig:B'].update(energy_j=3600.0 * 50, energy_s=3600.0)
        return state

    def test_rows_have_the_energy_in_wh(self):
        rows = {r['instance']: r for r in usage.usage_rows(
            self.energy_state())}
        self.assertEqual(150.0, rows['inst-a']['gpu_energy_wh'])
        # no power reading ever: unknown, not 0 Wh
        self.assertIsNone(rows['inst-b']['gpu_energy_wh'])
        [_, row, _] = usage.usage_rows(self.energy_state(), by='project')
        self.assertEqual(('proj-1', 150.0),
                         (row['project'], row['gpu_energy_wh']))

    def test_table_shows_the_energy_column(self):
        rc, out, err = host_cli.run('usage', '--state-dir',
                                    self.state_dir(self.energy_state()))
        self.assertEqual((0, ''), (rc, err))
        lines = out.splitlines()
        self.assertEqual(['GPU', 'Wh'], lines[0].split()[-2:])
        self.assertEqual(['inst-a', 'proj-1', '2.00', '1.00', '50.0',
                          '150.0'], lines[1].split())
        self.assertEqual('-', lines[2].split()[-1])

    def test_no_energy_column_without_power_readings(self):
        rc, out, _ = host_cli.run('usage', '--state-dir',
                                  self.state_dir(STATE))
        self.assertNotIn('Wh', out)
        self.assertNotIn('gpu_energy_wh', usage.usage_rows(STATE)[0])
