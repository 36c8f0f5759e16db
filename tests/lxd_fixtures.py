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

"""Fixtures that give tests a real LXD or Incus to work on, and clean it up.

Every test gets its own project (instances and images apart, profiles
shared with the default project), so tests can run in parallel against one
daemon and nothing they make, images included, survives them.

Which daemon a run uses ($NOVA_LXD_ACCEL_TEST_DAEMON, else guessed from the
environment):

=========  ==========================  ==============================
daemon     main daemon (its socket)    peer daemon (migration tests)
=========  ==========================  ==============================
``lxd``    ``$LXD_DIR``                ``$LXD_PEER_DIR``
           (``/var/lib/lxd``)          (``/var/lib/lxd-peer``)
           ``$LXD_MAIN_ADDRESS``       ``$LXD_PEER_ADDRESS``
           (``127.0.0.1:8443``)        (``127.0.0.1:8444``)
``incus``  ``$INCUS_DIR``              ``$INCUS_PEER_DIR``
           (``/var/lib/incus``)        (``/var/lib/incus-peer``)
           ``$INCUS_MAIN_ADDRESS``     ``$INCUS_PEER_ADDRESS``
           (``127.0.0.1:8445``)        (``127.0.0.1:8446``)
=========  ==========================  ==============================

tools/lxd-up.sh, tools/incus-up.sh and tools/lxd-peer-up.sh [--incus] read
the same variables. Tests never run the ``lxc`` or ``incus`` commands:
:func:`execute` runs a command in a container through the API.
"""

import gzip
import io
import os
import subprocess
import tarfile
import threading
import time
import uuid
import warnings

import fixtures
import pylxd
import requests

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_IMAGE_LOCK = threading.Lock()
_IMAGE_PATH = None
_OWNED_IMAGES = {}

_DEFAULTS = {
    'lxd': {'DIR': '/var/lib/lxd', 'PEER_DIR': '/var/lib/lxd-peer',
            'MAIN_ADDRESS': '127.0.0.1:8443',
            'PEER_ADDRESS': '127.0.0.1:8444'},
    'incus': {'DIR': '/var/lib/incus', 'PEER_DIR': '/var/lib/incus-peer',
              'MAIN_ADDRESS': '127.0.0.1:8445',
              'PEER_ADDRESS': '127.0.0.1:8446'},
}


#: The environment as the test process started: DaemonEnvironment changes
#: LXD_DIR and INCUS_DIR during each test, the run's settings stay.
_ENVIRON = {key: value for key, value in os.environ.items()
            if key.startswith(('LXD_', 'INCUS_', 'NOVA_LXD_ACCEL_'))}


def daemon():
    """``lxd`` or ``incus``: the kind of daemon this test run uses.

    $NOVA_LXD_ACCEL_TEST_DAEMON when set; else ``incus`` when only
    $INCUS_DIR is set, ``lxd`` otherwise.
    """
    chosen = _ENVIRON.get('NOVA_LXD_ACCEL_TEST_DAEMON')
    if chosen:
        if chosen not in _DEFAULTS:
            raise ValueError('NOVA_LXD_ACCEL_TEST_DAEMON=%s: use lxd or '
                             'incus' % chosen)
        return chosen
    if 'INCUS_DIR' in _ENVIRON and 'LXD_DIR' not in _ENVIRON:
        return 'incus'
    return 'lxd'


def daemon_name():
    """``LXD`` or ``Incus``, as the driver's messages name the daemon."""
    return {'lxd': 'LXD', 'incus': 'Incus'}[daemon()]


def _setting(key, kind=None):
    kind = kind or daemon()
    return _ENVIRON.get('%s_%s' % (kind.upper(), key),
                        _DEFAULTS[kind][key])


def socket_of(kind):
    """The unix socket of the main LXD or Incus daemon, whichever the run.

    The LXD-to-Incus tests use both.
    """
    return os.path.join(_setting('DIR', kind), 'unix.socket')


def daemon_dir():
    """State directory of the main daemon ($LXD_DIR or $INCUS_DIR)."""
    return _setting('DIR')


def peer_dir():
    """State directory of the peer daemon of the migration tests."""
    return _setting('PEER_DIR')


def main_url():
    """HTTPS URL of the main daemon (tools/lxd-peer-up.sh sets it)."""
    return 'https://%s' % _setting('MAIN_ADDRESS')


def peer_url():
    return 'https://%s' % _setting('PEER_ADDRESS')


def peer_socket():
    return os.path.join(peer_dir(), 'unix.socket')


def client_cert():
    """The client certificate both daemons trust (tools/lxd-peer-up.sh)."""
    return os.path.join(peer_dir(), 'nova-migration.crt')


def client_key():
    return os.path.join(peer_dir(), 'nova-migration.key')


