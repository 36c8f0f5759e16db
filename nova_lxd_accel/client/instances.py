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

"""The instance client, the whole seam.

Containers, their config, devices, state, snapshots and files, LXD's
operations on them, and their migration.

:class:`LXDClient` is the whole seam: these requests on top of the
connection (:mod:`.connection`), the event subscription (:mod:`.watcher`)
and the images (:mod:`.images`).
"""

import contextlib
import functools
import inspect
import itertools
import threading
import time

from oslo_concurrency import lockutils
from oslo_log import log as logging
from pylxd import exceptions as lxd_exceptions

from nova_lxd_accel.client import connection
from nova_lxd_accel.client import events
from nova_lxd_accel.client import images
from nova_lxd_accel.client import storage
from nova_lxd_accel import daemon as lxd_daemon
from nova_lxd_accel import exception

LOG = logging.getLogger(__name__)

#: What LXD says when another update of the instance is under way.
_BUSY_UPDATE = 'non-reusable operation'

#: How long (s) the last listing of the containers may answer for them
#: (:meth:`LXDClient.listed_containers`). Nova's power-state sync asks for
#: each instance's state right after its count (one listing), five
#: instances at a time: seconds for hundreds; later questions are read.
LISTING_MAX_AGE = 60.0


#: The lock of :func:`_one_isolated_creation_at_a_time`.
_ISOLATED_CREATION_LOCK = 'nova-lxd-accel-isolated-container-creation'


def _one_isolated_creation_at_a_time(isolated):
    """Held while the daemon creates a container with an isolated idmap.

    LXD (5.0 to 6.x) and Incus store a new container before they pick
    its host id range (``volatile.idmap.base``), and pick it from the
    stored containers: one created at the same moment counts as a range
    at host id 0. The new one then gets a range that overlaps another
    isolated container's, or one below the daemon's own in /etc/subuid,
    which it cannot start (``newuidmap: uid range [0-65536) ->
    [65536-131072) not allowed``). Measured on LXD 5.0.2: twenty
    concurrent creates gave one such range and two pairs of duplicates.
    So this process creates isolated containers one at a time; other
    clients of the daemon are not held.
    """
    if isolated:
        return lockutils.lock(_ISOLATED_CREATION_LOCK)
    return contextlib.nullcontext()


class ListingMemory(object):
    """The last listing of the containers, and the writes made since.

    Every request is stamped from one counter: a listing when it is
    asked, a write when it ends (done, failed or timed out). A container
    written after the listing was asked is not answered for: the listing
    may predate the change.
    """

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._stamps = itertools.count(1)
        #: (stamp, monotonic time asked, {name: record}) or None
        self._listing = None
        #: {container name: stamp of the last write to it}
        self._written = {}

    def stamp(self):
        """A stamp and the time, taken just before a listing is asked."""
        with self._lock:
            return next(self._stamps), self._clock()

    def wrote(self, names):
        with self._lock:
            stamp = next(self._stamps)
            for name in names:
                self._written[name] = stamp

    def keep(self, stamp, asked_at, records):
        """Keep a listing, unless a later one was kept meanwhile."""
        by_name = {record.get('name'): record for record in records}
        with self._lock:
            if self._listing is not None and self._listing[0] > stamp:
                return
            self._listing = (stamp, asked_at, by_name)
            # older writes are in this listing
            self._written = {name: written for name, written in
                             self._written.items() if written > stamp}

    def records(self, names, max_age):
        """``{name: record or None}``, or None when the listing cannot say.

        It cannot when there is none younger than ``max_age`` seconds, or
        when one of ``names`` was written after it was asked.
        """
        with self._lock:
            if self._listing is None:
                return None
            stamp, asked_at, by_name = self._listing
            if self._clock() - asked_at > max_age or any(
                    self._written.get(name, 0) > stamp for name in names):
                return None
            return {name: by_name.get(name) for name in names}


def _writes(*arguments):
    """Note the containers a write names, however the write ends.

    :param arguments: names of the method's arguments that name
        containers it changes (state, config, existence, name).
    """
    def decorate(method):
        signature = inspect.signature(method)

        @functools.wraps(method)
        def write(self, *args, **kwargs):
            try:
                return method(self, *args, **kwargs)
            finally:
                bound = signature.bind(self, *args, **kwargs).arguments
                self.listings.wrote([bound[name] for name in arguments])
        return write
    return decorate


