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

"""GPU energy per instance through real Prometheus parts into cASO.

The chain, every part real but the GPUs:

1. the driver's probe loop (:mod:`.energy_feeder`, the project's Python)
   reads a simulated ``nvidia-smi`` whose ``power.draw`` this test feeds,
   and writes the metrics file (``nova_lxd_accel_gpu_power_microwatts``);
2. Debian's ``prometheus-node-exporter`` (textfile collector only) serves
   the file; Debian's ``prometheus`` scrapes it every second;
3. cASO 5.2.2's ``EnergyConsumptionExtractor``, configured through its
   own options, asks Prometheus for each server of a compute API served
   here and makes ``EnergyRecord`` objects.

The records' Wh are checked against the power fed over the same interval:
a whole GPU gets its board's energy, a 3g.40gb MIG slice 3/7 of its H100's,
a slot of a 4-slot shared GPU a quarter, and an instance on a board that
answers ``[N/A]`` gets no record at all (no sample, not 0 W).

Both servers listen on free loopback ports and are stopped at the end.
``prometheus`` and ``prometheus-node-exporter`` are Debian packages that
``tools/run-tests.sh`` installs; without them the test fails.
"""

import datetime
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

from keystoneauth1 import session as ks_session
from keystoneauth1 import token_endpoint
import novaclient.client
import testtools
from testtools import content

from tests.fixtures import compute_api
from tests.fixtures import fake_nvidia_smi

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
PROMETHEUS = os.environ.get('NOVA_LXD_ACCEL_PROMETHEUS',
                            '/usr/bin/prometheus')
NODE_EXPORTER = os.environ.get('NOVA_LXD_ACCEL_NODE_EXPORTER',
                               '/usr/bin/prometheus-node-exporter')
METRIC = 'nova_lxd_accel_gpu_power_microwatts'
UUID_LABEL = 'uuid'
JOB = 'nova-lxd-accel-gpu'
#: seconds between two scrapes, and cASO's prometheus_step_seconds
STEP = 1
#: the driver's probe period here (nova-compute's is a minute or so)
PERIOD = 0.25
#: seconds each fed power lasts
PHASE = 8

A100, H100, L4, A100_NA = ('0000:07:00.0', '0000:00:09.0', '0000:41:00.0',
                           '0000:85:00.0')
MIG_3G = 'MIG-5c3e8f2a-0d4b-5e6f-8a9b-0c1d2e3f4a5b'
MIG_1G = 'MIG-6d4f9a3b-1e5c-5f70-9bac-1d2e3f4a5b6c'
WHOLE, SLICE, SLOT, NOPOWER = (
    'a1000000-0000-4000-8000-000000000001',
    'b3000000-0000-4000-8000-000000000002',
    'c4000000-0000-4000-8000-000000000003',
    'd5000000-0000-4000-8000-000000000004')
