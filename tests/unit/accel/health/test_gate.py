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

"""The GPU gate: health holds, verified release, idle (unit level).

The probe is the real :class:`probe.HostProbe` running a script that
prints recorded nvidia-smi outputs; the state file is real.
"""

import dataclasses
import json
import os

import fixtures
import testtools

from nova_lxd_accel.accel.binding import binding_record
from nova_lxd_accel.accel.binding import reconcile
from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel.health import gate
from nova_lxd_accel.accel.health import gate_state
from nova_lxd_accel.accel.health import metrics
from nova_lxd_accel.accel.health import probe
from nova_lxd_accel.accel.inventory import nvidia_smi
from nova_lxd_accel.accel.inventory import provider_tree
from nova_lxd_accel.accel import units
from nova_lxd_accel.container import identity
from nova_lxd_accel import exception
from tests.fixtures import fake_lxd
from tests.fixtures import fake_nvidia_smi
from tests.fixtures import gate_harness
from tests.fixtures import gpu_hosts

H100 = gate_harness.H100
INSTANCE = gate_harness.INSTANCE
h100 = gate_harness.h100
container = gate_harness.container
share_container = gate_harness.share_container


class TestHealthGate(gate_harness.GateTestCase):

    def test_healthy_gpu_is_untouched(self):
        self.gate.refresh()
        self.assertEqual(({'PGPU': 0}, False), self.reserved())

    def test_unhealthy_gpu_held_until_released(self):
        self.host('handmade-nvsmi-h100-q-ecc-retired-remap-pending.txt',
                  'nvsmi-h100-80gb-idle-compute-apps.csv')
        # -q output is not --query-gpu CSV: the probe says "unknown"
        self.gate.refresh()
        self.assertEqual(({'PGPU': 0}, False), self.reserved())
        rows = gpu_hosts.load_text('nvsmi-h100-80gb-idle-query-gpu.csv')
        header, row = rows.splitlines()
        fields = [f.strip() for f in header.split(',')]
        values = [v.strip() for v in row.split(',')]
        values[fields.index('ecc.errors.uncorrected.volatile.total')] = '2'
        bad = os.path.join(self.dir, 'ecc.csv')
        with open(bad, 'w') as f:
            f.write(header + '\n' + ', '.join(values) + '\n')
        fake_nvidia_smi.recorded(self.smi_dir, {
            '--query-gpu': bad, '--query-compute-apps': gpu_hosts.sample_path(
                'nvsmi-h100-80gb-idle-compute-apps.csv')})
        self.gate.refresh()
        self.assertEqual(({'PGPU': 1}, True), self.reserved())
        hold = self.gate.store.load()['holds'][H100]
        self.assertEqual(('unhealthy', '2 uncorrectable ECC errors'),
                         (hold['kind'], hold['reason']))
        self.assertRaises(exception.GpuHeld, self.gate.check_bindable,
                          self.gpus[0], 'rp')
        # healthy again: held until an operator releases it
        self.host('nvsmi-h100-80gb-idle-query-gpu.csv',
                  'nvsmi-h100-80gb-idle-compute-apps.csv')
        self.gate.refresh()
        self.assertEqual(({'PGPU': 1}, True), self.reserved())
        gate_state.release(self.gate.store, H100, 'reset')
        self.gate.refresh()
        self.assertEqual(({'PGPU': 0}, False), self.reserved())
        self.gate.check_bindable(self.gpus[0], 'rp')

    def test_gpu_missing_from_nvidia_smi_fell_off_the_bus(self):
        self.gpus.append(devices.Gpu(pci_address='0000:07:00.0',
                                     vendor_id='10de', driver='nvidia'))
        self.gate.refresh()
        self.assertIn('fallen off the bus',
                      self.gate.store.load()['holds']['0000:07:00.0'][
                          'reason'])

    def test_operator_hold_is_not_unhealthy(self):
        gate_state.hold(self.gate.store, H100, 'maintenance')
        self.assertEqual(({'PGPU': 1}, False), self.reserved())
        self.assertRaises(exception.GpuHeld, self.gate.check_bindable,
                          self.gpus[0], 'rp')

    def test_apply_reads_nothing_until_the_next_period(self):
        gate_state.hold(self.gate.store, H100, 'maintenance')
        self.gate.maybe_refresh()
        self.assertEqual(({'PGPU': 1}, False), self.reserved())
        gate_state.release(self.gate.store, H100, 'done')
        os.unlink(self.gate.store.path)
        # under nova's lock: the view of the last period
        self.assertEqual(({'PGPU': 1}, False), self.reserved())
        self.gate.maybe_refresh()
        self.assertEqual(({'PGPU': 0}, False), self.reserved())

    def test_the_probed_gpus_are_the_last_probes_read_from_memory(self):
        # what the driver passes the inventory under nova's lock (each
        # GPU's memory and name): nothing before the first probe
        self.assertEqual({}, self.gate.probed_gpus())
        self.gate.refresh()
        probed = self.gate.probed_gpus()
        self.assertEqual([H100], list(probed))
        self.assertEqual(81559, probed[H100].memory_total_mib)
        self.assertIs(self.gate.last_snapshot.gpus, probed)
        # no probe of its own
        os.unlink(os.path.join(self.smi_dir, 'nvidia-smi'))
        self.assertIs(probed, self.gate.probed_gpus())

    def test_cpu_only_host_writes_nothing(self):
        self.gpus = []
        fake_nvidia_smi.recorded(self.smi_dir, {})
        self.gate.refresh()
        self.assertFalse(os.path.exists(self.gate.store.path))


