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

"""Accelerator providers in a real Placement, through nova's own cloud.

Runs nova's in-process cloud (API, conductor, scheduler, one compute) with the
real ``PlacementFixture`` and this driver against the real LXD daemon. The
host's accelerators are the recorded samples of ``tests/unit/accel/samples``,
served as LXD's own ``GET /1.0/resources`` answer by
:class:`tools.sandbox.venv.lxd_proxy.LXDProxy` (no such hardware here), and
``nvidia-smi -L`` is a script printing a recorded sample. Tests change the host
by rewriting both; the allocations of a vanished device are read from Placement
by the default code path.
"""

import collections
import json
import os

import fixtures
import nova.conf
from nova.scheduler.client import report

from nova_lxd_accel import conf
from tests.fixtures import fake_nvidia_smi
from tests.functional import base
from tools.sandbox.venv import lxd_proxy

CONF = nova.conf.CONF
SAMPLES = os.path.join(os.path.dirname(os.path.dirname(__file__)),
                       'unit', 'accel', 'samples')
HOST = 'host1'
GPU = 'host1_gpu_0000_00_09_0'
GT730 = 'host1_gpu_0000_07_00_0'
IB = 'host1_ib_0000_4b_00_0'
IB_PORT = 'host1_ib_0000_0c_00_0'
IB_97 = 'host1_ib_0000_61_00_1'


def _load(name):
    with open(os.path.join(SAMPLES, name)) as f:
        return json.load(f) if name.endswith('.json') else f.read()


