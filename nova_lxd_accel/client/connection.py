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

"""The connection to one daemon: discovery, transport and LXD's errors.

:class:`Connection` is the base of :class:`~nova_lxd_accel.client.LXDClient`:
it opens the pylxd client on first use (finding the local LXD or Incus when
``[lxd] endpoint`` is unset), runs each request through :meth:`~Connection.
_call`, which turns every LXD or transport error into one of the project's
exceptions, waits for LXD's background operations itself with a timeout,
and reads the daemon's identity and host resources.
"""

import grp
import hashlib
import os
import ssl
import threading
import time

from oslo_log import log as logging
import pylxd
from pylxd import exceptions as lxd_exceptions
import requests
import urllib3

from nova_lxd_accel import daemon as lxd_daemon
from nova_lxd_accel import exception

LOG = logging.getLogger(__name__)

# API extensions the driver relies on (see nova_lxd_accel.daemon).
REQUIRED_EXTENSIONS = tuple(lxd_daemon.REQUIRED_EXTENSIONS)

#: Where a local daemon listens when nothing names one, in this order:
#: LXD's snap, Debian's LXD, Incus, Incus's runtime directory.
WELL_KNOWN_SOCKETS = (
    ('lxd', '/var/snap/lxd/common/lxd/unix.socket'),
    ('lxd', '/var/lib/lxd/unix.socket'),
    ('incus', '/var/lib/incus/unix.socket'),
    ('incus', '/run/incus/unix.socket'),
)


def candidate_sockets(environ=None, well_known=WELL_KNOWN_SOCKETS):
    """``[(daemon, socket path)]`` to try when [lxd] endpoint is unset.

    ``$LXD_DIR`` and ``$INCUS_DIR`` name a daemon the way the ``lxc`` and
    ``incus`` clients take them: when either is set only they are tried.
    Otherwise every well-known socket that exists is.
    """
    environ = os.environ if environ is None else environ
    named = [(server, os.path.join(environ[var], 'unix.socket'))
             for server, var in (('lxd', 'LXD_DIR'), ('incus', 'INCUS_DIR'))
             if environ.get(var)]
    if named:
        return named
    return [(server, path) for server, path in well_known
            if os.path.exists(path)]


def _default_socket(environ=None):
    """The first candidate socket (for messages before any connection)."""
    candidates = candidate_sockets(environ)
    return candidates[0][1] if candidates else '/var/lib/lxd/unix.socket'


def _socket_problem(path):
    """Why this process cannot use a unix socket, or None."""
    if not os.path.exists(path):
        return 'the socket does not exist'
    if not os.access(path, os.R_OK | os.W_OK, effective_ids=True):
        try:
            group = grp.getgrgid(os.stat(path).st_gid).gr_name
        except (KeyError, OSError):
            group = 'the group of the socket'
        return ('this user (uid %d) may not open the socket; add it to '
                'group %s and restart nova-compute' % (os.geteuid(), group))
    return None


def _guess_server(path):
    """The daemon a socket path most likely belongs to (for messages)."""
    return (lxd_daemon.SERVER_INCUS if 'incus' in (path or '')
            else lxd_daemon.SERVER_LXD)


def unreachable(path, reason, server=None):
    server = server or _guess_server(path)
    return exception.DaemonUnreachable(
        daemon=lxd_daemon.display_name(server), endpoint=path,
        reason=reason, check=lxd_daemon.cli(server, 'info'))


def _unix_client(path, lxd_conf, server=None):
    problem = _socket_problem(path)
    if problem:
        raise unreachable(path, problem, server)
    try:
        return pylxd.Client(endpoint=path, timeout=lxd_conf.timeout,
                            project=lxd_conf.project)
    except lxd_exceptions.ClientConnectionFailed as exc:
        raise unreachable(path, str(exc) or 'refused', server)


def _identity(client):
    """One daemon's identity, to tell two sockets of it from two daemons."""
    environment = client.host_info.get('environment') or {}
    return (environment.get('certificate_fingerprint') or
            (environment.get('server'), environment.get('server_pid')))


