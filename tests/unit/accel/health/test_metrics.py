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

"""The Prometheus text file of the GPU states (:mod:`.health.metrics`).

``test_gate`` checks the file the gate writes (idle state, allocated
seconds, an instance on an unhealthy GPU, escaped labels). Here
:func:`metrics.render` takes hand-made states: one state per GPU, a held
GPU LXD no longer lists, dirty units and shared slots per GPU and project,
the probe's lines before any probe, the number format node_exporter
reads; and :func:`metrics.write_textfile` replaces the file whole.
"""

import os
import re
import stat

import fixtures
import testtools

from nova_lxd_accel.accel.health import gate_state
from nova_lxd_accel.accel.health import metrics
from nova_lxd_accel import placement_names
from tests.fixtures import gpu_hosts

A, B, C = '0000:07:00.0', '0000:31:00.0', '0000:85:00.0'
#: ``name{labels} value`` of one sample line
SAMPLE = re.compile(r'^(?P<name>[a-z_]+)(?P<labels>\{.*\})? (?P<value>\S+)$')


def samples(text, family):
    """{labels text: value text} of one metric family."""
    out = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match and match.group('name') == metrics.PREFIX + family:
            out[match.group('labels') or ''] = match.group('value')
    return out


def unit(pci, project='proj-a', rc='PGPU', instance='i-1', **kw):
    return dict(pci=pci, project=project, resource_class=rc,
                instance=instance, since=1000.0, running=True, **kw)


