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

"""The plugin's Horizon views: Admin > Compute > GPUs and a server's
Accelerators tab (nova_lxd_accel_dashboard.gpus.views, .tabs).

They run in Horizon's own test framework (its logged-in test users and
service catalog) with Horizon's real API layer: Placement, Nova and
Keystone are faked at their HTTP boundary with requests-mock, at the URLs
of the test catalog, and answer as those services do (Placement honours
the microversion it is asked for). The fleet is a smaller cousin of
tests/unit/dashboard/test_fleet.py's (that module imports the driver, which
this environment does not install).
"""

import re
from urllib import parse

from django.urls import reverse
from openstack_dashboard import api
from openstack_dashboard.dashboards.admin.instances import (
    tabs as admin_tabs)
from openstack_dashboard.dashboards.project.instances import (
    tabs as project_tabs)
from openstack_dashboard.test import helpers
import requests_mock

from nova_lxd_accel_dashboard import fleet

PLACEMENT = 'http://public.placement.example.com/placement'
NOVA = 'http://public.nova.example.com:8774/v2'
KEYSTONE = 'http://public.keystone.example.com/identity/v3'
KEYSTONE_ADMIN = 'http://admin.keystone.example.com/identity/v3'
NEUTRON = 'http://public.neutron.example.com:9696'
#: a Placement entry as a DevStack catalog has it (the test catalog has
#: none)
PLACEMENT_SERVICE = {
    'type': 'placement', 'name': 'placement', 'endpoints_links': [],
    'endpoints': [
        {'region': 'RegionOne', 'interface': interface, 'url': url}
        for interface, url in (
            ('admin', 'http://admin.placement.example.com/placement'),
            ('internal', 'http://int.placement.example.com/placement'),
            ('public', PLACEMENT))]}

INDEX = reverse('horizon:admin:gpus:index')

HOST_1 = 'cn-gpu-01'
HOST_2 = 'cn-gpu-02'
ROOT_1 = '4e8e5957-649f-477b-9e5b-f1f75b21c03c'
ROOT_2 = '7a3f2c1d-5b6e-4f70-8a9b-0c1d2e3f4a5b'
ROOT_CPU = '1b2c3d4e-5f60-4718-9a2b-3c4d5e6f7a8b'
OVS_AGENT = '2d9b4f3e-61a7-4c8e-b5d2-9e0f1a2b3c4d'
H100_MIG = 'a1c7f2e4-0d3b-4b6a-9e51-2f8c6d7e0a11'
A100_SICK = 'c3e9f4a6-2f5d-4d8c-9a73-4b0e8f9a2c33'
IB_CARD = 'e5a1b6c8-4b7f-4f0e-9c95-6d2a0b1c4e55'
H100_DIRTY = 'f6b2c7d9-5c8a-4a1f-8da6-7e3b1c2d5f66'
CARDS = (H100_MIG, A100_SICK, IB_CARD, H100_DIRTY)

PROJECT_ALPHA = 'a4f7c2d9e1b84c3fa6e0d5b2c9f81e37'
PROJECT_BETA = 'b5e8d3eaf2c95d4ab7f1e6c3da092f48'
SRV_TRAIN = '5f1e2d3c-4b5a-4697-8877-665544332211'
SRV_INFER = '6a2f3e4d-5c6b-4708-9988-776655443322'
SRV_SICK = '8c4b5a6f-7e8d-492a-9baa-998877665544'
SRV_GAMMA = '9d5c6b7a-8f9e-4a3b-acbb-aa9988776655'
SRV_PLAIN = 'ae6d7c8b-9a0f-4b4c-bdcc-bbaa99887766'

H100_TRAIT = 'CUSTOM_GPU_MODEL_NVIDIA_H100_80GB_HBM3'
A100_TRAIT = 'CUSTOM_GPU_MODEL_NVIDIA_A100_SXM4_80GB'
H100 = 'NVIDIA H100 80GB HBM3'
A100 = 'NVIDIA A100 SXM4 80GB'


