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

"""``nova-lxd-accel flavors``: propose or create GPU flavors.

From the inventory this host reports (the same code path as
``nova-lxd-accel inventory``) it proposes one flavor per GPU model and MIG
profile: a readable name, the Placement request, a description in plain
words and the ``Accelerator:*`` properties cASO and cloud-info-provider
read (see :mod:`nova_lxd_accel.advice.flavor_proposals`). ``--create``
creates the missing ones through the compute API (openstacksdk,
credentials from ``--os-cloud`` / ``OS_*``), at microversion 2.86 so that
nova checks every extra spec.
"""

import json
import socket

from nova_lxd_accel.accel.health import probe
from nova_lxd_accel.accel.inventory import nvidia_smi
from nova_lxd_accel.accel.inventory import reporter
from nova_lxd_accel.accel.inventory import shared_gpus
from nova_lxd_accel.advice import flavor_proposals
from nova_lxd_accel.cmd import common
from nova_lxd_accel.cmd import show_inventory


def register(subparsers):
    parser = common.add_command(
        subparsers, 'flavors', _run, help='propose or create GPU flavors',
        description='Propose (print) or create GPU flavors for the GPUs '
                    'and MIG slices this host reports, with the '
                    'Accelerator:* properties of cASO and '
                    'cloud-info-provider.')
    for option, saved, default in (
            ('--resources-file', 'LXD /1.0/resources JSON',
             'ask the local daemon'),
            ('--nvidia-smi-list', '"nvidia-smi -L" output', 'run nvidia-smi'),
            ('--query-gpu', '"nvidia-smi --query-gpu=... --format=csv" '
             'output, for GPU memory', 'run nvidia-smi')):
        parser.add_argument(option, metavar='FILE',
                            help='saved %s (default: %s)' % (saved, default))
    parser.add_argument('--vcpus', type=int, default=4)
    parser.add_argument('--ram', type=int, default=16384, help='MiB')
    parser.add_argument('--disk', type=int, default=20, help='GiB')
    parser.add_argument('--count', type=int, default=1,
                        help='GPUs or MIG slices per flavor (default 1)')
    parser.add_argument('--prefix', default='g1',
                        help='flavor name prefix (default g1)')
    common.add_format(parser)
    parser.add_argument('--create', action='store_true',
                        help='create the flavors that do not exist yet')
    parser.add_argument('--os-cloud', metavar='NAME', default=None,
                        help='clouds.yaml entry for --create (default: '
                             'OS_* environment variables)')
    parser.add_argument('--config-file', metavar='FILE', action='append',
                        default=None, help='nova configuration file')


#: the lowest value of each size option
_LOWEST = (('vcpus', 1), ('ram', 1), ('disk', 0), ('count', 1))


def _error(message):
    common.error('flavors', message)


def _probe(args, conf):
    """PCI address -> the probe's facts of each GPU."""
    if args.query_gpu:
        with open(args.query_gpu, encoding='utf-8') as f:
            text = f.read()
        return nvidia_smi.parse_query_gpu(text) if text.strip() else {}
    return probe.HostProbe.from_conf(conf).snapshot().gpus


def format_table(proposals):
    if not proposals:
        return 'no GPU: no GPU flavor to propose'
    lines = []
    for p in proposals:
        lines.append('%s  (%d vCPU, %d MiB RAM, %d GiB disk; GPUs %s)' % (
            p.name, p.vcpus, p.ram, p.disk, ', '.join(p.gpus)))
        lines.append('    %s' % p.description)
        for key, value in sorted(p.extra_specs.items()):
            lines.append('    %s=%s' % (key, value))
    return '\n'.join(lines)


def as_dict(proposal):
    return {'name': proposal.name, 'vcpus': proposal.vcpus,
            'ram': proposal.ram, 'disk': proposal.disk,
            'description': proposal.description,
            'extra_specs': proposal.extra_specs,
            'gpus': list(proposal.gpus)}


class SdkFlavors(object):
    """Flavors through openstacksdk (the ``--create`` path)."""

    def __init__(self, cloud=None):
        import openstack

        self._conn = openstack.connect(cloud=cloud)
        self._conn.compute.default_microversion = '2.86'

    def existing(self):
        return {f.name for f in self._conn.compute.flavors()}

    def create(self, proposal):
        flavor = self._conn.compute.create_flavor(
            name=proposal.name, vcpus=proposal.vcpus, ram=proposal.ram,
            disk=proposal.disk, description=proposal.description)
        try:
            self._conn.compute.create_flavor_extra_specs(
                flavor, proposal.extra_specs)
        except Exception:
            # never left behind without its extra specs: booted, such a
            # flavor would ask for no GPU at all
            self._conn.compute.delete_flavor(flavor, ignore_missing=True)
            raise
        return flavor.id


def create(proposals, api):
    """Create the proposals ``api`` does not have; returns created names."""
    existing = api.existing()
    created = []
    for proposal in proposals:
        if proposal.name in existing:
            continue
        api.create(proposal)
        created.append(proposal.name)
    return created


def _run(args):
    for option, lowest in _LOWEST:
        if getattr(args, option) < lowest:
            _error('--%s %d: it must be %d or more' % (
                option, getattr(args, option), lowest))
            return common.EXIT_BAD_INPUT
    try:
        conf = common.load_conf(args)
        resources = mig_text = None
        if args.resources_file:
            resources = show_inventory.load_resources_file(args.resources_file)
        if args.nvidia_smi_list:
            mig_text = show_inventory.load_nvidia_smi_file(
                args.nvidia_smi_list)
    except common.InputError as exc:
        _error(exc)
        return common.EXIT_BAD_INPUT
    if resources is None:
        from nova_lxd_accel import client
        try:
            resources = client.LXDClient(conf).resources()
        except Exception as exc:
            _error('cannot read /1.0/resources from the local daemon: %s; '
                   'give --resources-file' % exc)
            return common.EXIT_ERROR
    try:
        probed = _probe(args, conf)
    except (OSError, ValueError) as exc:
        _error(exc)
        return common.EXIT_BAD_INPUT
    # the probe's names and memory reach discovery as they do in
    # nova-compute, so a card LXD does not name gets its model trait
    gpus = reporter.discovered_gpus(resources, mig_text, conf,
                                    probed_gpus=probed)
    memory = {pci: g.memory_total_mib for pci, g in probed.items()
              if g.memory_total_mib}
    names = {pci: g.name for pci, g in probed.items() if g.name}
    share_modes = {gpu.pci_address: shared_gpus.card_mode(
        conf.lxd_accelerators.shared_gpus, gpu)
        for gpu in gpus if gpu.shared_slots}
    proposals = flavor_proposals.propose(
        gpus, memory, vcpus=args.vcpus, ram=args.ram, disk=args.disk,
        count=args.count, prefix=args.prefix, names_by_pci=names,
        share_modes=share_modes,
        pooled=conf.lxd_accelerators.pool_whole_gpus)
    if args.format == 'json':
        print(json.dumps([as_dict(p) for p in proposals], indent=2,
                         sort_keys=True))
    else:
        print(format_table(proposals))
    if args.create and proposals:
        try:
            created = create(proposals, SdkFlavors(args.os_cloud))
        except Exception as exc:
            _error('cannot create the flavors on %s: %s' % (
                args.os_cloud or socket.gethostname(), exc))
            return common.EXIT_ERROR
        print('created: %s' % (', '.join(created) or 'none (all exist)'))
    return common.EXIT_OK
