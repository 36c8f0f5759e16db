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

"""nvidia-smi: the one place it is run, and every parser of its output.

:func:`run` starts nvidia-smi (the probe,
:mod:`nova_lxd_accel.accel.health.probe`, and the inventory's
:func:`run_list` go through it); the parsers are pure:

* ``nvidia-smi -L`` (:func:`parse_list`): the GPUs and their MIG devices
  (LXD does not list MIG devices). Two UUID formats exist: ``MIG-<uuid>``
  (driver R470 and later) and the legacy ``MIG-GPU-<gpu-uuid>/<gi>/<ci>``.
  Newer drivers pad the columns (``MIG 1g.10gb     Device  0:``). Lines
  that are neither a GPU nor a MIG line (prompts, blank lines, indentation
  of pasted output) are ignored;
* ``nvidia-smi --query-gpu=... --format=csv`` (:func:`parse_query_gpu`;
  ``--query-compute-apps`` is :mod:`.compute_apps`'): driven by
  the header line, so the output of any field list (recorded captures with
  two hundred columns, or the probe's) parses the same way; units
  (``81559 MiB``, ``100 %``, ``78.34 W``) and ``[N/A]`` are understood;
* ``nvidia-smi -q``: the same signals (:func:`parse_query`) and each MIG
  device's memory and processes (:func:`parse_mig_query`).

They return :class:`SmiGpu`, :class:`GpuFacts`, :class:`ComputeApp` and
:class:`MigFacts`. Unhealthy (:meth:`GpuFacts.problems`): uncorrectable
volatile ECC errors, retired pages pending, row remapping pending or
failed, or a GPU that has fallen off the bus (nvidia-smi says "GPU is
lost", "Unknown Error", or "requires reset").
"""

import csv
import dataclasses
import io
import os
import re
import subprocess
import threading
import typing

from oslo_log import log as logging

from nova_lxd_accel.accel import devices

LOG = logging.getLogger(__name__)

_GPU_LINE = re.compile(
    r'^\s*GPU\s+(?P<index>\d+)\s*:\s*(?P<name>.*?)\s*'
    r'\(UUID:\s*(?P<uuid>GPU-[^\s)]+)\s*\)\s*$')
_MIG_LINE = re.compile(
    r'^\s*MIG\s+(?P<profile>\S+)\s+Device\s+(?P<index>\d+)\s*:\s*'
    r'\(UUID:\s*(?P<uuid>MIG-[^\s)]+)\s*\)\s*$')
_LEGACY_MIG_UUID = re.compile(
    r'^MIG-(?P<gpu>GPU-[0-9A-Fa-f-]+)/(?P<gi>\d+)/(?P<ci>\d+)$')
_LOST_TEXT = ('gpu is lost', 'unknown error', 'requires reset',
              'fallen off the bus')
_HANDLE_ERROR = re.compile(
    r'(?:device handle for GPU|^GPU)\s*'
    r'(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])'
    r'\s*:\s*(?P<error>.+)$')
_NUMBER = re.compile(r'^\s*(-?\d+(?:\.\d+)?)')
#: The NVIDIA MPS server of a GPU shared with quotas: the operator's
#: daemon, which its control daemon starts for the first MPS client and
#: keeps running after the last one leaves. nvidia-smi lists it as a
#: compute process of the GPU; it is never a tenant's.
MPS_SERVER = 'nvidia-cuda-mps-server'
#: the kernel keeps this many characters of a process's name (``comm``)
COMM_LENGTH = 15


@dataclasses.dataclass(frozen=True)
class SmiGpu:
    """One ``GPU n: <name> (UUID: GPU-...)`` line and its MIG devices."""

    index: int
    name: str
    uuid: str
    mig_devices: typing.Tuple[devices.MigDevice, ...] = ()


