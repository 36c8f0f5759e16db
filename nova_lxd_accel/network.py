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

"""Neutron ports as container NICs (os-vif). Not implemented yet.

The driver and ``lifecycle.spawn`` already call every method below; until
this module is filled in, instances get no NIC and hot-plugging an
interface is refused.
"""

import contextlib

#: ComputeDriver capabilities this module provides (merged by the driver).
CAPABILITIES = {
    'supports_attach_interface': False,
}


class Networking(object):

    def __init__(self, client, conf, virtapi):
        self._client = client
        self._conf = conf
        self._virtapi = virtapi

    def nic_devices(self, instance, network_info):
        """LXD devices for the instance's ports (pure), keyed by name."""
        return {}

    def plug_vifs(self, instance, network_info):
        """Prepare the host side of the ports before the container starts."""

    def unplug_vifs(self, instance, network_info):
        """Undo ``plug_vifs``; absent pieces are fine."""

    @contextlib.contextmanager
    def wait_for_plugged(self, instance, network_info, power_on):
        """Around the container start: wait for network-vif-plugged."""
        yield

    def attach_interface(self, instance, vif):
        raise NotImplementedError(
            'nova-lxd-accel cannot hot-plug interfaces yet')

    def detach_interface(self, instance, vif):
        raise NotImplementedError(
            'nova-lxd-accel cannot hot-unplug interfaces yet')