class DaemonEnvironment(fixtures.Fixture):
    """The environment that points everything at the run's daemon.

    The driver with no ``[lxd] endpoint``, and the helper processes tests start
    (tools/sandbox/venv/lxd_proxy.py), find the local daemon through $LXD_DIR
    (and, on Incus, $INCUS_DIR); both name the chosen daemon during the test,
    whatever else the environment held.
    """

    def _setUp(self):
        kind, path = daemon(), daemon_dir()
        self.useFixture(fixtures.EnvironmentVariable(
            'NOVA_LXD_ACCEL_TEST_DAEMON', kind))
        self.useFixture(fixtures.EnvironmentVariable('LXD_DIR', path))
        self.useFixture(fixtures.EnvironmentVariable(
            'INCUS_DIR', path if kind == 'incus' else None))


class DeprecationsAreErrors(fixtures.Fixture):
    """DeprecationWarnings raised from our own code fail the test.

    Installed after nova's test base, whose WarningsFixture resets the
    filters (tox.ini only shows DeprecationWarnings, and names the
    third-party ones it hides).
    """

    def _setUp(self):
        catcher = warnings.catch_warnings()
        catcher.__enter__()
        self.addCleanup(catcher.__exit__, None, None, None)
        warnings.filterwarnings('error', category=DeprecationWarning,
                                module=r'(nova_lxd_accel|tests)(\.|$)')


def tiny_image_path():
    """A busybox LXD image tarball: $NOVA_LXD_ACCEL_TEST_IMAGE, else built.

    Building needs Debian's busybox-static; .ci/run builds it once and
    exports the variable.
    """
    global _IMAGE_PATH
    with _IMAGE_LOCK:
        if _IMAGE_PATH is None:
            path = os.environ.get('NOVA_LXD_ACCEL_TEST_IMAGE')
            if not path or not os.path.exists(path):
                # Not under $TMPDIR: nova's test base gives every test a
                # temporary directory of its own and removes it afterwards.
                cache = os.path.join('/var/tmp', 'nova-lxd-accel-tests')
                os.makedirs(cache, exist_ok=True)
                path = os.path.join(cache, 'tiny-%d.tar.gz' % os.getpid())
                subprocess.run(
                    [os.path.join(REPO_ROOT, 'tools', 'build-tiny-image.sh'),
                     path], check=True, stdout=subprocess.DEVNULL)
            _IMAGE_PATH = path
        return _IMAGE_PATH


def tiny_image_bytes(owner=None):
    """The tiny image's bytes; with ``owner``, bytes of its own.

    LXD keeps one file per image fingerprint for all projects, and its
    image delete checks whether another project still names the image and
    then removes the file, while an upload of the same bytes in another
    project may be under way (LXD 5.0 to 6.x, Incus 6.0): a test removing
    its project's image could take the file from under a test of another
    worker (``open /var/lib/lxd/images/<fp>: no such file or directory``).
    ``owner`` (a test's project name) adds a YAML comment naming it to the
    image's metadata.yaml: the same image, a fingerprint no other test
    shares.
    """
    with open(tiny_image_path(), 'rb') as handle:
        data = handle.read()
    if owner is None:
        return data
    with _IMAGE_LOCK:
        if owner not in _OWNED_IMAGES:
            _OWNED_IMAGES.clear()  # one test at a time per worker
            _OWNED_IMAGES[owner] = _with_metadata_comment(data, owner)
        return _OWNED_IMAGES[owner]


def _with_metadata_comment(data, comment):
    source = tarfile.open(fileobj=io.BytesIO(data), mode='r:*')
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode='wb', mtime=0) as zipped, \
            tarfile.open(fileobj=zipped, mode='w') as target:
        for member in source.getmembers():
            body = source.extractfile(member) if member.isfile() else None
            if member.name.lstrip('./') == 'metadata.yaml':
                text = body.read() + ('\n# %s\n' % comment).encode()
                member.size = len(text)
                body = io.BytesIO(text)
            target.addfile(member, body)
    return out.getvalue()


def lxd_socket():
    """The main daemon's unix socket (LXD or Incus, see :func:`daemon`)."""
    return os.path.join(daemon_dir(), 'unix.socket')


#: Storage pool drivers the suites run on ($NOVA_LXD_ACCEL_TEST_POOL).
POOL_DRIVERS = ('dir', 'btrfs')


def pool_driver():
    """``dir`` (the daemons' ``default`` pool) or ``btrfs``.

    $NOVA_LXD_ACCEL_TEST_POOL; the -btrfs tox environments set btrfs.
    """
    driver = _ENVIRON.get('NOVA_LXD_ACCEL_TEST_POOL') or 'dir'
    if driver not in POOL_DRIVERS:
        raise RuntimeError('NOVA_LXD_ACCEL_TEST_POOL=%s: use one of %s'
                           % (driver, ', '.join(POOL_DRIVERS)))
    return driver


def pool_name():
    """The pool the driver puts containers on in this run."""
    driver = pool_driver()
    return 'default' if driver == 'dir' else 'nova-test-%s' % driver


