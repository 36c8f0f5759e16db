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

"""The event watcher's decisions, with a fake daemon (no threads needed).

The real stream, reconnection and deletion are tested against the real
daemon in tests/integration/test_events.py.
"""

import threading
import time
import types

import fixtures
from nova.compute import power_state
from nova.virt import event as virtevent
import testtools

from nova_lxd_accel.container import identity
from nova_lxd_accel.instance import watcher
from tests.fixtures import fake_lxd

HOST = 'cmp1'
UUID = '0f6b5f0e-3a4e-4a43-9b49-4d1b9d8b3c11'
NAME = 'nova-' + UUID


def _record(name, status, host=HOST, uuid=UUID, project='p1'):
    config = {}
    if host:
        config['user.nova_lxd_accel.host'] = host
    if uuid:
        config['user.nova_lxd_accel.instance_uuid'] = uuid
    return {'name': name, 'status': status, 'type': 'container',
            'project': project, 'config': config}


def _status(status, **config):
    return {'status': status, 'config': config}


def _lifecycle(action, name, project='p1', **context):
    return {'type': 'lifecycle', 'project': project,
            'metadata': {'action': action,
                         'source': '/1.0/instances/%s?project=%s' % (
                             name, project),
                         'context': context}}


def _daemon(*records, unsupported=False):
    """The shared fake daemon (tests/fixtures/fake_lxd.py) holding ``records``.

    Seen by a client of project p1, the watcher's (and the records').
    """
    return fake_lxd.FakeLXDClient(*records, project='p1',
                                  events=not unsupported)


class EventParsingTest(testtools.TestCase):

    def test_lifecycle_event_names_its_instance(self):
        self.assertEqual(['c1'], watcher.event_instances(
            _lifecycle('instance-stopped', 'c1')))
        self.assertEqual(['new', 'old'], watcher.event_instances(
            _lifecycle('instance-renamed', 'new', old_name='old')))
        self.assertEqual([], watcher.event_instances(
            _lifecycle('image-created', 'c1')))

    def test_only_ended_operations_count(self):
        operation = {'type': 'operation', 'metadata': {
            'status': 'Running', 'resources': {
                'instances': ['/1.0/instances/c1?project=p1'],
                'containers': ['/1.0/containers/c1']}}}
        self.assertEqual([], watcher.event_instances(operation))
        operation['metadata']['status'] = 'Success'
        self.assertEqual(['c1'], watcher.event_instances(operation))


