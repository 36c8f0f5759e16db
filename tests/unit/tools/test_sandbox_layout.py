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

"""The sandbox's layout, secrets and configuration files, no cloud.

``tools/sandbox/layout.py`` (state directory, ports, services),
``credentials.py`` (secrets.env and file modes) and ``configs.py`` (every
service's configuration) are pure or write only under a temporary state
directory here: the steps of ``up`` that can be checked without starting
a service.
"""

import base64
import configparser
import io
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import time

import testtools

from tests.fixtures import gpu_hosts
from tools.sandbox import catalogue
from tools.sandbox import credentials
from tools.sandbox import databases
from tools.sandbox import hardware
from tools.sandbox import install
from tools.sandbox import layout
from tools.sandbox import processes
from tools.sandbox import services
from tools.sandbox.venv import configs

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
HELPERS = os.path.join(REPO, 'tools', 'sandbox')


class LayoutTest(testtools.TestCase):

    def test_ports_are_distinct_and_inside_the_sandbox_s_range(self):
        lay = layout.Layout('/srv/sandbox', 27100)
        ports = list(lay.ports.values())
        self.assertEqual(len(ports), len(set(ports)))
        for port in ports:
            self.assertTrue(27100 <= port < 27100 + layout.PORT_SPAN, port)

    def test_nova_api_serves_the_compute_and_metadata_ports(self):
        lay = layout.Layout('/srv/sandbox', 27100)
        self.assertEqual([27174, 27175], services.ports(lay, 'nova-api'))
        self.assertEqual([], services.ports(lay, 'neutron-ovs-agent'))
        self.assertEqual([], services.ports(lay, 'no-such-service'))

    def test_a_base_inside_the_ephemeral_range_is_refused(self):
        problem = layout.Layout('/s', 40000).port_range_problem(
            (32768, 60999))
        self.assertIn('ports 40000-40099 overlap the kernel\'s ephemeral '
                      'range 32768-60999', problem)
        # the last port only
        self.assertIsNotNone(layout.Layout('/s', 32669).port_range_problem(
            (32768, 60999)))
        self.assertIsNone(layout.Layout('/s', 32668).port_range_problem(
            (32768, 60999)))
        self.assertIsNone(layout.Layout('/s', 26100).port_range_problem(
            None))
        self.assertIn('needs ports', layout.Layout('/s', 65500)
                      .port_range_problem(None))

    def test_environment_picks_directory_and_base(self):
        lay = layout.Layout.from_environ({'SANDBOX_DIR': '/x/y',
                                          'SANDBOX_PORT_BASE': '27000'})
        self.assertEqual('/x/y/etc', lay.etc)
        self.assertEqual(27006, lay.ports['MYSQL'])
        lay = layout.Layout.from_environ({})
        self.assertEqual(layout.DEFAULT_DIR, lay.dir)
        self.assertRaises(ValueError, layout.Layout.from_environ,
                          {'SANDBOX_PORT_BASE': 'high'})

    def test_shell_assignments_survive_odd_paths(self):
        # bash reads back exactly what layout.py holds, whatever the path
        odd = "/tmp/a dir/it's $HOME"
        env = dict(os.environ, SANDBOX_DIR=odd, SANDBOX_PORT_BASE='27100')
        script = ('eval "$(cd %s && python3 -m tools.sandbox.layout shell)"; '
                  'printf "%%s\\n" "$ETC" '
                  '"$HW_SOCKET" "$PORT_NOVA" "$KEYSTONE_URL" "$OUTSIDE_NS"'
                  % REPO)
        result = subprocess.run(['bash', '-c', script], env=env,
                                capture_output=True, text=True, timeout=60,
                                check=True)
        self.assertEqual([odd + '/etc', odd + '/run/hwproxy.sock', '27174',
                          'http://127.0.0.1:27150', 'sandbox-outside'],
                         result.stdout.splitlines())


def _settings(lay, hardware=None, microversion='2.100', second=None):
    secrets = {name: name.lower() + '-value' for name in credentials.NAMES}
    return configs.Settings(lay, secrets, 'lxd_accel.LXDDriver',
                            '/var/lib/lxd/unix.socket', hardware,
                            microversion, second)


def _two_hosts(backend='lxd'):
    return configs.second_host(backend, '/var/lib/%s/unix.socket' % backend,
                               '/var/lib/%s-peer' % backend, 'first')


def _parse(text):
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    return parser


