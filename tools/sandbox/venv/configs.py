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

"""The sandbox cloud's configuration files, from its layout and secrets.

Each service's files are built by one function of the same signature,
``(settings) -> {relative path: text}``, from :class:`Settings` alone
(ports and paths from layout.py, passwords from credentials.py, the daemon
and hardware nova-compute uses). Building writes nothing; :func:`write`
then writes them all, 0600 in 0700 directories, so re-running ``up``
always leaves a coherent set.

Usage: configs.py write --daemon-socket PATH [--compute-driver DRIVER]
                        [--backend lxd|incus --peer-dir DIR]

Run with the sandbox venv's Python (it reads the installed Nova's newest
compute API microversion and copies the packages' paste files); standard
library only.
"""

import argparse
import collections
import importlib.util
import os
import re
import sys

from .. import catalogue
from .. import credentials
from .. import hardware
from .. import layout as layout_module

HEADER = ('# Written by nova-lxd-accel\'s sandbox '
          '(tools/sandbox/venv/configs.py) at every "up":\n'
          '# edits here are overwritten.\n')

Settings = collections.namedtuple('Settings', [
    'layout',          # layout.Layout
    'secrets',         # dict: credentials.NAMES -> value
    'compute_driver',  # nova's compute_driver
    'daemon_socket',   # the LXD or Incus daemon's unix socket
    'hardware',        # the simulated host's name, or None (up --hardware)
    'microversion',    # the newest compute API microversion, "2.N"
    'second_host',     # SecondHost (up --hosts 2), or None
], defaults=(None,))

#: "up --hosts 2": the peer daemon the second nova-compute uses, and what
#: both nova-computes need to send a container to the other's daemon
#: (tools/lxd-peer-up.sh made the certificates and the trust)
SecondHost = collections.namedtuple('SecondHost', [
    'daemon_socket',   # the peer daemon's unix socket
    'client_cert',     # the certificate both daemons trust, and its key
    'client_key',
    'endpoints',       # {compute host: https URL of its daemon}
    'server_certs',    # {compute host: its daemon's server.crt}
])

#: the loopback HTTPS addresses tools/lxd-peer-up.sh gives the main daemon
#: and its peer
PEER_ADDRESSES = {'lxd': ('127.0.0.1:8443', '127.0.0.1:8444'),
                  'incus': ('127.0.0.1:8445', '127.0.0.1:8446')}


def second_host(backend, daemon_socket, peer_dir, first_host):
    """The :class:`SecondHost` of the peer daemon at ``peer_dir``."""
    main_dir = os.path.dirname(daemon_socket)
    main_address, peer_address = PEER_ADDRESSES[backend]
    return SecondHost(
        os.path.join(peer_dir, 'unix.socket'),
        os.path.join(peer_dir, 'nova-migration.crt'),
        os.path.join(peer_dir, 'nova-migration.key'),
        collections.OrderedDict([
            (first_host, 'https://' + main_address),
            (catalogue.SECOND_HOST, 'https://' + peer_address)]),
        collections.OrderedDict([
            (first_host, os.path.join(main_dir, 'server.crt')),
            (catalogue.SECOND_HOST, os.path.join(peer_dir, 'server.crt'))]))


def ini(*sections):
    """INI text from ``(section, [(key, value), ...])`` pairs.

    A key starting with ``#`` is a comment line (its value is ignored).
    """
    blocks = []
    for name, options in sections:
        lines = ['[%s]' % name]
        for key, value in options:
            if key.startswith('#'):
                lines.append(key)
            else:
                lines.append('%s = %s' % (key, value))
        blocks.append('\n'.join(lines) + '\n')
    return HEADER + '\n' + '\n'.join(blocks)


def db_url(settings, database):
    return ('mysql+pymysql://openstack:%s@127.0.0.1:%d/%s?charset=utf8'
            % (settings.secrets['DB_PASSWORD'],
               settings.layout.ports['MYSQL'], database))


def rabbit_url(settings):
    return ('rabbit://openstack:%s@127.0.0.1:%d/'
            % (settings.secrets['RABBIT_PASSWORD'],
               settings.layout.ports['AMQP']))


def keystone_v3(settings):
    return settings.layout.url('KEYSTONE', '/v3')


