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

"""GPU, MIG and InfiniBand flavors that boot, through nova's own cloud.

Real nova API/conductor/scheduler/compute, real Placement, this driver and the
real LXD daemon. The host's accelerators are recorded samples served by
:class:`tools.sandbox.venv.lxd_proxy.LXDProxy` at LXD's HTTP boundary (there is
no such hardware here; see that module for exactly what it fakes), and
``nvidia-smi -L`` is a script printing a recorded sample. The "GPU absent" path
runs with the proxy forwarding devices unchanged, so the real LXD refuses to
start the container.
"""

import json
import os
import time

import nova.conf
from nova.tests.functional.api import client as api_client
from oslo_utils import uuidutils

from nova_lxd_accel.accel import units
from nova_lxd_accel import conf
from nova_lxd_accel.container import identity
from tests.fixtures import fake_nvidia_smi
from tests.fixtures import gpu_hosts
from tests.functional import base
from tools.sandbox.venv import lxd_proxy

CONF = nova.conf.CONF
HOST = 'compute1'
H100 = HOST + '_gpu_0000_00_09_0'
A100_0 = HOST + '_gpu_0000_07_00_0'
A100_1 = HOST + '_gpu_0000_85_00_0'
IB_VF = HOST + '_ib_0000_4b_00_0'
IB_PORT = HOST + '_ib_0000_0c_00_0'
H100_MIG_L = gpu_hosts.load_text('nvsmi-h100-80gb-mig-4slices-L.txt')


def mixed_host():
    """H100 (4 MIG devices), two whole A100s, ConnectX-6 InfiniBand.

    The VFs of 4b:00.0 get the netdevs (ibp75s0v0-3) mlx5_core gives
    them; the recorded sample shows only the last one's (ibp75s0v7).
    """
    resources = gpu_hosts.load_json('handmade-lxd-h100-mig-host.json')
    resources['gpu']['cards'] += gpu_hosts.load_json(
        'handmade-lxd-two-a100-no-nvidia-object.json')['gpu']['cards']
    network = gpu_hosts.load_json('handmade-lxd-connectx6-ib-vfs.json')[
        'network']
    for i, vf in enumerate(network['cards'][1]['sriov']['vfs'][:4]):
        vf['ports'] = [{'id': 'ibp75s0v%d' % i, 'port': 0,
                        'protocol': 'infiniband'}]
    resources['network'] = network
    return {'gpu': resources['gpu'], 'network': resources['network']}


def eight_gpu_host():
    """8 whole GPUs shaped like the recorded H100 card."""
    cards = gpu_hosts.eight_gpu_cards()
    return {'gpu': {'cards': cards, 'total': 8},
            'network': {'cards': [], 'total': 0}}


class AccelTestBase(base.LXDFunctionalTestCase):

    host_resources = staticmethod(mixed_host)
    mig_text = H100_MIG_L
    strip_devices = True

    def setUp(self):
        conf.register_opts(CONF)
        self.proxy = self.useFixture(lxd_proxy.LXDProxy(
            self.host_resources(), strip_devices=self.strip_devices))
        self.flags(endpoint=self.proxy.socket_path, group='lxd')
        self.flags(nvidia_smi_path=self._fake_nvidia_smi(self.mig_text),
                   group='lxd_accelerators')
        super().setUp()
        self.compute = self.computes[HOST]

    def _fake_nvidia_smi(self, text):
        # -L lists the MIG devices; the probe sees every NVIDIA GPU idle
        self.smi = fake_nvidia_smi.FakeNvidiaSmi(
            os.path.dirname(self.proxy.socket_path), listing=text,
            gpu_rows=fake_nvidia_smi.idle_rows(self.proxy.resources))
        return self.smi.path

    def flavor(self, **extra_spec):
        return self._create_flavor(memory_mb=128, vcpu=1, disk=0,
                                   ephemeral=0, extra_spec=extra_spec)

    def boot(self, flavor_id, expected='ACTIVE'):
        server = self.api.post_server({'server': self._build_server(
            image_uuid=self.image_id, flavor_id=flavor_id,
            networks='none')})
        return self._wait_for_state_change(server, expected)

    def rp(self, name):
        return self._get_provider_uuid_by_name(name)

    def _wait_until_built(self, server):
        """The server once ACTIVE or ERROR (servers booted at once)."""
        for _ in range(600):
            server = self.api.get_server(server['id'])
            if server['status'] in ('ACTIVE', 'ERROR'):
                return server
            time.sleep(0.1)
        self.fail('server %s stuck in %s' % (server['id'],
                                             server['status']))

    def record(self, server):
        """The container as the driver sees it (through the proxy)."""
        return self.compute.driver._parts.client.get_container(
            'nova-%s' % server['id'])

    def accel_devices(self, server):
        return {k: v for k, v in self.record(server)['devices'].items()
                if k != 'root'}

    def accel_allocations(self, server):
        """{provider name: {rc: n}} of the server's accelerator usage."""
        out = {}
        names = {self.rp(n): n for n in (H100, A100_0, A100_1, IB_VF,
                                         IB_PORT)
                 if self._get_provider_uuid_by_name_or_none(n)}
        for rp_uuid, alloc in self._get_allocations_by_server_uuid(
                server['id']).items():
            resources = {rc: n for rc, n in alloc['resources'].items()
                         if units.is_accelerator_class(rc)}
            if resources:
                out[names.get(rp_uuid, rp_uuid)] = resources
        return out

    def _get_provider_uuid_by_name_or_none(self, name):
        rps = self.placement.get('/resource_providers?name=%s' % name,
                                 version='1.14').body['resource_providers']
        return rps[0]['uuid'] if rps else None

    def assert_released(self, server):
        self.assertEqual([], self.container_names())
        self.assertEqual({}, self.proxy.all_fake_devices(self.lxd.name))
        self.assertEqual({}, self._get_allocations_by_server_uuid(
            server['id']))


