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

"""Driver spawn/destroy against raw pylxd create+start/delete, one run.

Measures, on each real local daemon (LXD and Incus: every one whose
socket answers, or those named with --daemon) and the same tiny image
(already cached, as for every boot after the first):

* driver: ``Lifecycle.spawn`` (what ``LXDDriver.spawn`` delegates to:
  config translation, image cache check, create, start) and
  ``Lifecycle.destroy``;
* raw: pylxd ``instances.create(..., wait=True)`` + ``start(wait=True)``
  and ``stop(force)`` + ``delete``.

Prints medians and the driver/raw ratios per daemon, then one line per
daemon with both ratios; ``--max-ratio 1.10`` exits 1 when a ratio is
above it (the driver must stay within 10% of the raw calls). Usage::

    python benchmarks/bench_spawn.py [--rounds 10] [--image tiny.tar.gz]
        [--daemon lxd=/var/lib/lxd/unix.socket] [--daemon incus]
        [--max-ratio 1.10]

The sockets default to $LXD_DIR/unix.socket (/var/lib/lxd) and
$INCUS_DIR/unix.socket (/var/lib/incus).
"""

import argparse
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

import nova.conf  # noqa: E402
from nova import context as nova_context  # noqa: E402
from nova import objects  # noqa: E402
import pylxd  # noqa: E402

from nova_lxd_accel import client as lxd_client  # noqa: E402
from nova_lxd_accel import conf as lxd_conf  # noqa: E402
from nova_lxd_accel.container import builder  # noqa: E402
from nova_lxd_accel.container import identity  # noqa: E402
from nova_lxd_accel import host as lxd_host  # noqa: E402
from nova_lxd_accel.instance import image_cache  # noqa: E402
from nova_lxd_accel.instance import lifecycle  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class LocalImageAPI(object):
    """Serves one local file as every Glance image's data."""

    def __init__(self, path):
        self._path = path

    def download(self, context, image_id, dest_path=None):
        shutil.copyfile(self._path, dest_path)


def _instance(flavor):
    return objects.Instance(uuid=str(uuid.uuid4()), hostname='bench',
                            key_data=None, user_data=None, flavor=flavor)


def default_sockets():
    return {
        'lxd': os.path.join(os.environ.get('LXD_DIR', '/var/lib/lxd'),
                            'unix.socket'),
        'incus': os.path.join(os.environ.get('INCUS_DIR',
                                             '/var/lib/incus'),
                              'unix.socket'),
    }


def answering(socket):
    try:
        pylxd.Client(endpoint=socket).api.get()
        return True
    except Exception:
        return False


