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

"""LXD faults of the host, not of the request: nova retries the build."""

from nova import exception as nova_exception
from nova import objects
import testtools

from nova_lxd_accel import exception
from nova_lxd_accel import image_cache
from nova_lxd_accel import lifecycle


class KnownLXDFaultsTest(testtools.TestCase):

    def setUp(self):
        super(KnownLXDFaultsTest, self).setUp()
        objects.register_all()
        self.instance = objects.Instance(
            uuid='3c1e0d52-8f6a-4b0e-9a55-6f0c2d1e7b40')

    def test_idmapped_storage_failure_is_retried(self):
        # Issue 11 item 13: seen once beside a concurrent snapshot.
        exc = exception.LXDOperationFailed(
            action='start', target='instance nova-x',
            reason='Failed to handle idmapped storage: Failed to change '
                   'ownership of "/var/lib/lxd/storage-pools/default/'
                   'containers/nova-x/rootfs/bin/openvt": no such file or '
                   'directory')
        self.assertIs(exc, lifecycle.build_failure(self.instance, exc))

    def test_image_file_lost_by_the_daemon_is_retried(self):
        # As CI saw it: another project's image delete took the file.
        exc = exception.LXDOperationFailed(
            action='create', target='instance nova-x',
            reason='Failed creating instance from image: open /var/lib/lxd/'
                   'images/90eee9f9e32308d0: no such file or directory')
        self.assertTrue(image_cache.lost_its_file(exc))
        self.assertIs(exc, lifecycle.build_failure(self.instance, exc))

    def test_image_that_is_not_a_root_file_system_aborts(self):
        exc = exception.LXDOperationFailed(
            action='create', target='instance nova-x',
            reason='Failed creating instance from image: Unpack failed: '
                   'exit status 2')
        self.assertFalse(image_cache.lost_its_file(exc))
        self.assertIsInstance(lifecycle.build_failure(self.instance, exc),
                              nova_exception.BuildAbortException)

    def test_bad_extra_spec_aborts(self):
        exc = exception.FlavorExtraSpecInvalid(
            flavor='f', key='lxd:processes', value='0', reason='too small')
        failure = lifecycle.build_failure(self.instance, exc)
        self.assertIsInstance(failure, nova_exception.BuildAbortException)
        self.assertIn('lxd:processes=0', str(failure))