def service_user(settings, user):
    """keystoneauth's password options for the service user ``user``."""
    return [
        ('auth_type', 'password'),
        ('auth_url', keystone_v3(settings)),
        ('project_domain_name', 'Default'),
        ('user_domain_name', 'Default'),
        ('project_name', 'service'),
        ('username', user),
        ('password', settings.secrets['SERVICE_PASSWORD']),
        ('region_name', catalogue.REGION),
    ]


def authtoken(settings, user):
    """[keystone_authtoken] of the service user ``user``."""
    return ('keystone_authtoken',
            [('www_authenticate_uri', keystone_v3(settings))] +
            service_user(settings, user) +
            [('service_token_roles_required', 'true')])


def service_auth(settings, section, user, *extra):
    """A keystoneauth password section ``section`` for ``user``."""
    return (section, service_user(settings, user) +
            [('valid_interfaces', 'public')] + list(extra))


def root_helper(settings):
    # Everything runs as root already: no sudo, no rootwrap; the same prefix
    # starts the privsep helpers from the venv.
    return ('env PATH=%s/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:'
            '/usr/bin:/sbin:/bin' % settings.layout.venv)


# --- one function per service ------------------------------------------------

def rabbitmq(settings):
    conf = ('listeners.tcp.default = 127.0.0.1:%d\n'
            'default_user = openstack\n'
            'default_pass = %s\n'
            'loopback_users = none\n'
            'log.console = true\n'
            'log.console.level = info\n'
            'log.file = false\n'
            % (settings.layout.ports['AMQP'],
               settings.secrets['RABBIT_PASSWORD']))
    return {'etc/rabbitmq/rabbitmq.conf': HEADER + conf,
            'etc/rabbitmq/enabled_plugins': '[].\n'}


def keystone(settings):
    etc = settings.layout.etc
    return {'etc/keystone/keystone.conf': ini(
        ('DEFAULT', [('use_stderr', 'true')]),
        ('database', [('connection', db_url(settings, 'keystone'))]),
        ('token', [('provider', 'fernet')]),
        ('fernet_tokens', [
            ('key_repository', os.path.join(etc, 'keystone', 'fernet-keys'))]),
        ('fernet_receipts', [
            ('key_repository', os.path.join(etc, 'keystone', 'fernet-keys'))]),
        ('credential', [
            ('key_repository',
             os.path.join(etc, 'keystone', 'credential-keys'))]),
        ('identity', [('password_hash_rounds', '4')]),
        ('cache', [('enabled', 'true'), ('backend', 'oslo_cache.dict')]),
    )}


def placement(settings):
    return {'etc/placement/placement.conf': ini(
        ('DEFAULT', [('use_stderr', 'true')]),
        ('api', [('auth_strategy', 'keystone')]),
        ('placement_database', [
            ('connection', db_url(settings, 'placement'))]),
        authtoken(settings, 'placement'),
    )}


def glance(settings):
    data = settings.layout.data
    return {'etc/glance/glance-api.conf': ini(
        ('DEFAULT', [
            ('use_stderr', 'true'),
            ('enabled_backends', 'file:file'),
            ('bind_host', '127.0.0.1'),
            ('bind_port', settings.layout.ports['GLANCE']),
            ('workers', '0'),
            ('image_size_cap', '2147483648'),
            ('worker_self_reference_url', settings.layout.url('GLANCE')),
        ]),
        ('database', [('connection', db_url(settings, 'glance'))]),
        ('glance_store', [('default_backend', 'file')]),
        ('file', [('filesystem_store_datadir',
                   os.path.join(data, 'glance', 'images'))]),
        ('os_glance_staging_store', [
            ('filesystem_store_datadir',
             os.path.join(data, 'glance', 'staging'))]),
        ('os_glance_tasks_store', [
            ('filesystem_store_datadir',
             os.path.join(data, 'glance', 'tasks'))]),
        ('paste_deploy', [
            ('flavor', 'keystone'),
            ('config_file', os.path.join(settings.layout.venv, 'etc',
                                         'glance', 'glance-api-paste.ini'))]),
        ('oslo_concurrency', [
            ('lock_path', os.path.join(data, 'glance', 'lock'))]),
        authtoken(settings, 'glance'),
    )}


