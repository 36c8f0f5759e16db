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

"""One fake of the seam for unit tests: a daemon's instances in memory.

:class:`FakeLXDClient` keeps instance records and answers the public
methods of :class:`nova_lxd_accel.client.LXDClient` the way the daemons do
in ``tests/unit/test_client_contract.py`` (recorded LXD 5.0.2 and Incus
6.0.4 answers): a missing instance reads as None, PATCH merges config keys
and devices, PUT replaces them, every write changes the ETag, a running
instance is not deleted. It does not validate config values or devices
(the real daemons do, in tests/integration and tests/functional). The seam's
compound operations are the real ones, run on these primitives:
``modify_container`` (ETag read-modify-write with 412 retry),
``stop_now`` and ``remove_container``. ``test_client_contract`` runs the
contract's steps on it too.

Like a daemon, it keeps projects apart: every instance belongs to one
project (:attr:`projects`, project -> name -> record; a record given to the
constructor goes to its ``project`` key, else to the client's), and the
client sees its own project (:attr:`project`) the way an ``LXDClient`` of
that ``[lxd] project`` does: every per-instance method and
``list_containers`` work there only, ``list_all_instances`` lists every
project's instances, each record carrying its ``project`` and
``expanded_devices`` as the daemons answer.

Tests read :attr:`records` (name -> record, the client's project) for
outcomes; :attr:`calls` lists the writes in order, as
``(method, name, ...)``. :meth:`fail` makes a method raise what the daemon
would.
"""

import copy
import itertools
import queue
import threading
import types

from nova_lxd_accel import client
from nova_lxd_accel import exception

#: Keys of a record a PUT writes (as the real put_container sends them).
WRITABLE = ('architecture', 'config', 'devices', 'ephemeral', 'profiles',
            'description')


class FakeEventStream(object):
    """An event stream fed by the test (``events.put(event)``)."""

    def __init__(self):
        self.events = queue.Queue()
        self.closed = False

    def next_event(self, timeout):
        if self.closed:
            raise exception.EventStreamLost(endpoint='fake', reason='closed')
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            return None

    def close(self):
        self.closed = True


