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

"""Issue 11 item 13: snapshot of one container while another spawns.

Once, a spawn that began 0.35 s after a snapshot of another container
made from the same cached image failed with "Failed to handle idmapped
storage: Failed to change ownership of .../rootfs/bin/openvt". Here the
two overlap on purpose, several times: the spawn starts when the snapshot
has begun (its first task state), and both must succeed.
"""

import threading

from nova.compute import task_states

from tests.integration import base

ROUNDS = 4


class ConcurrentSnapshotSpawnTest(base.DriverTestCase):

    def test_snapshot_and_spawn_from_one_cached_image(self):
        image = self.tiny_image()
        source = self.make_instance()
        self.driver.spawn(self.context, source, image, [], None, {})
        uploads = []
        glance_update = self.glance.update

        def update(context, image_id, metadata, data=None, **kwargs):
            uploads.append(len(data.read()))
            return glance_update(context, image_id, metadata, **kwargs)

        self.glance.update = update
        for round_ in range(ROUNDS):
            snapshot = self.glance.create(self.context, {
                'name': 'snap-%d' % round_, 'status': 'queued'})
            started = threading.Event()
            errors = []

            def update_task_state(task_state, expected_state=None):
                if task_state == task_states.IMAGE_PENDING_UPLOAD:
                    started.set()

            def take_snapshot():
                try:
                    self.driver.snapshot(self.context, source,
                                         snapshot['id'], update_task_state)
                except Exception as exc:
                    errors.append(exc)
                finally:
                    started.set()

            worker = threading.Thread(target=take_snapshot)
            worker.start()
            started.wait()
            clone = self.make_instance()
            self.driver.spawn(self.context, clone, image, [], None, {})
            worker.join()
            self.assertEqual([], errors)
            self.assertEqual('Running', self.container(clone)['status'])
            self.driver.destroy(self.context, clone, [])
        self.assertEqual(ROUNDS, len(uploads))
        self.assertEqual(1, len(self.project.client.api.images.get().json()[
            'metadata']))
