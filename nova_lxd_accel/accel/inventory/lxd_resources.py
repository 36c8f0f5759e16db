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

"""Pure translation of LXD's ``GET /1.0/resources`` metadata into devices.

The schema is LXD's ``shared/api/resource.go`` (``ResourcesGPUCard``,
``ResourcesNetworkCard`` and their ``sriov`` / ``infiniband`` parts). Real
dumps are messy: ``null`` where a list is expected, cards without a PCI
address, names or ports, hollow ``nvidia`` objects, unordered ports. Every
field is read defensively; a device without a PCI address cannot be pinned
into a container and is left out.
"""

from nova_lxd_accel.accel import devices

PROTOCOL_INFINIBAND = 'infiniband'


def _dict(value):
    return value if isinstance(value, dict) else {}


def _list(value):
    return value if isinstance(value, list) else []


def _str(value):
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def _hex_id(value):
    value = _str(value)
    return value.lower() if value else None


def _int(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _cards(resources, section):
    return [c for c in _list(_dict(_dict(resources).get(section)).get('cards'))
            if isinstance(c, dict)]


def _sriov_vfs(card):
    return [v for v in _list(_dict(card.get('sriov')).get('vfs'))
            if isinstance(v, dict)]


def _gpu_vf(vf):
    address = devices.normalise_pci_address(vf.get('pci_address'))
    if address is None:
        return None
    return devices.GpuVf(pci_address=address,
                         vendor_id=_hex_id(vf.get('vendor_id')),
                         product_id=_hex_id(vf.get('product_id')))


def _card_identity(card):
    """The PCI identity fields GPU and network cards share in LXD."""
    return {'vendor_id': _hex_id(card.get('vendor_id')),
            'product_id': _hex_id(card.get('product_id')),
            'numa_node': _int(card.get('numa_node')),
            'driver': _str(card.get('driver')),
            'vendor': _str(card.get('vendor')),
            'product': _str(card.get('product'))}


def _gpu(card):
    address = devices.normalise_pci_address(card.get('pci_address'))
    if address is None:
        return None
    nvidia = _dict(card.get('nvidia'))
    vfs = [vf for vf in map(_gpu_vf, _sriov_vfs(card)) if vf is not None]
    return devices.Gpu(
        pci_address=address,
        **_card_identity(card),
        model=_str(nvidia.get('model')),
        nvidia_uuid=_str(nvidia.get('uuid')),
        architecture=_str(nvidia.get('architecture')),
        cuda_version=_str(nvidia.get('cuda_version')),
        drm_id=_int(_dict(card.get('drm')).get('id')),
        vfs=tuple(sorted(vfs, key=lambda v: v.pci_address)))


def _by_address(resources, section, build):
    """``build(card)`` of each card of ``section``, sorted by PCI address.

    Cards ``build`` turns down (None) are left out; of two cards with one
    address the first is kept.
    """
    found = {}
    for card in _cards(resources, section):
        device = build(card)
        if device is not None and device.pci_address not in found:
            found[device.pci_address] = device
    return [found[a] for a in sorted(found)]


def parse_gpus(resources):
    """Every GPU card with a PCI address, sorted by PCI address.

    :param resources: the metadata dict of ``GET /1.0/resources`` (or any
        dict holding its ``gpu`` part).
    :returns: list of :class:`devices.Gpu` without MIG devices.
    """
    return _by_address(resources, 'gpu', _gpu)


def _port_number(port):
    number = _int(port.get('port'))
    return number if number is not None else 1 << 30


def _is_ib(port):
    return _str(port.get('protocol')) == PROTOCOL_INFINIBAND


def _ib_port(port):
    ib = _dict(port.get('infiniband'))
    return devices.IbPort(netdev=_str(port.get('id')),
                          port=_int(port.get('port')),
                          address=_str(port.get('address')),
                          verb_name=_str(ib.get('verb_name')),
                          mad_name=_str(ib.get('mad_name')),
                          issm_name=_str(ib.get('issm_name')))


def _ib_vf(vf, card_is_pure_ib):
    """An InfiniBand VF, or None when it is not one or cannot be pinned.

    A VF counts when one of its ports speaks InfiniBand, or when it lists no
    ports and its card has InfiniBand ports only.
    """
    address = devices.normalise_pci_address(vf.get('pci_address'))
    if address is None:
        return None
    ports = [p for p in _list(vf.get('ports')) if isinstance(p, dict)]
    if ports:
        ib_ports = [p for p in ports if _is_ib(p)]
        if not ib_ports:
            return None
    elif not card_is_pure_ib:
        return None
    else:
        ib_ports = []
    netdevs = tuple(n for n in (_str(p.get('id')) for p in
                                sorted(ib_ports, key=_port_number)) if n)
    return devices.IbVf(pci_address=address, netdevs=netdevs,
                        vendor_id=_hex_id(vf.get('vendor_id')),
                        product_id=_hex_id(vf.get('product_id')))


def _ib_card(card):
    address = devices.normalise_pci_address(card.get('pci_address'))
    if address is None:
        return None
    ports = [p for p in _list(card.get('ports')) if isinstance(p, dict)]
    ib_ports = sorted((p for p in ports if _is_ib(p)), key=_port_number)
    if not ib_ports:
        return None
    pure_ib = len(ib_ports) == len(ports)
    vfs = [vf for vf in (_ib_vf(v, pure_ib) for v in _sriov_vfs(card))
           if vf is not None]
    return devices.IbCard(
        pci_address=address,
        **_card_identity(card),
        ports=tuple(_ib_port(p) for p in ib_ports),
        vfs=tuple(sorted(vfs, key=lambda v: v.pci_address)))


def parse_ib_cards(resources):
    """Every network card with a PCI address and an InfiniBand port.

    :param resources: the metadata dict of ``GET /1.0/resources`` (or any
        dict holding its ``network`` part).
    :returns: list of :class:`devices.IbCard`, sorted by PCI address.
    """
    return _by_address(resources, 'network', _ib_card)
