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

"""Detection of MPS v3 memory partitioning (cgroup v2 dmem, driver r615).

The version lines are the formats of NVIDIA's proprietary and open kernel
modules; the 615 and dmem.capacity inputs are written by hand after
NVIDIA's documentation (no such host was at hand).
"""

import os

import fixtures
import testtools

from nova_lxd_accel.accel.inventory import mps_partitioning

V590 = ('NVRM version: NVIDIA UNIX x86_64 Kernel Module  590.48.01  Mon Dec  '
        '1 19:33:53 UTC 2025\nGCC version:  gcc version 12.2.0\n')
V615_OPEN = ('NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  '
             '615.10  Release Build  (builder@host)  Tue Sep  1 00:00:00 '
             'UTC 2026\n')
CGROUP = 'cpuset cpu io memory hugetlb pids rdma misc\n'
CGROUP_DMEM = 'cpuset cpu io memory hugetlb pids rdma misc dmem\n'
CAPACITY = 'nvidia/0000:07:00.0/vidmem 85899345920\n'


class PartitioningTest(testtools.TestCase):

    def test_driver_major(self):
        self.assertEqual(590, mps_partitioning.driver_major(V590))
        self.assertEqual(615, mps_partitioning.driver_major(V615_OPEN))
        self.assertIsNone(mps_partitioning.driver_major(None))

    def test_old_driver(self):
        level, reasons = mps_partitioning.partitioning(
            CGROUP_DMEM, CAPACITY, V590)
        self.assertEqual(mps_partitioning.NONE, level)
        self.assertEqual(['NVIDIA driver 590 is older than r615 (CUDA '
                          '13.4)'], reasons)

    def test_no_cgroup2_no_driver(self):
        level, reasons = mps_partitioning.partitioning(None, None, None)
        self.assertEqual(mps_partitioning.NONE, level)
        self.assertEqual(2, len(reasons))

    def test_driver_without_dmem(self):
        self.assertEqual(mps_partitioning.DRIVER,
                         mps_partitioning.partitioning(
                             CGROUP, None, V615_OPEN)[0])
        # dmem on, but the driver registered no region
        self.assertEqual(mps_partitioning.DRIVER,
                         mps_partitioning.partitioning(
                             CGROUP_DMEM,
                             'drm/0000:03:00.0/vram0 8573157376\n',
                             V615_OPEN)[0])

    def test_kernel_enforced(self):
        self.assertEqual(
            (mps_partitioning.KERNEL,
             ['dmem regions: nvidia/0000:07:00.0/vidmem']),
            mps_partitioning.partitioning(CGROUP_DMEM, CAPACITY, V615_OPEN))

    def test_probe_reads_the_files(self):
        root = self.useFixture(fixtures.TempDir()).path
        files = {mps_partitioning.CONTROLLERS: CGROUP_DMEM,
                 mps_partitioning.DMEM_CAPACITY: CAPACITY,
                 mps_partitioning.DRIVER_VERSION: V615_OPEN}
        for path, text in files.items():
            os.makedirs(os.path.dirname(root + path), exist_ok=True)
            with open(root + path, 'w') as f:
                f.write(text)
        self.assertEqual(mps_partitioning.KERNEL, mps_partitioning.probe(
            lambda path: mps_partitioning._read(root + path))[0])
        self.assertEqual(mps_partitioning.NONE, mps_partitioning.probe(
            lambda path: mps_partitioning._read(root + '/nothing' + path))[0])
