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

"""What the sandbox installs: Debian packages, then one venv.

Usage: install.py debian BACKEND      the Debian packages that are missing
                                      (apt-get install, waiting for
                                      another apt's lock; SANDBOX_APT=0:
                                      fail instead)
       install.py packages BACKEND    print every Debian package "up"
                                      needs, present or not (so that
                                      tools/run-tests.sh installs them in
                                      its own apt round)
       install.py venv                the venv (pip -c constraints.txt):
                                      OpenStack once per package list and
                                      constraints, this project again when
                                      its tree changed; exit 3 when it did
                                      (nova-compute and nova-api restart)

Environment: SANDBOX_DIR, SANDBOX_PYTHON (the venv's interpreter, default
python3), SANDBOX_CONSTRAINTS (default <repo>/constraints.txt),
SANDBOX_UV (uv's path: uv makes and fills the venvs instead of venv and
pip, from its cache), SANDBOX_APT, APT_LOCK_WAIT (seconds, default 300).
Any Python 3, standard library only: it runs before the venv exists.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import time

from . import layout as layout_module

#: what the sandbox's venv holds (pip -c constraints.txt pins versions)
PY_PACKAGES = (
    'nova==34.0.0',
    'openstack-placement==16.0.0',
    'keystone==30.0.0',
    'glance==33.0.0',
    'neutron==29.0.0',
    'python-openstackclient',
    'osc-placement',
    'PyMySQL',
    'pylxd',
    'cheroot',
)

#: (command or file that shows a Debian package is there, the package)
DEBIAN_PACKAGES = (
    ('busybox', 'busybox-static'),
    ('mariadbd', 'mariadb-server'),
    ('/usr/lib/rabbitmq/bin/rabbitmq-server', 'rabbitmq-server'),
    # What Neutron's agents run: the L3 agent's NAT and the DHCP agent's
    # rules (iptables), DHCP (dnsmasq), the metadata proxy (haproxy),
    # conntrack cleanup and gratuitous ARP for floating IPs.
    ('iptables-save', 'iptables'),
    ('dnsmasq', 'dnsmasq-base'),
    ('haproxy', 'haproxy'),
    ('conntrack', 'conntrack'),
    ('arping', 'iputils-arping'),
    # the README's first commands ping a floating IP from sandbox-outside
    # (a fresh Debian 12 has no ping)
    ('ping', 'iputils-ping'),
)

#: the project's tree that the venv's build of it comes from
PROJECT_TREE = ('nova_lxd_accel', 'nova', 'setup.cfg', 'setup.py',
                'requirements.txt')

EXIT_PROJECT_CHANGED = 3
#: this project's distribution name
PROJECT = 'nova-lxd-accel'


def _present(probe, which=shutil.which, exists=os.path.exists):
    return exists(probe) if probe.startswith('/') else bool(which(probe))


def debian_packages(backend):
    """The Debian packages the sandbox needs on BACKEND, in order.

    python3-venv is left out: "up" adds it only where the Python has no
    venv module.
    """
    wanted = ['lxd', 'lxd-client'] if backend == 'lxd' else []
    return wanted + [package for _probe, package in DEBIAN_PACKAGES]


def missing_debian_packages(backend, python, which=shutil.which,
                            exists=os.path.exists, has_venv=None):
    """The Debian packages the sandbox needs that are not installed."""
    missing = []
    # Incus comes with tools/incus-up.sh (bookworm-backports on Debian 12).
    if backend == 'lxd' and not which('lxd'):
        missing += ['lxd', 'lxd-client']
    missing += [package for probe, package in DEBIAN_PACKAGES
                if not _present(probe, which, exists)]
    if has_venv is None:
        has_venv = subprocess.run(
            [python, '-c', 'import venv, ensurepip'],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode \
            == 0
    if not has_venv:
        missing.append('python3-venv')
    return missing


def apt_get(args, lock_wait, run=subprocess.run, sleep=time.sleep):
    """apt-get that waits for another apt or dpkg to release its lock.

    DPkg::Lock::Timeout covers dpkg's lock; "apt-get update" does not wait
    on the lists lock, so that one is retried here.

    :returns: apt-get's exit status.
    """
    waited = 0
    while True:
        result = run(['apt-get', '-o', 'DPkg::Lock::Timeout=%d' % lock_wait]
                     + list(args), stdout=subprocess.PIPE,
                     stderr=subprocess.STDOUT, text=True)
        sys.stdout.write(result.stdout)
        if result.returncode == 0 or 'Could not get lock' not in \
                result.stdout or waited >= lock_wait:
            break
        print('apt-get: another apt holds its lock; waiting (%ds of %ds)'
              % (waited, lock_wait))
        sleep(5)
        waited += 5
    if result.returncode and waited >= lock_wait:
        print('apt-get %s: the apt lock stayed busy for %ds; wait for the '
              'other apt-get/dpkg to finish (ps -C apt-get,dpkg) and re-run '
              'up' % (' '.join(args), lock_wait))
    return result.returncode


def install_debian(backend, environ):
    missing = missing_debian_packages(
        backend, environ.get('SANDBOX_PYTHON') or 'python3')
    if not missing:
        print('Debian packages present')
        return 0
    if environ.get('SANDBOX_APT', '1') != '1':
        print('missing Debian packages: %s (SANDBOX_APT=0)'
              % ' '.join(missing))
        return 1
    lock_wait = int(environ.get('APT_LOCK_WAIT') or 300)
    # Keep the packages' own services from starting (and binding to public
    # addresses): the sandbox starts its own instances on loopback.
    policy = '/usr/sbin/policy-rc.d'
    added = not os.path.exists(policy)
    if added:
        with open(policy, 'w') as handle:
            handle.write('#!/bin/sh\nexit 101\n')
        os.chmod(policy, 0o755)
    try:
        rc = apt_get(['update', '-q'], lock_wait)
        if rc:
            return rc
        print('installing: %s' % ' '.join(missing))
        os.environ['DEBIAN_FRONTEND'] = 'noninteractive'
        return apt_get(['install', '-y', '-q', '--no-install-recommends']
                       + missing, lock_wait)
    finally:
        if added:
            os.remove(policy)


def make_venv(path, environ, run=subprocess.check_call):
    """A venv at PATH, with pip in it (Horizon's and tempest's use it)."""
    python = environ.get('SANDBOX_PYTHON') or 'python3'
    uv = environ.get('SANDBOX_UV')
    if uv:
        run([uv, 'venv', '-q', '--seed', '--python', python, path])
    else:
        run([python, '-m', 'venv', path])


def installer(path, environ, *packages):
    """The command that installs into the venv at PATH.

    uv's pip (SANDBOX_UV) when given, else the venv's own. uv keeps a
    local directory's build by its setup files' times, so PACKAGES, built
    from a tree that changes, are always rebuilt.
    """
    uv = environ.get('SANDBOX_UV')
    if uv:
        rebuild = []
        for package in packages:
            rebuild += ['--reinstall-package', package]
        # compiled now, as pip does: else every service compiles the same
        # modules at its first start, several at once
        return [uv, 'pip', 'install', '-q', '--compile-bytecode',
                '--python', os.path.join(path, 'bin', 'python')] + rebuild
    return [os.path.join(path, 'bin', 'pip'), 'install', '-q']


def deps_fingerprint(constraints):
    """What the venv's OpenStack must match: package list, constraints."""
    return layout_module.digest_files(
        [constraints], ''.join(name + '\n' for name in PY_PACKAGES).encode())


