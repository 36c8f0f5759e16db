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

"""Isolated containers created at once each get a host id range of their own.

The real daemon picks an isolated container's range from the containers
it has stored, and stores a new one before it picks that one's range: two
created at the same moment can get the same range, or one below the
daemon's own (measured on LXD 5.0.2). The client creates isolated
containers one at a time (``client.instances._one_isolated_creation_at_a
_time``); without that, this test fails.
"""

import threading

from tests.integration import base

#: How many containers are created at once (twenty gave three bad ranges
#: without the lock, measured).
CONTAINERS = 16


class IsolatedRangesTest(base.DriverTestCase):

    def test_containers_created_at_once_get_disjoint_ranges(self):
        instance = self.make_instance()
        self.driver.spawn(self.context, instance, self.tiny_image(), [],
                          None, {})
        self.addCleanup(self.driver.destroy, self.context, instance, None)
        fingerprint = self.container(instance)['config'][
            'volatile.base_image']
        client = self.driver._parts.client
        names = ['idmap-%02d' % i for i in range(CONTAINERS)]
        errors = []
        start = threading.Barrier(CONTAINERS)

        def create(name):
            try:
                start.wait(30)
                client.create_container(
                    name, {'security.idmap.isolated': 'true'},
                    {'root': {'type': 'disk', 'path': '/',
                              'pool': self.container(instance)[
                                  'expanded_devices']['root']['pool']}},
                    [], {'type': 'image', 'fingerprint': fingerprint})
            except Exception as exc:  # reported below, with its name
                errors.append((name, exc))

        threads = [threading.Thread(target=create, args=(name,))
                   for name in names]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        self.assertEqual([], errors)
        ranges = sorted(
            (int(self.container_config(name)['volatile.idmap.base']), name)
            for name in names)
        overlapping = [
            (low_name, high_name)
            for (low, low_name), (high, high_name) in zip(ranges, ranges[1:])
            if high < low + 65536]
        self.assertEqual([], overlapping, ranges)

    def container_config(self, name):
        return self.project.instance(name)['config']