PROJECT = 'e1f2a3b4c5d64e7f8091a2b3c4d5e6f7'
#: instance -> (its board, its share of the board's draw)
SHARES = {WHOLE: (A100, 1.0), SLICE: (H100, 3 / 7.0), SLOT: (L4, 0.25)}
#: the boards' draw in watts, phase after phase (A100_NA: [N/A])
FED = ({A100: 250.0, H100: 420.0, L4: 60.0},
       {A100: 400.0, H100: 560.0, L4: 72.0})


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _host(directory, smi):
    """The simulated host of :mod:`.energy_feeder`."""
    def unit(name, kind, rc, pci, key, **extra):
        return dict({'name': name, 'kind': kind, 'resource_class': rc,
                     'provider': 'rp-' + pci, 'pci': pci, 'unit': key},
                    **extra)

    def gpu(pci, model, **extra):
        return dict({'pci_address': pci, 'vendor_id': '10de',
                     'driver': 'nvidia', 'model': model}, **extra)

    return {
        'state_dir': os.path.join(directory, 'state'),
        'metrics_file': os.path.join(directory, 'textfile',
                                     'nova_lxd_accel.prom'),
        'uuid_label': UUID_LABEL, 'nvidia_smi': smi.path, 'period': PERIOD,
        'gpus': [
            gpu(A100, 'NVIDIA A100-SXM4-80GB'),
            gpu(A100_NA, 'NVIDIA A100-SXM4-80GB'),
            gpu(L4, 'NVIDIA L4', shared_slots=4),
            gpu(H100, 'NVIDIA H100 80GB HBM3', mig_devices=[
                {'profile': '3g.40gb', 'uuid': MIG_3G, 'index': 0,
                 'gpu_index': 3},
                {'profile': '1g.10gb', 'uuid': MIG_1G, 'index': 1,
                 'gpu_index': 3}])],
        'containers': [
            {'name': 'nova-' + WHOLE, 'instance': WHOLE, 'project': PROJECT,
             'units': [unit('nova-gpu0', 'pgpu', 'PGPU', A100,
                            'pci:' + A100)]},
            {'name': 'nova-' + SLICE, 'instance': SLICE, 'project': PROJECT,
             'units': [unit('nova-mig0', 'mig', 'CUSTOM_MIG_3G_40GB', H100,
                            'mig:' + MIG_3G[4:], mig_uuid=MIG_3G)]},
            {'name': 'nova-' + SLOT, 'instance': SLOT, 'project': PROJECT,
             'units': [unit('nova-gpu0', 'gpu_share', 'CUSTOM_GPU_SHARE', L4,
                            'share:%s/0' % L4, project_id=PROJECT)]},
            {'name': 'nova-' + NOPOWER, 'instance': NOPOWER,
             'project': PROJECT,
             'units': [unit('nova-gpu0', 'pgpu', 'PGPU', A100_NA,
                            'pci:' + A100_NA)]}],
    }


def _rows(power):
    return (
        fake_nvidia_smi.gpu_row(0, A100, 'GPU-a100-0', 'NVIDIA A100-SXM4-80GB',
                                power_w=power[A100], power_limit_w=400.0),
        fake_nvidia_smi.gpu_row(1, A100_NA, 'GPU-a100-1',
                                'NVIDIA A100-SXM4-80GB', power_w=None,
                                power_limit_w=None),
        fake_nvidia_smi.gpu_row(2, L4, 'GPU-l4-0', 'NVIDIA L4',
                                total_mib=23034, power_w=power[L4],
                                power_limit_w=72.0),
        fake_nvidia_smi.gpu_row(3, H100, 'GPU-h100-0',
                                'NVIDIA H100 80GB HBM3',
                                power_w=power[H100], mig_mode='Enabled'))


def _compute_answers():
    flavor = {'id': 'gpu', 'name': 'gpu', 'vcpus': 4, 'ram': 8192,
              'disk': 10, 'swap': '', 'OS-FLV-EXT-DATA:ephemeral': 0,
              'rxtx_factor': 1.0, 'os-flavor-access:is_public': True,
              'links': []}
    servers = [{'id': uuid, 'name': 'vm-%s' % uuid[:2], 'status': 'ACTIVE',
                'created': '2020-01-01T00:00:00Z', 'tenant_id': PROJECT,
                'user_id': 'admin', 'flavor': {'id': 'gpu'},
                'image': '', 'links': []}
               for uuid in (WHOLE, SLICE, SLOT, NOPOWER)]
    return {'/servers/detail': {'servers': servers},
            '/flavors/detail': {'flavors': [flavor]},
            '/flavors/gpu/os-extra_specs': {'extra_specs': {}}}


