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

"""The GPU panel's view of the fleet (nova_lxd_accel_dashboard.fleet).

The input is Placement's answers as they come for a realistic fleet: two
compute hosts whose GPUs and InfiniBand card are named, inventoried and
traited as the driver reports them (provider_tree, the health gate), beside
a Neutron agent's nested providers and roots without cards, which the
panel must leave out. Servers are mapped as the panel maps Nova's list.
"""

import testtools

from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel.health import gate
from nova_lxd_accel.accel.inventory import provider_tree
from nova_lxd_accel_dashboard import fleet
from tests.fixtures import sample_fleet

HOST_1 = sample_fleet.HOST_1
HOST_2 = sample_fleet.HOST_2
ROOT_1 = sample_fleet.ROOT_1
ROOT_2 = sample_fleet.ROOT_2
H100_MIG = sample_fleet.H100_MIG
A100_WHOLE = sample_fleet.A100_WHOLE
A100_SICK = sample_fleet.A100_SICK
A100_UNPROBED = sample_fleet.A100_UNPROBED
IB_CARD = sample_fleet.IB_CARD
H100_DIRTY = sample_fleet.H100_DIRTY
A100_SHARED = sample_fleet.A100_SHARED
PROJECT_ALPHA = sample_fleet.PROJECT_ALPHA
PROJECT_BETA = sample_fleet.PROJECT_BETA
PROJECT_GAMMA = sample_fleet.PROJECT_GAMMA
SRV_TRAIN = sample_fleet.SRV_TRAIN
SRV_INFER = sample_fleet.SRV_INFER
UNKNOWN_CONSUMER = sample_fleet.UNKNOWN_CONSUMER
H100 = sample_fleet.H100
A100 = sample_fleet.A100
_gpu_name = sample_fleet.gpu_name
_provider = sample_fleet.provider
_inventory = sample_fleet.inventory
_gpu_traits = sample_fleet.gpu_traits
_allocations = sample_fleet.allocations
fleet_answers = sample_fleet.fleet_answers
fleet_details = sample_fleet.fleet_details
servers = sample_fleet.servers
build_fleet = sample_fleet.build_fleet


def _cards(hosts):
    return {c['uuid']: c for h in hosts for c in h['cards']}


def _layout(hosts):
    return [(h['name'], [c['uuid'] for c in h['cards']]) for h in hosts]


class BuildTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.hosts = build_fleet()
        self.cards = _cards(self.hosts)

    def test_only_the_hosts_cards_are_shown_in_name_order(self):
        # the OVS agent, its bridge, a root without cards and a sharing
        # provider are not cards; GPUs before the InfiniBand card
        self.assertEqual(
            [(HOST_1, [H100_MIG, A100_WHOLE, A100_SICK, A100_UNPROBED,
                       IB_CARD]),
             (HOST_2, [H100_DIRTY, A100_SHARED])], _layout(self.hosts))

    def test_counts_per_card(self):
        C = fleet.Counts
        self.assertEqual({
            H100_MIG: C(free=4, in_use=3, pending=0, held=0),
            A100_WHOLE: C(free=0, in_use=1, pending=0, held=0),
            A100_SICK: C(free=0, in_use=1, pending=0, held=6),
            A100_UNPROBED: C(free=0, in_use=0, pending=0, held=1),
            IB_CARD: C(free=6, in_use=2, pending=0, held=0),
            H100_DIRTY: C(free=2, in_use=1, pending=1, held=0),
            # 4 slots: the 81920 MB of memory are not units
            A100_SHARED: C(free=2, in_use=2, pending=0, held=0),
        }, {uuid: card['counts'] for uuid, card in self.cards.items()})

    def test_counts_per_host_are_the_sum_of_its_cards(self):
        self.assertEqual(
            [(HOST_1, fleet.Counts(free=10, in_use=7, pending=0, held=7)),
             (HOST_2, fleet.Counts(free=4, in_use=3, pending=1, held=0))],
            [(h['name'], h['counts']) for h in self.hosts])

    def test_state_and_reason_of_each_card(self):
        states = {uuid: c['state'] for uuid, c in self.cards.items()}
        self.assertEqual({
            H100_MIG: fleet.STATE_HEALTHY, A100_WHOLE: fleet.STATE_HEALTHY,
            A100_SICK: fleet.STATE_UNHEALTHY,
            A100_UNPROBED: fleet.STATE_UNPROBEABLE,
            IB_CARD: fleet.STATE_HEALTHY, H100_DIRTY: fleet.STATE_PENDING,
            A100_SHARED: fleet.STATE_HEALTHY}, states)
        self.assertEqual('', self.cards[H100_MIG]['reason'])
        self.assertIn('unhealthy', self.cards[A100_SICK]['reason'])
        self.assertIn('nova-lxd-accel doctor', self.cards[A100_SICK]['reason'])
        self.assertIn('could not probe', self.cards[A100_UNPROBED]['reason'])
        self.assertTrue(self.cards[H100_DIRTY]['reason'].startswith(
            '1 unit(s) reserved: a release being verified clean'))

    def test_unhealthy_wins_over_a_pending_release(self):
        providers, answers = fleet_answers()
        inv, traits, alloc = answers[H100_DIRTY]
        answers[H100_DIRTY] = (inv, traits + [gate.TRAIT_UNHEALTHY], alloc)
        hosts = fleet.build(providers, fleet_details(answers), servers())
        card = _cards(hosts)[H100_DIRTY]
        self.assertEqual(fleet.STATE_UNHEALTHY, card['state'])
        # nothing is free on a held card, nothing counted twice
        self.assertEqual(fleet.Counts(free=0, in_use=1, pending=0, held=3),
                         card['counts'])

    def test_holders_names_projects_and_units(self):
        holders = {uuid: [(h['name'], h['project_name'], h['units'])
                          for h in c['holders']]
                   for uuid, c in self.cards.items()}
        self.assertEqual([('train-llm-0', 'alpha-ml', '2 × MIG 1g.10gb'),
                          ('infer-api', 'alpha-ml', '1 × MIG 1g.10gb+me')],
                         holders[H100_MIG])
        # still on the GPU the health check holds
        self.assertEqual([('seg-eval', 'beta-vision', '1 × MIG 1g.10gb')],
                         holders[A100_SICK])
        self.assertEqual([], holders[A100_UNPROBED])
        # the memory of a share is not a unit; a project without a
        # readable name is shown by its id
        self.assertEqual([('jupyter-a', 'alpha-ml', '1 × shared GPU slot'),
                          ('jupyter-g', PROJECT_GAMMA,
                           '1 × shared GPU slot')], holders[A100_SHARED])

    def test_a_consumer_nova_does_not_list_is_shown_by_its_uuid(self):
        [train, unknown] = self.cards[IB_CARD]['holders']
        self.assertEqual((SRV_TRAIN, 'train-llm-0', PROJECT_ALPHA),
                         (train['id'], train['name'], train['project_id']))
        self.assertEqual(
            {'id': UNKNOWN_CONSUMER, 'name': UNKNOWN_CONSUMER,
             'project_id': '', 'project_name': '',
             'units': '1 × InfiniBand VF'}, unknown)

    def test_model_kind_and_pci_address_of_each_card(self):
        self.assertEqual(
            {H100_MIG: ('gpu', '0000:07:00.0', 'NVIDIA H100 80GB HBM3'),
             A100_WHOLE: ('gpu', '0000:85:00.0', 'NVIDIA A100 SXM4 80GB'),
             A100_SICK: ('gpu', '0000:86:00.0', 'NVIDIA A100 SXM4 80GB'),
             A100_UNPROBED: ('gpu', '0000:c1:00.0', 'NVIDIA A100 SXM4 80GB'),
             IB_CARD: ('ib', '0000:3b:00.0', ''),
             H100_DIRTY: ('gpu', '0000:07:00.0', 'NVIDIA H100 80GB HBM3'),
             A100_SHARED: ('gpu', '0000:85:00.0', 'NVIDIA A100 SXM4 80GB')},
            {uuid: (c['kind'], c['pci_address'], c['model'])
             for uuid, c in self.cards.items()})
        self.assertEqual((HOST_2, 'cn-gpu-02_gpu_0000_85_00_0'),
                         (self.cards[A100_SHARED]['host'],
                          self.cards[A100_SHARED]['name']))

    def test_classes_of_a_card_with_their_use(self):
        self.assertEqual(
            [{'resource_class': 'CUSTOM_MIG_1G_10GB',
              'words': 'MIG 1g.10gb', 'total': 1, 'used': 0, 'reserved': 0},
             {'resource_class': 'CUSTOM_MIG_2G_20GB',
              'words': 'MIG 2g.20gb', 'total': 3, 'used': 1, 'reserved': 1}],
            self.cards[H100_DIRTY]['classes'])
        self.assertEqual(
            [('CUSTOM_GPU_MEMORY_MB', 'GPU memory (MB)', 81920, 40960),
             ('CUSTOM_GPU_SHARE', 'shared GPU slot', 4, 2)],
            [(c['resource_class'], c['words'], c['total'], c['used'])
             for c in self.cards[A100_SHARED]['classes']])

    def test_a_card_whose_name_has_no_pci_address_is_still_shown(self):
        providers, answers = fleet_answers()
        for provider in providers:
            if provider['uuid'] == A100_WHOLE:
                provider['name'] = HOST_1 + '_gpu_spare'
        card = _cards(fleet.build(providers, fleet_details(answers),
                                  servers()))[A100_WHOLE]
        self.assertEqual(('gpu', ''), (card['kind'], card['pci_address']))

    def test_a_pool_of_whole_gpus_is_one_row_counting_its_cards(self):
        # pool_whole_gpus: eight cards, servers of 4 and 2, one card dirty
        pool = '77777777-0000-4000-8000-000000000000'
        providers = [_provider(ROOT_1, HOST_1),
                     _provider(pool, provider_tree.gpu_pool_name(
                         HOST_1, '10de_2330'), ROOT_1, ROOT_1)]
        details = {pool: {
            'inventories': _inventory(PGPU=8, reserved={'PGPU': 1}),
            'traits': _gpu_traits(H100, '2330', '9_0'),
            'allocations': _allocations(**{
                SRV_TRAIN: {'PGPU': 4}, SRV_INFER: {'PGPU': 2}})}}
        card = _cards(fleet.build(providers, details, servers()))[pool]
        self.assertEqual(
            ('gpu', '', fleet.Counts(free=1, in_use=6, pending=1, held=0)),
            (card['kind'], card['pci_address'], card['counts']))
        self.assertEqual(['4 × whole GPU', '2 × whole GPU'],
                         [h['units'] for h in card['holders']])

    def test_a_nested_provider_named_for_another_host_is_left_out(self):
        # cn-gpu-02's child named like a card of cn-gpu-01 is not a card
        providers, answers = fleet_answers()
        providers.append(_provider(
            '18d4e9fb-7eac-4c3b-8fee-90ad3e4f7b88',
            _gpu_name(HOST_1, '0000:99:00.0'), ROOT_2, ROOT_2))
        hosts = fleet.build(providers, fleet_details(answers), servers())
        self.assertEqual(_layout(self.hosts), _layout(hosts))

    def test_an_empty_fleet(self):
        self.assertEqual([], fleet.build([], {}, {}))
        self.assertEqual({'host': [], 'model': [], 'state': list(
            fleet.STATES), 'project': []}, fleet.choices([]))