class WatcherTest(testtools.TestCase):

    def setUp(self):
        super(WatcherTest, self).setUp()
        self.log = self.useFixture(fixtures.FakeLogger())

    def _watcher(self, client, interval=60):
        emitted = []
        watching = watcher.LifecycleWatcher(
            client, identity.Owner(HOST, project='p1'), interval,
            emitted.append, read_timeout=0.05, min_backoff=0.05)
        self.addCleanup(watching.stop)
        return watching, emitted

    @staticmethod
    def _events(emitted):
        return [(e.get_instance_uuid(), e.get_transition()) for e in emitted]

    def test_a_change_is_read_once_and_emitted(self):
        client = _daemon(_record(NAME, 'Running'))
        watching, emitted = self._watcher(client)
        watching.resync()
        client.records[NAME]['status'] = 'Frozen'
        watching.handle(_lifecycle('instance-paused', NAME))
        self.assertEqual([(UUID, virtevent.EVENT_LIFECYCLE_PAUSED)],
                         self._events(emitted))
        self.assertEqual([NAME], client.reads)
        self.assertEqual(1, client.listings)

    def test_a_burst_reads_each_container_once(self):
        other = 'nova-' + '5d0c2c8e-7d8f-4c8a-8d57-0e4c1c2b6a01'
        client = _daemon(_record(NAME, 'Stopped'),
                         _record(other, 'Stopped',
                                 uuid='5d0c2c8e-7d8f-4c8a-8d57-0e4c1c2b6a01'))
        watching, emitted = self._watcher(client)
        watching.resync()
        client.records[NAME]['status'] = 'Running'
        stream = fake_lxd.FakeEventStream()
        # a start: its lifecycle event and its operation's, then another
        # container's event; all queued before the watcher reads
        for event in (_lifecycle('instance-started', NAME),
                      {'type': 'operation', 'project': 'p1', 'metadata': {
                          'status': 'Success', 'resources': {'instances': [
                              '/1.0/instances/%s?project=p1' % NAME]}}},
                      _lifecycle('instance-updated', other)):
            stream.events.put(event)
        burst = watching._take_burst(stream, stream.next_event(0.05))
        self.assertEqual(3, len(burst))
        watching.handle_all(burst)
        self.assertEqual([NAME, other], client.reads)
        self.assertEqual([(UUID, virtevent.EVENT_LIFECYCLE_STARTED)],
                         self._events(emitted))

    def test_a_burst_ends_when_the_stream_is_quiet(self):
        watching, _ = self._watcher(_daemon())
        stream = fake_lxd.FakeEventStream()
        first = _lifecycle('instance-started', NAME)
        self.assertEqual([first], watching._take_burst(stream, first))

    def test_foreign_containers_and_projects_send_nothing(self):
        other_uuid = '5d0c2c8e-7d8f-4c8a-8d57-0e4c1c2b6a01'
        client = _daemon(
            _record(NAME, 'Running'),
            _record('by-hand', 'Running', host=None, uuid=None),
            _record('nova-' + other_uuid, 'Running', host='cmp2',
                    uuid=other_uuid),
            # a kept original of a resize stands for nothing
            _record('nova-resize-' + UUID, 'Stopped'))
        watching, emitted = self._watcher(client)
        watching.resync()
        for name in list(client.records):
            client.records[name]['status'] = 'Stopped'
            watching.handle(_lifecycle('instance-stopped', name,
                                       project='p2'))
        self.assertEqual([], client.reads)   # other project: not even read
        for name in ('by-hand', 'nova-' + other_uuid, 'nova-resize-' + UUID):
            watching.handle(_lifecycle('instance-stopped', name))
            del client.records[name]
            watching.handle(_lifecycle('instance-deleted', name))
        self.assertEqual([], emitted)
        watching.handle(_lifecycle('instance-stopped', NAME))
        self.assertEqual([(UUID, virtevent.EVENT_LIFECYCLE_STOPPED)],
                         self._events(emitted))

    def test_deleted_container_is_stopped_once(self):
        client = _daemon(_record(NAME, 'Running'))
        watching, emitted = self._watcher(client)
        watching.resync()
        # lxc delete --force: the stop event may be read after the delete
        del client.records[NAME]
        watching.handle(_lifecycle('instance-stopped', NAME))
        watching.handle(_lifecycle('instance-deleted', NAME))
        self.assertEqual([(UUID, virtevent.EVENT_LIFECYCLE_STOPPED)],
                         self._events(emitted))
        self.assertIn('The container %s of instance %s is gone' % (
            NAME, UUID), self.log.output)

    def test_deleted_container_tells_the_gpu_gate_first(self):
        client = _daemon(_record(NAME, 'Running'))
        told = []
        emitted = []
        watching = watcher.LifecycleWatcher(
            client, identity.Owner(HOST, project='p1'), 60,
            lambda event: emitted.append((list(told), event)),
            gate=types.SimpleNamespace(note_gone=told.append))
        watching.resync()
        del client.records[NAME]
        watching.resync()            # a poll sees it gone
        self.assertEqual([NAME], told)
        # the gate knew before nova heard of it
        self.assertEqual([[NAME]], [before for before, _ in emitted])

    def test_stop_twice_at_once_is_safe(self):
        # nova's graceful shutdown and a clean-up overlap: the second stop
        # runs while the first still joins the thread
        watching, _emitted = self._watcher(_daemon())
        both_joining = threading.Barrier(2, timeout=10)
        first_done = threading.Event()

        class Thread(object):
            joins = 0

            def join(self, timeout=None):
                Thread.joins += 1
                second = Thread.joins == 2
                both_joining.wait()
                if second:
                    first_done.wait(10)

            def is_alive(self):
                return False

        watching._thread = Thread()
        errors = []

        def stop():
            try:
                watching.stop()
            except Exception as exc:
                errors.append(exc)
            finally:
                if not first_done.is_set():
                    first_done.set()

        threads = [threading.Thread(target=stop) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        self.assertEqual([], errors)
        self.assertIsNone(watching._thread)

    def test_renamed_away_is_not_gone(self):
        client = _daemon(_record(NAME, 'Stopped'))
        watching, emitted = self._watcher(client)
        watching.resync()
        client.records['nova-resize-' + UUID] = client.records.pop(NAME)
        client.records['nova-resize-' + UUID]['name'] = 'nova-resize-' + UUID
        watching.handle(_lifecycle('instance-renamed', 'nova-resize-' + UUID,
                                   old_name=NAME))
        self.assertEqual([], emitted)

    def test_resync_emits_differences(self):
        client = _daemon(_record(NAME, 'Running'))
        watching, emitted = self._watcher(client)
        watching.resync()
        del client.records[NAME]
        watching.resync()
        self.assertEqual([(UUID, virtevent.EVENT_LIFECYCLE_STOPPED)],
                         self._events(emitted))

    def _wait(self, predicate):
        deadline = time.monotonic() + 5
        while not predicate():
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.01)

    def test_no_events_api_falls_back_to_polling(self):
        client = _daemon(_record(NAME, 'Running'), unsupported=True)
        watching, emitted = self._watcher(client, interval=0.05)
        watching.start()
        self._wait(lambda: watching.mode == 'poll' and client.listings >= 1)
        client.records[NAME]['status'] = 'Stopped'
        self._wait(lambda: emitted)
        self.assertEqual([(UUID, virtevent.EVENT_LIFECYCLE_STOPPED)],
                         self._events(emitted))

    def test_polling_reports_a_deleted_container_stopped(self):
        # even when no poll saw it running (deleted right after its start)
        client = _daemon(_record(NAME, 'Stopped'), unsupported=True)
        watching, emitted = self._watcher(client)
        watching.poll_once()
        del client.records[NAME]
        watching.poll_once()
        self.assertEqual([(UUID, virtevent.EVENT_LIFECYCLE_STOPPED)],
                         self._events(emitted))
        self.assertIn('The container %s of instance %s is gone' % (
            NAME, UUID), self.log.output)

    def test_thread_follows_the_stream_and_stops_promptly(self):
        client = _daemon(_record(NAME, 'Running'))
        watching, emitted = self._watcher(client)
        watching.start()
        self._wait(lambda: watching.mode == 'events')
        client.records[NAME]['status'] = 'Stopped'
        client.stream.events.put(_lifecycle('instance-stopped', NAME))
        self._wait(lambda: emitted)
        # a lost stream: reconnect, list once more
        client.stream.close()
        self._wait(lambda: watching.connections == 2)
        self.assertEqual(2, client.listings)
        start = time.monotonic()
        watching.stop()
        self.assertLess(time.monotonic() - start, 2)
        self.assertIsNone(watching.mode)
        self.assertEqual([(UUID, virtevent.EVENT_LIFECYCLE_STOPPED)],
                         self._events(emitted))

    def test_off_starts_nothing(self):
        client = _daemon(_record(NAME, 'Running'))
        watching, _ = self._watcher(client, interval=0)
        watching.start()
        self.assertIsNone(watching._thread)