class BindingTest(AccelTestBase):

    def test_pgpu(self):
        server = self.boot(self.flavor(**{'resources:PGPU': '1'}))
        allocs = self.accel_allocations(server)
        self.assertEqual(1, len(allocs))
        (name, resources), = allocs.items()
        self.assertIn(name, (A100_0, A100_1))
        self.assertEqual({'PGPU': 1}, resources)
        pci = {A100_0: '0000:07:00.0', A100_1: '0000:85:00.0'}[name]
        self.assertEqual({'nova-gpu0': {'type': 'gpu', 'gputype': 'physical',
                                        'pci': pci}},
                         self.accel_devices(server))
        # the binding is recorded in the real container's own config
        real = self.container_of(server)
        self.assertEqual('Running', real['status'])
        record = json.loads(real['config'][identity.KEY_DEVICES])
        self.assertEqual([(self.rp(name), 'PGPU', 'pci:' + pci)],
                         [(r['provider'], r['resource_class'], r['unit'])
                          for r in record])
        # the free-form diagnostics (before 2.48) show the bound devices
        self.api.microversion = '2.47'
        diagnostics = self.api.get_server_diagnostics(server['id'])
        self.api.microversion = 'latest'
        self.assertIn(pci, diagnostics['nova-gpu0'])
        self._delete_server(server)
        self.assert_released(server)

    def test_mig(self):
        server = self.boot(self.flavor(
            **{'resources:CUSTOM_MIG_1G_10GB': '1'}))
        self.assertEqual({H100: {'CUSTOM_MIG_1G_10GB': 1}},
                         self.accel_allocations(server))
        devices = self.accel_devices(server)
        self.assertEqual(['nova-mig0'], list(devices))
        self.assertIn(devices['nova-mig0'].pop('mig.uuid'),
                      ('MIG-00000002-0000-0000-0000-000000000002',
                       'MIG-00000003-0000-0000-0000-000000000003'))
        self.assertEqual({'type': 'gpu', 'gputype': 'mig',
                          'pci': '0000:00:09.0'}, devices['nova-mig0'])
        self.assertEqual('true', self.record(server)['config'][
            'nvidia.runtime'])
        self._delete_server(server)
        self.assert_released(server)

    def test_infiniband_vf(self):
        server = self.boot(self.flavor(
            **{'resources:CUSTOM_INFINIBAND_VF': '1'}))
        self.assertEqual({IB_VF: {'CUSTOM_INFINIBAND_VF': 1}},
                         self.accel_allocations(server))
        self.assertEqual({'nova-ib0': {'type': 'infiniband',
                                       'nictype': 'physical',
                                       'parent': 'ibp75s0v0'}},
                         self.accel_devices(server))
        self._delete_server(server)
        self.assert_released(server)

    def test_freed_ib_vf_is_bound_again_at_once(self):
        # all four VFs in use, one freed: the next boot gets it with no
        # periodic task in between
        flavor = self.flavor(**{'resources:CUSTOM_INFINIBAND_VF': '1'})
        servers = [self.boot(flavor) for _ in range(4)]
        parents = [self.accel_devices(s)['nova-ib0']['parent']
                   for s in servers]
        self.assertEqual(4, len(set(parents)))
        self.delete_and_wait_for_allocations(servers[1])
        again = self.boot(flavor)
        self.assertEqual(parents[1],
                         self.accel_devices(again)['nova-ib0']['parent'])

    def test_two_gpus_in_groups_plus_ib_vf(self):
        server = self.boot(self.flavor(**{
            'resources1:PGPU': '1', 'resources2:PGPU': '1',
            'resources3:CUSTOM_INFINIBAND_VF': '1',
            'group_policy': 'isolate'}))
        self.assertEqual({A100_0: {'PGPU': 1}, A100_1: {'PGPU': 1},
                          IB_VF: {'CUSTOM_INFINIBAND_VF': 1}},
                         self.accel_allocations(server))
        devices = self.accel_devices(server)
        self.assertEqual(
            {'nova-gpu0', 'nova-gpu1', 'nova-ib0'}, set(devices))
        self.assertEqual({'0000:07:00.0', '0000:85:00.0'},
                         {devices['nova-gpu0']['pci'],
                          devices['nova-gpu1']['pci']})
        # a second server gets the other VF, never the same one
        other = self.boot(self.flavor(
            **{'resources:CUSTOM_INFINIBAND_VF': '1'}))
        self.assertEqual('ibp75s0v1',
                         self.accel_devices(other)['nova-ib0']['parent'])
        self._delete_server(server)
        self._delete_server(other)
        self.assert_released(server)

    def test_rebuild_rebinds_the_allocated_device(self):
        server = self.boot(self.flavor(
            **{'resources:CUSTOM_INFINIBAND_VF': '1'}))
        before = self.accel_devices(server)
        allocs = self.accel_allocations(server)
        server = self._rebuild_server(server, self.image_id)
        # destroy released the VF, spawn bound one again: still exactly one
        self.assertEqual(before, self.accel_devices(server))
        self.assertEqual(allocs, self.accel_allocations(server))
        self.assertEqual(['nova-%s' % server['id']], self.container_names())
        self._delete_server(server)
        self.assert_released(server)

    def test_restart_releases_bindings_of_unknown_instances(self):
        server = self.boot(self.flavor(**{'resources:PGPU': '1'}))
        kept = self.accel_devices(server)
        # a container of this host whose instance nova does not have
        # (deleted while nova-compute was down), holding the other GPU
        pci = ({'0000:07:00.0', '0000:85:00.0'} -
               {kept['nova-gpu0']['pci']}).pop()
        orphan = 'nova-%s' % uuidutils.generate_uuid()
        record = [{'name': 'nova-gpu0', 'kind': 'pgpu', 'unit': 'pci:' + pci,
                   'resource_class': 'PGPU', 'provider': 'gone', 'pci': pci}]
        client = self.compute.driver._parts.client
        client.create_container(
            orphan, {identity.KEY_HOST: HOST,
                     identity.KEY_INSTANCE_UUID: orphan[5:],
                     identity.KEY_DEVICES: json.dumps(record)},
            {'nova-gpu0': {'type': 'gpu', 'gputype': 'physical',
                           'pci': pci},
             'root': {'type': 'disk', 'path': '/', 'pool': 'default'}},
            [], source={'type': 'image', 'alias': 'nova-image-%s' %
                        self.image_id})
        self.compute = self.restart_compute_service(self.compute)
        after = client.get_container(orphan)
        self.assertNotIn(identity.KEY_DEVICES, after['config'])
        self.assertEqual(['root'], list(after['devices']))
        self.assertIn('Released accelerators', self.stdlog.logger.output)
        self.assertIn(orphan, self.stdlog.logger.output)
        # the live instance keeps its device
        self.assertEqual(kept, self.accel_devices(server))
        client.delete_container(orphan)
        self._delete_server(server)
        self.assert_released(server)

    def test_no_accelerator_no_device(self):
        server = self.boot(self.flavor())
        self.assertEqual({}, self.accel_devices(server))
        self.assertNotIn(identity.KEY_DEVICES,
                         self.container_of(server)['config'])
        self._delete_server(server)
        self.assert_released(server)


