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

"""``nova-lxd-accel doctor``: check this compute host.

It asks the daemon (``GET /1.0``, the storage pool, ``/1.0/resources``)
and runs nova-compute's own check of it (:func:`.host.check_daemon`),
runs the GPU probe and ``nvidia-smi -L``, reads the GPU state file and
looks at ``/proc``, ``/sys`` and ``/etc/cdi``; then prints what is wrong
and how to fix it (:mod:`nova_lxd_accel.advice.diagnosis`). Exit status: 0
when nothing is an error (a CPU-only host is fine), 1 otherwise.

``--recorded DIR`` checks a recorded host instead: ``DIR/server.json``,
``DIR/resources.json``, ``DIR/nvidia-smi-L.txt``, ``DIR/query-gpu.csv``,
``DIR/compute-apps.csv``, the tree ``DIR/root`` (for ``/proc``, ``/sys``,
``/etc``) and the state directory ``DIR/state``; a missing file means
"absent on that host".
"""

import json
import os
import time

from nova_lxd_accel.accel.health import gate_state
from nova_lxd_accel.accel.health import probe
from nova_lxd_accel.accel.inventory import compute_apps
from nova_lxd_accel.accel.inventory import nvidia_smi
from nova_lxd_accel.advice import diagnosis
from nova_lxd_accel.cmd import common


def register(subparsers):
    parser = common.add_command(
        subparsers, 'doctor', _run,
        help='check this compute host and say how to fix it',
        description='Check the daemon, NVIDIA driver and CDI, MIG, IOMMU, '
                    'InfiniBand, cgroup v2, nova.conf and the GPU states. '
                    'Exits 1 when a check finds an error.')
    common.add_format(parser)
    parser.add_argument('--recorded', metavar='DIR',
                        help='check a recorded host (see the module help)')
    common.add_at(parser, help='evaluate idle GPUs at this UNIX time')
    common.add_common(parser)


def _read(path):
    try:
        with open(path, encoding='utf-8') as f:
            return f.read()
    except FileNotFoundError:
        return None


def recorded_view(conf, directory, now):
    """A :class:`doctor.HostView` of a recorded host."""
    server = _read(os.path.join(directory, 'server.json'))
    resources = _read(os.path.join(directory, 'resources.json'))
    query = _read(os.path.join(directory, 'query-gpu.csv'))
    apps = _read(os.path.join(directory, 'compute-apps.csv'))
    if query is None:
        snapshot = probe.Snapshot(now, False, {}, {},
                                  probe.NO_NVIDIA_SMI)
    else:
        snapshot = probe.Snapshot(
            now, True, nvidia_smi.parse_query_gpu(query),
            compute_apps.parse(apps) if apps else {})
    state_dir = os.path.join(directory, 'state')
    return diagnosis.HostView(
        conf=conf, root=os.path.join(directory, 'root'),
        server_info=json.loads(server) if server else None,
        server_error=None if server else 'no server.json recorded',
        resources=json.loads(resources) if resources else {},
        snapshot=snapshot,
        mig_text=_read(os.path.join(directory, 'nvidia-smi-L.txt')) or '',
        state=gate_state.StateStore(state_dir).load(), now=now)


def live_view(conf, now):
    from nova_lxd_accel import client as lxd_client
    from nova_lxd_accel import host as lxd_host

    view = diagnosis.HostView(conf=conf, now=now)
    client = lxd_client.LXDClient(conf)
    try:
        view.server_info = client.server_info()
        view.resources = client.resources()
    except Exception as exc:
        view.server_error = str(exc)
    if view.server_error is None:
        # the check nova-compute makes at its start (init_host), so a host
        # doctor passes is one nova-compute starts on
        view.start_checked = True
        try:
            lxd_host.check_daemon(client, conf)
        except Exception as exc:
            view.start_error = str(exc)
        view.pool_checked = True
        try:
            client.storage_pool(conf.lxd.storage_pool)
        except Exception as exc:
            view.pool_error = 'storage pool "%s": %s' % (
                conf.lxd.storage_pool, exc)
    view.snapshot = probe.HostProbe.from_conf(conf).snapshot()
    group = conf.lxd_accelerators
    view.mig_text = nvidia_smi.run_list(group.nvidia_smi_path,
                                        group.nvidia_smi_timeout) or ''
    view.state = gate_state.StateStore.from_conf(conf).load()
    return view


def format_table(findings):
    width = max([len(f.check) for f in findings] + [5])
    lines = ['%-*s  %-7s  %s' % (width, 'CHECK', 'STATUS', 'FINDING')]
    for f in findings:
        lines.append('%-*s  %-7s  %s' % (width, f.check, f.status.upper(),
                                         f.message))
        if f.fix and f.status in (diagnosis.WARN, diagnosis.ERROR,
                                  diagnosis.INFO):
            lines.append('%-*s  %-7s  fix: %s' % (width, '', '', f.fix))
    return '\n'.join(lines)


def _run(args):
    try:
        conf = common.load_conf(args)
    except common.InputError as exc:
        common.error('doctor', exc)
        return common.EXIT_BAD_INPUT
    now = args.at if args.at is not None else time.time()
    if args.recorded and not os.path.isdir(args.recorded):
        common.error('doctor', '%s: no such directory (--recorded takes '
                     'the directory of a recorded host)' % args.recorded)
        return common.EXIT_BAD_INPUT
    try:
        if args.recorded:
            view = recorded_view(conf, args.recorded, now)
        else:
            view = live_view(conf, now)
    except (OSError, ValueError) as exc:
        common.error('doctor', exc)
        return common.EXIT_BAD_INPUT
    findings = diagnosis.run(view)
    worst = diagnosis.worst(findings)
    if args.format == 'json':
        print(json.dumps({'status': worst,
                          'findings': [f.as_dict() for f in findings]},
                         indent=2, sort_keys=True))
    else:
        print(format_table(findings))
    return common.EXIT_ERROR if worst == diagnosis.ERROR else common.EXIT_OK