def discover(lxd_conf, environ=None, well_known=WELL_KNOWN_SOCKETS):
    """Find the local daemon; returns ``(socket path, pylxd client)``.

    :raises LXDUnreachable: no candidate answers (each one is named with
        why it failed).
    :raises DaemonAmbiguous: two different daemons answer (LXD and Incus
        on one host) and nothing chose one.
    """
    candidates = candidate_sockets(environ, well_known)
    answering, failures, seen = [], [], set()
    for server, path in candidates:
        try:
            client = _unix_client(path, lxd_conf, server)
        except exception.LXDUnreachable as exc:
            failures.append('%s: %s' % (path, exc.kwargs.get('reason')))
            continue
        identity = _identity(client)
        if identity in seen:
            continue
        seen.add(identity)
        answering.append((path, client))
    if len(answering) == 1:
        return answering[0]
    if not answering:
        tried = '; '.join(failures) or 'none of %s exists' % ', '.join(
            path for _, path in well_known)
        raise exception.DaemonUnreachable(
            daemon='LXD or Incus', endpoint='its local unix socket',
            reason='no daemon answers (%s); start LXD (`lxd waitready`) or '
                   'Incus (`incus admin waitready`), or set [lxd] endpoint'
                   % tried, check='lxc info` or `incus info')
    found = ['%s %s at %s' % (
        lxd_daemon.display_name((c.host_info.get('environment') or {}).get(
            'server')),
        (c.host_info.get('environment') or {}).get('server_version'), p)
        for p, c in answering]
    raise exception.DaemonAmbiguous(
        daemons='; '.join(found),
        endpoints=' or '.join(p for p, _ in answering))


def verify_setting(value):
    """A ``verify`` option's value: True, False or a certificate path."""
    text = str(value)
    if text.lower() in ('true', 'yes', '1'):
        return True
    if text.lower() in ('false', 'no', '0'):
        return False
    return text


def lxd_error(exc):
    """The message LXD put in an error response, else the exception text."""
    response = getattr(exc, 'response', None)
    if response is not None:
        try:
            body = response.json()
            return body.get('error') or body.get('err') or str(exc)
        except ValueError:
            return response.text or str(exc)
    return str(exc)