class TestAcceleratorInventory(base.LXDFunctionalTestCase):

    compute_hosts = (HOST,)

    def setUp(self):
        conf.register_opts(CONF)
        resources = _load('handmade-lxd-h100-mig-host.json')
        # A second NVIDIA GPU (GT 730 of LXD issue 9201) beside the H100.
        resources['gpu']['cards'] += _load(
            'lxd-9201-virtiogpu-gt730-nvidia-subobject-gpu.json')[
                'gpu']['cards']
        resources['network'] = _load(
            'handmade-lxd-connectx6-ib-vfs.json')['network']
        # The VFs of 4b:00.0 with the netdevs mlx5_core gives them (the
        # sample shows only the last one's); a VF without one cannot be
        # bound into a container and is not reported.
        for i, vf in enumerate(
                resources['network']['cards'][1]['sriov']['vfs'][:4]):
            vf['ports'] = [{'id': 'ibp75s0v%d' % i, 'port': 0,
                            'protocol': 'infiniband'}]
        self.resources = {'gpu': resources['gpu'],
                          'network': resources['network']}
        self.proxy = self.useFixture(lxd_proxy.LXDProxy(self.resources))
        self.flags(endpoint=self.proxy.socket_path, group='lxd')
        self.smi = fake_nvidia_smi.FakeNvidiaSmi(
            self.proxy.directory,
            gpu_rows=fake_nvidia_smi.idle_rows(self.resources))
        self.set_mig_text(_load('nvsmi-h100-80gb-mig-4slices-L.txt'))
        self.flags(nvidia_smi_path=self.smi.path, group='lxd_accelerators')
        super().setUp()
        self.compute = self.computes[HOST]
        self.root_uuid = self._get_provider_uuid_by_host(HOST)

    def set_mig_text(self, text):
        self.mig_text = text
        self.smi.set_listing(text)

    def host_changed(self):
        self.proxy.set_resources(self.resources)

    def _children(self):
        """{name: (uuid, {rc: (total, reserved)}, {traits})} in Placement."""
        out = {}
        for rp in self._get_all_rps_in_a_tree(self.root_uuid):
            if rp['uuid'] == self.root_uuid:
                continue
            inventory = {rc: (rec['total'], rec['reserved']) for rc, rec in
                         self._get_provider_inventory(rp['uuid']).items()}
            out[rp['name']] = (rp['uuid'], inventory,
                               set(self._get_provider_traits(rp['uuid'])))
        return out

    def _count_writes(self):
        counts = collections.Counter()
        for method in ('put', 'post', 'delete'):
            original = getattr(report.SchedulerReportClient, method)

            def counting(client, url, *args, _m=method, _o=original,
                         **kwargs):
                counts['%s %s' % (_m.upper(), url)] += 1
                return _o(client, url, *args, **kwargs)
            self.useFixture(fixtures.MonkeyPatch(
                'nova.scheduler.client.report.SchedulerReportClient.' +
                method, counting))
        return counts

    def test_children_inventories_and_traits(self):
        children = self._children()
        for rp in self._get_all_rps_in_a_tree(self.root_uuid):
            if rp['uuid'] != self.root_uuid:
                self.assertEqual(self.root_uuid, rp['parent_provider_uuid'])
        nv = {'OWNER_NOVA', 'CUSTOM_GPU_VENDOR_10DE'}
        mlx = {'OWNER_NOVA', 'CUSTOM_IB_VENDOR_15B3',
               'CUSTOM_IB_PRODUCT_15B3_101B'}
        self.assertEqual({
            GPU: ({'CUSTOM_MIG_3G_40GB': (1, 0), 'CUSTOM_MIG_2G_20GB': (1, 0),
                   'CUSTOM_MIG_1G_10GB': (2, 0)},
                  nv | {'CUSTOM_GPU_PRODUCT_10DE_2330',
                        'CUSTOM_GPU_MODEL_NVIDIA_H100_80GB_HBM3',
                        'CUSTOM_CUDA_CC_9_0'}),
            GT730: ({'PGPU': (1, 0)},
                    nv | {'CUSTOM_GPU_PRODUCT_10DE_1287',
                          'CUSTOM_GPU_MODEL_GEFORCE_GT_730',
                          'CUSTOM_CUDA_CC_3_5'}),
            IB: ({'CUSTOM_INFINIBAND_VF': (5, 0)}, mlx),
            IB_PORT: ({'CUSTOM_INFINIBAND_PORT': (1, 0)}, mlx),
            IB_97: ({'CUSTOM_INFINIBAND_PORT': (1, 0)}, mlx),
        }, {name: value[1:] for name, value in children.items()})
        driver = self.compute.driver
        gpu = driver._parts.inventory.device_for_provider(children[GPU][0])
        self.assertEqual('0000:00:09.0', gpu.pci_address)

    def test_changes_reach_placement_after_periodics(self):
        before = self._children()
        cards = self.resources['gpu']['cards']
        cards[:] = [c for c in cards if c.get('pci_address') != '0000:07:00.0']
        self.set_mig_text(self.mig_text.split('\n')[0] + '\n' + ''.join(
            '  MIG 1g.10gb     Device  %d: (UUID: MIG-%d)\n' % (i, i)
            for i in range(7)))
        ib = self.resources['network']['cards'][1]
        ib['sriov']['vfs'].pop()
        self.host_changed()
        self._run_periodics(raise_on_error=True)
        after = self._children()
        self.assertNotIn(GT730, after)
        self.assertEqual({'CUSTOM_MIG_1G_10GB': (7, 0)}, after[GPU][1])
        self.assertEqual({'CUSTOM_INFINIBAND_VF': (4, 0)}, after[IB][1])
        self.assertEqual(before[GPU][0], after[GPU][0])

    def test_operator_traits_survive(self):
        uuid = self._children()[IB][0]
        self.placement.put('/traits/CUSTOM_RACK_7', {}, version='1.6')
        traits = set(self._get_provider_traits(uuid)) | {'CUSTOM_RACK_7'}
        self._set_provider_traits(uuid, list(traits))
        self._run_periodics(raise_on_error=True)
        self.assertIn('CUSTOM_RACK_7', self._get_provider_traits(uuid))
        # and across a change of the same provider's inventory
        self.resources['network']['cards'][1]['sriov']['vfs'].pop()
        self.host_changed()
        self._run_periodics(raise_on_error=True)
        children = self._children()
        self.assertEqual({'CUSTOM_INFINIBAND_VF': (4, 0)}, children[IB][1])
        self.assertIn('CUSTOM_RACK_7', children[IB][2])
        self.assertIn('OWNER_NOVA', children[IB][2])

    def test_unchanged_host_makes_no_placement_write(self):
        self._run_periodics(raise_on_error=True)
        writes = self._count_writes()
        self._run_periodics(raise_on_error=True)
        self._run_periodics(raise_on_error=True)
        self.assertEqual({}, dict(writes))
        # the counter does see writes when something changes
        self.resources['network']['cards'][1]['sriov']['vfs'].pop()
        self.host_changed()
        self._run_periodics(raise_on_error=True)
        uuid = self._children()[IB][0]
        self.assertEqual(
            1, writes['PUT /resource_providers/%s/inventories' % uuid])

    def test_vanished_gpu_in_use_is_reserved_then_deleted(self):
        flavor_id = self._create_flavor(
            memory_mb=128, vcpu=1, disk=0, ephemeral=0,
            extra_spec={'resources:CUSTOM_MIG_3G_40GB': '1'})
        server = self._create_server(image_uuid=self.image_id,
                                     flavor_id=flavor_id, networks='none')
        gpu_uuid = self._children()[GPU][0]
        self.assertEqual(
            {'CUSTOM_MIG_3G_40GB': 1},
            self._get_provider_usages(gpu_uuid) and {
                rc: n for rc, n in
                self._get_provider_usages(gpu_uuid).items() if n})
        cards = self.resources['gpu']['cards']
        cards[:] = [c for c in cards if c.get('pci_address') != '0000:00:09.0']
        self.host_changed()
        self._run_periodics(raise_on_error=True)
        children = self._children()
        self.assertEqual({'CUSTOM_MIG_3G_40GB': (1, 1),
                          'CUSTOM_MIG_2G_20GB': (1, 1),
                          'CUSTOM_MIG_1G_10GB': (2, 2)}, children[GPU][1])
        self.assertIn(server['id'], self.stdlog.logger.output)
        self._delete_server(server)
        self._run_periodics(raise_on_error=True)
        self.assertNotIn(GPU, self._children())