def _provider(uuid, name, parent=None):
    return {'uuid': uuid, 'name': name, 'generation': 3,
            'parent_provider_uuid': parent,
            'root_provider_uuid': parent or uuid}


def _inventory(total, reserved=0):
    return {'total': total, 'reserved': reserved, 'min_unit': 1,
            'max_unit': total, 'step_size': 1, 'allocation_ratio': 1.0}


def _alloc(**resources):
    return {'resources': resources, 'generation': 1}


PROVIDERS = [
    _provider(ROOT_1, HOST_1),
    _provider(H100_MIG, HOST_1 + '_gpu_0000_07_00_0', ROOT_1),
    _provider(A100_SICK, HOST_1 + '_gpu_0000_86_00_0', ROOT_1),
    _provider(IB_CARD, HOST_1 + '_ib_0000_3b_00_0', ROOT_1),
    # Neutron's agent under the same compute node: not a card
    _provider(OVS_AGENT, HOST_1 + ':Open vSwitch agent', ROOT_1),
    _provider(ROOT_2, HOST_2),
    _provider(H100_DIRTY, HOST_2 + '_gpu_0000_07_00_0', ROOT_2),
    _provider(ROOT_CPU, 'cn-cpu-01'),
]
INVENTORIES = {
    H100_MIG: {'CUSTOM_MIG_1G_10GB': _inventory(6),
               'CUSTOM_MIG_1G_10GB_ME': _inventory(1)},
    # held by the health check: reserved = total
    A100_SICK: {'CUSTOM_MIG_1G_10GB': _inventory(7, 7)},
    IB_CARD: {'CUSTOM_INFINIBAND_VF': _inventory(8)},
    # one 2g.20gb released, not yet verified clean
    H100_DIRTY: {'CUSTOM_MIG_2G_20GB': _inventory(3, 1)},
}
ALLOCATIONS = {
    H100_MIG: {SRV_TRAIN: _alloc(CUSTOM_MIG_1G_10GB=2),
               SRV_INFER: _alloc(CUSTOM_MIG_1G_10GB_ME=1)},
    A100_SICK: {SRV_SICK: _alloc(CUSTOM_MIG_1G_10GB=1)},
    IB_CARD: {SRV_TRAIN: _alloc(CUSTOM_INFINIBAND_VF=1)},
    H100_DIRTY: {SRV_GAMMA: _alloc(CUSTOM_MIG_2G_20GB=1)},
}
TRAITS = {
    H100_MIG: [H100_TRAIT], A100_SICK: [A100_TRAIT, fleet.TRAIT_UNHEALTHY],
    IB_CARD: [], H100_DIRTY: [H100_TRAIT],
}


def _server(uuid, name, project, extra_specs=None):
    """A server of the compute API at 2.47 (its flavor embedded)."""
    return {
        'id': uuid, 'name': name, 'status': 'ACTIVE',
        'tenant_id': project, 'user_id': '1',
        'created': '2025-03-02T10:00:00Z', 'updated': '2025-03-02T10:01:00Z',
        'addresses': {}, 'metadata': {}, 'links': [],
        'image': {'id': '0c3e6f1a-2b4d-4e5f-8a9b-0c1d2e3f4a5b'},
        'OS-EXT-STS:vm_state': 'active', 'OS-EXT-STS:task_state': None,
        'OS-EXT-STS:power_state': 1, 'locked': False,
        'flavor': {'original_name': 'g1.%s' % name, 'vcpus': 4,
                   'ram': 16384, 'disk': 40, 'ephemeral': 0, 'swap': 0,
                   'extra_specs': extra_specs or {}}}


#: flavors as the sandbox proposes them
MIG_1G = {'resources:CUSTOM_MIG_1G_10GB': '1',
          'trait:%s' % H100_TRAIT: 'required',
          'lxd:gpu_runtime': 'nvidia', 'Accelerator:Type': 'GPU'}
