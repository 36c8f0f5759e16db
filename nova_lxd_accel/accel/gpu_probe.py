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
are listed by :mod:`.nvidia_smi`). It runs

* ``nvidia-smi --query-gpu=<FIELDS> --format=csv`` (health, memory,
  utilisation) and
* ``nvidia-smi --query-compute-apps=<APP_FIELDS> --format=csv`` (the
  compute processes on each GPU),

and, when a GPU is in MIG mode, ``nvidia-smi -q`` (each MIG device's memory
and the GPU/compute instance of each process: :func:`parse_mig_query`),
and turns their output into :class:`GpuFacts`, :class:`ComputeApp` and
:class:`MigFacts`. It also reads the NVIDIA driver's Xid messages from the
kernel log (``[lxd_accelerators] kernel_log``, :func:`parse_kernel_log`).
The CSV parser is driven by the header line, so the output of any field
list (recorded captures with two hundred columns, or ours) parses the same
way; units (``81559 MiB``, ``100 %``) and ``[N/A]`` are understood.
:func:`parse_query` reads the same signals from ``nvidia-smi -q``.

Unhealthy (:meth:`GpuFacts.problems`): uncorrectable volatile ECC errors,
retired pages pending, row remapping pending or failed, or a GPU that has
fallen off the bus (nvidia-smi says "GPU is lost", "Unknown Error", or
"requires reset", or no longer lists a GPU that LXD lists). Xid messages
are facts here; which codes are fatal is the gate's decision.

Nothing here holds nova's resource tracker lock: the driver runs
:meth:`HostProbe.snapshot` from its own thread (see
:mod:`nova_lxd_accel.accel.gpu_gate`).
"""

import csv
import dataclasses
import io
import os
import re
import stat
import time
import typing

from oslo_log import log as logging

from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel import nvidia_smi

LOG = logging.getLogger(__name__)

#: ``--query-gpu`` fields the probe asks for. The last three are missing
#: on drivers before R450 (no row remapper): see :data:`OPTIONAL_FIELDS`.
FIELDS = ('index', 'pci.bus_id', 'uuid', 'name', 'memory.total',
          'memory.used', 'utilization.gpu',
          'ecc.errors.uncorrected.volatile.total', 'retired_pages.pending',
          'mig.mode.current', 'remapped_rows.pending',
          'remapped_rows.failure')
OPTIONAL_FIELDS = ('remapped_rows.pending', 'remapped_rows.failure')
APP_FIELDS = ('gpu_bus_id', 'gpu_uuid', 'pid', 'process_name',
              'used_gpu_memory')

_LOST_TEXT = ('gpu is lost', 'unknown error', 'requires reset',
              'fallen off the bus')
_HANDLE_ERROR = re.compile(
    r'(?:device handle for GPU|^GPU)\s*'
    r'(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])'
    r'\s*:\s*(?P<error>.+)$')
_NUMBER = re.compile(r'^\s*(-?\d+(?:\.\d+)?)')

#: :attr:`Snapshot.error` when the nvidia-smi binary does not exist
NO_NVIDIA_SMI = 'no nvidia-smi: no GPU'


@dataclasses.dataclass(frozen=True)
class GpuFacts:
    """What nvidia-smi says about one GPU.

    Numbers are None when nvidia-smi has no value (``[N/A]``, ``N/A``).
    """

    pci_address: str
    index: typing.Optional[int] = None
    uuid: typing.Optional[str] = None
    name: typing.Optional[str] = None
    memory_total_mib: typing.Optional[int] = None
    memory_used_mib: typing.Optional[int] = None
    utilization_pct: typing.Optional[int] = None
    ecc_uncorrected: typing.Optional[int] = None
    retired_pages_pending: bool = False
    remap_pending: bool = False
    remap_failure: bool = False
    mig_mode: typing.Optional[str] = None
    #: why the GPU is lost (fallen off the bus), or None
    lost: typing.Optional[str] = None

    def problems(self):
        """Why this GPU must not be used (empty: healthy)."""
        out = []
        if self.lost:
            out.append('fallen off the bus (%s)' % self.lost)
        if self.ecc_uncorrected:
            out.append('%d uncorrectable ECC error%s' % (
                self.ecc_uncorrected,
                '' if self.ecc_uncorrected == 1 else 's'))
        if self.retired_pages_pending:
            out.append('retired pages pending')
        if self.remap_pending:
            out.append('row remapping pending')
        if self.remap_failure:
            out.append('row remapping failed')
        return out


@dataclasses.dataclass(frozen=True)
class ComputeApp:
    """One compute process on a GPU."""

    pci_address: str
    pid: int
    name: str
    used_memory_mib: typing.Optional[int]
    gpu_uuid: typing.Optional[str] = None


@dataclasses.dataclass(frozen=True)
class MigFacts:
    """One MIG device of a GPU in MIG mode, from ``nvidia-smi -q``.

    :ivar index: the MIG device index (``Device N`` of ``nvidia-smi -L``).
    :ivar apps: the compute processes of its GPU/compute instance.
    """

    index: int
    gi: typing.Optional[int]
    ci: typing.Optional[int]
    memory_used_mib: typing.Optional[int] = None
    memory_total_mib: typing.Optional[int] = None
    apps: typing.Tuple[ComputeApp, ...] = ()


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

    :ivar available: False when nvidia-smi is absent or failed (then
        ``gpus`` and ``apps`` say nothing).
    """

    taken_at: float
    available: bool
    gpus: typing.Dict[str, GpuFacts]
    apps: typing.Dict[str, typing.Tuple[ComputeApp, ...]]
    error: typing.Optional[str] = None
    #: PCI address -> {MIG device index: :class:`MigFacts`}, for the GPUs
    #: in MIG mode whose ``nvidia-smi -q`` could be read
    mig: typing.Dict[str, typing.Dict[int, MigFacts]] = \
        dataclasses.field(default_factory=dict)
    #: the Xid messages of the kernel log (all codes), oldest first
    xids: typing.Tuple[XidEvent, ...] = ()
    #: seconds since boot when the snapshot was taken, and the boot's id:
    #: what the Xid times are relative to
    uptime: typing.Optional[float] = None
    boot_id: typing.Optional[str] = None

    def apps_on(self, pci_address):
        return self.apps.get(pci_address, ())

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


