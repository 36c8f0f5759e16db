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

"""The sandbox's databases and Keystone's keys.

Usage: databases.py grants     the user "openstack" and every database, in
                               the running MariaDB (as root, on its socket)
       databases.py sync       every service's schema, all at once; each
                               once per installed packages (a marker holds
                               the venv's fingerprint); Glance's metadata
                               definitions; Nova's cells
       databases.py keystone   Keystone's Fernet and credential keys, and
                               its bootstrap (once per password and URL)

Environment: SANDBOX_DIR, SANDBOX_PORT_BASE (layout.py). Any Python 3,
standard library only (the commands it runs are the venv's).
"""

import base64
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import threading

from . import catalogue
from . import credentials
from . import layout as layout_module

DATABASES = ('keystone', 'placement', 'glance', 'neutron', 'nova_api',
             'nova', 'nova_cell0')

# The cell mappings are templates that Nova fills from each service's own
# [database]connection and transport_url (nova's CellMapping format_db_url,
# format_mq_url), so they follow the configuration when the ports move.
CELL0_DB_TEMPLATE = ('{scheme}://{username}:{password}@{hostname}:{port}/'
                     'nova_cell0?{query}')
CELL_DB_TEMPLATE = ('{scheme}://{username}:{password}@{hostname}:{port}/'
                    '{path}?{query}')
CELL_MQ_TEMPLATE = '{scheme}://{username}:{password}@{hostname}:{port}/{path}'
CELL0_UUID = '00000000-0000-0000-0000-000000000000'


def grants_sql(password):
    """The SQL that makes the user "openstack" and every database."""
    if not re.match(r'^[0-9A-Za-z]+$', password):
        raise ValueError('the database password must be alphanumeric (it '
                         'is quoted into SQL)')
    user = "'openstack'@'127.0.0.1'"
    statements = [
        "CREATE USER IF NOT EXISTS %s IDENTIFIED BY '%s'" % (user, password),
        "ALTER USER %s IDENTIFIED BY '%s'" % (user, password),
        'GRANT ALL PRIVILEGES ON *.* TO %s' % user,
    ] + ['CREATE DATABASE IF NOT EXISTS %s' % name for name in DATABASES]
    return ''.join(statement + ';' for statement in statements)


def grants(layout):
    sql = grants_sql(credentials.load(layout)['DB_PASSWORD'])
    # The SQL (with the password) on stdin, not in argv.
    subprocess.run(['mariadb', '--no-defaults', '--user=root',
                    '--socket=%s' % layout.path('run', 'mysqld.sock')],
                   input=sql, text=True, check=True)
    print('user openstack and databases %s' % ', '.join(DATABASES))


class Once(object):
    """A step that runs again only when the installed packages changed."""

    def __init__(self, layout):
        self.layout = layout

    def current(self):
        return layout_module.read_text(
            os.path.join(self.layout.venv, '.sandbox-deps'))

    def done(self, name):
        marker = layout_module.read_text(
            self.layout.path('data', '.synced-' + name))
        return marker is not None and marker == self.current()

    def mark(self, name):
        with open(self.layout.path('data', '.synced-' + name), 'w') as f:
            f.write(self.current() or '')

    def run(self, name, step, out):
        if self.done(name):
            out.write('%s schema current\n' % name)
            return
        step()
        self.mark(name)


def _run(argv, out):
    out.flush()
    subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=True)


def _manage(layout, command, conf, *args):
    return [os.path.join(layout.venv, 'bin', command), '--config-file',
            layout.path('etc', conf)] + list(args)


def cell1_uuid(list_cells_output):
    """cell1's uuid in the table of ``nova-manage cell_v2 list_cells``."""
    for line in list_cells_output.splitlines():
        cells = [cell.strip() for cell in line.split('|')]
        if len(cells) > 2 and cells[1] == 'cell1':
            return cells[2]
    return None


