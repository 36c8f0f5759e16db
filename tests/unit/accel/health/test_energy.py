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

"""Apportioning a board's power to the units bound on it, and energy."""

import fractions

import testtools

from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel.health import energy
from nova_lxd_accel.accel.health import probe
from nova_lxd_accel.accel.inventory import nvidia_smi
from nova_lxd_accel.accel import units

PCI = '0000:00:09.0'
MIG_1G = 'MIG-aaaaaaaa-0000-4000-8000-000000000001'
MIG_3G = 'MIG-aaaaaaaa-0000-4000-8000-000000000003'


def h100(**kw):
    kw.setdefault('mig_devices', (
        devices.MigDevice('1g.10gb', MIG_1G, 0, 0),
        devices.MigDevice('3g.40gb', MIG_3G, 1, 0)))
    return devices.Gpu(pci_address=PCI, vendor_id='10de', driver='nvidia',
                       model='NVIDIA H100 80GB HBM3', **kw)


def snap(watts, available=True, lost=None):
    facts = nvidia_smi.GpuFacts(pci_address=PCI, power_draw_w=watts,
                                name='NVIDIA H100 80GB HBM3', lost=lost)
    return probe.Snapshot(1000.0, available, {PCI: facts}, {})


def unit(kind, **kw):
    return dict({'kind': kind, 'pci': PCI}, **kw)


class TestShares(testtools.TestCase):

    def test_whole_gpu_is_the_card(self):
        self.assertEqual(700.0, energy.unit_power(
            unit(units.KIND_PGPU), snap(700.0), {PCI: h100()}))

    def test_mig_slice_is_its_compute_slices(self):
        known = {PCI: h100()}
        self.assertEqual(100.0, energy.unit_power(
            unit(units.KIND_MIG, mig_uuid=MIG_1G), snap(700.0), known))
        self.assertAlmostEqual(300.0, energy.unit_power(
            unit(units.KIND_MIG, mig_uuid=MIG_3G), snap(700.0), known))

    def test_shared_slot_is_its_share(self):
        self.assertEqual(fractions.Fraction(1, 4), energy.unit_share(
            unit(units.KIND_SHARE), h100(mig_devices=(), shared_slots=4)))
        self.assertEqual(50.0, energy.unit_power(
            unit(units.KIND_SHARE), snap(200.0),
            {PCI: h100(mig_devices=(), shared_slots=4)}))

    def test_idle_draw_is_apportioned_too(self):
        # nothing runs: the slice still carries its share of the draw
        self.assertEqual(10.0, energy.unit_power(
            unit(units.KIND_MIG, mig_uuid=MIG_1G), snap(70.0),
            {PCI: h100()}))

    def test_unknown_share_is_no_power(self):
        self.assertIsNone(energy.unit_power(
            unit(units.KIND_MIG, mig_uuid='MIG-gone'), snap(700.0),
            {PCI: h100()}))
        self.assertIsNone(energy.unit_power(
            unit(units.KIND_SHARE), snap(700.0),
            {PCI: h100(mig_devices=())}))
        self.assertIsNone(energy.unit_power(
            unit(units.KIND_MIG, mig_uuid=MIG_1G), snap(700.0), {}))

    def test_no_reading_is_no_power_never_zero(self):
        known = {PCI: h100()}
        whole = unit(units.KIND_PGPU)
        self.assertIsNone(energy.unit_power(whole, snap(None), known))
        self.assertIsNone(energy.unit_power(whole, snap(700.0, False),
                                            known))
        self.assertIsNone(energy.unit_power(whole, snap(700.0, lost='lost'),
                                            known))
        self.assertIsNone(energy.unit_power(
            dict(whole, pci='0000:07:00.0'), snap(700.0), known))


class TestAccount(testtools.TestCase):

    def test_mean_of_two_readings_times_the_interval(self):
        record = {}
        energy.account(record, 100.0, None, 1000.0, 0.0)
        self.assertEqual((0.0, 0.0, 100.0, 1000.0),
                         (record['energy_j'], record['energy_s'],
                          record['power_w'], record['power_at']))
        energy.account(record, 300.0, 1000.0, 1060.0, 60.0)
        self.assertEqual((12000.0, 60.0), (record['energy_j'],
                                           record['energy_s']))

    def test_a_gap_is_not_interpolated_and_restarts_the_readings(self):
        record = {}
        energy.account(record, 100.0, None, 0.0, 0.0)
        energy.account(record, 300.0, 0.0, 36000.0, 36000.0, gap=True)
        self.assertEqual((0.0, 0.0, 300.0, 36000.0), (
            record[energy.ENERGY_J], record[energy.ENERGY_S],
            record[energy.POWER_W], record[energy.POWER_AT]))
        energy.account(record, 300.0, 36000.0, 36060.0, 60.0)
        self.assertEqual((300.0 * 60, 60.0), (record[energy.ENERGY_J],
                                              record[energy.ENERGY_S]))

    def test_an_interval_without_both_readings_adds_nothing(self):
        record = {}
        energy.account(record, 100.0, None, 1000.0, 0.0)
        energy.account(record, None, 1000.0, 1060.0, 60.0)
        self.assertEqual((0.0, None), (record['energy_j'],
                                       record.get('power_w')))
        # the reading after the gap starts a new interval
        energy.account(record, 100.0, 1060.0, 1120.0, 60.0)
        self.assertEqual(0.0, record['energy_j'])
        energy.account(record, 100.0, 1120.0, 1180.0, 60.0)
        self.assertEqual((6000.0, 60.0), (record['energy_j'],
                                          record['energy_s']))

    def test_a_reading_of_another_accounting_is_not_used(self):
        record = {'power_w': 100.0, 'power_at': 900.0, 'energy_j': 0.0,
                  'energy_s': 0.0}
        energy.account(record, 100.0, 1000.0, 1060.0, 60.0)
        self.assertEqual(0.0, record['energy_j'])

    def test_never_measured_records_stay_as_they_are(self):
        record = {'allocated_s': 5.0}
        energy.account(record, None, 1000.0, 1060.0, 60.0)
        self.assertEqual({'allocated_s': 5.0}, record)
