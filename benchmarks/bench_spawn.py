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

Measures, on the real local LXD and the same tiny image (already cached,
as for every boot after the first):

* driver: ``Lifecycle.spawn`` (what ``LXDDriver.spawn`` delegates to:
  config translation, image cache check, create, start) and
  ``Lifecycle.destroy``;
* raw: pylxd ``instances.create(..., wait=True)`` + ``start(wait=True)``
  and ``stop(force)`` + ``delete``.

Prints medians and the driver/raw ratios. Usage::

    python benchmarks/bench_spawn.py [--rounds 10] [--image tiny.tar.gz]
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
from nova_lxd_accel import config as lxd_config  # noqa: E402
from nova_lxd_accel import image as lxd_image  # noqa: E402
from nova_lxd_accel import lifecycle  # noqa: E402

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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rounds', type=int, default=10)
    parser.add_argument('--image', default=os.environ.get(
        'NOVA_LXD_ACCEL_TEST_IMAGE'))
    args = parser.parse_args()
    objects.register_all()
    conf = nova.conf.CONF
    lxd_conf.register_opts(conf)
    conf([], project='nova')
    project = 'bench-%s' % uuid.uuid4().hex[:8]
    conf.set_override('project', project, group='lxd')

    tmp = tempfile.mkdtemp()
    image_path = args.image
    if not image_path:
        image_path = os.path.join(tmp, 'tiny.tar.gz')
        subprocess.run([os.path.join(REPO, 'tools', 'build-tiny-image.sh'),
                        image_path], check=True, stdout=subprocess.DEVNULL)

    admin = pylxd.Client()
    admin.api.projects.post(json={'name': project, 'config': {
        'features.images': 'true', 'features.profiles': 'false'}})
    raw = pylxd.Client(project=project)
    client = lxd_client.LXDClient(conf)
    images = lxd_image.ImageCache(client, image_api=LocalImageAPI(image_path))
    life = lifecycle.Lifecycle(client, conf, images)
    policy = lxd_config.HostPolicy(host='bench')
    context = nova_context.get_admin_context()
    image_meta = objects.ImageMeta.from_dict({
        'id': str(uuid.uuid4()), 'disk_format': 'raw',
        'container_format': 'bare', 'checksum': 'bench'})
    flavor = objects.Flavor(name='bench', vcpus=1, memory_mb=128, root_gb=0,
                            ephemeral_gb=0, swap=0, extra_specs={})
    alias = images.ensure(context, image_meta)   # warm the cache

    timings = {'driver spawn': [], 'raw create+start': [],
               'driver destroy': [], 'raw stop+delete': []}
    try:
        for _ in range(args.rounds):
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
        shutil.rmtree(tmp)

    medians = {name: statistics.median(values)
               for name, values in timings.items()}
    print('rounds: %d (tiny busybox image, cached)' % args.rounds)
    for name, value in medians.items():
        print('%-18s median %7.1f ms' % (name, value * 1000))
    print('spawn ratio   driver/raw = %.2f' % (
        medians['driver spawn'] / medians['raw create+start']))
    print('destroy ratio driver/raw = %.2f' % (
        medians['driver destroy'] / medians['raw stop+delete']))


if __name__ == '__main__':
    main()