# Neutron with ML2/Open vSwitch and its agents (L2, DHCP, L3, metadata).
# Why ML2/OVS and not OVN: here OVS runs only with the userspace datapath
# (no openvswitch kernel module), where the agents' veth ports
# (ovs_use_veth) and the OVS firewall (conntrack of the userspace
# datapath) work as measured; OVN's metadata and gateway ports are OVS
# internal ports moved into namespaces, which the userspace datapath
# cannot serve there.
def neutron(settings):
    lay = settings.layout
    state = os.path.join(lay.data, 'neutron')
    # Heartbeats every 5 s, as nova's services here: "up" waits for each
    # agent's report since its start (Neutron's default is 30 s).
    agent = ('agent', [('root_helper', root_helper(settings)),
                       ('report_interval', '5')])
    ovs_for_agents = ('ovs', [('integration_bridge', 'br-int'),
                              ('ovsdb_connection', 'tcp:127.0.0.1:6640')])
    net = catalogue.NETWORK
    security_groups = ('securitygroup', [('firewall_driver', 'openvswitch'),
                                         ('enable_security_group', 'true')])
    files = {
        'etc/neutron/neutron.conf': ini(
            ('DEFAULT', [
                ('use_stderr', 'true'),
                ('core_plugin', 'ml2'),
                ('# router: the L3 agent\'s routers and floating IPs; '
                 'auto_allocate answers', None),
                ('# Nova\'s "networks=auto" (the CLI\'s default without '
                 '--nic).', None),
                ('service_plugins', 'router,auto_allocate'),
                ('auth_strategy', 'keystone'),
                ('transport_url', rabbit_url(settings)),
                ('api_paste_config',
                 os.path.join(lay.venv, 'etc', 'neutron', 'api-paste.ini')),
                ('state_path', state),
                ('bind_host', '127.0.0.1'),
                ('bind_port', lay.ports['NEUTRON']),
                ('api_workers', '1'),
                ('rpc_workers', '1'),
                ('rpc_state_report_workers', '0'),
                ('# nova waits for network-vif-plugged before it calls a '
                 'server ACTIVE', None),
                ('notify_nova_on_port_status_changes', 'true'),
                ('notify_nova_on_port_data_changes', 'true'),
                ('dhcp_agents_per_network', '1'),
                ('global_physnet_mtu', '1500'),
            ]),
            agent,
            ('database', [('connection', db_url(settings, 'neutron'))]),
            ('oslo_concurrency', [
                ('lock_path', os.path.join(state, 'lock'))]),
            authtoken(settings, 'neutron'),
            service_auth(settings, 'nova', 'neutron'),
        ),
        'etc/neutron/plugins/ml2/ml2_conf.ini': ini(
            ('ml2', [
                ('# VLAN project networks: two OVS agents on one userspace '
                 'Open vSwitch', None),
                ('# reach each other through patched bridges (up --hosts '
                 '2), not VXLAN.', None),
                ('type_drivers', 'flat,vlan,vxlan'),
                ('tenant_network_types', 'vlan'),
                ('mechanism_drivers', 'openvswitch'),
                ('extension_drivers', 'port_security'),
            ]),
            ('ml2_type_flat', [('flat_networks', 'public')]),
            ('ml2_type_vlan', [('network_vlan_ranges', '%s:%s' % (
                net['TENANT_PHYSNET'], net['TENANT_VLANS']))]),
            ('ml2_type_vxlan', [('vni_ranges', '1:1000')]),
        ),
        'etc/neutron/openvswitch_agent.ini': ini(
            ('ovs', [
                ('datapath_type', 'netdev'),
                ('integration_bridge', 'br-int'),
                ('tunnel_bridge', 'br-tun'),
                ('bridge_mappings', 'public:%s,%s:%s' % (
                    net['BR_EX'], net['TENANT_PHYSNET'], net['BR_TENANT'])),
                ('# VXLAN networks made before VLAN ones were the default '
                 'keep working', None),
                ('local_ip', '127.0.0.1'),
                ('ovsdb_connection', 'tcp:127.0.0.1:6640'),
                ('of_listen_address', '127.0.0.1'),
            ]),
            ('agent', [('tunnel_types', 'vxlan'),
                       ('root_helper', root_helper(settings))]),
            security_groups,
        ),
        'etc/neutron/dhcp_agent.ini': ini(
            ('DEFAULT', [
                ('interface_driver', 'openvswitch'),
                ('# veth pairs, not OVS internal ports: the userspace '
                 'datapath cannot serve', None),
                ('# an internal port moved into another network namespace.',
                 None),
                ('ovs_use_veth', 'true'),
                ('dhcp_driver', 'neutron.agent.linux.dhcp.Dnsmasq'),
                ('# dnsmasq re-reads its hosts file on each new port: as '
                 'root, since the', None),
                ('# state directory is root-only (0700), not as "nobody".',
                 None),
                ('dnsmasq_config_file',
                 os.path.join(lay.etc, 'neutron', 'dnsmasq.conf')),
                ('# metadata through the router (L3 agent), or here on a '
                 'network without one', None),
                ('enable_isolated_metadata', 'true'),
            ]),
            ovs_for_agents,
            agent,
        ),
        'etc/neutron/dnsmasq.conf': 'user=root\n',
        'etc/neutron/l3_agent.ini': ini(
            ('DEFAULT', [('interface_driver', 'openvswitch'),
                         ('ovs_use_veth', 'true'),
                         ('agent_mode', 'legacy')]),
            ovs_for_agents,
            agent,
        ),
        'etc/neutron/metadata_agent.ini': ini(
            ('DEFAULT', [
                ('nova_metadata_host', '127.0.0.1'),
                ('nova_metadata_port', lay.ports['METADATA']),
                ('metadata_proxy_shared_secret',
                 settings.secrets['METADATA_SECRET']),
                ('metadata_proxy_socket',
                 os.path.join(state, 'metadata_proxy')),
                ('metadata_workers', '0'),
            ]),
            agent,
        ),
    }
    if settings.second_host:
        # The second host's L2 agent: its own integration bridge and
        # physical bridges (patched to the first host's by network.py),
        # its own OpenFlow port; the DHCP, L3 and metadata agents stay on
        # the first host.
        files['etc/neutron/openvswitch_agent-2.ini'] = ini(
            ('DEFAULT', [('host', catalogue.SECOND_HOST)]),
            ('ovs', [
                ('datapath_type', 'netdev'),
                ('integration_bridge', net['BR_INT_2']),
                ('bridge_mappings', 'public:%s,%s:%s' % (
                    net['BR_EX_2'], net['TENANT_PHYSNET'],
                    net['BR_TENANT_2'])),
                ('ovsdb_connection', 'tcp:127.0.0.1:6640'),
                ('of_listen_address', '127.0.0.1'),
                ('of_listen_port', '6634'),
            ]),
            ('agent', [('root_helper', root_helper(settings))]),
            security_groups,
        )
    return files


