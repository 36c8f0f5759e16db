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

"""The "Accelerators" tab of a server's page.

What the server's flavor asked for, in words (:func:`.fleet.describe`),
from the flavor embedded in the server (compute API 2.47+, readable by the
server's users). The device the server got (PCI address, MIG device) is in
the server's diagnostics, which Nova's default policy lets only admins read
(``os_compute_api:os-server-diagnostics``): shown when the policy allows it,
otherwise the tab says who may see it (doc/source/admin/dashboard.rst).
"""

import logging

from django.utils.translation import gettext_lazy as _
from horizon import tabs
from novaclient import exceptions as nova_exceptions
from openstack_dashboard.api import _nova

from nova_lxd_accel_dashboard import fleet

LOG = logging.getLogger(__name__)
#: the first microversion that embeds the flavor, extra specs included
FLAVOR_MICROVERSION = '2.47'
#: free-form diagnostics (before 2.48's fixed fields, which have no
#: devices): nova-lxd-accel lists each bound unit there
DIAGNOSTICS_MICROVERSION = '2.47'


def bound_devices(diagnostics):
    """The driver's device lines of free-form diagnostics, by device name.

    nova-lxd-accel writes ``<device>: <kind> pci=... (<class> of resource
    provider <uuid>)`` for each bound unit (``driver.get_diagnostics``).
    """
    return sorted((name, value) for name, value in (diagnostics or {}).items()
                  if isinstance(value, str) and
                  'of resource provider' in value)


class AcceleratorsTab(tabs.Tab):
    name = _("Accelerators")
    slug = 'accelerators'
    template_name = 'nova_lxd_accel/_accelerators.html'
    preload = False

    def get_context_data(self, request):
        instance = self.tab_group.kwargs['instance']
        asked, flavor_name, devices, devices_note = [], '', [], ''
        try:
            client = _nova.novaclient(request, FLAVOR_MICROVERSION)
            server = client.servers.get(instance.id)
            flavor = getattr(server, 'flavor', None) or {}
            flavor_name = flavor.get('original_name', '')
            asked = fleet.describe(flavor.get('extra_specs'))
        except Exception:
            LOG.info('Accelerators tab: flavor of %s unreadable',
                     instance.id, exc_info=True)
        if asked:
            try:
                client = _nova.novaclient(request, DIAGNOSTICS_MICROVERSION)
                _response, body = client.servers.diagnostics(instance.id)
                devices = bound_devices(body)
                if not devices:
                    devices_note = _('The compute host reports no device '
                                     'bound to this server now.')
            except nova_exceptions.Forbidden:
                devices_note = _('Which device this server got is shown to '
                                 'those the cloud lets read server '
                                 'diagnostics (an administrator, by '
                                 'default).')
            except Exception:
                LOG.info('Accelerators tab: diagnostics of %s unreadable',
                         instance.id, exc_info=True)
                devices_note = _('The compute host did not say which '
                                 'device this server got.')
        return {'instance': instance, 'asked': asked,
                'flavor_name': flavor_name, 'devices': devices,
                'devices_note': devices_note}