PLAIN = {'hw:cpu_policy': 'dedicated', 'quota:cpu_shares': '1024'}

SERVERS = [
    _server(SRV_TRAIN, 'train-llm-0', PROJECT_ALPHA, MIG_1G),
    _server(SRV_INFER, 'infer-api', PROJECT_ALPHA, MIG_1G),
    _server(SRV_SICK, 'seg-eval', PROJECT_BETA, MIG_1G),
    _server(SRV_GAMMA, 'notebook-7', 'e6f9e4fb03da6e5bc802f7d4eb1a3059'),
    _server(SRV_PLAIN, 'web-1', PROJECT_ALPHA, PLAIN),
]
PROJECTS = [
    {'id': PROJECT_ALPHA, 'name': 'alpha-ml', 'domain_id': 'default',
     'enabled': True, 'description': '', 'is_domain': False,
     'parent_id': 'default', 'links': {}},
    {'id': PROJECT_BETA, 'name': 'beta-vision', 'domain_id': 'default',
     'enabled': True, 'description': '', 'is_domain': False,
     'parent_id': 'default', 'links': {}},
]
MIG_DIAGNOSTICS = {
    'state': 'Running', 'limits.cpu': '4', 'limits.memory': '16GiB',
    'nova-gpu0': ('mig pci=0000:07:00.0 '
                  'mig_uuid=MIG-4a2b9c1d-7e3f-5a6b-8c9d-0e1f2a3b4c5d '
                  'mig_profile=1g.10gb (CUSTOM_MIG_1G_10GB of resource '
                  'provider %s)' % H100_MIG)}


def _microversion(request, service):
    """The microversion asked of ``service`` ('1.18'), or None."""
    header = request.headers.get('OpenStack-API-Version', '')
    words = header.split()
    if len(words) == 2 and words[0] == service:
        return tuple(int(n) for n in words[1].split('.'))
    return None


def _placement_error(context, status, detail):
    context.status_code = status
    return {'errors': [{'status': status, 'title': 'Error',
                        'detail': detail}]}


def fake_placement(request, context):
    """Placement's answers for the fleet, at the microversion asked."""
    version = _microversion(request, 'placement') or (1, 0)
    path = request.path[len(parse.urlsplit(PLACEMENT).path):]
    query = parse.parse_qs(request.query)
    if path == '/resource_providers':
        if 'required' in query:
            if version < (1, 18):
                # as Placement answers a parameter of a later version
                return _placement_error(
                    context, 400, "Invalid query string parameters: "
                    "Additional properties are not allowed ('required' "
                    "was unexpected)")
            [trait] = query['required']
            if trait not in {t for ts in TRAITS.values() for t in ts}:
                # Placement refuses a trait it does not have
                return _placement_error(
                    context, 400, 'No such trait(s): %s.' % trait)
            listed = [p for p in PROVIDERS
                      if trait in TRAITS.get(p['uuid'], [])]
        else:
            listed = PROVIDERS
        if version < (1, 14):
            listed = [{k: v for k, v in p.items()
                       if k not in ('parent_provider_uuid',
                                    'root_provider_uuid')}
                      for p in listed]
        return {'resource_providers': listed}
    if path == '/traits':
        [name] = query['name']
        prefix = name[len('startswith:'):]
        return {'traits': sorted({t for ts in TRAITS.values() for t in ts
                                  if t.startswith(prefix)})}
    match = re.match(r'^/resource_providers/([0-9a-f-]+)/(\w+)$', path)
    if match and match.group(1) in INVENTORIES:
        uuid, what = match.groups()
        if what == 'inventories':
            return {'inventories': INVENTORIES[uuid],
                    'resource_provider_generation': 3}
        if what == 'allocations':
            return {'allocations': ALLOCATIONS[uuid],
                    'resource_provider_generation': 3}
    return _placement_error(context, 404, 'No resource provider')