class WordsTest(testtools.TestCase):

    def test_mig_profiles_read_as_nvidia_smi_prints_them(self):
        # the resource class the driver makes of each profile, and back
        for profile in ('1g.5gb', '1g.10gb', '1g.10gb+me', '2g.20gb',
                        '3g.40gb', '7g.80gb', '1c.3g.71gb'):
            rc = devices.mig_resource_class(profile)
            self.assertEqual('MIG ' + profile, fleet.class_words(rc), rc)

    def test_other_classes(self):
        self.assertEqual(
            ['whole GPU', 'shared GPU slot', 'GPU memory (MB)',
             'InfiniBand VF', 'InfiniBand port', 'CUSTOM_FPGA_XILINX'],
            [fleet.class_words(rc) for rc in (
                'PGPU', 'CUSTOM_GPU_SHARE', 'CUSTOM_GPU_MEMORY_MB',
                'CUSTOM_INFINIBAND_VF', 'CUSTOM_INFINIBAND_PORT',
                'CUSTOM_FPGA_XILINX')])

    def test_model_words(self):
        self.assertEqual('NVIDIA H100 80GB HBM3', fleet.model_words(H100))


class SelectTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.hosts = build_fleet()

    def test_no_filter_keeps_everything(self):
        self.assertEqual(self.hosts, fleet.select(self.hosts))

    def test_by_host(self):
        [host] = fleet.select(self.hosts, host=HOST_2)
        self.assertEqual((HOST_2, fleet.Counts(4, 3, 1, 0)),
                         (host['name'], host['counts']))
        self.assertEqual(2, len(host['cards']))

    def test_by_model_recounts_each_host(self):
        selected = fleet.select(self.hosts, model='NVIDIA A100 SXM4 80GB')
        self.assertEqual(
            [(HOST_1, [A100_WHOLE, A100_SICK, A100_UNPROBED]),
             (HOST_2, [A100_SHARED])], _layout(selected))
        self.assertEqual([fleet.Counts(0, 2, 0, 7), fleet.Counts(2, 2, 0, 0)],
                         [h['counts'] for h in selected])

    def test_by_state(self):
        self.assertEqual(
            [(HOST_1, [A100_SICK])],
            _layout(fleet.select(self.hosts, state=fleet.STATE_UNHEALTHY)))
        self.assertEqual(
            [(HOST_2, [H100_DIRTY])],
            _layout(fleet.select(self.hosts, state=fleet.STATE_PENDING)))

    def test_by_project_of_any_holder(self):
        self.assertEqual(
            [(HOST_1, [H100_MIG, IB_CARD]), (HOST_2, [A100_SHARED])],
            _layout(fleet.select(self.hosts, project=PROJECT_ALPHA)))

    def test_filters_combine(self):
        self.assertEqual(
            [(HOST_1, [A100_WHOLE, A100_SICK])],
            _layout(fleet.select(self.hosts, host=HOST_1,
                                 project=PROJECT_BETA)))
        self.assertEqual(
            [(HOST_1, [H100_MIG])],
            _layout(fleet.select(self.hosts, model='NVIDIA H100 80GB HBM3',
                                 state=fleet.STATE_HEALTHY)))

    def test_no_match_is_an_empty_list(self):
        self.assertEqual([], fleet.select(self.hosts, host='cn-gpu-09'))
        self.assertEqual([], fleet.select(self.hosts, project='nobody'))
        self.assertEqual([], fleet.select(
            self.hosts, host=HOST_2, state=fleet.STATE_UNPROBEABLE))

    def test_choices(self):
        self.assertEqual(
            {'host': [HOST_1, HOST_2],
             'model': ['NVIDIA A100 SXM4 80GB', 'NVIDIA H100 80GB HBM3'],
             'state': ['healthy', 'release pending', 'unprobeable',
                       'unhealthy'],
             # by name; the unknown consumer has no project
             'project': [(PROJECT_ALPHA, 'alpha-ml'),
                         (PROJECT_BETA, 'beta-vision'),
                         (PROJECT_GAMMA, PROJECT_GAMMA)]},
            fleet.choices(self.hosts))


