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

import operator

import fixtures
from oslotest import base

from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel.inventory import gpu_topology
from nova_lxd_accel.accel.inventory import nvidia_smi
from tests.fixtures import fake_nvidia_smi
from tests.fixtures import gpu_hosts

DGX = 'handmade-nvsmi-topo-m-dgx-h100.txt'
PCIE = 'handmade-nvsmi-topo-m-4-pcie.txt'
#: a DGX H100's GPUs, in PCI address order (nvidia-smi's GPU0..GPU7)
DGX_PCI = ['0000:1b:00.0', '0000:43:00.0', '0000:52:00.0', '0000:61:00.0',
           '0000:9d:00.0', '0000:c3:00.0', '0000:d1:00.0', '0000:df:00.0']
PCIE_PCI = ['0000:1a:00.0', '0000:1b:00.0', '0000:1e:00.0', '0000:88:00.0']

#: an old driver's matrix: spaces, SOC for SYS, NICs named by device
OLD_DRIVER = """\
        GPU0    GPU1    mlx5_0  CPU Affinity
GPU0     X      SOC     PHB     0-11
GPU1    SOC      X      SOC     12-23
mlx5_0  PHB     SOC      X

Legend:

  X   = Self
  SOC  = Connection traversing PCIe as well as the SMP link between CPU \
sockets(e.g. QPI)
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge \
(typically the CPU)
  PXB  = Connection traversing multiple PCIe switches (without traversing \
the PCIe Host Bridge)
  PIX  = Connection traversing a single PCIe switch
  NV#  = Connection traversing a bonded set of # NVLinks
"""

#: nvidia-smi on a terminal: bold column names
ANSI = ('\t\x1b[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\x1b[0m\n'
        '\x1b[4mGPU0\x1b[0m\t X \tNV12\t0-63\t0\n'
        '\x1b[4mGPU1\x1b[0m\tNV12\t X \t0-63\t0\n')

ONE_GPU = ('\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n'
           'GPU0\t X \t0-31\t0\t\tN/A\n\nLegend:\n\n  X    = Self\n')


def _gpu(pci, vendor='10de', numa=0):
    return devices.Gpu(pci_address=pci, vendor_id=vendor, numa_node=numa)


class TestParseMatrix(base.BaseTestCase):

    def test_dgx_h100_all_nvlink(self):
        matrix = gpu_topology.parse_matrix(gpu_hosts.load_text(DGX))
        self.assertEqual(8 * 7, len(matrix))
        self.assertEqual({'NV18'}, set(matrix.values()))
        self.assertNotIn((0, 0), matrix)
        self.assertEqual('NV18', matrix[(0, 7)])
        # the NIC columns and rows are not GPUs
        self.assertEqual(set(range(8)), {i for pair in matrix for i in pair})

    def test_pcie_host(self):
        matrix, reason = gpu_topology.parse_matrix_with_reason(
            gpu_hosts.load_text(PCIE))
        self.assertIsNone(reason)
        self.assertEqual({(0, 1): 'PXB', (0, 2): 'PXB', (0, 3): 'SYS',
                          (1, 0): 'PXB', (1, 2): 'PIX', (1, 3): 'SYS',
                          (2, 0): 'PXB', (2, 1): 'PIX', (2, 3): 'SYS',
                          (3, 0): 'SYS', (3, 1): 'SYS', (3, 2): 'SYS'},
                         matrix)

    def test_old_driver_spaces_and_soc(self):
        self.assertEqual({(0, 1): 'SOC', (1, 0): 'SOC'},
                         gpu_topology.parse_matrix(OLD_DRIVER))

    def test_terminal_escapes(self):
        self.assertEqual({(0, 1): 'NV12', (1, 0): 'NV12'},
                         gpu_topology.parse_matrix(ANSI))

    def test_one_gpu_is_a_matrix_without_pairs(self):
        self.assertEqual(({}, None),
                         gpu_topology.parse_matrix_with_reason(ONE_GPU))

    def _unusable(self, text, reason_part):
        matrix, reason = gpu_topology.parse_matrix_with_reason(text)
        self.assertEqual({}, matrix)
        self.assertIn(reason_part, reason)
        self.assertEqual({}, gpu_topology.parse_matrix(text))

    def test_empty(self):
        self._unusable('', 'no output')
        self._unusable(None, 'no output')
        self._unusable(b'\tGPU0\tGPU1\n', 'no output')

    def test_driver_error(self):
        self._unusable('Failed to initialize NVML: Driver/library version '
                       'mismatch\nNVML library version: 550.127\n',
                       'no matrix header')

    def test_binary_garbage(self):
        self._unusable('\x00\xff\x1b[2J GPU0 \t\t\x07', 'no matrix header')

    def test_truncated_row(self):
        text = '\n'.join(gpu_hosts.load_text(PCIE).splitlines()[:3])
        lines = text.splitlines()
        lines[2] = lines[2].split('\t', 2)[0] + '\tPXB'
        self._unusable('\n'.join(lines), 'row GPU1 has 1 cells')

    def test_missing_row(self):
        lines = gpu_hosts.load_text(PCIE).splitlines()
        del lines[3]
        self._unusable('\n'.join(lines), 'rows are not GPU0..GPU3')

    def test_unknown_link(self):
        text = gpu_hosts.load_text(PCIE).replace('PIX\t X ', 'C2C\t X ')
        self._unusable(text, "unknown link 'C2C' between GPU2 and GPU1")

    def test_asymmetric(self):
        lines = gpu_hosts.load_text(PCIE).splitlines()
        lines[1] = lines[1].replace('PXB', 'PHB', 1)
        self._unusable('\n'.join(lines), 'GPU0-GPU1 is PHB one way')

    def test_diagonal_not_self(self):
        lines = gpu_hosts.load_text(PCIE).splitlines()
        lines[1] = lines[1].replace(' X ', 'PIX')
        self._unusable('\n'.join(lines), 'GPU0 to itself')

    def test_columns_not_numbered_from_zero(self):
        text = gpu_hosts.load_text(PCIE).replace('GPU0', 'GPU9')
        self._unusable(text, 'no matrix header')
        text = gpu_hosts.load_text(PCIE).replace('\tGPU2\t', '\tGPU5\t', 1)
        self._unusable(text, 'GPU columns are not GPU0..GPU3')


