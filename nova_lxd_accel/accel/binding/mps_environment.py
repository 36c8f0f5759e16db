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

"""The MPS client environment for every process of the tenant (issue 29).

LXD's ``environment.*`` keys (:func:`.sharing.lxd_config`) reach the
container's init and ``lxc exec`` only: an SSH login, a cron job and a
systemd service each build their own environment. So the same variables
are also written where those read theirs, on Debian and Ubuntu images:

* ``/etc/environment``, read by ``pam_env`` in the PAM sessions of sshd
  (logins and ``ssh host command``), ``login``, ``su`` and Debian's cron.
  The image owns the file (Ubuntu keeps ``PATH`` there): only a block
  between :data:`BEGIN` and :data:`END` is ours. pam_env reads drop-in
  directories only when built with libeconf, which Debian's is not known
  to be, so a drop-in there is no choice;
* ``/etc/systemd/system.conf.d/nvidia-mps.conf``: ``DefaultEnvironment=``
  of the system manager, so every service and timer has them;
* ``/etc/systemd/user.conf.d/nvidia-mps.conf``: the same for each user's
  manager (``systemctl --user``, lingering users' services).

No ``/etc/profile.d`` script: every login shell there runs in a session
pam_env has already set up, and a profile script reaches neither
``ssh host command`` nor services.

:func:`files` and the helpers before it are pure; :func:`apply` writes.
The files are written into the stopped container, before its start; a
container whose quota is gone (resize) has the block and the drop-ins
removed, so that no stale limit or pipe directory is left behind.

A snapshot of such a container carries the files into its image. The
driver marks that image in Glance (:data:`SNAPSHOT_PROPERTY`), and a spawn
from it removes them unless the new instance has limits of its own: they
name the old host's pipe directory and the old flavor's limits.
"""

import re

from oslo_log import log as logging

LOG = logging.getLogger(__name__)

#: The MPS client variables, in the order they are written.
VARIABLES = ('CUDA_MPS_PIPE_DIRECTORY', 'CUDA_MPS_PINNED_DEVICE_MEM_LIMIT',
             'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE')
#: The flavor extra specs that give an instance MPS client limits.
QUOTA_SPECS = ('lxd:gpu_memory_mb', 'lxd:gpu_compute_percent')

ENVIRONMENT_FILE = '/etc/environment'
#: the most bytes of it read (a few lines of variables in any image)
ENVIRONMENT_LIMIT = 64 * 1024
SYSTEM_DROPIN = '/etc/systemd/system.conf.d/nvidia-mps.conf'
USER_DROPIN = '/etc/systemd/user.conf.d/nvidia-mps.conf'
DROPINS = (SYSTEM_DROPIN, USER_DROPIN)

BEGIN = '# BEGIN nova-lxd-accel NVIDIA MPS client (rewritten by Nova)'
END = '# END nova-lxd-accel NVIDIA MPS client'

#: The Glance property of a snapshot whose container had the files. Nova
#: copies image properties into the instance's system metadata, with
#: ``image_`` before each: a spawn reads it there, without a request.
SNAPSHOT_PROPERTY = 'lxd_accel_mps_environment'

_ENVIRONMENT_KEY = 'environment.'
#: What both pam_env and systemd take unquoted and unchanged.
_PLAIN = re.compile(r'^[^\s"\'\\$`#]+$')


def variables_in(config):
    """The MPS client variables among a container config's keys.

    :param config: LXD config (``environment.<NAME>`` keys), as
        :func:`.sharing.lxd_config` or a container record gives it.
    :returns: ``{name: value}``; empty without an MPS quota.
    """
    config = config or {}
    return {name: config[_ENVIRONMENT_KEY + name] for name in VARIABLES
            if _ENVIRONMENT_KEY + name in config}


def flavor_has_quota(flavor):
    """Whether ``flavor``'s extra specs set MPS client limits."""
    specs = getattr(flavor, 'extra_specs', None)
    if not isinstance(specs, dict):
        return False
    return any(specs.get(key) not in (None, '') for key in QUOTA_SPECS)


def snapshot_properties(config):
    """Glance properties of a snapshot of a container with ``config``.

    ``{SNAPSHOT_PROPERTY: 'written'}`` when the container has MPS client
    limits (so their files are in its root file system), else ``{}``.
    """
    return {SNAPSHOT_PROPERTY: 'written'} if variables_in(config) else {}


def image_may_carry_files(instance):
    """Whether the instance's image is a snapshot with the MPS files."""
    if not instance.obj_attr_is_set('system_metadata'):
        return False
    return bool(instance.system_metadata.get('image_' + SNAPSHOT_PROPERTY))