def ensure_pool(admin):
    """Make the run's pool on a daemon (pylxd client), once.

    A btrfs pool is a loop file the daemon makes (3 GiB, sparse); it is
    kept between tests and runs, as the ``default`` pool is.
    """
    name = pool_name()
    if name in {pool.name for pool in admin.storage_pools.all()}:
        return
    try:
        admin.storage_pools.create({'name': name, 'driver': pool_driver(),
                                    'config': {'size': '3GiB'}})
    except pylxd.exceptions.LXDAPIException:
        # another test process may have made it meanwhile
        if not admin.storage_pools.exists(name):
            raise


_EXEC_LOCK = threading.Lock()


def execute(client, name, command, attempts=3, timeout=60):
    """Run ``sh -c command`` in a container: (exit code, stdout, stderr).

    ``client`` is a pylxd client of the container's daemon and project.
    Goes through the exec API with ``record-output`` and no websockets:
    LXD's and pylxd's websocket exec loses output or hangs under parallel
    load; the recorded output is read back as a log file and removed.
    Calls are serialised within the process and retried when the daemon
    or the connection fails (not when the command does).
    """
    node = client.api.instances[name]
    for attempt in range(attempts):
        try:
            with _EXEC_LOCK:
                return _execute_once(client, node, command, timeout)
        except (pylxd.exceptions.LXDAPIException,
                requests.RequestException) as exc:
            error = exc
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError('exec %r in %s failed %d times: %s' % (
        command, name, attempts, error))


def _execute_once(client, node, command, timeout):
    response = node.exec.post(json={
        'command': ['sh', '-c', command], 'wait-for-websocket': False,
        'interactive': False, 'record-output': True, 'environment': {}})
    if response.status_code >= 400:
        raise pylxd.exceptions.LXDAPIException(response)
    operation = response.json()['operation'].rsplit('/', 1)[-1]
    done = client.api.operations[operation].wait.get(
        params={'timeout': timeout})
    if done.status_code >= 400:
        raise pylxd.exceptions.LXDAPIException(done)
    metadata = done.json()['metadata']
    if metadata.get('status') != 'Success':
        raise AssertionError('exec %r: %s' % (command, metadata.get('err')))
    result = metadata['metadata']
    output = {'1': b'', '2': b''}
    for fd, path in sorted(result.get('output', {}).items()):
        log = client.api
        for segment in path.split('/')[2:]:  # after "/1.0/"
            log = log[segment]
        output[fd] = log.get().content
        log.delete()
    return result['return'], output['1'], output['2']


def execute_ok(client, name, command, **kwargs):
    """stdout of ``sh -c command``; fails the test unless it exits 0."""
    code, stdout, stderr = execute(client, name, command, **kwargs)
    if code != 0:
        raise AssertionError('exec %r in %s exited %s: %s' % (
            command, name, code, stderr.decode(errors='replace')))
    return stdout


class LXDProject(fixtures.Fixture):
    """A fresh LXD project, removed with everything in it afterwards."""

    def __init__(self, prefix='t', socket=None, name=None):
        """A project on the run's daemon, or on another one.

        :param socket: another daemon than the run's (its unix socket).
        :param name: the project's name (default: prefix-<random>).
        """
        super(LXDProject, self).__init__()
        self.name = name or '%s-%s' % (prefix, uuid.uuid4().hex[:12])
        self.socket = socket

    def _setUp(self):
        self.useFixture(DaemonEnvironment())
        socket = self.socket or lxd_socket()
        self.admin = pylxd.Client(endpoint=socket)
        ensure_pool(self.admin)
        self.admin.api.projects.post(json={
            'name': self.name,
            'config': {'features.images': 'true',
                       'features.profiles': 'false'}})
        self.client = pylxd.Client(endpoint=socket, project=self.name)
        self.addCleanup(self._remove)

    def instances(self):
        """Every instance of the project as LXD reports it."""
        return self.client.api.instances.get(
            params={'recursion': 1}).json()['metadata']

    def instance(self, name):
        return self.client.api.instances[name].get().json()['metadata']

    def execute(self, name, command, **kwargs):
        """stdout of ``sh -c command`` in container name; must exit 0."""
        return execute_ok(self.client, name, command, **kwargs)

    def delete_instance(self, name):
        """Stop (forcefully) and delete an instance, as `lxc delete -f`."""
        record = self.instance(name)
        node = self.client.api.instances[name]
        if record['status'] != 'Stopped':
            if record['status'] == 'Frozen':
                node.state.put(json={'action': 'unfreeze'})
            response = node.state.put(json={'action': 'stop',
                                            'force': True})
            self._wait(response)
        self._wait(node.delete())

    def _remove(self):
        for record in self.instances():
            self.delete_instance(record['name'])
        for fingerprint in self.client.api.images.get().json()['metadata']:
            self._wait(self.client.api.images[
                fingerprint.rsplit('/', 1)[-1]].delete())
        self.admin.api.projects[self.name].delete()

    def _wait(self, response):
        body = response.json()
        if body.get('type') == 'async':
            self.client.api.operations[body['metadata']['id']].wait.get(
                params={'timeout': 60})
