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


"""The density bench's attribution of a boot's time (nova-compute's log)."""

import importlib.util
import os

import testtools

_PATH = os.path.join(os.path.dirname(__file__), '..', '..', '..',
                     'benchmarks', 'bench_sandbox_density.py')
_SPEC = importlib.util.spec_from_file_location('bench_sandbox_density',
                                               _PATH)
density = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(density)

ONE = 'cbd9bdf5-9685-4eb1-9736-5f1acc077d0b'
OTHER = 'd8ac082a-1eaf-4e23-993b-80da5d86a31c'
_PREFIX = ('%s 10797 INFO nova.compute.%s [None req-601f4353-65b0-416a-b524-'
           '388fef302f1e 696ed68b45da4177841965ec66136b45 7d24fb518e154d1bb3f1'
           'b83c4323c5ee - - default default] [instance: %s] ')
# as nova-compute 34 wrote them in the sandbox
LOG = '\n'.join([
    _PREFIX % ('2026-11-26 18:02:40.100', 'manager', ONE) +
    'Attempting claim: memory 64 MB, disk 1 GB, vcpus 1 CPU',
    _PREFIX % ('2026-11-26 18:02:42.310', 'claims', ONE) +
    'Claim successful on node vm',
    _PREFIX % ('2026-11-26 18:02:42.898', 'manager', ONE) +
    'Took 0.42 seconds to spawn the instance on the hypervisor.',
    _PREFIX % ('2026-11-26 18:02:42.932', 'manager', ONE) +
    'Took 2.80 seconds to build instance.',
    # another server's boot, not asked for
    _PREFIX % ('2026-11-26 18:03:12.457', 'claims', OTHER) +
    'Claim successful on node vm',
])


class BootPhasesTest(testtools.TestCase):

    def test_claim_counts_from_the_build_start(self):
        phases = density.boot_phases(LOG, {ONE})
        self.assertEqual({ONE}, set(phases))
        self.assertEqual(2.8, phases[ONE]['build'])
        self.assertEqual(0.42, phases[ONE]['spawn'])
        # built at 42.932 after 2.80 s: started at 40.132, claimed 42.310
        self.assertAlmostEqual(2.178, phases[ONE]['claim'], places=3)

    def test_a_boot_without_all_its_lines_is_left_out(self):
        self.assertEqual({}, density.boot_phases(LOG, {OTHER}))

    def test_split_of_a_wave(self):
        phases = density.boot_phases(LOG, {ONE})
        where = density.split({ONE: 9.0}, phases)
        self.assertAlmostEqual(6.2, where['before'])
        self.assertAlmostEqual(2.178, where['claim'], places=3)
        self.assertEqual(0.42, where['spawn'])
        self.assertAlmostEqual(2.8 - 2.178 - 0.42, where['other'], places=3)

    def test_nothing_measured_gives_none(self):
        self.assertEqual({'before': None, 'claim': None, 'spawn': None,
                          'other': None, 'build': None},
                         density.split({}, {}))
