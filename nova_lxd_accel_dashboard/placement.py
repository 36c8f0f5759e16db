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

"""Reading the GPU fleet from Placement, in bulk (no Django).

Placement has no bulk read of inventories or allocations, so those are one
request per card provider (never per unit, never for the hosts' other
nested providers). Traits are not: the few the panel reads (the two hold
traits and the model traits) come from one filtered listing each
(``GET /resource_providers?required=<trait>``), asked only for the traits
Placement has (it refuses an unknown one with 400; the hold traits exist
only once a GPU was held). For N cards, M GPU models and H hold traits in
use that is 2N + M + H + 2 requests, a few at a time; with a cache, the
inventories of a card whose generation did not move are not read again
(N + M + H + 2). :func:`read` takes a
``get(path)`` that returns Placement's JSON, so the panel passes one bound
to the user's token (keystoneauth) and the tests and the bench one bound
to their own Placement.
"""

from concurrent import futures

from nova_lxd_accel_dashboard import fleet

#: ``required`` on the provider listing (1.18), parent_provider_uuid (1.14)
MICROVERSION = '1.18'
#: requests in flight at once
CONCURRENCY = 8
#: the traits the panel reads, besides the model traits
HOLD_TRAITS = (fleet.TRAIT_UNHEALTHY, fleet.TRAIT_UNPROBEABLE)
#: what every trait the panel reads begins with
TRAIT_PREFIX = 'CUSTOM_GPU_'


def _details(get, uuid):
    base = '/resource_providers/%s' % uuid
    return {'inventories': get(base + '/inventories')['inventories'],
            'allocations': get(base + '/allocations')['allocations']}


def _cache_key(provider):
    return 'nova-lxd-accel:rp-inventories:%s:%s' % (
        provider['uuid'], provider['generation'])


def _cached_details(get, provider, cache):
    """A card's inventories (cached by its generation) and allocations.

    Placement bumps a provider's generation on every write of its
    inventories or traits, and the generation comes from the listing just
    read: inventories cached at that generation cannot be stale. Its
    allocations are always read: deleting a consumer's allocations (a
    deleted server) does not move the generation, and a freed unit must
    show free at once.
    """
    if cache is None:
        return _details(get, provider['uuid'])
    base = '/resource_providers/%s' % provider['uuid']
    key = _cache_key(provider)
    inventories = cache.get(key)
    if inventories is None:
        inventories = get(base + '/inventories')['inventories']
        cache.set(key, inventories)
    return {'inventories': inventories,
            'allocations': get(base + '/allocations')['allocations']}


def _having(get, trait):
    listing = get('/resource_providers?required=%s' % trait)
    return {p['uuid'] for p in listing['resource_providers']}


def read(get, concurrency=CONCURRENCY, cache=None):
    """(providers, details) of the fleet: the input of :func:`fleet.build`.

    Each card's ``traits`` are those of :data:`HOLD_TRAITS` and the model
    traits it has (the only ones :mod:`.fleet` reads).

    :param get: ``get(path) -> dict``; raises on an error answer.
    :param cache: an object with ``get(key)`` and ``set(key, value)``
        (Django's cache), keeping each card's inventories by provider
        generation; None reads them every time.
    """
    providers = get('/resource_providers')['resource_providers']
    by_uuid = {p['uuid']: p for _host, p in fleet.card_providers(providers)}
    cards = list(by_uuid)
    if not cards:
        return providers, {}
    with futures.ThreadPoolExecutor(max(1, concurrency)) as pool:
        known = pool.submit(get, '/traits?name=startswith:%s'
                            % TRAIT_PREFIX)
        answers = pool.map(
            lambda uuid: _cached_details(get, by_uuid[uuid], cache), cards)
        known = set(known.result()['traits'])
        traits = [t for t in HOLD_TRAITS if t in known] + sorted(
            t for t in known if t.startswith(fleet.MODEL_TRAIT_PREFIX))
        having = list(pool.map(lambda trait: _having(get, trait), traits))
        answers = list(answers)
    details = {}
    for uuid, answer in zip(cards, answers):
        answer['traits'] = [trait for trait, uuids in zip(traits, having)
                            if uuid in uuids]
        details[uuid] = answer
    return providers, details


def keystone_get(session, endpoint):
    """A ``get(path)`` on Placement at ``endpoint``, at the microversion.

    Through a keystoneauth session (the user's token).
    """
    base = endpoint.rstrip('/')

    def get(path):
        response = session.get(
            base + path, raise_exc=True,
            headers={'OpenStack-API-Version': 'placement ' + MICROVERSION,
                     'Accept': 'application/json'})
        return response.json()
    return get
