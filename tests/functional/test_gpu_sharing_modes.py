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

"""One sharing mode per card, through nova's own cloud and real Placement.

The recorded mixed host's two A100s are both shared in 2 slots: the first
(``0000:07:00.0``) with MPS quotas, the second (``0000:85:00.0``)
time-sliced. Flavors require the trait of their mode, as ``nova-lxd-accel
flavors`` writes them; a flavor made without it reaches the spawn-time
check. GPU devices are recorded and stripped by the LXD proxy; the rest,
the MPS mounts included, reaches the real daemon.
"""

import os

import fixtures
import nova.conf

from nova_lxd_accel import conf
from nova_lxd_accel.extra_specs import sharing_modes
from tests.fixtures import accel_servers
from tests.fixtures import claim_servers
from tests.fixtures import gpu_hosts

QUOTA_PCI = '0000:07:00.0'
TIMESLICE_PCI = '0000:85:00.0'
QUOTA_RP = accel_servers.HOST + '_gpu_0000_07_00_0'
TIMESLICE_RP = accel_servers.HOST + '_gpu_0000_85_00_0'
SHARE_RC = 'CUSTOM_GPU_SHARE'
MEMORY_RC = 'CUSTOM_GPU_MEMORY_MB'
QUOTA_TRAIT = 'CUSTOM_GPU_SHARING_QUOTA'
TIMESLICE_TRAIT = 'CUSTOM_GPU_SHARING_TIMESLICE'
QUOTA_MIB = 8192


