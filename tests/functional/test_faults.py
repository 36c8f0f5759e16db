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

"""Faults through the real Nova API (issue 11), against the real LXD.

What the user sees (server status, fault, instance actions, console,
diagnostics) and what is left behind (containers, Placement usage) when
LXD refuses a container, the daemon is down, nova-compute dies in the
middle of a build, or a guest writes nothing to its console.
"""

import time

from nova.compute import task_states
from nova.compute import vm_states
import nova.conf
from nova import context as nova_context
from nova import objects

from nova_lxd_accel import conf
from tests.fixtures import accel_servers
from tests.fixtures import fault_kit
from tests.fixtures import lxd_fixtures
from tests.fixtures import peer
from tests.functional import base
from tools.sandbox.venv import lxd_proxy

ZERO = {'VCPU': 0, 'MEMORY_MB': 0, 'DISK_GB': 0}


class _FaultTestCase(base.LXDFunctionalTestCase):

    def flavor(self, **extra_spec):
        return self._create_flavor(memory_mb=128, vcpu=1, disk=0,
                                   ephemeral=0, extra_spec=extra_spec or None)

    def boot(self, image_id=None, flavor_id=None):
        return self.api.post_server({'server': self._build_server(
            image_uuid=image_id or self.image_id,
            flavor_id=flavor_id or self.flavor(), networks='none')})

    def assertNothingLeft(self, server):
        self.assertEqual([], self.container_names())
        self.assertEqual([], fault_kit.containers_anywhere(self.lxd,
                                                           server['id']))
        self.assertEqual({}, self._get_allocations_by_server_uuid(
            server['id']))
        for host in self.compute_hosts:
            self.assertEqual(ZERO, self._get_provider_usages(
                self._get_provider_uuid_by_host(host)))

    def compute_attempts(self, server):
        """Hosts that tried to build the server, from its actions."""
        actions = self.api.get_instance_actions(server['id'])
        create = [a for a in actions if a['action'] == 'create'][0]
        events = self.api.get_instance_action_details(
            server['id'], create['request_id'])['events']
        return [e['host'] for e in events
                if e['event'] == 'compute__do_build_and_run_instance']


class BuildAbortTest(_FaultTestCase):
    """Refusals every host would repeat abort the build at once."""

    compute_hosts = ('compute1', 'compute2')

    def setUp(self):
        # Two nova-compute services in one process need a node of their
        # own each (nova keeps a node's uuid in a file of state_path).
        peer.per_host_node_uuids(self)
        super(BuildAbortTest, self).setUp()

    def test_image_lxd_cannot_start(self):
        image_id = self._create_tiny_image(
            data=fault_kit.image_without_init(self.lxd.name))
        server = self._wait_for_state_change(self.boot(image_id), 'ERROR')
        fault = server['fault']['message']
        self.assertIn('aborted', fault)
        self.assertIn('refused to start', fault)
        self.assertIn('forkstart', fault)
        self.assertNotIn('Exceeded maximum number of retries', fault)
        self.assertEqual(1, len(self.compute_attempts(server)))
        self.assertEqual([], self.container_names())
        self._delete_server(server)
        self.assertNothingLeft(server)

    def test_device_lxd_rejects(self):
        fault_kit.bad_gpu_profile(self, self.lxd)
        server = self._wait_for_state_change(self.boot(), 'ERROR')
        fault = server['fault']['message']
        self.assertIn('Invalid PCI address', fault)
        self.assertIn('0000:ff:1f.7', fault)
        self.assertNotIn('Exceeded maximum number of retries', fault)
        self.assertEqual(1, len(self.compute_attempts(server)))
        self._delete_server(server)
        self.assertNothingLeft(server)

    def test_flavor_the_operator_forbids(self):
        # Microversion 2.1 skips nova's extra spec validation, as the
        # CLI's default 2.61 does: the compute host must refuse it.
        flavor_id = self.flavor(**{'lxd:privileged': 'true'})
        server = self._wait_for_state_change(
            self.boot(flavor_id=flavor_id), 'ERROR')
        fault = server['fault']['message']
        self.assertIn('allow_privileged_containers', fault)
        self.assertNotIn('Exceeded maximum number of retries', fault)
        self.assertEqual(1, len(self.compute_attempts(server)))
        self._delete_server(server)
        self.assertNothingLeft(server)


