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

"""A GPU spawn, walked as it runs (doc/source/admin/code-layout.rst).

A server of a MIG flavor boots through nova's API, scheduler, Placement and
compute on the recorded H100 host; the driver's ``spawn`` runs under
:class:`tools.spawn_walk.Walk`. Every hop from ``driver.spawn`` to the
daemon's create must be named at its call site, so that an editor's
go-to-definition follows the spawn all the way.
``NOVA_LXD_ACCEL_SPAWN_WALK=<file>`` writes the walk and its counts there
(the numbers code-layout.rst gives).
"""

import os

import fixtures

from tests.fixtures import gpu_gate_host
from tools import spawn_walk


class TestSpawnWalk(gpu_gate_host.GpuHostTestCase):

    def test_a_gpu_spawn_can_be_followed_by_name_to_the_create(self):
        driver = self.computes[gpu_gate_host.HOST].driver
        walk = spawn_walk.Walk('nova_lxd_accel', 'LXDDriver.spawn',
                               target='LXDClient.create_container')
        spawn = driver.spawn

        def walked(*args, **kwargs):
            # in the thread that runs the spawn: the profile is per thread
            with walk:
                return spawn(*args, **kwargs)

        self.useFixture(fixtures.MonkeyPatch(
            'nova_lxd_accel.driver.LXDDriver.spawn',
            lambda self, *a, **kw: walked(*a, **kw)))
        server = self.boot(self.flavor(
            **{'resources:CUSTOM_MIG_1G_10GB': '1'}))
        self.assertEqual('ACTIVE', server['status'])
        out = os.environ.get('NOVA_LXD_ACCEL_SPAWN_WALK')
        if out:
            with open(out, 'w') as f:
                f.write(walk.report())
        chain = walk.chain()
        self.assertTrue(chain, walk.report())
        self.assertEqual('nova_lxd_accel.driver', chain[0].caller_module)
        self.assertEqual('nova_lxd_accel.client.instances',
                         chain[-1].callee_module)
        self.assertEqual([], walk.unnamed_hops(), walk.report())
        # the claim ran inside the walk, through the gate's claim seam
        modules = walk.modules()
        for module in ('accel.binding.claims', 'accel.binding.pick',
                       'accel.health.gate'):
            self.assertIn('nova_lxd_accel.' + module, modules)