def bench(conf, socket, rounds, image_path):
    """{measure: [seconds]} for one daemon."""
    project = 'bench-%s' % uuid.uuid4().hex[:8]
    conf.set_override('project', project, group='lxd')
    conf.set_override('endpoint', socket, group='lxd')
    admin = pylxd.Client(endpoint=socket)
    admin.api.projects.post(json={'name': project, 'config': {
        'features.images': 'true', 'features.profiles': 'false'}})
    raw = pylxd.Client(endpoint=socket, project=project)
    client = lxd_client.LXDClient(conf)
    images = image_cache.ImageCache(
        client, conf, image_api=LocalImageAPI(image_path))
    life = lifecycle.Lifecycle(client, conf, images, lxd_host.Host(
        client, conf, identity.Owner(host='bench')))
    policy = builder.HostPolicy(host='bench')
    context = nova_context.get_admin_context()
    image_meta = objects.ImageMeta.from_dict({
        'id': str(uuid.uuid4()), 'disk_format': 'raw',
        'container_format': 'bare', 'checksum': 'bench'})
    flavor = objects.Flavor(name='bench', vcpus=1, memory_mb=128, root_gb=0,
                            ephemeral_gb=0, swap=0, extra_specs={})
    timings = {'driver spawn': [], 'raw create+start': [],
               'driver destroy': [], 'raw stop+delete': []}
    try:
        alias = images.ensure(context, image_meta)   # warm the cache
        for _ in range(rounds):
            instance = _instance(flavor)
            start = time.perf_counter()
            life.spawn(context, instance, image_meta, [], policy)
            timings['driver spawn'].append(time.perf_counter() - start)
            start = time.perf_counter()
            life.destroy(instance)
            timings['driver destroy'].append(time.perf_counter() - start)

            name = 'raw-%s' % uuid.uuid4().hex[:12]
            start = time.perf_counter()
            container = raw.instances.create({
                'name': name, 'source': {'type': 'image', 'alias': alias},
                'config': {'limits.cpu': '1', 'limits.memory': '128MiB'},
                'devices': {'root': {'type': 'disk', 'path': '/',
                                     'pool': 'default'}},
                'profiles': []}, wait=True)
            container.start(wait=True)
            timings['raw create+start'].append(time.perf_counter() - start)
            start = time.perf_counter()
            container.stop(force=True, wait=True)
            container.delete(wait=True)
            timings['raw stop+delete'].append(time.perf_counter() - start)
    finally:
        for record in raw.instances.all():
            if record.status != 'Stopped':
                record.stop(force=True, wait=True)
            record.delete(wait=True)
        for image in raw.images.all():
            image.delete(wait=True)
        admin.api.projects[project].delete()
    return timings


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rounds', type=int, default=10)
    parser.add_argument('--image', default=os.environ.get(
        'NOVA_LXD_ACCEL_TEST_IMAGE'))
    parser.add_argument('--daemon', action='append', default=[],
                        metavar='NAME[=SOCKET]',
                        help='lxd or incus, optionally with its socket; '
                             'repeat for both (default: every daemon whose '
                             'default socket answers)')
    parser.add_argument('--max-ratio', type=float, default=None,
                        help='exit 1 when a driver/raw ratio exceeds it')
    args = parser.parse_args()
    sockets = default_sockets()
    if args.daemon:
        daemons = []
        for item in args.daemon:
            name, _sep, socket = item.partition('=')
            daemons.append((name, socket or sockets[name]))
    else:
        daemons = [(name, socket) for name, socket in sockets.items()
                   if answering(socket)]
    if not daemons:
        sys.exit('no daemon answers on %s' % ', '.join(sockets.values()))

    objects.register_all()
    conf = nova.conf.CONF
    lxd_conf.register_opts(conf)
    conf([], project='nova')

    tmp = tempfile.mkdtemp()
    try:
        image_path = args.image
        if not image_path:
            image_path = os.path.join(tmp, 'tiny.tar.gz')
            subprocess.run(
                [os.path.join(REPO, 'tools', 'build-tiny-image.sh'),
                 image_path], check=True, stdout=subprocess.DEVNULL)
        ratios = []
        for name, socket in daemons:
            server = pylxd.Client(endpoint=socket).host_info['environment']
            label = '%s %s' % (server.get('server', name),
                               server.get('server_version'))
            timings = bench(conf, socket, args.rounds, image_path)
            medians = {measure: statistics.median(values)
                       for measure, values in timings.items()}
            print('%s (%s): %d rounds, tiny busybox image, cached' % (
                label, socket, args.rounds))
            for measure, value in medians.items():
                print('  %-18s median %7.1f ms' % (measure, value * 1000))
            ratios.append((
                label,
                medians['driver spawn'] / medians['raw create+start'],
                medians['driver destroy'] / medians['raw stop+delete']))
    finally:
        shutil.rmtree(tmp)

    failed = False
    for label, spawn, destroy in ratios:
        verdict = ''
        if args.max_ratio is not None:
            over = spawn > args.max_ratio or destroy > args.max_ratio
            failed = failed or over
            verdict = '  %s (max %.2f)' % ('OVER' if over else 'ok',
                                           args.max_ratio)
        print('%-14s spawn/raw %.2f  destroy/raw %.2f%s' % (
            label, spawn, destroy, verdict))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