def nova_sections(settings):
    """nova.conf's sections, shared by the API, conductor and compute."""
    lay = settings.layout
    data = os.path.join(lay.data, 'nova')
    compute_conf = os.path.join(lay.etc, 'nova', 'nova-compute.conf')
    privsep = '%s --config-file %s' % (
        os.path.join(lay.venv, 'bin', 'privsep-helper'), compute_conf)
    return [
        ('DEFAULT', [
            ('use_stderr', 'true'),
            ('transport_url', rabbit_url(settings)),
            ('my_ip', '127.0.0.1'),
            ('state_path', data),
            ('instances_path', os.path.join(data, 'instances')),
            ('compute_driver', settings.compute_driver),
            ('heal_instance_info_cache_interval', '-1'),
            ('# One host: resize (to the other CPU flavor) happens on it; '
             'with two,', None),
            ('# on either.', None),
            ('allow_resize_to_same_host', 'true'),
            ('# Heartbeats every 5 s: "up" notices a restarted nova-compute '
             'sooner.', None),
            ('report_interval', '5'),
            ('graceful_shutdown_timeout', '5'),
        ]),
        ('wsgi', [('api_paste_config',
                   os.path.join(lay.etc, 'nova', 'api-paste.ini'))]),
        ('api', [('auth_strategy', 'keystone')]),
        ('api_database', [('connection', db_url(settings, 'nova_api'))]),
        ('database', [('connection', db_url(settings, 'nova'))]),
        ('conductor', [('workers', '1')]),
        ('scheduler', [('workers', '1'),
                       ('discover_hosts_in_cells_interval', '30')]),
        ('filter_scheduler', [
            ('# nova\'s defaults, and the scheduler hints same_host and '
             'different_host', None),
            ('# (up --hosts 2; tempest\'s multi-node tests use them)',
             None),
            ('enabled_filters',
             'ComputeFilter,ComputeCapabilitiesFilter,'
             'ImagePropertiesFilter,ServerGroupAntiAffinityFilter,'
             'ServerGroupAffinityFilter,SameHostFilter,DifferentHostFilter'),
        ]),
        ('oslo_concurrency', [('lock_path', os.path.join(data, 'lock'))]),
        ('oslo_messaging_notifications', [('driver', 'noop')]),
        ('vnc', [('enabled', 'false')]),
        ('spice', [('enabled', 'false')]),
        ('serial_console', [('enabled', 'false')]),
        ('glance', [('region_name', catalogue.REGION),
                    ('valid_interfaces', 'public')]),
        ('cinder', [('os_region_name', catalogue.REGION)]),
        ('service_user', [
            ('send_service_user_token', 'true'),
            ('auth_type', 'password'),
            ('auth_url', keystone_v3(settings)),
            ('project_domain_name', 'Default'),
            ('user_domain_name', 'Default'),
            ('project_name', 'service'),
            ('username', 'nova'),
            ('password', settings.secrets['SERVICE_PASSWORD']),
        ]),
        authtoken(settings, 'nova'),
        service_auth(settings, 'placement', 'nova'),
        service_auth(settings, 'neutron', 'nova',
                     ('service_metadata_proxy', 'true'),
                     ('metadata_proxy_shared_secret',
                      settings.secrets['METADATA_SECRET']),
                     ('default_floating_pool', 'public')),
        # os-vif's privileged helpers, started as root without sudo or
        # rootwrap.
        ('vif_plug_ovs_privileged', [('helper_command', privsep)]),
        ('vif_plug_linux_bridge_privileged', [('helper_command', privsep)]),
        ('os_vif_ovs', [('ovsdb_connection', 'tcp:127.0.0.1:6640')]),
        ('lxd', [
            ('# Named, not discovered: LXD and Incus may both run on this '
             'host.', None),
            ('endpoint', settings.daemon_socket),
            ('storage_pool', 'default'),
            ('project', 'default'),
        ]),
    ]


