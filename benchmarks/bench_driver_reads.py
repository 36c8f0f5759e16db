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

"""The driver's reads against the real daemon, with N containers on it.

Spawns ``--count`` containers (default 50) through the driver, from the
tiny test image, in an LXD project of its own (removed afterwards, with
every container and image in it), and prints, measured in this one run:

* nova's power-state sync pass (``get_num_instances``, then ``get_info``
  for every instance): daemon requests and time, answered by the one
  listing, and the same pass reading every instance
  (``get_info(use_cache=False)``: two reads each, what every ``get_info``
  cost before the listing answered them), with the ratio of the two;
* ``get_info`` per instance, both ways;
* the periodic resource update (``get_available_resource``, then
  ``update_provider_tree``): requests and time, before the containers
  were made and with them;
* one spawn, alone (median of ``--rounds``): its time and its requests
  before the containers were made and with them, and whether any lists
  the containers;
* where that spawn's time goes: the daemon's answers (the time the
  driver's HTTP session waited, by request kind) and the driver's own
  (the rest), beside a bare pylxd create+start of the same image (no
  profile, device or configuration of the driver's), at 0 and at N.

Daemon requests are counted on the driver's own HTTP session. Usage::

    python benchmarks/bench_driver_reads.py [--count 50] [--rounds 5]
        [--image tiny.tar.gz] [--socket $LXD_DIR/unix.socket]
"""

import argparse
import collections
import concurrent.futures
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

from nova.compute import provider_tree  # noqa: E402
from nova.compute import vm_states  # noqa: E402
import nova.conf  # noqa: E402
from nova import context as nova_context  # noqa: E402
from nova import objects  # noqa: E402
from nova.virt import driver as virt_driver  # noqa: E402
import pylxd  # noqa: E402

from nova_lxd_accel import conf as lxd_conf  # noqa: E402
from nova_lxd_accel.container import builder  # noqa: E402
from nova_lxd_accel.instance import image_cache  # noqa: E402
from tests.fixtures import daemon_requests  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOST = 'bench-reads'
#: containers spawned at once while the host is filled
SPAWN_THREADS = 4


class LocalImageAPI(object):
    """Serves one local file as every Glance image's data."""

    def __init__(self, path):
        self._path = path

    def download(self, context, image_id, dest_path=None):
        shutil.copyfile(self._path, dest_path)


#: one measured call: medians of the whole call, of the daemon's answers,
#: of the rest (the driver's own), of the daemon's time per request kind;
#: and the requests of the last call
Timed = collections.namedtuple(
    'Timed', 'seconds daemon own per_kind requests')