def pci_address(bus_id):
    """nvidia-smi's ``00000000:3B:00.0`` -> LXD's ``0000:3b:00.0``."""
    address = devices.normalise_pci_address(bus_id)
    if address and address.count(':') == 2:
        domain, rest = address.split(':', 1)
        if len(domain) > 4 and not domain[:-4].strip('0'):
            address = '%s:%s' % (domain[-4:], rest)
    return address


def _plain(value):
    value = (value or '').strip()
    if value.startswith('[') and value.endswith(']'):
        value = value[1:-1].strip()
    return value


def _int(value):
    text = _plain(value)
    match = _NUMBER.match(text)
    if not match:
        return None
    return int(float(match.group(1)))


def _yes(value):
    return _plain(value).lower() in ('yes', 'true', '1', 'enabled')


def _lost_text(values):
    for value in values:
        text = _plain(value).lower()
        for marker in _LOST_TEXT:
            if marker in text:
                return _plain(value)
    return None


def _header(name):
    # "memory.used [MiB]" -> "memory.used"
    return name.split('[', 1)[0].strip()


def _csv_rows(text, required=None):
    """Rows of a ``--format=csv`` output as dicts keyed by field name.

    With ``noheader`` the caller's field order is not known here; the
    probe always asks with a header. Lines that are not CSV rows of the
    header's width (error lines) are returned apart.
    """
    lines = [line for line in (text or '').splitlines() if line.strip()]
    rows, others = [], []
    header = None
    for line in lines:
        fields = next(csv.reader(io.StringIO(line), skipinitialspace=True))
        if header is None:
            if _HANDLE_ERROR.search(line) or len(fields) < 2:
                others.append(line)
                continue
            header = [_header(f) for f in fields]
            if required and required not in header:
                raise ValueError('no "%s" column in the header' % required)
            continue
        if len(fields) != len(header):
            others.append(line)
            continue
        rows.append(dict(zip(header, fields)))
    if required and header is None and not any(
            _HANDLE_ERROR.search(line) for line in others):
        raise ValueError('no CSV header')
    return rows, others


