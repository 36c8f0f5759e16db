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

import copy

from nova.compute import provider_tree
import os_resource_classes as orc
from oslo_config import cfg
import testtools

from nova_lxd_accel.accel.binding import cdi
from nova_lxd_accel import client as lxd_client
from nova_lxd_accel import conf as lxd_conf
from nova_lxd_accel import daemon as lxd_daemon
from nova_lxd_accel import exception
from nova_lxd_accel import host
from tests.fixtures import recorded_daemon as recorded


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
                       'linux.kernel_modules': 'nbd',
                       'limits.cpu': '2', 'limits.kernel.nofile': '4096',
                       'user.vendor-data': '#cloud-config',
                       'security.idmap.isolated': 'true',
                       'linux.sysctl.net.core.somaxconn': '1024'},
            'devices': {'g': {'type': 'gpu'},
                        'mig': {'type': 'gpu', 'mig.uuid': 'MIG-1'},
                        'p': {'type': 'gpu', 'pci': '0000:01:00.0'},
                        'ib': {'type': 'infiniband', 'parent': 'ib0'},
                        'sock': {'type': 'proxy',
                                 'connect': 'unix:/var/lib/lxd/unix.socket',
                                 'listen': 'unix:/lxd.sock'},
                        'host': {'type': 'disk', 'source': '/',
                                 'path': '/host'},
                        'mem': {'type': 'unix-char', 'path': '/dev/mem'},
                        'phys': {'type': 'nic', 'nictype': 'physical',
                                 'parent': 'eth1'},
                        'eth0': {'type': 'nic', 'network': 'lxdbr0'},
                        'br': {'type': 'nic', 'nictype': 'bridged',
                               'parent': 'br0'},
                        'root': {'type': 'disk', 'path': '/',
                                 'pool': 'default'},
                        'data': {'type': 'disk', 'pool': 'default',
                                 'source': 'shared-data', 'path': '/data'},
                        'masked': {'type': 'none'}}})
        # an allow-list: a pinned GPU, a proxy to the LXD socket, the host's
        # root, /dev/mem and kernel modules are all refused
        self.assertEqual(['config linux.kernel_modules=nbd',
                          'config raw.idmap=both 0 0',
                          'config security.privileged=1',
                          'config security.syscalls.intercept.mount=true',
                          'device g (type gpu)',
                          'device host (type disk)',
                          'device ib (type infiniband)',
                          'device mem (type unix-char)',
                          'device mig (type gpu)',
                          'device p (type gpu)',
                          'device phys (type nic)',
                          'device sock (type proxy)'],
                         [what for what, why in found])

    def test_masks(self):
        config, devices = host.profile_masks([
            {'config': {'raw.lxc': 'x', 'raw.seccomp': 'y',
                        'linux.kernel_modules': 'nbd',
                        'security.privileged': 'true', 'limits.cpu': '1'},
             'devices': {'g': {'type': 'gpu', 'productid': '20b0'}}},
            {'config': {}, 'devices': {
                'ok': {'type': 'disk', 'pool': 'default', 'path': '/'},
                'host': {'type': 'disk', 'source': '/srv',
                         'path': '/srv'}}}])
        # raw.seccomp and kernel modules have no neutral value: refused
        self.assertEqual({'raw.lxc': '# stripped by nova-lxd-accel',
                          'security.privileged': 'false'}, config)
        self.assertEqual(['g', 'host'], sorted(devices))


ROOT_UUID = '11111111-2222-3333-4444-555555555555'


def _conf(**accel):
    conf = cfg.ConfigOpts()
    lxd_conf.register_opts(conf)
    conf([])
    for group, name in (('lxd', 'endpoint'),
                        ('lxd_accelerators', 'nvidia_binding'),
                        ('lxd', 'client_cert')):
        conf.clear_override(name, group=group)
    for name, value in accel.items():
        conf.set_override(name, value, group='lxd_accelerators')
    return conf


def _info(name):
    return lxd_daemon.DaemonInfo.from_server_info(
        recorded.sample(name)['metadata'], endpoint='/x/unix.socket')


