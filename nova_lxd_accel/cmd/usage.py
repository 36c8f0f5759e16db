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

"""``nova-lxd-accel usage``, ``idle`` and ``metrics``.

All three read the GPU state file nova-compute's probe keeps
(:mod:`nova_lxd_accel.accel.health.gate_state`); none talks to a service.

* ``usage``: GPU-hours allocated against GPU-hours busy, and the GPU
  energy in Wh where the probe reads the boards' power, per instance or
  per project (``--by``), as a table or JSON; ``--export FILE`` writes
  the busy seconds per instance and unit for the project's cASO extractor
  (:mod:`nova_lxd_accel.accounting.caso_extractor`), which sends them as
  the APEL accelerator records' ``ActiveDuration``;
* ``idle``: GPUs bound to running instances with no compute use for
  ``[lxd_accelerators] idle_report_after`` seconds;
* ``metrics``: the Prometheus text nova-compute writes to
  ``[lxd_accelerators] metrics_file`` (``--output FILE`` writes it).
"""

import functools
import json
import socket
import sys
import time

from nova_lxd_accel.accel.health import energy
from nova_lxd_accel.accel.health import gate_state
from nova_lxd_accel.accel.health import metrics
from nova_lxd_accel.accounting import apel
from nova_lxd_accel.cmd import common


def register(subparsers):
    usage = common.add_command(
        subparsers, 'usage', _usage,
        help='GPU-hours allocated and busy per instance or project',
        description='GPU-hours allocated against GPU-hours busy (a compute '
                    'process or utilisation seen by the probe), per '
                    'instance or per project.')
    usage.add_argument('--by', choices=('instance', 'project'),
                       default='instance')
    common.add_format(usage)
    usage.add_argument(
        '--export', metavar='FILE',
        help='write (atomically) the busy seconds of every instance\'s GPU '
             'units for cASO (the nova_lxd_accel extractor\'s '
             '[nova_lxd_accel] usage_files) instead of printing')

    idle = common.add_command(
        subparsers, 'idle', _idle,
        help='GPUs of running instances with no compute use',
        description='GPUs bound to running instances that showed no compute '
                    'use for [lxd_accelerators] idle_report_after seconds.')
    common.add_format(idle)
    idle.add_argument('--after', type=int, default=None, metavar='SECONDS',
                      help='override [lxd_accelerators] idle_report_after')

    metrics_cmd = common.add_command(
        subparsers, 'metrics', _metrics,
        help='GPU states and usage in Prometheus text format',
        description='Print (or write, for node_exporter\'s textfile '
                    'collector) the GPU metrics.')
    metrics_cmd.add_argument(
        '--output', metavar='FILE',
        help='write the file atomically instead of printing')

    for parser in (idle, metrics_cmd):
        common.add_at(parser)
    for parser in (usage, idle, metrics_cmd):
        common.add_common(parser)


def _reading_state(name):
    """Run ``command(args, conf, state)`` with the GPU state file read.

    Exits 2 when the configuration cannot be used or the state file is
    not one (its content), 1 when it cannot be read.
    """
    def decorate(command):
        @functools.wraps(command)
        def run(args):
            try:
                conf = common.load_conf(args)
            except common.InputError as exc:
                common.error(name, exc)
                return common.EXIT_BAD_INPUT
            try:
                state = gate_state.StateStore.from_conf(conf).load()
            except ValueError as exc:
                common.error(name, exc)
                # a file this user cannot read is no bad input
                if getattr(exc, 'io_error', False):
                    return common.EXIT_ERROR
                return common.EXIT_BAD_INPUT
            except OSError as exc:
                common.error(name, exc)
                return common.EXIT_ERROR
            return command(args, conf, state)
        return run
    return decorate


