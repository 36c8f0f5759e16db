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

"""LXD with recorded accelerator hardware, faked only at its HTTP boundary.

The development and CI machines have no GPU and no InfiniBand card, and
LXD refuses to start a container whose ``gpu`` or ``infiniband`` device it
cannot find ("Failed to detect requested GPU device", "Parent device
'ib0' doesn't exist"). To test the driver's accelerator paths end to end,
:class:`LXDProxy` listens on a unix socket of its own (point ``[lxd]
endpoint`` at :attr:`LXDProxy.socket_path`) and forwards every request,
byte for byte, to the real LXD daemon, except for exactly these changes:

1. ``GET /1.0/instances?all-projects=true``: only the instances of the
   projects this proxy's client used, and of those the test shows with
   :meth:`LXDProxy.show_project` (tests share one daemon).
2. ``GET /1.0/resources``: the real answer with its ``gpu`` and/or
   ``network`` sections replaced by :attr:`LXDProxy.resources` (recorded
   samples of real hosts), in LXD's own response envelope. The host's CPU,
   memory and storage stay real.
3. Only when ``strip_devices`` is true: in instance create (``POST
   /1.0/instances``) and update (``PUT``/``PATCH /1.0/instances/<name>``)
   bodies, devices of type ``gpu`` and ``infiniband`` are removed before
   forwarding and remembered per project and instance name; responses to
   ``GET /1.0/instances/<name>`` and ``GET /1.0/instances?recursion=1``
   get them back in ``devices`` and ``expanded_devices``. The driver thus
   sees exactly what it asked for, while the real container runs without
   the hardware. The ``nvidia.*`` config keys (``nvidia.runtime=true``,
   which MIG devices need) are handled the same way, as LXD refuses to
   start a container with them where the NVIDIA container tools are
   missing. Everything else (the rest of the config, the binding record
   under ``user.nova_lxd_accel.devices``, state, images, operations) is
   real.

With ``strip_devices=False`` the devices reach the real LXD unchanged, so
LXD really refuses to start the container: the "GPU absent -> start fails
-> cleanup" path runs against the real daemon.

The proxy runs in a child process (``python -m tools.sandbox.venv.lxd_proxy``,
from the repository; the sandbox runs it with ``python tools/sandbox/venv
lxd_proxy``), so it
works the same whether the tests run nova on eventlet or native threads.
The recorded resources are read from a JSON file on every request
(:meth:`LXDProxy.set_resources` rewrites it); the hidden devices can be
read back with ``GET /_proxy/hidden?project=<name>`` on the proxy socket
(:meth:`LXDProxy.all_fake_devices`).
"""

import argparse
import copy
import http.client
import http.server
import json
import os
import shutil
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from urllib import parse
import uuid

import fixtures

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

FAKED_DEVICE_TYPES = ('gpu', 'infiniband')
FAKED_CONFIG_PREFIX = 'nvidia.'
_HOP_BY_HOP = ('connection', 'keep-alive', 'transfer-encoding',
               'content-length', 'proxy-connection', 'upgrade')