class TestVerifiedRelease(gate_harness.GateTestCase):

    def test_dirty_reserved_clean_schedulable(self):
        self.gate.refresh()         # baseline: 0 MiB used while free
        self.containers = [container()]
        self.host('nvsmi-h100-80gb-load-query-gpu.csv',
                  'nvsmi-h100-80gb-load-compute-apps.csv')
        self.now += 60
        self.gate.refresh()
        self.assertEqual(({'PGPU': 0}, False), self.reserved())
        # deleted; the processes are still there
        self.containers = []
        self.now += 60
        self.gate.refresh()
        self.assertEqual(({'PGPU': 1}, False), self.reserved())
        dirty = self.gate.store.load()['dirty']['pci:' + H100]
        self.assertIn('./gpu_burn (pid 11345, 15690 MiB)', dirty['holding'])
        # clean
        self.host('nvsmi-h100-80gb-idle-query-gpu.csv',
                  'nvsmi-h100-80gb-idle-compute-apps.csv')
        self.now += 60
        self.gate.refresh()
        self.assertEqual(({'PGPU': 0}, False), self.reserved())
        self.assertEqual('clean',
                         self.gate.store.load()['events'][-1]['event'])

    def test_note_destroy_marks_dirty_between_probes(self):
        record = container()
        self.gate.note_destroy(lambda: record)
        self.assertEqual(({'PGPU': 1}, False), self.reserved())

    def test_unprobeable_gpu_stays_dirty(self):
        self.gate.note_destroy(container)
        fake_nvidia_smi.recorded(self.smi_dir, {}, status=3)
        self.gate.refresh()
        self.assertEqual(({'PGPU': 1}, False), self.reserved())


