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

"""Serve one OpenStack WSGI application on loopback with the standard library.

A small threaded ``wsgiref`` server, enough for a single-host sandbox: each
API service (keystone, placement, glance, neutron, nova-api) runs in its own
process, started by ``tools/sandbox.sh``, which points the application at its
configuration through the service's ``OS_<SERVICE>_CONFIG_*`` variables.

Usage::

    python wsgi_server.py --name keystone --port 36150 \\
        --app keystone.wsgi.api:application
"""

import argparse
import importlib
import logging
import signal
import socketserver
import sys
import time
from wsgiref import simple_server

LOG = logging.getLogger('sandbox.wsgi')


class ThreadingWSGIServer(socketserver.ThreadingMixIn,
                          simple_server.WSGIServer):
    """One thread per request; threads never keep the process alive."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64


class QuietHandler(simple_server.WSGIRequestHandler):
    """Log one line per request through :mod:`logging`, not raw stderr."""

    def log_message(self, format, *args):
        LOG.info('%s %s', self.address_string(), format % args)

    def address_string(self):
        # Never resolve the peer's name.
        return self.client_address[0]


def load_app(spec):
    """Import ``module:attribute`` and return the WSGI callable.

    :param spec: ``package.module:attribute`` (``application`` if omitted).
    :returns: the WSGI application.
    """
    module_name, _, attr = spec.partition(':')
    module = importlib.import_module(module_name)
    return getattr(module, attr or 'application')


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--name', required=True,
                        help='service name used in log lines')
    parser.add_argument('--app', required=True,
                        help='WSGI application as module:attribute')
    parser.add_argument('--host', default='127.0.0.1')
    parser.add_argument('--port', type=int, required=True)
    parser.add_argument('--configure-mappers', action='store_true',
                        help='call sqlalchemy.orm.configure_mappers() once '
                             'the application is loaded (neutron needs it)')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr,
        format='%(asctime)s %(process)d %(levelname)s %(name)s %(message)s')
    started = time.monotonic()
    # The applications parse the command line with oslo.config: leave them
    # only the program name.
    sys.argv = [args.name]
    app = load_app(args.app)
    if args.configure_mappers:
        from sqlalchemy import orm
        orm.configure_mappers()
    server = simple_server.make_server(
        args.host, args.port, app,
        server_class=ThreadingWSGIServer, handler_class=QuietHandler)

    def _stop(signum, frame):
        LOG.info('%s: signal %d, stopping', args.name, signum)
        # shutdown() blocks until serve_forever() returns: never call it
        # from the thread that runs serve_forever().
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    LOG.info('%s: serving %s on http://%s:%d (loaded in %.1fs)', args.name,
             args.app, args.host, args.port, time.monotonic() - started)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == '__main__':
    sys.exit(main())
