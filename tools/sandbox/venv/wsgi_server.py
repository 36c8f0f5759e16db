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

"""Serve one OpenStack WSGI application on loopback with cheroot.

Each API service (keystone, placement, glance, neutron, nova-api) runs in
its own process, started by ``tools/sandbox.sh``, which points the
application at its configuration through the service's
``OS_<SERVICE>_CONFIG_*`` variables.

The server is cheroot (CherryPy's HTTP/1.1 server, a thread pool), not the
standard library's ``wsgiref``: ``wsgiref`` does not decode
``Transfer-Encoding: chunked`` request bodies, and Nova's snapshot, shelve
and backup uploads to Glance are chunked (they hung, and the stored image
held the chunk framing). cheroot decodes them and marks the input
``wsgi.input_terminated``, as uWSGI and mod_wsgi do.

``--also PORT=APP`` serves a second application of the same service from
the same process (nova-api's process serves Nova's metadata API too: the
same configuration, the same imports, one Python process less).

Usage::

    python wsgi_server.py --name keystone --port 26150 \\
        --app keystone.wsgi.api:application
"""

import argparse
import importlib
import logging
import mimetypes
import os
import signal
import sys
import threading
import time

from cheroot import wsgi

LOG = logging.getLogger('sandbox.wsgi')


class _Input(object):
    """``wsgi.input`` that an application cannot close.

    cheroot's request readers close the connection's socket file when
    closed, and some applications (Glance's upload path) close their input:
    the next request on that keep-alive connection then failed.
    """

    def __init__(self, stream):
        self._stream = stream

    def read(self, *args):
        return self._stream.read(*args)

    def readline(self, *args):
        return self._stream.readline(*args)

    def readlines(self, *args):
        return self._stream.readlines(*args)

    def __iter__(self):
        return iter(self._stream)

    def close(self):
        pass

    def drain(self):
        """Read what the application left of the body."""
        while self._stream.read(1 << 16):
            pass


class _Response(object):
    """The application's response iterable, with a hook when it closes."""

    def __init__(self, result, on_close):
        self._result = result
        self._on_close = on_close

    def __iter__(self):
        return iter(self._result)

    def close(self):
        try:
            if hasattr(self._result, 'close'):
                self._result.close()
        finally:
            self._on_close()


class AccessLog(object):
    """One log line per request: peer, method, path, status, seconds.

    Also keeps ``wsgi.input`` open (see :class:`_Input`) and reads the rest
    of a chunked body the application did not read, so that the next
    request on the connection starts where it should.
    """

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        started = time.monotonic()
        seen = {}
        chunked = bool(environ.get('wsgi.input_terminated'))
        stream = environ['wsgi.input'] = _Input(environ['wsgi.input'])

        def _start_response(status, headers, exc_info=None):
            seen['status'] = status.split(' ', 1)[0]
            return start_response(status, headers, exc_info)

        def _done():
            if chunked:
                try:
                    stream.drain()
                except Exception:  # the client went away: nothing to keep
                    pass
            LOG.info('%s "%s %s%s%s" %s %.3fs%s',
                     environ.get('REMOTE_ADDR', '-'),
                     environ.get('REQUEST_METHOD', '-'),
                     environ.get('SCRIPT_NAME', ''),
                     environ.get('PATH_INFO', ''),
                     ('?' + environ['QUERY_STRING'])
                     if environ.get('QUERY_STRING') else '',
                     seen.get('status', '-'),
                     time.monotonic() - started,
                     ' (chunked body)' if chunked else '')

        try:
            result = self.app(environ, _start_response)
        except BaseException:
            _done()
            raise
        return _Response(result, _done)


