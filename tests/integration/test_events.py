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

"""Lifecycle events from the daemon's event stream, on the real daemon.

The poll interval is set to a minute, so only the event stream can bring
a change within the few seconds each test waits; the number of container
listings is counted (one per connection to the stream).
"""

import os
import socket
import threading
import time

import fixtures
from nova.virt import driver as virt_driver
from nova.virt import event as virtevent

from tests.fixtures import lxd_fixtures
from tests.integration import base

STOPPED = virtevent.EVENT_LIFECYCLE_STOPPED
STARTED = virtevent.EVENT_LIFECYCLE_STARTED
PAUSED = virtevent.EVENT_LIFECYCLE_PAUSED
RESUMED = virtevent.EVENT_LIFECYCLE_RESUMED
WAIT = 10


class CuttableRelay(fixtures.Fixture):
    """A unix socket relaying byte for byte to the daemon's own.

    :meth:`cut` drops every relayed connection (the event stream ends as
    in a daemon restart) and refuses new ones until :meth:`restore`.
    """

    def __init__(self, upstream):
        super(CuttableRelay, self).__init__()
        self.upstream = upstream
        self._refusing = False
        self._stopped = False
        self._lock = threading.Lock()
        self._sockets = set()

    def _setUp(self):
        directory = self.useFixture(fixtures.TempDir()).path
        self.path = os.path.join(directory, 'relay.socket')
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.path)
        self._server.listen(32)
        self._server.settimeout(0.2)
        thread = threading.Thread(target=self._accept, daemon=True)
        thread.start()
        self.addCleanup(self._stop, thread)

    def _stop(self, thread):
        self._stopped = True
        self.cut()
        thread.join(5)
        self._server.close()

    def _accept(self):
        while not self._stopped:
            try:
                conn, _ = self._server.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            if self._refusing:
                conn.close()
                continue
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(self.upstream)
            except OSError:
                conn.close()
                upstream.close()
                continue
            with self._lock:
                self._sockets.update((conn, upstream))
            for src, dst in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(src, dst),
                                 daemon=True).start()

    def _pump(self, src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except (OSError, EOFError):   # EOFError: closed, under eventlet
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self):
        self._refusing = True
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def restore(self):
        self._refusing = False


class EventsTestBase(base.DriverTestCase):

    def setUp(self):
        super(EventsTestBase, self).setUp()
        self.received = []
        self.listings = 0

    def watch(self, driver=None):
        """Start the (event) watcher of a driver; count its listings."""
        driver = driver or self.driver
        self.flags(lifecycle_poll_interval=60, group='lxd')
        client = driver._parts.client
        list_containers = client.list_containers

        def counting():
            # the watcher's own listings (init_host lists too)
            if threading.current_thread().name.startswith('lxd-lifecycle'):
                self.listings += 1
            return list_containers()

        client.list_containers = counting
        driver.register_event_listener(self.received.append)
        driver.init_host(self.host)
        watcher = driver._parts.host.watcher
        self.wait_for(lambda: watcher.mode == 'events' and
                      watcher.connections >= 1, 'the subscription')
        self.assertEqual(1, self.listings)
        return watcher

    def wait_for(self, predicate, what, timeout=WAIT):
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                self.fail('%s did not come within %ss; events: %s' % (
                    what, timeout, self.events()))
            time.sleep(0.05)

    def events(self):
        return [(event.get_instance_uuid(), event.get_transition())
                for event in list(self.received)]

    def expect(self, events, timeout=WAIT, ordered=True):
        """Wait until exactly these events were received."""
        self.wait_for(lambda: len(self.received) >= len(events),
                      'events %s' % (events,), timeout)
        time.sleep(0.3)   # nothing more follows
        if ordered:
            self.assertEqual(events, self.events())
        else:
            self.assertEqual(sorted(events), sorted(self.events()))
        del self.received[:]

    def spawn(self, image):
        instance = self.make_instance()
        self.driver.spawn(self.context, instance, image, [], None, {})
        return instance

    def change(self, client, name, action):
        node = client.api.instances[name]
        body = {'action': action}
        if action == 'stop':
            body['force'] = True
        self.project._wait(node.state.put(json=body))

    def delete(self, client, name):
        self.project._wait(client.api.instances[name].delete())


