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

"""Every HTTP request one driver client sends to its daemon, recorded.

The pylxd client's ``requests`` session is shared by every node of its
API tree, so wrapping the session's ``request`` sees each request the
driver makes (reads, writes, operation waits), whatever method of the
seam sent it. Nothing is answered here: the daemon answers.
"""

import threading
import time
from urllib import parse

import fixtures


class DaemonRequests(fixtures.Fixture):
    """Records ``(method, path)`` of the requests of one ``LXDClient``.

    Each is timed too (:meth:`take_timed`): the daemon's part of a call,
    apart from the driver's own.
    """

    def __init__(self, client):
        super(DaemonRequests, self).__init__()
        self._client = client
        self._lock = threading.Lock()
        # [(method, path), seconds] each; seconds None until answered
        self._recorded = []

    @property
    def requests(self):
        """The requests recorded so far, in order."""
        with self._lock:
            return [request for request, _ in self._recorded]

    def _setUp(self):
        session = self._client.api.session
        send = session.request

        def request(method, url, *args, **kwargs):
            entry = [(method.upper(), _path(url)), None]
            with self._lock:
                self._recorded.append(entry)
            start = time.perf_counter()
            try:
                return send(method, url, *args, **kwargs)
            finally:
                entry[1] = time.perf_counter() - start

        session.request = request
        self.addCleanup(vars(session).pop, 'request', None)

    def take(self):
        """The requests recorded since the last take (and forget them)."""
        return [request for request, _ in self.take_timed()]

    def take_timed(self):
        """``((method, path), seconds)`` of each request since the last take.

        They are forgotten, as by :meth:`take`. A request still waiting for
        its answer has ``None`` seconds.
        """
        with self._lock:
            taken, self._recorded = self._recorded, []
        return [tuple(entry) for entry in taken]


def _path(url):
    """``/1.0/...`` of a request's URL (unix socket or https)."""
    path = parse.urlsplit(url).path
    return path[path.index('/1.0'):] if '/1.0' in path else path
