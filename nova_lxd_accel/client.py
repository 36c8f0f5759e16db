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

"""The one seam between nova-lxd-accel and LXD.

Only this module imports pylxd. It speaks LXD's REST API through pylxd's
low-level ``api`` node (so every request is explicit and honours the
configured project), waits for LXD's background operations itself with a
timeout, and turns every LXD or transport error into one of the project's
exceptions, which name the action, the object and what LXD said.
"""

import base64
import hashlib
import json
import os
import socket
import ssl
import struct
import threading
import time
from urllib import parse

from oslo_concurrency import lockutils
from oslo_log import log as logging
import pylxd
from pylxd import exceptions as lxd_exceptions
import requests
from requests_toolbelt import multipart
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
            import grp
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


def _unreachable(path, reason, server=None):
    server = server or _guess_server(path)
    return exception.DaemonUnreachable(
        daemon=lxd_daemon.display_name(server), endpoint=path,
        reason=reason, check=lxd_daemon.cli(server, 'info'))


def _unix_client(path, lxd_conf, server=None):
    problem = _socket_problem(path)
    if problem:
        raise _unreachable(path, problem, server)
    try:
        return pylxd.Client(endpoint=path, timeout=lxd_conf.timeout,
                            project=lxd_conf.project)
    except lxd_exceptions.ClientConnectionFailed as exc:
        raise _unreachable(path, str(exc) or 'refused', server)


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


#: What LXD says when another update of the instance is under way.
_BUSY_UPDATE = 'non-reusable operation'


def _lxd_error(exc):
    """The message LXD put in an error response, else the exception text."""
    response = getattr(exc, 'response', None)
    if response is not None:
        try:
            body = response.json()
            return body.get('error') or body.get('err') or str(exc)
        except ValueError:
            return response.text or str(exc)
    return str(exc)


