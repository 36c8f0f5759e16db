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

"""Image cache behaviour and lifecycle events, on the real LXD."""

import io
import tarfile
import time

from nova import objects
from nova.virt import event as virtevent

from nova_lxd_accel import exception
from tests.integration import base


class ImageCacheTest(base.DriverTestCase):

    def _images_with_alias(self, image_meta):
        alias = 'nova-image-%s' % image_meta.id
        try:
            return self.project.client.api.images.aliases[alias].get().json()[
                'metadata']
        except Exception:
            return None

    def test_imported_once_per_checksum(self):
        image = self.tiny_image()
        downloads = []
        download = self.glance.download

        def counting_download(context, image_id, **kwargs):
            downloads.append(image_id)
            return download(context, image_id, **kwargs)

        self.glance.download = counting_download
        first, second = self.make_instance(), self.make_instance()
        self.driver.spawn(self.context, first, image, [], None, {},
                          power_on=False)
        self.driver.spawn(self.context, second, image, [], None, {},
                          power_on=False)
        self.assertEqual([image.id], downloads)
        alias = self._images_with_alias(image)
        self.assertEqual(image.checksum, alias['description'])

        # The same image id with new bytes (a new checksum) is fetched again.
        changed = objects.ImageMeta.from_dict({
            'id': image.id, 'checksum': 'changed', 'disk_format': 'raw',
            'container_format': 'bare'})
        third = self.make_instance()
        self.driver.spawn(self.context, third, changed, [], None, {},
                          power_on=False)
        self.assertEqual([image.id, image.id], downloads)
        self.assertEqual('changed',
                         self._images_with_alias(image)['description'])

    def test_rootfs_tarball_becomes_split_image(self):
        image = self._rootfs_only_image('rootfs-only')
        instance = self.make_instance()
        self.driver.spawn(self.context, instance, image, [], None, {})
        self.assertEqual('Running', self.container(instance)['status'])
        self.assertIsNotNone(self._images_with_alias(image))

    def _fingerprints(self):
        return {image.fingerprint
                for image in self.project.client.images.all()}

    def _rootfs_only_image(self, checksum):
        """A Glance image of the tiny rootfs alone (a split import)."""
        data = io.BytesIO()
        with tarfile.open(fileobj=data, mode='w:gz') as archive:
            with tarfile.open(base.lxd_fixtures.tiny_image_path()) as tiny:
                for member in tiny.getmembers():
                    if not member.name.startswith('rootfs'):
                        continue
                    member.name = member.name[len('rootfs/'):] or '.'
                    archive.addfile(member, tiny.extractfile(member)
                                    if member.isfile() else None)
        return self.create_image(data.getvalue(), checksum=checksum)

    def test_image_without_alias_is_not_left_behind(self):
        # prune walks the driver's aliases: an image imported whose alias
        # could not be set would stay in the daemon for good
        image = self._rootfs_only_image('alias-fails')
        before = self._fingerprints()
        client = self.driver._parts.client

        def refuse(alias, fingerprint, description=''):
            raise exception.LXDOperationFailed(
                action='create', target='image alias %s' % alias,
                reason='refused by the test')

        real = client.set_alias
        client.set_alias = refuse
        try:
            self.assertRaises(exception.LXDOperationFailed,
                              self.driver._parts.images.ensure,
                              self.context, image)
        finally:
            client.set_alias = real
        self.assertEqual(before, self._fingerprints())
        # and the next boot imports it again, with its alias
        self.driver._parts.images.ensure(self.context, image)
        self.assertIsNotNone(self._images_with_alias(image))


class ImageCachePruneTest(base.DriverTestCase):

    def _aliases(self):
        return sorted(alias['name'] for alias in
                      self.project.client.api.images.aliases.get(
                          params={'recursion': 1}).json()['metadata'])

    def _images(self):
        return len(self.project.client.api.images.get().json()['metadata'])

    def test_unused_images_pruned_after_min_age(self):
        image = self.tiny_image()
        instance = self.make_instance(image_ref=image.id)
        self.driver.spawn(self.context, instance, image, [], None, {},
                          power_on=False)
        alias = 'nova-image-%s' % image.id
        self.flags(remove_unused_original_minimum_age_seconds=3600,
                   group='image_cache')
        # In use: kept, whatever its age.
        self.driver.manage_image_cache(self.context, [instance])
        self.assertEqual([alias], self._aliases())
        # Unused but younger than the minimum age: kept.
        self.driver.manage_image_cache(self.context, [])
        self.assertEqual([alias], self._aliases())
        # Unused and old enough: gone, and the container still starts.
        self.flags(remove_unused_original_minimum_age_seconds=0,
                   group='image_cache')
        self.driver.manage_image_cache(self.context, [])
        self.assertEqual([], self._aliases())
        self.assertEqual(0, self._images())
        self.driver.power_on(self.context, instance, [])
        self.assertEqual('Running', self.container(instance)['status'])

    def test_pruning_is_off_when_nova_says_so(self):
        image = self.tiny_image()
        self.driver.spawn(self.context, self.make_instance(), image, [], None,
                          {}, power_on=False)
        self.flags(remove_unused_base_images=False,
                   remove_unused_original_minimum_age_seconds=0,
                   group='image_cache')
        self.driver.manage_image_cache(self.context, [])
        self.assertEqual(['nova-image-%s' % image.id], self._aliases())

    def test_shared_bytes_keep_the_image(self):
        first, second = self.tiny_image(), self.tiny_image()
        for image in (first, second):
            self.driver.spawn(self.context, self.make_instance(), image, [],
                              None, {}, power_on=False)
        self.assertEqual(1, self._images())
        self.flags(remove_unused_original_minimum_age_seconds=0,
                   group='image_cache')
        keep = self.make_instance(image_ref=second.id)
        self.driver.manage_image_cache(self.context, [keep])
        self.assertEqual(['nova-image-%s' % second.id], self._aliases())
        self.assertEqual(1, self._images())

    def test_cache_image(self):
        image = self.tiny_image()
        self.assertTrue(self.driver.cache_image(self.context, image.id))
        self.assertFalse(self.driver.cache_image(self.context, image.id))
        self.assertEqual(['nova-image-%s' % image.id], self._aliases())


class LifecycleEventsTest(base.DriverTestCase):

    def test_change_made_outside_nova_emits_event(self):
        instance = self.make_instance()
        self.driver.spawn(self.context, instance, self.tiny_image(), [],
                          None, {})
        received = []
        self.driver.register_event_listener(received.append)
        self.flags(lifecycle_poll_interval=0.2, group='lxd')
        self.driver.init_host(self.host)   # starts the watcher
        time.sleep(0.5)
        # Someone stops the container with lxc, behind nova's back.
        node = self.project.client.api.instances[
            self.container_name(instance)]
        self.project._wait(node.state.put(json={'action': 'stop',
                                                'force': True}))
        deadline = time.monotonic() + 10
        while not received and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual([(instance.uuid, virtevent.EVENT_LIFECYCLE_STOPPED)],
                         [(event.get_instance_uuid(), event.get_transition())
                          for event in received])
