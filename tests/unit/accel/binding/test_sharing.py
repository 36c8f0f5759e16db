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

import json

import fixtures
from nova import objects
import testtools

from nova_lxd_accel.accel.binding import claims
from nova_lxd_accel.accel.binding import pick
from nova_lxd_accel.accel.binding import sharing
from nova_lxd_accel.accel.inventory import nvidia_smi
from nova_lxd_accel.accel.inventory import reporter
from nova_lxd_accel.accel.inventory import shared_gpus
from nova_lxd_accel.accel import units
from nova_lxd_accel.container import identity
from nova_lxd_accel import exception
from tests.fixtures import binding
from tests.fixtures import gpu_hosts

PCI = '0000:3b:00.0'


class ParseTest(testtools.TestCase):

    def test_by_pci_and_model(self):
        by_pci, by_model = shared_gpus.parse_shared_gpus(
            ['3b:00.0:4', 'NVIDIA A10:8:quota', ''])
        self.assertEqual({PCI: shared_gpus.SharedGpu(4, 'timeslice')}, by_pci)
        self.assertEqual({'NVIDIA_A10': shared_gpus.SharedGpu(8, 'quota')},
                         by_model)

    def test_pci_wins_over_model(self):
        entries = ['0000:3B:00.0:2', 'NVIDIA_A10:8']
        self.assertEqual(
            2, shared_gpus.shared_slots(entries, PCI, 'NVIDIA A10'))
        self.assertEqual(8, shared_gpus.shared_slots(entries, '0000:af:00.0',
                                                     'NVIDIA A10'))
        self.assertEqual(0, shared_gpus.shared_slots(entries, '0000:af:00.0',
                                                     'NVIDIA H100'))

    def test_malformed(self):
        for bad in ('NVIDIA_A10', 'NVIDIA_A10:0', 'NVIDIA_A10:x', ':4',
                    'NVIDIA_A10:8:quotas', '0000:3b:00.0:quota'):
            self.assertRaises(ValueError, shared_gpus.parse_shared_gpus, [bad])


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
            self.assertEqual({'type': 'disk', 'path': '/dev/shm',
                              'source': pipe + '-shm'}, devs['mps-shm'])
            env['environment.CUDA_MPS_PIPE_DIRECTORY'] = pipe
            self.assertEqual(env, config)

    def test_pipe_template(self):
        devs, config = sharing.lxd_config(PCI, 1024, None,
                                          pipe_template='/srv/mps/{pci}')
        self.assertEqual('/srv/mps/%s' % PCI,
                         config['environment.CUDA_MPS_PIPE_DIRECTORY'])


A100_SHARED = binding.A100_SHARED
A100_WHOLE = binding.A100_WHOLE
SHARED_RP = binding.SHARED_RP
WHOLE_RP = binding.WHOLE_RP
H100_RP = 'cmp1_gpu_0000_00_09_0'


def _probed(memory):
    """What the inventory is given of the GPU probe: each GPU's memory."""
    return {pci: nvidia_smi.GpuFacts(pci_address=pci, memory_total_mib=mib)
            for pci, mib in memory.items()}


class SharedInventoryTest(testtools.TestCase):
    """Shared and whole GPUs mixed on one recorded host."""

    def report(self, entries, memory=None):
        resources = gpu_hosts.mixed_host()
        conf = gpu_hosts.make_conf(shared_gpus=entries)
        inventory = reporter.AcceleratorInventory(
            lambda: resources,
            lambda: gpu_hosts.load_text('nvsmi-h100-80gb-mig-4slices-L.txt'),
            conf=conf, provider_allocations=lambda rp: {})
        tree = gpu_hosts.new_tree(gpu_hosts.NODE)
        # the probe's facts, passed with each call (the driver: the
        # gate's last probe)
        inventory.update_provider_tree(
            tree, gpu_hosts.NODE, {},
            probed_gpus=_probed(memory) if memory is not None else None)
        return inventory, tree

    def test_memory_probed_later_is_offered_at_the_next_update(self):
        inventory, tree = self.report(['%s:4' % A100_SHARED], memory={})
        self.assertNotIn('CUSTOM_GPU_MEMORY_MB',
                         tree.data(SHARED_RP).inventory)
        inventory.update_provider_tree(
            tree, gpu_hosts.NODE, {},
            probed_gpus=_probed({A100_SHARED: 81920}))
        self.assertEqual(81920, tree.data(SHARED_RP).inventory[
            'CUSTOM_GPU_MEMORY_MB']['total'])

    def test_shared_gpu_is_share_and_memory_never_pgpu(self):
        _, tree = self.report(['%s:4' % A100_SHARED],
                              memory={A100_SHARED: 81920})
        shared = tree.data(SHARED_RP)
        self.assertEqual({'CUSTOM_GPU_SHARE': 4,
                          'CUSTOM_GPU_MEMORY_MB': 81920},
                         {rc: r['total']
                          for rc, r in shared.inventory.items()})
        self.assertIn('CUSTOM_GPU_SHARED', shared.traits)
        # the other A100 stays whole, the H100 stays split into MIG devices
        self.assertEqual({'PGPU': 1},
                         {rc: r['total'] for rc, r in
                          tree.data(WHOLE_RP).inventory.items()})
        self.assertNotIn('CUSTOM_GPU_SHARED', tree.data(WHOLE_RP).traits)
        self.assertNotIn('PGPU', tree.data(H100_RP).inventory)

    def test_shared_by_model_and_mig_gpu_offered_whole(self):
        _, tree = self.report(['NVIDIA_H100_80GB_HBM3:7'], memory={})
        h100 = tree.data(H100_RP)
        # shared: not split into MIG devices; memory unknown: not offered
        self.assertEqual({'CUSTOM_GPU_SHARE': 7},
                         {rc: r['total'] for rc, r in
                          h100.inventory.items()})

    def test_bad_entry_is_refused(self):
        self.assertRaises(ValueError, self.report, ['NVIDIA_A10'])