class LifecycleEventTest(testtools.TestCase):

    def test_transitions(self):
        cases = [
            (power_state.SHUTDOWN, power_state.RUNNING,
             virtevent.EVENT_LIFECYCLE_STARTED),
            (power_state.RUNNING, power_state.SHUTDOWN,
             virtevent.EVENT_LIFECYCLE_STOPPED),
            (power_state.RUNNING, power_state.PAUSED,
             virtevent.EVENT_LIFECYCLE_PAUSED),
            (power_state.PAUSED, power_state.RUNNING,
             virtevent.EVENT_LIFECYCLE_RESUMED),
            (power_state.SUSPENDED, power_state.RUNNING,
             virtevent.EVENT_LIFECYCLE_RESUMED),
            (power_state.RUNNING, power_state.SUSPENDED,
             virtevent.EVENT_LIFECYCLE_SUSPENDED),
            (power_state.RUNNING, power_state.RUNNING, None),
            (power_state.RUNNING, power_state.NOSTATE, None),
        ]
        for old, new, expected in cases:
            self.assertEqual(expected, watcher.lifecycle_event(old, new),
                             '%s -> %s' % (old, new))

    def test_only_own_containers_count(self):
        records = [
            _status('Running', **{'user.nova_lxd_accel.instance_uuid': 'a',
                                  'user.nova_lxd_accel.host': 'cmp1'}),
            _status('Stopped', **{'user.nova_lxd_accel.instance_uuid': 'b',
                                  'user.nova_lxd_accel.host': 'cmp2'}),
            _status('Running'),
            _status('Running', **{'user.nova_lxd_accel.instance_uuid': 'a',
                                  'user.nova_lxd_accel.host': 'cmp1',
                                  'user.nova_lxd_accel.rescue_of': 'x'}),
        ]
        self.assertEqual({'a': power_state.RUNNING},
                         watcher.owned_states(records, 'cmp1'))

    def test_watcher_emits_changes_after_first_look(self):
        emitted = []
        listing = [[_status('Running', **{
            'user.nova_lxd_accel.instance_uuid': 'a',
            'user.nova_lxd_accel.host': 'cmp1'})]]

        class Client(object):
            def list_containers(self):
                return listing[0]

        watching = watcher.LifecycleWatcher(
            Client(), identity.Owner('cmp1', project=None), 1, emitted.append)
        watching.poll_once()
        self.assertEqual([], emitted)
        listing[0] = [_status('Stopped', **{
            'user.nova_lxd_accel.instance_uuid': 'a',
            'user.nova_lxd_accel.host': 'cmp1'})]
        watching.poll_once()
        self.assertEqual([('a', virtevent.EVENT_LIFECYCLE_STOPPED)],
                         [(e.get_instance_uuid(), e.get_transition())
                          for e in emitted])