def parse_list(text):
    """Parse ``nvidia-smi -L`` output.

    :param text: the command's standard output ('' or None: no GPU).
    :returns: list of :class:`SmiGpu` in the order printed. A MIG line
        before any GPU line is ignored.
    """
    gpus = []
    current = None
    migs = []

    def _close():
        if current is not None:
            gpus.append(dataclasses.replace(current, mig_devices=tuple(migs)))

    for line in (text or '').splitlines():
        match = _GPU_LINE.match(line)
        if match:
            _close()
            current = SmiGpu(index=int(match.group('index')),
                             name=match.group('name'),
                             uuid=match.group('uuid'))
            migs = []
            continue
        match = _MIG_LINE.match(line)
        if match and current is not None:
            uuid = match.group('uuid')
            gi = ci = None
            legacy = _LEGACY_MIG_UUID.match(uuid)
            if legacy:
                gi, ci = int(legacy.group('gi')), int(legacy.group('ci'))
            migs.append(devices.MigDevice(
                profile=match.group('profile'), uuid=uuid,
                index=int(match.group('index')), gpu_index=current.index,
                gi=gi, ci=ci))
    _close()
    return gpus


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
    #: the board's power draw (``power.draw``) and limit (``power.limit``)
    #: in watts; None when nvidia-smi has no value (``[N/A]`` on boards
    #: without power readings) or was not asked
    power_draw_w: typing.Optional[float] = None
    power_limit_w: typing.Optional[float] = None

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
    #: whether the process runs in a container (None: not known). A
    #: tenant may give its own process any name; only a host process
    #: is the operator's MPS server.
    in_container: typing.Optional[bool] = None

    @property
    def is_mps_server(self):
        """Whether this is the GPU's MPS server (:data:`MPS_SERVER`).

        By name (as nvidia-smi or the kernel's ``comm``, 15 characters,
        gives it) and only outside every container.
        """
        name = os.path.basename((self.name or '').strip())
        return self.in_container is not True and (
            name == MPS_SERVER or name == MPS_SERVER[:COMM_LENGTH])


def tenant_apps(apps):
    """The processes of ``apps`` that are not an MPS server."""
    return tuple(app for app in apps or () if not app.is_mps_server)


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


def _float(value):
    """``78.34 W`` -> 78.34; None for ``[N/A]``, ``[Unknown Error]``."""
    match = _NUMBER.match(_plain(value))
    return float(match.group(1)) if match else None


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
            lost=_lost_text(row.values()),
            power_draw_w=_float(row.get('power.draw')),
            power_limit_w=_float(row.get('power.limit')))
    for pci, error in _lost_from_lines(others).items():
        gpus[pci] = GpuFacts(pci_address=pci, lost=error)
    return gpus


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
        :func:`.compute_apps.parse` return them.
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


#: :func:`run`'s return code when nvidia-smi timed out or could not start
FAILED_TO_RUN = -1
#: Seconds :func:`run` waits for a timed-out nvidia-smi to end after its
#: SIGKILL before it abandons it (see :func:`abandoned_children`)
KILL_GRACE = 0.5

#: at most this many abandoned nvidia-smi processes alive at once: while
#: they are, no other is started (each would only join them, with a
#: reaper thread of its own, for as long as the GPU stays wedged)
MAX_STUCK = 2

_abandoned_lock = threading.Lock()
_abandoned = 0
_stuck = set()


def abandoned_children():
    """How many nvidia-smi processes :func:`run` abandoned so far.

    One is abandoned when it did not end within :data:`KILL_GRACE` of its
    SIGKILL: a process in an uninterruptible sleep in the kernel (the
    driver of a wedged GPU, after an Xid 79) cannot end until the kernel
    lets it. A daemon thread waits for each, so none stays a zombie once
    it ends; the count never goes down, it is the history of the process.
    """
    with _abandoned_lock:
        return _abandoned


def reset_abandoned():
    """Count no abandoned and no stuck process (tests)."""
    global _abandoned
    with _abandoned_lock:
        _abandoned = 0
        _stuck.clear()


def _count_abandoned():
    global _abandoned
    with _abandoned_lock:
        _abandoned += 1
        return _abandoned


def _timed_out(exc):
    # eventlet's green Popen comes from a second copy of the subprocess
    # module, whose TimeoutExpired is another class with the same name
    return type(exc).__name__ == 'TimeoutExpired'


def _seconds(value):
    """A timeout for a message: ``10``, ``1.5``, ``0.25``."""
    if isinstance(value, int) or value is None:
        return '%s' % value
    return '%g' % (round(value, 2) if value >= 1 else float('%.2g' % value))


def _reap(proc):
    """Wait for an abandoned child, so that it is no zombie once it ends."""
    try:
        proc.wait()
        LOG.info('The abandoned nvidia-smi (pid %(pid)s) ended at last '
                 '(status %(rc)s)', {'pid': proc.pid, 'rc': proc.returncode})
    except Exception:
        LOG.exception('Cannot wait for the abandoned nvidia-smi (pid %s)',
                      proc.pid)
    finally:
        with _abandoned_lock:
            _stuck.discard(proc)


