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

"""Nova's in-process cloud with this driver against a real LXD or Incus.

Real nova API, conductor, scheduler and compute services, real Placement
(``PlacementFixture``: the Placement WSGI app on SQLite); Glance and
Neutron are nova's in-process fixtures. Each test has its own LXD project.
"""

import os
import sys
import time
import uuid

import fixtures
import nova.conf
from nova.tests.functional import integrated_helpers

from nova_lxd_accel import conf
from tests.fixtures import lxd_fixtures


def _api_paste_config():
    """nova's api-paste.ini: beside the package, or under <venv>/etc."""
    import nova
    candidates = [
        os.path.join(os.path.dirname(nova.__file__), '..', 'etc', 'nova',
                     'api-paste.ini'),
        os.path.join(sys.prefix, 'etc', 'nova', 'api-paste.ini'),
    ]
    for path in candidates:
        if os.path.exists(path):
            return os.path.abspath(path)
    return None


class LXDFunctionalTestCase(integrated_helpers.ProviderUsageBaseTestCase):

    compute_driver = 'lxd_accel.LXDDriver'
    #: hosts to start nova-compute on
    compute_hosts = ('compute1',)
    #: [lxd] lifecycle_poll_interval: 0, no lifecycle watcher
    lifecycle_poll_interval = 0
    #: [lxd] lifecycle_events (when the watcher runs)
    lifecycle_events = True
    #: [lxd_accelerators] pool_whole_gpus of the computes
    pool_whole_gpus = False
    #: [lxd_accelerators] report_infiniband_ports of the computes: True,
    #: the suites were written when whole ports were always offered (the
    #: default is False: a port's holder can act as a subnet manager)
    report_infiniband_ports = True

    def setUp(self):
        paste = _api_paste_config()
        if paste:
            self.flags(api_paste_config=paste, group='wsgi')
        self.lxd = self.useFixture(lxd_fixtures.LXDProject('ft'))
        # The driver registers its options when loaded; register them now
        # so that flags() can set them before any compute starts.
        conf.register_opts(nova.conf.CONF)
        self.flags(project=self.lxd.name,
                   lifecycle_poll_interval=self.lifecycle_poll_interval,
                   lifecycle_events=self.lifecycle_events,
                   storage_pool=lxd_fixtures.pool_name(), group='lxd')
        # each test has its own GPU state file (accel.health.gate_state); one
        # provider per whole GPU, the layout most tests were written for
        # (test_gpu_pools runs the default, pooled layout)
        self.flags(state_dir=self.useFixture(fixtures.TempDir()).path,
                   pool_whole_gpus=self.pool_whole_gpus,
                   report_infiniband_ports=self.report_infiniband_ports,
                   group='lxd_accelerators')
        # This test's image downloads only (init_host empties the dir).
        self.flags(image_download_dir=self.useFixture(
            fixtures.TempDir()).path, group='lxd')
        self.flags(shutdown_timeout=5)
        super(LXDFunctionalTestCase, self).setUp()
        self.useFixture(lxd_fixtures.DeprecationsAreErrors())
        self.image_id = self._create_tiny_image()
        for host in self.compute_hosts:
            self._start_compute(host)
        self.addCleanup(self._stop_driver_threads)

    def _stop_driver_threads(self):
        # nova's test services give their manager's graceful shutdown no
        # time (manager_shutdown_timeout = 0): a driver's cleanup_host that
        # still runs when the test's fixtures are gone would shut nova's
        # process-wide executors down for every later test of the worker.
        # Stop the driver's threads (lifecycle watcher, GPU re-check) first.
        for service in self.computes.values():
            service.manager.driver.cleanup_host(service.host)

    #: polls (0.5 s apart) before a wait for a server's state gives up: 2
    #: min. Nova's default, 10, suits its fake driver; here real daemons
    #: build, resize and move containers while CI runs two suites side by
    #: side on two cores, and a cold migration alone took over 5 s there.
    WAIT_POLLS = 240

    def _wait_for_server_parameter(self, server, expected_params,
                                   max_retries=10, api=None,
                                   wait_for_fault_key=True):
        return super(LXDFunctionalTestCase, self)._wait_for_server_parameter(
            server, expected_params, max(max_retries, self.WAIT_POLLS),
            api=api, wait_for_fault_key=wait_for_fault_key)

    def delete_and_wait_for_allocations(self, server):
        """Delete; wait until nova has also dropped its allocations.

        The API stops showing a server before nova's compute ends the
        delete (resource update, then allocations removed): a boot right
        after the 404 can still race nova itself.
        """
        self.api.delete_server(server['id'])
        self._wait_until_deleted(server)
        for _ in range(self.WAIT_POLLS):
            if not self._get_allocations_by_server_uuid(server['id']):
                return
            time.sleep(0.5)
        self.fail('the allocations of %s are still there' % server['id'])

    def _create_tiny_image(self, data=None, **meta):
        image = {'id': str(uuid.uuid4()), 'name': 'tiny-lxd',
                 'status': 'active', 'disk_format': 'raw',
                 'container_format': 'bare', 'checksum': uuid.uuid4().hex,
                 'properties': {'hypervisor_type': 'lxc'}}
        image.update(meta)
        self.glance.create(None, image, data=_BytesReader(
            lxd_fixtures.tiny_image_bytes(self.lxd.name) if data is None
            else data))
        return image['id']

    def container_of(self, server):
        return self.lxd.instance('nova-%s' % server['id'])

    def container_names(self):
        return sorted(record['name'] for record in self.lxd.instances())


class _BytesReader(object):

    def __init__(self, data):
        self._data = data

    def read(self, *args):
        return self._data
