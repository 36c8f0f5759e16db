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

"""The GPU ledger as a model: claims, releases, probes, hangs, restarts.

A Hypothesis ``RuleBasedStateMachine`` drives the real ledger code (the
gate, the release checks, the claims (``Claims.claim`` and
``Claims.rewriting``, a resize's or a migration's), the binding, the
state file, ``init_host``'s reconcile, the lifecycle watcher, the
operator's ``gpu forget`` and ``gpu hold`` and the probe's parsers) on a
fake clock, against the
project's fake daemon (:class:`tests.fixtures.fake_lxd.FakeLXDClient`) and a
scriptable nvidia-smi at the probe's one boundary (:func:`.nvidia_smi.run`:
the outputs of ``--query-gpu``, ``--query-compute-apps`` and ``-q`` made
from the model's processes; a failure; a hang, which costs the caller its
whole timeout plus :data:`.nvidia_smi.KILL_GRACE`, as the real ``run``
does: ``tests/unit/accel/inventory/test_nvidia_smi.py`` proves that on a
frozen process).

The host: a whole GPU, a GPU in MIG mode with two slices, a GPU shared in
two slots. Processes live in containers; a container removed while its
process survives leaves a leftover (the dirty unit to catch).

Rules interleave boots (claims), servers arriving by resize or migration,
deletes through nova, deletes behind nova's back, servers deleted while
nova-compute is down (their binding released by ``init_host``'s
reconcile, their container reaped later), processes appearing and
leaving, the probe failing, hanging, losing ``-q`` or recovering,
nvidia-smi reporting the MIG GPU lost (no row, no process) or listing it
again, periodic refreshes, re-checks, the re-check thread's schedule as
time passes, the watcher's poll, restarts of nova-compute (the gate built
again from its state file; ``init_host`` removes interrupted builds,
reconciles, and nova deletes again what it was deleting), nova-compute
down for ten hours, a daemon that lists a removed container until the
delete that removed it ends (Incus does, a moment), a removal that fails
(the gate told, as ``Lifecycle._release_gpus`` does; the instance stays,
an operator may ``lxc delete`` it later), the state file truncated, made
unreadable or a JSON list and later put back by the operator, the
operator's ``gpu forget`` (its check and its write two steps, any step
between) and ``gpu hold``/``release``; and any of them, or nova-compute
dying (a restart), can be scheduled to run at a yield point inside
another: once a boot made
its container (another claim runs whole there: two claims at once), right
after a claim takes its lock (before it lists the daemon), once it wrote
the binding (before it tells the gate), once a delete marked its units
and once it removed its container, after the gate lists the daemon, and
while the probe runs. No sleeps: the fake clock moves only when the model
moves it.

nvidia-smi stuck in the kernel runs the real :func:`.nvidia_smi.run`: it
starts a process that neither answers nor ends on SIGKILL
(:class:`WedgedPopen`, each wait costing its timeout on the model's
clock), abandons it to a real reaper thread, and refuses to start more
while ``MAX_STUCK`` are stuck; the kernel lets them go one at a time
(``stuck_nvidia_smi_ends``). The lifecycle watcher is driven both ways it
works: a poll (a listing, ``resync``) and its event stream (the daemon's
lifecycle events of every write since its last read, nova's own deletes
included, handled as one burst by ``handle_all``; also at any yield
point). Not modelled: a concurrent ``stop()`` of the watcher
(``test_watcher.py``: ``test_thread_follows_the_stream_and_stops_promptly``,
``test_stop_twice_at_once_is_safe``).

Invariants after every step:

* no unit is bound to two instances;
* no unit is bound while a process that is not its holder's is on it;
* a process of a removed container keeps its unit (on a shared card: a
  slot of the card) dirty, so no tenant of another project gets it;
* a unit clean and unbound for one re-check is allocatable (not dirty,
  reserved 0 in the provider tree);
* the provider tree's reserved is the holds plus the dirty units;
* after ``probe_failures_before_hold`` probes in a row that could not read
  everything (``-q`` included), the GPU is held;
* nothing ran past its deadline (a delete: ``release_wait`` + 1 s);
* at most ``MAX_STUCK`` nvidia-smi processes of one nova-compute are
  stuck in the kernel at once, and as many reaper threads;
* a held GPU is never bound: no claim picks a unit of a GPU held in the
  state file when it picks, nor any unit while the file cannot be read;
* when nova's delete of a container returns (nova then frees its
  allocation), each unit a process of it still runs on is reserved: dirty
  or its GPU held, in the view ``update_provider_tree`` reports;
* no busy time nor energy is counted for the hours nova-compute was down
  (a unit's ``busy_s`` and ``energy_s`` are at most the time it ran since
  the instance's boot);
* a dirty entry whose unit is clean and unbound leaves within the
  re-check schedule: over ``release_recheck_max_interval`` of the re-check
  thread's time with the probe answering, it is gone (no ``reserved``
  leaked forever; before the first periodic task after a start nothing
  runs the thread).

Counterexamples found (with one of the ledger's fixes removed) are
replayed step by step at the end of this module (``TestCounterexamples``).

``LEDGER_MODEL_EXAMPLES`` (default 160) and ``LEDGER_MODEL_STEPS`` (default
40) size the run; ``tox -e ledger-model`` runs a long profile by hand. The
seed is fixed (``derandomize``) so CI runs the same cases each time.
"""

import contextlib
import functools
import json
import os
import subprocess
import threading
import types

import fixtures
from hypothesis import database
from hypothesis import settings
from hypothesis import stateful
from hypothesis import strategies as st
from oslo_concurrency import lockutils
from oslo_config import cfg
import testtools

from nova_lxd_accel.accel.binding import claims
from nova_lxd_accel.accel.binding import reconcile
from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel.health import gate
from nova_lxd_accel.accel.health import gate_state
from nova_lxd_accel.accel.health import probe
from nova_lxd_accel.accel.inventory import nvidia_smi
from nova_lxd_accel.accel.inventory import provider_tree
from nova_lxd_accel.accel import units
from nova_lxd_accel import conf as lxd_conf
from nova_lxd_accel.container import identity
from nova_lxd_accel import exception
from nova_lxd_accel.instance import watcher
from nova_lxd_accel import placement_names
from tests.fixtures import fake_lxd
from tests.fixtures import fake_nvidia_smi

HOST = 'cmp1'
WHOLE = '0000:00:01.0'
MIGGPU = '0000:00:02.0'
SHARED = '0000:00:03.0'
MIG_RC = 'CUSTOM_MIG_1G_10GB'
#: three identical whole GPUs counted in one provider (pool_whole_gpus)
POOL_CARDS = ('0000:00:04.0', '0000:00:05.0', '0000:00:06.0')
RP_POOL = 'rp-pool'
RP = {WHOLE: 'rp-whole', MIGGPU: 'rp-mig', SHARED: 'rp-shared'}
MIG_UUIDS = ('MIG-aaaaaaaa-0000-4000-8000-000000000000',
             'MIG-aaaaaaaa-0000-4000-8000-000000000001')
#: what each flavor asks Placement for
FLAVORS = {'whole': (RP[WHOLE], 'PGPU', 1), 'mig': (RP[MIGGPU], MIG_RC, 1),
           'share': (RP[SHARED], placement_names.SHARE_RC, 1),
           # two cards of the pool in one request (a multi-unit claim)
           'pool2': (RP_POOL, 'PGPU', 2)}
PROJECTS = ('proj-a', 'proj-b')
#: GPUs the operator may hold with ``gpu hold`` (not the MIG GPU: its
#: unprobeable hold is the model's own invariant)
HOLDABLE = (WHOLE, SHARED) + POOL_CARDS
#: where an operation may be scheduled to run inside another
POINTS = ('boot-created', 'claim-lock', 'claim-recorded', 'gate-listing',
          'probe', 'release-marked', 'release-removed')
#: what may run there ('events': the watcher handles the daemon's events
#: that arrived since it last read its stream)
OPS = ('delete', 'delete-behind', 'refresh', 'boot', 'process-leaves',
       'restart', 'forget', 'hold', 'events')
#: the daemon's lifecycle event for each write of the fake daemon
#: (``FakeLXDClient.calls``)
EVENT_OF_CALL = {'create': 'instance-created', 'delete': 'instance-deleted',
                 'patch': 'instance-updated', 'put': 'instance-updated',
                 'copy': 'instance-created', 'rename': 'instance-renamed'}
EVENT_OF_STATE = {'start': 'instance-started', 'stop': 'instance-stopped',
                  'freeze': 'instance-paused', 'unfreeze': 'instance-resumed',
                  'restart': 'instance-restarted'}
SMI_TIMEOUT = 3
RELEASE_WAIT = 2.0


class Crashed(BaseException):
    """nova-compute dies at a yield point: what it was doing ends there.

    A BaseException: the ledger's "never raises" handlers catch Exception
    and would carry on as a live process does, a dead one does not.
    """