class TestXidGate(gate_harness.GateTestCase):
    """Fatal Xid messages of the kernel log hold a GPU as unhealthy."""

    def setUp(self):
        super().setUp()
        self.log = os.path.join(self.dir, 'dmesg.txt')
        self.uptime = 6000.0
        self.boot = 'boot-1'
        self.write_log('handmade-dmesg-nvrm-xid.txt')
        self.gate = gate.GpuGate(
            self.conf, lambda: self.containers, lambda: self.gpus,
            host_probe=probe.HostProbe(
                os.path.join(self.smi_dir, 'nvidia-smi'),
                clock=lambda: self.now, kernel_log=self.log,
                uptime=lambda: self.uptime, boot_id=lambda: self.boot),
            clock=lambda: self.now)

    def write_log(self, sample, extra=''):
        with open(self.log, 'w') as f:
            f.write(gpu_hosts.load_text(sample) + extra)

    def hold(self):
        return self.gate.store.load()['holds'].get(H100)

    def test_fatal_xid_holds_until_released_and_is_not_reread(self):
        self.gate.refresh()
        self.assertEqual(({'PGPU': 1}, True), self.reserved())
        reason = self.hold()['reason']
        # Xid 13 (the application's) is not a reason, 79 is
        self.assertNotIn('Xid 13', reason)
        self.assertTrue(reason.startswith('Xid 79 at '), reason)
        self.assertIn('GPU has fallen off the bus', reason)
        gate_state.release(self.gate.store, H100, 'GPU reset')
        self.now += 60
        self.uptime += 60
        self.gate.refresh()
        # the same message does not hold it again
        self.assertEqual(({'PGPU': 0}, False), self.reserved())
        # a new one does
        self.write_log('handmade-dmesg-nvrm-xid.txt',
                       '[ 6030.000001] NVRM: Xid (PCI:0000:00:09): 95, '
                       'pid=9, Uncontained: FBHUB. RST: Yes\n')
        self.now += 60
        self.uptime += 60
        self.gate.refresh()
        self.assertEqual(({'PGPU': 1}, True), self.reserved())
        self.assertIn('Xid 95', self.hold()['reason'])

    def test_after_a_reboot_the_log_is_new(self):
        self.gate.refresh()
        gate_state.release(self.gate.store, H100, 'replaced')
        self.boot = 'boot-2'
        self.uptime = 5200.0        # the same times, another boot
        self.gate.refresh()
        self.assertEqual(({'PGPU': 1}, True), self.reserved())

    def test_codes_and_age_are_the_operators(self):
        self.override('fatal_xids', [13])
        self.gate.refresh()
        self.assertIn('Xid 13', self.hold()['reason'])
        gate_state.release(self.gate.store, H100, 'ok')
        self.override('fatal_xids', [79])
        self.override('xid_max_age', 600)
        self.gate.refresh()         # 79 was logged 893 s before the probe
        self.assertIsNone(self.hold())

    def test_no_kernel_log_no_xid(self):
        self.override('kernel_log', '')
        self.gate = gate.GpuGate(
            self.conf, lambda: self.containers, lambda: self.gpus,
            host_probe=probe.HostProbe.from_conf(self.conf),
            clock=lambda: self.now)
        self.assertEqual((), self.gate._probe.snapshot().xids)


def mig_container(uuid, instance=INSTANCE):
    unit = binding_record.Unit(
        name='nova-mig0', kind=units.KIND_MIG,
        resource_class='CUSTOM_MIG_1G_10GB', provider='rp-mig',
        device_pci=H100, key='mig:' + uuid,
        device={'type': 'gpu', 'gputype': 'mig', 'pci': H100,
                'mig.uuid': uuid},
        detail={'mig_uuid': uuid})
    config = dict(binding_record.Binding(units=(unit,)).config)
    config['user.nova_lxd_accel.instance_uuid'] = instance
    return {'name': 'nova-' + instance, 'status': 'Running',
            'config': config}


