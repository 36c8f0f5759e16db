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

"""The seam's read-modify-write, on a fake's get_container/put_container.

The ETag and the per-instance lock are the real client's
(:meth:`nova_lxd_accel.client.LXDClient.modify_container`, tested against
the real daemon in ``tests/integration/test_etag.py``); unit fakes only
need its contract: ``change(config, devices)`` edits copies, False means
nothing to write, None comes back when there is no such container.
"""

import copy


def modify_via_put(client, name, change):
    record = client.get_container(name)
    if record is None:
        return None
    config = copy.deepcopy(record.get('config') or {})
    devices = copy.deepcopy(record.get('devices') or {})
    if change(config, devices) is False:
        return record
    record = dict(record, config=config, devices=devices)
    client.put_container(name, record)
    return record