def _abandon(proc, command):
    """Leave a killed child that does not end to a daemon reaper thread.

    Our ends of its pipes are closed (it can never block us through them),
    and a thread waits for it: a SIGKILLed process ends as soon as the
    kernel lets it, and must then be reaped.

    :returns: the number of children abandoned so far.
    """
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            try:
                pipe.close()
            except Exception:    # a half-read pipe may refuse: keep it
                pass
    with _abandoned_lock:
        _stuck.add(proc)
    reaper = threading.Thread(target=_reap, args=(proc,), daemon=True,
                              name='nvidia-smi-reaper-%s' % proc.pid)
    reaper.start()
    count = _count_abandoned()
    LOG.error('%(command)s (pid %(pid)s) did not end %(grace)s seconds '
              'after its SIGKILL: it is probably stuck in the kernel, in '
              'the driver of a wedged GPU. Left to a reaper thread '
              '(%(count)d nvidia-smi process(es) abandoned so far); each '
              'one stuck holds its memory and the GPU driver may block '
              'the next ones. Check dmesg for NVRM Xid errors (79: fallen '
              'off the bus), then drain the GPU and reset it '
              '(nvidia-smi --gpu-reset) or reboot the host.',
              {'command': command, 'pid': proc.pid, 'grace': KILL_GRACE,
               'count': count})
    return count


def run(path, args, timeout):
    """Run nvidia-smi: the one place the driver starts it.

    Never blocks for more than ``timeout`` + :data:`KILL_GRACE` seconds:
    a timed-out nvidia-smi is SIGKILLed, and when even that does not end
    it within :data:`KILL_GRACE` (stuck in the kernel on a wedged GPU,
    where SIGKILL waits for the driver), it is abandoned to a reaper
    thread and logged as an error (:func:`abandoned_children`), rather
    than holding a delete, the periodic task or a re-check forever as
    ``subprocess.run``'s unbounded wait after the kill would.

    :returns: ``(returncode, stdout, stderr)``; returncode None when the
        binary does not exist, :data:`FAILED_TO_RUN` when it timed out
        (its process is killed; stderr says ``did not answer within`` and,
        when it was abandoned, its pid) or could not be started (stderr
        says why).
    """
    command = ' '.join([path] + list(args))
    with _abandoned_lock:
        stuck = sorted(p.pid for p in _stuck)
    if len(stuck) >= MAX_STUCK:
        return FAILED_TO_RUN, '', (
            '%s not started: %d nvidia-smi processes of earlier probes are '
            'still stuck in the kernel (pids %s)' % (
                path, len(stuck), ', '.join(map(str, stuck))))
    try:
        proc = subprocess.Popen([path] + list(args), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    except FileNotFoundError:
        return None, '', '%s not found' % path
    except OSError as exc:
        return FAILED_TO_RUN, '', 'cannot run %s: %s' % (path, exc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except Exception as exc:
        if not _timed_out(exc):
            proc.kill()
            raise
    else:
        return proc.returncode, out or '', err or ''
    message = '%s did not answer within %s seconds' % (path,
                                                       _seconds(timeout))
    proc.kill()
    try:
        proc.communicate(timeout=KILL_GRACE)
    except Exception as exc:
        if not _timed_out(exc):
            raise
        _abandon(proc, command)
        message += (' and did not end after its SIGKILL: pid %s abandoned, '
                    'probably stuck in the kernel on a wedged GPU (see the '
                    'NVRM Xid errors of dmesg)' % proc.pid)
    return FAILED_TO_RUN, '', message


def run_text(path, args, timeout, absent, failed):
    """The output; '' when absent or no device; None (logged) on failure.

    None is "unknown this time": the caller keeps what it knew before.
    ``absent`` and ``failed`` end the debug and warning lines.
    """
    command = '%s %s' % (path, ' '.join(args))
    rc, out, err = run(path, args, timeout)
    if rc is None:
        LOG.debug('%s not found: %s', path, absent)
        return ''
    if rc == FAILED_TO_RUN:
        LOG.warning('%s: %s; %s', command, err, failed)
        return None
    if rc != 0:
        if 'No devices were found' in out + err:
            return ''
        LOG.warning('%s failed with status %s: %s', command, rc,
                    (err or out).strip())
        return None
    return out


def run_list(path='nvidia-smi', timeout=10):
    """Run ``<path> -L``: the MIG listing (see :func:`run_text`)."""
    return run_text(path, ['-L'], timeout, 'no MIG devices reported',
                    'keeping the MIG devices seen last')
