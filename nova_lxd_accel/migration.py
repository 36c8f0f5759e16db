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

"""Resize and cold migration. Not implemented yet."""

#: ComputeDriver capabilities this module provides (merged by the driver).
CAPABILITIES = {
    'supports_migrate_to_same_host': False,
}


class Migration(object):

    def __init__(self, client, conf, lifecycle, accelerators):
        self._client = client
        self._conf = conf
        self._lifecycle = lifecycle
        self._accelerators = accelerators

    def migrate_disk_and_power_off(self, context, instance, dest, flavor,
                                   network_info, block_device_info=None,
                                   timeout=0, retry_interval=0):
        raise NotImplementedError(
            'nova-lxd-accel cannot resize or migrate instances yet')

    def finish_migration(self, context, migration, instance, disk_info,
                         network_info, image_meta, resize_instance,
                         allocations, block_device_info=None, power_on=True):
        raise NotImplementedError(
            'nova-lxd-accel cannot resize or migrate instances yet')

    def confirm_migration(self, context, migration, instance, network_info):
        raise NotImplementedError(
            'nova-lxd-accel cannot resize or migrate instances yet')

    def finish_revert_migration(self, context, instance, network_info,
                                migration, block_device_info=None,
                                power_on=True):
        raise NotImplementedError(
            'nova-lxd-accel cannot resize or migrate instances yet')
