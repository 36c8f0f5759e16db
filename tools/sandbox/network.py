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

"""The host side of the sandbox's networking.

Open vSwitch with the userspace datapath (``tools/ovs-up.sh``: no systemd,
no kernel module), the external bridge, and "the outside" of the external
network: a network namespace of this sandbox wired into the bridge by a
veth pair, holding the external subnet's gateway address. Nothing routes
further. :func:`remove_plumbing` takes all of it away again (``clean``).
Any Python 3, standard library only.
"""

import os
import re
import shutil
import subprocess

from . import catalogue
from . import layout as layout_module

#: the namespaces Neutron's agents make, and the sandbox's own
_AGENT_NAMESPACE = re.compile(r'^(qrouter|qdhcp|snat|fip)-')


def _run(argv, **kwargs):
    kwargs.setdefault('check', True)
    return subprocess.run(argv, **kwargs)


def _quiet(argv):
    return subprocess.run(argv, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def namespaces():
    try:
        out = subprocess.run(['ip', 'netns', 'list'], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True).stdout
    except OSError:
        return []
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def ovs_ready(environ):
    """Open vSwitch running, the external bridge, the outside namespace."""
    net = catalogue.NETWORK
    env = dict(environ, OVS_INSTALL=environ.get('SANDBOX_APT', '1'))
    _run(['bash', os.path.join(layout_module.REPO_DIR, 'tools',
                               'ovs-up.sh')], cwd='/', env=env)
    bridge, space, veth = net['BR_EX'], net['OUTSIDE_NS'], net['OUTSIDE_VETH']
    _run(['ovs-vsctl', '--may-exist', 'add-br', bridge, '--', 'set',
          'bridge', bridge, 'datapath_type=netdev'])
    if space not in namespaces():
        _run(['ip', 'netns', 'add', space])
    if not _quiet(['ip', 'link', 'show', veth]):
        _run(['ip', 'link', 'add', veth, 'type', 'veth', 'peer', 'name',
              'eth0', 'netns', space])
    _run(['ip', 'link', 'set', veth, 'up'])
    _run(['ovs-vsctl', '--may-exist', 'add-port', bridge, veth])
    inside = ['ip', 'netns', 'exec', space]
    _run(inside + ['ip', 'link', 'set', 'lo', 'up'])
    _run(inside + ['ip', 'link', 'set', 'eth0', 'up'])
    _run(inside + ['ip', 'addr', 'replace', net['OUTSIDE_IP'] + '/24',
                   'dev', 'eth0'])
    print('OVS ready; %s; namespace %s at %s'
          % (bridge, space, net['OUTSIDE_IP']))


def remove_plumbing():
    """The agents' and the outside's namespaces, the bridges, the veth."""
    net = catalogue.NETWORK
    for space in namespaces():
        if _AGENT_NAMESPACE.match(space) or space == net['OUTSIDE_NS']:
            _quiet(['ip', 'netns', 'delete', space])
    if shutil.which('ovs-vsctl'):
        _quiet(['ovs-vsctl', '--if-exists', 'del-br', 'br-int', '--',
                '--if-exists', 'del-br', 'br-tun', '--', '--if-exists',
                'del-br', net['BR_EX']])
    _quiet(['ip', 'link', 'delete', net['OUTSIDE_VETH']])
