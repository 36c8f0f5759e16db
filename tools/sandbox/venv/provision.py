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

"""Register the sandbox cloud's objects through the real APIs.

Run by ``tools/sandbox.sh`` inside the sandbox venv, with ``OS_CLOUD`` and
``OS_CLIENT_CONFIG_FILE`` naming the sandbox's admin cloud. Every phase is
idempotent: objects that exist are left alone (or updated in place).

Phases:

``keystone``
    the ``service`` project, one user per service with the ``admin`` and
    ``service`` roles there, and the catalog (placement, image, network,
    compute) with public, internal and admin endpoints.
``image NAME FILE [replace]``
    upload an LXD unified image tarball to Glance (raw/bare,
    ``hypervisor_type=lxc``) unless an active image of that name exists
    (with ``replace``: in place of the images of that name).
``flavors PLAIN INVENTORY_JSON [FLAVOR_LINES [SECOND]]``
    the plain flavor (1 vCPU, 128 MB) and, when given, a second CPU flavor
    SECOND (2 vCPUs, 256 MB) to resize to, plus the accelerator flavors:
    those of FLAVOR_LINES
    (``name key=value...`` per line, as the DevStack plugin's
    ``accel-flavors.py`` prints them) when given, else one per accelerator
    resource class found in the output of ``nova-lxd-accel inventory``.
``metadefs NAMESPACE...``
    check that Glance serves these metadata definition namespaces.
``wait-rpc TIMEOUT``
    wait until Neutron's RPC server consumes its agents' topics (the
    message bus drops what is sent to a topic nobody consumes yet: an
    agent started earlier waits a minute for its first answer). The bus
    is Neutron's own ``transport_url``, read from its neutron.conf.
``second-host on|off|down [TIMEOUT]``
    enable or disable the nova-compute service of ``up --hosts 2``'s
    second host (``up --hosts 1`` stops it), or wait until nova counts
    it down.
``wait-agents TIMEOUT SINCE [HOST]``
    wait until Neutron's Open vSwitch, DHCP, L3 and metadata agents have
    reported alive since SINCE (UTC ISO 8601).
``network PUBLIC_CIDR OUTSIDE_IP PRIVATE_CIDR``
    the external network ``public`` (flat, physical network ``public``,
    the default external network; OUTSIDE_IP, in the sandbox's outside
    namespace, is its gateway), the admin project's network ``private``
    with DHCP, the router ``router1`` between them, a default subnet pool
    (so that Neutron can auto-allocate a network to any project: the CLI's
    ``networks=auto``), and ICMP and SSH allowed by the admin project's
    default security group.
``demo``
    the project ``demo`` and its user ``demo`` (role ``member``, password
    ``DEMO_PASSWORD`` of secrets.env), the way a cloud user meets the
    cloud (and Horizon's test logs in), with a network of its own: Neutron's
    auto-allocated topology (network, subnet from the default pool,
    router to ``public``).
``wait-compute TIMEOUT PID SINCE [yes|no [HOST]]``
    wait until nova-compute (process PID, started at SINCE, UTC ISO 8601)
    has reported in and has a resource provider in Placement; with
    ``yes``, until its node is also mapped to a cell.
"""

import configparser
import json
import os
import re
import sys
import time

import openstack

from .. import catalogue
from .. import credentials
from .. import layout
from .. import services as services_module

# (service name, type, description, port variable, path), from services.py
CATALOG = tuple((endpoint.name, endpoint.type, endpoint.description, port,
                 endpoint.path)
                for endpoint, port in services_module.ENDPOINTS)

SERVICE_USERS = tuple(entry[0] for entry in CATALOG)

ACCEL_RC = re.compile(r'^(CUSTOM_[A-Z0-9_]+|PGPU|VGPU|FPGA|PCI_DEVICE)$')


def connect():
    return openstack.connect()


def _ensure(finder, creator, name, **attrs):
    found = finder(name, ignore_missing=True)
    if found is None:
        found = creator(name=name, **attrs)
        print('created %s' % name)
    return found


