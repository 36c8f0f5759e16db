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

"""The ``[lxd]`` group: how the driver reaches LXD and shapes containers."""

from oslo_config import cfg


def client_key_opt(*related):
    """The ``client_key`` option of a group that has a ``client_cert``."""
    return cfg.StrOpt('client_key',
                      default=None,
                      secret=True,
                      help="""
Private key (PEM) of ``client_cert``.

Related options:

* %s
""" % ', '.join('``%s``' % name for name in related))


lxd_group = cfg.OptGroup(
    'lxd',
    title='LXD options',
    help="""
How the nova-lxd-accel compute driver (``compute_driver =
lxd_accel.LXDDriver``) talks to the LXD daemon and which containers it makes.
""")

connection_opts = [
    cfg.StrOpt('endpoint',
               default=None,
               help="""
Where the LXD or Incus daemon listens.

Possible values:

* unset (default): the local daemon's unix socket. ``$LXD_DIR`` and
  ``$INCUS_DIR`` (``<dir>/unix.socket``) are used when set; otherwise the
  first that answers of LXD's snap socket
  (``/var/snap/lxd/common/lxd/unix.socket``), ``/var/lib/lxd/unix.socket``,
  ``/var/lib/incus/unix.socket`` and ``/run/incus/unix.socket``. When two
  different daemons answer (LXD and Incus on one host) nova-compute refuses
  to start and names both: set this option then.
* a unix socket path, for example ``/var/lib/incus/unix.socket``
* an HTTPS URL, for example ``https://127.0.0.1:8443``; then set
  ``client_cert`` and ``client_key`` and trust that certificate in the
  daemon (``lxc config trust add FILE`` on LXD, ``incus config trust
  add-certificate FILE`` on Incus)

Related options:

* ``client_cert``, ``client_key``, ``verify``
"""),
    cfg.StrOpt('client_cert',
               default=None,
               help="""
Client certificate (PEM) used with an HTTPS ``endpoint``.

Related options:

* ``endpoint``, ``client_key``
"""),
    client_key_opt('endpoint', 'client_cert'),
    cfg.StrOpt('verify',
               default='true',
               help="""
How to verify the LXD server certificate of an HTTPS ``endpoint``.

Possible values:

* ``true``: verify against the system CA bundle
* ``false``: do not verify (only for tests on loopback)
* the path of the LXD server's own certificate (a copy of its
  ``server.crt``), pinned by its fingerprint: LXD's certificates are
  self-signed. ``$REQUESTS_CA_BUNDLE`` and proxy variables are ignored.
"""),
    cfg.StrOpt('project',
               default='default',
               help="""
LXD project that holds this compute node's containers.

A dedicated project keeps Nova's containers apart from hand-made ones. The
project must exist; ``init_host`` refuses to start otherwise.

Possible values:

* the name of an existing LXD project
"""),
    cfg.IntOpt('timeout',
               default=120,
               min=1,
               help="""
Seconds to wait for one LXD operation (create, start, publish, ...) before
giving up with an error.
"""),
]

