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

"""The host probe: health and usage facts of the GPUs, from ``nvidia-smi``.

This is the one module that asks the GPUs about their state (MIG devices
are listed by :mod:`.nvidia_smi`). Through :func:`.nvidia_smi.run` it runs

* ``nvidia-smi --query-gpu=<FIELDS> --format=csv`` (health, memory,
  utilisation, power draw) and
* ``nvidia-smi --query-compute-apps=<APP_FIELDS> --format=csv`` (the
  compute processes on each GPU),

and, when a GPU is in MIG mode, ``nvidia-smi -q`` (each MIG device's memory
and the GPU/compute instance of each process), and turns their output,
with the parsers of :mod:`.nvidia_smi`, into a :class:`Snapshot`. It also
reads the NVIDIA driver's Xid messages from the kernel log
(``[lxd_accelerators] kernel_log``, :func:`parse_kernel_log`).

Unhealthy (:meth:`.nvidia_smi.GpuFacts.problems`): uncorrectable volatile
ECC errors, retired pages pending, row remapping pending or failed, or a
GPU that has fallen off the bus (nvidia-smi says "GPU is lost", "Unknown
Error", or "requires reset", or no longer lists a GPU that LXD lists). Xid
messages are facts here; which codes are fatal is the gate's decision.

Nothing here holds nova's resource tracker lock: the driver runs
:meth:`HostProbe.snapshot` from its own thread (see
:mod:`nova_lxd_accel.accel.health.gate`).
"""

import dataclasses
import io
import os
import re
import stat
import time
import typing

from oslo_log import log as logging

from nova_lxd_accel.accel.inventory import compute_apps
from nova_lxd_accel.accel.inventory import nvidia_smi

LOG = logging.getLogger(__name__)

#: ``--query-gpu`` fields the probe asks for. The last three are missing
#: on drivers before R450 (no row remapper): see :data:`OPTIONAL_FIELDS`.
#: ``power.draw`` and ``power.limit`` are the board's, in watts (``[N/A]``
#: on boards without power readings: no power sample then).
FIELDS = ('index', 'pci.bus_id', 'uuid', 'name', 'memory.total',
          'memory.used', 'utilization.gpu',
          'ecc.errors.uncorrected.volatile.total', 'retired_pages.pending',
          'mig.mode.current', 'power.draw', 'power.limit',
          'remapped_rows.pending', 'remapped_rows.failure')
OPTIONAL_FIELDS = ('remapped_rows.pending', 'remapped_rows.failure')
#: no ``process_name``: a tenant chooses it, and nvidia-smi prints it
#: unquoted (a comma or a line break in it would move or make up rows).
#: The probe reads a process's name from the kernel instead
#: (:func:`host_process`).
APP_FIELDS = ('gpu_bus_id', 'gpu_uuid', 'pid', 'used_gpu_memory')

#: :attr:`Snapshot.error` when the nvidia-smi binary does not exist
NO_NVIDIA_SMI = 'no nvidia-smi: no GPU'
#: :attr:`Snapshot.error` (or :attr:`Snapshot.mig_error`) starts with it
#: when the ``deadline`` of :meth:`HostProbe.snapshot` was reached before
#: one of its nvidia-smi calls, which was then not started, or during one,
#: which was then killed before its own timeout
DEADLINE_REACHED = "the probe's deadline was reached"


