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

"""Configuration options of nova-lxd-accel, one module per group.

Nothing is registered at import time: the driver calls
:func:`register_opts` on nova's CONF when it is loaded, and the
``oslo.config.opts`` entry point uses :func:`list_opts`.
"""

from nova_lxd_accel.conf import accelerators
from nova_lxd_accel.conf import lxd
from nova_lxd_accel.conf import lxd_migration

_MODULES = (lxd, accelerators, lxd_migration)


def register_opts(conf):
    for module in _MODULES:
        module.register_opts(conf)


def list_opts():
    opts = []
    for module in _MODULES:
        opts.extend(module.list_opts())
    return opts
