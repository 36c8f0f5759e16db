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

"""The GPUs panel: admin only, like Placement's own API."""

from django.utils.translation import gettext_lazy as _
import horizon


class GPUs(horizon.Panel):
    name = _("GPUs")
    slug = 'gpus'
    # Placement's provider, inventory and allocation reads are admin-only
    # by its default policy: the panel is for admins only, and Placement
    # itself refuses any other token (the view then shows nothing)
    permissions = ('openstack.roles.admin', 'openstack.services.compute',
                   'openstack.services.placement')