class _UnixConnection(http.client.HTTPConnection):

    def __init__(self, path, timeout=600):
        super().__init__('lxd', timeout=timeout)
        self._path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def log_message(self, fmt, *args):
        pass

    def _read_body(self):
        if 'chunked' in (self.headers.get('Transfer-Encoding') or ''):
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b';')[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b''.join(chunks)
        length = int(self.headers.get('Content-Length') or 0)
        return self.rfile.read(length) if length else b''

    def _forward(self):
        proxy = self.server.proxy
        url = parse.urlsplit(self.path)
        query = dict(parse.parse_qsl(url.query))
        project = query.get('project', 'default')
        body = self._read_body()
        if url.path == '/_proxy/hidden':
            self._reply(200, json.dumps(proxy.hidden(project)).encode())
            return
        answer = proxy.answer_locally(self.command, url.path, body)
        if answer is not None:
            self._reply(*answer)
            return
        proxy.note_project(query)
        body = proxy.rewrite_request(self.command, url.path, project, body)
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in _HOP_BY_HOP}
        if body or self.command in ('POST', 'PUT', 'PATCH'):
            headers['Content-Length'] = str(len(body))
        upstream = _UnixConnection(proxy.upstream)
        try:
            upstream.request(self.command, self.path, body=body or None,
                             headers=headers)
            response = upstream.getresponse()
            data = response.read()
        finally:
            upstream.close()
        data = proxy.rewrite_response(self.command, url.path, query,
                                      project, response.status, data)
        self.send_response(response.status, response.reason)
        for key, value in response.getheaders():
            if key.lower() not in _HOP_BY_HOP:
                self.send_header(key, value)
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _reply(self, status, data):
        self.send_response(status)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _forward_or_fail(self):
        try:
            self._forward()
        except Exception as exc:
            # An answer in LXD's error shape, not a dropped connection
            # (which the client reports as "Remote end closed connection
            # without response", saying nothing of the cause).
            traceback.print_exc()
            self.close_connection = True
            try:
                self._reply(502, json.dumps({
                    'type': 'error', 'error_code': 502,
                    'error': 'LXD proxy: %s: %s' % (type(exc).__name__,
                                                    exc)}).encode())
            except OSError:
                pass

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = \
        _forward_or_fail


def _is_faked(device):
    return (device or {}).get('type') in FAKED_DEVICE_TYPES


# -- LXD 6.2's validation of a gpu device's CDI ``id`` ------------------------
# Ported (not imported from the driver, which must not grade its own work)
# from canonical/lxd tag lxd-6.2: lxd/device/gpu_physical.go validateConfig,
# lxd/device/cdi/id.go ToCDI/ToVendor/ToClass, and the parser LXD uses,
# tags.cncf.io/container-device-interface v0.8.0 pkg/parser/parser.go.
# Go's %q is rendered with json.dumps (the same for these ASCII ids).

_CDI_VENDORS = ('nvidia.com',)              # lxd-6.2: NVIDIA only
_CDI_CLASSES = ('gpu', 'igpu', 'mig')


def _q(text):
    return json.dumps(text)


def _is_letter(c):
    return ('a' <= c <= 'z') or ('A' <= c <= 'Z')


def _is_alnum(c):
    return _is_letter(c) or ('0' <= c <= '9')


def _vendor_or_class_error(name):
    if not name:
        return 'empty name'
    if not _is_letter(name[0]):
        return '%s, should start with letter' % _q(name)
    return _rest_of_name_error(name, '_-.', 'name',
                               '%s, should end with a letter or digit')


def _rest_of_name_error(name, allowed, what, bad_end):
    """The error of NAME past its first character, or None.

    Its middle holds letters, digits and ALLOWED; it ends with a letter or
    a digit (else ``bad_end % name``).
    """
    for c in name[1:-1]:
        if not (_is_alnum(c) or c in allowed):
            return "invalid character '%s' in %s %s" % (c, what, _q(name))
    if not _is_alnum(name[-1]):
        return bad_end % _q(name)
    return None


def _device_name_error(name):
    if not name:
        return 'invalid (empty) device name'
    if not _is_alnum(name[0]):
        return 'invalid class %s, should start with a letter or digit' % (
            _q(name))
    if len(name) == 1:
        return None
    return _rest_of_name_error(
        name, '_-.:', 'device name',
        'invalid name %s, should end with a letter or digit')


def _parse_qualified_name(device):
    """(vendor, class, name, error) like parser.ParseQualifiedName."""
    vendor = cls = ''
    name = device
    if device and device[0] != '/':
        key, sep, value = device.partition('=')
        if sep and key and value:
            qualifier, slash, rest = key.partition('/')
            if slash and qualifier and rest:
                vendor, cls, name = qualifier, rest, value
    if not vendor:
        return None, None, None, 'unqualified device %s, missing vendor' % (
            _q(device))
    if not cls:
        return None, None, None, 'unqualified device %s, missing class' % (
            _q(device))
    if not name:
        return None, None, None, ('unqualified device %s, missing device '
                                  'name' % _q(device))
    for what, error in (('vendor', _vendor_or_class_error(vendor)),
                        ('class', _vendor_or_class_error(cls))):
        if error:
            return None, None, None, 'invalid device %s: invalid %s. %s' % (
                _q(device), what, error)
    error = _device_name_error(name)
    if error:
        return None, None, None, 'invalid device %s: %s' % (
            _q(device), error)
    return vendor, cls, name, None


