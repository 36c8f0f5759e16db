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

"""The sandbox's secrets, and who may read them.

Passwords live in ``secrets.env`` (``NAME=value`` lines, sourced by
tools/sandbox.sh). They, the configuration under ``etc/`` (database,
RabbitMQ and service passwords, Keystone's keys) and the credentials of
``openrc`` and ``clouds.yaml`` are root's alone: files 0600, directories
0700, the state directory 0700. All services run as root: none needs group
access.

Usage: credentials.py ensure          create secrets.env, add missing names
       credentials.py lock-down       reset the modes
       credentials.py check COMMAND   warn (stderr, exit 1) about each file
                                      or directory others could reach

Environment: SANDBOX_DIR (see layout.py). Any Python 3, standard library
only.
"""

import os
import pwd
import secrets
import stat
import sys

from . import layout as layout_module

#: every secret; names added by later versions are appended to an existing
#: file, so that an old sandbox keeps its passwords
NAMES = ('ADMIN_PASSWORD', 'SERVICE_PASSWORD', 'DB_PASSWORD',
         'RABBIT_PASSWORD', 'METADATA_SECRET', 'DEMO_PASSWORD',
         'HORIZON_SECRET_KEY')


def secrets_path(layout):
    return layout.path('secrets.env')


def load(layout):
    """The secrets as a dict (empty when there is no file yet)."""
    values = {}
    try:
        with open(secrets_path(layout)) as handle:
            for line in handle:
                name, sep, value = line.strip().partition('=')
                if sep and name and not name.startswith('#'):
                    values[name] = value
    except FileNotFoundError:
        pass
    return values


def ensure(layout):
    """Create secrets.env (0600); add a random value for each missing name.

    :returns: the names added.
    """
    path = secrets_path(layout)
    have = load(layout)
    missing = [name for name in NAMES if name not in have]
    # O_CREAT with 0600: the file is never readable by others, not even
    # for a moment.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, 'a') as handle:
        for name in missing:
            # hex: no character the shell that sources the file would
            # interpret
            handle.write('%s=%s\n' % (name, secrets.token_hex(12)))
    return missing


def secret_files(layout):
    """The files that hold secrets, as they exist now, sorted."""
    found = []
    for root, _dirs, files in os.walk(layout.etc):
        found.extend(os.path.join(root, name) for name in files)
    found.extend(path for path in layout.credential_files()
                 if os.path.isfile(path))
    return sorted(found)


def _config_dirs(layout):
    dirs = []
    for root, _dirs, _files in os.walk(layout.etc):
        dirs.append(root)
    return sorted(dirs)


def lock_down(layout):
    """Every secret file 0600, every configuration directory 0700.

    Whatever mode an earlier version or an editor left them with.
    """
    os.chmod(layout.dir, 0o700)
    for path in _config_dirs(layout):
        os.chmod(path, 0o700)
    for path in secret_files(layout):
        os.chmod(path, 0o600)


def _user(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def problems(layout):
    """What other users could reach: one sentence with its remedy each.

    Nothing when the state directory is absent or not ours to read.
    """
    if not os.path.isdir(layout.dir):
        return []
    if not os.access(layout.dir, os.R_OK | os.X_OK):
        return []
    found = []
    state = os.stat(layout.dir)
    owner = state.st_uid
    if state.st_mode & 0o077:
        found.append('%s is mode %o: other users can reach the passwords, '
                     'keys and databases in it; run: chmod 700 %s'
                     % (layout.dir, stat.S_IMODE(state.st_mode), layout.dir))
    for path, expected, what in (
            [(path, 0o700, '') for path in _config_dirs(layout)] +
            [(path, 0o600, ' (configuration or credentials)')
             for path in secret_files(layout)]):
        info = os.lstat(path)
        if info.st_mode & 0o077 or info.st_uid != owner:
            found.append('%s%s is mode %o (owner %s), expected %o; run: '
                         'chmod %o %s'
                         % (path, what, stat.S_IMODE(info.st_mode),
                            _user(info.st_uid), expected, expected, path))
    return found


def ensure_and_say(layout):
    """ensure: the secrets, each name added printed; 0."""
    for name in ensure(layout):
        print('added %s to %s' % (name, secrets_path(layout)))
    return 0


def main(argv):
    layout = layout_module.Layout.from_environ()
    if len(argv) == 2 and argv[1] == 'ensure':
        return ensure_and_say(layout)
    if len(argv) == 2 and argv[1] == 'lock-down':
        lock_down(layout)
        return 0
    if len(argv) == 3 and argv[1] == 'check':
        found = problems(layout)
        for line in found:
            sys.stderr.write('sandbox: WARNING: %s\n' % line)
        if found:
            sys.stderr.write('sandbox: WARNING: "%s up" resets these modes\n'
                             % argv[2])
            return 1
        return 0
    sys.stderr.write(__doc__.split('\n\n')[2] + '\n')
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv))
