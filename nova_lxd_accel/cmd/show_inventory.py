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

"""``nova-lxd-accel inventory``: the providers this host would report.

It runs the driver's own code path (``AcceleratorInventory.
update_provider_tree``) on a scratch provider tree, from the local LXD or
Incus (found and reached through the driver's own seam,
:class:`nova_lxd_accel.client.LXDClient`, so ``[lxd] endpoint`` and the
same discovery apply) and
``nvidia-smi`` or from saved files, and prints the result. It never talks
to Placement.

For each shared GPU (``[lxd_accelerators] shared_gpus``) it also shows
who shares it: its slots in use and, per held slot, the instance and
project holding it, read from the binding records of the daemon's
instances (every project) as a claim reads them, fresh at each run.
"""

import json
import socket

from nova_lxd_accel.accel.inventory import nvidia_smi
from nova_lxd_accel.accel.inventory import reporter
from nova_lxd_accel.cmd import common

InputError = common.InputError


class DaemonError(Exception):
    """The daemon did not answer a question the output needs."""


def register(subparsers):
    parser = subparsers.add_parser(
        'inventory',
        help='print the accelerator resource providers this host reports',
        description='Print the GPU, MIG and InfiniBand resource providers '
                    'this host would report to Placement, computed by the '
                    'code the compute driver runs.')
    parser.add_argument(
        '--resources-file', metavar='FILE',
        help='JSON of LXD /1.0/resources (whole, or holding only "gpu" '
             'and/or "network"); default: ask the daemon nova-compute '
             'uses ([lxd] endpoint, else the local LXD or Incus)')
    parser.add_argument(
        '--nvidia-smi-list', metavar='FILE',
        help='saved output of "nvidia-smi -L"; default: run the configured '
             'nvidia-smi (when [lxd_accelerators] report_mig is on)')
    parser.add_argument(
        '--instances-file', metavar='FILE',
        help='JSON of LXD /1.0/instances?recursion=1&all-projects=true, '
             'to show who holds the slots of shared GPUs with '
             '--resources-file; default: ask the daemon (only when '
             'reading /1.0/resources from it too)')
    parser.add_argument(
        '--nodename', metavar='NAME', default=None,
        help='compute node name (default: this host name)')
    common.add_config_file(parser)
    common.add_format(parser, help='output format (default: table)')
    parser.set_defaults(func=_run)


def _load_json(path):
    try:
        return json.loads(common.read(path))
    except ValueError as exc:
        raise InputError('%s: not valid JSON: %s' % (path, exc))


def load_resources_file(path):
    """The /1.0/resources metadata dict held by ``path``.

    :raises InputError: naming the file and what is wrong with it.
    """
    data = _load_json(path)
    if isinstance(data, dict) and isinstance(data.get('metadata'), dict) \
            and 'type' in data:
        data = data['metadata']     # a raw API response
    if not isinstance(data, dict):
        raise InputError('%s: expected a JSON object (LXD /1.0/resources), '
                         'got %s' % (path, type(data).__name__))
    if 'gpu' not in data and 'network' not in data:
        raise InputError('%s: holds neither "gpu" nor "network" of LXD '
                         '/1.0/resources' % path)
    for section in ('gpu', 'network'):
        value = data.get(section)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise InputError('%s: "%s" must be an object, got %s' % (
                path, section, type(value).__name__))
        cards = value.get('cards')
        if cards is not None and not isinstance(cards, list):
            raise InputError('%s: "%s.cards" must be a list, got %s' % (
                path, section, type(cards).__name__))
    return data


def load_nvidia_smi_file(path):
    """The ``nvidia-smi -L`` text held by ``path``.

    :raises InputError: when it cannot be read, or holds text without a
        single ``GPU n: ... (UUID: ...)`` line.
    """
    text = common.read(path)
    if text.strip() and not nvidia_smi.parse_list(text) and \
            'No devices were found' not in text:
        raise InputError('%s: no "GPU <n>: <name> (UUID: GPU-...)" line: '
                         'not the output of nvidia-smi -L' % path)
    return text


def load_instances_file(path):
    """The instance records held by ``path`` (a list).

    :raises InputError: naming the file and what is wrong with it.
    """
    data = _load_json(path)
    if isinstance(data, dict) and 'type' in data:
        data = data.get('metadata')     # a raw API response
    if not isinstance(data, list) or not all(
            isinstance(record, dict) for record in data):
        raise InputError('%s: expected a JSON list of instance records '
                         '(LXD /1.0/instances?recursion=1), got %s' % (
                             path, type(data).__name__))
    return data


