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

"""Discovery on a host where LXD and Incus run side by side.

Needs both real daemons (tools/lxd-up.sh and tools/incus-up.sh; the
sockets of $LXD_DIR and $INCUS_DIR), like test_lxd_to_incus: tox runs it in
integration-incus only (integration leaves out ``test_lxd_to_incus*``).
The discovery itself is tested on recorded daemons in
tests/unit/test_daemon.py.
"""

from oslo_config import cfg
import testtools

from nova_lxd_accel import client
from nova_lxd_accel import conf as lxd_conf
from nova_lxd_accel import exception
from tests.fixtures import lxd_fixtures


def _conf():
    conf = cfg.ConfigOpts()
    lxd_conf.register_opts(conf)
    conf([])
    # Overrides live on the shared option group: start from none.
    conf.clear_override('endpoint', group='lxd')
    return conf


class RealDaemonsSideBySideTest(testtools.TestCase):
    """The CI host runs Debian's LXD and Incus side by side."""

    def test_both_answer_and_nothing_chose(self):
        well_known = [(kind, lxd_fixtures.socket_of(kind))
                      for kind in ('lxd', 'incus')]
        (_, lxd), (_, incus) = well_known
        error = self.assertRaises(
            exception.DaemonAmbiguous, client.discover, _conf().lxd,
            environ={}, well_known=well_known)
        self.assertIn('LXD 5.0.2 at %s' % lxd, str(error))
        self.assertIn('Incus 6.0', str(error))
        self.assertIn('set [lxd] endpoint in nova.conf to %s or %s'
                      % (lxd, incus), str(error))
