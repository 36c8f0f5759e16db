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

"""The release check: the re-check thread and its schedule (unit level).
"""

import threading

from oslo_config import cfg
import testtools

from nova_lxd_accel.accel.health import release
from nova_lxd_accel.conf import accelerators
from tests.fixtures import gate_harness


class TestRecheckRestartsOnARelease(gate_harness.GateTestCase):

    def test_a_release_while_the_thread_waits_long_wakes_it(self):
        # the thread waits 16 s after rounds where nothing turned clean
        self.gate.release_check._thread = threading.current_thread()
        self.gate.recheck_interval = 16.0
        self.gate.release_check.ensure()       # another unit is released
        self.assertIsNone(self.gate.recheck_interval)
        self.assertTrue(self.gate.release_check._wake.is_set())
        # and a re-check that ran meanwhile does not grow it again
        self.gate.recheck_interval = 16.0
        self.gate.release_check._again = False
        self.gate.release_check.ensure()
        self.gate.recheck()
        self.assertEqual(
            self.conf.lxd_accelerators.release_recheck_interval,
            self.gate.recheck_interval)
        self.gate.release_check._thread = None


class TestRecheckBackoff(testtools.TestCase):

    def test_interval_doubles_to_the_cap_and_starts_again(self):
        conf = cfg.ConfigOpts()
        accelerators.register_opts(conf)
        conf([])
        conf.set_override('release_recheck_interval', 1.0,
                          group='lxd_accelerators')
        conf.set_override('release_recheck_max_interval', 10.0,
                          group='lxd_accelerators')
        self.addCleanup(conf.clear_override, 'release_recheck_interval',
                        group='lxd_accelerators')
        self.addCleanup(conf.clear_override, 'release_recheck_max_interval',
                        group='lxd_accelerators')
        waits, interval = [], None
        for _ in range(6):
            interval = release.next_recheck_interval(interval, False, conf)
            waits.append(interval)
        self.assertEqual([1.0, 2.0, 4.0, 8.0, 10.0, 10.0], waits)
        self.assertEqual(1.0, release.next_recheck_interval(10.0, True,
                                                            conf))
