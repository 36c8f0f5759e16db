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

"""Servers through the real Nova API, as real LXD containers."""

import nova.conf

from nova_lxd_accel import conf
from tests.fixtures import fault_kit
from tests.fixtures import lxd_fixtures
from tests.functional import base
from tools.sandbox.venv import lxd_proxy


class ServerLifecycleTest(base.LXDFunctionalTestCase):

    def test_boot_operate_delete(self):
        flavor_id = self._create_flavor(memory_mb=128, vcpu=1, disk=0,
                                        ephemeral=0, name='lxd.tiny')
        server = self._create_server(image_uuid=self.image_id,
                                     flavor_id=flavor_id, networks='none')
        container = self.container_of(server)
        self.assertEqual('Running', container['status'])
        self.assertEqual('1', container['config']['limits.cpu'])
        self.assertEqual('128MiB', container['config']['limits.memory'])
        self.assertEqual('compute1',
                         container['config']['user.nova_lxd_accel.host'])
        rp_uuid = self._get_provider_uuid_by_host('compute1')
        self.assertEqual({'VCPU': 1, 'MEMORY_MB': 128, 'DISK_GB': 0},
                         {rc: amount for rc, amount in
                          self._get_provider_usages(rp_uuid).items()})

        server = self._stop_server(server)
        self.assertEqual('Stopped', self.container_of(server)['status'])
        server = self._start_server(server)
        self.assertEqual('Running', self.container_of(server)['status'])
        server = self._reboot_server(server, hard=True)
        self.assertEqual('Running', self.container_of(server)['status'])

        self.api.post_server_action(server['id'], {'pause': None})
        server = self._wait_for_state_change(server, 'PAUSED')
        self.assertEqual('Frozen', self.container_of(server)['status'])
        self.api.post_server_action(server['id'], {'unpause': None})
        server = self._wait_for_state_change(server, 'ACTIVE')
        self.assertEqual('Running', self.container_of(server)['status'])

        server = self._suspend_server(server)
        self.assertEqual('Frozen', self.container_of(server)['status'])
        server = self._resume_server(server)
        self.assertEqual('Running', self.container_of(server)['status'])

        self._rescue_server(server)
        server = self._wait_for_state_change(server, 'RESCUE')
        self.assertEqual('Stopped', self.container_of(server)['status'])
        self.assertEqual('Running', self.lxd.instance(
            'nova-rescue-%s' % server['id'])['status'])
        self._unrescue_server(server)
        server = self._wait_for_state_change(server, 'ACTIVE')
        self.assertEqual(['nova-%s' % server['id']], self.container_names())

        console = self.api.post_server_action(
            server['id'], {'os-getConsoleOutput': {'length': 5}})
        self.assertIn('tiny init started', console['output'])

        self._delete_server(server)
        self.assertEqual([], self.container_names())
        self.assertEqual({'VCPU': 0, 'MEMORY_MB': 0, 'DISK_GB': 0},
                         self._get_provider_usages(rp_uuid))
        self.assertEqual({}, self._get_allocations_by_server_uuid(
            server['id']))


class ServerFailureTest(base.LXDFunctionalTestCase):

    def _boot_expecting_error(self, image_id):
        flavor_id = self._create_flavor(memory_mb=128, vcpu=1, disk=0,
                                        ephemeral=0)
        server = self.api.post_server({'server': self._build_server(
            image_uuid=image_id, flavor_id=flavor_id, networks='none')})
        server = self._wait_for_state_change(server, 'ERROR')
        self.assertEqual([], self.container_names())
        self.assertEqual({}, self._get_allocations_by_server_uuid(
            server['id']))
        return server

    def test_unacceptable_image(self):
        image_id = self._create_tiny_image(data=b'\0' * 4096)
        server = self._boot_expecting_error(image_id)
        self.assertIn('neither a tarball nor a squashfs',
                      server['fault']['message'])

    def test_start_failure(self):
        fault_kit.bad_gpu_profile(self, self.lxd)
        # One attempt: the fault then carries LXD's own reason (with
        # retries it reads "Exceeded maximum number of retries").
        self.flags(max_attempts=1, group='scheduler')
        server = self._boot_expecting_error(self.image_id)
        self.assertIn('0000:ff:1f.7', server['fault']['message'])
        self.assertIn('refused to start', server['fault']['message'])


class LXDDownTest(base.LXDFunctionalTestCase):
    """LXD goes away under a running nova-compute.

    nova-compute reaches LXD through a pass-through proxy
    (tools.sandbox.venv.lxd_proxy, forwarding everything unchanged); stopping
    the proxy makes LXD's socket refuse connections exactly as a stopped daemon
    does, without stopping the daemon other tests share.
    """

    def setUp(self):
        conf.register_opts(nova.conf.CONF)
        self.proxy = self.useFixture(lxd_proxy.LXDProxy(strip_devices=False))
        self.flags(endpoint=self.proxy.socket_path, group='lxd')
        super(LXDDownTest, self).setUp()

    def test_boot_with_lxd_down_fails_cleanly(self):
        flavor_id = self._create_flavor(memory_mb=128, vcpu=1, disk=0,
                                        ephemeral=0)
        self.proxy.stop()
        # One attempt, so the fault carries the driver's own message.
        self.flags(max_attempts=1, group='scheduler')
        server = self.api.post_server({'server': self._build_server(
            image_uuid=self.image_id, flavor_id=flavor_id, networks='none')})
        server = self._wait_for_state_change(server, 'ERROR')
        self.assertIn('Cannot reach the %s daemon at %s'
                      % (lxd_fixtures.daemon_name(), self.proxy.socket_path),
                      server['fault']['message'])
        self.assertEqual([], self.container_names())
        self.assertEqual({}, self._get_allocations_by_server_uuid(
            server['id']))


class StoragePoolTraitTest(base.LXDFunctionalTestCase):
    """A flavor asks for the driver of the hosts' pool by its trait."""

    def test_flavor_requires_the_pool_driver(self):
        rp_uuid = self._get_provider_uuid_by_host('compute1')
        trait = 'CUSTOM_LXD_STORAGE_%s' % lxd_fixtures.pool_driver().upper()
        self.assertIn(trait, self._get_provider_traits(rp_uuid))
        # a pool driver no host has: no valid host, nothing made
        other = 'CUSTOM_LXD_STORAGE_ZFS'
        self.assertNotIn(other, self._get_provider_traits(rp_uuid))
        refused = self._create_flavor(
            memory_mb=128, vcpu=1, disk=0, ephemeral=0,
            extra_spec={'trait:%s' % other: 'required'})
        server = self.api.post_server({'server': self._build_server(
            image_uuid=self.image_id, flavor_id=refused, networks='none')})
        server = self._wait_for_state_change(server, 'ERROR')
        self.assertIn('No valid host', server['fault']['message'])
        self.assertEqual([], self.container_names())
        wanted = self._create_flavor(
            memory_mb=128, vcpu=1, disk=0, ephemeral=0,
            extra_spec={'trait:%s' % trait: 'required'})
        server = self._create_server(image_uuid=self.image_id,
                                     flavor_id=wanted, networks='none')
        self.assertEqual('Running', self.container_of(server)['status'])
