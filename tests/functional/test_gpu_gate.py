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

"""Health gate and verified release through nova's cloud and Placement.

The host is the recorded H100 (MIG, ``nvsmi-h100-80gb-mig-4slices-L``) plus the
GT 730 of LXD issue 9201, served by :class:`tools.sandbox.venv.lxd_proxy.
LXDProxy`; ``nvidia-smi`` is a script answering ``-L``, ``--query-gpu`` and
``--query-compute-apps`` from files the test rewrites: the H100 row is the
recorded idle capture's values, the GT 730 row is hand-built in the probe's
field list (see ``samples/README.md``), and process lines are the recorded load
capture's. nova-compute's periodic task runs the real probe and the real
Placement gets the result.
"""

import os
import stat
import time

from nova_lxd_accel.accel.health import gate
from nova_lxd_accel.container import identity
from nova_lxd_accel import exception
from tests.fixtures import gpu_gate_host

CONF = gpu_gate_host.CONF
HOST = gpu_gate_host.HOST
H100 = gpu_gate_host.H100
GT730 = gpu_gate_host.GT730
H100_PCI = gpu_gate_host.H100_PCI
GT730_PCI = gpu_gate_host.GT730_PCI
h100_row = gpu_gate_host.h100_row
gt730_row = gpu_gate_host.gt730_row
app_row = gpu_gate_host.app_row


class TestGpuGate(gpu_gate_host.GpuHostTestCase):

    def test_unhealthy_gpu_is_reserved_until_an_operator_releases_it(self):
        healthy = {'CUSTOM_MIG_3G_40GB': (1, 0), 'CUSTOM_MIG_2G_20GB': (1, 0),
                   'CUSTOM_MIG_1G_10GB': (2, 0)}
        self.assertEqual(healthy, self.provider(H100)[0])
        self.assertNotIn(gate.TRAIT_UNHEALTHY, self.provider(H100)[1])
        # uncorrectable ECC errors on the H100; the GT 730 falls off the
        # bus (nvidia-smi no longer lists it)
        self.set_gpus(h100_row(ecc=3))
        self.periodic()
        inventory, traits = self.provider(H100)
        self.assertEqual({'CUSTOM_MIG_3G_40GB': (1, 1),
                          'CUSTOM_MIG_2G_20GB': (1, 1),
                          'CUSTOM_MIG_1G_10GB': (2, 2)}, inventory)
        self.assertIn(gate.TRAIT_UNHEALTHY, traits)
        self.assertIn('OWNER_NOVA', traits)
        self.assertEqual(({'PGPU': (1, 1)}), self.provider(GT730)[0])
        self.assertIn(gate.TRAIT_UNHEALTHY, self.provider(GT730)[1])
        self.assertIn('uncorrectable ECC', self.stdlog.logger.output)
        # never scheduled
        server = self.boot(self.flavor(**{'resources:CUSTOM_MIG_1G_10GB':
                                          '1'}), expected='ERROR')
        self.assertIn('No valid host', server['fault']['message'])
        # healthy again (GPU reset): still held until an operator says so
        self.set_gpus(h100_row(), gt730_row())
        self.periodic()
        self.assertIn(gate.TRAIT_UNHEALTHY, self.provider(H100)[1])
        self.assertEqual(0, self.cli('gpu', 'release', H100_PCI,
                                     '--reason', 'GPU reset, ECC cleared'))
        self.periodic()
        self.assertEqual(healthy, self.provider(H100)[0])
        self.assertNotIn(gate.TRAIT_UNHEALTHY, self.provider(H100)[1])
        self.assertIn(gate.TRAIT_UNHEALTHY, self.provider(GT730)[1])
        self.boot(self.flavor(**{'resources:CUSTOM_MIG_1G_10GB': '1'}))

    def test_hold_drains_for_maintenance(self):
        self.assertEqual(0, self.cli('gpu', 'hold', GT730_PCI,
                                     '--reason', 'fan replacement'))
        self.periodic()
        inventory, traits = self.provider(GT730)
        self.assertEqual({'PGPU': (1, 1)}, inventory)
        # held, not unhealthy
        self.assertNotIn(gate.TRAIT_UNHEALTHY, traits)
        self.assertEqual(0, self.cli('gpu', 'release', GT730_PCI,
                                     '--reason', 'fan replaced'))
        self.periodic()
        self.assertEqual({'PGPU': (1, 0)}, self.provider(GT730)[0])

    def test_released_gpu_is_reserved_until_verified_clean(self):
        flavor = self.flavor(**{'resources:PGPU': '1'})
        server = self.boot(flavor)
        # the job runs: a process and memory on the GT 730
        self.set_gpus(h100_row(), gt730_row(used=1547, util=97))
        self.set_apps(app_row(GT730_PCI, 11345, './gpu_burn', 1542))
        self.periodic()
        self.assertEqual({'PGPU': (1, 0)}, self.provider(GT730)[0])
        self._delete_server(server)
        # dirty: the process is still there after the container is gone
        self.periodic()
        self.assertEqual({'PGPU': (1, 1)}, self.provider(GT730)[0])
        self.assertIn('./gpu_burn (pid 11345, 1542 MiB)',
                      self.stdlog.logger.output)
        self.boot(flavor, expected='ERROR')
        # the process is gone, memory not yet back to the baseline (1 MiB)
        self.set_apps()
        self.set_gpus(h100_row(), gt730_row(used=900))
        self.periodic()
        self.assertEqual({'PGPU': (1, 1)}, self.provider(GT730)[0])
        self.assertIn('900 MiB of GPU memory in use (baseline 1 MiB)',
                      self.stdlog.logger.output)
        # clean: schedulable again
        self.set_gpus(h100_row(), gt730_row(used=1))
        self.periodic()
        self.assertEqual({'PGPU': (1, 0)}, self.provider(GT730)[0])
        self.boot(flavor)


