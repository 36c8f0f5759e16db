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

"""The sandbox's cloud: the fixed names every part of it agrees on.

Region, image, flavors, the fake compute host of ``sandbox.sh bench`` and
the networking names and addresses. Paths and ports are in layout.py, the
services (one entry each) in services.py. Any Python 3, standard library
only.
"""

import collections

REGION = 'RegionOne'
IMAGE_NAME = 'lxd-tiny'
PLAIN_FLAVOR = 'sandbox.small'
# A second CPU flavor, so that resize can be tried.
SECOND_FLAVOR = 'sandbox.medium'
# "sandbox.sh bench": the host of its nova-compute on Nova's fake driver
FAKE_HOST = 'sandbox-fake-compute'
# "up --hosts 2": the second nova-compute's host, on the peer daemon
# (tools/lxd-peer-up.sh), with its own Open vSwitch agent
SECOND_HOST = 'sandbox-compute-2'

# Networking (Neutron ML2/OVS, userspace datapath): the external bridge and
# the network namespace that plays "the outside" of the external network.
# Addresses from the documentation ranges, used inside this machine only.
NETWORK = collections.OrderedDict([
    ('BR_EX', 'br-ex'),
    ('OUTSIDE_NS', 'sandbox-outside'),
    ('OUTSIDE_VETH', 'sbx-outside'),
    ('PUBLIC_CIDR', '203.0.113.0/24'),
    ('OUTSIDE_IP', '203.0.113.1'),
    # the floating IPs and routers' gateways: the top quarter of the
    # external network, the part "reach on" routes from this host (the
    # rest of 203.0.113.0/24 may be real addresses this host uses: a
    # package mirror has been seen at .80)
    ('FLOATING_FIRST', '203.0.113.193'),
    ('FLOATING_LAST', '203.0.113.253'),
    # "reach on": this host's own address in that quarter (outside the
    # pool), for tempest's SSH validation
    ('HOST_VETH', 'sbx-host'),
    ('HOST_IP', '203.0.113.254'),
    ('HOST_PREFIX', '26'),
    ('PRIVATE_CIDR', '192.0.2.0/24'),
    # Project networks are VLANs of the physical network "tenant" on the
    # bridge br-tenant. Two OVS agents share one userspace Open vSwitch
    # here, where VXLAN between them cannot work (both tunnel endpoints
    # would be 127.0.0.1); "up --hosts 2" gives the second agent its own
    # bridges, patched to the first one's.
    ('TENANT_PHYSNET', 'tenant'),
    ('TENANT_VLANS', '100:199'),
    ('BR_TENANT', 'br-tenant'),
    ('BR_INT_2', 'br-int-2'),
    ('BR_EX_2', 'br-ex-2'),
    ('BR_TENANT_2', 'br-tenant-2'),
])
