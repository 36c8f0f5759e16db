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

"""Usage accounting: time, busy time and energy of bound units (unit level).

Accounted by refreshes of the gate: its probe runs a script printing
recorded nvidia-smi outputs; its state file is a real one.
"""

import os

import fixtures

from nova_lxd_accel.accel.health import gate_state
from nova_lxd_accel.accel.health import metrics
from tests.fixtures import fake_nvidia_smi
from tests.fixtures import gate_harness
from tests.fixtures import gpu_hosts

H100 = gate_harness.H100
INSTANCE = gate_harness.INSTANCE
h100 = gate_harness.h100
container = gate_harness.container


class TestUsageIdleMetrics(gate_harness.GateTestCase):

    def test_a_release_probe_between_two_refreshes_takes_no_usage(self):
        self.containers = [container()]
        self.gate.refresh()
        self.now += 30
        # another unit's release probes in between (it writes the probe's
        # time, not the accounting's)
        self.gate.verify_release({'pci:0000:00:0a.0'})
        self.now += 30
        self.gate.refresh()
        usage = self.gate.store.load()['usage'][INSTANCE]['units']
        self.assertEqual(60.0, usage['pci:' + H100]['allocated_s'])

    def test_usage_and_idle(self):
        # a probe every half hour: no interval below is a gap
        self.override('probe_interval', 1800)
        self.containers = [container()]
        self.gate.refresh()
        self.host('nvsmi-h100-80gb-load-query-gpu.csv',
                  'nvsmi-h100-80gb-load-compute-apps.csv')
        self.now += 1800
        self.gate.refresh()             # busy for this half hour
        self.host('nvsmi-h100-80gb-idle-query-gpu.csv',
                  'nvsmi-h100-80gb-idle-compute-apps.csv')
        self.now += 1800
        self.gate.refresh()             # idle for this one
        state = self.gate.store.load()
        unit = state['usage'][INSTANCE]['units']['pci:' + H100]
        self.assertEqual((3600.0, 1800.0), (unit['allocated_s'],
                                            unit['busy_s']))
        self.assertEqual('proj-a', state['usage'][INSTANCE]['project'])
        self.assertEqual([], gate_state.idle_units(state, self.conf, self.now))
        self.now += 1800
        self.gate.refresh()
        state = self.gate.store.load()
        idle = gate_state.idle_units(state, self.conf, self.now)
        self.assertEqual([(INSTANCE, 'proj-a', H100, 3600.0)],
                         [(u['instance'], u['project'], u['pci'],
                           u['idle_s']) for u in idle])
        # a stopped instance's GPU is not reported idle
        self.containers = [container(status='Stopped')]
        self.now += 60
        self.gate.refresh()
        self.assertEqual([], gate_state.idle_units(
            self.gate.store.load(), self.conf, self.now))

    def test_metrics_file(self):
        path = os.path.join(self.dir, 'gpu.prom')
        self.override('metrics_file', path)
        self.containers = [container()]
        self.gate.refresh()
        self.now += 7200
        self.gate.refresh()
        with open(path) as f:
            text = f.read()
        self.assertIn('nova_lxd_accel_gpu_state{pci="%s",state="idle"} 1'
                      % H100, text)
        self.assertIn('nova_lxd_accel_gpu_state{pci="%s",state="free"} 0'
                      % H100, text)
        self.assertIn('nova_lxd_accel_gpu_allocated_seconds_total{'
                      'instance="%s",pci="%s",project="proj-a",'
                      'unit="pci:%s"} 7200' % (INSTANCE, H100, H100), text)
        self.assertIn('nova_lxd_accel_gpu_probe_available 1', text)
        self.assertIn('# TYPE nova_lxd_accel_gpu_busy_seconds_total counter',
                      text)

    def test_instances_on_an_unhealthy_gpu_are_exported(self):
        state = gate_state.empty_state()
        state['holds'] = {H100: {'kind': 'unhealthy', 'reason': 'ecc'}}
        state['bound'] = {'pci:' + H100: {'instance': INSTANCE,
                                          'project': 'p', 'pci': H100}}
        text = metrics.render(state, [H100], self.conf, 0)
        self.assertIn('nova_lxd_accel_gpu_instance_on_unhealthy_gpu{'
                      'instance="%s",pci="%s",project="p",unit="pci:%s"} 1'
                      % (INSTANCE, H100, H100), text)
        self.assertIn('nova_lxd_accel_gpu_state{pci="%s",state="unhealthy"} '
                      '1' % H100, text)

    def test_render_escapes_labels(self):
        state = gate_state.empty_state()
        state['usage'] = {'i"1': {'project': 'p\\x', 'units': {
            'pci:a': {'pci': 'a', 'allocated_s': 1.5, 'busy_s': 0}}}}
        text = metrics.render(state, [], self.conf, 0)
        self.assertIn('instance="i\\"1"', text)
        self.assertIn('project="p\\\\x"', text)
        self.assertIn('} 1.5\n', text)


