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

"""The sandbox's commands; ``tools/sandbox.sh`` hands over to this.

``up`` runs its steps in order, each timed on the terminal, each one's
output in ``log/sandbox.log``; a failed step names itself, its log and the
log's last lines, and ``up`` resumes where it failed when re-run. What
the steps know lives in the modules beside this one (README.md, "How it
is built"). Any Python 3, standard library only: it runs before the venv
exists, and runs the venv's Python for what needs OpenStack.
"""

import argparse
import datetime
import os
import shutil
import socket as socket_module
import subprocess
import sys
import time
import traceback

from . import bench
from . import catalogue
from . import credentials
from . import daemon as daemon_module
from . import databases
from . import hardware
from . import horizon
from . import images
from . import install
from . import layout as layout_module
from . import network
from . import processes
from . import services

USAGE = ('usage: %(script)s up [--backend lxd|incus] [--hardware NAME|DIR|'
         'none] [--with-horizon|--without-horizon] [--hosts 1|2]|down|'
         'status|clean|'
         'bench [N]|bench --density N [--wave W] [--idle S]|horizon-test|'
         'image debian [--build-only]|reach on|off')


#: written by every ``up``: what ``clean`` needs before it removes anything
MARKER = 'backend'


class Exit(Exception):
    """Leave with this status (the message, if any, is on stderr)."""

    def __init__(self, status):
        super().__init__(status)
        self.status = status


def _utc(fmt):
    return datetime.datetime.now(datetime.timezone.utc).strftime(fmt)


class Terminal(object):
    """The terminal, kept while a step's output goes to the log."""

    def __init__(self):
        self.out = os.fdopen(os.dup(1), 'w', buffering=1)
        self.err = os.fdopen(os.dup(2), 'w', buffering=1)
        self.t0 = time.monotonic()
        # A step's prints and its children's output share the log: keep
        # them in order.
        if hasattr(sys.stdout, 'reconfigure'):
            sys.stdout.reconfigure(line_buffering=True)

    def elapsed(self, since=None):
        seconds = time.monotonic() - (self.t0 if since is None else since)
        return '%d.%d' % (int(seconds), int(seconds * 10) % 10)

    def say(self, text=''):
        self.out.write(text + '\n')

    def die(self, text, status=1):
        self.err.write('sandbox: %s\n' % text)
        raise Exit(status)


