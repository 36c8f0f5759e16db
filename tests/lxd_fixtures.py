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

"""Fixtures that give tests a real LXD to work on, and clean it up.

Every test gets its own LXD project (instances and images apart, profiles
shared with the default project), so tests can run in parallel against one
daemon and nothing they make, images included, survives them.
"""

import os
import subprocess
import threading
import uuid

import fixtures
import pylxd

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_IMAGE_LOCK = threading.Lock()
_IMAGE_PATH = None


def tiny_image_path():
    """A busybox LXD image tarball: $NOVA_LXD_ACCEL_TEST_IMAGE, else built.

    Building needs Debian's busybox-static; .ci/run builds it once and
    exports the variable.
    """
    global _IMAGE_PATH
    with _IMAGE_LOCK:
        if _IMAGE_PATH is None:
            path = os.environ.get('NOVA_LXD_ACCEL_TEST_IMAGE')
            if not path or not os.path.exists(path):
                # Not under $TMPDIR: nova's test base gives every test a
                # temporary directory of its own and removes it afterwards.
                cache = os.path.join('/var/tmp', 'nova-lxd-accel-tests')
                os.makedirs(cache, exist_ok=True)
                path = os.path.join(cache, 'tiny-%d.tar.gz' % os.getpid())
                subprocess.run(
                    [os.path.join(REPO_ROOT, 'tools', 'build-tiny-image.sh'),
                     path], check=True, stdout=subprocess.DEVNULL)
            _IMAGE_PATH = path
        return _IMAGE_PATH


def tiny_image_bytes():
    with open(tiny_image_path(), 'rb') as handle:
        return handle.read()


def lxd_socket():
    return os.path.join(os.environ.get('LXD_DIR', '/var/lib/lxd'),
                        'unix.socket')


class LXDProject(fixtures.Fixture):
    """A fresh LXD project, removed with everything in it afterwards."""

    def __init__(self, prefix='t'):
        super(LXDProject, self).__init__()
        self.name = '%s-%s' % (prefix, uuid.uuid4().hex[:12])

    def _setUp(self):
        self.admin = pylxd.Client(endpoint=lxd_socket())
        self.admin.api.projects.post(json={
            'name': self.name,
            'config': {'features.images': 'true',
                       'features.profiles': 'false'}})
        self.client = pylxd.Client(endpoint=lxd_socket(), project=self.name)
        self.addCleanup(self._remove)

    def instances(self):
        """Every instance of the project as LXD reports it."""
        return self.client.api.instances.get(
            params={'recursion': 1}).json()['metadata']

    def instance(self, name):
        return self.client.api.instances[name].get().json()['metadata']

    def _remove(self):
        for record in self.instances():
            node = self.client.api.instances[record['name']]
            if record['status'] != 'Stopped':
                if record['status'] == 'Frozen':
                    node.state.put(json={'action': 'unfreeze'})
                response = node.state.put(json={'action': 'stop',
                                                'force': True})
                self._wait(response)
            self._wait(node.delete())
        for fingerprint in self.client.api.images.get().json()['metadata']:
            self._wait(self.client.api.images[
                fingerprint.rsplit('/', 1)[-1]].delete())
        self.admin.api.projects[self.name].delete()

    def _wait(self, response):
        body = response.json()
        if body.get('type') == 'async':
            self.client.api.operations[body['metadata']['id']].wait.get(
                params={'timeout': 60})
