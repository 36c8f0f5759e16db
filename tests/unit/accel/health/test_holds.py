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

"""What a probe says of each GPU's health (:mod:`.health.holds`).

``test_gate`` runs these through the gate with a scripted nvidia-smi (one
ECC error, a missing nvidia-smi, failures in a row, Xid codes and age).
Here the functions take a state and a :class:`.probe.Snapshot` built from
nvidia-smi outputs parsed by the project's own parsers: several problems
of one GPU, a GPU gone from nvidia-smi, a probe that reads the GPUs but
not their MIG devices, which holds a complete probe lifts, the warnings
an operator sees once, the Xid text and the metrics file's failures.
"""

import logging
import os

import fixtures
import testtools

from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel.health import gate_state
from nova_lxd_accel.accel.health import holds
from nova_lxd_accel.accel.health import probe
from nova_lxd_accel.accel.inventory import nvidia_smi
from tests.fixtures import fake_nvidia_smi
from tests.fixtures import gpu_hosts

#: the GPUs of handmade-nvsmi-query-gpu-ecc-retired-remap.csv
HEALTHY, ECC, RETIRED, REMAP = ('0000:17:00.0', '0000:31:00.0',
                                '0000:b1:00.0', '0000:ca:00.0')
MIG, WHOLE = '0000:00:09.0', '0000:07:00.0'
INSTANCE = 'f0d1c2b3-0000-4000-8000-000000000001'


def nvidia(pci):
    return devices.Gpu(pci_address=pci, vendor_id='10de', driver='nvidia')


def snapshot(csv_text, **kw):
    """An available snapshot of ``--query-gpu`` output ``csv_text``."""
    kw.setdefault('taken_at', 1000.0)
    return probe.Snapshot(available=True,
                          gpus=nvidia_smi.parse_query_gpu(csv_text),
                          apps={}, **kw)


def failed(error='Failed to initialize NVML: Unknown Error'):
    return probe.Snapshot(1000.0, False, {}, {}, error)


def mig_host_rows():
    """A GPU in MIG mode and a whole GPU, both idle."""
    return '\n'.join((
        fake_nvidia_smi.QUERY_HEADER,
        fake_nvidia_smi.gpu_row(0, WHOLE, 'GPU-0', 'NVIDIA A100-SXM4-80GB'),
        fake_nvidia_smi.gpu_row(1, MIG, 'GPU-1', 'NVIDIA H100 80GB HBM3',
                                mig_mode='Enabled'))) + '\n'


