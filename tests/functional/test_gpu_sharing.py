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

"""Shared GPUs through nova's own cloud and real Placement.

The host is the recorded mixed host of :mod:`test_accel_binding` with its
first A100 (``0000:07:00.0``) shared in 2 slots. ``nvidia-smi`` is a
script printing recorded-format answers (the card's 81920 MiB come from
its ``--query-gpu``). GPU devices are recorded and stripped by the LXD
proxy; everything else, the MPS pipe mount and the MPS environment
included, reaches the real daemon, which starts the containers.
"""

import os

import fixtures
from nova.tests.functional.api import client as api_client

from nova_lxd_accel.accel.binding import pick
from tests.fixtures import shared_gpu_servers

SHARED_PCI = shared_gpu_servers.SHARED_PCI
SHARED_RP = shared_gpu_servers.SHARED_RP
SHARE_RC = shared_gpu_servers.SHARE_RC
MEMORY_RC = shared_gpu_servers.MEMORY_RC
CARD_MIB = shared_gpu_servers.CARD_MIB


class SharedGpuTest(shared_gpu_servers.SharedGpuTestBase):

    def test_inventory(self):
        inventory = self._get_provider_inventory(self.rp(SHARED_RP))
        self.assertEqual({SHARE_RC: 2, MEMORY_RC: CARD_MIB},
                         {rc: r['total'] for rc, r in inventory.items()})

    def test_two_slots_three_boots(self):
        self.race_first_claim()
        flavor = self.share_flavor()
        final = [self.wait_built(self.post(flavor)) for _ in range(3)]
        statuses = sorted(s['status'] for s in final)
        self.assertEqual(['ACTIVE', 'ACTIVE', 'ERROR'], statuses)
        failed = [s for s in final if s['status'] == 'ERROR'][0]
        self.assertIn('No valid host', failed['fault']['message'])
        active = [s for s in final if s['status'] == 'ACTIVE']
        slots = sorted(self.units(s)[0][1] for s in active)
        self.assertEqual(['share:%s/0' % SHARED_PCI,
                          'share:%s/1' % SHARED_PCI], slots)
        for server in active:
            self.assertEqual(
                [{'type': 'gpu', 'gputype': 'physical', 'pci': SHARED_PCI}],
                list(self.accel_devices(server).values()))
        self.assertEqual({SHARE_RC: 2, MEMORY_RC: 0},
                         self._get_provider_usages(self.rp(SHARED_RP)))
        for server in active:
            self._delete_server(server)
        self._delete_server(failed)
        self.assertEqual({SHARE_RC: 0, MEMORY_RC: 0},
                         self._get_provider_usages(self.rp(SHARED_RP)))
        self.assertEqual([], self.container_names())
        self.assertEqual({}, self.proxy.all_fake_devices(self.lxd.name))

    def test_memory_quota_never_over_committed(self):
        self.quota_mode()
        flavor = self.share_flavor(memory_mb=49152)
        first = self.wait_built(self.post(flavor))
        self.assertEqual('ACTIVE', first['status'], first.get('fault'))
        config = self.container_of(first)['config']
        pipe = os.path.join(self.mps_root, 'mps-' + SHARED_PCI)
        self.assertEqual(
            ('0=49152M', pipe),
            (config['environment.CUDA_MPS_PINNED_DEVICE_MEM_LIMIT'],
             config['environment.CUDA_MPS_PIPE_DIRECTORY']))
        # the pipe directory is a real mount the daemon accepted
        devices = self.container_of(first)['devices']
        self.assertEqual({'type': 'disk', 'source': pipe, 'path': pipe},
                         devices['mps-pipe'])
        self.assertEqual({'type': 'disk', 'path': '/dev/shm', 'source':
                          os.path.join(self.mps_root, 'shm-' + SHARED_PCI)},
                         devices['mps-shm'])
        # a slot is free, the memory is not: Placement refuses
        second = self.wait_built(self.post(flavor))
        self.assertEqual('ERROR', second['status'])
        self.assertIn('No valid host', second['fault']['message'])
        self.assertEqual({SHARE_RC: 1, MEMORY_RC: 49152},
                         self._get_provider_usages(self.rp(SHARED_RP)))

    def test_one_project_at_a_time(self):
        # a disk: only admins may boot zero-disk flavors from an image
        flavor = self.share_flavor(disk=1)
        first = self.wait_built(self.post(flavor))
        self.assertEqual('ACTIVE', first['status'], first.get('fault'))
        other = api_client.TestOpenStackClient(
            'fake', self.api.base_url, project_id='other-project',
            roles=['reader', 'member'])
        other.microversion = self.api.microversion
        server = other.post_server({'server': self._build_server(
            image_uuid=self.image_id, flavor_id=flavor, networks='none')})
        server = self.wait_built_by(other, server)
        # one host only: the reschedule finds no other
        self.assertEqual('ERROR', server['status'], server)
        # the fault says why, not just "no more hosts", without naming
        # the other project (the log does)
        self.assertIn('serves instances of another project',
                      server['fault']['message'])
        self.assertNotIn(self.api.project_id, server['fault']['message'])
        self.assertEqual({SHARE_RC: 1, MEMORY_RC: 0},
                         self._get_provider_usages(self.rp(SHARED_RP)))
        self.assertEqual(1, len(self.container_names()))
        self.flags(shared_gpu_any_project=True, group='lxd_accelerators')
        again = other.post_server({'server': self._build_server(
            image_uuid=self.image_id, flavor_id=flavor, networks='none')})
        again = self.wait_built_by(other, again)
        self.assertEqual('ACTIVE', again['status'], again.get('fault'))
        self.assertEqual(('gpu_share', 'share:%s/1' % SHARED_PCI,
                          'other-project'), self.units(again)[0])

    def test_resize_between_shared_and_whole_gpu(self):
        shared = self.share_flavor()
        whole = self.flavor(**{'resources:PGPU': '1'})
        server = self.wait_built(self.post(shared))
        self.assertEqual('ACTIVE', server['status'], server.get('fault'))
        self.assertEqual('gpu_share', self.units(server)[0][0])
        # to the whole A100 (the other one: the shared one is never PGPU)
        server = self._resize_server(server, whole)
        server = self._confirm_resize(server)
        self.assertEqual([('pgpu', 'pci:0000:85:00.0', None)],
                         self.units(server))
        self.assertEqual({SHARE_RC: 0, MEMORY_RC: 0},
                         self._get_provider_usages(self.rp(SHARED_RP)))
        # and back to a slot, which is free again
        server = self._resize_server(server, shared)
        server = self._confirm_resize(server)
        self.assertEqual('gpu_share', self.units(server)[0][0])
        self.assertEqual({SHARE_RC: 1, MEMORY_RC: 0},
                         self._get_provider_usages(self.rp(SHARED_RP)))
        self._delete_server(server)
        self.assertEqual([], self.container_names())

    def test_cold_migration_keeps_one_slot(self):
        # one compute: nova migrates to the same host (the driver
        # supports it), so the source and the destination share the card
        self.quota_mode()
        flavor = self.share_flavor(memory_mb=8192)
        server = self.wait_built(self.post(flavor))
        self.assertEqual('ACTIVE', server['status'], server.get('fault'))
        name = 'nova-%s' % server['id']
        source_slot = self.units(server)[0][1]
        self.assertEqual({source_slot: ['%s/%s' % (self.lxd.name, name)]},
                         self.held_slots())

        server = self._migrate_server(server)
        # until confirmed the kept original holds its slot, the moved
        # instance the other one; Placement counts both (migration and
        # instance consumers)
        backup = 'nova-resize-%s' % server['id']
        dest_slot = self.units(server)[0][1]
        self.assertNotEqual(source_slot, dest_slot)
        self.assertEqual({source_slot: ['%s/%s' % (self.lxd.name, backup)],
                          dest_slot: ['%s/%s' % (self.lxd.name, name)]},
                         self.held_slots())
        self.assertEqual({SHARE_RC: 2, MEMORY_RC: 2 * 8192},
                         self._get_provider_usages(self.rp(SHARED_RP)))

        server = self._confirm_resize(server)
        self.assertEqual([name], self.container_names())
        self.assertEqual({dest_slot: ['%s/%s' % (self.lxd.name, name)]},
                         self.held_slots())
        self.assertEqual({SHARE_RC: 1, MEMORY_RC: 8192},
                         self._get_provider_usages(self.rp(SHARED_RP)))
        # the source's slot is free again for the next instance
        self._run_periodics()
        self.assertEqual({SHARE_RC: (2, 0), MEMORY_RC: (CARD_MIB, 0)},
                         self.share_inventory())
        other = self.wait_built(self.post(flavor))
        self.assertEqual('ACTIVE', other['status'], other.get('fault'))
        self.assertEqual(source_slot, self.units(other)[0][1])
        for each in (server, other):
            self._delete_server(each)
        self.assertEqual({}, self.held_slots())
        self.assertEqual({SHARE_RC: 0, MEMORY_RC: 0},
                         self._get_provider_usages(self.rp(SHARED_RP)))

    def test_cold_migration_revert_keeps_one_slot(self):
        flavor = self.share_flavor()
        server = self.wait_built(self.post(flavor))
        self.assertEqual('ACTIVE', server['status'], server.get('fault'))
        name = 'nova-%s' % server['id']
        source_slot = self.units(server)[0][1]
        server = self._migrate_server(server)
        self.assertEqual(2, len(self.held_slots()))
        server = self._revert_resize(server)
        # the original is back with its slot; the destination's is free
        self.assertEqual([name], self.container_names())
        self.assertEqual({source_slot: ['%s/%s' % (self.lxd.name, name)]},
                         self.held_slots())
        self.assertEqual({SHARE_RC: 1, MEMORY_RC: 0},
                         self._get_provider_usages(self.rp(SHARED_RP)))
        self._delete_server(server)
        self.assertEqual({}, self.held_slots())
        self.assertEqual({SHARE_RC: 0, MEMORY_RC: 0},
                         self._get_provider_usages(self.rp(SHARED_RP)))