class Sandbox(object):
    """One run of a command: the layout, the daemon, the step runner."""

    def __init__(self, layout, environ, terminal, script, daemon=None):
        self.layout = layout
        self.environ = environ
        self.term = terminal
        self.script = script
        self.daemon = daemon
        self.log_path = layout.path('log', 'sandbox.log')
        self.hint = None            # the log a failing step points at
        self.project_changed = False
        self.ready_s = {}
        self.compute_since = None

    # --- the step runner ---------------------------------------------------

    def step(self, title, function, *args):
        """Run one step, its output (and its children's) in the log file.

        Its duration (and the time since the start) goes to the terminal.
        A step fails by returning False or a non-zero status, or by
        raising.
        """
        self.hint = None
        start = time.monotonic()
        self.term.out.write('  [%6ss] %-46s ' % (self.term.elapsed(), title))
        self.term.out.flush()
        status = 0
        with open(self.log_path, 'a') as log:
            log.write('\n=== %s: %s\n' % (_utc('%Y-%m-%dT%H:%M:%SZ'), title))
            log.flush()
            sys.stdout.flush()
            sys.stderr.flush()
            saved = os.dup(1), os.dup(2)
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            try:
                result = function(*args)
                if result is False:
                    status = 1
                elif isinstance(result, int) and result is not True:
                    status = result
            except subprocess.CalledProcessError as error:
                print('%s failed (exit %d)' % (' '.join(
                    str(word) for word in error.cmd), error.returncode))
                status = error.returncode or 1
            except Exit as error:
                status = error.status or 1
            except Exception:
                traceback.print_exc()
                status = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
                os.close(saved[0])
                os.close(saved[1])
        if status:
            self._failed(title, status)
        self.term.out.write('ok %5ss\n' % self.term.elapsed(start))

    def _failed(self, title, status):
        err = self.term.err
        self.term.out.write('FAILED\n')
        err.write('\nsandbox: step "%s" failed (exit %d) after %ss.\n'
                  % (title, status, self.term.elapsed()))
        shown = self.hint if self.hint and os.path.isfile(self.hint) \
            else self.log_path
        if shown == self.log_path:
            err.write('sandbox: its log: %s (last lines below)\n' % shown)
        else:
            err.write('sandbox: its log: %s (last lines below); see also '
                      '%s\n' % (shown, self.log_path))
        for line in _tail(shown, 20):
            err.write('    | %s\n' % line)
        err.write('sandbox: fix the cause and re-run "%s up" (it resumes), '
                  'or "%s down" to stop what runs.\n'
                  % (self.script, self.script))
        raise Exit(status)

    # --- helpers the steps share -------------------------------------------

    def venv_python(self, *args, **kwargs):
        return subprocess.run(
            [os.path.join(self.layout.venv, 'bin', 'python')] + list(args),
            **kwargs).returncode

    def provision(self, *args):
        """provision.py (the OpenStack APIs) with the sandbox's cloud."""
        env = dict(os.environ, OS_CLIENT_CONFIG_FILE=self.layout.path(
            'clouds.yaml'), OS_CLOUD='sandbox')
        status = self.venv_python('-u', layout_module.VENV_SIDE,
                                  'provision', *args, env=env)
        if status:
            raise Exit(status)

    def service_log(self, name):
        return self.layout.path('log', name + '.log')

    def start_service(self, name):
        """Start NAME with its command (services.py) unless it runs."""
        command = services.command(self.layout, name, services.Context(
            self.daemon.socket))
        self.ready_s[name] = command.ready_s
        argv = list(command.argv)
        if command.env:
            argv = ['env'] + ['%s=%s' % item
                              for item in command.env.items()] + argv
        self.hint = self.service_log(name)
        if not processes.start(self.layout, name, argv):
            self.hint = None
            raise Exit(1)

    def wait_service(self, name):
        """Wait until its ports accept connections; fail if it exited."""
        self.hint = self.service_log(name)
        if not processes.wait_ports(self.layout, name,
                                    self.ready_s.get(name, 120)):
            raise Exit(1)

    def run_service(self, name):
        self.start_service(name)
        self.wait_service(name)

    def is_running(self, name):
        return processes.pid_of(self.layout, name) is not None

    def ensure_commands(self, commands, packages):
        """Install the Debian packages unless every command is on PATH."""
        if all(shutil.which(command) for command in commands):
            return
        if self.environ.get('SANDBOX_APT', '1') != '1':
            self.term.die("install Debian's %s" % ' '.join(packages))
        lock_wait = int(self.environ.get('APT_LOCK_WAIT') or 300)
        os.environ['DEBIAN_FRONTEND'] = 'noninteractive'
        if install.apt_get(['update', '-q'], lock_wait) or install.apt_get(
                ['install', '-y', '-q', '--no-install-recommends']
                + list(packages), lock_wait):
            self.term.die("could not install Debian's %s"
                          % ' '.join(packages))


def _tail(path, count):
    text = layout_module.read_text(path) or ''
    return text.splitlines()[-count:]


# --- the steps of "up" -------------------------------------------------------

def step_pip_install(sandbox):
    status = install.venv_status(sandbox.layout, sandbox.environ)
    if status == install.EXIT_PROJECT_CHANGED:
        sandbox.project_changed = True   # see step_restart_changed
        return 0
    return status


def step_write_configs(sandbox):
    second = []
    if sandbox.layout.hosts() == 2:
        second = ['--backend', sandbox.daemon.backend, '--peer-dir',
                  sandbox.daemon.peer_directory]
    sandbox.venv_python(
        layout_module.VENV_SIDE, 'configs', 'write', '--daemon-socket',
        sandbox.daemon.socket, '--compute-driver',
        sandbox.environ['SANDBOX_COMPUTE_DRIVER'], *second, check=True)
    print('configuration in %s (files 0600, directories 0700)'
          % sandbox.layout.etc)


def step_mariadb(sandbox):
    data = sandbox.layout.path('data', 'mysql')
    if not os.path.isdir(os.path.join(data, 'mysql')):
        os.makedirs(data, exist_ok=True)
        subprocess.run(['mariadb-install-db', '--no-defaults',
                        '--datadir=' + data, '--user=root', '--skip-test-db',
                        '--auth-root-authentication-method=socket'],
                       check=True)
    sandbox.run_service('mariadb')
    return databases.make_grants(sandbox.layout)


