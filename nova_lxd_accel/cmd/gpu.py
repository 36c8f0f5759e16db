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

"""``nova-lxd-accel gpu hold|release|list``: the operator's GPU holds.

``hold ADDRESS --reason TEXT`` drains a GPU (maintenance): nova-compute
reports it ``reserved = total`` at its next periodic task and never binds
it. ``release ADDRESS --reason TEXT`` returns a held or unhealthy GPU (a GPU
the probe still finds unhealthy is held again at the next probe). ``list``
shows the holds and the released units not yet verified clean. The state
is the file under ``[lxd_accelerators] state_dir`` (``--state-dir``).
"""

import getpass
import json
import sys
import time

from oslo_config import cfg

from nova_lxd_accel.accel import gpu_probe
from nova_lxd_accel.accel import gpu_state

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_BAD_INPUT = 2


class InputError(Exception):
    pass


def add_common(parser):
    """--config-file and --state-dir, shared by the GPU commands."""
    parser.add_argument(
        '--config-file', metavar='FILE', action='append', default=None,
        help='nova configuration file (default: nova.conf where oslo.config '
             'finds it); may be repeated')
    parser.add_argument(
        '--state-dir', metavar='DIR', default=None,
        help='the GPU state directory (default: [lxd_accelerators] '
             'state_dir)')


def load_conf(args):
    """ConfigOpts with this package's options, from --config-file."""
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
    if not ts:
        return '-'
    return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(ts))


def register(subparsers):
    parser = subparsers.add_parser(
        'gpu', help='hold, release or list held GPUs',
        description='Hold a GPU (drain it for maintenance: reserved in '
                    'Placement, never bound) or release a held or '
                    'unhealthy GPU.')
    actions = parser.add_subparsers(dest='action', metavar='ACTION')
    actions.required = True
    for name, text in (('hold', 'hold a GPU (maintenance drain)'),
                       ('release', 'release a held or unhealthy GPU')):
        sub = actions.add_parser(name, help=text, description=text)
        sub.add_argument('address', metavar='ADDRESS',
                         help='PCI address of the GPU, e.g. 0000:3b:00.0')
        sub.add_argument('--reason', required=True,
                         help='why (kept in the state file and logged)')
        add_common(sub)
        sub.set_defaults(func=_run, action=name)
    sub = actions.add_parser('list', help='list held GPUs and dirty units')
    sub.add_argument('--format', choices=('table', 'json'), default='table')
    add_common(sub)
    sub.set_defaults(func=_run, action='list')


def _error(message):
    print('nova-lxd-accel gpu: error: %s' % message, file=sys.stderr)


def _run(args):
    try:
        conf = load_conf(args)
    except InputError as exc:
        _error(exc)
        return EXIT_BAD_INPUT
    store = gpu_state.StateStore.from_conf(conf)
    if args.action == 'list':
        return _list(store, args)
    address = gpu_probe.pci_address(args.address)
    if not address or address.count(':') != 2:
        _error('%r is not a PCI address (e.g. 0000:3b:00.0)' % args.address)
        return EXIT_BAD_INPUT
    by = getpass.getuser()
    try:
        if args.action == 'hold':
            gpu_state.hold(store, address, args.reason, by=by)
            print('GPU %s held: %s. nova-compute reports it reserved at its '
                  'next periodic task; instances on it keep running.'
                  % (address, args.reason))
        else:
            previous = gpu_state.release(store, address, args.reason, by=by)
            if previous is None:
                print('GPU %s was not held; nothing to release.' % address)
            else:
                print('GPU %s released (was %s: %s). It is schedulable '
                      'after the next periodic task unless the probe still '
                      'finds it unhealthy.' % (address, previous.get('kind'),
                                               previous.get('reason')))
    except (OSError, ValueError) as exc:
        _error('cannot update %s: %s' % (store.path, exc))
        return EXIT_ERROR
    return EXIT_OK


def _list(store, args):
    try:
        state = store.load()
    except (OSError, ValueError) as exc:
        _error(exc)
        return EXIT_ERROR
    if args.format == 'json':
        print(json.dumps({'holds': state['holds'], 'dirty': state['dirty']},
                         indent=2, sort_keys=True))
        return EXIT_OK
    if not state['holds'] and not state['dirty']:
        print('No GPU is held and every released unit is verified clean.')
        return EXIT_OK
    for pci, hold in sorted(state['holds'].items()):
        print('%-14s %-10s since %s  %s' % (pci, hold.get('kind'),
                                            when(hold.get('since')),
                                            hold.get('reason')))
    for key, unit in sorted(state['dirty'].items()):
        print('%-14s %-10s since %s  %s of instance %s: %s' % (
            unit.get('pci'), 'dirty', when(unit.get('since')), key,
            unit.get('instance'), unit.get('holding')))
    return EXIT_OK
