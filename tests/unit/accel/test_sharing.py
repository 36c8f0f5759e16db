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

"""Shared GPUs: the option's parser and the device/environment config."""

import testtools

from nova_lxd_accel.accel import sharing

PCI = '0000:3b:00.0'


class ParseTest(testtools.TestCase):

    def test_by_pci_and_model(self):
        by_pci, by_model = sharing.parse_shared_gpus(
            ['3b:00.0:4', 'NVIDIA A10:8', ''])
        self.assertEqual({PCI: 4}, by_pci)
        self.assertEqual({'NVIDIA_A10': 8}, by_model)

    def test_pci_wins_over_model(self):
        entries = ['0000:3B:00.0:2', 'NVIDIA_A10:8']
        self.assertEqual(2, sharing.shared_slots(entries, PCI, 'NVIDIA A10'))
        self.assertEqual(8, sharing.shared_slots(entries, '0000:af:00.0',
                                                 'NVIDIA A10'))
        self.assertEqual(0, sharing.shared_slots(entries, '0000:af:00.0',
                                                 'NVIDIA H100'))

    def test_malformed(self):
        for bad in ('NVIDIA_A10', 'NVIDIA_A10:0', 'NVIDIA_A10:x', ':4'):
            self.assertRaises(ValueError, sharing.parse_shared_gpus, [bad])


class LxdConfigTest(testtools.TestCase):

    def _gpu(self, devs):
        gpus = [d for d in devs.values() if d['type'] == 'gpu']
        self.assertEqual([{'type': 'gpu', 'gputype': 'physical',
                           'pci': PCI}], gpus)

    def test_no_quota_is_time_slicing(self):
        devs, config = sharing.lxd_config('3b:00.0')
        self._gpu(devs)
        self.assertEqual(1, len(devs))
        self.assertEqual({}, config)

    def test_each_quota_combination(self):
        pipe = '/run/nvidia-mps-%s' % PCI
        for memory, compute, env in (
                (4096, None,
                 {'environment.CUDA_MPS_PINNED_DEVICE_MEM_LIMIT': '0=4096M'}),
                (None, 25,
                 {'environment.CUDA_MPS_ACTIVE_THREAD_PERCENTAGE': '25'}),
                (4096, 25,
                 {'environment.CUDA_MPS_PINNED_DEVICE_MEM_LIMIT': '0=4096M',
                  'environment.CUDA_MPS_ACTIVE_THREAD_PERCENTAGE': '25'})):
            devs, config = sharing.lxd_config(PCI, memory, compute)
            self._gpu(devs)
            self.assertEqual({'type': 'disk', 'source': pipe, 'path': pipe},
                             devs['mps-pipe'])
            env['environment.CUDA_MPS_PIPE_DIRECTORY'] = pipe
            self.assertEqual(env, config)

    def test_pipe_template(self):
        devs, config = sharing.lxd_config(PCI, 1024, None,
                                          pipe_template='/srv/mps/{pci}')
        self.assertEqual('/srv/mps/%s' % PCI,
                         config['environment.CUDA_MPS_PIPE_DIRECTORY'])
