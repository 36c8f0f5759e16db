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

"""The ledger: the GPU state file of bound, dirty and held units, and usage.

The ledger records; the gate (:mod:`.gate`) decides from it whether a GPU
may be handed out; the holds (:mod:`.holds`, and the operator's
``nova-lxd-accel gpu hold``) are written in it.

One small JSON file, ``<[lxd_accelerators] state_dir>/gpu-state.json``,
shared by nova-compute and the ``nova-lxd-accel`` commands. Every change is
a read-modify-write under an exclusive ``flock`` of ``gpu-state.lock`` and
is written to a temporary file renamed over the old one, so a reader never
sees half a file and two writers never lose each other's change.

Keys (all times are UNIX seconds):

``holds``
    PCI address -> ``{"kind": "operator"|"unhealthy"|"unprobeable",
    "reason", "since", "by"}``: the GPU is reserved in Placement and never
    bound until ``nova-lxd-accel gpu release`` (an ``unprobeable`` hold
    lifts by itself when the probe answers again). An unhealthy hold of a
    GPU nvidia-smi no longer lists has ``"gone": true``.
``bound``
    unit key (see :mod:`.binding`) -> who holds it now: ``instance``,
    ``project``, ``container``, ``pci``, ``resource_class``, ``provider``,
    ``since``, ``last_busy``, ``running``.
``dirty``
    unit key -> a released unit not yet verified clean: ``pci``,
    ``resource_class``, ``provider``, ``instance``, ``container``,
    ``since``, ``seq`` and ``holding`` (what the last probe still saw); a
    MIG slice also its place (``mig_index``, ``mig_gi``, ``mig_ci``,
    ``mig_profile``). It leaves only when a probe taken after it was
    written finds it clean, when its own instance is bound to it again (a
    migration's revert), when its MIG device was recreated in the same
    place, or by ``nova-lxd-accel gpu forget``.
``seq``
    a counter raised for every dirty entry written: a probe or a listing
    read before an entry's ``seq`` says nothing about it.
``baseline``
    PCI address -> lowest memory use (MiB) seen while the GPU was free.
``usage``
    instance uuid -> ``{"project", "units": {unit key: {"pci",
    "resource_class", "allocated_s", "busy_s", "first", "last"}}}``.
``probe``
    ``{"at", "available", "error", "failures"}`` of the last probe
    (``failures``: how many probes in a row failed).
``events``
    the last :data:`MAX_EVENTS` hold/release/clean events.

A unit's usage record last accounted more than ``[lxd_accelerators]
usage_retention`` seconds ago, and bound to its instance no more, is
pruned at the next write (:func:`prune_usage`).

Beside the state file, ``gpu-audit.jsonl`` keeps one JSON line per
operator override that drops what the ledger knows (``gpu forget``): who,
why, and the entry dropped (:func:`append_audit`). It is only appended to.

A state file that exists but cannot be read or parsed raises
:class:`StateUnreadable`: never read as an empty state, which would lift
the operator's holds and offer units not verified clean.

The pure functions over a state (:func:`idle_units`, :func:`gpu_states`
and its :data:`STATES`) are here too, for the gate, the metrics and the
commands alike.
"""

import contextlib
import fcntl
import json
import os
import tempfile
import time

from oslo_log import log as logging

LOG = logging.getLogger(__name__)

STATE_FILE = 'gpu-state.json'
LOCK_FILE = 'gpu-state.lock'
AUDIT_FILE = 'gpu-audit.jsonl'
MAX_EVENTS = 200
KIND_OPERATOR = 'operator'
KIND_UNHEALTHY = 'unhealthy'
#: held by nova-compute because the probe cannot read the GPU; lifted by
#: itself once it can
KIND_UNPROBEABLE = 'unprobeable'
#: held by nova-compute, in memory only, while the state file cannot be
#: read or parsed (fail closed); lifted when it can be again
KIND_UNREADABLE = 'state-unreadable'
#: ``by`` of the holds and events nova-compute makes itself
BY_COMPUTE = 'nova-compute'

