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

"""``nova-lxd-accel flavors``: proposals from saved files and the daemon.

Through the command's own entry point, on the recorded hosts of
``tests/unit/accel/samples`` and ``--query-gpu`` files in the probe's
field list (``tests/fixtures/fake_nvidia_smi``); the daemon's answers are
the recorded LXD 5.0.2 ones, served at the HTTP boundary. The proposals'
own rules are :mod:`nova_lxd_accel.advice.flavor_proposals`'s (see
``tests/unit/advice/test_flavor_proposals.py``). ``--create`` talks to the
compute API through openstacksdk: :class:`flavors.SdkFlavors` is replaced
by an in-memory compute API, the boundary the functional test
``tests/functional/test_gpu_flavors.py`` runs for real.
"""

import json
import os

import fixtures
from requests_mock.contrib import fixture as requests_mock_fixture
import testtools

from nova_lxd_accel.advice import flavor_proposals
from nova_lxd_accel.cmd import flavors
from tests.fixtures import fake_nvidia_smi
from tests.fixtures import gpu_hosts
from tests.fixtures import host_cli
from tests.fixtures import seam_helpers

TWO_A100 = gpu_hosts.sample_path('handmade-lxd-two-a100-no-nvidia-object.json')
A100_MIG_L = gpu_hosts.sample_path('mig-L-a100-sxm4-80gb-7x1g10gb.txt')
GTX970 = gpu_hosts.sample_path('handmade-lxd-6195-gtx970-from-text.json')
#: the two A100s as the probe reads them (80 GiB each)
A100_QUERY = os.path.join(host_cli.SAMPLES, 'a100-unhealthy-no-cdi',
                          'query-gpu.csv')


class ComputeApi(object):
    """Flavors of a compute API, in memory (``SdkFlavors``' methods)."""

    def __init__(self, *names, fail=None):
        self.names = set(names)
        self.created = []
        self.fail = fail

    def existing(self):
        if self.fail:
            raise self.fail
        return set(self.names)

    def create(self, proposal):
        self.names.add(proposal.name)
        self.created.append(proposal)
        return 'id-%s' % proposal.name


class FlavorsTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path
        self.conf = self.write('nova.conf', '[lxd_accelerators]\n'
                               'nvidia_smi_path = %s\n' % os.path.join(
                                   self.tmp, 'no-nvidia-smi'))

    def write(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, 'w') as f:
            f.write(text)
        return path

    def run_flavors(self, *argv):
        return host_cli.run('flavors', '--config-file', self.conf, *argv)

    def proposals(self, *argv):
        rc, out, err = self.run_flavors('--format', 'json', *argv)
        self.assertEqual(0, rc, err)
        return {p['name']: p for p in json.loads(out)}


