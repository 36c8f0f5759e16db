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

"""A daemon socket answering ``GET /1.0`` with a recorded answer.

Discovery and identity read nothing else, so a recorded answer of a real
daemon (``tests/unit/samples/daemons``) stands for a daemon that cannot run
here (LXD 6 from the snap) or a second one on the same host. Every other
request gets LXD's 404 error. It runs in a child process (``python -m
tests.recorded_daemon``), so it works the same whether the test process
runs on eventlet or native threads; the paths it was asked for are
appended to a log file (:attr:`RecordedDaemon.requests`).
"""

import argparse
import http.server
import json
import os
import shutil
import socket
import socketserver
import subprocess
import sys
import tempfile
import time

import fixtures

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(REPO_ROOT, 'tests', 'unit', 'samples', 'daemons')


def sample(name):
    with open(os.path.join(SAMPLES, name)) as handle:
        return json.load(handle)


class RecordedDaemon(fixtures.Fixture):
    """Serve a recorded ``GET /1.0`` (a sample name, or ``answer``)."""

    def __init__(self, name, directory=None, answer=None):
        super(RecordedDaemon, self).__init__()
        self.answer = answer if answer is not None else sample(name)
        self.directory = directory

    def _setUp(self):
        if self.directory is None:
            # short: unix socket paths are limited to 107 bytes
            self.directory = tempfile.mkdtemp(prefix='dmn-', dir='/tmp')
            self.addCleanup(shutil.rmtree, self.directory, True)
        self.socket_path = os.path.join(self.directory, 'unix.socket')
        state = tempfile.mkdtemp(prefix='dmn-state-', dir='/tmp')
        self.addCleanup(shutil.rmtree, state, True)
        answer_file = os.path.join(state, 'answer.json')
        self.log_file = os.path.join(state, 'requests.log')
        with open(answer_file, 'w') as f:
            json.dump(self.answer, f)
        self._process = subprocess.Popen(
            [sys.executable, '-m', 'tests.recorded_daemon', '--socket',
             self.socket_path, '--answer', answer_file, '--log',
             self.log_file], cwd=REPO_ROOT)
        self.addCleanup(self._stop)
        deadline = time.monotonic() + 30
        while not self._listening():
            if self._process.poll() is not None or \
                    time.monotonic() > deadline:
                raise RuntimeError('the recorded daemon did not start')
            time.sleep(0.02)

    def _listening(self):
        # the socket file appears at bind(), before listen()
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(self.socket_path)
        except OSError:
            return False
        finally:
            probe.close()
        return True

    def _stop(self):
        self._process.terminate()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    @property
    def requests(self):
        """Paths (with query) of the requests served so far."""
        if not os.path.exists(self.log_file):
            return []
        with open(self.log_file) as f:
            return f.read().splitlines()


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--socket', required=True)
    parser.add_argument('--answer', required=True)
    parser.add_argument('--log', required=True)
    args = parser.parse_args(argv)
    with open(args.answer) as f:
        answer = json.load(f)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = 'HTTP/1.1'

        def log_message(self, *unused):
            pass

        def do_GET(self):
            with open(args.log, 'a') as log:
                log.write(self.path + '\n')
            if self.path.split('?')[0].rstrip('/') == '/1.0':
                status, body = 200, answer
            else:
                status, body = 404, {'type': 'error', 'error': 'not found',
                                     'error_code': 404, 'metadata': None}
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header('Content-Type', 'application/json')
            self.send_header('Content-Length', str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = _Server(args.socket, Handler)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()


if __name__ == '__main__':
    main()
