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

"""Neutron ports as container NICs, plugged through os-vif.

One Neutron port is one LXD ``nic`` device. LXD makes the veth pair when
the container starts (or when the device is hot-plugged into a running
container) and names the host end after the port, so Neutron's agents
find it; this module prepares what the veth plugs into and removes it
again.

Per VIF type:

``ovs`` (ML2/OVS, OVN)
    Always the *hybrid* plug, whatever the port's ``ovs_hybrid_plug``
    says: os-vif creates a per-port Linux bridge ``qbr<port id>`` and a
    ``qvb``/``qvo`` veth pair whose ``qvo`` end is an OVS port on the
    integration bridge, carrying the port's ``external-ids``
    (``iface-id``, ``attached-mac``, ``vm-uuid``). The container NIC is
    ``nictype=bridged`` with ``parent=qbr<port id>``. A container cannot
    use the direct plug (a tap device that the hypervisor opens), so the
    hybrid plug is the only way to put a veth into OVS with the port's
    identity; the old nova-lxd driver did the same.
``tap`` (e.g. routed backends)
    ``nictype=p2p``: a veth pair with no bridge, host end named after the
    port; the backend routes to it. Nothing to plug beforehand.
``bridge`` (Linux bridge)
    Nova 34 refuses this VIF type itself (the Linux bridge agent is gone
    from Neutron and os-vif), so such ports never reach the driver.

Every NIC gets the port's MAC (``hwaddr``), the network's MTU (``mtu``)
and the host-side name nova chose for the port (``host_name``, ``tap`` +
the start of the port id). The LXD device is named ``nova-port-<port id>``
and the interface inside the container ``eth<N>``: ports present at spawn
are ``eth0``, ``eth1``, ... in network_info order, a hot-plugged port gets
the lowest free ``eth<N>``.

At spawn, ports Neutron has not reported active are waited for
(``network-vif-plugged``, up to ``[DEFAULT] vif_plugging_timeout``;
``vif_plugging_is_fatal`` decides whether a timeout fails the spawn), as
the libvirt driver does. The wait is registered before the host side is
plugged, so an event that Neutron sends as soon as the OVS port appears is
not missed.
"""

import contextlib
import copy
import threading

from nova.compute import task_states
from nova import exception as nova_exception
from nova.network import model as network_model
from nova.network import os_vif_util
import os_vif
from os_vif import exception as osv_exception
from oslo_log import log as logging
from oslo_utils import excutils

from nova_lxd_accel.container import identity
from nova_lxd_accel.container import nic
from nova_lxd_accel import exception

LOG = logging.getLogger(__name__)

#: ComputeDriver capabilities this module provides (merged by the driver).
CAPABILITIES = {
    'supports_attach_interface': True,
}

#: Tasks during which ``plug_vifs`` starts waiting for Neutron's events
#: (the container is started right after).
_SPAWN_TASKS = (task_states.SPAWNING, task_states.REBUILD_SPAWNING)

_OS_VIF_LOCK = threading.Lock()
_OS_VIF_READY = False


def _initialize_os_vif():
    global _OS_VIF_READY
    with _OS_VIF_LOCK:
        if not _OS_VIF_READY:
            os_vif.initialize()
            _OS_VIF_READY = True


def plugged_events(network_info):
    """The network-vif-plugged events to wait for (ports not yet active).

    Like the libvirt driver: a port that is active already will not go
    through down->up, and a port with no 'active' key is assumed up.
    """
    return [('network-vif-plugged', vif['id'])
            for vif in network_info or []
            if vif.get('active', True) is False]