def nova_cells(layout, out):
    manage = _manage(layout, 'nova-manage', 'nova/nova.conf', 'cell_v2')
    _run(manage + ['map_cell0', '--database_connection', CELL0_DB_TEMPLATE],
         out)
    listed = subprocess.run(manage + ['list_cells'], capture_output=True,
                            text=True, check=True).stdout
    cell1 = cell1_uuid(listed)
    if cell1 is None:
        _run(manage + ['create_cell', '--name', 'cell1',
                       '--database_connection', CELL_DB_TEMPLATE,
                       '--transport-url', CELL_MQ_TEMPLATE], out)
        return
    # A sandbox made before the templates: its mappings hold the old ports.
    _run(manage + ['update_cell', '--cell_uuid', CELL0_UUID,
                   '--database_connection', CELL0_DB_TEMPLATE], out)
    _run(manage + ['update_cell', '--cell_uuid', cell1,
                   '--database_connection', CELL_DB_TEMPLATE,
                   '--transport-url', CELL_MQ_TEMPLATE], out)


def metadefs_fingerprint(directory):
    """The definitions and the way they are loaded (merge, overwrite)."""
    return layout_module.digest_files(
        sorted(glob.glob(os.path.join(directory, '*.json'))),
        b'merge-overwrite\n')


def glance_metadefs(layout, out):
    """Glance's metadata definitions, loaded again when they change.

    What Horizon offers for flavors and images: Glance's own and this
    project's ``lxd:`` flavor keys (etc/glance/metadefs/compute-lxd.json).
    """
    directory = layout.path('data', 'glance', 'metadefs')
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    for source in (os.path.join(layout.venv, 'etc', 'glance', 'metadefs'),
                   os.path.join(layout_module.REPO_DIR, 'etc', 'glance',
                                'metadefs')):
        for path in glob.glob(os.path.join(source, '*.json')):
            shutil.copy(path, directory)
    current = metadefs_fingerprint(directory)
    marker = layout.path('data', '.metadefs')
    if (layout_module.read_text(marker) or '').strip() == current:
        out.write('metadefs already loaded\n')
        return
    # Positional: path merge prefer_new overwrite (any non-empty string is
    # true): merge, and overwrite what an earlier run loaded. glance-manage
    # exits 0 even when it refuses its options: read its output.
    result = subprocess.run(
        _manage(layout, 'glance-manage', 'glance/glance-api.conf',
                'db_load_metadefs', directory, 'True', '', 'True'),
        capture_output=True, text=True)
    out.write(result.stdout + result.stderr)
    if result.returncode or ' ERROR ' in result.stdout + result.stderr:
        raise RuntimeError('glance-manage db_load_metadefs %s failed (see '
                           'above)' % directory)
    with open(marker, 'w') as handle:
        handle.write(current + '\n')


def sync_jobs(layout):
    """``{log name: function(out)}``: the schema syncs, independent."""
    once = Once(layout)

    def keystone(out):
        once.run('keystone', lambda: _run(_manage(
            layout, 'keystone-manage', 'keystone/keystone.conf',
            'db_sync'), out), out)

    def placement(out):
        once.run('placement', lambda: _run(_manage(
            layout, 'placement-manage', 'placement/placement.conf', 'db',
            'sync'), out), out)

    def glance(out):
        once.run('glance', lambda: _run(_manage(
            layout, 'glance-manage', 'glance/glance-api.conf', 'db_sync'),
            out), out)
        glance_metadefs(layout, out)

    def neutron(out):
        once.run('neutron', lambda: _run(_manage(
            layout, 'neutron-db-manage', 'neutron/neutron.conf',
            '--config-file', layout.path('etc', 'neutron', 'plugins', 'ml2',
                                         'ml2_conf.ini'),
            'upgrade', 'heads'), out), out)

    def nova(out):
        manage = _manage(layout, 'nova-manage', 'nova/nova.conf')
        once.run('nova_api', lambda: _run(manage + ['api_db', 'sync'], out),
                 out)
        once.run('nova_cell_templates', lambda: nova_cells(layout, out), out)
        once.run('nova', lambda: _run(manage + ['db', 'sync'], out), out)

    return {'db-keystone': keystone, 'db-placement': placement,
            'db-glance': glance, 'db-neutron': neutron, 'db-nova': nova}


