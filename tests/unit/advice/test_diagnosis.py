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

"""The host checks of :mod:`nova_lxd_accel.advice.diagnosis`, one by one.

Each check runs on a :class:`diagnosis.HostView` made of real inputs: a
root directory written by the test (``/proc``, ``/sys``, ``/etc``), the
recorded ``/1.0/resources`` and ``GET /1.0`` answers of
``tests/unit/accel/samples`` and ``tests/unit/samples/daemons``, probe
snapshots parsed from recorded nvidia-smi output, and nova.conf files
read by the commands' own loader. ``tests/unit/cmd/test_gpu.py`` runs all
the checks through ``doctor`` on whole recorded hosts; here each check's
other cases.
"""

import argparse
import copy
import os

import fixtures
import testtools

from nova_lxd_accel.accel.health import probe
from nova_lxd_accel.accel.inventory import nvidia_smi
from nova_lxd_accel.advice import diagnosis
from nova_lxd_accel.cmd import common
from tests.fixtures import gpu_hosts
from tests.fixtures import recorded_daemon

H100 = 'handmade-lxd-h100-mig-host.json'
AMD_VFS = 'handmade-lxd-amd-gpu-sriov-vfs.json'
IB_VFS = 'handmade-lxd-connectx6-ib-vfs.json'
TWO_A100 = 'handmade-lxd-two-a100-no-nvidia-object.json'
H100_PCI = '0000:00:09.0'


def _h100_snapshot():
    gpus = nvidia_smi.parse_query_gpu(gpu_hosts.load_text(
        'handmade-nvsmi-h100-mig-query-gpu.csv'))
    return probe.Snapshot(1784093600.0, True, gpus, {})


class DiagnosisTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.root = self.useFixture(fixtures.TempDir()).path
        self.etc = self.useFixture(fixtures.TempDir()).path

    def put(self, path, text=''):
        """Write ``text`` at ``path`` under the host's root."""
        full = os.path.join(self.root, path.lstrip('/'))
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, 'w') as f:
            f.write(text)

    def conf(self, text='[DEFAULT]\n'):
        path = os.path.join(self.etc, 'nova.conf')
        with open(path, 'w') as f:
            f.write(text)
        return common.load_conf(argparse.Namespace(config_file=[path],
                                                   state_dir=None))

    def view(self, resources=None, conf=None, **kwargs):
        if isinstance(resources, str):
            resources = gpu_hosts.load_json(resources)
        return diagnosis.HostView(conf=conf or self.conf(), root=self.root,
                                  resources=resources, **kwargs)

    @staticmethod
    def found(findings):
        return [(f.check, f.status) for f in findings]


class TestHostViewAndWorst(DiagnosisTest):

    def test_paths_are_under_the_root(self):
        self.put('/etc/subuid', 'root:1000000:1000000000\n')
        view = self.view()
        self.assertEqual(os.path.join(self.root, 'etc', 'subuid'),
                         view.path('/etc/subuid'))
        self.assertTrue(view.exists('/etc', 'subuid'))
        self.assertEqual('root:1000000:1000000000\n',
                         view.read('/etc/subuid'))
        self.assertIsNone(view.read('/etc/subgid'))

    def test_unreadable_bytes_do_not_stop_a_check(self):
        full = os.path.join(self.root, 'sys', 'fs', 'cgroup',
                            'cgroup.controllers')
        os.makedirs(os.path.dirname(full))
        with open(full, 'wb') as f:
            f.write(b'cpu \xff memory\n')
        [finding] = diagnosis.check_cgroup(self.view())
        self.assertEqual('ok', finding.status)
        self.assertIn('controllers: cpu \ufffd memory', finding.message)

    def test_worst(self):
        def of(*statuses):
            return diagnosis.worst([diagnosis.Finding('c', s, 'm')
                                    for s in statuses])
        self.assertEqual('ok', diagnosis.worst([]))
        self.assertEqual('ok', of('ok', 'info'))
        self.assertEqual('warning', of('info', 'warning', 'ok'))
        self.assertEqual('error', of('warning', 'error', 'info'))


