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

"""Density: N servers in waves, on this driver and on Nova's fake driver.

Run by ``tools/sandbox.sh bench --density N [--wave W]`` inside the
sandbox venv (the fake driver's nova-compute runs for the duration, as for
``bench N``). In one run, for the same image and flavor, with no network:

* on the LXD driver's host, then on the fake driver's host (targeted with
  ``availability_zone=nova:<host>``), waves of W servers created at once
  until N are on the host: per wave the wall time until all are ACTIVE,
  create -> ACTIVE p50 and p95, and from nova-compute's log where a boot's
  time went: "build" (the compute manager's whole build: the resource
  tracker's claim under its lock, the network, the spawn) and "spawn" (the
  virt driver's ``spawn``); the rest of create -> ACTIVE is the API, the
  conductor, the scheduler and Placement. Placement's requests per boot are
  counted in its request log, ``GET /allocations/{consumer}`` apart;
* at checkpoints (empty, every ``--checkpoint`` servers, full): over
  ``--idle`` seconds with nothing happening, the CPU time of nova-compute
  and of the daemon, their RSS, and the daemon's list of all instances;
* full: the memory of a container of the driver (its cgroup, as the daemon
  reports it) against raw launches of the same image;
* then every server deleted in waves of W: delete -> gone p50 and p95;
* with ``--spread-host`` (``tools/sandbox.sh up --hosts 2``), a third run
  sends each wave's servers to both of this driver's hosts in turn.

The bench lifts the project's quotas and raises the allocation ratios of
VCPU, MEMORY_MB and DISK_GB on both hosts' providers as far as N servers
need, and puts them back afterwards (also when it fails). Results, as
JSON, in ``$SANDBOX_DIR/data/bench-density.json``.
"""

import argparse
import datetime
import json
import math
import os
import re
import statistics
import sys
import time

import openstack
import pylxd

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
import _common  # noqa: E402
import bench_sandbox_fleet as fleet  # noqa: E402  (its ACTIVE poll)
from tools.sandbox import layout as layout_module  # noqa: E402
from tools.sandbox import memory  # noqa: E402
from tools.sandbox import processes  # noqa: E402

PREFIX = 'density-'
#: the resource classes a server of the flavor takes, and its field
FLAVOR_FIELDS = (('VCPU', 'vcpus'), ('MEMORY_MB', 'ram'), ('DISK_GB', 'disk'))
#: nova-compute's INFO lines of a boot: the resource tracker's claim done,
#: the spawn's and the whole build's durations
_BOOT_LINE = re.compile(
    r'^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) .*\[instance: '
    r'([0-9a-f-]{36})\] (?:(Claim successful)|Took ([0-9.]+) seconds to '
    r'(spawn|build))', re.M)


def percentile(values, fraction):
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def median(values):
    return statistics.median(values) if values else None


class LogTail(object):
    """What a log file gained since the last read."""

    def __init__(self, path):
        self.path = path
        self.offset = os.path.getsize(path) if os.path.exists(path) else 0

    def read(self):
        if not os.path.exists(self.path):
            return ''
        with open(self.path, errors='replace') as handle:
            handle.seek(self.offset)
            text = handle.read()
            self.offset = handle.tell()
        return text


# --- the cloud's limits, raised for the bench and put back ----------------

