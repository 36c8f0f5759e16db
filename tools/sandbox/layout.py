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

"""Where the sandbox keeps everything: its paths and its ports.

The state directory and its parts, and the ports. The cloud's fixed names
(region, networks, image, flavors) are in catalogue.py, its services in
services.py. The other modules here and the benchmarks all read them from
here; any Python 3, standard library only (it runs before the sandbox's
venv exists).

Usage: python3 -m tools.sandbox.layout shell       bash assignments, for
                                                   shell scripts
       python3 -m tools.sandbox.layout check-ports exit 2 with the reason
                                                   when the ports overlap
                                                   the kernel's ephemeral
                                                   range

Environment: SANDBOX_DIR, SANDBOX_PORT_BASE (see tools/sandbox.sh).
"""

import collections
import hashlib
import os
import shlex
import sys

from . import catalogue

HERE = os.path.dirname(os.path.abspath(__file__))
#: the modules run by the sandbox venv's Python (venv/__main__.py)
VENV_SIDE = os.path.join(HERE, 'venv')
REPO_DIR = os.path.dirname(os.path.dirname(HERE))

DEFAULT_DIR = '/var/tmp/nova-lxd-accel-sandbox'
# Below the kernel's ephemeral port range (32768-60999 by default), where
# any outgoing connection may take a port at the moment a service binds it.
DEFAULT_PORT_BASE = 26100
PORT_SPAN = 100

#: port name -> offset from SANDBOX_PORT_BASE
PORT_OFFSETS = collections.OrderedDict([
    ('MYSQL', 6),
    ('DIST', 25),        # RabbitMQ's Erlang distribution
    ('EPMD', 43),
    ('KEYSTONE', 50),
    ('AMQP', 72),
    ('NOVA', 74),
    ('METADATA', 75),    # served by nova-api's process
    ('PLACEMENT', 78),
    ('HORIZON', 80),
    ('GLANCE', 92),
    ('NEUTRON', 96),
])

#: the files under the state directory that hold secrets (besides etc/)
CREDENTIAL_FILES = ('secrets.env', 'openrc', 'clouds.yaml')


class Layout(object):
    """The paths and ports of one sandbox."""

    def __init__(self, sandbox_dir=DEFAULT_DIR, port_base=DEFAULT_PORT_BASE):
        self.dir = sandbox_dir
        self.port_base = int(port_base)
        self.venv = self.path('venv')
        self.etc = self.path('etc')
        self.data = self.path('data')
        self.logs = self.path('log')
        self.run = self.path('run')
        self.hardware = self.path('data', 'hardware')
        self.hw_socket = self.path('run', 'hwproxy.sock')
        self.hw_devices = self.path('data', 'hwproxy-devices.json')
        self.horizon_venv = self.path('horizon-venv')
        self.horizon_data = self.path('data', 'horizon')
        self.ports = collections.OrderedDict(
            (name, self.port_base + offset)
            for name, offset in PORT_OFFSETS.items())

    @classmethod
    def from_environ(cls, environ=None):
        environ = os.environ if environ is None else environ
        base = environ.get('SANDBOX_PORT_BASE') or DEFAULT_PORT_BASE
        try:
            base = int(base)
        except ValueError:
            raise ValueError('SANDBOX_PORT_BASE is a port number, not %r'
                             % base)
        return cls(environ.get('SANDBOX_DIR') or DEFAULT_DIR, base)

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def url(self, port_name, suffix=''):
        return 'http://127.0.0.1:%d%s' % (self.ports[port_name], suffix)

    def hosts(self):
        """How many compute hosts ``up`` ran with (``--hosts``): 1 or 2."""
        text = (read_text(self.path('hosts')) or '').strip()
        return 2 if text == '2' else 1

    def credential_files(self):
        return [self.path(name) for name in CREDENTIAL_FILES]

    def port_range_problem(self, ephemeral):
        """Why the sandbox's ports cannot be used, or None.

        :param ephemeral: ``(low, high)`` of the kernel's
            net.ipv4.ip_local_port_range, or None when unknown.
        """
        last = self.port_base + PORT_SPAN - 1
        if not 0 < self.port_base <= 65535 - PORT_SPAN + 1:
            return ('SANDBOX_PORT_BASE=%d: the sandbox needs ports %d-%d'
                    % (self.port_base, self.port_base, last))
        if ephemeral is None:
            return None
        low, high = ephemeral
        if self.port_base <= high and last >= low:
            return ('SANDBOX_PORT_BASE=%d: ports %d-%d overlap the kernel\'s '
                    'ephemeral range %d-%d (net.ipv4.ip_local_port_range), '
                    'where outgoing connections take ports; choose a base '
                    'below %d or above %d'
                    % (self.port_base, self.port_base, last, low, high,
                       low - PORT_SPAN, high))
        return None

    def shell(self):
        """Bash assignments of the paths, ports and names, for shell scripts.

        Paths, ports and names; the services themselves are handled by
        processes.py and services.py.
        """
        q = shlex.quote
        lines = ['SANDBOX_DIR=%s' % q(self.dir),
                 'SANDBOX_PORT_BASE=%d' % self.port_base,
                 'VENV=%s' % q(self.venv), 'ETC=%s' % q(self.etc),
                 'DATA=%s' % q(self.data), 'LOGS=%s' % q(self.logs),
                 'RUN=%s' % q(self.run), 'HARDWARE=%s' % q(self.hardware),
                 'HW_SOCKET=%s' % q(self.hw_socket),
                 'HW_DEVICES=%s' % q(self.hw_devices),
                 'HORIZON_VENV=%s' % q(self.horizon_venv),
                 'HORIZON_DATA=%s' % q(self.horizon_data)]
        lines += ['PORT_%s=%d' % item for item in self.ports.items()]
        lines += ['%s=%s' % (name, q(value))
                  for name, value in catalogue.NETWORK.items()]
        lines += ['REGION=%s' % q(catalogue.REGION),
                  'IMAGE_NAME=%s' % q(catalogue.IMAGE_NAME),
                  'PLAIN_FLAVOR=%s' % q(catalogue.PLAIN_FLAVOR),
                  'SECOND_FLAVOR=%s' % q(catalogue.SECOND_FLAVOR),
                  'FAKE_HOST=%s' % q(catalogue.FAKE_HOST),
                  'KEYSTONE_URL=%s' % q(self.url('KEYSTONE'))]
        return '\n'.join(lines) + '\n'


def read_text(path):
    """A file's text, or None when it cannot be read."""
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def digest_files(paths, prefix=b''):
    """The SHA-256 (hex) of ``prefix`` and the files' bytes, in order.

    A file that cannot be read counts as empty.
    """
    digest = hashlib.sha256(prefix)
    for path in paths:
        try:
            with open(path, 'rb') as handle:
                digest.update(handle.read())
        except OSError:
            pass
    return digest.hexdigest()


def ephemeral_port_range(path='/proc/sys/net/ipv4/ip_local_port_range'):
    try:
        with open(path) as handle:
            low, high = handle.read().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return None


def main(argv):
    if len(argv) != 2 or argv[1] not in ('shell', 'check-ports'):
        sys.stderr.write(__doc__.split('\n\n')[2] + '\n')
        return 2
    try:
        layout = Layout.from_environ()
    except ValueError as error:
        sys.stderr.write('sandbox: %s\n' % error)
        return 2
    if argv[1] == 'shell':
        sys.stdout.write(layout.shell())
        return 0
    problem = layout.port_range_problem(ephemeral_port_range())
    if problem:
        sys.stderr.write('sandbox: %s\n' % problem)
        return 2
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
