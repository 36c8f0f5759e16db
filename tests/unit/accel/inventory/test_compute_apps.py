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

"""``--query-compute-apps`` answers, recorded and of a tenant's making."""

import testtools

from nova_lxd_accel.accel.inventory import compute_apps
from nova_lxd_accel.accel.inventory import nvidia_smi
from tests.fixtures import gpu_hosts

H100 = '0000:00:09.0'
OTHER = '0000:3b:00.0'
#: the probe's own columns (no process name), as nvidia-smi prints them
PROBE_HEADER = 'gpu_bus_id, gpu_uuid, pid, used_gpu_memory [MiB]'
#: a recorded capture's columns: the name in the middle
RECORDED_HEADER = ('timestamp, gpu_name, gpu_bus_id, gpu_serial, gpu_uuid, '
                   'pid, process_name, used_gpu_memory [MiB]')
ROW = ('2026/07/14 08:12:53.500, NVIDIA H100 80GB HBM3, 00000000:00:09.0, '
       '0000000000000, GPU-00000000-0000-0000-0000-000000000000, %d, %s, '
       '%d MiB')


class TestParseComputeApps(testtools.TestCase):

    def test_recorded_load(self):
        apps = compute_apps.parse(gpu_hosts.load_text(
            'nvsmi-h100-80gb-load-compute-apps.csv'))
        self.assertEqual([(11327, '/root/tools/memhog', 2566),
                          (11328, '/root/tools/memhog', 1542),
                          (11345, './gpu_burn', 15690)],
                         [(a.pid, a.name, a.used_memory_mib)
                          for a in apps[H100]])

    def test_recorded_idle_has_header_only(self):
        self.assertEqual({}, compute_apps.parse(gpu_hosts.load_text(
            'nvsmi-h100-80gb-idle-compute-apps.csv')))


class TestTenantText(testtools.TestCase):
    """A process name is the tenant's: it never moves or makes a row."""

    def test_the_probe_s_columns(self):
        apps = compute_apps.parse(PROBE_HEADER + '\n00000000:00:09.0, '
                                  'GPU-1234abcd, 4242, 1024 MiB\n')
        [app] = apps[H100]
        self.assertEqual((4242, None, 1024, 'GPU-1234abcd'),
                         (app.pid, app.name, app.used_memory_mib,
                          app.gpu_uuid))

    def test_commas_in_a_name_stay_in_the_name(self):
        # before: a row of the wrong width was dropped, and the
        # leftover's memory was not seen on the card
        text = '\n'.join([RECORDED_HEADER,
                          ROW % (11345, 'burn, 0000:3b:00.0, x', 15690)])
        [app] = compute_apps.parse(text)[H100]
        self.assertEqual((11345, 'burn, 0000:3b:00.0, x', 15690),
                         (app.pid, app.name, app.used_memory_mib))

    def test_a_line_break_in_a_name_spoils_the_answer(self):
        # the name's second line would read as another GPU's process (a
        # false dirty hold on someone else's card, or usage billed to it):
        # the whole answer is refused instead, never a row made up
        forged = ('x\n2026/07/14 08:12:53.500, NVIDIA H100 80GB HBM3, '
                  '00000000:3B:00.0, 0, GPU-0, 999, y')
        text = '\n'.join([RECORDED_HEADER, ROW % (11345, forged, 10)])
        error = self.assertRaises(ValueError, compute_apps.parse, text)
        self.assertEqual('line 2 is not a process row', str(error))
        # and a half line of any shape
        for tail in ('only, three, fields', 'GPU-0, 1, 2, 3, 4, 5, 6, 7'):
            self.assertRaises(ValueError, compute_apps.parse,
                              PROBE_HEADER + '\n' + tail)

    def test_every_fixed_column_has_its_form(self):
        for row in ('00000000:00:09.0, GPU-1, 0, 1 MiB',          # pid 0
                    '00000000:00:09.0, GPU-1, -4, 1 MiB',
                    '00000000:00:09.0, GPU-1, 42, lots',
                    '0000:00:09.0;x, GPU-1, 42, 1 MiB',
                    '00000000:00:09.0, ;rm, 42, 1 MiB'):
            self.assertRaises(ValueError, compute_apps.parse,
                              PROBE_HEADER + '\n' + row)
        [app] = compute_apps.parse(
            PROBE_HEADER + '\n00000000:00:09.0, MIG-GPU-ab/1/0, 7, '
            '[N/A]\n')[H100]
        self.assertIsNone(app.used_memory_mib)

    def test_not_an_answer(self):
        for text in ('', 'Failed to initialize NVML: Unknown Error',
                     'index, name\n0, x'):
            self.assertRaises(ValueError, compute_apps.parse, text)

    def test_names_are_printable_and_short(self):
        self.assertEqual('a?b', compute_apps.printable('a\x1bb'))
        self.assertEqual(64, len(compute_apps.printable('x' * 500)))
        self.assertIsNone(compute_apps.printable(''))


class TestMpsServerName(testtools.TestCase):

    def test_only_a_host_process_is_the_mps_server(self):
        # by nvidia-smi's name or the kernel's 15-character comm, and only
        # outside every container: a tenant may call its process so
        for name in ('nvidia-cuda-mps-server', 'nvidia-cuda-mps',
                     '/usr/bin/nvidia-cuda-mps-server'):
            self.assertTrue(nvidia_smi.ComputeApp(
                H100, 1, name, 30, in_container=False).is_mps_server)
            self.assertFalse(nvidia_smi.ComputeApp(
                H100, 1, name, 30, in_container=True).is_mps_server)
        self.assertFalse(nvidia_smi.ComputeApp(
            H100, 1, 'nvidia-cuda-mps-control', 30).is_mps_server)
