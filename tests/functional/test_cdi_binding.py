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

"""CDI binding on LXD 6, through nova's own cloud, at LXD's HTTP boundary.

LXD 5.21 and 6.x install only as a snap, which cannot run here. The compute
node talks to :class:`tools.sandbox.venv.lxd_proxy.LXDProxy` presenting the
recorded ``GET /1.0`` of LXD 6.2 (``tests/unit/samples/daemons``: its
documented API, extensions from its source, ``gpu_cdi`` among them) in front of
the real LXD 5.0.2; the proxy validates gpu devices the way LXD 6.2 does (a
malformed CDI id, or a CDI id next to ``nvidia.runtime=true``, is refused with
LXD's own message) and hides valid ones from the real daemon, which has no GPU.
"""

import nova.conf

from nova_lxd_accel import conf
from nova_lxd_accel import exception
from tests.fixtures import accel_servers
from tests.fixtures import recorded_daemon as recorded
from tests.functional import base
from tools.sandbox.venv import lxd_proxy

CONF = nova.conf.CONF
GPU_10 = accel_servers.HOST + '_gpu_0000_10_00_0'


class CdiTestBase(accel_servers.AccelTestBase):

    server_info = recorded.sample(recorded.LXD_62)

    def setUp(self):
        # AccelTestBase.setUp with a proxy that presents LXD 6.2
        conf.register_opts(CONF)
        self.proxy = self.useFixture(lxd_proxy.LXDProxy(
            self.host_resources(), strip_devices=self.strip_devices,
            server_info=self.server_info))
        self.flags(endpoint=self.proxy.socket_path, group='lxd')
        self.flags(nvidia_smi_path=self._fake_nvidia_smi(self.mig_text),
                   group='lxd_accelerators')
        base.LXDFunctionalTestCase.setUp(self)
        self.compute = self.computes[accel_servers.HOST]

    def root_traits(self):
        return set(self._get_provider_traits(
            self._get_provider_uuid_by_name(accel_servers.HOST)))


class CdiWholeGpuTest(CdiTestBase):

    host_resources = staticmethod(accel_servers.eight_gpu_host)

    def test_gpu_bound_by_uuid_without_nvidia_runtime(self):
        daemon = self.compute.driver._parts.client.daemon_info()
        self.assertEqual(('lxd', '6.2'), (daemon.server, daemon.version))
        traits = self.root_traits()
        self.assertIn('CUSTOM_LXD_DAEMON_LXD', traits)
        self.assertIn('CUSTOM_LXD_CDI', traits)
        # lxd:gpu_runtime=nvidia would set nvidia.runtime=true, which LXD
        # 6 refuses next to a CDI id: the binding turns it off
        server = self.boot(self.flavor(**{'resources:PGPU': '1',
                                          'lxd:gpu_runtime': 'nvidia'}))
        (rp_uuid, _), = self.accel_allocations(server).items()
        name = self.placement.get('/resource_providers/%s' % rp_uuid,
                                  version='1.14').body['name']
        index = int(name[-6])       # <host>_gpu_0000_1N_00_0
        self.assertEqual(
            {'nova-gpu0': {'type': 'gpu', 'gputype': 'physical',
                           'id': 'nvidia.com/gpu=GPU-%08d-0000-0000-0000-'
                                 '000000000000' % index}},
            self.accel_devices(server))
        self.assertEqual('false',
                         self.record(server)['config']['nvidia.runtime'])
        self.assertEqual('Running', self.container_of(server)['status'])
        self._delete_server(server)
        self.assert_released(server)

    def test_malformed_cdi_id_refused_as_lxd_does(self):
        client = self.compute.driver._parts.client
        error = self.assertRaises(
            exception.LXDOperationFailed, client.create_container, 'bad',
            {}, {'gpu0': {'type': 'gpu', 'gputype': 'physical',
                          'id': 'nvidia.com/gpu'}}, [], {'type': 'none'})
        self.assertIn(
            'Failed creating instance record: Failed initialising instance: '
            'Invalid devices: Device validation failed for "gpu0": ID must '
            'be integer DRM ID or CDI ID: Invalid CDI ID: unqualified '
            'device "nvidia.com/gpu", missing vendor', str(error))
        error = self.assertRaises(
            exception.LXDOperationFailed, client.create_container, 'bad',
            {'nvidia.runtime': 'true'},
            {'gpu0': {'type': 'gpu', 'gputype': 'physical',
                      'id': 'nvidia.com/gpu=GPU-00000000-0000-0000-0000-'
                            '000000000000'}}, [], {'type': 'none'})
        self.assertIn('CDI mode is incompatible with any NVIDIA instance '
                      'configuration option ("nvidia.runtime")', str(error))
        # nothing was half-created in the real daemon
        self.assertEqual([], self.container_names())


class CdiMigTest(CdiTestBase):

    def test_mig_bound_by_uuid(self):
        server = self.boot(self.flavor(
            **{'resources:CUSTOM_MIG_1G_10GB': '1'}))
        devices = self.accel_devices(server)
        self.assertEqual(['nova-mig0'], list(devices))
        self.assertIn(devices['nova-mig0'].pop('id'),
                      ('nvidia.com/gpu=MIG-00000002-0000-0000-0000-'
                       '000000000002',
                       'nvidia.com/gpu=MIG-00000003-0000-0000-0000-'
                       '000000000003'))
        self.assertEqual({'type': 'gpu', 'gputype': 'physical'},
                         devices['nova-mig0'])
        self.assertEqual('false',
                         self.record(server)['config']['nvidia.runtime'])
        self._delete_server(server)
        self.assert_released(server)


class RuntimeOnLxd6Test(CdiTestBase):
    """``nvidia_binding = runtime`` keeps the pre-CDI devices on LXD 6."""

    host_resources = staticmethod(accel_servers.eight_gpu_host)

    def setUp(self):
        self.flags(nvidia_binding='runtime', group='lxd_accelerators')
        super().setUp()

    def test_pci_binding(self):
        server = self.boot(self.flavor(**{'resources:PGPU': '1'}))
        device = self.accel_devices(server)['nova-gpu0']
        self.assertEqual({'type', 'gputype', 'pci'}, set(device))
        self._delete_server(server)
