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

"""Benchmark the sandbox cloud: time to ready, memory, boot/delete latency.

One run prints:

* the time ``tools/sandbox.sh up`` took, from the starting point chosen
  with ``--from`` (``running``: re-run ``up`` on a sandbox that may already
  run; ``state``: no state, venv kept; ``nothing``: no state and no venv,
  packages from pip's cache or PyPI);
* the memory (PSS and RSS) of every sandbox service and of the LXD daemon;
* server ACTIVE and delete latency through the Compute API (polled every
  50 ms with openstacksdk, no CLI sleeps), next to the raw LXD create+start
  and stop+delete of the same image through pylxd;
* snapshot latency (``createImage`` -> image ``active`` in Glance: LXD
  publish and export, then Nova's chunked upload to Glance).

Run it as root with any Python 3: the API part re-runs itself inside the
sandbox venv. Example::

    python3 benchmarks/bench_sandbox.py --from state --iterations 5
"""

import argparse
import functools
import hashlib
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
from tools.sandbox import layout  # noqa: E402
from tools.sandbox import memory  # noqa: E402
from tools.sandbox import services  # noqa: E402
SANDBOX_SH = os.path.join(REPO, 'tools', 'sandbox.sh')
LAYOUT = layout.Layout.from_environ()
SANDBOX_DIR = LAYOUT.dir
# the cloud's services, and the fake nova-compute that "bench" adds
SERVICES = tuple(service.name for service in services.SERVICES) + (
    'nova-compute-fake',)
HELPERS_ROW = 'helpers (privsep daemons, dnsmasq, haproxy)'
IMAGE = catalogue.IMAGE_NAME
FLAVOR = catalogue.PLAIN_FLAVOR


# --- orchestration (any Python 3, stdlib only) ------------------------------

def memory_report():
    """The memory of the cloud's processes and of the LXD daemon.

    :returns: ``(rows, lxd)``: ``(name, Usage)`` of each service's process
        tree and of the helpers that left them; the LXD daemon's Usage
        (``pss_kib``, ``rss_kib``; see tools/sandbox/memory.py).
    """
    rows, helpers, lxd = memory.report(SANDBOX_DIR, SERVICES)
    return rows + [(HELPERS_ROW, helpers)], lxd


def sum_usage(rows):
    return memory.Usage(sum(usage.pss_kib for _name, usage in rows),
                        sum(usage.rss_kib for _name, usage in rows))


def time_up(start_from):
    if start_from in ('state', 'nothing'):
        subprocess.run(['bash', SANDBOX_SH, 'clean'], check=True,
                       stdout=subprocess.DEVNULL)
    if start_from == 'nothing':
        shutil.rmtree(os.path.join(SANDBOX_DIR, 'venv'), ignore_errors=True)
    started = time.monotonic()
    subprocess.run(['bash', SANDBOX_SH, 'up'], check=True)
    return time.monotonic() - started


def orchestrate(args):
    label = {
        'running': 'up, re-run (services may already run)',
        'state': 'up from empty state, venv kept (packages cached)',
        'nothing': 'up from nothing (no state, no venv; pip cache as is)',
    }[args.start_from]
    up_s = time_up(args.start_from)
    rows, lxd = memory_report()
    latency = _common.measure_in_venv(SANDBOX_DIR, __file__, args.iterations)

    print()
    print('nova-lxd-accel sandbox benchmark (%d CPUs, %s)' % (
        os.cpu_count(), time.strftime('%Y-%m-%d %H:%M:%S')))
    print('=' * 64)
    print('%-52s %9.1f s' % (label, up_s))
    print()
    print('memory, MiB (process trees; PSS adds up, RSS counts shared pages '
          'in each process)')
    print('  %-50s %7s %7s' % ('', 'PSS', 'RSS'))
    for name, usage in rows + [
            ('whole cloud (all of the above)', sum_usage(rows)),
            ('LXD daemon (not counted above)', lxd)]:
        print('  %-50s %7.0f %7.0f' % (name, usage.pss_kib / 1024.0,
                                       usage.rss_kib / 1024.0))
    print()
    print('latency over %d runs (median / min / max, seconds)' %
          args.iterations)
    for key, title in (
            ('api_active', 'API: create -> ACTIVE'),
            ('api_delete', 'API: delete -> gone'),
            ('lxd_create_start', 'raw LXD: create + start'),
            ('lxd_stop_delete', 'raw LXD: stop + delete'),
            ('api_snapshot', 'API: snapshot -> image active')):
        values = latency[key]
        print('  %-40s %6.2f / %5.2f / %5.2f' % (
            title, statistics.median(values), min(values), max(values)))
    overhead = (statistics.median(latency['api_active']) -
                statistics.median(latency['lxd_create_start']))
    print('  %-40s %6.2f' % ('API overhead on boot (median)', overhead))
    return 0