def fake_nova_versions(request, context):
    return {'version': {
        'id': 'v2.1', 'status': 'CURRENT', 'version': '2.96',
        'min_version': '2.1', 'updated': '2013-07-23T11:33:21Z',
        'links': [{'rel': 'self', 'href': NOVA + '/'}]}}


class FakeClouds(object):
    """Placement, Nova and Keystone of the test catalog (requests-mock)."""

    def __init__(self, mocker):
        self.mocker = mocker
        mocker.register_uri(
            'GET', re.compile('^' + re.escape(PLACEMENT) + '/'),
            json=fake_placement)
        # keystoneauth's token plugin of Horizon's Placement adapter
        for base in (KEYSTONE, KEYSTONE_ADMIN):
            mocker.get(base, json={'version': {
                'id': 'v3.14', 'status': 'stable',
                'updated': '2020-04-07T00:00:00Z',
                'links': [{'rel': 'self', 'href': base + '/'}],
                'media-types': [{
                    'base': 'application/json',
                    'type': 'application/vnd.openstack.identity-v3+json'}]}})
            mocker.post(base + '/auth/tokens', status_code=201,
                        headers={'X-Subject-Token': 'scoped-token'},
                        json={'token': {
                            'methods': ['token'],
                            'expires_at': '2099-01-01T00:00:00.000000Z',
                            'issued_at': '2025-01-01T00:00:00.000000Z',
                            'user': {'id': '1', 'name': 'test_user',
                                     'domain': {'id': '1',
                                                'name': 'test_domain'}},
                            'project': {'id': '1', 'name': 'tenant_one',
                                        'domain': {'id': '1',
                                                   'name': 'test_domain'}},
                            'roles': [{'id': '1', 'name': 'admin'}],
                            'catalog': []}})
            mocker.get(base + '/projects', json={
                'projects': PROJECTS, 'links': {'self': base + '/projects',
                                                'next': None,
                                                'previous': None}})
        # the server page's Interfaces tab asks which extensions there are
        mocker.get(NEUTRON + '/v2.0/extensions', json={'extensions': []})
        mocker.get(NOVA, json=fake_nova_versions)
        mocker.get(NOVA + '/', json=fake_nova_versions)
        mocker.get(NOVA + '/servers/detail', json={'servers': SERVERS})
        for server in SERVERS:
            mocker.get(NOVA + '/servers/' + server['id'],
                       json={'server': server})

    def requests_to(self, base):
        return [r for r in self.mocker.request_history
                if r.url.startswith(base)]

    def placement_requests(self):
        """(path and query, microversion) of each request to Placement."""
        base = parse.urlsplit(PLACEMENT).path
        return [(r.path[len(base):] + ('?' + r.query if r.query else ''),
                 r.headers.get('OpenStack-API-Version'))
                for r in self.requests_to(PLACEMENT)]


class FakeCloudsMixin(object):

    def setUp(self):
        super().setUp()
        self.service_catalog.append(PLACEMENT_SERVICE)
        mocker = requests_mock.Mocker(case_sensitive=True)
        mocker.start()
        self.addCleanup(mocker.stop)
        self.clouds = FakeClouds(mocker)


def _rows(content):
    """(provider name, state) of each card row of the page."""
    return re.findall(r'<tr class="nla-card" data-provider="([^"]+)" '
                      r'data-pci="[^"]*" data-state="([^"]+)">', content)


def _hosts(content):
    return re.findall(r'<div class="nla-host" id="host-[^"]+" '
                      r'data-host="([^"]+)">', content)


def _counts(content):
    """The counts line under each host's bar."""
    return re.findall(r'<p class="nla-counts">\s*(.+?)\s*</p>', content)


def _selected(content):
    return re.findall(r'<option value="([^"]*)" selected>', content)


def _empty_note(content):
    return re.findall(r'<p id="gpu-fleet-empty">(.*?)</p>', content)


