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

"""Tests of nova_lxd_accel.client.events: the daemon's event websocket.

The daemon's side is played over a real socket pair (or a listening unix
socket for :meth:`EventsClient.open_events`): it answers the handshake as
RFC 6455 says and writes frames built here, independently of the code
under test. The stream against a real daemon is in
tests/integration/test_events.py.
"""

import base64
import hashlib
import json
import os
import socket
import struct
import threading

import fixtures
from oslo_config import fixture as config_fixture
from requests_mock.contrib import fixture as requests_mock_fixture
import testtools

from nova_lxd_accel.client import events
from nova_lxd_accel import exception
from tests.fixtures import recorded_daemon
from tests.fixtures import seam_helpers

GUID = b'258EAFA5-E914-47DA-95CA-C5AB0DC85B11'
ENDPOINT = '/var/lib/incus/unix.socket'
STARTED = {'type': 'lifecycle', 'timestamp': '2026-11-23T23:34:15Z',
           'metadata': {'action': 'instance-started',
                        'source': '/1.0/instances/nova-1', 'context': {}},
           'location': 'none', 'project': 'seam-contract'}


def frame(opcode, payload, fin=True, mask=None):
    """One websocket frame as a server (or, masked, a client) sends it."""
    head = bytes([(0x80 if fin else 0) | opcode])
    flag = 0x80 if mask else 0
    if len(payload) < 126:
        head += bytes([flag | len(payload)])
    elif len(payload) < 65536:
        head += bytes([flag | 126]) + struct.pack('!H', len(payload))
    else:
        head += bytes([flag | 127]) + struct.pack('!Q', len(payload))
    if mask:
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        head += mask
    return head + payload


def text(event):
    return frame(0x1, json.dumps(event).encode())


def read_request(sock):
    data = b''
    while b'\r\n\r\n' not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.decode('latin-1')


def accept_for(request):
    key = [line.split(':', 1)[1].strip() for line in request.split('\r\n')
           if line.lower().startswith('sec-websocket-key:')][0]
    return base64.b64encode(hashlib.sha1(key.encode() + GUID).digest())


class Daemon(object):
    """The daemon's end of one connection, answering in a thread."""

    def __init__(self, sock, answer=None, after=b''):
        self.sock = sock
        self.request = None
        self._answer = answer
        self._after = after
        self._thread = threading.Thread(target=self._serve)
        self._thread.start()

    def _serve(self):
        self.request = read_request(self.sock)
        if self._answer is None:
            answer = (b'HTTP/1.1 101 Switching Protocols\r\n'
                      b'Upgrade: websocket\r\nConnection: Upgrade\r\n'
                      b'Sec-WebSocket-Accept: ' + accept_for(self.request) +
                      b'\r\n\r\n')
        else:
            answer = self._answer
        self.sock.sendall(answer + self._after)

    def join(self):
        self._thread.join(10)


class HandshakeTest(testtools.TestCase):

    def setUp(self):
        super(HandshakeTest, self).setUp()
        self.ours, self.theirs = socket.socketpair()
        self.theirs.settimeout(5)   # a test that fails must not hang
        self.addCleanup(self.ours.close)
        self.addCleanup(self.theirs.close)

    def handshake(self, **kwargs):
        daemon = Daemon(self.theirs, **kwargs)
        try:
            return events.EventStream.handshake(
                self.ours, 'lxd', '/1.0/events?type=lifecycle', ENDPOINT, 5)
        finally:
            daemon.join()
            self.request = daemon.request

    def test_an_event_sent_with_the_answer_is_not_lost(self):
        stream = self.handshake(after=text(STARTED))
        self.assertTrue(self.request.startswith(
            'GET /1.0/events?type=lifecycle HTTP/1.1\r\n'))
        self.assertIn('\r\nSec-WebSocket-Version: 13\r\n', self.request)
        self.assertIn('\r\nUpgrade: websocket\r\n', self.request)
        self.assertEqual(STARTED, stream.next_event(1))

    def test_a_wrong_accept_key_is_refused(self):
        error = self.assertRaises(
            exception.LXDOperationFailed, self.handshake,
            answer=b'HTTP/1.1 101 Switching Protocols\r\n'
                   b'Upgrade: websocket\r\nConnection: Upgrade\r\n'
                   b'Sec-WebSocket-Accept: bm90IHRoZSBrZXk=\r\n\r\n')
        self.assertIn('bad Sec-WebSocket-Accept', str(error))

    def test_a_daemon_without_the_events_api(self):
        error = self.assertRaises(
            exception.EventsUnsupported, self.handshake,
            answer=b'HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\n'
                   b'not found')
        self.assertIn(ENDPOINT, str(error))
        self.assertIn('HTTP/1.1 404 Not Found (not found)', str(error))
        self.assertIn('polled instead', str(error))

    def test_a_refused_subscription_keeps_the_daemon_message(self):
        body = json.dumps({'type': 'error', 'error': 'not authorized',
                           'error_code': 403}).encode()
        error = self.assertRaises(
            exception.LXDOperationFailed, self.handshake,
            answer=b'HTTP/1.1 403 Forbidden\r\n\r\n' + body)
        self.assertNotIsInstance(error, exception.EventsUnsupported)
        self.assertIn('subscribe to events', str(error))
        self.assertIn('not authorized', str(error))

    def test_a_daemon_closing_before_its_answer_is_unreachable(self):
        self.theirs.shutdown(socket.SHUT_WR)
        error = self.assertRaises(
            exception.LXDUnreachable, events.EventStream.handshake,
            self.ours, 'lxd', '/1.0/events', ENDPOINT, 5)
        self.assertIn('Incus daemon at %s' % ENDPOINT, str(error))
        self.assertIn('events: the daemon closed the connection',
                      str(error))