def usage_rows(state, by='instance'):
    """Rows of GPU-hours (and GPU energy), sorted by key.

    When the probe ever read a GPU's power (a usage record has
    ``energy_j``, see :mod:`nova_lxd_accel.accel.health.energy`), each row
    also has ``gpu_energy_wh``: the energy of its units in Wh, or None
    when none of them had a power reading.
    """
    rows = {}
    measured = False
    for instance, usage in state.get('usage', {}).items():
        project = usage.get('project') or '-'
        key = instance if by == 'instance' else project
        row = rows.setdefault(key, {
            by: key, 'project': project, 'instances': set(),
            'gpus': set(), 'allocated_h': 0.0, 'busy_h': 0.0,
            'energy_j': None})
        row['instances'].add(instance)
        for unit in usage.get('units', {}).values():
            row['gpus'].add(unit.get('pci'))
            row['allocated_h'] += unit.get('allocated_s', 0) / 3600.0
            row['busy_h'] += unit.get('busy_s', 0) / 3600.0
            if energy.ENERGY_J in unit:
                measured = True
                row['energy_j'] = (row['energy_j'] or 0.0) + float(
                    unit[energy.ENERGY_J])
    out = []
    for key in sorted(rows):
        row = rows[key]
        alloc = row['allocated_h']
        out.append({by: key, 'project': row['project'],
                    'instances': len(row['instances']),
                    'gpus': sorted(row['gpus']),
                    'allocated_gpu_hours': round(alloc, 3),
                    'busy_gpu_hours': round(row['busy_h'], 3),
                    'busy_percent': round(100.0 * row['busy_h'] / alloc, 1)
                    if alloc else None})
        if measured:
            out[-1]['gpu_energy_wh'] = None if row['energy_j'] is None \
                else round(row['energy_j'] / 3600.0, 3)
    return out


def format_usage(rows, by):
    if not rows:
        return 'No GPU usage recorded (no GPU, or no instance held one).'
    energy_column = any('gpu_energy_wh' in row for row in rows)
    lines = ['%-38s %-34s %9s %9s %6s' % (by.upper(), 'PROJECT' if by ==
                                          'instance' else 'INSTANCES',
                                          'ALLOC GPU-h', 'BUSY GPU-h',
                                          'BUSY%')]
    if energy_column:
        lines[0] += ' %12s' % 'GPU Wh'
    for row in rows:
        lines.append('%-38s %-34s %11.2f %10.2f %6s' % (
            row[by], row['project'] if by == 'instance'
            else row['instances'], row['allocated_gpu_hours'],
            row['busy_gpu_hours'], '-' if row['busy_percent'] is None
            else '%.1f' % row['busy_percent']))
        if energy_column:
            wh = row.get('gpu_energy_wh')
            lines[-1] += ' %12s' % ('-' if wh is None else '%.1f' % wh)
    return '\n'.join(lines)


@_reading_state('usage')
def _usage(args, conf, state):
    if args.export:
        # the host name tells apart the units of an instance that moved
        export = apel.export(state, socket.gethostname(), time.time())
        try:
            gate_state.write_atomic(
                args.export, json.dumps(export, indent=1, sort_keys=True),
                prefix='.nova_lxd_accel_usage.', mode=0o644)
        except OSError as exc:
            common.error('usage', '%s: cannot write: %s' % (
                args.export, exc.strerror or exc))
            return common.EXIT_ERROR
        return common.EXIT_OK
    rows = usage_rows(state, args.by)
    if args.format == 'json':
        print(json.dumps(rows, indent=2, sort_keys=True))
    else:
        print(format_usage(rows, args.by))
    return common.EXIT_OK


@_reading_state('idle')
def _idle(args, conf, state):
    after = args.after
    if after is None:
        after = conf.lxd_accelerators.idle_report_after
    now = args.at if args.at is not None else time.time()
    idle = gate_state.idle_units(state, conf, now, after=after)
    if args.format == 'json':
        print(json.dumps(idle, indent=2, sort_keys=True))
        return common.EXIT_OK
    if not after:
        print('Idle reporting is off ([lxd_accelerators] '
              'idle_report_after = 0).')
    elif not idle:
        print('No GPU of a running instance has been idle for %s seconds '
              'or more.' % after)
    for unit in idle:
        print('%s  instance %s  project %s  %s  idle since %s (%.1f h)' % (
            unit['pci'], unit['instance'], unit['project'] or '-',
            unit['unit'], common.when(unit['idle_since']),
            unit['idle_s'] / 3600.0))
    return common.EXIT_OK


@_reading_state('metrics')
def _metrics(args, conf, state):
    pcis = set(state.get('baseline', {})) | {
        u.get('pci') for u in state.get('bound', {}).values()} | {
        u.get('pci') for u in state.get('dirty', {}).values()}
    text = metrics.render(state, sorted(p for p in pcis if p), conf,
                          args.at if args.at is not None else time.time())
    if args.output:
        try:
            metrics.write_textfile(args.output, text)
        except OSError as exc:
            common.error('metrics', exc)
            return common.EXIT_ERROR
    else:
        sys.stdout.write(text)
    return common.EXIT_OK