class ConfigsTest(testtools.TestCase):
    """Every file ``up`` writes, built from one layout and one secrets."""

    def setUp(self):
        super().setUp()
        self.layout = layout.Layout('/srv/sandbox', 27100)
        self.files = configs.build(_settings(self.layout))

    def test_every_ini_file_parses(self):
        for path, text in self.files.items():
            if path.endswith(('.conf', '.ini')) and 'rabbitmq' not in path \
                    and not path.endswith('dnsmasq.conf'):
                _parse(text)

    def test_every_file_a_service_reads_is_written(self):
        # the layout's list (what restarts a service when it changes) and
        # the writers agree; nova's paste file (copied from the venv) and
        # the recorded hardware come from elsewhere.
        elsewhere = ('etc/nova/api-paste.ini',)
        two_hosts = configs.build(_settings(self.layout,
                                            second=_two_hosts()))
        for service in services.SERVICES:
            for path in service.files:
                if path.startswith('etc/') and path not in elsewhere:
                    self.assertIn(path, two_hosts, service.name)
                    if service.name not in processes.SECOND_HOST_SERVICES:
                        self.assertIn(path, self.files, service.name)

    def test_services_meet_at_the_layout_s_ports(self):
        nova = _parse(self.files['etc/nova/nova.conf'])
        neutron = _parse(self.files['etc/neutron/neutron.conf'])
        metadata = _parse(self.files['etc/neutron/metadata_agent.ini'])
        glance = _parse(self.files['etc/glance/glance-api.conf'])
        ports = self.layout.ports
        keystone = 'http://127.0.0.1:%d/v3' % ports['KEYSTONE']
        for section in ('keystone_authtoken', 'placement', 'neutron',
                        'service_user'):
            self.assertEqual(keystone, nova[section]['auth_url'], section)
        self.assertEqual(keystone, neutron['nova']['auth_url'])
        self.assertEqual(
            'rabbit://openstack:rabbit_password-value@127.0.0.1:%d/'
            % ports['AMQP'], nova['DEFAULT']['transport_url'])
        self.assertEqual(nova['DEFAULT']['transport_url'],
                         neutron['DEFAULT']['transport_url'])
        self.assertIn('@127.0.0.1:%d/nova?' % ports['MYSQL'],
                      nova['database']['connection'])
        # the metadata agent reaches nova-api's second port, with the
        # secret nova checks
        self.assertEqual(str(ports['METADATA']),
                         metadata['DEFAULT']['nova_metadata_port'])
        self.assertEqual(services.ports(self.layout, 'nova-api')[1],
                         ports['METADATA'])
        self.assertEqual(nova['neutron']['metadata_proxy_shared_secret'],
                         metadata['DEFAULT']['metadata_proxy_shared_secret'])
        self.assertEqual(str(ports['GLANCE']), glance['DEFAULT']['bind_port'])
        self.assertEqual(str(ports['NEUTRON']),
                         neutron['DEFAULT']['bind_port'])
        self.assertIn('export OS_AUTH_URL=%s\n' % keystone,
                      self.files['openrc'])
        self.assertIn("compute_api_version: '2.100'",
                      self.files['clouds.yaml'])

    def test_nova_compute_sees_no_database(self):
        nova = _parse(self.files['etc/nova/nova.conf'])
        compute = _parse(self.files['etc/nova/nova-compute.conf'])
        self.assertTrue(nova.has_section('database'))
        self.assertTrue(nova.has_section('api_database'))
        self.assertFalse(compute.has_section('database'))
        self.assertFalse(compute.has_section('api_database'))
        self.assertNotIn('db_password-value',
                         self.files['etc/nova/nova-compute.conf'])
        self.assertEqual('/var/lib/lxd/unix.socket',
                         compute['lxd']['endpoint'])
        self.assertFalse(compute.has_section('lxd_accelerators'))

    def test_the_bench_s_fake_compute_is_another_host(self):
        fake = _parse(self.files['etc/nova/nova-compute-fake.conf'])
        self.assertEqual('fake.FakeDriver', fake['DEFAULT']['compute_driver'])
        self.assertEqual(catalogue.FAKE_HOST, fake['DEFAULT']['host'])
        self.assertFalse(fake.has_section('database'))
        compute = _parse(self.files['etc/nova/nova-compute.conf'])
        self.assertEqual('lxd_accel.LXDDriver',
                         compute['DEFAULT']['compute_driver'])
        self.assertFalse(compute.has_option('DEFAULT', 'host'))

    def test_project_networks_are_vlans_of_the_tenant_bridge(self):
        ml2 = _parse(self.files['etc/neutron/plugins/ml2/ml2_conf.ini'])
        self.assertEqual('vlan', ml2['ml2']['tenant_network_types'])
        self.assertEqual('tenant:100:199',
                         ml2['ml2_type_vlan']['network_vlan_ranges'])
        agent = _parse(self.files['etc/neutron/openvswitch_agent.ini'])
        self.assertEqual('public:br-ex,tenant:br-tenant',
                         agent['ovs']['bridge_mappings'])
        # one host: no second agent, no second nova-compute, no migration
        self.assertNotIn('etc/neutron/openvswitch_agent-2.ini', self.files)
        self.assertNotIn('etc/nova/nova-compute-2.conf', self.files)
        compute = _parse(self.files['etc/nova/nova-compute.conf'])
        self.assertFalse(compute.has_section('lxd_migration'))

    def test_second_host_has_its_agent_daemon_and_directories(self):
        files = configs.build(_settings(self.layout, second=_two_hosts()))
        agent = _parse(files['etc/neutron/openvswitch_agent-2.ini'])
        first_agent = _parse(files['etc/neutron/openvswitch_agent.ini'])
        self.assertEqual(catalogue.SECOND_HOST, agent['DEFAULT']['host'])
        self.assertEqual('br-int-2', agent['ovs']['integration_bridge'])
        self.assertEqual('public:br-ex-2,tenant:br-tenant-2',
                         agent['ovs']['bridge_mappings'])
        self.assertNotEqual(
            first_agent['ovs'].get('of_listen_port', '6633'),
            agent['ovs']['of_listen_port'])
        first = _parse(files['etc/nova/nova-compute.conf'])
        second = _parse(files['etc/nova/nova-compute-2.conf'])
        self.assertEqual(catalogue.SECOND_HOST, second['DEFAULT']['host'])
        self.assertFalse(first.has_option('DEFAULT', 'host'))
        self.assertFalse(second.has_section('database'))
        self.assertEqual('/var/lib/lxd-peer/unix.socket',
                         second['lxd']['endpoint'])
        self.assertEqual('/var/lib/lxd/unix.socket', first['lxd']['endpoint'])
        for option in (('DEFAULT', 'state_path'),
                       ('DEFAULT', 'instances_path'),
                       ('oslo_concurrency', 'lock_path')):
            self.assertNotEqual(first.get(*option), second.get(*option))
            self.assertIn('/srv/sandbox/data/nova-2', second.get(*option))
        # either one sends a container to the other's daemon
        for conf in (first, second):
            self.assertEqual(
                'first:https://127.0.0.1:8443,'
                'sandbox-compute-2:https://127.0.0.1:8444',
                conf['lxd_migration']['endpoints'])
            self.assertEqual(
                'first:/var/lib/lxd/server.crt,'
                'sandbox-compute-2:/var/lib/lxd-peer/server.crt',
                conf['lxd_migration']['server_certs'])
            self.assertEqual('/var/lib/lxd-peer/nova-migration.crt',
                             conf['lxd_migration']['client_cert'])
            self.assertEqual('false', conf['lxd_migration']['same_host'])

    def test_second_host_on_incus_uses_incus_s_addresses(self):
        second = _two_hosts('incus')
        self.assertEqual('/var/lib/incus-peer/unix.socket',
                         second.daemon_socket)
        self.assertEqual(['https://127.0.0.1:8445', 'https://127.0.0.1:8446'],
                         list(second.endpoints.values()))

    def test_horizon_settings_are_python_with_the_secret_key(self):
        namespace = {}
        exec(self.files['etc/horizon/local_settings.py'], namespace)
        self.assertEqual('horizon_secret_key-value', namespace['SECRET_KEY'])
        self.assertEqual('http://127.0.0.1:27150/v3',
                         namespace['OPENSTACK_KEYSTONE_URL'])
        self.assertFalse(namespace['DEBUG'])

    def test_simulated_hardware_goes_to_nova_compute_only(self):
        files = configs.build(_settings(self.layout, hardware='h100-mig'))
        nova = _parse(files['etc/nova/nova.conf'])
        compute = _parse(files['etc/nova/nova-compute.conf'])
        self.assertEqual('/var/lib/lxd/unix.socket', nova['lxd']['endpoint'])
        self.assertEqual(self.layout.hw_socket, compute['lxd']['endpoint'])
        self.assertEqual('/srv/sandbox/data/hardware/nvidia-smi',
                         compute['lxd_accelerators']['nvidia_smi_path'])
        self.assertIn('# SIMULATED hardware: recorded host h100-mig',
                      files['etc/nova/nova-compute.conf'])

    def test_newest_microversion_of_the_installed_nova(self):
        version = configs.newest_microversion()
        self.assertRegex(version, r'^2\.\d+$')
        # flavor extra spec validation (2.86) must be on
        self.assertGreaterEqual(int(version.split('.')[1]), 86)


