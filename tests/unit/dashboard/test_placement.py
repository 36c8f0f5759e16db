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

"""Reading the GPU fleet from Placement (nova_lxd_accel_dashboard.placement).

Placement is faked at its HTTP boundary (requests-mock) with the answers of
the fleet of test_fleet; the reads go through a real keystoneauth session
holding a token, as the panel's do.
"""

from urllib import parse

from keystoneauth1 import exceptions as ks_exceptions
from keystoneauth1 import session as ks_session
from keystoneauth1 import token_endpoint
from requests_mock.contrib import fixture as rm_fixture
import testtools

from nova_lxd_accel_dashboard import fleet
from nova_lxd_accel_dashboard import placement
from tests.fixtures import sample_fleet as sample

ENDPOINT = 'http://192.0.2.10/placement'
TOKEN = 'gAAAAABnR3-admin-token'
CARDS = (sample.H100_MIG, sample.A100_WHOLE, sample.A100_SICK,
         sample.A100_UNPROBED, sample.IB_CARD, sample.H100_DIRTY,
         sample.A100_SHARED)
#: what Placement answers a token its policy refuses
FORBIDDEN = {'errors': [{
    'status': 403, 'title': 'Forbidden',
    'detail': 'Access was denied to this resource.\n\n Policy does not '
              'allow placement:resource_providers:list to be performed.  ',
    'code': 'placement.undefined_code',
    'request_id': 'req-5d0e9c3a-6a4f-4f55-9d43-1b2f3c4d5e6f'}]}
#: what a load balancer answers while no Placement is up
UNAVAILABLE = ('<html><body><h1>503 Service Unavailable</h1>\nNo server is '
               'available to handle this request.\n</body></html>\n')


class DictCache(object):
    """Django's cache API (get, set) on a dict."""

    def __init__(self):
        self.data = {}

    def get(self, key):
        return self.data.get(key)

    def set(self, key, value):
        self.data[key] = value


class ReadTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.http = self.useFixture(rm_fixture.Fixture())
        self.providers, self.answers = sample.fleet_answers()
        self.http.get(ENDPOINT + '/resource_providers',
                      json={'resource_providers': self.providers})
        for uuid, (inv, traits, alloc) in self.answers.items():
            base = '%s/resource_providers/%s' % (ENDPOINT, uuid)
            self.http.get(base + '/inventories', json={
                'resource_provider_generation': 7, 'inventories': inv})
            self.http.get(base + '/allocations', json={
                'resource_provider_generation': 7, 'allocations': alloc})
        # traits: Placement's CUSTOM_GPU_* ones, then one filtered listing
        # per trait the panel reads
        self.known = sorted({t for _i, traits, _a in self.answers.values()
                             for t in traits if t.startswith('CUSTOM_GPU_')})
        self.models = [t for t in self.known
                       if t.startswith(fleet.MODEL_TRAIT_PREFIX)]
        self.http.get(ENDPOINT + '/traits?name=startswith:CUSTOM_GPU_',
                      json={'traits': self.known})
        for trait in list(placement.HOLD_TRAITS) + self.models:
            self.http.get(
                ENDPOINT + '/resource_providers?required=' + trait,
                json={'resource_providers': [
                    p for p in self.providers
                    if trait in self.answers.get(p['uuid'], ((), ()))[1]]})
        auth = token_endpoint.Token(ENDPOINT, TOKEN)
        self.get = placement.keystone_get(ks_session.Session(auth=auth),
                                          ENDPOINT)

    def _paths(self, since=0):
        out = []
        for request in self.http.request_history[since:]:
            url = parse.urlsplit(request.url)
            out.append(url.path + ('?' + parse.unquote(url.query)
                                   if url.query else ''))
        return sorted(out)

    def test_asks_the_listing_then_only_the_card_providers(self):
        placement.read(self.get)
        # never the roots, the OVS agent, its bridge or the sharing pool;
        # no trait request per card
        expected = ['/placement/resource_providers',
                    '/placement/traits?name=startswith:CUSTOM_GPU_'] + [
            '/placement/resource_providers?required=' + trait
            for trait in list(placement.HOLD_TRAITS) + self.models] + [
            '/placement/resource_providers/%s/%s' % (uuid, what)
            for uuid in CARDS for what in ('inventories', 'allocations')]
        self.assertEqual(sorted(expected), self._paths())
        self.assertEqual(2 * len(CARDS) + len(self.models) + 4,
                         len(self.http.request_history))
        self.assertEqual({'GET'},
                         {r.method for r in self.http.request_history})

    def test_every_request_has_the_microversion_and_the_token(self):
        placement.read(self.get)
        self.assertEqual(
            {('placement 1.18', TOKEN, 'application/json')},
            {(r.headers.get('OpenStack-API-Version'),
              r.headers.get('X-Auth-Token'), r.headers.get('Accept'))
             for r in self.http.request_history})

    def test_returns_what_fleet_build_needs(self):
        providers, details = placement.read(self.get)
        self.assertEqual(self.providers, providers)
        # each card's traits: the hold and model traits it has, no other
        read = set(placement.HOLD_TRAITS) | set(self.models)
        expected = sample.fleet_details(self.answers)
        for detail in expected.values():
            detail['traits'] = sorted(t for t in detail['traits']
                                      if t in read)
        self.assertEqual(expected, {
            uuid: dict(d, traits=sorted(d['traits']))
            for uuid, d in details.items()})
        self.assertEqual(sample.build_fleet(),
                         fleet.build(providers, details, sample.servers()))

    def test_a_hold_trait_placement_does_not_have_is_not_asked(self):
        # no GPU was ever held: Placement has no such trait and would
        # answer 400 to a listing requiring it
        known = [t for t in self.known if t not in placement.HOLD_TRAITS]
        self.http.get(ENDPOINT + '/traits?name=startswith:CUSTOM_GPU_',
                      json={'traits': known})
        for trait in placement.HOLD_TRAITS:
            self.http.get(ENDPOINT + '/resource_providers?required=' + trait,
                          status_code=400, json={'errors': [{
                              'status': 400, 'title': 'Bad Request',
                              'detail': 'No such trait(s): %s.' % trait}]})
        providers, details = placement.read(self.get)
        self.assertFalse([p for p in self._paths() if 'UNHEALTHY' in p or
                          'UNPROBEABLE' in p])
        self.assertEqual(set(), {t for d in details.values()
                                 for t in d['traits']
                                 if t in placement.HOLD_TRAITS})

    def _details_paths(self, since):
        return [p for p in self._paths(since)
                if p.endswith(('/inventories', '/allocations'))]

    def test_inventories_at_the_same_generation_come_from_the_cache(self):
        cache = DictCache()
        first = placement.read(self.get, cache=cache)
        before = len(self.http.request_history)
        self.assertEqual(first, placement.read(self.get, cache=cache))
        # every card's allocations again, no inventories
        self.assertEqual(sorted('/placement/resource_providers/%s/allocations'
                                % uuid for uuid in CARDS),
                         self._details_paths(before))

    def test_a_freed_unit_shows_at_once(self):
        # nova deleted a server: DELETE /allocations/{consumer} leaves the
        # provider's generation as it was
        cache = DictCache()
        placement.read(self.get, cache=cache)
        self.http.get('%s/resource_providers/%s/allocations' % (
            ENDPOINT, sample.A100_WHOLE), json={
                'resource_provider_generation': 7, 'allocations': {}})
        _providers, details = placement.read(self.get, cache=cache)
        self.assertEqual({}, details[sample.A100_WHOLE]['allocations'])

    def test_a_card_whose_generation_moved_is_read_again(self):
        cache = DictCache()
        placement.read(self.get, cache=cache)
        # the gate reserved a dirty unit of the whole A100: an inventory
        # write, which moves the generation
        providers = [dict(p, generation=p['generation'] + 1)
                     if p['uuid'] == sample.A100_WHOLE else p
                     for p in self.providers]
        self.http.get(ENDPOINT + '/resource_providers',
                      json={'resource_providers': providers})
        inventories = dict(self.answers[sample.A100_WHOLE][0])
        inventories['PGPU'] = dict(inventories['PGPU'], reserved=1)
        self.http.get('%s/resource_providers/%s/inventories' % (
            ENDPOINT, sample.A100_WHOLE), json={
                'resource_provider_generation': 8,
                'inventories': inventories})
        before = len(self.http.request_history)
        _providers, details = placement.read(self.get, cache=cache)
        self.assertEqual(
            ['/placement/resource_providers/%s/inventories'
             % sample.A100_WHOLE],
            [p for p in self._details_paths(before)
             if p.endswith('/inventories')])
        self.assertEqual(inventories,
                         details[sample.A100_WHOLE]['inventories'])

    def test_one_at_a_time_reads_the_same(self):
        self.assertEqual(placement.read(self.get),
                         placement.read(self.get, concurrency=0))

    def test_a_fleet_without_cards_is_one_request(self):
        roots = [p for p in self.providers if not p['parent_provider_uuid']]
        self.http.get(ENDPOINT + '/resource_providers',
                      json={'resource_providers': roots})
        self.assertEqual((roots, {}), placement.read(self.get))
        self.assertEqual(['/placement/resource_providers'], self._paths())

    def test_a_trailing_slash_of_the_endpoint_is_ignored(self):
        auth = token_endpoint.Token(ENDPOINT, TOKEN)
        get = placement.keystone_get(ks_session.Session(auth=auth),
                                     ENDPOINT + '/')
        self.assertEqual(self.providers,
                         get('/resource_providers')['resource_providers'])
        self.assertEqual(['/placement/resource_providers'], self._paths())

    def test_a_token_placement_refuses_raises_forbidden(self):
        self.http.get(ENDPOINT + '/resource_providers', status_code=403,
                      json=FORBIDDEN)
        error = self.assertRaises(ks_exceptions.Forbidden, placement.read,
                                  self.get)
        self.assertEqual(403, error.http_status)
        # nothing else asked once the listing is refused
        self.assertEqual(['/placement/resource_providers'], self._paths())

    def test_an_unavailable_placement_mid_read_raises(self):
        self.http.get('%s/resource_providers/%s/allocations' % (
            ENDPOINT, sample.A100_SICK), status_code=503, text=UNAVAILABLE,
            headers={'Content-Type': 'text/html'})
        self.assertRaises(ks_exceptions.ServiceUnavailable, placement.read,
                          self.get)