class Limits(object):
    """Quotas and allocation ratios for N servers, restored on exit."""

    def __init__(self, conn, providers, flavor, count, say):
        self.conn, self.providers, self.say = conn, providers, say
        self.flavor, self.count = flavor, count
        self.saved_quotas = None
        self.saved_ratios = []

    def _inventories(self, provider):
        body = self.conn.placement.get(
            '/resource_providers/%s/inventories' % provider).json()
        return body['resource_provider_generation'], body['inventories']

    def _set_ratio(self, provider, resource_class, ratio):
        for _attempt in range(5):
            generation, inventories = self._inventories(provider)
            record = dict(inventories[resource_class],
                          allocation_ratio=ratio,
                          resource_provider_generation=generation)
            answer = self.conn.placement.put(
                '/resource_providers/%s/inventories/%s'
                % (provider, resource_class), json=record,
                raise_exc=False)
            if answer.status_code == 200:
                return
            if answer.status_code != 409:
                raise RuntimeError('Placement refused the ratio of %s: %s'
                                   % (resource_class, answer.text))
        raise RuntimeError('Placement: the provider %s kept changing'
                           % provider)

    def __enter__(self):
        project = self.conn.current_project_id
        quotas = self.conn.get_compute_quotas(project)
        self.saved_quotas = {key: quotas[key]
                             for key in ('instances', 'cores', 'ram')}
        self.conn.set_compute_quotas(project, instances=-1, cores=-1,
                                     ram=-1)
        raised = []
        for provider in self.providers:
            _generation, inventories = self._inventories(provider)
            for resource_class, field in FLAVOR_FIELDS:
                record = inventories.get(resource_class)
                if record is None:
                    continue
                usable = record['total'] - record['reserved']
                needed = self.count * getattr(self.flavor, field)
                # room for N servers and what the host holds already, with
                # a margin
                ratio = max(record['allocation_ratio'],
                            math.ceil(1.2 * needed / max(usable, 1)))
                if ratio != record['allocation_ratio']:
                    self.saved_ratios.append(
                        (provider, resource_class,
                         record['allocation_ratio']))
                    self._set_ratio(provider, resource_class, ratio)
                    raised.append('%s %s -> %s' % (
                        resource_class, record['allocation_ratio'], ratio))
        self.say('limits: quotas lifted, allocation ratios raised: %s'
                 % (', '.join(raised) or 'none needed'))
        return self

    def __exit__(self, *exc_info):
        for provider, resource_class, ratio in self.saved_ratios:
            try:
                self._set_ratio(provider, resource_class, ratio)
            except Exception as error:  # keep restoring the others
                self.say('could not restore the ratio of %s on %s: %s'
                         % (resource_class, provider, error))
        if self.saved_quotas is not None:
            self.conn.set_compute_quotas(self.conn.current_project_id,
                                         **self.saved_quotas)
        self.say('limits: quotas and allocation ratios restored')


# --- measurements ----------------------------------------------------------