class BarTest(testtools.TestCase):

    def test_segments_of_each_host(self):
        [one, two] = [fleet.bar(h['counts']) for h in build_fleet()]
        self.assertEqual([('free', 10), ('in_use', 7), ('held', 7)],
                         [(kind, n) for kind, n, _pct in one])
        self.assertEqual([('free', 4), ('in_use', 3), ('pending', 1)],
                         [(kind, n) for kind, n, _pct in two])
        self.assertEqual([50.0, 37.5, 12.5], [pct for _k, _n, pct in two])
        for segments in (one, two):
            # rounded to 0.01 each: 100 within the rounding
            self.assertAlmostEqual(100.0, sum(p for _k, _n, p in segments),
                                   delta=0.01 * len(segments))

    def test_no_empty_segment(self):
        self.assertEqual([('held', 1, 100.0)],
                         fleet.bar(fleet.Counts(0, 0, 0, 1)))
        self.assertEqual([], fleet.bar(fleet.Counts(0, 0, 0, 0)))


# Flavors as the sandbox proposed them (gpu-flavors.json, accel-flavors.txt)
SANDBOX_A100 = {
    'Accelerator:Memory': '81920', 'Accelerator:Model': 'A100-SXM4-80GB',
    'Accelerator:Number': '1', 'Accelerator:Type': 'GPU',
    'Accelerator:Vendor': 'NVIDIA',
    'Accelerator:VirtualizationType': 'passthrough',
    'accounting:accelerator_count': '1', 'lxd:gpu_runtime': 'nvidia',
    'resources:PGPU': '1',
    'trait:CUSTOM_GPU_MODEL_NVIDIA_A100_SXM4_80GB': 'required'}
SANDBOX_H100_1G = {
    'Accelerator:Memory': '10240',
    'Accelerator:Model': 'H100 80GB HBM3 MIG 1g.10gb',
    'Accelerator:Number': '1', 'Accelerator:Type': 'GPU',
    'Accelerator:Vendor': 'NVIDIA', 'Accelerator:VirtualizationType': 'MIG',
    'accounting:accelerator_count': '1/7', 'lxd:gpu_runtime': 'nvidia',
    'resources:CUSTOM_MIG_1G_10GB': '1',
    'trait:CUSTOM_GPU_MODEL_NVIDIA_H100_80GB_HBM3': 'required'}
