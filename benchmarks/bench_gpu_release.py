#!/usr/bin/env python3
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

"""How soon a freed GPU unit can be allocated again, in the sandbox.

On the sandbox's SIMULATED GPU host (the recorded host
``h100-mig-a100-ib`` with one A100 shared in 2 slots: this script brings
it up as ``up --hardware <its own copy>``), for a whole GPU, a MIG slice
and a slot of the shared GPU, each ``--iterations`` times:

**Clean path.** Boot a server of a flavor asking for one unit, wait
ACTIVE, ``DELETE`` it, then measure from the DELETE request

* ``gone``: the Compute API answers 404 for the server;
* ``free``: Placement offers the unit again: its provider's
  ``total - reserved - used`` for the resource class is back to what it was
  before the boot (the driver verified the unit clean at release and nova's
  resource update sent ``reserved`` without it, and nova removed the
  allocation).

The simulated nvidia-smi answers with idle GPUs here, so every unit is
clean at release; the figures are the driver's and nova's own. It prints
median and p95 of both, and ``free - gone``: what the release adds after
nova's API stops showing the server (aim: 2 s or less).

**Dirty path** (left out with ``--no-dirty``). Boot a server of the kind,
wait ACTIVE, read which unit it got (the binding record
``user.nova_lxd_accel.devices`` of its container on the real daemon),
then make the simulated nvidia-smi report a leftover compute process on
that unit: a row in ``compute-apps.csv`` on the unit's GPU and, for a MIG
slice, the process under the slice's GPU/compute instance in the
``Processes`` section of ``nvidia-smi-q.txt`` (the slice's own facts
decide). The files changed are the sandbox's copy of the host, under
``data/hardware`` of the state directory, which the generated
``nvidia-smi`` reads on every call; each is replaced whole (temporary file
and rename). Then ``DELETE`` the server, wait until the API answers 404,
and check, ``release_wait + 1`` s after the DELETE (the driver's
``[lxd_accelerators]`` option as nova-compute's configuration sets it,
default 5 s), that the unit is still not allocatable (``held``; it is
polled from the 404 on, so a moment where Placement offered it counts
against). Then the process leaves (the recorded files are put back) and
it measures from that moment until Placement offers the unit again
(``leave->free``; aim: 2 s or less: the driver's re-check of dirty units
runs after ``release_recheck_interval``, doubling up to
``release_recheck_max_interval``, and runs nova's resource update once
one turns clean). It prints a second table with median and p95 of
``leave->free``, how many iterations held the unit, and what Placement
showed at the check.

Run it as root with any Python 3 (the API part re-runs itself in the
sandbox venv)::

    python3 benchmarks/bench_gpu_release.py --iterations 5 [--no-dirty]

``--keep`` leaves the sandbox on this simulated host; otherwise it is put
back on ``up --hardware h100-mig-a100-ib``. A server the bench booted is
deleted and the recorded files put back when a step fails.
"""

import argparse
import configparser
import csv
import datetime
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
import _common  # noqa: E402  (this folder, the script's own)
# the sandbox's package: standard library only
from tools.sandbox import catalogue  # noqa: E402
from tools.sandbox import daemon as daemon_module  # noqa: E402
from tools.sandbox import layout  # noqa: E402
SANDBOX_SH = os.path.join(REPO, 'tools', 'sandbox.sh')
LAYOUT = layout.Layout.from_environ()
RECORDED = os.path.join(REPO, 'tools', 'sandbox', 'hardware',
                        'h100-mig-a100-ib')
#: the A100 that LXD names only by its product id: shared in 2 slots
SHARED = '0000:85:00.0:2'
IMAGE = catalogue.IMAGE_NAME
#: kind -> (resource class, extra specs of the bench's own flavor)
KINDS = {
    'whole GPU': ('PGPU', {'resources:PGPU': '1'}),
    'MIG slice': ('CUSTOM_MIG_1G_10GB',
                  {'resources:CUSTOM_MIG_1G_10GB': '1'}),
    'shared slot': ('CUSTOM_GPU_SHARE', {'resources:CUSTOM_GPU_SHARE': '1'}),
}
#: the driver's options the dirty path depends on, and their defaults
RELEASE_OPTIONS = {'release_wait': 5.0, 'release_recheck_interval': 1.0,
                   'release_recheck_max_interval': 30.0}
