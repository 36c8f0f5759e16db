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

"""A compute host moved from LXD to Incus keeps its instances.

``lxd-to-incus`` converts the daemon at its standard location in place (it
stops LXD and moves its database), so it cannot run against a scratch
daemon on a shared test machine. What the driver relies on after the
conversion is what the daemon's database keeps: the container's name,
project, ``user.nova_lxd_accel.*`` configuration (binding record) and
devices (attached volumes). This test makes an instance with the driver on
the real LXD, copies the container's configuration and devices to the real
Incus the way the conversion keeps them, and checks that a driver on Incus
recognises the instance, its accelerator binding record and its volume.

Needs both daemons (tools/lxd-up.sh and tools/incus-up.sh; the sockets of
$LXD_DIR and $INCUS_DIR), whichever daemon the run uses otherwise; tox runs
it in integration-incus only (integration leaves it out).
"""

import json
import os
import uuid

from nova.compute import power_state
from nova.virt import driver as virt_driver
import pylxd

from nova_lxd_accel.accel.binding import reconcile
from nova_lxd_accel.container import identity
from tests.fixtures import block_devices
from tests.fixtures import lxd_fixtures
from tests.integration import base

LXD_SOCKET = lxd_fixtures.socket_of('lxd')
INCUS_SOCKET = lxd_fixtures.socket_of('incus')


def require_daemon(test, socket, kind, script):
    try:
        server = pylxd.Client(endpoint=socket).host_info['environment']
    except Exception as exc:
        test.fail('The %s daemon does not answer on %s (%s): start it with '
                  'tools/%s (tools/run-tests.sh does)' % (
                      kind, socket, exc, script))
    test.assertEqual(kind, server.get('server', 'lxd'))


class LXDToIncusTest(base.DriverTestCase):

    def setUp(self):
        require_daemon(self, LXD_SOCKET, 'lxd', 'lxd-up.sh')
        require_daemon(self, INCUS_SOCKET, 'incus', 'incus-up.sh')
        super(LXDToIncusTest, self).setUp()
        self.useFixture(block_devices.BrickFixture())
        self.source = self.useFixture(lxd_fixtures.LXDProject(
            socket=LXD_SOCKET, prefix='l2i'))
        self.target = self.useFixture(lxd_fixtures.LXDProject(
            socket=INCUS_SOCKET, name=self.source.name))

    def driver_on(self, socket):
        self.flags(endpoint=socket, project=self.source.name, group='lxd')
        driver = virt_driver.load_compute_driver(None, 'lxd_accel.LXDDriver')
        driver.init_host(self.host)
        self.addCleanup(driver.cleanup_host, self.host)
        return driver

    def convert(self, name):
        """Move a stopped container from LXD to Incus, config and devices.

        As lxd-to-incus keeps them: the instance's own configuration
        (volatile keys are the daemon's runtime state and are made anew),
        devices and profiles, on a root file system of the same image.
        """
        record = self.source.instance(name)
        images = self.source.client.api.images.get(
            params={'recursion': 1}).json()['metadata']
        fingerprint = record['config']['volatile.base_image']
        self.assertIn(fingerprint, [image['fingerprint'] for image in images])
        # the bytes the driver imported on the source (tiny_image)
        self.target.client.images.create(
            lxd_fixtures.tiny_image_bytes(self.project.name), wait=True)
        config = {key: value for key, value in record['config'].items()
                  if not key.startswith(('volatile.', 'image.'))}
        # lxd-to-incus renames the guest API key Incus renamed
        if 'security.devlxd' in config:
            config['security.guestapi'] = config.pop('security.devlxd')
        self.target.client.instances.create({
            'name': name, 'config': config, 'devices': record['devices'],
            'profiles': record['profiles'],
            'source': {'type': 'image', 'fingerprint': fingerprint}},
            wait=True)
        self.source.client.instances.get(name).delete(wait=True)
        return record

    def test_driver_on_incus_recognises_a_converted_instance(self):
        lxd_driver = self.driver_on(LXD_SOCKET)
        instance = self.make_instance()
        name = self.container_name(instance)
        lxd_driver.spawn(self.context, instance, self.tiny_image(), [],
                         None, {})
        loop = self.useFixture(block_devices.LoopDevice())
        volume_id = str(uuid.uuid4())
        info = loop.connection_info(volume_id)
        lxd_driver.attach_volume(self.context, info, instance, '/dev/vdb')
        marker = 'l2i-%s' % uuid.uuid4().hex[:8]
        self.source.execute(name, 'printf %s | dd of=/dev/vdb bs=512 '
                                  'count=1 conv=sync,fsync 2>/dev/null'
                            % marker)
        # An accelerator binding record, as spawn writes it on a GPU host
        # (this machine has none: the record alone, without its device).
        units = [{'unit': 'pgpu:0000:65:00.0', 'name': 'nova-gpu-0',
                  'rp_uuid': str(uuid.uuid4()), 'rc': 'PGPU'}]
        container = self.source.client.instances.get(name)
        container.config[identity.KEY_DEVICES] = json.dumps(units)
        container.save(wait=True)
        lxd_driver.power_off(instance, timeout=5)

        before = self.convert(name)
        self.assertEqual([], self.source.instances())

        incus_driver = self.driver_on(INCUS_SOCKET)
        self.assertTrue(incus_driver.instance_exists(instance))
        self.assertIn(name, incus_driver.list_instances())
        self.assertEqual(power_state.SHUTDOWN,
                         incus_driver.get_info(instance).state)
        after = self.target.instance(name)
        self.assertEqual(before['devices'], after['devices'])
        self.assertEqual(
            {'type': 'unix-block', 'source': loop.path, 'path': '/dev/vdb'},
            after['devices']['vol-' + volume_id])

        # The binding record: kept while nova has the instance on the host,
        # released once it does not.
        self.assertEqual([], reconcile.reconcile(
            incus_driver._parts.client, self.host, {instance.uuid}))
        self.assertEqual(units, identity.recorded_units(
            self.target.instance(name)['config']))

        incus_driver.power_on(self.context, instance, [])
        self.assertEqual(power_state.RUNNING,
                         incus_driver.get_info(instance).state)
        # The volume: the data written on LXD, read on Incus; detached by
        # the driver on Incus.
        self.assertEqual(marker.encode(), self.target.execute(
            name, 'dd if=/dev/vdb bs=512 count=1 2>/dev/null | head -c %d'
            % len(marker)))
        incus_driver.detach_volume(self.context, info, instance, '/dev/vdb')
        self.assertNotIn('vol-' + volume_id,
                         self.target.instance(name)['devices'])

        self.assertEqual([name], reconcile.reconcile(
            incus_driver._parts.client, self.host, set()))
        self.assertEqual([], identity.recorded_units(
            self.target.instance(name)['config']))

        incus_driver.destroy(self.context, instance, [])
        self.assertEqual([], self.target.instances())
        self.assertTrue(os.path.exists(loop.path))