class Connection(object):
    """A connection to one LXD daemon and project, opened on first use."""

    def __init__(self, conf):
        self._conf = conf
        self._client = None
        # The socket discovery chose (when [lxd] endpoint is unset).
        self._discovered = None
        self._daemon = None
        # Threads (nova's, the lifecycle watcher) share one connection.
        self._connect_lock = threading.Lock()

    # -- connection -------------------------------------------------------

    @property
    def endpoint(self):
        return (self._conf.lxd.endpoint or self._discovered or
                _default_socket())

    def _verify(self):
        return verify_setting(self._conf.lxd.verify)

    def _connect(self):
        lxd_conf = self._conf.lxd
        cert = None
        if lxd_conf.client_cert or lxd_conf.client_key:
            cert = (lxd_conf.client_cert, lxd_conf.client_key)
        endpoint = lxd_conf.endpoint
        if not endpoint:
            # Nothing configured: find the local LXD or Incus.
            path, client = discover(lxd_conf)
            self._discovered = path
            return client
        if endpoint.startswith('https://'):
            return https_client(endpoint, self._verify(), cert,
                                lxd_conf.timeout, lxd_conf.project)
        if endpoint.startswith('/'):
            return _unix_client(endpoint, lxd_conf)
        raise exception.LXDUnreachable(
            endpoint=endpoint,
            reason='[lxd] endpoint is neither a unix socket path (starting '
                   'with /) nor an https:// URL')

    @property
    def api(self):
        client = self._client
        if client is None:
            with self._connect_lock:
                client = self._client
                if client is None:
                    client = self._client = self._connect()
                    self._daemon = None
        return client.api

    def _call(self, action, target, func, *args, **kwargs):
        """Run one request; map pylxd/requests errors to ours."""
        try:
            return func(*args, **kwargs)
        except lxd_exceptions.NotFound as exc:
            raise exception.LXDObjectNotFound(
                action=action, target=target, reason=lxd_error(exc))
        except lxd_exceptions.LXDAPIException as exc:
            raise exception.LXDOperationFailed(
                action=action, target=target, reason=lxd_error(exc))
        except (requests.exceptions.ConnectionError,
                lxd_exceptions.ClientConnectionFailed) as exc:
            # Drop the session: the daemon may come back on a new socket.
            self._client = None
            daemon = self._daemon
            raise unreachable(self.endpoint, str(exc),
                              daemon.server if daemon else None)
        except requests.exceptions.Timeout:
            raise exception.LXDOperationTimeout(
                action=action, target=target,
                timeout=self._conf.lxd.timeout)

    def _wait(self, response, action, target, timeout=None):
        """Wait for the background operation LXD answered with."""
        body = response.json()
        if body.get('type') != 'async':
            return body.get('metadata')
        operation_id = body['metadata']['id']
        timeout = timeout or self._conf.lxd.timeout
        result = self._wait_result(operation_id, action, target, timeout)
        if result.get('status') == 'Success':
            return result.get('metadata') or {}
        if result.get('status') in ('Running', 'Pending'):
            self._cancel_timed_out(operation_id, result, action, target)
            raise exception.LXDOperationTimeout(action=action, target=target,
                                                timeout=timeout)
        raise exception.LXDOperationFailed(
            action=action, target=target,
            reason=result.get('err') or result.get('status'))

    def _wait_result(self, operation_id, action, target, timeout):
        """The operation after waiting at most ``timeout`` s for its end.

        LXD answers a wait that times out with the running operation;
        Incus answers it with an error ("context deadline exceeded"), and
        then the operation is read to tell a timeout from a failure. Either
        way a running operation comes back with status Running.
        """
        try:
            return self._call(
                action, target,
                self.api.operations[operation_id].wait.get,
                params={'timeout': timeout},
                # The HTTP read may take as long as LXD waits, plus slack.
                timeout=timeout + 10).json()['metadata']
        except exception.LXDObjectNotFound as exc:
            # LXD and Incus drop a finished operation 5 s after its end; a
            # wait that comes later (a busy host) finds none.
            if 'operation not found' in str(exc).lower():
                raise exception.LXDOperationGone(action=action,
                                                 target=target)
            raise
        except exception.LXDOperationFailed as exc:
            if 'deadline exceeded' not in str(exc):
                raise
            return self._call(
                action, target,
                self.api.operations[operation_id].get).json()['metadata']

    def _cancel_timed_out(self, operation_id, result, action, target):
        """Cancel an operation we stopped waiting for, if LXD allows it.

        LXD cancels only operations that say ``may_cancel``; the others
        (most instance operations) run on, and are logged with their id so
        that an operator can follow them (``lxc operation show <id>``).
        """
        if not result.get('may_cancel'):
            LOG.warning('LXD operation %(op)s (%(action)s %(target)s) is '
                        'still %(status)s after the timeout and LXD does '
                        'not allow cancelling it; it runs on',
                        {'op': operation_id, 'action': action,
                         'target': target, 'status': result.get('status')})
            return False
        try:
            self._call('cancel', 'operation %s' % operation_id,
                       self.api.operations[operation_id].delete)
        except exception.LXDAccelException as exc:
            LOG.warning('Cancelling timed-out LXD operation %(op)s '
                        '(%(action)s %(target)s) failed: %(exc)s',
                        {'op': operation_id, 'action': action,
                         'target': target, 'exc': exc})
            return False
        LOG.warning('Cancelled LXD operation %(op)s (%(action)s %(target)s) '
                    'after the timeout',
                    {'op': operation_id, 'action': action, 'target': target})
        return True

    def _request(self, method, node, action, target, timeout=None,
                 **kwargs):
        response = self._call(action, target, getattr(node, method),
                              **kwargs)
        return self._wait(response, action, target, timeout=timeout)

    def _offer(self, target, node, body):
        """POST ``body`` to ``node``, starting a migration source (pull).

        :returns: (operation id, websocket secrets); the operation ends
            once a target daemon has pulled what is offered.
        """
        response = self._call('migrate', target, node.post, json=body)
        metadata = response.json()['metadata']
        return metadata['id'], metadata['metadata']

    # -- operations -------------------------------------------------------

    def wait_operation(self, operation_id, action, target, timeout=None):
        timeout = timeout or self._conf.lxd.timeout
        result = self._wait_result(operation_id, action, target, timeout)
        if result.get('status') != 'Success':
            raise exception.LXDOperationFailed(
                action=action, target=target,
                reason=result.get('err') or result.get('status'))

    def cancel_operation(self, operation_id):
        """Cancel an operation; errors (already gone, ...) are logged."""
        try:
            self._call('cancel', 'operation %s' % operation_id,
                       self.api.operations[operation_id].delete)
        except exception.LXDAccelException as exc:
            LOG.debug('Cancelling operation %(op)s: %(exc)s',
                      {'op': operation_id, 'exc': exc})

    # -- host -------------------------------------------------------------

    def server_info(self):
        return self._call('read', 'server information',
                          self.api.get).json()['metadata']

    def daemon_info(self, refresh=False):
        """:class:`nova_lxd_accel.daemon.DaemonInfo` of the daemon.

        Read once per connection (``GET /1.0``); ``refresh`` reads again.
        """
        daemon = self._daemon
        if daemon is None or refresh:
            info = self.server_info()
            daemon = self._daemon = lxd_daemon.DaemonInfo.from_server_info(
                info, endpoint=self.endpoint)
        return daemon

    def resources(self, attempts=3):
        """A fresh copy of ``/1.0/resources`` (never cached).

        LXD reads sysfs afresh for each request and now and then fails one
        read ("bad file descriptor" on a PCI device's numa_node); a second
        request succeeds, so a failure is retried before it is reported.
        """
        for attempt in range(1, attempts + 1):
            try:
                return self._call('read', 'host resources',
                                  self.api.resources.get).json()['metadata']
            except exception.LXDObjectNotFound:
                raise
            except exception.LXDOperationFailed as exc:
                if attempt == attempts:
                    raise
                LOG.debug('Reading host resources failed (%s); retrying',
                          exc)
                time.sleep(0.2 * attempt)

    def storage_pool(self, name):
        return self._call('read', 'storage pool %s' % name,
                          self.api.storage_pools[name].get).json()['metadata']

    def storage_pool_resources(self, name):
        return self._call('read', 'storage pool %s' % name,
                          self.api.storage_pools[name].resources.get
                          ).json()['metadata']

    def project(self, name):
        return self._call('read', 'project %s' % name,
                          self.api.projects[name].get).json()['metadata']

    def profile(self, name):
        """A profile's record: name, config and devices."""
        return self._call('read', 'profile %s' % name,
                          self.api.profiles[name].get).json()['metadata']

    def profile_names(self):
        urls = self._call('list', 'profiles',
                          self.api.profiles.get).json()['metadata']
        return [url.rsplit('/', 1)[-1] for url in urls]