def crashing(rule):
    """A rule whose nova-compute may die inside it: restarted after."""
    @functools.wraps(rule)
    def run(self, *args, **kwargs):
        try:
            return rule(self, *args, **kwargs)
        except Crashed:
            self.restart_compute()
    return run


class WedgedPopen(object):
    """An nvidia-smi stuck in the kernel: no answer, and no end on SIGKILL.

    What :func:`.nvidia_smi.run` starts (as ``subprocess.Popen``) while the
    model's GPU is wedged. Each wait costs its timeout on the model's
    clock, as the real one would in seconds; ``ended`` is set when the
    kernel lets the process go (the model's :meth:`LedgerMachine.\
stuck_nvidia_smi_ends`), and only then does its reaper's ``wait`` return.
    """

    def __init__(self, clock, pid, args):
        self.clock = clock
        self.pid = pid
        self.args = args
        self.returncode = None
        self.ended = threading.Event()
        self.stdin = None
        self.stdout = open(os.devnull)
        self.stderr = open(os.devnull)

    def communicate(self, timeout=None):
        self.clock.sleep(timeout)
        raise subprocess.TimeoutExpired(self.args, timeout)

    def kill(self):
        pass            # SIGKILL waits for the GPU's driver

    def wait(self, timeout=None):
        self.ended.wait()
        self.returncode = -9
        return self.returncode

    def reaper(self):
        """The reaper thread :func:`.nvidia_smi.run` left, if alive."""
        name = 'nvidia-smi-reaper-%d' % self.pid
        return next((t for t in threading.enumerate() if t.name == name),
                    None)


def mig_devices(uuids=MIG_UUIDS):
    return tuple(devices.MigDevice(profile='1g.10gb', uuid=uuid, index=i,
                                   gpu_index=1)
                 for i, uuid in enumerate(uuids))


def host_gpus(mig_uuids=MIG_UUIDS):
    def gpu(pci, **kw):
        return devices.Gpu(pci_address=pci, vendor_id='10de',
                           product_id='2330', driver='nvidia',
                           model='NVIDIA H100 80GB HBM3', **kw)
    return [gpu(WHOLE), gpu(MIGGPU, mig_devices=mig_devices(mig_uuids)),
            gpu(SHARED, shared_slots=2, memory_mib=81559)] + [
                gpu(pci, numa_node=0) for pci in POOL_CARDS]


class Clock(object):
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class FakeSmi(object):
    """nvidia-smi as the model's processes make it answer.

    :ivar procs: pid -> (pci, MIG index or None, container name).
    :ivar mode: 'ok', 'fail', 'hang', 'q-fail' (only ``-q`` fails) or
        'wedged' (stuck in the kernel: the real :func:`.nvidia_smi.run`
        starts a :class:`WedgedPopen`, kills it, abandons it to a reaper).
    """

    def __init__(self, clock, model):
        self.clock = clock
        self.model = model
        self.procs = {}
        self.mode = 'ok'
        #: nvidia-smi reports the MIG GPU lost ("Unable to determine the
        #: device handle for GPU ...: GPU is lost"): no row, no process
        self.lost = False
        self.calls = 0
        #: probes in a row that could not read everything, those cut by
        #: their caller's deadline left out (they neither count nor reset)
        self.failed_in_a_row = 0
        #: the count before the probe under way, and its verdict so far
        self.before = 0
        self.verdict = 'ok'

    def run(self, path, args, timeout):
        self.calls += 1
        # first: a nova-compute that dies here never ran this probe
        self.model.at_yield_point('probe')
        if args[0].startswith('--query-gpu'):
            # a probe starts: its verdict is made of its calls' answers
            self.before = self.failed_in_a_row
            self.verdict = 'ok'
        answer = self.answer(path, args, timeout)
        rc, _out, err = answer
        if rc == nvidia_smi.FAILED_TO_RUN and timeout < SMI_TIMEOUT and \
                'did not answer within' in err:
            # cut by the caller's deadline (a delete's, a re-check's): no
            # verdict on nvidia-smi, the count stays (holds.cut_short)
            self.verdict = 'cut' if self.verdict == 'ok' else self.verdict
        elif rc != 0:
            self.verdict = 'failed'
        self.failed_in_a_row = {'ok': 0, 'cut': self.before,
                                'failed': self.before + 1}[self.verdict]
        return answer

    def answer(self, path, args, timeout):
        if self.mode == 'wedged':
            return self.model.run_wedged(path, args, timeout)
        if self.mode == 'hang' or (self.mode == 'q-fail' and
                                   args[0] == '-q'):
            # the real run: killed at the timeout, abandoned after grace
            self.clock.sleep(timeout + nvidia_smi.KILL_GRACE)
            return (nvidia_smi.FAILED_TO_RUN, '',
                    '%s did not answer within %s seconds' % (path, timeout))
        if self.mode == 'fail':
            return 1, '', 'Failed to initialize NVML: Unknown Error'
        if args[0].startswith('--query-gpu'):
            return 0, self.query_gpu(), ''
        if args[0].startswith('--query-compute-apps'):
            return 0, self.apps(), ''
        if args[0] == '-q':
            return 0, self.query_q(), ''
        return 2, '', 'unknown option'

    def used(self, pci, index=None):
        return sum(100 for p, (g, i, _c) in self.procs.items()
                   if g == pci and (index is None or i == index))

    def query_gpu(self):
        rows = [fake_nvidia_smi.QUERY_HEADER]
        if self.lost:
            rows.insert(0, 'Unable to determine the device handle for GPU '
                        '%s: GPU is lost' % MIGGPU)
        for n, pci in enumerate((WHOLE, MIGGPU, SHARED) + POOL_CARDS):
            if self.lost and pci == MIGGPU:
                continue
            rows.append(fake_nvidia_smi.gpu_row(
                n, pci, 'GPU-%d' % n, 'NVIDIA H100 80GB HBM3',
                used_mib=self.used(pci),
                mig_mode='Enabled' if pci == MIGGPU else 'Disabled'))
        return '\n'.join(rows) + '\n'

    def apps(self):
        rows = [fake_nvidia_smi.APPS_HEADER]
        for pid, (pci, _index, _c) in sorted(self.procs.items()):
            if self.lost and pci == MIGGPU:
                continue
            rows.append(fake_nvidia_smi.app_row(pci, pid, 'python3', 100))
        return '\n'.join(rows) + '\n'

    def query_q(self):
        lines = ['GPU 0000%s' % MIGGPU.upper(), '    MIG Mode',
                 '        Current                    : Enabled']
        for mig in self.model.gpus[1].mig_devices:
            # a slice recreated keeps its GPU instance: same gi, new UUID
            gi = 3 + mig.index
            lines += ['    MIG Device',
                      '        Index                  : %d' % mig.index,
                      '        GPU Instance ID        : %d' % gi,
                      '        Compute Instance ID    : 0',
                      '        FB Memory Usage',
                      '            Total              : 9856 MiB',
                      '            Used               : %d MiB' % self.used(
                          MIGGPU, mig.index)]
        lines.append('    Processes')
        for pid, (pci, index, _c) in sorted(self.procs.items()):
            if pci != MIGGPU:
                continue
            gi = 3 + index
            lines += ['        GPU instance ID        : %d' % gi,
                      '        Compute instance ID    : 0',
                      '        Process ID             : %d' % pid,
                      '            Type               : C',
                      '            Name               : python3',
                      '            Used GPU Memory    : 100 MiB']
        return '\n'.join(lines) + '\n'


def empty_ledger():
    return {'holds': {}, 'dirty': {}, 'bound': {}}


def model_conf(state_dir):
    conf = cfg.ConfigOpts()
    # registered under group *names*: oslo.config keeps overrides on the
    # OptGroup object, which the modules share with every ConfigOpts
    # (overrides set on it leaked into the tests that ran after the model)
    for group, opts in lxd_conf.list_opts():
        conf.register_opts(opts, group=group.name)
    conf([], default_config_files=[])
    group = 'lxd_accelerators'
    for name, value in (('state_dir', state_dir),
                        ('release_wait', RELEASE_WAIT),
                        ('release_recheck_interval', 1.0),
                        ('release_recheck_max_interval', 8.0),
                        ('probe_failures_before_hold', 2),
                        ('nvidia_smi_timeout', SMI_TIMEOUT),
                        ('idle_report_after', 0),
                        ('kernel_log', ''),
                        ('shared_gpus', ['%s:2' % SHARED])):
        conf.set_override(name, value, group=group)
    return conf