class WriteTest(testtools.TestCase):
    """Writing the files and the secrets under a temporary state dir."""

    def setUp(self):
        super().setUp()
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.layout = layout.Layout(os.path.join(tmp.name, 'sandbox'), 27100)
        os.mkdir(self.layout.dir, 0o700)
        # modes must not depend on the caller's umask
        old = os.umask(0o022)
        self.addCleanup(os.umask, old)

    def _mode(self, path):
        return stat.S_IMODE(os.stat(path).st_mode)

    def test_secrets_are_made_once_and_kept(self):
        self.assertEqual(list(credentials.NAMES),
                         credentials.ensure(self.layout))
        path = credentials.secrets_path(self.layout)
        self.assertEqual(0o600, self._mode(path))
        first = credentials.load(self.layout)
        self.assertEqual(set(credentials.NAMES), set(first))
        for value in first.values():
            self.assertRegex(value, r'^[0-9a-f]{24}$')
        self.assertEqual(len(first), len(set(first.values())))
        self.assertEqual([], credentials.ensure(self.layout))
        self.assertEqual(first, credentials.load(self.layout))

    def test_an_older_secrets_file_gains_the_new_names_only(self):
        path = credentials.secrets_path(self.layout)
        with open(path, 'w') as handle:
            handle.write('ADMIN_PASSWORD=kept\n')
        os.chmod(path, 0o600)
        added = credentials.ensure(self.layout)
        self.assertNotIn('ADMIN_PASSWORD', added)
        self.assertEqual('kept',
                         credentials.load(self.layout)['ADMIN_PASSWORD'])
        self.assertEqual(set(credentials.NAMES),
                         set(credentials.load(self.layout)))

    def test_files_are_0600_in_0700_directories(self):
        credentials.ensure(self.layout)
        settings = _settings(self.layout)
        written = configs.write(settings)
        self.assertIn(self.layout.path('etc', 'nova', 'nova.conf'), written)
        self.assertIn(self.layout.path('openrc'), written)
        for path in written:
            self.assertEqual(0o600, self._mode(path), path)
        for root, dirs, _files in os.walk(self.layout.etc):
            self.assertEqual(0o700, self._mode(root), root)
        for relative in configs.DATA_DIRS:
            self.assertTrue(os.path.isdir(self.layout.path(relative)))
        self.assertEqual([], credentials.problems(self.layout))
        # written again: same files, no temporary file left
        configs.write(settings)
        leftovers = [name for _root, _dirs, files in os.walk(self.layout.dir)
                     for name in files if name.endswith('.new')]
        self.assertEqual([], leftovers)

    def test_problems_name_each_file_and_lock_down_mends_them(self):
        credentials.ensure(self.layout)
        configs.write(_settings(self.layout))
        conf = self.layout.path('etc', 'nova', 'nova.conf')
        nova_dir = os.path.dirname(conf)
        os.chmod(conf, 0o644)
        os.chmod(nova_dir, 0o755)
        os.chmod(self.layout.dir, 0o711)
        found = credentials.problems(self.layout)
        self.assertEqual(3, len(found), found)
        text = '\n'.join(found)
        self.assertIn('%s (configuration or credentials) is mode 644' % conf,
                      text)
        self.assertIn('run: chmod 600 %s' % conf, text)
        self.assertIn('%s is mode 755' % nova_dir, text)
        self.assertIn('%s is mode 711: other users can reach'
                      % self.layout.dir, text)
        credentials.lock_down(self.layout)
        self.assertEqual([], credentials.problems(self.layout))

    def test_simulated_host_is_read_from_the_hardware_directory(self):
        self.assertIsNone(configs.simulated_host(self.layout))
        os.makedirs(self.layout.hardware)
        with open(os.path.join(self.layout.hardware, 'resources.json'),
                  'w') as handle:
            handle.write('{}')
        with open(os.path.join(self.layout.hardware, 'name'), 'w') as handle:
            handle.write('h100-mig-a100-ib\n')
        self.assertEqual('h100-mig-a100-ib',
                         configs.simulated_host(self.layout))

    def test_recorded_host_options_reach_nova_compute(self):
        # a recorded host may carry [lxd_accelerators] options (the GPU
        # release benchmark shares one A100 this way)
        os.makedirs(self.layout.hardware)
        with open(os.path.join(self.layout.hardware,
                               'lxd_accelerators.conf'), 'w') as handle:
            handle.write('# one A100 in two slots\n'
                         'shared_gpus = 0000:85:00.0:2\n')
        files = configs.build(_settings(self.layout, hardware='h100-mig'))
        compute = _parse(files['etc/nova/nova-compute.conf'])
        self.assertEqual('0000:85:00.0:2',
                         compute['lxd_accelerators']['shared_gpus'])
        self.assertFalse(_parse(files['etc/nova/nova.conf']).has_option(
            'lxd_accelerators', 'shared_gpus'))


