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

"""How the host's NVIDIA GPUs are linked: ``nvidia-smi topo -m``.

:func:`read` runs it (through :func:`.nvidia_smi.run`), :func:`parse_matrix`
reads its matrix into ``{(i, j): link}`` for GPU indexes (NIC rows and
columns, the CPU/NUMA affinity columns and the legend are ignored), and
:class:`Links` names the pairs by PCI address: nvidia-smi numbers the
NVIDIA GPUs in PCI address order (as :func:`..units._gpu_index` does), so
index ``i`` is the ``i``-th NVIDIA GPU in that order.

:meth:`Links.rank` orders the links, lower is closer: NVLink (``NV<n>``,
more links closer) < ``PIX`` < ``PXB`` < ``PHB`` < ``NODE`` < ``SYS``
(``SOC`` on old drivers).
"""

import re
import types

from oslo_log import log as logging

from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel.inventory import nvidia_smi

LOG = logging.getLogger(__name__)

#: rank of the PCIe links; every NVLink ranks below ``PIX``
PCIE_RANKS = types.MappingProxyType({
    'PIX': 64, 'PXB': 65, 'PHB': 66, 'NODE': 67, 'SYS': 68, 'SOC': 68})
#: ``NV<n>`` ranks ``64 - n``: more bonded links, closer (n capped here)
MAX_NVLINKS = 63
_NVLINK = re.compile(r'^NV(\d+)$')
_GPU_NAME = re.compile(r'^GPU(\d+)$')
_ANSI = re.compile(r'\x1b\[[0-9;]*[A-Za-z]')
#: header words after the device columns (``CPU Affinity``, ``NUMA
#: Affinity``, ``GPU NUMA ID``)
_HEADER_END = ('CPU', 'NUMA', 'GPU', 'Affinity')
SELF = 'X'
_address = devices.normalise_pci_address


def link_rank(link):
    """Rank of one link as nvidia-smi prints it; None when unknown."""
    link = (link or '').strip()
    match = _NVLINK.match(link)
    if match:
        count = int(match.group(1))
        if count < 1:
            return None
        return PCIE_RANKS['PIX'] - min(count, MAX_NVLINKS)
    return PCIE_RANKS.get(link)


def _tokens(line):
    return _ANSI.sub('', line).split()


def parse_matrix_with_reason(text):
    """Parse ``nvidia-smi topo -m``; never raises.

    :returns: ``(matrix, reason)``: ``matrix`` is ``{(i, j): link}`` for
        every pair of GPU indexes ``i != j`` (both orders); ``reason`` is
        None when the text is such a matrix (one GPU gives ``{}``), else
        why it is not, and ``matrix`` is then ``{}``.
    """
    try:
        return _parse(text)
    except Exception as exc:     # a parser of foreign text must not raise
        return {}, 'cannot parse the matrix: %s' % exc


def parse_matrix(text):
    """``{(i, j): link}`` of ``nvidia-smi topo -m``; ``{}`` when unusable.

    See :func:`parse_matrix_with_reason` for the reason of an empty one.
    """
    return parse_matrix_with_reason(text)[0]


def _header(lines):
    """(index of the header line, its device column names) or None."""
    for number, line in enumerate(lines):
        tokens = _tokens(line)
        if len(tokens) < 2 or tokens[0] != 'GPU0':
            continue
        if tokens[1] == SELF:
            return None          # a row before any header
        columns = []
        for token in tokens:
            if token in _HEADER_END:
                break
            columns.append(token)
        return number, columns
    return None


def _parse(text):
    if not isinstance(text, str) or not text.strip():
        return {}, 'no output'
    lines = text.splitlines()
    found = _header(lines)
    if found is None:
        return {}, 'no matrix header (a line starting with GPU0)'
    start, columns = found
    gpu_columns = {}
    for position, name in enumerate(columns):
        match = _GPU_NAME.match(name)
        if match:
            gpu_columns[int(match.group(1))] = position
    count = len(gpu_columns)
    if sorted(gpu_columns) != list(range(count)):
        return {}, 'GPU columns are not GPU0..GPU%d' % (count - 1)
    rows = {}
    for line in lines[start + 1:]:
        tokens = _tokens(line)
        if not tokens:
            continue
        if tokens[0].rstrip(':') == 'Legend':
            break
        match = _GPU_NAME.match(tokens[0])
        if not match:
            continue             # NIC rows
        index = int(match.group(1))
        if index in rows:
            return {}, 'GPU%d has two rows' % index
        if index not in gpu_columns:
            return {}, 'row GPU%d has no column' % index
        cells = tokens[1:1 + len(columns)]
        if len(cells) < len(columns):
            return {}, 'row GPU%d has %d cells for %d columns' % (
                index, len(cells), len(columns))
        rows[index] = cells
    if sorted(rows) != list(range(count)):
        return {}, 'rows are not GPU0..GPU%d' % (count - 1)
    matrix = {}
    for i in range(count):
        for j in range(count):
            link = rows[i][gpu_columns[j]]
            if i == j:
                if link != SELF:
                    return {}, 'GPU%d to itself is %r, not X' % (i, link)
                continue
            if link_rank(link) is None:
                return {}, 'unknown link %r between GPU%d and GPU%d' % (
                    link, i, j)
            matrix[(i, j)] = link
    for (i, j), link in matrix.items():
        if matrix[(j, i)] != link:
            return {}, 'GPU%d-GPU%d is %s one way and %s the other' % (
                i, j, link, matrix[(j, i)])
    return matrix, None


