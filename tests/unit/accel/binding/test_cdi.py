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

"""Binding by CDI id on daemons with ``gpu_cdi``.

Expected device dicts are written by hand from canonical/lxd
``lxd/device/cdi/id.go``, ``gpu_physical.go`` and ``gpu_mig.go`` (tag
lxd-6.2, commit 01c912bf) and ``doc/api-extensions.md``
(``gpu_mig_cdi``); see :mod:`nova_lxd_accel.accel.binding.cdi`.
"""

import json

from nova_lxd_accel.accel.binding import cdi
from nova_lxd_accel.accel.binding import pick
from nova_lxd_accel.accel import units
from nova_lxd_accel.container import identity
from nova_lxd_accel import exception
from tests.fixtures import binding
from tests.fixtures import gpu_hosts

CDI = cdi.NvidiaBinding(cdi=True)
MIG_CDI = cdi.NvidiaBinding(cdi=True, mig_cdi=True)
H100 = binding.H100
A100_0 = binding.A100_0
GPU_10 = 'cmp1_gpu_0000_10_00_0'


class TestCdiWholeGpu(binding.BindingTestBase):

    resources = staticmethod(binding.eight_gpus)

    def test_pinned_by_uuid(self):
        result = pick.bind(self.alloc((GPU_10, 'PGPU', 1)),
                           self.inventory.device_for_provider,
                           nvidia=CDI)
        self.assertEqual(
            {'nova-gpu0': {
                'type': 'gpu', 'gputype': 'physical',
                'id': 'nvidia.com/gpu=GPU-00000000-0000-0000-0000-'
                      '000000000000'}}, result.devices)
        # the unit stays the PCI address: records of both modes agree
        record = json.loads(result.config[identity.KEY_DEVICES])[0]
        self.assertEqual('pci:0000:10:00.0', record['unit'])
        self.assertEqual('nvidia.com/gpu=GPU-00000000-0000-0000-0000-'
                         '000000000000', record['cdi_id'])
        # LXD refuses a CDI id next to nvidia.runtime=true (a flavor's
        # lxd:gpu_runtime): the binding turns it off
        self.assertEqual('false', result.config['nvidia.runtime'])

    def test_never_all_never_an_index(self):
        allocations = self.alloc(*[('cmp1_gpu_0000_1%d_00_0' % i, 'PGPU', 1)
                                   for i in range(8)])
        result = pick.bind(allocations,
                           self.inventory.device_for_provider,
                           nvidia=CDI)
        ids = [d['id'] for d in result.devices.values()]
        self.assertEqual(8, len(set(ids)))
        for cdi_id in ids:
            name = cdi_id.split('=', 1)[1]
            self.assertRegex(name, r'^GPU-[0-9a-f-]{36}$')

    def test_hand_made_cdi_device_is_held(self):
        # A container with only the device (no binding record, as an
        # operator would add it) holds that GPU: the next bind skips it.
        first = pick.bind(self.alloc((GPU_10, 'PGPU', 1)),
                          self.inventory.device_for_provider, nvidia=CDI)
        held = units.held_units(
            [{'name': 'by-hand', 'config': {}, 'devices': first.devices}],
            host_devices=self.inventory.all_devices())
        self.assertEqual({'pci:0000:10:00.0': ['by-hand']}, held)
        self.assertRaises(exception.AcceleratorUnavailable, pick.bind,
                          self.alloc((GPU_10, 'PGPU', 1)),
                          self.inventory.device_for_provider, held,
                          nvidia=CDI)

    def test_runtime_mode_unchanged(self):
        result = pick.bind(self.alloc((GPU_10, 'PGPU', 1)),
                           self.inventory.device_for_provider,
                           nvidia=cdi.RUNTIME)
        self.assertEqual({'type': 'gpu', 'gputype': 'physical',
                          'pci': '0000:10:00.0'},
                         result.devices['nova-gpu0'])
        self.assertNotIn('nvidia.runtime', result.config)

    def test_default_is_runtime(self):
        # no process-wide mode: a caller that names none binds by PCI
        result = self.bind(self.alloc((GPU_10, 'PGPU', 1)))
        self.assertNotIn('id', result.devices['nova-gpu0'])
        self.assertEqual('0000:10:00.0', result.devices['nova-gpu0']['pci'])