class StaticFiles(object):
    """Serve the files under ``directory`` at ``prefix``, else ``app``.

    For Horizon, whose static files (collected and compressed ahead, as
    Horizon documents) are not served by Django when DEBUG is off: a
    deployment hands them to Apache or nginx, the sandbox to this.
    """

    def __init__(self, app, prefix, directory):
        self.app = app
        self.prefix = '/' + prefix.strip('/') + '/'
        self.directory = os.path.realpath(directory)

    def __call__(self, environ, start_response):
        path = environ.get('PATH_INFO', '')
        if not path.startswith(self.prefix) or \
                environ.get('REQUEST_METHOD') not in ('GET', 'HEAD'):
            return self.app(environ, start_response)
        wanted = os.path.realpath(os.path.join(
            self.directory, path[len(self.prefix):]))
        # no way out of the directory (.., symlinks)
        if not wanted.startswith(self.directory + os.sep) or \
                not os.path.isfile(wanted):
            start_response('404 Not Found',
                           [('Content-Type', 'text/plain')])
            return [b'not found\n']
        with open(wanted, 'rb') as handle:
            body = handle.read()
        ctype = mimetypes.guess_type(wanted)[0] or 'application/octet-stream'
        start_response('200 OK', [('Content-Type', ctype),
                                  ('Content-Length', str(len(body))),
                                  ('Cache-Control', 'max-age=3600')])
        return [b''] if environ['REQUEST_METHOD'] == 'HEAD' else [body]


def load_app(spec):
    """Import ``module:attribute`` and return the WSGI callable.

    :param spec: ``package.module:attribute`` (``application`` if omitted).
    :returns: the WSGI application.
    """
    module_name, _, attr = spec.partition(':')
    module = importlib.import_module(module_name)
    return getattr(module, attr or 'application')


def make_server(host, port, app, name, threads=16):
    """A cheroot WSGI server for ``app`` on ``host:port`` (not started)."""
    return wsgi.Server(
        (host, port), AccessLog(app), numthreads=threads,
        server_name='%s (sandbox)' % name, request_queue_size=64,
        # Seconds of silence on a connection before it is dropped, and
        # for the requests in flight when the server stops.
        timeout=60, shutdown_timeout=5)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--name', required=True,
                        help='service name used in log lines')
    parser.add_argument('--app', required=True,
                        help='WSGI application as module:attribute')
    parser.add_argument('--host', default='127.0.0.1')
    parser.add_argument('--port', type=int, required=True)
    parser.add_argument('--threads', type=int, default=16,
                        help='worker threads (default 16)')
    parser.add_argument('--static', metavar='PREFIX=DIR', default=None,
                        help='also serve the files of DIR at URL PREFIX')
    parser.add_argument('--also', metavar='PORT=APP', action='append',
                        default=[],
                        help='also serve APP (module:attribute) on PORT, '
                             'with 4 threads, from this process')
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
    if args.static:
        prefix, _, directory = args.static.partition('=')
        app = StaticFiles(app, prefix, directory)
    if args.configure_mappers:
        from sqlalchemy import orm
        orm.configure_mappers()
    server = make_server(args.host, args.port, app, args.name, args.threads)
    extra_servers = []
    for extra in args.also:
        port, _, spec = extra.partition('=')
        extra_servers.append(make_server(
            args.host, int(port), load_app(spec), args.name, 4))
        LOG.info('%s: serving %s on http://%s:%s too', args.name, spec,
                 args.host, port)
    for extra_server in extra_servers:
        extra_server.prepare()  # binds now: a taken port fails the start
        threading.Thread(target=extra_server.serve, daemon=True).start()

    def _stop(signum, frame):
        LOG.info('%s: signal %d, stopping', args.name, signum)
        # Raised in the thread that runs serve(): safe_start() stops the
        # server (workers joined, socket closed) and re-raises it.
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    LOG.info('%s: serving %s on http://%s:%d with cheroot, %d threads '
             '(loaded in %.1fs)', args.name, args.app, args.host, args.port,
             args.threads, time.monotonic() - started)
    try:
        server.safe_start()
    except SystemExit:
        pass
    finally:
        for extra_server in extra_servers:
            extra_server.stop()
    return 0


if __name__ == '__main__':
    sys.exit(main())
