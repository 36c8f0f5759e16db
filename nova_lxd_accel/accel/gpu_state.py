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

"""The GPU state file: holds, units waiting for verification, usage.

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
    lifts by itself when the probe answers again).
``bound``
    unit key (see :mod:`.binding`) -> who holds it now: ``instance``,
    ``project``, ``container``, ``pci``, ``resource_class``, ``provider``,
    ``since``, ``last_busy``, ``running``.
``dirty``
    unit key -> a released unit not yet verified clean: ``pci``,
    ``resource_class``, ``provider``, ``instance``, ``since`` and
    ``holding`` (what the last probe still saw).
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
"""

import contextlib
import fcntl
import json
import os
import tempfile
import time

STATE_FILE = 'gpu-state.json'
LOCK_FILE = 'gpu-state.lock'
MAX_EVENTS = 200
KIND_OPERATOR = 'operator'
KIND_UNHEALTHY = 'unhealthy'
#: held by nova-compute because the probe cannot read the GPU; lifted by
#: itself once it can
KIND_UNPROBEABLE = 'unprobeable'


def empty_state():
    return {'version': 1, 'holds': {}, 'bound': {}, 'dirty': {},
            'baseline': {}, 'usage': {}, 'probe': {}, 'events': []}


class StateStore(object):
    """The state file of one host."""

    def __init__(self, directory):
        self.directory = directory
        self.path = os.path.join(directory, STATE_FILE)

    @classmethod
    def from_conf(cls, conf):
        return cls(conf.lxd_accelerators.state_dir)

    def load(self):
        """The state (an empty one when there is no file yet)."""
        state = empty_state()
        try:
            with open(self.path, encoding='utf-8') as f:
                data = json.load(f)
        except FileNotFoundError:
            return state
        except ValueError as exc:
            raise ValueError('%s is not valid JSON: %s' % (self.path, exc))
        if isinstance(data, dict):
            state.update(data)
        return state

    @contextlib.contextmanager
    def update(self):
        """Yield the state for changing; written back when the block ends.

        Nothing is written when the block raises.
        """
        os.makedirs(self.directory, exist_ok=True)
        with open(os.path.join(self.directory, LOCK_FILE), 'a') as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                state = self.load()
                yield state
                self._write(state)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _write(self, state):
        state['events'] = state.get('events', [])[-MAX_EVENTS:]
        fd, tmp = tempfile.mkstemp(prefix='.gpu-state.', dir=self.directory)
        try:
            with os.fdopen(fd, 'w', encoding='utf-8') as f:
                json.dump(state, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise


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
