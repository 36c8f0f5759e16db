#!/usr/bin/env python3
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

"""Example accelerator flavors for the providers a host reports.

Reads the output of ``nova-lxd-accel inventory --format json`` and prints
one line per flavor: its name, then its extra specs as ``key=value`` words,
then a tab and what the flavor gives in plain words (the end of the
flavor's description). Used by the DevStack plugin and the sandbox;
standard library only.

Usage: accel-flavors.py INVENTORY_JSON PREFIX GPU_RUNTIME
       accel-flavors.py --count INVENTORY_JSON
"""

import json
import re
import sys

NVIDIA = 'CUSTOM_GPU_VENDOR_10DE'
VENDOR_PREFIX = 'CUSTOM_GPU_VENDOR_'
MODEL_PREFIX = 'CUSTOM_GPU_MODEL_'
MIG_PREFIX = 'CUSTOM_MIG_'
# PCI vendor ids of the GPU makers, for the descriptions
VENDORS = {'10DE': 'NVIDIA', '1002': 'AMD', '8086': 'Intel'}
MIG_PROFILE = re.compile(r'^(\d+)g\.(\d+)gb')


def children(document):
    return [p for p in document.get('providers', []) if p.get('parent')]


def _model(trait):
    """CUSTOM_GPU_MODEL_NVIDIA_A100_SXM4_80GB -> NVIDIA A100 SXM4 80GB."""
    return trait[len(MODEL_PREFIX):].replace('_', ' ')


def _gpu_kind(providers):
    """The one model (or maker) of these GPUs in words, '' if mixed."""
    models = {t for p in providers for t in p['traits']
              if t.startswith(MODEL_PREFIX)}
    if len(models) == 1:
        return _model(models.pop())
    vendors = {t[len(VENDOR_PREFIX):] for p in providers for t in p['traits']
               if t.startswith(VENDOR_PREFIX)}
    if len(vendors) == 1:
        return VENDORS.get(vendors.pop(), '')
    return ''


def _mig_words(profile, providers):
    """'1 NVIDIA MIG slice 1g.10gb of an NVIDIA H100 80GB HBM3 (...)'."""
    words = '1 NVIDIA MIG slice %s' % profile
    kind = _gpu_kind(providers)
    if kind and kind != 'NVIDIA':
        words += ' of an %s' % kind
    sizes = MIG_PROFILE.match(profile)
    if sizes:
        compute, memory = (int(n) for n in sizes.groups())
        words += ' (%d compute slice%s, %d GB GPU memory)' % (
            compute, '' if compute == 1 else 's', memory)
    return words


def flavors(document, prefix, gpu_runtime):
    """[(name, [(key, value), ...], words)] in a stable order."""
    pgpu = [p for p in children(document) if 'PGPU' in p['inventories']]
    classes = set()
    for provider in children(document):
        classes.update(provider['inventories'])

    def runtime(providers):
        if gpu_runtime == 'nvidia' and all(
                NVIDIA in p['traits'] for p in providers):
            return [('lxd:gpu_runtime', 'nvidia')]
        return []

    def user_space(specs):
        if ('lxd:gpu_runtime', 'nvidia') in specs:
            return ", with NVIDIA's user space (nvidia.runtime)"
        return ''

    out = []
    if pgpu:
        specs = [('resources:PGPU', '1')] + runtime(pgpu)
        out.append(('%s.gpu' % prefix, specs,
                    '1 whole GPU, any model' + user_space(specs)))
    models = sorted({t for p in pgpu for t in p['traits']
                     if t.startswith(MODEL_PREFIX)})
    for trait in models:
        with_model = [p for p in pgpu if trait in p['traits']]
        name = trait[len(MODEL_PREFIX):].lower().replace('_', '-')
        specs = ([('resources:PGPU', '1'), ('trait:%s' % trait, 'required')]
                 + runtime(with_model))
        out.append(('%s.gpu.%s' % (prefix, name), specs,
                    '1 whole %s GPU%s' % (_model(trait), user_space(specs))))
        # a pool counts k cards of the model: k of them in one group
        most = max(p['inventories']['PGPU']['total'] for p in with_model)
        size = 2
        while size <= most:
            specs = ([('resources:PGPU', str(size)),
                      ('trait:%s' % trait, 'required')] +
                     runtime(with_model))
            out.append(('%s.gpu.%s.x%d' % (prefix, name, size), specs,
                        '%d whole %s GPUs on one host%s' % (
                            size, _model(trait), user_space(specs))))
            size *= 2
    for rc in sorted(c for c in classes if c.startswith(MIG_PREFIX)):
        profile = rc[len(MIG_PREFIX):].lower().replace('_', '.')
        with_rc = [p for p in children(document) if rc in p['inventories']]
        out.append(('%s.mig.%s' % (prefix, profile),
                    [('resources:%s' % rc, '1')],
                    _mig_words(profile, with_rc)))
    for rc, kind, words in (
            ('CUSTOM_INFINIBAND_VF', 'vf',
             '1 InfiniBand virtual function (SR-IOV VF)'),
            ('CUSTOM_INFINIBAND_PORT', 'port', '1 whole InfiniBand port')):
        if rc in classes:
            out.append(('%s.ib.%s' % (prefix, kind),
                        [('resources:%s' % rc, '1')], words))
    return out


def main(argv):
    if len(argv) == 2 and argv[0] == '--count':
        with open(argv[1]) as f:
            print(len(children(json.load(f))))
        return 0
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        document = json.load(f)
    for name, specs, words in flavors(document, argv[1], argv[2]):
        spec = ' '.join([name] + ['%s=%s' % kv for kv in specs])
        print('%s\t%s' % (spec, words))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