class TestEnergyChain(testtools.TestCase):

    def setUp(self):
        super().setUp()
        missing = [p for p in (PROMETHEUS, NODE_EXPORTER)
                   if not os.access(p, os.X_OK)]
        if missing:
            self.fail('%s missing: install the Debian packages prometheus '
                      'and prometheus-node-exporter (tools/run-tests.sh '
                      'does)' % ', '.join(missing))
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir, True)

    def start(self, name, argv, cwd=None):
        log = open(os.path.join(self.dir, name + '.log'), 'w')
        self.addCleanup(log.close)
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                cwd=cwd or self.dir)
        self.addCleanup(self.stop, proc)
        return proc

    @staticmethod
    def stop(proc):
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def log_of(self, name):
        with open(os.path.join(self.dir, name + '.log')) as f:
            return f.read()[-3000:]

    def wait_for(self, what, check, procs, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in procs:
                if proc.poll() is not None:
                    self.fail('%s exited (%s) while waiting for %s:\n%s' % (
                        name, proc.returncode, what, self.log_of(name)))
            try:
                result = check()
            except OSError:
                result = None
            if result:
                return result
            time.sleep(0.2)
        self.fail('timed out waiting for %s:\n%s' % (what, '\n'.join(
            self.log_of(name) for name, _ in procs)))

    def prom_query(self, query):
        url = '%s/api/v1/query?%s' % (self.prometheus, urllib.parse.urlencode(
            {'query': query}))
        with urllib.request.urlopen(url, timeout=5) as answer:
            return json.load(answer)['data']['result']

    def feed(self, power):
        self.smi.set_gpus(*_rows(power))
        return time.time()

    def caso_records(self, start, end):
        """cASO's energy records of the served servers over [start, end]."""
        from caso.extract import prometheus  # noqa: F401 (its options)
        from oslo_config import cfg

        cfg.CONF([], project='caso')
        overrides = [
            (None, 'site_name', 'NOVA-LXD-ACCEL-TEST'),
            (None, 'service_name', 'nova-lxd-accel'),
            ('prometheus', 'prometheus_endpoint', self.prometheus),
            ('prometheus', 'prometheus_metric_name', METRIC),
            ('prometheus', 'vm_uuid_label_name', UUID_LABEL),
            ('prometheus', 'labels', ['job:%s' % JOB]),
            ('prometheus', 'prometheus_step_seconds', STEP)]
        for group, name, value in overrides:
            cfg.CONF.set_override(name, value, group)
            self.addCleanup(cfg.CONF.clear_override, name, group)
        endpoint = compute_api.serve(self, _compute_answers())
        # as cASO builds it, less Keystone (its __init__): the project and
        # nova's client on the served answers
        cls = prometheus.EnergyConsumptionExtractor
        extractor = cls.__new__(cls)
        extractor.project = extractor.project_id = PROJECT
        extractor.vo = 'vo.example.org'
        extractor.nova = novaclient.client.Client(
            2, session=ks_session.Session(auth=token_endpoint.Token(
                endpoint, 'served')))
        extractor.flavors = extractor._get_flavors()
        # cASO drops the time zone; its Prometheus client reads naive
        # times as local ones
        return extractor.extract(datetime.datetime.fromtimestamp(start),
                                 datetime.datetime.fromtimestamp(end))

    def test_energy_records_match_the_fed_power(self):
        self.smi = fake_nvidia_smi.FakeNvidiaSmi(
            os.path.join(self.dir), app_rows=())
        host = _host(self.dir, self.smi)
        os.makedirs(os.path.dirname(host['metrics_file']))
        with open(os.path.join(self.dir, 'host.json'), 'w') as f:
            json.dump(host, f)
        started = self.feed(FED[0])
        changes = [(started, FED[0])]
        python = os.environ.get(
            'NOVA_LXD_ACCEL_NOVA_PYTHON',
            os.path.join(ROOT, '.tox', 'functional', 'bin', 'python'))
        if not os.access(python, os.X_OK):
            self.fail('%s missing: the driver\'s probe loop needs the '
                      'project\'s Python (NOVA_LXD_ACCEL_NOVA_PYTHON; run '
                      '"tox -e functional" once first)' % python)
        self.addCleanup(lambda: open(host['metrics_file'] + '.stop',
                                     'w').close())
        feeder = self.start('feeder', [
            python, '-m', 'tests.federation.energy_feeder',
            os.path.join(self.dir, 'host.json')], cwd=ROOT)
        exporter_port, prom_port = _free_port(), _free_port()
        exporter = self.start('node-exporter', [
            NODE_EXPORTER, '--collector.disable-defaults',
            '--collector.textfile', '--collector.textfile.directory=%s' %
            os.path.dirname(host['metrics_file']),
            '--web.listen-address=127.0.0.1:%d' % exporter_port])
        config = os.path.join(self.dir, 'prometheus.yml')
        with open(config, 'w') as f:
            f.write('global:\n  scrape_interval: %(s)ds\n'
                    '  evaluation_interval: %(s)ds\n'
                    'scrape_configs:\n  - job_name: %(job)s\n'
                    '    static_configs:\n'
                    '      - targets: ["127.0.0.1:%(port)d"]\n' % {
                        's': STEP, 'job': JOB, 'port': exporter_port})
        prom = self.start('prometheus', [
            PROMETHEUS, '--config.file=%s' % config,
            '--storage.tsdb.path=%s' % os.path.join(self.dir, 'tsdb'),
            '--web.listen-address=127.0.0.1:%d' % prom_port])
        self.prometheus = 'http://127.0.0.1:%d' % prom_port
        procs = [('feeder', feeder), ('node-exporter', exporter),
                 ('prometheus', prom)]
        self.wait_for('the first power samples in Prometheus', lambda: len(
            self.prom_query(METRIC)) >= 3, procs)

        # the window starts once every series is scraped
        start = math.ceil(time.time()) + 1
        time.sleep(start + PHASE - time.time())
        changes.append((self.feed(FED[1]), FED[1]))
        time.sleep(PHASE)
        end = math.floor(time.time()) - 1
        # the last sample of the window scraped, then the feed stops
        time.sleep(end + 2 * STEP + PERIOD - time.time())
        for name, proc in procs:
            self.assertIsNone(proc.poll(), self.log_of(name))

        # the board without power.draw has no series at all (not 0 W)
        series = self.prom_query(METRIC)
        self.assertEqual({WHOLE, SLICE, SLOT},
                         {s['metric'][UUID_LABEL] for s in series})

        records = {str(r.exec_unit_id): r
                   for r in self.caso_records(start, end)}
        self.assertEqual({WHOLE, SLICE, SLOT}, set(records))

        def fed_at(t):
            return [p for at, p in changes if at <= t][-1]

        change_at = changes[1][0]
        report = []
        for instance, (pci, share) in sorted(SHARES.items()):
            # what cASO computes: one sample a step, start and end included
            sampled = sum(fed_at(t)[pci] * share for t in range(
                start, end + 1, STEP)) * STEP / 3600.0
            # the energy itself over the window
            exact = (fed_at(start)[pci] * (change_at - start) +
                     fed_at(end)[pci] * (end - change_at)) * share / 3600.0
            # sampling error: a sample may still see the power before the
            # change (a probe period plus a scrape interval late), and
            # cASO takes one sample more than the window has steps
            jump = abs(FED[1][pci] - FED[0][pci]) * share
            lag = math.ceil(PERIOD + STEP + 0.5) * STEP
            record = records[instance]
            report.append('%s: %.4f Wh recorded, %.4f sampled, %.4f fed' % (
                instance[:8], record.energy_wh, sampled, exact))
            self.assertLessEqual(abs(record.energy_wh - sampled),
                                 jump * lag / 3600.0 + 1e-6, report[-1])
            self.assertLessEqual(
                abs(record.energy_wh - exact),
                (jump * lag + max(FED[0][pci], FED[1][pci]) * share *
                 STEP) / 3600.0 + 1e-6, report[-1])
            self.assertEqual(end - start, record.wall_clock_time_s)
        # a slice is its card's share, a whole GPU its card
        self.assertAlmostEqual(
            3 / 7.0, records[SLICE].energy_wh / sum(
                fed_at(t)[H100] for t in range(start, end + 1)) * 3600.0,
            delta=0.05)
        self.addDetail('energy', content.text_content(
            '\n'.join(report)))
        sys.stderr.write('\n'.join(report) + '\n')