class SharingModeTest(claim_servers.ClaimTestBase):

    host_resources = staticmethod(gpu_hosts.mixed_host)
    mig_text = accel_servers.H100_MIG_L

    def setUp(self):
        conf.register_opts(nova.conf.CONF)
        mps_root = self.useFixture(fixtures.TempDir()).path
        # the operator's MPS daemon of the quota'd card made these
        os.makedirs(os.path.join(mps_root, 'mps-' + QUOTA_PCI))
        os.makedirs(os.path.join(mps_root, 'shm-' + QUOTA_PCI))
        self.flags(shared_gpus=['%s:2:quota' % QUOTA_PCI,
                                '%s:2:timeslice' % TIMESLICE_PCI],
                   mps_pipe_directory=os.path.join(mps_root, 'mps-{pci}'),
                   mps_shm_directory=os.path.join(mps_root, 'shm-{pci}'),
                   group='lxd_accelerators')
        super().setUp()
        self.flags(max_attempts=1, group='scheduler')

    def share_flavor(self, quota, with_trait=True):
        """A share flavor; with its mode's trait, as the helper makes it."""
        specs = {'resources:%s' % SHARE_RC: '1'}
        if quota:
            # slot and memory from one GPU: one numbered request group
            specs = {'resources1:%s' % SHARE_RC: '1',
                     'resources1:%s' % MEMORY_RC: str(QUOTA_MIB),
                     'lxd:gpu_memory_mb': str(QUOTA_MIB),
                     # MPS serves one host user: no isolated id map
                     'lxd:isolated_idmap': 'false'}
        if with_trait:
            mode = (sharing_modes.MODE_QUOTA if quota
                    else sharing_modes.MODE_TIMESLICE)
            specs[sharing_modes.mode_trait_key(mode)] = 'required'
        return self.flavor(**specs)

    def usages(self):
        return {name: self._get_provider_usages(self.rp(name))
                for name in (QUOTA_RP, TIMESLICE_RP)}

    def boot_all(self, flavor, count):
        return [self.wait_built(self.post(flavor)) for _ in range(count)]

    def test_each_card_reports_its_mode(self):
        traits = {name: set(self._get_provider_traits(self.rp(name)))
                  for name in (QUOTA_RP, TIMESLICE_RP)}
        self.assertIn(QUOTA_TRAIT, traits[QUOTA_RP])
        self.assertNotIn(TIMESLICE_TRAIT, traits[QUOTA_RP])
        self.assertIn(TIMESLICE_TRAIT, traits[TIMESLICE_RP])
        self.assertNotIn(QUOTA_TRAIT, traits[TIMESLICE_RP])
        # both offer slots and memory: only the trait keeps them apart
        for name in (QUOTA_RP, TIMESLICE_RP):
            self.assertEqual(
                {SHARE_RC, MEMORY_RC},
                set(self._get_provider_inventory(self.rp(name))))

    def test_time_sliced_flavor_never_lands_on_the_quota_card(self):
        servers = self.boot_all(self.share_flavor(quota=False), 3)
        self.assertEqual(['ACTIVE', 'ACTIVE', 'ERROR'],
                         [s['status'] for s in servers])
        # the quota card had two free slots: Placement never offered it
        self.assertIn('No valid host', servers[2]['fault']['message'])
        self.assertEqual(
            {QUOTA_RP: {SHARE_RC: 0, MEMORY_RC: 0},
             TIMESLICE_RP: {SHARE_RC: 2, MEMORY_RC: 0}}, self.usages())
        for server in servers[:2]:
            self.assertEqual({TIMESLICE_RP: {SHARE_RC: 1}},
                             self.accel_allocations(server))
            self.assertNotIn('environment.CUDA_MPS_PIPE_DIRECTORY',
                             self.record(server)['config'])

    def test_quota_flavor_never_lands_on_the_time_sliced_card(self):
        servers = self.boot_all(self.share_flavor(quota=True), 3)
        self.assertEqual(['ACTIVE', 'ACTIVE', 'ERROR'],
                         [s['status'] for s in servers])
        self.assertIn('No valid host', servers[2]['fault']['message'])
        self.assertEqual(
            {QUOTA_RP: {SHARE_RC: 2, MEMORY_RC: 2 * QUOTA_MIB},
             TIMESLICE_RP: {SHARE_RC: 0, MEMORY_RC: 0}}, self.usages())
        for server in servers[:2]:
            # slot and memory from the same card
            self.assertEqual(
                {SHARE_RC: 1, MEMORY_RC: QUOTA_MIB},
                self._get_allocations_by_server_uuid(server['id'])[
                    self.rp(QUOTA_RP)]['resources'])
            self.assertEqual('0=%dM' % QUOTA_MIB, self.record(server)[
                'config']['environment.CUDA_MPS_PINNED_DEVICE_MEM_LIMIT'])

    def assert_refused_and_nothing_left(self, server, card_mode, mode):
        self.assertEqual('ERROR', server['status'])
        message = server['fault']['message']
        self.assertIn('shared in %s mode' % card_mode, message)
        # what to fix, within the 255 characters nova keeps of a fault
        self.assertIn('must require %s=required'
                      % sharing_modes.mode_trait_key(mode), message)
        self.assertEqual({}, self._get_allocations_by_server_uuid(
            server['id']))
        self.assertNotIn('nova-%s' % server['id'], self.container_names())

    def test_spawn_refuses_a_flavor_without_its_trait(self):
        # the time-sliced card full, a time-sliced flavor made by hand
        # (no trait) is offered the quota card, and spawn refuses it
        full = self.boot_all(self.share_flavor(quota=False), 2)
        self.assertEqual(['ACTIVE'] * 2, [s['status'] for s in full])
        server, = self.boot_all(self.share_flavor(quota=False,
                                                  with_trait=False), 1)
        self.assert_refused_and_nothing_left(
            server, sharing_modes.MODE_QUOTA, sharing_modes.MODE_TIMESLICE)
        self.assertEqual(
            {QUOTA_RP: {SHARE_RC: 0, MEMORY_RC: 0},
             TIMESLICE_RP: {SHARE_RC: 2, MEMORY_RC: 0}}, self.usages())
        for each in full:
            self._delete_server(each)
        # the reverse: the quota card full, a quota flavor without trait
        full = self.boot_all(self.share_flavor(quota=True), 2)
        self.assertEqual(['ACTIVE'] * 2, [s['status'] for s in full])
        server, = self.boot_all(self.share_flavor(quota=True,
                                                  with_trait=False), 1)
        self.assert_refused_and_nothing_left(
            server, sharing_modes.MODE_TIMESLICE, sharing_modes.MODE_QUOTA)
        self.assertEqual(
            {QUOTA_RP: {SHARE_RC: 2, MEMORY_RC: 2 * QUOTA_MIB},
             TIMESLICE_RP: {SHARE_RC: 0, MEMORY_RC: 0}}, self.usages())
        self.assertEqual(2, len(self.container_names()))