class _ProxiedTestCase(_FaultTestCase):
    """nova-compute reaches LXD through the sandbox's pass-through proxy.

    (tools.sandbox.venv.lxd_proxy.)

    Stopping the proxy makes the socket refuse connections exactly as a
    stopped daemon does, without stopping the daemon others share;
    :meth:`lxd_up` starts it again on the same socket.
    """

    def setUp(self):
        conf.register_opts(nova.conf.CONF)
        self.proxy = self.useFixture(lxd_proxy.LXDProxy(strip_devices=False))
        self.flags(endpoint=self.proxy.socket_path, group='lxd')
        super(_ProxiedTestCase, self).setUp()

    def lxd_down(self):
        self.proxy.stop()

    def lxd_up(self):
        self.proxy.start()


class StartWhileLXDDownTest(_ProxiedTestCase):

    def test_start_fails_visibly(self):
        server = self._create_server(image_uuid=self.image_id,
                                     flavor_id=self.flavor(),
                                     networks='none')
        server = self._stop_server(server)
        self.lxd_down()
        self.api.post_server_action(server['id'], {'os-start': None})
        # 2.84: the event carries the error's message ("details").
        latest, self.api.microversion = self.api.microversion, '2.84'
        event = self._wait_for_action_fail_completion(
            server, 'start', 'compute_start_instance')
        self.api.microversion = latest
        self.assertIn('Cannot reach the %s daemon at %s'
                      % (lxd_fixtures.daemon_name(), self.proxy.socket_path),
                      event['details'])
        server = self._wait_for_state_change(server, 'SHUTOFF')
        self.assertIsNone(server['OS-EXT-STS:task_state'])
        # The fault is recorded (the API shows it for ERROR servers only).
        fault = self._instance_fault(server)
        self.assertIn('Cannot reach the %s daemon at %s'
                      % (lxd_fixtures.daemon_name(), self.proxy.socket_path),
                      fault.message)

        self.lxd_up()
        server = self._start_server(server)
        self.assertEqual('Running', self.container_of(server)['status'])
        self._delete_server(server)
        self.assertNothingLeft(server)

    def _instance_fault(self, server):
        context = nova_context.get_admin_context()
        mapping = objects.InstanceMapping.get_by_instance_uuid(
            context, server['id'])
        with nova_context.target_cell(context, mapping.cell_mapping) as cctx:
            return objects.InstanceFault.get_latest_for_instance(
                cctx, server['id'])


class _TwoHostsTestCase(_FaultTestCase):
    """compute1 on the test's daemon, compute2 on the peer daemon.

    Subclasses start both computes, each with the endpoint it needs.
    """

    compute_hosts = ()

    def setUp(self):
        peer.require_peer(self)
        peer.per_host_node_uuids(self)
        conf.register_opts(nova.conf.CONF)
        super(_TwoHostsTestCase, self).setUp()
        self.peer = self.useFixture(peer.PeerProject(self.lxd.name))