class TestUnprobeable(gate_harness.GateTestCase):
    """An NVIDIA GPU that cannot be probed is held, and freed by itself."""

    def traits(self):
        out = self.gate.apply(self.desired())
        return out[provider_tree.gpu_provider_name('cmp1', H100)].traits

    def hold(self):
        return self.gate.store.load()['holds'].get(H100)

    def test_missing_nvidia_smi_holds_at_once(self):
        os.unlink(os.path.join(self.smi_dir, 'nvidia-smi'))
        self.gate.refresh()
        self.assertEqual(({'PGPU': 1}, False), self.reserved())
        self.assertIn(gate.TRAIT_UNPROBEABLE, self.traits())
        self.assertEqual(gate_state.KIND_UNPROBEABLE, self.hold()['kind'])
        self.assertIn('nvidia-smi does not exist', self.hold()['reason'])
        self.assertRaises(exception.GpuHeld, self.gate.check_bindable,
                          self.gpus[0], 'rp')
        # it answers again: offered at the next probe
        self.host('nvsmi-h100-80gb-idle-query-gpu.csv',
                  'nvsmi-h100-80gb-idle-compute-apps.csv')
        self.gate.refresh()
        self.assertIsNone(self.hold())
        self.assertEqual(({'PGPU': 0}, False), self.reserved())
        self.assertNotIn(gate.TRAIT_UNPROBEABLE, self.traits())

    def test_failing_probe_holds_after_failures_in_a_row(self):
        fake_nvidia_smi.recorded(self.smi_dir, {}, status=3)
        self.gate.refresh()
        self.gate.refresh()
        self.assertIsNone(self.hold())
        self.gate.refresh()
        self.assertIn('the GPU probe failed 3 times in a row',
                      self.hold()['reason'])
        # one success resets the count
        self.host('nvsmi-h100-80gb-idle-query-gpu.csv',
                  'nvsmi-h100-80gb-idle-compute-apps.csv')
        self.gate.refresh()
        fake_nvidia_smi.recorded(self.smi_dir, {}, status=3)
        self.gate.refresh()
        self.assertIsNone(self.hold())

    def test_operator_hold_stays_what_it_is(self):
        gate_state.hold(self.gate.store, H100, 'maintenance')
        os.unlink(os.path.join(self.smi_dir, 'nvidia-smi'))
        self.gate.refresh()
        self.assertEqual(gate_state.KIND_OPERATOR, self.hold()['kind'])

    def test_gpu_of_another_vendor_is_not_held(self):
        self.gpus = [dataclasses.replace(h100(), vendor_id='1002')]
        os.unlink(os.path.join(self.smi_dir, 'nvidia-smi'))
        self.gate.refresh()
        self.assertIsNone(self.hold())

    def test_verified_release_off_offers_them(self):
        self.override('verified_release', False)
        os.unlink(os.path.join(self.smi_dir, 'nvidia-smi'))
        self.gate.refresh()
        self.assertIsNone(self.hold())
        self.assertEqual(({'PGPU': 0}, False), self.reserved())


