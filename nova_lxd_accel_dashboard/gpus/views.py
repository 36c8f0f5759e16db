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

"""Admin > Compute > GPUs: every host's GPUs and cards, from Placement."""

import logging

from django.core import cache as django_cache
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from horizon import exceptions
from horizon import views
from openstack_dashboard import api
from openstack_dashboard.api import placement as horizon_placement

from nova_lxd_accel_dashboard import fleet
from nova_lxd_accel_dashboard import placement

LOG = logging.getLogger(__name__)
FILTERS = ('host', 'model', 'state', 'project')
SEGMENT_WORDS = {'free': _('free'), 'in_use': _('in use'),
                 'pending': _('release pending'), 'held': _('held')}


def placement_get(request):
    """``get(path)`` on Placement with the user's token.

    Through the keystoneauth session of Horizon's own adapter (its
    identity and TLS settings), at :data:`placement.MICROVERSION`: the
    adapter itself would pin its own older microversion.
    """
    session = horizon_placement.make_adapter(request).session
    return placement.keystone_get(session,
                                  api.base.url_for(request, 'placement'))


def servers_by_id(request):
    """Every server of the cloud: id -> name, project id and name."""
    servers, _more = api.nova.server_list(
        request, search_opts={'all_tenants': True})
    try:
        projects, _more = api.keystone.tenant_list(request)
        names = {p.id: p.name for p in projects}
    except Exception:
        LOG.info('GPUs panel: project names unavailable', exc_info=True)
        names = {}
    return {s.id: {'name': s.name, 'project_id': s.tenant_id,
                   'project_name': names.get(s.tenant_id, s.tenant_id)}
            for s in servers}


def with_links(hosts):
    for view in hosts:
        view['bar'] = [{'kind': kind, 'words': SEGMENT_WORDS[kind],
                        'count': n, 'percent': pct}
                       for kind, n, pct in fleet.bar(view['counts'])]
        for card in view['cards']:
            for holder in card['holders']:
                holder['url'] = reverse('horizon:admin:instances:detail',
                                        args=[holder['id']])
    return hosts


class IndexView(views.HorizonTemplateView):
    template_name = 'nova_lxd_accel/gpus.html'
    page_title = _("GPUs")

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        request = self.request
        wanted = {name: request.GET.get(name) or None for name in FILTERS}
        hosts = []
        read_failed = False
        try:
            # cards unchanged since the last page (same provider
            # generation) are not read again
            providers, details = placement.read(placement_get(request),
                                                cache=django_cache.cache)
            servers = servers_by_id(request) if details else {}
            hosts = fleet.build(providers, details, servers)
        except Exception:
            read_failed = True
            exceptions.handle(request,
                              _('Unable to read the GPU fleet from '
                                'Placement and Nova.'))
        context.update({
            'hosts': with_links(fleet.select(hosts, **wanted)),
            'choices': fleet.choices(hosts),
            'wanted': wanted,
            'fleet_size': sum(len(h['cards']) for h in hosts),
            'read_failed': read_failed,
        })
        return context
