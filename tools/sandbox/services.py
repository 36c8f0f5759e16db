#!/usr/bin/env python3
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

"""How each of the sandbox's services is started.

One function per service, of the same signature: ``(layout, context) ->
Command`` (the environment it adds and its argv). cli.py starts the
command (processes.py) in its own session, with its pid file and log, and
waits for the service's ports (layout.py) for at most ``Command.ready_s``
seconds.

Usage: services.py command NAME --daemon-socket PATH

``command`` prints the seconds the service's ports may take to open, then
``[env NAME=VALUE...] ARGV...``, NUL-separated (a shell reads them with
mapfile -d ''). Any Python 3, standard library only.
"""

import argparse
import collections
import os
import sys

import hardware
import layout as layout_module

HERE = os.path.dirname(os.path.abspath(__file__))

#: env: variables added to the service's environment; argv: its command;
#: ready_s: how long its ports may take to open (0: no port to wait for)
Command = collections.namedtuple('Command', 'env argv ready_s')

#: what a service needs to know beyond the layout
Context = collections.namedtuple('Context', 'daemon_socket')


def _venv(layout, *parts):
    return os.path.join(layout.venv, *parts)


def _conf(layout, *relative):
    args = []
    for path in relative:
        args += ['--config-file', layout.path('etc', path)]
    return args


def _in_process(layout, command):
    # oslo.service would fork a worker even for workers=1, or two
    # commands share a process: see in_process.py.
    return [_venv(layout, 'bin', 'python'),
            os.path.join(HERE, 'in_process.py'), command]


def _wsgi(layout, name, app, *extra, python=None):
    port = layout.service_ports(name)[0]
    return [python or _venv(layout, 'bin', 'python'),
            os.path.join(HERE, 'wsgi_server.py'), '--name', name,
            '--port', str(port), '--app', app] + list(extra)


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
    return Command({}, _in_process(layout, 'neutron-rpc-server') + _conf(
        layout, 'neutron/neutron.conf', 'neutron/plugins/ml2/ml2_conf.ini'),
        0)


def neutron_ovs_agent(layout, context):
    # in_process.py ends its process when the agent ends
    return Command({}, _in_process(layout, 'neutron-openvswitch-agent') +
                   _conf(layout, 'neutron/neutron.conf',
                         'neutron/openvswitch_agent.ini'), 0)


def neutron_dhcp_agent(layout, context):
    # The DHCP and the L3 agent, in one process.
    return Command({}, _in_process(layout, 'neutron-dhcp+l3-agent') + _conf(
        layout, 'neutron/neutron.conf', 'neutron/dhcp_agent.ini',
        'neutron/l3_agent.ini'), 0)


def neutron_metadata_agent(layout, context):
    return Command({}, [_venv(layout, 'bin', 'neutron-metadata-agent')] +
                   _conf(layout, 'neutron/neutron.conf',
                         'neutron/metadata_agent.ini'), 0)


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
                   _conf(layout, 'nova/nova.conf'), 0)


def hwproxy(layout, context):
    # The project's LXD proxy (tests/lxd_proxy.py): /1.0/resources answers
    # with the recorded host; gpu and infiniband devices are kept out of
    # the real daemon (it has no such hardware) and shown back to Nova.
    banner = ("SIMULATED hardware '%s' (%s) served at %s in front of %s; "
              "containers run without these devices"
              % (hardware.host_name(layout),
                 hardware.summary(layout.hardware), layout.hw_socket,
                 context.daemon_socket))
    return Command({'PYTHONPATH': layout_module.REPO_DIR}, [
        _venv(layout, 'bin', 'python'), '-m', 'tests.lxd_proxy',
        '--socket', layout.hw_socket, '--upstream', context.daemon_socket,
        '--resources', os.path.join(layout.hardware, 'resources.json'),
        '--state', layout.hw_devices, '--all-projects', '--banner', banner],
        0)


def nova_compute(layout, context):
    return Command({}, [_venv(layout, 'bin', 'nova-compute')] +
                   _conf(layout, 'nova/nova-compute.conf'), 0)


def horizon(layout, context):
    return Command(
        {'DJANGO_SETTINGS_MODULE': 'openstack_dashboard.settings'},
        _wsgi(layout, 'horizon', 'openstack_dashboard.wsgi:application',
              '--static', '/static/=%s' % os.path.join(layout.horizon_data,
                                                       'static'),
              '--threads', '8',
              python=os.path.join(layout.horizon_venv, 'bin', 'python')),
        120)


#: service name -> its command's function
COMMANDS = collections.OrderedDict(
    (name, globals()[name.replace('-', '_')])
    for name in (service.name for service in layout_module.SERVICES))


def command(layout, name, context):
    try:
        function = COMMANDS[name]
    except KeyError:
        raise ValueError('no service %r; the services: %s'
                         % (name, ', '.join(COMMANDS)))
    return function(layout, context)


def main(argv):
    parser = argparse.ArgumentParser(prog='services.py')
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
