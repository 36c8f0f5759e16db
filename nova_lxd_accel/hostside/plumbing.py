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

"""The host side of an instance: its ports plugged, its volumes connected.

Spawn, the destination of a resize or migration, and a revert all make
the same host side before the container gets its NICs and volumes, and
undo it the same way: through :class:`HostPlumbing`.
"""

import dataclasses

from oslo_log import log as logging

from nova_lxd_accel.container import builder

LOG = logging.getLogger(__name__)


class HostPlumbing(object):
    """Plugs an instance's ports (os-vif) and connects its volumes.

    :param networking: the host's :class:`.network.Networking`, or None
        (a driver without networking: no NICs).
    :param volumes: the host's :class:`.volumes.Volumes`, or None.
    """

    def __init__(self, networking=None, volumes=None):
        self.networking = networking
        self._volumes = volumes

    def planned(self, network_info):
        """The :class:`.container.builder.HostSide` before anything is made.

        Pure: spawn builds the spec from it first, to refuse a bad port
        before touching the host.
        """
        return builder.HostSide(network_info=tuple(
            network_info or ()) if self.networking is not None else ())

    def connect(self, context, instance, network_info, block_device_info,
                plug_ports=True):
        """Plug the ports and connect the non-root volumes to this host.

        :param plug_ports: False: the caller plugs them later (a revert
            plugs once the original is back in place).
        :returns: the :class:`.container.builder.HostSide` made.
        """
        host_side = self.planned(network_info)
        if plug_ports:
            self.plug_ports(instance, network_info)
        if self._volumes is not None:
            host_side = dataclasses.replace(
                host_side, volumes=self._volumes.connect_boot_volumes(
                    context, instance, block_device_info))
        return host_side

    def plug_ports(self, instance, network_info):
        if self.networking is not None:
            self.networking.plug_vifs(instance, network_info)

    def release(self, instance, network_info, block_device_info,
                quiet=False):
        """Unplug the ports and disconnect the volumes.

        Every step runs, whatever an earlier one raised: a port that fails
        to unplug must not leave the volumes connected to this host (the
        source of a migration).

        :param quiet: log a failing step and go on (the undo of a failed
            spawn, which must raise its own error); else raise the first
            error once every step ran.
        """
        steps = []
        if self.networking is not None:
            steps.append((self.networking.unplug_vifs, network_info))
        if self._volumes is not None:
            steps.append((self._volumes.disconnect_all, block_device_info))
        failure = None
        for undo, info in steps:
            try:
                undo(instance, info)
            except Exception as exc:
                LOG.exception('Releasing the host side (ports, volumes) '
                              'failed', instance=instance)
                failure = failure or exc
        if failure is not None and not quiet:
            raise failure

    def wait_for_plugged(self, instance, network_info, start):
        """Call ``start()`` and wait for Neutron's plugged events."""
        if self.networking is None:
            start()
            return
        with self.networking.wait_for_plugged(instance, network_info,
                                              power_on=True):
            start()
