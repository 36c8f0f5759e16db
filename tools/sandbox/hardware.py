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

"""The simulated accelerator host of ``up --hardware NAME|DIR|none``.

A recorded host is a directory with the daemon's ``resources.json`` and,
optionally, recorded ``nvidia-smi`` answers. ``prepare`` copies one under
the state directory (``data/hardware``) with an ``nvidia-smi`` that prints
those answers; configs.py then points nova-compute at the LXD proxy and
that ``nvidia-smi``, and services.py starts the proxy.

Usage: hardware.py prepare NAME|DIR|none|""   ("": keep the last choice)
       hardware.py check NAME|DIR              exit 2 with the recorded
                                               hosts when there is none
       hardware.py summary                     what the simulated host has

Environment: SANDBOX_DIR (see layout.py). Any Python 3, standard library
only.
"""

import json
import os
import re
import shutil
import sys

from . import layout as layout_module

#: where recorded hosts are found by name
RECORDED = (os.path.join(layout_module.HERE, 'hardware'),
            os.path.join(layout_module.REPO_DIR, 'tests', 'unit', 'cmd',
                         'samples', 'doctor'))

#: the recorded files a host may have
RECORDED_FILES = ('resources.json', 'nvidia-smi-L.txt', 'nvidia-smi-q.txt',
                  'query-gpu.csv', 'compute-apps.csv',
                  # nvidia-smi topo -m: the GPUs' links (pools' card pick)
                  'nvidia-smi-topo-m.txt',
                  # nova-compute's [lxd_accelerators] options for this host
                  # (``key = value`` lines), e.g. shared_gpus
                  'lxd_accelerators.conf')

NVIDIA_SMI = r'''#!/bin/sh
# SIMULATED nvidia-smi of the nova-lxd-accel sandbox (up --hardware): it
# prints the recorded answers of the host named in ./name.
dir=$(dirname "$0")
case "$1" in
    -L) file=nvidia-smi-L.txt ;;
    -q) file=nvidia-smi-q.txt ;;
    --query-gpu=*) file=query-gpu.csv ;;
    --query-compute-apps=*) file=compute-apps.csv ;;
    topo) file=nvidia-smi-topo-m.txt ;;
    *) file= ;;
esac
if [ -z "$file" ] || [ ! -f "$dir/$file" ]; then
    echo "simulated nvidia-smi: no recorded answer to '$*'" >&2
    exit 9
fi
exec cat "$dir/$file"
'''


def _is_host(directory):
    return os.path.isfile(os.path.join(directory, 'resources.json'))


def names():
    """The recorded hosts that can be named, sorted."""
    found = set()
    for base in RECORDED:
        try:
            entries = os.listdir(base)
        except OSError:
            continue
        found.update(name for name in entries
                     if _is_host(os.path.join(base, name)))
    return sorted(found)


def source(name):
    """The directory of the recorded host ``name`` (or a path), or None."""
    if '/' in name:
        return os.path.abspath(name) if _is_host(name) else None
    for base in RECORDED:
        directory = os.path.join(base, name)
        if _is_host(directory):
            return directory
    return None


def active(layout):
    return _is_host(layout.hardware)


def host_name(layout):
    name = layout_module.read_text(os.path.join(layout.hardware, 'name'))
    return (name or '').strip() or 'unnamed'


def summary(directory):
    """What a recorded host has, in words ("3 NVIDIA GPUs, ...")."""
    try:
        with open(os.path.join(directory, 'resources.json')) as handle:
            resources = json.load(handle)
    except (OSError, ValueError):
        return 'no recorded resources'
    gpus = [card for card in resources.get('gpu', {}).get('cards') or []
            if card.get('pci_address') and
            (card.get('vendor_id') or '') == '10de']
    listed = layout_module.read_text(os.path.join(directory,
                                                  'nvidia-smi-L.txt'))
    mig = len(re.findall(r'^\s+MIG ', listed or '', re.M))
    infiniband = 0
    for card in resources.get('network', {}).get('cards') or []:
        ports = list(card.get('ports') or [])
        for vf in (card.get('sriov') or {}).get('vfs') or []:
            ports += vf.get('ports') or []
        infiniband += sum(1 for port in ports
                          if port.get('protocol') == 'infiniband')
    parts = ['%d NVIDIA GPU%s' % (len(gpus), '' if len(gpus) == 1 else 's')]
    if mig:
        parts.append('%d MIG device%s' % (mig, '' if mig == 1 else 's'))
    if infiniband:
        parts.append('%d InfiniBand ports and VFs' % infiniband)
    return ', '.join(parts)


def options(layout):
    """[(key, value)] of the simulated host's ``lxd_accelerators.conf``."""
    path = os.path.join(layout.hardware, 'lxd_accelerators.conf')
    if not os.path.isfile(path):
        return []
    out = []
    with open(path) as handle:
        for line in handle:
            key, sep, value = line.partition('=')
            if sep and not key.strip().startswith('#'):
                out.append((key.strip(), value.strip()))
    return out


