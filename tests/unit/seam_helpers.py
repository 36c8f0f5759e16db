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

"""The seam's contract: one scenario, recorded from real daemons, replayed.

:data:`STEPS` is a scenario of calls of
:class:`nova_lxd_accel.client.LXDClient`'s public methods (and the error,
timeout and cancel paths they share). :func:`record` runs it against a real
daemon and keeps every HTTP exchange of each step, as the daemon answered,
in ``tests/unit/samples/recorded-<server>-<version>/<step>.json``;
:class:`Replay` serves those answers again through ``requests-mock``, so
``tests/unit/test_client_contract.py`` runs the same steps on LXD's and
Incus's own answers without a daemon. Record again (as root, with the
daemons of ``tools/lxd-up.sh`` / ``tools/incus-up.sh`` running)::

    python -m tests.unit.seam_helpers --socket /var/lib/lxd/unix.socket
    python -m tests.unit.seam_helpers --socket /var/lib/incus/unix.socket

Nothing of the answers is edited, except that the all-projects listing
keeps only the recording project's instances (the daemon is shared).
"""

import argparse
import base64
import json
import os
import socket
import sys
import tempfile
from urllib import parse

from oslo_config import cfg

from nova_lxd_accel import client as lxd_client
from nova_lxd_accel import conf as lxd_conf

SAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       'samples')
#: The recording project: made and removed by :func:`record`.
PROJECT = 'seam-contract'
#: [lxd] timeout of both the recording and the replay (it is in the URLs
#: of operation waits).
TIMEOUT = 30
CONTAINER = 'contract-c1'
ALIAS = 'contract-tiny'
#: Containers' config and devices of the scenario.
CONFIG = {'limits.cpu': '1', 'limits.memory': '128MiB',
          'user.nova_lxd_accel.host': 'contract'}
DEVICES = {'root': {'type': 'disk', 'path': '/', 'pool': 'default'}}


def make_conf(endpoint):
    """Options of the recording and the replay.

    The overrides live in the option groups, which every ConfigOpts of
    the process shares: tests undo them (oslo_config.fixture.Config).
    """
    conf = cfg.ConfigOpts()
    lxd_conf.register_opts(conf)
    conf([])
    conf.set_override('endpoint', endpoint, group='lxd')
    conf.set_override('project', PROJECT, group='lxd')
    conf.set_override('timeout', TIMEOUT, group='lxd')
    return conf


# -- the scenario ------------------------------------------------------------
#
# Each step is ``step(client, ctx)``; ``ctx`` carries what earlier steps
# learnt (an image fingerprint). A step returns what the contract test
# checks, or raises what it checks.

def _image_bytes():
    path = os.environ.get('NOVA_LXD_ACCEL_TEST_IMAGE') or os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__)))), '.ci', 'state', 'tiny.tar.gz')
    with open(path, 'rb') as handle:
        return handle.read()


def step_server_info(client, ctx):
    return {'server': client.server_info(), 'daemon': client.daemon_info()}


def step_host_reads(client, ctx):
    return {'resources': client.resources(),
            'pool': client.storage_pool('default'),
            'pool_resources': client.storage_pool_resources('default'),
            'project': client.project(PROJECT),
            'profile': client.profile('default'),
            'profile_names': client.profile_names()}


def step_import_image(client, ctx):
    data = ctx.get('image') or b''
    fingerprint = client.import_image('contract image', data, {
        'Content-Type': 'application/octet-stream'})
    client.set_alias(ALIAS, fingerprint, 'the contract test image')
    return {'fingerprint': fingerprint, 'alias': client.get_alias(ALIAS),
            'aliases': client.list_aliases(),
            'info': client.image_info(fingerprint),
            'exists': client.image_exists(fingerprint),
            'missing_exists': client.image_exists('0' * 64),
            'missing_alias': client.get_alias('no-such-alias')}


def step_create(client, ctx):
    client.create_container(CONTAINER, dict(CONFIG), dict(DEVICES),
                            ['default'], {'type': 'image', 'alias': ALIAS})
    return {'record': client.get_container(CONTAINER),
            'state': client.get_state(CONTAINER),
            'list': client.list_containers(),
            'all': client.list_all_instances()}


