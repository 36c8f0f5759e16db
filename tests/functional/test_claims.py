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

"""Claims on providers of several units, through nova's own cloud.

Placement only counts MIG devices and InfiniBand VFs; the driver chooses which
one each server gets (:mod:`.binding.claims`). These tests boot
servers at once onto a GPU split into 7 MIG devices and an InfiniBand card with
8 VFs, against the real LXD daemon (the hardware is recorded, see
:mod:`tools.sandbox.venv.lxd_proxy`), and check that no unit is ever bound
twice, including units held by instances nova did not make.

Run them on native threads with ``OS_NOVA_DISABLE_EVENTLET_PATCHING=1``;
they pass on eventlet too.

The race is made certain rather than likely: the first claim's write
waits until another claim has picked its units (or 10 s have passed).
With the claim lock in place no other claim can pick in that time, so
the wait just runs out; without it, or with the record written after the
lock is released, the other claim picks from a daemon that does not show
the first claim yet, and takes the same units.
"""

import json
import uuid

from nova_lxd_accel.accel.binding import claims
from nova_lxd_accel.container import identity
from tests.fixtures import claim_servers
from tests.fixtures import lxd_fixtures

GPU_PCI = claim_servers.GPU_PCI
MIG_RP = claim_servers.MIG_RP
IB_RP = claim_servers.IB_RP
MIG_UUIDS = claim_servers.MIG_UUIDS
VF_NETDEVS = claim_servers.VF_NETDEVS
MIG_RC = claim_servers.MIG_RC
VF_RC = claim_servers.VF_RC


class ConcurrentClaimTest(claim_servers.ClaimTestBase):

    def test_every_unit_bound_once(self):
        self.race_first_claim()
        mixed = self.flavor(**{'resources1:%s' % MIG_RC: '1',
                               'resources2:%s' % VF_RC: '1',
                               'group_policy': 'none'})
        vf_only = self.flavor(**{'resources:%s' % VF_RC: '1'})
        mig_only = self.flavor(**{'resources:%s' % MIG_RC: '1'})
        # 7 x (MIG + VF) and 1 x VF: every unit of both providers
        servers = [self.post(mixed) for _ in range(7)] + [self.post(vf_only)]
        final = [self.wait_built(s) for s in servers]
        self.assertEqual(['ACTIVE'] * 8, [s['status'] for s in final],
                         [s.get('fault') for s in final])
        bound = self.bound_units()
        self.assertEqual({}, {u: n for u, n in bound.items() if len(n) > 1})
        self.assertEqual(sorted(MIG_UUIDS + VF_NETDEVS), sorted(bound))
        # each container's record says what it holds, and only that
        for server in final:
            record = json.loads(self.container_of(server)['config'][
                identity.KEY_DEVICES])
            self.assertEqual(len(self.units_of(server)), len(record))
        # Placement agrees: everything used
        self.assertEqual({MIG_RC: 7}, self._get_provider_usages(
            self.rp(MIG_RP)))
        self.assertEqual({VF_RC: 8}, self._get_provider_usages(
            self.rp(IB_RP)))
        # one more fails cleanly
        self.flags(max_attempts=1, group='scheduler')
        extra = self.wait_built(self.post(mig_only))
        self.assertEqual('ERROR', extra['status'])
        self.assertIn('No valid host', extra['fault']['message'])
        self.assertEqual(8, len(self.container_names()))
        # a freed unit is the next one bound
        victim = final[3]
        freed = self.units_of(victim)
        self._delete_server(victim)
        # (a periodic run, for anything that holds a freed unit back
        # until the next one, e.g. a verified release)
        self._run_periodics()
        again = self.wait_built(self.post(mixed))
        self.assertEqual('ACTIVE', again['status'])
        self.assertEqual(freed, self.units_of(again))
        bound = self.bound_units()
        self.assertEqual({}, {u: n for u, n in bound.items() if len(n) > 1})


