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

"""k whole GPUs in one request, through nova, on an 8-GPU host.

The default layout (``[lxd_accelerators] pool_whole_gpus``): the eight
identical cards of a composed HGX-like host (the recorded H100 card eight
times, 0-3 on NUMA node 0, 4-7 on node 1, served at LXD's HTTP boundary
by the proxy) are one provider with ``PGPU`` total 8. And the upgrade: a
host that ran servers with one provider per card restarts with pools.
"""

import json

from nova_lxd_accel.container import identity
from tests.fixtures import accel_servers
from tests.fixtures import gpu_hosts

HOST = accel_servers.HOST
POOL = HOST + '_gpu_pool_10de_2330'
PCIS = ['0000:1%d:00.0' % i for i in range(8)]


def hgx_host():
    return {'gpu': {'cards': gpu_hosts.hgx_eight_gpu_cards(), 'total': 8},
            'network': {'cards': [], 'total': 0}}


class PoolTestBase(accel_servers.AccelTestBase):

    host_resources = staticmethod(hgx_host)
    mig_text = ''

    def setUp(self):
        super().setUp()
        self.flags(instances=-1, cores=-1, ram=-1, group='quota')

    def cards(self, server):
        return sorted(d['pci'] for d in self.accel_devices(server).values())

    def gpu_allocations(self, server):
        """{provider name: PGPU} of the server's allocations."""
        names = {p['uuid']: p['name'] for p in self.placement.get(
            '/resource_providers', version='1.14').body[
                'resource_providers']}
        return {names[rp]: alloc['resources']['PGPU']
                for rp, alloc in self._get_allocations_by_server_uuid(
                    server['id']).items()
                if 'PGPU' in alloc['resources']}


class GpuPoolTest(PoolTestBase):

    pool_whole_gpus = True

    def post(self, flavor_id):
        return self.api.post_server({'server': self._build_server(
            image_uuid=self.image_id, flavor_id=flavor_id,
            networks='none')})

    def test_the_whole_host_in_one_group(self):
        inventory = self.placement.get(
            '/resource_providers/%s/inventories' % self.rp(POOL),
            version='1.14').body['inventories']
        self.assertEqual((8, 8), (inventory['PGPU']['total'],
                                  inventory['PGPU']['max_unit']))
        eight = self.flavor(**{'resources:PGPU': '8'})
        server = self.boot(eight)
        self.assertEqual(PCIS, self.cards(server))
        self.assertEqual({POOL: 8}, self.gpu_allocations(server))
        # recorded card by card under the pool's provider
        record = json.loads(self.container_of(server)['config'][
            identity.KEY_DEVICES])
        self.assertEqual({(self.rp(POOL), 'pci:' + pci) for pci in PCIS},
                         {(r['provider'], r['unit']) for r in record})
        # the host is full: a second one, or one more GPU, finds no host
        second = self.boot(eight, expected='ERROR')
        self.assertIn('No valid host', second['fault']['message'])
        one = self.boot(self.flavor(**{'resources:PGPU': '1'}),
                        expected='ERROR')
        self.assertIn('No valid host', one['fault']['message'])
        # freed, verified clean: schedulable again at once
        self.delete_and_wait_for_allocations(server)
        again = self.boot(eight)
        self.assertEqual(PCIS, self.cards(again))
        self._delete_server(again)
        self.assert_released(again)

    def test_two_halves_at_once_each_on_one_numa_node(self):
        four = self.flavor(**{'resources:PGPU': '4'})
        servers = [self.post(four) for _ in range(2)]
        final = [self._wait_until_built(s) for s in servers]
        self.assertEqual(['ACTIVE', 'ACTIVE'],
                         [s['status'] for s in final],
                         [s.get('fault') for s in final])
        halves = sorted(self.cards(s) for s in final)
        # disjoint, and each all on one NUMA node
        self.assertEqual([PCIS[:4], PCIS[4:]], halves)
        # a ninth GPU
        ninth = self.boot(self.flavor(**{'resources:PGPU': '1'}),
                          expected='ERROR')
        self.assertIn('No valid host', ninth['fault']['message'])
        for server in final:
            self.delete_and_wait_for_allocations(server)
        self.assertEqual([], self.container_names())
        self.assertEqual({}, self.proxy.all_fake_devices(self.lxd.name))
        self.assertEqual(0, self._get_provider_usages(
            self.rp(POOL)).get('PGPU', 0))


class UpgradeToPoolsTest(PoolTestBase):
    """Servers booted on one provider per card; the compute restarts."""

    def test_restart_with_pools_moves_the_allocations(self):
        two = self.flavor(**{'resources1:PGPU': '1', 'resources2:PGPU': '1',
                             'group_policy': 'isolate'})
        server = self.boot(two)
        before = self.cards(server)
        self.assertEqual(2, len(before))
        card_providers = {HOST + '_gpu_' + pci.replace(':', '_').replace(
            '.', '_') for pci in before}
        self.assertEqual({name: 1 for name in card_providers},
                         self.gpu_allocations(server))

        self.flags(pool_whole_gpus=True, group='lxd_accelerators')
        # a new driver, as a real restart (the servers stay on the daemon)
        self.compute = self.restart_compute_service(
            self.compute, keep_hypervisor_state=False)

        # the same cards, counted in the pool now
        self.assertEqual(before, self.cards(server))
        self.assertEqual({POOL: 2}, self.gpu_allocations(server))
        for name in card_providers:
            self.assertIsNone(self._get_provider_uuid_by_name_or_none(name))
        # the record names the pool's provider
        record = json.loads(self.container_of(server)['config'][
            identity.KEY_DEVICES])
        self.assertEqual({self.rp(POOL)}, {r['provider'] for r in record})
        # a new boot gets six others; the pool is then full
        six = self.boot(self.flavor(**{'resources:PGPU': '6'}))
        self.assertEqual(set(), set(self.cards(six)) & set(before))
        self.boot(self.flavor(**{'resources:PGPU': '1'}), expected='ERROR')
        for s in (server, six):
            self.delete_and_wait_for_allocations(s)
        self.assertEqual({}, self.proxy.all_fake_devices(self.lxd.name))
        self.assertEqual(0, self._get_provider_usages(
            self.rp(POOL)).get('PGPU', 0))