def step_create_refused(client, ctx):
    # a config key LXD does not know: the daemon's own message is kept
    client.create_container('contract-bad', dict(CONFIG, **{
        'limits.cpu': 'lots'}), dict(DEVICES), ['default'],
        {'type': 'image', 'alias': ALIAS})


def step_read_missing(client, ctx):
    return client.get_container('contract-none')


def step_state_missing(client, ctx):
    client.get_state('contract-none')


def step_modify(client, ctx):
    def change(config, devices):
        config['user.contract'] = 'one'
    return client.modify_container(CONTAINER, change)


def step_modify_raced(client, ctx):
    # another writer changes the container between our read and our write:
    # the daemon answers 412 to the stale ETag and the change is applied
    # again to what is there now
    seen = []

    def change(config, devices):
        seen.append(dict(config))
        if len(seen) == 1:
            client.update_container(CONTAINER, config=dict(
                config, **{'user.other': 'writer'}))
        config['user.contract'] = 'two'
    record = client.modify_container(CONTAINER, change)
    return {'record': record, 'seen': seen}


def step_update_and_put(client, ctx):
    record = client.get_container(CONTAINER)
    client.update_container(CONTAINER, config=dict(
        record['config'], **{'user.patched': 'yes'}))
    record = client.get_container(CONTAINER)
    record['config']['user.put'] = 'yes'
    client.put_container(CONTAINER, record)
    return client.get_container(CONTAINER)


def step_start_and_files(client, ctx):
    client.change_state(CONTAINER, 'start')
    client.push_file(CONTAINER, '/root/contract.txt', b'contract\n',
                     mode=0o600)
    client.make_directory(CONTAINER, '/root/contract.d')
    # again: it exists, which is no error
    client.make_directory(CONTAINER, '/root/contract.d')
    pulled = client.pull_file(CONTAINER, '/root/contract.txt')
    # no such file: None, and False from a delete
    absent = client.pull_file(CONTAINER, '/root/no-such-file')
    deleted = client.delete_file(CONTAINER, '/root/contract.txt')
    deleted_again = client.delete_file(CONTAINER, '/root/contract.txt')
    return {'state': client.get_state(CONTAINER),
            'console': client.console_log(CONTAINER),
            'pulled': pulled, 'absent': absent,
            'deleted': (deleted, deleted_again)}


def step_start_running(client, ctx):
    client.change_state(CONTAINER, 'start')


def step_freeze(client, ctx):
    client.change_state(CONTAINER, 'freeze')
    frozen = client.get_container(CONTAINER)['status']
    client.change_state(CONTAINER, 'unfreeze')
    return {'frozen': frozen,
            'after': client.get_container(CONTAINER)['status']}


def step_delete_running(client, ctx):
    client.delete_container(CONTAINER)


def step_operation_timeout(client, ctx):
    # an exec that waits for its websockets never ends by itself: the
    # wait times out, and the seam cancels it where the daemon allows it
    client._request('post', client.api.instances[CONTAINER].exec, 'exec',
                    'instance %s' % CONTAINER, timeout=1,
                    json={'command': ['sleep', '600'],
                          'wait-for-websocket': True, 'interactive': False,
                          'environment': {}})


def step_operations(client, ctx):
    operations = client.instance_operations(CONTAINER)
    client.settle_operations(CONTAINER, timeout=1)
    return operations


def step_snapshot(client, ctx):
    client.create_snapshot(CONTAINER, 'snap0')
    record = client.get_container(CONTAINER)
    client.delete_snapshot(CONTAINER, 'snap0')
    return record


def step_stop_copy_rename(client, ctx):
    before = client.stop_now(CONTAINER)
    client.copy_container(CONTAINER, 'contract-copy', ['default'])
    client.rename_container('contract-copy', 'contract-c2')
    return {'before': before,
            'stopped': client.get_container(CONTAINER)['status'],
            'renamed': client.get_container('contract-c2')}