class Bench(object):
    """The driver of one project, and its requests counted."""

    def __init__(self, conf, socket, image_path, work):
        self.project = 'bench-reads-%s' % uuid.uuid4().hex[:8]
        self.admin = pylxd.Client(endpoint=socket)
        self.admin.api.projects.post(json={'name': self.project, 'config': {
            'features.images': 'true', 'features.profiles': 'false'}})
        self.raw = pylxd.Client(endpoint=socket, project=self.project)
        conf.set_override('project', self.project, group='lxd')
        conf.set_override('endpoint', socket, group='lxd')
        conf.set_override('lifecycle_poll_interval', 0, group='lxd')
        conf.set_override('image_download_dir', os.path.join(work, 'dl'),
                          group='lxd')
        conf.set_override('state_dir', os.path.join(work, 'gpu'),
                          group='lxd_accelerators')
        self.driver = virt_driver.load_compute_driver(None,
                                                      'lxd_accel.LXDDriver')
        self.driver.init_host(HOST)
        self.context = nova_context.get_admin_context()
        self.flavor = objects.Flavor(
            id=1, name='bench', flavorid='1', vcpus=1, memory_mb=128,
            root_gb=0, ephemeral_gb=0, swap=0, extra_specs={})
        self.image_meta = objects.ImageMeta.from_dict({
            'id': str(uuid.uuid4()), 'disk_format': 'raw',
            'container_format': 'bare', 'checksum': 'bench-reads'})
        # imported once, as for every boot after a host's first
        image_cache.ImageCache(
            self.driver._parts.client, nova.conf.CONF,
            image_api=LocalImageAPI(image_path)).ensure(self.context,
                                                        self.image_meta)
        self.requests = daemon_requests.DaemonRequests(
            self.driver._parts.client)
        self.requests.setUp()
        self.instances = []
        self.fingerprint = self.raw.images.all()[0].fingerprint

    def spawn(self):
        instance = objects.Instance(
            uuid=str(uuid.uuid4()), hostname='bench', key_data=None,
            user_data=None, flavor=self.flavor, host=HOST, node=HOST,
            vm_state=vm_states.ACTIVE, task_state=None, metadata={})
        self.driver.spawn(self.context, instance, self.image_meta, [],
                          None, {})
        self.instances.append(instance)
        return instance

    def fill(self, count):
        with concurrent.futures.ThreadPoolExecutor(SPAWN_THREADS) as pool:
            for future in [pool.submit(self.spawn) for _ in range(count)]:
                future.result()

    def measure(self, function, rounds):
        """(median seconds, requests of one call) of ``function()``."""
        timed = self.measure_timed(function, rounds)
        return timed.seconds, timed.requests

    def measure_timed(self, function, rounds):
        """A :class:`Timed` of ``function()``, medians of ``rounds`` calls.

        The daemon's part is the time the driver's HTTP session waited for
        answers; the rest of the call is the driver's own.
        """
        totals, daemon, kinds = [], [], collections.defaultdict(list)
        for _ in range(rounds):
            self.requests.take()
            start = time.perf_counter()
            function()
            totals.append(time.perf_counter() - start)
            timed = self.requests.take_timed()
            daemon.append(sum(seconds for _, seconds in timed))
            per_kind = collections.Counter()
            asked = None
            for request, seconds in timed:
                kind = _kind(request)
                if kind.endswith('/wait') and asked:
                    # which operation it waited for: a create or a start
                    kind = '%s (of %s)' % (kind, asked)
                else:
                    asked = kind
                per_kind[kind] += seconds
            for kind, seconds in per_kind.items():
                kinds[kind].append(seconds)
        return Timed(
            statistics.median(totals), statistics.median(daemon),
            statistics.median(t - d for t, d in zip(totals, daemon)),
            {kind: statistics.median(values + [0.0] * (rounds - len(values)))
             for kind, values in kinds.items()},
            [request for request, _ in timed])

    def pure_reference(self, times=2000):
        """The driver's translation of one instance, ``times`` over.

        Pure Python with no request: how fast the machine runs the
        driver's own code, at 0 containers and at N (the containers' idle
        work takes CPU from it too).
        """
        instance = objects.Instance(
            uuid=str(uuid.uuid4()), hostname='bench', key_data=None,
            user_data=None, flavor=self.flavor, host=HOST, node=HOST,
            metadata={})
        policy = self.driver._policy()
        for _ in range(times):
            builder.build_container(
                instance, self.flavor, self.image_meta, policy,
                builder.HostSide(network_info=()))

    def raw_launch(self):
        """Create and start a container of the same image with pylxd alone.

        The daemon's floor for a spawn: no profile, device, network or
        configuration of the driver's.
        """
        self.raw.instances.create({
            'name': 'raw-%s' % uuid.uuid4().hex[:12],
            'source': {'type': 'image', 'fingerprint': self.fingerprint},
        }, wait=True).start(wait=True)

    def sync_pass(self, use_cache):
        self.driver.get_num_instances()
        self.get_infos(use_cache)

    def get_infos(self, use_cache):
        for instance in self.instances:
            self.driver.get_info(instance, use_cache=use_cache)

    def resource_update(self):
        tree = provider_tree.ProviderTree()
        tree.new_root(HOST, str(uuid.uuid4()))
        self.driver.get_available_resource(HOST)
        self.driver.update_provider_tree(tree, HOST)

    def spawn_timed(self, rounds):
        """A :class:`Timed` of a spawn, one at a time.

        Each spawn adds a container: ``rounds`` more on the host.
        """
        return self.measure_timed(self.spawn, rounds)

    def remove(self):
        self.requests.cleanUp()
        self.driver.cleanup_host(HOST)
        for record in self.raw.instances.all():
            if record.status != 'Stopped':
                record.stop(force=True, wait=True)
            record.delete(wait=True)
        for image in self.raw.images.all():
            image.delete(wait=True)
        self.admin.api.projects[self.project].delete()


