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
further. :func:`host_reach` (``reach on``) gives this host an address on
the external network too, so that a client here (tempest's SSH
validation) reaches floating IPs; connections from the servers to this
host stay refused. :func:`remove_plumbing` takes all of it away again
(``clean``).
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


def _bridge(name):
    _run(['ovs-vsctl', '--may-exist', 'add-br', name, '--', 'set',
          'bridge', name, 'datapath_type=netdev'])


def _patch(left, right):
    """A patch port pair between two bridges: one segment of both."""
    ends = ('sbx-%s' % left)[:15], ('sbx-%s' % right)[:15]
    argv = ['ovs-vsctl']
    for bridge, port, peer in ((left, ends[0], ends[1]),
                               (right, ends[1], ends[0])):
        argv += ['--', '--may-exist', 'add-port', bridge, port, '--', 'set',
                 'interface', port, 'type=patch', 'options:peer=%s' % peer]
    _run(argv)


#: the second host's physical bridges, each patched to the first host's
def _second_host_bridges():
    net = catalogue.NETWORK
    return ((net['BR_EX'], net['BR_EX_2']),
            (net['BR_TENANT'], net['BR_TENANT_2']))


def ovs_ready(environ, hosts=1):
    """Open vSwitch running, the physical bridges, the outside namespace.

    The project networks' bridge (VLANs of physical network "tenant");
    with two hosts, the second host's external and project bridges,
    patched to the first host's: as if both hosts' NICs were on one
    switch.
    """
    net = catalogue.NETWORK
    env = dict(environ, OVS_INSTALL=environ.get('SANDBOX_APT', '1'))
    _run(['bash', os.path.join(layout_module.REPO_DIR, 'tools',
                               'ovs-up.sh')], cwd='/', env=env)
    bridge, space, veth = net['BR_EX'], net['OUTSIDE_NS'], net['OUTSIDE_VETH']
    _bridge(bridge)
    _bridge(net['BR_TENANT'])
    if hosts == 2:
        for first, second in _second_host_bridges():
            _bridge(second)
            _patch(first, second)
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
    print('OVS ready; %s, %s; namespace %s at %s'
          % (bridge, net['BR_TENANT'], space, net['OUTSIDE_IP']))
    if hosts == 2:
        print('second host: %s' % ', '.join(
            '%s patched to %s' % (second, first)
            for first, second in _second_host_bridges()))


#: the iptables chain that keeps the servers from opening connections to
#: this host through its address on the external network
_HOST_CHAIN = 'sandbox-host-in'


def _host_firewall(on):
    """Only replies reach this host from the external network."""
    veth = catalogue.NETWORK['HOST_VETH']
    jump = ['INPUT', '-i', veth, '-j', _HOST_CHAIN]
    while _quiet(['iptables', '-D'] + jump):
        pass
    _quiet(['iptables', '-F', _HOST_CHAIN])
    _quiet(['iptables', '-X', _HOST_CHAIN])
    if not on:
        return
    _run(['iptables', '-N', _HOST_CHAIN])
    _run(['iptables', '-A', _HOST_CHAIN, '-m', 'conntrack', '--ctstate',
          'ESTABLISHED,RELATED', '-j', 'ACCEPT'])
    _run(['iptables', '-A', _HOST_CHAIN, '-j', 'DROP'])
    _run(['iptables', '-I'] + jump)


def _addresses_this_host_needs():
    """{address: what} of the package mirrors, PyPI and the resolvers."""
    import socket
    import urllib.parse

    names = {'pypi.org', 'files.pythonhosted.org'}
    for path in ['/etc/apt/sources.list'] + [
            os.path.join('/etc/apt/sources.list.d', name) for name in
            (os.listdir('/etc/apt/sources.list.d')
             if os.path.isdir('/etc/apt/sources.list.d') else [])]:
        try:
            with open(path) as handle:
                text = handle.read()
        except OSError:
            continue
        names.update(urllib.parse.urlparse(url).hostname or ''
                     for url in re.findall(r'https?://[^\s]+', text))
    found = {}
    for name in sorted(names - {''}):
        try:
            for info in socket.getaddrinfo(name, 80, socket.AF_INET):
                found[info[4][0]] = name
        except OSError:
            continue
    try:
        with open('/etc/resolv.conf') as handle:
            for line in handle:
                words = line.split()
                if len(words) > 1 and words[0] == 'nameserver':
                    found[words[1]] = 'a nameserver'
    except OSError:
        pass
    return found