def phase_keystone(conn):
    """Service project, users, roles and catalog, in a few list calls."""
    identity = conn.identity
    sandbox = layout.Layout.from_environ()
    password = credentials.load(sandbox)['SERVICE_PASSWORD']
    region = catalogue.REGION
    domain = identity.find_domain('default')
    project = _ensure(identity.find_project, identity.create_project,
                      'service', domain_id=domain.id,
                      description='Service users of the sandbox')
    roles = {role.name: role for role in identity.roles()}
    for name in ('admin', 'service'):
        if name not in roles:
            roles[name] = identity.create_role(name=name)
            print('created role %s' % name)
    users = {user.name: user for user in identity.users(domain_id=domain.id)}
    granted = {(a.user['id'], a.role['id']) for a in
               identity.role_assignments(scope_project_id=project.id)
               if a.user}
    for name in SERVICE_USERS:
        user = users.get(name)
        if user is None:
            user = identity.create_user(name=name, domain_id=domain.id,
                                        password=password)
            print('created user %s' % name)
        for role in (roles['admin'], roles['service']):
            if (user.id, role.id) not in granted:
                identity.assign_project_role_to_user(project, user, role)
                print('granted %s to %s' % (role.name, name))

    services = {svc.name: svc for svc in identity.services()}
    endpoints = {}
    for endpoint in identity.endpoints():
        endpoints[(endpoint.service_id, endpoint.interface)] = endpoint
    for name, stype, description, port_name, path in CATALOG:
        service = services.get(name)
        if service is None:
            service = identity.create_service(
                name=name, type=stype, description=description)
            print('created service %s' % name)
        url = sandbox.url(port_name, path)
        for interface in ('public', 'internal', 'admin'):
            endpoint = endpoints.get((service.id, interface))
            if endpoint is None:
                identity.create_endpoint(
                    service_id=service.id, interface=interface, url=url,
                    region_id=region)
                print('created %s endpoint %s %s' % (name, interface, url))
            elif endpoint.url != url:
                identity.update_endpoint(endpoint, url=url)
                print('updated %s endpoint %s %s' % (name, interface, url))
    return 0


def phase_image(conn, name, path, replace=''):
    for image in conn.image.images(name=name):
        if replace == 'replace':
            print('replacing image %s (%s): its recipe changed'
                  % (name, image.id))
            conn.image.delete_image(image)
            continue
        if image.status == 'active':
            print('image %s exists (%s)' % (name, image.id))
            return 0
        print('removing unusable image %s (%s)' % (image.id, image.status))
        conn.image.delete_image(image)
    image = conn.image.create_image(
        name=name, filename=path, disk_format='raw',
        container_format='bare', visibility='public',
        hypervisor_type='lxc', wait=True, allow_duplicates=True,
        validate_checksum=False)
    print('uploaded image %s (%s)' % (name, image.id))
    return 0


def accelerator_classes(document):
    """Accelerator resource classes with their totals in an inventory dump.

    The walk is deliberately loose about the layout: it collects every
    ``{"resource_class": RC, "total": N}`` record and every mapping whose
    keys are accelerator resource class names (``CUSTOM_*``, ``PGPU``...).

    :param document: the decoded JSON of ``nova-lxd-accel inventory``.
    :returns: dict of resource class name to total (at least 1).
    """
    found = {}

    def add(rc, value):
        total = value
        if isinstance(value, dict):
            total = value.get('total', 1)
        try:
            total = int(total)
        except (TypeError, ValueError):
            total = 1
        found[rc] = max(found.get(rc, 0), total, 1)

    def walk(node):
        if isinstance(node, dict):
            rc = node.get('resource_class')
            if isinstance(rc, str) and ACCEL_RC.match(rc):
                add(rc, node)
            for key, value in node.items():
                if isinstance(key, str) and ACCEL_RC.match(key):
                    add(key, value)
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(document)
    return found


def _describe(vcpus, ram, disk, what):
    """A flavor's description in plain words (shown by Horizon)."""
    return '%d vCPU%s, %d MiB RAM, %d GiB disk: %s' % (
        vcpus, '' if vcpus == 1 else 's', ram, disk, what)


def _ensure_flavor(conn, name, vcpus, ram, disk, extra_specs, what,
                   description=None):
    if description is None:
        description = _describe(vcpus, ram, disk, what)
    flavor = conn.compute.find_flavor(name, ignore_missing=True)
    if flavor is None:
        # the description needs compute microversion 2.55 (the SDK
        # negotiates it)
        flavor = conn.compute.create_flavor(
            name=name, vcpus=vcpus, ram=ram, disk=disk, is_public=True,
            description=description)
        print('created flavor %s' % name)
    elif flavor.description != description:
        flavor = conn.compute.update_flavor(flavor, description=description)
    if extra_specs:
        conn.compute.create_flavor_extra_specs(flavor, extra_specs)
    return flavor