def https_client(endpoint, verify, cert, timeout, project):
    """A pylxd client for an HTTPS endpoint, immune to the environment.

    :param verify: True (system CAs), False, or the path of the server's
        own certificate (pinned by fingerprint: LXD's are self-signed).
    """
    session = requests.Session()
    # Otherwise requests replaces the verification asked for with
    # $REQUESTS_CA_BUNDLE and sends loopback traffic to $https_proxy.
    session.trust_env = False
    session.verify = verify if isinstance(verify, bool) else False
    session.cert = cert
    session.mount('https://', _TLSAdapter(
        pinned=verify if isinstance(verify, str) else None))
    try:
        return pylxd.Client(endpoint=endpoint, session=session,
                            timeout=timeout, project=project)
    except lxd_exceptions.ClientConnectionFailed as exc:
        raise exception.LXDUnreachable(endpoint=endpoint,
                                       reason=str(exc) or 'refused')


class _HTTPSPool(urllib3.HTTPSConnectionPool):
    """urllib3's HTTPS pool, with urllib3's own connection class.

    Pinned here so that a harness swapping the class urllib3 uses by
    default (wsgi-intercept in nova's functional tests) does not capture
    the traffic to LXD.
    """

    ConnectionCls = urllib3.connection.HTTPSConnection


class _TLSAdapter(requests.adapters.HTTPAdapter):
    """HTTPS to one LXD daemon, its certificate pinned when one is given.

    The TLS context comes from ``ssl.create_default_context()`` at connect
    time, so under eventlet (nova's test cloud) it is eventlet's green
    context: urllib3's own context class is the one captured before the
    monkey patching, whose property setters then recurse forever.
    """

    def __init__(self, pinned=None):
        self._pinned = pinned
        super(_TLSAdapter, self).__init__()

    def init_poolmanager(self, *args, **kwargs):
        context = ssl.create_default_context()
        if self._pinned:
            # LXD's certificates are self-signed: compare the whole
            # certificate (its fingerprint) instead of a CA chain.
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        kwargs['ssl_context'] = context
        super(_TLSAdapter, self).init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = dict(
            self.poolmanager.pool_classes_by_scheme, https=_HTTPSPool)

    def cert_verify(self, conn, url, verify, cert):
        if self._pinned:
            with open(self._pinned) as handle:
                der = ssl.PEM_cert_to_DER_cert(handle.read())
            conn.assert_fingerprint = hashlib.sha256(der).hexdigest()
            verify = False
        super(_TLSAdapter, self).cert_verify(conn, url, verify, cert)