def _lost_from_lines(lines):
    lost = {}
    for line in lines:
        match = _HANDLE_ERROR.search(line.strip())
        if match:
            pci = pci_address(match.group('pci'))
            if pci:
                lost[pci] = match.group('error').strip().rstrip('.')
    return lost


def parse_query_gpu(text):
    """Parse ``nvidia-smi --query-gpu=... --format=csv`` (with header).

    :returns: dict PCI address (``0000:3b:00.0``) -> :class:`GpuFacts`.
        A GPU nvidia-smi could not open ("Unable to determine the device
        handle for GPU ...: GPU is lost") is returned with ``lost`` set.
    :raises ValueError: when the text is not such an output at all.
    """
    rows, others = _csv_rows(text, required='pci.bus_id')
    gpus = {}
    for row in rows:
        pci = pci_address(row.get('pci.bus_id', ''))
        if not pci:
            continue
        gpus[pci] = GpuFacts(
            pci_address=pci,
            index=_int(row.get('index')),
            uuid=_plain(row.get('uuid')) or None,
            name=_plain(row.get('name')) or None,
            memory_total_mib=_int(row.get('memory.total')),
            memory_used_mib=_int(row.get('memory.used')),
            utilization_pct=_int(row.get('utilization.gpu')),
            ecc_uncorrected=_int(row.get(
                'ecc.errors.uncorrected.volatile.total')),
            retired_pages_pending=_yes(row.get('retired_pages.pending')),
            remap_pending=_yes(row.get('remapped_rows.pending')),
            remap_failure=_yes(row.get('remapped_rows.failure')),
            mig_mode=_plain(row.get('mig.mode.current')) or None,
            lost=_lost_text(row.values()))
    for pci, error in _lost_from_lines(others).items():
        gpus[pci] = GpuFacts(pci_address=pci, lost=error)
    return gpus


def parse_compute_apps(text):
    """Parse ``nvidia-smi --query-compute-apps=... --format=csv``.

    :returns: dict GPU PCI address -> tuple of :class:`ComputeApp`.
    :raises ValueError: when the text is not such an output at all.
    """
    rows, _ = _csv_rows(text, required='pid')
    apps = {}
    for row in rows:
        pci = pci_address(row.get('gpu_bus_id', ''))
        pid = _int(row.get('pid'))
        if not pci or pid is None:
            continue
        memory = row.get('used_gpu_memory', row.get('used_memory'))
        apps.setdefault(pci, []).append(ComputeApp(
            pci_address=pci, pid=pid,
            name=_plain(row.get('process_name')),
            used_memory_mib=_int(memory),
            gpu_uuid=_plain(row.get('gpu_uuid')) or None))
    return {pci: tuple(a) for pci, a in apps.items()}


def _q_tree(lines):
    """Indented ``Key : Value`` lines -> nested (key, value, kids)."""
    root = []
    stack = [(-1, root)]
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(' '))
        key, sep, value = line.strip().partition(':')
        node = (key.strip(), value.strip() if sep else None, [])
        while stack[-1][0] >= indent:
            stack.pop()
        stack[-1][1].append(node)
        stack.append((indent, node[2]))
    return root


def _find(nodes, *path):
    for key, value, kids in nodes:
        if key == path[0]:
            if len(path) == 1:
                return value, kids
            found = _find(kids, *path[1:])
            if found is not None:
                return found
    return None


def _value(nodes, *path):
    found = _find(nodes, *path)
    return found[0] if found else None


def _gpu_blocks(text, others=None):
    """``nvidia-smi -q`` text -> {PCI address: indented lines of its block}.

    Lines outside any block are appended to ``others`` when given.
    """
    blocks = {}
    current = None
    for line in (text or '').splitlines():
        match = re.match(r'^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:'
                         r'[0-9A-Fa-f]{2}\.[0-7])\s*$', line)
        if match:
            current = pci_address(match.group(1))
            blocks[current] = []
            continue
        if current is not None and line.startswith(' '):
            blocks[current].append(line)
        elif line.strip():
            if others is not None:
                others.append(line)
            current = None
    return blocks