class TestMigRelease(gate_harness.GateTestCase):
    """A released MIG slice is checked on its own, from nvidia-smi -q."""

    SLICE2 = 'MIG-00000002-0000-0000-0000-000000000002'

    def setUp(self):
        super().setUp()
        listing = nvidia_smi.parse_list(
            gpu_hosts.load_text('nvsmi-h100-80gb-mig-4slices-L.txt'))
        self.gpus = [dataclasses.replace(
            h100(), mig_devices=tuple(listing[0].mig_devices))]
        self.mig_host('nvsmi-h100-80gb-mig-4slices-idle-q.txt')

    def mig_host(self, query=None,
                 apps='nvsmi-h100-80gb-idle-compute-apps.csv'):
        """The MIG host's nvidia-smi; without ``query``, -q fails."""
        outputs = {
            '--query-gpu': gpu_hosts.sample_path(
                'handmade-nvsmi-h100-mig-query-gpu.csv'),
            '--query-compute-apps': gpu_hosts.sample_path(apps)}
        if query:
            outputs['-q'] = gpu_hosts.sample_path(query)
        fake_nvidia_smi.recorded(self.smi_dir, outputs)

    def dirty(self):
        return self.gate.store.load()['dirty'].get('mig:' + self.SLICE2)

    def release_busy_slice2(self):
        """SLICE2 bound a period, then released with a process in it."""
        self.gate.refresh()                 # baselines while free
        self.containers = [mig_container(self.SLICE2)]
        self.now += 60
        self.gate.refresh()
        self.containers = []
        self.mig_host('handmade-nvsmi-h100-mig-slice2-busy-q.txt')
        self.now += 60
        self.gate.refresh()

    def test_slice_with_a_process_stays_reserved(self):
        self.release_busy_slice2()
        self.assertIn('python3 (pid 48211, 4090 MiB) in MIG device %s'
                      % self.SLICE2, self.dirty()['holding'])
        # only its memory left (the process gone, not yet freed)
        self.mig_host('handmade-nvsmi-h100-mig-slice2-memory-q.txt')
        self.now += 60
        self.gate.refresh()
        self.assertIn('4100 MiB of memory in use in MIG device',
                      self.dirty()['holding'])
        self.mig_host('nvsmi-h100-80gb-mig-4slices-idle-q.txt')
        self.now += 60
        self.gate.refresh()
        self.assertIsNone(self.dirty())

    def test_another_slice_busy_does_not_hold_this_one(self):
        slice3 = 'MIG-00000003-0000-0000-0000-000000000003'
        self.gate.refresh()
        self.gate.note_destroy(lambda: mig_container(slice3))
        self.mig_host('handmade-nvsmi-h100-mig-slice2-busy-q.txt')
        self.now += 60
        self.gate.refresh()
        self.assertEqual({}, self.gate.store.load()['dirty'])

    def test_slice_recreated_in_place_replaces_the_entry(self):
        # doctor's advice for a slice that stays dirty: recreate it
        self.release_busy_slice2()
        self.assertIsNotNone(self.dirty())
        # the operator destroys the slice (nvidia-smi refuses while a
        # process is in it) and creates it again in the same GPU instance
        new = 'MIG-00000009-0000-0000-0000-000000000009'
        self.gpus = [dataclasses.replace(self.gpus[0], mig_devices=tuple(
            dataclasses.replace(m, uuid=new) if m.uuid == self.SLICE2
            else m for m in self.gpus[0].mig_devices))]
        self.mig_host('nvsmi-h100-80gb-mig-4slices-idle-q.txt')
        self.now += 60
        self.gate.refresh()
        state = self.gate.store.load()
        self.assertEqual({}, state['dirty'])
        event = state['events'][-1]
        self.assertEqual(('replaced', 'mig:' + self.SLICE2),
                         (event['event'], event['unit']))
        self.assertIn(new, event['reason'])

    def test_slice_gone_without_replacement_stays_and_says_gone(self):
        self.gate.refresh()
        self.gate.note_destroy(lambda: mig_container(self.SLICE2))
        self.mig_host('handmade-nvsmi-h100-mig-slice2-busy-q.txt')
        self.gpus = [dataclasses.replace(self.gpus[0], mig_devices=tuple(
            m for m in self.gpus[0].mig_devices if m.uuid != self.SLICE2))]
        self.now += 60
        self.gate.refresh()
        self.assertIn('is gone', self.dirty()['holding'])

    def test_without_facts_of_the_slice_a_process_on_its_gpu_holds_it(self):
        self.gate.refresh()
        self.gate.note_destroy(lambda: mig_container(self.SLICE2))
        # -q fails; --query-compute-apps shows a process on the GPU
        self.mig_host(apps='nvsmi-h100-80gb-load-compute-apps.csv')
        self.now += 60
        self.gate.refresh()
        holding = self.dirty()['holding']
        self.assertIn('no facts of the MIG device', holding)
        self.assertIn('gpu_burn (pid 11345', holding)
        # a failing -q counts toward the unprobeable hold
        self.assertEqual(1, self.gate.store.load()['probe']['failures'])
        # the process leaves: clean although -q still fails
        self.mig_host()
        self.now += 60
        self.gate.refresh()
        self.assertIsNone(self.dirty())


