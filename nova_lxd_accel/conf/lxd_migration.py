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

"""The ``[lxd_migration]`` group: moving containers between LXD hosts."""

from oslo_config import cfg

from nova_lxd_accel.conf import lxd

migration_group = cfg.OptGroup(
    'lxd_migration',
    title='LXD migration options',
    help="""
How nova-lxd-accel moves containers between compute hosts (cold migration
and resize to another host) with LXD's instance migration API.

The source compute host's nova-compute connects to the destination host's
LXD daemon over HTTPS with a client certificate that daemon trusts, and
the destination daemon pulls the container from the source daemon's HTTPS
address. So on every compute host: set ``core.https_address`` of the
daemon (``lxc config set core.https_address <address>:8443``; on Incus
``incus config set ...``) and trust the client certificate of every other
compute host (``lxc config trust add /path/to/client.crt``; on Incus
``incus config trust add-certificate /path/to/client.crt``). Migration
is tested between two LXD and between two Incus daemons, not from one kind
to the other. Resize on the same host (``[DEFAULT]
allow_resize_to_same_host``) needs none of this.
""")

ALL_OPTS = [
    cfg.DictOpt('endpoints',
                default={},
                help="""
The LXD HTTPS endpoint of each destination compute host, by nova host name.

Hosts not listed here get ``endpoint_template``.

Example::

    endpoints = compute2:https://192.0.2.12:8443,compute3:https://lxd3:8443

Related options:

* ``endpoint_template``, ``client_cert``, ``client_key``, ``server_certs``
"""),
    cfg.StrOpt('endpoint_template',
               default='https://{ip}:8443',
               help="""
The LXD HTTPS endpoint of a destination host not listed in ``endpoints``.

``{host}`` is replaced by the destination's nova host name and ``{ip}`` by
its ``my_ip`` (the address nova records for the migration).

Related options:

* ``endpoints``
"""),
    cfg.StrOpt('client_cert',
               default=None,
               help="""
Client certificate (PEM) this host presents to destination LXD daemons.

Every destination daemon must trust it: ``lxc config trust add
<this file>`` there (Incus: ``incus config trust add-certificate <this
file>``). Without it, migrating to another host fails with a
message saying so (resize on the same host still works).

Related options:

* ``client_key``
"""),
    lxd.client_key_opt('client_cert'),
    cfg.DictOpt('server_certs',
                default={},
                help="""
The server certificate of each destination host's LXD, by nova host name.

The destination's certificate must be exactly this one (LXD makes
self-signed server certificates: copy ``/var/lib/lxd/server.crt`` of each
host, or ``/var/snap/lxd/common/lxd/server.crt`` for the snap). Hosts not
listed are verified as ``verify`` says.

Related options:

* ``verify``
"""),
    cfg.StrOpt('verify',
               default='true',
               help="""
How to verify a destination LXD's server certificate when ``server_certs``
does not list the host.

Possible values:

* ``true``: against the system CA bundle (for certificates signed by a CA)
* ``false``: not at all (only for tests on loopback)
* a path to one server certificate that every destination presents
"""),
    cfg.StrOpt('source_address',
               default=None,
               help="""
The ``host:port`` of this host's LXD HTTPS listener that destination
daemons pull containers from.

Unset (default): the first address LXD reports it listens on
(``core.https_address``).
"""),
    cfg.BoolOpt('same_host',
                default=True,
                help="""
Whether a cold migration (``openstack server migrate``, no new flavor) may
land on the host the server is on.

True (default): this host reports the ``COMPUTE_SAME_HOST_COLD_MIGRATE``
trait and the scheduler may pick it again: the container is rebuilt on
the same daemon with the devices of a new allocation (other GPUs, MIG
slices or shared-GPU units), which moves a server off a GPU on a host of
its own. False: nova leaves the server's host out, so a cold migration
always moves it to another host, as libvirt hosts do (and as tempest's
cold-migration tests expect). Disabling a host's compute service before
moving its servers off works either way.
"""),
    cfg.IntOpt('timeout',
               default=3600,
               min=1,
               help="""
Seconds to wait for LXD to transfer one container to another host.
"""),
]


def register_opts(conf):
    conf.register_group(migration_group)
    conf.register_opts(ALL_OPTS, group=migration_group)


def list_opts():
    return [(migration_group, ALL_OPTS)]