class NextEventTest(testtools.TestCase):

    def setUp(self):
        super(NextEventTest, self).setUp()
        self.ours, self.theirs = socket.socketpair()
        self.theirs.settimeout(5)   # a test that fails must not hang
        self.addCleanup(self.ours.close)
        self.addCleanup(self.theirs.close)
        self.stream = events.EventStream(self.ours, ENDPOINT)

    def test_nothing_within_the_timeout_is_none(self):
        self.assertIsNone(self.stream.next_event(0.01))

    def test_a_frame_split_across_reads_waits_for_its_end(self):
        data = text(STARTED)
        self.theirs.sendall(data[:7])
        self.assertIsNone(self.stream.next_event(0.01))
        self.theirs.sendall(data[7:])
        self.assertEqual(STARTED, self.stream.next_event(1))

    def test_fragments_and_long_lengths_make_one_event(self):
        event = dict(STARTED, metadata=dict(
            STARTED['metadata'], context={'output': 'x' * 70000}))
        data = json.dumps(event).encode()
        stream = events.EventStream(self.ours, ENDPOINT, frame(
            0x1, data[:200], fin=False, mask=b'\x01\x02\x03\x04') +
            frame(0x0, data[200:]))
        self.assertEqual(event, stream.next_event(1))

    def test_a_ping_is_answered_with_its_payload(self):
        self.theirs.sendall(frame(0x9, b'alive?') + text(STARTED))
        self.assertEqual(STARTED, self.stream.next_event(1))
        pong = self.theirs.recv(4096)
        self.assertEqual(0x8A, pong[0])
        self.assertEqual(0x80 | 6, pong[1])
        mask, payload = pong[2:6], pong[6:]
        self.assertEqual(b'alive?', bytes(
            b ^ mask[i % 4] for i, b in enumerate(payload)))

    def test_what_is_not_a_json_event_is_skipped(self):
        self.theirs.sendall(frame(0xA, b'pong') + frame(0x1, b'{not json') +
                            text(STARTED))
        self.assertEqual(STARTED, self.stream.next_event(1))

    def test_the_daemon_closing_the_stream_ends_it(self):
        self.theirs.sendall(frame(0x8, struct.pack('!H', 1001)))
        error = self.assertRaises(exception.EventStreamLost,
                                  self.stream.next_event, 1)
        self.assertIn('the daemon closed the stream', str(error))
        self.assertIsInstance(error, exception.LXDUnreachable)

    def test_end_of_file_ends_the_stream(self):
        self.theirs.close()
        error = self.assertRaises(exception.EventStreamLost,
                                  self.stream.next_event, 1)
        self.assertIn('the daemon closed the connection', str(error))

    def test_a_closed_stream_reads_nothing_more(self):
        self.theirs.sendall(text(STARTED))
        self.stream.close()
        self.stream.close()     # again: no error
        error = self.assertRaises(exception.EventStreamLost,
                                  self.stream.next_event, 1)
        self.assertIn(': closed', str(error))


class OpenEventsTest(testtools.TestCase):

    def setUp(self):
        super(OpenEventsTest, self).setUp()
        # the connection's GET /1.0; the websocket is a real socket
        self.mock = self.useFixture(requests_mock_fixture.Fixture())
        self.mock.get('/1.0', json=recorded_daemon.sample(
            'incus-6.0.4-bookworm-backports.json'))

    def conf(self, path):
        conf = seam_helpers.make_conf(path)
        self.useFixture(config_fixture.Config(conf))
        return conf

    def test_subscribes_to_the_project_events_on_the_socket(self):
        # under /tmp: unix socket paths are limited to 107 bytes
        directory = self.useFixture(fixtures.TempDir(rootdir='/tmp')).path
        path = os.path.join(directory, 'unix.socket')
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(listener.close)
        listener.bind(path)
        listener.listen(1)
        daemons = []

        def serve():
            conn, _ = listener.accept()
            self.addCleanup(conn.close)
            daemons.append(Daemon(conn, after=text(STARTED)))

        thread = threading.Thread(target=serve)
        thread.start()
        stream = events.EventsClient(self.conf(path)).open_events()
        self.addCleanup(stream.close)
        thread.join(10)
        daemons[0].join()
        self.assertEqual('GET /1.0/events?type=lifecycle%2Coperation'
                         '&project=seam-contract HTTP/1.1',
                         daemons[0].request.split('\r\n')[0])
        self.assertEqual(STARTED, stream.next_event(1))

    def test_a_socket_nobody_listens_on_is_unreachable(self):
        socket_file = seam_helpers.SocketFile()
        self.addCleanup(socket_file.close)
        client = events.EventsClient(self.conf(socket_file.path))
        error = self.assertRaises(exception.LXDUnreachable,
                                  client.open_events)
        self.assertIn(socket_file.path, str(error))
        self.assertIn('events: ', str(error))
