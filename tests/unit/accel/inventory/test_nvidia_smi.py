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

import os
import stat

import fixtures
from oslotest import base

from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel.inventory import nvidia_smi
from tests.fixtures import gpu_hosts

# Compute-instance sub-profiles: two MIG devices share GPU instance 1
# (nvidia-smi -L of a GH200 split with 1c.3g.71gb, hand-written in the
# documented format) next to a non-MIG GPU.
CI_PROFILES = """\
GPU 0: NVIDIA GH200 480GB (UUID: GPU-11111111-2222-3333-4444-555555555555)
  MIG 1c.3g.71gb  Device  0: (UUID: MIG-aaaaaaaa-0000-5000-8000-000000000001)
  MIG 1c.3g.71gb  Device  1: (UUID: MIG-aaaaaaaa-0000-5000-8000-000000000002)
  MIG 1g.12gb+me  Device  2: (UUID: MIG-aaaaaaaa-0000-5000-8000-000000000003)
GPU 1: NVIDIA H100 PCIe (UUID: GPU-66666666-7777-8888-9999-000000000000)
"""


class TestParseList(base.BaseTestCase):

    def test_new_format_padded(self):
        gpus = nvidia_smi.parse_list(
            gpu_hosts.load_text('mig-L-a100-sxm4-80gb-7x1g10gb.txt'))
        self.assertEqual(1, len(gpus))
        self.assertEqual('NVIDIA A100-SXM4-80GB', gpus[0].name)
        self.assertEqual('GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16',
                         gpus[0].uuid)
        self.assertEqual(7, len(gpus[0].mig_devices))
        first = gpus[0].mig_devices[0]
        self.assertEqual(devices.MigDevice(
            profile='1g.10gb', uuid='MIG-feb88891-0321-5fef-9c87-d4af3b54259e',
            index=0, gpu_index=0), first)
        self.assertEqual(list(range(7)),
                         [m.index for m in gpus[0].mig_devices])

    def test_legacy_format_gives_gi_and_ci(self):
        gpus = nvidia_smi.parse_list(
            gpu_hosts.load_text(
                'mig-L-a100-sxm4-40gb-7x1g5gb-legacy-uuid.txt'))
        self.assertEqual(1, len(gpus))
        migs = gpus[0].mig_devices
        self.assertEqual([7, 8, 9, 11, 12, 13, 14], [m.gi for m in migs])
        self.assertEqual([0] * 7, [m.ci for m in migs])
        self.assertEqual(
            'MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/11/0', migs[3].uuid)
        self.assertEqual({'1g.5gb'}, {m.profile for m in migs})

    def test_h100_extract(self):
        gpus = nvidia_smi.parse_list(
            gpu_hosts.load_text('nvsmi-h100-80gb-mig-4slices-L.txt'))
        self.assertEqual(['3g.40gb', '2g.20gb', '1g.10gb', '1g.10gb'],
                         [m.profile for m in gpus[0].mig_devices])
        self.assertIsNone(gpus[0].mig_devices[0].gi)

    def test_captured_h200_whole_gpu(self):
        gpus = nvidia_smi.parse_list(
            gpu_hosts.load_text('nvsmi-h200-580-L.txt'))
        self.assertEqual(
            [(0, 'NVIDIA H200',
              'GPU-00000000-0000-0000-0000-0000000000c8', ())],
            [(g.index, g.name, g.uuid, g.mig_devices) for g in gpus])

    def test_compute_instance_profiles_and_suffixes(self):
        gpus = nvidia_smi.parse_list(CI_PROFILES)
        self.assertEqual(2, len(gpus))
        self.assertEqual(
            ['CUSTOM_MIG_1C_3G_71GB', 'CUSTOM_MIG_1C_3G_71GB',
             'CUSTOM_MIG_1G_12GB_ME'],
            [m.resource_class for m in gpus[0].mig_devices])
        self.assertEqual((), gpus[1].mig_devices)
        self.assertEqual(1, gpus[1].index)

    def test_noise_and_empty(self):
        self.assertEqual([], nvidia_smi.parse_list(''))
        self.assertEqual([], nvidia_smi.parse_list(None))
        self.assertEqual([], nvidia_smi.parse_list(
            'No devices were found\n'
            '  MIG 1g.5gb Device 0: (UUID: MIG-0000)\n'))

    def test_resource_class_names(self):
        self.assertEqual('CUSTOM_MIG_1G_10GB',
                         devices.mig_resource_class('1g.10gb'))
        self.assertEqual('CUSTOM_MIG_1G_10GB_ME',
                         devices.mig_resource_class('1g.10gb+me'))
        self.assertEqual('CUSTOM_MIG_1C_3G_71GB',
                         devices.mig_resource_class('1c.3g.71gb'))
        self.assertEqual('CUSTOM_MIG_4G_40GB_GFX',
                         devices.mig_resource_class('4g.40gb+gfx'))
        self.assertEqual('CUSTOM_MIG_1G_20GB_ME',
                         devices.mig_resource_class('1g.20gb-me'))


class TestRunList(base.BaseTestCase):
    """Runs real tiny scripts standing in for nvidia-smi."""

    def _script(self, body):
        tmp = self.useFixture(fixtures.TempDir()).path
        path = os.path.join(tmp, 'nvidia-smi')
        with open(path, 'w') as f:
            f.write('#!/bin/sh\n' + body + '\n')
        os.chmod(path, stat.S_IRWXU)
        return path

    def test_output(self):
        path = self._script('[ "$1" = "-L" ] && cat <<EOF\n%sEOF' %
                            CI_PROFILES)
        self.assertEqual(CI_PROFILES, nvidia_smi.run_list(path, 5))

    def test_absent_binary_means_no_mig(self):
        self.assertEqual('', nvidia_smi.run_list('/nonexistent/nvidia-smi'))

    def test_no_devices(self):
        path = self._script('echo "No devices were found"; exit 6')
        self.assertEqual('', nvidia_smi.run_list(path, 5))

    def test_failure_is_unknown(self):
        path = self._script('echo "NVIDIA-SMI has failed" >&2; exit 9')
        self.assertIsNone(nvidia_smi.run_list(path, 5))

    def test_timeout_is_unknown(self):
        path = self._script('exec sleep 5')
        self.assertIsNone(nvidia_smi.run_list(path, 0.2))