class Links(object):
    """The links between the host's NVIDIA GPUs, by PCI address; immutable.

    Build it with :meth:`build` (or :meth:`none` when nothing is known).
    A Links is false when it knows no pair.
    """

    __slots__ = ('_pairs',)

    def __init__(self, pairs=None):
        pairs = {(a, b): link for (a, b), link in (pairs or {}).items()
                 if a != b and link_rank(link) is not None}
        both = dict(pairs)
        both.update({(b, a): link for (a, b), link in pairs.items()})
        object.__setattr__(self, '_pairs', types.MappingProxyType(both))

    def __setattr__(self, name, value):
        raise AttributeError('Links is immutable')

    def __delattr__(self, name):
        raise AttributeError('Links is immutable')

    @classmethod
    def none(cls):
        """Links that know no pair."""
        return cls()

    @classmethod
    def build(cls, matrix, pci_addresses):
        """Links of ``matrix`` (:func:`parse_matrix`) by PCI address.

        :param pci_addresses: the host's NVIDIA GPUs' PCI addresses (any
            order: they are put in PCI address order here, nvidia-smi's).
        :returns: the Links, or :meth:`none` when the matrix is empty or
            does not number exactly as many GPUs as there are addresses
            (nvidia-smi sees other GPUs: its indexes cannot be trusted).
        """
        addresses = sorted({_address(a) for a in pci_addresses or ()
                            if _address(a)}, key=pci_sort_key)
        indexes = {i for pair in (matrix or {}) for i in pair}
        if not indexes or indexes != set(range(len(addresses))):
            return cls.none()
        return cls({(addresses[i], addresses[j]): link
                    for (i, j), link in matrix.items()})

    @classmethod
    def for_gpus(cls, matrix, gpus):
        """:meth:`build` from :class:`..devices.Gpu` objects (NVIDIA only)."""
        return cls.build(matrix, [g.pci_address for g in gpus or ()
                                  if g.is_nvidia and g.pci_address])

    def link(self, pci_a, pci_b):
        """The link between two GPUs as nvidia-smi prints it, or None."""
        return self._pairs.get((_address(pci_a), _address(pci_b)))

    def rank(self, pci_a, pci_b):
        """How close two GPUs are (:func:`link_rank`); None when unknown."""
        return link_rank(self.link(pci_a, pci_b))

    def knows(self, pci_addresses):
        """Whether every pair of these GPUs has a known link."""
        addresses = list(pci_addresses)
        return all(self.link(a, b) is not None
                   for n, a in enumerate(addresses)
                   for b in addresses[n + 1:])

    def addresses(self):
        """The PCI addresses of the GPUs it knows, in PCI address order."""
        return sorted({a for a, _ in self._pairs}, key=pci_sort_key)

    def __bool__(self):
        return bool(self._pairs)

    def __len__(self):
        """The number of pairs known (each counted once)."""
        return len(self._pairs) // 2

    def __eq__(self, other):
        return isinstance(other, Links) and \
            dict(self._pairs) == dict(other._pairs)

    def __hash__(self):
        return hash(frozenset(self._pairs.items()))

    def __repr__(self):
        return 'Links(%d pairs)' % len(self)


def pci_sort_key(pci_address):
    """Sort key of a PCI address: (domain, bus, device, function) numbers.

    Addresses that do not parse sort after every one that does, by text.
    """
    address = _address(pci_address) or ''
    match = re.match(r'^([0-9a-f]+):([0-9a-f]{1,2}):([0-9a-f]{1,2})\.'
                     r'([0-7])$', address)
    if not match:
        return (1, 0, 0, 0, 0, address)
    return (0,) + tuple(int(part, 16) for part in match.groups()) + (
        address,)


def read(path='nvidia-smi', timeout=10):
    """Run ``<path> topo -m`` (see :func:`.nvidia_smi.run_text`)."""
    return nvidia_smi.run_text(path, ['topo', '-m'], timeout,
                               'no GPU topology',
                               'GPU topology unknown this time')


def read_links(gpus, path='nvidia-smi', timeout=10):
    """:class:`Links` of ``gpus`` (:class:`..devices.Gpu`) from nvidia-smi.

    :returns: the Links (:meth:`Links.none` when nvidia-smi is absent or
        its matrix is unusable, which is logged), or None when it failed
        this time (unknown: keep the Links known before).
    """
    text = read(path, timeout)
    if text is None:
        return None
    if not text:
        return Links.none()
    matrix, reason = parse_matrix_with_reason(text)
    if reason:
        LOG.warning('%s topo -m gave no usable matrix (%s); GPUs are '
                    'chosen without their links', path, reason)
        return Links.none()
    links = Links.for_gpus(matrix, gpus)
    nvidia = len([g for g in gpus or () if g.is_nvidia])
    if matrix and not links:
        LOG.warning('%(path)s topo -m numbers %(smi)d GPUs, the host has '
                    '%(host)d NVIDIA GPUs: GPUs are chosen without their '
                    'links', {'path': path, 'host': nvidia,
                              'smi': len({i for i, _ in matrix})})
    return links