class TestReleaseAtDelete(gpu_gate_host.GpuHostTestCase):
    """A freed unit is offered again when its delete ends (issue 25).

    No periodic task runs between a delete and the next boot: the driver
    verifies the GPUs of a container right after removing it, so nova's
    resource update at the end of the delete already reports them free.
    """

    IDLE_Q = 'nvsmi-h100-80gb-mig-4slices-idle-q.txt'
    #: MIG device 2 (GI 9, CI 0) keeps a python3 process, pid 48211
    SLICE2_BUSY_Q = 'handmade-nvsmi-h100-mig-slice2-busy-q.txt'

    def units(self, server):
        return identity.recorded_units(self.container_of(server)['config'])

    def provider_uuid(self, name):
        for rp in self._get_all_rps_in_a_tree(self.root_uuid):
            if rp['name'] == name:
                return rp['uuid']
        raise AssertionError('no provider %s' % name)

    def test_freed_whole_gpu_and_mig_slice_are_bound_again_at_once(self):
        pgpu = self.flavor(**{'resources:PGPU': '1'})
        first = self.boot(pgpu)
        self.delete_and_wait_for_allocations(first)
        self.assertEqual({'PGPU': (1, 0)}, self.provider(GT730)[0])
        second = self.boot(pgpu)
        self.assertEqual(['pci:' + GT730_PCI],
                         [u['unit'] for u in self.units(second)])
        # both 1g.10gb slices in use, one freed, booted again at once
        mig = self.flavor(**{'resources:CUSTOM_MIG_1G_10GB': '1'})
        a, b = self.boot(mig), self.boot(mig)
        [freed] = [u['unit'] for u in self.units(a)]
        self.delete_and_wait_for_allocations(a)
        c = self.boot(mig)
        self.assertEqual([freed], [u['unit'] for u in self.units(c)])
        self.assertIn('verified clean', self.stdlog.logger.output)
        self.delete_and_wait_for_allocations(b)
        self.delete_and_wait_for_allocations(c)
        self.delete_and_wait_for_allocations(second)
        self.assertEqual({'CUSTOM_MIG_3G_40GB': (1, 0),
                          'CUSTOM_MIG_2G_20GB': (1, 0),
                          'CUSTOM_MIG_1G_10GB': (2, 0)},
                         self.provider(H100)[0])

    def test_dirty_slice_is_never_bound_and_returns_once_clean(self):
        # release_wait bounds every probe of a delete: on a loaded CI host
        # three nvidia-smi runs may not fit in 0.5 s, and a cut probe
        # records "cannot be probed" instead of the process asserted below
        self.flags(release_wait=2.0, release_recheck_interval=0.5,
                   group='lxd_accelerators')
        mig = self.flavor(**{'resources:CUSTOM_MIG_1G_10GB': '1'})
        a, b = self.boot(mig), self.boot(mig)
        [dirty] = self.units(a)
        [clean] = self.units(b)
        self.assertEqual('MIG-00000002-0000-0000-0000-000000000002',
                         dirty['mig_uuid'])
        # a's process outlives its container on MIG device 2; b's slice
        # is idle
        self.set_q(self.SLICE2_BUSY_Q)
        self.delete_and_wait_for_allocations(a)
        self.delete_and_wait_for_allocations(b)
        self.assertEqual((2, 1), self.provider(H100)[0]['CUSTOM_MIG_1G_10GB'])
        # Placement offers one 1g slice: the claim takes the clean one
        # although the dirty one comes first
        c = self.boot(mig)
        self.assertEqual([clean['unit']], [u['unit'] for u in self.units(c)])
        # with only the dirty one left the claim refuses; the log names it
        # and why (the fault, which a user reads, does not: the process
        # was another instance's)
        driver = self.computes[HOST].driver
        error = self.assertRaises(
            exception.AcceleratorUnavailable, driver._parts.claims.claim,
            'nova-not-created', {self.provider_uuid(H100): {
                'resources': {'CUSTOM_MIG_1G_10GB': 1}}}, None)
        self.assertIn('only 0 free', str(error))
        self.assertNotIn('48211', str(error))
        self.assertIn(dirty['unit'], self.stdlog.logger.output)
        self.assertIn('released but not verified clean (compute processes '
                      'python3 (pid 48211, 4090 MiB)',
                      self.stdlog.logger.output)
        # the process ends: the re-check frees the slice in Placement
        # without nova's periodic task
        self.set_q(self.IDLE_Q)
        for _ in range(self.WAIT_POLLS):
            if self.provider(H100)[0]['CUSTOM_MIG_1G_10GB'] == (2, 0):
                break
            time.sleep(0.5)
        self.assertEqual((2, 0), self.provider(H100)[0]['CUSTOM_MIG_1G_10GB'])
        self.assertIn('(it was held by compute processes python3 (pid 48211',
                      self.stdlog.logger.output)
        self.boot(mig)


