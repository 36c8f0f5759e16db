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

"""How a shared GPU is shared, as flavors ask for it: the modes, the trait
each mode puts on the GPU's provider and the extra specs that pick one.
"""

import re

from nova_lxd_accel import placement_names

#: How a shared GPU is shared (``[lxd_accelerators] shared_gpus``, the
#: optional third part of an entry): with NVIDIA MPS quotas, every flavor
#: on it giving ``lxd:gpu_memory_mb``, or time-sliced, no flavor giving one.
MODE_QUOTA = 'quota'
MODE_TIMESLICE = 'timeslice'
#: a card without a mode: no MPS daemon is needed for it, and the flavors
#: ``nova-lxd-accel flavors`` proposed before modes existed fit it
DEFAULT_MODE = MODE_TIMESLICE
MODES = (MODE_QUOTA, MODE_TIMESLICE)
#: the trait of each mode on the GPU's provider; a flavor requires one
MODE_TRAITS = {MODE_QUOTA: placement_names.TRAIT_SHARING_QUOTA,
               MODE_TIMESLICE: placement_names.TRAIT_SHARING_TIMESLICE}
#: the extra spec that makes a flavor's share a quota'd one
MEMORY_QUOTA_KEY = 'lxd:gpu_memory_mb'


def flavor_mode(extra_specs):
    """The mode a flavor's share needs: quota'd iff it sets a memory quota."""
    if (extra_specs or {}).get(MEMORY_QUOTA_KEY) not in (None, ''):
        return MODE_QUOTA
    return MODE_TIMESLICE


def required_mode_traits(extra_specs):
    """Mode -> the ``trait*:`` keys of ``extra_specs`` that require it."""
    out = {}
    for key, value in (extra_specs or {}).items():
        prefix, _, trait = key.partition(':')
        if not re.match(r'^trait[^:]*$', prefix) or \
                str(value).strip().lower() != 'required':
            continue
        for mode, mode_trait in MODE_TRAITS.items():
            if trait == mode_trait:
                out.setdefault(mode, []).append(key)
    return out


def mode_trait_key(mode):
    """The extra spec a flavor of ``mode`` requires its trait with.

    In the request group of its slot: a quota'd share asks for its slot
    and its memory in group 1, one GPU (see ``extra_specs``).
    """
    return '%s:%s' % ('trait1' if mode == MODE_QUOTA else 'trait',
                      MODE_TRAITS[mode])