class LXDClient(events.EventsClient, images.ImageClient,
                storage.StorageClient):
    """A connection to one LXD daemon and project, opened on first use."""

    def __init__(self, conf):
        super(LXDClient, self).__init__(conf)
        #: the last listing of the containers (:meth:`listed_containers`)
        self.listings = ListingMemory()

    # -- instances --------------------------------------------------------

    def list_containers(self):
        """Every container of the project, with config and status.

        The answer is kept for :meth:`listed_containers`.
        """
        stamp, asked_at = self.listings.stamp()
        records = self._call('list', 'instances', self.api.instances.get,
                             params={'recursion': 1,
                                     'filter': 'type eq container'},
                             ).json()['metadata']
        self.listings.keep(stamp, asked_at, records)
        return records

    def listed_containers(self, names, max_age=LISTING_MAX_AGE):
        """What the last :meth:`list_containers` said of these containers.

        No request: ``{name: record, or None when it was not listed}``,
        or None when the listing is older than ``max_age`` seconds, or
        this client changed one of them (created, started, stopped,
        updated, renamed, deleted it...) after the listing was asked;
        the caller then reads them.
        """
        return self.listings.records(names, max_age)

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

    @_writes('name')
    def create_container(self, name, config, devices, profiles, source):
        body = {'name': name, 'type': 'container', 'config': config,
                'devices': devices, 'profiles': profiles, 'source': source}
        with _one_isolated_creation_at_a_time(
                lxd_daemon.is_true(config.get('security.idmap.isolated'))):
            self._request('post', self.api.instances, 'create',
                          'instance %s' % name, json=body)

    @_writes('name')
    def update_container(self, name, config=None, devices=None):
        """Replace config and/or devices (PATCH merges top-level keys)."""
        body = {}
        if config is not None:
            body['config'] = config
        if devices is not None:
            body['devices'] = devices
        self._request('patch', self.api.instances[name], 'update',
                      'instance %s' % name, json=body)

    @_writes('name')
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

    @_writes('name')
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
                        reason=connection.lxd_error(exc))
                raise

        target = 'instance %s' % name
        self._wait(self._call('update', target, put, json=body,
                              headers=headers), 'update', target)

    def instance_lock_name(self, name):
        """The lock serialising this process's writes to one instance."""
        return 'lxd-instance-%s-%s' % (self._conf.lxd.project, name)

    def modify_container(self, name, change, attempts=10, profiles=None):
        """Read-modify-write of one container, guarded by its ETag.

        :param change: callable(config, devices) that edits copies of the
            container's own ``config`` and ``devices`` in place, touching
            only the keys its caller owns, and returns False when there is
            nothing to write. It may be called again with fresher copies.
        :param profiles: the list of profiles to write with them, if given
            (else the container keeps its own).
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
                if profiles is not None:
                    record['profiles'] = list(profiles)
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

    @_writes('name')
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

    @_writes('name')
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

    # -- migration (nova_lxd_accel.instance.migration) --------------------

    def remote(self, endpoint, cert=None, key=None, verify='true'):
        """A client of another host's LXD over HTTPS, in this project."""
        return RemoteLXDClient(self._conf, endpoint, cert, key, verify)

    @_writes('name', 'new_name')
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

    @_writes('new_name')
    def copy_container(self, name, new_name, profiles):
        """A local copy of a stopped container, without its snapshots."""
        body = {'name': new_name, 'type': 'container', 'profiles': profiles,
                'source': {'type': 'copy', 'source': name,
                           'instance_only': True}}
        # The copy (its source's config) is created as a new container:
        # held whether or not its source is isolated (not read for it).
        with _one_isolated_creation_at_a_time(True):
            self._request('post', self.api.instances, 'copy',
                          'instance %s to %s' % (name, new_name), json=body)

    def offer_migration(self, name):
        """Offer a stopped container to another daemon.

        :returns: (operation id, websocket secrets) of the source side;
            the operation ends once a target has pulled the container.
        """
        return self._offer('instance %s' % name, self.api.instances[name],
                           {'migration': True, 'live': False,
                            'instance_only': True})

    @_writes('name')
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

    # -- files of a stopped instance (accel.binding.mps_environment)

    def pull_file(self, name, path, limit, why):
        """The contents (bytes) of file ``path`` in the instance, or None.

        None when the instance has no such file. At most ``limit`` bytes
        are read: the file is the image's or the tenant's (a sparse file
        of any size costs them nothing).

        :param why: what the file is read for, for the error.
        :raises InstanceFileTooLarge: when it holds more.
        """
        target = '%s in instance %s' % (path, name)
        try:
            response = self._call('read', target,
                                  self.api.instances[name].files.get,
                                  params={'path': path}, is_api=False,
                                  stream=True)
        except exception.LXDObjectNotFound:
            return None
        try:
            data = b''
            for chunk in response.iter_content(chunk_size=65536):
                data += chunk
                if len(data) > limit:
                    raise exception.InstanceFileTooLarge(
                        path=path, name=name, limit=limit, why=why)
            return data
        finally:
            response.close()

    def delete_file(self, name, path):
        """Remove file ``path`` from the instance.

        :returns: whether there was one.
        """
        try:
            self._call('delete', '%s in instance %s' % (path, name),
                       self.api.instances[name].files.delete,
                       params={'path': path})
        except exception.LXDObjectNotFound:
            return False
        return True


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
        return connection.verify_setting(self._remote_verify)

    def _connect(self):
        return connection.https_client(
            self.endpoint, self._verify(), self._cert,
            self._conf.lxd.timeout, self._conf.lxd.project)
