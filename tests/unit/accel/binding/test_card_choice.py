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

"""Choosing cards of a pool, with the links of the hand-made samples.

Expected choices are written by hand from the rules (NUMA best fit, fewest
nodes, closest links, PCI order), not from the code's output.
"""

import itertools
import random

from oslotest import base

from nova_lxd_accel.accel.binding import card_choice
from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel.inventory import gpu_topology
from tests.fixtures import gpu_hosts

#: a DGX H100's GPUs in PCI address order (nvidia-smi's GPU0..GPU7):
#: GPU0-3 on NUMA node 0, GPU4-7 on NUMA node 1
DGX_PCI = ['0000:1b:00.0', '0000:43:00.0', '0000:52:00.0', '0000:61:00.0',
           '0000:9d:00.0', '0000:c3:00.0', '0000:d1:00.0', '0000:df:00.0']
#: the PCIe sample: GPU1-GPU2 PIX, GPU0 PXB to both (GPU0-GPU1 nearest by
#: bus number), GPU3 on the other socket (SYS)
PCIE_PCI = ['0000:1a:00.0', '0000:1b:00.0', '0000:1e:00.0', '0000:88:00.0']
PCIE_NUMA = [0, 0, 0, 1]


def _gpu(pci, numa):
    return devices.Gpu(pci_address=pci, vendor_id='10de', numa_node=numa)


def _links(sample, addresses):
    return gpu_topology.Links.build(
        gpu_topology.parse_matrix(gpu_hosts.load_text(sample)), addresses)


def _pci(cards):
    return [c.pci_address for c in cards]