class TestSavedFiles(FlavorsTest):

    def test_mig_and_whole_gpu_with_probed_memory(self):
        found = self.proposals('--resources-file', TWO_A100,
                               '--nvidia-smi-list', A100_MIG_L,
                               '--query-gpu', A100_QUERY)
        self.assertEqual(['g1.a100-sxm4-80gb', 'g1.a100-sxm4-80gb-1g.10gb'],
                         sorted(found))
        whole = found['g1.a100-sxm4-80gb']
        self.assertEqual((['0000:85:00.0'], 4, 16384, 20),
                         (whole['gpus'], whole['vcpus'], whole['ram'],
                          whole['disk']))
        self.assertEqual('81920', whole['extra_specs']['Accelerator:Memory'])
        self.assertIn('(80 GB each)', whole['description'])
        mig = found['g1.a100-sxm4-80gb-1g.10gb']
        self.assertEqual(['0000:07:00.0'], mig['gpus'])
        self.assertEqual('1/7',
                         mig['extra_specs']['accounting:accelerator_count'])

    def test_sizes_count_and_prefix(self):
        found = self.proposals('--resources-file', TWO_A100,
                               '--nvidia-smi-list', '/dev/null',
                               '--query-gpu', A100_QUERY, '--vcpus', '8',
                               '--ram', '32768', '--disk', '40', '--count',
                               '2', '--prefix', 'gpu')
        [proposal] = found.values()
        self.assertEqual(('gpu.a100-sxm4-80gb.x2', 8, 32768, 40),
                         (proposal['name'], proposal['vcpus'],
                          proposal['ram'], proposal['disk']))
        self.assertEqual('2', proposal['extra_specs']['resources:PGPU'])
        self.assertTrue(proposal['description'].startswith(
            '2 whole NVIDIA A100-SXM4-80GB GPUs'), proposal['description'])
        self.assertTrue(proposal['description'].endswith(
            'with 8 vCPUs and 32 GiB of RAM.'), proposal['description'])

    def test_table(self):
        rc, out, err = self.run_flavors('--resources-file', GTX970,
                                        '--nvidia-smi-list', '/dev/null',
                                        '--query-gpu', '/dev/null')
        self.assertEqual((0, ''), (rc, err))
        lines = out.splitlines()
        self.assertEqual('g1.gm204-geforce-gtx-970  (4 vCPU, 16384 MiB RAM, '
                         '20 GiB disk; GPUs 0000:01:00.0)', lines[0])
        self.assertEqual('    1 whole NVIDIA GM204 [GeForce GTX 970] GPU, in '
                         'an LXD container with 4 vCPUs and 16 GiB of RAM.',
                         lines[1])
        specs = [line.strip() for line in lines[2:]]
        self.assertEqual(sorted(specs), specs)
        self.assertIn('resources:PGPU=1', specs)
        # an empty --query-gpu file: no memory is claimed
        self.assertNotIn('Accelerator:Memory',
                         ' '.join(s.split('=')[0] for s in specs))

    def test_probed_name_names_the_flavor_and_its_model_trait(self):
        # LXD does not know this card's model; the probe does. The driver
        # then reports the model trait on its provider (discovery's
        # probed names), so the flavor named after it requires it.
        query = self.write('query-gpu.csv', '\n'.join((
            fake_nvidia_smi.QUERY_HEADER, fake_nvidia_smi.gpu_row(
                0, '0000:01:00.0', 'GPU-00000000-0000-4000-8000-000000000001',
                'NVIDIA GeForce GTX 970', total_mib=4096))) + '\n')
        [proposal] = self.proposals('--resources-file', GTX970,
                                    '--nvidia-smi-list', '/dev/null',
                                    '--query-gpu', query).values()
        self.assertEqual('g1.geforce-gtx-970', proposal['name'])
        self.assertEqual('4096',
                         proposal['extra_specs']['Accelerator:Memory'])
        self.assertEqual('required', proposal['extra_specs'].get(
            'trait:CUSTOM_GPU_MODEL_NVIDIA_GEFORCE_GTX_970'))

    def test_shared_gpu_mode_and_memory_come_from_nova_conf_and_probe(self):
        self.conf = self.write('shared.conf', '[lxd_accelerators]\n'
                               'shared_gpus = 0000:07:00.0:4:quota\n')
        found = self.proposals('--resources-file', TWO_A100,
                               '--nvidia-smi-list', '/dev/null',
                               '--query-gpu', A100_QUERY)
        share = found['g1.a100-sxm4-80gb-share-1of4-quota']
        self.assertEqual(['0000:07:00.0'], share['gpus'])
        # 81920 MiB in 4 slots
        self.assertEqual(('20480', 'required', 'false'), (
            share['extra_specs']['lxd:gpu_memory_mb'],
            share['extra_specs']['trait1:CUSTOM_GPU_SHARING_QUOTA'],
            share['extra_specs']['lxd:isolated_idmap']))
        self.assertEqual(['0000:85:00.0'], found['g1.a100-sxm4-80gb']['gpus'])

    def test_host_without_gpu(self):
        resources = gpu_hosts.sample_path(
            'maas-lp1939456-connectx3-infiniband.json')
        rc, out, _ = self.run_flavors('--resources-file', resources,
                                      '--nvidia-smi-list', '/dev/null')
        self.assertEqual((0, 'no GPU: no GPU flavor to propose\n'), (rc, out))


