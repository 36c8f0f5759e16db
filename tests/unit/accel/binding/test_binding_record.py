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

"""What one claim bound (:mod:`.binding.binding_record`), unit by unit.

The whole path from Placement allocations to a binding is covered by
``test_pick``, ``test_cdi`` and ``test_sharing``; these tests take the
:class:`binding_record.Binding` on its own: the record it writes is the
one the rest of the driver reads back, its devices are the caller's to change,
the NVIDIA runtime option with mixed units, and the MPS quota of a shared
GPU as recorded in the unit's details.
"""

import logging

import fixtures
from oslo_log import log as oslo_logging
import testtools

from nova_lxd_accel.accel.binding import binding_record
from nova_lxd_accel.accel import units
from nova_lxd_accel.container import identity

GPU = '0000:07:00.0'
MIG_GPU = '0000:00:09.0'
MIG_UUID = 'MIG-00000002-0000-0000-0000-000000000002'
SHARED = '0000:3b:00.0'
INSTANCE = 'f0d1c2b3-0000-4000-8000-000000000001'


def whole_gpu(cdi_id=None):
    detail = {'cdi_id': cdi_id} if cdi_id else {}
    device = ({'type': 'gpu', 'gputype': 'physical', 'id': cdi_id}
              if cdi_id else
              {'type': 'gpu', 'gputype': 'physical', 'pci': GPU})
    return binding_record.Unit(
        name='nova-gpu0', kind=units.KIND_PGPU, resource_class='PGPU',
        provider='rp-a100', device_pci=GPU, key='pci:' + GPU,
        device=device, detail=detail)


def mig_slice():
    return binding_record.Unit(
        name='nova-mig0', kind=units.KIND_MIG,
        resource_class='CUSTOM_MIG_1G_10GB', provider='rp-h100',
        device_pci=MIG_GPU, key='mig:' + MIG_UUID[len('MIG-'):],
        device={'type': 'gpu', 'gputype': 'mig', 'pci': MIG_GPU,
                'mig.uuid': MIG_UUID},
        detail={'mig_uuid': MIG_UUID})


def ib_port():
    return binding_record.Unit(
        name='nova-ib0', kind=units.KIND_IB_PORT,
        resource_class='CUSTOM_IB_PORT', provider='rp-ib',
        device_pci='0000:4b:00.0', key='netdev:ibp75s0',
        device={'type': 'infiniband', 'nictype': 'physical',
                'parent': 'ibp75s0'},
        detail={'netdev': 'ibp75s0'})


def share(pci=SHARED, **detail):
    return binding_record.Unit(
        name='nova-gpushare0', kind=units.KIND_SHARE,
        resource_class='CUSTOM_GPU_SHARE', provider='rp-share',
        device_pci=pci, key=units.share_key(pci, 0),
        device={'type': 'gpu', 'gputype': 'physical', 'pci': pci},
        detail=dict({'slot': 0, 'project_id': 'proj-a'}, **detail))


class TestBindingRecord(testtools.TestCase):

    def test_record_is_read_back_as_the_units_the_container_holds(self):
        bound = binding_record.Binding(
            units=(whole_gpu(), mig_slice(), ib_port()))
        container = {'name': 'nova-' + INSTANCE, 'config': bound.config,
                     'devices': bound.devices}
        self.assertEqual(
            bound.records(),
            identity.recorded_units(container['config']))
        self.assertEqual(
            {'pci:' + GPU: ['nova-' + INSTANCE],
             'mig:' + MIG_UUID[len('MIG-'):]: ['nova-' + INSTANCE],
             'netdev:ibp75s0': ['nova-' + INSTANCE]},
            units.held_units([container]))

    def test_record_carries_the_units_details(self):
        record = mig_slice().record()
        self.assertEqual(
            {'name': 'nova-mig0', 'kind': 'mig',
             'resource_class': 'CUSTOM_MIG_1G_10GB', 'provider': 'rp-h100',
             'pci': MIG_GPU, 'unit': 'mig:' + MIG_UUID[len('MIG-'):],
             'mig_uuid': MIG_UUID}, record)

    def test_devices_are_a_copy_the_caller_may_change(self):
        unit = whole_gpu()
        bound = binding_record.Binding(units=(unit,))
        devices = bound.devices
        devices['nova-gpu0']['pci'] = '0000:99:00.0'
        devices['root'] = {'type': 'disk', 'path': '/'}
        self.assertEqual({'nova-gpu0': {'type': 'gpu', 'gputype': 'physical',
                                        'pci': GPU}}, bound.devices)
        self.assertEqual(GPU, unit.device['pci'])

    def test_infiniband_only_binding_sets_no_nvidia_option(self):
        config = binding_record.Binding(units=(ib_port(),)).config
        self.assertEqual([identity.KEY_DEVICES], list(config))

    def test_a_cdi_unit_turns_the_runtime_off_beside_a_mig_slice(self):
        # LXD refuses a CDI id while nvidia.runtime is true, even though
        # the MIG slice alone would need it on
        bound = binding_record.Binding(units=(
            mig_slice(), whole_gpu(cdi_id='nvidia.com/gpu=0')))
        self.assertEqual('false', bound.config['nvidia.runtime'])


