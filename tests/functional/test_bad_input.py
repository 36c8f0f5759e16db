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

"""Issue 11 items 3 and 4 through nova's API, with real Placement and LXD.

Flavors here get their extra specs at the API's default microversion, as
the CLI's default 2.61 does: the Nova API does not validate them, the
driver does at spawn.
"""

import base64
import gzip
import hashlib

from nova import utils

from tests.fixtures import lxd_fixtures
from tests.functional import base


class BadInputTest(base.LXDFunctionalTestCase):

    def flavor(self, **extra_spec):
        # The openstack CLI's default microversion: no validation.
        with utils.temporary_mutation(self.admin_api, microversion='2.61'):
            return self._create_flavor(memory_mb=128, vcpu=1, disk=0,
                                       ephemeral=0, extra_spec=extra_spec)

    def boot(self, flavor_id, expected='ACTIVE', **server):
        body = self._build_server(image_uuid=self.image_id,
                                  flavor_id=flavor_id, networks='none')
        body.update(server)
        server = self.api.post_server({'server': body})
        return self._wait_for_state_change(server, expected)

    def _assert_refused(self, specs, *phrases):
        server = self.boot(self.flavor(**specs), expected='ERROR')
        fault = server['fault']['message']
        for phrase in phrases:
            self.assertIn(phrase, fault)
        # Aborted with the reason, not rescheduled into "Exceeded maximum
        # number of retries"; nothing left behind.
        self.assertNotIn('Exceeded maximum number of retries', fault)
        self.assertEqual([], self.container_names())
        self._delete_server(server)
        self.assertEqual({'VCPU': 0, 'MEMORY_MB': 0, 'DISK_GB': 0},
                         self._get_provider_usages(
                             self._get_provider_uuid_by_name('compute1')))

    def test_out_of_range_process_limit_gives_a_clear_fault(self):
        self._assert_refused({'lxd:processes': '99999999999'},
                             'lxd:processes=99999999999',
                             'greater than the max')

    def test_unknown_key_gives_a_clear_fault(self):
        self._assert_refused({'lxd:raw.lxc': 'lxc.cap.drop='},
                             'lxd:raw.lxc', 'unknown key')

    def test_forbidden_privileged_gives_a_clear_fault(self):
        self._assert_refused({'lxd:privileged': 'true'},
                             'allow_privileged_containers')

    def test_gzip_user_data_byte_exact(self):
        data = gzip.compress(b'#cloud-config\nruncmd: [[touch, /ok]]\n')
        server = self.boot(self.flavor(),
                           user_data=base64.b64encode(data).decode())
        out = lxd_fixtures.execute_ok(
            self.lxd.client, 'nova-%s' % server['id'],
            'sha256sum /var/lib/cloud/seed/nocloud/user-data')
        self.assertEqual(hashlib.sha256(data).hexdigest(),
                         out.split()[0].decode())
        self._delete_server(server)
