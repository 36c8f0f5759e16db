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

"""The ephemeral disk: a custom volume made, grown and deleted with the
instance (nova_lxd_accel.instance.ephemeral through the lifecycle)."""

from nova import exception as nova_exception
from nova import objects
import testtools

from nova_lxd_accel.container import builder
from nova_lxd_accel import exception
from nova_lxd_accel.instance import ephemeral
from nova_lxd_accel.instance import lifecycle
from tests.fixtures import fake_lxd
from tests.fixtures import lifecycle_parts

UUID = '7a1c5f0e-4c0b-4a55-9d59-3f7c5d0f8e21'
NAME = 'nova-' + UUID
VOLUME = ('default', NAME + '-ephemeral0')


def _flavor(ephemeral_gb=1, swap=0):
    return objects.Flavor(name='eph', vcpus=1, memory_mb=128, root_gb=0,
                          ephemeral_gb=ephemeral_gb, swap=swap,
                          extra_specs={})


def _instance(**kwargs):
    return objects.Instance(uuid=UUID, hostname='h', key_data=None,
                            user_data=None, flavor=_flavor(**kwargs))


class EphemeralSpawnTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        objects.register_all()
        self.conf = lifecycle_parts.lifecycle_conf()
        self.client = fake_lxd.FakeLXDClient()
        self.lifecycle = lifecycle.Lifecycle(
            self.client, self.conf, lifecycle_parts.FakeImages(),
            lifecycle_parts.host(self.client, self.conf))
        self.policy = builder.HostPolicy(host='cmp1')

    def spawn(self, instance, block_device_info=None):
        self.lifecycle.spawn(None, instance, objects.ImageMeta.from_dict({}),
                             [], self.policy,
                             block_device_info=block_device_info)

    def test_volume_made_before_the_container_and_mounted_at_mnt(self):
        self.spawn(_instance())
        self.assertEqual([('create_volume',) + VOLUME + ({'size': '1GiB'},),
                          ('create', NAME)], self.client.calls[:2])
        self.assertEqual(
            {'type': 'disk', 'pool': 'default', 'source': VOLUME[1],
             'path': '/mnt'},
            self.client.records[NAME]['devices']['ephemeral0'])

    def test_no_volume_without_ephemeral_gb(self):
        self.spawn(_instance(ephemeral_gb=0))
        self.assertEqual({}, self.client.volumes)

    def test_destroy_deletes_the_volume(self):
        self.spawn(_instance())
        self.lifecycle.destroy(_instance())
        self.assertEqual({}, self.client.records)
        self.assertEqual({}, self.client.volumes)

    def test_failed_start_leaves_no_volume(self):
        self.client.fail('change_state', exception.LXDOperationFailed(
            action='start', target=NAME, reason='boom'),
            when=lambda name, action: action == 'start')
        self.assertRaises(nova_exception.BuildAbortException, self.spawn,
                          _instance())
        self.assertEqual({}, self.client.records)
        self.assertEqual({}, self.client.volumes)

    def test_failed_create_leaves_no_volume(self):
        self.client.fail('create_container', exception.LXDOperationFailed(
            action='create', target=NAME, reason='boom'))
        self.assertRaises(nova_exception.BuildAbortException, self.spawn,
                          _instance())
        self.assertEqual({}, self.client.records)
        self.assertEqual({}, self.client.volumes)

    def test_leftover_volume_of_an_earlier_attempt_replaced(self):
        self.client.volumes[VOLUME] = {'name': VOLUME[1], 'config': {
            'size': '5GiB'}}
        self.spawn(_instance())
        self.assertEqual({'size': '1GiB'},
                         self.client.volumes[VOLUME]['config'])

    def test_mappings_other_than_the_flavors_refused_before_lxd(self):
        for info in ({'ephemerals': [{'size': 1}, {'size': 1}]},
                     {'ephemerals': [{'size': 2}]},
                     {'ephemerals': [{'size': 1, 'guest_format': 'swap'}]},
                     {'swap': {'device_name': '/dev/sdb', 'swap_size': 1}}):
            error = self.assertRaises(
                nova_exception.BuildAbortException, self.spawn, _instance(),
                info)
            self.assertIn('ephemeral disk', str(error))
        self.assertEqual([], self.client.calls)

    def test_the_flavors_mapping_accepted(self):
        self.spawn(_instance(), {'ephemerals': [{'size': 1}]})
        self.assertIn(VOLUME, self.client.volumes)

    def test_interrupted_build_removes_the_volume(self):
        self.spawn(_instance())
        instance = _instance()
        instance.vm_state = 'building'
        instance.task_state = 'spawning'
        self.lifecycle.remove_interrupted_builds([instance], 'cmp1')
        self.assertEqual({}, self.client.volumes)


class EphemeralResizeTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        objects.register_all()
        self.conf = lifecycle_parts.lifecycle_conf()
        self.client = fake_lxd.FakeLXDClient()
        self.disks = ephemeral.EphemeralDisks(self.client, self.conf)

    def test_shrink_refused(self):
        error = self.assertRaises(
            nova_exception.ResizeError, self.disks.check_resize,
            _instance(ephemeral_gb=2), _flavor(ephemeral_gb=1))
        self.assertIn('cannot shrink (2 GiB to 1 GiB)', str(error))

    def test_same_size_or_larger_accepted(self):
        for old, new in ((1, 1), (0, 1), (1, 2), (0, 0)):
            self.disks.check_resize(_instance(ephemeral_gb=old),
                                    _flavor(ephemeral_gb=new))

    def test_grow_on_the_same_host(self):
        self.disks.check_resize(_instance(ephemeral_gb=1),
                                _flavor(ephemeral_gb=2))
        self.disks.create(_instance(), _flavor(ephemeral_gb=1))
        self.disks.grow(_instance(), _flavor(ephemeral_gb=2))
        self.assertEqual({'size': '2GiB'},
                         self.client.volumes[VOLUME]['config'])

    def test_grow_from_none_makes_it(self):
        self.disks.grow(_instance(ephemeral_gb=0), _flavor(ephemeral_gb=2))
        self.assertEqual({'size': '2GiB'},
                         self.client.volumes[VOLUME]['config'])

    def test_kept_while_the_kept_original_mounts_it(self):
        # a same-host revert: nova destroys the resized container while
        # the kept original still mounts the volume
        self.disks.create(_instance(), _flavor())
        self.client.add_instance({'name': 'nova-resize-' + UUID,
                                  'config': {}, 'devices': {
                                      'ephemeral0': {
                                          'type': 'disk', 'pool': 'default',
                                          'source': VOLUME[1],
                                          'path': '/mnt'}}})
        self.assertFalse(self.disks.delete(_instance()))
        self.assertIn(VOLUME, self.client.volumes)