def _errors(content):
    """The error messages Horizon shows on the page."""
    return re.findall(r'<strong>Error: </strong>(.*?)\n', content)


class GPUsPanelTest(FakeCloudsMixin, helpers.BaseAdminViewTests):

    def get(self, **filters):
        response = self.client.get(INDEX, filters)
        self.assertEqual(200, response.status_code)
        self.assertTemplateUsed(response, 'nova_lxd_accel/gpus.html')
        return response, response.content.decode()

    def test_the_fleet_by_host_with_each_cards_state(self):
        response, content = self.get()
        self.assertEqual([HOST_1, HOST_2], _hosts(content))
        # the OVS agent and the root without cards are not rows
        self.assertEqual(
            [(HOST_1 + '_gpu_0000_07_00_0', 'healthy'),
             (HOST_1 + '_gpu_0000_86_00_0', 'unhealthy'),
             (HOST_1 + '_ib_0000_3b_00_0', 'healthy'),
             (HOST_2 + '_gpu_0000_07_00_0', 'release pending')],
            _rows(content))
        reasons = re.findall(r'<small>(.*?)</small>', content)
        self.assertEqual(2, len(reasons))
        self.assertIn('nova-lxd-accel doctor', reasons[0])
        self.assertTrue(reasons[1].startswith('1 unit(s) reserved: a '
                                              'release being verified'))
        self.assertEqual([], _errors(content))
        self.assertEqual(4, response.context['fleet_size'])

    def test_host_bars_and_counts(self):
        _response, content = self.get()
        # cn-gpu-01: 4 + 6 free MIG and VFs, 2 + 1 + 1 + 1 in use, 6 held
        segments = re.findall(r'data-kind="(\w+)" data-count="(\d+)"',
                              content)
        self.assertEqual([('free', '11'), ('in_use', '5'), ('held', '6'),
                          ('free', '1'), ('in_use', '1'),
                          ('pending', '1')], segments)
        self.assertEqual(['11 free, 5 in use, 0 release pending, 6 held',
                          '1 free, 1 in use, 1 release pending, 0 held'],
                         _counts(content))
        self.assertEqual(
            [('free', '50.0'), ('in_use', '22.73'), ('held', '27.27'),
             ('free', '33.33'), ('in_use', '33.33'), ('pending', '33.33')],
            re.findall(r'<div class="nla-(\w+)" style="width: ([0-9.]+)%"',
                       content))

    def test_holders_are_named_and_linked_to_the_admin_instance_page(self):
        _response, content = self.get()
        holders = re.findall(
            r'<div class="nla-holder" data-server="([^"]+)">'
            r'<a href="([^"]+)">([^<]+)</a> \(([^)]+)\): ([^<]+)</div>',
            content)
        self.assertIn((SRV_TRAIN, '/admin/instances/%s/detail' % SRV_TRAIN,
                       'train-llm-0', 'alpha-ml',
                       '2 × MIG 1g.10gb'), holders)
        self.assertIn((SRV_SICK, '/admin/instances/%s/detail' % SRV_SICK,
                       'seg-eval', 'beta-vision', '1 × MIG 1g.10gb'),
                      holders)
        self.assertIn((SRV_INFER, '/admin/instances/%s/detail' % SRV_INFER,
                       'infer-api', 'alpha-ml', '1 × MIG 1g.10gb+me'),
                      holders)
        # a project Keystone does not list is shown by its id
        [gamma] = [h for h in holders if h[0] == SRV_GAMMA]
        self.assertEqual(('notebook-7', 'e6f9e4fb03da6e5bc802f7d4eb1a3059'),
                         gamma[2:4])

    def test_it_reads_placement_at_its_microversion_and_every_server(self):
        self.get()
        asked = self.clouds.placement_requests()
        self.assertEqual({'placement 1.18'}, {mv for _p, mv in asked})
        paths = sorted(p for p, _mv in asked)
        self.assertEqual(
            sorted(['/resource_providers',
                    '/traits?name=startswith:CUSTOM_GPU_',
                    # no GPU is unprobeable: Placement has no such trait
                    # and is not asked for it
                    '/resource_providers?required=' + fleet.TRAIT_UNHEALTHY,
                    '/resource_providers?required=' + A100_TRAIT,
                    '/resource_providers?required=' + H100_TRAIT] +
                   ['/resource_providers/%s/%s' % (uuid, what)
                    for uuid in CARDS
                    for what in ('inventories', 'allocations')]), paths)
        [servers] = [r for r in self.clouds.requests_to(NOVA)
                     if r.path.endswith('/servers/detail')]
        self.assertEqual(['True'], servers.qs['all_tenants'])

    def test_filter_by_host(self):
        response, content = self.get(host=HOST_2)
        self.assertEqual([HOST_2], _hosts(content))
        self.assertEqual([(HOST_2 + '_gpu_0000_07_00_0', 'release pending')],
                         _rows(content))
        self.assertEqual([HOST_2], _selected(content))

    def test_filter_by_model(self):
        _response, content = self.get(model=H100)
        self.assertEqual([HOST_1 + '_gpu_0000_07_00_0',
                          HOST_2 + '_gpu_0000_07_00_0'],
                         [name for name, _state in _rows(content)])

    def test_filter_by_state(self):
        _response, content = self.get(state='unhealthy')
        self.assertEqual([(HOST_1 + '_gpu_0000_86_00_0', 'unhealthy')],
                         _rows(content))
        # the host's bar counts only the cards shown
        self.assertEqual(['0 free, 1 in use, 0 release pending, 6 held'],
                         _counts(content))

    def test_filter_by_project(self):
        _response, content = self.get(project=PROJECT_ALPHA)
        self.assertEqual([HOST_1 + '_gpu_0000_07_00_0',
                          HOST_1 + '_ib_0000_3b_00_0'],
                         [name for name, _state in _rows(content)])
        self.assertEqual([PROJECT_ALPHA], _selected(content))
        self.assertIn('<option value="%s" selected>alpha-ml</option>'
                      % PROJECT_ALPHA, content)

    def test_a_filter_that_matches_nothing_says_so(self):
        _response, content = self.get(host=HOST_2, state='unhealthy')
        self.assertEqual([], _rows(content))
        self.assertEqual(['No GPU or card matches these filters.'],
                         _empty_note(content))

    def test_placement_unavailable_is_an_error_message_not_a_crash(self):
        self.clouds.mocker.register_uri(
            'GET', re.compile('^' + re.escape(PLACEMENT) + '/'),
            status_code=503, json={'errors': [{
                'status': 503, 'title': 'Service Unavailable',
                'detail': 'The server is currently unavailable.'}]})
        response, content = self.get()
        self.assertEqual([], _rows(content))
        self.assertEqual([], _hosts(content))
        self.assertMessageCount(response, error=1)
        self.assertEqual(['Unable to read the GPU fleet from Placement and '
                          'Nova.'], _errors(content))
        self.assertEqual(0, response.context['fleet_size'])
        # not "Placement reports no GPU": it said nothing
        self.assertEqual([], _empty_note(content))
        # the listing failed: nothing more was asked
        self.assertEqual(['/resource_providers'],
                         [p for p, _mv in self.clouds.placement_requests()])
        self.assertEqual([], [r for r in self.clouds.requests_to(NOVA)
                              if r.path.endswith('/servers/detail')])


