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

"""GPU flavors from the inventory, created and used through nova's API.

The proposals come from the running driver's own inventory of the recorded
H100 + GT 730 host (``tests.fixtures.gpu_gate_host.GpuHostTestCase``); they
are created through the compute API at microversion 2.86, where nova checks
every extra spec with the registered validators, and servers boot from
them through the real scheduler and Placement.
"""

from nova_lxd_accel.advice import flavor_proposals
from nova_lxd_accel.cmd import flavors
from tests.fixtures import extra_spec_api
from tests.fixtures import gpu_gate_host


class TestGpuFlavors(gpu_gate_host.GpuHostTestCase):

    def setUp(self):
        super().setUp()
        self.admin = self.api_fixture.admin_api
        self.admin.microversion = '2.86'
        self.addCleanup(setattr, self.admin, 'microversion', None)

    def proposals(self):
        driver = self.computes[gpu_gate_host.HOST].driver
        snapshot = driver._parts.gate.last_snapshot
        memory = {pci: g.memory_total_mib for pci, g in snapshot.gpus.items()}
        return flavor_proposals.propose(
            driver._parts.inventory.reported_gpus(), memory,
            vcpus=1, ram=128, disk=0)

    def test_created_flavors_boot_on_their_gpus(self):
        proposals = self.proposals()
        self.assertEqual(['g1.geforce-gt-730', 'g1.h100-80gb-hbm3-1g.10gb',
                          'g1.h100-80gb-hbm3-2g.20gb',
                          'g1.h100-80gb-hbm3-3g.40gb'],
                         [p.name for p in proposals])
        api = gpu_gate_host.ApiFlavors(self.admin)
        self.assertEqual([p.name for p in proposals],
                         flavors.create(proposals, api))
        # a second run creates nothing
        self.assertEqual([], flavors.create(proposals, api))
        by_name = {f['name']: f for f in self.admin.get_flavors()}
        mig = by_name['g1.h100-80gb-hbm3-1g.10gb']
        specs = self.admin.get_flavor(mig['id'])['extra_specs']
        self.assertEqual({
            'Accelerator:Type': 'GPU', 'Accelerator:Vendor': 'NVIDIA',
            'Accelerator:Model': 'H100 80GB HBM3 MIG 1g.10gb',
            'Accelerator:Number': '1', 'Accelerator:Memory': '10240',
            'Accelerator:VirtualizationType': 'MIG',
            'resources:CUSTOM_MIG_1G_10GB': '1',
            'trait:CUSTOM_GPU_MODEL_NVIDIA_H100_80GB_HBM3': 'required',
            'lxd:gpu_runtime': 'nvidia',
            # 1 of the H100's 7 compute slices (APEL Count, through the
            # project's cASO extractor)
            'accounting:accelerator_count': '1/7'}, specs)
        self.assertIn('10 GB of its 80 GB', mig['description'])
        whole = self.admin.get_flavor(by_name['g1.geforce-gt-730']['id'])
        self.assertEqual('passthrough', whole['extra_specs'][
            'Accelerator:VirtualizationType'])
        self.assertEqual('2001', whole['extra_specs']['Accelerator:Memory'])
        for name in ('g1.h100-80gb-hbm3-1g.10gb', 'g1.geforce-gt-730'):
            server = self.boot(by_name[name]['id'])
            self.assertEqual('ACTIVE', server['status'])

    def _post(self, flavor_id, specs, microversion):
        return extra_spec_api.post(self.admin, flavor_id, specs,
                                   microversion)

    def test_accelerator_keys_are_validated(self):
        flavor_id = self._create_flavor(memory_mb=128, vcpu=1, disk=0)
        for key, value in (('Accelerator:Numbr', '1'),
                           ('Accelerator:Number', '0.5'),
                           ('Accelerator:Number', '0'),
                           ('Accelerator:Type', 'gpu'),
                           ('Accelerator:VirtualizationType', 'mig'),
                           ('Accelerator:Memory', '10GB')):
            extra_spec_api.assert_refused_from_2_86(
                self, self.admin, flavor_id, key, value)
        self._post(flavor_id, {'Accelerator:Number': '7',
                               'Accelerator:Type': 'GPU'}, '2.86')
