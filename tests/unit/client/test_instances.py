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

"""The seam (nova_lxd_accel.client) as a contract, on real daemons' answers.

Every step of :data:`tests.fixtures.seam_helpers.STEPS` runs on the answers
LXD 5.0.2 and Incus 6.0.4 gave to it (``tests/unit/samples/recorded-*``,
recorded with ``python -m tests.fixtures.seam_helpers``), served again through
``requests-mock``. Each test checks what the seam returns or raises, that
it asked exactly what the daemon was asked when recorded (same requests, in
the same order), and that the daemon's own message reaches the project's
exception. Transport failures (refused, timed out) are not daemon answers;
they are raised by ``requests-mock`` itself.
"""

import io
import json
import re
from urllib import parse

import fixtures
from oslo_config import fixture as config_fixture
import requests
import requests_mock
from requests_mock.contrib import fixture as requests_mock_fixture
import testtools

from nova_lxd_accel import client as lxd_client
from nova_lxd_accel.client import instances
from nova_lxd_accel import exception
from tests.fixtures import fake_lxd
from tests.fixtures import seam_helpers


FINGERPRINT = re.compile(r'^[0-9a-f]{64}$')


def _keys(exchanges):
    return [seam_helpers._key(e['method'], e['path'], e['query'])
            for e in exchanges if e['path'].rstrip('/') != '/1.0']


