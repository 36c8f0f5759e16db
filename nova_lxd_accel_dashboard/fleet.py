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

"""The GPU fleet as Placement reports it, in words (pure: no I/O, no Django).

nova-lxd-accel reports each GPU and InfiniBand card of a compute host as a
child provider of the host's root provider, named ``<host>_gpu_<pci>`` or
``<host>_ib_<pci>`` (doc/source/admin/placement.rst). Its state is in
Placement too:

* a GPU held by the health check has ``reserved = total`` and the trait
  ``CUSTOM_GPU_UNHEALTHY`` or ``CUSTOM_GPU_UNPROBEABLE``;
* a unit released but not yet verified clean is one more ``reserved`` of
  its resource class (release pending);
* the allocations say which server holds which unit.

:func:`build` turns those answers into hosts and cards; :func:`describe`
says in words what a flavor asks for.
"""

import collections
import re

from nova_lxd_accel import placement_names

TRAIT_UNHEALTHY = placement_names.TRAIT_UNHEALTHY
TRAIT_UNPROBEABLE = placement_names.TRAIT_UNPROBEABLE
MODEL_TRAIT_PREFIX = 'CUSTOM_GPU_MODEL_'
MIG_PREFIX = 'CUSTOM_MIG_'
#: classes that are not units a server holds (shown, not counted in bars)
NOT_UNITS = (placement_names.MEMORY_RC,)

STATE_HEALTHY = 'healthy'
STATE_PENDING = 'release pending'
STATE_UNPROBEABLE = 'unprobeable'
STATE_UNHEALTHY = 'unhealthy'
STATES = (STATE_HEALTHY, STATE_PENDING, STATE_UNPROBEABLE, STATE_UNHEALTHY)

_CLASS_WORDS = {
    'PGPU': 'whole GPU',
    placement_names.SHARE_RC: 'shared GPU slot',
    placement_names.MEMORY_RC: 'GPU memory (MB)',
    placement_names.RC_INFINIBAND_VF: 'InfiniBand VF',
    placement_names.RC_INFINIBAND_PORT: 'InfiniBand port',
}
_SLUG = re.compile(r'^([0-9a-f]{4})_([0-9a-f]{2})_([0-9a-f]{2})_([0-7])$')
_MIG_SIZE = re.compile(r'^[0-9]+(c|g|gb)$')
_RESOURCES_KEY = re.compile(r'^resources([0-9A-Za-z_-]*):(.+)$')
_MODEL_TRAIT_KEY = re.compile(r'^trait([0-9A-Za-z_-]*):%s(.+)$'
                              % MODEL_TRAIT_PREFIX)

Counts = collections.namedtuple('Counts', 'free in_use pending held')


def class_words(resource_class):
    """``CUSTOM_MIG_1G_10GB`` -> ``MIG 1g.10gb``; ``PGPU`` -> ``whole GPU``."""
    if resource_class in _CLASS_WORDS:
        return _CLASS_WORDS[resource_class]
    if resource_class.startswith(MIG_PREFIX):
        # nvidia-smi's profile names: sizes joined by '.', attributes by
        # '+' (1G_10GB -> 1g.10gb, 1C_3G_71GB -> 1c.3g.71gb,
        # 1G_10GB_ME -> 1g.10gb+me)
        sizes, attributes = [], []
        for part in resource_class[len(MIG_PREFIX):].lower().split('_'):
            (sizes if _MIG_SIZE.match(part) and not attributes
             else attributes).append(part)
        return 'MIG %s' % '+'.join(['.'.join(sizes)] + attributes)
    return resource_class


def model_words(trait_suffix):
    """``NVIDIA_A100_SXM4_80GB`` -> ``NVIDIA A100 SXM4 80GB``."""
    return trait_suffix.replace('_', ' ')


def is_unit_class(resource_class):
    return resource_class not in NOT_UNITS


def pci_address(provider_name, host):
    """The PCI address in a card provider's name, or None."""
    for kind in ('_gpu_', '_ib_'):
        prefix = host + kind
        if provider_name.startswith(prefix):
            match = _SLUG.match(provider_name[len(prefix):])
            if match:
                return '%s:%s:%s.%s' % match.groups()
    return None