def _cpu_seconds(pids):
    ticks = os.sysconf('SC_CLK_TCK')
    total = 0
    for pid in pids:
        try:
            with open('/proc/%d/stat' % pid) as handle:
                fields = handle.read().rsplit(')', 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def _trees(table, roots):
    """The pids of the processes under each root (the root included)."""
    return [pid for pid in table if memory.owner(pid, roots, table)]


def checkpoint(layout, service, servers, idle, say):
    """Idle CPU and RSS of nova-compute and the daemon; the daemon's list.

    The daemon is every ``lxd``/``incusd`` process (a peer daemon of the
    migration tests, idle, counts too).
    """
    table = memory.process_table()
    compute = processes.pid_of(layout, service)
    compute_tree = _trees(table, {compute}) if compute else []
    every = [pid for pid, process in table.items()
             if process.comm in ('lxd', 'incusd')]
    # the daemons themselves, and the monitor liblxc keeps per running
    # container (its command line says "[lxc monitor]")
    monitors = [pid for pid in every
                if memory.cmdline(pid).startswith('[lxc monitor]')]
    daemons = [pid for pid in every if pid not in monitors]
    before = (_cpu_seconds(compute_tree), _cpu_seconds(daemons))
    time.sleep(idle)
    after = (_cpu_seconds(compute_tree), _cpu_seconds(daemons))
    client = pylxd.Client()
    t0 = time.monotonic()
    listed = len(client.instances.all())
    list_s = time.monotonic() - t0
    table = memory.process_table()

    def mib(pids, field):
        return sum(getattr(table[pid], field) for pid in pids
                   if pid in table) / 1024

    row = {
        'servers': servers, 'idle_s': idle,
        'compute_cpu_s': after[0] - before[0],
        'daemon_cpu_s': after[1] - before[1],
        'compute_rss_mib': mib(compute_tree, 'rss_kib'),
        'daemon_rss_mib': mib(daemons, 'rss_kib'),
        'monitors_pss_mib': mib(monitors, 'pss_kib'),
        'monitors': len(monitors),
        'daemon_instances': listed, 'daemon_list_s': list_s,
    }
    say('  checkpoint at %(servers)d servers: idle %(idle_s)ds: nova-compute '
        'CPU %(compute_cpu_s).2fs RSS %(compute_rss_mib).0f MiB; daemon CPU '
        '%(daemon_cpu_s).2fs RSS %(daemon_rss_mib).0f MiB (and '
        '%(monitors)d container monitors, PSS %(monitors_pss_mib).0f MiB); '
        'list of %(daemon_instances)d instances %(daemon_list_s).3fs' % row)
    return row


def boot_wave(conn, hosts, image, flavor, first, size, timeout, created):
    """Create ``size`` servers at once; wait until all are ACTIVE.

    :param hosts: the host each server is sent to, in turn (one host, or
        several to spread a wave over them).
    :param created: each server's id is added as soon as it exists, so
        that a wave that fails is deleted with the rest.
    """
    started = {}
    wall0 = time.monotonic()
    for index in range(first, first + size):
        host = hosts[index % len(hosts)]
        t0 = time.monotonic()
        server = conn.compute.create_server(
            name='%s%s-%d' % (PREFIX, host, index), image_id=image.id,
            flavor_id=flavor.id, networks='none',
            availability_zone='nova:%s' % host)
        started[server.id] = t0
        created.append(server.id)
    done = fleet._active_times(conn, started, timeout=timeout,
                               interval=0.2)
    return done, time.monotonic() - wall0


def delete_wave(conn, ids, timeout):
    started = {}
    for server_id in ids:
        started[server_id] = time.monotonic()
        conn.compute.delete_server(server_id)
    gone = {}

    def all_gone():
        for server_id, t0 in started.items():
            if server_id not in gone and _common.server_gone(conn,
                                                             server_id):
                gone[server_id] = time.monotonic() - t0
        return len(gone) == len(started)

    _common.wait(all_gone, timeout=timeout, interval=0.2)
    return list(gone.values())


def _log_time(stamp):
    return datetime.datetime.strptime(stamp, '%Y-%m-%d %H:%M:%S.%f')


def boot_phases(compute_log_text, ids):
    """{instance: {'build', 'spawn', 'claim'}} seconds, from its log.

    ``build`` is the compute manager's whole build, ``spawn`` the virt
    driver's, ``claim`` from the build's start to the resource tracker's
    "Claim successful": nova logs it under the tracker's lock before the
    tracker's own update, so it is the wait for the lock, which the other
    boots' updates hold. An instance without all three lines is left out.
    """
    seen = {}
    for match in _BOOT_LINE.finditer(compute_log_text):
        stamp, instance, claimed, took, what = match.groups()
        if instance not in ids:
            continue
        record = seen.setdefault(instance, {})
        if claimed:
            record['claimed_at'] = _log_time(stamp)
        else:
            record[what] = float(took)
            if what == 'build':
                record['built_at'] = _log_time(stamp)
    phases = {}
    for instance, record in seen.items():
        if {'claimed_at', 'built_at', 'build', 'spawn'} <= set(record):
            started = record['built_at'] - datetime.timedelta(
                seconds=record['build'])
            phases[instance] = {
                'build': record['build'], 'spawn': record['spawn'],
                'claim': (record['claimed_at'] - started).total_seconds()}
    return phases


def attribution(compute_log_text, placement_log_text, ids):
    """(:func:`boot_phases`, Placement requests, GET /allocations)."""
    phases = boot_phases(compute_log_text, ids)
    # one placement.requestlog line per request (the WSGI server logs
    # each one again)
    logged = [line for line in placement_log_text.splitlines()
              if 'placement.requestlog' in line]
    requests = len(logged)
    allocations = sum(1 for line in logged
                      if re.search(r'"GET /allocations/[0-9a-f-]{36}', line))
    return phases, requests, allocations


def split(times, phases):
    """Medians of where a boot's time went, over the servers of a wave.

    :param times: ``{id: create -> ACTIVE seconds}``.
    :returns: ``before`` (the API, the conductor, the scheduler with its
        Placement requests, the queue for nova-compute's build slots),
        ``claim`` (waiting for the resource tracker's lock), ``spawn``
        (the driver), ``other`` (the rest of the build: the tracker's own
        update after the claim, with its Placement reads, the network,
        block devices) and ``build``, each a median in seconds (None
        without data).
    """
    parts = {'before': [], 'claim': [], 'spawn': [], 'other': [],
             'build': []}
    for server_id, phase in phases.items():
        if server_id in times:
            parts['before'].append(max(0.0, times[server_id] -
                                       phase['build']))
        parts['claim'].append(phase['claim'])
        parts['spawn'].append(phase['spawn'])
        parts['build'].append(phase['build'])
        parts['other'].append(max(0.0, phase['build'] - phase['claim'] -
                                  phase['spawn']))
    return {name: median(values) for name, values in parts.items()}


def run_host(conn, layout, hosts, services, image, flavor, args, say):
    """N servers in waves on one host, or spread over several in turn.

    With several hosts the checkpoints measure the first host's
    nova-compute (and every daemon), and a boot's phases come from every
    host's nova-compute log.
    """
    compute_logs = [LogTail(layout.path('log', service + '.log'))
                    for service in services]
    placement_log = LogTail(layout.path('log', 'placement.log'))
    host, service = '+'.join(hosts), services[0]
    result = {'host': host, 'waves': [], 'checkpoints': []}
    ids = []
    active = []  # create -> ACTIVE of every server, for the whole run
    say('%s (%s): %d servers in waves of %d'
        % (host, ', '.join(services), args.count, args.wave))
    result['checkpoints'].append(checkpoint(layout, service, 0, args.idle,
                                            say))
    next_checkpoint = args.checkpoint
    try:
        while len(ids) < args.count:
            size = min(args.wave, args.count - len(ids))
            [log.read() for log in compute_logs], placement_log.read()
            times, wall = boot_wave(conn, hosts, image, flavor, len(ids),
                                    size, args.timeout, ids)
            active += list(times.values())
            time.sleep(1)  # the last "Took ... to build" lines
            phases, requests, allocations = attribution(
                ''.join(log.read() for log in compute_logs),
                placement_log.read(), set(times))
            where = split(times, phases)
            wave = {
                'servers': len(ids), 'wall_s': wall,
                'active_p50': median(list(times.values())),
                'active_p95': percentile(list(times.values()), 0.95),
                'build_p50': where['build'], 'spawn_p50': where['spawn'],
                'before_build_p50': where['before'],
                'claim_p50': where['claim'], 'other_p50': where['other'],
                'placement_per_boot': requests / size,
                'get_allocations_per_boot': allocations / size,
            }
            result['waves'].append(wave)
            say('  wave to %(servers)4d: wall %(wall_s)6.1fs  ACTIVE p50 '
                '%(active_p50)5.1fs p95 %(active_p95)5.1fs  p50s: before '
                'the build %(before)s, build %(build)s = claim %(claim)s + '
                'spawn %(spawn)s + other %(other)s  Placement/boot '
                '%(placement_per_boot).0f (GET /allocations '
                '%(get_allocations_per_boot).0f)' % dict(
                    wave, **{name: _fmt(value)
                             for name, value in where.items()}))
            if len(ids) >= next_checkpoint or len(ids) == args.count:
                result['checkpoints'].append(checkpoint(
                    layout, service, len(ids), args.idle, say))
                while next_checkpoint <= len(ids):
                    next_checkpoint += args.checkpoint
        waves = result['waves']
        result['active'] = {
            'p50': median(active), 'p95': percentile(active, 0.95),
            'servers_per_s': len(active) / sum(w['wall_s'] for w in waves),
            'first_wave_per_s': waves[0]['servers'] / waves[0]['wall_s'],
            'last_wave_per_s': (waves[-1]['servers'] - (
                waves[-2]['servers'] if len(waves) > 1 else 0)) /
            waves[-1]['wall_s']}
        say('  all %d: create -> ACTIVE p50 %.1fs p95 %.1fs; %.2f servers/s '
            'overall, %.2f in the first wave, %.2f in the last'
            % (len(active), result['active']['p50'],
               result['active']['p95'], result['active']['servers_per_s'],
               result['active']['first_wave_per_s'],
               result['active']['last_wave_per_s']))
        if services == ['nova-compute']:
            result['memory'] = container_memory(ids, say)
    finally:
        deletes = []
        t0 = time.monotonic()
        for start in range(0, len(ids), args.wave):
            deletes += delete_wave(conn, ids[start:start + args.wave],
                                   args.timeout)
        result['delete'] = {
            'servers': len(deletes), 'wall_s': time.monotonic() - t0,
            'p50': median(deletes), 'p95': percentile(deletes, 0.95)}
        if deletes:
            say('  deleted %(servers)d in %(wall_s).0fs: p50 %(p50).1fs '
                'p95 %(p95).1fs' % result['delete'])
    return result


def _fmt(value):
    return '-' if value is None else '%.1fs' % value


def container_memory(ids, say, samples=10):
    """A driver container's memory against raw launches of its image.

    The driver names a container after its instance's uuid; its memory is
    its cgroup's, as the daemon reports it.
    """
    client = pylxd.Client()
    wanted = set(ids[:samples])
    ours = [instance for instance in client.instances.all()
            if instance.name[-36:] in wanted]
    driver_usage = [instance.state().memory['usage'] for instance in ours]
    image = ours[0].config.get('volatile.base_image') if ours else None
    raw_usage, launched = [], []
    try:
        for index in range(samples if image else 0):
            container = client.instances.create(
                {'name': 'density-raw-%d-%d' % (os.getpid(), index),
                 'source': {'type': 'image', 'fingerprint': image}},
                wait=True)
            launched.append(container)
            container.start(wait=True)
        time.sleep(5)
        raw_usage = [c.state().memory['usage'] for c in launched]
    finally:
        for container in launched:
            container.stop(wait=True, force=True)
            container.delete(wait=True)
    row = {'driver_container_mib': (median(driver_usage) or 0) / 2 ** 20,
           'raw_container_mib': (median(raw_usage) or 0) / 2 ** 20,
           'samples': len(driver_usage)}
    say('  memory of a container (median of %(samples)d, its cgroup): '
        'driver %(driver_container_mib).2f MiB, raw launch '
        '%(raw_container_mib).2f MiB' % row)
    return row


def print_table(results, say):
    say('\ndensity bench: create -> ACTIVE by wave, and where a boot\'s '
        'time went (p50s, s): before the build (API, conductor, scheduler, '
        'queue), the wait for the resource tracker\'s lock, the driver\'s '
        'spawn')
    head = 'wall   p50   p95 before claim spawn'
    names = ['LXD driver', 'fake driver', 'LXD, 2 hosts'][:len(results)]
    say('%8s | %s' % ('servers', ' | '.join(
        '%-49s' % ('%s: %s' % (name, head)) for name in names)))
    for index, wave in enumerate(results[0]['waves']):
        others = [result['waves'][index] if index < len(result['waves'])
                  else {} for result in results[1:]]
        say('%8d | %s' % (wave['servers'], ' | '.join(
            '%49s' % _row(row) for row in [wave] + others)))
    for name, result in zip(names, results):
        delete = result.get('delete') or {}
        if delete.get('servers'):
            say('delete, %s: %d servers in %.0fs, p50 %.1fs p95 %.1fs'
                % (name, delete['servers'], delete['wall_s'],
                   delete['p50'], delete['p95']))


def _row(wave):
    if not wave:
        return '-'
    return '%6.1f %5.1f %5.1f %6s %5s %5s' % (
        wave['wall_s'], wave['active_p50'], wave['active_p95'],
        _fmt(wave.get('before_build_p50')), _fmt(wave.get('claim_p50')),
        _fmt(wave['spawn_p50']))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--count', type=int, default=50)
    parser.add_argument('--wave', type=int, default=25)
    parser.add_argument('--checkpoint', type=int, default=100)
    parser.add_argument('--idle', type=int, default=30)
    parser.add_argument('--timeout', type=float, default=1200)
    parser.add_argument('--lxd-host', required=True)
    parser.add_argument('--fake-host', required=True)
    parser.add_argument('--spread-host', default='',
                        help='a second host of this driver (nova-compute-2,'
                             ' tools/sandbox.sh up --hosts 2): a third run '
                             'spreads each wave over both hosts')
    parser.add_argument('--image', default='lxd-tiny')
    parser.add_argument('--fake-image', default='lxd-tiny-any-hypervisor')
    parser.add_argument('--flavor', default='sandbox.small')
    args = parser.parse_args(argv)

    def say(text):
        print(text, flush=True)

    layout = layout_module.Layout.from_environ()
    conn = openstack.connect(cloud='sandbox')
    flavor = conn.compute.find_flavor(args.flavor, ignore_missing=False)
    images = (conn.image.find_image(args.image, ignore_missing=False),
              conn.image.find_image(args.fake_image, ignore_missing=False))
    nodes = {hypervisor.service_details['host']: hypervisor.name
             for hypervisor in conn.compute.hypervisors(details=True)}
    providers = []
    for host in (args.lxd_host, args.fake_host, args.spread_host):
        if not host:
            continue
        found = conn.placement.get('/resource_providers?name=%s'
                                   % nodes[host]).json()
        providers += [rp['uuid'] for rp in found['resource_providers']]
    results = []
    with Limits(conn, providers, flavor, args.count, say):
        runs = [([args.lxd_host], ['nova-compute'], images[0]),
                ([args.fake_host], ['nova-compute-fake'], images[1])]
        if args.spread_host:
            runs.append(([args.lxd_host, args.spread_host],
                         ['nova-compute', 'nova-compute-2'], images[0]))
        for hosts, services, image in runs:
            results.append(run_host(conn, layout, hosts, services, image,
                                    flavor, args, say))
    print_table(results, say)
    path = layout.path('data', 'bench-density.json')
    with open(path, 'w') as handle:
        json.dump({'count': args.count, 'wave': args.wave,
                   'flavor': args.flavor, 'lxd': results[0],
                   'fake': results[1],
                   'spread': results[2] if args.spread_host else None},
                  handle, indent=1)
    say('results: %s' % path)
    return 0


if __name__ == '__main__':
    sys.exit(main())
