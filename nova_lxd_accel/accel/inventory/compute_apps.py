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

"""``nvidia-smi --query-compute-apps=... --format=csv``: who runs on a GPU.

The one nvidia-smi answer that holds a tenant's text: the process name,
which nvidia-smi prints unquoted. A comma in it would move the columns
after it; a line break would start a line of the tenant's making, which
could read as a process on another tenant's GPU. So the probe does not
ask for the name (the kernel gives it, see
:func:`nova_lxd_accel.accel.health.probe.host_process`), and this parser,
driven by the header as the others of :mod:`.nvidia_smi`, takes only
lines whose every fixed column has its form: where a name column is there
(recorded captures), it takes whatever lies between the fixed columns
around it, and a line of any other shape makes the whole answer unusable
(the probe counts as incomplete: no released unit is verified clean on
it), never a row of its own.
"""

import re

from nova_lxd_accel.accel.inventory import nvidia_smi

#: each fixed column's form, as nvidia-smi prints it
_MEMORY = re.compile(r'^(?:(\d+)(?: MiB)?|\[N/A\]|N/A)$')
_FORMS = {
    'gpu_bus_id': re.compile(
        r'^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$'),
    'gpu_uuid': re.compile(r'^(?:GPU|MIG)-[0-9A-Za-z/-]+$'),
    'pid': re.compile(r'^[1-9][0-9]{0,9}$'),
    'used_gpu_memory': _MEMORY,
    'used_memory': _MEMORY,
}
#: the one column of free text (the tenant's choice of process name)
FREE_TEXT = 'process_name'


def printable(text, limit=64):
    """A process name fit for a log line: no control characters.

    At most ``limit`` characters; None for none.
    """
    if not text:
        return None
    return ''.join(c if c.isprintable() else '?' for c in text)[:limit]


def _row(line, header):
    """One process line as a dict, or None when it is not one."""
    fields = [field.strip() for field in line.split(',')]
    if FREE_TEXT in header and len(fields) > len(header):
        at = header.index(FREE_TEXT)
        end = len(fields) - (len(header) - at - 1)
        fields = fields[:at] + [', '.join(fields[at:end])] + fields[end:]
    if len(fields) != len(header):
        return None
    row = dict(zip(header, fields))
    if any(column in row and not form.match(row[column])
           for column, form in _FORMS.items()):
        return None
    return row


def _mib(row):
    match = _MEMORY.match(row.get('used_gpu_memory',
                                  row.get('used_memory', '')))
    return int(match.group(1)) if match and match.group(1) else None


def parse(text):
    """The processes of an answer: GPU PCI address -> ComputeApps.

    :returns: dict of tuples of :class:`.nvidia_smi.ComputeApp` (``name``
        None where the answer has no name column).
    :raises ValueError: when the text is not such an answer, or any line
        after the header is not a process row.
    """
    lines = [line for line in (text or '').splitlines() if line.strip()]
    if not lines:
        raise ValueError('no CSV header')
    header = [field.split('[', 1)[0].strip()
              for field in lines[0].split(',')]
    if 'pid' not in header or 'gpu_bus_id' not in header:
        raise ValueError('no "pid" and "gpu_bus_id" columns in the header')
    apps = {}
    for number, line in enumerate(lines[1:], 2):
        row = _row(line, header)
        if row is None:
            raise ValueError('line %d is not a process row' % number)
        pci = nvidia_smi.pci_address(row['gpu_bus_id'])
        apps.setdefault(pci, []).append(nvidia_smi.ComputeApp(
            pci_address=pci, pid=int(row['pid']),
            name=printable(row.get(FREE_TEXT)), used_memory_mib=_mib(row),
            gpu_uuid=row.get('gpu_uuid') or None))
    return {pci: tuple(found) for pci, found in apps.items()}
