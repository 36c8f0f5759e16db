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

"""What the ``nova-lxd-accel`` sub-commands share.

Exit codes, the error line on standard error, reading a file named on the
command line, the common options (``--config-file``, ``--state-dir``,
``--format``, ``--at``) and loading nova.conf with this package's options.
"""

import sys
import time

from oslo_config import cfg

EXIT_OK = 0
#: the command could not do its work (a daemon that does not answer, a
#: file it cannot write; for ``doctor``: a check found an error)
EXIT_ERROR = 1
EXIT_BAD_INPUT = 2


class InputError(Exception):
    """A file or option given on the command line cannot be used."""


def error(command, message):
    """Print ``nova-lxd-accel <command>: error: <message>`` to stderr."""
    print('nova-lxd-accel %s: error: %s' % (command, message),
          file=sys.stderr)


def read(path):
    """The text of a file named on the command line.

    :raises InputError: naming the file when it cannot be read.
    """
    try:
        with open(path, encoding='utf-8') as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError('%s: cannot read: %s' % (path, exc))


def add_command(subparsers, name, func, help, description):
    """The parser of ``nova-lxd-accel <name>``, which runs ``func(args)``."""
    parser = subparsers.add_parser(name, help=help, description=description)
    parser.set_defaults(func=func)
    return parser


def add_config_file(parser):
    parser.add_argument(
        '--config-file', metavar='FILE', action='append', default=None,
        help='nova configuration file (default: nova.conf where oslo.config '
             'finds it); may be repeated')


def add_common(parser):
    """--config-file and --state-dir, shared by the GPU commands."""
    add_config_file(parser)
    parser.add_argument(
        '--state-dir', metavar='DIR', default=None,
        help='the GPU state directory (default: [lxd_accelerators] '
             'state_dir)')


def add_format(parser, help=None):
    """--format table|json (default table)."""
    parser.add_argument('--format', choices=('table', 'json'),
                        default='table', help=help)


def add_at(parser, help='evaluate at this UNIX time (default: now)'):
    parser.add_argument('--at', type=float, default=None, metavar='TIME',
                        help=help)


def load_conf(args):
    """ConfigOpts with this package's options.

    From ``args.config_file`` (default: nova.conf where oslo.config finds
    it), with ``args.state_dir`` (when given) as ``[lxd_accelerators]
    state_dir``.

    :raises InputError: when a file or a value cannot be used.
    """
    from nova_lxd_accel import conf as accel_conf

    conf = cfg.ConfigOpts()
    # groups of this ConfigOpts only: an override set on the shared group
    # objects would leak into every other ConfigOpts of the process
    for group, _ in accel_conf.list_opts():
        conf.register_group(cfg.OptGroup(group.name, title=group.title,
                                         help=group.help))
    accel_conf.register_opts(conf)
    files = args.config_file or cfg.find_config_files(
        project='nova', prog='nova-compute')
    try:
        conf([], project='nova', default_config_files=files)
        # Values are checked when read: read them all now.
        for name in conf.lxd_accelerators:
            getattr(conf.lxd_accelerators, name)
    except (cfg.Error, ValueError) as exc:
        raise InputError('%s: %s' % (', '.join(files) or '(no file)',
                                     str(exc).replace('\n', ' ')))
    if getattr(args, 'state_dir', None):
        conf.set_override('state_dir', args.state_dir,
                          group='lxd_accelerators')
    return conf


def when(ts):
    """A UNIX time as ``2024-01-31T12:00:00Z`` ('-' for none)."""
    if not ts:
        return '-'
    return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(ts))
