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

"""What the benchmarks share.

Any Python 3, standard library only at import: the benchmarks that re-run
themselves inside the sandbox venv (``--measure``) import this before they
do; openstacksdk, Placement and requests are imported only by the
functions that need them.
"""

import argparse
import json
import os
import signal
import socketserver
import subprocess
import threading
import time
import uuid
from wsgiref import simple_server


# --- orchestration (any Python 3, stdlib only) ------------------------------

def orchestrate_or_measure(parser, argv, orchestrate, measure):
    """Parse ``argv`` and run one of the benchmark's two halves.

    ``measure(args)`` runs for the hidden ``--measure`` (added here): the
    half that :func:`measure_in_venv` starts inside the sandbox venv;
    ``orchestrate(args)`` otherwise.

    :returns: what the half returned (the exit status).
    """
    parser.add_argument('--measure', action='store_true',
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        return measure(args)
    return orchestrate(args)


def measure_in_venv(sandbox_dir, script, iterations, *extra):
    """Run ``script --measure`` with the sandbox venv's Python.

    :param extra: more arguments for the measuring half (its own options).
    :returns: the JSON document on the last line of its standard output.
    """
    venv_python = os.path.join(sandbox_dir, 'venv', 'bin', 'python')
    out = subprocess.run(
        [venv_python, os.path.abspath(script), '--measure',
         '--iterations', str(iterations)] + list(extra),
        check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# --- measurements (inside the sandbox venv) ---------------------------------

def connect(sandbox_dir):
    """An openstacksdk connection to the sandbox cloud."""
    import openstack

    os.environ.setdefault('OS_CLIENT_CONFIG_FILE',
                          os.path.join(sandbox_dir, 'clouds.yaml'))
    return openstack.connect(cloud='sandbox')


def wait(predicate, timeout=180.0, interval=0.05):
    """Poll ``predicate`` until it returns something true, and return that.

    :raises RuntimeError: after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(interval)
    raise RuntimeError('timed out after %ss' % timeout)


def server_gone(conn, server_id):
    """Whether the Compute API answers 404 for the server."""
    import openstack.exceptions

    try:
        conn.compute.get_server(server_id)
    except openstack.exceptions.NotFoundException:
        return True
    return False


# --- a real Placement (Placement's own WSGI application; its venv) ----------

#: the microversion the benches write to Placement at (as Nova 2023.1+
#: does: consumer generations and types)
PLACEMENT_VERSION = 'placement 1.39'


def start_placement(db_path, **placement_options):
    """Placement's configuration and schema on a sqlite file, set up.

    Configured as Placement's own ``PlacementFixture`` configures it
    (noauth2), with ``placement_options`` in its ``[placement]`` group
    (``max_allocation_candidates=1000``, say).

    :returns: (the fixture, for ``cleanUp``; Placement's WSGI application).
    """
    from placement import deploy
    from placement.tests.functional.fixtures import (
        placement as placement_fixture)

    class _OnAFile(placement_fixture.PlacementFixture):

        def _configure_placement(self, conf_fixture):
            # a file, not sqlite://: the server answers from several
            # threads, and from forked workers
            conf_fixture.config(connection='sqlite:///%s' % db_path,
                                group='placement_database')
            if placement_options:
                conf_fixture.config(group='placement', **placement_options)

    fixture = _OnAFile(use_intercept=False)
    fixture.setUp()
    return fixture, deploy.loadapp(fixture.conf_fixture.conf)


class _ThreadingServer(socketserver.ThreadingMixIn,
                       simple_server.WSGIServer):
    daemon_threads = True


class _QuietHandler(simple_server.WSGIRequestHandler):

    def log_message(self, *args):
        pass


def serve(app):
    """``app`` on 127.0.0.1, a free port, in a thread of this process.

    :returns: (the server, its endpoint).
    """
    server = simple_server.make_server(
        '127.0.0.1', 0, app, server_class=_ThreadingServer,
        handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, 'http://127.0.0.1:%d' % server.server_port


def fork_worker(server):
    """A process answering on ``server``'s socket; its pid.

    The child drops the database connections it inherited. ``server``'s
    own serving thread must be stopped (:func:`fork_workers` does).
    """
    from placement import db_api

    pid = os.fork()
    if pid == 0:
        try:
            db_api.placement_context_manager.writer.get_engine().dispose(
                close=False)
            server.serve_forever()
        finally:
            os._exit(0)
    return pid


def fork_workers(server, count):
    """``count`` processes answering on ``server``'s socket; their pids.

    The parent's serving thread is stopped first, so only the workers
    answer.
    """
    server.shutdown()
    return [fork_worker(server) for _ in range(count)]


def stop_workers(pids, sig=signal.SIGTERM):
    for pid in pids:
        os.kill(pid, sig)
    for pid in pids:
        os.waitpid(pid, 0)


class PlacementWriter(object):
    """Placement's REST API, as an admin, at :data:`PLACEMENT_VERSION`.

    Keeps each provider's generation, as a client must to write to it.
    """

    def __init__(self, endpoint):
        import requests

        self.endpoint = endpoint
        self.http = requests.Session()
        self.http.headers.update({'x-auth-token': 'admin',
                                  'OpenStack-API-Version':
                                      PLACEMENT_VERSION})
        self.generations = {}

    def call(self, method, path, body=None):
        response = self.http.request(method, self.endpoint + path, json=body)
        if response.status_code >= 400:
            raise RuntimeError('%s %s: %s %s' % (
                method, path, response.status_code, response.text))
        return response.json() if response.content else None

    def ensure(self, kind, name):
        """A custom resource class or trait (``kind``: the URL's)."""
        self.call('PUT', '/%s/%s' % (kind, name))

    def provider(self, name, parent=None):
        """A new provider, a child of ``parent`` if given; its uuid."""
        body = {'name': name, 'uuid': str(uuid.uuid4())}
        if parent:
            body['parent_provider_uuid'] = parent
        made = self.call('POST', '/resource_providers', body)
        self.generations[made['uuid']] = made['generation']
        return made['uuid']

    def _put(self, rp, what, key, value):
        answer = self.call(
            'PUT', '/resource_providers/%s/%s' % (rp, what),
            {'resource_provider_generation': self.generations[rp],
             key: value})
        self.generations[rp] = answer['resource_provider_generation']

    def refresh(self, rp):
        """Read the generation again (allocations change it)."""
        self.generations[rp] = self.call(
            'GET', '/resource_providers/%s' % rp)['generation']

    def inventories(self, rp, inventories):
        self._put(rp, 'inventories', 'inventories', inventories)

    def traits(self, rp, traits):
        self._put(rp, 'traits', 'traits', sorted(traits))

    def allocate(self, consumer, project, user, allocations):
        self.call('PUT', '/allocations/%s' % consumer, {
            'allocations': {rp: {'resources': res}
                            for rp, res in allocations.items()},
            'project_id': project, 'user_id': user,
            'consumer_generation': None, 'consumer_type': 'INSTANCE'})
