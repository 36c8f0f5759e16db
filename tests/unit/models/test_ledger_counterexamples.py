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

"""The ledger model's counterexamples, replayed step by step.

Each test is the shrunk sequence of steps the model
(:mod:`tests.unit.models.test_gpu_ledger`) found with one of the ledger's
fixes removed (``doc/source/contributor/ledger-model-proofs.rst``): the
same rules, the same draws, every invariant checked after each step. They
run whatever the model's random search reaches, and fail with the fix
removed.
"""

from hypothesis import stateful
import testtools

from tests.unit.models import test_gpu_ledger as model

#: the first instance the model makes
FIRST = '00000000-0000-4000-8000-000000000000'


class Draws(object):
    """``st.data()`` of a replay: the values drawn, in order."""

    def __init__(self, *values):
        self.values = list(values)

    def draw(self, strategy, label=None):
        return self.values.pop(0)


class LedgerReplay(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.machine = model.LedgerMachine()
        self.addCleanup(self.machine.teardown)

    def check(self):
        """Every invariant of the model, as Hypothesis runs them."""
        for name in dir(type(self.machine)):
            if getattr(getattr(type(self.machine), name),
                       stateful.INVARIANT_MARKER, None) is not None:
                getattr(self.machine, name)()

    def step(self, rule, *args, **kwargs):
        getattr(self.machine, rule)(*args, **kwargs)
        self.check()

    def busy_host(self, whole=0, mig=0, share=0, pool2=0,
                  projects=('proj-a',) * 5):
        self.step('busy_host', counts=(whole, mig, share, pool2),
                  projects=list(projects))


class TestCounterexamples(LedgerReplay):

    def test_reconcile_at_init_host_marks_released_units_dirty(self):
        # without on_release in reconcile.reconcile: the unit of a server
        # deleted while nova-compute was down, still running its process,
        # is taken by the next claim
        self.busy_host(mig=1)
        self.step('deleted_while_down', Draws(FIRST))
        self.step('boot', flavor='mig', project='proj-a', busy=False)

    def test_a_resize_or_migration_tells_the_gate_what_it_bound(self):
        # without on_bound in Claims.rewriting: a migrated server deleted
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
        # without GpuGate.check_bindable (the inventory's
        # device_for_provider): a slice of the MIG GPU held as unprobeable
        # is bound (the pick of a MIG slice does not read the card's hold)
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