def parse_query(text):
    """Parse ``nvidia-smi -q`` into :class:`GpuFacts` and processes.

    Reads per ``GPU <bus id>`` block: the FB memory, utilisation, volatile
    uncorrectable ECC counts (``DRAM Uncorrectable``, ``SRAM
    Uncorrectable*``, older ``Double Bit`` totals), ``Retired Pages /
    Pending Page Blacklist`` (or ``Pending Page Retirement``), ``Remapped
    Rows / Pending`` and ``Remapping Failure Occurred``, the MIG mode and
    the ``Processes`` list.

    :returns: ``(gpus, apps)`` as :func:`parse_query_gpu` and
        :func:`parse_compute_apps` return them.
    """
    others = []
    blocks = _gpu_blocks(text, others)
    gpus, apps = {}, {}
    for pci, block in blocks.items():
        tree = _q_tree(block)
        ecc = 0
        found = _find(tree, 'ECC Errors', 'Volatile')
        for key, value, _ in (found[1] if found else ()):
            lowered = key.lower()
            if ('uncorrectable' in lowered or 'double bit' in lowered) \
                    and 'threshold' not in lowered:
                ecc += _int(value) or 0
        retired = (_value(tree, 'Retired Pages', 'Pending Page Blacklist')
                   or _value(tree, 'Retired Pages',
                             'Pending Page Retirement'))
        values = [v for _, v, _ in tree if v]
        gpus[pci] = GpuFacts(
            pci_address=pci,
            index=_int(_value(tree, 'Minor Number')),
            uuid=_plain(_value(tree, 'GPU UUID')) or None,
            name=_plain(_value(tree, 'Product Name')) or None,
            memory_total_mib=_int(_value(tree, 'FB Memory Usage', 'Total')),
            memory_used_mib=_int(_value(tree, 'FB Memory Usage', 'Used')),
            utilization_pct=_int(_value(tree, 'Utilization', 'GPU')),
            ecc_uncorrected=ecc,
            retired_pages_pending=_yes(retired),
            remap_pending=_yes(_value(tree, 'Remapped Rows', 'Pending')),
            remap_failure=_yes(_value(tree, 'Remapped Rows',
                                      'Remapping Failure Occurred')),
            mig_mode=_plain(_value(tree, 'MIG Mode', 'Current')) or None,
            lost=_lost_text(values))
        found = _find(tree, 'Processes')
        procs = []
        for key, value, kids in (found[1] if found else ()):
            if key == 'Process ID' and _int(value) is not None:
                procs.append(ComputeApp(
                    pci_address=pci, pid=_int(value),
                    name=_plain(_value(kids, 'Name')),
                    used_memory_mib=_int(_value(kids, 'Used GPU Memory')),
                    gpu_uuid=gpus[pci].uuid))
        if procs:
            apps[pci] = tuple(procs)
    for pci, error in _lost_from_lines(others).items():
        gpus[pci] = GpuFacts(pci_address=pci, lost=error)
    return gpus, apps


def parse_mig_query(text):
    """The MIG devices of ``nvidia-smi -q``, with their processes.

    Reads, per ``GPU <bus id>`` block, every ``MIG Device`` (``Index``,
    ``GPU Instance ID``, ``Compute Instance ID``, ``FB Memory Usage`` or,
    on newer drivers, ``Shared FB Memory Usage``) and the ``Processes``
    entries with the ``GPU instance ID`` / ``Compute instance ID`` printed
    before each ``Process ID``.

    :returns: PCI address -> {MIG device index: :class:`MigFacts`}; GPUs
        without MIG devices are left out.
    """
    out = {}
    for pci, block in _gpu_blocks(text).items():
        tree = _q_tree(block)
        slices = []
        for key, _, kids in tree:
            if key != 'MIG Device':
                continue
            memory = (_find(kids, 'FB Memory Usage') or
                      _find(kids, 'Shared FB Memory Usage'))
            memory = memory[1] if memory else []
            slices.append(MigFacts(
                index=_int(_value(kids, 'Index')),
                gi=_int(_value(kids, 'GPU Instance ID')),
                ci=_int(_value(kids, 'Compute Instance ID')),
                memory_used_mib=_int(_value(memory, 'Used')),
                memory_total_mib=_int(_value(memory, 'Total'))))
        if not slices:
            continue
        apps = {}
        found = _find(tree, 'Processes')
        gi = ci = None
        for key, value, kids in (found[1] if found else ()):
            if key == 'GPU instance ID':
                gi = _int(value)
            elif key == 'Compute instance ID':
                ci = _int(value)
            elif key == 'Process ID' and _int(value) is not None:
                apps.setdefault((gi, ci), []).append(ComputeApp(
                    pci_address=pci, pid=_int(value),
                    name=_plain(_value(kids, 'Name')),
                    used_memory_mib=_int(_value(kids, 'Used GPU Memory'))))
                gi = ci = None
        out[pci] = {
            m.index: dataclasses.replace(
                m, apps=tuple(apps.get((m.gi, m.ci), ())))
            for m in slices if m.index is not None}
    return out


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
        pci = pci_address('%s.%s' % (xid.group('pci'), xid.group('fn') or 0))
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