#: collections whose members the request summaries name by kind only
_COLLECTIONS = ('instances', 'operations', 'images', 'aliases',
                'storage-pools')


def _kind(request):
    """'GET /1.0/instances/<name>' of one ``(method, path)``."""
    method, path = request
    parts = path.split('/')
    for index in range(1, len(parts)):
        if parts[index - 1] in _COLLECTIONS and \
                parts[index] not in _COLLECTIONS:
            parts[index] = '<name>'
    return '%s %s' % (method, '/'.join(parts))


def _kinds(requests):
    """'3 GET /1.0/instances/<name>, ...' of a list of requests."""
    counts = collections.Counter(_kind(request) for request in requests)
    return ', '.join('%d %s' % (n, kind) for kind, n in sorted(
        counts.items()))


def _listings(requests):
    return sum(1 for method, path in requests
               if method == 'GET' and path in ('/1.0/instances',
                                               '/1.0/containers'))


def _print_split(count, empty_spawn, full_spawn, empty_raw, full_raw):
    """Where a spawn's time goes, at 0 containers and at ``count``."""
    print('where a spawn goes (medians, ms):  at 0   at %-5d  x' % count)
    rows = (
        ('spawn', empty_spawn.seconds, full_spawn.seconds),
        ("  the daemon's answers", empty_spawn.daemon, full_spawn.daemon),
        ("  the driver's own", empty_spawn.own, full_spawn.own),
        ('pylxd create+start alone', empty_raw.seconds, full_raw.seconds),
    )
    for label, empty, full in rows:
        print('  %-30s %7.1f %7.1f  %5.2f' % (
            label, empty * 1000, full * 1000, full / empty))
    print("  the driver's own share of its spawn: %.1f%% at 0, %.1f%% at %d"
          % (100 * empty_spawn.own / empty_spawn.seconds,
             100 * full_spawn.own / full_spawn.seconds, count))
    print('  spawn / pylxd create+start: x%.2f at 0, x%.2f at %d' % (
        empty_spawn.seconds / empty_raw.seconds,
        full_spawn.seconds / full_raw.seconds, count))
    print("the daemon's answers in a spawn, by kind (ms):")
    for kind in sorted(set(empty_spawn.per_kind) | set(full_spawn.per_kind),
                       key=lambda k: -full_spawn.per_kind.get(k, 0)):
        print('  %-66s %7.1f %7.1f' % (
            kind, empty_spawn.per_kind.get(kind, 0) * 1000,
            full_spawn.per_kind.get(kind, 0) * 1000))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--count', type=int, default=50)
    parser.add_argument('--rounds', type=int, default=5)
    parser.add_argument('--image', default=os.environ.get(
        'NOVA_LXD_ACCEL_TEST_IMAGE'))
    parser.add_argument('--socket', default=os.path.join(
        os.environ.get('LXD_DIR', '/var/lib/lxd'), 'unix.socket'))
    args = parser.parse_args()

    # the driver's warnings about the absent nova database, left out
    logging.basicConfig(level=logging.ERROR)
    objects.register_all()
    conf = nova.conf.CONF
    lxd_conf.register_opts(conf)
    conf([], project='nova')

    work = tempfile.mkdtemp()
    bench = None
    try:
        image_path = args.image
        if not image_path:
            image_path = os.path.join(work, 'tiny.tar.gz')
            subprocess.run(
                [os.path.join(REPO, 'tools', 'build-tiny-image.sh'),
                 image_path], check=True, stdout=subprocess.DEVNULL)
        bench = Bench(conf, args.socket, image_path, work)
        server = bench.admin.host_info['environment']
        print('%s %s at %s, %d CPUs; medians of %d rounds' % (
            server.get('server'), server.get('server_version'),
            args.socket, os.cpu_count(), args.rounds))

        empty_update = bench.measure(bench.resource_update, args.rounds)
        empty_spawn = bench.spawn_timed(args.rounds)
        empty_raw = bench.measure_timed(bench.raw_launch, args.rounds)
        empty_pure = bench.measure(bench.pure_reference, args.rounds)[0]
        bench.fill(args.count - args.rounds)
        count = len(bench.instances)
        print('%d containers of this host (project %s)' % (
            count, bench.project))

        listing = bench.measure(bench.driver._parts.client.list_containers,
                                args.rounds)
        cached = bench.measure(lambda: bench.sync_pass(True), args.rounds)
        fresh = bench.measure(lambda: bench.sync_pass(False), args.rounds)
        print('list_containers: %.1f ms, %d request' % (
            listing[0] * 1000, len(listing[1])))
        print('power-state sync pass (get_num_instances + %d get_info):'
              % count)
        print('  answered by the listing: %7.1f ms, %4d requests' % (
            cached[0] * 1000, len(cached[1])))
        print('  reading each instance:   %7.1f ms, %4d requests' % (
            fresh[0] * 1000, len(fresh[1])))
        print('  reading each / listing:  time x%.1f, requests x%.0f' % (
            fresh[0] / cached[0], len(fresh[1]) / len(cached[1])))
        bench.driver.get_num_instances()
        from_listing = bench.measure(lambda: bench.get_infos(True),
                                     args.rounds)
        read = bench.measure(lambda: bench.get_infos(False), args.rounds)
        print('get_info per instance: %.3f ms from the listing (%d '
              'requests for %d), %.2f ms read (use_cache=False)' % (
                  from_listing[0] / count * 1000, len(from_listing[1]),
                  count, read[0] / count * 1000))

        full_update = bench.measure(bench.resource_update, args.rounds)
        print('get_available_resource + update_provider_tree:')
        for label, (seconds, requests) in (('0 containers', empty_update),
                                           ('%d containers' % count,
                                            full_update)):
            print('  %-14s %6.1f ms, %d requests (%d listings): %s' % (
                label, seconds * 1000, len(requests), _listings(requests),
                _kinds(requests)))

        full_spawn = bench.spawn_timed(args.rounds)
        full_raw = bench.measure_timed(bench.raw_launch, args.rounds)
        full_pure = bench.measure(bench.pure_reference, args.rounds)[0]
        print('one spawn (image cached), alone:')
        for label, timed in (('0 containers', empty_spawn),
                             ('%d containers' % count, full_spawn)):
            print('  %-14s %6.1f ms, %d requests, %d listings: %s' % (
                label, timed.seconds * 1000, len(timed.requests),
                _listings(timed.requests), _kinds(timed.requests)))
        print('  at %d / at 0: time x%.2f'
              % (count, full_spawn.seconds / empty_spawn.seconds))
        _print_split(count, empty_spawn, full_spawn, empty_raw, full_raw)
        print("the driver's translation of one instance, 2,000 times (pure, "
              "no request): %.1f ms at 0, %.1f ms at %d: x%.2f, the "
              "machine's own slow-down" % (
                  empty_pure * 1000, full_pure * 1000, count,
                  full_pure / empty_pure))
    finally:
        if bench is not None:
            bench.remove()
        shutil.rmtree(work)
    return 0


if __name__ == '__main__':
    sys.exit(main())