class ContractSteps(object):
    """The checks, for one daemon's recordings (:attr:`daemon`)."""

    daemon = None

    def setUp(self):
        super(ContractSteps, self).setUp()
        self.socket = seam_helpers.SocketFile()
        self.addCleanup(self.socket.close)
        self.mock = self.useFixture(requests_mock_fixture.Fixture())
        self.log = self.useFixture(fixtures.FakeLogger(
            name='nova_lxd_accel.client'))

    def conf(self):
        conf = seam_helpers.make_conf(self.socket.path)
        # overrides live in the (shared) option groups: undo them after
        self.useFixture(config_fixture.Config(conf))
        return conf

    def run_step(self, name, ctx=None):
        """Run one step on its recorded answers: (result or exception)."""
        recorded = seam_helpers.load(self.daemon, name)
        # the connection's own GET /1.0 (pylxd reads it when it connects)
        server = seam_helpers.load(self.daemon, 'server_info')['exchanges']
        self.replay = seam_helpers.Replay(recorded['exchanges'] + server)
        self.mock.add_matcher(self.replay)
        client = lxd_client.LXDClient(self.conf())
        step = dict(seam_helpers.STEPS)[name]
        try:
            result = step(client, ctx or {})
        except Exception as exc:
            result = exc
        self.assertEqual([], self.replay.unmatched)
        # the same requests, in the same order, as when it was recorded
        served = [k for k in self.replay.served if k[1] != '/1.0']
        self.assertEqual(_keys(recorded['exchanges']), served)
        self.assertEqual(recorded['outcome'], 'returned' if not isinstance(
            result, Exception) else 'raised %s' % type(result).__name__)
        return result

    def requests_made(self, method):
        return [r for r in self.mock.request_history if r.method == method]

    # -- host --------------------------------------------------------------

    def test_server_info(self):
        info = self.run_step('server_info')
        daemon = info['daemon']
        self.assertEqual(self.daemon.split('-')[0], daemon.server)
        self.assertEqual(self.daemon.split('-')[1], daemon.version)
        self.assertEqual('trusted', info['server']['auth'])

    def test_host_reads(self):
        reads = self.run_step('host_reads')
        self.assertIn('cpu', reads['resources'])
        self.assertEqual('dir', reads['pool']['driver'])
        self.assertIn('space', reads['pool_resources'])
        self.assertEqual(seam_helpers.PROJECT, reads['project']['name'])
        self.assertEqual('default', reads['profile']['name'])
        self.assertIn('default', reads['profile_names'])

    # -- images ------------------------------------------------------------

    def test_import_image_and_aliases(self):
        image = self.run_step('import_image', {'image': b'tarball'})
        self.assertRegex(image['fingerprint'], FINGERPRINT)
        self.assertEqual(image['fingerprint'], image['alias']['target'])
        self.assertIn(seam_helpers.ALIAS, [a['name']
                      for a in image['aliases']])
        self.assertEqual(image['fingerprint'], image['info']['fingerprint'])
        self.assertTrue(image['exists'])
        self.assertFalse(image['missing_exists'])
        self.assertIsNone(image['missing_alias'])

    def test_publish_and_delete_image(self):
        image = self.run_step('publish')
        self.assertRegex(image['fingerprint'], FINGERPRINT)
        self.assertTrue(image['exists'])
        self.assertTrue(image['gone'])
        gone = self.run_step('delete_image')
        self.assertEqual({'alias': None, 'exists': False}, gone)

    # -- instances ---------------------------------------------------------

    def test_create_and_read(self):
        created = self.run_step('create')
        record = created['record']
        self.assertEqual(seam_helpers.CONTAINER, record['name'])
        self.assertEqual('Stopped', record['status'])
        for key, value in seam_helpers.CONFIG.items():
            self.assertEqual(value, record['config'][key])
        self.assertEqual('Stopped', created['state']['status'])
        self.assertEqual([seam_helpers.CONTAINER],
                         [r['name'] for r in created['list']])
        # every project: each record says its project and profile devices
        self.assertEqual([(seam_helpers.PROJECT, seam_helpers.CONTAINER)],
                         [(r['project'], r['name']) for r in created['all']])
        self.assertIn('root', created['all'][0]['expanded_devices'])
        # the listing of every project is made without a project
        listing = [r for r in self.requests_made('GET')
                   if 'all-projects' in r.url]
        self.assertNotIn('project=', listing[0].url)

    def test_daemon_message_kept_on_refused_create(self):
        exc = self.run_step('create_refused')
        self.assertIsInstance(exc, exception.LXDOperationFailed)
        self.assertIn('Invalid CPU limit syntax', str(exc))
        self.assertIn('instance contract-bad', str(exc))

    def test_missing_instance(self):
        self.assertIsNone(self.run_step('read_missing'))
        exc = self.run_step('state_missing')
        self.assertIsInstance(exc, exception.LXDObjectNotFound)
        self.assertIn('Instance not found', str(exc))

    def test_modify_sends_the_etag(self):
        record = self.run_step('modify')
        self.assertEqual('one', record['config']['user.contract'])
        etag = [e['headers'] for e in seam_helpers.load(self.daemon, 'modify')[
            'exchanges'] if e['method'] == 'GET'][0]
        etag = {k.lower(): v for k, v in etag.items()}['etag']
        (put,) = self.requests_made('PUT')
        self.assertEqual(etag, put.headers['If-Match'])
        self.assertEqual('one', put.json()['config']['user.contract'])

    def test_modify_retries_on_412(self):
        raced = self.run_step('modify_raced')
        # the change ran again on what the other writer left
        self.assertEqual(2, len(raced['seen']))
        self.assertNotIn('user.other', raced['seen'][0])
        self.assertEqual('writer', raced['seen'][1]['user.other'])
        self.assertEqual('two', raced['record']['config']['user.contract'])
        self.assertEqual('writer', raced['record']['config']['user.other'])
        first, second = self.requests_made('PUT')
        self.assertNotEqual(first.headers['If-Match'],
                            second.headers['If-Match'])

    def test_update_and_put(self):
        record = self.run_step('update_and_put')
        self.assertEqual('yes', record['config']['user.patched'])
        self.assertEqual('yes', record['config']['user.put'])
        (patch,) = self.requests_made('PATCH')
        self.assertEqual(['config'], list(patch.json()))

    def test_start_files_console(self):
        started = self.run_step('start_and_files')
        self.assertEqual('Running', started['state']['status'])
        self.assertIsInstance(started['console'], bytes)
        push = self.requests_made('POST')[0]
        self.assertEqual(b'contract\n', push.body)
        self.assertEqual('0600', push.headers['X-LXD-mode'])
        # read back, a missing file, and a delete that finds none
        self.assertEqual(b'contract\n', started['pulled'])
        self.assertIsNone(started['absent'])
        self.assertEqual((True, False), started['deleted'])

    def test_a_file_larger_than_asked_is_not_read_whole(self):
        # the image's or the tenant's file: a sparse one of any size costs
        # them nothing, reading it whole could exhaust nova-compute
        client = self._client()
        served = []

        class Sparse(io.RawIOBase):
            """64 MiB of variables, counted as they are read."""

            def readable(self):
                return True

            def readinto(self, buffer):
                if sum(served) >= 64 * 1024 * 1024:
                    return 0
                buffer[:] = b'A' * len(buffer)
                served.append(len(buffer))
                return len(buffer)
        self.mock.get(re.compile('/files'), body=Sparse())
        exc = self.assertRaises(exception.InstanceFileTooLarge,
                                client.pull_file, 'nova-x',
                                '/etc/environment', 64 * 1024, 'why not')
        self.assertEqual('/etc/environment in instance nova-x is larger '
                         'than 65536 bytes, more than nova-compute reads of '
                         'a file the image or the tenant wrote: why not',
                         str(exc))
        # it stopped after the limit's chunk, not at the end
        self.assertLess(sum(served), 1024 * 1024)
        # within the limit: read whole
        self.mock.get(re.compile('/files'), content=b'A=1\n')
        self.assertEqual(b'A=1\n', client.pull_file(
            'nova-x', '/etc/environment', 64 * 1024, 'why not'))

    def test_daemon_message_kept_on_refused_state_change(self):
        exc = self.run_step('start_running')
        self.assertIsInstance(exc, exception.LXDOperationFailed)
        self.assertIn('already running', str(exc))
        exc = self.run_step('delete_running')
        self.assertIsInstance(exc, exception.LXDOperationFailed)
        self.assertIn('Instance is running', str(exc))

    def test_freeze(self):
        self.assertEqual({'frozen': 'Frozen', 'after': 'Running'},
                         self.run_step('freeze'))

    def test_snapshot(self):
        self.assertEqual(seam_helpers.CONTAINER,
                         self.run_step('snapshot')['name'])
        self.assertEqual(['POST', 'DELETE'], [
            r.method for r in self.mock.request_history
            if '/snapshots' in r.path])

    def test_stop_copy_rename(self):
        moved = self.run_step('stop_copy_rename')
        self.assertEqual('Running', moved['before']['status'])
        self.assertEqual('Stopped', moved['stopped'])
        self.assertEqual('contract-c2', moved['renamed']['name'])

    def test_remove(self):
        self.assertEqual({'c1': True, 'c2': True, 'again': False,
                          'left': []}, self.run_step('remove'))

    # -- custom volumes (the ephemeral disk) --------------------------------

    def test_custom_volume(self):
        volume = self.run_step('custom_volume')
        self.assertEqual({'size': '1GiB'}, volume['created']['config'])
        self.assertEqual([], volume['created']['used_by'])
        self.assertEqual({'size': '2GiB'}, volume['grown']['config'])
        self.assertEqual((True, False, None), (
            volume['deleted'], volume['again'], volume['missing']))

    # -- timeouts and cancellation -----------------------------------------

    def test_timed_out_operation_is_reported_and_logged(self):
        exc = self.run_step('operation_timeout')
        self.assertIsInstance(exc, exception.LXDOperationTimeout)
        # LXD and Incus do not allow cancelling an exec: it is left to run
        # and logged with its id, so an operator can follow it
        operation = seam_helpers.load(self.daemon, 'operation_timeout')[
            'exchanges'][0]['path']
        self.assertEqual([], self.requests_made('DELETE'))
        self.assertIn(operation.rsplit('/', 1)[-1], self.log.output)
        self.assertIn('does not allow cancelling', self.log.output)

    def test_timed_out_cancellable_operation_is_cancelled(self):
        exc = self.run_step('migration_timeout')
        self.assertIsInstance(exc, exception.LXDOperationTimeout)
        recorded = seam_helpers.load(self.daemon, 'migration_timeout')
        operation = json.loads(
            recorded['exchanges'][0]['text'])['metadata']['id']
        (cancel,) = self.requests_made('DELETE')
        self.assertEqual('/1.0/operations/%s' % operation, cancel.path)
        self.assertIn('Cancelled LXD operation %s' % operation,
                      self.log.output)

    def test_offer_cancel_and_wait(self):
        offer = self.run_step('offer_and_cancel')
        self.assertEqual(['control', 'fs'], offer['secrets'])
        # the cancelled operation's wait says so, with the daemon's status
        self.assertIsInstance(offer['wait'], exception.LXDOperationFailed)
        self.assertIn('Cancelled', str(offer['wait']))
        (cancel,) = self.requests_made('DELETE')
        self.assertEqual('/1.0/operations/%s' % offer['operation'],
                         cancel.path)

    def test_settle_operations_outlived_by_one(self):
        # Incus answers the wait with "context deadline exceeded": the
        # operation is read instead, and the seam goes on
        (operation,) = self.run_step('operations')
        self.assertEqual('Running', operation['status'])
        self.assertEqual([], self.requests_made('DELETE'))
        self.assertIn('%s (Executing command) on %s still runs after 1s; '
                      'LXD does not allow cancelling it' % (
                          operation['id'], seam_helpers.CONTAINER),
                      self.log.output)

    # -- transport ---------------------------------------------------------

    def _client(self):
        server = seam_helpers.load(self.daemon, 'server_info')['exchanges']
        self.mock.add_matcher(seam_helpers.Replay(server))
        client = lxd_client.LXDClient(self.conf())
        client.api
        return client

    def test_refused_connection_is_unreachable(self):
        client = self._client()
        self.mock.get(requests_mock.ANY,
                      exc=requests.exceptions.ConnectionError('refused'))
        exc = self.assertRaises(exception.LXDUnreachable,
                                client.get_container, 'x')
        self.assertIn(self.socket.path, str(exc))
        self.assertIn('refused', str(exc))

    def test_request_timeout(self):
        client = self._client()
        self.mock.get(requests_mock.ANY,
                      exc=requests.exceptions.ReadTimeout('slow'))
        exc = self.assertRaises(exception.LXDOperationTimeout,
                                client.list_containers)
        self.assertIn(str(seam_helpers.TIMEOUT), str(exc))


