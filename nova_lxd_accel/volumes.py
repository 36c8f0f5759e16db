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

"""Cinder volumes in containers (os-brick). Not implemented yet."""

#: ComputeDriver capabilities this module provides (merged by the driver).
CAPABILITIES = {}


class Volumes(object):

    def __init__(self, client, conf):
        self._client = client
        self._conf = conf

    def connector(self, instance):
        raise NotImplementedError(
            'nova-lxd-accel does not attach Cinder volumes yet')

    def boot_devices(self, context, instance, block_device_info):
        """LXD devices for the non-root volumes mapped at boot."""
        return {}

    def disconnect_all(self, instance, block_device_info):
        """Disconnect every volume of ``block_device_info`` from the host."""

    def attach(self, context, connection_info, instance, mountpoint,
               disk_bus=None, device_type=None, encryption=None):
        raise NotImplementedError(
            'nova-lxd-accel does not attach Cinder volumes yet')

    def detach(self, context, connection_info, instance, mountpoint,
               encryption=None):
        raise NotImplementedError(
            'nova-lxd-accel does not attach Cinder volumes yet')