#: the leftover process of the dirty path, as nvidia-smi reports it (a pid
#: above any this host hands out: the driver cannot tell whose it is)
LEFTOVER_PID = 4190000
LEFTOVER_NAME = 'bench-leftover'
LEFTOVER_MIB = 1024
#: the binding record the driver keeps in the container's config
KEY_DEVICES = 'user.nova_lxd_accel.devices'


# --- orchestration (any Python 3, stdlib only) ------------------------------

def bench_host(work):
    """A copy of the recorded host with one A100 shared."""
    host = os.path.join(work, 'h100-mig-a100-ib-shared')
    shutil.rmtree(host, ignore_errors=True)
    shutil.copytree(RECORDED, host)
    with open(os.path.join(host, 'lxd_accelerators.conf'), 'w') as f:
        f.write('shared_gpus = %s\n' % SHARED)
    return host


def percentile(values, fraction):
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))
    return ordered[index]


def release_options(path=None):
    """The dirty path's ``[lxd_accelerators]`` options nova-compute reads.

    From the sandbox's ``etc/nova/nova-compute.conf``; the driver's
    defaults where it sets none.
    """
    path = path or os.path.join(LAYOUT.etc, 'nova', 'nova-compute.conf')
    parser = configparser.RawConfigParser(strict=False)
    try:
        parser.read(path)
    except configparser.Error:
        pass
    out = dict(RELEASE_OPTIONS)
    for key in out:
        try:
            out[key] = float(parser.get('lxd_accelerators', key))
        except (configparser.Error, ValueError):
            pass
    return out


def print_clean(results, iterations):
    print('\nDELETE to unit allocatable again, sandbox on the SIMULATED '
          'host h100-mig-a100-ib (A100 %s shared), %d iterations each, '
          'nvidia-smi idle'
          % (SHARED.rsplit(':', 1)[0], iterations))
    print('%-12s %9s %9s %9s %9s %13s %13s' % (
        'unit', 'gone p50', 'gone p95', 'free p50', 'free p95',
        'free-gone p50', 'free-gone p95'))
    for kind, rows in results.items():
        gone = [r['gone'] for r in rows]
        free = [r['free'] for r in rows]
        after = [r['free'] - r['gone'] for r in rows]
        print('%-12s %8.2fs %8.2fs %8.2fs %8.2fs %12.2fs %12.2fs' % (
            kind, statistics.median(gone), percentile(gone, 0.95),
            statistics.median(free), percentile(free, 0.95),
            statistics.median(after), percentile(after, 0.95)))


def print_dirty(results, iterations, options):
    print('\nLeftover leaves -> unit allocatable again (dirty path), same '
          'host, %d iterations each; release_wait %gs, '
          'release_recheck_interval %gs (max %gs); aim: leave->free 2 s or '
          'less' % (iterations, options['release_wait'],
                    options['release_recheck_interval'],
                    options['release_recheck_max_interval']))
    print('%-12s %9s %6s %-24s %10s %10s %10s' % (
        'unit', 'gone p50', 'held', 'Placement at check',
        'leave->free', 'leave->free', 'leave->free'))
    print('%-12s %9s %6s %-24s %10s %10s %10s' % (
        '', '', '', '(last iteration)', 'p50', 'p95', 'max'))
    for kind, rows in results.items():
        gone = [r['gone'] for r in rows]
        # a unit Placement offered while the leftover was there: no figure
        after = [r['leave_to_free'] for r in rows if r['held']]
        check = rows[-1]['check']
        figures = ('%9.2fs %9.2fs %9.2fs' % (
            statistics.median(after), percentile(after, 0.95), max(after))
            if after else '%10s %10s %10s' % ('-', '-', '-'))
        print('%-12s %8.2fs %6s %-24s %s' % (
            kind, statistics.median(gone), '%d/%d' % (len(after), len(rows)),
            'free %d of %d, rsv %d' % (check['free'], check['total'],
                                       check['reserved']), figures))
    if any(not r['held'] for rows in results.values() for r in rows):
        print('NOT HELD: Placement offered the unit while the leftover was '
              'still there (see the lines above); leave->free counts only '
              'the held iterations')