@dataclasses.dataclass(frozen=True)
class XidEvent:
    """One ``NVRM: Xid`` message of the kernel log.

    :ivar at: seconds since boot, as the kernel stamped it.
    """

    pci_address: str
    code: int
    at: float
    message: str


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """One probe of the host.

    :ivar available: False when nvidia-smi is absent or failed, or the
        probe's deadline came first (then ``gpus`` and ``apps`` say
        nothing, and ``error`` says why).
    :ivar mig_error: why the MIG facts are unknown: a GPU is in MIG mode
        and its ``nvidia-smi -q`` failed, timed out, was not started for
        the probe's deadline (:data:`DEADLINE_REACHED`) or printed nothing
        readable for it. ``mig`` is then empty, which must not be read as
        "no process on any MIG device". None when ``mig`` is complete (or
        no GPU is in MIG mode), and whenever the snapshot is not
        ``available``.
    """

    taken_at: float
    available: bool
    gpus: typing.Dict[str, nvidia_smi.GpuFacts]
    apps: typing.Dict[str, typing.Tuple[nvidia_smi.ComputeApp, ...]]
    error: typing.Optional[str] = None
    #: PCI address -> {MIG device index: :class:`.nvidia_smi.MigFacts`},
    #: for the GPUs in MIG mode whose ``nvidia-smi -q`` could be read
    mig: typing.Dict[str, typing.Dict[int, nvidia_smi.MigFacts]] = \
        dataclasses.field(default_factory=dict)
    #: the Xid messages of the kernel log (all codes), oldest first
    xids: typing.Tuple[XidEvent, ...] = ()
    #: seconds since boot when the snapshot was taken, and the boot's id:
    #: what the Xid times are relative to
    uptime: typing.Optional[float] = None
    boot_id: typing.Optional[str] = None
    mig_error: typing.Optional[str] = None

    @property
    def complete(self):
        """Whether every fact was read: ``available`` and no ``mig_error``.

        An available snapshot with a ``mig_error`` still tells each GPU's
        health and processes; only who uses which MIG device is unknown.
        """
        return self.available and not self.mig_error

    def apps_on(self, pci_address):
        """The tenants' compute processes on a GPU.

        Its MPS server is not one (:data:`.nvidia_smi.MPS_SERVER`): the
        operator's daemon, running while no instance is on the GPU.
        """
        return nvidia_smi.tenant_apps(self.apps.get(pci_address, ()))

    def mps_servers_on(self, pci_address):
        """The MPS server processes nvidia-smi lists on a GPU."""
        return tuple(app for app in self.apps.get(pci_address, ())
                     if app.is_mps_server)

    def xids_on(self, pci_address):
        return tuple(x for x in self.xids if x.pci_address == pci_address)

    def problems(self, pci_address, expected_nvidia=True):
        """Health problems of one GPU.

        A GPU LXD lists but nvidia-smi does not is lost when
        ``expected_nvidia``.
        """
        if not self.available:
            return []
        facts = self.gpus.get(pci_address)
        if facts is None:
            return (['fallen off the bus (nvidia-smi no longer lists it)']
                    if expected_nvidia else [])
        return facts.problems()


_XID = re.compile(
    r'NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:'
    r'[0-9A-Fa-f]{2})(?:\.(?P<fn>[0-7]))?\): (?P<code>\d+),?\s*'
    r'(?P<message>.*)$')
#: ``/dev/kmsg`` record: ``priority,sequence,microseconds,flags;text``
_KMSG = re.compile(r'^\d+,\d+,(?P<usec>\d+),[^;]*;(?P<text>.*)$')
#: ``dmesg``: ``[ 5107.644336] text`` (after any syslog prefix)
_DMESG = re.compile(r'\[\s*(?P<sec>\d+\.\d+)\]\s*(?P<text>.*)$')


def parse_kernel_log(text):
    """The ``NVRM: Xid`` messages of a kernel log, oldest first.

    Understands ``/dev/kmsg`` records and ``dmesg`` lines (also behind a
    syslog prefix, as in ``kern.log``). A message without a since-boot
    time cannot be told from one already read, so it is skipped.
    """
    events = []
    for line in (text or '').splitlines():
        match = _KMSG.match(line)
        if match:
            at, body = int(match.group('usec')) / 1e6, match.group('text')
        else:
            match = _DMESG.search(line)
            if not match:
                continue
            at, body = float(match.group('sec')), match.group('text')
        xid = _XID.search(body)
        if not xid:
            continue
        pci = nvidia_smi.pci_address(
            '%s.%s' % (xid.group('pci'), xid.group('fn') or 0))
        events.append(XidEvent(pci_address=pci, code=int(xid.group('code')),
                               at=at, message=xid.group('message').strip()))
    events.sort(key=lambda e: e.at)
    return tuple(events)


def read_kernel_log(path):
    """The text of ``path``: ``/dev/kmsg`` read without blocking, or a file.

    :raises OSError: when it cannot be read.
    """
    if not stat.S_ISCHR(os.stat(path).st_mode):
        with open(path, encoding='utf-8', errors='replace') as f:
            return f.read()
    records = []
    # io.FileIO, not os.read: eventlet's green os.read waits for more data
    # on EAGAIN, and /dev/kmsg always ends in EAGAIN (FileIO returns None)
    with io.FileIO(os.open(path, os.O_RDONLY | os.O_NONBLOCK), 'r') as log:
        while True:
            try:
                chunk = log.read(8192)
            except BrokenPipeError:
                continue            # records overwritten while reading
            if not chunk:
                break               # None: the end of the ring buffer
            records.append(chunk.decode('utf-8', 'replace'))
    # continuation lines (" KEY=value") follow their record: drop them
    return '\n'.join(r.split('\n', 1)[0] for r in records)


def _uptime():
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def _boot_id():
    try:
        with open('/proc/sys/kernel/random/boot_id') as f:
            return f.read().strip()
    except OSError:
        return None


_PAYLOAD = re.compile(r'lxc\.payload\.([^/\s]+)')


