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

"""The sandbox's pieces that run without starting a cloud.

- the shipped ``nova-lxd-accel`` command has no ``sandbox``: a developer
  tool that removes bridges and namespaces stays in the source tree;
- ``tools/sandbox.sh status`` warns about secrets other users can read;
- ``tools/sandbox/venv/wsgi_server.py`` decodes chunked request bodies (the
  uploads of Nova's snapshots) and keeps the connection usable after them.
"""

import http.client
import importlib
import os
import socket
import subprocess
import sys
import tempfile
import threading

import testtools

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
SANDBOX_SH = os.path.join(REPO, 'tools', 'sandbox.sh')


class NotShippedTest(testtools.TestCase):

    def test_the_operator_command_has_no_sandbox(self):
        # ``sandbox clean`` deletes br-int, br-tun and every router and
        # DHCP namespace: no production host gets it with the package
        from nova_lxd_accel.cmd import main
        result = subprocess.run(
            [sys.executable, '-m', 'nova_lxd_accel.cmd.main', 'sandbox',
             'clean'], cwd=REPO, capture_output=True, text=True, timeout=60)
        self.assertEqual(2, result.returncode)
        self.assertIn("invalid choice: 'sandbox'", result.stderr)
        self.assertNotIn('sandbox', main.build_parser().format_help())
        self.assertFalse(os.path.exists(os.path.join(
            REPO, 'nova_lxd_accel', 'cmd', 'sandbox.py')))


class StatusSecretsTest(testtools.TestCase):
    """``sandbox.sh status`` on a state directory made here (no cloud)."""

    def setUp(self):
        super(StatusSecretsTest, self).setUp()
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.state = os.path.join(self.tmp.name, 'sandbox')
        self.conf = os.path.join(self.state, 'etc', 'nova', 'nova.conf')
        os.makedirs(os.path.dirname(self.conf))
        with open(self.conf, 'w') as handle:
            handle.write('[database]\nconnection = mysql://u:secret@h/d\n')
        with open(os.path.join(self.state, 'secrets.env'), 'w') as handle:
            handle.write('DB_PASSWORD=secret\n')
        for path in (self.state, os.path.join(self.state, 'etc'),
                     os.path.dirname(self.conf)):
            os.chmod(path, 0o700)
        for path in (self.conf, os.path.join(self.state, 'secrets.env')):
            os.chmod(path, 0o600)

    def _status(self):
        env = dict(os.environ, SANDBOX_DIR=self.state,
                   SANDBOX_PORT_BASE='27100')
        result = subprocess.run(['bash', SANDBOX_SH, 'status'], env=env,
                                capture_output=True, text=True, timeout=60)
        # Nothing runs: status says so with exit status 1.
        self.assertEqual(1, result.returncode, result.stderr)
        self.assertIn('0/14 running', result.stdout)
        return result.stderr

    def test_no_warning_when_locked_down(self):
        self.assertNotIn('WARNING', self._status())

    def test_warns_about_a_readable_config_file(self):
        os.chmod(self.conf, 0o644)
        err = self._status()
        self.assertIn('WARNING: %s (configuration or credentials) is mode '
                      '644' % self.conf, err)
        self.assertIn('run: chmod 600 %s' % self.conf, err)
        self.assertNotIn('secrets.env', err)

    def test_warns_about_a_traversable_state_directory(self):
        os.chmod(self.state, 0o711)
        err = self._status()
        self.assertIn('WARNING: %s is mode 711' % self.state, err)
        self.assertIn('run: chmod 700 %s' % self.state, err)

    def test_warns_about_readable_secrets_env(self):
        secrets = os.path.join(self.state, 'secrets.env')
        os.chmod(secrets, 0o640)
        self.assertIn('%s (configuration or credentials) is mode 640'
                      % secrets, self._status())