def host_reach(on):
    """This host on the external network (``reach on``), or not (``off``).

    A veth pair into the external bridge with an address outside the
    floating IPs' pool: the host then reaches floating IPs directly (as
    the ``sandbox-outside`` namespace does), which tempest's validation
    needs because it runs here, next to the APIs on 127.0.0.1.
    """
    net = catalogue.NETWORK
    veth, peer = net['HOST_VETH'], net['HOST_VETH'] + '-br'
    if not on:
        _host_firewall(False)
        if shutil.which('ovs-vsctl'):
            _quiet(['ovs-vsctl', '--if-exists', 'del-port', net['BR_EX'],
                    peer])
        if _quiet(['ip', 'link', 'delete', veth]):
            print('this host is off the external network')
        return
    import ipaddress

    routed = ipaddress.ip_network('%s/%s' % (net['HOST_IP'],
                                             net['HOST_PREFIX']), strict=False)
    clash = {address: what for address, what in
             _addresses_this_host_needs().items()
             if ipaddress.ip_address(address) in routed}
    if clash:
        raise ValueError(
            'this host reaches %s inside %s, the floating IPs this host '
            'would route to the sandbox; reach on would cut it off'
            % (', '.join('%s (%s)' % item for item in sorted(clash.items())),
               routed))
    if shutil.which('iptables') is None:
        raise ValueError('iptables is missing (apt-get install iptables): '
                         'without it the servers could connect to this '
                         'host')
    if not _quiet(['ip', 'link', 'show', veth]):
        # a port left in the bridge by a removed veth holds the old
        # interface (the userspace datapath): add it afresh
        _quiet(['ovs-vsctl', '--if-exists', 'del-port', net['BR_EX'], peer])
        _run(['ip', 'link', 'add', veth, 'type', 'veth', 'peer', 'name',
              peer])
    _run(['ip', 'link', 'set', peer, 'up'])
    _run(['ovs-vsctl', '--may-exist', 'add-port', net['BR_EX'], peer])
    # the floating IPs' quarter only: the rest of the external network's
    # range may be real addresses this host uses
    address = '%s/%s' % (net['HOST_IP'], net['HOST_PREFIX'])
    _run(['ip', 'addr', 'replace', address, 'dev', veth])
    _run(['ip', 'link', 'set', veth, 'up'])
    _host_firewall(True)
    print('this host is on the external network at %s/%s (%s): floating '
          'IPs (%s to %s) answer here; connections from the servers are '
          'dropped' % (net['HOST_IP'], net['HOST_PREFIX'], veth,
                       net['FLOATING_FIRST'], net['FLOATING_LAST']))


def remove_plumbing():
    """The agents' and the outside's namespaces, the bridges, the veth."""
    net = catalogue.NETWORK
    for space in namespaces():
        if _AGENT_NAMESPACE.match(space) or space == net['OUTSIDE_NS']:
            _quiet(['ip', 'netns', 'delete', space])
    if shutil.which('ovs-vsctl'):
        argv = ['ovs-vsctl']
        for bridge in ('br-int', 'br-tun', net['BR_EX'], net['BR_TENANT'],
                       net['BR_INT_2'], net['BR_EX_2'], net['BR_TENANT_2']):
            argv += ['--', '--if-exists', 'del-br', bridge]
        _quiet(argv)
    _quiet(['ip', 'link', 'delete', net['OUTSIDE_VETH']])
    host_reach(False)
