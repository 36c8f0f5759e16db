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

"""``nova-lxd-accel sandbox``: a real OpenStack on this machine.

The work is done by ``tools/sandbox.sh`` in the project's source tree (it
must run before any venv exists, so it is a shell script); this command
finds it and runs it. The script is looked for in ``--source``, then
``$NOVA_LXD_ACCEL_SOURCE``, then the checkout this package was imported
from, then the directory it was pip-installed from (PEP 610
``direct_url.json``), then the current directory.

Before the first ``up`` nothing of the project is installed yet, so this
module needs only the standard library: from a checkout,
``python3 -m nova_lxd_accel.cmd.sandbox up`` works with any Python 3, and
after ``up`` the sandbox venv has ``nova-lxd-accel sandbox ...`` (on the
``PATH`` once its ``openrc`` is sourced).
"""

import argparse

import importlib.metadata
import json
import os
import subprocess
import sys
from urllib import parse

ACTIONS = ('up', 'down', 'status', 'clean')
SCRIPT = os.path.join('tools', 'sandbox.sh')
EXIT_NO_SCRIPT = 3


def _add_arguments(parser):
    parser.add_argument('action', choices=ACTIONS,
                        help='up: install and start everything (safe to '
                             're-run); down: stop what up started; status: '
                             'show what runs; clean: down and remove state')
    parser.add_argument('--source', metavar='DIR', default=None,
                        help='source checkout holding tools/sandbox.sh '
                             '(default: $NOVA_LXD_ACCEL_SOURCE, then the '
                             'checkout this package comes from)')
    parser.set_defaults(func=_run)


def register(subparsers):
    parser = subparsers.add_parser(
        'sandbox',
        help='run a small real OpenStack (Keystone, Placement, Glance, '
             'Neutron, Nova with this driver) on this machine',
        description='Bring up, stop or show a single-host OpenStack on '
                    '127.0.0.1 whose nova-compute runs this driver against '
                    'the local LXD. Runs tools/sandbox.sh of a source '
                    'checkout; the environment variables it reads '
                    '(SANDBOX_DIR, SANDBOX_PORT_BASE, ...) pass through.')
    _add_arguments(parser)


def candidate_dirs(source=None, environ=None):
    """Directories that may hold ``tools/sandbox.sh``, in search order.

    :param source: a directory given on the command line, or None.
    :param environ: the environment (default ``os.environ``).
    :returns: list of directory paths.
    """
    environ = os.environ if environ is None else environ
    dirs = []
    if source:
        dirs.append(source)
    if environ.get('NOVA_LXD_ACCEL_SOURCE'):
        dirs.append(environ['NOVA_LXD_ACCEL_SOURCE'])
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dirs.append(os.path.dirname(package_dir))
    installed_from = _installed_from()
    if installed_from:
        dirs.append(installed_from)
    dirs.append(os.getcwd())
    return dirs


def _installed_from():
    """The local directory pip installed this package from, if any."""
    try:
        text = importlib.metadata.distribution(
            'nova-lxd-accel').read_text('direct_url.json')
    except importlib.metadata.PackageNotFoundError:
        return None
    if not text:
        return None
    try:
        url = json.loads(text).get('url', '')
    except ValueError:
        return None
    if not url.startswith('file://'):
        return None
    return parse.unquote(parse.urlparse(url).path)


def find_script(source=None, environ=None):
    """The path of ``tools/sandbox.sh``, or None when not found."""
    for directory in candidate_dirs(source, environ):
        path = os.path.join(directory, SCRIPT)
        if os.path.isfile(path):
            return path
    return None


def _run(args):
    script = find_script(args.source)
    if script is None:
        print('nova-lxd-accel sandbox: %s not found (looked in: %s).\n'
              'The sandbox runs from a source checkout of nova-lxd-accel: '
              'pass --source DIR or set NOVA_LXD_ACCEL_SOURCE, or run '
              'tools/sandbox.sh %s there.' % (
                  SCRIPT, ', '.join(candidate_dirs(args.source)),
                  args.action),
              file=sys.stderr)
        return EXIT_NO_SCRIPT
    return subprocess.call(['bash', script, args.action])


def main(argv=None):
    """``python3 -m nova_lxd_accel.cmd.sandbox ACTION``, standard library only.

    The same as ``nova-lxd-accel sandbox ACTION``, for a checkout where
    nothing is installed yet (before the first ``up``).
    """
    parser = argparse.ArgumentParser(
        prog='python3 -m nova_lxd_accel.cmd.sandbox',
        description='Bring up, stop or show the single-host OpenStack '
                    'sandbox (tools/sandbox.sh of a source checkout). The '
                    'same as "nova-lxd-accel sandbox", with nothing '
                    'installed.')
    _add_arguments(parser)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == '__main__':
    sys.exit(main())