def container_of_process(pid, proc='/proc'):
    """The LXD or Incus container a host process runs in.

    Read from ``/proc/<pid>/cgroup``: both daemons put a container's
    processes under ``lxc.payload.<name>`` (``<project>_<name>`` outside
    the default project).

    :returns: the container's name (with its project prefix, if any);
        '' for a process of the host itself; None when it cannot be told
        (no such process, no permission).
    """
    try:
        with open(os.path.join(proc, str(int(pid)), 'cgroup'),
                  encoding='utf-8') as f:
            text = f.read(65536)
    except (OSError, ValueError):
        return None
    match = _PAYLOAD.search(text)
    return match.group(1) if match else ''


def host_process(pid, proc='/proc'):
    """(name, in a container) of a host process, each None if unknown.

    The name is the kernel's ``comm`` (15 characters at most).
    """
    try:
        with open(os.path.join(proc, str(int(pid)), 'comm'), 'rb') as f:
            name = compute_apps.printable(
                f.read(64).decode('utf-8', 'replace').strip())
    except (OSError, ValueError):
        name = None
    container = container_of_process(pid, proc)
    return name, None if container is None else bool(container)


class HostProbe(object):
    """Runs nvidia-smi and returns a :class:`Snapshot`.

    :param path: the nvidia-smi binary (``[lxd_accelerators]
        nvidia_smi_path``).
    :param clock: zero-argument callable returning seconds (tests).
    :param monotonic: zero-argument callable returning seconds on the
        clock of :meth:`snapshot`'s ``deadline`` (tests).
    """

    def __init__(self, path='nvidia-smi', timeout=10, clock=time.time,
                 kernel_log=None, uptime=_uptime, boot_id=_boot_id,
                 conf=None, monotonic=time.monotonic, proc='/proc'):
        self._proc = proc
        self._fixed_path = path
        self._monotonic = monotonic
        self._fixed_timeout = timeout
        self._conf = conf
        self._clock = clock
        self._fields = FIELDS
        self._kernel_log = kernel_log
        self._uptime = uptime
        self._boot_id = boot_id
        self._kernel_log_error = None

    def _host_process(self, app):
        """``app`` with what the kernel says of its host process."""
        name, in_container = host_process(app.pid, self._proc)
        return dataclasses.replace(
            app, name=app.name or name or '?',
            in_container=in_container)

    @classmethod
    def from_conf(cls, conf):
        """A probe reading its binary and timeout from ``conf`` each time."""
        return cls(kernel_log=conf.lxd_accelerators.kernel_log or None,
                   conf=conf)

    @property
    def _path(self):
        if self._conf is not None:
            return self._conf.lxd_accelerators.nvidia_smi_path
        return self._fixed_path

    @property
    def _timeout(self):
        if self._conf is not None:
            return self._conf.lxd_accelerators.nvidia_smi_timeout
        return self._fixed_timeout

    def _xids(self):
        """The Xid messages of the kernel log; () when it cannot be read.

        An unreadable log is logged once (and again when the reason
        changes), not at every probe.
        """
        if not self._kernel_log:
            return ()
        try:
            events = parse_kernel_log(read_kernel_log(self._kernel_log))
        except OSError as exc:
            if str(exc) != self._kernel_log_error:
                self._kernel_log_error = str(exc)
                LOG.warning('Cannot read the kernel log %(path)s for GPU Xid '
                            'errors (%(error)s): give nova-compute read '
                            'access (CAP_SYSLOG), or set [lxd_accelerators] '
                            'kernel_log to a file or to nothing',
                            {'path': self._kernel_log, 'error': exc})
            return ()
        self._kernel_log_error = None
        return events

    def _run(self, args, deadline):
        """:func:`.nvidia_smi.run`, within the snapshot's deadline.

        Its timeout is the configured one, or less: what is left before
        ``deadline``. With nothing left nvidia-smi is not started, and
        the answer is a :data:`.nvidia_smi.FAILED_TO_RUN` whose stderr
        starts with :data:`DEADLINE_REACHED`.
        """
        timeout = self._timeout
        if deadline is not None:
            left = deadline - self._monotonic()
            if left <= 0:
                return nvidia_smi.FAILED_TO_RUN, '', (
                    '%s: %s %s not started' % (DEADLINE_REACHED, self._path,
                                               args[0].split('=', 1)[0]))
            timeout = min(timeout, left)
        rc, out, err = nvidia_smi.run(self._path, args, timeout)
        if rc == nvidia_smi.FAILED_TO_RUN and timeout < self._timeout and \
                'did not answer within' in err:
            # cut by the caller's deadline, not by its own timeout: a slow
            # nvidia-smi is not a failing one (holds.cut_short)
            err = '%s: %s' % (DEADLINE_REACHED, err)
        return rc, out, err

    def _mig(self, gpus, deadline):
        """MIG facts of the GPUs in MIG mode, and why they are unknown.

        :returns: ``(mig, error)``: ``({}, None)`` when no GPU is in MIG
            mode; ``({}, why)`` when ``nvidia-smi -q`` failed, timed out,
            was not started for the deadline, or has no readable block for
            a GPU in MIG mode (a block without MIG devices is read: MIG
            mode with no device created).
        """
        in_mig = sorted(pci for pci, g in gpus.items()
                        if (g.mig_mode or '').lower() == 'enabled')
        if not in_mig:
            return {}, None
        rc, out, err = self._run(['-q'], deadline)
        if rc != 0:
            error = '%s -q: %s' % (
                self._path,
                (err or out).strip() or ('not found' if rc is None
                                         else 'status %s' % rc))
            if err.startswith(DEADLINE_REACHED):
                error = err
        else:
            read, _ = nvidia_smi.parse_query(out)
            unread = [pci for pci in in_mig
                      if pci not in read or read[pci].lost]
            if not unread:
                return nvidia_smi.parse_mig_query(out), None
            error = '%s -q printed nothing readable for %s' % (
                self._path, ', '.join(unread))
        LOG.warning('%(error)s: the processes of each MIG device are '
                    'unknown this time', {'error': error})
        return {}, error

    def _query_gpu(self, deadline):
        rc, out, err = self._run([
            '--query-gpu=%s' % ','.join(self._fields), '--format=csv'],
            deadline)
        if rc and rc > 0 and 'not a valid field' in (out + err) and \
                self._fields != FIELDS[:-len(OPTIONAL_FIELDS)]:
            # a driver without the row remapper
            self._fields = FIELDS[:-len(OPTIONAL_FIELDS)]
            return self._query_gpu(deadline)
        return rc, out, err

    def deadline_after(self, seconds):
        """The :meth:`snapshot` deadline ``seconds`` from now (its clock)."""
        return self._monotonic() + seconds

    def snapshot(self, deadline=None):
        """Probe the GPUs now.

        Runs nvidia-smi twice, three times when a GPU is in MIG mode, and
        reads the kernel log's Xid messages.

        :param deadline: None, or when the snapshot must be done by, in
            seconds of ``time.monotonic()`` (the ``monotonic`` clock of
            the probe): each nvidia-smi call is given at most what is
            left, and one due after it is not started (the snapshot is
            then unavailable, or its ``mig_error`` says so for ``-q``).
            A snapshot thus takes at most the time left plus
            :data:`.nvidia_smi.KILL_GRACE`: a caller holding up a delete
            or a re-check is not held by a hung nvidia-smi.
        """
        now = self._clock()
        rc, out, err = self._query_gpu(deadline)
        if rc is None:
            return Snapshot(now, False, {}, {}, NO_NVIDIA_SMI)
        snap = self._snapshot(now, rc, out, err, deadline)
        mig, mig_error = ({}, None)
        if snap.available:
            mig, mig_error = self._mig(snap.gpus, deadline)
        return dataclasses.replace(
            snap, mig=mig, mig_error=mig_error,
            xids=self._xids(), uptime=self._uptime(),
            boot_id=self._boot_id())

    def _snapshot(self, now, rc, out, err, deadline=None):
        if rc == nvidia_smi.FAILED_TO_RUN:
            # timed out or could not be started: err says which
            LOG.warning('%s', err)
            return Snapshot(now, False, {}, {}, err)
        if 'No devices were found' in out + err:
            return Snapshot(now, True, {}, {})
        try:
            gpus = nvidia_smi.parse_query_gpu(out + '\n' + err)
        except ValueError as exc:
            LOG.warning('%(path)s --query-gpu printed something else than '
                        'CSV (%(error)s): GPU states unknown this time',
                        {'path': self._path, 'error': exc})
            return Snapshot(now, False, {}, {}, 'unexpected output')
        if rc != 0 and not gpus:
            message = (err or out).strip() or 'status %s' % rc
            LOG.warning('%(path)s --query-gpu failed: %(error)s',
                        {'path': self._path, 'error': message})
            return Snapshot(now, False, {}, {}, message)
        rc, out, err = self._run([
            '--query-compute-apps=%s' % ','.join(APP_FIELDS),
            '--format=csv'], deadline)
        if rc != 0:
            message = (err or out).strip() or 'status %s' % rc
            LOG.warning('%(path)s --query-compute-apps failed: %(error)s',
                        {'path': self._path, 'error': message})
            return Snapshot(now, False, gpus, {}, message)
        try:
            apps = compute_apps.parse(out)
        except ValueError as exc:
            LOG.warning('%(path)s --query-compute-apps printed something '
                        'else than process rows (%(error)s): the probe is '
                        'incomplete, no released unit is verified clean '
                        'on it', {'path': self._path, 'error': exc})
            return Snapshot(now, False, gpus, {}, 'unexpected output')
        return Snapshot(now, True, gpus, {
            pci: tuple(self._host_process(app) for app in found)
            for pci, found in apps.items()})