class NoStrayPortsTest(testtools.TestCase):
    """No script or benchmark computes a sandbox port on its own."""

    def test_port_offsets_appear_only_in_layout_py(self):
        pattern = re.compile(r'(SANDBOX_PORT_BASE|port_base)\s*\+\s*\d')
        offenders = []
        for folder in ('tools', 'benchmarks', '.ci'):
            for root, dirs, files in os.walk(os.path.join(REPO, folder)):
                # .ci/state: images and caches of earlier runs
                dirs[:] = [name for name in dirs
                           if name not in ('state', '__pycache__')]
                for name in files:
                    if not name.endswith(('.sh', '.py', 'run')):
                        continue
                    path = os.path.join(root, name)
                    if path == os.path.join(HELPERS, 'layout.py'):
                        continue
                    with open(path, errors='replace') as handle:
                        if pattern.search(handle.read()):
                            offenders.append(path)
        self.assertEqual([], offenders)


class ServicesTest(testtools.TestCase):
    """Each service's command agrees with the layout and the files."""

    def setUp(self):
        super().setUp()
        self.layout = layout.Layout('/srv/sandbox', 27100)
        self.context = services.Context('/var/lib/lxd/unix.socket')

    def _command(self, name):
        return services.command(self.layout, name, self.context)

    def test_every_service_has_a_command(self):
        self.assertEqual([service.name for service in services.SERVICES],
                         list(services.COMMANDS))
        self.assertRaises(ValueError, self._command, 'nova-metadata')

    def test_every_config_file_a_command_reads_restarts_it(self):
        # sandbox.sh restarts a service when a file of its layout entry
        # changes: each --config-file of its command must be one of them.
        for service in services.SERVICES:
            argv = self._command(service.name).argv
            watched = services.files(self.layout, service.name)
            for index, word in enumerate(argv):
                if word == '--config-file':
                    self.assertIn(argv[index + 1], watched, service.name)
                if word.endswith(('wsgi_server.py', 'in_process.py')):
                    self.assertIn(word, watched, service.name)

    def test_servers_listen_on_the_layout_s_ports(self):
        for service in services.SERVICES:
            command = self._command(service.name)
            text = ' '.join(command.argv + ['%s=%s' % item for item in
                                            command.env.items()])
            for port in services.ports(self.layout, service.name):
                self.assertIn(str(port), text, service.name)
            if service.ports:
                self.assertGreater(command.ready_s, 0, service.name)
        argv = self._command('nova-api').argv
        self.assertEqual('27174', argv[argv.index('--port') + 1])
        self.assertEqual('27175=nova.wsgi.metadata',
                         argv[argv.index('--also') + 1])

    def test_hardware_proxy_fronts_the_named_daemon(self):
        argv = self._command('hwproxy').argv
        self.assertEqual('/var/lib/lxd/unix.socket',
                         argv[argv.index('--upstream') + 1])
        self.assertEqual(self.layout.hw_socket,
                         argv[argv.index('--socket') + 1])
        self.assertIn('SIMULATED hardware', argv[argv.index('--banner') + 1])

    def test_command_line_output_for_the_shell(self):
        env = dict(os.environ, SANDBOX_DIR='/srv/sandbox',
                   SANDBOX_PORT_BASE='27100')
        result = subprocess.run(
            [sys.executable, '-m', 'tools.sandbox.services', 'command',
             'epmd', '--daemon-socket', '/x.sock'], env=env, cwd=REPO,
            capture_output=True, timeout=60, check=True)
        self.assertEqual([b'20', b'epmd', b'-address', b'127.0.0.1',
                          b'-port', b'27143', b''],
                         result.stdout.split(b'\0'))
        result = subprocess.run(
            [sys.executable, '-m', 'tools.sandbox.services', 'command',
             'keystone', '--daemon-socket', '/x.sock'], env=env, cwd=REPO,
            capture_output=True, timeout=60, check=True)
        self.assertEqual([b'120', b'env',
                          b'OS_KEYSTONE_CONFIG_DIR=/srv/sandbox/etc/keystone'],
                         result.stdout.split(b'\0')[:3])
        result = subprocess.run(
            [sys.executable, '-m', 'tools.sandbox.services', 'command',
             'nova-scheduler', '--daemon-socket', '/x.sock'], env=env,
            cwd=REPO, capture_output=True, text=True, timeout=60)
        self.assertEqual(2, result.returncode)
        self.assertIn("no service 'nova-scheduler'", result.stderr)


