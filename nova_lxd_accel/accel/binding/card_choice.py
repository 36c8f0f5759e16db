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

"""Which cards of a pool of identical GPUs an instance gets.

Placement counts identical whole GPUs of a host in one provider, so an
allocation says how many (``resources:PGPU=4``), not which: :func:`choose`
picks them, by these rules in order:

a. all on one NUMA node when a node has enough free cards: the node with
   the fewest free cards that still fits (best fit: bigger nodes stay
   whole for bigger requests); ties go to the lowest NUMA id, cards
   without a NUMA node counting as one group, after every numbered one;
b. else as few NUMA nodes as possible: the nodes with the most free
   cards first (same ties);
c. among those candidates, the ``count`` cards with the lowest sum of
   pairwise link ranks (:meth:`..inventory.gpu_topology.Links.rank`:
   NVLink peers first) when the links of every pair are known, else the
   closest PCI addresses (same domain, nearest bus numbers);
d. equal choices go to the cards first in PCI address order; the result
   is in PCI address order.

Every subset is tried up to :data:`EXHAUSTIVE_LIMIT` candidates; above, a
greedy choice grown from each candidate in turn. Pure: no I/O, no logs;
:func:`describe` gives the line to log.
"""

import collections
import itertools

from nova_lxd_accel.accel.inventory import gpu_topology

#: candidates up to which every subset is tried (C(16, 8) = 12870)
EXHAUSTIVE_LIMIT = 16
#: the PCI distance of two cards in different PCI domains (or unparsable)
FAR = 1 << 20


def _pci_key(card):
    return gpu_topology.pci_sort_key(card.pci_address)


def _numa_key(numa):
    """NUMA ids in order, None (unknown) last."""
    return (numa is None, numa if numa is not None else 0)


def _by_numa(cards):
    groups = collections.OrderedDict()
    for card in cards:
        groups.setdefault(card.numa_node, []).append(card)
    return groups


def numa_candidates(cards, count):
    """Rules (a) and (b): the cards ``count`` is chosen among.

    :param cards: free cards in PCI address order, at least ``count``.
    :returns: the cards of the best-fitting NUMA node, or of the fewest
        nodes holding ``count`` cards together, in PCI address order.
    """
    groups = _by_numa(cards)
    fitting = [numa for numa, group in groups.items()
               if len(group) >= count]
    if fitting:
        best = min(fitting, key=lambda n: (len(groups[n]), _numa_key(n)))
        return list(groups[best])
    chosen = []
    for numa in sorted(groups, key=lambda n: (-len(groups[n]),
                                              _numa_key(n))):
        chosen.extend(groups[numa])
        if len(chosen) >= count:
            break
    return sorted(chosen, key=_pci_key)


def pci_distance(pci_a, pci_b):
    """How far apart two PCI addresses are: bus, then device/function.

    :data:`FAR` across PCI domains or for an address that does not parse.
    """
    a = gpu_topology.pci_sort_key(pci_a)
    b = gpu_topology.pci_sort_key(pci_b)
    if a[0] or b[0] or a[1] != b[1]:
        return FAR
    return abs(a[2] - b[2]) * 256 + abs((a[3] * 8 + a[4]) -
                                        (b[3] * 8 + b[4]))


def _costs(cards, links):
    """Pairwise costs of the cards: link ranks when all known, or PCI."""
    addresses = [c.pci_address for c in cards]
    ranks = None
    if links:
        ranks = [[links.rank(a, b) if a != b else 0 for b in addresses]
                 for a in addresses]
        if any(r is None for row in ranks for r in row):
            ranks = None
    if ranks is not None:
        return ranks
    return [[pci_distance(a, b) for b in addresses] for a in addresses]


def _total(costs, chosen):
    return sum(costs[i][j] for n, i in enumerate(chosen)
               for j in chosen[n + 1:])


def _exhaustive(costs, count):
    best, best_total = None, None
    for chosen in itertools.combinations(range(len(costs)), count):
        total = _total(costs, chosen)
        if best_total is None or total < best_total:
            best, best_total = chosen, total
    return best


def _greedy(costs, count):
    best, best_key = None, None
    size = len(costs)
    for seed in range(size):
        chosen = [seed]
        while len(chosen) < count:
            nearest = min(
                (i for i in range(size) if i not in chosen),
                key=lambda i: (sum(costs[i][j] for j in chosen), i))
            chosen.append(nearest)
        chosen.sort()
        key = (_total(costs, chosen), chosen)
        if best_key is None or key < best_key:
            best, best_key = chosen, key
    return best


def choose(cards, count, links=None):
    """Pick ``count`` of the free ``cards`` (see the module's rules).

    :param cards: the free cards: objects with ``pci_address`` and
        ``numa_node`` (:class:`..devices.Gpu`); their order is ignored.
    :param count: how many the allocation holds.
    :param links: a :class:`..inventory.gpu_topology.Links` (or anything
        with ``rank(pci_a, pci_b)``), or None when the links are unknown.
    :returns: a list of ``count`` cards in PCI address order ([] for a
        count of 0 or less), or None when fewer than ``count`` are given.
    """
    cards = sorted(cards or (), key=_pci_key)
    if count <= 0:
        return []
    if len(cards) < count:
        return None
    candidates = numa_candidates(cards, count)
    if len(candidates) == count:
        return candidates
    costs = _costs(candidates, links)
    if len(candidates) <= EXHAUSTIVE_LIMIT:
        chosen = _exhaustive(costs, count)
    else:
        chosen = _greedy(costs, count)
    return [candidates[i] for i in sorted(chosen)]


def _numa_text(cards):
    nodes = sorted({c.numa_node for c in cards}, key=_numa_key)
    names = ['unknown' if n is None else '%s' % n for n in nodes]
    return 'NUMA node%s %s' % ('s' if len(names) > 1 else '',
                               ', '.join(names))


def _link_text(cards, links):
    if len(cards) < 2:
        return 'a single card'
    addresses = [c.pci_address for c in sorted(cards, key=_pci_key)]
    pairs = [(a, b) for n, a in enumerate(addresses)
             for b in addresses[n + 1:]]
    kinds = [links.link(a, b) if links else None for a, b in pairs]
    if any(k is None for k in kinds):
        return 'links unknown, nearest PCI addresses'
    counted = collections.Counter(kinds)
    if len(counted) == 1:
        kind = kinds[0]
        family = 'NVLink' if kind.startswith('NV') else 'PCIe'
        return '%s %s between all pairs' % (family, kind)
    ordered = sorted(counted, key=lambda k: (gpu_topology.link_rank(k), k))
    return 'links %s' % ', '.join(
        '%s (%d pair%s)' % (k, counted[k], '' if counted[k] == 1 else 's')
        for k in ordered)


def describe(cards, links=None):
    """One line saying where ``cards`` are, for a log line.

    :returns: e.g. ``NUMA node 0; NVLink NV18 between all pairs``,
        ``NUMA nodes 0, 1; links NV18 (10 pairs), SYS (4 pairs)`` or
        ``NUMA node 1; links unknown, nearest PCI addresses``.
    """
    cards = list(cards or ())
    if not cards:
        return 'no card'
    return '%s; %s' % (_numa_text(cards), _link_text(cards, links))