def run_parallel(layout, jobs, out=sys.stdout):
    """Run the jobs at once, each writing to log/NAME.log.

    They wait mostly on MariaDB, not on each other.

    :returns: the names of those that failed.
    """
    failed = []

    def work(name, job):
        with open(os.path.join(layout.logs, name + '.log'), 'w') as log:
            try:
                job(log)
            except Exception as error:
                log.write('FAILED: %s\n' % error)
                failed.append(name)

    threads = [threading.Thread(target=work, args=item)
               for item in jobs.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for name in jobs:
        log = os.path.join(layout.logs, name + '.log')
        if name in failed:
            out.write('%s: FAILED, see %s; its last lines:\n' % (name, log))
            lines = (layout_module.read_text(log) or '').splitlines()[-20:]
            out.write(''.join('    | %s\n' % line for line in lines))
        else:
            out.write('%s: done\n' % name)
    return failed


def fernet_key():
    """A Fernet key as keystone-manage fernet_setup writes it."""
    return base64.urlsafe_b64encode(os.urandom(32)).decode()


def keystone_keys(layout):
    """Keystone's key repositories; existing keys are kept.

    Written here rather than by two more keystone-manage runs (several
    seconds each): key 0 staged, key 1 primary.
    """
    for repository in ('fernet-keys', 'credential-keys'):
        directory = layout.path('etc', 'keystone', repository)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        os.chmod(directory, 0o700)
        for key in ('0', '1'):
            path = os.path.join(directory, key)
            if os.path.isfile(path) and os.path.getsize(path):
                continue
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, 'w') as handle:
                handle.write(fernet_key())


def bootstrap_marker(password, url):
    # as the shell version recorded it (sha256sum's line)
    return '%s  -' % hashlib.sha256(('%s %s' % (password, url))
                                    .encode()).hexdigest()


def keystone_bootstrap(layout, out=sys.stdout):
    keystone_keys(layout)
    password = credentials.load(layout)['ADMIN_PASSWORD']
    url = layout.url('KEYSTONE')
    marker_path = layout.path('data', '.keystone-bootstrap')
    marker = bootstrap_marker(password, url)
    # bootstrap is idempotent but slow: once per password and catalog.
    if (layout_module.read_text(marker_path) or '').strip() == marker:
        out.write('keystone bootstrap already done\n')
        return
    v3 = url + '/v3'
    # The password in the environment keystone-manage reads, not in argv.
    subprocess.run(
        _manage(layout, 'keystone-manage', 'keystone/keystone.conf',
                'bootstrap', '--bootstrap-username', 'admin',
                '--bootstrap-project-name', 'admin',
                '--bootstrap-role-name', 'admin',
                '--bootstrap-service-name', 'keystone',
                '--bootstrap-region-id', catalogue.REGION,
                '--bootstrap-admin-url', v3,
                '--bootstrap-internal-url', v3,
                '--bootstrap-public-url', v3),
        env=dict(os.environ, OS_BOOTSTRAP_PASSWORD=password), check=True)
    with open(marker_path, 'w') as handle:
        handle.write(marker + '\n')


def _status(function, *args):
    """0 once FUNCTION ran, 1 when it (or one of its commands) failed.

    A failed command is named by its first words only (the rest may hold
    a secret).
    """
    try:
        return 1 if function(*args) else 0
    except subprocess.CalledProcessError as error:
        print('%s failed (exit %d)' % (' '.join(str(word) for word in
                                                error.cmd[:3]),
                                       error.returncode))
        return 1


def make_grants(layout):
    """grants: the user "openstack" and every database; a status."""
    return _status(grants, layout)


def sync(layout):
    """sync: every service's schema, all at once; a status."""
    return _status(run_parallel, layout, sync_jobs(layout))


def keystone(layout):
    """keystone: Keystone's keys and its bootstrap; a status."""
    return _status(keystone_bootstrap, layout)


def main(argv):
    layout = layout_module.Layout.from_environ()
    actions = {'grants': make_grants, 'sync': sync, 'keystone': keystone}
    if len(argv) == 2 and argv[1] in actions:
        return actions[argv[1]](layout)
    sys.stderr.write(__doc__.split('\n\n')[1] + '\n')
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv))