def cdi_device_error(device, config):
    """LXD 6.2's validation error for one gpu device, or None.

    :param config: the instance's config (``nvidia.*`` keys matter).
    """
    if (device or {}).get('type') != 'gpu' or \
            device.get('gputype', 'physical') != 'physical':
        return None
    value = device.get('id') or ''
    if not value:
        return None
    if value.lstrip('+-').isdigit():
        return None                         # a DRM card id
    vendor, cls, name, error = _parse_qualified_name(value)
    if error:
        return 'ID must be integer DRM ID or CDI ID: Invalid CDI ID: %s' % (
            error)
    if vendor not in _CDI_VENDORS:
        return 'Invalid CDI vendor (%s)' % _q(vendor)
    if cls not in _CDI_CLASSES:
        return 'Invalid CDI class (%s)' % _q(cls)
    for key, val in sorted((config or {}).items()):
        if key.startswith('nvidia.') and str(val).lower() in (
                '1', 'on', 'true', 'yes'):
            return ('CDI mode is incompatible with any NVIDIA instance '
                    'configuration option (%s)' % _q(key))
    return None


class Rewriter(object):
    """The proxy's state and rewriting rules (runs in the proxy process)."""

    def __init__(self, resources_file, strip_devices, upstream,
                 server_info_file=None, state_file=None, all_projects=False):
        self.resources_file = resources_file
        self.state_file = state_file
        self.all_projects = all_projects
        self.strip_devices = strip_devices
        self.upstream = upstream
        self._lock = threading.Lock()
        # A recorded GET /1.0 of another daemon (LXD 6.2, ...) to present,
        # and the creations/updates it refused (operation id -> answer).
        self.server_info = None
        if server_info_file:
            with open(server_info_file) as f:
                self.server_info = json.load(f)['metadata']
        self._failed_operations = {}
        # (project, instance name) -> {'devices': {...}, 'config': {...}}
        self._devices = self._load_state()
        # projects this proxy's client used: all-projects listings show
        # only these and those named in <resources file>.projects, so
        # that tests running beside each other on one daemon do not see
        # each other's instances
        self._projects = set()

    @property
    def resources(self):
        with open(self.resources_file) as f:
            return json.load(f)

    def _load_state(self):
        """The hidden devices a previous run of the proxy saved."""
        if not self.state_file or not os.path.exists(self.state_file):
            return {}
        with open(self.state_file) as f:
            return {(project, name): entry
                    for project, name, entry in json.load(f)}

    def _save_state(self):
        """Keep the hidden devices across restarts (called locked).

        Without it, a restarted proxy (the sandbox's ``up`` re-run) would
        show running instances without their accelerators.
        """
        if not self.state_file:
            return
        tmp = self.state_file + '.tmp'
        with open(tmp, 'w') as f:
            json.dump([[project, name, entry] for (project, name), entry
                       in sorted(self._devices.items())], f)
        os.replace(tmp, self.state_file)

    def hidden(self, project):
        """Instance name -> hidden devices, for instances that have some."""
        with self._lock:
            return {name: copy.deepcopy(entry['devices'])
                    for (proj, name), entry in self._devices.items()
                    if proj == project and entry.get('devices')}

    # -- rewriting ----------------------------------------------------------

    @staticmethod
    def _instance_name(path):
        parts = path.rstrip('/').split('/')
        # /1.0/instances/<name> exactly
        if len(parts) == 4 and parts[1] == '1.0' and \
                parts[2] in ('instances', 'containers'):
            return parse.unquote(parts[3])
        return None

    def note_project(self, query):
        if query.get('project'):
            with self._lock:
                self._projects.add(query['project'])

    def visible_projects(self):
        if self.all_projects:
            return None
        try:
            with open(self.resources_file + '.projects') as f:
                shown = set(json.load(f))
        except (OSError, ValueError):
            shown = set()
        with self._lock:
            return shown | self._projects

    def rewrite_request(self, method, path, project, body):
        if not self.strip_devices or not body:
            return body
        is_create = method == 'POST' and path.rstrip('/') in (
            '/1.0/instances', '/1.0/containers')
        name = None if is_create else self._instance_name(path)
        if not is_create and not (name and method in ('PUT', 'PATCH')):
            return body
        try:
            payload = json.loads(body)
        except ValueError:
            return body
        if not isinstance(payload, dict):
            return body
        if is_create:
            name = payload.get('name')
        hidden = {}
        if isinstance(payload.get('devices'), dict):
            devices = payload['devices']
            hidden['devices'] = {k: v for k, v in devices.items()
                                 if _is_faked(v)}
            payload['devices'] = {k: v for k, v in devices.items()
                                  if not _is_faked(v)}
        if isinstance(payload.get('config'), dict):
            config = payload['config']
            hidden['config'] = {k: v for k, v in config.items()
                                if k.startswith(FAKED_CONFIG_PREFIX)}
            payload['config'] = {k: v for k, v in config.items()
                                 if not k.startswith(FAKED_CONFIG_PREFIX)}
        with self._lock:
            entry = self._devices.setdefault((project, name), {})
            for key, values in hidden.items():
                if method == 'PATCH':
                    entry.setdefault(key, {}).update(values)
                else:
                    entry[key] = values
            self._save_state()
        return json.dumps(payload).encode()

    def _reinsert(self, project, record):
        if not isinstance(record, dict):
            return
        hidden = self._devices.get((project, record.get('name'))) or {}
        for key in ('devices', 'expanded_devices'):
            if isinstance(record.get(key), dict):
                record[key].update(copy.deepcopy(hidden.get('devices', {})))
        for key in ('config', 'expanded_config'):
            if isinstance(record.get(key), dict):
                record[key].update(hidden.get('config', {}))

    # -- a recorded daemon: identity and device validation ----------------

    @property
    def validates_cdi(self):
        return 'gpu_cdi' in ((self.server_info or {}).get('api_extensions')
                             or ())

    def answer_locally(self, method, path, body):
        """(status, body) of a request the proxy answers itself, or None.

        The recorded daemon refuses invalid CDI ids the way LXD 6.2 does:
        a creation (``POST /1.0/instances``) or a ``PUT`` is accepted as a
        background operation that then fails with the validation error
        (LXD validates devices inside the operation), a ``PATCH`` fails at
        once; nothing reaches the real daemon.
        """
        path = path.rstrip('/')
        parts = path.split('/')
        if method == 'GET' and len(parts) in (4, 5) and \
                parts[:3] == ['', '1.0', 'operations']:
            with self._lock:
                failed = self._failed_operations.get(parts[3])
            if failed is not None:
                return 200, json.dumps(failed).encode()
            return None
        if not self.validates_cdi or method not in ('POST', 'PUT', 'PATCH'):
            return None
        is_create = method == 'POST' and path in ('/1.0/instances',
                                                  '/1.0/containers')
        name = self._instance_name(path)
        if not (is_create or (name and method in ('PUT', 'PATCH'))):
            return None
        try:
            payload = json.loads(body or b'{}')
        except ValueError:
            return None
        if not isinstance(payload, dict):
            return None
        name = payload.get('name') if is_create else name
        error = None
        for device_name, device in sorted(
                (payload.get('devices') or {}).items()):
            reason = cdi_device_error(device, payload.get('config'))
            if reason:
                error = 'Invalid devices: Device validation failed for ' \
                        '%s: %s' % (_q(device_name), reason)
                break
        if error is None:
            return None
        if method == 'PATCH':
            return 500, json.dumps({
                'type': 'error', 'status': '', 'status_code': 0,
                'operation': '', 'error_code': 500, 'error': error,
                'metadata': None}).encode()
        if is_create:
            error = ('Failed creating instance record: Failed initialising '
                     'instance: ' + error)
        operation = str(uuid.uuid4())
        now = time.strftime('%Y-%m-%dT%H:%M:%S.000000000Z', time.gmtime())
        metadata = {
            'id': operation, 'class': 'task',
            'description': 'Creating instance' if is_create
            else 'Updating instance',
            'created_at': now, 'updated_at': now, 'status': 'Running',
            'status_code': 103,
            'resources': {'instances': ['/1.0/instances/%s' % name]},
            'metadata': None, 'may_cancel': False, 'err': '',
            'location': 'none'}
        with self._lock:
            self._failed_operations[operation] = {
                'type': 'sync', 'status': 'Success', 'status_code': 200,
                'operation': '', 'error_code': 0, 'error': '',
                'metadata': dict(metadata, status='Failure',
                                 status_code=400, err=error)}
        return 202, json.dumps({
            'type': 'async', 'status': 'Operation created',
            'status_code': 100, 'operation': '/1.0/operations/' + operation,
            'error_code': 0, 'error': '', 'metadata': metadata}).encode()

    def _present_recorded_daemon(self, data):
        """The real ``GET /1.0`` answer, as the recorded daemon gives it.

        Its identity and capabilities (``environment.server``,
        ``server_version``, ``api_extensions``, ...) are the recording's;
        trust, addresses and certificate stay the real daemon's.
        """
        body = json.loads(data)
        metadata = body.get('metadata') or {}
        metadata['api_extensions'] = list(self.server_info['api_extensions'])
        environment = metadata.setdefault('environment', {})
        for key in ('server', 'server_version', 'server_lts', 'os_name',
                    'os_version', 'driver', 'driver_version'):
            if key in (self.server_info.get('environment') or {}):
                environment[key] = self.server_info['environment'][key]
        return json.dumps(body).encode()

    def rewrite_response(self, method, path, query, project, status, data):
        path = path.rstrip('/')
        if method == 'GET' and status == 200 and path == '/1.0' and \
                self.server_info:
            return self._present_recorded_daemon(data)
        if method == 'DELETE' and status < 300 and \
                self._instance_name(path):
            with self._lock:
                self._devices.pop((project, self._instance_name(path)),
                                  None)
                self._save_state()
            return data
        if method != 'GET' or status != 200:
            return data
        if path in ('/1.0/instances', '/1.0/containers') and \
                query.get('all-projects') == 'true':
            body = json.loads(data)
            visible = self.visible_projects()
            if visible is not None:
                body['metadata'] = [
                    r for r in body.get('metadata') or []
                    if not isinstance(r, dict) or
                    r.get('project') in visible]
                data = json.dumps(body).encode()
        if path == '/1.0/resources':
            resources = self.resources
            body = json.loads(data)
            for section in ('gpu', 'network'):
                if section in resources:
                    body['metadata'][section] = resources[section]
            return json.dumps(body).encode()
        if not self.strip_devices:
            return data
        name = self._instance_name(path)
        listing = path in ('/1.0/instances', '/1.0/containers') and \
            query.get('recursion') not in (None, '0')
        if not (name or listing):
            return data
        body = json.loads(data)
        with self._lock:
            if name:
                self._reinsert(project, body.get('metadata'))
            else:
                all_projects = query.get('all-projects') == 'true'
                for record in body.get('metadata') or []:
                    # an all-projects listing names each record's project
                    self._reinsert(record.get('project', project)
                                   if all_projects else project, record)
        return json.dumps(body).encode()