class TestDgx(base.BaseTestCase):

    def setUp(self):
        super().setUp()
        self.cards = [_gpu(pci, n // 4) for n, pci in enumerate(DGX_PCI)]
        self.links = _links('handmade-nvsmi-topo-m-dgx-h100.txt', DGX_PCI)
        self.assertEqual(28, len(self.links))

    def test_four_of_eight_on_one_node(self):
        chosen = card_choice.choose(self.cards, 4, self.links)
        # both nodes fit and hold 4: the lowest NUMA id
        self.assertEqual(DGX_PCI[:4], _pci(chosen))
        self.assertEqual('NUMA node 0; NVLink NV18 between all pairs',
                         card_choice.describe(chosen, self.links))

    def test_four_on_the_node_that_fits_when_the_other_is_used(self):
        free = self.cards[1:]               # node 0: 3 free, node 1: 4
        self.assertEqual(DGX_PCI[4:],
                         _pci(card_choice.choose(free, 4, self.links)))

    def test_best_fit_node_with_fewest_free_cards(self):
        free = self.cards[:4] + self.cards[5:]   # node 0: 4, node 1: 3
        chosen = card_choice.choose(free, 2, self.links)
        # node 0 stays whole for a 4-card request
        self.assertEqual([DGX_PCI[5], DGX_PCI[6]], _pci(chosen))
        self.assertEqual({1}, {c.numa_node for c in chosen})

    def test_all_eight(self):
        self.assertEqual(DGX_PCI,
                         _pci(card_choice.choose(self.cards, 8, self.links)))

    def test_five_of_four_and_four_spans_two_nodes(self):
        chosen = card_choice.choose(self.cards, 5, self.links)
        self.assertEqual({0, 1}, {c.numa_node for c in chosen})
        # NV18 everywhere: equal links, the first in PCI order
        self.assertEqual(DGX_PCI[:5], _pci(chosen))
        self.assertEqual('NUMA nodes 0, 1; NVLink NV18 between all pairs',
                         card_choice.describe(chosen, self.links))

    def test_too_few(self):
        self.assertIsNone(card_choice.choose(self.cards[:3], 4, self.links))
        self.assertIsNone(card_choice.choose([], 1))
        self.assertIsNone(card_choice.choose(None, 1))

    def test_nothing_asked(self):
        self.assertEqual([], card_choice.choose(self.cards, 0, self.links))

    def test_returns_the_cards_given(self):
        chosen = card_choice.choose(self.cards, 2, self.links)
        self.assertIs(self.cards[0], chosen[0])
        self.assertIs(self.cards[1], chosen[1])

    def test_deterministic_whatever_the_order(self):
        expected = {count: _pci(card_choice.choose(self.cards, count,
                                                   self.links))
                    for count in range(1, 9)}
        self.assertEqual(DGX_PCI[:2], expected[2])
        self.assertEqual(DGX_PCI[:3], expected[3])
        self.assertEqual(DGX_PCI[:6], expected[6])
        rng = random.Random(42)
        for _ in range(20):
            cards = list(self.cards)
            rng.shuffle(cards)
            for count, pci in expected.items():
                chosen = card_choice.choose(cards, count, self.links)
                self.assertEqual(pci, _pci(chosen))
                # in PCI address order, whatever the input order
                self.assertEqual(sorted(_pci(chosen)), _pci(chosen))


class TestPcie(base.BaseTestCase):

    def setUp(self):
        super().setUp()
        self.links = _links('handmade-nvsmi-topo-m-4-pcie.txt', PCIE_PCI)
        self.cards = [_gpu(p, n) for p, n in zip(PCIE_PCI, PCIE_NUMA)]

    def test_prefers_the_pix_pair(self):
        chosen = card_choice.choose(self.cards, 2, self.links)
        self.assertEqual([PCIE_PCI[1], PCIE_PCI[2]], _pci(chosen))
        self.assertEqual('NUMA node 0; PCIe PIX between all pairs',
                         card_choice.describe(chosen, self.links))

    def test_without_links_nearest_bus_numbers(self):
        chosen = card_choice.choose(self.cards, 2)
        self.assertEqual([PCIE_PCI[0], PCIE_PCI[1]], _pci(chosen))
        self.assertEqual([PCIE_PCI[0], PCIE_PCI[1]], _pci(
            card_choice.choose(self.cards, 2, gpu_topology.Links.none())))
        self.assertEqual('NUMA node 0; links unknown, nearest PCI addresses',
                         card_choice.describe(chosen))

    def test_pix_pair_without_numa_nodes(self):
        # LXD gave no NUMA node: one group; the links keep GPU3 (SYS) out
        cards = [_gpu(p, None) for p in PCIE_PCI]
        self.assertEqual([PCIE_PCI[1], PCIE_PCI[2]],
                         _pci(card_choice.choose(cards, 2, self.links)))
        three = card_choice.choose(cards, 3, self.links)
        self.assertEqual(PCIE_PCI[:3], _pci(three))
        self.assertEqual('NUMA node unknown; links PIX (1 pair), PXB '
                         '(2 pairs)', card_choice.describe(three, self.links))

    def test_numa_comes_before_links(self):
        # GPU1 taken: node 0 has GPU0 and GPU2 (PXB); the other node has
        # only GPU3, so the pair stays on node 0
        free = [self.cards[0], self.cards[2], self.cards[3]]
        self.assertEqual([PCIE_PCI[0], PCIE_PCI[2]],
                         _pci(card_choice.choose(free, 2, self.links)))

    def test_single_card_best_fit(self):
        # the lone card of node 1 leaves node 0's three together
        chosen = card_choice.choose(self.cards, 1, self.links)
        self.assertEqual([PCIE_PCI[3]], _pci(chosen))
        self.assertEqual('NUMA node 1; a single card',
                         card_choice.describe(chosen, self.links))

    def test_spanning_sockets(self):
        chosen = card_choice.choose(self.cards, 4, self.links)
        self.assertEqual(PCIE_PCI, _pci(chosen))
        self.assertEqual('NUMA nodes 0, 1; links PIX (1 pair), PXB '
                         '(2 pairs), SYS (3 pairs)',
                         card_choice.describe(chosen, self.links))


class TestNumaRules(base.BaseTestCase):

    def _cards(self, sizes):
        """Cards per NUMA node: {numa: n} -> n cards with rising buses."""
        cards, bus = [], 0x10
        for numa, size in sizes.items():
            for _ in range(size):
                cards.append(_gpu('0000:%02x:00.0' % bus, numa))
                bus += 1
        return cards

    def test_fewest_nodes_most_free_first(self):
        cards = self._cards({0: 2, 1: 4, 2: 3})
        chosen = card_choice.choose(cards, 6)
        self.assertEqual({1, 2}, {c.numa_node for c in chosen})
        self.assertEqual(7, len(card_choice.numa_candidates(cards, 6)))

    def test_best_fit_among_three(self):
        cards = self._cards({0: 4, 1: 2, 2: 3})
        self.assertEqual({2}, {c.numa_node
                               for c in card_choice.choose(cards, 3)})
        self.assertEqual({1}, {c.numa_node
                               for c in card_choice.choose(cards, 2)})

    def test_unknown_numa_is_last_on_ties(self):
        cards = self._cards({None: 2, 1: 2})
        self.assertEqual({1}, {c.numa_node
                               for c in card_choice.choose(cards, 2)})

    def test_unknown_numa_group_when_it_alone_fits(self):
        cards = self._cards({0: 2, None: 3})
        self.assertEqual({None}, {c.numa_node
                                  for c in card_choice.choose(cards, 3)})

    def test_ties_to_lowest_numa_id(self):
        cards = self._cards({3: 2, 1: 2, 2: 2})
        self.assertEqual({1}, {c.numa_node
                               for c in card_choice.choose(cards, 2)})


class TestLinkRules(base.BaseTestCase):

    PCI = ['0000:17:00.0', '0000:18:00.0', '0000:65:00.0', '0000:66:00.0']

    def _cards(self):
        return [_gpu(p, 0) for p in self.PCI]

    def test_nvlink_before_pcie_locality(self):
        p = self.PCI
        links = gpu_topology.Links({
            (p[0], p[1]): 'PIX', (p[0], p[2]): 'NV4', (p[0], p[3]): 'NODE',
            (p[1], p[2]): 'NODE', (p[1], p[3]): 'NODE',
            (p[2], p[3]): 'PIX'})
        self.assertEqual([p[0], p[2]],
                         _pci(card_choice.choose(self._cards(), 2, links)))

    def test_more_nvlinks_closer(self):
        p = self.PCI
        pairs = {(a, b): 'NV4' for a, b in itertools.combinations(p, 2)}
        pairs[(p[1], p[3])] = 'NV12'
        links = gpu_topology.Links(pairs)
        self.assertEqual([p[1], p[3]],
                         _pci(card_choice.choose(self._cards(), 2, links)))

    def test_partly_known_links_fall_back_to_pci(self):
        p = self.PCI
        # GPU2-GPU3 unknown: the links cannot compare every subset
        links = gpu_topology.Links({(p[0], p[2]): 'NV4'})
        chosen = card_choice.choose(self._cards(), 2, links)
        self.assertEqual([p[0], p[1]], _pci(chosen))

    def test_pci_domains_are_far(self):
        cards = [_gpu('0001:18:00.0', 0), _gpu('0000:10:00.0', 0),
                 _gpu('0000:30:00.0', 0)]
        self.assertEqual(['0000:10:00.0', '0000:30:00.0'],
                         _pci(card_choice.choose(cards, 2)))
        self.assertEqual(card_choice.FAR, card_choice.pci_distance(
            '0001:18:00.0', '0000:18:00.0'))
        self.assertEqual(256 + 9, card_choice.pci_distance(
            '0000:18:00.0', '0000:19:01.1'))


class TestGreedy(base.BaseTestCase):
    """Above EXHAUSTIVE_LIMIT candidates a greedy choice is made."""

    def _cards(self, buses):
        return [_gpu('0000:%02x:00.0' % b, 0) for b in buses]

    def test_finds_the_close_cluster(self):
        buses = list(range(0x10, 0xf0, 0x10)) + [0x81, 0x82, 0x83, 0x84]
        cards = self._cards(buses)
        self.assertGreater(len(cards), card_choice.EXHAUSTIVE_LIMIT)
        self.assertEqual(['0000:80:00.0', '0000:81:00.0', '0000:82:00.0',
                          '0000:83:00.0'],
                         _pci(card_choice.choose(cards, 4)))

    def test_agrees_with_the_exhaustive_search_on_links(self):
        pci = ['0000:%02x:00.0' % b for b in range(0x10, 0x10 + 20)]
        # two NVLink islands of 4; the rest is PCIe NODE
        islands = [set(pci[2:6]), set(pci[12:16])]
        pairs = {}
        for a, b in itertools.combinations(pci, 2):
            same = any(a in i and b in i for i in islands)
            pairs[(a, b)] = ('NV12' if same and a in islands[1] else
                             'NV4' if same else 'NODE')
        links = gpu_topology.Links(pairs)
        cards = [_gpu(p, 0) for p in pci]
        self.assertEqual(pci[12:16],
                         _pci(card_choice.choose(cards, 4, links)))
        # the same with 16 candidates: the exhaustive search
        self.assertEqual(pci[12:16],
                         _pci(card_choice.choose(cards[:16], 4, links)))

    def test_deterministic(self):
        cards = self._cards(range(0x10, 0x10 + 24 * 2, 2))
        expected = _pci(card_choice.choose(cards, 5))
        self.assertEqual(['0000:%02x:00.0' % b
                          for b in range(0x10, 0x1a, 2)], expected)
        rng = random.Random(7)
        for _ in range(5):
            rng.shuffle(cards)
            self.assertEqual(expected, _pci(card_choice.choose(cards, 5)))


class TestDescribe(base.BaseTestCase):

    def test_no_card(self):
        self.assertEqual('no card', card_choice.describe([]))

    def test_mixed_numa_with_unknown(self):
        cards = [_gpu('0000:18:00.0', None), _gpu('0000:19:00.0', 1)]
        self.assertEqual('NUMA nodes 1, unknown; links unknown, nearest '
                         'PCI addresses', card_choice.describe(cards))