class TestRender(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.conf = gpu_hosts.make_conf(idle_report_after=3600)
        self.state = gate_state.empty_state()

    def render(self, pcis=(A, B, C), now=2000.0):
        return metrics.render(self.state, list(pcis), self.conf, now)

    def test_every_gpu_is_in_exactly_one_state(self):
        self.state['holds'] = {B: {'kind': 'unhealthy', 'gone': True}}
        self.state['bound'] = {'pci:' + A: unit(A)}
        states = samples(self.render(), 'state')
        self.assertEqual(3 * len(gate_state.STATES), len(states))
        self.assertEqual(
            sorted(['{pci="%s",state="bound"}' % A,
                    '{pci="%s",state="gone"}' % B,
                    '{pci="%s",state="free"}' % C]),
            sorted(k for k, v in states.items() if v == '1'))
        self.assertEqual({'0', '1'}, set(states.values()))

    def test_a_held_gpu_lxd_no_longer_lists_is_still_exported(self):
        self.state['holds'] = {C: {'kind': 'operator', 'reason': 'pulled'}}
        states = samples(self.render(pcis=[A]), 'state')
        self.assertEqual('1', states['{pci="%s",state="held"}' % C])

    def test_dirty_units_are_counted_per_gpu(self):
        self.state['dirty'] = {
            'mig:1': {'pci': A}, 'mig:2': {'pci': A}, 'pci:' + B: {'pci': B}}
        self.assertEqual(
            {'{pci="%s"}' % A: '2', '{pci="%s"}' % B: '1',
             '{pci="%s"}' % C: '0'},
            samples(self.render(), 'dirty_units'))

    def test_shared_slots_are_counted_per_gpu_and_project(self):
        share = placement_names.SHARE_RC
        self.state['bound'] = {
            'share:%s/0' % A: unit(A, rc=share),
            'share:%s/1' % A: unit(A, rc=share, instance='i-2'),
            'share:%s/2' % A: unit(A, project=None, rc=share),
            'share:%s/0' % B: unit(B, project='proj-b', rc=share),
            'pci:' + C: unit(C)}
        self.assertEqual(
            ['{pci="%s",project=""} 1' % A,
             '{pci="%s",project="proj-a"} 2' % A,
             '{pci="%s",project="proj-b"} 1' % B],
            ['%s %s' % item
             for item in samples(self.render(), 'shared_slots_used').items()])

    def test_busy_and_idle_seconds_of_a_bound_unit(self):
        self.state['bound'] = {'pci:' + A: unit(A, last_busy=1500.0)}
        self.state['usage'] = {'i-1': {'project': 'proj-a', 'units': {
            'pci:' + A: {'pci': A, 'allocated_s': 5400,
                         'busy_s': 4500.25}}}}
        text = self.render(now=5100.0)
        labels = '{instance="i-1",pci="%s",project="proj-a",unit="pci:%s"}' % (
            A, A)
        self.assertEqual({labels: '5400'},
                         samples(text, 'allocated_seconds_total'))
        self.assertEqual({labels: '4500.25'},
                         samples(text, 'busy_seconds_total'))
        self.assertEqual({labels: '3600'}, samples(text, 'idle_seconds'))

    def test_before_any_probe_time_and_availability_are_zero(self):
        text = self.render(pcis=[])
        self.assertEqual({'': '0'}, samples(text, 'probe_timestamp_seconds'))
        self.assertEqual({'': '0'}, samples(text, 'probe_available'))
        self.state['probe'] = {'at': 1234.5, 'available': True}
        text = self.render(pcis=[])
        self.assertEqual({'': '1234.5'},
                         samples(text, 'probe_timestamp_seconds'))
        self.assertEqual({'': '1'}, samples(text, 'probe_available'))

    def test_every_sample_follows_its_help_and_type(self):
        self.state['holds'] = {A: {'kind': 'unhealthy'}}
        self.state['bound'] = {'pci:' + A: unit(A)}
        text = self.render()
        self.assertTrue(text.endswith('\n'))
        declared = []
        for line in text.splitlines():
            if line.startswith('# HELP '):
                declared.append(line.split()[2])
            elif line.startswith('# TYPE '):
                self.assertEqual(declared[-1], line.split()[2])
                self.assertIn(line.split()[3], ('gauge', 'counter'))
            else:
                self.assertRegex(line, SAMPLE)
                self.assertEqual(declared[-1],
                                 SAMPLE.match(line).group('name'))
        self.assertEqual(len(declared), len(set(declared)))

    def test_a_newline_in_a_label_stays_on_its_line(self):
        self.state['usage'] = {'i-1': {'project': 'a\nb', 'units': {
            'pci:' + A: {'pci': A, 'allocated_s': 1, 'busy_s': 0}}}}
        text = self.render()
        self.assertIn('project="a\\nb"', text)
        self.assertNotIn('project="a\n', text)


class TestWriteTextfile(testtools.TestCase):

    def test_replaces_the_file_readable_by_node_exporter(self):
        directory = self.useFixture(fixtures.TempDir()).path
        path = os.path.join(directory, 'nova_lxd_accel.prom')
        with open(path, 'w') as f:
            f.write('old\n')
        os.chmod(path, 0o600)
        metrics.write_textfile(path, 'new\n')
        with open(path) as f:
            self.assertEqual('new\n', f.read())
        self.assertEqual(0o644, stat.S_IMODE(os.stat(path).st_mode))
        self.assertEqual(['nova_lxd_accel.prom'], os.listdir(directory))


class TestPowerAndEnergy(testtools.TestCase):
    """The per-instance power gauge (microwatts) and energy counter."""

    UUID = 'f0d1c2b3-0000-4000-8000-000000000001'

    def setUp(self):
        super().setUp()
        self.conf = gpu_hosts.make_conf()
        self.state = gate_state.empty_state()
        self.state['accounted_at'] = 2000.0
        self.state['bound'] = {'pci:' + A: unit(A, instance=self.UUID)}
        self.record = {'pci': A, 'allocated_s': 60.0, 'busy_s': 0.0,
                       'power_w': 250.5, 'power_at': 2000.0,
                       'energy_j': 15030.0, 'energy_s': 60.0}
        self.state['usage'] = {self.UUID: {'project': 'proj-a', 'units': {
            'pci:' + A: self.record}}}

    def render(self, conf=None):
        return metrics.render(self.state, [A], conf or self.conf, 2000.0)

    def test_power_in_microwatts_with_the_uuid_label(self):
        labels = '{pci="%s",project="proj-a",unit="pci:%s",uuid="%s"}' % (
            A, A, self.UUID)
        text = self.render()
        self.assertEqual({labels: '250500000'},
                         samples(text, 'power_microwatts'))
        self.assertEqual({labels: '15030'},
                         samples(text, 'energy_joules_total'))
        self.assertIn('# TYPE nova_lxd_accel_gpu_power_microwatts gauge',
                      text)
        self.assertIn('# TYPE nova_lxd_accel_gpu_energy_joules_total '
                      'counter', text)

    def test_the_uuid_label_is_configurable(self):
        text = self.render(gpu_hosts.make_conf(energy_uuid_label='vm'))
        [labels] = samples(text, 'power_microwatts')
        self.assertIn('vm="%s"' % self.UUID, labels)
        self.assertNotIn('uuid=', labels)

    def test_no_reading_at_the_last_probe_is_no_sample(self):
        # a reading of an earlier probe is never reported again
        self.record['power_at'] = 1940.0
        self.assertEqual({}, samples(self.render(), 'power_microwatts'))
        # none at all
        del self.record['power_w'], self.record['power_at']
        text = self.render()
        self.assertEqual({}, samples(text, 'power_microwatts'))
        # the energy counted so far stays
        self.assertEqual(['15030'],
                         list(samples(text, 'energy_joules_total').values()))

    def test_a_released_unit_has_no_power(self):
        self.state['bound'] = {}
        self.assertEqual({}, samples(self.render(), 'power_microwatts'))

    def test_unmeasured_units_have_no_energy_sample(self):
        for key in ('power_w', 'power_at', 'energy_j', 'energy_s'):
            del self.record[key]
        text = self.render()
        self.assertEqual({}, samples(text, 'energy_joules_total'))
        self.assertEqual({}, samples(text, 'power_microwatts'))