def card_kind(provider_name, host):
    if provider_name.startswith(host + '_gpu_'):
        return 'gpu'
    if provider_name.startswith(host + '_ib_'):
        return 'ib'
    return None


def card_state(traits, inventories, used):
    """(state, reason) of a card from its traits and ``reserved``."""
    if TRAIT_UNHEALTHY in traits:
        return (STATE_UNHEALTHY, 'held: the health check found it unhealthy '
                '(an Xid error or a failed nvidia-smi query); see '
                '"nova-lxd-accel doctor" on the host')
    if TRAIT_UNPROBEABLE in traits:
        return (STATE_UNPROBEABLE, 'held: nvidia-smi could not probe it, so '
                'no release can be verified clean')
    pending = _pending(inventories, used)
    if pending:
        return (STATE_PENDING, '%d unit(s) reserved: a release being '
                'verified clean (or a unit used outside nova, or a device '
                'gone from the host with a server still on it)' % pending)
    return STATE_HEALTHY, ''


def _pending(inventories, used):
    return sum(min(rec.get('reserved', 0),
                   max(rec.get('total', 0) - used.get(rc, 0), 0))
               for rc, rec in inventories.items() if is_unit_class(rc))


def card_counts(state, inventories, used):
    """:class:`Counts` of a card's units (all its unit classes)."""
    total = sum(rec.get('total', 0) for rc, rec in inventories.items()
                if is_unit_class(rc))
    in_use = min(total, sum(n for rc, n in used.items()
                            if is_unit_class(rc)))
    if state in (STATE_UNHEALTHY, STATE_UNPROBEABLE):
        return Counts(free=0, in_use=in_use, pending=0,
                      held=total - in_use)
    pending = _pending(inventories, used)
    return Counts(free=max(total - in_use - pending, 0), in_use=in_use,
                  pending=pending, held=0)


def _add(one, other):
    return Counts(*(a + b for a, b in zip(one, other)))


def _used(allocations):
    used = collections.Counter()
    for consumer in allocations.values():
        used.update(consumer.get('resources', {}))
    return dict(used)


def build_card(host, provider, detail, servers):
    """One card (a dict) from its provider and its three answers.

    :param detail: ``{'inventories', 'traits', 'allocations'}`` as
        Placement answered them (``inventories`` and ``allocations`` are
        the dicts under those keys, ``traits`` a list).
    :param servers: server uuid -> ``{'name', 'project_id',
        'project_name'}``, for the holders' names; a consumer not in it is
        shown by its uuid.
    """
    inventories = detail['inventories']
    traits = set(detail['traits'])
    allocations = detail['allocations']
    used = _used(allocations)
    state, reason = card_state(traits, inventories, used)
    models = sorted(model_words(t[len(MODEL_TRAIT_PREFIX):])
                    for t in traits if t.startswith(MODEL_TRAIT_PREFIX))
    classes = [{'resource_class': rc, 'words': class_words(rc),
                'total': rec.get('total', 0),
                'used': used.get(rc, 0),
                'reserved': rec.get('reserved', 0)}
               for rc, rec in sorted(inventories.items())]
    holders = []
    for consumer, allocation in sorted(allocations.items()):
        server = servers.get(consumer, {})
        holders.append({
            'id': consumer, 'name': server.get('name') or consumer,
            'project_id': server.get('project_id', ''),
            'project_name': (server.get('project_name') or
                             server.get('project_id', '')),
            'units': ', '.join('%d × %s' % (n, class_words(rc))
                               for rc, n in sorted(
                                   allocation.get('resources', {}).items())
                               if is_unit_class(rc))})
    return {'uuid': provider['uuid'], 'name': provider['name'],
            'host': host, 'kind': card_kind(provider['name'], host),
            'pci_address': pci_address(provider['name'], host) or '',
            'model': ', '.join(models), 'classes': classes,
            'state': state, 'reason': reason, 'holders': holders,
            'counts': card_counts(state, inventories, used)}


