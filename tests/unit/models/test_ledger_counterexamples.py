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

"""The GPU ledger model's counterexamples, replayed step by step.

Each test is the shrunk sequence of steps the model
(:mod:`tests.fixtures.ledger_model`) found with one of the ledger's fixes
removed (doc/source/contributor/ledger-model-proofs.rst): the same rules,
the same draws, every invariant checked after each step. They run whatever
the random search reaches, and fail with the fix removed.
"""

from nova_lxd_accel.accel.inventory import nvidia_smi
from tests.fixtures import ledger_model

#: the replays' draws (``st.data()``) and the first instance the model makes
Draws = ledger_model.Draws
FIRST = ledger_model.FIRST


class TestCounterexamples(ledger_model.LedgerReplay):

    def test_reconcile_at_init_host_marks_released_units_dirty(self):
        # without on_release in reconcile.reconcile: the unit of a server
        # deleted while nova-compute was down, still running its process,
        # is taken by the next claim
        self.busy_host(mig=1)
        self.step('deleted_while_down', Draws(FIRST))
        self.step('boot', flavor='mig', project='proj-a', busy=False)

    def test_a_resize_or_migration_tells_the_gate_what_it_bound(self):
        # without note_bound in Claims.rewriting: a migrated server deleted
        # behind nova's back leaves a process on a unit no one marks dirty
        self.busy_host()
        self.step('arrives_by_resize_or_migration', flavor='mig',
                  project='proj-a')
        self.step('process_appears', Draws(FIRST))
        self.step('delete_behind_novas_back', Draws(FIRST), leftover=True)

    def test_gpu_forget_drops_only_the_entry_it_checked(self):
        # without gate_state.forget's ``checked``: a unit released again
        # between the command's check and its write is forgotten with the
        # new leftover on it
        self.busy_host(whole=1)
        self.step('delete', Draws(FIRST), leftover=True)
        self.step('operator_checks_a_unit_to_forget', which=0)
        self.step('time_passes', seconds=9.0)
        self.step('boot', flavor='whole', project='proj-a', busy=True)
        self.step('delete', Draws('00000000-0000-4000-8000-000000000001'),
                  leftover=True)
        self.step('operator_forgets')

    def test_gpu_forget_checked_before_a_restart_and_written_after(self):
        # without gate_state.forget's ``checked``, as the wide search
        # found it (tox -e ledger-model, guided by the 'gpu forget race'
        # target): the unit of a server deleted while nova-compute was
        # down is verified clean, claimed, and released again by the next
        # restart's reconcile with the new server's process still on it;
        # the write drops that new entry
        self.busy_host()
        self.step('arrives_by_resize_or_migration', flavor='pool2',
                  project='proj-a')
        self.step('deleted_while_down', Draws(FIRST))
        self.step('operator_checks_a_unit_to_forget', which=0)
        self.step('periodic_refresh')
        self.step('boot', flavor='pool2', project='proj-a', busy=True)
        self.step('deleted_while_down',
                  Draws('00000000-0000-4000-8000-000000000001'))
        self.step('operator_forgets')

    def test_a_refresh_during_a_delete_does_not_bind_the_unit_again(self):
        # without gate_state.stale_binding: a refresh listing the
        # container between note_destroy and its removal records the unit
        # bound to it again, and the unit, verified clean, stays
        # unavailable as "gone, not yet verified"
        self.busy_host(pool2=1)
        # a refresh once the delete marked its units (Draws: the refresh's
        # pick, the delete's leftover, the delete's pick)
        self.step('interleave', data=Draws(FIRST, False, FIRST),
                  outer='delete', where=0, op='refresh', flavor='mig',
                  project='proj-a')
        self.step('recheck')

    def test_a_container_being_removed_is_not_its_instance_again(self):
        # without the dirty entry's 'removing' (note_destroy): after a
        # restart, a refresh listing a container its delete marked but
        # has not removed yet takes it for its instance holding the cards
        # again, and they stay unavailable once verified clean
        self.busy_host(share=1, pool2=1)
        self.step('deleted_while_down', Draws(FIRST))
        second = '00000000-0000-4000-8000-000000000001'
        self.step('interleave', data=Draws(second, False, second),
                  outer='delete', where=0, op='refresh', flavor='mig',
                  project='proj-a')
        self.step('recheck')

    def test_a_gpu_held_unprobeable_is_not_bound(self):
        # without GpuGate.check_bindable (the claim asks it of each
        # device it looks up): a slice of the MIG GPU held as unprobeable
        # is bound (the pick of a MIG slice did not read the card's hold;
        # since e3e1143 it does: this fails with both removed)
        self.busy_host()
        self.step('probe_becomes', mode='fail')
        self.step('periodic_refresh')
        self.step('periodic_refresh')
        self.step('boot', flavor='mig', project='proj-a', busy=False)

    def test_a_unit_left_dirty_by_a_delete_is_rechecked(self):
        # without verify_release starting the re-check thread: a unit
        # whose leftover ends after the delete stays reserved until some
        # later refresh
        self.busy_host(whole=1)
        self.step('periodic_refresh')
        self.step('delete', Draws(FIRST), leftover=True)
        self.step('process_leaves', Draws(1000))
        self.step('time_passes', seconds=9.0)

    def test_a_container_listed_after_its_removal_is_not_a_holder(self):
        # without release._held_again in verify_released: the daemon
        # still lists the container its delete removed (Incus does), the
        # delete's own verification takes it for its instance holding the
        # unit again and drops the dirty entry; nova then frees the
        # allocation with the leftover on the unit
        self.busy_host(whole=1)
        self.step('daemon_lists_removed_containers', lags=True)
        self.step('delete', Draws(FIRST), leftover=True)

    def test_a_failed_removal_then_an_operator_delete(self):
        # without verify_released recording the unit bound again once its
        # own instance holds it (the removal failed): `lxc delete` by an
        # operator leaves the leftover on a unit no one marks dirty
        self.busy_host(whole=1)
        self.step('removal_fails', Draws(FIRST))
        self.step('delete_behind_novas_back', Draws(FIRST), leftover=True)

    def damaged_state_file_holds_every_gpu(self, how):
        self.busy_host(mig=1)
        self.step('state_file_damaged', how=how)
        self.step('boot', flavor='whole', project='proj-a', busy=False)

    def test_a_truncated_state_file_holds_every_gpu(self):
        # without _hold_everything in GpuGate._ledger: a claim while the
        # state file cannot be parsed uses the last view, which knows
        # nothing of what the file held
        self.damaged_state_file_holds_every_gpu('truncated')

    def test_an_unreadable_state_file_holds_every_gpu(self):
        self.damaged_state_file_holds_every_gpu('unreadable')

    def test_a_state_file_not_an_object_holds_every_gpu(self):
        # also without the shape check of StateStore.load (a JSON list
        # read as an empty state)
        self.damaged_state_file_holds_every_gpu('list')

    def test_a_released_slice_of_a_lost_mig_gpu_stays_dirty(self):
        # without release.holding's "lost" answer: nvidia-smi lists no
        # process on a GPU it reports lost, and the refresh verifies the
        # slice reconcile released clean with the leftover on it
        self.busy_host(mig=1, pool2=1)
        self.step('deleted_while_down', Draws(FIRST))
        self.step('mig_gpu_lost', lost=True)
        self.step('periodic_refresh')

    def test_a_slice_deleted_on_a_lost_mig_gpu_stays_reserved(self):
        # the same, by the delete's own verification
        self.busy_host(mig=1)
        self.step('mig_gpu_lost', lost=True)
        self.step('delete', Draws(FIRST), leftover=True)

    def test_no_busy_time_nor_energy_for_hours_down(self):
        # without usage_record's gap (or energy.account's): the 10 hours
        # nova-compute was down are counted busy, their energy
        # interpolated between the readings at both ends
        self.busy_host(whole=1)
        self.step('periodic_refresh')
        self.step('compute_down_for_hours')
        self.step('periodic_refresh')

    def test_a_release_the_state_file_cannot_record_keeps_the_binding(self):
        # without reconcile keeping the binding when note_destroy cannot
        # record the release: once the operator puts the last good state
        # file back, it records the unit bound to a live container, and
        # the next claim takes it with the deleted server's process on it
        self.busy_host(mig=2)
        self.step('state_file_damaged', how='truncated')
        self.step('deleted_while_down', Draws(FIRST))
        self.step('operator_repairs_state_file')
        self.step('restart_compute')
        self.step('boot', flavor='mig', project='proj-b', busy=False)

    def test_a_wedged_gpu_leaves_at_most_two_stuck_nvidia_smi(self):
        # without nvidia_smi.MAX_STUCK: every probe on a GPU stuck in the
        # kernel starts one more nvidia-smi that SIGKILL cannot end, and
        # leaves it with one more reaper thread (issue 46, item 9)
        self.busy_host(mig=1)
        self.step('probe_becomes', mode='wedged')
        for _ in range(4):
            self.step('periodic_refresh')
        self.step('delete', Draws(FIRST), leftover=False)
        self.assertEqual(nvidia_smi.MAX_STUCK, len(self.machine.wedged))
        # one ends: the next probe may start nvidia-smi again, one only
        self.step('stuck_nvidia_smi_ends')
        self.step('recheck')
        self.assertEqual(nvidia_smi.MAX_STUCK + 1,
                         len(self.machine.wedged))

    def test_the_watcher_tells_the_gate_of_a_container_its_event_says_gone(
            self):
        # the event stream, not a poll: a container removed behind nova's
        # back, its leftover gone, is verified clean and offered again by
        # the re-check once the watcher handled its deletion (without
        # LifecycleWatcher._gone's note_gone the unit stays "bound to a
        # container that is gone" until a refresh)
        self.busy_host(whole=1)
        self.step('watcher_reads_events')
        self.step('delete_behind_novas_back', Draws(FIRST), leftover=False)
        self.step('watcher_reads_events')
        self.assertEqual(set(), self.machine.unseen_gone)
        self.step('recheck')
        self.step('recheck')