class HardwareTest(testtools.TestCase):
    """``up --hardware``: a recorded host copied under the state dir."""

    def setUp(self):
        super().setUp()
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.layout = layout.Layout(os.path.join(tmp.name, 'sandbox'), 27100)
        os.makedirs(self.layout.data)

    def test_names_are_the_shipped_and_the_doctor_s_hosts(self):
        names = hardware.names()
        self.assertIn('h100-mig-a100-ib', names)
        self.assertIn('h100-mig-cdi', names)
        self.assertIsNone(hardware.source('no-such-host'))
        self.assertEqual(os.path.join(HELPERS, 'hardware', 'h100-mig-a100-ib'),
                         hardware.source('h100-mig-a100-ib'))

    def test_summary_of_a_recorded_host(self):
        self.assertEqual(
            '3 NVIDIA GPUs, 4 MIG devices, 8 InfiniBand ports and VFs',
            hardware.summary(hardware.source('h100-mig-a100-ib')))
        # the H200 captured on a GPU machine: what it has, nothing more
        self.assertEqual('1 NVIDIA GPU',
                         hardware.summary(hardware.source('h200-vm')))
        self.assertEqual('no recorded resources',
                         hardware.summary('/nonexistent'))

    def test_the_composed_eight_gpu_host_is_the_tests_host(self):
        directory = hardware.source('hgx-8x-h100')
        self.assertEqual('8 NVIDIA GPUs', hardware.summary(directory))
        with open(os.path.join(directory, 'resources.json')) as handle:
            cards = json.load(handle)['gpu']['cards']
        # the very host the pool tests boot on (tests/fixtures/gpu_hosts)
        self.assertEqual(gpu_hosts.hgx_eight_gpu_cards(), cards)
        # its simulated nvidia-smi answers topo -m (the cards' links)
        hardware.prepare(self.layout, 'hgx-8x-h100')
        smi = os.path.join(self.layout.hardware, 'nvidia-smi')
        out = subprocess.run([smi, 'topo', '-m'], capture_output=True,
                             text=True, check=True).stdout
        self.assertIn('NV18', out)

    def test_prepare_keep_and_remove(self):
        self.assertIn("the host's own", hardware.prepare(self.layout, '')[0])
        lines = hardware.prepare(self.layout, 'h100-mig-a100-ib')
        self.assertIn('SIMULATED hardware: h100-mig-a100-ib', lines[0])
        self.assertTrue(hardware.active(self.layout))
        self.assertEqual('h100-mig-a100-ib', hardware.host_name(self.layout))
        self.assertFalse(os.path.exists(self.layout.hardware + '.new'))
        # the simulated nvidia-smi prints the recorded answers
        smi = os.path.join(self.layout.hardware, 'nvidia-smi')
        listed = subprocess.run([smi, '-L'], capture_output=True, text=True,
                                timeout=30, check=True).stdout
        with open(os.path.join(hardware.source('h100-mig-a100-ib'),
                               'nvidia-smi-L.txt')) as handle:
            self.assertEqual(handle.read(), listed)
        unknown = subprocess.run([smi, '--version'], capture_output=True,
                                 text=True, timeout=30)
        self.assertEqual(9, unknown.returncode)
        self.assertIn('no recorded answer', unknown.stderr)
        # nova-compute's configuration follows it
        self.assertEqual('h100-mig-a100-ib',
                         configs.simulated_host(self.layout))
        self.assertIn('kept from the last up',
                      hardware.prepare(self.layout, '')[0])
        hardware.prepare(self.layout, 'none')
        self.assertFalse(hardware.active(self.layout))
        self.assertIsNone(configs.simulated_host(self.layout))

    def test_shared_host_gets_its_mps_directories(self):
        hardware.prepare(self.layout, 'h200-shared')
        pci = '0000:00:06.0'
        for template in (hardware.MPS_PIPE, hardware.MPS_SHM):
            self.assertTrue(os.path.isdir(os.path.join(
                self.layout.hardware, template.format(pci=pci))))
        options = dict(hardware.options(self.layout) +
                       hardware.mps_options(self.layout))
        self.assertEqual('%s:4:quota' % pci, options['shared_gpus'])
        self.assertEqual(
            os.path.join(self.layout.hardware, hardware.MPS_PIPE),
            options['mps_pipe_directory'])
        # a host without shared GPUs gets no MPS options
        hardware.prepare(self.layout, 'h200-vm')
        self.assertEqual([], hardware.mps_options(self.layout))
        self.assertFalse(os.path.exists(os.path.join(self.layout.hardware,
                                                     'mps')))

    def test_unknown_host_is_refused_with_the_recorded_ones(self):
        error = self.assertRaises(ValueError, hardware.prepare, self.layout,
                                  'no-such-host')
        self.assertIn("no recorded host 'no-such-host'", str(error))
        self.assertIn('h100-mig-a100-ib', str(error))
        self.assertFalse(os.path.exists(self.layout.hardware))