class TestSharedRelease(gate_harness.GateTestCase):
    """A shared GPU is verified when its last slot is released."""

    OTHER = 'f0d1c2b3-0000-4000-8000-000000000002'

    def dirty(self):
        return self.gate.store.load()['dirty']

    def two_sharers_compute(self):
        """Both slots of the card bound (two projects' instances), busy."""
        self.containers = [share_container(0, INSTANCE),
                           share_container(1, self.OTHER)]
        self.host('nvsmi-h100-80gb-load-query-gpu.csv',
                  'nvsmi-h100-80gb-load-compute-apps.csv')
        self.now += 60
        self.gate.refresh()

    def test_slot_free_while_shared_card_verified_when_empty(self):
        self.gate.refresh()             # baseline while free
        self.two_sharers_compute()
        state = self.gate.store.load()
        self.assertEqual(2, len(state['bound']))
        self.assertIn(INSTANCE, state['usage'])
        text = metrics.render(state, [H100], self.conf, self.now)
        self.assertIn('nova_lxd_accel_gpu_shared_slots_used{pci="%s",'
                      'project="proj-a"} 2' % H100, text)
        # one sharer leaves, the other still computes (its cgroup says
        # so): the released slot is free
        self.pids.update(dict.fromkeys((11327, 11328, 11345),
                                       'nova-' + self.OTHER))
        self.containers = [share_container(1, self.OTHER)]
        self.now += 60
        self.gate.refresh()
        self.assertEqual({}, self.dirty())
        # the last one leaves with its processes still there: held back
        self.containers = []
        self.now += 60
        self.gate.refresh()
        self.assertIn('gpu_burn', self.dirty()[
            units.share_key(H100, 1)]['holding'])
        text = metrics.render(self.gate.store.load(), [H100],
                              self.conf, self.now)
        self.assertIn('nova_lxd_accel_gpu_dirty_units{pci="%s"} 1' % H100,
                      text)
        self.host('nvsmi-h100-80gb-idle-query-gpu.csv',
                  'nvsmi-h100-80gb-idle-compute-apps.csv')
        self.now += 60
        self.gate.refresh()
        self.assertEqual({}, self.dirty())

    def test_slot_with_a_process_no_sharer_accounts_for_stays_dirty(self):
        self.gate.refresh()
        self.two_sharers_compute()
        # the leaver's process (its cgroup names its own, removed
        # container) stays while the other slot is still bound
        self.pids.update(dict.fromkeys((11327, 11328), 'nova-' + self.OTHER))
        self.pids[11345] = 'nova-' + INSTANCE
        self.containers = [share_container(1, self.OTHER)]
        self.now += 60
        self.gate.refresh()
        holding = self.dirty()[units.share_key(H100, 0)]['holding']
        self.assertIn('gpu_burn (pid 11345', holding)
        self.assertIn('in container nova-' + INSTANCE, holding)
        # a process whose container cannot be told holds the slot too
        del self.pids[11345]
        self.now += 60
        self.gate.refresh()
        self.assertIn('of unknown origin', self.dirty()[
            units.share_key(H100, 0)]['holding'])
        # it was the other sharer's after all: free
        self.pids[11345] = 'nova-' + self.OTHER
        self.now += 60
        self.gate.refresh()
        self.assertEqual({}, self.dirty())


