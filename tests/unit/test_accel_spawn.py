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

"""Spawn wiring of accelerator binding, and the disk quota builder.

The LXD seam (``client``) is the shared fake (tests/fixtures/fake_lxd.py);
everything above it (lifecycle, config, binding) is real.
"""

import json

import fixtures
from nova import objects
from oslo_concurrency import lockutils
from oslo_config import cfg
import testtools

from nova_lxd_accel.accel.binding import claims
from nova_lxd_accel.accel import devices
from nova_lxd_accel.accel import units
from nova_lxd_accel import conf as lxd_conf
from nova_lxd_accel.container import builder
from nova_lxd_accel.container import identity
from nova_lxd_accel import exception
from nova_lxd_accel import lifecycle
from tests.fixtures import fake_lxd

UUID = '7a1c5f0e-4c0b-4a55-9d59-3f7c5d0f8e21'
GPU_RP = '11111111-1111-1111-1111-111111111111'
ROOT_RP = '22222222-2222-2222-2222-222222222222'
GPU = devices.Gpu(pci_address='0000:07:00.0', vendor_id='10de')


def _flavor(**extra_specs):
    return objects.Flavor(name='gpu.1', vcpus=1, memory_mb=128, root_gb=0,
                          ephemeral_gb=0, swap=0, extra_specs=extra_specs)


def _instance(uuid=UUID, **extra_specs):
    return objects.Instance(uuid=uuid, hostname='h', key_data=None,
                            user_data=None, flavor=_flavor(**extra_specs))


class FakeImages(object):

    def ensure(self, context, image_meta):
        return 'alias'


def lifecycle_conf():
    """A ConfigOpts with the driver's options and nova's shutdown_timeout."""
    conf = cfg.ConfigOpts()
    lxd_conf.register_opts(conf)
    conf([], default_config_files=[])
    conf.register_opt(cfg.IntOpt('shutdown_timeout', default=5))
    return conf


class SpawnTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        objects.register_all()
        self.conf = lifecycle_conf()
        self.client = fake_lxd.FakeLXDClient()
        self.lifecycle = lifecycle.Lifecycle(
            self.client, self.conf, FakeImages(),
            claims=claims.Claims(self.client, self.conf,
                                 {GPU_RP: GPU}.get))
        self.policy = builder.HostPolicy(host='cmp1')

    def spawn(self, instance, allocations):
        self.lifecycle.spawn(
            None, instance, objects.ImageMeta.from_dict({}), [],
            self.policy, allocations=allocations)

    def allocations(self):
        return {ROOT_RP: {'resources': {'VCPU': 1}},
                GPU_RP: {'resources': {'PGPU': 1}}}

    def test_gpu_bound_and_recorded(self):
        self.spawn(_instance(), self.allocations())
        record = self.client.records['nova-' + UUID]
        self.assertEqual({'type': 'gpu', 'gputype': 'physical',
                          'pci': '0000:07:00.0'},
                         record['devices']['nova-gpu0'])
        self.assertEqual(['pci:0000:07:00.0'], [
            r['unit'] for r in json.loads(
                record['config'][identity.KEY_DEVICES])])
        self.assertEqual('Running', record['status'])

    def test_held_gpu_refused_and_half_made_container_removed(self):
        # The claim runs on the created (stopped) container, under the
        # claim lock: a held unit refuses it before anything is bound or
        # started, and the half-made container is deleted.
        self.spawn(_instance(), self.allocations())
        other = '8b2d6a1f-0000-4000-8000-000000000002'
        del self.client.calls[:]
        exc = self.assertRaises(exception.AcceleratorUnavailable, self.spawn,
                                _instance(uuid=other), self.allocations())
        self.assertIn('nova-' + UUID, str(exc))
        self.assertEqual([('create', 'nova-' + other),
                          ('delete', 'nova-' + other)], self.client.calls)
        self.assertEqual(['nova-' + UUID], list(self.client.records))

    def test_failed_start_removes_container_and_binding(self):
        self.client.fail('change_state', exception.LXDOperationFailed(
            action='start', target='nova-' + UUID,
            reason='Failed to detect requested GPU device'),
            when=lambda name, action: action == 'start')
        self.assertRaises(exception.LXDOperationFailed, self.spawn,
                          _instance(), self.allocations())
        self.assertEqual({}, self.client.records)
        # the unit is free again for the next spawn
        self.client.fail('change_state', None)
        self.spawn(_instance(), self.allocations())

    def test_no_accelerators_no_lock_no_device(self):
        taken = []
        lock = lockutils.lock

        def spy(name, *args, **kwargs):
            taken.append(name)
            return lock(name, *args, **kwargs)

        self.useFixture(fixtures.MonkeyPatch(
            'oslo_concurrency.lockutils.lock', spy))
        self.spawn(_instance(), {ROOT_RP: {'resources': {'VCPU': 1}}})
        self.assertNotIn(claims.CLAIM_LOCK, taken)
        record = self.client.records['nova-' + UUID]
        self.assertEqual(['root'], list(record['devices']))
        self.assertNotIn(identity.KEY_DEVICES, record['config'])

    def test_destroy_releases(self):
        self.spawn(_instance(), self.allocations())
        self.lifecycle.destroy(_instance())
        self.assertEqual({}, units.held_units(
            self.client.list_containers()))


class DiskQuotaTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        objects.register_all()

    def _root(self, **specs):
        instance = _instance(**specs)
        return builder.build_container(
            instance, instance.flavor, objects.ImageMeta.from_dict({}),
            builder.HostPolicy(host='cmp1'))['devices']['root']

    def test_none(self):
        self.assertEqual({'type': 'disk', 'path': '/', 'pool': 'default'},
                         self._root())

    def test_bytes_iops_and_total(self):
        root = self._root(**{'quota:disk_read_bytes_sec': '10485760',
                             'quota:disk_write_iops_sec': '200',
                             'quota:disk_total_bytes_sec': '0',
                             'quota:disk_total_iops_sec': '500'})
        self.assertEqual('10485760B', root['limits.read'])
        self.assertEqual('200iops', root['limits.write'])
        self.assertEqual('500iops', root['limits.max'])

    def test_bytes_win_over_iops(self):
        root = self._root(**{'quota:disk_read_bytes_sec': '1000',
                             'quota:disk_read_iops_sec': '10'})
        self.assertEqual('1000B', root['limits.read'])

    def test_other_quota_keys_ignored(self):
        self.assertNotIn('limits.ingress', self._root(
            **{'quota:vif_inbound_average': '100',
               'quota:cpu_shares': '10'}))

    def test_raw_keys_never_reach_lxd(self):
        instance = _instance(**{'lxd:raw.lxc': 'x', 'raw.lxc': 'y',
                                'quota:raw.idmap': 'z'})
        container = builder.build_container(
            instance, instance.flavor, objects.ImageMeta.from_dict(
                {'properties': {'hw_video_model': 'vga'}}),
            builder.HostPolicy(host='cmp1'))
        self.assertEqual([], [k for k in container['config']
                              if k.startswith('raw.')])
