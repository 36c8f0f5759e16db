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

"""Tests of nova_lxd_accel.client.images: images and their aliases.

The daemon's answers come from ``requests-mock``, shaped as LXD 5.0.2
gave them when the contract was recorded (tests/fixtures/seam_helpers.py);
the recorded contract already covers a plain import, the aliases of a new
image, publishing and deleting. Here: the split (metadata + rootfs)
import, replacing an alias, exporting, and daemon errors that must not
read as "no such image".
"""

import os

import fixtures
from requests_toolbelt.multipart import decoder
import testtools

from nova_lxd_accel.client import images
from nova_lxd_accel import exception
from tests.fixtures import lxd_responses
from tests.fixtures import seam_helpers

FINGERPRINT = ('e3e28ee1b261b6e6837a6621fdb9cc24'
               'd9f615cffa7ea3c375c335730b0414d8')
OPERATION = '566950f0-4683-438d-8d34-b3195682b6cb'
ALIAS_URL = '/1.0/images/aliases/' + seam_helpers.ALIAS


_sync = lxd_responses.sync
_error = lxd_responses.error


def _operation(status, err='', metadata=None):
    return {'id': OPERATION, 'class': 'task',
            'description': 'Downloading image', 'status': status,
            'status_code': {'Running': 103, 'Success': 200,
                            'Failure': 400}[status],
            'resources': None, 'metadata': metadata, 'may_cancel': False,
            'err': err, 'location': 'none'}


def _async():
    return {'type': 'async', 'status': 'Operation created',
            'status_code': 100, 'operation': '/1.0/operations/' + OPERATION,
            'error_code': 0, 'error': '', 'metadata': _operation('Running')}