def _remove_stale_accelerator_flavors(conn, wanted):
    """Delete this sandbox's accelerator flavors the host no longer has.

    After ``up --hardware NAME`` then ``up --hardware none`` (or another
    recorded host), flavors for hardware nova-compute does not report
    would only ever end in "No valid host". Only flavors named
    ``sandbox.*`` that ask for resources are touched; servers keep their
    copy of a deleted flavor.
    """
    for flavor in conn.compute.flavors(details=True, is_public=None):
        if not flavor.name.startswith('sandbox.') or flavor.name in wanted:
            continue
        specs = flavor.extra_specs or {}
        if any(key.startswith('resources') for key in specs):
            conn.compute.delete_flavor(flavor)
            print('deleted flavor %s: this host no longer reports what it '
                  'asks for' % flavor.name)


def _flavor_lines(path):
    """[(name, {key: value}, words)] from ``name key=value...<TAB>words``.

    ``words`` (what the flavor gives, in plain words) may be missing: ''.
    """
    out = []
    with open(path) as handle:
        for line in handle:
            spec, _, words = line.rstrip('\n').partition('\t')
            fields = spec.split()
            if fields:
                out.append((fields[0], dict(f.split('=', 1)
                                            for f in fields[1:]),
                            words.strip()))
    return out


GPU_RESOURCES = ('resources:PGPU', 'resources:CUSTOM_MIG_',
                 'resources:CUSTOM_GPU_SHARE',
                 # a quota'd share: slot, memory and trait in one group
                 'resources1:CUSTOM_GPU_SHARE')


def _gpu_proposals(path):
    """``nova-lxd-accel flavors --format json`` output, [] if none."""
    if not path or not os.path.exists(path):
        return []
    try:
        with open(path) as handle:
            return json.load(handle)
    except ValueError as exc:
        print('nova-lxd-accel flavors output is not JSON (%s)' % exc)
        return []


def phase_flavors(conn, plain, inventory_path, lines_path=None,
                  second=None, simulated='', gpu_flavors_path=None):
    """The CPU flavors, and one flavor per accelerator kind found.

    :param simulated: the name of the recorded host nova-compute sees
        (``up --hardware``), said in every accelerator flavor's
        description; empty for the host's own hardware.
    :param gpu_flavors_path: ``nova-lxd-accel flavors --format json``
        output: the GPU flavors, with their ``Accelerator:*`` properties
        and descriptions, replace the recipes' GPU lines.
    """
    _ensure_flavor(conn, plain, 1, 128, 1, {},
                   'a small LXD container (unprivileged)')
    if second:
        _ensure_flavor(conn, second, 2, 256, 2, {},
                       'a larger LXD container, to resize to')
    if lines_path and os.path.exists(lines_path):
        # The DevStack plugin's recipes (devstack/files/accel-flavors.py).
        wanted = _flavor_lines(lines_path)
    else:
        document = None
        if inventory_path and os.path.exists(inventory_path):
            try:
                with open(inventory_path) as handle:
                    document = json.load(handle)
            except ValueError as exc:
                print('inventory output is not JSON (%s)' % exc)
        classes = accelerator_classes(document) if document else {}
        wanted = [('sandbox.%s' % rc.lower().replace('custom_', '').replace(
                   '_', '-'), {'resources:%s' % rc: '1'}, '')
                  for rc in sorted(classes)]
    proposals = _gpu_proposals(gpu_flavors_path)
    if proposals:
        wanted = [(name, specs, words) for name, specs, words in wanted
                  if not any(key.startswith(GPU_RESOURCES) for key in specs)]
    if not wanted and not proposals:
        print('no accelerators found on this host: only flavor %s' % plain)
    _remove_stale_accelerator_flavors(
        conn, {plain, second} | {name for name, _, _ in wanted} |
        {p['name'] for p in proposals})
    suffix = ''
    if simulated:
        suffix = (' SIMULATED hardware (recorded host %s): no real device '
                  'is attached.' % simulated)
    for proposal in proposals:
        # Its own words already name CPUs and RAM: no size prefix.
        _ensure_flavor(conn, proposal['name'], proposal['vcpus'],
                       proposal['ram'], proposal['disk'],
                       proposal['extra_specs'], None,
                       description=proposal['description'] + suffix)
        print('GPU flavor %s: %s' % (proposal['name'], ' '.join(
            '%s=%s' % kv for kv in sorted(proposal['extra_specs'].items()))))
    for name, specs, words in wanted:
        asked = ', '.join('%s %s' % (n, rc.split(':', 1)[1])
                          for rc, n in sorted(specs.items())
                          if rc.startswith('resources'))
        what = 'an LXD container with %s' % (words or asked or
                                             'accelerators')
        if simulated:
            what += (' on SIMULATED hardware (recorded host %s: no real '
                     'device is attached)' % simulated)
        _ensure_flavor(conn, name, 1, 256, 1, specs, what)
        print('accelerator flavor %s: %s' % (name, ' '.join(
            '%s=%s' % kv for kv in sorted(specs.items()))))
    return 0