def step_rabbitmq(sandbox):
    os.makedirs(sandbox.layout.path('data', 'rabbitmq'), exist_ok=True)
    sandbox.run_service('rabbitmq')


def step_restart_changed(sandbox):
    """Restart what imports a newly installed build of this project.

    That is the driver and the API's extra spec validators.
    """
    if sandbox.project_changed:
        print('nova-lxd-accel was updated: restarting nova-compute and '
              'nova-api')
        processes.stop(sandbox.layout, ['nova-compute', 'nova-api'], 30)


def step_apis(sandbox):
    names = ('placement', 'glance', 'neutron', 'nova-api')
    # Start all four, then wait: their imports overlap on two cores.
    for name in names:
        sandbox.start_service(name)
    for name in names:
        sandbox.wait_service(name)


def step_network_agents(sandbox):
    since = _utc('%Y-%m-%d %H:%M:%S')
    sandbox.start_service('neutron-rpc')
    sandbox.hint = sandbox.service_log('neutron-rpc')
    sandbox.provision('wait-rpc', '120')
    sandbox.start_service('neutron-ovs-agent')
    # The DHCP and the L3 agent, in one process (see in_process.py).
    sandbox.start_service('neutron-dhcp-agent')
    sandbox.start_service('neutron-metadata-agent')
    sandbox.hint = sandbox.service_log('neutron-ovs-agent')
    sandbox.provision('wait-agents', '180', since)


def _accepts(path):
    # the socket file appears at bind time, before the proxy listens
    probe = socket_module.socket(socket_module.AF_UNIX,
                                 socket_module.SOCK_STREAM)
    try:
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def start_hwproxy(sandbox, tries=80):
    socket = sandbox.layout.hw_socket
    if not sandbox.is_running('hwproxy') and os.path.exists(socket):
        os.remove(socket)
    sandbox.start_service('hwproxy')
    for _ in range(tries):
        if _accepts(socket):
            return
        if not sandbox.is_running('hwproxy'):
            break
        time.sleep(0.25)
    print('the LXD proxy did not start: see %s'
          % sandbox.service_log('hwproxy'))
    raise Exit(1)


def step_nova_services(sandbox):
    sandbox.compute_since = _utc('%Y-%m-%dT%H:%M:%S')
    # One process runs the conductor and the scheduler (in_process.py).
    sandbox.start_service('nova-conductor')
    if hardware.active(sandbox.layout):
        start_hwproxy(sandbox)
    if sandbox.is_running('nova-compute'):
        return
    # nova-compute's first call to the conductor is lost (and retried 10 s
    # later) when the conductor does not listen yet.
    sandbox.hint = sandbox.service_log('nova-conductor')
    if not processes.wait_log(sandbox.layout, 'nova-conductor',
                              'Starting conductor node', 120):
        raise Exit(1)
    time.sleep(1)
    sandbox.start_service('nova-compute')


def step_second_host(sandbox):
    """up --hosts 2: the second host's L2 agent and nova-compute."""
    since = _utc('%Y-%m-%d %H:%M:%S')
    sandbox.start_service('neutron-ovs-agent-2')
    sandbox.hint = sandbox.service_log('neutron-ovs-agent-2')
    sandbox.provision('wait-agents', '180', since, catalogue.SECOND_HOST)
    sandbox.start_service('nova-compute-2')


def step_one_host(sandbox):
    """up --hosts 1 after 2: the second host's services stop.

    Its compute service is disabled first (disabling a stopped
    nova-compute waits a minute for its answer): nova would count it up
    for a minute more and could schedule to it. Then, stopped, until
    nova counts it down: before that nova's API still asks it over RPC
    and waits a minute for no answer.
    """
    was_running = sandbox.is_running('nova-compute-2')
    if was_running:
        sandbox.provision('second-host', 'off')
    processes.stop(sandbox.layout, list(processes.SECOND_HOST_SERVICES), 30)
    if was_running:
        sandbox.provision('second-host', 'down', '150')


