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

import copy
import json
import os
from unittest import mock

import fixtures

from nova_lxd_accel.accel.binding import claims
from nova_lxd_accel.accel.binding import pick
from nova_lxd_accel.cmd import main
from nova_lxd_accel.container import identity
from nova_lxd_accel import daemon
from nova_lxd_accel import exception
from tests.fixtures import fake_lxd
from tests.fixtures import gpu_hosts
from tests.fixtures import host_cli


H100 = gpu_hosts.sample_path('handmade-lxd-h100-mig-host.json')
H100_L = gpu_hosts.sample_path('nvsmi-h100-80gb-mig-4slices-L.txt')
IB = gpu_hosts.sample_path('maas-lp1939456-connectx3-infiniband.json')
GT730 = gpu_hosts.sample_path(
    'lxd-9201-virtiogpu-gt730-nvidia-subobject-gpu.json')
TWO_A100 = 'handmade-lxd-two-a100-no-nvidia-object.json'


def _rec(total):
    return {'total': total, 'reserved': 0, 'min_unit': 1,
            'max_unit': total, 'step_size': 1, 'allocation_ratio': 1.0}


class TestInventoryCommand(host_cli.CommandTestCase):

    def setUp(self):
        super().setUp()
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

    def test_json_network_only_file_ports_not_offered_by_default(self):
        # a card with ports and no VF: a port lets its holder act as a
        # subnet manager, so nothing is reported unless the operator asks
        out = self._json('--resources-file', IB, '--nodename', 'n1')
        self.assertEqual([('n1', None)],
                         [(p['name'], p['parent']) for p in out['providers']])

    def test_json_network_only_file(self):
        self.conf_file = self._write(
            'ports.conf', '[lxd_accelerators]\nreport_infiniband_ports = '
            'true\n')
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
        # a whole GPU counts in its model's pool (pool_whole_gpus)
        self.assertEqual(['c', 'c_gpu_pool_10de_1287'],
                         [p['name'] for p in out['providers']])

    def test_config_file_is_honoured(self):
        self.conf_file = self._write(
            'vendors.conf',
            '[lxd_accelerators]\ngpu_vendor_ids = 10de,1af4\n'
            'excluded_pci_addresses = 0000:07:00.0\n')
        out = self._json('--resources-file', GT730, '--nodename', 'c')
        self.assertEqual(['c', 'c_gpu_pool_1af4_0010'],
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


SHARED_PCI = '0000:07:00.0'
SHARED_RP = 'c_gpu_0000_07_00_0'
# the whole A100 counts in its model's pool (pool_whole_gpus)
WHOLE_RP = 'c_gpu_pool_10de_20b2'


class _Daemon(fake_lxd.FakeLXDClient):
    """The shared fake daemon, answering /1.0/resources too."""

    def __init__(self, resources):
        super().__init__(project='nova')
        self._resources = resources
        self.instance_listings = 0

    def resources(self):
        return copy.deepcopy(self._resources)

    def daemon_info(self):
        return daemon.DaemonInfo.from_server_info(self.server_info())

    def list_all_instances(self):
        self.instance_listings += 1
        return super().list_all_instances()


class TestSharedGpuHolders(host_cli.CommandTestCase):
    """Who shares which GPU, from the binding records claims write."""

    def setUp(self):
        super().setUp()
        self.conf_file = os.path.join(self.tmp, 'nova.conf')
        with open(self.conf_file, 'w') as f:
            f.write('[lxd_accelerators]\nshared_gpus = %s:2\n' % SHARED_PCI)
        self.resources = gpu_hosts.load_json(TWO_A100)
        self.daemon = _Daemon(self.resources)
        self.useFixture(fixtures.MonkeyPatch(
            'nova_lxd_accel.client.LXDClient', lambda conf: self.daemon))
        # the devices nova-compute reports, to claim slots of as it does
        conf = gpu_hosts.make_conf(shared_gpus=['%s:2' % SHARED_PCI])
        self.reported, self.tree = gpu_hosts.report(self.resources, conf=conf,
                                                    nodename='c')

    def claim(self, name, instance_uuid, project_id, lxd_project='nova'):
        """A container holding a slot, written by the claim code.

        Made in LXD project ``lxd_project``, by a client of that project.
        """
        self.daemon.project = lxd_project
        self.daemon.create_container(
            name, {identity.KEY_INSTANCE_UUID: instance_uuid}, {}, [], {})
        rp_uuid = self.tree.data(SHARED_RP).uuid
        return claims.claim(
            self.daemon, name,
            {rp_uuid: {'resources': {'CUSTOM_GPU_SHARE': 1}}},
            self.reported.device_for_provider,
            share=pick.ShareRequest(project_id=project_id))

    def run_inventory(self, *argv, expect=0):
        self.assertEqual(expect, main.main(
            ['inventory', '--config-file', self.conf_file,
             '--nodename', 'c'] + list(argv)), self.stderr.getvalue())
        return self.stdout.getvalue()

    def providers(self, *argv):
        out = json.loads(self.run_inventory('--format', 'json', *argv))
        return {p['name']: p for p in out['providers']}

    def test_slots_and_their_holders_in_json(self):
        self.claim('nova-a', 'uuid-a', 'proj-1')
        self.claim('nova-b', 'uuid-b', 'proj-1')
        providers = self.providers()
        self.assertEqual({
            'slots_total': 2, 'slots_used': 2, 'card_held_by': [],
            'slots': [
                {'slot': 0, 'unit': 'share:%s/0' % SHARED_PCI,
                 'instance': 'uuid-a', 'project': 'proj-1',
                 'container': 'nova/nova-a'},
                {'slot': 1, 'unit': 'share:%s/1' % SHARED_PCI,
                 'instance': 'uuid-b', 'project': 'proj-1',
                 'container': 'nova/nova-b'}]},
            providers[SHARED_RP]['sharing'])
        # a whole GPU's provider is printed as before
        self.assertEqual({'name', 'parent', 'inventories', 'traits'},
                         set(providers[WHOLE_RP]))

    def test_read_fresh_at_each_run(self):
        self.claim('nova-a', 'uuid-a', 'proj-1')
        self.claim('nova-b', 'uuid-b', 'proj-1')
        self.daemon.delete_container('nova-a')
        self.stdout.truncate(0)
        sharing = self.providers()[SHARED_RP]['sharing']
        self.assertEqual(1, sharing['slots_used'])
        self.assertEqual(['uuid-b'], [s['instance']
                                      for s in sharing['slots']])

    def test_table(self):
        self.claim('nova-a', 'uuid-a', 'proj-1')
        lines = self.run_inventory().splitlines()
        start = lines.index('c_gpu_0000_07_00_0  (parent: c)')
        self.assertEqual(
            ['    shared: 1 of 2 slots used',
             '      slot 0: instance uuid-a project proj-1 (nova/nova-a)',
             WHOLE_RP + '  (parent: c)'],
            lines[start + 3:start + 6])
        self.assertEqual('2 accelerator providers', lines[-1])

    def test_card_held_by_a_foreign_container_leaves_no_slot(self):
        self.claim('nova-a', 'uuid-a', 'proj-1')
        self.daemon.create_container(
            'by-hand', {}, {'gpu0': {'type': 'gpu', 'pci': SHARED_PCI}},
            [], {})
        sharing = self.providers()[SHARED_RP]['sharing']
        self.assertEqual((2, ['nova/by-hand']),
                         (sharing['slots_used'], sharing['card_held_by']))
        self.assertEqual(['uuid-a'], [s['instance']
                                      for s in sharing['slots']])

    def test_no_shared_gpu_no_listing_and_output_as_before(self):
        with open(self.conf_file, 'w') as f:
            f.write('[DEFAULT]\n')
        providers = self.providers()
        self.assertEqual(0, self.daemon.instance_listings)
        for provider in providers.values():
            self.assertNotIn('sharing', provider)

    def test_listing_failure_is_an_lxd_error(self):
        self.daemon.list_all_instances = mock.Mock(
            side_effect=exception.LXDOperationFailed(
                action='list', target='instances of all projects',
                reason='not authorized'))
        self.run_inventory(expect=1)
        self.assertIn('cannot list the instances of the local daemon',
                      self.stderr.getvalue())
        self.assertEqual('', self.stdout.getvalue())

    def test_saved_files(self):
        self.claim('nova-a', 'uuid-a', 'proj-1')
        instances = os.path.join(self.tmp, 'instances.json')
        with open(instances, 'w') as f:
            # as the API answers /1.0/instances?recursion=1&all-projects
            json.dump({'type': 'sync', 'metadata':
                       self.daemon.list_all_instances()}, f)
        resources = os.path.join(self.tmp, 'resources.json')
        with open(resources, 'w') as f:
            json.dump(self.resources, f)
        # the daemon is not asked when files are given
        self.useFixture(fixtures.MonkeyPatch(
            'nova_lxd_accel.client.LXDClient', None))
        sharing = self.providers('--resources-file', resources,
                                 '--instances-file', instances)[SHARED_RP][
                                     'sharing']
        self.assertEqual((1, 'uuid-a'), (sharing['slots_used'],
                                         sharing['slots'][0]['instance']))
        self.stdout.seek(0)
        self.stdout.truncate(0)
        self.assertIn('    shared: 2 slots, holders unknown (give '
                      '--instances-file with --resources-file)',
                      self.run_inventory('--resources-file', resources))

    def test_bad_instances_file(self):
        path = os.path.join(self.tmp, 'instances.json')
        with open(path, 'w') as f:
            f.write('{"gpu": {}}')
        self.run_inventory('--instances-file', path, expect=2)
        self.assertIn(path + ': expected a JSON list of instance records',
                      self.stderr.getvalue())


class InventoryEndpointTest(host_cli.CommandTestCase):

    def _run(self, conf_text):
        path = os.path.join(self.tmp, 'nova.conf')
        with open(path, 'w') as f:
            f.write(conf_text)
        return main.main(['inventory', '--config-file', path,
                          '--nodename', 'cmp1', '--format', 'json'])

    def test_unreachable_endpoint_named(self):
        self.assertEqual(1, self._run('[lxd]\nendpoint = /nonexistent/s\n'))
        error = self.stderr.getvalue()
        self.assertIn('/nonexistent/s', error)
        self.assertIn('the socket does not exist', error)
