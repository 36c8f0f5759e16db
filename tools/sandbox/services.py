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

"""The sandbox's services: each one defined once, here.

One entry of ``SERVICES`` per service, in start order ("down" goes in
reverse): its ports (names of layout.PORT_OFFSETS), the files it reads at
start (relative to the state directory, or absolute; a change restarts
it, see processes.py), whether ``up`` may leave it out (hwproxy without
simulated hardware, horizon when off), how it is started and, for an API,
its Keystone catalog entry (provision.py registers it). cli.py starts a
service's command (processes.py) in its own session, with its pid file and
log, and waits for its ports for at most ``Command.ready_s`` seconds.

Usage: python3 -m tools.sandbox.services command NAME --daemon-socket PATH

``command`` prints the seconds the service's ports may take to open, then
``[env NAME=VALUE...] ARGV...``, NUL-separated (a shell reads them with
mapfile -d ''). Any Python 3, standard library only.
"""

import argparse
import collections
import os
import sys

from . import hardware
from . import layout as layout_module

#: the modules the sandbox venv's Python runs (see venv/__main__.py)
WSGI_SERVER = os.path.join(layout_module.VENV_SIDE, 'wsgi_server.py')
IN_PROCESS = os.path.join(layout_module.VENV_SIDE, 'in_process.py')
LXD_PROXY = os.path.join(layout_module.VENV_SIDE, 'lxd_proxy.py')

#: env: variables added to the service's environment; argv: its command;
#: ready_s: how long its ports may take to open (0: no port to wait for)
Command = collections.namedtuple('Command', 'env argv ready_s')

#: what a service needs to know beyond the layout
Context = collections.namedtuple('Context', 'daemon_socket')

#: an API's entry in Keystone's catalog: its name there (and its service
#: user's), type, description, and the path after its first port
Endpoint = collections.namedtuple('Endpoint', 'name type description path')

#: one service: see the module's doc; ``start(layout, context) -> Command``
Service = collections.namedtuple(
    'Service', 'name ports files optional start endpoint')


def _venv(layout, *parts):
    return os.path.join(layout.venv, *parts)


def _venv_side(layout, module, python=None):
    """The argv that runs a module of venv/ with the venv's Python."""
    return [python or _venv(layout, 'bin', 'python'),
            layout_module.VENV_SIDE, module]


def _conf(layout, name):
    """--config-file for each configuration file of the service's entry."""
    args = []
    for path in files(layout, name):
        if path.startswith(layout.etc + os.sep):
            args += ['--config-file', path]
    return args


def _in_process(layout, command):
    # oslo.service would fork a worker even for workers=1, or two
    # commands share a process: see venv/in_process.py.
    return _venv_side(layout, IN_PROCESS) + [command]


def _wsgi(layout, name, app, *extra, python=None):
    port = ports(layout, name)[0]
    return _venv_side(layout, WSGI_SERVER, python) + [
        '--name', name, '--port', str(port), '--app', app] + list(extra)


def epmd(layout, context):
    return Command({}, ['epmd', '-address', '127.0.0.1', '-port',
                        str(layout.ports['EPMD'])], 20)


def rabbitmq(layout, context):
    erl_args = '-kernel inet_dist_use_interface {127,0,0,1}'
    etc = layout.path('etc', 'rabbitmq')
    return Command(collections.OrderedDict([
        ('HOME', layout.path('data', 'rabbitmq')),
        ('RABBITMQ_NODENAME', 'rabbit@localhost'),
        ('RABBITMQ_NODE_IP_ADDRESS', '127.0.0.1'),
        ('RABBITMQ_NODE_PORT', str(layout.ports['AMQP'])),
        ('RABBITMQ_DIST_PORT', str(layout.ports['DIST'])),
        ('ERL_EPMD_ADDRESS', '127.0.0.1'),
        ('ERL_EPMD_PORT', str(layout.ports['EPMD'])),
        ('RABBITMQ_CONFIG_FILE', os.path.join(etc, 'rabbitmq.conf')),
        ('RABBITMQ_ENABLED_PLUGINS_FILE', os.path.join(etc,
                                                       'enabled_plugins')),
        ('RABBITMQ_MNESIA_BASE', layout.path('data', 'rabbitmq', 'mnesia')),
        ('RABBITMQ_LOG_BASE', layout.logs),
        ('RABBITMQ_LOGS', '-'),
        ('RABBITMQ_PID_FILE', layout.path('run', 'rabbitmq-beam.pid')),
        ('RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS', erl_args),
        ('RABBITMQ_CTL_ERL_ARGS', erl_args),
    ]), ['/usr/lib/rabbitmq/bin/rabbitmq-server'], 90)