def nova(settings):
    sections = nova_sections(settings)
    # nova-compute must not see the databases (nova checks it).
    compute = [section for section in sections
               if section[0] not in ('database', 'api_database')]
    if settings.hardware:
        # SIMULATED hardware: nova-compute (only it) talks to the LXD proxy
        # in front of the daemon and runs the recorded nvidia-smi.
        compute = [
            ('lxd', [(key, settings.layout.hw_socket
                      if key == 'endpoint' else value)
                     for key, value in options]) if name == 'lxd'
            else (name, options)
            for name, options in compute]
        compute.append(('lxd_accelerators', [
            ('# SIMULATED hardware: recorded host %s (up --hardware)'
             % settings.hardware, None),
            ('nvidia_smi_path',
             os.path.join(settings.layout.hardware, 'nvidia-smi'))] +
            hardware.options(settings.layout) +
            hardware.mps_options(settings.layout)))
    # "sandbox.sh bench": a second nova-compute on Nova's own fake driver,
    # host FAKE_HOST, beside the real one.
    fake = [(name, [(key, 'fake.FakeDriver' if key == 'compute_driver'
                     else value) for key, value in options] +
             ([('host', catalogue.FAKE_HOST)] if name == 'DEFAULT'
              else []))
            for name, options in compute]
    files = {'etc/nova/nova.conf': ini(*sections),
             'etc/nova/nova-compute.conf': ini(*compute),
             'etc/nova/nova-compute-fake.conf': ini(*fake)}
    if settings.second_host:
        files['etc/nova/nova-compute.conf'] = ini(
            *compute + [migration_section(settings.second_host)])
        files['etc/nova/nova-compute-2.conf'] = ini(*second_compute(
            settings, sections))
    return files


def migration_section(second):
    """[lxd_migration]: either nova-compute sends to the other's daemon."""
    def pairs(mapping):
        return ','.join('%s:%s' % item for item in mapping.items())
    return ('lxd_migration', [
        ('# "server migrate" moves to the other host (tempest expects it)',
         None),
        ('same_host', 'false'),
        ('client_cert', second.client_cert),
        ('client_key', second.client_key),
        ('endpoints', pairs(second.endpoints)),
        ('server_certs', pairs(second.server_certs)),
    ])


