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

"""``sandbox.sh bench N``: this driver against Nova's fake driver.

A second nova-compute, on Nova's own fake driver and host
``catalogue.FAKE_HOST`` (its configuration: configs.py), runs for the bench
only; ``benchmarks/bench_sandbox_fleet.py`` boots N servers on each host
and N raw launches, in one run. Afterwards the fake compute stops and its
service record goes, so no host stays "down" in the cloud.
Any Python 3, standard library only.
"""

import os
import shlex
import subprocess
import time

from . import catalogue
from . import images
from . import layout as layout_module
from . import processes

FAKE_IMAGE = catalogue.IMAGE_NAME + '-any-hypervisor'
FLEET = os.path.join(layout_module.REPO_DIR, 'benchmarks',
                     'bench_sandbox_fleet.py')
DENSITY = os.path.join(layout_module.REPO_DIR, 'benchmarks',
                       'bench_sandbox_density.py')


def openstack_env(layout):
    """The admin credentials of openrc, and the venv's commands first."""
    env = dict(os.environ)
    for line in (layout_module.read_text(layout.path('openrc')) or '') \
            .splitlines():
        if line.startswith('export OS_'):
            name, _, value = line[len('export '):].partition('=')
            env[name] = ' '.join(shlex.split(value))
    env['PATH'] = os.path.join(layout.venv, 'bin') + ':' + env.get(
        'PATH', '/usr/bin:/bin')
    return env


def _openstack(env, *args):
    return subprocess.run(['openstack'] + list(args), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          text=True)


def start_fake_compute(layout, env, log, timeout=120):
    """Start it and wait until Nova lists its hypervisor."""
    if not processes.start(layout, 'nova-compute-fake', [
            os.path.join(layout.venv, 'bin', 'nova-compute'),
            '--config-file',
            os.path.join(layout.etc, 'nova', 'nova-compute-fake.conf')],
            out=log):
        return False
    manage = [os.path.join(layout.venv, 'bin', 'nova-manage'),
              '--config-file', os.path.join(layout.etc, 'nova', 'nova.conf'),
              'cell_v2', 'discover_hosts']
    for _ in range(timeout):
        subprocess.run(manage, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, env=env)
        listed = _openstack(env, 'hypervisor', 'list', '-f', 'value', '-c',
                            'Hypervisor Hostname').stdout.split()
        if catalogue.FAKE_HOST in listed:
            return True
        time.sleep(1)
    return False


def stop_fake_compute(layout, env, log):
    processes.stop(layout, ['nova-compute-fake'], 30, out=log)
    for name in ('nova-compute-fake.pid', 'nova-compute-fake.conf-sum'):
        path = os.path.join(layout.run, name)
        if os.path.exists(path):
            os.remove(path)
    ids = _openstack(env, 'compute', 'service', 'list', '--host',
                     catalogue.FAKE_HOST, '--service', 'nova-compute',
                     '-f', 'value', '-c', 'ID').stdout.split()
    for service_id in ids:
        _openstack(env, 'compute', 'service', 'delete', service_id)


def run(layout, count, say, density_wave=0, idle=-1):
    """The whole bench; its exit status.

    :param density_wave: 0 for the fleet bench (``bench N``); else the
        density bench (``bench --density N --wave W``) in waves of that
        size.
    :param idle: the density bench's seconds of idle at each checkpoint
        (-1: the bench's own default)
    """
    env = openstack_env(layout)
    hosts = _openstack(env, 'compute', 'service', 'list', '--service',
                       'nova-compute', '-f', 'value', '-c', 'Host', '-c',
                       'Status', '-c', 'State')
    # enabled and up: not the second host of an earlier "up --hosts 2"
    lxd_hosts = [words[0] for words in (line.split() for line in
                                        hosts.stdout.splitlines())
                 if words[1:] == ['enabled', 'up'] and
                 words[0] != catalogue.FAKE_HOST]
    if not lxd_hosts:
        say('sandbox: no nova-compute of this driver is listed')
        return 1
    # the first host's (up --hosts 2 adds SECOND_HOST)
    first = ([host for host in lxd_hosts if host != catalogue.SECOND_HOST] or
             lxd_hosts)[0]
    tarball = images.tarball(layout, catalogue.IMAGE_NAME)
    # The fake driver's hosts are not "lxc" hosts: the same tarball as an
    # image without hypervisor_type, for them.
    if _openstack(env, 'image', 'show', FAKE_IMAGE).returncode:
        subprocess.run(['openstack', 'image', 'create', '--disk-format',
                        'raw', '--container-format', 'bare', '--file',
                        tarball, FAKE_IMAGE], env=env, check=True,
                       stdout=subprocess.DEVNULL)
    log_path = os.path.join(layout.logs, 'sandbox.log.bench')
    with open(log_path, 'w') as log:
        say("starting nova-compute with nova's fake driver (host %s)"
            % catalogue.FAKE_HOST)
        try:
            if not start_fake_compute(layout, env, log):
                say("sandbox: the fake driver's nova-compute did not "
                    "register: see %s"
                    % os.path.join(layout.logs, 'nova-compute-fake.log'))
                return 1
            fleet_env = dict(env, OS_CLIENT_CONFIG_FILE=layout.path(
                'clouds.yaml'))
            if density_wave:
                spread = []
                if catalogue.SECOND_HOST in lxd_hosts:
                    spread = ['--spread-host', catalogue.SECOND_HOST]
                say('density: %d servers on %s (this driver), then on %s '
                    '(fake driver)%s, in waves of %d'
                    % (count, first, catalogue.FAKE_HOST,
                       ', then spread over %s and %s' % (
                           first, catalogue.SECOND_HOST) if spread else '',
                       density_wave))
                return subprocess.run(
                    [os.path.join(layout.venv, 'bin', 'python'), DENSITY,
                     '--count', str(count), '--wave', str(density_wave),
                     '--lxd-host', first] + spread + [
                     '--fake-host', catalogue.FAKE_HOST,
                     '--image', catalogue.IMAGE_NAME,
                     '--fake-image', FAKE_IMAGE,
                     '--flavor', catalogue.PLAIN_FLAVOR] +
                    (['--idle', str(idle)] if idle >= 0 else []),
                    env=fleet_env).returncode
            say('benchmark: %d servers on %s (this driver) and on %s (fake '
                'driver), and %d raw LXD launches'
                % (count, first, catalogue.FAKE_HOST, count))
            return subprocess.run(
                [os.path.join(layout.venv, 'bin', 'python'), FLEET,
                 '--count', str(count), '--lxd-host', first,
                 '--fake-host', catalogue.FAKE_HOST,
                 '--image', catalogue.IMAGE_NAME,
                 '--fake-image', FAKE_IMAGE,
                 '--flavor', catalogue.PLAIN_FLAVOR,
                 '--tarball', tarball], env=fleet_env).returncode
        finally:
            stop_fake_compute(layout, env, log)