class FakeLXDClient(object):
    """Instances of one daemon in memory, behind the seam's methods.

    :param records: instance records; each goes to its ``project`` (the
        client's own when it has none).
    :param project: the client's project (its ``[lxd] project``).
    """

    endpoint = '/var/lib/lxd/unix.socket'
    project = 'default'

    def __init__(self, *records, address='127.0.0.1:8443', endpoint=None,
                 events=True, project=None):
        if project is not None:
            self.project = project
        #: project -> {name -> record}: every instance of the daemon.
        self.projects = {}
        for record in records:
            self.add_instance(record)
        if endpoint is not None:
            self.endpoint = endpoint
        self.address = address
        #: Writes, in order: ``(method, name, ...)``.
        self.calls = []
        #: Names read with get_container, in order.
        self.reads = []
        #: How many times the instances were listed.
        self.listings = 0
        #: endpoint -> the FakeLXDClient ``remote()`` answers with.
        self.remotes = {}
        #: False: the daemon has no events API (EventsUnsupported).
        self.events = events
        self.stream = None
        self._failures = {}
        self._versions = itertools.count(1)
        self._etags = {}
        self._lock = threading.RLock()

    # -- test controls ------------------------------------------------------

    @property
    def records(self):
        """name -> record of the instances of the client's project."""
        return self.projects.setdefault(self.project, {})

    def add_instance(self, record, project=None):
        """Put an instance into ``project`` (else its own, else ours)."""
        project = project or record.get('project') or self.project
        self.projects.setdefault(project, {})[record['name']] = \
            copy.deepcopy(record)

    def fail(self, method, exc, when=None):
        """Make ``method`` raise ``exc`` (while ``when(*args)`` is true).

        ``exc`` None clears it.
        """
        if exc is None:
            self._failures.pop(method, None)
        else:
            self._failures[method] = (exc, when)

    def _check(self, method, *args):
        exc, when = self._failures.get(method, (None, None))
        if exc is not None and (when is None or when(*args)):
            raise exc

    def _written(self, name):
        self._etags[name] = str(next(self._versions))

    def _record(self, name, action):
        record = self.records.get(name)
        if record is None:
            raise exception.LXDObjectNotFound(
                action=action, target='instance %s' % name,
                reason='Instance not found')
        return record

    # -- reads ----------------------------------------------------------------

    def server_info(self):
        return {'auth': 'trusted', 'environment': {
            'server': 'lxd', 'server_version': '5.0.2',
            'addresses': [self.address] if self.address else [],
            'certificate': 'SOURCE-CERT'}}

    def get_container(self, name):
        self.reads.append(name)
        return copy.deepcopy(self.records.get(name))

    def get_state(self, name):
        return {'status': self._record(name, 'read')['status']}

    @staticmethod
    def _listed(project, record):
        """A record as the daemons list it.

        With its project and type, and the devices its profiles add (none
        here) in ``expanded_devices``.
        """
        listed = copy.deepcopy(record)
        listed['project'] = project
        listed.setdefault('type', 'container')
        listed.setdefault('expanded_devices',
                          copy.deepcopy(record.get('devices') or {}))
        return listed

    def list_containers(self):
        """The containers of the client's project only."""
        self.listings += 1
        return [self._listed(self.project, r) for r in self.records.values()
                if r.get('type', 'container') == 'container']

    def list_all_instances(self):
        """Every instance of every project, containers and VMs."""
        return [self._listed(project, r)
                for project, records in list(self.projects.items())
                for r in records.values()]

    def get_container_etag(self, name):
        with self._lock:
            record = self.records.get(name)
            if record is None:
                return None, None
            return copy.deepcopy(record), self._etags.setdefault(name, '0')

    def instance_operations(self, name):
        return []

    def settle_operations(self, name, timeout=None):
        pass

    # -- writes ---------------------------------------------------------------

    def create_container(self, name, config, devices, profiles, source):
        self._check('create_container', name)
        self.calls.append(('create', name))
        self.records[name] = {
            'name': name, 'status': 'Stopped', 'architecture': 'x86_64',
            'config': copy.deepcopy(config),
            'devices': copy.deepcopy(devices), 'profiles': list(profiles)}
        self._written(name)

    def update_container(self, name, config=None, devices=None):
        """PATCH: config keys and devices are merged into what is there."""
        self._check('update_container', name)
        self.calls.append(('patch', name, copy.deepcopy(config),
                           copy.deepcopy(devices)))
        record = self._record(name, 'update')
        record['config'].update(copy.deepcopy(config or {}))
        record['devices'].update(copy.deepcopy(devices or {}))
        self._written(name)

    def put_container(self, name, record):
        """PUT: the writable keys of the record replace the stored ones."""
        self._check('put_container', name)
        self.calls.append(('put', name, copy.deepcopy(record)))
        stored = self._record(name, 'update')
        stored.update({key: copy.deepcopy(record[key])
                       for key in WRITABLE if key in record})
        self._written(name)

    def _put_if_match(self, name, record, etag):
        with self._lock:
            if etag != self._etags.setdefault(name, '0'):
                raise exception.LXDPreconditionFailed(
                    action='update', target='instance %s' % name,
                    reason="ETag doesn't match")
            self.put_container(name, record)

    def instance_lock_name(self, name):
        return 'fake-lxd-instance-%d-%s' % (id(self), name)

    def change_state(self, name, action, force=False, timeout=None):
        self._check('change_state', name, action)
        self.calls.append(('state', name, action))
        record = self._record(name, action)
        if action in ('start', 'unfreeze', 'restart'):
            if action == 'start' and record['status'] == 'Running':
                raise exception.LXDOperationFailed(
                    action=action, target='instance %s' % name,
                    reason='The instance is already running')
            record['status'] = 'Running'
        elif action == 'stop':
            record['status'] = 'Stopped'
        elif action == 'freeze':
            record['status'] = 'Frozen'

    def delete_container(self, name):
        self._check('delete_container', name)
        record = self._record(name, 'delete')
        if record.get('status', 'Stopped') != 'Stopped':
            raise exception.LXDOperationFailed(
                action='delete', target='instance %s' % name,
                reason='Instance is running')
        self.calls.append(('delete', name))
        del self.records[name]
        self._etags.pop(name, None)

    def rename_container(self, name, new_name):
        self.calls.append(('rename', name, new_name))
        record = self.records.pop(name)
        record['name'] = new_name
        self.records[new_name] = record
        self._written(new_name)

    def copy_container(self, name, new_name, profiles):
        """A copy; like LXD, it gets a volatile.uuid of its own."""
        self.calls.append(('copy', name, new_name))
        record = copy.deepcopy(self.records[name])
        record['name'] = new_name
        record['config']['volatile.uuid'] = 'copy-of-%s' % name
        self.records[new_name] = record
        self._written(new_name)

    # -- the seam's compound operations, on these primitives ------------------

    modify_container = client.LXDClient.modify_container
    stop_now = client.LXDClient.stop_now
    remove_container = client.LXDClient.remove_container

    @property
    def _conf(self):
        # remove_container names the project in its message
        return types.SimpleNamespace(
            lxd=types.SimpleNamespace(project=self.project))

    # -- migration ------------------------------------------------------------

    def offer_migration(self, name):
        self.calls.append(('offer', name))
        return 'op-1', {'control': 'c', 'fs': 'f'}

    def wait_operation(self, operation_id, action, target, timeout=None):
        self._check('wait_operation', operation_id)
        self.calls.append(('wait', operation_id))
        if ('cancel', operation_id) in self.calls:
            raise exception.LXDOperationFailed(action=action, target=target,
                                               reason='Cancelled')

    def cancel_operation(self, operation_id):
        self.calls.append(('cancel', operation_id))

    def remote(self, endpoint, cert=None, key=None, verify='true'):
        self.calls.append(('remote', endpoint, cert, key, verify))
        return self.remotes[endpoint]

    def create_from_migration(self, name, record, operation_url,
                              certificate, secrets, timeout=None):
        self._check('create_from_migration', name)
        self.calls.append(('pull', name, operation_url, certificate))
        self.records[name] = dict(copy.deepcopy(record), name=name,
                                  status='Stopped')
        self._written(name)

    # -- events ---------------------------------------------------------------

    def open_events(self, types=('lifecycle', 'operation'), timeout=None):
        if not self.events:
            raise exception.EventsUnsupported(endpoint='fake', reason='404')
        self.stream = FakeEventStream()
        return self.stream
