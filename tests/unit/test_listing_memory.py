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

"""The last listing of the containers answers only for what it still knows.

:class:`nova_lxd_accel.client.instances.ListingMemory` on its own (a clock
of the test's), and the real ``LXDClient`` on the daemons' recorded
answers (:mod:`tests.fixtures.seam_helpers`): every container the seam sends
a write for (create, state change, update, rename, delete) is no longer
answered for by the listing asked before the write.
"""

import json
from urllib import parse

import fixtures
from oslo_config import fixture as config_fixture
from requests_mock.contrib import fixture as requests_mock_fixture
import testtools

from nova_lxd_accel import client as lxd_client
from nova_lxd_accel.client import instances
from tests.fixtures import seam_helpers


class Clock(object):

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _record(name, status='Running'):
    return {'name': name, 'status': status}


class ListingMemoryTest(testtools.TestCase):

    def setUp(self):
        super(ListingMemoryTest, self).setUp()
        self.clock = Clock()
        self.memory = instances.ListingMemory(clock=self.clock)

    def _list(self, *records):
        stamp, asked_at = self.memory.stamp()
        self.memory.keep(stamp, asked_at, list(records))

    def test_nothing_before_the_first_listing(self):
        self.assertIsNone(self.memory.records(['a'], 60))

    def test_listed_and_absent_containers(self):
        self._list(_record('a'), _record('b', 'Stopped'))
        self.assertEqual({'a': _record('a'), 'gone': None},
                         self.memory.records(['a', 'gone'], 60))

    def test_too_old_a_listing_does_not_answer(self):
        self._list(_record('a'))
        self.clock.now += 60
        self.assertIsNotNone(self.memory.records(['a'], 60))
        self.clock.now += 0.5
        self.assertIsNone(self.memory.records(['a'], 60))

    def test_a_write_after_the_listing_makes_it_read(self):
        self._list(_record('a'), _record('b'))
        self.memory.wrote(['a'])
        self.assertIsNone(self.memory.records(['a'], 60))
        self.assertIsNone(self.memory.records(['b', 'a'], 60))
        self.assertEqual({'b': _record('b')},
                         self.memory.records(['b'], 60))
        # a new listing holds the write
        self._list(_record('a', 'Stopped'))
        self.assertEqual({'a': _record('a', 'Stopped')},
                         self.memory.records(['a'], 60))

    def test_a_write_that_ends_during_the_listing_makes_it_read(self):
        stamp, asked_at = self.memory.stamp()
        self.memory.wrote(['a'])
        self.memory.keep(stamp, asked_at, [_record('a')])
        self.assertIsNone(self.memory.records(['a'], 60))

    def test_an_older_listing_ending_late_is_not_kept(self):
        older = self.memory.stamp()
        self._list(_record('a', 'Stopped'))
        self.memory.keep(older[0], older[1], [_record('a')])
        self.assertEqual({'a': _record('a', 'Stopped')},
                         self.memory.records(['a'], 60))


def _written_instances(requests):
    """Names of the containers these requests create, change or delete.

    Files, snapshots and migration offers change no state; the requests
    before the last listing are in it.
    """
    names = []
    for request in requests:
        path = parse.unquote(parse.urlsplit(request.url).path).rstrip('/')
        if request.method == 'GET' and path == '/1.0/instances':
            names = []
            continue
        if request.method == 'GET' or not path.startswith(
                '/1.0/instances'):
            continue
        parts = path.split('/')[3:]
        body = json.loads(request.body or '{}') if request.body and \
            request.headers.get('Content-Type', '').startswith(
                'application/json') else {}
        if not parts:
            names.append(body.get('name'))      # create, copy, migrate
        elif len(parts) == 1 and request.method == 'POST':
            if 'migration' not in body:         # rename
                names += [parts[0], body.get('name')]
        elif len(parts) == 1 or parts[1] == 'state':
            names.append(parts[0])              # update, delete, state
    return [name for name in names if name]


class WritesForgetTheListingTest(testtools.TestCase):
    """Every step of the seam's scenario, on both daemons' answers."""

    def setUp(self):
        super(WritesForgetTheListingTest, self).setUp()
        self.socket = seam_helpers.SocketFile()
        self.addCleanup(self.socket.close)
        self.useFixture(fixtures.FakeLogger(name='nova_lxd_accel.client'))
        self.useFixture(fixtures.MonkeyPatch(
            'time.sleep', lambda seconds: None))

    def _run(self, daemon, name, step):
        mock = self.useFixture(requests_mock_fixture.Fixture())
        server = seam_helpers.load(daemon, 'server_info')['exchanges']
        mock.add_matcher(seam_helpers.Replay(
            seam_helpers.load(daemon, name)['exchanges'] + server))
        conf = seam_helpers.make_conf(self.socket.path)
        self.useFixture(config_fixture.Config(conf))
        client = lxd_client.LXDClient(conf)
        # an empty listing, asked before the step: "no container at all"
        client.listings.keep(*client.listings.stamp(), records=[])
        try:
            step(client, {'image': b'tarball'})
        except Exception:
            pass
        return client, _written_instances(mock.request_history)

    def test_written_containers_are_read_again(self):
        checked = set()
        for daemon in seam_helpers.recordings():
            for name, step in seam_helpers.STEPS:
                client, written = self._run(daemon, name, step)
                for container in written:
                    self.assertIsNone(
                        client.listed_containers([container]),
                        '%s: %s wrote %s' % (daemon, name, container))
                    checked.add(name)
                self.assertEqual(
                    {'never-written': None},
                    client.listed_containers(['never-written']),
                    '%s: %s' % (daemon, name))
        # the scenario creates, updates, starts, freezes, copies, renames
        # and deletes containers (its steps create and remove list them
        # after their writes: that listing holds them)
        self.assertTrue({'create_refused', 'modify', 'update_and_put',
                         'start_and_files', 'freeze', 'stop_copy_rename',
                         'delete_running'} <= checked, checked)