AGENT_TYPES = ('Open vSwitch agent', 'DHCP agent', 'L3 agent',
               'Metadata agent')


RPC_TOPICS = ('q-plugin', 'q-reports-plugin', 'q-l3-plugin',
              'q-server-resource-versions')


def _poll(timeout, interval, missing_now, everything, ready, waiting):
    """Call ``missing_now()`` until it returns nothing, for TIMEOUT s.

    :param ready: what is printed then (``%s``: everything, joined).
    :param waiting: what is printed on timeout (``%s``: what is missing).
    :returns: 0, or 1 on timeout.
    """
    started = time.monotonic()
    deadline = started + float(timeout)
    missing = everything
    while time.monotonic() < deadline:
        missing = missing_now()
        if not missing:
            print('%.1fs: ' % (time.monotonic() - started)
                  + ready % ', '.join(everything))
            return 0
        time.sleep(interval)
    print('timed out after %ss: ' % timeout + waiting % ', '.join(missing),
          file=sys.stderr)
    return 1


def _consumed(connection, topic):
    """Whether the RabbitMQ queue TOPIC has a consumer."""
    channel = connection.channel()
    try:
        return bool(channel.queue_declare(queue=topic,
                                          passive=True).consumer_count)
    except Exception:  # 404: not declared yet
        return False
    finally:
        try:
            channel.close()
        except Exception:
            pass


def phase_wait_rpc(timeout):
    import kombu  # oslo.messaging's AMQP library, in the sandbox venv

    neutron_conf = configparser.ConfigParser(interpolation=None)
    neutron_conf.read(layout.Layout.from_environ().path(
        'etc', 'neutron', 'neutron.conf'))
    url = neutron_conf['DEFAULT']['transport_url'].replace('rabbit://',
                                                           'amqp://', 1)
    with kombu.Connection(url) as connection:
        return _poll(timeout, 0.5, lambda: [
            topic for topic in RPC_TOPICS
            if not _consumed(connection, topic)], RPC_TOPICS,
            'Neutron RPC server consumes %s',
            'nobody consumes %s (see log/neutron-rpc.log)')


def phase_wait_agents(conn, timeout, since, host=''):
    """Every agent type alive since ``since``.

    With ``host``, only the OVS agent of that host (``up --hosts 2``).
    """
    types = AGENT_TYPES if not host else tuple(
        t for t in AGENT_TYPES if 'Open vSwitch' in t)

    def missing_now():
        alive = {a.agent_type for a in conn.network.agents()
                 if a.is_alive and (a.last_heartbeat_at or '') >= since and
                 (not host or a.host == host)}
        return [t for t in types if t not in alive]

    return _poll(timeout, 1, missing_now, types,
                 'Neutron agents alive: %s',
                 'no live %s (see log/neutron-*-agent.log)')


def _find_or_create(find, create, name, **attrs):
    found = find(name, ignore_missing=True)
    if found is not None:
        return found
    print('created %s' % name)
    return create(name=name, **attrs)


def _pool(cidr, first, last):
    base = cidr.rsplit('.', 1)[0]
    return [{'start': '%s.%d' % (base, first), 'end': '%s.%d' % (base, last)}]