class SimulatedHardwareTest(testtools.TestCase):
    """``up --hardware`` checks its argument; ``status`` says "simulated"."""

    def setUp(self):
        super().setUp()
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.state = os.path.join(self.tmp.name, 'sandbox')
        os.makedirs(self.state, mode=0o700)

    def _sandbox(self, *args):
        env = dict(os.environ, SANDBOX_DIR=self.state,
                   SANDBOX_PORT_BASE='27100')
        return subprocess.run(['bash', SANDBOX_SH] + list(args), env=env,
                              capture_output=True, text=True, timeout=60)

    def test_unknown_recorded_host_is_refused_before_anything_runs(self):
        result = self._sandbox('up', '--hardware', 'no-such-host')
        self.assertEqual(2, result.returncode, result.stderr)
        self.assertIn("no recorded host 'no-such-host'", result.stderr)
        # the names it offers are the shipped and the doctor's hosts
        self.assertIn('h100-mig-a100-ib', result.stderr)
        self.assertIn('h100-mig-cdi', result.stderr)
        self.assertEqual([], os.listdir(self.state))

    def test_status_of_the_host_s_own_hardware(self):
        result = self._sandbox('status')
        self.assertIn("hardware: the host's own", result.stdout)
        self.assertIn('0/14 running', result.stdout)

    def test_status_says_simulated(self):
        hardware = os.path.join(self.state, 'data', 'hardware')
        os.makedirs(hardware)
        source = os.path.join(REPO, 'tools', 'sandbox', 'hardware',
                              'h100-mig-a100-ib')
        for name in ('resources.json', 'nvidia-smi-L.txt'):
            with open(os.path.join(source, name)) as f, \
                    open(os.path.join(hardware, name), 'w') as g:
                g.write(f.read())
        with open(os.path.join(hardware, 'name'), 'w') as f:
            f.write('h100-mig-a100-ib\n')
        result = self._sandbox('status')
        self.assertIn('hardware: SIMULATED, recorded host h100-mig-a100-ib '
                      '(3 NVIDIA GPUs, 4 MIG devices, 8 InfiniBand ports '
                      'and VFs); no real device is attached', result.stdout)
        # the LXD proxy is one more service to run
        self.assertIn('0/15 running', result.stdout)


class PortRangeTest(testtools.TestCase):
    """``up`` refuses ports inside the kernel's ephemeral range.

    There an outgoing connection of any process may hold a sandbox port
    just when its service starts (MariaDB failed so in CI).
    """

    def test_base_inside_the_ephemeral_range_is_refused_first(self):
        if os.geteuid() != 0:
            self.skipTest('sandbox.sh up refuses to run as non-root before '
                          'it looks at its ports')
        with open('/proc/sys/net/ipv4/ip_local_port_range') as handle:
            low, high = (int(word) for word in handle.read().split())
        base = (low + high) // 2
        with tempfile.TemporaryDirectory() as tmp:
            state = os.path.join(tmp, 'sandbox')
            # Were the check gone, up would go on; no apt and a python
            # that fails make it stop soon after, with another message.
            env = dict(os.environ, SANDBOX_DIR=state,
                       SANDBOX_PORT_BASE=str(base), SANDBOX_APT='0',
                       SANDBOX_PYTHON='false')
            result = subprocess.run(['bash', SANDBOX_SH, 'up'], env=env,
                                    capture_output=True, text=True,
                                    timeout=120)
            self.assertNotEqual(0, result.returncode)
            self.assertIn(
                'SANDBOX_PORT_BASE=%d: ports %d-%d overlap the kernel\'s '
                'ephemeral range %d-%d' % (base, base, base + 99, low, high),
                result.stdout + result.stderr)
            self.assertFalse(os.path.exists(state))


def _load_wsgi_server():
    return importlib.import_module('tools.sandbox.venv.wsgi_server')


def _echo_app(environ, start_response):
    """Reads the whole body, closes its input (as Glance does), echoes."""
    stream = environ['wsgi.input']
    body = stream.read()
    stream.close()
    start_response('200 OK', [('Content-Type', 'application/octet-stream'),
                              ('Content-Length', str(len(body)))])
    return [body]


def _refusing_app(environ, start_response):
    """Answers without reading the body at all."""
    start_response('404 Not Found', [('Content-Length', '0')])
    return [b'']


