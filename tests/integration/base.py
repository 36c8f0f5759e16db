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

"""The driver against the real local LXD or Incus daemon, without a Nova cloud.

The daemon is the one tests/fixtures/lxd_fixtures.py picks for the run.

Nova objects are real (``objects.Instance``, ``objects.ImageMeta``); Glance
is nova's in-process ``GlanceFixture`` holding the tiny LXD image's bytes.
"""

import uuid

import fixtures
from nova import context as nova_context
from nova import objects
from nova import test
from nova.tests import fixtures as nova_fixtures
from nova.tests.unit import fake_instance
from nova.virt import driver as virt_driver

from tests.fixtures import lxd_fixtures


class DriverTestCase(test.NoDBTestCase):

    def setUp(self):
        super(DriverTestCase, self).setUp()
        self.useFixture(lxd_fixtures.DeprecationsAreErrors())
        objects.register_all()
        self.project = self.useFixture(lxd_fixtures.LXDProject('it'))
        self.glance = self.useFixture(nova_fixtures.GlanceFixture(self))
        self.context = nova_context.get_admin_context()
        self.driver = virt_driver.load_compute_driver(
            None, 'lxd_accel.LXDDriver')
        self.flags(project=self.project.name, lifecycle_poll_interval=0,
                   storage_pool=lxd_fixtures.pool_name(), group='lxd')
        self.flags(shutdown_timeout=5)
        # This test's image downloads only (init_host empties the dir).
        self.flags(image_download_dir=self.useFixture(
            fixtures.TempDir()).path, group='lxd')
        self.host = 'it-%s' % uuid.uuid4().hex[:8]
        self.driver.init_host(self.host)
        self.addCleanup(self.driver.cleanup_host, self.host)

    def create_image(self, data, **meta):
        image = {'name': 'tiny', 'disk_format': 'raw',
                 'container_format': 'bare', 'status': 'active',
                 'properties': {'hypervisor_type': 'lxc'}}
        image.update(meta)
        image = self.glance.create(self.context, image,
                                   data=_BytesReader(data))
        return objects.ImageMeta.from_dict(image)

    def tiny_image(self):
        return self.create_image(
            lxd_fixtures.tiny_image_bytes(self.project.name),
            checksum=uuid.uuid4().hex)

    def make_instance(self, vcpus=1, memory_mb=128, root_gb=0,
                      extra_specs=None, **updates):
        flavor = objects.Flavor(
            id=1, name='m1.tiny', flavorid='1', memory_mb=memory_mb,
            vcpus=vcpus, root_gb=root_gb, ephemeral_gb=0, swap=0,
            rxtx_factor=1.0, vcpu_weight=1, disabled=False, is_public=True,
            extra_specs=extra_specs or {}, projects=[])
        updates.setdefault('uuid', str(uuid.uuid4()))
        updates.setdefault('hostname', 'tiny')
        return fake_instance.fake_instance_obj(
            self.context, flavor=flavor, host=self.host, node=self.host,
            **updates)

    def container(self, instance):
        return self.project.instance(self.container_name(instance))

    def container_name(self, instance):
        return 'nova-%s' % instance.uuid

    def container_names(self):
        return sorted(record['name'] for record in self.project.instances())


class _BytesReader(object):
    """The file-like object GlanceFixture.create reads image data from."""

    def __init__(self, data):
        self._data = data

    def read(self, *args):
        return self._data