def second_compute(settings, sections):
    """nova-compute-2.conf: host SECOND_HOST on the peer daemon.

    Its own state, instances and lock directories; the host's own
    hardware (no simulated one).
    """
    data = os.path.join(settings.layout.data, 'nova-2')
    second = settings.second_host
    own = {'DEFAULT': {'state_path': data,
                       'instances_path': os.path.join(data, 'instances')},
           'oslo_concurrency': {'lock_path': os.path.join(data, 'lock')},
           'lxd': {'endpoint': second.daemon_socket}}
    result = []
    for name, options in sections:
        if name in ('database', 'api_database'):
            continue
        changed = own.get(name, {})
        options = [(key, changed.get(key, value)) for key, value in options]
        if name == 'DEFAULT':
            options.append(('host', catalogue.SECOND_HOST))
        result.append((name, options))
    return result + [migration_section(second)]


def horizon(settings):
    """Horizon's local_settings.py (used with up --with-horizon)."""
    lay = settings.layout
    text = (
        '# Horizon settings of the nova-lxd-accel sandbox (generated by '
        'up).\n'
        'DEBUG = False\n'
        "ALLOWED_HOSTS = ['127.0.0.1', 'localhost']\n"
        'SECRET_KEY = %(key)r\n'
        "OPENSTACK_HOST = '127.0.0.1'\n"
        'OPENSTACK_KEYSTONE_URL = %(keystone)r\n'
        "OPENSTACK_KEYSTONE_DEFAULT_ROLE = 'member'\n"
        '# One process: sessions in its memory cache, as Horizon\'s default '
        'engine\n'
        '# does with a local cache.\n'
        "SESSION_ENGINE = 'django.contrib.sessions.backends.cache'\n"
        "CACHES = {'default': {\n"
        "    'BACKEND': 'django.core.cache.backends.locmem.LocMemCache'}}\n"
        'STATIC_ROOT = %(static)r\n'
        'COMPRESS_OFFLINE = True\n'
        "TIME_ZONE = 'UTC'\n"
        '# No Cinder in the sandbox: boot from the image, never a new '
        'volume.\n'
        "LAUNCH_INSTANCE_DEFAULTS = {'create_volume': False}\n"
        % {'key': settings.secrets['HORIZON_SECRET_KEY'],
           'keystone': keystone_v3(settings),
           'static': os.path.join(lay.horizon_data, 'static')})
    return {'etc/horizon/local_settings.py': text}


def clients(settings):
    """openrc and clouds.yaml: the admin's credentials for the CLI."""
    lay = settings.layout
    password = settings.secrets['ADMIN_PASSWORD']
    openrc = (
        '# Source me: admin credentials of the nova-lxd-accel sandbox.\n'
        'export OS_AUTH_URL=%(auth)s\n'
        'export OS_IDENTITY_API_VERSION=3\n'
        'export OS_USERNAME=admin\n'
        'export OS_PASSWORD=%(password)s\n'
        'export OS_PROJECT_NAME=admin\n'
        'export OS_USER_DOMAIN_NAME=Default\n'
        'export OS_PROJECT_DOMAIN_NAME=Default\n'
        'export OS_REGION_NAME=%(region)s\n'
        'export OS_INTERFACE=public\n'
        '# The newest compute microversion: flavor extra specs are '
        'validated (2.86+).\n'
        'export OS_COMPUTE_API_VERSION=%(microversion)s\n'
        'export PATH=%(venv)s/bin:$PATH\n')
    clouds = (
        'clouds:\n'
        '  sandbox:\n'
        '    auth:\n'
        '      auth_url: %(auth)s\n'
        '      username: admin\n'
        '      password: %(password)s\n'
        '      project_name: admin\n'
        '      user_domain_name: Default\n'
        '      project_domain_name: Default\n'
        '    region_name: %(region)s\n'
        '    interface: public\n'
        '    identity_api_version: 3\n'
        "    compute_api_version: '%(microversion)s'\n")
    values = {'auth': keystone_v3(settings), 'password': password,
              'region': catalogue.REGION,
              'microversion': settings.microversion, 'venv': lay.venv}
    return {'openrc': openrc % values, 'clouds.yaml': clouds % values}