class TestDaemon(DiagnosisTest):

    def server_info(self, name='lxd-5.0.2-debian12.json'):
        return recorded_daemon.sample(name)['metadata']

    def test_missing_extensions_are_named_with_the_first_release(self):
        info = copy.deepcopy(self.server_info())
        info['api_extensions'] = [e for e in info['api_extensions']
                                  if e not in ('instances', 'projects')]
        findings = diagnosis.check_daemon(self.view(server_info=info))
        self.assertEqual(('daemon', 'ok', 'LXD 5.0.2 reachable'),
                         (findings[0].check, findings[0].status,
                          findings[0].message))
        [missing] = [f for f in findings if f.check == 'daemon-extensions']
        self.assertEqual('error', missing.status)
        self.assertEqual('API extensions missing: instances (first in LXD '
                         '3.18, any Incus), projects (first in LXD 3.6, any '
                         'Incus)', missing.message)
        self.assertEqual('upgrade LXD to 5.0 or later', missing.fix)

    def test_incus_is_named_as_such(self):
        findings = diagnosis.check_daemon(self.view(
            server_info=self.server_info(
                'incus-6.0.4-bookworm-backports.json')))
        self.assertEqual('Incus 6.0.4 reachable', findings[0].message)
        self.assertIn(('daemon-extensions', 'ok'), self.found(findings))

    def test_id_map_of_root(self):
        info = self.server_info()

        def idmap():
            [finding] = [f for f in diagnosis.check_daemon(
                self.view(server_info=info)) if f.check == 'idmap']
            return finding

        self.assertEqual('info', idmap().status)
        self.assertIn('no /etc/subuid', idmap().message)
        self.put('/etc/subuid', 'ubuntu:100000:65536\n')
        self.assertEqual('warning', idmap().status)
        self.assertEqual('add "root:1000000:1000000000" to /etc/subuid and '
                         '/etc/subgid', idmap().fix)
        self.put('/etc/subuid', 'ubuntu:100000:65536\nlxd:1000000:65536\n')
        self.assertEqual('ok', idmap().status)

    def test_storage_pool_is_reported_only_when_checked(self):
        info = self.server_info()
        self.assertNotIn('storage-pool', [f.check for f in
                                          diagnosis.check_daemon(
                                              self.view(server_info=info))])
        findings = diagnosis.check_daemon(self.view(
            server_info=info, pool_checked=True,
            conf=self.conf('[lxd]\nstorage_pool = fast\n')))
        self.assertIn(diagnosis.Finding('storage-pool', 'ok',
                                        'storage pool "fast" exists'),
                      findings)


class TestNvidia(DiagnosisTest):

    def test_gpus_of_other_vendors_only(self):
        self.assertEqual(
            [diagnosis.Finding('gpu', 'info', '2 GPU(s), none from NVIDIA')],
            diagnosis.check_nvidia(self.view(AMD_VFS)))

    def test_driver_version_from_proc_or_sys(self):
        def driver():
            [finding] = [f for f in diagnosis.check_nvidia(self.view(
                H100, snapshot=_h100_snapshot())) if f.check ==
                'nvidia-driver']
            return finding.status, finding.message

        self.assertEqual('error', driver()[0])
        self.put('/sys/module/nvidia/refcnt', '3\n')
        self.assertEqual(('ok', 'nvidia module loaded'), driver())
        self.put('/sys/module/nvidia/version', '535.216.01\n')
        self.assertEqual(('ok', 'nvidia module 535.216.01'), driver())
        self.put('/proc/driver/nvidia/version',
                 'NVRM version: NVIDIA UNIX x86_64 Kernel Module  590.48.01  '
                 'Mon Dec  1 19:33:53 UTC 2025\nGCC version:  gcc 11.4.0\n')
        self.assertEqual(('ok', 'NVRM version: NVIDIA UNIX x86_64 Kernel '
                          'Module 590.48.01'), driver())

    def test_container_user_space_from_cdi_spec_or_toolkit(self):
        def cdi():
            [finding] = [f for f in diagnosis.check_nvidia(self.view(
                H100, snapshot=_h100_snapshot())) if f.check == 'nvidia-cdi']
            return finding

        self.put('/etc/cdi/other.yaml', 'kind: example.com/fpga\n')
        self.assertEqual('warning', cdi().status)
        self.assertIn('nvidia-ctk cdi generate', cdi().fix)
        self.put('/usr/local/bin/nvidia-container-cli', '')
        self.assertEqual('ok', cdi().status)
        self.assertIn('nvidia-container-cli', cdi().message)
        self.put('/var/run/cdi/nvidia.yaml', 'kind: nvidia.com/gpu\n')
        self.assertEqual(('ok', 'CDI spec: /var/run/cdi/nvidia.yaml'),
                         (cdi().status, cdi().message))

    def test_no_probe_yet_is_an_error(self):
        [finding] = [f for f in diagnosis.check_nvidia(self.view(H100))
                     if f.check == 'nvidia-smi']
        self.assertEqual('error', finding.status)
        self.assertIn('nvidia-smi did not answer (not run)', finding.message)

    def test_mig_devices_hidden_by_report_mig_false(self):
        listing = gpu_hosts.load_text('nvsmi-h100-80gb-mig-4slices-L.txt')
        for text, warned in (('[DEFAULT]\n', False),
                             ('[lxd_accelerators]\nreport_mig = false\n',
                              True)):
            findings = diagnosis.check_nvidia(self.view(
                H100, conf=self.conf(text), snapshot=_h100_snapshot(),
                mig_text=listing))
            self.assertIn(('mig', 'ok'), self.found(findings))
            self.assertEqual(warned, ('nova-conf', 'warning') in
                             self.found(findings), text)
        [finding] = [f for f in findings if f.check == 'nova-conf']
        self.assertIn('4 MIG devices exist but [lxd_accelerators] '
                      'report_mig = false', finding.message)