class CheckDaemonTest(testtools.TestCase):

    def _check(self, sample, conf=None, answer=None):
        daemon = self.useFixture(recorded.RecordedDaemon(sample,
                                                         answer=answer))
        conf = conf or _conf()
        conf.set_override('endpoint', daemon.socket_path, group='lxd')
        self.addCleanup(conf.clear_override, 'endpoint', group='lxd')
        client = lxd_client.LXDClient(conf)
        return self.assertRaises(exception.DaemonNotUsable,
                                 host.check_lxd, client, conf)

    def test_messages_name_the_lxd_commands(self):
        answer = recorded.sample(recorded.LXD_502)
        answer['metadata']['auth'] = 'untrusted'
        message = str(self._check(recorded.LXD_502, answer=answer))
        self.assertIn('LXD at ', message)
        self.assertIn('not trusted by LXD (add its certificate with '
                      '`lxc config trust add <client certificate>`)',
                      message)
        self.assertIn('`lxc storage create default dir`', message)
        self.assertNotIn('incus', message)

    def test_messages_name_the_incus_commands(self):
        answer = recorded.sample(recorded.INCUS_604)
        answer['metadata']['auth'] = 'untrusted'
        conf = _conf()
        conf.set_override('client_cert', '/etc/nova/lxd.crt', group='lxd')
        message = str(self._check(recorded.INCUS_604, conf, answer))
        self.assertIn('Incus at ', message)
        self.assertIn('not trusted by Incus (add its certificate with '
                      '`incus config trust add-certificate '
                      '/etc/nova/lxd.crt`)', message)
        self.assertIn('`incus storage create default dir`', message)
        self.assertNotIn('lxc ', message)

    def test_missing_extension_named_with_first_releases(self):
        answer = recorded.sample(recorded.LXD_502)
        answer['metadata']['api_extensions'].remove('instances')
        message = str(self._check(recorded.LXD_502, answer=answer))
        self.assertIn('API extension instances is missing (LXD 5.0.2 is too '
                      'old; first in LXD 3.18, any Incus)', message)

    def test_cdi_refused_without_gpu_cdi(self):
        for sample, name in ((recorded.INCUS_604, 'Incus 6.0.4'),
                             (recorded.LXD_502, 'LXD 5.0.2')):
            message = str(self._check(sample, _conf(nvidia_binding='cdi')))
            self.assertIn('nvidia_binding = cdi, but %s lacks the gpu_cdi '
                          'API extension' % name, message)

    def test_cdi_accepted_with_gpu_cdi(self):
        # Only the (recorded, absent) pool is left to complain about.
        message = str(self._check(recorded.LXD_62,
                                  _conf(nvidia_binding='cdi')))
        self.assertNotIn('gpu_cdi', message)
        self.assertIn('storage pool "default" does not exist', message)


class NvidiaModeTest(testtools.TestCase):

    def test_resolve(self):
        lxd5, incus, lxd6 = (_info(recorded.LXD_502),
                             _info(recorded.INCUS_604),
                             _info(recorded.LXD_62))
        self.assertEqual(cdi.RUNTIME, cdi.resolve('auto', lxd5))
        self.assertEqual(cdi.RUNTIME, cdi.resolve('auto', incus))
        self.assertEqual(cdi.NvidiaBinding(cdi=True),
                         cdi.resolve('auto', lxd6))
        self.assertEqual(cdi.RUNTIME, cdi.resolve('runtime', lxd6))
        mig_cdi = lxd_daemon.DaemonInfo(
            'lxd', '6.10', lxd6.extensions | {'gpu_mig_cdi'})
        self.assertEqual(cdi.NvidiaBinding(cdi=True, mig_cdi=True),
                         cdi.resolve('cdi', mig_cdi))