STATE_FREE = 'free'
STATE_BOUND = 'bound'
STATE_DIRTY = 'reserved-dirty'
STATE_HELD = 'held'
STATE_UNHEALTHY = 'unhealthy'
STATE_IDLE = 'idle'
#: an unhealthy GPU that nvidia-smi no longer lists at all
STATE_GONE = 'gone'
STATES = (STATE_FREE, STATE_BOUND, STATE_DIRTY, STATE_HELD,
          STATE_UNHEALTHY, STATE_IDLE, STATE_GONE)


def empty_state():
    return {'version': 1, 'holds': {}, 'bound': {}, 'dirty': {},
            'baseline': {}, 'usage': {}, 'probe': {}, 'events': [],
            'seq': 0}


def next_seq(state):
    """Raise and return ``state['seq']`` (see the module docstring)."""
    state['seq'] = int(state.get('seq') or 0) + 1
    return state['seq']


#: seconds a unit's release stays recorded (``state['released']``): longer
#: than any refresh's listing stays in flight
RELEASED_KEPT = 600.0


def note_released(state, key, now, container=None):
    """Record that unit ``key`` left ``container``, with a new ``seq``.

    A refresh whose listing was taken before (its mark is lower), or that
    still listed the container while it was being deleted, does not bind
    the unit again to it, even once the unit was verified clean and its
    dirty entry dropped (see :func:`stale_binding`).
    """
    state.setdefault('released', {})[key] = {
        'seq': next_seq(state), 'at': now, 'container': container}


def stale_binding(state, key, container, entry_seq=0):
    """Whether binding ``key`` to ``container`` predates its release.

    True when ``container`` released the unit after the binding was
    recorded (``entry_seq``, 0 when the listing alone says so).
    """
    gone = (state.get('released') or {}).get(key) or {}
    return bool(gone) and gone.get('container') == container and \
        int(entry_seq or 0) < int(gone.get('seq') or 0)


def released_seq(state, key):
    """The ``seq`` of unit ``key``'s last release (0: none recorded)."""
    return int(((state.get('released') or {}).get(key) or {}).get('seq')
               or 0)


def forget_old_releases(state, now):
    state['released'] = {
        key: seen for key, seen in (state.get('released') or {}).items()
        if now - (seen.get('at') or now) < RELEASED_KEPT}


class StateUnreadable(ValueError):
    """The state file exists but cannot be read or parsed.

    Its holds and the units it keeps waiting for verification are unknown:
    a caller holds every GPU the file could speak for (fail closed), never
    reads it as an empty state. A ``ValueError``, as before it was raised.
    """

    def __init__(self, path, reason):
        self.path = path
        self.reason = reason
        super().__init__('%s %s' % (path, reason))

    @property
    def io_error(self):
        """The file is there but could not be read (not a bad content)."""
        return isinstance(self.__cause__, OSError)


