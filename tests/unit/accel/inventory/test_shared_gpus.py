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

"""``[lxd_accelerators] shared_gpus`` as an operator writes it.

``test_sharing`` and ``test_sharing_modes`` cover the plain forms, a PCI
address winning over a model for the slots, most malformed entries and
the mode of a card found by address, model or product. Here: spaces and
case an operator may type, model names matched whatever their
punctuation, an option left empty, the error message that says how to
write an entry, and an address entry winning over a model entry for the
sharing mode too.
"""

import testtools

from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel.inventory import shared_gpus

PCI = '0000:3b:00.0'


class TestParse(testtools.TestCase):

    def test_spaces_and_case_around_the_fields_are_accepted(self):
        by_pci, by_model = shared_gpus.parse_shared_gpus(
            [' NVIDIA A10 : 8 : Quota ', '\t3B:00.0:2:TimeSlice\n'])
        self.assertEqual({'NVIDIA_A10': shared_gpus.SharedGpu(8, 'quota')},
                         by_model)
        self.assertEqual({PCI: shared_gpus.SharedGpu(2, 'timeslice')},
                         by_pci)

    def test_an_empty_option_shares_nothing(self):
        for entries in (None, [], ['', '  ']):
            self.assertEqual(({}, {}),
                             shared_gpus.parse_shared_gpus(entries))
            self.assertEqual(0, shared_gpus.shared_slots(
                entries, PCI, 'NVIDIA A10'))

    def test_slots_must_be_a_positive_whole_number(self):
        for bad in ('NVIDIA_A10:-2', 'NVIDIA_A10:1.5', 'NVIDIA_A10:',
                    'NVIDIA_A10:2:'):
            self.assertRaises(ValueError, shared_gpus.parse_shared_gpus,
                              ['NVIDIA_H100:4', bad])

    def test_the_error_says_which_entry_and_how_to_write_it(self):
        error = self.assertRaises(
            ValueError, shared_gpus.parse_shared_gpus,
            ['NVIDIA_H100:4', 'NVIDIA_A10:8:qouta'])
        self.assertEqual(
            "[lxd_accelerators] shared_gpus: 'NVIDIA_A10:8:qouta' is not "
            "<PCI address or model>:<slots>[:quota|timeslice]", str(error))


class TestMatching(testtools.TestCase):

    def test_a_model_matches_whatever_its_punctuation_and_case(self):
        entries = ['nvidia-a100-sxm4-80gb:4']
        self.assertEqual(4, shared_gpus.shared_slots(
            entries, PCI, 'NVIDIA A100-SXM4-80GB'))
        self.assertEqual(0, shared_gpus.shared_slots(
            entries, PCI, 'NVIDIA A100-SXM4-40GB'))

    def test_an_address_matches_whatever_its_form(self):
        entries = ['0000:3B:00.0:3']
        self.assertEqual([3, 3, 0], [
            shared_gpus.shared_slots(entries, pci, None)
            for pci in ('3b:00.0', '0000:3b:00.0', '0000:3b:00.1')])

    def test_a_gpu_without_model_matches_only_by_address(self):
        self.assertEqual(0, shared_gpus.shared_slots(
            ['NVIDIA_A10:8'], PCI, None))

    def test_the_address_entry_gives_the_mode_too(self):
        entries = ['NVIDIA_A10:8:quota', '3b:00.0:2:timeslice']
        gpu = devices.Gpu(pci_address=PCI, model='NVIDIA A10')
        other = devices.Gpu(pci_address='0000:af:00.0', model='NVIDIA A10')
        self.assertEqual(['timeslice', 'quota'],
                         [shared_gpus.card_mode(entries, g)
                          for g in (gpu, other)])