class TestBadInput(FlavorsTest):

    def bad(self, *argv):
        rc, out, err = self.run_flavors(*argv)
        self.assertEqual((2, ''), (rc, out))
        self.assertTrue(err.startswith('nova-lxd-accel flavors: error: '),
                        err)
        return err

    def test_sizes_below_their_lowest(self):
        for argv in (('--vcpus', '0'), ('--ram', '-1'), ('--disk', '-5'),
                     ('--count', '0')):
            err = self.bad('--resources-file', TWO_A100, *argv)
            self.assertIn('%s %s: it must be' % argv, err)
            self.assertEqual(1, err.count('\n'), err)
        # a root disk of 0 is nova's "the image's size"
        self.proposals('--resources-file', TWO_A100, '--disk', '0')

    def test_missing_resources_file(self):
        path = os.path.join(self.tmp, 'resources.json')
        self.assertIn(path + ': cannot read', self.bad(
            '--resources-file', path))

    def test_nvidia_smi_list_that_is_something_else(self):
        path = self.write('list.txt', 'Tue Jul 14 2026\n| NVIDIA-SMI |\n')
        self.assertIn(path + ': no "GPU <n>', self.bad(
            '--resources-file', TWO_A100, '--nvidia-smi-list', path))

    def test_missing_query_gpu_file(self):
        path = os.path.join(self.tmp, 'query-gpu.csv')
        self.assertIn(path, self.bad('--resources-file', TWO_A100,
                                     '--nvidia-smi-list', '/dev/null',
                                     '--query-gpu', path))

    def test_query_gpu_file_that_is_not_csv(self):
        path = self.write('query-gpu.csv', 'garbage\n')
        self.assertIn('no CSV header', self.bad(
            '--resources-file', TWO_A100, '--nvidia-smi-list', '/dev/null',
            '--query-gpu', path))


class TestDaemon(FlavorsTest):

    def test_unreachable_daemon_says_to_give_a_file(self):
        gone = os.path.join(self.tmp, 'unix.socket')
        self.conf = self.write('nova.conf', '[lxd]\nendpoint = %s\n' % gone)
        rc, out, err = self.run_flavors()
        self.assertEqual((1, ''), (rc, out))
        self.assertIn('nova-lxd-accel flavors: error: cannot read '
                      '/1.0/resources from the local daemon: ', err)
        self.assertIn(gone, err)
        self.assertTrue(err.rstrip().endswith('; give --resources-file'),
                        err)

    def test_resources_read_from_the_daemon(self):
        socket = seam_helpers.SocketFile()
        self.addCleanup(socket.close)
        mock = self.useFixture(requests_mock_fixture.Fixture())
        mock.add_matcher(seam_helpers.Replay(
            seam_helpers.load('lxd-5.0.2', 'server_info')['exchanges'] +
            seam_helpers.load('lxd-5.0.2', 'host_reads')['exchanges']))
        self.conf = self.write('nova.conf', '[lxd]\nendpoint = %s\n'
                               'project = %s\n' % (socket.path,
                                                   seam_helpers.PROJECT))
        rc, out, err = self.run_flavors('--nvidia-smi-list', '/dev/null',
                                        '--query-gpu', '/dev/null')
        self.assertEqual((0, ''), (rc, err))
        # the recorded daemon's host has no GPU
        self.assertEqual('no GPU: no GPU flavor to propose\n', out)
        self.assertIn('/1.0/resources', [r.path for r in mock.request_history])