def orchestrate(args):
    work = os.path.join(LAYOUT.dir, 'data', 'bench-gpu-release')
    os.makedirs(work, exist_ok=True)
    subprocess.run(['bash', SANDBOX_SH, 'up', '--hardware',
                    bench_host(work)], check=True)
    try:
        extra = ['--no-dirty'] if args.no_dirty else []
        results = _common.measure_in_venv(LAYOUT.dir, __file__,
                                          args.iterations, *extra)
    finally:
        if not args.keep:
            subprocess.run(['bash', SANDBOX_SH, 'up', '--hardware',
                            'h100-mig-a100-ib'], check=True)
    print_clean(results['clean'], args.iterations)
    if results.get('dirty'):
        print_dirty(results['dirty'], args.iterations, results['options'])
    return 0


# --- measurements (inside the sandbox venv) ---------------------------------

class Placement(object):

    def __init__(self, conn):
        self._conn = conn

    def _get(self, path):
        response = self._conn.placement.get(
            path, headers={'OpenStack-API-Version': 'placement 1.28'})
        response.raise_for_status()
        return response.json()

    def counts(self, rc):
        """{provider uuid: {total, reserved, used, free}} for class ``rc``.

        ``free`` is ``total - reserved - used``.
        """
        out = {}
        for rp in self._get('/resource_providers')['resource_providers']:
            inventories = self._get('/resource_providers/%s/inventories'
                                    % rp['uuid'])['inventories']
            if rc not in inventories:
                continue
            usages = self._get('/resource_providers/%s/usages'
                               % rp['uuid'])['usages']
            inv = inventories[rc]
            used = usages.get(rc, 0)
            out[rp['uuid']] = {
                'total': inv['total'], 'reserved': inv['reserved'],
                'used': used,
                'free': inv['total'] - inv['reserved'] - used}
        return out

    def free(self, rc):
        """{provider uuid: total - reserved - used} for class ``rc``."""
        return {uuid: c['free'] for uuid, c in self.counts(rc).items()}


def flavor_for(conn, rc, specs):
    name = 'bench.release.%s' % rc.lower()
    flavor = conn.compute.find_flavor(name)
    if flavor is None:
        flavor = conn.compute.create_flavor(name=name, ram=128, vcpus=1,
                                            disk=1, is_public=True)
        conn.compute.create_flavor_extra_specs(flavor, specs)
    return flavor


def boot(conn, image, flavor, kind, name):
    """A server of ``flavor``, ACTIVE (deleted again when it is not)."""
    server = conn.compute.create_server(
        name=name, image_id=image.id, flavor_id=flavor.id, networks='none')

    def is_active():
        status = conn.compute.get_server(server.id).status
        if status == 'ERROR':
            raise RuntimeError('%s server %s went to ERROR: %s' % (
                kind, server.id, conn.compute.get_server(server.id).fault))
        return status == 'ACTIVE'

    try:
        _common.wait(is_active)
    except Exception:
        delete_quietly(conn, server.id)
        raise
    return server


def delete_quietly(conn, server_id):
    """Delete a server the bench booted, and wait until it is gone."""
    try:
        conn.compute.delete_server(server_id, ignore_missing=True)
        _common.wait(lambda: _common.server_gone(conn, server_id))
    except Exception as exc:  # the failure being reported comes first
        print('could not delete server %s: %s' % (server_id, exc),
              file=sys.stderr)


def free_before(placement, rc, kind, index):
    before = placement.free(rc)
    if not any(before.values()):
        raise RuntimeError('no %s free before %s iteration %d: %s'
                           % (rc, kind, index, before))
    return before


def measure_kind(conn, placement, image, kind, rc, specs, iterations):
    flavor = flavor_for(conn, rc, specs)
    rows = []
    for index in range(iterations):
        before = free_before(placement, rc, kind, index)
        server = boot(conn, image, flavor, kind, 'bench-release-%d-%d' % (
            os.getpid(), index))
        started = time.monotonic()
        try:
            conn.compute.delete_server(server.id)
            gone = _common.wait(lambda: _common.server_gone(
                conn, server.id) and time.monotonic()) - started
        except Exception:
            delete_quietly(conn, server.id)
            raise
        free = _common.wait(lambda: placement.free(rc) == before and
                            time.monotonic()) - started
        rows.append({'gone': gone, 'free': free})
        print('%s %d: gone %.2fs, allocatable again %.2fs' % (
            kind, index, gone, free), file=sys.stderr)
    return rows