class GpuAbsentTest(AccelTestBase):
    """The devices reach the real LXD, which has no such GPU."""

    strip_devices = False

    def test_start_fails_and_everything_is_released(self):
        self.flags(max_attempts=1, group='scheduler')
        server = self.boot(self.flavor(**{'resources:PGPU': '1'}),
                           expected='ERROR')
        # LXD 5.0 says "Invalid PCI address (no device found)" or "Failed
        # to detect requested GPU device", depending on the version
        message = server['fault']['message']
        self.assertIn('refused to start', message)
        self.assertIn('nova-gpu0', message)
        self.assertEqual([], self.container_names())
        self.assertEqual({}, self._get_allocations_by_server_uuid(
            server['id']))
        for name in (A100_0, A100_1):
            self.assertEqual(0, self._get_provider_usages(
                self.rp(name)).get('PGPU', 0))


class ConcurrencyTest(AccelTestBase):

    host_resources = staticmethod(eight_gpu_host)
    mig_text = ''

    def test_twenty_servers_eight_gpus(self):
        self.flags(instances=-1, cores=-1, ram=-1, group='quota')
        flavor_id = self.flavor(**{'resources:PGPU': '1'})
        servers = [self.api.post_server({'server': self._build_server(
            image_uuid=self.image_id, flavor_id=flavor_id,
            networks='none')}) for _ in range(20)]
        final = [self._wait_until_built(s) for s in servers]
        states = sorted(s['status'] for s in final)
        self.assertEqual(['ACTIVE'] * 8 + ['ERROR'] * 12, states)
        for s in final:
            if s['status'] == 'ERROR':
                self.assertIn('No valid host', s['fault']['message'])
        bound = {}
        for name, devices in self.proxy.all_fake_devices(
                self.lxd.name).items():
            for device in devices.values():
                bound.setdefault(device['pci'], []).append(name)
        self.assertEqual(8, len(bound))
        self.assertTrue(all(len(v) == 1 for v in bound.values()), bound)
        usage = {}
        for i in range(8):
            name = '%s_gpu_0000_1%d_00_0' % (HOST, i)
            usage['0000:1%d:00.0' % i] = self._get_provider_usages(
                self.rp(name))['PGPU']
        self.assertEqual({pci: 1 for pci in bound}, usage)
        for s in final:
            self._delete_server(s)
        self.assertEqual([], self.container_names())