class HostProbe(object):
    """Runs nvidia-smi and returns a :class:`Snapshot`.

    :param path: the nvidia-smi binary (``[lxd_accelerators]
        nvidia_smi_path``).
    :param clock: zero-argument callable returning seconds (tests).
    """

    def __init__(self, path='nvidia-smi', timeout=10, clock=time.time,
                 kernel_log=None, uptime=_uptime, boot_id=_boot_id,
                 conf=None):
        self._fixed_path = path
        self._fixed_timeout = timeout
        self._conf = conf
        self._clock = clock
        self._fields = FIELDS
        self._kernel_log = kernel_log
        self._uptime = uptime
        self._boot_id = boot_id
        self._kernel_log_error = None

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

    def _mig(self, gpus):
        """MIG facts of the GPUs in MIG mode ({} when none or unreadable)."""
        if not any((g.mig_mode or '').lower() == 'enabled'
                   for g in gpus.values()):
            return {}
        rc, out, err = nvidia_smi.run(self._path, ['-q'], self._timeout)
        if rc != 0:
            LOG.warning('%(path)s -q failed (%(error)s): the processes of '
                        'each MIG device are unknown this time',
                        {'path': self._path,
                         'error': (err or out).strip() or rc})
            return {}
        return parse_mig_query(out)

    def _query_gpu(self):
        rc, out, err = nvidia_smi.run(self._path, [
            '--query-gpu=%s' % ','.join(self._fields), '--format=csv'],
            self._timeout)
        if rc and rc > 0 and 'not a valid field' in (out + err) and \
                self._fields != FIELDS[:-len(OPTIONAL_FIELDS)]:
            # a driver without the row remapper
            self._fields = FIELDS[:-len(OPTIONAL_FIELDS)]
            return self._query_gpu()
        return rc, out, err

    def snapshot(self):
        """Probe the GPUs now.

        Runs nvidia-smi twice, three times when a GPU is in MIG mode, and
        reads the kernel log's Xid messages.
        """
        now = self._clock()
        rc, out, err = self._query_gpu()
        if rc is None:
            return Snapshot(now, False, {}, {}, NO_NVIDIA_SMI)
        snap = self._snapshot(now, rc, out, err)
        return dataclasses.replace(
            snap, mig=self._mig(snap.gpus) if snap.available else {},
            xids=self._xids(), uptime=self._uptime(),
            boot_id=self._boot_id())

    def _snapshot(self, now, rc, out, err):
        if rc == nvidia_smi.FAILED_TO_RUN:
            # timed out or could not be started: err says which
            LOG.warning('%s', err)
            return Snapshot(now, False, {}, {}, err)
        if 'No devices were found' in out + err:
            return Snapshot(now, True, {}, {})
        try:
            gpus = parse_query_gpu(out + '\n' + err)
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
        rc, out, err = nvidia_smi.run(self._path, [
            '--query-compute-apps=%s' % ','.join(APP_FIELDS),
            '--format=csv'], self._timeout)
        if rc != 0:
            message = (err or out).strip() or 'status %s' % rc
            LOG.warning('%(path)s --query-compute-apps failed: %(error)s',
                        {'path': self._path, 'error': message})
            return Snapshot(now, False, gpus, {}, message)
        try:
            apps = parse_compute_apps(out)
        except ValueError as exc:
            LOG.warning('%(path)s --query-compute-apps printed something '
                        'else than CSV (%(error)s)',
                        {'path': self._path, 'error': exc})
            return Snapshot(now, False, gpus, {}, 'unexpected output')
        return Snapshot(now, True, gpus, apps)
