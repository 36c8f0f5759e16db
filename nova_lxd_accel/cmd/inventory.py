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
"""

import json
import socket
import sys

from oslo_config import cfg

EXIT_OK = 0
EXIT_LXD = 1
EXIT_BAD_INPUT = 2

_ROOT_UUID = '00000000-0000-0000-0000-000000000000'


class InputError(Exception):
    """A file given on the command line cannot be used."""


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
        '--nodename', metavar='NAME', default=None,
        help='compute node name (default: this host name)')
    parser.add_argument(
        '--config-file', metavar='FILE', action='append', default=None,
        help='nova configuration file (default: nova.conf where oslo.config '
             'finds it); may be repeated')
    parser.add_argument(
        '--format', choices=('table', 'json'), default='table',
        help='output format (default: table)')
    parser.set_defaults(func=_run)


def _error(message):
    print('nova-lxd-accel inventory: error: %s' % message, file=sys.stderr)


def _read(path):
    try:
        with open(path, encoding='utf-8') as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError('%s: cannot read: %s' % (path, exc))


def load_resources_file(path):
    """The /1.0/resources metadata dict held by ``path``.

    :raises InputError: naming the file and what is wrong with it.
    """
    try:
        data = json.loads(_read(path))
    except ValueError as exc:
        raise InputError('%s: not valid JSON: %s' % (path, exc))
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
    from nova_lxd_accel.accel import nvidia_smi

    text = _read(path)
    if text.strip() and not nvidia_smi.parse_list(text) and \
            'No devices were found' not in text:
        raise InputError('%s: no "GPU <n>: <name> (UUID: GPU-...)" line: '
                         'not the output of nvidia-smi -L' % path)
    return text


def _load_conf(config_files):
    from nova_lxd_accel import conf as accel_conf

    conf = cfg.ConfigOpts()
    accel_conf.register_opts(conf)
    if config_files:
        files = config_files
    else:
        files = cfg.find_config_files(project='nova', prog='nova-compute')
    try:
        conf([], project='nova', default_config_files=files)
        # Values are checked when read: read them all now.
        group = conf.lxd_accelerators
        for name in group:
            getattr(group, name)
    except (cfg.Error, ValueError) as exc:
        raise InputError('%s: %s' % (', '.join(files) or '(no file)',
                                     str(exc).replace('\n', ' ')))
    return conf


def _local_resources(conf):
    """``(/1.0/resources, DaemonInfo)`` of the daemon nova-compute uses."""
    from nova_lxd_accel import client as lxd_client

    client = lxd_client.LXDClient(conf)
    return client.resources(), client.daemon_info()


def compute(resources, mig_text, nodename, conf, daemon=None):
    """Run the driver's code path on a scratch tree.

    :param mig_text: ``nvidia-smi -L`` text, or None to run nvidia-smi.
    :param daemon: the :class:`nova_lxd_accel.daemon.DaemonInfo` the
        resources came from: the root provider then gets its traits, as
        the driver gives them (None for saved files).
    :returns: the ``describe`` dict.
    """
    from nova.compute import provider_tree

    from nova_lxd_accel import accel
    from nova_lxd_accel import host as lxd_host

    tree = provider_tree.ProviderTree()
    tree.new_root(nodename, _ROOT_UUID)
    if daemon is not None:
        lxd_host.apply_daemon_traits(tree, nodename, daemon)
    list_mig = None if mig_text is None else (lambda: mig_text)
    inventory = accel.AcceleratorInventory(
        lambda: resources, list_mig, conf,
        provider_allocations=lambda rp_uuid: {})
    inventory.update_provider_tree(tree, nodename, allocations={})
    return inventory.describe(tree, nodename)


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
    children = len(description['providers']) - 1
    lines.append('%d accelerator provider%s' % (children,
                                                '' if children == 1 else 's'))
    return '\n'.join(lines)


def _run(args):
    try:
        conf = _load_conf(args.config_file)
        resources = mig_text = None
        if args.resources_file:
            resources = load_resources_file(args.resources_file)
        if args.nvidia_smi_list:
            mig_text = load_nvidia_smi_file(args.nvidia_smi_list)
    except InputError as exc:
        _error(exc)
        return EXIT_BAD_INPUT
    daemon = None
    if resources is None:
        try:
            resources, daemon = _local_resources(conf)
        except Exception as exc:
            _error('cannot read /1.0/resources from the local daemon: %s; '
                   'give --resources-file' % exc)
            return EXIT_LXD
    nodename = args.nodename or socket.gethostname()
    description = compute(resources, mig_text, nodename, conf, daemon)
    if args.format == 'json':
        print(json.dumps(description, indent=2))
    else:
        print(format_table(description))
    return EXIT_OK