class ProcessesTest(testtools.TestCase):
    """Start, find, restart and stop stand-in services (sleep)."""

    def setUp(self):
        super().setUp()
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        # a base whose ports nothing here uses: the free port the kernel
        # gives, moved so that it is the base's epmd port
        with socket.socket() as probe:
            probe.bind(('127.0.0.1', 0))
            self.free_port = probe.getsockname()[1]
        self.layout = layout.Layout(os.path.join(tmp.name, 'sandbox'),
                                    self.free_port - 43)
        for path in (self.layout.run, self.layout.logs,
                     os.path.join(self.layout.etc, 'keystone')):
            os.makedirs(path)
        self.out = io.StringIO()

    def _start(self, name, argv=('sleep', '60')):
        self.assertTrue(processes.start(self.layout, name, list(argv),
                                        self.out), self.out.getvalue())
        pid = processes.pid_of(self.layout, name)
        self.assertIsNotNone(pid)
        self.addCleanup(self._kill, pid)
        return pid

    @staticmethod
    def _kill(pid):
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass

    def test_started_in_its_own_session_from_root_with_its_log(self):
        pid = self._start('nova-compute-fake',
                          ['sh', '-c', 'echo hello from $MALLOC_ARENA_MAX; '
                           'exec sleep 60'])
        self.assertEqual(pid, os.getsid(pid))
        self.assertEqual('/', os.readlink('/proc/%d/cwd' % pid))
        log = os.path.join(self.layout.logs, 'nova-compute-fake.log')
        for _ in range(100):
            if 'hello' in processes.log_since_start(self.layout,
                                                    'nova-compute-fake'):
                break
            time.sleep(0.05)
        with open(log) as handle:
            text = handle.read()
        self.assertRegex(text, r'\n=== \S+: starting nova-compute-fake\n'
                               r'hello from 2\n')
        # started again: it already runs, nothing else starts
        self.assertTrue(processes.start(self.layout, 'nova-compute-fake',
                                        ['false'], self.out))
        self.assertIn('nova-compute-fake already runs (pid %d)' % pid,
                      self.out.getvalue())

    def test_a_recycled_pid_is_not_the_service(self):
        pid = self._start('nova-compute-fake')
        path = os.path.join(self.layout.run, 'nova-compute-fake.pid')
        with open(path) as handle:
            recorded, started = handle.read().split()
        self.assertEqual(str(pid), recorded)
        # the same pid, started at another time: another process
        with open(path, 'w') as handle:
            handle.write('%s %d\n' % (recorded, int(started) + 1))
        self.assertIsNone(processes.pid_of(self.layout, 'nova-compute-fake'))
        os.remove(path)
        self.assertIsNone(processes.pid_of(self.layout, 'nova-compute-fake'))

    def test_a_taken_port_refuses_the_start(self):
        with socket.socket() as holder:
            holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            holder.bind(('127.0.0.1', self.free_port))
            holder.listen(1)
            self.assertFalse(processes.start(self.layout, 'epmd',
                                             ['sleep', '60'], self.out))
        self.assertIn('cannot start epmd: port %d is taken'
                      % self.free_port, self.out.getvalue())
        self.assertFalse(os.path.exists(os.path.join(self.layout.run,
                                                     'epmd.pid')))

    def test_a_changed_configuration_restarts_only_its_service(self):
        conf = os.path.join(self.layout.etc, 'keystone', 'keystone.conf')
        with open(conf, 'w') as handle:
            handle.write('[DEFAULT]\n')
        keystone = self._start('keystone')
        neutron = self._start('neutron-rpc')
        processes.restart_changed(self.layout, self.out)
        self.assertEqual(keystone, processes.pid_of(self.layout, 'keystone'))
        with open(conf, 'a') as handle:
            handle.write('debug = true\n')
        processes.restart_changed(self.layout, self.out)
        self.assertIsNone(processes.pid_of(self.layout, 'keystone'))
        self.assertEqual(neutron, processes.pid_of(self.layout,
                                                   'neutron-rpc'))
        self.assertIn('stopping keystone (pid %d): its configuration '
                      'changed' % keystone, self.out.getvalue())

    def test_a_retired_service_is_stopped(self):
        old = self._start('nova-scheduler')
        processes.restart_changed(self.layout, self.out)
        self.assertFalse(processes.running(old))
        self.assertFalse(os.path.exists(os.path.join(
            self.layout.run, 'nova-scheduler.pid')))

    def test_one_that_ignores_term_is_killed_after_the_timeout(self):
        pid = self._start('nova-compute-fake',
                          ['sh', '-c', 'trap "" TERM; while :; do sleep 1; '
                           'done'])
        time.sleep(0.3)  # let sh set its trap
        left = processes.wait_pids(
            processes.terminate(self.layout, ['nova-compute-fake'],
                                self.out), 1, self.out)
        self.assertEqual([pid], left)
        self.assertIn('pid %d did not stop in 1s: KILL' % pid,
                      self.out.getvalue())
        for _ in range(100):
            if not processes.running(pid):
                break
            time.sleep(0.05)
        self.assertFalse(processes.running(pid))

    def test_down_stops_the_services_before_bus_and_database(self):
        pids = {name: self._start(name) for name in
                ('epmd', 'mariadb', 'rabbitmq', 'keystone', 'nova-compute')}
        self.assertEqual([], processes.down(self.layout, 5, self.out))
        order = [line.split()[1] for line in
                 self.out.getvalue().splitlines()
                 if line.startswith('stopping ')]
        self.assertEqual(['nova-compute', 'keystone', 'rabbitmq', 'mariadb',
                          'epmd'], order)
        for pid in pids.values():
            self.assertFalse(processes.running(pid))
        self.assertEqual([], [name for name in os.listdir(self.layout.run)
                              if name.endswith('.pid')])

    def test_status_counts_what_runs(self):
        self._start('keystone')
        self.assertFalse(processes.status(self.layout, 'lxd', '/x.sock',
                                          self.out))
        text = self.out.getvalue()
        self.assertIn("hardware: the host's own", text)
        self.assertRegex(text, r'\nkeystone +running +\d+ +%d '
                         % self.layout.ports['KEYSTONE'])
        self.assertRegex(text, r'\nepmd +stopped +- ')
        # neither the proxy nor Horizon is expected here
        self.assertIn('1/14 running', text)
        self.assertNotIn('hwproxy', text)


