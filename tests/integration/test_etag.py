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

"""Three writers of one container at once, against the real daemon.

A NIC attach, a volume attach and the release of an accelerator binding
(reconcile) each read the container and write back only the keys they
own (:meth:`nova_lxd_accel.client.LXDClient.modify_container`). Within
one nova-compute the per-instance lock serialises them; here each writer
stands for a separate process (its own client and its own lock, as two
nova-compute processes or an operator would be), and all three are made
to read before any writes. Only the daemon's ETag (``If-Match``, retried
on 412) then keeps every change: without it the last write wins and two
changes are lost.
"""

import json
import threading
import uuid

import nova.conf
from nova.network import model as network_model

from nova_lxd_accel.accel.binding import reconcile
from nova_lxd_accel import client
from nova_lxd_accel.container import identity
from nova_lxd_accel.container import nic
from nova_lxd_accel.container import volume
from nova_lxd_accel import host as lxd_host
from nova_lxd_accel.hostside import network
from nova_lxd_accel.hostside import volumes
from tests.fixtures import block_devices
from tests.integration import base

CONF = nova.conf.CONF
GPU = {'type': 'gpu', 'gputype': 'physical', 'pci': '0000:07:00.0'}


class WriterClient(client.LXDClient):
    """A client as another process would have: its own instance locks.

    Its first read of a container waits until every writer has read
    (or 30 s have passed), so that all of them write from the same state;
    its first write waits for its turn, so that the writes do not overlap
    (LXD refuses an update while another runs, which would hide a lost
    update behind a retry).
    """

    def __init__(self, conf, writer, barrier, turns):
        super().__init__(conf)
        self._writer = writer
        self._barrier = barrier
        self._turns = turns
        self._waited = False
        self._wrote = False
        self.reads = 0

    def instance_lock_name(self, name):
        return '%s-%s' % (super().instance_lock_name(name), self._writer)

    def get_container_etag(self, name):
        result = super().get_container_etag(name)
        self.reads += 1
        if not self._waited:
            self._waited = True
            try:
                self._barrier.wait(30)
            except threading.BrokenBarrierError:
                pass
        return result

    def _put_if_match(self, name, record, etag):
        if self._wrote:
            return super()._put_if_match(name, record, etag)
        self._wrote = True
        with self._turns['cond']:
            ticket = self._turns['next']
            self._turns['next'] += 1
            self._turns['cond'].wait_for(
                lambda: self._turns['done'] == ticket, 30)
        try:
            return super()._put_if_match(name, record, etag)
        finally:
            with self._turns['cond']:
                self._turns['done'] += 1
                self._turns['cond'].notify_all()


class ETagTest(base.DriverTestCase):

    def setUp(self):
        super().setUp()
        self.useFixture(block_devices.BrickFixture())
        self.loop = self.useFixture(block_devices.LoopDevice())
        self.instance = self.make_instance()
        self.name = self.container_name(self.instance)
        record = [{'name': 'nova-gpu0', 'kind': 'pgpu', 'resource_class':
                   'PGPU', 'provider': 'rp', 'pci': GPU['pci'],
                   'unit': 'pci:' + GPU['pci']}]
        # stopped, with an accelerator binding whose instance nova no
        # longer has on this host: reconcile releases it
        self.project._wait(self.project.client.api.instances.post(json={
            'name': self.name, 'type': 'container',
            'source': {'type': 'none'}, 'config': {
                identity.KEY_HOST: self.host,
                identity.KEY_INSTANCE_UUID: self.instance.uuid,
                identity.KEY_DEVICES: json.dumps(record)},
            'devices': {'nova-gpu0': GPU}}))

    def _vif(self):
        return network_model.VIF(
            id=str(uuid.uuid4()), address='fa:16:3e:00:00:01',
            type=network_model.VIF_TYPE_TAP,
            network=network_model.Network(id=str(uuid.uuid4()),
                                          bridge=None, subnets=[]),
            details={}, devname='tap' + str(uuid.uuid4())[:11])

    def test_three_writers_at_once_lose_nothing(self):
        barrier = threading.Barrier(3)
        turns = {'cond': threading.Condition(), 'next': 0, 'done': 0}
        clients = [WriterClient(CONF, w, barrier, turns)
                   for w in ('nic', 'volume', 'reconcile')]
        vif = self._vif()
        info = self.loop.connection_info(str(uuid.uuid4()))
        vol_name = volume.device_name(info, '/dev/vdb')
        errors = []

        def run(func, *args):
            try:
                func(*args)
            except Exception as exc:  # reported below
                errors.append(exc)

        threads = [
            threading.Thread(target=run, args=(
                network.Networking(clients[0], CONF, None).attach_interface,
                self.instance, vif)),
            threading.Thread(target=run, args=(
                volumes.Volumes(clients[1], CONF, lxd_host.Host(
                    clients[1], CONF,
                    identity.Owner(host=self.host)).guest).attach,
                self.context, info, self.instance, '/dev/vdb')),
            threading.Thread(target=run, args=(
                reconcile.reconcile, clients[2], self.host, set())),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        self.assertEqual([], errors)
        # all three read the same state before writing
        self.assertFalse(barrier.broken)
        record = self.container(self.instance)
        self.assertIn(nic.device_name(vif), record['devices'])
        self.assertIn(vol_name, record['devices'])
        self.assertNotIn('nova-gpu0', record['devices'])
        self.assertNotIn(identity.KEY_DEVICES, record['config'])
        # two of them found the container changed (412) and wrote again
        self.assertGreaterEqual(sum(c.reads for c in clients), 5)
        volumes.Volumes(clients[1], CONF, lxd_host.Host(
            clients[1], CONF, identity.Owner(host=self.host)).guest).detach(
            self.context, info, self.instance, '/dev/vdb')