#: every writer, in the order "up" writes them
WRITERS = (rabbitmq, keystone, placement, glance, neutron, nova, horizon,
           clients)

#: directories the services need besides those of their files
DATA_DIRS = ('data/glance/images', 'data/glance/staging', 'data/glance/tasks',
             'data/neutron', 'data/nova/instances', 'data/nova/lock',
             'data/nova-2/instances', 'data/nova-2/lock')


def build(settings):
    """Every file, ``{path relative to the state directory: text}``."""
    files = collections.OrderedDict()
    for writer in WRITERS:
        for path, text in writer(settings).items():
            if path in files:
                raise ValueError('%s writes %s again' % (writer.__name__,
                                                         path))
            files[path] = text
    return files


def _write_private(path, text):
    """Write ``path`` 0600, through a temporary file.

    A running service never reads half a file; no other user ever can.
    """
    tmp = path + '.new'
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, 'w') as handle:
        handle.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def write(settings, files=None):
    """Write every file of :func:`build`: files 0600, directories 0700.

    Nova's api-paste.ini is copied from the venv beside them.

    :returns: the paths written.
    """
    lay = settings.layout
    files = build(settings) if files is None else files
    # nova.wsgi.osapi_compute reads api-paste.ini and nova.conf from
    # OS_NOVA_CONFIG_DIR.
    paste = os.path.join(lay.venv, 'etc', 'nova', 'api-paste.ini')
    if os.path.isfile(paste):
        with open(paste) as handle:
            files['etc/nova/api-paste.ini'] = handle.read()
    written = []
    for relative, text in files.items():
        path = lay.path(relative)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        _write_private(path, text)
        written.append(path)
    for relative in DATA_DIRS:
        os.makedirs(lay.path(relative), mode=0o700, exist_ok=True)
    credentials.lock_down(lay)
    return written


def newest_microversion():
    """The newest compute API microversion of the installed Nova.

    The CLI's default (2.1 or the client's own) skips what came later,
    such as the validation of flavor extra specs (2.86). Read from Nova's
    source, not imported: importing nova starts its monkey patching.
    """
    spec = importlib.util.find_spec('nova')
    if spec is None or not spec.origin:
        raise RuntimeError('nova is not installed in %s' % sys.prefix)
    path = os.path.join(os.path.dirname(spec.origin), 'api', 'openstack',
                        'api_version_request.py')
    with open(path) as handle:
        match = re.search(r'''^_MAX_API_VERSION = ['"](2\.\d+)['"]''',
                          handle.read(), re.M)
    if not match:
        raise RuntimeError('cannot read _MAX_API_VERSION in %s' % path)
    return match.group(1)


def simulated_host(layout):
    """The recorded host's name when ``up --hardware`` made one, or None."""
    return hardware.host_name(layout) if hardware.active(layout) else None


def main(argv):
    parser = argparse.ArgumentParser(
        prog='configs.py', description=__doc__.split('\n\n')[0])
    parser.add_argument('action', choices=['write'])
    parser.add_argument('--daemon-socket', required=True)
    parser.add_argument('--compute-driver', default='lxd_accel.LXDDriver')
    parser.add_argument('--backend', choices=sorted(PEER_ADDRESSES),
                        default='lxd')
    parser.add_argument('--peer-dir', default='',
                        help='up --hosts 2: the peer daemon\'s directory')
    args = parser.parse_args(argv[1:])
    lay = layout_module.Layout.from_environ()
    secrets = credentials.load(lay)
    missing = [name for name in credentials.NAMES if name not in secrets]
    if missing:
        sys.stderr.write('sandbox: %s lacks %s; run "up" (it adds them)\n'
                         % (credentials.secrets_path(lay),
                            ', '.join(missing)))
        return 1
    second = None
    if args.peer_dir:
        import socket
        second = second_host(args.backend, args.daemon_socket,
                             args.peer_dir, socket.gethostname())
    settings = Settings(lay, secrets, args.compute_driver,
                        args.daemon_socket, simulated_host(lay),
                        newest_microversion(), second)
    for path in write(settings):
        print('wrote %s' % path)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
