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

"""GPU flavor proposals from recorded hosts, and the Accelerator: keys."""

import dataclasses
import json

from nova.api.validation.extra_specs import validators
from nova import exception
from nova import objects
import testtools

from nova_lxd_accel.accel.inventory import discovery
from nova_lxd_accel.accel.inventory import nvidia_smi
from nova_lxd_accel.accel.inventory import provider_tree
from nova_lxd_accel.accel.inventory import reporter
from nova_lxd_accel.advice import flavor_proposals
from nova_lxd_accel.cmd import common
from nova_lxd_accel.cmd import flavors
from nova_lxd_accel.container import builder
from tests.fixtures import gpu_hosts


def _gpus(resources, mig_text):
    class Args(object):
        config_file = ['/dev/null']
        state_dir = None
    conf = common.load_conf(Args())
    return reporter.discovered_gpus(gpu_hosts.load_json(resources),
                                    gpu_hosts.load_text(mig_text), conf)


class TestPropose(testtools.TestCase):

    def test_a100_mig_host(self):
        gpus = _gpus('handmade-lxd-two-a100-no-nvidia-object.json',
                     'mig-L-a100-sxm4-80gb-7x1g10gb.txt')
        by_name = {p.name: p for p in flavor_proposals.propose(gpus)}
        mig = by_name['g1.a100-sxm4-80gb-1g.10gb']
        self.assertEqual('A100-SXM4-80GB MIG 1g.10gb',
                         mig.extra_specs['Accelerator:Model'])
        self.assertEqual('1', mig.extra_specs['Accelerator:Number'])
        self.assertEqual('10240', mig.extra_specs['Accelerator:Memory'])
        self.assertEqual('MIG', mig.extra_specs[
            'Accelerator:VirtualizationType'])
        self.assertEqual('1', mig.extra_specs['resources:CUSTOM_MIG_1G_10GB'])
        # accounted as its part of the card: 1 of the A100's 7 slices
        self.assertEqual('1/7',
                         mig.extra_specs['accounting:accelerator_count'])
        self.assertIn('1 MIG slice 1g.10gb of an NVIDIA A100-SXM4-80GB',
                      mig.description)

    def test_description_sizes_in_plain_words(self):
        gpus = _gpus('handmade-lxd-two-a100-no-nvidia-object.json',
                     'mig-L-a100-sxm4-80gb-7x1g10gb.txt')
        small = {p.name: p for p in flavor_proposals.propose(
            gpus, vcpus=1, ram=256)}
        self.assertTrue(small['g1.a100-sxm4-80gb-1g.10gb'].description
                        .endswith('in an LXD container with 1 vCPU and '
                                  '256 MiB of RAM.'))
        large = {p.name: p for p in flavor_proposals.propose(gpus)}
        self.assertTrue(large['g1.a100-sxm4-80gb-1g.10gb'].description
                        .endswith('with 4 vCPUs and 16 GiB of RAM.'))

    def test_count_and_whole_gpu(self):
        gpus = _gpus('lxd-9201-virtiogpu-gt730-nvidia-subobject-gpu.json',
                     'mig-L-a100-sxm4-80gb-7x1g10gb.txt')
        [p] = flavor_proposals.propose([g for g in gpus if g.model], count=2)
        self.assertEqual('g1.geforce-gt-730.x2', p.name)
        self.assertEqual({'resources:PGPU': '2', 'Accelerator:Number': '2',
                          'Accelerator:Type': 'GPU',
                          'Accelerator:Vendor': 'NVIDIA',
                          'Accelerator:Model': 'GeForce GT 730',
                          'Accelerator:VirtualizationType': 'passthrough',
                          'lxd:gpu_runtime': 'nvidia',
                          'accounting:accelerator_count': '2',
                          'trait:CUSTOM_GPU_MODEL_GEFORCE_GT_730':
                              'required'}, p.extra_specs)

    def test_shared_gpu_share_flavor(self):
        gpus = _gpus('handmade-lxd-two-a100-no-nvidia-object.json',
                     'mig-L-a100-sxm4-80gb-7x1g10gb.txt')
        shared = [dataclasses.replace(g, shared_slots=4) for g in gpus
                  if g.pci_address == '0000:07:00.0']
        [p] = flavor_proposals.propose(shared, {'0000:07:00.0': 81920})
        self.assertEqual('g1.a100-sxm4-80gb-share-1of4', p.name)
        self.assertEqual('1', p.extra_specs['resources:CUSTOM_GPU_SHARE'])
        self.assertNotIn('resources:PGPU', p.extra_specs)
        self.assertEqual(('A100-SXM4-80GB share 1/4', '1', 'shared'), (
            p.extra_specs['Accelerator:Model'],
            p.extra_specs['Accelerator:Number'],
            p.extra_specs['Accelerator:VirtualizationType']))
        self.assertEqual('1/4', p.extra_specs['accounting:accelerator_count'])
        self.assertIn('1 share of an NVIDIA A100-SXM4-80GB GPU (one of 4, '
                      'time-sliced: its 80 GB are shared', p.description)
        validators.load_validators()
        for key, value in p.extra_specs.items():
            validators.validate(key, value)

    def test_share_flavors_of_both_modes_boot_on_a_default_host(self):
        # an MPS quota share needs its container to share the MPS server's
        # user: the proposal turns the host's isolated id map off
        objects.register_all()
        gpus = _gpus('handmade-lxd-two-a100-no-nvidia-object.json',
                     'mig-L-a100-sxm4-80gb-7x1g10gb.txt')
        shared = [dataclasses.replace(g, shared_slots=4) for g in gpus
                  if g.pci_address == '0000:07:00.0']
        isolated = {}
        for mode in ('quota', 'timeslice'):
            [p] = flavor_proposals.propose(
                shared, {'0000:07:00.0': 81920},
                share_modes={'0000:07:00.0': mode})
            flavor = objects.Flavor(
                name=p.name, vcpus=p.vcpus, memory_mb=p.ram, root_gb=p.disk,
                ephemeral_gb=0, swap=0, extra_specs=p.extra_specs)
            instance = objects.Instance(
                uuid='7a1c5f0e-4c0b-4a55-9d59-3f7c5d0f8e21', hostname='x',
                key_data=None, user_data=None, flavor=flavor)
            isolated[mode] = builder.resize_fragment(
                instance, flavor, None, builder.HostPolicy(host='cmp1'))[
                    'config']['security.idmap.isolated']
        self.assertEqual({'quota': 'false', 'timeslice': 'true'}, isolated)

    def test_identical_cards_get_one_model_trait_and_one_flavor(self):
        # the recorded sandbox host: LXD names its two A100s only by their
        # product id (20b2); nvidia-smi names them. Both get the model
        # trait, so the one flavor proposed for them lands on either.
        host = 'tools/sandbox/hardware/h100-mig-a100-ib/'
        with open(host + 'resources.json') as f:
            resources = json.load(f)
        with open(host + 'nvidia-smi-L.txt') as f:
            mig_text = f.read()
        with open(host + 'query-gpu.csv') as f:
            probed = nvidia_smi.parse_query_gpu(f.read())

        class Args(object):
            config_file = ['/dev/null']
            state_dir = None
        conf = common.load_conf(Args())
        for listing, names in ((mig_text, None), ('', {
                pci: g.name for pci, g in probed.items()})):
            # from nvidia-smi -L, or from the probe's query by bus id
            gpus, _ = discovery.discover(
                resources, listing, discovery.Options.from_conf(conf),
                probed_names=names)
            a100 = [g for g in gpus if g.product_id == '20b2']
            self.assertEqual(['0000:07:00.0', '0000:85:00.0'],
                             [g.pci_address for g in a100])
            self.assertFalse([g for g in a100 if g.nvidia_uuid])
            self.assertEqual({'NVIDIA A100-SXM4-80GB'},
                             {g.model for g in a100})
            [proposal] = flavor_proposals.propose(a100)
            self.assertEqual('g1.a100-sxm4-80gb', proposal.name)
            required = {k.split(':', 1)[1]
                        for k, v in proposal.extra_specs.items()
                        if k.startswith('trait:') and v == 'required'}
            self.assertEqual({'CUSTOM_GPU_MODEL_NVIDIA_A100_SXM4_80GB'},
                             required)
            for gpu in a100:
                self.assertLessEqual(required, provider_tree.gpu_traits(gpu))
        # LXD's nvidia object wins over nvidia-smi's name
        gpus, _ = discovery.discover(
            resources, mig_text, discovery.Options.from_conf(conf),
            probed_names={'0000:00:09.0': 'Something else'})
        self.assertEqual('NVIDIA H100 80GB HBM3', gpus[0].model)

    def test_mig_flavor_with_two_slices_counts_two_sevenths(self):
        gpus = _gpus('handmade-lxd-two-a100-no-nvidia-object.json',
                     'mig-L-a100-sxm4-80gb-7x1g10gb.txt')
        by_name = {p.name: p for p in flavor_proposals.propose(gpus, count=2)}
        mig = by_name['g1.a100-sxm4-80gb-1g.10gb.x2']
        self.assertEqual(('2', '2/7'), (
            mig.extra_specs['Accelerator:Number'],
            mig.extra_specs['accounting:accelerator_count']))

    def test_no_gpu(self):
        self.assertEqual([], flavor_proposals.propose([]))
        self.assertEqual('no GPU: no GPU flavor to propose',
                         flavors.format_table([]))

    def test_proposals_pass_the_validators(self):
        validators.load_validators()
        gpus = _gpus('handmade-lxd-h100-mig-host.json',
                     'nvsmi-h100-80gb-mig-4slices-L.txt')
        for proposal in flavor_proposals.propose(gpus):
            for key, value in proposal.extra_specs.items():
                validators.validate(key, value)
        self.assertRaises(exception.ValidationError, validators.validate,
                          'Accelerator:Numbr', '1')