def step_wait_compute(sandbox):
    hosts = [('nova-compute', '')]
    if sandbox.layout.hosts() == 2:
        hosts.append(('nova-compute-2', catalogue.SECOND_HOST))
    since = sandbox.compute_since or _utc('%Y-%m-%dT%H:%M:%S')
    pids = {}
    for name, host in hosts:
        sandbox.hint = sandbox.service_log(name)
        pids[name] = str(processes.pid_of(sandbox.layout, name) or '')
        sandbox.provision('wait-compute', '180', pids[name], since, 'no',
                          host)
    subprocess.run([os.path.join(sandbox.layout.venv, 'bin', 'nova-manage'),
                    '--config-file', sandbox.layout.path('etc', 'nova',
                                                         'nova.conf'),
                    'cell_v2', 'discover_hosts', '--verbose'], check=True)
    for name, host in hosts:
        sandbox.hint = sandbox.service_log(name)
        sandbox.provision('wait-compute', '60', pids[name], since, 'yes',
                          host)
    if len(hosts) == 2:
        # disabled by an earlier "up --hosts 1"
        sandbox.provision('second-host', 'on')


def step_horizon_off(sandbox):
    horizon.turn_off(sandbox.layout, lambda: processes.stop(
        sandbox.layout, ['horizon'], 30))


def cmd_up(sandbox, hardware_choice, horizon_choice, hosts_choice=0):
    layout, term, net = sandbox.layout, sandbox.term, catalogue.NETWORK
    if os.geteuid() != 0:
        term.die('run as root (it starts daemons and LXD)')
    problem = layout.port_range_problem(layout_module.ephemeral_port_range())
    if problem:
        term.err.write('sandbox: %s\n' % problem)
        raise Exit(1)
    old = os.umask(0o077)
    try:
        for path in (layout.dir, layout.etc, layout.data, layout.logs,
                     layout.run):
            os.makedirs(path, exist_ok=True)
    finally:
        os.umask(old)
    # Passwords, keys, the databases and logs live here: root only. (The
    # sandbox never sits above LXD_DIR, whose parents uid 100000 must
    # traverse.)
    os.chmod(layout.dir, 0o700)
    with open(layout.path(MARKER), 'w') as handle:
        handle.write(sandbox.daemon.backend + '\n')
    if hosts_choice:
        with open(layout.path('hosts'), 'w') as handle:
            handle.write('%d\n' % hosts_choice)
    hosts = layout.hosts()
    open(sandbox.log_path, 'w').close()
    ports = layout.ports
    step = sandbox.step
    term.say('sandbox up: %s (log %s)' % (layout.dir, sandbox.log_path))
    step('Debian packages', install.install_debian, sandbox.daemon.backend,
         sandbox.environ)
    step('Python venv (pip -c constraints.txt)', step_pip_install, sandbox)
    step('secrets and configuration', credentials.ensure_and_say, layout)
    step('hardware nova-compute sees', hardware.prepare_and_say, layout,
         hardware_choice)
    step('configuration files', step_write_configs, sandbox)
    step('stop of services whose configuration changed',
         processes.restart_changed, layout)
    step('daemon: %s' % sandbox.daemon.backend, daemon_module.ready,
         sandbox.daemon, sandbox.environ['SANDBOX_COMPUTE_DRIVER'],
         sandbox.environ)
    if hosts == 2:
        step('peer daemon for %s (%s)' % (catalogue.SECOND_HOST,
                                          sandbox.daemon.peer_directory),
             daemon_module.peer_ready, sandbox.daemon, sandbox.environ)
    step('epmd (127.0.0.1:%d)' % ports['EPMD'], sandbox.run_service, 'epmd')
    step('RabbitMQ (127.0.0.1:%d)' % ports['AMQP'], step_rabbitmq, sandbox)
    step('MariaDB (127.0.0.1:%d)' % ports['MYSQL'], step_mariadb, sandbox)
    step('databases (all services, in parallel)', databases.sync, layout)
    step('Keystone keys and bootstrap', databases.keystone, layout)
    step('Keystone (127.0.0.1:%d)' % ports['KEYSTONE'], sandbox.run_service,
         'keystone')
    step('Keystone users, services, endpoints', sandbox.provision,
         'keystone')
    step('restart of nova-compute, nova-api if updated',
         step_restart_changed, sandbox)
    step('Placement, Glance, Neutron, Nova APIs', step_apis, sandbox)
    step('Open vSwitch, %s, %s, namespace %s' % (
        net['BR_EX'], net['BR_TENANT'], net['OUTSIDE_NS']),
        network.ovs_ready, sandbox.environ, hosts)
    step('Neutron RPC server and agents (OVS, DHCP, L3, metadata)',
         step_network_agents, sandbox)
    step('nova-conductor, nova-scheduler, nova-compute', step_nova_services,
         sandbox)
    if hosts == 2:
        step('second host %s: OVS agent, nova-compute'
             % catalogue.SECOND_HOST, step_second_host, sandbox)
    else:
        step('second host off', step_one_host, sandbox)
    step('compute registered, hosts discovered', step_wait_compute, sandbox)
    step("LXD image '%s' in Glance" % catalogue.IMAGE_NAME,
         images.cached_image, layout, catalogue.IMAGE_NAME,
         images.TINY_BUILD, sandbox.provision)
    step('flavors', images.make_flavors, layout, sandbox.provision,
         sys.stdout)
    step('networks public and private, router, security group',
         sandbox.provision, 'network', net['PUBLIC_CIDR'], net['OUTSIDE_IP'],
         net['PRIVATE_CIDR'], net['FLOATING_FIRST'], net['FLOATING_LAST'])
    step('project and user demo, with a network', sandbox.provision, 'demo')
    if horizon_choice == '0':
        step('Horizon off (--without-horizon)', step_horizon_off, sandbox)
    with_horizon = horizon.enabled(layout, horizon_choice)
    if with_horizon:
        step('Horizon %s venv' % horizon.VERSION, horizon.install, layout,
             sandbox.environ)
        step('Horizon settings and static files', horizon.configure, layout)
        step('Horizon (127.0.0.1:%d)' % ports['HORIZON'], sandbox.run_service,
             'horizon')
    step('metadata definitions in Glance', sandbox.provision, 'metadefs',
         'OS::Compute::LXD')
    term.say()
    term.say('sandbox ready in %ss.' % term.elapsed())
    status = cmd_status(sandbox)
    if status:
        raise Exit(status)
    say = term.say
    say()
    say('Next:')
    say('  . %s' % layout.path('openrc'))
    say('  openstack server create --flavor %s --image %s --wait s1     '
        '# on the network private'
        % (catalogue.PLAIN_FLAVOR, catalogue.IMAGE_NAME))
    say('  openstack floating ip create public   # then: openstack server '
        'add floating ip s1 <address>')
    say('  ip netns exec %s ping <address>   # from "the outside"'
        % net['OUTSIDE_NS'])
    if with_horizon:
        say('  Horizon: http://127.0.0.1:%d/ (user demo, password '
            'DEMO_PASSWORD of %s)' % (ports['HORIZON'],
                                      layout.path('secrets.env')))
    say('  openstack resource provider list')
    say('  %s list' % sandbox.daemon.cli_name)
    say('  %s down' % sandbox.script)
    return 0


