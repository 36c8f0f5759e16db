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

"""Which daemon the driver talks to, and what it can do.

LXD and Incus speak the same REST API. ``GET /1.0`` says which one answers
(``environment.server``: ``lxd`` or ``incus``), its version and its API
extensions. :class:`DaemonInfo` holds that answer; every feature switch of
the driver reads an API extension from it, never a version string (Incus
6.0.4 and LXD 6.0.4 share a number and little else).

:func:`cli` gives the operator command for the daemon in use, so every
message names a command that works there: ``incus config trust
add-certificate FILE`` on Incus (``incus config trust add NAME`` issues a
join token instead), ``lxc config trust add FILE`` on LXD.
"""

import dataclasses
import typing

SERVER_LXD = 'lxd'
SERVER_INCUS = 'incus'

#: The values both daemons read as true in a boolean config key
#: (``shared.IsTrue``); anything else is false.
_TRUE_VALUES = ('true', '1', 'yes', 'on')


def is_true(value):
    """Whether the daemon reads the config value ``value`` as true."""
    return str(value).strip().lower() in _TRUE_VALUES


#: The instance config key that turns the guest API (``/dev/lxd`` on LXD,
#: ``/dev/incus`` on Incus) on or off: Incus renamed LXD's key, and each
#: daemon refuses the other's ("Unknown configuration key").
GUEST_API_KEYS = {SERVER_LXD: 'security.devlxd',
                  SERVER_INCUS: 'security.guestapi'}

#: API extensions the driver cannot work without, with the first releases
#: that have them (read from ``shared/version/api.go`` of canonical/lxd's
#: tags; Incus forked from LXD 5.18 and every Incus release has them).
REQUIRED_EXTENSIONS = {
    'instances': 'LXD 3.18, any Incus',           # /1.0/instances
    'resources': 'LXD 3.0, any Incus',            # /1.0/resources
    'projects': 'LXD 3.6, any Incus',             # ?project=
    'console': 'LXD 3.0, any Incus',              # instance console log
    'container_syscall_filtering': 'LXD 3.0, any Incus',
}

#: Optional features: name -> (extension, first releases that have it).
FEATURE_EXTENSIONS = {
    'mig': ('gpu_mig', 'LXD 4.0.6, any Incus'),
    'mig_uuid': ('gpu_mig_uuid', 'LXD 4.0.9, any Incus'),
    'cdi': ('gpu_cdi', 'LXD 5.21.3 and 6.2; no Incus release'),
    'mig_cdi': ('gpu_mig_cdi', 'LXD after 6.9 (not in a release yet); '
                               'no Incus release'),
    'infiniband': ('infiniband', 'LXD 2.x, any Incus'),
    'migration': ('container_only_migration', 'LXD 3.0, any Incus'),
    'cloud_init': ('cloud_init', 'LXD 4.21, any Incus'),
}

# Operator commands that differ between the two command-line clients.
_COMMANDS = {
    SERVER_LXD: {
        'client': 'lxc',
        'trust_add': 'lxc config trust add {file}',
        'init': 'lxd init',
        'waitready': 'lxd waitready',
        'info': 'lxc info',
        'storage_create': 'lxc storage create {pool} dir',
        'project_create': 'lxc project create {project}',
        'delete': 'lxc delete --force {name}',
        'set_https': 'lxc config set core.https_address {address}',
        'publish_export': '`lxc publish` + `lxc image export`',
        'group': 'lxd',
    },
    SERVER_INCUS: {
        'client': 'incus',
        'trust_add': 'incus config trust add-certificate {file}',
        'init': 'incus admin init',
        'waitready': 'incus admin waitready',
        'info': 'incus info',
        'storage_create': 'incus storage create {pool} dir',
        'project_create': 'incus project create {project}',
        'delete': 'incus delete --force {name}',
        'set_https': 'incus config set core.https_address {address}',
        'publish_export': '`incus publish` + `incus image export`',
        'group': 'incus-admin',
    },
}


def cli(server, command, **values):
    """The operator command ``command`` for daemon ``server``.

    :param server: ``lxd`` or ``incus`` (anything else reads as ``lxd``),
        or a :class:`DaemonInfo`.
    :param command: a key of the table above (``trust_add``, ``init``,
        ``storage_create``, ...).
    :param values: the command's placeholders (``file``, ``pool``, ...).
    """
    if isinstance(server, DaemonInfo):
        server = server.server
    table = _COMMANDS.get(server, _COMMANDS[SERVER_LXD])
    return table[command].format(**values)


def display_name(server):
    return 'Incus' if server == SERVER_INCUS else 'LXD'


@dataclasses.dataclass(frozen=True)
class DaemonInfo:
    """What ``GET /1.0`` said about the daemon."""

    server: str
    version: str
    extensions: typing.FrozenSet[str]
    auth: typing.Optional[str] = None
    endpoint: typing.Optional[str] = None

    @classmethod
    def from_server_info(cls, info, endpoint=None):
        environment = (info or {}).get('environment') or {}
        server = (environment.get('server') or SERVER_LXD).lower()
        return cls(server=server,
                   version=str(environment.get('server_version') or '?'),
                   extensions=frozenset((info or {}).get('api_extensions')
                                        or ()),
                   auth=(info or {}).get('auth'), endpoint=endpoint)

    @property
    def name(self):
        """``LXD`` or ``Incus``."""
        return display_name(self.server)

    @property
    def guest_api_key(self):
        """``security.devlxd`` on LXD, ``security.guestapi`` on Incus."""
        return GUEST_API_KEYS.get(self.server, GUEST_API_KEYS[SERVER_LXD])

    def has(self, extension):
        return extension in self.extensions

    def supports(self, feature):
        """Whether the daemon has the extension of a FEATURE_EXTENSIONS key."""
        return self.has(FEATURE_EXTENSIONS[feature][0])

    def missing_required(self):
        """``[(extension, first releases)]`` the daemon lacks."""
        return [(ext, since) for ext, since in REQUIRED_EXTENSIONS.items()
                if not self.has(ext)]

    def cli(self, command, **values):
        return cli(self.server, command, **values)

    def describe(self):
        """``Incus 6.0.4 (450 API extensions)``."""
        return '%s %s (%d API extensions)' % (self.name, self.version,
                                              len(self.extensions))


def cli_for(client, command, **values):
    """:func:`cli` for the daemon behind a :class:`LXDClient`.

    Falls back to LXD's form when the daemon cannot be asked.
    """
    try:
        server = client.daemon_info().server
    except Exception:  # noqa: B902 - only the message depends on it
        server = SERVER_LXD
    return cli(server, command, **values)
