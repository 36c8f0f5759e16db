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

"""Django settings of the plugin's view tests: Horizon's own test settings
with the plugin added as Horizon adds an ``enabled/`` file
(openstack_dashboard.utils.settings.update_dashboards): its app, its panel
in Admin > Compute, its extra tabs."""

from openstack_dashboard.test.settings import *  # noqa: F401,F403,H303
from openstack_dashboard.test.settings import HORIZON_CONFIG
from openstack_dashboard.test.settings import INSTALLED_APPS

from nova_lxd_accel_dashboard.enabled import _9010_nova_lxd_accel_gpus

_PLUGIN = _9010_nova_lxd_accel_gpus

INSTALLED_APPS[0:0] = _PLUGIN.ADD_INSTALLED_APPS
HORIZON_CONFIG['plugins'].extend(_PLUGIN.ADD_INSTALLED_APPS)
HORIZON_CONFIG['panel_customization'].append(
    {name: value for name, value in vars(_PLUGIN).items()
     if name != '__builtins__'})
for _key, _tabs in _PLUGIN.EXTRA_TABS.items():
    HORIZON_CONFIG['extra_tabs'][_key] += tuple(_tabs)
