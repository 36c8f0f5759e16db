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
one line per flavor: its name, then its extra specs as ``key=value`` words.
Used by the DevStack plugin; standard library only.

Usage: accel-flavors.py INVENTORY_JSON PREFIX GPU_RUNTIME
       accel-flavors.py --count INVENTORY_JSON
"""

import json
import sys

NVIDIA = 'CUSTOM_GPU_VENDOR_10DE'
MODEL_PREFIX = 'CUSTOM_GPU_MODEL_'
MIG_PREFIX = 'CUSTOM_MIG_'


def children(document):
    return [p for p in document.get('providers', []) if p.get('parent')]


def flavors(document, prefix, gpu_runtime):
    """[(name, [(key, value), ...])] in a stable order."""
    pgpu = [p for p in children(document) if 'PGPU' in p['inventories']]
    classes = set()
    for provider in children(document):
        classes.update(provider['inventories'])

    def runtime(providers):
        if gpu_runtime == 'nvidia' and all(
                NVIDIA in p['traits'] for p in providers):
            return [('lxd:gpu_runtime', 'nvidia')]
        return []

    out = []
    if pgpu:
        out.append(('%s.gpu' % prefix,
                    [('resources:PGPU', '1')] + runtime(pgpu)))
    models = sorted({t for p in pgpu for t in p['traits']
                     if t.startswith(MODEL_PREFIX)})
    for trait in models:
        with_model = [p for p in pgpu if trait in p['traits']]
        name = trait[len(MODEL_PREFIX):].lower().replace('_', '-')
        out.append(('%s.gpu.%s' % (prefix, name),
                    [('resources:PGPU', '1'),
                     ('trait:%s' % trait, 'required')] +
                    runtime(with_model)))
    for rc in sorted(c for c in classes if c.startswith(MIG_PREFIX)):
        profile = rc[len(MIG_PREFIX):].lower().replace('_', '.')
        out.append(('%s.mig.%s' % (prefix, profile),
                    [('resources:%s' % rc, '1')]))
    for rc, kind in (('CUSTOM_INFINIBAND_VF', 'vf'),
                     ('CUSTOM_INFINIBAND_PORT', 'port')):
        if rc in classes:
            out.append(('%s.ib.%s' % (prefix, kind),
                        [('resources:%s' % rc, '1')]))
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
    for name, specs in flavors(document, argv[1], argv[2]):
        print(' '.join([name] + ['%s=%s' % kv for kv in specs]))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