# --- measurements (inside the sandbox venv) ---------------------------------

_wait = functools.partial(_common.wait, timeout=120.0)


def measure_api(conn, iterations):
    image = conn.image.find_image(IMAGE, ignore_missing=False)
    flavor = conn.compute.find_flavor(FLAVOR, ignore_missing=False)
    active, deleted = [], []
    for index in range(iterations):
        started = time.monotonic()
        server = conn.compute.create_server(
            name='bench-%d-%d' % (os.getpid(), index), image_id=image.id,
            flavor_id=flavor.id, networks='none')

        def is_active():
            status = conn.compute.get_server(server.id).status
            if status == 'ERROR':
                raise RuntimeError('server %s went to ERROR' % server.id)
            return status == 'ACTIVE'

        _wait(is_active)
        active.append(time.monotonic() - started)
        started = time.monotonic()
        conn.compute.delete_server(server.id)
        _wait(lambda: _common.server_gone(conn, server.id))
        deleted.append(time.monotonic() - started)
    return active, deleted


def measure_snapshot(conn, iterations):
    """Seconds from createImage to an active image, per snapshot."""
    image = conn.image.find_image(IMAGE, ignore_missing=False)
    flavor = conn.compute.find_flavor(FLAVOR, ignore_missing=False)
    server = conn.compute.create_server(
        name='bench-snap-%d' % os.getpid(), image_id=image.id,
        flavor_id=flavor.id, networks='none')
    took = []
    try:
        _wait(lambda: conn.compute.get_server(server.id).status == 'ACTIVE')
        for index in range(iterations):
            started = time.monotonic()
            snap = conn.compute.create_server_image(
                server.id, 'bench-snap-%d-%d' % (os.getpid(), index))

            def is_active():
                status = conn.image.get_image(snap.id).status
                if status in ('killed', 'deleted'):
                    raise RuntimeError(
                        'snapshot %s is %s' % (snap.id, status))
                return status == 'active'

            _wait(is_active)
            took.append(time.monotonic() - started)
            # The next snapshot waits for the server's task to clear.
            _wait(lambda: conn.compute.get_server(server.id).task_state
                  is None)
            conn.image.delete_image(snap.id)
    finally:
        conn.compute.delete_server(server.id)
        _wait(lambda: _common.server_gone(conn, server.id))
    return took


def measure_raw_lxd(iterations):
    import pylxd

    client = pylxd.Client()
    tarball = os.path.join(SANDBOX_DIR, 'data', 'images', IMAGE + '.tar.gz')
    with open(tarball, 'rb') as handle:
        data = handle.read()
    # A unified image's fingerprint is the tarball's sha256: the image the
    # driver imported for its servers is the very one measured here.
    fingerprint = hashlib.sha256(data).hexdigest()
    if not client.images.exists(fingerprint):
        client.images.create(data, wait=True)
    source = {'type': 'image', 'fingerprint': fingerprint}
    create_start, stop_delete = [], []
    for index in range(iterations):
        name = 'bench-raw-%d-%d' % (os.getpid(), index)
        started = time.monotonic()
        container = client.instances.create(
            {'name': name, 'source': source},
            wait=True)
        container.start(wait=True)
        create_start.append(time.monotonic() - started)
        started = time.monotonic()
        container.stop(wait=True)
        container.delete(wait=True)
        stop_delete.append(time.monotonic() - started)
    return create_start, stop_delete


def measure(args):
    conn = _common.connect(SANDBOX_DIR)
    api_active, api_delete = measure_api(conn, args.iterations)
    lxd_create_start, lxd_stop_delete = measure_raw_lxd(args.iterations)
    api_snapshot = measure_snapshot(conn, args.iterations)
    json.dump({'api_active': api_active, 'api_delete': api_delete,
               'api_snapshot': api_snapshot,
               'lxd_create_start': lxd_create_start,
               'lxd_stop_delete': lxd_stop_delete}, sys.stdout)
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--from', dest='start_from', default='running',
                        choices=('running', 'state', 'nothing'),
                        help='starting point of the timed "up" (default: '
                             'running, which reuses a running sandbox)')
    parser.add_argument('--iterations', type=int, default=3)
    return _common.orchestrate_or_measure(parser, argv, orchestrate, measure)


if __name__ == '__main__':
    sys.exit(main())