class DurableClaimTest(claim_servers.ClaimTestBase):

    def test_restarted_compute_sees_the_recorded_claim(self):
        client = self.compute.driver._parts.client
        inventory = self.compute.driver._parts.inventory
        name = 'nova-%s' % uuid.uuid4()
        # a spawn that got as far as the claim: created, claimed, not
        # started, and then nova-compute died
        client.create_container(
            name, {}, {'root': {'type': 'disk', 'path': '/',
                                'pool': 'default'}}, [],
            source={'type': 'image',
                    'alias': self._cached_alias()})
        allocations = {self.rp(MIG_RP): {'resources': {MIG_RC: 1}}}
        first = claims.claim(client, name, allocations,
                             inventory.device_for_provider,
                             inventory.all_devices(),
                             project=self.lxd.name)
        # a new driver, as a new process would have (nothing kept in memory)
        self.compute = self.restart_compute_service(
            self.compute, keep_hypervisor_state=False)
        server = self.boot(self.flavor(**{'resources:%s' % MIG_RC: '1'}))
        taken = first.units[0].device['mig.uuid']
        self.assertEqual(MIG_UUIDS[0], taken)
        self.assertNotIn(taken, self.units_of(server))
        client = self.compute.driver._parts.client
        client.delete_container(name)
        self._delete_server(server)

    def _cached_alias(self):
        # boot once so the image is in LXD, then reuse its alias
        server = self.boot(self.flavor())
        alias = 'nova-image-%s' % self.image_id
        self._delete_server(server)
        return alias


class ForeignHolderTest(claim_servers.ClaimTestBase):
    """Units held by what nova did not make are never bound."""

    def setUp(self):
        super().setUp()
        # another project on the same daemon, written to directly (no
        # proxy: the real daemon validates and stores these devices)
        self.other = self.useFixture(lxd_fixtures.LXDProject('foreign'))
        self.proxy.show_project(self.other.name)
        self.profile = 'nlxa-ib-%s' % uuid.uuid4().hex[:8]
        admin = self.other.admin
        admin.api.profiles.post(json={
            'name': self.profile, 'config': {}, 'devices': {
                'ib': {'type': 'infiniband', 'nictype': 'physical',
                       'parent': VF_NETDEVS[0]}}})
        self.addCleanup(admin.api.profiles[self.profile].delete)
        for name, devices, profiles in (
                ('cli-mig', {'mig': {'type': 'gpu', 'gputype': 'mig',
                                     'pci': GPU_PCI,
                                     'mig.uuid': MIG_UUIDS[0]}},
                 ['default']),
                ('cli-ib', {}, ['default', self.profile])):
            response = self.other.client.api.instances.post(json={
                'name': name, 'type': 'container', 'source': {'type': 'none'},
                'devices': devices, 'profiles': profiles})
            self.other._wait(response)
            # before the project fixture removes the project
            self.addCleanup(self._delete_foreign, name)

    def boot_gets_the_units_the_foreign_ones_leave(self):
        """A server gets the second MIG slice and VF; then it is deleted.

        The foreign instances hold the first of each.
        """
        server = self.boot(self.flavor(**{
            'resources1:%s' % MIG_RC: '1', 'resources2:%s' % VF_RC: '1',
            'group_policy': 'none'}))
        self.assertEqual(sorted([MIG_UUIDS[1], VF_NETDEVS[1]]),
                         self.units_of(server))
        self._delete_server(server)

    def _delete_foreign(self, name):
        self.other._wait(self.other.client.api.instances[name].delete())

    def test_foreign_units_reserved_and_never_bound(self):
        self._run_periodics()
        inventory = self._get_provider_inventory(self.rp(MIG_RP))
        self.assertEqual(1, inventory[MIG_RC]['reserved'])
        self.assertEqual(1, self._get_provider_inventory(
            self.rp(IB_RP))[VF_RC]['reserved'])
        log = self.stdlog.logger.output
        self.assertIn('%s/cli-mig' % self.other.name, log)
        self.assertIn('%s/cli-ib' % self.other.name, log)
        # the first free units in binding order are the held ones
        self.boot_gets_the_units_the_foreign_ones_leave()

    def test_claim_skips_foreign_units_placement_does_not_know(self):
        # no periodic run since the foreign instances appeared: Placement
        # still offers every unit, the claim alone must skip theirs
        inventory = self._get_provider_inventory(self.rp(MIG_RP))
        self.assertEqual(0, inventory[MIG_RC]['reserved'])
        self.boot_gets_the_units_the_foreign_ones_leave()