class LedgerMachine(stateful.RuleBasedStateMachine):
    """See the module docstring."""

    def __init__(self):
        super().__init__()
        self._fixtures = fixtures.TempDir()
        self._fixtures.setUp()
        self.conf = model_conf(os.path.join(self._fixtures.path, 'state'))
        self.clock = Clock()
        self.smi = FakeSmi(self.clock, self)
        self.client = fake_lxd.FakeLXDClient()
        self.owner = identity.Owner(host=HOST)
        #: how many times each MIG slice was recreated
        self.mig_generation = [0, 0]
        self.gpus = host_gpus()
        self.next_pid = 1000
        self.next_instance = 0
        #: instance uuid -> container name, of every live container
        self.live = {}
        #: containers removed behind nova's back that neither the watcher
        #: nor a refresh has seen yet
        self.unseen_gone = set()
        #: point -> ops waiting to run there (see at_yield_point)
        self.pending = {}
        self.in_yield = False
        #: fake seconds spent in scheduled operations
        self.yield_time = 0.0
        #: container -> its instance's project and flavor
        self.project_of = {}
        self.flavor_of = {}
        #: the instance the last rule picked
        self.picked = None
        #: units clean and unbound at the last re-check, and the state's
        #: seq then (a unit released after is not the re-check's)
        self.clean_at_recheck = set()
        self.recheck_seq = 0
        #: container -> its instance (every container the model made)
        self.uuid_of = {}
        #: containers of boots and deletes under way: a restart leaves
        #: them to the next nova-compute (an interrupted build is removed,
        #: a delete is done again)
        self.building = set()
        self.deleting = set()
        #: containers of instances nova deleted while nova-compute was
        #: down: still running, left to running_deleted_instance_action
        self.orphans = set()
        #: ``gpu forget`` checked (unit, entry), not yet written
        self.cli_forget = None
        #: claims that bound a unit of a GPU held when they picked
        self.held_bound = []
        #: the re-check thread: when it runs next, or None (not running)
        self.recheck_due = None
        #: the daemon lists a container its delete removed until that
        #: delete ends (Incus does, a moment)
        self.daemon_lags = False
        #: container -> its record, removed but still listed
        self.lingering = {}
        #: the state file's last good text while the model has it damaged
        self.state_backup = None
        #: (from, to) of each time nova-compute was down
        self.downtime = []
        #: instance -> when its boot began
        self.born = {}
        #: nvidia-smi processes stuck in the kernel, of this nova-compute
        #: and of every one before (WedgedPopen)
        self.wedged = []
        self.all_wedged = []
        self.real_run = nvidia_smi.run
        nvidia_smi.reset_abandoned()
        #: how many of the fake daemon's writes the watcher's event stream
        #: has delivered (``FakeLXDClient.calls``)
        self.events_read = 0
        self.patch = fixtures.MockPatchObject(nvidia_smi, 'run',
                                              self.smi.run)
        self.patch.setUp()
        self.start_compute()

    def teardown(self):
        self.watcher.stop()
        self.gate.stop()
        self.patch.cleanUp()
        for proc in self.all_wedged:
            proc.ended.set()
            reaper = proc.reaper()
            if reaper is not None:
                reaper.join()
            proc.stdout.close()
            proc.stderr.close()
        nvidia_smi.reset_abandoned()
        self._fixtures.cleanUp()

    # -- the host's parts, built as nova-compute builds them --------------

    def start_compute(self):
        """nova-compute starts: the gate from its state file, no memory."""
        host_probe = probe.HostProbe('nvidia-smi', timeout=SMI_TIMEOUT,
                                     clock=self.clock,
                                     monotonic=self.clock)
        self.gate = gate.GpuGate(
            self.conf, self.list_containers, lambda: self.gpus,
            host_probe=host_probe, clock=self.clock, sleep=self.clock.sleep,
            monotonic=self.clock, attribute=self.attribute,
            background=False)
        # the re-check thread, on the model's clock (see time_passes)
        self.recheck_due = None
        self.gate.release_check.ensure = self.rechecker_wanted
        #: whether this gate refreshed (the first periodic task ran)
        self.refreshed = False
        refresh = self.gate.refresh

        def refreshing():
            # one that failed (the state file unreadable) started nothing
            snapshot = refresh()
            self.refreshed = True
            return snapshot
        self.gate.refresh = refreshing
        self.claims = claims.Claims(
            self.client, self.conf, types.SimpleNamespace(
                device_for_provider=self.device_for_provider,
                all_devices=lambda: self.gpus), gate=types.SimpleNamespace(
                unavailable_units=self.gate.unavailable_units,
                dirty_share_projects=self.gate.dirty_share_projects,
                note_bound=self.note_bound,
                check_bindable=self.gate.check_bindable))
        # init_host: interrupted builds removed, then the bindings of
        # instances nova no longer has here released (driver.init_host)
        for name in sorted(self.building):
            self._destroy(name)
            self.building.discard(name)
        nova_has = set(self.live) | {self.uuid_of[n] for n in self.deleting}
        reconcile.reconcile(self.client, HOST, nova_has,
                            on_release=self.gate.note_destroy)
        self.watcher = watcher.LifecycleWatcher(
            self.client, self.owner, 1, lambda event: None,
            gate=self.gate)
        # subscribed to the daemon's events, then listed (watcher._run)
        self.events_read = len(self.client.calls)
        self.watcher.resync()
        self.watched = set(self.live.values())
        # nova's _init_instance: a delete under way is done again
        for name in sorted(self.deleting):
            self._destroy(name)

    def rechecker_wanted(self):
        """``ReleaseCheck.ensure`` on the model's clock.

        As the thread: started when not running, its wait from
        ``release_recheck_interval``; a release while it runs starts
        its schedule again (``ReleaseCheck._loop``).
        """
        start = self.conf.lxd_accelerators.release_recheck_interval
        if self.recheck_due is None:
            self.gate.recheck_interval = None
            self.recheck_due = self.clock.now + start
        else:
            self.gate.release_check._again = True
            self.gate.recheck_interval = None
            self.recheck_due = min(self.recheck_due, self.clock.now + start)

    def note_bound(self, container, instance, records):
        """The claim's ``note_bound``: what it picked, under its lock."""
        # the state file's holds (an operator's release there is read by
        # the claim at once); a file that cannot be read holds every GPU
        stored = self.stored()
        held = set(stored['holds']) if stored is not None else None
        for record in records:
            if held is None or record.get('pci') in held:
                self.held_bound.append((
                    container, record.get('unit'), record.get('pci')
                    if held is not None else 'the state file unreadable'))
        self.at_yield_point('claim-recorded')
        self.gate.note_bound(container, instance, records)

    def device_for_provider(self, rp_uuid):
        """The inventory's (the claim asks ``check_bindable`` of it)."""
        if rp_uuid == RP_POOL:
            return devices.GpuPool(gpus=tuple(
                g for g in self.gpus if g.pci_address in POOL_CARDS))
        return {RP[g.pci_address]: g for g in self.gpus
                if g.pci_address in RP}.get(rp_uuid)

    def list_containers(self):
        records = self.client.list_containers()
        listed = {r['name'] for r in records}
        records += [dict(r) for n, r in sorted(self.lingering.items())
                    if n not in listed]
        self.at_yield_point('gate-listing')
        return records

    def state_damaged(self):
        """Whether the state file is there but not a JSON object."""
        try:
            with open(self.gate.store.path, encoding='utf-8') as f:
                return not isinstance(json.load(f), dict)
        except FileNotFoundError:
            return False
        except (OSError, ValueError):
            return True

    def stored(self):
        """The state file, or None while the model has it damaged."""
        if self.state_damaged():
            return None
        return self.gate.store.load()

    def run_wedged(self, path, args, timeout):
        """The real :func:`.nvidia_smi.run` on a GPU stuck in the kernel."""
        def popen(argv, **_kwargs):
            proc = WedgedPopen(self.clock, 90000 + len(self.all_wedged),
                               argv)
            self.wedged.append(proc)
            self.all_wedged.append(proc)
            return proc
        with fixtures.MockPatchObject(nvidia_smi.subprocess, 'Popen', popen):
            return self.real_run(path, args, timeout)

    def attribute(self, pid):
        proc = self.smi.procs.get(pid)
        return proc[2] if proc else None

    # -- yield points ------------------------------------------------------

    def at_yield_point(self, point):
        """Run what the model scheduled at ``point`` (once, not nested)."""
        ops = self.pending.get(point)
        if not ops or self.in_yield:
            return
        self.in_yield = True
        start = self.clock.now
        try:
            while ops:
                ops.pop(0)()
        finally:
            self.in_yield = False
            # not the time of the operation they ran inside
            self.yield_time += self.clock.now - start

    def claim_lock(self):
        """The claim's lock, with a yield point right after it is taken."""
        model = self

        class Locks(object):
            @staticmethod
            @contextlib.contextmanager
            def lock(name):
                with lockutils.lock(name):
                    # under the claim lock, before the claim reads anything
                    model.at_yield_point('claim-lock')
                    yield
        return fixtures.MockPatchObject(claims, 'lockutils', Locks)

    # -- what the model knows ---------------------------------------------

    def bound(self):
        """Unit key -> containers holding it, from the daemon itself."""
        out = {}
        for record in self.client.list_all_instances():
            for unit in identity.recorded_units(record.get('config')):
                out.setdefault(unit['unit'], []).append(record['name'])
        return out

    def unit_of(self, key):
        """(pci, MIG index or None) of a unit key."""
        if key.startswith('pci:'):
            return key[4:], None
        if key.startswith('share:'):
            return key[6:].split('/')[0], None
        for mig in self.gpus[1].mig_devices:
            if key == units.mig_unit_key(self.gpus[1], mig):
                return MIGGPU, mig.index
        return MIGGPU, -1       # a slice recreated away

    def foreign_processes(self, key, holders):
        """Processes on unit ``key`` that its live holders do not own."""
        pci, index = self.unit_of(key)
        if pci == SHARED:
            # a process on the card of a container not holding it now,
            # from another project than a holder's (one project shares
            # a card: its own leftovers are its own)
            owners = {n for k, names in self.bound().items()
                      if self.unit_of(k)[0] == SHARED for n in names}
            projects = {self.project_of.get(n) for n in holders}
            return [pid for pid, (g, i, c) in self.smi.procs.items()
                    if g == pci and c not in owners and
                    (not holders or self.project_of.get(c) not in projects)]
        return [pid for pid, (g, i, c) in self.smi.procs.items()
                if g == pci and (index is None or i == index) and
                c not in holders]

    # -- rules ---------------------------------------------------------------

    def _boot(self, flavor, project, via='claim'):
        """A spawn, or a server arriving by resize or migration.

        ``via`` 'rewriting': ``Claims.rewriting``, the body writing the
        whole new config under the lock, as a resize or a migration does.
        """
        uuid = '00000000-0000-4000-8000-%012d' % self.next_instance
        self.next_instance += 1
        name = self.owner.container_name(uuid)
        self.born[uuid] = self.clock.now
        self.client.create_container(
            name, {identity.KEY_HOST: HOST,
                   identity.KEY_INSTANCE_UUID: uuid}, {}, [], {})
        self.uuid_of[name] = uuid
        self.building.add(name)
        # created, not claimed yet: another boot's claim may run whole here
        self.at_yield_point('boot-created')
        rp, rc, count = FLAVORS[flavor]
        allocations = {rp: {'resources': {rc: count}}}
        instance = types.SimpleNamespace(
            uuid=uuid, project_id=project,
            flavor=types.SimpleNamespace(name=flavor, extra_specs={}))
        try:
            with self.claim_lock():
                if via == 'claim':
                    self.claims.claim(name, allocations, instance)
                else:
                    with self.claims.rewriting(name, allocations,
                                               instance) as bound:
                        claims.record(self.client, name, bound, instance)
        except (exception.AcceleratorUnavailable,
                exception.AcceleratorNotBindable,
                exception.SharedGpuOtherProject, exception.GpuHeld):
            # nova's build fails: the container is removed, nothing held
            self.client.delete_container(name)
            self.building.discard(name)
            return
        self.building.discard(name)
        self.client.change_state(name, 'start')
        self.live[uuid] = name
        self.project_of[name] = project
        self.flavor_of[name] = flavor

    @stateful.initialize(counts=st.tuples(st.integers(0, 1),
                                          st.integers(0, 2),
                                          st.integers(0, 2),
                                          st.integers(0, 1)),
                         projects=st.lists(st.sampled_from(PROJECTS),
                                           min_size=5, max_size=5))
    def busy_host(self, counts, projects):
        """Instances of each flavor, each with a process on its unit."""
        flavors = [f for f, n in zip(('whole', 'mig', 'share', 'pool2'),
                                     counts)
                   for _ in range(n)]
        for flavor, project in zip(flavors, projects):
            self._boot(flavor, project)
        for name in list(self.live.values()):
            self._start_process(name, 0)

    def _start_process(self, name, which):
        keys = sorted(k for k, names in self.bound().items()
                      if name in names)
        if not keys:
            return
        pci, index = self.unit_of(keys[which % len(keys)])
        self.smi.procs[self.next_pid] = (pci, index, name)
        self.next_pid += 1

    @stateful.rule(flavor=st.sampled_from(sorted(FLAVORS)),
                   project=st.sampled_from(PROJECTS), busy=st.booleans())
    @crashing
    def boot(self, flavor, project, busy):
        """A spawn; ``busy``: its instance starts a CUDA process at once."""
        self._boot(flavor, project)
        names = [n for u, n in self.live.items()
                 if u == self.uuid_of_last()]
        if busy and names:
            self._start_process(names[0], 0)

    def uuid_of_last(self):
        return '00000000-0000-4000-8000-%012d' % (self.next_instance - 1)

    @stateful.rule(flavor=st.sampled_from(sorted(FLAVORS)),
                   project=st.sampled_from(PROJECTS))
    @crashing
    def arrives_by_resize_or_migration(self, flavor, project):
        """``Claims.rewriting``: the claim of a resize or a migration."""
        self._boot(flavor, project, via='rewriting')

    def _pick(self, data):
        if not self.live:
            return None
        self.picked = data.draw(st.sampled_from(sorted(self.live)))
        return self.picked

    @stateful.precondition(lambda self: self.live)
    @stateful.rule(data=st.data(), leftover=st.booleans())
    @crashing
    def delete(self, data, leftover):
        """nova deletes the instance (the driver's destroy path)."""
        uuid = self._pick(data)
        if uuid is None:
            return
        name = self.live.pop(uuid)
        self._survive(name, leftover)
        start = self.clock.now - self.yield_time
        self._destroy(name)
        took = self.clock.now - self.yield_time - start
        assert took <= RELEASE_WAIT + 1.0, (
            'the delete waited %.1f s for its GPUs' % took)

    def _destroy(self, name):
        """The driver's destroy: mark, remove, verify (Lifecycle's order)."""
        self.deleting.add(name)
        released = self.gate.note_destroy(
            lambda: self.client.get_container(name))
        self.at_yield_point('release-marked')
        if self.daemon_lags and self.client.get_container(name):
            self.lingering[name] = self.client.get_container(name)
        self.client.remove_container(name)
        try:
            self.at_yield_point('release-removed')
            self.gate.verify_release(released)
        finally:
            self.lingering.pop(name, None)
        self.deleting.discard(name)
        self.allocation_dropped(name)

    def allocation_dropped(self, name):
        """nova's delete of ``name`` returned: Placement frees its units.

        A unit a process of the container still runs on must then be
        reserved (dirty, or its GPU held, in the view
        ``update_provider_tree`` reports), or Placement offers it. While
        the state file cannot be read the claims refuse every GPU
        (:meth:`note_bound` checks that).
        """
        if self.state_damaged():
            return
        view = self.gate.view()
        for pid, (pci, index, owner) in sorted(self.smi.procs.items()):
            if owner != name or pci in view.holds:
                continue
            keys = self.unit_keys(pci, index)
            assert keys & set(view.dirty), (
                'nova deleted %s and process %d still runs on %s, but none '
                'of %s is reserved' % (name, pid, pci, sorted(keys)))

    def unit_keys(self, pci, index):
        """The units a process on ``pci`` (MIG slice ``index``) is on."""
        if pci == SHARED:
            return {units.share_key(SHARED, slot) for slot in (0, 1)}
        if index is None:
            return {'pci:' + pci}
        return {units.mig_unit_key(self.gpus[1], m)
                for m in self.gpus[1].mig_devices if m.index == index}

    def _remove_behind(self, name):
        """``lxc delete``: the daemon only; nova and the gate not told."""
        self.client.remove_container(name)
        self.unseen_gone.add(name)

    def _survive(self, name, leftover):
        """The container's processes end with it unless ``leftover``."""
        if not leftover:
            for pid in [p for p, v in self.smi.procs.items()
                        if v[2] == name]:
                del self.smi.procs[pid]

    @stateful.precondition(lambda self: self.live)
    @stateful.rule(data=st.data(), leftover=st.booleans())
    def delete_behind_novas_back(self, data, leftover):
        uuid = self._pick(data)
        if uuid is None:
            return
        name = self.live.pop(uuid)
        self._survive(name, leftover)
        self._remove_behind(name)

    @stateful.rule()
    def watcher_polls(self):
        # the watcher tells of a container gone since its last listing;
        # one made and removed between two of its polls it never saw (the
        # next refresh finds its units)
        watched = set(self.watched)
        self.watcher.resync()
        self.unseen_gone -= watched
        self.watched = set(self.live.values())

    @stateful.precondition(lambda self: self.live)
    @stateful.rule(data=st.data())
    def process_appears(self, data):
        """An instance starts a CUDA process on one of its units."""
        self._start_process(self.live[self._pick(data)], 0)

    @stateful.precondition(lambda self: self.smi.procs)
    @stateful.rule(data=st.data())
    def process_leaves(self, data):
        if not self.smi.procs:
            return
        del self.smi.procs[data.draw(st.sampled_from(
            sorted(self.smi.procs)))]

    @stateful.rule(mode=st.sampled_from(('ok', 'fail', 'hang', 'q-fail',
                                         'wedged')))
    def probe_becomes(self, mode):
        self.smi.mode = mode

    @stateful.precondition(lambda self: any(
        not p.ended.is_set() for p in self.all_wedged))
    @stateful.rule()
    def stuck_nvidia_smi_ends(self):
        """The kernel lets the oldest stuck nvidia-smi go; it is reaped."""
        stuck = [p for p in self.all_wedged if not p.ended.is_set()]
        if not stuck:
            return
        stuck[0].ended.set()
        reaper = stuck[0].reaper()
        if reaper is not None:
            # the reaper's own time: the next probe may start one again
            reaper.join()

    @stateful.rule()
    def watcher_reads_events(self):
        """The watcher's event stream: what the daemon did since its last read.

        The daemon's lifecycle events of every write since the watcher
        last read its stream (nova's own deletes included), handled as one
        burst (``LifecycleWatcher.handle_all``), as its thread does.
        """
        calls = self.client.calls[self.events_read:]
        self.events_read += len(calls)
        events = [self._event(call) for call in calls]
        events = [e for e in events if e is not None]
        if not events:
            return
        self.watcher.handle_all(events)
        for event in events:
            for name in watcher.event_instances(event):
                if name in self.client.records:
                    if name in self.live.values():
                        self.watched.add(name)
                elif name in self.watched:
                    # the watcher knew it: it told the gate it is gone
                    self.watched.discard(name)
                    self.unseen_gone.discard(name)

    @staticmethod
    def _event(call):
        """The daemon's lifecycle event of one fake daemon write."""
        method, name = call[0], call[1]
        action = EVENT_OF_STATE.get(call[2]) if method == 'state' else \
            EVENT_OF_CALL.get(method)
        if action is None:
            return None
        context = {}
        if method in ('copy', 'rename'):
            context = {'old_name': name} if method == 'rename' else {}
            name = call[2]
        return {'type': 'lifecycle', 'project': 'default',
                'metadata': {'action': action, 'context': context,
                             'source': '/1.0/instances/%s' % name}}

    @stateful.rule()
    @crashing
    def periodic_refresh(self):
        start = self.clock.now - self.yield_time
        # a container removed during this refresh, after its listing, is
        # not seen by it (the model's own false alarm, issue 46)
        seen = set(self.unseen_gone)
        if self.gate.maybe_refresh() is not None:
            self.unseen_gone -= seen
        took = self.clock.now - self.yield_time - start
        # three nvidia-smi calls at most, each bounded
        assert took <= 3 * (SMI_TIMEOUT + nvidia_smi.KILL_GRACE), took

    @stateful.rule()
    @crashing
    def recheck(self):
        clean = self.clean_units()
        stored = self.stored()
        self.recheck_seq = (stored or {}).get('seq', 0)
        start = self.clock.now - self.yield_time
        self.gate.recheck()
        took = self.clock.now - self.yield_time - start
        assert took <= SMI_TIMEOUT + 1.0, took
        self.clean_at_recheck = clean if self.smi.mode == 'ok' and \
            stored is not None else set()

    @stateful.rule()
    def restart_compute(self):
        # what the old process was in the middle of dies with it
        self.pending = {}
        self.watcher.stop()
        self.gate.stop()
        self.forget_stuck_children()
        self.start_compute()
        self.clean_at_recheck = set()

    def forget_stuck_children(self):
        """A new nova-compute process knows no stuck child of the old one.

        Those stay stuck in the kernel (the model's GPU still wedged) and
        end when it lets them go; the new process may start its own.
        """
        self.wedged = []
        nvidia_smi.reset_abandoned()

    @stateful.precondition(lambda self: self.live)
    @stateful.rule(data=st.data())
    def deleted_while_down(self, data):
        """nova deletes a server while nova-compute is down.

        Its container keeps running (left to nova's
        ``running_deleted_instance_action``), with its processes; the
        restarted nova-compute's ``init_host`` releases its binding
        (:func:`.reconcile.reconcile`), or keeps it while the state file
        is damaged and cannot record the release.
        """
        uuid = self._pick(data)
        if uuid is None:
            return
        self.orphans.add(self.live.pop(uuid))
        self.restart_compute()

    @stateful.precondition(lambda self: self.orphans)
    @stateful.rule(data=st.data(), leftover=st.booleans())
    @crashing
    def orphan_reaped(self, data, leftover):
        """nova's ``running_deleted_instance_action = reap``.

        The driver's destroy of a container nova no longer has.
        """
        if not self.orphans:
            return
        name = data.draw(st.sampled_from(sorted(self.orphans)))
        self.orphans.discard(name)
        self._survive(name, leftover)
        self._destroy(name)

    @stateful.rule(which=st.integers(0, 7))
    def operator_checks_a_unit_to_forget(self, which):
        """``gpu forget``'s first half: the check.

        It reads the entry, lists the daemon (refused while a live
        container holds the unit) and the operator ends what was left by
        other means; the write (:meth:`operator_forgets`) comes later, any
        step may run between.
        """
        stored = self.stored()
        if stored is None:
            return          # the command cannot read the file: exits 1
        dirty = stored['dirty']
        if not dirty:
            return
        key = sorted(dirty)[which % len(dirty)]
        if key in self.bound():
            return          # the command refuses it
        pci, index = self.unit_of(key)
        for pid in [p for p, (g, i, c) in self.smi.procs.items()
                    if g == pci and (index is None or i == index) and
                    c not in self.live.values()]:
            del self.smi.procs[pid]
        self.cli_forget = (key, dict(dirty[key]))

    @stateful.precondition(lambda self: self.cli_forget)
    @stateful.rule()
    def operator_forgets(self):
        """``gpu forget``'s write: only the entry it checked."""
        if self.cli_forget is None:
            return
        key, entry = self.cli_forget
        self.cli_forget = None
        try:
            gate_state.forget(self.gate.store, key, 'checked by hand',
                              checked=entry)
        except (gate_state.EntryChanged, gate_state.StateUnreadable):
            pass        # the command exits 1: nothing forgotten

    @stateful.rule(pci=st.sampled_from(HOLDABLE), hold=st.booleans())
    def operator_holds(self, pci, hold):
        """``gpu hold`` / ``gpu release``.

        The state file; nova-compute's view follows at its next period.
        """
        stored = self.stored()
        if stored is None:
            return          # the command cannot read the file: exits 1
        if hold:
            gate_state.hold(self.gate.store, pci, 'by hand')
        elif (stored['holds'].get(pci) or {}).get(
                'kind') == gate_state.KIND_OPERATOR:
            gate_state.release(self.gate.store, pci, 'by hand')

    @stateful.rule(seconds=st.sampled_from((1.0, 4.0, 9.0)))
    @crashing
    def time_passes(self, seconds):
        """The re-check thread runs its schedule for ``seconds``.

        With ``seconds`` over ``release_recheck_max_interval``, a dirty
        unit clean and unbound all along leaves the list (no reserved
        leaked): checked here.
        """
        self.pending = {}
        end = self.clock.now + seconds
        state = self.stored() or empty_ledger()
        clean = self.clean_units()
        window = seconds > self.conf.lxd_accelerators. \
            release_recheck_max_interval and self.smi.mode == 'ok' and \
            not self.state_damaged()
        watch = {k for k in state['dirty'] if k in clean and
                 self.unit_of(k)[0] not in state['holds']}
        running = self.recheck_due is not None
        while self.recheck_due is not None and self.recheck_due <= end:
            self.clock.now = max(self.clock.now, self.recheck_due)
            _freed, left = self.gate.recheck()
            if left == set() and not self.gate.release_check._again:
                self.recheck_due = None
            else:
                self.recheck_due = self.clock.now + (
                    self.gate.recheck_interval or
                    self.conf.lxd_accelerators.release_recheck_interval)
        self.clock.now = max(self.clock.now, end)
        if not window or (not running and not self.refreshed):
            # nothing verifies before the first periodic task after a
            # start (it runs the first refresh, which starts the thread)
            return
        state = self.stored()
        if state is None:
            return
        leaked = sorted(k for k in watch & set(state['dirty'])
                        if k in self.clean_units() and
                        self.unit_of(k)[0] not in state['holds'])
        assert not leaked, (
            '%s clean and unbound for %.0f s and still dirty (re-check '
            'thread %s)' % (leaked, seconds,
                            'running' if running else 'not running'))

    @stateful.rule(index=st.sampled_from((0, 1)))
    def operator_recreates_mig_slice(self, index):
        """A free slice destroyed and made again: a new UUID, same place."""
        mig = self.gpus[1].mig_devices[index]
        key = units.mig_unit_key(self.gpus[1], mig)
        if key in self.bound() or any(
                g == MIGGPU and i == index
                for g, i, _c in self.smi.procs.values()):
            return          # nvidia-smi refuses to destroy a busy slice
        self.mig_generation[index] += 1
        uuids = list(m.uuid for m in self.gpus[1].mig_devices)
        uuids[index] = 'MIG-bbbbbbbb-%04d-4000-8000-%012d' % (
            self.mig_generation[index], index)
        self.gpus = host_gpus(tuple(uuids))

    @stateful.rule(lags=st.booleans())
    def daemon_lists_removed_containers(self, lags):
        """The daemon lists a container a moment after removing it.

        Incus does: the listings of the delete that removed it (its
        verification) still show it (see :meth:`_destroy`).
        """
        self.daemon_lags = lags

    @stateful.precondition(lambda self: self.live)
    @stateful.rule(data=st.data())
    @crashing
    def removal_fails(self, data):
        """nova's delete fails: the daemon does not remove the container.

        ``Lifecycle._release_gpus``' order: the units marked, the removal
        raises, the gate told (``removal_failed``), then the verification.
        The instance stays nova's (ERROR), its container and processes
        stay; an operator may ``lxc delete`` it later
        (:meth:`delete_behind_novas_back`).
        """
        uuid = self._pick(data)
        if uuid is None:
            return
        name = self.live[uuid]
        released = self.gate.note_destroy(
            lambda: self.client.get_container(name))
        self.at_yield_point('release-marked')
        self.gate.removal_failed(released)
        self.gate.verify_release(released)

    @stateful.precondition(lambda self: self.state_backup is None)
    @stateful.rule(how=st.sampled_from(('truncated', 'unreadable',
                                        'list')))
    def state_file_damaged(self, how):
        """The state file cut short, unreadable, or JSON but not an object.

        'unreadable': a read fails with an ``OSError`` (a directory in its
        place: the tests may run as root, whom modes do not stop).
        """
        path = self.gate.store.path
        if self.state_backup is not None or not os.path.isfile(path):
            return
        with open(path, encoding='utf-8') as f:
            self.state_backup = f.read()
        if how == 'unreadable':
            os.unlink(path)
            os.mkdir(path)
        else:
            with open(path, 'w', encoding='utf-8') as f:
                f.write(self.state_backup[:len(self.state_backup) // 2]
                        if how == 'truncated' else '[]')
        self.clean_at_recheck = set()

    @stateful.precondition(lambda self: self.state_backup is not None)
    @stateful.rule()
    def operator_repairs_state_file(self):
        """The operator puts the last good state file back.

        What nova-compute could not write meanwhile is not in it (failed
        probes included: the model counts them again).
        """
        path = self.gate.store.path
        if self.state_backup is None:
            return
        if self.state_damaged():
            if os.path.isdir(path):
                os.rmdir(path)
            with open(path, 'w', encoding='utf-8') as f:
                f.write(self.state_backup)
        self.state_backup = None
        self.smi.failed_in_a_row = 0
        self.clean_at_recheck = set()
        # the units of containers gone meanwhile: recorded bound until the
        # next refresh or the watcher sees them gone
        self.unseen_gone |= set(self.uuid_of) - set(self.live.values())

    @stateful.rule(lost=st.booleans())
    def mig_gpu_lost(self, lost):
        """nvidia-smi reports the MIG GPU lost (or lists it again)."""
        self.smi.lost = lost

    @stateful.rule()
    def compute_down_for_hours(self):
        """nova-compute is down for 10 hours, then starts again.

        The processes run on meanwhile; no refresh accounts the hours
        (:meth:`usage_knows_no_downtime`).
        """
        self.pending = {}
        self.watcher.stop()
        self.gate.stop()
        self.forget_stuck_children()
        start = self.clock.now
        self.clock.now += 10 * 3600
        self.downtime.append((start, self.clock.now))
        self.start_compute()
        self.clean_at_recheck = set()

    @stateful.rule(point=st.sampled_from(POINTS),
                   op=st.sampled_from(OPS),
                   flavor=st.sampled_from(sorted(FLAVORS)),
                   data=st.data())
    def schedule(self, point, op, flavor, data):
        """Run ``op`` at the next pass through ``point`` (lock edges).

        'restart': nova-compute dies there (:class:`Crashed`); 'forget'
        and 'hold': the operator's commands, from another process.
        """
        if op == 'boot' and point in ('claim-lock', 'claim-recorded'):
            return          # a claim inside a claim waits for its lock
        uuid = self._pick(data)
        if flavor == 'same':
            flavor = self.flavor_of.get(self.live.get(uuid), 'mig')
        if op == 'delete' and uuid is not None:
            self.pending.setdefault(point, []).append(
                lambda: self._scheduled_delete(uuid))
        elif op == 'delete-behind' and uuid is not None:
            self.pending.setdefault(point, []).append(
                lambda: self._scheduled_behind(uuid))
        elif op == 'refresh':
            # late bound: the gate of the nova-compute running then
            self.pending.setdefault(point, []).append(
                lambda: self.gate.maybe_refresh())
        elif op == 'boot':
            self.pending.setdefault(point, []).append(
                lambda: self._boot(flavor, PROJECTS[0]))
        elif op == 'process-leaves' and self.smi.procs:
            pid = data.draw(st.sampled_from(sorted(self.smi.procs)))
            self.pending.setdefault(point, []).append(
                lambda: self.smi.procs.pop(pid, None))
        elif op == 'restart':
            self.pending.setdefault(point, []).append(self._crash)
        elif op == 'forget':
            which = data.draw(st.integers(0, 7))
            self.pending.setdefault(point, []).append(
                lambda: self.operator_checks_a_unit_to_forget(which) or
                self.operator_forgets())
        elif op == 'hold':
            pci = data.draw(st.sampled_from(HOLDABLE))
            self.pending.setdefault(point, []).append(
                lambda: self.operator_holds(pci, True))
        elif op == 'events':
            # late bound: the watcher of the nova-compute running then
            self.pending.setdefault(point, []).append(
                self.watcher_reads_events)

    def _crash(self):
        raise Crashed()

    @stateful.rule(outer=st.sampled_from(('boot', 'delete', 'refresh',
                                          'recheck')),
                   where=st.integers(0, 3),
                   op=st.sampled_from(OPS),
                   flavor=st.sampled_from(sorted(FLAVORS) + ['same']),
                   project=st.sampled_from(PROJECTS),
                   data=st.data())
    @crashing
    def interleave(self, outer, where, op, flavor, project, data):
        """``op`` inside ``outer``, where ``outer`` takes or drops a lock.

        A boot: its container made, before its claim (another claim runs
        whole there: two claims at once), right after the claim takes its
        lock, or once it wrote the binding before it tells the gate; a
        delete: once its units are marked, once its container is gone,
        when it lists the daemon or while it probes; a refresh or a
        re-check: after it lists the daemon or while it probes.
        """
        point = {'boot': ('boot-created', 'claim-lock', 'claim-recorded'),
                 'delete': ('release-marked', 'release-removed',
                            'gate-listing', 'probe')}.get(
            outer, ('gate-listing', 'probe'))
        point = point[where % len(point)]
        self.pending = {}
        before = dict(self.live)
        self.schedule(point, op, flavor, data)
        if flavor == 'same':
            # the flavor of the instance the inner operation picked (a
            # user deleting a server and booting the same flavor again)
            picked = self.picked if self.picked in before else None
            flavor = self.flavor_of.get(before.get(picked), 'mig')
        if outer == 'boot':
            self.boot(flavor, project, False)
        elif outer == 'delete':
            if self.live:
                self.delete(data, data.draw(st.booleans()))
        elif outer == 'refresh':
            # a container removed after the refresh listed the daemon is
            # not seen by this refresh
            seen = set(self.unseen_gone)
            if self.gate.maybe_refresh() is not None:
                self.unseen_gone -= seen
        else:
            self.recheck()
        self.pending = {}

    def _scheduled_delete(self, uuid):
        name = self.live.pop(uuid, None)
        if name is None:
            return
        self._survive(name, True)
        self._destroy(name)

    def _scheduled_behind(self, uuid):
        name = self.live.pop(uuid, None)
        if name is None:
            return
        self._survive(name, True)
        self._remove_behind(name)

    # -- invariants -------------------------------------------------------

    def clean_units(self):
        """Units no live container holds and no process is on."""
        bound = self.bound()
        out = set()
        for gpu in self.gpus:
            if self.smi.lost and gpu.pci_address == MIGGPU:
                continue        # nvidia-smi cannot tell: not "clean"
            for key in [k for keys in units.provider_units(gpu).values()
                        for k in keys]:
                if key in bound:
                    continue
                if self.foreign_processes(key, ()):
                    continue
                out.add(key)
        return out

    @stateful.invariant()
    def usage_knows_no_downtime(self):
        """No busy time nor energy counted for hours nova-compute was down.

        A unit's ``busy_s`` and ``energy_s`` are at most the time
        nova-compute ran since its instance's boot began.
        """
        state = self.stored()
        if state is None:
            return
        for uuid, usage in sorted(state['usage'].items()):
            born = self.born[uuid]
            for key, record in sorted(usage['units'].items()):
                last = record.get('last', born)
                up = (last - born) - sum(
                    max(0.0, min(last, end) - max(born, start))
                    for start, end in self.downtime)
                for name in ('busy_s', 'energy_s'):
                    assert record.get(name, 0.0) <= up + 1e-6, (
                        '%s of %s counts %.0f s %s, nova-compute ran %.0f s '
                        'of them (down: %s)' % (key, uuid, record[name], name,
                                                up, self.downtime))

    @stateful.invariant()
    def a_held_gpu_is_never_bound(self):
        """No claim picks a unit of a GPU held when it picked.

        A hold of nova-compute's view or of the state file.
        """
        assert not self.held_bound, 'bound on a held GPU: %s' % (
            self.held_bound,)

    @stateful.invariant()
    def stuck_nvidia_smi_is_capped(self):
        """At most ``MAX_STUCK`` nvidia-smi stuck at once, per process.

        However many probes ran while the GPU was wedged: each one would
        otherwise leave one more process and one more reaper thread.
        """
        stuck = [p for p in self.wedged if not p.ended.is_set()]
        assert len(stuck) <= nvidia_smi.MAX_STUCK, (
            '%d nvidia-smi processes stuck in the kernel (pids %s), '
            'cap %d' % (len(stuck), [p.pid for p in stuck],
                        nvidia_smi.MAX_STUCK))
        reapers = [p for p in self.wedged if p.reaper() is not None]
        assert len(reapers) <= nvidia_smi.MAX_STUCK, (
            '%d reaper threads' % len(reapers))

    @stateful.invariant()
    def no_unit_bound_twice(self):
        for key, names in self.bound().items():
            assert len(names) == 1, '%s bound to %s' % (key, names)

    @stateful.invariant()
    def no_unit_bound_with_a_foreign_process(self):
        for key, names in self.bound().items():
            found = self.foreign_processes(key, names)
            assert not found, '%s bound to %s with processes %s of %s' % (
                key, names, found, [self.smi.procs[p][2] for p in found])

    @stateful.invariant()
    def reserved_is_holds_plus_dirty(self):
        # what update_provider_tree reports: the gate's view (an
        # operator's command in the file applies at the next period)
        view = self.gate.view()
        state = {'holds': view.holds, 'dirty': view.dirty}
        desired = provider_tree.desired_providers(HOST, self.gpus, [])
        applied = self.gate.apply(desired)
        for gpu in self.gpus:
            name = provider_tree.gpu_provider_name(HOST, gpu.pci_address)
            inventory = applied[name].inventory
            hold = state['holds'].get(gpu.pci_address)
            for rc, record in inventory.items():
                dirty = sum(1 for u in state['dirty'].values()
                            if u.get('pci') == gpu.pci_address and
                            u.get('resource_class') == rc)
                want = record['total'] if hold else min(record['total'],
                                                        dirty)
                assert record['reserved'] == want, (
                    gpu.pci_address, rc, record['reserved'], want)

    @stateful.invariant()
    def a_pool_reserves_each_held_or_dirty_card_once(self):
        view = self.gate.view()
        cards = [g for g in self.gpus if g.pci_address in POOL_CARDS]
        desired = provider_tree.desired_providers(HOST, cards, [],
                                                  pool_whole_gpus=True)
        (pool,) = self.gate.apply(desired).values()
        out = {pci for pci in POOL_CARDS if view.holds.get(pci)} | {
            u.get('pci') for u in view.dirty.values()
            if u.get('pci') in POOL_CARDS}
        assert pool.inventory['PGPU']['reserved'] == len(out), (
            pool.inventory['PGPU'], sorted(out))

    @stateful.invariant()
    def a_leftover_keeps_its_unit_from_other_tenants(self):
        """A process of a removed container keeps its unit unavailable.

        Dirty, or recorded bound to the container that is gone; on a
        shared card, some slot of the card (which keeps other projects
        away).
        """
        state = self.stored()
        if state is None:
            return      # every claim refuses (note_bound checks)
        alive = set(self.live.values())
        unavailable = set(state['dirty']) | {
            k for k, u in state['bound'].items()
            if u.get('container') not in alive}
        for pid, (pci, index, owner) in sorted(self.smi.procs.items()):
            if owner in alive:
                continue
            keys = self.unit_keys(pci, index)
            assert keys & unavailable, (
                'process %d of removed container %s on %s, and none of %s '
                'is dirty' % (pid, owner, pci, sorted(keys)))

    @stateful.invariant()
    def a_gpu_that_cannot_be_verified_is_held(self):
        # every failing mode leaves the MIG GPU's slices unverifiable (a
        # state file that cannot be written: note_bound checks the claims)
        if self.smi.failed_in_a_row >= 2 and not self.state_damaged():
            hold = self.gate.view().holds.get(MIGGPU) or {}
            assert hold.get('kind') in (gate_state.KIND_UNPROBEABLE,
                                        gate_state.KIND_UNHEALTHY), (
                '%d probes in a row failed (%s) and GPU %s is not held: %s'
                % (self.smi.failed_in_a_row, self.smi.mode, MIGGPU, hold))

    @stateful.invariant()
    def clean_unbound_units_are_allocatable(self):
        state = self.stored()
        if self.smi.mode != 'ok' or state is None:
            return
        still = self.clean_at_recheck & self.clean_units()
        for key in sorted(still):
            pci, _index = self.unit_of(key)
            entry = state['dirty'].get(key) or {}
            if pci in state['holds'] or \
                    entry.get('seq', 0) > self.recheck_seq:
                continue
            assert key not in state['dirty'], (
                '%s clean and unbound since the last re-check but still '
                'dirty: %s' % (key, state['dirty'][key].get('holding')))
            # nor taken for bound to a container that is gone, unless the
            # model removed it behind nova's back and no one looked since
            gone = state['bound'].get(key, {}).get('container')
            if gone in self.unseen_gone:
                continue
            why = self.gate.unavailable_units(
                self.client.list_containers()).get(key)
            assert not why, '%s clean and unbound since the last re-check ' \
                'but unavailable to a claim: %s' % (key, why)


def _settings(examples, steps, wide=False):
    """The unit suite's fixed, derandomised slice; or a wider search.

    ``wide`` (``LEDGER_MODEL_RANDOM=1``: ``tox -e ledger-model``,
    ``tools/run-tests.sh --full``) draws a new seed each run and keeps
    Hypothesis' example database (``.hypothesis/``), so a counterexample
    found once is tried first the next time.
    """
    if wide:
        return settings(max_examples=examples, stateful_step_count=steps,
                        deadline=None, derandomize=False,
                        database=database.DirectoryBasedExampleDatabase(
                            os.path.join(os.path.dirname(__file__),
                                         '..', '..', '..', '.hypothesis',
                                         'ledger-model')),
                        print_blob=True)
    return settings(max_examples=examples, stateful_step_count=steps,
                    deadline=None, derandomize=True, database=None,
                    print_blob=False)


class TestLedgerModel(LedgerMachine.TestCase):
    """The model as a test case of the unit suite.

    A class of this module, so that its id is
    ``tests.unit.models.test_gpu_ledger.TestLedgerModel.runTest``:
    Hypothesis' own ``LedgerMachine.TestCase`` is named after
    ``hypothesis.stateful``, which a filter on this module's name (``tox -e
    ledger-model``) never selected: that long run ran the replays only.
    """

    settings = _settings(
        int(os.environ.get('LEDGER_MODEL_EXAMPLES', '160')),
        int(os.environ.get('LEDGER_MODEL_STEPS', '40')),
        wide=os.environ.get('LEDGER_MODEL_RANDOM') == '1')


# -- the counterexamples, replayed step by step ----------------------------
#
# Each test is the shrunk sequence of steps the model found with one of the
# ledger's fixes removed (doc/source/contributor/ledger-model-proofs.rst):
# the same rules, the same draws, every invariant checked after each step.
# They run whatever the random search reaches, and fail with the fix
# removed. (Here, not in a module of their own: no test module imports
# another.)

#: the first instance the model makes
FIRST = '00000000-0000-4000-8000-000000000000'


class Draws(object):
    """``st.data()`` of a replay: the values drawn, in order."""

    def __init__(self, *values):
        self.values = list(values)

    def draw(self, strategy, label=None):
        return self.values.pop(0)


class LedgerReplay(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.machine = LedgerMachine()
        self.addCleanup(self.machine.teardown)

    def check(self):
        """Every invariant of the model, as Hypothesis runs them."""
        for name in dir(type(self.machine)):
            if getattr(getattr(type(self.machine), name),
                       stateful.INVARIANT_MARKER, None) is not None:
                getattr(self.machine, name)()

    def step(self, rule, *args, **kwargs):
        getattr(self.machine, rule)(*args, **kwargs)
        self.check()

    def busy_host(self, whole=0, mig=0, share=0, pool2=0,
                  projects=('proj-a',) * 5):
        self.step('busy_host', counts=(whole, mig, share, pool2),
                  projects=list(projects))


class TestCounterexamples(LedgerReplay):

    def test_reconcile_at_init_host_marks_released_units_dirty(self):
        # without on_release in reconcile.reconcile: the unit of a server
        # deleted while nova-compute was down, still running its process,
        # is taken by the next claim
        self.busy_host(mig=1)
        self.step('deleted_while_down', Draws(FIRST))
        self.step('boot', flavor='mig', project='proj-a', busy=False)

    def test_a_resize_or_migration_tells_the_gate_what_it_bound(self):
        # without note_bound in Claims.rewriting: a migrated server deleted
        # behind nova's back leaves a process on a unit no one marks dirty
        self.busy_host()
        self.step('arrives_by_resize_or_migration', flavor='mig',
                  project='proj-a')
        self.step('process_appears', Draws(FIRST))
        self.step('delete_behind_novas_back', Draws(FIRST), leftover=True)

    def test_gpu_forget_drops_only_the_entry_it_checked(self):
        # without gate_state.forget's ``checked``: a unit released again
        # between the command's check and its write is forgotten with the
        # new leftover on it
        self.busy_host(whole=1)
        self.step('delete', Draws(FIRST), leftover=True)
        self.step('operator_checks_a_unit_to_forget', which=0)
        self.step('time_passes', seconds=9.0)
        self.step('boot', flavor='whole', project='proj-a', busy=True)
        self.step('delete', Draws('00000000-0000-4000-8000-000000000001'),
                  leftover=True)
        self.step('operator_forgets')

    def test_a_refresh_during_a_delete_does_not_bind_the_unit_again(self):
        # without gate_state.stale_binding: a refresh listing the
        # container between note_destroy and its removal records the unit
        # bound to it again, and the unit, verified clean, stays
        # unavailable as "gone, not yet verified"
        self.busy_host(pool2=1)
        # a refresh once the delete marked its units (Draws: the refresh's
        # pick, the delete's leftover, the delete's pick)
        self.step('interleave', data=Draws(FIRST, False, FIRST),
                  outer='delete', where=0, op='refresh', flavor='mig',
                  project='proj-a')
        self.step('recheck')

    def test_a_container_being_removed_is_not_its_instance_again(self):
        # without the dirty entry's 'removing' (note_destroy): after a
        # restart, a refresh listing a container its delete marked but
        # has not removed yet takes it for its instance holding the cards
        # again, and they stay unavailable once verified clean
        self.busy_host(share=1, pool2=1)
        self.step('deleted_while_down', Draws(FIRST))
        second = '00000000-0000-4000-8000-000000000001'
        self.step('interleave', data=Draws(second, False, second),
                  outer='delete', where=0, op='refresh', flavor='mig',
                  project='proj-a')
        self.step('recheck')

    def test_a_gpu_held_unprobeable_is_not_bound(self):
        # without GpuGate.check_bindable (the claim asks it of each
        # device it looks up): a slice of the MIG GPU held as unprobeable
        # is bound (the pick of a MIG slice did not read the card's hold;
        # since e3e1143 it does: this fails with both removed)
        self.busy_host()
        self.step('probe_becomes', mode='fail')
        self.step('periodic_refresh')
        self.step('periodic_refresh')
        self.step('boot', flavor='mig', project='proj-a', busy=False)

    def test_a_unit_left_dirty_by_a_delete_is_rechecked(self):
        # without verify_release starting the re-check thread: a unit
        # whose leftover ends after the delete stays reserved until some
        # later refresh
        self.busy_host(whole=1)
        self.step('periodic_refresh')
        self.step('delete', Draws(FIRST), leftover=True)
        self.step('process_leaves', Draws(1000))
        self.step('time_passes', seconds=9.0)

    def test_a_container_listed_after_its_removal_is_not_a_holder(self):
        # without release._held_again in verify_released: the daemon
        # still lists the container its delete removed (Incus does), the
        # delete's own verification takes it for its instance holding the
        # unit again and drops the dirty entry; nova then frees the
        # allocation with the leftover on the unit
        self.busy_host(whole=1)
        self.step('daemon_lists_removed_containers', lags=True)
        self.step('delete', Draws(FIRST), leftover=True)

    def test_a_failed_removal_then_an_operator_delete(self):
        # without verify_released recording the unit bound again once its
        # own instance holds it (the removal failed): `lxc delete` by an
        # operator leaves the leftover on a unit no one marks dirty
        self.busy_host(whole=1)
        self.step('removal_fails', Draws(FIRST))
        self.step('delete_behind_novas_back', Draws(FIRST), leftover=True)

    def damaged_state_file_holds_every_gpu(self, how):
        self.busy_host(mig=1)
        self.step('state_file_damaged', how=how)
        self.step('boot', flavor='whole', project='proj-a', busy=False)

    def test_a_truncated_state_file_holds_every_gpu(self):
        # without _hold_everything in GpuGate._ledger: a claim while the
        # state file cannot be parsed uses the last view, which knows
        # nothing of what the file held
        self.damaged_state_file_holds_every_gpu('truncated')

    def test_an_unreadable_state_file_holds_every_gpu(self):
        self.damaged_state_file_holds_every_gpu('unreadable')

    def test_a_state_file_not_an_object_holds_every_gpu(self):
        # also without the shape check of StateStore.load (a JSON list
        # read as an empty state)
        self.damaged_state_file_holds_every_gpu('list')

    def test_a_released_slice_of_a_lost_mig_gpu_stays_dirty(self):
        # without release.holding's "lost" answer: nvidia-smi lists no
        # process on a GPU it reports lost, and the refresh verifies the
        # slice reconcile released clean with the leftover on it
        self.busy_host(mig=1, pool2=1)
        self.step('deleted_while_down', Draws(FIRST))
        self.step('mig_gpu_lost', lost=True)
        self.step('periodic_refresh')

    def test_a_slice_deleted_on_a_lost_mig_gpu_stays_reserved(self):
        # the same, by the delete's own verification
        self.busy_host(mig=1)
        self.step('mig_gpu_lost', lost=True)
        self.step('delete', Draws(FIRST), leftover=True)

    def test_no_busy_time_nor_energy_for_hours_down(self):
        # without usage_record's gap (or energy.account's): the 10 hours
        # nova-compute was down are counted busy, their energy
        # interpolated between the readings at both ends
        self.busy_host(whole=1)
        self.step('periodic_refresh')
        self.step('compute_down_for_hours')
        self.step('periodic_refresh')

    def test_a_release_the_state_file_cannot_record_keeps_the_binding(self):
        # without reconcile keeping the binding when note_destroy cannot
        # record the release: once the operator puts the last good state
        # file back, it records the unit bound to a live container, and
        # the next claim takes it with the deleted server's process on it
        self.busy_host(mig=2)
        self.step('state_file_damaged', how='truncated')
        self.step('deleted_while_down', Draws(FIRST))
        self.step('operator_repairs_state_file')
        self.step('restart_compute')
        self.step('boot', flavor='mig', project='proj-b', busy=False)

    def test_a_wedged_gpu_leaves_at_most_two_stuck_nvidia_smi(self):
        # without nvidia_smi.MAX_STUCK: every probe on a GPU stuck in the
        # kernel starts one more nvidia-smi that SIGKILL cannot end, and
        # leaves it with one more reaper thread (issue 46, item 9)
        self.busy_host(mig=1)
        self.step('probe_becomes', mode='wedged')
        for _ in range(4):
            self.step('periodic_refresh')
        self.step('delete', Draws(FIRST), leftover=False)
        self.assertEqual(nvidia_smi.MAX_STUCK, len(self.machine.wedged))
        # one ends: the next probe may start nvidia-smi again, one only
        self.step('stuck_nvidia_smi_ends')
        self.step('recheck')
        self.assertEqual(nvidia_smi.MAX_STUCK + 1,
                         len(self.machine.wedged))

    def test_the_watcher_tells_the_gate_of_a_container_its_event_says_gone(
            self):
        # the event stream, not a poll: a container removed behind nova's
        # back, its leftover gone, is verified clean and offered again by
        # the re-check once the watcher handled its deletion (without
        # LifecycleWatcher._gone's note_gone the unit stays "bound to a
        # container that is gone" until a refresh)
        self.busy_host(whole=1)
        self.step('watcher_reads_events')
        self.step('delete_behind_novas_back', Draws(FIRST), leftover=False)
        self.step('watcher_reads_events')
        self.assertEqual(set(), self.machine.unseen_gone)
        self.step('recheck')
        self.step('recheck')


class TestModelConfinement(testtools.TestCase):
    """The model's option overrides stay in the model (issue 46)."""

    def test_overrides_do_not_reach_another_configuration(self):
        machine = LedgerMachine()
        machine.teardown()
        self.assertEqual(RELEASE_WAIT,
                         machine.conf.lxd_accelerators.release_wait)
        # registered as the other tests register them: the shared groups
        other = cfg.ConfigOpts()
        for group, opts in lxd_conf.list_opts():
            other.register_opts(opts, group=group)
        other([], default_config_files=[])
        for name in ('release_wait', 'probe_failures_before_hold',
                     'nvidia_smi_timeout', 'state_dir', 'shared_gpus'):
            opt = next(o for g, opts in lxd_conf.list_opts()
                       if g.name == 'lxd_accelerators'
                       for o in opts if o.name == name)
            self.assertEqual(opt.default,
                             getattr(other.lxd_accelerators, name), name)