class TestIommuAndInfiniband(DiagnosisTest):

    def test_vfs_without_iommu(self):
        # three VFs listed, one without a PCI address (never counted)
        self.assertEqual(
            [('iommu', 'warning')],
            self.found(diagnosis.check_iommu_and_vfs(self.view(AMD_VFS))))
        [finding] = diagnosis.check_iommu_and_vfs(self.view(AMD_VFS))
        self.assertEqual('2 SR-IOV VF(s) but no IOMMU group', finding.message)
        for group in ('0', '1'):
            os.makedirs(os.path.join(self.root, 'sys', 'kernel',
                                     'iommu_groups', group))
        [finding] = diagnosis.check_iommu_and_vfs(self.view(AMD_VFS))
        self.assertEqual(('ok', 'IOMMU on (2 groups); 2 SR-IOV VF(s)'),
                         (finding.status, finding.message))

    def test_no_iommu_and_no_vf_is_fine(self):
        self.assertEqual(
            [diagnosis.Finding('iommu', 'info',
                               'IOMMU off; no SR-IOV VF in use')],
            diagnosis.check_iommu_and_vfs(self.view(TWO_A100)))

    def test_infiniband_modules(self):
        def found():
            return self.found(diagnosis.check_infiniband(self.view(IB_VFS)))

        self.assertEqual([('infiniband', 'error'), ('infiniband', 'warning')],
                         found())
        self.put('/sys/module/ib_core/refcnt', '1\n')
        self.assertEqual([('infiniband', 'warning')], found())
        self.put('/sys/module/ib_uverbs/refcnt', '1\n')
        [finding] = diagnosis.check_infiniband(self.view(IB_VFS))
        self.assertEqual(('ok', '3 card(s), 3 port(s) with a network device'),
                         (finding.status, finding.message))

    def test_infiniband_without_network_devices(self):
        self.put('/sys/module/ib_core/refcnt', '1\n')
        self.put('/sys/module/ib_uverbs/refcnt', '1\n')
        resources = {'network': {'cards': [{
            'pci_address': '0000:0c:00.0', 'vendor_id': '15b3',
            'ports': [{'port': 0, 'protocol': 'infiniband'}]}]}}
        [finding] = diagnosis.check_infiniband(self.view(resources))
        self.assertEqual('warning', finding.status)
        self.assertEqual('load the IPoIB driver (modprobe ib_ipoib)',
                         finding.fix)


