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

"""The release side: a delete marks its units and waits for them (unit level).

Through the gate, with its real probe (a script printing recorded
nvidia-smi outputs, tests/fixtures/gate_harness) and its real state file.
"""

import os
import threading


from nova_lxd_accel.accel.health import gate
from nova_lxd_accel.accel.health import probe
from tests.fixtures import gate_harness

H100 = gate_harness.H100
INSTANCE = gate_harness.INSTANCE
h100 = gate_harness.h100
container = gate_harness.container


class ReleaseTestCase(gate_harness.GateTestCase):
    """A gate whose release waits run on the test's own clock."""

    def setUp(self):
        super().setUp()
        self.clean = threading.Event()
        self.monotonic = 0.0
        self.slept = []
        #: callables run after each wait of the release (the host changes)
        self.after_wait = []
        self.gate = gate.GpuGate(
            self.conf, lambda: self.containers, lambda: self.gpus,
            host_probe=probe.HostProbe(
                os.path.join(self.smi_dir, 'nvidia-smi'),
                clock=lambda: self.now),
            clock=lambda: self.now, on_clean=self.clean.set,
            sleep=self.sleep, monotonic=lambda: self.monotonic)
        self.addCleanup(self.gate.stop)
        self.gate.refresh()         # baseline: 0 MiB used while free

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.monotonic += seconds
        if self.after_wait:
            self.after_wait.pop(0)()

    def busy(self):
        self.host('nvsmi-h100-80gb-load-query-gpu.csv',
                  'nvsmi-h100-80gb-load-compute-apps.csv')

    def idle(self):
        self.host('nvsmi-h100-80gb-idle-query-gpu.csv',
                  'nvsmi-h100-80gb-idle-compute-apps.csv')