class StateStore(object):
    """The state file of one host.

    :param usage_retention: seconds a unit's usage record is kept after
        its last accounting once its instance left it (0: forever).
    :param clock: of the pruning.
    """

    def __init__(self, directory, usage_retention=0, clock=time.time):
        self.directory = directory
        self.path = os.path.join(directory, STATE_FILE)
        self.audit_path = os.path.join(directory, AUDIT_FILE)
        self.usage_retention = usage_retention
        self._clock = clock

    @classmethod
    def from_conf(cls, conf):
        group = conf.lxd_accelerators
        return cls(group.state_dir, usage_retention=group.usage_retention)

    def load(self):
        """The state (an empty one when there is no file yet).

        :raises StateUnreadable: the file cannot be read (permissions, an
            I/O error), is not JSON (truncated by a crash, empty) or not a
            state's shape. Nothing reads it as an empty state: that would
            drop the holds and the units waiting for verification.
        """
        state = empty_state()
        try:
            with open(self.path, encoding='utf-8') as f:
                data = json.load(f)
        except FileNotFoundError:
            return state
        except OSError as exc:
            raise StateUnreadable(self.path,
                                  'cannot be read: %s' % exc) from exc
        except ValueError as exc:
            raise StateUnreadable(self.path, 'is not valid JSON: %s' % exc)
        problem = shape_problem(data)
        if problem:
            raise StateUnreadable(self.path,
                                  'is not a GPU state file: %s' % problem)
        state.update(data)
        return state

    @contextlib.contextmanager
    def update(self):
        """Yield the state for changing; written back when the block ends.

        Nothing is written when the block raises.
        """
        os.makedirs(self.directory, exist_ok=True)
        # O_NOFOLLOW: a link planted as the lock file is refused, never
        # followed (the commands may run as root).
        lock_path = os.path.join(self.directory, LOCK_FILE)
        fd = os.open(lock_path,
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW,
                     0o644)
        with os.fdopen(fd, 'a') as lock:
            # a lock file a root-run command created first is given to
            # the directory's owner: nova-compute must open it to write
            _give_to_directory_owner(lock.fileno(), self.directory)
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                state = self.load()
                yield state
                self._write(state)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _write(self, state):
        state['events'] = state.get('events', [])[-MAX_EVENTS:]
        if self.usage_retention:
            pruned = prune_usage(state, self._clock(), self.usage_retention)
            if pruned:
                LOG.info('Usage records older than %(days).1f days '
                         'pruned: %(units)s',
                         {'days': self.usage_retention / 86400.0,
                          'units': ', '.join(pruned)})
        write_atomic(self.path, json.dumps(state, indent=1, sort_keys=True),
                     prefix='.gpu-state.', keep_owner=True)

    def append_audit(self, record):
        """Append ``record`` as one JSON line to the audit file, durably.

        The file keeps its owner and mode (a first one takes the state
        file's, else the directory's owner and 0644), like the state file.
        """
        os.makedirs(self.directory, exist_ok=True)
        line = json.dumps(record, sort_keys=True) + '\n'
        fd = os.open(self.audit_path,
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW,
                     0o644)
        try:
            reference = self.audit_path if os.fstat(fd).st_size else \
                self.path
            _take_owner(fd, reference, self.directory, None)
            os.write(fd, line.encode('utf-8'))
            os.fsync(fd)
        finally:
            os.close(fd)
        _fsync_directory(self.directory)


#: the state's keys whose value maps a name to an object of its own
_MAPS_OF_OBJECTS = ('holds', 'bound', 'dirty', 'usage', 'released')


def shape_problem(data):
    """What makes ``data`` not a state's shape, or None."""
    if not isinstance(data, dict):
        return 'a JSON %s, not an object' % type(data).__name__
    for key in _MAPS_OF_OBJECTS + ('baseline', 'probe'):
        if key in data and not isinstance(data[key], dict):
            return '%r is a JSON %s, not an object' % (
                key, type(data[key]).__name__)
    for key in _MAPS_OF_OBJECTS:
        for name, value in (data.get(key) or {}).items():
            if not isinstance(value, dict):
                return '%r of %r is a JSON %s, not an object' % (
                    name, key, type(value).__name__)
    for name, usage in (data.get('usage') or {}).items():
        units = usage.get('units', {})
        if not isinstance(units, dict) or not all(
                isinstance(unit, dict) for unit in units.values()):
            return "the units of %r of 'usage' are not objects" % name
    if 'events' in data and not isinstance(data['events'], list):
        return "'events' is not a list"
    seq = data.get('seq', 0)
    if isinstance(seq, bool) or not isinstance(seq, int):
        return "'seq' is not a whole number"
    return None


