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

"""The container daemon nova-compute uses: LXD or Incus.

Which one (:func:`choose_backend`), its own CLI pointed at it
(:class:`Daemon`), making it ready with the repository's
``tools/lxd-up.sh`` or ``tools/incus-up.sh`` (:func:`ready`), and the
image aliases of the driver's cache that ``clean`` removes.
Any Python 3, standard library only.
"""

import json
import os
import subprocess
import time

from . import layout as layout_module

BACKENDS = ('lxd', 'incus')


def _answers(daemon):
    """Whether the daemon's CLI reaches a daemon at its directory."""
    if not os.path.exists(daemon.socket):
        return False
    try:
        return daemon.cli('info', stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, timeout=60
                          ).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def debian_major(path='/etc/debian_version'):
    text = layout_module.read_text(path) or ''
    try:
        return int(text.strip().split('.')[0])
    except ValueError:
        return None


def choose_backend(named, layout, environ, answers=_answers,
                   debian=debian_major):
    """The daemon nova-compute uses.

    The one named (``up --backend``, SANDBOX_BACKEND), else the one this
    sandbox was brought up with, else the one that already runs (LXD
    first), else the distribution's own (Debian 13: Incus).

    :raises ValueError: a name that is neither lxd nor incus.
    """
    backend = named
    if not backend:
        backend = (layout_module.read_text(
            os.path.join(layout.dir, 'backend')) or '').strip()
    if not backend:
        if answers(Daemon('lxd', environ)):
            backend = 'lxd'
        elif answers(Daemon('incus', environ)):
            backend = 'incus'
        elif (debian() or 0) >= 13:
            backend = 'incus'
        else:
            backend = 'lxd'
    if backend not in BACKENDS:
        raise ValueError("the backend is lxd or incus, not '%s'" % backend)
    return Daemon(backend, environ)


class Daemon(object):
    """The chosen daemon, its directory and its own CLI."""

    def __init__(self, backend, environ):
        self.backend = backend
        self.variable = 'INCUS_DIR' if backend == 'incus' else 'LXD_DIR'
        self.directory = environ[self.variable]
        self.cli_name = 'incus' if backend == 'incus' else 'lxc'
        self.socket = os.path.join(self.directory, 'unix.socket')
        # up --hosts 2: the second host's daemon (tools/lxd-peer-up.sh)
        self.peer_variable = self.variable.replace('_DIR', '_PEER_DIR')
        self.peer_directory = environ.get(
            self.peer_variable) or '/var/lib/%s-peer' % backend

    def peer(self):
        """The same kind of daemon at :attr:`peer_directory`."""
        return Daemon(self.backend, {self.variable: self.peer_directory})

    def cli(self, *args, **kwargs):
        """Run the daemon's CLI (subprocess.run's keywords)."""
        env = dict(kwargs.pop('env', os.environ))
        env[self.variable] = self.directory
        return subprocess.run([self.cli_name] + list(args), env=env,
                              **kwargs)

    def query(self, path):
        """The JSON of ``CLI query PATH``, or None."""
        try:
            result = self.cli('query', path, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True,
                              timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if result.returncode:
            return None
        try:
            return json.loads(result.stdout)
        except ValueError:
            return None


def set_up(daemon):
    """Whether the daemon has a pool "default" with the root disk on it."""
    if daemon.query('/1.0/storage-pools/default') is None:
        return False
    if daemon.backend == 'incus':
        return True
    root = ((daemon.query('/1.0/profiles/default') or {})
            .get('devices', {}).get('root', {}))
    return root.get('type') == 'disk' and root.get('pool') == 'default'


def _script_environ(daemon, environ):
    """The environment of tools/<backend>-up.sh and lxd-peer-up.sh."""
    env = dict(environ)
    env['%s_INSTALL' % daemon.backend.upper()] = environ.get('SANDBOX_APT',
                                                             '1')
    return env


def ready(daemon, compute_driver, environ, sleep=time.sleep):
    """Start and set up the daemon unless it runs already set up.

    A running daemon already set up is left alone: re-applying the preseed
    updates the default profile of every instance, which fails while other
    users' instances are busy.

    :returns: True when the daemon is ready.
    """
    if not compute_driver.startswith('lxd_accel.'):
        print('compute driver %s: LXD not needed' % compute_driver)
        return True
    name = 'LXD' if daemon.backend == 'lxd' else 'Incus'
    if set_up(daemon):
        print('%s runs under %s with pool default: left as it is'
              % (name, daemon.directory))
        return True
    script = os.path.join(layout_module.REPO_DIR, 'tools',
                          '%s-up.sh' % daemon.backend)
    env = _script_environ(daemon, environ)
    tries = 3 if daemon.backend == 'lxd' else 1
    for attempt in range(1, tries + 1):
        # From /: the daemon it may start keeps that working directory for
        # good; its rsync (snapshots, copies) fails once it is deleted.
        if subprocess.run(['bash', script], cwd='/', env=env).returncode \
                == 0:
            return True
        if attempt < tries:
            print('tools/%s-up.sh failed (try %d of %d)'
                  % (daemon.backend, attempt, tries))
            sleep(2)
    print('%s is not ready: see the errors above and %s/%s.log'
          % (name, daemon.directory, daemon.backend))
    return False


def peer_ready(daemon, environ):
    """Start the peer daemon, trusted both ways, unless it runs.

    tools/lxd-peer-up.sh (``--incus``): the second host's daemon, both on
    loopback HTTPS, and the client certificate either nova-compute shows
    the other's daemon to send it a container (cold migration).

    :returns: True when the peer is ready.
    """
    script = os.path.join(layout_module.REPO_DIR, 'tools', 'lxd-peer-up.sh')
    env = _script_environ(daemon, environ)
    env[daemon.variable] = daemon.directory
    env[daemon.peer_variable] = daemon.peer_directory
    argv = ['bash', script] + (['--incus'] if daemon.backend == 'incus'
                               else [])
    # From /: see ready()
    if subprocess.run(argv, cwd='/', env=env).returncode == 0:
        return True
    print('the peer daemon is not ready: see the errors above and %s/%s.log'
          % (daemon.peer_directory, daemon.backend))
    return False


def remove_image_aliases(daemon, image_ids):
    """Delete the driver's cached images of these Glance image ids.

    Those are the ``nova-image-<id>`` aliases, and only those: other
    clouds on the host may use the daemon.
    """
    try:
        result = daemon.cli('image', 'alias', 'list', '--format', 'csv',
                            stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    except OSError:
        return []
    removed = []
    for line in result.stdout.splitlines():
        alias = line.split(',')[0]
        if alias.startswith('nova-image-') and \
                alias[len('nova-image-'):] in image_ids:
            daemon.cli('image', 'delete', alias, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
            removed.append(alias)
    return removed