def phase_network(conn, public_cidr, outside_ip, private_cidr,
                  floating_first=None, floating_last=None):
    net = conn.network
    # Owned by the service project: a network of the admin project would
    # be one more candidate for the admin's "networks=auto" (Nova then
    # refuses with "Multiple possible networks found").
    service = conn.identity.find_project('service')
    public = _find_or_create(
        net.find_network, net.create_network, 'public',
        project_id=service.id, is_router_external=True, is_default=True,
        provider_network_type='flat', provider_physical_network='public')
    floating = [{'start': floating_first, 'end': floating_last}] \
        if floating_first else _pool(public_cidr, 10, 200)
    public_subnet = _find_or_create(
        net.find_subnet, net.create_subnet, 'public-subnet',
        project_id=service.id, network_id=public.id, ip_version=4,
        cidr=public_cidr, gateway_ip=outside_ip, is_dhcp_enabled=False,
        allocation_pools=floating)
    if public_subnet.allocation_pools != floating:
        # a sandbox made before the pool moved: new addresses from the
        # new pool (those in use keep theirs)
        net.update_subnet(public_subnet, allocation_pools=floating)
        print('public-subnet: floating IPs from %(start)s to %(end)s'
              % floating[0])
    private = _find_or_create(net.find_network, net.create_network,
                              'private')
    private_subnet = _find_or_create(
        net.find_subnet, net.create_subnet, 'private-subnet',
        network_id=private.id, ip_version=4, cidr=private_cidr,
        is_dhcp_enabled=True, allocation_pools=_pool(private_cidr, 10, 200))
    router = net.find_router('router1', ignore_missing=True)
    if router is None:
        router = net.create_router(name='router1')
        print('created router1')
    if (router.external_gateway_info or {}).get('network_id') != public.id:
        router = net.update_router(
            router, external_gateway_info={'network_id': public.id})
        print('router1: gateway on public')
    if not list(net.ports(device_id=router.id,
                          network_id=private.id)):
        net.add_interface_to_router(router, subnet_id=private_subnet.id)
        print('router1: interface on private')
    # Auto-allocated networks (a project's first server without --nic)
    # take their subnet from the default pool; the range is the sandbox's
    # third documentation range.
    _find_or_create(net.find_subnet_pool, net.create_subnet_pool,
                    'sandbox-default', prefixes=['198.51.100.0/24'],
                    default_prefix_length=28, is_default=True,
                    is_shared=True)
    project = conn.current_project_id
    group = [g for g in net.security_groups(name='default',
                                            project_id=project)]
    if not group:
        print('no default security group in project %s' % project,
              file=sys.stderr)
        return 1
    wanted = (('icmp', None), ('tcp', 22))
    rules = list(net.security_group_rules(security_group_id=group[0].id,
                                          direction='ingress'))
    for protocol, port in wanted:
        if any(r.protocol == protocol and r.ether_type == 'IPv4' and
               r.port_range_min == port and not r.remote_group_id
               for r in rules):
            continue
        net.create_security_group_rule(
            security_group_id=group[0].id, direction='ingress',
            ether_type='IPv4', protocol=protocol, port_range_min=port,
            port_range_max=port, remote_ip_prefix='0.0.0.0/0')
        print('default security group: allowed %s%s in' % (
            protocol, ' port %d' % port if port else ''))
    print('networks: public %s (outside %s), private %s, router1'
          % (public_cidr, outside_ip, private_cidr))
    return 0


def phase_demo(conn):
    identity = conn.identity
    domain = identity.find_domain('default', ignore_missing=False)
    project = _ensure(identity.find_project, identity.create_project, 'demo',
                      domain_id=domain.id,
                      description='A cloud user of the sandbox')
    member = identity.find_role('member', ignore_missing=False)
    password = credentials.load(layout.Layout.from_environ())['DEMO_PASSWORD']
    user = identity.find_user('demo', domain_id=domain.id,
                              ignore_missing=True)
    if user is None:
        user = identity.create_user(name='demo', domain_id=domain.id,
                                    password=password,
                                    default_project_id=project.id)
        print('created user demo')
    else:
        identity.update_user(user, password=password)
    if not any(a.role['id'] == member.id for a in identity.role_assignments(
            scope_project_id=project.id, user_id=user.id)):
        identity.assign_project_role_to_user(project, user, member)
        print('granted member on demo to demo')
    topology = conn.network.get_auto_allocated_topology(project=project.id)
    print('project demo: user demo (member), network %s (auto-allocated)'
          % topology.id)
    return 0


def phase_metadefs(conn, *namespaces):
    """Fail unless Glance serves each metadata definition namespace."""
    served = {ns.namespace for ns in conn.image.metadef_namespaces()}
    missing = [name for name in namespaces if name not in served]
    if missing:
        print('Glance has no metadata definition namespace %s (it has %d); '
              'see the metadefs lines of log/db-glance.log' % (
                  ', '.join(missing), len(served)), file=sys.stderr)
        return 1
    print('Glance serves %d metadata definition namespaces, including %s'
          % (len(served), ', '.join(namespaces)))
    return 0