class SharedGpuStartFailsTest(shared_gpu_servers.SharedGpuTestBase):
    """The slot's device reaches the real daemon, which has no such GPU.

    The claim has recorded the slot in the container when LXD refuses to
    start it: the spawn must leave no holder of the slot behind, and give
    its allocation back.
    """

    strip_devices = False
    mode = 'quota'

    def test_start_fails_and_the_slot_is_released(self):
        claimed = []
        real_bind = pick.bind

        def bind(*args, **kwargs):
            # what the claim picked (under its lock, in the claim)
            bound = real_bind(*args, **kwargs)
            claimed.extend(u.key for u in bound.units)
            return bound

        self.useFixture(fixtures.MonkeyPatch(
            'nova_lxd_accel.accel.binding.pick.bind', bind))
        server = self.wait_built(self.post(self.share_flavor(
            memory_mb=8192)))
        self.assertEqual('ERROR', server['status'])
        # the failure came after the claim, from the daemon's start
        self.assertEqual(['share:%s/0' % SHARED_PCI], claimed)
        self.assertIn('refused to start', server['fault']['message'])
        self.assertIn('nova-gpushare0', server['fault']['message'])
        self.assertEqual([], self.container_names())
        self.assertEqual({}, self.held_slots())
        self.assertEqual({}, self._get_allocations_by_server_uuid(
            server['id']))
        self.assertEqual({SHARE_RC: 0, MEMORY_RC: 0},
                         self._get_provider_usages(self.rp(SHARED_RP)))
        # and nothing keeps it reserved once the host is read again
        self._run_periodics()
        self.assertEqual({SHARE_RC: (2, 0), MEMORY_RC: (CARD_MIB, 0)},
                         self.share_inventory())