class TraitsTest(testtools.TestCase):

    def _tree(self, traits=()):
        tree = provider_tree.ProviderTree()
        tree.new_root('node1', ROOT_UUID)
        if traits:
            tree.add_traits('node1', *traits)
        return tree

    def test_traits_per_daemon(self):
        self.assertEqual({'CUSTOM_LXD_DAEMON_LXD'},
                         host.daemon_traits(_info(recorded.LXD_502)))
        self.assertEqual({'CUSTOM_LXD_DAEMON_INCUS'},
                         host.daemon_traits(_info(recorded.INCUS_604)))
        self.assertEqual({'CUSTOM_LXD_DAEMON_LXD', 'CUSTOM_LXD_CDI'},
                         host.daemon_traits(_info(recorded.LXD_62)))

    def test_storage_pool_driver_trait(self):
        info = _info(recorded.LXD_502)
        self.assertEqual({'CUSTOM_LXD_DAEMON_LXD', 'CUSTOM_LXD_STORAGE_BTRFS'},
                         host.daemon_traits(info, pool_driver='btrfs'))
        # the pool moved to another driver: the old trait goes
        tree = self._tree(['CUSTOM_LXD_DAEMON_LXD', 'CUSTOM_LXD_STORAGE_DIR',
                           'CUSTOM_OPERATOR_RACK_7'])
        host.apply_daemon_traits(tree, 'node1', info, pool_driver='zfs')
        self.assertEqual({'CUSTOM_LXD_DAEMON_LXD', 'CUSTOM_LXD_STORAGE_ZFS',
                          'CUSTOM_OPERATOR_RACK_7'},
                         tree.data('node1').traits)

    def test_host_moved_from_lxd_to_incus(self):
        tree = self._tree(['CUSTOM_LXD_DAEMON_LXD', 'CUSTOM_LXD_CDI',
                           'COMPUTE_NET_ATTACH_INTERFACE',
                           'CUSTOM_OPERATOR_RACK_7'])
        host.apply_daemon_traits(tree, 'node1',
                                 _info(recorded.INCUS_604))
        self.assertEqual({'CUSTOM_LXD_DAEMON_INCUS',
                          'COMPUTE_NET_ATTACH_INTERFACE',
                          'CUSTOM_OPERATOR_RACK_7'},
                         tree.data('node1').traits)

    def test_apply_is_idempotent(self):
        tree = self._tree()
        info = _info(recorded.LXD_62)
        host.apply_daemon_traits(tree, 'node1', info)
        generation = tree.data('node1').generation
        before = set(tree.data('node1').traits)
        host.apply_daemon_traits(tree, 'node1', info)
        self.assertEqual(before, tree.data('node1').traits)
        self.assertEqual(generation, tree.data('node1').generation)


class HypervisorTest(testtools.TestCase):

    def test_hypervisor_type_tells_incus_from_lxd(self):
        lxd = recorded.sample(recorded.LXD_502)['metadata']
        incus = recorded.sample(recorded.INCUS_604)['metadata']
        self.assertEqual('lxc', host.hypervisor_type(lxd))
        self.assertEqual('incus', host.hypervisor_type(incus))
        self.assertEqual(6000004, host.hypervisor_version(incus))

    def test_available_resource(self):
        conf = _conf()
        incus = recorded.sample(recorded.INCUS_604)['metadata']

        class Pools(object):
            endpoint = '/x'

            def storage_pool_resources(self, pool):
                return {'space': {'total': 10 << 30, 'used': 1 << 30}}

        resource = host.available_resource(
            Pools(), conf, 'node1', incus,
            {'cpu': {'total': 2, 'architecture': 'x86_64'},
             'memory': {'total': 4 << 30, 'used': 1 << 30}})
        self.assertEqual('incus', resource['hypervisor_type'])
        # images with hypervisor_type=lxc boot on both daemons
        self.assertEqual([('x86_64', 'lxc', 'exe')],
                         resource['supported_instances'])


class StartupLineTest(testtools.TestCase):

    def test_one_line_with_features(self):
        line = host.startup_line(_info(recorded.INCUS_604), _conf())
        self.assertEqual(
            'Using Incus 6.0.4 (450 API extensions) at /x/unix.socket, '
            'project default; features: MIG binding=runtime, CDI=no, '
            'InfiniBand=yes, migration=no, '
            'events=stream (poll every 2.0s without one)', line)
        conf = _conf()
        conf.set_override('lifecycle_events', False, group='lxd')
        line = host.startup_line(_info(recorded.INCUS_604), conf)
        self.assertIn('events=poll every 2.0s', line)
        line = host.startup_line(_info(recorded.LXD_62), _conf())
        self.assertIn('LXD 6.2 (401 API extensions)', line)
        self.assertIn('MIG binding=cdi, CDI=yes', line)
        line = host.startup_line(_info(recorded.LXD_62),
                                 _conf(nvidia_binding='runtime',
                                       report_mig=False))
        self.assertIn('MIG binding=off, CDI=available', line)

    def test_mig_unsupported(self):
        info = copy.deepcopy(recorded.sample(recorded.LXD_502)['metadata'])
        info['api_extensions'].remove('gpu_mig')
        line = host.startup_line(
            lxd_daemon.DaemonInfo.from_server_info(info), _conf())
        self.assertIn('MIG binding=unsupported', line)