# --- the dirty path: a leftover process in the simulated nvidia-smi ---------

def the_daemon():
    """The daemon the sandbox came up with (its CLI, as daemon.py runs it)."""
    environ = dict(os.environ)
    environ.setdefault('LXD_DIR', '/var/lib/lxd')
    environ.setdefault('INCUS_DIR', '/var/lib/incus')
    return daemon_module.choose_backend('', LAYOUT, environ)


def bound_unit(daemon, server_id, rc):
    """The server's unit of class ``rc``: its binding record's entry.

    Read from the container's config on the real daemon (what the LXD
    proxy forwards untouched): ``{'unit', 'kind', 'pci', 'mig_uuid', ...}``.
    """
    name = 'nova-%s' % server_id
    record = daemon.query('/1.0/instances/%s' % name)
    if not record:
        raise RuntimeError('the daemon does not answer for container %s'
                           % name)
    units = json.loads((record.get('config') or {}).get(KEY_DEVICES) or
                       '[]')
    for unit in units:
        if isinstance(unit, dict) and unit.get('resource_class') == rc:
            return unit
    raise RuntimeError('no %s unit in the binding record of %s: %s'
                       % (rc, name, units))


def _pci(bus_id):
    """``00000000:07:00.0`` or ``0000:07:00.0`` -> ``0000:07:00.0``."""
    return (bus_id or '').strip().lower()[-12:]


def _csv_dicts(text):
    """The rows of an nvidia-smi CSV, keyed by stripped header names."""
    reader = csv.reader(io.StringIO(text), skipinitialspace=True)
    header = [name.strip() for name in next(reader)]
    return header, [dict(zip(header, (v.strip() for v in row)))
                    for row in reader if row]


def _q_line(indent, key, value=None):
    """A ``nvidia-smi -q`` line: the key padded as nvidia-smi pads it."""
    text = ' ' * indent + key
    return text if value is None else '%s: %s' % (text.ljust(55), value)