class SharedBindingTest(binding.BindingTestBase):

    resources = staticmethod(gpu_hosts.mixed_host)
    mig_text = gpu_hosts.load_text('nvsmi-h100-80gb-mig-4slices-L.txt')

    def setUp(self):
        super().setUp()
        conf = gpu_hosts.make_conf(shared_gpus=['%s:2' % A100_SHARED])
        self.inventory, self.tree = gpu_hosts.report(
            gpu_hosts.mixed_host(), self.mig_text, conf=conf)

    def share(self, project='p1', **kw):
        # the card in the mode the flavor needs (test_sharing_modes)
        mode = 'quota' if kw.get('memory_mb') else 'timeslice'
        return pick.ShareRequest(
            project_id=project, shared_gpus=('%s:2:%s' % (A100_SHARED, mode),),
            **kw)

    def bind_share(self, share, held=None, records=()):
        share = claims.with_projects(share, list(records), None)
        return pick.bind(self.alloc((SHARED_RP, 'CUSTOM_GPU_SHARE', 1)),
                         self.inventory.device_for_provider, held,
                         share=share)

    def container(self, bound, name, project='default'):
        return {'name': name, 'project': project,
                'config': bound.config, 'devices': bound.devices}

    def test_slot_pinned_by_pci_time_slicing(self):
        bound = self.bind_share(self.share())
        self.assertEqual({'nova-gpushare0': {
            'type': 'gpu', 'gputype': 'physical', 'pci': A100_SHARED}},
            bound.devices)
        record = json.loads(bound.config[identity.KEY_DEVICES])[0]
        self.assertEqual(('gpu_share', 'share:%s/0' % A100_SHARED, 'p1'),
                         (record['kind'], record['unit'],
                          record['project_id']))
        self.assertNotIn('environment.CUDA_MPS_PIPE_DIRECTORY', bound.config)

    def test_mps_quota_in_devices_and_environment(self):
        bound = self.bind_share(self.share(memory_mb=4096,
                                           compute_percent=25))
        pipe = '/run/nvidia-mps-%s' % A100_SHARED
        self.assertEqual({'type': 'disk', 'source': pipe, 'path': pipe},
                         bound.devices['mps-pipe'])
        self.assertEqual('/dev/shm', bound.devices['mps-shm']['path'])
        self.assertEqual(
            ('0=4096M', '25', pipe),
            (bound.config['environment.CUDA_MPS_PINNED_DEVICE_MEM_LIMIT'],
             bound.config['environment.CUDA_MPS_ACTIVE_THREAD_PERCENTAGE'],
             bound.config['environment.CUDA_MPS_PIPE_DIRECTORY']))
        # the binding carries the variables its files are written from:
        # the same as its config gives the container's init
        self.assertEqual(
            {'CUDA_MPS_PINNED_DEVICE_MEM_LIMIT': '0=4096M',
             'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE': '25',
             'CUDA_MPS_PIPE_DIRECTORY': pipe}, bound.mps_variables)
        self.assertEqual({}, self.bind_share(self.share()).mps_variables)

    def test_slots_then_unavailable_then_freed(self):
        first = self.container(self.bind_share(self.share()), 'a')
        held = units.held_units([first])
        # the first sharer's own gpu device does not take the whole GPU
        self.assertNotIn('pci:' + A100_SHARED, held)
        second = self.container(
            self.bind_share(self.share(), held, [first]), 'b')
        self.assertEqual('share:%s/1' % A100_SHARED, json.loads(
            second['config'][identity.KEY_DEVICES])[0]['unit'])
        held = units.held_units([first, second])
        self.assertRaises(exception.AcceleratorUnavailable,
                          self.bind_share, self.share(), held,
                          [first, second])
        # slot 0 freed: the next claim gets it
        held = units.held_units([second])
        third = self.bind_share(self.share(), held, [second])
        self.assertEqual('share:%s/0' % A100_SHARED,
                         third.records()[0]['unit'])

    def test_one_project_at_a_time_unless_allowed(self):
        log = self.useFixture(fixtures.FakeLogger(
            name='nova_lxd_accel.accel.binding.pick'))
        first = self.container(self.bind_share(self.share('p1')), 'a')
        held = units.held_units([first])
        exc = self.assertRaises(exception.SharedGpuOtherProject,
                                self.bind_share, self.share('p2'), held,
                                [first])
        # the other project is named in the log, not in p2's fault
        self.assertIn('serves project(s) p1: not bound for project p2',
                      log.output)
        self.assertNotIn('p1', str(exc))
        # a reschedulable failure, as any unit that is not free here
        self.assertIsInstance(exc, exception.AcceleratorUnavailable)
        bound = self.bind_share(self.share('p2', any_project=True), held,
                                [first])
        self.assertEqual(1, bound.records()[0]['slot'])

    def test_quota_instances_never_share_across_projects(self):
        # a quota instance mounts the MPS daemon's /dev/shm read-write:
        # shared_gpu_any_project must not put two projects on it
        log = self.useFixture(fixtures.FakeLogger(
            name='nova_lxd_accel.accel.binding.pick'))
        first = self.container(
            self.bind_share(self.share('p1', memory_mb=4096)), 'a')
        held = units.held_units([first])
        exc = self.assertRaises(
            exception.SharedGpuMpsOtherProject, self.bind_share,
            self.share('p2', memory_mb=4096, any_project=True), held,
            [first])
        self.assertIn('never across projects', log.output)
        self.assertNotIn('p1', str(exc))
        self.assertIn('/dev/shm', str(exc))
        # reschedulable, and caught where the plain refusal is
        self.assertIsInstance(exc, exception.SharedGpuOtherProject)
        # the same project still shares the card
        bound = self.bind_share(self.share('p1', memory_mb=4096), held,
                                [first])
        self.assertEqual(1, bound.records()[0]['slot'])

    def test_foreign_holder_of_the_gpu_leaves_no_slot(self):
        foreign = {'name': 'by-hand', 'project': 'other', 'config': {},
                   'devices': {'g': {'type': 'gpu', 'pci': A100_SHARED}}}
        held = units.held_units([foreign])
        log = self.useFixture(fixtures.FakeLogger(
            name='nova_lxd_accel.accel.binding.pick'))
        exc = self.assertRaises(exception.AcceleratorUnavailable,
                                self.bind_share, self.share(), held)
        self.assertIn('other/by-hand', log.output)
        self.assertNotIn('by-hand', str(exc))

    def test_shared_gpu_is_never_bound_whole(self):
        self.assertRaises(exception.AcceleratorNotBindable, pick.bind,
                          self.alloc((SHARED_RP, 'PGPU', 1)),
                          self.inventory.device_for_provider)


class ShareRequestTest(testtools.TestCase):

    def test_from_flavor_and_options(self):
        objects.register_all()
        flavor = objects.Flavor(name='g', extra_specs={
            'lxd:gpu_memory_mb': '2048', 'lxd:gpu_compute_percent': '50'})
        instance = objects.Instance(flavor=flavor, project_id='p9')
        conf = gpu_hosts.make_conf(shared_gpu_any_project=True,
                                   shared_gpus=['0000:3b:00.0:4:quota'],
                                   mps_pipe_directory='/srv/mps/{pci}',
                                   mps_shm_directory='/srv/mps/{pci}/shm')
        self.assertEqual(
            pick.ShareRequest(project_id='p9', any_project=True,
                              memory_mb=2048, compute_percent=50,
                              mps_pipe='/srv/mps/{pci}',
                              mps_shm='/srv/mps/{pci}/shm',
                              shared_gpus=('0000:3b:00.0:4:quota',),
                              flavor='g'),
            claims.share_request(conf, instance))