def step_migration_timeout(client, ctx):
    # a migration offer waits for a target that never comes; the daemon
    # lets it be cancelled, so the seam cancels it once the wait times out
    client._request('post', client.api.instances['contract-c2'], 'migrate',
                    'instance contract-c2', timeout=1,
                    json={'migration': True, 'live': False,
                          'instance_only': True})


def step_offer_and_cancel(client, ctx):
    operation_id, secrets = client.offer_migration('contract-c2')
    client.cancel_operation(operation_id)
    try:
        client.wait_operation(operation_id, 'migrate', 'contract-c2',
                              timeout=5)
    except Exception as exc:
        return {'operation': operation_id, 'secrets': sorted(secrets),
                'wait': exc}
    return {'operation': operation_id, 'secrets': sorted(secrets),
            'wait': None}


def step_publish(client, ctx):
    fingerprint = client.publish('instance', 'contract-c2',
                                 {'description': 'contract'})
    exists = client.image_exists(fingerprint)
    client.delete_image(fingerprint)
    return {'fingerprint': fingerprint, 'exists': exists,
            'gone': not client.image_exists(fingerprint)}


def step_remove(client, ctx):
    return {'c1': client.remove_container(CONTAINER),
            'c2': client.remove_container('contract-c2'),
            'again': client.remove_container(CONTAINER),
            'left': [r['name'] for r in client.list_containers()]}


def step_delete_image(client, ctx):
    fingerprint = client.get_alias(ALIAS)['target']
    client.delete_alias(ALIAS)
    client.delete_image(fingerprint)
    return {'alias': client.get_alias(ALIAS),
            'exists': client.image_exists(fingerprint)}


#: (name, step): the order they run in.
STEPS = (
    ('server_info', step_server_info),
    ('host_reads', step_host_reads),
    ('import_image', step_import_image),
    ('create', step_create),
    ('create_refused', step_create_refused),
    ('read_missing', step_read_missing),
    ('state_missing', step_state_missing),
    ('modify', step_modify),
    ('modify_raced', step_modify_raced),
    ('update_and_put', step_update_and_put),
    ('start_and_files', step_start_and_files),
    ('start_running', step_start_running),
    ('freeze', step_freeze),
    ('delete_running', step_delete_running),
    ('operation_timeout', step_operation_timeout),
    ('operations', step_operations),
    ('snapshot', step_snapshot),
    ('stop_copy_rename', step_stop_copy_rename),
    ('migration_timeout', step_migration_timeout),
    ('offer_and_cancel', step_offer_and_cancel),
    ('publish', step_publish),
    ('remove', step_remove),
    ('delete_image', step_delete_image),
)


# -- recording ---------------------------------------------------------------

def _body(content):
    try:
        return {'text': content.decode('utf-8')}
    except UnicodeDecodeError:
        return {'base64': base64.b64encode(content).decode('ascii')}


def _exchange(response):
    request = response.request
    url = parse.urlsplit(request.url)
    content = b'' if response.raw is None and not response.content \
        else response.content
    headers = {k: v for k, v in response.headers.items()
               if k.lower() in ('content-type', 'etag', 'location')}
    return dict({'method': request.method, 'path': url.path,
                 'query': url.query, 'status': response.status_code,
                 'headers': headers}, **_body(content))


def _trim_all_projects(exchange):
    """Keep only the recording project's instances in a global listing."""
    if 'all-projects=true' not in exchange['query'] or \
            'text' not in exchange:
        return exchange
    body = json.loads(exchange['text'])
    body['metadata'] = [r for r in body.get('metadata') or []
                        if r.get('project') == PROJECT]
    return dict(exchange, text=json.dumps(body))


