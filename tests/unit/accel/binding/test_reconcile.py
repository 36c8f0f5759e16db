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

"""init_host reconciliation of accelerator bindings (LXD records faked)."""

import json

import fixtures
from oslotest import base

from nova_lxd_accel.accel.binding import reconcile
from nova_lxd_accel.container import identity
from tests.fixtures import fake_lxd

GPU_RP = 'rp-gpu'


def _record(name, uuid, units, host='cmp1', extra_devices=None):
    devices = {'root': {'type': 'disk', 'path': '/', 'pool': 'default'}}
    records = []
    for i, (kind, key, rc, device) in enumerate(units):
        devices['nova-x%d' % i] = device
        records.append({'name': 'nova-x%d' % i, 'kind': kind, 'unit': key,
                        'resource_class': rc, 'provider': GPU_RP})
    devices.update(extra_devices or {})
    config = {identity.KEY_INSTANCE_UUID: uuid, identity.KEY_HOST: host}
    if records:
        config[identity.KEY_DEVICES] = json.dumps(records)
    return {'name': name, 'config': config, 'devices': devices,
            'architecture': 'x86_64', 'profiles': [], 'ephemeral': False}


GPU7 = ('pgpu', 'pci:0000:07:00.0', 'PGPU',
        {'type': 'gpu', 'gputype': 'physical', 'pci': '0000:07:00.0'})
GPU8 = ('pgpu', 'pci:0000:85:00.0', 'PGPU',
        {'type': 'gpu', 'gputype': 'physical', 'pci': '0000:85:00.0'})


def _daemon(records):
    """The shared fake daemon (tests/fixtures/fake_lxd.py) with ``records``."""
    return fake_lxd.FakeLXDClient(*records)


def _puts(client):
    return [(call[1], call[2]) for call in client.calls if call[0] == 'put']


class TestReconcile(base.BaseTestCase):

    def setUp(self):
        super().setUp()
        self.log = self.useFixture(fixtures.FakeLogger())

    def test_releases_bindings_of_instances_nova_no_longer_has(self):
        client = _daemon([_record('nova-a', 'a', [GPU7]),
                          _record('nova-b', 'b', [GPU8]),
                          _record('nova-c', 'c', [GPU8], host='other')])
        released = reconcile.reconcile(client, 'cmp1', {'b'})
        self.assertEqual(['nova-a'], released)
        (name, record), = _puts(client)
        self.assertEqual('nova-a', name)
        self.assertEqual(['root'], list(record['devices']))
        self.assertNotIn(identity.KEY_DEVICES, record['config'])
        self.assertEqual('a', record['config'][identity.KEY_INSTANCE_UUID])
        self.assertIn('pci:0000:07:00.0', self.log.output)

    def test_binding_kept_when_its_release_cannot_be_recorded(self):
        # the gate's note_destroy answers None: the GPU state file cannot
        # record the release, so the units stay with their container
        client = _daemon([_record('nova-a', 'a', [GPU7])])
        told = []
        released = reconcile.reconcile(
            client, 'cmp1', {'b'},
            on_release=lambda read: told.append(read()['name']))
        self.assertEqual(['nova-a'], told)
        self.assertEqual([], released)
        self.assertEqual([], _puts(client))
        self.assertIn('Keeping accelerators', self.log.output)
        # recorded (no unit or units marked): released
        self.assertEqual(['nova-a'], reconcile.reconcile(
            client, 'cmp1', {'b'}, on_release=lambda read: ()))

    def test_nothing_released_when_nova_unknown(self):
        client = _daemon([_record('nova-a', 'a', [GPU7])])
        self.assertEqual([], reconcile.reconcile(client, 'cmp1', None))
        self.assertEqual([], _puts(client))

    def test_double_binding_logged_with_instances(self):
        client = _daemon([_record('nova-a', 'a', [GPU7]),
                          _record('nova-b', 'b', [GPU7])])
        reconcile.reconcile(client, 'cmp1', {'a', 'b'})
        self.assertIn('pci:0000:07:00.0 is bound to more than one',
                      self.log.output)
        self.assertIn('nova-a (instance a)', self.log.output)
        self.assertIn('nova-b (instance b)', self.log.output)
        self.assertEqual([], _puts(client))

    def test_hand_made_bare_gpu_is_a_double_binding(self):
        client = _daemon([
            _record('nova-a', 'a', [GPU7]),
            _record('nova-b', 'b', [], extra_devices={
                'gpu': {'type': 'gpu', 'pci': '07:00.0'}})])
        reconcile.reconcile(client, 'cmp1', {'a', 'b'})
        self.assertIn('more than one container', self.log.output)

    def test_disagreement_with_placement_logged(self):
        client = _daemon([_record('nova-a', 'a', [GPU7]),
                          _record('nova-b', 'b', [GPU8])])
        allocations = {
            'a': {GPU_RP: {'resources': {'PGPU': 1}}},
            'b': {'rp-root': {'resources': {'VCPU': 1}},
                  'rp-other': {'resources': {'PGPU': 1}}}}
        reconcile.reconcile(client, 'cmp1', {'a', 'b'}, allocations.get)
        self.assertNotIn('Instance a ', self.log.output)
        self.assertIn('Instance b (container nova-b) has 1 PGPU of '
                      'resource provider rp-gpu bound (pci:0000:85:00.0 '
                      'nova-x0) but 0 allocated', self.log.output)
        self.assertIn('has 0 PGPU of resource provider rp-other bound',
                      self.log.output)

    def test_placement_failure_is_not_fatal(self):
        client = _daemon([_record('nova-a', 'a', [GPU7])])

        def broken(uuid):
            raise RuntimeError('placement down')
        reconcile.reconcile(client, 'cmp1', {'a'}, broken)
        self.assertIn('placement down', self.log.output)

    def test_placement_mismatches(self):
        units = [{'provider': 'p', 'resource_class': 'CUSTOM_MIG_1G_10GB'}]
        self.assertEqual([], reconcile.placement_mismatches(
            units, {'p': {'resources': {'CUSTOM_MIG_1G_10GB': 1}},
                    'root': {'resources': {'VCPU': 2}}}))
        self.assertEqual([('p', 'CUSTOM_MIG_1G_10GB', 1, 2)],
                         reconcile.placement_mismatches(
                             units, {'p': {'resources': {
                                 'CUSTOM_MIG_1G_10GB': 2}}}))
