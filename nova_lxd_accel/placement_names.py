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

"""Placement's names for the accelerators: the resource classes and traits
this driver's providers carry.
"""

RC_INFINIBAND_VF = 'CUSTOM_INFINIBAND_VF'
RC_INFINIBAND_PORT = 'CUSTOM_INFINIBAND_PORT'

#: a shared GPU's slots and memory (see :mod:`.sharing`)
SHARE_RC = 'CUSTOM_GPU_SHARE'
MEMORY_RC = 'CUSTOM_GPU_MEMORY_MB'

TRAIT_SHARED = 'CUSTOM_GPU_SHARED'
#: how a shared GPU is shared (see :mod:`.sharing`): flavors require one
TRAIT_SHARING_QUOTA = 'CUSTOM_GPU_SHARING_QUOTA'
TRAIT_SHARING_TIMESLICE = 'CUSTOM_GPU_SHARING_TIMESLICE'
SHARING_TRAIT_PREFIX = 'CUSTOM_GPU_SHARING_'
#: a GPU held for its health (see :mod:`.accel.health.holds`)
TRAIT_UNHEALTHY = 'CUSTOM_GPU_UNHEALTHY'
TRAIT_UNPROBEABLE = 'CUSTOM_GPU_UNPROBEABLE'

#: Trait names the driver sets itself. On the first update of a process
#: (when it cannot remember what it set before) a trait of these families
#: that the device no longer has is removed; any other trait an operator put
#: on a provider is kept.
#: Traits this driver sets and removes on its providers: whole names ...
MANAGED_TRAITS = (TRAIT_UNHEALTHY, TRAIT_SHARED)
#: ... and families, by prefix.
MANAGED_TRAIT_PREFIXES = ('CUSTOM_GPU_VENDOR_', 'CUSTOM_GPU_PRODUCT_',
                          'CUSTOM_GPU_MODEL_', 'CUSTOM_CUDA_CC_',
                          'CUSTOM_IB_VENDOR_', 'CUSTOM_IB_PRODUCT_',
                          SHARING_TRAIT_PREFIX)


def is_managed_trait(name):
    """Whether this driver owns the trait (so may remove it).

    Whole names are matched exactly: an operator's ``CUSTOM_GPU_SHARED_LAB``
    is not this driver's ``CUSTOM_GPU_SHARED``.
    """
    return name in MANAGED_TRAITS or name.startswith(MANAGED_TRAIT_PREFIXES)