class InstallTest(testtools.TestCase):
    """What ``up`` installs, decided without installing anything."""

    def test_missing_debian_packages(self):
        self.assertEqual([], install.missing_debian_packages(
            'lxd', 'python3', which=lambda name: '/usr/bin/' + name,
            exists=lambda path: True, has_venv=True))
        nothing = install.missing_debian_packages(
            'lxd', 'python3', which=lambda name: None,
            exists=lambda path: False, has_venv=False)
        self.assertEqual(['lxd', 'lxd-client', 'busybox-static',
                          'mariadb-server', 'rabbitmq-server', 'iptables',
                          'dnsmasq-base', 'haproxy', 'conntrack',
                          'iputils-arping', 'iputils-ping', 'python3-venv'],
                         nothing)
        # Incus comes from tools/incus-up.sh, not from here
        self.assertNotIn('lxd', install.missing_debian_packages(
            'incus', 'python3', which=lambda name: None,
            exists=lambda path: False, has_venv=True))

    def test_every_package_for_one_apt_round(self):
        # what tools/run-tests.sh installs before "up" looks: the same
        # packages "up" would find missing on an empty machine, but for
        # python3-venv (this Python has venv)
        nothing = install.missing_debian_packages(
            'lxd', 'python3', which=lambda name: None,
            exists=lambda path: False, has_venv=True)
        self.assertEqual(nothing, install.debian_packages('lxd'))
        self.assertNotIn('lxd', install.debian_packages('incus'))

    def test_venvs_by_pip_or_by_uv(self):
        calls = []
        install.make_venv('/v', {}, calls.append)
        self.assertEqual([['python3', '-m', 'venv', '/v']], calls)
        self.assertEqual(['/v/bin/pip', 'install', '-q'],
                         install.installer('/v', {}, 'nova-lxd-accel'))
        uv = {'SANDBOX_UV': '/t/uv', 'SANDBOX_PYTHON': 'python3.11'}
        calls = []
        install.make_venv('/v', uv, calls.append)
        # seeded: Horizon's venv upgrades its pip
        self.assertEqual([['/t/uv', 'venv', '-q', '--seed', '--python',
                           'python3.11', '/v']], calls)
        # uv keeps a directory's build while its setup files are unchanged:
        # this project's is rebuilt every time
        self.assertEqual(['/t/uv', 'pip', 'install', '-q',
                          '--compile-bytecode', '--python',
                          '/v/bin/python', '--reinstall-package',
                          'nova-lxd-accel'],
                         install.installer('/v', uv, 'nova-lxd-accel'))

    def test_apt_waits_for_another_apt_s_lock(self):
        answers = [(100, 'E: Could not get lock /var/lib/apt/lists/lock'),
                   (100, 'E: Could not get lock /var/lib/apt/lists/lock'),
                   (0, 'Reading package lists... Done')]
        calls, slept = [], []

        def run(argv, **kwargs):
            calls.append(argv)
            rc, out = answers.pop(0)
            return subprocess.CompletedProcess(argv, rc, out)

        self.assertEqual(0, install.apt_get(['update', '-q'], 300, run=run,
                                            sleep=slept.append))
        self.assertEqual(3, len(calls))
        self.assertEqual(['apt-get', '-o', 'DPkg::Lock::Timeout=300',
                          'update', '-q'], calls[0])
        self.assertEqual([5, 5], slept)

    def test_apt_gives_up_when_the_lock_stays_busy(self):
        def run(argv, **kwargs):
            return subprocess.CompletedProcess(argv, 100,
                                               'E: Could not get lock')
        slept = []
        self.assertEqual(100, install.apt_get(['update'], 10, run=run,
                                              sleep=slept.append))
        self.assertEqual([5, 5], slept)

    def test_deps_fingerprint_is_the_one_older_sandboxes_recorded(self):
        # The venv's marker written by the shell version of this step: the
        # same fingerprint keeps an existing venv (and its schema markers).
        with tempfile.NamedTemporaryFile('w', suffix='.txt') as constraints:
            constraints.write('nova===34.0.0\n')
            constraints.flush()
            shell = subprocess.run(
                ['bash', '-c', '{ printf "%s\\n" "$@"; cat "$0"; } | '
                 'sha256sum | cut -d" " -f1', constraints.name] +
                list(install.PY_PACKAGES), capture_output=True, text=True,
                check=True, timeout=60).stdout.strip()
            self.assertEqual(shell, install.deps_fingerprint(
                constraints.name))
            constraints.write('neutron===29.0.0\n')
            constraints.flush()
            self.assertNotEqual(shell, install.deps_fingerprint(
                constraints.name))

    def test_project_fingerprint_follows_the_project_s_tree_only(self):
        with tempfile.TemporaryDirectory() as repo:
            os.makedirs(os.path.join(repo, 'nova_lxd_accel'))
            os.makedirs(os.path.join(repo, 'tools'))
            source = os.path.join(repo, 'nova_lxd_accel', 'driver.py')
            for path in (source, os.path.join(repo, 'setup.cfg'),
                         os.path.join(repo, 'tools', 'x.sh')):
                with open(path, 'w') as handle:
                    handle.write('1\n')
            first = install.project_fingerprint(repo)
            with open(os.path.join(repo, 'tools', 'x.sh'), 'w') as handle:
                handle.write('2\n')
            with open(source + 'c', 'w') as handle:  # driver.pyc
                handle.write('bytecode')
            self.assertEqual(first, install.project_fingerprint(repo))
            with open(source, 'w') as handle:
                handle.write('2\n')
            self.assertNotEqual(first, install.project_fingerprint(repo))

    def test_venv_is_made_once_and_the_project_rebuilt_when_it_changes(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        lay = layout.Layout(os.path.join(tmp.name, 'sandbox'), 27100)
        calls = []

        def run(argv, **kwargs):
            calls.append(argv)
            if argv[1:3] == ['-m', 'venv']:
                os.makedirs(os.path.join(argv[3], 'bin'))
                python = os.path.join(argv[3], 'bin', 'python')
                with open(python, 'w') as handle:
                    handle.write('#!/bin/sh\n')
                os.chmod(python, 0o755)

        environ = {'SANDBOX_PYTHON': 'python3',
                   'SANDBOX_CONSTRAINTS': os.path.join(REPO,
                                                       'constraints.txt')}
        self.assertTrue(install.install_venv(lay, environ, run=run))
        self.assertEqual(['python3', '-m', 'venv', lay.venv], calls[0])
        installed = [argv[-1] for argv in calls[1:]]
        self.assertEqual(['wheel', install.PY_PACKAGES[-1], REPO],
                         installed)
        for argv in calls[1:]:
            self.assertIn('-c', argv)
        calls.clear()
        self.assertFalse(install.install_venv(lay, environ, run=run))
        self.assertEqual([], calls)
        # a new build of the project only: OpenStack stays
        os.remove(os.path.join(lay.venv, '.sandbox-project'))
        self.assertTrue(install.install_venv(lay, environ, run=run))
        self.assertEqual([REPO], [argv[-1] for argv in calls])


class DatabasesTest(testtools.TestCase):
    """The database and Keystone steps, without MariaDB or Keystone."""

    def setUp(self):
        super().setUp()
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.layout = layout.Layout(os.path.join(tmp.name, 'sandbox'), 27100)
        for path in (self.layout.venv, self.layout.data, self.layout.logs,
                     self.layout.etc):
            os.makedirs(path)

    def test_grants_make_every_database_and_refuse_odd_passwords(self):
        sql = databases.grants_sql('0a1b2c')
        self.assertIn("CREATE USER IF NOT EXISTS 'openstack'@'127.0.0.1' "
                      "IDENTIFIED BY '0a1b2c';", sql)
        self.assertIn("ALTER USER 'openstack'@'127.0.0.1' IDENTIFIED BY "
                      "'0a1b2c';", sql)
        for name in ('keystone', 'nova_api', 'nova_cell0', 'neutron'):
            self.assertIn('CREATE DATABASE IF NOT EXISTS %s;' % name, sql)
        self.assertRaises(ValueError, databases.grants_sql, "x'; DROP")

    def test_a_sync_runs_once_per_installed_packages(self):
        once = databases.Once(self.layout)
        ran, out = [], io.StringIO()
        deps = os.path.join(self.layout.venv, '.sandbox-deps')
        with open(deps, 'w') as handle:
            handle.write('abc\n')
        once.run('nova', lambda: ran.append(1), out)
        once.run('nova', lambda: ran.append(2), out)
        self.assertEqual([1], ran)
        self.assertIn('nova schema current', out.getvalue())
        with open(deps, 'w') as handle:
            handle.write('def\n')
        once.run('nova', lambda: ran.append(3), out)
        self.assertEqual([1, 3], ran)

        def fails():
            raise RuntimeError('db down')
        self.assertRaises(RuntimeError, once.run, 'glance', fails, out)
        self.assertFalse(once.done('glance'))

    def test_cell1_is_found_in_nova_manage_s_table(self):
        table = textwrap.dedent('''\
            +-------+--------------------------------------+---------+
            |  Name |                 UUID                 | Transport |
            +-------+--------------------------------------+---------+
            | cell0 | 00000000-0000-0000-0000-000000000000 | none:/  |
            | cell1 | 6c5b1b1f-2f5e-4ad6-9a8a-4b7c6f1d2e3a | rabbit: |
            +-------+--------------------------------------+---------+
            ''')
        self.assertEqual('6c5b1b1f-2f5e-4ad6-9a8a-4b7c6f1d2e3a',
                         databases.cell1_uuid(table))
        self.assertIsNone(databases.cell1_uuid(table.replace('cell1', 'c')))

    def test_parallel_jobs_report_the_failed_one_with_its_log(self):
        def good(out):
            out.write('synced\n')

        def bad(out):
            out.write('alembic said no\n')
            raise subprocess.CalledProcessError(1, ['neutron-db-manage'])

        out = io.StringIO()
        failed = databases.run_parallel(
            self.layout, {'db-keystone': good, 'db-neutron': bad}, out)
        self.assertEqual(['db-neutron'], failed)
        text = out.getvalue()
        self.assertIn('db-keystone: done', text)
        self.assertIn('db-neutron: FAILED, see %s'
                      % os.path.join(self.layout.logs, 'db-neutron.log'),
                      text)
        self.assertIn('    | alembic said no', text)

    def test_keystone_keys_are_private_and_kept(self):
        databases.keystone_keys(self.layout)
        key = os.path.join(self.layout.etc, 'keystone', 'fernet-keys', '0')
        with open(key) as handle:
            first = handle.read()
        self.assertEqual(32, len(base64.urlsafe_b64decode(first)))
        self.assertEqual(0o600, stat.S_IMODE(os.stat(key).st_mode))
        self.assertEqual(0o700, stat.S_IMODE(os.stat(
            os.path.dirname(key)).st_mode))
        databases.keystone_keys(self.layout)
        with open(key) as handle:
            self.assertEqual(first, handle.read())
        self.assertTrue(os.path.isfile(os.path.join(
            self.layout.etc, 'keystone', 'credential-keys', '1')))

    def test_bootstrap_marker_is_the_one_older_sandboxes_recorded(self):
        shell = subprocess.run(
            ['bash', '-c', 'printf "%s %s" "$0" "$1" | sha256sum',
             'secret', 'http://127.0.0.1:26150'], capture_output=True,
            text=True, check=True, timeout=60).stdout.strip()
        self.assertEqual(shell, databases.bootstrap_marker(
            'secret', 'http://127.0.0.1:26150'))

    def test_metadefs_fingerprint_follows_the_files(self):
        directory = os.path.join(self.layout.data, 'metadefs')
        os.makedirs(directory)
        with open(os.path.join(directory, 'a.json'), 'w') as handle:
            handle.write('{}')
        first = databases.metadefs_fingerprint(directory)
        self.assertEqual(first, databases.metadefs_fingerprint(directory))
        with open(os.path.join(directory, 'b.json'), 'w') as handle:
            handle.write('{}')
        self.assertNotEqual(first, databases.metadefs_fingerprint(directory))