class TestLinkRank(base.BaseTestCase):

    def test_order(self):
        order = ['NV18', 'NV12', 'NV4', 'NV1', 'PIX', 'PXB', 'PHB', 'NODE',
                 'SYS']
        ranks = [gpu_topology.link_rank(link) for link in order]
        self.assertEqual(sorted(ranks), ranks)
        self.assertEqual(len(set(ranks)), len(ranks))
        self.assertEqual(gpu_topology.link_rank('SYS'),
                         gpu_topology.link_rank('SOC'))

    def test_unknown(self):
        for link in ('X', 'NV0', 'NV', 'C2C', '', None):
            self.assertIsNone(gpu_topology.link_rank(link), link)


class TestLinks(base.BaseTestCase):

    def _dgx(self):
        return gpu_topology.Links.build(
            gpu_topology.parse_matrix(gpu_hosts.load_text(DGX)),
            reversed(DGX_PCI))

    def test_by_pci_address_in_pci_order(self):
        links = gpu_topology.Links.build(
            gpu_topology.parse_matrix(gpu_hosts.load_text(PCIE)),
            # any order: index i is the i-th in PCI address order
            [PCIE_PCI[3], PCIE_PCI[1], PCIE_PCI[0], PCIE_PCI[2]])
        self.assertEqual('PIX', links.link('0000:1b:00.0', '0000:1e:00.0'))
        self.assertEqual('PIX', links.link('0000:1E:00.0', '1b:00.0'))
        self.assertEqual('PXB', links.link(PCIE_PCI[0], PCIE_PCI[1]))
        self.assertEqual('SYS', links.link(PCIE_PCI[3], PCIE_PCI[0]))
        self.assertLess(links.rank(PCIE_PCI[1], PCIE_PCI[2]),
                        links.rank(PCIE_PCI[0], PCIE_PCI[1]))
        self.assertLess(links.rank(PCIE_PCI[0], PCIE_PCI[1]),
                        links.rank(PCIE_PCI[0], PCIE_PCI[3]))
        self.assertEqual(6, len(links))
        self.assertEqual(PCIE_PCI, links.addresses())

    def test_dgx(self):
        links = self._dgx()
        self.assertTrue(links)
        self.assertEqual(28, len(links))
        self.assertEqual(gpu_topology.link_rank('NV18'),
                         links.rank(DGX_PCI[0], DGX_PCI[7]))
        self.assertTrue(links.knows(DGX_PCI))
        self.assertFalse(links.knows(DGX_PCI + ['0000:ee:00.0']))

    def test_unknown_pairs(self):
        links = self._dgx()
        self.assertIsNone(links.rank(DGX_PCI[0], '0000:ee:00.0'))
        self.assertIsNone(links.rank(DGX_PCI[0], DGX_PCI[0]))
        self.assertIsNone(links.link(None, DGX_PCI[0]))

    def test_none(self):
        links = gpu_topology.Links.none()
        self.assertFalse(links)
        self.assertEqual(0, len(links))
        self.assertIsNone(links.rank(DGX_PCI[0], DGX_PCI[1]))
        self.assertEqual(gpu_topology.Links.none(), links)

    def test_count_mismatch_is_none(self):
        matrix = gpu_topology.parse_matrix(gpu_hosts.load_text(DGX))
        self.assertFalse(gpu_topology.Links.build(matrix, DGX_PCI[:7]))
        self.assertFalse(gpu_topology.Links.build(
            matrix, DGX_PCI + ['0000:ee:00.0']))
        self.assertFalse(gpu_topology.Links.build({}, DGX_PCI))

    def test_for_gpus_takes_nvidia_gpus_only(self):
        matrix = gpu_topology.parse_matrix(gpu_hosts.load_text(PCIE))
        gpus = [_gpu(pci) for pci in PCIE_PCI] + [
            _gpu('0000:03:00.0', vendor='1a03'),     # the BMC's ASPEED
            _gpu('0000:1c:00.0', vendor='1002')]     # an AMD card
        links = gpu_topology.Links.for_gpus(matrix, gpus)
        self.assertEqual('PIX', links.link(PCIE_PCI[1], PCIE_PCI[2]))
        self.assertIsNone(links.link('0000:1c:00.0', PCIE_PCI[2]))

    def test_immutable(self):
        links = self._dgx()
        self.assertRaises(AttributeError, setattr, links, '_pairs', {})
        self.assertRaises(AttributeError, delattr, links, '_pairs')
        self.assertRaises(TypeError, operator.setitem, links._pairs,
                          (DGX_PCI[0], DGX_PCI[1]), 'SYS')
        self.assertEqual(hash(self._dgx()), hash(links))


