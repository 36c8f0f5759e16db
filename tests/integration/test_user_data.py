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

"""Issue 11 item 4: user data reaches cloud-init byte for byte.

Nova's user data is bytes (base64 in the instance record). The test reads
the sha256 of cloud-init's NoCloud seed inside the running container.
"""

import base64
import gzip
import hashlib
import json
import random

from tests.fixtures import lxd_fixtures
from tests.integration import base

SEED = '/var/lib/cloud/seed/nocloud'


class UserDataTest(base.DriverTestCase):

    def _boot(self, data):
        instance = self.make_instance(
            user_data=base64.b64encode(data).decode('ascii'),
            key_data='ssh-ed25519 AAAAC3Nza test@host')
        self.driver.spawn(self.context, instance, self.tiny_image(), [],
                          None, {})
        self.assertEqual('Running', self.container(instance)['status'])
        return instance

    def _inside(self, instance, command):
        return lxd_fixtures.execute_ok(
            self.project.client, self.container_name(instance), command)

    def _assert_exact(self, data):
        instance = self._boot(data)
        digest = self._inside(instance, 'sha256sum %s/user-data' % SEED)
        self.assertEqual(hashlib.sha256(data).hexdigest(),
                         digest.split()[0].decode())
        self.assertEqual(b'600 0 0\n', self._inside(
            instance, 'stat -c "%%a %%u %%g" %s/user-data' % SEED))
        # base64: the test's exec helper cannot read back JSON output.
        meta = json.loads(base64.b64decode(self._inside(
            instance, 'base64 %s/meta-data' % SEED)))
        self.assertEqual(instance.uuid, meta['instance-id'])
        self.assertEqual(['ssh-ed25519 AAAAC3Nza test@host'],
                         meta['public-keys'])
        # Nothing of it in a config string, where LXD would mangle it.
        config = self.container(instance)['config']
        self.assertEqual([], [key for key in config if 'user-data' in key])

    def test_text(self):
        self._assert_exact(
            '#cloud-config\nhostname: caf\u00e9\nruncmd:\n  - [echo, '
            '"\u2603"]\n'.encode('utf-8'))

    def test_gzip(self):
        # Cut at the first NUL before (gzip headers have several).
        data = gzip.compress(b'#cloud-config\npackages: [htop]\n' * 50)
        self.assertIn(b'\0', data)
        self._assert_exact(data)

    def test_random_binary(self):
        rng = random.Random(11)
        data = bytes(rng.getrandbits(8) for _ in range(48 * 1024))
        self._assert_exact(data)

    def test_without_user_data_no_seed(self):
        instance = self.make_instance()
        self.driver.spawn(self.context, instance, self.tiny_image(), [],
                          None, {})
        code, _out, _err = lxd_fixtures.execute(
            self.project.client, self.container_name(instance),
            'test -e %s' % SEED)
        self.assertEqual(1, code)