#: where a simulated host's shared GPUs get their MPS directories (under
#: the hardware folder: no MPS control daemon runs, the directories are
#: what the containers mount)
MPS_PIPE = os.path.join('mps', 'pipe-{pci}')
MPS_SHM = os.path.join('mps', 'shm-{pci}')


def _quota_pcis(conf_path):
    """PCI addresses of the GPUs ``shared_gpus`` shares in quota mode."""
    pcis = []
    if not os.path.isfile(conf_path):
        return pcis
    with open(conf_path) as handle:
        for line in handle:
            key, sep, value = line.partition('=')
            if not sep or key.strip() != 'shared_gpus':
                continue
            for entry in value.split(','):
                entry = entry.strip()
                if entry.endswith(':quota'):
                    # <pci>:<slots>:quota; a model name is no directory
                    target = entry[:-len(':quota')].rsplit(':', 1)[0]
                    if re.match(r'^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:', target):
                        pcis.append(target)
    return pcis


def mps_options(layout):
    """[(key, value)]: the MPS directories of a host with shared GPUs."""
    given = {key for key, _value in options(layout)}
    if 'shared_gpus' not in given:
        return []
    return [(key, os.path.join(layout.hardware, template))
            for key, template in (('mps_pipe_directory', MPS_PIPE),
                                  ('mps_shm_directory', MPS_SHM))
            if key not in given]


def prepare(layout, choice):
    """Make nova-compute's hardware the one chosen.

    :param choice: a recorded host's name or directory; ``none``: the
        host's own; empty: keep what the last ``up`` chose.
    :returns: lines saying what nova-compute will see.
    :raises ValueError: no recorded host ``choice``.
    """
    if not choice:
        if active(layout):
            return ['SIMULATED hardware kept from the last up: %s (up '
                    '--hardware none: the host\'s own)' % host_name(layout)]
        return ['the host\'s own hardware (up --hardware NAME simulates '
                'one)']
    if choice == 'none':
        shutil.rmtree(layout.hardware, ignore_errors=True)
        if os.path.exists(layout.hw_devices):
            os.remove(layout.hw_devices)
        return ['simulated hardware off: nova-compute sees the host\'s own']
    directory = source(choice)
    if directory is None:
        raise ValueError(
            "no recorded host '%s' (a directory with resources.json); "
            "recorded hosts: %s" % (choice, ' '.join(names())))
    # Built beside, then swapped in: never half a host.
    staged = layout.hardware + '.new'
    shutil.rmtree(staged, ignore_errors=True)
    os.makedirs(staged)
    for name in RECORDED_FILES:
        if os.path.isfile(os.path.join(directory, name)):
            shutil.copyfile(os.path.join(directory, name),
                            os.path.join(staged, name))
    for pci in _quota_pcis(os.path.join(staged, 'lxd_accelerators.conf')):
        for template in (MPS_PIPE, MPS_SHM):
            os.makedirs(os.path.join(staged, template.format(pci=pci)))
    smi = os.path.join(staged, 'nvidia-smi')
    with open(smi, 'w') as handle:
        handle.write(NVIDIA_SMI)
    os.chmod(smi, 0o755)
    with open(os.path.join(staged, 'name'), 'w') as handle:
        handle.write(os.path.basename(directory.rstrip('/')) + '\n')
    with open(os.path.join(staged, 'source'), 'w') as handle:
        handle.write(directory + '\n')
    shutil.rmtree(layout.hardware, ignore_errors=True)
    os.rename(staged, layout.hardware)
    return ['SIMULATED hardware: %s from %s' % (host_name(layout), directory),
            '  ' + summary(layout.hardware)]


def prepare_and_say(layout, choice):
    """prepare: the choice under the state directory, printed; a status."""
    try:
        lines = prepare(layout, choice)
    except ValueError as error:
        sys.stderr.write('sandbox: %s\n' % error)
        return 2
    print('\n'.join(lines))
    return 0


def check(choice):
    """0 when CHOICE names a recorded host (or none), else 2, on stderr."""
    if choice in ('', 'none') or source(choice):
        return 0
    sys.stderr.write(
        "sandbox up: no recorded host '%s' (a directory with "
        "resources.json); recorded hosts: %s\n"
        % (choice, ' '.join(names())))
    return 2


def main(argv):
    layout = layout_module.Layout.from_environ()
    if len(argv) == 3 and argv[1] == 'prepare':
        return prepare_and_say(layout, argv[2])
    if len(argv) == 3 and argv[1] == 'check':
        return check(argv[2])
    if len(argv) == 2 and argv[1] == 'summary':
        if not active(layout):
            print('the host\'s own')
            return 1
        print('%s (%s)' % (host_name(layout), summary(layout.hardware)))
        return 0
    sys.stderr.write(__doc__.split('\n\n')[2] + '\n')
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv))