class LXDProxy(fixtures.Fixture):
    """Runs the proxy process for one test; see the module docstring.

    :param resources: dict with ``gpu`` and/or ``network`` sections of a
        ``/1.0/resources`` answer (change it with :meth:`set_resources`).
    :param strip_devices: hide gpu/infiniband devices from the real LXD.
    """

    def __init__(self, resources=None, strip_devices=True, upstream=None,
                 server_info=None):
        """See the class docstring.

        :param server_info: a recorded ``GET /1.0`` answer (envelope
            included) of the daemon to present, e.g. LXD 6.2 from
            ``tests/unit/samples/daemons``; with ``gpu_cdi`` in it, gpu
            devices are validated as LXD 6.2 does (see
            :meth:`Rewriter.answer_locally`).
        """
        super().__init__()
        self.resources = resources if resources is not None else {}
        self.strip_devices = strip_devices
        self.upstream = upstream or _lxd_socket()
        self.server_info = server_info

    def _setUp(self):
        # Short path: unix socket paths are limited to 107 bytes.
        self.directory = tempfile.mkdtemp(prefix='lxdp-', dir='/tmp')
        self.addCleanup(shutil.rmtree, self.directory, True)
        self.socket_path = os.path.join(self.directory, 'unix.socket')
        self.resources_file = os.path.join(self.directory, 'resources.json')
        self.set_resources(self.resources)
        command = [sys.executable, '-m', 'tools.sandbox.venv.lxd_proxy',
                   '--socket', self.socket_path, '--upstream', self.upstream,
                   '--resources', self.resources_file]
        if not self.strip_devices:
            command.append('--no-strip')
        if self.server_info is not None:
            server_info_file = os.path.join(self.directory, 'server.json')
            with open(server_info_file, 'w') as f:
                json.dump(self.server_info, f)
            command += ['--server-info', server_info_file]
        self._command = command
        self.addCleanup(self.stop)
        self.start()

    def start(self):
        """Start the proxy process (again) and wait until it accepts.

        The socket file appears at bind time, a moment before the
        server listens: a connection in between is refused, so the
        wait is for a connection that succeeds.
        """
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        self._process = subprocess.Popen(self._command, cwd=REPO_ROOT)
        if not wait_listening(self.socket_path, self._process, 30):
            raise RuntimeError('the LXD proxy did not start')

    def stop(self):
        """Stop the proxy: the daemon is unreachable through it."""
        self._process.terminate()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def set_resources(self, resources):
        """Replace what ``GET /1.0/resources`` reports (atomically)."""
        self.resources = resources
        tmp = self.resources_file + '.tmp'
        with open(tmp, 'w') as f:
            json.dump(resources, f)
        os.rename(tmp, self.resources_file)

    def show_project(self, name):
        """Show project ``name`` in all-projects listings too."""
        path = self.resources_file + '.projects'
        try:
            with open(path) as f:
                names = json.load(f)
        except (OSError, ValueError):
            names = []
        with open(path + '.tmp', 'w') as f:
            json.dump(sorted(set(names) | {name}), f)
        os.rename(path + '.tmp', path)

    def all_fake_devices(self, project):
        """Instance name -> gpu/infiniband devices hidden from LXD."""
        connection = _UnixConnection(self.socket_path, timeout=30)
        try:
            connection.request('GET', '/_proxy/hidden?' + parse.urlencode(
                {'project': project}))
            return json.loads(connection.getresponse().read())
        finally:
            connection.close()