def mariadb(layout, context):
    # Durability traded for speed: this is a throw-away sandbox. A 32 MiB
    # buffer pool: the databases hold about 50 MiB on disk.
    return Command({}, [
        'mariadbd', '--no-defaults', '--user=root',
        '--datadir=%s' % layout.path('data', 'mysql'),
        '--socket=%s' % layout.path('run', 'mysqld.sock'),
        '--pid-file=%s' % layout.path('run', 'mysqld-own.pid'),
        '--bind-address=127.0.0.1',
        '--port=%d' % layout.ports['MYSQL'], '--skip-name-resolve',
        '--skip-log-bin', '--max-connections=1000',
        '--innodb-buffer-pool-size=32M',
        '--innodb-flush-log-at-trx-commit=0', '--innodb-doublewrite=0',
        '--sync-binlog=0', '--character-set-server=utf8mb4',
        '--collation-server=utf8mb4_general_ci'], 60)


def keystone(layout, context):
    return Command({'OS_KEYSTONE_CONFIG_DIR': layout.path('etc', 'keystone')},
                   _wsgi(layout, 'keystone', 'keystone.wsgi.api'), 120)


def placement(layout, context):
    return Command(
        {'OS_PLACEMENT_CONFIG_DIR': layout.path('etc', 'placement')},
        _wsgi(layout, 'placement', 'placement.wsgi.api'), 180)


def glance(layout, context):
    return Command({'OS_GLANCE_CONFIG_DIR': layout.path('etc', 'glance')},
                   _wsgi(layout, 'glance', 'glance.wsgi.api'), 180)


def neutron(layout, context):
    return Command({'OS_NEUTRON_CONFIG_DIR': layout.path('etc', 'neutron')},
                   _wsgi(layout, 'neutron', 'neutron.wsgi.api',
                         '--configure-mappers'), 180)


def neutron_rpc(layout, context):
    return Command({}, _in_process(layout, 'neutron-rpc-server') +
                   _conf(layout, 'neutron-rpc'), 0)


def neutron_ovs_agent(layout, context):
    # in_process.py ends its process when the agent ends
    return Command({}, _in_process(layout, 'neutron-openvswitch-agent') +
                   _conf(layout, 'neutron-ovs-agent'), 0)


def neutron_ovs_agent_2(layout, context):
    # up --hosts 2: the second host's L2 agent
    return Command({}, _in_process(layout, 'neutron-openvswitch-agent') +
                   _conf(layout, 'neutron-ovs-agent-2'), 0)


def neutron_dhcp_agent(layout, context):
    # The DHCP and the L3 agent, in one process.
    return Command({}, _in_process(layout, 'neutron-dhcp+l3-agent') +
                   _conf(layout, 'neutron-dhcp-agent'), 0)


def neutron_metadata_agent(layout, context):
    return Command({}, [_venv(layout, 'bin', 'neutron-metadata-agent')] +
                   _conf(layout, 'neutron-metadata-agent'), 0)


def nova_api(layout, context):
    # One process serves the metadata API too (reached from servers
    # through Neutron's metadata agent, shared secret, on 169.254.169.254).
    return Command({'OS_NOVA_CONFIG_DIR': layout.path('etc', 'nova')},
                   _wsgi(layout, 'nova-api', 'nova.wsgi.osapi_compute',
                         '--also', '%d=nova.wsgi.metadata'
                         % layout.ports['METADATA']), 180)


def nova_conductor(layout, context):
    # One process runs the conductor and the scheduler.
    return Command({}, _in_process(layout, 'nova-conductor+scheduler') +
                   _conf(layout, 'nova-conductor'), 0)


def hwproxy(layout, context):
    # The project's LXD proxy (venv/lxd_proxy.py): /1.0/resources answers
    # with the recorded host; gpu and infiniband devices are kept out of
    # the real daemon (it has no such hardware) and shown back to Nova.
    banner = ("SIMULATED hardware '%s' (%s) served at %s in front of %s; "
              "containers run without these devices"
              % (hardware.host_name(layout),
                 hardware.summary(layout.hardware), layout.hw_socket,
                 context.daemon_socket))
    return Command({}, _venv_side(layout, LXD_PROXY) + [
        '--socket', layout.hw_socket, '--upstream', context.daemon_socket,
        '--resources', os.path.join(layout.hardware, 'resources.json'),
        '--state', layout.hw_devices, '--all-projects', '--banner', banner],
        0)


def nova_compute(layout, context):
    return Command({}, [_venv(layout, 'bin', 'nova-compute')] +
                   _conf(layout, 'nova-compute'), 0)


def nova_compute_2(layout, context):
    # up --hosts 2: host SECOND_HOST, on the peer daemon
    return Command({}, [_venv(layout, 'bin', 'nova-compute')] +
                   _conf(layout, 'nova-compute-2'), 0)


def horizon(layout, context):
    return Command(
        {'DJANGO_SETTINGS_MODULE': 'openstack_dashboard.settings'},
        _wsgi(layout, 'horizon', 'openstack_dashboard.wsgi:application',
              '--static', '/static/=%s' % os.path.join(layout.horizon_data,
                                                       'static'),
              '--threads', '8',
              python=os.path.join(layout.horizon_venv, 'bin', 'python')),
        120)


_NEUTRON = 'etc/neutron/neutron.conf'
_ML2 = 'etc/neutron/plugins/ml2/ml2_conf.ini'