def card_providers(providers):
    """(host name, provider) of every card provider, in name order.

    A card is a child of a root provider named ``<root>_gpu_*`` or
    ``<root>_ib_*``: another driver's nested providers are left out.
    """
    roots = {p['uuid']: p['name'] for p in providers
             if not p.get('parent_provider_uuid')}
    out = []
    for provider in providers:
        host = roots.get(provider.get('parent_provider_uuid'))
        if host and card_kind(provider['name'], host):
            out.append((host, provider))
    return sorted(out, key=lambda pair: pair[1]['name'])


def build(providers, details, servers):
    """Hosts with their cards, from Placement's answers.

    :param providers: ``GET /resource_providers`` (microversion >= 1.14).
    :param details: provider uuid -> ``{'inventories', 'traits',
        'allocations'}`` of each card provider.
    :returns: a list of ``{'name', 'counts', 'cards'}``, by host name.
    """
    hosts = collections.OrderedDict()
    for host, provider in card_providers(providers):
        card = build_card(host, provider, details[provider['uuid']],
                          servers)
        hosts.setdefault(host, []).append(card)
    return [host_view(name, cards) for name, cards in sorted(hosts.items())]


def host_view(name, cards):
    counts = Counts(0, 0, 0, 0)
    for card in cards:
        counts = _add(counts, card['counts'])
    return {'name': name, 'counts': counts, 'cards': cards}


def choices(hosts):
    """The values each filter can take: host, model, state, project."""
    cards = [c for h in hosts for c in h['cards']]
    projects = {(h['project_id'], h['project_name'])
                for c in cards for h in c['holders'] if h['project_id']}
    return {'host': sorted(h['name'] for h in hosts),
            'model': sorted({c['model'] for c in cards if c['model']}),
            'state': list(STATES),
            'project': sorted(projects, key=lambda p: (p[1], p[0]))}


def select(hosts, host=None, model=None, state=None, project=None):
    """The hosts and cards that match every filter given (None: any)."""
    out = []
    for view in hosts:
        if host and view['name'] != host:
            continue
        cards = [c for c in view['cards']
                 if (not model or c['model'] == model) and
                 (not state or c['state'] == state) and
                 (not project or any(h['project_id'] == project
                                     for h in c['holders']))]
        if cards:
            out.append(host_view(view['name'], cards))
    return out


def bar(counts):
    """The segments of a host's bar: (kind, count, percent), no empty one."""
    total = sum(counts)
    if not total:
        return []
    return [(kind, n, round(100.0 * n / total, 2))
            for kind, n in zip(Counts._fields, counts) if n]


def describe(extra_specs):
    """What a flavor asks for in words, one line per accelerator request.

    ``resources:CUSTOM_MIG_1G_10GB=1`` with the model trait of an H100
    reads ``1 × NVIDIA H100 80GB HBM3, MIG 1g.10gb``. Each request group
    (``resourcesN``) is named by its own group's model trait
    (``traitN:CUSTOM_GPU_MODEL_*=required``), else by the unnumbered
    group's; without any, the flavor's ``Accelerator:Vendor`` and
    ``Accelerator:Model`` (EGI's keys) name the model when they are set.
    Amounts nova would not ask for (0, negative, not a number) are left
    out.
    """
    extra_specs = extra_specs or {}
    models = {}
    for key, value in sorted(extra_specs.items()):
        match = _MODEL_TRAIT_KEY.match(key)
        if match and value == 'required':
            models.setdefault(match.group(1), model_words(match.group(2)))
    fallback = models.get('')
    if fallback is None and extra_specs.get('Accelerator:Model'):
        fallback = ('%s %s' % (extra_specs.get('Accelerator:Vendor', ''),
                               extra_specs['Accelerator:Model'])).strip()
    lines = []
    for key, value in sorted(extra_specs.items()):
        match = _RESOURCES_KEY.match(key)
        if not match:
            continue
        group, rc = match.groups()
        if not is_unit_class(rc) or (
                rc not in _CLASS_WORDS and not rc.startswith(MIG_PREFIX)):
            continue
        try:
            count = int(value)
        except ValueError:
            continue
        if count <= 0:
            continue
        what = class_words(rc)
        model = models.get(group, fallback)
        if model and rc not in (placement_names.RC_INFINIBAND_VF,
                                placement_names.RC_INFINIBAND_PORT):
            what = '%s, %s' % (model, what)
        lines.append('%d × %s' % (count, what))
    return lines
