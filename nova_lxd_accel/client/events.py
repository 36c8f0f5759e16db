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

"""The daemon's event websocket (``/1.0/events``), for the watcher
(nova_lxd_accel.instance.watcher).

:class:`EventsClient` opens the subscription on the connection's endpoint
(its unix socket, or TLS with the client's certificate and pinning);
:class:`EventStream` reads it.
"""

import base64
import hashlib
import json
import os
import socket
import ssl
import struct
import time
from urllib import parse

from oslo_log import log as logging

from nova_lxd_accel.client import connection
from nova_lxd_accel import exception

LOG = logging.getLogger(__name__)


class EventStream(object):
    """One subscription to LXD's (or Incus's) event websocket.

    A minimal RFC 6455 client over a plain or TLS socket: text frames are
    events (JSON), pings are answered, a close frame or end of file is the
    end of the stream. :meth:`next_event` waits at most its timeout, so the
    reading thread can stop promptly whichever threading model nova uses.
    """

    _GUID = b'258EAFA5-E914-47DA-95CA-C5AB0DC85B11'

    def __init__(self, sock, endpoint, data=b''):
        self._sock = sock
        self._endpoint = endpoint
        self._buf = data
        self._fragments = []
        self._closed = False

    @classmethod
    def handshake(cls, sock, host, resource, endpoint, timeout):
        key = base64.b64encode(os.urandom(16))
        request = ('GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\n'
                   'Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n'
                   'Sec-WebSocket-Version: 13\r\n\r\n'
                   % (resource, host, key.decode()))
        try:
            sock.settimeout(timeout)
            sock.sendall(request.encode())
            data = b''
            while b'\r\n\r\n' not in data:
                chunk = sock.recv(4096)
                if not chunk:
                    raise OSError('the daemon closed the connection')
                data += chunk
                if len(data) > 65536:
                    raise OSError('no end to the handshake answer')
        except (OSError, EOFError) as exc:
            sock.close()
            raise connection.unreachable(endpoint, 'events: %s' % (
                exc or type(exc).__name__))
        head, rest = data.split(b'\r\n\r\n', 1)
        lines = head.decode('latin-1').split('\r\n')
        try:
            status = int(lines[0].split()[1])
        except (IndexError, ValueError):
            status = 0
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(':')
            headers[name.strip().lower()] = value.strip()
        if status != 101:
            sock.close()
            reason = '%s (%s)' % (lines[0], rest[:200].decode(
                'utf-8', 'replace').strip())
            if status in (404, 405, 501):
                raise exception.EventsUnsupported(endpoint=endpoint,
                                                  reason=reason)
            raise exception.LXDOperationFailed(
                action='subscribe to', target='events', reason=reason)
        accept = base64.b64encode(hashlib.sha1(key + cls._GUID).digest())
        if headers.get('sec-websocket-accept', '').encode() != accept:
            sock.close()
            raise exception.LXDOperationFailed(
                action='subscribe to', target='events',
                reason='bad Sec-WebSocket-Accept in the handshake answer')
        return cls(sock, endpoint, rest)

    def close(self):
        """End the subscription (from any thread); idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()

    def _lost(self, reason):
        self.close()
        return exception.EventStreamLost(endpoint=self._endpoint,
                                         reason=reason)

    def _frame(self):
        """``(opcode, fin, payload)`` of a whole buffered frame, or None."""
        buf = self._buf
        if len(buf) < 2:
            return None
        fin, opcode = buf[0] & 0x80, buf[0] & 0x0f
        masked, length = buf[1] & 0x80, buf[1] & 0x7f
        offset = 2
        if length == 126:
            if len(buf) < 4:
                return None
            length = struct.unpack('!H', buf[2:4])[0]
            offset = 4
        elif length == 127:
            if len(buf) < 10:
                return None
            length = struct.unpack('!Q', buf[2:10])[0]
            offset = 10
        mask = b''
        if masked:
            if len(buf) < offset + 4:
                return None
            mask = buf[offset:offset + 4]
            offset += 4
        if len(buf) < offset + length:
            return None
        payload = buf[offset:offset + length]
        if mask:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self._buf = buf[offset + length:]
        return opcode, bool(fin), payload

    def _send(self, opcode, payload):
        mask = os.urandom(4)
        header = bytes([0x80 | opcode, 0x80 | len(payload)]) + mask
        self._sock.sendall(header + bytes(
            b ^ mask[i % 4] for i, b in enumerate(payload)))

    def next_event(self, timeout):
        """The next event (a dict), or None if none came within timeout.

        :raises EventStreamLost: the stream ended (daemon restart, closed).
        """
        deadline = time.monotonic() + timeout
        while True:
            if self._closed:
                raise self._lost('closed')
            frame = self._frame()
            if frame is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                try:
                    self._sock.settimeout(remaining)
                    chunk = self._sock.recv(65536)
                except socket.timeout:
                    return None
                except (OSError, EOFError) as exc:
                    # EOFError: closed by close() under eventlet
                    raise self._lost(str(exc) or type(exc).__name__)
                if not chunk:
                    raise self._lost('the daemon closed the connection')
                self._buf += chunk
                continue
            opcode, fin, payload = frame
            if opcode == 0x8:
                raise self._lost('the daemon closed the stream')
            if opcode == 0x9:
                try:
                    self._send(0xA, payload[:125])
                except (OSError, EOFError) as exc:
                    raise self._lost(str(exc) or type(exc).__name__)
                continue
            if opcode not in (0x0, 0x1, 0x2):
                continue
            self._fragments.append(payload)
            if not fin:
                continue
            data, self._fragments = b''.join(self._fragments), []
            try:
                return json.loads(data.decode('utf-8'))
            except ValueError:
                LOG.debug('Ignoring an event that is not JSON: %r',
                          data[:200])


class EventsClient(connection.Connection):
    """The event subscription of :class:`~nova_lxd_accel.client.LXDClient`."""

    def open_events(self, types=('lifecycle', 'operation'), timeout=None):
        """Subscribe to the daemon's event websocket (``/1.0/events``).

        Only events of the configured project are asked for.

        :returns: an :class:`EventStream`; close it when done.
        :raises EventsUnsupported: the daemon has no events API.
        :raises LXDUnreachable: the daemon cannot be reached.
        """
        self.api  # connect (and discover the socket) first
        timeout = timeout or self._conf.lxd.timeout
        endpoint = self.endpoint
        query = parse.urlencode({'type': ','.join(types),
                                 'project': self._conf.lxd.project})
        try:
            sock, host = self._events_socket(endpoint, timeout)
        except OSError as exc:   # ssl.SSLError included
            daemon = self._daemon
            raise connection.unreachable(
                endpoint, 'events: %s' % (exc or 'refused'),
                daemon.server if daemon else None)
        return EventStream.handshake(sock, host, '/1.0/events?' + query,
                                     endpoint, timeout)

    def _events_socket(self, endpoint, timeout):
        """A connected (TLS for https) socket to the daemon, and its host."""
        if endpoint.startswith('/'):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            try:
                sock.connect(endpoint)
            except OSError:
                sock.close()
                raise
            return sock, 'lxd'
        url = parse.urlsplit(endpoint)
        verify = self._verify()
        context = ssl.create_default_context()
        if verify is not True:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        cert, key = self._events_client_cert()
        if cert:
            context.load_cert_chain(cert, key)
        raw = socket.create_connection((url.hostname, url.port or 8443),
                                       timeout=timeout)
        try:
            sock = context.wrap_socket(raw, server_hostname=url.hostname)
            if isinstance(verify, str):
                with open(verify) as handle:
                    pinned = ssl.PEM_cert_to_DER_cert(handle.read())
                if sock.getpeercert(binary_form=True) != pinned:
                    raise ssl.SSLError('the daemon\'s certificate is not '
                                       'the pinned one (%s)' % verify)
        except Exception:
            raw.close()
            raise
        return sock, url.netloc

    def _events_client_cert(self):
        lxd_conf = self._conf.lxd
        if lxd_conf.client_cert or lxd_conf.client_key:
            return lxd_conf.client_cert, lxd_conf.client_key
        return None, None