class TestHealth(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.log = self.useFixture(fixtures.FakeLogger(
            name=holds.__name__, level=logging.INFO))
        self.conf = gpu_hosts.make_conf()
        self.state = gate_state.empty_state()
        self.snap = snapshot(gpu_hosts.load_text(
            'handmade-nvsmi-query-gpu-ecc-retired-remap.csv'))
        self.warned = {}

    def health(self, known, current=None, snap=None, now=2000.0):
        holds.health(self.state, current or {}, snap or self.snap,
                     {pci: nvidia(pci) for pci in known}, now, self.conf,
                     self.warned)

    def test_each_unhealthy_gpu_is_held_with_all_its_problems(self):
        self.health([HEALTHY, ECC, RETIRED, REMAP])
        self.assertEqual(
            {ECC: '2 uncorrectable ECC errors',
             RETIRED: 'retired pages pending',
             REMAP: 'row remapping pending; row remapping failed'},
            {pci: h['reason'] for pci, h in self.state['holds'].items()})
        self.assertEqual({gate_state.KIND_UNHEALTHY},
                         {h['kind'] for h in self.state['holds'].values()})
        self.assertIn('"nova-lxd-accel gpu release %s"' % ECC,
                      self.log.output)

    def test_a_failed_probe_is_no_verdict_on_health(self):
        self.health([HEALTHY, ECC], snap=failed())
        self.assertEqual({}, self.state['holds'])

    def test_a_gpu_nvidia_smi_no_longer_lists_is_held_as_gone(self):
        self.health([HEALTHY, WHOLE])
        hold = self.state['holds'][WHOLE]
        self.assertEqual(
            ('unhealthy', True,
             'fallen off the bus (nvidia-smi no longer lists it)'),
            (hold['kind'], hold.get('gone'), hold['reason']))

    def test_a_card_of_another_vendor_nvidia_smi_does_not_list_is_fine(self):
        holds.health(self.state, {}, self.snap,
                     {WHOLE: devices.Gpu(pci_address=WHOLE,
                                         vendor_id='1002')},
                     2000.0, self.conf, self.warned)
        self.assertEqual({}, self.state['holds'])

    def test_an_unhealthy_gpu_that_disappears_becomes_gone(self):
        gate_state.hold_by_compute(self.state, WHOLE,
                                   gate_state.KIND_UNHEALTHY, 'ecc', 10.0)
        self.health([WHOLE])
        hold = self.state['holds'][WHOLE]
        self.assertEqual((True, 10.0), (hold.get('gone'), hold['since']))

    def test_an_operator_hold_of_a_gpu_that_disappears_stays(self):
        self.state['holds'][WHOLE] = {'kind': gate_state.KIND_OPERATOR,
                                      'reason': 'maintenance', 'by': 'ops'}
        self.health([WHOLE])
        self.assertEqual({'kind': 'operator', 'reason': 'maintenance',
                          'by': 'ops'}, self.state['holds'][WHOLE])

    def test_users_of_an_unhealthy_gpu_are_warned_once(self):
        current = {'pci:' + ECC: {'instance': INSTANCE, 'pci': ECC}}
        self.health([ECC], current)
        self.health([ECC], current, now=2060.0)
        warning = ('Instances %s use unhealthy GPU %s (2 uncorrectable ECC '
                   'errors); they are left running' % (INSTANCE, ECC))
        self.assertEqual(1, self.log.output.count(warning))
        # another instance on it: warned again, naming both
        current['pci:other'] = {'instance': 'i-2', 'pci': ECC}
        self.health([ECC], current, now=2120.0)
        self.assertIn('Instances %s, i-2 use unhealthy GPU' % INSTANCE,
                      self.log.output)


class TestProbeHealth(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.useFixture(fixtures.FakeLogger(name=holds.__name__))
        self.state = gate_state.empty_state()
        self.known = {WHOLE: nvidia(WHOLE), MIG: nvidia(MIG)}

    def probed(self, snap, now=2000.0, **conf):
        holds.probed(self.state, snap, self.known, now,
                     gpu_hosts.make_conf(**conf))

    def test_complete_needs_the_mig_facts_too(self):
        snap = snapshot(mig_host_rows())
        self.assertEqual(
            [True, False, False],
            [holds.complete(s) for s in (
                snap, probe.Snapshot(1.0, True, snap.gpus, {},
                                     mig_error='-q failed'), failed())])

    def test_missing_mig_facts_hold_only_the_gpus_in_mig_mode(self):
        snap = snapshot(mig_host_rows(), mig_error='nvidia-smi -q: status 9')
        self.probed(snap, probe_failures_before_hold=1)
        self.assertEqual([MIG], list(self.state['holds']))
        hold = self.state['holds'][MIG]
        self.assertEqual(gate_state.KIND_UNPROBEABLE, hold['kind'])
        self.assertIn('the GPU probe failed 1 times in a row (last: '
                      'nvidia-smi -q: status 9)', hold['reason'])
        self.assertEqual(
            {'at': 2000.0, 'available': True, 'complete': False,
             'error': 'nvidia-smi -q: status 9', 'failures': 1},
            self.state['probe'])

    def test_failures_are_counted_across_probes(self):
        self.state['probe'] = {'failures': 2}
        self.probed(failed())
        self.assertEqual(3, self.state['probe']['failures'])
        self.assertEqual([MIG, WHOLE], sorted(self.state['holds']))

    def test_a_missing_nvidia_smi_names_the_configured_path(self):
        self.probed(failed(probe.NO_NVIDIA_SMI),
                    nvidia_smi_path='/opt/nvidia/bin/nvidia-smi')
        self.assertTrue(self.state['holds'][WHOLE]['reason'].startswith(
            '/opt/nvidia/bin/nvidia-smi does not exist'))

    def test_a_complete_probe_lifts_only_the_unprobeable_holds(self):
        self.state['holds'] = {
            WHOLE: {'kind': gate_state.KIND_UNPROBEABLE, 'reason': 'x'},
            MIG: {'kind': gate_state.KIND_UNHEALTHY, 'reason': 'ecc'},
            HEALTHY: {'kind': gate_state.KIND_OPERATOR, 'reason': 'fan'}}
        self.probed(snapshot(mig_host_rows()))
        self.assertEqual(sorted([HEALTHY, MIG]), sorted(self.state['holds']))
        self.assertEqual(
            [('release', WHOLE, 'the GPU probe answers again')],
            [(e['event'], e['pci'], e['reason'])
             for e in self.state['events']])
        self.assertEqual(0, self.state['probe']['failures'])


class TestXids(testtools.TestCase):

    def xid(self, pci, code, at, message='Uncontained: FBHUB. RST: Yes'):
        return probe.XidEvent(pci_address=pci, code=code, at=at,
                              message=message)

    def test_only_a_gpus_own_fatal_codes_count(self):
        conf = gpu_hosts.make_conf(fatal_xids=[79, 95])
        snap = probe.Snapshot(
            1000.0, True, {}, {}, uptime=6000.0, boot_id='b1',
            xids=(self.xid(ECC, 13, 5000.0), self.xid(ECC, 95, 5100.0),
                  self.xid(REMAP, 79, 5200.0)))
        state = gate_state.empty_state()
        self.assertEqual([5100.0], [e.at for e in holds.new_fatal_xids(
            state, snap, ECC, conf)])
        # the other GPU's message is still new for that GPU
        self.assertEqual([5200.0], [e.at for e in holds.new_fatal_xids(
            state, snap, REMAP, conf)])
        self.assertEqual([], holds.new_fatal_xids(state, snap, ECC, conf))

    def test_no_fatal_codes_configured_acts_on_nothing(self):
        conf = gpu_hosts.make_conf(fatal_xids=[])
        snap = probe.Snapshot(1000.0, True, {}, {}, uptime=6000.0,
                              xids=(self.xid(ECC, 79, 5000.0),))
        self.assertEqual([], holds.new_fatal_xids(gate_state.empty_state(),
                                                  snap, ECC, conf))

    def test_text_gives_the_wall_clock_time_of_the_message(self):
        snap = probe.Snapshot(1000000.0, True, {}, {}, uptime=6000.0)
        # logged 892.355664 s before the probe
        self.assertEqual(
            'Xid 79 at 1970-01-12T13:31:47Z: GPU has fallen off the bus.',
            holds.xid_text(self.xid(ECC, 79, 5107.644336,
                                    'GPU has fallen off the bus.'), snap))

    def test_text_without_uptime_or_message(self):
        snap = probe.Snapshot(1000.0, True, {}, {})
        self.assertEqual('Xid 79: no message',
                         holds.xid_text(self.xid(ECC, 79, 1.0, ''), snap))


class TestIdleReportAndMetrics(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.log = self.useFixture(fixtures.FakeLogger(name=holds.__name__))
        self.dir = self.useFixture(fixtures.TempDir()).path

    def test_an_idle_unit_is_reported_once_per_idle_spell(self):
        conf = gpu_hosts.make_conf(idle_report_after=3600)
        state = gate_state.empty_state()
        state['bound'] = {'pci:' + WHOLE: {
            'pci': WHOLE, 'instance': INSTANCE, 'project': 'proj-a',
            'since': 1000.0, 'running': True}}
        warned = {}
        holds.report_idle(state, 4600.0, conf, warned)
        holds.report_idle(state, 9000.0, conf, warned)
        line = ('GPU %s (pci:%s) of instance %s, project proj-a, has shown '
                'no compute use since 1970-01-01T00:16:40Z' % (
                    WHOLE, WHOLE, INSTANCE))
        self.assertEqual(1, self.log.output.count(line))
        # busy again, then idle again: a new report
        state['bound']['pci:' + WHOLE]['last_busy'] = 5000.0
        holds.report_idle(state, 9000.0, conf, warned)
        self.assertIn('no compute use since 1970-01-01T01:23:20Z',
                      self.log.output)

    def test_metrics_written_only_when_a_file_is_set(self):
        state = gate_state.empty_state()
        holds.write_metrics(state, {WHOLE: nvidia(WHOLE)}, 1.0,
                            gpu_hosts.make_conf())
        self.assertEqual([], os.listdir(self.dir))
        path = os.path.join(self.dir, 'gpu.prom')
        holds.write_metrics(state, {WHOLE: nvidia(WHOLE)}, 1.0,
                            gpu_hosts.make_conf(metrics_file=path))
        with open(path) as f:
            self.assertIn('nova_lxd_accel_gpu_state{pci="%s",state="free"} 1'
                          % WHOLE, f.read())

    def test_an_unwritable_metrics_file_is_a_warning_not_a_failure(self):
        path = os.path.join(self.dir, 'missing', 'gpu.prom')
        holds.write_metrics(gate_state.empty_state(), {}, 1.0,
                            gpu_hosts.make_conf(metrics_file=path))
        self.assertIn('Cannot write the GPU metrics file %s' % path,
                      self.log.output)