def _assignments(variables):
    out = []
    for name in VARIABLES:
        if name not in variables:
            continue
        value = str(variables[name])
        if not _PLAIN.match(value):
            # pam_env and systemd quote differently: refuse rather than
            # hand the tenant a limit one of them reads otherwise
            raise ValueError('%s=%r: white space, quotes, "\\", "$", "`" '
                             'or "#" cannot be written for both pam_env and '
                             'systemd' % (name, value))
        out.append('%s=%s' % (name, value))
    return out


def without_block(text):
    """``/etc/environment`` text without our block (the image's lines)."""
    if BEGIN not in text:
        return text
    lines, inside = [], False
    for line in text.splitlines():
        if line.strip() == BEGIN:
            inside = True
        elif inside and line.strip() == END:
            inside = False
        elif not inside:
            lines.append(line)
    return '\n'.join(lines) + '\n' if lines else ''


def with_block(text, variables):
    """``/etc/environment`` text with our block for ``variables``.

    The image's own lines are kept as they are, before the block; without
    variables the block is taken out. pam_env sets the lines in turn, so
    ours, at the end, win over an image's own of the same name.
    """
    kept = without_block(text or '')
    if not variables:
        return kept
    if kept and not kept.endswith('\n'):
        kept += '\n'
    block = [BEGIN] + _assignments(variables) + [END]
    return kept + '\n'.join(block) + '\n'


def dropin(variables):
    """A systemd manager drop-in setting ``variables`` for its units."""
    return ('# Written by nova-lxd-accel: the NVIDIA MPS client of this '
            'instance\'s\n# shared GPU. Rewritten or removed by Nova.\n'
            '[Manager]\nDefaultEnvironment=%s\n'
            % ' '.join(_assignments(variables)))


def files(variables, current_environment=''):
    """Path -> contents of the files for ``variables`` (None: remove).

    :param variables: ``{name: value}`` (:func:`variables_in`); empty when
        the instance has no MPS quota.
    :param current_environment: the container's ``/etc/environment`` as
        it is ('' when absent).
    """
    out = {ENVIRONMENT_FILE: with_block(current_environment, variables)}
    for path in DROPINS:
        out[path] = dropin(variables) if variables else None
    return out


def apply(client, name, variables, instance=None, clear=False):
    """Write the MPS client environment into stopped container ``name``.

    :param client: the :class:`nova_lxd_accel.client.LXDClient`.
    :param variables: ``{name: value}``, see :func:`variables_in`.
    :param clear: without variables, remove what an earlier quota left
        (a resize away from one); without either, nothing is touched.
    """
    if not variables and not clear:
        return
    current = client.pull_file(
        name, ENVIRONMENT_FILE, ENVIRONMENT_LIMIT,
        'the MPS limits cannot be added to it; use an image whose '
        '/etc/environment is a few lines')
    current = (current or b'').decode('utf-8', 'replace')
    for path, text in files(variables, current).items():
        if text is None:
            if client.delete_file(name, path):
                LOG.info('Removed %(path)s from %(name)s: no MPS quota',
                         {'path': path, 'name': name}, instance=instance)
            continue
        if path == ENVIRONMENT_FILE and text == current:
            continue
        _make_parents(client, name, path)
        client.push_file(name, path, text.encode('utf-8'), mode=0o644)
    if variables:
        LOG.info('MPS client environment %(vars)s written for logins, '
                 'cron and systemd units of %(name)s',
                 {'vars': ' '.join(_assignments(variables)), 'name': name},
                 instance=instance)


def reapply(client, name, config, old_config, instance):
    """:func:`apply` after a resize or cold migration, before the start.

    :param config: the container's new config (the new binding's).
    :param old_config: its config before (the copied or moved original).

    The files are removed when the instance had a quota before and has
    none now: the original's config had the MPS variables, or nova's old
    flavor of the instance set limits (a container moved from another
    host has its files but not its binding's config).
    """
    had_quota = bool(variables_in(old_config)) or flavor_has_quota(
        _old_flavor(instance))
    apply(client, name, variables_in(config), instance, clear=had_quota)


def _old_flavor(instance):
    # set by nova for a resize or migration; never lazy-loaded here
    if hasattr(instance, 'obj_attr_is_set') and \
            not instance.obj_attr_is_set('old_flavor'):
        return None
    return getattr(instance, 'old_flavor', None)


def _make_parents(client, name, path):
    current = ''
    for part in path.strip('/').split('/')[:-1]:
        current += '/' + part
        client.make_directory(name, current)