class ValidatorTest(AccelTestBase):

    GOOD = {'lxd:privileged': 'false', 'lxd:nesting': 'true',
            'lxd:isolated_idmap': 'true', 'lxd:processes': '100',
            'lxd:gpu_runtime': 'nvidia'}
    BAD = {'lxd:privileged': 'maybe', 'lxd:nesting': 'yes please',
           'lxd:isolated_idmap': '2', 'lxd:processes': '0',
           'lxd:gpu_runtime': 'cuda'}

    def _post(self, flavor_id, specs, microversion):
        admin = self.api_fixture.admin_api
        before, admin.microversion = admin.microversion, microversion
        try:
            return admin.post_extra_spec(flavor_id, {'extra_specs': specs})
        finally:
            admin.microversion = before

    def test_every_key(self):
        flavor_id = self.flavor()
        for key, value in self.GOOD.items():
            self._post(flavor_id, {key: value}, '2.86')
        for key, value in self.BAD.items():
            exc = self.assertRaises(api_client.OpenStackApiException,
                                    self._post, flavor_id, {key: value},
                                    '2.86')
            self.assertEqual(400, exc.response.status_code)
            self.assertIn(key, str(exc))
            # as nova does: not validated before 2.86
            self._post(flavor_id, {key: value}, '2.85')
        for key in ('lxd:raw.lxc', 'lxd:unknown', 'lxd:security.privileged'):
            exc = self.assertRaises(api_client.OpenStackApiException,
                                    self._post, flavor_id, {key: 'true'},
                                    '2.86')
            self.assertEqual(400, exc.response.status_code)
            self.assertIn(key, str(exc))
            self._post(flavor_id, {key: 'true'}, '2.85')

    def test_bad_value_message_names_allowed_values(self):
        flavor_id = self.flavor()
        exc = self.assertRaises(api_client.OpenStackApiException,
                                self._post, flavor_id,
                                {'lxd:gpu_runtime': 'cuda'}, '2.86')
        self.assertIn('none or nvidia', str(exc))


class SecurityTest(AccelTestBase):

    def test_privileged_needs_operator_consent(self):
        self.flags(max_attempts=1, group='scheduler')
        server = self.boot(self.flavor(**{'lxd:privileged': 'true'}),
                           expected='ERROR')
        self.assertIn('allow_privileged_containers',
                      server['fault']['message'])
        self.assertEqual([], self.container_names())

    def test_image_cannot_raise_privileges_or_add_raw_config(self):
        image_id = self._create_tiny_image(properties={
            'hypervisor_type': 'lxc', 'raw.lxc': 'lxc.apparmor.profile='
            'unconfined', 'lxd_raw_lxc': 'x', 'security.privileged': 'true',
            'lxd:privileged': 'true', 'raw.idmap': 'both 0 0'})
        flavor_id = self.flavor()
        server = self.api.post_server({'server': self._build_server(
            image_uuid=image_id, flavor_id=flavor_id, networks='none')})
        server = self._wait_for_state_change(server, 'ACTIVE')
        record = self.container_of(server)
        for config in (record['config'], record['expanded_config']):
            self.assertEqual([], [k for k in config
                                  if k.startswith('raw.')])
            self.assertEqual('false', config['security.privileged'])
        self.assertEqual({}, self.accel_devices(server))
        self._delete_server(server)

    def test_no_device_without_allocation(self):
        # gpu_runtime alone injects NVIDIA user space, never a GPU
        server = self.boot(self.flavor(**{'lxd:gpu_runtime': 'nvidia'}))
        self.assertEqual({}, self.accel_devices(server))
        self.assertEqual({}, self.accel_allocations(server))
        self._delete_server(server)