def write_atomic(path, text, prefix, mode=None, keep_owner=False):
    """Write ``text`` to a temporary file renamed over ``path``.

    A reader never sees half a file; nothing is left behind on failure.

    :param prefix: of the temporary file's name, in ``path``'s directory.
    :param mode: permission bits for the file, or None (``mkstemp``'s).
    :param keep_owner: the new file gets the owner, group and mode of the
        file it replaces (or, for a first file, the directory's owner and
        group): a command run as root must not leave nova-compute a file
        it cannot read.
    """
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=prefix, dir=directory)
    try:
        with os.fdopen(fd, 'w', encoding='utf-8') as f:
            f.write(text)
            if keep_owner:
                _take_owner(f.fileno(), path, directory, mode)
            elif mode is not None:
                os.fchmod(f.fileno(), mode)
            # durable: the data is on the disk before the name points to
            # it, or a crash leaves an empty or truncated file behind
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    # and the rename itself
    _fsync_directory(directory)


def _fsync_directory(directory):
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _give_to_directory_owner(fd, directory):
    if os.geteuid() != 0:
        return
    parent, own = os.stat(directory), os.fstat(fd)
    if (own.st_uid, own.st_gid) != (parent.st_uid, parent.st_gid):
        os.fchown(fd, parent.st_uid, parent.st_gid)


def _take_owner(fd, path, directory, mode):
    """Give the file open as ``fd`` the owner and mode of ``path``.

    For a ``path`` that does not exist yet: the directory's owner and
    group, mode 0644. ``mode``, when not None, overrides the mode.
    """
    try:
        old = os.stat(path, follow_symlinks=False)
        uid, gid, bits = old.st_uid, old.st_gid, old.st_mode & 0o7777
    except FileNotFoundError:
        parent = os.stat(directory)
        uid, gid, bits = parent.st_uid, parent.st_gid, 0o644
    if (uid, gid) != (os.geteuid(), os.getegid()):
        # only root may give a file away; anyone else writes as itself
        if os.geteuid() == 0:
            os.fchown(fd, uid, gid)
    os.fchmod(fd, bits if mode is None else mode)


def add_event(state, event, pci, reason, now=None, **extra):
    entry = {'at': now if now is not None else time.time(), 'event': event,
             'pci': pci, 'reason': reason}
    entry.update(extra)
    state.setdefault('events', []).append(entry)


def hold(store, pci, reason, kind=KIND_OPERATOR, by=None, now=None):
    """Hold a GPU: reserved in Placement, never bound, until released.

    :returns: True when it was not held before.
    """
    now = now if now is not None else time.time()
    with store.update() as state:
        new = pci not in state['holds']
        state['holds'][pci] = {'kind': kind, 'reason': reason, 'since': now,
                               'by': by}
        add_event(state, 'hold', pci, reason, now, kind=kind, by=by)
    return new


def hold_by_compute(state, pci, kind, reason, now, gone=False):
    """Hold a GPU in ``state`` for nova-compute (an unhealthy GPU, ...).

    A GPU held already keeps the time of its first hold; the hold event is
    recorded only when it was not held.

    :param gone: nvidia-smi no longer lists the GPU (:data:`STATE_GONE`).
    :returns: True when it was not held before.
    """
    previous = state['holds'].get(pci)
    if previous is None:
        add_event(state, 'hold', pci, reason, now, kind=kind)
    state['holds'][pci] = {'kind': kind, 'reason': reason,
                           'since': (previous or {}).get('since', now),
                           'by': BY_COMPUTE}
    if gone or (previous or {}).get('gone'):
        state['holds'][pci]['gone'] = True
    return previous is None


def release(store, pci, reason, by=None, now=None):
    """Clear an operator hold or an unhealthy mark.

    A GPU the probe still finds unhealthy is held again at the next probe.

    :returns: the hold that was cleared, or None.
    """
    now = now if now is not None else time.time()
    with store.update() as state:
        previous = state['holds'].pop(pci, None)
        add_event(state, 'release', pci, reason, now, by=by,
                  previous=previous and previous.get('reason'))
    return previous


class EntryChanged(Exception):
    """The dirty entry is not the one the caller checked any more."""

    def __init__(self, key, entry):
        self.key = key
        self.entry = entry
        super().__init__(
            '%s was released again meanwhile (by instance %s, seq %s)' % (
                key, entry.get('instance'), entry.get('seq')))