class LifecycleEventsTest(EventsTestBase):

    def test_outside_changes_reach_nova_as_events(self):
        image = self.tiny_image()
        instance = self.spawn(image)
        name = self.container_name(instance)
        uuid = instance.uuid
        self.watch()
        client = self.project.client
        for action, event in (('freeze', PAUSED), ('unfreeze', RESUMED),
                              ('stop', STOPPED), ('start', STARTED)):
            self.change(client, name, action)
            self.expect([(uuid, event)])
        # No periodic listing: the one after subscribing.
        self.assertEqual(1, self.listings)

    def test_container_deleted_outside_is_reported_stopped(self):
        # Nova's periodic sync ignores an instance whose container is gone
        # (NOSTATE), so the event is what moves the server to SHUTOFF.
        instance = self.spawn(self.tiny_image())
        name = self.container_name(instance)
        self.watch()
        # What `lxc delete --force` does (stop, then delete), done before
        # the watcher reads the container again: it finds it gone.
        gate = threading.Event()
        client = self.driver._parts.client
        get_container = client.get_container

        def gated(name):
            gate.wait(WAIT)
            return get_container(name)

        client.get_container = gated
        self.change(self.project.client, name, 'stop')
        self.delete(self.project.client, name)
        gate.set()
        self.expect([(instance.uuid, STOPPED)])
        self.assertIn('The container %s of instance %s is gone' % (
            name, instance.uuid), self.stdlog.logger.output)
        self.assertEqual(1, self.listings)
        # Nova then stops the server: with the container gone that is a
        # logged no-op, not ContainerNotFound (which kept it ACTIVE).
        self.driver.power_off(instance, timeout=0)
        self.assertIn('The container %s is gone from the daemon' % name,
                      self.stdlog.logger.output)

    def test_foreign_containers_send_nothing(self):
        image = self.tiny_image()
        instance = self.spawn(image)
        alias = 'nova-image-%s' % image.id
        client = self.project.client
        # In our project: made by hand, and one of another nova host.
        other_uuid = '7a6e1bca-7d39-4c55-a3c8-6e5bd6e5c1a0'
        foreign = {'hand-made': {},
                   'nova-' + other_uuid: {
                       'user.nova_lxd_accel.host': 'elsewhere',
                       'user.nova_lxd_accel.instance_uuid': other_uuid}}
        for cname, config in foreign.items():
            self.project._wait(client.api.instances.post(json={
                'name': cname, 'type': 'container', 'config': config,
                'source': {'type': 'image', 'alias': alias}}))
        # Another project, with a container claiming to be ours.
        other = self.useFixture(lxd_fixtures.LXDProject('it-other'))
        other._wait(other.client.api.images.post(
            data=lxd_fixtures.tiny_image_bytes(other.name)))
        fingerprint = other.client.api.images.get().json()[
            'metadata'][0].rsplit('/', 1)[-1]
        other._wait(other.client.api.instances.post(json={
            'name': self.container_name(instance), 'type': 'container',
            'config': {'user.nova_lxd_accel.host': self.host,
                       'user.nova_lxd_accel.instance_uuid': instance.uuid},
            'source': {'type': 'image', 'fingerprint': fingerprint}}))
        self.watch()
        for action in ('start', 'stop'):
            for cname in foreign:
                self.change(client, cname, action)
            self.change(other.client, self.container_name(instance), action)
        # Ours last: its event proves the others' came and went.
        self.change(client, self.container_name(instance), 'stop')
        self.expect([(instance.uuid, STOPPED)])


class ReconnectTest(EventsTestBase):

    def test_stream_cut_reconnects_and_resyncs(self):
        relay = self.useFixture(CuttableRelay(lxd_fixtures.lxd_socket()))
        image = self.tiny_image()
        stopped, deleted, later = (self.spawn(image) for _ in range(3))
        self.flags(endpoint=relay.path, group='lxd')
        watching = virt_driver.load_compute_driver(None,
                                                   'lxd_accel.LXDDriver')
        self.addCleanup(watching.cleanup_host, self.host)
        watcher = self.watch(watching)
        client = self.project.client
        relay.cut()      # as the daemon restarting
        self.change(client, self.container_name(stopped), 'stop')
        self.change(client, self.container_name(deleted), 'stop')
        self.delete(client, self.container_name(deleted))
        time.sleep(1.5)  # a few failed attempts, with backoff
        self.assertEqual([], self.events())
        self.assertEqual(1, watcher.connections)
        relay.restore()
        # One listing after reconnecting; its differences are emitted.
        self.wait_for(lambda: watcher.connections == 2, 'the reconnection')
        self.expect([(stopped.uuid, STOPPED), (deleted.uuid, STOPPED)],
                    ordered=False)
        self.assertEqual(2, self.listings)
        self.assertIn('is gone', self.stdlog.logger.output)
        # and the new stream carries events again
        self.change(client, self.container_name(later), 'freeze')
        self.expect([(later.uuid, PAUSED)])
        self.assertEqual(2, self.listings)
        watching.cleanup_host(self.host)
        self.assertIsNone(watching._parts.host.watcher)
