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

"""Host facts and the compute node's root inventory."""

import os_resource_classes as orc
from oslo_config import cfg
import testtools

from nova_lxd_accel import host


class HostTest(testtools.TestCase):

    def test_hypervisor_version(self):
        self.assertEqual(5000002, host.hypervisor_version(
            {'environment': {'server_version': '5.0.2'}}))
        self.assertEqual(5021000, host.hypervisor_version(
            {'environment': {'server_version': '5.21'}}))
        self.assertEqual(0, host.hypervisor_version({}))

    def _conf(self, cpus=0, memory=512):
        conf = cfg.ConfigOpts()
        conf.register_opts([cfg.IntOpt('reserved_host_cpus', default=cpus),
                            cfg.IntOpt('reserved_host_memory_mb',
                                       default=memory)])
        conf([])
        return conf

    def test_root_inventory(self):
        resource = {'vcpus': 16, 'memory_mb': 64000, 'local_gb': 900}
        ratios = {orc.VCPU: 4.0, orc.MEMORY_MB: 1.0, orc.DISK_GB: 1.0}
        inventory = host.root_inventory(resource, 10, ratios,
                                        self._conf(cpus=2))
        self.assertEqual({
            orc.VCPU: {'total': 16, 'min_unit': 1, 'max_unit': 16,
                       'step_size': 1, 'allocation_ratio': 4.0,
                       'reserved': 2},
            orc.MEMORY_MB: {'total': 64000, 'min_unit': 1,
                            'max_unit': 64000, 'step_size': 1,
                            'allocation_ratio': 1.0, 'reserved': 512},
            orc.DISK_GB: {'total': 900, 'min_unit': 1, 'max_unit': 900,
                          'step_size': 1, 'allocation_ratio': 1.0,
                          'reserved': 10},
        }, inventory)

    def test_unknown_disk_size_left_out(self):
        resource = {'vcpus': 2, 'memory_mb': 2048, 'local_gb': 0}
        ratios = {orc.VCPU: 1.0, orc.MEMORY_MB: 1.0, orc.DISK_GB: 1.0}
        self.assertEqual({orc.VCPU, orc.MEMORY_MB}, set(
            host.root_inventory(resource, 0, ratios, self._conf())))

    def test_uptime(self):
        self.assertRegex(host.uptime(),
                         r'^up \d+ days, \d+:\d\d, load average: ')


class UnsafeProfileTest(testtools.TestCase):

    def test_unsafe_content_found(self):
        found = host.unsafe_profile_content({
            'config': {'raw.idmap': 'both 0 0', 'security.privileged': '1',
                       'security.nesting': 'false',
                       'security.syscalls.intercept.mount': 'true',
                       'limits.cpu': '2'},
            'devices': {'g': {'type': 'gpu'},
                        'mig': {'type': 'gpu', 'mig.uuid': 'MIG-1'},
                        'p': {'type': 'gpu', 'pci': '0000:01:00.0'},
                        'ib': {'type': 'infiniband', 'parent': 'ib0'},
                        'eth0': {'type': 'nic', 'network': 'lxdbr0'}}})
        self.assertEqual(['config raw.idmap=both 0 0',
                          'config security.privileged=1',
                          'config security.syscalls.intercept.mount=true',
                          'device g (type gpu)',
                          'device ib (type infiniband)'],
                         [what for what, why in found])

    def test_masks(self):
        config, devices = host.profile_masks([
            {'config': {'raw.lxc': 'x', 'raw.seccomp': 'y',
                        'security.privileged': 'true', 'limits.cpu': '1'},
             'devices': {'g': {'type': 'gpu', 'productid': '20b0'}}},
            {'config': {}, 'devices': {'ok': {'type': 'disk'}}}])
        self.assertEqual({'raw.lxc': '# stripped by nova-lxd-accel',
                          'security.privileged': 'false'}, config)
        self.assertEqual(['g'], devices)