def forget(store, key, reason, by=None, now=None, audit=None, checked=None):
    """Drop the dirty entry of unit ``key``: the operator's way back.

    The caller checks first that no live container holds the unit (see
    ``nova-lxd-accel gpu forget``). The audit line (the entry dropped, who
    and why) is on the disk before the state file is written: an entry is
    never dropped without it.

    :param audit: more of the operator, for the audit line (the user the
        command ran as, its uid).
    :param checked: the entry the caller checked: when the unit was
        verified clean, bound again and released dirty again since (another
        ``seq`` or instance), nothing is dropped (:class:`EntryChanged`).
    :returns: the entry dropped, or None when ``key`` was not dirty.
    """
    now = now if now is not None else time.time()
    with store.update() as state:
        entry = state['dirty'].get(key)
        if entry is not None and checked is not None and (
                (entry.get('seq'), entry.get('instance')) !=
                (checked.get('seq'), checked.get('instance'))):
            raise EntryChanged(key, entry)
        entry = state['dirty'].pop(key, None)
        if entry is not None:
            add_event(state, 'forget', entry.get('pci'), reason, now,
                      unit=key, by=by, holding=entry.get('holding'))
            record = {'at': now, 'action': 'forget', 'unit': key,
                      'pci': entry.get('pci'), 'by': by, 'reason': reason,
                      'entry': entry}
            record.update(audit or {})
            store.append_audit(record)
    return entry


def prune_usage(state, now, retention):
    """Drop the usage records last accounted ``retention`` seconds ago.

    A unit still bound to its instance is kept whatever its age (its
    record is accounted again at the next probe); an instance left
    without a unit record goes.

    :returns: the ``instance/unit`` names pruned.
    """
    bound = {(u.get('instance'), key)
             for key, u in (state.get('bound') or {}).items()}
    pruned = []
    usage = state.get('usage') or {}
    for instance in sorted(usage):
        units = usage[instance].get('units') or {}
        old = [key for key, record in sorted(units.items())
               if (instance, key) not in bound and
               now - (record.get('last') or record.get('first') or now) >
               retention]
        for key in old:
            del units[key]
            pruned.append('%s/%s' % (instance, key))
        if old and not units:
            del usage[instance]
    return pruned


def idle_units(state, conf, now, after=None):
    """Bound units of running instances idle for ``idle_report_after``.

    :param after: seconds, instead of ``[lxd_accelerators]
        idle_report_after``.
    """
    if after is None:
        after = conf.lxd_accelerators.idle_report_after
    if not after:
        return []
    out = []
    for key, unit in sorted(state.get('bound', {}).items()):
        if not unit.get('running', True):
            continue
        last = unit.get('last_busy') or unit.get('since') or now
        if now - last >= after:
            out.append({'unit': key, 'pci': unit.get('pci'),
                        'instance': unit.get('instance'),
                        'project': unit.get('project'),
                        'resource_class': unit.get('resource_class'),
                        'idle_since': last, 'idle_s': now - last})
    return out


def gpu_states(state, pcis, conf, now):
    """PCI address -> one of :data:`STATES` (worst first)."""
    idle = {u['pci'] for u in idle_units(state, conf, now)}
    bound = {u.get('pci') for u in state.get('bound', {}).values()}
    dirty = {u.get('pci') for u in state.get('dirty', {}).values()}
    out = {}
    for pci in pcis:
        hold = state.get('holds', {}).get(pci)
        if hold and hold.get('gone'):
            out[pci] = STATE_GONE
        elif hold and hold.get('kind') == KIND_UNHEALTHY:
            out[pci] = STATE_UNHEALTHY
        elif hold:
            out[pci] = STATE_HELD
        elif pci in dirty:
            out[pci] = STATE_DIRTY
        elif pci in idle:
            out[pci] = STATE_IDLE
        elif pci in bound:
            out[pci] = STATE_BOUND
        else:
            out[pci] = STATE_FREE
    return out