class TestReleaseAtRemoval(ReleaseTestCase):
    """verify_release: probed once the container is gone, not next period."""

    def test_clean_unit_is_free_when_the_removal_returns(self):
        keys = self.gate.note_destroy(container)
        self.assertEqual(('pci:' + H100,), keys)
        self.assertEqual(({'PGPU': 1}, False), self.reserved())
        self.assertEqual(set(), self.gate.verify_release(keys))
        self.assertEqual(({'PGPU': 0}, False), self.reserved())
        self.assertEqual([], self.slept)        # clean at once: no wait
        event = self.gate.store.load()['events'][-1]
        self.assertEqual(('clean', 'pci:' + H100), (event['event'],
                                                    event['unit']))

    def refresh_across_a_delete(self, marked_before):
        """A refresh whose listing still shows the bound container.

        The delete is marked (``note_destroy``) before the refresh starts
        when ``marked_before``, else right after its listing; either way
        the container is removed and its unit verified clean before the
        refresh writes what it listed.
        """
        self.containers = [container()]
        self.gate.refresh()
        listed = list(self.containers)
        keys = self.gate.note_destroy(container) if marked_before else None
        deleted = []

        def listing_then_removed():
            # the release's own listings (after the delete) see it gone
            if deleted:
                return self.containers
            deleted.append(True)
            released = keys or self.gate.note_destroy(container)
            self.containers = []
            self.assertEqual(set(), self.gate.verify_release(released))
            return listed

        self.gate._list_containers = listing_then_removed
        self.gate.refresh()

    def test_a_listing_taken_before_a_delete_binds_nothing_again(self):
        # the refresh lists the daemon, then nova deletes the instance:
        # its listing must not bind the unit again to the gone container,
        # where every claim would take it for deleted behind nova's back
        self.refresh_across_a_delete(marked_before=False)
        self.assertNotIn('pci:' + H100, self.gate.store.load()['bound'])
        self.assertEqual({}, self.gate.unavailable_units([]))
        self.assertEqual(({'PGPU': 0}, False), self.reserved())

    def test_a_container_listed_while_deleted_is_not_bound_again(self):
        # the refresh starts after the delete marked the unit (its mark is
        # later) but lists the daemon while the container is still being
        # deleted
        self.refresh_across_a_delete(marked_before=True)
        self.assertNotIn('pci:' + H100, self.gate.store.load()['bound'])
        self.assertEqual({}, self.gate.unavailable_units([]))

    def test_processes_leaving_within_the_wait(self):
        keys = self.gate.note_destroy(container)
        self.busy()
        self.after_wait = [lambda: None, self.idle]
        self.assertEqual(set(), self.gate.verify_release(keys))
        self.assertEqual([gate.RELEASE_POLL] * 2, self.slept)
        self.assertEqual(({'PGPU': 0}, False), self.reserved())

    def test_still_dirty_after_the_wait_is_rechecked_until_clean(self):
        self.override('release_wait', 2.0)
        self.override('release_recheck_interval', 0.5)
        keys = self.gate.note_destroy(container)
        self.busy()
        self.assertEqual({'pci:' + H100}, self.gate.verify_release(keys))
        self.assertLessEqual(sum(self.slept), 2.0)
        self.assertEqual(({'PGPU': 1}, False), self.reserved())
        self.assertIn('./gpu_burn (pid 11345', self.gate.unavailable_units()[
            'pci:' + H100][0])
        # the process ends: the re-check thread frees the unit and asks
        # for nova's resource update
        self.idle()
        self.assertTrue(self.clean.wait(30))
        self.assertEqual(({'PGPU': 0}, False), self.reserved())
        self.assertEqual({}, self.gate.unavailable_units())

    def test_dirty_unit_is_unavailable_to_every_claim(self):
        self.gate.note_destroy(container)
        self.assertEqual(
            {'pci:' + H100: ['instance %s, released but not verified clean '
                             '(not yet verified)' % INSTANCE]},
            self.gate.unavailable_units())

    def test_verified_release_off_frees_at_once(self):
        self.override('verified_release', False)
        self.busy()
        self.assertEqual((), self.gate.note_destroy(container))
        self.assertEqual(({'PGPU': 0}, False), self.reserved())
        self.assertEqual({}, self.gate.unavailable_units())


class TestDeleteInterleavings(ReleaseTestCase):
    """Orders a delete and a refresh can run in (issue 46, items 1-3)."""

    def setUp(self):
        super().setUp()
        self.containers = [container()]
        self.gate.refresh()
        # the tenant's process, which outlives its container
        self.busy()

    def dirty(self):
        return self.gate.store.load()['dirty']

    def test_a_refresh_during_a_slow_delete_keeps_the_unit_dirty(self):
        keys = self.gate.note_destroy(container)
        # the removal is slow: a periodic refresh still lists it
        self.gate.refresh()
        self.assertIn('pci:' + H100, self.dirty())
        self.containers = []
        self.assertEqual({'pci:' + H100}, self.gate.verify_release(keys))
        self.assertIn('pci:' + H100, self.gate.unavailable_units([]))

    def test_a_container_still_listed_after_its_delete_is_not_a_holder(self):
        keys = self.gate.note_destroy(container)
        # removed, but the daemon lists it a moment longer (Incus does)
        self.assertEqual({'pci:' + H100}, self.gate.verify_release(keys))
        self.assertIn('compute processes', self.dirty()['pci:' + H100][
            'holding'])

    def test_a_failed_removal_then_an_operator_delete(self):
        keys = self.gate.note_destroy(container)
        self.gate.removal_failed(keys)
        # still there, its instance's: bound again, not dirty
        self.gate.verify_release(keys)
        self.assertNotIn('pci:' + H100, self.dirty())
        # `lxc delete` by an operator; the watcher sees it gone
        self.containers = []
        self.assertEqual(['pci:' + H100],
                         self.gate.note_gone(container()['name']))
        self.assertIn('pci:' + H100, self.gate.unavailable_units([]))
