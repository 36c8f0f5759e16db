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

"""The GPU ledger model (:mod:`tests.fixtures.ledger_model`) as tests.

:class:`TestLedgerModel` runs the model's random search over the real
ledger code; its invariants and the host it runs on are described in
:mod:`tests.fixtures.ledger_model` and :mod:`tests.fixtures.ledger_host`.
The counterexamples it found are replayed in
``tests/unit/models/test_ledger_counterexamples.py``.
"""

import os

from oslo_config import cfg
import testtools

from nova_lxd_accel import conf as lxd_conf
from tests.fixtures import ledger_host
from tests.fixtures import ledger_model


class TestLedgerModel(ledger_model.LedgerMachine.TestCase):
    """The model as a test case of the unit suite.

    A class of this module, so that its id is
    ``tests.unit.models.test_gpu_ledger.TestLedgerModel.runTest``:
    Hypothesis' own ``LedgerMachine.TestCase`` is named after
    ``hypothesis.stateful``, which a filter on this module's name (``tox -e
    ledger-model``) never selected: that long run ran the replays only.
    """

    settings = ledger_model.settings_for(
        int(os.environ.get('LEDGER_MODEL_EXAMPLES', '160')),
        int(os.environ.get('LEDGER_MODEL_STEPS', '40')),
        wide=os.environ.get('LEDGER_MODEL_RANDOM') == '1')


class TestModelConfinement(testtools.TestCase):
    """The model's option overrides stay in the model (issue 46)."""

    def test_overrides_do_not_reach_another_configuration(self):
        machine = ledger_model.LedgerMachine()
        machine.teardown()
        self.assertEqual(ledger_host.RELEASE_WAIT,
                         machine.conf.lxd_accelerators.release_wait)
        # registered as the other tests register them: the shared groups
        other = cfg.ConfigOpts()
        for group, opts in lxd_conf.list_opts():
            other.register_opts(opts, group=group)
        other([], default_config_files=[])
        for name in ('release_wait', 'probe_failures_before_hold',
                     'nvidia_smi_timeout', 'state_dir', 'shared_gpus'):
            opt = next(o for g, opts in lxd_conf.list_opts()
                       if g.name == 'lxd_accelerators'
                       for o in opts if o.name == name)
            self.assertEqual(opt.default,
                             getattr(other.lxd_accelerators, name), name)