def phase_wait_compute(conn, timeout, pid, since, mapped='no', host=''):
    """Wait for nova-compute ``pid`` to report in after ``since`` (UTC).

    A service record or provider left by an earlier run does not count:
    the service must have been updated since this run started it. With
    ``mapped=yes``, also wait for its node in the hypervisor list, which
    shows only hosts mapped to a cell (``nova-manage cell_v2
    discover_hosts``). With ``host``, that host's nova-compute (``up
    --hosts 2``: the second one).
    """
    started = time.monotonic()
    deadline = started + float(timeout)
    state = reported = None
    while time.monotonic() < deadline:
        if not os.path.exists('/proc/%s' % pid):
            print('nova-compute (pid %s) exited' % pid, file=sys.stderr)
            return 1
        services = [s for s in conn.compute.services()
                    if s.binary == 'nova-compute']
        fresh = {s.host for s in services if s.state == 'up' and
                 (s.updated_at or '') >= since}
        # the one host asked for; else the first host's (and the bench's)
        fresh = fresh & {host} if host else fresh - {catalogue.SECOND_HOST}
        providers = {p.name for p in conn.placement.resource_providers()}
        if not services:
            state = 'no nova-compute service record yet'
        elif not fresh:
            state = 'nova-compute has not reported since %s' % since
        elif not providers:
            state = 'nova-compute up, no resource provider yet'
        elif mapped != 'yes':
            print('%.1fs: nova-compute up on %s; resource providers: %s' % (
                time.monotonic() - started, ', '.join(sorted(fresh)),
                ', '.join(sorted(providers))))
            return 0
        else:
            # The list without details: the detailed one asks every compute
            # it believes up for its uptime over RPC, and a nova-compute
            # stopped less than a minute ago (up --hosts 1) never answers.
            # This driver's node is named after its host.
            nodes = [h.name for h in conn.compute.hypervisors(details=False)
                     if h.name in fresh]
            ready = [n for n in nodes if n in providers]
            if ready:
                print('%.1fs: nodes in a cell and in Placement: %s' % (
                    time.monotonic() - started, ', '.join(sorted(ready))))
                return 0
            state = 'nova-compute up, its node not mapped to a cell yet'
        if state != reported:
            print('%.1fs: %s' % (time.monotonic() - started, state))
            reported = state
        time.sleep(0.5)
    print('timed out after %ss: %s' % (timeout, state), file=sys.stderr)
    return 1


def phase_second_host(conn, state, timeout='120'):
    """Enable (``on``) or disable (``off``) the second host's service.

    ``up --hosts 1`` disables it, then stops its nova-compute: disabled,
    the scheduler leaves it out at once; ``up --hosts 2`` enables it
    again. ``down`` waits until nova counts the stopped service down (a
    minute after its last report): until then nova's API still asks it
    over RPC (a hypervisor's uptime) and waits a minute for no answer.
    """
    if state == 'down':
        def still_up():
            return [s.host for s in conn.compute.services()
                    if s.binary == 'nova-compute' and
                    s.host == catalogue.SECOND_HOST and s.state == 'up']
        return _poll(timeout, 2, still_up, [catalogue.SECOND_HOST],
                     'nova counts %s down', '%s still counted up')
    for service in conn.compute.services():
        if service.binary != 'nova-compute' or \
                service.host != catalogue.SECOND_HOST:
            continue
        if state == 'on' and service.status == 'disabled':
            conn.compute.enable_service(service)
            print('%s enabled' % service.host)
        elif state == 'off' and service.status != 'disabled':
            conn.compute.disable_service(
                service, disabled_reason='tools/sandbox.sh up --hosts 1')
            print('%s disabled (up --hosts 1)' % service.host)
    return 0


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    phase, args = argv[0], argv[1:]
    if phase == 'wait-rpc':
        return phase_wait_rpc(*args)
    conn = connect()
    if phase == 'keystone':
        return phase_keystone(conn)
    if phase == 'image':
        return phase_image(conn, *args)
    if phase == 'flavors':
        return phase_flavors(conn, *args)
    if phase == 'metadefs':
        return phase_metadefs(conn, *args)
    if phase == 'wait-agents':
        return phase_wait_agents(conn, *args)
    if phase == 'network':
        return phase_network(conn, *args)
    if phase == 'demo':
        return phase_demo(conn)
    if phase == 'wait-compute':
        return phase_wait_compute(conn, *args)
    if phase == 'second-host':
        return phase_second_host(conn, *args)
    print('unknown phase %r' % phase, file=sys.stderr)
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
