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

"""``nova-lxd-accel inventory`` through the daemon's own socket.

The recorded GPU host comes through the LXD proxy (the real daemon
answers everything else), so these need the run's daemon: they are not
unit tests.
"""

import json
import os

from nova_lxd_accel.accel import units
from nova_lxd_accel.cmd import main
from nova_lxd_accel.container import identity
from tests.fixtures import gpu_hosts
from tests.fixtures import host_cli
from tests.fixtures import lxd_fixtures
from tools.sandbox.venv import lxd_proxy


class InventoryThroughTheSeamTest(host_cli.CommandTestCase):

    def _run(self, conf_text):
        path = os.path.join(self.tmp, 'nova.conf')
        with open(path, 'w') as f:
            f.write(conf_text)
        return main.main(['inventory', '--config-file', path,
                          '--nodename', 'cmp1', '--format', 'json',
                          '--nvidia-smi-list', gpu_hosts.sample_path(
                              'nvsmi-h100-80gb-mig-4slices-L.txt')])

    def test_configured_endpoint_is_used(self):
        resources = gpu_hosts.load_json('handmade-lxd-h100-mig-host.json')
        proxy = self.useFixture(lxd_proxy.LXDProxy(
            {'gpu': resources['gpu']}))
        self.assertEqual(0, self._run('[lxd]\nendpoint = %s\n'
                                      % proxy.socket_path))
        providers = json.loads(self.stdout.getvalue())['providers']
        # the recorded H100 came through the proxy: this host has no GPU
        self.assertIn('cmp1_gpu_0000_00_09_0',
                      [p['name'] for p in providers])
        # the root provider has the daemon's traits, as the driver sets
        self.assertEqual(
            ['CUSTOM_LXD_DAEMON_%s' % lxd_fixtures.daemon().upper()],
            providers[0]['traits'])

    def test_slot_holders_of_every_project_are_listed(self):
        # a slot holder in an LXD project of its own: the listing spans
        # all projects, as a claim's does
        project = self.useFixture(lxd_fixtures.LXDProject('inv'))
        record = {'name': 'nova-gpushare0', 'kind': units.KIND_SHARE,
                  'resource_class': 'CUSTOM_GPU_SHARE', 'provider': 'rp',
                  'pci': '0000:00:09.0', 'unit': 'share:0000:00:09.0/1',
                  'slot': 1, 'project_id': 'proj-1'}
        created = project.client.api.instances.post(json={
            'name': 'nova-x', 'type': 'container', 'source': {'type': 'none'},
            'config': {identity.KEY_INSTANCE_UUID: 'uuid-x',
                       identity.KEY_DEVICES: json.dumps([record])}})
        project.client.operations.wait_for_operation(
            created.json()['operation'])
        resources = gpu_hosts.load_json('handmade-lxd-h100-mig-host.json')
        proxy = self.useFixture(lxd_proxy.LXDProxy(
            {'gpu': resources['gpu']}))
        # (the proxy hides other tests' projects from such listings)
        proxy.show_project(project.name)
        self.assertEqual(0, self._run(
            '[lxd]\nendpoint = %s\n[lxd_accelerators]\n'
            'shared_gpus = 0000:00:09.0:3\n' % proxy.socket_path))
        shared = [p for p in json.loads(self.stdout.getvalue())['providers']
                  if p['name'] == 'cmp1_gpu_0000_00_09_0'][0]
        self.assertEqual(
            (1, 3, [('uuid-x', 'proj-1', '%s/nova-x' % project.name)]),
            (shared['sharing']['slots_used'],
             shared['sharing']['slots_total'],
             [(s['instance'], s['project'], s['container'])
              for s in shared['sharing']['slots']]))