class HostLocalFailureReschedulesTest(_TwoHostsTestCase):
    """A failure of this host's LXD reschedules the build.

    compute1's LXD is down (its proxy stopped), compute2's (the peer
    daemon) is fine: the build moves to compute2 and succeeds there.
    """

    def setUp(self):
        super(HostLocalFailureReschedulesTest, self).setUp()
        # Each client connects at its first request and keeps the session.
        self.flags(endpoint=peer.PEER_SOCKET, group='lxd')
        self._start_compute('compute2')
        self.proxy = self.useFixture(lxd_proxy.LXDProxy(strip_devices=False))
        self.flags(endpoint=self.proxy.socket_path, group='lxd')
        self._start_compute('compute1')

    def test_daemon_down_reschedules(self):
        flavor_id = self.flavor()
        # Fill compute2 a little, so that the scheduler prefers compute1.
        first = self._create_server(
            image_uuid=self.image_id, flavor_id=flavor_id, networks='none',
            az='nova:compute2')
        self.proxy.stop()
        server = self._wait_for_state_change(
            self.boot(flavor_id=flavor_id), 'ACTIVE')
        self.assertEqual('compute2', server['OS-EXT-SRV-ATTR:host'])
        self.assertEqual(['compute1', 'compute2'],
                         sorted(self.compute_attempts(server)))
        self.assertEqual([], fault_kit.containers_anywhere(self.lxd,
                                                           server['id']))
        self.assertEqual('Running', self.peer.instance(
            'nova-%s' % server['id'])['status'])
        for each in (server, first):
            self._delete_server(each)
            self.assertEqual({}, self._get_allocations_by_server_uuid(
                each['id']))
        self.assertEqual([], sorted(r['name']
                                    for r in self.peer.instances()))
        self.assertEqual(ZERO, self._get_provider_usages(
            self._get_provider_uuid_by_host('compute2')))


class EveryHostFailsTest(_TwoHostsTestCase):
    """Both hosts' daemons down: what the user reads (issue 28 item 4).

    Nova keeps the last host's reason when a build runs out of attempts
    (``[scheduler] max_attempts``), and drops it when the build runs out of
    alternate hosts first ("Exhausted all hosts ..."): set max_attempts to
    the number of hosts that can take a flavor and the fault ends with the
    last host's reason (doc/source/admin/scale.rst).
    """

    def setUp(self):
        super(EveryHostFailsTest, self).setUp()
        self.proxies = []
        for host, upstream in (('compute1', None),
                               ('compute2', peer.PEER_SOCKET)):
            proxy = self.useFixture(lxd_proxy.LXDProxy(
                strip_devices=False, upstream=upstream))
            self.flags(endpoint=proxy.socket_path, group='lxd')
            self._start_compute(host)
            self.proxies.append(proxy)

    def _fail_on_every_host(self):
        flavor_id = self.flavor()
        for proxy in self.proxies:
            proxy.stop()
        server = self._wait_for_state_change(self.boot(flavor_id=flavor_id),
                                             'ERROR')
        self.assertEqual(['compute1', 'compute2'],
                         sorted(self.compute_attempts(server)))
        return server

    def _delete(self, server):
        self._delete_server(server)
        self.assertEqual([], fault_kit.containers_anywhere(self.lxd,
                                                           server['id']))
        self.assertEqual([], self.peer.instances())
        self.assertEqual({}, self._get_allocations_by_server_uuid(
            server['id']))

    def test_as_many_attempts_as_hosts_give_the_last_reason(self):
        self.flags(max_attempts=2, group='scheduler')
        server = self._fail_on_every_host()
        fault = server['fault']['message']
        self.assertIn('Exceeded max scheduling attempts 2', fault)
        # nova keeps 255 characters of a fault: the reason's start
        # "the LXD daemon" or "the Incus daemon": whichever the test runs on
        self.assertRegex(fault,
                         r'Last exception: Cannot reach the (LXD|Incus) '
                         r'daemon at ')
        self._delete(server)

    def test_more_attempts_than_hosts_lose_the_reason(self):
        # nova's default, 3: documents nova's conductor, which the driver
        # cannot change (scale.rst says what to set instead).
        server = self._fail_on_every_host()
        fault = server['fault']['message']
        self.assertIn('Exhausted all hosts available for retrying build '
                      'failures', fault)
        self.assertNotIn('Cannot reach the', fault)
        self._delete(server)


