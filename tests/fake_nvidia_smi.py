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

"""An ``nvidia-smi`` for hosts without NVIDIA GPUs (no hardware here).

A real executable (a shell script) answering the three questions the
driver asks: ``-L`` (MIG devices), ``--query-gpu=...`` and
``--query-compute-apps=...`` (the GPU probe), from files a test rewrites.
``--query-gpu`` rows are in the probe's own field list
(:data:`nova_lxd_accel.accel.health.probe.FIELDS`) with nvidia-smi's units;
``idle_rows`` makes one idle row per NVIDIA card of a ``/1.0/resources``
answer, so the probe sees every GPU LXD lists (a GPU it did not list would
count as fallen off the bus). Anything else exits 2, as nvidia-smi does
for an unknown option.
"""

import os
import stat

QUERY_HEADER = (
    'index, pci.bus_id, uuid, name, memory.total [MiB], memory.used [MiB], '
    'utilization.gpu [%], ecc.errors.uncorrected.volatile.total, '
    'retired_pages.pending, mig.mode.current, remapped_rows.pending, '
    'remapped_rows.failure')
APPS_HEADER = ('gpu_bus_id, gpu_uuid, pid, process_name, '
               'used_gpu_memory [MiB]')


def _bus_id(pci):
    # LXD's 0000:07:00.0 -> nvidia-smi's 00000000:07:00.0
    return '0000' + pci.upper()


def gpu_row(index, pci, uuid, name, total_mib=81559, used_mib=0,
            util_pct=0, mig_mode='Disabled'):
    return ('%d, %s, %s, %s, %d MiB, %d MiB, %d %%, 0, No, %s, No, No' % (
        index, _bus_id(pci), uuid, name, total_mib, used_mib, util_pct,
        mig_mode))


def app_row(pci, pid, name, used_mib, uuid='GPU-0'):
    return '%s, %s, %d, %s, %d MiB' % (_bus_id(pci), uuid, pid, name,
                                       used_mib)


def idle_rows(resources, names=None, mig_enabled=()):
    """One idle ``--query-gpu`` row per NVIDIA card of ``resources``.

    :param resources: a ``/1.0/resources`` answer (or its ``gpu`` part
        under the key ``gpu``).
    :param names: PCI address -> the name nvidia-smi gives (default: LXD's
        ``nvidia.model``, else its product name).
    :param mig_enabled: PCI addresses of GPUs in MIG mode.
    """
    cards = sorted((c for c in (resources.get('gpu') or {}).get('cards', ())
                    if (c.get('vendor_id') or '').lower() == '10de' and
                    c.get('pci_address')),
                   key=lambda c: c['pci_address'])
    rows = []
    for index, card in enumerate(cards):
        nvidia = card.get('nvidia') or {}
        pci = card['pci_address']
        name = (names or {}).get(pci) or nvidia.get('model') or \
            card.get('product') or 'NVIDIA GPU'
        rows.append(gpu_row(
            index, pci, nvidia.get('uuid') or 'GPU-%08d-0000-4000-8000-'
            '000000000000' % index, name,
            mig_mode='Enabled' if pci in mig_enabled else 'Disabled'))
    return rows


class FakeNvidiaSmi(object):
    """The script and its answer files in ``directory``."""

    def __init__(self, directory, listing='', gpu_rows=(), app_rows=()):
        self.directory = directory
        self.path = os.path.join(directory, 'nvidia-smi')
        self.set_listing(listing)
        self.set_gpus(*gpu_rows)
        self.set_apps(*app_rows)
        with open(self.path, 'w') as f:
            f.write('#!/bin/sh\ncase "$1" in\n'
                    '  -L) cat %(d)s/smi-L.txt ;;\n'
                    '  --query-gpu=*) cat %(d)s/query-gpu.csv ;;\n'
                    '  --query-compute-apps=*) cat %(d)s/apps.csv ;;\n'
                    '  *) exit 2 ;;\nesac\n' % {'d': directory})
        os.chmod(self.path, stat.S_IRWXU)

    def _write(self, name, text):
        with open(os.path.join(self.directory, name), 'w') as f:
            f.write(text)

    def set_listing(self, text):
        """What ``nvidia-smi -L`` prints."""
        self._write('smi-L.txt', text or '')

    def set_gpus(self, *rows):
        self._write('query-gpu.csv', '\n'.join((QUERY_HEADER,) + rows) + '\n')

    def set_apps(self, *rows):
        self._write('apps.csv', '\n'.join((APPS_HEADER,) + rows) + '\n')