class TestMpsQuota(testtools.TestCase):

    def test_share_without_a_pipe_gets_no_mps_devices(self):
        # a quota in the details without the MPS pipe: time-sliced
        bound = binding_record.Binding(units=(share(gpu_memory_mb=4096),))
        self.assertEqual(['nova-gpushare0'], list(bound.devices))
        self.assertEqual([identity.KEY_DEVICES], list(bound.config))
        self.assertEqual({}, bound.mps_variables)

    def test_quota_mounts_the_recorded_pipe_and_shm_directories(self):
        bound = binding_record.Binding(units=(share(
            pci='3B:00.0', gpu_memory_mb=8192, gpu_compute_percent=50,
            mps_pipe='/srv/mps/{pci}/pipe', mps_shm='/srv/mps/{pci}/shm'),))
        devices = bound.devices
        # the unit's own gpu device, not a second one for the same card
        self.assertEqual(['nova-gpushare0'],
                         [n for n, d in devices.items()
                          if d['type'] == 'gpu'])
        self.assertEqual(
            {'type': 'disk', 'source': '/srv/mps/0000:3b:00.0/pipe',
             'path': '/srv/mps/0000:3b:00.0/pipe'}, devices['mps-pipe'])
        self.assertEqual(
            {'type': 'disk', 'source': '/srv/mps/0000:3b:00.0/shm',
             'path': '/dev/shm'}, devices['mps-shm'])
        variables = {'CUDA_MPS_PIPE_DIRECTORY': '/srv/mps/0000:3b:00.0/pipe',
                     'CUDA_MPS_PINNED_DEVICE_MEM_LIMIT': '0=8192M',
                     'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE': '50'}
        self.assertEqual(variables, bound.mps_variables)
        self.assertEqual(
            variables,
            {k[len('environment.'):]: v for k, v in bound.config.items()
             if k.startswith('environment.')})

    def test_shm_directory_defaults_beside_the_pipe(self):
        bound = binding_record.Binding(units=(share(
            gpu_memory_mb=1024, mps_pipe='/run/nvidia-mps-{pci}'),))
        self.assertEqual('/run/nvidia-mps-%s-shm' % SHARED,
                         bound.devices['mps-shm']['source'])

    def test_only_the_share_carries_the_quota_beside_other_units(self):
        bound = binding_record.Binding(units=(
            ib_port(), share(gpu_compute_percent=25,
                             mps_pipe='/run/nvidia-mps-{pci}')))
        self.assertEqual({'CUDA_MPS_PIPE_DIRECTORY': '/run/nvidia-mps-' +
                          SHARED,
                          'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE': '25'},
                         bound.mps_variables)
        self.assertEqual({'nova-ib0', 'nova-gpushare0', 'mps-pipe',
                          'mps-shm'}, set(bound.devices))


class TestExpectedUsage(testtools.TestCase):

    def test_no_records_account_for_nothing(self):
        self.assertEqual({}, binding_record.expected_usage([]))

    def test_amounts_per_class_of_one_provider(self):
        bound = binding_record.Binding(units=(
            mig_slice(), mig_slice(), ib_port()))
        self.assertEqual(
            {'rp-h100': {'CUSTOM_MIG_1G_10GB': 2},
             'rp-ib': {'CUSTOM_IB_PORT': 1}},
            binding_record.expected_usage(bound.records()))


class TestLogBound(testtools.TestCase):

    def test_one_line_per_unit_names_the_host_device(self):
        log = self.useFixture(fixtures.FakeLogger(
            name='test_binding_record', level=logging.INFO))
        binding_record.log_bound(
            oslo_logging.getLogger('test_binding_record'),
            binding_record.Binding(units=(whole_gpu(), ib_port())),
            instance=None)
        self.assertEqual(
            ['Bound PGPU pci:%s of provider rp-a100 as LXD device '
             'nova-gpu0' % GPU,
             'Bound CUSTOM_IB_PORT netdev:ibp75s0 of provider rp-ib as '
             'LXD device nova-ib0'],
            log.output.splitlines())