class ComputeKilledDuringBuildTest(_FaultTestCase):

    def test_restart_removes_container_and_explains(self):
        server = self._create_server(image_uuid=self.image_id,
                                     flavor_id=self.flavor(),
                                     networks='none')
        compute = self.computes['compute1']
        compute.stop()
        # What nova-compute killed in the middle of this build leaves: the
        # instance still BUILDING/spawning in nova, its container in LXD.
        self._set_build_state(server)
        self.assertEqual(['nova-%s' % server['id']], self.container_names())
        self.computes['compute1'] = self.restart_compute_service(compute)

        server = self._wait_for_state_change(server, 'ERROR')
        fault = server['fault']['message']
        self.assertIn('nova-compute on compute1 stopped (killed or '
                      'restarted)', fault)
        self.assertIn('removed the half-made container nova-%s'
                      % server['id'], fault)
        self.assertEqual([], self.container_names())
        self._delete_server(server)
        self.assertNothingLeft(server)

    def _set_build_state(self, server):
        context = nova_context.get_admin_context()
        mapping = objects.InstanceMapping.get_by_instance_uuid(
            context, server['id'])
        with nova_context.target_cell(context, mapping.cell_mapping) as cctx:
            instance = objects.Instance.get_by_uuid(cctx, server['id'])
            instance.vm_state = vm_states.BUILDING
            instance.task_state = task_states.SPAWNING
            instance.save()


class ConsoleAndDiagnosticsTest(_FaultTestCase):

    def test_console_after_hard_reboot_of_a_silent_guest(self):
        server = self._create_server(image_uuid=self.image_id,
                                     flavor_id=self.flavor(),
                                     networks='none')
        for attempt in range(200):
            output = self.api.post_server_action(
                server['id'], {'os-getConsoleOutput': {}})['output']
            if 'tiny init started' in output:
                break
            time.sleep(0.05)
        self.assertIn('tiny init started', output)
        self.lxd.client.api.instances['nova-%s' % server['id']].files.post(
            params={'path': '/sbin/init'}, data=fault_kit.SILENT_INIT,
            headers={'X-LXD-type': 'file', 'X-LXD-mode': '0755',
                     'X-LXD-uid': '0', 'X-LXD-gid': '0',
                     'X-LXD-write': 'overwrite'})
        server = self._reboot_server(server, hard=True)
        # LXD alone answers 500 here; the API must not.
        output = self.api.post_server_action(
            server['id'], {'os-getConsoleOutput': {}})['output']
        self.assertIn('tiny init started', output)
        self._delete_server(server)
        self.assertNothingLeft(server)

    def test_diagnostics_at_2_48(self):
        server = self._create_server(image_uuid=self.image_id,
                                     flavor_id=self.flavor(),
                                     networks='none')
        latest, self.api.microversion = self.api.microversion, '2.48'
        diags = self.api.get_server_diagnostics(server['id'])
        self.api.microversion = latest
        self.assertEqual('running', diags['state'])
        self.assertEqual('libvirt', diags['driver'])
        self.assertEqual('lxd', diags['hypervisor'])
        self.assertEqual('linux', diags['hypervisor_os'])
        self.assertIsInstance(diags['uptime'], int)
        self.assertFalse(diags['config_drive'])
        self.assertEqual(128, diags['memory_details']['maximum'])
        self.assertEqual(1, diags['num_cpus'])
        self.assertGreater(diags['cpu_details'][0]['time'], 0)
        self.assertEqual(1, diags['num_disks'])
        self.assertEqual(0, diags['num_nics'])
        self._delete_server(server)
        self.assertNothingLeft(server)


class GpuBuildFaultTest(accel_servers.AccelTestBase):
    """A GPU server whose build fails keeps no GPU held."""

    def test_broken_image_with_a_gpu(self):
        image_id = self._create_tiny_image(
            data=fault_kit.image_without_init(self.lxd.name))
        server = self.api.post_server({'server': self._build_server(
            image_uuid=image_id, networks='none',
            flavor_id=self.flavor(**{'resources:PGPU': '1'}))})
        server = self._wait_for_state_change(server, 'ERROR')
        fault = server['fault']['message']
        self.assertIn('aborted', fault)
        self.assertIn('forkstart', fault)
        # no container (so no binding record), no device, no allocation
        self.assert_released(server)
        self.assertEqual([], fault_kit.containers_anywhere(self.lxd,
                                                           server['id']))
        for name in (accel_servers.A100_0, accel_servers.A100_1):
            self.assertEqual(0, self._get_provider_usages(
                self.rp(name)).get('PGPU', 0))
        self._delete_server(server)
        self.assert_released(server)
