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

"""nova-compute's GPU probe loop, for :mod:`.test_energy_chain`.

Run with the project's Python (nova's requirements:
``NOVA_LXD_ACCEL_NOVA_PYTHON``), not the federation environment's::

    python -m tests.federation.energy_feeder HOST.json

``HOST.json`` describes a simulated host: its GPUs (``devices.Gpu``
fields, MIG devices as ``devices.MigDevice`` fields), its containers
(``{name, instance, project, units: [binding records]}``), the simulated
``nvidia-smi``, the state directory, the metrics file and the period.
Every period the driver's own :class:`.gate.GpuGate` probes the simulated
``nvidia-smi`` (whose ``--query-gpu`` answer the test rewrites with the
power it feeds), accounts and writes the metrics file, exactly as
nova-compute does. ``<metrics file>.ready`` appears after the first
refresh; the loop ends when ``<metrics file>.stop`` appears.
"""

import json
import os
import sys
import time

from oslo_config import cfg

from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel.health import gate
from nova_lxd_accel.accel.health import probe
from nova_lxd_accel.conf import accelerators
from nova_lxd_accel.container import identity


def _gpu(spec):
    spec = dict(spec)
    migs = tuple(devices.MigDevice(**m) for m in spec.pop('mig_devices', ()))
    return devices.Gpu(mig_devices=migs, **spec)


def _container(spec):
    return {'name': spec['name'], 'status': 'Running', 'config': {
        identity.KEY_INSTANCE_UUID: spec['instance'],
        identity.KEY_DEVICES: json.dumps(spec['units'])}}


def main(path):
    with open(path) as f:
        host = json.load(f)
    conf = cfg.ConfigOpts()
    accelerators.register_opts(conf)
    conf([])
    group = 'lxd_accelerators'
    conf.set_override('state_dir', host['state_dir'], group)
    conf.set_override('metrics_file', host['metrics_file'], group)
    conf.set_override('energy_uuid_label', host['uuid_label'], group)
    conf.set_override('kernel_log', '', group)
    gpus = [_gpu(g) for g in host['gpus']]
    containers = [_container(c) for c in host['containers']]
    projects = {c['instance']: c['project'] for c in host['containers']}
    the_gate = gate.GpuGate(
        conf, lambda: containers, lambda: gpus,
        instance_projects=lambda: projects,
        host_probe=probe.HostProbe(host['nvidia_smi'], timeout=5),
        background=False)
    ready = host['metrics_file'] + '.ready'
    stop = host['metrics_file'] + '.stop'
    while not os.path.exists(stop):
        the_gate.refresh()
        if not os.path.exists(ready):
            open(ready, 'w').close()
        time.sleep(host['period'])
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1]))