instance_opts = [
    cfg.StrOpt('storage_pool',
               default='default',
               help="""
LXD storage pool for the root disks of instances.

``init_host`` checks that the pool exists and names it when it does not.
Note: the ``dir`` driver cannot enforce the flavor's root disk size; use
``zfs``, ``btrfs`` or ``lvm`` pools where ``root_gb`` must be a hard limit.

Possible values:

* the name of an existing LXD storage pool
"""),
    cfg.ListOpt('profiles',
                default=[],
                help="""
LXD profiles applied to every instance, in order, before the driver's own
configuration (which always wins for limits, security and devices).

A container a resize or cold migration finishes on this host gets these
profiles then (not the ones it had on its old host), masked by this
host's check (``unsafe_profile_content``).

Possible values:

* a comma separated list of existing profile names; empty (default) means
  none, so no NIC of LXD's default profile bypasses Neutron
"""),
    cfg.StrOpt('unsafe_profile_content',
               default='refuse',
               choices=[
                   ('refuse', 'nova-compute refuses to start, naming each '
                              'profile, key and device'),
                   ('strip', 'every instance overrides them: raw.lxc and '
                             'raw.apparmor set to a comment, security '
                             'switches false, devices masked by an LXD '
                             '"none" device; what cannot be overridden is '
                             'still refused'),
               ],
               help="""
What to do, when ``nova-compute`` starts, about ``profiles`` content that
would apply to every instance behind the flavor's and the operator's back.
A profile may hold only: config keys starting ``limits.``, ``boot.``,
``user.``, ``environment.``, ``cloud-init.``, ``snapshots.``,
``migration.``, ``linux.sysctl.``, ``security.idmap.`` (containers set
``security.idmap.isolated`` themselves, see ``isolated_idmap``),
``security.protection.``, and ``security.devlxd`` (``security.guestapi`` on
Incus; containers set it false themselves unless ``devlxd``);
``security.privileged``,
``security.nesting`` and ``security.syscalls.intercept.*`` set false;
``nic`` devices on a managed network or of type bridged, macvlan, ipvlan,
routed, p2p or ovn; ``disk`` devices from a storage pool (not a host path);
``none`` devices. Anything else (``raw.*``, ``linux.kernel_modules``, any
``gpu``, ``infiniband``, ``proxy``, ``unix-char``, ``unix-block``, ``pci``
or ``usb`` device, a host path) is unsafe. Profiles are checked at
startup only; restart ``nova-compute`` after editing one.

Related options:

* ``profiles``, ``allow_privileged_containers``, ``allow_nesting``
"""),
    cfg.StrOpt('container_name_prefix',
               default='nova-',
               regex=r'^[a-z][a-z0-9-]{0,20}$',
               help="""
Prefix of container names; the rest is the instance UUID, so names are
stable across nova-compute restarts and unique across cells.

Possible values:

* lower-case letters, digits and ``-``, starting with a letter
"""),
    cfg.IntOpt('default_process_limit',
               default=8192,
               min=0,
               help="""
Default ``limits.processes`` of a container: the most tasks (processes and
threads) it may run at once, so that one fork bomb cannot take every
process id of the host. A flavor sets its own with the ``lxd:processes``
extra spec, higher or lower. 0: no limit (before this driver's 2026.11
release the default).
"""),
    cfg.BoolOpt('allow_privileged_containers',
                default=False,
                help="""
Whether a flavor may ask for a privileged container (``lxd:privileged``).

Privileged containers map container root to host root: any user of such a
flavor can escape to the host. Leave off unless every user of the cloud is
trusted with root on the compute hosts.
"""),
    cfg.BoolOpt('allow_nesting',
                default=False,
                help="""
Whether a flavor may ask for nested containers (``lxd:nesting``), for
example to run Docker inside an instance.
"""),
    cfg.BoolOpt('isolated_idmap',
                default=True,
                help="""
Whether each container gets a host user-id range of its own
(``security.idmap.isolated: true``), so that a process escaping one
container as its root (or any other user) owns nothing in the other
containers of the host. A flavor overrides it either way with the
``lxd:isolated_idmap`` extra spec (flavor extra specs are admin-only).

True (default since this driver's 2026.11 release): LXD gives each
container 65536 ids of root's range in ``/etc/subuid`` and
``/etc/subgid``; ``root:100000:10000001`` (a range of ten million ids)
holds about 150 isolated containers per daemon, beyond which LXD refuses
to start another. With the kernel's idmapped mounts (5.12 or later, shown
as ``idmapped_mounts: "true"`` by ``lxc info``) the root file system is
not rewritten, so a boot costs about the same as without.

False: every container shares one range, as before that release.

A share of a GPU with MPS quotas (``lxd:gpu_memory_mb``) needs its
container to share the MPS server's user: an MPS server serves one host
user at a time and the clients of any other wait, without an error, until
it exits. Such a flavor is refused at boot and resize in an isolated
container: give it ``lxd:isolated_idmap=false``.

Existing containers change at their next resize, cold migration or
rebuild; a restart does not change them.
"""),
    cfg.BoolOpt('devlxd',
                default=False,
                help="""
Whether containers keep the daemon's guest API: the ``/dev/lxd/sock``
socket (``/dev/incus/sock`` on Incus) through which any process of the
container reads the container's configuration, including the driver's
``user.nova_lxd_accel.*`` keys (this host's name, the PCI addresses and
MIG UUIDs of its devices, the project).

False (default) sets ``security.devlxd: false`` (``security.guestapi`` on
Incus) on every container the driver makes; cloud-init does not need the
socket, as user data is written into the container as a NoCloud seed and
``user.meta-data`` reaches the image's templates. True leaves the key
unset, so the daemon's default (the socket present) or an ``[lxd]
profiles`` value applies, as before this driver's 2026.11 release: for
images whose agents use the guest API (cloud-init's LXD datasource on an
image without templates, booted without user data).

Existing containers change at their next resize, cold migration or
rebuild (see the release notes); a restart does not change them.

Related options:

* ``profiles``
"""),
    cfg.StrOpt('image_download_dir',
               default=None,
               help="""
Directory that Glance images are downloaded into before they are imported
into LXD. The driver owns it: it is created with mode 0700, a download is
written as ``*.part`` and renamed once complete, and ``nova-compute``
removes everything left in it (by a process killed mid-download) when it
starts. It needs room for the largest image, and should not be shared with
anything else.

Possible values:

* unset (default): ``$state_path/lxd-image-downloads``
* an absolute path
"""),
    cfg.IntOpt('console_log_max_bytes',
               default=100 * 1024,
               min=1024,
               help="""
Largest tail of the container console log that ``get_console_output``
returns, in bytes.
"""),
    cfg.FloatOpt('lifecycle_poll_interval',
                 default=2.0,
                 min=0,
                 help="""
Whether to send Nova lifecycle events (started, stopped, paused, resumed,
suspended; stopped for a container deleted behind Nova's back) for changes
made outside Nova, and how often to look when the daemon cannot tell: the
driver normally subscribes to the daemon's event stream
(``lifecycle_events``) and lists containers only once after each
(re)connection; a daemon without the events API, or
``lifecycle_events = false``, is polled every this many seconds.

Possible values:

* 0: do not watch (Nova's periodic power-state sync still runs)
* a positive number of seconds
"""),
    cfg.BoolOpt('lifecycle_events',
                default=True,
                help="""
Subscribe to the daemon's event websocket (``/1.0/events``, lifecycle and
operation events of ``[lxd] project``) to learn promptly of containers
started, stopped, frozen or deleted outside Nova. When the stream drops (the
daemon restarts) the driver reconnects with exponential backoff (up to
``lifecycle_events_max_backoff``) and lists the containers once. False
polls every ``lifecycle_poll_interval`` seconds instead.
"""),
    cfg.FloatOpt('lifecycle_events_max_backoff',
                 default=30.0,
                 min=0.5,
                 help="""
Longest wait, in seconds, between two attempts to subscribe again to the
daemon's event stream after it dropped; waits start at 0.5 s and double.
"""),
]

ALL_OPTS = connection_opts + instance_opts


def register_opts(conf):
    conf.register_group(lxd_group)
    conf.register_opts(ALL_OPTS, group=lxd_group)


def list_opts():
    return [(lxd_group, ALL_OPTS)]