needs_cheroot = testtools.skipUnless(
    importlib.util.find_spec('cheroot'),
    'cheroot (the sandbox WSGI server) is not installed: '
    'pip install -c constraints.txt cheroot')


@needs_cheroot
class ChunkedUploadTest(testtools.TestCase):

    def _serve(self, app):
        module = _load_wsgi_server()
        with socket.socket() as probe:
            probe.bind(('127.0.0.1', 0))
            port = probe.getsockname()[1]
        server = module.make_server('127.0.0.1', port, app, 'test',
                                    threads=2)
        server.prepare()
        thread = threading.Thread(target=server.serve, daemon=True)
        thread.start()
        self.addCleanup(thread.join, 10)
        self.addCleanup(server.stop)
        return http.client.HTTPConnection('127.0.0.1', port, timeout=10)

    @staticmethod
    def _put_chunked(conn, chunks):
        conn.putrequest('PUT', '/upload')
        conn.putheader('Transfer-Encoding', 'chunked')
        conn.endheaders()
        for chunk in chunks:
            conn.send(b'%x\r\n%s\r\n' % (len(chunk), chunk))
        conn.send(b'0\r\n\r\n')
        response = conn.getresponse()
        return response.status, response.read()

    def test_chunked_body_is_decoded(self):
        conn = self._serve(_echo_app)
        chunks = [b'abc', b'def', bytes(range(256)) * 64]
        self.assertEqual((200, b''.join(chunks)),
                         self._put_chunked(conn, chunks))

    def test_connection_serves_the_next_request(self):
        conn = self._serve(_echo_app)
        self.assertEqual((200, b'abcdef'),
                         self._put_chunked(conn, [b'abc', b'def']))
        conn.request('PUT', '/again', body=b'xyz')
        response = conn.getresponse()
        self.assertEqual((200, b'xyz'), (response.status, response.read()))

    def test_unread_chunked_body_does_not_leak_into_the_next_request(self):
        conn = self._serve(_refusing_app)
        self.assertEqual((404, b''),
                         self._put_chunked(conn, [b'GET / HTTP/1.1\r\n']))
        conn.request('GET', '/next')
        response = conn.getresponse()
        self.assertEqual(404, response.status)
        response.read()


def _teapot_app(environ, start_response):
    """The application behind the static files: a recognisable answer."""
    start_response('418 Teapot', [('Content-Length', '0')])
    return [b'']


@needs_cheroot
class StaticFilesTest(testtools.TestCase):
    """``wsgi_server.py --static``: Horizon's collected static files."""

    def setUp(self):
        super().setUp()
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.root = os.path.join(self.tmp.name, 'static')
        os.makedirs(os.path.join(self.root, 'dashboard', 'css'))
        with open(os.path.join(self.root, 'dashboard', 'css', 'a.css'),
                  'w') as handle:
            handle.write('body {}\n')
        with open(os.path.join(self.tmp.name, 'secret'), 'w') as handle:
            handle.write('local_settings\n')
        self.app = _load_wsgi_server().StaticFiles(
            _teapot_app, '/static/', self.root)

    def get(self, path, method='GET'):
        seen = {}

        def start_response(status, headers):
            seen['status'], seen['headers'] = status, dict(headers)

        body = b''.join(self.app({'PATH_INFO': path,
                                  'REQUEST_METHOD': method},
                                 start_response))
        return seen['status'], seen['headers'], body

    def test_serves_a_file_with_its_type(self):
        status, headers, body = self.get('/static/dashboard/css/a.css')
        self.assertEqual('200 OK', status)
        self.assertEqual('text/css', headers['Content-Type'])
        self.assertEqual(b'body {}\n', body)

    def test_never_leaves_its_directory(self):
        for path in ('/static/../secret', '/static/dashboard/../../secret'):
            status, _, body = self.get(path)
            self.assertEqual('404 Not Found', status, path)
            self.assertNotIn(b'local_settings', body)

    def test_other_paths_go_to_the_application(self):
        status, _, _ = self.get('/project/instances/')
        self.assertEqual('418 Teapot', status)
        status, _, _ = self.get('/static/dashboard/css/a.css', 'POST')
        self.assertEqual('418 Teapot', status)