class LXD502ContractTest(ContractSteps, testtools.TestCase):
    daemon = 'lxd-5.0.2'


class Incus604ContractTest(ContractSteps, testtools.TestCase):
    daemon = 'incus-6.0.4'


class FakeContractTest(testtools.TestCase):
    """The shared fake (tests/fixtures/fake_lxd.py) keeps the same contract.

    The steps it can run (no images, files or operations) run on it in the
    scenario's order, and end as they end on both daemons. It does not
    validate config values (``create_refused``): what the daemon accepts
    is tested against the real daemons (tests/integration,
    tests/functional).
    """

    SKIPPED = {'server_info', 'host_reads', 'import_image', 'publish',
               'delete_image', 'start_and_files', 'operation_timeout',
               'operations', 'snapshot', 'create_refused',
               'migration_timeout'}

    def run_step(self, name):
        client = fake_lxd.FakeLXDClient()
        for step_name, step in seam_helpers.STEPS:
            if step_name in self.SKIPPED:
                if step_name == 'start_and_files':
                    client.change_state(seam_helpers.CONTAINER, 'start')
                continue
            try:
                result = step(client, {})
            except Exception as exc:
                result = exc
            if step_name == name:
                return result

    def outcome_of(self, name):
        result = self.run_step(name)
        outcome = 'returned' if not isinstance(result, Exception) else \
            'raised %s' % type(result).__name__
        return result, outcome

    def test_same_outcomes_as_both_daemons(self):
        for name, _step in seam_helpers.STEPS:
            if name in self.SKIPPED:
                continue
            _result, outcome = self.outcome_of(name)
            for daemon in seam_helpers.recordings():
                self.assertEqual(
                    seam_helpers.load(daemon, name)['outcome'], outcome,
                    (name, daemon))

    def test_same_results(self):
        record = self.run_step('create')['record']
        for key, value in seam_helpers.CONFIG.items():
            self.assertEqual(value, record['config'][key])
        self.assertEqual('Stopped', record['status'])
        self.assertIsNone(self.run_step('read_missing'))
        raced = self.run_step('modify_raced')
        self.assertEqual(2, len(raced['seen']))
        self.assertEqual({'user.other': 'writer', 'user.contract': 'two'}, {
            k: raced['record']['config'][k]
            for k in ('user.other', 'user.contract')})
        self.assertEqual({'frozen': 'Frozen', 'after': 'Running'},
                         self.run_step('freeze'))
        self.assertIn('Instance is running',
                      str(self.run_step('delete_running')))
        self.assertIn('already running', str(self.run_step('start_running')))
        moved = self.run_step('stop_copy_rename')
        self.assertEqual('Stopped', moved['stopped'])
        self.assertEqual('contract-c2', moved['renamed']['name'])
        self.assertEqual({'c1': True, 'c2': True, 'again': False,
                          'left': []}, self.run_step('remove'))
        offer = self.run_step('offer_and_cancel')
        self.assertIn('Cancelled', str(offer['wait']))