class Networking(object):

    """The host side of an instance's ports, and their hot-plug."""

    def __init__(self, client, conf, virtapi):
        self._client = client
        self._conf = conf
        self._virtapi = virtapi
        # instance uuid -> entered wait_for_instance_event context
        self._waits = {}
        self._waits_lock = threading.Lock()

    def _container_name(self, instance):
        return identity.container_name(
            self._conf.lxd.container_name_prefix, instance.uuid)

    # -- host side ----------------------------------------------------------

    @staticmethod
    def _osvif_vif(vif):
        """os-vif's object for an OVS port, hybrid plug forced."""
        forced = copy.copy(vif)
        forced['details'] = dict(vif.get('details') or {})
        forced['details'][network_model.VIF_DETAILS_OVS_HYBRID_PLUG] = True
        return os_vif_util.nova_to_osvif_vif(forced)

    def _os_vif(self, action, instance, vif):
        """os-vif's ``plug`` or ``unplug`` of an OVS port.

        :returns: whether there was anything to do (other VIF types have
            no host side to make).
        """
        if vif.get('type') != network_model.VIF_TYPE_OVS:
            return False
        _initialize_os_vif()
        try:
            getattr(os_vif, action)(
                self._osvif_vif(vif),
                os_vif_util.nova_to_osvif_instance(instance))
        except osv_exception.ExceptionBase as exc:
            raise exception.VIFPlugFailed(port_id=vif['id'],
                                          action=action, reason=exc)
        return True

    def _plug(self, instance, vif):
        nic.check_supported(vif)
        if self._os_vif('plug', instance, vif):
            LOG.debug('Plugged port %(port)s: bridge %(bridge)s',
                      {'port': vif['id'],
                       'bridge': nic.hybrid_bridge_name(vif)},
                      instance=instance)

    def _unplug(self, instance, vif):
        self._os_vif('unplug', instance, vif)

    def plug_vifs(self, instance, network_info):
        """Prepare the host side of the ports before the container starts.

        During a spawn this also starts listening for Neutron's
        network-vif-plugged events (see :meth:`wait_for_plugged`).
        """
        if instance.task_state in _SPAWN_TASKS:
            self._begin_wait(instance, network_info)
        try:
            for vif in network_info or []:
                self._plug(instance, vif)
        except Exception:
            with excutils.save_and_reraise_exception():
                self._abandon_wait(instance)

    def unplug_vifs(self, instance, network_info, ignore_errors=False):
        """Undo ``plug_vifs``; absent pieces are fine.

        Every port is tried; the first failure is raised afterwards unless
        ``ignore_errors``.
        """
        self._abandon_wait(instance)
        failures = []
        for vif in network_info or []:
            try:
                self._unplug(instance, vif)
            except Exception as exc:
                LOG.warning('Could not unplug port %(port)s: %(exc)s',
                            {'port': vif.get('id'), 'exc': exc},
                            instance=instance)
                failures.append(exc)
        if failures and not ignore_errors:
            raise failures[0]

    # -- network-vif-plugged ------------------------------------------------

    def _failed_event(self, event_name, instance):
        LOG.error('Neutron reported failure on event %(event)s for '
                  'instance %(uuid)s', {'event': event_name,
                                        'uuid': instance.uuid},
                  instance=instance)
        if self._conf.vif_plugging_is_fatal:
            raise nova_exception.VirtualInterfaceCreateException()

    def _begin_wait(self, instance, network_info):
        timeout = self._conf.vif_plugging_timeout
        events = plugged_events(network_info) if timeout else []
        if not events:
            return
        with self._waits_lock:
            if instance.uuid in self._waits:
                return
            waiter = self._virtapi.wait_for_instance_event(
                instance, events, timeout=timeout,
                error_callback=self._failed_event)
            waiter.__enter__()
            self._waits[instance.uuid] = waiter
        LOG.debug('Waiting for %s', events, instance=instance)

    def _abandon_wait(self, instance):
        with self._waits_lock:
            waiter = self._waits.pop(instance.uuid, None)
        if waiter is not None:
            # Closes nova's generator without waiting for the events.
            waiter.gen.close()

    @contextlib.contextmanager
    def wait_for_plugged(self, instance, network_info, power_on):
        """Around the container start: wait for network-vif-plugged.

        Waits (after the body) for the ports that were not active, if
        power_on and ``vif_plugging_timeout`` is set. A timeout raises
        ``VirtualInterfaceCreateException`` when ``vif_plugging_is_fatal``
        and is logged otherwise.
        """
        if not power_on:
            self._abandon_wait(instance)
            yield
            return
        self._begin_wait(instance, network_info)
        try:
            yield
        except Exception:
            with excutils.save_and_reraise_exception():
                self._abandon_wait(instance)
        with self._waits_lock:
            waiter = self._waits.pop(instance.uuid, None)
        if waiter is None:
            return
        try:
            waiter.__exit__(None, None, None)
        except nova_exception.InstanceEventTimeout:
            if self._conf.vif_plugging_is_fatal:
                LOG.error('Neutron did not report the ports of the '
                          'container plugged within %d seconds',
                          self._conf.vif_plugging_timeout,
                          instance=instance)
                raise nova_exception.VirtualInterfaceCreateException()
            LOG.warning('Neutron did not report the ports of the container '
                        'plugged within %d seconds; going on since '
                        'vif_plugging_is_fatal is off',
                        self._conf.vif_plugging_timeout, instance=instance)

    # -- hot plug -----------------------------------------------------------

    def attach_interface(self, instance, vif):
        """Plug the port and hot-add its NIC (running or stopped)."""
        name = self._container_name(instance)
        record = self._client.get_container(name)
        if record is None:
            raise nova_exception.InstanceNotFound(instance_id=instance.uuid)
        self._plug(instance, vif)
        # devices its profiles give it (their interface names are taken)
        from_profiles = {
            key: dev for key, dev in
            (record.get('expanded_devices') or {}).items()
            if key not in (record.get('devices') or {})}
        added = {}

        def add_nic(config, devices):
            taken = dict(from_profiles)
            taken.update(devices)
            taken.pop(nic.device_name(vif), None)
            added['nic'] = nic.nic_device(vif, nic.free_ifname(taken))
            devices[nic.device_name(vif)] = added['nic']

        try:
            # only this NIC's key, read-modify-write with the ETag
            if self._client.modify_container(name, add_nic) is None:
                raise nova_exception.InstanceNotFound(
                    instance_id=instance.uuid)
        except Exception as exc:
            LOG.error('Attaching port %(port)s failed: %(exc)s',
                      {'port': vif['id'], 'exc': exc}, instance=instance)
            try:
                self._unplug(instance, vif)
            except Exception:
                LOG.exception('Undoing the plug of port %s failed',
                              vif['id'], instance=instance)
            raise nova_exception.InterfaceAttachFailed(
                instance_uuid=instance.uuid)
        LOG.info('Attached port %(port)s as %(ifname)s',
                 {'port': vif['id'],
                  'ifname': added['nic']['name']},
                 instance=instance)

    def detach_interface(self, instance, vif):
        """Hot-remove the port's NIC (LXD deletes the veth), then unplug."""
        name = self._container_name(instance)
        found = []

        def remove_nic(config, devices):
            if nic.device_name(vif) not in devices:
                return False
            del devices[nic.device_name(vif)]
            found.append(True)

        try:
            # only this NIC's key, read-modify-write with the ETag
            self._client.modify_container(name, remove_nic)
        except exception.LXDAccelException as exc:
            LOG.error('Detaching port %(port)s failed: %(exc)s',
                      {'port': vif['id'], 'exc': exc}, instance=instance)
            raise nova_exception.InterfaceDetachFailed(
                instance_uuid=instance.uuid)
        if not found:
            LOG.warning('Container %(name)s has no NIC for port %(port)s; '
                        'removing only the host side',
                        {'name': name, 'port': vif['id']},
                        instance=instance)
        self._unplug(instance, vif)
        LOG.info('Detached port %s', vif['id'], instance=instance)