class TestCreate(FlavorsTest):

    def use_api(self, api):
        clouds = []

        def connect(cloud=None):
            clouds.append(cloud)
            return api
        self.useFixture(fixtures.MonkeyPatch(
            'nova_lxd_accel.cmd.flavors.SdkFlavors', connect))
        return clouds

    def test_create_makes_only_the_missing_flavors(self):
        self.assertEqual([], flavors.create([], ComputeApi()))
        proposals = [flavor_proposals.Proposal(
            name=name, vcpus=1, ram=512, disk=1, description='d',
            extra_specs={}, gpus=()) for name in ('g1.a', 'g1.b', 'g1.c')]
        api = ComputeApi('g1.b')
        self.assertEqual(['g1.a', 'g1.c'], flavors.create(proposals, api))
        self.assertEqual(['g1.a', 'g1.c'], [p.name for p in api.created])
        self.assertEqual([], flavors.create(proposals, api))

    def test_create_prints_what_it_created(self):
        api = ComputeApi('g1.a100-sxm4-80gb')
        clouds = self.use_api(api)
        rc, out, err = self.run_flavors(
            '--resources-file', TWO_A100, '--nvidia-smi-list', A100_MIG_L,
            '--query-gpu', A100_QUERY, '--create', '--os-cloud', 'site')
        self.assertEqual((0, ''), (rc, err))
        self.assertEqual(['site'], clouds)
        self.assertEqual('created: g1.a100-sxm4-80gb-1g.10gb',
                         out.splitlines()[-1])
        [created] = api.created
        self.assertEqual('1', created.extra_specs[
            'resources:CUSTOM_MIG_1G_10GB'])
        rc, out, _ = self.run_flavors(
            '--resources-file', TWO_A100, '--nvidia-smi-list', A100_MIG_L,
            '--query-gpu', A100_QUERY, '--create', '--os-cloud', 'site')
        self.assertEqual('created: none (all exist)', out.splitlines()[-1])

    def test_a_flavor_whose_extra_specs_fail_is_not_left_behind(self):
        # booted, a flavor without its extra specs would ask for no GPU
        calls = []

        class Compute(object):
            def create_flavor(self, **kwargs):
                calls.append(('create', kwargs['name']))
                return 'flavor-1'

            def create_flavor_extra_specs(self, flavor, specs):
                raise RuntimeError('400 Validation failed')

            def delete_flavor(self, flavor, ignore_missing=False):
                calls.append(('delete', flavor))

        sdk = flavors.SdkFlavors.__new__(flavors.SdkFlavors)
        sdk._conn = type('Conn', (), {'compute': Compute()})()
        proposal = flavor_proposals.Proposal(
            name='g1.a', vcpus=1, ram=512, disk=1, description='d',
            extra_specs={'resources:PGPU': '1'}, gpus=())
        self.assertRaises(RuntimeError, sdk.create, proposal)
        self.assertEqual([('create', 'g1.a'), ('delete', 'flavor-1')], calls)

    def test_create_failure_names_the_cloud_and_exits_1(self):
        self.use_api(ComputeApi(fail=RuntimeError('401 Unauthorized')))
        rc, out, err = self.run_flavors(
            '--resources-file', TWO_A100, '--nvidia-smi-list', '/dev/null',
            '--query-gpu', A100_QUERY, '--create', '--os-cloud', 'site')
        self.assertEqual(1, rc)
        # the proposals were printed before
        self.assertIn('g1.a100-sxm4-80gb  (4 vCPU', out)
        self.assertEqual('nova-lxd-accel flavors: error: cannot create the '
                         'flavors on site: 401 Unauthorized\n', err)

    def test_nothing_to_create_on_a_host_without_gpu(self):
        clouds = self.use_api(ComputeApi())
        resources = gpu_hosts.sample_path(
            'maas-lp1939456-connectx3-infiniband.json')
        rc, out, _ = self.run_flavors('--resources-file', resources,
                                      '--nvidia-smi-list', '/dev/null',
                                      '--create')
        self.assertEqual((0, 'no GPU: no GPU flavor to propose\n'), (rc, out))
        self.assertEqual([], clouds)