class TestUnprobeableGpus(gpu_gate_host.GpuHostTestCase):
    """An NVIDIA GPU that cannot be probed is never offered (issue 25).

    A unit bound there could never be verified clean at release.
    """

    def script(self, name, body):
        path = os.path.join(self.dir, name)
        with open(path, 'w') as f:
            f.write('#!/bin/sh\n%s\n' % body)
        os.chmod(path, stat.S_IRWXU)
        return path

    def offered(self):
        """{provider: (reserved == total for all, unprobeable trait)}."""
        out = {}
        for name in (H100, GT730):
            inventory, traits = self.provider(name)
            out[name] = (all(r == t for t, r in inventory.values()),
                         gate.TRAIT_UNPROBEABLE in traits)
        return out

    def test_missing_failing_or_hanging_probe_holds_every_nvidia_gpu(self):
        held = {H100: (True, True), GT730: (True, True)}
        free = {H100: (False, False), GT730: (False, False)}
        working = CONF.lxd_accelerators.nvidia_smi_path
        pgpu = self.flavor(**{'resources:PGPU': '1'})
        # missing: held at the first probe
        self.flags(nvidia_smi_path=os.path.join(self.dir, 'no-such-smi'),
                   group='lxd_accelerators')
        self.periodic()
        self.assertEqual(held, self.offered())
        self.assertIn('no-such-smi does not exist', self.stdlog.logger.output)
        out = self.capture_cli('gpu', 'list')
        self.assertRegex(out, '%s +unprobeable .* does not exist' % GT730_PCI)
        server = self.boot(pgpu, expected='ERROR')
        self.assertIn('No valid host', server['fault']['message'])
        # answers again: offered again at once
        self.flags(nvidia_smi_path=working, group='lxd_accelerators')
        self.periodic()
        self.assertEqual(free, self.offered())
        # failing: held after probe_failures_before_hold (3) in a row
        self.flags(nvidia_smi_path=self.script(
            'failing-smi', 'echo "NVIDIA-SMI has failed because it '
            'couldn\'t communicate with the NVIDIA driver." >&2; exit 9'),
            group='lxd_accelerators')
        self.periodic()
        self.periodic()
        self.assertEqual(free, self.offered())
        self.periodic()
        self.assertEqual(held, self.offered())
        self.assertIn('the GPU probe failed 3 times in a row',
                      self.stdlog.logger.output)
        self.flags(nvidia_smi_path=working, group='lxd_accelerators')
        self.periodic()
        self.assertEqual(free, self.offered())
        # hanging: the same after as many timeouts
        self.flags(nvidia_smi_path=self.script('hung-smi', 'exec sleep 60'),
                   nvidia_smi_timeout=1, group='lxd_accelerators')
        for _ in range(3):
            self.assertEqual(free, self.offered())
            self.periodic()
        self.assertEqual(held, self.offered())
        self.assertIn('did not answer within 1 seconds',
                      self.stdlog.logger.output)

    def test_verified_release_off_offers_and_frees_at_once(self):
        self.flags(verified_release=False,
                   nvidia_smi_path=os.path.join(self.dir, 'no-such-smi'),
                   group='lxd_accelerators')
        self.periodic()
        self.assertEqual({H100: (False, False), GT730: (False, False)},
                         self.offered())
        pgpu = self.flavor(**{'resources:PGPU': '1'})
        server = self.boot(pgpu)
        self.delete_and_wait_for_allocations(server)
        self.assertEqual({'PGPU': (1, 0)}, self.provider(GT730)[0])
        self.boot(pgpu)
