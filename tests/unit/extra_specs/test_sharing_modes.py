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

"""One sharing mode per shared GPU (issue 29 item 2), at unit level.

The option's mode, the trait on the GPU's provider, the flavors the helper
proposes for each mode, and the spawn-time check of a share against its
card. The end-to-end proof with real Placement is
``tests/functional/test_gpu_sharing_modes.py``.
"""

import dataclasses

from nova.api.validation.extra_specs import validators
from nova import objects
import testtools

from nova_lxd_accel.accel.binding import claims
from nova_lxd_accel.accel.binding import pick
from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel.inventory import reporter
from nova_lxd_accel.accel.inventory import shared_gpus
from nova_lxd_accel.advice import flavor_proposals
from nova_lxd_accel.container import builder
from nova_lxd_accel import exception
from nova_lxd_accel.extra_specs import lxd_keys
from nova_lxd_accel.extra_specs import sharing_modes
from tests.fixtures import binding
from tests.fixtures import gpu_hosts

A100_SHARED = binding.A100_SHARED
A100_WHOLE = binding.A100_WHOLE
SHARED_RP = binding.SHARED_RP
WHOLE_RP = binding.WHOLE_RP
QUOTA = 'CUSTOM_GPU_SHARING_QUOTA'
TIMESLICE = 'CUSTOM_GPU_SHARING_TIMESLICE'


class ModeOptionTest(testtools.TestCase):

    def test_mode_per_entry_default_time_sliced(self):
        entries = ['0000:07:00.0:4:quota', 'NVIDIA_A10:8',
                   '0000:85:00.0:2:TIMESLICE']
        by_pci, by_model = shared_gpus.parse_shared_gpus(entries)
        self.assertEqual(
            {'0000:07:00.0': shared_gpus.SharedGpu(4, 'quota'),
             '0000:85:00.0': shared_gpus.SharedGpu(2, 'timeslice')},
            by_pci)
        self.assertEqual({'NVIDIA_A10': shared_gpus.SharedGpu(8, 'timeslice')},
                         by_model)
        # the slots are read as before the mode existed
        self.assertEqual(4, shared_gpus.shared_slots(entries, '0000:07:00.0',
                                                     None))

    def test_card_mode_matches_as_discovery_does(self):
        entries = ['0000:07:00.0:2:quota', 'NVIDIA_A10:8:quota']
        by_pci = devices.Gpu(pci_address='0000:07:00.0', model='NVIDIA A10')
        by_product = devices.Gpu(pci_address='0000:3b:00.0',
                                 product='NVIDIA A10')
        unnamed = devices.Gpu(pci_address='0000:af:00.0')
        self.assertEqual(['quota', 'quota', 'timeslice'],
                         [shared_gpus.card_mode(entries, g)
                          for g in (by_pci, by_product, unnamed)])

    def test_flavor_mode_and_its_required_traits(self):
        self.assertEqual('quota', sharing_modes.flavor_mode(
            {'lxd:gpu_memory_mb': '4096'}))
        self.assertEqual('timeslice', sharing_modes.flavor_mode(
            {'resources:CUSTOM_GPU_SHARE': '1'}))
        self.assertEqual(
            {'quota': ['trait2:%s' % QUOTA]},
            sharing_modes.required_mode_traits({
                'trait2:%s' % QUOTA: 'required',
                'trait:%s' % TIMESLICE: 'forbidden',
                'trait:CUSTOM_GPU_SHARED': 'required'}))


class ModeTraitTest(testtools.TestCase):
    """The mode as a trait of the shared GPU's provider only."""

    def traits(self, entries, tree=None):
        conf = gpu_hosts.make_conf(shared_gpus=entries)
        _, tree = gpu_hosts.report(gpu_hosts.mixed_host(), gpu_hosts.load_text(
            'nvsmi-h100-80gb-mig-4slices-L.txt'), conf=conf, tree=tree)
        return tree, {rp: set(tree.data(rp).traits)
                      for rp in (SHARED_RP, WHOLE_RP)}

    def test_each_shared_card_has_its_mode_trait(self):
        _, traits = self.traits(['%s:2:quota' % A100_SHARED,
                                 '%s:2' % A100_WHOLE])
        self.assertEqual({QUOTA}, traits[SHARED_RP] & {QUOTA, TIMESLICE})
        # no mode given: time-sliced
        self.assertEqual({TIMESLICE}, traits[WHOLE_RP] & {QUOTA, TIMESLICE})

    def test_a_whole_gpu_has_no_mode_trait(self):
        _, traits = self.traits(['%s:2:quota' % A100_SHARED])
        self.assertEqual(set(), traits[WHOLE_RP] & {QUOTA, TIMESLICE})

    def test_a_changed_mode_replaces_the_trait(self):
        tree, _ = self.traits(['%s:2:quota' % A100_SHARED])
        # a new process (nova-compute restarted with the new option)
        _, traits = self.traits(['%s:2:timeslice' % A100_SHARED], tree)
        self.assertEqual({TIMESLICE},
                         traits[SHARED_RP] & {QUOTA, TIMESLICE})


