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

"""N servers through the sandbox's API: this driver, Nova's fake, raw LXD.

Run by ``tools/sandbox.sh bench [N]`` (which starts a second nova-compute
running Nova's own ``fake.FakeDriver`` for the duration), inside the
sandbox venv. In one run, for the same image and flavor, with no network
(``networks=none``: Neutron is left out of both):

* N servers one after another on the LXD driver's host, then on the fake
  driver's host (targeted with ``availability_zone=nova:<host>``):
  create -> ACTIVE of each, polled every 50 ms;
* N servers created at once on each host: each one's create -> ACTIVE and
  the wall time until all are ACTIVE;
* N raw LXD create+start of the same image through pylxd (``lxc launch``),
  one after another and at once (threads);

and prints the medians, the wall times, and the ratio
``(LXD driver - fake driver) / raw launch``: how much the driver adds to
what LXD itself takes, with Nova's own cost (API, scheduler, conductor,
Placement, the compute manager) subtracted. Then the resident memory of
the whole cloud.
"""

import argparse
import concurrent.futures
import hashlib
import os
import statistics
import sys
import time

import openstack
import pylxd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402
import bench_sandbox  # noqa: E402  (the memory report)


def _boot(conn, host, image, flavor, name):
    return conn.compute.create_server(
        name=name, image_id=image.id, flavor_id=flavor.id, networks='none',
        availability_zone='nova:%s' % host)


def _active_times(conn, started, timeout=180.0, interval=0.05):
    """Poll until every server is ACTIVE; {id: seconds since its create}."""
    done = {}

    def all_active():
        for server_id, t0 in started.items():
            if server_id in done:
                continue
            server = conn.compute.get_server(server_id)
            if server.status == 'ERROR':
                raise RuntimeError('server %s went to ERROR: %s' % (
                    server_id, (server.fault or {}).get('message')))
            if server.status == 'ACTIVE':
                done[server_id] = time.monotonic() - t0
        return len(done) == len(started)

    _common.wait(all_active, timeout=timeout, interval=interval)
    return done


def _delete(conn, ids):
    for server_id in ids:
        conn.compute.delete_server(server_id)
    for server_id in ids:
        _common.wait(lambda: _common.server_gone(conn, server_id))


def api_sequential(conn, host, image, flavor, count):
    took = []
    for index in range(count):
        t0 = time.monotonic()
        server = _boot(conn, host, image, flavor,
                       'bench-%s-%d' % (host, index))
        took += list(_active_times(conn, {server.id: t0}).values())
        _delete(conn, [server.id])
    return took


def api_concurrent(conn, host, image, flavor, count):
    wall0 = time.monotonic()
    started = {}
    for index in range(count):
        t0 = time.monotonic()
        server = _boot(conn, host, image, flavor,
                       'bench-burst-%s-%d' % (host, index))
        started[server.id] = t0
    times = _active_times(conn, started)
    wall = time.monotonic() - wall0
    _delete(conn, list(started))
    return list(times.values()), wall


def _raw_source(tarball):
    client = pylxd.Client()
    with open(tarball, 'rb') as handle:
        data = handle.read()
    fingerprint = hashlib.sha256(data).hexdigest()
    if not client.images.exists(fingerprint):
        client.images.create(data, wait=True)
    return {'type': 'image', 'fingerprint': fingerprint}


def _launch(source, name):
    client = pylxd.Client()
    t0 = time.monotonic()
    container = client.instances.create({'name': name, 'source': source},
                                        wait=True)
    container.start(wait=True)
    return time.monotonic() - t0, container


def raw_lxd(tarball, count):
    source = _raw_source(tarball)
    sequential = []
    for index in range(count):
        took, container = _launch(source, 'bench-raw-%d-%d' % (
            os.getpid(), index))
        sequential.append(took)
        container.stop(wait=True)
        container.delete(wait=True)
    wall0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        results = list(pool.map(
            lambda i: _launch(source, 'bench-rawb-%d-%d' % (os.getpid(), i)),
            range(count)))
    wall = time.monotonic() - wall0
    for _took, container in results:
        container.stop(wait=True)
        container.delete(wait=True)
    return sequential, [took for took, _c in results], wall


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--count', type=int, default=5)
    parser.add_argument('--lxd-host', required=True)
    parser.add_argument('--fake-host', required=True)
    parser.add_argument('--image', default='lxd-tiny')
    parser.add_argument('--fake-image', default='lxd-tiny-any-hypervisor')
    parser.add_argument('--flavor', default='sandbox.small')
    parser.add_argument('--tarball', required=True)
    args = parser.parse_args(argv)

    conn = openstack.connect(cloud='sandbox')
    flavor = conn.compute.find_flavor(args.flavor, ignore_missing=False)
    lxd_image = conn.image.find_image(args.image, ignore_missing=False)
    fake_image = conn.image.find_image(args.fake_image, ignore_missing=False)
    n = args.count

    lxd_seq = api_sequential(conn, args.lxd_host, lxd_image, flavor, n)
    fake_seq = api_sequential(conn, args.fake_host, fake_image, flavor, n)
    lxd_each, lxd_wall = api_concurrent(conn, args.lxd_host, lxd_image,
                                        flavor, n)
    fake_each, fake_wall = api_concurrent(conn, args.fake_host, fake_image,
                                          flavor, n)
    raw_seq, raw_each, raw_wall = raw_lxd(args.tarball, n)

    def med(values):
        return statistics.median(values)

    print('\nsandbox bench: %d servers, flavor %s, image of %s, no network'
          % (n, args.flavor, args.tarball))
    print('%-34s %10s %10s %10s' % ('create -> ACTIVE (s)', 'LXD driver',
                                    'fake', 'raw LXD'))
    print('%-34s %10.2f %10.2f %10.2f' % (
        'one at a time, median', med(lxd_seq), med(fake_seq), med(raw_seq)))
    print('%-34s %10.2f %10.2f %10.2f' % (
        'one at a time, max', max(lxd_seq), max(fake_seq), max(raw_seq)))
    print('%-34s %10.2f %10.2f %10.2f' % (
        '%d at once, median of each' % n, med(lxd_each), med(fake_each),
        med(raw_each)))
    print('%-34s %10.2f %10.2f %10.2f' % (
        '%d at once, until all ACTIVE' % n, lxd_wall, fake_wall, raw_wall))
    print('\n(LXD driver - fake driver) / raw launch:')
    print('  one at a time (medians): %.2f' % (
        (med(lxd_seq) - med(fake_seq)) / med(raw_seq)))
    print('  %d at once (wall times):  %.2f' % (
        n, (lxd_wall - fake_wall) / raw_wall))
    rows, lxd = bench_sandbox.memory_report()
    total = bench_sandbox.sum_usage(rows)
    services = [row for row in rows if row[0] != bench_sandbox.HELPERS_ROW]
    print('\nmemory: the cloud %d MiB PSS (%d MiB RSS summed; %d services '
          'and their helpers; largest PSS: %s), LXD %d MiB PSS'
          % (total.pss_kib // 1024, total.rss_kib // 1024, len(services),
             ', '.join('%s %d' % (name.split(' ')[0], usage.pss_kib // 1024)
                       for name, usage in sorted(
                           rows, key=lambda row: -row[1].pss_kib)[:4]),
             lxd.pss_kib // 1024))
    return 0


if __name__ == '__main__':
    sys.exit(main())