class LXDClient(object):
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
            return _https_client(endpoint, self._verify(), cert,
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
                action=action, target=target, reason=_lxd_error(exc))
        except lxd_exceptions.LXDAPIException as exc:
            raise exception.LXDOperationFailed(
                action=action, target=target, reason=_lxd_error(exc))
        except (requests.exceptions.ConnectionError,
                lxd_exceptions.ClientConnectionFailed) as exc:
            # Drop the session: the daemon may come back on a new socket.
            self._client = None
            daemon = self._daemon
            raise _unreachable(self.endpoint, str(exc),
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

    # -- events (nova_lxd_accel.events) -----------------------------------

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
            raise _unreachable(endpoint, 'events: %s' % (exc or 'refused'),
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

    # -- instances --------------------------------------------------------

    def list_containers(self):
        """Every container of the project, with config and status."""
        return self._call('list', 'instances', self.api.instances.get,
                          params={'recursion': 1,
                                  'filter': 'type eq container'},
                          ).json()['metadata']

    def get_container(self, name):
        """The container's record, or None when LXD has no such one."""
        try:
            return self._call('read', 'instance %s' % name,
                              self.api.instances[name].get).json()['metadata']
        except exception.LXDObjectNotFound:
            return None

    def get_state(self, name):
        return self._call('read', 'state of instance %s' % name,
                          self.api.instances[name].state.get
                          ).json()['metadata']

    def create_container(self, name, config, devices, profiles, source):
        body = {'name': name, 'type': 'container', 'config': config,
                'devices': devices, 'profiles': profiles, 'source': source}
        self._request('post', self.api.instances, 'create',
                      'instance %s' % name, json=body)

    def update_container(self, name, config=None, devices=None):
        """Replace config and/or devices (PATCH merges top-level keys)."""
        body = {}
        if config is not None:
            body['config'] = config
        if devices is not None:
            body['devices'] = devices
        self._request('patch', self.api.instances[name], 'update',
                      'instance %s' % name, json=body)

    def put_container(self, name, record):
        """Write a whole instance record back (config, devices, ...)."""
        body = {key: record[key] for key in
                ('architecture', 'config', 'devices', 'ephemeral',
                 'profiles', 'description') if key in record}
        self._request('put', self.api.instances[name], 'update',
                      'instance %s' % name, json=body)

    # -- every project; ETag-guarded writes --------------------------------

    def _all_projects_api(self):
        """The API root without this client's ``project`` parameter."""
        api = self.api
        return type(api)(api._api_endpoint, session=api.session,
                         timeout=api._timeout)

    def list_all_instances(self):
        """Every instance of the daemon: all projects, containers and VMs.

        Each record carries its ``project`` and ``expanded_devices`` (the
        devices its profiles add), so it says everything it holds.
        """
        return self._call('list', 'instances of all projects',
                          self._all_projects_api().instances.get,
                          params={'recursion': 1, 'all-projects': 'true'},
                          ).json()['metadata']

    def get_container_etag(self, name):
        """``(record, etag)`` of a container, ``(None, None)`` if absent."""
        try:
            response = self._call('read', 'instance %s' % name,
                                  self.api.instances[name].get)
        except exception.LXDObjectNotFound:
            return None, None
        return response.json()['metadata'], response.headers.get('ETag')

    def _put_if_match(self, name, record, etag):
        body = {key: record[key] for key in
                ('architecture', 'config', 'devices', 'ephemeral',
                 'profiles', 'description') if key in record}
        headers = {'If-Match': etag} if etag else {}
        node = self.api.instances[name]

        def put(**kwargs):
            try:
                return node.put(**kwargs)
            except lxd_exceptions.LXDAPIException as exc:
                response = getattr(exc, 'response', None)
                if getattr(response, 'status_code', None) == 412:
                    raise exception.LXDPreconditionFailed(
                        action='update', target='instance %s' % name,
                        reason=_lxd_error(exc))
                raise

        target = 'instance %s' % name
        self._wait(self._call('update', target, put, json=body,
                              headers=headers), 'update', target)

    def instance_lock_name(self, name):
        """The lock serialising this process's writes to one instance."""
        return 'lxd-instance-%s-%s' % (self._conf.lxd.project, name)

    def modify_container(self, name, change, attempts=10):
        """Read-modify-write of one container, guarded by its ETag.

        :param change: callable(config, devices) that edits copies of the
            container's own ``config`` and ``devices`` in place, touching
            only the keys its caller owns, and returns False when there is
            nothing to write. It may be called again with fresher copies.
        :returns: the record as written, or None when there is no such
            container.
        :raises: LXDConcurrentUpdate after ``attempts`` 412 answers.

        Writes of this process to one instance are serialised; writers
        elsewhere (another process, an operator) are caught by the ETag:
        LXD answers 412 when the container changed since it was read, and
        the change is applied again to what is there now.
        """
        with lockutils.lock(self.instance_lock_name(name)):
            for attempt in range(1, attempts + 1):
                record, etag = self.get_container_etag(name)
                if record is None:
                    return None
                config = dict(record.get('config') or {})
                devices = {k: dict(v) for k, v in
                           (record.get('devices') or {}).items()}
                if change(config, devices) is False:
                    return record
                record = dict(record, config=config, devices=devices)
                try:
                    self._put_if_match(name, record, etag)
                except exception.LXDPreconditionFailed:
                    LOG.debug('Instance %(name)s changed while we updated '
                              'it (attempt %(n)d); reading it again',
                              {'name': name, 'n': attempt})
                    continue
                except exception.LXDOperationFailed as exc:
                    # LXD runs one update of an instance at a time and
                    # refuses another meanwhile ("A matching non-reusable
                    # operation ..."): the same as a stale ETag
                    if _BUSY_UPDATE not in str(exc):
                        raise
                    LOG.debug('Instance %(name)s is being updated by '
                              'another writer (attempt %(n)d); reading it '
                              'again', {'name': name, 'n': attempt})
                    time.sleep(0.05 * attempt)
                    continue
                return record
        raise exception.LXDConcurrentUpdate(
            action='update', target='instance %s' % name, attempts=attempts)

    def change_state(self, name, action, force=False, timeout=None):
        """start, stop, restart, freeze or unfreeze a container.

        ``timeout`` is LXD's own clean-shutdown timeout for stop/restart.
        """
        body = {'action': action, 'force': force}
        lxd_timeout = None
        if timeout is not None:
            body['timeout'] = int(timeout)
            lxd_timeout = int(timeout) + self._conf.lxd.timeout
        self._request('put', self.api.instances[name].state, action,
                      'instance %s' % name, timeout=lxd_timeout, json=body)

    def stop_now(self, name, record=None):
        """Stop a container at once, thawing it first if it is frozen.

        :param record: its record when the caller has just read it.
        :returns: the record as it was, or None when there is no such
            container (a stopped or absent container is left alone).
        """
        if record is None:
            record = self.get_container(name)
        if record is None or record['status'] == 'Stopped':
            return record
        if record['status'] == 'Frozen':
            self.change_state(name, 'unfreeze')
        self.change_state(name, 'stop', force=True)
        return record

    def remove_container(self, name, attempts=6):
        """Remove a container in whatever state it is; verify it is gone.

        A container can be in the middle of something when nova wants it
        gone: LXD still creating it, or still running the "stop" hook of a
        start that failed (LXD then refuses the delete with "busy running
        a 'stop' operation" for a moment). Each attempt lets LXD's
        operations on the container end (cancelling those that can be),
        forces it to stop, deletes it and reads it back; a refusal is
        retried after a growing pause (about 8 s in all for 6 attempts;
        LXD's stop hook after a failed start takes under a second), at
        most ``attempts`` times; the first attempt goes straight ahead, as
        most containers are idle.

        :returns: whether the container existed.
        :raises LXDOperationFailed: it is still there after every attempt;
            the message carries LXD's last answer.
        """
        existed = False
        last_error = None
        for attempt in range(1, attempts + 1):
            try:
                if attempt > 1:
                    self.settle_operations(name)
                record = self.stop_now(name)
                if record is None:
                    return existed
                existed = True
                self.delete_container(name)
                if self.get_container(name) is None:
                    return True
                last_error = 'LXD still lists it after the delete'
            except exception.LXDUnreachable:
                raise
            except exception.LXDObjectNotFound:
                # Gone between two requests: the next read says so.
                continue
            except exception.LXDAccelException as exc:
                last_error = exc.format_message()
            LOG.debug('Removing container %(name)s, attempt %(attempt)d '
                      'of %(attempts)d: %(error)s', {
                          'name': name, 'attempt': attempt,
                          'attempts': attempts, 'error': last_error})
            if attempt < attempts:
                time.sleep(min(0.25 * 2 ** (attempt - 1), 5))
        if self.get_container(name) is None:
            return existed
        raise exception.LXDOperationFailed(
            action='remove', target='instance %s' % name,
            reason='still there after %d attempts (last: %s); remove it '
                   'with `lxc delete --force %s --project %s`' % (
                       attempts, last_error, name, self._conf.lxd.project))

    def delete_container(self, name):
        self._request('delete', self.api.instances[name], 'delete',
                      'instance %s' % name)

    def instance_operations(self, name):
        """LXD's running or pending operations on one instance."""
        groups = self._call('list', 'operations', self.api.operations.get,
                            params={'recursion': 1}).json()['metadata']
        url = '/1.0/instances/%s' % name
        found = []
        for status in ('running', 'pending'):
            for operation in (groups or {}).get(status) or []:
                resources = operation.get('resources') or {}
                urls = (resources.get('instances') or []) + (
                    resources.get('containers') or [])
                if any(u.split('?')[0].rstrip('/') == url for u in urls):
                    found.append(operation)
        return found

    def settle_operations(self, name, timeout=None):
        """Let LXD's operations on an instance end, or cancel them.

        Each running operation is waited for (at most ``timeout``, by
        default [lxd] timeout); one that is still running then is
        cancelled when LXD allows it. Nothing is raised for an
        operation's own failure: it ends either way.
        """
        timeout = timeout or self._conf.lxd.timeout
        for operation in self.instance_operations(name):
            operation_id = operation['id']
            try:
                result = self._wait_result(
                    operation_id, 'wait for', 'operation %s' % operation_id,
                    timeout)
            except exception.LXDObjectNotFound:
                continue
            if result.get('status') in ('Running', 'Pending'):
                cancel = bool(result.get('may_cancel'))
                LOG.warning('LXD operation %(op)s (%(what)s) on %(name)s '
                            'still runs after %(timeout)ss; %(next)s',
                            {'op': operation_id, 'name': name,
                             'what': operation.get('description'),
                             'timeout': timeout,
                             'next': 'cancelling it' if cancel else
                             'LXD does not allow cancelling it'})
                if cancel:
                    self.cancel_operation(operation_id)

    def console_log(self, name):
        response = self._call('read', 'console log of instance %s' % name,
                              self.api.instances[name].console.get,
                              is_api=False)
        return response.content

    def push_file(self, name, path, data, mode=0o644, uid=0, gid=0):
        headers = {'X-LXD-type': 'file', 'X-LXD-mode': '%04o' % mode,
                   'X-LXD-uid': str(uid), 'X-LXD-gid': str(gid),
                   'X-LXD-write': 'overwrite',
                   'Content-Type': 'application/octet-stream'}
        self._call('write', '%s in instance %s' % (path, name),
                   self.api.instances[name].files.post,
                   params={'path': path}, data=data, headers=headers)

    def make_directory(self, name, path, mode=0o755):
        headers = {'X-LXD-type': 'directory', 'X-LXD-mode': '%04o' % mode,
                   'X-LXD-uid': '0', 'X-LXD-gid': '0'}
        try:
            self._call('write', '%s in instance %s' % (path, name),
                       self.api.instances[name].files.post,
                       params={'path': path}, headers=headers)
        except exception.LXDOperationFailed as exc:
            if 'exists' not in str(exc):
                raise

    def create_snapshot(self, name, snapshot):
        self._request('post', self.api.instances[name].snapshots,
                      'snapshot', 'instance %s' % name,
                      json={'name': snapshot, 'stateful': False})

    def delete_snapshot(self, name, snapshot):
        self._request('delete', self.api.instances[name].snapshots[snapshot],
                      'delete snapshot', '%s/%s' % (name, snapshot))

    # -- images -----------------------------------------------------------

    def get_alias(self, alias):
        try:
            return self._call('read', 'image alias %s' % alias,
                              self.api.images.aliases[alias].get
                              ).json()['metadata']
        except exception.LXDObjectNotFound:
            return None

    def list_aliases(self):
        """Every image alias of the project: name, target, description."""
        return self._call('list', 'image aliases',
                          self.api.images.aliases.get,
                          params={'recursion': 1}).json()['metadata']

    def image_info(self, fingerprint):
        """An image's record (``uploaded_at``, ``last_used_at``, ...)."""
        return self._call('read', 'image %s' % fingerprint,
                          self.api.images[fingerprint].get).json()['metadata']

    def image_exists(self, fingerprint):
        try:
            self._call('read', 'image %s' % fingerprint,
                       self.api.images[fingerprint].get)
        except exception.LXDObjectNotFound:
            return False
        return True

    def import_image(self, target, data, headers):
        """POST an image body; returns its fingerprint."""
        metadata = self._request('post', self.api.images, 'import',
                                 'image %s' % target, data=data,
                                 headers=headers)
        return metadata['fingerprint']

    def import_split_image(self, target, metadata_path, rootfs_path,
                           rootfs_is_squashfs):
        """Import a metadata tarball plus a rootfs (tarball or squashfs)."""
        # A container's root file system is the ``rootfs`` part whether it
        # is a tarball or squashfs: ``rootfs.img`` is a VM disk, and LXD
        # would refuse to make a container from it.
        rootfs_part = 'rootfs'
        with open(metadata_path, 'rb') as metadata, \
                open(rootfs_path, 'rb') as rootfs:
            body = multipart.MultipartEncoder(fields=[
                ('metadata', ('metadata', metadata,
                              'application/octet-stream')),
                (rootfs_part, (rootfs_part, rootfs,
                               'application/octet-stream'))])
            return self.import_image(
                target, body, {'Content-Type': body.content_type})

    def delete_alias(self, alias):
        self._call('delete', 'image alias %s' % alias,
                   self.api.images.aliases[alias].delete)

    def set_alias(self, alias, fingerprint, description=''):
        if self.get_alias(alias) is not None:
            self.delete_alias(alias)
        self._call('create', 'image alias %s' % alias,
                   self.api.images.aliases.post,
                   json={'name': alias, 'target': fingerprint,
                         'description': description})

    def delete_image(self, fingerprint):
        self._request('delete', self.api.images[fingerprint], 'delete',
                      'image %s' % fingerprint)

    def publish(self, source_type, source_name, properties):
        """Make an image of an instance or snapshot; returns fingerprint."""
        body = {'source': {'type': source_type, 'name': source_name},
                'properties': properties, 'public': False}
        metadata = self._request('post', self.api.images, 'publish',
                                 '%s %s' % (source_type, source_name),
                                 json=body)
        return metadata['fingerprint']

    def export_image(self, fingerprint):
        """A streaming response with the image file(s)."""
        return self._call('export', 'image %s' % fingerprint,
                          self.api.images[fingerprint].export.get,
                          is_api=False, stream=True)

    # -- migration (nova_lxd_accel.migration) -----------------------------

    def remote(self, endpoint, cert=None, key=None, verify='true'):
        """A client of another host's LXD over HTTPS, in this project."""
        return RemoteLXDClient(self._conf, endpoint, cert, key, verify)

    def rename_container(self, name, new_name):
        try:
            self._request('post', self.api.instances[name], 'rename',
                          'instance %s' % name, json={'name': new_name})
        except exception.LXDOperationGone:
            # Its result is lost, its effect is not.
            if self.get_container(new_name) is None or \
                    self.get_container(name) is not None:
                raise
            LOG.debug('LXD forgot the rename of %s to %s; it was done',
                      name, new_name)

    def copy_container(self, name, new_name, profiles):
        """A local copy of a stopped container, without its snapshots."""
        body = {'name': new_name, 'type': 'container', 'profiles': profiles,
                'source': {'type': 'copy', 'source': name,
                           'instance_only': True}}
        self._request('post', self.api.instances, 'copy',
                      'instance %s to %s' % (name, new_name), json=body)

    def offer_migration(self, name):
        """Offer a stopped container to another daemon.

        :returns: (operation id, websocket secrets) of the source side;
            the operation ends once a target has pulled the container.
        """
        response = self._call('migrate', 'instance %s' % name,
                              self.api.instances[name].post,
                              json={'migration': True, 'live': False,
                                    'instance_only': True})
        metadata = response.json()['metadata']
        return metadata['id'], metadata['metadata']

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

    def create_from_migration(self, name, record, operation_url,
                              certificate, secrets, timeout=None):
        """Pull a container offered by another daemon (pull mode).

        :param record: architecture, config, devices and profiles of the
            new container.
        :param operation_url: the source's migration operation URL.
        :param certificate: the source daemon's server certificate (PEM).
        """
        body = {'name': name, 'type': 'container',
                'architecture': record['architecture'],
                'config': record['config'], 'devices': record['devices'],
                'profiles': record['profiles'], 'ephemeral': False,
                'source': {'type': 'migration', 'mode': 'pull',
                           'operation': operation_url,
                           'certificate': certificate,
                           'secrets': secrets, 'instance_only': True}}
        self._request('post', self.api.instances, 'migrate',
                      'instance %s from %s' % (name, operation_url),
                      timeout=timeout, json=body)


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
            raise _unreachable(endpoint, 'events: %s' % (
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


class RemoteLXDClient(LXDClient):
    """Another host's LXD daemon over HTTPS (the target of a migration)."""

    def __init__(self, conf, endpoint, cert, key, verify):
        super(RemoteLXDClient, self).__init__(conf)
        self._remote_endpoint = endpoint
        self._cert = (cert, key) if cert or key else None
        self._remote_verify = verify

    @property
    def endpoint(self):
        return self._remote_endpoint

    def _verify(self):
        return verify_setting(self._remote_verify)

    def _connect(self):
        return _https_client(self.endpoint, self._verify(), self._cert,
                             self._conf.lxd.timeout, self._conf.lxd.project)


def _https_client(endpoint, verify, cert, timeout, project):
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
