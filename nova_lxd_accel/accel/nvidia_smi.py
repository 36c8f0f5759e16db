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

"""NVIDIA MIG devices, from ``nvidia-smi -L`` (LXD does not list them).

Two UUID formats exist: ``MIG-<uuid>`` (driver R470 and later) and the
legacy ``MIG-GPU-<gpu-uuid>/<gi>/<ci>``. Newer drivers pad the columns
(``MIG 1g.10gb     Device  0:``). Lines that are neither a GPU nor a MIG
line (prompts, blank lines, indentation of pasted output) are ignored.
"""

import dataclasses
import re
import subprocess
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


#: :func:`run`'s return code when nvidia-smi timed out or could not start
FAILED_TO_RUN = -1


def _timed_out(exc):
    # eventlet's green Popen comes from a second copy of the subprocess
    # module, whose TimeoutExpired is another class with the same name
    return type(exc).__name__ == 'TimeoutExpired'


def run(path, args, timeout):
    """Run nvidia-smi: the one place the driver starts it.

    :returns: ``(returncode, stdout, stderr)``; returncode None when the
        binary does not exist, :data:`FAILED_TO_RUN` when it timed out
        (its process is killed) or could not be started (stderr says why).
    """
    try:
        proc = subprocess.run([path] + list(args), capture_output=True,
                              text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        return None, '', '%s not found' % path
    except OSError as exc:
        return FAILED_TO_RUN, '', 'cannot run %s: %s' % (path, exc)
    except Exception as exc:
        if not _timed_out(exc):
            raise
        return FAILED_TO_RUN, '', '%s did not answer within %s seconds' % (
            path, timeout)
    return proc.returncode, proc.stdout or '', proc.stderr or ''


def run_list(path='nvidia-smi', timeout=10):
    """Run ``<path> -L`` and return its output.

    :returns: the output; '' when the binary is absent or finds no device
        (no MIG); None when it failed or timed out, meaning "unknown": the
        caller then keeps what it knew before rather than dropping every
        MIG device of the host for one bad run.
    """
    rc, out, err = run(path, ['-L'], timeout)
    if rc is None:
        LOG.debug('%s not found: no MIG devices reported', path)
        return ''
    if rc == FAILED_TO_RUN:
        LOG.warning('%s -L: %s; keeping the MIG devices seen last', path,
                    err)
        return None
    if rc != 0:
        if 'No devices were found' in out + err:
            return ''
        LOG.warning('%s -L failed with status %s: %s', path, rc,
                    (err or out).strip())
        return None
    return out
