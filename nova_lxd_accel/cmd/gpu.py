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

"""``nova-lxd-accel gpu hold|release|forget|list``: the operator's GPU holds.

``hold ADDRESS --reason TEXT`` drains a GPU (maintenance): nova-compute
reports it ``reserved = total`` at its next periodic task and never binds
it. ``release ADDRESS --reason TEXT`` returns a held or unhealthy GPU (a GPU
the probe still finds unhealthy is held again at the next probe).
``forget UNIT --reason TEXT`` drops a released unit that stays dirty (the
operator has checked it by other means: the one way back besides a clean
probe); it refuses a unit a live container holds. ``list`` shows the holds
and the released units not yet verified clean. The state is the file under
``[lxd_accelerators] state_dir`` (``--state-dir``).
"""

import getpass
import json
import logging
import os
import pwd
import re

from nova_lxd_accel.accel.health import gate_state
from nova_lxd_accel.accel.inventory import nvidia_smi
from nova_lxd_accel.accel import units
from nova_lxd_accel.cmd import common
from nova_lxd_accel.cmd import show_inventory

LOG = logging.getLogger(__name__)


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
    text = 'forget a released unit that stays dirty'
    sub = actions.add_parser(
        'forget', help=text, description=text + ' (after checking it by '
        'other means). Refused for a unit a live container holds.')
    sub.add_argument('unit', metavar='UNIT',
                     help='unit key as "gpu list" shows it, e.g. '
                          'pci:0000:3b:00.0, mig:<uuid>, '
                          'share:0000:3b:00.0/2')
    sub.add_argument('--reason', required=True,
                     help='why (kept in the state file and logged)')
    sub.add_argument('--instances-file', metavar='FILE',
                     help='JSON of LXD /1.0/instances?recursion=1&'
                          'all-projects=true instead of asking the local '
                          'daemon (which nova.conf\'s [lxd] names)')
    common.add_common(sub)
    sub.set_defaults(action='forget')
    sub = actions.add_parser('list', help='list held GPUs and dirty units')
    common.add_format(sub)
    common.add_common(sub)
    sub.set_defaults(action='list')


#: a PCI address as LXD and the state file write it, nothing else
_PCI_ADDRESS = re.compile(r'^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$')


def _error(message):
    common.error('gpu', message)


def _operator():
    """(who runs the command, the rest the audit line keeps of them).

    The operator behind ``sudo`` (``SUDO_USER``), else the login name;
    the user it runs as and the uid beside.
    """
    try:
        effective = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        effective = str(os.geteuid())
    operator = os.environ.get('SUDO_USER') or getpass.getuser()
    return operator, {'run_as': effective, 'uid': os.getuid()}


def _load(store):
    """The state, or the exit status with its one line said."""
    try:
        return store.load(), None
    except ValueError as exc:
        _error(exc)
        # a file this user cannot read is no bad input
        if getattr(exc, 'io_error', False):
            return None, common.EXIT_ERROR
        return None, common.EXIT_BAD_INPUT
    except OSError as exc:
        _error(exc)
        return None, common.EXIT_ERROR


def _run(args):
    try:
        conf = common.load_conf(args)
    except common.InputError as exc:
        _error(exc)
        return common.EXIT_BAD_INPUT
    store = gate_state.StateStore.from_conf(conf)
    if args.action == 'list':
        return _list(store, args)
    if not args.reason.strip():
        _error('--reason must say why')
        return common.EXIT_BAD_INPUT
    if args.action == 'forget':
        return _forget(store, conf, args)
    address = nvidia_smi.pci_address(args.address)
    if not address or not _PCI_ADDRESS.match(address):
        _error('%r is not a PCI address (e.g. 0000:3b:00.0)' % args.address)
        return common.EXIT_BAD_INPUT
    by, _audit = _operator()
    state, status = _load(store)
    if state is None:
        return status
    try:
        if args.action == 'hold':
            gate_state.hold(store, address, args.reason, by=by)
            print('GPU %s held: %s. nova-compute reports it reserved at its '
                  'next periodic task; instances on it keep running.'
                  % (address, args.reason))
        else:
            previous = gate_state.release(store, address, args.reason, by=by)
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


def _live_holders(conf, args):
    """Unit key -> holders, from the daemon's instances (all projects)."""
    if args.instances_file:
        records = show_inventory.load_instances_file(args.instances_file)
    else:
        from nova_lxd_accel import client

        records = client.LXDClient(conf).list_all_instances()
    return units.held_units(records)


def _forget(store, conf, args):
    state, status = _load(store)
    if state is None:
        return status
    entry = state['dirty'].get(args.unit)
    if entry is None:
        _error('%s is not a released unit waiting for verification; "gpu '
               'list" shows those' % args.unit)
        return common.EXIT_BAD_INPUT
    try:
        holders = _live_holders(conf, args).get(args.unit)
    except common.InputError as exc:
        _error(exc)
        return common.EXIT_BAD_INPUT
    except Exception as exc:
        _error('cannot list the daemon\'s instances (%s): without them no '
               'one can tell whether a live container holds %s; start the '
               'daemon or give --instances-file' % (exc, args.unit))
        return common.EXIT_ERROR
    if holders:
        _error('%s is bound to a live container (%s): it is not forgotten; '
               'delete that instance first' % (args.unit, '; '.join(holders)))
        return common.EXIT_BAD_INPUT
    by, audit = _operator()
    try:
        dropped = gate_state.forget(store, args.unit, args.reason, by=by,
                                    audit=audit, checked=entry)
    except gate_state.EntryChanged as exc:
        # a new release since the check: its leftover was never checked
        _error('%s: nothing was forgotten; run "gpu list" and check it '
               'again' % exc)
        return common.EXIT_ERROR
    except (OSError, ValueError) as exc:
        _error('cannot update %s: %s' % (store.path, exc))
        return common.EXIT_ERROR
    if dropped is None:
        print('%s was verified clean meanwhile; nothing to forget.'
              % args.unit)
        return common.EXIT_OK
    LOG.warning('%s of GPU %s forgotten by %s (as %s): %s (it was held by: '
                '%s); recorded in %s', args.unit, dropped.get('pci'), by,
                audit['run_as'], args.reason, dropped.get('holding'),
                store.audit_path)
    print('%s of GPU %s forgotten: %s. nova-compute offers it again at its '
          'next periodic task.' % (args.unit, dropped.get('pci'),
                                   args.reason))
    return common.EXIT_OK


def _list(store, args):
    state, status = _load(store)
    if state is None:
        return status
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
