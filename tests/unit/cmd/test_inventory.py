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

"""``nova-lxd-accel inventory`` from saved files."""

import io
import json
import os

import fixtures
from oslotest import base

from nova_lxd_accel.cmd import main
from tests.unit.accel import utils

H100 = utils.sample_path('handmade-lxd-h100-mig-host.json')
H100_L = utils.sample_path('nvsmi-h100-80gb-mig-4slices-L.txt')
IB = utils.sample_path('maas-lp1939456-connectx3-infiniband.json')
GT730 = utils.sample_path(
    'lxd-9201-virtiogpu-gt730-nvidia-subobject-gpu.json')


def _rec(total):
    return {'total': total, 'reserved': 0, 'min_unit': 1,
            'max_unit': total, 'step_size': 1, 'allocation_ratio': 1.0}


class TestInventoryCommand(base.BaseTestCase):

    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path
        self.stdout = io.StringIO()
        self.stderr = io.StringIO()
        self.useFixture(fixtures.MonkeyPatch('sys.stdout', self.stdout))
        self.useFixture(fixtures.MonkeyPatch('sys.stderr', self.stderr))
        self.conf_file = self._write('nova.conf', '[DEFAULT]\n')

    def _write(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, 'w') as f:
            f.write(text)
        return path

    def _run(self, *argv):
        argv = ['inventory', '--config-file', self.conf_file] + list(argv)
        return main.main(argv)

    def _json(self, *argv):
        self.assertEqual(0, self._run('--format', 'json', *argv))
        return json.loads(self.stdout.getvalue())

    def _bad(self, *argv):
        self.assertEqual(2, self._run(*argv))
        err = self.stderr.getvalue()
        self.assertEqual(1, err.count('\n'), err)
        self.assertEqual('', self.stdout.getvalue())
        return err

    def test_json_h100_mig(self):
        self.assertEqual({'providers': [
            {'name': 'cmp1', 'parent': None, 'inventories': {},
             'traits': []},
            {'name': 'cmp1_gpu_0000_00_09_0', 'parent': 'cmp1',
             'inventories': {'CUSTOM_MIG_1G_10GB': _rec(2),
                             'CUSTOM_MIG_2G_20GB': _rec(1),
                             'CUSTOM_MIG_3G_40GB': _rec(1)},
             'traits': ['CUSTOM_CUDA_CC_9_0',
                        'CUSTOM_GPU_MODEL_NVIDIA_H100_80GB_HBM3',
                        'CUSTOM_GPU_PRODUCT_10DE_2330',
                        'CUSTOM_GPU_VENDOR_10DE', 'OWNER_NOVA']},
        ]}, self._json('--resources-file', H100, '--nvidia-smi-list', H100_L,
                       '--nodename', 'cmp1'))

    def test_json_network_only_file(self):
        out = self._json('--resources-file', IB, '--nodename', 'n1')
        self.assertEqual(
            [('n1', None), ('n1_ib_0000_04_00_0', 'n1')],
            [(p['name'], p['parent']) for p in out['providers']])
        self.assertEqual({'CUSTOM_INFINIBAND_PORT': _rec(2)},
                         out['providers'][1]['inventories'])

    def test_whole_api_response_is_accepted(self):
        with open(GT730) as f:
            metadata = json.load(f)
        path = self._write('raw.json', json.dumps(
            {'type': 'sync', 'status_code': 200, 'metadata': metadata}))
        out = self._json('--resources-file', path, '--nodename', 'c')
        self.assertEqual(['c', 'c_gpu_0000_07_00_0'],
                         [p['name'] for p in out['providers']])

    def test_config_file_is_honoured(self):
        self.conf_file = self._write(
            'vendors.conf',
            '[lxd_accelerators]\ngpu_vendor_ids = 10de,1af4\n'
            'excluded_pci_addresses = 0000:07:00.0\n')
        out = self._json('--resources-file', GT730, '--nodename', 'c')
        self.assertEqual(['c', 'c_gpu_0000_04_00_0'],
                         [p['name'] for p in out['providers']])

    def test_mig_off_in_config_ignores_list(self):
        self.conf_file = self._write(
            'nomig.conf', '[lxd_accelerators]\nreport_mig = false\n')
        out = self._json('--resources-file', H100, '--nvidia-smi-list',
                         H100_L, '--nodename', 'cmp1')
        self.assertEqual({'PGPU': _rec(1)},
                         out['providers'][1]['inventories'])

    def test_default_nodename_is_host_name(self):
        self.useFixture(fixtures.MonkeyPatch('socket.gethostname',
                                             lambda: 'host-a'))
        out = self._json('--resources-file', IB)
        self.assertEqual('host-a', out['providers'][0]['name'])

    def test_table(self):
        self.assertEqual(0, self._run('--resources-file', H100,
                                      '--nvidia-smi-list', H100_L,
                                      '--nodename', 'cmp1'))
        lines = self.stdout.getvalue().splitlines()
        self.assertEqual('cmp1  (root)', lines[0])
        self.assertEqual('cmp1_gpu_0000_00_09_0  (parent: cmp1)', lines[1])
        self.assertIn('CUSTOM_MIG_1G_10GB', lines[2])
        self.assertIn('total=2 reserved=0', lines[2])
        self.assertIn('traits: CUSTOM_CUDA_CC_9_0', lines[5])
        self.assertEqual('1 accelerator provider', lines[-1])

    def test_missing_resources_file(self):
        path = os.path.join(self.tmp, 'nope.json')
        err = self._bad('--resources-file', path)
        self.assertIn(path + ': cannot read', err)

    def test_invalid_json(self):
        path = self._write('bad.json', '{"gpu": ')
        self.assertIn(path + ': not valid JSON', self._bad(
            '--resources-file', path))

    def test_not_an_object(self):
        path = self._write('list.json', '[1, 2]')
        self.assertIn(path + ': expected a JSON object', self._bad(
            '--resources-file', path))

    def test_neither_gpu_nor_network(self):
        path = self._write('cpu.json', '{"cpu": {}}')
        self.assertIn('holds neither "gpu" nor "network"', self._bad(
            '--resources-file', path))

    def test_cards_not_a_list(self):
        path = self._write('cards.json', '{"gpu": {"cards": "x"}}')
        self.assertIn(path + ': "gpu.cards" must be a list', self._bad(
            '--resources-file', path))

    def test_nvidia_smi_list_not_a_list(self):
        path = self._write('smi.txt', 'Tue Jul 14 2026\n| NVIDIA-SMI |\n')
        self.assertIn(path + ': no "GPU <n>', self._bad(
            '--resources-file', H100, '--nvidia-smi-list', path))

    def test_nvidia_smi_list_missing(self):
        path = os.path.join(self.tmp, 'none.txt')
        self.assertIn(path + ': cannot read', self._bad(
            '--resources-file', H100, '--nvidia-smi-list', path))

    def test_missing_config_file(self):
        self.conf_file = os.path.join(self.tmp, 'missing.conf')
        self.assertIn('missing.conf', self._bad('--resources-file', H100))

    def test_bad_config_value(self):
        self.conf_file = self._write(
            'bad.conf', '[lxd_accelerators]\nreport_mig = perhaps\n')
        self.assertIn('report_mig', self._bad('--resources-file', H100))