class GPUsPanelForMembersTest(FakeCloudsMixin, helpers.TestCase):

    def test_a_member_is_refused_the_panel_and_placement_is_not_read(self):
        response = self.client.get(INDEX)
        self.assertEqual(403, response.status_code)
        content = response.content.decode()
        self.assertNotIn(HOST_1, content)
        self.assertNotIn('nla-card', content)
        self.assertEqual([], self.clouds.requests_to(PLACEMENT))
        self.assertEqual([], self.clouds.requests_to(NOVA))


class AcceleratorsTabMixin(FakeCloudsMixin):

    def render(self, server_id):
        """The tab as the server's page loads it (?tab=..., not preloaded).

        The instance is what Horizon's detail view reads (server_get).
        """
        request = self.factory.get(
            '/', {'tab': 'instance_details__accelerators'})
        instance = api.nova.server_get(request, server_id)
        group = self.tab_group(request, instance=instance)
        tab = group.get_tab('accelerators')
        self.assertIsNotNone(tab, 'the plugin did not add its tab')
        self.assertTrue(tab.is_active())
        return tab.render()

    def diagnostics_requests(self):
        return [r for r in self.clouds.requests_to(NOVA)
                if r.path.endswith('/diagnostics')]


class AcceleratorsTabTest(AcceleratorsTabMixin, helpers.TestCase):
    """The tab of a server's page (Project > Instances), for its user."""

    tab_group = project_tabs.InstanceDetailTabs

    def test_a_mig_server_reads_its_flavor_and_is_told_who_sees_the_device(
            self):
        self.clouds.mocker.get(
            NOVA + '/servers/%s/diagnostics' % SRV_TRAIN, status_code=403,
            json={'forbidden': {
                'code': 403, 'message': 'Policy doesn\'t allow '
                'os_compute_api:os-server-diagnostics to be performed.'}})
        html = self.render(SRV_TRAIN)
        self.assertIn('g1.train-llm-0', html)
        self.assertIn('<div class="nla-asked">1 × %s, MIG 1g.10gb</div>'
                      % H100, html)
        self.assertIn('Which device this server got is shown to those the '
                      'cloud lets read server diagnostics', html)
        self.assertNotIn('nla-device"', html)
        [server] = [r for r in self.clouds.requests_to(NOVA)
                    if r.path.endswith('/servers/' + SRV_TRAIN) and
                    r.headers.get('X-OpenStack-Nova-API-Version') == '2.47']
        self.assertEqual('compute 2.47',
                         server.headers['OpenStack-API-Version'])
        [diagnostics] = self.diagnostics_requests()
        self.assertEqual('2.47',
                         diagnostics.headers['X-OpenStack-Nova-API-Version'])

    def test_a_server_without_accelerator_says_so_and_skips_diagnostics(
            self):
        html = self.render(SRV_PLAIN)
        self.assertIn('No accelerator: this server\'s flavor asks for no GPU '
                      'or InfiniBand device.', html)
        self.assertNotIn('nla-asked"', html)
        self.assertEqual([], self.diagnostics_requests())


