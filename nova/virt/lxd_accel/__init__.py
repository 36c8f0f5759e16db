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

"""Entry point for ``compute_driver = lxd_accel.LXDDriver``.

Nova imports compute drivers only as ``nova.virt.<compute_driver>``; this
shim re-exports the driver that lives in the ``nova_lxd_accel`` package.
"""

from nova_lxd_accel.driver import LXDDriver

__all__ = ['LXDDriver']