class TestStateStore(testtools.TestCase):

    def test_hold_release_round_trip(self):
        directory = self.useFixture(fixtures.TempDir()).path
        store = gate_state.StateStore(os.path.join(directory, 'd'))
        self.assertTrue(gate_state.hold(store, H100, 'fan', now=5))
        self.assertFalse(gate_state.hold(store, H100, 'fan again', now=6))
        with open(store.path) as f:
            self.assertEqual('fan again', json.load(f)['holds'][H100][
                'reason'])
        self.assertEqual('fan again',
                         gate_state.release(store, H100, 'ok')['reason'])
        self.assertIsNone(gate_state.release(store, H100, 'ok'))
        self.assertEqual(['hold', 'hold', 'release', 'release'],
                         [e['event'] for e in store.load()['events']])

    def test_failed_update_writes_nothing(self):
        directory = self.useFixture(fixtures.TempDir()).path
        store = gate_state.StateStore(directory)
        gate_state.hold(store, H100, 'x')

        def fail():
            with store.update() as state:
                state['holds'] = {}
                raise RuntimeError('boom')
        self.assertRaises(RuntimeError, fail)
        self.assertIn(H100, store.load()['holds'])


class TestReconcileAtStart(gate_harness.GateTestCase):
    """init_host's reconcile, then a claim before the first refresh (46, 5).

    The instance was deleted while nova-compute was down; its container
    still runs its process on the GPU.
    """

    def test_a_binding_released_at_start_is_dirty_until_verified(self):
        record = container()
        record['config'][identity.KEY_HOST] = 'cmp1'
        client = fake_lxd.FakeLXDClient(record)
        released = reconcile.reconcile(client, 'cmp1', set(),
                                       on_release=self.gate.note_destroy)
        self.assertEqual([record['name']], released)
        self.assertIn('pci:' + H100, self.gate.unavailable_units(
            client.list_containers()))


class TestSlowProbe(gate_harness.GateTestCase):
    """nvidia-smi slow, not hung: a release's probe cut by its deadline.

    Each call answers after 2 s (its timeout is 10 s); a delete gives its
    probe ``release_wait`` = 3 s, so the second call is cut. A cut probe
    says nothing of nvidia-smi's health: it must neither count toward the
    unprobeable hold nor lift one, or the GPU's inventory flaps between
    the deletes (held) and the next periodic refresh (offered again).
    """

    def setUp(self):
        super().setUp()
        self.override('release_wait', 3.0)
        self.override('probe_failures_before_hold', 2)
        self.mono = 0.0
        run = nvidia_smi.run

        def slow(path, args, timeout):
            if timeout < 2.0:
                # as the real run: killed at its timeout
                self.mono += timeout
                return (nvidia_smi.FAILED_TO_RUN, '',
                        '%s did not answer within %s seconds' % (
                            path, timeout))
            self.mono += 2.0
            return run(path, args, timeout)
        self.useFixture(fixtures.MockPatchObject(nvidia_smi, 'run', slow))
        self.gate = gate.GpuGate(
            self.conf, lambda: self.containers, lambda: self.gpus,
            host_probe=probe.HostProbe(
                os.path.join(self.smi_dir, 'nvidia-smi'),
                clock=lambda: self.now, monotonic=lambda: self.mono),
            clock=lambda: self.now, monotonic=lambda: self.mono,
            sleep=self.advance, attribute=self.pids.get, background=False)

    def advance(self, seconds):
        self.mono += seconds

    def hold(self):
        return self.gate.store.load()['holds'].get(H100)

    def test_deletes_cut_short_do_not_hold_the_gpu(self):
        # three servers deleted within one period (a user's script), each
        # release probe cut by its 3 s: no probe here said nvidia-smi fails
        self.gate.refresh()
        for n in range(3):
            instance = 'f0d1c2b3-0000-4000-8000-00000000001%d' % n
            record = container(instance=instance)
            released = self.gate.note_destroy(lambda: record)
            self.gate.verify_release(released)
            self.assertIsNone(self.hold())
        self.assertEqual(0, self.gate.store.load()['probe']['failures'])
        self.assertEqual(({'PGPU': 1}, False), self.reserved())
        # the next whole probe verifies the unit
        self.gate.refresh()
        self.assertEqual({}, self.gate.store.load()['dirty'])
        self.assertEqual(({'PGPU': 0}, False), self.reserved())