class ImageClientTest(testtools.TestCase):

    def setUp(self):
        super(ImageClientTest, self).setUp()
        conf, self.mock = lxd_responses.mocked_daemon(self)
        self.client = images.ImageClient(conf)
        self.wait_url = '/1.0/operations/%s/wait' % OPERATION
        self.bodies = []

    def _accept_import(self):
        def keep_body(request, context):
            self.bodies.append((request.headers['Content-Type'],
                                request.body.read()))
            context.status_code = 202
            return _async()
        self.mock.post('/1.0/images', json=keep_body)
        self.mock.get(self.wait_url, json=_sync(_operation(
            'Success', metadata={'fingerprint': FINGERPRINT,
                                 'size': '1036178'})))

    def _files(self, rootfs_name):
        root = self.useFixture(fixtures.TempDir()).path
        metadata = os.path.join(root, 'meta.tar.xz')
        rootfs = os.path.join(root, rootfs_name)
        with open(metadata, 'wb') as handle:
            handle.write(b'metadata.yaml tarball')
        with open(rootfs, 'wb') as handle:
            handle.write(b'hsqs root file system')
        return metadata, rootfs

    def _parts(self):
        (content_type, body), = self.bodies
        parts = decoder.MultipartDecoder(body, content_type).parts
        return [(part.headers[b'Content-Disposition'].decode(),
                 part.content) for part in parts]

    def _methods(self, path):
        return [r.method for r in self.mock.request_history
                if r.path == path]

    def test_a_split_image_is_sent_as_metadata_and_rootfs(self):
        self._accept_import()
        metadata, rootfs = self._files('root.tar.gz')
        self.assertEqual(FINGERPRINT, self.client.import_split_image(
            'glance image 1', metadata, rootfs, rootfs_is_squashfs=False))
        self.assertEqual(
            [('form-data; name="metadata"; filename="metadata"',
              b'metadata.yaml tarball'),
             ('form-data; name="rootfs"; filename="rootfs"',
              b'hsqs root file system')], self._parts())
        (post,) = [r for r in self.mock.request_history
                   if r.method == 'POST']
        self.assertEqual([seam_helpers.PROJECT], post.qs['project'])

    def test_a_squashfs_root_is_a_container_rootfs_not_a_vm_disk(self):
        self._accept_import()
        metadata, rootfs = self._files('root.squashfs')
        self.client.import_split_image('glance image 1', metadata, rootfs,
                                       rootfs_is_squashfs=True)
        self.assertEqual(['metadata', 'rootfs'], [
            name.split('name="')[1].split('"')[0]
            for name, _ in self._parts()])

    def test_a_refused_import_names_the_image_and_lxd_reason(self):
        self.mock.post('/1.0/images', status_code=202, json=_async())
        self.mock.get(self.wait_url, json=_sync(_operation(
            'Failure', err='Image with same fingerprint already exists')))
        error = self.assertRaises(
            exception.LXDOperationFailed, self.client.import_image,
            'glance image 1', b'tarball',
            {'Content-Type': 'application/octet-stream'})
        self.assertEqual('LXD refused to import image glance image 1: '
                         'Image with same fingerprint already exists',
                         str(error))

    def test_an_alias_is_replaced_not_duplicated(self):
        self.mock.get(ALIAS_URL, json=_sync({
            'name': seam_helpers.ALIAS, 'target': '0' * 64,
            'description': 'the old image', 'type': 'container'}))
        self.mock.delete(ALIAS_URL, json=_sync({}))
        self.mock.post('/1.0/images/aliases', json=_sync({}))
        self.client.set_alias(seam_helpers.ALIAS, FINGERPRINT, 'new')
        self.assertEqual(['GET', 'DELETE'], self._methods(ALIAS_URL))
        (post,) = [r for r in self.mock.request_history
                   if r.method == 'POST']
        self.assertEqual({'name': seam_helpers.ALIAS, 'target': FINGERPRINT,
                          'description': 'new'}, post.json())

    def test_an_alias_that_cannot_be_read_is_not_a_missing_alias(self):
        self.mock.get(ALIAS_URL, status_code=403,
                      json=_error(403, 'not authorized'))
        error = self.assertRaises(exception.LXDOperationFailed,
                                  self.client.get_alias, seam_helpers.ALIAS)
        self.assertNotIsInstance(error, exception.LXDObjectNotFound)
        self.assertIn('not authorized', str(error))

    def test_an_image_that_cannot_be_read_is_not_a_missing_image(self):
        self.mock.get('/1.0/images/' + FINGERPRINT, status_code=500,
                      json=_error(500, 'database is locked'))
        error = self.assertRaises(exception.LXDOperationFailed,
                                  self.client.image_exists, FINGERPRINT)
        self.assertIn('read image %s' % FINGERPRINT, str(error))
        self.assertIn('database is locked', str(error))

    def test_a_published_image_is_private(self):
        self.mock.post('/1.0/images', status_code=202, json=_async())
        self.mock.get(self.wait_url, json=_sync(_operation(
            'Success', metadata={'fingerprint': FINGERPRINT})))
        self.assertEqual(FINGERPRINT, self.client.publish(
            'snapshot', 'nova-1/snap0', {'description': 'backup'}))
        (post,) = [r for r in self.mock.request_history
                   if r.method == 'POST']
        self.assertEqual({'source': {'type': 'snapshot',
                                     'name': 'nova-1/snap0'},
                          'properties': {'description': 'backup'},
                          'public': False}, post.json())

    def test_an_export_is_the_raw_image_file(self):
        export = '/1.0/images/%s/export' % FINGERPRINT
        self.mock.get(export, content=b'\x1f\x8b image tarball',
                      headers={'Content-Type': 'application/octet-stream'})
        response = self.client.export_image(FINGERPRINT)
        self.assertEqual(b'\x1f\x8b image tarball', response.content)
        (request,) = [r for r in self.mock.request_history
                      if r.path == export]
        self.assertEqual([seam_helpers.PROJECT], request.qs['project'])
        self.assertTrue(request.stream)

    def test_exporting_a_missing_image(self):
        self.mock.get('/1.0/images/%s/export' % FINGERPRINT,
                      status_code=404, json=_error(404, 'Image not found'))
        error = self.assertRaises(exception.LXDObjectNotFound,
                                  self.client.export_image, FINGERPRINT)
        self.assertEqual('LXD has no image %s (while trying to export): '
                         'Image not found' % FINGERPRINT, str(error))
