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

"""Every device the binding can produce, through the REAL daemon's checks.

The functional tests go through :mod:`tools.sandbox.venv.lxd_proxy`, which
keeps gpu and infiniband devices away from LXD (there is no such hardware
here), so an option LXD does not accept would pass them all. Here each device
dict
:func:`nova_lxd_accel.accel.binding.pick.bind` produces, for each kind (whole
GPU, MIG device, InfiniBand VF and port) and each NVIDIA driver generation
(``MIG-<uuid>`` since R470, ``MIG-GPU-<uuid>/<gi>/<ci>`` before), is added
to a stopped container in a scratch LXD project straight on the daemon:
LXD validates a device's options when it is added, and finds the hardware
only at start. Every one must be accepted.
"""

import copy
import json
import os
import uuid

import fixtures
from pylxd import exceptions as lxd_exceptions
import testtools

from nova_lxd_accel.accel.binding import cdi
from nova_lxd_accel.accel.binding import pick
from nova_lxd_accel.accel.inventory import discovery
from nova_lxd_accel.accel import units
from nova_lxd_accel.container import identity
from nova_lxd_accel import exception
from tests.fixtures import gpu_hosts
from tests.fixtures import lxd_fixtures

NEW_MIG = gpu_hosts.load_text('mig-L-a100-sxm4-80gb-7x1g10gb.txt')
LEGACY_MIG = gpu_hosts.load_text(
    'mig-L-a100-sxm4-40gb-7x1g5gb-legacy-uuid.txt')
H100_MIG = gpu_hosts.load_text('nvsmi-h100-80gb-mig-4slices-L.txt')


def _gpu_card(pci, nvidia_uuid):
    card = copy.deepcopy(gpu_hosts.load_json(
        'handmade-lxd-h100-mig-host.json')['gpu']['cards'][1])
    card['pci_address'] = pci
    card['nvidia']['uuid'] = nvidia_uuid
    return card


def _host(mig_text, nvidia_uuid):
    """Resources of a host: one MIG GPU, one whole A100, IB VFs and port."""
    network = gpu_hosts.load_json('handmade-lxd-connectx6-ib-vfs.json')[
        'network']
    for i, vf in enumerate(network['cards'][1]['sriov']['vfs'][:4]):
        vf['ports'] = [{'id': 'ibp75s0v%d' % i, 'port': 0,
                        'protocol': 'infiniband'}]
    gpus = [_gpu_card('0000:00:09.0', nvidia_uuid)]
    gpus += gpu_hosts.load_json('handmade-lxd-two-a100-no-nvidia-object.json')[
        'gpu']['cards'][:1]
    resources = {'gpu': {'cards': gpus}, 'network': network}
    gpus, ib_cards = discovery.discover(
        resources, mig_text,
        discovery.Options.from_conf(gpu_hosts.make_conf()))
    return gpus, ib_cards


def _modes(extensions):
    """The NVIDIA binding modes a daemon with these extensions gets."""
    modes = [('runtime', cdi.RUNTIME)]
    if cdi.EXT_GPU_CDI in extensions:
        modes.append(('cdi', cdi.NvidiaBinding(
            cdi=True, mig_cdi=cdi.EXT_GPU_MIG_CDI in extensions)))
    else:
        # LXD 5.0 validates a CDI-shaped id as a plain string; the driver
        # uses CDI only where the daemon has gpu_cdi, checked all the same
        modes.append(('cdi', cdi.NvidiaBinding(cdi=True)))
    return modes


def produced_devices(extensions=()):
    """(label, device dict, binding config) for everything bind() makes."""
    out = []
    for mode_name, mode in _modes(extensions):
        for label, device, config in _produced(mode):
            out.append(('%s %s' % (mode_name, label), device, config))
    return out


def _produced(mode):
    out = []
    for label, text, gpu_uuid in (
            ('r470+', NEW_MIG, 'GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16'),
            ('legacy', LEGACY_MIG,
             'GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f'),
            ('h100', H100_MIG, 'GPU-00000000-0000-0000-0000-000000000000')):
        gpus, ib_cards = _host(text, gpu_uuid)
        providers = {}
        for device in gpus + ib_cards:
            providers['rp-' + device.pci_address] = device
        for rp, device in sorted(providers.items()):
            # whole InfiniBand ports too (report_infiniband_ports): every
            # device bind() can make is checked
            for rc, keys in sorted(units.provider_units(
                    device, ib_ports=True).items()):
                try:
                    bound = pick.bind(
                        {rp: {'resources': {rc: len(keys)}}},
                        providers.get, nvidia=mode, ib_ports=True)
                except (ValueError, exception.AcceleratorNotBindable):
                    # CDI cannot name a pre-R470 MIG device: refused
                    # before LXD, with the reason
                    continue
                for unit in bound.units:
                    out.append(('%s %s %s %s' % (label, rc, unit.key,
                                                 unit.name),
                                unit.device, bound.config))
    return out


class DeviceValidationTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.project = self.useFixture(lxd_fixtures.LXDProject('dv'))
        self.api = self.project.client.api
        self.extensions = self.project.admin.host_info['api_extensions']
        self.name = 'dv-%s' % uuid.uuid4().hex[:8]
        self.project._wait(self.api.instances.post(json={
            'name': self.name, 'type': 'container',
            'source': {'type': 'none'}}))

    def _patch(self, devices=None, config=None):
        body = {}
        if devices is not None:
            body['devices'] = devices
        if config is not None:
            body['config'] = config
        response = self.api.instances[self.name].patch(json=body)
        self.project._wait(response)

    def _remove(self, device_name):
        record = self.project.instance(self.name)
        devices = dict(record['devices'])
        devices.pop(device_name, None)
        self.project._wait(self.api.instances[self.name].put(json={
            'config': record['config'], 'devices': devices,
            'profiles': record['profiles'],
            'ephemeral': record['ephemeral']}))

    def test_every_produced_device_is_accepted(self):
        produced = produced_devices(self.extensions)
        kinds = {(label.split()[1], device['type'],
                  device.get('gputype'), 'mig.uuid' in device)
                 for label, device, _ in produced}
        # whole GPU, MIG by uuid (R470+) and by gi/ci (legacy), IB VF/port
        self.assertIn(('r470+', 'gpu', 'mig', True), kinds)
        self.assertIn(('legacy', 'gpu', 'mig', False), kinds)
        self.assertIn(('r470+', 'gpu', 'physical', False), kinds)
        self.assertIn(('r470+', 'infiniband', None, False), kinds)
        refused = []
        for label, device, _ in produced:
            try:
                self._patch(devices={'accel': device})
            except lxd_exceptions.LXDAPIException as exc:
                refused.append('%s %s: %s' % (label, json.dumps(device),
                                              exc))
                continue
            self.assertEqual(device, self.project.instance(
                self.name)['devices']['accel'])
            self._remove('accel')
        self.assertEqual([], refused)

    def test_binding_config_is_accepted(self):
        configs = {json.dumps({k: v for k, v in config.items()
                               if k != identity.KEY_DEVICES}, sort_keys=True)
                   for _, _, config in produced_devices(self.extensions)}
        for text in sorted(configs):
            config = json.loads(text)
            try:
                self._patch(config=config)
            except lxd_exceptions.LXDAPIException as exc:
                # nvidia.runtime needs the NVIDIA container tools on the
                # host; their absence is the only refusal allowed
                self.assertIn('NVIDIA container tools', str(exc), text)

    def test_shared_gpu_binding_is_accepted(self):
        # a shared A100 slot with an MPS quota: the gpu device, the MPS
        # pipe and shared memory mounts and the MPS environment
        conf = gpu_hosts.make_conf(shared_gpus=['0000:07:00.0:4:quota'])
        resources = {'gpu': gpu_hosts.load_json(
            'handmade-lxd-two-a100-no-nvidia-object.json')['gpu'],
            'network': {'cards': []}}
        gpus, _ = discovery.discover(resources, '',
                                     discovery.Options.from_conf(conf))
        shared = [g for g in gpus if g.shared_slots]
        self.assertEqual(['0000:07:00.0'], [g.pci_address for g in shared])
        directory = self.useFixture(fixtures.TempDir()).path
        # LXD checks that a disk's source exists when it is added: the
        # operator's MPS daemon made these (doc/source/admin/gpu-sharing)
        for sub in ('pipe-0000:07:00.0', 'shm-0000:07:00.0'):
            os.mkdir(os.path.join(directory, sub))
        bound = pick.bind(
            {'rp': {'resources': {'CUSTOM_GPU_SHARE': 1}}},
            {'rp': shared[0]}.get,
            share=pick.ShareRequest(
                project_id='p1', memory_mb=4096, compute_percent=25,
                mps_pipe=directory + '/pipe-{pci}',
                mps_shm=directory + '/shm-{pci}',
                shared_gpus=tuple(conf.lxd_accelerators.shared_gpus)))
        self.assertEqual(3, len(bound.devices))
        self._patch(devices=bound.devices, config=bound.config)
        record = self.project.instance(self.name)
        for name, device in bound.devices.items():
            self.assertEqual(device, record['devices'][name])
        self.assertEqual('0=4096M', record['config'][
            'environment.CUDA_MPS_PINNED_DEVICE_MEM_LIMIT'])

    def test_legacy_mig_id_is_refused_in_mig_uuid(self):
        # why legacy MIG devices are bound with mig.gi/mig.ci
        legacy = 'MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/7/0'
        device = {'type': 'gpu', 'gputype': 'mig', 'pci': '0000:00:09.0',
                  'mig.uuid': legacy}
        exc = self.assertRaises(lxd_exceptions.LXDAPIException,
                                self._patch, devices={'accel': device})
        self.assertIn('mig.uuid', str(exc))
        for _, device, _ in produced_devices(self.extensions):
            self.assertNotIn('/', device.get('mig.uuid', ''))
            self.assertNotIn('/', device.get('id', '').split('=')[-1])