class Leftover(object):
    """A compute process the simulated nvidia-smi reports on one unit.

    Edits the sandbox's own copy of the host (``data/hardware``: what the
    generated ``nvidia-smi`` prints); :meth:`remove` puts the recorded
    files back, each replaced whole, so that nvidia-smi never prints half
    a file.
    """

    FILES = ('compute-apps.csv', 'nvidia-smi-q.txt')

    def __init__(self, unit, directory=None, pid=LEFTOVER_PID):
        self.unit = unit
        self.directory = directory or LAYOUT.hardware
        self.pid = pid
        self.original = {}
        for name in self.FILES:
            with open(self._path(name)) as f:
                self.original[name] = f.read()
        self.added = False

    def _path(self, name):
        return os.path.join(self.directory, name)

    def _write(self, name, text):
        path = self._path(name)
        temporary = '%s.bench-%d' % (path, os.getpid())
        with open(temporary, 'w') as f:
            f.write(text)
        os.replace(temporary, path)

    def _gpu_row(self):
        with open(self._path('query-gpu.csv')) as f:
            _header, rows = _csv_dicts(f.read())
        for row in rows:
            if _pci(row.get('pci.bus_id')) == _pci(self.unit['pci']):
                return row
        raise RuntimeError('query-gpu.csv lists no GPU %s' % self.unit['pci'])

    def compute_apps(self):
        """compute-apps.csv with the leftover's row, same columns."""
        gpu = self._gpu_row()
        text = self.original['compute-apps.csv']
        header, _rows = _csv_dicts(text)
        values = {
            'timestamp': datetime.datetime.now().strftime(
                '%Y/%m/%d %H:%M:%S.%f')[:-3],
            'gpu_name': gpu.get('name', '[N/A]'),
            'gpu_bus_id': gpu.get('pci.bus_id', self.unit['pci']),
            'gpu_serial': '[N/A]',
            'gpu_uuid': gpu.get('uuid', '[N/A]'),
            'pid': str(self.pid),
            'process_name': LEFTOVER_NAME,
        }
        row = []
        for column in header:
            key = column.split(' [')[0]
            if key in ('used_gpu_memory', 'used_memory'):
                row.append('%d MiB' % LEFTOVER_MIB)
            else:
                row.append(values.get(key, '[N/A]'))
        return text.rstrip('\n') + '\n' + ', '.join(row) + '\n'

    def _mig_place(self):
        """(GPU instance, compute instance) of the unit's MIG device."""
        from nova_lxd_accel.accel.inventory import nvidia_smi

        with open(self._path('nvidia-smi-L.txt')) as f:
            listed = nvidia_smi.parse_list(f.read())
        index = None
        for gpu in listed:
            for mig in gpu.mig_devices:
                if mig.uuid == self.unit.get('mig_uuid'):
                    index = mig.index
        slices = nvidia_smi.parse_mig_query(
            self.original['nvidia-smi-q.txt']).get(_pci(self.unit['pci']))
        facts = (slices or {}).get(index)
        if facts is None or facts.gi is None or facts.ci is None:
            raise RuntimeError(
                'nvidia-smi-q.txt has no GPU/compute instance for MIG '
                'device %s (index %s)' % (self.unit.get('mig_uuid'), index))
        return facts.gi, facts.ci

    def query(self):
        """nvidia-smi-q.txt with the leftover in the slice's instance."""
        gi, ci = self._mig_place()
        lines = self.original['nvidia-smi-q.txt'].split('\n')
        wanted = _pci(self.unit['pci'])
        start = None
        for number, line in enumerate(lines):
            if line.startswith('GPU ') and \
                    _pci(line.split()[1]) == wanted:
                start = number
                break
        if start is None:
            raise RuntimeError('nvidia-smi-q.txt has no block of GPU %s'
                               % wanted)
        # the block: the indented lines after it (blank ones inside)
        end = start + 1
        last = start
        while end < len(lines) and (not lines[end].strip() or
                                    lines[end].startswith(' ')):
            if lines[end].strip():
                last = end
            end += 1
        entries = [_q_line(8, 'GPU instance ID', gi),
                   _q_line(8, 'Compute instance ID', ci),
                   _q_line(8, 'Process ID', self.pid),
                   _q_line(12, 'Type', 'C'),
                   _q_line(12, 'Name', LEFTOVER_NAME),
                   _q_line(12, 'Used GPU Memory', '%d MiB' % LEFTOVER_MIB)]
        header = None
        for number in range(start + 1, last + 1):
            if lines[number].startswith('    Processes'):
                header = number
        if header is None:
            insert = last + 1
            entries.insert(0, _q_line(4, 'Processes'))
        else:
            # an empty list reads "Processes : None"
            lines[header] = _q_line(4, 'Processes')
            insert = header + 1
            while insert <= last and (
                    not lines[insert].strip() or
                    lines[insert].startswith('        ')):
                insert += 1
        return '\n'.join(lines[:insert] + entries + lines[insert:])

    def check(self, apps_text, query_text):
        """Raise unless the project's parsers read the leftover back."""
        from nova_lxd_accel.accel.inventory import compute_apps
        from nova_lxd_accel.accel.inventory import nvidia_smi

        pci = _pci(self.unit['pci'])
        pids = [a.pid for a in compute_apps.parse(
            apps_text).get(pci, ())]
        if self.pid not in pids:
            raise RuntimeError('compute-apps.csv: the leftover is not read '
                               'back on GPU %s' % pci)
        if self.unit.get('kind') == 'mig':
            gi, ci = self._mig_place()
            found = [m for m in nvidia_smi.parse_mig_query(
                query_text).get(pci, {}).values()
                if (m.gi, m.ci) == (gi, ci) and
                self.pid in [a.pid for a in m.apps]]
            if not found:
                raise RuntimeError('nvidia-smi-q.txt: the leftover is not '
                                   'read back in MIG device %s'
                                   % self.unit.get('mig_uuid'))

    def add(self):
        apps = self.compute_apps()
        query = self.original['nvidia-smi-q.txt']
        if self.unit.get('kind') == 'mig':
            query = self.query()
        self.check(apps, query)
        self.added = True
        if query != self.original['nvidia-smi-q.txt']:
            self._write('nvidia-smi-q.txt', query)
        self._write('compute-apps.csv', apps)

    def remove(self):
        """Put the recorded files back; the time the last one was back."""
        for name in self.FILES:
            self._write(name, self.original[name])
        self.added = False
        return time.monotonic()