# --- the other commands ------------------------------------------------------

def cmd_down(sandbox):
    sys.stdout.flush()
    alive = processes.down(sandbox.layout, out=sandbox.term.out)
    if alive:
        sandbox.term.die("some services still run (%s); see 'status'"
                         % ', '.join(alive))
    sandbox.term.say('sandbox down')
    return 0


def cmd_status(sandbox):
    ok = processes.status(sandbox.layout, sandbox.daemon.backend,
                          sandbox.daemon.socket, out=sandbox.term.out)
    found = credentials.problems(sandbox.layout)
    for line in found:
        sandbox.term.err.write('sandbox: WARNING: %s\n' % line)
    if found:
        sandbox.term.err.write('sandbox: WARNING: "%s up" resets these '
                               'modes\n' % sandbox.script)
    return 0 if ok else 1


def sandbox_image_ids(sandbox):
    """The ids of every image this sandbox's Glance ever had.

    Deleted ones are included (Glance keeps their rows). With MariaDB
    stopped: the ones still in its file store.
    """
    if sandbox.is_running('mariadb'):
        try:
            result = subprocess.run(
                ['mariadb', '--no-defaults', '--user=root',
                 '--socket=' + sandbox.layout.path('run', 'mysqld.sock'),
                 '-N', '-e', 'SELECT id FROM glance.images'],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            if result.returncode == 0:
                return set(result.stdout.split())
        except OSError:
            pass
    try:
        return set(os.listdir(sandbox.layout.path('data', 'glance',
                                                  'images')))
    except OSError:
        return set()


def cmd_clean(sandbox):
    """down, then remove the state, the bridges and the namespaces.

    Only where ``up`` ran: a directory without its mark (``MARKER``) is
    not a sandbox, and the bridges and namespaces would be someone else's.
    """
    layout = sandbox.layout
    if not os.path.isfile(layout.path(MARKER)):
        sandbox.term.die('%s is not a sandbox directory (no %s written by '
                         'up): nothing removed' % (layout.dir, MARKER),
                         status=2)
    # The driver's cache of the sandbox's Glance images (nova-image-<id>
    # aliases in the daemon): their Glance images go away with the state.
    ids = sandbox_image_ids(sandbox)
    # down stops the agents' dnsmasq and haproxy processes too
    cmd_down(sandbox)
    network.remove_plumbing()
    if ids and shutil.which(sandbox.daemon.cli_name):
        daemon_module.remove_image_aliases(sandbox.daemon, ids)
        if os.path.exists(sandbox.daemon.peer().socket):
            daemon_module.remove_image_aliases(sandbox.daemon.peer(), ids)
    for path in (layout.etc, layout.data, layout.logs, layout.run):
        shutil.rmtree(path, ignore_errors=True)
    for name in ('secrets.env', 'openrc', 'clouds.yaml', MARKER,
                 'hosts'):
        if os.path.lexists(layout.path(name)):
            os.remove(layout.path(name))
    sandbox.term.say('removed sandbox state (kept %s)' % layout.venv)
    return 0


def cmd_bench(sandbox, count, density_wave=0, idle=-1):
    if not sandbox.is_running('nova-compute'):
        sandbox.term.die('the sandbox does not run: run up first')
    return bench.run(sandbox.layout, count, sandbox.term.say,
                     density_wave=density_wave, idle=idle)


def cmd_horizon_test(sandbox):
    if not horizon.enabled(sandbox.layout, '') or \
            not sandbox.is_running('horizon'):
        sandbox.term.die('Horizon does not run here: tools/sandbox.sh up '
                         '--with-horizon')
    sandbox.ensure_commands(('chromium', 'chromedriver'),
                            ('chromium', 'chromium-driver'))
    return horizon.browser_test(sandbox.layout,
                                credentials.load(sandbox.layout))


def cmd_image(sandbox, kind, build_only=False):
    """image debian: Debian 12 with cloud-init and openssh-server.

    Built by tools/build-debian-image.sh from the Debian mirror with
    mmdebstrap, once per recipe, cached in data/images/ and uploaded to
    Glance as debian-12, and as debian-12-alt (tempest's second image).
    Needs a running sandbox, but with ``--build-only``, which builds the
    cached tarball only (while something else runs: tools/run-tests.sh).
    """
    if kind != 'debian':
        sandbox.term.die('usage: %s image debian [--build-only]'
                         % sandbox.script)
    if build_only:
        sandbox.ensure_commands(('mmdebstrap',), ('mmdebstrap',))
        images.cached_tarball(sandbox.layout, images.DEBIAN_IMAGE_NAME,
                              images.DEBIAN_BUILD)
        return 0
    if not sandbox.is_running('glance') or \
            not os.path.exists(sandbox.layout.path('openrc')):
        sandbox.term.die('the sandbox does not run: tools/sandbox.sh up')
    sandbox.ensure_commands(('mmdebstrap',), ('mmdebstrap',))
    images.cached_image(sandbox.layout, images.DEBIAN_IMAGE_NAME,
                        images.DEBIAN_BUILD, sandbox.provision,
                        also=(images.DEBIAN_ALT_NAME,))
    sandbox.term.say("image %s (and %s, the same) in Glance: log in as "
                     "'debian' with your key pair"
                     % (images.DEBIAN_IMAGE_NAME, images.DEBIAN_ALT_NAME))
    return 0


def cmd_reach(sandbox, choice):
    """reach on|off: this host on the external network, or not.

    On, a client on this host reaches floating IPs directly (tempest's
    SSH validation runs here); the servers still cannot open connections
    to this host. Needs a running sandbox (its external bridge).
    """
    if choice not in ('on', 'off'):
        sandbox.term.die('usage: %s reach on|off' % sandbox.script)
    if choice == 'on' and not sandbox.is_running('neutron-ovs-agent'):
        sandbox.term.die('the sandbox does not run: tools/sandbox.sh up')
    network.host_reach(choice == 'on')
    return 0


# --- entry -------------------------------------------------------------------

def defaults(environ):
    """The environment every step and helper sees (README.md lists it)."""
    environ.setdefault('SANDBOX_COMPUTE_DRIVER', 'lxd_accel.LXDDriver')
    environ.setdefault('SANDBOX_PYTHON', 'python3')
    environ.setdefault('SANDBOX_CONSTRAINTS', os.path.join(
        layout_module.REPO_DIR, 'constraints.txt'))
    environ.setdefault('SANDBOX_APT', '1')
    environ.setdefault('LXD_DIR', '/var/lib/lxd')
    environ.setdefault('INCUS_DIR', '/var/lib/incus')
    environ.setdefault('SANDBOX_DIR', layout_module.DEFAULT_DIR)
    environ.setdefault('SANDBOX_PORT_BASE',
                       str(layout_module.DEFAULT_PORT_BASE))
    return environ


def parse(argv, script):
    usage = USAGE % {'script': script}
    parser = argparse.ArgumentParser(prog=script, usage=usage,
                                     add_help=False)
    parser.add_argument('command', nargs='?', default='')
    parser.add_argument('args', nargs='*')
    parser.add_argument('--backend')
    parser.add_argument('--hardware', default='')
    parser.add_argument('--with-horizon', dest='horizon', action='store_const',
                        const='1', default='')
    parser.add_argument('--without-horizon', dest='horizon',
                        action='store_const', const='0')
    parser.add_argument('--hosts', type=int, default=0, choices=(1, 2))
    # bench only
    parser.add_argument('--density', type=int, default=0)
    parser.add_argument('--wave', type=int, default=0)
    parser.add_argument('--idle', type=int, default=-1)
    # image only
    parser.add_argument('--build-only', action='store_true')
    try:
        args, unknown = parser.parse_known_args(argv)
    except SystemExit:
        return None
    up_only = (args.backend, args.hardware, args.horizon, args.hosts)
    if unknown or (args.command != 'up' and any(up_only)):
        return None
    if args.command != 'bench' and (args.density or args.wave or
                                    args.idle != -1):
        return None
    if args.command == 'bench' and (
            args.density < 0 or args.wave < 0 or args.idle < -1 or
            ((args.wave or args.idle != -1) and not args.density) or
            (args.density and args.args)):
        return None
    if args.command == 'up' and args.args:
        return None
    if args.build_only and args.command != 'image':
        return None
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    environ = defaults(os.environ)
    script = environ.get('SANDBOX_SCRIPT') or 'tools/sandbox.sh'
    term = Terminal()
    args = parse(argv, script)
    if args is None:
        term.say(USAGE % {'script': script})
        return 2
    try:
        layout = layout_module.Layout.from_environ()
    except ValueError as error:
        term.err.write('sandbox: %s\n' % error)
        return 2
    if hardware.check(args.hardware):
        return 2
    try:
        daemon = daemon_module.choose_backend(
            args.backend or environ.get('SANDBOX_BACKEND', ''), layout,
            environ)
        sandbox = Sandbox(layout, environ, term, script, daemon)
        command = args.command
        if command == 'up':
            return cmd_up(sandbox, args.hardware, args.horizon, args.hosts)
        if command in ('down', 'status', 'clean', 'horizon-test') and \
                not args.args:
            return {'down': cmd_down, 'status': cmd_status,
                    'clean': cmd_clean,
                    'horizon-test': cmd_horizon_test}[command](sandbox)
        if command == 'bench' and args.density:
            return cmd_bench(sandbox, args.density,
                             density_wave=args.wave or 25, idle=args.idle)
        if command == 'bench' and len(args.args) <= 1:
            try:
                count = int(args.args[0]) if args.args else 5
            except ValueError:
                count = 0
            if count < 1:
                term.say(USAGE % {'script': script})
                return 2
            return cmd_bench(sandbox, count)
        if command == 'reach' and len(args.args) == 1:
            return cmd_reach(sandbox, args.args[0])
        if command == 'image' and len(args.args) <= 1:
            return cmd_image(sandbox, args.args[0] if args.args else '',
                             build_only=args.build_only)
        term.say(USAGE % {'script': script})
        return 2
    except ValueError as error:
        term.err.write('sandbox: %s\n' % error)
        return 1
    except subprocess.CalledProcessError as error:
        term.err.write('sandbox: %s failed (exit %d)\n' % (
            ' '.join(str(word) for word in error.cmd), error.returncode))
        return error.returncode or 1
    except Exit as error:
        return error.status


if __name__ == '__main__':
    sys.exit(main())