class TestNovaConf(DiagnosisTest):

    def test_excluded_address_the_host_does_not_have(self):
        conf = self.conf('[lxd_accelerators]\nexcluded_pci_addresses = '
                         '85:00.0,0000:3b:00.0\n')
        [finding] = diagnosis.check_nova_conf(self.view(TWO_A100, conf=conf))
        self.assertEqual('warning', finding.status)
        self.assertIn('excluded_pci_addresses lists 0000:3b:00.0, which this '
                      'host does not have', finding.message)

    def test_gpu_vendor_left_out(self):
        conf = self.conf('[lxd_accelerators]\ngpu_vendor_ids = 1002\n')
        [finding] = diagnosis.check_nova_conf(self.view(TWO_A100, conf=conf))
        self.assertEqual('warning', finding.status)
        self.assertIn('GPUs of vendor(s) 10de are present but not in '
                      '[lxd_accelerators] gpu_vendor_ids', finding.message)
        self.assertEqual(
            [('nova-conf', 'ok')],
            self.found(diagnosis.check_nova_conf(self.view(TWO_A100))))


class TestGpuStates(DiagnosisTest):

    def test_clean_gpus_and_no_gpu(self):
        self.assertEqual([], diagnosis.check_gpu_states(self.view({})))
        self.assertEqual(
            [diagnosis.Finding('gpu-states', 'ok', 'no GPU held, dirty, '
                               'unhealthy or idle')],
            diagnosis.check_gpu_states(self.view(TWO_A100, state={})))

    def test_operator_hold_names_the_instances_still_on_it(self):
        state = {'holds': {'0000:07:00.0': {
            'kind': 'operator', 'reason': 'firmware update',
            'since': 1784000000.0}},
            'bound': {'pci:0000:07:00.0': {
                'pci': '0000:07:00.0', 'instance': 'inst-1',
                'running': False}}}
        [finding] = diagnosis.check_gpu_states(self.view(
            TWO_A100, state=state, now=1784100000.0))
        self.assertEqual(
            diagnosis.Finding(
                'gpu-held', 'info', 'GPU 0000:07:00.0 is held: firmware '
                'update; instances still on it: inst-1',
                '"nova-lxd-accel gpu release 0000:07:00.0 --reason ..." '
                'when done'), finding)


class TestSharedGpus(DiagnosisTest):

    def test_slots_in_use_per_project(self):
        for sub in ('nvidia-mps-0000:07:00.0', 'nvidia-mps-0000:07:00.0-shm'):
            os.makedirs(os.path.join(self.root, 'run', sub))
        conf = self.conf('[lxd_accelerators]\nshared_gpus = '
                         '0000:07:00.0:4\n')
        bound = {
            'share:0000:07:00.0/%d' % i: {
                'pci': '0000:07:00.0', 'resource_class': 'CUSTOM_GPU_SHARE',
                'project': project, 'instance': 'inst-%d' % i}
            for i, project in enumerate(('p2', 'p1', 'p2'))}
        # the whole card, bound before it was shared: not a slot
        bound['pci:0000:07:00.0'] = {'pci': '0000:07:00.0',
                                     'resource_class': 'PGPU',
                                     'project': 'p3'}
        self.assertEqual(
            [diagnosis.Finding('gpu-shared', 'info', 'GPU 0000:07:00.0 '
                               'shared in 4 slots: 1 by project p1, 2 by '
                               'project p2')],
            diagnosis.check_shared_gpus(self.view(
                TWO_A100, conf=conf, state={'bound': bound})))

    def test_malformed_entry_is_an_error(self):
        conf = self.conf('[lxd_accelerators]\nshared_gpus = '
                         '0000:07:00.0:four\n')
        [finding] = diagnosis.check_shared_gpus(self.view(TWO_A100,
                                                          conf=conf))
        self.assertEqual('error', finding.status)
        self.assertIn("'0000:07:00.0:four' is not <PCI address or "
                      "model>:<slots>", finding.message)
        self.assertEqual('write each entry as <PCI address or model>:<slots>',
                         finding.fix)

    def test_entry_matching_no_gpu(self):
        conf = self.conf('[lxd_accelerators]\nshared_gpus = '
                         '0000:3b:00.0:4\n')
        [finding] = diagnosis.check_shared_gpus(self.view(TWO_A100,
                                                          conf=conf))
        self.assertEqual('warning', finding.status)
        self.assertIn('shared_gpus matches no GPU of this host',
                      finding.message)
        self.assertEqual([], diagnosis.check_shared_gpus(self.view(
            TWO_A100)))