class TestRead(base.BaseTestCase):
    """Runs real tiny scripts standing in for nvidia-smi."""

    def _script(self, body):
        return fake_nvidia_smi.script(
            self.useFixture(fixtures.TempDir()).path, body)

    def _sample_script(self, name):
        return self._script(
            '[ "$1 $2" = "topo -m" ] && exec cat %s\nexit 2' %
            gpu_hosts.sample_path(name))

    def test_output(self):
        path = self._sample_script(DGX)
        self.assertEqual(gpu_hosts.load_text(DGX),
                         gpu_topology.read(path, 5))

    def test_absent_binary(self):
        self.assertEqual('', gpu_topology.read('/nonexistent/nvidia-smi'))

    def test_no_devices(self):
        path = self._script('echo "No devices were found"; exit 6')
        self.assertEqual('', gpu_topology.read(path, 5))

    def test_failure_is_unknown(self):
        logs = self.useFixture(fixtures.FakeLogger())
        path = self._script('echo "NVIDIA-SMI has failed" >&2; exit 9')
        self.assertIsNone(gpu_topology.read(path, 5))
        self.assertIn('failed with status 9: NVIDIA-SMI has failed',
                      logs.output)

    def test_timeout_is_unknown(self):
        path = self._script('exec sleep 5')
        self.assertIsNone(gpu_topology.read(path, 0.2))

    def test_goes_through_nvidia_smi_run(self):
        calls = []

        def fake_run(path, args, timeout):
            calls.append((path, list(args), timeout))
            return 0, 'out', ''

        self.useFixture(fixtures.MonkeyPatch(
            'nova_lxd_accel.accel.inventory.nvidia_smi.run', fake_run))
        self.assertEqual('out', gpu_topology.read('/x/nvidia-smi', 7))
        self.assertEqual([('/x/nvidia-smi', ['topo', '-m'], 7)], calls)
        self.assertEqual(-1, nvidia_smi.FAILED_TO_RUN)


class TestReadLinks(base.BaseTestCase):

    def _run(self, rc, out):
        self.useFixture(fixtures.MonkeyPatch(
            'nova_lxd_accel.accel.inventory.nvidia_smi.run',
            lambda path, args, timeout: (rc, out, '')))

    def test_pcie_host(self):
        self._run(0, gpu_hosts.load_text(PCIE))
        links = gpu_topology.read_links([_gpu(p) for p in PCIE_PCI])
        self.assertEqual('PIX', links.link(PCIE_PCI[1], PCIE_PCI[2]))

    def test_failed_is_unknown(self):
        self._run(nvidia_smi.FAILED_TO_RUN, '')
        self.assertIsNone(gpu_topology.read_links([_gpu(PCIE_PCI[0])]))

    def test_absent_is_none(self):
        self._run(None, '')
        links = gpu_topology.read_links([_gpu(PCIE_PCI[0])])
        self.assertEqual(gpu_topology.Links.none(), links)

    def test_garbage_is_none_and_logged(self):
        logs = self.useFixture(fixtures.FakeLogger())
        self._run(0, 'Failed to initialize NVML: Unknown Error\n')
        links = gpu_topology.read_links([_gpu(p) for p in PCIE_PCI])
        self.assertFalse(links)
        self.assertIsNotNone(links)
        self.assertIn('no usable matrix (no matrix header', logs.output)

    def test_other_gpus_than_nvidia_smi_is_none_and_logged(self):
        logs = self.useFixture(fixtures.FakeLogger())
        self._run(0, gpu_hosts.load_text(PCIE))
        links = gpu_topology.read_links([_gpu(p) for p in PCIE_PCI[:3]])
        self.assertFalse(links)
        self.assertIn('numbers 4 GPUs, the host has 3 NVIDIA GPUs',
                      logs.output)