# flavor_proposals.propose for a quota-shared A100: request group 1
QUOTA_SHARE = {
    'resources1:CUSTOM_GPU_SHARE': '1',
    'trait1:CUSTOM_GPU_MODEL_NVIDIA_A100_SXM4_80GB': 'required',
    'lxd:gpu_runtime': 'nvidia', 'Accelerator:Type': 'GPU',
    'Accelerator:Vendor': 'NVIDIA',
    'Accelerator:Model': 'A100-SXM4-80GB share 1/4',
    'Accelerator:Number': '1', 'Accelerator:VirtualizationType': 'shared',
    'Accelerator:Memory': '20480', 'accounting:accelerator_count': '1/4',
    'resources1:CUSTOM_GPU_MEMORY_MB': '20480', 'lxd:gpu_memory_mb': '20480',
    'trait1:CUSTOM_GPU_SHARING_QUOTA': 'required'}


class DescribeTest(testtools.TestCase):

    def test_the_sandbox_flavors_with_a_model_trait(self):
        self.assertEqual(['1 × NVIDIA A100 SXM4 80GB, whole GPU'],
                         fleet.describe(SANDBOX_A100))
        self.assertEqual(['1 × NVIDIA H100 80GB HBM3, MIG 1g.10gb'],
                         fleet.describe(SANDBOX_H100_1G))

    def test_the_sandbox_flavors_without_a_model(self):
        self.assertEqual(
            [['1 × whole GPU'], ['1 × MIG 1g.10gb'], ['1 × InfiniBand VF'],
             ['1 × InfiniBand port']],
            [fleet.describe({key: '1'}) for key in (
                'resources:PGPU', 'resources:CUSTOM_MIG_1G_10GB',
                'resources:CUSTOM_INFINIBAND_VF',
                'resources:CUSTOM_INFINIBAND_PORT')])

    def test_granular_share_names_its_slot_not_its_memory(self):
        self.assertEqual(['1 × NVIDIA A100 SXM4 80GB, shared GPU slot'],
                         fleet.describe(QUOTA_SHARE))

    def test_egi_keys_name_the_model_without_a_trait(self):
        self.assertEqual(['2 × NVIDIA A100-SXM4-80GB, whole GPU'],
                         fleet.describe({'resources:PGPU': '2',
                                         'Accelerator:Vendor': 'NVIDIA',
                                         'Accelerator:Model':
                                             'A100-SXM4-80GB'}))

    def test_a_gpu_and_an_infiniband_vf(self):
        specs = dict(SANDBOX_H100_1G, **{
            'resources:CUSTOM_INFINIBAND_VF': '1'})
        self.assertEqual(['1 × InfiniBand VF',
                          '1 × NVIDIA H100 80GB HBM3, MIG 1g.10gb'],
                         fleet.describe(specs))

    def test_a_forbidden_model_does_not_name_the_gpu(self):
        self.assertEqual(['1 × whole GPU'], fleet.describe({
            'resources:PGPU': '1',
            'trait:CUSTOM_GPU_MODEL_NVIDIA_A100_SXM4_80GB': 'forbidden'}))

    def test_each_request_group_names_its_own_model(self):
        self.assertEqual(
            ['1 × NVIDIA A100 SXM4 80GB, whole GPU',
             '1 × NVIDIA H100 80GB HBM3, MIG 1g.10gb'],
            fleet.describe({
                'resources1:PGPU': '1',
                'trait1:CUSTOM_GPU_MODEL_NVIDIA_A100_SXM4_80GB': 'required',
                'resources2:CUSTOM_MIG_1G_10GB': '1',
                'trait2:CUSTOM_GPU_MODEL_NVIDIA_H100_80GB_HBM3': 'required',
                'group_policy': 'isolate'}))

    def test_a_flavor_without_accelerator(self):
        self.assertEqual([], fleet.describe(None))
        self.assertEqual([], fleet.describe({}))
        self.assertEqual([], fleet.describe({
            'hw:cpu_policy': 'dedicated', 'resources:VCPU': '4',
            'resources:CUSTOM_PMEM_NAMESPACE_4GB': '1',
            'quota:cpu_shares': '1024', 'lxd:gpu_runtime': 'nvidia'}))

    def test_a_non_integer_amount_is_left_out(self):
        self.assertEqual(['1 × MIG 1g.10gb'], fleet.describe({
            'resources:PGPU': 'one', 'resources1:CUSTOM_MIG_2G_20GB': '1.5',
            'resources2:CUSTOM_MIG_1G_10GB': '1'}))

    def test_a_zero_amount_asks_for_nothing(self):
        # Nova drops a resource asked with 0 (strip_zeros)
        self.assertEqual(['1 × MIG 1g.10gb'], fleet.describe({
            'resources:PGPU': '0', 'resources1:CUSTOM_MIG_1G_10GB': '1'}))