def wait_listening(path, process, timeout):
    """True once ``path`` accepts a connection.

    False if ``process`` ends or ``timeout`` seconds pass first.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
            return True
        except OSError:
            time.sleep(0.05)
        finally:
            probe.close()
    return False


def _lxd_socket():
    # the run's daemon, LXD or Incus (tests/fixtures/lxd_fixtures.py)
    from tests.fixtures import lxd_fixtures
    return lxd_fixtures.lxd_socket()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--socket', required=True)
    parser.add_argument('--upstream', default=None,
                        help='the real daemon\'s socket (default: the '
                             'test run\'s daemon)')
    parser.add_argument('--resources', required=True)
    parser.add_argument('--no-strip', action='store_true')
    parser.add_argument('--server-info')
    parser.add_argument('--state', metavar='FILE',
                        help='keep the hidden devices in FILE across restarts')
    parser.add_argument('--all-projects', action='store_true',
                        help='show every project in all-projects listings '
                             '(one client owns the daemon)')
    parser.add_argument('--banner', metavar='TEXT',
                        help='print TEXT (one line) once listening')
    args = parser.parse_args(argv)
    server = _Server(args.socket, _Handler)
    server.proxy = Rewriter(args.resources, not args.no_strip,
                            args.upstream or _lxd_socket(), args.server_info,
                            state_file=args.state,
                            all_projects=args.all_projects)
    if args.banner:
        print(args.banner, flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()


if __name__ == '__main__':
    main()