def _matches(counts, before):
    return {uuid: c['free'] for uuid, c in counts.items()} == before


def measure_dirty_kind(conn, placement, daemon, image, kind, rc, specs,
                       iterations, options):
    flavor = flavor_for(conn, rc, specs)
    rows = []
    for index in range(iterations):
        before = free_before(placement, rc, kind, index)
        server = boot(conn, image, flavor, kind, 'bench-release-dirty-%d-%d'
                      % (os.getpid(), index))
        leftover = None
        try:
            unit = bound_unit(daemon, server.id, rc)
            leftover = Leftover(unit)
            leftover.add()
            started = time.monotonic()
            conn.compute.delete_server(server.id)
            gone_at = _common.wait(lambda: _common.server_gone(
                conn, server.id) and time.monotonic())
            # held: not allocatable from the 404 to release_wait + 1 s
            # after the DELETE (polled: one poll that finds it free is a
            # leak)
            check_at = max(started + options['release_wait'] + 1.0,
                           gone_at + 1.0)
            seen_free = 0
            polls = 0
            while True:
                counts = placement.counts(rc)
                polls += 1
                if _matches(counts, before):
                    seen_free += 1
                if time.monotonic() >= check_at:
                    break
                time.sleep(0.2)
            checked = time.monotonic() - started
            provider = min(counts, key=lambda p: (
                counts[p]['free'] - before.get(p, 0), p))
            check = dict(counts[provider])
            held = not seen_free
        except Exception:
            if leftover is not None:
                leftover.remove()
            delete_quietly(conn, server.id)
            raise
        left_at = leftover.remove()
        left_clock = datetime.datetime.now().strftime('%H:%M:%S.%f')[:-3]
        free_at = _common.wait(lambda: placement.free(rc) == before and
                               time.monotonic())
        row = {'gone': gone_at - started, 'held': held,
               'seen_free_polls': seen_free, 'polls': polls,
               'checked': checked, 'check': check,
               'unit': unit.get('unit'), 'pci': unit.get('pci'),
               'left_clock': left_clock,
               'leave_to_free': free_at - left_at,
               'delete_to_free': free_at - started}
        rows.append(row)
        print('%s %d (dirty, %s): gone %.2fs; %.2fs after DELETE %s '
              '(Placement: total %d, reserved %d, used %d, free %d; '
              'allocatable in %d of %d polls since the 404); leftover '
              'left at %s -> allocatable again %.2fs' % (
                  kind, index, unit.get('unit'), row['gone'], checked,
                  'STILL RESERVED' if held else 'NOT HELD',
                  check['total'], check['reserved'], check['used'],
                  check['free'], seen_free, polls, left_clock,
                  row['leave_to_free']),
              file=sys.stderr)
    return rows


def measure(args):
    conn = _common.connect(LAYOUT.dir)
    placement = Placement(conn)
    image = conn.image.find_image(IMAGE, ignore_missing=False)
    results = {'clean': {}, 'dirty': {}, 'options': release_options()}
    for kind, (rc, specs) in KINDS.items():
        results['clean'][kind] = measure_kind(conn, placement, image, kind,
                                              rc, specs, args.iterations)
    if not args.no_dirty:
        daemon = the_daemon()
        for kind, (rc, specs) in KINDS.items():
            results['dirty'][kind] = measure_dirty_kind(
                conn, placement, daemon, image, kind, rc, specs,
                args.iterations, results['options'])
    for kind, (rc, _specs) in KINDS.items():
        flavor = conn.compute.find_flavor('bench.release.%s' % rc.lower())
        if flavor is not None:
            conn.compute.delete_flavor(flavor)
    print(json.dumps(results))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--iterations', type=int, default=5,
                        help='servers per unit kind and path (default 5)')
    parser.add_argument('--no-dirty', action='store_true',
                        help='measure the clean path only (no leftover '
                        'process)')
    parser.add_argument('--keep', action='store_true',
                        help='leave the sandbox on the bench\'s host')
    return _common.orchestrate_or_measure(parser, argv, orchestrate, measure)


if __name__ == '__main__':
    sys.exit(main())