class AdminAcceleratorsTabTest(AcceleratorsTabMixin,
                               helpers.BaseAdminViewTests):
    """The same tab on Admin > Instances, where diagnostics are readable."""

    tab_group = admin_tabs.AdminInstanceDetailTabs

    def test_an_admin_sees_the_device_the_server_got(self):
        self.clouds.mocker.get(
            NOVA + '/servers/%s/diagnostics' % SRV_TRAIN,
            json=MIG_DIAGNOSTICS)
        html = self.render(SRV_TRAIN)
        self.assertIn('<div class="nla-asked">1 × %s, MIG 1g.10gb</div>'
                      % H100, html)
        self.assertIn(
            '<div class="nla-device" data-device="nova-gpu0">'
            '<code>nova-gpu0</code>: %s</div>'
            % MIG_DIAGNOSTICS['nova-gpu0'], html)
        # state and limits are not devices
        self.assertNotIn('limits.cpu', html)
        self.assertNotIn('nla-device-note', html)

    def test_diagnostics_without_a_device_are_said(self):
        self.clouds.mocker.get(
            NOVA + '/servers/%s/diagnostics' % SRV_TRAIN,
            json={'state': 'Running', 'limits.cpu': '4'})
        html = self.render(SRV_TRAIN)
        self.assertIn('The compute host reports no device bound to this '
                      'server now.', html)
