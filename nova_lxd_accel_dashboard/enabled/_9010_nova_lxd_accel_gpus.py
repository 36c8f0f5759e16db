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

"""Horizon's plugin file for nova-lxd-accel (copy it to Horizon's
``openstack_dashboard/local/enabled/``)."""

PANEL = 'gpus'
PANEL_DASHBOARD = 'admin'
PANEL_GROUP = 'compute'
ADD_PANEL = 'nova_lxd_accel_dashboard.gpus.panel.GPUs'
ADD_INSTALLED_APPS = ['nova_lxd_accel_dashboard']
# the "Accelerators" tab of a server's page, for its users and for admins
EXTRA_TABS = {
    'openstack_dashboard.dashboards.project.instances.tabs.'
    'InstanceDetailTabs': (
        'nova_lxd_accel_dashboard.tabs.AcceleratorsTab',),
    'openstack_dashboard.dashboards.admin.instances.tabs.'
    'AdminInstanceDetailTabs': (
        'nova_lxd_accel_dashboard.tabs.AcceleratorsTab',),
}