class TestCdiMig(binding.BindingTestBase):

    resources = staticmethod(gpu_hosts.mixed_host)
    mig_text = gpu_hosts.load_text('nvsmi-h100-80gb-mig-4slices-L.txt')

    def test_gpu_cdi_daemon(self):
        # LXD 5.21.3 .. 6.9: gputype=mig still needs nvidia.runtime, so the
        # MIG device goes through gputype=physical by its CDI name
        result = pick.bind(self.alloc((H100, 'CUSTOM_MIG_1G_10GB', 2)),
                           self.inventory.device_for_provider,
                           nvidia=CDI)
        self.assertEqual({
            'nova-mig0': {'type': 'gpu', 'gputype': 'physical',
                          'id': 'nvidia.com/gpu=MIG-00000002-0000-0000-'
                                '0000-000000000002'},
            'nova-mig1': {'type': 'gpu', 'gputype': 'physical',
                          'id': 'nvidia.com/gpu=MIG-00000003-0000-0000-'
                                '0000-000000000003'}}, result.devices)
        self.assertEqual('false', result.config['nvidia.runtime'])
        self.assertEqual({'mig:00000002-0000-0000-0000-000000000002',
                          'mig:00000003-0000-0000-0000-000000000003'},
                         {r['unit'] for r in result.records()})

    def test_hand_made_cdi_mig_devices_are_held(self):
        for mode in (CDI, MIG_CDI):
            first = pick.bind(
                self.alloc((H100, 'CUSTOM_MIG_1G_10GB', 1)),
                self.inventory.device_for_provider, nvidia=mode)
            held = units.held_units(
                [{'name': 'by-hand', 'config': {},
                  'devices': first.devices}],
                host_devices=self.inventory.all_devices())
            self.assertEqual(
                {'mig:00000002-0000-0000-0000-000000000002': ['by-hand']},
                held)
            second = pick.bind(
                self.alloc((H100, 'CUSTOM_MIG_1G_10GB', 1)),
                self.inventory.device_for_provider, held, nvidia=mode)
            self.assertIn('MIG-00000003',
                          second.devices['nova-mig0']['id'])

    def test_gpu_mig_cdi_daemon(self):
        result = pick.bind(self.alloc((H100, 'CUSTOM_MIG_1G_10GB', 1)),
                           self.inventory.device_for_provider,
                           nvidia=MIG_CDI)
        self.assertEqual(
            {'nova-mig0': {'type': 'gpu', 'gputype': 'mig',
                           'id': 'nvidia.com/mig=MIG-00000002-0000-0000-'
                                 '0000-000000000002'}}, result.devices)

    def test_held_unit_skipped_in_cdi_mode_too(self):
        held = {'mig:00000002-0000-0000-0000-000000000002': ['nova-x']}
        result = pick.bind(self.alloc((H100, 'CUSTOM_MIG_1G_10GB', 1)),
                           self.inventory.device_for_provider, held,
                           nvidia=CDI)
        self.assertEqual('nvidia.com/gpu=MIG-00000003-0000-0000-0000-'
                         '000000000003', result.devices['nova-mig0']['id'])

    def test_gpu_without_uuid_keeps_pci(self):
        # LXD has no nvidia section for this A100 (driver not bound): no
        # UUID to name, so it stays pinned by PCI address
        result = pick.bind(self.alloc((A100_0, 'PGPU', 1)),
                           self.inventory.device_for_provider,
                           nvidia=CDI)
        self.assertEqual({'type': 'gpu', 'gputype': 'physical',
                          'pci': '0000:07:00.0'},
                         result.devices['nova-gpu0'])
        self.assertNotIn('nvidia.runtime', result.config)


class TestCdiLegacyMig(binding.BindingTestBase):

    resources = staticmethod(binding.legacy_mig_host)
    mig_text = binding.LEGACY_MIG_TEXT

    def test_legacy_mig_refused_with_the_fix(self):
        error = self.assertRaises(
            exception.AcceleratorNotBindable, pick.bind,
            self.alloc((A100_0, 'CUSTOM_MIG_1G_5GB', 1)),
            self.inventory.device_for_provider, nvidia=CDI)
        self.assertIn('pre-R470 identifier, which CDI cannot name',
                      str(error))
        self.assertIn('nvidia_binding = runtime', str(error))