class ScenarioTest(testtools.TestCase):

    def test_every_step_recorded_for_both_daemons(self):
        self.assertEqual(sorted([LXD502ContractTest.daemon,
                                 Incus604ContractTest.daemon]),
                         seam_helpers.recordings())
        for daemon in seam_helpers.recordings():
            for name, _step in seam_helpers.STEPS:
                self.assertEqual(name, seam_helpers.load(daemon, name)['step'])

    def test_every_public_method_is_in_a_step(self):
        import inspect
        source = inspect.getsource(seam_helpers)
        public = [name for name, _ in inspect.getmembers(
            lxd_client.LXDClient, inspect.isfunction)
            if not name.startswith('_')]
        # not HTTP through requests (a websocket; tested in test_events and
        # tests/integration), or needing two daemons that trust each other
        # (tests/integration/test_migration.py), or an image body stream,
        # or no request at all (the last listing: ListingMemoryTest)
        elsewhere = {'open_events', 'remote', 'create_from_migration',
                     'offer_volume_migration', 'create_volume_from_migration',
                     'export_image',
                     'import_split_image', 'instance_lock_name',
                     'get_container_etag', 'listed_containers'}
        missing = [name for name in public if name not in elsewhere and
                   'client.%s(' % name not in source]
        self.assertEqual([], missing)


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