class TestEnergy(gate_harness.GateTestCase):
    """Power and energy per instance through the gate's refresh."""

    def setUp(self):
        super().setUp()
        # INFO and above, of the gate and the energy accounting it runs
        self.log = self.useFixture(fixtures.FakeLogger(
            name='nova_lxd_accel.accel.health'))
        self.containers = [container()]

    def rows(self, power):
        """The recorded idle H100 with ``power.draw`` replaced."""
        rows = gpu_hosts.load_text('nvsmi-h100-80gb-idle-query-gpu.csv')
        header, row = rows.splitlines()
        fields = [f.split('[')[0].strip() for f in header.split(',')]
        values = [v.strip() for v in row.split(',')]
        values[fields.index('power.draw')] = power
        path = os.path.join(self.dir, 'power.csv')
        with open(path, 'w') as f:
            f.write(header + '\n' + ', '.join(values) + '\n')
        fake_nvidia_smi.recorded(self.smi_dir, {
            '--query-gpu': path, '--query-compute-apps':
            gpu_hosts.sample_path('nvsmi-h100-80gb-idle-compute-apps.csv')})

    def record(self):
        return self.gate.store.load()['usage'][INSTANCE]['units'][
            'pci:' + H100]

    def test_energy_is_the_mean_power_times_the_interval(self):
        self.gate.refresh()                     # 69.85 W, recorded
        self.now += 60
        self.host('nvsmi-h100-80gb-load-query-gpu.csv',
                  'nvsmi-h100-80gb-load-compute-apps.csv')
        self.gate.refresh()                     # 631.95 W, recorded
        record = self.record()
        self.assertAlmostEqual((69.85 + 631.95) / 2 * 60, record['energy_j'])
        self.assertEqual((631.95, 60.0), (record['power_w'],
                                          record['energy_s']))

    def test_missing_power_draw_gives_no_sample_and_a_log_line(self):
        path = os.path.join(self.dir, 'gpu.prom')
        self.override('metrics_file', path)
        self.rows('250.00 W')
        self.gate.refresh()
        self.now += 60
        self.rows('[N/A]')
        self.gate.refresh()
        record = self.record()
        self.assertEqual(0.0, record['energy_j'])
        self.assertNotIn('power_w', record)
        with open(path) as f:
            text = f.read()
        self.assertNotIn('nova_lxd_accel_gpu_power_microwatts{', text)
        self.assertIn('GPU %s gives no power.draw' % H100, self.log.output)
        # logged once, not at every probe
        self.now += 60
        self.gate.refresh()
        self.assertEqual(1, self.log.output.count('gives no power.draw'))

    def test_a_failing_probe_gives_no_sample(self):
        path = os.path.join(self.dir, 'gpu.prom')
        self.override('metrics_file', path)
        self.gate.refresh()
        with open(path) as f:
            self.assertIn('nova_lxd_accel_gpu_power_microwatts{', f.read())
        self.now += 60
        fake_nvidia_smi.recorded(self.smi_dir, {}, status=9)
        self.gate.refresh()
        with open(path) as f:
            self.assertNotIn('nova_lxd_accel_gpu_power_microwatts{',
                             f.read())
        self.now += 60
        self.host('nvsmi-h100-80gb-idle-query-gpu.csv',
                  'nvsmi-h100-80gb-idle-compute-apps.csv')
        self.gate.refresh()
        # neither interval next to the failed probe is guessed
        record = self.record()
        self.assertEqual((0.0, 0.0), (record['energy_j'],
                                      record['energy_s']))
        self.assertEqual(180.0 - 60.0, record['allocated_s'])

    def test_the_counter_survives_a_restart(self):
        self.gate.refresh()
        self.now += 60
        self.gate.refresh()
        first = self.record()['energy_j']
        self.assertAlmostEqual(69.85 * 60, first)
        # nova-compute restarts: a new gate on the same state file
        again = self.new_gate()
        self.now += 60
        again.refresh()
        self.assertAlmostEqual(2 * first, self.record()['energy_j'])