class SpawnCheckTest(binding.BindingTestBase):
    """The last line of defence: the claim refuses the other mode."""

    resources = staticmethod(gpu_hosts.mixed_host)
    mig_text = gpu_hosts.load_text('nvsmi-h100-80gb-mig-4slices-L.txt')

    def setUp(self):
        super().setUp()
        self.entries = ('%s:2:quota' % A100_SHARED,)
        conf = gpu_hosts.make_conf(shared_gpus=list(self.entries))
        self.inventory, self.tree = gpu_hosts.report(
            gpu_hosts.mixed_host(), self.mig_text, conf=conf)

    def bind(self, entries, memory_mb=None):
        share = pick.ShareRequest(project_id='p1', memory_mb=memory_mb,
                                  shared_gpus=entries, flavor='g1.x')
        return pick.bind(self.alloc((SHARED_RP, 'CUSTOM_GPU_SHARE', 1)),
                         self.inventory.device_for_provider, {},
                         share=share)

    def test_matching_mode_is_bound(self):
        bound = self.bind(self.entries, memory_mb=4096)
        self.assertEqual(4096, bound.records()[0]['gpu_memory_mb'])
        self.assertEqual(
            'gpu_share',
            self.bind(('%s:2' % A100_SHARED,)).records()[0]['kind'])

    def test_time_sliced_share_on_a_quota_card_is_refused(self):
        exc = self.assertRaises(exception.SharedGpuModeMismatch, self.bind,
                                self.entries)
        message = str(exc)
        self.assertIn('shared in quota mode', message)
        self.assertIn('Flavor g1.x sets no lxd:gpu_memory_mb', message)
        self.assertIn('trait:%s=required' % TIMESLICE, message)
        # rescheduled, as any unit this host cannot give
        self.assertIsInstance(exc, exception.AcceleratorUnavailable)

    def test_quota_share_on_a_time_sliced_card_is_refused(self):
        exc = self.assertRaises(exception.SharedGpuModeMismatch, self.bind,
                                ('%s:2:timeslice' % A100_SHARED,),
                                memory_mb=4096)
        self.assertIn('shared in timeslice mode', str(exc))
        self.assertIn('trait1:%s=required' % QUOTA, str(exc))

    def test_the_claim_reads_the_option_and_the_flavor(self):
        objects.register_all()
        instance = objects.Instance(project_id='p1', flavor=objects.Flavor(
            name='g1.share', extra_specs={'resources:CUSTOM_GPU_SHARE': '1'}))
        conf = gpu_hosts.make_conf(shared_gpus=list(self.entries))
        share = claims.share_request(conf, instance)
        self.assertEqual((self.entries, 'g1.share'),
                         (share.shared_gpus, share.flavor))
        self.assertRaises(exception.SharedGpuModeMismatch, pick.bind,
                          self.alloc((SHARED_RP, 'CUSTOM_GPU_SHARE', 1)),
                          self.inventory.device_for_provider, {},
                          share=share)


class ProposedFlavorsTest(testtools.TestCase):
    """``nova-lxd-accel flavors`` writes the trait of each card's mode."""

    def setUp(self):
        super().setUp()
        gpus = _a100s()
        self.quota = dataclasses.replace(gpus[A100_SHARED], shared_slots=4)
        self.timeslice = dataclasses.replace(gpus[A100_WHOLE],
                                             shared_slots=2)

    def propose(self, memory):
        return {p.name: p for p in flavor_proposals.propose(
            [self.quota, self.timeslice], memory,
            names_by_pci=dict.fromkeys((A100_SHARED, A100_WHOLE),
                                       'NVIDIA A100-SXM4-80GB'),
            share_modes={A100_SHARED: 'quota', A100_WHOLE: 'timeslice'})}

    def test_one_flavor_per_mode_with_its_trait(self):
        proposals = self.propose({A100_SHARED: 81559, A100_WHOLE: 81559})
        quota = proposals['g1.a100-sxm4-80gb-share-1of4-quota']
        timeslice = proposals['g1.a100-sxm4-80gb-share-1of2']
        self.assertEqual(
            {'trait1:%s' % QUOTA: 'required',
             'trait1:CUSTOM_GPU_MODEL_NVIDIA_A100_SXM4_80GB': 'required',
             'lxd:gpu_memory_mb': '20389',
             'resources1:CUSTOM_GPU_SHARE': '1',
             'resources1:CUSTOM_GPU_MEMORY_MB': '20389',
             'Accelerator:Memory': '20389'},
            {k: v for k, v in quota.extra_specs.items()
             if k.startswith(('trait', 'resources', 'lxd:gpu_memory',
                              'Accelerator:Memory'))})
        self.assertEqual((A100_SHARED,), quota.gpus)
        self.assertIn('MPS quota: 20389 MiB of its memory', quota.description)
        self.assertEqual('required',
                         timeslice.extra_specs['trait:%s' % TIMESLICE])
        self.assertNotIn('lxd:gpu_memory_mb', timeslice.extra_specs)
        self.assertNotIn('trait:%s' % QUOTA, timeslice.extra_specs)
        # the API's validators and the spawn-time checks take both
        objects.register_all()
        validators.load_validators()
        for proposal in (quota, timeslice):
            for key, value in proposal.extra_specs.items():
                validators.validate(key, value)
            lxd_keys.check_flavor(
                objects.Flavor(name=proposal.name,
                               extra_specs=proposal.extra_specs),
                builder.HostPolicy(host='cmp1'))

    def test_no_quota_flavor_while_the_memory_is_unknown(self):
        proposals = self.propose({})
        self.assertEqual(['g1.a100-sxm4-80gb-share-1of2'], sorted(proposals))


def _a100s():
    """The recorded host's two A100s, by PCI address."""
    gpus = reporter.discovered_gpus(
        gpu_hosts.load_json('handmade-lxd-two-a100-no-nvidia-object.json'), '',
        gpu_hosts.make_conf(report_mig=False))
    return {g.pci_address: g for g in gpus}