def record(socket_path, out_dir=None):
    """Run :data:`STEPS` on a real daemon; write what it answered."""
    import pylxd

    admin = pylxd.Client(endpoint=socket_path)
    info = admin.api.get().json()['metadata']['environment']
    name = '%s-%s' % (info['server'], info['server_version'])
    out_dir = out_dir or os.path.join(SAMPLES, 'recorded-' + name)
    os.makedirs(out_dir, exist_ok=True)
    from pylxd import exceptions as lxd_exceptions
    try:
        admin.api.projects[PROJECT].get()
        raise RuntimeError('project %s exists: a recording is running, or '
                           'an earlier one left it; remove it first'
                           % PROJECT)
    except lxd_exceptions.NotFound:
        pass
    admin.api.projects.post(json={'name': PROJECT, 'config': {
        'features.images': 'true', 'features.profiles': 'false',
        'features.storage.volumes': 'false'}})
    client = lxd_client.LXDClient(make_conf(socket_path))
    try:
        client.api  # connect before recording
        ctx = {'image': _image_bytes()}
        exchanges = []
        client.api.session.hooks['response'].append(
            lambda response, *a, **k: exchanges.append(_exchange(response)))
        for step_name, step in STEPS:
            del exchanges[:]
            outcome = 'returned'
            try:
                step(client, ctx)
            except Exception as exc:
                outcome = 'raised %s' % type(exc).__name__
            with open(os.path.join(out_dir, step_name + '.json'), 'w') as f:
                json.dump({'step': step_name, 'outcome': outcome,
                           'exchanges': [_trim_all_projects(e)
                                         for e in exchanges]},
                          f, indent=1, sort_keys=True)
                f.write('\n')
            sys.stdout.write('%s: %s (%d exchanges)\n' % (
                step_name, outcome, len(exchanges)))
    finally:
        del client.api.session.hooks['response'][:]
        for instance in ('contract-c1', 'contract-c2', 'contract-copy',
                         'contract-bad'):
            client.remove_container(instance)
        for image in client.api.images.get().json()['metadata']:
            client.delete_image(image.rsplit('/', 1)[-1])
        admin.api.projects[PROJECT].delete()
    return out_dir


# -- replay ------------------------------------------------------------------

def recordings():
    """Names of the recorded daemons (``recorded-*`` sample folders)."""
    return sorted(d[len('recorded-'):] for d in os.listdir(SAMPLES)
                  if d.startswith('recorded-'))


def load(daemon, step_name):
    path = os.path.join(SAMPLES, 'recorded-' + daemon, step_name + '.json')
    with open(path) as handle:
        return json.load(handle)


def _key(method, path, query):
    return (method.upper(), path.rstrip('/'),
            tuple(sorted(parse.parse_qsl(query, keep_blank_values=True))))


class Replay(object):
    """A ``requests-mock`` matcher serving one step's recorded answers.

    The answers to one request (method, path and query) come back in the
    order the daemon gave them; the last one again once they run out.
    Requests the daemon was never asked are answered with its 404.
    """

    def __init__(self, exchanges):
        self._answers = {}
        for exchange in exchanges:
            key = _key(exchange['method'], exchange['path'],
                       exchange['query'])
            self._answers.setdefault(key, []).append(exchange)
        self.served = []
        self.unmatched = []

    def __call__(self, request):
        import requests_mock

        url = parse.urlsplit(request.url)
        key = _key(request.method, parse.unquote(url.path), url.query)
        answers = self._answers.get(key)
        if not answers:
            self.unmatched.append(key)
            return requests_mock.create_response(
                request, status_code=404, json={
                    'type': 'error', 'error': 'not recorded',
                    'error_code': 404})
        exchange = answers.pop(0) if len(answers) > 1 else answers[0]
        self.served.append(key)
        if 'base64' in exchange:
            content = base64.b64decode(exchange['base64'])
        else:
            content = exchange['text'].encode('utf-8')
        return requests_mock.create_response(
            request, status_code=exchange['status'],
            headers=exchange['headers'], content=content)


class SocketFile(object):
    """A bound (not listening) unix socket file the seam accepts."""

    def __init__(self):
        self.directory = tempfile.mkdtemp(prefix='seam-', dir='/tmp')
        self.path = os.path.join(self.directory, 'unix.socket')
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(self.path)

    def close(self):
        self._sock.close()
        os.unlink(self.path)
        os.rmdir(self.directory)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--socket', required=True)
    parser.add_argument('--out')
    args = parser.parse_args(argv)
    sys.stdout.write('recorded into %s\n' % record(args.socket, args.out))


if __name__ == '__main__':
    main()
