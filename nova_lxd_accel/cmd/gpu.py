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

from nova_lxd_accel.accel import gpu_state
from nova_lxd_accel.accel import nvidia_smi
from nova_lxd_accel.cmd import common


def register(subparsers):
    parser = common.add_command(
        subparsers, 'gpu', _run, help='hold, release or list held GPUs',
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
        common.add_common(sub)
        sub.set_defaults(action=name)
    sub = actions.add_parser('list', help='list held GPUs and dirty units')
    common.add_format(sub)
    common.add_common(sub)
    sub.set_defaults(action='list')


def _error(message):
    common.error('gpu', message)


def _run(args):
    try:
        conf = common.load_conf(args)
    except common.InputError as exc:
        _error(exc)
        return common.EXIT_BAD_INPUT
    store = gpu_state.StateStore.from_conf(conf)
    if args.action == 'list':
        return _list(store, args)
    address = nvidia_smi.pci_address(args.address)
    if not address or address.count(':') != 2:
        _error('%r is not a PCI address (e.g. 0000:3b:00.0)' % args.address)
        return common.EXIT_BAD_INPUT
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
        return common.EXIT_ERROR
    return common.EXIT_OK


def _list(store, args):
    try:
        state = store.load()
    except (OSError, ValueError) as exc:
        _error(exc)
        return common.EXIT_ERROR
    if args.format == 'json':
        print(json.dumps({'holds': state['holds'], 'dirty': state['dirty']},
                         indent=2, sort_keys=True))
        return common.EXIT_OK
    if not state['holds'] and not state['dirty']:
        print('No GPU is held and every released unit is verified clean.')
        return common.EXIT_OK
    for pci, hold in sorted(state['holds'].items()):
        print('%-14s %-10s since %s  %s' % (pci, hold.get('kind'),
                                            common.when(hold.get('since')),
                                            hold.get('reason')))
    for key, unit in sorted(state['dirty'].items()):
        print('%-14s %-10s since %s  %s of instance %s: %s' % (
            unit.get('pci'), 'dirty', common.when(unit.get('since')), key,
            unit.get('instance'), unit.get('holding')))
    return common.EXIT_OK