def project_fingerprint(repo=layout_module.REPO_DIR):
    """The project's tree (sources, setup files), as pip would build it."""
    files = []
    for entry in PROJECT_TREE:
        path = os.path.join(repo, entry)
        if os.path.isfile(path):
            files.append(entry)
        for root, _dirs, names in os.walk(path):
            files += [os.path.relpath(os.path.join(root, name), repo)
                      for name in names if not name.endswith('.pyc')]
    digest = hashlib.sha256()
    for relative in sorted(files):
        digest.update(relative.encode() + b'\0')
        with open(os.path.join(repo, relative), 'rb') as handle:
            digest.update(hashlib.sha256(handle.read()).digest())
    return digest.hexdigest()


def _read(path):
    return (layout_module.read_text(path) or '').strip()


def _write(path, text):
    with open(path, 'w') as handle:
        handle.write(text + '\n')


def install_venv(layout, environ, run=subprocess.check_call):
    """Create or update the venv; True when this project's build changed."""
    constraints = (environ.get('SANDBOX_CONSTRAINTS') or
                   os.path.join(layout_module.REPO_DIR, 'constraints.txt'))
    constraint = ['-c', constraints] if os.path.isfile(constraints) else []
    if not constraint:
        print('WARNING: %s missing: versions float' % constraints)
    pip = installer(layout.venv, environ)
    if not os.access(os.path.join(layout.venv, 'bin', 'python'), os.X_OK):
        make_venv(layout.venv, environ, run)
        # The project is built without isolation: setuptools needs wheel.
        run(pip + constraint + ['--upgrade', 'pip', 'setuptools', 'wheel'])
    deps = deps_fingerprint(constraints)
    deps_marker = os.path.join(layout.venv, '.sandbox-deps')
    project_marker = os.path.join(layout.venv, '.sandbox-project')
    if _read(deps_marker) != deps:
        run(pip + constraint + list(PY_PACKAGES))
        _write(deps_marker, deps)
        if os.path.exists(project_marker):
            os.remove(project_marker)
    else:
        print('OpenStack packages already installed')
    project = project_fingerprint()
    if _read(project_marker) == project:
        print('nova-lxd-accel already installed')
        return False
    env = dict(os.environ)
    # pbr needs a version when the checkout has no tag (or no commit).
    if subprocess.run(['git', '-C', layout_module.REPO_DIR, 'describe',
                       '--tags'], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode:
        env['PBR_VERSION'] = '0.0.1.dev0'
    # pip always rebuilds a directory; its dependencies, already there,
    # stay as they are. Not editable: the tree may move on.
    run(installer(layout.venv, environ, PROJECT) + constraint +
        ['--no-build-isolation', layout_module.REPO_DIR], env=env)
    _write(project_marker, project)
    return True


def venv_status(layout, environ):
    """install_venv's result as a status: EXIT_PROJECT_CHANGED, 0 or 1."""
    try:
        changed = install_venv(layout, environ)
    except subprocess.CalledProcessError as error:
        print('%s failed (exit %d)' % (' '.join(error.cmd),
                                       error.returncode))
        return 1
    return EXIT_PROJECT_CHANGED if changed else 0


def main(argv):
    layout = layout_module.Layout.from_environ()
    if len(argv) == 3 and argv[1] == 'debian':
        return install_debian(argv[2], os.environ)
    if len(argv) == 3 and argv[1] == 'packages':
        print(' '.join(debian_packages(argv[2])))
        return 0
    if len(argv) == 2 and argv[1] == 'venv':
        return venv_status(layout, os.environ)
    sys.stderr.write(__doc__.split('\n\n')[1] + '\n')
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv))
