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

"""A Neutron port as an LXD ``nic`` device (pure; plugging is
hostside/network.py).

The LXD device is named ``nova-port-<port id>`` and the interface inside
the container ``eth<N>``: ports present at spawn are ``eth0``, ``eth1``,
... in network_info order, a hot-plugged port gets the lowest free
``eth<N>``. Every NIC gets the port's MAC (``hwaddr``), the network's MTU
(``mtu``) and the host-side name nova chose for the port (``host_name``).
``ovs`` ports become ``nictype=bridged`` on the port's hybrid-plug bridge
``qbr<port id>``, ``tap`` ports ``nictype=p2p``.
"""

from nova.network import model as network_model

from nova_lxd_accel import exception

#: Prefix of the LXD device name of a port's NIC.
DEVICE_PREFIX = 'nova-port-'
#: VIF types this module plugs, and the LXD nictype each becomes.
NICTYPES = {
    network_model.VIF_TYPE_OVS: 'bridged',
    network_model.VIF_TYPE_TAP: 'p2p',
}


def device_name(vif):
    """The LXD device name of a port's NIC."""
    return DEVICE_PREFIX + vif['id']


def host_name(vif):
    """The host end of the container's veth: nova's devname for the port."""
    return vif.get('devname') or \
        ('tap' + vif['id'])[:network_model.NIC_NAME_LEN]


def hybrid_bridge_name(vif):
    """The per-port Linux bridge of the OVS hybrid plug (os-vif's name)."""
    return ('qbr' + vif['id'])[:network_model.NIC_NAME_LEN]


def _mtu(vif):
    network = vif.get('network') or {}
    meta = network.get('meta') or {}
    return meta.get('mtu')


def check_supported(vif):
    vif_type = vif.get('type')
    vnic_type = vif.get('vnic_type') or network_model.VNIC_TYPE_NORMAL
    if vif_type not in NICTYPES or \
            vnic_type != network_model.VNIC_TYPE_NORMAL:
        raise exception.VIFNotSupported(
            port_id=vif.get('id'), vif_type=vif_type, vnic_type=vnic_type,
            supported=', '.join(sorted(NICTYPES)))


def nic_device(vif, ifname):
    """The LXD ``nic`` device for one port, named ``ifname`` inside."""
    check_supported(vif)
    nictype = NICTYPES[vif['type']]
    device = {'type': 'nic', 'nictype': nictype, 'name': ifname,
              'host_name': host_name(vif)}
    if nictype == 'bridged':
        device['parent'] = hybrid_bridge_name(vif)
    if vif.get('address'):
        device['hwaddr'] = vif['address']
    mtu = _mtu(vif)
    if mtu:
        device['mtu'] = str(mtu)
    return device


def free_ifname(devices):
    taken = {device.get('name') for device in devices.values()
             if device.get('type') == 'nic'}
    index = 0
    while 'eth%d' % index in taken:
        index += 1
    return 'eth%d' % index