class PoolSizesTest(testtools.TestCase):
    """Whole GPUs counted in one pool: x1, x2, x4, x8 in one group."""

    def test_eight_cards_give_four_sizes(self):
        gpus = discovery.discover(
            {'gpu': {'cards': gpu_hosts.hgx_eight_gpu_cards()}}, '',
            discovery.Options())[0]
        proposals = flavor_proposals.propose(gpus, vcpus=4, ram=16384,
                                             pooled=True)
        self.assertEqual(
            [('1', 4, 16384), ('2', 8, 32768), ('4', 16, 65536),
             ('8', 32, 131072)],
            [(p.extra_specs['resources:PGPU'], p.vcpus, p.ram)
             for p in proposals])
        # never numbered groups: one pool answers k in one request
        self.assertEqual([], [k for p in proposals for k in p.extra_specs
                              if k.startswith('resources1')])
        self.assertEqual(tuple(sorted(g.pci_address for g in gpus)),
                         proposals[-1].gpus)

    def test_one_size_per_card_layout_or_count(self):
        gpus = discovery.discover(
            {'gpu': {'cards': gpu_hosts.hgx_eight_gpu_cards()}}, '',
            discovery.Options())[0]
        self.assertEqual(1, len(flavor_proposals.propose(gpus)))
        self.assertEqual(1, len(flavor_proposals.propose(
            gpus, count=2, pooled=True)))