SERVICES = (
    Service('epmd', ('EPMD',), (), False, epmd, None),
    Service('rabbitmq', ('AMQP',), ('etc/rabbitmq/rabbitmq.conf',), False,
            rabbitmq, None),
    Service('mariadb', ('MYSQL',), (), False, mariadb, None),
    Service('keystone', ('KEYSTONE',),
            ('etc/keystone/keystone.conf', WSGI_SERVER), False, keystone,
            None),
    Service('placement', ('PLACEMENT',),
            ('etc/placement/placement.conf', WSGI_SERVER), False, placement,
            Endpoint('placement', 'placement', 'Placement API', '')),
    Service('glance', ('GLANCE',),
            ('etc/glance/glance-api.conf', WSGI_SERVER), False, glance,
            Endpoint('glance', 'image', 'Image service', '')),
    Service('neutron', ('NEUTRON',), (_NEUTRON, _ML2, WSGI_SERVER), False,
            neutron, Endpoint('neutron', 'network', 'Networking', '')),
    Service('neutron-rpc', (), (_NEUTRON, _ML2, IN_PROCESS), False,
            neutron_rpc, None),
    Service('neutron-ovs-agent', (),
            (_NEUTRON, 'etc/neutron/openvswitch_agent.ini', IN_PROCESS),
            False, neutron_ovs_agent, None),
    # up --hosts 2 only
    Service('neutron-ovs-agent-2', (),
            (_NEUTRON, 'etc/neutron/openvswitch_agent-2.ini', IN_PROCESS),
            True, neutron_ovs_agent_2, None),
    # runs the L3 agent too (venv/in_process.py)
    Service('neutron-dhcp-agent', (),
            (_NEUTRON, 'etc/neutron/dhcp_agent.ini',
             'etc/neutron/l3_agent.ini', IN_PROCESS), False,
            neutron_dhcp_agent, None),
    Service('neutron-metadata-agent', (),
            (_NEUTRON, 'etc/neutron/metadata_agent.ini'), False,
            neutron_metadata_agent, None),
    # serves the metadata API too
    Service('nova-api', ('NOVA', 'METADATA'),
            ('etc/nova/nova.conf', 'etc/nova/api-paste.ini', WSGI_SERVER),
            False, nova_api, Endpoint('nova', 'compute', 'Compute', '/v2.1')),
    # runs the scheduler too (venv/in_process.py)
    Service('nova-conductor', (), ('etc/nova/nova.conf', IN_PROCESS), False,
            nova_conductor, None),
    Service('hwproxy', (), ('data/hardware/resources.json', LXD_PROXY),
            True, hwproxy, None),
    # data/hardware/name: another recorded host behind the same paths
    Service('nova-compute', (),
            ('etc/nova/nova-compute.conf', 'data/hardware/name'), False,
            nova_compute, None),
    # up --hosts 2 only
    Service('nova-compute-2', (), ('etc/nova/nova-compute-2.conf',), True,
            nova_compute_2, None),
    Service('horizon', ('HORIZON',),
            ('etc/horizon/local_settings.py', 'data/horizon/static.stamp',
             WSGI_SERVER), True, horizon, None),
)

# Services that ran as processes of their own before: nova-api's process
# now serves the metadata API, nova-conductor's runs the scheduler and
# neutron-dhcp-agent's the L3 agent. 'up' and 'down' stop a sandbox's old
# processes of these.
RETIRED_SERVICES = ('nova-metadata', 'nova-scheduler', 'neutron-l3-agent')

#: service name -> its entry
BY_NAME = collections.OrderedDict(
    (service.name, service) for service in SERVICES)

#: service name -> its command's function
COMMANDS = collections.OrderedDict(
    (service.name, service.start) for service in SERVICES)

#: the APIs in Keystone's catalog, and their service users
ENDPOINTS = tuple((service.endpoint, service.ports[0])
                  for service in SERVICES if service.endpoint)


def ports(layout, name):
    """The ports a service listens on (none for agents, unknowns)."""
    service = BY_NAME.get(name)
    return [layout.ports[port] for port in service.ports] if service else []


def files(layout, name):
    """The absolute paths of the files a service reads at start."""
    service = BY_NAME.get(name)
    return [path if os.path.isabs(path) else layout.path(path)
            for path in service.files] if service else []


def command(layout, name, context):
    try:
        function = COMMANDS[name]
    except KeyError:
        raise ValueError('no service %r; the services: %s'
                         % (name, ', '.join(COMMANDS)))
    return function(layout, context)


def main(argv):
    parser = argparse.ArgumentParser(prog='python3 -m tools.sandbox.services')
    sub = parser.add_subparsers(dest='action', required=True)
    cmd = sub.add_parser('command', help='the argv that starts a service')
    cmd.add_argument('name')
    cmd.add_argument('--daemon-socket', required=True)
    args = parser.parse_args(argv[1:])
    layout = layout_module.Layout.from_environ()
    try:
        result = command(layout, args.name, Context(args.daemon_socket))
    except ValueError as error:
        sys.stderr.write('sandbox: %s\n' % error)
        return 2
    words = [str(result.ready_s)]
    if result.env:
        words += ['env'] + ['%s=%s' % item for item in result.env.items()]
    sys.stdout.write(''.join(word + '\0' for word in words + result.argv))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