def _local_daemon(conf):
    """``(/1.0/resources, DaemonInfo, client)`` of nova-compute's daemon."""
    from nova_lxd_accel import client as lxd_client

    client = lxd_client.LXDClient(conf)
    return client.resources(), client.daemon_info(), client


def compute(resources, mig_text, nodename, conf, daemon=None,
            list_instances=None):
    """The providers the driver would report, on a scratch tree.

    :param daemon: the :class:`nova_lxd_accel.daemon.DaemonInfo` the
        resources came from: the root provider then gets its traits, as
        the driver gives them (None for saved files).
    :returns: :func:`.accel.inventory.reporter.describe_host`'s dict.
    """
    from nova_lxd_accel import host

    tree = reporter.scratch_tree(nodename)
    if daemon is not None:
        host.apply_daemon_traits(tree, nodename, daemon)
    return reporter.describe_host(tree, nodename, resources, mig_text, conf,
                                  list_instances)


def format_table(description):
    lines = []
    for provider in description['providers']:
        parent = provider['parent']
        lines.append('%s%s' % (provider['name'],
                               '  (parent: %s)' % parent if parent
                               else '  (root)'))
        for rc, rec in provider['inventories'].items():
            lines.append('    %-28s total=%s reserved=%s min_unit=%s '
                         'max_unit=%s step_size=%s allocation_ratio=%s' % (
                             rc, rec.get('total'), rec.get('reserved'),
                             rec.get('min_unit'), rec.get('max_unit'),
                             rec.get('step_size'),
                             rec.get('allocation_ratio')))
        if provider['traits']:
            lines.append('    traits: %s' % ', '.join(provider['traits']))
        if 'sharing' in provider:
            lines.extend(_sharing_lines(provider['sharing']))
    children = len(description['providers']) - 1
    lines.append('%d accelerator provider%s' % (children,
                                                '' if children == 1 else 's'))
    return '\n'.join(lines)


def _saved(records):
    def list_instances():
        return records
    return list_instances


def _asking(client):
    """Every instance of the daemon, all projects, as a claim lists them."""
    def list_instances():
        try:
            return client.list_all_instances()
        except Exception as exc:
            raise DaemonError('cannot list the instances of the local '
                              'daemon (to show who shares its GPUs): %s'
                              % exc)
    return list_instances


def _sharing_lines(sharing):
    if sharing['slots'] is None:
        return ['    shared: %d slots, holders unknown (give '
                '--instances-file with --resources-file)'
                % sharing['slots_total']]
    lines = ['    shared: %d of %d slots used' % (sharing['slots_used'],
                                                  sharing['slots_total'])]
    for slot in sharing['slots']:
        lines.append('      slot %s: instance %s project %s (%s)' % (
            slot['slot'], slot['instance'], slot['project'],
            slot['container']))
    if sharing['card_held_by']:
        lines.append('      whole card held by %s: no slot free' %
                     ', '.join(sharing['card_held_by']))
    return lines


def _run(args):
    try:
        conf = common.load_conf(args)
        resources = mig_text = list_instances = None
        if args.resources_file:
            resources = load_resources_file(args.resources_file)
        if args.nvidia_smi_list:
            mig_text = load_nvidia_smi_file(args.nvidia_smi_list)
        if args.instances_file:
            list_instances = _saved(load_instances_file(args.instances_file))
    except common.InputError as exc:
        common.error('inventory', exc)
        return common.EXIT_BAD_INPUT
    daemon = None
    if resources is None:
        try:
            resources, daemon, client = _local_daemon(conf)
        except Exception as exc:
            common.error('inventory', 'cannot read /1.0/resources from the '
                         'local daemon: %s; give --resources-file' % exc)
            return common.EXIT_ERROR
        if list_instances is None:
            list_instances = _asking(client)
    nodename = args.nodename or socket.gethostname()
    try:
        description = compute(resources, mig_text, nodename, conf, daemon,
                              list_instances)
    except DaemonError as exc:
        common.error('inventory', exc)
        return common.EXIT_ERROR
    if args.format == 'json':
        print(json.dumps(description, indent=2))
    else:
        print(format_table(description))
    return common.EXIT_OK
