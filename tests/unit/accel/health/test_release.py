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

"""The MPS server is not a tenant (issue 29 item 3).

The real probe runs a script printing recorded-format nvidia-smi output
(``samples/handmade-nvsmi-h100-mps-*``): the H100 of the capture with its
MPS server (``nvidia-cuda-mps-server``) and, in the second pair, one MPS
client. The release check, the usage and the idle report must not count
the server as a leftover process or as compute use.
"""

import testtools

from nova_lxd_accel.accel.health import gate_state
from nova_lxd_accel.accel.health import probe
from nova_lxd_accel.accel.health import release
from nova_lxd_accel.accel.inventory import compute_apps
from nova_lxd_accel.accel.inventory import nvidia_smi
from nova_lxd_accel.accel import units
from tests.fixtures import gate_harness
from tests.fixtures import gpu_hosts

H100 = gate_harness.H100
INSTANCE = gate_harness.INSTANCE
SERVER_ONLY = ('handmade-nvsmi-h100-mps-server-query-gpu.csv',
               'handmade-nvsmi-h100-mps-server-compute-apps.csv')
WITH_CLIENT = ('handmade-nvsmi-h100-mps-client-query-gpu.csv',
               'handmade-nvsmi-h100-mps-client-compute-apps.csv')
IDLE = ('nvsmi-h100-80gb-idle-query-gpu.csv',
        'nvsmi-h100-80gb-idle-compute-apps.csv')


class TestParse(testtools.TestCase):

    def test_mps_server_is_known(self):
        apps = compute_apps.parse(
            gpu_hosts.load_text(WITH_CLIENT[1]))
        self.assertEqual(
            [(11402, 'nvidia-cuda-mps-server', 30, True),
             (11433, '/usr/bin/python3', 4112, False)],
            [(a.pid, a.name, a.used_memory_mib, a.is_mps_server)
             for a in apps[H100]])
        self.assertEqual([11433],
                         [a.pid for a in nvidia_smi.tenant_apps(apps[H100])])

    def test_by_its_name_with_a_path_too(self):
        app = nvidia_smi.ComputeApp(
            H100, 1, '/usr/bin/nvidia-cuda-mps-server', 30)
        self.assertTrue(app.is_mps_server)
        for name in ('nvidia-cuda-mps-control', 'my-nvidia-cuda-mps-server',
                     ''):
            self.assertFalse(nvidia_smi.ComputeApp(H100, 1, name,
                                                   30).is_mps_server)


class TestMpsServerIsNotATenant(gate_harness.GateTestCase):
    """A slot of a shared H100 quota'd with MPS."""

    def setUp(self):
        super().setUp()
        self.gate.refresh()                 # baseline: 0 MiB while free

    def dirty(self):
        return self.gate.store.load()['dirty']

    def share_with_a_client_then_leave(self):
        """A slot's tenant computes, then its container goes."""
        self.containers = [gate_harness.share_container(0, INSTANCE)]
        self.host(*WITH_CLIENT)
        self.now += 60
        self.gate.refresh()
        self.containers = []

    def test_released_card_with_its_mps_server_is_clean(self):
        # the last sharer leaves; the MPS server stays, as MPS does
        self.share_with_a_client_then_leave()
        self.host(*SERVER_ONLY)
        self.now += 60
        self.gate.refresh()
        self.assertEqual({}, self.dirty())
        self.assertEqual('clean',
                         self.gate.store.load()['events'][-1]['event'])

    def test_a_client_left_behind_holds_the_card(self):
        self.share_with_a_client_then_leave()
        self.now += 60
        self.gate.refresh()
        holding = self.dirty()[units.share_key(H100, 0)]['holding']
        self.assertIn('/usr/bin/python3 (pid 11433, 4112 MiB)', holding)
        self.assertNotIn('nvidia-cuda-mps-server', holding)
        # the client gone, the server stays: clean
        self.host(*SERVER_ONLY)
        self.now += 60
        self.gate.refresh()
        self.assertEqual({}, self.dirty())

    def test_memory_of_the_server_counts_beyond_the_tolerance(self):
        # its name sets no memory apart: above the tolerance it holds
        self.override('release_memory_tolerance_mib', 16)
        self.containers = [gate_harness.share_container(0, INSTANCE)]
        self.now += 60
        self.gate.refresh()
        self.containers = []
        self.host(*SERVER_ONLY)
        self.now += 60
        self.gate.refresh()
        holding = self.dirty()[units.share_key(H100, 0)]['holding']
        self.assertIn('30 MiB of GPU memory in use (baseline 0 MiB)',
                      holding)
        self.assertIn('the MPS server nvidia-cuda-mps-server (pid 11402, '
                      '30 MiB)', holding)

    def test_only_the_mps_server_is_idle_not_busy(self):
        self.override('idle_report_after', 1800)
        self.containers = [gate_harness.share_container(0, INSTANCE)]
        self.host(*SERVER_ONLY)
        self.now += 1800
        self.gate.refresh()
        self.now += 1800
        self.gate.refresh()
        state = self.gate.store.load()
        unit = state['usage'][INSTANCE]['units'][units.share_key(H100, 0)]
        self.assertEqual((1800.0, 0.0), (unit['allocated_s'],
                                         unit['busy_s']))
        self.assertEqual([INSTANCE], [u['instance'] for u in
                                      gate_state.idle_units(
                                          state, self.conf, self.now)])
        # a client computing is busy again
        self.host(*WITH_CLIENT)
        self.now += 600
        self.gate.refresh()
        state = self.gate.store.load()
        self.assertEqual([], gate_state.idle_units(state, self.conf,
                                                   self.now))

    def test_baseline_is_taken_while_only_the_server_runs(self):
        self.host(*SERVER_ONLY)
        state = gate_state.empty_state()
        snapshot = self.gate._probe.snapshot()
        release.update_baselines(state, {}, snapshot, {})
        self.assertEqual({H100: 30}, state['baseline'])
        self.host(*WITH_CLIENT)
        snapshot = self.gate._probe.snapshot()
        release.update_baselines(state, {}, snapshot, {})
        # a tenant's process on it: no baseline from that probe
        self.assertEqual({H100: 30}, state['baseline'])


class TestLostGpu(testtools.TestCase):
    """A GPU nvidia-smi reports lost lists nothing: never clean (46, 8)."""

    def holding(self, unit):

        snapshot = probe.Snapshot(
            taken_at=0.0, available=True,
            gpus={H100: nvidia_smi.GpuFacts(
                pci_address=H100,
                lost='Unable to determine the device handle for GPU '
                     '0000:00:09.0: GPU is lost')},
            apps={}, mig={})
        state = {'baseline': {}}
        return release.holding(unit, snapshot, {}, state,
                               gpu_hosts.make_conf())

    def test_a_released_mig_slice_of_a_lost_gpu_stays_dirty(self):
        why = self.holding({'kind': units.KIND_MIG, 'pci': H100,
                            'mig_uuid': None, 'resource_class':
                            'CUSTOM_MIG_1G_10GB'})
        self.assertIn('GPU is lost', why)

    def test_a_released_whole_lost_gpu_stays_dirty(self):
        why = self.holding({'kind': units.KIND_PGPU, 'pci': H100,
                            'resource_class': 'PGPU'})
        self.assertIn('GPU is lost', why)
